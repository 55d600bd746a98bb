#!/usr/bin/env python3
"""Writes the torch-made `.pt` fixtures the torch reader's tests read.

Run once on a machine with torch (`python3 make.py OUT_DIR`); the files
it writes are committed beside it. Every count is v[b, l, e] = 100*b + 10*l + e
(b: recorder step, l: layer, e: expert), so a test can state each value by
hand.
"""
import sys
import torch

out = sys.argv[1] if len(sys.argv) > 1 else "."
steps, layers, experts = 2, 3, 4


def counts(dtype, steps=steps, layers=layers, experts=experts):
    b = torch.arange(steps).view(-1, 1, 1) * 100
    l = torch.arange(layers).view(1, -1, 1) * 10
    e = torch.arange(experts).view(1, 1, -1)
    return (b + l + e).to(dtype)


def save(obj, name, **kw):
    torch.save(obj, f"{out}/{name}", **kw)


# SGLang's expert-distribution recorder, stat mode: a dict of the rank,
# the counts [steps, layers, experts] and a float.
save({"rank": 0, "logical_count": counts(torch.int64),
      "average_utilization_rate_over_window": 0.75}, "recorder_int64.pt")
# Bare tensors of every dtype the reader takes.
for name, dtype in [("int32", torch.int32), ("float32", torch.float32),
                    ("float64", torch.float64)]:
    save(counts(dtype), f"bare_{name}.pt")
# A [layers, experts] dict, SGLang's --init-expert-location shape without steps.
save({"logical_count": counts(torch.int64, steps=1)[0]}, "init_2d.pt")
# A view: layers 1.. and every other expert of a [2, 3, 8] tensor, so the
# file holds the whole storage and the pickle an offset and strides.
wide = counts(torch.int64, experts=8)
save({"logical_count": wide[:, 1:, ::2]}, "view_int64.pt")
# Refused: half precision, an expert location, the legacy format.
save(counts(torch.float16), "bare_float16.pt")
save({"physical_to_logical_map": counts(torch.int64, steps=1)[0]}, "location.pt")
save(counts(torch.int64), "legacy_int64.pt", _use_new_zipfile_serialization=False)
print("torch", torch.__version__)

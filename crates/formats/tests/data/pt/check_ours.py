#!/usr/bin/env python3
"""Loads the `.pt` files residency wrote with torch itself, as the engines do
(`torch.load(..., weights_only=True)`), and checks them against the counts
given in JSON beside them (computed without residency's writer).

usage: check_ours.py SGLANG_PT HEAT_JSON KT_PT KT_JSON
"""
import json
import sys
import torch

sglang_pt, heat_json, kt_pt, kt_json = sys.argv[1:5]

init = torch.load(sglang_pt, weights_only=True)
assert isinstance(init, dict) and list(init) == ["logical_count"], init.keys()
counts = init["logical_count"]
heat = json.load(open(heat_json))
want = torch.tensor(heat["layers"])
assert counts.dim() == 3 and counts.shape[0] == 1, counts.shape
assert torch.equal(counts[0].to(want.dtype), want), (counts, want)
print("sglang init:", tuple(counts.shape), counts.dtype, "sum", int(counts.sum()), "ok")

scores = torch.load(kt_pt, weights_only=True)["logical_count"]
gpu = json.load(open(kt_json))
assert scores.dtype == torch.float32 and scores.dim() == 3, (scores.dtype, scores.shape)
for layer in gpu["layers"]:
    row = scores[0, layer["layer"]]
    on_gpu = sorted(layer["gpu_experts"])
    top = sorted(torch.topk(row, len(on_gpu)).indices.tolist()) if on_gpu else []
    assert top == on_gpu, (layer["layer"], top, on_gpu)
    assert set(row.tolist()) <= {0.0, 1.0, 2.0}
print("kt-kernel scores:", tuple(scores.shape), scores.dtype,
      "gpu experts", int((scores == 2).sum()), "ok")

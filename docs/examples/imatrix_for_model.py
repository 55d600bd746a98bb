#!/usr/bin/env python3
"""Writes an importance matrix for a MoE GGUF model as llama-imatrix lays it
out (GGUF, `general.type = imatrix`), with seeded Zipf-like per-expert
counts, for trying `residency` without running llama-imatrix. Uses the
`gguf` package (pip install gguf numpy).

    python3 docs/examples/imatrix_for_model.py MODEL.gguf OUT.imatrix.gguf [--chunks 100] [--chunk-size 512]

Every routed-expert weight (`blk.N.ffn_{gate,up,down}_exps.weight`) gets
`.in_sum2` [experts, row] and `.counts` [experts, 1]; the three of a layer
share the counts, which sum to about top_k x chunks x chunk_size (every
token of the calibration text routed to top_k experts).
"""
import argparse
import random

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--chunks", type=int, default=100)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    reader = gguf.GGUFReader(a.model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    top_k = int(reader.fields[f"{arch}.expert_used_count"].parts[-1][0])
    tokens = a.chunks * a.chunk_size
    writer = gguf.GGUFWriter(a.out, arch="")
    writer.add_string("general.type", "imatrix")
    writer.add_array("imatrix.datasets", ["calibration.txt"])
    writer.add_uint32("imatrix.chunk_count", a.chunks)
    writer.add_uint32("imatrix.chunk_size", a.chunk_size)
    rng = random.Random(a.seed)
    counts_of = {}
    for t in reader.tensors:
        if not t.name.endswith("_exps.weight"):
            continue
        layer = t.name.split(".")[1]
        row, experts = int(t.shape[0]), int(t.shape[-1])
        if layer not in counts_of:
            # Zipf-like weights (exponent drawn per layer) in a random order,
            # scaled to the routes; an expert is routed at most once a token.
            s = rng.uniform(0.3, 0.8)
            w = [1.0 / (r + 1) ** s for r in range(experts)]
            rng.shuffle(w)
            counts = np.minimum(np.floor(np.array(w) / sum(w) * top_k * tokens), tokens)
            counts_of[layer] = counts.astype(np.float32).reshape(experts, 1)
        writer.add_tensor(f"{t.name}.in_sum2", np.ones((experts, row), dtype=np.float32))
        writer.add_tensor(f"{t.name}.counts", counts_of[layer])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {a.out}: {len(counts_of)} MoE layers, {tokens} tokens, top-{top_k}")


if __name__ == "__main__":
    main()

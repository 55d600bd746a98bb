#!/usr/bin/env python3
"""Writes `tiny.imatrix.gguf` with the `gguf` package (llama.cpp's gguf-py),
laid out as `llama-imatrix` saves a MoE model's matrix: `general.type =
imatrix`, the datasets, chunk count and size, and per routed-expert weight
`.in_sum2` [experts, row] and `.counts` [experts, 1]. Two MoE layers of 4
experts, one chunk of 8 tokens, top-2 (16 routes a layer):

    layer 0: 8 4 4 0      layer 1: 2 6 7 1

usage: pip install gguf numpy; python3 make.py [OUT]
"""
import sys

import gguf
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "tiny.imatrix.gguf"
writer = gguf.GGUFWriter(out, arch="")
writer.add_string("general.type", "imatrix")
writer.add_array("imatrix.datasets", ["calibration.txt"])
writer.add_uint32("imatrix.chunk_count", 1)
writer.add_uint32("imatrix.chunk_size", 8)
for layer, counts in enumerate([[8, 4, 4, 0], [2, 6, 7, 1]]):
    for proj in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]:
        name = f"blk.{layer}.{proj}.weight"
        writer.add_tensor(f"{name}.in_sum2", np.full((4, 8), 0.5, dtype=np.float32))
        writer.add_tensor(f"{name}.counts", np.array(counts, dtype=np.float32).reshape(4, 1))
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
print("wrote", out)

#!/usr/bin/env python3
"""Writes a DeepSeek-V3-size importance matrix as llama-imatrix lays it out
(tools/imatrix/imatrix.cpp, save_imatrix; GGUF v3, data aligned to 32 bytes),
for measuring how fast `residency` reads heat from one. Standard library only.

    python3 docs/bench/gen_imatrix.py OUT.imatrix.gguf [--no-in-sum]

61 layers: 0-2 dense, 3-60 with 256 routed experts (top-8) and a shared
expert; hidden 7168, expert FF 2048, dense FF 18432 (DeepSeek-V3's
config.json). Every weight has `<w>.in_sum2` [row, matrices], `<w>.counts`
[1, matrices] and, unless --no-in-sum (older builds), `<w>.in_sum`. Counts:
125 chunks of 512 tokens, 8 routes each, shared by the experts after a
Zipf-like law per layer (seeded): each layer's counts sum to about 8 x 64000.
The sums hold arbitrary finite floats: no heat reader needs them.
"""
import random
import struct
import sys

HIDDEN, EXPERT_FF, DENSE_FF, EXPERTS, TOP_K = 7168, 2048, 18432, 256, 8
LAYERS, DENSE_LAYERS = 61, 3
CHUNKS, CHUNK_SIZE = 125, 512
ALIGN = 32


def weights():
    """(name, row length, matrices) of every weight llama-imatrix collects."""
    out = []
    for l in range(LAYERS):
        b = f"blk.{l}."
        out += [
            (b + "attn_q_a.weight", HIDDEN, 1),
            (b + "attn_q_b.weight", 1536, 1),
            (b + "attn_kv_a_mqa.weight", HIDDEN, 1),
            (b + "attn_kv_b.weight", 512, 1),
            (b + "attn_output.weight", 16384, 1),
        ]
        if l < DENSE_LAYERS:
            out += [
                (b + "ffn_gate.weight", HIDDEN, 1),
                (b + "ffn_up.weight", HIDDEN, 1),
                (b + "ffn_down.weight", DENSE_FF, 1),
            ]
        else:
            out += [
                (b + "ffn_gate_inp.weight", HIDDEN, 1),
                (b + "ffn_gate_exps.weight", HIDDEN, EXPERTS),
                (b + "ffn_up_exps.weight", HIDDEN, EXPERTS),
                (b + "ffn_down_exps.weight", EXPERT_FF, EXPERTS),
                (b + "ffn_gate_shexp.weight", HIDDEN, 1),
                (b + "ffn_up_shexp.weight", HIDDEN, 1),
                (b + "ffn_down_shexp.weight", EXPERT_FF, 1),
            ]
    return sorted(out)


def layer_counts(layer):
    """Per expert, its share of the 8 routes of each of CHUNKS x CHUNK_SIZE
    tokens under a Zipf(0.8) law shuffled per layer (seeded); the hottest
    share is 8 x 0.09 of the tokens, so no expert exceeds them."""
    rng = random.Random(layer)
    weight = [1.0 / (r + 1) ** 0.8 for r in range(EXPERTS)]
    rng.shuffle(weight)
    routes = TOP_K * CHUNKS * CHUNK_SIZE
    return [round(routes * w / sum(weight)) for w in weight]


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    out = sys.argv[1]
    in_sum = "--no-in-sum" not in sys.argv[2:]
    tokens = CHUNKS * CHUNK_SIZE
    tensors = []  # (name, dims, values or byte count)
    for name, row, mats in weights():
        layer = int(name.split(".")[1])
        counts = layer_counts(layer) if mats > 1 else [tokens]
        tensors.append((name + ".in_sum2", (row, mats), row * mats * 4))
        tensors.append((name + ".counts", (1, mats), [float(c) for c in counts]))
        if in_sum:
            tensors.append((name + ".in_sum", (row, mats), row * mats * 4))
    kv = [
        ("general.type", 8, gguf_string("imatrix")),
        ("imatrix.datasets", 9, struct.pack("<IQ", 8, 1) + gguf_string("calibration_datav3.txt")),
        ("imatrix.chunk_count", 4, struct.pack("<I", CHUNKS)),
        ("imatrix.chunk_size", 4, struct.pack("<I", CHUNK_SIZE)),
    ]
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, kind, value in kv:
        head += gguf_string(key) + struct.pack("<I", kind) + value
    offset = 0
    offsets = []
    for name, dims, data in tensors:
        size = data if isinstance(data, int) else 4 * len(data)
        head += gguf_string(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", 0, offset)  # type 0: F32
        offsets.append(offset)
        offset += -(-size // ALIGN) * ALIGN
    data_start = -(-len(head) // ALIGN) * ALIGN
    # Sums: a block of small finite floats repeated.
    block = struct.pack("<1024f", *[(i % 97) * 0.01 for i in range(1024)])
    with open(out, "wb") as f:
        f.write(head + b"\0" * (data_start - len(head)))
        for (name, dims, data), at in zip(tensors, offsets):
            f.seek(data_start + at)
            if isinstance(data, int):
                whole, rest = divmod(data, len(block))
                f.write(block * whole + block[:rest])
            else:
                f.write(struct.pack(f"<{len(data)}f", *data))
        f.truncate(data_start + offset)
    print(f"wrote {out}: {len(tensors)} tensors, {data_start + offset} bytes")

if __name__ == "__main__":
    main()

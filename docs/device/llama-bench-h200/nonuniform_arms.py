#!/usr/bin/env python3
"""Bytes of llama.cpp placements of a GGUF file, from its header (gguf-py).

Used to put three llama.cpp arms at the same VRAM: the residency export,
`-ngl 99 --n-cpu-moe N` and `--fit` (llama-bench `-fitt MARGIN`).

  budget FILE FRAC          GPU bytes: every tensor llama.cpp puts on CUDA0
                            with -ngl 99 except routed experts, plus FRAC of
                            the routed experts' bytes
  profile TEMPLATE BYTES OUT
                            a copy of a hardware profile whose first GPU has
                            BYTES usable (reserved = vram - BYTES), with the
                            llama.cpp timing below where it has none
  ncmoe FILE BYTES          the smallest N whose -ngl 99 -ncmoe N CUDA0
                            model bytes are <= BYTES: prints "N bytes"
  cuda0 FILE [-ngl N] [-ot RULES] [-ncmoe N]
                            CUDA0 model bytes of a placement, llama.cpp's
                            rules: the first -ot pattern that matches a
                            tensor's name (regex search) wins, then -ncmoe's;
                            -ngl N puts the last N-1 layers and the output
                            on the GPU (default 99: all)
  fitargs FILE              the "-ngl N -ot ..." line of llama-fit-params on
                            stdin -> CUDA0 model bytes

Left out as llama.cpp leaves them: token_embd (host memory) and the
tensors of the last {arch}.nextn_predict_layers blocks (not loaded).
"""
import re
import sys

import gguf

# the timing fitted on both geometries of this directory's runs (docs/gguf.md,
# "Measured: two geometries, predict both"), for profiles that have none
LLAMA_CPP_TIMING = """llama_cpp:
  source: "fitted on the q and g2 llama-bench runs of docs/device/llama-bench-h200 (docs/gguf.md)"
  cpu_bandwidth: 62.73 GB/s
  gpu_layer_overhead: 49.29 us
  cpu_layer_overhead: 200.7 us
  crossing_overhead: 23.62 us
  cpu_matrix_overhead: 2.494 us
  token_overhead: 75.27 us
"""
EXPS = re.compile(r"\.ffn_(up|down|gate_up|gate)_(ch|)exps")


def tensors(path):
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()

    def u(key, default=0):
        f = r.fields.get(f"{arch}.{key}")
        return int(f.parts[f.data[0]][0]) if f else default

    n_all = u("block_count")
    n_layer = n_all - u("nextn_predict_layers")
    out = []
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        il = int(m.group(1)) if m else None
        if il is not None and il >= n_layer:
            continue  # nextn block: llama.cpp skips it
        out.append((t.name, il, int(t.n_bytes)))
    return out, n_all


def cuda0(ts, n_all, ngl=99, rules=(), ncmoe=0):
    """Bytes on CUDA0. rules: [(regex, buffer)]; ncmoe adds llama.cpp's per-layer CPU rules after them."""
    rules = list(rules) + [(rf"blk\.{i}\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU") for i in range(ncmoe)]
    i_gpu_start = max(n_all + 1 - ngl, 0)
    total = 0
    for name, il, nb in ts:
        if name == "token_embd.weight":
            continue
        # a layer's tensors go with the layer; the rest with the output slot (on the GPU from -ngl 1)
        on_gpu = il >= i_gpu_start if il is not None else ngl >= 1
        for pat, buf in rules:
            if re.search(pat, name):
                on_gpu = not buf.upper().startswith("CPU")
                break
        if on_gpu:
            total += nb
    return total


def budget(ts, frac):
    exps = sum(nb for name, il, nb in ts if EXPS.search(name))
    rest = sum(nb for name, il, nb in ts if not EXPS.search(name) and name != "token_embd.weight")
    return rest + int(frac * exps), rest, exps


def parse_placement(args):
    ngl, rules, ncmoe = 99, [], 0
    it = iter(args)
    for a in it:
        if a in ("-ngl", "--n-gpu-layers"):
            ngl = int(next(it))
        elif a in ("-ncmoe", "--n-cpu-moe"):
            ncmoe = int(next(it))
        elif a in ("-ot", "--override-tensor"):
            for r in re.split(r"[;,](?=[^;,]*=)", next(it).strip('"\'')):
                pat, buf = r.rsplit("=", 1)
                rules.append((pat, buf))
    if ngl < 0:  # llama.cpp's -1: every layer
        ngl = 999
    return ngl, rules, ncmoe


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "profile":
        template, nbytes, out = args[0], int(args[1]), args[2]
        text = open(template).read()
        vram = re.search(r"vram:\s*([\d.]+)\s*GiB", text)
        vram_bytes = float(vram.group(1)) * 2**30
        reserved_mib = (vram_bytes - nbytes) / 2**20
        text = re.sub(r"(\n\s+reserved:\s*)[\d.]+ GiB( +#[^\n]*)?(\n\s+numa:)",
                      rf"\g<1>{reserved_mib:.6f} MiB  # set: {nbytes} bytes usable\3", text, count=1)
        if "\nllama_cpp:" not in text:
            text += LLAMA_CPP_TIMING
        open(out, "w").write(text)
        return
    ts, n_all = tensors(args[0])
    if cmd == "budget":
        b, rest, exps = budget(ts, float(args[1]))
        print(b, rest, exps)
    elif cmd == "ncmoe":
        limit = int(args[1])
        for n in range(n_all + 1):
            b = cuda0(ts, n_all, ncmoe=n)
            if b <= limit:
                print(n, b)
                return
        sys.exit("no --n-cpu-moe fits")
    elif cmd == "cuda0":
        print(cuda0(ts, n_all, *parse_placement(args[1:])))
    elif cmd == "fitargs":
        print(cuda0(ts, n_all, *parse_placement(sys.stdin.read().replace('"', "").split())))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write a random-weight, non-uniform MoE GGUF for llama.cpp.

Two shapes, both with a dense first layer, shared experts and mixed
K-quant quantisation (the routed experts' ffn_down in Q6_K in every other
MoE layer, Q4_K in the rest):

  deepseek2  DeepSeek-V2-Lite-like: 27 layers (layer 0 dense), MLA attention
             (kv_lora_rank 512, no q LoRA, as the 27-layer Lite), 64 routed
             + 2 shared experts, top-6, hidden 2048, expert FFN 1536.
  glm4moe    GLM-4.5-Air-like: 20 layers (layer 0 dense) plus one
             multi-token-prediction (nextn) layer, 128 routed + 1 shared
             experts, top-8, sigmoid gating with exp_probs_b, hidden 2048,
             expert FFN 1024, q/k/v biases, post-attention norm.

Expert FFN widths are multiples of 256: a K-quant row is whole 256-weight
super-blocks (DeepSeek-V2-Lite's real 1408 is not, which is why its
quantised files fall back to other types there).

Types: routed and shared experts, dense FFN, attention matrices and
token_embd Q4_K (144 bytes per 256 weights); a matrix whose rows are not
whole super-blocks Q8_0 (34 bytes per 32); `output` Q6_K (210 bytes per
256); routers (ffn_gate_inp) and every 1-D tensor F32. Random quant blocks
carry small finite f16 scale fields (d, dmin), so no weight is NaN or Inf,
and Q4_K's dmin is 7.5 d, which centres its weights on zero as the signed
Q6_K and Q8_0 ones are.

Streams one tensor at a time from a random pool per type. `--dry-run`
prints the sizes only. Needs numpy and gguf-py (pip's `gguf`, or
PYTHONPATH=<llama.cpp>/gguf-py).
"""
import argparse
import os
import sys
import time

import numpy as np

try:
    import gguf
except ImportError:  # a llama.cpp checkout beside this file
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama.cpp", "gguf-py"))
    import gguf

T = gguf.GGMLQuantizationType
# type -> (weights per block, bytes per block, byte offsets of f16 scale fields)
BLOCKS = {
    T.Q4_K: (256, 144, (0, 2)),
    T.Q6_K: (256, 210, (208,)),
    T.Q8_0: (32, 34, (0,)),
}
# scale magnitudes: keep |weights| roughly below 1 for each format's integer range
SCALE = {T.Q4_K: (2e-4, 8e-4), T.Q6_K: (5e-5, 2e-4), T.Q8_0: (2e-3, 8e-3)}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def qtype_for(shape, want):
    """K-quant if the rows are whole super-blocks, else Q8_0."""
    qk = BLOCKS[want][0]
    if shape[-1] % qk == 0:
        return want
    assert shape[-1] % 32 == 0, shape
    return T.Q8_0


def byte_shape(shape, qt):
    qk, qb, _ = BLOCKS[qt]
    assert shape[-1] % qk == 0, (shape, qt)
    return (*shape[:-1], shape[-1] // qk * qb)


def defaults(arch):
    if arch == "deepseek2":
        return dict(layers=27, dense=1, experts=64, shared=2, top_k=6, hidden=2048, expert_ffn=1536,
                    ffn=10752, heads=16, vocab=102400, ctx=163840, nextn=0)
    return dict(layers=20, dense=1, experts=128, shared=1, top_k=8, hidden=2048, expert_ffn=1024,
                ffn=8192, heads=16, vocab=151552, ctx=131072, nextn=1)


def build_tensors(a):
    """[(name, numpy shape (outer..., ne0), kind)] in file order; kind is a ggml type or 'norm'/'zero'/'router'."""
    H, F, E, V = a.hidden, a.expert_ffn, a.experts, a.vocab
    out = [("token_embd.weight", (V, H), T.Q4_K), ("output_norm.weight", (H,), "norm"),
           ("output.weight", (V, H), T.Q6_K)]
    n_blocks = a.layers + a.nextn
    moe_index = 0
    for i in range(n_blocks):
        p = f"blk.{i}."
        t = [(p + "attn_norm.weight", (H,), "norm")]
        if a.arch == "deepseek2":
            qk_nope, qk_rope, v_dim, kvr = 128, 64, 128, 512
            if a.q_lora_rank:
                t += [(p + "attn_q_a_norm.weight", (a.q_lora_rank,), "norm"),
                      (p + "attn_q_a.weight", (a.q_lora_rank, H), T.Q4_K),
                      (p + "attn_q_b.weight", (a.heads * (qk_nope + qk_rope), a.q_lora_rank), T.Q4_K)]
            else:
                t += [(p + "attn_q.weight", (a.heads * (qk_nope + qk_rope), H), T.Q4_K)]
            t += [(p + "attn_kv_a_norm.weight", (kvr,), "norm"),
                  (p + "attn_kv_a_mqa.weight", (kvr + qk_rope, H), T.Q4_K),
                  (p + "attn_k_b.weight", (a.heads, kvr, qk_nope), T.Q8_0),
                  (p + "attn_v_b.weight", (a.heads, v_dim, kvr), T.Q4_K),
                  (p + "attn_output.weight", (H, a.heads * v_dim), T.Q4_K)]
        else:
            hd, kvh = 128, a.kv_heads
            t += [(p + "attn_q.weight", (a.heads * hd, H), T.Q4_K), (p + "attn_k.weight", (kvh * hd, H), T.Q4_K),
                  (p + "attn_v.weight", (kvh * hd, H), T.Q4_K), (p + "attn_q.bias", (a.heads * hd,), "zero"),
                  (p + "attn_k.bias", (kvh * hd,), "zero"), (p + "attn_v.bias", (kvh * hd,), "zero"),
                  (p + "attn_output.weight", (H, a.heads * hd), T.Q4_K),
                  (p + "post_attention_norm.weight", (H,), "norm")]
        if a.arch == "deepseek2":
            t += [(p + "ffn_norm.weight", (H,), "norm")]
        if i < a.dense:
            t += [(p + "ffn_gate.weight", (a.ffn, H), T.Q4_K), (p + "ffn_up.weight", (a.ffn, H), T.Q4_K),
                  (p + "ffn_down.weight", (H, a.ffn), T.Q4_K)]
        else:
            down = T.Q6_K if moe_index % 2 == 1 else T.Q4_K
            moe_index += 1
            S = F * a.shared
            t += [(p + "ffn_gate_inp.weight", (E, H), "router"), (p + "exp_probs_b.bias", (E,), "zero"),
                  (p + "ffn_gate_exps.weight", (E, F, H), T.Q4_K), (p + "ffn_up_exps.weight", (E, F, H), T.Q4_K),
                  (p + "ffn_down_exps.weight", (E, H, F), down),
                  (p + "ffn_gate_shexp.weight", (S, H), T.Q4_K), (p + "ffn_up_shexp.weight", (S, H), T.Q4_K),
                  (p + "ffn_down_shexp.weight", (H, S), T.Q4_K)]
        if i >= a.layers:  # GLM's nextn (MTP) block: its own projections after the block's tensors
            t += [(p + "nextn.eh_proj.weight", (H, 2 * H), T.Q4_K), (p + "nextn.enorm.weight", (H,), "norm"),
                  (p + "nextn.hnorm.weight", (H,), "norm"), (p + "nextn.shared_head_norm.weight", (H,), "norm")]
        out += t
    # K-quant where the rows are whole super-blocks, else Q8_0
    return [(n, s, qtype_for(s, k) if isinstance(k, T) else k) for n, s, k in out]


def nbytes(shape, kind):
    if isinstance(kind, T):
        return int(np.prod(byte_shape(shape, kind)))
    return 4 * int(np.prod(shape))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", choices=["deepseek2", "glm4moe"], required=True)
    for k in ("layers", "dense", "experts", "shared", "top-k", "hidden", "expert-ffn", "ffn", "heads", "vocab",
              "ctx", "nextn"):
        ap.add_argument("--" + k, type=int, help="default: by --arch")
    ap.add_argument("--kv-heads", type=int, default=4, help="glm4moe only")
    ap.add_argument("--q-lora-rank", type=int, default=0,
                    help="deepseek2: 0 = no q LoRA (llama.cpp allows that only at 26 or 27 layers)")
    ap.add_argument("--pool-mib", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print sizes only")
    ap.add_argument("--header-only", action="store_true",
                    help="write the header and a sparse hole of the data's size (for readers of headers only)")
    a = ap.parse_args()
    for k, v in defaults(a.arch).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.arch == "deepseek2" and a.nextn:
        sys.exit("--nextn is for glm4moe")
    if a.arch == "deepseek2" and not a.q_lora_rank and a.layers not in (26, 27):
        sys.exit("deepseek2 without q LoRA loads only at 26 or 27 layers in llama.cpp: give --q-lora-rank")

    tensors = build_tensors(a)
    total = sum(nbytes(s, k) for _, s, k in tensors)
    print(f"{a.arch}: {a.layers} layers (+{a.nextn} nextn), {a.dense} dense, {a.experts} experts "
          f"+ {a.shared} shared, top-{a.top_k}, hidden {a.hidden}, expert FFN {a.expert_ffn}")
    print(f"tensors: {len(tensors)}, data bytes: {total} ({total / 2**30:.3f} GiB)")
    exps = {}
    for n, s, k in tensors:
        if "_exps." in n:
            il = int(n.split(".")[1])
            exps[il] = exps.get(il, 0) + nbytes(s, k)
    for il in sorted(exps):
        down = next(k for n, s, k in tensors if n == f"blk.{il}.ffn_down_exps.weight")
        tag = " (nextn, not run by llama.cpp)" if il >= a.layers else ""
        print(f"  blk.{il}: routed experts {exps[il]} bytes, ffn_down_exps {down.name}{tag}")
    run_exps = sum(v for il, v in exps.items() if il < a.layers)
    print(f"routed expert bytes of the run layers: {run_exps} ({run_exps / 2**30:.3f} GiB)", flush=True)
    if a.dry_run:
        return

    t0 = time.time()
    rng = np.random.default_rng(a.seed)
    pools = {}
    for qt, (qk, qb, offs) in BLOCKS.items():
        nb = a.pool_mib * 2**20 // qb
        pool = rng.integers(0, 256, size=nb * qb, dtype=np.uint8)
        blocks = pool.reshape(nb, qb)
        lo, hi = SCALE[qt]
        d = rng.uniform(lo, hi, size=nb)
        # Q4_K: w = d*sc*q - dmin*m with q in 0..15 and sc, m in 0..63; dmin = 7.5 d centres w on zero
        for off, v in zip(offs, (d, 7.5 * d)):
            blocks[:, off:off + 2] = v.astype(np.float16).view(np.uint8).reshape(nb, 2)
        assert np.isfinite(blocks[:, offs[0]:offs[0] + 2].copy().view(np.float16)).all()
        pools[qt] = (pool, nb, qb)

    def quant(shape, qt):
        pool, nb, qb = pools[qt]
        bshape = byte_shape(shape, qt)
        n = int(np.prod(bshape))
        out = np.empty(n, dtype=np.uint8)
        cur, pos = int(rng.integers(0, nb)) * qb, 0
        while pos < n:  # block-aligned start, whole blocks of the pool
            k = min(n - pos, pool.size - cur)
            out[pos:pos + k] = pool[cur:cur + k]
            pos, cur = pos + k, 0
        return out.reshape(bshape)

    w = gguf.GGUFWriter(a.out, a.arch)
    w.add_name(f"synthetic non-uniform {a.arch} (random K-quant weights)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_block_count(a.layers + a.nextn)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(a.experts)
    w.add_expert_used_count(a.top_k)
    w.add_expert_feed_forward_length(a.expert_ffn)
    w.add_expert_shared_count(a.shared)
    w.add_leading_dense_block_count(a.dense)
    w.add_expert_weights_norm(True)
    if a.arch == "deepseek2":
        w.add_head_count_kv(1)  # MLA as llama.cpp converts it: one latent "head"
        w.add_rope_freq_base(10000.0)
        w.add_vocab_size(a.vocab)
        if a.q_lora_rank:
            w.add_q_lora_rank(a.q_lora_rank)
        w.add_kv_lora_rank(512)
        w.add_key_length(512 + 64)
        w.add_value_length(512)
        w.add_key_length_mla(128 + 64)
        w.add_value_length_mla(128)
        w.add_rope_dimension_count(64)
        w.add_expert_weights_scale(1.0)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
        pre = "deepseek-llm"
    else:
        w.add_head_count_kv(a.kv_heads)
        w.add_rope_freq_base(1000000.0)
        w.add_key_length(128)
        w.add_value_length(128)
        w.add_rope_dimension_count(64)  # GLM-4.5: partial rotary factor 0.5
        w.add_expert_weights_scale(1.0)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_nextn_predict_layers(a.nextn)
        pre = "glm4"

    # tokenizer: byte-level BPE of the full vocab size, three specials at the end
    V = a.vocab
    specials = {V - 3: "<|endoftext|>", V - 2: "<|im_start|>", V - 1: "<|im_end|>"}
    byte_chars = bytes_to_unicode()
    tokens, types = [], []
    for i in range(V):
        if i < 256:
            tokens.append(byte_chars[i]); types.append(gguf.TokenType.NORMAL)
        elif i == 256:
            tokens.append("Ġt"); types.append(gguf.TokenType.NORMAL)
        elif i in specials:
            tokens.append(specials[i]); types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(f"tok{i}"); types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(V - 3)
    w.add_eos_token_id(V - 1)
    w.add_pad_token_id(V - 3)
    w.add_add_bos_token(False)

    for name, shape, kind in tensors:
        if isinstance(kind, T):
            bs = byte_shape(shape, kind)
            w.add_tensor_info(name, bs, np.dtype(np.uint8), int(np.prod(bs)), raw_dtype=kind)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(shape, kind))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    if a.header_only:
        w.close()
        with open(a.out, "r+b") as f:
            f.seek(0, os.SEEK_END)
            start = f.tell()
            start += (-start) % w.data_alignment
            f.truncate(start + sum(-(-nbytes(s, k) // w.data_alignment) * w.data_alignment for _, s, k in tensors))
        print(f"wrote {a.out}: header, data a sparse hole, {os.path.getsize(a.out)} bytes", flush=True)
        return
    done = 0
    for j, (name, shape, kind) in enumerate(tensors):
        if isinstance(kind, T):
            t = quant(shape, kind)
        elif kind == "norm":
            t = np.ones(shape, dtype=np.float32)
        elif kind == "zero":
            t = np.zeros(shape, dtype=np.float32)
        else:  # router: small random F32
            t = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        w.write_tensor_data(t)
        done += t.nbytes
        if j % 100 == 0:
            print(f"  {j}/{len(tensors)} tensors, {done / 2**30:.2f} GiB, {time.time() - t0:.1f} s", flush=True)
    w.close()
    print(f"wrote {a.out}: {os.path.getsize(a.out)} bytes in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

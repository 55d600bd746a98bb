//! GGUF files for tests, laid out as llama.cpp's converter writes them
//! (metadata, tensor infos, data aligned to 32 bytes), the data left as
//! zeros (a sparse file) except where a tensor is given values. The writer
//! has its own table of the few ggml types it uses, so a reader's table is
//! checked against it, not reused. `imatrix` writes llama-imatrix's files.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// `(ggml type id, values a block, bytes a block)` of the types the tests use.
pub const F32: (u32, u64, u64) = (0, 1, 4);
pub const Q4_0: (u32, u64, u64) = (2, 32, 18);
pub const Q8_0: (u32, u64, u64) = (8, 32, 34);
pub const MXFP4: (u32, u64, u64) = (39, 32, 17);

pub enum Kv {
    U32(u32),
    I64(i64),

    Str(&'static str),
    StrArray(Vec<&'static str>),
}

pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub kind: (u32, u64, u64),
    /// F32 values written as the tensor's data; a hole of zeros when None.
    pub values: Option<Vec<f32>>,
}

/// A GGUF file to write.
#[derive(Default)]
pub struct Gguf {
    pub version: u32,
    pub kv: Vec<(String, Kv)>,
    pub tensors: Vec<Tensor>,
}

impl Gguf {
    pub fn new(arch: &'static str) -> Gguf {
        Gguf {
            version: 3,
            ..Gguf::default()
        }
        .kv("general.architecture", Kv::Str(arch))
    }

    pub fn kv(mut self, key: &str, value: Kv) -> Gguf {
        self.kv.push((key.to_string(), value));
        self
    }

    pub fn tensor(mut self, name: &str, dims: &[u64], kind: (u32, u64, u64)) -> Gguf {
        self.tensors.push(Tensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            kind,
            values: None,
        });
        self
    }

    /// An F32 tensor holding `values` (as many as `dims` has elements).
    pub fn tensor_f32(mut self, name: &str, dims: &[u64], values: Vec<f32>) -> Gguf {
        assert_eq!(values.len() as u64, dims.iter().product::<u64>(), "{name}");
        self.tensors.push(Tensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            kind: F32,
            values: Some(values),
        });
        self
    }

    /// Bytes of `t` by the writer's own table.
    pub fn bytes(t: &Tensor) -> u64 {
        let (_, block, block_bytes) = t.kind;
        t.dims[0] / block * block_bytes * t.dims[1..].iter().product::<u64>()
    }

    pub fn write(&self, path: &Path) {
        let mut b = Vec::new();
        let string = |b: &mut Vec<u8>, s: &str| {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        };
        b.extend(b"GGUF");
        b.extend(self.version.to_le_bytes());
        b.extend((self.tensors.len() as u64).to_le_bytes());
        b.extend((self.kv.len() as u64).to_le_bytes());
        for (key, value) in &self.kv {
            string(&mut b, key);
            match value {
                Kv::U32(v) => {
                    b.extend(4u32.to_le_bytes());
                    b.extend(v.to_le_bytes());
                }
                Kv::I64(v) => {
                    b.extend(11u32.to_le_bytes());
                    b.extend(v.to_le_bytes());
                }
                Kv::Str(s) => {
                    b.extend(8u32.to_le_bytes());
                    string(&mut b, s);
                }
                Kv::StrArray(items) => {
                    b.extend(9u32.to_le_bytes());
                    b.extend(8u32.to_le_bytes());
                    b.extend((items.len() as u64).to_le_bytes());
                    for s in items {
                        string(&mut b, s);
                    }
                }
            }
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            string(&mut b, &t.name);
            b.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                b.extend(d.to_le_bytes());
            }
            b.extend(t.kind.0.to_le_bytes());
            b.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset += Self::bytes(t).div_ceil(32) * 32;
        }
        let data_start = (b.len() as u64).div_ceil(32) * 32;
        std::fs::write(path, &b).unwrap();
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(data_start + offset).unwrap();
        for (t, at) in self.tensors.iter().zip(offsets) {
            if let Some(values) = &t.values {
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                f.seek(SeekFrom::Start(data_start + at)).unwrap();
                f.write_all(&bytes).unwrap();
            }
        }
    }
}

pub const H: u64 = 64;
pub const FF: u64 = 32;
pub const E: u64 = 4;

/// A Qwen3-MoE-shaped file: `layers` MoE layers of 4 experts (hidden 64,
/// expert FF 32, Q4_0), attention in Q8_0, norms and router in F32.
pub fn qwen3moe(layers: u32) -> Gguf {
    qwen3moe_sized(layers, H, FF, E)
}

/// `qwen3moe` at another geometry: hidden `h`, expert FF `ff`, `e` experts.
pub fn qwen3moe_sized(layers: u32, h: u64, ff: u64, e: u64) -> Gguf {
    let mut g = Gguf::new("qwen3moe")
        .kv("general.name", Kv::Str("tiny-qwen3moe"))
        .kv("qwen3moe.block_count", Kv::U32(layers))
        .kv("qwen3moe.embedding_length", Kv::U32(h as u32))
        .kv("qwen3moe.expert_count", Kv::U32(e as u32))
        .kv("qwen3moe.expert_used_count", Kv::U32(2))
        .kv("qwen3moe.expert_feed_forward_length", Kv::U32(ff as u32))
        .kv("qwen3moe.attention.head_count", Kv::U32(4))
        .kv("qwen3moe.attention.head_count_kv", Kv::U32(2))
        .kv("qwen3moe.context_length", Kv::U32(32768))
        .kv("tokenizer.ggml.tokens", Kv::StrArray(vec!["a", "b", "c"]))
        .tensor("token_embd.weight", &[h, 100], Q8_0)
        .tensor("output.weight", &[h, 100], Q8_0)
        .tensor("output_norm.weight", &[h], F32);
    for l in 0..layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        g = g
            .tensor(&n("attn_q.weight"), &[h, h], Q8_0)
            .tensor(&n("attn_norm.weight"), &[h], F32)
            .tensor(&n("ffn_norm.weight"), &[h], F32)
            .tensor(&n("ffn_gate_inp.weight"), &[h, e], F32)
            .tensor(&n("ffn_gate_exps.weight"), &[h, ff, e], Q4_0)
            .tensor(&n("ffn_up_exps.weight"), &[h, ff, e], Q4_0)
            .tensor(&n("ffn_down_exps.weight"), &[ff, h, e], Q4_0);
    }
    g
}

/// `qwen3moe(2)` split as llama.cpp's `gguf-split` writes it: the first
/// shard has the metadata and every tensor but layer 1's, the second layer
/// 1's; both carry `split.no`, `split.count` (2) and `split.tensors.count`
/// (3 global + 7 a layer = 17). Written as `m-00001-of-00002.gguf` and
/// `m-00002-of-00002.gguf`, the first reads as the whole model.
pub fn qwen3moe_split() -> [Gguf; 2] {
    let (first, second): (Vec<_>, Vec<_>) = qwen3moe(2)
        .tensors
        .into_iter()
        .partition(|t| !t.name.starts_with("blk.1."));
    let split = |tensors: Vec<Tensor>, no: u32| {
        let mut g = Gguf {
            version: 3,
            kv: Vec::new(),
            tensors,
        }
        .kv("split.no", Kv::U32(no))
        .kv("split.count", Kv::U32(2))
        .kv("split.tensors.count", Kv::U32(17));
        if no == 0 {
            g.kv.extend(qwen3moe(2).kv);
        }
        g
    };
    [split(first, 0), split(second, 1)]
}

/// The geometry of a `qwen3moe` file as `.devbin`-style generators write
/// it (../shared/data/llamacpp-h200-qwen3-30b/gen_gguf.py): every matrix
/// Q4_0, every vector F32.
#[derive(Debug, Clone, Copy)]
pub struct Qwen3MoeGeometry {
    pub layers: u32,
    pub experts: u64,
    pub top_k: u32,
    pub hidden: u64,
    pub expert_ffn: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
}

impl Qwen3MoeGeometry {
    /// Qwen3-30B-A3B (config.json of Qwen/Qwen3-30B-A3B).
    pub const QWEN3_30B_A3B: Qwen3MoeGeometry = Qwen3MoeGeometry {
        layers: 48,
        experts: 128,
        top_k: 8,
        hidden: 2048,
        expert_ffn: 768,
        heads: 32,
        kv_heads: 4,
        head_dim: 128,
        vocab: 151936,
    };

    /// `g2` of docs/device/llama-bench-h200/README.md: `gen_gguf.py
    /// --layers 24 --experts 64 --top-k 4 --hidden 3072 --expert-ffn 1024
    /// --heads 24 --kv-heads 4`, the head size and vocabulary the
    /// generator's defaults (its `--ffn` sizes no tensor of qwen3moe).
    pub const G2: Qwen3MoeGeometry = Qwen3MoeGeometry {
        layers: 24,
        experts: 64,
        top_k: 4,
        hidden: 3072,
        expert_ffn: 1024,
        heads: 24,
        kv_heads: 4,
        head_dim: 128,
        vocab: 151936,
    };

    /// The header of the generator's file: its tensors, names, types and
    /// metadata; the data is a hole.
    pub fn gguf(self) -> Gguf {
        let Qwen3MoeGeometry {
            layers,
            experts: e,
            top_k,
            hidden: h,
            expert_ffn: f,
            heads,
            kv_heads,
            head_dim,
            vocab,
        } = self;
        let (q, kv) = (heads * head_dim, kv_heads * head_dim);
        let mut g = Gguf::new("qwen3moe")
            .kv("general.name", Kv::Str("generated qwen3moe"))
            .kv("qwen3moe.block_count", Kv::U32(layers))
            .kv("qwen3moe.embedding_length", Kv::U32(h as u32))
            .kv("qwen3moe.expert_count", Kv::U32(e as u32))
            .kv("qwen3moe.expert_used_count", Kv::U32(top_k))
            .kv("qwen3moe.expert_feed_forward_length", Kv::U32(f as u32))
            .kv("qwen3moe.attention.head_count", Kv::U32(heads as u32))
            .kv("qwen3moe.attention.head_count_kv", Kv::U32(kv_heads as u32))
            .kv("qwen3moe.attention.key_length", Kv::U32(head_dim as u32))
            .kv("qwen3moe.attention.value_length", Kv::U32(head_dim as u32))
            .kv("tokenizer.ggml.tokens", Kv::StrArray(vec!["a", "b", "c"]))
            .tensor("token_embd.weight", &[h, vocab], Q4_0)
            .tensor("output_norm.weight", &[h], F32)
            .tensor("output.weight", &[h, vocab], Q4_0);
        for l in 0..layers {
            let n = |s: &str| format!("blk.{l}.{s}");
            g = g
                .tensor(&n("attn_norm.weight"), &[h], F32)
                .tensor(&n("attn_q.weight"), &[h, q], Q4_0)
                .tensor(&n("attn_k.weight"), &[h, kv], Q4_0)
                .tensor(&n("attn_v.weight"), &[h, kv], Q4_0)
                .tensor(&n("attn_output.weight"), &[q, h], Q4_0)
                .tensor(&n("attn_q_norm.weight"), &[head_dim], F32)
                .tensor(&n("attn_k_norm.weight"), &[head_dim], F32)
                .tensor(&n("ffn_norm.weight"), &[h], F32)
                .tensor(&n("ffn_gate_inp.weight"), &[h, e], Q4_0)
                .tensor(&n("ffn_gate_exps.weight"), &[h, f, e], Q4_0)
                .tensor(&n("ffn_down_exps.weight"), &[f, h, e], Q4_0)
                .tensor(&n("ffn_up_exps.weight"), &[h, f, e], Q4_0);
        }
        g
    }
}

/// One weight of an importance matrix: its name, the length of its input
/// rows, and one count per matrix (per expert for `ffn_*_exps`, one for a
/// dense weight).
pub struct ImatrixWeight {
    pub name: String,
    pub row: u64,
    pub counts: Vec<f32>,
}

/// An importance matrix laid out as llama.cpp's `llama-imatrix` writes it
/// (tools/imatrix/imatrix.cpp, `save_imatrix`): `general.type = imatrix`,
/// `imatrix.datasets` (strings), `imatrix.chunk_count` and
/// `imatrix.chunk_size` (u32); then per weight, in name order,
/// `<weight>.in_sum2` (F32, `[row, matrices]`), `<weight>.counts` (F32,
/// `[1, matrices]`) and `<weight>.in_sum` (F32, like `in_sum2`). The sums
/// are holes of zeros: no reader of heat needs them.
pub fn imatrix(chunk_count: u32, chunk_size: u32, weights: &[ImatrixWeight]) -> Gguf {
    let mut g = Gguf {
        version: 3,
        ..Gguf::default()
    }
    .kv("general.type", Kv::Str("imatrix"))
    .kv("imatrix.datasets", Kv::StrArray(vec!["calibration.txt"]))
    .kv("imatrix.chunk_count", Kv::U32(chunk_count))
    .kv("imatrix.chunk_size", Kv::U32(chunk_size));
    let mut sorted: Vec<&ImatrixWeight> = weights.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for w in sorted {
        let matrices = w.counts.len() as u64;
        g = g
            .tensor(&format!("{}.in_sum2", w.name), &[w.row, matrices], F32)
            .tensor_f32(
                &format!("{}.counts", w.name),
                &[1, matrices],
                w.counts.clone(),
            )
            .tensor(&format!("{}.in_sum", w.name), &[w.row, matrices], F32);
    }
    g
}

//! Storage formats of routed experts, and the packed container of the
//! quantised ones (packing version 1).
//!
//! A linear weight of `rows` output and `cols` input features (PyTorch's
//! `nn.Linear.weight` layout, `[rows, cols]`) is stored as:
//! - `bf16`: `<module>.weight`, `BF16 [rows, cols]`.
//! - `int8`: `<module>.weight`, `I8 [rows, cols]`, one signed value `q` per
//!   byte; plus `<module>.scales`, `F16 [rows, cols / group]`.
//! - `int4`: `<module>.weight`, `U8 [rows, cols / 2]`, two values per byte:
//!   input feature `2j` in the low nibble, `2j + 1` in the high nibble, each
//!   nibble holding `q + 8` for a signed `q` in `-8..=7`; plus
//!   `<module>.scales`, `F16 [rows, cols / group]`.
//!
//! Scale `s[r][c / group]` covers `group` consecutive input features of row
//! `r`; the weight is `q * s`. `cols` must be a multiple of `group`, so an
//! expert of `params` parameters takes `params * bits / 8 + params / group * 2`
//! bytes: the `{bits, group}` size of design §3.2 exactly.
//!
//! A fused expert parameter (Llama-4's `experts.gate_up_proj`,
//! `experts.down_proj`: every expert of a layer in one tensor, each expert's
//! matrix in `x @ W` orientation, `[experts, inputs, outputs]`, no `.weight`
//! suffix) is stored as:
//! - `bf16`: `<param>`, `BF16 [experts, inputs, outputs]`.
//! - `int8`: `<param>`, `I8 [experts, inputs, outputs]`; plus
//!   `<param>_scales`, `F16 [experts, inputs / group, outputs]`.
//! - `int4`: `<param>`, `U8 [experts, inputs / 2, outputs]`, byte `[e][j][o]`
//!   holding input features `2j` (low nibble) and `2j + 1` (high nibble) of
//!   output `o`; plus `<param>_scales`, `F16 [experts, inputs / group,
//!   outputs]`.
//!
//! Groups and nibble pairs run along the input features, as above, so an
//! expert's bytes are the same number; and every tensor stays contiguous per
//! expert along its first dimension. Only routed
//! experts are packed; the trunk stays BF16. `config.json` announces the
//! container as `quantization_config: {"quant_method": "residency", "bits",
//! "group_size", "packing_version"}`.

use safetensors::Dtype;

/// Quantisation group sizes when the model description names none: those of
/// the descriptions in `profiles/models`.
pub const DEFAULT_INT8_GROUP: u64 = 128;
pub const DEFAULT_INT4_GROUP: u64 = 64;

/// Suffix of a packed weight's scales tensor (the weight keeps `.weight`).
pub const SCALES_SUFFIX: &str = "scales";
/// Suffix of a packed fused parameter's scales tensor (`<param>_scales`).
pub const FUSED_SCALES_SUFFIX: &str = "_scales";

/// How routed experts are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpertFormat {
    Bf16,
    /// `bits` 8 or 4, one F16 scale per `group` input features.
    Packed {
        bits: u32,
        group: u64,
    },
}

/// One stored tensor of a linear weight: name suffix, dtype, shape.
pub type StoredTensor = (&'static str, Dtype, Vec<usize>);

impl ExpertFormat {
    /// The format's name, as model descriptions and `--dtype` spell it.
    pub fn name(self) -> &'static str {
        match self {
            ExpertFormat::Bf16 => "bf16",
            ExpertFormat::Packed { bits: 8, .. } => "int8",
            ExpertFormat::Packed { .. } => "int4",
        }
    }

    /// Quantisation group size, 0 when unquantised (as `ModelIdentity` has it).
    pub fn group_size(self) -> u64 {
        match self {
            ExpertFormat::Bf16 => 0,
            ExpertFormat::Packed { group, .. } => group,
        }
    }

    /// Why this format cannot store a weight with `cols` input features, if it cannot.
    pub fn unfit_for(self, cols: usize) -> Option<String> {
        match self {
            ExpertFormat::Packed { group, .. } if !(cols as u64).is_multiple_of(group) => Some(
                format!("group size {group} does not divide {cols} input features"),
            ),
            _ => None,
        }
    }

    /// The stored tensors of a `[rows, cols]` linear weight (see the module
    /// doc); `cols` fits the format (`unfit_for` is `None`).
    pub fn linear(self, rows: usize, cols: usize) -> Vec<StoredTensor> {
        match self {
            ExpertFormat::Bf16 => vec![("weight", Dtype::BF16, vec![rows, cols])],
            ExpertFormat::Packed { bits, group } => {
                let (dtype, packed_cols) = if bits == 8 {
                    (Dtype::I8, cols)
                } else {
                    (Dtype::U8, cols / 2)
                };
                vec![
                    ("weight", dtype, vec![rows, packed_cols]),
                    (SCALES_SUFFIX, Dtype::F16, vec![rows, cols / group as usize]),
                ]
            }
        }
    }

    /// The stored tensors of a fused parameter of `experts` matrices of
    /// `inputs` x `outputs` in `x @ W` orientation (see the module doc): name
    /// suffixes appended to the parameter's name, dtypes, shapes. `inputs`
    /// fits the format.
    pub fn fused(self, experts: usize, inputs: usize, outputs: usize) -> Vec<StoredTensor> {
        match self {
            ExpertFormat::Bf16 => vec![("", Dtype::BF16, vec![experts, inputs, outputs])],
            ExpertFormat::Packed { bits, group } => {
                let (dtype, packed_inputs) = if bits == 8 {
                    (Dtype::I8, inputs)
                } else {
                    (Dtype::U8, inputs / 2)
                };
                vec![
                    ("", dtype, vec![experts, packed_inputs, outputs]),
                    (
                        FUSED_SCALES_SUFFIX,
                        Dtype::F16,
                        vec![experts, inputs / group as usize, outputs],
                    ),
                ]
            }
        }
    }
}

/// Bytes of a tensor of `dtype` and `shape`.
pub fn tensor_bytes(dtype: Dtype, shape: &[usize]) -> u64 {
    let elements: u64 = shape.iter().map(|&d| d as u64).product();
    elements * dtype.bitsize() as u64 / 8
}

#[cfg(test)]
mod tests;

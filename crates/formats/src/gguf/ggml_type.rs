//! The tensor element types a GGUF file may hold (ggml's `ggml_type` ids)
//! and their storage: each type packs `block_elements` values along a
//! tensor's first (innermost) dimension into `block_bytes` bytes. The
//! numbers are the block layouts of ggml's `ggml-common.h` (`QK_K` = 256
//! for the K-quants and most IQ types), as gguf-py lists them.

/// One ggml element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block_elements: u64,
    pub block_bytes: u64,
}

const QK_K: u64 = 256;

const fn t(id: u32, name: &'static str, block_elements: u64, block_bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block_elements,
        block_bytes,
    }
}

/// Every type id in use; 4 and 5 (Q4_2, Q4_3), 31-33 and 36-38 (the
/// repacked Q4_0_x_y and IQ4_NL_x_y, now done at load time) were removed
/// from ggml and are refused as unknown.
pub const GGML_TYPES: [GgmlType; 35] = [
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 2 + 16),
    t(3, "Q4_1", 32, 2 + 2 + 16),
    t(6, "Q5_0", 32, 2 + 4 + 16),
    t(7, "Q5_1", 32, 2 + 2 + 4 + 16),
    t(8, "Q8_0", 32, 2 + 32),
    t(9, "Q8_1", 32, 4 + 4 + 32),
    t(10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
    t(11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    t(12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12),
    t(13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
    t(14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
    t(15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8),
    t(16, "IQ2_XXS", QK_K, 2 + QK_K / 4),
    t(17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
    t(18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8),
    t(19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    t(20, "IQ4_NL", 32, 2 + 16),
    t(21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    t(22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    t(23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", QK_K, 2 + 4 * 13),
    t(35, "TQ2_0", QK_K, 2 + 64),
    t(39, "MXFP4", 32, 1 + 16),
    t(40, "NVFP4", 64, 4 + 32),
    t(41, "Q1_0", 128, 2 + 16),
    t(42, "Q2_0", 64, 2 + 16),
];

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|t| t.id == id)
    }

    /// Bytes of a tensor of this type with dimensions `dims` (innermost
    /// first), or why it cannot be stored: its rows must be whole blocks.
    pub fn tensor_bytes(self, dims: &[u64]) -> Result<u64, String> {
        let row = dims.first().copied().unwrap_or(1);
        if row % self.block_elements != 0 {
            return Err(format!(
                "has rows of {row} values, not a multiple of {}'s block of {}",
                self.name, self.block_elements
            ));
        }
        let rows = dims[1..]
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or("has more elements than fit in 64 bits")?;
        (row / self.block_elements)
            .checked_mul(self.block_bytes)
            .and_then(|b| b.checked_mul(rows))
            .ok_or_else(|| "has more bytes than fit in 64 bits".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_are_the_ggml_layouts() {
        // By hand from the block structs: Q4_0 = f16 scale + 32 nibbles;
        // Q4_K = 2 f16 + 12 scale bytes + 128 nibble bytes per 256; Q6_K =
        // 128 low nibbles + 64 high bits + 16 scales + f16; MXFP4 = an e8m0
        // scale + 16 bytes of fp4 per 32.
        let bytes = |name: &str| {
            let t = GGML_TYPES.iter().find(|t| t.name == name).unwrap();
            (t.block_elements, t.block_bytes)
        };
        assert_eq!(bytes("Q4_0"), (32, 18));
        assert_eq!(bytes("Q8_0"), (32, 34));
        assert_eq!(bytes("Q4_K"), (256, 144));
        assert_eq!(bytes("Q5_K"), (256, 176));
        assert_eq!(bytes("Q6_K"), (256, 210));
        assert_eq!(bytes("Q2_K"), (256, 84));
        assert_eq!(bytes("Q3_K"), (256, 110));
        assert_eq!(bytes("IQ4_XS"), (256, 136));
        assert_eq!(bytes("IQ2_XXS"), (256, 66));
        assert_eq!(bytes("IQ1_M"), (256, 56));
        assert_eq!(bytes("MXFP4"), (32, 17));
        assert_eq!(bytes("BF16"), (1, 2));
        // Ids are unique.
        let mut ids: Vec<u32> = GGML_TYPES.iter().map(|t| t.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), GGML_TYPES.len());
        assert!(GgmlType::from_id(4).is_none() && GgmlType::from_id(31).is_none());
    }

    #[test]
    fn tensor_bytes_are_whole_blocks_per_row() {
        let q4_0 = GgmlType::from_id(2).unwrap();
        // 2048 x 768 x 128 experts: 64 blocks a row of 18 bytes.
        assert_eq!(
            q4_0.tensor_bytes(&[2048, 768, 128]),
            Ok(64 * 18 * 768 * 128)
        );
        let q4_k = GgmlType::from_id(12).unwrap();
        assert!(q4_k
            .tensor_bytes(&[100, 4])
            .unwrap_err()
            .contains("block of 256"));
        let f32 = GgmlType::from_id(0).unwrap();
        assert_eq!(f32.tensor_bytes(&[5]), Ok(20));
        assert!(f32.tensor_bytes(&[u64::MAX, 2]).is_err());
    }
}

//! The workspace's one pseudo-random generator: xorshift64* (Vigna), seeded
//! by hand, no dependency, the same sequence on every machine. Synthetic
//! traces, benchmark routes, generated checkpoints, calibration buffers and
//! random reads all draw from it, so a seed names one sequence everywhere.

/// xorshift64*. A state given by hand must not be zero (zero stays zero
/// for ever); [`Rng::seeded`] takes any seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The generator of `seed`, any `u64` (0 included): the seed times the
    /// golden ratio's 64 bits, odd, so that near seeds start far apart.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (> 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Fills `bytes` with one output per 8 bytes, little-endian, the last
    /// cut to what is left.
    pub fn fill_bytes(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_outputs_little_endian() {
        let mut a = Rng(7);
        let mut bytes = [0u8; 12];
        a.fill_bytes(&mut bytes);
        let mut b = Rng(7);
        let (first, second) = (b.next_u64().to_le_bytes(), b.next_u64().to_le_bytes());
        assert_eq!(bytes[..8], first);
        assert_eq!(bytes[8..], second[..4]);
    }
}

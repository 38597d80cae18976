//! Block floating point: a block of 32 FP16 activations aligned to the block's largest exponent.
//!
//! Rule (docs/numerics.md, "Block alignment"): with `W` = `act_mantissa_bits` (signed width, 8..=16), and for
//! each finite element its significand `s` and exponent `e` per [`fp16::parts`](super::fp16::parts)
//! (subnormals read with exponent 1), let `E` be the largest `e` in the block (1 for an all-zero block).
//! Element j becomes the signed integer
//!
//! `a_j = sign_j * trunc(s_j * 2^(e_j - E + W - 12))`
//!
//! (the magnitude is shifted, then the sign applied: truncation toward zero), and the block's value is
//! `a_j * 2^(E - W - 13)`. For W >= 12 the largest element keeps its whole 11-bit significand; smaller
//! elements lose the bits that fall below the block's last mantissa bit. For W = 16 the largest magnitude
//! is 2047 * 16 = 32752, so `a_j` fits W bits. Infinite or NaN elements set `nonfinite` (the whole result
//! becomes NaN downstream) and align as 0.

use super::fp16::parts;
use super::BLOCK;

/// One aligned block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlignedBlock {
    /// Signed mantissas, each within `W` bits.
    pub mant: [i32; BLOCK],
    /// Exponent of the block's least significant mantissa bit: element value = mant * 2^scale_exp.
    pub scale_exp: i32,
    /// Some element was infinite or NaN.
    pub nonfinite: bool,
}

impl AlignedBlock {
    /// Sum of the mantissas (exact): the `sum(x_block)` that the block minimum `m` multiplies.
    pub fn mant_sum(&self) -> i64 {
        self.mant.iter().map(|&a| i64::from(a)).sum()
    }
}

/// Aligns one block of FP16 activations (given as bits) to `bits` signed mantissa bits.
/// `x` may be shorter than a block; missing elements are zero.
pub fn align_block(x: &[u16], bits: u32) -> AlignedBlock {
    debug_assert!((8..=16).contains(&bits) && x.len() <= BLOCK);
    let w = bits as i32;
    let mut nonfinite = false;
    let mut emax = 1;
    for &b in x {
        match parts(b) {
            Some(p) => emax = emax.max(p.exponent),
            None => nonfinite = true,
        }
    }
    let mut mant = [0i32; BLOCK];
    for (a, &b) in mant.iter_mut().zip(x) {
        if let Some(p) = parts(b) {
            let shift = p.exponent - emax + w - 12;
            let mag = if shift >= 0 {
                p.significand << shift
            } else if shift > -32 {
                p.significand >> -shift
            } else {
                0
            } as i32;
            *a = if p.negative { -mag } else { mag };
        }
    }
    AlignedBlock { mant, scale_exp: emax - w - 13, nonfinite }
}

/// Aligns a whole activation vector, block by block (the last block zero-padded).
pub fn align_vector(x: &[u16], bits: u32) -> Vec<AlignedBlock> {
    x.chunks(BLOCK).map(|c| align_block(c, bits)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::fp16::{f16_to_f32, f32_to_f16};

    fn value(b: &AlignedBlock, j: usize) -> f64 {
        f64::from(b.mant[j]) * 2f64.powi(b.scale_exp)
    }

    #[test]
    fn the_largest_element_is_exact_and_mantissas_fit() {
        for bits in [12, 16] {
            for &top in &[1.0f32, 3000.0, 65504.0, 6.1e-5, 1e-7] {
                let x: Vec<u16> = (0..32).map(|j| f32_to_f16(if j == 5 { -top } else { top / (j as f32 + 1.5) })).collect();
                let b = align_block(&x, bits);
                assert_eq!(value(&b, 5), f64::from(f16_to_f32(x[5])), "bits {bits} top {top}");
                let lim = 1i32 << (bits - 1);
                assert!(b.mant.iter().all(|&a| -lim < a && a < lim));
                for (j, &xj) in x.iter().enumerate() {
                    // Truncation toward zero: never larger in magnitude, error below one block ulp.
                    let exact = f64::from(f16_to_f32(xj));
                    let v = value(&b, j);
                    assert!(v.abs() <= exact.abs() && (exact - v).abs() < 2f64.powi(b.scale_exp));
                }
            }
        }
    }

    #[test]
    fn outlier_zeroes_small_values_only_below_the_block_ulp() {
        let mut x = vec![f32_to_f16(0.75); 32];
        x[0] = f32_to_f16(3000.0);
        let b = align_block(&x, 16);
        // 3000 has exponent 2^11: ulp of the block at W=16 is 2^(11-14) = 1/8, so 0.75 survives exactly.
        assert_eq!(value(&b, 1), 0.75);
        let b = align_block(&x, 12);
        // At W=12 the block ulp is 2: 0.75 truncates to 0.
        assert_eq!(value(&b, 1), 0.0);
    }

    #[test]
    fn nonfinite_and_empty() {
        let b = align_block(&[0x7C00, 0x3C00], 16);
        assert!(b.nonfinite);
        assert_eq!(b.mant[0], 0);
        let b = align_block(&[], 16);
        assert_eq!(b.mant_sum(), 0);
        assert_eq!(b.scale_exp, 1 - 16 - 13);
    }
}

//! FP16 handling.
//!
//! Rules (docs/numerics.md, "FP16"):
//! - FP16 -> FP32 is exact (every FP16 value, subnormals included, is an FP32 value).
//! - FP32 -> FP16 rounds to nearest, ties to even; magnitudes that round above 65504 become infinity;
//!   subnormal FP16 results are kept (gradual underflow), not flushed.
//! - A NaN result is always the canonical quiet NaN (FP16 0x7E00, FP32 0x7FC0_0000), whatever the input NaN.
//!
//! The conversions are those of the `half` crate, which implements exactly these IEEE rules; only the NaN
//! payload is canonicalized here so that the RTL need not carry payloads.

use half::f16;

/// The one FP16 NaN the datapath produces.
pub const F16_NAN: u16 = 0x7E00;
/// The one FP32 NaN the datapath produces.
pub const F32_NAN_BITS: u32 = 0x7FC0_0000;
/// The same, as a value.
pub const F32_NAN: f32 = f32::from_bits(F32_NAN_BITS);

/// FP16 bits -> FP32, exact.
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// FP32 -> FP16 bits, round to nearest even, overflow to infinity, canonical NaN.
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    if x.is_nan() {
        F16_NAN
    } else {
        f16::from_f32(x).to_bits()
    }
}

/// f64 -> FP16 bits with one rounding (round to nearest even), canonical NaN. Used by quantizers.
/// (Not `half::f16::from_f64`: it rounds some values twice, e.g. 435552254 * 2^-32 to 0x2E7E, not 0x2E7D.)
pub fn f64_to_f16(x: f64) -> u16 {
    if x.is_nan() {
        return F16_NAN;
    }
    if x.is_infinite() {
        return if x > 0.0 { 0x7C00 } else { 0xFC00 };
    }
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7FF) as i32;
    let f = i128::from(bits & ((1 << 52) - 1));
    let (sig, exp) = if e == 0 { (f, -1074) } else { (f | 1 << 52, e - 1075) };
    let signed = if bits >> 63 == 1 { -sig } else { sig };
    if sig == 0 {
        return ((bits >> 48) & 0x8000) as u16; // keep the sign of a zero
    }
    super::acc::round_fixed(signed, exp, &super::acc::F16_FORMAT) as u16
}

/// Canonicalizes an FP32 NaN.
#[inline]
pub fn canon_f32(x: f32) -> f32 {
    if x.is_nan() {
        F32_NAN
    } else {
        x
    }
}

/// A finite FP32 value as an exact `significand * 2^exponent` (significand signed, hidden bit explicit).
#[inline]
pub fn f32_parts(x: f32) -> (i128, i32) {
    let bits = x.to_bits();
    let e = ((bits >> 23) & 0xFF) as i32;
    let f = i128::from(bits & 0x7F_FFFF);
    let (sig, exp) = if e == 0 { (f, -149) } else { (f | 1 << 23, e - 150) };
    (if bits >> 31 == 1 { -sig } else { sig }, exp)
}

/// True when the FP16 value is infinite or NaN (exponent field all ones).
#[inline]
pub fn is_nonfinite(bits: u16) -> bool {
    bits & 0x7C00 == 0x7C00
}

/// The parts of a finite FP16 value: value = (-1)^sign * significand * 2^(exponent - 25), with the
/// significand's hidden bit made explicit (1024..=2047 for normals, 0..=1023 for subnormals) and the
/// exponent field of subnormals read as 1 (so the formula holds for both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F16Parts {
    pub negative: bool,
    pub significand: u32,
    pub exponent: i32,
}

/// Splits finite FP16 bits; returns `None` for infinities and NaN.
#[inline]
pub fn parts(bits: u16) -> Option<F16Parts> {
    let e = i32::from((bits >> 10) & 0x1F);
    let f = u32::from(bits & 0x3FF);
    match e {
        31 => None,
        0 => Some(F16Parts { negative: bits & 0x8000 != 0, significand: f, exponent: 1 }),
        _ => Some(F16Parts { negative: bits & 0x8000 != 0, significand: 1024 | f, exponent: e }),
    }
}

impl F16Parts {
    /// The significand with the sign applied.
    #[inline]
    pub fn signed(self) -> i64 {
        if self.negative {
            -i64::from(self.significand)
        } else {
            i64::from(self.significand)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fp16_round_trips_through_f32() {
        for b in 0..=u16::MAX {
            let x = f16_to_f32(b);
            if x.is_nan() {
                assert_eq!(f32_to_f16(x), F16_NAN);
            } else {
                assert_eq!(f32_to_f16(x), b, "{b:#06x}");
            }
        }
    }

    #[test]
    fn parts_reconstruct_every_finite_value() {
        for b in 0..=u16::MAX {
            match parts(b) {
                None => assert!(!f16_to_f32(b).is_finite()),
                Some(p) => {
                    let v = p.signed() as f64 * 2f64.powi(p.exponent - 25);
                    assert_eq!(v, f64::from(f16_to_f32(b)), "{b:#06x}");
                }
            }
        }
    }

    #[test]
    fn f32_and_f64_conversions_agree_with_exact_rounding() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for i in 0..2_000_000u32 {
            // Half of the samples in and around FP16's range, half anywhere.
            let x = if i % 2 == 0 {
                f32::from_bits(rng.gen::<u32>())
            } else {
                f32::from_bits(rng.gen_range(0x3000_0000u32..0x4800_0000) | (i & 4) << 29)
            };
            if x.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(x), f64_to_f16(f64::from(x)), "{x:e} ({:#x})", x.to_bits());
        }
        assert_eq!(f64_to_f16(435552254.0 * 2f64.powi(-32)), 11901);
        assert_eq!(f64_to_f16(-1e-30), 0x8000);
    }

    #[test]
    fn rounding_rules() {
        // Ties to even at 1 + 2^-11 (halfway between 1 and 1 + 2^-10).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3C00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3C02);
        // Overflow: 65520 is the first value that rounds past 65504.
        assert_eq!(f32_to_f16(65519.0), 0x7BFF);
        assert_eq!(f32_to_f16(65520.0), 0x7C00);
        // Gradual underflow: the smallest subnormal and half of it (tie to even -> 0).
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16(1.5 * 2f32.powi(-25)), 0x0001);
        assert_eq!(f32_to_f16(f32::from_bits(0x7F80_0001)), F16_NAN);
    }
}

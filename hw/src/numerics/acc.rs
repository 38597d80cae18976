//! The wide accumulator: an exact fixed-point sum with 32 fraction bits, and its final rounding.
//!
//! Rule (docs/numerics.md, "Accumulator"): every term added to an accumulator is an exact product
//! `int * 2^exp`; it enters as `floor(int * 2^(exp + 32))` (an arithmetic right shift: bits below 2^-32 are
//! dropped toward minus infinity). Additions are exact integer additions, so the result does not depend on
//! the order of the terms: the PE array, the simulator and any thread split give the same bits. The
//! hardware register is 96 bits (two's complement); for the operand ranges the ISA allows (at most 65535
//! columns) no sum can exceed it (see docs/numerics.md), so there is no saturation. The model holds it in an
//! `i128`. A `nonfinite` flag is sticky: any infinite or NaN input makes the final result the canonical NaN.
//! The result is rounded once, to nearest with ties to even, to FP16 or FP32 (overflow to infinity).

use super::fp16::{F16_NAN, F32_NAN};

/// Fraction bits of the accumulator.
pub const FRAC_BITS: i32 = 32;
/// Width of the hardware accumulator register, bits.
pub const ACC_BITS: u32 = 96;
/// Terms must stay below 2^MAX_TERM_BITS accumulator units.
pub const MAX_TERM_BITS: i32 = 78;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WideAcc {
    /// Value * 2^32, exact.
    pub fixed: i128,
    pub nonfinite: bool,
}

impl WideAcc {
    pub const ZERO: WideAcc = WideAcc { fixed: 0, nonfinite: false };

    /// Adds `floor(int * 2^(exp + 32))`. A term of magnitude 2^78 or more (2^46 in value; only an FP32
    /// operand can be that large) sets `nonfinite` instead: with at most 2^16 terms the register then never
    /// overflows.
    #[inline]
    pub fn add_scaled(&mut self, int: i128, exp: i32) {
        let sh = exp + FRAC_BITS;
        let bits = 128 - int.unsigned_abs().leading_zeros() as i32;
        if bits + sh > MAX_TERM_BITS {
            self.nonfinite = true;
        } else {
            self.fixed += shift_floor(int, sh);
        }
    }

    /// Adds a datapath term `floor(int * 2^(exp + 32))` that is below the term limit by construction: the
    /// hybrid block terms (at most 76 bits on the accumulator grid) and the FP16 x FP16 products (at most
    /// 64; docs/numerics.md, "Accumulator"). The same result as [`add_scaled`](Self::add_scaled), computed
    /// without branches on the data (the simulator's hot path).
    #[inline(always)]
    pub fn add_term(&mut self, int: i64, exp: i32) {
        let sh = exp + FRAC_BITS;
        debug_assert!(64 - int.unsigned_abs().leading_zeros() as i32 + sh <= MAX_TERM_BITS, "datapath term too large");
        // Both shifts, then a select: the one not selected may wrap. A right shift by 63 or more leaves 0 or
        // -1: the floor of anything smaller than one unit.
        let left = i128::from(int).wrapping_shl(sh as u32);
        let right = i128::from(int.wrapping_shr((-sh).min(63) as u32));
        self.fixed += if sh >= 0 { left } else { right };
    }

    /// Adds an FP16 value exactly (every FP16 value is a multiple of 2^-24).
    pub fn add_f16(&mut self, bits: u16) {
        match super::fp16::parts(bits) {
            Some(p) => self.add_scaled(i128::from(p.signed()), p.exponent - 25),
            None => self.nonfinite = true,
        }
    }

    /// Adds an FP32 value (bits below 2^-32 floor).
    pub fn add_f32(&mut self, x: f32) {
        if x.is_finite() {
            let (sig, exp) = super::fp16::f32_parts(x);
            self.add_scaled(sig, exp);
        } else {
            self.nonfinite = true;
        }
    }

    /// Adds another accumulator (partial sums of one dot product).
    #[inline]
    pub fn merge(&mut self, other: &WideAcc) {
        self.fixed += other.fixed;
        self.nonfinite |= other.nonfinite;
    }

    /// Rounds to FP16 bits (nearest, ties to even; overflow to infinity; canonical NaN).
    #[inline]
    pub fn to_f16(&self) -> u16 {
        if self.nonfinite {
            return F16_NAN;
        }
        round_fixed(self.fixed, -FRAC_BITS, &F16_FORMAT) as u16
    }

    /// Rounds to FP32 (nearest, ties to even; overflow to infinity; canonical NaN).
    #[inline]
    pub fn to_f32(&self) -> f32 {
        if self.nonfinite {
            return F32_NAN;
        }
        f32::from_bits(round_fixed(self.fixed, -FRAC_BITS, &F32_FORMAT) as u32)
    }
}

/// Where datapath terms go ([`WideAcc::add_term`]'s contract): the accumulator itself, or a [`TermSum`] in
/// front of it. `dot::accumulate_block_sums` adds to either.
pub trait TermAcc {
    fn add_term(&mut self, int: i64, exp: i32);
    /// Makes the sum non-finite if `nonfinite`.
    fn or_nonfinite(&mut self, nonfinite: bool);
}

impl TermAcc for WideAcc {
    #[inline(always)]
    fn add_term(&mut self, int: i64, exp: i32) {
        WideAcc::add_term(self, int, exp)
    }
    #[inline(always)]
    fn or_nonfinite(&mut self, nonfinite: bool) {
        self.nonfinite |= nonfinite;
    }
}

/// The same sum as [`WideAcc::add_term`] term by term, cheaper: the simulator's matmul kernel adds two
/// terms per weight block, and 128-bit shifts and adds were most of its time.
///
/// Every term is still floored onto the grid on its own; only the additions are regrouped, and integer
/// addition is associative, so the result is the same bits. A term with `|int| < 2^40` (every hybrid block
/// term: `|d S_q| < 2^39`, `|m S_a| < 2^32`; every FP16 product: `< 2^22`) and a grid shift `exp + 32 < 16`
/// is `< 2^56` on the grid and goes into an `i64` partial sum; the partial takes at most 64 such terms
/// before it is folded into the wide accumulator (`|partial| < 64 * 2^56 = 2^62`: it never overflows). Any
/// other term (large values only) goes to the wide accumulator directly.
#[derive(Clone, Copy, Debug, Default)]
pub struct TermSum {
    acc: WideAcc,
    partial: i64,
    terms: u32,
}

impl TermSum {
    /// Terms of `|int|` below `2^SMALL_INT_BITS` ...
    const SMALL_INT_BITS: u32 = 40;
    /// ... and grid shifts below this are `< 2^56` on the grid.
    const SMALL_SHIFT: i32 = 16;
    /// Small terms per fold: `64 * 2^56 = 2^62`.
    const TERMS_PER_FOLD: u32 = 64;

    pub fn new(acc: WideAcc) -> Self {
        TermSum { acc, partial: 0, terms: 0 }
    }

    /// The sum: the accumulator with every term added.
    #[inline]
    pub fn finish(self) -> WideAcc {
        let mut acc = self.acc;
        acc.fixed += i128::from(self.partial);
        acc
    }
}

impl TermAcc for TermSum {
    #[inline(always)]
    fn add_term(&mut self, int: i64, exp: i32) {
        let sh = exp + FRAC_BITS;
        if int.unsigned_abs() >> Self::SMALL_INT_BITS != 0 || sh >= Self::SMALL_SHIFT {
            self.acc.add_term(int, exp);
            return;
        }
        // |int << sh| < 2^(40 + 15); a right shift by 63 or more leaves 0 or -1 (the floor)
        let left = int << sh.max(0);
        let right = int >> (-sh).clamp(0, 63);
        self.partial += if sh >= 0 { left } else { right };
        self.terms += 1;
        if self.terms == Self::TERMS_PER_FOLD {
            self.acc.fixed += i128::from(self.partial);
            self.partial = 0;
            self.terms = 0;
        }
    }
    #[inline(always)]
    fn or_nonfinite(&mut self, nonfinite: bool) {
        self.acc.nonfinite |= nonfinite;
    }
}

/// `floor(v * 2^sh)`; the caller keeps `v * 2^sh` within `i128`.
#[inline]
pub fn shift_floor(v: i128, sh: i32) -> i128 {
    if sh >= 0 {
        v << sh
    } else if sh > -127 {
        v >> -sh
    } else if v < 0 {
        -1
    } else {
        0
    }
}

/// An IEEE binary format for [`round_fixed`].
pub struct FloatFormat {
    /// Precision in bits, hidden bit included.
    pub precision: u32,
    /// Exponent of the smallest normal value (unbiased).
    pub emin: i32,
    /// Exponent of the largest finite value (unbiased).
    pub emax: i32,
    pub bias: i32,
    /// Total width (sign at bit width-1).
    pub width: u32,
}

pub const F16_FORMAT: FloatFormat = FloatFormat { precision: 11, emin: -14, emax: 15, bias: 15, width: 16 };
pub const F32_FORMAT: FloatFormat = FloatFormat { precision: 24, emin: -126, emax: 127, bias: 127, width: 32 };

/// Rounds the exact value `v * 2^lsb_exp` to the nearest value of `fmt`, ties to even, with subnormals and
/// overflow to infinity; returns the bit pattern. An exact zero is +0; a negative value too small to
/// represent rounds to -0 (IEEE).
///
/// Inlined (a matmul rounds every output: at a call site with a constant format the rounding specializes),
/// the 128-bit case out of line.
#[inline]
pub fn round_fixed(v: i128, lsb_exp: i32, fmt: &FloatFormat) -> u64 {
    let sign = if v < 0 { 1u64 << (fmt.width - 1) } else { 0 };
    let mag = v.unsigned_abs();
    if mag == 0 {
        return 0;
    }
    // The same rounding in 64-bit words when the magnitude fits one (every datapath output of a
    // realistic value: 64-bit shifts and counts are several times cheaper than 128-bit ones).
    if let Ok(m) = u64::try_from(mag) {
        if let Some(bits) = round_mag_u64(m, lsb_exp, fmt) {
            return sign | bits;
        }
    }
    sign | round_wide(mag, lsb_exp, fmt)
}

/// [`round_fixed`] of a magnitude the 64-bit rounding does not decide.
#[cold]
#[inline(never)]
fn round_wide(mag: u128, lsb_exp: i32, fmt: &FloatFormat) -> u64 {
    round_mag_u128(mag, lsb_exp, fmt).expect("a 128-bit magnitude always rounds")
}

/// The rounding of a nonzero magnitude `mag * 2^lsb_exp` (`round_fixed` without the sign), in the integer
/// type `$t` of `$bits` bits; `None` when the step to round at is `2^$bits` or coarser (a wider type
/// decides it; the widest returns 0: the value is below half of the step).
///
/// The kept bits and the exponent are added as one bit pattern: a normal number's kept bits carry the
/// hidden bit, which adds one to the exponent field less one (`q - emin + p - 1`), and a rounding that carries out
/// of the significand (or out of the subnormals) moves into the exponent field as IEEE's encoding does;
/// a pattern at or past infinity's is infinity. Without data-dependent branches where the magnitude is
/// rounded (the common case), which matters: a matmul rounds every output.
macro_rules! round_mag {
    ($name:ident, $t:ty, $bits:expr, $coarse:expr) => {
        #[inline(always)]
        fn $name(mag: $t, lsb_exp: i32, fmt: &FloatFormat) -> Option<u64> {
            let p = fmt.precision as i32;
            let msb = $bits - 1 - mag.leading_zeros() as i32;
            let lead_exp = msb + lsb_exp;
            // Exponent of the last kept bit: normal numbers keep `p` bits, subnormals stop at emin - (p - 1).
            let q = lead_exp.max(fmt.emin) - (p - 1);
            let shift = q - lsb_exp;
            let kept = if shift <= 0 {
                // mag < 2^(msb + 1) and -shift <= p - 1 - msb: the result is below 2^p, exact
                (mag << -shift) as u64
            } else if shift >= $bits {
                return $coarse;
            } else {
                // round to nearest, ties to even: up when the first dropped bit is set and either a later
                // dropped bit or the last kept bit is
                let kept = mag >> shift;
                let round = (mag >> (shift - 1)) & 1;
                let sticky = (mag & ((1 << (shift - 1)) - 1) != 0) as $t;
                (kept + (round & (sticky | kept))) as u64
            };
            // the exponent field less one (0 for subnormals: q = emin - (p - 1)), then the kept bits
            let below = (q - fmt.emin + p - 1) as u64;
            let inf = ((1u64 << (fmt.width - p as u32)) - 1) << (p - 1);
            Some(((below << (p - 1)) + kept).min(inf))
        }
    };
}
round_mag!(round_mag_u64, u64, 64, None);
// mag <= 2^127 <= half of a step of 2^128 or coarser (a tie at 2^127 goes to the even 0)
round_mag!(round_mag_u128, u128, 128, Some(0));

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use rand::{Rng, SeedableRng};

    /// Oracle: the FP16 value nearest to `x` (exact in f64), ties to the even pattern, found by comparing
    /// exact distances to the neighbours of a first guess.
    fn nearest_f16(x: f64) -> u16 {
        let guess = f16::from_f64(x).to_bits();
        let cands = [guess.wrapping_sub(1), guess, guess.wrapping_add(1)];
        let mut best = guess;
        let mut best_d = f64::INFINITY;
        for c in cands {
            let v = f64::from(f16::from_bits(c).to_f32());
            if !v.is_finite() || (v < 0.0) != (x < 0.0) && v != 0.0 {
                continue;
            }
            let d = (v - x).abs();
            if d < best_d || (d == best_d && c & 1 == 0) {
                best = c;
                best_d = d;
            }
        }
        if x.abs() >= 65520.0 {
            return if x > 0.0 { 0x7C00 } else { 0xFC00 };
        }
        if best & 0x7FFF == 0 && x < 0.0 { 0x8000 } else if best & 0x7FFF == 0 { 0 } else { best }
    }

    #[test]
    fn rounding_matches_ieee_conversions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for i in 0..400_000u32 {
            // Values up to 2^52 units so that f64 holds them exactly, spread over every magnitude.
            let bits = rng.gen_range(0..53);
            let mut m = rng.gen::<u64>() >> (64 - bits.max(1));
            if i % 4 < 2 && bits > 1 {
                // a tie at a random bit, or (every other time) one unit above it
                let k = rng.gen_range(1..bits);
                m = (m >> k << k) | (1 << (k - 1)) | u64::from(i % 4 == 1);
            }
            let v: i128 = m as i128 * if i % 2 == 0 { 1 } else { -1 };
            let exact = v as f64 * 2f64.powi(-32);
            let acc = WideAcc { fixed: v, nonfinite: false };
            assert_eq!(acc.to_f16(), nearest_f16(exact), "v={v}");
            assert_eq!(acc.to_f32().to_bits(), (exact as f32).to_bits(), "v={v}");
        }
    }

    /// The 64-bit rounding equals the 128-bit one wherever it answers: every magnitude below 2^64 (ties
    /// and halfway neighbours included), every scale from far below the subnormals to far above the
    /// largest value, both formats.
    #[test]
    fn rounding_in_64_bits_equals_rounding_in_128_bits() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(64);
        let mut answered = 0;
        for i in 0..2_000_000u32 {
            let bits: u32 = rng.gen_range(1..=64);
            let mut m = rng.gen::<u64>() >> (64 - bits);
            if i % 4 == 0 {
                // a tie or its neighbours at a random bit
                let k = rng.gen_range(0..bits);
                m = (m >> k << k) | (1u64 << k.saturating_sub(1)) ^ u64::from(i % 8 == 0);
            }
            if m == 0 {
                continue;
            }
            let lsb_exp = rng.gen_range(-220..120);
            for fmt in [&F16_FORMAT, &F32_FORMAT] {
                let want = round_mag_u128(u128::from(m), lsb_exp, fmt).unwrap();
                if let Some(got) = round_mag_u64(m, lsb_exp, fmt) {
                    assert_eq!(got, want, "m={m:#x} lsb_exp={lsb_exp} precision {}", fmt.precision);
                    answered += 1;
                }
            }
        }
        assert!(answered > 3_000_000, "{answered}");
    }

    #[test]
    fn add_term_equals_add_scaled_below_the_term_limit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xACC);
        for i in 0..2_000_000u32 {
            // Every size of term, both signs and the extremes, every shift from far below the grid up to
            // the limit.
            let bits = rng.gen_range(0..=63u32);
            let mut int = if bits == 0 { 0 } else { rng.gen::<i64>() >> (64 - bits) };
            if i % 1000 == 0 {
                int = [i64::MIN + 1, i64::MAX, -1, 1, 0][(i / 1000 % 5) as usize];
            }
            let used = 64 - int.unsigned_abs().leading_zeros() as i32;
            let exp = rng.gen_range(-200..=MAX_TERM_BITS - FRAC_BITS - used);
            let start = WideAcc { fixed: rng.gen::<i128>() >> rng.gen_range(30..100), nonfinite: false };
            let (mut want, mut got) = (start, start);
            want.add_scaled(i128::from(int), exp);
            got.add_term(int, exp);
            assert_eq!(got, want, "int {int} exp {exp}");
        }
    }

    /// `TermSum` against `add_term` one by one: long runs of terms at the edges of its fast path (the largest
    /// small term, `|int| = 2^40 - 1` shifted by 15, many in a row of one sign, so that a wrong fold bound
    /// would overflow the partial), terms just outside it, and far below the grid.
    #[test]
    fn term_sum_equals_add_term_one_by_one() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7E5);
        for run in 0..4000u32 {
            let start = WideAcc { fixed: rng.gen::<i128>() >> rng.gen_range(30..100), nonfinite: false };
            let (mut want, mut got) = (start, TermSum::new(start));
            let n = rng.gen_range(0..400);
            let sign = if run % 2 == 0 { 1 } else { -1 };
            for _ in 0..n {
                let (int, exp) = match run % 4 {
                    // the largest small terms, one sign
                    0 | 1 => (sign * ((1i64 << 40) - 1 - rng.gen_range(0..3)), 15 - FRAC_BITS - rng.gen_range(0..2)),
                    // just outside the fast path, both sides of each bound
                    2 => {
                        let int = sign * ((1i64 << 40) - 1 + rng.gen_range(0..3)) * if rng.gen() { 1 } else { -1 };
                        (int, rng.gen_range(14..=17) - FRAC_BITS)
                    }
                    // any datapath term
                    _ => {
                        let bits = rng.gen_range(0..=44u32);
                        let int = if bits == 0 { 0 } else { rng.gen::<i64>() >> (64 - bits) };
                        let used = 64 - int.unsigned_abs().leading_zeros() as i32;
                        (int, rng.gen_range(-200..=MAX_TERM_BITS - FRAC_BITS - used))
                    }
                };
                want.add_term(int, exp);
                TermAcc::add_term(&mut got, int, exp);
            }
            assert_eq!(got.finish(), want, "run {run}");
        }
    }

    #[test]
    fn large_values_overflow_to_infinity() {
        let acc = WideAcc { fixed: 65520i128 << 32, nonfinite: false };
        assert_eq!(acc.to_f16(), 0x7C00);
        let acc = WideAcc { fixed: -(65519i128 << 32), nonfinite: false };
        assert_eq!(acc.to_f16(), 0xFBFF);
        let acc = WideAcc { fixed: 1i128 << 94, nonfinite: false };
        assert_eq!(acc.to_f32(), 2f32.powi(62));
        // An FP32 operand too large for the register poisons the sum instead of wrapping it.
        let mut a = WideAcc::ZERO;
        a.add_f32(1e20);
        assert!(a.nonfinite);
        let mut a = WideAcc::ZERO;
        a.add_f32(2f32.powi(45));
        assert!(!a.nonfinite);
        assert_eq!(round_fixed(1, 200, &F32_FORMAT), 0x7F80_0000);
    }

    #[test]
    fn floor_and_exact_inputs() {
        let mut a = WideAcc::ZERO;
        a.add_scaled(-1, -40); // -2^-40 floors to -2^-32
        assert_eq!(a.fixed, -1);
        let mut a = WideAcc::ZERO;
        for b in 0..=u16::MAX {
            if !crate::numerics::fp16::is_nonfinite(b) {
                let mut one = WideAcc::ZERO;
                one.add_f16(b);
                assert_eq!(one.to_f16() & 0x7FFF, b & 0x7FFF, "{b:#x}");
                a.add_f16(b);
            }
        }
        // Every finite value and its negation: the sum is exactly zero.
        assert_eq!(a.fixed, 0);
        let mut a = WideAcc::ZERO;
        a.add_f32(-1.5e-3);
        assert_eq!(a.to_f32(), -1.5e-3);
        a.add_f16(0x7E00);
        assert_eq!(a.to_f16(), F16_NAN);
    }
}

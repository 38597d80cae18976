//! Transcendental approximations: exp, rsqrt, reciprocal, sigmoid, SiLU.
//!
//! Rule (docs/numerics.md, "Transcendental approximations"): each function is a fixed sequence of IEEE
//! binary32 operations (`+ - *` rounded to nearest even, comparisons), integer operations on the bit pattern
//! and constant tables given here as bit patterns. There is no division, no fused multiply-add and no libm, so
//! the RTL can reproduce every result bit for bit. Shape of each: range reduction by exponent manipulation,
//! a small table indexed by top mantissa bits, then a short polynomial (exp) or two Newton-Raphson steps
//! (rsqrt, recip), then an exponent fix-up.
//!
//! - NaN in -> [`CANONICAL_NAN_F32`] out, whatever the payload.
//! - Results whose magnitude would fall below 2^-126 (FP32 subnormal) are flushed to zero: `exp` to +0,
//!   `recip` and `silu` to a zero of the result's sign. `rsqrt` never produces one; `sigmoid` inherits the
//!   flush from `recip`.
//! - Subnormal *inputs* are exact: `rsqrt` and `recip` normalize them with a leading-zero count.
//! - Subnormal intermediates occur only inside `exp` (r*r and its products when |r| < 2^-63, everything when x
//!   itself is subnormal), and each is then added to a number over 2^23 times larger: flushing them to zero
//!   changes no result. `rsqrt` and `recip` have none (their residuals are 0 or >= 2^-24). `silu`'s product
//!   is the only place where IEEE gradual underflow and the flush meet: it is rounded as IEEE says, then a
//!   subnormal result is replaced by a signed zero (a product that rounds up to 2^-126 is kept).
//!
//! Measured errors (exhaustive sweeps, asserted by the tests below; see the docs for the table):
//! - `exp`: <= 0.528 ulp (relative 6.06e-8) over every FP32 input whose result is a normal FP32; non-decreasing.
//! - `rsqrt`: <= 1.207 ulp (relative 1.04e-7) over every positive FP32, subnormals included.
//! - `recip`: <= 1.242 ulp (relative 9.8e-8) over every FP32 whose result is neither flushed nor infinite.
//! - `sigmoid`: absolute <= 1.14e-7, relative <= 1.55e-7 (<= 2.47 ulp) over all finite FP16 inputs (relative
//!   where the result is >= 2^-126); non-decreasing.
//! - `silu`: absolute <= 1.24e-6 over all finite FP16 inputs; relative <= 1.82e-7 (<= 2.99 ulp) for x >= -87.3.
//!
//! [`measure_fp16_inputs`] and [`measure_f32_range`] are the harness the tests (and anyone changing a
//! function) use to measure these errors against an f64 reference.

use half::f16;

/// The one FP32 NaN these functions return (the datapath's canonical NaN).
pub use super::fp16::F32_NAN as CANONICAL_NAN_F32;

const SIGN_MASK: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7F80_0000;
const FRAC_MASK: u32 = 0x007F_FFFF;
const INF_BITS: u32 = 0x7F80_0000;

// ---------------------------------------------------------------------------------------------------------
// exp
// ---------------------------------------------------------------------------------------------------------

/// `EXP2_HI[j]` = 2^(j/64) rounded to nearest FP32, j = 0..63.
#[rustfmt::skip]
pub const EXP2_HI: [u32; 64] = [
    0x3F800000, 0x3F8164D2, 0x3F82CD87, 0x3F843A29, 0x3F85AAC3, 0x3F871F62, 0x3F88980F, 0x3F8A14D5,
    0x3F8B95C2, 0x3F8D1ADF, 0x3F8EA43A, 0x3F9031DC, 0x3F91C3D3, 0x3F935A2B, 0x3F94F4F0, 0x3F96942D,
    0x3F9837F0, 0x3F99E046, 0x3F9B8D3A, 0x3F9D3EDA, 0x3F9EF532, 0x3FA0B051, 0x3FA27043, 0x3FA43516,
    0x3FA5FED7, 0x3FA7CD94, 0x3FA9A15B, 0x3FAB7A3A, 0x3FAD583F, 0x3FAF3B79, 0x3FB123F6, 0x3FB311C4,
    0x3FB504F3, 0x3FB6FD92, 0x3FB8FBAF, 0x3FBAFF5B, 0x3FBD08A4, 0x3FBF179A, 0x3FC12C4D, 0x3FC346CD,
    0x3FC5672A, 0x3FC78D75, 0x3FC9B9BE, 0x3FCBEC15, 0x3FCE248C, 0x3FD06334, 0x3FD2A81E, 0x3FD4F35B,
    0x3FD744FD, 0x3FD99D16, 0x3FDBFBB8, 0x3FDE60F5, 0x3FE0CCDF, 0x3FE33F89, 0x3FE5B907, 0x3FE8396A,
    0x3FEAC0C7, 0x3FED4F30, 0x3FEFE4BA, 0x3FF28177, 0x3FF5257D, 0x3FF7D0DF, 0x3FFA83B3, 0x3FFD3E0C,
];

/// `EXP2_LO[j]` = 2^(j/64) - `EXP2_HI[j]` (exact real difference) rounded to nearest FP32; with it the table
/// carries ~48 bits and its rounding no longer costs up to half an ulp (measured: exp is then also monotone,
/// which it is not with EXP2_HI alone).
#[rustfmt::skip]
pub const EXP2_LO: [u32; 64] = [
    0x00000000, 0xB1C43FD0, 0xB34EA7A9, 0xB2F14C87, 0x334F9891, 0xB352C2E6, 0xB37EDA4B, 0x336A92DE,
    0xB260ABA1, 0x3336FCB7, 0xB3697465, 0x330628CD, 0x33675624, 0x32BC4F9C, 0xB32E0212, 0x32DC8061,
    0x33231B71, 0xB359BE90, 0xB30C5563, 0xB331A601, 0x33412342, 0x31FB9715, 0x30C3125A, 0xB323EC33,
    0xB32C9D5E, 0xB3162D36, 0xB3162B08, 0xB314AD82, 0xB22DEAF6, 0xB3252DEB, 0xB37C5AA8, 0x32154889,
    0x32CFE77A, 0xB266B974, 0x330EC5F7, 0xB31BD983, 0xB3414FE8, 0xB3130B1A, 0xB2D6663E, 0xB2976DA2,
    0x320AA837, 0xB2DD5119, 0xB37323A2, 0xB006C6C2, 0x3228FC24, 0xB2944353, 0xB35C1DAA, 0xB3286024,
    0xB2D4A58A, 0xB2F61D41, 0xB3504A1C, 0xB37B43E3, 0xB21EAB59, 0x33657D15, 0xB2441BE6, 0x33207898,
    0xB24116DE, 0x3276CCA1, 0xB348464A, 0x32F167FF, 0x32292436, 0x336615A2, 0xB2923758, 0x31CF486C,
];

/// 64/ln 2, rounded to FP32 (only picks n; its rounding does not affect accuracy).
pub const EXP_INV_C: f32 = f32::from_bits(0x42B8_AA3B); // 92.33248
/// ln2/64 = C_HI + C_LO. C_HI = 710 * 2^-16 has 10 significant bits, so n * C_HI is exact for |n| < 2^14.
pub const EXP_C_HI: f32 = f32::from_bits(0x3C31_8000); // 0.010833740234375
/// ln2/64 - C_HI, rounded to FP32.
pub const EXP_C_LO: f32 = f32::from_bits(0xB65E_8083); // -3.3155382e-6
/// 1/6 rounded to FP32 (Taylor coefficient of r^3).
pub const EXP_P3: f32 = f32::from_bits(0x3E2A_AAAB);
/// 1.5 * 2^23: adding it to |v| < 2^22 rounds v to the nearest integer (ties to even), which then sits in
/// the low mantissa bits.
pub const ROUND_SHIFTER: f32 = 12_582_912.0;
/// e^89 > FP32 max and e^-89 < 2^-126, so beyond these the answer is known; also keeps |n| < 2^14.
pub const EXP_HI: f32 = 89.0;
pub const EXP_LO: f32 = -89.0;

/// e^x.
///
/// Algorithm (C = ln2/64):
/// 1. NaN -> canonical NaN; x > 89 (incl. +inf) -> +inf; x < -89 (incl. -inf) -> +0.
/// 2. n = round(x * (64/ln2)) via the 1.5*2^23 shifter; nf = n as FP32 (exact).
/// 3. r = (x - nf*C_HI) - nf*C_LO (Cody-Waite: the first product and the first subtraction are exact),
///    |r| <= ~ln2/128.
/// 4. q = r + r*r*(0.5 + r*(1/6))  (degree-3 Taylor of e^r - 1; truncation error < 4e-11).
/// 5. j = n & 63, s = `EXP2_HI[j]`, s_lo = `EXP2_LO[j]` (2^(j/64) = s + s_lo to ~2^-48);
///    p = s + (s_lo + s*q), p in [0.99, 2).
/// 6. e^x = p * 2^(n >> 6) by adding (n >> 6) to p's exponent field. If the biased exponent would be >= 255
///    the result is +inf; if <= 0 (p * 2^(n >> 6) < 2^-126) it is +0 (flush), decided on p, not on e^x.
///
/// Written without branches (the special cases are selects at the end, the core computed on `x` clamped
/// into range), so that a loop of it vectorizes: the online softmax's exponentials of a row of positions
/// ([`super::vector::OnlineSoftmax::steps`]).
#[inline]
pub fn exp(x: f32) -> f32 {
    // the core on x within [-89, 89] (NaN: -89, which `clamp` would keep NaN); the cases outside are selected
    // at the end
    #[allow(clippy::manual_clamp)]
    let xc = x.max(EXP_LO).min(EXP_HI);
    // |x * 64/ln2| <= 8218, so t lies in [2^23, 2^24) where the FP32 ulp is 1 and the low bits hold n.
    let t = xc * EXP_INV_C + ROUND_SHIFTER;
    let n = t.to_bits() as i32 - ROUND_SHIFTER.to_bits() as i32;
    let nf = t - ROUND_SHIFTER;
    let r = (xc - nf * EXP_C_HI) - nf * EXP_C_LO;
    let q = r + (r * r) * (0.5 + r * EXP_P3);
    let j = (n & 63) as usize;
    let s = f32::from_bits(EXP2_HI[j]);
    // s*(1 + q) with the table's low part folded into the small term: one rounding of consequence, the last.
    let p = s + (f32::from_bits(EXP2_LO[j]) + s * q);
    let m = n >> 6; // arithmetic shift: floor(n / 64)
    let pb = p.to_bits() as i32;
    let biased = (pb >> 23) + m; // p > 0, so the sign bit is clear
    let scaled = f32::from_bits((pb + (m << 23)) as u32);
    let y = if biased >= 255 { f32::INFINITY } else if biased <= 0 { 0.0 } else { scaled };
    let y = if x > EXP_HI { f32::INFINITY } else if x < EXP_LO { 0.0 } else { y };
    if x.is_nan() { CANONICAL_NAN_F32 } else { y }
}

/// [`exp`] of each element of `xs`, in place: eight at a time with AVX2 where the CPU has it (the same
/// operations in the same order in every lane, so the same bits: tested), else one by one.
pub fn exp_in_place(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present.
        unsafe { exp_avx2::exp_in_place(xs) };
        return;
    }
    for x in xs {
        *x = exp(*x);
    }
}

#[cfg(target_arch = "x86_64")]
mod exp_avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn exp_in_place(xs: &mut [f32]) {
        let mut chunks = xs.chunks_exact_mut(8);
        for c in &mut chunks {
            _mm256_storeu_ps(c.as_mut_ptr(), exp8(_mm256_loadu_ps(c.as_ptr())));
        }
        for x in chunks.into_remainder() {
            *x = exp(*x);
        }
    }

    /// [`exp`] in eight lanes, step for step.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn exp8(x: __m256) -> __m256 {
        let f = _mm256_set1_ps;
        // x.max(EXP_LO).min(EXP_HI): maxps gives its second operand where x is NaN, as f32::max does
        let xc = _mm256_min_ps(_mm256_max_ps(x, f(EXP_LO)), f(EXP_HI));
        let t = _mm256_add_ps(_mm256_mul_ps(xc, f(EXP_INV_C)), f(ROUND_SHIFTER));
        let n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(ROUND_SHIFTER.to_bits() as i32));
        let nf = _mm256_sub_ps(t, f(ROUND_SHIFTER));
        let r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(nf, f(EXP_C_HI))), _mm256_mul_ps(nf, f(EXP_C_LO)));
        let q = _mm256_add_ps(r, _mm256_mul_ps(_mm256_mul_ps(r, r), _mm256_add_ps(f(0.5), _mm256_mul_ps(r, f(EXP_P3)))));
        let j = _mm256_and_si256(n, _mm256_set1_epi32(63));
        let s = _mm256_i32gather_ps::<4>(EXP2_HI.as_ptr() as *const f32, j);
        let lo = _mm256_i32gather_ps::<4>(EXP2_LO.as_ptr() as *const f32, j);
        let p = _mm256_add_ps(s, _mm256_add_ps(lo, _mm256_mul_ps(s, q)));
        let m = _mm256_srai_epi32::<6>(n);
        let pb = _mm256_castps_si256(p);
        let biased = _mm256_add_epi32(_mm256_srai_epi32::<23>(pb), m);
        let scaled = _mm256_castsi256_ps(_mm256_add_epi32(pb, _mm256_slli_epi32::<23>(m)));
        let inf = f(f32::INFINITY);
        let zero = _mm256_setzero_ps();
        let over = _mm256_castsi256_ps(_mm256_cmpgt_epi32(biased, _mm256_set1_epi32(254)));
        let under = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(1), biased));
        let y = _mm256_blendv_ps(_mm256_blendv_ps(scaled, zero, under), inf, over);
        let y = _mm256_blendv_ps(y, zero, _mm256_cmp_ps::<_CMP_LT_OQ>(x, f(EXP_LO)));
        let y = _mm256_blendv_ps(y, inf, _mm256_cmp_ps::<_CMP_GT_OQ>(x, f(EXP_HI)));
        _mm256_blendv_ps(y, f(CANONICAL_NAN_F32), _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    }

    #[cfg(test)]
    #[test]
    fn exp8_equals_exp() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("skipped: no AVX2");
            return;
        }
        // every 61st FP32 bit pattern (70 million, every exponent and sign, NaNs and infinities among
        // them), and the neighbourhood of the range ends and of 0
        let mut xs: Vec<f32> = (0..=u32::MAX / 61).map(|i| f32::from_bits(i * 61)).collect();
        for c in [EXP_LO, EXP_HI, 0.0, -0.0, 88.7, -87.3, -103.9] {
            let b = c.to_bits();
            xs.extend((b.saturating_sub(4096)..=b.saturating_add(4096)).map(f32::from_bits));
        }
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0xFFC0_0001)]);
        let want: Vec<u32> = xs.iter().map(|&x| exp(x).to_bits()).collect();
        // SAFETY: AVX2 is present.
        unsafe { exp_in_place(&mut xs) };
        let bad = xs.iter().zip(&want).filter(|(g, w)| g.to_bits() != **w).count();
        assert_eq!(bad, 0);
    }
}

// ---------------------------------------------------------------------------------------------------------
// rsqrt and recip
// ---------------------------------------------------------------------------------------------------------

/// Seeds for 1/sqrt(M), M in [1, 4). Index = parity * 64 + k, k = top 6 fraction bits. The interval is
/// [a, b) = (1 + parity) * [1 + k/64, 1 + (k+1)/64); the entry is 2*fa*fb/(fa+fb) with fa = a^-1/2,
/// fb = b^-1/2 (minimizes the largest relative error on the interval, < 2^-7.9), rounded to FP32.
#[rustfmt::skip]
pub const RSQRT_SEED: [u32; 128] = [
    // parity 0: M in [1, 2)
    0x3F7F01FB, 0x3F7D0DB7, 0x3F7B24C6, 0x3F7946BE, 0x3F777337, 0x3F75A9D1, 0x3F73EA2F, 0x3F7233FA,
    0x3F7086DE, 0x3F6EE28C, 0x3F6D46B8, 0x3F6BB319, 0x3F6A276C, 0x3F68A36D, 0x3F6726DE, 0x3F65B183,
    0x3F644323, 0x3F62DB87, 0x3F617A79, 0x3F601FC8, 0x3F5ECB44, 0x3F5D7CBD, 0x3F5C3408, 0x3F5AF0F9,
    0x3F59B368, 0x3F587B2E, 0x3F574824, 0x3F561A26, 0x3F54F112, 0x3F53CCC5, 0x3F52AD1E, 0x3F519200,
    0x3F507B4B, 0x3F4F68E2, 0x3F4E5AAA, 0x3F4D5088, 0x3F4C4A61, 0x3F4B481C, 0x3F4A49A2, 0x3F494ED9,
    0x3F4857AD, 0x3F476406, 0x3F4673D0, 0x3F4586F6, 0x3F449D64, 0x3F43B708, 0x3F42D3CD, 0x3F41F3A3,
    0x3F411678, 0x3F403C3B, 0x3F3F64DB, 0x3F3E9049, 0x3F3DBE75, 0x3F3CEF50, 0x3F3C22CC, 0x3F3B58DB,
    0x3F3A916E, 0x3F39CC79, 0x3F3909EF, 0x3F3849C3, 0x3F378BE9, 0x3F36D055, 0x3F3616FB, 0x3F355FD1,
    // parity 1: M in [2, 4)
    0x3F345155, 0x3F32EF97, 0x3F3195DB, 0x3F3043D6, 0x3F2EF93F, 0x3F2DB5D1, 0x3F2C794B, 0x3F2B436F,
    0x3F2A1402, 0x3F28EACC, 0x3F27C797, 0x3F26AA30, 0x3F259266, 0x3F24800B, 0x3F2372F3, 0x3F226AF3,
    0x3F2167E2, 0x3F206999, 0x3F1F6FF4, 0x3F1E7ACE, 0x3F1D8A06, 0x3F1C9D7A, 0x3F1BB50C, 0x3F1AD09C,
    0x3F19F00E, 0x3F191347, 0x3F183A2B, 0x3F1764A1, 0x3F169290, 0x3F15C3DF, 0x3F14F879, 0x3F143047,
    0x3F136B34, 0x3F12A92B, 0x3F11EA18, 0x3F112DE9, 0x3F10748A, 0x3F0FBDEA, 0x3F0F09F9, 0x3F0E58A4,
    0x3F0DA9DD, 0x3F0CFD93, 0x3F0C53B9, 0x3F0BAC3E, 0x3F0B0715, 0x3F0A6431, 0x3F09C385, 0x3F092502,
    0x3F08889F, 0x3F07EE4D, 0x3F075602, 0x3F06BFB3, 0x3F062B54, 0x3F0598DB, 0x3F05083E, 0x3F047972,
    0x3F03EC6E, 0x3F036129, 0x3F02D79A, 0x3F024FB7, 0x3F01C978, 0x3F0144D5, 0x3F00C1C5, 0x3F004040,
];

/// Seeds for 1/m, m in [1, 2). Index k = top 6 fraction bits; interval [1 + k/64, 1 + (k+1)/64); the entry
/// is 2/(a+b) = 128/(129 + 2k) (minimax relative error, < 2^-7), rounded to FP32.
#[rustfmt::skip]
pub const RECIP_SEED: [u32; 64] = [
    0x3F7E03F8, 0x3F7A232D, 0x3F76603E, 0x3F72B9D6, 0x3F6F2EB7, 0x3F6BBDB3, 0x3F6865AC, 0x3F652598,
    0x3F61FC78, 0x3F5EE95C, 0x3F5BEB62, 0x3F5901B2, 0x3F562B81, 0x3F53680D, 0x3F50B6A0, 0x3F4E168A,
    0x3F4B8728, 0x3F4907DA, 0x3F46980C, 0x3F443730, 0x3F41E4BC, 0x3F3FA030, 0x3F3D6910, 0x3F3B3EE7,
    0x3F392144, 0x3F370FBB, 0x3F3509E7, 0x3F330F63, 0x3F311FD4, 0x3F2F3ADE, 0x3F2D602B, 0x3F2B8F6A,
    0x3F29C84A, 0x3F280A81, 0x3F2655C4, 0x3F24A9CF, 0x3F23065E, 0x3F216B31, 0x3F1FD80A, 0x3F1E4CAD,
    0x3F1CC8E1, 0x3F1B4C70, 0x3F19D723, 0x3F1868C8, 0x3F17012E, 0x3F15A025, 0x3F144581, 0x3F12F114,
    0x3F11A2B4, 0x3F105A38, 0x3F0F177A, 0x3F0DDA52, 0x3F0CA29C, 0x3F0B7034, 0x3F0A42F8, 0x3F091AC7,
    0x3F07F781, 0x3F06D905, 0x3F05BF37, 0x3F04A9FA, 0x3F039930, 0x3F028CC0, 0x3F01848E, 0x3F008081,
];

/// Splits a nonzero finite magnitude (sign bit clear) into (e, f) with |x| = (1 + f/2^23) * 2^e.
/// Subnormals are normalized with a leading-zero count, so they are handled exactly.
#[inline]
fn unpack(mag: u32) -> (i32, u32) {
    let ef = (mag >> 23) as i32;
    let frac = mag & FRAC_MASK;
    if ef != 0 {
        (ef - 127, frac)
    } else {
        let sh = frac.leading_zeros() - 8; // moves the leading one to bit 23
        (-126 - sh as i32, (frac << sh) & FRAC_MASK)
    }
}

/// 1/sqrt(x).
///
/// Algorithm:
/// 1. NaN, x < 0 (incl. -inf) -> canonical NaN; +0 and -0 -> +inf; +inf -> +0.
/// 2. x = (1 + f) * 2^e (subnormals normalized). With odd = e & 1: M = (1 + f) * 2^odd in [1, 4) and
///    x = M * 2^(e - odd), e - odd even.
/// 3. y0 = RSQRT_SEED[odd * 64 + top 6 bits of f].
/// 4. Two Newton steps, each `t = (M*y)*y; y = y + (0.5*y)*(1 - t)`. In this residual form 1 - t and 0.5*y
///    are exact, so only the rounding of t (about 1.5 * 2^-24) and the final add reach y.
/// 5. Result = y * 2^(-(e - odd)/2) by subtracting (e - odd)/2 from y's exponent field. y is in (0.5, 1],
///    so for every positive finite x the result is a normal FP32 (between 2^-64 and 2^75): no overflow,
///    no flush.
pub fn rsqrt(x: f32) -> f32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return CANONICAL_NAN_F32;
    }
    if bits & !SIGN_MASK == 0 {
        return f32::INFINITY;
    }
    if bits & SIGN_MASK != 0 {
        return CANONICAL_NAN_F32;
    }
    if bits == INF_BITS {
        return 0.0;
    }
    let (e, frac) = unpack(bits);
    let odd = e & 1;
    let m = f32::from_bits(((127 + odd as u32) << 23) | frac);
    let mut y = f32::from_bits(RSQRT_SEED[((odd as u32) << 6 | frac >> 17) as usize]);
    // Seed error < 2^-7.9 -> after step 1 < 2^-15 -> after step 2 < 2^-30 (plus rounding).
    let t = (m * y) * y;
    y = y + (0.5 * y) * (1.0 - t);
    let t = (m * y) * y;
    y = y + (0.5 * y) * (1.0 - t);
    let half_e = (e - odd) >> 1; // exact: e - odd is even
    f32::from_bits((y.to_bits() as i32 - (half_e << 23)) as u32)
}

/// 1/x.
///
/// Algorithm:
/// 1. NaN -> canonical NaN; +-0 -> +-inf; +-inf -> +-0.
/// 2. |x| = m * 2^e, m in [1, 2) (subnormals normalized).
/// 3. y0 = RECIP_SEED[top 6 bits of m's fraction].
/// 4. Two Newton steps, each `y = y + y*(1 - m*y)` (residual form: 1 - m*y is exact).
/// 5. |1/x| = y * 2^-e by subtracting e from y's exponent field (y in (0.5, 1]). A biased exponent >= 255
///    gives +-inf (only subnormal x, |x| <= 2^-128); <= 0, i.e. a result below 2^-126, gives +-0 (flush:
///    every |x| > 2^126). The sign is x's.
pub fn recip(x: f32) -> f32 {
    let bits = x.to_bits();
    if x.is_nan() {
        return CANONICAL_NAN_F32;
    }
    let sign = bits & SIGN_MASK;
    let mag = bits & !SIGN_MASK;
    if mag == 0 {
        return f32::from_bits(sign | INF_BITS);
    }
    if mag == INF_BITS {
        return f32::from_bits(sign);
    }
    let (e, frac) = unpack(mag);
    let m = f32::from_bits((127 << 23) | frac);
    let mut y = f32::from_bits(RECIP_SEED[(frac >> 17) as usize]);
    // Seed error < 2^-7 -> after step 1 < 2^-14 -> after step 2 < 2^-28 (plus rounding).
    y = y + y * (1.0 - m * y);
    y = y + y * (1.0 - m * y);
    let yb = y.to_bits() as i32;
    let biased = (yb >> 23) - e;
    if biased >= 255 {
        f32::from_bits(sign | INF_BITS)
    } else if biased <= 0 {
        f32::from_bits(sign)
    } else {
        f32::from_bits(sign | (yb - (e << 23)) as u32)
    }
}

// ---------------------------------------------------------------------------------------------------------
// sigmoid and SiLU
// ---------------------------------------------------------------------------------------------------------

/// Logistic sigmoid, exactly `recip(1 + exp(-x))` (one FP32 add between the two).
///
/// NaN -> canonical NaN; +inf and large x -> 1 (exp flushes to 0, recip(1) = 1); -inf and x < ~-87.3 -> +0
/// (exp overflows to inf or recip flushes).
pub fn sigmoid(x: f32) -> f32 {
    if x.is_nan() {
        return CANONICAL_NAN_F32;
    }
    recip(1.0 + exp(-x))
}

/// SiLU (swish), `x * sigmoid(x)` (one FP32 multiply), with a product below 2^-126 in magnitude flushed to
/// a zero of its sign. NaN -> canonical NaN; +inf -> +inf; -inf -> -0 (the limit; the plain product would
/// be -inf * 0 = NaN); x below ~-87.3 -> -0 because sigmoid has flushed.
pub fn silu(x: f32) -> f32 {
    if x.is_nan() {
        return CANONICAL_NAN_F32;
    }
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    flush_subnormal(x * sigmoid(x))
}

#[inline]
fn flush_subnormal(v: f32) -> f32 {
    let b = v.to_bits();
    if b & EXP_MASK == 0 {
        f32::from_bits(b & SIGN_MASK)
    } else {
        v
    }
}

// ---------------------------------------------------------------------------------------------------------
// Error measurement
// ---------------------------------------------------------------------------------------------------------

/// Largest errors of an approximation against an f64 reference over a set of inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApproxError {
    /// max |f(x) - ref(x)|.
    pub max_abs: f64,
    /// max |f(x) - ref(x)| / |ref(x)| over the inputs with |ref(x)| > 2^-126.
    pub max_rel: f64,
    /// max |f(x) - ref(x)| / ulp(ref(x)), with ulp(r) the FP32 ulp at |r|: 2^(max(floor(log2|r|), -126) - 23).
    /// A correctly rounded function scores at most 0.5.
    pub max_ulp: f64,
    /// The input with the largest ulp error (the first one met on ties); NaN when nothing was measured.
    pub worst_input: f32,
}

/// FP32 ulp at the magnitude of `r`, exact (a power of two); subnormal range included.
fn f32_ulp(r: f64) -> f64 {
    let e = if r == 0.0 { -126 } else { ((r.abs().to_bits() >> 52) & 0x7FF) as i32 - 1023 };
    let e = e.max(-126) - 23;
    f64::from_bits(((e + 1023) as u64) << 52)
}

struct Accum {
    err: ApproxError,
}

impl Accum {
    fn new() -> Self {
        Accum { err: ApproxError { max_abs: 0.0, max_rel: 0.0, max_ulp: 0.0, worst_input: f32::NAN } }
    }

    fn add(&mut self, x: f32, got: f32, want: f64) {
        let got = f64::from(got);
        // Equal values (infinities included) are exact; a NaN or an infinity against a finite value is an
        // infinite error.
        let abs = if got == want {
            0.0
        } else {
            let d = (got - want).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d
            }
        };
        let e = &mut self.err;
        e.max_abs = e.max_abs.max(abs);
        if want.abs() > f64::from(f32::MIN_POSITIVE) {
            e.max_rel = e.max_rel.max(abs / want.abs());
        }
        let ulp = abs / f32_ulp(want);
        if ulp > e.max_ulp || e.worst_input.is_nan() {
            e.max_ulp = e.max_ulp.max(ulp);
            e.worst_input = x;
        }
    }
}

/// Runs `f` over every FP16 bit pattern (converted exactly to FP32), skipping non-finite inputs and those
/// outside `domain`, and compares with `reference` evaluated in f64.
pub fn measure_fp16_inputs(f: fn(f32) -> f32, reference: fn(f64) -> f64, domain: impl Fn(f32) -> bool) -> ApproxError {
    let inputs = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).filter(|x| x.is_finite() && domain(*x));
    measure_f32_range(f, reference, inputs)
}

/// Same as [`measure_fp16_inputs`] over any list of FP32 inputs (non-finite ones are skipped).
pub fn measure_f32_range(
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
    inputs: impl IntoIterator<Item = f32>,
) -> ApproxError {
    let mut acc = Accum::new();
    for x in inputs.into_iter().filter(|x| x.is_finite()) {
        acc.add(x, f(x), reference(f64::from(x)));
    }
    acc.err
}

/// Every FP32 value in `[lo, hi)`, in increasing order, for `0 <= lo <= hi` finite (e.g. `[1, 4)`: 2^24
/// values, both exponent parities and every table entry of rsqrt).
pub fn f32_values_in(lo: f32, hi: f32) -> impl Iterator<Item = f32> {
    assert!(lo.is_sign_positive() && lo <= hi && hi.is_finite(), "f32_values_in wants +0 <= lo <= hi < inf");
    (lo.to_bits()..hi.to_bits()).map(f32::from_bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64; // 2^-126

    fn ref_exp(x: f64) -> f64 {
        x.exp()
    }
    fn ref_rsqrt(x: f64) -> f64 {
        1.0 / x.sqrt()
    }
    fn ref_recip(x: f64) -> f64 {
        1.0 / x
    }
    fn ref_sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }
    fn ref_silu(x: f64) -> f64 {
        x * ref_sigmoid(x)
    }

    /// e^x is a normal FP32 (neither flushed nor overflowing).
    fn exp_result_normal(x: f32) -> bool {
        (MIN_NORMAL..=f64::from(f32::MAX)).contains(&f64::from(x).exp())
    }

    /// sigmoid(x) is at least 2^-126, so not flushed (x >= -87.3125 among FP16 values).
    fn sigmoid_result_normal(x: f32) -> bool {
        ref_sigmoid(f64::from(x)) >= MIN_NORMAL
    }

    /// Asserts the documented bounds and prints the measurement (`--nocapture` shows it).
    fn check(what: &str, e: ApproxError, abs: f64, rel: f64, ulp: f64) {
        eprintln!(
            "{what}: max_abs {:.4e}  max_rel {:.4e}  max_ulp {:.4}  worst input {:e}",
            e.max_abs, e.max_rel, e.max_ulp, e.worst_input
        );
        assert!(e.max_abs <= abs, "{what}: max_abs {} > {abs}", e.max_abs);
        assert!(e.max_rel <= rel, "{what}: max_rel {} > {rel}", e.max_rel);
        assert!(e.max_ulp <= ulp, "{what}: max_ulp {} > {ulp}", e.max_ulp);
    }

    /// Every non-NaN FP16 value as FP32, ascending (infinities included).
    fn fp16_ascending() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u16::MAX).map(|b| f16::from_bits(b).to_f32()).filter(|x| !x.is_nan()).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    }

    fn nans() -> [f32; 4] {
        [f32::NAN, -f32::NAN, f32::from_bits(0x7F80_0001), f32::from_bits(0xFFC1_2345)]
    }

    fn bits(x: f32) -> u32 {
        x.to_bits()
    }

    /// Double-double product (test only: mul_add gives the exact error of a product).
    fn dd_mul((ah, al): (f64, f64), (bh, bl): (f64, f64)) -> (f64, f64) {
        let p = ah * bh;
        let e = ah.mul_add(bh, -p) + (ah * bl + al * bh);
        let s = p + e;
        (s, e - (s - p))
    }

    /// 2^(j/64) as an unevaluated sum hi + lo good to ~2^-90: f64 exp2 is only good to about an f64 ulp,
    /// which is not enough to round 2^(j/64) - `EXP2_HI[j]` correctly (it gets j = 29 wrong). One Newton
    /// step on y^64 = 2^j, with y^64 evaluated in double-double, fixes it.
    fn exp2_j64(j: usize) -> (f64, f64) {
        let y = (j as f64 / 64.0).exp2();
        let mut p = (y, 0.0);
        for _ in 0..6 {
            p = dd_mul(p, p);
        }
        let two_j = (2.0f64).powi(j as i32);
        let d = ((p.0 - two_j) + p.1) / two_j; // y^64 / 2^j - 1, ~2^-46; p.0 - two_j is exact
        (y, -y * d / 64.0) // y * (1 + d)^(-1/64) to first order; the next term is ~2^-92
    }

    // --- tables and constants are what the docs say ----------------------------------------------------

    #[test]
    fn tables_match_their_definitions() {
        for j in 0..64 {
            let (v, v_lo) = exp2_j64(j);
            let hi = (v + v_lo) as f32;
            assert_eq!(EXP2_HI[j], bits(hi), "EXP2_HI[{j}]");
            // v - hi is exact (Sterbenz); only the final rounding to FP32 remains.
            assert_eq!(EXP2_LO[j], bits(((v - f64::from(hi)) + v_lo) as f32), "EXP2_LO[{j}]");
        }
        for (i, &b) in RSQRT_SEED.iter().enumerate() {
            let (scale, k) = ((1 + i / 64) as f64, (i % 64) as f64);
            let fa = 1.0 / (scale * (1.0 + k / 64.0)).sqrt();
            let fb = 1.0 / (scale * (1.0 + (k + 1.0) / 64.0)).sqrt();
            assert_eq!(b, bits((2.0 * fa * fb / (fa + fb)) as f32), "RSQRT_SEED[{i}]");
        }
        for (k, &b) in RECIP_SEED.iter().enumerate() {
            assert_eq!(b, bits((128.0 / (129.0 + 2.0 * k as f64)) as f32), "RECIP_SEED[{k}]");
        }
    }

    #[test]
    fn exp_constants_match_their_definitions() {
        let c = std::f64::consts::LN_2 / 64.0;
        assert_eq!(EXP_INV_C, (1.0 / c) as f32);
        assert_eq!(f64::from(EXP_C_HI), 710.0 / 65536.0);
        assert_eq!(EXP_C_LO, (c - 710.0 / 65536.0) as f32);
        assert_eq!(EXP_P3, (1.0f64 / 6.0) as f32);
        assert_eq!(ROUND_SHIFTER, 1.5 * 8_388_608.0);
        // n * C_HI is exact for every n that |x| <= 89 can produce.
        let n_max = (89.0 * EXP_INV_C) as i32 + 1;
        for n in -n_max..=n_max {
            assert_eq!(f64::from(n as f32 * EXP_C_HI), f64::from(n) * f64::from(EXP_C_HI));
        }
    }

    // --- the measurement harness itself ---------------------------------------------------------------

    #[test]
    fn harness_reports_half_ulp_for_correct_rounding() {
        // A correctly rounded function is within 0.5 ulp and its worst case is close to it.
        let e = measure_f32_range(|x| (f64::from(x).sqrt()) as f32, f64::sqrt, f32_values_in(1.0, 4.0));
        assert!(e.max_ulp <= 0.5 && e.max_ulp > 0.49, "{e:?}");
        let e = measure_fp16_inputs(|x| x, |x| x, |_| true);
        assert_eq!((e.max_abs, e.max_rel, e.max_ulp), (0.0, 0.0, 0.0));
        let e = measure_fp16_inputs(|_| f32::NAN, |x| x, |x| x == 1.0);
        assert_eq!((e.max_ulp, e.worst_input), (f64::INFINITY, 1.0));
    }

    // --- exp --------------------------------------------------------------------------------------------

    #[test]
    fn exp_special_values() {
        for n in nans() {
            assert_eq!(bits(exp(n)), 0x7FC0_0000);
        }
        assert_eq!(bits(exp(f32::NEG_INFINITY)), 0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::from_bits(1)), 1.0);
        assert_eq!(exp(-f32::from_bits(1)), 1.0);
        // Overflow: ln(f32::MAX) = 88.7228391..., the largest FP32 below it still gives a finite result.
        assert_eq!(exp(88.722_83), f32::from_bits(0x7F7F_FF84));
        assert_eq!(exp(88.722_84), f32::INFINITY);
        assert_eq!(exp(88.75), f32::INFINITY);
        assert_eq!(exp(1e30), f32::INFINITY);
        // Flush: ln(2^-126) = -87.3365447...; results below 2^-126 are +0.
        assert_eq!(bits(exp(-87.336_5)), 0x0080_0166);
        assert_eq!(bits(exp(-87.34)), 0);
        assert_eq!(bits(exp(-88.0)), 0);
        assert_eq!(bits(exp(-1e30)), 0);
        // Every result over the FP16 inputs is +0, +inf or a positive normal number.
        for x in fp16_ascending() {
            let y = exp(x);
            assert!(bits(y) == 0 || y == f32::INFINITY || (y.is_normal() && y > 0.0), "exp({x}) = {y:e}");
        }
    }

    #[test]
    fn exp_error_fp16_small_inputs() {
        let e = measure_fp16_inputs(exp, ref_exp, |x| x.abs() <= 1.0);
        check("exp, FP16 |x| <= 1", e, 1.2e-7, 6.0e-8, 0.51);
    }

    #[test]
    fn exp_error_fp16_all_normal_results() {
        let e = measure_fp16_inputs(exp, ref_exp, exp_result_normal);
        check("exp, FP16 with normal result", e, f64::INFINITY, 6.0e-8, 0.52);
    }

    #[test]
    fn exp_error_f32_sample() {
        // Every 61st FP32 bit pattern whose exp is normal: ~37M inputs, all exponents and table entries.
        let inputs = (0..=u32::MAX).step_by(61).map(f32::from_bits).filter(|&x| exp_result_normal(x));
        let e = measure_f32_range(exp, ref_exp, inputs);
        check("exp, FP32 sample with normal result", e, f64::INFINITY, 6.1e-8, 0.53);
    }

    #[test]
    #[ignore = "all 2^31 FP32 inputs in [-89.5, 89.5]; about 1.5 minutes in release"]
    fn exp_error_f32_exhaustive_and_monotone() {
        // Ascending over [-89.5, 89.5] (outside it exp is constant 0 or inf): negative inputs up to -0, then +0
        // upwards. Monotonicity is checked on all of them, the error on those with a normal result.
        let neg = (0x8000_0000u32..=0xC2B3_0000).rev().map(f32::from_bits);
        let pos = (0u32..=0x42B3_0000).map(f32::from_bits);
        let mut prev = 0.0f32;
        let mut decreases = 0u64;
        let inputs = neg
            .chain(pos)
            .inspect(|&x| {
                let y = exp(x);
                decreases += u64::from(y < prev);
                prev = y;
            })
            .filter(|&x| exp_result_normal(x));
        let e = measure_f32_range(exp, ref_exp, inputs);
        check("exp, all FP32 with normal result", e, f64::INFINITY, 6.1e-8, 0.53);
        assert_eq!(decreases, 0, "exp decreases somewhere");
    }

    #[test]
    fn exp_monotone_over_fp16() {
        let v = fp16_ascending();
        for w in v.windows(2) {
            assert!(exp(w[0]) <= exp(w[1]), "exp({}) > exp({})", w[0], w[1]);
        }
    }

    // --- rsqrt ------------------------------------------------------------------------------------------

    #[test]
    fn rsqrt_special_values() {
        for n in nans() {
            assert_eq!(bits(rsqrt(n)), 0x7FC0_0000);
        }
        assert_eq!(rsqrt(0.0), f32::INFINITY);
        assert_eq!(rsqrt(-0.0), f32::INFINITY);
        assert_eq!(bits(rsqrt(f32::INFINITY)), 0);
        for neg in [-1.0, -f32::from_bits(1), -f32::MIN_POSITIVE, -4.0, f32::MIN, f32::NEG_INFINITY] {
            assert_eq!(bits(rsqrt(neg)), 0x7FC0_0000, "rsqrt({neg})");
        }
        // Exact on even powers of two, subnormal inputs included: rsqrt(4^k) = 2^-k.
        for k in -74..=63 {
            let x = (2.0f64).powi(2 * k) as f32;
            assert_eq!(f64::from(rsqrt(x)), (2.0f64).powi(-k), "rsqrt(4^{k})");
        }
        assert_eq!(bits(rsqrt(f32::MAX)), 0x1F80_0000); // 2^-64
        assert_eq!(bits(rsqrt(f32::from_bits(1))), 0x64B5_04F3); // 2^74.5, rounded
    }

    #[test]
    fn rsqrt_error_fp16() {
        let e = measure_fp16_inputs(rsqrt, ref_rsqrt, |x| x > 0.0);
        check("rsqrt, FP16 x > 0", e, f64::INFINITY, 8.3e-8, 1.06);
    }

    #[test]
    fn rsqrt_error_f32_1_to_4() {
        // 2^24 inputs: both exponent parities, every seed. rsqrt(4x) = rsqrt(x)/2 exactly, so this is the
        // bound for every positive normal FP32.
        let e = measure_f32_range(rsqrt, ref_rsqrt, f32_values_in(1.0, 4.0));
        check("rsqrt, FP32 [1, 4)", e, 7.2e-8, 1.04e-7, 1.21);
    }

    #[test]
    fn rsqrt_error_f32_subnormals() {
        let e = measure_f32_range(rsqrt, ref_rsqrt, f32_values_in(f32::from_bits(1), f32::MIN_POSITIVE));
        check("rsqrt, all FP32 subnormals", e, f64::INFINITY, 1.04e-7, 1.21);
    }

    // --- recip ------------------------------------------------------------------------------------------

    #[test]
    fn recip_special_values() {
        for n in nans() {
            assert_eq!(bits(recip(n)), 0x7FC0_0000);
        }
        assert_eq!(bits(recip(0.0)), 0x7F80_0000);
        assert_eq!(bits(recip(-0.0)), 0xFF80_0000);
        assert_eq!(bits(recip(f32::INFINITY)), 0);
        assert_eq!(bits(recip(f32::NEG_INFINITY)), 0x8000_0000);
        // Exact on powers of two with a normal result.
        for k in -127..=126 {
            let x = (2.0f64).powi(k) as f32;
            assert_eq!(f64::from(recip(x)), (2.0f64).powi(-k), "recip(2^{k})");
            assert_eq!(f64::from(recip(-x)), -(2.0f64).powi(-k), "recip(-2^{k})");
        }
        // Flush: |x| > 2^126 gives a result below 2^-126 -> signed zero.
        let two126 = f32::from_bits(0x7E80_0000);
        assert_eq!(bits(recip(two126)), 0x0080_0000);
        assert_eq!(bits(recip(f32::from_bits(0x7E80_0001))), 0);
        assert_eq!(bits(recip(-f32::from_bits(0x7E80_0001))), 0x8000_0000);
        assert_eq!(bits(recip(f32::MAX)), 0);
        assert_eq!(bits(recip(f32::MIN)), 0x8000_0000);
        // Overflow: subnormal |x| <= 2^-128 gives +-inf; just above, the result is finite.
        for b in 1..=0x0020_0000u32 {
            assert_eq!(recip(f32::from_bits(b)), f32::INFINITY);
        }
        assert_eq!(recip(-f32::from_bits(0x0020_0000)), f32::NEG_INFINITY);
        assert_eq!(bits(recip(f32::from_bits(0x0020_0001))), 0x7F7F_FFF8);
    }

    #[test]
    fn recip_is_odd_and_error_fp16() {
        for b in 0..=0x7BFFu16 {
            let x = f16::from_bits(b).to_f32();
            assert_eq!(bits(recip(-x)), bits(recip(x)) ^ SIGN_MASK);
        }
        let e = measure_fp16_inputs(recip, ref_recip, |x| x != 0.0);
        check("recip, FP16 x != 0", e, f64::INFINITY, 8.8e-8, 0.91);
    }

    #[test]
    fn recip_error_f32_1_to_2_and_monotone() {
        // 2^23 inputs: every seed. recip(2x) = recip(x)/2 exactly while the result is normal, so this is the
        // bound for every FP32 input whose result is not flushed or overflowed.
        let e = measure_f32_range(recip, ref_recip, f32_values_in(1.0, 2.0));
        check("recip, FP32 [1, 2)", e, 7.4e-8, 9.8e-8, 1.25);
        let mut prev = recip(1.0);
        for x in f32_values_in(1.0, 2.0).skip(1).chain([2.0]) {
            let y = recip(x);
            assert!(y <= prev, "recip not monotone at {x}");
            prev = y;
        }
    }

    #[test]
    fn recip_error_f32_subnormals_with_finite_result() {
        let e = measure_f32_range(recip, ref_recip, f32_values_in(f32::from_bits(0x0020_0001), f32::MIN_POSITIVE));
        check("recip, FP32 subnormals above 2^-128", e, f64::INFINITY, 9.8e-8, 1.25);
    }

    // --- sigmoid and SiLU -------------------------------------------------------------------------------

    #[test]
    fn sigmoid_special_values() {
        for n in nans() {
            assert_eq!(bits(sigmoid(n)), 0x7FC0_0000);
        }
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(-0.0), 0.5);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(bits(sigmoid(f32::NEG_INFINITY)), 0);
        assert_eq!(sigmoid(17.0), 1.0);
        assert_eq!(sigmoid(65504.0), 1.0);
        assert_eq!(bits(sigmoid(-87.5)), 0);
        assert_eq!(bits(sigmoid(-65504.0)), 0);
        for x in fp16_ascending() {
            let y = sigmoid(x);
            assert!(bits(y) == 0 || (y.is_normal() && y <= 1.0), "sigmoid({x}) = {y:e}");
        }
    }

    #[test]
    fn sigmoid_error_fp16_and_monotone() {
        let e = measure_fp16_inputs(sigmoid, ref_sigmoid, |_| true);
        check("sigmoid, all finite FP16", e, 1.2e-7, 1.6e-7, f64::INFINITY);
        let e = measure_fp16_inputs(sigmoid, ref_sigmoid, sigmoid_result_normal);
        check("sigmoid, FP16 with result >= 2^-126", e, 1.2e-7, 1.6e-7, 2.5);
        let v = fp16_ascending();
        for w in v.windows(2) {
            assert!(sigmoid(w[0]) <= sigmoid(w[1]), "sigmoid({}) > sigmoid({})", w[0], w[1]);
        }
    }

    #[test]
    fn silu_special_values() {
        for n in nans() {
            assert_eq!(bits(silu(n)), 0x7FC0_0000);
        }
        assert_eq!(bits(silu(0.0)), 0);
        assert_eq!(bits(silu(-0.0)), 0x8000_0000);
        assert_eq!(silu(f32::INFINITY), f32::INFINITY);
        assert_eq!(bits(silu(f32::NEG_INFINITY)), 0x8000_0000);
        assert_eq!(silu(65504.0), 65504.0);
        assert_eq!(bits(silu(-100.0)), 0x8000_0000);
        // Subnormal products flush to a signed zero.
        assert_eq!(bits(silu(f32::from_bits(0x0040_0000))), 0);
        assert_eq!(bits(silu(-f32::from_bits(0x0040_0000))), 0x8000_0000);
        assert_eq!(silu(f32::MIN_POSITIVE * 4.0), f32::MIN_POSITIVE * 2.0);
    }

    #[test]
    fn silu_error_fp16() {
        // Below x = -87.34 sigmoid has flushed to 0 and silu returns -0 while |x * sigmoid(x)| is still
        // ~1e-36: relative error 1 there, absolute error tiny.
        let e = measure_fp16_inputs(silu, ref_silu, |_| true);
        check("silu, all finite FP16", e, 1.3e-6, 1.0, f64::INFINITY);
        let e = measure_fp16_inputs(silu, ref_silu, sigmoid_result_normal);
        check("silu, FP16 with sigmoid >= 2^-126", e, 1.3e-6, 1.9e-7, 3.0);
    }
}

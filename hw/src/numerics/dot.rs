//! Dot products of the PE array.
//!
//! Hybrid (docs/numerics.md, "Hybrid block dot product"): per block of 32, with the activations aligned
//! ([`align_block`](super::align::align_block)) to mantissas `a_j` and block exponent `X`, and the weight
//! block's integers `q_j`, scale `d` and minimum `m`:
//!
//! - `S_q = sum a_j * q_j` and `S_a = sum a_j`, exact integers (the PE lane's multipliers and adder tree);
//! - the accumulator receives `d * S_q * 2^X` and, for W4Min, `m * S_a * 2^X`, each as an exact product
//!   `significand * S * 2^(exponent + X - 25)` floored to the accumulator's 2^-32 grid ([`WideAcc::add_scaled`]).
//!
//! FP16 x FP16 (attention, router, F16 weights): each product of FP16 significands is exact and enters the
//! accumulator the same way. A non-finite activation, weight, `d` or `m` makes the result NaN.

use super::acc::{TermAcc, WideAcc};
use super::align::{align_vector, AlignedBlock};
use super::fp16::parts;
use super::weights::{decode_block, WeightBlock, WeightFormat};

/// The two exact integer sums of one block: what the packed multipliers and the adder tree produce.
#[inline]
pub fn block_sums(x: &AlignedBlock, w: &WeightBlock) -> (i64, i64) {
    let mut sq = 0i64;
    let mut sa = 0i64;
    for (&a, &q) in x.mant.iter().zip(&w.q) {
        sq += i64::from(a) * i64::from(q);
        sa += i64::from(a);
    }
    (sq, sa)
}

/// Adds one hybrid block product to `acc`.
#[inline]
pub fn accumulate_block(acc: &mut WideAcc, x: &AlignedBlock, w: &WeightBlock) {
    let (sq, sa) = block_sums(x, w);
    accumulate_block_sums(acc, x.scale_exp, x.nonfinite, sq, sa, w.d, w.m);
}

/// The accumulator half of [`accumulate_block`], given the block's integer sums `S_q`, `S_a` (from the
/// multipliers and adder tree, or a simulator's SIMD kernel), the activation block's exponent `X` and
/// non-finite flag, and the weight block's `d` and `m`.
#[inline(always)]
pub fn accumulate_block_sums<A: TermAcc>(acc: &mut A, x_scale_exp: i32, x_nonfinite: bool, sq: i64, sa: i64, d: u16, m: Option<u16>) {
    acc.or_nonfinite(x_nonfinite);
    // |significand| < 2^11, |S_q| < 2^28, |S_a| < 2^21: the products fit i64 and are datapath terms.
    match parts(d) {
        Some(d) => acc.add_term(d.signed() * sq, d.exponent - 25 + x_scale_exp),
        None => acc.or_nonfinite(true),
    }
    if let Some(m) = m {
        match parts(m) {
            Some(m) => acc.add_term(m.signed() * sa, m.exponent - 25 + x_scale_exp),
            None => acc.or_nonfinite(true),
        }
    }
}

/// Adds one exact FP16 x FP16 product.
#[inline]
pub fn accumulate_f16_product(acc: &mut WideAcc, x: u16, w: u16) {
    match (parts(x), parts(w)) {
        (Some(a), Some(b)) => acc.add_term(a.signed() * b.signed(), a.exponent + b.exponent - 50),
        _ => acc.nonfinite = true,
    }
}

/// FP16 values split once into signed significands and exponents (`fp16::parts`), for vectors that take
/// part in many dot products (a query against every K row, a K row against every query head of its group).
#[derive(Clone, Debug)]
pub struct F16Split {
    sig: Vec<i64>,
    exp: Vec<i32>,
    nonfinite: bool,
}

impl F16Split {
    pub fn new(x: &[u16]) -> Self {
        let mut s = F16Split { sig: Vec::with_capacity(x.len()), exp: Vec::with_capacity(x.len()), nonfinite: false };
        for &b in x {
            // A non-finite element flags every dot product it enters and adds no term.
            let p = parts(b);
            s.nonfinite |= p.is_none();
            let (sig, exp) = p.map_or((0, 0), |p| (p.signed(), p.exponent));
            s.sig.push(sig);
            s.exp.push(exp);
        }
        s
    }
    pub fn len(&self) -> usize {
        self.sig.len()
    }
    pub fn is_empty(&self) -> bool {
        self.sig.is_empty()
    }
}

/// FP16 x FP16 dot product of two split vectors: each product `accumulate_f16_product` would add.
pub fn dot_f16_split(x: &F16Split, w: &F16Split) -> WideAcc {
    assert_eq!(x.len(), w.len());
    let mut acc = WideAcc { fixed: 0, nonfinite: x.nonfinite || w.nonfinite };
    for ((&xs, &xe), (&ws, &we)) in x.sig.iter().zip(&x.exp).zip(w.sig.iter().zip(&w.exp)) {
        acc.add_term(xs * ws, xe + we - 50);
    }
    acc
}

/// FP16 x FP16 dot product of two equal-length vectors (given as FP16 bits).
pub fn dot_f16(x: &[u16], w: &[u16]) -> WideAcc {
    dot_f16_split(&F16Split::new(x), &F16Split::new(w))
}

/// One matrix row against pre-aligned activations (block formats), or against the raw FP16 activations
/// (F16 format). `row` is the row's bytes in device memory; `acc` is added to (it may hold a residual).
pub fn accumulate_row(acc: &mut WideAcc, fmt: WeightFormat, x_aligned: &[AlignedBlock], x_raw: &[u16], row: &[u8]) {
    if fmt == WeightFormat::F16 {
        for (&a, w) in x_raw.iter().zip(row.chunks_exact(2)) {
            accumulate_f16_product(acc, a, u16::from_le_bytes([w[0], w[1]]));
        }
    } else {
        for (xb, wb) in x_aligned.iter().zip(row.chunks_exact(fmt.block_bytes())) {
            accumulate_block(acc, xb, &decode_block(fmt, wb));
        }
    }
}

/// Convenience: `W x` for a row-major matrix of `rows` rows with FP16 results, as one `MATMUL` computes it.
pub fn matvec_f16(fmt: WeightFormat, x: &[u16], matrix: &[u8], rows: usize, act_bits: u32) -> Vec<u16> {
    let row_bytes = fmt.row_bytes(x.len()).expect("cols a multiple of the block");
    assert_eq!(matrix.len(), rows * row_bytes);
    let aligned = align_vector(x, act_bits);
    matrix
        .chunks_exact(row_bytes)
        .map(|row| {
            let mut acc = WideAcc::ZERO;
            accumulate_row(&mut acc, fmt, &aligned, x, row);
            acc.to_f16()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::fp16::{f16_to_f32, f32_to_f16};
    use crate::numerics::weights::{dequantize_row, quantize_block};
    use crate::numerics::BLOCK;
    use rand::{Rng, SeedableRng};

    /// Activations shaped like SmolLM2's: mostly N(0,1)-ish, with outliers of a few thousand.
    fn activations(rng: &mut impl Rng, n: usize, outliers: bool) -> Vec<u16> {
        (0..n)
            .map(|_| {
                let v: f32 = if outliers && rng.gen_bool(0.02) {
                    rng.gen_range(-3000.0..3000.0)
                } else {
                    let u: f32 = rng.gen_range(-1.0..1.0);
                    u * u * u * 4.0
                };
                f32_to_f16(v)
            })
            .collect()
    }

    fn random_matrix(rng: &mut impl Rng, fmt: WeightFormat, rows: usize, cols: usize) -> Vec<u8> {
        let mut m = Vec::new();
        for _ in 0..rows * cols / BLOCK {
            let scale = 10f32.powf(rng.gen_range(-2.5..-0.5));
            let x: [f32; BLOCK] = std::array::from_fn(|_| rng.gen_range(-1.0..1.0f32) * scale + scale * 0.1);
            quantize_block(fmt, &x, &mut m);
        }
        m
    }

    /// The exact value of a row dot product and the sum of |x_j w_j| (the scale of rounding errors), in f64.
    fn exact(fmt: WeightFormat, x: &[u16], row: &[u8]) -> (f64, f64) {
        let mut w = Vec::new();
        dequantize_row_exact(fmt, row, &mut w);
        let mut s = 0.0;
        let mut abs = 0.0;
        for (&a, &b) in x.iter().zip(&w) {
            s += f64::from(f16_to_f32(a)) * b;
            abs += (f64::from(f16_to_f32(a)) * b).abs();
        }
        (s, abs)
    }

    /// q * d + m in f64 (exact, unlike the f32 reference dequantization).
    fn dequantize_row_exact(fmt: WeightFormat, row: &[u8], out: &mut Vec<f64>) {
        for blk in row.chunks_exact(fmt.block_bytes()) {
            let b = decode_block(fmt, blk);
            let d = f64::from(f16_to_f32(b.d));
            let m = b.m.map(|m| f64::from(f16_to_f32(m))).unwrap_or(0.0);
            out.extend(b.q.iter().map(|&q| f64::from(q) * d + m));
        }
    }

    /// The documented bound: with W-bit alignment each activation loses less than one block ulp
    /// (2^X <= |x_max| * 2^(13-W) / 2^(... )), so |error| <= sum_blocks 2^X * sum_j |w_j| + accumulator floors
    /// + the final FP16 rounding (half an ulp of the result).
    #[test]
    fn hybrid_dot_matches_f64_within_the_documented_bound() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let cols = 1536;
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            for bits in [12u32, 16] {
                let mut worst_rel_to_abs = 0.0f64;
                for trial in 0..40 {
                    let x = activations(&mut rng, cols, trial % 2 == 0);
                    let rows = 16;
                    let m = random_matrix(&mut rng, fmt, rows, cols);
                    let aligned = align_vector(&x, bits);
                    let rb = fmt.row_bytes(cols).unwrap();
                    for row in m.chunks_exact(rb) {
                        let mut acc = WideAcc::ZERO;
                        accumulate_row(&mut acc, fmt, &aligned, &x, row);
                        let (want, abs_sum) = exact(fmt, &x, row);
                        let got_fixed = acc.fixed as f64 * 2f64.powi(-32);
                        // Alignment bound: each a_j loses < 2^X, so per block < 2^X * sum |w_j|.
                        let mut w = Vec::new();
                        dequantize_row_exact(fmt, row, &mut w);
                        let mut bound = 0.0;
                        for (blk, xb) in aligned.iter().enumerate() {
                            let wsum: f64 = w[blk * BLOCK..(blk + 1) * BLOCK].iter().map(|v| v.abs()).sum();
                            bound += 2f64.powi(xb.scale_exp) * wsum + 2.0 * 2f64.powi(-32);
                        }
                        assert!((got_fixed - want).abs() <= bound, "{fmt:?} W={bits}: {got_fixed} vs {want}, bound {bound}");
                        // And the FP16 result is the correctly rounded accumulator.
                        let got = f64::from(f16_to_f32(acc.to_f16()));
                        let ulp = 2f64.powi((got_fixed.abs().max(6.1e-5)).log2().floor() as i32 - 10);
                        assert!((got - got_fixed).abs() <= ulp / 2.0 + 1e-12);
                        worst_rel_to_abs = worst_rel_to_abs.max((got_fixed - want).abs() / abs_sum.max(1e-30));
                    }
                }
                // Relative to sum |x w| (the scale of any dot-product error): measured 2.9e-4 at W=16
                // (dominated by blocks holding an outlier of thousands) and about 16x that at W=12.
                let limit = if bits == 16 { 1e-3 } else { 1.6e-2 };
                eprintln!("{fmt:?} W={bits}: worst |error| / sum|x w| = {worst_rel_to_abs:.3e}");
                assert!(worst_rel_to_abs < limit, "{fmt:?} W={bits}: relative error {worst_rel_to_abs}");
            }
        }
    }

    #[test]
    fn f16_dot_is_exact_before_rounding() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..200 {
            let x = activations(&mut rng, 64, true);
            let k = activations(&mut rng, 64, false);
            let acc = dot_f16(&x, &k);
            let want: f64 = x.iter().zip(&k).map(|(&a, &b)| f64::from(f16_to_f32(a)) * f64::from(f16_to_f32(b))).sum();
            // Products of magnitude >= 2^-32 are exact on the accumulator's grid; f64 itself is exact here.
            assert!((acc.fixed as f64 * 2f64.powi(-32) - want).abs() <= 64.0 * 2f64.powi(-32));
            assert_eq!(acc.to_f32(), (acc.fixed as f64 * 2f64.powi(-32)) as f32);
        }
    }

    #[test]
    fn order_of_blocks_does_not_matter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let x = activations(&mut rng, 576, true);
        let m = random_matrix(&mut rng, WeightFormat::W4Min, 1, 576);
        let aligned = align_vector(&x, 16);
        let mut fwd = WideAcc::ZERO;
        accumulate_row(&mut fwd, WeightFormat::W4Min, &aligned, &x, &m);
        let mut rev = WideAcc::ZERO;
        for (xb, wb) in aligned.iter().zip(m.chunks_exact(20)).rev() {
            accumulate_block(&mut rev, xb, &decode_block(WeightFormat::W4Min, wb));
        }
        assert_eq!(fwd, rev);
    }

    #[test]
    fn reference_dequantization_agrees_with_exact() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let m = random_matrix(&mut rng, WeightFormat::W4Min, 4, 64);
        let mut f32s = Vec::new();
        dequantize_row(WeightFormat::W4Min, &m, &mut f32s);
        let mut f64s = Vec::new();
        dequantize_row_exact(WeightFormat::W4Min, &m, &mut f64s);
        for (a, b) in f32s.iter().zip(&f64s) {
            assert!((f64::from(*a) - b).abs() <= b.abs() * 2f64.powi(-24) + 1e-12);
        }
    }

    #[test]
    fn split_dot_equals_product_by_product() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for i in 0..20_000 {
            let len = [1, 16, 64, 128][i % 4];
            // Mostly attention-like values, sometimes any bits at all (NaN, infinities, subnormals).
            let v = |rng: &mut rand::rngs::StdRng| if i % 5 == 0 { rng.gen::<u16>() } else { f32_to_f16(rng.gen_range(-8.0..8.0f32)) };
            let x: Vec<u16> = (0..len).map(|_| v(&mut rng)).collect();
            let w: Vec<u16> = (0..len).map(|_| v(&mut rng)).collect();
            let mut want = WideAcc::ZERO;
            for (&a, &b) in x.iter().zip(&w) {
                accumulate_f16_product(&mut want, a, b);
            }
            assert_eq!(dot_f16(&x, &w), want);
        }
    }

    #[test]
    fn nonfinite_inputs_give_nan() {
        let x = vec![0x7C00u16; 32];
        let mut blk = Vec::new();
        quantize_block(WeightFormat::W8, &[0.5; 32], &mut blk);
        assert_eq!(matvec_f16(WeightFormat::W8, &x, &blk, 1, 16), vec![0x7E00]);
    }
}

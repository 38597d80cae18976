//! Attention scores, fast and exact: `q . k` of two FP16 vectors as `opu_hw::numerics::dot::dot_f16_split`
//! sums it (every product `q_j k_j` floored onto the accumulator's 2^-32 grid on its own, the floored terms
//! summed exactly, the sum rounded to FP32), then `vector::scale_score`.
//!
//! The fast path computes in `f64`, exactly. `q_j 2^32` is an FP16 value times a power of two, and
//! `q_j 2^32 k_j` a product of two 11-bit significands: both exact in f64, as is its floor. Every partial
//! sum of the floored terms is an integer of magnitude at most `sum_j |q_j 2^32 k_j| + n`; when
//! `max_j |k_j| x sum_j |q_j 2^32| < 2^51` (checked as `|k_j|` below a limit per query, [`Query::limit`]) (with `n <= 1023`, the `head_dim` CSR's bound) that is below
//! 2^53, so every addition is exact, in any order: the f64 sum is the accumulator's integer `S`. Its value
//! `S 2^-32` is 0 or of magnitude between 2^-32 and 2^21, an FP32 normal range, so one f64 -> f32
//! conversion (nearest, ties to even) is `WideAcc::to_f32`'s rounding (`acc::round_fixed`), and `S + 0`
//! turns a -0 sum into the +0 that `round_fixed` gives an exact zero. Anything else (large values, a
//! non-finite element: its product makes the sum non-finite) takes opu-hw's path.
//!
//! Each K row is widened to f64 once for all the query heads of its group ([`KRow`]; with AVX2 and F16C
//! eight elements at a time, `vcvtph2ps`), and the terms are formed, floored and summed in four f64 lanes; both paths equal opu-hw's `attention_score` (tested on every kind
//! of FP16 value, at the bound and past it).

use opu_hw::numerics::dot::{dot_f16_split, F16Split};
use opu_hw::numerics::fp16::f16_to_f32;
use opu_hw::numerics::vector::{attention_score_of, scale_score};

use super::kernel::Simd;

/// 2^32: the accumulator's grid.
const GRID: f64 = 4_294_967_296.0;
/// 2^-32.
const INV_GRID: f64 = 1.0 / GRID;
/// The fast path's bound on `max |k_j| x sum |q_j 2^32|` (see the module's comment).
const FAST_BOUND: f64 = 2_251_799_813_685_248.0; // 2^51

/// A query head, prepared once for every position it is scored against.
#[derive(Clone, Debug)]
pub(crate) struct Query {
    /// `q_j 2^32`, exact (0 for a non-finite element).
    scaled: Vec<f64>,
    /// `sum_j |q_j 2^32|` (rounded: the bound has a margin for it).
    abs_sum: f64,
    nonfinite: bool,
    /// The FP16 bits, for opu-hw's path.
    bits: Vec<u16>,
}

impl Query {
    pub fn new(q: &[u16]) -> Self {
        let mut nonfinite = false;
        let scaled: Vec<f64> = q
            .iter()
            .map(|&b| {
                let x = f16_to_f32(b);
                nonfinite |= !x.is_finite();
                if x.is_finite() { f64::from(x) * GRID } else { 0.0 }
            })
            .collect();
        let abs_sum = scaled.iter().map(|x| x.abs()).sum();
        Query { scaled, abs_sum, nonfinite, bits: q.to_vec() }
    }

    pub fn len(&self) -> usize {
        self.scaled.len()
    }
}

/// A K row widened to f64 once for every query head of its group, and whether every element is below the
/// group's limit ([`Query::limit`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct KRow {
    x: Vec<f64>,
    fast: bool,
}

impl KRow {
    /// Widens `k` (FP16 bits) into this row, reusing its memory; `limit`: the smallest [`Query::limit`] of
    /// the heads it is scored against.
    pub fn fill(&mut self, simd: Simd, k: &[u16], limit: f32) {
        self.x.resize(k.len(), 0.0);
        self.fast = match simd {
            Simd::Portable => widen_portable(k, &mut self.x, limit),
            // SAFETY: AVX2 and F16C are present (detected); `x` has `k`'s length (resized above).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { avx2::widen(k, &mut self.x, limit) },
        };
    }
}

impl Query {
    /// The fast path's bound as a limit on `|k_j|`: `2^51 / sum_j |q_j 2^32|`, rounded to FP32 (the
    /// bound's margin of 4 covers the roundings).
    pub fn limit(&self) -> f32 {
        let l = FAST_BOUND / self.abs_sum;
        if self.nonfinite { 0.0 } else { (l as f32).min(f32::MAX) }
    }
}

/// The score of K row `k` (FP16 bits; `kw` its widened values) against `q`: `vector::attention_score`
/// of their bits.
pub(crate) fn score_row(simd: Simd, q: &Query, kw: &KRow, k: &[u16], scale: f32) -> f32 {
    assert!(q.len() == k.len() && kw.x.len() == k.len(), "q and k of one length");
    if q.nonfinite || !kw.fast {
        return slow(q, k, scale);
    }
    let sum: f64 = match simd {
        Simd::Portable => q.scaled.iter().zip(&kw.x).map(|(&a, &b)| (a * b).floor()).sum(),
        // SAFETY: AVX2 is present (detected); the lengths are equal (asserted).
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { avx2::sum(&q.scaled, &kw.x) },
    };
    from_sum(sum, scale)
}

/// The scores of K row `k` (FP16 bits) against every query head of its group, into `out` (one per query):
/// what [`score_row`] gives each; `limit`: the smallest [`Query::limit`] of the group; `kw`: room for the
/// widened row (the portable path's). With AVX2 the row is widened in registers and scored against up to
/// four heads in the same pass over it.
pub(crate) fn score_group(simd: Simd, qs: &[Query], limit: f32, k: &[u16], scale: f32, kw: &mut KRow, out: &mut [f32]) {
    assert!(out.len() == qs.len() && qs.iter().all(|q| q.len() == k.len()), "one score per query, q and k of one length");
    match simd {
        Simd::Portable => {
            kw.fill(simd, k, limit);
            for (o, q) in out.iter_mut().zip(qs) {
                *o = score_row(simd, q, kw, k, scale);
            }
        }
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => {
            for (qc, oc) in qs.chunks(4).zip(out.chunks_mut(4)) {
                // SAFETY: AVX2 and F16C are present (detected); the lengths are equal (asserted).
                // (one row of [`avx2_rows`])
                unsafe {
                    match qc.len() {
                        1 => avx2_rows::<1>(qc, limit, scale, oc, |_| k),
                        2 => avx2_rows::<2>(qc, limit, scale, oc, |_| k),
                        3 => avx2_rows::<3>(qc, limit, scale, oc, |_| k),
                        _ => avx2_rows::<4>(qc, limit, scale, oc, |_| k),
                    }
                }
            }
        }
    }
}

/// The scores of `n` K rows (`k_of(i)` the FP16 bits of row `i`) against every query head of the group,
/// into `out` (`n` x `qs.len()`, a row's scores together): [`score_group`] of each row, with AVX2 in one
/// pass over the rows for a group of up to four heads.
pub(crate) fn score_rows<'a>(simd: Simd, qs: &[Query], limit: f32, scale: f32, out: &mut [f32], k_of: impl Fn(usize) -> &'a [u16]) {
    let group = qs.len();
    assert!(group > 0 && out.len().is_multiple_of(group), "a score per row and query");
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx2 && group <= 4 {
        // SAFETY: AVX2 and F16C are present (detected); `avx2_rows` asserts the lengths.
        unsafe {
            match group {
                1 => avx2_rows::<1>(qs, limit, scale, out, k_of),
                2 => avx2_rows::<2>(qs, limit, scale, out, k_of),
                3 => avx2_rows::<3>(qs, limit, scale, out, k_of),
                _ => avx2_rows::<4>(qs, limit, scale, out, k_of),
            }
        }
        return;
    }
    let mut kw = KRow::default();
    for (i, o) in out.chunks_exact_mut(group).enumerate() {
        score_group(simd, qs, limit, k_of(i), scale, &mut kw, o);
    }
}

/// [`score_rows`] of `N` queries with AVX2; opu-hw's path for all of a row's scores when a query or the row
/// is outside the fast path's bound.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn avx2_rows<'a, const N: usize>(qs: &[Query], limit: f32, scale: f32, out: &mut [f32], k_of: impl Fn(usize) -> &'a [u16]) {
    assert!(qs.len() == N && qs.iter().all(|q| q.len() == qs[0].len()));
    let scaled: [&[f64]; N] = std::array::from_fn(|h| qs[h].scaled.as_slice());
    for (i, o) in out.chunks_exact_mut(N).enumerate() {
        let k = k_of(i);
        assert!(k.len() == scaled[0].len(), "q and k of one length");
        match avx2::sums::<N>(&scaled, k, limit) {
            Some(sums) => {
                for (o, sum) in o.iter_mut().zip(sums) {
                    *o = from_sum(sum, scale);
                }
            }
            None => {
                for (o, q) in o.iter_mut().zip(qs) {
                    *o = slow(q, k, scale);
                }
            }
        }
    }
}

/// The score of the exact sum `S` (`S 2^-32` the dot product): rounded to FP32 once (`+ 0`: a -0 sum is
/// the +0 of `round_fixed`; `x 2^-32` is exact, the value's magnitude being 0 or at least 2^-32), scaled.
#[inline(always)]
fn from_sum(sum: f64, scale: f32) -> f32 {
    debug_assert!(sum.is_finite());
    scale_score(((sum + 0.0) * INV_GRID) as f32, scale)
}

/// [`score_group`] of one query.
#[cfg(test)]
pub(crate) fn score(simd: Simd, q: &Query, k: &[u16], scale: f32) -> f32 {
    let mut out = [0f32];
    score_group(simd, std::slice::from_ref(q), q.limit(), k, scale, &mut KRow::default(), &mut out);
    out[0]
}

/// opu-hw's score, for vectors outside the fast path.
fn slow(q: &Query, k: &[u16], scale: f32) -> f32 {
    attention_score_of(dot_f16_split(&F16Split::new(&q.bits), &F16Split::new(k)), scale)
}

/// `k`'s values into `x`; returns whether every `|k_j| < limit` (false with a non-finite element).
fn widen_portable(k: &[u16], x: &mut [f64], limit: f32) -> bool {
    let mut fast = true;
    for (d, &b) in x.iter_mut().zip(k) {
        let v = f16_to_f32(b);
        // a NaN compares false: not fast
        fast &= v.abs() < limit;
        *d = f64::from(v);
    }
    fast
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::widen_portable`], eight elements at a time (`vcvtph2ps`, exact).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn widen(k: &[u16], x: &mut [f64], limit: f32) -> bool {
        let n = k.len();
        let (kp, xp) = (k.as_ptr(), x.as_mut_ptr());
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let lim = _mm256_set1_ps(limit);
        let mut slow = _mm256_setzero_ps();
        let mut j = 0;
        while j + 8 <= n {
            let kf = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(j) as *const __m128i));
            // not below the limit, NaN included (unordered)
            slow = _mm256_or_ps(slow, _mm256_cmp_ps(_mm256_and_ps(kf, abs_mask), lim, _CMP_NLT_UQ));
            _mm256_storeu_pd(xp.add(j), _mm256_cvtps_pd(_mm256_castps256_ps128(kf)));
            _mm256_storeu_pd(xp.add(j + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(kf, 1)));
            j += 8;
        }
        let mut fast = _mm256_movemask_ps(slow) == 0;
        // the tail (head dims are multiples of 16: none in practice)
        if j < n {
            fast &= super::widen_portable(&k[j..], &mut x[j..], limit);
        }
        fast
    }

    /// `sum_j floor(q_hj k_j)` for each of `N` queries `q_h` (`q_j 2^32`, [`super::Query`]) against the FP16
    /// row `k`, widened eight elements at a time in registers; `None` unless every `|k_j| < limit` (a NaN
    /// fails). Exact under the bound, so in any order (see the module's comment).
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn sums<const N: usize>(qs: &[&[f64]; N], k: &[u16], limit: f32) -> Option<[f64; N]> {
        let n = k.len();
        assert!(qs.iter().all(|q| q.len() == n));
        let kp = k.as_ptr();
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let lim = _mm256_set1_ps(limit);
        let mut slow = _mm256_setzero_ps();
        let mut acc0 = [_mm256_setzero_pd(); N];
        let mut acc1 = [_mm256_setzero_pd(); N];
        let mut j = 0;
        while j + 8 <= n {
            let kf = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(j) as *const __m128i));
            // not below the limit, NaN included (unordered)
            slow = _mm256_or_ps(slow, _mm256_cmp_ps(_mm256_and_ps(kf, abs_mask), lim, _CMP_NLT_UQ));
            let k0 = _mm256_cvtps_pd(_mm256_castps256_ps128(kf));
            let k1 = _mm256_cvtps_pd(_mm256_extractf128_ps(kf, 1));
            for h in 0..N {
                let q = qs[h].as_ptr().add(j);
                acc0[h] = _mm256_add_pd(acc0[h], _mm256_floor_pd(_mm256_mul_pd(_mm256_loadu_pd(q), k0)));
                acc1[h] = _mm256_add_pd(acc1[h], _mm256_floor_pd(_mm256_mul_pd(_mm256_loadu_pd(q.add(4)), k1)));
            }
            j += 8;
        }
        if _mm256_movemask_ps(slow) != 0 {
            return None;
        }
        let mut out = [0f64; N];
        if N <= 4 {
            // the heads' lane sums side by side (exact integers: any order), one store
            let v: [__m256d; 4] = std::array::from_fn(|h| if h < N { _mm256_add_pd(acc0[h], acc1[h]) } else { _mm256_setzero_pd() });
            let (t01, t23) = (_mm256_hadd_pd(v[0], v[1]), _mm256_hadd_pd(v[2], v[3]));
            let sums = _mm256_add_pd(_mm256_permute2f128_pd::<0x20>(t01, t23), _mm256_permute2f128_pd::<0x31>(t01, t23));
            let mut l = [0f64; 4];
            _mm256_storeu_pd(l.as_mut_ptr(), sums);
            out.copy_from_slice(&l[..N]);
        } else {
            for h in 0..N {
                let mut l = [0f64; 4];
                _mm256_storeu_pd(l.as_mut_ptr(), _mm256_add_pd(acc0[h], acc1[h]));
                out[h] = (l[0] + l[1]) + (l[2] + l[3]);
            }
        }
        // the tail (head dims are multiples of 16: none in practice)
        for i in j..n {
            let v = opu_hw::numerics::fp16::f16_to_f32(k[i]);
            if !(v.abs() < limit) {
                return None;
            }
            for h in 0..N {
                out[h] += (qs[h][i] * f64::from(v)).floor();
            }
        }
        Some(out)
    }

/// `sum_j floor(a_j b_j)` in four f64 lanes (exact under the caller's bound, so in any order).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum(a: &[f64], b: &[f64]) -> f64 {
        let n = a.len().min(b.len());
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let (mut acc0, mut acc1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut j = 0;
        while j + 8 <= n {
            acc0 = _mm256_add_pd(acc0, _mm256_floor_pd(_mm256_mul_pd(_mm256_loadu_pd(ap.add(j)), _mm256_loadu_pd(bp.add(j)))));
            acc1 = _mm256_add_pd(acc1, _mm256_floor_pd(_mm256_mul_pd(_mm256_loadu_pd(ap.add(j + 4)), _mm256_loadu_pd(bp.add(j + 4)))));
            j += 8;
        }
        let mut l = [0f64; 4];
        _mm256_storeu_pd(l.as_mut_ptr(), _mm256_add_pd(acc0, acc1));
        let mut s = (l[0] + l[1]) + (l[2] + l[3]);
        for i in j..n {
            s += (a[i] * b[i]).floor();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opu_hw::numerics::vector::attention_score;
    use rand::{Rng, SeedableRng};

    /// FP16 bits: mostly ordinary attention values, some of every kind (subnormal, zero, large, inf, NaN).
    fn value(rng: &mut impl Rng, wild: bool) -> u16 {
        let sign = if rng.gen() { 0x8000 } else { 0 };
        if !wild {
            let e = rng.gen_range(8u16..20);
            return sign | (e << 10) | (rng.gen::<u16>() & 0x3FF);
        }
        match rng.gen_range(0..100) {
            0 => 0x7C00 | (rng.gen::<u16>() & 0x83FF),
            1..=10 => sign | (rng.gen::<u16>() & 0x3FF),
            11..=15 => sign,
            16..=40 => sign | (rng.gen_range(25u16..31) << 10) | (rng.gen::<u16>() & 0x3FF),
            _ => rng.gen::<u16>() & 0xFBFF,
        }
    }

    #[test]
    fn scores_equal_opu_hw() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xA77);
        let n = if cfg!(debug_assertions) { 20_000 } else { 200_000 };
        let mut slow = 0;
        for i in 0..n {
            let hd = [16, 32, 64, 64, 128, 1008, 24][i % 7];
            let (wq, wk) = (i % 5 == 0, i % 3 == 0);
            let q: Vec<u16> = (0..hd).map(|_| value(&mut rng, wq)).collect();
            let k: Vec<u16> = (0..hd).map(|_| value(&mut rng, wk)).collect();
            let scale = [0.125f32, 1.0, 0.0883883][i % 3];
            let want = attention_score(&q, &k, scale);
            let split = Query::new(&q);
            let max_k = k.iter().map(|&b| f64::from(f16_to_f32(b)).abs()).fold(0.0, f64::max);
            slow += usize::from(split.nonfinite || max_k.partial_cmp(&f64::from(split.limit())) != Some(std::cmp::Ordering::Less));
            for simd in [Simd::detect(), Simd::Portable] {
                let got = score(simd, &split, &k, scale);
                assert_eq!(got.to_bits(), want.to_bits(), "{simd:?} hd {hd} vector {i}: {got} vs {want}");
            }
        }
        // both paths were taken
        assert!(slow > n / 20 && slow < n - n / 20, "{slow} of {n} on the slow path");
    }

    /// Groups of 1 to 9 query heads against one K row (chunks of four, the tails of one to three, a
    /// query outside the bound sending its chunk to the slow path): each score is opu-hw's.
    #[test]
    fn group_scores_equal_opu_hw() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x6A0);
        for i in 0..3_000 {
            let hd = [16, 64, 24][i % 3];
            let heads = 1 + i % 9;
            let qs_bits: Vec<Vec<u16>> = (0..heads).map(|h| (0..hd).map(|_| value(&mut rng, (i + h) % 11 == 0)).collect()).collect();
            let k: Vec<u16> = (0..hd).map(|_| value(&mut rng, i % 4 == 0)).collect();
            let qs: Vec<Query> = qs_bits.iter().map(|q| Query::new(q)).collect();
            let limit = qs.iter().map(Query::limit).fold(f32::INFINITY, f32::min);
            for simd in [Simd::detect(), Simd::Portable] {
                let mut out = vec![f32::NAN; heads];
                score_group(simd, &qs, limit, &k, 0.125, &mut KRow::default(), &mut out);
                for (h, q) in qs_bits.iter().enumerate() {
                    let want = attention_score(q, &k, 0.125);
                    assert_eq!(out[h].to_bits(), want.to_bits(), "{simd:?} group {i} of {heads}, head {h}");
                }
            }
        }
    }

    /// Several K rows against a group in one call (`score_rows`, the attention unit's chunk): each score
    /// opu-hw's, rows inside and outside the fast path mixed.
    #[test]
    fn row_scores_equal_opu_hw() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x6A1);
        for i in 0..600 {
            let hd = [16, 64, 24][i % 3];
            let heads = 1 + i % 6;
            let n = 1 + i % 7;
            let qs_bits: Vec<Vec<u16>> = (0..heads).map(|h| (0..hd).map(|_| value(&mut rng, (i + h) % 13 == 0)).collect()).collect();
            let ks: Vec<Vec<u16>> = (0..n).map(|r| (0..hd).map(|_| value(&mut rng, (i + r) % 5 == 0)).collect()).collect();
            let qs: Vec<Query> = qs_bits.iter().map(|q| Query::new(q)).collect();
            let limit = qs.iter().map(Query::limit).fold(f32::INFINITY, f32::min);
            for simd in [Simd::detect(), Simd::Portable] {
                let mut out = vec![f32::NAN; n * heads];
                score_rows(simd, &qs, limit, 0.125, &mut out, |r| &ks[r]);
                for (r, k) in ks.iter().enumerate() {
                    for (h, q) in qs_bits.iter().enumerate() {
                        let want = attention_score(q, k, 0.125);
                        assert_eq!(out[r * heads + h].to_bits(), want.to_bits(), "{simd:?} case {i}: row {r}, head {h}");
                    }
                }
            }
        }
    }

    /// Around the fast path's bound: the largest significands, one sign (and alternating signs), the
    /// longest row, exponents on both sides of the bound: the same bits, and both paths taken.
    #[test]
    fn fast_path_bound() {
        let mut fast = 0;
        for qe in (12u16..=30).step_by(2) {
            for ke in (12u16..=30).step_by(3) {
                for alternate in [false, true] {
                    let q: Vec<u16> = (0..1008).map(|j| (qe << 10) | 0x3FF | if alternate && j % 2 == 1 { 0x8000 } else { 0 }).collect();
                    let k = vec![(ke << 10) | 0x3FF; 1008];
                    let want = attention_score(&q, &k, 1.0);
                    let query = Query::new(&q);
                    fast += usize::from(f16_to_f32(k[0]) < query.limit());
                    for simd in [Simd::detect(), Simd::Portable] {
                        assert_eq!(score(simd, &query, &k, 1.0).to_bits(), want.to_bits(), "{simd:?} {qe} {ke} {alternate}");
                    }
                }
            }
        }
        assert!(fast > 20 && fast < 120, "{fast} of 140 on the fast path");
    }
}

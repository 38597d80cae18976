//! The matmul kernel: `W x` for the block formats, fast and exact.
//!
//! The arithmetic is `opu_hw::numerics::dot::accumulate_block` per block (docs/numerics.md, "Hybrid block dot
//! product"), split where the hardware splits it:
//!
//! 1. each token's input is aligned once per matmul ([`align_vector`]); its mantissas fit `i16`
//!    (|a_j| <= 2047 * 2^(W-12) <= 32752), and `S_a` ([`AlignedBlock::mant_sum`]) is computed once per
//!    activation block and shared by every row;
//! 2. `S_q = sum_j a_j q_j` of a block is an exact integer (|S_q| < 2^27): computed with i16 x i16 -> i32
//!    multiply-adds, with AVX2 when the CPU has it (`vpmaddwd`, 8 blocks per horizontal reduction) and a
//!    portable loop otherwise; both equal `dot::block_sums` (tested);
//! 3. the terms `d S_q 2^X` and `m S_a 2^X` enter the `WideAcc` exactly as `accumulate_block` adds them
//!    (`opu_hw::numerics::dot::accumulate_block_sums`, the accumulator half of `accumulate_block`), each
//!    floored onto the grid on its own, summed through an i64 partial (`acc::TermSum`); with AVX2 four blocks
//!    at a time in i64 lanes (`avx2::accumulate_row`), equal to the scalar path (tested at its bounds).
//!
//! Several tokens (a prefill pass) take [`tiles`]: four rows prepared once for every token, their `S_q`
//! and terms side by side in the lanes.
//!
//! The F16 format goes through `dot::accumulate_row` unchanged. Rows are independent and each is an exact
//! sum, so splitting rows over threads gives the same bits for any thread count.

use opu_hw::numerics::align::{align_vector, AlignedBlock};
use opu_hw::numerics::dot::accumulate_row;
use opu_hw::numerics::vector::DType;
use opu_hw::numerics::{WeightFormat, WideAcc, BLOCK};
use opu_hw::weight_layout::WeightLayout;
use super::threads::Threads;
use opu_hw::numerics::acc::TermSum;
use opu_hw::numerics::dot::accumulate_block_sums;

#[cfg(target_arch = "x86_64")]
mod tiles;

/// One token's input vector, aligned for the PE array.
pub(crate) struct AlignedActs {
    /// The aligned mantissas `a_j` of each block.
    pub mant: Vec<[i16; BLOCK]>,
    /// `X`: the exponent of each block's last mantissa bit.
    pub scale_exp: Vec<i32>,
    pub nonfinite: Vec<bool>,
    /// `S_a` of each block.
    pub sum: Vec<i64>,
    /// Whether any block is non-finite.
    pub any_nonfinite: bool,
}

impl AlignedActs {
    pub fn new(x: &[u16], act_bits: u32) -> Self {
        let blocks = align_vector(x, act_bits);
        AlignedActs {
            any_nonfinite: blocks.iter().any(|b| b.nonfinite),
            mant: blocks.iter().map(to_i16).collect(),
            scale_exp: blocks.iter().map(|b| b.scale_exp).collect(),
            nonfinite: blocks.iter().map(|b| b.nonfinite).collect(),
            sum: blocks.iter().map(AlignedBlock::mant_sum).collect(),
        }
    }

    pub fn blocks(&self) -> usize {
        self.mant.len()
    }
}

fn to_i16(b: &AlignedBlock) -> [i16; BLOCK] {
    b.mant.map(|a| i16::try_from(a).expect("aligned mantissas fit 16 bits (docs/numerics.md)"))
}

/// Offset of the quantized integers within a block (GGUF layouts: docs/numerics.md, "Weight formats").
fn qs_offset(fmt: WeightFormat) -> usize {
    match fmt {
        WeightFormat::W4Min => 4,
        WeightFormat::W4 | WeightFormat::W8 => 2,
        WeightFormat::F16 => unreachable!("F16 is not blocked"),
    }
}

/// The FP16 scale `d` and, for W4Min, minimum `m` of a block (what `weights::decode_block` reads).
#[inline]
fn block_scales(fmt: WeightFormat, blk: &[u8]) -> (u16, Option<u16>) {
    let d = u16::from_le_bytes([blk[0], blk[1]]);
    let m = (fmt == WeightFormat::W4Min).then(|| u16::from_le_bytes([blk[2], blk[3]]));
    (d, m)
}

/// Adds one row of blocks to `acc` (`dot::accumulate_row` for a block format), given each block's `S_q`.
#[inline(always)]
fn accumulate_row_sums(acc: &mut WideAcc, fmt: WeightFormat, row: &[u8], acts: &AlignedActs, sq: &[i32]) {
    // the row's terms through an i64 partial sum (the same bits: `TermSum`)
    let mut sum = TermSum::new(*acc);
    accumulate_blocks(&mut sum, fmt, row, acts, sq, 0..acts.blocks());
    *acc = sum.finish();
}

/// Adds blocks `range` of a row (`accumulate_block_sums` each).
#[inline(always)]
fn accumulate_blocks(sum: &mut TermSum, fmt: WeightFormat, row: &[u8], acts: &AlignedActs, sq: &[i32], range: std::ops::Range<usize>) {
    let bb = fmt.block_bytes();
    for b in range {
        let (d, m) = block_scales(fmt, &row[b * bb..(b + 1) * bb]);
        accumulate_block_sums(sum, acts.scale_exp[b], acts.nonfinite[b], i64::from(sq[b]), acts.sum[b], d, m);
    }
}

/// `S_q` of one block, portable (the compiler vectorizes it where it can).
#[inline]
pub(crate) fn block_sq_portable(fmt: WeightFormat, blk: &[u8], a: &[i16; BLOCK]) -> i32 {
    let qs = &blk[qs_offset(fmt)..];
    match fmt {
        WeightFormat::W4Min | WeightFormat::W4 => {
            let off = if fmt == WeightFormat::W4 { 8 } else { 0 };
            let mut s = 0i32;
            for j in 0..16 {
                s += i32::from(a[j]) * (i32::from(qs[j] & 15) - off);
                s += i32::from(a[j + 16]) * (i32::from(qs[j] >> 4) - off);
            }
            s
        }
        WeightFormat::W8 => a.iter().zip(&qs[..BLOCK]).map(|(&x, &q)| i32::from(x) * i32::from(q as i8)).sum(),
        WeightFormat::F16 => unreachable!("F16 is not blocked"),
    }
}

/// How `S_q` is computed on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Simd {
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("lzcnt")
            && std::arch::is_x86_feature_detected!("popcnt")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return Simd::Avx2;
        }
        Simd::Portable
    }

    /// Adds one row of blocks to `acc` given each block's `S_q` ([`accumulate_row_sums`]; with AVX2 the
    /// epilogue four blocks at a time).
    #[inline(always)]
    pub fn accumulate_row(self, acc: &mut WideAcc, fmt: WeightFormat, row: &[u8], acts: &AlignedActs, sq: &[i32]) {
        match self {
            Simd::Portable => accumulate_row_sums(acc, fmt, row, acts, sq),
            // SAFETY: AVX2 is present (detected); the lengths of `row`, `sq` and `acts` are asserted there.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { avx2::accumulate_row(fmt, row, acts, sq, acc) },
        }
    }

    /// `S_q` of every block of `row` (whole blocks of `fmt`) against `acts`, into `sq`.
    pub fn row_sums(self, fmt: WeightFormat, row: &[u8], acts: &AlignedActs, sq: &mut [i32]) {
        let bb = fmt.block_bytes();
        let nb = acts.blocks();
        assert!(row.len() == nb * bb && sq.len() >= nb);
        match self {
            Simd::Portable => {
                for ((s, blk), a) in sq.iter_mut().zip(row.chunks_exact(bb)).zip(&acts.mant) {
                    *s = block_sq_portable(fmt, blk, a);
                }
            }
            // SAFETY: AVX2 is present (detected), and the lengths were checked above.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { avx2::row_sums(fmt, row, &acts.mant, sq) },
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{accumulate_blocks, qs_offset, AlignedActs, TermSum, WeightFormat, WideAcc, BLOCK};
    use std::arch::x86_64::*;

    /// Four blocks' FP16 scales (`d` or `m`, at byte `at` of each block), decoded as `fp16::parts` does into
    /// i64 lanes: the signed significand, the exponent, and whether the exponent field is 31 (non-finite).
    /// Only the first `n` blocks are read; the other lanes hold the scale +0 (significand 0, exponent 1,
    /// finite), whose terms are 0.
    #[inline(always)]
    unsafe fn scales4(row: *const u8, bb: usize, at: usize, n: usize) -> (__m256i, __m256i, __m256i) {
        let h = |k: usize| if k < n { i64::from(u16::from_le_bytes([*row.add(k * bb + at), *row.add(k * bb + at + 1)])) } else { 0 };
        let bits = _mm256_set_epi64x(h(3), h(2), h(1), h(0));
        let e = _mm256_and_si256(_mm256_srli_epi64(bits, 10), _mm256_set1_epi64x(31));
        let f = _mm256_and_si256(bits, _mm256_set1_epi64x(0x3FF));
        let normal = _mm256_cmpgt_epi64(e, _mm256_setzero_si256());
        let sig = _mm256_or_si256(f, _mm256_and_si256(normal, _mm256_set1_epi64x(1024)));
        // negate where the sign bit is set: (sig ^ -1) - (-1)
        let neg = _mm256_sub_epi64(_mm256_setzero_si256(), _mm256_srli_epi64(bits, 15));
        let signed = _mm256_sub_epi64(_mm256_xor_si256(sig, neg), neg);
        // a subnormal's exponent is 1 (the lanes' upper halves are zero: a 32-bit max is a 64-bit max)
        let exp = _mm256_max_epi32(e, _mm256_set1_epi64x(1));
        (signed, exp, _mm256_cmpeq_epi64(e, _mm256_set1_epi64x(31)))
    }

    /// `floor(p * 2^sh)` per lane (`WideAcc::add_term`'s floor on the grid), for `sh < 16` and `|p| < 2^40`:
    /// a left shift, or an arithmetic right shift built from the logical one (AVX2 has no 64-bit `sra`);
    /// a count of 64 or more leaves 0 or -1, the floor of anything below one unit.
    #[inline(always)]
    unsafe fn floor_shift(p: __m256i, sh: __m256i) -> __m256i {
        let zero = _mm256_setzero_si256();
        // a negative count is a huge unsigned one: 0, never selected
        let left = _mm256_sllv_epi64(p, sh);
        let sign = _mm256_cmpgt_epi64(zero, p);
        let right = _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(p, sign), _mm256_sub_epi64(zero, sh)), sign);
        _mm256_blendv_epi8(left, right, _mm256_cmpgt_epi64(zero, sh))
    }

    /// [`super::accumulate_row_sums`] with the block epilogue four blocks at a time in i64 lanes: the same
    /// terms as `accumulate_block_sums` (each floored on its own), summed in another order (exact integer
    /// sums: the same bits). Per lane and group of four blocks at most two terms, `|d S_q| < 2^39` and
    /// `|m S_a| < 2^32` shifted by less than 16: `< 2^55`; 32 groups per fold keep a lane below `2^61`.
    /// The last one to three blocks are a group of their own, its other lanes zero (terms of 0: the same
    /// sum). A group with a non-finite scale or a shift of 16 or more (large values only) goes through the
    /// scalar path.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn accumulate_row(fmt: WeightFormat, row: &[u8], acts: &AlignedActs, sq: &[i32], acc: &mut WideAcc) {
        const GROUPS_PER_FOLD: u32 = 32;
        let bb = fmt.block_bytes();
        let nb = acts.blocks();
        assert!(row.len() == nb * bb && sq.len() >= nb && acts.scale_exp.len() == nb && acts.sum.len() == nb);
        let mut sum = TermSum::new(*acc);
        let (x, sa) = (acts.scale_exp.as_ptr(), acts.sum.as_ptr());
        // the `n` blocks from `b`: their `d` (at 0) or `m` (at 2)
        let p = row.as_ptr();
        let scales = |b: usize, at: usize, n: usize| scales4(p.add(b * bb), bb, at, n);
        let seven = _mm256_set1_epi64x(7);
        let fifteen = _mm256_set1_epi64x(15);
        let mut lanes = _mm256_setzero_si256();
        let mut wide = 0i128;
        let mut groups = 0;
        let mut b = 0;
        // The terms of blocks b..b + n (their exponents X, S_q and S_a in i64 lanes), and whether a lane is
        // outside the fast path.
        let group = |b: usize, n: usize, xs: __m256i, sqs: __m256i, sas: __m256i| {
            let (d_sig, d_exp, d_nf) = scales(b, 0, n);
            // grid shift: (exponent - 25 + X) + 32
            let d_sh = _mm256_add_epi64(_mm256_add_epi64(d_exp, xs), seven);
            let mut bad = _mm256_or_si256(d_nf, _mm256_cmpgt_epi64(d_sh, fifteen));
            let mut t = floor_shift(_mm256_mul_epi32(d_sig, sqs), d_sh);
            if fmt == WeightFormat::W4Min {
                let (m_sig, m_exp, m_nf) = scales(b, 2, n);
                let m_sh = _mm256_add_epi64(_mm256_add_epi64(m_exp, xs), seven);
                bad = _mm256_or_si256(bad, _mm256_or_si256(m_nf, _mm256_cmpgt_epi64(m_sh, fifteen)));
                // |S_a| < 2^21: its low 32 bits are the value
                t = _mm256_add_epi64(t, floor_shift(_mm256_mul_epi32(m_sig, sas), m_sh));
            }
            (t, _mm256_movemask_epi8(bad) == 0)
        };
        while b + 4 <= nb {
            let xs = _mm256_cvtepi32_epi64(_mm_loadu_si128(x.add(b) as *const __m128i));
            let sqs = _mm256_cvtepi32_epi64(_mm_loadu_si128(sq.as_ptr().add(b) as *const __m128i));
            let sas = _mm256_loadu_si256(sa.add(b) as *const __m256i);
            let (t, fast) = group(b, 4, xs, sqs, sas);
            if fast {
                lanes = _mm256_add_epi64(lanes, t);
                groups += 1;
                if groups == GROUPS_PER_FOLD {
                    wide += fold(lanes);
                    lanes = _mm256_setzero_si256();
                    groups = 0;
                }
            } else {
                accumulate_blocks(&mut sum, fmt, row, acts, sq, b..b + 4);
            }
            b += 4;
        }
        if b < nb {
            // the last 1 to 3 blocks, the other lanes zero (a group more: at most 32 since the last fold)
            let n = nb - b;
            let lane = |k: usize, v: &dyn Fn(usize) -> i64| if k < n { v(b + k) } else { 0 };
            let pick = |v: &dyn Fn(usize) -> i64| _mm256_set_epi64x(lane(3, v), lane(2, v), lane(1, v), lane(0, v));
            let xs = pick(&|i| i64::from(*x.add(i)));
            let sqs = pick(&|i| i64::from(sq[i]));
            let sas = pick(&|i| *sa.add(i));
            let (t, fast) = group(b, n, xs, sqs, sas);
            if fast {
                lanes = _mm256_add_epi64(lanes, t);
            } else {
                accumulate_blocks(&mut sum, fmt, row, acts, sq, b..nb);
            }
        }
        let mut out = sum.finish();
        out.fixed += wide + fold(lanes);
        // the activation blocks' flags, which the scalar path ORs in block by block
        out.nonfinite |= acts.any_nonfinite;
        *acc = out;
    }

    /// The sum of the four lanes, exact.
    #[inline(always)]
    unsafe fn fold(v: __m256i) -> i128 {
        let mut l = [0i64; 4];
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, v);
        l.iter().map(|&x| i128::from(x)).sum()
    }

    /// The 8 i32 partial sums (pairs of products) of one block; their total is `S_q`.
    #[inline(always)]
    unsafe fn block_vec(fmt: WeightFormat, qs: *const u8, a: *const i16) -> __m256i {
        let (q0, q1) = block_weights(fmt, qs);
        products(q0, q1, a)
    }

    /// i16 x i16 products summed in pairs: exact in i32 (|a| <= 32752, |q| <= 128).
    #[inline(always)]
    unsafe fn products(q0: __m256i, q1: __m256i, a: *const i16) -> __m256i {
        let a0 = _mm256_loadu_si256(a as *const __m256i);
        let a1 = _mm256_loadu_si256(a.add(16) as *const __m256i);
        _mm256_add_epi32(_mm256_madd_epi16(q0, a0), _mm256_madd_epi16(q1, a1))
    }

    /// A block's 32 integers as i16, weights 0..16 and 16..32.
    #[inline(always)]
    pub(super) unsafe fn block_weights(fmt: WeightFormat, qs: *const u8) -> (__m256i, __m256i) {
        match fmt {
            WeightFormat::W8 => (
                _mm256_cvtepi8_epi16(_mm_loadu_si128(qs as *const __m128i)),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(qs.add(16) as *const __m128i)),
            ),
            _ => {
                // Weight j is the low nibble of byte j, weight j + 16 its high nibble.
                let bytes = _mm_loadu_si128(qs as *const __m128i);
                let mask = _mm_set1_epi8(0x0F);
                let lo = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, mask));
                let hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
                if fmt == WeightFormat::W4 {
                    let eight = _mm256_set1_epi16(8);
                    (_mm256_sub_epi16(lo, eight), _mm256_sub_epi16(hi, eight))
                } else {
                    (lo, hi)
                }
            }
        }
    }

    /// The totals of 8 vectors, in order.
    #[inline(always)]
    pub(super) unsafe fn hsum8(v: &[__m256i; 8]) -> __m256i {
        let s01 = _mm256_hadd_epi32(v[0], v[1]);
        let s23 = _mm256_hadd_epi32(v[2], v[3]);
        let s45 = _mm256_hadd_epi32(v[4], v[5]);
        let s67 = _mm256_hadd_epi32(v[6], v[7]);
        let s0123 = _mm256_hadd_epi32(s01, s23);
        let s4567 = _mm256_hadd_epi32(s45, s67);
        let lo = _mm256_permute2x128_si256(s0123, s4567, 0x20);
        let hi = _mm256_permute2x128_si256(s0123, s4567, 0x31);
        _mm256_add_epi32(lo, hi)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn row_sums(fmt: WeightFormat, row: &[u8], acts: &[[i16; BLOCK]], sq: &mut [i32]) {
        let bb = fmt.block_bytes();
        let qs = row.as_ptr().add(qs_offset(fmt));
        row_sums_with(acts, sq, |b, a| block_vec(fmt, qs.add(b * bb), a))
    }

    #[inline(always)]
    unsafe fn row_sums_with(acts: &[[i16; BLOCK]], sq: &mut [i32], block: impl Fn(usize, *const i16) -> __m256i) {
        let nb = acts.len();
        assert!(sq.len() >= nb);
        let mut b = 0;
        while b + 8 <= nb {
            let mut v = [_mm256_setzero_si256(); 8];
            for (k, vk) in v.iter_mut().enumerate() {
                *vk = block(b + k, acts[b + k].as_ptr());
            }
            _mm256_storeu_si256(sq.as_mut_ptr().add(b) as *mut __m256i, hsum8(&v));
            b += 8;
        }
        if b < nb {
            let mut v = [_mm256_setzero_si256(); 8];
            for (k, vk) in v.iter_mut().enumerate().take(nb - b) {
                *vk = block(b + k, acts[b + k].as_ptr());
            }
            let mut out = [0i32; 8];
            _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, hsum8(&v));
            sq[b..nb].copy_from_slice(&out[..nb - b]);
        }
    }
}

/// Computes matmul rows; owns the thread pool.
pub(crate) struct Kernel {
    pub simd: Simd,
    threads: usize,
    pool: Option<std::sync::Arc<Threads>>,
}

/// One `matmul`'s operands.
pub(crate) struct MatmulJob<'a> {
    pub fmt: WeightFormat,
    pub out: DType,
    /// The weight matrix: as it lies in device memory (`layout`), or its rows back to back (`layout` is
    /// `None`: a row-major copy, `rowcache`), at least `rows` rows of `row_bytes`.
    pub weights: &'a [u8],
    pub layout: Option<WeightLayout>,
    pub rows: usize,
    pub row_bytes: usize,
    /// Per token: the FP16 input (F16 format) ...
    pub raw: &'a [Vec<u16>],
    /// ... and the aligned input (block formats).
    pub acts: &'a [AlignedActs],
    /// With `acc=1`: each output's starting accumulator, `[row][token]`.
    pub init: Option<&'a [WideAcc]>,
}

/// Reads a `matmul`'s rows: from a row-major copy, or out of the lane-interleaved matrix, where a group is
/// gathered once, in memory order, into its lanes' shares (each lane's two rows back to back) and serves its
/// rows (the rows go in order; the threads take whole groups, `Kernel::matmul`).
struct RowReader {
    group: Vec<u8>,
    /// The group in `group`.
    held: Option<u64>,
}

impl RowReader {
    fn new(job: &MatmulJob) -> Self {
        RowReader { group: vec![0u8; job.layout.map_or(0, |l| l.group_bytes() as usize)], held: None }
    }

    #[inline(always)]
    fn row<'b>(&'b mut self, job: &'b MatmulJob, r: usize) -> &'b [u8] {
        let Some(lay) = &job.layout else {
            prefetch(job.weights, (r + PREFETCH_ROWS) * job.row_bytes, job.row_bytes);
            return &job.weights[r * job.row_bytes..(r + 1) * job.row_bytes];
        };
        let (g, l, at) = lay.share_of(r as u64);
        if self.held != Some(g) {
            lay.read_group(job.weights, g, &mut self.group);
            self.held = Some(g);
        }
        let at = (16 * l * lay.lane_units() + at) as usize;
        &self.group[at..at + job.row_bytes]
    }
}

/// Rows ahead whose weights are requested from memory while a row is computed (the stream is sequential,
/// but the hardware prefetcher alone leaves the kernel waiting on a matrix that does not fit the caches).
const PREFETCH_ROWS: usize = 4;

impl Kernel {
    pub fn new(threads: usize) -> Self {
        let mut k = Kernel { simd: Simd::detect(), threads: 1, pool: None };
        k.set_threads(threads);
        k
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn set_threads(&mut self, n: usize) {
        let n = n.max(1);
        if n == self.threads && (n == 1 || self.pool.is_some()) {
            return;
        }
        self.threads = n;
        self.pool = (n > 1).then(|| std::sync::Arc::new(Threads::new(n)));
    }

    /// The threads, when there is more than one.
    pub fn pool(&self) -> Option<std::sync::Arc<Threads>> {
        self.pool.clone()
    }

    /// Calls `f(first, chunk)` for consecutive chunks of `data` (`first` = the index of the chunk's first
    /// element): spread over the threads when there are several, in order on this thread otherwise.
    pub fn for_each_chunk<T: Send>(&self, data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
        let chunk = chunk.max(1);
        match &self.pool {
            Some(threads) => threads.for_each_chunk(data, chunk, f),
            None => data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i * chunk, c)),
        }
    }

    /// The stored bits (FP16 in the low half, or FP32) of every output, `[row][token]`.
    pub fn matmul(&self, job: &MatmulJob) -> Vec<u32> {
        let ntok = job.raw.len();
        let rows = job.rows;
        let mut out = vec![0u32; rows * ntok];
        // A few chunks per thread balance the load; rows are independent, so any split is exact. Whole row
        // groups: a thread gathers each group it computes once (`RowReader`); and whole tiles of four rows
        // (`tiles`, several tokens).
        let group = job.layout.map_or(1, |l| l.group_rows() as usize);
        let align = if group.is_multiple_of(4) { group } else { group * 4 };
        let chunk = rows.div_ceil(self.threads * 4).max(8).next_multiple_of(align);
        self.for_each_chunk(&mut out, chunk * ntok, |first, o| self.rows(job, first / ntok, o));
        out
    }

    /// Rows `first..first + out.len() / ntok`.
    fn rows(&self, job: &MatmulJob, first: usize, out: &mut [u32]) {
        match self.simd {
            Simd::Portable => rows_impl(Simd::Portable, job, first, out),
            // SAFETY: the CPU has AVX2, BMI2 and LZCNT (detected).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { rows_avx2(job, first, out) },
        }
    }
}

/// [`rows_impl`] compiled for AVX2 CPUs: the same code, with the block sums in AVX2 and the accumulator's
/// shifts and leading-zero counts in BMI2 and LZCNT instructions (instead of `bsr` and branches).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
unsafe fn rows_avx2(job: &MatmulJob, first: usize, out: &mut [u32]) {
    if job.raw.len() > 1 && job.fmt != WeightFormat::F16 {
        tiles::rows(job, first, out)
    } else {
        rows_impl(Simd::Avx2, job, first, out)
    }
}

/// The stored bits of an output (FP16 in the low half, or FP32).
#[inline(always)]
fn store_bits(out: DType, acc: &WideAcc) -> u32 {
    match out {
        DType::F16 => u32::from(acc.to_f16()),
        DType::F32 => acc.to_f32().to_bits(),
    }
}

/// Asks for the cache lines of `bytes[at..at + len]` (those inside `bytes`), without waiting.
#[inline(always)]
fn prefetch(bytes: &[u8], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = (at + len).min(bytes.len());
        let mut p = at;
        while p < end {
            // SAFETY: a prefetch of an address inside the slice; it has no architectural effect.
            unsafe {
                std::arch::x86_64::_mm_prefetch(bytes.as_ptr().add(p) as *const i8, std::arch::x86_64::_MM_HINT_T0)
            };
            p += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at, len);
}

#[inline(always)]
fn rows_impl(simd: Simd, job: &MatmulJob, first: usize, out: &mut [u32]) {
    let ntok = job.raw.len();
    let mut sq = vec![0i32; job.acts.first().map_or(0, AlignedActs::blocks)];
    let mut reader = RowReader::new(job);
    for (i, o) in out.chunks_exact_mut(ntok).enumerate() {
        let r = first + i;
        let row = reader.row(job, r);
        for (t, o) in o.iter_mut().enumerate() {
            let mut acc = job.init.map_or(WideAcc::ZERO, |init| init[r * ntok + t]);
            if job.fmt == WeightFormat::F16 {
                accumulate_row(&mut acc, job.fmt, &[], &job.raw[t], row);
            } else {
                let a = &job.acts[t];
                simd.row_sums(job.fmt, row, a, &mut sq);
                simd.accumulate_row(&mut acc, job.fmt, row, a, &sq);
            }
            *o = store_bits(job.out, &acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opu_hw::numerics::dot::{accumulate_block, block_sums};
    use opu_hw::numerics::weights::decode_block;
    use rand::{Rng, SeedableRng};

    /// FP16 bits of every kind: normal, subnormal, zero, large, and (rarely) infinite or NaN.
    pub(crate) fn any_f16(rng: &mut impl Rng) -> u16 {
        match rng.gen_range(0..100) {
            0 => 0x7C00 | (rng.gen::<u16>() & 0x83FF), // inf or NaN, either sign
            1..=5 => rng.gen::<u16>() & 0x83FF,        // subnormal or zero
            6..=10 => 0,
            _ => rng.gen::<u16>() & 0xFBFF, // finite (exponent field below 31)
        }
    }

    pub(crate) fn random_block(rng: &mut impl Rng, fmt: WeightFormat) -> Vec<u8> {
        let mut blk: Vec<u8> = (0..fmt.block_bytes()).map(|_| rng.gen()).collect();
        let d = any_f16(rng);
        blk[0..2].copy_from_slice(&d.to_le_bytes());
        if fmt == WeightFormat::W4Min {
            blk[2..4].copy_from_slice(&any_f16(rng).to_le_bytes());
        }
        blk
    }

    pub(crate) fn random_acts(rng: &mut impl Rng) -> Vec<u16> {
        // Mostly one magnitude range per block, sometimes everything at once (outliers, specials).
        let wild = rng.gen_bool(0.3);
        let e = rng.gen_range(1u16..30);
        (0..BLOCK)
            .map(|_| {
                if wild {
                    any_f16(rng)
                } else {
                    (rng.gen::<u16>() & 0x83FF) | (e.saturating_sub(rng.gen_range(0..4)).max(1) << 10)
                }
            })
            .collect()
    }

    #[test]
    fn accumulate_block_sums_equals_accumulate_block() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED);
        let simd = Simd::detect();
        let n = if cfg!(debug_assertions) { 100_000 } else { 1_000_000 };
        for i in 0..n {
            let fmt = [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8][i % 3];
            let bits = if i % 7 == 0 { rng.gen_range(8..=16) } else { 16 };
            let x = random_acts(&mut rng);
            let blk = random_block(&mut rng, fmt);
            let acts = AlignedActs::new(&x, bits);
            let aligned = align_vector(&x, bits);
            let wb = decode_block(fmt, &blk);
            let (want_sq, want_sa) = block_sums(&aligned[0], &wb);

            let mut sq = [0i32; 1];
            simd.row_sums(fmt, &blk, &acts, &mut sq);
            assert_eq!(i64::from(sq[0]), want_sq, "{fmt:?} block {i}");
            assert_eq!(i64::from(block_sq_portable(fmt, &blk, &acts.mant[0])), want_sq);
            assert_eq!(acts.sum[0], want_sa);

            // Start from a random accumulator (a residual), as matmul acc=1 does.
            let start = WideAcc { fixed: rng.gen::<i64>() as i128, nonfinite: rng.gen_bool(0.01) };
            let mut want = start;
            accumulate_block(&mut want, &aligned[0], &wb);
            let mut got = start;
            let (d, m) = block_scales(fmt, &blk);
            accumulate_block_sums(&mut got, acts.scale_exp[0], acts.nonfinite[0], i64::from(sq[0]), acts.sum[0], d, m);
            assert_eq!(got, want, "{fmt:?} block {i}");
        }
    }

    #[test]
    fn kernel_rows_equal_accumulate_row() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            // (the AVX2 epilogue: groups of four, the tail, a fold after 32 groups, groups with a special
            // value or a large shift through the scalar path)
            for nb in [1usize, 4, 7, 18, 48, 130].into_iter().flat_map(|nb| std::iter::repeat_n(nb, 50)) {
                let x: Vec<u16> = (0..nb).flat_map(|_| random_acts(&mut rng)).collect();
                let aligned = align_vector(&x, 16);
                let acts = AlignedActs::new(&x, 16);
                let row: Vec<u8> = (0..nb).flat_map(|_| random_block(&mut rng, fmt)).collect();
                for simd in [Simd::detect(), Simd::Portable] {
                    let mut sq = vec![0; nb];
                    simd.row_sums(fmt, &row, &acts, &mut sq);
                    let start = WideAcc { fixed: rng.gen::<i64>().into(), nonfinite: false };
                    let (mut got, mut want) = (start, start);
                    simd.accumulate_row(&mut got, fmt, &row, &acts, &sq);
                    accumulate_row(&mut want, fmt, &aligned, &x, &row);
                    assert_eq!(got, want, "{fmt:?} {nb} blocks {simd:?}");
                }
            }
        }
    }

    /// The whole kernel (rows, tokens, residual start, rounding, threads) on the portable path equals the
    /// detected one: what a CPU without AVX2 computes. Several tokens take the prepared-row path (each
    /// row unpacked and its scales decoded once); one token the other.
    #[test]
    fn portable_kernel_equals_detected_kernel() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            for (out, (nb, ntok)) in [DType::F16, DType::F32].into_iter().flat_map(|o| [(5, 2), (1, 3), (8, 1), (18, 4), (130, 3)].map(|c| (o, c))) {
                let rows = 21;
                let raw: Vec<Vec<u16>> =
                    (0..ntok).map(|_| (0..nb).flat_map(|_| random_acts(&mut rng)).collect()).collect();
                let acts: Vec<AlignedActs> = raw.iter().map(|x| AlignedActs::new(x, 16)).collect();
                let weights: Vec<u8> = (0..rows * nb).flat_map(|_| random_block(&mut rng, fmt)).collect();
                let layout = WeightLayout::for_lanes(8, nb * fmt.block_bytes());
                let interleaved = layout.interleave(&weights);
                let init: Vec<WideAcc> =
                    (0..rows * ntok).map(|_| WideAcc { fixed: rng.gen::<i64>().into(), nonfinite: false }).collect();
                let job = MatmulJob {
                    fmt,
                    out,
                    weights: &weights,
                    layout: None,
                    rows,
                    row_bytes: nb * fmt.block_bytes(),
                    raw: &raw,
                    acts: &acts,
                    init: Some(&init),
                };
                let mut portable = Kernel::new(1);
                portable.simd = Simd::Portable;
                let want = portable.matmul(&job);
                assert_eq!(Kernel::new(1).matmul(&job), want, "{fmt:?} {out:?}");
                assert_eq!(Kernel::new(2).matmul(&job), want, "{fmt:?} {out:?}, 2 threads");
                // the same rows read out of the lane-interleaved matrix
                let job = MatmulJob { weights: &interleaved, layout: Some(layout), ..job };
                assert_eq!(Kernel::new(1).matmul(&job), want, "{fmt:?} {out:?}, interleaved");
                assert_eq!(Kernel::new(2).matmul(&job), want, "{fmt:?} {out:?}, interleaved, 2 threads");
            }
        }
    }

    #[test]
    fn simd_rows_equal_portable_rows_for_every_tail() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            for nb in 1..=19 {
                let x: Vec<u16> = (0..nb).flat_map(|_| random_acts(&mut rng)).collect();
                let acts = AlignedActs::new(&x, 16);
                let row: Vec<u8> = (0..nb).flat_map(|_| random_block(&mut rng, fmt)).collect();
                let mut a = vec![0; nb];
                let mut b = vec![0; nb];
                Simd::detect().row_sums(fmt, &row, &acts, &mut a);
                Simd::Portable.row_sums(fmt, &row, &acts, &mut b);
                assert_eq!(a, b, "{fmt:?} {nb} blocks");
            }
        }
    }
}

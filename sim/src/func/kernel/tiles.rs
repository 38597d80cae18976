//! The matmul kernel for several tokens (prefill) with AVX2: tiles of four weight rows.
//!
//! A tile's four rows are prepared once for every token of the `matmul` ([`TilePrep`]: the integers
//! unpacked to i16, the FP16 scales split); then, per token, one pass over the blocks computes the tile's
//! `S_q` (an activation block loaded once for four rows) and one pass adds the terms of the four rows
//! side by side, a row per i64 lane. The arithmetic is `accumulate_block_sums`' (docs/numerics.md, "Hybrid
//! block dot product"): every term floored onto the 2^-32 grid on its own and summed exactly, in another
//! order (an exact integer sum: the same bits).
//!
//! The epilogue's term `floor(s q 2^sh)` (`s` a scale's signed significand, `q` the block's `S_q` or `S_a`,
//! `sh` = exponent - 25 + X + 32 the grid shift) is computed as `floor((s 2^15) q / 2^k)` with
//! `k = 15 - sh`: one multiply of 32-bit operands (`|s 2^15| < 2^26`, `|S_q| < 2^27`, `|S_a| < 2^20`) and one
//! arithmetic right shift (from the logical one: AVX2 has no 64-bit `sra`), with no left shift to select.
//! That needs `k >= 0`, i.e. `sh <= 15`; a row with a larger shift or a non-finite scale in a token's terms
//! (large values only; a non-finite scale is prepared with a very negative `k`) is recomputed by the scalar
//! path for that token. Bounds: a block adds at most `2^53 + 2^46 + 2 < 2^54` to a lane, so 256 blocks
//! between folds into the wide accumulator keep a lane below `2^62`.

use std::arch::x86_64::*;

use super::avx2::{block_weights, hsum8};
use super::{qs_offset, store_bits, AlignedActs, MatmulJob, RowReader, Simd};
use opu_hw::numerics::fp16::parts;
use opu_hw::numerics::{WeightFormat, WideAcc, BLOCK};

/// Rows per tile: the i64 lanes of an AVX2 register.
pub(super) const TILE: usize = 4;

/// Blocks between folds of the lanes into the wide accumulator (the bound above).
const BLOCKS_PER_FOLD: usize = 256;

/// `k` of a non-finite scale: negative whatever the activation block's exponent adds.
const NONFINITE_K: i64 = -(1 << 40);

/// The split FP16 scales of one block of a tile's four rows, a row per lane: the signed significand times
/// 2^15 and `8 - exponent`, to which a token's `-X` adds `k` (`15 - (exponent - 25 + X + 32)`); `d`, then
/// `m` (W4Min only).
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct BlockScales {
    d_sig: [i64; TILE],
    d_k: [i64; TILE],
    m_sig: [i64; TILE],
    m_k: [i64; TILE],
}

/// A tile's rows prepared for every token: each block's integers (`q[b * TILE + r]`) and scales.
struct TilePrep {
    fmt: WeightFormat,
    /// The rows present (the others are zero weights).
    rows: usize,
    q: Vec<[i16; BLOCK]>,
    scales: Vec<BlockScales>,
}

impl TilePrep {
    /// Prepares `rows` (1 to 4 rows of `nb` whole blocks); missing rows are zero weights, whose terms are 0.
    #[target_feature(enable = "avx2")]
    unsafe fn fill(&mut self, rows: &[&[u8]], nb: usize) {
        let (fmt, bb) = (self.fmt, self.fmt.block_bytes());
        assert!((1..=TILE).contains(&rows.len()));
        self.rows = rows.len();
        self.q.clear();
        self.q.resize(nb * TILE, [0; BLOCK]);
        self.scales.clear();
        self.scales.resize(nb, BlockScales::default());
        // a scale split as the lanes take it: (significand x 2^15, 8 - exponent)
        let split = |bits: u16| match parts(bits) {
            Some(p) => (p.signed() << 15, 8 - i64::from(p.exponent)),
            None => (0, NONFINITE_K),
        };
        for (r, row) in rows.iter().enumerate() {
            assert!(row.len() == nb * bb);
            for b in 0..nb {
                let blk = &row[b * bb..(b + 1) * bb];
                let s = &mut self.scales[b];
                (s.d_sig[r], s.d_k[r]) = split(u16::from_le_bytes([blk[0], blk[1]]));
                if fmt == WeightFormat::W4Min {
                    (s.m_sig[r], s.m_k[r]) = split(u16::from_le_bytes([blk[2], blk[3]]));
                }
                let (q0, q1) = block_weights(fmt, blk.as_ptr().add(qs_offset(fmt)));
                let q = self.q[b * TILE + r].as_mut_ptr();
                _mm256_storeu_si256(q as *mut __m256i, q0);
                _mm256_storeu_si256(q.add(16) as *mut __m256i, q1);
            }
        }
    }

    /// `S_q` of every block of the tile's rows against one token, `sq[b * TILE + r]` (`sq` holds an even
    /// number of blocks: two blocks of four rows per horizontal reduction).
    #[target_feature(enable = "avx2")]
    unsafe fn sums(&self, acts: &[[i16; BLOCK]], sq: &mut [i32]) {
        let nb = acts.len();
        assert!(self.q.len() == nb * TILE && sq.len() >= nb.next_multiple_of(2) * TILE);
        let q = self.q.as_ptr();
        let load = |p: *const i16| _mm256_loadu_si256(p as *const __m256i);
        // the 8 i32 partial sums of block b's rows against activations (a0, a1)
        let block = |b: usize, v: &mut [__m256i], a0: __m256i, a1: __m256i| {
            for (r, v) in v.iter_mut().enumerate() {
                let w = (*q.add(b * TILE + r)).as_ptr();
                *v = _mm256_add_epi32(_mm256_madd_epi16(load(w), a0), _mm256_madd_epi16(load(w.add(16)), a1));
            }
        };
        let mut b = 0;
        while b < nb {
            // two blocks (the second zero past the end), in registers
            let mut v = [_mm256_setzero_si256(); 2 * TILE];
            let a = acts[b].as_ptr();
            block(b, &mut v[..TILE], load(a), load(a.add(16)));
            if b + 1 < nb {
                let a = acts[b + 1].as_ptr();
                block(b + 1, &mut v[TILE..], load(a), load(a.add(16)));
            }
            _mm256_storeu_si256(sq.as_mut_ptr().add(b * TILE) as *mut __m256i, hsum8(&v));
            b += 2;
        }
    }

    /// Adds the terms of the tile's rows against one token (its `S_q` in `sq`) to `acc` (a row per entry).
    /// Returns the rows present (bit `r`) with a term outside the lanes' range (`k < 0`), whose `acc` the
    /// caller recomputes.
    #[target_feature(enable = "avx2")]
    unsafe fn epilogue(&self, acts: &AlignedActs, sq: &[i32], acc: &mut [WideAcc; TILE]) -> u32 {
        let nb = acts.blocks();
        assert!(self.scales.len() == nb && sq.len() >= nb * TILE && acts.scale_exp.len() == nb && acts.sum.len() == nb);
        let load = |v: &[i64; TILE]| _mm256_load_si256(v.as_ptr() as *const __m256i);
        let zero = _mm256_setzero_si256();
        // floor(p / 2^k) for 0 <= k: the logical shift of p's magnitude bits, a count of 64 or more 0 or -1
        let floor_right = |p: __m256i, k: __m256i| {
            let sign = _mm256_cmpgt_epi64(zero, p);
            _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(p, sign), k), sign)
        };
        let mut kor = zero;
        let mut wide = [0i128; TILE];
        let w4min = self.fmt == WeightFormat::W4Min;
        for start in (0..nb).step_by(BLOCKS_PER_FOLD) {
            let mut lanes = zero;
            for b in start..(start + BLOCKS_PER_FOLD).min(nb) {
                let s = &*self.scales.as_ptr().add(b);
                let neg_x = _mm256_set1_epi64x(-i64::from(*acts.scale_exp.get_unchecked(b)));
                let sqs = _mm256_cvtepi32_epi64(_mm_loadu_si128(sq.as_ptr().add(b * TILE) as *const __m128i));
                let k = _mm256_add_epi64(load(&s.d_k), neg_x);
                lanes = _mm256_add_epi64(lanes, floor_right(_mm256_mul_epi32(load(&s.d_sig), sqs), k));
                kor = _mm256_or_si256(kor, k);
                if w4min {
                    let k = _mm256_add_epi64(load(&s.m_k), neg_x);
                    let sa = _mm256_set1_epi64x(*acts.sum.get_unchecked(b));
                    lanes = _mm256_add_epi64(lanes, floor_right(_mm256_mul_epi32(load(&s.m_sig), sa), k));
                    kor = _mm256_or_si256(kor, k);
                }
            }
            // fold the lanes into the wide sums
            let mut l = [0i64; TILE];
            _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, lanes);
            for (w, l) in wide.iter_mut().zip(l) {
                *w += i128::from(l);
            }
        }
        for (a, w) in acc.iter_mut().zip(wide) {
            a.fixed += w;
            a.nonfinite |= acts.any_nonfinite;
        }
        // a lane with a negative k has its sign bit set in `kor`
        _mm256_movemask_pd(_mm256_castsi256_pd(kor)) as u32 & ((1 << self.rows) - 1)
    }
}

/// Rows `first..first + out.len() / ntok` of a block-format `matmul` of several tokens, a tile of four rows
/// at a time.
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
pub(super) unsafe fn rows(job: &MatmulJob, first: usize, out: &mut [u32]) {
    let ntok = job.raw.len();
    let nrows = out.len() / ntok;
    let nb = job.acts.first().map_or(0, AlignedActs::blocks);
    let mut prep = TilePrep { fmt: job.fmt, rows: 0, q: Vec::new(), scales: Vec::new() };
    let mut sq = vec![0i32; nb.next_multiple_of(2) * TILE];
    let mut tile = vec![0u8; TILE * job.row_bytes];
    let mut reader = RowReader::new(job);
    for t0 in (0..nrows).step_by(TILE) {
        let n = (nrows - t0).min(TILE);
        for r in 0..n {
            tile[r * job.row_bytes..(r + 1) * job.row_bytes].copy_from_slice(reader.row(job, first + t0 + r));
        }
        let rows: Vec<&[u8]> = tile.chunks_exact(job.row_bytes).take(n).collect();
        prep.fill(&rows, nb);
        for (t, a) in job.acts.iter().enumerate() {
            let mut acc = [WideAcc::ZERO; TILE];
            if let Some(init) = job.init {
                for (r, acc) in acc.iter_mut().enumerate().take(n) {
                    *acc = init[(first + t0 + r) * ntok + t];
                }
            }
            let start = acc;
            prep.sums(&a.mant, &mut sq);
            let redo = prep.epilogue(a, &sq, &mut acc);
            for (r, row) in rows.iter().enumerate() {
                if redo & (1 << r) != 0 {
                    // a large shift or a non-finite scale: the scalar terms of this row
                    let row_sq: Vec<i32> = (0..nb).map(|b| sq[b * TILE + r]).collect();
                    acc[r] = start[r];
                    Simd::Portable.accumulate_row(&mut acc[r], job.fmt, row, a, &row_sq);
                }
                out[(t0 + r) * ntok + t] = store_bits(job.out, &acc[r]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::func::kernel::tests::{random_acts, random_block};
    use crate::func::kernel::Kernel;
    use opu_hw::numerics::align::align_vector;
    use opu_hw::numerics::dot::accumulate_row;
    use opu_hw::numerics::vector::DType;
    use rand::{Rng, SeedableRng};

    /// FP16 bits of a finite value with its exponent field in `lo..=hi`.
    fn f16_in(rng: &mut impl Rng, lo: u16, hi: u16) -> u16 {
        (rng.gen::<u16>() & 0x83FF) | (rng.gen_range(lo..=hi) << 10)
    }

    /// A block with scales like a trained model's (exponent fields 1 to 14: 2^-14 to 0.5).
    fn model_block(rng: &mut impl Rng, fmt: WeightFormat) -> Vec<u8> {
        let mut blk: Vec<u8> = (0..fmt.block_bytes()).map(|_| rng.gen()).collect();
        blk[0..2].copy_from_slice(&f16_in(rng, 1, 14).to_le_bytes());
        if fmt == WeightFormat::W4Min {
            blk[2..4].copy_from_slice(&f16_in(rng, 1, 14).to_le_bytes());
        }
        blk
    }

    /// The tile against the oracle, `dot::accumulate_row` of each row from `start`, for every token; and
    /// which rows the lanes left to the scalar path (bit per row, per token).
    fn check_tile(fmt: WeightFormat, rows: &[Vec<u8>], xs: &[Vec<u16>], start: WideAcc) -> Vec<u32> {
        let nb = xs[0].len() / BLOCK;
        let mut prep = TilePrep { fmt, rows: 0, q: Vec::new(), scales: Vec::new() };
        let slices: Vec<&[u8]> = rows.iter().map(|r| &r[..]).collect();
        let mut sq = vec![0i32; nb.next_multiple_of(2) * TILE];
        let mut redone = Vec::new();
        // SAFETY: the tests run where AVX2 was detected.
        unsafe { prep.fill(&slices, nb) };
        for x in xs {
            let acts = AlignedActs::new(x, 16);
            let mut acc = [start; TILE];
            // SAFETY: as above.
            let redo = unsafe {
                prep.sums(&acts.mant, &mut sq);
                prep.epilogue(&acts, &sq, &mut acc)
            };
            redone.push(redo);
            let aligned = align_vector(x, 16);
            for (r, row) in rows.iter().enumerate() {
                if redo & (1 << r) == 0 {
                    let mut want = start;
                    accumulate_row(&mut want, fmt, &aligned, x, row);
                    assert_eq!(acc[r], want, "{fmt:?} {nb} blocks, row {r}");
                }
            }
        }
        redone
    }

    /// Model-like data (the case the lanes serve) stays in the lanes and equals the oracle: odd and even
    /// block counts, rows missing from the last tile, and enough blocks for a fold (256) and a part.
    #[test]
    fn tile_lanes_equal_accumulate_row() {
        if Simd::detect() == Simd::Portable {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x711E);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            for (nb, nrows) in [(1, 4), (2, 3), (3, 1), (18, 4), (48, 2), (300, 4), (513, 4)] {
                let rows: Vec<Vec<u8>> = (0..nrows).map(|_| (0..nb).flat_map(|_| model_block(&mut rng, fmt)).collect()).collect();
                // activations of 2^-10 to 2^8 (exponent fields 5 to 23; with the scales' 1 to 14 a grid
                // shift of at most 15: `tile_shift_bound_and_largest_terms`)
                let xs: Vec<Vec<u16>> = (0..3)
                    .map(|_| (0..nb * BLOCK).map(|_| if rng.gen_bool(0.05) { 0 } else { f16_in(&mut rng, 5, 23) }).collect())
                    .collect();
                let start = WideAcc { fixed: rng.gen::<i64>().into(), nonfinite: false };
                let redone = check_tile(fmt, &rows, &xs, start);
                assert!(redone.iter().all(|&r| r == 0), "{fmt:?} {nb} blocks: model-like data left the lanes");
            }
        }
    }

    /// At the edge of the lanes' range: a grid shift of 15 stays (`k = 0`), 16 goes to the scalar path;
    /// and the largest terms (all 16-bit mantissas at their largest, the largest scales) sum exactly.
    #[test]
    fn tile_shift_bound_and_largest_terms() {
        if Simd::detect() == Simd::Portable {
            eprintln!("skipped: no AVX2");
            return;
        }
        for fmt in [WeightFormat::W4Min, WeightFormat::W8] {
            // activations of exponent field E align to X = E - 29 (16 bits), so with scales of exponent
            // field D the grid shift is D - 25 + X + 32 = D + E - 22: 15 at D + E = 37
            for (scale_field, x_field, want_redo) in [(15u16, 22u16, false), (15, 23, true), (30, 1, false), (1, 30, false)] {
                let scale = scale_field << 10 | 0x3FF; // the largest significand
                let mut blk = vec![0u8; fmt.block_bytes()];
                blk[0..2].copy_from_slice(&(scale | 0x8000).to_le_bytes());
                if fmt == WeightFormat::W4Min {
                    blk[2..4].copy_from_slice(&scale.to_le_bytes());
                }
                // the largest |q|: W4Min nibbles 15, W8 -128
                let q = if fmt == WeightFormat::W8 { 0x80 } else { 0xFF };
                for b in &mut blk[qs_offset(fmt)..] {
                    *b = q;
                }
                let nb = 300;
                let row: Vec<u8> = blk.iter().copied().cycle().take(nb * blk.len()).collect();
                let x: Vec<u16> = vec![x_field << 10 | 0x3FF; nb * BLOCK];
                let redone = check_tile(fmt, &[row.clone(), row], &[x], WideAcc::ZERO);
                // every term of this data has the same shift: all rows in the lanes, or none
                assert_eq!(redone[0] != 0, want_redo, "{fmt:?} scale field {scale_field}, activation field {x_field}");
            }
        }
    }

    /// The tiled kernel through `Kernel::matmul` (rows over tiles and threads, residual start, rounding,
    /// any data: specials and large shifts through the scalar path) equals the oracle, each output rounded
    /// as `WideAcc` rounds.
    #[test]
    fn tiled_matmul_equals_accumulate_row() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7113);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            for (rows, nb, ntok, wild) in [(1, 3, 2, false), (5, 18, 3, false), (9, 7, 4, true), (13, 2, 2, true), (64, 18, 16, false), (37, 48, 5, true)] {
                let raw: Vec<Vec<u16>> = (0..ntok)
                    .map(|_| {
                        (0..nb)
                            .flat_map(|_| if wild { random_acts(&mut rng) } else { (0..BLOCK).map(|_| f16_in(&mut rng, 5, 23)).collect() })
                            .collect()
                    })
                    .collect();
                let acts: Vec<AlignedActs> = raw.iter().map(|x| AlignedActs::new(x, 16)).collect();
                let weights: Vec<u8> =
                    (0..rows * nb).flat_map(|_| if wild { random_block(&mut rng, fmt) } else { model_block(&mut rng, fmt) }).collect();
                let init: Vec<WideAcc> =
                    (0..rows * ntok).map(|_| WideAcc { fixed: rng.gen::<i64>().into(), nonfinite: rng.gen_bool(0.02) }).collect();
                let rb = nb * fmt.block_bytes();
                for out in [DType::F16, DType::F32] {
                    let job = MatmulJob { fmt, out, weights: &weights, layout: None, rows, row_bytes: rb, raw: &raw, acts: &acts, init: Some(&init) };
                    for threads in [1, 2] {
                        let got = Kernel::new(threads).matmul(&job);
                        for r in 0..rows {
                            for t in 0..ntok {
                                let mut want = init[r * ntok + t];
                                accumulate_row(&mut want, fmt, &align_vector(&raw[t], 16), &raw[t], &weights[r * rb..(r + 1) * rb]);
                                assert_eq!(got[r * ntok + t], store_bits(out, &want), "{fmt:?} {rows}x{nb} blocks, row {r} token {t}");
                            }
                        }
                    }
                }
            }
        }
    }
}

//! Attention: `attn` (grouped-query attention with online softmax, KV presence and the KV history buffer)
//! and `kvappend`.

#![allow(clippy::too_many_arguments)]

use std::ops::Range;

use opu_hw::isa::{Csr, Reg, LINE_BYTES};
use opu_hw::numerics::vector::{DType, OnlineSoftmax};
use opu_hw::regs::ErrorCode;

use crate::func::machine::{copy_f16s, line, lines_touched, require, word, Machine, Span, Trap, ALL_PRESENT, NO_INDEX};
use crate::func::kernel::Simd;
use crate::func::score::{score_rows, Query};
use crate::func::stats::ReadTally;

/// Positions whose K and V are gathered (and scored in parallel) at a time: bounds the memory of an `attn`
/// over any number of positions.
const POSITIONS_PER_CHUNK: u64 = 4096;

/// The online softmax of every head of the group folds in the chunk's positions in order: each V row
/// widened to FP32 once for all the heads, then `OnlineSoftmax::push_widened`, or its AVX2 form
/// ([`fold_avx2`]).
fn fold_positions<'a>(
    simd: Simd,
    softmax: &mut [OnlineSoftmax],
    rows: &[KvAt],
    scores: &[f32],
    v_of: impl Fn(KvAt) -> &'a [u16],
    v_row: &mut [f32],
) {
    match simd {
        Simd::Portable => {
            let group = softmax.len();
            for (&r, st) in rows.iter().zip(scores.chunks_exact(group)) {
                let vt: &[half::f16] = half::slice::HalfBitsSliceExt::reinterpret_cast(v_of(r));
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(vt, v_row);
                for (sm, &s) in softmax.iter_mut().zip(st) {
                    sm.push_widened(s, v_row);
                }
            }
        }
        // SAFETY: AVX2 and F16C are present (detected).
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { fold_avx2(softmax, rows, scores, v_of, v_row) },
    }
}

/// [`fold_positions`] with AVX2: first `OnlineSoftmax::steps` (opu-hw's `step` of every position and head,
/// the exponentials in one vectorized pass), then the output update `o c + p v` over the positions, up to
/// four heads side by side with 16 outputs of each held in registers, the V elements widened by `vcvtph2ps`
/// (exact), each product and the sum rounded to FP32 as `axpby` rounds them. Two liberties, neither of
/// which changes a bit of `finish`: where `c` is 1 (the running maximum did not move: most positions) `o c`
/// is `o` and is not computed; and the update's NaN is not made canonical at each step, only by `finish`
/// (a NaN element stays NaN through every later `o c + p v`, and `finish` canonicalizes whatever NaN it
/// gets).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn fold_avx2<'a>(softmax: &mut [OnlineSoftmax], rows: &[KvAt], scores: &[f32], v_of: impl Fn(KvAt) -> &'a [u16], _v_row: &mut [f32]) {
    let group = softmax.len();
    let hd = softmax.first().map_or(0, |sm| sm.out.len());
    // head_dim is a multiple of 16 (the CSR's rule)
    assert!(hd.is_multiple_of(16) && softmax.iter().all(|sm| sm.out.len() == hd));
    let v: Vec<*const u16> = rows.iter().map(|&r| {
        let v = v_of(r);
        assert!(v.len() == hd);
        v.as_ptr()
    }).collect();
    let (mut c, mut p) = (Vec::with_capacity(scores.len()), Vec::with_capacity(scores.len()));
    OnlineSoftmax::steps(softmax, scores, &mut c, &mut p);
    // up to four heads side by side (each V element widened once for all of them), 32 outputs of each at a
    // time where head_dim allows (three heads or fewer: the registers), else 16
    for (n, heads) in softmax.chunks_mut(4).enumerate() {
        let at = (4 * n, group);
        match (heads.len(), hd % 32) {
            (1, 0) => update_heads::<1, 4>(heads, at, &c, &p, &v),
            (2, 0) => update_heads::<2, 4>(heads, at, &c, &p, &v),
            (3, 0) => update_heads::<3, 4>(heads, at, &c, &p, &v),
            (1, _) => update_heads::<1, 2>(heads, at, &c, &p, &v),
            (2, _) => update_heads::<2, 2>(heads, at, &c, &p, &v),
            (3, _) => update_heads::<3, 2>(heads, at, &c, &p, &v),
            _ => update_heads::<4, 2>(heads, at, &c, &p, &v),
        }
    }
}

/// The output update of `G` heads (`heads[h]` is head `first + h` of a group of `group`: its factors are
/// `c[t group + first + h]`, `p` alike) over the positions (V rows `v[t]`), `8 W` outputs of every head at a
/// time in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn update_heads<const G: usize, const W: usize>(heads: &mut [OnlineSoftmax], (first, group): (usize, usize), c: &[f32], p: &[f32], v: &[*const u16]) {
    use std::arch::x86_64::*;
    assert!(heads.len() == G && first + G <= group && c.len() == v.len() * group && p.len() == c.len());
    let hd = heads[0].out.len();
    assert!(hd.is_multiple_of(8 * W));
    for j in (0..hd).step_by(8 * W) {
        let mut acc: [[__m256; W]; G] = std::array::from_fn(|h| {
            let o = heads[h].out.as_ptr().add(j);
            std::array::from_fn(|i| _mm256_loadu_ps(o.add(8 * i)))
        });
        for ((ct, pt), &vt) in c.chunks_exact(group).zip(p.chunks_exact(group)).zip(v) {
            let (ct, pt) = (&ct[first..first + G], &pt[first..first + G]);
            let vt = vt.add(j);
            let x: [__m256; W] = std::array::from_fn(|i| _mm256_cvtph_ps(_mm_loadu_si128(vt.add(8 * i) as *const __m128i)));
            for h in 0..G {
                let pv = _mm256_set1_ps(pt[h]);
                if ct[h] == 1.0 {
                    for i in 0..W {
                        acc[h][i] = _mm256_add_ps(acc[h][i], _mm256_mul_ps(pv, x[i]));
                    }
                } else {
                    let cv = _mm256_set1_ps(ct[h]);
                    for i in 0..W {
                        acc[h][i] = _mm256_add_ps(_mm256_mul_ps(acc[h][i], cv), _mm256_mul_ps(pv, x[i]));
                    }
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            let o = heads[h].out.as_mut_ptr().add(j);
            for (i, a) in a.iter().enumerate() {
                _mm256_storeu_ps(o.add(8 * i), *a);
            }
        }
    }
}

/// Where a position's K and V rows are read: elements of the history buffer, of the gathered rows, or of
/// device memory read as FP16 (`K` and `V` row).
#[derive(Clone, Copy, Debug)]
enum KvAt {
    History(usize),
    Gathered(usize),
    Memory { k: usize, v: usize },
}

/// Distinct values of a nondecreasing sequence of line numbers.
fn lines_of(lines: impl Iterator<Item = u64>) -> u64 {
    let mut last = None;
    lines.filter(|&l| last.replace(l) != Some(l)).count() as u64
}

impl Machine {
    /// The `head_dim` CSR, checked (a multiple of 16, at most 1023).
    fn head_dim(&self) -> Result<usize, Trap> {
        let hd = self.csr(Csr::HeadDim);
        require(hd > 0 && hd.is_multiple_of(16) && hd <= 1023)?;
        Ok(hd as usize)
    }

    /// Whether history slot `t` exists for KV heads `kvh..kvh + heads` (all of them or none).
    fn history_slot(&self, t: u64, kvh: usize, heads: usize, hd: usize) -> bool {
        t < u64::from(self.hist_slots) && (kvh + heads) * hd <= self.hist_width as usize
    }

    /// Whether position `t` is present: no presence bytes (`presence` the checked span of them), or its byte
    /// is not 0.
    fn present(&self, presence: Option<&Range<usize>>, t: u64) -> bool {
        presence.is_none_or(|r| self.mem[r.start + t as usize] != 0)
    }

    /// The `attn_heads` CSR: KV heads per `attn` (0 counts as 1).
    fn attn_heads(&self) -> usize {
        self.csr(Csr::AttnHeads).max(1) as usize
    }

    /// The byte range of history slot `t`, KV head `kvh`, within the K (or V) buffer, in elements.
    fn history_elems(&self, t: usize, kvh: usize, hd: usize) -> Range<usize> {
        let at = t * self.hist_width as usize + kvh * hd;
        at..at + hd
    }

    /// The K/V row `row` at line `base`: `32 (base + row kv_stride)`.
    fn kv_row(&self, base: u32, row: u64, hd: usize) -> Span {
        let lines = u128::from(base) + u128::from(row) * u128::from(self.csr(Csr::KvStride));
        Span::new(line(lines), 2 * hd as u128)
    }

    /// The device-memory span of the row index entries of `n` positions from position `first` (`kv_index`
    /// set), checked; `None` without an index.
    fn kv_index_span(&self, first: u64, n: u64) -> Result<Option<Range<usize>>, Trap> {
        let kvi = self.csr(Csr::KvIndex);
        if kvi == NO_INDEX {
            return Ok(None);
        }
        Ok(Some(self.mem_range(Span::new(line(u128::from(kvi)) + 4 * u128::from(first), 4 * u128::from(n)))?))
    }

    /// Entry `i` (a row) of the index span `r`.
    fn index_entry(&self, r: &Range<usize>, i: u64) -> u64 {
        let at = r.start + 4 * i as usize;
        u64::from(u32::from_le_bytes(self.mem[at..at + 4].try_into().expect("4 bytes")))
    }

    /// The row of position `t`: its entry in the index span of positions from 0, or `t` without an index.
    fn kv_row_of(&self, index: Option<&Range<usize>>, t: u64) -> u64 {
        index.map_or(t, |r| self.index_entry(r, t))
    }

    pub(super) fn attn(
        &mut self,
        group: u32,
        kvh: u32,
        len: Reg,
        dst: u32,
        q: u32,
        k: u32,
        v: u32,
    ) -> Result<(), Trap> {
        let hd = self.head_dim()?;
        let positions = self.reg(len);
        require(group > 0 && positions > 0)?;
        // the attention unit's buffers: 16 query heads with each KV head's padded to even, 1,024 K (V)
        // elements per position
        let heads = self.attn_heads();
        require(opu_hw::isa::attn_heads_fit(heads as u64, u64::from(group), hd as u64))?;
        let heads_bytes = (heads as u128) * u128::from(group) * 2 * hd as u128;
        let dst_r = self.spm_range(Span::new(word(dst), heads_bytes))?;
        let q_r = self.spm_range(Span::new(word(q), heads_bytes))?;
        let kvp = self.csr(Csr::KvPresent);
        let presence_r = if kvp != ALL_PRESENT {
            Some(self.mem_range(Span::new(line(u128::from(kvp)), u128::from(positions)))?)
        } else {
            None
        };
        let index_r = self.kv_index_span(0, u64::from(positions))?;

        // Check every position before any effect, so that a trap leaves no trace. (Every position present and
        // no index: the rows lie in position order, so the last one's being in memory is enough.)
        let kvh = kvh as usize;
        let last = u64::from(positions) - 1;
        let dense_in_memory = presence_r.is_none()
            && index_r.is_none()
            && self.mem_range(self.kv_row(k, last, heads * hd)).is_ok()
            && self.mem_range(self.kv_row(v, last, heads * hd)).is_ok();
        for t in (0..u64::from(positions)).filter(|_| !dense_in_memory) {
            if self.present(presence_r.as_ref(), t) {
                let row = self.kv_row_of(index_r.as_ref(), t);
                self.mem_range(self.kv_row(k, row, heads * hd))?;
                self.mem_range(self.kv_row(v, row, heads * hd))?;
            } else if !self.history_slot(t, kvh, heads, hd) {
                return Err(Trap { code: ErrorCode::HistoryOverflow, info: t });
            }
        }
        for r in presence_r.iter().chain(&index_r) {
            self.note_read(r);
        }

        let group = group as usize;
        for i in 0..heads {
            // KV head kvh + i: its rows follow head i - 1's in each K (V) row, its queries and outputs follow
            let (k, v) = (k + (i * hd / 16) as u32, v + (i * hd / 16) as u32);
            let at = i * group * 2 * hd;
            let (q_i, dst_i) = (q_r.start + at..q_r.start + at + group * 2 * hd, dst_r.start + at..dst_r.start + at + group * 2 * hd);
            self.attn_head(group, (kvh, heads), i, positions, hd, q_i, dst_i, k, v, presence_r.as_ref(), index_r.as_ref())?;
        }
        if let Some(ir) = &index_r {
            // what the RTL reads of the index and the presence bytes (the cycle model's scan)
            let present: Vec<u64> = (0..u64::from(positions)).filter(|&t| self.present(presence_r.as_ref(), t)).collect();
            self.work.indexed_present += present.len() as u64;
            self.work.index_lines += lines_of(present.iter().map(|&t| (ir.start as u64 + 4 * t) / 32));
            if let Some(pr) = &presence_r {
                self.work.presence_lines += lines_of((0..u64::from(positions)).map(|t| (pr.start as u64 + t) / 32));
            }
        }
        let n = positions as usize;
        let work = 2 * (heads * group * n * hd) as u64;
        self.work.macs += work;
        self.work.pe_products += work;
        self.work.vector_elems += (heads * group * n * hd) as u64;
        self.work.positions += u64::from(positions);
        Ok(())
    }

    /// KV head `kvh0 + i` of an `attn` over `(kvh0, heads)` (checked): its `group` query heads at `q_r`,
    /// outputs at `dst_r`, K and V rows at lines `k`, `v`; history slots exist for all the heads or none.
    fn attn_head(
        &mut self,
        group: usize,
        (kvh0, heads): (usize, usize),
        i: usize,
        positions: u32,
        hd: usize,
        q_r: Range<usize>,
        dst_r: Range<usize>,
        k: u32,
        v: u32,
        presence_r: Option<&Range<usize>>,
        index_r: Option<&Range<usize>>,
    ) -> Result<(), Trap> {
        let scale = f32::from_bits(self.csr(Csr::AttnScale));
        let simd = self.kernel.simd;
        let queries: Vec<Query> = (0..group).map(|g| Query::new(&self.spm_f16s(q_r.start + g * 2 * hd, hd))).collect();
        let mut softmax: Vec<OnlineSoftmax> = (0..group).map(|_| OnlineSoftmax::new(hd)).collect();
        let limit = queries.iter().map(Query::limit).fold(f32::INFINITY, f32::min);
        // Where each position's K and V rows are read (`KvAt`): a present position's from device memory, in
        // place (its history slot's refresh is deferred: `history_refresh`), or gathered into `ks` / `vs`
        // where memory cannot be read as FP16 in place; an absent position's from its history slot.
        if self.hist_refresh.head_dim() != hd {
            self.copy_all_refreshes();
            self.hist_refresh.set_head_dim(hd);
        }
        let in_place = cfg!(target_endian = "little") && self.mem.as_ptr().align_offset(2) == 0;
        let chunk_len = POSITIONS_PER_CHUNK.min(u64::from(positions)) as usize;
        let mut rows: Vec<KvAt> = Vec::with_capacity(chunk_len);
        let (mut ks, mut vs) = (Vec::<u16>::new(), Vec::<u16>::new());
        let mut scores = Vec::<f32>::with_capacity(chunk_len * group);
        let mut v_row = vec![0f32; hd];
        // Where row `row` of the K (V) rows at line `base` lies: `attn` checked every present position's rows
        // of all its heads before any effect (so these are in memory).
        let (stride, mem_len) = (u64::from(self.csr(Csr::KvStride)), self.mem.len());
        let row_at = |base: u32, row: u64| {
            let start = ((u64::from(base) + row * stride) * LINE_BYTES) as usize;
            debug_assert!(start + 2 * hd <= mem_len);
            start..start + 2 * hd
        };
        // the reads of the K and V rows credited to their memory regions (`note_read`) a run at a time (K
        // and V rows lie in regions of their own)
        let (mut tally_k, mut tally_v) = (ReadTally::default(), ReadTally::default());
        // the present positions' rows read (`note_read`'s counts, added at the end)
        let (mut misses, mut lines_read) = (0u64, 0u64);
        let mut first = 0u64;
        while first < u64::from(positions) {
            let end = (first + POSITIONS_PER_CHUNK).min(u64::from(positions));
            let n = (end - first) as usize;
            rows.clear();
            ks.clear();
            vs.clear();
            for t in first..end {
                let slot = self.history_slot(t, kvh0, heads, hd);
                if self.present(presence_r, t) {
                    let row = self.kv_row_of(index_r, t);
                    let (kr, vr) = (row_at(k, row), row_at(v, row));
                    tally_k.record(&mut self.regions, kr.start as u64, kr.len() as u64);
                    tally_v.record(&mut self.regions, vr.start as u64, vr.len() as u64);
                    lines_read += lines_touched(&kr) + lines_touched(&vr);
                    misses += 1;
                    if slot {
                        self.hist_refresh.defer(t as usize, kvh0 + i, kr.clone(), vr.clone());
                    }
                    if in_place {
                        rows.push(KvAt::Memory { k: kr.start / 2, v: vr.start / 2 });
                    } else {
                        rows.push(KvAt::Gathered(ks.len()));
                        ks.resize(ks.len() + hd, 0);
                        vs.resize(vs.len() + hd, 0);
                        let at = ks.len() - hd;
                        copy_f16s(&mut ks[at..], &self.mem[kr]);
                        copy_f16s(&mut vs[at..], &self.mem[vr]);
                    }
                } else {
                    self.counters.kv_history_hits += 1;
                    if let Some(p) = self.hist_refresh.take(t as usize, kvh0 + i) {
                        self.copy_refresh(p);
                    }
                    rows.push(KvAt::History(self.history_elems(t as usize, kvh0 + i, hd).start));
                }
            }
            // The scores are independent of each other (computed in parallel when there are threads); the
            // online softmax then folds them in position order.
            scores.clear();
            scores.resize(n * group, 0.0);
            let chunk = group * n.div_ceil(4 * self.kernel.threads()).max(64);
            // SAFETY: any two bytes are a valid u16; `in_place` checked the alignment (the prefix is empty)
            let mem16: &[u16] = if in_place { unsafe { self.mem.align_to::<u16>().1 } } else { &[] };
            let (hist_k, hist_v) = (&self.hist_k, &self.hist_v);
            let k_of = |r: KvAt| match r {
                KvAt::History(at) => &hist_k[at..at + hd],
                KvAt::Gathered(at) => &ks[at..at + hd],
                KvAt::Memory { k, .. } => &mem16[k..k + hd],
            };
            self.kernel.for_each_chunk(&mut scores, chunk, |at, out| {
                score_rows(simd, &queries, limit, scale, out, |i| k_of(rows[at / group + i]));
            });
            let v_of = |r: KvAt| match r {
                KvAt::History(at) => &hist_v[at..at + hd],
                KvAt::Gathered(at) => &vs[at..at + hd],
                KvAt::Memory { v, .. } => &mem16[v..v + hd],
            };
            fold_positions(simd, &mut softmax, &rows, &scores, v_of, &mut v_row);
            first = end;
        }
        tally_k.flush(&mut self.regions);
        tally_v.flush(&mut self.regions);
        self.counters.kv_history_misses += misses;
        self.work.bytes_read += misses * 4 * hd as u64;
        self.work.mem_rows_read += 2 * misses;
        self.work.mem_lines_read += lines_read;
        for (g, sm) in softmax.iter().enumerate() {
            let out = &mut self.spm[dst_r.start + g * 2 * hd..dst_r.start + (g + 1) * 2 * hd];
            for (i, &y) in sm.finish().iter().enumerate() {
                DType::F16.write(out, i, y);
            }
        }
        Ok(())
    }

    pub(super) fn kvappend(&mut self, pos: Reg, ksrc: u32, vsrc: u32, k: u32, v: u32) -> Result<(), Trap> {
        let hd = self.head_dim()?;
        // `attn_heads` KV heads, their rows side by side (as `attn` reads them)
        let heads = self.attn_heads();
        require(opu_hw::isa::kvappend_heads_fit(heads as u64, hd as u64))?;
        let n = heads * hd;
        let p = u64::from(self.reg(pos));
        let ks = self.spm_range(Span::new(word(ksrc), 2 * n as u128))?;
        let vs = self.spm_range(Span::new(word(vsrc), 2 * n as u128))?;
        // the row: the index entry of `P`, or `P`
        let index_r = self.kv_index_span(p, 1)?;
        let row = index_r.as_ref().map_or(p, |r| self.index_entry(r, 0));
        let km = self.mem_range(self.kv_row(k, row, n))?;
        let vm = self.mem_range(self.kv_row(v, row, n))?;
        let kvp = self.csr(Csr::KvPresent);
        let mark = if kvp != ALL_PRESENT {
            Some(self.mem_range(Span::new(line(u128::from(kvp)) + u128::from(p), 1))?)
        } else {
            None
        };
        if let Some(r) = &index_r {
            self.note_read(r);
            self.work.index_lines += 1;
        }
        // K first, then V (if the rows overlap in memory, V wins).
        self.before_write(&km);
        self.before_write(&vm);
        self.mem[km.clone()].copy_from_slice(&self.spm[ks]);
        self.mem[vm.clone()].copy_from_slice(&self.spm[vs]);
        self.note_write(&km);
        self.note_write(&vm);
        if let Some(m) = mark {
            self.before_write(&m);
            self.mem[m.start] = 1;
            self.note_write(&m);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The AVX2 fold equals the portable one (opu-hw's `push_widened` per position), bit for bit after
    /// `finish`: scores that move the maximum and ones that do not, specials among the scores and the V
    /// elements (infinities, NaNs: the update's NaNs are made canonical only at the end).
    #[test]
    fn avx2_fold_equals_push_widened() {
        if Simd::detect() == Simd::Portable {
            eprintln!("skipped: no AVX2");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xF01D);
        for case in 0..400 {
            let (hd, group, n) = ([16, 64, 128][case % 3], 1 + case % 6, 1 + rng.gen_range(0..60));
            let special = case % 5 == 0;
            let vs: Vec<u16> = (0..n * hd)
                .map(|_| match rng.gen_range(0..100) {
                    0 if special => [0x7C00u16, 0xFC00, 0x7E00, 0x7C01][rng.gen_range(0..4)],
                    _ => (rng.gen::<u16>() & 0x83FF) | (rng.gen_range(5u16..20) << 10),
                })
                .collect();
            let scores: Vec<f32> = (0..n * group)
                .map(|i| match rng.gen_range(0..50) {
                    0 if special => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][rng.gen_range(0..3)],
                    // mostly small moves, sometimes a new maximum far above
                    1 => rng.gen_range(5.0..40.0) + i as f32 * 0.01,
                    _ => rng.gen_range(-8.0..2.0),
                })
                .collect();
            let rows: Vec<KvAt> = (0..n).map(|t| KvAt::Gathered(t * hd)).collect();
            let fold = |simd: Simd| {
                let mut sm: Vec<OnlineSoftmax> = (0..group).map(|_| OnlineSoftmax::new(hd)).collect();
                let mut v_row = vec![0f32; hd];
                fold_positions(simd, &mut sm, &rows, &scores, |r| match r {
                    KvAt::Gathered(at) => &vs[at..at + hd],
                    _ => unreachable!(),
                }, &mut v_row);
                sm.iter().flat_map(|s| s.finish()).map(f32::to_bits).collect::<Vec<u32>>()
            };
            assert_eq!(fold(Simd::Avx2), fold(Simd::Portable), "case {case}: hd {hd}, group {group}, {n} positions");
        }
    }
}

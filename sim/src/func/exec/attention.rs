//! Attention: `attn` (grouped-query attention with online softmax, KV presence and the KV history buffer)
//! and `kvappend`.

#![allow(clippy::too_many_arguments)]

use std::ops::Range;

use opu_hw::isa::{Csr, Reg};
use opu_hw::numerics::vector::{DType, OnlineSoftmax};
use opu_hw::regs::ErrorCode;

use crate::func::machine::{line, require, word, Machine, Span, Trap, ALL_PRESENT, NO_INDEX};
use crate::func::kernel::Simd;
use crate::func::score::{score_group, KRow, Query};

/// Positions whose K and V are gathered (and scored in parallel) at a time: bounds the memory of an `attn`
/// over any number of positions.
const POSITIONS_PER_CHUNK: u64 = 4096;

/// The online softmax of every head of the group folds in the chunk's positions in order: each V row
/// widened to FP32 once for all the heads, then `OnlineSoftmax::push_widened` (compiled for AVX2 where
/// the CPU has it, so that its output update is eight lanes wide).
fn fold_positions<'a>(
    simd: Simd,
    softmax: &mut [OnlineSoftmax],
    rows: &[(bool, usize)],
    scores: &[f32],
    v_of: impl Fn((bool, usize)) -> &'a [u16],
    v_row: &mut [f32],
) {
    #[inline(always)]
    fn fold<'a>(softmax: &mut [OnlineSoftmax], rows: &[(bool, usize)], scores: &[f32], v_of: impl Fn((bool, usize)) -> &'a [u16], v_row: &mut [f32]) {
        let group = softmax.len();
        for (&r, st) in rows.iter().zip(scores.chunks_exact(group)) {
            let vt: &[half::f16] = half::slice::HalfBitsSliceExt::reinterpret_cast(v_of(r));
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(vt, v_row);
            for (sm, &s) in softmax.iter_mut().zip(st) {
                sm.push_widened(s, v_row);
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fold_avx2<'a>(softmax: &mut [OnlineSoftmax], rows: &[(bool, usize)], scores: &[f32], v_of: impl Fn((bool, usize)) -> &'a [u16], v_row: &mut [f32]) {
        fold(softmax, rows, scores, v_of, v_row)
    }
    match simd {
        Simd::Portable => fold(softmax, rows, scores, v_of, v_row),
        // SAFETY: AVX2 is present (detected).
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { fold_avx2(softmax, rows, scores, v_of, v_row) },
    }
}

/// Little-endian FP16 bytes into FP16 bits.
fn copy_f16s(dst: &mut [u16], src: &[u8]) {
    for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = u16::from_le_bytes([b[0], b[1]]);
    }
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

        // Check every position before any effect, so that a trap leaves no trace.
        let kvh = kvh as usize;
        for t in 0..u64::from(positions) {
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
        // Where each position's K and V rows are read: its history slot (present positions refresh it
        // first, so a slot always holds the position's rows), or, beyond the slots, device memory gathered
        // into `ks` / `vs` (FP16 bits).
        let chunk_len = POSITIONS_PER_CHUNK.min(u64::from(positions)) as usize;
        let mut rows: Vec<(bool, usize)> = Vec::with_capacity(chunk_len);
        let (mut ks, mut vs) = (Vec::<u16>::new(), Vec::<u16>::new());
        let mut scores = Vec::<f32>::with_capacity(chunk_len * group);
        let mut v_row = vec![0f32; hd];
        let mut first = 0u64;
        while first < u64::from(positions) {
            let end = (first + POSITIONS_PER_CHUNK).min(u64::from(positions));
            let n = (end - first) as usize;
            rows.clear();
            ks.clear();
            vs.clear();
            for t in first..end {
                let slot = self.history_slot(t, kvh0, heads, hd);
                let hist = self.history_elems(t as usize, kvh0 + i, hd);
                if self.present(presence_r, t) {
                    let row = self.kv_row_of(index_r, t);
                    let kr = self.mem_range(self.kv_row(k, row, hd))?;
                    let vr = self.mem_range(self.kv_row(v, row, hd))?;
                    self.note_read(&kr);
                    self.note_read(&vr);
                    self.counters.kv_history_misses += 1;
                    if slot {
                        copy_f16s(&mut self.hist_k[hist.clone()], &self.mem[kr]);
                        copy_f16s(&mut self.hist_v[hist.clone()], &self.mem[vr]);
                        rows.push((true, hist.start));
                    } else {
                        rows.push((false, ks.len()));
                        ks.resize(ks.len() + hd, 0);
                        vs.resize(vs.len() + hd, 0);
                        let at = ks.len() - hd;
                        copy_f16s(&mut ks[at..], &self.mem[kr]);
                        copy_f16s(&mut vs[at..], &self.mem[vr]);
                    }
                } else {
                    self.counters.kv_history_hits += 1;
                    rows.push((true, hist.start));
                }
            }
            // The scores are independent of each other (computed in parallel when there are threads); the
            // online softmax then folds them in position order.
            scores.clear();
            scores.resize(n * group, 0.0);
            let chunk = group * n.div_ceil(4 * self.kernel.threads()).max(64);
            let (hist_k, hist_v) = (&self.hist_k, &self.hist_v);
            let k_of = |(in_history, at): (bool, usize)| if in_history { &hist_k[at..at + hd] } else { &ks[at..at + hd] };
            self.kernel.for_each_chunk(&mut scores, chunk, |at, out| {
                let mut kw = KRow::default();
                for (i, st) in out.chunks_exact_mut(group).enumerate() {
                    score_group(simd, &queries, limit, k_of(rows[at / group + i]), scale, &mut kw, st);
                }
            });
            let v_of = |(in_history, at): (bool, usize)| if in_history { &hist_v[at..at + hd] } else { &vs[at..at + hd] };
            fold_positions(simd, &mut softmax, &rows, &scores, v_of, &mut v_row);
            first = end;
        }
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
        self.mem[km.clone()].copy_from_slice(&self.spm[ks]);
        self.mem[vm.clone()].copy_from_slice(&self.spm[vs]);
        self.note_write(&km);
        self.note_write(&vm);
        if let Some(m) = mark {
            self.mem[m.start] = 1;
            self.note_write(&m);
        }
        Ok(())
    }
}

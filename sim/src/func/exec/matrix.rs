//! The PE array: `matmul` (hybrid matrix x vectors) and `route` (the SkipGPT router).

#![allow(clippy::too_many_arguments)]

use opu_hw::isa::{Csr, Pred, RedMode, Reg, NUM_RED};
use opu_hw::numerics::router;
use opu_hw::numerics::fp16::f16_to_f32;
use opu_hw::numerics::vector::{accumulate_square, DType};
use opu_hw::numerics::{WeightFormat, WideAcc};
use opu_hw::weight_layout::WeightLayout;

use crate::func::kernel::{AlignedActs, MatmulJob};
use crate::func::machine::{f16s, line, pad4, require, word, Machine, Span, Trap, ALL_PRESENT};

impl Machine {
    pub(super) fn matmul(
        &mut self,
        fmt: WeightFormat,
        out: DType,
        acc: bool,
        red: RedMode,
        ntok: u32,
        dst: u32,
        src: u32,
        rows: u32,
        cols: u32,
        w: u32,
    ) -> Result<(), Trap> {
        require(ntok > 0 && rows > 0 && cols > 0 && ntok <= self.max_batch)?;
        require(red == RedMode::None || ntok as usize <= NUM_RED)?;
        let row_bytes = fmt.row_bytes(cols as usize).ok_or_else(Trap::bad_operand)?;
        require(row_bytes <= self.max_row_bytes as usize)?;
        // the weights lie interleaved by lane from a multiple of 16 x pe_lanes bytes (docs/isa.md, `matmul`)
        let layout = WeightLayout::for_lanes(self.pe_lanes, row_bytes);
        require(line(u128::from(w)).is_multiple_of(u128::from(WeightLayout::align_for_lanes(self.pe_lanes))))?;
        let (nt, nr, nc) = (u128::from(ntok), u128::from(rows), u128::from(cols));
        let ob = out.bytes() as u128;
        let src_span = Span::vectors(word(src), nt, nc, 2);
        let dst_span = Span::vectors(word(dst), nt, nr, ob);
        require(!src_span.overlaps(&dst_span))?;
        let dst_r = self.spm_range(dst_span)?;
        let src_r = self.spm_range(src_span)?;
        let w_r = self.mem_range(Span::new(line(u128::from(w)), u128::from(layout.matrix_bytes(nr as u64))))?;

        let (ntok, rows, cols) = (ntok as usize, rows as usize, cols as usize);
        let (src_pitch, dst_pitch) = (pad4(nc * 2) as usize, pad4(nr * ob) as usize);
        let raw: Vec<Vec<u16>> = (0..ntok).map(|t| self.spm_f16s(src_r.start + t * src_pitch, cols)).collect();
        let acts: Vec<AlignedActs> = if fmt == WeightFormat::F16 {
            Vec::new()
        } else {
            raw.iter().map(|x| AlignedActs::new(x, self.act_bits)).collect()
        };
        let dst_bytes = &self.spm[dst_r.clone()];
        // acc=1: each accumulator starts at the old output (a fused residual), [row][token].
        let init: Option<Vec<WideAcc>> = acc.then(|| {
            let mut init = vec![WideAcc::ZERO; rows * ntok];
            for t in 0..ntok {
                let row = &dst_bytes[t * dst_pitch..];
                for r in 0..rows {
                    let a = &mut init[r * ntok + t];
                    match out {
                        DType::F16 => a.add_f16(u16::from_le_bytes([row[2 * r], row[2 * r + 1]])),
                        DType::F32 => a.add_f32(DType::F32.read(row, r)),
                    }
                }
            }
            init
        });
        // a row-major copy of the matrix where one is kept (`rowcache`), else the matrix as it lies
        let copy = self.row_cache.rows(&self.mem, w_r.clone(), &layout, rows as u64);
        let job = MatmulJob {
            fmt,
            out,
            weights: copy.as_deref().map_or(&self.mem[w_r.clone()], |c| &c[..]),
            layout: if copy.is_some() { None } else { Some(layout) },
            rows,
            row_bytes,
            raw: &raw,
            acts: &acts,
            init: init.as_deref(),
        };
        let results = self.kernel.matmul(&job);

        for t in 0..ntok {
            if red == RedMode::Set {
                self.red[t] = WideAcc::ZERO;
            }
            let at = dst_r.start + t * dst_pitch;
            for r in 0..rows {
                let bits = results[r * ntok + t];
                let stored = match out {
                    DType::F16 => {
                        self.spm[at + 2 * r..at + 2 * r + 2].copy_from_slice(&(bits as u16).to_le_bytes());
                        f16_to_f32(bits as u16)
                    }
                    DType::F32 => {
                        self.spm[at + 4 * r..at + 4 * r + 4].copy_from_slice(&bits.to_le_bytes());
                        f32::from_bits(bits)
                    }
                };
                if red != RedMode::None {
                    accumulate_square(&mut self.red[t], stored);
                }
            }
        }
        self.note_read(&w_r);
        let macs = (ntok * rows * cols) as u64;
        self.work.macs += macs;
        self.work.pe_products += macs;
        Ok(())
    }

    pub(super) fn route(&mut self, pd: Pred, mark: bool, pos: Reg, src: u32, w: u32, cols: u32) -> Result<(), Trap> {
        // whole lines of weights: the skip row and the biases start on a line (docs/isa.md)
        require(cols > 0 && cols.is_multiple_of(16))?;
        let n = cols as usize;
        let x_r = self.spm_range(Span::new(word(src), 2 * u128::from(cols)))?;
        let w_r = self.mem_range(Span::new(line(u128::from(w)), 4 * u128::from(cols) + 4))?;
        let kvp = self.csr(Csr::KvPresent);
        let mark_r = if mark && kvp != ALL_PRESENT {
            Some(self.mem_range(Span::new(line(u128::from(kvp)) + u128::from(self.reg(pos)), 1))?)
        } else {
            None
        };

        let x = f16s(&self.spm[x_r]);
        let wb = &self.mem[w_r.clone()];
        // Execute logit weights, skip logit weights, then the two biases (execute, skip).
        let bias = |k: usize| u16::from_le_bytes([wb[4 * n + 2 * k], wb[4 * n + 2 * k + 1]]);
        let (_, _, skip) = router::route(&x, &f16s(&wb[..2 * n]), &f16s(&wb[2 * n..4 * n]), [bias(0), bias(1)]);
        self.p[usize::from(pd.0)] = skip;
        self.counters.skipped_blocks += u64::from(skip);
        self.note_read(&w_r);
        if let Some(m) = mark_r {
            self.before_write(&m);
            self.mem[m.start] = u8::from(!skip);
            self.note_write(&m);
        }
        self.work.pe_products += 2 * u64::from(cols);
        Ok(())
    }
}

//! DMA between device memory and the scratchpad: `load`, `store`, `load2d`, `store2d`.

#![allow(clippy::too_many_arguments)]

use opu_hw::isa::Reg;

use crate::func::machine::{line, require, word, Machine, Span, Trap};

impl Machine {
    /// The device-memory span `32 (mem + r[idx] stride)` of `bytes`.
    fn indexed_span(&self, mem: u32, idx: Reg, stride: u32, bytes: u32) -> Span {
        let lines = u128::from(mem) + u128::from(self.reg(idx)) * u128::from(stride);
        Span::new(line(lines), u128::from(bytes))
    }

    pub(super) fn load(&mut self, spm: u32, mem: u32, bytes: u32, idx: Reg, stride: u32) -> Result<(), Trap> {
        require(bytes > 0 && bytes.is_multiple_of(4))?;
        let s = self.spm_range(Span::new(word(spm), u128::from(bytes)))?;
        let m = self.mem_range(self.indexed_span(mem, idx, stride, bytes))?;
        self.spm[s].copy_from_slice(&self.mem[m.clone()]);
        self.note_read(&m);
        Ok(())
    }

    pub(super) fn store(&mut self, spm: u32, mem: u32, bytes: u32, idx: Reg, stride: u32) -> Result<(), Trap> {
        require(bytes > 0 && bytes.is_multiple_of(4))?;
        let s = self.spm_range(Span::new(word(spm), u128::from(bytes)))?;
        let m = self.mem_range(self.indexed_span(mem, idx, stride, bytes))?;
        self.before_write(&m);
        self.mem[m.clone()].copy_from_slice(&self.spm[s]);
        self.note_write(&m);
        Ok(())
    }

    /// `load2d` (`to_mem` false) and `store2d`: row `i` between line `mem + i mem_stride` and word
    /// `spm + i spm_stride`. Rows are copied in order (a later row wins where rows overlap).
    pub(super) fn copy2d(
        &mut self,
        to_mem: bool,
        spm: u32,
        mem: u32,
        row_bytes: u32,
        rows: u32,
        mem_stride: u32,
        spm_stride: u32,
    ) -> Result<(), Trap> {
        require(rows > 0 && row_bytes > 0 && row_bytes.is_multiple_of(4))?;
        let n = u128::from(row_bytes);
        let mut ranges = Vec::with_capacity(rows as usize);
        for i in 0..u128::from(rows) {
            let s = self.spm_range(Span::new(word(spm) + 4 * i * u128::from(spm_stride), n))?;
            let m = self.mem_range(Span::new(line(u128::from(mem) + i * u128::from(mem_stride)), n))?;
            ranges.push((s, m));
        }
        for (s, m) in ranges {
            if to_mem {
                self.before_write(&m);
                self.mem[m.clone()].copy_from_slice(&self.spm[s]);
                self.note_write(&m);
            } else {
                self.spm[s].copy_from_slice(&self.mem[m.clone()]);
                self.note_read(&m);
            }
        }
        Ok(())
    }
}

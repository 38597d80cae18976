//! Instruction semantics (docs/isa.md), one module per class. Control and scalar instructions are here.
//!
//! Every instruction first checks its operand rules (BAD_OPERAND), then every address range it will touch,
//! in the order of its fields, and only then has effects: a trapping instruction changes nothing (precise
//! traps), and its work is not counted.

mod attention;
mod cnn;
mod dma;
mod matrix;
mod vector;

use opu_hw::isa::Instr;

use super::machine::{word, Flow, Machine, Span, Trap};

impl Machine {
    pub(crate) fn execute(&mut self, instr: &Instr) -> Result<Flow, Trap> {
        match *instr {
            Instr::End {} => return Ok(Flow::End),
            // Effects are already in program order; barrier matters only to timing.
            Instr::Barrier {} => {}
            Instr::Seti { rd, imm } => self.set_reg(rd, imm),
            Instr::Addi { rd, rs, imm } => self.set_reg(rd, self.reg(rs).wrapping_add(imm)),
            Instr::Muli { rd, rs, imm } => self.set_reg(rd, self.reg(rs).wrapping_mul(imm)),
            Instr::Csrw { csr, rs, imm } => self.csr[csr as usize] = self.reg(rs).wrapping_add(imm),
            Instr::Skip { pred, count } => {
                if self.p[usize::from(pred.0)] {
                    return Ok(Flow::Skip(count));
                }
            }
            Instr::Ldr { rd, spm } => {
                let r = self.spm_range(Span::new(word(spm), 4))?;
                let v = u32::from_le_bytes(self.spm[r].try_into().expect("4 bytes"));
                self.set_reg(rd, v);
            }
            Instr::Load { spm, mem, bytes, idx, stride } => self.load(spm, mem, bytes, idx, stride)?,
            Instr::Store { spm, mem, bytes, idx, stride } => self.store(spm, mem, bytes, idx, stride)?,
            Instr::Load2d { spm, mem, row_bytes, rows, mem_stride, spm_stride } => {
                self.copy2d(false, spm, mem, row_bytes, rows, mem_stride, spm_stride)?
            }
            Instr::Store2d { spm, mem, row_bytes, rows, mem_stride, spm_stride } => {
                self.copy2d(true, spm, mem, row_bytes, rows, mem_stride, spm_stride)?
            }
            Instr::Matmul { fmt, out, acc, red, ntok, dst, src, rows, cols, w } => {
                self.matmul(fmt, out, acc, red, ntok, dst, src, rows, cols, w)?
            }
            Instr::Route { pd, mark, pos, src, w, cols } => self.route(pd, mark, pos, src, w, cols)?,
            Instr::Vop { op, dd, da, db, red, rows, dst, a, b, n } => {
                self.vop(op, dd, da, db, red, rows, dst, a, b, n)?
            }
            Instr::Rmsnorm { dd, ds, rows, dst, src, g, n, eps } => {
                self.rmsnorm(dd, ds, rows, dst, src, g, n, eps.get())?
            }
            Instr::Rope { style, heads, head_dim, rows, dst, src, table } => {
                self.rope(style, heads, head_dim, rows, dst, src, table)?
            }
            Instr::Argmax { dt, rd, dst, src, n } => self.argmax(dt, rd, dst, src, n)?,
            Instr::Attn { group, kvh, len, dst, q, k, v } => self.attn(group, kvh, len, dst, q, k, v)?,
            Instr::Kvappend { pos, ksrc, vsrc, k, v } => self.kvappend(pos, ksrc, vsrc, k, v)?,
            Instr::Conv { relu, shift, dst, src, w } => self.conv(relu, shift, dst, src, w)?,
            Instr::Maxpool { k, stride, h, w, c, dst, src } => self.maxpool(k, stride, h, w, c, dst, src)?,
        }
        Ok(Flow::Next)
    }
}

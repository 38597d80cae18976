//! The vector unit: `vop`, `rmsnorm`, `rope`, `argmax`. Results are computed from the sources into a
//! buffer and then stored, so a destination that coincides exactly with a source is well defined.

#![allow(clippy::too_many_arguments)]

use opu_hw::isa::{Csr, RedMode, Reg, RopeStyle, NUM_RED};
use opu_hw::numerics::vector::{accumulate_square, argmax, rms_inv, rmsnorm_elem, rope_pair, DType, VecOp};
use opu_hw::numerics::WideAcc;

use crate::func::machine::{check_elementwise, pad4, require, word, Machine, Span, Trap};

impl Machine {
    pub(super) fn vop(
        &mut self,
        op: VecOp,
        dd: DType,
        da: DType,
        db: DType,
        red: RedMode,
        rows: u32,
        dst: u32,
        a: u32,
        b: u32,
        n: u32,
    ) -> Result<(), Trap> {
        require(rows > 0 && n > 0)?;
        require(red == RedMode::None || rows as usize <= NUM_RED)?;
        let (nr, nn) = (u128::from(rows), u128::from(n));
        let dst_s = Span::vectors(word(dst), nr, nn, dd.bytes() as u128);
        let a_s = Span::vectors(word(a), nr, nn, da.bytes() as u128);
        let b_s = op.uses_b().then(|| Span::vectors(word(b), nr, nn, db.bytes() as u128));
        let sources: Vec<Span> = std::iter::once(a_s).chain(b_s).collect();
        check_elementwise(&dst_s, &sources)?;
        let dst_r = self.spm_range(dst_s)?;
        let a_r = self.spm_range(a_s)?;
        let b_r = b_s.map(|s| self.spm_range(s)).transpose()?;

        let (rows, n) = (rows as usize, n as usize);
        let pitch = |t: DType| pad4((n * t.bytes()) as u128) as usize;
        let imm = f32::from_bits(self.csr(Csr::VScale));
        let mut out = vec![0u8; dst_r.len()];
        for j in 0..rows {
            let ar = &self.spm[a_r.start + j * pitch(da)..];
            let br = b_r.as_ref().map(|r| &self.spm[r.start + j * pitch(db)..]);
            let orow = &mut out[j * pitch(dd)..];
            if red == RedMode::Set {
                self.red[j] = WideAcc::ZERO;
            }
            for i in 0..n {
                let y = op.apply(da.read(ar, i), br.map_or(0.0, |br| db.read(br, i)), imm);
                dd.write(orow, i, y);
                if red != RedMode::None {
                    // The square of the value as stored.
                    accumulate_square(&mut self.red[j], dd.read(orow, i));
                }
            }
        }
        self.store_rows(dst_r.start, &out, rows, pitch(dd), n * dd.bytes());
        self.work.vector_elems += (rows * n) as u64;
        Ok(())
    }

    pub(super) fn rmsnorm(
        &mut self,
        dd: DType,
        ds: DType,
        rows: u32,
        dst: u32,
        src: u32,
        g: u32,
        n: u32,
        eps: f32,
    ) -> Result<(), Trap> {
        require(rows > 0 && n > 0 && rows as usize <= NUM_RED)?;
        let (nr, nn) = (u128::from(rows), u128::from(n));
        let dst_s = Span::vectors(word(dst), nr, nn, dd.bytes() as u128);
        let src_s = Span::vectors(word(src), nr, nn, ds.bytes() as u128);
        let g_s = Span::new(word(g), 4 * nn);
        // The gains are read again for every row: they must not overlap the destination at all.
        check_elementwise(&dst_s, &[src_s])?;
        require(!g_s.overlaps(&dst_s))?;
        let dst_r = self.spm_range(dst_s)?;
        let src_r = self.spm_range(src_s)?;
        let g_r = self.spm_range(g_s)?;

        let (rows, n_us) = (rows as usize, n as usize);
        let pitch = |t: DType| pad4((n_us * t.bytes()) as u128) as usize;
        let gains = &self.spm[g_r];
        let mut out = vec![0u8; dst_r.len()];
        for j in 0..rows {
            let inv = rms_inv(&self.red[j], n, eps);
            let srow = &self.spm[src_r.start + j * pitch(ds)..];
            let orow = &mut out[j * pitch(dd)..];
            for i in 0..n_us {
                dd.write(orow, i, rmsnorm_elem(ds.read(srow, i), inv, DType::F32.read(gains, i)));
            }
        }
        self.store_rows(dst_r.start, &out, rows, pitch(dd), n_us * dd.bytes());
        self.work.vector_elems += (rows * n_us) as u64;
        Ok(())
    }

    pub(super) fn rope(
        &mut self,
        style: RopeStyle,
        heads: u32,
        head_dim: u32,
        rows: u32,
        dst: u32,
        src: u32,
        table: u32,
    ) -> Result<(), Trap> {
        require(heads > 0 && head_dim > 0 && rows > 0 && head_dim.is_multiple_of(16))?;
        let (nr, hd) = (u128::from(rows), u128::from(head_dim));
        let elems = u128::from(heads) * hd;
        let dst_s = Span::vectors(word(dst), nr, elems, 2);
        let src_s = Span::vectors(word(src), nr, elems, 2);
        // Row j's table: head_dim / 2 FP32 pairs (cos, sin) at j x head_dim / 2 x 8 bytes.
        let table_s = Span::new(word(table), nr * hd / 2 * 8);
        // A table row is read again for every head: it must not overlap the destination at all.
        check_elementwise(&dst_s, &[src_s])?;
        require(!table_s.overlaps(&dst_s))?;
        let dst_r = self.spm_range(dst_s)?;
        let src_r = self.spm_range(src_s)?;
        let table_r = self.spm_range(table_s)?;

        let (rows, heads, hd, half) = (rows as usize, heads as usize, head_dim as usize, head_dim as usize / 2);
        let pitch = pad4(elems * 2) as usize;
        let mut out = vec![0u8; dst_r.len()];
        for j in 0..rows {
            let srow = &self.spm[src_r.start + j * pitch..];
            let trow = &self.spm[table_r.start + j * half * 8..];
            let orow = &mut out[j * pitch..];
            for h in 0..heads {
                for i in 0..half {
                    let (e0, e1) = match style {
                        RopeStyle::Normal => (h * hd + 2 * i, h * hd + 2 * i + 1),
                        RopeStyle::Neox => (h * hd + i, h * hd + i + half),
                    };
                    let (c, s) = (DType::F32.read(trow, 2 * i), DType::F32.read(trow, 2 * i + 1));
                    let (y0, y1) = rope_pair(DType::F16.read(srow, e0), DType::F16.read(srow, e1), c, s);
                    DType::F16.write(orow, e0, y0);
                    DType::F16.write(orow, e1, y1);
                }
            }
        }
        self.store_rows(dst_r.start, &out, rows, pitch, heads * hd * 2);
        self.work.vector_elems += (rows * heads * hd) as u64;
        Ok(())
    }

    pub(super) fn argmax(&mut self, dt: DType, rd: Reg, dst: u32, src: u32, n: u32) -> Result<(), Trap> {
        require(n > 0)?;
        let dst_r = self.spm_range(Span::new(word(dst), 4))?;
        let src_r = self.spm_range(Span::new(word(src), u128::from(n) * dt.bytes() as u128))?;
        let values = &self.spm[src_r];
        let i = argmax((0..n as usize).map(|i| dt.read(values, i)));
        self.spm[dst_r].copy_from_slice(&i.to_le_bytes());
        self.set_reg(rd, i);
        self.work.vector_elems += u64::from(n);
        Ok(())
    }

    /// Stores `rows` rows of `row_len` bytes from a buffer laid out at `pitch` (the padding between rows is
    /// not written).
    fn store_rows(&mut self, start: usize, buf: &[u8], rows: usize, pitch: usize, row_len: usize) {
        for j in 0..rows {
            let at = j * pitch;
            self.spm[start + at..start + at + row_len].copy_from_slice(&buf[at..at + row_len]);
        }
    }
}

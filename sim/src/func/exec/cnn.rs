//! Fixed-point CNN layers: `conv` (shape in the CONV_* CSRs) and `maxpool`, through `fixed::conv2d` and
//! `fixed::maxpool`.

#![allow(clippy::too_many_arguments)]

use opu_hw::isa::Csr;
use opu_hw::numerics::fixed::{conv2d, maxpool, ConvShape, CONV_DIM_LIMIT, MAX_PRODUCTS};

use crate::func::cost::CnnRun;
use crate::func::machine::{line, pad4, require, word, Machine, Span, Trap};

fn i16s(b: &[u8]) -> Vec<i16> {
    b.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect()
}

fn put_i16s(b: &mut [u8], v: &[i16]) {
    for (c, x) in b.chunks_exact_mut(2).zip(v) {
        c.copy_from_slice(&x.to_le_bytes());
    }
}

impl Machine {
    pub(super) fn conv(&mut self, relu: bool, shift: u32, dst: u32, src: u32, w: u32) -> Result<(), Trap> {
        let c = |csr| u128::from(self.csr(csr));
        let (h, wd, cin, cout) = (c(Csr::ConvH), c(Csr::ConvW), c(Csr::ConvCin), c(Csr::ConvCout));
        let (k, stride, pad) = (c(Csr::ConvK), c(Csr::ConvStride), c(Csr::ConvPad));
        require([h, wd, cin, cout, k, stride].iter().all(|&v| v > 0))?;
        require([h, wd, cin, cout, k, stride, pad].iter().all(|&v| v < u128::from(CONV_DIM_LIMIT)))?;
        require(k <= h + 2 * pad && k <= wd + 2 * pad && k * k * cin <= MAX_PRODUCTS as u128)?;
        // one output channel's kernel fits a PE lane's share of the weight buffer
        require(k * k * cin * 2 <= u128::from(self.max_conv_kernel_bytes))?;
        // fixed::requantize takes shifts below 48 (the 48-bit accumulator).
        require(shift < 48)?;
        let (oh, ow) = ((h + 2 * pad - k) / stride + 1, (wd + 2 * pad - k) / stride + 1);
        let weights = cout * k * k * cin;
        let (dst_s, src_s) = (Span::new(word(dst), oh * ow * cout * 2), Span::new(word(src), h * wd * cin * 2));
        // the datapath writes outputs while it still reads inputs
        require(!dst_s.overlaps(&src_s))?;
        let dst_r = self.spm_range(dst_s)?;
        let src_r = self.spm_range(src_s)?;
        // i16 weights [cout][k][k][cin], then the i32 biases at the next multiple of 4 bytes.
        let w_bytes = pad4(weights * 2);
        let w_r = self.mem_range(Span::new(line(u128::from(w)), w_bytes + cout * 4))?;

        let shape = ConvShape {
            height: h as usize,
            width: wd as usize,
            in_channels: cin as usize,
            out_channels: cout as usize,
            kernel: k as usize,
            stride: stride as usize,
            pad: pad as usize,
        };
        let wb = &self.mem[w_r.clone()];
        let kernel = i16s(&wb[..weights as usize * 2]);
        let bias: Vec<i32> = wb[w_bytes as usize..]
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let y = conv2d(&i16s(&self.spm[src_r]), &kernel, &bias, &shape, shift, relu);
        put_i16s(&mut self.spm[dst_r], &y);
        self.note_read(&w_r);
        let macs = (oh * ow * weights) as u64;
        self.work.cnn = Some(CnnRun {
            maxpool: false,
            h: h as u64,
            w: wd as u64,
            cin: cin as u64,
            cout: cout as u64,
            k: k as u64,
            stride: stride as u64,
            pad: pad as u64,
            src: u64::from(src),
            dst: u64::from(dst),
        });
        self.work.macs += macs;
        self.work.pe_products += macs;
        Ok(())
    }

    pub(super) fn maxpool(
        &mut self,
        k: u32,
        stride: u32,
        h: u32,
        w: u32,
        c: u32,
        dst: u32,
        src: u32,
    ) -> Result<(), Trap> {
        require(k > 0 && stride > 0 && h > 0 && w > 0 && c > 0 && k <= h && k <= w)?;
        let (oh, ow) = (u128::from((h - k) / stride + 1), u128::from((w - k) / stride + 1));
        let dst_s = Span::new(word(dst), oh * ow * u128::from(c) * 2);
        let src_s = Span::new(word(src), u128::from(h) * u128::from(w) * u128::from(c) * 2);
        require(!dst_s.overlaps(&src_s))?;
        let dst_r = self.spm_range(dst_s)?;
        let src_r = self.spm_range(src_s)?;
        self.work.cnn = Some(CnnRun {
            maxpool: true,
            h: u64::from(h),
            w: u64::from(w),
            cin: u64::from(c),
            cout: u64::from(c),
            k: u64::from(k),
            stride: u64::from(stride),
            pad: 0,
            src: u64::from(src),
            dst: u64::from(dst),
        });
        let (h, w, c, k, stride) = (h as usize, w as usize, c as usize, k as usize, stride as usize);
        let y = maxpool(&i16s(&self.spm[src_r]), h, w, c, k, stride);
        put_i16s(&mut self.spm[dst_r], &y);
        self.work.vector_elems += (y.len() * k * k) as u64;
        Ok(())
    }
}

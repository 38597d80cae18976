//! `conv` and `maxpool` against fixed::conv2d and fixed::maxpool called directly.

mod common;

use common::*;
use opu_hw::numerics::fixed::{conv2d, maxpool, ConvShape};
use opu_hw::regs::ErrorCode;
use rand::Rng;

fn i16_bytes(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_i16s(b: &[u8]) -> Vec<i16> {
    b.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect()
}

/// Weights `[cout][k][k][cin]` then, at the next multiple of 4 bytes, the i32 biases.
fn conv_params(w: &[i16], b: &[i32]) -> Vec<u8> {
    let mut bytes = i16_bytes(w);
    bytes.resize(bytes.len().div_ceil(4) * 4, 0);
    bytes.extend(b.iter().flat_map(|x| x.to_le_bytes()));
    bytes
}

fn conv_program(s: &ConvShape, shift: u32, relu: bool) -> String {
    format!(
        "csrw csr=conv_h rs=r0 imm={}
         csrw csr=conv_w rs=r0 imm={}
         csrw csr=conv_cin rs=r0 imm={}
         csrw csr=conv_cout rs=r0 imm={}
         csrw csr=conv_k rs=r0 imm={}
         csrw csr=conv_stride rs=r0 imm={}
         csrw csr=conv_pad rs=r0 imm={}
         conv relu={} shift={shift} dst=0x1000 src=0 w=0x800
         end",
        s.height,
        s.width,
        s.in_channels,
        s.out_channels,
        s.kernel,
        s.stride,
        s.pad,
        u8::from(relu)
    )
}

#[test]
fn conv_equals_fixed_conv2d_with_padding_stride_and_relu() {
    let mut r = rng(40);
    let shapes = [
        ConvShape { height: 7, width: 6, in_channels: 3, out_channels: 5, kernel: 3, stride: 2, pad: 1 },
        ConvShape { height: 5, width: 5, in_channels: 1, out_channels: 3, kernel: 5, stride: 1, pad: 0 },
        // A fully-connected layer: 1 x 1 x 48 -> 10.
        ConvShape { height: 1, width: 1, in_channels: 48, out_channels: 10, kernel: 1, stride: 1, pad: 0 },
    ];
    for s in shapes {
        for relu in [false, true] {
            let mut sim = sim();
            let x: Vec<i16> = (0..s.height * s.width * s.in_channels).map(|_| r.gen_range(-8000..8000)).collect();
            let w: Vec<i16> =
                (0..s.out_channels * s.kernel * s.kernel * s.in_channels).map(|_| r.gen_range(-16000..16000)).collect();
            let b: Vec<i32> = (0..s.out_channels).map(|_| r.gen_range(-1 << 24..1 << 24)).collect();
            spm_put(&mut sim, 0, &i16_bytes(&x));
            mem_put(&mut sim, 0x800, &conv_params(&w, &b));
            run_ok(&mut sim, &conv_program(&s, 14, relu), &[]);
            let want = conv2d(&x, &w, &b, &s, 14, relu);
            assert_eq!(to_i16s(&spm_get(&sim, 0x1000, 2 * want.len())), want, "{s:?} relu {relu}");
            let stats = sim.stats();
            let macs = s.out_height() * s.out_width() * s.out_channels * s.kernel * s.kernel * s.in_channels;
            assert_eq!(stats.macs, macs as u64);
            assert_eq!(stats.bytes_read, (w.len() * 2).div_ceil(4) as u64 * 4 + 4 * b.len() as u64);
            assert_eq!(stats.by_class["cnn"], 1);
        }
    }
}

#[test]
fn conv_operand_rules() {
    let mut sim = sim();
    let s = ConvShape { height: 3, width: 3, in_channels: 1, out_channels: 1, kernel: 5, stride: 1, pad: 0 };
    // Kernel larger than the padded input.
    let res = run(&mut sim, &conv_program(&s, 4, false), &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 7, 0);
    // A zero stride.
    let s = ConvShape { stride: 0, kernel: 3, ..s };
    let res = run(&mut sim, &conv_program(&s, 4, false), &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 7, 0);
    // A shift beyond the 48-bit accumulator.
    let s = ConvShape { stride: 1, ..s };
    let res = run(&mut sim, &conv_program(&s, 48, false), &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 7, 0);
    run_ok(&mut sim, &conv_program(&s, 47, false), &[]);
}

#[test]
fn maxpool_equals_fixed_maxpool() {
    let mut r = rng(41);
    for (h, w, c, k, stride) in [(6usize, 6usize, 3usize, 2usize, 2usize), (7, 5, 2, 3, 2), (4, 4, 1, 4, 1)] {
        let mut sim = sim();
        let x: Vec<i16> = (0..h * w * c).map(|_| r.gen()).collect();
        spm_put(&mut sim, 0x40, &i16_bytes(&x));
        run_ok(&mut sim, &format!("maxpool k={k} stride={stride} h={h} w={w} c={c} dst=0x800 src=0x40\nend"), &[]);
        let want = maxpool(&x, h, w, c, k, stride);
        assert_eq!(to_i16s(&spm_get(&sim, 0x800, 2 * want.len())), want);
    }
    let mut sim = sim();
    let res = run(&mut sim, "maxpool k=5 stride=1 h=4 w=8 c=1 dst=0x800 src=0x40\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 0, 0);
}

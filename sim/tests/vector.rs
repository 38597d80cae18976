//! The vector unit (`vop`, `rmsnorm`, `rope`, `argmax`) against opu_hw::numerics::vector called directly.

mod common;

use common::*;
use opu_hw::isa::Csr;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::vector::{
    accumulate_square, argmax, rms_inv, rmsnorm_elem, rope_pair, rope_table_row, DType, VecOp,
};
use opu_hw::numerics::WideAcc;
use opu_hw::regs::ErrorCode;

/// `rows` rows of `n` values of type `t`, laid out at pad4 pitch, as bytes; and the values as FP32.
fn rows_of(r: &mut rand::rngs::StdRng, t: DType, rows: usize, n: usize) -> (Vec<u8>, Vec<Vec<f32>>) {
    let pitch = (n * t.bytes()).div_ceil(4) * 4;
    let mut bytes = vec![0u8; (rows - 1) * pitch + n * t.bytes()];
    let mut vals = Vec::new();
    for j in 0..rows {
        let row = &mut bytes[j * pitch..];
        let mut v = Vec::new();
        for i in 0..n {
            t.write(row, i, f32s(r, 1, -6.0, 6.0)[0]);
            v.push(t.read(row, i));
        }
        vals.push(v);
    }
    (bytes, vals)
}

fn name(t: DType) -> &'static str {
    t.name()
}

#[test]
fn vop_every_op_and_type_combination() {
    let mut r = rng(10);
    let (rows, n) = (2usize, 37usize); // odd n: FP16 rows are padded
    let scale = -0.7f32;
    for op in VecOp::ALL {
        for dd in [DType::F16, DType::F32] {
            for da in [DType::F16, DType::F32] {
                for db in [DType::F16, DType::F32] {
                    let mut sim = sim();
                    let (a_bytes, a) = rows_of(&mut r, da, rows, n);
                    let (b_bytes, b) = rows_of(&mut r, db, rows, n);
                    spm_put(&mut sim, 0x000, &a_bytes);
                    spm_put(&mut sim, 0x100, &b_bytes);
                    let text = format!(
                        "csrw csr=vscale rs=r0 imm={:#x}
                         vop op={} dd={} da={} db={} red=set rows={rows} dst=0x200 a=0 b=0x100 n={n}
                         end",
                        scale.to_bits(),
                        op.name(),
                        name(dd),
                        name(da),
                        name(db)
                    );
                    run_ok(&mut sim, &text, &[]);
                    let pitch = (n * dd.bytes()).div_ceil(4) * 4;
                    let out = spm_get(&sim, 0x200, (rows - 1) * pitch + n * dd.bytes());
                    for j in 0..rows {
                        let mut red = WideAcc::ZERO;
                        for i in 0..n {
                            let mut want = vec![0u8; 4];
                            dd.write(&mut want, 0, op.apply(a[j][i], b[j][i], scale));
                            let want = dd.read(&want, 0);
                            let got = dd.read(&out[j * pitch..], i);
                            assert_eq!(got.to_bits(), want.to_bits(), "{op:?} {dd:?} {da:?} {db:?} [{j}][{i}]");
                            accumulate_square(&mut red, want);
                        }
                        assert_eq!(sim.red(j), red, "{op:?} RED[{j}]");
                    }
                    assert_eq!(sim.stats().by_class["vector"], 1);
                }
            }
        }
    }
}

#[test]
fn vop_in_place_is_allowed_and_partial_overlap_is_a_bad_operand() {
    let mut r = rng(11);
    let mut sim = sim();
    let x = small_f16s(&mut r, 64, 3.0);
    spm_put(&mut sim, 0, &f16_bytes(&x));
    run_ok(&mut sim, "vop op=add dd=f16 da=f16 db=f16 rows=1 dst=0 a=0 b=0 n=64\nend", &[]);
    let got = to_f16s(&spm_get(&sim, 0, 128));
    for (g, v) in got.iter().zip(&x) {
        let f = opu_hw::numerics::fp16::f16_to_f32(*v);
        assert_eq!(*g, f32_to_f16(VecOp::Add.apply(f, f, 0.0)));
    }
    // dst one word after a: a partial overlap.
    let res = run(&mut sim, "seti rd=r1 imm=5\nvop op=copy dd=f16 da=f16 db=f16 rows=1 dst=1 a=0 b=0 n=64\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 1, 0);
    // An FP32 destination over its own FP16 source (same start, other length) is not "exactly".
    let res = run(&mut sim, "vop op=copy dd=f32 da=f16 db=f16 rows=1 dst=0 a=0 b=0 n=64\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 0, 0);
    // b is not read by copy: overlapping it is fine.
    run_ok(&mut sim, "vop op=copy dd=f16 da=f16 db=f16 rows=1 dst=0x100 a=0 b=0x100 n=64\nend", &[]);
}

#[test]
fn rmsnorm_uses_the_reduction_file() {
    let mut r = rng(12);
    for (dd, ds) in
        [(DType::F16, DType::F16), (DType::F32, DType::F16), (DType::F16, DType::F32), (DType::F32, DType::F32)]
    {
        let mut sim = sim();
        let (rows, n) = (3usize, 50usize);
        let (x_bytes, x) = rows_of(&mut r, ds, rows, n);
        let g = f32s(&mut r, n, 0.5, 1.5);
        spm_put(&mut sim, 0, &x_bytes);
        spm_put(&mut sim, 0x200, &f32_bytes(&g));
        let eps = 1e-5f32;
        // The sum of squares comes from a copy with red=set (as a residual add would provide it).
        let text = format!(
            "vop op=copy dd={d} da={d} db={d} red=set rows={rows} dst=0x100 a=0 b=0 n={n}
             rmsnorm dd={} ds={d} rows={rows} dst=0x300 src=0x100 g=0x200 n={n} eps={eps:?}
             end",
            name(dd),
            d = name(ds)
        );
        run_ok(&mut sim, &text, &[]);
        let pitch = (n * dd.bytes()).div_ceil(4) * 4;
        let out = spm_get(&sim, 0x300, (rows - 1) * pitch + n * dd.bytes());
        for j in 0..rows {
            let mut red = WideAcc::ZERO;
            x[j].iter().for_each(|&v| accumulate_square(&mut red, v));
            assert_eq!(sim.red(j), red);
            let inv = rms_inv(&red, n as u32, eps);
            for i in 0..n {
                let mut want = [0u8; 4];
                dd.write(&mut want, 0, rmsnorm_elem(x[j][i], inv, g[i]));
                assert_eq!(
                    dd.read(&out[j * pitch..], i).to_bits(),
                    dd.read(&want, 0).to_bits(),
                    "{dd:?} {ds:?} [{j}][{i}]"
                );
            }
        }
    }
}

#[test]
fn rope_in_both_styles_with_one_table_row_per_token() {
    let mut r = rng(13);
    for neox in [false, true] {
        let mut sim = sim();
        let (rows, heads, hd) = (2usize, 3usize, 16usize);
        let x: Vec<u16> = small_f16s(&mut r, rows * heads * hd, 2.0);
        spm_put(&mut sim, 0, &f16_bytes(&x));
        // Table rows of positions 5 and 6.
        let table: Vec<(f32, f32)> = [5, 6].iter().flat_map(|&p| rope_table_row(p, hd as u32, 10000.0)).collect();
        spm_put(&mut sim, 0x100, &f32_bytes(&table.iter().flat_map(|&(c, s)| [c, s]).collect::<Vec<_>>()));
        let style = if neox { "neox" } else { "normal" };
        run_ok(
            &mut sim,
            &format!("rope style={style} heads={heads} head_dim={hd} rows={rows} dst=0x200 src=0 table=0x100\nend"),
            &[],
        );
        let got = to_f16s(&spm_get(&sim, 0x200, 2 * x.len()));
        let f = |b: u16| opu_hw::numerics::fp16::f16_to_f32(b);
        for j in 0..rows {
            for h in 0..heads {
                for i in 0..hd / 2 {
                    let base = j * heads * hd + h * hd;
                    let (e0, e1) = if neox { (base + i, base + i + hd / 2) } else { (base + 2 * i, base + 2 * i + 1) };
                    let (c, s) = table[j * hd / 2 + i];
                    let (y0, y1) = rope_pair(f(x[e0]), f(x[e1]), c, s);
                    assert_eq!(
                        (got[e0], got[e1]),
                        (f32_to_f16(y0), f32_to_f16(y1)),
                        "neox={neox} row {j} head {h} pair {i}"
                    );
                }
            }
        }
    }
    // head_dim must be a multiple of 16 (odd ones have no pairs; the hardware reads a head's halves as
    // whole words).
    for hd in [7, 8, 24] {
        let mut sim = sim();
        let res = run(&mut sim, &format!("rope style=normal heads=1 head_dim={hd} rows=1 dst=0x200 src=0 table=0x100\nend"), &[]);
        expect_trap(&mut sim, res, ErrorCode::BadOperand, 0, 0);
    }
}

#[test]
fn argmax_writes_the_scratchpad_and_a_register() {
    let mut sim = sim();
    let v32 = [1.0f32, 7.5, f32::NAN, 7.5, -3.0, 7.25];
    spm_put(&mut sim, 0, &f32_bytes(&v32));
    let v16: Vec<u16> = [0.5f32, -1.0, 2.0, 2.0, 1.5].iter().map(|&v| f32_to_f16(v)).collect();
    spm_put(&mut sim, 0x10, &f16_bytes(&v16));
    run_ok(&mut sim, "argmax dt=f32 rd=r3 dst=0x40 src=0 n=6\nargmax dt=f16 rd=r4 dst=0x41 src=0x10 n=5\nend", &[]);
    assert_eq!(sim.reg(3), argmax(v32));
    assert_eq!(sim.reg(3), 1, "ties go to the lowest index");
    assert_eq!(spm_get(&sim, 0x40, 4), 1u32.to_le_bytes());
    assert_eq!(sim.reg(4), 2);
    assert_eq!(spm_get(&sim, 0x41, 4), 2u32.to_le_bytes());
    // rd = r0: the register write is dropped, the scratchpad still gets the index.
    run_ok(&mut sim, "argmax dt=f32 rd=r0 dst=0x40 src=0 n=6\nend", &[]);
    assert_eq!(sim.reg(0), 0);
    assert_eq!(sim.csr(Csr::KvPresent), 0xFFFF_FFFF);
}

//! `matmul` against the numerics functions called directly (dot::matvec_f16, dot::accumulate_row,
//! WideAcc, vector::accumulate_square), in every format and both output types, with acc, red and ntok > 1.

mod common;

use common::*;
use opu_hw::device::Device;
use opu_hw::numerics::align::align_vector;
use opu_hw::numerics::dot::{accumulate_row, matvec_f16};
use opu_hw::numerics::fp16::f16_to_f32;
use opu_hw::numerics::vector::accumulate_square;
use opu_hw::numerics::{WeightFormat, WideAcc};
use opu_hw::regs;

const W: u32 = 0x1000; // weights at line 0x1000 (128 KiB)

#[test]
fn one_token_in_every_format_equals_matvec_f16() {
    let mut r = rng(1);
    for fmt in WeightFormat::ALL {
        let (rows, cols) = (40usize, 96usize);
        let mut sim = sim();
        let x = activations(&mut r, cols);
        let m = matrix(&mut r, fmt, rows, cols);
        let m_bytes = mem_put_matrix(&mut sim, W, &m, fmt.row_bytes(cols).unwrap());
        spm_put(&mut sim, 0, &f16_bytes(&x));
        let c = run_ok(
            &mut sim,
            &format!("matmul fmt={} out=f16 ntok=1 dst=0x100 src=0 rows={rows} cols={cols} w={W}\nend", fmt.name()),
            &[],
        );
        let got = to_f16s(&spm_get(&sim, 0x100, 2 * rows));
        assert_eq!(got, matvec_f16(fmt, &x, &m, rows, 16), "{fmt:?}");
        let s = sim.stats();
        assert_eq!(s.macs, (rows * cols) as u64);
        // 3 groups of 16 rows (the third partial, read whole)
        let rb = fmt.row_bytes(cols).unwrap() as u64;
        assert_eq!(m_bytes, 3 * 8 * (2 * rb).div_ceil(16) * 16);
        assert_eq!(s.bytes_read, m_bytes, "{fmt:?}: the matrix is read once");
        assert_eq!((s.instret, c.instructions), (2, 2));
        assert_eq!(s.by_class["matrix"], 1);
    }
}

/// The reference of one output: the numerics functions in the order docs/isa.md gives.
fn reference(fmt: WeightFormat, x: &[u16], row: &[u8], init: Option<WideAcc>) -> WideAcc {
    let mut acc = init.unwrap_or(WideAcc::ZERO);
    accumulate_row(&mut acc, fmt, &align_vector(x, 16), x, row);
    acc
}

#[test]
fn several_tokens_fused_residual_and_reduction_in_both_output_types() {
    let mut r = rng(2);
    for fmt in WeightFormat::ALL {
        for out_f32 in [false, true] {
            let (ntok, rows, cols) = (3usize, 37usize, 64usize);
            let mut sim = sim();
            let m = matrix(&mut r, fmt, rows, cols);
            let m_bytes = mem_put_matrix(&mut sim, W, &m, fmt.row_bytes(cols).unwrap());
            // Input rows at a pitch of 2 * 64 bytes (already a multiple of 4); output rows of 37 elements:
            // FP16 rows are padded to 76 bytes, FP32 rows are 148.
            let xs: Vec<Vec<u16>> = (0..ntok).map(|_| activations(&mut r, cols)).collect();
            for (t, x) in xs.iter().enumerate() {
                spm_put(&mut sim, (t * 2 * cols / 4) as u32, &f16_bytes(x));
            }
            let ob = if out_f32 { 4 } else { 2 };
            let pitch = (rows * ob).div_ceil(4) * 4;
            let dst = 0x400u32;
            // The residual the outputs are added to.
            let old: Vec<Vec<f32>> = (0..ntok).map(|_| f32s(&mut r, rows, -8.0, 8.0)).collect();
            for (t, o) in old.iter().enumerate() {
                let bytes = if out_f32 {
                    f32_bytes(o)
                } else {
                    f16_bytes(&o.iter().map(|&v| opu_hw::numerics::fp16::f32_to_f16(v)).collect::<Vec<_>>())
                };
                spm_put(&mut sim, dst + (t * pitch / 4) as u32, &bytes);
            }
            let out = if out_f32 { "f32" } else { "f16" };
            run_ok(
                &mut sim,
                &format!("matmul fmt={} out={out} acc=1 red=set ntok={ntok} dst={dst} src=0 rows={rows} cols={cols} w={W}\nend", fmt.name()),
                &[],
            );
            let rb = fmt.row_bytes(cols).unwrap();
            for t in 0..ntok {
                let got = spm_get(&sim, dst + (t * pitch / 4) as u32, rows * ob);
                let mut red = WideAcc::ZERO;
                for (i, row) in m.chunks_exact(rb).enumerate() {
                    let mut init = WideAcc::ZERO;
                    let want = if out_f32 {
                        init.add_f32(old[t][i]);
                        let v = reference(fmt, &xs[t], row, Some(init)).to_f32();
                        assert_eq!(to_f32s(&got)[i].to_bits(), v.to_bits(), "{fmt:?} f32 token {t} row {i}");
                        v
                    } else {
                        init.add_f16(opu_hw::numerics::fp16::f32_to_f16(old[t][i]));
                        let v = reference(fmt, &xs[t], row, Some(init)).to_f16();
                        assert_eq!(to_f16s(&got)[i], v, "{fmt:?} f16 token {t} row {i}");
                        f16_to_f32(v)
                    };
                    accumulate_square(&mut red, want);
                }
                assert_eq!(sim.red(t), red, "{fmt:?} RED[{t}]");
            }
            let s = sim.stats();
            assert_eq!(s.macs, (ntok * rows * cols) as u64);
            assert_eq!(s.bytes_read, m_bytes, "weights streamed once for all tokens");
        }
    }
}

#[test]
fn red_add_continues_a_sum_and_red_none_leaves_it() {
    let mut r = rng(3);
    let mut sim = sim();
    let (rows, cols) = (32usize, 32usize);
    let m = matrix(&mut r, WeightFormat::W8, rows, cols);
    mem_put_matrix(&mut sim, W, &m, WeightFormat::W8.row_bytes(cols).unwrap());
    let x = activations(&mut r, cols);
    spm_put(&mut sim, 0, &f16_bytes(&x));
    run_ok(
        &mut sim,
        &format!(
            "matmul fmt=w8 out=f16 red=set ntok=1 dst=0x100 src=0 rows={rows} cols={cols} w={W}
             matmul fmt=w8 out=f16 red=add ntok=1 dst=0x200 src=0 rows={rows} cols={cols} w={W}
             matmul fmt=w8 out=f16 ntok=1 dst=0x300 src=0 rows={rows} cols={cols} w={W}
             end"
        ),
        &[],
    );
    let y = matvec_f16(WeightFormat::W8, &x, &m, rows, 16);
    let mut want = WideAcc::ZERO;
    for _ in 0..2 {
        for &v in &y {
            accumulate_square(&mut want, f16_to_f32(v));
        }
    }
    assert_eq!(sim.red(0), want);
    assert_eq!(sim.stats().by_mnemonic["matmul"], 3);
}

#[test]
fn rows_split_over_threads_give_identical_bits() {
    let mut r = rng(4);
    let (rows, cols) = (300usize, 256usize);
    let m = matrix(&mut r, WeightFormat::W4Min, rows, cols);
    let xs: Vec<u16> = (0..4).flat_map(|_| activations(&mut r, cols)).collect();
    let mut results = Vec::new();
    for threads in [1, 2, 3] {
        let mut sim = sim();
        sim.set_threads(threads);
        assert_eq!(sim.threads(), threads);
        mem_put_matrix(&mut sim, W, &m, WeightFormat::W4Min.row_bytes(cols).unwrap());
        spm_put(&mut sim, 0, &f16_bytes(&xs));
        run_ok(
            &mut sim,
            &format!("matmul fmt=w4m out=f32 ntok=4 dst=0x1000 src=0 rows={rows} cols={cols} w={W}\nend"),
            &[],
        );
        results.push(spm_get(&sim, 0x1000, 4 * 4 * rows));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
    // And they are the reference's.
    let rb = WeightFormat::W4Min.row_bytes(cols).unwrap();
    let got = to_f32s(&results[0]);
    for t in 0..4 {
        for (i, row) in m.chunks_exact(rb).enumerate() {
            let want = reference(WeightFormat::W4Min, &xs[t * cols..(t + 1) * cols], row, None).to_f32();
            assert_eq!(got[t * rows + i].to_bits(), want.to_bits());
        }
    }
}

#[test]
fn nonfinite_inputs_give_nan_and_the_array_waits_for_its_weights() {
    let mut sim = sim();
    let mut r = rng(5);
    let (rows, cols) = (64usize, 64usize);
    let m = matrix(&mut r, WeightFormat::W4, rows, cols);
    mem_put_matrix(&mut sim, W, &m, WeightFormat::W4.row_bytes(cols).unwrap());
    let mut x = activations(&mut r, cols);
    x[40] = 0x7C00; // +inf in the second block
    spm_put(&mut sim, 0, &f16_bytes(&x));
    let c = run_ok(
        &mut sim,
        &format!("matmul fmt=w4 out=f16 ntok=1 dst=0x100 src=0 rows={rows} cols={cols} w={W}\nend"),
        &[],
    );
    assert!(to_f16s(&spm_get(&sim, 0x100, 2 * rows)).iter().all(|&v| v == 0x7E00));
    // The estimate models the RTL (sim/tests/rtl_cost.rs holds it to the RTL's counts): 4 groups of 16 rows x
    // 2 W4 blocks, 8 steps of the array in all, wait for their weights (a memory latency, 9 beats each).
    assert_eq!(sim.mmio_read64(regs::CYCLES_LO).unwrap(), c.cycles);
    let stall = sim.mmio_read64(regs::STALL_CYCLES_LO).unwrap();
    assert_eq!(sim.stats().stall_cycles, stall);
    assert!(stall > 64 && stall < c.cycles - 8, "{stall} of {} cycles", c.cycles);
}

/// The simulator keeps row-major copies of the matrices it reads (`rowcache`): a write to the weights, by an
/// instruction or by the host, must be seen by the next `matmul`.
#[test]
fn weights_written_between_matmuls_are_read_anew() {
    let mut r = rng(6);
    let (fmt, rows, cols) = (WeightFormat::W4Min, 32usize, 64usize);
    let rb = fmt.row_bytes(cols).unwrap();
    let mut sim = sim();
    let x = activations(&mut r, cols);
    spm_put(&mut sim, 0, &f16_bytes(&x));
    let matmul = format!("matmul fmt=w4m out=f16 ntok=1 dst=0x100 src=0 rows={rows} cols={cols} w={W}");
    let m1 = matrix(&mut r, fmt, rows, cols);
    mem_put_matrix(&mut sim, W, &m1, rb);
    run_ok(&mut sim, &format!("{matmul}\nend"), &[]);
    assert_eq!(to_f16s(&spm_get(&sim, 0x100, 2 * rows)), matvec_f16(fmt, &x, &m1, rows, 16));
    // a `store` over the whole matrix (its new bytes staged in the scratchpad), then the same `matmul`
    let m2 = matrix(&mut r, fmt, rows, cols);
    let m2_bytes = opu_hw::weight_layout::WeightLayout::new(&opu_hw::OverlayConfig::sim(), rb).interleave(&m2);
    spm_put(&mut sim, 0x400, &m2_bytes);
    run_ok(&mut sim, &format!("store spm=0x400 mem={W} bytes={} idx=r0 stride=0\n{matmul}\nend", m2_bytes.len()), &[]);
    assert_eq!(to_f16s(&spm_get(&sim, 0x100, 2 * rows)), matvec_f16(fmt, &x, &m2, rows, 16));
    // the host writes other weights
    let m3 = matrix(&mut r, fmt, rows, cols);
    mem_put_matrix(&mut sim, W, &m3, rb);
    run_ok(&mut sim, &format!("{matmul}\nend"), &[]);
    assert_eq!(to_f16s(&spm_get(&sim, 0x100, 2 * rows)), matvec_f16(fmt, &x, &m3, rows, 16));
}

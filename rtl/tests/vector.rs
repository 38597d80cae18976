//! The vector lane, the reduction unit and the FP32 operators (`opu_rtl::{vector, reduce, fp32}`): their
//! rust-hdl models against `opu-hw` (and Rust's IEEE arithmetic) on a few hundred inputs per op, Verilator
//! lint of their Verilog, and yosys. The 10^6-input Verilator co-simulations are in opu-sim
//! (tests/rtl_vector.rs).

mod common;

use common::{have_tool, lint};
use opu_hw::numerics::acc::WideAcc;
use opu_hw::numerics::vector::{accumulate_square, OnlineSoftmax};
use opu_rtl::emit::{emit_verilog, top_name};
use opu_rtl::fp32::{edge_values, fp32_top, Fp32, FpOp, FP32_UNIT_LATENCY};
use opu_rtl::lane::acc_value;
use opu_rtl::reduce::{reduce_top, softmax_latency, softmax_step, Reduce, SOFTMAX_II, SUMSQ_LATENCY};
use opu_rtl::testing::Rng;
use opu_rtl::vector::{lane_result, random_operand, light_vector_operators, vector_latency, vector_operators, vector_top, LaneOp, Vector};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

const MAX_TIME: u64 = 1 << 40;

#[test]
fn vector_model_equals_opu_hw() {
    let mut rng = Rng(0x7ec_4d1);
    let e = edge_values();
    let mut inputs: Vec<(LaneOp, [u32; 4])> = Vec::new();
    for op in LaneOp::ALL {
        for k in 0..200 {
            let mut x = [0u32; 4].map(|_| random_operand(&mut rng));
            x[k % 4] = e[k % e.len()];
            inputs.push((op, x));
        }
    }
    let lag = vector_latency() - 1;
    let n = inputs.len();
    let got = Arc::new(Mutex::new(Vec::new()));
    let (tb_got, tb_in) = (got.clone(), inputs.clone());
    let mut sim = simple_sim!(Vector, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        let mut out = Vec::new();
        for k in 0..n + lag {
            let (op, v) = tb_in.get(k).copied().unwrap_or((LaneOp::Copy, [0; 4]));
            x.op.next = u64::from(op.code()).into();
            x.a.next = u64::from(v[0]).into();
            x.b.next = u64::from(v[1]).into();
            x.c.next = u64::from(v[2]).into();
            x.d.next = u64::from(v[3]).into();
            wait_clock_cycle!(ep, clock, x);
            if k >= lag {
                out.push((x.y0.val().to_u32(), x.y1.val().to_u32()));
            }
        }
        *tb_got.lock().unwrap() = out;
        ep.done(x)
    });
    sim.run(Box::new(vector_top()), MAX_TIME).unwrap();
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), n);
    for ((op, x), g) in inputs.iter().zip(&got) {
        let want = lane_result(op.code(), x[0], x[1], x[2], x[3]);
        assert_eq!(*g, want, "{} {x:08x?}", op.name());
    }
    let (muls, adds) = vector_operators();
    eprintln!("vector lane: {n} inputs equal to opu-hw; latency {}, {muls} FP32 multiplies, {adds} adds", lag + 1);
}

#[test]
fn fp32_model_equals_rust() {
    let e = edge_values();
    let pairs: Vec<(u32, u32)> = e.iter().flat_map(|&a| e.iter().map(move |&b| (a, b))).step_by(7).collect();
    let lag = FP32_UNIT_LATENCY - 1;
    let n = pairs.len();
    let got = Arc::new(Mutex::new(Vec::new()));
    let (tb_got, tb_in) = (got.clone(), pairs.clone());
    let mut sim = simple_sim!(Fp32, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        let mut out = Vec::new();
        for k in 0..n + lag {
            let (a, b) = tb_in.get(k).copied().unwrap_or((0, 0));
            x.a.next = u64::from(a).into();
            x.b.next = u64::from(b).into();
            wait_clock_cycle!(ep, clock, x);
            if k >= lag {
                out.push([x.y_add.val().to_u32(), x.y_sub.val().to_u32(), x.y_mul.val().to_u32()]);
            }
        }
        *tb_got.lock().unwrap() = out;
        ep.done(x)
    });
    sim.run(Box::new(fp32_top()), MAX_TIME).unwrap();
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), n);
    for (&(a, b), g) in pairs.iter().zip(&got) {
        let want = [FpOp::Add, FpOp::Sub, FpOp::Mul].map(|op| op.apply(f32::from_bits(a), f32::from_bits(b)).to_bits());
        assert_eq!(*g, want, "{a:08x} {b:08x}");
    }
}

/// The sum of squares (rows with `sq_clear`, gaps without `sq_valid`) and the online softmax (rows with
/// `sm_start`, scores as `sm_ready` allows) of the rust-hdl model against opu-hw.
#[test]
fn reduce_model_equals_opu_hw() {
    let mut rng = Rng(0x5ed_4d1);
    // (valid, clear, x) per cycle for the sum of squares; (start, score) per score for the softmax
    let sq: Vec<(bool, bool, u32)> = (0..600)
        .map(|k| (rng.below(5) != 0, k % 97 == 0, random_operand(&mut rng)))
        .map(|(v, c, x)| (v || c, c, x))
        .collect();
    // (row, start, score): four rows interleaved, each restarted now and then
    let mut started = [false; 4];
    let scores: Vec<(usize, bool, u32)> = (0..80)
        .map(|_| {
            let row = rng.below(4) as usize;
            let start = !started[row] || rng.below(12) == 0;
            started[row] = true;
            let s = if rng.below(6) == 0 { random_operand(&mut rng) } else { ((rng.f32_unit() - 0.5) * 30.0).to_bits() };
            (row, start, s)
        })
        .collect();
    let cycles = sq.len() + SUMSQ_LATENCY;
    let got = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let (tb_got, tb_sq, tb_sc) = (got.clone(), sq.clone(), scores.clone());
    let mut sim = simple_sim!(Reduce, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        let mut sums = Vec::new();
        let mut outs = Vec::new();
        let mut next = 0;
        let mut k = 0;
        while k < cycles || outs.len() < tb_sc.len() {
            let (v, c, sx) = tb_sq.get(k).copied().unwrap_or((false, false, 0));
            x.sq_valid.next = v;
            x.sq_clear.next = c;
            x.sq_x.next = u64::from(sx).into();
            let feed = next < tb_sc.len() && !x.sm_busy.val().get_bit(tb_sc[next].0);
            x.sm_valid.next = feed;
            if feed {
                x.sm_row.next = (tb_sc[next].0 as u64).into();
                x.sm_start.next = tb_sc[next].1;
                x.score.next = u64::from(tb_sc[next].2).into();
                next += 1;
            }
            wait_clock_cycle!(ep, clock, x);
            sums.push((acc_value(x.sumsq.val()), x.sumsq_nf.val(), x.sumsq_f32.val().to_u32()));
            if x.sm_out.val() {
                let o = [x.sm_c.val(), x.sm_p.val(), x.sm_l.val(), x.sm_m.val()].map(|b| b.to_u32());
                outs.push((x.sm_out_row.val().to_u64() as usize, o));
            }
            k += 1;
            assert!(k < cycles + 100 * SOFTMAX_II * tb_sc.len(), "softmax stalled");
        }
        *tb_got.lock().unwrap() = (sums, outs);
        ep.done(x)
    });
    sim.run(Box::new(reduce_top()), MAX_TIME).unwrap();
    let (sums, outs) = got.lock().unwrap().clone();
    let mut acc = WideAcc::ZERO;
    for (k, &(v, c, x)) in sq.iter().enumerate() {
        if v {
            if c {
                acc = WideAcc::ZERO;
            }
            accumulate_square(&mut acc, f32::from_bits(x));
        }
        if k >= 1 {
            let g = sums[k + SUMSQ_LATENCY - 1];
            assert_eq!(g, (acc.fixed, acc.nonfinite, acc.to_f32().to_bits()), "sum of squares after element {k}");
        }
    }
    assert_eq!(outs.len(), scores.len());
    let mut sm = vec![OnlineSoftmax::new(0); 4];
    for (k, (&(row, start, s), g)) in scores.iter().zip(&outs).enumerate() {
        if start {
            sm[row] = OnlineSoftmax::new(0);
        }
        let (c, p, l, m) = softmax_step(&mut sm[row], f32::from_bits(s));
        assert_eq!(*g, (row, [c, p, l, m].map(f32::to_bits)), "softmax score {k} ({s:08x})");
    }
    eprintln!("reduce: sum-of-squares latency {SUMSQ_LATENCY}, softmax latency {}, II {SOFTMAX_II}", softmax_latency());
}

#[test]
fn verilog_lints_clean() {
    for unit in ["fp32", "vector", "vector_light", "reduce"] {
        let v = emit_verilog(unit).unwrap();
        lint(top_name(unit).unwrap(), &v);
    }
}

/// yosys maps an FP32 multiply's 24 x 24 significand product to two DSP48E2; the adds and everything else
/// are fabric.
#[test]
fn yosys_maps_an_fp32_multiply_to_two_dsp48e2() {
    if !have_tool("yosys", "yosys synthesis of the fp32 unit") {
        return;
    }
    let d = common::scratch("synth-fp32");
    let r = opu_rtl::synth::synthesize("fp32", &d).unwrap();
    eprintln!("fp32 (add + sub + mul): LUT {} FF {} DSP48E2 {} CARRY {}", r.lut, r.ff, r.dsp48e2, r.carry);
    assert_eq!(r.dsp48e2, 2, "{r:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The vector lane and the reduction unit through yosys: two DSP48E2 per FP32 multiply, except `exp`'s
/// `nf * C_HI` (C_HI has 10 significant bits: one DSP48E2), and two for the sum of squares' square.
/// Ignored: about 6 and 3 minutes (1.1 GB) on the 2-core machine; docs/rtl.md has the figures
/// (`cargo test --release -p opu-rtl --test vector -- --ignored`).
#[test]
#[ignore]
fn yosys_vector_and_reduce() {
    if !have_tool("yosys", "yosys synthesis of the vector and reduce units") {
        return;
    }
    let d = common::scratch("synth-vector");
    let (muls, _) = vector_operators();
    let (light_muls, _) = light_vector_operators();
    for (unit, dsps) in [
        ("vector", 2 * muls as u64 - 1),
        ("vector_light", 2 * light_muls as u64 - 1),
        ("reduce", 2 * (2 * 7 - 1) + 2 + 2),
    ] {
        let r = opu_rtl::synth::synthesize(unit, &d).unwrap();
        eprintln!("{unit}: LUT {} FF {} DSP48E2 {} CARRY {} cells {:?}", r.lut, r.ff, r.dsp48e2, r.carry, r.cells);
        assert_eq!(r.dsp48e2, dsps, "{unit}: {r:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

//! The PE lane (`opu_rtl::lane::Lane`): its rust-hdl model against `opu-hw`'s hybrid block dot product on
//! aligned FP16 blocks in every weight mode, Verilator lint of its Verilog, and yosys: 16 DSP48E2, packing
//! factor 2 for W4/W4Min and 1 for W8. The 10^6-input Verilator co-simulation is in opu-sim
//! (tests/rtl_lane.rs), through the Verilated model.

mod common;

use common::{have_tool, lint};
use opu_hw::numerics::weights::WeightFormat;
use opu_rtl::dsp::i64_to_signed;
use opu_rtl::emit::{emit_verilog, top_name};
use opu_rtl::lane::{acc_value, lane_top, w_bus, x_bus, Lane, LANE_LATENCY};
use opu_rtl::testing::{acc_matches, ActKind, LaneCycle, LaneJob, Rng};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

fn drive(x: &mut Lane, c: &LaneCycle) {
    x.valid.next = c.valid;
    x.mode.next = u64::from(c.mode).into();
    x.half.next = c.half;
    x.row.next = c.row;
    x.clear.next = c.clear;
    x.last.next = c.last;
    x.x.next = x_bus(&c.x);
    x.w.next = w_bus(&c.w);
    x.x_nf.next = c.x_nf;
    x.x_exp.next = i64_to_signed(i64::from(c.x_exp));
    x.sa.next = i64_to_signed(i64::from(c.sa));
    x.d0.next = u64::from(c.d[0]).into();
    x.m0.next = u64::from(c.m[0]).into();
    x.d1.next = u64::from(c.d[1]).into();
    x.m1.next = u64::from(c.m[1]).into();
}

/// Runs `jobs` back to back through the rust-hdl model; returns each row's accumulator and flag, read on
/// its `done` pulse.
fn run_model(jobs: &[LaneJob]) -> Vec<[(i128, bool); 2]> {
    let cycles: Vec<LaneCycle> = jobs.iter().flat_map(|j| j.cycles()).collect();
    let n_jobs = jobs.len();
    let got = Arc::new(Mutex::new(Vec::new()));
    let tb_got = got.clone();
    let mut sim = simple_sim!(Lane, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        let mut row_results = [Vec::new(), Vec::new()];
        for c in cycles.iter().chain(std::iter::repeat_n(&LaneCycle::default(), LANE_LATENCY + 2)) {
            drive(&mut x, c);
            wait_clock_cycle!(ep, clock, x);
            if x.done0.val() {
                row_results[0].push((acc_value(x.acc0.val()), x.nf0.val()));
            }
            if x.done1.val() {
                row_results[1].push((acc_value(x.acc1.val()), x.nf1.val()));
            }
        }
        assert_eq!(row_results[0].len(), n_jobs, "done0 pulses");
        assert_eq!(row_results[1].len(), n_jobs, "done1 pulses");
        *tb_got.lock().unwrap() = (0..n_jobs).map(|i| [row_results[0][i], row_results[1][i]]).collect();
        ep.done(x)
    });
    sim.run(Box::new(lane_top()), 100_000_000).unwrap();
    let r = got.lock().unwrap().clone();
    r
}

#[test]
fn model_equals_hybrid_dot_in_every_mode() {
    let mut rng = Rng(0x1a4e_0001);
    for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
        let mut jobs = Vec::new();
        for &kind in &ActKind::ALL {
            jobs.push(LaneJob::random(&mut rng, fmt, 3, &[kind], kind == ActKind::NonFinite));
        }
        jobs.push(LaneJob::random(&mut rng, fmt, 1, &ActKind::ALL, false));
        jobs.push(LaneJob::random(&mut rng, fmt, 6, &ActKind::ALL, true));
        let got = run_model(&jobs);
        for (i, (job, g)) in jobs.iter().zip(&got).enumerate() {
            let want = job.expected();
            for r in 0..2 {
                assert!(
                    acc_matches(g[r].0, g[r].1, &want[r]),
                    "{fmt:?} job {i} row {r}: lane {:?}, opu-hw {:?}",
                    g[r],
                    want[r]
                );
            }
        }
    }
}

#[test]
fn verilog_lints_clean() {
    let v = emit_verilog("lane").unwrap();
    lint(top_name("lane").unwrap(), &v);
}

#[test]
fn yosys_maps_the_products_to_16_dsp48e2_and_the_terms_to_4() {
    if !have_tool("yosys", "yosys synthesis of the lane") {
        return;
    }
    let d = common::scratch("synth-lane");
    let r = opu_rtl::synth::synthesize("lane", &d).unwrap();
    eprintln!("lane: {r:?}");
    // 16 packed products (2 per DSP48E2) and the epilogue's two term units, each a 29 x 27 multiply split in
    // two DSP48E2 (S's low 17 and high 12 bits): 32 products per cycle on 20 DSP48E2
    assert_eq!(r.dsp48e2, 20, "{r:?}");
    assert_eq!(r.packing_factor.w4, Some(1.6));
    assert_eq!(r.packing_factor.w4_min, Some(1.6));
    assert_eq!(r.packing_factor.w8, Some(0.8));
    // the multiplies in DSP48E2 and the shift by 16s after them took the lane from 4,484 LUTs to 2,776, the
    // products summed in the DSP48E2 post-adders and two fabric stages to 1,939 (2026-12-06); the u280's 128
    // lanes are the largest part of the card's LUTs
    assert!(r.lut < 2_100, "lane LUT {}", r.lut);
    // module by module (`opu rtl synth --unit top`'s method: one yosys per module, its submodules black boxes,
    // two at once): the same 20 DSP48E2, 16 in the products' module and 4 in the epilogue's, and at least the
    // flattened LUTs (nothing is optimized across the ports: 6,552 against 4,484 on 2026-12-03, the
    // epilogue's inputs)
    let dd = common::scratch("synth-lane-modules");
    let seen = Mutex::new(Vec::new());
    let m = opu_rtl::synth::synthesize_design_with("lane", &opu_hw::config::OverlayConfig::sim(), &dd, 2, &|m, done, total| {
        seen.lock().unwrap().push((m.to_string(), done, total));
    })
    .unwrap();
    eprintln!("lane by modules: {:?}", m.parts);
    assert_eq!(m.total.dsp48e2, 20, "{:?}", m.parts);
    assert!(m.parts.iter().any(|p| p.module == "opu_lane$products" && p.instances == 1 && p.resources.dsp48e2 == 16), "{:?}", m.parts);
    assert!(m.parts.iter().any(|p| p.module == "opu_lane$epilogue" && p.instances == 1 && p.resources.dsp48e2 == 4), "{:?}", m.parts);
    let ratio = m.total.lut as f64 / r.lut as f64;
    assert!((0.95..1.6).contains(&ratio), "LUT {} module by module against {} flattened", m.total.lut, r.lut);
    let seen = seen.into_inner().unwrap();
    assert!(!seen.is_empty() && seen.iter().all(|s| s.2 == seen.len()), "{seen:?}");
    assert!(seen.iter().any(|s| s.0 == "opu_lane"), "{seen:?}");
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&dd);
}

#[test]
fn aligner_model_equals_align_block_and_lints() {
    use opu_hw::numerics::align::align_block;
    use opu_rtl::align::{aligner_top, mant_of, xf_bus, Aligner, ALIGN_LATENCY};
    let mut rng = Rng(0xa119_0001);
    for bits in [16u32, 12] {
        let blocks: Vec<[u16; 32]> = (0..200).map(|i| opu_rtl::testing::act_block(&mut rng, ActKind::ALL[i % ActKind::ALL.len()])).collect();
        let got = Arc::new(Mutex::new(Vec::new()));
        let (tb_blocks, tb_got) = (blocks.clone(), got.clone());
        let mut sim = simple_sim!(Aligner, clock, 100_000_000, ep, {
            let mut x = ep.init()?;
            let zero = [0u16; 32];
            for k in 0..tb_blocks.len() + ALIGN_LATENCY {
                x.xf.next = xf_bus(tb_blocks.get(k).unwrap_or(&zero));
                wait_clock_cycle!(ep, clock, x);
                if k + 1 >= ALIGN_LATENCY {
                    let sa = opu_rtl::dsp::signed_to_i64(x.sa.val());
                    tb_got.lock().unwrap().push((mant_of(x.mant.val()), opu_rtl::dsp::signed_to_i64(x.x_exp.val()), x.x_nf.val(), sa));
                }
            }
            ep.done(x)
        });
        sim.run(Box::new(aligner_top(bits)), 100_000_000).unwrap();
        let got = got.lock().unwrap();
        for (b, g) in blocks.iter().zip(got.iter()) {
            let want = align_block(b, bits);
            assert_eq!((g.0, g.1 as i32, g.2, g.3), (want.mant, want.scale_exp, want.nonfinite, want.mant_sum()), "{b:04x?}");
        }
        let mut cfg = opu_hw::OverlayConfig::sim();
        cfg.act_mantissa_bits = bits;
        lint("opu_align", &opu_rtl::emit_verilog_for("align", &cfg).unwrap());
    }
}

#[test]
fn array_verilog_lints_for_the_sim_preset() {
    let cfg = opu_hw::OverlayConfig::sim();
    lint("opu_array", &opu_rtl::emit_verilog_for("array", &cfg).unwrap());
    let mut bad = cfg.clone();
    bad.dot_width = 64;
    let e = opu_rtl::emit_verilog_for("array", &bad).unwrap_err().to_string();
    assert!(e.contains("dot_width is 64"), "{e}");
}

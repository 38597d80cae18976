//! The overpacked w4x3u DSP block (`opu_rtl::dsp3::MulW4x3`): rust-hdl simulation vs opu_hw's packing model
//! and the exact products, emitted Verilog, Verilator lint, yosys DSP48E2 count. The Verilator co-simulation,
//! exhaustive over all 2^24 inputs, is in opu-sim (tests/rtl_models.rs).

mod common;

use common::{have_tool, lint, scratch, Rng};
use opu_hw::numerics::packing::{lut_mul_lo, unpack_fields, w4x3u_products, W4X3_STRIDE, W4X3_T};
use opu_rtl::dsp::{i64_to_signed, signed_to_i64};
use opu_rtl::dsp3::{mul_w4x3_top, MulW4x3};
use opu_rtl::emit::{emit_verilog, top_name};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

const UNIT: &str = "dsp_w4x3";
const XMIN: i16 = -2048;
const XMAX: i16 = 2047;

/// The extremes (weights 0, 1, 7, 8, 14, 15; activations at and near the ends and zero) then `n` random
/// inputs.
fn inputs(n: usize, seed: u64) -> Vec<([u8; 3], i16)> {
    let ws = [0u8, 1, 7, 8, 14, 15];
    let xs = [XMIN, XMIN + 1, -31, -1, 0, 1, 31, XMAX - 1, XMAX];
    let mut v = Vec::new();
    for &w0 in &ws {
        for &w1 in &ws {
            for &w2 in &ws {
                for &x in &xs {
                    v.push(([w0, w1, w2], x));
                }
            }
        }
    }
    let mut rng = Rng(seed);
    for _ in 0..n {
        let r = rng.next();
        let x = (((r >> 16) as i64 & 0xfff) - 2048) as i16;
        v.push((
            [(r & 15) as u8, ((r >> 4) & 15) as u8, ((r >> 8) & 15) as u8],
            x,
        ));
    }
    v
}

/// The packing model itself is exact on all 2^24 inputs (what the RTL is compared with).
#[test]
fn model_is_exact_exhaustive() {
    for x in XMIN..=XMAX {
        for w in 0u32..4096 {
            let w = [(w & 15) as u8, ((w >> 4) & 15) as u8, (w >> 8) as u8];
            assert_eq!(
                w4x3u_products(w, x),
                w.map(|wi| i32::from(wi) * i32::from(x)),
                "w {w:?} x {x}"
            );
        }
    }
    // the extraction used by UnpackW4x3 (side bits alone) is the one unpack_w4x3u applies
    let (w, x) = ([15u8, 9, 15], XMIN);
    let p = (15 * -2048) + ((9 * -2048) << 11) + ((15 * -2048) << 22);
    let side = [
        0,
        lut_mul_lo(x.into(), 9, W4X3_T),
        lut_mul_lo(x.into(), 15, W4X3_T),
    ];
    assert_eq!(
        unpack_fields(p, W4X3_STRIDE, W4X3_T, side),
        w.map(|wi| i64::from(wi) * i64::from(x))
    );
}

/// (a) the block's update() model, clocked through rust-hdl's simulator, equals w4x3u_products and the
/// exact products.
#[test]
fn sim_matches_packing_model() {
    let ins = inputs(3000, 0x5eed_0301);
    let n = ins.len();
    let got = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let (tb_ins, tb_got) = (ins.clone(), got.clone());
    let mut sim = simple_sim!(MulW4x3, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        for &(w, a) in &tb_ins {
            x.w0.next = u64::from(w[0]).into();
            x.w1.next = u64::from(w[1]).into();
            x.w2.next = u64::from(w[2]).into();
            x.x.next = i64_to_signed(i64::from(a));
            wait_clock_cycle!(ep, clock, x);
            tb_got.lock().unwrap().push([
                signed_to_i64(x.y0.val()),
                signed_to_i64(x.y1.val()),
                signed_to_i64(x.y2.val()),
            ]);
        }
        ep.done(x)
    });
    let t = std::time::Instant::now();
    sim.run(Box::new(mul_w4x3_top()), 10_000 * (n as u64 + 10))
        .unwrap();
    eprintln!("rust-hdl sim: {n} cycles in {:?}", t.elapsed());
    let got = got.lock().unwrap();
    assert_eq!(got.len(), n);
    for (i, (&(w, a), g)) in ins.iter().zip(got.iter()).enumerate() {
        let want = w4x3u_products(w, a).map(i64::from);
        assert_eq!(*g, want, "input {i}: w {w:?} x {a}");
        assert_eq!(want, w.map(|wi| i64::from(wi) * i64::from(a)));
    }
}

/// (b) the emitted Verilog: stable top name, the custom packed multiply, Verilator lint.
#[test]
fn verilog_emits_and_lints() {
    let top = top_name(UNIT).unwrap();
    assert_eq!(top, "opu_dsp_w4x3");
    let v = emit_verilog(UNIT).unwrap();
    assert!(v.contains(&format!("module {top}(")), "{v}");
    assert!(!v.contains("module top"), "{v}");
    assert!(v.contains("p <= port_a * port_b;"), "{v}");
    assert!(
        v.contains("assign port_a = {1'b0, w2, 7'b0, w1, 7'b0, w0};"),
        "{v}"
    );
    lint(top, &v);
}

/// (c) yosys synth_xilinx for UltraScale+ maps the unit to exactly one DSP48E2 (side multiplies in LUTs).
#[test]
fn yosys_maps_to_one_dsp48e2() {
    if !have_tool("yosys", "yosys DSP48E2 count") {
        return;
    }
    let d = scratch("yosys-dsp_w4x3");
    let t = std::time::Instant::now();
    let r = opu_rtl::synth::synthesize(UNIT, &d).unwrap();
    eprintln!(
        "yosys {UNIT}: {:?}, LUT {} FF {} DSP48E2 {} CARRY {}, cells {:?}, packing {:?}",
        t.elapsed(),
        r.lut,
        r.ff,
        r.dsp48e2,
        r.carry,
        r.cells,
        r.packing_factor
    );
    assert_eq!(r.dsp48e2, 1, "{r:?}");
    assert_eq!(r.packing_factor.w4_min, Some(3.0));
    let _ = std::fs::remove_dir_all(&d);
}

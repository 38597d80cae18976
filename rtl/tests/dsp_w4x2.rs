//! The w4x2u DSP block: rust-hdl simulation vs opu_hw's packing model, emitted Verilog, Verilator lint,
//! yosys DSP48E2 count. The Verilator co-simulation is in opu-sim (tests/rtl_models.rs).

mod common;

use common::{have_tool, lint, scratch, Rng};
use opu_hw::numerics::packing::w4x2u_products;
use opu_rtl::dsp::{i64_to_signed, signed_to_i64, MulW4x2};
use opu_rtl::emit::{emit_verilog, mul_w4x2_top, top_name};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

/// The extremes (weights 0, 1, 14, 15; activations at and near the ends and zero) then `n` random inputs.
fn inputs(n: usize, seed: u64) -> Vec<([u8; 2], i16)> {
    let ws = [0u8, 1, 14, 15];
    let xs = [i16::MIN, i16::MIN + 1, -1, 0, 1, i16::MAX - 1, i16::MAX];
    let mut v = Vec::new();
    for &w0 in &ws {
        for &w1 in &ws {
            for &x in &xs {
                v.push(([w0, w1], x));
            }
        }
    }
    let mut rng = Rng(seed);
    for _ in 0..n {
        let r = rng.next();
        v.push(([(r & 15) as u8, ((r >> 4) & 15) as u8], (r >> 16) as i16));
    }
    v
}

#[test]
fn conversions_round_trip() {
    for v in [i64::from(i16::MIN), -1, 0, 1, i64::from(i16::MAX)] {
        assert_eq!(signed_to_i64(i64_to_signed::<16>(v)), v);
    }
    for v in [-(1i64 << 47), -(1 << 44) - 3, -1, 0, 5, (1 << 47) - 1] {
        assert_eq!(signed_to_i64(i64_to_signed::<48>(v)), v);
    }
    // truncation wraps like Verilog
    assert_eq!(signed_to_i64(i64_to_signed::<20>(1 << 19)), -(1 << 19));
}

/// (a) the block's update() model, clocked through rust-hdl's simulator, equals w4x2u_products.
#[test]
fn sim_matches_packing_model() {
    let ins = inputs(3000, 0x5eed_0001);
    let n = ins.len();
    let got = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let (tb_ins, tb_got) = (ins.clone(), got.clone());
    let mut sim = simple_sim!(MulW4x2, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        for &(w, a) in &tb_ins {
            x.w0.next = u64::from(w[0]).into();
            x.w1.next = u64::from(w[1]).into();
            x.x.next = i64_to_signed(i64::from(a));
            wait_clock_cycle!(ep, clock, x);
            tb_got
                .lock()
                .unwrap()
                .push([signed_to_i64(x.y0.val()), signed_to_i64(x.y1.val())]);
        }
        ep.done(x)
    });
    let t = std::time::Instant::now();
    sim.run(Box::new(mul_w4x2_top()), 10_000 * (n as u64 + 10))
        .unwrap();
    eprintln!("rust-hdl sim: {n} cycles in {:?}", t.elapsed());
    let got = got.lock().unwrap();
    assert_eq!(got.len(), n);
    for (i, (&(w, a), g)) in ins.iter().zip(got.iter()).enumerate() {
        let want = w4x2u_products(w, a).map(i64::from);
        assert_eq!(*g, want, "input {i}: w {w:?} x {a}");
        assert_eq!(want, w.map(|wi| i64::from(wi) * i64::from(a)));
    }
}

/// (b) the emitted Verilog: stable top name, the custom packed multiply, Verilator lint.
#[test]
fn verilog_emits_and_lints() {
    for unit in ["dsp_w4x2", "dsp_w4x2_p"] {
        let top = top_name(unit).unwrap();
        let v = emit_verilog(unit).unwrap();
        assert!(v.contains(&format!("module {top}(")), "{v}");
        assert!(!v.contains("module top"), "{v}");
        assert!(v.contains("p <= port_a * port_b;"), "{v}");
        assert!(v.contains("assign port_a = {1'b0, w1, 18'b0, w0};"), "{v}");
        lint(top, &v);
    }
    assert!(emit_verilog("nope").is_err());
}

/// (c) yosys synth_xilinx for UltraScale+ maps each unit to exactly one DSP48E2, two W4 products per DSP.
#[test]
fn yosys_maps_to_one_dsp48e2() {
    if !have_tool("yosys", "yosys DSP48E2 count") {
        return;
    }
    for unit in ["dsp_w4x2", "dsp_w4x2_p"] {
        let d = scratch(&format!("yosys-{unit}"));
        let r = opu_rtl::synth::synthesize(unit, &d).unwrap();
        eprintln!("yosys {unit}: cells {:?}", r.cells);
        assert_eq!(r.dsp48e2, 1, "{unit}: {r:?}");
        assert_eq!(r.packing_factor.w4_min, Some(2.0), "{unit}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

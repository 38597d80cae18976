//! The output stage (`opu_rtl::round::Round`): its rust-hdl model against `WideAcc::to_f16` / `to_f32` and
//! Verilator lint. The 10^6-input Verilator co-simulation is in opu-sim (tests/rtl_datapath.rs).

mod common;

use common::lint;
use opu_rtl::emit::{emit_verilog, top_name};
use opu_rtl::lane::acc_bits;
use opu_rtl::round::{round_top, Round, ROUND_LATENCY};
use opu_rtl::testing::{accumulator_values, Rng};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

#[test]
fn model_equals_to_f16_and_to_f32() {
    let mut rng = Rng(0x40d0_0001);
    let accs = accumulator_values(&mut rng, 500);
    let got = Arc::new(Mutex::new(Vec::new()));
    let (tb_accs, tb_got) = (accs.clone(), got.clone());
    let mut sim = simple_sim!(Round, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        for k in 0..tb_accs.len() + ROUND_LATENCY {
            let a = tb_accs.get(k).copied().unwrap_or_default();
            x.acc.next = acc_bits(a.fixed);
            x.nf.next = a.nonfinite;
            wait_clock_cycle!(ep, clock, x);
            if k + 1 >= ROUND_LATENCY {
                tb_got.lock().unwrap().push((x.f16.val().to_u64() as u16, x.f32.val().to_u64() as u32));
            }
        }
        ep.done(x)
    });
    sim.run(Box::new(round_top()), 100_000_000).unwrap();
    let got = got.lock().unwrap();
    for (a, g) in accs.iter().zip(got.iter()) {
        assert_eq!(*g, (a.to_f16(), a.to_f32().to_bits()), "{a:?}");
    }
}

#[test]
fn verilog_lints_clean() {
    lint(top_name("round").unwrap(), &emit_verilog("round").unwrap());
}

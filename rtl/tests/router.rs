//! The router unit (`opu_rtl::router::Router`): its rust-hdl model against `opu-hw` (`dot_f16`, `add_f16`,
//! `to_f32`, the decision) and Verilator lint. The 10^6-product Verilator co-simulation is in opu-sim
//! (tests/rtl_datapath.rs); its yosys figures (16 DSP48E2: one FP16 product each; about a minute of yosys)
//! are in the `rtl_bench --synth` table.

mod common;

use common::lint;
use opu_rtl::emit::{emit_verilog, top_name};
use opu_rtl::router::{f16_bus, router_top, Router, ROUTER_LATENCY};
use opu_rtl::testing::{ActKind, RouterBeat, RouterJob, Rng};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

#[test]
fn model_equals_route() {
    let mut rng = Rng(0x4017_0001);
    let mut jobs: Vec<RouterJob> = ActKind::ALL.iter().map(|&k| RouterJob::random(&mut rng, 24, &[k], false)).collect();
    jobs.push(RouterJob::random(&mut rng, 576, &ActKind::ALL[..4], false));
    jobs.push(RouterJob::random(&mut rng, 5, &ActKind::ALL, true));
    jobs.push(RouterJob::random(&mut rng, 64, &ActKind::ALL, true));
    let beats: Vec<RouterBeat> = jobs.iter().flat_map(|j| j.beats()).collect();
    let got = Arc::new(Mutex::new(Vec::new()));
    let tb_got = got.clone();
    let mut sim = simple_sim!(Router, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        for b in beats.iter().chain(std::iter::repeat_n(&RouterBeat::default(), ROUTER_LATENCY + 1)) {
            x.valid.next = b.valid;
            x.first.next = b.first;
            x.last.next = b.last;
            x.x.next = f16_bus(&b.x);
            x.w0.next = f16_bus(&b.w[0]);
            x.w1.next = f16_bus(&b.w[1]);
            x.b0.next = u64::from(b.b[0]).into();
            x.b1.next = u64::from(b.b[1]).into();
            wait_clock_cycle!(ep, clock, x);
            if x.done.val() {
                tb_got.lock().unwrap().push((x.l0.val().to_u64() as u32, x.l1.val().to_u64() as u32, x.skip.val()));
            }
        }
        ep.done(x)
    });
    sim.run(Box::new(router_top()), 100_000_000).unwrap();
    let got = got.lock().unwrap();
    assert_eq!(got.len(), jobs.len());
    for (j, g) in jobs.iter().zip(got.iter()) {
        let (l0, l1, skip) = j.expected();
        assert_eq!(*g, (l0.to_bits(), l1.to_bits(), skip), "{j:?}");
    }
}

#[test]
fn verilog_lints_clean() {
    lint(top_name("router").unwrap(), &emit_verilog("router").unwrap());
}

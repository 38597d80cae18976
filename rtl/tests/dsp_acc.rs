//! The accumulating w4x2u DSP block (`opu_rtl::acc::PackedMacW4x2`): rust-hdl simulation vs the plain integer
//! row sums and opu_hw's packing model, emitted Verilog, Verilator lint, yosys DSP48E2 count. The Verilator
//! co-simulation is in opu-sim (tests/rtl_models.rs).

mod common;

use common::{have_tool, lint, scratch, Rng};
use opu_hw::numerics::packing::{w4x2u_accumulate, W4X2U_MAX_DEPTH};
use opu_rtl::acc::{packed_mac_w4x2_top, PackedMacW4x2, BLOCK_COLUMNS};
use opu_rtl::dsp::{i64_to_signed, signed_to_i64};
use opu_rtl::emit::{emit_verilog, top_name};
use rust_hdl::prelude::*;
use std::sync::{Arc, Mutex};

const UNIT: &str = "dsp_acc_w4x2";

type Block = Vec<([u8; 2], i16)>;

/// The plain integer row sums `[sum x_j w0_j, sum x_j w1_j]`.
fn plain_sums(b: &Block) -> [i64; 2] {
    let mut s = [0i64; 2];
    for &(w, x) in b {
        s[0] += i64::from(w[0]) * i64::from(x);
        s[1] += i64::from(w[1]) * i64::from(x);
    }
    s
}

/// Worst and structured blocks of 32: every weight / activation extreme combination held constant, all zero,
/// alternating signs and weights, one nonzero column.
fn extreme_blocks() -> Vec<Block> {
    let n = BLOCK_COLUMNS;
    let ws = [0u8, 1, 7, 8, 14, 15];
    let xs = [i16::MIN, i16::MIN + 1, -1, 0, 1, 4, i16::MAX];
    let mut v = Vec::new();
    for &w0 in &ws {
        for &w1 in &ws {
            for &x in &xs {
                v.push(vec![([w0, w1], x); n]);
            }
        }
    }
    let alt = |f: &dyn Fn(usize) -> ([u8; 2], i16)| (0..n).map(f).collect::<Block>();
    v.push(alt(&|j| {
        if j % 2 == 0 {
            ([15, 15], i16::MIN)
        } else {
            ([15, 15], i16::MAX)
        }
    }));
    v.push(alt(&|j| {
        if j % 2 == 0 {
            ([15, 0], i16::MIN)
        } else {
            ([0, 15], i16::MIN)
        }
    }));
    v.push(alt(&|j| {
        if j % 2 == 0 {
            ([0, 15], i16::MAX)
        } else {
            ([15, 0], i16::MIN)
        }
    }));
    v.push(alt(&|j| {
        (
            [(j % 16) as u8, 15 - (j % 16) as u8],
            if j % 3 == 0 { i16::MIN } else { i16::MAX },
        )
    }));
    for k in [0, 1, 30, 31] {
        v.push(alt(&|j| {
            if j == k {
                ([15, 15], i16::MIN)
            } else {
                ([0, 0], 0)
            }
        }));
        v.push(alt(&|j| {
            if j == k {
                ([0, 0], 0)
            } else {
                ([15, 15], i16::MIN)
            }
        }));
    }
    v
}

/// `n` random blocks: 3 in 4 uniform, 1 in 4 with activations and weights at their extremes.
fn random_blocks(n: usize, seed: u64) -> Vec<Block> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let extreme = rng.next().is_multiple_of(4);
            (0..BLOCK_COLUMNS)
                .map(|_| {
                    let r = rng.next();
                    if extreme {
                        let w = |b: u64| if b & 1 == 1 { 15u8 } else { 0 };
                        let x = if r & 4 == 0 { i16::MIN } else { i16::MAX };
                        ([w(r), w(r >> 1)], x)
                    } else {
                        ([(r & 15) as u8, ((r >> 4) & 15) as u8], (r >> 16) as i16)
                    }
                })
                .collect()
        })
        .collect()
}

fn all_blocks(n_random: usize, seed: u64) -> Vec<Block> {
    let mut v = extreme_blocks();
    v.extend(random_blocks(n_random, seed));
    v
}

#[test]
fn model_matches_plain_sums() {
    const { assert!(BLOCK_COLUMNS <= W4X2U_MAX_DEPTH) };
    for b in all_blocks(2000, 0xacc0_0001) {
        assert_eq!(w4x2u_accumulate(&b), plain_sums(&b), "{b:?}");
    }
}

/// (a) rust-hdl simulation, blocks back to back (`first` on each block's first column, no reset between).
#[test]
fn sim_matches_plain_sums() {
    let blocks = all_blocks(300, 0xacc0_0002);
    let nb = blocks.len();
    let got = Arc::new(Mutex::new(Vec::with_capacity(nb)));
    let (tb_blocks, tb_got) = (blocks.clone(), got.clone());
    let mut sim = simple_sim!(PackedMacW4x2, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        for b in &tb_blocks {
            for (j, &(w, a)) in b.iter().enumerate() {
                x.first.next = j == 0;
                x.w0.next = u64::from(w[0]).into();
                x.w1.next = u64::from(w[1]).into();
                x.x.next = i64_to_signed(i64::from(a));
                wait_clock_cycle!(ep, clock, x);
            }
            tb_got
                .lock()
                .unwrap()
                .push([signed_to_i64(x.s0.val()), signed_to_i64(x.s1.val())]);
        }
        ep.done(x)
    });
    let cycles = (nb * BLOCK_COLUMNS) as u64;
    let t = std::time::Instant::now();
    sim.run(Box::new(packed_mac_w4x2_top()), 10_000 * (cycles + 10))
        .unwrap();
    eprintln!(
        "rust-hdl sim: {nb} blocks, {cycles} cycles in {:?}",
        t.elapsed()
    );
    let got = got.lock().unwrap();
    assert_eq!(got.len(), nb);
    for (i, (b, g)) in blocks.iter().zip(got.iter()).enumerate() {
        assert_eq!(*g, plain_sums(b), "block {i}: {b:?}");
    }
    // the worst case is in there: all weights 15, x = -32768
    let worst = vec![([15u8, 15], i16::MIN); BLOCK_COLUMNS];
    let k = blocks.iter().position(|b| *b == worst).unwrap();
    assert_eq!(got[k], [-15_728_640, -15_728_640]);
}

/// (b) the emitted Verilog: stable top name, the accumulate pattern, Verilator lint.
#[test]
fn verilog_emits_and_lints() {
    let top = top_name(UNIT).unwrap();
    assert_eq!(top, "opu_dsp_acc_w4x2");
    let v = emit_verilog(UNIT).unwrap();
    assert!(v.contains(&format!("module {top}(")), "{v}");
    assert!(!v.contains("module top"), "{v}");
    assert!(v.contains("p <= p + port_a * port_b;"), "{v}");
    assert!(v.contains("side <= side + lo;"), "{v}");
    lint(top, &v);
}

/// (c) yosys synth_xilinx for UltraScale+: exactly one DSP48E2 (the multiply; yosys 0.23 leaves the 48-bit
/// accumulator adder and register in fabric), no block RAM.
#[test]
fn yosys_maps_to_one_dsp48e2() {
    if !have_tool("yosys", "yosys DSP48E2 count") {
        return;
    }
    let d = scratch("acc-yosys");
    let r = opu_rtl::synth::synthesize(UNIT, &d).unwrap();
    eprintln!("yosys {UNIT}: cells {:?}", r.cells);
    assert_eq!(r.dsp48e2, 1, "{r:?}");
    assert_eq!((r.bram, r.uram), (0, 0), "{r:?}");
    // P (48) + side (3) registers at most, wherever yosys puts P.
    assert!(r.ff <= 51, "{} flip-flops: {r:?}", r.ff);
    let _ = std::fs::remove_dir_all(&d);
}

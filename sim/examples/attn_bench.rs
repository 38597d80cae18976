//! Attention throughput of the functional simulator at SmolLM2's shapes: one layer's three `attn`
//! instructions (3 KV heads, groups of 3 query heads, head_dim 64, K/V rows of all KV heads interleaved by
//! position as the compiler lays them out), over 10 and 1,000 positions, on one thread; and what the 30
//! layers of a decode step would cost at each length.
//!
//! `cargo run -p opu-sim --release --example attn_bench [-- SECONDS_PER_CASE [POSITIONS,...]]`

use std::time::{Duration, Instant};

use opu_hw::isa::assemble;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::OverlayConfig;
use opu_sim::FuncSim;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

const HD: u32 = 64;
const KV_HEADS: u32 = 3;
const GROUP: u32 = 3;
const LAYERS: f64 = 30.0;

/// Seconds per run of one layer's attention over `len` positions (the best of quarter-second slices).
fn bench(len: u32, budget: Duration) -> f64 {
    let mut sim = FuncSim::new(&OverlayConfig::sim());
    let mut rng = Lcg(7);
    // K at line 0x1000, V at 0x80000: a row of 3 heads x 64 FP16 = 12 lines per position
    let stride = KV_HEADS * HD * 2 / 32;
    let kv: Vec<u8> = (0..len * KV_HEADS * HD).flat_map(|_| f32_to_f16(rng.next() * 2.0).to_le_bytes()).collect();
    let (k_line, v_line) = (0x1000u32, 0x8_0000u32);
    opu_hw::device::Device::mem_write(&mut sim, u64::from(k_line) * 32, &kv).unwrap();
    opu_hw::device::Device::mem_write(&mut sim, u64::from(v_line) * 32, &kv).unwrap();
    let q: Vec<u8> = (0..KV_HEADS * GROUP * HD).flat_map(|_| f32_to_f16(rng.next() * 3.0).to_le_bytes()).collect();
    sim.scratchpad_mut()[..q.len()].copy_from_slice(&q);
    let head_bytes = GROUP * HD * 2;
    let mut text = format!(
        "csrw csr=head_dim rs=r0 imm={HD}\ncsrw csr=kv_stride rs=r0 imm={stride}\ncsrw csr=attn_scale rs=r0 imm={:#x}\nseti rd=r1 imm={len}\n",
        0.125f32.to_bits()
    );
    for h in 0..KV_HEADS {
        let (qw, dw) = (h * head_bytes / 4, (KV_HEADS * head_bytes + h * head_bytes) / 4);
        let off = h * HD * 2 / 32;
        text += &format!("attn group={GROUP} kvh={h} len=r1 dst={dw} q={qw} k={} v={}\n", k_line + off, v_line + off);
    }
    text += "end\n";
    sim.load_program(0, &assemble(&text).unwrap()).unwrap();
    sim.run(&[]).unwrap();
    let start = Instant::now();
    let mut best = f64::INFINITY;
    while start.elapsed() < budget || best.is_infinite() {
        let t = Instant::now();
        let mut runs = 0u32;
        while t.elapsed() < Duration::from_millis(250) || runs < 2 {
            sim.run(&[]).unwrap();
            runs += 1;
        }
        best = best.min(t.elapsed().as_secs_f64() / f64::from(runs));
    }
    best
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let budget = Duration::from_secs_f64(secs);
    println!("{:>9} {:>22} {:>26}", "positions", "ns per position x head", "ms per decode step (x30)");
    let lens: Vec<u32> = std::env::args().nth(2).map_or(vec![10, 100, 1000], |s| s.split(',').map(|n| n.parse().expect("a number of positions")).collect());
    for len in lens {
        let s = bench(len, budget);
        let per = s / f64::from(len * KV_HEADS * GROUP) * 1e9;
        println!("{len:>9} {per:>22.1} {:>26.2}", s * LAYERS * 1e3);
    }
}

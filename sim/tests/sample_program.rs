//! tests/data/sample.s (one decoder layer of a tiny llama-style model with a router and an output head) over
//! several decode steps: the same bits on 1 and 2 threads, and the counters docs/isa.md defines.

mod common;

use common::*;
use opu_hw::isa::assemble;
use opu_hw::numerics::vector::rope_table_row;
use opu_hw::numerics::WeightFormat;
use opu_sim::FuncSim;
use rand::Rng;

const SAMPLE: &str = include_str!("../../tests/data/sample.s");

/// The device memory the sample's header describes, filled with random weights.
fn load_model(sim: &mut FuncSim, seed: u64) {
    let mut r = rng(seed);
    for tok in 0..8u32 {
        mem_put(sim, 0x100 + 4 * tok, &f16_bytes(&activations(&mut r, 64)));
    }
    mem_put(sim, 0x1000, &f32_bytes(&f32s(&mut r, 64, 0.5, 1.5))); // norm gains
    let mut router = f16_bytes(&small_f16s(&mut r, 128, 0.05));
    router.extend(f16_bytes(&[0, 0]));
    mem_put(sim, 0x1010, &router);
    for (line, fmt, rows, cols) in [
        (0x1020, WeightFormat::W4Min, 64, 64),  // q
        (0x10c0, WeightFormat::W4Min, 32, 64),  // k
        (0x1110, WeightFormat::W4Min, 32, 64),  // v
        (0x1160, WeightFormat::W4Min, 64, 64),  // o
        (0x1200, WeightFormat::W4Min, 128, 64), // gate
        (0x1340, WeightFormat::W4Min, 128, 64), // up
        (0x1480, WeightFormat::W4, 64, 128),    // down
        (0x1600, WeightFormat::W8, 256, 64),    // output head
    ] {
        mem_put_matrix(sim, line, &matrix(&mut r, fmt, rows, cols), fmt.row_bytes(cols).unwrap());
    }
    for pos in 0..8u32 {
        let row: Vec<f32> = rope_table_row(pos, 32, 10000.0).iter().flat_map(|&(c, s)| [c, s]).collect();
        mem_put(sim, 0xB000 + 4 * pos, &f32_bytes(&row));
    }
}

/// Runs decode steps 0..steps; returns, per step, whether attention ran, and the final memory of interest.
fn decode(threads: usize, steps: u32) -> (Vec<bool>, Vec<u8>, Vec<u8>, Vec<opu_sim::Stats>) {
    let mut sim = sim();
    sim.set_threads(threads);
    load_model(&mut sim, 60);
    sim.load_program(CODE, &assemble(SAMPLE).unwrap()).unwrap();
    let mut r = rng(61);
    let mut executed = Vec::new();
    let mut stats = Vec::new();
    let mut logits = Vec::new();
    for pos in 0..steps {
        let token = r.gen_range(0..8);
        let c = sim.run(&[token, pos]).unwrap_or_else(|e| panic!("step {pos}: {e}"));
        executed.push(!sim.pred(0));
        logits.extend(mem_get(&mut sim, 0xC000, 1024 + 32));
        stats.push(sim.stats());
        assert_eq!(c.instructions, sim.stats().instret);
    }
    // K and V cache rows and presence bytes.
    let mut kv = mem_get(&mut sim, 0x8000, 64 * steps as usize);
    kv.extend(mem_get(&mut sim, 0x9000, 64 * steps as usize));
    kv.extend(mem_get(&mut sim, 0xA000, steps as usize));
    (executed, logits, kv, stats)
}

#[test]
fn decode_steps_are_bit_identical_on_one_and_two_threads_and_count_what_they_do() {
    let steps = 6;
    let one = decode(1, steps);
    let two = decode(2, steps);
    assert!(one.0.contains(&true) && one.0.contains(&false), "the data exercise both router decisions");
    assert_eq!(one.0, two.0, "router decisions");
    assert_eq!(one.1, two.1, "logits and argmax");
    assert_eq!(one.2, two.2, "K/V cache and presence bytes");
    assert_eq!(one.3, two.3, "counters");

    let program = assemble(SAMPLE).unwrap();
    for (pos, (ran, s)) in one.0.iter().zip(&one.3).enumerate() {
        // FFN and head always run: gate + up (128 x 64 each), down (64 x 128), head (256 x 64).
        let mut macs = 2 * 128 * 64 + 64 * 128 + 256 * 64;
        if *ran {
            // q, k, v, o and attention over positions 0..=pos (2 heads of 32).
            macs += 64 * 64 + 2 * 32 * 64 + 64 * 64 + 2 * 2 * (pos + 1) * 32;
        }
        assert_eq!(s.macs, macs as u64, "step {pos}");
        assert_eq!(s.instret, program.len() as u64 - if *ran { 0 } else { 9 }, "step {pos}");
        assert_eq!(s.skipped_blocks, u64::from(!ran));
        assert_eq!(s.by_mnemonic["matmul"], if *ran { 8 } else { 4 });
        assert!(s.cycles > s.instret);
    }
    // The presence byte of each position says whether its attention ran.
    let presence = &one.2[one.2.len() - steps as usize..];
    assert_eq!(presence.iter().map(|&b| b != 0).collect::<Vec<_>>(), one.0);
}

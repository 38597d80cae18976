//! Matmul throughput of the functional simulator: a 576 x 1536 W4Min matmul (SmolLM2's FFN down-projection),
//! a 49152 x 576 W8 matmul (its tied output head) and a W4Min matrix of 576 columns (like its other
//! projections: shorter rows, so more per-row work), on 1 and 2 threads; one token (decode) and 16 (a prefill
//! pass of the `sim` preset, whose weight rows are prepared once for all the tokens).
//!
//! `cargo run -p opu-sim --release --example matmul_bench [-- SECONDS_PER_CASE]`

use std::time::{Duration, Instant};

use opu_hw::isa::assemble;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::weights::quantize_block;
use opu_hw::numerics::{WeightFormat, BLOCK};
use opu_hw::OverlayConfig;
use opu_sim::FuncSim;

/// A deterministic pseudo-random stream (no dependency needed for a bench).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// `(wall, cpu)`: G MAC/s by wall-clock time, and by CPU time per thread. Each is the best of several
/// slices of a quarter second: other processes on the host only ever slow a slice down. The CPU-time figure
/// is what the work costs on an otherwise idle core (what the scheduler gave to other processes is not
/// counted); with several threads it also counts their time waiting for work.
fn bench(fmt: WeightFormat, rows: u32, cols: u32, ntok: u32, threads: usize, budget: Duration) -> (f64, f64) {
    let mut sim = FuncSim::new(&OverlayConfig::sim());
    sim.set_threads(threads);
    let mut rng = Lcg(42);
    let mut weights = Vec::new();
    // Weights and activations shaped like SmolLM2's (as in opu-hw's dot-product tests): per-block scales
    // over two decades, activations mostly within +-4. The spread matters: it varies the block exponents
    // as real data does.
    for _ in 0..rows as usize * cols as usize / BLOCK {
        let scale = 10f32.powf(-1.5 + rng.next());
        let x: [f32; BLOCK] = std::array::from_fn(|_| rng.next() * scale + scale * 0.1);
        quantize_block(fmt, &x, &mut weights);
    }
    let w_line = 0x10_0000u32; // 32 MiB
    // laid out by lane, as `matmul` reads them (docs/isa.md)
    let weights = opu_hw::weight_layout::WeightLayout::new(&OverlayConfig::sim(), fmt.row_bytes(cols as usize).unwrap()).interleave(&weights);
    opu_hw::device::Device::mem_write(&mut sim, u64::from(w_line) * 32, &weights).unwrap();
    // `ntok` input vectors, each starting on a word (cols is a multiple of 32)
    let x: Vec<u8> = (0..cols * ntok).flat_map(|_| f32_to_f16(rng.next().powi(3) * 4.0).to_le_bytes()).collect();
    sim.scratchpad_mut()[..x.len()].copy_from_slice(&x);
    let dst = (x.len() as u32).div_ceil(4);
    let text = format!(
        "matmul fmt={} out=f16 ntok={ntok} dst={dst} src=0 rows={rows} cols={cols} w={w_line}\nend\n",
        fmt.name()
    );
    sim.load_program(0, &assemble(&text).unwrap()).unwrap();
    let macs = f64::from(rows) * f64::from(cols) * f64::from(ntok);
    sim.run(&[]).unwrap(); // warm up: page in the weights
    let start = Instant::now();
    let (mut best_wall, mut best_cpu) = (0.0f64, 0.0f64);
    while start.elapsed() < budget || best_wall == 0.0 {
        let (wall, cpu) = (Instant::now(), cpu_time());
        let mut runs = 0u32;
        while wall.elapsed() < Duration::from_millis(250) || runs < 2 {
            sim.run(&[]).unwrap();
            runs += 1;
        }
        let work = macs * f64::from(runs) / 1e9;
        best_wall = best_wall.max(work / wall.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (cpu, cpu_time()) {
            best_cpu = best_cpu.max(work / ((b - a).as_secs_f64() / threads as f64));
        }
    }
    (best_wall, best_cpu)
}

/// CPU time of this process: the sum over its threads of Linux's /proc/self/task/*/schedstat (nanoseconds
/// on a CPU); `None` elsewhere.
fn cpu_time() -> Option<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let text = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let budget = Duration::from_secs_f64(secs);
    println!("functional simulator, matmul (exact hybrid dot products), G MAC/s");
    println!("  {:<22} {:>6} {:>8} {:>8} {:>14}", "matrix", "tokens", "threads", "wall", "cpu per thread");
    for (fmt, rows, cols) in
        [(WeightFormat::W4Min, 576, 1536), (WeightFormat::W8, 49152, 576), (WeightFormat::W4Min, 49152, 576)]
    {
        for ntok in [1, 16] {
            // 16 tokens of 49,152 outputs would not fit the scratchpad: a quarter of the rows
            let rows = if ntok > 1 { rows.min(12288) } else { rows };
            for threads in [1, 2] {
                let (wall, cpu) = bench(fmt, rows, cols, ntok, threads, budget);
                let shape = format!("{rows} x {cols} {}", fmt.name());
                println!("  {shape:<22} {ntok:>6} {threads:>8} {wall:>8.2} {cpu:>14.2}");
            }
        }
    }
}

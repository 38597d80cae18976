//! Simulation speed of the Verilator models of `opu_rtlsim::rtl`: each built unit ticks for about a second with
//! fresh random values on every input port each cycle (through the [`RtlModel`] interface, so a unit added
//! to rtlsim/build.rs's list is benchmarked without touching this file).
//!
//! The last column ticks a quarter of that time with the inputs held: the model alone, without the cost of
//! driving its ports.
//!
//! For the PE array (`array`, the `sim` preset) it also prints the MACs per second that simulates: cycles/s
//! times the preset's MACs per cycle in W4 modes.
//!
//! With `--synth` it then runs yosys (`synth_xilinx -family xcup`) on the `sim`-preset array, aligner and router and
//! on one `u280` lane and prints their resources and packing factors (the array takes minutes).
//!
//! With `--vcd DIR` it writes, instead of measuring, a waveform of each unit: `DIR/<unit>.vcd`, the first
//! [`VCD_CYCLES`] cycles of the same random inputs, every signal (open them in GTKWave; see rtlsim/README.md
//! "Waveforms").
//!
//! `cargo run -p opu-rtlsim --release --example rtl_bench [-- [--synth] [--vcd DIR] SECONDS_PER_UNIT [UNIT...]]`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use opu_rtlsim::rtl::{self, RtlModel};

use opu_rtl::testing::Rng;

/// Ticks `m` for about `budget`, with random inputs each cycle if `drive`, else with the inputs left as
/// they are (the model alone, without the cost of driving ports); returns (cycles, wall time).
fn bench(m: &mut dyn RtlModel, budget: Duration, drive: bool) -> (u64, Duration) {
    let inputs: Vec<(usize, usize)> = m
        .ports()
        .iter()
        .enumerate()
        .filter(|(_, p)| drive && p.is_input() && p.name != "clock")
        .map(|(i, p)| (i, p.words()))
        .collect();
    let mut rng = Rng(0x7e57_be4c_0001);
    let mut words = vec![0u32; inputs.iter().map(|i| i.1).max().unwrap_or(0)];
    // The model's state is whatever the first inputs make it: settle, then measure.
    m.eval();
    let start = Instant::now();
    let mut cycles = 0u64;
    loop {
        for _ in 0..1024 {
            for &(port, n) in &inputs {
                for w in &mut words[..n] {
                    *w = rng.next_u64() as u32;
                }
                m.set_port_words(port, &words[..n]);
            }
            m.tick();
        }
        cycles += 1024;
        let t = start.elapsed();
        if t >= budget {
            return (cycles, t);
        }
    }
}

/// Cycles of each `--vcd` trace.
const VCD_CYCLES: u64 = 1000;

/// Writes `dir/<unit>.vcd`: [`VCD_CYCLES`] cycles of `m` with random inputs (those of [`bench`]), every
/// signal. Returns the file, its size and the traced cycles per second.
fn trace(m: &mut dyn RtlModel, dir: &Path) -> std::io::Result<(PathBuf, u64, f64)> {
    let inputs: Vec<(usize, usize)> = m
        .ports()
        .iter()
        .enumerate()
        .filter(|(_, p)| p.is_input() && p.name != "clock")
        .map(|(i, p)| (i, p.words()))
        .collect();
    let mut rng = Rng(0x7e57_be4c_0001);
    let mut words = vec![0u32; inputs.iter().map(|i| i.1).max().unwrap_or(0)];
    let path = dir.join(format!("{}.vcd", m.unit()));
    let start = Instant::now();
    m.trace_vcd(&path, 0)?;
    for _ in 0..VCD_CYCLES {
        for &(port, n) in &inputs {
            for w in &mut words[..n] {
                *w = rng.next_u64() as u32;
            }
            m.set_port_words(port, &words[..n]);
        }
        m.tick();
    }
    m.trace_close()?;
    let t = start.elapsed().as_secs_f64();
    Ok((
        path.clone(),
        std::fs::metadata(&path)?.len(),
        VCD_CYCLES as f64 / t,
    ))
}

fn main() {
    let synth = std::env::args().any(|a| a == "--synth");
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    let vcd = argv.iter().position(|a| a == "--vcd").map(|i| {
        let dir = argv.get(i + 1).cloned().unwrap_or_else(|| {
            eprintln!("--vcd needs a directory");
            std::process::exit(2);
        });
        argv.drain(i..=i + 1);
        PathBuf::from(dir)
    });
    let mut args = argv.into_iter().filter(|a| a != "--synth");
    let secs: f64 = args
        .next()
        .map_or(1.0, |s| s.parse().expect("SECONDS_PER_UNIT"));
    let only: Vec<String> = args.collect();
    if !rtl::available() {
        eprintln!(
            "opu-sim was built without the Verilator models (no verilator on PATH at build time)"
        );
        std::process::exit(1);
    }
    if let Some(dir) = vcd {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("--vcd {}: {e}", dir.display());
            std::process::exit(1);
        }
        println!(
            "{:<16} {:>7} {:>12} {:>16}  file",
            "unit", "cycles", "bytes", "traced cycles/s"
        );
        for &unit in rtl::UNITS {
            if !only.is_empty() && !only.iter().any(|u| u == unit) {
                continue;
            }
            let mut m = rtl::instantiate(unit).expect("a unit of rtl::UNITS");
            match trace(m.as_mut(), &dir) {
                Ok((path, bytes, speed)) => println!(
                    "{unit:<16} {VCD_CYCLES:>7} {bytes:>12} {speed:>16.3e}  {}",
                    path.display()
                ),
                Err(e) => {
                    eprintln!("{unit}: {e}");
                    std::process::exit(1);
                }
            }
        }
        if synth {
            synth_table();
        }
        return;
    }
    println!(
        "{:<16} {:>5} {:>14} {:>8} {:>12} {:>18}",
        "unit", "ports", "cycles", "wall s", "cycles/s", "inputs fixed: c/s"
    );
    for &unit in rtl::UNITS {
        if !only.is_empty() && !only.iter().any(|u| u == unit) {
            continue;
        }
        let mut m = rtl::instantiate(unit).expect("a unit of rtl::UNITS");
        let ports = m.ports().len();
        let (cycles, t) = bench(m.as_mut(), Duration::from_secs_f64(secs), true);
        assert_eq!(m.cycles(), cycles);
        let (fixed, tf) = bench(m.as_mut(), Duration::from_secs_f64(secs / 4.0), false);
        println!(
            "{unit:<16} {ports:>5} {cycles:>14} {:>8.3} {:>12.3e} {:>18.3e}",
            t.as_secs_f64(),
            cycles as f64 / t.as_secs_f64(),
            fixed as f64 / tf.as_secs_f64()
        );
        if unit == "array" {
            let macs = opu_hw::OverlayConfig::sim().macs_per_cycle() as f64;
            println!("{:<16} simulated W4 MACs/s: {:.3e} ({macs} per cycle)", "", macs * cycles as f64 / t.as_secs_f64());
        }
    }
    if synth {
        synth_table();
    }
}

/// yosys figures of the `sim` preset's array and aligner and of one `u280` lane.
fn synth_table() {
    use opu_hw::OverlayConfig;
    println!();
    println!("yosys synth_xilinx -family xcup (FF and LUT are upper bounds: yosys keeps registers out of DSP48E2)");
    println!(
        "{:<8} {:<6} {:>8} {:>8} {:>8} {:>6} {:>6} {:>7}  {:<24} {:>8}",
        "config", "unit", "LUT", "FF", "DSP48E2", "BRAM", "URAM", "CARRY", "packing w4/w4_min/w8/fp16", "yosys s"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v}"));
    for (cfg, unit) in [(OverlayConfig::u280(), "lane"), (OverlayConfig::sim(), "align"), (OverlayConfig::sim(), "router"), (OverlayConfig::sim(), "array")] {
        let dir = std::env::temp_dir().join(format!("opu-rtl-bench-{}-{}-{unit}", std::process::id(), cfg.name));
        let t = Instant::now();
        match opu_rtl::synth::synthesize_for(unit, &cfg, &dir) {
            Ok(r) => {
                let p = &r.packing_factor;
                println!(
                    "{:<8} {:<6} {:>8} {:>8} {:>8} {:>6} {:>6} {:>7}  {:<24} {:>8.1}",
                    cfg.name,
                    unit,
                    r.lut,
                    r.ff,
                    r.dsp48e2,
                    r.bram,
                    r.uram,
                    r.carry,
                    format!("{}/{}/{}/{}", f(p.w4), f(p.w4_min), f(p.w8), f(p.fp16)),
                    t.elapsed().as_secs_f64()
                );
            }
            Err(e) => println!("{:<8} {unit:<6} failed: {e}", cfg.name),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The overlay's figures per decoded token on a Llama-7B-shaped model (hidden 4,096, FFN 11,008, 32 heads of
//! 128, vocabulary 32,000; Q4_1 matrices and a Q8_0 embedding tied to the output, seeded random weights), on
//! the functional simulator's cycle model: cycles per token, bandwidth efficiency, the busy share of each unit,
//! the projected tokens/s at the config's clock and the cycles per instruction kind. SmolLM2-135M is too small to keep a U280's 32 memory
//! channels busy (docs/rtl.md); this is the size of model the `u280` preset is for. Only `layers` of the 32
//! layers are built (the figures are per token of that model: its output head weighs more than in the full
//! one, whose 32 layers carry 96% of the bytes).
//!
//! `cargo run --release -p opu-host --example shape_bench [-- LAYERS [CONFIG,...]]` (default: 2 layers, `u280`;
//! the `sim` preset's weight buffer holds rows of at most 1,984 bytes, too short for these)

use std::time::Instant;

use opu_compiler::gguf::Gguf;
use opu_compiler::lower::CompileOptions;
use opu_compiler::testing::TinyLlama;
use opu_host::backend::Backend;
use opu_host::sim_backend::SimBackend;
use opu_hw::OverlayConfig;

fn main() -> anyhow::Result<()> {
    let layers: usize = std::env::args().nth(1).map_or(Ok(2), |s| s.parse())?;
    let configs = std::env::args().nth(2).unwrap_or_else(|| "u280".into());
    let shape = TinyLlama { n_layer: layers, n_embd: 4096, n_head: 32, n_head_kv: 32, n_ff: 11008, vocab: 32000, context: 256, seed: 7, ..Default::default() };
    let t = Instant::now();
    let path = std::env::temp_dir().join(format!("opu-llama7b-shape-{layers}.gguf"));
    std::fs::write(&path, shape.gguf())?;
    let g = Gguf::open(&path)?;
    eprintln!("{}: {layers} layers of Llama-7B's shape, written in {:.1} s", path.display(), t.elapsed().as_secs_f64());
    println!(
        "{:<8} {:>6} {:>12} {:>10} {:>10} {:>12}  busy dma/matrix/vector/attention",
        "config", "layers", "cycles/tok", "MB/token", "bandwidth", "proj. tok/s"
    );
    for name in configs.split(',') {
        let config = OverlayConfig::from_name_or_path(name)?;
        let mut b = SimBackend::open(&g, &config, &CompileOptions { max_context: Some(64), ..CompileOptions::default() }, opu_host::runtime::compute_threads())?;
        // a prompt of 4 tokens, then 4 one-token decode steps: the figures are those of the decode steps
        let prompt: Vec<u32> = (1..=4).collect();
        b.forward(&prompt, false)?;
        for id in 5..9 {
            b.forward(&[id], false)?;
        }
        let s = b.stats().expect("the functional simulator counts");
        let f = &s["figures"];
        let u = &f["unit_utilization"];
        let share = |k: &str| u[k].as_f64().unwrap_or(0.0);
        println!(
            "{:<8} {:>6} {:>12.0} {:>10.1} {:>10.3} {:>12.1}  {:.3}/{:.3}/{:.3}/{:.3}",
            name,
            layers,
            f["cycles_per_token"].as_f64().unwrap_or(0.0),
            f["bytes_per_token"].as_f64().unwrap_or(0.0) / 1e6,
            f["bandwidth_efficiency"].as_f64().unwrap_or(0.0),
            f["projected_tokens_per_second"].as_f64().unwrap_or(0.0),
            share("dma"),
            share("matrix"),
            share("vector"),
            share("attention"),
        );
        // where the cycles go, by instruction (the model's split)
        if let Some(split) = f["cycles_by_instruction"].as_object() {
            let total = f["cycles_per_token"].as_f64().unwrap_or(1.0).max(1.0);
            let mut split: Vec<(&String, f64)> = split.iter().map(|(m, c)| (m, c.as_f64().unwrap_or(0.0))).collect();
            split.sort_by(|a, b| b.1.total_cmp(&a.1));
            let parts: Vec<String> = split.iter().map(|(m, c)| format!("{m} {c:.0} ({:.1}%)", 100.0 * c / total)).collect();
            println!("  by instruction: {}", parts.join(", "));
        }
    }
    println!("(cycle model of the RTL's schedule; bandwidth: bytes moved per cycle over the config's peak; decode at positions 4-7)");
    std::fs::remove_file(&path).ok();
    Ok(())
}

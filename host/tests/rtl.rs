//! The `rtl` backend: the compiled program on the RTL of the overlay under Verilator, against the functional
//! simulator (the golden model) running the same program: bit for bit, logits and device memory.

mod common;

use common::models_or_skip;
use opu_compiler::gguf::parse_bytes;
use opu_compiler::testing::TinyLlama;
use opu_compiler::{CompileOptions, KvLayout};
use opu_host::backend::Backend;
use opu_host::sim_backend::SimBackend;
use opu_hw::isa::Instr;
use opu_hw::numerics::WeightFormat;
use opu_hw::OverlayConfig;


/// Every byte of every region of the program (weights, KV cache, activations, logits, code) on both devices.
fn assert_memory_equal(rtl: &mut SimBackend, sim: &mut SimBackend, when: &str) {
    let regions = sim.regions().to_vec();
    assert!(!regions.is_empty());
    for r in &regions {
        let (mut a, mut b) = (vec![0u8; r.bytes as usize], vec![0u8; r.bytes as usize]);
        rtl.device().mem_read(r.addr, &mut a).unwrap();
        sim.device().mem_read(r.addr, &mut b).unwrap();
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!("{when}: region `{}` ({}) byte {i:#x}: RTL {:#04x}, functional {:#04x}", r.name, r.kind, a[i], b[i]);
        }
    }
}

fn bits(v: &[Vec<f32>]) -> Vec<u32> {
    v.iter().flatten().map(|x| x.to_bits()).collect()
}

/// One-token passes of `tokens` on both devices with equal logits, then all of device memory and every counter
/// of the two equal; returns both stats.
fn decode_equal(rtl: &mut SimBackend, sim: &mut SimBackend, tokens: &[u32]) -> (serde_json::Value, serde_json::Value) {
    for &t in tokens {
        let (x, y) = (rtl.forward(&[t], false).unwrap(), sim.forward(&[t], false).unwrap());
        assert_eq!(bits(&x), bits(&y), "decode of token {t} at position {}", sim.position() - 1);
    }
    assert_memory_equal(rtl, sim, "after the decode steps");
    let (rs, ss) = (rtl.stats().unwrap(), sim.stats().unwrap());
    for k in ["instructions", "macs", "bytes_read", "bytes_written", "passes", "kv_history_hits", "kv_history_misses", "skipped_blocks"] {
        assert_eq!(rs[k], ss[k], "{k}");
    }
    (rs, ss)
}

/// SmolLM2-135M from the model cache (CI fetches it first), with one compute thread.
fn smollm2() -> opu_compiler::gguf::Gguf {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    opu_compiler::gguf::Gguf::open(common::smollm2()).unwrap()
}

#[test]
fn tiny_transformer_on_the_rtl_equals_the_functional_simulator() {
    if !models_or_skip("tiny transformer on the RTL") {
        return;
    }
    // 2 layers, hidden 64, 4 query heads on 2 KV heads, Q4_1 matrices, a Q8_0 embedding tied to the output
    let g = parse_bytes(&TinyLlama::default().gguf(), "tiny.gguf").unwrap();
    let config = OverlayConfig::sim();
    let mut rtl = SimBackend::open_rtl(&g, &config, &CompileOptions::default()).unwrap();
    let mut sim = SimBackend::open(&g, &config, &CompileOptions::default(), 1).unwrap();
    assert!(rtl.name().starts_with("rtl"), "{}", rtl.name());
    // prefill: a batch of 16 through `prefill`, two more through `decode`; then three decode steps
    let prompt: Vec<u32> = (0..18).map(|i| (i * 29 + 3) % 96).collect();
    let (a, b) = (rtl.forward(&prompt, true).unwrap(), sim.forward(&prompt, true).unwrap());
    assert_eq!(a.len(), 18);
    assert_eq!(bits(&a), bits(&b), "prefill logits");
    assert_memory_equal(&mut rtl, &mut sim, "after the prefill");
    // the RTL counts what the functional simulator counts, and real cycles
    let (rs, ss) = decode_equal(&mut rtl, &mut sim, &[5, 77, 42]);
    let cycles = rs["cycles"].as_u64().unwrap();
    eprintln!("tiny transformer, 21 tokens in 6 passes: {cycles} RTL cycles (functional estimate {})", ss["cycles_estimate"]);
    assert!(cycles > 1000, "{cycles} cycles");
    // every present position of every layer's attention read its K/V from memory: 2 layers x 4 decode passes
    // (positions 16..=20, one pass each) over 17..=21 positions, x 2 KV heads, plus the prefill's
    assert!(rs["kv_history_misses"].as_u64().unwrap() > 2 * 2 * (17 + 18 + 19 + 20 + 21), "{}", rs["kv_history_misses"]);
    // the figures: the RTL's per decoded token (the 5 one-token passes), from its counters
    let f = &rs["figures"];
    assert_eq!(f["cycles_are_estimates"], false);
    let per_token = f["cycles_per_token"].as_f64().unwrap();
    assert!(per_token > 1000.0 && per_token < cycles as f64, "{per_token}");
    let bpc = f["bytes_per_cycle"].as_f64().unwrap();
    assert!((f["bandwidth_efficiency"].as_f64().unwrap() - bpc / config.peak_bytes_per_cycle()).abs() < 1e-12);
    assert!((f["projected_tokens_per_second"].as_f64().unwrap() - 225e6 / per_token).abs() < 1e-6);
    // one unit works at a time (docs/rtl.md) but for the matrix unit's early loads beside the vector and
    // attention units, so the other shares add up to at most 1; each unit of a transformer has work
    let u = f["unit_utilization"].as_object().unwrap();
    let shares: Vec<f64> = ["dma", "matrix", "vector", "attention"].iter().map(|k| u[*k].as_f64().unwrap()).collect();
    assert!(shares.iter().all(|&x| x > 0.0 && x <= 1.0) && shares.iter().sum::<f64>() - shares[1] <= 1.0, "{u:?}");
    eprintln!("per decoded token: {per_token:.0} cycles, {bpc:.2} bytes/cycle, busy {u:?}");
}

/// The tiny transformer on the top of `sim-wide` (the `sim` overlay behind 4 memory channels: the weight port
/// takes two beats a cycle): prefill and decode steps bit for bit with the functional simulator, all of device
/// memory, the counters, and the cycle model within 5% of the RTL's cycles per decoded token.
#[test]
fn tiny_transformer_on_the_wide_weight_port_equals_the_functional_simulator() {
    if !models_or_skip("tiny transformer on the RTL at sim-wide") {
        return;
    }
    let g = parse_bytes(&TinyLlama::default().gguf(), "tiny.gguf").unwrap();
    let config = OverlayConfig::sim_wide();
    let prompt: Vec<u32> = (0..18).map(|i| (i * 31 + 7) % 96).collect();
    prefill_and_decode_equal(&g, &config, &prompt, &[9, 61, 30], "tiny transformer at sim-wide");
}

/// Prefill of `prompt` and decode steps of `tokens` on the RTL and on the functional simulator of `config`:
/// the logits bit for bit, all of device memory after the prefill, the counters and memory after each step
/// (`decode_equal`), and the cycle model within 5% of the RTL's cycles per decoded token.
fn prefill_and_decode_equal(g: &opu_compiler::gguf::Gguf, config: &OverlayConfig, prompt: &[u32], tokens: &[u32], what: &str) {
    let mut rtl = SimBackend::open_rtl(g, config, &CompileOptions::default()).unwrap();
    let mut sim = SimBackend::open(g, config, &CompileOptions::default(), 1).unwrap();
    let (a, b) = (rtl.forward(prompt, true).unwrap(), sim.forward(prompt, true).unwrap());
    assert_eq!(bits(&a), bits(&b), "{what}: prefill logits");
    assert_memory_equal(&mut rtl, &mut sim, "after the prefill");
    let (rs, ss) = decode_equal(&mut rtl, &mut sim, tokens);
    let (cr, cs) = (rs["figures"]["cycles_per_token"].as_f64().unwrap(), ss["figures"]["cycles_per_token"].as_f64().unwrap());
    eprintln!("{what}: RTL {cr:.0} cycles per decoded token, functional model {cs:.0} ({:+.2}%)", 100.0 * (cs / cr - 1.0));
    assert!((cs / cr - 1.0).abs() < 0.05, "{what}: functional model {cs} vs RTL {cr} cycles per token");
}

/// The tiny transformer with F16 matrices (a GGUF in F16: every layer's `matmul` is `fmt=f16`, on the matrix
/// unit's router datapath): prefill and decode steps bit for bit with the functional simulator, all of device
/// memory, and the cycle model within 5% of the RTL's cycles per decoded token.
#[test]
fn tiny_transformer_with_f16_matrices_on_the_rtl_equals_the_functional_simulator() {
    if !models_or_skip("tiny transformer with F16 matrices on the RTL") {
        return;
    }
    let g = parse_bytes(&TinyLlama { matrices: WeightFormat::F16, ..Default::default() }.gguf(), "tiny-f16.gguf").unwrap();
    let config = OverlayConfig::sim();
    let c = opu_compiler::compile(&g, &config, &CompileOptions::default()).unwrap();
    let decode = c.container.code("decode").unwrap().unwrap();
    let f16_matmuls = decode.iter().filter(|i| matches!(i, Instr::Matmul { fmt: WeightFormat::F16, .. })).count();
    assert!(f16_matmuls >= 2 * 4, "{f16_matmuls} F16 matmuls");
    let prompt: Vec<u32> = (0..18).map(|i| (i * 37 + 5) % 96).collect();
    prefill_and_decode_equal(&g, &config, &prompt, &[11, 50, 83], "tiny transformer with F16 matrices");
}

/// The tiny transformer (4 layers, so that a layer reads through the history K/V that a skip two layers
/// down left) with random routers on both blocks of layers 1..: prefill, then decode steps that skip about half
/// of the blocks, on the RTL and on the functional simulator: logits, device memory (presence bytes, K/V) and
/// the skip and history counters equal.
#[test]
fn tiny_transformer_with_skipped_blocks_on_the_rtl_equals_the_functional_simulator() {
    if !models_or_skip("tiny transformer with skipped blocks on the RTL") {
        return;
    }
    use opu_compiler::routers::Block;
    let m = TinyLlama { n_layer: 4, ..Default::default() };
    let g = parse_bytes(&m.gguf(), "tiny4.gguf").unwrap();
    let routers = opu_compiler::testing::random_routers(m.n_layer, m.n_embd, 3, &[Block::Attention, Block::Ffn]);
    let config = OverlayConfig::sim();
    // the dense KV layout, and the indexed one (the runtime's rows through `kv_index`)
    for kv_layout in [KvLayout::Dense, KvLayout::Indexed { pool_rows: None }] {
        let opts = CompileOptions { routers: Some(routers.clone()), kv_layout, ..Default::default() };
        let mut rtl = SimBackend::open_rtl(&g, &config, &opts).unwrap();
        let mut sim = SimBackend::open(&g, &config, &opts, 1).unwrap();
        let prompt: Vec<u32> = (0..17).map(|i| (i * 31 + 7) % 96).collect();
        assert_eq!(bits(&rtl.forward(&prompt, true).unwrap()), bits(&sim.forward(&prompt, true).unwrap()), "prefill logits");
        let (rs, ss) = decode_equal(&mut rtl, &mut sim, &[5, 77, 42, 9, 63, 20]);
        // 7 one-token passes x 6 routed blocks: some skipped, some not; absent positions served by the history
        let (skipped, hits) = (rs["skipped_blocks"].as_u64().unwrap(), rs["kv_history_hits"].as_u64().unwrap());
        eprintln!(
            "tiny transformer with routers, {} KV layout: {skipped} of 42 blocks skipped, {hits} history hits, {} RTL cycles (cycle model {}), KV saved {}",
            kv_layout.name(),
            rs["cycles"],
            ss["cycles_estimate"],
            rs["kv"]["saved_bytes"]
        );
        assert!((8..=34).contains(&skipped) && hits > 0, "{skipped} skipped, {hits} hits");
        assert_eq!(rs["kv"], ss["kv"]);
        assert_eq!(rs["kv"]["saved_bytes"].as_u64().unwrap() > 0, kv_layout != KvLayout::Dense, "{}", rs["kv"]);
    }
}

/// SmolLM2-135M (the real model, from the model cache; CI fetches it first) for three decode steps on the
/// RTL and on the functional simulator: the logits bit for bit at every step (the first is the first
/// generated token of a one-token prompt), all of device memory after them, the RTL's bandwidth efficiency,
/// and the functional simulator's cycle model against the RTL's count. About 2 minutes of Verilator per step.
#[test]
fn smollm2_decode_on_the_rtl_equals_the_functional_simulator() {
    if !models_or_skip("SmolLM2 on the RTL") {
        return;
    }
    let g = smollm2();
    let config = OverlayConfig::sim();
    let opts = CompileOptions { max_context: Some(64), ..Default::default() };
    let mut rtl = SimBackend::open_rtl(&g, &config, &opts).unwrap();
    let mut sim = SimBackend::open(&g, &config, &opts, 1).unwrap();
    // "Hi", then the greedy tokens
    let mut token = 26843u32;
    let mut generated = Vec::new();
    for step in 0..3 {
        let (a, b) = (rtl.forward(&[token], false).unwrap(), sim.forward(&[token], false).unwrap());
        assert_eq!(a[0].len(), 49152);
        assert_eq!(bits(&a), bits(&b), "logits of step {step} (position {step})");
        token = b[0].iter().enumerate().fold((0, f32::NEG_INFINITY), |m, (i, &x)| if x > m.1 { (i, x) } else { m }).0 as u32;
        generated.push(token);
    }
    assert_memory_equal(&mut rtl, &mut sim, "after three decode steps");
    let (rs, ss) = (rtl.stats().unwrap(), sim.stats().unwrap());
    for k in ["instructions", "macs", "bytes_read", "bytes_written", "kv_history_hits", "kv_history_misses"] {
        assert_eq!(rs[k], ss[k], "{k}");
    }
    let (fr, fs) = (&rs["figures"], &ss["figures"]);
    let (cr, cs) = (fr["cycles_per_token"].as_f64().unwrap(), fs["cycles_per_token"].as_f64().unwrap());
    let eff = fr["bandwidth_efficiency"].as_f64().unwrap();
    eprintln!(
        "SmolLM2, 3 decode steps (positions 0..=2, tokens {generated:?}): RTL {cr:.0} cycles/token, bandwidth efficiency \
         {eff:.3}, busy {}; functional model {cs:.0} ({:+.2}%)",
        fr["unit_utilization"],
        100.0 * (cs / cr - 1.0)
    );
    // decode streams every weight once per token: memory-bound on the RTL's counters
    assert!(eff >= 0.85, "bandwidth efficiency {eff}");
    // the functional simulator's cycle figure is a model of this RTL
    assert!((cs / cr - 1.0).abs() < 0.05, "functional model {cs} vs RTL {cr} cycles per token");
}

/// SmolLM2's first generated token with skipping on (random routers on both blocks of layers 1.., the
/// indexed KV layout): at position 0 every skipped attention serves the token's K/V from the history. The
/// logits bit for bit, all of device memory, the skip and history counters, on the RTL and on the functional
/// simulator. About a minute and a half of Verilator.
#[test]
fn smollm2_first_token_with_skipping_on_the_rtl_equals_the_functional_simulator() {
    if !models_or_skip("SmolLM2 with skipping on the RTL") {
        return;
    }
    use opu_compiler::routers::Block;
    let g = smollm2();
    let routers = opu_compiler::testing::random_routers(30, 576, 11, &[Block::Attention, Block::Ffn]);
    let opts = CompileOptions { max_context: Some(64), routers: Some(routers), kv_layout: KvLayout::Indexed { pool_rows: None }, ..Default::default() };
    let config = OverlayConfig::sim();
    let mut rtl = SimBackend::open_rtl(&g, &config, &opts).unwrap();
    let mut sim = SimBackend::open(&g, &config, &opts, 1).unwrap();
    let (rs, ss) = decode_equal(&mut rtl, &mut sim, &[26843]);
    let (skipped, hits) = (rs["skipped_blocks"].as_u64().unwrap(), rs["kv_history_hits"].as_u64().unwrap());
    eprintln!(
        "SmolLM2 first token with random routers: {skipped} of 58 blocks skipped, {hits} history hits, {} RTL cycles (cycle model {}), KV saved {} bytes",
        rs["cycles"], ss["cycles_estimate"], rs["kv"]["saved_bytes"]
    );
    // both decisions occur, and every skipped attention's position 0 came from the history (3 KV heads)
    assert!((10..=48).contains(&skipped), "{skipped} of 58 skipped");
    let skipped_attn = rs["skip"]["attention_skip_rate"].as_f64().unwrap() * 29.0;
    assert_eq!(hits as f64, 3.0 * skipped_attn.round(), "history hits against skipped attention blocks");
    assert_eq!(rs["kv"]["saved_bytes"].as_u64().unwrap(), skipped_attn.round() as u64 * 3 * 64 * 4);
}

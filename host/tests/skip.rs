//! Per-token skipping (docs/skipping.md) on the functional simulator: routers that never skip give the dense
//! program's bits; routers that skip follow the f32 interpreter run with the same decisions (an independent
//! implementation of the cross-layer KV semantics), and the history buffer serves exactly the absent reads.

use opu_compiler::gguf::{parse_bytes, Gguf};
use opu_compiler::interp::Interpreter;
use opu_compiler::routers::{Block, Router, Routers};
use opu_compiler::testing::{random_routers, TinyLlama};
use opu_compiler::{CompileOptions, KvLayout};
use opu_host::backend::Backend;
use opu_host::sim_backend::SimBackend;
use opu_hw::OverlayConfig;

/// 4 layers: a skip at layer l with layer l+1 reading that token through the history needs three or more.
fn tiny4() -> (TinyLlama, Gguf) {
    let m = TinyLlama { n_layer: 4, ..Default::default() };
    let g = parse_bytes(&m.gguf(), "tiny4.gguf").unwrap();
    (m, g)
}

fn bits(v: &[Vec<f32>]) -> Vec<u32> {
    v.iter().flatten().map(|x| x.to_bits()).collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn with_routers(routers: Routers) -> CompileOptions {
    CompileOptions { routers: Some(routers), ..Default::default() }
}

#[test]
fn routers_that_never_skip_give_the_dense_program_bit_for_bit() {
    let (m, g) = tiny4();
    let mut never = Routers::none(m.n_layer, m.n_embd);
    for l in 1..m.n_layer {
        never.layers[l] = [Some(Router::constant(m.n_embd, false)), Some(Router::constant(m.n_embd, false))];
    }
    let config = OverlayConfig::sim();
    let mut dense = SimBackend::open(&g, &config, &CompileOptions::default(), 1).unwrap();
    let mut routed = SimBackend::open(&g, &config, &with_routers(never), 1).unwrap();
    assert!(dense.meta().skipping.is_none() && routed.meta().skipping.is_some());
    // a prefill batch of 16 and 2 one-token passes, then 3 decode steps
    let prompt: Vec<u32> = (0..18).map(|i| (i * 29 + 3) % 96).collect();
    assert_eq!(bits(&dense.forward(&prompt, true).unwrap()), bits(&routed.forward(&prompt, true).unwrap()));
    for t in [5u32, 77, 42] {
        assert_eq!(bits(&dense.forward(&[t], false).unwrap()), bits(&routed.forward(&[t], false).unwrap()), "token {t}");
    }
    let (d, r) = (dense.stats().unwrap(), routed.stats().unwrap());
    assert_eq!((r["skipped_blocks"].as_u64(), r["kv_history_hits"].as_u64()), (Some(0), Some(0)));
    // the routed program also reads its routers: 6 per one-token pass, (64 x 2 x 2 + 4) bytes each
    let extra = r["bytes_read"].as_u64().unwrap() - d["bytes_read"].as_u64().unwrap();
    assert!(extra >= 5 * 6 * 260, "{extra}");
}

#[test]
fn skipping_on_the_sim_follows_the_f32_interpreter_with_the_same_decisions() {
    follow_the_interpreter(&[1, 2, 3]);
}

#[test]
fn a_layer_without_an_attention_router_between_routed_ones_reads_every_position() {
    // layer 2 must not see layer 1's presence bytes (the CSR is set per layer)
    follow_the_interpreter(&[1, 3]);
}

/// Attention routed at `attn_layers` by random routers (their decisions are the presence bytes), the FFN of
/// layer 2 always skipped and of layer 3 never (constant decisions): the sim (dense and indexed KV layouts,
/// bit for bit the same logits) against the interpreter with the decisions the overlay took.
fn follow_the_interpreter(attn_layers: &[usize]) {
    let (m, g) = tiny4();
    let mut routers = random_routers(m.n_layer, m.n_embd, 7, &[Block::Attention]);
    for l in 1..m.n_layer {
        if !attn_layers.contains(&l) {
            routers.layers[l][Block::Attention as usize] = None;
        }
    }
    routers.layers[2][Block::Ffn as usize] = Some(Router::constant(m.n_embd, true));
    routers.layers[3][Block::Ffn as usize] = Some(Router::constant(m.n_embd, false));
    let config = OverlayConfig::sim();
    // the same routed blocks, every decision execute: what the skipped blocks would have moved
    let mut never = Routers::none(m.n_layer, m.n_embd);
    for l in 1..m.n_layer {
        for b in Block::ALL {
            if routers.get(l, b).is_some() {
                never.layers[l][b as usize] = Some(Router::constant(m.n_embd, false));
            }
        }
    }
    let mut sim_never = SimBackend::open(&g, &config, &with_routers(never), 1).unwrap();
    let mut sim = SimBackend::open(&g, &config, &with_routers(routers.clone()), 1).unwrap();
    let indexed = CompileOptions { kv_layout: KvLayout::Indexed { pool_rows: None }, ..with_routers(routers) };
    let mut sim_indexed = SimBackend::open(&g, &config, &indexed, 1).unwrap();
    let presence = sim.meta().skipping.clone().unwrap().presence_addr;
    assert_eq!(presence.iter().map(Option::is_some).collect::<Vec<_>>(), (0..m.n_layer).map(|l| attn_layers.contains(&l)).collect::<Vec<_>>());
    let mut interp = Interpreter::new(&g).unwrap();
    let mut dense = interp.clone();

    // the prompt executes every block (prefill) in both
    let prompt: Vec<u32> = (0..16).map(|i| (i * 37 + 5) % 96).collect();
    let a = sim.forward(&prompt, true).unwrap();
    sim_never.forward(&prompt, true).unwrap();
    assert_eq!(bits(&a), bits(&sim_indexed.forward(&prompt, true).unwrap()), "prefill, indexed KV layout");
    interp.forward(&prompt).unwrap();
    dense.forward(&prompt).unwrap();
    let (mut worst, mut worst_dense, mut scale) = (0f32, 0f32, 1f32);
    let mut skipped_attn = vec![0usize; m.n_layer];
    let mut expected_hits = 0u64;
    let mut tokens = vec![11u32];
    for step in 0..24 {
        let pos = sim.position();
        let token = tokens[step];
        let logits = sim.forward(&[token], false).unwrap().remove(0);
        let logits_indexed = sim_indexed.forward(&[token], false).unwrap().remove(0);
        sim_never.forward(&[token], false).unwrap();
        assert_eq!(bits(&[logits.clone()]), bits(&[logits_indexed]), "step {step}: the indexed KV layout");
        // the decisions the overlay took at this position, from its presence bytes
        let mut skips = vec![[false, false]; m.n_layer];
        for (l, at) in presence.iter().enumerate() {
            if let Some(at) = at {
                let mut bytes = vec![0u8; pos + 1];
                sim.device().mem_read(*at, &mut bytes).unwrap();
                assert!(bytes[..pos].iter().all(|&b| b <= 1), "presence bytes of layer {l}: {bytes:?}");
                skips[l][0] = bytes[pos] == 0;
                skipped_attn[l] += usize::from(skips[l][0]);
                // attn at this layer reads positions 0..=pos, each absent one from the history, per KV head
                expected_hits += m.n_head_kv as u64 * bytes.iter().filter(|&&b| b == 0).count() as u64;
            }
        }
        skips[2][1] = true;
        let want = interp.forward_skipping(&[token], &skips).unwrap().logits.remove(0);
        let plain = dense.forward(&[token]).unwrap().logits.remove(0);
        scale = scale.max(want.iter().fold(0.0f32, |a, v| a.max(v.abs())));
        worst = worst.max(max_abs_diff(&logits, &want));
        worst_dense = worst_dense.max(max_abs_diff(&plain, &want));
        // teacher forcing by the interpreter's greedy token
        tokens.push(want.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32);
    }
    eprintln!("skipped attention per layer {skipped_attn:?} of 24; max |sim - interp| {worst} (logit scale {scale}), dense vs skipping {worst_dense}");
    // random routers skip some attention blocks and execute others at every routed layer
    assert!(attn_layers.iter().all(|&l| (1..=23).contains(&skipped_attn[l])), "{skipped_attn:?}");
    // the overlay computes what the interpreter computes with the same decisions (as close as dense is) ...
    assert!(worst <= 0.02 * scale, "max |d| {worst} (logit scale {scale})");
    // ... and that is not the dense model: the test sees the skips
    assert!(worst_dense > 5.0 * worst, "dense {worst_dense} vs skipping {worst}");
    let stats = sim.stats().unwrap();
    // every skipped attention and every layer-2 FFN of the 24 decode passes
    let skipped_attn_total: usize = skipped_attn.iter().sum();
    let skipped = skipped_attn_total + 24;
    assert_eq!(stats["skipped_blocks"].as_u64().unwrap(), skipped as u64);
    assert_eq!(stats["kv_history_hits"].as_u64().unwrap(), expected_hits);
    // the backend's skip figures: 24 passes x both blocks of layers 1..=3 (routed or not, as --skip counts)
    let f = &stats["skip"];
    let decisions = 24 * 2 * (m.n_layer - 1);
    assert_eq!((f["decisions"].as_u64(), f["skipped_blocks"].as_u64()), (Some(decisions as u64), Some(skipped as u64)));
    assert_eq!(f["realised_skip_rate"].as_f64().unwrap(), skipped as f64 / decisions as f64);
    assert_eq!(f["attention_skip_rate"].as_f64().unwrap(), skipped_attn_total as f64 / (24 * (m.n_layer - 1)) as f64);
    // layer 2's FFN always skipped, layer 3's never, layer 1's has no router
    assert_eq!(f["ffn_skip_rate"].as_f64().unwrap(), 1.0 / 3.0);
    assert_eq!((f["routed_attention_blocks"].as_u64(), f["routed_ffn_blocks"].as_u64()), (Some(attn_layers.len() as u64), Some(2)));
    let per_layer: Vec<Option<f64>> = f["attention_skip_rate_per_layer"].as_array().unwrap().iter().map(|v| v.as_f64()).collect();
    let want: Vec<Option<f64>> = skipped_attn.iter().enumerate().map(|(l, &n)| attn_layers.contains(&l).then(|| n as f64 / 24.0)).collect();
    assert_eq!(per_layer, want);
    // the FFN decision bytes: layer 2's FFN always skipped, layer 3's never, layer 1's has no router
    let per_layer: Vec<Option<f64>> = f["ffn_skip_rate_per_layer"].as_array().unwrap().iter().map(|v| v.as_f64()).collect();
    assert_eq!(per_layer, [None, None, Some(1.0), Some(0.0)]);
    // the bytes saved per decoded token are exactly what the same program with every block executed moves
    // more (its skipped instructions, and the K/V reads the history hits served), on the same tokens
    let all = sim_never.stats().unwrap();
    assert_eq!(all["skip"]["skipped_blocks"].as_u64(), Some(0));
    let moved = |s: &serde_json::Value| s["skip"]["bytes_per_token"].as_f64().unwrap();
    assert!(f["bytes_per_token_saved"].as_f64().unwrap() > 0.0);
    assert_eq!(f["bytes_per_token_all_executed"].as_f64().unwrap(), moved(&all), "saved {}", f["bytes_per_token_saved"]);
    assert_eq!(moved(&stats) + f["bytes_per_token_saved"].as_f64().unwrap(), moved(&all));

    // KV storage: the dense layout holds a row per layer and position; the indexed one only the rows of
    // the attention blocks that executed, so it saves exactly the skipped attention decisions
    let (positions, row_bytes) = (16 + 24u64, (m.n_head_kv * (m.n_embd / m.n_head) * 4) as u64);
    let dense_bytes = m.n_layer as u64 * positions * row_bytes;
    assert_eq!((stats["kv"]["layout"].as_str(), stats["kv"]["saved_bytes"].as_u64()), (Some("dense"), Some(0)));
    assert_eq!(stats["kv"]["bytes_in_use"].as_u64(), Some(dense_bytes));
    let si = sim_indexed.stats().unwrap();
    assert_eq!(si["kv"]["layout"].as_str(), Some("indexed"));
    assert_eq!(si["kv"]["bytes_dense"].as_u64(), Some(dense_bytes));
    assert_eq!(si["kv"]["saved_bytes"].as_u64(), Some(skipped_attn_total as u64 * row_bytes));
    assert_eq!(si["skip"]["kv_saved_fraction"].as_f64().unwrap(), skipped_attn_total as f64 / (m.n_layer as u64 * positions) as f64);
    assert_eq!(si["kv_history_hits"], stats["kv_history_hits"]);
    // the same K/V writes; reads differ only by the index entries (4 bytes per position read)
    assert_eq!(si["bytes_written"], stats["bytes_written"]);
}

#[test]
fn routers_are_refused_where_the_history_cannot_serve_the_context() {
    let (m, g) = tiny4();
    let routers = random_routers(m.n_layer, m.n_embd, 1, &[Block::Attention]);
    let mut config = OverlayConfig::sim();
    config.kv_history_slots = 32;
    // by default the context is capped at the slots; asking for more is refused
    assert_eq!(opu_compiler::compile(&g, &config, &with_routers(routers.clone())).unwrap().meta.max_context, 32);
    let opts = CompileOptions { max_context: Some(64), routers: Some(routers.clone()), ..Default::default() };
    let e = opu_compiler::compile(&g, &config, &opts).err().unwrap().to_string();
    assert!(e.contains("history buffer of 32 slots") && e.contains("--max-context <= 32 (asked 64)"), "{e}");
    // routers of another model
    let other = Routers::none(3, m.n_embd);
    let mut bad = other.clone();
    bad.layers[1][0] = routers.layers[1][0].clone();
    let e = opu_compiler::compile(&g, &OverlayConfig::sim(), &with_routers(bad)).err().unwrap().to_string();
    assert!(e.contains("routers for 3 layers of hidden 64, the model has 4 layers"), "{e}");
}

/// Random token sequences of `len` from the tiny model's 96-token vocabulary.
fn sequences(count: usize, len: usize, seed: u32) -> Vec<Vec<u32>> {
    (0..count).map(|s| (0..len as u32).map(|i| (i * 37 + (s as u32 + seed) * 11 + (i * i) % 13) % 96).collect()).collect()
}

#[test]
fn calibration_hits_its_target_rate_and_a_zero_rate_routes_nothing() {
    use opu_compiler::calibrate::{calibrate, measure_skipping, CalibrateOptions, Importance};
    let (m, g) = tiny4();
    let mut interp = Interpreter::new(&g).unwrap();
    let fit = sequences(6, 40, 0);
    let cases = [(0.25, [true, true], false), (0.4, [true, true], false), (0.25, [false, true], false), (0.3, [true, true], true)];
    for ((rate, blocks, per_block), importance) in cases.into_iter().flat_map(|c| [(c, Importance::OutputKl), (c, Importance::RelativeUpdate)]) {
        // (one threshold per block splits each block's tokens by the fit's variation within the block, which a
        // strong ridge shrinks to almost nothing: these use a light one)
        let ridge = if per_block { 1.0 } else { CalibrateOptions::default().ridge };
        let opts = CalibrateOptions { rate, blocks, per_block, importance, ridge, ..Default::default() };
        let cal = calibrate(&mut interp, &fit, &opts).unwrap();
        // the measured positions: after the dense prompt (output KL), after the first 4 (relative update)
        let first = if importance == Importance::OutputKl { opts.prompt } else { opts.skip_first };
        assert_eq!(cal.tokens, 6 * (40 - first));
        // the routers' own FP16 decisions on the calibration tokens, against the target
        assert!((cal.calibration_rate - rate).abs() < 0.03, "rate {rate} {blocks:?} {importance:?}: {}", cal.calibration_rate);
        let mean: f64 = cal.blocks.iter().map(|b| b.skip_rate).sum::<f64>() / cal.blocks.len() as f64;
        assert!((mean - cal.calibration_rate).abs() < 1e-9);
        if !blocks[0] {
            assert!((1..m.n_layer).all(|l| cal.routers.get(l, Block::Attention).is_none()));
        }
        if per_block {
            // every block skips about the same share of its tokens
            assert!(cal.blocks.iter().all(|b| (b.skip_rate - rate).abs() < 0.06), "{:?}", cal.blocks);
        }
        // held-out sequences skip at about the same rate (the same distribution of tokens)
        let q = measure_skipping(&mut interp, &cal.routers, &sequences(3, 32, 50), 8).unwrap();
        assert_eq!(q.positions, 3 * (32 - 8 - 1));
        assert!((q.realised_rate - rate).abs() < 0.15, "held-out rate {} for {rate}", q.realised_rate);
        assert!(q.mean_kl > 0.0 && q.top1_agreement < 1.0 + 1e-12);
    }
    // the output importance of a block is the mean KL of the sequences' measured positions when the block is
    // skipped for all of them (recomputed here with forward_skipping)
    {
        use opu_compiler::calibrate::{kl_divergence, log_softmax};
        let cal = calibrate(&mut interp, &fit, &CalibrateOptions { rate: 0.25, ..Default::default() }).unwrap();
        for (l, b) in [(1, Block::Ffn), (3, Block::Attention)] {
            let mut skips = vec![[false; 2]; m.n_layer];
            skips[l][b as usize] = true;
            let (mut sum, mut n) = (0f64, 0usize);
            for seq in &fit {
                let mut dense = interp.clone();
                dense.reset();
                dense.forward(&seq[..16]).unwrap();
                let mut dropped = dense.clone();
                let want = dense.forward(&seq[16..]).unwrap().logits;
                let got = dropped.forward_skipping(&seq[16..], &skips).unwrap().logits;
                for (w, g) in want.iter().zip(&got) {
                    sum += kl_divergence(&log_softmax(w), &log_softmax(g));
                    n += 1;
                }
            }
            let fit_b = cal.blocks.iter().find(|f| f.layer == l && f.block == b.name()).unwrap();
            assert!((fit_b.mean_importance - sum / n as f64).abs() < 1e-9 * (1.0 + sum / n as f64), "{fit_b:?} against {}", sum / n as f64);
            assert!(fit_b.mean_importance > 0.0);
        }
    }
    // rate 0: no block is routed, and the routed float model is the dense one
    let cal = calibrate(&mut interp, &fit, &CalibrateOptions { rate: 0.0, ..Default::default() }).unwrap();
    assert_eq!((cal.routers.count(), cal.calibration_rate), (0, 0.0));
    let q = measure_skipping(&mut interp, &cal.routers, &sequences(2, 24, 9), 8).unwrap();
    assert_eq!((q.top1_agreement, q.mean_kl, q.realised_rate), (1.0, 0.0, 0.0));
    assert_eq!(q.dense_perplexity, q.skip_perplexity);
    // a rate outside [0, 1) and too little text are refused
    let err = calibrate(&mut interp, &fit, &CalibrateOptions { rate: 1.0, ..Default::default() }).unwrap_err().to_string();
    assert!(err.contains("expected a value in [0, 1)"), "{err}");
    let err = calibrate(&mut interp, &sequences(1, 10, 0), &CalibrateOptions::default()).unwrap_err().to_string();
    assert!(err.contains("at least 16 are needed"), "{err}");
}

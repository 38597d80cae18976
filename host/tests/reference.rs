//! The reference path on the real SmolLM2 (fetched into the model cache on first use).

mod common;

use opu_host::backend::Backend;
use opu_host::reference::{argmax, ReferenceModel};
use opu_host::{GenerateParams, Session};
use serde_json::Value;
use std::sync::Once;

/// One compute thread: candle's pool collapses when the other core is busy (and the tests run in parallel).
fn single_thread() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var("RAYON_NUM_THREADS", "1"));
}

fn model_path() -> std::path::PathBuf {
    single_thread();
    common::smollm2()
}

fn reference_json() -> Value {
    serde_json::from_str(include_str!("../../tests/data/smollm2_reference.json")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn greedy_chat_capital_gives_the_reference_tokens() {
    let r = reference_json();
    let case = &r["greedy"][0];
    assert_eq!(case["name"], "chat_capital");
    let prompt = ids(&r["tokenization"][0]["prompt_ids"]);
    let want = ids(&case["generated_ids"]);
    let mut s = Session::open(&model_path(), "reference").unwrap();
    assert_eq!(s.tokenizer.encode(case["text"].as_str().unwrap()).unwrap(), prompt);
    let gen = s.generate(&prompt, &GenerateParams { max_tokens: 32, ..Default::default() }, |_| {}).unwrap();
    assert_eq!(gen.generated_ids, want, "text: {:?}", gen.text);
    // the reference's text ends with the stop token's; ours stops before it (the id is still generated)
    let stop_text = s.tokenizer.token_text(*want.last().unwrap()).unwrap();
    assert_eq!(stop_text, "<|im_end|>");
    assert_eq!(gen.stop, opu_host::runtime::StopReason::StopToken);
    assert_eq!(gen.text, case["generated_text"].as_str().unwrap().strip_suffix(stop_text.as_str()).unwrap());
}

#[test]
fn incremental_decode_equals_one_pass_and_teacher_forcing() {
    let r = reference_json();
    let prompt = ids(&r["tokenization"][2]["prompt_ids"]);
    let g = opu_compiler::gguf::Gguf::open(model_path()).unwrap();
    let mut m = ReferenceModel::load(&g, candle_core::Device::Cpu, "cpu").unwrap();
    let all = m.forward(&prompt, true).unwrap();
    assert_eq!(all.len(), prompt.len());
    m.reset();
    let (head, tail) = prompt.split_at(5);
    let mut step = m.forward(head, false).unwrap();
    for &t in tail {
        step = m.forward(&[t], false).unwrap();
    }
    assert_eq!(m.position(), prompt.len());
    let (a, b) = (&all[prompt.len() - 1], &step[0]);
    let max_diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    // Same math in another order: f32 rounding only.
    assert!(max_diff < 1e-3, "one pass vs incremental: max |d logit| = {max_diff}");
    assert_eq!(argmax(a), argmax(b));
}

#[test]
fn eval_of_the_reference_against_itself_agrees_fully() {
    let model = model_path();
    let prompts = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/smollm2_reference.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_opu"))
        .args(["eval", "--backend", "reference", "--against", "reference", "--threads", "1", "--json", "--tokens", "6"])
        .args(["--prompts", prompts, "--model", model.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let prompts = v["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 3);
    assert_eq!(prompts[0]["name"], "chat_capital");
    assert_eq!(ids(&prompts[0]["reference_ids"]), vec![504, 3575, 282, 4649, 314, 7042]);
    let overall = &v["overall"];
    assert_eq!(overall["top1_agreement"], 1.0);
    assert!(overall["mean_logit_cosine"].as_f64().unwrap() > 0.999_999);
    assert_eq!(overall["max_abs_logit_diff"], 0.0, "the same backend twice is deterministic");
    assert_eq!((overall["mean_kl"].as_f64(), overall["nan_positions"].as_u64()), (Some(0.0), Some(0)));
    assert!(overall["mean_centered_cosine"].as_f64().unwrap() > 0.999_999);
    assert_eq!(overall["positions"], 18);
}

/// `--max-context` limits the reference path's context as it sizes the overlay backends' KV caches: the
/// session reports it, a prompt that fills it gets one token and stops, and a longer one is refused.
#[test]
fn max_context_limits_the_reference_context() {
    let path = model_path();
    let opts = opu_compiler::CompileOptions { max_context: Some(8), ..Default::default() };
    let mut s = Session::open_with_options(&path, "reference", &opu_hw::OverlayConfig::sim(), None, opts).unwrap();
    assert_eq!(s.context_length(), 8);
    let prompt: Vec<u32> = (0..8).map(|i| 100 + i).collect();
    let gen = s.generate(&prompt, &GenerateParams { max_tokens: 4, ..Default::default() }, |_| {}).unwrap();
    assert_eq!((gen.generated_ids.len(), gen.stop), (1, opu_host::runtime::StopReason::ContextFull));
    let prompt: Vec<u32> = (0..9).map(|i| 100 + i).collect();
    let e = s.generate(&prompt, &GenerateParams { max_tokens: 4, ..Default::default() }, |_| {}).unwrap_err().to_string();
    assert!(e.contains("9 tokens at position 0 exceed the context length 8"), "{e}");
    // (above the model's own context: the model's)
    let opts = opu_compiler::CompileOptions { max_context: Some(1 << 20), ..Default::default() };
    let s = Session::open_with_options(&path, "reference", &opu_hw::OverlayConfig::sim(), None, opts).unwrap();
    assert_eq!(s.context_length(), 8192);
}

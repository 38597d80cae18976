//! `opu eval`: a backend measured against another, teacher-forced.
//!
//! For each prompt, the `against` backend generates N greedy tokens; then prompt + those tokens is fed to
//! both backends as generation feeds them (the prompt as one prefill pass, then one decode pass per token,
//! so routers skip blocks as they do when generating), and at every position that predicts a generated
//! token we compare the logit vectors: top-1 agreement (the backend's argmax equals the reference token),
//! the mean KL divergence of the softmax distributions (reference to backend), the cosine similarity of the
//! logits plain and centered (each vector less its mean: the plain cosine of logits that share a large
//! common offset stays near 1 even when the distributions differ), and the largest absolute difference. A
//! NaN logit makes every figure NaN and is counted (`nan_positions`); `opu eval` then fails.

use crate::runtime::{GenerateParams, Session};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One prompt of a prompts file.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Prompt {
    pub name: String,
    pub text: String,
}

/// Reads a prompts file: a JSON list of `{"name", "text"}`, or an object holding such a list under
/// `prompts` or `tokenization` (the layout of the reference test vectors).
pub fn read_prompts(path: &Path) -> Result<Vec<Prompt>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let list = match &v {
        serde_json::Value::Array(_) => v.clone(),
        serde_json::Value::Object(o) => o.get("prompts").or_else(|| o.get("tokenization")).cloned().unwrap_or(serde_json::Value::Array(Vec::new())),
        _ => serde_json::Value::Null,
    };
    let prompts: Vec<Prompt> = serde_json::from_value(list)
        .with_context(|| format!("{}: expected a JSON list of {{\"name\", \"text\"}} objects", path.display()))?;
    if prompts.is_empty() {
        bail!("{}: no prompts", path.display());
    }
    Ok(prompts)
}

/// Agreement figures of one prompt or of all.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Agreement {
    pub positions: usize,
    pub top1_agreement: f64,
    /// Mean KL(reference || backend) of the softmax distributions, nats.
    pub mean_kl: f64,
    pub mean_logit_cosine: f64,
    /// The cosine of the logits each less its mean.
    pub mean_centered_cosine: f64,
    pub max_abs_logit_diff: f64,
    /// Positions where either side has a NaN logit (every figure is then NaN).
    pub nan_positions: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct PromptResult {
    pub name: String,
    pub prompt_tokens: usize,
    pub reference_ids: Vec<u32>,
    #[serde(flatten)]
    pub agreement: Agreement,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    pub backend: String,
    pub against: String,
    pub tokens: usize,
    pub prompts: Vec<PromptResult>,
    pub overall: Agreement,
    /// The backend's skipping over every teacher-forced pass (programs with routers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<SkipTally>,
    /// Both backends on a held-out text (`--heldout`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout: Option<HeldOut>,
}

/// Skip decisions and KV storage of a backend with routers, summed over teacher-forced sequences (each
/// sequence's K/V counted as it stood at its end).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SkipTally {
    pub decisions: u64,
    pub skipped_blocks: u64,
    pub realised_skip_rate: f64,
    pub kv_layout: String,
    pub kv_saved_bytes: u64,
    pub kv_dense_bytes: u64,
    pub kv_saved_fraction: f64,
}

impl SkipTally {
    /// Adds the figures of a backend's last sequence (`st`: its stats since the reset); false without
    /// routers.
    pub(crate) fn add(&mut self, st: &serde_json::Value) -> bool {
        let Some(skip) = st.get("skip").filter(|v| v.is_object()) else { return false };
        let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        self.decisions += u(&skip["decisions"]);
        self.skipped_blocks += u(&skip["skipped_blocks"]);
        self.kv_saved_bytes += u(&st["kv"]["saved_bytes"]);
        self.kv_dense_bytes += u(&st["kv"]["bytes_dense"]);
        self.kv_layout = st["kv"]["layout"].as_str().unwrap_or("dense").to_string();
        let rate = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        self.realised_skip_rate = rate(self.skipped_blocks, self.decisions);
        self.kv_saved_fraction = rate(self.kv_saved_bytes, self.kv_dense_bytes);
        true
    }
}

/// Both backends teacher-forced on a held-out text (as generation feeds them: a prompt prefill, then a pass
/// per token), compared at the positions the decode passes computed.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct HeldOut {
    pub text: String,
    pub sequences: usize,
    pub positions: usize,
    /// Share of positions where both argmaxes agree.
    pub top1_agreement: f64,
    /// Mean KL(against || backend), nats.
    pub mean_kl: f64,
    /// Perplexity of the text's next tokens under each.
    pub backend_perplexity: f64,
    pub against_perplexity: f64,
    pub perplexity_ratio: f64,
    pub nan_positions: usize,
}

/// [`HeldOut`] on `ids` cut into sequences of `sequence` tokens, the first `prompt` of each a prefill;
/// `after_sequence` sees the backend after each sequence (its stats cover that sequence).
pub fn heldout(
    backend: &mut Session,
    against: &mut Session,
    text: &str,
    ids: &[u32],
    (sequence, prompt): (usize, usize),
    after_sequence: &mut dyn FnMut(&Session),
) -> Result<HeldOut> {
    use opu_compiler::calibrate::{kl_divergence, log_softmax};
    if prompt == 0 || sequence <= prompt {
        bail!("held-out sequences of {sequence} tokens with a prompt of {prompt}: the prompt must be 1 to {}", sequence.saturating_sub(1));
    }
    let (mut h, mut agree, mut kl, mut nll_b, mut nll_a) = (HeldOut { text: text.to_string(), ..HeldOut::default() }, 0usize, 0f64, 0f64, 0f64);
    for seq in ids.chunks(sequence).filter(|s| s.len() > prompt + 1) {
        let a = against.teacher_force_decoding(seq, prompt)?;
        let b = backend.teacher_force_decoding(seq, prompt).context("the backend on the held-out text")?;
        after_sequence(backend);
        h.sequences += 1;
        for t in prompt..seq.len() - 1 {
            let (la, lb) = (log_softmax(&a[t]), log_softmax(&b[t]));
            h.positions += 1;
            if a[t].iter().chain(&b[t]).any(|x| x.is_nan()) {
                h.nan_positions += 1;
            }
            let argmax = |v: &[f32]| opu_hw::numerics::vector::argmax(v.iter().copied());
            agree += usize::from(argmax(&a[t]) == argmax(&b[t]));
            kl += kl_divergence(&la, &lb);
            nll_a -= la[seq[t + 1] as usize];
            nll_b -= lb[seq[t + 1] as usize];
        }
    }
    if h.positions == 0 {
        bail!("the held-out text has {} tokens: at least {} are needed", ids.len(), prompt + 2);
    }
    let n = h.positions as f64;
    let nan = if h.nan_positions > 0 { f64::NAN } else { 0.0 };
    h.top1_agreement = agree as f64 / n + nan;
    h.mean_kl = kl / n + nan;
    h.backend_perplexity = (nll_b / n).exp() + nan;
    h.against_perplexity = (nll_a / n).exp() + nan;
    h.perplexity_ratio = h.backend_perplexity / h.against_perplexity;
    Ok(h)
}

/// Sums that make up an [`Agreement`].
#[derive(Default)]
struct Tally {
    positions: usize,
    agree: usize,
    kl_sum: f64,
    cosine_sum: f64,
    centered_sum: f64,
    max_abs: f64,
    nan: usize,
}

/// The cosine of `a` and `b`, plain or each first less its mean (`centered`).
fn cosine(a: &[f32], b: &[f32], centered: bool) -> f64 {
    let mean = |v: &[f32]| if centered { v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len().max(1) as f64 } else { 0.0 };
    let (ma, mb) = (mean(a), mean(b));
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x) - ma, f64::from(y) - mb);
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    dot / (na.sqrt() * nb.sqrt()).max(f64::MIN_POSITIVE)
}

impl Tally {
    fn add(&mut self, logits: &[f32], reference: &[f32], next_token: u32) {
        self.positions += 1;
        if logits.iter().chain(reference).any(|x| x.is_nan()) {
            self.nan += 1;
        }
        if opu_hw::numerics::vector::argmax(logits.iter().copied()) == next_token {
            self.agree += 1;
        }
        for (&a, &b) in logits.iter().zip(reference) {
            let d = (f64::from(a) - f64::from(b)).abs();
            // NaN-propagating (f64::max drops a NaN)
            self.max_abs = if d.is_nan() || self.max_abs.is_nan() { f64::NAN } else { self.max_abs.max(d) };
        }
        use opu_compiler::calibrate::{kl_divergence, log_softmax};
        self.kl_sum += kl_divergence(&log_softmax(reference), &log_softmax(logits));
        self.cosine_sum += cosine(logits, reference, false);
        self.centered_sum += cosine(logits, reference, true);
    }

    fn merge(&mut self, o: &Tally) {
        self.positions += o.positions;
        self.agree += o.agree;
        self.kl_sum += o.kl_sum;
        self.cosine_sum += o.cosine_sum;
        self.centered_sum += o.centered_sum;
        self.max_abs = if o.max_abs.is_nan() { f64::NAN } else { self.max_abs.max(o.max_abs) };
        self.nan += o.nan;
    }

    fn agreement(&self) -> Agreement {
        let n = self.positions.max(1) as f64;
        // a NaN logit shows in every figure (the argmax alone would hide it)
        let nan = if self.nan > 0 { f64::NAN } else { 0.0 };
        Agreement {
            positions: self.positions,
            top1_agreement: self.agree as f64 / n + nan,
            mean_kl: self.kl_sum / n + nan,
            mean_logit_cosine: self.cosine_sum / n + nan,
            mean_centered_cosine: self.centered_sum / n + nan,
            max_abs_logit_diff: self.max_abs + nan,
            nan_positions: self.nan,
        }
    }
}

/// Runs the evaluation. `backend` and `against` may be the same session kind opened twice.
pub fn evaluate(backend: &mut Session, against: &mut Session, prompts: &[Prompt], tokens: usize) -> Result<EvalReport> {
    let mut total = Tally::default();
    let mut results = Vec::new();
    let mut skip = SkipTally::default();
    let mut routed = false;
    for p in prompts {
        let prompt_ids = against.tokenizer.encode(&p.text)?;
        let params = GenerateParams { max_tokens: tokens, ..GenerateParams::default() };
        let gen = against.generate(&prompt_ids, &params, |_| {}).with_context(|| format!("prompt `{}` on the reference", p.name))?;
        let mut seq = prompt_ids.clone();
        seq.extend(&gen.generated_ids);
        let reference = against.teacher_force_decoding(&seq, prompt_ids.len())?;
        let logits = backend.teacher_force_decoding(&seq, prompt_ids.len()).with_context(|| format!("prompt `{}` on the backend", p.name))?;
        routed |= backend.backend_stats().is_some_and(|st| skip.add(&st));
        let mut tally = Tally::default();
        // Position i predicts token i + 1: compare the positions that predict the generated tokens.
        for i in prompt_ids.len() - 1..seq.len() - 1 {
            tally.add(&logits[i], &reference[i], seq[i + 1]);
        }
        total.merge(&tally);
        results.push(PromptResult {
            name: p.name.clone(),
            prompt_tokens: prompt_ids.len(),
            reference_ids: gen.generated_ids,
            agreement: tally.agreement(),
        });
    }
    Ok(EvalReport {
        backend: backend.backend_name().to_string(),
        against: against.backend_name().to_string(),
        tokens,
        prompts: results,
        overall: total.agreement(),
        skip: routed.then_some(skip),
        heldout: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_measures_agreement_cosine_and_difference() {
        let mut t = Tally::default();
        t.add(&[1.0, 3.0, 2.0], &[1.0, 3.0, 2.0], 1);
        t.add(&[1.0, 2.0, 3.5], &[1.0, 3.0, 2.0], 1);
        let a = t.agreement();
        assert_eq!(a.positions, 2);
        assert_eq!(a.top1_agreement, 0.5);
        assert_eq!(a.max_abs_logit_diff, 1.5);
        let cos2 = (1.0 + 6.0 + 7.0) / ((1.0f64 + 4.0 + 12.25).sqrt() * 14f64.sqrt());
        assert!((a.mean_logit_cosine - (1.0 + cos2) / 2.0).abs() < 1e-12);
        // centered: [-1.1667, -0.1667, 1.3333] against [-1, 1, 0]
        let (x, y) = ([-7.0 / 6.0, -1.0 / 6.0, 8.0 / 6.0f64], [-1.0, 1.0, 0.0f64]);
        let c2 = (x[0] * y[0] + x[1] * y[1]) / ((x.iter().map(|v| v * v).sum::<f64>()).sqrt() * 2f64.sqrt());
        assert!((a.mean_centered_cosine - (1.0 + c2) / 2.0).abs() < 1e-12, "{}", a.mean_centered_cosine);
        // KL(reference || backend), by hand with f64 softmaxes
        let sm = |v: [f64; 3]| { let z: f64 = v.iter().map(|x| x.exp()).sum(); v.map(|x| x.exp() / z) };
        let (p, q) = (sm([1.0, 3.0, 2.0]), sm([1.0, 2.0, 3.5]));
        let kl: f64 = (0..3).map(|i| p[i] * (p[i] / q[i]).ln()).sum();
        assert!((a.mean_kl - kl / 2.0).abs() < 1e-12, "{} vs {}", a.mean_kl, kl / 2.0);
        // a shift of all logits changes neither the centered cosine nor the KL, only the plain cosine
        let mut s = Tally::default();
        s.add(&[101.0, 102.0, 103.5], &[1.0, 3.0, 2.0], 1);
        assert!((s.agreement().mean_centered_cosine - c2).abs() < 1e-12 && (s.agreement().mean_kl - kl).abs() < 1e-9);
        assert!(s.agreement().mean_logit_cosine > 0.9);
        assert_eq!(a.nan_positions, 0);
        // one NaN logit: counted, and every figure is NaN
        t.add(&[1.0, f32::NAN, 2.0], &[1.0, 3.0, 2.0], 1);
        let a = t.agreement();
        assert_eq!(a.nan_positions, 1);
        for v in [a.top1_agreement, a.mean_kl, a.mean_logit_cosine, a.mean_centered_cosine, a.max_abs_logit_diff] {
            assert!(v.is_nan());
        }
    }

    #[test]
    fn prompts_files_in_both_layouts() {
        let dir = std::env::temp_dir().join(format!("opu-eval-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let list = dir.join("list.json");
        std::fs::write(&list, r#"[{"name":"a","text":"hi"}]"#).unwrap();
        assert_eq!(read_prompts(&list).unwrap()[0].text, "hi");
        let reference = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/smollm2_reference.json"));
        assert_eq!(read_prompts(reference).unwrap().len(), 3);
        std::fs::write(&list, r#"{"x": 1}"#).unwrap();
        assert!(read_prompts(&list).unwrap_err().to_string().contains("no prompts"));
        std::fs::write(&list, "not json").unwrap();
        assert!(read_prompts(&list).unwrap_err().to_string().contains("not JSON"));
    }
}

/// Relative L2 error of the residual stream after one layer, over every position of every prompt.
#[derive(Clone, Debug, Serialize)]
pub struct LayerError {
    pub layer: usize,
    pub relative_l2: f64,
}

/// Layer-by-layer comparison: the sim backend (compiled with the layer trace, one token per pass) against
/// the compiler's f32 interpreter of the graph IR, over every position of every token sequence.
pub fn per_layer(
    g: &opu_compiler::gguf::Gguf,
    config: &opu_hw::OverlayConfig,
    sequences: &[Vec<u32>],
    threads: usize,
) -> Result<Vec<LayerError>> {
    use crate::backend::Backend;
    let opts = opu_compiler::CompileOptions { trace_layers: true, ..Default::default() };
    let mut sim = crate::sim_backend::SimBackend::open(g, config, &opts, threads)?;
    let mut interp = opu_compiler::interp::Interpreter::new(g)?;
    let n_layer = sim.meta().n_layer;
    let (mut num, mut den) = (vec![0.0f64; n_layer], vec![0.0f64; n_layer]);
    for ids in sequences {
        sim.reset();
        interp.reset();
        let reference = interp.forward(ids)?;
        for (pos, &id) in ids.iter().enumerate() {
            sim.forward_single(id)?;
            let trace = sim.read_trace(1)?;
            for l in 0..n_layer {
                let (a, b) = (&trace[l][0], &reference.layer_hidden[l][pos]);
                num[l] += a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum::<f64>();
                den[l] += b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>();
            }
        }
    }
    Ok((0..n_layer).map(|l| LayerError { layer: l, relative_l2: (num[l] / den[l].max(f64::MIN_POSITIVE)).sqrt() }).collect())
}

//! `opu eval`: a backend measured against another, teacher-forced.
//!
//! For each prompt, the `against` backend generates N greedy tokens; then prompt + those tokens is fed at
//! once to both backends, and at every position that predicts a generated token we compare the logit
//! vectors: top-1 agreement (the backend's argmax equals the reference token), cosine similarity, and the
//! largest absolute difference.

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
    pub mean_logit_cosine: f64,
    pub max_abs_logit_diff: f64,
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
}

/// Sums that make up an [`Agreement`].
#[derive(Default)]
struct Tally {
    positions: usize,
    agree: usize,
    cosine_sum: f64,
    max_abs: f64,
}

impl Tally {
    fn add(&mut self, logits: &[f32], reference: &[f32], next_token: u32) {
        self.positions += 1;
        if opu_hw::numerics::vector::argmax(logits.iter().copied()) == next_token {
            self.agree += 1;
        }
        let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in logits.iter().zip(reference) {
            let (a, b) = (f64::from(a), f64::from(b));
            dot += a * b;
            na += a * a;
            nb += b * b;
            self.max_abs = self.max_abs.max((a - b).abs());
        }
        self.cosine_sum += dot / (na.sqrt() * nb.sqrt()).max(f64::MIN_POSITIVE);
    }

    fn merge(&mut self, o: &Tally) {
        self.positions += o.positions;
        self.agree += o.agree;
        self.cosine_sum += o.cosine_sum;
        self.max_abs = self.max_abs.max(o.max_abs);
    }

    fn agreement(&self) -> Agreement {
        let n = self.positions.max(1) as f64;
        Agreement {
            positions: self.positions,
            top1_agreement: self.agree as f64 / n,
            mean_logit_cosine: self.cosine_sum / n,
            max_abs_logit_diff: self.max_abs,
        }
    }
}

/// Runs the evaluation. `backend` and `against` may be the same session kind opened twice.
pub fn evaluate(backend: &mut Session, against: &mut Session, prompts: &[Prompt], tokens: usize) -> Result<EvalReport> {
    let mut total = Tally::default();
    let mut results = Vec::new();
    for p in prompts {
        let prompt_ids = against.tokenizer.encode(&p.text)?;
        let params = GenerateParams { max_tokens: tokens, ..GenerateParams::default() };
        let gen = against.generate(&prompt_ids, &params, |_| {}).with_context(|| format!("prompt `{}` on the reference", p.name))?;
        let mut seq = prompt_ids.clone();
        seq.extend(&gen.generated_ids);
        let reference = against.teacher_force(&seq)?;
        let logits = backend.teacher_force(&seq).with_context(|| format!("prompt `{}` on the backend", p.name))?;
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

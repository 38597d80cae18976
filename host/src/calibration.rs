//! Routers calibrated for a target skip rate (`--skip RATE`, `opu calibrate`): the calibration text is
//! tokenized, cut into sequences, and fitted by `opu_compiler::calibrate`; the routers are cached in the model
//! cache, keyed by the model file, the text and the settings, so a second run loads them.
//!
//! The default calibration text is a file every Debian machine has (base-files' GPL-3). Evaluation text
//! (`opu eval`'s prompts, the perplexity text) is always another text.

use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use opu_compiler::calibrate::{fit, measure_importance, CalibrateOptions, Calibration, Importance, Measured};
use opu_compiler::gguf::Gguf;
use opu_compiler::routers::Routers;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The last measurement of this process, by its key (the model, the text and the measuring settings): the
/// rates of one `opu sweep-skip` share it, and only the fit differs.
static MEASURED: Mutex<Option<(String, Arc<Measured>)>> = Mutex::new(None);

/// The calibration text when none is given: the GNU GPL version 3, on every Debian machine.
pub const DEFAULT_TEXT: &str = "/usr/share/common-licenses/GPL-3";

/// Bump when the fit changes, so cached routers of an older fit are not reused.
const FIT_VERSION: u32 = 2;

/// What to calibrate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Target share of skipped decisions (layers 1.., both blocks).
    pub rate: f64,
    pub text: PathBuf,
    /// Tokens of the text used (from its start).
    pub tokens: usize,
    /// Tokens per sequence (each starts at position 0).
    pub sequence: usize,
    /// Which blocks may skip, `[attention, ffn]`.
    pub blocks: [bool; 2],
    /// One threshold per block at the same rate (else one pooled threshold).
    pub per_block: bool,
    pub importance: Importance,
    /// The ridge penalty per calibration token (`CalibrateOptions::ridge`).
    pub ridge: f64,
}

impl Spec {
    /// The default fit: the output-based importance on 1,024 tokens of the default text, in sequences of 64
    /// (a dense prompt of 16, then 48 positions measured, as `opu eval --heldout` decodes them).
    pub fn new(rate: f64) -> Self {
        Spec { rate, text: PathBuf::from(DEFAULT_TEXT), tokens: 1024, sequence: 64, blocks: [true; 2], per_block: false, importance: Importance::OutputKl, ridge: CalibrateOptions::default().ridge }
    }

    /// The relative-update proxy: cheap, so 2,048 tokens in sequences of 512.
    pub fn relative_update(rate: f64) -> Self {
        Spec { tokens: 2048, sequence: 512, importance: Importance::RelativeUpdate, ..Spec::new(rate) }
    }
}

/// Parses `--importance`: `output-kl` or `relative-update`.
pub fn parse_importance(s: &str) -> Result<Importance, String> {
    match s {
        "output-kl" => Ok(Importance::OutputKl),
        "relative-update" => Ok(Importance::RelativeUpdate),
        other => Err(format!("`{other}`: expected `output-kl` or `relative-update`")),
    }
}

/// Checks a `--skip` value: a rate in [0, 1).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|_| format!("`{s}`: expected a skip rate, a number in [0, 1)"))?;
    if (0.0..1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("`{s}`: expected a skip rate in [0, 1) (the share of skipped attention and FFN decisions)"))
    }
}

/// Parses `--blocks`: `attn`, `ffn` or both, comma-separated.
pub fn parse_blocks(s: &str) -> Result<[bool; 2], String> {
    let mut b = [false; 2];
    for part in s.split(',') {
        match part.trim() {
            "attn" => b[0] = true,
            "ffn" => b[1] = true,
            other => return Err(format!("`{other}`: expected `attn`, `ffn` or `attn,ffn`")),
        }
    }
    Ok(b)
}

/// Refuses a held-out text (given as `flag`) that is the calibration text: evaluation text is always
/// separate from calibration text.
pub fn ensure_heldout(flag: &str, heldout: &Path, calibration_text: &Path) -> Result<()> {
    if std::fs::canonicalize(heldout).ok() == std::fs::canonicalize(calibration_text).ok() {
        anyhow::bail!("{flag} {}: the held-out text must not be the calibration text", heldout.display());
    }
    Ok(())
}

/// Calibrated routers and where they are cached.
pub struct Calibrated {
    pub routers: Routers,
    /// The calibration report (JSON, `opu_compiler::calibrate::Calibration` plus the text and cache file).
    pub report: serde_json::Value,
    pub file: PathBuf,
    /// True when the routers came from the cache.
    pub cached: bool,
}

fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(h.finalize().into())
}

/// The routers of `spec` for the model at `model_path` (already opened as `g`): from the cache, else fitted
/// (minutes of the f32 interpreter) and cached. `progress` receives a line of what is happening.
pub fn routers_for(g: &Gguf, model_path: &Path, spec: &Spec, progress: &mut dyn FnMut(&str)) -> Result<Calibrated> {
    let text = std::fs::read_to_string(&spec.text).with_context(|| format!("calibration text {}: cannot read", spec.text.display()))?;
    let mut key = Sha256::new();
    let model_sha = sha256_file(model_path)?;
    key.update(model_sha);
    key.update(text.as_bytes());
    key.update(
        format!(
            "v{FIT_VERSION} rate={} tokens={} sequence={} blocks={:?} per_block={} importance={} ridge={}",
            spec.rate,
            spec.tokens,
            spec.sequence,
            spec.blocks,
            spec.per_block,
            spec.importance.name(),
            spec.ridge
        )
        .as_bytes(),
    );
    let key: String = key.finalize()[..12].iter().map(|b| format!("{b:02x}")).collect();
    let file = crate::cache::cache_dir()?.join("routers").join(format!("{key}.safetensors"));
    let cfg = opu_compiler::llama::LlamaConfig::from_gguf(g)?;
    if file.exists() {
        let bytes = std::fs::read(&file).with_context(|| format!("{}: cannot read", file.display()))?;
        let routers = Routers::from_bytes(&bytes, &file.display().to_string(), cfg.n_layer, cfg.n_embd)?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).with_context(|| format!("{}: header", file.display()))?;
        let report = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("opu.calibration"))
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(serde_json::Value::Null);
        return Ok(Calibrated { routers, report, file, cached: true });
    }
    let tokenizer = Tokenizer::from_gguf(g)?;
    let ids = tokenizer.encode(&text)?;
    let ids = &ids[..ids.len().min(spec.tokens)];
    let sequences: Vec<Vec<u32>> = ids.chunks(spec.sequence.max(1)).map(<[u32]>::to_vec).collect();
    progress(&format!(
        "calibrating routers for a skip rate of {} on {} tokens of {} ({} importance, the f32 interpreter; cached afterwards)",
        spec.rate,
        ids.len(),
        spec.text.display(),
        spec.importance.name()
    ));
    let opts = CalibrateOptions { rate: spec.rate, blocks: spec.blocks, per_block: spec.per_block, importance: spec.importance, ridge: spec.ridge, ..CalibrateOptions::default() };
    let measured_key = {
        let mut k = Sha256::new();
        k.update(model_sha);
        k.update(text.as_bytes());
        k.update(format!("tokens={} sequence={} importance={}", spec.tokens, spec.sequence, spec.importance.name()).as_bytes());
        k.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let cached = MEASURED.lock().expect("not poisoned").as_ref().filter(|(k, _)| *k == measured_key).map(|(_, m)| Arc::clone(m));
    let measured = match cached {
        Some(m) => m,
        None => {
            let mut interp = opu_compiler::interp::Interpreter::new(g)?;
            let bar = indicatif::ProgressBar::new(sequences.len() as u64).with_style(
                indicatif::ProgressStyle::with_template("{spinner} calibrating: sequence {pos}/{len} [{elapsed_precise}, {eta} left]").expect("a valid template"),
            );
            let m = Arc::new(measure_importance(&mut interp, &sequences, &opts, &mut |done| bar.set_position(done as u64))?);
            bar.finish_and_clear();
            *MEASURED.lock().expect("not poisoned") = Some((measured_key, Arc::clone(&m)));
            m
        }
    };
    let cal: Calibration = fit(&measured, &opts)?;
    let mut report = serde_json::to_value(&cal)?;
    report["text"] = serde_json::json!(spec.text.display().to_string());
    report["routed_blocks"] = serde_json::json!(cal.routers.count());
    let meta = HashMap::from([
        ("opu.skip_rate".to_string(), spec.rate.to_string()),
        ("opu.calibration".to_string(), report.to_string()),
    ]);
    std::fs::create_dir_all(file.parent().expect("cache file has a folder"))?;
    // write then rename: a crashed run leaves no half file under the key
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    cal.routers.save(&tmp, meta).with_context(|| format!("{}: cannot write", tmp.display()))?;
    std::fs::rename(&tmp, &file)?;
    Ok(Calibrated { routers: cal.routers, report, file, cached: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_rates_are_checked() {
        assert_eq!(parse_rate("0.25"), Ok(0.25));
        assert_eq!(parse_rate("0"), Ok(0.0));
        for bad in ["1", "-0.1", "nan", "inf", "x"] {
            assert!(parse_rate(bad).unwrap_err().contains("skip rate"), "{bad}");
        }
        assert_eq!(parse_blocks("ffn"), Ok([false, true]));
        assert_eq!(parse_blocks("attn,ffn"), Ok([true, true]));
        assert!(parse_blocks("mlp").unwrap_err().contains("`mlp`"));
    }
}

//! The llama architecture as GGUF stores it: hyperparameters from the metadata and the tensors they imply,
//! each checked against the other before anything uses them.

use crate::gguf::{Gguf, GgufError, TensorInfo};
use std::path::PathBuf;

/// A model that cannot be used as a llama model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: architecture `{arch}` is not supported (expected `llama`)")]
    Architecture { path: PathBuf, arch: String },
    #[error("{path}: tensor `{name}` is missing")]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: tensor `{name}` has shape {found:?}, the metadata implies {expected:?}")]
    Shape { path: PathBuf, name: String, found: Vec<u64>, expected: Vec<u64> },
    #[error("{path}: metadata `{key}` = {value}: {what}")]
    Hyper { path: PathBuf, key: &'static str, value: u64, what: String },
    /// A malformed graph IR (`crate::ir::Graph::check`).
    #[error("graph IR: {what}")]
    Graph { what: String },
    /// An input the model cannot run (a token outside the vocabulary, a sequence beyond the context).
    #[error("input: {what}")]
    Input { what: String },
}

/// Hyperparameters of a llama-architecture model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context_length: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
    /// `output.weight` is absent: the output projection is the token embedding.
    pub tied_output: bool,
}

/// Names of one layer's tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNames {
    pub attn_norm: String,
    pub wq: String,
    pub wk: String,
    pub wv: String,
    pub wo: String,
    pub ffn_norm: String,
    pub w_gate: String,
    pub w_up: String,
    pub w_down: String,
}

impl LayerNames {
    pub fn new(l: usize) -> Self {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        LayerNames {
            attn_norm: n("attn_norm"),
            wq: n("attn_q"),
            wk: n("attn_k"),
            wv: n("attn_v"),
            wo: n("attn_output"),
            ffn_norm: n("ffn_norm"),
            w_gate: n("ffn_gate"),
            w_up: n("ffn_up"),
            w_down: n("ffn_down"),
        }
    }
}

pub const TOKEN_EMBD: &str = "token_embd.weight";
pub const OUTPUT_NORM: &str = "output_norm.weight";
pub const OUTPUT: &str = "output.weight";

impl LlamaConfig {
    /// Reads the hyperparameters and checks every tensor the architecture needs against them.
    pub fn from_gguf(g: &Gguf) -> Result<Self, ModelError> {
        let arch = g.get_str("general.architecture")?;
        if arch != "llama" {
            return Err(ModelError::Architecture { path: g.path.clone(), arch: arch.into() });
        }
        let size = |key: &'static str| -> Result<usize, ModelError> {
            let v = g.get_u64(key)?;
            if v == 0 || v > 1 << 24 {
                return Err(ModelError::Hyper { path: g.path.clone(), key, value: v, what: "expected 1..=16777216".into() });
            }
            Ok(v as usize)
        };
        let n_embd = size("llama.embedding_length")?;
        let n_head = size("llama.attention.head_count")?;
        let n_head_kv = match g.metadata.get("llama.attention.head_count_kv") {
            Some(_) => size("llama.attention.head_count_kv")?,
            None => n_head,
        };
        if n_embd % n_head != 0 || n_head % n_head_kv != 0 {
            return Err(ModelError::Hyper {
                path: g.path.clone(),
                key: "llama.attention.head_count",
                value: n_head as u64,
                what: format!("must divide embedding_length {n_embd} and be a multiple of head_count_kv {n_head_kv}"),
            });
        }
        let head_dim = n_embd / n_head;
        if head_dim % 2 != 0 {
            return Err(ModelError::Hyper { path: g.path.clone(), key: "llama.attention.head_count", value: n_head as u64, what: "head dimension must be even for RoPE".into() });
        }
        let tokens = g.get_strings("tokenizer.ggml.tokens")?;
        let cfg = LlamaConfig {
            n_layer: size("llama.block_count")?,
            n_embd,
            n_ff: size("llama.feed_forward_length")?,
            n_head,
            n_head_kv,
            head_dim,
            vocab: tokens.len(),
            context_length: size("llama.context_length")?,
            rope_theta: g.metadata.get("llama.rope.freq_base").and_then(|v| v.as_f64()).unwrap_or(10000.0) as f32,
            rms_eps: g.get_f64("llama.attention.layer_norm_rms_epsilon")? as f32,
            tied_output: g.tensor(OUTPUT).is_none(),
        };
        cfg.check_tensors(g)?;
        Ok(cfg)
    }

    fn check_tensors(&self, g: &Gguf) -> Result<(), ModelError> {
        for (name, expected) in self.expected_tensors() {
            let t = tensor(g, &name)?;
            if t.dims != expected {
                return Err(ModelError::Shape { path: g.path.clone(), name, found: t.dims.clone(), expected });
            }
        }
        Ok(())
    }

    /// Every tensor the architecture needs, with the GGUF dims (fastest first) the hyperparameters imply.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>)> {
        let (e, f, kv) = (self.n_embd as u64, self.n_ff as u64, (self.n_head_kv * self.head_dim) as u64);
        let mut want: Vec<(String, Vec<u64>)> = vec![(TOKEN_EMBD.into(), vec![e, self.vocab as u64]), (OUTPUT_NORM.into(), vec![e])];
        if !self.tied_output {
            want.push((OUTPUT.into(), vec![e, self.vocab as u64]));
        }
        for l in 0..self.n_layer {
            let n = LayerNames::new(l);
            want.extend([
                (n.attn_norm, vec![e]),
                (n.wq, vec![e, e]),
                (n.wk, vec![e, kv]),
                (n.wv, vec![e, kv]),
                (n.wo, vec![e, e]),
                (n.ffn_norm, vec![e]),
                (n.w_gate, vec![e, f]),
                (n.w_up, vec![e, f]),
                (n.w_down, vec![f, e]),
            ]);
        }
        want
    }
}

/// A tensor that must exist.
pub fn tensor<'g>(g: &'g Gguf, name: &str) -> Result<&'g TensorInfo, ModelError> {
    g.tensor(name).ok_or_else(|| ModelError::MissingTensor { path: g.path.clone(), name: name.into() })
}

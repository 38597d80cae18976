//! The runtime API: open a model on a backend, generate text (streaming), teacher-force a sequence.
//! The same API serves every backend.

use crate::backend::{self, Backend};
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::Tokenizer;
use anyhow::{bail, Result};
use opu_compiler::gguf::Gguf;
use std::path::Path;
use std::time::Instant;

/// Compute threads for backends that split work (`RAYON_NUM_THREADS`, else all cores).
pub fn compute_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Generation settings.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation (and are included in it). Empty: the model's end tokens.
    pub stop: Vec<u32>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams { max_tokens: 256, sampling: SamplingParams::default(), stop: Vec::new() }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    StopToken,
    MaxTokens,
    ContextFull,
}

/// The result of one generation, with its timing.
#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// Seconds of the prompt's forward pass (all prompt tokens at once).
    pub prefill_seconds: f64,
    /// Seconds of the one-token forward passes that followed.
    pub decode_seconds: f64,
    /// Number of those one-token passes.
    pub decode_steps: usize,
}

impl Generation {
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_seconds.max(1e-9)
    }
    /// Decode speed: one-token forward passes per second (every generated token but the first needs one).
    pub fn tokens_per_second(&self) -> f64 {
        if self.decode_steps == 0 {
            self.generated_ids.len() as f64 / (self.prefill_seconds + self.decode_seconds).max(1e-9)
        } else {
            self.decode_steps as f64 / self.decode_seconds.max(1e-9)
        }
    }
}

/// A model opened on a backend, with its tokenizer.
pub struct Session {
    backend: Box<dyn Backend>,
    pub tokenizer: Tokenizer,
    /// Why `auto` chose this backend.
    pub backend_note: Option<String>,
    end_tokens: Vec<u32>,
}

impl Session {
    /// Opens the GGUF model at `path` on backend `backend` ("reference", "auto", ...), the `sim` and `rtl`
    /// backends at the `sim` overlay preset.
    pub fn open(path: &Path, backend: &str) -> Result<Self> {
        Self::open_with_config(path, backend, &opu_hw::OverlayConfig::sim())
    }

    /// Opens the GGUF model at `path` on backend `backend`, the `sim` and `rtl` backends (and later `pcie`)
    /// at overlay `config`.
    pub fn open_with_config(path: &Path, backend: &str, config: &opu_hw::OverlayConfig) -> Result<Self> {
        Self::open_with_routers(path, backend, config, None, opu_compiler::KvLayout::Dense)
    }

    /// [`Session::open_with_config`] with the per-token routers of a safetensors file (docs/skipping.md):
    /// the program the sim and rtl backends run skips blocks per decoded token; its K/V in `kv_layout`.
    pub fn open_with_routers(
        path: &Path,
        backend: &str,
        config: &opu_hw::OverlayConfig,
        routers: Option<&Path>,
        kv_layout: opu_compiler::KvLayout,
    ) -> Result<Self> {
        Self::open_with_options(path, backend, config, routers, opu_compiler::CompileOptions { kv_layout, ..Default::default() })
    }

    /// Opens the GGUF model at `path` on backend `backend`, compiled for the overlay backends with `opts`
    /// (and the routers in the safetensors file `routers`, if any): `max_context`, `max_sessions` ...
    pub fn open_with_options(
        path: &Path,
        backend: &str,
        config: &opu_hw::OverlayConfig,
        routers: Option<&Path>,
        mut opts: opu_compiler::CompileOptions,
    ) -> Result<Self> {
        if !path.exists() {
            bail!("{}: no such model file", path.display());
        }
        let g = Gguf::open(path)?;
        if let Some(file) = routers {
            let cfg = opu_compiler::llama::LlamaConfig::from_gguf(&g)?;
            opts.routers = Some(opu_compiler::routers::Routers::load(file, cfg.n_layer, cfg.n_embd)?);
        }
        // The backend checks the architecture and every tensor first: the clearest error for a wrong model.
        let (backend, backend_note) = backend::open(backend, &g, config, &opts)?;
        let tokenizer = Tokenizer::from_gguf(&g)?;
        // The model's end-of-generation tokens: EOS, EOT if declared, and <|endoftext|> if the vocabulary has it.
        let mut end_tokens: Vec<u32> = tokenizer.eos_id().into_iter().collect();
        if let Ok(eot) = g.get_u64("tokenizer.ggml.eot_token_id") {
            end_tokens.push(eot as u32);
        }
        if let Some(id) = tokenizer.token_id("<|endoftext|>") {
            end_tokens.push(id);
        }
        end_tokens.sort_unstable();
        end_tokens.dedup();
        Ok(Session { backend, tokenizer, backend_note, end_tokens })
    }

    pub fn backend_name(&self) -> &str {
        self.backend.name()
    }

    /// The backend's device counters since the last generation or teacher-forcing call, if it has any.
    pub fn backend_stats(&self) -> Option<serde_json::Value> {
        self.backend.stats()
    }

    /// The backend's sessions (several where the program was compiled with `max_sessions`, else one).
    pub fn slots(&mut self) -> crate::backend::Slots<'_> {
        crate::backend::Slots(self.backend.as_mut())
    }

    /// The context length of the backend in positions.
    pub fn context_length(&self) -> usize {
        self.backend.context_length()
    }

    /// Token ids that end generation when `GenerateParams::stop` is empty.
    pub fn end_tokens(&self) -> &[u32] {
        &self.end_tokens
    }

    /// Feeds `ids` from position 0 (for timing one-token passes after it: [`timed_step`](Self::timed_step)).
    pub fn prefill(&mut self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            bail!("the prompt is empty: there is nothing to continue");
        }
        self.backend.reset();
        self.backend.forward(ids, false)?;
        Ok(())
    }

    /// One one-token pass of `id` at the next position; its seconds.
    pub fn timed_step(&mut self, id: u32) -> Result<f64> {
        if self.backend.position() >= self.backend.context_length() {
            bail!("the context is full ({} positions)", self.backend.context_length());
        }
        let t = Instant::now();
        self.backend.forward(&[id], false)?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// Generates from `prompt_ids`, calling `on_text` with each newly decoded piece of text.
    pub fn generate(&mut self, prompt_ids: &[u32], params: &GenerateParams, mut on_text: impl FnMut(&str)) -> Result<Generation> {
        if prompt_ids.is_empty() {
            bail!("the prompt is empty: there is nothing to continue");
        }
        params.sampling.validate()?;
        let stop = if params.stop.is_empty() { self.end_tokens.clone() } else { params.stop.clone() };
        let mut sampler = Sampler::new(params.sampling.clone());
        let mut decoder = self.tokenizer.stream_decoder();
        self.backend.reset();
        let t0 = Instant::now();
        let mut logits = self.backend.forward(prompt_ids, false)?.pop().expect("one row of logits");
        let prefill_seconds = t0.elapsed().as_secs_f64();
        let (mut generated, mut text) = (Vec::new(), String::new());
        let (mut decode_seconds, mut decode_steps) = (0.0, 0);
        let reason = loop {
            if generated.len() >= params.max_tokens {
                break StopReason::MaxTokens;
            }
            let id = sampler.sample(&logits);
            generated.push(id);
            // a stop token ends the text and is not part of it (chat output never shows `<|im_end|>`)
            if stop.contains(&id) {
                break StopReason::StopToken;
            }
            let piece = decoder.push(id)?;
            on_text(&piece);
            text += &piece;
            if generated.len() >= params.max_tokens {
                break StopReason::MaxTokens;
            }
            if self.backend.position() >= self.backend.context_length() {
                break StopReason::ContextFull;
            }
            let t = Instant::now();
            logits = self.backend.forward(&[id], false)?.pop().expect("one row of logits");
            decode_seconds += t.elapsed().as_secs_f64();
            decode_steps += 1;
        };
        let tail = decoder.finish()?;
        on_text(&tail);
        text += &tail;
        Ok(Generation {
            prompt_ids: prompt_ids.to_vec(),
            generated_ids: generated,
            text,
            stop: reason,
            prefill_seconds,
            decode_seconds,
            decode_steps,
        })
    }

    /// The logits at every position of `ids`, fed at once from position 0 (teacher forcing).
    pub fn teacher_force(&mut self, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
        if ids.is_empty() {
            bail!("teacher forcing needs at least one token");
        }
        self.backend.reset();
        self.backend.forward(ids, true)
    }

    /// Teacher forcing as generation runs it: the first `prompt` tokens of `ids` as one prefill pass, then
    /// each further token as its own decode pass (where routers skip blocks: a prefill executes every
    /// block). The logits at every position.
    pub fn teacher_force_decoding(&mut self, ids: &[u32], prompt: usize) -> Result<Vec<Vec<f32>>> {
        if prompt == 0 || prompt > ids.len() {
            bail!("teacher forcing needs a prompt of 1..={} tokens, got {prompt}", ids.len());
        }
        self.backend.reset();
        let mut logits = self.backend.forward(&ids[..prompt], true)?;
        for &id in &ids[prompt..] {
            logits.extend(self.backend.forward(&[id], false)?);
        }
        Ok(logits)
    }
}

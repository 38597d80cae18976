//! The reference path: the llama forward pass in f32 over candle tensors, with every weight dequantized
//! exactly (`q * d + m`, as `opu_hw::numerics::weights` defines it) and float activations. It is the float
//! truth the overlay is measured against, and the fallback when no OPU card is present.
//!
//! Not candle-transformers' `quantized_llama`: its Q4_1 matmul rounds activations to 8 bits (Q8_1), which
//! disagrees with both the float model and the overlay.

use crate::backend::Backend;
use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use opu_compiler::gguf::Gguf;
use opu_compiler::llama::{tensor, LayerNames, LlamaConfig, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};

struct Layer {
    attn_norm: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    ffn_norm: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
}

/// A llama model in f32 on a candle device, with its KV cache.
pub struct ReferenceModel {
    pub cfg: LlamaConfig,
    device: Device,
    embed: Tensor,
    layers: Vec<Layer>,
    out_norm: Tensor,
    output: Tensor,
    /// Per layer: K and V of every position so far, `(n_head_kv, positions, head_dim)`.
    cache: Vec<Option<(Tensor, Tensor)>>,
    pos: usize,
    label: String,
}

/// The device the reference path runs on: CUDA when built with the `cuda` feature and a GPU is there.
pub fn default_device() -> (Device, &'static str) {
    #[cfg(feature = "cuda")]
    if let Ok(d) = Device::new_cuda(0) {
        return (d, "gpu");
    }
    (Device::Cpu, "cpu")
}

impl ReferenceModel {
    /// Limits the context to `max` positions (`--max-context`), as the compiler sizes the overlay backends'
    /// KV caches: at most the model's own, at least 1.
    pub fn limit_context(&mut self, max: Option<usize>) -> Result<()> {
        if let Some(max) = max {
            anyhow::ensure!(max >= 1, "--max-context must be at least 1");
            self.cfg.context_length = self.cfg.context_length.min(max);
        }
        Ok(())
    }

    /// Loads a llama GGUF, dequantizing every tensor to f32.
    pub fn load(g: &Gguf, device: Device, device_name: &str) -> Result<Self> {
        let cfg = LlamaConfig::from_gguf(g)?;
        let load = |name: &str| -> Result<Tensor> {
            let t = tensor(g, name)?;
            let data = g.dequantize(t)?;
            let (rows, cols) = t.matrix_shape();
            let shape: Vec<usize> = if t.dims.len() == 1 { vec![cols as usize] } else { vec![rows as usize, cols as usize] };
            Tensor::from_vec(data, shape, &device).with_context(|| format!("{}: tensor `{name}`", g.path.display()))
        };
        let layers = (0..cfg.n_layer)
            .map(|l| {
                let n = LayerNames::new(l);
                Ok(Layer {
                    attn_norm: load(&n.attn_norm)?,
                    wq: load(&n.wq)?,
                    wk: load(&n.wk)?,
                    wv: load(&n.wv)?,
                    wo: load(&n.wo)?,
                    ffn_norm: load(&n.ffn_norm)?,
                    w_gate: load(&n.w_gate)?,
                    w_up: load(&n.w_up)?,
                    w_down: load(&n.w_down)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = load(TOKEN_EMBD)?;
        let output = if cfg.tied_output { embed.clone() } else { load(OUTPUT)? };
        let threads = candle_core::utils::get_num_threads();
        let label = format!("reference (candle {device_name}, {threads} thread{})", if threads == 1 { "" } else { "s" });
        Ok(ReferenceModel {
            cache: vec![None; cfg.n_layer],
            out_norm: load(OUTPUT_NORM)?,
            embed,
            output,
            layers,
            cfg,
            device,
            pos: 0,
            label,
        })
    }

    /// cos and sin for positions `pos..pos+n`, shape `(n, head_dim/2)`: the same table the compiler writes
    /// for the overlay (`opu_hw::numerics::vector::rope_table_row`).
    fn rope_tables(&self, n: usize) -> Result<(Tensor, Tensor)> {
        let half = self.cfg.head_dim / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(n * half), Vec::with_capacity(n * half));
        for p in self.pos..self.pos + n {
            for (c, s) in opu_hw::numerics::vector::rope_table_row(p as u32, self.cfg.head_dim as u32, f64::from(self.cfg.rope_theta)) {
                cos.push(c);
                sin.push(s);
            }
        }
        Ok((Tensor::from_vec(cos, (n, half), &self.device)?, Tensor::from_vec(sin, (n, half), &self.device)?))
    }

    /// Runs `tokens` at the next positions; returns the hidden states after the final norm, `(n, n_embd)`.
    fn forward_hidden(&mut self, tokens: &[u32]) -> Result<Tensor> {
        let c = self.cfg.clone();
        let (t, h, hkv, hd) = (tokens.len(), c.n_head, c.n_head_kv, c.head_dim);
        let group = h / hkv;
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let (cos, sin) = self.rope_tables(t)?;
        let s = self.pos + t;
        // Causal mask over all positions so far: new token i (at pos + i) sees positions 0..=pos+i.
        let pos = self.pos;
        let mask: Vec<f32> = (0..t).flat_map(|i| (0..s).map(move |j| if j <= pos + i { 0.0 } else { f32::NEG_INFINITY })).collect();
        let mask = Tensor::from_vec(mask, (t, s), &self.device)?;
        let scale = 1.0 / (hd as f64).sqrt();
        for (l, layer) in self.layers.iter().enumerate() {
            let xn = candle_nn::ops::rms_norm(&x, &layer.attn_norm, c.rms_eps)?;
            let heads = |w: &Tensor, n: usize| -> Result<Tensor> {
                Ok(xn.matmul(&w.t()?)?.reshape((1, t, n, hd))?.transpose(1, 2)?.contiguous()?)
            };
            // GGUF's llama tensors are laid out for the interleaved-pair ("normal") RoPE.
            let q = candle_nn::rotary_emb::rope_i(&heads(&layer.wq, h)?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope_i(&heads(&layer.wk, hkv)?, &cos, &sin)?.squeeze(0)?;
            let v = heads(&layer.wv, hkv)?.squeeze(0)?;
            let (k, v) = match self.cache[l].take() {
                Some((pk, pv)) => (Tensor::cat(&[&pk, &k], 1)?, Tensor::cat(&[&pv, &v], 1)?),
                None => (k, v),
            };
            // Grouped-query attention: query head g*group.. share KV head g.
            let q = q.reshape((hkv, group * t, hd))?;
            let scores = (q.matmul(&k.t()?)? * scale)?.reshape((hkv, group, t, s))?.broadcast_add(&mask)?;
            let p = candle_nn::ops::softmax_last_dim(&scores)?.reshape((hkv, group * t, s))?;
            let att = p.matmul(&v)?.reshape((h, t, hd))?.transpose(0, 1)?.reshape((t, h * hd))?;
            self.cache[l] = Some((k, v));
            x = (x + att.matmul(&layer.wo.t()?)?)?;
            let xn = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, c.rms_eps)?;
            let gate = candle_nn::ops::silu(&xn.matmul(&layer.w_gate.t()?)?)?;
            let up = xn.matmul(&layer.w_up.t()?)?;
            x = (x + (gate * up)?.matmul(&layer.w_down.t()?)?)?;
        }
        self.pos = s;
        Ok(candle_nn::ops::rms_norm(&x, &self.out_norm, c.rms_eps)?)
    }
}

impl Backend for ReferenceModel {
    fn name(&self) -> &str {
        &self.label
    }

    fn vocab_size(&self) -> usize {
        self.cfg.vocab
    }

    fn context_length(&self) -> usize {
        self.cfg.context_length
    }

    fn position(&self) -> usize {
        self.pos
    }

    fn reset(&mut self) {
        self.cache.iter_mut().for_each(|c| *c = None);
        self.pos = 0;
    }

    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<Vec<f32>>> {
        self.check_input(tokens)?;
        let hidden = self.forward_hidden(tokens)?;
        let rows = if all_logits { hidden } else { hidden.narrow(0, tokens.len() - 1, 1)? };
        let logits = rows.matmul(&self.output.t()?)?.to_dtype(DType::F32)?;
        Ok(logits.to_device(&Device::Cpu)?.to_vec2::<f32>()?)
    }
}

/// Softmax-free helper for tests and eval: the index of the largest logit (ties: lowest index).
pub fn argmax(logits: &[f32]) -> u32 {
    opu_hw::numerics::vector::argmax(logits.iter().copied())
}

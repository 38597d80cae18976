//! Small synthetic llama models for tests: real GGUF files (Q4_1 / F16 / Q8_0 / F32 tensors, llama metadata)
//! with seeded random weights, fast enough for the simulators in debug builds; and a small CNN.

use crate::gguf::{GgufWriter, Value};
use crate::keras::{Activation, KerasModel, Layer};
use crate::llama::{LayerNames, OUTPUT_NORM, TOKEN_EMBD};
use crate::routers::{Block, Router, Routers};
use opu_hw::numerics::weights::{quantize_block, WeightFormat};
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::BLOCK;

/// Shape of a synthetic model.
#[derive(Clone, Copy, Debug)]
pub struct TinyLlama {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub vocab: usize,
    pub context: usize,
    pub seed: u64,
    /// The layers' matrices: Q4_1 (`W4Min`, the default) or F16.
    pub matrices: WeightFormat,
}

impl Default for TinyLlama {
    fn default() -> Self {
        TinyLlama { n_layer: 2, n_embd: 64, n_head: 4, n_head_kv: 2, n_ff: 128, vocab: 96, context: 64, seed: 1, matrices: WeightFormat::W4Min }
    }
}

/// xorshift64*: a tiny deterministic generator (no dependency, same numbers everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        v as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

impl TinyLlama {
    /// The GGUF bytes. Matrices are Q4_1 or F16 (`matrices`; the embedding Q8_0, tied to the output), norms F32.
    pub fn gguf(&self) -> Vec<u8> {
        let mut rng = Rng(self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut w = GgufWriter::new();
        let tokens: Vec<Value> = (0..self.vocab).map(|i| Value::String(format!("t{i}"))).collect();
        w.kv("general.architecture", Value::String("llama".into()))
            .kv("general.name", Value::String("tiny-llama".into()))
            .kv("llama.block_count", Value::U32(self.n_layer as u32))
            .kv("llama.embedding_length", Value::U32(self.n_embd as u32))
            .kv("llama.feed_forward_length", Value::U32(self.n_ff as u32))
            .kv("llama.attention.head_count", Value::U32(self.n_head as u32))
            .kv("llama.attention.head_count_kv", Value::U32(self.n_head_kv as u32))
            .kv("llama.context_length", Value::U32(self.context as u32))
            .kv("llama.rope.freq_base", Value::F32(10000.0))
            .kv("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
            .kv("tokenizer.ggml.tokens", Value::Array(tokens));
        let mut matrix = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, fmt: WeightFormat, scale: f32| {
            let mut bytes = Vec::new();
            if fmt == WeightFormat::F16 {
                bytes.extend((0..rows * cols).flat_map(|_| f32_to_f16(rng.next() * scale).to_le_bytes()));
            } else {
                for _ in 0..rows * cols / BLOCK {
                    let x: [f32; BLOCK] = std::array::from_fn(|_| rng.next() * scale);
                    quantize_block(fmt, &x, &mut bytes);
                }
            }
            let ty = match fmt {
                WeightFormat::W4Min => 3,
                WeightFormat::W8 => 8,
                WeightFormat::F16 => 1,
                WeightFormat::W4 => unreachable!("tiny models use Q4_1, F16 and Q8_0"),
            };
            w.tensor(name, &[cols as u64, rows as u64], ty, bytes);
        };
        let (e, kv, f, m) = (self.n_embd, self.n_head_kv * (self.n_embd / self.n_head), self.n_ff, self.matrices);
        let norm = |w: &mut GgufWriter, name: &str| {
            let g: Vec<u8> = (0..e).flat_map(|i| (1.0 + 0.25 * ((i as f32) * 0.37).sin()).to_le_bytes()).collect();
            w.tensor(name, &[e as u64], 0, g);
        };
        matrix(&mut w, TOKEN_EMBD, self.vocab, e, WeightFormat::W8, 1.0);
        for l in 0..self.n_layer {
            let n = LayerNames::new(l);
            let s = 1.0 / (e as f32).sqrt() * 2.0;
            norm(&mut w, &n.attn_norm);
            matrix(&mut w, &n.wq, e, e, m, s);
            matrix(&mut w, &n.wk, kv, e, m, s);
            matrix(&mut w, &n.wv, kv, e, m, s);
            matrix(&mut w, &n.wo, e, e, m, s);
            norm(&mut w, &n.ffn_norm);
            matrix(&mut w, &n.w_gate, f, e, m, s);
            matrix(&mut w, &n.w_up, f, e, m, s);
            matrix(&mut w, &n.w_down, e, f, m, 1.0 / (f as f32).sqrt() * 2.0);
        }
        norm(&mut w, OUTPUT_NORM);
        w.to_bytes()
    }
}

/// Routers with seeded random weights for `blocks` of layers `1..n_layer` (layer 0 always executes): each
/// decision depends on the token's residual, about half of them skip.
pub fn random_routers(n_layer: usize, hidden: usize, seed: u64, blocks: &[Block]) -> Routers {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut r = Routers::none(n_layer, hidden);
    for l in 1..n_layer {
        for &b in blocks {
            let weight = (0..2 * hidden).map(|_| rng.next() * 0.25).collect();
            r.layers[l][b as usize] = Some(Router { weight, bias: [rng.next() * 0.1, rng.next() * 0.1] });
        }
    }
    r
}

/// A small CNN as the Keras reader gives it: 5x5x2 -> conv 3x3 -> 3 channels (same, ReLU) -> maxpool 2 -> flatten ->
/// dense 4 (softmax), weights from a fixed sequence.
pub fn tiny_cnn() -> KerasModel {
    let mut v = 0.37f32;
    let mut next = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                v = (v * 7.31 + 0.11).fract();
                v - 0.5
            })
            .collect()
    };
    KerasModel {
        path: "tiny.keras".into(),
        input: [5, 5, 2],
        layers: vec![
            Layer::Conv2D { name: "conv".into(), kernel_size: [3, 3], strides: [1, 1], same: true, filters: 3, activation: Activation::Relu, kernel: next(54), bias: next(3) },
            Layer::MaxPool2D { name: "pool".into(), pool: [2, 2], strides: [2, 2] },
            Layer::Flatten { name: "flatten".into() },
            Layer::Dense { name: "dense".into(), units: 4, activation: Activation::Softmax, kernel: next(48), bias: next(4) },
        ],
        shapes: vec![[5, 5, 3], [2, 2, 3], [1, 1, 12], [1, 1, 4]],
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::parse_bytes;
    use crate::llama::LlamaConfig;

    #[test]
    fn tiny_llama_is_a_valid_llama_and_compiles_for_both_presets() {
        let g = parse_bytes(&TinyLlama::default().gguf(), "tiny.gguf").unwrap();
        let cfg = LlamaConfig::from_gguf(&g).unwrap();
        assert_eq!((cfg.n_layer, cfg.head_dim, cfg.vocab, cfg.tied_output), (2, 16, 96, true));
        for preset in ["sim", "u280"] {
            let config = opu_hw::OverlayConfig::preset(preset).unwrap();
            let c = crate::compile(&g, &config, &Default::default()).unwrap();
            c.container.check_config(&config).unwrap();
            assert_eq!(c.meta.entries[1].ntok, config.max_batch as usize);
        }
    }

    #[test]
    fn a_tensor_whose_shape_contradicts_the_metadata_is_refused() {
        let mut bytes = TinyLlama::default().gguf();
        // Claim a wider FFN than the tensors have.
        let key = b"llama.feed_forward_length";
        let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
        bytes[at..at + 4].copy_from_slice(&256u32.to_le_bytes());
        let g = parse_bytes(&bytes, "lying.gguf").unwrap();
        let e = crate::compile(&g, &opu_hw::OverlayConfig::sim(), &Default::default()).err().unwrap().to_string();
        assert!(e.contains("lying.gguf") && e.contains("blk.0.ffn_gate.weight") && e.contains("has shape [64, 128], the metadata implies [64, 256]"), "{e}");
    }
}

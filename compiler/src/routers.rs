//! Per-token routers (SkipGPT): a linear map of a block's input to two logits, *execute* and *skip*, before
//! each attention and FFN block of layers 1.. (layer 0 always executes; docs/skipping.md).
//!
//! A routers file is safetensors, SkipGPT's shape: for each routed block a `[2, hidden]` weight (row 0 the
//! execute logit, row 1 the skip logit) and a `[2]` bias, named `blk.{l}.attn_router.{weight,bias}` and
//! `blk.{l}.ffn_router.{weight,bias}` (the GGUF tensor names of the layer). A block without a router always
//! executes. F32, F16 and BF16 tensors load; the overlay holds them as FP16 (`route`, docs/isa.md), rounded
//! once here with the numerics' `f32_to_f16`.

pub use crate::ir::Block;
use opu_hw::numerics::fp16::{f16_to_f32, f32_to_f16};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One router: `l_execute = w[0] . x + b[0]`, `l_skip = w[1] . x + b[1]`; the block is skipped when
/// `l_skip > l_execute`.
#[derive(Clone, Debug, PartialEq)]
pub struct Router {
    /// `[2][hidden]`, row-major: the execute row, then the skip row.
    pub weight: Vec<f32>,
    /// `[b_execute, b_skip]`.
    pub bias: [f32; 2],
}

impl Router {
    /// A router whose decision does not depend on its input: always skip, or always execute.
    pub fn constant(hidden: usize, skip: bool) -> Self {
        Router { weight: vec![0.0; 2 * hidden], bias: if skip { [0.0, 1.0] } else { [1.0, 0.0] } }
    }

    /// The decision on a block input `x` (FP32 values, rounded to FP16 as the overlay holds them), by the
    /// overlay's rule (`opu_hw::numerics::router::route`): true when the block is skipped.
    pub fn skips(&self, x: &[f32]) -> bool {
        let h = self.weight.len() / 2;
        let q = |v: &[f32]| v.iter().map(|&x| f32_to_f16(x)).collect::<Vec<u16>>();
        let (xq, w) = (q(x), q(&self.weight));
        opu_hw::numerics::router::route(&xq, &w[..h], &w[h..], [f32_to_f16(self.bias[0]), f32_to_f16(self.bias[1])]).2
    }

    /// The router's `route` operand as the overlay reads it (docs/isa.md): the execute row and the skip row
    /// as FP16, then the two FP16 biases. With `hidden` a multiple of 16 each row and the biases start on a
    /// 32-byte line.
    pub fn device_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.weight.len() * 2 + 4);
        for &w in self.weight.iter().chain(&self.bias) {
            out.extend_from_slice(&f32_to_f16(w).to_le_bytes());
        }
        out
    }
}

/// The routers of a model: `layers[l][block]`, `None` where the block always executes.
#[derive(Clone, Debug, PartialEq)]
pub struct Routers {
    pub hidden: usize,
    pub layers: Vec<[Option<Router>; 2]>,
}

/// Why a routers file was refused: the file, the tensor and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("{file}: {what}")]
    File { file: String, what: String },
    #[error("{file}: tensor `{tensor}`: {what}")]
    Tensor { file: String, tensor: String, what: String },
}

/// Which block and part a tensor name means: `blk.{l}.{attn|ffn}_router.{weight|bias}`.
fn parse_name(name: &str) -> Option<(usize, Block, bool)> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (block, part) = rest.split_once("_router.")?;
    let block = match block {
        "attn" => Block::Attention,
        "ffn" => Block::Ffn,
        _ => return None,
    };
    match part {
        "weight" => Some((layer, block, true)),
        "bias" => Some((layer, block, false)),
        _ => None,
    }
}

/// The tensor name of a router's weight (`part` = "weight") or bias ("bias").
pub fn tensor_name(layer: usize, block: Block, part: &str) -> String {
    format!("blk.{layer}.{}_router.{part}", block.name())
}

/// A tensor's values as f32 (F32, F16 or BF16, little-endian).
fn values(t: &TensorView<'_>) -> Result<Vec<f32>, String> {
    let d = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => d.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        Dtype::F16 => d.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
        Dtype::BF16 => d.chunks_exact(2).map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)).collect(),
        other => return Err(format!("dtype {other:?}, expected F32, F16 or BF16")),
    })
}

impl Routers {
    /// No routers: every block executes.
    pub fn none(n_layer: usize, hidden: usize) -> Self {
        Routers { hidden, layers: vec![[None, None]; n_layer] }
    }

    pub fn get(&self, layer: usize, block: Block) -> Option<&Router> {
        self.layers.get(layer)?[block as usize].as_ref()
    }

    /// Number of routed blocks.
    pub fn count(&self) -> usize {
        self.layers.iter().flatten().filter(|r| r.is_some()).count()
    }

    /// Loads a routers file for a model of `n_layer` layers and `hidden` = n_embd.
    pub fn load(path: &Path, n_layer: usize, hidden: usize) -> Result<Self, RouterError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| RouterError::File { file: file.clone(), what: format!("cannot read: {e}") })?;
        Self::from_bytes(&bytes, &file, n_layer, hidden)
    }

    /// Parses routers from safetensors bytes; `file` names them in errors.
    pub fn from_bytes(bytes: &[u8], file: &str, n_layer: usize, hidden: usize) -> Result<Self, RouterError> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| RouterError::File { file: file.into(), what: format!("not a valid safetensors file: {e}") })?;
        let err = |tensor: &str, what: String| RouterError::Tensor { file: file.into(), tensor: tensor.into(), what };
        // (layer, block) -> (weight, bias)
        let mut parts: BTreeMap<(usize, Block), (Option<Vec<f32>>, Option<[f32; 2]>)> = BTreeMap::new();
        let mut tensors = st.tensors();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in &tensors {
            let Some((layer, block, is_weight)) = parse_name(name) else {
                return Err(err(name, "not a router tensor: expected blk.N.attn_router.weight|bias or blk.N.ffn_router.weight|bias".into()));
            };
            if layer == 0 {
                return Err(err(name, "layer 0 always executes (its K/V fill the history buffer); it takes no router".into()));
            }
            if layer >= n_layer {
                return Err(err(name, format!("layer {layer}, the model has {n_layer} layers")));
            }
            let expected: Vec<usize> = if is_weight { vec![2, hidden] } else { vec![2] };
            if t.shape() != expected.as_slice() {
                return Err(err(name, format!("shape {:?}, expected {expected:?} (hidden = {hidden})", t.shape())));
            }
            let v = values(t).map_err(|what| err(name, what))?;
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(err(name, format!("element {i} is {}, expected a finite value", v[i])));
            }
            let entry = parts.entry((layer, block)).or_default();
            if is_weight {
                entry.0 = Some(v);
            } else {
                entry.1 = Some([v[0], v[1]]);
            }
        }
        let mut routers = Routers::none(n_layer, hidden);
        for ((layer, block), (w, b)) in parts {
            match (w, b) {
                (Some(weight), Some(bias)) => routers.layers[layer][block as usize] = Some(Router { weight, bias }),
                (Some(_), None) => return Err(err(&tensor_name(layer, block, "bias"), "missing (its weight is in the file)".into())),
                (None, _) => return Err(err(&tensor_name(layer, block, "weight"), "missing (its bias is in the file)".into())),
            }
        }
        Ok(routers)
    }

    /// The safetensors bytes (F32 tensors), with `metadata` in the header.
    pub fn to_bytes(&self, metadata: HashMap<String, String>) -> Vec<u8> {
        let mut data: Vec<(String, Vec<u8>, Vec<usize>)> = Vec::new();
        for (l, blocks) in self.layers.iter().enumerate() {
            for block in Block::ALL {
                if let Some(r) = &blocks[block as usize] {
                    data.push((tensor_name(l, block, "weight"), r.weight.iter().flat_map(|x| x.to_le_bytes()).collect(), vec![2, self.hidden]));
                    data.push((tensor_name(l, block, "bias"), r.bias.iter().flat_map(|x| x.to_le_bytes()).collect(), vec![2]));
                }
            }
        }
        let views = data.iter().map(|(n, b, s)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).expect("sizes match the shapes")));
        safetensors::serialize(views, (!metadata.is_empty()).then_some(metadata)).expect("router tensors serialize")
    }

    pub fn save(&self, path: &Path, metadata: HashMap<String, String>) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes(metadata))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n_layer: usize, hidden: usize) -> Routers {
        let mut r = Routers::none(n_layer, hidden);
        let w: Vec<f32> = (0..2 * hidden).map(|i| (i as f32 * 0.37).sin()).collect();
        r.layers[1][0] = Some(Router { weight: w.clone(), bias: [0.5, -0.25] });
        r.layers[2][1] = Some(Router { weight: w.iter().map(|x| -x).collect(), bias: [0.0, 1.0] });
        r
    }

    #[test]
    fn routers_round_trip_through_safetensors() {
        let r = sample(3, 32);
        let bytes = r.to_bytes(HashMap::from([("opu.skip_rate".into(), "0.25".into())]));
        let back = Routers::from_bytes(&bytes, "r.safetensors", 3, 32).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.count(), 2);
        assert!(back.get(1, Block::Attention).is_some() && back.get(1, Block::Ffn).is_none());
        // the device operand: 2 x 32 FP16 weights, then the biases
        let d = back.get(1, Block::Attention).unwrap().device_bytes();
        assert_eq!(d.len(), 4 * 32 + 4);
        assert_eq!(u16::from_le_bytes([d[128], d[129]]), f32_to_f16(0.5));
    }

    #[test]
    fn f16_and_bf16_tensors_load() {
        let one_f16 = f32_to_f16(1.0).to_le_bytes();
        let one_bf16 = ((1.0f32.to_bits() >> 16) as u16).to_le_bytes();
        let w: Vec<u8> = (0..2 * 16).flat_map(|_| one_f16).collect();
        let b: Vec<u8> = (0..2).flat_map(|_| one_bf16).collect();
        let bytes = safetensors::serialize(
            [
                ("blk.1.ffn_router.weight", TensorView::new(Dtype::F16, vec![2, 16], &w).unwrap()),
                ("blk.1.ffn_router.bias", TensorView::new(Dtype::BF16, vec![2], &b).unwrap()),
            ],
            None,
        )
        .unwrap();
        let r = Routers::from_bytes(&bytes, "h.safetensors", 2, 16).unwrap();
        let ffn = r.get(1, Block::Ffn).unwrap();
        assert!(ffn.weight.iter().all(|&x| x == 1.0) && ffn.bias == [1.0, 1.0]);
    }

    #[test]
    fn bad_routers_files_are_refused_naming_the_file_and_the_tensor() {
        let good = sample(3, 32).to_bytes(HashMap::new());
        let e = |bytes: &[u8], n_layer: usize, hidden: usize| Routers::from_bytes(bytes, "bad.safetensors", n_layer, hidden).unwrap_err().to_string();
        // truncated
        let t = e(&good[..good.len() - 7], 3, 32);
        assert!(t.starts_with("bad.safetensors: not a valid safetensors file"), "{t}");
        assert!(e(&good[..5], 3, 32).starts_with("bad.safetensors: not a valid safetensors file"));
        // another model's hidden size
        let t = e(&good, 3, 64);
        assert_eq!(t, "bad.safetensors: tensor `blk.1.attn_router.weight`: shape [2, 32], expected [2, 64] (hidden = 64)");
        // fewer layers
        let t = e(&good, 2, 32);
        assert_eq!(t, "bad.safetensors: tensor `blk.2.ffn_router.bias`: layer 2, the model has 2 layers");
        let one = |name: &str, dtype: Dtype, shape: Vec<usize>, data: &[u8]| safetensors::serialize([(name, TensorView::new(dtype, shape, data).unwrap())], None).unwrap();
        let w32: Vec<u8> = vec![0; 2 * 32 * 4];
        // wrong dtype
        let t = e(&one("blk.1.attn_router.weight", Dtype::I32, vec![2, 32], &w32), 3, 32);
        assert_eq!(t, "bad.safetensors: tensor `blk.1.attn_router.weight`: dtype I32, expected F32, F16 or BF16");
        // a weight without its bias
        let t = e(&one("blk.1.attn_router.weight", Dtype::F32, vec![2, 32], &w32), 3, 32);
        assert_eq!(t, "bad.safetensors: tensor `blk.1.attn_router.bias`: missing (its weight is in the file)");
        // layer 0, an unknown name, a NaN
        let b: Vec<u8> = [0f32, f32::NAN].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(e(&one("blk.0.attn_router.bias", Dtype::F32, vec![2], &b), 3, 32).contains("layer 0 always executes"));
        assert!(e(&one("blk.1.router.bias", Dtype::F32, vec![2], &b), 3, 32).contains("tensor `blk.1.router.bias`: not a router tensor"));
        assert!(e(&one("blk.1.ffn_router.bias", Dtype::F32, vec![2], &b), 3, 32).ends_with("element 1 is NaN, expected a finite value"));
        // a file that is not there
        let t = Routers::load(Path::new("/nonexistent/r.safetensors"), 3, 32).unwrap_err().to_string();
        assert!(t.starts_with("/nonexistent/r.safetensors: cannot read"), "{t}");
    }
}

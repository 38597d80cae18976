//! Auto-scaled 16-bit fixed point for a CNN (after CNNA): the IR pass that picks each layer's binary points.
//!
//! Activations and weights are `i16`, each tensor with its own number of fraction bits (`opu_hw::numerics::
//! fixed`). The rule, CNNA's: every tensor gets the most fraction bits with which its largest magnitude still
//! fits 16 bits ([`frac_bits_for`]), so that nothing overflows and the least precision is lost:
//!
//! - a layer's **weights** from their largest magnitude (known at compile time);
//! - its **bias** is an `i32` in the product's format (`input + weight` fraction bits), exact unless the
//!   bias would not fit 32 bits, in which case the weights give up bits until it does;
//! - its **output** from the largest magnitude the f32 interpreter computes for that layer over the
//!   calibration images (after ReLU: a ReLU layer's range is its positive side), capped at the product's
//!   fraction bits (the requantizing shift cannot be negative);
//! - the **input** from the calibration images' largest value after the input scaling (the host quantizes
//!   the input, so the scaling costs nothing on the overlay);
//! - max-pooling and flattening keep their input's format (they move values, they compute none).
//!
//! Calibration images must be other images than the ones a model is evaluated on. An image brighter than
//! every calibration image saturates (`fixed::requantize` clamps) rather than wrapping.

use opu_hw::numerics::fixed::{frac_bits_for, to_fixed_i32};
use serde::{Deserialize, Serialize};

use crate::cnn::Network;
use crate::ir::Op;
use crate::llama::ModelError;

/// The largest output magnitude of every node over a set of calibration images.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub images: usize,
    /// By node index.
    pub node_max: Vec<f32>,
    /// The largest input value after the input scaling (the input itself without one).
    pub input_max: f32,
}

/// Runs the f32 interpreter over `images` (rows of the network's input, back to back) and records each
/// node's largest output magnitude.
pub fn calibrate(net: &Network, images: &[f32]) -> Result<Calibration, ModelError> {
    let index: std::collections::HashMap<&str, usize> = net.graph.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut node_max = vec![0f32; net.graph.nodes.len()];
    let mut interp = net.interpreter();
    let per = net.graph.inputs[0].shape.len();
    // in chunks, so that calibrating on many images does not keep all their activations at once
    for chunk in images.chunks(per * 64) {
        interp.forward_rows_observed(chunk, &mut |node, out| {
            let m = &mut node_max[index[node.name.as_str()]];
            *m = out.iter().fold(*m, |m, v| m.max(v.abs()));
        })?;
    }
    let input_max = match net.graph.nodes.first() {
        Some(n) if matches!(n.op, Op::Rescale { .. }) => node_max[0],
        _ => images.iter().fold(0f32, |m, v| m.max(v.abs())),
    };
    Ok(Calibration { images: images.len() / per, node_max, input_max })
}

/// The formats of one layer, as the `opu compile` report prints them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerScaling {
    /// The node (the Keras layer's name).
    pub node: String,
    /// `conv2d`, `dense`, `maxpool`, `flatten`.
    pub kind: String,
    /// Fraction bits of the input and the output.
    pub input_frac: u32,
    pub output_frac: u32,
    /// The largest output magnitude over the calibration images.
    pub output_max: f32,
    /// Layers with weights: the weights' largest magnitude and fraction bits, the bias's fraction bits
    /// (`input_frac + weight_frac`) and the requantizing right shift (`input + weight - output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightScaling>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightScaling {
    pub weight_max: f32,
    pub weight_frac: u32,
    pub bias_max: f32,
    pub bias_frac: u32,
    pub shift: u32,
    pub relu: bool,
}

/// Every layer's formats: the network in fixed point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FixedPlan {
    /// Fraction bits of the input the host writes (after the input scaling).
    pub input_frac: u32,
    pub input_max: f32,
    /// The layers the overlay runs, in order (the input scaling and a final softmax are the host's).
    pub layers: Vec<LayerScaling>,
    /// Calibration images the output ranges come from.
    pub calibration_images: usize,
}

impl FixedPlan {
    /// Fraction bits of the overlay's output (the logits).
    pub fn output_frac(&self) -> u32 {
        self.layers.last().map_or(self.input_frac, |l| l.output_frac)
    }
}

/// Picks every layer's formats (the module comment's rule). Nodes the overlay does not run (a `Rescale`
/// that is not the first node, a `Softmax` that is not the last) are refused, naming the node.
pub fn plan(net: &Network, cal: &Calibration) -> Result<FixedPlan, ModelError> {
    let w = |name: &str| &net.weights[name];
    let max_abs = |v: &[f32]| v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let input_frac = frac_bits_for(f64::from(cal.input_max));
    let mut frac = input_frac;
    let mut layers = Vec::new();
    let last = net.graph.nodes.len() - 1;
    for (i, node) in net.graph.nodes.iter().enumerate() {
        let unsupported = |what: &str| ModelError::Graph { what: format!("{}: node `{}` ({}): {what}", net.path.display(), node.name, node.op.kind()) };
        let out_max = cal.node_max[i];
        let (output_frac, weights) = match &node.op {
            Op::Rescale { .. } if i == 0 => continue,
            Op::Softmax if i == last => continue,
            Op::Conv2d { weight, bias, relu, .. } | Op::Dense { weight, bias, relu, .. } => {
                let (weight_max, bias_max) = (max_abs(w(weight)), max_abs(w(bias)));
                let mut weight_frac = frac_bits_for(f64::from(weight_max));
                // the bias is an i32 in the product's format: fewer weight bits where it would not fit
                while weight_frac > 0 && to_fixed_i32(f64::from(bias_max), frac + weight_frac).unsigned_abs() >= i32::MAX as u32 {
                    weight_frac -= 1;
                }
                let output_frac = frac_bits_for(f64::from(out_max)).min(frac + weight_frac);
                let bias_frac = frac + weight_frac;
                (output_frac, Some(WeightScaling { weight_max, weight_frac, bias_max, bias_frac, shift: bias_frac - output_frac, relu: *relu }))
            }
            Op::MaxPool { .. } | Op::Flatten => (frac, None),
            _ => return Err(unsupported("the overlay's CNN path runs conv2d, maxpool, flatten and dense (a rescale first, a softmax last)")),
        };
        layers.push(LayerScaling { node: node.name.clone(), kind: node.op.kind().into(), input_frac: frac, output_frac, output_max: out_max, weights });
        frac = output_frac;
    }
    Ok(FixedPlan { input_frac, input_max: cal.input_max, layers, calibration_images: cal.images })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnn::from_keras;

    #[test]
    fn formats_follow_the_ranges() {
        let net = from_keras(&crate::cnn::tests::tiny(), Some((1.0 / 255.0, 0.0))).unwrap();
        let images: Vec<f32> = (0..4 * 50).map(|i| ((i * 7919) % 256) as f32).collect();
        let cal = calibrate(&net, &images).unwrap();
        assert_eq!(cal.images, 4);
        assert!(cal.input_max <= 1.0 && cal.input_max > 0.9, "{}", cal.input_max);
        let p = plan(&net, &cal).unwrap();
        assert_eq!(p.input_frac, frac_bits_for(f64::from(cal.input_max)));
        let kinds: Vec<&str> = p.layers.iter().map(|l| l.kind.as_str()).collect();
        assert_eq!(kinds, ["conv2d", "maxpool", "flatten", "dense"]);
        for (l, node_max) in p.layers.iter().zip([cal.node_max[1], cal.node_max[2], cal.node_max[3], cal.node_max[4]]) {
            assert_eq!(l.output_max, node_max);
            // the most fraction bits that hold the range: one more would overflow
            assert!(f64::from(node_max) * f64::from(1u32 << l.output_frac) <= 32767.0);
            if let Some(ws) = &l.weights {
                // (at most 15 fraction bits, and no more than the product's)
                assert!(l.output_frac == ws.bias_frac.min(15) || f64::from(node_max) * f64::from(2u32 << l.output_frac) > 32767.0);
                assert!(f64::from(ws.weight_max) * f64::from(1u32 << ws.weight_frac) <= 32767.0);
                assert_eq!(ws.bias_frac, l.input_frac + ws.weight_frac);
                assert_eq!(ws.shift, ws.bias_frac - l.output_frac);
            }
        }
        // pooling and flattening keep the format
        assert_eq!((p.layers[1].input_frac, p.layers[1].output_frac), (p.layers[0].output_frac, p.layers[0].output_frac));
        assert_eq!(p.output_frac(), p.layers[3].output_frac);
    }
}

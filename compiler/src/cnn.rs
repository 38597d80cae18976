//! The Keras front end: a [`KerasModel`] (`crate::keras`) as a graph of the IR, with its weights.
//!
//! One node per layer: `Rescaling` -> [`Op::Rescale`], `Conv2D` -> [`Op::Conv2d`] (its ReLU fused),
//! `MaxPooling2D` -> [`Op::MaxPool`], `Flatten` -> [`Op::Flatten`] (Keras flattens channels-last data in HWC
//! order, which is the order our images are stored in, so it moves nothing), `Dense` -> [`Op::Dense`] (its
//! ReLU fused; a softmax becomes an [`Op::Softmax`] node after it). Kernels keep Keras' layouts. The graph's
//! input is the image as the user gives it; where the model expects it scaled first (the digit classifier
//! takes `pixels / 255`, as its package's inference code divides), an [`Op::Rescale`] node `input_scaling`
//! comes first.
//!
//! Only what the overlay can run is accepted here: square kernels and pools with equal strides, and `same`
//! padding only where it pads every side alike (an odd kernel whose output keeps `(n - 1) / stride + 1`
//! rows; TensorFlow pads the bottom and right more otherwise).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::interp::Interpreter;
use crate::ir::{Builder, Graph, Op, Shape};
use crate::keras::{Activation, KerasError, KerasModel, Layer};

/// A CNN on the IR: the graph and its f32 weights by tensor name.
#[derive(Clone, Debug)]
pub struct Network {
    /// The file it came from.
    pub path: PathBuf,
    pub graph: Graph,
    pub weights: HashMap<String, Vec<f32>>,
}

impl Network {
    /// The f32 interpreter of the network (the float reference).
    pub fn interpreter(&self) -> Interpreter {
        Interpreter::with_weights(self.graph.clone(), self.weights.clone(), &self.path.display().to_string())
            .expect("the front end builds a checked graph with its weights")
    }

    /// The input shape `[h, w, c]`.
    pub fn input_shape(&self) -> [usize; 3] {
        match self.graph.inputs[0].shape {
            Shape::Image { h, w, c } => [h, w, c],
            s => [1, 1, s.len()],
        }
    }

    /// The scaling of the input (`x * scale + offset`) where the graph starts with one: the host's side of
    /// the input on the overlay.
    pub fn input_scaling(&self) -> Option<(f32, f32)> {
        match self.graph.nodes.first().map(|n| &n.op) {
            Some(&Op::Rescale { scale, offset }) => Some((scale, offset)),
            _ => None,
        }
    }

    /// The number of classes (the output's length).
    pub fn classes(&self) -> usize {
        self.graph.nodes.last().map_or(0, |n| n.shape.len())
    }
}

/// Builds the graph of `model`; `input_scaling` (`x * scale + offset`) is put before the first layer. A
/// model whose first layer is a `Rescaling` scales its input itself: it takes no `input_scaling` (refused,
/// naming the layer: the input would be scaled twice).
pub fn from_keras(model: &KerasModel, input_scaling: Option<(f32, f32)>) -> Result<Network, KerasError> {
    if let (Some(_), Some(Layer::Rescaling { name, .. })) = (input_scaling, model.layers.first()) {
        return Err(KerasError::Layer {
            path: model.path.clone(),
            layer: name.clone(),
            class: "Rescaling".into(),
            what: "the model scales its input itself; an input scaling before it would scale twice (give none)".into(),
        });
    }
    let [h, w, c] = model.input;
    let mut b = Builder::new(0);
    let mut x = b.input("image", Shape::Image { h, w, c });
    let mut shape = Shape::Image { h, w, c };
    if let Some((scale, offset)) = input_scaling {
        x = b.node("input_scaling".into(), Op::Rescale { scale, offset }, &[x], shape);
    }
    let mut weights = HashMap::new();
    let path = &model.path;
    let layer_err = |name: &str, class: &str, what: String| KerasError::Layer { path: path.clone(), layer: name.into(), class: class.into(), what };
    for (layer, out) in model.layers.iter().zip(&model.shapes) {
        let image = |[h, w, c]: [usize; 3]| Shape::Image { h, w, c };
        match layer {
            Layer::Rescaling { name, scale, offset } => {
                x = b.node(name.clone(), Op::Rescale { scale: *scale, offset: *offset }, &[x], shape);
            }
            Layer::Conv2D { name, kernel_size, strides, same, filters, activation, kernel, bias } => {
                let err = |what: String| layer_err(name, "Conv2D", what);
                let Shape::Image { h, w, c } = shape else { return Err(err("takes an image".into())) };
                if kernel_size[0] != kernel_size[1] || strides[0] != strides[1] {
                    return Err(err(format!("kernel {kernel_size:?} and strides {strides:?}: the overlay's `conv` takes square kernels and equal strides")));
                }
                let (k, s) = (kernel_size[0], strides[0]);
                let pad = if *same {
                    let p = (k - 1) / 2;
                    let even = k % 2 == 1 && [h, w].iter().all(|&n| n.div_ceil(s) == (n + 2 * p - k) / s + 1 && ((n.div_ceil(s) - 1) * s + k).saturating_sub(n) == 2 * p);
                    if !even {
                        return Err(err(format!("`same` padding of a {k}x{k} kernel with stride {s} on a {h}x{w} input pads unevenly; the overlay pads every side alike")));
                    }
                    p
                } else {
                    0
                };
                let (wname, bname) = (format!("{name}.kernel"), format!("{name}.bias"));
                weights.insert(wname.clone(), kernel.clone());
                weights.insert(bname.clone(), bias.clone());
                let op = Op::Conv2d { weight: wname, bias: bname, kernel: k, stride: s, pad, in_channels: c, out_channels: *filters, relu: *activation == Activation::Relu };
                shape = image(*out);
                x = b.node(name.clone(), op, &[x], shape);
            }
            Layer::MaxPool2D { name, pool, strides } => {
                if pool[0] != pool[1] || strides[0] != strides[1] {
                    return Err(layer_err(name, "MaxPooling2D", format!("pool {pool:?} and strides {strides:?}: the overlay's `maxpool` takes square windows and equal strides")));
                }
                shape = image(*out);
                x = b.node(name.clone(), Op::MaxPool { kernel: pool[0], stride: strides[0] }, &[x], shape);
            }
            Layer::Flatten { name } => {
                shape = Shape::Vector(shape.len());
                x = b.node(name.clone(), Op::Flatten, &[x], shape);
            }
            Layer::Dense { name, units, activation, kernel, bias } => {
                let cols = shape.len();
                if matches!(shape, Shape::Image { .. }) {
                    x = b.node(format!("{name}.flatten"), Op::Flatten, &[x], Shape::Vector(cols));
                }
                let (wname, bname) = (format!("{name}.kernel"), format!("{name}.bias"));
                weights.insert(wname.clone(), kernel.clone());
                weights.insert(bname.clone(), bias.clone());
                shape = Shape::Vector(*units);
                x = b.node(name.clone(), Op::Dense { weight: wname, bias: bname, rows: *units, cols, relu: *activation == Activation::Relu }, &[x], shape);
                if *activation == Activation::Softmax {
                    x = b.node(format!("{name}.softmax"), Op::Softmax, &[x], shape);
                }
            }
        }
    }
    let mut graph = b.g;
    graph.output = x;
    let net = Network { path: model.path.clone(), graph, weights };
    net.graph.check_weights(&net.weights, &model.path.display().to_string()).map_err(|e| KerasError::File { path: model.path.clone(), what: e.to_string() })?;
    Ok(net)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use crate::testing::tiny_cnn as tiny;

    #[test]
    fn keras_layers_become_nodes() {
        let net = from_keras(&tiny(), Some((1.0 / 255.0, 0.0))).unwrap();
        let kinds: Vec<&str> = net.graph.nodes.iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds, ["rescale", "conv2d", "maxpool", "flatten", "dense", "softmax"]);
        let shapes: Vec<String> = net.graph.nodes.iter().map(|n| n.shape.to_string()).collect();
        assert_eq!(shapes, ["f32[5 x 5 x 2]", "f32[5 x 5 x 3]", "f32[2 x 2 x 3]", "f32[12]", "f32[4]", "f32[4]"]);
        assert!(matches!(net.graph.nodes[1].op, Op::Conv2d { pad: 1, relu: true, .. }));
        assert_eq!((net.input_shape(), net.classes()), ([5, 5, 2], 4));
    }

    /// The interpreter against the convolution, pooling and dense layer written out for one output each.
    #[test]
    fn interpreter_matches_plain_arithmetic() {
        let model = tiny();
        let net = from_keras(&model, None).unwrap();
        let img: Vec<f32> = (0..50).map(|i| ((i * 37 % 50) as f32) / 50.0).collect();
        let mut interp = net.interpreter();
        let mut seen: HashMap<String, Vec<f32>> = HashMap::new();
        let probs = interp.forward_rows_observed(&img, &mut |n, v| drop(seen.insert(n.name.clone(), v.to_vec()))).unwrap();
        let (Layer::Conv2D { kernel, bias, .. }, Layer::Dense { kernel: dk, bias: db, .. }) = (&model.layers[0], &model.layers[3]) else { panic!() };
        // conv output (y, x, o) = relu(b[o] + sum over the 3x3 window (zero padded) of x * k[ky][kx][i][o])
        let conv = |y: usize, x: usize, o: usize| {
            let mut s = 0f64;
            for ky in 0..3 {
                for kx in 0..3 {
                    let (iy, ix) = (y as isize + ky as isize - 1, x as isize + kx as isize - 1);
                    if (0..5).contains(&iy) && (0..5).contains(&ix) {
                        for i in 0..2 {
                            s += f64::from(img[(iy as usize * 5 + ix as usize) * 2 + i]) * f64::from(kernel[((ky * 3 + kx) * 2 + i) * 3 + o]);
                        }
                    }
                }
            }
            (s + f64::from(bias[o])).max(0.0)
        };
        for (y, x, o) in [(0, 0, 0), (2, 3, 1), (4, 4, 2)] {
            assert!((f64::from(seen["conv"][(y * 5 + x) * 3 + o]) - conv(y, x, o)).abs() < 1e-5);
        }
        let pooled: Vec<f64> = (0..12).map(|j| {
            let (p, o) = (j / 3, j % 3);
            let (py, px) = (p / 2, p % 2);
            [(0, 0), (0, 1), (1, 0), (1, 1)].iter().map(|(dy, dx)| conv(2 * py + dy, 2 * px + dx, o)).fold(f64::MIN, f64::max)
        }).collect();
        let logits: Vec<f64> = (0..4).map(|u| f64::from(db[u]) + (0..12).map(|i| pooled[i] * f64::from(dk[i * 4 + u])).sum::<f64>()).collect();
        let z: f64 = logits.iter().map(|l| l.exp()).sum();
        for u in 0..4 {
            assert!((f64::from(probs[u]) - logits[u].exp() / z).abs() < 1e-6, "{u}: {} vs {}", probs[u], logits[u].exp() / z);
        }
        // two images give each its own result
        let two = interp.forward_rows(&[img.clone(), img.iter().map(|v| 1.0 - v).collect()].concat()).unwrap();
        assert_eq!(&two[..4], &probs[..]);
    }

    #[test]
    fn a_models_own_rescaling_is_its_input_scaling() {
        let mut m = tiny();
        m.layers.insert(0, Layer::Rescaling { name: "rescaling".into(), scale: 0.5, offset: 0.25 });
        m.shapes.insert(0, [5, 5, 2]);
        assert_eq!(from_keras(&m, None).unwrap().input_scaling(), Some((0.5, 0.25)));
        let e = from_keras(&m, Some((1.0 / 255.0, 0.0))).unwrap_err().to_string();
        assert!(e.contains("tiny.keras") && e.contains("layer `rescaling` (Rescaling)") && e.contains("scale twice"), "{e}");
        assert_eq!(from_keras(&tiny(), None).unwrap().input_scaling(), None);
        assert_eq!(from_keras(&tiny(), Some((2.0, 1.0))).unwrap().input_scaling(), Some((2.0, 1.0)));
    }

    #[test]
    fn uneven_same_padding_and_wrong_weights_are_refused() {
        let mut m = tiny();
        if let Layer::Conv2D { strides, .. } = &mut m.layers[0] {
            *strides = [2, 2];
        }
        m.input = [6, 6, 2];
        let e = from_keras(&m, None).unwrap_err().to_string();
        assert!(e.contains("tiny.keras") && e.contains("layer `conv` (Conv2D)") && e.contains("pads unevenly"), "{e}");
        let mut m = tiny();
        if let Layer::Dense { bias, .. } = &mut m.layers[3] {
            bias.pop();
        }
        let e = from_keras(&m, None).unwrap_err().to_string();
        assert!(e.contains("tiny.keras") && e.contains("`dense.bias`") && e.contains("has 3 values, the node takes 4"), "{e}");
    }
}

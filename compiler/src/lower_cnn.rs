//! Lowering a CNN of the IR, in the formats of its [`FixedPlan`], to an OPU program (`conv`, `maxpool`).
//!
//! One pass classifies one image. The host writes the image, quantized to the plan's input format, as `i16`
//! HWC at `input_addr`; the program loads it into the scratchpad, runs every layer there (two buffers, each
//! layer reading one and writing the other), and stores the logits (`i16` in the last layer's format) at
//! `output_addr`. A dense layer is a `conv` of a 1x1 image with `cin` = its inputs and a 1x1 kernel
//! (docs/isa.md); flattening moves nothing, since the scratchpad already holds the HWC order Keras
//! flattens in. The softmax of a classifier's last layer is the host's, in f32, on the logits.
//!
//! Weights go to device memory as the ISA reads them: per layer the `i16` kernel `[cout][k][k][cin]`
//! (transposed from Keras' `[k][k][cin][cout]`; a dense kernel `[in][out]` to `[out][in]`), quantized with
//! `fixed::to_fixed`, then at the next multiple of 4 bytes the `i32` biases (`fixed::to_fixed_i32`).

use opu_hw::container::{Container, MemoryLayout};
use opu_hw::isa::{Csr, Instr, Reg, INSTR_BYTES};
use opu_hw::numerics::fixed::{to_fixed, to_fixed_i32, CONV_DIM_LIMIT, MAX_PRODUCTS};
use opu_hw::OverlayConfig;
use serde::{Deserialize, Serialize};

use crate::cnn::Network;
use crate::fixed_point::FixedPlan;
use crate::ir::{Op, Shape};
use crate::lower::{CompileError, Entry};
use crate::plan::{line, line_up, pad4, DevicePlan, SpmPlan};

/// What the runtime needs to run a compiled CNN (the container's META section).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CnnMeta {
    /// `opu-cnn-v1`.
    pub kind: String,
    pub model: String,
    /// `[h, w, c]` of the image the host writes.
    pub input: [usize; 3],
    /// What the host does to each input value before quantizing it: `x * scale + offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_scaling: Option<(f32, f32)>,
    pub input_addr: u64,
    /// The logits, `i16` with `plan.output_frac()` fraction bits.
    pub output_addr: u64,
    pub classes: usize,
    /// The host applies a softmax to the logits (the model's last layer has one).
    pub softmax: bool,
    pub entries: Vec<Entry>,
    /// Bytes of the weights and biases in device memory.
    pub weight_bytes: u64,
    /// Multiply-accumulates of one image.
    pub macs_per_image: u64,
    /// Every layer's formats.
    pub plan: FixedPlan,
}

/// A compiled CNN: the container and its meta.
pub struct CompiledCnn {
    pub container: Container,
    pub meta: CnnMeta,
}

/// One layer as the program runs it.
enum Step {
    /// `conv` with the weights at `w`.
    Conv { h: usize, w: usize, cin: usize, cout: usize, k: usize, stride: usize, pad: usize, shift: u32, relu: bool, addr: u64 },
    Maxpool { h: usize, w: usize, c: usize, k: usize, stride: usize },
}

/// Lowers `net` in the formats of `plan` for `config`.
pub fn compile_cnn(net: &Network, plan: &FixedPlan, config: &OverlayConfig) -> Result<CompiledCnn, CompileError> {
    let path = net.path.display().to_string();
    let unsupported = |what: String| CompileError::Unsupported { path: path.clone(), what };
    let fits = |what: String| CompileError::DoesNotFit { config: config.name.clone(), what };
    let [ih, iw, ic] = net.input_shape();

    let mut dplan = DevicePlan::default();
    // the code region is placed first and sized once the program is known: at most one instruction per CSR
    // and layer
    let steps_max = net.graph.nodes.len() * 10 + 4;
    let code_addr = dplan.place("code", "code", line_up((steps_max * INSTR_BYTES) as u64));
    let input_bytes = pad4((ih * iw * ic * 2) as u32);
    let input_addr = dplan.place("input", "io", line_up(u64::from(input_bytes)));
    let mut data = Vec::new();
    let mut steps = Vec::new();
    let mut shape = net.graph.inputs[0].shape;
    let mut scaling = plan.layers.iter();
    let (mut macs, mut weight_bytes) = (0u64, 0u64);
    let last = net.graph.nodes.len() - 1;
    for (i, node) in net.graph.nodes.iter().enumerate() {
        let at = |what: &str| format!("node `{}` ({}): {what}", node.name, node.op.kind());
        let image = |s: Shape| match s {
            Shape::Image { h, w, c } => (h, w, c),
            s => (1, 1, s.len()),
        };
        match &node.op {
            Op::Rescale { .. } if i == 0 => {}
            Op::Softmax if i == last => {}
            Op::Flatten => {
                scaling.next();
            }
            &Op::MaxPool { kernel, stride } => {
                scaling.next();
                let (h, w, c) = image(shape);
                if kernel > 15 || stride > 15 || h > 4095 || w > 4095 || c > 4095 {
                    return Err(unsupported(at("`maxpool` takes windows and strides up to 15 and images up to 4095 x 4095 x 4095")));
                }
                steps.push(Step::Maxpool { h, w, c, k: kernel, stride });
            }
            Op::Conv2d { .. } | Op::Dense { .. } => {
                let s = scaling.next().and_then(|l| l.weights.as_ref().map(|ws| (l, ws))).filter(|(l, _)| l.node == node.name);
                let Some((layer, ws)) = s else { return Err(unsupported(at("the fixed-point plan has no formats for it"))) };
                let (h, w, cin) = image(shape);
                let (kernel, bias) = (&net.weights[node.op.weight().expect("has weights")], &net.weights[node.op.bias().expect("has a bias")]);
                let (k, stride, pad, cout, relu) = match node.op {
                    Op::Conv2d { kernel, stride, pad, out_channels, relu, .. } => (kernel, stride, pad, out_channels, relu),
                    Op::Dense { rows, relu, .. } => (1, 1, 0, rows, relu),
                    _ => unreachable!(),
                };
                if [h, w, cin, cout, k, stride, pad].iter().any(|&v| v >= CONV_DIM_LIMIT as usize) {
                    return Err(unsupported(at(&format!("`conv` takes shapes below {CONV_DIM_LIMIT} (h {h}, w {w}, cin {cin}, cout {cout}, k {k}, stride {stride}, pad {pad})"))));
                }
                if k * k * cin > MAX_PRODUCTS || k * k * cin * 2 > config.max_conv_kernel_bytes() as usize {
                    return Err(unsupported(at(&format!(
                        "{} products per output: a `conv` kernel on this overlay holds at most {} bytes ({} products)",
                        k * k * cin,
                        config.max_conv_kernel_bytes(),
                        (config.max_conv_kernel_bytes() / 2).min(MAX_PRODUCTS as u32)
                    ))));
                }
                // [k][k][cin][cout] (a dense kernel [cin][cout] is the k = 1 case) to [cout][k][k][cin]
                let taps = k * k * cin;
                let mut bytes = Vec::with_capacity(pad4((taps * cout * 2) as u32) as usize + cout * 4);
                for o in 0..cout {
                    for t in 0..taps {
                        bytes.extend_from_slice(&to_fixed(f64::from(kernel[t * cout + o]), ws.weight_frac).to_le_bytes());
                    }
                }
                bytes.resize(pad4(bytes.len() as u32) as usize, 0);
                for &b in bias {
                    bytes.extend_from_slice(&to_fixed_i32(f64::from(b), ws.bias_frac).to_le_bytes());
                }
                weight_bytes += bytes.len() as u64;
                let addr = dplan.place(&node.name, "weights", bytes.len() as u64);
                data.push((addr, bytes));
                let (oh, ow) = ((h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1);
                macs += (oh * ow * cout * taps) as u64;
                steps.push(Step::Conv { h, w, cin, cout, k, stride, pad, shift: ws.shift, relu, addr });
                debug_assert_eq!(layer.node, node.name);
            }
            _ => return Err(unsupported(at("the overlay's CNN path runs conv2d, maxpool, flatten and dense (a rescale first, a softmax last)"))),
        }
        shape = node.shape;
    }
    let softmax = matches!(net.graph.nodes.last().map(|n| &n.op), Some(Op::Softmax));
    let classes = net.classes();
    let output_bytes = pad4((classes * 2) as u32);
    let output_addr = dplan.place("output", "io", line_up(u64::from(output_bytes)));
    if dplan.end() > config.device_memory_bytes {
        return Err(fits(format!("the network needs {} bytes of device memory, the overlay has {}", dplan.end(), config.device_memory_bytes)));
    }

    // Two scratchpad buffers, each as large as the largest activation.
    let largest = net.graph.nodes.iter().map(|n| n.shape.len()).chain([ih * iw * ic]).max().unwrap_or(0);
    let mut spm = SpmPlan::new(config.scratchpad_bytes);
    let need = pad4((largest * 2) as u32);
    let bufs = [spm.place("act0", need), spm.place("act1", need)];
    let [Some(a), Some(b)] = bufs else {
        return Err(fits(format!("two activations of {need} bytes do not fit the scratchpad of {} bytes", config.scratchpad_bytes)));
    };

    let r0 = Reg(0);
    let mut p = vec![Instr::Load { spm: a, mem: line(input_addr), bytes: input_bytes, idx: r0, stride: 0 }];
    let (mut src, mut dst) = (a, b);
    let csr = |p: &mut Vec<Instr>, csr: Csr, v: usize| p.push(Instr::Csrw { csr, rs: r0, imm: v as u32 });
    for s in &steps {
        match *s {
            Step::Conv { h, w, cin, cout, k, stride, pad, shift, relu, addr } => {
                for (c, v) in [(Csr::ConvH, h), (Csr::ConvW, w), (Csr::ConvCin, cin), (Csr::ConvCout, cout), (Csr::ConvK, k), (Csr::ConvStride, stride), (Csr::ConvPad, pad)] {
                    csr(&mut p, c, v);
                }
                p.push(Instr::Conv { relu, shift, dst, src, w: line(addr) });
            }
            Step::Maxpool { h, w, c, k, stride } => {
                p.push(Instr::Maxpool { k: k as u32, stride: stride as u32, h: h as u32, w: w as u32, c: c as u32, dst, src });
            }
        }
        (src, dst) = (dst, src);
    }
    p.push(Instr::Store { spm: src, mem: line(output_addr), bytes: output_bytes, idx: r0, stride: 0 });
    p.push(Instr::End {});
    debug_assert!(p.len() <= steps_max);

    let entries = vec![Entry { name: "classify".into(), ntok: 1, code_addr, instructions: p.len() }];
    let meta = CnnMeta {
        kind: "opu-cnn-v1".into(),
        model: net.path.file_stem().map_or("cnn".into(), |s| s.to_string_lossy().into_owned()),
        input: [ih, iw, ic],
        input_scaling: net.input_scaling(),
        input_addr,
        output_addr,
        classes,
        softmax,
        entries: entries.clone(),
        weight_bytes,
        macs_per_image: macs,
        plan: plan.clone(),
    };
    let mut c = Container::new(config);
    c.add_code("classify", code_addr, &p)?;
    for (i, (addr, bytes)) in data.into_iter().enumerate() {
        c.add_data(&format!("d{i}"), addr, bytes)?;
    }
    c.add_bss("input", input_addr, line_up(u64::from(input_bytes)))?;
    c.add_bss("output", output_addr, line_up(u64::from(output_bytes)))?;
    c.set_layout(&MemoryLayout { regions: dplan.regions })?;
    c.set_meta(&serde_json::to_value(&meta).expect("meta serializes"))?;
    c.check_config(config)?;
    Ok(CompiledCnn { container: c, meta })
}

impl CnnMeta {
    /// The host's side of the input: `x * scale + offset` then `i16` with the plan's input fraction bits,
    /// as the bytes to write at `input_addr`.
    pub fn quantize_input(&self, image: &[f32]) -> Vec<u8> {
        let (scale, offset) = self.input_scaling.unwrap_or((1.0, 0.0));
        let mut bytes: Vec<u8> = image.iter().flat_map(|&x| to_fixed(f64::from(x * scale + offset), self.plan.input_frac).to_le_bytes()).collect();
        bytes.resize(pad4(bytes.len() as u32) as usize, 0);
        bytes
    }

    /// The logits from the bytes at `output_addr`.
    pub fn logits(&self, bytes: &[u8]) -> Vec<f32> {
        let frac = self.plan.output_frac();
        bytes.chunks_exact(2).take(self.classes).map(|c| opu_hw::numerics::fixed::from_fixed(i16::from_le_bytes([c[0], c[1]]), frac) as f32).collect()
    }
}

//! The graph IR: a typed dataflow graph, one per network, whichever front end built it.
//!
//! A graph runs once per row of its input: a token of a language model, an image of a CNN. Every value is
//! one row's worth of data ([`Shape`]): a token id, a vector of f32, or an HWC image of f32. For a language
//! model the only state carried between rows is each layer's KV cache, which the [`Op::Attention`] node of
//! that layer reads and appends to; a CNN's rows are independent.
//!
//! Two front ends build graphs: [`build_llama`] from a GGUF llama's hyperparameters (weights named by their
//! GGUF tensor names, `[rows][cols]` as GGUF stores them, `dims = [cols, rows]`, the row fastest), and
//! `crate::cnn` from a Keras model (weights in Keras' channels-last layouts, named `<layer>.kernel` and
//! `<layer>.bias`). [`Graph::check`] checks the structure, [`Graph::validate`] a llama's weights against its
//! GGUF file and [`Graph::check_weights`] any graph's weights by length; `Display` prints one node per line.
//! `crate::interp` runs any graph in f32 (the float reference of every network).

use crate::gguf::Gguf;
use crate::llama::{tensor, LayerNames, LlamaConfig, ModelError, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use std::fmt;

/// A value of the graph: an input or the output of exactly one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The type of a value, per row (a token, an image).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One token id.
    Token,
    /// A vector of this many f32.
    Vector(usize),
    /// An image of f32, `[h][w][c]` (channels last).
    Image { h: usize, w: usize, c: usize },
}

impl Shape {
    /// Elements per row (a token id is one element).
    pub fn len(self) -> usize {
        match self {
            Shape::Token => 1,
            Shape::Vector(n) => n,
            Shape::Image { h, w, c } => h * w * c,
        }
    }
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Token => write!(f, "token"),
            Shape::Vector(n) => write!(f, "f32[{n}]"),
            Shape::Image { h, w, c } => write!(f, "f32[{h} x {w} x {c}]"),
        }
    }
}

/// An operation. Inputs are listed with each variant, in the order of [`Node::inputs`].
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `(token) -> table[token]`: row `token` of the `[vocab][dim]` table.
    Embedding { table: String, vocab: usize, dim: usize },
    /// `(x) -> x / sqrt(mean(x^2) + eps) * gain`.
    RmsNorm { gain: String, eps: f32 },
    /// `(x[cols]) -> W x`, `W` stored `[rows][cols]`.
    MatMul { weight: String, rows: usize, cols: usize },
    /// `(x[heads * head_dim]) -> x` with each head's interleaved pairs `(x[2i], x[2i+1])` rotated by
    /// `pos * theta^(-2i/head_dim)` (GGUF's "normal" RoPE), the table of `opu_hw::numerics::vector::rope_table_row`.
    Rope { heads: usize, head_dim: usize, theta: f32 },
    /// `(q[n_head * head_dim], k[n_head_kv * head_dim], v[n_head_kv * head_dim]) -> out[n_head * head_dim]`:
    /// appends k and v to layer `layer`'s KV cache, then each query head `h` attends causally over every cached
    /// position of KV head `h / (n_head / n_head_kv)` with scores `q.k / sqrt(head_dim)` and a softmax.
    Attention { n_head: usize, n_head_kv: usize, head_dim: usize, layer: usize },
    /// `(gate, up) -> silu(gate) * up`.
    SwiGlu,
    /// `(a, b) -> a + b`.
    Add,
    /// `(x) -> x * scale + offset` (Keras' `Rescaling`).
    Rescale { scale: f32, offset: f32 },
    /// `(x[h x w x in_channels]) -> y[oh x ow x out_channels]`: a 2-D convolution with `pad` zeros on every
    /// side, then the bias, then ReLU if `relu`. The kernel is stored `[kernel][kernel][in][out]` (Keras'
    /// HWIO), the bias `[out]`.
    Conv2d { weight: String, bias: String, kernel: usize, stride: usize, pad: usize, in_channels: usize, out_channels: usize, relu: bool },
    /// `(x[h x w x c]) -> the maximum of each `kernel x kernel` window, `stride` apart (no padding).
    MaxPool { kernel: usize, stride: usize },
    /// `(x[h x w x c]) -> the same values as a vector, in HWC order (Keras' `Flatten` of channels-last data).
    Flatten,
    /// `(x[cols]) -> x W + b`, then ReLU if `relu`: `W` stored `[cols][rows]` (Keras' `[in][units]`), `b` `[rows]`.
    Dense { weight: String, bias: String, rows: usize, cols: usize, relu: bool },
    /// `(x) -> exp(x - max x) / sum exp(x - max x)`.
    Softmax,
}

impl Op {
    /// Short name, for printing and counting.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Embedding { .. } => "embedding",
            Op::RmsNorm { .. } => "rmsnorm",
            Op::MatMul { .. } => "matmul",
            Op::Rope { .. } => "rope",
            Op::Attention { .. } => "attention",
            Op::SwiGlu => "swiglu",
            Op::Add => "add",
            Op::Rescale { .. } => "rescale",
            Op::Conv2d { .. } => "conv2d",
            Op::MaxPool { .. } => "maxpool",
            Op::Flatten => "flatten",
            Op::Dense { .. } => "dense",
            Op::Softmax => "softmax",
        }
    }

    /// The weight tensor this op reads, if any (a convolution's or dense layer's kernel; see [`Op::bias`]).
    pub fn weight(&self) -> Option<&str> {
        match self {
            Op::Embedding { table, .. } => Some(table),
            Op::RmsNorm { gain, .. } => Some(gain),
            Op::MatMul { weight, .. } | Op::Conv2d { weight, .. } | Op::Dense { weight, .. } => Some(weight),
            _ => None,
        }
    }

    /// The bias tensor this op reads, if any.
    pub fn bias(&self) -> Option<&str> {
        match self {
            Op::Conv2d { bias, .. } | Op::Dense { bias, .. } => Some(bias),
            _ => None,
        }
    }

    /// Every tensor the op reads, with its number of elements (given the node's output shape).
    pub fn tensor_lens(&self, out: Shape) -> Vec<(&str, usize)> {
        match self {
            Op::Conv2d { weight, bias, kernel, in_channels, out_channels, .. } => {
                vec![(weight.as_str(), kernel * kernel * in_channels * out_channels), (bias.as_str(), *out_channels)]
            }
            Op::Dense { weight, bias, rows, cols, .. } => vec![(weight.as_str(), rows * cols), (bias.as_str(), *rows)],
            _ => match (self.weight(), self.weight_dims(out)) {
                (Some(name), Some(dims)) => vec![(name, dims.iter().product::<u64>() as usize)],
                _ => vec![],
            },
        }
    }

    /// The GGUF dims (fastest first) the op implies for its weight, given the node's output shape.
    pub fn weight_dims(&self, out: Shape) -> Option<Vec<u64>> {
        match *self {
            Op::Embedding { vocab, dim, .. } => Some(vec![dim as u64, vocab as u64]),
            Op::RmsNorm { .. } => Some(vec![out.len() as u64]),
            Op::MatMul { rows, cols, .. } => Some(vec![cols as u64, rows as u64]),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Embedding { table, vocab, dim } => write!(f, "embedding {table} [{vocab} x {dim}]"),
            Op::RmsNorm { gain, eps } => write!(f, "rmsnorm {gain} eps={eps:e}"),
            Op::MatMul { weight, rows, cols } => write!(f, "matmul {weight} [{rows} x {cols}]"),
            Op::Rope { heads, head_dim, theta } => write!(f, "rope heads={heads} head_dim={head_dim} theta={theta}"),
            Op::Attention { n_head, n_head_kv, head_dim, layer } => {
                write!(f, "attention n_head={n_head} n_head_kv={n_head_kv} head_dim={head_dim} kv_cache={layer}")
            }
            Op::SwiGlu => write!(f, "swiglu"),
            Op::Add => write!(f, "add"),
            Op::Rescale { scale, offset } => write!(f, "rescale scale={scale:e} offset={offset}"),
            Op::Conv2d { weight, bias, kernel, stride, pad, in_channels, out_channels, relu } => write!(
                f,
                "conv2d {weight} {bias} [{kernel} x {kernel} x {in_channels} x {out_channels}] stride={stride} pad={pad}{}",
                if *relu { " relu" } else { "" }
            ),
            Op::MaxPool { kernel, stride } => write!(f, "maxpool {kernel}x{kernel} stride={stride}"),
            Op::Flatten => write!(f, "flatten"),
            Op::Dense { weight, bias, rows, cols, relu } => write!(f, "dense {weight} {bias} [{cols} x {rows}]{}", if *relu { " relu" } else { "" }),
            Op::Softmax => write!(f, "softmax"),
        }
    }
}

/// One node: an op applied to values, defining one new value.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub output: ValueId,
    /// The shape of `output`.
    pub shape: Shape,
    /// The transformer layer the node belongs to (`None` for the embedding and the head).
    pub layer: Option<usize>,
    /// The block of its layer a router can skip; the block's residual `Add` is its last node.
    pub block: Option<Block>,
    pub name: String,
}

/// The two blocks of a transformer layer that a router can skip (docs/skipping.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Block {
    Attention,
    Ffn,
}

impl Block {
    pub const ALL: [Block; 2] = [Block::Attention, Block::Ffn];

    /// `attn` or `ffn`: the tensor-name infix and the name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Block::Attention => "attn",
            Block::Ffn => "ffn",
        }
    }
}

/// An input of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub value: ValueId,
    pub name: String,
    pub shape: Shape,
}

/// A per-token dataflow graph. Values are numbered: the inputs first, then one per node in node order, so
/// `nodes` is a topological order.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub inputs: Vec<Input>,
    /// The logits.
    pub output: ValueId,
    /// The residual stream after each layer, for layer-by-layer comparison.
    pub layer_outputs: Vec<ValueId>,
    /// Longest sequence the model was trained for (the KV cache's capacity).
    pub context_length: usize,
}

/// Builds a graph node by node.
pub(crate) struct Builder {
    pub(crate) g: Graph,
    next: u32,
    layer: Option<usize>,
    block: Option<Block>,
}

impl Builder {
    /// An empty graph of this context length (0 for a graph without KV caches).
    pub(crate) fn new(context_length: usize) -> Self {
        Builder {
            g: Graph { nodes: vec![], inputs: vec![], output: ValueId(0), layer_outputs: vec![], context_length },
            next: 0,
            layer: None,
            block: None,
        }
    }
    fn value(&mut self) -> ValueId {
        let v = ValueId(self.next);
        self.next += 1;
        v
    }
    pub(crate) fn input(&mut self, name: &str, shape: Shape) -> ValueId {
        let value = self.value();
        self.g.inputs.push(Input { value, name: name.into(), shape });
        value
    }
    pub(crate) fn node(&mut self, name: String, op: Op, inputs: &[ValueId], shape: Shape) -> ValueId {
        let output = self.value();
        self.g.nodes.push(Node { op, inputs: inputs.to_vec(), output, shape, layer: self.layer, block: self.block, name });
        output
    }
}

/// The llama graph for a configuration (tensor names as `crate::llama` defines them).
pub fn build_llama(cfg: &LlamaConfig) -> Graph {
    let (e, hd) = (cfg.n_embd, cfg.head_dim);
    let (q_len, kv_len) = (cfg.n_head * hd, cfg.n_head_kv * hd);
    let vec = Shape::Vector;
    let mut b = Builder::new(cfg.context_length);
    let token = b.input("token", Shape::Token);
    let mut x = b.node("token_embd".into(), Op::Embedding { table: TOKEN_EMBD.into(), vocab: cfg.vocab, dim: e }, &[token], vec(e));
    let matmul = |w: &str, rows: usize, cols: usize| Op::MatMul { weight: w.into(), rows, cols };
    for l in 0..cfg.n_layer {
        let n = LayerNames::new(l);
        let name = |s: &str| format!("blk.{l}.{s}");
        b.layer = Some(l);
        b.block = Some(Block::Attention);
        let xn = b.node(name("attn_norm"), Op::RmsNorm { gain: n.attn_norm, eps: cfg.rms_eps }, &[x], vec(e));
        let q = b.node(name("q"), matmul(&n.wq, q_len, e), &[xn], vec(q_len));
        let k = b.node(name("k"), matmul(&n.wk, kv_len, e), &[xn], vec(kv_len));
        let v = b.node(name("v"), matmul(&n.wv, kv_len, e), &[xn], vec(kv_len));
        let q = b.node(name("q_rope"), Op::Rope { heads: cfg.n_head, head_dim: hd, theta: cfg.rope_theta }, &[q], vec(q_len));
        let k = b.node(name("k_rope"), Op::Rope { heads: cfg.n_head_kv, head_dim: hd, theta: cfg.rope_theta }, &[k], vec(kv_len));
        let att = b.node(
            name("attention"),
            Op::Attention { n_head: cfg.n_head, n_head_kv: cfg.n_head_kv, head_dim: hd, layer: l },
            &[q, k, v],
            vec(q_len),
        );
        let o = b.node(name("attn_output"), matmul(&n.wo, e, q_len), &[att], vec(e));
        x = b.node(name("attn_residual"), Op::Add, &[x, o], vec(e));
        b.block = Some(Block::Ffn);
        let xn = b.node(name("ffn_norm"), Op::RmsNorm { gain: n.ffn_norm, eps: cfg.rms_eps }, &[x], vec(e));
        let gate = b.node(name("ffn_gate"), matmul(&n.w_gate, cfg.n_ff, e), &[xn], vec(cfg.n_ff));
        let up = b.node(name("ffn_up"), matmul(&n.w_up, cfg.n_ff, e), &[xn], vec(cfg.n_ff));
        let h = b.node(name("swiglu"), Op::SwiGlu, &[gate, up], vec(cfg.n_ff));
        let d = b.node(name("ffn_down"), matmul(&n.w_down, e, cfg.n_ff), &[h], vec(e));
        x = b.node(name("ffn_residual"), Op::Add, &[x, d], vec(e));
        b.g.layer_outputs.push(x);
    }
    b.layer = None;
    b.block = None;
    let xn = b.node("output_norm".into(), Op::RmsNorm { gain: OUTPUT_NORM.into(), eps: cfg.rms_eps }, &[x], vec(e));
    let out_w = if cfg.tied_output { TOKEN_EMBD } else { OUTPUT };
    b.g.output = b.node("output".into(), matmul(out_w, cfg.vocab, e), &[xn], vec(cfg.vocab));
    b.g
}

impl Graph {
    /// Number of values (inputs and node outputs).
    pub fn value_count(&self) -> usize {
        self.inputs.len() + self.nodes.len()
    }

    /// The shape of every value, indexed by [`ValueId::index`] (`None` for an id nobody defines).
    pub fn shapes(&self) -> Vec<Option<Shape>> {
        let n = self
            .inputs
            .iter()
            .map(|i| i.value)
            .chain(self.nodes.iter().map(|n| n.output))
            .map(|v| v.index() + 1)
            .max()
            .unwrap_or(0);
        let mut shapes = vec![None; n];
        for i in &self.inputs {
            shapes[i.value.index()] = Some(i.shape);
        }
        for node in &self.nodes {
            shapes[node.output.index()] = Some(node.shape);
        }
        shapes
    }

    /// Number of nodes of each kind (as [`Op::kind`] names them), in first-seen order.
    pub fn op_counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts: Vec<(&'static str, usize)> = vec![];
        for n in &self.nodes {
            match counts.iter_mut().find(|(k, _)| *k == n.op.kind()) {
                Some((_, c)) => *c += 1,
                None => counts.push((n.op.kind(), 1)),
            }
        }
        counts
    }

    /// Checks the structure: every value is defined once, before it is used; every op has the inputs and
    /// output shape its parameters imply; each KV cache has one attention node.
    pub fn check(&self) -> Result<(), ModelError> {
        let err = |what: String| Err(ModelError::Graph { what });
        let mut defined: Vec<Option<Shape>> = vec![None; self.value_count()];
        let count = self.value_count();
        let define = |defined: &mut Vec<Option<Shape>>, v: ValueId, shape: Shape, by: &str| -> Result<(), ModelError> {
            match defined.get_mut(v.index()) {
                None => err(format!("{by}: value {v} is outside 0..{count}")),
                Some(Some(_)) => err(format!("{by}: value {v} is defined twice")),
                Some(slot) => {
                    *slot = Some(shape);
                    Ok(())
                }
            }
        };
        for i in &self.inputs {
            define(&mut defined, i.value, i.shape, &format!("input `{}`", i.name))?;
        }
        let mut caches: Vec<usize> = vec![];
        for node in &self.nodes {
            let at = format!("node `{}` ({})", node.name, node.op.kind());
            let mut ins = Vec::with_capacity(node.inputs.len());
            for &v in &node.inputs {
                match defined.get(v.index()).copied().flatten() {
                    Some(s) => ins.push(s),
                    None => return err(format!("{at}: input {v} is not defined before use")),
                }
            }
            let vector = |s: &Shape| matches!(s, Shape::Vector(n) if *n > 0);
            let (want_in, want_out): (Vec<Shape>, Shape) = match node.op {
                Op::Embedding { vocab, dim, .. } => {
                    if vocab == 0 {
                        return err(format!("{at}: empty vocabulary"));
                    }
                    (vec![Shape::Token], Shape::Vector(dim))
                }
                Op::RmsNorm { eps, .. } => {
                    if !(eps.is_finite() && eps >= 0.0) {
                        return err(format!("{at}: eps {eps} must be finite and non-negative"));
                    }
                    match ins.first() {
                        Some(s) if vector(s) => (vec![*s], *s),
                        _ => (vec![Shape::Vector(node.shape.len())], node.shape),
                    }
                }
                Op::MatMul { rows, cols, .. } => (vec![Shape::Vector(cols)], Shape::Vector(rows)),
                Op::Rope { heads, head_dim, theta } => {
                    if head_dim % 2 != 0 || !(theta.is_finite() && theta > 0.0) {
                        return err(format!("{at}: head_dim {head_dim} must be even and theta {theta} positive"));
                    }
                    (vec![Shape::Vector(heads * head_dim)], Shape::Vector(heads * head_dim))
                }
                Op::Attention { n_head, n_head_kv, head_dim, layer } => {
                    if n_head_kv == 0 || n_head % n_head_kv != 0 {
                        return err(format!("{at}: n_head {n_head} is not a multiple of n_head_kv {n_head_kv}"));
                    }
                    if caches.contains(&layer) {
                        return err(format!("{at}: KV cache {layer} has a second attention node"));
                    }
                    caches.push(layer);
                    let (q, kv) = (Shape::Vector(n_head * head_dim), Shape::Vector(n_head_kv * head_dim));
                    (vec![q, kv, kv], q)
                }
                Op::SwiGlu | Op::Add => match ins.first() {
                    Some(s) if vector(s) => (vec![*s, *s], *s),
                    _ => (vec![node.shape, node.shape], node.shape),
                },
                Op::Rescale { scale, offset } => {
                    if !(scale.is_finite() && offset.is_finite()) {
                        return err(format!("{at}: scale {scale} and offset {offset} must be finite"));
                    }
                    match ins.first() {
                        Some(s @ (Shape::Vector(_) | Shape::Image { .. })) => (vec![*s], *s),
                        _ => (vec![node.shape], node.shape),
                    }
                }
                Op::Conv2d { kernel, stride, pad, in_channels, out_channels, .. } => {
                    if kernel == 0 || stride == 0 || out_channels == 0 {
                        return err(format!("{at}: kernel {kernel}, stride {stride} and {out_channels} output channels must be positive"));
                    }
                    match ins.first() {
                        Some(&Shape::Image { h, w, c }) if c == in_channels && kernel <= h + 2 * pad && kernel <= w + 2 * pad => {
                            let o = |n: usize| (n + 2 * pad - kernel) / stride + 1;
                            (vec![Shape::Image { h, w, c }], Shape::Image { h: o(h), w: o(w), c: out_channels })
                        }
                        _ => return err(format!("{at}: takes an image of {in_channels} channels at least {kernel} x {kernel} with padding {pad}, found ({})", ins.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))),
                    }
                }
                Op::MaxPool { kernel, stride } => match ins.first() {
                    Some(&Shape::Image { h, w, c }) if kernel > 0 && stride > 0 && kernel <= h && kernel <= w => {
                        (vec![Shape::Image { h, w, c }], Shape::Image { h: (h - kernel) / stride + 1, w: (w - kernel) / stride + 1, c })
                    }
                    _ => return err(format!("{at}: takes an image at least {kernel} x {kernel} (stride {stride} > 0)")),
                },
                Op::Flatten => match ins.first() {
                    Some(&s @ Shape::Image { .. }) => (vec![s], Shape::Vector(s.len())),
                    _ => return err(format!("{at}: takes an image")),
                },
                Op::Dense { rows, cols, .. } => (vec![Shape::Vector(cols)], Shape::Vector(rows)),
                Op::Softmax => match ins.first() {
                    Some(s) if vector(s) => (vec![*s], *s),
                    _ => (vec![node.shape], node.shape),
                },
            };
            if ins != want_in {
                let f = |v: &[Shape]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ");
                return err(format!("{at}: inputs are ({}), the op takes ({})", f(&ins), f(&want_in)));
            }
            if node.shape != want_out || node.shape.is_empty() {
                return err(format!("{at}: output shape is {}, the op gives {want_out}", node.shape));
            }
            define(&mut defined, node.output, node.shape, &at)?;
        }
        for (what, v) in std::iter::once(("output", &self.output)).chain(self.layer_outputs.iter().map(|v| ("layer output", v))) {
            match defined.get(v.index()).copied().flatten() {
                Some(Shape::Vector(_)) => {}
                _ => return err(format!("{what} {v} is not a vector the graph defines")),
            }
        }
        Ok(())
    }

    /// Checks the structure ([`Graph::check`]) and that `weights` holds every tensor a node reads with the
    /// number of elements the node implies; `source` names where the weights came from in errors.
    pub fn check_weights(&self, weights: &std::collections::HashMap<String, Vec<f32>>, source: &str) -> Result<(), ModelError> {
        self.check()?;
        for node in &self.nodes {
            for (name, want) in node.op.tensor_lens(node.shape) {
                match weights.get(name) {
                    None => return Err(ModelError::Graph { what: format!("{source}: node `{}` reads tensor `{name}`, which is missing", node.name) }),
                    Some(t) if t.len() != want => {
                        return Err(ModelError::Graph { what: format!("{source}: tensor `{name}` of node `{}` has {} values, the node takes {want}", node.name, t.len()) })
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Checks the structure ([`Graph::check`]) and that every weight exists in `g` with the shape its node
    /// implies.
    pub fn validate(&self, g: &Gguf) -> Result<(), ModelError> {
        self.check()?;
        for node in &self.nodes {
            if let (Some(name), Some(expected)) = (node.op.weight(), node.op.weight_dims(node.shape)) {
                let t = tensor(g, name)?;
                if t.dims != expected {
                    return Err(ModelError::Shape { path: g.path.clone(), name: name.into(), found: t.dims.clone(), expected });
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ins = self.inputs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        write!(f, "{} = {}({ins}) : {}  # {}", self.output, self.op, self.shape, self.name)
    }
}

/// One line per input, one per node, then the outputs.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in &self.inputs {
            writeln!(f, "input {} : {}  # {}", i.value, i.shape, i.name)?;
        }
        for n in &self.nodes {
            writeln!(f, "{n}")?;
        }
        let layers = self.layer_outputs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
        writeln!(f, "layer_outputs [{layers}]")?;
        writeln!(f, "output {}", self.output)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gguf::{parse_bytes, GgufWriter, Value};

    pub(crate) fn smollm2() -> LlamaConfig {
        LlamaConfig {
            n_layer: 30,
            n_embd: 576,
            n_ff: 1536,
            n_head: 9,
            n_head_kv: 3,
            head_dim: 64,
            vocab: 49152,
            context_length: 8192,
            rope_theta: 100000.0,
            rms_eps: 1e-5,
            tied_output: true,
        }
    }

    /// A tiny llama: 2 layers, n_embd 8, 4 query heads of 2, 2 KV heads, n_ff 12, vocab 10; F32 weights from a
    /// deterministic pseudo-random sequence. `edit` may change the tensor list (name, GGUF dims) before writing.
    pub(crate) fn tiny_gguf(tied: bool, edit: impl Fn(&mut Vec<(String, Vec<u64>)>)) -> Gguf {
        let vocab = 10usize;
        let cfg = LlamaConfig {
            n_layer: 2,
            n_embd: 8,
            n_ff: 12,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 2,
            vocab,
            context_length: 16,
            rope_theta: 10000.0,
            rms_eps: 1e-5,
            tied_output: tied,
        };
        let mut want = cfg.expected_tensors();
        edit(&mut want);
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::String("llama".into()))
            .kv("llama.block_count", Value::U32(2))
            .kv("llama.embedding_length", Value::U32(cfg.n_embd as u32))
            .kv("llama.feed_forward_length", Value::U32(cfg.n_ff as u32))
            .kv("llama.attention.head_count", Value::U32(4))
            .kv("llama.attention.head_count_kv", Value::U32(2))
            .kv("llama.context_length", Value::U32(32))
            .kv("llama.rope.freq_base", Value::F32(10000.0))
            .kv("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
            .kv("tokenizer.ggml.tokens", Value::Array((0..vocab).map(|i| Value::String(format!("t{i}"))).collect()));
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for (name, dims) in &want {
            let n: u64 = dims.iter().product();
            let is_norm = dims.len() == 1;
            let data: Vec<u8> = (0..n)
                .flat_map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5; // [-0.5, 0.5)
                    let x = if is_norm { 1.0 + u } else { u };
                    x.to_le_bytes()
                })
                .collect();
            w.tensor(name, dims, 0, data);
        }
        parse_bytes(&w.to_bytes(), "tiny.gguf").unwrap()
    }

    #[test]
    fn smollm2_graph_counts_and_shapes() {
        let cfg = smollm2();
        let g = build_llama(&cfg);
        g.check().unwrap();
        let per_layer = [("rmsnorm", 2), ("matmul", 7), ("rope", 2), ("attention", 1), ("swiglu", 1), ("add", 2)];
        for l in 0..30 {
            let layer: Vec<&Node> = g.nodes.iter().filter(|n| n.layer == Some(l)).collect();
            assert_eq!(layer.len(), 15, "layer {l}");
            for (kind, count) in per_layer {
                assert_eq!(layer.iter().filter(|n| n.op.kind() == kind).count(), count, "layer {l} {kind}");
            }
        }
        // Embedding, the final norm, the output projection.
        let head: Vec<&str> = g.nodes.iter().filter(|n| n.layer.is_none()).map(|n| n.op.kind()).collect();
        assert_eq!(head, ["embedding", "rmsnorm", "matmul"]);
        assert_eq!(g.nodes.len(), 30 * 15 + 3);
        assert_eq!(
            g.op_counts(),
            [("embedding", 1), ("rmsnorm", 61), ("matmul", 211), ("rope", 60), ("attention", 30), ("add", 60), ("swiglu", 30)]
        );
        assert_eq!(g.inputs.len(), 1);
        assert_eq!(g.inputs[0].shape, Shape::Token);
        assert_eq!(g.layer_outputs.len(), 30);

        let shape_of = |name: &str| g.nodes.iter().find(|n| n.name == name).unwrap().shape;
        assert_eq!(shape_of("token_embd"), Shape::Vector(576));
        assert_eq!(shape_of("blk.0.q"), Shape::Vector(576));
        assert_eq!(shape_of("blk.0.k_rope"), Shape::Vector(192));
        assert_eq!(shape_of("blk.7.v"), Shape::Vector(192));
        assert_eq!(shape_of("blk.29.attention"), Shape::Vector(576));
        assert_eq!(shape_of("blk.3.swiglu"), Shape::Vector(1536));
        assert_eq!(shape_of("output"), Shape::Vector(49152));
        let out = g.nodes.last().unwrap();
        assert_eq!(out.output, g.output);
        assert_eq!(out.op, Op::MatMul { weight: TOKEN_EMBD.into(), rows: 49152, cols: 576 });
        let down = g.nodes.iter().find(|n| n.name == "blk.5.ffn_down").unwrap();
        assert_eq!(down.op, Op::MatMul { weight: "blk.5.ffn_down.weight".into(), rows: 576, cols: 1536 });
        assert_eq!(down.op.weight_dims(down.shape), Some(vec![1536, 576]));
        // Each layer output is that layer's last node, the residual after the FFN.
        for (l, v) in g.layer_outputs.iter().enumerate() {
            let n = g.nodes.iter().find(|n| n.output == *v).unwrap();
            assert_eq!(n.name, format!("blk.{l}.ffn_residual"));
        }
        // One line per input and node, plus the two output lines.
        let text = g.to_string();
        assert_eq!(text.lines().count(), 1 + g.nodes.len() + 2);
        assert!(text.contains("%2 = rmsnorm blk.0.attn_norm.weight eps=1e-5(%1) : f32[576]  # blk.0.attn_norm"), "{text}");
        assert!(text.contains("= matmul blk.0.attn_k.weight [192 x 576](%2) : f32[192]  # blk.0.k"), "{text}");
        assert!(text.contains("attention n_head=9 n_head_kv=3 head_dim=64 kv_cache=0(%6, %7, %5) : f32[576]"), "{text}");
    }

    #[test]
    fn untied_output_reads_output_weight() {
        let g = build_llama(&LlamaConfig { tied_output: false, ..smollm2() });
        assert_eq!(g.nodes.last().unwrap().op.weight(), Some(OUTPUT));
    }

    #[test]
    fn validates_against_gguf() {
        for tied in [true, false] {
            let gguf = tiny_gguf(tied, |_| {});
            let cfg = LlamaConfig::from_gguf(&gguf).unwrap();
            assert_eq!(cfg.tied_output, tied);
            build_llama(&cfg).validate(&gguf).unwrap();
        }
    }

    #[test]
    fn validation_errors_name_the_tensor() {
        let cfg = LlamaConfig::from_gguf(&tiny_gguf(true, |_| {})).unwrap();
        let graph = build_llama(&cfg);
        // A transposed K projection.
        let gguf = tiny_gguf(true, |t| t.iter_mut().filter(|(n, _)| n == "blk.1.attn_k.weight").for_each(|(_, d)| *d = vec![4, 8]));
        match graph.validate(&gguf) {
            Err(ModelError::Shape { name, found, expected, .. }) => {
                assert_eq!((name.as_str(), found, expected), ("blk.1.attn_k.weight", vec![4, 8], vec![8, 4]));
            }
            other => panic!("{other:?}"),
        }
        let e = graph.validate(&gguf).unwrap_err().to_string();
        assert!(e.contains("tiny.gguf") && e.contains("`blk.1.attn_k.weight` has shape [4, 8]") && e.contains("[8, 4]"), "{e}");
        // A gain of the wrong length.
        let gguf = tiny_gguf(true, |t| t.iter_mut().filter(|(n, _)| n == OUTPUT_NORM).for_each(|(_, d)| *d = vec![9]));
        assert!(matches!(graph.validate(&gguf), Err(ModelError::Shape { name, .. }) if name == OUTPUT_NORM));
        // A missing tensor.
        let gguf = tiny_gguf(true, |t| t.retain(|(n, _)| n != "blk.0.ffn_up.weight"));
        assert!(matches!(graph.validate(&gguf), Err(ModelError::MissingTensor { name, .. }) if name == "blk.0.ffn_up.weight"));
        // An untied graph on a tied model: `output.weight` is missing.
        let untied = build_llama(&LlamaConfig { tied_output: false, ..cfg });
        let e = untied.validate(&tiny_gguf(true, |_| {})).unwrap_err().to_string();
        assert!(e.contains("tensor `output.weight` is missing"), "{e}");
    }

    #[test]
    fn structural_errors() {
        let good = build_llama(&smollm2());
        let broken = |f: &dyn Fn(&mut Graph)| {
            let mut g = good.clone();
            f(&mut g);
            g.check().unwrap_err().to_string()
        };
        // A use before definition.
        let e = broken(&|g| g.nodes[1].inputs[0] = ValueId(100));
        assert!(e.contains("blk.0.attn_norm") && e.contains("%100 is not defined before use"), "{e}");
        // A matmul fed the wrong length.
        let e = broken(&|g| {
            let normed = g.nodes[1].output;
            g.nodes.iter_mut().find(|n| n.name == "blk.0.ffn_down").unwrap().inputs[0] = normed;
        });
        assert!(e.contains("blk.0.ffn_down") && e.contains("inputs are (f32[576]), the op takes (f32[1536])"), "{e}");
        // A wrong declared output shape.
        let e = broken(&|g| g.nodes.iter_mut().find(|n| n.name == "blk.2.k").unwrap().shape = Shape::Vector(576));
        assert!(e.contains("blk.2.k") && e.contains("output shape is f32[576], the op gives f32[192]"), "{e}");
        // Two attention nodes on one KV cache.
        let e = broken(&|g| {
            if let Op::Attention { layer, .. } = &mut g.nodes.iter_mut().find(|n| n.name == "blk.1.attention").unwrap().op {
                *layer = 0;
            }
        });
        assert!(e.contains("KV cache 0 has a second attention node"), "{e}");
        // Attention with its K and V swapped for Q.
        let e = broken(&|g| g.nodes.iter_mut().find(|n| n.name == "blk.0.attention").unwrap().inputs.swap(0, 1));
        assert!(e.contains("blk.0.attention") && e.contains("inputs are (f32[192], f32[576], f32[192])"), "{e}");
        // An output that is not defined.
        let e = broken(&|g| g.output = ValueId(10_000));
        assert!(e.contains("output %10000 is not a vector"), "{e}");
    }
}

//! An f32 interpreter of the graph IR: the float model, run by walking [`Graph`] node by node.
//!
//! Weights are dequantized exactly (`q * d + m`, [`Gguf::dequantize`]); activations are f32; every dot
//! product accumulates in f32 in index order (a separate multiply and add per term, no FMA). It is a
//! debugging and comparison tool: it checks the IR against the float reference (`opu-host`'s candle path) and
//! gives layer-by-layer hidden states to compare the overlay with ([`relative_l2`]).
//!
//! A forward pass runs a batch of tokens at the next positions (a prompt, then one token at a time); each node
//! runs once over the whole batch, and each [`Op::Attention`] node appends the batch's K and V rows to its
//! layer's KV cache before attending causally. A batch gives the same bits as the same tokens one at a time.
//!
//! A graph whose input is a vector or an image (a CNN, `crate::cnn`) runs on rows of that input instead
//! ([`Interpreter::forward_rows`]), each row on its own: convolutions and dense layers sum their products
//! in the kernel's index order (`ky`, `kx`, input channel), then add the bias.

use crate::gguf::Gguf;
use crate::ir::{build_llama, Block, Graph, Op, Shape};
use crate::llama::{tensor, LlamaConfig, ModelError};
use crate::routers::Routers;
use std::collections::HashMap;
use std::sync::Arc;

/// The results of one forward pass over `n` tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Forward {
    /// `[position][vocab]`: the logits at every position of the batch.
    pub logits: Vec<Vec<f32>>,
    /// `[layer][position][n_embd]`: the residual stream after each layer ([`Graph::layer_outputs`]).
    pub layer_hidden: Vec<Vec<Vec<f32>>>,
}

/// A block's residual add as [`Interpreter::forward_observed`] sees it: `n` rows each (one per token).
#[derive(Clone, Copy, Debug)]
pub struct BlockUpdate<'a> {
    pub layer: usize,
    pub block: Block,
    /// The block's input: the residual stream before its RMSNorm (what the block's router reads).
    pub input: &'a [f32],
    /// What the block adds to it.
    pub update: &'a [f32],
}

/// Sees every node's output rows (`Interpreter::forward_rows_observed`).
type ObserveNode<'a> = &'a mut dyn FnMut(&crate::ir::Node, &[f32]);

/// Decides whether a block is skipped: `(layer, block, the block's input rows) -> skip`.
type Decide<'a> = &'a mut dyn FnMut(usize, Block, &[f32]) -> bool;

/// `[value]`: the index of the last node that reads it (0 for none).
fn last_uses(graph: &Graph) -> Vec<usize> {
    let mut last_use = vec![0usize; graph.value_count()];
    for (i, node) in graph.nodes.iter().enumerate() {
        node.inputs.iter().for_each(|v| last_use[v.index()] = i);
    }
    last_use
}

/// The computed value `id` of a pass.
fn value(values: &[Option<Vec<f32>>], id: crate::ir::ValueId) -> &[f32] {
    values[id.index()].as_deref().expect("kept and computed")
}

/// A pass without one block, as [`Interpreter::forward_dropping_each`] gives it: rows of `n` tokens each.
#[derive(Clone, Copy, Debug)]
pub struct DroppedBlock<'a> {
    pub layer: usize,
    pub block: Block,
    /// The block's input in the dense pass (what its router reads).
    pub input: &'a [f32],
    /// The dense pass's logits.
    pub dense_logits: &'a [f32],
    /// The logits with the block skipped for every token.
    pub logits: &'a [f32],
}

/// One layer's KV cache: a row of `n_head_kv * head_dim` per position.
#[derive(Clone, Debug, Default)]
struct KvCache {
    k: Vec<f32>,
    v: Vec<f32>,
}

/// Runs a [`Graph`] in f32 with the weights of a GGUF file and a KV cache per attention node.
///
/// Cloning is cheap (the graph and weights are shared) and copies the KV cache: a clone continues the same
/// sequence independently.
#[derive(Clone)]
pub struct Interpreter {
    graph: Arc<Graph>,
    /// Dequantized weights by tensor name, `[rows][cols]` (GGUF order).
    weights: Arc<HashMap<String, Vec<f32>>>,
    /// Smallest vocabulary of the graph's embeddings: token ids must be below it.
    vocab: usize,
    cache: Vec<KvCache>,
    pos: usize,
}

impl Interpreter {
    /// Loads a llama GGUF: builds the graph from its hyperparameters ([`build_llama`]) and its weights.
    pub fn new(g: &Gguf) -> Result<Self, ModelError> {
        let cfg = LlamaConfig::from_gguf(g)?;
        Self::with_graph(build_llama(&cfg), g)
    }

    /// Runs `graph` (whose one input is a vector or an image) with `weights` by tensor name, checked by
    /// length against the nodes ([`Graph::check_weights`]; `source` names where they came from).
    pub fn with_weights(graph: Graph, weights: HashMap<String, Vec<f32>>, source: &str) -> Result<Self, ModelError> {
        graph.check_weights(&weights, source)?;
        match graph.inputs.as_slice() {
            [i] if matches!(i.shape, Shape::Vector(_) | Shape::Image { .. }) => {}
            _ => return Err(ModelError::Graph { what: format!("{source}: a graph of weights takes exactly one input, a vector or an image") }),
        }
        if graph.nodes.iter().any(|n| matches!(n.op, Op::Embedding { .. } | Op::Attention { .. })) {
            return Err(ModelError::Graph { what: format!("{source}: embeddings and attention take GGUF weights (`Interpreter::new`)") });
        }
        Ok(Interpreter { graph: Arc::new(graph), weights: Arc::new(weights), vocab: 0, cache: vec![], pos: 0 })
    }

    /// Runs `rows` (rows of the graph's input, back to back) through a graph of [`Interpreter::with_weights`]
    /// and returns the output rows, back to back.
    pub fn forward_rows(&mut self, rows: &[f32]) -> Result<Vec<f32>, ModelError> {
        self.forward_rows_observed(rows, &mut |_, _| {})
    }

    /// [`Interpreter::forward_rows`], calling `observe` with every node and its output rows (what the
    /// fixed-point calibration measures, `crate::cnn`).
    pub fn forward_rows_observed(&mut self, rows: &[f32], observe: &mut dyn FnMut(&crate::ir::Node, &[f32])) -> Result<Vec<f32>, ModelError> {
        let input = match self.graph.inputs.as_slice() {
            [i] if i.shape != Shape::Token => i.shape,
            _ => return Err(ModelError::Input { what: "forward_rows runs graphs whose input is a vector or an image".into() }),
        };
        if rows.is_empty() || !rows.len().is_multiple_of(input.len()) {
            return Err(ModelError::Input { what: format!("{} values are not whole rows of the input {input}", rows.len()) });
        }
        let mut values = vec![None; self.graph.value_count()];
        self.exec(PassInput::Rows(rows), 0, &mut values, None, None, Some(observe), true);
        Ok(values[self.graph.output.index()].take().expect("the output is kept"))
    }

    /// Loads the weights of `graph` from `g` after validating the graph against the file.
    pub fn with_graph(graph: Graph, g: &Gguf) -> Result<Self, ModelError> {
        graph.validate(g)?;
        let graph_err = |what: String| ModelError::Graph { what };
        match graph.inputs.as_slice() {
            [i] if i.shape == Shape::Token => {}
            _ => return Err(graph_err("the interpreter runs graphs with exactly one input, a token".into())),
        }
        let mut weights = HashMap::new();
        let mut vocab = usize::MAX;
        let mut caches = 0;
        for node in &graph.nodes {
            if let Some(name) = node.op.weight() {
                if !weights.contains_key(name) {
                    weights.insert(name.to_string(), g.dequantize(tensor(g, name)?)?);
                }
            }
            match node.op {
                Op::Embedding { vocab: v, .. } => vocab = vocab.min(v),
                Op::Attention { layer, .. } => caches = caches.max(layer + 1),
                _ => {}
            }
        }
        Ok(Interpreter { graph: Arc::new(graph), weights: Arc::new(weights), vocab, cache: vec![KvCache::default(); caches], pos: 0 })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Token ids must be below this.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The next position: the number of tokens run since the last [`Interpreter::reset`].
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Empties the KV caches: the next token is at position 0.
    pub fn reset(&mut self) {
        self.cache.iter_mut().for_each(|c| *c = KvCache::default());
        self.pos = 0;
    }

    /// Runs `tokens` at the next positions; returns the logits and the per-layer hidden states at each.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Forward, ModelError> {
        self.run(tokens, None, None)
    }

    /// [`Interpreter::forward`], calling `observe` at every block's residual add with the block's input and
    /// update rows (what router calibration measures, `crate::calibrate`).
    pub fn forward_observed(&mut self, tokens: &[u32], observe: &mut dyn FnMut(BlockUpdate<'_>)) -> Result<Forward, ModelError> {
        self.run(tokens, None, Some(observe))
    }

    /// Runs `tokens` at the next positions with the blocks `skips[layer] = [attention, ffn]` skipped for every
    /// one of them (docs/skipping.md): a skipped block passes the residual through, and a skipped attention
    /// block appends, as each token's K/V at that layer, its K/V at the layer before (which is, by induction,
    /// the K/V of the latest layer where the token executed attention). Layer 0 must execute.
    pub fn forward_skipping(&mut self, tokens: &[u32], skips: &[[bool; 2]]) -> Result<Forward, ModelError> {
        let layers = self.graph.layer_outputs.len();
        if skips.len() != layers || skips.first().is_some_and(|s| s[0] || s[1]) {
            return Err(ModelError::Input { what: format!("skips for {} layers with layer 0 executing, the graph has {layers}", skips.len()) });
        }
        self.run(tokens, Some(&mut |l: usize, b: Block, _: &[f32]| skips[l][b as usize]), None)
    }

    /// Runs one token at the next position with each block's router deciding on the block's input, as
    /// [`Interpreter::forward_skipping`] skips (the float model of a program compiled with `routers`).
    /// Returns the pass and its decisions, `[layer] = [attention, ffn]` (true: skipped).
    pub fn forward_routed(&mut self, token: u32, routers: &Routers) -> Result<(Forward, Vec<[bool; 2]>), ModelError> {
        let layers = self.graph.layer_outputs.len();
        if routers.layers.len() != layers || routers.layers.first().is_some_and(|r| r.iter().any(Option::is_some)) {
            return Err(ModelError::Input { what: format!("routers for {} layers, the graph has {layers} (layer 0 takes none)", routers.layers.len()) });
        }
        let mut decisions = vec![[false; 2]; layers];
        let fwd = self.run(
            &[token],
            Some(&mut |l: usize, b: Block, x: &[f32]| {
                let skip = routers.get(l, b).is_some_and(|r| r.skips(x));
                decisions[l][b as usize] = skip;
                skip
            }),
            None,
        )?;
        Ok((fwd, decisions))
    }

    /// Runs `tokens` densely at the next positions, then once more for every block of layers 1.. with that
    /// block skipped for each of the tokens (docs/skipping.md's semantics, as [`Interpreter::forward_skipping`]),
    /// calling `each` with the block, its input rows in the dense pass, the dense logits and the logits of the
    /// pass without it. Each of those passes resumes at the block's first node from the dense pass's
    /// values (what comes before the block is the same). The KV caches and the position end as after the
    /// dense pass, whose results it returns. What router calibration measures (`crate::calibrate`).
    pub fn forward_dropping_each(&mut self, tokens: &[u32], each: &mut dyn FnMut(DroppedBlock<'_>)) -> Result<Forward, ModelError> {
        self.check(tokens)?;
        let graph = Arc::clone(&self.graph);
        let mut dense = vec![None; graph.value_count()];
        self.exec(PassInput::Tokens(tokens), 0, &mut dense, None, None, None, false);
        // the dense pass's K/V rows of the tokens, put back after the passes without a block
        let n = tokens.len();
        let appended: Vec<(Vec<f32>, Vec<f32>)> = self
            .cache
            .iter()
            .map(|c| {
                let kv = c.k.len() / (self.pos + n);
                (c.k[self.pos * kv..].to_vec(), c.v[self.pos * kv..].to_vec())
            })
            .collect();
        let last_use = last_uses(&graph);
        for (l, b) in (1..graph.layer_outputs.len()).flat_map(|l| Block::ALL.map(|b| (l, b))) {
            let Some(first) = graph.nodes.iter().position(|nd| nd.layer == Some(l) && nd.block == Some(b)) else { continue };
            // the values the nodes from `first` on read that are defined before it
            let mut values: Vec<Option<Vec<f32>>> = vec![None; dense.len()];
            for node in &graph.nodes[..first] {
                let v = node.output.index();
                if last_use[v] >= first {
                    values[v] = dense[v].clone();
                }
            }
            self.exec(PassInput::Tokens(tokens), first, &mut values, Some(&mut |l2: usize, b2: Block, _: &[f32]| l2 == l && b2 == b), None, None, true);
            each(DroppedBlock {
                layer: l,
                block: b,
                input: value(&dense, graph.nodes[first].inputs[0]),
                dense_logits: value(&dense, graph.output),
                logits: value(&values, graph.output),
            });
        }
        for (c, (k, v)) in self.cache.iter_mut().zip(appended) {
            let kv = k.len() / n;
            c.k.truncate(self.pos * kv);
            c.v.truncate(self.pos * kv);
            c.k.extend_from_slice(&k);
            c.v.extend_from_slice(&v);
        }
        self.pos += n;
        Ok(self.collect(&dense, n))
    }

    fn check(&self, tokens: &[u32]) -> Result<(), ModelError> {
        let input_err = |what: String| Err(ModelError::Input { what });
        let n = tokens.len();
        if n == 0 {
            return input_err("forward needs at least one token".into());
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return input_err(format!("token id {bad} is outside the vocabulary of {}", self.vocab));
        }
        if self.pos + n > self.graph.context_length {
            return input_err(format!("{n} tokens at position {} exceed the context length {}", self.pos, self.graph.context_length));
        }
        Ok(())
    }

    fn run(
        &mut self,
        tokens: &[u32],
        skips: Option<Decide<'_>>,
        observe: Option<&mut dyn FnMut(BlockUpdate<'_>)>,
    ) -> Result<Forward, ModelError> {
        self.check(tokens)?;
        let mut values = vec![None; self.graph.value_count()];
        self.exec(PassInput::Tokens(tokens), 0, &mut values, skips, observe, None, true);
        self.pos += tokens.len();
        Ok(self.collect(&values, tokens.len()))
    }

    /// The logits and the layer outputs of a pass over `n` tokens.
    fn collect(&self, values: &[Option<Vec<f32>>], n: usize) -> Forward {
        let rows = |v: crate::ir::ValueId| -> Vec<Vec<f32>> {
            let data = values[v.index()].as_deref().expect("checked: outputs are defined");
            data.chunks_exact(data.len() / n).map(<[f32]>::to_vec).collect()
        };
        Forward { logits: rows(self.graph.output), layer_hidden: self.graph.layer_outputs.iter().map(|&v| rows(v)).collect() }
    }

    /// Runs the graph's nodes from `start` on over `tokens` (checked) at positions `pos..`, with `values`
    /// holding what those nodes read from before `start`. Each attention node first drops the cache rows at
    /// `pos..` (none in a first pass; a pass resumed at a block replaces the rows of the pass before it).
    /// With `free`, a value is dropped at its last use unless the pass returns it.
    #[allow(clippy::too_many_arguments)]
    fn exec(
        &mut self,
        input: PassInput<'_>,
        start: usize,
        values: &mut [Option<Vec<f32>>],
        mut skips: Option<Decide<'_>>,
        mut observe: Option<&mut dyn FnMut(BlockUpdate<'_>)>,
        mut observe_nodes: Option<ObserveNode<'_>>,
        free: bool,
    ) {
        let (tokens, n) = match input {
            PassInput::Tokens(t) => (t, t.len()),
            PassInput::Rows(rows) => {
                let input = &self.graph.inputs[0];
                values[input.value.index()] = Some(rows.to_vec());
                (&[][..], rows.len() / input.shape.len())
            }
        };
        let graph = Arc::clone(&self.graph);
        let weights = Arc::clone(&self.weights);
        let w = |name: &str| weights[name].as_slice();

        // Each value lives from its definition to its last use, except the ones returned.
        let count = graph.value_count();
        let mut keep = vec![!free; count];
        keep[graph.output.index()] = true;
        graph.layer_outputs.iter().for_each(|v| keep[v.index()] = true);
        let last_use = last_uses(&graph);
        let token_input = graph.inputs[0].value;
        // each block's decision, taken at its first node (its RMSNorm, whose input is the block's input)
        let mut decided: Vec<[Option<bool>; 2]> = vec![[None; 2]; graph.layer_outputs.len()];

        for (i, node) in graph.nodes.iter().enumerate().skip(start) {
            let arg = |j: usize| values[node.inputs[j].index()].as_deref().expect("checked: defined before use");
            let len = node.shape.len();
            let skipped = match (skips.as_mut(), node.layer, node.block) {
                (Some(decide), Some(l), Some(b)) => *decided[l][b as usize].get_or_insert_with(|| decide(l, b, arg(0))),
                _ => false,
            };
            if skipped {
                match &node.op {
                    // the block's residual: x passes through
                    Op::Add => values[node.output.index()] = Some(arg(0).to_vec()),
                    // the K/V of the layer before, carried: a row of n_head_kv * head_dim per token
                    &Op::Attention { layer, n_head_kv, head_dim, .. } => {
                        let kv = n_head_kv * head_dim;
                        let (prev, cache) = self.cache.split_at_mut(layer);
                        let prev = prev.last().expect("layer 0 executes");
                        cache[0].k.truncate(self.pos * kv);
                        cache[0].v.truncate(self.pos * kv);
                        cache[0].k.extend_from_slice(&prev.k[self.pos * kv..(self.pos + n) * kv]);
                        cache[0].v.extend_from_slice(&prev.v[self.pos * kv..(self.pos + n) * kv]);
                    }
                    // the rest of the block is not computed
                    _ => {}
                }
                continue;
            }
            let out = match &node.op {
                Op::Embedding { table, dim, .. } => {
                    debug_assert_eq!(node.inputs[0], token_input);
                    let table = w(table);
                    tokens.iter().flat_map(|&t| &table[t as usize * dim..(t as usize + 1) * dim]).copied().collect()
                }
                Op::RmsNorm { gain, eps } => rms_norm(arg(0), w(gain), *eps),
                Op::MatMul { weight, rows, cols } => matmul(w(weight), *rows, *cols, arg(0)),
                Op::Rope { heads, head_dim, theta } => rope(arg(0), *heads, *head_dim, *theta, self.pos),
                &Op::Attention { n_head, n_head_kv, head_dim, layer } => {
                    let cache = &mut self.cache[layer];
                    cache.k.truncate(self.pos * n_head_kv * head_dim);
                    cache.v.truncate(self.pos * n_head_kv * head_dim);
                    cache.k.extend_from_slice(arg(1));
                    cache.v.extend_from_slice(arg(2));
                    attention(arg(0), cache, n_head, n_head_kv, head_dim, self.pos)
                }
                Op::SwiGlu => arg(0).iter().zip(arg(1)).map(|(&g, &u)| silu(g) * u).collect(),
                Op::Add => {
                    if let (Some(observe), Some(layer), Some(block)) = (observe.as_mut(), node.layer, node.block) {
                        observe(BlockUpdate { layer, block, input: arg(0), update: arg(1) });
                    }
                    arg(0).iter().zip(arg(1)).map(|(&a, &b)| a + b).collect()
                }
                &Op::Rescale { scale, offset } => arg(0).iter().map(|&x| x * scale + offset).collect(),
                &Op::Conv2d { ref weight, ref bias, kernel, stride, pad, relu, .. } => {
                    let in_shape = graph_shape(&graph, node.inputs[0]);
                    conv2d(arg(0), in_shape, node.shape, w(weight), w(bias), kernel, stride, pad, relu)
                }
                &Op::MaxPool { kernel, stride } => maxpool(arg(0), graph_shape(&graph, node.inputs[0]), node.shape, kernel, stride),
                Op::Flatten => arg(0).to_vec(),
                &Op::Dense { ref weight, ref bias, rows, cols, relu } => dense(arg(0), w(weight), w(bias), rows, cols, relu),
                Op::Softmax => arg(0).chunks_exact(len).flat_map(softmax).collect(),
            };
            debug_assert_eq!(out.len(), n * len, "node `{}`", node.name);
            if let Some(observe) = observe_nodes.as_mut() {
                observe(node, &out);
            }
            values[node.output.index()] = Some(out);
            for v in &node.inputs {
                if last_use[v.index()] == i && !keep[v.index()] {
                    values[v.index()] = None;
                }
            }
        }
    }
}

/// The input of a pass: token ids (a language model) or rows of the graph's vector or image input.
#[derive(Clone, Copy)]
enum PassInput<'a> {
    Tokens(&'a [u32]),
    Rows(&'a [f32]),
}

/// The shape of value `v` (an input or a node's output).
fn graph_shape(graph: &Graph, v: crate::ir::ValueId) -> Shape {
    graph.inputs.iter().find(|i| i.value == v).map(|i| i.shape).or_else(|| graph.nodes.iter().find(|n| n.output == v).map(|n| n.shape)).expect("checked: defined")
}

/// A 2-D convolution of each image of `x` (`input`, HWC) to `out` (HWC), kernel `[k][k][in][out]`: each
/// output sums its products in the order (`ky`, `kx`, input channel) from zero, then adds its bias; ReLU if
/// asked. The output channels advance side by side (each its own sum, so the order holds).
#[allow(clippy::too_many_arguments)]
fn conv2d(x: &[f32], input: Shape, out: Shape, kernel: &[f32], bias: &[f32], k: usize, stride: usize, pad: usize, relu: bool) -> Vec<f32> {
    let (Shape::Image { h, w, c: cin }, Shape::Image { h: oh, w: ow, c: cout }) = (input, out) else { unreachable!("checked: images") };
    let mut y = Vec::with_capacity(x.len() / (h * w * cin) * oh * ow * cout);
    let mut acc = vec![0f32; cout];
    for img in x.chunks_exact(h * w * cin) {
        for oy in 0..oh {
            for ox in 0..ow {
                acc.iter_mut().for_each(|a| *a = 0.0);
                for ky in 0..k {
                    let Some(iy) = (oy * stride + ky).checked_sub(pad).filter(|&iy| iy < h) else { continue };
                    for kx in 0..k {
                        let Some(ix) = (ox * stride + kx).checked_sub(pad).filter(|&ix| ix < w) else { continue };
                        let px = &img[(iy * w + ix) * cin..][..cin];
                        for (ci, &v) in px.iter().enumerate() {
                            let wrow = &kernel[((ky * k + kx) * cin + ci) * cout..][..cout];
                            for (a, &wv) in acc.iter_mut().zip(wrow) {
                                *a += v * wv;
                            }
                        }
                    }
                }
                y.extend(acc.iter().zip(bias).map(|(&a, &b)| if relu { (a + b).max(0.0) } else { a + b }));
            }
        }
    }
    y
}

/// Max-pooling of each image of `x` (`input`, HWC) over `k x k` windows `stride` apart.
fn maxpool(x: &[f32], input: Shape, out: Shape, k: usize, stride: usize) -> Vec<f32> {
    let (Shape::Image { h, w, c }, Shape::Image { h: oh, w: ow, .. }) = (input, out) else { unreachable!("checked: images") };
    let mut y = Vec::with_capacity(x.len() / (h * w * c) * oh * ow * c);
    for img in x.chunks_exact(h * w * c) {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let mut m = f32::NEG_INFINITY;
                    for ky in 0..k {
                        for kx in 0..k {
                            m = m.max(img[((oy * stride + ky) * w + ox * stride + kx) * c + ch]);
                        }
                    }
                    y.push(m);
                }
            }
        }
    }
    y
}

/// `x W + b` per row of `x` (`cols` long), `W` stored `[cols][rows]`: each output sums its products in
/// input order from zero, then adds its bias; ReLU if asked.
fn dense(x: &[f32], kernel: &[f32], bias: &[f32], rows: usize, cols: usize, relu: bool) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len() / cols * rows);
    let mut acc = vec![0f32; rows];
    for row in x.chunks_exact(cols) {
        acc.iter_mut().for_each(|a| *a = 0.0);
        for (i, &v) in row.iter().enumerate() {
            for (a, &wv) in acc.iter_mut().zip(&kernel[i * rows..][..rows]) {
                *a += v * wv;
            }
        }
        y.extend(acc.iter().zip(bias).map(|(&a, &b)| if relu { (a + b).max(0.0) } else { a + b }));
    }
    y
}

/// `exp(x - max) / sum`, in f32.
pub fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|&v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

/// `||a - b|| / ||b||` in f64 (0 when both are zero, infinite when only `b` is).
pub fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "relative_l2 of vectors of different lengths");
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        diff += (x - y) * (x - y);
        norm += y * y;
    }
    if diff == 0.0 {
        0.0
    } else {
        (diff / norm).sqrt()
    }
}

/// `x / sqrt(mean(x^2) + eps) * g` per row of `g.len()`.
fn rms_norm(x: &[f32], g: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(g.len()) {
        let mut sum = 0f32;
        for &v in row {
            sum += v * v;
        }
        let m = (sum / g.len() as f32 + eps).sqrt();
        out.extend(row.iter().zip(g).map(|(&v, &g)| v / m * g));
    }
    out
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Rotates each head's interleaved pairs of row `t` by the table of position `pos + t`.
fn rope(x: &[f32], heads: usize, head_dim: usize, theta: f32, pos: usize) -> Vec<f32> {
    let mut out = x.to_vec();
    for (t, row) in out.chunks_exact_mut(heads * head_dim).enumerate() {
        let table = opu_hw::numerics::vector::rope_table_row((pos + t) as u32, head_dim as u32, f64::from(theta));
        for head in row.chunks_exact_mut(head_dim) {
            for (pair, &(c, s)) in head.chunks_exact_mut(2).zip(&table) {
                let (x0, x1) = (pair[0], pair[1]);
                pair[0] = x0 * c - x1 * s;
                pair[1] = x0 * s + x1 * c;
            }
        }
    }
    out
}

/// Causal grouped-query attention of the batch's queries (row `t` at position `pos + t`) over the cache,
/// which already holds the batch's own K and V rows.
fn attention(q: &[f32], cache: &KvCache, n_head: usize, n_head_kv: usize, head_dim: usize, pos: usize) -> Vec<f32> {
    let (q_len, kv_len, group) = (n_head * head_dim, n_head_kv * head_dim, n_head / n_head_kv);
    let scale = (1.0 / (head_dim as f64).sqrt()) as f32;
    let mut out = vec![0f32; q.len()];
    let mut scores = Vec::new();
    for (t, (q_row, o_row)) in q.chunks_exact(q_len).zip(out.chunks_exact_mut(q_len)).enumerate() {
        let seen = pos + t + 1;
        for h in 0..n_head {
            let kv_off = (h / group) * head_dim;
            let qh = &q_row[h * head_dim..(h + 1) * head_dim];
            scores.clear();
            scores.extend((0..seen).map(|j| dot(qh, &cache.k[j * kv_len + kv_off..][..head_dim]) * scale));
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let oh = &mut o_row[h * head_dim..(h + 1) * head_dim];
            for (j, &p) in scores.iter().enumerate() {
                let p = p / sum;
                for (o, &v) in oh.iter_mut().zip(&cache.v[j * kv_len + kv_off..][..head_dim]) {
                    *o += p * v;
                }
            }
        }
    }
    out
}

/// `[dot(a[0], b[0]), .., dot(a[3], b[3])]`, each exactly as [`dot`] computes it.
fn dots4(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 4] {
    let len = a[0].len();
    let (a, b) = (a.map(|s| &s[..len]), b.map(|s| &s[..len]));
    let mut acc = [0f32; 4];
    for k in 0..len {
        for i in 0..4 {
            acc[i] += a[i][k] * b[i][k];
        }
    }
    acc
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0f32;
    for (&x, &y) in a.iter().zip(b) {
        acc += x * y;
    }
    acc
}

/// `y[t] = W x[t]` for each row `t` of `x` (`cols` long), `W` stored `[rows][cols]`; rows of `W` are shared
/// out among threads. Each dot product accumulates in index order, so the result does not depend on the
/// batch or the thread count.
fn matmul(w: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let n = x.len() / cols;
    // [row][token], contiguous per weight row, so threads can own disjoint row ranges.
    let mut by_row = vec![0f32; rows * n];
    let threads = if rows * cols * n < 1 << 18 { 1 } else { std::thread::available_parallelism().map_or(1, |p| p.get()).min(rows) };
    let per = rows.div_ceil(threads).next_multiple_of(4);
    let row = |r: usize| &w[r * cols..][..cols];
    let tok = |t: usize| &x[t * cols..][..cols];
    // Tokens in groups of 8, each group transposed (`[col][8]`), so that 8 dot products of one weight row
    // advance side by side in vector lanes (each still a multiply, then an add, in index order).
    let groups8 = n / 8;
    let xt: Vec<f32> = (0..groups8)
        .flat_map(|g| (0..cols).flat_map(move |k| (0..8).map(move |j| x[(8 * g + j) * cols + k])))
        .collect();
    // Per group of four weight rows: each group of 8 tokens against the four rows at once (`dots8x4`); the
    // tokens after the last full group of 8 four at a time against one row (`dots4`), and those left over
    // one at a time against the four rows. Every dot accumulates in index order on its own.
    let work = |first: usize, out: &mut [f32]| {
        let full = groups8 * 8 + (n - groups8 * 8) / 4 * 4;
        for (g, ys) in out.chunks_mut(4 * n).enumerate() {
            let (r0, nr) = (first + 4 * g, ys.len() / n);
            for t8 in 0..groups8 {
                let xt = &xt[t8 * cols * 8..][..cols * 8];
                if nr == 4 {
                    let acc = dots8x4([row(r0), row(r0 + 1), row(r0 + 2), row(r0 + 3)], xt);
                    (0..4).for_each(|i| ys[i * n + 8 * t8..][..8].copy_from_slice(&acc[i]));
                } else {
                    // the last rows (fewer than 4): a row at a time (the kernel's other three lanes wasted)
                    (0..nr).for_each(|i| ys[i * n + 8 * t8..][..8].copy_from_slice(&dots8x4([row(r0 + i); 4], xt)[0]));
                }
            }
            for i in 0..nr {
                for t in (groups8 * 8..full).step_by(4) {
                    let acc = dots4([row(r0 + i); 4], [tok(t), tok(t + 1), tok(t + 2), tok(t + 3)]);
                    ys[i * n + t..][..4].copy_from_slice(&acc);
                }
            }
            for t in full..n {
                if nr == 4 {
                    let acc = dots4([row(r0), row(r0 + 1), row(r0 + 2), row(r0 + 3)], [tok(t); 4]);
                    (0..4).for_each(|i| ys[i * n + t] = acc[i]);
                } else {
                    (0..nr).for_each(|i| ys[i * n + t] = dot(row(r0 + i), tok(t)));
                }
            }
        }
    };
    if threads == 1 {
        work(0, &mut by_row);
    } else {
        std::thread::scope(|s| {
            for (i, chunk) in by_row.chunks_mut(per * n).enumerate() {
                let work = &work;
                s.spawn(move || work(i * per, chunk));
            }
        });
    }
    let mut out = vec![0f32; rows * n];
    for (r, y) in by_row.chunks_exact(n).enumerate() {
        for (t, &v) in y.iter().enumerate() {
            out[t * rows + r] = v;
        }
    }
    out
}

/// The dot products of 4 weight rows with 8 tokens, given transposed (`xt[k * 8 + j]` = token j's element
/// k), each exactly as [`dot`] computes it (a multiply, then an add, in index order; no fused multiply-add).
fn dots8x4(w: [&[f32]; 4], xt: &[f32]) -> [[f32; 8]; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked above).
        return unsafe { dots8x4_avx(w, xt) };
    }
    dots8x4_plain(w, xt)
}

#[inline(always)]
fn dots8x4_plain(w: [&[f32]; 4], xt: &[f32]) -> [[f32; 8]; 4] {
    let len = w[0].len();
    let (w, xt) = (w.map(|r| &r[..len]), &xt[..len * 8]);
    let mut acc = [[0f32; 8]; 4];
    for (k, xk) in xt.chunks_exact(8).enumerate() {
        for i in 0..4 {
            let wk = w[i][k];
            for j in 0..8 {
                acc[i][j] += wk * xk[j];
            }
        }
    }
    acc
}

/// [`dots8x4_plain`] compiled for AVX: a row's 8 lanes in one register (separate multiplies and adds, as
/// Rust never contracts them into FMAs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn dots8x4_avx(w: [&[f32]; 4], xt: &[f32]) -> [[f32; 8]; 4] {
    dots8x4_plain(w, xt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Gguf;
    use crate::ir::tests::tiny_gguf;
    use crate::llama::{LayerNames, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::time::Instant;

    /// An independent, deliberately naive forward pass in f64 (no IR), one token at a time over the whole
    /// prefix, for checking the interpreter on the tiny model.
    fn naive_forward(g: &Gguf, tokens: &[u32]) -> Vec<Vec<f64>> {
        let c = LlamaConfig::from_gguf(g).unwrap();
        let w = |name: &str| -> Vec<f64> { g.dequantize(g.tensor(name).unwrap()).unwrap().into_iter().map(f64::from).collect() };
        let mv = |m: &[f64], x: &[f64]| -> Vec<f64> { m.chunks(x.len()).map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum()).collect() };
        let norm = |x: &[f64], gain: &[f64]| -> Vec<f64> {
            let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
            x.iter().zip(gain).map(|(v, g)| v / (ms + f64::from(c.rms_eps)).sqrt() * g).collect()
        };
        let rot = |x: &mut [f64], p: usize| {
            for head in x.chunks_mut(c.head_dim) {
                for i in 0..c.head_dim / 2 {
                    let a = p as f64 * f64::from(c.rope_theta).powf(-2.0 * i as f64 / c.head_dim as f64);
                    let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x0 * a.cos() - x1 * a.sin();
                    head[2 * i + 1] = x0 * a.sin() + x1 * a.cos();
                }
            }
        };
        let embd = w(TOKEN_EMBD);
        let out_w = if c.tied_output { embd.clone() } else { w(OUTPUT) };
        let mut ks: Vec<Vec<Vec<f64>>> = vec![vec![]; c.n_layer];
        let mut vs: Vec<Vec<Vec<f64>>> = vec![vec![]; c.n_layer];
        let mut logits = vec![];
        for (p, &tok) in tokens.iter().enumerate() {
            let mut x = embd[tok as usize * c.n_embd..][..c.n_embd].to_vec();
            for l in 0..c.n_layer {
                let n = LayerNames::new(l);
                let xn = norm(&x, &w(&n.attn_norm));
                let (mut q, mut k, v) = (mv(&w(&n.wq), &xn), mv(&w(&n.wk), &xn), mv(&w(&n.wv), &xn));
                rot(&mut q, p);
                rot(&mut k, p);
                ks[l].push(k);
                vs[l].push(v);
                let mut att = vec![0.0; c.n_embd];
                for h in 0..c.n_head {
                    let kvh = h * c.n_head_kv / c.n_head;
                    let d = c.head_dim;
                    let s: Vec<f64> = ks[l]
                        .iter()
                        .map(|k| (0..d).map(|i| q[h * d + i] * k[kvh * d + i]).sum::<f64>() / (d as f64).sqrt())
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|s| (s - m).exp()).sum();
                    for (j, s) in s.iter().enumerate() {
                        for i in 0..d {
                            att[h * d + i] += (s - m).exp() / z * vs[l][j][kvh * d + i];
                        }
                    }
                }
                x = x.iter().zip(mv(&w(&n.wo), &att)).map(|(a, b)| a + b).collect();
                let xn = norm(&x, &w(&n.ffn_norm));
                let h: Vec<f64> =
                    mv(&w(&n.w_gate), &xn).iter().zip(mv(&w(&n.w_up), &xn)).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
                x = x.iter().zip(mv(&w(&n.w_down), &h)).map(|(a, b)| a + b).collect();
            }
            logits.push(mv(&out_w, &norm(&x, &w(OUTPUT_NORM))));
        }
        logits
    }

    #[test]
    fn tiny_model_matches_a_naive_forward_pass() {
        for tied in [true, false] {
            let g = tiny_gguf(tied, |_| {});
            let mut m = Interpreter::new(&g).unwrap();
            let tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5];
            let f = m.forward(&tokens).unwrap();
            assert_eq!(m.position(), tokens.len());
            assert_eq!(f.logits.len(), tokens.len());
            assert_eq!(f.layer_hidden.len(), 2);
            assert!(f.layer_hidden.iter().all(|l| l.len() == tokens.len() && l.iter().all(|h| h.len() == 8)));
            let want = naive_forward(&g, &tokens);
            for (p, (got, want)) in f.logits.iter().zip(&want).enumerate() {
                let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
                let e = relative_l2(got, &want);
                assert!(e < 1e-5, "tied {tied} position {p}: relative error {e}");
            }
        }
    }

    #[test]
    fn tiny_model_batch_equals_one_at_a_time_bitwise() {
        let g = tiny_gguf(true, |_| {});
        let mut m = Interpreter::new(&g).unwrap();
        let tokens = [7, 0, 9, 9, 2, 4, 8, 1, 3, 6, 5];
        let all = m.forward(&tokens[..3]).unwrap();
        let rest = m.forward(&tokens[3..]).unwrap();
        assert_eq!(m.position(), tokens.len());
        m.reset();
        assert_eq!(m.position(), 0);
        let mut logits = vec![];
        let mut hidden = vec![vec![]; 2];
        for &t in &tokens {
            let f = m.forward(&[t]).unwrap();
            logits.extend(f.logits);
            for (l, h) in f.layer_hidden.into_iter().enumerate() {
                hidden[l].extend(h);
            }
        }
        let batched: Vec<Vec<f32>> = all.logits.into_iter().chain(rest.logits).collect();
        assert_eq!(batched, logits);
        for (l, one) in hidden.iter().enumerate() {
            let b: Vec<Vec<f32>> = all.layer_hidden[l].iter().chain(&rest.layer_hidden[l]).cloned().collect();
            assert_eq!(&b, one);
        }
        // A clone continues the sequence on its own.
        let mut a = m.clone();
        let (fa, fm) = (a.forward(&[1]).unwrap(), m.forward(&[1]).unwrap());
        assert_eq!(fa, fm);
    }

    #[test]
    fn dropping_each_block_equals_skipping_it_and_leaves_the_dense_state() {
        let g = tiny_gguf(true, |_| {});
        let mut m = Interpreter::new(&g).unwrap();
        m.forward(&[3, 1, 4]).unwrap();
        let tokens = [1, 5, 9, 2, 6];
        let (mut dense, mut dropped) = (m.clone(), m.clone());
        let mut seen = vec![];
        let f = dropped
            .forward_dropping_each(&tokens, &mut |d| {
                let (l, b) = (d.layer, d.block);
                // the same bits as a pass that skips the block for every token
                let mut skips = vec![[false; 2]; 2];
                skips[l][b as usize] = true;
                let want = m.clone().forward_skipping(&tokens, &skips).unwrap();
                assert_eq!(d.logits, want.logits.concat().as_slice(), "layer {l} {b:?}");
                assert_eq!(d.input.len(), tokens.len() * 8);
                assert_eq!(d.dense_logits, m.clone().forward(&tokens).unwrap().logits.concat().as_slice());
                seen.push((l, b));
            })
            .unwrap();
        assert_eq!(seen, [(1, Block::Attention), (1, Block::Ffn)]);
        // the dense pass's results, position and KV caches
        assert_eq!(f, dense.forward(&tokens).unwrap());
        assert_eq!(dropped.position(), dense.position());
        assert_eq!(dropped.forward(&[7, 8]).unwrap(), dense.forward(&[7, 8]).unwrap());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let g = tiny_gguf(true, |_| {});
        let mut m = Interpreter::new(&g).unwrap();
        let e = m.forward(&[]).unwrap_err().to_string();
        assert!(e.contains("at least one token"), "{e}");
        let e = m.forward(&[1, 10]).unwrap_err().to_string();
        assert!(e.contains("token id 10 is outside the vocabulary of 10"), "{e}");
        m.forward(&[1; 30]).unwrap();
        let e = m.forward(&[1; 3]).unwrap_err().to_string();
        assert!(e.contains("3 tokens at position 30 exceed the context length 32"), "{e}");
        assert_eq!(m.position(), 30, "a refused forward pass changes nothing");
        m.forward(&[1; 2]).unwrap();
        // A wrong-shaped tensor is refused at load.
        let g = tiny_gguf(true, |t| t.iter_mut().filter(|(n, _)| n == "blk.0.ffn_down.weight").for_each(|(_, d)| *d = vec![8, 12]));
        assert!(matches!(Interpreter::new(&g), Err(ModelError::Shape { .. })));
    }

    #[test]
    fn relative_l2_values() {
        assert_eq!(relative_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert_eq!(relative_l2(&[0.0; 3], &[0.0; 3]), 0.0);
        assert!((relative_l2(&[3.0, 4.0], &[0.0, 5.0]) - (10f64).sqrt() / 5.0).abs() < 1e-12);
        assert_eq!(relative_l2(&[1.0], &[0.0]), f64::INFINITY);
    }

    #[test]
    fn matmul_is_independent_of_batch_and_threads() {
        let (rows, cols) = (303, 1000); // large enough to run on several threads; a partial group of rows
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
        // 21 tokens: two groups of 8 (side by side in vector lanes), one of 4 (dots4), 1 left over
        let x: Vec<f32> = (0..21 * cols).map(|i| ((i * 104729) % 997) as f32 / 997.0 - 0.5).collect();
        let batch = matmul(&w, rows, cols, &x);
        for t in 0..21 {
            let one = matmul(&w, rows, cols, &x[t * cols..][..cols]);
            assert_eq!(&batch[t * rows..][..rows], &one[..]);
            let plain: Vec<f32> = (0..rows).map(|r| dot(&w[r * cols..][..cols], &x[t * cols..][..cols])).collect();
            assert_eq!(one, plain);
        }
    }

    // The real model. CI fetches it into the cache; the tests fail (never skip) without it.

    /// `$OPU_MODEL_GGUF`, else where `opu fetch smollm2` puts it (the host's model cache convention:
    /// `$OPU_CACHE`, else `$HOME/.cache/opu`).
    fn model_path() -> PathBuf {
        let cache = || {
            std::env::var_os("OPU_CACHE")
                .filter(|c| !c.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/opu"))
        };
        let path = std::env::var_os("OPU_MODEL_GGUF")
            .map_or_else(|| cache().join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), PathBuf::from);
        assert!(
            path.is_file(),
            "SmolLM2-135M-Instruct (Q4_1 GGUF) not found at {}: run `opu fetch smollm2` or set OPU_MODEL_GGUF \
             to its path",
            path.display()
        );
        path
    }

    /// The model, loaded once for all tests (clones share the weights).
    fn smollm2() -> Interpreter {
        static MODEL: OnceLock<Interpreter> = OnceLock::new();
        MODEL
            .get_or_init(|| {
                let start = Instant::now();
                let g = Gguf::open(model_path()).unwrap();
                let m = Interpreter::new(&g).unwrap();
                eprintln!("loaded {} in {:.2?}", g.path.display(), start.elapsed());
                m
            })
            .clone()
    }

    /// The ids of `key` in the entry `name` of the section `section` of the reference test vectors.
    fn reference_ids(section: &str, name: &str, key: &str) -> Vec<u32> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/smollm2_reference.json");
        let json = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let after = |s: &str, from: usize| from + json[from..].find(s).unwrap_or_else(|| panic!("{path}: no `{s}`")) + s.len();
        let at = after(&format!("\"{name}\""), after(&format!("\"{section}\""), 0));
        let open = after("[", after(&format!("\"{key}\""), at));
        let close = open + json[open..].find(']').unwrap();
        json[open..close].split(',').map(|s| s.trim().parse().unwrap()).collect()
    }

    fn argmax(logits: &[f32]) -> u32 {
        opu_hw::numerics::vector::argmax(logits.iter().copied())
    }

    #[test]
    fn smollm2_greedy_chat_capital() {
        let prompt = reference_ids("tokenization", "chat_capital", "prompt_ids");
        let want = reference_ids("greedy", "chat_capital", "generated_ids");
        assert_eq!(want, [504, 3575, 282, 4649, 314, 7042, 30, 2]);
        let mut m = smollm2();
        let start = Instant::now();
        let f = m.forward(&prompt).unwrap();
        let prefill = start.elapsed();
        let mut next = argmax(f.logits.last().unwrap());
        let mut generated = vec![next];
        let start = Instant::now();
        while next != 2 && next != 0 && generated.len() < want.len() + 8 {
            next = argmax(&m.forward(&[next]).unwrap().logits[0]);
            generated.push(next);
        }
        let per_token = start.elapsed() / (generated.len() as u32 - 1).max(1);
        eprintln!("prefill of {} tokens: {prefill:.2?}; decode: {per_token:.2?} per token", prompt.len());
        assert_eq!(generated, want);
        assert_eq!(m.position(), prompt.len() + want.len() - 1);
    }

    #[test]
    fn smollm2_prefill_equals_incremental() {
        let prompt = reference_ids("tokenization", "plain_robot", "prompt_ids");
        let mut m = smollm2();
        let all = m.forward(&prompt).unwrap();
        m.reset();
        let mut worst = 0f32;
        for (p, &t) in prompt.iter().enumerate() {
            let one = m.forward(&[t]).unwrap();
            assert_eq!(one.logits.len(), 1);
            for (a, b) in all.logits[p].iter().zip(&one.logits[0]) {
                worst = worst.max((a - b).abs());
            }
        }
        eprintln!("prefill vs incremental: largest logit difference {worst}");
        assert!(worst <= 1e-3, "prefill and incremental logits differ by {worst}");
    }

    #[test]
    fn smollm2_layer_hidden() {
        let mut m = smollm2();
        assert_eq!(m.graph().layer_outputs.len(), 30);
        let f = m.forward(&[1, 9690, 198]).unwrap();
        assert_eq!(f.logits.len(), 3);
        assert!(f.logits.iter().all(|l| l.len() == 49152 && l.iter().all(|v| v.is_finite())));
        assert_eq!(f.layer_hidden.len(), 30);
        assert!(f.layer_hidden.iter().all(|l| l.len() == 3 && l.iter().all(|h| h.len() == 576)));
        let last = &f.layer_hidden[29][2];
        assert_eq!(relative_l2(last, last), 0.0);
        // Layers differ from each other: the residual stream moves.
        assert!(relative_l2(&f.layer_hidden[28][2], last) > 0.0);
    }
}

//! The fusion pass of a llama graph: its nodes matched, layer by layer, to the instruction streams the
//! overlay runs (`crate::lower` emits them from what this pass returns, not from the GGUF's metadata).
//!
//! Per layer the pass expects the graph [`crate::ir::build_llama`] builds and checks every edge of it:
//!
//! ```text
//! xn = rmsnorm(x)          q, k, v = matmul(xn) x3       q, k = rope(q), rope(k)     a = attention(q, k, v)
//! x = add(x, matmul(a))    xn = rmsnorm(x)               g, u = matmul(xn) x2        x = add(x, matmul(swiglu(g, u)))
//! ```
//!
//! and fuses:
//! - each residual `add(x, matmul(..))` into the projection (`matmul acc=1`: the product is added to x as it
//!   is written), and the sum of squares the next `rmsnorm` needs into the same stream (`red=set`), so that
//!   each `rmsnorm` becomes one element-wise pass;
//! - `rope` of q and k into one instruction, and the q, k, v (gate, up) projections of one input into one
//!   `matmul` where their weights lie back to back (decided at lowering, where the layout is known).
//!
//! The overlay runs one program for all layers, so every layer must have the same dimensions. What does not
//! match is refused, naming the node.

use crate::ir::{Graph, Node, Op, Shape, ValueId};
use crate::llama::{LayerNames, LlamaConfig, ModelError};

/// A llama graph as the lowering takes it: its dimensions (read from the nodes) and its tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaLowering {
    /// The dimensions, as the nodes give them (`n_layer` from the layers found, `tied_output` from the
    /// output projection reading the embedding table).
    pub dims: LlamaConfig,
    pub embedding: String,
    /// Per layer its tensors (norm gains and matrices).
    pub layers: Vec<LayerNames>,
    pub output_norm: String,
    pub output: String,
}

/// Matches `graph` (see the module comment).
pub fn llama(graph: &Graph) -> Result<LlamaLowering, ModelError> {
    graph.check()?;
    let mut at = Cursor { nodes: &graph.nodes, i: 0 };
    let token = match graph.inputs.as_slice() {
        [i] if i.shape == Shape::Token => i.value,
        _ => return Err(ModelError::Graph { what: "the llama lowering takes a graph whose one input is a token".into() }),
    };
    let embed = at.take("the token embedding", |op| matches!(op, Op::Embedding { .. }))?;
    at.reads(embed, &[token])?;
    let Op::Embedding { table, vocab, dim } = &embed.op else { unreachable!() };
    let e = *dim;
    let mut x = embed.output;
    let mut layers = Vec::new();
    let mut dims: Option<(usize, usize, usize, usize, f32, f32)> = None;
    while at.peek().is_some_and(|n| n.layer.is_some()) {
        let l = layers.len();
        let norm = at.take("the attention norm", |op| matches!(op, Op::RmsNorm { .. }))?;
        at.reads(norm, &[x])?;
        let q = at.matmul("the query projection", norm.output, e)?;
        let k = at.matmul("the key projection", norm.output, e)?;
        let v = at.matmul("the value projection", norm.output, e)?;
        let q_rope = at.take("the query RoPE", |op| matches!(op, Op::Rope { .. }))?;
        at.reads(q_rope, &[q.output])?;
        let k_rope = at.take("the key RoPE", |op| matches!(op, Op::Rope { .. }))?;
        at.reads(k_rope, &[k.output])?;
        let att = at.take("the attention", |op| matches!(op, Op::Attention { layer, .. } if *layer == l))?;
        at.reads(att, &[q_rope.output, k_rope.output, v.output])?;
        let o = at.matmul("the attention output projection", att.output, q.shape.len())?;
        let res = at.take("the attention residual", |op| matches!(op, Op::Add))?;
        at.reads(res, &[x, o.output])?;
        let ffn_norm = at.take("the FFN norm", |op| matches!(op, Op::RmsNorm { .. }))?;
        at.reads(ffn_norm, &[res.output])?;
        let gate = at.matmul("the FFN gate projection", ffn_norm.output, e)?;
        let up = at.matmul("the FFN up projection", ffn_norm.output, e)?;
        let act = at.take("the SwiGLU", |op| matches!(op, Op::SwiGlu))?;
        at.reads(act, &[gate.output, up.output])?;
        let down = at.matmul("the FFN down projection", act.output, gate.shape.len())?;
        let res2 = at.take("the FFN residual", |op| matches!(op, Op::Add))?;
        at.reads(res2, &[res.output, down.output])?;
        x = res2.output;
        if graph.layer_outputs.get(l) != Some(&x) {
            return Err(at.err(res2, "is not the layer's output in the graph's layer outputs"));
        }
        let (Op::RmsNorm { eps, .. }, Op::RmsNorm { eps: eps2, .. }) = (&norm.op, &ffn_norm.op) else { unreachable!() };
        let Op::Rope { theta, head_dim: rope_hd, .. } = q_rope.op else { unreachable!() };
        let Op::Rope { theta: k_theta, head_dim: k_hd, .. } = k_rope.op else { unreachable!() };
        let Op::Attention { n_head, n_head_kv, head_dim, .. } = att.op else { unreachable!() };
        if eps != eps2 || theta != k_theta || rope_hd != head_dim || k_hd != head_dim {
            return Err(at.err(att, "the layer's two norms (eps), its two RoPEs (theta) and its attention (head_dim) disagree"));
        }
        let this = (n_head, n_head_kv, head_dim, gate.shape.len(), *eps, theta);
        if dims.is_some_and(|d| d != this) {
            return Err(at.err(att, &format!("layer {l} has other dimensions than layer 0: one program runs every layer")));
        }
        dims = Some(this);
        let w = |n: &Node| n.op.weight().expect("a matmul has a weight").to_string();
        let gain = |n: &Node| n.op.weight().expect("a norm has a gain").to_string();
        layers.push(LayerNames {
            attn_norm: gain(norm),
            wq: w(q),
            wk: w(k),
            wv: w(v),
            wo: w(o),
            ffn_norm: gain(ffn_norm),
            w_gate: w(gate),
            w_up: w(up),
            w_down: w(down),
        });
    }
    let Some((n_head, n_head_kv, head_dim, n_ff, rms_eps, rope_theta)) = dims else {
        return Err(ModelError::Graph { what: "the llama lowering found no layer".into() });
    };
    let out_norm = at.take("the output norm", |op| matches!(op, Op::RmsNorm { eps, .. } if *eps == rms_eps))?;
    at.reads(out_norm, &[x])?;
    let out = at.matmul("the output projection", out_norm.output, e)?;
    if graph.output != out.output || at.peek().is_some() {
        return Err(at.err(out, "is not the graph's output, or nodes follow it"));
    }
    let output = out.op.weight().expect("a matmul has a weight").to_string();
    let dims = LlamaConfig {
        n_layer: layers.len(),
        n_embd: e,
        n_ff,
        n_head,
        n_head_kv,
        head_dim,
        vocab: *vocab,
        context_length: graph.context_length,
        rope_theta,
        rms_eps,
        tied_output: output == *table,
    };
    if out.shape.len() != dims.vocab {
        return Err(at.err(out, &format!("gives {} logits for a vocabulary of {}", out.shape.len(), dims.vocab)));
    }
    Ok(LlamaLowering { dims, embedding: table.clone(), layers, output_norm: out_norm.op.weight().expect("a norm has a gain").to_string(), output })
}

/// The nodes in order, taken one by one.
struct Cursor<'a> {
    nodes: &'a [Node],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a Node> {
        self.nodes.get(self.i)
    }
    fn err(&self, node: &Node, what: &str) -> ModelError {
        ModelError::Graph { what: format!("llama lowering: node `{}` ({}) {what}", node.name, node.op.kind()) }
    }
    /// The next node, which must be `what` (`is` its op).
    fn take(&mut self, what: &str, is: impl Fn(&Op) -> bool) -> Result<&'a Node, ModelError> {
        match self.peek() {
            Some(n) if is(&n.op) => {
                self.i += 1;
                Ok(n)
            }
            Some(n) => Err(self.err(n, &format!("is where the llama lowering expects {what}"))),
            None => Err(ModelError::Graph { what: format!("llama lowering: the graph ends where {what} is expected") }),
        }
    }
    /// The next node, a matmul of `cols` columns reading `input`.
    fn matmul(&mut self, what: &str, input: ValueId, cols: usize) -> Result<&'a Node, ModelError> {
        let n = self.take(what, |op| matches!(op, Op::MatMul { cols: c, .. } if *c == cols))?;
        self.reads(n, &[input])?;
        Ok(n)
    }
    /// Checks that `node` reads exactly `inputs`.
    fn reads(&self, node: &Node, inputs: &[ValueId]) -> Result<(), ModelError> {
        if node.inputs != inputs {
            let f = |v: &[ValueId]| v.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
            return Err(self.err(node, &format!("reads ({}), the llama lowering expects ({})", f(&node.inputs), f(inputs))));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::build_llama;
    use crate::ir::tests::smollm2;

    #[test]
    fn the_built_graph_gives_back_its_config_and_tensors() {
        for tied in [true, false] {
            let cfg = LlamaConfig { tied_output: tied, ..smollm2() };
            let low = llama(&build_llama(&cfg)).unwrap();
            assert_eq!(low.dims, cfg);
            assert_eq!(low.layers.len(), 30);
            assert_eq!(low.layers[7].w_down, "blk.7.ffn_down.weight");
            assert_eq!(low.layers[29].attn_norm, "blk.29.attn_norm.weight");
            assert_eq!((low.embedding.as_str(), low.output_norm.as_str()), ("token_embd.weight", "output_norm.weight"));
            assert_eq!(low.output, if tied { "token_embd.weight" } else { "output.weight" });
        }
    }

    #[test]
    fn graphs_the_lowering_cannot_run_are_refused_naming_the_node() {
        let good = build_llama(&smollm2());
        let refused = |f: &dyn Fn(&mut Graph)| {
            let mut g = good.clone();
            f(&mut g);
            llama(&g).unwrap_err().to_string()
        };
        // the residual taking the normed input instead of x
        let e = refused(&|g| {
            let normed = g.nodes[1].output;
            g.nodes.iter_mut().find(|n| n.name == "blk.0.attn_residual").unwrap().inputs[0] = normed;
        });
        assert!(e.contains("node `blk.0.attn_residual` (add) reads (%2, %") && e.contains("expects (%1, %"), "{e}");
        // the key and value projections swapped in order: k is where the value projection is read
        let e = refused(&|g| {
            let k = g.nodes.iter().position(|n| n.name == "blk.3.k").unwrap();
            g.nodes.swap(k, k + 1);
        });
        assert!(e.contains("blk.3"), "{e}");
        // a layer with another epsilon
        let e = refused(&|g| {
            if let Op::RmsNorm { eps, .. } = &mut g.nodes.iter_mut().find(|n| n.name == "blk.4.ffn_norm").unwrap().op {
                *eps = 1e-6;
            }
        });
        assert!(e.contains("blk.4.attention") && e.contains("disagree"), "{e}");
    }
}

//! Lowering a llama model to OPU programs, from its graph IR (`crate::ir::build_llama`) as the fusion pass
//! (`crate::fuse`) matches it.
//!
//! Two entry points share one device-memory image: `decode` runs one token (`ntok = 1`), `prefill` runs a
//! batch of `max_batch` prompt tokens per pass, so every weight matrix is streamed once per batch rather than
//! once per token. Both read the token ids of the pass from the `ids` region, take the position of the first
//! token in `r9` (ARG1), append K/V for their positions and write FP32 logits of every token of the pass to
//! the `logits` region (row `t` at `logits_addr + t * logits_row_bytes`).
//!
//! Fusions (SkipOPU): each residual add is fused into the projection that produces it (`matmul acc=1`), and
//! the sum of squares that the next RMSNorm needs accumulates in the same stream (`red=set`), so RMSNorm is a
//! single element-wise pass; attention runs online softmax over the KV cache, once per KV head for its whole
//! group of query heads (each K/V row is read once per group).

use crate::gguf::Gguf;
use crate::ir::build_llama;
use crate::llama::{tensor, LlamaConfig, ModelError};
use crate::plan::{line, line_up, pad4, DevicePlan, SpmPlan};
use crate::quantize::{self, QuantMatrix, TensorReport};
use crate::routers::{Block, Routers};
use opu_hw::container::{Container, ContainerError, MemoryLayout};
use opu_hw::isa::{Csr, F32Bits, Instr, Pred, RedMode, Reg, RopeStyle, LINE_BYTES, SPM_WORD_BYTES};
use opu_hw::weight_layout::WeightLayout;
use opu_hw::numerics::fp16::{f16_to_f32, f32_to_f16};
use opu_hw::numerics::vector::{rope_table_row, DType, VecOp};
use opu_hw::numerics::WeightFormat;
use opu_hw::OverlayConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Options of `opu compile`.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// KV cache and RoPE table size in positions (default: the model's context length).
    pub max_context: Option<usize>,
    /// Store the residual stream after every layer into the `trace` region (layer-by-layer comparison).
    pub trace_layers: bool,
    /// Per-token routers: decode passes route each routed block and skip it per token (docs/skipping.md).
    /// `None` (or no routed block) compiles the dense program.
    pub routers: Option<Routers>,
    /// Where K/V rows live (docs/skipping.md, "KV layout").
    pub kv_layout: KvLayout,
    /// KV caches for this many sessions at once, and the `sessions{n}` entries that advance all of them in
    /// one pass, with room for prompt rows beside (up to the rows the scratchpad holds, at most `max_batch`;
    /// docs/serving.md, "Batched decode"). 0 or 1: one sequence, today's entries only.
    pub max_sessions: usize,
}

/// Where the K/V of each (layer, position) is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvLayout {
    /// Per layer a region of `max_context` rows, position `t` at row `t` (a skipped attention leaves its
    /// row unwritten but allocated).
    #[default]
    Dense,
    /// One pool of rows that every layer shares and a row index per layer (`kv_index`, docs/isa.md): the
    /// runtime gives each (layer, position) a row before the pass and takes it back when the token skipped
    /// the layer's attention, so skipped attention stores nothing. `pool_rows`: the pool's size in rows
    /// (default: `n_layer x max_context`, enough for a dense run).
    Indexed { pool_rows: Option<u64> },
}

impl KvLayout {
    pub fn name(self) -> &'static str {
        match self {
            KvLayout::Dense => "dense",
            KvLayout::Indexed { .. } => "indexed",
        }
    }
}

/// Why a model could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error("{path}: {what}")]
    Unsupported { path: String, what: String },
    #[error("overlay `{config}`: {what}")]
    DoesNotFit { config: String, what: String },
}

/// One entry point of a program.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub name: String,
    /// Tokens per pass.
    pub ntok: usize,
    pub code_addr: u64,
    pub instructions: usize,
}

/// What the runtime needs to drive a compiled model (stored as the container's META section).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProgramMeta {
    pub kind: String,
    pub model: String,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub max_context: usize,
    pub entries: Vec<Entry>,
    /// Token ids of the pass (u32 each).
    pub ids_addr: u64,
    /// FP32 logits, one row per token of the pass.
    pub logits_addr: u64,
    pub logits_row_bytes: u64,
    /// Residual stream after each layer (FP16), `[layer][token][n_embd]`, when traced.
    pub trace_addr: Option<u64>,
    pub trace_layer_bytes: u64,
    pub trace_row_bytes: u64,
    /// Weight bytes (all matrices as stored on the device).
    pub weight_bytes: u64,
    /// Device-memory bytes one decode step reads and writes apart from attention's K/V reads (with every
    /// routed block executed).
    pub decode_bytes_static: u64,
    /// K/V bytes attention reads per cached position per decode step.
    pub kv_bytes_per_position: u64,
    pub tensors: Vec<TensorReport>,
    /// Largest relative error of the FP16 embedding table the gather reads (exact weights rounded to FP16).
    pub embedding_f16_max_rel_error: f64,
    /// Where the program routes blocks per token (absent for a dense program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipping: Option<SkipMeta>,
    /// The K/V pool and row indexes of the indexed layout (absent: the dense layout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_index: Option<KvIndexMeta>,
    /// The KV caches of several sessions and the entries that batch them (absent: one sequence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsMeta>,
}

/// Several sessions on one program (`CompileOptions::max_sessions`, docs/serving.md "Batched decode").
///
/// Every layer's K and V regions hold `slots x max_context` rows: session slot `s` owns rows
/// `s x max_context ..`, and its session table (`kvindex_slots`, one per slot, read-only) maps its
/// position `p` to row `s x max_context + p` through the `kv_index` CSR. Slot 0's rows are those the
/// `decode` and `prefill` entries use, so those entries serve slot 0 exactly as a one-session program.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SessionsMeta {
    /// Sessions the program holds at once.
    pub slots: usize,
    /// The rows of a `sessions{n}` pass: for row `t`, the u32 position at `rows_addr + 8 t` and the u32 slot
    /// at `rows_addr + 8 t + 4` (the token id is row `t` of `ids_addr`, its logits row `t` of `logits_addr`).
    pub rows_addr: u64,
    /// `sessions_entry[n - 1]`: the index in `entries` of `sessions{n}`, a pass of `n` rows, each the next
    /// token of any session at its own position (rows of one session must be its consecutive positions in
    /// order). A pass takes up to [`SessionsMeta::max_rows`] rows, at least `slots`.
    pub sessions_entry: Vec<usize>,
    /// The index in `entries` of `prefill_slot`: `prefill`'s pass of consecutive positions from ARG1 for the
    /// session in slot ARG3.
    pub prefill_slot_entry: usize,
}

impl SessionsMeta {
    /// The most rows a `sessions{n}` pass takes.
    pub fn max_rows(&self) -> usize {
        self.sessions_entry.len()
    }
}

/// The indexed KV layout of a program: the runtime writes each layer's row index before a pass
/// (docs/skipping.md, "KV layout").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KvIndexMeta {
    /// `[layer]`: byte address of the layer's row index (a u32 per position).
    pub index_addr: Vec<u64>,
    /// Rows of the pool.
    pub pool_rows: u64,
    /// Bytes of one row: the K and then the V of every KV head of one (layer, position).
    pub row_bytes: u64,
}

/// The skipping plan of a program compiled with routers (docs/skipping.md).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SkipMeta {
    /// `[layer] = [attention routed, FFN routed]`.
    pub routed: Vec<[bool; 2]>,
    /// `[layer]`: the byte address of the layer's presence bytes (one per position), for layers whose
    /// attention is routed.
    pub presence_addr: Vec<Option<u64>>,
    /// `[layer]`: the byte address of the layer's FFN decision bytes (one per position: 1 executed, 0
    /// skipped), for layers whose FFN is routed.
    #[serde(default)]
    pub ffn_marks_addr: Vec<Option<u64>>,
    /// Bytes of all router operands in device memory.
    pub router_bytes: u64,
    /// `[layer] = [attention, FFN]`: the device-memory bytes a routed block's skipped instructions move in a
    /// one-token pass when it executes (weights, norm gains, the K/V append with its index entry and presence
    /// byte): what each skip saves.
    #[serde(default)]
    pub block_bytes: Vec<[u64; 2]>,
    /// Bytes of memory one history-buffer hit saves: one KV head's K and V rows of a position.
    #[serde(default)]
    pub history_hit_bytes: u64,
}

/// A compiled model: the container and its meta.
pub struct Compiled {
    pub container: Container,
    pub meta: ProgramMeta,
}

/// Device addresses of one layer's data.
struct LayerAddrs {
    attn_norm: u64,
    ffn_norm: u64,
    wq: (u64, WeightFormat),
    wk: (u64, WeightFormat),
    wv: (u64, WeightFormat),
    wo: (u64, WeightFormat),
    w_gate: (u64, WeightFormat),
    w_up: (u64, WeightFormat),
    w_down: (u64, WeightFormat),
    k_cache: u64,
    v_cache: u64,
    /// The row index of the indexed KV layout (the `kv_index` CSR).
    kv_index: Option<u64>,
    /// Router operands (`route`'s `w`) of the attention and FFN blocks, where routed.
    router: [Option<u64>; 2],
    /// The presence bytes of a layer whose attention is routed (the `kv_present` CSR).
    presence: Option<u64>,
    /// The decision bytes of a layer whose FFN is routed: its `route` marks them through `kv_present` as
    /// attention's marks the presence bytes (1 executed, 0 skipped), so the runtime can count each layer's
    /// FFN skips.
    ffn_marks: Option<u64>,
}

struct Layout {
    ids: u64,
    logits: u64,
    logits_row_bytes: u64,
    embed_f16: u64,
    out_norm: u64,
    output: (u64, WeightFormat),
    rope: u64,
    layers: Vec<LayerAddrs>,
    trace: Option<u64>,
    trace_layer_bytes: u64,
    /// The overlay's PE lanes: the matrices' layout.
    pe_lanes: u32,
    /// Several sessions' KV caches (`SessionsMeta`).
    sessions: Option<SessionLayout>,
}

/// Device addresses of the sessions' tables and the rows of a `sessions{n}` pass.
#[derive(Clone, Copy)]
struct SessionLayout {
    /// Slot `s`'s table at `tables + s x table_bytes` (u32 row per position).
    tables: u64,
    table_bytes: u64,
    rows: u64,
}

/// Whose tokens a pass runs, and where their K/V live.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PassRows {
    /// Consecutive positions from ARG1 of one sequence; position `p`'s K/V at row `p` of each layer (with
    /// sessions: slot 0's rows).
    Sequence,
    /// Consecutive positions from ARG1 of the session in slot ARG3, its K/V through its session table.
    SessionSequence,
    /// Row `t` is a token of any session: its position and slot from the `rows` region.
    Sessions,
}

/// The slot of `prefill_slot` (ARG3).
const SLOT: Reg = Reg(11);

/// Scratchpad buffers (word addresses) for a pass of `b` tokens.
struct SpmBufs {
    ids: u32,
    x: u32,
    xn: u32,
    q: u32,
    k: u32,
    v: u32,
    att: u32,
    gate: u32,
    up: u32,
    rope: u32,
    gain: u32,
    logits: u32,
    /// (position, slot) of each row of a `sessions{n}` pass (other passes: unused).
    rows: u32,
    /// Output rows per chunk of the output projection.
    chunk_rows: usize,
}

fn r(i: u8) -> Reg {
    Reg(i)
}

const POS: Reg = Reg(9);
/// The predicates `route` sets for the attention and the FFN block.
const ATTN_PRED: Pred = Pred(1);
const FFN_PRED: Pred = Pred(2);

/// Compiles a llama GGUF for `config`.
pub fn compile(g: &Gguf, config: &OverlayConfig, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    // The front end reads the hyperparameters (checking every tensor against them) and builds the graph;
    // the lowering starts from the graph: its fusion pass gives the dimensions and the tensors it emits
    // for (`crate::fuse`).
    let graph = build_llama(&LlamaConfig::from_gguf(g)?);
    graph.validate(g)?;
    let low = crate::fuse::llama(&graph)?;
    let cfg = low.dims.clone();
    let path = g.path.display().to_string();
    let unsupported = |what: String| CompileError::Unsupported { path: path.clone(), what };
    let fits = |what: String| CompileError::DoesNotFit { config: config.name.clone(), what };
    let (e, hd, hkv) = (cfg.n_embd, cfg.head_dim, cfg.n_head_kv);
    if e % 16 != 0 || hd % 16 != 0 || hd > 1022 {
        return Err(unsupported(format!("n_embd {e} and head_dim {hd} must be multiples of 16 (head_dim at most 1022)")));
    }
    if cfg.n_head / hkv > 15 {
        return Err(unsupported(format!("{} query heads per KV head: the overlay's attention groups hold at most 15", cfg.n_head / hkv)));
    }
    if e > 65535 || cfg.n_ff > 65535 {
        return Err(unsupported("matrix dimensions above 65535".into()));
    }
    let routers = opts.routers.as_ref().filter(|r| r.count() > 0);
    // With routers every position needs a history slot (docs/skipping.md): by default the context is the
    // model's, capped at the slots; a larger --max-context is refused below.
    let default_context = if routers.is_some() { cfg.context_length.min(config.kv_history_slots as usize) } else { cfg.context_length };
    let max_context = opts.max_context.unwrap_or(default_context).min(cfg.context_length);
    if max_context == 0 {
        return Err(unsupported("--max-context must be at least 1".into()));
    }
    // The prefill pass takes as many tokens as the scratchpad holds, up to `max_batch` (a wide model's pass
    // of 64 tokens may not fit: Llama-7B's at u280 takes 20).
    let batch = (1..=config.max_batch as usize).rev().find(|&n| spm_buffers(&cfg, config, n, false).is_some()).unwrap_or(1);
    // Several sessions (docs/serving.md): a `sessions{n}` pass takes up to as many rows as the scratchpad
    // holds (at most `max_batch`), a session's next token or a run of its prompt each, so the slots are
    // bounded by the rows a pass can take; their K/V go through the session tables (`kv_index`), which the
    // indexed layout and per-token routing use for their own purposes.
    let slots = opts.max_sessions.max(1);
    let mut pass_rows = 0;
    if slots > 1 {
        if routers.is_some() || opts.kv_layout != KvLayout::Dense {
            return Err(unsupported(format!(
                "--max-sessions {slots} needs the dense program: per-token routing and the indexed KV layout decide per one-token pass, and a batched pass runs every session's blocks"
            )));
        }
        if opts.trace_layers {
            return Err(unsupported(format!("--max-sessions {slots} with --trace-layers: the trace holds one sequence")));
        }
        let most = (1..=config.max_batch as usize).rev().find(|&n| spm_buffers(&cfg, config, n, true).is_some()).unwrap_or(0);
        if slots > most {
            return Err(fits(format!("--max-sessions {slots}: a pass of the overlay takes at most {most} rows (max_batch {} and the scratchpad)", config.max_batch)));
        }
        pass_rows = most;
    }
    if let Some(r) = routers {
        if r.layers.len() != cfg.n_layer || r.hidden != e {
            return Err(unsupported(format!("routers for {} layers of hidden {}, the model has {} layers of hidden {e}", r.layers.len(), r.hidden, cfg.n_layer)));
        }
        if r.layers[0].iter().any(Option::is_some) {
            return Err(unsupported("layer 0 always executes: it takes no router".into()));
        }
        // An absent position is served from its history slot (docs/isa.md, `attn`): every position needs one.
        if max_context > config.kv_history_slots as usize || hkv * hd > config.kv_history_width as usize {
            return Err(fits(format!(
                "skipping serves skipped K/V from the history buffer of {} slots x {} FP16: it needs --max-context <= {} (asked {max_context}) and n_head_kv x head_dim = {} <= {}",
                config.kv_history_slots, config.kv_history_width, config.kv_history_slots, hkv * hd, config.kv_history_width
            )));
        }
    }

    // Weights, in overlay formats.
    let mut reports = Vec::new();
    let mut mat = |name: &str| -> Result<QuantMatrix, CompileError> {
        let (m, rep) = quantize::matrix(g, tensor(g, name)?)?;
        reports.push(rep);
        Ok(m)
    };
    let mut layer_mats = Vec::with_capacity(cfg.n_layer);
    for l in 0..cfg.n_layer {
        let n = &low.layers[l];
        layer_mats.push([mat(&n.wq)?, mat(&n.wk)?, mat(&n.wv)?, mat(&n.wo)?, mat(&n.w_gate)?, mat(&n.w_up)?, mat(&n.w_down)?]);
    }
    let output = mat(&low.output)?;
    // The matrix unit holds whole rows in its weight buffer (docs/isa.md, `matmul`).
    let max_row = config.max_matmul_row_bytes() as usize;
    for m in layer_mats.iter().flatten().chain(std::iter::once(&output)) {
        let rb = m.format.row_bytes(m.cols).unwrap_or(usize::MAX);
        if rb > max_row {
            return Err(fits(format!(
                "a row of `{}` ({} columns, {}) is {rb} bytes; the weight buffer holds rows of at most {max_row} bytes (weight_fifo_bytes = {})",
                m.name,
                m.cols,
                m.format.name(),
                config.weight_fifo_bytes
            )));
        }
    }
    let gains = |name: &str| -> Result<Vec<u8>, CompileError> {
        Ok(quantize::gains(g, tensor(g, name)?)?.iter().flat_map(|x| x.to_le_bytes()).collect())
    };

    // The embedding table the gather reads: the exact weights rounded to FP16 (activations are FP16).
    let embd = tensor(g, &low.embedding)?;
    let embd_f32 = g.dequantize(embd).map_err(ModelError::from)?;
    let mut embed_f16 = Vec::with_capacity(embd_f32.len() * 2);
    let mut embed_rel = 0.0f64;
    for &w in &embd_f32 {
        let h = f32_to_f16(w);
        if w != 0.0 {
            embed_rel = embed_rel.max(((f16_to_f32(h) - w) / w).abs() as f64);
        }
        embed_f16.extend_from_slice(&h.to_le_bytes());
    }
    drop(embd_f32);

    // Device memory.
    let mut plan = DevicePlan::default();
    let code_addr = plan.place("code", "code", 4 << 20);
    let ids = plan.place("ids", "io", line_up(batch.max(slots) as u64 * 4));
    let logits_row_bytes = line_up(cfg.vocab as u64 * 4);
    let logits = plan.place("logits", "io", logits_row_bytes * batch.max(slots) as u64);
    let session_rows = (slots > 1).then(|| plan.place("rows", "io", line_up(pass_rows as u64 * 8)));
    let mut image = Image { plan, data: Vec::new(), pe_lanes: config.pe_lanes };
    let mut layers = Vec::with_capacity(cfg.n_layer);
    let kv_row = (hkv * hd * 2) as u64;
    for (l, mats) in layer_mats.into_iter().enumerate() {
        let n = &low.layers[l];
        let attn_norm = image.put(&n.attn_norm, "norms", gains(&n.attn_norm)?);
        let ffn_norm = image.put(&n.ffn_norm, "norms", gains(&n.ffn_norm)?);
        let [wq, wk, wv, wo, w_gate, w_up, w_down] = mats;
        // q, k and v, and gate and up, back to back where they can be (`Image::put_matrix_after`): one `matmul`
        // then streams them as one matrix
        let (q_rows, k_rows, gate_rows) = (wq.rows, wk.rows, w_gate.rows);
        let (q_at, k_at, v_at) = {
            let q = image.put_matrix(wq);
            let k = image.put_matrix_after(wk, q, q_rows);
            (q, k, image.put_matrix_after(wv, k, k_rows))
        };
        let o_at = image.put_matrix(wo);
        let gate_at = image.put_matrix(w_gate);
        let up_at = image.put_matrix_after(w_up, gate_at, gate_rows);
        let down_at = image.put_matrix(w_down);
        layers.push(LayerAddrs {
            attn_norm,
            ffn_norm,
            wq: q_at.0,
            wk: k_at.0,
            wv: v_at.0,
            wo: o_at.0,
            w_gate: gate_at.0,
            w_up: up_at.0,
            w_down: down_at.0,
            k_cache: 0,
            v_cache: 0,
            kv_index: None,
            router: [None, None],
            presence: None,
            ffn_marks: None,
        });
    }
    let mut router_bytes = 0u64;
    if let Some(r) = routers {
        for (l, la) in layers.iter_mut().enumerate() {
            for block in Block::ALL {
                if let Some(router) = r.get(l, block) {
                    let bytes = router.device_bytes();
                    router_bytes += bytes.len() as u64;
                    la.router[block as usize] = Some(image.put(&crate::routers::tensor_name(l, block, "operand"), "routers", bytes));
                }
            }
        }
    }
    let output_addr = image.put_matrix(output).0;
    let out_norm = image.put(&low.output_norm, "norms", gains(&low.output_norm)?);
    let embed_f16_addr = image.put("embed_f16", "weights", embed_f16);
    let mut rope = Vec::with_capacity(max_context * hd * 4);
    for p in 0..max_context {
        for (c, s) in rope_table_row(p as u32, hd as u32, f64::from(cfg.rope_theta)) {
            rope.extend_from_slice(&c.to_le_bytes());
            rope.extend_from_slice(&s.to_le_bytes());
        }
    }
    let rope_addr = image.put("rope", "table", rope);
    // each slot's session table: position p -> row s x max_context + p
    let sessions = session_rows.map(|rows| {
        let table_bytes = line_up(max_context as u64 * 4);
        let mut bytes = Vec::with_capacity((table_bytes * slots as u64) as usize);
        for s in 0..slots {
            bytes.extend((0..max_context).flat_map(|p| ((s * max_context + p) as u32).to_le_bytes()));
            bytes.resize((table_bytes * (s as u64 + 1)) as usize, 0);
        }
        SessionLayout { tables: image.put("kvindex_slots", "kv", bytes), table_bytes, rows }
    });
    let Image { mut plan, data, .. } = image;
    let weight_bytes: u64 = data.iter().filter(|(n, _, _)| n.ends_with(".weight") && !n.contains("norm")).map(|(_, _, d)| d.len() as u64).sum();
    let mut bss = Vec::new();
    let mut kv_index = None;
    if let KvLayout::Indexed { pool_rows } = opts.kv_layout {
        // one pool for every layer: a row holds a (layer, position)'s K, then its V
        let rows = pool_rows.unwrap_or((cfg.n_layer * max_context) as u64);
        if rows == 0 || rows > u64::from(u32::MAX) {
            return Err(unsupported(format!("--kv-pool-rows {rows}: expected 1 to {}", u32::MAX)));
        }
        let pool = plan.place("kvpool", "kv", 2 * kv_row * rows);
        bss.push(("kvpool".to_string(), pool, 2 * kv_row * rows));
        let mut index_addr = Vec::new();
        for (l, la) in layers.iter_mut().enumerate() {
            (la.k_cache, la.v_cache) = (pool, pool + kv_row);
            let at = plan.place(&format!("kvindex{l}"), "kv", 4 * max_context as u64);
            bss.push((format!("kvindex{l}"), at, 4 * max_context as u64));
            la.kv_index = Some(at);
            index_addr.push(at);
        }
        kv_index = Some(KvIndexMeta { index_addr, pool_rows: rows, row_bytes: 2 * kv_row });
    }
    for (l, la) in layers.iter_mut().enumerate() {
        if la.kv_index.is_none() {
            // (every session slot's rows)
            let bytes = kv_row * (slots * max_context) as u64;
            la.k_cache = plan.place(&format!("k{l}"), "kv", bytes);
            la.v_cache = plan.place(&format!("v{l}"), "kv", bytes);
            bss.push((format!("k{l}"), la.k_cache, bytes));
            bss.push((format!("v{l}"), la.v_cache, bytes));
        }
        if la.router[Block::Attention as usize].is_some() {
            let at = plan.place(&format!("presence{l}"), "kv", max_context as u64);
            la.presence = Some(at);
            bss.push((format!("presence{l}"), at, max_context as u64));
        }
        if la.router[Block::Ffn as usize].is_some() {
            let at = plan.place(&format!("ffnmarks{l}"), "routers", max_context as u64);
            la.ffn_marks = Some(at);
            bss.push((format!("ffnmarks{l}"), at, max_context as u64));
        }
    }
    let trace_layer_bytes = (batch * e * 2) as u64;
    let trace = opts.trace_layers.then(|| plan.place("trace", "io", trace_layer_bytes * cfg.n_layer as u64));
    if plan.end() > config.device_memory_bytes {
        return Err(fits(format!(
            "the model needs {} MiB of device memory{}, the overlay has {} MiB (try a smaller --max-context)",
            plan.end() >> 20,
            if slots > 1 { format!(" with the K/V of {slots} sessions") } else { String::new() },
            config.device_memory_bytes >> 20
        )));
    }
    let layout = Layout {
        ids,
        logits,
        logits_row_bytes,
        embed_f16: embed_f16_addr,
        out_norm,
        output: output_addr,
        rope: rope_addr,
        layers,
        trace,
        trace_layer_bytes,
        pe_lanes: config.pe_lanes,
        sessions,
    };

    // Programs. The `sessions{n}` passes of more rows than slots are for prompt rows beside the sessions'
    // next tokens: where all of them do not fit the code region, passes of one row per slot at most.
    // (the entries, their programs and the end of their code)
    type Emitted = (Vec<Entry>, Vec<Vec<Instr>>, u64);
    let emit_all = |pass_rows: usize| -> Result<Emitted, CompileError> {
        let (mut entries, mut programs, mut next_code) = (Vec::new(), Vec::new(), code_addr);
        let mut passes = vec![("decode".to_string(), 1usize, PassRows::Sequence), ("prefill".to_string(), batch, PassRows::Sequence)];
        if slots > 1 {
            passes.extend((1..=pass_rows).map(|n| (format!("sessions{n}"), n, PassRows::Sessions)));
            passes.push(("prefill_slot".to_string(), batch, PassRows::SessionSequence));
        }
        for (name, ntok, rows) in passes {
            let spm = spm_buffers(&cfg, config, ntok, rows == PassRows::Sessions)
                .ok_or_else(|| fits(format!("the scratchpad of {} bytes cannot hold a pass of {ntok} tokens", config.scratchpad_bytes)))?;
            let program = emit(&cfg, &layout, &spm, ntok, rows);
            entries.push(Entry { name, ntok, code_addr: next_code, instructions: program.len() });
            next_code += line_up((program.len() * opu_hw::isa::INSTR_BYTES) as u64);
            programs.push(program);
        }
        Ok((entries, programs, next_code))
    };
    let mut emitted = emit_all(pass_rows)?;
    if emitted.2 > code_addr + (4 << 20) && pass_rows > slots {
        pass_rows = slots;
        emitted = emit_all(pass_rows)?;
    }
    let (entries, programs, next_code) = emitted;
    if next_code > code_addr + (4 << 20) {
        return Err(fits("the programs exceed the 4 MiB code region".into()));
    }
    let decode_bytes_static = static_bytes(&programs[0], config.pe_lanes);
    let meta = ProgramMeta {
        kind: "opu-llama-v1".into(),
        model: g.get_str("general.name").unwrap_or("llama").to_string(),
        n_layer: cfg.n_layer,
        n_embd: e,
        n_head: cfg.n_head,
        n_head_kv: hkv,
        head_dim: hd,
        vocab: cfg.vocab,
        max_context,
        entries: entries.clone(),
        ids_addr: ids,
        logits_addr: logits,
        logits_row_bytes,
        trace_addr: trace,
        trace_layer_bytes,
        trace_row_bytes: (e * 2) as u64,
        weight_bytes,
        decode_bytes_static,
        kv_bytes_per_position: (cfg.n_layer * hkv * hd * 2 * 2) as u64,
        tensors: reports,
        embedding_f16_max_rel_error: embed_rel,
        skipping: routers.map(|_| SkipMeta {
            routed: layout.layers.iter().map(|la| [la.router[0].is_some(), la.router[1].is_some()]).collect(),
            presence_addr: layout.layers.iter().map(|la| la.presence).collect(),
            ffn_marks_addr: layout.layers.iter().map(|la| la.ffn_marks).collect(),
            router_bytes,
            block_bytes: skipped_block_bytes(&programs[0], &layout),
            history_hit_bytes: (hd * 2 * 2) as u64,
        }),
        kv_index,
        sessions: layout.sessions.map(|sl| SessionsMeta {
            slots,
            rows_addr: sl.rows,
            sessions_entry: (0..pass_rows).map(|n| 2 + n).collect(),
            prefill_slot_entry: 2 + pass_rows,
        }),
    };

    let mut c = Container::new(config);
    for (entry, program) in entries.iter().zip(&programs) {
        c.add_code(&entry.name, entry.code_addr, program)?;
    }
    // Container section names hold 16 bytes: name data sections by index, the layout has the real names.
    for (i, (_, addr, bytes)) in data.into_iter().enumerate() {
        c.add_data(&format!("d{i}"), addr, bytes)?;
    }
    for (name, addr, bytes) in bss {
        c.add_bss(&name, addr, bytes)?;
    }
    c.set_layout(&MemoryLayout { regions: plan.regions })?;
    c.set_meta(&serde_json::to_value(&meta).expect("meta serializes"))?;
    c.check_config(config)?;
    Ok(Compiled { container: c, meta })
}

/// The initialized part of device memory: regions placed by the plan, with their bytes.
struct Image {
    plan: DevicePlan,
    data: Vec<(String, u64, Vec<u8>)>,
    /// The overlay's PE lanes: the matrices' layout (`opu_hw::weight_layout`).
    pe_lanes: u32,
}

impl Image {
    fn put(&mut self, name: &str, kind: &str, bytes: Vec<u8>) -> u64 {
        let addr = self.plan.place(name, kind, bytes.len() as u64);
        self.data.push((name.to_string(), addr, bytes));
        addr
    }
    /// The matrix's bytes as the matrix unit reads them: interleaved by lane (docs/isa.md, `matmul`).
    fn lay_out(&self, m: &QuantMatrix) -> Vec<u8> {
        WeightLayout::for_lanes(self.pe_lanes, m.format.row_bytes(m.cols).expect("validated")).interleave(&m.bytes)
    }
    /// Places a matrix at a multiple of the layout's alignment (`16 x pe_lanes` bytes, and of 4 KiB); returns
    /// its address and format, and its end.
    fn put_matrix(&mut self, m: QuantMatrix) -> ((u64, WeightFormat), u64) {
        let bytes = self.lay_out(&m);
        let len = bytes.len() as u64;
        let at = self.plan.place_aligned(&m.name, "weights", len, WeightLayout::align_for_lanes(self.pe_lanes));
        self.data.push((m.name, at, bytes));
        ((at, m.format), at + len)
    }
    /// Places a matrix right after the one placed before it (`prev`, as [`Image::put_matrix`] returned it),
    /// with no gap, where they have the same format and that one has whole row groups (`2 x pe_lanes`
    /// rows): one `matmul` can then take the two as one matrix of their rows (a group boundary starts a
    /// matrix of the layout). Elsewhere like `put_matrix`.
    fn put_matrix_after(&mut self, m: QuantMatrix, prev: ((u64, WeightFormat), u64), prev_rows: usize) -> ((u64, WeightFormat), u64) {
        let ((_, fmt), end) = prev;
        if m.format != fmt || !prev_rows.is_multiple_of(2 * self.pe_lanes as usize) || self.plan.end() != end {
            return self.put_matrix(m);
        }
        let bytes = self.lay_out(&m);
        let len = bytes.len() as u64;
        let at = self.plan.place_at_end(&m.name, "weights", len);
        self.data.push((m.name, at, bytes));
        ((at, m.format), at + len)
    }
}

/// The scratchpad of a pass of `b` tokens; `session_rows`: with the (position, slot) of each row (a
/// `sessions{n}` pass).
fn spm_buffers(cfg: &LlamaConfig, config: &OverlayConfig, b: usize, session_rows: bool) -> Option<SpmBufs> {
    let row = |n: usize, bytes: usize| (b as u32) * pad4((n * bytes) as u32);
    let kv = cfg.n_head_kv * cfg.head_dim;
    let mut s = SpmPlan::new(config.scratchpad_bytes);
    let mut bufs = SpmBufs {
        ids: s.place("ids", b as u32 * 4)?,
        // (placed only where used: the other passes' scratchpads are as without sessions)
        rows: if session_rows { s.place("rows", b as u32 * 8)? } else { 0 },
        x: s.place("x", row(cfg.n_embd, 2))?,
        xn: s.place("xn", row(cfg.n_embd, 2))?,
        // q, k and v one after the other, and gate and up: in a one-token pass each pair of neighbours is
        // one output row, so that one `matmul` computes them all (`emit`)
        q: s.place("qkv", row(cfg.n_embd, 2) + 2 * row(kv, 2))?,
        k: 0,
        v: 0,
        att: s.place("att", row(cfg.n_embd, 2))?,
        gate: s.place("gate_up", 2 * row(cfg.n_ff, 2))?,
        up: 0,
        rope: s.place("rope", row(cfg.head_dim / 2, 8))?,
        gain: s.place("gain", (cfg.n_embd * 4) as u32)?,
        logits: 0,
        chunk_rows: 0,
    };
    bufs.k = bufs.q + row(cfg.n_embd, 2) / SPM_WORD_BYTES;
    bufs.v = bufs.k + row(kv, 2) / SPM_WORD_BYTES;
    bufs.up = bufs.gate + row(cfg.n_ff, 2) / SPM_WORD_BYTES;
    // The output projection in chunks of rows that fit what is left: whole row groups of the matrix unit
    // (each chunk's weights are a matrix of the layout) and a multiple of 32 rows (each chunk's logits
    // start on a line); at most 16352 so a logits row fits `store2d`'s 16-bit row length.
    let grain = lcm(32, 2 * config.pe_lanes as usize);
    let free_rows = (s.free() as usize / (b * 4)).min(16352).min(cfg.vocab.div_ceil(grain) * grain);
    let chunk_rows = free_rows / grain * grain;
    if chunk_rows == 0 {
        return None;
    }
    bufs.logits = s.place("logits", (b * chunk_rows * 4) as u32)?;
    bufs.chunk_rows = chunk_rows;
    Some(bufs)
}

/// Whether matrix `next` lies right after `first` (`rows` x `cols`, whole row groups) in the same format:
/// one `matmul` of their rows together reads both.
fn follows(pe_lanes: u32, first: (u64, WeightFormat), rows: usize, cols: usize, next: (u64, WeightFormat)) -> bool {
    first.1 == next.1
        && rows.is_multiple_of(2 * pe_lanes as usize)
        && first.1.row_bytes(cols).is_some_and(|rb| first.0 + WeightLayout::for_lanes(pe_lanes, rb).matrix_bytes(rows as u64) == next.0)
}

/// Emits one pass of `b` tokens, whose positions and K/V rows `rows` says.
fn emit(cfg: &LlamaConfig, lay: &Layout, s: &SpmBufs, b: usize, rows: PassRows) -> Vec<Instr> {
    let (e, hd, h, hkv, f) = (cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff);
    let group = h / hkv;
    let kv = hkv * hd;
    let words = |bytes: usize| (bytes / 4) as u32;
    let (x_row, kv_row_spm, rope_row) = (pad4((e * 2) as u32) as usize, pad4((kv * 2) as u32) as usize, hd / 2 * 8);
    let eps = F32Bits::new(cfg.rms_eps);
    let n = b as u32;
    let mut p = Vec::new();
    let mm = |p: &mut Vec<Instr>, (w, fmt): (u64, WeightFormat), dst: u32, src: u32, rows: usize, cols: usize, acc: bool, red: RedMode, out: DType| {
        p.push(Instr::Matmul { fmt, out, acc, red, ntok: n, dst, src, rows: rows as u32, cols: cols as u32, w: line(w) });
    };
    let rmsnorm = |p: &mut Vec<Instr>, gain_addr: u64| {
        p.push(Instr::Load { spm: s.gain, mem: line(gain_addr), bytes: (e * 4) as u32, idx: r(0), stride: 0 });
        p.push(Instr::Rmsnorm { dd: DType::F16, ds: DType::F16, rows: n, dst: s.xn, src: s.x, g: s.gain, n: e as u32, eps });
    };

    // Row t's position into `rd`: ARG1 + t, or the row's own (`sessions{n}`).
    let position = |p: &mut Vec<Instr>, rd: Reg, t: usize| match rows {
        PassRows::Sequence | PassRows::SessionSequence => p.push(Instr::Addi { rd, rs: POS, imm: t as u32 }),
        PassRows::Sessions => p.push(Instr::Ldr { rd, spm: s.rows + 2 * t as u32 }),
    };
    // Row t's K/V rows: in a `sessions{n}` pass its slot's session table (`kv_index` = tables + slot x
    // table lines); the other passes set theirs once (below).
    let sl = lay.sessions;
    let session_table = |p: &mut Vec<Instr>, t: usize| {
        if let (PassRows::Sessions, Some(sl)) = (rows, sl) {
            p.push(Instr::Ldr { rd: r(3), spm: s.rows + 2 * t as u32 + 1 });
            p.push(Instr::Muli { rd: r(3), rs: r(3), imm: (sl.table_bytes / LINE_BYTES) as u32 });
            p.push(Instr::Csrw { csr: Csr::KvIndex, rs: r(3), imm: line(sl.tables) });
        }
    };

    // Token ids -> embedding rows (FP16) -> the first sum of squares.
    p.push(Instr::Load { spm: s.ids, mem: line(lay.ids), bytes: n * 4, idx: r(0), stride: 0 });
    if rows == PassRows::Sessions {
        p.push(Instr::Load { spm: s.rows, mem: line(sl.expect("sessions pass").rows), bytes: n * 8, idx: r(0), stride: 0 });
    }
    if let (PassRows::SessionSequence, Some(sl)) = (rows, sl) {
        p.push(Instr::Muli { rd: r(3), rs: SLOT, imm: (sl.table_bytes / LINE_BYTES) as u32 });
        p.push(Instr::Csrw { csr: Csr::KvIndex, rs: r(3), imm: line(sl.tables) });
    }
    for t in 0..b {
        p.push(Instr::Ldr { rd: r(1), spm: s.ids + t as u32 });
        p.push(Instr::Load { spm: s.x + words(t * x_row), mem: line(lay.embed_f16), bytes: (e * 2) as u32, idx: r(1), stride: (e * 2 / LINE_BYTES as usize) as u32 });
    }
    p.push(Instr::Vop { op: VecOp::Copy, dd: DType::F16, da: DType::F16, db: DType::F16, red: RedMode::Set, rows: n, dst: s.x, a: s.x, b: s.x, n: e as u32 });
    // the tokens' RoPE table rows, which every layer uses
    for t in 0..b {
        position(&mut p, r(2), t);
        p.push(Instr::Load { spm: s.rope + words(t * rope_row), mem: line(lay.rope), bytes: rope_row as u32, idx: r(2), stride: (rope_row / LINE_BYTES as usize) as u32 });
    }
    p.push(Instr::Csrw { csr: Csr::HeadDim, rs: r(0), imm: hd as u32 });
    // the lines between consecutive rows: a layer's K rows (V rows), or the pool's rows of K and V
    let indexed = lay.layers.iter().any(|la| la.kv_index.is_some());
    let row_lines = kv * 2 * if indexed { 2 } else { 1 } / LINE_BYTES as usize;
    p.push(Instr::Csrw { csr: Csr::KvStride, rs: r(0), imm: row_lines as u32 });
    // (the FFN's decision bytes are marked through the same CSR)
    let tracked = lay.layers.iter().any(|la| la.presence.is_some() || la.ffn_marks.is_some());
    p.push(Instr::Csrw { csr: Csr::AttnScale, rs: r(0), imm: (1.0 / (hd as f32).sqrt()).to_bits() });
    // KV heads per `attn`: as many as the attention unit holds (dividing the KV heads), so that a layer's
    // attention pays the unit's chain of latencies (checks, memory, pipelines, `recip`) once per `attn`
    let attn_heads = (1..=hkv).rev().find(|&n| hkv % n == 0 && opu_hw::isa::attn_heads_fit(n as u64, group as u64, hd as u64)).unwrap_or(1);
    if attn_heads > 1 {
        p.push(Instr::Csrw { csr: Csr::AttnHeads, rs: r(0), imm: attn_heads as u32 });
    }

    for (l, la) in lay.layers.iter().enumerate() {
        // Per-token routing (docs/skipping.md) in one-token passes: `route` decides on the block's input (the
        // residual x, whose sum of squares RED already holds) and `skip` jumps over the block. A skipped block
        // leaves x and RED as they were, so the next RMSNorm needs no new reduction. Prefill executes every
        // block (`route` takes one token) but marks presence through `kvappend`.
        let [attn_router, ffn_router] = if b == 1 { la.router } else { [None, None] };
        // each layer's presence bytes and row index (every layer sets them once any does: the CSRs keep
        // the previous layer's value otherwise)
        if tracked {
            p.push(Instr::Csrw { csr: Csr::KvPresent, rs: r(0), imm: la.presence.map_or(u32::MAX, line) });
        }
        if let Some(index) = la.kv_index {
            p.push(Instr::Csrw { csr: Csr::KvIndex, rs: r(0), imm: line(index) });
        }
        let route = |p: &mut Vec<Instr>, router: Option<u64>, pred: Pred, mark: bool, block: Vec<Instr>| {
            if let Some(w) = router {
                p.push(Instr::Route { pd: pred, mark, pos: POS, src: s.x, w: line(w), cols: e as u32 });
                p.push(Instr::Skip { pred, count: block.len() as u32 });
            }
            p.extend(block);
        };

        // Attention block: norm, q/k/v, RoPE, K/V append (skipped with the block) ...
        let mut blk = Vec::new();
        rmsnorm(&mut blk, la.attn_norm);
        // In a one-token pass q, k and v are one output row (`spm_buffers`): where their weights lie back to
        // back in one format, one `matmul` computes them (each output row is computed on its own, so the
        // result is the same bits), and one `rope` turns q and k. The matrix unit then pays its start and
        // end once.
        // (a `matmul` has at most 65,535 rows, a `rope` 255 heads)
        let one_row = b == 1;
        if one_row && e + 2 * kv <= usize::from(u16::MAX) && follows(lay.pe_lanes, la.wq, e, e, la.wk) && follows(lay.pe_lanes, la.wk, kv, e, la.wv) {
            mm(&mut blk, la.wq, s.q, s.xn, e + 2 * kv, e, false, RedMode::None, DType::F16);
        } else {
            mm(&mut blk, la.wq, s.q, s.xn, e, e, false, RedMode::None, DType::F16);
            mm(&mut blk, la.wk, s.k, s.xn, kv, e, false, RedMode::None, DType::F16);
            mm(&mut blk, la.wv, s.v, s.xn, kv, e, false, RedMode::None, DType::F16);
        }
        if one_row && h + hkv <= usize::from(u8::MAX) {
            blk.push(Instr::Rope { style: RopeStyle::Normal, heads: (h + hkv) as u32, head_dim: hd as u32, rows: n, dst: s.q, src: s.q, table: s.rope });
        } else {
            blk.push(Instr::Rope { style: RopeStyle::Normal, heads: h as u32, head_dim: hd as u32, rows: n, dst: s.q, src: s.q, table: s.rope });
            blk.push(Instr::Rope { style: RopeStyle::Normal, heads: hkv as u32, head_dim: hd as u32, rows: n, dst: s.k, src: s.k, table: s.rope });
        }
        for t in 0..b {
            position(&mut blk, r(2), t);
            session_table(&mut blk, t);
            // a `kvappend` per `attn`'s KV heads (`attn_heads`)
            for kh in (0..hkv).step_by(attn_heads) {
                let off = t * kv_row_spm + kh * hd * 2;
                let head = (kh * hd * 2) as u64;
                blk.push(Instr::Kvappend { pos: r(2), ksrc: s.k + words(off), vsrc: s.v + words(off), k: line(la.k_cache + head), v: line(la.v_cache + head) });
            }
        }
        route(&mut p, attn_router, ATTN_PRED, true, blk);
        // ... attention itself runs even when the block is skipped: it streams this layer's present K/V into
        // the history buffer, so that the next layers serve every absent position the K/V of the latest layer
        // where its token executed (its output is then unused) ...
        for t in 0..b {
            // the length: the position + 1
            match rows {
                PassRows::Sequence | PassRows::SessionSequence => p.push(Instr::Addi { rd: r(1), rs: POS, imm: t as u32 + 1 }),
                PassRows::Sessions => {
                    position(&mut p, r(1), t);
                    p.push(Instr::Addi { rd: r(1), rs: r(1), imm: 1 });
                }
            }
            session_table(&mut p, t);
            for kh in (0..hkv).step_by(attn_heads) {
                let off = t * x_row + kh * group * hd * 2;
                let head = (kh * hd * 2) as u64;
                p.push(Instr::Attn { group: group as u32, kvh: kh as u32, len: r(1), dst: s.att + words(off), q: s.q + words(off), k: line(la.k_cache + head), v: line(la.v_cache + head) });
            }
        }
        // ... and x += Wo att, with the sum of squares of the new x for the FFN norm (skipped with the block).
        if attn_router.is_some() {
            p.push(Instr::Skip { pred: ATTN_PRED, count: 1 });
        }
        mm(&mut p, la.wo, s.x, s.att, e, e, true, RedMode::Set, DType::F16);
        // FFN block.
        let mut blk = Vec::new();
        rmsnorm(&mut blk, la.ffn_norm);
        if b == 1 && 2 * f <= usize::from(u16::MAX) && follows(lay.pe_lanes, la.w_gate, f, e, la.w_up) {
            mm(&mut blk, la.w_gate, s.gate, s.xn, 2 * f, e, false, RedMode::None, DType::F16);
        } else {
            mm(&mut blk, la.w_gate, s.gate, s.xn, f, e, false, RedMode::None, DType::F16);
            mm(&mut blk, la.w_up, s.up, s.xn, f, e, false, RedMode::None, DType::F16);
        }
        blk.push(Instr::Vop { op: VecOp::SwiGlu, dd: DType::F16, da: DType::F16, db: DType::F16, red: RedMode::None, rows: n, dst: s.gate, a: s.gate, b: s.up, n: f as u32 });
        mm(&mut blk, la.w_down, s.x, s.gate, e, f, true, RedMode::Set, DType::F16);
        // the FFN's decision byte of this position, through `kv_present` (the next layer sets it again)
        if let (Some(marks), true) = (la.ffn_marks, b == 1) {
            p.push(Instr::Csrw { csr: Csr::KvPresent, rs: r(0), imm: line(marks) });
        }
        route(&mut p, ffn_router, FFN_PRED, b == 1 && la.ffn_marks.is_some(), blk);
        if let Some(trace) = lay.trace {
            let at = trace + l as u64 * lay.trace_layer_bytes;
            p.push(Instr::Store2d { spm: s.x, mem: line(at), row_bytes: (e * 2) as u32, rows: n, mem_stride: (e * 2 / LINE_BYTES as usize) as u32, spm_stride: words(x_row) });
        }
    }
    // Final norm and the output projection, in chunks of rows, each stored as FP32 logits.
    rmsnorm(&mut p, lay.out_norm);
    let (out_addr, out_fmt) = lay.output;
    // (chunks of whole row groups: each chunk's rows are a matrix of the layout from its first group on)
    let out_layout = WeightLayout::for_lanes(lay.pe_lanes, out_fmt.row_bytes(e).expect("validated"));
    let mut row0 = 0;
    while row0 < cfg.vocab {
        let rows = s.chunk_rows.min(cfg.vocab - row0);
        mm(&mut p, (out_addr + out_layout.matrix_bytes(row0 as u64), out_fmt), s.logits, s.xn, rows, e, false, RedMode::None, DType::F32);
        p.push(Instr::Store2d {
            spm: s.logits,
            mem: line(lay.logits + row0 as u64 * 4),
            row_bytes: (rows * 4) as u32,
            rows: n,
            mem_stride: line(lay.logits_row_bytes),
            spm_stride: rows as u32,
        });
        row0 += rows;
    }
    p.push(Instr::End {});
    p
}

/// Least common multiple.
fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// Device-memory bytes a program for an overlay of `pe_lanes` PE lanes moves, apart from attention's K/V
/// reads (which grow with the position).
pub fn static_bytes(program: &[Instr], pe_lanes: u32) -> u64 {
    program
        .iter()
        .map(|i| match *i {
            Instr::Matmul { fmt, rows, cols, .. } => fmt
                .row_bytes(cols as usize)
                .map_or(0, |rb| WeightLayout::for_lanes(pe_lanes, rb).matrix_bytes(u64::from(rows))),
            Instr::Load { bytes, .. } | Instr::Store { bytes, .. } => u64::from(bytes),
            Instr::Load2d { row_bytes, rows, .. } | Instr::Store2d { row_bytes, rows, .. } => u64::from(row_bytes) * u64::from(rows),
            // with every block executed (skipped blocks move less)
            Instr::Route { cols, .. } => 4 * u64::from(cols) + 4,
            _ => 0,
        })
        .sum()
}

/// `[layer] = [attention, FFN]`: the bytes the instructions under each routed block's `skip`s move when
/// they run (see [`SkipMeta::block_bytes`]), from a one-token program: [`static_bytes`] of the matrix and
/// load/store instructions, and each `kvappend`'s K and V rows (of the `attn_heads` KV heads), its row
/// index entry (indexed layout) and its presence byte.
fn skipped_block_bytes(program: &[Instr], lay: &Layout) -> Vec<[u64; 2]> {
    let mut bytes = vec![[0u64; 2]; lay.layers.len()];
    let (mut head_dim, mut heads, mut indexed, mut marks) = (0u64, 1u64, false, false);
    // the block each predicate's latest `route` decided
    let mut routed: [Option<(usize, usize)>; 8] = [None; 8];
    let mut under: Vec<(usize, usize, u32)> = Vec::new();
    for instr in program {
        let moved = match *instr {
            Instr::Kvappend { .. } => 2 * heads * head_dim * 2 + if indexed { 4 } else { 0 } + u64::from(marks),
            _ => static_bytes(std::slice::from_ref(instr), lay.pe_lanes),
        };
        for (l, b, left) in under.iter_mut() {
            bytes[*l][*b] += moved;
            *left -= 1;
        }
        under.retain(|u| u.2 > 0);
        match *instr {
            Instr::Csrw { csr: Csr::HeadDim, imm, .. } => head_dim = u64::from(imm),
            Instr::Csrw { csr: Csr::AttnHeads, imm, .. } => heads = u64::from(imm),
            Instr::Csrw { csr: Csr::KvIndex, imm, .. } => indexed = imm != u32::MAX,
            Instr::Csrw { csr: Csr::KvPresent, imm, .. } => marks = imm != u32::MAX,
            Instr::Route { pd, w, .. } => {
                routed[pd.0 as usize] = lay.layers.iter().enumerate().find_map(|(l, la)| {
                    la.router.iter().position(|&r| r.is_some_and(|r| line(r) == w)).map(|b| (l, b))
                });
            }
            Instr::Skip { pred, count } => {
                if let Some((l, b)) = routed[pred.0 as usize] {
                    under.push((l, b, count));
                }
            }
            _ => {}
        }
    }
    bytes
}

/// Instructions of a program by class (`SPECS[..].class`).
pub fn count_by_class(program: &[Instr]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for i in program {
        *m.entry(i.spec().class).or_insert(0) += 1;
    }
    m
}

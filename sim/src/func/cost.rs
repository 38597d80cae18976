//! The cycle estimate of the functional simulator: a model of the overlay's RTL (opu-rtl's `top`), so that
//! `--backend sim` predicts the cycles `--backend rtl` counts. Each instruction costs the cycles its unit
//! is busy with it on the RTL, from the unit's schedule (docs/rtl.md):
//!
//! - `matmul`: the matrix unit's loader and compute, group by group ([`CostModel::matmul`]): the loader
//!   requests a row group's 64-byte beats one per cycle, runs ahead into the other half of the weight
//!   buffer as soon as the compute has read it, and a group's compute starts when its last beat has
//!   arrived (one memory latency later) and the previous group's last token is captured (its readout goes
//!   on beside the next group's compute, whose first token's capture waits for it; its reads of old words,
//!   where a chunk needs them, make the next token's compute read a block again). Exact on the RTL for
//!   43 of the 44 `matmul`s measured alone, one token or several (the other 2 cycles over);
//! - vector instructions: the unit's fixed depth plus, per chunk of 8 elements, a cycle per operand line it
//!   reads and at least one (an FP16 line serves two chunks: [`vector_row_cycles`]), and for `rmsnorm` the
//!   inverse root per row;
//! - `attn`: the first position's chain (the queries, the memory latency, the scores, the softmax, the
//!   update, then `recip(l)` and the outputs per head), and one period per further position: the positions
//!   stream through the unit's fetch, score and update engines, so a position costs its slowest engine
//!   (for SmolLM2's group of 3 heads of 64, the scores' 16 cycles). Over `attn_heads` KV heads the chain is
//!   paid once for all of them, each KV head's group padded to even as the unit pads it. Assumes every position present (an
//!   absent one that follows present ones waits for their lines, a memory latency, which the model
//!   ignores); `kvappend`, `route`;
//! - DMA: a read pays the memory latency once per row, then a line per cycle; a write a line per cycle;
//! - the core: the program's first fetch, and 2 cycles per scalar instruction (what one costs on the RTL
//!   with no unit working; behind a busy unit it hides, which the model ignores: scalar instructions are
//!   a few hundred cycles of SmolLM2's 1.7 million).
//!
//! Instructions follow each other (the RTL's units take turns: docs/isa.md's interlock at the granularity
//! of units), except that a `matmul` issued behind vector or attention work streams its first groups
//! meanwhile ([`LoaderLead`]): it costs its cycles from when those units are idle. The constants were fitted on the RTL under Verilator (`sim` preset, memory latency 64) with
//! `opu exec --backend rtl --json` on single instructions of SmolLM2's shapes; `sim/tests/rtl_cost.rs`
//! holds the model to a table of those measurements. At other configs the model scales the same design
//! (lanes, memory latency, the memory's bytes per cycle as the weight port's beat), which the RTL builds
//! only at the `sim` preset today.
//!
//! `STALL_CYCLES`: the cycles of a `matmul` in which the array had no block to take (its cycles less its
//! compute steps); 0 for the other instructions.

use opu_hw::config::{ISSUE_QUEUE_DEPTH, ROPE_TABLE_CHUNKS};
use opu_hw::isa::{ExecUnit, Instr, RedMode, RopeStyle};
use opu_hw::numerics::vector::{DType, VecOp};
use opu_hw::numerics::WeightFormat;
use opu_hw::weight_layout::WeightLayout;
use opu_hw::OverlayConfig;

/// The work one instruction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// Counted in MACS (docs/isa.md defines it for matmul, attn and conv).
    pub macs: u64,
    /// Products the PE array performs (MACS plus the router's dot products).
    pub pe_products: u64,
    /// Elements through the vector unit.
    pub vector_elems: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Device-memory rows read and written (a DMA row, a K or V row, the weights) and the 32-byte lines
    /// they touch.
    pub mem_rows_read: u64,
    pub mem_lines_read: u64,
    pub mem_lines_written: u64,
    /// `attn`: positions attended.
    pub positions: u64,
    /// `attn` with a row index (`kv_index`): the present positions, and the 32-byte lines of presence bytes
    /// and of index entries the RTL reads for them; `kvappend` with one: 1 (its entry's line).
    pub indexed_present: u64,
    pub presence_lines: u64,
    pub index_lines: u64,
    /// `conv`, `maxpool`: what the CNN unit's schedule depends on.
    pub cnn: Option<CnnRun>,
}

/// A `conv` or `maxpool` as the CNN unit runs it (docs/rtl.md, "The CNN unit"): the shape (a `maxpool` has
/// `cin = cout = c` and no padding) and the scratchpad words of the source and the destination, whose
/// alignment decides the reads per row and the writes per chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct CnnRun {
    pub maxpool: bool,
    pub h: u64,
    pub w: u64,
    pub cin: u64,
    pub cout: u64,
    pub k: u64,
    pub stride: u64,
    pub pad: u64,
    pub src: u64,
    pub dst: u64,
}

/// RTL constants (cycles), fitted as the module comment says.
mod rtl {
    /// `matmul`'s six check cycles before the loader starts.
    pub const MATMUL_CHECK: u64 = 6;
    /// After a token's last step, the weight feed's extra stage and the lane's pipeline (1 + 10 for W4Min,
    /// 1 + 9 for W4 and W8) and the readout's before its first chunk, then per chunk a lane per cycle, and
    /// where the chunks read their old words (`acc=1`, a half-written word) their read; a readout-bound group
    /// of short rows costs them all. From a chunk's last lane to its write: the start values, the sum and
    /// the rounding (the last chunk's is the `matmul`'s end).
    pub const MATMUL_TAIL: u64 = 10;
    pub const MATMUL_LANE_W4MIN: u64 = 11;
    pub const MATMUL_LANE: u64 = 10;
    pub const MATMUL_CHUNK_OLD: u64 = 2;
    pub const MATMUL_WRITE: u64 = 8;
    /// After a group's last step, its last token's capture and the next group's start (which does not
    /// wait for the readout), where the next group is in the ring already (one whose last beat comes later
    /// starts when it is loaded: `ready`). Fitted on groups that follow at the compute's pace.
    pub const MATMUL_NEXT_GROUP: u64 = 22;
    /// A readout's read of old words on a cycle the compute reads its next block's lines: the block reads
    /// them again (`XRead0`, `XRead1`).
    pub const MATMUL_READ_CONFLICT: i64 = 2;
    /// An early-issued `matmul`: the cycles between the issue of the last instruction it overlaps and its
    /// own (the core's decode, the queue, the unit taking it) that its loader does not run ahead.
    pub const MATMUL_EARLY_ISSUE: u64 = 4;
    /// The matrix unit's last cycles after the last group's outputs.
    pub const MATMUL_FINISH: u64 = 2;
    /// `fmt=f16` (the router's datapath in the readout, docs/rtl.md "The matrix unit"): per output chunk,
    /// besides its lanes' step pairs (2 cycles per 8 columns and lane), the old words' read, the steps' way
    /// to the router and through it, the rounding and the write; per token, its start; after a group, the
    /// next one's start.
    pub const MATMUL_F16_CHUNK: u64 = 22;
    pub const MATMUL_F16_TOKEN: u64 = 2;
    pub const MATMUL_F16_NEXT_GROUP: u64 = 2;
    /// `fmt=f16`: the unit's last cycles after the last chunk's write, and with `red` the fused reduction's
    /// (its four stages and the read-modify-write of `RED`).
    pub const MATMUL_F16_FINISH: u64 = 3;
    pub const MATMUL_F16_RED_DRAIN: u64 = 4;
    /// With `red`, the last chunk's way after its write: the sum of squares' four stages and the
    /// read-modify-write of `RED`.
    pub const MATMUL_RED_DRAIN: u64 = 5;
    /// The CNN unit: the cycles from the issue to its shape checks' multiplications (the core's issue, the
    /// queue, the unit taking it, two rule cycles and the 18 of the dividers), and after them the spans'
    /// cycle; its last cycle.
    pub const CNN_CHECKS: u64 = 24;
    pub const CNN_FIN: u64 = 1;
    /// From a position's last step to its outputs' capture in the datapath's hold bank (`DP_LATENCY`),
    /// seen by the writer a cycle later.
    pub const CNN_CAPTURE: u64 = 7;
    /// Positions the datapath holds for the writer (`dp::HOLD_BANKS`): at most this many are owed to it.
    pub const CNN_HOLD_BANKS: u64 = 4;
    /// The vector unit: checks, the lanes' depth and the store.
    pub const VECTOR_BASE: u64 = 201;
    /// `rmsnorm`: the inverse root of a row (its `rms_inv` through a lane) before the row streams.
    pub const RMS_INV: u64 = 196;
    /// `attn`: checks and the depths of the router, the scale lane, the softmax and the lanes, besides the
    /// first position's memory latency (fitted as 216 cycles in all at the `sim` preset's latency of 64).
    pub const ATTN_BASE: u64 = 152;
    /// `attn`: `recip(l)`'s pipeline (45 stages and the write), which takes a head per cycle.
    pub const ATTN_RECIP: u64 = 46;
    /// `attn`: the least cycles between two positions' updates (the lanes' depth and the output buffer's
    /// read and write: a chunk is written back before the next position reads it).
    pub const ATTN_UPDATE_GAP: u64 = 15;
    /// `attn`: the least cycles between two positions' scores (a softmax row takes a score every 10).
    pub const ATTN_SCORE_GAP: u64 = 10;
    /// `kvappend`: checks and the presence byte, then a line per cycle (and a cycle for each of its two
    /// rows' first read).
    pub const KVAPPEND_BASE: u64 = 9;
    /// A presence or row-index line read with nothing else in flight: its request, response and the state
    /// that takes it, beyond the memory latency.
    pub const INDEX_LINE: u64 = 3;
    /// `route`: checks, the biases, the router's depth.
    pub const ROUTE_BASE: u64 = 147;
    /// A DMA read's own cycles besides the latency and its lines; a write's.
    pub const LOAD_EXTRA: u64 = 3;
    pub const STORE_EXTRA: u64 = 4;
    /// The core: the program's first fetch and decode, beyond the memory latency; a scalar instruction.
    pub const START: u64 = 5;
    pub const SCALAR: u64 = 2;
    /// `ldr`: a scratchpad read once the units are idle.
    pub const LDR: u64 = 3;
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CostModel {
    pe_lanes: u64,
    mem_latency: u64,
    /// Bytes of the matrix unit's weight beat (one per cycle).
    beat_bytes: u64,
    /// Lines of a row slot of the weight buffer (`OverlayConfig::weight_row_lines`).
    weight_row_lines: u32,
}

impl CostModel {
    pub fn new(c: &OverlayConfig) -> Self {
        CostModel {
            pe_lanes: u64::from(c.pe_lanes.max(1)),
            mem_latency: u64::from(c.mem_latency_cycles.max(1)),
            beat_bytes: (c.peak_bytes_per_cycle() as u64).max(32),
            weight_row_lines: c.weight_row_lines(),
        }
    }

    /// Cycles from the doorbell to the first instruction (the first fetch).
    pub fn start_cycles(&self) -> u64 {
        self.mem_latency + rtl::START
    }

    /// `(cycles, stall_cycles)` of one executed instruction.
    /// `lead`: for a `matmul`, the cycles its loader runs before the other units are idle ([`LoaderLead`]);
    /// `(head_dim, attn_heads)`: the CSRs `attn` reads.
    pub fn estimate(&self, instr: &Instr, w: &Work, (csr_head_dim, csr_heads): (u32, u32), lead: u64) -> (u64, u64) {
        use rtl::*;
        let lat = self.mem_latency;
        match *instr {
            Instr::Matmul { fmt, out, acc, red, ntok, rows, cols, .. } => {
                let (cycles, compute) = self.matmul(fmt, out, acc, red != RedMode::None, ntok, rows, cols, lead);
                (cycles, cycles.saturating_sub(compute))
            }
            Instr::Vop { op, dd, da, db, rows, n, .. } => {
                let sources: &[DType] = match op {
                    VecOp::Add | VecOp::Mul | VecOp::SwiGlu => &[da, db],
                    _ => &[da],
                };
                (VECTOR_BASE + u64::from(rows) * vector_row_cycles(u64::from(n), sources, 0, dd), 0)
            }
            Instr::Rmsnorm { dd, ds, rows, n, .. } => {
                (VECTOR_BASE + u64::from(rows) * (RMS_INV + vector_row_cycles(u64::from(n), &[ds], 1, dd)), 0)
            }
            Instr::Rope { style, heads, head_dim, rows, .. } => {
                // a chunk reads its pairs (one line, `neox` two) and the two lines of its table pairs, but for
                // a head after the row's first, whose table lines the unit keeps from the first (heads of
                // 2 to ROPE_TABLE_CHUNKS chunks)
                let pairs = match style {
                    RopeStyle::Normal => 1,
                    RopeStyle::Neox => 2,
                };
                let chunks = u64::from(head_dim).div_ceil(16);
                let later = if (2..=u64::from(ROPE_TABLE_CHUNKS)).contains(&chunks) { pairs } else { pairs + 2 };
                let row = chunks * (pairs + 2) + u64::from(heads).saturating_sub(1) * chunks * later;
                (VECTOR_BASE + u64::from(rows) * row, 0)
            }
            Instr::Argmax { n, .. } => (VECTOR_BASE + u64::from(n).div_ceil(8), 0),
            Instr::Attn { group, .. } => {
                // `h` KV heads of `g` query heads each, padded to `2 ceil(g / 2)` (a score pass takes two)
                let (g, hd, h) = (u64::from(group), u64::from(csr_head_dim), u64::from(csr_heads.max(1)));
                let (pairs, lines) = (h * g.div_ceil(2), hd / 16);
                let (real, padded) = (h * g, 2 * pairs);
                // the first position in turn: the queries (a cycle per line and head), its K and V lines
                // (2 per line and KV head), the router's beats (2 per line and pair of heads), the update (a
                // line per head and cycle), `recip(l)` (its pipeline once: the heads follow each other into
                // it a cycle apart, which the per-head terms above already count, as fitted on the RTL), the
                // outputs (2 per line and head), and a cycle per padding head in the update and the outputs
                let update = real * lines + (padded - real);
                let first = ATTN_BASE + lat + ATTN_RECIP + 1 + (padded - real) + 2 * pairs + update
                    + lines * (2 * h + 3 * real + 2 * pairs);
                // then per position its slowest engine: the scores (2 beats per line and pair), the update,
                // the fetch (a cycle per line of each KV head's K and V, and three), and the gaps the softmax
                // and the output buffer need
                let period = (2 * pairs * lines).max(update).max(3 + 2 * h * lines).max(ATTN_UPDATE_GAP).max(ATTN_SCORE_GAP);
                // with a row index the rows are anywhere: every position is checked first (the scan: 3 cycles,
                // 2 more for a present one's rows, a memory latency per presence or index line), and the
                // fetch reads each index line with nothing in flight
                let indexed = if w.index_lines == 0 {
                    0
                } else {
                    3 * w.positions + 2 * w.indexed_present + (w.presence_lines + 2 * w.index_lines) * (lat + INDEX_LINE)
                };
                (if w.positions == 0 { 0 } else { first + (w.positions - 1) * period + indexed }, 0)
            }
            Instr::Kvappend { .. } => (KVAPPEND_BASE + w.mem_lines_written + w.index_lines * (lat + INDEX_LINE), 0),
            Instr::Route { cols, .. } => (ROUTE_BASE + u64::from(cols) / 4, 0),
            Instr::Load { .. } | Instr::Load2d { .. } => (w.mem_rows_read * lat + w.mem_lines_read + LOAD_EXTRA, 0),
            Instr::Store { .. } | Instr::Store2d { .. } => (w.mem_lines_written + STORE_EXTRA, 0),
            // the CNN unit, as the RTL runs it
            Instr::Conv { .. } | Instr::Maxpool { .. } => (w.cnn.map_or(SCALAR, |r| self.cnn(&r)), 0),
            Instr::End {} => (0, 0),
            Instr::Ldr { .. } => (LDR, 0),
            _ => (SCALAR, 0),
        }
    }

    /// `(cycles, compute steps)` of a `matmul` on the matrix unit, group by group as the RTL runs it: the
    /// cycles from when the other units are idle, the loader having started `lead` cycles before (an early
    /// issue, [`LoaderLead`]).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(&self, fmt: WeightFormat, out: DType, acc: bool, red: bool, ntok: u32, rows: u32, cols: u32, lead: u64) -> (u64, u64) {
        use rtl::*;
        let lane = if fmt == WeightFormat::W4Min { MATMUL_LANE_W4MIN } else { MATMUL_LANE };
        let (block_bytes, steps) = match fmt {
            WeightFormat::W4Min => (20, 2),
            WeightFormat::W4 => (18, 2),
            WeightFormat::W8 => (34, 4),
            // `f16`: 2 bytes a weight (the steps are counted below)
            WeightFormat::F16 => (64, 2),
        };
        let f16 = fmt == WeightFormat::F16;
        let (rows, ntok, nb) = (u64::from(rows), u64::from(ntok), u64::from(cols) / 32);
        let row_bytes = if f16 { 2 * u64::from(cols) } else { nb * block_bytes };
        let group = 2 * self.pe_lanes;
        let groups = rows.div_ceil(group);
        let out_bytes = if out == DType::F32 { 4 } else { 2 };
        // per output chunk of 32 bytes: a lane (two rows) per cycle
        let chunk_lanes = 32 / (2 * out_bytes);
        let beat = self.beat_bytes;
        // times in cycles from when the other units are idle (the compute may start then); the loader starts
        // after the checks, `lead` cycles earlier when the matmul was issued early
        let lead = i64::try_from(lead.saturating_sub(MATMUL_EARLY_ISSUE)).unwrap_or(i64::MAX / 4);
        let (mut req_free, mut compute) = (MATMUL_CHECK as i64 - lead, 0u64);
        // the weight buffer is a ring that holds `held` groups of these rows: the loader streams group `g`
        // once the compute has read group `g - held` (the release cycles of the last `held` groups)
        let rb = u32::try_from(row_bytes).unwrap_or(u32::MAX);
        let held = u64::from(OverlayConfig::weight_groups_in_ring(self.weight_row_lines, rb));
        let group_bytes = WeightLayout::for_lanes(self.pe_lanes as u32, row_bytes as usize).group_bytes();
        let mut release = vec![0i64; held as usize];
        // when the next group's compute may start (its predecessor's last token captured), and when the
        // readout has stored the last captured token
        let (mut next_start, mut readout_end) = (0i64, 0i64);
        let as_i = |c: u64| c as i64;
        // the scratchpad reads of the last token's readout (old words), which the next token's compute meets:
        // the first one's cycle and how many, a chunk with old words apart
        let (mut reads_from, mut reads) = (0i64, 0i64);
        let read_every = as_i(chunk_lanes + MATMUL_CHUNK_OLD);
        for g in 0..groups {
            let grows = group.min(rows - g * group);
            // a group's units, every lane's (docs/isa.md: the weights interleaved by lane), a partial
            // group's too
            let beats = as_i(group_bytes.div_ceil(beat));
            let slot = (g % held) as usize;
            let start = if g >= held { req_free.max(release[slot] + 1) } else { req_free };
            // a cycle for the group's geometry, then a beat per cycle; the next group's geometry right after
            let last_req = start + 1 + beats - 1;
            req_free = last_req + 1;
            let ready = last_req + as_i(self.mem_latency) + 1;
            let chunks = as_i((grows * out_bytes).div_ceil(32));
            if f16 {
                // the readout computes each chunk's lanes on the router's datapath, a pair of steps (both rows)
                // per 8 columns, lane after lane, then rounds and writes it; the token's next chunk after it
                let (pairs, lanes) = (u64::from(cols).div_ceil(8), grows.div_ceil(2));
                let token: u64 = (0..lanes.div_ceil(chunk_lanes))
                    .map(|c| 2 * pairs * (lanes - c * chunk_lanes).min(chunk_lanes) + MATMUL_F16_CHUNK)
                    .sum::<u64>()
                    + MATMUL_F16_TOKEN;
                let t = ready.max(next_start) + as_i(ntok * token);
                release[slot] = t;
                readout_end = t;
                next_start = t + as_i(MATMUL_F16_NEXT_GROUP);
                compute += ntok * lanes * 2 * pairs;
                continue;
            }
            // the readout's chunks read their old words (two cycles each) with `acc=1` or FP16 outputs of odd
            // rows (a half-written last word); else a chunk follows the last one's lanes at once, and its
            // token's first chunk takes a cycle to start. The chunks' writes go on the write port beside the
            // compute's reads; the old words' reads take its read port.
            let old = acc || (out == DType::F16 && grows % 2 == 1);
            let (per_chunk, first_chunk) = if old { (chunk_lanes + MATMUL_CHUNK_OLD, 0) } else { (chunk_lanes, 1) };
            let mut t = ready.max(next_start);
            for _ in 0..ntok {
                // the token's compute: its start, its two first reads, then its blocks but the last (whose
                // steps read the next block's lines: all of them at 2 steps a block, the last 2 of W8's 4); an
                // old-word read of the previous token's readout on a step that reads makes the block after
                // it read its lines again (2 cycles)
                let c0 = t + 1;
                let stream = as_i((nb - 1) * steps);
                let mut delay = 0;
                for r in (0..reads).map(|c| reads_from + c * read_every) {
                    let p = r - c0 - 3 - delay;
                    if (0..stream).contains(&p) && p % as_i(steps) >= as_i(steps) - 2 {
                        delay += MATMUL_READ_CONFLICT;
                    }
                }
                t += 3 + stream + delay;
                // the last step's capture waits for the hold registers (free once the readout has issued the
                // last token's last lane)
                t = t.max(readout_end + 1) + as_i(steps);
                let first = t + as_i(MATMUL_TAIL + lane + first_chunk);
                readout_end = first + chunks * as_i(per_chunk);
                (reads_from, reads) = (first, if old { chunks } else { 0 });
            }
            release[slot] = t;
            next_start = t + as_i(MATMUL_NEXT_GROUP);
            compute += ntok * nb * steps;
        }
        let finish = match (f16, red) {
            (false, false) => MATMUL_WRITE + MATMUL_FINISH,
            (false, true) => MATMUL_WRITE + MATMUL_FINISH + MATMUL_RED_DRAIN,
            (true, false) => MATMUL_F16_FINISH,
            (true, true) => MATMUL_F16_FINISH + MATMUL_F16_RED_DRAIN,
        };
        ((readout_end + as_i(finish)) as u64, compute)
    }
}

/// What an early-issued `matmul` overlaps (docs/rtl.md, the issue rule): the core issues a `matmul` while
/// the vector or the attention unit still works through the instructions before it, once the DMA unit is
/// idle and no `kvappend` (a device-memory write the weights might overlap) is pending; the matrix unit
/// checks it and its loader streams the first groups into the ring, and its compute starts when the other
/// units are idle. The core runs [`ISSUE_QUEUE_DEPTH`] instructions ahead of the unit it feeds, so the
/// loader overlaps at most that many plus the one running: the trailing run of one unit's instructions
/// since its last `kvappend`, scalar instructions between them aside.
#[derive(Clone, Debug, Default)]
pub(crate) struct LoaderLead {
    unit: Option<ExecUnit>,
    /// Cycles of the run's instructions, the newest last.
    run: Vec<u64>,
}

impl LoaderLead {
    /// An instruction other than `matmul` retired in `cycles`.
    pub fn note(&mut self, instr: &Instr, cycles: u64) {
        match instr.spec().unit() {
            Some(u @ (ExecUnit::Vector | ExecUnit::Attention)) => {
                if self.unit != Some(u) {
                    self.unit = Some(u);
                    self.run.clear();
                }
                if matches!(instr, Instr::Kvappend { .. }) {
                    self.run.clear();
                } else {
                    self.run.push(cycles);
                    let keep = ISSUE_QUEUE_DEPTH as usize + 1;
                    if self.run.len() > keep {
                        self.run.remove(0);
                    }
                }
            }
            // the DMA unit must be idle, and these wait for every unit (or for a predicate)
            Some(ExecUnit::Dma | ExecUnit::Matrix) => self.clear(),
            None if matches!(instr, Instr::Ldr { .. } | Instr::Barrier {} | Instr::End {} | Instr::Skip { .. }) => self.clear(),
            None => {}
        }
    }

    /// The lead of a `matmul` issued now: the cycles of the run it overlaps.
    pub fn take(&mut self) -> u64 {
        let lead = self.run.iter().sum();
        self.clear();
        lead
    }

    fn clear(&mut self) {
        self.unit = None;
        self.run.clear();
    }
}

/// Cycles of a row of `n` elements on the vector unit (`vop`, `rmsnorm`), in chunks of 8: a chunk takes a
/// cycle per operand line it reads, and at least one. An FP32 source is a line per chunk; an FP16 line holds
/// two chunks, read by the even chunk of the pair (the odd one takes its upper half); with two FP16 sources
/// the odd chunk reads the next pair's `a` line ahead (where the row goes on), and the even chunk after it
/// only `b`. `unshared`: lines read for every chunk besides the sources (`rmsnorm`'s FP32 gains). An FP16
/// destination row of odd length: its last chunk reads the old last word too.
fn vector_row_cycles(n: u64, sources: &[DType], unshared: u64, dst: DType) -> u64 {
    let chunks = n.div_ceil(8);
    let fp16 = sources.iter().filter(|&&t| t == DType::F16).count() as u64;
    let read_ahead = sources.len() == 2 && fp16 == 2;
    (0..chunks)
        .map(|i| {
            let (odd, last) = (i % 2 == 1, i + 1 == chunks);
            let mut reads = unshared + (sources.len() as u64 - fp16) + if odd { 0 } else { fp16 };
            if read_ahead && odd && !last {
                reads += 1;
            }
            if read_ahead && !odd && i > 0 {
                reads -= 1;
            }
            if last && dst == DType::F16 && n % 2 == 1 {
                reads += 1;
            }
            reads.max(1)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_groups_are_memory_bound_when_the_loads_are_longer() {
        let m = CostModel::new(&OverlayConfig::sim());
        // 64 rows of 1536 W4Min columns: 4 groups of 16 x 960 bytes = 240 beats; each group costs its beats
        // plus the loader's cycle, the first also the checks and the latency, the last its compute.
        let (c4, _) = m.matmul(WeightFormat::W4Min, DType::F16, false, false, 1, 64, 1536, 0);
        let (c8, _) = m.matmul(WeightFormat::W4Min, DType::F16, false, false, 1, 128, 1536, 0);
        assert_eq!(c8 - c4, 4 * 241);
    }
}

/// The CNN unit's writer (rtl/src/cnn/mod.rs, `WriterState`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    Idle,
    Wr,
    RmwB,
    RmwC,
    RmwW1,
    RmwW2,
}

impl CostModel {
    /// Cycles of a `conv` or `maxpool` on the CNN unit: its checks (the shift-add multiplier takes a cycle
    /// per bit of `out_w`, `cout` and the weights' count, and one more each), then per group of output
    /// channels (`pe_lanes` for `conv`, 16 for `maxpool`) the kernels' lines and the positions, which
    /// [`CostModel::cnn_positions`] steps through cycle by cycle as the RTL schedules them.
    pub(crate) fn cnn(&self, r: &CnnRun) -> u64 {
        use rtl::*;
        let (oh, ow) = ((r.h + 2 * r.pad - r.k) / r.stride + 1, (r.w + 2 * r.pad - r.k) / r.stride + 1);
        let kkc = r.k * r.k * r.cin;
        // (the RTL forms the weights' count from the low 16 bits of `k k cin`: the kernel rule keeps a
        // `conv`'s below 2^16; a `maxpool` uses the count for nothing but these cycles)
        let weights = (kkc & 0xFFFF) * r.cout;
        let bits = |x: u64| u64::from(64 - x.leading_zeros());
        let mut t = CNN_CHECKS + (bits(ow) + 1) + (bits(r.cout) + 1) + (bits(weights) + 1) + 1;
        let group = if r.maxpool { 16 } else { self.pe_lanes };
        for c0 in (0..r.cout).step_by(group as usize) {
            let nl = group.min(r.cout - c0);
            t += 1;
            if !r.maxpool {
                // the biases' lines, then each lane's kernel lines, back to back
                let bias_word = (2 * weights).div_ceil(4) + c0;
                let lines = ((bias_word & 7) + nl).div_ceil(8)
                    + (c0..c0 + nl).map(|co| ((co * kkc) % 16 + kkc).div_ceil(16)).sum::<u64>();
                // (a cycle per line, the last one's memory latency)
                t += lines + self.mem_latency;
            }
            t += self.cnn_positions(r, c0, nl, oh, ow);
        }
        t + CNN_FIN
    }

    /// The cycles of a group's positions, from the first position's start to the last one's outputs
    /// written: a position's scratchpad reads (a line per cycle; a row of `conv` takes `ceil(k cin / 16)`
    /// lines and one more at an odd i16, a window column of `maxpool` one and one more at an odd i16) after
    /// a cycle of its own, at most four positions owed to the writer, and the writer's chunks (a write, or a
    /// read-modify-write of five cycles whose two reads hold the position's reads back).
    fn cnn_positions(&self, r: &CnnRun, c0: u64, nl: u64, oh: u64, ow: u64) -> u64 {
        use rtl::*;
        let (src, dst) = (2 * r.src as i64, 2 * r.dst as i64);
        let (k, cin, w, h, stride, pad) = (r.k as i64, r.cin as i64, r.w as i64, r.h as i64, r.stride as i64, r.pad as i64);
        let steps = if r.maxpool { 1 } else { (k * cin + 15) / 16 };
        let reads = |p: u64| -> u64 {
            let (y0, x0) = ((p / ow) as i64 * stride - pad, (p % ow) as i64 * stride - pad);
            let mut n = 0;
            for ky in 0..k {
                let y = y0 + ky;
                if y < 0 || y >= h {
                    continue;
                }
                if r.maxpool {
                    for kx in 0..k {
                        let e = src + (y * w + x0 + kx) * cin + c0 as i64;
                        n += 1 + (e & 1) as u64;
                    }
                } else {
                    n += (steps + ((src + (y * w + x0) * cin) & 1)) as u64;
                }
            }
            n
        };
        // a position's chunks: whether each is a direct write (whole words)
        let chunks = nl.div_ceil(16);
        let direct = |p: u64, q: u64| {
            let o = dst + (p * r.cout + c0 + 16 * q) as i64;
            o & 1 == 0 && (16.min(nl - 16 * q)) % 2 == 0
        };
        let positions = oh * ow;
        let (mut cyc, mut p, mut left) = (0u64, 0u64, 0u64);
        let (mut streaming, mut ended) = (false, false);
        let (mut d_v, mut d_last) = (false, false);
        let (mut owed, mut cap_n) = (0u64, 0u64);
        let mut captures = std::collections::VecDeque::new();
        let (mut ws, mut wq, mut wpos) = (Writer::Idle, 0u64, 0u64);
        loop {
            // the data side presents the step of the line read last cycle
            let mut owed_inc = d_v && d_last;
            if owed_inc {
                captures.push_back(cyc + CNN_CAPTURE);
            }
            // the writer
            let (mut w_reads, mut w_fin, mut next_ws) = (false, false, ws);
            match ws {
                Writer::Idle => {
                    wq = 0;
                    if cap_n > 0 {
                        next_ws = Writer::Wr;
                    }
                }
                Writer::Wr => {
                    if direct(wpos, wq) {
                        wq += 1;
                        w_fin = wq == chunks;
                    } else {
                        w_reads = true;
                        next_ws = Writer::RmwB;
                    }
                }
                Writer::RmwB => {
                    w_reads = true;
                    next_ws = Writer::RmwC;
                }
                Writer::RmwC => next_ws = Writer::RmwW1,
                Writer::RmwW1 => next_ws = Writer::RmwW2,
                Writer::RmwW2 => {
                    wq += 1;
                    next_ws = Writer::Wr;
                    w_fin = wq == chunks;
                }
            }
            if w_fin {
                next_ws = Writer::Idle;
                wpos += 1;
            }
            // the sequencer
            let (mut next_dv, mut next_dlast, mut pos_done) = (false, false, false);
            if ended {
                if owed == 0 && !d_v {
                    return cyc + 1;
                }
            } else if streaming {
                if !w_reads {
                    next_dv = true;
                    left -= 1;
                    if left == 0 {
                        next_dlast = true;
                        pos_done = true;
                    }
                }
            } else if owed < CNN_HOLD_BANKS - 1 || (owed == CNN_HOLD_BANKS - 1 && !owed_inc) {
                left = reads(p);
                if left > 0 {
                    streaming = true;
                } else if !d_v {
                    // no row inside the image: one empty step
                    owed_inc = true;
                    captures.push_back(cyc + CNN_CAPTURE);
                    pos_done = true;
                }
            }
            if pos_done {
                streaming = false;
                p += 1;
                ended = p == positions;
            }
            // the end of the cycle
            let captured = captures.front() == Some(&cyc);
            if captured {
                captures.pop_front();
            }
            cap_n = cap_n + u64::from(captured) - u64::from(w_fin);
            owed = owed + u64::from(owed_inc) - u64::from(w_fin);
            (d_v, d_last, ws) = (next_dv, next_dlast, next_ws);
            cyc += 1;
        }
    }
}


//! The attention unit (rust-hdl HDL for the sequencing; the FP32 pipelines in [`lanes`], the scores on the
//! router's FP16 dot-product datapath, the online-softmax state in the reduction unit): `attn` with the KV
//! history buffer, and `kvappend`, as docs/isa.md defines them.
//!
//! **`attn`** is checked first, in the functional simulator's order: the `head_dim` CSR, `group` and
//! `r[len]`, the destination and query spans in the scratchpad, the presence bytes' span; then every position
//! before any effect (a present position's K and V rows in device memory, an absent one's history slot).
//! The common case needs no scan: if the last position's rows are in memory (the rows only move up with the
//! position) and every position has a history slot (or all are present), nothing can trap; otherwise the
//! positions are scanned in order, reading the presence bytes, and the first failing one traps
//! (`MEM_OUT_OF_RANGE` with the first faulting byte, or `HISTORY_OVERFLOW` with the position).
//!
//! Then the query heads are read into two buffers (even and odd heads), and the positions stream through
//! three engines that run at once, each on its own position:
//!
//! 1. **fetch** (`t`, [`FetchState`]): the presence byte (a line of 32 presence bytes is read from device
//!    memory when `t` enters it, with nothing else in flight); then **fresh or history**: a present
//!    position's K and V lines are requested from device memory (any number in flight, position after
//!    position) and, as they arrive (the response side, `tr`), go into the K and V rings and, when the slot
//!    exists, into history slot `t` at offset `kvh x head_dim`; an absent one's lines are copied from that
//!    slot into the rings once the lines in flight have arrived (`KV_HISTORY_HITS`). The fetch waits for
//!    room in the rings ([`RING_LINES`] each; the positions not yet updated hold theirs);
//! 2. **scores** (`ts`, once its lines are in): the router's datapath takes K against two query heads at a
//!    time, 8 columns per cycle (`dot_f16`, exact, rounded to FP32), the scale lane multiplies by
//!    `attn_scale`, and the reduction unit's online-softmax state per head gives `c`, `p` (and `l`) into a
//!    buffer of 16 positions' `(c, p)`; positions start at least `SOFTMAX_II` cycles apart;
//! 3. **update** (`tu`, once its `(c, p)` are out): 16 lanes compute `o c + p v` (`axpby`) over a line of V
//!    (two chunks of 8 FP32 outputs, in the even and odd output buffers; 0 before position 0) per cycle.
//!    Positions start at least `u_seq` cycles apart, so that a chunk is written back before the next
//!    position reads it.
//!
//! At the end `recip(l)` per head, and lanes 0-7 compute `o x recip(l)` rounded to FP16 into the scratchpad,
//! a chunk per cycle.
//!
//! **`kvappend`** stores the K and V rows of `H` KV heads (the `attn_heads` CSR, as `attn`) of position
//! `P = r[pos]` from the scratchpad to device memory (`32 (k + P kv_stride)`, `H x head_dim` FP16 each: whole
//! lines, since `head_dim` is a multiple of 16) and, when `kv_present` is not 0xFFFFFFFF, sets presence byte
//! `P` to 1. It is checked before it writes anything, in the functional simulator's order: the `head_dim`
//! CSR, `H` (`opu_hw::isa::kvappend_heads_fit`), the two scratchpad spans, the two rows' and the presence
//! byte's device-memory spans. Then the lines stream one per cycle, each read from the scratchpad the cycle
//! before it is offered to the memory (a row's first in a cycle of its own): K's lines, V's, and the
//! presence byte as a one-byte write (in that order, so V wins where the rows overlap, as in the functional
//! simulator).
//!
//! With `kv_index` set (docs/isa.md, the row index), a present position's rows are at its index entry's row:
//! `attn` checks the index span after the presence bytes and always scans the positions first; the scan and
//! the fetch read a line of 8 entries when a present position needs one not held (with nothing else in
//! flight), then take the rows' addresses from the entry; `kvappend` reads its entry after its sources.
//!
//! The unit reads the CSRs `head_dim`, `kv_stride`, `attn_scale` and `kv_present` as the core saw them when
//! it issued the instruction (the issue queue's auxiliary operand, CSR `c` at bits `32c..32c+32`), and
//! `kv_index` at bits 128..160.

pub mod lanes;

use crate::ctrl::queue::AUX_BITS;
use crate::ctrl::{constant as k, decode};
use crate::reduce::Reduce;
use crate::router::Router;
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use lanes::{AttnLane, AttnRecip, TAG_BITS};
use opu_hw::isa::Csr;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

/// Line address bits of the KV history buffer (K and V each: `kv_history_slots x kv_history_width / 16`
/// lines of 16 FP16).
pub const HIST_LINE_BITS: usize = 16;
/// Lines of the K ring and of the V ring: at least 4 positions of the largest `head_dim` (63 lines).
pub const RING_LINES: usize = 256;

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum AttnState {
    Idle,
    // ---- kvappend
    /// `head_dim`; the rows' line addresses.
    Check0,
    /// The K and V sources in the scratchpad.
    Check1,
    Check2,
    /// With `kv_index`: the index entry of `P` in device memory, its line, the row's line addresses.
    KIdxChk,
    KIdxReq,
    KIdxWait,
    KIdxRow,
    /// The K row, the V row and the presence byte in device memory.
    Check3,
    Check4,
    Check5,
    /// A row line is read from the scratchpad, then offered to the memory.
    LineRead,
    LineWrite,
    /// The presence byte.
    Mark,
    // ---- attn
    /// `head_dim`, `group`, `r[len]`; then the destination, query and presence spans.
    AChk0,
    AChk1,
    AChk2,
    AChk3,
    /// The row index's span (with `kv_index`).
    AChk3i,
    /// The last position's rows; whether a scan is needed.
    AChk4,
    AChk5,
    /// The query heads into their buffers.
    LoadQ,
    /// The trap scan of a position: its presence line, then its rows or its history slot.
    PosStart,
    PresReq,
    PresWait,
    /// A present position's index entry (its line read when `t` enters it), then its rows' line addresses.
    PosIdx,
    IdxReq,
    IdxWait,
    IdxRow,
    PosGo,
    /// The positions stream through the fetch, score and update engines ([`FetchState`], `s_busy`, `u_busy`).
    Run,
    /// `recip(l)` per head, then the outputs.
    Recip,
    Out,
    OutWait,
    // ---- route
    /// `cols`; the vector `x` in the scratchpad; the weights and the presence byte in device memory.
    RChk0,
    RChk1,
    RChk2,
    RChk3,
    /// The biases' line.
    RBias,
    RBiasWait,
    /// A chunk of up to 64 lines: `x` from the scratchpad, the execute and skip rows from device memory.
    RLoad,
    /// The chunk's beats through the router; after the last chunk, its decision.
    RBeat,
    RWait,
    /// Flushed: memory responses still in flight run out.
    Drain,
}

/// The fetch engine of `attn`: position `t`'s presence line, then its K and V lines into the rings (requests
/// from device memory, or copies from its history slot).
#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum FetchState {
    Idle,
    /// Position `t`: the end, its presence line, or on.
    Pos,
    PresReq,
    PresWait,
    /// With `kv_index`: a present position's index entry (a line of 8 read when `t` enters it, with nothing
    /// else in flight), then its rows' line addresses.
    Idx,
    IdxReq,
    IdxWait,
    IdxRow,
    /// Room in the rings; present or absent.
    Go,
    /// The K then V line requests of a present position.
    Req,
    /// An absent position's lines from its history slot (once nothing is in flight).
    Hist,
    Done,
}

#[derive(LogicBlock)]
pub struct AttentionUnit {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,

    // ---- issue (from the core, through the unit's queue): the register operand is `r[len]` or `r[pos]`, the
    // auxiliary operand the CSRs 0..4 and `kv_index` (bits 128..160)
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub iss_reg: Signal<In, Bits<32>>,
    pub iss_aux: Signal<In, Bits<AUX_BITS>>,
    pub idle: Signal<Out, Bit>,
    /// A `kvappend` runs (it writes device memory): the top issues no `matmul` ahead of it.
    pub kv_writing: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,

    // ---- device memory: line requests; read responses in order
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_write: Signal<Out, Bit>,
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_wdata: Signal<Out, Bits<256>>,
    pub m_wmask: Signal<Out, Bits<32>>,
    pub m_resp: Signal<In, Bit>,
    pub m_rdata: Signal<In, Bits<256>>,

    // ---- the scratchpad's line port (`spm::Scratchpad`)
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    pub bytes_read: Signal<Out, Bits<64>>,
    pub bytes_written: Signal<Out, Bits<64>>,
    pub macs: Signal<Out, Bits<64>>,
    pub hits: Signal<Out, Bits<32>>,
    /// Present positions whose K/V rows came from device memory (KV_HISTORY_MISSES).
    pub misses: Signal<Out, Bits<32>>,
    /// `route` decisions that skipped a block (SKIPPED_BLOCKS).
    pub skipped: Signal<Out, Bits<32>>,
    /// Predicate write-back of `route` (`p[pd]` = skip).
    pub pwb_valid: Signal<Out, Bit>,
    pub pwb_idx: Signal<Out, Bits<3>>,
    pub pwb_data: Signal<Out, Bit>,

    // ---- datapath
    router: Router,
    reduce: Reduce,
    lane: [AttnLane; 16],
    /// The scores' `x attn_scale` (its own lane, so that the update's chunks never wait for a score).
    slane: AttnLane,
    recip: AttnRecip,
    /// Query heads (even heads in `qbuf0`, odd in `qbuf1`, `head_dim / 16` lines each), the K and V rings
    /// (the K and V lines of the positions in flight, [`RING_LINES`] each, position after position), the
    /// outputs (chunks of 8 FP32, `head_dim / 8` per head: even chunks in `obuf_e`, odd in `obuf_o`),
    /// `(c, p)` per head of 16 positions, `l` and `recip(l)` per head.
    qbuf0: RAM<Bits<256>, 9>,
    qbuf1: RAM<Bits<256>, 9>,
    kbuf: RAM<Bits<256>, 8>,
    vbuf: RAM<Bits<256>, 8>,
    obuf_e: RAM<Bits<256>, 10>,
    obuf_o: RAM<Bits<256>, 10>,
    cp: RAM<Bits<64>, 8>,
    lreg: RAM<Bits<32>, 4>,
    rreg: RAM<Bits<32>, 4>,
    /// The KV history buffer.
    hist_k: RAM<Bits<256>, HIST_LINE_BITS>,
    hist_v: RAM<Bits<256>, HIST_LINE_BITS>,

    // ---- the instruction
    state: DFF<AttnState>,
    pc: DFF<Bits<32>>,
    pos: DFF<Bits<32>>,
    ksrc: DFF<Bits<20>>,
    vsrc: DFF<Bits<20>>,
    kline: DFF<Bits<32>>,
    vline: DFF<Bits<32>>,
    hd: DFF<Bits<32>>,
    stride: DFF<Bits<32>>,
    scale: DFF<Bits<32>>,
    kvp: DFF<Bits<32>>,
    /// The `kv_index` CSR; the index line held (8 entries) and its line number.
    kvi: DFF<Bits<32>>,
    idx: DFF<Bits<256>>,
    idx_line: DFF<Bits<32>>,
    idx_valid: DFF<Bit>,
    group: DFF<Bits<4>>,
    /// The `attn_heads` CSR as issued, then the KV heads `H` (1..=8, checked at AChk0).
    hcsr: DFF<Bits<32>>,
    heads: DFF<Bits<4>>,
    kvh: DFF<Bits<8>>,
    dst: DFF<Bits<20>>,
    qsrc: DFF<Bits<20>>,
    /// Line addresses of the K and V rows (`k + P kv_stride`, up to 66 bits) and the presence byte's address.
    krow: DFF<Bits<72>>,
    vrow: DFF<Bits<72>>,
    mark_byte: DFF<Bits<72>>,
    /// kvappend: the line being written, V's row after K's.
    li: DFF<Bits<8>>,
    second: DFF<Bit>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,
    rd_total: DFF<Bits<64>>,
    wr_total: DFF<Bits<64>>,
    macs_total: DFF<Bits<64>>,
    hits_total: DFF<Bits<32>>,
    outstanding: DFF<Bits<16>>,

    // ---- attn
    /// Scanning the positions for traps (no effects), or running them.
    scan: DFF<Bit>,
    /// `(kvh + 1) x head_dim <= kv_history_width`.
    width_ok: DFF<Bit>,
    t: DFF<Bits<32>>,
    hbase: DFF<Bits<HIST_LINE_BITS>>,
    pres: DFF<Bits<256>>,
    pres_line: DFF<Bits<32>>,
    pres_valid: DFF<Bit>,
    /// Score passes whose logits came out of the router.
    dpass: DFF<Bits<4>>,
    /// Requests and responses of the position's K/V lines; history reads.
    rq: DFF<Bits<8>>,
    rs: DFF<Bits<8>>,
    /// LoadQ: the read's head and line, and the captured one.
    qg: DFF<Bits<4>>,
    ql: DFF<Bits<8>>,
    /// LoadQ: the query head's slot within its KV head's group, and its KV head's first pass.
    qgg: DFF<Bits<4>>,
    qpb: DFF<Bits<4>>,
    /// The captured line's pass (its line in the query buffers: pass x head_dim / 16 + line).
    qcap_p: DFF<Bits<4>>,
    qcap_v: DFF<Bit>,
    qcap_g: DFF<Bits<4>>,
    qcap_l: DFF<Bits<8>>,
    /// Score: the pass (two heads), its beat, the beat read last cycle; lane 1's score waiting for the softmax.
    pass: DFF<Bits<4>>,
    /// The pass within its KV head, and its KV head's first K line in the position's lines.
    kpp: DFF<Bits<4>>,
    koff: DFF<Bits<8>>,
    beat: DFF<Bits<8>>,
    qbase: DFF<Bits<9>>,
    sc_v: DFF<Bit>,
    sc_beat: DFF<Bits<8>>,
    hold_v: DFF<Bit>,
    hold_row: DFF<Bits<4>>,
    hold_score: DFF<Bits<32>>,
    smcnt: DFF<Bits<5>>,
    /// Update and output: the head, the chunk, the head's first output line, the chunk read last cycle.
    ug: DFF<Bits<4>>,
    /// The head's slot within its KV head's padded group (`2 ceil(group / 2)` slots); its KV head's first V
    /// line in the position's lines; the next real head's first output chunk.
    ugs: DFF<Bits<4>>,
    voff: DFF<Bits<8>>,
    rbase: DFF<Bits<11>>,
    ui: DFF<Bits<8>>,
    obase: DFF<Bits<11>>,
    u_v: DFF<Bit>,
    u_chunk: DFF<Bits<11>>,
    u_half: DFF<Bit>,
    /// The chunk read last cycle is an update (else an output).
    u_upd: DFF<Bit>,
    lanes_busy: DFF<Bits<8>>,
    rwait: DFF<Bits<8>>,
    /// The fetch engine (its position is `t`, its rows `krow`/`vrow`, its slot `hbase`).
    fst: DFF<FetchState>,
    /// Ring lines held by positions fetched (or being fetched) and not yet updated.
    ring_used: DFF<Bits<9>>,
    /// The response side: the position whose lines arrive, its first ring line, its history slot.
    tr: DFF<Bits<32>>,
    kw: DFF<Bits<8>>,
    hb_r: DFF<Bits<HIST_LINE_BITS>>,
    /// The score engine: its position, the position's first K line in the ring, cycles since it started
    /// the position (a softmax row takes a score every `SOFTMAX_II` cycles).
    ts: DFF<Bits<32>>,
    ks: DFF<Bits<8>>,
    s_busy: DFF<Bit>,
    s_gap: DFF<Bits<8>>,
    /// Scores out of the router: the first position's (the softmax restarts), and lane 1's first flag.
    d_first: DFF<Bit>,
    hold_first: DFF<Bit>,
    /// Positions whose softmax outputs are all in `cp`.
    sm_pos: DFF<Bits<32>>,
    /// The update engine: its position, the position's first V line in the ring; the chunk read last cycle
    /// is position 0's (the outputs start at 0).
    tu: DFF<Bits<32>>,
    vu: DFF<Bits<8>>,
    u_busy: DFF<Bit>,
    u_zero: DFF<Bit>,
    /// Cycles since the update engine started its position.
    u_gap: DFF<Bits<8>>,

    /// The instruction running is a `kvappend`.
    kv_op: DFF<Bit>,
    // ---- route
    is_route: DFF<Bit>,
    pd: DFF<Bits<3>>,
    mark: DFF<Bit>,
    /// The presence byte's value (kvappend 1, route 1 when executing).
    mval: DFF<Bit>,
    cols: DFF<Bits<16>>,
    rb0: DFF<Bits<16>>,
    rb1: DFF<Bits<16>>,
    /// First line of the chunk within a row.
    ch_line: DFF<Bits<16>>,
    xcap_v: DFF<Bit>,
    xcap_l: DFF<Bits<8>>,
    sc_first: DFF<Bit>,
    sc_last: DFF<Bit>,
    skipped_total: DFF<Bits<32>>,
    misses_total: DFF<Bits<32>>,

    // ---- constants
    spm_bytes: Constant<Bits<32>>,
    mem_bytes: Constant<Bits<72>>,
    hist_slots: Constant<Bits<32>>,
    hist_width: Constant<Bits<32>>,
    hist_w16: Constant<Bits<HIST_LINE_BITS>>,
    op_kvappend: Constant<Bits<8>>,
    op_attn: Constant<Bits<8>>,
    op_route: Constant<Bits<8>>,
    f_pd: Constant<Bits<8>>,
    f_mark: Constant<Bits<8>>,
    f_rsrc: Constant<Bits<8>>,
    f_rw: Constant<Bits<8>>,
    f_cols: Constant<Bits<8>>,
    f_ksrc: Constant<Bits<8>>,
    f_vsrc: Constant<Bits<8>>,
    f_k: Constant<Bits<8>>,
    f_v: Constant<Bits<8>>,
    f_group: Constant<Bits<8>>,
    f_kvh: Constant<Bits<8>>,
    f_dst: Constant<Bits<8>>,
    f_q: Constant<Bits<8>>,
    f_ak: Constant<Bits<8>>,
    f_av: Constant<Bits<8>>,
    csr_hd: Constant<Bits<8>>,
    csr_stride: Constant<Bits<8>>,
    csr_scale: Constant<Bits<8>>,
    csr_kvp: Constant<Bits<8>>,
    csr_kvi: Constant<Bits<8>>,
    csr_heads: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_mem: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,
    c_hist: Constant<Bits<4>>,
    ones32: Constant<Bits<32>>,
    u64_max: Constant<Bits<72>>,
    recip_wait: Constant<Bits<8>>,
    sm_ii: Constant<Bits<8>>,
    /// Cycles between two positions' first update reads: a pair read at cycle `c` enters the lanes at `c + 1`
    /// and is written back at the end of `c + latency + 1`, so the next position reads it at `c + latency + 2`
    /// at the earliest (a read at the write's edge sees the old line).
    u_seq: Constant<Bits<8>>,
    ring_lines: Constant<Bits<9>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    supported: Signal<Local, Bit>,
    is_attn: Signal<Local, Bit>,
    is_route_op: Signal<Local, Bit>,
    /// route: lines per row, lines of this chunk, the chunk's request line.
    rl: Signal<Local, Bits<16>>,
    rl_rem: Signal<Local, Bits<16>>,
    nlc: Signal<Local, Bits<8>>,
    r_line: Signal<Local, Bits<64>>,
    raise: Signal<Local, Bit>,
    raise_code: Signal<Local, Bits<4>>,
    raise_info: Signal<Local, Bits<64>>,
    row_bytes: Signal<Local, Bits<32>>,
    nl: Signal<Local, Bits<8>>,
    p_a: Signal<Local, Bits<32>>,
    p_ll: Signal<Local, Bits<32>>,
    p_lh: Signal<Local, Bits<32>>,
    p_hl: Signal<Local, Bits<32>>,
    p_hh: Signal<Local, Bits<32>>,
    pstride: Signal<Local, Bits<72>>,
    spm_start: Signal<Local, Bits<32>>,
    spm_len: Signal<Local, Bits<32>>,
    spm_first: Signal<Local, Bits<64>>,
    mem_start: Signal<Local, Bits<72>>,
    mem_len: Signal<Local, Bits<72>>,
    mem_first: Signal<Local, Bits<64>>,
    mem_bad: Signal<Local, Bit>,
    /// The state checks its scratchpad span, its device-memory span (the trap is raised below the states).
    chk_spm: Signal<Local, Bit>,
    chk_mem: Signal<Local, Bit>,
    row_line: Signal<Local, Bits<72>>,
    heads_bytes: Signal<Local, Bits<32>>,
    pres_need: Signal<Local, Bits<32>>,
    /// Position `t`'s presence line is not the one held (the scan and the fetch read it first).
    pres_stale: Signal<Local, Bit>,
    pres_byte: Signal<Local, Bits<8>>,
    is_present: Signal<Local, Bit>,
    slot_ok: Signal<Local, Bit>,
    pres_sh: Signal<Local, Bits<256>>,
    /// Position `t`'s index line, whether it is not the one held, its entry (the row); the multiplier's
    /// operand (`r[pos]`, or the row of an index entry).
    idx_need: Signal<Local, Bits<32>>,
    idx_stale: Signal<Local, Bit>,
    idx_sh: Signal<Local, Bits<256>>,
    idx_entry: Signal<Local, Bits<32>>,
    indexed: Signal<Local, Bit>,
    mul_op: Signal<Local, Bits<32>>,
    kv_line: Signal<Local, Bits<72>>,
    qwa: Signal<Local, Bits<32>>,
    beat_l: Signal<Local, Bits<8>>,
    rs_v: Signal<Local, Bits<8>>,
    hb0: Signal<Local, Bits<32>>,
    npass: Signal<Local, Bits<4>>,
    /// Passes per KV head (`ceil(group / 2)`), heads per KV head padded to even, all the (padded) heads
    /// `vh = H x hpad`, real query heads `H x group`; a position's K (V) lines `H x head_dim / 16` and the
    /// fetch's lines (K's then V's); the bytes of a position's K (V) rows.
    npp: Signal<Local, Bits<4>>,
    hpad: Signal<Local, Bits<5>>,
    vh: Signal<Local, Bits<5>>,
    qh: Signal<Local, Bits<5>>,
    nlh: Signal<Local, Bits<8>>,
    nfetch: Signal<Local, Bits<8>>,
    arow_bytes: Signal<Local, Bits<32>>,
    /// The `attn_heads` CSR with 0 counting as 1; whether it fits the unit's buffers.
    heff: Signal<Local, Bits<32>>,
    /// Recip: the head whose `recip(l)` comes out of the pipeline this cycle.
    rw_head: Signal<Local, Bits<8>>,
    /// The products behind `vh`, `qh` and `nlh` (16 x 16 bits).
    vh_p: Signal<Local, Bits<32>>,
    qh_p: Signal<Local, Bits<32>>,
    nlh_p: Signal<Local, Bits<32>>,
    heads_bad: Signal<Local, Bit>,
    kv_heads_bad: Signal<Local, Bit>,
    /// The update's, the recip's or the output's head is padding (no such query head).
    ug_pad: Signal<Local, Bit>,
    nbeat: Signal<Local, Bits<8>>,
    nchunk: Signal<Local, Bits<8>>,
    lane_go: Signal<Local, Bit>,
    lane_sel: Signal<Local, Bit>,
    lane_b: Signal<Local, Bits<32>>,
    lane_c: Signal<Local, Bits<32>>,
    lane_tag: Signal<Local, Bits<TAG_BITS>>,
    lane_a: Signal<Local, Bits<512>>,
    lane_d: Signal<Local, Bits<256>>,
    out_v: Signal<Local, Bit>,
    out_kind: Signal<Local, Bits<2>>,
    out_addr: Signal<Local, Bits<13>>,
    ys: Signal<Local, Bits<256>>,
    ys_hi: Signal<Local, Bits<256>>,
    /// The output buffers' read line (a pair of chunks; at the outputs, the chunk's pair).
    o_rd: Signal<Local, Bits<11>>,
    y16s: Signal<Local, Bits<128>>,
    next_pos: Signal<Local, Bit>,
    /// The fetch engine's and the response side's position is done; ring lines taken and given back.
    f_adv: Signal<Local, Bit>,
    r_adv: Signal<Local, Bit>,
    ring_add: Signal<Local, Bit>,
    ring_sub: Signal<Local, Bit>,
    slot_r_ok: Signal<Local, Bit>,
    s_go: Signal<Local, Bit>,
    u_go: Signal<Local, Bit>,
    /// The engine may go on with its next position at once, after its current one's last beat or chunk.
    s_more: Signal<Local, Bit>,
    u_more: Signal<Local, Bit>,
}

impl AttentionUnit {
    pub fn new(config: &OverlayConfig) -> AttentionUnit {
        if let Err(e) = check_config(config) {
            panic!("{e}");
        }
        let f = |m: &str, n: &str| k::<8>(u64::from(decode::field(m, n).offset));
        AttentionUnit {
            clock: Default::default(),
            reset: Default::default(),
            flush: Default::default(),
            iss_valid: Default::default(),
            iss_ready: Default::default(),
            iss_word: Default::default(),
            iss_pc: Default::default(),
            iss_reg: Default::default(),
            iss_aux: Default::default(),
            idle: Default::default(),
            kv_writing: Default::default(),
            progress: Default::default(),
            trap_valid: Default::default(),
            trap_code: Default::default(),
            trap_pc: Default::default(),
            trap_info: Default::default(),
            m_req: Default::default(),
            m_req_ready: Default::default(),
            m_write: Default::default(),
            m_addr: Default::default(),
            m_wdata: Default::default(),
            m_wmask: Default::default(),
            m_resp: Default::default(),
            m_rdata: Default::default(),
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            bytes_read: Default::default(),
            bytes_written: Default::default(),
            macs: Default::default(),
            hits: Default::default(),
            skipped: Default::default(),
            misses: Default::default(),
            pwb_valid: Default::default(),
            pwb_idx: Default::default(),
            pwb_data: Default::default(),
            router: Default::default(),
            reduce: Reduce::softmax_only(),
            lane: Default::default(),
            slane: Default::default(),
            recip: Default::default(),
            qbuf0: Default::default(),
            qbuf1: Default::default(),
            kbuf: Default::default(),
            vbuf: Default::default(),
            obuf_e: Default::default(),
            obuf_o: Default::default(),
            cp: Default::default(),
            lreg: Default::default(),
            rreg: Default::default(),
            hist_k: Default::default(),
            hist_v: Default::default(),
            state: Default::default(),
            pc: Default::default(),
            pos: Default::default(),
            ksrc: Default::default(),
            vsrc: Default::default(),
            kline: Default::default(),
            vline: Default::default(),
            hd: Default::default(),
            stride: Default::default(),
            scale: Default::default(),
            kvp: Default::default(),
            kvi: Default::default(),
            idx: Default::default(),
            idx_line: Default::default(),
            idx_valid: Default::default(),
            group: Default::default(),
            hcsr: Default::default(),
            heads: Default::default(),
            kvh: Default::default(),
            dst: Default::default(),
            qsrc: Default::default(),
            krow: Default::default(),
            vrow: Default::default(),
            mark_byte: Default::default(),
            li: Default::default(),
            second: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            rd_total: Default::default(),
            wr_total: Default::default(),
            macs_total: Default::default(),
            hits_total: Default::default(),
            outstanding: Default::default(),
            scan: Default::default(),
            width_ok: Default::default(),
            t: Default::default(),
            hbase: Default::default(),
            pres: Default::default(),
            pres_line: Default::default(),
            pres_valid: Default::default(),
            dpass: Default::default(),
            rq: Default::default(),
            rs: Default::default(),
            qg: Default::default(),
            qgg: Default::default(),
            qpb: Default::default(),
            qcap_p: Default::default(),
            ql: Default::default(),
            qcap_v: Default::default(),
            qcap_g: Default::default(),
            qcap_l: Default::default(),
            pass: Default::default(),
            kpp: Default::default(),
            koff: Default::default(),
            beat: Default::default(),
            qbase: Default::default(),
            sc_v: Default::default(),
            sc_beat: Default::default(),
            hold_v: Default::default(),
            hold_row: Default::default(),
            hold_score: Default::default(),
            smcnt: Default::default(),
            ug: Default::default(),
            ugs: Default::default(),
            voff: Default::default(),
            rbase: Default::default(),
            ui: Default::default(),
            obase: Default::default(),
            u_v: Default::default(),
            u_chunk: Default::default(),
            u_half: Default::default(),
            u_upd: Default::default(),
            lanes_busy: Default::default(),
            rwait: Default::default(),
            fst: Default::default(),
            ring_used: Default::default(),
            tr: Default::default(),
            kw: Default::default(),
            hb_r: Default::default(),
            ts: Default::default(),
            ks: Default::default(),
            s_busy: Default::default(),
            s_gap: Default::default(),
            d_first: Default::default(),
            hold_first: Default::default(),
            sm_pos: Default::default(),
            tu: Default::default(),
            vu: Default::default(),
            u_busy: Default::default(),
            u_zero: Default::default(),
            u_gap: Default::default(),
            kv_op: Default::default(),
            is_route: Default::default(),
            pd: Default::default(),
            mark: Default::default(),
            mval: Default::default(),
            cols: Default::default(),
            rb0: Default::default(),
            rb1: Default::default(),
            ch_line: Default::default(),
            xcap_v: Default::default(),
            xcap_l: Default::default(),
            sc_first: Default::default(),
            sc_last: Default::default(),
            skipped_total: Default::default(),
            misses_total: Default::default(),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            mem_bytes: k(config.device_memory_bytes),
            hist_slots: k(u64::from(config.kv_history_slots)),
            hist_width: k(u64::from(config.kv_history_width)),
            hist_w16: k(u64::from(config.kv_history_width / 16)),
            op_kvappend: k(u64::from(decode::opcode("kvappend"))),
            op_attn: k(u64::from(decode::opcode("attn"))),
            op_route: k(u64::from(decode::opcode("route"))),
            f_pd: f("route", "pd"),
            f_mark: f("route", "mark"),
            f_rsrc: f("route", "src"),
            f_rw: f("route", "w"),
            f_cols: f("route", "cols"),
            f_ksrc: f("kvappend", "ksrc"),
            f_vsrc: f("kvappend", "vsrc"),
            f_k: f("kvappend", "k"),
            f_v: f("kvappend", "v"),
            f_group: f("attn", "group"),
            f_kvh: f("attn", "kvh"),
            f_dst: f("attn", "dst"),
            f_q: f("attn", "q"),
            f_ak: f("attn", "k"),
            f_av: f("attn", "v"),
            csr_hd: k(32 * Csr::HeadDim as u64),
            csr_stride: k(32 * Csr::KvStride as u64),
            csr_scale: k(32 * Csr::AttnScale as u64),
            csr_kvp: k(32 * Csr::KvPresent as u64),
            // the queue's auxiliary operand carries kv_index after the CSRs 0..4
            csr_kvi: k(128),
            csr_heads: k(160),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_mem: k(ErrorCode::MemOutOfRange as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            c_hist: k(ErrorCode::HistoryOverflow as u64),
            ones32: k(0xFFFF_FFFF),
            u64_max: k(u64::MAX),
            recip_wait: k(lanes::attn_recip_latency() as u64 + 1),
            sm_ii: k(crate::reduce::SOFTMAX_II as u64),
            u_seq: k(lanes::attn_lane_latency() as u64 + 2),
            ring_lines: k(RING_LINES as u64),
            opc: Default::default(),
            supported: Default::default(),
            is_attn: Default::default(),
            is_route_op: Default::default(),
            rl: Default::default(),
            rl_rem: Default::default(),
            nlc: Default::default(),
            r_line: Default::default(),
            raise: Default::default(),
            raise_code: Default::default(),
            raise_info: Default::default(),
            row_bytes: Default::default(),
            nl: Default::default(),
            p_a: Default::default(),
            p_ll: Default::default(),
            p_lh: Default::default(),
            p_hl: Default::default(),
            p_hh: Default::default(),
            pstride: Default::default(),
            spm_start: Default::default(),
            spm_len: Default::default(),
            spm_first: Default::default(),
            mem_start: Default::default(),
            mem_len: Default::default(),
            mem_first: Default::default(),
            mem_bad: Default::default(),
            chk_spm: Default::default(),
            chk_mem: Default::default(),
            row_line: Default::default(),
            heads_bytes: Default::default(),
            pres_need: Default::default(),
            pres_stale: Default::default(),
            pres_byte: Default::default(),
            is_present: Default::default(),
            slot_ok: Default::default(),
            pres_sh: Default::default(),
            idx_need: Default::default(),
            idx_stale: Default::default(),
            idx_sh: Default::default(),
            idx_entry: Default::default(),
            indexed: Default::default(),
            mul_op: Default::default(),
            kv_line: Default::default(),
            qwa: Default::default(),
            beat_l: Default::default(),
            rs_v: Default::default(),
            hb0: Default::default(),
            npass: Default::default(),
            npp: Default::default(),
            hpad: Default::default(),
            vh: Default::default(),
            qh: Default::default(),
            nlh: Default::default(),
            nfetch: Default::default(),
            arow_bytes: Default::default(),
            heff: Default::default(),
            rw_head: Default::default(),
            vh_p: Default::default(),
            qh_p: Default::default(),
            nlh_p: Default::default(),
            heads_bad: Default::default(),
            kv_heads_bad: Default::default(),
            ug_pad: Default::default(),
            nbeat: Default::default(),
            nchunk: Default::default(),
            lane_go: Default::default(),
            lane_sel: Default::default(),
            lane_b: Default::default(),
            lane_c: Default::default(),
            lane_tag: Default::default(),
            lane_a: Default::default(),
            lane_d: Default::default(),
            out_v: Default::default(),
            out_kind: Default::default(),
            out_addr: Default::default(),
            ys: Default::default(),
            ys_hi: Default::default(),
            o_rd: Default::default(),
            y16s: Default::default(),
            next_pos: Default::default(),
            f_adv: Default::default(),
            r_adv: Default::default(),
            ring_add: Default::default(),
            ring_sub: Default::default(),
            slot_r_ok: Default::default(),
            s_go: Default::default(),
            u_go: Default::default(),
            s_more: Default::default(),
            u_more: Default::default(),
        }
    }
}

impl Logic for AttentionUnit {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, pos, ksrc, vsrc, kline, vline, hd, stride, scale, kvp, kvi, idx, idx_line, idx_valid, group, hcsr, heads, kvh, dst, qsrc, krow,
            vrow, mark_byte, li, second, trap_r, trap_code_r, trap_info_r, rd_total, wr_total, macs_total, hits_total,
            outstanding, scan, width_ok, t, hbase, pres, pres_line, pres_valid, dpass, rq, rs, qg, ql, qgg, qpb, qcap_p, kpp, koff, ugs, voff, rbase,
            qcap_v, qcap_g, qcap_l, pass, beat, qbase, sc_v, sc_beat, hold_v, hold_row, hold_score, smcnt, ug, ui,
            obase, u_v, u_chunk, u_half, u_upd, lanes_busy, rwait, kv_op, is_route, pd, mark, mval, cols, rb0, rb1, ch_line, xcap_v,
            xcap_l, sc_first, sc_last, skipped_total, misses_total, fst, ring_used, tr, kw, hb_r, ts, ks, s_busy, s_gap,
            d_first, hold_first, sm_pos, tu, vu, u_busy, u_zero, u_gap
        );
        self.router.clock.next = self.clock.val();
        self.router.reset.next = self.reset.val() | self.flush.val();
        self.reduce.clock.next = self.clock.val();
        self.reduce.reset.next = self.reset.val() | self.flush.val();
        // the reduction unit's sum of squares is not used here (RED has its own file)
        self.reduce.sq_valid.next = false;
        self.reduce.sq_clear.next = false;
        self.reduce.sq_x.next = 0.into();
        self.recip.clock.next = self.clock.val();
        self.lane[0].clock.next = self.clock.val();
        self.lane[1].clock.next = self.clock.val();
        self.lane[2].clock.next = self.clock.val();
        self.lane[3].clock.next = self.clock.val();
        self.lane[4].clock.next = self.clock.val();
        self.lane[5].clock.next = self.clock.val();
        self.lane[6].clock.next = self.clock.val();
        self.lane[7].clock.next = self.clock.val();
        self.lane[8].clock.next = self.clock.val();
        self.lane[9].clock.next = self.clock.val();
        self.lane[10].clock.next = self.clock.val();
        self.lane[11].clock.next = self.clock.val();
        self.lane[12].clock.next = self.clock.val();
        self.lane[13].clock.next = self.clock.val();
        self.lane[14].clock.next = self.clock.val();
        self.lane[15].clock.next = self.clock.val();
        self.slane.clock.next = self.clock.val();
        self.qbuf0.read_clock.next = self.clock.val();
        self.qbuf0.write_clock.next = self.clock.val();
        self.qbuf1.read_clock.next = self.clock.val();
        self.qbuf1.write_clock.next = self.clock.val();
        self.kbuf.read_clock.next = self.clock.val();
        self.kbuf.write_clock.next = self.clock.val();
        self.vbuf.read_clock.next = self.clock.val();
        self.vbuf.write_clock.next = self.clock.val();
        self.obuf_e.read_clock.next = self.clock.val();
        self.obuf_e.write_clock.next = self.clock.val();
        self.obuf_o.read_clock.next = self.clock.val();
        self.obuf_o.write_clock.next = self.clock.val();
        self.cp.read_clock.next = self.clock.val();
        self.cp.write_clock.next = self.clock.val();
        self.lreg.read_clock.next = self.clock.val();
        self.lreg.write_clock.next = self.clock.val();
        self.rreg.read_clock.next = self.clock.val();
        self.rreg.write_clock.next = self.clock.val();
        self.hist_k.read_clock.next = self.clock.val();
        self.hist_k.write_clock.next = self.clock.val();
        self.hist_v.read_clock.next = self.clock.val();
        self.hist_v.write_clock.next = self.clock.val();

        // ---- issue
        self.opc.next = self.iss_word.val().get_bits::<8>(0);
        self.is_attn.next = self.opc.val() == self.op_attn.val();
        self.is_route_op.next = self.opc.val() == self.op_route.val();
        self.supported.next = (self.opc.val() == self.op_kvappend.val()) | self.is_attn.val() | self.is_route_op.val();
        self.idle.next = self.state.q.val() == AttnState::Idle;
        self.kv_writing.next = (self.state.q.val() != AttnState::Idle) & self.kv_op.q.val();
        self.iss_ready.next = (self.state.q.val() == AttnState::Idle) & self.supported.val() & !self.trap_r.q.val();
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        self.trap_r.d.next = false;
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.bytes_read.next = self.rd_total.q.val();
        self.bytes_written.next = self.wr_total.q.val();
        self.macs.next = self.macs_total.q.val();
        self.hits.next = self.hits_total.q.val();
        self.skipped.next = self.skipped_total.q.val();
        self.misses.next = self.misses_total.q.val();
        self.pwb_valid.next = false;
        self.pwb_idx.next = self.pd.q.val();
        self.pwb_data.next = self.router.skip.val();

        // ---- sizes and address arithmetic: `pos` x kv_stride in 64 bits from four 16 x 16 products
        self.row_bytes.next = self.hd.q.val() << 1;
        self.nl.next = self.hd.q.val().get_bits::<8>(4);
        self.nbeat.next = self.nl.val() << 1;
        self.nchunk.next = self.nl.val() << 1;
        self.npp.next = (self.group.q.val() + 1) >> 1;
        self.hpad.next = bit_cast::<5, 4>(self.npp.val()) << 1;
        self.vh_p.next = bit_cast::<16, 4>(self.heads.q.val()) * bit_cast::<16, 5>(self.hpad.val());
        self.vh.next = self.vh_p.val().get_bits::<5>(0);
        self.npass.next = self.vh.val().get_bits::<4>(1);
        self.qh_p.next = bit_cast::<16, 4>(self.heads.q.val()) * bit_cast::<16, 4>(self.group.q.val());
        self.qh.next = self.qh_p.val().get_bits::<5>(0);
        self.nlh_p.next = bit_cast::<16, 4>(self.heads.q.val()) * bit_cast::<16, 8>(self.nl.val());
        self.nlh.next = self.nlh_p.val().get_bits::<8>(0);
        self.nfetch.next = self.nlh.val() << 1;
        self.arow_bytes.next = bit_cast::<32, 8>(self.nlh.val()) << 5;
        self.heads_bytes.next = (bit_cast::<16, 5>(self.qh.val()) * self.hd.q.val().get_bits::<16>(0)) << 1;
        // KV heads per `attn`: at most 16 (padded) query heads and 1,024 K (V) elements per position
        self.heff.next = self.hcsr.q.val();
        if self.hcsr.q.val() == 0 {
            self.heff.next = 1.into();
        }
        // (`kv_heads_bad`: more KV heads than the unit takes or their rows longer than its rings, which also
        // bounds a `kvappend`; `heads_bad` adds the padded query heads of an `attn`)
        self.kv_heads_bad.next = (self.heff.val() > 8)
            | ((bit_cast::<16, 4>(self.heff.val().get_bits::<4>(0)) * self.hd.q.val().get_bits::<16>(0)) > 1024);
        self.heads_bad.next = self.kv_heads_bad.val()
            | ((bit_cast::<16, 4>(self.heff.val().get_bits::<4>(0)) * bit_cast::<16, 5>(self.hpad.val())) > 16);
        self.ug_pad.next = bit_cast::<5, 4>(self.ugs.q.val()) >= bit_cast::<5, 4>(self.group.q.val());
        // ---- the row index: position `t`'s line of 8 entries and its entry
        self.indexed.next = self.kvi.q.val() != self.ones32.val();
        self.idx_need.next = self.t.q.val() >> 3;
        self.idx_stale.next = self.indexed.val() & !(self.idx_valid.q.val() & (self.idx_line.q.val() == self.idx_need.val()));
        self.idx_sh.next = self.idx.q.val() >> (bit_cast::<9, 3>(self.t.q.val().get_bits::<3>(0)) << 5);
        self.idx_entry.next = self.idx_sh.val().get_bits::<32>(0);
        self.mul_op.next = self.pos.q.val();
        if (self.state.q.val() == AttnState::KIdxRow) | (self.state.q.val() == AttnState::IdxRow) | (self.fst.q.val() == FetchState::IdxRow) {
            self.mul_op.next = self.idx_entry.val();
        }
        self.p_ll.next = self.mul_op.val().get_bits::<16>(0) * self.stride.q.val().get_bits::<16>(0);
        self.p_lh.next = self.mul_op.val().get_bits::<16>(0) * self.stride.q.val().get_bits::<16>(16);
        self.p_hl.next = self.mul_op.val().get_bits::<16>(16) * self.stride.q.val().get_bits::<16>(0);
        self.p_hh.next = self.mul_op.val().get_bits::<16>(16) * self.stride.q.val().get_bits::<16>(16);
        self.pstride.next = bit_cast::<72, 32>(self.p_ll.val())
            + (bit_cast::<72, 32>(self.p_lh.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hl.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hh.val()) << 32);
        self.p_a.next = (bit_cast::<16, 8>(self.kvh.q.val()) + bit_cast::<16, 4>(self.heads.q.val())) * self.hd.q.val().get_bits::<16>(0);
        self.hb0.next = bit_cast::<16, 8>(self.kvh.q.val()) * bit_cast::<16, 8>(self.nl.val());

        // ---- span checks: the scratchpad span and the memory span of the state, their first faulting bytes
        // as the functional simulator reports them
        self.raise.next = false;
        self.raise_code.next = self.c_bad.val();
        self.raise_info.next = 0.into();
        self.spm_start.next = bit_cast::<32, 20>(self.ksrc.q.val()) << 2;
        self.spm_len.next = self.row_bytes.val();
        if self.kv_op.q.val() {
            // kvappend: the rows of its KV heads (`heads`, from Check1 on)
            self.spm_len.next = self.arow_bytes.val();
        }
        if self.state.q.val() == AttnState::Check2 {
            self.spm_start.next = bit_cast::<32, 20>(self.vsrc.q.val()) << 2;
        }
        if self.state.q.val() == AttnState::AChk1 {
            self.spm_start.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
            self.spm_len.next = self.heads_bytes.val();
        }
        if self.state.q.val() == AttnState::AChk2 {
            self.spm_start.next = bit_cast::<32, 20>(self.qsrc.q.val()) << 2;
            self.spm_len.next = self.heads_bytes.val();
        }
        if self.state.q.val() == AttnState::RChk1 {
            self.spm_start.next = bit_cast::<32, 20>(self.qsrc.q.val()) << 2;
            self.spm_len.next = bit_cast::<32, 16>(self.cols.q.val()) << 1;
        }
        self.spm_first.next = bit_cast::<64, 32>(self.spm_start.val());
        if self.spm_start.val() < self.spm_bytes.val() {
            self.spm_first.next = bit_cast::<64, 32>(self.spm_bytes.val());
        }
        self.mem_start.next = self.krow.q.val() << 5;
        self.mem_len.next = bit_cast::<72, 32>(self.row_bytes.val());
        if self.kv_op.q.val() {
            self.mem_len.next = bit_cast::<72, 32>(self.arow_bytes.val());
        }
        if self.state.q.val() == AttnState::PosGo {
            self.mem_len.next = bit_cast::<72, 32>(self.arow_bytes.val());
        }
        if (self.state.q.val() == AttnState::Check4) | (self.second.q.val() & (self.state.q.val() == AttnState::PosGo)) {
            self.mem_start.next = self.vrow.q.val() << 5;
        }
        if (self.state.q.val() == AttnState::Check5) | (self.state.q.val() == AttnState::RChk3) {
            self.mem_start.next = self.mark_byte.q.val();
            self.mem_len.next = 1.into();
        }
        if self.state.q.val() == AttnState::RChk2 {
            // the two rows and the biases: 4 cols + 4 bytes from line w
            self.mem_start.next = bit_cast::<72, 32>(self.kline.q.val()) << 5;
            self.mem_len.next = (bit_cast::<72, 16>(self.cols.q.val()) << 2) + 4;
        }
        if self.state.q.val() == AttnState::AChk3 {
            self.mem_start.next = bit_cast::<72, 32>(self.kvp.q.val()) << 5;
            self.mem_len.next = bit_cast::<72, 32>(self.t.q.val());
        }
        if self.state.q.val() == AttnState::AChk3i {
            // the index entries of positions 0..r[len]
            self.mem_start.next = bit_cast::<72, 32>(self.kvi.q.val()) << 5;
            self.mem_len.next = bit_cast::<72, 32>(self.t.q.val()) << 2;
        }
        if self.state.q.val() == AttnState::KIdxChk {
            self.mem_start.next = (bit_cast::<72, 32>(self.kvi.q.val()) << 5) + (bit_cast::<72, 32>(self.pos.q.val()) << 2);
            self.mem_len.next = 4.into();
        }
        self.mem_bad.next = self.mem_start.val() + self.mem_len.val() > self.mem_bytes.val();
        self.mem_first.next = self.mem_bytes.val().get_bits::<64>(0);
        if self.mem_start.val() >= self.mem_bytes.val() {
            self.mem_first.next = self.mem_start.val().get_bits::<64>(0);
            if self.mem_start.val() > self.u64_max.val() {
                self.mem_first.next = self.u64_max.val().get_bits::<64>(0);
            }
        }

        self.chk_spm.next = false;
        self.chk_mem.next = false;

        // ---- the position: its presence byte, its history slot
        self.pres_need.next = self.t.q.val() >> 5;
        self.pres_stale.next =
            (self.kvp.q.val() != self.ones32.val()) & !(self.pres_valid.q.val() & (self.pres_line.q.val() == self.pres_need.val()));
        self.pres_sh.next = self.pres.q.val() >> (bit_cast::<9, 5>(self.t.q.val().get_bits::<5>(0)) << 3);
        self.pres_byte.next = self.pres_sh.val().get_bits::<8>(0);
        self.is_present.next = (self.kvp.q.val() == self.ones32.val()) | (self.pres_byte.val() != 0);
        self.slot_ok.next = (self.t.q.val() < self.hist_slots.val()) & self.width_ok.q.val();
        self.next_pos.next = false;

        // ---- route: a chunk is up to 64 lines of each row (the K buffer's size); the request `rq` is line
        // `ch_line + rq` of the execute row, then of the skip row (which starts `rl` lines later)
        self.rl.next = self.cols.q.val() >> 4;
        self.rl_rem.next = self.rl.val() - self.ch_line.q.val();
        self.nlc.next = 64.into();
        if self.rl_rem.val() < 64 {
            self.nlc.next = self.rl_rem.val().get_bits::<8>(0);
        }
        self.r_line.next = bit_cast::<64, 32>(self.kline.q.val()) + bit_cast::<64, 16>(self.ch_line.q.val()) + bit_cast::<64, 8>(self.rq.q.val());
        if self.rq.q.val() >= self.nlc.val() {
            self.r_line.next = bit_cast::<64, 32>(self.kline.q.val())
                + bit_cast::<64, 16>(self.rl.val())
                + bit_cast::<64, 16>(self.ch_line.q.val())
                + bit_cast::<64, 8>(self.rq.q.val() - self.nlc.val());
        }

        // ---- memory and scratchpad defaults: kvappend's row line, read the cycle before it is offered
        self.kv_line.next = self.krow.q.val() + bit_cast::<72, 8>(self.rq.q.val());
        if self.rq.q.val() >= self.nlh.val() {
            self.kv_line.next = self.vrow.q.val() + bit_cast::<72, 8>(self.rq.q.val() - self.nlh.val());
        }
        self.row_line.next = self.krow.q.val() + bit_cast::<72, 8>(self.li.q.val());
        self.s_raddr.next = self.ksrc.q.val() + (bit_cast::<20, 8>(self.li.q.val()) << 3);
        if self.second.q.val() {
            self.row_line.next = self.vrow.q.val() + bit_cast::<72, 8>(self.li.q.val());
            self.s_raddr.next = self.vsrc.q.val() + (bit_cast::<20, 8>(self.li.q.val()) << 3);
        }
        if self.state.q.val() == AttnState::RLoad {
            self.s_raddr.next = self.qsrc.q.val() + (bit_cast::<20, 16>(self.ch_line.q.val() + bit_cast::<16, 8>(self.li.q.val())) << 3);
        }
        if self.state.q.val() == AttnState::LoadQ {
            self.s_raddr.next = self.qsrc.q.val()
                + (bit_cast::<20, 32>(bit_cast::<16, 4>(self.qg.q.val()) * bit_cast::<16, 8>(self.nl.val()) + bit_cast::<32, 8>(self.ql.q.val())) << 3);
        }
        self.s_we.next = 0.into();
        self.s_waddr.next = 0.into();
        self.s_wdata.next = 0.into();
        self.m_req.next = false;
        self.m_write.next = (self.state.q.val() == AttnState::LineWrite) | (self.state.q.val() == AttnState::Mark);
        self.m_addr.next = self.row_line.val().get_bits::<64>(0);
        if (self.state.q.val() == AttnState::PresReq) | (self.fst.q.val() == FetchState::PresReq) {
            self.m_addr.next = bit_cast::<64, 32>(self.kvp.q.val()) + bit_cast::<64, 32>(self.pres_need.val());
        }
        if (self.state.q.val() == AttnState::IdxReq) | (self.state.q.val() == AttnState::KIdxReq) | (self.fst.q.val() == FetchState::IdxReq) {
            self.m_addr.next = bit_cast::<64, 32>(self.kvi.q.val()) + bit_cast::<64, 32>(self.idx_need.val());
        }
        if self.fst.q.val() == FetchState::Req {
            self.m_addr.next = self.kv_line.val().get_bits::<64>(0);
        }
        if self.state.q.val() == AttnState::RBias {
            // the biases follow the two rows: line w + cols / 8
            self.m_addr.next = bit_cast::<64, 32>(self.kline.q.val()) + bit_cast::<64, 16>(self.cols.q.val() >> 3);
        }
        if self.state.q.val() == AttnState::RLoad {
            self.m_addr.next = self.r_line.val();
        }
        self.m_wdata.next = self.s_rdata.val();
        self.m_wmask.next = self.ones32.val();

        // ---- RAM defaults
        self.qbuf0.write_enable.next = false;
        self.qbuf1.write_enable.next = false;
        self.qwa.next = (bit_cast::<16, 4>(self.qcap_p.q.val()) * bit_cast::<16, 8>(self.nl.val())) + bit_cast::<32, 8>(self.qcap_l.q.val());
        self.qbuf0.write_address.next = self.qwa.val().get_bits::<9>(0);
        self.qbuf1.write_address.next = self.qbuf0.write_address.val();
        self.qbuf0.write_data.next = self.s_rdata.val();
        self.qbuf1.write_data.next = self.s_rdata.val();
        self.qbuf0.read_address.next = self.qbase.q.val() + bit_cast::<9, 8>(self.beat.q.val() >> 1);
        self.qbuf1.read_address.next = self.qbase.q.val() + bit_cast::<9, 8>(self.beat.q.val() >> 1);
        // the rings: the score engine reads K at its position's lines, the update engine V at its; the
        // response side writes the arriving position's (K's lines, then V's)
        self.beat_l.next = self.beat.q.val() >> 1;
        self.kbuf.read_address.next = self.beat_l.val();
        if self.state.q.val() == AttnState::Run {
            self.kbuf.read_address.next = self.ks.q.val() + self.koff.q.val() + self.beat_l.val();
        }
        self.kbuf.write_enable.next = false;
        self.kbuf.write_address.next = self.kw.q.val() + self.rs.q.val();
        self.kbuf.write_data.next = self.m_rdata.val();
        self.vbuf.read_address.next = self.vu.q.val() + self.voff.q.val() + self.ui.q.val();
        self.vbuf.write_enable.next = false;
        self.rs_v.next = self.rs.q.val() - self.nlh.val();
        self.vbuf.write_address.next = self.kw.q.val() + self.rs_v.val();
        self.vbuf.write_data.next = self.m_rdata.val();
        self.hist_k.read_address.next = self.hbase.q.val() + bit_cast::<HIST_LINE_BITS, 8>(self.rq.q.val());
        self.hist_v.read_address.next = self.hbase.q.val() + bit_cast::<HIST_LINE_BITS, 8>(self.rq.q.val());
        self.hist_k.write_enable.next = false;
        self.hist_v.write_enable.next = false;
        self.hist_k.write_address.next = self.hb_r.q.val() + bit_cast::<HIST_LINE_BITS, 8>(self.rs.q.val());
        self.hist_v.write_address.next = self.hb_r.q.val() + bit_cast::<HIST_LINE_BITS, 8>(self.rs_v.val());
        self.hist_k.write_data.next = self.m_rdata.val();
        self.hist_v.write_data.next = self.m_rdata.val();
        // the outputs: chunk c (8 FP32) of the heads in line c / 2 of the even or the odd buffer; an update
        // reads and writes a pair a cycle, the outputs a chunk
        self.o_rd.next = self.obase.q.val() + bit_cast::<11, 8>(self.ui.q.val());
        if self.state.q.val() == AttnState::Out {
            self.o_rd.next = (self.obase.q.val() + bit_cast::<11, 8>(self.ui.q.val())) >> 1;
        }
        self.obuf_e.read_address.next = self.o_rd.val().get_bits::<10>(0);
        self.obuf_o.read_address.next = self.o_rd.val().get_bits::<10>(0);
        self.obuf_e.write_enable.next = false;
        self.obuf_e.write_address.next = 0.into();
        self.obuf_e.write_data.next = 0.into();
        self.obuf_o.write_enable.next = false;
        self.obuf_o.write_address.next = 0.into();
        self.obuf_o.write_data.next = 0.into();
        // (c, p) of head h at position t: cp line 16 (t mod 16) + h
        self.cp.read_address.next = (bit_cast::<8, 4>(self.tu.q.val().get_bits::<4>(0)) << 4) | bit_cast::<8, 4>(self.ug.q.val());
        self.cp.write_enable.next = false;
        self.cp.write_address.next = (bit_cast::<8, 4>(self.sm_pos.q.val().get_bits::<4>(0)) << 4) | bit_cast::<8, 4>(self.reduce.sm_out_row.val());
        self.cp.write_data.next = bit_cast::<64, 32>(self.reduce.sm_c.val()) | (bit_cast::<64, 32>(self.reduce.sm_p.val()) << 32);
        self.lreg.read_address.next = self.ug.q.val();
        self.lreg.write_enable.next = false;
        self.lreg.write_address.next = self.reduce.sm_out_row.val();
        self.lreg.write_data.next = self.reduce.sm_l.val();
        self.rreg.read_address.next = self.ug.q.val();
        self.rreg.write_enable.next = false;
        self.rw_head.next = self.rwait.q.val() - self.recip_wait.val();
        self.rreg.write_address.next = self.rw_head.val().get_bits::<4>(0);
        self.rreg.write_data.next = self.recip.y.val();
        self.recip.x.next = self.lreg.read_data.val();

        // ---- captures: the query lines (LoadQ), the history lines of an absent position (into the rings)
        self.qcap_v.d.next = false;
        if self.qcap_v.q.val() {
            if self.fst.q.val() == FetchState::Hist {
                self.kbuf.write_enable.next = true;
                self.kbuf.write_address.next = self.kw.q.val() + self.qcap_l.q.val();
                self.kbuf.write_data.next = self.hist_k.read_data.val();
                self.vbuf.write_enable.next = true;
                self.vbuf.write_address.next = self.kw.q.val() + self.qcap_l.q.val();
                self.vbuf.write_data.next = self.hist_v.read_data.val();
            } else {
                self.qbuf0.write_enable.next = !self.qcap_g.q.val().get_bit(0);
                self.qbuf1.write_enable.next = self.qcap_g.q.val().get_bit(0);
            }
        }

        // ---- route: the line of `x` read from the scratchpad last cycle
        self.xcap_v.d.next = false;
        if self.xcap_v.q.val() {
            self.kbuf.write_enable.next = true;
            self.kbuf.write_address.next = self.xcap_l.q.val();
            self.kbuf.write_data.next = self.s_rdata.val();
        }

        // ---- the router: a beat read from the buffers last cycle
        self.router.valid.next = self.sc_v.q.val();
        self.router.first.next = self.sc_beat.q.val() == 0;
        self.router.last.next = self.sc_beat.q.val() + 1 == self.nbeat.val();
        self.router.x.next = self.kbuf.read_data.val().get_bits::<128>(0);
        self.router.w0.next = self.qbuf0.read_data.val().get_bits::<128>(0);
        self.router.w1.next = self.qbuf1.read_data.val().get_bits::<128>(0);
        if self.sc_beat.q.val().get_bit(0) {
            self.router.x.next = self.kbuf.read_data.val().get_bits::<128>(128);
            self.router.w0.next = self.qbuf0.read_data.val().get_bits::<128>(128);
            self.router.w1.next = self.qbuf1.read_data.val().get_bits::<128>(128);
        }
        self.router.b0.next = 0.into();
        self.router.b1.next = 0.into();
        if self.is_route.q.val() {
            // a route's vector spans chunks: first and last beat as the chunking says, and its biases
            self.router.first.next = self.sc_first.q.val();
            self.router.last.next = self.sc_last.q.val();
            self.router.b0.next = self.rb0.q.val();
            self.router.b1.next = self.rb1.q.val();
        }
        self.sc_v.d.next = false;

        // ---- the scale lane: a score pass's two logits out of the router (the second one the next cycle),
        // tagged valid (15), the first position's (12), the head (3:0)
        self.slane.sel.next = true;
        self.slane.a.next = self.router.l0.val();
        self.slane.b.next = self.scale.q.val();
        self.slane.c.next = 0.into();
        self.slane.d.next = 0.into();
        self.slane.tag.next = 0.into();
        self.hold_v.d.next = false;
        if self.router.done.val() & !self.is_route.q.val() {
            self.slane.tag.next = bits::<TAG_BITS>(0x8000) | (bit_cast::<TAG_BITS, 4>(self.dpass.q.val()) << 1);
            if self.d_first.q.val() {
                self.slane.tag.next = bits::<TAG_BITS>(0x9000) | (bit_cast::<TAG_BITS, 4>(self.dpass.q.val()) << 1);
            }
            // the pass's second head, when the group has it
            if (bit_cast::<5, 4>(self.dpass.q.val()) << 1) + 1 < self.vh.val() {
                self.hold_v.d.next = true;
                self.hold_row.d.next = (self.dpass.q.val() << 1) + 1;
                self.hold_score.d.next = self.router.l1.val();
                self.hold_first.d.next = self.d_first.q.val();
            }
            self.dpass.d.next = self.dpass.q.val() + 1;
            if self.dpass.q.val() + 1 == self.npass.val() {
                self.dpass.d.next = 0.into();
                self.d_first.d.next = false;
            }
        }
        if self.hold_v.q.val() {
            self.slane.a.next = self.hold_score.q.val();
            self.slane.tag.next = bits::<TAG_BITS>(0x8000) | bit_cast::<TAG_BITS, 4>(self.hold_row.q.val());
            if self.hold_first.q.val() {
                self.slane.tag.next = bits::<TAG_BITS>(0x9000) | bit_cast::<TAG_BITS, 4>(self.hold_row.q.val());
            }
        }
        // scaled scores into the online softmax, one per cycle
        self.reduce.sm_valid.next = self.slane.tag_o.val().get_bit(15);
        self.reduce.sm_start.next = self.slane.tag_o.val().get_bit(12);
        self.reduce.sm_row.next = self.slane.tag_o.val().get_bits::<4>(0);
        self.reduce.score.next = self.slane.y.val();

        // ---- the lanes: an update chunk or an output chunk read last cycle
        self.lane_go.next = false;
        self.lane_sel.next = true;
        self.lane_a.next = 0.into();
        self.lane_b.next = self.scale.q.val();
        self.lane_c.next = 0.into();
        self.lane_d.next = 0.into();
        // tag: valid (15), kind (14:13: 0 update, 2 output), the output line (12:0)
        self.lane_tag.next = 0.into();
        if self.u_v.q.val() {
            self.lane_go.next = true;
            self.lane_tag.next = bits::<TAG_BITS>(0x8000) | bit_cast::<TAG_BITS, 11>(self.u_chunk.q.val());
            if self.u_upd.q.val() {
                // a pair of chunks: lanes 0-7 the even one (V's line's first 8 values), 8-15 the odd one
                self.lane_sel.next = false;
                self.lane_a.next = bit_cast::<512, 256>(self.obuf_e.read_data.val()) | (bit_cast::<512, 256>(self.obuf_o.read_data.val()) << 256);
                self.lane_b.next = self.cp.read_data.val().get_bits::<32>(0);
                self.lane_c.next = self.cp.read_data.val().get_bits::<32>(32);
                self.lane_d.next = self.vbuf.read_data.val();
                if self.u_zero.q.val() {
                    // the outputs start at 0
                    self.lane_a.next = 0.into();
                }
            } else {
                // one chunk, on lanes 0-7
                self.lane_a.next = bit_cast::<512, 256>(self.obuf_e.read_data.val());
                if self.u_half.q.val() {
                    self.lane_a.next = bit_cast::<512, 256>(self.obuf_o.read_data.val());
                }
                self.lane_b.next = self.rreg.read_data.val();
                self.lane_tag.next = bits::<TAG_BITS>(0xC000) | bit_cast::<TAG_BITS, 11>(self.u_chunk.q.val());
            }
        }
        self.lane[0].sel.next = self.lane_sel.val();
        self.lane[1].sel.next = self.lane_sel.val();
        self.lane[2].sel.next = self.lane_sel.val();
        self.lane[3].sel.next = self.lane_sel.val();
        self.lane[4].sel.next = self.lane_sel.val();
        self.lane[5].sel.next = self.lane_sel.val();
        self.lane[6].sel.next = self.lane_sel.val();
        self.lane[7].sel.next = self.lane_sel.val();
        self.lane[8].sel.next = self.lane_sel.val();
        self.lane[9].sel.next = self.lane_sel.val();
        self.lane[10].sel.next = self.lane_sel.val();
        self.lane[11].sel.next = self.lane_sel.val();
        self.lane[12].sel.next = self.lane_sel.val();
        self.lane[13].sel.next = self.lane_sel.val();
        self.lane[14].sel.next = self.lane_sel.val();
        self.lane[15].sel.next = self.lane_sel.val();
        self.lane[0].a.next = self.lane_a.val().get_bits::<32>(0);
        self.lane[1].a.next = self.lane_a.val().get_bits::<32>(32);
        self.lane[2].a.next = self.lane_a.val().get_bits::<32>(64);
        self.lane[3].a.next = self.lane_a.val().get_bits::<32>(96);
        self.lane[4].a.next = self.lane_a.val().get_bits::<32>(128);
        self.lane[5].a.next = self.lane_a.val().get_bits::<32>(160);
        self.lane[6].a.next = self.lane_a.val().get_bits::<32>(192);
        self.lane[7].a.next = self.lane_a.val().get_bits::<32>(224);
        self.lane[8].a.next = self.lane_a.val().get_bits::<32>(256);
        self.lane[9].a.next = self.lane_a.val().get_bits::<32>(288);
        self.lane[10].a.next = self.lane_a.val().get_bits::<32>(320);
        self.lane[11].a.next = self.lane_a.val().get_bits::<32>(352);
        self.lane[12].a.next = self.lane_a.val().get_bits::<32>(384);
        self.lane[13].a.next = self.lane_a.val().get_bits::<32>(416);
        self.lane[14].a.next = self.lane_a.val().get_bits::<32>(448);
        self.lane[15].a.next = self.lane_a.val().get_bits::<32>(480);
        self.lane[0].b.next = self.lane_b.val();
        self.lane[1].b.next = self.lane_b.val();
        self.lane[2].b.next = self.lane_b.val();
        self.lane[3].b.next = self.lane_b.val();
        self.lane[4].b.next = self.lane_b.val();
        self.lane[5].b.next = self.lane_b.val();
        self.lane[6].b.next = self.lane_b.val();
        self.lane[7].b.next = self.lane_b.val();
        self.lane[8].b.next = self.lane_b.val();
        self.lane[9].b.next = self.lane_b.val();
        self.lane[10].b.next = self.lane_b.val();
        self.lane[11].b.next = self.lane_b.val();
        self.lane[12].b.next = self.lane_b.val();
        self.lane[13].b.next = self.lane_b.val();
        self.lane[14].b.next = self.lane_b.val();
        self.lane[15].b.next = self.lane_b.val();
        self.lane[0].c.next = self.lane_c.val();
        self.lane[1].c.next = self.lane_c.val();
        self.lane[2].c.next = self.lane_c.val();
        self.lane[3].c.next = self.lane_c.val();
        self.lane[4].c.next = self.lane_c.val();
        self.lane[5].c.next = self.lane_c.val();
        self.lane[6].c.next = self.lane_c.val();
        self.lane[7].c.next = self.lane_c.val();
        self.lane[8].c.next = self.lane_c.val();
        self.lane[9].c.next = self.lane_c.val();
        self.lane[10].c.next = self.lane_c.val();
        self.lane[11].c.next = self.lane_c.val();
        self.lane[12].c.next = self.lane_c.val();
        self.lane[13].c.next = self.lane_c.val();
        self.lane[14].c.next = self.lane_c.val();
        self.lane[15].c.next = self.lane_c.val();
        self.lane[0].d.next = self.lane_d.val().get_bits::<16>(0);
        self.lane[1].d.next = self.lane_d.val().get_bits::<16>(16);
        self.lane[2].d.next = self.lane_d.val().get_bits::<16>(32);
        self.lane[3].d.next = self.lane_d.val().get_bits::<16>(48);
        self.lane[4].d.next = self.lane_d.val().get_bits::<16>(64);
        self.lane[5].d.next = self.lane_d.val().get_bits::<16>(80);
        self.lane[6].d.next = self.lane_d.val().get_bits::<16>(96);
        self.lane[7].d.next = self.lane_d.val().get_bits::<16>(112);
        self.lane[8].d.next = self.lane_d.val().get_bits::<16>(128);
        self.lane[9].d.next = self.lane_d.val().get_bits::<16>(144);
        self.lane[10].d.next = self.lane_d.val().get_bits::<16>(160);
        self.lane[11].d.next = self.lane_d.val().get_bits::<16>(176);
        self.lane[12].d.next = self.lane_d.val().get_bits::<16>(192);
        self.lane[13].d.next = self.lane_d.val().get_bits::<16>(208);
        self.lane[14].d.next = self.lane_d.val().get_bits::<16>(224);
        self.lane[15].d.next = self.lane_d.val().get_bits::<16>(240);
        self.lane[0].tag.next = 0.into();
        self.lane[1].tag.next = 0.into();
        self.lane[2].tag.next = 0.into();
        self.lane[3].tag.next = 0.into();
        self.lane[4].tag.next = 0.into();
        self.lane[5].tag.next = 0.into();
        self.lane[6].tag.next = 0.into();
        self.lane[7].tag.next = 0.into();
        self.lane[8].tag.next = 0.into();
        self.lane[9].tag.next = 0.into();
        self.lane[10].tag.next = 0.into();
        self.lane[11].tag.next = 0.into();
        self.lane[12].tag.next = 0.into();
        self.lane[13].tag.next = 0.into();
        self.lane[14].tag.next = 0.into();
        self.lane[15].tag.next = 0.into();
        if self.lane_go.val() {
            self.lane[0].tag.next = self.lane_tag.val();
        }

        // ---- the lanes' results (lane 0's tag says what they are)
        self.out_v.next = self.lane[0].tag_o.val().get_bit(15);
        self.out_kind.next = self.lane[0].tag_o.val().get_bits::<2>(13);
        self.out_addr.next = self.lane[0].tag_o.val().get_bits::<13>(0);
        self.ys.next = bit_cast::<256, 32>(self.lane[0].y.val())
            | (bit_cast::<256, 32>(self.lane[1].y.val()) << 32)
            | (bit_cast::<256, 32>(self.lane[2].y.val()) << 64)
            | (bit_cast::<256, 32>(self.lane[3].y.val()) << 96)
            | (bit_cast::<256, 32>(self.lane[4].y.val()) << 128)
            | (bit_cast::<256, 32>(self.lane[5].y.val()) << 160)
            | (bit_cast::<256, 32>(self.lane[6].y.val()) << 192)
            | (bit_cast::<256, 32>(self.lane[7].y.val()) << 224);
        self.ys_hi.next = bit_cast::<256, 32>(self.lane[8].y.val())
            | (bit_cast::<256, 32>(self.lane[9].y.val()) << 32)
            | (bit_cast::<256, 32>(self.lane[10].y.val()) << 64)
            | (bit_cast::<256, 32>(self.lane[11].y.val()) << 96)
            | (bit_cast::<256, 32>(self.lane[12].y.val()) << 128)
            | (bit_cast::<256, 32>(self.lane[13].y.val()) << 160)
            | (bit_cast::<256, 32>(self.lane[14].y.val()) << 192)
            | (bit_cast::<256, 32>(self.lane[15].y.val()) << 224);
        self.y16s.next = bit_cast::<128, 16>(self.lane[0].y16.val())
            | (bit_cast::<128, 16>(self.lane[1].y16.val()) << 16)
            | (bit_cast::<128, 16>(self.lane[2].y16.val()) << 32)
            | (bit_cast::<128, 16>(self.lane[3].y16.val()) << 48)
            | (bit_cast::<128, 16>(self.lane[4].y16.val()) << 64)
            | (bit_cast::<128, 16>(self.lane[5].y16.val()) << 80)
            | (bit_cast::<128, 16>(self.lane[6].y16.val()) << 96)
            | (bit_cast::<128, 16>(self.lane[7].y16.val()) << 112);
        if self.out_v.val() {
            if self.out_kind.val() == 0 {
                self.obuf_e.write_enable.next = true;
                self.obuf_e.write_address.next = self.out_addr.val().get_bits::<10>(0);
                self.obuf_e.write_data.next = self.ys.val();
                self.obuf_o.write_enable.next = true;
                self.obuf_o.write_address.next = self.out_addr.val().get_bits::<10>(0);
                self.obuf_o.write_data.next = self.ys_hi.val();
            }
            if self.out_kind.val() == 2 {
                // output line c of the heads: 8 FP16 at scratchpad word dst + 4c
                self.s_we.next = 15.into();
                self.s_waddr.next = self.dst.q.val() + (bit_cast::<20, 13>(self.out_addr.val()) << 2);
                self.s_wdata.next = bit_cast::<256, 128>(self.y16s.val());
            }
        }
        if self.reduce.sm_out.val() {
            // a position's softmax outputs come in head order; after the group's last, the position's (c, p) are
            // all in `cp`
            self.cp.write_enable.next = true;
            self.lreg.write_enable.next = true;
            self.smcnt.d.next = self.smcnt.q.val() + 1;
            if self.smcnt.q.val() + 1 == self.vh.val() {
                self.smcnt.d.next = 0.into();
                self.sm_pos.d.next = self.sm_pos.q.val() + 1;
            }
        }
        if self.lane_go.val() & !self.out_v.val() {
            self.lanes_busy.d.next = self.lanes_busy.q.val() + 1;
        }
        if !self.lane_go.val() & self.out_v.val() {
            self.lanes_busy.d.next = self.lanes_busy.q.val() - 1;
        }
        self.u_v.d.next = false;

        match self.state.q.val() {
            AttnState::Idle => {
                if self.iss_valid.val() & self.supported.val() & !self.trap_r.q.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.pos.d.next = self.iss_reg.val();
                    self.t.d.next = self.iss_reg.val();
                    self.ksrc.d.next = self.iss_word.val().get_bits::<20>(self.f_ksrc.val().index());
                    self.vsrc.d.next = self.iss_word.val().get_bits::<20>(self.f_vsrc.val().index());
                    self.kline.d.next = self.iss_word.val().get_bits::<32>(self.f_k.val().index());
                    self.vline.d.next = self.iss_word.val().get_bits::<32>(self.f_v.val().index());
                    self.hd.d.next = self.iss_aux.val().get_bits::<32>(self.csr_hd.val().index());
                    self.stride.d.next = self.iss_aux.val().get_bits::<32>(self.csr_stride.val().index());
                    self.scale.d.next = self.iss_aux.val().get_bits::<32>(self.csr_scale.val().index());
                    self.kvp.d.next = self.iss_aux.val().get_bits::<32>(self.csr_kvp.val().index());
                    self.kvi.d.next = self.iss_aux.val().get_bits::<32>(self.csr_kvi.val().index());
                    self.hcsr.d.next = self.iss_aux.val().get_bits::<32>(self.csr_heads.val().index());
                    self.idx_valid.d.next = false;
                    self.mval.d.next = true;
                    self.is_route.d.next = false;
                    self.kv_op.d.next = !self.is_route_op.val() & !self.is_attn.val();
                    self.state.d.next = AttnState::Check0;
                    if self.is_route_op.val() {
                        self.is_route.d.next = true;
                        self.pd.d.next = self.iss_word.val().get_bits::<3>(self.f_pd.val().index());
                        self.mark.d.next = self.iss_word.val().get_bit(self.f_mark.val().index());
                        self.qsrc.d.next = self.iss_word.val().get_bits::<20>(self.f_rsrc.val().index());
                        self.kline.d.next = self.iss_word.val().get_bits::<32>(self.f_rw.val().index());
                        self.cols.d.next = self.iss_word.val().get_bits::<16>(self.f_cols.val().index());
                        self.state.d.next = AttnState::RChk0;
                    }
                    if self.is_attn.val() {
                        // `t` holds r[len] for the checks; `pos` becomes len - 1 (the last position)
                        self.group.d.next = self.iss_word.val().get_bits::<4>(self.f_group.val().index());
                        self.kvh.d.next = self.iss_word.val().get_bits::<8>(self.f_kvh.val().index());
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.f_dst.val().index());
                        self.qsrc.d.next = self.iss_word.val().get_bits::<20>(self.f_q.val().index());
                        self.kline.d.next = self.iss_word.val().get_bits::<32>(self.f_ak.val().index());
                        self.vline.d.next = self.iss_word.val().get_bits::<32>(self.f_av.val().index());
                        self.pos.d.next = self.iss_reg.val() - 1;
                        self.state.d.next = AttnState::AChk0;
                    }
                }
            }
            // ---- kvappend
            AttnState::Check0 => {
                // the head_dim CSR: a multiple of 16 in 16..=1008
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.mark_byte.d.next = (bit_cast::<72, 32>(self.kvp.q.val()) << 5) + bit_cast::<72, 32>(self.pos.q.val());
                self.second.d.next = false;
                self.state.d.next = AttnState::Check1;
                // the KV heads (`attn_heads`, 0 counting as 1): `opu_hw::isa::kvappend_heads_fit`
                self.heads.d.next = self.heff.val().get_bits::<4>(0);
                if (self.hd.q.val() == 0) | (self.hd.q.val().get_bits::<4>(0) != 0) | (self.hd.q.val() > 1023) {
                    self.raise.next = true;
                }
                if self.kv_heads_bad.val() {
                    self.raise.next = true;
                }
            }
            AttnState::Check1 => {
                self.state.d.next = AttnState::Check2;
                self.chk_spm.next = true;
            }
            AttnState::Check2 => {
                self.state.d.next = AttnState::Check3;
                if self.indexed.val() {
                    self.state.d.next = AttnState::KIdxChk;
                }
                self.chk_spm.next = true;
            }
            AttnState::KIdxChk => {
                // the index entry of `P` (`t` = `P`), then its line
                self.state.d.next = AttnState::KIdxReq;
                self.chk_mem.next = true;
            }
            AttnState::KIdxReq => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.state.d.next = AttnState::KIdxWait;
                }
            }
            AttnState::KIdxWait => {
                // the line is taken below
                if self.m_resp.val() {
                    self.state.d.next = AttnState::KIdxRow;
                }
            }
            AttnState::KIdxRow => {
                // the rows at the entry's row (the multiplier takes the entry in this state)
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.rd_total.d.next = self.rd_total.q.val() + 4;
                self.progress.next = true;
                self.state.d.next = AttnState::Check3;
            }
            AttnState::Check3 => {
                self.state.d.next = AttnState::Check4;
                self.chk_mem.next = true;
            }
            AttnState::Check4 => {
                self.state.d.next = AttnState::Check5;
                self.chk_mem.next = true;
            }
            AttnState::Check5 => {
                self.state.d.next = AttnState::LineRead;
                self.li.d.next = 0.into();
                self.chk_mem.next = self.kvp.q.val() != self.ones32.val();
            }
            AttnState::LineRead => {
                self.state.d.next = AttnState::LineWrite;
            }
            AttnState::LineWrite => {
                // a line per cycle: with this one taken, the next one of the row is read now and offered
                // next cycle (a row starts with a LineRead)
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.progress.next = true;
                    self.li.d.next = self.li.q.val() + 1;
                    self.s_raddr.next = self.ksrc.q.val() + (bit_cast::<20, 8>(self.li.q.val() + 1) << 3);
                    if self.second.q.val() {
                        self.s_raddr.next = self.vsrc.q.val() + (bit_cast::<20, 8>(self.li.q.val() + 1) << 3);
                    }
                    if self.li.q.val() + 1 == self.nlh.val() {
                        self.li.d.next = 0.into();
                        self.second.d.next = true;
                        self.state.d.next = AttnState::LineRead;
                        self.wr_total.d.next = self.wr_total.q.val() + bit_cast::<64, 32>(self.arow_bytes.val());
                        if self.second.q.val() {
                            self.state.d.next = AttnState::Mark;
                            if self.kvp.q.val() == self.ones32.val() {
                                self.state.d.next = AttnState::Idle;
                            }
                        }
                    }
                }
            }
            AttnState::Mark => {
                // byte `P` of the presence bytes: 1 (kvappend), 0 or 1 (route)
                self.m_req.next = true;
                self.m_addr.next = self.mark_byte.q.val().get_bits::<64>(5);
                self.m_wmask.next = bits::<32>(1) << self.mark_byte.q.val().get_bits::<5>(0);
                self.m_wdata.next = bit_cast::<256, 1>(self.mval.q.val().into()) << (bit_cast::<8, 5>(self.mark_byte.q.val().get_bits::<5>(0)) << 3);
                if self.m_req_ready.val() {
                    self.progress.next = true;
                    self.wr_total.d.next = self.wr_total.q.val() + 1;
                    self.state.d.next = AttnState::Idle;
                }
            }
            // ---- route: checks in the functional simulator's order, then the biases, the chunks, the decision
            AttnState::RChk0 => {
                self.mark_byte.d.next = (bit_cast::<72, 32>(self.kvp.q.val()) << 5) + bit_cast::<72, 32>(self.pos.q.val());
                self.state.d.next = AttnState::RChk1;
                if (self.cols.q.val() == 0) | (self.cols.q.val().get_bits::<4>(0) != 0) {
                    self.raise.next = true;
                }
            }
            AttnState::RChk1 => {
                self.state.d.next = AttnState::RChk2;
                self.chk_spm.next = true;
            }
            AttnState::RChk2 => {
                self.state.d.next = AttnState::RChk3;
                self.chk_mem.next = true;
            }
            AttnState::RChk3 => {
                self.state.d.next = AttnState::RBias;
                self.chk_mem.next = self.mark.q.val() & (self.kvp.q.val() != self.ones32.val());
            }
            AttnState::RBias => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.state.d.next = AttnState::RBiasWait;
                }
            }
            AttnState::RBiasWait => {
                if self.m_resp.val() {
                    self.progress.next = true;
                    self.rb0.d.next = self.m_rdata.val().get_bits::<16>(0);
                    self.rb1.d.next = self.m_rdata.val().get_bits::<16>(16);
                    self.ch_line.d.next = 0.into();
                    self.rq.d.next = 0.into();
                    self.rs.d.next = 0.into();
                    self.li.d.next = 0.into();
                    self.state.d.next = AttnState::RLoad;
                }
            }
            AttnState::RLoad => {
                // the chunk's lines of both rows from memory (any number in flight) and of x from the
                // scratchpad (a line per cycle, captured the next)
                if self.rq.q.val() < (self.nlc.val() << 1) {
                    self.m_req.next = true;
                    if self.m_req_ready.val() {
                        self.rq.d.next = self.rq.q.val() + 1;
                    }
                }
                if self.li.q.val() < self.nlc.val() {
                    self.xcap_v.d.next = true;
                    self.xcap_l.d.next = self.li.q.val();
                    self.li.d.next = self.li.q.val() + 1;
                }
                if self.m_resp.val() {
                    self.progress.next = true;
                    self.rs.d.next = self.rs.q.val() + 1;
                    if self.rs.q.val() < self.nlc.val() {
                        self.qbuf0.write_enable.next = true;
                        self.qbuf0.write_address.next = bit_cast::<9, 8>(self.rs.q.val());
                        self.qbuf0.write_data.next = self.m_rdata.val();
                    } else {
                        self.qbuf1.write_enable.next = true;
                        self.qbuf1.write_address.next = bit_cast::<9, 8>(self.rs.q.val() - self.nlc.val());
                        self.qbuf1.write_data.next = self.m_rdata.val();
                    }
                }
                if (self.rs.q.val() + 1 == (self.nlc.val() << 1)) & self.m_resp.val() & (self.li.q.val() == self.nlc.val()) & !self.xcap_v.q.val() {
                    self.state.d.next = AttnState::RBeat;
                    self.beat.d.next = 0.into();
                    self.qbase.d.next = 0.into();
                }
                if (self.rs.q.val() == (self.nlc.val() << 1)) & (self.li.q.val() == self.nlc.val()) & !self.xcap_v.q.val() {
                    self.state.d.next = AttnState::RBeat;
                    self.beat.d.next = 0.into();
                    self.qbase.d.next = 0.into();
                }
            }
            AttnState::RBeat => {
                // beat `beat` (8 columns) of the chunk is read now and enters the router next cycle
                self.sc_v.d.next = true;
                self.sc_beat.d.next = self.beat.q.val();
                self.sc_first.d.next = (self.ch_line.q.val() == 0) & (self.beat.q.val() == 0);
                self.sc_last.d.next = (self.ch_line.q.val() + bit_cast::<16, 8>(self.nlc.val()) == self.rl.val())
                    & (self.beat.q.val() + 1 == (self.nlc.val() << 1));
                self.beat.d.next = self.beat.q.val() + 1;
                self.progress.next = true;
                if self.beat.q.val() + 1 == (self.nlc.val() << 1) {
                    self.ch_line.d.next = self.ch_line.q.val() + bit_cast::<16, 8>(self.nlc.val());
                    self.rq.d.next = 0.into();
                    self.rs.d.next = 0.into();
                    self.li.d.next = 0.into();
                    self.state.d.next = AttnState::RLoad;
                    if self.ch_line.q.val() + bit_cast::<16, 8>(self.nlc.val()) == self.rl.val() {
                        self.state.d.next = AttnState::RWait;
                    }
                }
            }
            AttnState::RWait => {
                if self.router.done.val() {
                    // p[pd] = skip; SKIPPED_BLOCKS; the two rows and the biases read; the presence byte
                    self.progress.next = true;
                    self.pwb_valid.next = true;
                    if self.router.skip.val() {
                        self.skipped_total.d.next = self.skipped_total.q.val() + 1;
                    }
                    self.rd_total.d.next = self.rd_total.q.val() + (bit_cast::<64, 16>(self.cols.q.val()) << 2) + 4;
                    self.mval.d.next = !self.router.skip.val();
                    self.state.d.next = AttnState::Idle;
                    if self.mark.q.val() & (self.kvp.q.val() != self.ones32.val()) {
                        self.state.d.next = AttnState::Mark;
                    }
                }
            }
            // ---- attn: checks
            AttnState::AChk0 => {
                self.state.d.next = AttnState::AChk1;
                if (self.hd.q.val() == 0)
                    | (self.hd.q.val().get_bits::<4>(0) != 0)
                    | (self.hd.q.val() > 1023)
                    | (self.group.q.val() == 0)
                    | (self.t.q.val() == 0)
                    | self.heads_bad.val()
                {
                    self.raise.next = true;
                }
                self.heads.d.next = self.heff.val().get_bits::<4>(0);
            }
            AttnState::AChk1 => {
                self.state.d.next = AttnState::AChk2;
                self.chk_spm.next = true;
            }
            AttnState::AChk2 => {
                self.state.d.next = AttnState::AChk3;
                self.chk_spm.next = true;
            }
            AttnState::AChk3 => {
                // the presence bytes; the last position's rows; whether every position has a history slot
                self.state.d.next = AttnState::AChk4;
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.width_ok.d.next = self.p_a.val() <= self.hist_width.val();
                self.chk_mem.next = self.kvp.q.val() != self.ones32.val();
                if self.indexed.val() {
                    self.state.d.next = AttnState::AChk3i;
                }
            }
            AttnState::AChk3i => {
                self.state.d.next = AttnState::AChk4;
                self.chk_mem.next = true;
            }
            AttnState::AChk4 => {
                // nothing can trap when the last position's rows are in memory (rows only move up with the
                // position; not so with a row index) and every absent position has its slot; else scan the
                // positions in order
                self.scan.d.next = true;
                if !self.indexed.val()
                    & !((self.krow.q.val() << 5) + bit_cast::<72, 32>(self.arow_bytes.val()) > self.mem_bytes.val())
                    & !((self.vrow.q.val() << 5) + bit_cast::<72, 32>(self.arow_bytes.val()) > self.mem_bytes.val())
                    & ((self.kvp.q.val() == self.ones32.val()) | ((self.t.q.val() <= self.hist_slots.val()) & self.width_ok.q.val()))
                {
                    self.scan.d.next = false;
                }
                self.pos.d.next = self.t.q.val();
                self.state.d.next = AttnState::AChk5;
            }
            AttnState::AChk5 => {
                // `pos` keeps r[len]; positions from 0
                self.t.d.next = 0.into();
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val());
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val());
                self.hbase.d.next = self.hb0.val().get_bits::<HIST_LINE_BITS>(0);
                self.pres_valid.d.next = false;
                self.idx_valid.d.next = false;
                self.second.d.next = false;
                self.qg.d.next = 0.into();
                self.ql.d.next = 0.into();
                self.qgg.d.next = 0.into();
                self.qpb.d.next = 0.into();
                // the engines start at position 0 with empty rings
                self.ring_used.d.next = 0.into();
                self.tr.d.next = 0.into();
                self.kw.d.next = 0.into();
                self.rs.d.next = 0.into();
                self.hb_r.d.next = self.hb0.val().get_bits::<HIST_LINE_BITS>(0);
                self.ts.d.next = 0.into();
                self.ks.d.next = 0.into();
                self.s_busy.d.next = false;
                self.s_gap.d.next = 255.into();
                self.dpass.d.next = 0.into();
                self.d_first.d.next = true;
                self.smcnt.d.next = 0.into();
                self.sm_pos.d.next = 0.into();
                self.tu.d.next = 0.into();
                self.vu.d.next = 0.into();
                self.u_busy.d.next = false;
                self.u_gap.d.next = 255.into();
                self.state.d.next = AttnState::LoadQ;
                if self.scan.q.val() {
                    self.state.d.next = AttnState::PosStart;
                }
            }
            AttnState::LoadQ => {
                // query line (qg, ql) is read now, captured next cycle
                // (query head qg is slot qgg of its KV head, whose passes start at qpb)
                self.qcap_v.d.next = true;
                self.qcap_g.d.next = self.qgg.q.val();
                self.qcap_p.d.next = self.qpb.q.val() + (self.qgg.q.val() >> 1);
                self.qcap_l.d.next = self.ql.q.val();
                self.ql.d.next = self.ql.q.val() + 1;
                self.progress.next = true;
                if self.ql.q.val() + 1 == self.nl.val() {
                    self.ql.d.next = 0.into();
                    self.qg.d.next = self.qg.q.val() + 1;
                    self.qgg.d.next = self.qgg.q.val() + 1;
                    if self.qgg.q.val() + 1 == self.group.q.val() {
                        self.qgg.d.next = 0.into();
                        self.qpb.d.next = self.qpb.q.val() + self.npp.val();
                    }
                    if bit_cast::<5, 4>(self.qg.q.val()) + 1 == self.qh.val() {
                        if self.kvp.q.val() != self.ones32.val() {
                            self.rd_total.d.next = self.rd_total.q.val() + bit_cast::<64, 32>(self.pos.q.val());
                        }
                        if self.indexed.val() {
                            // the index entries (and the presence bytes, when both are set)
                            self.rd_total.d.next = self.rd_total.q.val() + (bit_cast::<64, 32>(self.pos.q.val()) << 2);
                            if self.kvp.q.val() != self.ones32.val() {
                                self.rd_total.d.next = self.rd_total.q.val() + (bit_cast::<64, 32>(self.pos.q.val()) << 2) + bit_cast::<64, 32>(self.pos.q.val());
                            }
                        }
                        self.state.d.next = AttnState::Run;
                        self.fst.d.next = FetchState::Pos;
                    }
                }
            }
            // ---- attn: positions
            AttnState::PosStart => {
                self.state.d.next = AttnState::PosIdx;
                self.second.d.next = false;
                if self.pres_stale.val() {
                    self.state.d.next = AttnState::PresReq;
                }
            }
            AttnState::PresReq => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.state.d.next = AttnState::PresWait;
                }
            }
            AttnState::PresWait => {
                // the line is taken below
                if self.m_resp.val() {
                    self.state.d.next = AttnState::PosIdx;
                }
            }
            AttnState::PosIdx => {
                // a present position's rows from its index entry
                self.state.d.next = AttnState::PosGo;
                if self.indexed.val() & self.is_present.val() {
                    self.state.d.next = AttnState::IdxRow;
                    if self.idx_stale.val() {
                        self.state.d.next = AttnState::IdxReq;
                    }
                }
            }
            AttnState::IdxReq => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.state.d.next = AttnState::IdxWait;
                }
            }
            AttnState::IdxWait => {
                if self.m_resp.val() {
                    self.state.d.next = AttnState::IdxRow;
                }
            }
            AttnState::IdxRow => {
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.state.d.next = AttnState::PosGo;
            }
            AttnState::PosGo => {
                // the checks of position t: K's row then (second cycle) V's, or the history slot
                self.progress.next = true;
                if self.is_present.val() {
                    if self.mem_bad.val() {
                        self.raise.next = true;
                        self.raise_code.next = self.c_mem.val();
                        self.raise_info.next = self.mem_first.val();
                    } else if !self.second.q.val() {
                        self.second.d.next = true;
                    } else {
                        self.next_pos.next = true;
                    }
                } else if !self.slot_ok.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_hist.val();
                    self.raise_info.next = bit_cast::<64, 32>(self.t.q.val());
                } else {
                    self.next_pos.next = true;
                }
            }
            AttnState::Run => {
                // the engines below; the end once every position is updated and the lanes are drained
                if (self.tu.q.val() == self.pos.q.val()) & (self.lanes_busy.q.val() == 0) & !self.u_v.q.val() {
                    self.progress.next = true;
                    self.fst.d.next = FetchState::Idle;
                    self.state.d.next = AttnState::Recip;
                    self.ug.d.next = 0.into();
                    self.ugs.d.next = 0.into();
                    self.rwait.d.next = 0.into();
                }
            }
            AttnState::Recip => {
                // recip(l) of every (padded) head through the pipeline: head ug's l is read at cycle ug, its
                // recip written `recip_wait` cycles later (a padding head's too: never read)
                self.rwait.d.next = self.rwait.q.val() + 1;
                if bit_cast::<5, 4>(self.ug.q.val()) + 1 < self.vh.val() {
                    self.ug.d.next = self.ug.q.val() + 1;
                }
                self.progress.next = true;
                if self.rwait.q.val() >= self.recip_wait.val() {
                    self.rreg.write_enable.next = true;
                    if self.rw_head.val() + 1 == bit_cast::<8, 5>(self.vh.val()) {
                        self.state.d.next = AttnState::Out;
                        self.ug.d.next = 0.into();
                        self.ugs.d.next = 0.into();
                        self.ui.d.next = 0.into();
                        self.obase.d.next = 0.into();
                        self.rbase.d.next = 0.into();
                    }
                }
            }
            AttnState::Out => {
                // chunk `obase + ui` of the (padded) heads (ui's parity: its buffer), to the real head's output
                // chunk `rbase + ui`; a padding head is passed over in a cycle
                self.u_v.d.next = !self.ug_pad.val();
                self.u_upd.d.next = false;
                self.u_chunk.d.next = self.rbase.q.val() + bit_cast::<11, 8>(self.ui.q.val());
                self.u_half.d.next = self.ui.q.val().get_bit(0);
                self.ui.d.next = self.ui.q.val() + 1;
                self.progress.next = true;
                if (self.ui.q.val() + 1 == self.nchunk.val()) | self.ug_pad.val() {
                    self.ui.d.next = 0.into();
                    self.ug.d.next = self.ug.q.val() + 1;
                    self.ugs.d.next = self.ugs.q.val() + 1;
                    if bit_cast::<5, 4>(self.ugs.q.val()) + 1 == self.hpad.val() {
                        self.ugs.d.next = 0.into();
                    }
                    self.obase.d.next = self.obase.q.val() + bit_cast::<11, 8>(self.nchunk.val());
                    if !self.ug_pad.val() {
                        self.rbase.d.next = self.rbase.q.val() + bit_cast::<11, 8>(self.nchunk.val());
                    }
                    if bit_cast::<5, 4>(self.ug.q.val()) + 1 == self.vh.val() {
                        self.state.d.next = AttnState::OutWait;
                    }
                }
            }
            AttnState::OutWait => {
                if (self.lanes_busy.q.val() == 0) & !self.u_v.q.val() {
                    self.progress.next = true;
                    self.state.d.next = AttnState::Idle;
                }
            }
            AttnState::Drain => {
                if self.outstanding.q.val() == 0 {
                    self.state.d.next = AttnState::Idle;
                }
            }
        }

        // ---- the trap scan's next position; after the last, no position traps: run them (the position's
        // rows and slot move on with the fetch's, below)
        if self.next_pos.val() {
            self.second.d.next = false;
            self.state.d.next = AttnState::PosStart;
            if self.t.q.val() + 1 == self.pos.q.val() {
                self.scan.d.next = false;
                self.state.d.next = AttnState::AChk5;
            }
        }

        // ---- attn, run: the fetch engine (position `t`) brings each position's K and V lines into the rings
        // ahead of the score engine (position `ts`), which feeds the softmax ahead of the update engine
        // (position `tu`). The fetch waits for room in the rings (positions fetched and not yet updated),
        // the score engine for its position's lines and a free `(c, p)` slot (at most 15 positions ahead of
        // the update: a score takes about 120 cycles to its softmax outputs, 8 positions of SmolLM2's), the update engine for its
        // position's `(c, p)`.
        self.f_adv.next = false;
        self.r_adv.next = false;
        self.ring_add.next = false;
        self.ring_sub.next = false;
        match self.fst.q.val() {
            FetchState::Idle => {}
            FetchState::Done => {}
            FetchState::Pos => {
                // a new presence line is read with nothing else in flight, so that its response is known
                if self.t.q.val() == self.pos.q.val() {
                    self.fst.d.next = FetchState::Done;
                } else if self.pres_stale.val() {
                    if self.outstanding.q.val() == 0 {
                        self.fst.d.next = FetchState::PresReq;
                    }
                } else {
                    self.fst.d.next = FetchState::Idx;
                }
            }
            FetchState::PresReq => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.fst.d.next = FetchState::PresWait;
                }
            }
            FetchState::PresWait => {
                // the line is taken below
                if self.m_resp.val() {
                    self.fst.d.next = FetchState::Idx;
                }
            }
            FetchState::Idx => {
                // a present position's rows from its index entry (a new index line is read with nothing
                // else in flight, as a presence line is)
                self.fst.d.next = FetchState::Go;
                if self.indexed.val() & self.is_present.val() {
                    self.fst.d.next = FetchState::IdxRow;
                    if self.idx_stale.val() {
                        self.fst.d.next = FetchState::Idx;
                        if self.outstanding.q.val() == 0 {
                            self.fst.d.next = FetchState::IdxReq;
                        }
                    }
                }
            }
            FetchState::IdxReq => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.fst.d.next = FetchState::IdxWait;
                }
            }
            FetchState::IdxWait => {
                if self.m_resp.val() {
                    self.fst.d.next = FetchState::IdxRow;
                }
            }
            FetchState::IdxRow => {
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.fst.d.next = FetchState::Go;
            }
            FetchState::Go => {
                if self.ring_used.q.val() + bit_cast::<9, 8>(self.nlh.val()) <= self.ring_lines.val() {
                    self.rq.d.next = 0.into();
                    if self.is_present.val() {
                        self.rd_total.d.next = self.rd_total.q.val() + bit_cast::<64, 32>(self.arow_bytes.val() << 1);
                        self.misses_total.d.next = self.misses_total.q.val() + bit_cast::<32, 4>(self.heads.q.val());
                        self.ring_add.next = true;
                        self.fst.d.next = FetchState::Req;
                    } else if self.outstanding.q.val() == 0 {
                        // the slot's lines go into the rings in position order: after every line in flight
                        self.hits_total.d.next = self.hits_total.q.val() + bit_cast::<32, 4>(self.heads.q.val());
                        self.ring_add.next = true;
                        self.fst.d.next = FetchState::Hist;
                    }
                }
            }
            FetchState::Req => {
                // K's lines then V's, any number in flight
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.rq.d.next = self.rq.q.val() + 1;
                    if self.rq.q.val() + 1 == self.nfetch.val() {
                        self.f_adv.next = true;
                    }
                }
            }
            FetchState::Hist => {
                // the slot's K and V lines, read now and written into the rings next cycle
                if self.rq.q.val() < self.nlh.val() {
                    self.qcap_v.d.next = true;
                    self.qcap_l.d.next = self.rq.q.val();
                    self.rq.d.next = self.rq.q.val() + 1;
                }
                if self.qcap_v.q.val() & (self.qcap_l.q.val() + 1 == self.nlh.val()) {
                    self.progress.next = true;
                    self.f_adv.next = true;
                    self.r_adv.next = true;
                }
            }
        }
        if self.f_adv.val() {
            self.fst.d.next = FetchState::Pos;
        }
        // the next position of the scan or of the fetch: its rows, its history slot; and the presence line
        // either read
        if self.next_pos.val() | self.f_adv.val() {
            self.t.d.next = self.t.q.val() + 1;
            self.krow.d.next = self.krow.q.val() + bit_cast::<72, 32>(self.stride.q.val());
            self.vrow.d.next = self.vrow.q.val() + bit_cast::<72, 32>(self.stride.q.val());
            self.hbase.d.next = self.hbase.q.val() + self.hist_w16.val();
        }
        if ((self.state.q.val() == AttnState::PresWait) | (self.fst.q.val() == FetchState::PresWait)) & self.m_resp.val() {
            self.pres.d.next = self.m_rdata.val();
            self.pres_line.d.next = self.pres_need.val();
            self.pres_valid.d.next = true;
            self.progress.next = true;
        }
        if ((self.state.q.val() == AttnState::IdxWait) | (self.state.q.val() == AttnState::KIdxWait) | (self.fst.q.val() == FetchState::IdxWait))
            & self.m_resp.val()
        {
            self.idx.d.next = self.m_rdata.val();
            self.idx_line.d.next = self.idx_need.val();
            self.idx_valid.d.next = true;
            self.progress.next = true;
        }

        // the response side: lines arrive in request order, K's then V's of position `tr`, into the rings and,
        // when the position has a slot, into the history
        self.slot_r_ok.next = (self.tr.q.val() < self.hist_slots.val()) & self.width_ok.q.val();
        if (self.state.q.val() == AttnState::Run) & self.m_resp.val() & (self.fst.q.val() != FetchState::PresWait) & (self.fst.q.val() != FetchState::IdxWait) {
            self.progress.next = true;
            self.rs.d.next = self.rs.q.val() + 1;
            if self.rs.q.val() < self.nlh.val() {
                self.kbuf.write_enable.next = true;
                self.hist_k.write_enable.next = self.slot_r_ok.val();
            } else {
                self.vbuf.write_enable.next = true;
                self.hist_v.write_enable.next = self.slot_r_ok.val();
            }
            if self.rs.q.val() + 1 == self.nfetch.val() {
                self.rs.d.next = 0.into();
                self.r_adv.next = true;
            }
        }
        if self.r_adv.val() {
            self.tr.d.next = self.tr.q.val() + 1;
            self.kw.d.next = self.kw.q.val() + self.nlh.val();
            self.hb_r.d.next = self.hb_r.q.val() + self.hist_w16.val();
        }

        // the score engine: beat `beat` of pass `pass` (two heads) is read now and enters the router next
        // cycle; positions start at least `SOFTMAX_II` cycles apart (a softmax row's rate). `s_gap` is 1 at a
        // position's first beat, so at a cycle it is the spacing of a position whose first beat is next.
        if self.s_gap.q.val() != 255 {
            self.s_gap.d.next = self.s_gap.q.val() + 1;
        }
        self.s_go.next = (self.state.q.val() == AttnState::Run)
            & !self.s_busy.q.val()
            & (self.ts.q.val() != self.pos.q.val())
            & (self.tr.q.val() > self.ts.q.val())
            & (self.ts.q.val() < self.tu.q.val() + 16)
            & (self.s_gap.q.val() >= self.sm_ii.val());
        self.s_more.next = (self.ts.q.val() + 1 != self.pos.q.val())
            & (self.tr.q.val() > self.ts.q.val() + 1)
            & (self.ts.q.val() + 1 < self.tu.q.val() + 16)
            & (self.s_gap.q.val() >= self.sm_ii.val());
        if self.s_go.val() {
            self.s_busy.d.next = true;
            self.s_gap.d.next = 1.into();
            self.pass.d.next = 0.into();
            self.kpp.d.next = 0.into();
            self.koff.d.next = 0.into();
            self.beat.d.next = 0.into();
            self.qbase.d.next = 0.into();
        }
        if self.s_busy.q.val() {
            self.sc_v.d.next = true;
            self.sc_beat.d.next = self.beat.q.val();
            self.beat.d.next = self.beat.q.val() + 1;
            self.progress.next = true;
            if self.beat.q.val() + 1 == self.nbeat.val() {
                self.beat.d.next = 0.into();
                self.pass.d.next = self.pass.q.val() + 1;
                self.qbase.d.next = self.qbase.q.val() + bit_cast::<9, 8>(self.nl.val());
                // the next pass's KV head: its K lines follow the previous head's
                self.kpp.d.next = self.kpp.q.val() + 1;
                if self.kpp.q.val() + 1 == self.npp.val() {
                    self.kpp.d.next = 0.into();
                    self.koff.d.next = self.koff.q.val() + self.nl.val();
                }
                if self.pass.q.val() + 1 == self.npass.val() {
                    self.s_busy.d.next = self.s_more.val();
                    if self.s_more.val() {
                        self.s_gap.d.next = 1.into();
                    }
                    self.pass.d.next = 0.into();
                    self.kpp.d.next = 0.into();
                    self.koff.d.next = 0.into();
                    self.qbase.d.next = 0.into();
                    self.ts.d.next = self.ts.q.val() + 1;
                    self.ks.d.next = self.ks.q.val() + self.nlh.val();
                }
            }
        }

        // the update engine: chunk ui of head ug is read now and enters the lanes next cycle. The chunks
        // come in the same order at every position, so positions that start `u_seq` cycles apart read each
        // output chunk after the previous position wrote it.
        if self.u_gap.q.val() != 255 {
            self.u_gap.d.next = self.u_gap.q.val() + 1;
        }
        self.u_go.next = (self.state.q.val() == AttnState::Run)
            & !self.u_busy.q.val()
            & (self.tu.q.val() != self.pos.q.val())
            & (self.sm_pos.q.val() > self.tu.q.val())
            & (self.u_gap.q.val() >= self.u_seq.val());
        self.u_more.next = (self.tu.q.val() + 1 != self.pos.q.val())
            & (self.sm_pos.q.val() > self.tu.q.val() + 1)
            & (self.u_gap.q.val() >= self.u_seq.val());
        if self.u_go.val() {
            self.u_gap.d.next = 1.into();
            self.u_busy.d.next = true;
            self.ug.d.next = 0.into();
            self.ugs.d.next = 0.into();
            self.voff.d.next = 0.into();
            self.ui.d.next = 0.into();
            self.obase.d.next = 0.into();
        }
        if self.u_busy.q.val() {
            // pair ui (V's line ui) of head ug: output lines `obase + ui` of both buffers; a padding head is
            // passed over in a cycle
            self.u_v.d.next = !self.ug_pad.val();
            self.u_upd.d.next = true;
            self.u_zero.d.next = self.tu.q.val() == 0;
            self.u_chunk.d.next = self.obase.q.val() + bit_cast::<11, 8>(self.ui.q.val());
            self.ui.d.next = self.ui.q.val() + 1;
            self.progress.next = true;
            if (self.ui.q.val() + 1 == self.nl.val()) | self.ug_pad.val() {
                self.ui.d.next = 0.into();
                self.ug.d.next = self.ug.q.val() + 1;
                self.obase.d.next = self.obase.q.val() + bit_cast::<11, 8>(self.nl.val());
                // the next head's KV head: its V lines follow the previous head's
                self.ugs.d.next = self.ugs.q.val() + 1;
                if bit_cast::<5, 4>(self.ugs.q.val()) + 1 == self.hpad.val() {
                    self.ugs.d.next = 0.into();
                    self.voff.d.next = self.voff.q.val() + self.nl.val();
                }
                if bit_cast::<5, 4>(self.ug.q.val()) + 1 == self.vh.val() {
                    self.u_busy.d.next = self.u_more.val();
                    if self.u_more.val() {
                        self.u_gap.d.next = 1.into();
                    }
                    self.ug.d.next = 0.into();
                    self.ugs.d.next = 0.into();
                    self.voff.d.next = 0.into();
                    self.obase.d.next = 0.into();
                    self.tu.d.next = self.tu.q.val() + 1;
                    self.vu.d.next = self.vu.q.val() + self.nlh.val();
                    self.ring_sub.next = true;
                    self.macs_total.d.next = self.macs_total.q.val() + bit_cast::<64, 32>(self.heads_bytes.val());
                }
            }
        }
        self.ring_used.d.next = self.ring_used.q.val();
        if self.ring_add.val() & !self.ring_sub.val() {
            self.ring_used.d.next = self.ring_used.q.val() + bit_cast::<9, 8>(self.nlh.val());
        }
        if !self.ring_add.val() & self.ring_sub.val() {
            self.ring_used.d.next = self.ring_used.q.val() - bit_cast::<9, 8>(self.nlh.val());
        }

        if self.chk_spm.val() & (self.spm_start.val() + self.spm_len.val() > self.spm_bytes.val()) {
            self.raise.next = true;
            self.raise_code.next = self.c_spm.val();
            self.raise_info.next = self.spm_first.val();
        }
        if self.chk_mem.val() & self.mem_bad.val() {
            self.raise.next = true;
            self.raise_code.next = self.c_mem.val();
            self.raise_info.next = self.mem_first.val();
        }
        if self.raise.val() {
            self.trap_r.d.next = true;
            self.trap_code_r.d.next = self.raise_code.val();
            self.trap_info_r.d.next = self.raise_info.val();
            self.state.d.next = AttnState::Idle;
        }

        // ---- memory reads in flight (a flush waits for them)
        if self.m_req.val() & self.m_req_ready.val() & !self.m_write.val() & !self.m_resp.val() {
            self.outstanding.d.next = self.outstanding.q.val() + 1;
        }
        if !(self.m_req.val() & self.m_req_ready.val() & !self.m_write.val()) & self.m_resp.val() {
            self.outstanding.d.next = self.outstanding.q.val() - 1;
        }
        if self.flush.val() | self.reset.val() {
            self.state.d.next = AttnState::Drain;
            self.trap_r.d.next = false;
            self.u_v.d.next = false;
            self.sc_v.d.next = false;
            self.hold_v.d.next = false;
            self.fst.d.next = FetchState::Idle;
            self.s_busy.d.next = false;
            self.u_busy.d.next = false;
        }
        if self.reset.val() {
            self.state.d.next = AttnState::Idle;
            self.outstanding.d.next = 0.into();
            self.rd_total.d.next = 0.into();
            self.wr_total.d.next = 0.into();
            self.macs_total.d.next = 0.into();
            self.hits_total.d.next = 0.into();
            self.skipped_total.d.next = 0.into();
            self.misses_total.d.next = 0.into();
        }
    }
}

/// What the attention unit needs of a config: a KV history buffer of at most `2^HIST_LINE_BITS` lines.
pub fn check_config(config: &OverlayConfig) -> Result<(), crate::emit::EmitError> {
    let lines = u64::from(config.kv_history_slots) * u64::from(config.kv_history_width / 16);
    if lines > 1 << HIST_LINE_BITS {
        return Err(crate::emit::EmitError::Unsupported {
            unit: "attention".into(),
            config: config.name.clone(),
            what: format!(
                "the KV history buffer has {lines} lines of 16 FP16 (kv_history_slots x kv_history_width / 16); the unit addresses at most {}",
                1u64 << HIST_LINE_BITS
            ),
        });
    }
    Ok(())
}

/// An [`AttentionUnit`] of `config` ready to simulate or emit.
pub fn attn_top(config: &OverlayConfig) -> Result<AttentionUnit, crate::emit::EmitError> {
    check_config(config)?;
    Ok(connect_top!(
        AttentionUnit::new(config),
        clock,
        reset,
        flush,
        iss_valid,
        iss_word,
        iss_pc,
        iss_reg,
        iss_aux,
        m_req_ready,
        m_resp,
        m_rdata,
        s_rdata
    ))
}

//! The vector unit: `vop`, `rmsnorm`, `rope` and `argmax` of docs/isa.md, and the reduction file `RED`
//! (rust-hdl HDL for the sequencing, the datapath in [`dp`]).
//!
//! 1. **Check**, in the functional simulator's order: operand rules, then the overlap of each source with
//!    the destination (exactly the same span, or none of it), then the destination's and the sources'
//!    scratchpad spans. A violation traps with the functional simulator's code and ERROR_INFO.
//! 2. **Chunks**: a row is cut into chunks of [`VEC_LANES`] lanes (8 elements; RoPE: 8 pairs of a head). A
//!    chunk's operand lines are read from the scratchpad one per cycle (`a`, `b`, the gains or the two table
//!    lines, and for the last chunk of an FP16 row of odd length the old last word, whose upper half is the
//!    row's padding and is written back as it was); two edges after its last read the chunk enters the
//!    datapath, while the next chunk's reads go on. A chunk takes as many cycles as it has reads, and at
//!    least one. A line holds 16 FP16 values: an FP16 source of `vop` or `rmsnorm` is read by the even chunk
//!    of each pair and the odd one takes the line's upper half (`ha`, `hb`); with two FP16 sources the odd
//!    chunk reads the next pair's `a` line ahead, so every chunk takes one read. RoPE keeps
//!    the table lines of a row's first head in a small memory (`tcache`, [`ROPE_TABLE_CHUNKS`] chunks) and
//!    gives them to the row's other heads, whose chunks then read only their own line (`neox`: two), where
//!    a head has 2 to `ROPE_TABLE_CHUNKS` chunks.
//! 3. **Store**: [`dp::dp_latency`] edges later the chunk's results come out and are written through the
//!    write port (RoPE `neox`: its two halves in two cycles); a `vop` with `red` adds the squares of the
//!    stored values onto the row's accumulator and writes `RED[j]` at the end of the row.
//! 4. `rmsnorm` first turns `RED[j]` into its inverse root on a lane (`vector::rms_inv`: the accumulator
//!    rounded to FP32 by the output stage `round`, `rsqrt(s * recip(n) + eps)`), then streams the row with it.
//!    `argmax` keeps the best (value, index) of the chunks and writes the index to the scratchpad and, through
//!    the core's write-back port, to `r[rd]`.
//!
//! One instruction at a time: the unit is ready for the next when every write of this one is done, so a
//! later instruction (of any unit) sees its results. `RED` is the top's [`crate::red::RedFile`], reached
//! through the `red_*` port.

pub mod dp;

use crate::ctrl::{constant as k, decode};
use crate::lane::ACC_BITS;
use crate::red::RED_BITS;
use crate::round::Round;

// rmsnorm waits for the rounding of `RED[j]` in states RedRound0..4: a cycle for the read, four stages.
const _: () = assert!(crate::round::ROUND_LATENCY == 4);
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use dp::VectorDatapath;
pub use dp::VEC_LANES;
use opu_hw::config::ROPE_TABLE_CHUNKS;
use opu_hw::isa::NUM_RED;
use opu_hw::numerics::vector::{LaneOp, VecOp};
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

// (`tcache` has 2^4 entries and `reuse` compares `head_dim` with 16 x 16)
const _: () = assert!(ROPE_TABLE_CHUNKS == 16);

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum VecState {
    Idle,
    /// Operand rules; row lengths.
    Check0,
    /// Pitches.
    Check1,
    /// Span lengths: destination, first source, second source.
    Check2,
    Check3,
    Check4,
    /// Overlaps with the destination.
    Check5,
    /// Scratchpad spans: destination, first source, second source.
    Check6,
    Check7,
    Check8,
    /// Start of a row.
    Row,
    /// rmsnorm: `RED[j]` read, rounded to FP32, its inverse root computed on a lane.
    RedRead,
    RedRound0,
    RedRound1,
    RedRound2,
    RedRound3,
    RedRound4,
    InvIssue,
    InvWait,
    /// The chunks' operand reads.
    Chunks,
    /// Every chunk issued; the last results are being stored.
    Finish,
    /// Flushed: the chunks in the datapath run out unstored.
    Drain,
}

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum VecKind {
    Vop,
    Rms,
    Rope,
    Argmax,
}

#[derive(LogicBlock)]
pub struct VectorUnit {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,

    // ---- issue (from the core, through the unit's queue); `iss_aux` bits 0..32: the `vscale` CSR
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub iss_aux: Signal<In, Bits<128>>,
    pub idle: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,
    /// `argmax`'s register write-back.
    pub rwb_valid: Signal<Out, Bit>,
    pub rwb_idx: Signal<Out, Bits<4>>,
    pub rwb_data: Signal<Out, Bits<32>>,

    // ---- the scratchpad's line port (`spm::Scratchpad`)
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    // ---- the reduction file (`red::RedFile`): read data the cycle after the address
    pub red_raddr: Signal<Out, Bits<6>>,
    pub red_rdata: Signal<In, Bits<RED_BITS>>,
    pub red_we: Signal<Out, Bit>,
    pub red_waddr: Signal<Out, Bits<6>>,
    pub red_wdata: Signal<Out, Bits<RED_BITS>>,

    dp: VectorDatapath,
    round: Round,

    // ---- the instruction
    state: DFF<VecState>,
    kind: DFF<VecKind>,
    pc: DFF<Bits<32>>,
    op: DFF<Bits<4>>,
    /// Element types (1: FP32) of the destination, the first source, the second source.
    td: DFF<Bit>,
    t1: DFF<Bit>,
    t2: DFF<Bit>,
    redm: DFF<Bits<2>>,
    rows: DFF<Bits<7>>,
    dst: DFF<Bits<20>>,
    s1: DFF<Bits<20>>,
    s2: DFF<Bits<20>>,
    n: DFF<Bits<24>>,
    eps: DFF<Bits<32>>,
    neox: DFF<Bit>,
    heads: DFF<Bits<8>>,
    hd: DFF<Bits<10>>,
    rd: DFF<Bits<4>>,
    vscale: DFF<Bits<32>>,
    /// The second source is read (`vop` add/mul/swiglu, the gains, the table).
    use2: DFF<Bit>,
    /// Elements of a row (`rope`: heads x head_dim); row bytes, pitches and span lengths in bytes.
    elems: DFF<Bits<32>>,
    len_d: DFF<Bits<32>>,
    len_1: DFF<Bits<32>>,
    len_2: DFF<Bits<32>>,
    pitch_d: DFF<Bits<32>>,
    pitch_1: DFF<Bits<32>>,
    pitch_2: DFF<Bits<32>>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,

    // ---- chunks (read side)
    j: DFF<Bits<7>>,
    h: DFF<Bits<8>>,
    e: DFF<Bits<24>>,
    seglen: DFF<Bits<24>>,
    /// Word addresses: row bases and chunk pointers of the destination and the two sources.
    rb_d: DFF<Bits<20>>,
    rb_1: DFF<Bits<20>>,
    rb_2: DFF<Bits<20>>,
    p_d: DFF<Bits<20>>,
    p_1: DFF<Bits<20>>,
    p_2: DFF<Bits<20>>,
    /// Words per chunk, per row and (neox) from a pair's first element to its second.
    st_d: DFF<Bits<20>>,
    st_1: DFF<Bits<20>>,
    st_2: DFF<Bits<20>>,
    pw_d: DFF<Bits<20>>,
    pw_1: DFF<Bits<20>>,
    pw_2: DFF<Bits<20>>,
    x1off: DFF<Bits<20>>,
    /// Reads of the current chunk still to do (bit per slot: a, b, c, d, old word).
    rem: DFF<Bits<5>>,
    /// The read of the previous cycle and its slot.
    cap_v: DFF<Bit>,
    cap_s: DFF<Bits<3>>,
    sa: DFF<Bits<256>>,
    sb: DFF<Bits<256>>,
    sc: DFF<Bits<256>>,
    sd: DFF<Bits<256>>,
    old_hi: DFF<Bits<16>>,
    /// The upper halves of the FP16 operand lines `sa` and `sb` of the last chunk that entered the datapath
    /// from its own lines: the operands of the odd chunk after it (a line holds 16 FP16 values, two chunks).
    ha: DFF<Bits<128>>,
    hb: DFF<Bits<128>>,
    /// RoPE: the two table lines of each chunk of a head (`head_dim` up to `ROPE_TABLE_CHUNKS` x 16), kept
    /// from the row's first head for the others, which then read only their pairs: a chunk of a later head
    /// takes one read (`normal`) or two (`neox`) instead of three or four. Indexed by the chunk in its head.
    tcache: RAM<Bits<512>, 4>,
    /// The read of the previous cycle was a chunk's last and its table lines come from `tcache`; the
    /// chunk index of that read.
    cap_t: DFF<Bit>,
    cap_c: DFF<Bits<4>>,
    /// A chunk whose reads are all out (A), whose data is all in (B: it enters the datapath).
    ma_v: DFF<Bit>,
    ma_meta: DFF<Bits<64>>,
    ma_n: DFF<Bits<4>>,
    mb_v: DFF<Bit>,
    mb_meta: DFF<Bits<64>>,
    mb_n: DFF<Bits<4>>,
    inv: DFF<Bits<32>>,
    inv_ready: DFF<Bit>,
    inflight: DFF<Bits<8>>,

    // ---- store side
    w2_v: DFF<Bit>,
    w2_addr: DFF<Bits<20>>,
    w2_data: DFF<Bits<128>>,
    jo: DFF<Bits<6>>,
    ofirst: DFF<Bit>,
    acc: DFF<Bits<ACC_BITS>>,
    acc_nf: DFF<Bit>,
    am_f: DFF<Bit>,
    am_k: DFF<Bits<32>>,
    am_i: DFF<Bits<24>>,
    oe: DFF<Bits<24>>,

    // ---- constants
    spm_bytes: Constant<Bits<32>>,
    num_red: Constant<Bits<7>>,
    op_vop: Constant<Bits<8>>,
    op_rms: Constant<Bits<8>>,
    op_rope: Constant<Bits<8>>,
    op_argmax: Constant<Bits<8>>,
    lop_rmsnorm: Constant<Bits<4>>,
    lop_rope: Constant<Bits<4>>,
    lop_rmsinv: Constant<Bits<4>>,
    lop_scale: Constant<Bits<4>>,
    vop_add: Constant<Bits<4>>,
    vop_mul: Constant<Bits<4>>,
    vop_swiglu: Constant<Bits<4>>,
    /// Field offsets.
    v_op: Constant<Bits<8>>,
    v_dd: Constant<Bits<8>>,
    v_da: Constant<Bits<8>>,
    v_db: Constant<Bits<8>>,
    v_red: Constant<Bits<8>>,
    v_rows: Constant<Bits<8>>,
    v_dst: Constant<Bits<8>>,
    v_a: Constant<Bits<8>>,
    v_b: Constant<Bits<8>>,
    v_n: Constant<Bits<8>>,
    r_dd: Constant<Bits<8>>,
    r_ds: Constant<Bits<8>>,
    r_rows: Constant<Bits<8>>,
    r_dst: Constant<Bits<8>>,
    r_src: Constant<Bits<8>>,
    r_g: Constant<Bits<8>>,
    r_n: Constant<Bits<8>>,
    r_eps: Constant<Bits<8>>,
    p_style: Constant<Bits<8>>,
    p_heads: Constant<Bits<8>>,
    p_hd: Constant<Bits<8>>,
    p_rows: Constant<Bits<8>>,
    p_dst: Constant<Bits<8>>,
    p_src: Constant<Bits<8>>,
    p_table: Constant<Bits<8>>,
    a_dt: Constant<Bits<8>>,
    a_rd: Constant<Bits<8>>,
    a_dst: Constant<Bits<8>>,
    a_src: Constant<Bits<8>>,
    a_n: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    supported: Signal<Local, Bit>,
    raise: Signal<Local, Bit>,
    raise_code: Signal<Local, Bits<4>>,
    raise_info: Signal<Local, Bits<64>>,
    /// The state checks its scratchpad span (the trap is raised below the states).
    chk_spm: Signal<Local, Bit>,
    rows1: Signal<Local, Bits<16>>,
    pitch_m: Signal<Local, Bits<32>>,
    plen: Signal<Local, Bits<32>>,
    st_d_b: Signal<Local, Bits<32>>,
    st_1_b: Signal<Local, Bits<32>>,
    st_2_b: Signal<Local, Bits<32>>,
    end_d: Signal<Local, Bits<32>>,
    end_1: Signal<Local, Bits<32>>,
    end_2: Signal<Local, Bits<32>>,
    span_start: Signal<Local, Bits<32>>,
    span_end: Signal<Local, Bits<32>>,
    spm_first: Signal<Local, Bits<64>>,
    rem_el: Signal<Local, Bits<24>>,
    nv: Signal<Local, Bits<4>>,
    seg_end: Signal<Local, Bit>,
    last_head: Signal<Local, Bit>,
    row_end: Signal<Local, Bit>,
    all_end: Signal<Local, Bit>,
    halflast: Signal<Local, Bit>,
    need: Signal<Local, Bits<5>>,
    /// `a` (`rmsnorm`: the source) and `b` are FP16 lines shared by a chunk pair: a `vop` or `rmsnorm`
    /// operand of FP16 is read once per two chunks; with both shared (`pf`), the odd chunk reads the next
    /// pair's `a` line ahead, so that a chunk of `add`, `mul` or `swiglu` takes one read, not two.
    sh1: Signal<Local, Bit>,
    sh2: Signal<Local, Bit>,
    pf: Signal<Local, Bit>,
    /// The chunk at the read pointers is the odd one of its pair (elements 8..16 of the pair's lines).
    hi: Signal<Local, Bit>,
    /// The chunk at the read pointers is a RoPE chunk of a head after the row's first, whose table lines
    /// `tcache` holds; its index in the head.
    reuse: Signal<Local, Bit>,
    chunk_i: Signal<Local, Bits<4>>,
    cur: Signal<Local, Bits<5>>,
    slot: Signal<Local, Bits<3>>,
    rest: Signal<Local, Bits<5>>,
    reading: Signal<Local, Bit>,
    issue_op: Signal<Local, Bits<4>>,
    o_meta: Signal<Local, Bits<64>>,
    o_n: Signal<Local, Bits<4>>,
    o_halflast: Signal<Local, Bit>,
    o_row_end: Signal<Local, Bit>,
    o_all_end: Signal<Local, Bit>,
    o_inv: Signal<Local, Bit>,
    o_sh: Signal<Local, Bits<9>>,
    h16: Signal<Local, Bits<256>>,
    acc_in: Signal<Local, Bits<ACC_BITS>>,
    acc_in_nf: Signal<Local, Bit>,
    acc_new: Signal<Local, Bits<ACC_BITS>>,
    acc_new_nf: Signal<Local, Bit>,
    red_entry: Signal<Local, Bits<RED_BITS>>,
    am_take: Signal<Local, Bit>,
    am_best: Signal<Local, Bits<24>>,
    jo_next: Signal<Local, Bits<6>>,
    killed: Signal<Local, Bit>,
}

impl VectorUnit {
    pub fn new(config: &OverlayConfig, dp_cores: String) -> VectorUnit {
        let f = |m: &str, n: &str| k::<8>(u64::from(decode::field(m, n).offset));
        let o = |m: &str| k::<8>(u64::from(decode::opcode(m)));
        VectorUnit {
            clock: Default::default(),
            reset: Default::default(),
            flush: Default::default(),
            iss_valid: Default::default(),
            iss_ready: Default::default(),
            iss_word: Default::default(),
            iss_pc: Default::default(),
            iss_aux: Default::default(),
            idle: Default::default(),
            progress: Default::default(),
            trap_valid: Default::default(),
            trap_code: Default::default(),
            trap_pc: Default::default(),
            trap_info: Default::default(),
            rwb_valid: Default::default(),
            rwb_idx: Default::default(),
            rwb_data: Default::default(),
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            red_raddr: Default::default(),
            red_rdata: Default::default(),
            red_we: Default::default(),
            red_waddr: Default::default(),
            red_wdata: Default::default(),
            dp: VectorDatapath::new(dp_cores),
            round: Default::default(),
            state: Default::default(),
            kind: Default::default(),
            pc: Default::default(),
            op: Default::default(),
            td: Default::default(),
            t1: Default::default(),
            t2: Default::default(),
            redm: Default::default(),
            rows: Default::default(),
            dst: Default::default(),
            s1: Default::default(),
            s2: Default::default(),
            n: Default::default(),
            eps: Default::default(),
            neox: Default::default(),
            heads: Default::default(),
            hd: Default::default(),
            rd: Default::default(),
            vscale: Default::default(),
            use2: Default::default(),
            elems: Default::default(),
            len_d: Default::default(),
            len_1: Default::default(),
            len_2: Default::default(),
            pitch_d: Default::default(),
            pitch_1: Default::default(),
            pitch_2: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            j: Default::default(),
            h: Default::default(),
            e: Default::default(),
            seglen: Default::default(),
            rb_d: Default::default(),
            rb_1: Default::default(),
            rb_2: Default::default(),
            p_d: Default::default(),
            p_1: Default::default(),
            p_2: Default::default(),
            st_d: Default::default(),
            st_1: Default::default(),
            st_2: Default::default(),
            pw_d: Default::default(),
            pw_1: Default::default(),
            pw_2: Default::default(),
            x1off: Default::default(),
            rem: Default::default(),
            cap_v: Default::default(),
            cap_s: Default::default(),
            sa: Default::default(),
            sb: Default::default(),
            sc: Default::default(),
            sd: Default::default(),
            tcache: Default::default(),
            cap_t: Default::default(),
            cap_c: Default::default(),
            reuse: Default::default(),
            chunk_i: Default::default(),
            old_hi: Default::default(),
            ha: Default::default(),
            hb: Default::default(),
            ma_v: Default::default(),
            ma_meta: Default::default(),
            ma_n: Default::default(),
            mb_v: Default::default(),
            mb_meta: Default::default(),
            mb_n: Default::default(),
            inv: Default::default(),
            inv_ready: Default::default(),
            inflight: Default::default(),
            w2_v: Default::default(),
            w2_addr: Default::default(),
            w2_data: Default::default(),
            jo: Default::default(),
            ofirst: Default::default(),
            acc: Default::default(),
            acc_nf: Default::default(),
            am_f: Default::default(),
            am_k: Default::default(),
            am_i: Default::default(),
            oe: Default::default(),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            num_red: k(NUM_RED as u64),
            op_vop: o("vop"),
            op_rms: o("rmsnorm"),
            op_rope: o("rope"),
            op_argmax: o("argmax"),
            lop_rmsnorm: k(u64::from(LaneOp::RmsNorm.code())),
            lop_rope: k(u64::from(LaneOp::Rope.code())),
            lop_rmsinv: k(u64::from(LaneOp::RmsInv.code())),
            lop_scale: k(u64::from(LaneOp::Scale.code())),
            vop_add: k(u64::from(VecOp::Add.code())),
            vop_mul: k(u64::from(VecOp::Mul.code())),
            vop_swiglu: k(u64::from(VecOp::SwiGlu.code())),
            v_op: f("vop", "op"),
            v_dd: f("vop", "dd"),
            v_da: f("vop", "da"),
            v_db: f("vop", "db"),
            v_red: f("vop", "red"),
            v_rows: f("vop", "rows"),
            v_dst: f("vop", "dst"),
            v_a: f("vop", "a"),
            v_b: f("vop", "b"),
            v_n: f("vop", "n"),
            r_dd: f("rmsnorm", "dd"),
            r_ds: f("rmsnorm", "ds"),
            r_rows: f("rmsnorm", "rows"),
            r_dst: f("rmsnorm", "dst"),
            r_src: f("rmsnorm", "src"),
            r_g: f("rmsnorm", "g"),
            r_n: f("rmsnorm", "n"),
            r_eps: f("rmsnorm", "eps"),
            p_style: f("rope", "style"),
            p_heads: f("rope", "heads"),
            p_hd: f("rope", "head_dim"),
            p_rows: f("rope", "rows"),
            p_dst: f("rope", "dst"),
            p_src: f("rope", "src"),
            p_table: f("rope", "table"),
            a_dt: f("argmax", "dt"),
            a_rd: f("argmax", "rd"),
            a_dst: f("argmax", "dst"),
            a_src: f("argmax", "src"),
            a_n: f("argmax", "n"),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            opc: Default::default(),
            supported: Default::default(),
            raise: Default::default(),
            raise_code: Default::default(),
            raise_info: Default::default(),
            chk_spm: Default::default(),
            rows1: Default::default(),
            pitch_m: Default::default(),
            plen: Default::default(),
            st_d_b: Default::default(),
            st_1_b: Default::default(),
            st_2_b: Default::default(),
            end_d: Default::default(),
            end_1: Default::default(),
            end_2: Default::default(),
            span_start: Default::default(),
            span_end: Default::default(),
            spm_first: Default::default(),
            rem_el: Default::default(),
            nv: Default::default(),
            seg_end: Default::default(),
            last_head: Default::default(),
            row_end: Default::default(),
            all_end: Default::default(),
            halflast: Default::default(),
            need: Default::default(),
            sh1: Default::default(),
            sh2: Default::default(),
            pf: Default::default(),
            hi: Default::default(),
            cur: Default::default(),
            slot: Default::default(),
            rest: Default::default(),
            reading: Default::default(),
            issue_op: Default::default(),
            o_meta: Default::default(),
            o_n: Default::default(),
            o_halflast: Default::default(),
            o_row_end: Default::default(),
            o_all_end: Default::default(),
            o_inv: Default::default(),
            o_sh: Default::default(),
            h16: Default::default(),
            acc_in: Default::default(),
            acc_in_nf: Default::default(),
            acc_new: Default::default(),
            acc_new_nf: Default::default(),
            red_entry: Default::default(),
            am_take: Default::default(),
            am_best: Default::default(),
            jo_next: Default::default(),
            killed: Default::default(),
        }
    }
}

impl Logic for VectorUnit {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, kind, pc, op, td, t1, t2, redm, rows, dst, s1, s2, n, eps, neox, heads, hd, rd,
            vscale, use2, elems, len_d, len_1, len_2, pitch_d, pitch_1, pitch_2, trap_r, trap_code_r, trap_info_r, j, h,
            e, seglen, rb_d, rb_1, rb_2, p_d, p_1, p_2, st_d, st_1, st_2, pw_d, pw_1, pw_2, x1off, rem, cap_v, cap_s, sa,
            sb, sc, sd, old_hi, ha, hb, cap_t, cap_c, ma_v, ma_meta, ma_n, mb_v, mb_meta, mb_n, inv, inv_ready, inflight, w2_v, w2_addr,
            w2_data, jo, ofirst, acc, acc_nf, am_f, am_k, am_i, oe
        );
        self.dp.clock.next = self.clock.val();
        self.dp.reset.next = self.reset.val();
        self.round.clock.next = self.clock.val();

        // ---- issue
        self.opc.next = self.iss_word.val().get_bits::<8>(0);
        self.supported.next = (self.opc.val() == self.op_vop.val())
            | (self.opc.val() == self.op_rms.val())
            | (self.opc.val() == self.op_rope.val())
            | (self.opc.val() == self.op_argmax.val());
        self.idle.next = self.state.q.val() == VecState::Idle;
        self.iss_ready.next = (self.state.q.val() == VecState::Idle) & self.supported.val() & !self.trap_r.q.val();
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        self.trap_r.d.next = false;
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.rwb_valid.next = false;
        self.rwb_idx.next = self.rd.q.val();
        self.rwb_data.next = 0.into();

        // ---- check arithmetic: (rows - 1) x pitch from two 16 x 16 products, the pitch of the span being
        // measured (Check2: destination, Check3: first source, Check4: second source)
        self.rows1.next = bit_cast::<16, 7>(self.rows.q.val()) - 1;
        self.pitch_m.next = self.pitch_d.q.val();
        if self.state.q.val() == VecState::Check3 {
            self.pitch_m.next = self.pitch_1.q.val();
        }
        if self.state.q.val() == VecState::Check4 {
            self.pitch_m.next = self.pitch_2.q.val();
        }
        self.plen.next = (self.rows1.val() * self.pitch_m.val().get_bits::<16>(0))
            + ((self.rows1.val() * self.pitch_m.val().get_bits::<16>(16)) << 16);
        self.end_d.next = (bit_cast::<32, 20>(self.dst.q.val()) << 2) + self.len_d.q.val();
        self.end_1.next = (bit_cast::<32, 20>(self.s1.q.val()) << 2) + self.len_1.q.val();
        self.end_2.next = (bit_cast::<32, 20>(self.s2.q.val()) << 2) + self.len_2.q.val();
        // element bytes as shifts of the element counts: the row bytes of each operand
        self.st_d_b.next = self.elems.q.val() << 1;
        if self.td.q.val() {
            self.st_d_b.next = self.elems.q.val() << 2;
        }
        self.st_1_b.next = self.elems.q.val() << 1;
        if self.t1.q.val() {
            self.st_1_b.next = self.elems.q.val() << 2;
        }
        self.st_2_b.next = self.elems.q.val() << 1;
        if self.t2.q.val() {
            self.st_2_b.next = self.elems.q.val() << 2;
        }

        // ---- checks: a violation raises the trap (one place below)
        self.raise.next = false;
        self.raise_code.next = self.c_bad.val();
        self.raise_info.next = 0.into();
        self.chk_spm.next = false;
        self.span_start.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
        self.span_end.next = self.end_d.val();
        if self.state.q.val() == VecState::Check7 {
            self.span_start.next = bit_cast::<32, 20>(self.s1.q.val()) << 2;
            self.span_end.next = self.end_1.val();
        }
        if self.state.q.val() == VecState::Check8 {
            self.span_start.next = bit_cast::<32, 20>(self.s2.q.val()) << 2;
            self.span_end.next = self.end_2.val();
        }
        self.spm_first.next = bit_cast::<64, 32>(self.span_start.val());
        if self.span_start.val() < self.spm_bytes.val() {
            self.spm_first.next = bit_cast::<64, 32>(self.spm_bytes.val());
        }

        // ---- the chunk at the read pointers: its lanes, whether it ends a head, a row, the instruction
        self.rem_el.next = self.seglen.q.val() - self.e.q.val();
        self.nv.next = 8.into();
        if self.rem_el.val() < 8 {
            self.nv.next = self.rem_el.val().get_bits::<4>(0);
        }
        self.seg_end.next = self.rem_el.val() <= 8;
        self.last_head.next = bit_cast::<9, 8>(self.h.q.val()) + 1 == bit_cast::<9, 8>(self.heads.q.val());
        self.row_end.next = self.seg_end.val();
        if self.kind.q.val() == VecKind::Rope {
            self.row_end.next = self.seg_end.val() & self.last_head.val();
        }
        self.all_end.next = self.row_end.val() & (bit_cast::<8, 7>(self.j.q.val()) + 1 == bit_cast::<8, 7>(self.rows.q.val()));
        self.halflast.next = ((self.kind.q.val() == VecKind::Vop) | (self.kind.q.val() == VecKind::Rms))
            & !self.td.q.val()
            & self.row_end.val()
            & self.nv.val().get_bit(0);
        // slots: 0 `a`/src/x (x0), 1 `b` (x1), 2 gains / table line 0, 3 table line 1, 4 the old last word
        self.need.next = 1.into();
        if (self.kind.q.val() == VecKind::Vop) & self.use2.q.val() {
            self.need.next = 3.into();
        }
        if self.kind.q.val() == VecKind::Rms {
            self.need.next = 5.into();
        }
        // (RoPE: a head after the row's first takes its table lines from `tcache`, where heads have 2 to
        // ROPE_TABLE_CHUNKS chunks: with one, the first head's line would be written in the cycle it is read)
        self.chunk_i.next = self.e.q.val().get_bits::<4>(3);
        self.reuse.next = (self.kind.q.val() == VecKind::Rope)
            & (self.h.q.val() != 0)
            & (self.hd.q.val() >= 32)
            & (self.hd.q.val() <= 256);
        if self.kind.q.val() == VecKind::Rope {
            self.need.next = 13.into();
            if self.neox.q.val() {
                self.need.next = 15.into();
            }
            if self.reuse.val() {
                self.need.next = 1.into();
                if self.neox.q.val() {
                    self.need.next = 3.into();
                }
            }
        }
        // FP16 operands of `vop` and `rmsnorm`: a pair's even chunk reads the line, the odd one takes its upper
        // half (`ha`, `hb`); with two such operands the odd chunk reads the next pair's `a` line instead
        // (when the row goes on), and the even chunk after it only `b`
        self.sh1.next = ((self.kind.q.val() == VecKind::Vop) | (self.kind.q.val() == VecKind::Rms)) & !self.t1.q.val();
        self.sh2.next = (self.kind.q.val() == VecKind::Vop) & self.use2.q.val() & !self.t2.q.val();
        self.pf.next = self.sh1.val() & self.sh2.val();
        self.hi.next = (self.sh1.val() | self.sh2.val()) & self.e.q.val().get_bit(3);
        if self.hi.val() {
            if self.sh1.val() {
                self.need.next = self.need.val() & bits::<5>(0b11110);
            }
            if self.sh2.val() {
                self.need.next = self.need.val() & bits::<5>(0b11101);
            }
            if self.pf.val() & !self.seg_end.val() {
                self.need.next = self.need.val() | bits::<5>(1);
            }
        } else if self.pf.val() & (self.e.q.val() != 0) {
            self.need.next = self.need.val() & bits::<5>(0b11110);
        }
        if self.halflast.val() {
            self.need.next = self.need.val() | bits::<5>(16);
        }
        self.cur.next = self.rem.q.val();
        if self.rem.q.val() == 0 {
            self.cur.next = self.need.val();
        }
        self.slot.next = 4.into();
        if self.cur.val().get_bit(3) {
            self.slot.next = 3.into();
        }
        if self.cur.val().get_bit(2) {
            self.slot.next = 2.into();
        }
        if self.cur.val().get_bit(1) {
            self.slot.next = 1.into();
        }
        if self.cur.val().get_bit(0) {
            self.slot.next = 0.into();
        }
        self.rest.next = self.cur.val() & !(bits::<5>(1) << self.slot.val());
        self.reading.next = self.state.q.val() == VecState::Chunks;
        self.s_raddr.next = self.p_1.q.val();
        // (the only `a` read of an odd chunk with two FP16 sources: the next pair's line, read ahead)
        if self.hi.val() & self.pf.val() {
            self.s_raddr.next = self.p_1.q.val() + self.st_1.q.val();
        }
        if self.slot.val() == 1 {
            self.s_raddr.next = self.p_2.q.val();
            if self.kind.q.val() == VecKind::Rope {
                self.s_raddr.next = self.p_1.q.val() + self.x1off.q.val();
            }
        }
        if self.slot.val() == 2 {
            self.s_raddr.next = self.p_2.q.val();
        }
        if self.slot.val() == 3 {
            self.s_raddr.next = self.p_2.q.val() + 8;
        }
        if self.slot.val() == 4 {
            self.s_raddr.next = self.p_d.q.val() + bit_cast::<20, 4>(self.nv.val() >> 1);
        }
        // RED: rmsnorm reads row j's entry (a vop with `red` reads below, on the store side)
        self.red_we.next = false;
        self.red_waddr.next = self.jo.q.val();
        self.red_wdata.next = 0.into();
        self.round.acc.next = signed_cast(self.red_rdata.val().get_bits::<ACC_BITS>(0));
        self.round.nf.next = self.red_rdata.val().get_bit(96);

        // ---- the table cache: read at the chunk's index (its data the next cycle, beside the chunk's last
        // line), written with a chunk's two table lines as the second arrives
        self.tcache.read_clock.next = self.clock.val();
        self.tcache.write_clock.next = self.clock.val();
        self.tcache.read_address.next = self.chunk_i.val();
        self.tcache.write_address.next = self.cap_c.q.val();
        self.tcache.write_data.next = bit_cast::<512, 256>(self.sc.q.val()) | (bit_cast::<512, 256>(self.s_rdata.val()) << 256);
        self.tcache.write_enable.next = self.cap_v.q.val() & (self.cap_s.q.val() == 3) & (self.kind.q.val() == VecKind::Rope);
        self.cap_c.d.next = self.chunk_i.val();
        self.cap_t.d.next = false;
        if self.cap_t.q.val() {
            self.sc.d.next = self.tcache.read_data.val().get_bits::<256>(0);
            self.sd.d.next = self.tcache.read_data.val().get_bits::<256>(256);
        }

        // ---- captures: the line read in the previous cycle goes to its slot
        self.cap_v.d.next = false;
        if self.cap_v.q.val() {
            if self.cap_s.q.val() == 0 {
                self.sa.d.next = self.s_rdata.val();
            }
            if self.cap_s.q.val() == 1 {
                self.sb.d.next = self.s_rdata.val();
            }
            if self.cap_s.q.val() == 2 {
                self.sc.d.next = self.s_rdata.val();
            }
            if self.cap_s.q.val() == 3 {
                self.sd.d.next = self.s_rdata.val();
            }
            if self.cap_s.q.val() == 4 {
                self.old_hi.d.next = self.s_rdata.val().get_bits::<16>(16);
            }
        }
        self.mb_v.d.next = self.ma_v.q.val();
        self.mb_meta.d.next = self.ma_meta.q.val();
        self.mb_n.d.next = self.ma_n.q.val();
        self.ma_v.d.next = false;

        // ---- the datapath's inputs: a chunk whose operands are in (mb), or rmsnorm's inverse root
        self.issue_op.next = self.op.q.val();
        if self.kind.q.val() == VecKind::Rms {
            self.issue_op.next = self.lop_rmsnorm.val();
        }
        if self.kind.q.val() == VecKind::Rope {
            self.issue_op.next = self.lop_rope.val();
        }
        self.dp.i_valid.next = self.mb_v.q.val();
        self.dp.i_op.next = self.issue_op.val();
        self.dp.i_a.next = self.sa.q.val();
        self.dp.i_b.next = self.sb.q.val();
        self.dp.i_c.next = self.sc.q.val();
        self.dp.i_d.next = self.sd.q.val();
        self.dp.i_amode.next = 1.into();
        if self.t1.q.val() {
            self.dp.i_amode.next = 0.into();
        }
        self.dp.i_bmode.next = 1.into();
        if self.t2.q.val() {
            self.dp.i_bmode.next = 0.into();
        }
        self.dp.i_cdmode.next = 0.into();
        if (self.kind.q.val() == VecKind::Vop) & (self.op.q.val() == self.lop_scale.val()) {
            self.dp.i_b.next = bit_cast::<256, 32>(self.vscale.q.val());
            self.dp.i_bmode.next = 3.into();
        }
        if self.kind.q.val() == VecKind::Rms {
            self.dp.i_b.next = bit_cast::<256, 32>(self.inv.q.val());
            self.dp.i_bmode.next = 3.into();
        }
        if self.kind.q.val() == VecKind::Rope {
            self.dp.i_cdmode.next = 1.into();
            self.dp.i_amode.next = 2.into();
            self.dp.i_b.next = self.sa.q.val();
            self.dp.i_bmode.next = 2.into();
            if self.neox.q.val() {
                self.dp.i_amode.next = 1.into();
                self.dp.i_b.next = self.sb.q.val();
                self.dp.i_bmode.next = 1.into();
            }
        }
        // the odd chunk of a pair takes the upper halves of the even one's FP16 lines, which are kept as the
        // even one enters (its own lines may be overwritten by then: the odd chunk reads ahead)
        if self.mb_meta.q.val().get_bit(45) {
            if self.sh1.val() {
                self.dp.i_a.next = bit_cast::<256, 128>(self.ha.q.val());
            }
            if self.sh2.val() {
                self.dp.i_b.next = bit_cast::<256, 128>(self.hb.q.val());
            }
        } else if self.mb_v.q.val() {
            self.ha.d.next = self.sa.q.val().get_bits::<128>(128);
            self.hb.d.next = self.sb.q.val().get_bits::<128>(128);
        }
        self.dp.i_mask.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 4>(self.mb_n.q.val())) - 1);
        // meta: write word (0..20), lanes (20..24), half-written last word (24), row end (25), inverse root
        // (26), last chunk (27), the old upper half (28..44), the odd chunk of a pair of FP16 lines (45)
        self.dp.i_meta.next = self.mb_meta.q.val() | (bit_cast::<64, 16>(self.old_hi.q.val()) << 28);
        self.dp.dd16.next = !self.td.q.val();
        if self.state.q.val() == VecState::InvIssue {
            self.dp.i_valid.next = true;
            self.dp.i_op.next = self.lop_rmsinv.val();
            self.dp.i_a.next = bit_cast::<256, 32>(self.round.f32.val());
            self.dp.i_amode.next = 3.into();
            self.dp.i_b.next = bit_cast::<256, 24>(self.n.q.val());
            self.dp.i_bmode.next = 4.into();
            self.dp.i_c.next = bit_cast::<256, 32>(self.eps.q.val());
            self.dp.i_cdmode.next = 2.into();
            self.dp.i_mask.next = 1.into();
            self.dp.i_meta.next = bits::<64>(1) << 26;
        }

        // ---- the instruction
        match self.state.q.val() {
            VecState::Idle => {
                if self.iss_valid.val() & self.supported.val() & !self.trap_r.q.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.vscale.d.next = self.iss_aux.val().get_bits::<32>(0);
                    self.state.d.next = VecState::Check0;
                    self.t2.d.next = true;
                    self.redm.d.next = 0.into();
                    self.neox.d.next = false;
                    self.heads.d.next = 1.into();
                    self.hd.d.next = 0.into();
                    if self.opc.val() == self.op_vop.val() {
                        self.kind.d.next = VecKind::Vop;
                        self.op.d.next = self.iss_word.val().get_bits::<4>(self.v_op.val().index());
                        self.td.d.next = self.iss_word.val().get_bit(self.v_dd.val().index());
                        self.t1.d.next = self.iss_word.val().get_bit(self.v_da.val().index());
                        self.t2.d.next = self.iss_word.val().get_bit(self.v_db.val().index());
                        self.redm.d.next = self.iss_word.val().get_bits::<2>(self.v_red.val().index());
                        self.rows.d.next = self.iss_word.val().get_bits::<7>(self.v_rows.val().index());
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.v_dst.val().index());
                        self.s1.d.next = self.iss_word.val().get_bits::<20>(self.v_a.val().index());
                        self.s2.d.next = self.iss_word.val().get_bits::<20>(self.v_b.val().index());
                        self.n.d.next = bit_cast::<24, 16>(self.iss_word.val().get_bits::<16>(self.v_n.val().index()));
                    }
                    if self.opc.val() == self.op_rms.val() {
                        self.kind.d.next = VecKind::Rms;
                        self.td.d.next = self.iss_word.val().get_bit(self.r_dd.val().index());
                        self.t1.d.next = self.iss_word.val().get_bit(self.r_ds.val().index());
                        self.rows.d.next = self.iss_word.val().get_bits::<7>(self.r_rows.val().index());
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.r_dst.val().index());
                        self.s1.d.next = self.iss_word.val().get_bits::<20>(self.r_src.val().index());
                        self.s2.d.next = self.iss_word.val().get_bits::<20>(self.r_g.val().index());
                        self.n.d.next = bit_cast::<24, 16>(self.iss_word.val().get_bits::<16>(self.r_n.val().index()));
                        self.eps.d.next = self.iss_word.val().get_bits::<32>(self.r_eps.val().index());
                    }
                    if self.opc.val() == self.op_rope.val() {
                        self.kind.d.next = VecKind::Rope;
                        self.td.d.next = false;
                        self.t1.d.next = false;
                        self.neox.d.next = self.iss_word.val().get_bit(self.p_style.val().index());
                        self.heads.d.next = self.iss_word.val().get_bits::<8>(self.p_heads.val().index());
                        self.hd.d.next = self.iss_word.val().get_bits::<10>(self.p_hd.val().index());
                        self.rows.d.next = self.iss_word.val().get_bits::<7>(self.p_rows.val().index());
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.p_dst.val().index());
                        self.s1.d.next = self.iss_word.val().get_bits::<20>(self.p_src.val().index());
                        self.s2.d.next = self.iss_word.val().get_bits::<20>(self.p_table.val().index());
                        self.n.d.next = 1.into();
                    }
                    if self.opc.val() == self.op_argmax.val() {
                        self.kind.d.next = VecKind::Argmax;
                        self.td.d.next = true;
                        self.t1.d.next = self.iss_word.val().get_bit(self.a_dt.val().index());
                        self.rd.d.next = self.iss_word.val().get_bits::<4>(self.a_rd.val().index());
                        self.rows.d.next = 1.into();
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.a_dst.val().index());
                        self.s1.d.next = self.iss_word.val().get_bits::<20>(self.a_src.val().index());
                        self.n.d.next = self.iss_word.val().get_bits::<24>(self.a_n.val().index());
                    }
                }
            }
            VecState::Check0 => {
                // operand rules; the elements of a row
                self.elems.d.next = bit_cast::<32, 24>(self.n.q.val());
                self.use2.d.next = true;
                self.state.d.next = VecState::Check1;
                match self.kind.q.val() {
                    VecKind::Vop => {
                        self.use2.d.next =
                            (self.op.q.val() == self.vop_add.val()) | (self.op.q.val() == self.vop_mul.val()) | (self.op.q.val() == self.vop_swiglu.val());
                        if (self.rows.q.val() == 0)
                            | (self.n.q.val() == 0)
                            | ((self.redm.q.val() != 0) & (self.rows.q.val() > self.num_red.val()))
                        {
                            self.raise.next = true;
                        }
                    }
                    VecKind::Rms => {
                        if (self.rows.q.val() == 0) | (self.n.q.val() == 0) | (self.rows.q.val() > self.num_red.val()) {
                            self.raise.next = true;
                        }
                    }
                    VecKind::Rope => {
                        self.elems.d.next = bit_cast::<16, 8>(self.heads.q.val()) * bit_cast::<16, 10>(self.hd.q.val());
                        if (self.heads.q.val() == 0) | (self.hd.q.val() == 0) | (self.rows.q.val() == 0) | (self.hd.q.val().get_bits::<4>(0) != 0) {
                            self.raise.next = true;
                        }
                    }
                    VecKind::Argmax => {
                        self.use2.d.next = false;
                        if self.n.q.val() == 0 {
                            self.raise.next = true;
                        }
                    }
                }
            }
            VecState::Check1 => {
                // row bytes into the lengths (the single-row spans are final), pitches
                self.len_d.d.next = self.st_d_b.val();
                self.len_1.d.next = self.st_1_b.val();
                self.len_2.d.next = self.st_2_b.val();
                if self.kind.q.val() == VecKind::Rms {
                    self.len_2.d.next = self.elems.q.val() << 2;
                }
                if self.kind.q.val() == VecKind::Rope {
                    // the table: rows x head_dim / 2 pairs of FP32
                    self.len_2.d.next = (bit_cast::<16, 7>(self.rows.q.val()) * bit_cast::<16, 10>(self.hd.q.val())) << 2;
                }
                if self.kind.q.val() == VecKind::Argmax {
                    self.len_d.d.next = 4.into();
                }
                self.pitch_d.d.next = (self.st_d_b.val() + 3) & !bits::<32>(3);
                self.pitch_1.d.next = (self.st_1_b.val() + 3) & !bits::<32>(3);
                self.pitch_2.d.next = (self.st_2_b.val() + 3) & !bits::<32>(3);
                self.state.d.next = VecState::Check2;
            }
            VecState::Check2 => {
                self.len_d.d.next = self.len_d.q.val() + self.plen.val();
                self.state.d.next = VecState::Check3;
            }
            VecState::Check3 => {
                self.len_1.d.next = self.len_1.q.val() + self.plen.val();
                self.state.d.next = VecState::Check4;
            }
            VecState::Check4 => {
                if self.kind.q.val() == VecKind::Vop {
                    self.len_2.d.next = self.len_2.q.val() + self.plen.val();
                }
                self.state.d.next = VecState::Check5;
            }
            VecState::Check5 => {
                // each source is the destination's span exactly, or apart from it; rmsnorm's gains and
                // rope's table must be apart from it
                self.state.d.next = VecState::Check6;
                if self.kind.q.val() != VecKind::Argmax {
                    if !((self.s1.q.val() == self.dst.q.val()) & (self.len_1.q.val() == self.len_d.q.val()))
                        & ((bit_cast::<32, 20>(self.s1.q.val()) << 2) < self.end_d.val())
                        & ((bit_cast::<32, 20>(self.dst.q.val()) << 2) < self.end_1.val())
                    {
                        self.raise.next = true;
                    }
                    if self.use2.q.val()
                        & !((self.kind.q.val() == VecKind::Vop) & (self.s2.q.val() == self.dst.q.val()) & (self.len_2.q.val() == self.len_d.q.val()))
                        & ((bit_cast::<32, 20>(self.s2.q.val()) << 2) < self.end_d.val())
                        & ((bit_cast::<32, 20>(self.dst.q.val()) << 2) < self.end_2.val())
                    {
                        self.raise.next = true;
                    }
                }
            }
            VecState::Check6 => {
                self.state.d.next = VecState::Check7;
                self.chk_spm.next = true;
            }
            VecState::Check7 => {
                self.state.d.next = VecState::Check8;
                self.chk_spm.next = true;
            }
            VecState::Check8 => {
                // every check passed unless the second source leaves the scratchpad: set up row 0
                self.state.d.next = VecState::Row;
                self.chk_spm.next = self.use2.q.val();
                self.j.d.next = 0.into();
                self.h.d.next = 0.into();
                self.e.d.next = 0.into();
                self.seglen.d.next = self.n.q.val();
                self.rb_d.d.next = self.dst.q.val();
                self.rb_1.d.next = self.s1.q.val();
                self.rb_2.d.next = self.s2.q.val();
                self.p_d.d.next = self.dst.q.val();
                self.p_1.d.next = self.s1.q.val();
                self.p_2.d.next = self.s2.q.val();
                self.pw_d.d.next = self.pitch_d.q.val().get_bits::<20>(2);
                self.pw_1.d.next = self.pitch_1.q.val().get_bits::<20>(2);
                self.pw_2.d.next = self.pitch_2.q.val().get_bits::<20>(2);
                self.st_d.d.next = 4.into();
                if self.td.q.val() {
                    self.st_d.d.next = 8.into();
                }
                self.st_1.d.next = 4.into();
                if self.t1.q.val() {
                    self.st_1.d.next = 8.into();
                }
                self.st_2.d.next = 4.into();
                if self.t2.q.val() {
                    self.st_2.d.next = 8.into();
                }
                self.x1off.d.next = bit_cast::<20, 10>(self.hd.q.val() >> 2);
                if self.kind.q.val() == VecKind::Rms {
                    // the gains: 8 FP32 per chunk, from the start again on every row
                    self.st_2.d.next = 8.into();
                    self.pw_2.d.next = 0.into();
                }
                if self.kind.q.val() == VecKind::Rope {
                    // 8 pairs per chunk: 8 words of pairs (normal) or 4 of each half (neox), 16 table words;
                    // a head's pairs (table row j) again for every head
                    self.seglen.d.next = bit_cast::<24, 10>(self.hd.q.val() >> 1);
                    self.st_d.d.next = 8.into();
                    self.st_1.d.next = 8.into();
                    if self.neox.q.val() {
                        self.st_d.d.next = 4.into();
                        self.st_1.d.next = 4.into();
                    }
                    self.st_2.d.next = 16.into();
                    self.pw_2.d.next = bit_cast::<20, 10>(self.hd.q.val());
                }
                self.rem.d.next = 0.into();
                self.jo.d.next = 0.into();
                self.ofirst.d.next = true;
                self.am_f.d.next = false;
                self.am_k.d.next = 0.into();
                self.am_i.d.next = 0.into();
                self.oe.d.next = 0.into();
                self.inv_ready.d.next = false;
            }
            VecState::Row => {
                self.state.d.next = VecState::Chunks;
                if self.kind.q.val() == VecKind::Rms {
                    self.state.d.next = VecState::RedRead;
                }
            }
            VecState::RedRead => {
                self.state.d.next = VecState::RedRound0;
            }
            VecState::RedRound0 => {
                self.state.d.next = VecState::RedRound1;
            }
            VecState::RedRound1 => {
                self.state.d.next = VecState::RedRound2;
            }
            VecState::RedRound2 => {
                self.state.d.next = VecState::RedRound3;
            }
            VecState::RedRound3 => {
                self.state.d.next = VecState::RedRound4;
            }
            VecState::RedRound4 => {
                self.state.d.next = VecState::InvIssue;
            }
            VecState::InvIssue => {
                self.inv_ready.d.next = false;
                self.progress.next = true;
                self.state.d.next = VecState::InvWait;
            }
            VecState::InvWait => {
                if self.inv_ready.q.val() {
                    self.state.d.next = VecState::Chunks;
                }
            }
            VecState::Chunks => {
                // one operand read per cycle; after the chunk's last one, its meta goes down the pipe and the
                // pointers move on
                self.cap_v.d.next = self.cur.val() != 0;
                self.cap_s.d.next = self.slot.val();
                self.rem.d.next = self.rest.val();
                self.progress.next = true;
                if self.rest.val() == 0 {
                    self.cap_t.d.next = self.reuse.val();
                    self.ma_v.d.next = true;
                    self.ma_n.d.next = self.nv.val();
                    self.ma_meta.d.next = bit_cast::<64, 20>(self.p_d.q.val())
                        | (bit_cast::<64, 4>(self.nv.val()) << 20)
                        | (bit_cast::<64, 1>(self.halflast.val().into()) << 24)
                        | (bit_cast::<64, 1>(self.row_end.val().into()) << 25)
                        | (bit_cast::<64, 1>(self.all_end.val().into()) << 27)
                        | (bit_cast::<64, 1>(self.hi.val().into()) << 45);
                    self.e.d.next = self.e.q.val() + 8;
                    self.p_d.d.next = self.p_d.q.val() + self.st_d.q.val();
                    self.p_1.d.next = self.p_1.q.val() + self.st_1.q.val();
                    self.p_2.d.next = self.p_2.q.val() + self.st_2.q.val();
                    if self.seg_end.val() {
                        self.e.d.next = 0.into();
                        if (self.kind.q.val() == VecKind::Rope) & !self.last_head.val() {
                            // next head: its table pairs from the row's start; neox skips the x1 half
                            self.h.d.next = self.h.q.val() + 1;
                            self.p_2.d.next = self.rb_2.q.val();
                            if self.neox.q.val() {
                                self.p_d.d.next = self.p_d.q.val() + self.st_d.q.val() + self.x1off.q.val();
                                self.p_1.d.next = self.p_1.q.val() + self.st_1.q.val() + self.x1off.q.val();
                            }
                        } else {
                            // next row
                            self.h.d.next = 0.into();
                            self.j.d.next = self.j.q.val() + 1;
                            self.rb_d.d.next = self.rb_d.q.val() + self.pw_d.q.val();
                            self.rb_1.d.next = self.rb_1.q.val() + self.pw_1.q.val();
                            self.rb_2.d.next = self.rb_2.q.val() + self.pw_2.q.val();
                            self.p_d.d.next = self.rb_d.q.val() + self.pw_d.q.val();
                            self.p_1.d.next = self.rb_1.q.val() + self.pw_1.q.val();
                            self.p_2.d.next = self.rb_2.q.val() + self.pw_2.q.val();
                            self.state.d.next = VecState::Row;
                            if self.all_end.val() {
                                self.state.d.next = VecState::Finish;
                            }
                        }
                    }
                }
            }
            VecState::Finish => {
                if (self.inflight.q.val() == 0) & !self.ma_v.q.val() & !self.mb_v.q.val() & !self.w2_v.q.val() {
                    self.progress.next = true;
                    self.state.d.next = VecState::Idle;
                }
            }
            VecState::Drain => {
                if (self.inflight.q.val() == 0) & !self.ma_v.q.val() & !self.mb_v.q.val() {
                    self.state.d.next = VecState::Idle;
                }
            }
        }

        if self.chk_spm.val() & (self.span_end.val() > self.spm_bytes.val()) {
            self.raise.next = true;
            self.raise_code.next = self.c_spm.val();
            self.raise_info.next = self.spm_first.val();
        }
        if self.raise.val() {
            self.trap_r.d.next = true;
            self.trap_code_r.d.next = self.raise_code.val();
            self.trap_info_r.d.next = self.raise_info.val();
            self.state.d.next = VecState::Idle;
        }

        // ---- store side: the datapath's results
        self.o_meta.next = self.dp.o_meta.val();
        self.o_n.next = self.o_meta.val().get_bits::<4>(20);
        self.o_halflast.next = self.o_meta.val().get_bit(24);
        self.o_row_end.next = self.o_meta.val().get_bit(25);
        self.o_inv.next = self.o_meta.val().get_bit(26);
        self.o_all_end.next = self.o_meta.val().get_bit(27);
        self.killed.next = self.state.q.val() == VecState::Drain;
        self.s_we.next = 0.into();
        self.s_waddr.next = self.o_meta.val().get_bits::<20>(0);
        self.s_wdata.next = self.dp.o_f32.val();
        // FP16 results: lanes 2w, 2w + 1 in word w; a half-written last word keeps its old upper half
        self.o_sh.next = (bit_cast::<9, 4>(self.o_n.val() >> 1) << 5) + 16;
        self.h16.next = bit_cast::<256, 128>(self.dp.o_h0.val());
        if self.o_halflast.val() {
            self.h16.next = (bit_cast::<256, 128>(self.dp.o_h0.val()) & !(bit_cast::<256, 16>(bits::<16>(0xFFFF)) << self.o_sh.val()))
                | (bit_cast::<256, 16>(self.o_meta.val().get_bits::<16>(28)) << self.o_sh.val());
        }
        self.acc_in.next = self.acc.q.val();
        self.acc_in_nf.next = self.acc_nf.q.val();
        if self.ofirst.q.val() {
            self.acc_in.next = 0.into();
            self.acc_in_nf.next = false;
            if self.redm.q.val() == 2 {
                self.acc_in.next = self.red_rdata.val().get_bits::<ACC_BITS>(0);
                self.acc_in_nf.next = self.red_rdata.val().get_bit(96);
            }
        }
        self.acc_new.next = self.acc_in.val() + self.dp.o_sq.val();
        self.acc_new_nf.next = self.acc_in_nf.val() | self.dp.o_sqnf.val();
        self.red_entry.next = bit_cast::<RED_BITS, ACC_BITS>(self.acc_new.val()) | (bit_cast::<RED_BITS, 1>(self.acc_new_nf.val().into()) << 96);
        self.am_take.next = self.dp.o_am_found.val() & (!self.am_f.q.val() | (self.dp.o_am_key.val() > self.am_k.q.val()));
        self.am_best.next = self.am_i.q.val();
        if self.am_take.val() {
            self.am_best.next = self.oe.q.val() + bit_cast::<24, 3>(self.dp.o_am_idx.val());
        }
        if self.dp.o_valid.val() {
            self.progress.next = true;
            if self.o_inv.val() {
                self.inv.d.next = self.dp.o_f32.val().get_bits::<32>(0);
                self.inv_ready.d.next = true;
            } else if !self.killed.val() {
                match self.kind.q.val() {
                    VecKind::Vop => {
                        if self.td.q.val() {
                            self.s_we.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 4>(self.o_n.val())) - 1);
                        } else {
                            self.s_we.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 4>((self.o_n.val() + 1) >> 1)) - 1);
                            self.s_wdata.next = self.h16.val();
                        }
                        if self.redm.q.val() != 0 {
                            self.acc.d.next = self.acc_new.val();
                            self.acc_nf.d.next = self.acc_new_nf.val();
                            self.ofirst.d.next = false;
                            if self.o_row_end.val() {
                                self.red_we.next = true;
                                self.red_wdata.next = self.red_entry.val();
                                self.jo.d.next = self.jo.q.val() + 1;
                                self.ofirst.d.next = true;
                            }
                        }
                    }
                    VecKind::Rms => {
                        if self.td.q.val() {
                            self.s_we.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 4>(self.o_n.val())) - 1);
                        } else {
                            self.s_we.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 4>((self.o_n.val() + 1) >> 1)) - 1);
                            self.s_wdata.next = self.h16.val();
                        }
                    }
                    VecKind::Rope => {
                        if self.neox.q.val() {
                            self.s_we.next = 15.into();
                            self.s_wdata.next = bit_cast::<256, 128>(self.dp.o_h0.val());
                            self.w2_v.d.next = true;
                            self.w2_addr.d.next = self.o_meta.val().get_bits::<20>(0) + self.x1off.q.val();
                            self.w2_data.d.next = self.dp.o_h1.val();
                        } else {
                            self.s_we.next = 255.into();
                            self.s_wdata.next = self.dp.o_pairs.val();
                        }
                    }
                    VecKind::Argmax => {
                        self.oe.d.next = self.oe.q.val() + 8;
                        if self.am_take.val() {
                            self.am_f.d.next = true;
                            self.am_k.d.next = self.dp.o_am_key.val();
                            self.am_i.d.next = self.am_best.val();
                        }
                        if self.o_all_end.val() {
                            // the index: to the scratchpad word and to r[rd]
                            self.s_we.next = 1.into();
                            self.s_waddr.next = self.dst.q.val();
                            self.s_wdata.next = bit_cast::<256, 24>(self.am_best.val());
                            self.rwb_valid.next = true;
                            self.rwb_data.next = bit_cast::<32, 24>(self.am_best.val());
                        }
                    }
                }
            }
        }
        // a vop with `red` reads the entry of the row its next results are in (the next row's from the cycle
        // this row's last chunk is stored, so that the RAM shows it to that row's first chunk)
        self.jo_next.next = self.jo.q.val();
        if self.dp.o_valid.val() & !self.o_inv.val() & !self.killed.val() & (self.redm.q.val() != 0) & self.o_row_end.val() {
            self.jo_next.next = self.jo.q.val() + 1;
        }
        self.red_raddr.next = self.j.q.val().get_bits::<6>(0);
        if self.kind.q.val() == VecKind::Vop {
            self.red_raddr.next = self.jo_next.val();
        }
        // neox: the chunk's second half one cycle after the first
        self.w2_v.d.next = false;
        if self.w2_v.q.val() & !self.killed.val() {
            self.s_we.next = 15.into();
            self.s_waddr.next = self.w2_addr.q.val();
            self.s_wdata.next = bit_cast::<256, 128>(self.w2_data.q.val());
        }
        if self.dp.o_valid.val() & !self.o_inv.val() & !self.killed.val() & (self.kind.q.val() == VecKind::Rope) & self.neox.q.val() {
            self.w2_v.d.next = true;
        }

        // ---- chunks in the datapath
        if self.dp.i_valid.val() & !self.dp.o_valid.val() {
            self.inflight.d.next = self.inflight.q.val() + 1;
        }
        if !self.dp.i_valid.val() & self.dp.o_valid.val() {
            self.inflight.d.next = self.inflight.q.val() - 1;
        }

        if self.flush.val() | self.reset.val() {
            self.state.d.next = VecState::Drain;
            self.trap_r.d.next = false;
            self.rem.d.next = 0.into();
        }
        if self.reset.val() {
            self.state.d.next = VecState::Idle;
            self.inflight.d.next = 0.into();
            self.ma_v.d.next = false;
            self.mb_v.d.next = false;
            self.cap_v.d.next = false;
            self.w2_v.d.next = false;
        }
    }
}

/// A [`VectorUnit`] of `config` ready to emit (its datapath is not simulated by rust-hdl).
pub fn vecunit_top(config: &OverlayConfig) -> Result<VectorUnit, crate::emit::EmitError> {
    Ok(connect_top!(
        VectorUnit::new(config, dp::dp_cores()?),
        clock,
        reset,
        flush,
        iss_valid,
        iss_word,
        iss_pc,
        iss_aux,
        s_rdata,
        red_rdata
    ))
}

pub use dp::dp_cores;

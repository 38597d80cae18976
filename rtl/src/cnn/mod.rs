//! The CNN unit: `conv` and `maxpool` (docs/isa.md) in 16-bit fixed point, its sequencer in rust-hdl HDL
//! over the datapath [`dp`] (`pe_lanes` fixed-point lanes of its own: one i16 x i16 product per DSP48E2, 16
//! per lane and cycle, a 48-bit accumulator, `fixed::requantize`).
//!
//! An instruction is checked first, in the functional simulator's order and with its codes and ERROR_INFO
//! (`sim/src/func/exec/cnn.rs`): the shape rules, the kernel's size, the shift, the overlap of source and
//! destination, the destination's and the source's scratchpad spans, the weights' device-memory span. The
//! shape products come from 16 x 16 multipliers and one shift-add multiplier, the output size from two
//! restoring dividers (a few dozen cycles per instruction).
//!
//! `conv` runs in groups of `pe_lanes` output channels, lane `l` computing channel `c0 + l`:
//!
//! 1. **Load**: the group's biases and each lane's kernel (`k k cin` i16, `[ky][kx][ci]`) come through the
//!    line port (tag 2), every line requested back to back, each lane's lines into its kernel buffer.
//! 2. **Positions**, one after another: for each kernel row `ky` inside the image, the `k cin` activations
//!    of the row segment (contiguous in the HWC scratchpad) are read a line per cycle (one more line when the
//!    segment starts at an odd i16) and go to the lanes 16 at a time, masked to zero where the segment
//!    leaves the image (padding); every lane reads the 16 weights of the same kernel offset from its buffer.
//!    After the last step the datapath requantizes into one of its hold banks, and the next positions go
//!    on while the **writer** stores these outputs, 16 per line write (a read-modify-write of two lines
//!    where they start at an odd i16 or end in a half word). At most `dp::HOLD_BANKS` positions are owed
//!    to the writer.
//!
//! `maxpool` runs in chunks of 16 channels: per output position the `k x k` window's 16-channel vectors are
//! read (two lines when at an odd i16) into the datapath's running maximum, then written as above.
//!
//! One instruction at a time; the unit owns the scratchpad's port while it runs (the top's interlock).
//! `BYTES_READ` counts a `conv`'s weights and biases and `MACS` its products, at its end, as the functional
//! simulator does.

pub mod dp;

use crate::ctrl::queue::AUX_BITS;
use crate::ctrl::{constant as k, decode};
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use dp::CnnDatapath;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

/// Bits per conv CSR in the auxiliary operand: the low 16 bits and a flag for a value of 2^16 or
/// more (`fixed::CONV_DIM_LIMIT`), CSR `conv_h + i` at `AUX_CSR_BITS x i`. (rust-hdl's HDL takes literal bit
/// offsets: the top's packing and [`Cnn`]'s unpacking write them out, 0, 17, .. 102 and the flags 16, 33,
/// .. 118; rtlsim/tests/rtl_cnn.rs sets every CSR and the flags of two.)
pub const AUX_CSR_BITS: usize = 17;

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum CnnState {
    Idle,
    /// Shape rules (zeros, sizes, the kernel inside the padded image); the 16 x 16 shape products.
    Ck1,
    /// The kernel's size and the shift; the wider products; the dividers start.
    Ck2,
    /// `(h + 2 pad - k) / stride` and the same for `w`, a bit per cycle.
    CkDiv,
    /// Loads `out_h x out_w` into the shift-add multiplier.
    CkMul1,
    /// Shift-add: `out_h x out_w` (stage 0), its products with `cout` (1) and with the weights (2).
    CkMul,
    /// Overlap, the scratchpad spans, the weights' span.
    CkSpan,
    /// A group of output channels (conv) or a chunk of 16 channels (maxpool) starts.
    Group,
    /// The group's biases and kernels through the line port.
    Load,
    /// An output position starts (when fewer than four positions are owed to the writer: the hold banks).
    Pos,
    /// Its rows: scratchpad reads; the datapath's steps follow a cycle behind.
    Stream,
    /// The group's positions are issued: wait until they are written, then the next group or the end.
    GEnd,
    Fin,
}

/// The writer, beside the positions: a position's outputs, chunk by chunk, from the datapath's hold bank.
#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum WriterState {
    Idle,
    /// A chunk: a direct write, or the read-modify-write of the two lines it touches.
    Wr,
    RmwB,
    RmwC,
    RmwW1,
    RmwW2,
}

#[derive(LogicBlock)]
pub struct Cnn {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,

    // ---- issue (from the core): the word, its pc, the conv CSRs (see [`AUX_CSR_BITS`])
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub iss_aux: Signal<In, Bits<AUX_BITS>>,
    pub idle: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,

    // ---- device memory (the line port, reads only): 32-byte lines, responses in order
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_resp: Signal<In, Bit>,
    pub m_rdata: Signal<In, Bits<256>>,

    // ---- the scratchpad's line port
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    pub bytes_read: Signal<Out, Bits<64>>,
    pub macs: Signal<Out, Bits<64>>,

    dp: CnnDatapath,

    // ---- the instruction
    state: DFF<CnnState>,
    pc: DFF<Bits<32>>,
    is_max: DFF<Bit>,
    relu: DFF<Bit>,
    shift: DFF<Bits<6>>,
    dst: DFF<Bits<20>>,
    src: DFF<Bits<20>>,
    wline: DFF<Bits<32>>,
    big: DFF<Bit>,
    h: DFF<Bits<16>>,
    w: DFF<Bits<16>>,
    cin: DFF<Bits<16>>,
    cout: DFF<Bits<16>>,
    kk_: DFF<Bits<16>>,
    st: DFF<Bits<16>>,
    pad: DFF<Bits<16>>,
    // shape products
    kk: DFF<Bits<32>>,
    kc: DFF<Bits<32>>,
    wc: DFF<Bits<32>>,
    sc: DFF<Bits<32>>,
    pcin: DFF<Bits<32>>,
    hw: DFF<Bits<32>>,
    kkc: DFF<Bits<48>>,
    hwc: DFF<Bits<48>>,
    swc: DFF<Bits<48>>,
    pwc: DFF<Bits<48>>,
    skc: DFF<Bits<48>>,
    pkc: DFF<Bits<48>>,
    weights: DFF<Bits<48>>,
    /// `kkc x pe_lanes`: the element offset from one group's first kernel to the next's.
    lkkc: DFF<Bits<48>>,
    // the dividers
    dv_i: DFF<Bits<5>>,
    dv_nh: DFF<Bits<18>>,
    dv_nw: DFF<Bits<18>>,
    dv_rh: DFF<Bits<18>>,
    dv_rw: DFF<Bits<18>>,
    dv_qh: DFF<Bits<18>>,
    dv_qw: DFF<Bits<18>>,
    oh: DFF<Bits<18>>,
    ow: DFF<Bits<18>>,
    // the shift-add multiplier
    mul_a: DFF<Bits<64>>,
    mul_b: DFF<Bits<32>>,
    mul_p: DFF<Bits<64>>,
    mst: DFF<Bits<2>>,
    ohow: DFF<Bits<64>>,
    dst_half: DFF<Bits<64>>,
    macs_n: DFF<Bits<64>>,
    wbytes: DFF<Bits<64>>,

    // ---- the group
    c0: DFF<Bits<16>>,
    nl: DFF<Bits<16>>,
    /// The element offset of lane 0's kernel (`c0 x kkc`) and the group's first bias word.
    gs0: DFF<Bits<48>>,
    gbw: DFF<Bits<48>>,
    // load, request side (phase 0 biases, 1 kernels) and response side
    rq_ph: DFF<Bit>,
    rq_r: DFF<Bits<16>>,
    rq_l: DFF<Bits<16>>,
    rq_s: DFF<Bits<48>>,
    rq_done: DFF<Bit>,
    rs_ph: DFF<Bit>,
    rs_r: DFF<Bits<16>>,
    rs_l: DFF<Bits<16>>,
    rs_s: DFF<Bits<48>>,
    // ---- the position
    oy: DFF<Bits<18>>,
    ox: DFF<Bits<18>>,
    y0: DFF<Bits<48>>,
    x0: DFF<Bits<48>>,
    ybwc: DFF<Bits<48>>,
    xc: DFF<Bits<48>>,
    nyk: DFF<Bits<48>>,
    lo: DFF<Bits<48>>,
    hi: DFF<Bits<48>>,
    /// Positions whose last step is issued and whose outputs are not written yet (at most 4: the banks).
    owed: DFF<Bits<3>>,
    /// Positions captured in a hold bank and not written yet.
    cap_n: DFF<Bits<3>>,
    owed_inc: Signal<Local, Bit>,
    /// The writer finished a position this cycle.
    w_fin: Signal<Local, Bit>,
    /// A position's reads are all issued this cycle.
    pos_done: Signal<Local, Bit>,
    // the writer: its state, the position's first output (i16), the chunk, the bank
    wst: DFF<WriterState>,
    w_out: DFF<Bits<48>>,
    wb: DFF<Bits<2>>,
    /// The writer reads the scratchpad this cycle (the stream's read waits).
    w_reads: Signal<Local, Bit>,
    // stream, request side: rows left, the line in the row, the row's first i16, its kernel offset
    q_rows: DFF<Bits<32>>,
    q_r: DFF<Bits<16>>,
    q_base: DFF<Bits<48>>,
    q_ek: DFF<Bits<48>>,
    q_rx: DFF<Bits<16>>,
    /// The row being read is the position's first inside the image.
    q_pf: DFF<Bit>,
    // stream, data side: the line read last cycle
    d_v: DFF<Bit>,
    d_r: DFF<Bits<16>>,
    d_odd: DFF<Bit>,
    d_ek: DFF<Bits<48>>,
    d_last: DFF<Bit>,
    /// The line belongs to the position's first row (its first step starts the accumulators).
    d_pf: DFF<Bit>,
    prev: DFF<Bits<256>>,
    // outputs
    wq: DFF<Bits<8>>,
    old_lo: DFF<Bits<256>>,
    old_hi: DFF<Bits<256>>,

    rd_total: DFF<Bits<64>>,
    macs_total: DFF<Bits<64>>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,

    // ---- constants
    lanes: Constant<Bits<16>>,
    max_kernel_bytes: Constant<Bits<48>>,
    mem_bytes: Constant<Bits<80>>,
    spm_bytes: Constant<Bits<64>>,
    op_maxpool: Constant<Bits<8>>,
    f_relu: Constant<Bits<8>>,
    f_shift: Constant<Bits<8>>,
    f_dst: Constant<Bits<8>>,
    f_src: Constant<Bits<8>>,
    f_w: Constant<Bits<8>>,
    fm_k: Constant<Bits<8>>,
    fm_stride: Constant<Bits<8>>,
    fm_h: Constant<Bits<8>>,
    fm_w: Constant<Bits<8>>,
    fm_c: Constant<Bits<8>>,
    fm_dst: Constant<Bits<8>>,
    fm_src: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_mem: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    kk_hi: Signal<Local, Bits<48>>,
    dst_b: Signal<Local, Bits<64>>,
    dst_e: Signal<Local, Bits<64>>,
    src_b: Signal<Local, Bits<64>>,
    src_e: Signal<Local, Bits<64>>,
    w_b: Signal<Local, Bits<64>>,
    dvh: Signal<Local, Bits<18>>,
    dvw: Signal<Local, Bits<18>>,
    bias_line: Signal<Local, Bits<48>>,
    nb: Signal<Local, Bits<16>>,
    rq_nl: Signal<Local, Bits<16>>,
    rs_nl: Signal<Local, Bits<16>>,
    rq_last: Signal<Local, Bit>,
    rs_last: Signal<Local, Bit>,
    ky_lo: Signal<Local, Bits<48>>,
    ky_hi: Signal<Local, Bits<48>>,
    hy: Signal<Local, Bits<48>>,
    wx: Signal<Local, Bits<48>>,
    nsteps: Signal<Local, Bits<16>>,
    q_reads: Signal<Local, Bits<16>>,
    q_odd: Signal<Local, Bit>,
    q_lastline: Signal<Local, Bit>,
    d_j: Signal<Local, Bits<16>>,
    d_j16: Signal<Local, Bits<48>>,
    d_step: Signal<Local, Bit>,
    d_x: Signal<Local, Bits<512>>,
    tlo: Signal<Local, Bits<48>>,
    thi: Signal<Local, Bits<48>>,
    mlo: Signal<Local, Bits<16>>,
    mhi: Signal<Local, Bits<16>>,
    o_i: Signal<Local, Bits<48>>,
    o_word: Signal<Local, Bits<SPM_WORD_BITS>>,
    o_cnt: Signal<Local, Bits<16>>,
    o_nw: Signal<Local, Bits<16>>,
    o_nw8: Signal<Local, Bits<16>>,
    we1: Signal<Local, Bits<8>>,
    we2: Signal<Local, Bits<8>>,
    chunks: Signal<Local, Bits<16>>,
}

impl Cnn {
    pub fn new(config: &OverlayConfig, dp_verilog: String) -> Cnn {
        let f = |m: &str, n: &str| k::<8>(u64::from(decode::field(m, n).offset));
        assert!(u64::from(config.scratchpad_bytes) <= 4u64 << SPM_WORD_BITS);
        assert!(config.pe_lanes < 1 << 16);
        Cnn {
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
            m_req: Default::default(),
            m_req_ready: Default::default(),
            m_addr: Default::default(),
            m_resp: Default::default(),
            m_rdata: Default::default(),
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            bytes_read: Default::default(),
            macs: Default::default(),
            dp: CnnDatapath::new(dp_verilog),
            state: Default::default(),
            pc: Default::default(),
            is_max: Default::default(),
            relu: Default::default(),
            shift: Default::default(),
            dst: Default::default(),
            src: Default::default(),
            wline: Default::default(),
            big: Default::default(),
            h: Default::default(),
            w: Default::default(),
            cin: Default::default(),
            cout: Default::default(),
            kk_: Default::default(),
            st: Default::default(),
            pad: Default::default(),
            kk: Default::default(),
            kc: Default::default(),
            wc: Default::default(),
            sc: Default::default(),
            pcin: Default::default(),
            hw: Default::default(),
            kkc: Default::default(),
            hwc: Default::default(),
            swc: Default::default(),
            pwc: Default::default(),
            skc: Default::default(),
            pkc: Default::default(),
            weights: Default::default(),
            lkkc: Default::default(),
            dv_i: Default::default(),
            dv_nh: Default::default(),
            dv_nw: Default::default(),
            dv_rh: Default::default(),
            dv_rw: Default::default(),
            dv_qh: Default::default(),
            dv_qw: Default::default(),
            oh: Default::default(),
            ow: Default::default(),
            mul_a: Default::default(),
            mul_b: Default::default(),
            mul_p: Default::default(),
            mst: Default::default(),
            ohow: Default::default(),
            dst_half: Default::default(),
            macs_n: Default::default(),
            wbytes: Default::default(),
            c0: Default::default(),
            nl: Default::default(),
            gs0: Default::default(),
            gbw: Default::default(),
            rq_ph: Default::default(),
            rq_r: Default::default(),
            rq_l: Default::default(),
            rq_s: Default::default(),
            rq_done: Default::default(),
            rs_ph: Default::default(),
            rs_r: Default::default(),
            rs_l: Default::default(),
            rs_s: Default::default(),
            oy: Default::default(),
            ox: Default::default(),
            y0: Default::default(),
            x0: Default::default(),
            ybwc: Default::default(),
            xc: Default::default(),
            nyk: Default::default(),
            lo: Default::default(),
            hi: Default::default(),
            owed: Default::default(),
            cap_n: Default::default(),
            owed_inc: Default::default(),
            w_fin: Default::default(),
            pos_done: Default::default(),
            wst: Default::default(),
            w_out: Default::default(),
            wb: Default::default(),
            w_reads: Default::default(),
            q_rows: Default::default(),
            q_r: Default::default(),
            q_base: Default::default(),
            q_ek: Default::default(),
            q_rx: Default::default(),
            q_pf: Default::default(),
            d_v: Default::default(),
            d_r: Default::default(),
            d_odd: Default::default(),
            d_ek: Default::default(),
            d_last: Default::default(),
            d_pf: Default::default(),
            prev: Default::default(),
            wq: Default::default(),
            old_lo: Default::default(),
            old_hi: Default::default(),
            rd_total: Default::default(),
            macs_total: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            lanes: k(u64::from(config.pe_lanes)),
            max_kernel_bytes: k(u64::from(config.max_conv_kernel_bytes())),
            mem_bytes: Constant::new(config.device_memory_bytes.to_bits()),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            op_maxpool: k(u64::from(decode::opcode("maxpool"))),
            f_relu: f("conv", "relu"),
            f_shift: f("conv", "shift"),
            f_dst: f("conv", "dst"),
            f_src: f("conv", "src"),
            f_w: f("conv", "w"),
            fm_k: f("maxpool", "k"),
            fm_stride: f("maxpool", "stride"),
            fm_h: f("maxpool", "h"),
            fm_w: f("maxpool", "w"),
            fm_c: f("maxpool", "c"),
            fm_dst: f("maxpool", "dst"),
            fm_src: f("maxpool", "src"),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_mem: k(ErrorCode::MemOutOfRange as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            opc: Default::default(),
            kk_hi: Default::default(),
            dst_b: Default::default(),
            dst_e: Default::default(),
            src_b: Default::default(),
            src_e: Default::default(),
            w_b: Default::default(),
            dvh: Default::default(),
            dvw: Default::default(),
            bias_line: Default::default(),
            nb: Default::default(),
            rq_nl: Default::default(),
            rs_nl: Default::default(),
            rq_last: Default::default(),
            rs_last: Default::default(),
            ky_lo: Default::default(),
            ky_hi: Default::default(),
            hy: Default::default(),
            wx: Default::default(),
            nsteps: Default::default(),
            q_reads: Default::default(),
            q_odd: Default::default(),
            q_lastline: Default::default(),
            d_j: Default::default(),
            d_j16: Default::default(),
            d_step: Default::default(),
            d_x: Default::default(),
            tlo: Default::default(),
            thi: Default::default(),
            mlo: Default::default(),
            mhi: Default::default(),
            o_i: Default::default(),
            o_word: Default::default(),
            o_cnt: Default::default(),
            o_nw: Default::default(),
            o_nw8: Default::default(),
            we1: Default::default(),
            we2: Default::default(),
            chunks: Default::default(),
        }
    }
}

impl Logic for Cnn {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, is_max, relu, shift, dst, src, wline, big, h, w, cin, cout, kk_, st, pad, kk, kc,
            wc, sc, pcin, hw, kkc, hwc, swc, pwc, skc, pkc, weights, lkkc, dv_i, dv_nh, dv_nw, dv_rh, dv_rw, dv_qh,
            dv_qw, oh, ow, mul_a, mul_b, mul_p, mst, ohow, dst_half, macs_n, wbytes, c0, nl, gs0, gbw, rq_ph, rq_r, rq_l,
            rq_s, rq_done, rs_ph, rs_r, rs_l, rs_s, oy, ox, y0, x0, ybwc, xc, nyk, lo, hi, owed, cap_n, wst, w_out, wb, q_rows,
            q_r, q_base, q_ek, q_rx, q_pf, d_v, d_r, d_odd, d_ek, d_last, d_pf, prev, wq, old_lo, old_hi, rd_total,
            macs_total, trap_r, trap_code_r, trap_info_r
        );
        self.dp.clock.next = self.clock.val();
        self.dp.reset.next = self.reset.val() | self.flush.val();
        self.idle.next = self.state.q.val() == CnnState::Idle;
        self.iss_ready.next = self.state.q.val() == CnnState::Idle;
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.trap_r.d.next = false;
        self.bytes_read.next = self.rd_total.q.val();
        self.macs.next = self.macs_total.q.val();
        self.m_req.next = false;
        self.s_we.next = 0.into();
        self.s_wdata.next = self.dp.o_data.val();
        self.s_waddr.next = 0.into();
        self.s_raddr.next = 0.into();
        self.d_v.d.next = false;
        self.dp.ld_valid.next = false;
        self.dp.ld_lane.next = self.rs_l.q.val();
        self.dp.ld_entry.next = self.rs_r.q.val();
        self.dp.ld_phase.next = self.rs_s.q.val().get_bits::<4>(0);
        self.dp.ld_line.next = self.m_rdata.val();
        self.dp.b_valid.next = false;
        // the lane that takes word 0 of bias line rs_r
        self.dp.b_base.next = (self.rs_r.q.val() << 3) - bit_cast::<16, 3>(self.gbw.q.val().get_bits::<3>(0));
        self.dp.b_line.next = self.m_rdata.val();
        self.dp.s_valid.next = false;
        self.dp.s_first.next = false;
        self.dp.s_last.next = false;
        self.dp.s_max.next = self.is_max.q.val();
        self.dp.s_x.next = 0.into();
        self.dp.s_mask.next = 0.into();
        self.dp.s_e.next = 0.into();
        self.dp.q_shift.next = self.shift.q.val();
        self.dp.q_relu.next = self.relu.q.val();
        self.dp.o_sel.next = self.wq.q.val();
        self.dp.o_bank.next = self.wb.q.val();
        self.dp.o_max.next = self.is_max.q.val();
        self.owed_inc.next = false;
        self.pos_done.next = false;
        self.dp.m_old.next = bit_cast::<512, 256>(self.old_lo.q.val()) | (bit_cast::<512, 256>(self.old_hi.q.val()) << 256);

        self.opc.next = self.iss_word.val().get_bits::<8>(0);

        // ---- the spans (bytes): destination, source, weights and biases
        self.dst_b.next = bit_cast::<64, 20>(self.dst.q.val()) << 2;
        self.dst_e.next = self.dst_b.val() + (self.dst_half.q.val() << 1);
        self.src_b.next = bit_cast::<64, 20>(self.src.q.val()) << 2;
        self.src_e.next = self.src_b.val() + (bit_cast::<64, 48>(self.hwc.q.val()) << 1);
        self.w_b.next = bit_cast::<64, 32>(self.wline.q.val()) << 5;
        self.kk_hi.next = bit_cast::<48, 32>(self.kk.q.val().get_bits::<16>(16) * self.cin.q.val()) << 16;

        // ---- the dividers: the next remainder bit
        self.dvh.next = (self.dv_rh.q.val() << 1) | bit_cast::<18, 1>(self.dv_nh.q.val().get_bit(17).into());
        self.dvw.next = (self.dv_rw.q.val() << 1) | bit_cast::<18, 1>(self.dv_nw.q.val().get_bit(17).into());

        // ---- load: the bias lines, then each lane's kernel lines
        self.bias_line.next = bit_cast::<48, 32>(self.wline.q.val()) + (self.gbw.q.val() >> 3);
        self.nb.next = (bit_cast::<16, 3>(self.gbw.q.val().get_bits::<3>(0)) + self.nl.q.val() + 7) >> 3;
        self.rq_nl.next = bit_cast::<16, 48>((bit_cast::<48, 4>(self.rq_s.q.val().get_bits::<4>(0)) + self.kkc.q.val() + 15) >> 4);
        self.rs_nl.next = bit_cast::<16, 48>((bit_cast::<48, 4>(self.rs_s.q.val().get_bits::<4>(0)) + self.kkc.q.val() + 15) >> 4);
        self.rq_last.next = self.rq_ph.q.val() & (self.rq_l.q.val() + 1 == self.nl.q.val()) & (self.rq_r.q.val() + 1 == self.rq_nl.val());
        self.rs_last.next = self.rs_ph.q.val() & (self.rs_l.q.val() + 1 == self.nl.q.val()) & (self.rs_r.q.val() + 1 == self.rs_nl.val());
        self.m_addr.next = bit_cast::<64, 48>(self.bias_line.val() + bit_cast::<48, 16>(self.rq_r.q.val()));
        if self.rq_ph.q.val() {
            self.m_addr.next = bit_cast::<64, 48>(bit_cast::<48, 32>(self.wline.q.val()) + (self.rq_s.q.val() >> 4) + bit_cast::<48, 16>(self.rq_r.q.val()));
        }

        // ---- a position: the kernel rows inside the image (conv), the row segment's columns inside it
        self.hy.next = bit_cast::<48, 16>(self.h.q.val()) - self.y0.q.val();
        self.ky_lo.next = 0.into();
        if self.y0.q.val().get_bit(47) {
            self.ky_lo.next = bits::<48>(0) - self.y0.q.val();
        }
        self.ky_hi.next = bit_cast::<48, 16>(self.kk_.q.val());
        if !self.hy.val().get_bit(47) & (self.hy.val() < bit_cast::<48, 16>(self.kk_.q.val())) {
            self.ky_hi.next = self.hy.val();
        }
        if self.hy.val().get_bit(47) {
            self.ky_hi.next = 0.into();
        }
        self.wx.next = bit_cast::<48, 32>(self.wc.q.val()) - self.xc.q.val();
        self.nsteps.next = bit_cast::<16, 32>((self.kc.q.val() + 15) >> 4);
        if self.is_max.q.val() {
            self.nsteps.next = 1.into();
        }
        // the reads of the current row: one more where the row starts at an odd i16
        self.q_odd.next = self.q_base.q.val().get_bit(0);
        self.q_reads.next = self.nsteps.val() + bit_cast::<16, 1>(self.q_odd.val().into());
        self.q_lastline.next = self.q_r.q.val() + 1 == self.q_reads.val();

        // ---- the data side: the line read last cycle gives step j (its activations and their mask)
        self.d_j.next = self.d_r.q.val();
        self.d_step.next = self.d_v.q.val();
        self.d_x.next = bit_cast::<512, 256>(self.s_rdata.val());
        if self.d_odd.q.val() {
            self.d_j.next = self.d_r.q.val() - 1;
            self.d_step.next = self.d_v.q.val() & (self.d_r.q.val() != 0);
            self.d_x.next = (bit_cast::<512, 256>(self.prev.q.val()) | (bit_cast::<512, 256>(self.s_rdata.val()) << 256)) >> 16;
        }
        self.d_j16.next = bit_cast::<48, 16>(self.d_j.val()) << 4;
        // elements 16 j + i in [lo, hi) are inside the image
        self.tlo.next = self.lo.q.val() - self.d_j16.val();
        self.thi.next = self.hi.q.val() - self.d_j16.val();
        self.mlo.next = 0.into();
        if self.tlo.val().get_bit(47) | (self.tlo.val() == 0) {
            self.mlo.next = bits::<16>(0xFFFF);
        } else if self.tlo.val() < 16 {
            self.mlo.next = bits::<16>(0xFFFF) << self.tlo.val().get_bits::<4>(0);
        }
        self.mhi.next = bits::<16>(0xFFFF);
        if self.thi.val().get_bit(47) | (self.thi.val() == 0) {
            self.mhi.next = 0.into();
        } else if self.thi.val() < 16 {
            self.mhi.next = (bits::<16>(1) << self.thi.val().get_bits::<4>(0)) - 1;
        }

        // ---- outputs: chunk wq of the position (16 outputs, fewer in the group's last)
        self.o_i.next = self.w_out.q.val() + bit_cast::<48, 16>(self.c0.q.val()) + (bit_cast::<48, 8>(self.wq.q.val()) << 4);
        self.o_word.next = self.o_i.val().get_bits::<SPM_WORD_BITS>(1);
        self.o_cnt.next = self.nl.q.val() - (bit_cast::<16, 8>(self.wq.q.val()) << 4);
        if self.o_cnt.val() > 16 {
            self.o_cnt.next = 16.into();
        }
        self.o_nw.next = (self.o_cnt.val() + bit_cast::<16, 1>(self.o_i.val().get_bit(0).into()) + 1) >> 1;
        self.o_nw8.next = self.o_nw.val() - 8;
        self.we1.next = bits::<8>(255);
        self.we2.next = 0.into();
        if self.o_nw.val() < 8 {
            self.we1.next = bit_cast::<8, 9>((bits::<9>(1) << self.o_nw.val().get_bits::<4>(0)) - 1);
        }
        if self.o_nw.val() > 8 {
            self.we2.next = bit_cast::<8, 9>((bits::<9>(1) << self.o_nw8.val().get_bits::<4>(0)) - 1);
        }
        self.chunks.next = (self.nl.q.val() + 15) >> 4;
        self.dp.m_off.next = self.o_i.val().get_bit(0);
        self.dp.m_cnt.next = self.o_cnt.val().get_bits::<5>(0);

        // ---- the data side: the line read last cycle, a step of 16 activations
        if self.d_v.q.val() {
            self.prev.d.next = self.s_rdata.val();
        }
        if self.d_step.val() {
            self.progress.next = true;
            self.dp.s_valid.next = true;
            self.dp.s_first.next = self.d_pf.q.val() & (self.d_j.val() == 0);
            self.dp.s_x.next = self.d_x.val().get_bits::<256>(0);
            self.dp.s_mask.next = self.mlo.val() & self.mhi.val();
            self.dp.s_e.next = bit_cast::<16, 48>(self.d_ek.q.val() + self.d_j16.val());
            if self.d_last.q.val() {
                self.dp.s_last.next = true;
                self.owed_inc.next = true;
            }
        }

        // ---- the writer (before the sequencer: its scratchpad reads come first)
        self.w_reads.next = false;
        self.w_fin.next = false;
        match self.wst.q.val() {
            WriterState::Idle => {
                self.wq.d.next = 0.into();
                if self.cap_n.q.val() != 0 {
                    self.wst.d.next = WriterState::Wr;
                }
            }
            WriterState::Wr => {
                self.progress.next = true;
                if !self.o_i.val().get_bit(0) & !self.o_cnt.val().get_bit(0) {
                    // whole words: one write
                    self.s_waddr.next = self.o_word.val();
                    self.s_we.next = self.we1.val();
                    self.wq.d.next = self.wq.q.val() + 1;
                    if bit_cast::<16, 8>(self.wq.q.val()) + 1 == self.chunks.val() {
                        self.w_fin.next = true;
                    }
                } else {
                    // a half word at either end: read the two lines the chunk touches, merge, write
                    self.s_raddr.next = self.o_word.val();
                    self.w_reads.next = true;
                    self.wst.d.next = WriterState::RmwB;
                }
            }
            WriterState::RmwB => {
                self.old_lo.d.next = self.s_rdata.val();
                self.s_raddr.next = self.o_word.val() + 8;
                self.w_reads.next = true;
                self.wst.d.next = WriterState::RmwC;
            }
            WriterState::RmwC => {
                self.old_hi.d.next = self.s_rdata.val();
                self.wst.d.next = WriterState::RmwW1;
            }
            WriterState::RmwW1 => {
                self.s_waddr.next = self.o_word.val();
                self.s_wdata.next = self.dp.m_out.val().get_bits::<256>(0);
                self.s_we.next = self.we1.val();
                self.wst.d.next = WriterState::RmwW2;
            }
            WriterState::RmwW2 => {
                self.s_waddr.next = self.o_word.val() + 8;
                self.s_wdata.next = self.dp.m_out.val().get_bits::<256>(256);
                self.s_we.next = self.we2.val();
                self.wq.d.next = self.wq.q.val() + 1;
                self.wst.d.next = WriterState::Wr;
                if bit_cast::<16, 8>(self.wq.q.val()) + 1 == self.chunks.val() {
                    self.w_fin.next = true;
                }
            }
        }
        if self.w_fin.val() {
            self.wst.d.next = WriterState::Idle;
            self.wb.d.next = self.wb.q.val() + 1;
            self.w_out.d.next = self.w_out.q.val() + bit_cast::<48, 16>(self.cout.q.val());
        }

        match self.state.q.val() {
            CnnState::Idle => {
                if self.iss_valid.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.state.d.next = CnnState::Ck1;
                    if self.opc.val() == self.op_maxpool.val() {
                        self.is_max.d.next = true;
                        self.relu.d.next = false;
                        self.shift.d.next = 0.into();
                        self.big.d.next = false;
                        self.kk_.d.next = bit_cast::<16, 4>(self.iss_word.val().get_bits::<4>(self.fm_k.val().index()));
                        self.st.d.next = bit_cast::<16, 4>(self.iss_word.val().get_bits::<4>(self.fm_stride.val().index()));
                        self.h.d.next = bit_cast::<16, 12>(self.iss_word.val().get_bits::<12>(self.fm_h.val().index()));
                        self.w.d.next = bit_cast::<16, 12>(self.iss_word.val().get_bits::<12>(self.fm_w.val().index()));
                        self.cin.d.next = bit_cast::<16, 12>(self.iss_word.val().get_bits::<12>(self.fm_c.val().index()));
                        self.cout.d.next = bit_cast::<16, 12>(self.iss_word.val().get_bits::<12>(self.fm_c.val().index()));
                        self.pad.d.next = 0.into();
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.fm_dst.val().index());
                        self.src.d.next = self.iss_word.val().get_bits::<20>(self.fm_src.val().index());
                        self.wline.d.next = 0.into();
                    } else {
                        self.is_max.d.next = false;
                        self.relu.d.next = self.iss_word.val().get_bit(self.f_relu.val().index());
                        self.shift.d.next = self.iss_word.val().get_bits::<6>(self.f_shift.val().index());
                        self.dst.d.next = self.iss_word.val().get_bits::<20>(self.f_dst.val().index());
                        self.src.d.next = self.iss_word.val().get_bits::<20>(self.f_src.val().index());
                        self.wline.d.next = self.iss_word.val().get_bits::<32>(self.f_w.val().index());
                        self.h.d.next = self.iss_aux.val().get_bits::<16>(0);
                        self.w.d.next = self.iss_aux.val().get_bits::<16>(17);
                        self.cin.d.next = self.iss_aux.val().get_bits::<16>(34);
                        self.cout.d.next = self.iss_aux.val().get_bits::<16>(51);
                        self.kk_.d.next = self.iss_aux.val().get_bits::<16>(68);
                        self.st.d.next = self.iss_aux.val().get_bits::<16>(85);
                        self.pad.d.next = self.iss_aux.val().get_bits::<16>(102);
                        self.big.d.next = self.iss_aux.val().get_bit(16)
                            | self.iss_aux.val().get_bit(33)
                            | self.iss_aux.val().get_bit(50)
                            | self.iss_aux.val().get_bit(67)
                            | self.iss_aux.val().get_bit(84)
                            | self.iss_aux.val().get_bit(101)
                            | self.iss_aux.val().get_bit(118);
                    }
                }
            }
            CnnState::Ck1 => {
                // (a value of 2^16 or more has its low 16 bits here: the rule on zeros comes first, as in
                // the functional simulator, so a zero is checked on the whole value)
                self.kk.d.next = self.kk_.q.val() * self.kk_.q.val();
                self.kc.d.next = self.kk_.q.val() * self.cin.q.val();
                self.wc.d.next = self.w.q.val() * self.cin.q.val();
                self.sc.d.next = self.st.q.val() * self.cin.q.val();
                self.pcin.d.next = self.pad.q.val() * self.cin.q.val();
                self.hw.d.next = self.h.q.val() * self.w.q.val();
                self.state.d.next = CnnState::Ck2;
                if self.big.q.val()
                    | (bit_cast::<18, 16>(self.kk_.q.val()) > bit_cast::<18, 16>(self.h.q.val()) + (bit_cast::<18, 16>(self.pad.q.val()) << 1))
                    | (bit_cast::<18, 16>(self.kk_.q.val()) > bit_cast::<18, 16>(self.w.q.val()) + (bit_cast::<18, 16>(self.pad.q.val()) << 1))
                {
                    self.trap_r.d.next = true;
                    self.state.d.next = CnnState::Idle;
                }
                if (self.h.q.val() == 0) | (self.w.q.val() == 0) | (self.cin.q.val() == 0) | (self.cout.q.val() == 0)
                    | (self.kk_.q.val() == 0) | (self.st.q.val() == 0)
                {
                    self.trap_r.d.next = true;
                    self.state.d.next = CnnState::Idle;
                }
                self.trap_code_r.d.next = self.c_bad.val();
                self.trap_info_r.d.next = 0.into();
            }
            CnnState::Ck2 => {
                self.kkc.d.next = bit_cast::<48, 32>(self.kk.q.val().get_bits::<16>(0) * self.cin.q.val()) + self.kk_hi.val();
                self.hwc.d.next = bit_cast::<48, 32>(self.hw.q.val().get_bits::<16>(0) * self.cin.q.val())
                    + (bit_cast::<48, 32>(self.hw.q.val().get_bits::<16>(16) * self.cin.q.val()) << 16);
                self.swc.d.next = bit_cast::<48, 32>(self.wc.q.val().get_bits::<16>(0) * self.st.q.val())
                    + (bit_cast::<48, 32>(self.wc.q.val().get_bits::<16>(16) * self.st.q.val()) << 16);
                self.pwc.d.next = bit_cast::<48, 32>(self.wc.q.val().get_bits::<16>(0) * self.pad.q.val())
                    + (bit_cast::<48, 32>(self.wc.q.val().get_bits::<16>(16) * self.pad.q.val()) << 16);
                self.skc.d.next = bit_cast::<48, 32>(self.kc.q.val().get_bits::<16>(0) * self.st.q.val())
                    + (bit_cast::<48, 32>(self.kc.q.val().get_bits::<16>(16) * self.st.q.val()) << 16);
                self.pkc.d.next = bit_cast::<48, 32>(self.kc.q.val().get_bits::<16>(0) * self.pad.q.val())
                    + (bit_cast::<48, 32>(self.kc.q.val().get_bits::<16>(16) * self.pad.q.val()) << 16);
                // the dividers: (h + 2 pad - k) / stride and (w + 2 pad - k) / stride
                self.dv_nh.d.next = bit_cast::<18, 16>(self.h.q.val()) + (bit_cast::<18, 16>(self.pad.q.val()) << 1) - bit_cast::<18, 16>(self.kk_.q.val());
                self.dv_nw.d.next = bit_cast::<18, 16>(self.w.q.val()) + (bit_cast::<18, 16>(self.pad.q.val()) << 1) - bit_cast::<18, 16>(self.kk_.q.val());
                self.dv_rh.d.next = 0.into();
                self.dv_rw.d.next = 0.into();
                self.dv_qh.d.next = 0.into();
                self.dv_qw.d.next = 0.into();
                self.dv_i.d.next = 0.into();
                self.state.d.next = CnnState::CkDiv;
                // one output channel's kernel fits a lane's buffer; the shift fits the accumulator
                if !self.is_max.q.val()
                    & (((bit_cast::<48, 32>(self.kk.q.val().get_bits::<16>(0) * self.cin.q.val()) + self.kk_hi.val()) << 1) > self.max_kernel_bytes.val())
                {
                    self.trap_r.d.next = true;
                    self.state.d.next = CnnState::Idle;
                }
                if !self.is_max.q.val() & (self.shift.q.val() >= 48) {
                    self.trap_r.d.next = true;
                    self.state.d.next = CnnState::Idle;
                }
            }
            CnnState::CkDiv => {
                // restoring division, a quotient bit per cycle (18 bits); the weights' count beside it
                self.weights.d.next = bit_cast::<48, 32>(self.kkc.q.val().get_bits::<16>(0) * self.cout.q.val());
                self.lkkc.d.next = bit_cast::<48, 32>(self.kkc.q.val().get_bits::<16>(0) * self.lanes.val());
                self.dv_nh.d.next = self.dv_nh.q.val() << 1;
                self.dv_nw.d.next = self.dv_nw.q.val() << 1;
                self.dv_rh.d.next = self.dvh.val();
                self.dv_qh.d.next = self.dv_qh.q.val() << 1;
                if self.dvh.val() >= bit_cast::<18, 16>(self.st.q.val()) {
                    self.dv_rh.d.next = self.dvh.val() - bit_cast::<18, 16>(self.st.q.val());
                    self.dv_qh.d.next = (self.dv_qh.q.val() << 1) | bits::<18>(1);
                }
                self.dv_rw.d.next = self.dvw.val();
                self.dv_qw.d.next = self.dv_qw.q.val() << 1;
                if self.dvw.val() >= bit_cast::<18, 16>(self.st.q.val()) {
                    self.dv_rw.d.next = self.dvw.val() - bit_cast::<18, 16>(self.st.q.val());
                    self.dv_qw.d.next = (self.dv_qw.q.val() << 1) | bits::<18>(1);
                }
                self.dv_i.d.next = self.dv_i.q.val() + 1;
                if self.dv_i.q.val() == 17 {
                    self.state.d.next = CnnState::CkMul1;
                    self.mul_a.d.next = 0.into();
                    self.mul_b.d.next = 0.into();
                    self.mul_p.d.next = 0.into();
                }
            }
            CnnState::CkMul1 => {
                self.oh.d.next = self.dv_qh.q.val() + 1;
                self.ow.d.next = self.dv_qw.q.val() + 1;
                self.mul_a.d.next = bit_cast::<64, 18>(self.dv_qh.q.val() + 1);
                self.mul_b.d.next = bit_cast::<32, 18>(self.dv_qw.q.val() + 1);
                self.mul_p.d.next = 0.into();
                self.mst.d.next = 0.into();
                self.state.d.next = CnnState::CkMul;
            }
            CnnState::CkMul => {
                self.mul_a.d.next = self.mul_a.q.val() << 1;
                self.mul_b.d.next = self.mul_b.q.val() >> 1;
                if self.mul_b.q.val().get_bit(0) {
                    self.mul_p.d.next = self.mul_p.q.val() + self.mul_a.q.val();
                }
                if self.mul_b.q.val() == 0 {
                    // a product is done: the next one starts
                    self.mul_p.d.next = 0.into();
                    self.mst.d.next = self.mst.q.val() + 1;
                    if self.mst.q.val() == 0 {
                        self.ohow.d.next = self.mul_p.q.val();
                        self.mul_a.d.next = self.mul_p.q.val();
                        self.mul_b.d.next = bit_cast::<32, 16>(self.cout.q.val());
                    } else if self.mst.q.val() == 1 {
                        self.dst_half.d.next = self.mul_p.q.val();
                        self.mul_a.d.next = self.ohow.q.val();
                        self.mul_b.d.next = bit_cast::<32, 48>(self.weights.q.val());
                    } else {
                        self.macs_n.d.next = self.mul_p.q.val();
                        self.state.d.next = CnnState::CkSpan;
                    }
                }
            }
            CnnState::CkSpan => {
                self.wbytes.d.next = (((bit_cast::<64, 48>(self.weights.q.val()) << 1) + 3) >> 2 << 2)
                    + (bit_cast::<64, 16>(self.cout.q.val()) << 2);
                self.gbw.d.next = bit_cast::<48, 64>(((bit_cast::<64, 48>(self.weights.q.val()) << 1) + 3) >> 2);
                self.gs0.d.next = 0.into();
                self.c0.d.next = 0.into();
                self.state.d.next = CnnState::Group;
                if (self.dst_b.val() < self.src_e.val()) & (self.src_b.val() < self.dst_e.val()) {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_bad.val();
                    self.trap_info_r.d.next = 0.into();
                    self.state.d.next = CnnState::Idle;
                } else if self.dst_e.val() > self.spm_bytes.val() {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_spm.val();
                    self.trap_info_r.d.next = self.dst_b.val();
                    if self.dst_b.val() < self.spm_bytes.val() {
                        self.trap_info_r.d.next = self.spm_bytes.val();
                    }
                    self.state.d.next = CnnState::Idle;
                } else if self.src_e.val() > self.spm_bytes.val() {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_spm.val();
                    self.trap_info_r.d.next = self.src_b.val();
                    if self.src_b.val() < self.spm_bytes.val() {
                        self.trap_info_r.d.next = self.spm_bytes.val();
                    }
                    self.state.d.next = CnnState::Idle;
                } else if !self.is_max.q.val()
                    & (bit_cast::<80, 64>(self.w_b.val())
                        + bit_cast::<80, 64>(((bit_cast::<64, 48>(self.weights.q.val()) << 1) + 3) >> 2 << 2)
                        + (bit_cast::<80, 16>(self.cout.q.val()) << 2)
                        > self.mem_bytes.val())
                {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_mem.val();
                    self.trap_info_r.d.next = self.w_b.val();
                    if bit_cast::<80, 64>(self.w_b.val()) < self.mem_bytes.val() {
                        self.trap_info_r.d.next = bit_cast::<64, 80>(self.mem_bytes.val());
                    }
                    self.state.d.next = CnnState::Idle;
                }
            }
            CnnState::Group => {
                // the group's channels: pe_lanes (conv) or 16 (maxpool) from c0
                self.nl.d.next = self.cout.q.val() - self.c0.q.val();
                if self.is_max.q.val() {
                    if self.cout.q.val() - self.c0.q.val() > 16 {
                        self.nl.d.next = 16.into();
                    }
                } else if self.cout.q.val() - self.c0.q.val() > self.lanes.val() {
                    self.nl.d.next = self.lanes.val();
                }
                self.oy.d.next = 0.into();
                self.ox.d.next = 0.into();
                self.y0.d.next = bits::<48>(0) - bit_cast::<48, 16>(self.pad.q.val());
                self.x0.d.next = bits::<48>(0) - bit_cast::<48, 16>(self.pad.q.val());
                self.ybwc.d.next = bits::<48>(0) - self.pwc.q.val();
                self.xc.d.next = bits::<48>(0) - bit_cast::<48, 32>(self.pcin.q.val());
                self.nyk.d.next = self.pkc.q.val();
                self.w_out.d.next = bit_cast::<48, 20>(self.dst.q.val()) << 1;
                self.rq_ph.d.next = false;
                self.rq_r.d.next = 0.into();
                self.rq_l.d.next = 0.into();
                self.rq_s.d.next = self.gs0.q.val();
                self.rq_done.d.next = false;
                self.rs_ph.d.next = false;
                self.rs_r.d.next = 0.into();
                self.rs_l.d.next = 0.into();
                self.rs_s.d.next = self.gs0.q.val();
                self.state.d.next = CnnState::Load;
                if self.is_max.q.val() {
                    self.state.d.next = CnnState::Pos;
                }
            }
            CnnState::Load => {
                if !self.rq_done.q.val() {
                    self.m_req.next = true;
                    if self.m_req_ready.val() {
                        self.progress.next = true;
                        self.rq_r.d.next = self.rq_r.q.val() + 1;
                        if !self.rq_ph.q.val() {
                            if self.rq_r.q.val() + 1 == self.nb.val() {
                                self.rq_ph.d.next = true;
                                self.rq_r.d.next = 0.into();
                            }
                        } else if self.rq_r.q.val() + 1 == self.rq_nl.val() {
                            self.rq_r.d.next = 0.into();
                            self.rq_l.d.next = self.rq_l.q.val() + 1;
                            self.rq_s.d.next = self.rq_s.q.val() + self.kkc.q.val();
                            if self.rq_last.val() {
                                self.rq_done.d.next = true;
                            }
                        }
                    }
                }
                if self.m_resp.val() {
                    self.progress.next = true;
                    self.rs_r.d.next = self.rs_r.q.val() + 1;
                    if !self.rs_ph.q.val() {
                        self.dp.b_valid.next = true;
                        if self.rs_r.q.val() + 1 == self.nb.val() {
                            self.rs_ph.d.next = true;
                            self.rs_r.d.next = 0.into();
                        }
                    } else {
                        self.dp.ld_valid.next = true;
                        if self.rs_r.q.val() + 1 == self.rs_nl.val() {
                            self.rs_r.d.next = 0.into();
                            self.rs_l.d.next = self.rs_l.q.val() + 1;
                            self.rs_s.d.next = self.rs_s.q.val() + self.kkc.q.val();
                            if self.rs_last.val() {
                                self.state.d.next = CnnState::Pos;
                            }
                        }
                    }
                }
            }
            CnnState::Pos => {
                // the position's first row inside the image, its kernel offset, the rows, the columns
                self.q_r.d.next = 0.into();
                self.q_rx.d.next = 0.into();
                self.q_pf.d.next = true;
                self.q_base.d.next = (bit_cast::<48, 20>(self.src.q.val()) << 1) + self.xc.q.val();
                if !self.y0.q.val().get_bit(47) {
                    self.q_base.d.next = (bit_cast::<48, 20>(self.src.q.val()) << 1) + self.ybwc.q.val() + self.xc.q.val();
                }
                self.q_ek.d.next = 0.into();
                if self.y0.q.val().get_bit(47) {
                    self.q_ek.d.next = self.nyk.q.val();
                }
                self.lo.d.next = 0.into();
                if self.xc.q.val().get_bit(47) {
                    self.lo.d.next = bits::<48>(0) - self.xc.q.val();
                }
                self.hi.d.next = bit_cast::<48, 32>(self.kc.q.val());
                if self.wx.val() < bit_cast::<48, 32>(self.kc.q.val()) {
                    self.hi.d.next = self.wx.val();
                }
                if self.wx.val().get_bit(47) {
                    self.hi.d.next = 0.into();
                }
                self.q_rows.d.next = bit_cast::<32, 48>(self.ky_hi.val() - self.ky_lo.val());
                if self.is_max.q.val() {
                    self.q_base.d.next = (bit_cast::<48, 20>(self.src.q.val()) << 1) + self.ybwc.q.val() + self.xc.q.val()
                        + bit_cast::<48, 16>(self.c0.q.val());
                    self.lo.d.next = 0.into();
                    self.hi.d.next = 16.into();
                    self.q_rows.d.next = self.kk.q.val();
                }
                // (a position whose last step goes out now counts already)
                if (self.owed.q.val() < 3) | ((self.owed.q.val() == 3) & !self.owed_inc.val()) {
                    self.state.d.next = CnnState::Stream;
                    if !self.is_max.q.val() & (self.ky_hi.val().get_bit(47) | (self.ky_hi.val() <= self.ky_lo.val())) {
                        // no kernel row inside the image: the output is the bias alone, one empty step (in a
                        // cycle the data side leaves)
                        self.state.d.next = CnnState::Pos;
                        if !self.d_v.q.val() {
                            self.dp.s_valid.next = true;
                            self.dp.s_first.next = true;
                            self.dp.s_last.next = true;
                            self.owed_inc.next = true;
                            self.pos_done.next = true;
                        }
                    }
                }
            }
            CnnState::Stream => {
                // a line of the current row per cycle (but in the cycles the writer reads)
                if !self.w_reads.val() {
                    self.s_raddr.next = bit_cast::<SPM_WORD_BITS, 48>((self.q_base.q.val() >> 1) + (bit_cast::<48, 16>(self.q_r.q.val()) << 3));
                    self.d_v.d.next = true;
                    self.d_r.d.next = self.q_r.q.val();
                    self.d_odd.d.next = self.q_odd.val();
                    self.d_ek.d.next = self.q_ek.q.val();
                    self.d_pf.d.next = self.q_pf.q.val();
                    self.d_last.d.next = self.q_lastline.val() & (self.q_rows.q.val() == 1);
                    self.q_r.d.next = self.q_r.q.val() + 1;
                    if self.q_lastline.val() {
                        self.q_r.d.next = 0.into();
                        self.q_pf.d.next = false;
                        self.q_rows.d.next = self.q_rows.q.val() - 1;
                        self.q_ek.d.next = self.q_ek.q.val() + bit_cast::<48, 32>(self.kc.q.val());
                        self.q_base.d.next = self.q_base.q.val() + bit_cast::<48, 32>(self.wc.q.val());
                        if self.is_max.q.val() {
                            // the window's next column, or the first column of its next row
                            self.q_rx.d.next = self.q_rx.q.val() + 1;
                            self.q_base.d.next = self.q_base.q.val() + bit_cast::<48, 16>(self.cin.q.val());
                            if self.q_rx.q.val() + 1 == self.kk_.q.val() {
                                self.q_rx.d.next = 0.into();
                                self.q_base.d.next = self.q_base.q.val() + bit_cast::<48, 32>(self.wc.q.val())
                                    - bit_cast::<48, 32>(self.kc.q.val())
                                    + bit_cast::<48, 16>(self.cin.q.val());
                            }
                        }
                        if self.q_rows.q.val() == 1 {
                            // the position's last read: the next position (its last step goes out next cycle)
                            self.pos_done.next = true;
                            self.state.d.next = CnnState::Pos;
                        }
                    }
                }
            }
            CnnState::GEnd => {
                // (the last position's last step may go out this cycle: it is owed from the next)
                if (self.owed.q.val() == 0) & !self.d_v.q.val() {
                    self.state.d.next = CnnState::Group;
                    if self.is_max.q.val() {
                        self.c0.d.next = self.c0.q.val() + 16;
                        if self.cout.q.val() - self.c0.q.val() <= 16 {
                            self.state.d.next = CnnState::Fin;
                        }
                    } else {
                        self.c0.d.next = self.c0.q.val() + self.lanes.val();
                        self.gs0.d.next = self.gs0.q.val() + self.lkkc.q.val();
                        self.gbw.d.next = self.gbw.q.val() + bit_cast::<48, 16>(self.lanes.val());
                        if self.cout.q.val() - self.c0.q.val() <= self.lanes.val() {
                            self.state.d.next = CnnState::Fin;
                        }
                    }
                }
            }
            CnnState::Fin => {
                if !self.is_max.q.val() {
                    self.rd_total.d.next = self.rd_total.q.val() + self.wbytes.q.val();
                    self.macs_total.d.next = self.macs_total.q.val() + self.macs_n.q.val();
                }
                self.progress.next = true;
                self.state.d.next = CnnState::Idle;
            }
        }

        // ---- a position's reads are issued: the next position, row of positions, or the group's end
        if self.pos_done.val() {
            self.ox.d.next = self.ox.q.val() + 1;
            self.x0.d.next = self.x0.q.val() + bit_cast::<48, 16>(self.st.q.val());
            self.xc.d.next = self.xc.q.val() + bit_cast::<48, 32>(self.sc.q.val());
            if self.ox.q.val() + 1 == self.ow.q.val() {
                self.ox.d.next = 0.into();
                self.x0.d.next = bits::<48>(0) - bit_cast::<48, 16>(self.pad.q.val());
                self.xc.d.next = bits::<48>(0) - bit_cast::<48, 32>(self.pcin.q.val());
                self.oy.d.next = self.oy.q.val() + 1;
                self.y0.d.next = self.y0.q.val() + bit_cast::<48, 16>(self.st.q.val());
                self.ybwc.d.next = self.ybwc.q.val() + self.swc.q.val();
                self.nyk.d.next = self.nyk.q.val() - self.skc.q.val();
                if self.oy.q.val() + 1 == self.oh.q.val() {
                    self.state.d.next = CnnState::GEnd;
                }
            }
        }

        // ---- the positions owed to the writer, and those captured for it
        if self.dp.o_valid.val() & !self.w_fin.val() {
            self.cap_n.d.next = self.cap_n.q.val() + 1;
        }
        if !self.dp.o_valid.val() & self.w_fin.val() {
            self.cap_n.d.next = self.cap_n.q.val() - 1;
        }
        if self.owed_inc.val() & !self.w_fin.val() {
            self.owed.d.next = self.owed.q.val() + 1;
        }
        if !self.owed_inc.val() & self.w_fin.val() {
            self.owed.d.next = self.owed.q.val() - 1;
        }

        if self.flush.val() | self.reset.val() {
            self.state.d.next = CnnState::Idle;
            self.wst.d.next = WriterState::Idle;
            self.owed.d.next = 0.into();
            self.cap_n.d.next = 0.into();
            self.wb.d.next = 0.into();
            self.trap_r.d.next = false;
        }
        if self.reset.val() {
            self.rd_total.d.next = 0.into();
            self.macs_total.d.next = 0.into();
        }
    }
}

/// A [`Cnn`] of `config` ready to simulate or emit.
pub fn cnn_top(config: &OverlayConfig) -> Cnn {
    connect_top!(
        Cnn::new(config, dp::dp_verilog(config)),
        clock,
        reset,
        flush,
        iss_valid,
        iss_word,
        iss_pc,
        iss_aux,
        m_req_ready,
        m_resp,
        m_rdata,
        s_rdata
    )
}

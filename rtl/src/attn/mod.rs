//! The attention unit (rust-hdl HDL): `kvappend` of docs/isa.md so far; `attn` (the scores, the online
//! softmax and the KV history buffer) is the next step and is not accepted yet (a program using it stops at
//! the watchdog).
//!
//! `kvappend` stores one KV head's K and V rows of position `P = r[pos]` from the scratchpad to device memory
//! (`32 (k + P kv_stride)`, `head_dim` FP16 each: whole lines, since `head_dim` is a multiple of 16) and, when
//! `kv_present` is not 0xFFFFFFFF, sets presence byte `P` to 1. It is checked before it writes anything, in
//! the functional simulator's order: the `head_dim` CSR, the two scratchpad spans, the two rows' and the
//! presence byte's device-memory spans; a violation traps with its code and ERROR_INFO (the first faulting
//! byte). Then each line is read from the scratchpad and offered to the memory the next cycle: K's lines,
//! V's, and the presence byte as a one-byte write (in that order, so V wins where the rows overlap, as in the
//! functional simulator).
//!
//! The unit reads the CSRs `head_dim`, `kv_stride`, `attn_scale` and `kv_present` as the core saw them when
//! it issued the instruction (the issue queue's auxiliary operand, CSR `c` at bits `32c..32c+32`).

use crate::ctrl::{constant as k, decode};
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use opu_hw::isa::Csr;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum AttnState {
    Idle,
    /// `head_dim`; the rows' line addresses.
    Check0,
    /// The K and V sources in the scratchpad.
    Check1,
    Check2,
    /// The K row, the V row and the presence byte in device memory.
    Check3,
    Check4,
    Check5,
    /// A row line is read from the scratchpad, then offered to the memory.
    LineRead,
    LineWrite,
    /// The presence byte.
    Mark,
}

#[derive(LogicBlock)]
pub struct AttentionUnit {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,

    // ---- issue (from the core, through the unit's queue): the register operand is `r[pos]`, the auxiliary
    // operand the CSRs 0..4
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub iss_reg: Signal<In, Bits<32>>,
    pub iss_aux: Signal<In, Bits<128>>,
    pub idle: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,

    // ---- device memory: line requests (writes so far)
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_write: Signal<Out, Bit>,
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_wdata: Signal<Out, Bits<256>>,
    pub m_wmask: Signal<Out, Bits<32>>,

    // ---- the scratchpad's line port (`spm::Scratchpad`)
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    pub bytes_written: Signal<Out, Bits<64>>,

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
    kvp: DFF<Bits<32>>,
    /// Line addresses of the K and V rows (`k + P kv_stride`, up to 66 bits) and the presence byte's address.
    krow: DFF<Bits<72>>,
    vrow: DFF<Bits<72>>,
    mark_byte: DFF<Bits<72>>,
    /// The line being written: its index in the row, V's row after K's.
    li: DFF<Bits<8>>,
    second: DFF<Bit>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,
    wr_total: DFF<Bits<64>>,

    // ---- constants
    spm_bytes: Constant<Bits<32>>,
    mem_bytes: Constant<Bits<72>>,
    op_kvappend: Constant<Bits<8>>,
    f_ksrc: Constant<Bits<8>>,
    f_vsrc: Constant<Bits<8>>,
    f_k: Constant<Bits<8>>,
    f_v: Constant<Bits<8>>,
    csr_hd: Constant<Bits<8>>,
    csr_stride: Constant<Bits<8>>,
    csr_kvp: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_mem: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,
    ones32: Constant<Bits<32>>,
    u64_max: Constant<Bits<72>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    supported: Signal<Local, Bit>,
    raise: Signal<Local, Bit>,
    raise_code: Signal<Local, Bits<4>>,
    raise_info: Signal<Local, Bits<64>>,
    row_bytes: Signal<Local, Bits<32>>,
    p_ll: Signal<Local, Bits<32>>,
    p_lh: Signal<Local, Bits<32>>,
    p_hl: Signal<Local, Bits<32>>,
    p_hh: Signal<Local, Bits<32>>,
    pstride: Signal<Local, Bits<72>>,
    spm_start: Signal<Local, Bits<32>>,
    spm_first: Signal<Local, Bits<64>>,
    mem_start: Signal<Local, Bits<72>>,
    mem_len: Signal<Local, Bits<72>>,
    mem_first: Signal<Local, Bits<64>>,
    nlines: Signal<Local, Bits<8>>,
    row_line: Signal<Local, Bits<72>>,
}

impl AttentionUnit {
    pub fn new(config: &OverlayConfig) -> AttentionUnit {
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
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            bytes_written: Default::default(),
            state: Default::default(),
            pc: Default::default(),
            pos: Default::default(),
            ksrc: Default::default(),
            vsrc: Default::default(),
            kline: Default::default(),
            vline: Default::default(),
            hd: Default::default(),
            stride: Default::default(),
            kvp: Default::default(),
            krow: Default::default(),
            vrow: Default::default(),
            mark_byte: Default::default(),
            li: Default::default(),
            second: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            wr_total: Default::default(),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            mem_bytes: k(config.device_memory_bytes),
            op_kvappend: k(u64::from(decode::opcode("kvappend"))),
            f_ksrc: f("kvappend", "ksrc"),
            f_vsrc: f("kvappend", "vsrc"),
            f_k: f("kvappend", "k"),
            f_v: f("kvappend", "v"),
            csr_hd: k(32 * Csr::HeadDim as u64),
            csr_stride: k(32 * Csr::KvStride as u64),
            csr_kvp: k(32 * Csr::KvPresent as u64),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_mem: k(ErrorCode::MemOutOfRange as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            ones32: k(0xFFFF_FFFF),
            u64_max: k(u64::MAX),
            opc: Default::default(),
            supported: Default::default(),
            raise: Default::default(),
            raise_code: Default::default(),
            raise_info: Default::default(),
            row_bytes: Default::default(),
            p_ll: Default::default(),
            p_lh: Default::default(),
            p_hl: Default::default(),
            p_hh: Default::default(),
            pstride: Default::default(),
            spm_start: Default::default(),
            spm_first: Default::default(),
            mem_start: Default::default(),
            mem_len: Default::default(),
            mem_first: Default::default(),
            nlines: Default::default(),
            row_line: Default::default(),
        }
    }
}

impl Logic for AttentionUnit {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, pos, ksrc, vsrc, kline, vline, hd, stride, kvp, krow, vrow, mark_byte, li, second,
            trap_r, trap_code_r, trap_info_r, wr_total
        );

        // ---- issue: kvappend (attn is not built yet)
        self.opc.next = self.iss_word.val().get_bits::<8>(0);
        self.supported.next = self.opc.val() == self.op_kvappend.val();
        self.idle.next = self.state.q.val() == AttnState::Idle;
        self.iss_ready.next = (self.state.q.val() == AttnState::Idle) & self.supported.val() & !self.trap_r.q.val();
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        self.trap_r.d.next = false;
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.bytes_written.next = self.wr_total.q.val();

        // ---- address arithmetic: P x kv_stride in 64 bits from four 16 x 16 products
        self.row_bytes.next = self.hd.q.val() << 1;
        self.nlines.next = self.hd.q.val().get_bits::<8>(4);
        self.p_ll.next = self.pos.q.val().get_bits::<16>(0) * self.stride.q.val().get_bits::<16>(0);
        self.p_lh.next = self.pos.q.val().get_bits::<16>(0) * self.stride.q.val().get_bits::<16>(16);
        self.p_hl.next = self.pos.q.val().get_bits::<16>(16) * self.stride.q.val().get_bits::<16>(0);
        self.p_hh.next = self.pos.q.val().get_bits::<16>(16) * self.stride.q.val().get_bits::<16>(16);
        self.pstride.next = bit_cast::<72, 32>(self.p_ll.val())
            + (bit_cast::<72, 32>(self.p_lh.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hl.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hh.val()) << 32);

        // ---- span checks: the scratchpad span of Check1/Check2, the memory span of Check3..5, and their
        // first faulting bytes as the functional simulator reports them
        self.raise.next = false;
        self.raise_code.next = self.c_bad.val();
        self.raise_info.next = 0.into();
        self.spm_start.next = bit_cast::<32, 20>(self.ksrc.q.val()) << 2;
        if self.state.q.val() == AttnState::Check2 {
            self.spm_start.next = bit_cast::<32, 20>(self.vsrc.q.val()) << 2;
        }
        self.spm_first.next = bit_cast::<64, 32>(self.spm_start.val());
        if self.spm_start.val() < self.spm_bytes.val() {
            self.spm_first.next = bit_cast::<64, 32>(self.spm_bytes.val());
        }
        self.mem_start.next = self.krow.q.val() << 5;
        self.mem_len.next = bit_cast::<72, 32>(self.row_bytes.val());
        if self.state.q.val() == AttnState::Check4 {
            self.mem_start.next = self.vrow.q.val() << 5;
        }
        if self.state.q.val() == AttnState::Check5 {
            self.mem_start.next = self.mark_byte.q.val();
            self.mem_len.next = 1.into();
        }
        self.mem_first.next = self.mem_bytes.val().get_bits::<64>(0);
        if self.mem_start.val() >= self.mem_bytes.val() {
            self.mem_first.next = self.mem_start.val().get_bits::<64>(0);
            if self.mem_start.val() > self.u64_max.val() {
                self.mem_first.next = self.u64_max.val().get_bits::<64>(0);
            }
        }

        // ---- the memory and the scratchpad: a row line read the cycle before it is offered
        self.row_line.next = self.krow.q.val() + bit_cast::<72, 8>(self.li.q.val());
        self.s_raddr.next = self.ksrc.q.val() + (bit_cast::<20, 8>(self.li.q.val()) << 3);
        if self.second.q.val() {
            self.row_line.next = self.vrow.q.val() + bit_cast::<72, 8>(self.li.q.val());
            self.s_raddr.next = self.vsrc.q.val() + (bit_cast::<20, 8>(self.li.q.val()) << 3);
        }
        self.s_we.next = 0.into();
        self.s_waddr.next = 0.into();
        self.s_wdata.next = 0.into();
        self.m_req.next = false;
        self.m_write.next = true;
        self.m_addr.next = self.row_line.val().get_bits::<64>(0);
        self.m_wdata.next = self.s_rdata.val();
        self.m_wmask.next = self.ones32.val();

        match self.state.q.val() {
            AttnState::Idle => {
                if self.iss_valid.val() & self.supported.val() & !self.trap_r.q.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.pos.d.next = self.iss_reg.val();
                    self.ksrc.d.next = self.iss_word.val().get_bits::<20>(self.f_ksrc.val().index());
                    self.vsrc.d.next = self.iss_word.val().get_bits::<20>(self.f_vsrc.val().index());
                    self.kline.d.next = self.iss_word.val().get_bits::<32>(self.f_k.val().index());
                    self.vline.d.next = self.iss_word.val().get_bits::<32>(self.f_v.val().index());
                    self.hd.d.next = self.iss_aux.val().get_bits::<32>(self.csr_hd.val().index());
                    self.stride.d.next = self.iss_aux.val().get_bits::<32>(self.csr_stride.val().index());
                    self.kvp.d.next = self.iss_aux.val().get_bits::<32>(self.csr_kvp.val().index());
                    self.state.d.next = AttnState::Check0;
                }
            }
            AttnState::Check0 => {
                // the head_dim CSR: a multiple of 16 in 16..=1008
                self.krow.d.next = bit_cast::<72, 32>(self.kline.q.val()) + self.pstride.val();
                self.vrow.d.next = bit_cast::<72, 32>(self.vline.q.val()) + self.pstride.val();
                self.mark_byte.d.next = (bit_cast::<72, 32>(self.kvp.q.val()) << 5) + bit_cast::<72, 32>(self.pos.q.val());
                self.state.d.next = AttnState::Check1;
                if (self.hd.q.val() == 0) | (self.hd.q.val().get_bits::<4>(0) != 0) | (self.hd.q.val() > 1023) {
                    self.raise.next = true;
                }
            }
            AttnState::Check1 => {
                self.state.d.next = AttnState::Check2;
                if self.spm_start.val() + self.row_bytes.val() > self.spm_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_spm.val();
                    self.raise_info.next = self.spm_first.val();
                }
            }
            AttnState::Check2 => {
                self.state.d.next = AttnState::Check3;
                if self.spm_start.val() + self.row_bytes.val() > self.spm_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_spm.val();
                    self.raise_info.next = self.spm_first.val();
                }
            }
            AttnState::Check3 => {
                self.state.d.next = AttnState::Check4;
                if self.mem_start.val() + self.mem_len.val() > self.mem_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_mem.val();
                    self.raise_info.next = self.mem_first.val();
                }
            }
            AttnState::Check4 => {
                self.state.d.next = AttnState::Check5;
                if self.mem_start.val() + self.mem_len.val() > self.mem_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_mem.val();
                    self.raise_info.next = self.mem_first.val();
                }
            }
            AttnState::Check5 => {
                self.state.d.next = AttnState::LineRead;
                self.li.d.next = 0.into();
                self.second.d.next = false;
                if (self.kvp.q.val() != self.ones32.val()) & (self.mem_start.val() + self.mem_len.val() > self.mem_bytes.val()) {
                    self.raise.next = true;
                    self.raise_code.next = self.c_mem.val();
                    self.raise_info.next = self.mem_first.val();
                }
            }
            AttnState::LineRead => {
                self.state.d.next = AttnState::LineWrite;
            }
            AttnState::LineWrite => {
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.progress.next = true;
                    self.li.d.next = self.li.q.val() + 1;
                    self.state.d.next = AttnState::LineRead;
                    if self.li.q.val() + 1 == self.nlines.val() {
                        self.li.d.next = 0.into();
                        self.second.d.next = true;
                        self.wr_total.d.next = self.wr_total.q.val() + bit_cast::<64, 32>(self.row_bytes.val());
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
                // byte `P` of the presence bytes: 1
                self.m_req.next = true;
                self.m_addr.next = self.mark_byte.q.val().get_bits::<64>(5);
                self.m_wmask.next = bits::<32>(1) << self.mark_byte.q.val().get_bits::<5>(0);
                self.m_wdata.next = bits::<256>(1) << (bit_cast::<8, 5>(self.mark_byte.q.val().get_bits::<5>(0)) << 3);
                if self.m_req_ready.val() {
                    self.progress.next = true;
                    self.wr_total.d.next = self.wr_total.q.val() + 1;
                    self.state.d.next = AttnState::Idle;
                }
            }
        }

        if self.raise.val() {
            self.trap_r.d.next = true;
            self.trap_code_r.d.next = self.raise_code.val();
            self.trap_info_r.d.next = self.raise_info.val();
            self.state.d.next = AttnState::Idle;
        }
        if self.flush.val() | self.reset.val() {
            self.state.d.next = AttnState::Idle;
            self.trap_r.d.next = false;
        }
        if self.reset.val() {
            self.wr_total.d.next = 0.into();
        }
    }
}

/// An [`AttentionUnit`] of `config` ready to simulate or emit.
pub fn attn_top(config: &OverlayConfig) -> AttentionUnit {
    connect_top!(
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
        s_rdata
    )
}

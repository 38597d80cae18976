//! The DMA unit: `load`, `store`, `load2d`, `store2d` between device memory and the scratchpad, in rust-hdl's
//! own HDL.
//!
//! The scratchpad's line port (`spm::Scratchpad`) takes a 32-byte memory line at any word address, the words
//! past the end of the transfer disabled; a store reads the 8 words of a line and writes the line with a byte
//! mask for a partial last line.
//!
//! An instruction is checked before it moves anything, in the functional simulator's order (operand rules,
//! then for each row the scratchpad span, then the device-memory span); a violation traps with the
//! functional simulator's code and ERROR_INFO (the first faulting byte). Then each row streams: a load keeps
//! requesting lines while the memory accepts them and writes each response as it arrives (responses come in
//! order); a store reads a line from the scratchpad the cycle before it offers it to the memory. One instruction at
//! a time (the issue port is ready when the unit is idle).

use crate::ctrl::{constant as k, decode};
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum DmaState {
    Idle,
    /// Operand rules, then one row's spans per cycle.
    Check,
    /// Start of a row's transfer.
    Row,
    Load,
    StoreRead,
    StoreWrite,
}

#[derive(LogicBlock)]
pub struct Dma {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,

    // ---- issue (from the core)
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub iss_reg: Signal<In, Bits<32>>,
    pub idle: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,

    // ---- device memory: one request/response port, 32-byte lines, read responses in order
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_write: Signal<Out, Bit>,
    /// Line address (byte address / 32).
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_wdata: Signal<Out, Bits<256>>,
    /// Byte enables of a write.
    pub m_wmask: Signal<Out, Bits<32>>,
    pub m_resp: Signal<In, Bit>,
    pub m_rdata: Signal<In, Bits<256>>,

    // ---- the scratchpad's line port (`spm::Scratchpad`): the words at a word address, line order; read
    // data one cycle later
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    pub bytes_read: Signal<Out, Bits<64>>,
    pub bytes_written: Signal<Out, Bits<64>>,

    // ---- state
    state: DFF<DmaState>,
    pc: DFF<Bits<32>>,
    store: DFF<Bit>,
    two_d: DFF<Bit>,
    rows: DFF<Bits<12>>,
    /// Row index (checking, then copying).
    row: DFF<Bits<12>>,
    /// Bytes per row.
    nbytes: DFF<Bits<24>>,
    /// First scratchpad word and memory line of row 0, and their per-row strides.
    spm0: DFF<Bits<20>>,
    line0: DFF<Bits<72>>,
    spm_stride: DFF<Bits<20>>,
    mem_stride: DFF<Bits<20>>,
    /// The current row's first scratchpad word and memory line.
    rspm: DFF<Bits<36>>,
    rline: DFF<Bits<72>>,
    /// Lines of the current row requested (load) or written (store), and lines received (load).
    req_k: DFF<Bits<20>>,
    resp_k: DFF<Bits<20>>,
    rd_total: DFF<Bits<64>>,
    wr_total: DFF<Bits<64>>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,

    // ---- constants
    mem_bytes: Constant<Bits<80>>,
    spm_bytes: Constant<Bits<40>>,
    op_load: Constant<Bits<8>>,
    op_store: Constant<Bits<8>>,
    op_load2d: Constant<Bits<8>>,
    op_store2d: Constant<Bits<8>>,
    /// Field offsets: 1-D (`spm mem bytes stride`) and 2-D (`spm mem row_bytes rows mem_stride spm_stride`).
    f_spm: Constant<Bits<8>>,
    f_mem: Constant<Bits<8>>,
    f_bytes: Constant<Bits<8>>,
    f_stride: Constant<Bits<8>>,
    f2_spm: Constant<Bits<8>>,
    f2_mem: Constant<Bits<8>>,
    f2_row_bytes: Constant<Bits<8>>,
    f2_rows: Constant<Bits<8>>,
    f2_mem_stride: Constant<Bits<8>>,
    f2_spm_stride: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_mem: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,
    ones64: Constant<Bits<64>>,
    ones32: Constant<Bits<32>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    /// `mem + reg * stride` (lines) from 16 x 16 partial products.
    idx_line: Signal<Local, Bits<72>>,
    p_ll: Signal<Local, Bits<32>>,
    p_lh: Signal<Local, Bits<32>>,
    p_hl: Signal<Local, Bits<32>>,
    p_hh: Signal<Local, Bits<32>>,
    spm_byte: Signal<Local, Bits<40>>,
    mem_byte: Signal<Local, Bits<80>>,
    nlines: Signal<Local, Bits<20>>,
    nwords: Signal<Local, Bits<24>>,
    k: Signal<Local, Bits<20>>,
    /// The scratchpad word of line `k`.
    s_word: Signal<Local, Bits<SPM_WORD_BITS>>,
    kd: Signal<Local, Bits<20>>,
    rem_words: Signal<Local, Bits<24>>,
    jmask: Signal<Local, Bits<8>>,
    /// The current row's last line was written (load) or taken (store); move to the next row.
    row_done: Signal<Local, Bit>,
    next_row: Signal<Local, Bit>,
}

impl Dma {
    pub fn new(config: &OverlayConfig) -> Dma {
        let f = |m: &str, n: &str| k::<8>(u64::from(decode::field(m, n).offset));
        for m in ["store"] {
            for n in ["spm", "mem", "bytes", "idx", "stride"] {
                assert_eq!(decode::field(m, n), decode::field("load", n), "`{m}.{n}` sits where `load.{n}` does");
            }
        }
        for n in ["spm", "mem", "row_bytes", "rows", "mem_stride", "spm_stride"] {
            assert_eq!(decode::field("store2d", n), decode::field("load2d", n), "`store2d.{n}`");
        }
        assert!(u64::from(config.scratchpad_bytes) <= 4u64 << SPM_WORD_BITS);
        Dma {
            clock: Default::default(),
            reset: Default::default(),
            flush: Default::default(),
            iss_valid: Default::default(),
            iss_ready: Default::default(),
            iss_word: Default::default(),
            iss_pc: Default::default(),
            iss_reg: Default::default(),
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
            m_resp: Default::default(),
            m_rdata: Default::default(),
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            bytes_read: Default::default(),
            bytes_written: Default::default(),
            state: Default::default(),
            pc: Default::default(),
            store: Default::default(),
            two_d: Default::default(),
            rows: Default::default(),
            row: Default::default(),
            nbytes: Default::default(),
            spm0: Default::default(),
            line0: Default::default(),
            spm_stride: Default::default(),
            mem_stride: Default::default(),
            rspm: Default::default(),
            rline: Default::default(),
            req_k: Default::default(),
            resp_k: Default::default(),
            rd_total: Default::default(),
            wr_total: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            mem_bytes: Constant::new(config.device_memory_bytes.to_bits()),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            op_load: k(u64::from(decode::opcode("load"))),
            op_store: k(u64::from(decode::opcode("store"))),
            op_load2d: k(u64::from(decode::opcode("load2d"))),
            op_store2d: k(u64::from(decode::opcode("store2d"))),
            f_spm: f("load", "spm"),
            f_mem: f("load", "mem"),
            f_bytes: f("load", "bytes"),
            f_stride: f("load", "stride"),
            f2_spm: f("load2d", "spm"),
            f2_mem: f("load2d", "mem"),
            f2_row_bytes: f("load2d", "row_bytes"),
            f2_rows: f("load2d", "rows"),
            f2_mem_stride: f("load2d", "mem_stride"),
            f2_spm_stride: f("load2d", "spm_stride"),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_mem: k(ErrorCode::MemOutOfRange as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            ones64: k(u64::MAX),
            ones32: k(0xFFFF_FFFF),
            opc: Default::default(),
            idx_line: Default::default(),
            p_ll: Default::default(),
            p_lh: Default::default(),
            p_hl: Default::default(),
            p_hh: Default::default(),
            spm_byte: Default::default(),
            mem_byte: Default::default(),
            nlines: Default::default(),
            nwords: Default::default(),
            k: Default::default(),
            s_word: Default::default(),
            kd: Default::default(),
            rem_words: Default::default(),
            jmask: Default::default(),
            row_done: Default::default(),
            next_row: Default::default(),
        }
    }
}

impl Logic for Dma {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, store, two_d, rows, row, nbytes, spm0, line0, spm_stride, mem_stride, rspm, rline,
            req_k, resp_k, rd_total, wr_total, trap_r, trap_code_r, trap_info_r
        );
        self.idle.next = self.state.q.val() == DmaState::Idle;
        self.iss_ready.next = self.state.q.val() == DmaState::Idle;
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.trap_r.d.next = false;
        self.bytes_read.next = self.rd_total.q.val();
        self.bytes_written.next = self.wr_total.q.val();
        self.m_req.next = false;
        self.m_write.next = self.store.q.val();
        self.m_wdata.next = 0.into();
        self.m_wmask.next = 0.into();
        self.s_we.next = 0.into();
        self.s_wdata.next = 0.into();
        self.row_done.next = false;
        self.next_row.next = false;

        // ---- decode of an issued instruction: the 1-D line `mem + r[idx] * stride` in 64 bits
        self.opc.next = self.iss_word.val().get_bits::<8>(0);
        self.p_ll.next = self.iss_reg.val().get_bits::<16>(0)
            * self.iss_word.val().get_bits::<16>(self.f_stride.val().index());
        self.p_lh.next = self.iss_reg.val().get_bits::<16>(0)
            * self.iss_word.val().get_bits::<16>(self.f_stride.val().index() + 16);
        self.p_hl.next = self.iss_reg.val().get_bits::<16>(16)
            * self.iss_word.val().get_bits::<16>(self.f_stride.val().index());
        self.p_hh.next = self.iss_reg.val().get_bits::<16>(16)
            * self.iss_word.val().get_bits::<16>(self.f_stride.val().index() + 16);
        self.idx_line.next = bit_cast::<72, 32>(self.iss_word.val().get_bits::<32>(self.f_mem.val().index()))
            + bit_cast::<72, 32>(self.p_ll.val())
            + (bit_cast::<72, 32>(self.p_lh.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hl.val()) << 16)
            + (bit_cast::<72, 32>(self.p_hh.val()) << 32);

        // ---- the current row's spans
        self.spm_byte.next = bit_cast::<40, 36>(self.rspm.q.val()) << 2;
        self.mem_byte.next = bit_cast::<80, 72>(self.rline.q.val()) << 5;
        self.nwords.next = self.nbytes.q.val() >> 2;
        self.nlines.next = bit_cast::<20, 24>((self.nbytes.q.val() + 31) >> 5);

        // ---- the scratchpad word of line `k` of the row (`k` = the line being written or read)
        self.k.next = self.resp_k.q.val();
        if self.store.q.val() {
            self.k.next = self.req_k.q.val();
            if (self.state.q.val() == DmaState::StoreWrite) & self.m_req_ready.val() {
                // the line offered now is taken: read the next one for the next cycle
                self.k.next = self.req_k.q.val() + 1;
            }
        }
        self.s_word.next = bit_cast::<SPM_WORD_BITS, 36>(self.rspm.q.val() + (bit_cast::<36, 20>(self.k.val()) << 3));
        self.s_waddr.next = self.s_word.val();
        self.s_raddr.next = self.s_word.val();
        // words of line k inside the transfer: j < min(nwords - 8k, 8)
        // the data line: the one written to the scratchpad (load) or offered to the memory (store)
        self.kd.next = self.resp_k.q.val();
        if self.store.q.val() {
            self.kd.next = self.req_k.q.val();
        }
        self.rem_words.next = self.nwords.val() - (bit_cast::<24, 20>(self.kd.val()) << 3);
        self.jmask.next = bits::<8>(255);
        if self.rem_words.val() < 8 {
            self.jmask.next = bit_cast::<8, 9>((bits::<9>(1) << self.rem_words.val()) - 1);
        }

        match self.state.q.val() {
            DmaState::Idle => {
                if self.iss_valid.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.store.d.next = (self.opc.val() == self.op_store.val()) | (self.opc.val() == self.op_store2d.val());
                    self.two_d.d.next = (self.opc.val() == self.op_load2d.val()) | (self.opc.val() == self.op_store2d.val());
                    self.row.d.next = 0.into();
                    self.state.d.next = DmaState::Check;
                    if (self.opc.val() == self.op_load2d.val()) | (self.opc.val() == self.op_store2d.val()) {
                        self.rows.d.next = self.iss_word.val().get_bits::<12>(self.f2_rows.val().index());
                        self.nbytes.d.next = bit_cast::<24, 16>(self.iss_word.val().get_bits::<16>(self.f2_row_bytes.val().index()));
                        self.spm0.d.next = self.iss_word.val().get_bits::<20>(self.f2_spm.val().index());
                        self.line0.d.next = bit_cast::<72, 32>(self.iss_word.val().get_bits::<32>(self.f2_mem.val().index()));
                        self.mem_stride.d.next = self.iss_word.val().get_bits::<20>(self.f2_mem_stride.val().index());
                        self.spm_stride.d.next = self.iss_word.val().get_bits::<20>(self.f2_spm_stride.val().index());
                        self.rspm.d.next = bit_cast::<36, 20>(self.iss_word.val().get_bits::<20>(self.f2_spm.val().index()));
                        self.rline.d.next = bit_cast::<72, 32>(self.iss_word.val().get_bits::<32>(self.f2_mem.val().index()));
                    } else {
                        self.rows.d.next = 1.into();
                        self.nbytes.d.next = self.iss_word.val().get_bits::<24>(self.f_bytes.val().index());
                        self.spm0.d.next = self.iss_word.val().get_bits::<20>(self.f_spm.val().index());
                        self.line0.d.next = self.idx_line.val();
                        self.mem_stride.d.next = 0.into();
                        self.spm_stride.d.next = 0.into();
                        self.rspm.d.next = bit_cast::<36, 20>(self.iss_word.val().get_bits::<20>(self.f_spm.val().index()));
                        self.rline.d.next = self.idx_line.val();
                    }
                }
            }
            DmaState::Check => {
                // operand rules first, then each row's scratchpad span, then its memory span
                if (self.rows.q.val() == 0) | (self.nbytes.q.val() == 0) | (self.nbytes.q.val().get_bits::<2>(0) != 0) {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_bad.val();
                    self.trap_info_r.d.next = 0.into();
                    self.state.d.next = DmaState::Idle;
                } else if self.spm_byte.val() + bit_cast::<40, 24>(self.nbytes.q.val()) > self.spm_bytes.val() {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_spm.val();
                    self.trap_info_r.d.next = bit_cast::<64, 40>(self.spm_byte.val());
                    if self.spm_byte.val() < self.spm_bytes.val() {
                        self.trap_info_r.d.next = bit_cast::<64, 40>(self.spm_bytes.val());
                    }
                    self.state.d.next = DmaState::Idle;
                } else if self.mem_byte.val() + bit_cast::<80, 24>(self.nbytes.q.val()) > self.mem_bytes.val() {
                    self.trap_r.d.next = true;
                    self.trap_code_r.d.next = self.c_mem.val();
                    self.trap_info_r.d.next = bit_cast::<64, 80>(self.mem_byte.val());
                    if self.mem_byte.val() < self.mem_bytes.val() {
                        self.trap_info_r.d.next = bit_cast::<64, 80>(self.mem_bytes.val());
                    }
                    if self.mem_byte.val().get_bits::<16>(64).any() {
                        self.trap_info_r.d.next = self.ones64.val();
                    }
                    self.state.d.next = DmaState::Idle;
                } else if self.row.q.val() + 1 < self.rows.q.val() {
                    self.next_row.next = true;
                } else {
                    // every row checked: copy from row 0
                    self.row.d.next = 0.into();
                    self.rspm.d.next = bit_cast::<36, 20>(self.spm0.q.val());
                    self.rline.d.next = self.line0.q.val();
                    self.state.d.next = DmaState::Row;
                }
            }
            DmaState::Row => {
                self.req_k.d.next = 0.into();
                self.resp_k.d.next = 0.into();
                self.state.d.next = DmaState::Load;
                if self.store.q.val() {
                    self.state.d.next = DmaState::StoreRead;
                }
            }
            DmaState::Load => {
                if self.req_k.q.val() < self.nlines.val() {
                    self.m_req.next = true;
                    if self.m_req_ready.val() {
                        self.req_k.d.next = self.req_k.q.val() + 1;
                        self.progress.next = true;
                    }
                }
                if self.m_resp.val() {
                    self.s_we.next = self.jmask.val();
                    self.s_wdata.next = self.m_rdata.val();
                    self.resp_k.d.next = self.resp_k.q.val() + 1;
                    self.progress.next = true;
                    if self.resp_k.q.val() + 1 == self.nlines.val() {
                        self.rd_total.d.next = self.rd_total.q.val() + bit_cast::<64, 24>(self.nbytes.q.val());
                        self.row_done.next = true;
                    }
                }
            }
            DmaState::StoreRead => {
                // the banks read line req_k (addressed above); its data is there next cycle
                self.state.d.next = DmaState::StoreWrite;
            }
            DmaState::StoreWrite => {
                self.m_req.next = true;
                self.m_wdata.next = self.s_rdata.val();
                // byte enables of the line's words (the mask of line req_k, before the rotation)
                self.m_wmask.next = self.ones32.val();
                if self.rem_words.val() < 8 {
                    self.m_wmask.next = bit_cast::<32, 33>((bits::<33>(1) << (bit_cast::<6, 24>(self.rem_words.val()) << 2)) - 1);
                }
                if self.m_req_ready.val() {
                    self.progress.next = true;
                    self.req_k.d.next = self.req_k.q.val() + 1;
                    if self.req_k.q.val() + 1 == self.nlines.val() {
                        self.wr_total.d.next = self.wr_total.q.val() + bit_cast::<64, 24>(self.nbytes.q.val());
                        self.row_done.next = true;
                    }
                }
            }
        }
        // a row copied: the next one, or the end of the instruction
        if self.row_done.val() {
            self.next_row.next = true;
            self.state.d.next = DmaState::Row;
            if self.row.q.val() + 1 == self.rows.q.val() {
                self.state.d.next = DmaState::Idle;
            }
        }
        // the next row's first scratchpad word and memory line (checking, then copying)
        if self.next_row.val() {
            self.row.d.next = self.row.q.val() + 1;
            self.rspm.d.next = self.rspm.q.val() + bit_cast::<36, 20>(self.spm_stride.q.val());
            self.rline.d.next = self.rline.q.val() + bit_cast::<72, 20>(self.mem_stride.q.val());
        }
        self.m_addr.next = bit_cast::<64, 72>(self.rline.q.val() + bit_cast::<72, 20>(self.req_k.q.val()));

        if self.flush.val() | self.reset.val() {
            self.state.d.next = DmaState::Idle;
            self.trap_r.d.next = false;
        }
        if self.reset.val() {
            self.rd_total.d.next = 0.into();
            self.wr_total.d.next = 0.into();
        }
    }
}

/// A [`Dma`] of `config` ready to simulate or emit.
pub fn dma_top(config: &OverlayConfig) -> Dma {
    connect_top!(
        Dma::new(config),
        clock,
        reset,
        flush,
        iss_valid,
        iss_word,
        iss_pc,
        iss_reg,
        m_req_ready,
        m_resp,
        m_rdata,
        s_rdata
    )
}

//! The controller core: instruction fetch, decode, the scalar unit, predicates, CSRs, issue to the units
//! with a scoreboard, traps and the watchdog. Written in rust-hdl's own HDL (`#[hdl_gen]`, `DFF`, `ROM`).
//!
//! One instruction per pass through `Fetch -> Decode`. An instruction queue of 16 lines (two instructions
//! each) runs ahead of the pc, with any number of line fetches in flight, so decode does not wait the memory
//! latency; Fetch takes the pc's line from the queue head (dropping lines a `skip` passed, restarting the
//! queue when the pc leaves it, dropping responses for abandoned lines on arrival). Decode checks the word against
//! the ROM built from the ISA ([`super::decode`]), executes control and scalar instructions itself and
//! issues the others to their unit over a valid/ready port, carrying the pc, the value of the register the
//! instruction reads and a snapshot of the CSRs (so a later `csrw` never waits for the units).
//!
//! Scoreboard: a register that a unit will write (`argmax rd`) and a predicate it will write (`route pd`)
//! are busy from issue to the unit's write-back; an instruction that reads or writes a busy register, or a
//! `skip` on a busy predicate, waits. `ldr` waits until the units are idle (it reads the scratchpad that
//! they write). `barrier` and `end` wait for the units to drain.
//!
//! Traps: the core's own (illegal word, pc out of range, fetch outside device memory, `ldr` outside the
//! scratchpad) are raised in program order at decode; units report theirs with the pc of the instruction.
//! After the first trap nothing more is issued; once the units are idle the trap with the lowest pc is the
//! one reported (every instruction before it has completed), which is the functional simulator's trap.
//! The watchdog traps WATCHDOG after `watchdog` cycles without progress and ends the run at once, telling
//! the units to flush (`flush`), since a unit that never finishes would never drain.

use super::decode::{self, entry, ISSUE_UNITS};
use opu_hw::isa::NUM_REGS;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use super::constant as k;
use rust_hdl::prelude::*;

/// Bits of the packed CSR bus (`csr` code `c` at bits `32c..32c+32`).
pub const CSR_BUS: usize = opu_hw::isa::Csr::ALL.len() * 32;
/// Bits of the packed register file.
pub const RF_BITS: usize = NUM_REGS * 32;
/// Units on the issue port.
pub const N_UNITS: usize = ISSUE_UNITS.len();
/// Lines of the instruction queue (two instructions each) and its index width.
pub const QUEUE_LINES: usize = 16;
pub const QUEUE_BITS: usize = 4;
const _: () = assert!(QUEUE_LINES == 1 << QUEUE_BITS);

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum CoreState {
    Idle,
    Fetch,
    Decode,
    Ldr,
    Drain,
    TrapDrain,
}

#[derive(LogicBlock)]
pub struct Core {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,

    // ---- from the register file
    /// Doorbell: start a run at instruction 0 (ignored while busy).
    pub start: Signal<In, Bit>,
    /// SOFT_RESET: abandon the run (no completion is reported).
    pub soft_reset: Signal<In, Bit>,
    pub prog_base: Signal<In, Bits<64>>,
    pub prog_len: Signal<In, Bits<32>>,
    /// ARG0..ARG7, `ARGn` at bits `32n..`.
    pub args: Signal<In, Bits<256>>,
    pub watchdog: Signal<In, Bits<32>>,

    // ---- to the register file
    pub busy: Signal<Out, Bit>,
    /// One-cycle pulse at the end of a run; `fin_error` says it trapped, with `err_*`.
    pub fin: Signal<Out, Bit>,
    pub fin_error: Signal<Out, Bit>,
    pub err_code: Signal<Out, Bits<4>>,
    pub err_pc: Signal<Out, Bits<32>>,
    pub err_info: Signal<Out, Bits<64>>,
    pub cycles: Signal<Out, Bits<64>>,
    pub instret: Signal<Out, Bits<64>>,
    /// The state the debug window of the register file shows: `r[i]` at bits `32i..`, the predicates, CSR `c`
    /// at bits `32c..` (registered outputs, so the register file's read mux forms no combinational loop).
    pub dbg_rf: Signal<Out, Bits<RF_BITS>>,
    pub dbg_preds: Signal<Out, Bits<8>>,
    pub dbg_csrs: Signal<Out, Bits<CSR_BUS>>,

    // ---- instruction fetch: one read port of device memory, lines of 32 bytes, responses in order
    pub f_req: Signal<Out, Bit>,
    pub f_req_ready: Signal<In, Bit>,
    /// Line address (byte address / 32).
    pub f_addr: Signal<Out, Bits<64>>,
    pub f_resp: Signal<In, Bit>,
    pub f_data: Signal<In, Bits<256>>,

    // ---- issue to the units (one-hot valid in `ISSUE_UNITS` order)
    pub iss_valid: Signal<Out, Bits<N_UNITS>>,
    pub iss_ready: Signal<In, Bits<N_UNITS>>,
    pub iss_word: Signal<Out, Bits<128>>,
    pub iss_pc: Signal<Out, Bits<32>>,
    /// The value of the register the instruction reads (`idx`, `pos`, `len`).
    pub iss_reg: Signal<Out, Bits<32>>,
    pub iss_csr: Signal<Out, Bits<CSR_BUS>>,
    /// The units hold no instruction (queues empty, nothing in flight, memory writes done).
    pub units_idle: Signal<In, Bit>,
    /// A unit did something this cycle (resets the watchdog).
    pub progress: Signal<In, Bit>,
    /// Units drop everything (watchdog, SOFT_RESET).
    pub flush: Signal<Out, Bit>,
    /// Register write-back (`argmax`), predicate write-back (`route`).
    pub rwb_valid: Signal<In, Bit>,
    pub rwb_idx: Signal<In, Bits<4>>,
    pub rwb_data: Signal<In, Bits<32>>,
    pub pwb_valid: Signal<In, Bit>,
    pub pwb_idx: Signal<In, Bits<3>>,
    pub pwb_data: Signal<In, Bit>,
    /// A unit trapped on the instruction at `utrap_pc`.
    pub utrap_valid: Signal<In, Bit>,
    pub utrap_code: Signal<In, Bits<4>>,
    pub utrap_pc: Signal<In, Bits<32>>,
    pub utrap_info: Signal<In, Bits<64>>,

    // ---- scratchpad read port (`ldr`): word address, data the next cycle
    pub spm_rd: Signal<Out, Bit>,
    pub spm_addr: Signal<Out, Bits<20>>,
    pub spm_data: Signal<In, Bits<32>>,

    // ---- state
    state: DFF<CoreState>,
    /// The pc, wide enough that `skip` past PROG_LEN never wraps.
    pc: DFF<Bits<40>>,
    /// The line decode reads (`line_addr` its line address).
    line_valid: DFF<Bit>,
    line_addr: DFF<Bits<72>>,
    line_data: DFF<Bits<256>>,
    /// The instruction queue: up to [`QUEUE_LINES`] lines fetched ahead of the pc. Slot `q_head` holds line
    /// `head_line`; `q_count` lines have arrived, `q_out` are requested and still to come; `pf_line` is the
    /// next line to request.
    queue: RAM<Bits<256>, QUEUE_BITS>,
    q_head: DFF<Bits<QUEUE_BITS>>,
    q_count: DFF<Bits<5>>,
    q_out: DFF<Bits<5>>,
    head_line: DFF<Bits<72>>,
    pf_line: DFF<Bits<72>>,
    /// The queue's read data is the head slot's: last cycle it was addressed with `prev_head` and held data.
    head_seen: DFF<Bit>,
    prev_head: DFF<Bits<QUEUE_BITS>>,
    /// Responses still to come for lines the queue dropped (a skip past them, a new run): dropped on arrival.
    f_stale: DFF<Bits<6>>,
    rf: DFF<Bits<RF_BITS>>,
    preds: DFF<Bits<8>>,
    csrs: DFF<Bits<CSR_BUS>>,
    rbusy: DFF<Bits<16>>,
    pbusy: DFF<Bits<8>>,
    cyc: DFF<Bits<64>>,
    ret: DFF<Bits<64>>,
    wd: DFF<Bits<32>>,
    drain_end: DFF<Bit>,
    ldr_rd: DFF<Bits<4>>,
    trap_valid: DFF<Bit>,
    trap_code: DFF<Bits<4>>,
    trap_pc: DFF<Bits<32>>,
    trap_info: DFF<Bits<64>>,
    fin_r: DFF<Bit>,
    fin_error_r: DFF<Bit>,
    err_code_r: DFF<Bits<4>>,
    err_pc_r: DFF<Bits<32>>,
    err_info_r: DFF<Bits<64>>,
    /// The decoder ROM, read one cycle ahead: addressed with the opcode of the word that Decode will see.
    rom: SyncROM<Bits<128>, 8>,

    // ---- constants from opu-hw
    mem_bytes: Constant<Bits<72>>,
    mem_lines: Constant<Bits<72>>,
    queue_lines: Constant<Bits<6>>,
    spm_bytes: Constant<Bits<24>>,
    op_end: Constant<Bits<8>>,
    op_barrier: Constant<Bits<8>>,
    op_seti: Constant<Bits<8>>,
    op_addi: Constant<Bits<8>>,
    op_muli: Constant<Bits<8>>,
    op_csrw: Constant<Bits<8>>,
    op_skip: Constant<Bits<8>>,
    op_ldr: Constant<Bits<8>>,
    /// Field offsets: the destination `rd` (seti, addi, muli, ldr share one offset), the source `rs` of
    /// addi/muli and of csrw, the immediate of seti, of addi/muli and of csrw, csrw's `csr`, skip's `pred` and
    /// `count`, ldr's `spm`.
    f_rd: Constant<Bits<8>>,
    f_rs: Constant<Bits<8>>,
    f_csrw_rs: Constant<Bits<8>>,
    f_seti_imm: Constant<Bits<8>>,
    f_imm: Constant<Bits<8>>,
    f_csrw_imm: Constant<Bits<8>>,
    f_csr: Constant<Bits<8>>,
    f_pred: Constant<Bits<8>>,
    f_count: Constant<Bits<8>>,
    f_spm: Constant<Bits<8>>,
    c_illegal: Constant<Bits<4>>,
    c_pc_range: Constant<Bits<4>>,
    c_mem_range: Constant<Bits<4>>,
    c_spm_range: Constant<Bits<4>>,
    c_watchdog: Constant<Bits<4>>,
    kv_present_idx: Constant<Bits<4>>,
    kv_index_idx: Constant<Bits<4>>,
    ones32: Constant<Bits<32>>,
    /// Offsets of the ROM entry's fields (`decode::entry`).
    e_known: Constant<Bits<8>>,
    e_used: Constant<Bits<8>>,
    e_unit: Constant<Bits<8>>,
    e_c0_off: Constant<Bits<8>>,
    e_c0_mask: Constant<Bits<8>>,
    e_c0_max: Constant<Bits<8>>,
    e_c1_off: Constant<Bits<8>>,
    e_c1_mask: Constant<Bits<8>>,
    e_c1_max: Constant<Bits<8>>,
    e_reads_reg: Constant<Bits<8>>,
    e_writes_reg: Constant<Bits<8>>,
    e_writes_pred: Constant<Bits<8>>,

    // ---- combinational
    byte_addr: Signal<Local, Bits<72>>,
    byte_end: Signal<Local, Bits<72>>,
    word: Signal<Local, Bits<128>>,
    /// The word of `pc` in the queue's head line.
    q_word: Signal<Local, Bits<128>>,
    cur_line: Signal<Local, Bits<72>>,
    end_line: Signal<Local, Bits<72>>,
    head_ready: Signal<Local, Bit>,
    q_pop: Signal<Local, Bit>,
    q_flush: Signal<Local, Bit>,
    q_restart: Signal<Local, Bits<72>>,
    resp_ok: Signal<Local, Bit>,
    req_ok: Signal<Local, Bit>,
    can_req: Signal<Local, Bit>,
    stale_after: Signal<Local, Bits<6>>,
    opc: Signal<Local, Bits<8>>,
    ent: Signal<Local, Bits<128>>,
    used: Signal<Local, Bits<8>>,
    legal: Signal<Local, Bit>,
    code0: Signal<Local, Bits<16>>,
    code1: Signal<Local, Bits<16>>,
    unit: Signal<Local, Bits<3>>,
    unit_onehot: Signal<Local, Bits<N_UNITS>>,
    reads_off: Signal<Local, Bits<7>>,
    writes_off: Signal<Local, Bits<7>>,
    wpred_off: Signal<Local, Bits<7>>,
    rs_idx: Signal<Local, Bits<4>>,
    rs_val: Signal<Local, Bits<32>>,
    rd_idx: Signal<Local, Bits<4>>,
    imm: Signal<Local, Bits<32>>,
    mul_ll: Signal<Local, Bits<32>>,
    mul_lh: Signal<Local, Bits<32>>,
    mul_hl: Signal<Local, Bits<32>>,
    csr_val: Signal<Local, Bits<32>>,
    csr_idx: Signal<Local, Bits<4>>,
    spm_byte: Signal<Local, Bits<24>>,
    wdest: Signal<Local, Bits<4>>,
    wpred: Signal<Local, Bits<3>>,
    /// The core's register write this cycle (index 0 = none), the CSR write.
    cw_en: Signal<Local, Bit>,
    cw_idx: Signal<Local, Bits<4>>,
    cw_val: Signal<Local, Bits<32>>,
    csr_we: Signal<Local, Bit>,
    rf_mid: Signal<Local, Bits<RF_BITS>>,
    rbusy_set: Signal<Local, Bits<16>>,
    pbusy_set: Signal<Local, Bits<8>>,
    trap_now: Signal<Local, Bit>,
    trap_now_code: Signal<Local, Bits<4>>,
    trap_now_info: Signal<Local, Bits<64>>,
    made_progress: Signal<Local, Bit>,
    /// The pc as ERROR_PC and the units see it (saturated to 32 bits).
    pc32: Signal<Local, Bits<32>>,
    running: Signal<Local, Bit>,
}

impl Core {
    /// The core of `config` (device memory and scratchpad sizes).
    pub fn new(config: &OverlayConfig) -> Core {
        let f = |m: &str, n: &str| k::<8>(u64::from(decode::field(m, n).offset));
        // The shared offsets the core relies on hold in the ISA (checked here, at construction).
        for m in ["addi", "muli", "ldr"] {
            assert_eq!(decode::field(m, "rd"), decode::field("seti", "rd"), "`{m}.rd`");
        }
        assert_eq!(decode::field("muli", "rs"), decode::field("addi", "rs"));
        assert_eq!(decode::field("muli", "imm"), decode::field("addi", "imm"));
        let rom = decode::rom()
            .into_iter()
            .map(|(op, e)| (u64::from(op).to_bits::<8>(), e.to_bits::<128>()))
            .collect();
        let code = |c: ErrorCode| k::<4>(c as u64);
        Core {
            clock: Default::default(),
            reset: Default::default(),
            start: Default::default(),
            soft_reset: Default::default(),
            prog_base: Default::default(),
            prog_len: Default::default(),
            args: Default::default(),
            watchdog: Default::default(),
            busy: Default::default(),
            fin: Default::default(),
            fin_error: Default::default(),
            err_code: Default::default(),
            err_pc: Default::default(),
            err_info: Default::default(),
            cycles: Default::default(),
            instret: Default::default(),
            dbg_rf: Default::default(),
            dbg_preds: Default::default(),
            dbg_csrs: Default::default(),
            f_req: Default::default(),
            f_req_ready: Default::default(),
            f_addr: Default::default(),
            f_resp: Default::default(),
            f_data: Default::default(),
            iss_valid: Default::default(),
            iss_ready: Default::default(),
            iss_word: Default::default(),
            iss_pc: Default::default(),
            iss_reg: Default::default(),
            iss_csr: Default::default(),
            units_idle: Default::default(),
            progress: Default::default(),
            flush: Default::default(),
            rwb_valid: Default::default(),
            rwb_idx: Default::default(),
            rwb_data: Default::default(),
            pwb_valid: Default::default(),
            pwb_idx: Default::default(),
            pwb_data: Default::default(),
            utrap_valid: Default::default(),
            utrap_code: Default::default(),
            utrap_pc: Default::default(),
            utrap_info: Default::default(),
            spm_rd: Default::default(),
            spm_addr: Default::default(),
            spm_data: Default::default(),
            state: Default::default(),
            pc: Default::default(),
            line_valid: Default::default(),
            line_addr: Default::default(),
            line_data: Default::default(),
            queue: Default::default(),
            q_head: Default::default(),
            q_count: Default::default(),
            q_out: Default::default(),
            head_line: Default::default(),
            pf_line: Default::default(),
            head_seen: Default::default(),
            prev_head: Default::default(),
            f_stale: Default::default(),
            rf: Default::default(),
            preds: Default::default(),
            csrs: Default::default(),
            rbusy: Default::default(),
            pbusy: Default::default(),
            cyc: Default::default(),
            ret: Default::default(),
            wd: Default::default(),
            drain_end: Default::default(),
            ldr_rd: Default::default(),
            trap_valid: Default::default(),
            trap_code: Default::default(),
            trap_pc: Default::default(),
            trap_info: Default::default(),
            fin_r: Default::default(),
            fin_error_r: Default::default(),
            err_code_r: Default::default(),
            err_pc_r: Default::default(),
            err_info_r: Default::default(),
            rom: SyncROM::new(rom),
            mem_bytes: Constant::new(config.device_memory_bytes.to_bits()),
            mem_lines: Constant::new((config.device_memory_bytes / 32).to_bits()),
            queue_lines: k(QUEUE_LINES as u64),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            op_end: k(u64::from(decode::opcode("end"))),
            op_barrier: k(u64::from(decode::opcode("barrier"))),
            op_seti: k(u64::from(decode::opcode("seti"))),
            op_addi: k(u64::from(decode::opcode("addi"))),
            op_muli: k(u64::from(decode::opcode("muli"))),
            op_csrw: k(u64::from(decode::opcode("csrw"))),
            op_skip: k(u64::from(decode::opcode("skip"))),
            op_ldr: k(u64::from(decode::opcode("ldr"))),
            f_rd: f("seti", "rd"),
            f_rs: f("addi", "rs"),
            f_csrw_rs: f("csrw", "rs"),
            f_seti_imm: f("seti", "imm"),
            f_imm: f("addi", "imm"),
            f_csrw_imm: f("csrw", "imm"),
            f_csr: f("csrw", "csr"),
            f_pred: f("skip", "pred"),
            f_count: f("skip", "count"),
            f_spm: f("ldr", "spm"),
            c_illegal: code(ErrorCode::IllegalInstruction),
            c_pc_range: code(ErrorCode::PcOutOfRange),
            c_mem_range: code(ErrorCode::MemOutOfRange),
            c_spm_range: code(ErrorCode::ScratchpadOutOfRange),
            c_watchdog: code(ErrorCode::Watchdog),
            kv_present_idx: k(opu_hw::isa::Csr::KvPresent as u64),
            kv_index_idx: k(opu_hw::isa::Csr::KvIndex as u64),
            ones32: k(0xFFFF_FFFF),
            e_known: k(entry::KNOWN as u64),
            e_used: k(entry::USED as u64),
            e_unit: k(entry::UNIT as u64),
            e_c0_off: k(entry::C0_OFF as u64),
            e_c0_mask: k(entry::C0_MASK as u64),
            e_c0_max: k(entry::C0_MAX as u64),
            e_c1_off: k(entry::C1_OFF as u64),
            e_c1_mask: k(entry::C1_MASK as u64),
            e_c1_max: k(entry::C1_MAX as u64),
            e_reads_reg: k(entry::READS_REG as u64),
            e_writes_reg: k(entry::WRITES_REG as u64),
            e_writes_pred: k(entry::WRITES_PRED as u64),
            byte_addr: Default::default(),
            byte_end: Default::default(),
            word: Default::default(),
            q_word: Default::default(),
            cur_line: Default::default(),
            end_line: Default::default(),
            head_ready: Default::default(),
            q_pop: Default::default(),
            q_flush: Default::default(),
            q_restart: Default::default(),
            resp_ok: Default::default(),
            req_ok: Default::default(),
            can_req: Default::default(),
            stale_after: Default::default(),
            opc: Default::default(),
            ent: Default::default(),
            used: Default::default(),
            legal: Default::default(),
            code0: Default::default(),
            code1: Default::default(),
            unit: Default::default(),
            unit_onehot: Default::default(),
            reads_off: Default::default(),
            writes_off: Default::default(),
            wpred_off: Default::default(),
            rs_idx: Default::default(),
            rs_val: Default::default(),
            rd_idx: Default::default(),
            imm: Default::default(),
            mul_ll: Default::default(),
            mul_lh: Default::default(),
            mul_hl: Default::default(),
            csr_val: Default::default(),
            csr_idx: Default::default(),
            spm_byte: Default::default(),
            wdest: Default::default(),
            wpred: Default::default(),
            cw_en: Default::default(),
            cw_idx: Default::default(),
            cw_val: Default::default(),
            csr_we: Default::default(),
            rf_mid: Default::default(),
            rbusy_set: Default::default(),
            pbusy_set: Default::default(),
            trap_now: Default::default(),
            trap_now_code: Default::default(),
            trap_now_info: Default::default(),
            made_progress: Default::default(),
            pc32: Default::default(),
            running: Default::default(),
        }
    }
}

impl Logic for Core {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, line_valid, line_addr, line_data, q_head, q_count, q_out, head_line, pf_line, head_seen,
            prev_head, f_stale, rf, preds, csrs, rbusy, pbusy, cyc,
            ret, wd, drain_end, ldr_rd, trap_valid, trap_code, trap_pc, trap_info, fin_r, fin_error_r, err_code_r,
            err_pc_r, err_info_r
        );

        // ---- outputs that mirror state
        self.running.next = self.state.q.val() != CoreState::Idle;
        self.busy.next = self.running.val();
        self.fin.next = self.fin_r.q.val();
        self.fin_error.next = self.fin_error_r.q.val();
        self.err_code.next = self.err_code_r.q.val();
        self.err_pc.next = self.err_pc_r.q.val();
        self.err_info.next = self.err_info_r.q.val();
        self.cycles.next = self.cyc.q.val();
        self.instret.next = self.ret.q.val();
        self.fin_r.d.next = false;
        self.fin_error_r.d.next = false;
        self.flush.next = false;

        // ---- debug window
        self.dbg_rf.next = self.rf.q.val();
        self.dbg_preds.next = self.preds.q.val();
        self.dbg_csrs.next = self.csrs.q.val();

        // ---- fetch address of `pc` (72-bit arithmetic never wraps, as docs/isa.md says)
        self.pc32.next = self.pc.q.val().get_bits::<32>(0);
        if self.pc.q.val().get_bits::<8>(32).any() {
            self.pc32.next = self.ones32.val();
        }
        self.byte_addr.next =
            bit_cast::<72, 64>(self.prog_base.val()) + (bit_cast::<72, 40>(self.pc.q.val()) << 4);
        self.byte_end.next = self.byte_addr.val() + 16;
        self.cur_line.next = self.byte_addr.val() >> 5;
        self.end_line.next = (bit_cast::<72, 64>(self.prog_base.val()) + (bit_cast::<72, 32>(self.prog_len.val()) << 4) + 31) >> 5;
        self.queue.read_clock.next = self.clock.val();
        self.queue.write_clock.next = self.clock.val();
        self.queue.read_address.next = self.q_head.q.val();
        self.head_ready.next = self.head_seen.q.val() & (self.prev_head.q.val() == self.q_head.q.val());
        self.head_seen.d.next = self.q_count.q.val() != 0;
        self.prev_head.d.next = self.q_head.q.val();
        self.q_pop.next = false;
        self.q_flush.next = false;
        self.q_restart.next = self.cur_line.val();

        // ---- decode (combinational from the held line)
        self.word.next = self.line_data.q.val().get_bits::<128>(0);
        self.q_word.next = self.queue.read_data.val().get_bits::<128>(0);
        if self.byte_addr.val().get_bit(4) {
            self.word.next = self.line_data.q.val().get_bits::<128>(128);
            self.q_word.next = self.queue.read_data.val().get_bits::<128>(128);
        }
        self.opc.next = self.word.val().get_bits::<8>(0);
        self.rom.clock.next = self.clock.val();
        // the ROM is read a cycle ahead: with the word Decode will see next
        self.rom.address.next = self.opc.val();
        if (self.state.q.val() == CoreState::Fetch) & !(self.line_valid.q.val() & (self.line_addr.q.val() == self.cur_line.val())) {
            self.rom.address.next = self.q_word.val().get_bits::<8>(0);
        }
        self.ent.next = self.rom.data.val();
        self.used.next = self.ent.val().get_bits::<8>(self.e_used.val().index());
        self.code0.next = self.word.val().get_bits::<16>(self.ent.val().get_bits::<7>(self.e_c0_off.val().index()).index())
            & self.ent.val().get_bits::<16>(self.e_c0_mask.val().index());
        self.code1.next = self.word.val().get_bits::<16>(self.ent.val().get_bits::<7>(self.e_c1_off.val().index()).index())
            & self.ent.val().get_bits::<16>(self.e_c1_mask.val().index());
        self.legal.next = self.ent.val().get_bit(self.e_known.val().index())
            & (self.code0.val() <= self.ent.val().get_bits::<16>(self.e_c0_max.val().index()))
            & (self.code1.val() <= self.ent.val().get_bits::<16>(self.e_c1_max.val().index()));
        if self.used.val() < 128 {
            if (self.word.val() >> self.used.val()).any() {
                self.legal.next = false;
            }
        }
        self.unit.next = self.ent.val().get_bits::<3>(self.e_unit.val().index());
        self.unit_onehot.next = 0.into();
        if self.unit.val() != 0 {
            self.unit_onehot.next = bit_cast::<N_UNITS, 8>(bits::<8>(1) << (self.unit.val() - 1));
        }
        self.reads_off.next = self.ent.val().get_bits::<7>(self.e_reads_reg.val().index());
        self.writes_off.next = self.ent.val().get_bits::<7>(self.e_writes_reg.val().index());
        self.wpred_off.next = self.ent.val().get_bits::<7>(self.e_writes_pred.val().index());

        // the one register read port: rs of addi/muli/csrw, or the unit's register operand
        self.rs_idx.next = 0.into();
        if (self.opc.val() == self.op_addi.val()) | (self.opc.val() == self.op_muli.val()) {
            self.rs_idx.next = self.word.val().get_bits::<4>(self.f_rs.val().index());
        }
        if self.opc.val() == self.op_csrw.val() {
            self.rs_idx.next = self.word.val().get_bits::<4>(self.f_csrw_rs.val().index());
        }
        if self.reads_off.val() != 0 {
            self.rs_idx.next = self.word.val().get_bits::<4>(self.reads_off.val().index());
        }
        self.rs_val.next = self.rf.q.val().get_bits::<32>((bit_cast::<10, 4>(self.rs_idx.val()) << 5).index());
        self.rd_idx.next = self.word.val().get_bits::<4>(self.f_rd.val().index());
        self.imm.next = self.word.val().get_bits::<32>(self.f_imm.val().index());
        if self.opc.val() == self.op_seti.val() {
            self.imm.next = self.word.val().get_bits::<32>(self.f_seti_imm.val().index());
        }
        if self.opc.val() == self.op_csrw.val() {
            self.imm.next = self.word.val().get_bits::<32>(self.f_csrw_imm.val().index());
        }
        // r[rs] * imm mod 2^32 from three 16 x 16 products
        self.mul_ll.next = self.rs_val.val().get_bits::<16>(0) * self.imm.val().get_bits::<16>(0);
        self.mul_lh.next = self.rs_val.val().get_bits::<16>(0) * self.imm.val().get_bits::<16>(16);
        self.mul_hl.next = self.rs_val.val().get_bits::<16>(16) * self.imm.val().get_bits::<16>(0);
        self.csr_idx.next = self.word.val().get_bits::<4>(self.f_csr.val().index());
        self.csr_val.next = self.rs_val.val() + self.imm.val();
        self.spm_byte.next = bit_cast::<24, 20>(self.word.val().get_bits::<20>(self.f_spm.val().index())) << 2;
        self.wdest.next = self.word.val().get_bits::<4>(self.writes_off.val().index());
        self.wpred.next = self.word.val().get_bits::<3>(self.wpred_off.val().index());

        // ---- defaults
        self.iss_valid.next = 0.into();
        self.iss_word.next = self.word.val();
        self.iss_pc.next = self.pc32.val();
        self.iss_reg.next = self.rs_val.val();
        self.iss_csr.next = self.csrs.q.val();
        self.spm_rd.next = false;
        self.spm_addr.next = self.word.val().get_bits::<20>(self.f_spm.val().index());
        self.cw_en.next = false;
        self.cw_idx.next = self.rd_idx.val();
        self.cw_val.next = self.word.val().get_bits::<32>(self.f_seti_imm.val().index());
        self.csr_we.next = false;
        self.rbusy_set.next = 0.into();
        self.pbusy_set.next = 0.into();
        self.trap_now.next = false;
        self.trap_now_code.next = self.c_illegal.val();
        self.trap_now_info.next = 0.into();
        self.made_progress.next = self.progress.val();

        match self.state.q.val() {
            CoreState::Idle => {
                if self.start.val() {
                    self.state.d.next = CoreState::Fetch;
                    self.pc.d.next = 0.into();
                    self.rf.d.next = bit_cast::<RF_BITS, 256>(self.args.val()) << 256;
                    self.preds.d.next = 0.into();
                    // kv_present and kv_index reset to 0xFFFFFFFF
                    self.csrs.d.next = (bit_cast::<CSR_BUS, 32>(self.ones32.val())
                        << (bit_cast::<10, 4>(self.kv_present_idx.val()) << 5))
                        | (bit_cast::<CSR_BUS, 32>(self.ones32.val()) << (bit_cast::<10, 4>(self.kv_index_idx.val()) << 5));
                    self.rbusy.d.next = 0.into();
                    self.pbusy.d.next = 0.into();
                    self.cyc.d.next = 0.into();
                    self.ret.d.next = 0.into();
                    self.wd.d.next = 0.into();
                    // device memory may have changed since the last run: restart the queue at instruction 0
                    self.line_valid.d.next = false;
                    self.q_flush.next = true;
                    self.q_restart.next = bit_cast::<72, 64>(self.prog_base.val()) >> 5;
                    self.trap_valid.d.next = false;
                    self.err_code_r.d.next = 0.into();
                    self.err_pc_r.d.next = 0.into();
                    self.err_info_r.d.next = 0.into();
                }
            }
            CoreState::Fetch => {
                if self.pc.q.val() >= bit_cast::<40, 32>(self.prog_len.val()) {
                    self.trap_now.next = true;
                    self.trap_now_code.next = self.c_pc_range.val();
                    self.trap_now_info.next = bit_cast::<64, 40>(self.pc.q.val());
                } else if self.byte_end.val() > self.mem_bytes.val() {
                    self.trap_now.next = true;
                    self.trap_now_code.next = self.c_mem_range.val();
                    self.trap_now_info.next = bit_cast::<64, 72>(self.byte_addr.val());
                    if self.byte_addr.val() < self.mem_bytes.val() {
                        self.trap_now_info.next = bit_cast::<64, 72>(self.mem_bytes.val());
                    }
                    if self.byte_addr.val().get_bits::<8>(64).any() {
                        self.trap_now_info.next = bit_cast::<64, 32>(self.ones32.val()) | (bit_cast::<64, 32>(self.ones32.val()) << 32);
                    }
                } else if self.line_valid.q.val() & (self.line_addr.q.val() == self.cur_line.val()) {
                    self.state.d.next = CoreState::Decode;
                } else if (self.q_count.q.val() != 0) & (self.head_line.q.val() == self.cur_line.val()) {
                    // the pc's line is at the head of the queue: take it (once the RAM shows it)
                    if self.head_ready.val() {
                        self.line_data.d.next = self.queue.read_data.val();
                        self.line_addr.d.next = self.cur_line.val();
                        self.line_valid.d.next = true;
                        self.q_pop.next = true;
                        self.state.d.next = CoreState::Decode;
                    }
                } else if (self.q_count.q.val() != 0) & (self.head_line.q.val() < self.cur_line.val()) {
                    // a line the pc has passed (skipped): drop it
                    self.q_pop.next = true;
                } else if (self.cur_line.val() < self.head_line.q.val()) | (self.cur_line.val() > self.pf_line.q.val()) {
                    // not coming: restart the queue at the pc's line
                    self.q_flush.next = true;
                }
            }
            CoreState::Decode => {
                if !self.legal.val() {
                    self.trap_now.next = true;
                    self.trap_now_code.next = self.c_illegal.val();
                    self.trap_now_info.next = self.word.val().get_bits::<64>(0);
                } else if self.unit.val() != 0 {
                    // issue, unless a register or predicate it touches is still to be written by a unit
                    if !((self.reads_off.val() != 0) & self.rbusy.q.val().get_bit(self.rs_idx.val().index()))
                        & !((self.writes_off.val() != 0) & self.rbusy.q.val().get_bit(self.wdest.val().index()))
                        & !((self.wpred_off.val() != 0) & self.pbusy.q.val().get_bit(self.wpred.val().index()))
                    {
                        self.iss_valid.next = self.unit_onehot.val();
                        if (self.iss_ready.val() & self.unit_onehot.val()).any() {
                            if (self.writes_off.val() != 0) & (self.wdest.val() != 0) {
                                self.rbusy_set.next = bits::<16>(1) << self.wdest.val();
                            }
                            if self.wpred_off.val() != 0 {
                                self.pbusy_set.next = bits::<8>(1) << self.wpred.val();
                            }
                            self.pc.d.next = self.pc.q.val() + 1;
                            self.ret.d.next = self.ret.q.val() + 1;
                            self.made_progress.next = true;
                            self.state.d.next = CoreState::Fetch;
                        }
                    }
                } else if (self.opc.val() == self.op_end.val()) | (self.opc.val() == self.op_barrier.val()) {
                    self.drain_end.d.next = self.opc.val() == self.op_end.val();
                    self.state.d.next = CoreState::Drain;
                } else if self.opc.val() == self.op_skip.val() {
                    if !self.pbusy.q.val().get_bit(self.word.val().get_bits::<3>(self.f_pred.val().index()).index()) {
                        self.pc.d.next = self.pc.q.val() + 1;
                        if self.preds.q.val().get_bit(self.word.val().get_bits::<3>(self.f_pred.val().index()).index()) {
                            self.pc.d.next = self.pc.q.val()
                                + 1
                                + bit_cast::<40, 16>(self.word.val().get_bits::<16>(self.f_count.val().index()));
                        }
                        self.ret.d.next = self.ret.q.val() + 1;
                        self.made_progress.next = true;
                        self.state.d.next = CoreState::Fetch;
                    }
                } else if self.opc.val() == self.op_ldr.val() {
                    if bit_cast::<25, 24>(self.spm_byte.val()) + 4 > bit_cast::<25, 24>(self.spm_bytes.val()) {
                        self.trap_now.next = true;
                        self.trap_now_code.next = self.c_spm_range.val();
                        self.trap_now_info.next = bit_cast::<64, 24>(self.spm_byte.val());
                    } else if self.units_idle.val() & !self.rbusy.q.val().get_bit(self.rd_idx.val().index()) {
                        self.spm_rd.next = true;
                        self.ldr_rd.d.next = self.rd_idx.val();
                        self.state.d.next = CoreState::Ldr;
                    }
                } else {
                    // seti / addi / muli / csrw: wait while the destination is still to be written by a unit
                    // (csrw writes a CSR, never busy) or the source is
                    if !self.rbusy.q.val().get_bit(self.rs_idx.val().index())
                        & (!self.rbusy.q.val().get_bit(self.rd_idx.val().index())
                            | (self.opc.val() == self.op_csrw.val()))
                    {
                        if self.opc.val() == self.op_csrw.val() {
                            self.csr_we.next = true;
                        } else {
                            self.cw_en.next = true;
                            if self.opc.val() == self.op_addi.val() {
                                self.cw_val.next = self.rs_val.val() + self.imm.val();
                            }
                            if self.opc.val() == self.op_muli.val() {
                                self.cw_val.next = self.mul_ll.val()
                                    + ((self.mul_lh.val() + self.mul_hl.val()) << 16);
                            }
                        }
                        self.pc.d.next = self.pc.q.val() + 1;
                        self.ret.d.next = self.ret.q.val() + 1;
                        self.made_progress.next = true;
                        self.state.d.next = CoreState::Fetch;
                    }
                }
            }
            CoreState::Ldr => {
                self.cw_en.next = true;
                self.cw_idx.next = self.ldr_rd.q.val();
                self.cw_val.next = self.spm_data.val();
                self.pc.d.next = self.pc.q.val() + 1;
                self.ret.d.next = self.ret.q.val() + 1;
                self.made_progress.next = true;
                self.state.d.next = CoreState::Fetch;
            }
            CoreState::Drain => {
                // (a trap reported in the same cycle as idle goes through TrapDrain first)
                if self.units_idle.val() & !self.utrap_valid.val() & (self.rbusy.q.val() == 0) & (self.pbusy.q.val() == 0)
                {
                    self.ret.d.next = self.ret.q.val() + 1;
                    self.made_progress.next = true;
                    if self.drain_end.q.val() {
                        self.fin_r.d.next = true;
                        self.state.d.next = CoreState::Idle;
                    } else {
                        self.pc.d.next = self.pc.q.val() + 1;
                        self.state.d.next = CoreState::Fetch;
                    }
                }
            }
            CoreState::TrapDrain => {
                if self.units_idle.val() & !self.utrap_valid.val() {
                    self.fin_r.d.next = true;
                    self.fin_error_r.d.next = true;
                    self.err_code_r.d.next = self.trap_code.q.val();
                    self.err_pc_r.d.next = self.trap_pc.q.val();
                    self.err_info_r.d.next = self.trap_info.q.val();
                    self.state.d.next = CoreState::Idle;
                }
            }
        }

        // ---- the instruction queue: responses fill it in order, requests run ahead of the pc while there is
        // room, up to the program's end and device memory's (never a line the program does not hold)
        self.resp_ok.next = self.f_resp.val() & (self.f_stale.q.val() == 0);
        self.stale_after.next = self.f_stale.q.val();
        if self.f_resp.val() & (self.f_stale.q.val() != 0) {
            self.stale_after.next = self.f_stale.q.val() - 1;
        }
        self.queue.write_enable.next = self.resp_ok.val();
        self.queue.write_address.next = self.q_head.q.val() + bit_cast::<QUEUE_BITS, 5>(self.q_count.q.val());
        self.queue.write_data.next = self.f_data.val();
        self.can_req.next = self.running.val()
            & (self.state.q.val() != CoreState::TrapDrain)
            & !self.q_flush.val()
            & (bit_cast::<6, 5>(self.q_count.q.val()) + bit_cast::<6, 5>(self.q_out.q.val()) < self.queue_lines.val())
            & (self.pf_line.q.val() < self.end_line.val())
            & (self.pf_line.q.val() < self.mem_lines.val());
        self.f_req.next = self.can_req.val();
        self.f_addr.next = bit_cast::<64, 72>(self.pf_line.q.val());
        self.req_ok.next = self.can_req.val() & self.f_req_ready.val();
        self.f_stale.d.next = self.stale_after.val();
        self.q_count.d.next = self.q_count.q.val() + self.resp_ok.val();
        if self.q_pop.val() {
            self.q_count.d.next = self.q_count.q.val() + self.resp_ok.val() - 1;
            self.q_head.d.next = self.q_head.q.val() + 1;
            self.head_line.d.next = self.head_line.q.val() + 1;
        }
        self.q_out.d.next = self.q_out.q.val() + self.req_ok.val() - bit_cast::<5, 1>(self.resp_ok.val().into());
        self.pf_line.d.next = self.pf_line.q.val() + self.req_ok.val();
        if self.q_flush.val() {
            // what is still to come is dropped on arrival
            self.f_stale.d.next = self.stale_after.val() + bit_cast::<6, 5>(self.q_out.q.val() - bit_cast::<5, 1>(self.resp_ok.val().into()));
            self.q_count.d.next = 0.into();
            self.q_out.d.next = 0.into();
            self.q_head.d.next = 0.into();
            self.head_line.d.next = self.q_restart.val();
            self.pf_line.d.next = self.q_restart.val();
        }

        // ---- traps: the core's own (in program order), then the units' (lowest pc wins)
        if self.trap_now.val() {
            self.state.d.next = CoreState::TrapDrain;
            if !self.trap_valid.q.val() {
                self.trap_valid.d.next = true;
                self.trap_code.d.next = self.trap_now_code.val();
                self.trap_pc.d.next = self.pc32.val();
                self.trap_info.d.next = self.trap_now_info.val();
            }
        }
        if self.utrap_valid.val() & self.running.val() {
            if (self.state.q.val() != CoreState::TrapDrain) & !self.trap_now.val() {
                self.state.d.next = CoreState::TrapDrain;
            }
            if !self.trap_valid.q.val() | (self.utrap_pc.val() < self.trap_pc.q.val()) | self.trap_now.val() {
                self.trap_valid.d.next = true;
                self.trap_code.d.next = self.utrap_code.val();
                self.trap_pc.d.next = self.utrap_pc.val();
                self.trap_info.d.next = self.utrap_info.val();
            }
        }

        // ---- register file: the core's write and a unit's write-back (never the same register)
        self.rf_mid.next = self.rf.q.val();
        if self.cw_en.val() & (self.cw_idx.val() != 0) {
            self.rf_mid.next = (self.rf.q.val()
                & !(bit_cast::<RF_BITS, 32>(self.ones32.val()) << (bit_cast::<10, 4>(self.cw_idx.val()) << 5)))
                | (bit_cast::<RF_BITS, 32>(self.cw_val.val()) << (bit_cast::<10, 4>(self.cw_idx.val()) << 5));
        }
        if self.running.val() {
            self.rf.d.next = self.rf_mid.val();
        }
        if self.rwb_valid.val() & (self.rwb_idx.val() != 0) {
            self.rf.d.next = (self.rf_mid.val()
                & !(bit_cast::<RF_BITS, 32>(self.ones32.val()) << (bit_cast::<10, 4>(self.rwb_idx.val()) << 5)))
                | (bit_cast::<RF_BITS, 32>(self.rwb_data.val()) << (bit_cast::<10, 4>(self.rwb_idx.val()) << 5));
        }
        if self.csr_we.val() {
            self.csrs.d.next = (self.csrs.q.val()
                & !(bit_cast::<CSR_BUS, 32>(self.ones32.val()) << (bit_cast::<10, 4>(self.csr_idx.val()) << 5)))
                | (bit_cast::<CSR_BUS, 32>(self.csr_val.val()) << (bit_cast::<10, 4>(self.csr_idx.val()) << 5));
        }
        // scoreboard: set at issue, cleared at write-back
        if self.running.val() {
            self.rbusy.d.next = self.rbusy.q.val() | self.rbusy_set.val();
            self.pbusy.d.next = self.pbusy.q.val() | self.pbusy_set.val();
            if self.rwb_valid.val() {
                self.rbusy.d.next = (self.rbusy.q.val() | self.rbusy_set.val()) & !(bits::<16>(1) << self.rwb_idx.val());
            }
            if self.pwb_valid.val() {
                self.pbusy.d.next = (self.pbusy.q.val() | self.pbusy_set.val()) & !(bits::<8>(1) << self.pwb_idx.val());
                self.preds.d.next = self.preds.q.val().replace_bit(self.pwb_idx.val().index(), self.pwb_data.val());
            }
        }

        // ---- counters and the watchdog
        if self.running.val() {
            self.cyc.d.next = self.cyc.q.val() + 1;
            self.wd.d.next = self.wd.q.val() + 1;
            if self.made_progress.val() {
                self.wd.d.next = 0.into();
            }
            if (self.watchdog.val() != 0) & (self.wd.q.val() >= self.watchdog.val()) {
                // a unit that never finishes would never drain: end the run now
                self.flush.next = true;
                self.fin_r.d.next = true;
                self.fin_error_r.d.next = true;
                self.err_code_r.d.next = self.c_watchdog.val();
                self.err_pc_r.d.next = self.pc32.val();
                self.err_info_r.d.next = 0.into();
                self.state.d.next = CoreState::Idle;
            }
        }

        // ---- SOFT_RESET and reset
        if self.soft_reset.val() {
            self.flush.next = true;
            self.fin_r.d.next = false;
            self.fin_error_r.d.next = false;
            self.err_code_r.d.next = 0.into();
            self.err_pc_r.d.next = 0.into();
            self.err_info_r.d.next = 0.into();
            self.cyc.d.next = 0.into();
            self.ret.d.next = 0.into();
            self.state.d.next = CoreState::Idle;
        }
        if self.reset.val() {
            self.state.d.next = CoreState::Idle;
            self.f_stale.d.next = 0.into();
            self.q_count.d.next = 0.into();
            self.q_out.d.next = 0.into();
            self.line_valid.d.next = false;
            self.fin_r.d.next = false;
        }
    }
}

/// A [`Core`] of `config` ready to simulate or emit.
pub fn core_top(config: &OverlayConfig) -> Core {
    connect_top!(
        Core::new(config),
        clock,
        reset,
        start,
        soft_reset,
        prog_base,
        prog_len,
        args,
        watchdog,
        f_req_ready,
        f_resp,
        f_data,
        iss_ready,
        units_idle,
        progress,
        rwb_valid,
        rwb_idx,
        rwb_data,
        pwb_valid,
        pwb_idx,
        pwb_data,
        utrap_valid,
        utrap_code,
        utrap_pc,
        utrap_info,
        spm_data
    )
}

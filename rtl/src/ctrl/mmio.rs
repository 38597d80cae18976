//! The MMIO register file of docs/registers.md (`opu_hw::regs`), in rust-hdl's own HDL.
//!
//! Host port: one access per cycle; `write` with `addr`/`wdata`, or `read` with `addr` and the value in
//! `rdata` on the next cycle (`rvalid`). Offsets, identification values, reset values and error codes are
//! constants taken from `opu_hw::regs` and the config; nothing is restated. 64-bit values are LO/HI pairs and
//! reading LO latches HI (each pair its own latch; a HI never latched reads 0), as the functional simulator
//! does. Unmapped offsets read 0 and ignore writes.
//!
//! The run itself is the core's ([`super::core::Core`]): this block starts it (`DOORBELL`), aborts it
//! (`CONTROL.SOFT_RESET`), and keeps `STATUS`, `IRQ_STATUS` and the interrupt line from its completion
//! pulse. The counters and the error registers are the core's and the units' outputs, read here.

use opu_hw::regs;
use opu_hw::OverlayConfig;
use super::constant as k;
use super::core::{CSR_BUS, RF_BITS};
use rust_hdl::prelude::*;

/// Width of the host address (the 4 KiB register window).
pub const ADDR_BITS: usize = 12;

#[derive(LogicBlock)]
pub struct Mmio {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,

    // ---- host port
    pub addr: Signal<In, Bits<ADDR_BITS>>,
    pub wdata: Signal<In, Bits<32>>,
    pub write: Signal<In, Bit>,
    pub read: Signal<In, Bit>,
    pub rdata: Signal<Out, Bits<32>>,
    pub rvalid: Signal<Out, Bit>,
    pub irq: Signal<Out, Bit>,

    // ---- to the core
    pub start: Signal<Out, Bit>,
    pub soft_reset: Signal<Out, Bit>,
    pub prog_base: Signal<Out, Bits<64>>,
    pub prog_len: Signal<Out, Bits<32>>,
    pub args: Signal<Out, Bits<256>>,
    pub watchdog: Signal<Out, Bits<32>>,

    // ---- from the core and the units
    pub busy: Signal<In, Bit>,
    pub fin: Signal<In, Bit>,
    pub fin_error: Signal<In, Bit>,
    pub err_code: Signal<In, Bits<4>>,
    pub err_pc: Signal<In, Bits<32>>,
    pub err_info: Signal<In, Bits<64>>,
    pub cycles: Signal<In, Bits<64>>,
    pub instret: Signal<In, Bits<64>>,
    pub bytes_read: Signal<In, Bits<64>>,
    pub bytes_written: Signal<In, Bits<64>>,
    pub macs: Signal<In, Bits<64>>,
    pub stall_cycles: Signal<In, Bits<64>>,
    pub skipped_blocks: Signal<In, Bits<32>>,
    pub kv_history_hits: Signal<In, Bits<32>>,
    pub kv_history_misses: Signal<In, Bits<32>>,
    /// Units with work this cycle (an instruction running or queued), bit `u` = `ExecUnit u`.
    pub unit_busy: Signal<In, Bits<4>>,
    /// The core's state for the debug window (`Core::dbg_*`).
    pub dbg_rf: Signal<In, Bits<RF_BITS>>,
    pub dbg_preds: Signal<In, Bits<8>>,
    pub dbg_csrs: Signal<In, Bits<CSR_BUS>>,

    // ---- state
    irq_en: DFF<Bit>,
    done: DFF<Bit>,
    error: DFF<Bit>,
    irq_status: DFF<Bits<2>>,
    base: DFF<Bits<64>>,
    len: DFF<Bits<32>>,
    wdog: DFF<Bits<32>>,
    argv: DFF<Bits<256>>,
    rdata_r: DFF<Bits<32>>,
    rvalid_r: DFF<Bit>,
    start_r: DFF<Bit>,
    abort_r: DFF<Bit>,
    /// HI latches: config hash, cycles, instret, bytes read, bytes written, MACs, stall cycles, error info.
    hi_hash: DFF<Bits<32>>,
    hi_cycles: DFF<Bits<32>>,
    hi_instret: DFF<Bits<32>>,
    hi_rd: DFF<Bits<32>>,
    hi_wr: DFF<Bits<32>>,
    hi_macs: DFF<Bits<32>>,
    hi_stall: DFF<Bits<32>>,
    hi_info: DFF<Bits<32>>,
    /// Busy cycles per unit in the run (64 bits each, unit `u` at bits `64u..`), and their HI latches.
    busyc: DFF<Bits<256>>,
    hi_busy: DFF<Bits<128>>,

    // ---- constants
    id_value: Constant<Bits<32>>,
    version_value: Constant<Bits<32>>,
    hash: Constant<Bits<64>>,
    cfg_pe_lanes: Constant<Bits<32>>,
    cfg_dot_width: Constant<Bits<32>>,
    cfg_spm: Constant<Bits<32>>,
    cfg_slots: Constant<Bits<32>>,
    wdog_default: Constant<Bits<32>>,
    a_id: Constant<Bits<ADDR_BITS>>,
    a_version: Constant<Bits<ADDR_BITS>>,
    a_hash: Constant<Bits<ADDR_BITS>>,
    a_control: Constant<Bits<ADDR_BITS>>,
    a_status: Constant<Bits<ADDR_BITS>>,
    a_doorbell: Constant<Bits<ADDR_BITS>>,
    a_irq_status: Constant<Bits<ADDR_BITS>>,
    a_base: Constant<Bits<ADDR_BITS>>,
    a_len: Constant<Bits<ADDR_BITS>>,
    a_wdog: Constant<Bits<ADDR_BITS>>,
    a_arg0: Constant<Bits<ADDR_BITS>>,
    a_cycles: Constant<Bits<ADDR_BITS>>,
    a_instret: Constant<Bits<ADDR_BITS>>,
    a_rd: Constant<Bits<ADDR_BITS>>,
    a_wr: Constant<Bits<ADDR_BITS>>,
    a_macs: Constant<Bits<ADDR_BITS>>,
    a_stall: Constant<Bits<ADDR_BITS>>,
    a_skipped: Constant<Bits<ADDR_BITS>>,
    a_hits: Constant<Bits<ADDR_BITS>>,
    a_misses: Constant<Bits<ADDR_BITS>>,
    a_busy: Constant<Bits<ADDR_BITS>>,
    a_err_code: Constant<Bits<ADDR_BITS>>,
    a_err_pc: Constant<Bits<ADDR_BITS>>,
    a_err_info: Constant<Bits<ADDR_BITS>>,
    a_cfg_pe_lanes: Constant<Bits<ADDR_BITS>>,
    a_cfg_dot_width: Constant<Bits<ADDR_BITS>>,
    a_cfg_spm: Constant<Bits<ADDR_BITS>>,
    a_cfg_slots: Constant<Bits<ADDR_BITS>>,
    a_dbg_r0: Constant<Bits<ADDR_BITS>>,
    a_dbg_pred: Constant<Bits<ADDR_BITS>>,
    a_dbg_csr0: Constant<Bits<ADDR_BITS>>,
    dbg_csr_bytes: Constant<Bits<ADDR_BITS>>,
    b_irq_enable: Constant<Bits<32>>,
    b_soft_reset: Constant<Bits<32>>,
    ones32: Constant<Bits<32>>,

    // ---- combinational
    value: Signal<Local, Bits<32>>,
    clear: Signal<Local, Bit>,
    /// The unit counters at the doorbell: the counter registers read the counts since then (per run, like
    /// CYCLES and INSTRET, which the core restarts).
    base_rd: DFF<Bits<64>>,
    base_wr: DFF<Bits<64>>,
    base_macs: DFF<Bits<64>>,
    base_skipped: DFF<Bits<32>>,
    base_hits: DFF<Bits<32>>,
    base_misses: DFF<Bits<32>>,
    run_rd: Signal<Local, Bits<64>>,
    run_wr: Signal<Local, Bits<64>>,
    run_macs: Signal<Local, Bits<64>>,
    run_skipped: Signal<Local, Bits<32>>,
    run_hits: Signal<Local, Bits<32>>,
    run_misses: Signal<Local, Bits<32>>,
    busy_off: Signal<Local, Bits<ADDR_BITS>>,
    arg_off: Signal<Local, Bits<ADDR_BITS>>,
}

impl Mmio {
    pub fn new(config: &OverlayConfig) -> Mmio {
        let a = |off: u32| k::<ADDR_BITS>(u64::from(off));
        assert!(regs::MAP_BYTES as usize <= 1 << ADDR_BITS);
        Mmio {
            clock: Default::default(),
            reset: Default::default(),
            addr: Default::default(),
            wdata: Default::default(),
            write: Default::default(),
            read: Default::default(),
            rdata: Default::default(),
            rvalid: Default::default(),
            irq: Default::default(),
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
            bytes_read: Default::default(),
            bytes_written: Default::default(),
            macs: Default::default(),
            stall_cycles: Default::default(),
            skipped_blocks: Default::default(),
            kv_history_hits: Default::default(),
            kv_history_misses: Default::default(),
            unit_busy: Default::default(),
            dbg_rf: Default::default(),
            dbg_preds: Default::default(),
            dbg_csrs: Default::default(),
            irq_en: Default::default(),
            done: Default::default(),
            error: Default::default(),
            irq_status: Default::default(),
            base: Default::default(),
            len: Default::default(),
            wdog: Default::default(),
            argv: Default::default(),
            rdata_r: Default::default(),
            rvalid_r: Default::default(),
            start_r: Default::default(),
            abort_r: Default::default(),
            hi_hash: Default::default(),
            hi_cycles: Default::default(),
            hi_instret: Default::default(),
            hi_rd: Default::default(),
            hi_wr: Default::default(),
            hi_macs: Default::default(),
            hi_stall: Default::default(),
            hi_info: Default::default(),
            busyc: Default::default(),
            hi_busy: Default::default(),
            id_value: k(u64::from(regs::ID_VALUE)),
            version_value: k(u64::from(regs::VERSION_VALUE)),
            hash: k(config.hash()),
            cfg_pe_lanes: k(u64::from(config.pe_lanes)),
            cfg_dot_width: k(u64::from(config.dot_width)),
            cfg_spm: k(u64::from(config.scratchpad_bytes)),
            cfg_slots: k(u64::from(config.kv_history_slots)),
            wdog_default: k(u64::from(regs::WATCHDOG_DEFAULT)),
            a_id: a(regs::ID),
            a_version: a(regs::VERSION),
            a_hash: a(regs::CONFIG_HASH_LO),
            a_control: a(regs::CONTROL),
            a_status: a(regs::STATUS),
            a_doorbell: a(regs::DOORBELL),
            a_irq_status: a(regs::IRQ_STATUS),
            a_base: a(regs::PROG_BASE_LO),
            a_len: a(regs::PROG_LEN),
            a_wdog: a(regs::WATCHDOG),
            a_arg0: a(regs::ARG0),
            a_cycles: a(regs::CYCLES_LO),
            a_instret: a(regs::INSTRET_LO),
            a_rd: a(regs::BYTES_READ_LO),
            a_wr: a(regs::BYTES_WRITTEN_LO),
            a_macs: a(regs::MACS_LO),
            a_stall: a(regs::STALL_CYCLES_LO),
            a_skipped: a(regs::SKIPPED_BLOCKS),
            a_hits: a(regs::KV_HISTORY_HITS),
            a_misses: a(regs::KV_HISTORY_MISSES),
            a_busy: a(regs::BUSY_LO),
            a_err_code: a(regs::ERROR_CODE),
            a_err_pc: a(regs::ERROR_PC),
            a_err_info: a(regs::ERROR_INFO_LO),
            a_cfg_pe_lanes: a(regs::CFG_PE_LANES),
            a_cfg_dot_width: a(regs::CFG_DOT_WIDTH),
            a_cfg_spm: a(regs::CFG_SCRATCHPAD_BYTES),
            a_cfg_slots: a(regs::CFG_KV_HISTORY_SLOTS),
            a_dbg_r0: a(regs::DBG_R0),
            a_dbg_pred: a(regs::DBG_PRED),
            a_dbg_csr0: a(regs::DBG_CSR0),
            dbg_csr_bytes: a(4 * regs::DBG_CSRS),
            b_irq_enable: k(u64::from(regs::control::IRQ_ENABLE)),
            b_soft_reset: k(u64::from(regs::control::SOFT_RESET)),
            ones32: k(0xFFFF_FFFF),
            value: Default::default(),
            clear: Default::default(),
            base_rd: Default::default(),
            base_wr: Default::default(),
            base_macs: Default::default(),
            base_skipped: Default::default(),
            base_hits: Default::default(),
            base_misses: Default::default(),
            run_rd: Default::default(),
            run_wr: Default::default(),
            run_macs: Default::default(),
            run_skipped: Default::default(),
            run_hits: Default::default(),
            run_misses: Default::default(),
            busy_off: Default::default(),
            arg_off: Default::default(),
        }
    }
}

impl Logic for Mmio {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, base_rd, base_wr, base_macs, base_skipped, base_hits, irq_en, done, error, irq_status, base, len, wdog, argv, rdata_r, rvalid_r, start_r, abort_r,
            hi_hash, hi_cycles, hi_instret, hi_rd, hi_wr, hi_macs, hi_stall, hi_info, busyc, hi_busy, base_misses
        );
        self.rdata.next = self.rdata_r.q.val();
        self.rvalid.next = self.rvalid_r.q.val();
        self.start.next = self.start_r.q.val();
        self.soft_reset.next = self.abort_r.q.val();
        self.prog_base.next = self.base.q.val();
        self.prog_len.next = self.len.q.val();
        self.args.next = self.argv.q.val();
        self.watchdog.next = self.wdog.q.val();
        self.irq.next = self.irq_en.q.val() & self.irq_status.q.val().any();
        self.start_r.d.next = false;
        self.abort_r.d.next = false;
        self.rvalid_r.d.next = self.read.val();
        self.clear.next = false;
        self.run_rd.next = self.bytes_read.val() - self.base_rd.q.val();
        self.run_wr.next = self.bytes_written.val() - self.base_wr.q.val();
        self.run_macs.next = self.macs.val() - self.base_macs.q.val();
        self.run_skipped.next = self.skipped_blocks.val() - self.base_skipped.q.val();
        self.run_hits.next = self.kv_history_hits.val() - self.base_hits.q.val();
        self.run_misses.next = self.kv_history_misses.val() - self.base_misses.q.val();
        // busy cycles: each unit's counter counts while the run is active (four 64-bit adds: one add over
        // the 256 bits would be a 256-bit carry chain, too long for a cycle at 225 MHz)
        if self.busy.val() {
            self.busyc.d.next = bit_cast::<256, 64>(self.busyc.q.val().get_bits::<64>(0) + bit_cast::<64, 1>(self.unit_busy.val().get_bit(0).into()))
                | (bit_cast::<256, 64>(self.busyc.q.val().get_bits::<64>(64) + bit_cast::<64, 1>(self.unit_busy.val().get_bit(1).into())) << 64)
                | (bit_cast::<256, 64>(self.busyc.q.val().get_bits::<64>(128) + bit_cast::<64, 1>(self.unit_busy.val().get_bit(2).into())) << 128)
                | (bit_cast::<256, 64>(self.busyc.q.val().get_bits::<64>(192) + bit_cast::<64, 1>(self.unit_busy.val().get_bit(3).into())) << 192);
        }
        self.busy_off.next = self.addr.val() - self.a_busy.val();
        self.arg_off.next = self.addr.val() - self.a_arg0.val();

        // ---- reads
        self.value.next = 0.into();
        if self.addr.val() == self.a_id.val() {
            self.value.next = self.id_value.val();
        }
        if self.addr.val() == self.a_version.val() {
            self.value.next = self.version_value.val();
        }
        if self.addr.val() == self.a_hash.val() {
            self.value.next = self.hash.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_hash.d.next = self.hash.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_hash.val() + 4 {
            self.value.next = self.hi_hash.q.val();
        }
        if self.addr.val() == self.a_control.val() {
            self.value.next = 0.into();
            if self.irq_en.q.val() {
                self.value.next = self.b_irq_enable.val();
            }
        }
        if self.addr.val() == self.a_status.val() {
            // a run started by the doorbell is busy from the cycle after the write on, one aborted by
            // SOFT_RESET is not; the cycle its completion is on the way (the core idle, DONE or ERROR set at
            // the next edge) still reads busy, so a host never sees a run that is neither busy nor done
            self.value.next = bit_cast::<32, 1>(((self.busy.val() | self.start_r.q.val() | self.fin.val()) & !self.abort_r.q.val()).into())
                | (bit_cast::<32, 1>(self.done.q.val().into()) << 1)
                | (bit_cast::<32, 1>(self.error.q.val().into()) << 2);
        }
        if self.addr.val() == self.a_irq_status.val() {
            self.value.next = bit_cast::<32, 2>(self.irq_status.q.val());
        }
        if self.addr.val() == self.a_base.val() {
            self.value.next = self.base.q.val().get_bits::<32>(0);
        }
        if self.addr.val() == self.a_base.val() + 4 {
            self.value.next = self.base.q.val().get_bits::<32>(32);
        }
        if self.addr.val() == self.a_len.val() {
            self.value.next = self.len.q.val();
        }
        if self.addr.val() == self.a_wdog.val() {
            self.value.next = self.wdog.q.val();
        }
        if (self.addr.val() >= self.a_arg0.val()) & (self.arg_off.val() < 32) & (self.addr.val().get_bits::<2>(0) == 0) {
            self.value.next = self.argv.q.val().get_bits::<32>((self.arg_off.val() << 3).index());
        }
        if self.addr.val() == self.a_cycles.val() {
            self.value.next = self.cycles.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_cycles.d.next = self.cycles.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_cycles.val() + 4 {
            self.value.next = self.hi_cycles.q.val();
        }
        if self.addr.val() == self.a_instret.val() {
            self.value.next = self.instret.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_instret.d.next = self.instret.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_instret.val() + 4 {
            self.value.next = self.hi_instret.q.val();
        }
        if self.addr.val() == self.a_rd.val() {
            self.value.next = self.run_rd.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_rd.d.next = self.run_rd.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_rd.val() + 4 {
            self.value.next = self.hi_rd.q.val();
        }
        if self.addr.val() == self.a_wr.val() {
            self.value.next = self.run_wr.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_wr.d.next = self.run_wr.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_wr.val() + 4 {
            self.value.next = self.hi_wr.q.val();
        }
        if self.addr.val() == self.a_macs.val() {
            self.value.next = self.run_macs.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_macs.d.next = self.run_macs.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_macs.val() + 4 {
            self.value.next = self.hi_macs.q.val();
        }
        if self.addr.val() == self.a_stall.val() {
            self.value.next = self.stall_cycles.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_stall.d.next = self.stall_cycles.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_stall.val() + 4 {
            self.value.next = self.hi_stall.q.val();
        }
        if self.addr.val() == self.a_skipped.val() {
            self.value.next = self.run_skipped.val();
        }
        if self.addr.val() == self.a_hits.val() {
            self.value.next = self.run_hits.val();
        }
        if self.addr.val() == self.a_misses.val() {
            self.value.next = self.run_misses.val();
        }
        // BUSY_<unit>_LO at BUSY_LO + 8u latches its HI word; BUSY_<unit>_HI at + 4 reads the latch
        if (self.addr.val() >= self.a_busy.val()) & (self.busy_off.val() < 32) & (self.addr.val().get_bits::<2>(0) == 0) {
            if self.busy_off.val().get_bit(2) {
                self.value.next = self.hi_busy.q.val().get_bits::<32>(((self.busy_off.val() >> 3) << 5).index());
            } else {
                self.value.next = self.busyc.q.val().get_bits::<32>((self.busy_off.val() << 3).index());
                if self.read.val() {
                    self.hi_busy.d.next = (self.hi_busy.q.val() & !(bit_cast::<128, 32>(self.ones32.val()) << ((self.busy_off.val() >> 3) << 5)))
                        | (bit_cast::<128, 32>(self.busyc.q.val().get_bits::<32>(((self.busy_off.val() << 3) + 32).index())) << ((self.busy_off.val() >> 3) << 5));
                }
            }
        }
        if self.addr.val() == self.a_err_code.val() {
            self.value.next = bit_cast::<32, 4>(self.err_code.val());
        }
        if self.addr.val() == self.a_err_pc.val() {
            self.value.next = self.err_pc.val();
        }
        if self.addr.val() == self.a_err_info.val() {
            self.value.next = self.err_info.val().get_bits::<32>(0);
            if self.read.val() {
                self.hi_info.d.next = self.err_info.val().get_bits::<32>(32);
            }
        }
        if self.addr.val() == self.a_err_info.val() + 4 {
            self.value.next = self.hi_info.q.val();
        }
        if self.addr.val() == self.a_cfg_pe_lanes.val() {
            self.value.next = self.cfg_pe_lanes.val();
        }
        if self.addr.val() == self.a_cfg_dot_width.val() {
            self.value.next = self.cfg_dot_width.val();
        }
        if self.addr.val() == self.a_cfg_spm.val() {
            self.value.next = self.cfg_spm.val();
        }
        if self.addr.val() == self.a_cfg_slots.val() {
            self.value.next = self.cfg_slots.val();
        }
        // the debug window (aligned offsets only)
        if self.addr.val().get_bits::<2>(0) == 0 {
            if (self.addr.val() >= self.a_dbg_r0.val()) & (self.addr.val() < self.a_dbg_pred.val()) {
                self.value.next = self.dbg_rf.val().get_bits::<32>(((self.addr.val() - self.a_dbg_r0.val()) << 3).index());
            }
            if self.addr.val() == self.a_dbg_pred.val() {
                self.value.next = bit_cast::<32, 8>(self.dbg_preds.val());
            }
            if (self.addr.val() >= self.a_dbg_csr0.val())
                & (self.addr.val() < self.a_dbg_csr0.val() + self.dbg_csr_bytes.val())
            {
                self.value.next =
                    self.dbg_csrs.val().get_bits::<32>(((self.addr.val() - self.a_dbg_csr0.val()) << 3).index());
            }
        }
        if self.read.val() {
            self.rdata_r.d.next = self.value.val();
        }

        // ---- writes
        if self.write.val() {
            if self.addr.val() == self.a_control.val() {
                self.irq_en.d.next = (self.wdata.val() & self.b_irq_enable.val()).any();
                if (self.wdata.val() & self.b_soft_reset.val()).any() {
                    self.abort_r.d.next = true;
                    self.irq_status.d.next = 0.into();
                    self.clear.next = true;
                }
            }
            if (self.addr.val() == self.a_doorbell.val())
                & self.wdata.val().get_bit(0)
                & !self.busy.val()
                & !self.start_r.q.val()
            {
                self.start_r.d.next = true;
                self.clear.next = true;
            }
            if self.addr.val() == self.a_irq_status.val() {
                self.irq_status.d.next = self.irq_status.q.val() & !self.wdata.val().get_bits::<2>(0);
            }
            if self.addr.val() == self.a_base.val() {
                // instruction 0 is 16-byte aligned: bits 3:0 read as zero
                self.base.d.next = (self.base.q.val() & (bit_cast::<64, 32>(self.ones32.val()) << 32))
                    | bit_cast::<64, 32>(self.wdata.val() & !bits::<32>(15));
            }
            if self.addr.val() == self.a_base.val() + 4 {
                self.base.d.next =
                    (self.base.q.val() & bit_cast::<64, 32>(self.ones32.val())) | (bit_cast::<64, 32>(self.wdata.val()) << 32);
            }
            if self.addr.val() == self.a_len.val() {
                self.len.d.next = self.wdata.val();
            }
            if self.addr.val() == self.a_wdog.val() {
                self.wdog.d.next = self.wdata.val();
            }
            if (self.addr.val() >= self.a_arg0.val()) & (self.arg_off.val() < 32) & (self.addr.val().get_bits::<2>(0) == 0) {
                self.argv.d.next = (self.argv.q.val()
                    & !(bit_cast::<256, 32>(self.ones32.val()) << (self.arg_off.val() << 3)))
                    | (bit_cast::<256, 32>(self.wdata.val()) << (self.arg_off.val() << 3));
            }
        }
        // DOORBELL and SOFT_RESET clear the run's status and the HI latches
        if self.clear.val() {
            self.base_rd.d.next = self.bytes_read.val();
            self.base_wr.d.next = self.bytes_written.val();
            self.base_macs.d.next = self.macs.val();
            self.base_skipped.d.next = self.skipped_blocks.val();
            self.base_hits.d.next = self.kv_history_hits.val();
            self.base_misses.d.next = self.kv_history_misses.val();
            self.busyc.d.next = 0.into();
            self.hi_busy.d.next = 0.into();
            self.done.d.next = false;
            self.error.d.next = false;
            self.hi_hash.d.next = 0.into();
            self.hi_cycles.d.next = 0.into();
            self.hi_instret.d.next = 0.into();
            self.hi_rd.d.next = 0.into();
            self.hi_wr.d.next = 0.into();
            self.hi_macs.d.next = 0.into();
            self.hi_stall.d.next = 0.into();
            self.hi_info.d.next = 0.into();
        }
        if self.fin.val() {
            if self.fin_error.val() {
                self.error.d.next = true;
                self.irq_status.d.next = self.irq_status.q.val() | 2;
            } else {
                self.done.d.next = true;
                self.irq_status.d.next = self.irq_status.q.val() | 1;
            }
        }
        if self.reset.val() {
            self.irq_en.d.next = false;
            self.done.d.next = false;
            self.error.d.next = false;
            self.irq_status.d.next = 0.into();
            self.base.d.next = 0.into();
            self.len.d.next = 0.into();
            self.wdog.d.next = self.wdog_default.val();
            self.busyc.d.next = 0.into();
            self.argv.d.next = 0.into();
            self.start_r.d.next = false;
            self.abort_r.d.next = false;
        }
    }
}

/// A [`Mmio`] of `config` ready to simulate or emit.
pub fn mmio_top(config: &OverlayConfig) -> Mmio {
    connect_top!(
        Mmio::new(config),
        clock,
        reset,
        addr,
        wdata,
        write,
        read,
        busy,
        fin,
        fin_error,
        err_code,
        err_pc,
        err_info,
        cycles,
        instret,
        bytes_read,
        bytes_written,
        macs,
        stall_cycles,
        skipped_blocks,
        kv_history_hits,
        kv_history_misses,
        unit_busy,
        dbg_rf,
        dbg_preds,
        dbg_csrs
    )
}

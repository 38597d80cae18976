//! The functional simulator: the golden model of the overlay.
//!
//! [`FuncSim`] holds the machine state of docs/isa.md (registers, predicates, the reduction file, CSRs, the
//! scratchpad, the KV history buffer, device memory) and the register map of docs/registers.md, and
//! implements [`Device`]. Writing 1 to `DOORBELL` runs the program at `PROG_BASE` to its `end` or its first
//! trap before the write returns; [`Device::wait_done`] then reports the run. Every arithmetic step is a
//! function of `opu_hw::numerics`; on the matmul hot path the kernel computes each block's exact integer
//! sums with SIMD and hands them to `dot::accumulate_block_sums`, the accumulator half of
//! `dot::accumulate_block` (tested equal to it on 10^6 random blocks).
//!
//! Modules: `mmio` (registers, `Device`), `program` (fetch and decode), `machine` (state, traps, checked
//! addresses), `exec` (instruction semantics by class), `kernel` (matmul), `stats` (counters, regions), `cost` (the
//! cycle estimate).

mod cost;
mod exec;
mod kernel;
mod machine;
mod mmio;
mod program;
mod history_refresh;
mod rowcache;
mod score;
mod stats;
mod threads;

use std::time::Duration;

use opu_hw::container::Region;
use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::isa::{encode_program, Csr, Instr};
use opu_hw::numerics::WideAcc;
use opu_hw::regs::{self, irq, status, ErrorCode};
use opu_hw::OverlayConfig;

use machine::{Flow, Machine, Trap};
use mmio::MmioRegs;
use program::{Fetched, ProgramCache};
pub use stats::{RegionBytes, Stats, OTHER_REGION};

/// The functional simulator of one overlay configuration.
pub struct FuncSim {
    config: OverlayConfig,
    machine: Machine,
    regs: MmioRegs,
    program: ProgramCache,
    /// The pcs of the instructions the last run executed, in order, when [`FuncSim::trace_pcs`] is on.
    pc_trace: Option<Vec<u64>>,
}

impl FuncSim {
    /// A simulator with zeroed device memory (allocated lazily by the OS), one compute thread.
    pub fn new(config: &OverlayConfig) -> FuncSim {
        FuncSim {
            config: config.clone(),
            machine: Machine::new(config),
            regs: MmioRegs::default(),
            program: ProgramCache::default(),
            pc_trace: None,
        }
    }

    /// Records the pc of every instruction each run executes (skipped ones are not), for co-simulation:
    /// a program with `end` written over one of them stops right after the ones before it.
    pub fn trace_pcs(&mut self, on: bool) {
        self.pc_trace = on.then(Vec::new);
    }

    /// The pcs the last run executed (empty unless [`FuncSim::trace_pcs`] is on).
    pub fn executed_pcs(&self) -> &[u64] {
        self.pc_trace.as_deref().unwrap_or(&[])
    }

    pub fn config(&self) -> &OverlayConfig {
        &self.config
    }

    /// Threads that compute matmul rows (at least 1). Results are bit-identical for any number.
    pub fn set_threads(&mut self, n: usize) {
        self.machine.kernel.set_threads(n);
    }

    pub fn threads(&self) -> usize {
        self.machine.kernel.threads()
    }

    /// Named device-memory regions for [`FuncSim::stats`]'s per-region traffic (e.g. the container's layout).
    pub fn set_regions(&mut self, regions: Vec<Region>) {
        self.machine.regions = stats::RegionTable::new(regions);
    }

    /// The counters of the last run.
    pub fn stats(&self) -> Stats {
        self.machine.counters.stats(&self.machine.regions)
    }

    /// Whether the interrupt line is high (an IRQ_STATUS bit set and IRQ_ENABLE).
    pub fn irq_line(&self) -> bool {
        self.regs.irq_enable && self.regs.irq_status != 0
    }

    /// Device memory.
    pub fn memory(&self) -> &[u8] {
        &self.machine.mem
    }

    /// The scratchpad (for tests and debugging; programs fill it by DMA).
    pub fn scratchpad(&self) -> &[u8] {
        &self.machine.spm
    }

    pub fn scratchpad_mut(&mut self) -> &mut [u8] {
        &mut self.machine.spm
    }

    /// Scalar register `r[i]` as the last run left it.
    pub fn reg(&self, i: usize) -> u32 {
        self.machine.r[i]
    }

    /// Predicate `p[i]`.
    pub fn pred(&self, i: usize) -> bool {
        self.machine.p[i]
    }

    /// Reduction entry `RED[t]`.
    pub fn red(&self, t: usize) -> WideAcc {
        self.machine.red[t]
    }

    pub fn csr(&self, c: Csr) -> u32 {
        self.machine.csr(c)
    }

    /// History slot `t`: (K, V), `kv_history_width` FP16 each (`&mut`: the slot's deferred refreshes are
    /// copied first).
    pub fn history(&mut self, t: usize) -> (&[u16], &[u16]) {
        self.machine.copy_slot_refreshes(t);
        let w = self.config.kv_history_width as usize;
        (&self.machine.hist_k[t * w..(t + 1) * w], &self.machine.hist_v[t * w..(t + 1) * w])
    }

    pub fn history_mut(&mut self, t: usize) -> (&mut [u16], &mut [u16]) {
        self.machine.copy_slot_refreshes(t);
        let w = self.config.kv_history_width as usize;
        (&mut self.machine.hist_k[t * w..(t + 1) * w], &mut self.machine.hist_v[t * w..(t + 1) * w])
    }

    /// Writes `program` at byte `base` of device memory and points `PROG_BASE` / `PROG_LEN` at it.
    pub fn load_program(&mut self, base: u64, program: &[Instr]) -> Result<(), DeviceError> {
        let code = encode_program(program).map_err(|e| DeviceError::Io(e.to_string()))?;
        self.mem_write(base, &code)?;
        self.mmio_write(regs::PROG_BASE_LO, base as u32)?;
        self.mmio_write(regs::PROG_BASE_HI, (base >> 32) as u32)?;
        self.mmio_write(regs::PROG_LEN, program.len() as u32)
    }

    /// Runs the loaded program with `ARG0..` = `args` (the rest 0): the doorbell, then `wait_done`.
    pub fn run(&mut self, args: &[u32]) -> Result<Completion, DeviceError> {
        assert!(args.len() <= regs::NUM_ARGS as usize, "at most {} arguments", regs::NUM_ARGS);
        for i in 0..regs::NUM_ARGS {
            self.mmio_write(regs::ARG0 + 4 * i, args.get(i as usize).copied().unwrap_or(0))?;
        }
        self.mmio_write(regs::DOORBELL, 1)?;
        self.wait_done(Duration::MAX)
    }

    fn soft_reset(&mut self) {
        self.regs.clear_status();
        self.regs.irq_status = 0;
        self.machine.counters = Default::default();
        self.machine.regions.clear_counts();
    }

    /// The doorbell: runs the program to its end or first trap (docs/registers.md, "Running a program").
    fn doorbell(&mut self) {
        self.regs.clear_status();
        self.machine.reset_for_run(&self.regs.args);
        self.machine.counters.cycles += self.machine.cost_model.start_cycles();
        if let Some(t) = &mut self.pc_trace {
            t.clear();
        }
        self.program.load(&self.machine.mem, self.regs.prog_base, self.regs.prog_len);
        // The whole program runs on a worker of the pool (when there is one): each parallel matmul or
        // attention then starts from the thread that runs the program, which takes its share of the work,
        // instead of waking the pool from outside and sleeping until it is done.
        let result = match self.machine.kernel.pool() {
            Some(pool) => pool.install(|| self.execute_program()),
            None => self.execute_program(),
        };
        match result {
            Ok(()) => {
                self.regs.status = status::DONE;
                self.regs.irq_status |= irq::DONE;
            }
            Err((pc, trap)) => {
                self.regs.status = status::ERROR;
                self.regs.irq_status |= irq::ERROR;
                self.regs.error_code = trap.code;
                self.regs.error_pc = u32::try_from(pc).unwrap_or(u32::MAX);
                self.regs.error_info = trap.info;
            }
        }
    }

    /// Fetch, execute, retire until `end`; a trap gives its pc.
    fn execute_program(&mut self) -> Result<(), (u64, Trap)> {
        let len = u64::from(self.regs.prog_len);
        let mut pc = 0u64;
        loop {
            if pc >= len {
                return Err((pc, Trap { code: ErrorCode::PcOutOfRange, info: pc }));
            }
            let instr = match self.program.fetch(&self.machine.mem, pc) {
                Fetched::Instr(i) => i,
                Fetched::Illegal(word) => return Err((pc, Trap { code: ErrorCode::IllegalInstruction, info: word })),
                Fetched::OutOfMemory(addr) => return Err((pc, Trap { code: ErrorCode::MemOutOfRange, info: addr })),
            };
            self.machine.work = Default::default();
            let flow = self.machine.execute(&instr).map_err(|t| (pc, t))?;
            self.machine.retire(&instr);
            if let Some(t) = &mut self.pc_trace {
                t.push(pc);
            }
            match flow {
                Flow::Next => pc += 1,
                Flow::Skip(n) => pc += 1 + u64::from(n),
                Flow::End => return Ok(()),
            }
        }
    }
}

impl Machine {
    /// Counts a completed instruction and its work.
    fn retire(&mut self, instr: &Instr) {
        let (w, c) = (self.work, &mut self.counters);
        c.instret += 1;
        c.by_opcode[usize::from(instr.opcode())] += 1;
        c.macs += w.macs;
        c.bytes_read += w.bytes_read;
        c.bytes_written += w.bytes_written;
        let lead = if matches!(instr, Instr::Matmul { .. }) { self.loader_lead.take() } else { 0 };
        let attn_csrs = (self.csr[Csr::HeadDim as usize], self.csr[Csr::AttnHeads as usize]);
        // (a CNN layer's estimate depends only on its shape and placement, `w.cnn`: stepped through once)
        let model = self.cost_model;
        let (cycles, stall) = match w.cnn {
            Some(run) => *self.cnn_cycles.entry(run).or_insert_with(|| model.estimate(instr, &w, attn_csrs, lead)),
            None => model.estimate(instr, &w, attn_csrs, lead),
        };
        c.cycles += cycles;
        c.cycles_by_opcode[usize::from(instr.opcode())] += cycles;
        if let Some(u) = instr.spec().unit() {
            c.busy_cycles[u as usize] += cycles;
        }
        self.loader_lead.note(instr, cycles);
        c.stall_cycles += stall;
    }
}

//! The register map (docs/registers.md) and the `Device` implementation of [`FuncSim`].

use std::collections::BTreeMap;
use std::time::Duration;

use opu_hw::device::{check_range, Completion, Device, DeviceError};
use opu_hw::isa::NUM_REGS;
use opu_hw::regs::{self, control, ErrorCode};

use super::FuncSim;

/// The host-visible registers that are not counters.
#[derive(Clone, Debug)]
pub(crate) struct MmioRegs {
    pub irq_enable: bool,
    pub status: u32,
    pub irq_status: u32,
    pub prog_base: u64,
    pub prog_len: u32,
    pub args: [u32; regs::NUM_ARGS as usize],
    /// `WATCHDOG`: kept for the host; the functional simulator's units never stall, so it never fires.
    pub watchdog: u32,
    pub error_code: ErrorCode,
    pub error_pc: u32,
    pub error_info: u64,
    /// HI words latched by reading their LO word, by HI offset.
    hi_latch: BTreeMap<u32, u32>,
}

impl Default for MmioRegs {
    fn default() -> Self {
        MmioRegs {
            irq_enable: false,
            status: 0,
            irq_status: 0,
            prog_base: 0,
            prog_len: 0,
            args: [0; regs::NUM_ARGS as usize],
            watchdog: regs::WATCHDOG_DEFAULT,
            error_code: ErrorCode::None,
            error_pc: 0,
            error_info: 0,
            hi_latch: BTreeMap::new(),
        }
    }
}

impl MmioRegs {
    /// SOFT_RESET, and the start of a run: status, errors and latches cleared (the run also clears the
    /// counters, which live with the machine).
    pub fn clear_status(&mut self) {
        self.status = 0;
        self.error_code = ErrorCode::None;
        self.error_pc = 0;
        self.error_info = 0;
        self.hi_latch.clear();
    }
}

impl FuncSim {
    /// The 64-bit value whose LO word is at `lo`, for the read-only LO/HI pairs.
    fn pair(&self, lo: u32) -> Option<u64> {
        let c = &self.machine.counters;
        Some(match lo {
            regs::CONFIG_HASH_LO => self.config.hash(),
            regs::CYCLES_LO => c.cycles,
            regs::INSTRET_LO => c.instret,
            regs::BYTES_READ_LO => c.bytes_read,
            regs::BYTES_WRITTEN_LO => c.bytes_written,
            regs::MACS_LO => c.macs,
            regs::STALL_CYCLES_LO => c.stall_cycles,
            o if (regs::BUSY_LO..regs::BUSY_LO + 32).contains(&o) && (o - regs::BUSY_LO).is_multiple_of(8) => c.busy_cycles[((o - regs::BUSY_LO) / 8) as usize],
            regs::ERROR_INFO_LO => self.regs.error_info,
            _ => return None,
        })
    }
}

impl Device for FuncSim {
    fn mmio_read(&mut self, offset: u32) -> Result<u32, DeviceError> {
        regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
        if let Some(v) = self.pair(offset) {
            // Reading LO latches HI, so a pair read while a counter runs is consistent.
            self.regs.hi_latch.insert(offset + 4, (v >> 32) as u32);
            return Ok(v as u32);
        }
        if offset >= 4 && self.pair(offset - 4).is_some() {
            return Ok(self.regs.hi_latch.get(&offset).copied().unwrap_or(0));
        }
        let r = &self.regs;
        let c = &self.machine.counters;
        Ok(match offset {
            regs::ID => regs::ID_VALUE,
            regs::VERSION => regs::VERSION_VALUE,
            regs::CONTROL => {
                if r.irq_enable {
                    control::IRQ_ENABLE
                } else {
                    0
                }
            }
            regs::STATUS => r.status,
            regs::DOORBELL => 0,
            regs::IRQ_STATUS => r.irq_status,
            regs::PROG_BASE_LO => r.prog_base as u32,
            regs::PROG_BASE_HI => (r.prog_base >> 32) as u32,
            regs::PROG_LEN => r.prog_len,
            regs::WATCHDOG => r.watchdog,
            o if (regs::ARG0..regs::ARG0 + 4 * regs::NUM_ARGS).contains(&o) => r.args[((o - regs::ARG0) / 4) as usize],
            regs::SKIPPED_BLOCKS => c.skipped_blocks as u32,
            regs::KV_HISTORY_HITS => c.kv_history_hits as u32,
            regs::KV_HISTORY_MISSES => c.kv_history_misses as u32,
            regs::ERROR_CODE => r.error_code as u32,
            regs::ERROR_PC => r.error_pc,
            regs::CFG_PE_LANES => self.config.pe_lanes,
            regs::CFG_DOT_WIDTH => self.config.dot_width,
            regs::CFG_SCRATCHPAD_BYTES => self.config.scratchpad_bytes,
            regs::CFG_KV_HISTORY_SLOTS => self.config.kv_history_slots,
            o if (regs::DBG_R0..regs::DBG_R0 + 4 * NUM_REGS as u32).contains(&o) => self.machine.r[((o - regs::DBG_R0) / 4) as usize],
            regs::DBG_PRED => self.machine.p.iter().enumerate().map(|(i, &p)| u32::from(p) << i).sum(),
            o if (regs::DBG_CSR0..regs::DBG_CSR0 + 4 * regs::DBG_CSRS).contains(&o) => {
                self.machine.csr[((o - regs::DBG_CSR0) / 4) as usize]
            }
            _ => unreachable!("register {offset:#x} of the map is not handled"),
        })
    }

    fn mmio_write(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
        let r = &mut self.regs;
        match offset {
            regs::CONTROL => {
                r.irq_enable = value & control::IRQ_ENABLE != 0;
                if value & control::SOFT_RESET != 0 {
                    self.soft_reset();
                }
            }
            regs::DOORBELL if value & 1 != 0 => self.doorbell(),
            regs::IRQ_STATUS => r.irq_status &= !value,
            // Instruction 0 is 16-byte aligned: bits 3:0 of PROG_BASE are hardwired to zero.
            regs::PROG_BASE_LO => r.prog_base = (r.prog_base & !0xFFFF_FFFF) | u64::from(value & !0xF),
            regs::PROG_BASE_HI => r.prog_base = (r.prog_base & 0xFFFF_FFFF) | u64::from(value) << 32,
            regs::PROG_LEN => r.prog_len = value,
            regs::WATCHDOG => r.watchdog = value,
            o if (regs::ARG0..regs::ARG0 + 4 * regs::NUM_ARGS).contains(&o) => {
                r.args[((o - regs::ARG0) / 4) as usize] = value
            }
            // Writes to read-only registers are ignored, as by the hardware.
            _ => {}
        }
        Ok(())
    }

    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_range(addr, data.len() as u64, self.mem_size())?;
        self.machine.before_write(&(addr as usize..addr as usize + data.len()));
        self.machine.mem[addr as usize..addr as usize + data.len()].copy_from_slice(data);
        self.machine.row_cache.written(&(addr as usize..addr as usize + data.len()));
        Ok(())
    }

    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(addr, buf.len() as u64, self.mem_size())?;
        buf.copy_from_slice(&self.machine.mem[addr as usize..addr as usize + buf.len()]);
        Ok(())
    }

    fn mem_size(&self) -> u64 {
        self.machine.mem.len() as u64
    }

    fn take_written(&mut self) -> Option<Vec<std::ops::Range<u64>>> {
        Some(self.machine.written.take())
    }

    /// Runs are synchronous (the doorbell returns when the program has ended), so this only reports.
    fn wait_done(&mut self, _timeout: Duration) -> Result<Completion, DeviceError> {
        let s = self.regs.status;
        if s & regs::status::DONE != 0 {
            let c = &self.machine.counters;
            Ok(Completion { cycles: c.cycles, instructions: c.instret })
        } else if s & regs::status::ERROR != 0 {
            Err(DeviceError::Trap { code: self.regs.error_code, pc: self.regs.error_pc })
        } else {
            Err(DeviceError::Io("no program has run".into()))
        }
    }
}

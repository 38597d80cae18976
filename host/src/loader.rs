//! Loading a program container onto any `Device` and running one of its entry points: the same code for
//! the simulators, the emulated card and a real card (docs/registers.md, "Running a program").

use anyhow::{Context, Result};
use opu_hw::container::{Container, SectionKind};
use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::regs;
use std::time::Duration;

/// Checks the device's identity and config hash, then writes CODE and DATA sections and zeroes BSS.
pub fn load(dev: &mut dyn Device, c: &Container) -> Result<()> {
    let id = dev.mmio_read(regs::ID)?;
    anyhow::ensure!(id == regs::ID_VALUE, "the device is not an OPU overlay (ID register {id:#010x})");
    let hash = dev.config_hash()?;
    if hash != c.config_hash {
        return Err(DeviceError::ConfigMismatch { device: hash, program: c.config_hash }.into());
    }
    let zeros = vec![0u8; 1 << 20];
    for s in &c.sections {
        match s.kind {
            SectionKind::Code | SectionKind::Data => {
                dev.mem_write(s.device_addr, &s.data).with_context(|| format!("loading section `{}`", s.name))?
            }
            SectionKind::Bss => {
                let mut at = 0;
                while at < s.bss_bytes {
                    let n = (s.bss_bytes - at).min(zeros.len() as u64);
                    dev.mem_write(s.device_addr + at, &zeros[..n as usize]).with_context(|| format!("zeroing section `{}`", s.name))?;
                    at += n;
                }
            }
            SectionKind::Layout | SectionKind::Meta => {}
        }
    }
    Ok(())
}

/// Runs the code at `code_addr` (`instructions` long) with arguments `args` (ARG0, ARG1, ...).
pub fn run(dev: &mut dyn Device, code_addr: u64, instructions: usize, args: &[u32], timeout: Duration) -> Result<Completion, DeviceError> {
    dev.mmio_write(regs::PROG_BASE_LO, code_addr as u32)?;
    dev.mmio_write(regs::PROG_BASE_HI, (code_addr >> 32) as u32)?;
    dev.mmio_write(regs::PROG_LEN, instructions as u32)?;
    for (i, &a) in args.iter().enumerate() {
        dev.mmio_write(regs::ARG0 + 4 * i as u32, a)?;
    }
    dev.mmio_write(regs::DOORBELL, 1)?;
    dev.wait_done(timeout)
}

/// The run counters of the device (the figures after a run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub cycles: u64,
    pub instructions: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub macs: u64,
    pub skipped_blocks: u64,
    pub kv_history_hits: u64,
    pub kv_history_misses: u64,
    /// Busy cycles per unit (`opu_hw::isa::ExecUnit` order).
    pub busy: [u64; 4],
}

impl Counters {
    pub fn read(dev: &mut dyn Device) -> Result<Self, DeviceError> {
        Ok(Counters {
            cycles: dev.mmio_read64(regs::CYCLES_LO)?,
            instructions: dev.mmio_read64(regs::INSTRET_LO)?,
            bytes_read: dev.mmio_read64(regs::BYTES_READ_LO)?,
            bytes_written: dev.mmio_read64(regs::BYTES_WRITTEN_LO)?,
            macs: dev.mmio_read64(regs::MACS_LO)?,
            skipped_blocks: u64::from(dev.mmio_read(regs::SKIPPED_BLOCKS)?),
            kv_history_hits: u64::from(dev.mmio_read(regs::KV_HISTORY_HITS)?),
            kv_history_misses: u64::from(dev.mmio_read(regs::KV_HISTORY_MISSES)?),
            busy: [
                dev.mmio_read64(regs::BUSY_LO)?,
                dev.mmio_read64(regs::BUSY_LO + 8)?,
                dev.mmio_read64(regs::BUSY_LO + 16)?,
                dev.mmio_read64(regs::BUSY_LO + 24)?,
            ],
        })
    }
    pub fn add(&mut self, o: &Counters) {
        self.cycles += o.cycles;
        self.instructions += o.instructions;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.macs += o.macs;
        self.skipped_blocks += o.skipped_blocks;
        self.kv_history_hits += o.kv_history_hits;
        self.kv_history_misses += o.kv_history_misses;
        for (b, o) in self.busy.iter_mut().zip(o.busy) {
            *b += o;
        }
    }

    /// The figures of these counters over `tokens` tokens on an overlay of `config`: cycles, bytes moved and
    /// their rate against the memory's peak, each unit's share of the cycles, tokens/s at the core clock.
    pub fn figures(&self, tokens: f64, config: &opu_hw::OverlayConfig) -> serde_json::Value {
        let cycles = self.cycles.max(1) as f64;
        let moved = (self.bytes_read + self.bytes_written) as f64;
        let cycles_per_token = self.cycles as f64 / tokens;
        let utilization: serde_json::Map<String, serde_json::Value> =
            opu_hw::isa::ExecUnit::ALL.iter().map(|u| (u.name().to_string(), (self.busy[*u as usize] as f64 / cycles).into())).collect();
        serde_json::json!({
            "cycles_per_token": cycles_per_token,
            "bytes_per_token": moved / tokens,
            "bytes_per_cycle": moved / cycles,
            "peak_bytes_per_cycle": config.peak_bytes_per_cycle(),
            "bandwidth_efficiency": moved / cycles / config.peak_bytes_per_cycle(),
            "unit_utilization": utilization,
            "projected_tokens_per_second": f64::from(config.core_clock_mhz) * 1e6 / cycles_per_token.max(1.0),
            "core_clock_mhz": config.core_clock_mhz,
        })
    }
}

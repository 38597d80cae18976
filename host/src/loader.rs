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
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub cycles: u64,
    pub instructions: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub macs: u64,
}

impl Counters {
    pub fn read(dev: &mut dyn Device) -> Result<Self, DeviceError> {
        Ok(Counters {
            cycles: dev.mmio_read64(regs::CYCLES_LO)?,
            instructions: dev.mmio_read64(regs::INSTRET_LO)?,
            bytes_read: dev.mmio_read64(regs::BYTES_READ_LO)?,
            bytes_written: dev.mmio_read64(regs::BYTES_WRITTEN_LO)?,
            macs: dev.mmio_read64(regs::MACS_LO)?,
        })
    }
    pub fn add(&mut self, o: &Counters) {
        self.cycles += o.cycles;
        self.instructions += o.instructions;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.macs += o.macs;
    }
}

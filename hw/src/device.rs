//! The `Device` trait: what the host runtime sees of an overlay, whatever implements it (the functional
//! simulator, the Verilated RTL, the emulated PCIe card, a real card).
//!
//! The protocol to run a program (docs/registers.md): write the container's sections to device memory,
//! write `PROG_BASE` and the argument registers, write 1 to `DOORBELL`, then [`Device::wait_done`]. Errors
//! raised by the program (a trap) come back as [`DeviceError::Trap`] with the code and faulting PC read from
//! `ERROR_CODE` / `ERROR_PC`.

use crate::regs::ErrorCode;
use std::time::Duration;

/// What went wrong talking to a device.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device did not complete within {waited:?}: STATUS (0x014) still reads {status:#x}, neither DONE nor ERROR")]
    Timeout { waited: Duration, status: u32 },
    #[error("device memory access [{addr:#x}, +{len:#x}) outside device memory of {size:#x} bytes")]
    OutOfRange { addr: u64, len: u64, size: u64 },
    #[error("MMIO offset {offset:#x} is not a register (or not 4-byte aligned)")]
    BadRegister { offset: u32 },
    #[error("program trapped at pc {pc:#x}: {code}")]
    Trap { code: ErrorCode, pc: u32 },
    #[error("device reports config hash {device:#018x}, program was built for {program:#018x}")]
    ConfigMismatch { device: u64, program: u64 },
    #[error("device I/O: {0}")]
    Io(String),
}

/// Completion of a run, read from the status and counter registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub cycles: u64,
    pub instructions: u64,
}

pub trait Device {
    /// Reads a 32-bit register at a byte offset of the register map.
    fn mmio_read(&mut self, offset: u32) -> Result<u32, DeviceError>;
    /// Writes a 32-bit register.
    fn mmio_write(&mut self, offset: u32, value: u32) -> Result<(), DeviceError>;
    /// Copies `data` into device memory at byte address `addr`.
    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError>;
    /// Copies device memory at `addr` into `buf`.
    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError>;
    /// Bytes of device memory.
    fn mem_size(&self) -> u64;
    /// Waits until the running program ends (`STATUS.done` or `STATUS.error`), at most `timeout`.
    fn wait_done(&mut self, timeout: Duration) -> Result<Completion, DeviceError>;

    /// Reads a 64-bit register pair (low word first).
    fn mmio_read64(&mut self, lo_offset: u32) -> Result<u64, DeviceError> {
        let lo = self.mmio_read(lo_offset)?;
        let hi = self.mmio_read(lo_offset + 4)?;
        Ok(u64::from(hi) << 32 | u64::from(lo))
    }

    /// The `CONFIG_HASH` registers.
    fn config_hash(&mut self) -> Result<u64, DeviceError> {
        self.mmio_read64(crate::regs::CONFIG_HASH_LO)
    }

    /// Bytes each memory channel has moved since the device was opened, where its memory counts them (the
    /// RTL's memory model does; a functional model moves no lines): every line and beat on the channels,
    /// by `OverlayConfig::channel_of`. These are the memory's figures, not the overlay's counters, which
    /// count the bytes the instructions name (BYTES_READ, BYTES_WRITTEN).
    fn channel_bytes(&self) -> Option<Vec<u64>> {
        None
    }

    /// The device-memory ranges the device itself (its programs, not `mem_write`) wrote since the last
    /// call, in whole pages of [`WrittenPages::PAGE`] bytes, where the device tracks them (the simulators
    /// do). A mirror of device memory copies these back after a run: the emulated card's memory file.
    fn take_written(&mut self) -> Option<Vec<std::ops::Range<u64>>> {
        None
    }
}

/// The pages of device memory written since the last [`WrittenPages::take`]: one bit per page.
#[derive(Clone, Debug, Default)]
pub struct WrittenPages {
    bits: Vec<u64>,
    pages: u64,
}

impl WrittenPages {
    /// Bytes of a page.
    pub const PAGE: u64 = 64 << 10;

    pub fn new(mem_bytes: u64) -> Self {
        let pages = mem_bytes.div_ceil(Self::PAGE);
        WrittenPages { bits: vec![0; pages.div_ceil(64) as usize], pages }
    }

    /// Marks the pages `[start, end)` touches (bytes past the memory are ignored).
    pub fn mark(&mut self, start: u64, end: u64) {
        if end <= start || start / Self::PAGE >= self.pages {
            return;
        }
        let last = ((end - 1) / Self::PAGE).min(self.pages - 1);
        for p in start / Self::PAGE..=last {
            self.bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    /// The marked pages as byte ranges (adjacent pages merged), clearing the marks.
    pub fn take(&mut self) -> Vec<std::ops::Range<u64>> {
        let mut out: Vec<std::ops::Range<u64>> = Vec::new();
        for (w, word) in self.bits.iter_mut().enumerate() {
            let mut b = std::mem::take(word);
            while b != 0 {
                let p = w as u64 * 64 + u64::from(b.trailing_zeros());
                b &= b - 1;
                let r = p * Self::PAGE..(p + 1) * Self::PAGE;
                match out.last_mut() {
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => out.push(r),
                }
            }
        }
        out
    }
}

/// Checks that `[addr, addr + len)` lies inside a memory of `size` bytes; the error every implementation
/// returns for DMA outside device memory.
pub fn check_range(addr: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    match addr.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange { addr, len, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn range_check() {
        assert!(check_range(0, 16, 16).is_ok());
        assert!(matches!(check_range(8, 16, 16), Err(DeviceError::OutOfRange { .. })));
        assert!(check_range(u64::MAX, 2, 16).is_err());
        let e = check_range(0x10, 0x20, 0x18).unwrap_err().to_string();
        assert!(e.contains("0x10") && e.contains("outside device memory"), "{e}");
    }

    #[test]
    fn written_pages_merge_and_clear() {
        const P: u64 = WrittenPages::PAGE;
        let mut w = WrittenPages::new(130 * P);
        w.mark(5, 6);
        w.mark(P - 1, P + 1);
        w.mark(63 * P + 7, 65 * P);
        w.mark(129 * P, 200 * P);
        w.mark(3, 3);
        assert_eq!(w.take(), vec![0..2 * P, 63 * P..65 * P, 129 * P..130 * P]);
        assert!(w.take().is_empty(), "take clears the marks");
    }
}

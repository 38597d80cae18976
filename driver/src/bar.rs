//! BAR 0 mapped with memmap2 (through the XDMA driver's `xdmaN_user` node, else sysfs `resource0`);
//! registers are volatile 32-bit words.
//!
//! A PCIe read of a device that has gone (surprise removal, a link down) completes with all ones; the
//! caller sees that as the register's value and [`crate::card`] treats `0xFFFF_FFFF` in STATUS or ID as a
//! card that no longer answers.

use crate::error::DriverError;
use memmap2::{Mmap, MmapMut, MmapOptions};
use opu_hw::regs;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

enum Map {
    Ro(Mmap),
    Rw(MmapMut),
}

/// BAR 0 of a card, mapped.
pub struct Bar {
    pub path: PathBuf,
    file: File,
    map: Map,
}

impl Bar {
    /// Maps `path` for reading and writing registers (the file must hold the register map).
    pub fn open_rw(path: &Path) -> Result<Bar, DriverError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| DriverError::file(path, e))?;
        Self::check_len(path, &file)?;
        // SAFETY: the mapping is of a BAR (or the emulator's file standing for one); other parties change it
        // behind our back by design, which is why every access below is volatile.
        let map = unsafe { MmapOptions::new().len(regs::MAP_BYTES as usize).map_mut(&file) }.map_err(|e| DriverError::file(path, e))?;
        Ok(Bar { path: path.into(), file, map: Map::Rw(map) })
    }

    /// Maps `path` read-only (listing cards: reading ID, config and counters of a card someone may be using).
    pub fn open_ro(path: &Path) -> Result<Bar, DriverError> {
        let file = File::open(path).map_err(|e| DriverError::file(path, e))?;
        Self::check_len(path, &file)?;
        // SAFETY: as in `open_rw`.
        let map = unsafe { MmapOptions::new().len(regs::MAP_BYTES as usize).map(&file) }.map_err(|e| DriverError::file(path, e))?;
        Ok(Bar { path: path.into(), file, map: Map::Ro(map) })
    }

    /// sysfs gives `resource0` the BAR's size; a smaller file cannot hold the register map. (A character
    /// device such as `xdmaN_user` has no size: mapping it fails instead if its BAR is too small.)
    fn check_len(path: &Path, file: &File) -> Result<(), DriverError> {
        let meta = file.metadata().map_err(|e| DriverError::file(path, e))?;
        let len = meta.len();
        if meta.is_file() && len < u64::from(regs::MAP_BYTES) {
            return Err(DriverError::BarTooSmall { path: path.into(), len, need: u64::from(regs::MAP_BYTES) });
        }
        Ok(())
    }

    /// Takes the card for this process: an exclusive lock on the BAR file, released when it is closed (also
    /// when the process dies). `Err(true)` when another process holds it.
    pub fn lock(&self) -> Result<(), bool> {
        // SAFETY: flock on a descriptor this struct owns.
        let r = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK))
        }
    }

    /// Whether another process holds the card (tries the lock and gives it back).
    pub fn in_use(&self) -> bool {
        match self.lock() {
            Ok(()) => {
                // SAFETY: as in `lock`.
                unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
                false
            }
            Err(held) => held,
        }
    }

    fn base(&self) -> *const u8 {
        match &self.map {
            Map::Ro(m) => m.as_ptr(),
            Map::Rw(m) => m.as_ptr(),
        }
    }

    /// The register at byte `offset` (4-byte aligned, inside the register map: checked by the caller).
    pub fn read32(&self, offset: u32) -> u32 {
        assert!(offset.is_multiple_of(4) && offset < regs::MAP_BYTES, "register offset {offset:#x}");
        // SAFETY: aligned and inside the mapping (asserted); volatile because the card changes it.
        unsafe { self.base().add(offset as usize).cast::<u32>().read_volatile() }
    }

    /// A 64-bit register pair, low word first (the order that latches the high word).
    pub fn read64(&self, lo_offset: u32) -> u64 {
        let lo = self.read32(lo_offset);
        u64::from(self.read32(lo_offset + 4)) << 32 | u64::from(lo)
    }

    /// Writes the register at byte `offset`; a read-only mapping ignores the write (it is never used so).
    pub fn write32(&mut self, offset: u32, value: u32) {
        assert!(offset.is_multiple_of(4) && offset < regs::MAP_BYTES, "register offset {offset:#x}");
        if let Map::Rw(m) = &mut self.map {
            // SAFETY: as in `read32`; the mapping is writable.
            unsafe { m.as_mut_ptr().add(offset as usize).cast::<u32>().write_volatile(value) };
            // order this write before any later one (the doorbell after its arguments)
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        }
    }
}

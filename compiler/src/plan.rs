//! Memory planning: device-memory regions (32-byte lines) and scratchpad buffers (4-byte words), each a
//! bump allocator that names what it places, so the layout can be reported and checked.

use opu_hw::container::Region;
use opu_hw::isa::{LINE_BYTES, SPM_WORD_BYTES};

/// Device-memory plan: regions placed one after another, 4 KiB aligned.
#[derive(Default)]
pub struct DevicePlan {
    pub regions: Vec<Region>,
    next: u64,
}

pub const REGION_ALIGN: u64 = 4096;

impl DevicePlan {
    /// Places a region of `bytes` and returns its byte address.
    pub fn place(&mut self, name: &str, kind: &str, bytes: u64) -> u64 {
        self.next = self.next.div_ceil(REGION_ALIGN) * REGION_ALIGN;
        self.place_at_end(name, kind, bytes)
    }
    /// Places a region of `bytes` at a multiple of `align` (and of 4 KiB) and returns its byte address.
    pub fn place_aligned(&mut self, name: &str, kind: &str, bytes: u64, align: u64) -> u64 {
        let align = align.max(REGION_ALIGN);
        self.next = self.next.div_ceil(align) * align;
        self.place_at_end(name, kind, bytes)
    }
    /// Places a region of `bytes` right at the end of the last one (no alignment beyond that end's) and
    /// returns its byte address.
    pub fn place_at_end(&mut self, name: &str, kind: &str, bytes: u64) -> u64 {
        let addr = self.next;
        self.regions.push(Region { name: name.into(), kind: kind.into(), addr, bytes });
        self.next = addr + bytes;
        addr
    }
    /// Bytes up to the end of the last region.
    pub fn end(&self) -> u64 {
        self.next
    }
}

/// Byte address -> line number for an instruction field.
pub fn line(addr: u64) -> u32 {
    debug_assert_eq!(addr % LINE_BYTES, 0, "unaligned device address {addr:#x}");
    u32::try_from(addr / LINE_BYTES).expect("device addresses fit 32-bit line numbers (config validated)")
}

/// Rounds up to whole lines.
pub fn line_up(bytes: u64) -> u64 {
    bytes.div_ceil(LINE_BYTES) * LINE_BYTES
}

/// Scratchpad plan in bytes; hands out word addresses.
pub struct SpmPlan {
    next: u32,
    capacity: u32,
    pub buffers: Vec<(String, u32, u32)>,
}

impl SpmPlan {
    pub fn new(capacity: u32) -> Self {
        SpmPlan { next: 0, capacity, buffers: Vec::new() }
    }
    /// Places `bytes` (rounded up to words, 64-byte aligned) and returns the word address, or `None` when
    /// the scratchpad is full.
    pub fn place(&mut self, name: &str, bytes: u32) -> Option<u32> {
        let at = self.next.div_ceil(64) * 64;
        let end = at.checked_add(bytes.div_ceil(SPM_WORD_BYTES) * SPM_WORD_BYTES)?;
        if end > self.capacity {
            return None;
        }
        self.buffers.push((name.into(), at, bytes));
        self.next = end;
        Some(at / SPM_WORD_BYTES)
    }
    pub fn used(&self) -> u32 {
        self.next
    }
    pub fn free(&self) -> u32 {
        self.capacity.saturating_sub(self.next.div_ceil(64) * 64)
    }
}

/// Bytes of a row of `n` elements of `elem_bytes`, padded to whole words (the ISA's row pitch).
pub fn pad4(bytes: u32) -> u32 {
    bytes.div_ceil(4) * 4
}

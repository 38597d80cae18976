//! The cycle estimate of the functional simulator: a per-instruction roofline, not a cycle-accurate model
//! (that is the cycle model's issue). It gives the `CYCLES` and `STALL_CYCLES` registers plausible values
//! from the same work the counters count:
//!
//! ```text
//! compute = ceil(pe_products / macs_per_cycle) + ceil(vector_elements / vector_lanes)
//! memory  = bytes > 0 ? mem_latency_cycles + ceil(bytes / peak_bytes_per_cycle) : 0     (bytes read + written)
//! cycles  = 1 (issue) + max(compute, memory)
//! stall   = compute > 0 ? max(0, memory - compute) : 0                                  (the datapath waits)
//! ```
//!
//! Instructions run one after another (no overlap between instructions).

use opu_hw::OverlayConfig;

/// The work one instruction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Work {
    /// Counted in MACS (docs/isa.md defines it for matmul, attn and conv).
    pub macs: u64,
    /// Products the PE array performs (MACS plus the router's dot products).
    pub pe_products: u64,
    /// Elements through the vector unit.
    pub vector_elems: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct CostModel {
    macs_per_cycle: u64,
    vector_lanes: u64,
    bytes_per_cycle: f64,
    mem_latency: u64,
}

impl CostModel {
    pub fn new(c: &OverlayConfig) -> Self {
        CostModel {
            macs_per_cycle: c.macs_per_cycle().max(1),
            vector_lanes: u64::from(c.vector_lanes.max(1)),
            bytes_per_cycle: c.peak_bytes_per_cycle(),
            mem_latency: u64::from(c.mem_latency_cycles),
        }
    }

    /// `(cycles, stall_cycles)` of one instruction.
    pub fn estimate(&self, w: &Work) -> (u64, u64) {
        let compute = w.pe_products.div_ceil(self.macs_per_cycle) + w.vector_elems.div_ceil(self.vector_lanes);
        let bytes = w.bytes_read + w.bytes_written;
        let memory =
            if bytes == 0 { 0 } else { self.mem_latency + (bytes as f64 / self.bytes_per_cycle).ceil() as u64 };
        let stall = if compute > 0 { memory.saturating_sub(compute) } else { 0 };
        (1 + compute.max(memory), stall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline() {
        let m = CostModel::new(&OverlayConfig::sim());
        // sim: 256 MACs and 2 x 16 x 450/225 = 64 bytes per cycle, 64 cycles latency.
        assert_eq!(m.estimate(&Work::default()), (1, 0));
        let compute_bound = Work { macs: 256 * 1000, pe_products: 256 * 1000, bytes_read: 64 * 10, ..Work::default() };
        assert_eq!(m.estimate(&compute_bound), (1001, 0));
        let memory_bound = Work { macs: 256, pe_products: 256, bytes_read: 64 * 100, ..Work::default() };
        assert_eq!(m.estimate(&memory_bound), (1 + 64 + 100, 64 + 100 - 1));
        let dma = Work { bytes_written: 1, ..Work::default() };
        assert_eq!(m.estimate(&dma), (1 + 64 + 1, 0));
    }
}

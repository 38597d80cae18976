//! The runtime's half of the indexed KV layout (docs/skipping.md, "KV layout"): which row of the shared
//! pool holds each (layer, position)'s K/V.
//!
//! Before a pass the runtime gives every layer a row for each position of the pass and writes it into the
//! layer's row index (`kv_index`, docs/isa.md), since whether the token executes the layer's attention is
//! decided on the device during the pass. After a one-token pass it reads the layer's presence byte: a
//! token that skipped the layer's attention wrote nothing there, and its row goes back to the free list for
//! the next position. So the rows in use are exactly the (layer, position) pairs whose attention executed.

use anyhow::{bail, Result};
use opu_compiler::KvIndexMeta;
use opu_hw::device::Device;

/// Rows of the pool: handed out, free, and the row each layer got for the last one-token pass.
#[derive(Clone, Debug)]
pub struct KvRows {
    meta: KvIndexMeta,
    /// Rows below this have been handed out at some point (the pool's high-water mark).
    next: u64,
    /// Rows handed back, reused first.
    free: Vec<u32>,
    /// `[layer]`: the row given to the position of the last one-token pass.
    last: Vec<Option<u32>>,
}

impl KvRows {
    pub fn new(meta: KvIndexMeta) -> Self {
        let n = meta.index_addr.len();
        KvRows { meta, next: 0, free: Vec::new(), last: vec![None; n] }
    }

    /// Every row free again (a new sequence from position 0).
    pub fn reset(&mut self) {
        self.next = 0;
        self.free.clear();
        self.last.iter_mut().for_each(|r| *r = None);
    }

    fn take(&mut self, layer: usize, pos: usize) -> Result<u32> {
        if let Some(r) = self.free.pop() {
            return Ok(r);
        }
        if self.next >= self.meta.pool_rows {
            bail!(
                "the KV pool of {} rows is full at position {pos} (layer {layer}): compile with a larger --kv-pool-rows",
                self.meta.pool_rows
            );
        }
        self.next += 1;
        Ok((self.next - 1) as u32)
    }

    /// Gives every layer rows for positions `pos..pos + n` and writes them into the row indexes.
    pub fn before_pass(&mut self, dev: &mut dyn Device, pos: usize, n: usize) -> Result<()> {
        for l in 0..self.meta.index_addr.len() {
            let rows = (0..n).map(|i| self.take(l, pos + i)).collect::<Result<Vec<u32>>>()?;
            self.last[l] = (n == 1).then_some(rows[0]);
            let bytes: Vec<u8> = rows.iter().flat_map(|r| r.to_le_bytes()).collect();
            dev.mem_write(self.meta.index_addr[l] + 4 * pos as u64, &bytes)?;
        }
        Ok(())
    }

    /// After a one-token pass: `executed[l]` says whether the token executed layer `l`'s attention (its
    /// presence byte; layers without a router always execute). A skipped layer's row is free again.
    pub fn after_single_pass(&mut self, executed: &[bool]) {
        for (l, &ran) in executed.iter().enumerate() {
            if let Some(r) = self.last[l].take() {
                if !ran {
                    self.free.push(r);
                }
            }
        }
    }

    /// Rows that hold K/V now.
    pub fn rows_in_use(&self) -> u64 {
        self.next - self.free.len() as u64
    }

    /// Bytes of one row (K and V of every KV head).
    pub fn row_bytes(&self) -> u64 {
        self.meta.row_bytes
    }

    /// The pool's high-water mark in rows (never more than one row per layer above `rows_in_use`).
    pub fn rows_allocated(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opu_hw::OverlayConfig;

    fn meta(layers: usize, pool_rows: u64) -> KvIndexMeta {
        KvIndexMeta { index_addr: (0..layers as u64).map(|l| 0x1000 + 0x100 * l).collect(), pool_rows, row_bytes: 64 }
    }

    fn index(dev: &mut dyn Device, layer: u64, pos: usize) -> u32 {
        let mut b = [0u8; 4];
        dev.mem_read(0x1000 + 0x100 * layer + 4 * pos as u64, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    #[test]
    fn skipped_layers_hand_their_row_to_the_next_position() {
        let mut dev = opu_sim::FuncSim::new(&OverlayConfig::sim());
        let mut rows = KvRows::new(meta(2, 100));
        // a prompt of 3: every layer executes
        rows.before_pass(&mut dev, 0, 3).unwrap();
        assert_eq!((0..3).map(|p| index(&mut dev, 0, p)).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!((0..3).map(|p| index(&mut dev, 1, p)).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(rows.rows_in_use(), 6);
        // position 3: layer 1 skips (7 rows in use where the dense layout holds 8), its row is reused at
        // position 4
        rows.before_pass(&mut dev, 3, 1).unwrap();
        let (r0, r1) = (index(&mut dev, 0, 3), index(&mut dev, 1, 3));
        rows.after_single_pass(&[true, false]);
        assert_eq!(rows.rows_in_use(), 7);
        rows.before_pass(&mut dev, 4, 1).unwrap();
        assert_ne!(index(&mut dev, 0, 4), r0);
        assert!([index(&mut dev, 0, 4), index(&mut dev, 1, 4)].contains(&r1));
        rows.after_single_pass(&[true, true]);
        assert_eq!((rows.rows_in_use(), rows.rows_allocated()), (9, 9));
        rows.reset();
        assert_eq!((rows.rows_in_use(), rows.rows_allocated()), (0, 0));
    }

    #[test]
    fn a_full_pool_is_an_error_naming_the_position_and_the_layer() {
        let mut dev = opu_sim::FuncSim::new(&OverlayConfig::sim());
        let mut rows = KvRows::new(meta(2, 5));
        rows.before_pass(&mut dev, 0, 2).unwrap();
        let e = rows.before_pass(&mut dev, 2, 1).unwrap_err().to_string();
        assert!(e.contains("KV pool of 5 rows is full at position 2 (layer 1)") && e.contains("--kv-pool-rows"), "{e}");
    }
}

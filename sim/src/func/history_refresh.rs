//! The KV history buffer's refreshes, deferred until a slot is read.
//!
//! A present position refreshes its history slot from device memory (docs/isa.md, `attn`). Every layer of
//! a decode step does so for every position, each with its own rows, and the slot is read only where a
//! later layer skips the position (a hit) or the host looks at it: at 1,000 positions SmolLM2 would copy
//! 23 MB per step that is mostly overwritten unread. So the simulator notes which rows a slot is to hold
//! (a pending refresh) and scores from device memory directly; the copy is made when the slot is read, or
//! before any write to the pages of those rows (the machine asks [`HistoryRefresh::conflicts`] before each
//! write to device memory), so a slot always reads as if it had been copied at its refresh.

use std::ops::Range;

/// Device memory is tracked in pages of this many bytes: a write into a page with rows of a pending
/// refresh makes the machine copy the pending rows first.
const PAGE_BITS: u32 = 12;

/// A pending refresh: the K and V rows (byte ranges of device memory) a slot's elements are to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub slot: usize,
    /// The slot's first element for this KV head.
    pub offset: usize,
    pub k: Range<usize>,
    pub v: Range<usize>,
}

pub(crate) struct HistoryRefresh {
    /// Per slot, per 16 elements of its width: the pending refresh of the KV head whose elements start
    /// there.
    pending: Vec<Option<Pending>>,
    /// Entries per slot.
    per_slot: usize,
    /// Pending refreshes, in all.
    count: usize,
    /// Per page of device memory: the pending refreshes with a row in it.
    page_refs: Vec<u32>,
    /// The `head_dim` of the pending refreshes (the machine copies them all before an `attn` of another:
    /// the slots' element ranges would no longer line up).
    head_dim: usize,
}

fn pages(r: &Range<usize>) -> Range<usize> {
    if r.is_empty() {
        0..0
    } else {
        r.start >> PAGE_BITS..((r.end - 1) >> PAGE_BITS) + 1
    }
}

impl HistoryRefresh {
    pub fn new(mem_bytes: usize, slots: usize, width: usize) -> Self {
        let per_slot = width.div_ceil(16);
        HistoryRefresh {
            pending: vec![None; slots * per_slot],
            per_slot,
            count: 0,
            page_refs: vec![0; mem_bytes.div_ceil(1 << PAGE_BITS)],
            head_dim: 0,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Sets the `head_dim` of the refreshes to come (none may be pending).
    pub fn set_head_dim(&mut self, head_dim: usize) {
        assert!(self.count == 0, "refreshes of another head_dim are pending");
        self.head_dim = head_dim;
    }

    fn count_pages(&mut self, p: &Pending, add: bool) {
        for r in [&p.k, &p.v] {
            for c in &mut self.page_refs[pages(r)] {
                if add {
                    *c += 1;
                } else {
                    *c -= 1;
                }
            }
        }
    }

    /// Slot `slot`'s elements at `offset` are to hold rows `k`, `v` (replacing a pending refresh there,
    /// whose copy would be overwritten).
    pub fn defer(&mut self, slot: usize, offset: usize, k: Range<usize>, v: Range<usize>) {
        let p = Pending { slot, offset, k, v };
        self.count_pages(&p, true);
        self.count += 1;
        if let Some(old) = self.pending[slot * self.per_slot + offset / 16].replace(p) {
            self.count_pages(&old, false);
            self.count -= 1;
        }
    }

    /// The pending refresh of slot `slot`'s elements at `offset`, removed: the caller copies it.
    pub fn take(&mut self, slot: usize, offset: usize) -> Option<Pending> {
        if self.count == 0 {
            return None;
        }
        let p = self.pending[slot * self.per_slot + offset / 16].take()?;
        self.count_pages(&p, false);
        self.count -= 1;
        Some(p)
    }

    /// Every pending refresh of slot `slot`, removed.
    pub fn take_slot(&mut self, slot: usize) -> Vec<Pending> {
        (0..self.per_slot).filter_map(|i| self.take(slot, 16 * i)).collect()
    }

    /// Every pending refresh, removed.
    pub fn take_all(&mut self) -> Vec<Pending> {
        if self.count == 0 {
            return Vec::new();
        }
        let all: Vec<Pending> = self.pending.iter_mut().filter_map(Option::take).collect();
        self.page_refs.fill(0);
        self.count = 0;
        all
    }

    /// Whether writing device memory `r` would change rows of a pending refresh.
    pub fn conflicts(&self, r: &Range<usize>) -> bool {
        self.count != 0 && self.page_refs[pages(r)].iter().any(|&c| c != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_refreshes_are_counted_on_their_pages() {
        let mut h = HistoryRefresh::new(1 << 20, 4, 128);
        h.set_head_dim(64);
        let (k, v) = (4096..4224, 65_500..65_628); // V straddles pages 15 and 16
        assert!(!h.conflicts(&(0..1 << 20)));
        h.defer(1, 64, k.clone(), v.clone());
        assert!(h.conflicts(&(4223..4224)) && h.conflicts(&(65_536..65_537)) && h.conflicts(&(61_440..61_441)));
        assert!(!h.conflicts(&(8192..9000)), "another page");
        // a later refresh of the same elements replaces it
        h.defer(1, 64, 8192..8320, 12_288..12_416);
        assert!(!h.conflicts(&(4096..4097)) && h.conflicts(&(8192..8193)));
        assert_eq!(h.take(1, 0), None, "another head of the slot");
        let p = h.take(1, 64).unwrap();
        assert_eq!((p.slot, p.offset, p.k, p.v), (1, 64, 8192..8320, 12_288..12_416));
        assert!(!h.conflicts(&(0..1 << 20)));
        h.defer(0, 0, k.clone(), v.clone());
        h.defer(3, 64, k.clone(), v.clone());
        assert_eq!(h.take_slot(3).len(), 1);
        assert!(h.conflicts(&k), "slot 0's rows");
        assert_eq!(h.take_all().len(), 1);
        assert!(!h.conflicts(&(0..1 << 20)));
        h.set_head_dim(32);
    }
}

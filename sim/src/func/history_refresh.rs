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

/// Device memory is tracked in pages of 2^PAGE_BITS bytes: a write into a page with rows of a pending
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
    /// Per slot, per KV head (`head_dim` elements) of its width: the first bytes of the pending refresh's
    /// K and V rows, or [`NONE`]. (Small: a slot's entries share a cache line at SmolLM2's shapes.)
    pending: Vec<[usize; 2]>,
    slots: usize,
    width: usize,
    /// Entries per slot: `width / head_dim`.
    per_slot: usize,
    /// Pending refreshes, in all.
    count: usize,
    /// Per page of device memory: the rows of pending refreshes in it.
    page_refs: Vec<u32>,
    /// The `head_dim` of the pending refreshes (the machine copies them all before an `attn` of another:
    /// the slots' element ranges would no longer line up); 0 before the first.
    head_dim: usize,
}

/// No pending refresh.
const NONE: usize = usize::MAX;

fn pages(r: &Range<usize>) -> Range<usize> {
    if r.is_empty() {
        0..0
    } else {
        r.start >> PAGE_BITS..((r.end - 1) >> PAGE_BITS) + 1
    }
}

impl HistoryRefresh {
    pub fn new(mem_bytes: usize, slots: usize, width: usize) -> Self {
        HistoryRefresh {
            pending: Vec::new(),
            slots,
            width,
            per_slot: 0,
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
        assert!(head_dim > 0);
        self.head_dim = head_dim;
        self.per_slot = self.width / head_dim;
        self.pending = vec![[NONE; 2]; self.slots * self.per_slot];
    }

    /// The rows of an entry: K, then V.
    fn rows(&self, e: [usize; 2]) -> [Range<usize>; 2] {
        let n = 2 * self.head_dim;
        [e[0]..e[0] + n, e[1]..e[1] + n]
    }

    /// Counts (`add`) or uncounts an entry's rows on their pages (a row of at most 2,046 bytes spans one
    /// or two pages).
    #[inline]
    fn count_pages(&mut self, e: [usize; 2], add: bool) {
        let n = 2 * self.head_dim;
        let d = if add { 1 } else { u32::MAX }; // +1 or -1, wrapping
        for start in e {
            let (first, last) = (start >> PAGE_BITS, (start + n - 1) >> PAGE_BITS);
            self.page_refs[first] = self.page_refs[first].wrapping_add(d);
            if last != first {
                self.page_refs[last] = self.page_refs[last].wrapping_add(d);
            }
        }
    }

    #[inline]
    fn index(&self, slot: usize, head: usize) -> usize {
        assert!(head < self.per_slot, "KV head {head} beyond the slot's width");
        slot * self.per_slot + head
    }

    /// Slot `slot`'s elements of KV head `head` (`head_dim` from `head x head_dim`) are to hold rows `k`, `v`
    /// (`2 head_dim` bytes each), replacing a pending refresh there, whose copy would be overwritten.
    #[inline]
    pub fn defer(&mut self, slot: usize, head: usize, k: Range<usize>, v: Range<usize>) {
        assert!(k.len() == 2 * self.head_dim && v.len() == 2 * self.head_dim, "rows of the head_dim set");
        let i = self.index(slot, head);
        let e = [k.start, v.start];
        self.count_pages(e, true);
        let old = std::mem::replace(&mut self.pending[i], e);
        if old[0] == NONE {
            self.count += 1;
        } else {
            self.count_pages(old, false);
        }
    }

    /// The pending refresh of slot `slot`'s elements of KV head `head`, removed: the caller copies it.
    pub fn take(&mut self, slot: usize, head: usize) -> Option<Pending> {
        if self.count == 0 {
            return None;
        }
        let i = self.index(slot, head);
        let e = std::mem::replace(&mut self.pending[i], [NONE; 2]);
        if e[0] == NONE {
            return None;
        }
        self.count_pages(e, false);
        self.count -= 1;
        let [k, v] = self.rows(e);
        Some(Pending { slot, offset: head * self.head_dim, k, v })
    }

    /// Every pending refresh of slot `slot`, removed.
    pub fn take_slot(&mut self, slot: usize) -> Vec<Pending> {
        (0..self.per_slot).filter_map(|h| self.take(slot, h)).collect()
    }

    /// Every pending refresh, removed.
    pub fn take_all(&mut self) -> Vec<Pending> {
        if self.count == 0 {
            return Vec::new();
        }
        let all: Vec<Pending> = (0..self.slots * self.per_slot)
            .filter(|&i| self.pending[i][0] != NONE)
            .map(|i| {
                let [k, v] = self.rows(self.pending[i]);
                Pending { slot: i / self.per_slot, offset: i % self.per_slot * self.head_dim, k, v }
            })
            .collect();
        self.pending.fill([NONE; 2]);
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
        h.defer(1, 1, k.clone(), v.clone());
        assert!(h.conflicts(&(4223..4224)) && h.conflicts(&(65_536..65_537)) && h.conflicts(&(61_440..61_441)));
        assert!(!h.conflicts(&(8192..9000)), "another page");
        // a later refresh of the same elements replaces it
        h.defer(1, 1, 8192..8320, 12_288..12_416);
        assert!(!h.conflicts(&(4096..4097)) && h.conflicts(&(8192..8193)));
        assert_eq!(h.take(1, 0), None, "another head of the slot");
        let p = h.take(1, 1).unwrap();
        assert_eq!((p.slot, p.offset, p.k, p.v), (1, 64, 8192..8320, 12_288..12_416));
        assert!(!h.conflicts(&(0..1 << 20)));
        h.defer(0, 0, k.clone(), v.clone());
        h.defer(3, 1, k.clone(), v.clone());
        assert_eq!(h.take_slot(3).len(), 1);
        assert!(h.conflicts(&k), "slot 0's rows");
        assert_eq!(h.take_all().len(), 1);
        assert!(!h.conflicts(&(0..1 << 20)));
        h.set_head_dim(32);
        h.defer(2, 3, 0..64, 64..128);
        assert!(h.conflicts(&(0..1)));
        assert_eq!(h.take_slot(2).len(), 1);
    }
}

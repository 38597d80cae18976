//! Row-major copies of the weight matrices `matmul` reads, kept while their device memory is not written.
//!
//! Device memory holds a `matmul` matrix interleaved by PE lane (`opu_hw::weight_layout`), the layout the
//! hardware's memory channels want. The simulator's kernel wants each row's bytes together; gathering them
//! costs about as much as the arithmetic of a row. A program reads the same matrices at every step
//! (decode), so the simulator gathers a matrix once into a row-major copy and uses the copy until an
//! instruction or the host writes any byte of the matrix's span. The copies are at most
//! [`ROW_CACHE_LIMIT`] bytes in all; past that a matrix is gathered row by row at every read (the kernel's
//! `RowReader`), with the same bits.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use opu_hw::weight_layout::WeightLayout;

/// Bytes of row-major copies kept at most (the weights of a 7B model at 4 bits do not all fit: those past
/// the limit are gathered at every read).
pub const ROW_CACHE_LIMIT: usize = 2 << 30;

struct Copy {
    /// The matrix's span in device memory (its groups, padding included).
    span: Range<usize>,
    row_bytes: u64,
    rows: u64,
    lanes: u64,
    rows_major: Arc<Vec<u8>>,
}

/// The copies, by the first byte of their matrix.
#[derive(Default)]
pub(crate) struct RowCache {
    copies: BTreeMap<usize, Copy>,
    bytes: usize,
}

impl RowCache {
    /// The row-major rows of the `rows`-row matrix at `span` (`mem[span]`, in `layout`): a kept copy with
    /// at least these rows, or one made now when it fits the limit. `None` past the limit.
    pub fn rows(&mut self, mem: &[u8], span: Range<usize>, layout: &WeightLayout, rows: u64) -> Option<Arc<Vec<u8>>> {
        let rb = layout.row_bytes();
        // a matrix of fewer rows from the same byte is the first rows of a longer one (a group boundary
        // starts a matrix of the layout): q of a fused q/k/v
        if let Some(c) = self.copies.get(&span.start) {
            if c.row_bytes == rb && c.lanes == layout.lanes() && c.rows >= rows {
                return Some(c.rows_major.clone());
            }
        }
        let need = (rows * rb) as usize;
        let old = self.copies.get(&span.start).map_or(0, |c| c.rows_major.len());
        if self.bytes - old + need > ROW_CACHE_LIMIT {
            return None;
        }
        let mut out = vec![0u8; need];
        let mut group = vec![0u8; layout.group_bytes() as usize];
        let share = 16 * layout.lane_units() as usize;
        let matrix = &mem[span.clone()];
        for (g, rows_of_group) in out.chunks_mut((layout.group_rows() * rb) as usize).enumerate() {
            layout.read_group(matrix, g as u64, &mut group);
            for (i, row) in rows_of_group.chunks_exact_mut(rb as usize).enumerate() {
                let at = (i / 2) * share + (i % 2) * rb as usize;
                row.copy_from_slice(&group[at..at + rb as usize]);
            }
        }
        let rows_major = Arc::new(out);
        self.bytes = self.bytes - old + need;
        self.copies.insert(span.start, Copy { span, row_bytes: rb, rows, lanes: layout.lanes(), rows_major: rows_major.clone() });
        Some(rows_major)
    }

    /// Device memory `written` changed: the copies of matrices it overlaps go.
    pub fn written(&mut self, written: &Range<usize>) {
        if self.copies.is_empty() || written.is_empty() {
            return;
        }
        // copies start before the write's end; those that also end after its start overlap it
        let hit: Vec<usize> =
            self.copies.range(..written.end).filter(|(_, c)| c.span.end > written.start).map(|(&at, _)| at).collect();
        for at in hit {
            if let Some(c) = self.copies.remove(&at) {
                self.bytes -= c.rows_major.len();
            }
        }
    }

    /// Bytes of the copies kept.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_the_rows_and_go_when_written() {
        let lay = WeightLayout::for_lanes(8, 40);
        let rows: Vec<u8> = (0..37 * 40).map(|i| (i * 13 + i / 97) as u8).collect();
        let matrix = lay.interleave(&rows);
        let mut mem = vec![0u8; 4096];
        mem.extend_from_slice(&matrix);
        mem.extend_from_slice(&[0; 4096]);
        let span = 4096..4096 + matrix.len();
        let mut cache = RowCache::default();
        let got = cache.rows(&mem, span.clone(), &lay, 37).unwrap();
        assert_eq!(*got, rows);
        // the first 16 rows (a group) from the same copy; a write next to the span keeps it, one inside drops it
        assert!(Arc::ptr_eq(&cache.rows(&mem, span.start..span.start + 640, &lay, 16).unwrap(), &got));
        cache.written(&(0..4096));
        cache.written(&(span.end..span.end + 10));
        assert_eq!(cache.bytes(), 37 * 40);
        cache.written(&(span.end - 1..span.end));
        assert_eq!(cache.bytes(), 0);
        // a different row length at the same byte is another matrix
        let lay2 = WeightLayout::for_lanes(8, 20);
        let got2 = cache.rows(&mem, span.clone(), &lay2, 8).unwrap();
        assert_eq!(got2.len(), 160);
        assert_ne!(*got2, rows[..160]);
    }
}

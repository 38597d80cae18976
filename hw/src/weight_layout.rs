//! How a `matmul`'s weight matrix lies in device memory: interleaved by PE lane, so that every beat the
//! memory delivers goes to lanes that take it at once (docs/isa.md, `matmul`).
//!
//! The PE array computes a matrix in row groups of `2 x pe_lanes` rows, lane `l` rows `2l, 2l + 1` of the
//! group. A lane's share of a group is its two rows back to back (`2 x row_bytes` bytes), cut into 16-byte
//! units ([`UNIT_BYTES`]) and padded with zeros to [`WeightLayout::lane_units`] units. Unit `k` of lane `l`
//! lies at byte `(k x pe_lanes + l) x 16` of the group, so consecutive bytes of device memory belong to
//! consecutive lanes: a 64-byte beat carries one unit for each of four lanes, and the u280's 2,048 bytes per
//! cycle (32 HBM channels) one unit for each of its 128 lanes, every channel feeding the same four lanes
//! (lanes `4c .. 4c + 4` on channel `c`, the weights starting at a multiple of `16 x pe_lanes` bytes,
//! [`WeightLayout::align_bytes`]). Row-major weights would give a cycle's 2,048 bytes to one or two lanes,
//! and every lane a port from every channel.
//!
//! The groups follow each other, each [`WeightLayout::group_bytes`] long; the last group's missing rows are
//! zeros. A group is a layout of its own: the rows of a matrix from a group boundary on are a matrix of this
//! layout (the compiler's output projection in chunks of rows relies on it).

use crate::OverlayConfig;

/// Bytes of a lane's unit: the interleave's grain.
pub const UNIT_BYTES: u64 = 16;

/// The layout of a `matmul` matrix of `row_bytes`-byte rows on an overlay of `lanes` PE lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightLayout {
    lanes: u64,
    row_bytes: u64,
}

impl WeightLayout {
    pub fn new(config: &OverlayConfig, row_bytes: usize) -> Self {
        Self::for_lanes(config.pe_lanes, row_bytes)
    }

    pub fn for_lanes(pe_lanes: u32, row_bytes: usize) -> Self {
        WeightLayout { lanes: u64::from(pe_lanes.max(1)), row_bytes: row_bytes as u64 }
    }

    /// The alignment of a matrix in device memory, bytes: a unit for every lane.
    pub fn align_bytes(config: &OverlayConfig) -> u64 {
        Self::align_for_lanes(config.pe_lanes)
    }

    /// [`WeightLayout::align_bytes`] for `pe_lanes` lanes.
    pub fn align_for_lanes(pe_lanes: u32) -> u64 {
        u64::from(pe_lanes.max(1)) * UNIT_BYTES
    }

    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Rows of a group (`2 x pe_lanes`).
    pub fn group_rows(&self) -> u64 {
        2 * self.lanes
    }

    /// Units of a lane's share of a group: its two rows, rounded up to whole units.
    pub fn lane_units(&self) -> u64 {
        (2 * self.row_bytes).div_ceil(UNIT_BYTES)
    }

    /// Bytes of a group in device memory.
    pub fn group_bytes(&self) -> u64 {
        self.lane_units() * self.lanes * UNIT_BYTES
    }

    /// Groups of a matrix of `rows` rows.
    pub fn groups(&self, rows: u64) -> u64 {
        rows.div_ceil(self.group_rows())
    }

    /// Bytes of a matrix of `rows` rows in device memory (what a `matmul` reads).
    pub fn matrix_bytes(&self, rows: u64) -> u64 {
        self.groups(rows) * self.group_bytes()
    }

    /// Byte of the matrix that holds byte `byte` of row `row`.
    pub fn offset(&self, row: u64, byte: u64) -> u64 {
        debug_assert!(byte < self.row_bytes);
        let (group, in_group) = (row / self.group_rows(), row % self.group_rows());
        let (lane, half) = (in_group / 2, in_group % 2);
        let s = half * self.row_bytes + byte;
        group * self.group_bytes() + ((s / UNIT_BYTES) * self.lanes + lane) * UNIT_BYTES + s % UNIT_BYTES
    }

    /// The matrix of the row-major `rows` (`row_bytes` each) in this layout.
    pub fn interleave(&self, rows: &[u8]) -> Vec<u8> {
        let rb = self.row_bytes as usize;
        assert!(rb > 0 && rows.len().is_multiple_of(rb), "whole rows of {rb} bytes");
        let n = (rows.len() / rb) as u64;
        let mut out = vec![0u8; self.matrix_bytes(n) as usize];
        for (r, row) in rows.chunks_exact(rb).enumerate() {
            self.for_pieces(r as u64, |at, from, len| out[at..at + len].copy_from_slice(&row[from..from + len]));
        }
        out
    }

    /// PE lanes of the layout.
    pub fn lanes(&self) -> u64 {
        self.lanes
    }

    /// Where row `row` lies: its group, its lane, and its first byte in the lane's share (0 or `row_bytes`).
    pub fn share_of(&self, row: u64) -> (u64, u64, u64) {
        let in_group = row % self.group_rows();
        (row / self.group_rows(), in_group / 2, (in_group % 2) * self.row_bytes)
    }

    /// Group `group` of `matrix` (a matrix in this layout) into `out` (at least [`WeightLayout::group_bytes`])
    /// lane by lane: lane `l`'s share (its two rows back to back, then the padding) at `16 l lane_units`.
    /// A unit at a time.
    pub fn read_group(&self, matrix: &[u8], group: u64, out: &mut [u8]) {
        let (units, lanes) = (self.lane_units() as usize, self.lanes as usize);
        let base = (group * self.group_bytes()) as usize;
        let src = &matrix[base..base + self.group_bytes() as usize];
        let (src, _) = src.as_chunks::<16>();
        let (dst, _) = out.as_chunks_mut::<16>();
        // lane by lane: its units a unit row apart in the group (in the caches after the first lanes)
        for (l, share) in dst.chunks_exact_mut(units).take(lanes).enumerate() {
            for (d, unit) in share.iter_mut().zip(src[l..].iter().step_by(lanes)) {
                *d = *unit;
            }
        }
    }

    /// Row `row` of `matrix` (a matrix in this layout) into `out` (`row_bytes` long).
    pub fn read_row(&self, matrix: &[u8], row: u64, out: &mut [u8]) {
        debug_assert_eq!(out.len() as u64, self.row_bytes);
        self.for_pieces(row, |at, from, len| out[from..from + len].copy_from_slice(&matrix[at..at + len]));
    }

    /// Calls `f(matrix byte, row byte, length)` for the pieces of row `row` that lie together in memory
    /// (its parts of consecutive units), in the row's order.
    fn for_pieces(&self, row: u64, mut f: impl FnMut(usize, usize, usize)) {
        let (group, in_group) = (row / self.group_rows(), row % self.group_rows());
        let (lane, half) = (in_group / 2, in_group % 2);
        let base = group * self.group_bytes() + lane * UNIT_BYTES;
        let (mut s, end) = (half * self.row_bytes, (half + 1) * self.row_bytes);
        while s < end {
            let (unit, inside) = (s / UNIT_BYTES, s % UNIT_BYTES);
            let len = (UNIT_BYTES - inside).min(end - s);
            let at = base + unit * self.lanes * UNIT_BYTES + inside;
            f(at as usize, (s - half * self.row_bytes) as usize, len as usize);
            s += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout by its definition, byte by byte: lane `l`'s two rows back to back, unit `k` of it at
    /// `(k lanes + l) 16`.
    fn naive(lanes: u64, rb: u64, rows: &[u8]) -> Vec<u8> {
        let n = rows.len() as u64 / rb;
        let k = (2 * rb).div_ceil(16);
        let groups = n.div_ceil(2 * lanes);
        let mut out = vec![0u8; (groups * lanes * k * 16) as usize];
        for g in 0..groups {
            for l in 0..lanes {
                let share: Vec<u8> = (0..2)
                    .flat_map(|h| {
                        let r = g * 2 * lanes + 2 * l + h;
                        if r < n { rows[(r * rb) as usize..((r + 1) * rb) as usize].to_vec() } else { vec![0; rb as usize] }
                    })
                    .collect();
                for (s, &b) in share.iter().enumerate() {
                    let s = s as u64;
                    out[(g * lanes * k * 16 + ((s / 16) * lanes + l) * 16 + s % 16) as usize] = b;
                }
            }
        }
        out
    }

    #[test]
    fn interleave_matches_the_definition_and_reads_back() {
        for (lanes, rb, rows) in [(8u32, 360usize, 16usize), (8, 612, 21), (4, 18, 9), (128, 2560, 3), (8, 34, 1), (1, 20, 5)] {
            let m: Vec<u8> = (0..rows * rb).map(|i| (i * 7 + i / 251) as u8 | 1).collect();
            let lay = WeightLayout::for_lanes(lanes, rb);
            let out = lay.interleave(&m);
            assert_eq!(out, naive(u64::from(lanes), rb as u64, &m), "lanes {lanes} rb {rb} rows {rows}");
            assert_eq!(out.len() as u64, lay.matrix_bytes(rows as u64));
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                lay.read_row(&out, r as u64, &mut row);
                assert_eq!(row, m[r * rb..(r + 1) * rb]);
                let (g, l, at) = lay.share_of(r as u64);
                let mut group = vec![0u8; lay.group_bytes() as usize];
                lay.read_group(&out, g, &mut group);
                let at = (16 * l * lay.lane_units() + at) as usize;
                assert_eq!(group[at..at + rb], m[r * rb..(r + 1) * rb]);
            }
        }
    }

    #[test]
    fn sizes_at_the_presets() {
        let (s, u) = (OverlayConfig::sim(), OverlayConfig::u280());
        // SmolLM2's 576-column W4Min rows: 45 units a lane, no padding; its W8 rows 77 (8 bytes of padding)
        assert_eq!(WeightLayout::new(&s, 360).lane_units(), 45);
        assert_eq!(WeightLayout::new(&s, 360).group_bytes(), 16 * 360);
        assert_eq!(WeightLayout::new(&s, 612).group_bytes(), 8 * 77 * 16);
        // Llama-7B's 4,096-column rows at u280: 320 units a lane, a group 655,360 bytes (320 cycles of HBM)
        assert_eq!(WeightLayout::new(&u, 2560).group_bytes(), 320 * 2048);
        assert_eq!((WeightLayout::align_bytes(&s), WeightLayout::align_bytes(&u)), (128, 2048));
        // a group boundary starts a matrix of its own
        let lay = WeightLayout::new(&s, 360);
        assert_eq!(lay.offset(16 + 3, 5), lay.group_bytes() + lay.offset(3, 5));
    }
}

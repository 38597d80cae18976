//! Counters of a run: the architectural ones behind the counter registers, instructions by class and
//! mnemonic, and device-memory traffic per named region.

use std::collections::BTreeMap;

use opu_hw::container::Region;
use opu_hw::isa::SPECS;
use serde::Serialize;

/// Region name under which bytes outside every region are counted.
pub const OTHER_REGION: &str = "other";

/// Device-memory bytes read and written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RegionBytes {
    pub read: u64,
    pub written: u64,
}

/// What the last run did (cleared at each doorbell and by SOFT_RESET).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Estimated core cycles (docs: sim/README.md, "Cycle estimate").
    pub cycles: u64,
    /// Estimated cycles the datapath waited for memory.
    pub stall_cycles: u64,
    /// Instructions retired (skipped ones and a trapping one not counted).
    pub instret: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub macs: u64,
    pub skipped_blocks: u64,
    pub kv_history_hits: u64,
    /// K/V rows attention read from device memory.
    pub kv_history_misses: u64,
    /// Estimated busy cycles per unit (`opu_hw::isa::ExecUnit` order: dma, matrix, vector, attention): each
    /// instruction's estimate goes to the unit that executes it.
    pub busy_cycles: [u64; 4],
    /// Instructions retired per class of `opu_hw::isa::SPECS` ("control", "scalar", "dma", "matrix", "vector",
    /// "attention", "cnn"); every class is present.
    pub by_class: BTreeMap<String, u64>,
    /// Instructions retired per mnemonic (only those that ran).
    pub by_mnemonic: BTreeMap<String, u64>,
    /// The cycle estimate per mnemonic (only those that ran): where the cycles go, by the model of the RTL.
    pub cycles_by_mnemonic: BTreeMap<String, u64>,
    /// Device-memory traffic per region of [`FuncSim::set_regions`](super::FuncSim::set_regions), plus
    /// "other" for bytes outside every region. Every region is present.
    pub regions: BTreeMap<String, RegionBytes>,
}

/// The raw counters.
#[derive(Clone, Debug)]
pub(crate) struct Counters {
    pub cycles: u64,
    pub stall_cycles: u64,
    pub instret: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub macs: u64,
    pub skipped_blocks: u64,
    pub kv_history_hits: u64,
    pub kv_history_misses: u64,
    pub busy_cycles: [u64; 4],
    pub by_opcode: [u64; 256],
    pub cycles_by_opcode: [u64; 256],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            cycles: 0,
            stall_cycles: 0,
            instret: 0,
            bytes_read: 0,
            bytes_written: 0,
            macs: 0,
            skipped_blocks: 0,
            kv_history_hits: 0,
            kv_history_misses: 0,
            busy_cycles: [0; 4],
            by_opcode: [0; 256],
            cycles_by_opcode: [0; 256],
        }
    }
}

impl Counters {
    pub fn stats(&self, regions: &RegionTable) -> Stats {
        let mut by_class = BTreeMap::new();
        let mut by_mnemonic = BTreeMap::new();
        let mut cycles_by_mnemonic = BTreeMap::new();
        for s in SPECS {
            let n = self.by_opcode[usize::from(s.opcode)];
            *by_class.entry(s.class.to_string()).or_insert(0) += n;
            if n > 0 {
                by_mnemonic.insert(s.mnemonic.to_string(), n);
                cycles_by_mnemonic.insert(s.mnemonic.to_string(), self.cycles_by_opcode[usize::from(s.opcode)]);
            }
        }
        Stats {
            cycles: self.cycles,
            stall_cycles: self.stall_cycles,
            instret: self.instret,
            bytes_read: self.bytes_read,
            bytes_written: self.bytes_written,
            macs: self.macs,
            skipped_blocks: self.skipped_blocks,
            kv_history_hits: self.kv_history_hits,
            kv_history_misses: self.kv_history_misses,
            busy_cycles: self.busy_cycles,
            by_class,
            by_mnemonic,
            cycles_by_mnemonic,
            regions: regions.snapshot(),
        }
    }
}

/// Named regions and their traffic. Regions are sorted by address; a byte inside several (overlapping)
/// regions counts in each.
#[derive(Clone, Debug, Default)]
pub(crate) struct RegionTable {
    regions: Vec<Region>,
    /// `max_end[i]` = the largest end among regions `0..=i` (monotone, so it can be binary searched even
    /// when regions overlap).
    max_end: Vec<u64>,
    bytes: Vec<RegionBytes>,
    other: RegionBytes,
    /// `alone[i]`: no other region overlaps region `i`.
    alone: Vec<bool>,
    /// The regions of the last two accesses that lay inside one region alone: the next access inside one
    /// of them needs no search (an `attn` records a K row and a V row per position, in two regions).
    last: [Option<usize>; 2],
}

impl RegionTable {
    pub fn new(mut regions: Vec<Region>) -> Self {
        regions.sort_by_key(|r| (r.addr, r.bytes));
        let mut max_end = Vec::with_capacity(regions.len());
        let mut m = 0u64;
        for r in &regions {
            m = m.max(r.addr.saturating_add(r.bytes));
            max_end.push(m);
        }
        let bytes = vec![RegionBytes::default(); regions.len()];
        let end = |r: &Region| r.addr.saturating_add(r.bytes);
        let alone = (0..regions.len())
            .map(|i| (0..regions.len()).all(|j| j == i || end(&regions[j]) <= regions[i].addr || regions[j].addr >= end(&regions[i])))
            .collect();
        RegionTable { regions, max_end, bytes, other: RegionBytes::default(), alone, last: [None; 2] }
    }

    pub fn clear_counts(&mut self) {
        self.bytes.iter_mut().for_each(|b| *b = RegionBytes::default());
        self.other = RegionBytes::default();
    }

    /// Attributes an access of `len` bytes at `addr`.
    pub fn record(&mut self, addr: u64, len: u64, write: bool) {
        let end = addr.saturating_add(len);
        let inside = |r: &Region| addr >= r.addr && end <= r.addr.saturating_add(r.bytes);
        for i in self.last.into_iter().flatten() {
            if inside(&self.regions[i]) {
                add(&mut self.bytes[i], len, write);
                return;
            }
        }
        // Bytes covered by at least one region; regions come in address order, so a cursor gives the union.
        let mut covered = 0u64;
        let mut cursor = addr;
        let first = self.max_end.partition_point(|&e| e <= addr);
        for i in first..self.regions.len() {
            let r = &self.regions[i];
            if r.addr >= end {
                break;
            }
            let lo = r.addr.max(addr);
            let hi = r.addr.saturating_add(r.bytes).min(end);
            if hi > lo {
                if self.alone[i] && inside(r) {
                    self.last = [Some(i), self.last[0]];
                }
                add(&mut self.bytes[i], hi - lo, write);
                if hi > cursor {
                    covered += hi - lo.max(cursor);
                    cursor = hi;
                }
            }
        }
        add(&mut self.other, len - covered, write);
    }

    /// What `record` credits with the whole of an access at `addr..addr + len` when that is so: a region
    /// that alone holds it (`Some` index; no other region overlaps it), or the other bytes (`None`: a gap
    /// between regions holds it); with the span of addresses where any access is credited the same way.
    fn sole_target(&self, addr: u64, len: u64) -> Option<(Option<usize>, u64, u64)> {
        let end = addr.saturating_add(len);
        let first = self.max_end.partition_point(|&e| e <= addr);
        let gap_start = if first == 0 { 0 } else { self.max_end[first - 1] };
        let gap_end = self.regions.get(first).map_or(u64::MAX, |r| r.addr);
        if end <= gap_end {
            return Some((None, gap_start, gap_end));
        }
        (first..self.regions.len())
            .take_while(|&i| self.regions[i].addr <= addr)
            .find(|&i| self.alone[i] && end <= self.regions[i].addr.saturating_add(self.regions[i].bytes))
            .map(|i| (Some(i), self.regions[i].addr, self.regions[i].addr.saturating_add(self.regions[i].bytes)))
    }

    pub fn snapshot(&self) -> BTreeMap<String, RegionBytes> {
        let mut m = BTreeMap::new();
        for (r, b) in self.regions.iter().zip(&self.bytes) {
            let e: &mut RegionBytes = m.entry(r.name.clone()).or_default();
            e.read += b.read;
            e.written += b.written;
        }
        let e = m.entry(OTHER_REGION.to_string()).or_default();
        e.read += self.other.read;
        e.written += self.other.written;
        m
    }
}

/// Reads of many rows credited as `RegionTable::record` credits them, with the region of the last one kept
/// and its bytes summed: an `attn` reads two rows per position and head.
#[derive(Default)]
pub(crate) struct ReadTally {
    /// What the last row was credited to whole (a region, or `None`: the other bytes), the span where any
    /// row is credited the same, and the bytes read there since.
    region: Option<(Option<usize>, u64, u64, u64)>,
}

impl ReadTally {
    /// A read of `len` bytes at `addr`.
    #[inline]
    pub fn record(&mut self, table: &mut RegionTable, addr: u64, len: u64) {
        if let Some((_, lo, hi, bytes)) = &mut self.region {
            if addr >= *lo && addr.saturating_add(len) <= *hi {
                *bytes += len;
                return;
            }
        }
        self.flush(table);
        match table.sole_target(addr, len) {
            Some((target, lo, hi)) => self.region = Some((target, lo, hi, len)),
            None => table.record(addr, len, false),
        }
    }

    /// Credits the summed bytes (at the end; also when the region changes).
    pub fn flush(&mut self, table: &mut RegionTable) {
        match self.region.take() {
            Some((Some(i), _, _, bytes)) => add(&mut table.bytes[i], bytes, false),
            Some((None, _, _, bytes)) => add(&mut table.other, bytes, false),
            None => {}
        }
    }
}

fn add(b: &mut RegionBytes, n: u64, write: bool) {
    if write {
        b.written += n;
    } else {
        b.read += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, addr: u64, bytes: u64) -> Region {
        Region { name: name.into(), kind: "test".into(), addr, bytes }
    }

    #[test]
    fn bytes_split_over_regions_and_other() {
        let mut t = RegionTable::new(vec![region("b", 200, 100), region("a", 0, 100)]);
        t.record(50, 200, false); // 50 in a, 100 other, 50 in b
        t.record(1000, 8, true); // other
        t.record(250, 10, true); // b
        let s = t.snapshot();
        assert_eq!(s["a"], RegionBytes { read: 50, written: 0 });
        assert_eq!(s["b"], RegionBytes { read: 50, written: 10 });
        assert_eq!(s[OTHER_REGION], RegionBytes { read: 100, written: 8 });
        t.clear_counts();
        assert_eq!(t.snapshot()["a"], RegionBytes::default());
    }

    #[test]
    fn overlapping_regions_count_in_each() {
        let mut t = RegionTable::new(vec![region("big", 0, 1000), region("small", 10, 10), region("late", 500, 10)]);
        t.record(600, 10, false);
        t.record(12, 4, false);
        t.record(995, 10, true); // 5 in big, 5 other
        let s = t.snapshot();
        assert_eq!(s["big"].read, 14);
        assert_eq!(s["small"].read, 4);
        assert_eq!(s["late"].read, 0);
        assert_eq!(s[OTHER_REGION].read, 0);
        assert_eq!(s["big"].written, 5);
        assert_eq!(s[OTHER_REGION].written, 5);
    }

    /// The last region's shortcut counts what the search counts: random accesses, runs inside one region,
    /// over non-overlapping and overlapping regions, against a byte-by-byte count.
    #[test]
    fn repeated_accesses_count_as_the_search_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let regions = vec![region("a", 0, 100), region("b", 100, 50), region("c", 300, 200), region("d", 320, 10), region("e", 600, 40)];
        let mut t = RegionTable::new(regions.clone());
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        for _ in 0..5000 {
            let addr = if rng.gen_bool(0.7) { rng.gen_range(300..340) } else { rng.gen_range(0..700) };
            let len = rng.gen_range(1..40);
            t.record(addr, len, false);
            for b in addr..addr + len {
                let mut inside = false;
                for r in regions.iter().filter(|r| b >= r.addr && b < r.addr + r.bytes) {
                    *want.entry(r.name.clone()).or_default() += 1;
                    inside = true;
                }
                if !inside {
                    *want.entry(OTHER_REGION.to_string()).or_default() += 1;
                }
            }
        }
        let got = t.snapshot();
        for (name, n) in &want {
            assert_eq!(got[name].read, *n, "{name}");
        }
    }

    /// A tally of reads credits what `record` of each read credits: runs in one region, reads across and
    /// outside regions, overlapping regions (never summed: `record` splits those).
    #[test]
    fn a_read_tally_counts_as_record_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        let regions = vec![region("a", 0, 100), region("b", 100, 50), region("c", 300, 200), region("d", 320, 10), region("e", 600, 40)];
        for regions in [regions, Vec::new()] {
            let (mut t, mut want) = (RegionTable::new(regions.clone()), RegionTable::new(regions));
            let mut tally = ReadTally::default();
            for i in 0..5000 {
                let addr = match i % 100 {
                    0..40 => rng.gen_range(600..630),
                    40..60 => rng.gen_range(150..290), // between b and c: other bytes
                    _ => rng.gen_range(0..700),
                };
                let len = rng.gen_range(1..12);
                tally.record(&mut t, addr, len);
                want.record(addr, len, false);
            }
            tally.flush(&mut t);
            assert_eq!(t.snapshot(), want.snapshot());
        }
    }
}

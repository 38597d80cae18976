//! The architectural state the instructions act on (registers, memories, reduction file, CSRs), the traps,
//! and the checked address arithmetic every instruction goes through.

use std::ops::Range;

use opu_hw::isa::{Csr, Reg, LINE_BYTES, NUM_PREDS, NUM_RED, NUM_REGS, SPM_WORD_BYTES};
use opu_hw::numerics::WideAcc;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;

use super::cost::{CostModel, LoaderLead, Work};
use super::kernel::Kernel;
use super::history_refresh::{HistoryRefresh, Pending};
use super::rowcache::RowCache;
use super::stats::{Counters, RegionTable};

/// `kv_present` value that turns presence tracking off (every position present).
pub(crate) const ALL_PRESENT: u32 = 0xFFFF_FFFF;
/// `kv_index` value that turns the row index off (position `t`'s K/V at row `t`).
pub(crate) const NO_INDEX: u32 = 0xFFFF_FFFF;

/// Why an instruction stopped the run: `ERROR_CODE` and `ERROR_INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trap {
    pub code: ErrorCode,
    pub info: u64,
}

impl Trap {
    pub fn bad_operand() -> Self {
        Trap { code: ErrorCode::BadOperand, info: 0 }
    }
}

/// `Err(BAD_OPERAND)` unless `ok`.
pub(crate) fn require(ok: bool) -> Result<(), Trap> {
    if ok {
        Ok(())
    } else {
        Err(Trap::bad_operand())
    }
}

/// How an instruction hands control on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Next,
    /// `skip`: the next `n` instructions are not executed.
    Skip(u32),
    End,
}

/// Byte address of a device-memory line field (64-bit arithmetic that never wraps: u128).
pub(crate) fn line(x: u128) -> u128 {
    x * u128::from(LINE_BYTES)
}

/// Byte address of a scratchpad word field.
pub(crate) fn word(x: u32) -> u128 {
    u128::from(x) * u128::from(SPM_WORD_BYTES)
}

/// Rounds up to a multiple of 4: the pitch of the rows of a multi-row vector.
pub(crate) fn pad4(bytes: u128) -> u128 {
    bytes.div_ceil(4) * 4
}

/// A byte span `[start, start + len)` of the scratchpad or of device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u128,
    pub len: u128,
}

impl Span {
    pub fn new(start: u128, len: u128) -> Self {
        Span { start, len }
    }
    /// `n >= 1` rows of `row_len` bytes, `pitch` apart.
    pub fn rows(start: u128, n: u128, pitch: u128, row_len: u128) -> Self {
        Span { start, len: (n - 1) * pitch + row_len }
    }
    /// The span of `n` elements of `elem` bytes per row, rows at `pad4` pitch (docs/isa.md, "Vectors in the
    /// scratchpad").
    pub fn vectors(start: u128, rows: u128, n: u128, elem: u128) -> Self {
        Span::rows(start, rows, pad4(n * elem), n * elem)
    }
    pub fn end(&self) -> u128 {
        self.start + self.len
    }
    pub fn overlaps(&self, o: &Span) -> bool {
        self.start < o.end() && o.start < self.end()
    }
}

/// The destination of an element-wise instruction may coincide exactly with a source, or be disjoint from
/// it; a partial overlap is BAD_OPERAND (docs/isa.md, "Order"). "Exactly" means the same first byte and the
/// same length.
pub(crate) fn check_elementwise(dst: &Span, sources: &[Span]) -> Result<(), Trap> {
    require(sources.iter().all(|s| s == dst || !s.overlaps(dst)))
}

/// Checked access to a memory of `size` bytes: the range, or the trap naming the first faulting byte.
fn range_in(size: usize, span: Span, code: ErrorCode) -> Result<Range<usize>, Trap> {
    let size128 = size as u128;
    if span.end() <= size128 {
        Ok(span.start as usize..span.end() as usize)
    } else {
        let first = span.start.max(size128);
        Err(Trap { code, info: u64::try_from(first).unwrap_or(u64::MAX) })
    }
}

/// Everything the instructions act on.
pub(crate) struct Machine {
    pub act_bits: u32,
    pub max_batch: u32,
    /// `OverlayConfig::max_matmul_row_bytes`.
    pub max_row_bytes: u32,
    /// `OverlayConfig::max_conv_kernel_bytes`.
    pub max_conv_kernel_bytes: u32,
    /// PE lanes: the `matmul` weights' layout (`opu_hw::weight_layout`).
    pub pe_lanes: u32,
    pub hist_slots: u32,
    pub hist_width: u32,
    pub cost_model: CostModel,
    /// `conv` and `maxpool` estimates `(cycles, stall)` by shape and placement (`CostModel::cnn` steps
    /// through the schedule).
    pub cnn_cycles: std::collections::HashMap<super::cost::CnnRun, (u64, u64)>,
    /// What the next `matmul`'s loader overlaps (the cycle model's early issue).
    pub loader_lead: LoaderLead,

    pub mem: Vec<u8>,
    /// The pages of `mem` the programs wrote since the host last asked (`Device::take_written`).
    pub written: opu_hw::device::WrittenPages,
    pub spm: Vec<u8>,
    /// KV history buffer, K and V: `hist_slots` rows of `hist_width` FP16.
    pub hist_k: Vec<u16>,
    pub hist_v: Vec<u16>,
    /// Refreshes of history slots not yet copied (`history_refresh`).
    pub hist_refresh: HistoryRefresh,

    pub r: [u32; NUM_REGS],
    pub p: [bool; NUM_PREDS],
    pub red: [WideAcc; NUM_RED],
    pub csr: [u32; Csr::ALL.len()],

    /// Row-major copies of the `matmul` matrices read, while their memory is not written.
    pub row_cache: RowCache,
    pub counters: Counters,
    pub regions: RegionTable,
    /// Work of the instruction being executed, for the counters and the cycle estimate at retirement.
    pub work: Work,
    pub kernel: Kernel,
}

impl Machine {
    pub fn new(config: &OverlayConfig) -> Self {
        let mem_bytes =
            usize::try_from(config.device_memory_bytes).expect("device memory fits the host's address space");
        let hist = config.kv_history_slots as usize * config.kv_history_width as usize;
        Machine {
            act_bits: config.act_mantissa_bits,
            max_batch: config.max_batch,
            max_row_bytes: config.max_matmul_row_bytes(),
            max_conv_kernel_bytes: config.max_conv_kernel_bytes(),
            pe_lanes: config.pe_lanes,
            hist_slots: config.kv_history_slots,
            hist_width: config.kv_history_width,
            cost_model: CostModel::new(config),
            cnn_cycles: std::collections::HashMap::new(),
            loader_lead: LoaderLead::default(),
            // vec![0; n] is calloc: the pages of a 1 GiB memory are zeroed lazily by the OS.
            mem: vec![0u8; mem_bytes],
            written: opu_hw::device::WrittenPages::new(mem_bytes as u64),
            spm: vec![0u8; config.scratchpad_bytes as usize],
            hist_k: vec![0u16; hist],
            hist_v: vec![0u16; hist],
            hist_refresh: HistoryRefresh::new(mem_bytes, config.kv_history_slots as usize, config.kv_history_width as usize),
            r: [0; NUM_REGS],
            p: [false; NUM_PREDS],
            red: [WideAcc::ZERO; NUM_RED],
            csr: [0; Csr::ALL.len()],
            row_cache: RowCache::default(),
            counters: Counters::default(),
            regions: RegionTable::default(),
            work: Work::default(),
            kernel: Kernel::new(1),
        }
    }

    /// The architectural state at the doorbell (docs/isa.md, "Machine state"). The scratchpad and the history
    /// buffer keep their contents (unspecified for programs).
    pub fn reset_for_run(&mut self, args: &[u32; 8]) {
        self.r = [0; NUM_REGS];
        self.r[8..16].copy_from_slice(args);
        self.p = [false; NUM_PREDS];
        self.red = [WideAcc::ZERO; NUM_RED];
        self.csr = [0; Csr::ALL.len()];
        self.csr[Csr::KvPresent as usize] = ALL_PRESENT;
        self.csr[Csr::KvIndex as usize] = NO_INDEX;
        self.counters = Counters::default();
        self.loader_lead = LoaderLead::default();
        self.regions.clear_counts();
    }

    pub fn reg(&self, r: Reg) -> u32 {
        self.r[usize::from(r.0)]
    }

    pub fn set_reg(&mut self, r: Reg, v: u32) {
        if r.0 != 0 {
            self.r[usize::from(r.0)] = v;
        }
    }

    pub fn csr(&self, c: Csr) -> u32 {
        self.csr[c as usize]
    }

    pub fn mem_range(&self, span: Span) -> Result<Range<usize>, Trap> {
        range_in(self.mem.len(), span, ErrorCode::MemOutOfRange)
    }

    pub fn spm_range(&self, span: Span) -> Result<Range<usize>, Trap> {
        range_in(self.spm.len(), span, ErrorCode::ScratchpadOutOfRange)
    }

    /// Counts a device-memory read (BYTES_READ and its region).
    pub fn note_read(&mut self, r: &Range<usize>) {
        let n = (r.end - r.start) as u64;
        self.work.bytes_read += n;
        self.work.mem_rows_read += 1;
        self.work.mem_lines_read += lines_touched(r);
        self.regions.record(r.start as u64, n, false);
    }

    /// Copies a deferred history refresh into its slot.
    pub fn copy_refresh(&mut self, p: Pending) {
        let at = p.slot * self.hist_width as usize + p.offset;
        copy_f16s(&mut self.hist_k[at..at + p.k.len() / 2], &self.mem[p.k]);
        copy_f16s(&mut self.hist_v[at..at + p.v.len() / 2], &self.mem[p.v]);
    }

    /// Copies every deferred history refresh.
    pub fn copy_all_refreshes(&mut self) {
        for p in self.hist_refresh.take_all() {
            self.copy_refresh(p);
        }
    }

    /// Copies the deferred refreshes of history slot `t`.
    pub fn copy_slot_refreshes(&mut self, t: usize) {
        for p in self.hist_refresh.take_slot(t) {
            self.copy_refresh(p);
        }
    }

    /// To be called before device memory `r` is written: copies the deferred history refreshes first if the
    /// write would change their rows.
    pub fn before_write(&mut self, r: &Range<usize>) {
        if self.hist_refresh.conflicts(r) {
            self.copy_all_refreshes();
        }
    }

    /// Counts a device-memory write (BYTES_WRITTEN and its region).
    pub fn note_write(&mut self, r: &Range<usize>) {
        // a write site that did not call `before_write` would have changed a deferred refresh's rows
        assert!(!self.hist_refresh.conflicts(r), "device memory written under a deferred history refresh");
        let n = (r.end - r.start) as u64;
        self.work.bytes_written += n;
        self.work.mem_lines_written += lines_touched(r);
        self.regions.record(r.start as u64, n, true);
        self.row_cache.written(r);
        self.written.mark(r.start as u64, r.end as u64);
    }

    /// FP16 elements (little-endian) of the scratchpad.
    pub fn spm_f16s(&self, start: usize, n: usize) -> Vec<u16> {
        f16s(&self.spm[start..start + 2 * n])
    }
}

/// Little-endian FP16 bytes into FP16 bits.
pub(crate) fn copy_f16s(dst: &mut [u16], src: &[u8]) {
    for (d, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = u16::from_le_bytes([b[0], b[1]]);
    }
}

/// Little-endian FP16 bits of a byte slice.
pub(crate) fn f16s(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

/// The 32-byte device-memory lines a byte range touches.
pub(crate) fn lines_touched(r: &Range<usize>) -> u64 {
    if r.is_empty() {
        0
    } else {
        (r.end.div_ceil(32) - r.start / 32) as u64
    }
}

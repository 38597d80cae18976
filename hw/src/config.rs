//! The overlay configuration: one description of the hardware that the RTL generator, the simulators, the
//! compiler and the runtime all read. Programs carry [`OverlayConfig::hash`]; the hardware exposes it in the
//! `CONFIG_HASH` registers, so a program built for another overlay is refused before it runs.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::hash::fnv1a64;
use crate::numerics::BLOCK;

/// Largest number of tokens one `MATMUL` may carry (the width of the token field in the encoding).
pub const MAX_BATCH_LIMIT: u32 = 64;

/// Row groups the matrix unit's weight buffer can hold at once, where its rows are short enough
/// ([`OverlayConfig::weight_groups_in_buffer`]): the size of the unit's table of loaded groups.
pub const WEIGHT_GROUP_ENTRIES: u32 = 8;

/// Instructions the issue queue in front of each unit holds: how far the core runs ahead of a busy unit
/// (and so how many of a unit's instructions a `matmul` issued behind them can overlap its first loads with).
pub const ISSUE_QUEUE_DEPTH: u32 = 4;

/// Chunks (16 elements, 8 pairs) of a `rope` head whose two table lines the vector unit keeps from a row's
/// first head for its other heads, which then read only their own elements: heads of `head_dim` 32 to 256
/// (one chunk is written as the next head would read it; longer heads read their table for every head).
pub const ROPE_TABLE_CHUNKS: u32 = 16;

/// The hardware parameters of one overlay build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayConfig {
    /// Preset or user name. Not part of the hash: a renamed copy is the same hardware.
    pub name: String,
    /// PE lanes: output rows computed in parallel by the PE array.
    pub pe_lanes: u32,
    /// Dot-product width of a lane: activation x weight products per lane per cycle. A power of two that
    /// divides the block size (32) or is a multiple of it.
    pub dot_width: u32,
    /// Signed width of a block-aligned activation mantissa (sign included), 8..=16. See docs/numerics.md.
    pub act_mantissa_bits: u32,
    /// Elements per cycle of the vector / nonlinear unit.
    pub vector_lanes: u32,
    /// Largest `ntok` of a `MATMUL` (tokens sharing one pass over a weight stream), 1..=64.
    pub max_batch: u32,
    /// On-chip scratchpad (activations, vectors, tables), bytes. Addressed in 4-byte words by the ISA.
    pub scratchpad_bytes: u32,
    /// The matrix unit's weight buffer, bytes: two buffers (one loads while the other computes) of
    /// `2 x pe_lanes` row slots (the rows the array computes at once, replayed for each token of a `matmul`).
    /// It bounds a `matmul` row: [`OverlayConfig::max_matmul_row_bytes`].
    pub weight_fifo_bytes: u32,
    /// Tokens the on-chip KV history buffer holds (SkipOPU cross-layer KV reuse).
    pub kv_history_slots: u32,
    /// FP16 elements of K (and as many of V) per token that a history slot holds: kv heads x head dim.
    pub kv_history_width: u32,
    /// Device (HBM/DDR) memory, bytes.
    pub device_memory_bytes: u64,
    /// Independent memory channels.
    pub mem_channels: u32,
    /// Data width of one channel, bits.
    pub mem_channel_bits: u32,
    /// Memory clock, MHz (one transfer of `mem_channel_bits` per channel per memory clock).
    pub mem_clock_mhz: u32,
    /// Latency of a memory read from request to first data, core cycles.
    pub mem_latency_cycles: u32,
    /// Core (PE array) clock, MHz.
    pub core_clock_mhz: u32,
}

/// A configuration that cannot be built, named by its field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("overlay config field `{field}` = {value}: {expected}")]
    Field { field: &'static str, value: String, expected: String },
    #[error("unknown overlay preset `{0}` (known: {known})", known = OverlayConfig::PRESETS.join(", "))]
    UnknownPreset(String),
    #[error("overlay config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("overlay config {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

impl OverlayConfig {
    /// Names accepted by [`OverlayConfig::preset`].
    pub const PRESETS: &'static [&'static str] = &["sim", "sim-wide", "u280"];

    /// Small overlay that Verilator simulates quickly: 8 lanes x 32 = 256 MACs per cycle, behind 2 memory
    /// channels x 128 bit at twice the core clock (64 bytes per core cycle, 14.4 GB/s: a DDR4-class board).
    /// Sized like the u280 preset, with the array faster than the memory so that decode is bandwidth-bound:
    /// the array takes a Q4_1 stream at up to 160 bytes per cycle (a block of both of a lane's rows per 2
    /// cycles).
    pub fn sim() -> Self {
        OverlayConfig {
            name: "sim".into(),
            pe_lanes: 8,
            dot_width: 32,
            act_mantissa_bits: 16,
            vector_lanes: 8,
            max_batch: 16,
            scratchpad_bytes: 1 << 20,
            weight_fifo_bytes: 64 << 10,
            kv_history_slots: 2048,
            kv_history_width: 256,
            device_memory_bytes: 1 << 30,
            mem_channels: 2,
            mem_channel_bits: 128,
            mem_clock_mhz: 450,
            mem_latency_cycles: 64,
            core_clock_mhz: 225,
        }
    }

    /// The `sim` overlay behind twice its memory: 4 channels x 128 bit at twice the core clock (128 bytes per
    /// core cycle, 28.8 GB/s), so that the matrix unit's weight port takes two 64-byte beats a cycle (one per
    /// lane quad, [`OverlayConfig::weight_port_beats`]) as the u280's takes 32. Small enough for Verilator:
    /// it is how the tests run the wide weight port of the RTL. The array (160 bytes per cycle of Q4_1) still
    /// outruns the memory.
    pub fn sim_wide() -> Self {
        OverlayConfig { name: "sim-wide".into(), mem_channels: 4, ..Self::sim() }
    }

    /// The SkipOPU-class card: Alveo U280, 225 MHz core, 32 HBM pseudo-channels x 256 bit at 450 MHz
    /// (460.8 GB/s, 2048 bytes per core cycle). 128 lanes x 32 = 4096 MACs per cycle consume a Q4_1 stream of
    /// 5 bits per weight at 2560 bytes per cycle, so the array is just faster than the memory: decode stays
    /// bandwidth-bound. At 2 W4 products per DSP48E2 the array needs 2048 of the card's 9024 DSPs. The
    /// history buffer (4096 tokens x 256 x K,V x FP16 = 4 MiB) and the 4 MiB scratchpad fit its 34 MB URAM.
    /// Eight vector lanes, as at `sim`: the scratchpad's line port feeds the vector unit 8 FP32 values per
    /// cycle, and a lane is about 23k LUTs (64 of them would not fit beside the PE array).
    pub fn u280() -> Self {
        OverlayConfig {
            name: "u280".into(),
            pe_lanes: 128,
            dot_width: 32,
            act_mantissa_bits: 16,
            vector_lanes: 8,
            max_batch: 64,
            scratchpad_bytes: 4 << 20,
            // a ring of 512 beats per lane (eight 512 x 72 block RAMs): six groups of Llama-7B's 4,096-column
            // Q4_1 rows at once, two of its 11,008-column ones; 4 MiB in all
            weight_fifo_bytes: 4 << 20,
            kv_history_slots: 4096,
            kv_history_width: 256,
            device_memory_bytes: 8 << 30,
            mem_channels: 32,
            mem_channel_bits: 256,
            mem_clock_mhz: 450,
            mem_latency_cycles: 120,
            core_clock_mhz: 225,
        }
    }

    /// A named preset.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let c = match name {
            "sim" => Self::sim(),
            "sim-wide" => Self::sim_wide(),
            "u280" => Self::u280(),
            other => return Err(ConfigError::UnknownPreset(other.to_string())),
        };
        debug_assert!(c.validate().is_ok());
        Ok(c)
    }

    /// A preset name, or else a path to a TOML file (anything with a `.toml` suffix or a path separator is
    /// read as a file, so a mistyped path is reported as a missing file, not as an unknown preset).
    pub fn from_name_or_path(s: &str) -> Result<Self, ConfigError> {
        if Self::PRESETS.contains(&s) {
            Self::preset(s)
        } else if s.ends_with(".toml") || s.contains(std::path::MAIN_SEPARATOR) || Path::new(s).exists() {
            Self::load(Path::new(s))
        } else {
            Err(ConfigError::UnknownPreset(s.to_string()))
        }
    }

    /// Parses and validates TOML.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let c: OverlayConfig = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        c.validate()?;
        Ok(c)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("OverlayConfig serializes to TOML")
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Io { path: path.display().to_string(), source })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        std::fs::write(path, self.to_toml())
            .map_err(|source| ConfigError::Io { path: path.display().to_string(), source })
    }

    /// Checks every field; the first violation is returned, named by its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn bad(field: &'static str, value: impl ToString, expected: impl ToString) -> Result<(), ConfigError> {
            Err(ConfigError::Field { field, value: value.to_string(), expected: expected.to_string() })
        }
        let block = BLOCK as u32;
        if self.pe_lanes == 0 || self.pe_lanes > 4096 {
            return bad("pe_lanes", self.pe_lanes, "expected 1..=4096");
        }
        if !self.dot_width.is_power_of_two() || !(4..=256).contains(&self.dot_width) {
            return bad("dot_width", self.dot_width, "expected a power of two in 4..=256");
        }
        if !block.is_multiple_of(self.dot_width) && !self.dot_width.is_multiple_of(block) {
            return bad("dot_width", self.dot_width, "expected a divisor or a multiple of the block size 32");
        }
        if !(8..=16).contains(&self.act_mantissa_bits) {
            return bad("act_mantissa_bits", self.act_mantissa_bits, "expected 8..=16");
        }
        if self.vector_lanes == 0 || !self.vector_lanes.is_power_of_two() || self.vector_lanes > 1024 {
            return bad("vector_lanes", self.vector_lanes, "expected a power of two in 1..=1024");
        }
        if self.max_batch == 0 || self.max_batch > MAX_BATCH_LIMIT {
            return bad("max_batch", self.max_batch, format!("expected 1..={MAX_BATCH_LIMIT}"));
        }
        // Scratchpad word addresses are 20 bits wide in the encoding.
        if self.scratchpad_bytes < 4096 || self.scratchpad_bytes > 4 << 20 || !self.scratchpad_bytes.is_multiple_of(4) {
            return bad("scratchpad_bytes", self.scratchpad_bytes, "expected a multiple of 4 in 4096..=4194304");
        }
        if self.weight_fifo_bytes < 1024 || !self.weight_fifo_bytes.is_power_of_two() {
            return bad("weight_fifo_bytes", self.weight_fifo_bytes, "expected a power of two >= 1024");
        }
        if u64::from(self.weight_fifo_bytes) < 512 * u64::from(self.pe_lanes) {
            return bad(
                "weight_fifo_bytes",
                self.weight_fifo_bytes,
                format!("expected at least 512 x pe_lanes = {} (4 lines per row slot)", 512 * u64::from(self.pe_lanes)),
            );
        }
        if !self.kv_history_width.is_multiple_of(16) || self.kv_history_width > 4096 {
            return bad("kv_history_width", self.kv_history_width, "expected a multiple of 16, at most 4096");
        }
        if self.kv_history_slots > 1 << 20 {
            return bad("kv_history_slots", self.kv_history_slots, "expected at most 1048576");
        }
        // Memory addresses are 32-bit line (32-byte) numbers in the encoding.
        if self.device_memory_bytes < 1 << 20
            || self.device_memory_bytes > 32u64 << 32
            || !self.device_memory_bytes.is_multiple_of(crate::isa::LINE_BYTES)
        {
            return bad("device_memory_bytes", self.device_memory_bytes, "expected a multiple of 32 in 1 MiB..=128 GiB");
        }
        if self.mem_channels == 0 || self.mem_channels > 64 {
            return bad("mem_channels", self.mem_channels, "expected 1..=64");
        }
        if ![32, 64, 128, 256, 512, 1024].contains(&self.mem_channel_bits) {
            return bad("mem_channel_bits", self.mem_channel_bits, "expected 32, 64, 128, 256, 512 or 1024");
        }
        if self.mem_clock_mhz == 0 || self.mem_clock_mhz > 4000 {
            return bad("mem_clock_mhz", self.mem_clock_mhz, "expected 1..=4000");
        }
        if self.core_clock_mhz == 0 || self.core_clock_mhz > 1000 {
            return bad("core_clock_mhz", self.core_clock_mhz, "expected 1..=1000");
        }
        if self.mem_latency_cycles > 10_000 {
            return bad("mem_latency_cycles", self.mem_latency_cycles, "expected at most 10000");
        }
        Ok(())
    }

    /// Stable 64-bit identity of the hardware: FNV-1a over every field but `name`, in declaration order,
    /// little-endian. Changing a field's meaning or adding a field changes the hash; that is the point.
    pub fn hash(&self) -> u64 {
        let mut bytes = Vec::with_capacity(128);
        bytes.extend_from_slice(b"opu-overlay-config-v1");
        for v in [
            self.pe_lanes,
            self.dot_width,
            self.act_mantissa_bits,
            self.vector_lanes,
            self.max_batch,
            self.scratchpad_bytes,
            self.weight_fifo_bytes,
            self.kv_history_slots,
            self.kv_history_width,
        ] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&self.device_memory_bytes.to_le_bytes());
        for v in [
            self.mem_channels,
            self.mem_channel_bits,
            self.mem_clock_mhz,
            self.mem_latency_cycles,
            self.core_clock_mhz,
        ] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        fnv1a64(&bytes)
    }

    /// Multiply-accumulates per core cycle of the PE array.
    pub fn macs_per_cycle(&self) -> u64 {
        u64::from(self.pe_lanes) * u64::from(self.dot_width)
    }

    /// Peak device-memory bandwidth, bytes per second.
    pub fn peak_bandwidth_bytes_per_s(&self) -> f64 {
        f64::from(self.mem_channels) * f64::from(self.mem_channel_bits) / 8.0 * f64::from(self.mem_clock_mhz) * 1e6
    }

    /// Peak device-memory bytes per core cycle.
    pub fn peak_bytes_per_cycle(&self) -> f64 {
        self.peak_bandwidth_bytes_per_s() / (f64::from(self.core_clock_mhz) * 1e6)
    }

    /// Bytes one memory channel moves per core cycle: `mem_channel_bits / 8 x mem_clock_mhz / core_clock_mhz`
    /// (32 at `sim` and `sim-wide`, 64 at `u280`), at least 1.
    pub fn channel_bytes_per_cycle(&self) -> u64 {
        (u64::from(self.mem_channel_bits) / 8 * u64::from(self.mem_clock_mhz) / u64::from(self.core_clock_mhz.max(1))).max(1)
    }

    /// The memory channel that holds device byte `addr`: device memory is interleaved over the channels in
    /// runs of [`channel_bytes_per_cycle`](Self::channel_bytes_per_cycle) bytes, round robin, so that a
    /// cycle's peak bytes at an aligned address are one run of every channel (the weight port's `W` beats;
    /// at `u280` beat `j` is channel `j`'s, the lane quad it feeds).
    pub fn channel_of(&self, addr: u64) -> u32 {
        ((addr / self.channel_bytes_per_cycle()) % u64::from(self.mem_channels.max(1))) as u32
    }

    /// Adds the bytes `[addr, addr + len)` to `per_channel` (one entry per channel) by [`channel_of`](Self::channel_of).
    pub fn count_channel_bytes(&self, per_channel: &mut [u64], addr: u64, len: u64) {
        let run = self.channel_bytes_per_cycle();
        let (mut at, end) = (addr, addr.saturating_add(len));
        while at < end {
            let next = ((at / run + 1) * run).min(end);
            if let Some(c) = per_channel.get_mut(self.channel_of(at) as usize) {
                *c += next - at;
            }
            at = next;
        }
    }

    /// 64-byte beats the matrix unit's weight port takes per core cycle: the memory's peak bytes per cycle
    /// over 64, at least 1 (1 at `sim`, 2 at `sim-wide`, 32 at `u280`). The RTL builds the port for a power
    /// of two that divides `pe_lanes / 4` (beat `j` of a cycle carries lane quad `j` of a group of `4 x
    /// beats` lanes) and at exactly the memory's rate.
    pub fn weight_port_beats(&self) -> u32 {
        ((self.peak_bytes_per_cycle() / 64.0) as u32).max(1)
    }

    /// Lines (32 bytes) of one row slot of the weight buffer: `weight_fifo_bytes` over two buffers of
    /// `2 x pe_lanes` slots. A lane's slot (its two rows) is a ring of `2 x weight_row_lines` 64-byte beats.
    pub fn weight_row_lines(&self) -> u32 {
        self.weight_fifo_bytes / (2 * 2 * self.pe_lanes * 32)
    }

    /// Row groups of `row_bytes`-byte rows the weight buffer holds at once: as many as the ring has room
    /// for, at most [`WEIGHT_GROUP_ENTRIES`] (the matrix unit's table of loaded groups); at least 2 for a row
    /// the buffer takes. The loader streams group `g` once group `g - this` has been computed.
    pub fn weight_groups_in_buffer(&self, row_bytes: u32) -> u32 {
        Self::weight_groups_in_ring(self.weight_row_lines(), row_bytes)
    }

    /// [`OverlayConfig::weight_groups_in_buffer`] for row slots of `row_lines` lines: a lane's ring of
    /// `2 x row_lines` beats holds `8 x row_lines` 16-byte units, a group takes the lane's share of it
    /// (`weight_layout::WeightLayout::lane_units`, its two rows).
    pub fn weight_groups_in_ring(row_lines: u32, row_bytes: u32) -> u32 {
        let units = crate::weight_layout::WeightLayout::for_lanes(1, row_bytes.max(1) as usize).lane_units();
        (u64::from(8 * row_lines) / units).clamp(1, u64::from(WEIGHT_GROUP_ENTRIES)) as u32
    }

    /// The longest `matmul` row, bytes: a lane's ring holds two groups of it (a lane's two rows each), and at
    /// most 65,472 (the matrix unit's 16-bit row length). A longer row traps `BAD_OPERAND`: 2,048 bytes at
    /// `sim` (W4Min up to 3,264 columns, W8 up to 1,920), 8,192 at `u280` (W4Min up to 13,088, W8 up to
    /// 7,680).
    pub fn max_matmul_row_bytes(&self) -> u32 {
        (32 * self.weight_row_lines()).min(65472)
    }

    /// The largest kernel of one `conv` output channel, bytes (`conv_k² x conv_cin` i16 weights): a PE lane's
    /// share of the weight buffer, `weight_fifo_bytes / pe_lanes`, less one 32-byte line (the CNN datapath
    /// keeps each lane's channel as the device-memory lines it spans, and a kernel starts at any i16 of a
    /// line), and at most `2 x fixed::MAX_PRODUCTS`. A larger kernel traps `BAD_OPERAND`: 8,160 bytes at
    /// `sim` (4,080 products per output), 32,736 at `u280`.
    pub fn max_conv_kernel_bytes(&self) -> u32 {
        (self.weight_fifo_bytes / self.pe_lanes).saturating_sub(32).min(2 * crate::numerics::fixed::MAX_PRODUCTS as u32)
    }

    /// Bytes of the on-chip KV history buffer (K and V, FP16).
    pub fn kv_history_bytes(&self) -> u64 {
        u64::from(self.kv_history_slots) * u64::from(self.kv_history_width) * 2 * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_differ() {
        for name in OverlayConfig::PRESETS {
            OverlayConfig::preset(name).unwrap().validate().unwrap();
        }
        let hashes: std::collections::HashSet<u64> =
            OverlayConfig::PRESETS.iter().map(|n| OverlayConfig::preset(n).unwrap().hash()).collect();
        assert_eq!(hashes.len(), OverlayConfig::PRESETS.len());
        for name in OverlayConfig::PRESETS {
            assert_eq!(OverlayConfig::preset(name).unwrap().name, *name);
        }
    }

    #[test]
    fn memory_is_interleaved_over_the_channels_a_cycles_run_each() {
        for (name, run, channels) in [("sim", 32, 2), ("sim-wide", 32, 4), ("u280", 64, 32)] {
            let c = OverlayConfig::preset(name).unwrap();
            assert_eq!((c.channel_bytes_per_cycle(), c.mem_channels), (run, channels), "{name}");
            assert_eq!(c.channel_bytes_per_cycle() * u64::from(c.mem_channels), c.peak_bytes_per_cycle() as u64, "{name}");
            // a cycle's peak bytes from an aligned address: one run of every channel
            let mut per = vec![0u64; channels as usize];
            c.count_channel_bytes(&mut per, 7 * run * u64::from(channels), run * u64::from(channels));
            assert!(per.iter().all(|&b| b == run), "{name}: {per:?}");
        }
        // at u280 a weight beat (64 bytes) is one channel's run: beat j of a request is channel j's
        let u = OverlayConfig::u280();
        assert_eq!((0..32).map(|j| u.channel_of(2048 * 5 + 64 * j)).collect::<Vec<_>>(), (0..32).collect::<Vec<_>>());
        // a span across runs is split at their boundaries
        let s = OverlayConfig::sim();
        let mut per = vec![0u64; 2];
        s.count_channel_bytes(&mut per, 20, 50);
        assert_eq!(per, vec![12 + 6, 32]);
        s.count_channel_bytes(&mut per, 64, 0);
        assert_eq!(per, vec![18, 32]);
    }

    #[test]
    fn sim_figures() {
        // the array's Q4_1 stream (256 MACs x 5 bits = 160 bytes per cycle) outruns the memory, as at u280
        let c = OverlayConfig::sim();
        assert_eq!(c.peak_bandwidth_bytes_per_s(), 14.4e9);
        assert_eq!(c.peak_bytes_per_cycle(), 64.0);
        assert_eq!(c.weight_port_beats(), 1);
        let w = OverlayConfig::sim_wide();
        assert_eq!((w.peak_bytes_per_cycle(), w.weight_port_beats()), (128.0, 2));
    }

    #[test]
    fn weight_groups_fit_the_ring() {
        use crate::weight_layout::WeightLayout;
        for c in [OverlayConfig::sim(), OverlayConfig::u280()] {
            let ring = 8 * u64::from(c.weight_row_lines());
            for rb in (2..=c.max_matmul_row_bytes()).step_by(2) {
                let units = WeightLayout::new(&c, rb as usize).lane_units();
                let k = c.weight_groups_in_buffer(rb);
                assert!(k >= 2 && u64::from(k) * units <= ring && k <= WEIGHT_GROUP_ENTRIES, "{} rb {rb}", c.name);
            }
        }
        // SmolLM2's rows at `sim` (lane rings of 512 units): 576 W4Min columns (360 bytes) 45 units, 8 groups
        // at once (the table's entries; the ring has room for 11); 1,536 W4Min (960) 120 units, 4; 576 W8 (612)
        // 77 units, 6; Llama-7B's at `u280` (rings of 2,048): 4,096 W4Min (2,560) 320 units, 6; 11,008 W4Min
        // (6,880) 860 units, 2
        let (s, u) = (OverlayConfig::sim(), OverlayConfig::u280());
        assert_eq!([360, 960, 612].map(|rb| s.weight_groups_in_buffer(rb)), [8, 4, 6]);
        assert_eq!([2560, 6880].map(|rb| u.weight_groups_in_buffer(rb)), [6, 2]);
        assert_eq!((s.max_matmul_row_bytes(), u.max_matmul_row_bytes()), (2048, 8192));
    }

    #[test]
    fn u280_figures() {
        let c = OverlayConfig::u280();
        assert_eq!(c.peak_bandwidth_bytes_per_s(), 460.8e9);
        assert_eq!(c.peak_bytes_per_cycle(), 2048.0);
        assert_eq!(c.weight_port_beats(), 32);
    }

    #[test]
    fn hash_is_stable_and_ignores_name() {
        // Burnt into programs: if this changes, every compiled program is refused. Change on purpose only.
        assert_eq!(OverlayConfig::sim().hash(), 0x8bd8_07a1_07ad_3381_u64, "{:#x}", OverlayConfig::sim().hash());
        let mut renamed = OverlayConfig::sim();
        renamed.name = "other".into();
        assert_eq!(renamed.hash(), OverlayConfig::sim().hash());
        let mut changed = OverlayConfig::sim();
        changed.pe_lanes = 16;
        assert_ne!(changed.hash(), OverlayConfig::sim().hash());
    }

    #[test]
    fn toml_round_trip() {
        let c = OverlayConfig::u280();
        assert_eq!(OverlayConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = OverlayConfig::sim();
        c.dot_width = 48;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("`dot_width` = 48") && e.contains("power of two"), "{e}");
        let text = OverlayConfig::sim().to_toml().replace("act_mantissa_bits = 16", "act_mantissa_bits = 20");
        let e = OverlayConfig::from_toml(&text, "my.toml").unwrap_err().to_string();
        assert!(e.contains("act_mantissa_bits") && e.contains("8..=16"), "{e}");
        let e = OverlayConfig::from_toml("pe_lanes = 3", "my.toml").unwrap_err().to_string();
        assert!(e.contains("my.toml") && e.contains("missing field"), "{e}");
        let e = OverlayConfig::from_name_or_path("nowhere/cfg.toml").unwrap_err().to_string();
        assert!(e.contains("nowhere/cfg.toml"), "{e}");
        assert!(matches!(OverlayConfig::from_name_or_path("u281"), Err(ConfigError::UnknownPreset(_))));
    }
}

//! The program container: what `opu compile` writes and the runtime loads onto a device.
//!
//! Layout (all integers little-endian; docs/isa.md, "Program container"):
//!
//! ```text
//! 0    magic         8 bytes  "OPUPROG\0"
//! 8    version       u16 major (1), u16 minor (0)
//! 12   header_bytes  u32      64
//! 16   config_hash   u64      OverlayConfig::hash of the overlay the program was built for
//! 24   sections      u32      number of section table entries
//! 28   flags         u32      0
//! 32   file_bytes    u64      length of the whole file (detects truncation)
//! 40   header_crc    u32      CRC-32 of bytes 0..40 and of the whole section table
//! 44   reserved      20 bytes zero
//! 64   section table, 64 bytes per entry:
//!        kind u32, flags u32 (0), name 16 bytes (UTF-8, NUL-padded), offset u64 (file offset, 64-aligned),
//!        size u64 (bytes; for BSS the bytes to zero on the device, nothing in the file),
//!        device_addr u64, crc u32 (CRC-32 of the section bytes), reserved 12 bytes
//! then the section bytes, each starting at a multiple of 64.
//! ```
//!
//! Section kinds: CODE (encoded instructions; its name is the entry point, e.g. `decode` or `prefill`),
//! DATA (bytes loaded at `device_addr`: weights, tables), BSS (device bytes zeroed at load: KV cache,
//! scratch), LAYOUT (JSON [`MemoryLayout`]: the named device-memory regions), META (JSON object of
//! free-form facts: model name, tokenizer, compiler version).

use crate::config::OverlayConfig;
use crate::isa::{self, Instr, IsaError, INSTR_BYTES};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const MAGIC: [u8; 8] = *b"OPUPROG\0";
/// 2: `matmul` weights interleaved by lane (`weight_layout`); a 1.x program's weights lie row after row.
pub const VERSION_MAJOR: u16 = 2;
pub const VERSION_MINOR: u16 = 0;
pub const HEADER_BYTES: usize = 64;
pub const ENTRY_BYTES: usize = 64;
pub const NAME_BYTES: usize = 16;
/// Section data starts at multiples of this (so a memory-mapped file hands out aligned slices).
pub const SECTION_ALIGN: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SectionKind {
    Code = 1,
    Data = 2,
    Bss = 3,
    Layout = 4,
    Meta = 5,
}

impl SectionKind {
    pub const ALL: [SectionKind; 5] = [SectionKind::Code, SectionKind::Data, SectionKind::Bss, SectionKind::Layout, SectionKind::Meta];
    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u32 == v)
    }
    /// Whether the section occupies device memory.
    pub fn on_device(self) -> bool {
        matches!(self, SectionKind::Code | SectionKind::Data | SectionKind::Bss)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub kind: SectionKind,
    pub name: String,
    pub device_addr: u64,
    /// Contents (empty for BSS).
    pub data: Vec<u8>,
    /// Device bytes to zero (BSS only).
    pub bss_bytes: u64,
}

impl Section {
    /// Bytes the section occupies in device memory (0 for LAYOUT and META).
    pub fn device_bytes(&self) -> u64 {
        match self.kind {
            SectionKind::Bss => self.bss_bytes,
            k if k.on_device() => self.data.len() as u64,
            _ => 0,
        }
    }
}

/// A named region of device memory, as planned by the compiler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub name: String,
    /// What the region holds: "code", "weights", "kv", "scratch", "io", "table"...
    pub kind: String,
    pub addr: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLayout {
    pub regions: Vec<Region>,
}

/// What is wrong with a container.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{path}: {source}")]
    File { path: String, source: Box<ContainerError> },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not an OPU program: {len} bytes is shorter than the {need}-byte header")]
    TooShort { len: usize, need: usize },
    #[error("not an OPU program: magic is {found:02x?}, expected \"OPUPROG\\0\"")]
    BadMagic { found: [u8; 8] },
    #[error("container format version {major}.{minor} is not supported (this build reads {VERSION_MAJOR}.x): recompile the model with this `opu compile`")]
    UnsupportedVersion { major: u16, minor: u16 },
    #[error("header field `{field}` = {value}, expected {expected}")]
    BadHeader { field: &'static str, value: u64, expected: String },
    #[error("truncated: header says {expected} bytes, file has {actual}")]
    Truncated { expected: u64, actual: u64 },
    #[error("header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the header or section table is corrupted")]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("section {index}: unknown kind {kind}")]
    UnknownSectionKind { index: usize, kind: u32 },
    #[error("section {index}: name is not NUL-padded UTF-8 of at most 16 bytes")]
    BadSectionName { index: usize },
    #[error("section {index} `{name}`: bytes [{offset}, +{size}) lie outside the file of {file_len} bytes or are not 64-aligned")]
    SectionOutOfBounds { index: usize, name: String, offset: u64, size: u64, file_len: u64 },
    #[error("section {index} `{name}`: checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the data is corrupted")]
    SectionChecksum { index: usize, name: String, stored: u32, computed: u32 },
    #[error("sections `{a}` and `{b}` overlap in device memory")]
    Overlap { a: String, b: String },
    #[error("section name `{0}` is longer than 16 bytes or contains NUL")]
    NameTooLong(String),
    #[error("program was built for overlay config {program:#018x}, this overlay (`{overlay_name}`) is {overlay:#018x}: recompile for it")]
    ConfigMismatch { program: u64, overlay: u64, overlay_name: String },
    #[error("section `{name}` [{addr:#x}, {end:#x}) does not fit device memory of {size:#x} bytes")]
    OutsideDeviceMemory { name: String, addr: u64, end: u64, size: u64 },
    #[error("code section `{name}` at device address {addr:#x}: expected a multiple of 16")]
    MisalignedCode { name: String, addr: u64 },
    #[error("code section `{name}`: {source}")]
    Code { name: String, source: IsaError },
    #[error("{kind:?} section `{name}`: {message}")]
    Json { kind: SectionKind, name: String, message: String },
}

/// A program: sections plus the hash of the overlay it was built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    pub config_hash: u64,
    pub sections: Vec<Section>,
}

fn check_name(name: &str) -> Result<(), ContainerError> {
    if name.len() > NAME_BYTES || name.contains('\0') {
        Err(ContainerError::NameTooLong(name.to_string()))
    } else {
        Ok(())
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn align_up(v: usize) -> usize {
    v.div_ceil(SECTION_ALIGN) * SECTION_ALIGN
}

impl Container {
    /// An empty container for `config`.
    pub fn new(config: &OverlayConfig) -> Self {
        Container { config_hash: config.hash(), sections: Vec::new() }
    }

    pub fn add_code(&mut self, name: &str, device_addr: u64, program: &[Instr]) -> Result<(), ContainerError> {
        let data = isa::encode_program(program).map_err(|source| ContainerError::Code { name: name.into(), source })?;
        self.push(SectionKind::Code, name, device_addr, data, 0)
    }

    pub fn add_data(&mut self, name: &str, device_addr: u64, data: Vec<u8>) -> Result<(), ContainerError> {
        self.push(SectionKind::Data, name, device_addr, data, 0)
    }

    pub fn add_bss(&mut self, name: &str, device_addr: u64, bytes: u64) -> Result<(), ContainerError> {
        self.push(SectionKind::Bss, name, device_addr, Vec::new(), bytes)
    }

    pub fn set_layout(&mut self, layout: &MemoryLayout) -> Result<(), ContainerError> {
        self.sections.retain(|s| s.kind != SectionKind::Layout);
        self.push(SectionKind::Layout, "layout", 0, serde_json::to_vec_pretty(layout).expect("layout serializes"), 0)
    }

    pub fn set_meta(&mut self, meta: &serde_json::Value) -> Result<(), ContainerError> {
        self.sections.retain(|s| s.kind != SectionKind::Meta);
        self.push(SectionKind::Meta, "meta", 0, serde_json::to_vec_pretty(meta).expect("meta serializes"), 0)
    }

    fn push(&mut self, kind: SectionKind, name: &str, device_addr: u64, data: Vec<u8>, bss_bytes: u64) -> Result<(), ContainerError> {
        check_name(name)?;
        self.sections.push(Section { kind, name: name.to_string(), device_addr, data, bss_bytes });
        Ok(())
    }

    /// The section of `kind` called `name`.
    pub fn section(&self, kind: SectionKind, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.kind == kind && s.name == name)
    }

    /// Decodes the code section `name` (an entry point).
    pub fn code(&self, name: &str) -> Option<Result<Vec<Instr>, ContainerError>> {
        self.section(SectionKind::Code, name)
            .map(|s| isa::decode_program(&s.data).map_err(|source| ContainerError::Code { name: name.into(), source }))
    }

    pub fn layout(&self) -> Result<Option<MemoryLayout>, ContainerError> {
        self.json_section(SectionKind::Layout)
    }

    pub fn meta(&self) -> Result<Option<serde_json::Value>, ContainerError> {
        self.json_section(SectionKind::Meta)
    }

    fn json_section<T: serde::de::DeserializeOwned>(&self, kind: SectionKind) -> Result<Option<T>, ContainerError> {
        let Some(s) = self.sections.iter().find(|s| s.kind == kind) else { return Ok(None) };
        serde_json::from_slice(&s.data)
            .map(Some)
            .map_err(|e| ContainerError::Json { kind, name: s.name.clone(), message: e.to_string() })
    }

    /// Serializes the container.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table_end = HEADER_BYTES + ENTRY_BYTES * self.sections.len();
        let mut offsets = Vec::with_capacity(self.sections.len());
        let mut at = align_up(table_end);
        for s in &self.sections {
            offsets.push(at);
            at = align_up(at + s.data.len());
        }
        let file_len = offsets.last().map(|&o| o + self.sections.last().unwrap().data.len()).unwrap_or(table_end);
        let mut out = vec![0u8; file_len];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        out[10..12].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        out[12..16].copy_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
        out[16..24].copy_from_slice(&self.config_hash.to_le_bytes());
        out[24..28].copy_from_slice(&(self.sections.len() as u32).to_le_bytes());
        out[32..40].copy_from_slice(&(file_len as u64).to_le_bytes());
        for (i, (s, &off)) in self.sections.iter().zip(&offsets).enumerate() {
            let e = HEADER_BYTES + i * ENTRY_BYTES;
            out[e..e + 4].copy_from_slice(&(s.kind as u32).to_le_bytes());
            out[e + 8..e + 8 + s.name.len()].copy_from_slice(s.name.as_bytes());
            let (offset, size) = if s.kind == SectionKind::Bss { (0, s.bss_bytes) } else { (off as u64, s.data.len() as u64) };
            out[e + 24..e + 32].copy_from_slice(&offset.to_le_bytes());
            out[e + 32..e + 40].copy_from_slice(&size.to_le_bytes());
            out[e + 40..e + 48].copy_from_slice(&s.device_addr.to_le_bytes());
            out[e + 48..e + 52].copy_from_slice(&crc32fast::hash(&s.data).to_le_bytes());
            out[off..off + s.data.len()].copy_from_slice(&s.data);
        }
        let crc = header_crc(&out[..table_end]);
        out[40..44].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and validates a container: every length, offset and checksum is checked before use.
    pub fn from_bytes(b: &[u8]) -> Result<Self, ContainerError> {
        if b.len() < HEADER_BYTES {
            return Err(ContainerError::TooShort { len: b.len(), need: HEADER_BYTES });
        }
        let magic: [u8; 8] = b[0..8].try_into().unwrap();
        if magic != MAGIC {
            return Err(ContainerError::BadMagic { found: magic });
        }
        let (major, minor) = (u16_at(b, 8), u16_at(b, 10));
        if major != VERSION_MAJOR {
            return Err(ContainerError::UnsupportedVersion { major, minor });
        }
        let header_bytes = u32_at(b, 12);
        if header_bytes as usize != HEADER_BYTES {
            return Err(ContainerError::BadHeader { field: "header_bytes", value: header_bytes.into(), expected: HEADER_BYTES.to_string() });
        }
        let file_bytes = u64_at(b, 32);
        if file_bytes != b.len() as u64 {
            return Err(ContainerError::Truncated { expected: file_bytes, actual: b.len() as u64 });
        }
        let count = u32_at(b, 24) as usize;
        let table_end = count
            .checked_mul(ENTRY_BYTES)
            .and_then(|t| t.checked_add(HEADER_BYTES))
            .filter(|&t| t <= b.len())
            .ok_or_else(|| ContainerError::BadHeader {
                field: "sections",
                value: count as u64,
                expected: format!("a section table that fits the file of {} bytes", b.len()),
            })?;
        let (stored, computed) = (u32_at(b, 40), header_crc(&b[..table_end]));
        if stored != computed {
            return Err(ContainerError::HeaderChecksum { stored, computed });
        }
        let flags = u32_at(b, 28);
        if flags != 0 {
            return Err(ContainerError::BadHeader { field: "flags", value: flags.into(), expected: "0".into() });
        }
        let mut sections = Vec::with_capacity(count);
        for index in 0..count {
            let e = &b[HEADER_BYTES + index * ENTRY_BYTES..HEADER_BYTES + (index + 1) * ENTRY_BYTES];
            let kind_raw = u32_at(e, 0);
            let kind = SectionKind::from_u32(kind_raw).ok_or(ContainerError::UnknownSectionKind { index, kind: kind_raw })?;
            let name_raw = &e[8..8 + NAME_BYTES];
            let name_len = name_raw.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
            if name_raw[name_len..].iter().any(|&c| c != 0) {
                return Err(ContainerError::BadSectionName { index });
            }
            let name = std::str::from_utf8(&name_raw[..name_len]).map_err(|_| ContainerError::BadSectionName { index })?.to_string();
            let (offset, size, device_addr, crc) = (u64_at(e, 24), u64_at(e, 32), u64_at(e, 40), u32_at(e, 48));
            let (data, bss_bytes) = if kind == SectionKind::Bss {
                (Vec::new(), size)
            } else {
                let in_file = offset % SECTION_ALIGN as u64 == 0
                    && offset >= table_end as u64
                    && offset.checked_add(size).is_some_and(|end| end <= b.len() as u64);
                if !in_file {
                    return Err(ContainerError::SectionOutOfBounds { index, name, offset, size, file_len: b.len() as u64 });
                }
                (b[offset as usize..(offset + size) as usize].to_vec(), 0)
            };
            let computed = crc32fast::hash(&data);
            if computed != crc {
                return Err(ContainerError::SectionChecksum { index, name, stored: crc, computed });
            }
            sections.push(Section { kind, name, device_addr, data, bss_bytes });
        }
        let c = Container { config_hash: u64_at(b, 16), sections };
        c.check_overlaps()?;
        Ok(c)
    }

    fn check_overlaps(&self) -> Result<(), ContainerError> {
        let mut spans: Vec<(u64, u64, &str)> = self
            .sections
            .iter()
            .filter(|s| s.device_bytes() > 0)
            .map(|s| (s.device_addr, s.device_addr.saturating_add(s.device_bytes()), s.name.as_str()))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(ContainerError::Overlap { a: w[0].2.into(), b: w[1].2.into() });
            }
        }
        Ok(())
    }

    /// Refuses a container built for another overlay, or one whose sections do not fit its memory, and
    /// checks that every code section decodes.
    pub fn check_config(&self, config: &OverlayConfig) -> Result<(), ContainerError> {
        if self.config_hash != config.hash() {
            return Err(ContainerError::ConfigMismatch { program: self.config_hash, overlay: config.hash(), overlay_name: config.name.clone() });
        }
        for s in &self.sections {
            let end = s.device_addr.checked_add(s.device_bytes());
            if s.kind.on_device() && end.is_none_or(|e| e > config.device_memory_bytes) {
                return Err(ContainerError::OutsideDeviceMemory {
                    name: s.name.clone(),
                    addr: s.device_addr,
                    end: end.unwrap_or(u64::MAX),
                    size: config.device_memory_bytes,
                });
            }
            if s.kind == SectionKind::Code {
                if !s.device_addr.is_multiple_of(INSTR_BYTES as u64) {
                    return Err(ContainerError::MisalignedCode { name: s.name.clone(), addr: s.device_addr });
                }
                isa::decode_program(&s.data).map_err(|source| ContainerError::Code { name: s.name.clone(), source })?;
            }
        }
        Ok(())
    }

    pub fn write(&self, path: &Path) -> Result<(), ContainerError> {
        std::fs::write(path, self.to_bytes()).map_err(|e| ContainerError::File { path: path.display().to_string(), source: Box::new(e.into()) })
    }

    pub fn read(path: &Path) -> Result<Self, ContainerError> {
        let wrap = |e: ContainerError| ContainerError::File { path: path.display().to_string(), source: Box::new(e) };
        let bytes = std::fs::read(path).map_err(|e| wrap(e.into()))?;
        Self::from_bytes(&bytes).map_err(wrap)
    }
}

fn header_crc(header_and_table: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&header_and_table[..40]);
    h.update(&header_and_table[HEADER_BYTES..]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Container {
        let cfg = OverlayConfig::sim();
        let mut c = Container::new(&cfg);
        c.add_code("decode", 0, &[Instr::Barrier {}, Instr::End {}]).unwrap();
        c.add_data("weights", 4096, (0..=255u8).cycle().take(1000).collect()).unwrap();
        c.add_bss("kv", 1 << 20, 1 << 16).unwrap();
        c.set_layout(&MemoryLayout { regions: vec![Region { name: "kv".into(), kind: "kv".into(), addr: 1 << 20, bytes: 1 << 16 }] }).unwrap();
        c.set_meta(&serde_json::json!({"model": "test"})).unwrap();
        c
    }

    fn arb_container() -> impl Strategy<Value = Container> {
        let section = (0usize..5, "[a-z_]{0,16}", 0u64..1 << 20, prop::collection::vec(any::<u8>(), 0..200), 0u64..1 << 30);
        (any::<u64>(), prop::collection::vec(section, 0..6)).prop_map(|(hash, secs)| {
            let mut c = Container { config_hash: hash, sections: Vec::new() };
            // Place device sections one after another so that they never overlap.
            let mut addr = 0u64;
            for (k, name, gap, data, bss) in secs {
                let kind = SectionKind::ALL[k];
                let (data, bss_bytes) = if kind == SectionKind::Bss { (Vec::new(), bss) } else { (data, 0) };
                let device_addr = if kind.on_device() { addr + gap } else { 0 };
                let s = Section { kind, name, device_addr, data, bss_bytes };
                if kind.on_device() {
                    addr = device_addr + s.device_bytes();
                }
                c.sections.push(s);
            }
            c
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10_000))]
        #[test]
        fn write_read_round_trip(c in arb_container()) {
            prop_assert_eq!(Container::from_bytes(&c.to_bytes()).unwrap(), c);
        }
    }

    #[test]
    fn sample_round_trips_and_checks_against_its_config() {
        let c = sample();
        let back = Container::from_bytes(&c.to_bytes()).unwrap();
        assert_eq!(back, c);
        back.check_config(&OverlayConfig::sim()).unwrap();
        assert_eq!(back.code("decode").unwrap().unwrap(), vec![Instr::Barrier {}, Instr::End {}]);
        assert_eq!(back.layout().unwrap().unwrap().regions[0].name, "kv");
        assert_eq!(back.meta().unwrap().unwrap()["model"], "test");
    }

    #[test]
    fn truncated_containers_are_refused() {
        let bytes = sample().to_bytes();
        for cut in [0, 10, 63, 64, 200, bytes.len() - 1] {
            let e = Container::from_bytes(&bytes[..cut]).unwrap_err();
            match e {
                ContainerError::TooShort { .. } => assert!(cut < HEADER_BYTES),
                ContainerError::Truncated { expected, actual } => {
                    assert_eq!((expected, actual), (bytes.len() as u64, cut as u64));
                    assert!(e.to_string().contains("truncated"));
                }
                other => panic!("cut {cut}: {other}"),
            }
        }
    }

    #[test]
    fn corrupted_containers_are_refused() {
        let bytes = sample().to_bytes();
        // Bad magic.
        let mut b = bytes.clone();
        b[0] = b'X';
        assert!(matches!(Container::from_bytes(&b), Err(ContainerError::BadMagic { .. })));
        // A flipped bit in the section table (a section's device address).
        let mut b = bytes.clone();
        b[HEADER_BYTES + 40] ^= 1;
        assert!(matches!(Container::from_bytes(&b), Err(ContainerError::HeaderChecksum { .. })));
        // A flipped bit in the weights.
        let mut b = bytes.clone();
        let off = u64_at(&b, HEADER_BYTES + ENTRY_BYTES + 24) as usize;
        b[off + 17] ^= 0x80;
        let e = Container::from_bytes(&b).unwrap_err();
        assert!(matches!(e, ContainerError::SectionChecksum { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("`weights`") && e.to_string().contains("corrupted"));
        // A newer major version, and an older one (1.x: row-major weights).
        for major in [VERSION_MAJOR + 1, 1] {
            let mut b = bytes.clone();
            b[8..10].copy_from_slice(&major.to_le_bytes());
            let e = Container::from_bytes(&b).unwrap_err();
            assert!(matches!(e, ContainerError::UnsupportedVersion { major: m, .. } if m == major), "{e}");
            assert!(e.to_string().contains("recompile"), "{e}");
        }
        // A section count that points past the file (checked before the checksum, so no panic).
        let mut b = bytes;
        b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Container::from_bytes(&b), Err(ContainerError::BadHeader { field: "sections", .. })));
    }

    #[test]
    fn a_container_for_another_overlay_is_refused() {
        let c = sample();
        let e = c.check_config(&OverlayConfig::u280()).unwrap_err();
        assert!(matches!(e, ContainerError::ConfigMismatch { .. }));
        let msg = e.to_string();
        assert!(msg.contains("`u280`") && msg.contains("recompile"), "{msg}");
    }

    #[test]
    fn sections_outside_memory_or_overlapping_are_refused() {
        let cfg = OverlayConfig::sim();
        let mut c = Container::new(&cfg);
        c.add_bss("kv", cfg.device_memory_bytes - 16, 32).unwrap();
        assert!(matches!(c.check_config(&cfg), Err(ContainerError::OutsideDeviceMemory { .. })));
        let mut c = Container::new(&cfg);
        c.add_data("a", 0, vec![1; 100]).unwrap();
        c.add_bss("b", 64, 10).unwrap();
        assert!(matches!(Container::from_bytes(&c.to_bytes()), Err(ContainerError::Overlap { .. })));
        assert!(matches!(c.add_data("a_name_that_is_too_long", 0, vec![]), Err(ContainerError::NameTooLong(_))));
    }

    #[test]
    fn a_bad_code_section_names_the_instruction() {
        let cfg = OverlayConfig::sim();
        let mut c = Container::new(&cfg);
        let mut code = isa::encode_program(&[Instr::End {}]).unwrap();
        code.extend_from_slice(&[0u8; 16]);
        c.push(SectionKind::Code, "decode", 0, code, 0).unwrap();
        let e = c.check_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("`decode`") && e.contains("instruction 1") && e.contains("unknown opcode 0x00"), "{e}");
        let mut c = Container::new(&cfg);
        c.add_code("main", 8, &[Instr::End {}]).unwrap();
        assert!(matches!(c.check_config(&cfg), Err(ContainerError::MisalignedCode { addr: 8, .. })));
    }
}

//! The card image's sidecar: what `opu rtl project` writes beside the Vivado project (and the build copies
//! beside the bitstream), and what `opu flash` checks before and after programming a card: which overlay
//! the bitstream holds, for which board, built when and by what.

use crate::config::OverlayConfig;
use crate::{pci, regs};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `format` field of a sidecar this build writes and reads.
pub const FORMAT: &str = "opu-card-image/1";

/// A card image's metadata (JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    pub format: String,
    /// The board the project targets (`alveo-u280`).
    pub board: String,
    /// The FPGA part.
    pub part: String,
    /// The project's top module.
    pub top: String,
    /// The overlay, in full.
    pub config: OverlayConfig,
    /// `config`'s hash (`OverlayConfig::hash`, `0x` and 16 hex digits): what CONFIG_HASH reads on the card.
    pub config_hash: String,
    /// The register map / ISA version (`VERSION`'s major.minor).
    pub isa_version: String,
    /// The PCIe identity the card image's bridge is built with.
    pub pci_vendor: String,
    pub pci_device: String,
    /// When the project was written (UTC, RFC 3339).
    pub build_date: String,
    /// The `opu` that wrote it.
    pub opu_version: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a card image sidecar: {what}")]
    Json { path: PathBuf, what: String },
    #[error("{path}: field `{field}`: {what}")]
    Field { path: PathBuf, field: &'static str, what: String },
}

/// `VERSION` as `major.minor`.
pub fn isa_version() -> String {
    format!("{}.{}", regs::VERSION_VALUE >> 16, regs::VERSION_VALUE & 0xFFFF)
}

/// A config hash as the sidecar and `opu devices` write it.
pub fn hash_text(hash: u64) -> String {
    format!("{hash:#018x}")
}

impl Sidecar {
    pub fn new(config: &OverlayConfig, board: &str, part: &str, top: &str, build_date: &str, opu_version: &str) -> Sidecar {
        Sidecar {
            format: FORMAT.into(),
            board: board.into(),
            part: part.into(),
            top: top.into(),
            config: config.clone(),
            config_hash: hash_text(config.hash()),
            isa_version: isa_version(),
            pci_vendor: format!("{:#06x}", pci::VENDOR_ID),
            pci_device: format!("{:#06x}", pci::DEVICE_ID),
            build_date: build_date.into(),
            opu_version: opu_version.into(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a sidecar serializes") + "\n"
    }

    /// Parses and checks a sidecar read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Sidecar, SidecarError> {
        let s: Sidecar = serde_json::from_str(text).map_err(|e| SidecarError::Json { path: path.into(), what: e.to_string() })?;
        s.check(path)?;
        Ok(s)
    }

    pub fn read(path: &Path) -> Result<Sidecar, SidecarError> {
        let text = std::fs::read_to_string(path).map_err(|e| SidecarError::Io { path: path.into(), source: e })?;
        Self::parse(&text, path)
    }

    /// The checks `opu flash` makes before programming: this build's format, a valid config whose hash is
    /// `config_hash`, this register map's major version, the OPU PCIe identity.
    pub fn check(&self, path: &Path) -> Result<(), SidecarError> {
        let bad = |field: &'static str, what: String| Err(SidecarError::Field { path: path.into(), field, what });
        if self.format != FORMAT {
            return bad("format", format!("`{}`, expected `{FORMAT}`", self.format));
        }
        if let Err(e) = self.config.validate() {
            return bad("config", e.to_string());
        }
        if self.config_hash != hash_text(self.config.hash()) {
            return bad("config_hash", format!("{} does not match its config, which hashes to {}", self.config_hash, hash_text(self.config.hash())));
        }
        let major = |v: &str| v.split('.').next().map(str::to_string);
        if major(&self.isa_version) != major(&isa_version()) {
            return bad("isa_version", format!("{}, this build speaks {}", self.isa_version, isa_version()));
        }
        let (vendor, device) = (format!("{:#06x}", pci::VENDOR_ID), format!("{:#06x}", pci::DEVICE_ID));
        if self.pci_vendor != vendor || self.pci_device != device {
            return bad("pci_device", format!("{}:{}, an OPU card is {vendor}:{device}", self.pci_vendor, self.pci_device));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_round_trips_and_its_checks_name_the_field() {
        let s = Sidecar::new(&OverlayConfig::u280(), "alveo-u280", "xcu280-fsvh2892-2L-e", "opu_card", "2026-12-07T00:00:00Z", "0.1.0");
        let p = Path::new("x.json");
        assert_eq!(Sidecar::parse(&s.to_json(), p).unwrap(), s);
        let mut t = s.clone();
        t.config.pe_lanes = 64;
        let e = Sidecar::parse(&t.to_json(), p).unwrap_err().to_string();
        assert!(e.contains("x.json: field `config_hash`") && e.contains("does not match its config"), "{e}");
        let mut t = s.clone();
        t.isa_version = "1.0".into();
        assert!(Sidecar::parse(&t.to_json(), p).unwrap_err().to_string().contains("field `isa_version`"));
        let mut t = s.clone();
        t.format = "other".into();
        assert!(Sidecar::parse(&t.to_json(), p).unwrap_err().to_string().contains("field `format`"));
        let e = Sidecar::parse("{\"format\": 1}", p).unwrap_err().to_string();
        assert!(e.starts_with("x.json: not a card image sidecar"), "{e}");
    }
}

//! What goes wrong finding, opening and driving a card: each error names the card, the file or the
//! register, and what was expected.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
    #[error("no OPU card under {root} (looked for PCI vendor {vendor:#06x}, device {device:#06x})")]
    NoCard { root: PathBuf, vendor: u16, device: u16 },
    #[error("no PCI device {bdf} under {root}")]
    NoSuchDevice { root: PathBuf, bdf: String },
    #[error("{path}: BAR 0 is {len} bytes; the OPU register map needs {need}")]
    BarTooSmall { path: PathBuf, len: u64, need: u64 },
    #[error("card {bdf} is in use by another process (it holds the lock on {path})")]
    InUse { bdf: String, path: PathBuf },
    #[error("card {bdf} is not an OPU overlay: ID reads {id:#010x}, expected {expected:#010x}")]
    NotOpu { bdf: String, id: u32, expected: u32 },
    #[error("card {bdf} speaks register map {card_major}.{card_minor}; this driver speaks {major}.{minor}")]
    Version { bdf: String, card_major: u32, card_minor: u32, major: u32, minor: u32 },
    #[error("card {bdf} runs an overlay with config hash {hash:#018x}, which is none of this build's presets ({known}); name its config file")]
    UnknownConfig { bdf: String, hash: u64, known: String },
    #[error("card {bdf} runs overlay {card_config} (config hash {card_hash:#018x}), not {wanted} ({wanted_hash:#018x})")]
    ConfigMismatch { bdf: String, card_config: String, card_hash: u64, wanted: String, wanted_hash: u64 },
    #[error(transparent)]
    Device(#[from] opu_hw::device::DeviceError),
    #[error("card {bdf} has no XDMA character devices ({dir} is missing or empty): is the xdma driver loaded? (docs/driver.md)")]
    NoXdma { bdf: String, dir: PathBuf },
}

impl DriverError {
    pub fn file(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DriverError::File { path: path.into(), source }
    }
}

impl From<DriverError> for opu_hw::device::DeviceError {
    fn from(e: DriverError) -> Self {
        match e {
            DriverError::Device(d) => d,
            other => opu_hw::device::DeviceError::Io(other.to_string()),
        }
    }
}

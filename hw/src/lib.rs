//! `opu-hw`: the contract every other part of OPU agrees through.
//!
//! - [`config`]: the overlay configuration, its presets and its stable hash.
//! - [`isa`]: instructions, their 128-bit encoding, the text assembler and disassembler.
//! - [`regs`]: the MMIO register map.
//! - [`container`]: the program container (what the compiler writes and the runtime loads).
//! - [`numerics`]: every datapath operation as a bit-exact Rust function.
//! - [`weight_layout`]: how a `matmul` matrix lies in device memory (interleaved by PE lane).
//! - [`device`]: the `Device` trait that simulators, the emulated card and the PCIe driver implement.
//! - [`pci`]: the card's PCIe identity (vendor and device id, BAR 0) the card image and the driver share.
//! - [`image`]: the card image's sidecar (overlay, config hash, ISA version, build date) that `opu rtl
//!   project` writes and `opu flash` checks.
//!
//! Nothing here depends on another OPU crate; everything else depends on this.

pub mod config;
pub mod container;
pub mod device;
pub mod hash;
pub mod image;
pub mod isa;
pub mod numerics;
pub mod pci;
pub mod weight_layout;
pub mod regs;

pub use config::{ConfigError, OverlayConfig};
pub use container::{Container, ContainerError, Section, SectionKind};
pub use device::{Device, DeviceError};
pub use isa::{Instr, IsaError};

//! The OPU PCIe driver: discovery, BAR MMIO, DMA, card programming. It implements
//! [`opu_hw::device::Device`]; the code arrives with the driver issue.
pub use opu_hw as hw;

//! How an OPU card shows itself on PCIe: the identity the card image's PCIe bridge is built with
//! (`opu rtl project` writes these into the XDMA IP's configuration) and the driver looks for in sysfs.
//!
//! The bridge is Xilinx/AMD's XDMA (DMA/Bridge Subsystem for PCI Express): BAR 0 is its AXI4-Lite master,
//! wired to the overlay's register file ([`crate::regs`]); its DMA channels reach device memory.

/// Vendor id: Xilinx (AMD), whose PCIe bridge the card image instantiates.
pub const VENDOR_ID: u16 = 0x10EE;
/// Device id of an OPU overlay image ("OP"); the XDMA IP's default ids (0x9034, 0x9038, 0x903F...) belong
/// to the vendor's example designs.
pub const DEVICE_ID: u16 = 0x4F50;
/// PCI class code (class, subclass, programming interface): 0x12 processing accelerator.
pub const CLASS: u32 = 0x12_00_00;
/// Bytes of BAR 0 (the register window is [`crate::regs::MAP_BYTES`] of it; the rest reads 0).
pub const BAR0_BYTES: u64 = 64 << 10;
/// DMA channels per direction the card image enables (host to card and card to host).
pub const DMA_CHANNELS: u32 = 4;

#[cfg(test)]
mod tests {
    #[test]
    fn bar0_holds_the_register_map() {
        assert!(super::BAR0_BYTES >= u64::from(crate::regs::MAP_BYTES));
        assert!(super::BAR0_BYTES.is_power_of_two(), "PCIe BARs are powers of two");
    }
}

//! `opu-driver`: OPU cards on PCIe, from user space.
//!
//! - [`sysfs`]: finding cards by vendor and device id under the sysfs root (`/sys/bus/pci/devices`, or
//!   `--sysfs-root DIR` / `OPU_SYSFS_ROOT`), and their XDMA character devices.
//! - [`bar`]: BAR 0 mapped through `resource0`, registers read and written as volatile 32-bit words.
//! - [`xdma`]: device memory through the XDMA character devices (`pwrite`/`pread` at the device address,
//!   large transfers split over the channels) and the user-interrupt events device.
//! - [`card`]: a card opened for use ([`card::Card`] implements [`opu_hw::device::Device`]): exclusive
//!   (a lock on its BAR file), identified (ID, VERSION, CONFIG_HASH checked), completion polled with a
//!   timeout.
//! - [`flash`]: programming a card with a card image (`opu flash`): the bitstream and its sidecar checked,
//!   the vendor tool run, the card checked against the sidecar.
//! - [`emulate`]: an emulated card: a fake sysfs tree and device-memory file served by any `Device` (the
//!   functional simulator or the RTL), reached by the driver through exactly the code above.
//!
//! docs/driver.md describes the protocol, the permissions a user needs and what a card without XDMA takes.
pub use opu_hw as hw;

pub mod bar;
pub mod card;
pub mod emulate;
pub mod error;
pub mod flash;
pub mod sysfs;
pub mod xdma;

pub use card::Card;
pub use error::DriverError;

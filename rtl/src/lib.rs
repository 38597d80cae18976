//! The OPU overlay in rust-hdl. The datapath arrives with the RTL issue; it must equal
//! [`opu_hw::numerics`] bit for bit.
pub use opu_hw as hw;

//! The OPU functional simulator. It implements [`opu_hw::device::Device`], so the host runs programs on it
//! exactly as on a card.
//!
//! - [`func`]: the functional simulator, the golden model: every instruction of docs/isa.md computed with the
//!   functions of [`opu_hw::numerics`], bit for bit, with the architectural counters and a cycle
//!   estimate that models the RTL's schedule.
//!
//! The RTL under Verilator (unit models and the overlay's top behind `Device`) is opu-rtlsim; this crate
//! never needs Verilator.

pub use opu_hw as hw;

pub mod func;

pub use func::{FuncSim, RegionBytes, Stats};

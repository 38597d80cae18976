//! OPU simulators. They implement [`opu_hw::device::Device`], so the host runs programs on them exactly as on a
//! card.
//!
//! - [`func`]: the functional simulator, the golden model: every instruction of docs/isa.md computed with the
//!   functions of [`opu_hw::numerics`], bit for bit, with the architectural counters and a roofline cycle
//!   estimate.
//!
//! The cycle-accurate model and the Verilator-backed RTL simulation arrive with their issues.

pub use opu_hw as hw;

pub mod func;

pub use func::{FuncSim, RegionBytes, Stats};

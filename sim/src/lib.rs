//! OPU simulators. They implement [`opu_hw::device::Device`], so the host runs programs on them exactly as on a
//! card.
//!
//! - [`func`]: the functional simulator, the golden model: every instruction of docs/isa.md computed with the
//!   functions of [`opu_hw::numerics`], bit for bit, with the architectural counters and a roofline cycle
//!   estimate.
//! - [`rtl`]: Verilator models of the opu-rtl units (the PE lane, the aligner, the `sim`-preset PE array, the
//!   DSP blocks), built by build.rs, behind typed wrappers; the co-simulation tests hold them to
//!   [`opu_hw::numerics`]. Running whole programs on the RTL (a `Device`) arrives with the controller.

pub use opu_hw as hw;

pub mod func;
pub mod rtl;

pub use func::{FuncSim, RegionBytes, Stats};

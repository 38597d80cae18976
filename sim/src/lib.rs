//! OPU simulators. They implement [`opu_hw::device::Device`], so the host runs programs on them exactly as on a
//! card.
//!
//! - [`func`]: the functional simulator, the golden model: every instruction of docs/isa.md computed with the
//!   functions of [`opu_hw::numerics`], bit for bit, with the architectural counters and a roofline cycle
//!   estimate.
//! - [`rtl`]: Verilator models of the opu-rtl units (the PE lane, the aligner, the `sim`-preset PE array, the
//!   DSP blocks), built by build.rs, behind typed wrappers; the co-simulation tests hold them to
//!   [`opu_hw::numerics`].
//! - [`rtl_device`]: [`RtlSim`], the RTL's `top` (register file, controller core, DMA unit, scratchpad) behind
//!   `Device` with a model of device memory: programs of control, scalar and DMA instructions run on it.

pub use opu_hw as hw;

pub mod func;
pub mod rtl;
pub mod rtl_device;

pub use func::{FuncSim, RegionBytes, Stats};
pub use rtl_device::{RtlSim, RtlSimError};

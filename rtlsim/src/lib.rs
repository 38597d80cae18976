//! OPU RTL simulation: the Verilog of opu-rtl, cycle by cycle, under Verilator.
//!
//! - [`rtl`]: Verilator models of the opu-rtl units, built by build.rs (through opu-verilate) behind typed
//!   wrappers; the co-simulation tests hold them to `opu_hw::numerics`.
//! - [`device`]: [`RtlSim`], the RTL's `top` (register file, controller core, DMA unit, scratchpad) behind
//!   `Device` with a model of device memory: programs of control, scalar and DMA instructions run on it.
//!
//! The models exist only when the crate was built with Verilator >= 5 on PATH ([`rtl::available`]); the
//! functional simulator (opu-sim) never needs Verilator.

pub use opu_hw as hw;

pub mod device;
pub mod rtl;

pub use device::{RtlSim, RtlSimError};

//! OPU simulators: the functional simulator (golden model), the cycle model and the Verilator-backed RTL
//! simulator. They implement [`opu_hw::device::Device`]; the code arrives with the simulator issues.
pub use opu_hw as hw;

//! OPU compiler: model import -> graph IR -> passes -> program container.
//!
//! The GGUF front end, the graph IR, quantization and lowering arrive with the compiler issue. Everything the
//! compiler will emit is defined by the contract crate, re-exported here so callers see one path.
pub use opu_hw as hw;

//! OPU compiler: model import -> graph IR -> passes -> program container.
//!
//! - [`gguf`]: the GGUF reader (fuzz-safe; memory-mapped tensor data).
//! - [`llama`]: the llama architecture's hyperparameters and tensors, checked against each other.
//!
//! The graph IR, quantization and lowering arrive with the compiler issue.

pub use opu_hw as hw;

pub mod gguf;
pub mod interp;
pub mod ir;
pub mod llama;
pub mod lower;
pub mod plan;
pub mod quantize;
pub mod testing;

pub use lower::{compile, CompileError, CompileOptions, Compiled, ProgramMeta};

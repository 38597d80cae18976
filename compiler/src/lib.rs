//! OPU compiler: model import -> graph IR -> passes -> program container.
//!
//! - [`gguf`]: the GGUF reader (fuzz-safe; memory-mapped tensor data).
//! - [`llama`]: the llama architecture's hyperparameters and tensors, checked against each other.
//! - [`ir`] and [`interp`]: the graph IR (both front ends build it) and its f32 interpreter; [`fuse`]: a llama graph
//!   matched to the overlay's fused instructions, which [`lower`] emits; [`quantize`]: weights in overlay formats.
//! - [`routers`]: per-token routers (safetensors), [`calibrate`]: routers fitted to text, [`lower`]: lowering to programs, [`plan`]: memory plans.
//! - [`keras`]: the Keras reader, [`dataset`]: labelled images (CSV), [`cnn`]: a Keras model as a graph, [`fixed_point`]: its 16-bit formats, [`lower_cnn`]: its program.

pub use opu_hw as hw;

pub mod calibrate;
pub mod dataset;
pub mod fuse;
pub mod cnn;
pub mod fixed_point;
pub mod gguf;
pub mod interp;
pub mod ir;
pub mod keras;
pub mod llama;
pub mod lower;
pub mod lower_cnn;
pub mod plan;
pub mod quantize;
pub mod routers;
pub mod testing;

pub use lower::{compile, CompileError, CompileOptions, Compiled, KvIndexMeta, KvLayout, ProgramMeta, SessionsMeta, SkipMeta};

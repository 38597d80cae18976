//! `opu-host`: the OPU runtime.
//!
//! - [`cache`]: the model cache (`opu fetch`), models fetched from their registry and checked by SHA-256.
//! - [`calibration`]: routers calibrated for a target skip rate (`--skip`), cached in the model cache.
//! - [`tokenizer`]: the tokenizer and chat template, built from the GGUF's metadata.
//! - [`backend`]: the `Backend` trait and opening a backend by name (`reference`, `auto`, ...).
//! - [`loader`]: a program container onto any `Device`, and running an entry point.
//! - [`exec`]: a program file run on a simulator (`opu exec`), and co-simulation against the functional
//!   simulator (`opu cosim`).
//! - [`kv_rows`]: the rows of the indexed KV layout's pool, handed out per (layer, position) before a pass.
//! - [`sim_backend`]: the `sim` backend: the model compiled and run on the functional simulator.
//! - [`reference`]: the reference path: the model in f32 over candle tensors (CPU, or CUDA with `cuda`).
//! - [`sampling`]: greedy and temperature / top-k / top-p sampling with a portable seeded generator.
//! - [`runtime`]: `Session`: generate (streaming) and teacher forcing, the same for every backend.
//! - [`eval`]: a backend measured against another, teacher-forced.
//! - [`sweep`]: `opu sweep-skip`, quality against bytes, cycles and KV saved per skip rate (table, PNG).

pub mod backend;
pub mod cache;
pub mod calibration;
pub mod eval;
pub mod exec;
pub mod kv_rows;
pub mod loader;
pub mod reference;
pub mod runtime;
pub mod sampling;
pub mod sim_backend;
pub mod sweep;
pub mod tokenizer;

pub use runtime::{GenerateParams, Generation, Session};
pub use sampling::SamplingParams;

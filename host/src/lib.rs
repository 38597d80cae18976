//! `opu-host`: the OPU runtime.
//!
//! - [`cache`]: the model cache (`opu fetch`), models fetched from their registry and checked by SHA-256.
//! - [`cnn`]: a Keras CNN classifier on a backend (`opu classify`) and measured on a dataset (`opu eval --dataset`).
//! - [`image_input`]: PNG and PGM images in, and the preprocessing that makes them a model's input.
//! - [`calibration`]: routers calibrated for a target skip rate (`--skip`), cached in the model cache.
//! - [`tokenizer`]: the tokenizer and chat template, built from the GGUF's metadata.
//! - [`backend`]: the `Backend` trait and opening a backend by name (`reference`, `auto`, ...).
//! - [`bench`]: `opu bench`'s peak resident memory per backend and speed ratios.
//! - [`loader`]: a program container onto any `Device`, and running an entry point.
//! - [`exec`]: a program file run on a simulator (`opu exec`), and co-simulation against the functional
//!   simulator (`opu cosim`).
//! - [`kv_rows`]: the rows of the indexed KV layout's pool, handed out per (layer, position) before a pass.
//! - [`sim_backend`]: the `sim` backend: the model compiled and run on the functional simulator.
//! - [`reference`]: the reference path: the model in f32 over candle tensors (CPU, or CUDA with `cuda`).
//! - [`sampling`]: greedy and temperature / top-k / top-p sampling with a portable seeded generator.
//! - [`serve`]: `opu serve`, an OpenAI-compatible HTTP API with several sessions batched on one overlay.
//! - [`runtime`]: `Session`: generate (streaming) and teacher forcing, the same for every backend.
//! - [`eval`]: a backend measured against another, teacher-forced.
//! - [`sweep`]: `opu sweep-skip`, quality against bytes, cycles and KV saved per skip rate (table, PNG).

pub mod backend;
pub mod bench;
pub mod cache;
pub mod cnn;
pub mod calibration;
pub mod eval;
pub mod exec;
pub mod image_input;
pub mod kv_rows;
pub mod loader;
pub mod reference;
pub mod runtime;
pub mod sampling;
pub mod serve;
pub mod sim_backend;
pub mod sweep;
pub mod tokenizer;

pub use runtime::{GenerateParams, Generation, Session};
pub use sampling::SamplingParams;

/// An error and its causes on one line, `outer: cause: cause`, each sentence once: a cause whose text the
/// line already holds is left out (several error types put their source in their own message, so
/// anyhow's `{:#}` would print it twice).
pub fn error_report(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line += ": ";
        }
        line += &text;
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_report_prints_each_cause_once() {
        // a container error whose message holds its source, under a context
        let inner = opu_hw::container::ContainerError::TooShort { len: 8, need: 64 };
        let outer = opu_hw::container::ContainerError::File { path: "bad.opu".into(), source: Box::new(inner) };
        let e = anyhow::Error::new(outer).context("opening the program");
        assert_eq!(
            super::error_report(&e),
            "opening the program: bad.opu: not an OPU program: 8 bytes is shorter than the 64-byte header"
        );
        let io = anyhow::Error::new(std::io::Error::other("disk on fire")).context("reading x.gguf");
        assert_eq!(super::error_report(&io), "reading x.gguf: disk on fire");
    }
}

//! The CNN path end to end: the Keras digit classifier in auto-scaled 16-bit fixed point, compiled to a
//! `conv`/`maxpool` program and run on the functional simulator, against the f32 interpreter (itself checked
//! against Keras in `opu-compiler`'s `cnn_oracle` test) on all 5,000 digits of mnist5k.
//!
//! Needs `OPU_DIGITS_KERAS` (`opu fetch digits`) and `OPU_MNIST5K` (`opu fetch mnist5k`); skips without them.

mod common;

use common::models_or_skip;
use opu_compiler::cnn::from_keras;
use opu_compiler::dataset::read_csv;
use opu_compiler::keras;
use opu_host::cnn::eval_dataset;
use opu_host::image_input::{fit_digit, Gray, Preprocess};
use opu_hw::OverlayConfig;
use std::path::PathBuf;

fn env_path(var: &str, fetch: &str) -> Option<PathBuf> {
    let p = std::env::var_os(var).map(PathBuf::from);
    if p.is_none() {
        eprintln!("skipped: set {var} (`opu fetch {fetch}`)");
    }
    p
}

#[test]
fn fixed_point_overlay_agrees_with_the_float_model_on_all_5000_digits() {
    let (Some(model), Some(data)) = (env_path("OPU_DIGITS_KERAS", "digits"), env_path("OPU_MNIST5K", "mnist5k")) else { return };
    let net = from_keras(&keras::open(&model).unwrap(), Some((1.0 / 255.0, 0.0))).unwrap();
    let ds = read_csv(&data, 784).unwrap();
    assert_eq!(ds.len(), 5000);
    // the model's own preprocessing (the default of `opu eval --model digits`)
    let e = eval_dataset(&net, &ds, Preprocess::Fit, &OverlayConfig::sim(), 256, 2, false).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&e).unwrap());
    assert_eq!(e.images, 5000);
    assert!(e.top1_agreement >= 0.998, "top-1 agreement {}", e.top1_agreement);
    assert!((e.accuracy - e.reference_accuracy).abs() <= 0.002, "accuracy {} against {}", e.accuracy, e.reference_accuracy);
    // 16-bit formats: the logits within a few of their last bits of the float model's
    assert!(e.max_logit_error < 0.05, "largest logit error {}", e.max_logit_error);
    // one image's work: 2.6 M MACs and the weights read once
    assert!(e.cycles_per_image > 1000.0 && e.bytes_per_image > 400_000.0, "{} cycles, {} bytes", e.cycles_per_image, e.bytes_per_image);
}

/// `fit_digit` against the digit classifier package's own `preprocess_image` (PIL), on 148 digits
/// (`tests/data/digits_fit_oracle.csv`, made by `scripts/keras_oracle.py`).
#[test]
fn fit_preprocessing_matches_the_packages_own() {
    let Some(data) = env_path("OPU_MNIST5K", "mnist5k") else { return };
    let ds = read_csv(&data, 784).unwrap();
    let mut count = 0;
    for line in include_str!("data/digits_fit_oracle.csv").lines().filter(|l| !l.starts_with('#')) {
        let (row, hex) = line.split_once(',').unwrap();
        let row: usize = row.parse().unwrap();
        let want: Vec<u8> = (0..784).map(|i| {
            let byte = u8::from_str_radix(&hex[i / 8 * 2..][..2], 16).unwrap();
            if byte >> (7 - i % 8) & 1 == 1 { 255 } else { 0 }
        }).collect();
        let got = fit_digit(&Gray { width: 28, height: 28, pixels: ds.image(row).to_vec() }).unwrap();
        assert_eq!(got, want, "row {row}");
        count += 1;
    }
    assert_eq!(count, 148);
}

/// A small CNN (`opu_compiler::testing::tiny_cnn`: same-padded conv, maxpool, flatten, dense softmax) compiled
/// and run on the functional simulator against the f32 interpreter, and the simulator's MAC count against
/// the compiler's: runs everywhere (no model files).
#[test]
fn a_tiny_cnn_runs_on_the_simulator_as_in_f32() {
    use opu_host::cnn::{reference_scores, CnnProgram};
    let net = from_keras(&opu_compiler::testing::tiny_cnn(), Some((1.0 / 255.0, 0.0))).unwrap();
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut images = |n: usize| -> Vec<f32> {
        (0..n * 50)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 256) as f32
            })
            .collect()
    };
    let (calibration, eval) = (images(32), images(32));
    let mut p = CnnProgram::compile_on_sim(&net, &calibration, &OverlayConfig::sim()).unwrap();
    let mut interp = net.interpreter();
    let frac = p.meta.plan.output_frac();
    let mut worst = 0f32;
    for img in eval.chunks_exact(50) {
        let (s, r) = (p.classify(img).unwrap(), reference_scores(&mut interp, img).unwrap().remove(0));
        assert_eq!(s.class, r.class);
        for (a, b) in s.logits.iter().zip(&r.logits) {
            worst = worst.max((a - b).abs());
        }
        // the conv, the pool and the dense layer's multiply-accumulates, counted by the simulator
        assert_eq!(p.last.macs, p.meta.macs_per_image);
    }
    assert_eq!(p.meta.macs_per_image, 5 * 5 * 3 * 3 * 3 * 2 + 12 * 4);
    // a few units of the logits' last place (16-bit formats; the rounding of three layers)
    assert!(worst <= 8.0 / (1u32 << frac) as f32, "largest logit error {worst} with {frac} fraction bits");
    assert_eq!(p.images, 32);
}


/// Runs each image on the RTL and on the functional simulator: the logits (the program's output bytes)
/// equal bit for bit, and the counters; the RTL's cycles within 1% of the functional simulator's cycle
/// model, and 32 cycles (the model adds the cycles of the `csrw`s before each `conv`, which the RTL's core
/// runs while the layer before still computes). Returns the RTL's and the model's cycles of the last image.
fn rtl_equals_sim(compiled: &opu_compiler::lower_cnn::CompiledCnn, images: &[f32]) -> (u64, u64) {
    use opu_host::cnn::CnnProgram;
    let config = OverlayConfig::sim();
    let mut sim = CnnProgram::load_on_sim(compiled, &config).unwrap();
    let mut rtl = CnnProgram::load_on_rtl(compiled, &config).unwrap();
    let per = compiled.meta.input.iter().product::<usize>();
    let mut last = (0, 0);
    for (i, img) in images.chunks_exact(per).enumerate() {
        let (s, r) = (sim.classify(img).unwrap(), rtl.classify(img).unwrap());
        assert_eq!(r.logits, s.logits, "image {i}: logits");
        let (a, b) = (&rtl.last, &sim.last);
        assert_eq!(
            (a.instructions, a.bytes_read, a.bytes_written, a.macs),
            (b.instructions, b.bytes_read, b.bytes_written, b.macs),
            "image {i}: INSTRET, BYTES_READ, BYTES_WRITTEN, MACS"
        );
        assert!(a.cycles.abs_diff(b.cycles) <= a.cycles / 100 + 32, "image {i}: RTL {} cycles, the cycle model {}", a.cycles, b.cycles);
        last = (a.cycles, b.cycles);
    }
    last
}

/// The small CNN on the RTL's CNN unit against the functional simulator (runs everywhere Verilator is: no
/// model files).
#[test]
fn a_tiny_cnn_runs_on_the_rtl_as_on_the_simulator() {
    if !models_or_skip("a_tiny_cnn_runs_on_the_rtl_as_on_the_simulator") {
        return;
    }
    let net = from_keras(&opu_compiler::testing::tiny_cnn(), Some((1.0 / 255.0, 0.0))).unwrap();
    let mut state = 0x0bad_cafe_1234_5679u64;
    let images: Vec<f32> = (0..40 * 50)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 256) as f32
        })
        .collect();
    let compiled = opu_host::cnn::compile(&net, &images[..32 * 50], &OverlayConfig::sim()).unwrap();
    let (rtl, model) = rtl_equals_sim(&compiled, &images[32 * 50..]);
    eprintln!("tiny CNN: {rtl} RTL cycles per image, the model {model}");
}

/// One real digit through the digit classifier on the RTL, bit for bit with the functional simulator.
#[test]
fn one_digit_on_the_rtl_equals_the_functional_simulator() {
    let (Some(model), Some(data)) = (env_path("OPU_DIGITS_KERAS", "digits"), env_path("OPU_MNIST5K", "mnist5k")) else { return };
    if !models_or_skip("one_digit_on_the_rtl_equals_the_functional_simulator") {
        return;
    }
    let net = from_keras(&keras::open(&model).unwrap(), Some((1.0 / 255.0, 0.0))).unwrap();
    let rows = opu_host::cnn::dataset_rows(&net, &data, 257, Preprocess::Fit).unwrap();
    let (calibration, digit) = rows.split_at(256 * 784);
    let compiled = opu_host::cnn::compile(&net, calibration, &OverlayConfig::sim()).unwrap();
    let (rtl, model) = rtl_equals_sim(&compiled, digit);
    eprintln!("digit classifier: {rtl} RTL cycles per image, the model {model}");
}

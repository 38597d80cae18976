//! The CNN path end to end: the Keras digit classifier in auto-scaled 16-bit fixed point, compiled to a
//! `conv`/`maxpool` program and run on the functional simulator, against the f32 interpreter (itself checked
//! against Keras in `opu-compiler`'s `cnn_oracle` test) on all 5,000 digits of mnist5k.
//!
//! Needs `OPU_DIGITS_KERAS` (`opu fetch digits`) and `OPU_MNIST5K` (`opu fetch mnist5k`); skips without them.

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

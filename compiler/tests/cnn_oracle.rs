//! The f32 interpreter of the IR against the real Keras model: the digit classifier's probabilities on 295
//! MNIST digits, computed by Keras 3 (JAX backend) with `scripts/keras_oracle.py` and committed in
//! `tests/data/keras_digits_oracle.csv`. An independent oracle: nothing here computed them.
//!
//! Needs `OPU_DIGITS_KERAS` (`opu fetch digits`) and `OPU_MNIST5K` (`opu fetch mnist5k`); skips without them.

use opu_compiler::cnn::from_keras;
use opu_compiler::dataset::read_csv;
use opu_compiler::keras;
use std::path::PathBuf;

fn env_path(var: &str, fetch: &str) -> Option<PathBuf> {
    let p = std::env::var_os(var).map(PathBuf::from);
    if p.is_none() {
        eprintln!("skipped: set {var} (`opu fetch {fetch}`)");
    }
    p
}

#[test]
fn interpreter_matches_keras_probabilities() {
    let (Some(model), Some(data)) = (env_path("OPU_DIGITS_KERAS", "digits"), env_path("OPU_MNIST5K", "mnist5k")) else { return };
    let net = from_keras(&keras::open(&model).unwrap(), Some((1.0 / 255.0, 0.0))).unwrap();
    let ds = read_csv(&data, 784).unwrap();
    let oracle = include_str!("data/keras_digits_oracle.csv");
    let mut interp = net.interpreter();
    let (mut worst, mut count, mut agree) = (0f64, 0usize, 0usize);
    for line in oracle.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        let row: usize = f[0].parse().unwrap();
        assert_eq!(f[1].parse::<u8>().unwrap(), ds.labels[row], "row {row}: the dataset's label");
        let want: Vec<f64> = f[2..].iter().map(|v| v.parse().unwrap()).collect();
        let pixels: Vec<f32> = ds.image(row).iter().map(|&p| f32::from(p)).collect();
        let got = interp.forward_rows(&pixels).unwrap();
        assert_eq!(got.len(), 10);
        for (g, w) in got.iter().zip(&want) {
            worst = worst.max((f64::from(*g) - w).abs());
        }
        let argmax = |v: &[f64]| v.iter().enumerate().fold(0, |b, (i, x)| if *x > v[b] { i } else { b });
        agree += usize::from(argmax(&got.iter().map(|&v| f64::from(v)).collect::<Vec<_>>()) == argmax(&want));
        count += 1;
    }
    eprintln!("{count} digits: largest probability error {worst:.3e}, top-1 agreement {agree}/{count}");
    assert_eq!(count, 295);
    assert!(worst < 1e-5, "largest probability error {worst:e}");
    assert_eq!(agree, count);
}

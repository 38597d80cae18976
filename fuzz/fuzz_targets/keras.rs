//! Fuzzes the Keras reader and its HDF5 weights: any bytes must give a model or an error, never a panic, an
//! overflow or an out-of-bounds read. The first byte picks what the rest is: the whole `.keras` zip (odd),
//! or `model.weights.h5` zipped with a fixed config of a small CNN (even: the fuzzer spends its time in
//! the HDF5 reader). A model that reads is also built as a graph and run once. Run: `cargo fuzz run keras`
//! (see docs/fuzzing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use opu_compiler::keras::parse_bytes;
use std::io::Write;
use std::path::Path;

/// 6x6x1 -> conv 3x3x2 ReLU -> maxpool 2 -> flatten -> dense 3 softmax (the layers of the digit classifier).
const CONFIG: &str = r#"{"class_name": "Sequential", "config": {"name": "tiny", "layers": [
 {"class_name": "InputLayer", "config": {"batch_shape": [null, 6, 6, 1], "name": "input_layer"}},
 {"class_name": "Conv2D", "config": {"name": "conv2d", "filters": 2, "kernel_size": [3, 3], "strides": [1, 1], "padding": "valid", "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true}},
 {"class_name": "MaxPooling2D", "config": {"name": "max_pooling2d", "pool_size": [2, 2], "padding": "valid", "strides": [2, 2], "data_format": "channels_last"}},
 {"class_name": "Flatten", "config": {"name": "flatten", "data_format": "channels_last"}},
 {"class_name": "Dense", "config": {"name": "dense", "units": 3, "activation": "softmax", "use_bias": true}}]}}"#;

fn zipped(weights: &[u8]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut z = zip::ZipWriter::new(&mut out);
    let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("config.json", stored).unwrap();
    z.write_all(CONFIG.as_bytes()).unwrap();
    z.start_file("model.weights.h5", stored).unwrap();
    z.write_all(weights).unwrap();
    z.finish().unwrap();
    out.into_inner()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let bytes = if mode % 2 == 1 { rest.to_vec() } else { zipped(rest) };
    let Ok(model) = parse_bytes(&bytes, Path::new("fuzz.keras")) else { return };
    let Ok(net) = opu_compiler::cnn::from_keras(&model, Some((1.0 / 255.0, 0.0))) else { return };
    let [h, w, c] = net.input_shape();
    if h * w * c <= 1 << 16 && model.layers.len() <= 16 {
        let _ = net.interpreter().forward_rows(&vec![128.0; h * w * c]);
    }
});

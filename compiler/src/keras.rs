//! The Keras front end's reader: a Keras 3 `.keras` file (a zip of `config.json`, `metadata.json` and
//! `model.weights.h5`) into the layers the overlay's CNN path runs, their shapes checked.
//!
//! Layers: `InputLayer`, `Rescaling`, `Conv2D` (valid or same padding, strides, ReLU or linear, no dilation or
//! groups), `MaxPooling2D` (valid padding), `Flatten`, `Dense` (ReLU, linear or softmax) and `Dropout`
//! (identity at inference: dropped). Any other layer is refused, naming it and its class. Tensors are
//! channels-last, as Keras stores them: an activation is `[h][w][c]`, a convolution kernel `[kh][kw][cin][cout]`,
//! a dense kernel `[in][out]` (so `Flatten` keeps the `[h][w][c]` order).
//!
//! The weights file is HDF5, read with the `hdf5-reader` crate (pure Rust, read-only: no system libhdf5 to
//! install, and reading is all we do). Keras 3 keeps a layer's variables at `layers/<name>/vars/<i>`
//! (kernel, then bias).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// What goes wrong reading a `.keras` file: each names the file, and the layer and field where it applies.
#[derive(Debug, thiserror::Error)]
pub enum KerasError {
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("{path}: layer `{layer}` ({class}): {what}")]
    Layer { path: PathBuf, layer: String, class: String, what: String },
}

/// A layer's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Linear,
    Relu,
    Softmax,
}

/// A layer the CNN path runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Layer {
    /// `x * scale + offset`.
    Rescaling { name: String, scale: f32, offset: f32 },
    /// `kernel` is `[kh][kw][cin][cout]`; `same` pads so that the output is `ceil(in / stride)`.
    Conv2D { name: String, kernel_size: [usize; 2], strides: [usize; 2], same: bool, filters: usize, activation: Activation, kernel: Vec<f32>, bias: Vec<f32> },
    MaxPool2D { name: String, pool: [usize; 2], strides: [usize; 2] },
    Flatten { name: String },
    /// `kernel` is `[in][units]`.
    Dense { name: String, units: usize, activation: Activation, kernel: Vec<f32>, bias: Vec<f32> },
}

/// A Keras model: its input shape `[h, w, c]` and layers, with each layer's output shape.
#[derive(Clone, Debug)]
pub struct KerasModel {
    pub path: PathBuf,
    pub input: [usize; 3],
    pub layers: Vec<Layer>,
    /// The output shape of each layer (`[1, 1, n]` after `Flatten` and `Dense`).
    pub shapes: Vec<[usize; 3]>,
}

/// The largest member of a `.keras` zip read (a model of 256 M f32 weights): no file unpacks without bound.
pub const MAX_MEMBER_BYTES: u64 = 1 << 30;

/// Reads and checks `path`.
pub fn open(path: &Path) -> Result<KerasModel, KerasError> {
    let bytes = std::fs::read(path).map_err(|e| KerasError::File { path: path.to_path_buf(), what: format!("cannot open: {e}") })?;
    parse_bytes(&bytes, path)
}

/// Reads and checks a `.keras` file's bytes; `path` names it in errors.
pub fn parse_bytes(bytes: &[u8], path: &Path) -> Result<KerasModel, KerasError> {
    let file_err = |what: String| KerasError::File { path: path.to_path_buf(), what };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| file_err(format!("not a .keras file (a zip): {e}")))?;
    let mut member = |name: &str| -> Result<Vec<u8>, KerasError> {
        let m = zip.by_name(name).map_err(|_| file_err(format!("has no `{name}` (a .keras file holds config.json and model.weights.h5)")))?;
        if m.size() > MAX_MEMBER_BYTES {
            return Err(file_err(format!("`{name}` unpacks to {} bytes; the CNN path reads members up to {MAX_MEMBER_BYTES}", m.size())));
        }
        let mut bytes = Vec::new();
        // (the declared size may lie: read no more than the limit either way)
        m.take(MAX_MEMBER_BYTES + 1).read_to_end(&mut bytes).map_err(|e| file_err(format!("`{name}`: {e}")))?;
        if bytes.len() as u64 > MAX_MEMBER_BYTES {
            return Err(file_err(format!("`{name}` unpacks to more than {MAX_MEMBER_BYTES} bytes")));
        }
        Ok(bytes)
    };
    let config: Value = serde_json::from_slice(&member("config.json")?).map_err(|e| file_err(format!("config.json: not JSON: {e}")))?;
    let weights = hdf5_reader::Hdf5File::from_vec(member("model.weights.h5")?)
        .map_err(|e| file_err(format!("model.weights.h5: not a readable HDF5 file: {e}")))?;
    let layers = config["config"]["layers"].as_array().ok_or_else(|| file_err("config.json: no `config.layers` list (a Sequential or Functional model)".into()))?;
    let mut model = KerasModel { path: path.to_path_buf(), input: [0; 3], layers: Vec::new(), shapes: Vec::new() };
    let mut shape: Option<[usize; 3]> = None;
    for l in layers {
        let class = l["class_name"].as_str().unwrap_or("?").to_string();
        let c = &l["config"];
        let name = c["name"].as_str().unwrap_or("?").to_string();
        let err = |what: String| KerasError::Layer { path: path.to_path_buf(), layer: name.clone(), class: class.clone(), what };
        let ints = |key: &str| -> Result<Vec<usize>, KerasError> {
            c[key].as_array().and_then(|a| a.iter().map(|v| v.as_u64().map(|v| v as usize)).collect()).ok_or_else(|| err(format!("`{key}`: expected a list of whole numbers")))
        };
        let pair = |key: &str| -> Result<[usize; 2], KerasError> {
            match ints(key)?.as_slice() {
                &[a, b] if (1..=1 << 16).contains(&a) && (1..=1 << 16).contains(&b) => Ok([a, b]),
                v => Err(err(format!("`{key}`: expected two numbers from 1 to 65536, found {v:?}"))),
            }
        };
        let activation = |allowed: &[Activation]| -> Result<Activation, KerasError> {
            let a = match c["activation"].as_str() {
                Some("linear") | None => Activation::Linear,
                Some("relu") => Activation::Relu,
                Some("softmax") => Activation::Softmax,
                Some(other) => return Err(err(format!("activation `{other}`: the overlay runs relu, linear{}", if allowed.contains(&Activation::Softmax) { " and softmax" } else { "" }))),
            };
            if allowed.contains(&a) { Ok(a) } else { Err(err(format!("activation `{a:?}` is not supported here"))) }
        };
        if c["data_format"].as_str().is_some_and(|f| f != "channels_last") {
            return Err(err(format!("data_format `{}`: expected channels_last", c["data_format"].as_str().unwrap_or(""))));
        }
        // the layer's variable `i` (Keras 3: `layers/<name>/vars/<i>`), of the given shape
        let var = |i: usize, want: &[usize]| -> Result<Vec<f32>, KerasError> {
            let at = format!("layers/{name}/vars/{i}");
            let d = weights.dataset(&at).map_err(|e| err(format!("model.weights.h5: no variable `{at}` ({e})")))?;
            let got: Vec<usize> = d.shape().iter().map(|&n| n as usize).collect();
            if got != want {
                return Err(err(format!("`{at}` has shape {got:?}, expected {want:?}")));
            }
            let a = d.read_array::<f32>().map_err(|e| err(format!("`{at}`: cannot read as FP32: {e}")))?;
            Ok(a.iter().copied().collect())
        };
        let input = |shape: Option<[usize; 3]>| shape.ok_or_else(|| err("comes before any input shape (no InputLayer)".into()));
        let (layer, out) = match class.as_str() {
            "InputLayer" => {
                let dims = c["batch_shape"].as_array().or(c["batch_input_shape"].as_array()).ok_or_else(|| err("no `batch_shape`".into()))?;
                let dims: Vec<Option<u64>> = dims.iter().map(Value::as_u64).collect();
                let s = match dims.as_slice() {
                    // (at most 2^16 each: no product of them overflows)
                    [_, Some(h), Some(w), Some(ch)] if [h, w, ch].iter().all(|&&d| (1..=1 << 16).contains(&d)) => [*h as usize, *w as usize, *ch as usize],
                    _ => return Err(err(format!("`batch_shape` {dims:?}: expected [batch, height, width, channels], each 1 to 65536"))),
                };
                model.input = s;
                shape = Some(s);
                continue;
            }
            "Dropout" => continue,
            "Rescaling" => {
                let num = |key: &str| c[key].as_f64().ok_or_else(|| err(format!("`{key}`: expected one number (per-channel scales are not supported)")));
                (Layer::Rescaling { name: name.clone(), scale: num("scale")? as f32, offset: num("offset")? as f32 }, input(shape)?)
            }
            "Conv2D" => {
                let [h, w, cin] = input(shape)?;
                let (kernel_size, strides) = (pair("kernel_size")?, pair("strides")?);
                if c["dilation_rate"].is_array() && pair("dilation_rate")? != [1, 1] {
                    return Err(err("`dilation_rate` other than 1: not supported".into()));
                }
                if c["groups"].as_u64().is_some_and(|g| g != 1) {
                    return Err(err("`groups` other than 1: not supported".into()));
                }
                let same = match c["padding"].as_str() {
                    Some("valid") => false,
                    Some("same") => true,
                    p => return Err(err(format!("padding {p:?}: expected valid or same"))),
                };
                let filters = c["filters"].as_u64().filter(|&f| (1..=1 << 16).contains(&f)).ok_or_else(|| err("`filters`: expected 1 to 65536".into()))? as usize;
                let out = |n: usize, k: usize, s: usize| if same { n.div_ceil(s) } else if n >= k { (n - k) / s + 1 } else { 0 };
                let (oh, ow) = (out(h, kernel_size[0], strides[0]), out(w, kernel_size[1], strides[1]));
                if oh == 0 || ow == 0 {
                    return Err(err(format!("a {}x{} kernel does not fit the {h}x{w} input", kernel_size[0], kernel_size[1])));
                }
                let kernel = var(0, &[kernel_size[0], kernel_size[1], cin, filters])?;
                let bias = if c["use_bias"].as_bool() == Some(false) { vec![0.0; filters] } else { var(1, &[filters])? };
                let activation = activation(&[Activation::Linear, Activation::Relu])?;
                (Layer::Conv2D { name: name.clone(), kernel_size, strides, same, filters, activation, kernel, bias }, [oh, ow, filters])
            }
            "MaxPooling2D" => {
                let [h, w, ch] = input(shape)?;
                let pool = pair("pool_size")?;
                let strides = if c["strides"].is_null() { pool } else { pair("strides")? };
                if c["padding"].as_str() != Some("valid") {
                    return Err(err(format!("padding {:?}: only valid pooling is supported", c["padding"].as_str())));
                }
                if h < pool[0] || w < pool[1] {
                    return Err(err(format!("a {}x{} pool does not fit the {h}x{w} input", pool[0], pool[1])));
                }
                (Layer::MaxPool2D { name: name.clone(), pool, strides }, [(h - pool[0]) / strides[0] + 1, (w - pool[1]) / strides[1] + 1, ch])
            }
            "Flatten" => {
                let [h, w, ch] = input(shape)?;
                (Layer::Flatten { name: name.clone() }, [1, 1, h * w * ch])
            }
            "Dense" => {
                let [h, w, n] = input(shape)?;
                if h != 1 || w != 1 {
                    return Err(err(format!("a dense layer on a {h}x{w}x{n} input: flatten it first")));
                }
                let units = c["units"].as_u64().filter(|&u| (1..=1 << 16).contains(&u)).ok_or_else(|| err("`units`: expected 1 to 65536".into()))? as usize;
                let kernel = var(0, &[n, units])?;
                let bias = if c["use_bias"].as_bool() == Some(false) { vec![0.0; units] } else { var(1, &[units])? };
                let activation = activation(&[Activation::Linear, Activation::Relu, Activation::Softmax])?;
                (Layer::Dense { name: name.clone(), units, activation, kernel, bias }, [1, 1, units])
            }
            other => return Err(err(format!("the overlay's CNN path cannot run a `{other}` layer (it runs InputLayer, Rescaling, Conv2D, MaxPooling2D, Flatten, Dense, Dropout)"))),
        };
        model.layers.push(layer);
        model.shapes.push(out);
        shape = Some(out);
    }
    if model.layers.is_empty() {
        return Err(file_err("config.json: no layers the CNN path runs".into()));
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The digit classifier (`opu fetch digits`) where `OPU_DIGITS_KERAS` names it; `None` (the test says it
    /// skipped) elsewhere.
    fn digits() -> Option<PathBuf> {
        let p = std::env::var_os("OPU_DIGITS_KERAS").map(PathBuf::from);
        if p.is_none() {
            eprintln!("skipped: set OPU_DIGITS_KERAS to the digit classifier (`opu fetch digits`)");
        }
        p
    }

    /// A file in the temporary folder, removed when dropped.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Self {
            Scratch(std::env::temp_dir().join(format!("opu-keras-test-{}-{tag}.keras", std::process::id())))
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A copy of the `.keras` zip at `src` with `edit` applied to its members (name, bytes; `None` drops it).
    fn edited(src: &Path, tag: &str, edit: impl Fn(&str, Vec<u8>) -> Option<Vec<u8>>) -> Scratch {
        let mut zin = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
        let out = Scratch::new(tag);
        let mut zout = zip::ZipWriter::new(std::fs::File::create(out.path()).unwrap());
        for i in 0..zin.len() {
            let mut m = zin.by_index(i).unwrap();
            let name = m.name().unwrap().to_string();
            let mut bytes = Vec::new();
            m.read_to_end(&mut bytes).unwrap();
            if let Some(b) = edit(&name, bytes) {
                zout.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
                zout.write_all(&b).unwrap();
            }
        }
        zout.finish().unwrap();
        out
    }

    #[test]
    fn the_digit_classifier_reads_with_its_shapes() {
        let Some(path) = digits() else { return };
        let m = open(&path).unwrap();
        assert_eq!(m.input, [28, 28, 1]);
        let names: Vec<&str> = m
            .layers
            .iter()
            .map(|l| match l {
                Layer::Rescaling { .. } => "rescaling",
                Layer::Conv2D { .. } => "conv",
                Layer::MaxPool2D { .. } => "pool",
                Layer::Flatten { .. } => "flatten",
                Layer::Dense { .. } => "dense",
            })
            .collect();
        assert_eq!(names, ["conv", "pool", "conv", "pool", "flatten", "dense", "dense"], "Dropout dropped");
        assert_eq!(m.shapes, [[26, 26, 32], [13, 13, 32], [11, 11, 64], [5, 5, 64], [1, 1, 1600], [1, 1, 128], [1, 1, 10]]);
        let Layer::Conv2D { kernel, bias, activation, same, .. } = &m.layers[0] else { panic!() };
        assert_eq!((kernel.len(), bias.len(), *activation, *same), (3 * 3 * 32, 32, Activation::Relu, false));
        // the first kernel values, as h5py reads them (digitsclassifier 2.1.0)
        assert_eq!(&kernel[..3], &[-0.14863615, 0.13236469, 0.1431749]);
        let Layer::Dense { activation, kernel, .. } = &m.layers[6] else { panic!() };
        assert_eq!((*activation, kernel.len()), (Activation::Softmax, 1280));
    }

    /// The weights file cut at many lengths and corrupted at random bytes: an error or a model, never a
    /// panic (the fuzz target `keras` goes further, docs/fuzzing.md).
    #[test]
    fn cut_and_corrupted_weights_are_errors_not_panics() {
        let Some(path) = digits() else { return };
        let mut zin = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut config = Vec::new();
        zin.by_name("config.json").unwrap().read_to_end(&mut config).unwrap();
        let mut h5 = Vec::new();
        zin.by_name("model.weights.h5").unwrap().read_to_end(&mut h5).unwrap();
        let zipped = |h5: &[u8]| {
            let mut out = std::io::Cursor::new(Vec::new());
            let mut z = zip::ZipWriter::new(&mut out);
            let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            z.start_file("config.json", stored).unwrap();
            z.write_all(&config).unwrap();
            z.start_file("model.weights.h5", stored).unwrap();
            z.write_all(h5).unwrap();
            z.finish().unwrap();
            out.into_inner()
        };
        let name = Path::new("cut.keras");
        assert!(parse_bytes(&zipped(&h5), name).is_ok());
        // every length of the first 8 KiB (superblock, object headers, B-trees), then every 8191st
        let lengths = (0..8192).chain((8192..h5.len()).step_by(8191));
        let mut refused = 0;
        for len in lengths {
            refused += usize::from(parse_bytes(&zipped(&h5[..len]), name).is_err());
        }
        assert!(refused > 8000, "{refused}");
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // corruptions in the metadata-heavy head and anywhere
        for i in 0..1000 {
            let mut b = h5.clone();
            for _ in 0..1 + i % 4 {
                let at = if i % 2 == 0 { next() as usize % 16384 } else { next() as usize % b.len() };
                b[at] = next() as u8;
            }
            let _ = parse_bytes(&zipped(&b), name);
        }
    }

    #[test]
    fn malformed_keras_files_name_the_file_and_the_field() {
        let Some(path) = digits() else { return };
        let msg = |f: &Scratch| open(f.path()).unwrap_err().to_string();
        // no weights
        let f = edited(&path, "noweights", |n, b| (n != "model.weights.h5").then_some(b));
        let e = msg(&f);
        assert!(e.contains(&f.path().display().to_string()) && e.contains("has no `model.weights.h5`"), "{e}");
        // a truncated HDF5 file
        let f = edited(&path, "truncated", |n, b| Some(if n == "model.weights.h5" { b[..b.len() / 3].to_vec() } else { b }));
        let e = msg(&f);
        assert!(e.contains("model.weights.h5") && (e.contains("not a readable HDF5") || e.contains("layer `")), "{e}");
        // a layer the overlay cannot run
        let f = edited(&path, "layer", |n, b| Some(if n == "config.json" { String::from_utf8(b).unwrap().replacen("\"MaxPooling2D\"", "\"AveragePooling2D\"", 1).into_bytes() } else { b }));
        let e = msg(&f);
        assert!(e.contains("layer `max_pooling2d` (AveragePooling2D)") && e.contains("cannot run"), "{e}");
        // a shape that does not match the weights (more filters than the kernel has)
        let f = edited(&path, "shape", |n, b| Some(if n == "config.json" { String::from_utf8(b).unwrap().replacen("\"filters\": 32", "\"filters\": 16", 1).into_bytes() } else { b }));
        let e = msg(&f);
        assert!(e.contains("layer `conv2d` (Conv2D)") && e.contains("layers/conv2d/vars/0") && e.contains("expected [3, 3, 1, 16]"), "{e}");
        // an input shape out of range
        let f = edited(&path, "input", |n, b| Some(if n == "config.json" { String::from_utf8(b).unwrap().replacen("[null, 28, 28, 1]", "[null, 28, 28, 99999999999]", 1).into_bytes() } else { b }));
        let e = msg(&f);
        assert!(e.contains("layer `input_layer` (InputLayer)") && e.contains("batch_shape"), "{e}");
        // not a zip at all
        let f = Scratch::new("notzip");
        std::fs::write(f.path(), b"GGUF not a keras file").unwrap();
        assert!(msg(&f).contains("not a .keras file"));
    }
}

//! Quantization: every GGUF weight tensor mapped to an overlay format.
//!
//! Q4_1, Q4_0, Q8_0 and F16 matrices map to W4Min, W4, W8 and F16 with no loss: the same d, m and integers,
//! byte for byte. F32 / BF16 matrices are requantized to W8 with `opu_hw::numerics::weights::quantize_block`
//! (the same function the numerics define), and the loss is reported. Norm gains (F32 in GGUF) stay FP32,
//! exact. Other GGUF types (the K-quants) are refused with an error naming the tensor.

use crate::gguf::{GgmlType, Gguf, TensorInfo};
use crate::llama::ModelError;
use opu_hw::numerics::weights::{dequantize_row, quantize_block, WeightFormat};
use opu_hw::numerics::BLOCK;
use serde::{Deserialize, Serialize};

/// A matrix in an overlay weight format, ready to be placed in device memory.
pub struct QuantMatrix {
    pub name: String,
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
    /// Rows back to back, `format.row_bytes(cols)` each.
    pub bytes: Vec<u8>,
}

/// How one tensor was mapped.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TensorReport {
    pub name: String,
    pub gguf_type: String,
    pub overlay: String,
    pub exact: bool,
    /// Largest |w_overlay - w_gguf| over the tensor (0 when exact).
    pub max_abs_error: f64,
    /// ||w_overlay - w_gguf|| / ||w_gguf||.
    pub relative_l2_error: f64,
}

/// Maps a 2-D weight tensor to an overlay format.
pub fn matrix(g: &Gguf, t: &TensorInfo) -> Result<(QuantMatrix, TensorReport), ModelError> {
    let (rows, cols) = t.matrix_shape();
    let (rows, cols) = (rows as usize, cols as usize);
    let err = |what: String| ModelError::from(crate::gguf::GgufError::Tensor { path: g.path.clone(), name: t.name.clone(), what });
    if let Some(format) = t.ggml_type.weight_format() {
        let bytes = g.tensor_data(t)?.to_vec();
        let report = TensorReport {
            name: t.name.clone(),
            gguf_type: t.ggml_type.to_string(),
            overlay: format.name().into(),
            exact: true,
            max_abs_error: 0.0,
            relative_l2_error: 0.0,
        };
        return Ok((QuantMatrix { name: t.name.clone(), format, rows, cols, bytes }, report));
    }
    if !matches!(t.ggml_type, GgmlType::F32 | GgmlType::BF16) {
        return Err(err(format!("tensor type {} cannot be mapped to the overlay (supported: Q4_0, Q4_1, Q8_0, F16 exactly; F32, BF16 requantized to W8)", t.ggml_type)));
    }
    if cols % BLOCK != 0 {
        return Err(err(format!("row length {cols} is not a multiple of {BLOCK}: cannot requantize to W8")));
    }
    let w = g.dequantize(t)?;
    let format = WeightFormat::W8;
    let mut bytes = Vec::with_capacity(rows * format.row_bytes(cols).unwrap());
    for block in w.chunks_exact(BLOCK) {
        quantize_block(format, block.try_into().unwrap(), &mut bytes);
    }
    let mut back = Vec::with_capacity(w.len());
    dequantize_row(format, &bytes, &mut back);
    let (mut max_abs, mut num, mut den) = (0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in back.iter().zip(&w) {
        let d = f64::from(a) - f64::from(b);
        max_abs = max_abs.max(d.abs());
        num += d * d;
        den += f64::from(b) * f64::from(b);
    }
    let report = TensorReport {
        name: t.name.clone(),
        gguf_type: t.ggml_type.to_string(),
        overlay: format.name().into(),
        exact: false,
        max_abs_error: max_abs,
        relative_l2_error: (num / den.max(f64::MIN_POSITIVE)).sqrt(),
    };
    Ok((QuantMatrix { name: t.name.clone(), format, rows, cols, bytes }, report))
}

/// A 1-D tensor (norm gains) as FP32, exact for F32 / F16 / BF16.
pub fn gains(g: &Gguf, t: &TensorInfo) -> Result<Vec<f32>, ModelError> {
    match t.ggml_type {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Ok(g.dequantize(t)?),
        other => Err(ModelError::from(crate::gguf::GgufError::Tensor {
            path: g.path.clone(),
            name: t.name.clone(),
            what: format!("norm gains of type {other}: expected F32, F16 or BF16"),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{parse_bytes, GgufWriter};

    #[test]
    fn q4_1_maps_exactly_and_f32_is_requantized_with_its_loss() {
        let mut q41 = Vec::new();
        let x: [f32; 32] = std::array::from_fn(|i| (i as f32 * 0.3).sin() * 0.02);
        quantize_block(WeightFormat::W4Min, &x, &mut q41);
        quantize_block(WeightFormat::W4Min, &x, &mut q41);
        let f32s: Vec<u8> = (0..64).flat_map(|i| ((i as f32 * 0.7).cos() * 0.1).to_le_bytes()).collect();
        let mut w = GgufWriter::new();
        w.tensor("a", &[32, 2], 3, q41.clone()).tensor("b", &[32, 2], 0, f32s).tensor("k", &[256, 1], 14, vec![0; 210]);
        let g = parse_bytes(&w.to_bytes(), "q.gguf").unwrap();
        let (m, r) = matrix(&g, g.tensor("a").unwrap()).unwrap();
        assert_eq!((m.format, m.rows, m.cols, r.exact), (WeightFormat::W4Min, 2, 32, true));
        assert_eq!(m.bytes, q41);
        let (m, r) = matrix(&g, g.tensor("b").unwrap()).unwrap();
        assert_eq!((m.format, r.exact), (WeightFormat::W8, false));
        // W8: half a step of amax/127, plus the FP16 rounding of the scale (2^-11 relative) times amax.
        assert!(r.max_abs_error <= 0.1 / 127.0 * 0.5 + 0.1 * 2f64.powi(-11) && r.relative_l2_error < 0.01, "{r:?}");
        let e = matrix(&g, g.tensor("k").unwrap()).err().unwrap().to_string();
        assert!(e.contains("q.gguf") && e.contains("`k`") && e.contains("Q6K cannot be mapped"), "{e}");
    }
}

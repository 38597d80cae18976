//! Weight formats: how a matrix row is laid out in device memory and what integers and scales it holds.
//!
//! A row of `cols` weights (cols a multiple of 32 for the block formats) is stored as consecutive blocks, a
//! matrix as consecutive rows. The block layouts are GGUF's, byte for byte, so Q4_1 / Q4_0 / Q8_0 tensors map
//! to the overlay with no loss:
//!
//! | format  | GGUF | bytes/block | block content                                  | weight j           |
//! |---------|------|-------------|------------------------------------------------|--------------------|
//! | W4Min   | Q4_1 | 20          | d: f16, m: f16, qs: 16 bytes                   | q_j * d + m, q in 0..=15 |
//! | W4      | Q4_0 | 18          | d: f16, qs: 16 bytes                           | (q_j - 8) * d      |
//! | W8      | Q8_0 | 34          | d: f16, qs: 32 x i8                            | q_j * d            |
//! | F16     | F16  | 2 per weight| one f16 per weight, no blocks                  | w_j                |
//!
//! Nibbles: weight j (0..16) is `qs[j] & 15`, weight j + 16 is `qs[j] >> 4`.

use super::fp16::{f16_to_f32, f64_to_f16};
use super::BLOCK;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WeightFormat {
    /// 4-bit unsigned integers with an FP16 scale and an FP16 minimum per block (GGUF Q4_1).
    W4Min,
    /// 4-bit signed integers (stored offset by 8) with an FP16 scale per block (GGUF Q4_0).
    W4,
    /// 8-bit signed integers with an FP16 scale per block (GGUF Q8_0).
    W8,
    /// FP16 weights; the product with FP16 activations is exact (the attention datapath).
    F16,
}

impl WeightFormat {
    pub const ALL: [WeightFormat; 4] = [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8, WeightFormat::F16];

    /// The 3-bit code in `MATMUL.fmt`.
    pub fn code(self) -> u8 {
        match self {
            WeightFormat::W4Min => 0,
            WeightFormat::W4 => 1,
            WeightFormat::W8 => 2,
            WeightFormat::F16 => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.code() == code)
    }

    /// Assembler mnemonic.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::W4Min => "w4m",
            WeightFormat::W4 => "w4",
            WeightFormat::W8 => "w8",
            WeightFormat::F16 => "f16",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Elements per block (1 for F16).
    pub fn block_elems(self) -> usize {
        if self == WeightFormat::F16 {
            1
        } else {
            BLOCK
        }
    }

    /// Bytes per block (2 for F16: one element).
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::W4Min => 20,
            WeightFormat::W4 => 18,
            WeightFormat::W8 => 34,
            WeightFormat::F16 => 2,
        }
    }

    /// Bytes of a row of `cols` weights; `None` if `cols` is not a whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Option<usize> {
        cols.is_multiple_of(self.block_elems()).then(|| cols / self.block_elems() * self.block_bytes())
    }
}

/// One decoded weight block: the integers the PE multiplies and the FP16 scale and minimum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightBlock {
    pub q: [i32; BLOCK],
    /// FP16 bits of the scale `d`.
    pub d: u16,
    /// FP16 bits of the minimum `m` (W4Min only).
    pub m: Option<u16>,
}

fn f16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn nibbles(qs: &[u8], offset: i32) -> [i32; BLOCK] {
    let mut q = [0; BLOCK];
    for j in 0..16 {
        q[j] = i32::from(qs[j] & 15) - offset;
        q[j + 16] = i32::from(qs[j] >> 4) - offset;
    }
    q
}

/// Decodes one block of a block format. `bytes` must hold exactly `fmt.block_bytes()` bytes.
pub fn decode_block(fmt: WeightFormat, bytes: &[u8]) -> WeightBlock {
    assert_eq!(bytes.len(), fmt.block_bytes(), "block of {fmt:?}");
    match fmt {
        WeightFormat::W4Min => WeightBlock { q: nibbles(&bytes[4..20], 0), d: f16_at(bytes, 0), m: Some(f16_at(bytes, 2)) },
        WeightFormat::W4 => WeightBlock { q: nibbles(&bytes[2..18], 8), d: f16_at(bytes, 0), m: None },
        WeightFormat::W8 => {
            let mut q = [0; BLOCK];
            for (qj, &b) in q.iter_mut().zip(&bytes[2..34]) {
                *qj = i32::from(b as i8);
            }
            WeightBlock { q, d: f16_at(bytes, 0), m: None }
        }
        WeightFormat::F16 => panic!("F16 weights are not blocked"),
    }
}

/// Dequantizes one block to f32 as the reference path does: `q * d` (exact in f32) `+ m` (one rounding).
pub fn dequantize_block(fmt: WeightFormat, bytes: &[u8]) -> [f32; BLOCK] {
    let b = decode_block(fmt, bytes);
    let d = f16_to_f32(b.d);
    let m = b.m.map(f16_to_f32).unwrap_or(0.0);
    b.q.map(|q| q as f32 * d + m)
}

/// Dequantizes a whole row.
pub fn dequantize_row(fmt: WeightFormat, row: &[u8], out: &mut Vec<f32>) {
    if fmt == WeightFormat::F16 {
        out.extend(row.chunks_exact(2).map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))));
    } else {
        for blk in row.chunks_exact(fmt.block_bytes()) {
            out.extend_from_slice(&dequantize_block(fmt, blk));
        }
    }
}

fn put_nibbles(q: &[u8; BLOCK], out: &mut Vec<u8>) {
    out.extend((0..16).map(|j| q[j] | q[j + 16] << 4));
}

/// Quantizes 32 floats to one block (the rounding of llama.cpp's reference quantizers, so that a model
/// requantized here matches one quantized by GGUF tools). Used by the compiler for tensors that arrive in
/// another type; the compiler reports the loss.
pub fn quantize_block(fmt: WeightFormat, x: &[f32; BLOCK], out: &mut Vec<u8>) {
    match fmt {
        WeightFormat::W4Min => {
            let min = x.iter().copied().fold(f32::INFINITY, f32::min);
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let d = (max - min) / 15.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f64_to_f16(f64::from(d)).to_le_bytes());
            out.extend_from_slice(&f64_to_f16(f64::from(min)).to_le_bytes());
            let q = x.map(|v| ((v - min) * id + 0.5).clamp(0.0, 15.0) as u8);
            put_nibbles(&q, out);
        }
        WeightFormat::W4 => {
            // Q4_0: the element of largest magnitude maps to -8.
            let mx = x.iter().copied().fold(0.0f32, |a, v| if v.abs() > a.abs() { v } else { a });
            let d = mx / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f64_to_f16(f64::from(d)).to_le_bytes());
            let q = x.map(|v| (v * id + 8.5).clamp(0.0, 15.0) as u8);
            put_nibbles(&q, out);
        }
        WeightFormat::W8 => {
            let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f64_to_f16(f64::from(d)).to_le_bytes());
            out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
        }
        WeightFormat::F16 => {
            for &v in x {
                out.extend_from_slice(&super::fp16::f32_to_f16(v).to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for f in WeightFormat::ALL {
            assert_eq!(WeightFormat::from_code(f.code()), Some(f));
            assert_eq!(WeightFormat::from_name(f.name()), Some(f));
        }
        assert_eq!(WeightFormat::W4Min.row_bytes(576), Some(360));
        assert_eq!(WeightFormat::W8.row_bytes(576), Some(612));
        assert_eq!(WeightFormat::W4.row_bytes(33), None);
    }

    #[test]
    fn quantize_then_dequantize_is_close_and_idempotent() {
        let x: [f32; BLOCK] = std::array::from_fn(|i| ((i as f32) * 0.37).sin() * 0.05 - 0.01);
        for fmt in [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8] {
            let mut blk = Vec::new();
            quantize_block(fmt, &x, &mut blk);
            assert_eq!(blk.len(), fmt.block_bytes());
            let y = dequantize_block(fmt, &blk);
            let range = 0.1f32;
            let steps = if fmt == WeightFormat::W8 { 254.0 } else { 15.0 };
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() <= range / steps, "{fmt:?}: {a} vs {b}");
            }
            // Quantizing already-quantized weights gives back the same integers (no loss on re-entry).
            let mut again = Vec::new();
            quantize_block(fmt, &y, &mut again);
            assert_eq!(decode_block(fmt, &again).q, decode_block(fmt, &blk).q, "{fmt:?}");
        }
    }

    #[test]
    fn nibble_order_is_ggufs() {
        let mut blk = vec![0u8; 20];
        blk[0..2].copy_from_slice(&0x3C00u16.to_le_bytes()); // d = 1
        blk[4] = 0x21; // weight 0 = 1, weight 16 = 2
        let b = decode_block(WeightFormat::W4Min, &blk);
        assert_eq!((b.q[0], b.q[16], b.q[1]), (1, 2, 0));
        let mut blk = vec![0u8; 18];
        blk[2] = 0xF0;
        let b = decode_block(WeightFormat::W4, &blk);
        assert_eq!((b.q[0], b.q[16]), (-8, 7));
    }
}

//! 16-bit fixed point for CNNs (CNNA-style auto-scaled fixed point).
//!
//! Rule (docs/numerics.md, "CNN fixed point"): activations and weights are `i16` with a per-layer number of
//! fraction bits chosen by the compiler ([`frac_bits_for`]); products `x * w` are exact `i32`; a convolution
//! output sums its products and its bias (an `i32` already in the product's format, fraction bits
//! `fx + fw`) exactly in a 48-bit accumulator (the DSP48E2 cascade; at most 65536 products per output, so it
//! cannot overflow); the output is requantized by an arithmetic right shift with round-half-up and saturation
//! to `i16` ([`requantize`]), then ReLU if asked. Max-pooling takes the maximum of `i16` values.

/// Largest number of products summed into one output (kernel x kernel x input channels).
pub const MAX_PRODUCTS: usize = 1 << 16;

/// Every `conv` shape CSR (`conv_h conv_w conv_cin conv_cout conv_k conv_stride conv_pad`) is below this:
/// a larger value traps `BAD_OPERAND` (the CNN datapath's shape registers are 16 bits).
pub const CONV_DIM_LIMIT: u32 = 1 << 16;

/// `round_half_up(acc / 2^shift)` saturated to `i16`, then ReLU (max with 0) if `relu`.
#[inline]
pub fn requantize(acc: i64, shift: u32, relu: bool) -> i16 {
    debug_assert!(shift < 48);
    let r = if shift == 0 { acc } else { (acc + (1i64 << (shift - 1))) >> shift };
    let r = r.clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16;
    if relu {
        r.max(0)
    } else {
        r
    }
}

/// Rounds a real value to `i16` with `frac` fraction bits (nearest, ties to even), saturating.
pub fn to_fixed(x: f64, frac: u32) -> i16 {
    (x * f64::from(1u32 << frac)).round_ties_even().clamp(f64::from(i16::MIN), f64::from(i16::MAX)) as i16
}

/// Same, for an `i32` bias with `frac` fraction bits.
pub fn to_fixed_i32(x: f64, frac: u32) -> i32 {
    (x * 2f64.powi(frac as i32)).round_ties_even().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
}

/// The real value of a fixed-point number.
pub fn from_fixed(v: i16, frac: u32) -> f64 {
    f64::from(v) / f64::from(1u32 << frac)
}

/// The most fraction bits (0..=15) with which every value up to `max_abs` in magnitude fits `i16`:
/// CNNA's per-layer binary-point placement.
pub fn frac_bits_for(max_abs: f64) -> u32 {
    (0..=15u32).rev().find(|&f| max_abs * f64::from(1u32 << f) <= f64::from(i16::MAX)).unwrap_or(0)
}

/// Shape of a 2-D convolution over an HWC tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    pub height: usize,
    pub width: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvShape {
    pub fn out_height(&self) -> usize {
        (self.height + 2 * self.pad - self.kernel) / self.stride + 1
    }
    pub fn out_width(&self) -> usize {
        (self.width + 2 * self.pad - self.kernel) / self.stride + 1
    }
}

/// Convolution: `input` HWC, `weights` `[out][ky][kx][in]`, `bias` per output channel (product format),
/// output HWC `i16` after [`requantize`]. Padding reads zeros.
///
/// Each output is its bias plus every product of its window, summed exactly (the order does not matter);
/// the window's kernel row `ky` is one run of `kernel x in` values of the (zero-padded) input and of the
/// kernel, so each row is one exact dot product ([`dot_split`]).
pub fn conv2d(input: &[i16], weights: &[i16], bias: &[i32], s: &ConvShape, shift: u32, relu: bool) -> Vec<i16> {
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    conv2d_on(input, weights, bias, s, shift, relu, avx2)
}

/// [`conv2d`], with AVX2 (which the caller has checked the CPU has) or without.
fn conv2d_on(input: &[i16], weights: &[i16], bias: &[i32], s: &ConvShape, shift: u32, relu: bool, avx2: bool) -> Vec<i16> {
    assert_eq!(input.len(), s.height * s.width * s.in_channels);
    assert_eq!(weights.len(), s.out_channels * s.kernel * s.kernel * s.in_channels);
    assert_eq!(bias.len(), s.out_channels);
    assert!(s.kernel * s.kernel * s.in_channels <= MAX_PRODUCTS);
    let (cin, pw) = (s.in_channels, s.width + 2 * s.pad);
    let padded: std::borrow::Cow<[i16]> = if s.pad == 0 {
        std::borrow::Cow::Borrowed(input)
    } else {
        let mut p = vec![0i16; (s.height + 2 * s.pad) * pw * cin];
        for (y, row) in input.chunks_exact(s.width * cin).enumerate() {
            p[((y + s.pad) * pw + s.pad) * cin..][..row.len()].copy_from_slice(row);
        }
        std::borrow::Cow::Owned(p)
    };
    // every weight as `256 hi + lo` (`hi` = w >> 8 in -128..=127, `lo` = w & 255), once for all the outputs
    let (hi, lo): (Vec<i16>, Vec<i16>) = weights.iter().map(|&w| (w >> 8, w & 0xff)).unzip();
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: the caller checked that AVX2 is present.
        return unsafe { conv_rows_avx2(&padded, &hi, &lo, bias, s, shift, relu) };
    }
    let _ = avx2;
    conv_rows(&padded, &hi, &lo, bias, s, shift, relu)
}

/// [`conv_rows`] compiled for AVX2 (the same integer operations, so the same results, sixteen `i16` wide).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn conv_rows_avx2(padded: &[i16], hi: &[i16], lo: &[i16], bias: &[i32], s: &ConvShape, shift: u32, relu: bool) -> Vec<i16> {
    conv_rows(padded, hi, lo, bias, s, shift, relu)
}

/// The outputs of [`conv2d`] from its zero-padded input and its split weights.
#[inline(always)]
fn conv_rows(padded: &[i16], hi: &[i16], lo: &[i16], bias: &[i32], s: &ConvShape, shift: u32, relu: bool) -> Vec<i16> {
    let (oh, ow) = (s.out_height(), s.out_width());
    let (k, cin, pw) = (s.kernel, s.in_channels, s.width + 2 * s.pad);
    let (run, taps) = (k * cin, k * k * cin);
    let mut out = Vec::with_capacity(oh * ow * s.out_channels);
    for oy in 0..oh {
        for ox in 0..ow {
            for (o, &b) in bias.iter().enumerate() {
                let mut acc = i64::from(b);
                for ky in 0..k {
                    let x = &padded[((oy * s.stride + ky) * pw + ox * s.stride) * cin..][..run];
                    let at = o * taps + ky * run;
                    acc += dot_split(x, &hi[at..][..run], &lo[at..][..run]);
                }
                out.push(requantize(acc, shift, relu));
            }
        }
    }
    out
}

/// The exact `sum x[i] (256 hi[i] + lo[i])` for `hi` in -128..=127 and `lo` in 0..=255: the two sums run
/// in `i32` over chunks of [`SPLIT_CHUNK`] terms, which cannot overflow (|x hi| <= 2^22, |x lo| < 2^23, times
/// 255 < 2^31), and are added in `i64`. (Products of whole `i16`s could overflow an `i32` sum of two; this way
/// the sums vectorize eight `i32` lanes wide instead of four `i64` ones.)
#[inline(always)]
fn dot_split(x: &[i16], hi: &[i16], lo: &[i16]) -> i64 {
    let mut acc = 0i64;
    for ((x, hi), lo) in x.chunks(SPLIT_CHUNK).zip(hi.chunks(SPLIT_CHUNK)).zip(lo.chunks(SPLIT_CHUNK)) {
        let (mut sh, mut sl) = (0i32, 0i32);
        for ((&x, &h), &l) in x.iter().zip(hi).zip(lo) {
            sh += i32::from(x) * i32::from(h);
            sl += i32::from(x) * i32::from(l);
        }
        acc += 256 * i64::from(sh) + i64::from(sl);
    }
    acc
}

/// Terms per `i32` partial sum of [`dot_split`].
const SPLIT_CHUNK: usize = 255;

/// Max-pooling over `kernel x kernel` windows with `stride`, no padding, HWC.
pub fn maxpool(input: &[i16], height: usize, width: usize, channels: usize, kernel: usize, stride: usize) -> Vec<i16> {
    assert_eq!(input.len(), height * width * channels);
    let oh = (height - kernel) / stride + 1;
    let ow = (width - kernel) / stride + 1;
    let mut out = Vec::with_capacity(oh * ow * channels);
    for oy in 0..oh {
        for ox in 0..ow {
            for c in 0..channels {
                let mut m = i16::MIN;
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        m = m.max(input[((oy * stride + ky) * width + ox * stride + kx) * channels + c]);
                    }
                }
                out.push(m);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantize_rounds_half_up_and_saturates() {
        assert_eq!(requantize(5, 1, false), 3); // 2.5 -> 3
        assert_eq!(requantize(-5, 1, false), -2); // -2.5 -> -2 (half up)
        assert_eq!(requantize(-7, 1, false), -3); // -3.5 -> -3
        assert_eq!(requantize(1 << 40, 4, false), i16::MAX);
        assert_eq!(requantize(-(1 << 40), 4, false), i16::MIN);
        assert_eq!(requantize(-100, 2, true), 0);
        assert_eq!(requantize(123, 0, false), 123);
    }

    #[test]
    fn frac_bits_fit() {
        assert_eq!(frac_bits_for(1.0), 14); // Q2.14: 1.0 * 2^14 fits, 2^15 does not
        assert_eq!(frac_bits_for(0.9), 15);
        assert_eq!(frac_bits_for(3.5), 13);
        assert_eq!(frac_bits_for(1e6), 0);
        assert_eq!(to_fixed(0.5, 14), 8192);
        assert_eq!(to_fixed(100.0, 14), i16::MAX);
    }

    /// `conv2d` against the convolution written out term by term (every tap checked against the padding),
    /// on random shapes, strides, paddings and values, the extremes of `i16` included.
    #[test]
    fn conv_equals_the_sum_written_out() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..220 {
            let k = 1 + next() as usize % 4;
            // the last cases: kernel rows of hundreds of values, past `dot_split`'s chunks of 255
            let long = case >= 200;
            let s = ConvShape {
                height: k + next() as usize % 6,
                width: k + next() as usize % 6,
                in_channels: if long { 200 + next() as usize % 900 } else { 1 + next() as usize % 5 },
                out_channels: 1 + next() as usize % 4,
                kernel: k,
                stride: 1 + next() as usize % 3,
                pad: next() as usize % k.min(3),
            };
            // (long cases mostly at the extremes: the partial sums' worst case)
            let value = |next: &mut dyn FnMut() -> u64| match next() % if long { 3 } else { 8 } {
                0 => i16::MIN,
                1 => i16::MAX,
                _ => next() as i16,
            };
            let x: Vec<i16> = (0..s.height * s.width * s.in_channels).map(|_| value(&mut next)).collect();
            let w: Vec<i16> = (0..s.out_channels * k * k * s.in_channels).map(|_| value(&mut next)).collect();
            let b: Vec<i32> = (0..s.out_channels).map(|_| next() as i32 >> (next() % 16)).collect();
            let (shift, relu) = ((next() % 40) as u32, case % 2 == 0);
            let got = conv2d(&x, &w, &b, &s, shift, relu);
            // the portable loops too (`conv2d` takes the AVX2 build where the CPU has it)
            assert_eq!(conv2d_on(&x, &w, &b, &s, shift, relu, false), got, "case {case}: {s:?}");
            let mut want = Vec::new();
            for oy in 0..s.out_height() {
                for ox in 0..s.out_width() {
                    for oc in 0..s.out_channels {
                        let mut acc = i64::from(b[oc]);
                        for ky in 0..k {
                            for kx in 0..k {
                                let (iy, ix) = ((oy * s.stride + ky) as i64 - s.pad as i64, (ox * s.stride + kx) as i64 - s.pad as i64);
                                if iy < 0 || ix < 0 || iy >= s.height as i64 || ix >= s.width as i64 {
                                    continue;
                                }
                                for c in 0..s.in_channels {
                                    let xi = (iy as usize * s.width + ix as usize) * s.in_channels + c;
                                    acc += i64::from(x[xi]) * i64::from(w[((oc * k + ky) * k + kx) * s.in_channels + c]);
                                }
                            }
                        }
                        want.push(requantize(acc, shift, relu));
                    }
                }
            }
            assert_eq!(got, want, "case {case}: {s:?}");
        }
    }

    /// The largest sums: every product at its extreme, over kernel rows far past `dot_split`'s chunks.
    #[test]
    fn conv_sums_of_extremes_are_exact() {
        let n = 60_000usize;
        let s = ConvShape { height: 1, width: 1, in_channels: n, out_channels: 1, kernel: 1, stride: 1, pad: 0 };
        for (x, w) in [(i16::MIN, i16::MIN), (i16::MIN, i16::MAX), (i16::MAX, i16::MAX), (i16::MAX, i16::MIN)] {
            let want = n as i64 * i64::from(x) * i64::from(w);
            // the shift that brings the sum into range: |want| < 2^46, so a shift of 31 leaves at most 2^15
            let got = conv2d(&vec![x; n], &vec![w; n], &[0], &s, 31, false)[0];
            assert_eq!(got, requantize(want, 31, false), "x {x}, w {w}");
            assert_eq!(conv2d_on(&vec![x; n], &vec![w; n], &[0], &s, 31, false, false)[0], got);
            assert_ne!(got, 0);
        }
    }

    #[test]
    fn conv_matches_float_and_pool_picks_max() {
        // 4x4x2 input, 3x3 kernel, 3 output channels, pad 1: compare with the exact real computation.
        let s = ConvShape { height: 4, width: 4, in_channels: 2, out_channels: 3, kernel: 3, stride: 1, pad: 1 };
        let (fx, fw, fo) = (12u32, 14u32, 11u32);
        let xf: Vec<f64> = (0..32).map(|i| ((i as f64) * 0.7).sin()).collect();
        let wf: Vec<f64> = (0..54).map(|i| ((i as f64) * 0.3).cos() * 0.5).collect();
        let bf = [0.1, -0.2, 0.05];
        let x: Vec<i16> = xf.iter().map(|&v| to_fixed(v, fx)).collect();
        let w: Vec<i16> = wf.iter().map(|&v| to_fixed(v, fw)).collect();
        let b: Vec<i32> = bf.iter().map(|&v| to_fixed_i32(v, fx + fw)).collect();
        let y = conv2d(&x, &w, &b, &s, fx + fw - fo, false);
        assert_eq!(y.len(), 4 * 4 * 3);
        // Reference with the quantized inputs in f64: the only error is the final rounding (half an ulp).
        let (oy, ox, oc) = (1, 2, 1);
        let mut want = f64::from(b[oc]) / 2f64.powi((fx + fw) as i32);
        for ky in 0..3 {
            for kx in 0..3 {
                let (iy, ix) = (oy + ky, ox + kx);
                if iy < 1 || ix < 1 || iy > 4 || ix > 4 {
                    continue;
                }
                for c in 0..2 {
                    want += from_fixed(x[((iy - 1) * 4 + ix - 1) * 2 + c], fx) * from_fixed(w[((oc * 3 + ky) * 3 + kx) * 2 + c], fw);
                }
            }
        }
        let got = from_fixed(y[(oy * 4 + ox) * 3 + oc], fo);
        assert!((got - want).abs() <= 0.5 / f64::from(1u32 << fo) + 1e-12, "{got} vs {want}");
        let p = maxpool(&y, 4, 4, 3, 2, 2);
        assert_eq!(p.len(), 2 * 2 * 3);
        assert_eq!(p[0], [y[0], y[3], y[12], y[15]].into_iter().max().unwrap());
    }
}

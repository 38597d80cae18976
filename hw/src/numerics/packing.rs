//! Packed multiplies on the DSP48E2's 27 x 18 multiplier, and the logic that separates the products again.
//!
//! Rule (docs/numerics.md, "Packed multiplies (DSP48E2)"). A DSP48E2 multiplies a 27-bit signed operand
//! (port A or the pre-adder output AD) by an 18-bit signed operand (port B) into a 45-bit signed product M,
//! which the 48-bit P register can accumulate (`P <- P + M`, two's complement, wrapping at 48 bits). Packing
//! puts `n` small operands `w_0 .. w_{n-1}` at bit offsets `0, S, 2S, ..` of port A and the common operand
//! `x` in port B, so that
//!
//! `P = F_0 + 2^S F_1 + 2^2S F_2 + ..`, with field `F_i = x * w_i` (or, accumulated, `F_i = sum_j x_j w_ij`).
//!
//! Extraction ([`unpack_fields`]) walks up from field 0. With `t` *side bits* per field, it needs
//! `s_i = F_i mod 2^t` for each field above the lowest (`t = 0`: nothing, the classic scheme; `t > 0`: the
//! low `t` bits of `x * w_i`, which depend only on the low `t` bits of `x` and `w_i`, a tiny truncated
//! multiplier in LUTs, [`lut_mul_lo`]; accumulated, a `t`-bit side accumulator summing those mod `2^t`).
//! With `R_0 = P` (48 bits, sign-extended):
//!
//! ```text
//! F_i     = sext_{S+t}((R_i - (s_{i+1} << S)) mod 2^(S+t))
//!           // R_i[S-1:0] as is; R_i[S+t-1:S] - s_{i+1} (t-bit subtract, borrow out dropped); sign = bit S+t-1
//! R_{i+1} = (R_i - F_i) >> S  =  R_i[47:S] - H_i
//!           // H_i = F_i >> S, the correction term: the borrow F_i left in the field above
//!           // (t = 0: H_i = -F_i[S-1], i.e. add the lower field's sign bit)
//! F_{n-1} = sext_{48-S(n-1)}(R_{n-1})
//!           // the top field is what is left
//! ```
//!
//! This is exact if and only if every field but the top one lies in `[-2^(S+t-1), 2^(S+t-1))` (then `F_i` is
//! determined by its low `S + t` bits, and `P mod 2^(S+t) = (F_i + 2^S s_{i+1}) mod 2^(S+t)` because `t <= S`),
//! and the top field lies in `48 - S(n-1)` bits signed. With `t = 0` this is the textbook correction
//! (lower field = sign-extended low `S` bits, upper field = upper bits plus the lower field's sign bit).
//! With `t > 0` the fields may *overlap* by up to `t` bits (overpacking): the `t` bits of `F_i` that lie
//! above bit `S` are mixed with the low `t` bits of `F_{i+1}` in P, and the side bits take `F_{i+1}` out.
//!
//! Schemes (port A = packed operands at the given bit offsets, port B = common operand; `u`: unsigned weights
//! 0..=15, W4Min / Q4_1; `s`: signed weights -8..=7, W4 / Q4_0):
//!
//! | scheme        | products          | A offsets  | B     | S  | t: 1 product / block | P bits | depth     |
//! |---------------|-------------------|------------|-------|----|----------------------|--------|-----------|
//! | `int8x2`      | 2 x i8 by i8      | 18, 0      | i8    | 18 | 0 / 3                | 34     | 7, 63     |
//! | `w4x2u/s`     | 2 x W4 by i16     | 22, 0      | i16   | 22 | 0 / 3                | 42     | 4/7, 34/63|
//! | `w4x3u/s`     | 3 x W4 by i12     | 22, 11, 0  | i12   | 11 | 5 / 10               | 38     | 1, 34/63  |
//! | `w4x3u/s_a16` | 3 x W4 by i16     | 22, 11, 0  | i16   | 11 | 9 / 11               | 42     | 1, 4/7    |
//!
//! Depth: the most products the P register can sum per field before one extraction ([`max_acc_depth`]), first
//! with the single-product side bits, then with the block side bits (u/s). Every scheme is tested
//! exhaustively for single products; with 16-bit activations a block of 32 does not fit w4x3.

use super::BLOCK;

/// Width of the multiplier's A/AD input, signed.
pub const DSP_A_BITS: u32 = 27;
/// Width of the multiplier's B input, signed.
pub const DSP_B_BITS: u32 = 18;
/// Width of the multiplier output M, signed.
pub const DSP_M_BITS: u32 = 45;
/// Width of the P register (accumulator), two's complement, wrapping.
pub const DSP_P_BITS: u32 = 48;

// ---------------------------------------------------------------------------------------------------------
// Bit helpers and the DSP model
// ---------------------------------------------------------------------------------------------------------

/// `v` lies in `bits` bits signed: `-2^(bits-1) <= v < 2^(bits-1)`. `bits` in 1..=63.
#[inline]
pub const fn fits_signed(v: i64, bits: u32) -> bool {
    let h = 1i64 << (bits - 1);
    -h <= v && v < h
}

/// Sign-extends the low `bits` bits of `v` (bit `bits - 1` is the sign). `bits` in 1..=64.
#[inline]
pub const fn sext(v: i64, bits: u32) -> i64 {
    let s = 64 - bits;
    (v << s) >> s
}

/// The low `bits` bits of `v`, as a value in `0 .. 2^bits` (`v mod 2^bits`). `bits` in 0..=62.
#[inline]
pub const fn lo_bits(v: i64, bits: u32) -> i64 {
    v & ((1i64 << bits) - 1)
}

/// The DSP48E2 multiplier: the plain signed product of A/AD (27 bits signed) and B (18 bits signed), a 45-bit
/// signed value. Panics if an operand does not fit its port.
#[inline]
pub fn dsp_mul27x18(a: i64, b: i64) -> i64 {
    assert!(fits_signed(a, DSP_A_BITS), "port A/AD operand {a} does not fit 27 bits signed");
    assert!(fits_signed(b, DSP_B_BITS), "port B operand {b} does not fit 18 bits signed");
    let m = a * b;
    debug_assert!(fits_signed(m, DSP_M_BITS));
    m
}

/// The P register's accumulate step: `P <- P + M` in 48-bit two's complement (wraps; no saturation).
/// `p` is a 48-bit value (sign-extended in the i64), `m` a 45-bit product.
#[inline]
pub fn dsp_acc48(p: i64, m: i64) -> i64 {
    debug_assert!(fits_signed(p, DSP_P_BITS) && fits_signed(m, DSP_M_BITS));
    sext(p + m, DSP_P_BITS)
}

/// The fabric's truncated multiplier: the low `t` bits of `x * w`, from only the low `t` bits of `x` and of
/// `w` (two's complement; a signed 4-bit `w` is sign-extended to `t` bits, i.e. `w mod 2^t`). Exact because
/// `x*w mod 2^t` depends only on `x mod 2^t` and `w mod 2^t`. Cost: bit k of the result is a function of
/// `x[k:0]` and `w[min(k,3):0]` (a `t` x 4 multiplier keeping `t` bits). `t` in 0..=31.
#[inline]
pub const fn lut_mul_lo(x: i64, w: i64, t: u32) -> i64 {
    lo_bits(lo_bits(x, t) * lo_bits(w, t), t)
}

/// Separates `N` fields packed at stride `stride` in the 48-bit value `p` (see the module rule).
///
/// `side[i]` (for `i >= 1`) is `F_i mod 2^t`, the side bits of field `i`; `side[0]` is not used (the hardware
/// does not compute it). With `t = 0` pass zeros. Exact iff fields `0..N-1` lie in `S + t` bits signed and the
/// top field lies in `48 - S(N-1)` bits signed; the result is unspecified (wrong) otherwise.
#[inline]
pub fn unpack_fields<const N: usize>(p: i64, stride: u32, t: u32, side: [i64; N]) -> [i64; N] {
    debug_assert!(N >= 1 && t <= stride && stride * (N as u32 - 1) < DSP_P_BITS);
    let mut out = [0i64; N];
    // R_0: the 48-bit P register (bits 47:0).
    let mut r = sext(p, DSP_P_BITS);
    for i in 0..N - 1 {
        debug_assert!((0..1i64 << t).contains(&side[i + 1]));
        // F_i: bits [S-1:0] of R_i as they are, bits [S+t-1:S] minus the side bits of F_{i+1} (a t-bit
        // subtract, no borrow in from below, borrow out dropped), then sign-extended from bit S+t-1.
        let f = sext(r - (side[i + 1] << stride), stride + t);
        out[i] = f;
        // R_{i+1} = R_i[47:S] - H_i with H_i = F_i >> S: undoes the borrow (or carry) F_i left in the field
        // above. (R_i - F_i is a multiple of 2^S: both have the same low S bits.)
        r = (r - f) >> stride;
    }
    // The top field: what is left of the 48 bits.
    out[N - 1] = sext(r, DSP_P_BITS - stride * (N as u32 - 1));
    out
}

/// Range `[min, max]` of `x * w` over `x` in `[xmin, xmax]`, `w` in `[wmin, wmax]`.
pub const fn product_range(xmin: i64, xmax: i64, wmin: i64, wmax: i64) -> (i64, i64) {
    let c = [xmin * wmin, xmin * wmax, xmax * wmin, xmax * wmax];
    let (mut lo, mut hi, mut k) = (c[0], c[0], 1);
    while k < 4 {
        if c[k] < lo {
            lo = c[k];
        }
        if c[k] > hi {
            hi = c[k];
        }
        k += 1;
    }
    (lo, hi)
}

/// How many `n` of `[lo, hi]` products (lo < 0 < hi) a window of `bits` bits signed holds: `n*lo >= -2^(bits-1)`
/// and `n*hi <= 2^(bits-1) - 1`.
const fn window_depth(lo: i64, hi: i64, bits: u32) -> i64 {
    let h = 1i64 << (bits - 1);
    let a = (h - 1) / hi;
    let b = h / -lo;
    if a < b {
        a
    } else {
        b
    }
}

/// The largest accumulation depth `n` (products summed per field in P before one extraction) for which
/// [`unpack_fields`] is exact for all inputs, each product in `[lo, hi]` (lo < 0 < hi): the lower fields must
/// stay within `stride + t` bits signed, the top field within `48 - stride*(fields-1)` bits signed. Tight: the
/// sum of `n + 1` copies of the worst product breaks it.
pub const fn max_acc_depth(lo: i64, hi: i64, stride: u32, t: u32, fields: u32) -> usize {
    let low = window_depth(lo, hi, stride + t);
    let top = window_depth(lo, hi, DSP_P_BITS - stride * (fields - 1));
    (if low < top { low } else { top }) as usize
}

/// Side bits for fields `1..N` of one multiply: `lut_mul_lo(x, w_i, t)`; entry 0 is 0 (not computed).
#[inline]
pub fn lut_side<const N: usize>(w: [i64; N], x: i64, t: u32) -> [i64; N] {
    let mut s = w.map(|wi| lut_mul_lo(x, wi, t));
    s[0] = 0;
    s
}

/// One DSP48E2 in accumulate mode plus its fabric side accumulators.
///
/// Each [`mac`](Self::mac) is one cycle: `P <- P + A*B` (48-bit wrap) and, for each field `i >= 1`,
/// `side_i <- (side_i + lut_mul_lo(x, w_i, t)) mod 2^t` (a `t`-bit adder fed by a `t` x 4 truncated
/// multiplier). [`fields`](Self::fields) extracts the `N` sums once (per block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedAcc<const N: usize> {
    /// Field stride `S`, bits.
    pub stride: u32,
    /// Side bits `t` per field.
    pub t: u32,
    /// The P register, bits 47:0 (sign-extended into the i64).
    pub p: i64,
    /// Side accumulators, each in `0 .. 2^t`; entry 0 unused (0).
    pub side: [i64; N],
}

impl<const N: usize> PackedAcc<N> {
    /// An empty accumulator (P = 0, side accumulators 0) for fields at `stride` with `t` side bits.
    pub fn new(stride: u32, t: u32) -> Self {
        assert!(N >= 1 && t <= stride && stride * (N as u32 - 1) < DSP_P_BITS);
        PackedAcc { stride, t, p: 0, side: [0; N] }
    }

    /// One cycle with port operands `port_a`, `port_b` (as packed for weights `w` and activation `x`).
    #[inline]
    pub fn mac(&mut self, port_a: i64, port_b: i64, w: [i64; N], x: i64) {
        self.p = dsp_acc48(self.p, dsp_mul27x18(port_a, port_b));
        let t = self.t;
        for (s, &wi) in self.side.iter_mut().zip(&w).skip(1) {
            *s = lo_bits(*s + lut_mul_lo(x, wi, t), t);
        }
    }

    /// The `N` field sums (exact if the depth limit [`max_acc_depth`] was respected).
    #[inline]
    pub fn fields(&self) -> [i64; N] {
        unpack_fields(self.p, self.stride, self.t, self.side)
    }
}

/// Builds port A from operands at offsets `0, S, 2S, ..`: the arithmetic sum `sum w_i 2^(iS)`, so a negative
/// operand borrows from the fields above it (for non-negative operands this is a plain concatenation).
#[inline]
fn pack_port_a<const N: usize>(w: [i64; N], stride: u32) -> i64 {
    let mut a = 0i64;
    for (i, &wi) in w.iter().enumerate() {
        a += wi << (stride * i as u32);
    }
    assert!(fits_signed(a, DSP_A_BITS));
    a
}

#[inline]
fn to_i32<const N: usize>(f: [i64; N]) -> [i32; N] {
    f.map(|v| v as i32)
}

// ---------------------------------------------------------------------------------------------------------
// 1. int8x2: two INT8 products with a shared INT8 operand (Xilinx WP486)
// ---------------------------------------------------------------------------------------------------------

/// Stride of [`pack_int8x2`]: `a` sits at bit 18 of port A.
pub const INT8X2_STRIDE: u32 = 18;
/// Side bits for accumulating a block: the low 3 bits of each `a*c`.
pub const INT8X2_ACC_T: u32 = 3;
/// Range of one INT8 x INT8 product: [-16256, 16384].
pub const INT8_PRODUCT_RANGE: (i64, i64) = product_range(-128, 127, -128, 127);
/// Accumulation depth without side bits (classic extraction): 7.
pub const INT8X2_MAX_DEPTH_PLAIN: usize =
    max_acc_depth(INT8_PRODUCT_RANGE.0, INT8_PRODUCT_RANGE.1, INT8X2_STRIDE, 0, 2);
/// Accumulation depth of [`int8x2_accumulate`] (3 side bits): 63.
pub const INT8X2_MAX_DEPTH: usize =
    max_acc_depth(INT8_PRODUCT_RANGE.0, INT8_PRODUCT_RANGE.1, INT8X2_STRIDE, INT8X2_ACC_T, 2);

/// Port operands `(A/AD, B)` for `a*c` and `b*c`: `AD = (a << 18) + b` (WP486: A = a << 18, D = b, the
/// pre-adder sums them, so b's sign extends through a's field: `AD[26:18] = a - (b < 0)`, `AD[17:0] = b[17:0]`),
/// `B = c`.
#[inline]
pub fn pack_int8x2(a: i8, b: i8, c: i8) -> (i64, i64) {
    let ad = (i64::from(a) << INT8X2_STRIDE) + i64::from(b);
    debug_assert!(fits_signed(ad, DSP_A_BITS));
    (ad, i64::from(c))
}

/// `[a*c, b*c]` from one product `P = a*c*2^18 + b*c`: `b*c = sext(P[17:0])`, `a*c = P[47:18] + P[17]`
/// (only `P[33:0]` matter).
#[inline]
pub fn unpack_int8x2(p: i64) -> [i32; 2] {
    let f = unpack_fields(p, INT8X2_STRIDE, 0, [0; 2]);
    [f[1] as i32, f[0] as i32]
}

/// `[a*c, b*c]` through the packed DSP multiply.
#[inline]
pub fn int8x2_products(a: i8, b: i8, c: i8) -> [i32; 2] {
    let (pa, pb) = pack_int8x2(a, b, c);
    unpack_int8x2(dsp_mul27x18(pa, pb))
}

/// `[sum a_j c_j, sum b_j c_j]` with one P-register accumulation and one extraction: the P register sums the
/// packed products, a 3-bit side accumulator sums `a_j c_j mod 8` (`lut_mul_lo(c, a, 3)`). At most
/// [`INT8X2_MAX_DEPTH`] terms. (Without side bits, at most [`INT8X2_MAX_DEPTH_PLAIN`].)
pub fn int8x2_accumulate(terms: &[(i8, i8, i8)]) -> [i64; 2] {
    assert!(terms.len() <= INT8X2_MAX_DEPTH);
    let mut acc = PackedAcc::<2>::new(INT8X2_STRIDE, INT8X2_ACC_T);
    for &(a, b, c) in terms {
        let (pa, pb) = pack_int8x2(a, b, c);
        acc.mac(pa, pb, [i64::from(b), i64::from(a)], i64::from(c));
    }
    let f = acc.fields();
    [f[1], f[0]]
}

// ---------------------------------------------------------------------------------------------------------
// 2. w4x2: two 4-bit weights by a 16-bit activation mantissa, no overlap
// ---------------------------------------------------------------------------------------------------------

/// Stride of the w4x2 schemes: w1 at bit 22 of port A, the largest offset that keeps a 4-bit weight (either
/// signedness) within 27 bits signed. A product needs 20 bits signed, so the fields have 2 spare bits.
pub const W4X2_STRIDE: u32 = 22;
/// Side bits for accumulating a block: the low 3 bits of each `x*w1`.
pub const W4X2_ACC_T: u32 = 3;
/// Range of an unsigned-W4 x i16 product: [-491520, 491505] (20 bits signed).
pub const W4U_A16_PRODUCT_RANGE: (i64, i64) = product_range(-32768, 32767, 0, 15);
/// Range of a signed-W4 x i16 product: [-262136, 262144] (20 bits signed: 262144 = -32768 * -8).
pub const W4S_A16_PRODUCT_RANGE: (i64, i64) = product_range(-32768, 32767, -8, 7);
/// w4x2u depth without side bits: 4.
pub const W4X2U_MAX_DEPTH_PLAIN: usize =
    max_acc_depth(W4U_A16_PRODUCT_RANGE.0, W4U_A16_PRODUCT_RANGE.1, W4X2_STRIDE, 0, 2);
/// w4x2s depth without side bits: 7.
pub const W4X2S_MAX_DEPTH_PLAIN: usize =
    max_acc_depth(W4S_A16_PRODUCT_RANGE.0, W4S_A16_PRODUCT_RANGE.1, W4X2_STRIDE, 0, 2);
/// Depth of [`w4x2u_accumulate`] (3 side bits): 34.
pub const W4X2U_MAX_DEPTH: usize =
    max_acc_depth(W4U_A16_PRODUCT_RANGE.0, W4U_A16_PRODUCT_RANGE.1, W4X2_STRIDE, W4X2_ACC_T, 2);
/// Depth of [`w4x2s_accumulate`] (3 side bits): 63.
pub const W4X2S_MAX_DEPTH: usize =
    max_acc_depth(W4S_A16_PRODUCT_RANGE.0, W4S_A16_PRODUCT_RANGE.1, W4X2_STRIDE, W4X2_ACC_T, 2);

/// Port operands `(A, B)` for unsigned weights `w` in 0..=15 (W4Min / Q4_1) and activation `x` (full i16):
/// `A = w1 << 22 | w0` (`A[25:22] = w1`, `A[3:0] = w0`, other bits 0: a plain concatenation), `B = sext18(x)`.
#[inline]
pub fn pack_w4x2u(w: [u8; 2], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| v <= 15), "unsigned W4 weight out of 0..=15: {w:?}");
    (pack_port_a(w.map(i64::from), W4X2_STRIDE), i64::from(x))
}

/// Port operands for signed weights `w` in -8..=7 (W4 / Q4_0): `AD = (w1 << 22) + w0` (pre-adder A = w1 << 22,
/// D = w0; w0's sign borrows from w1's field: `AD[26:22] = w1 - (w0 < 0)`), `B = sext18(x)`.
#[inline]
pub fn pack_w4x2s(w: [i8; 2], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| (-8..=7).contains(&v)), "signed W4 weight out of -8..=7: {w:?}");
    (pack_port_a(w.map(i64::from), W4X2_STRIDE), i64::from(x))
}

/// `[x*w0, x*w1]` from `P = x*w1*2^22 + x*w0` (either signedness): `x*w0 = sext(P[21:0])`,
/// `x*w1 = P[47:22] + P[21]` (only `P[41:0]` matter).
#[inline]
pub fn unpack_w4x2(p: i64) -> [i32; 2] {
    to_i32(unpack_fields(p, W4X2_STRIDE, 0, [0; 2]))
}

/// `[x*w0, x*w1]`, unsigned weights, through the packed DSP multiply.
#[inline]
pub fn w4x2u_products(w: [u8; 2], x: i16) -> [i32; 2] {
    let (a, b) = pack_w4x2u(w, x);
    unpack_w4x2(dsp_mul27x18(a, b))
}

/// `[x*w0, x*w1]`, signed weights, through the packed DSP multiply.
#[inline]
pub fn w4x2s_products(w: [i8; 2], x: i16) -> [i32; 2] {
    let (a, b) = pack_w4x2s(w, x);
    unpack_w4x2(dsp_mul27x18(a, b))
}

/// `[sum x_j w0_j, sum x_j w1_j]`, unsigned weights, one P accumulation (3 side bits), at most
/// [`W4X2U_MAX_DEPTH`] terms.
pub fn w4x2u_accumulate(terms: &[([u8; 2], i16)]) -> [i64; 2] {
    assert!(terms.len() <= W4X2U_MAX_DEPTH);
    let mut acc = PackedAcc::<2>::new(W4X2_STRIDE, W4X2_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x2u(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

/// `[sum x_j w0_j, sum x_j w1_j]`, signed weights, one P accumulation (3 side bits), at most
/// [`W4X2S_MAX_DEPTH`] terms.
pub fn w4x2s_accumulate(terms: &[([i8; 2], i16)]) -> [i64; 2] {
    assert!(terms.len() <= W4X2S_MAX_DEPTH);
    let mut acc = PackedAcc::<2>::new(W4X2_STRIDE, W4X2_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x2s(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

// ---------------------------------------------------------------------------------------------------------
// 3. w4x3: three 4-bit weights by a 12-bit activation mantissa, overpacked at stride 11
// ---------------------------------------------------------------------------------------------------------

/// Stride of the w4x3 schemes: weights at bits 0, 11, 22 of port A.
pub const W4X3_STRIDE: u32 = 11;
/// Side bits for one 12-bit product: a product needs 16 bits signed, the stride is 11, overlap 5.
pub const W4X3_T: u32 = 5;
/// Side bits for accumulating a block of 32 (12-bit activations): 10.
pub const W4X3_ACC_T: u32 = 10;
/// Range of an unsigned-W4 x 12-bit product: [-30720, 30705] (16 bits signed).
pub const W4U_A12_PRODUCT_RANGE: (i64, i64) = product_range(-2048, 2047, 0, 15);
/// Range of a signed-W4 x 12-bit product: [-16376, 16384] (16 bits signed: 16384 = -2048 * -8).
pub const W4S_A12_PRODUCT_RANGE: (i64, i64) = product_range(-2048, 2047, -8, 7);
/// Depth of [`w4x3u_accumulate`] (10 side bits): 34.
pub const W4X3U_MAX_DEPTH: usize =
    max_acc_depth(W4U_A12_PRODUCT_RANGE.0, W4U_A12_PRODUCT_RANGE.1, W4X3_STRIDE, W4X3_ACC_T, 3);
/// Depth of [`w4x3s_accumulate`] (10 side bits): 63.
pub const W4X3S_MAX_DEPTH: usize =
    max_acc_depth(W4S_A12_PRODUCT_RANGE.0, W4S_A12_PRODUCT_RANGE.1, W4X3_STRIDE, W4X3_ACC_T, 3);

#[inline]
fn check_a12(x: i16) {
    assert!((-2048..=2047).contains(&x), "activation {x} does not fit 12 bits signed");
}

/// Port operands `(A, B)` for unsigned weights in 0..=15 and a 12-bit activation (-2048..=2047):
/// `A = w2 << 22 | w1 << 11 | w0` (`A[25:22] = w2`, `A[14:11] = w1`, `A[3:0] = w0`: a plain concatenation),
/// `B = sext18(x)`.
#[inline]
pub fn pack_w4x3u(w: [u8; 3], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| v <= 15), "unsigned W4 weight out of 0..=15: {w:?}");
    check_a12(x);
    (pack_port_a(w.map(i64::from), W4X3_STRIDE), i64::from(x))
}

/// Port operands for signed weights in -8..=7 and a 12-bit activation: `AD = (w2 << 22) + (w1 << 11) + w0`
/// (each negative weight borrows 1 from the field above), `B = sext18(x)`.
#[inline]
pub fn pack_w4x3s(w: [i8; 3], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| (-8..=7).contains(&v)), "signed W4 weight out of -8..=7: {w:?}");
    check_a12(x);
    (pack_port_a(w.map(i64::from), W4X3_STRIDE), i64::from(x))
}

/// `[x*w0, x*w1, x*w2]` from `P = x*w0 + x*w1*2^11 + x*w2*2^22` (unsigned weights), restored with two 5 x 4
/// truncated LUT multipliers `s_i = (x[4:0] * w_i) mod 32`, i = 1, 2:
/// `F0 = sext16({P[15:11] - s1, P[10:0]})`, `R1 = P[47:11] - F0[15:11]`,
/// `F1 = sext16({R1[15:11] - s2, R1[10:0]})`, `F2 = R1[36:11] - F1[15:11]` (bracketed values read signed).
#[inline]
pub fn unpack_w4x3u(p: i64, w: [u8; 3], x: i16) -> [i32; 3] {
    to_i32(unpack_fields(p, W4X3_STRIDE, W4X3_T, lut_side(w.map(i64::from), i64::from(x), W4X3_T)))
}

/// As [`unpack_w4x3u`] for signed weights: the LUT multipliers take `w_i` sign-extended to 5 bits,
/// `s_i = (x[4:0] * sext5(w_i)) mod 32`.
#[inline]
pub fn unpack_w4x3s(p: i64, w: [i8; 3], x: i16) -> [i32; 3] {
    to_i32(unpack_fields(p, W4X3_STRIDE, W4X3_T, lut_side(w.map(i64::from), i64::from(x), W4X3_T)))
}

/// `[x*w0, x*w1, x*w2]`, unsigned weights, 12-bit activation, through the packed DSP multiply.
#[inline]
pub fn w4x3u_products(w: [u8; 3], x: i16) -> [i32; 3] {
    let (a, b) = pack_w4x3u(w, x);
    unpack_w4x3u(dsp_mul27x18(a, b), w, x)
}

/// `[x*w0, x*w1, x*w2]`, signed weights, 12-bit activation, through the packed DSP multiply.
#[inline]
pub fn w4x3s_products(w: [i8; 3], x: i16) -> [i32; 3] {
    let (a, b) = pack_w4x3s(w, x);
    unpack_w4x3s(dsp_mul27x18(a, b), w, x)
}

/// The three row sums, unsigned weights, 12-bit activations, one P accumulation with two 10-bit side
/// accumulators (10 x 4 truncated multipliers), at most [`W4X3U_MAX_DEPTH`] terms.
pub fn w4x3u_accumulate(terms: &[([u8; 3], i16)]) -> [i64; 3] {
    assert!(terms.len() <= W4X3U_MAX_DEPTH);
    let mut acc = PackedAcc::<3>::new(W4X3_STRIDE, W4X3_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x3u(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

/// The three row sums, signed weights, 12-bit activations, as [`w4x3u_accumulate`]; at most
/// [`W4X3S_MAX_DEPTH`] terms.
pub fn w4x3s_accumulate(terms: &[([i8; 3], i16)]) -> [i64; 3] {
    assert!(terms.len() <= W4X3S_MAX_DEPTH);
    let mut acc = PackedAcc::<3>::new(W4X3_STRIDE, W4X3_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x3s(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

// ---------------------------------------------------------------------------------------------------------
// 4. w4x3 with 16-bit activations: stride 11, overlap 9
// ---------------------------------------------------------------------------------------------------------

/// Side bits for one 16-bit product: a product needs 20 bits signed, the stride is 11, overlap 9.
pub const W4X3_A16_T: u32 = 9;
/// Side bits for accumulating with 16-bit activations: 11 (= the stride, the most the rule allows).
pub const W4X3_A16_ACC_T: u32 = 11;
/// Depth of [`w4x3u_a16_accumulate`]: 4 (a block of 32 does not fit).
pub const W4X3U_A16_MAX_DEPTH: usize =
    max_acc_depth(W4U_A16_PRODUCT_RANGE.0, W4U_A16_PRODUCT_RANGE.1, W4X3_STRIDE, W4X3_A16_ACC_T, 3);
/// Depth of [`w4x3s_a16_accumulate`]: 7 (a block of 32 does not fit).
pub const W4X3S_A16_MAX_DEPTH: usize =
    max_acc_depth(W4S_A16_PRODUCT_RANGE.0, W4S_A16_PRODUCT_RANGE.1, W4X3_STRIDE, W4X3_A16_ACC_T, 3);

/// Port operands for unsigned weights and a full i16 activation: A as [`pack_w4x3u`], `B = sext18(x)`.
#[inline]
pub fn pack_w4x3u_a16(w: [u8; 3], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| v <= 15), "unsigned W4 weight out of 0..=15: {w:?}");
    (pack_port_a(w.map(i64::from), W4X3_STRIDE), i64::from(x))
}

/// Port operands for signed weights and a full i16 activation: AD as [`pack_w4x3s`], `B = sext18(x)`.
#[inline]
pub fn pack_w4x3s_a16(w: [i8; 3], x: i16) -> (i64, i64) {
    assert!(w.iter().all(|&v| (-8..=7).contains(&v)), "signed W4 weight out of -8..=7: {w:?}");
    (pack_port_a(w.map(i64::from), W4X3_STRIDE), i64::from(x))
}

/// `[x*w0, x*w1, x*w2]` from `P = x*w0 + x*w1*2^11 + x*w2*2^22` (unsigned weights, 16-bit x), restored
/// with two 9 x 4 truncated LUT multipliers `s_i = (x[8:0] * w_i) mod 512`:
/// `F0 = sext20({P[19:11] - s1, P[10:0]})`, `R1 = P[47:11] - F0[19:11]`,
/// `F1 = sext20({R1[19:11] - s2, R1[10:0]})`, `F2 = R1[36:11] - F1[19:11]`.
#[inline]
pub fn unpack_w4x3u_a16(p: i64, w: [u8; 3], x: i16) -> [i32; 3] {
    to_i32(unpack_fields(p, W4X3_STRIDE, W4X3_A16_T, lut_side(w.map(i64::from), i64::from(x), W4X3_A16_T)))
}

/// As [`unpack_w4x3u_a16`] for signed weights (`s_i = (x[8:0] * sext9(w_i)) mod 512`).
#[inline]
pub fn unpack_w4x3s_a16(p: i64, w: [i8; 3], x: i16) -> [i32; 3] {
    to_i32(unpack_fields(p, W4X3_STRIDE, W4X3_A16_T, lut_side(w.map(i64::from), i64::from(x), W4X3_A16_T)))
}

/// `[x*w0, x*w1, x*w2]`, unsigned weights, 16-bit activation, through the packed DSP multiply.
#[inline]
pub fn w4x3u_a16_products(w: [u8; 3], x: i16) -> [i32; 3] {
    let (a, b) = pack_w4x3u_a16(w, x);
    unpack_w4x3u_a16(dsp_mul27x18(a, b), w, x)
}

/// `[x*w0, x*w1, x*w2]`, signed weights, 16-bit activation, through the packed DSP multiply.
#[inline]
pub fn w4x3s_a16_products(w: [i8; 3], x: i16) -> [i32; 3] {
    let (a, b) = pack_w4x3s_a16(w, x);
    unpack_w4x3s_a16(dsp_mul27x18(a, b), w, x)
}

/// The three row sums, unsigned weights, 16-bit activations, 11 side bits: at most [`W4X3U_A16_MAX_DEPTH`]
/// (4) terms, so a block of [`BLOCK`] columns must be extracted per product or per few products.
pub fn w4x3u_a16_accumulate(terms: &[([u8; 3], i16)]) -> [i64; 3] {
    assert!(terms.len() <= W4X3U_A16_MAX_DEPTH);
    let mut acc = PackedAcc::<3>::new(W4X3_STRIDE, W4X3_A16_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x3u_a16(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

/// The three row sums, signed weights, 16-bit activations, 11 side bits: at most [`W4X3S_A16_MAX_DEPTH`] (7).
pub fn w4x3s_a16_accumulate(terms: &[([i8; 3], i16)]) -> [i64; 3] {
    assert!(terms.len() <= W4X3S_A16_MAX_DEPTH);
    let mut acc = PackedAcc::<3>::new(W4X3_STRIDE, W4X3_A16_ACC_T);
    for &(w, x) in terms {
        let (a, b) = pack_w4x3s_a16(w, x);
        acc.mac(a, b, w.map(i64::from), i64::from(x));
    }
    acc.fields()
}

// The chosen layouts hold what the docs claim (checked at compile time).
const _: () = {
    assert!(INT8X2_MAX_DEPTH_PLAIN == 7 && INT8X2_MAX_DEPTH == 63 && INT8X2_MAX_DEPTH >= BLOCK);
    assert!(W4X2U_MAX_DEPTH_PLAIN == 4 && W4X2S_MAX_DEPTH_PLAIN == 7);
    assert!(W4X2U_MAX_DEPTH == 34 && W4X2S_MAX_DEPTH == 63 && W4X2U_MAX_DEPTH >= BLOCK);
    assert!(W4X3U_MAX_DEPTH == 34 && W4X3S_MAX_DEPTH == 63 && W4X3U_MAX_DEPTH >= BLOCK);
    // A block of 32 with 16-bit activations would need more side bits than the stride: not supported.
    assert!(W4X3U_A16_MAX_DEPTH == 4 && W4X3S_A16_MAX_DEPTH == 7 && W4X3S_A16_MAX_DEPTH < BLOCK);
    // One product is restorable with the single-product side bits.
    let (u12, s12) = (W4U_A12_PRODUCT_RANGE, W4S_A12_PRODUCT_RANGE);
    assert!(max_acc_depth(u12.0, u12.1, W4X3_STRIDE, W4X3_T, 3) >= 1);
    assert!(max_acc_depth(s12.0, s12.1, W4X3_STRIDE, W4X3_T, 3) >= 1);
    let (u16_, s16) = (W4U_A16_PRODUCT_RANGE, W4S_A16_PRODUCT_RANGE);
    assert!(max_acc_depth(u16_.0, u16_.1, W4X3_STRIDE, W4X3_A16_T, 3) >= 1);
    assert!(max_acc_depth(s16.0, s16.1, W4X3_STRIDE, W4X3_A16_T, 3) >= 1);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a small deterministic generator (std only).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// Independent bit-slice reference of the documented extraction for w4x3 (stride 11, `t` side bits):
    /// works on the 48 bits of P as an unsigned word, as the RTL will.
    fn w4x3_slices(p: i64, s1: u64, s2: u64, t: u32) -> [i64; 3] {
        let w = 11 + t; // width of a lower field
        let m = |n: u32| (1u64 << n) - 1;
        let sx = |v: u64, n: u32| sext(v as i64, n);
        let p48 = (p as u64) & m(48);
        // F0 = sext_w({P[w-1:11] - s1, P[10:0]})
        let f0 = sx(((((p48 >> 11) & m(t)).wrapping_sub(s1) & m(t)) << 11) | (p48 & m(11)), w);
        let h0 = f0 >> 11; // F0[w-1:11], signed
                           // R1 = P[47:11] - H0 (37 bits)
        let r1 = ((p48 >> 11) as i64 - h0) as u64 & m(37);
        let f1 = sx(((((r1 >> 11) & m(t)).wrapping_sub(s2) & m(t)) << 11) | (r1 & m(11)), w);
        let h1 = f1 >> 11;
        // F2 = R1[36:11] - H1, 26 bits signed
        let f2 = sx(((r1 >> 11) as i64 - h1) as u64 & m(26), 26);
        [f0, f1, f2]
    }

    #[test]
    fn helpers() {
        assert!(fits_signed(-(1 << 26), 27) && fits_signed((1 << 26) - 1, 27));
        assert!(!fits_signed(1 << 26, 27) && !fits_signed(-(1 << 26) - 1, 27));
        assert_eq!(sext(0x2_0000, 18), -131072);
        assert_eq!(sext(0x1_FFFF, 18), 131071);
        assert_eq!(lo_bits(-1, 5), 31);
        assert_eq!(dsp_acc48((1 << 47) - 1, 1), -(1 << 47));
        assert_eq!(dsp_mul27x18(-(1 << 26), -(1 << 17)), 1 << 43);
        // lut_mul_lo = (x*w) mod 2^t for all 16-bit x, 4-bit w (both signednesses), t = 1..=11.
        for t in 1..=11 {
            for x in i16::MIN..=i16::MAX {
                for w in -8..=15i64 {
                    assert_eq!(lut_mul_lo(i64::from(x), w, t), lo_bits(i64::from(x) * w, t));
                }
            }
        }
    }

    // ----- 1. int8x2 -----

    #[test]
    fn int8x2_exhaustive() {
        let mut n = 0u64;
        for a in i8::MIN..=i8::MAX {
            for b in i8::MIN..=i8::MAX {
                let (pa, _) = pack_int8x2(a, b, 0);
                assert_eq!(pa, i64::from(a) * (1 << 18) + i64::from(b));
                for c in i8::MIN..=i8::MAX {
                    let (pa, pb) = pack_int8x2(a, b, c);
                    let p = dsp_mul27x18(pa, pb);
                    assert!(fits_signed(p, 34));
                    let want = [i32::from(a) * i32::from(c), i32::from(b) * i32::from(c)];
                    assert_eq!(unpack_int8x2(p), want, "a={a} b={b} c={c}");
                    // WP486 wording: lower = sext(P[17:0]), upper = P[44:18] + P[17].
                    assert_eq!(sext(p, 18) as i32, want[1]);
                    assert_eq!(((p >> 18) + ((p >> 17) & 1)) as i32, want[0]);
                    n += 1;
                }
            }
        }
        assert_eq!(n, 1 << 24);
    }

    // ----- 2. w4x2 -----

    #[test]
    fn w4x2u_exhaustive() {
        let mut n = 0u64;
        for w0 in 0..=15u8 {
            for w1 in 0..=15u8 {
                let (pa, _) = pack_w4x2u([w0, w1], 0);
                assert_eq!(pa, (i64::from(w1) << 22) | i64::from(w0)); // concatenation
                for x in i16::MIN..=i16::MAX {
                    let (pa, pb) = pack_w4x2u([w0, w1], x);
                    let p = dsp_mul27x18(pa, pb);
                    assert!(fits_signed(p, 42));
                    let want = [i32::from(x) * i32::from(w0), i32::from(x) * i32::from(w1)];
                    assert_eq!(unpack_w4x2(p), want, "w={w0},{w1} x={x}");
                    assert_eq!(sext(p, 22) as i32, want[0]);
                    assert_eq!(((p >> 22) + ((p >> 21) & 1)) as i32, want[1]);
                    n += 1;
                }
            }
        }
        assert_eq!(n, 1 << 24);
    }

    #[test]
    fn w4x2s_exhaustive() {
        let mut n = 0u64;
        for w0 in -8..=7i8 {
            for w1 in -8..=7i8 {
                for x in i16::MIN..=i16::MAX {
                    let (pa, pb) = pack_w4x2s([w0, w1], x);
                    let p = dsp_mul27x18(pa, pb);
                    assert!(fits_signed(p, 42));
                    let want = [i32::from(x) * i32::from(w0), i32::from(x) * i32::from(w1)];
                    assert_eq!(w4x2s_products([w0, w1], x), want, "w={w0},{w1} x={x}");
                    assert_eq!(((p >> 22) + ((p >> 21) & 1)) as i32, want[1]);
                    n += 1;
                }
            }
        }
        assert_eq!(n, 1 << 24);
    }

    // ----- 3. w4x3, 12-bit activations -----

    #[test]
    fn w4x3u_exhaustive() {
        let mut n = 0u64;
        for wi in 0..4096u32 {
            let w = [(wi & 15) as u8, ((wi >> 4) & 15) as u8, (wi >> 8) as u8];
            let (pa, _) = pack_w4x3u(w, 0);
            assert_eq!(pa, (i64::from(w[2]) << 22) | (i64::from(w[1]) << 11) | i64::from(w[0]));
            for x in -2048..=2047i16 {
                let (pa, pb) = pack_w4x3u(w, x);
                let p = dsp_mul27x18(pa, pb);
                assert!(fits_signed(p, 38));
                let want = w.map(|v| i32::from(x) * i32::from(v));
                assert_eq!(unpack_w4x3u(p, w, x), want, "w={w:?} x={x}");
                let s = |v: u8| lut_mul_lo(i64::from(x), i64::from(v), W4X3_T) as u64;
                assert_eq!(w4x3_slices(p, s(w[1]), s(w[2]), W4X3_T).map(|v| v as i32), want);
                n += 1;
            }
        }
        assert_eq!(n, 1 << 24);
    }

    #[test]
    fn w4x3s_exhaustive() {
        let mut n = 0u64;
        for wi in 0..4096u32 {
            let w = [(wi & 15) as i8 - 8, ((wi >> 4) & 15) as i8 - 8, (wi >> 8) as i8 - 8];
            for x in -2048..=2047i16 {
                let (pa, pb) = pack_w4x3s(w, x);
                let p = dsp_mul27x18(pa, pb);
                assert!(fits_signed(p, 38));
                let want = w.map(|v| i32::from(x) * i32::from(v));
                assert_eq!(unpack_w4x3s(p, w, x), want, "w={w:?} x={x}");
                let s = |v: i8| lut_mul_lo(i64::from(x), i64::from(v), W4X3_T) as u64;
                assert_eq!(w4x3_slices(p, s(w[1]), s(w[2]), W4X3_T).map(|v| v as i32), want);
                n += 1;
            }
        }
        assert_eq!(n, 1 << 24);
    }

    /// One side bit fewer is not enough: some input breaks (so the LUT multipliers are as small as they can be).
    #[test]
    fn w4x3_side_bits_are_minimal() {
        let fails = |t: u32, signed: bool, xs: &mut dyn Iterator<Item = i64>| {
            let xs: Vec<i64> = xs.collect();
            (0..4096i64).any(|wi| {
                let off = if signed { 8 } else { 0 };
                let w = [(wi & 15) - off, ((wi >> 4) & 15) - off, (wi >> 8) - off];
                xs.iter().any(|&x| {
                    let p = dsp_mul27x18(pack_port_a(w, W4X3_STRIDE), x);
                    unpack_fields(p, W4X3_STRIDE, t, lut_side(w, x, t)) != w.map(|v| v * x)
                })
            })
        };
        assert!(fails(W4X3_T - 1, false, &mut (-2048..=2047)));
        assert!(fails(W4X3_T - 1, true, &mut (-2048..=2047)));
        assert!(fails(W4X3_A16_T - 1, false, &mut (-32768..=32767)));
        assert!(fails(W4X3_A16_T - 1, true, &mut (-32768..=32767)));
    }

    // ----- 4. w4x3, 16-bit activations -----

    /// 4096 activations covering the whole i16 range (-32768 and 32767 included) and all 512 values of x[8:0].
    fn spread_a16(k: u32) -> i16 {
        (-32768 + ((k as i32) << 4) + ((k as i32 >> 5) & 15)) as i16
    }

    #[test]
    fn spread_a16_covers() {
        let xs: Vec<i16> = (0..4096).map(spread_a16).collect();
        assert_eq!((xs[0], xs[4095]), (i16::MIN, i16::MAX));
        let mut low = [false; 512];
        xs.iter().for_each(|&x| low[(x as usize) & 511] = true);
        assert!(low.iter().all(|&b| b));
    }

    fn check_a16u(w: [u8; 3], x: i16) {
        let (pa, pb) = pack_w4x3u_a16(w, x);
        let p = dsp_mul27x18(pa, pb);
        assert!(fits_signed(p, 42));
        let want = w.map(|v| i32::from(x) * i32::from(v));
        assert_eq!(unpack_w4x3u_a16(p, w, x), want, "w={w:?} x={x}");
    }

    fn check_a16s(w: [i8; 3], x: i16) {
        let (pa, pb) = pack_w4x3s_a16(w, x);
        let p = dsp_mul27x18(pa, pb);
        assert!(fits_signed(p, 42));
        let want = w.map(|v| i32::from(x) * i32::from(v));
        assert_eq!(unpack_w4x3s_a16(p, w, x), want, "w={w:?} x={x}");
    }

    #[test]
    fn w4x3u_a16_subset_and_random() {
        let mut n = 0u64;
        for wi in 0..4096u32 {
            let w = [(wi & 15) as u8, ((wi >> 4) & 15) as u8, (wi >> 8) as u8];
            for k in 0..4096 {
                check_a16u(w, spread_a16(k));
                n += 1;
            }
        }
        assert_eq!(n, 1 << 24);
        let mut rng = Rng(1);
        for _ in 0..10_000_000 {
            let r = rng.next();
            let w = [(r & 15) as u8, ((r >> 4) & 15) as u8, ((r >> 8) & 15) as u8];
            check_a16u(w, (r >> 16) as i16);
        }
    }

    #[test]
    fn w4x3s_a16_subset_and_random() {
        let mut n = 0u64;
        for wi in 0..4096u32 {
            let w = [(wi & 15) as i8 - 8, ((wi >> 4) & 15) as i8 - 8, (wi >> 8) as i8 - 8];
            for k in 0..4096 {
                check_a16s(w, spread_a16(k));
                n += 1;
            }
        }
        assert_eq!(n, 1 << 24);
        let mut rng = Rng(2);
        for _ in 0..10_000_000 {
            let r = rng.next();
            let w = [(r & 15) as i8 - 8, ((r >> 4) & 15) as i8 - 8, ((r >> 8) & 15) as i8 - 8];
            check_a16s(w, (r >> 16) as i16);
        }
    }

    /// All 2^28 inputs of each a16 scheme (2^29 checks, about 5 s in release).
    #[test]
    fn w4x3_a16_exhaustive_full() {
        // Split over the weight triples across the available cores (std threads only).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(16) as u32;
        std::thread::scope(|sc| {
            for k in 0..threads {
                sc.spawn(move || {
                    for wi in (k..4096).step_by(threads as usize) {
                        let wu = [(wi & 15) as u8, ((wi >> 4) & 15) as u8, (wi >> 8) as u8];
                        let ws = wu.map(|v| v as i8 - 8);
                        for x in i16::MIN..=i16::MAX {
                            check_a16u(wu, x);
                            check_a16s(ws, x);
                        }
                    }
                });
            }
        });
    }

    // ----- 5. accumulation -----

    /// All constant blocks of `depth` copies of one corner (each weight at its min or max, x at its min or
    /// max), through a `PackedAcc` with `t` side bits: true if every one extracts exactly.
    fn corners_exact<const N: usize>(stride: u32, t: u32, wr: (i64, i64), xr: (i64, i64), depth: usize) -> bool {
        (0..1u32 << (N + 1)).all(|c| {
            let w: [i64; N] = core::array::from_fn(|i| if c >> i & 1 == 0 { wr.0 } else { wr.1 });
            let x = if c >> N & 1 == 0 { xr.0 } else { xr.1 };
            let mut acc = PackedAcc::<N>::new(stride, t);
            for _ in 0..depth {
                acc.mac(pack_port_a(w, stride), x, w, x);
            }
            acc.fields() == w.map(|v| v * x * depth as i64)
        })
    }

    /// The depth constants are exact and tight: the worst constant block is exact at the limit, wrong one
    /// column beyond it.
    #[test]
    fn accumulation_depths_are_tight() {
        let (i8r, u4, s4, a12, a16) = ((-128, 127), (0, 15), (-8, 7), (-2048, 2047), (-32768, 32767));
        type Case = (u32, u32, (i64, i64), (i64, i64), usize, bool);
        let cases: [Case; 10] = [
            (INT8X2_STRIDE, 0, i8r, i8r, INT8X2_MAX_DEPTH_PLAIN, false),
            (INT8X2_STRIDE, INT8X2_ACC_T, i8r, i8r, INT8X2_MAX_DEPTH, false),
            (W4X2_STRIDE, 0, u4, a16, W4X2U_MAX_DEPTH_PLAIN, false),
            (W4X2_STRIDE, 0, s4, a16, W4X2S_MAX_DEPTH_PLAIN, false),
            (W4X2_STRIDE, W4X2_ACC_T, u4, a16, W4X2U_MAX_DEPTH, false),
            (W4X2_STRIDE, W4X2_ACC_T, s4, a16, W4X2S_MAX_DEPTH, false),
            (W4X3_STRIDE, W4X3_ACC_T, u4, a12, W4X3U_MAX_DEPTH, true),
            (W4X3_STRIDE, W4X3_ACC_T, s4, a12, W4X3S_MAX_DEPTH, true),
            (W4X3_STRIDE, W4X3_A16_ACC_T, u4, a16, W4X3U_A16_MAX_DEPTH, true),
            (W4X3_STRIDE, W4X3_A16_ACC_T, s4, a16, W4X3S_A16_MAX_DEPTH, true),
        ];
        for (stride, t, wr, xr, d, three) in cases {
            let ok = |d| {
                if three {
                    corners_exact::<3>(stride, t, wr, xr, d)
                } else {
                    corners_exact::<2>(stride, t, wr, xr, d)
                }
            };
            assert!(ok(d) && !ok(d + 1), "stride {stride} t {t} w {wr:?} x {xr:?} depth {d}");
        }
        // One 12-bit product needs 5 side bits (t = 5: depth 1; the plain per-product extraction).
        assert_eq!(max_acc_depth(W4U_A12_PRODUCT_RANGE.0, W4U_A12_PRODUCT_RANGE.1, 11, W4X3_T, 3), 1);
        assert!(corners_exact::<3>(11, W4X3_T, (0, 15), (-2048, 2047), 1));
        assert!(!corners_exact::<3>(11, W4X3_T, (0, 15), (-2048, 2047), 2));
    }

    /// Random blocks: `blocks` blocks of `depth` terms from `gen(r, extreme)`, packed vs exact sums. Block
    /// kinds (by turns): uniform; every value at an extreme of its range; one uniform term repeated; one
    /// extreme term repeated (e.g. all weights max with the most negative activation).
    fn acc_random<T: Copy, const N: usize>(
        seed: u64,
        blocks: usize,
        depth: usize,
        gen: impl Fn(u64, bool) -> T,
        exact: impl Fn(&T) -> [i64; N],
        packed: impl Fn(&[T]) -> [i64; N],
    ) {
        let mut rng = Rng(seed);
        let mut terms = Vec::with_capacity(depth);
        for blk in 0..blocks {
            terms.clear();
            let kind = blk % 4;
            let first = gen(rng.next(), kind & 1 == 1);
            for _ in 0..depth {
                terms.push(if kind >= 2 { first } else { gen(rng.next(), kind == 1) });
            }
            let mut want = [0i64; N];
            for t in &terms {
                let e = exact(t);
                for i in 0..N {
                    want[i] += e[i];
                }
            }
            assert_eq!(packed(&terms), want, "block {blk}");
        }
    }

    const BLOCKS: usize = 1_000_000;

    /// `r`'s bits as a value of the range `[lo, hi]` (uniform for power-of-two ranges), or an extreme.
    fn pick(r: u64, lo: i64, hi: i64, extreme: bool) -> i64 {
        if extreme {
            if r & 1 == 0 {
                lo
            } else {
                hi
            }
        } else {
            lo + (r % (hi - lo + 1) as u64) as i64
        }
    }

    #[test]
    fn int8x2_accumulate_random() {
        let gen = |r: u64, e| {
            let v = |k: u32| pick(r >> (16 * k), -128, 127, e) as i8;
            (v(0), v(1), v(2))
        };
        let exact = |&(a, b, c): &(i8, i8, i8)| [i64::from(a) * i64::from(c), i64::from(b) * i64::from(c)];
        acc_random(10, BLOCKS, BLOCK, gen, exact, int8x2_accumulate);
        acc_random(11, BLOCKS / 10, INT8X2_MAX_DEPTH, gen, exact, int8x2_accumulate);
    }

    #[test]
    fn w4x2_accumulate_random() {
        let genu = |r: u64, e| {
            ([pick(r, 0, 15, e) as u8, pick(r >> 8, 0, 15, e) as u8], pick(r >> 16, -32768, 32767, e) as i16)
        };
        let gens = |r: u64, e| {
            ([pick(r, -8, 7, e) as i8, pick(r >> 8, -8, 7, e) as i8], pick(r >> 16, -32768, 32767, e) as i16)
        };
        let exu = |(w, x): &([u8; 2], i16)| w.map(|v| i64::from(v) * i64::from(*x));
        let exs = |(w, x): &([i8; 2], i16)| w.map(|v| i64::from(v) * i64::from(*x));
        acc_random(20, BLOCKS, BLOCK, genu, exu, w4x2u_accumulate);
        acc_random(21, BLOCKS, BLOCK, gens, exs, w4x2s_accumulate);
        acc_random(22, BLOCKS / 10, W4X2U_MAX_DEPTH, genu, exu, w4x2u_accumulate);
        acc_random(23, BLOCKS / 10, W4X2S_MAX_DEPTH, gens, exs, w4x2s_accumulate);
    }

    #[test]
    fn w4x3_accumulate_random() {
        let genu = |r: u64, e| {
            (
                [pick(r, 0, 15, e) as u8, pick(r >> 8, 0, 15, e) as u8, pick(r >> 16, 0, 15, e) as u8],
                pick(r >> 24, -2048, 2047, e) as i16,
            )
        };
        let gens = |r: u64, e| {
            (
                [pick(r, -8, 7, e) as i8, pick(r >> 8, -8, 7, e) as i8, pick(r >> 16, -8, 7, e) as i8],
                pick(r >> 24, -2048, 2047, e) as i16,
            )
        };
        let exu = |(w, x): &([u8; 3], i16)| w.map(|v| i64::from(v) * i64::from(*x));
        let exs = |(w, x): &([i8; 3], i16)| w.map(|v| i64::from(v) * i64::from(*x));
        acc_random(30, BLOCKS, BLOCK, genu, exu, w4x3u_accumulate);
        acc_random(31, BLOCKS, BLOCK, gens, exs, w4x3s_accumulate);
        acc_random(32, BLOCKS / 10, W4X3U_MAX_DEPTH, genu, exu, w4x3u_accumulate);
        acc_random(33, BLOCKS / 10, W4X3S_MAX_DEPTH, gens, exs, w4x3s_accumulate);
        // 16-bit activations: up to the (small) depth limit.
        let genu16 = |r: u64, e| {
            (
                [pick(r, 0, 15, e) as u8, pick(r >> 8, 0, 15, e) as u8, pick(r >> 16, 0, 15, e) as u8],
                pick(r >> 24, -32768, 32767, e) as i16,
            )
        };
        let gens16 = |r: u64, e| {
            (
                [pick(r, -8, 7, e) as i8, pick(r >> 8, -8, 7, e) as i8, pick(r >> 16, -8, 7, e) as i8],
                pick(r >> 24, -32768, 32767, e) as i16,
            )
        };
        acc_random(34, BLOCKS, W4X3U_A16_MAX_DEPTH, genu16, exu, w4x3u_a16_accumulate);
        acc_random(35, BLOCKS, W4X3S_A16_MAX_DEPTH, gens16, exs, w4x3s_a16_accumulate);
    }

    /// Extraction reads only P[47:0]: the same result for P + k*2^48, and for an accumulation that wrapped.
    #[test]
    fn p_register_wraps() {
        let mut rng = Rng(40);
        for _ in 0..100_000 {
            let r = rng.next();
            let w = [(r & 15) as u8, ((r >> 4) & 15) as u8, ((r >> 8) & 15) as u8];
            let x = ((r >> 16) as i16) >> 4;
            let (a, b) = pack_w4x3u(w, x);
            let p = dsp_mul27x18(a, b);
            let k = (r >> 40) as i64 & 0xff;
            assert_eq!(unpack_w4x3u(p + (k << 48), w, x), w4x3u_products(w, x));
            assert_eq!(unpack_w4x3u(p - (k << 48), w, x), w4x3u_products(w, x));
        }
    }

    #[test]
    #[should_panic]
    fn w4u_weight_out_of_range() {
        pack_w4x2u([16, 0], 0);
    }

    #[test]
    #[should_panic]
    fn w4s_weight_out_of_range() {
        pack_w4x3s([0, -9, 0], 0);
    }

    #[test]
    #[should_panic]
    fn a12_out_of_range() {
        pack_w4x3u([1, 2, 3], 2048);
    }

    #[test]
    #[should_panic]
    fn port_a_out_of_range() {
        dsp_mul27x18(1 << 26, 1);
    }

    #[test]
    #[should_panic]
    fn port_b_out_of_range() {
        dsp_mul27x18(1, -(1 << 17) - 1);
    }

    #[test]
    #[should_panic]
    fn accumulate_too_deep() {
        w4x3u_a16_accumulate(&[([1, 1, 1], 1); W4X3U_A16_MAX_DEPTH + 1]);
    }
}

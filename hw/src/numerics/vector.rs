//! The vector / nonlinear unit.
//!
//! Rule (docs/numerics.md, "Vector unit"): operands are read as FP32 (FP16 operands convert exactly); every
//! arithmetic step is one IEEE binary32 operation rounded to nearest even, in the order written here (no fused
//! multiply-add); results are stored as FP16 (one more rounding, [`f32_to_f16`]) or FP32. Transcendentals use
//! [`approx`](super::approx). NaN results are the canonical NaN.

use super::acc::WideAcc;
use super::dot::F16Split;
use super::approx::{exp, recip, rsqrt, sigmoid, silu};
use super::fp16::{canon_f32, f16_to_f32, f32_to_f16};
use serde::{Deserialize, Serialize};

/// Element type of a vector in the scratchpad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F16,
    F32,
}

impl DType {
    pub fn bytes(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 => 4,
        }
    }
    pub fn code(self) -> u8 {
        self as u8
    }
    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(DType::F16),
            1 => Some(DType::F32),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "f16" => Some(DType::F16),
            "f32" => Some(DType::F32),
            _ => None,
        }
    }
    /// Reads element `i` of a little-endian byte vector as FP32.
    pub fn read(self, bytes: &[u8], i: usize) -> f32 {
        match self {
            DType::F16 => f16_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
            DType::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
        }
    }
    /// Writes `x` (rounded to this type) as element `i`.
    pub fn write(self, bytes: &mut [u8], i: usize, x: f32) {
        match self {
            DType::F16 => bytes[2 * i..2 * i + 2].copy_from_slice(&f32_to_f16(x).to_le_bytes()),
            DType::F32 => bytes[4 * i..4 * i + 4].copy_from_slice(&canon_f32(x).to_le_bytes()),
        }
    }
}

/// Element-wise operations of `VOP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VecOp {
    /// a + b
    Add,
    /// a * b
    Mul,
    /// silu(a)
    Silu,
    /// silu(a) * b (the SwiGLU gate)
    SwiGlu,
    /// a (a cast when the types differ)
    Copy,
    /// a * imm
    Scale,
}

impl VecOp {
    pub const ALL: [VecOp; 6] = [VecOp::Add, VecOp::Mul, VecOp::Silu, VecOp::SwiGlu, VecOp::Copy, VecOp::Scale];
    pub fn code(self) -> u8 {
        self as u8
    }
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c)).copied()
    }
    pub fn name(self) -> &'static str {
        match self {
            VecOp::Add => "add",
            VecOp::Mul => "mul",
            VecOp::Silu => "silu",
            VecOp::SwiGlu => "swiglu",
            VecOp::Copy => "copy",
            VecOp::Scale => "scale",
        }
    }
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }
    /// Whether the operation reads its second operand `b`.
    pub fn uses_b(self) -> bool {
        matches!(self, VecOp::Add | VecOp::Mul | VecOp::SwiGlu)
    }
    /// Whether the operation reads the immediate.
    pub fn uses_imm(self) -> bool {
        self == VecOp::Scale
    }

    /// One element: `a`, `b` already read as FP32; the result before the store rounding.
    #[inline]
    pub fn apply(self, a: f32, b: f32, imm: f32) -> f32 {
        canon_f32(match self {
            VecOp::Add => a + b,
            VecOp::Mul => a * b,
            VecOp::Silu => silu(a),
            VecOp::SwiGlu => silu(a) * b,
            VecOp::Copy => a,
            VecOp::Scale => a * imm,
        })
    }
}

/// The operations of one vector lane (the RTL `vector` unit's op codes); codes 0..=5 are [`VecOp::code`].
/// [`LaneOp::apply`] is what a lane computes for each: the functions of this module and of `approx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LaneOp {
    /// a + b
    Add = 0,
    /// a * b
    Mul = 1,
    /// silu(a)
    Silu = 2,
    /// silu(a) * b
    SwiGlu = 3,
    /// a (NaN canonical)
    Copy = 4,
    /// a * b (b = the immediate)
    Scale = 5,
    /// exp(a)
    Exp = 6,
    /// rsqrt(a)
    Rsqrt = 7,
    /// recip(a)
    Recip = 8,
    /// sigmoid(a)
    Sigmoid = 9,
    /// `rmsnorm_elem(a, b, c)` = (a * b) * c (x, inv, g)
    RmsNorm = 10,
    /// `rope_pair(a, b, c, d)` -> (y0, y1) (x0, x1, cos, sin)
    Rope = 11,
    /// a * b + c * d (the online-softmax update `o * c + p * v`)
    Axpby = 12,
    /// rsqrt(a * recip(b) + c): `rms_inv` with a = the sum of squares rounded to FP32, b = n, c = eps
    RmsInv = 13,
}

impl LaneOp {
    pub const ALL: [LaneOp; 14] = [
        LaneOp::Add,
        LaneOp::Mul,
        LaneOp::Silu,
        LaneOp::SwiGlu,
        LaneOp::Copy,
        LaneOp::Scale,
        LaneOp::Exp,
        LaneOp::Rsqrt,
        LaneOp::Recip,
        LaneOp::Sigmoid,
        LaneOp::RmsNorm,
        LaneOp::Rope,
        LaneOp::Axpby,
        LaneOp::RmsInv,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c)).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            LaneOp::Add => "add",
            LaneOp::Mul => "mul",
            LaneOp::Silu => "silu",
            LaneOp::SwiGlu => "swiglu",
            LaneOp::Copy => "copy",
            LaneOp::Scale => "scale",
            LaneOp::Exp => "exp",
            LaneOp::Rsqrt => "rsqrt",
            LaneOp::Recip => "recip",
            LaneOp::Sigmoid => "sigmoid",
            LaneOp::RmsNorm => "rmsnorm",
            LaneOp::Rope => "rope",
            LaneOp::Axpby => "axpby",
            LaneOp::RmsInv => "rms_inv",
        }
    }

    /// The lane op of a `VOP` operation (same code).
    pub fn from_vec_op(op: VecOp) -> Self {
        Self::from_code(op.code()).expect("VecOp codes are lane op codes")
    }

    /// Whether `y1` carries a result (RoPE's second element); it is +0 otherwise.
    pub fn has_y1(self) -> bool {
        self == LaneOp::Rope
    }

    /// What the lane computes (the model): the opu-hw function of the op, as `(y0, y1)`.
    pub fn apply(self, a: f32, b: f32, c: f32, d: f32) -> (f32, f32) {
        let y0 = match self {
            LaneOp::Add | LaneOp::Mul | LaneOp::Silu | LaneOp::SwiGlu | LaneOp::Copy | LaneOp::Scale => {
                let op = VecOp::from_code(self.code()).expect("vec op");
                op.apply(a, b, b)
            }
            LaneOp::Exp => exp(a),
            LaneOp::Rsqrt => rsqrt(a),
            LaneOp::Recip => recip(a),
            LaneOp::Sigmoid => sigmoid(a),
            LaneOp::RmsNorm => rmsnorm_elem(a, b, c),
            LaneOp::Rope => return rope_pair(a, b, c, d),
            LaneOp::Axpby => axpby(a, b, c, d),
            LaneOp::RmsInv => rms_inv_f32(a, b, c),
        };
        (y0, 0.0)
    }
}

/// Adds `x^2` to a sum-of-squares accumulator: the fused reduction. `x` is the value as stored (after its
/// rounding to FP16 or FP32); its square is exact, so the sum is exact up to the accumulator's 2^-32 grid and
/// independent of order. A non-finite `x` makes the sum NaN.
#[inline]
pub fn accumulate_square(acc: &mut WideAcc, x: f32) {
    if x.is_finite() {
        let (sig, exp) = super::fp16::f32_parts(x);
        acc.add_scaled(sig * sig, 2 * exp);
    } else {
        acc.nonfinite = true;
    }
}

/// RMSNorm's inverse root: `rsqrt(sumsq * recip(n) + eps)`, each step one FP32 operation.
pub fn rms_inv(sumsq: &WideAcc, n: u32, eps: f32) -> f32 {
    rms_inv_f32(sumsq.to_f32(), n as f32, eps)
}

/// [`rms_inv`] from the sum of squares already rounded to FP32 and `n` as FP32 (how the reduction unit hands
/// them to a vector lane).
pub fn rms_inv_f32(sumsq: f32, n: f32, eps: f32) -> f32 {
    rsqrt(sumsq * recip(n) + eps)
}

/// `a * b + c * d`, each step rounded to FP32, NaN canonical: the online softmax's output update
/// `o * c + p * v` ([`OnlineSoftmax::push`]).
#[inline]
pub fn axpby(a: f32, b: f32, c: f32, d: f32) -> f32 {
    canon_f32(a * b + c * d)
}

/// RMSNorm apply, one element: `(x * inv) * g`.
#[inline]
pub fn rmsnorm_elem(x: f32, inv: f32, g: f32) -> f32 {
    canon_f32((x * inv) * g)
}

/// RoPE on one pair: `(x0 * c - x1 * s, x0 * s + x1 * c)`, products and sums each rounded to FP32.
#[inline]
pub fn rope_pair(x0: f32, x1: f32, c: f32, s: f32) -> (f32, f32) {
    (canon_f32(x0 * c - x1 * s), canon_f32(x0 * s + x1 * c))
}

/// The RoPE table row for one position: `cos` and `sin` of `pos * theta^(-2i/head_dim)` for
/// `i in 0..head_dim/2`, computed in f64 and rounded to FP32. The compiler writes these tables to device
/// memory, so the simulators and the hardware read the same bits.
pub fn rope_table_row(pos: u32, head_dim: u32, theta: f64) -> Vec<(f32, f32)> {
    (0..head_dim / 2)
        .map(|i| {
            let freq = theta.powf(-2.0 * f64::from(i) / f64::from(head_dim));
            let a = f64::from(pos) * freq;
            (a.cos() as f32, a.sin() as f32)
        })
        .collect()
}

/// Online softmax over attention scores with the weighted sum of V rows (one head).
///
/// Per position, in order: `m' = max(m, s)`; `c = exp(m - m')` (1 when `m' == m`); `p = exp(s - m')`;
/// `l = l * c + p`; `o_i = o_i * c + p * v_i`. At the end `out_i = o_i * recip(l)`. Initial `m = -inf`,
/// `l = 0`, `o = 0`. A NaN score poisons the output (NaN).
#[derive(Clone, Debug)]
pub struct OnlineSoftmax {
    pub max: f32,
    pub sum: f32,
    pub out: Vec<f32>,
}

impl OnlineSoftmax {
    pub fn new(head_dim: usize) -> Self {
        OnlineSoftmax { max: f32::NEG_INFINITY, sum: 0.0, out: vec![0.0; head_dim] }
    }

    /// The state half of one position: `m' = max(m, s)` (a NaN score wins), `c = exp(m - m')` (1 when
    /// `m' == m`), `p = exp(s - m')`, `l = l c + p`; returns `(c, p)`, the factors of the output update
    /// `o c + p v` ([`axpby`]). The reduction unit computes this and hands `c`, `p` to the vector lanes.
    #[inline]
    pub fn step(&mut self, score: f32) -> (f32, f32) {
        let (m_new, c_arg, p_arg) = Self::arguments(self.max, score);
        let c = if m_new == self.max { 1.0 } else { exp(c_arg) };
        let p = exp(p_arg);
        self.sum = self.sum * c + p;
        self.max = m_new;
        (c, p)
    }

    /// The new maximum `m'` after score `s` from maximum `m` (a NaN score wins), and the arguments of `c`
    /// (`m - m'`; 0 where the maximum did not move, whose `exp` is exactly the 1 `step` takes there) and
    /// of `p` (`s - m'`).
    #[inline(always)]
    fn arguments(m: f32, s: f32) -> (f32, f32, f32) {
        let m_new = if s > m || s.is_nan() { s } else { m };
        (m_new, if m_new == m { 0.0 } else { m - m_new }, s - m_new)
    }

    /// [`step`](Self::step) of a group of heads (`group[h]`) over positions: `scores[t * heads + h]` is
    /// head `h`'s score of position `t`, folded in position order, and its factors go to `c` and `p` at the
    /// same index (both cleared first). The same arithmetic as `step` after `step`, in three passes: the
    /// running maxima, then the exponentials of every position and head at once
    /// ([`approx::exp_in_place`](super::approx::exp_in_place): eight lanes at a time), then the sums (the
    /// heads' chains side by side).
    pub fn steps(group: &mut [OnlineSoftmax], scores: &[f32], c: &mut Vec<f32>, p: &mut Vec<f32>) {
        let heads = group.len();
        assert!(heads > 0 && scores.len().is_multiple_of(heads), "a score per position and head");
        c.clear();
        c.resize(scores.len(), 0.0);
        p.clear();
        p.resize(scores.len(), 0.0);
        // the state of up to four heads in locals (registers), the loops over the heads unrolled; more
        // heads a head at a time
        match heads {
            1 => Self::passes::<1>(group, scores, c, p),
            2 => Self::passes::<2>(group, scores, c, p),
            3 => Self::passes::<3>(group, scores, c, p),
            4 => Self::passes::<4>(group, scores, c, p),
            _ => {
                let n = scores.len() / heads;
                let (mut ch, mut ph) = (vec![0.0; n], vec![0.0; n]);
                for (h, sm) in group.iter_mut().enumerate() {
                    let col: Vec<f32> = scores.iter().skip(h).step_by(heads).copied().collect();
                    Self::passes::<1>(std::slice::from_mut(sm), &col, &mut ch, &mut ph);
                    for (t, (&cv, &pv)) in ch.iter().zip(&ph).enumerate() {
                        c[t * heads + h] = cv;
                        p[t * heads + h] = pv;
                    }
                }
            }
        }
    }

    /// The three passes of [`steps`](Self::steps) over `H` heads, their state in locals.
    fn passes<const H: usize>(group: &mut [OnlineSoftmax], scores: &[f32], c: &mut [f32], p: &mut [f32]) {
        assert!(group.len() == H && c.len() == scores.len() && p.len() == scores.len());
        // the running maxima: per position and head the arguments of c and p
        let mut max: [f32; H] = std::array::from_fn(|h| group[h].max);
        for ((st, ct), pt) in scores.chunks_exact(H).zip(c.chunks_exact_mut(H)).zip(p.chunks_exact_mut(H)) {
            for h in 0..H {
                (max[h], ct[h], pt[h]) = Self::arguments(max[h], st[h]);
            }
        }
        super::approx::exp_in_place(c);
        super::approx::exp_in_place(p);
        let mut sum: [f32; H] = std::array::from_fn(|h| group[h].sum);
        for (ct, pt) in c.chunks_exact(H).zip(p.chunks_exact(H)) {
            for h in 0..H {
                sum[h] = sum[h] * ct[h] + pt[h];
            }
        }
        for (h, sm) in group.iter_mut().enumerate() {
            sm.max = max[h];
            sm.sum = sum[h];
        }
    }

    /// Folds in one position: its score and its V row (FP16 bits).
    pub fn push(&mut self, score: f32, v: &[u16]) {
        let (c, p) = self.step(score);
        self.update(c, p, v.iter().map(|&vb| f16_to_f32(vb)));
    }

    /// [`push`](Self::push) with the V row's FP16 values already widened to FP32 (exact: every FP16 value
    /// is an FP32 value), for a row that several query heads fold in. (Inlined, so that a caller compiled
    /// for wider vectors vectorizes its update.)
    #[inline(always)]
    pub fn push_widened(&mut self, score: f32, v: &[f32]) {
        let (c, p) = self.step(score);
        self.update(c, p, v.iter().copied());
    }

    /// The output update `o c + p v` ([`axpby`]) of one position.
    #[inline(always)]
    fn update(&mut self, c: f32, p: f32, v: impl IntoIterator<Item = f32>) {
        for (o, x) in self.out.iter_mut().zip(v) {
            *o = axpby(*o, c, p, x);
        }
    }

    /// The normalized output, as FP32 values before the store rounding.
    pub fn finish(&self) -> Vec<f32> {
        let r = recip(self.sum);
        self.out.iter().map(|&o| canon_f32(o * r)).collect()
    }
}

/// The attention score of one position: `dot(q, k)` rounded to FP32, times `scale`.
pub fn attention_score(q: &[u16], k: &[u16], scale: f32) -> f32 {
    attention_score_split(&F16Split::new(q), &F16Split::new(k), scale)
}

/// [`attention_score`] of vectors split once (a K row scored against every query head of its group).
#[inline]
pub fn attention_score_split(q: &F16Split, k: &F16Split, scale: f32) -> f32 {
    attention_score_of(super::dot::dot_f16_split(q, k), scale)
}

/// The score from its exact dot product `q . k` (`dot::dot_f16_split`'s accumulator): rounded to FP32,
/// times `scale`.
#[inline]
pub fn attention_score_of(dot: WideAcc, scale: f32) -> f32 {
    scale_score(dot.to_f32(), scale)
}

/// The score from its dot product rounded to FP32: times `scale`, rounded to FP32.
#[inline]
pub fn scale_score(dot: f32, scale: f32) -> f32 {
    canon_f32(dot * scale)
}

/// Index of the largest value; ties go to the lowest index; NaN is never chosen (all-NaN gives 0).
pub fn argmax(values: impl IntoIterator<Item = f32>) -> u32 {
    let mut best = (0u32, f32::NEG_INFINITY);
    let mut found = false;
    for (i, v) in values.into_iter().enumerate() {
        if !v.is_nan() && (!found || v > best.1) {
            best = (i as u32, v);
            found = true;
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_op_codes_extend_vec_op() {
        for op in VecOp::ALL {
            assert_eq!(LaneOp::from_vec_op(op).name(), op.name());
            assert_eq!(LaneOp::from_vec_op(op).apply(1.5, -2.0, 0.0, 0.0).0, op.apply(1.5, -2.0, -2.0));
        }
        for op in LaneOp::ALL {
            assert_eq!(LaneOp::from_code(op.code()), Some(op));
        }
        assert_eq!(LaneOp::from_code(14), None);
    }

    /// `steps` is `step` position by position, bit for bit: maxima that move and stay, infinities and NaNs
    /// among the scores (a NaN maximum stays), from a fresh state and from one carried over.
    #[test]
    fn steps_equal_step_by_step() {
        assert_eq!(exp(0.0).to_bits(), 1.0f32.to_bits());
        let mut seed = 0x5EEDu64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for case in 0..2000 {
            let (n, heads) = (1 + (next() % 40) as usize, 1 + case % 6);
            let scores: Vec<f32> = (0..n * heads)
                .map(|_| match next() % 40 {
                    0 if case % 3 == 0 => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][(next() % 3) as usize],
                    1 => 20.0 + (next() % 1000) as f32 * 0.07,
                    _ => (next() % 2000) as f32 * 0.01 - 15.0,
                })
                .collect();
            let mut one: Vec<OnlineSoftmax> = (0..heads).map(|_| OnlineSoftmax::new(1)).collect();
            if case % 2 == 1 {
                one.iter_mut().for_each(|sm| { sm.step(3.25); });
            }
            let mut batch = one.clone();
            let want: Vec<(u32, u32)> = scores
                .chunks_exact(heads)
                .flat_map(|st| st.iter().zip(one.iter_mut()).map(|(&s, sm)| sm.step(s)).collect::<Vec<_>>())
                .map(|(c, p)| (c.to_bits(), p.to_bits()))
                .collect();
            let (mut c, mut p) = (Vec::new(), Vec::new());
            OnlineSoftmax::steps(&mut batch, &scores, &mut c, &mut p);
            let got: Vec<(u32, u32)> = c.iter().zip(&p).map(|(c, p)| (c.to_bits(), p.to_bits())).collect();
            assert_eq!(got, want, "case {case}: {scores:?}");
            for (b, o) in batch.iter().zip(&one) {
                assert_eq!((b.max.to_bits(), b.sum.to_bits()), (o.max.to_bits(), o.sum.to_bits()), "case {case}");
            }
        }
    }

    #[test]
    fn online_softmax_matches_two_pass_softmax() {
        let hd = 8;
        let scores = [0.3f32, -1.2, 4.5, 4.4, -30.0, 2.0, 0.0];
        let vs: Vec<Vec<u16>> = (0..scores.len())
            .map(|t| (0..hd).map(|i| f32_to_f16(((t * 7 + i) as f32 * 0.37).sin())).collect())
            .collect();
        let mut sm = OnlineSoftmax::new(hd);
        for (s, v) in scores.iter().zip(&vs) {
            sm.push(*s, v);
        }
        let got = sm.finish();
        let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, |a, b| a.max(f64::from(b)));
        let w: Vec<f64> = scores.iter().map(|&s| (f64::from(s) - mx).exp()).collect();
        let z: f64 = w.iter().sum();
        for i in 0..hd {
            let want: f64 = w.iter().zip(&vs).map(|(p, v)| p * f64::from(f16_to_f32(v[i]))).sum::<f64>() / z;
            assert!((f64::from(got[i]) - want).abs() < 1e-5, "{i}: {} vs {want}", got[i]);
        }
    }

    #[test]
    fn rmsnorm_matches_f64() {
        let x: Vec<u16> = (0..576).map(|i| f32_to_f16(((i as f32) * 0.11).cos() * if i == 7 { 3000.0 } else { 1.5 })).collect();
        let mut acc = WideAcc::ZERO;
        for &b in &x {
            accumulate_square(&mut acc, f16_to_f32(b));
        }
        let inv = rms_inv(&acc, 576, 1e-5);
        let ms: f64 = x.iter().map(|&b| f64::from(f16_to_f32(b)).powi(2)).sum::<f64>() / 576.0;
        let want = 1.0 / (ms + 1e-5).sqrt();
        assert!((f64::from(inv) - want).abs() / want < 1e-6);
        assert_eq!(rmsnorm_elem(2.0, 0.5, 3.0), 3.0);
    }

    #[test]
    fn rope_rotates() {
        let row = rope_table_row(3, 64, 1e5);
        assert_eq!(row.len(), 32);
        assert_eq!(row[0], ((3.0f64).cos() as f32, (3.0f64).sin() as f32));
        let (a, b) = rope_pair(1.0, 0.0, row[0].0, row[0].1);
        assert!((a - row[0].0).abs() < 1e-7 && (b - row[0].1).abs() < 1e-7);
    }

    #[test]
    fn argmax_rules() {
        assert_eq!(argmax([1.0, 3.0, 3.0, f32::NAN, 2.0]), 1);
        assert_eq!(argmax([f32::NAN, -5.0]), 1);
        assert_eq!(argmax([f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax([f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }

    #[test]
    fn codes_round_trip() {
        for op in VecOp::ALL {
            assert_eq!(VecOp::from_code(op.code()), Some(op));
            assert_eq!(VecOp::from_name(op.name()), Some(op));
        }
        assert_eq!(VecOp::from_code(6), None);
        assert_eq!(DType::from_code(1), Some(DType::F32));
    }
}

//! Stimulus for the RTL units and what `opu-hw` says they must produce: used by the rust-hdl tests here,
//! the Verilator co-simulation tests and the benchmark in `opu-sim`.
//!
//! The activations are real FP16 blocks aligned by [`align::align_block`] (the array's aligner), so the lane
//! sees exactly the mantissas, exponents and sums it will see in the overlay; the weights are raw block bytes
//! decoded by [`weights::decode_block`]. The expected accumulators come from [`dot::accumulate_block`].

use crate::lane::{LANE_DSPS, ACC_BITS};
use opu_hw::numerics::acc::WideAcc;
use opu_hw::numerics::align::{self, AlignedBlock};
use opu_hw::numerics::dot;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::weights::{self, WeightBlock, WeightFormat};
use opu_hw::numerics::BLOCK;

/// xorshift64*: deterministic inputs without a dependency.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn f32_unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The kinds of activation block the tests draw (docs/rtl.md lists why each is there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// Normal values around 1 with mixed signs (a hidden state after RMSNorm).
    Typical,
    /// Every element has the same exponent: no alignment loss.
    EqualExponents,
    /// Exponents spread over the whole FP16 range: most elements shift out.
    Spread,
    /// One outlier of a few thousand next to small values (SmolLM2's activation outliers).
    Outlier,
    /// All zero.
    Zero,
    /// The largest magnitudes (±65504).
    Largest,
    /// Subnormals only (the block exponent reads 1).
    Subnormal,
    /// Random bit patterns, infinities and NaN included.
    RawBits,
    /// A block with one infinity or NaN.
    NonFinite,
}

impl ActKind {
    /// The kinds that hold only finite values.
    pub const FINITE: [ActKind; 7] = [
        ActKind::Typical,
        ActKind::EqualExponents,
        ActKind::Spread,
        ActKind::Outlier,
        ActKind::Zero,
        ActKind::Largest,
        ActKind::Subnormal,
    ];
    pub const ALL: [ActKind; 9] = [
        ActKind::Typical,
        ActKind::EqualExponents,
        ActKind::Spread,
        ActKind::Outlier,
        ActKind::Zero,
        ActKind::Largest,
        ActKind::Subnormal,
        ActKind::RawBits,
        ActKind::NonFinite,
    ];
}

/// One block of FP16 activations of `kind`.
pub fn act_block(rng: &mut Rng, kind: ActKind) -> [u16; BLOCK] {
    let sign = |rng: &mut Rng| if rng.next_u64() & 1 == 1 { 0x8000u16 } else { 0 };
    let mut b: [u16; BLOCK] = std::array::from_fn(|_| match kind {
        ActKind::Typical => f32_to_f16((rng.f32_unit() - 0.5) * 4.0),
        ActKind::EqualExponents => sign(rng) | (17 << 10) | (rng.below(1024) as u16),
        ActKind::Spread => sign(rng) | ((1 + rng.below(30)) << 10) as u16 | (rng.below(1024) as u16),
        ActKind::Outlier => f32_to_f16((rng.f32_unit() - 0.5) * 0.1),
        ActKind::Zero => sign(rng),
        ActKind::Largest => sign(rng) | 0x7BFF,
        ActKind::Subnormal => sign(rng) | (rng.below(1024) as u16),
        ActKind::RawBits => rng.next_u64() as u16,
        ActKind::NonFinite => f32_to_f16(rng.f32_unit() - 0.5),
    });
    let j = rng.below(BLOCK as u64) as usize;
    match kind {
        ActKind::Outlier => b[j] = f32_to_f16(if rng.next_u64() & 1 == 1 { 3000.0 } else { -2500.0 }),
        ActKind::NonFinite => b[j] = [0x7C00, 0xFC00, 0x7E00, 0x7C01][rng.below(4) as usize],
        _ => {}
    }
    b
}

/// An FP16 scale or minimum: mostly normal values of weight-scale size, sometimes zero, subnormal, large or
/// (with `nonfinite`) infinite / NaN.
pub fn scale_f16(rng: &mut Rng, nonfinite: bool) -> u16 {
    let s = if rng.next_u64() & 1 == 1 { 0x8000u16 } else { 0 };
    match rng.below(if nonfinite { 12 } else { 10 }) {
        0 => s,
        1 => s | rng.below(1024) as u16,
        2 => s | 0x7BFF,
        3 => s | ((1 + rng.below(30)) << 10) as u16 | rng.below(1024) as u16,
        10 => s | 0x7C00,
        11 => 0x7E00,
        _ => s | f32_to_f16(rng.f32_unit() * 0.05 + 1e-4),
    }
}

/// The bytes of one weight block of `fmt` (W4Min, W4 or W8): random integers (sometimes all at an extreme:
/// 0 / 15 nibbles, -128 / 127 bytes) and scales from [`scale_f16`].
pub fn weight_block(rng: &mut Rng, fmt: WeightFormat, nonfinite: bool) -> Vec<u8> {
    let mut b = vec![0u8; fmt.block_bytes()];
    let d = scale_f16(rng, nonfinite);
    b[..2].copy_from_slice(&d.to_le_bytes());
    let body = match fmt {
        WeightFormat::W4Min => {
            let m = scale_f16(rng, nonfinite);
            b[2..4].copy_from_slice(&m.to_le_bytes());
            4
        }
        _ => 2,
    };
    let extreme = rng.below(6);
    for v in &mut b[body..] {
        *v = match extreme {
            0 => 0xFF,
            1 => 0x00,
            2 if fmt == WeightFormat::W8 => 0x80,
            2 => 0x88,
            _ => rng.next_u64() as u8,
        };
    }
    b
}

/// One cycle of [`crate::lane::Lane`] input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneCycle {
    pub valid: bool,
    pub mode: u8,
    pub half: bool,
    pub row: bool,
    pub clear: bool,
    pub last: bool,
    pub x: [i16; LANE_DSPS],
    pub w: [u8; LANE_DSPS],
    pub x_nf: bool,
    pub x_exp: i8,
    pub sa: i32,
    pub d: [u16; 2],
    pub m: [u16; 2],
}

/// A dot product of two rows against one activation vector, as the lane is fed and as `opu-hw` computes it.
#[derive(Clone, Debug)]
pub struct LaneJob {
    pub fmt: WeightFormat,
    /// The FP16 activation blocks (what the array's aligner takes).
    pub x_raw: Vec<[u16; BLOCK]>,
    /// The same, aligned to 16-bit mantissas (what a lane takes).
    pub x: Vec<AlignedBlock>,
    /// Per row, the decoded weight blocks.
    pub w: [Vec<WeightBlock>; 2],
}

impl LaneJob {
    /// A job of `blocks` blocks: activation blocks of kinds drawn from `kinds`, weights of `fmt`.
    pub fn random(rng: &mut Rng, fmt: WeightFormat, blocks: usize, kinds: &[ActKind], nonfinite_scales: bool) -> Self {
        let x_raw: Vec<[u16; BLOCK]> = (0..blocks)
            .map(|_| {
                let kind = kinds[rng.below(kinds.len() as u64) as usize];
                act_block(rng, kind)
            })
            .collect();
        Self::with_activations(rng, fmt, x_raw, nonfinite_scales)
    }

    /// A job on given activation blocks with random weights (the lanes of an array share the activations).
    pub fn with_activations(rng: &mut Rng, fmt: WeightFormat, x_raw: Vec<[u16; BLOCK]>, nonfinite_scales: bool) -> Self {
        let x = x_raw.iter().map(|b| align::align_block(b, 16)).collect();
        let w = std::array::from_fn(|_| {
            x_raw.iter().map(|_| weights::decode_block(fmt, &weight_block(rng, fmt, nonfinite_scales))).collect()
        });
        LaneJob { fmt, x_raw, x, w }
    }

    /// What the two rows' accumulators must hold: [`dot::accumulate_block`] over the blocks.
    pub fn expected(&self) -> [WideAcc; 2] {
        std::array::from_fn(|r| {
            let mut acc = WideAcc::ZERO;
            for (xb, wb) in self.x.iter().zip(&self.w[r]) {
                dot::accumulate_block(&mut acc, xb, wb);
            }
            acc
        })
    }

    /// The cycles that feed the job: per block two halves (W4Min, W4), or per row two halves (W8).
    pub fn cycles(&self) -> Vec<LaneCycle> {
        let nb = self.x.len();
        let mut out = Vec::new();
        for (b, xb) in self.x.iter().enumerate() {
            let base = LaneCycle {
                valid: true,
                mode: self.fmt.code(),
                clear: b == 0,
                last: b + 1 == nb,
                x_nf: xb.nonfinite,
                x_exp: xb.scale_exp as i8,
                sa: xb.mant_sum() as i32,
                d: [self.w[0][b].d, self.w[1][b].d],
                m: [self.w[0][b].m.unwrap_or(0), self.w[1][b].m.unwrap_or(0)],
                ..Default::default()
            };
            let rows: &[Option<usize>] = if self.fmt == WeightFormat::W8 { &[Some(0), Some(1)] } else { &[None] };
            for &row in rows {
                for half in 0..2 {
                    let cols = half * LANE_DSPS..(half + 1) * LANE_DSPS;
                    let x = std::array::from_fn(|k| xb.mant[cols.start + k] as i16);
                    let w = std::array::from_fn(|k| {
                        let j = cols.start + k;
                        match (self.fmt, row) {
                            (WeightFormat::W8, Some(r)) => self.w[r][b].q[j] as i8 as u8,
                            (WeightFormat::W4, _) => nibble(self.w[0][b].q[j] + 8) | nibble(self.w[1][b].q[j] + 8) << 4,
                            _ => nibble(self.w[0][b].q[j]) | nibble(self.w[1][b].q[j]) << 4,
                        }
                    });
                    out.push(LaneCycle { half: half == 1, row: row == Some(1), x, w, ..base.clone() });
                }
            }
        }
        out
    }
}

fn nibble(q: i32) -> u8 {
    debug_assert!((0..16).contains(&q));
    q as u8
}

/// Whether an accumulator from the RTL (its 96 bits and non-finite flag) is `expected`: equal bits, or both
/// non-finite (then the bits are unspecified: the result rounds to NaN whatever they hold).
pub fn acc_matches(fixed: i128, nonfinite: bool, expected: &WideAcc) -> bool {
    if expected.nonfinite || nonfinite {
        return expected.nonfinite == nonfinite;
    }
    let wrap = |v: i128| (v << (128 - ACC_BITS)) >> (128 - ACC_BITS);
    wrap(fixed) == wrap(expected.fixed) && expected.fixed == wrap(expected.fixed)
}

/// One beat of [`crate::router::Router`] input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterBeat {
    pub valid: bool,
    pub first: bool,
    pub last: bool,
    pub x: [u16; crate::router::ROUTER_COLS],
    pub w: [[u16; crate::router::ROUTER_COLS]; 2],
    pub b: [u16; 2],
}

/// A router decision (or two attention scores sharing a query): `x`, the two rows, the biases.
#[derive(Clone, Debug)]
pub struct RouterJob {
    pub x: Vec<u16>,
    pub w: [Vec<u16>; 2],
    pub b: [u16; 2],
}

impl RouterJob {
    /// `cols` columns of activation kinds drawn from `kinds` (x and both rows), biases from [`scale_f16`].
    pub fn random(rng: &mut Rng, cols: usize, kinds: &[ActKind], nonfinite_bias: bool) -> Self {
        let vec = |rng: &mut Rng| -> Vec<u16> {
            let mut v = Vec::with_capacity(cols + BLOCK);
            while v.len() < cols {
                let kind = kinds[rng.below(kinds.len() as u64) as usize];
                v.extend_from_slice(&act_block(rng, kind));
            }
            v.truncate(cols);
            v
        };
        let x = vec(rng);
        let w = [vec(rng), vec(rng)];
        let b = [scale_f16(rng, nonfinite_bias), scale_f16(rng, nonfinite_bias)];
        RouterJob { x, w, b }
    }

    /// What the router must output: (l_execute, l_skip, skip) per `router::route`.
    pub fn expected(&self) -> (f32, f32, bool) {
        crate::router::route(&self.x, &self.w[0], &self.w[1], self.b)
    }

    /// The beats: 8 columns each, the last zero-padded, biases with the last.
    pub fn beats(&self) -> Vec<RouterBeat> {
        let n = crate::router::ROUTER_COLS;
        let beats = self.x.len().div_ceil(n).max(1);
        (0..beats)
            .map(|k| {
                let col = |v: &[u16], j: usize| v.get(k * n + j).copied().unwrap_or(0);
                RouterBeat {
                    valid: true,
                    first: k == 0,
                    last: k + 1 == beats,
                    x: std::array::from_fn(|j| col(&self.x, j)),
                    w: [std::array::from_fn(|j| col(&self.w[0], j)), std::array::from_fn(|j| col(&self.w[1], j))],
                    b: self.b,
                }
            })
            .collect()
    }
}

/// Accumulator values for the output stage: the edges (zero, ±1 unit, ±2^94, the FP16 overflow threshold
/// 65520 and its neighbours, the smallest FP16 subnormal and half of it, FP16 ties) and then random
/// magnitudes spread over every bit position, both signs, some with the non-finite flag.
pub fn accumulator_values(rng: &mut Rng, n: usize) -> Vec<WideAcc> {
    let one = 1i128 << 32;
    let mut v: Vec<i128> = vec![0, 1, -1, 1 << 94, -(1 << 94), (1 << 95) - 1, -(1 << 95)];
    for base in [65504 * one, 65520 * one, one >> 14, one >> 24, one >> 25, (one >> 24) * 3 / 2, one + (one >> 11)] {
        for d in [-1, 0, 1] {
            v.push(base + d);
            v.push(-(base + d));
        }
    }
    let mut out: Vec<WideAcc> = v.into_iter().map(|fixed| WideAcc { fixed, nonfinite: false }).collect();
    for _ in 0..n {
        let bits = rng.below(95) as u32;
        let mag = (i128::from(rng.next_u64()) << 64 | i128::from(rng.next_u64())) & ((1i128 << bits) - 1) | 1i128 << bits;
        let fixed = if rng.next_u64() & 1 == 1 { -mag } else { mag };
        out.push(WideAcc { fixed, nonfinite: rng.below(32) == 0 });
    }
    out
}

//! The vector lane: one element per cycle of every element-wise operation of the vector unit, bit-exact with
//! `opu_hw::numerics` (docs/numerics.md "Vector unit" and "Transcendental approximations").
//!
//! Inputs per cycle: an op code ([`LaneOp`]) and four FP32 operands `a b c d`; outputs `y0 y1` (FP32 bits),
//! [`vector_latency`] register stages later, whatever the op: ops can change every cycle. The overlay puts
//! 8 of these side by side (`vecunit::VEC_LANES`, the config's `vector_lanes`); the unit `vector` is one lane.
//!
//! Every arithmetic step is one pipelined IEEE binary32 operator of [`crate::fp32`] (no fused multiply-add),
//! in the order the numerics write it; the integer steps of the approximations (range checks, exponent
//! fix-ups, the leading-zero normalization of subnormal inputs) and their tables are Verilog functions here,
//! the tables formatted from `opu_hw::numerics::approx`'s constants. The lane is one pipeline through
//! which every op flows:
//!
//! 1. `exp` of `a` (of `-a` for the sigmoid family): 7 multiplies, 8 adds;
//! 2. `1 + e` (sigmoid's denominator);
//! 3. `recip` of that (or of `a` for `recip`, of `b` for `rms_inv`): 4 multiplies, 4 adds;
//! 4. four multiplies (`a * rc` for SiLU and `rms_inv`, the four RoPE products, `a * b`, `c * d`), SiLU's
//!    flush, then an add (`a + b`, RoPE's differences and sums, `axpby`, `mean + eps`) and a multiply
//!    (SwiGLU's `silu * b`, RMSNorm's `* g`);
//! 5. `rsqrt` (of `a`, or of `mean + eps` for `rms_inv`): 6 multiplies, 4 adds (`0.5 * y` is an exact
//!    exponent decrement: y is always in (0.5, 1]).
//!
//! The **light lane** ([`Vector::light`], unit `vector_light`) is the same pipeline without step 5: `rsqrt`
//! and `rms_inv` give +0 there, every other op the full lane's bits after the same number of stages. The
//! vector unit needs `rsqrt` only for `rms_inv`, once per row on its lane 0 (no `vop` op is an `rsqrt`), so its
//! lanes 1 to 7 are light: 10 FP32 operators fewer each.
//!
//! The lane's Rust model (`update()`) is [`LaneOp::apply`], i.e. the opu-hw functions.

use crate::fp32::{Graph, Val, FP32_VERILOG};
use crate::lane::ModelState;
use crate::testing::Rng;
use opu_hw::numerics::approx::{
    EXP2_HI, EXP2_LO, EXP_C_HI, EXP_C_LO, EXP_HI, EXP_INV_C, EXP_LO, EXP_P3, RECIP_SEED, ROUND_SHIFTER,
    RSQRT_SEED,
};
use opu_hw::numerics::fp16::f16_to_f32;
use rust_hdl::prelude::*;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::OnceLock;

pub use opu_hw::numerics::vector::LaneOp;


/// `name(i)`: the FP32 table `t` as a Verilog function (a ROM in LUTs).
fn table_verilog(name: &str, idx_bits: u32, t: &[u32]) -> String {
    assert_eq!(t.len(), 1 << idx_bits);
    let mut s = format!(
        "function automatic [31:0] {name}(input [{}:0] {name}_i);\n   case ({name}_i)\n",
        idx_bits - 1
    );
    for (k, v) in t.iter().enumerate() {
        let _ = writeln!(s, "      {idx_bits}'d{k}: {name} = 32'h{v:08X};");
    }
    s.push_str(&format!("      default: {name} = 32'd0;\n   endcase\nendfunction\n"));
    s
}

/// The integer steps of the approximations. `@NAME` placeholders are filled from opu-hw's constants.
const APPROX_STEPS_VERILOG: &str = "\
// exp, range and exponent: {code[1:0], m[8:0]}; code 1: x NaN, 2: x > 89 (+inf), 3: x < -89 (+0);
// m = n >> 6 with n = bits(t) - bits(1.5 * 2^23) (|n| <= 8218 when code is 0).
function automatic [10:0] vx_exp_pre(input [31:0] ep_x, input [31:0] ep_t);
   reg [31:0] ep_n;
   begin
      ep_n = ep_t - 32'h@SHIFTER;
      if (ep_x[30:23] == 8'hFF && ep_x[22:0] != 23'd0) vx_exp_pre = {2'd1, ep_n[14:6]};
      else if (ep_x[30:0] > 31'h@EXP_HI) vx_exp_pre = {ep_x[31] ? 2'd3 : 2'd2, ep_n[14:6]};
      else vx_exp_pre = {2'd0, ep_n[14:6]};
   end
endfunction
// exp, last step: p * 2^m by adding m to p's exponent field (p in [0.99, 2)); +inf from 255 on, +0 at 0 or
// below.
function automatic [31:0] vx_exp_fix(input [10:0] ef_pre, input [31:0] ef_p);
   reg signed [9:0] ef_b;
   begin
      ef_b = $signed({2'd0, ef_p[30:23]}) + $signed({ef_pre[8], ef_pre[8:0]});
      case (ef_pre[10:9])
         2'd1: vx_exp_fix = 32'h7FC00000;
         2'd2: vx_exp_fix = 32'h7F800000;
         2'd3: vx_exp_fix = 32'd0;
         default: vx_exp_fix = (ef_b >= 10'sd255) ? 32'h7F800000 : (ef_b <= 10'sd0) ? 32'd0 : {ef_p[31], ef_b[7:0], ef_p[22:0]};
      endcase
   end
endfunction
// rsqrt and recip: {nan, zero, inf, sign, e[8:0], f[22:0]} with |x| = (1 + f/2^23) * 2^e, a subnormal
// normalized by its leading zeros (shift lz + 1, e = -127 - lz).
function automatic [35:0] vx_unpack(input [31:0] up_x);
   reg [6:0] up_lz;
   reg [8:0] up_e;
   reg [22:0] up_f;
   begin
      up_lz = fp_lzc64({up_x[22:0], 41'h1FFFFFFFFFF});
      if (up_x[30:23] != 8'd0) begin
         up_e = {1'b0, up_x[30:23]} - 9'd127;
         up_f = up_x[22:0];
      end else begin
         up_e = 9'd0 - 9'd127 - {2'd0, up_lz};
         up_f = up_x[22:0] << (up_lz + 7'd1);
      end
      vx_unpack = {(up_x[30:23] == 8'hFF) && (up_x[22:0] != 23'd0), up_x[30:0] == 31'd0,
                   up_x[30:0] == 31'h7F800000, up_x[31], up_e, up_f};
   end
endfunction
// recip, last step ({nan, zero, inf, sign, e} of x and y): sign | (bits(y) - (e << 23)); +-inf from
// exponent 255 on, +-0 at 0 or below.
function automatic [31:0] vx_recip_fix(input [12:0] rf_c, input [31:0] rf_y);
   reg signed [9:0] rf_b;
   begin
      rf_b = $signed({2'd0, rf_y[30:23]}) - $signed({rf_c[8], rf_c[8:0]});
      if (rf_c[12]) vx_recip_fix = 32'h7FC00000;
      else if (rf_c[11]) vx_recip_fix = {rf_c[9], 8'hFF, 23'd0};
      else if (rf_c[10]) vx_recip_fix = {rf_c[9], 31'd0};
      else if (rf_b >= 10'sd255) vx_recip_fix = {rf_c[9], 8'hFF, 23'd0};
      else if (rf_b <= 10'sd0) vx_recip_fix = {rf_c[9], 31'd0};
      else vx_recip_fix = {rf_c[9], rf_b[7:0], rf_y[22:0]};
   end
endfunction
// rsqrt, last step: bits(y) - (((e - odd) >> 1) << 23) (never leaves the normal range); NaN for NaN and
// x < 0, +inf for +-0, +0 for +inf.
function automatic [31:0] vx_rsqrt_fix(input [12:0] rq_c, input [31:0] rq_y);
   reg [7:0] rq_h;
   begin
      rq_h = rq_c[8:1];
      if (rq_c[12]) vx_rsqrt_fix = 32'h7FC00000;
      else if (rq_c[11]) vx_rsqrt_fix = 32'h7F800000;
      else if (rq_c[9]) vx_rsqrt_fix = 32'h7FC00000;
      else if (rq_c[10]) vx_rsqrt_fix = 32'd0;
      else vx_rsqrt_fix = {rq_y[31], rq_y[30:23] - rq_h, rq_y[22:0]};
   end
endfunction
// silu from x and x * sigmoid(x): -inf -> -0, a subnormal product -> a zero of its sign (NaN stays).
function automatic [31:0] vx_silu_fix(input [31:0] sf_x, input [31:0] sf_p);
   if (sf_x == 32'hFF800000) vx_silu_fix = 32'h80000000;
   else if (sf_p[30:23] == 8'd0) vx_silu_fix = {sf_p[31], 31'd0};
   else vx_silu_fix = sf_p;
endfunction
function automatic [31:0] vx_canon(input [31:0] cn_x);
   vx_canon = ((cn_x[30:23] == 8'hFF) && (cn_x[22:0] != 23'd0)) ? 32'h7FC00000 : cn_x;
endfunction
";

/// The Verilog functions the approximation graphs use: the tables and the integer steps.
pub fn approx_verilog() -> String {
    // The checks vx_exp_pre relies on: one magnitude compare covers both range limits, and the shifter's
    // low bits are zero (so n & 63 = bits(t) & 63).
    assert_eq!(EXP_LO, -EXP_HI);
    assert_eq!(ROUND_SHIFTER.to_bits() & 63, 0);
    let mut s = String::new();
    s.push_str(&table_verilog("vx_exp2_hi", 6, &EXP2_HI));
    s.push_str(&table_verilog("vx_exp2_lo", 6, &EXP2_LO));
    s.push_str(&table_verilog("vx_recip_seed", 6, &RECIP_SEED));
    s.push_str(&table_verilog("vx_rsqrt_seed", 7, &RSQRT_SEED));
    s.push_str(
        &APPROX_STEPS_VERILOG
            .replace("@SHIFTER", &format!("{:08X}", ROUND_SHIFTER.to_bits()))
            .replace("@EXP_HI", &format!("{:08X}", EXP_HI.to_bits())),
    );
    s
}

/// `approx::exp(x)` in `g`.
pub fn exp_graph(g: &mut Graph, x: Val) -> Val {
    let inv_c = g.f32(EXP_INV_C);
    let shifter = g.f32(ROUND_SHIFTER);
    let c_hi = g.f32(EXP_C_HI);
    let c_lo = g.f32(EXP_C_LO);
    let p3 = g.f32(EXP_P3);
    let half = g.f32(0.5);
    let t1 = g.mul(x, inv_c);
    let t = g.add(t1, shifter);
    let nf = g.sub(t, shifter);
    let pre = g.comb(11, true, &[x, t], "vx_exp_pre(#0, #1)");
    let j = g.comb(6, false, &[t], "#0[5:0]");
    let a1 = g.mul(nf, c_hi);
    let r1 = g.sub(x, a1);
    let a2 = g.mul(nf, c_lo);
    let r = g.sub(r1, a2);
    let rr = g.mul(r, r);
    let rp = g.mul(r, p3);
    let h = g.add(half, rp);
    let q1 = g.mul(rr, h);
    let q = g.add(r, q1);
    // The table read waits for q (q is a dummy argument): j is 6 bits to delay, s 64.
    let s = g.comb(32, true, &[j, q], "vx_exp2_hi(#0)");
    let s_lo = g.comb(32, true, &[j, q], "vx_exp2_lo(#0)");
    let sq = g.mul(s, q);
    let lo = g.add(s_lo, sq);
    let p = g.add(s, lo);
    g.comb(32, true, &[pre, p], "vx_exp_fix(#0, #1)")
}

/// `approx::recip(x)` in `g`.
pub fn recip_graph(g: &mut Graph, x: Val) -> Val {
    let one = g.f32(1.0);
    let u = g.comb(36, true, &[x], "vx_unpack(#0)");
    let m = g.comb(32, false, &[u], "{9'h07F, #0[22:0]}");
    let mut y = g.comb(32, true, &[u], "vx_recip_seed(#0[22:17])");
    for _ in 0..2 {
        let t = g.mul(m, y);
        let e = g.sub(one, t);
        let v = g.mul(y, e);
        y = g.add(y, v);
    }
    let cls = g.comb(13, false, &[u], "#0[35:23]");
    g.comb(32, true, &[cls, y], "vx_recip_fix(#0, #1)")
}

/// `approx::rsqrt(x)` in `g`.
pub fn rsqrt_graph(g: &mut Graph, x: Val) -> Val {
    let one = g.f32(1.0);
    let u = g.comb(36, true, &[x], "vx_unpack(#0)");
    // M = (1 + f) * 2^odd with odd = e & 1 (bit 23 of u)
    let m = g.comb(32, false, &[u], "{1'b0, #0[23] ? 8'h80 : 8'h7F, #0[22:0]}");
    let mut y = g.comb(32, true, &[u], "vx_rsqrt_seed({#0[23], #0[22:17]})");
    for _ in 0..2 {
        let t1 = g.mul(m, y);
        let t = g.mul(t1, y);
        // 0.5 * y, exact: y is in (0.5, 1] (a seed or a Newton step from one), far from the subnormals
        let hy = g.comb(32, false, &[y], "{#0[31], #0[30:23] - 8'd1, #0[22:0]}");
        let r = g.sub(one, t);
        let w = g.mul(hy, r);
        y = g.add(y, w);
    }
    let cls = g.comb(13, false, &[u], "#0[35:23]");
    g.comb(32, true, &[cls, y], "vx_rsqrt_fix(#0, #1)")
}

/// Replaces `@OP` placeholders by the 4-bit op codes.
fn ops(t: &str) -> String {
    let mut s = t.to_string();
    let mut all = LaneOp::ALL.to_vec();
    all.sort_by_key(|o| std::cmp::Reverse(o.name().len()));
    for o in all {
        s = s.replace(&format!("@{}", o.name().to_uppercase()), &format!("4'd{}", o.code()));
    }
    s
}

/// The lane's dataflow; without `rsqrt` the light lane's, kept to the full lane's latency.
fn lane_graph(rsqrt: bool) -> Graph {
    let mut g = Graph::new("v");
    let op = g.port("op", 4);
    let a = g.port("a", 32);
    let b = g.port("b", 32);
    let c = g.port("c", 32);
    let d = g.port("d", 32);
    let one = g.f32(1.0);
    // 1. exp(a), or exp(-a) for the sigmoid family
    let xe = g.comb(32, false, &[op, a], &ops("(#0 == @EXP) ? #1 : {~#1[31], #1[30:0]}"));
    let e = exp_graph(&mut g, xe);
    // 2. 1 + e
    let den = g.add(one, e);
    // 3. recip
    let rin = g.comb(32, false, &[op, a, b, den], &ops("(#0 == @RECIP) ? #1 : (#0 == @RMS_INV) ? #2 : #3"));
    let rc = recip_graph(&mut g, rin);
    let early = g.comb(32, true, &[op, a, e, rc], &ops("(#0 == @EXP) ? #2 : (#0 == @COPY) ? vx_canon(#1) : #3"));
    // 4. products, SiLU's flush, the add and the second product
    let m0y = g.comb(
        32,
        false,
        &[op, rc, b, c],
        &ops("(#0 == @SILU || #0 == @SWIGLU || #0 == @RMS_INV) ? #1 : (#0 == @ROPE) ? #3 : #2"),
    );
    let m0 = g.mul(a, m0y);
    // The other products start with m0 (rc is a dummy argument): their operands wait in the delay lines
    // the lane has anyway, rather than their results in new ones.
    let m1x = g.comb(32, false, &[op, b, c, rc], &ops("(#0 == @ROPE) ? #1 : #2"));
    let m1 = g.mul(m1x, d);
    let m2x = g.comb(32, false, &[a, rc], "#0");
    let m2 = g.mul(m2x, d);
    let m3x = g.comb(32, false, &[b, rc], "#0");
    let m3 = g.mul(m3x, c);
    let silu = g.comb(32, true, &[a, m0], "vx_silu_fix(#0, #1)");
    let n0x = g.comb(32, false, &[op, silu, m0], &ops("(#0 == @SWIGLU) ? #1 : #2"));
    let n0y = g.comb(32, false, &[op, b, c], &ops("(#0 == @SWIGLU) ? #1 : #2"));
    let n0 = g.mul(n0x, n0y);
    let a0x = g.comb(32, false, &[op, a, m0], &ops("(#0 == @ADD) ? #1 : #2"));
    let a0y = g.comb(
        32,
        false,
        &[op, b, c, m1],
        &ops("(#0 == @ADD) ? #1 : (#0 == @RMS_INV) ? #2 : (#0 == @ROPE) ? {~#3[31], #3[30:0]} : #3"),
    );
    let a0 = g.add(a0x, a0y);
    let a1 = g.add(m2, m3);
    let mid = g.comb(
        32,
        true,
        &[op, early, a0, m0, silu, n0],
        &ops(
            "(#0 == @ADD || #0 == @ROPE || #0 == @AXPBY) ? #2 : (#0 == @MUL || #0 == @SCALE) ? #3 : \
             (#0 == @SILU) ? #4 : (#0 == @SWIGLU || #0 == @RMSNORM) ? #5 : \
             (#0 == @EXP || #0 == @COPY || #0 == @RECIP || #0 == @SIGMOID) ? #1 : 32'd0",
        ),
    );
    let y1 = g.comb(32, true, &[op, a1], &ops("(#0 == @ROPE) ? #1 : 32'd0"));
    if !rsqrt {
        g.output("y0", mid, false);
        g.output("y1", y1, false);
        g.pad_latency(lane_graph(true).latency());
        return g;
    }
    // 5. rsqrt
    let fin = g.comb(32, false, &[op, a, a0], &ops("(#0 == @RMS_INV) ? #2 : #1"));
    let rs = rsqrt_graph(&mut g, fin);
    let y0 = g.comb(32, false, &[op, mid, rs], &ops("(#0 == @RSQRT || #0 == @RMS_INV) ? #2 : #1"));
    g.output("y0", y0, false);
    g.output("y1", y1, false);
    g
}

struct Built {
    verilog: String,
    latency: usize,
    muls: usize,
    adds: usize,
}

fn build(rsqrt: bool) -> Built {
    let g = lane_graph(rsqrt);
    let (muls, adds) = g.operator_counts();
    Built { verilog: format!("{FP32_VERILOG}{}{}", approx_verilog(), g.verilog()), latency: g.latency() as usize, muls, adds }
}

/// The full lane (`light` false) or the light one.
fn built(light: bool) -> &'static Built {
    static FULL: OnceLock<Built> = OnceLock::new();
    static LIGHT: OnceLock<Built> = OnceLock::new();
    if light {
        LIGHT.get_or_init(|| build(false))
    } else {
        FULL.get_or_init(|| build(true))
    }
}

/// Register stages of the lane (full or light): operands before edge `t` give results after edge
/// `t + vector_latency() - 1`.
pub fn vector_latency() -> usize {
    built(false).latency
}

/// FP32 operators in one lane: (multiplies, adds and subtracts).
pub fn vector_operators() -> (usize, usize) {
    (built(false).muls, built(false).adds)
}

/// FP32 operators in one light lane: (multiplies, adds and subtracts).
pub fn light_vector_operators() -> (usize, usize) {
    (built(true).muls, built(true).adds)
}

/// One vector lane (see the module docs). `op` is a [`LaneOp`] code (others give +0).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Vector {
    pub clock: Signal<In, Clock>,
    pub op: Signal<In, Bits<4>>,
    pub a: Signal<In, Bits<32>>,
    pub b: Signal<In, Bits<32>>,
    pub c: Signal<In, Bits<32>>,
    pub d: Signal<In, Bits<32>>,
    pub y0: Signal<Out, Bits<32>>,
    pub y1: Signal<Out, Bits<32>>,
    pipe: ModelState<VecDeque<(u32, u32)>>,
    /// The light lane (no `rsqrt`, `rms_inv`).
    light: ModelState<bool>,
}

impl Vector {
    /// A light lane: `rsqrt` and `rms_inv` give +0 (see the module docs).
    pub fn light() -> Self {
        Vector { light: ModelState(true), ..Default::default() }
    }
}

/// The lane's result for one op code and operands (bits): [`LaneOp::apply`], +0 for unknown codes.
pub fn lane_result(op: u8, a: u32, b: u32, c: u32, d: u32) -> (u32, u32) {
    match LaneOp::from_code(op) {
        Some(o) => {
            let (y0, y1) = o.apply(f32::from_bits(a), f32::from_bits(b), f32::from_bits(c), f32::from_bits(d));
            (y0.to_bits(), y1.to_bits())
        }
        None => (0, 0),
    }
}

impl Logic for Vector {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let q = &mut self.pipe.0;
        if q.is_empty() {
            q.extend(std::iter::repeat_n((0, 0), vector_latency()));
        }
        let op = self.op.val().to_u8();
        let without = self.light.0 && matches!(LaneOp::from_code(op), Some(LaneOp::Rsqrt | LaneOp::RmsInv));
        q.push_back(if without {
            (0, 0)
        } else {
            lane_result(op, self.a.val().to_u32(), self.b.val().to_u32(), self.c.val().to_u32(), self.d.val().to_u32())
        });
        q.pop_front();
        let (y0, y1) = q[0];
        self.y0.next = u64::from(y0).into();
        self.y1.next = u64::from(y1).into();
    }
    fn connect(&mut self) {
        self.y0.connect();
        self.y1.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(built(self.light.0).verilog.clone())
    }
}

/// [`Vector`] ready to simulate or emit.
pub fn vector_top() -> Vector {
    connect_top!(Vector::default(), clock, op, a, b, c, d)
}

/// The light lane ([`Vector::light`]) ready to simulate or emit.
pub fn light_vector_top() -> Vector {
    connect_top!(Vector::light(), clock, op, a, b, c, d)
}

/// Stimulus: an FP32 operand, FP16-derived (how the overlay stores activations; infinities, NaN and
/// subnormals included) half of the time, otherwise a random bit pattern, a value of moderate exponent
/// (2^-30..2^30), a value in [-1, 1] or one of [`crate::fp32::edge_values`].
pub fn random_operand(rng: &mut Rng) -> u32 {
    match rng.below(16) {
        0..=7 => f16_to_f32(rng.next_u64() as u16).to_bits(),
        8..=10 => rng.next_u64() as u32,
        11..=12 => {
            let r = rng.next_u64();
            (r as u32 & 0x8000_0000) | ((97 + (r >> 32) % 61) as u32) << 23 | (r as u32 & 0x7F_FFFF)
        }
        13..=14 => (rng.f32_unit() * 2.0 - 1.0).to_bits() ^ (rng.below(64) as u32),
        _ => {
            let e = crate::fp32::edge_values();
            e[rng.below(e.len() as u64) as usize]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_light_lane_is_the_full_one_without_rsqrt() {
        let (full, light) = (built(false), built(true));
        assert_eq!(light.latency, full.latency);
        let (rm, ra) = (full.muls - light.muls, full.adds - light.adds);
        assert_eq!((rm, ra), (6, 4), "rsqrt's operators");
        assert!(!light.verilog.contains("vx_rsqrt_fix(v"), "the light lane computes no rsqrt");
    }

    #[test]
    fn op_placeholders_are_opu_hw_lane_op_codes() {
        assert_eq!(ops("@RMS_INV @RMSNORM @SILU @SWIGLU"), "4'd13 4'd10 4'd2 4'd3");
    }
}

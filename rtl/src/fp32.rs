//! IEEE binary32 add, subtract and multiply in Verilog, and a small dataflow builder that pipelines
//! sequences of them (the vector and reduce units are built with it).
//!
//! [`FP32_VERILOG`] is the one Verilog source of the FP32 operators: functions, one per pipeline stage, that a
//! unit's custom Verilog includes and chains through its own registers. Both operators round to nearest,
//! ties to even, with gradual underflow (subnormal inputs and results exactly as IEEE 754 says, as Rust's
//! `f32` computes them on x86 without FTZ/DAZ), overflow to infinity, the IEEE zero signs, and every NaN
//! result is the canonical NaN `0x7FC00000` (opu-hw canonicalizes every stored NaN, so payloads never
//! matter; the tests compare with `canon_f32(a op b)`).
//!
//! Pipelines (register stages from the operands' registers to the result register):
//!
//! - **multiply**, [`FMUL_LATENCY`] = 5: (1) decode, 24 x 24 significand product, exponent sum, special
//!   cases; (2) a product register (the DSP48E2 M/P pair: the product is two cascaded DSP48E2); (3) leading
//!   zeros of the 48-bit product and the normalizing shift (left by the leading zeros, or for a subnormal
//!   result the exponent-limited shift, right when negative); (4) the shift, guard and sticky bits; (5)
//!   rounding (the carry runs into the exponent field) and packing.
//! - **add / subtract**, [`FADD_LATENCY`] = 5: (1) decode, special cases, swap so that |x| >= |y|, exponent
//!   difference; (2) alignment of y with guard, round and sticky bits; (3) the 28-bit add or subtract and
//!   its leading zeros; (4) normalization (right by one on a carry, left by the leading zeros but not below
//!   the smallest exponent); (5) rounding and packing, as for the multiply.
//!
//! The stages are sized for 225 MHz on UltraScale+ (no stage has more than one carry chain or one barrel
//! shifter plus a few LUT levels); nothing here was placed and routed. Every stage value is at most 64 bits
//! wide (the significands travel in their own registers beside the side-band): Verilator keeps such values
//! in one machine word, which made the operators twice as fast to simulate as with 61..69-bit stage words.
//!
//! [`Graph`] schedules a dataflow of these operators and integer steps (written as Verilog expressions)
//! ASAP, inserts the delay registers that align operands, and emits the Verilog body; its latency is what the
//! units' Rust models delay their results by. [`Fp32`] is the operators alone (unit `fp32`), for the
//! co-simulation of add, subtract and multiply against Rust's `+`, `-`, `*`.

use crate::lane::ModelState;
use opu_hw::numerics::fp16::canon_f32;
use rust_hdl::prelude::*;
use std::collections::VecDeque;
use std::fmt::Write as _;

/// Register stages of an FP32 multiply (operand registers to result register).
pub const FMUL_LATENCY: u32 = 5;
/// Register stages of an FP32 add or subtract.
pub const FADD_LATENCY: u32 = 5;
/// The canonical NaN every NaN result is.
pub const NAN_BITS: u32 = 0x7FC0_0000;

/// The FP32 operator library (Verilog functions, one per pipeline stage; see the module docs). Function
/// locals never share a name with a port of the units that include it.
pub const FP32_VERILOG: &str = "\
// ---- FP32 operators (opu-rtl fp32.rs): IEEE binary32, round to nearest even, subnormals, NaN = 7FC00000 ----
// Leading zeros of a 64-bit vector (64 for zero).
function automatic [6:0] fp_lzc64(input [63:0] lzv);
   reg [63:0] lzw;
   reg [6:0] lzn;
   begin
      lzw = lzv;
      lzn = 7'd0;
      if (lzw[63:32] == 32'd0) begin lzn = lzn + 7'd32; lzw = {lzw[31:0], 32'd0}; end
      if (lzw[63:48] == 16'd0) begin lzn = lzn + 7'd16; lzw = {lzw[47:0], 16'd0}; end
      if (lzw[63:56] == 8'd0) begin lzn = lzn + 7'd8; lzw = {lzw[55:0], 8'd0}; end
      if (lzw[63:60] == 4'd0) begin lzn = lzn + 7'd4; lzw = {lzw[59:0], 4'd0}; end
      if (lzw[63:62] == 2'd0) begin lzn = lzn + 7'd2; lzw = {lzw[61:0], 2'd0}; end
      if (!lzw[63]) begin lzn = lzn + 7'd1; lzw = {lzw[62:0], 1'b0}; end
      if (!lzw[63]) lzn = lzn + 7'd1;
      fp_lzc64 = lzn;
   end
endfunction
// Round to nearest even and pack: exponent field minus one (the hidden bit m[23] adds it back; a carry
// out of m moves on into the exponent), significand, guard, sticky. Bits 31:23 of the result >= 255 mean
// overflow.
function automatic [31:0] fp_round(input [7:0] rnd_e, input [23:0] rnd_m, input rnd_g, input rnd_s);
   fp_round = {1'b0, rnd_e, 23'd0} + {8'd0, rnd_m} + {31'd0, rnd_g & (rnd_s | rnd_m[0])};
endfunction
// -- multiply (every stage value fits 64 bits: the product travels beside the side-band) --
// M1: {nan, inf, sign, es[9:0]}: es = sum of the exponents (subnormals read 1)
function automatic [12:0] fp_mul_s1(input [31:0] mla, input [31:0] mlb);
   reg a_nan, b_nan, a_inf, b_inf, a_zero, b_zero;
   begin
      a_nan = (mla[30:23] == 8'hFF) && (mla[22:0] != 23'd0);
      b_nan = (mlb[30:23] == 8'hFF) && (mlb[22:0] != 23'd0);
      a_inf = mla[30:0] == 31'h7F800000;
      b_inf = mlb[30:0] == 31'h7F800000;
      a_zero = mla[30:0] == 31'd0;
      b_zero = mlb[30:0] == 31'd0;
      fp_mul_s1 = {a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero), a_inf | b_inf, mla[31] ^ mlb[31],
                   {2'd0, (mla[30:23] == 8'd0) ? 8'd1 : mla[30:23]} + {2'd0, (mlb[30:23] == 8'd0) ? 8'd1 : mlb[30:23]}};
   end
endfunction
// the product of the significands (hidden bits explicit): the DSP48E2 pair
function automatic [47:0] fp_mul_p(input [31:0] mpa, input [31:0] mpb);
   reg [23:0] mps, mpt;
   begin
      mps = {mpa[30:23] != 8'd0, mpa[22:0]};
      mpt = {mpb[30:23] != 8'd0, mpb[22:0]};
      fp_mul_p = mps * mpt;
   end
endfunction
// M3: {nan, inf, sign, zero, ovf, ef[7:0], sh[7:0]} beside p: the result's biased exponent is
// er = es - 126 - lz; normal (er >= 1): shift left by lz, ef = er - 1; subnormal: shift by es - 127
// (negative: right), ef = 0. Either way the result's last significand bit lands on bit 24.
function automatic [20:0] fp_mul_s3(input [12:0] m1, input [47:0] m1p);
   reg [6:0] mlz;
   reg signed [11:0] mer;
   reg signed [11:0] msh;
   reg [7:0] mef;
   begin
      mlz = fp_lzc64({m1p, 16'hFFFF});
      mer = $signed({2'd0, m1[9:0]}) - 12'sd126 - $signed({5'd0, mlz});
      if (mer >= 12'sd1) begin
         msh = $signed({5'd0, mlz});
         mef = mer[7:0] - 8'd1;
      end else begin
         msh = $signed({2'd0, m1[9:0]}) - 12'sd127;
         mef = 8'd0;
      end
      fp_mul_s3 = {m1[12:10], m1p == 48'd0, mer >= 12'sd255, mef, msh[7:0]};
   end
endfunction
// M4: {nan, inf, sign, zero, ovf, ef[7:0], m[23:0], g, s}
function automatic [38:0] fp_mul_s4(input [20:0] m3, input [47:0] m3p);
   reg [47:0] msq;
   reg [7:0] mrs;
   reg mlost;
   begin
      mrs = 8'd0 - m3[7:0];
      if (!m3[7]) begin
         msq = m3p << m3[5:0];
         mlost = 1'b0;
      end else if (mrs >= 8'd48) begin
         msq = 48'd0;
         mlost = m3p != 48'd0;
      end else begin
         msq = m3p >> mrs[5:0];
         mlost = (m3p << (6'd48 - mrs[5:0])) != 48'd0;
      end
      fp_mul_s4 = {m3[20:8], msq[47:24], msq[23], (msq[22:0] != 23'd0) | mlost};
   end
endfunction
function automatic [31:0] fp_mul_s5(input [38:0] m4);
   reg [31:0] mpk;
   begin
      mpk = fp_round(m4[33:26], m4[25:2], m4[1], m4[0]);
      if (m4[38]) fp_mul_s5 = 32'h7FC00000;
      else if (m4[37]) fp_mul_s5 = {m4[36], 8'hFF, 23'd0};
      else if (m4[35]) fp_mul_s5 = {m4[36], 31'd0};
      else if (m4[34] || mpk[31:23] >= 9'd255) fp_mul_s5 = {m4[36], 8'hFF, 23'd0};
      else fp_mul_s5 = {m4[36], mpk[30:0]};
   end
endfunction
// -- add (subtract: flip the sign of the second operand first) --
// A1: {nan, inf, inf_sign, sx, sy, eff_sub, ex[7:0], d[4:0]} for x, y with |x| >= |y| (swapped by
// magnitude), d = min(ex - ey, 31) (subnormal exponents read 1); fp_add_g: the significands {mx, my}.
function automatic [18:0] fp_add_s1(input [31:0] ada, input [31:0] adb);
   reg [31:0] adx, ady;
   reg [7:0] aex, aey, add8;
   reg a_nan, b_nan, a_inf, b_inf;
   begin
      a_nan = (ada[30:23] == 8'hFF) && (ada[22:0] != 23'd0);
      b_nan = (adb[30:23] == 8'hFF) && (adb[22:0] != 23'd0);
      a_inf = ada[30:0] == 31'h7F800000;
      b_inf = adb[30:0] == 31'h7F800000;
      if (adb[30:0] > ada[30:0]) begin adx = adb; ady = ada; end
      else begin adx = ada; ady = adb; end
      aex = (adx[30:23] == 8'd0) ? 8'd1 : adx[30:23];
      aey = (ady[30:23] == 8'd0) ? 8'd1 : ady[30:23];
      add8 = aex - aey;
      fp_add_s1 = {a_nan | b_nan | (a_inf & b_inf & (ada[31] ^ adb[31])), a_inf | b_inf, a_inf ? ada[31] : adb[31],
                   adx[31], ady[31], adx[31] ^ ady[31], aex, (add8 > 8'd31) ? 5'd31 : add8[4:0]};
   end
endfunction
function automatic [47:0] fp_add_g(input [31:0] aga, input [31:0] agb);
   if (agb[30:0] > aga[30:0]) fp_add_g = {agb[30:23] != 8'd0, agb[22:0], aga[30:23] != 8'd0, aga[22:0]};
   else fp_add_g = {aga[30:23] != 8'd0, aga[22:0], agb[30:23] != 8'd0, agb[22:0]};
endfunction
// A2: {xx[26:0], yy[26:0]} beside {nan, inf, inf_sign, sx, sy, eff_sub, ex[7:0]}: the significands with
// guard, round and sticky bits, y shifted right by d (the bits shifted out ORed into its sticky bit).
function automatic [53:0] fp_add_s2(input [18:0] a1, input [47:0] a1g);
   reg [26:0] ayf, ays;
   reg alost;
   begin
      ayf = {a1g[23:0], 3'd0};
      if (a1[4:0] >= 5'd27) begin
         ays = 27'd0;
         alost = ayf != 27'd0;
      end else begin
         ays = ayf >> a1[4:0];
         alost = (ayf << (5'd27 - a1[4:0])) != 27'd0;
      end
      fp_add_s2 = {a1g[47:24], 3'd0, ays[26:1], ays[0] | alost};
   end
endfunction
// A3: {nan, inf, inf_sign, sx, sy, ex[7:0], z[27:0], lz[4:0]}: z = xx +- yy (never negative), lz its
// leading zeros.
function automatic [45:0] fp_add_s3(input [13:0] a2, input [53:0] a2g);
   reg [27:0] az;
   reg [6:0] alz;
   begin
      if (a2[8]) az = {1'b0, a2g[53:27]} - {1'b0, a2g[26:0]};
      else az = {1'b0, a2g[53:27]} + {1'b0, a2g[26:0]};
      alz = fp_lzc64({az, 36'hFFFFFFFFF});
      fp_add_s3 = {a2[13:9], a2[7:0], az, alz[4:0]};
   end
endfunction
// A4: {nan, inf, inf_sign, zero, zero_sign, sign, ef[7:0], m[23:0], g, s}: normalized (a carry: right by
// one; else left by lz - 1, but no further than exponent 1: then the result is subnormal, ef = 0). An
// exact zero takes the sign sx & sy (round to nearest).
function automatic [39:0] fp_add_s4(input [45:0] a3);
   reg [27:0] nz;
   reg [7:0] nex, nef;
   reg [26:0] nn;
   begin
      nz = a3[32:5];
      nex = a3[40:33];
      if (nz[27]) begin
         nn = {nz[27:2], nz[1] | nz[0]};
         nef = nex;
      end else if ({3'd0, a3[4:0]} <= nex) begin
         nn = nz[26:0] << (a3[4:0] - 5'd1);
         nef = nex - {3'd0, a3[4:0]};
      end else begin
         nn = nz[26:0] << (nex - 8'd1);
         nef = 8'd0;
      end
      fp_add_s4 = {a3[45:43], nz == 28'd0, a3[42] & a3[41], a3[42], nef, nn[26:3], nn[2], nn[1] | nn[0]};
   end
endfunction
function automatic [31:0] fp_add_s5(input [39:0] a4);
   reg [31:0] apk;
   begin
      apk = fp_round(a4[33:26], a4[25:2], a4[1], a4[0]);
      if (a4[39]) fp_add_s5 = 32'h7FC00000;
      else if (a4[38]) fp_add_s5 = {a4[37], 8'hFF, 23'd0};
      else if (a4[36]) fp_add_s5 = {a4[35], 31'd0};
      else if (apk[31:23] >= 9'd255) fp_add_s5 = {a4[34], 8'hFF, 23'd0};
      else fp_add_s5 = {a4[34], apk[30:0]};
   end
endfunction
// ---- end of FP32 operators ----
";

/// An FP32 operator of [`FP32_VERILOG`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpOp {
    Add,
    Sub,
    Mul,
}

impl FpOp {
    pub fn latency(self) -> u32 {
        match self {
            FpOp::Mul => FMUL_LATENCY,
            FpOp::Add | FpOp::Sub => FADD_LATENCY,
        }
    }

    /// What the operator computes, as Rust does it (NaN canonical).
    pub fn apply(self, a: f32, b: f32) -> f32 {
        canon_f32(match self {
            FpOp::Add => a + b,
            FpOp::Sub => a - b,
            FpOp::Mul => a * b,
        })
    }
}

/// The Verilog of one pipelined operator: `out = a op b` with `a`, `b` Verilog expressions (32 bits; for
/// [`FpOp::Sub`] `b` must be a plain signal name), the stage registers `out_1..out_4` (and `out_1p`..,
/// `out_1g`, `out_2g`: the significands beside them) and `out` declared.
/// `out` holds the result [`FpOp::latency`] edges after the edge that registered `a` and `b`.
pub fn fp_op_verilog(op: FpOp, out: &str, a: &str, b: &str) -> String {
    match op {
        FpOp::Mul => format!(
            "reg [12:0] {out}_1, {out}_2;\nreg [47:0] {out}_1p, {out}_2p, {out}_3p;\nreg [20:0] {out}_3;\n\
             reg [38:0] {out}_4;\nreg [31:0] {out};\n\
             always @(posedge clock) begin\n   {out}_1 <= fp_mul_s1({a}, {b});\n   {out}_1p <= fp_mul_p({a}, {b});\n   \
             {out}_2 <= {out}_1;\n   {out}_2p <= {out}_1p;\n   \
             {out}_3 <= fp_mul_s3({out}_2, {out}_2p);\n   {out}_3p <= {out}_2p;\n   \
             {out}_4 <= fp_mul_s4({out}_3, {out}_3p);\n   {out} <= fp_mul_s5({out}_4);\nend\n"
        ),
        FpOp::Add | FpOp::Sub => {
            let b = if op == FpOp::Sub { format!("{{~{b}[31], {b}[30:0]}}") } else { b.to_string() };
            format!(
                "reg [18:0] {out}_1;\nreg [47:0] {out}_1g;\nreg [13:0] {out}_2;\nreg [53:0] {out}_2g;\n\
                 reg [45:0] {out}_3;\nreg [39:0] {out}_4;\nreg [31:0] {out};\n\
                 always @(posedge clock) begin\n   {out}_1 <= fp_add_s1({a}, {b});\n   {out}_1g <= fp_add_g({a}, {b});\n   \
                 {out}_2 <= {out}_1[18:5];\n   {out}_2g <= fp_add_s2({out}_1, {out}_1g);\n   \
                 {out}_3 <= fp_add_s3({out}_2, {out}_2g);\n   {out}_4 <= fp_add_s4({out}_3);\n   {out} <= fp_add_s5({out}_4);\nend\n"
            )
        }
    }
}

/// A value of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Val(usize);

#[derive(Clone, Debug)]
enum Kind {
    /// A port, registered by the graph (time 1).
    Port(String),
    /// A signal of the surrounding Verilog, valid at the node's time.
    Signal(String),
    Const(u64),
    Fp(FpOp, Val, Val),
    /// A Verilog expression of the arguments (`#0`, `#1`, ... in the template), registered or a wire.
    Comb { args: Vec<Val>, template: String, registered: bool },
}

#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    width: u32,
    /// The edge (counting the one that registers the ports as 1) after which the value is valid.
    time: u32,
    /// The longest delay any consumer asked for.
    delay: u32,
}

/// A pipelined dataflow of FP32 operators and integer steps, scheduled as soon as possible: every node
/// starts when its last argument is ready, and earlier arguments are delayed by registers to meet it.
/// Values are Verilog signals named `{prefix}{id}` (delayed copies `{prefix}{id}_d{k}`).
#[derive(Clone, Debug)]
pub struct Graph {
    prefix: String,
    nodes: Vec<Node>,
    outputs: Vec<(String, Val, bool)>,
    /// The least [`Self::latency`] (a variant of a pipeline kept in step with the full one).
    min_latency: u32,
}

impl Graph {
    pub fn new(prefix: &str) -> Self {
        Graph { prefix: prefix.to_string(), nodes: Vec::new(), outputs: Vec::new(), min_latency: 0 }
    }

    fn push(&mut self, kind: Kind, width: u32, time: u32) -> Val {
        self.nodes.push(Node { kind, width, time, delay: 0 });
        Val(self.nodes.len() - 1)
    }

    /// Input port `name`, registered: valid at time 1.
    pub fn port(&mut self, name: &str, width: u32) -> Val {
        self.push(Kind::Port(name.into()), width, 1)
    }

    /// An existing signal of the surrounding Verilog, valid after edge `time` (later uses get delayed
    /// copies, like any other value).
    pub fn signal(&mut self, name: &str, width: u32, time: u32) -> Val {
        self.push(Kind::Signal(name.into()), width, time)
    }

    /// A constant.
    pub fn konst(&mut self, width: u32, value: u64) -> Val {
        self.push(Kind::Const(value), width, 0)
    }

    /// An FP32 constant.
    pub fn f32(&mut self, x: f32) -> Val {
        self.konst(32, u64::from(x.to_bits()))
    }

    pub fn fp(&mut self, op: FpOp, a: Val, b: Val) -> Val {
        let t = self.time(a).max(self.time(b)) + op.latency();
        self.push(Kind::Fp(op, a, b), 32, t)
    }
    pub fn add(&mut self, a: Val, b: Val) -> Val {
        self.fp(FpOp::Add, a, b)
    }
    pub fn sub(&mut self, a: Val, b: Val) -> Val {
        self.fp(FpOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: Val, b: Val) -> Val {
        self.fp(FpOp::Mul, a, b)
    }

    /// A `width`-bit Verilog expression of `args` (`#0`, `#1`, ... in `template`), registered (one stage) or
    /// combinational (a wire, no stage: keep these small, e.g. a multiplexer in front of an operator).
    pub fn comb(&mut self, width: u32, registered: bool, args: &[Val], template: &str) -> Val {
        let t = args.iter().map(|&a| self.time(a)).max().unwrap_or(0) + u32::from(registered);
        self.push(Kind::Comb { args: args.to_vec(), template: template.into(), registered }, width, t)
    }

    /// When `v` is valid.
    pub fn time(&self, v: Val) -> u32 {
        self.nodes[v.0].time
    }

    /// Drives output `name` (a port of the unit, or with `declare` a register the graph declares) with `v`.
    /// All outputs are registered together at [`Self::latency`].
    pub fn output(&mut self, name: &str, v: Val, declare: bool) {
        self.outputs.push((name.into(), v, declare));
    }

    /// The edge after which the outputs are valid: one register after the last of them. A value on the
    /// ports before edge `t` is on the outputs after edge `t + latency - 1`.
    pub fn latency(&self) -> u32 {
        (self.outputs.iter().map(|o| self.time(o.1)).max().expect("graph without outputs") + 1).max(self.min_latency)
    }

    /// Delays the outputs so that [`Self::latency`] is at least `latency`.
    pub fn pad_latency(&mut self, latency: u32) {
        self.min_latency = latency;
    }

    fn name(&self, v: Val) -> String {
        match &self.nodes[v.0].kind {
            Kind::Signal(s) => s.clone(),
            _ => format!("{}{}", self.prefix, v.0),
        }
    }

    /// The name of `v` as valid at edge `t` (a delayed copy when `t` is later than its time).
    fn at(&mut self, v: Val, t: u32) -> String {
        let (time, is_const) = (self.nodes[v.0].time, matches!(self.nodes[v.0].kind, Kind::Const(_)));
        assert!(t >= time || is_const, "value used before it is valid");
        if is_const || t <= time {
            return self.name(v);
        }
        let k = t - time;
        let n = &mut self.nodes[v.0];
        n.delay = n.delay.max(k);
        format!("{}{}_d{k}", self.prefix, v.0)
    }

    /// The Verilog: declarations, operators, delay lines, outputs. Needs [`FP32_VERILOG`] (once per module)
    /// and the `clock` input.
    pub fn verilog(&self) -> String {
        let mut g = self.clone();
        let mut body = String::new();
        let mut decl = String::new();
        for i in 0..g.nodes.len() {
            let v = Val(i);
            let (kind, width, time) = (g.nodes[i].kind.clone(), g.nodes[i].width, g.nodes[i].time);
            let name = g.name(v);
            let w = width - 1;
            match kind {
                Kind::Port(p) => {
                    let _ = writeln!(decl, "reg [{w}:0] {name};");
                    let _ = writeln!(body, "always @(posedge clock) {name} <= {p};");
                }
                Kind::Signal(_) => {}
                Kind::Const(c) => {
                    let _ = writeln!(decl, "wire [{w}:0] {name};");
                    let _ = writeln!(body, "assign {name} = {width}'h{c:X};");
                }
                Kind::Fp(op, a, b) => {
                    let start = time - op.latency();
                    let (a, b) = (g.at(a, start), g.at(b, start));
                    body.push_str(&fp_op_verilog(op, &name, &a, &b));
                }
                Kind::Comb { args, template, registered } => {
                    let start = time - u32::from(registered);
                    let names: Vec<String> = args.iter().map(|&a| g.at(a, start)).collect();
                    let mut e = template.clone();
                    for (k, n) in names.iter().enumerate().rev() {
                        e = e.replace(&format!("#{k}"), n);
                    }
                    if registered {
                        let _ = writeln!(decl, "reg [{w}:0] {name};");
                        let _ = writeln!(body, "always @(posedge clock) {name} <= {e};");
                    } else {
                        let _ = writeln!(decl, "wire [{w}:0] {name};");
                        let _ = writeln!(body, "assign {name} = {e};");
                    }
                }
            }
        }
        let last = g.latency() - 1;
        let outs = g.outputs.clone();
        for (port, v, declare) in outs {
            let src = g.at(v, last);
            if declare {
                let _ = writeln!(decl, "reg [{}:0] {port};", g.nodes[v.0].width - 1);
            }
            let _ = writeln!(body, "always @(posedge clock) {port} <= {src};");
        }
        for i in 0..g.nodes.len() {
            let n = &g.nodes[i];
            if n.delay == 0 {
                continue;
            }
            let base = g.name(Val(i));
            let name = format!("{}{i}", g.prefix);
            let w = n.width - 1;
            let regs: Vec<String> = (1..=n.delay).map(|k| format!("{name}_d{k}")).collect();
            let _ = writeln!(decl, "reg [{w}:0] {};", regs.join(", "));
            let mut chain = format!("always @(posedge clock) begin\n   {name}_d1 <= {base};\n");
            for k in 2..=n.delay {
                let _ = writeln!(chain, "   {name}_d{k} <= {name}_d{};", k - 1);
            }
            chain.push_str("end\n");
            body.push_str(&chain);
        }
        format!("{decl}{body}")
    }

    /// FP32 operators of each kind in the graph: (multiplies, adds and subtracts).
    pub fn operator_counts(&self) -> (usize, usize) {
        let count = |f: &dyn Fn(FpOp) -> bool| {
            self.nodes.iter().filter(|n| matches!(n.kind, Kind::Fp(op, _, _) if f(op))).count()
        };
        (count(&|op| op == FpOp::Mul), count(&|op| op != FpOp::Mul))
    }
}

/// Register stages of [`Fp32`]: input registers, the operator, output registers.
pub const FP32_UNIT_LATENCY: usize = 2 + FADD_LATENCY as usize;

/// The FP32 operators alone (unit `fp32`): `y_add = a + b`, `y_sub = a - b`, `y_mul = a * b` of the same
/// operands, [`FP32_UNIT_LATENCY`] register stages (the co-simulation harness of [`FP32_VERILOG`]).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Fp32 {
    pub clock: Signal<In, Clock>,
    pub a: Signal<In, Bits<32>>,
    pub b: Signal<In, Bits<32>>,
    pub y_add: Signal<Out, Bits<32>>,
    pub y_sub: Signal<Out, Bits<32>>,
    pub y_mul: Signal<Out, Bits<32>>,
    pipe: ModelState<VecDeque<[u32; 3]>>,
}

/// The graph of [`Fp32`].
fn fp32_graph() -> Graph {
    let mut g = Graph::new("f");
    let a = g.port("a", 32);
    let b = g.port("b", 32);
    let s = g.add(a, b);
    let d = g.sub(a, b);
    let p = g.mul(a, b);
    g.output("y_add", s, false);
    g.output("y_sub", d, false);
    g.output("y_mul", p, false);
    g
}

impl Logic for Fp32 {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let q = &mut self.pipe.0;
        if q.is_empty() {
            q.extend(std::iter::repeat_n([0; 3], FP32_UNIT_LATENCY));
        }
        let (a, b) = (f32::from_bits(self.a.val().to_u32()), f32::from_bits(self.b.val().to_u32()));
        q.push_back([FpOp::Add, FpOp::Sub, FpOp::Mul].map(|op| op.apply(a, b).to_bits()));
        q.pop_front();
        let y = q[0];
        self.y_add.next = u64::from(y[0]).into();
        self.y_sub.next = u64::from(y[1]).into();
        self.y_mul.next = u64::from(y[2]).into();
    }
    fn connect(&mut self) {
        self.y_add.connect();
        self.y_sub.connect();
        self.y_mul.connect();
    }
    fn hdl(&self) -> Verilog {
        let g = fp32_graph();
        debug_assert_eq!(g.latency() as usize, FP32_UNIT_LATENCY);
        Verilog::Custom(format!("{FP32_VERILOG}{}", g.verilog()))
    }
}

/// [`Fp32`] ready to simulate or emit.
pub fn fp32_top() -> Fp32 {
    connect_top!(Fp32::default(), clock, a, b)
}

/// FP32 bit patterns of the cases the operators must get right: zeros of both signs, the smallest,
/// largest and some middle subnormals, the smallest normal and its neighbours, the largest finite values,
/// powers of two and their neighbours (ties and carries into the next binade), infinities, NaN with
/// several payloads and both signs, and values whose products or sums overflow or underflow.
pub fn edge_values() -> Vec<u32> {
    let mut v = vec![
        0x0000_0000, 0x0000_0001, 0x0000_0002, 0x0000_0003, 0x0040_0000, 0x0055_5555, 0x007F_FFFF, 0x007F_FFFE,
        0x0080_0000, 0x0080_0001, 0x00FF_FFFF, 0x0100_0000, 0x3F80_0000, 0x3F80_0001, 0x3F7F_FFFF, 0x3FFF_FFFF,
        0x4000_0000, 0x3F00_0000, 0x3400_0000, 0x3380_0000, 0x3300_0000, 0x4B40_0000, 0x4B80_0000, 0x5F80_0000,
        0x1F80_0000, 0x2000_0000, 0x7F7F_FFFF, 0x7F7F_FFFE, 0x7F00_0000, 0x7E80_0000, 0x0C00_0000, 0x3FC0_0000,
        0x3FA0_0000, 0x4040_0000, 0x42B2_0000, 0x42B1_FFFF, 0x42B2_0001, 0x42B1_7218, 0x42AE_AC50, 0x3E2A_AAAB,
        0x7F80_0000, 0x7FC0_0000, 0x7F80_0001, 0x7FFF_FFFF, 0x7FA0_0000,
    ];
    let neg: Vec<u32> = v.iter().map(|b| b ^ 0x8000_0000).collect();
    v.extend(neg);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp32_unit_latency_matches_its_graph() {
        assert_eq!(fp32_graph().latency() as usize, FP32_UNIT_LATENCY);
    }

    #[test]
    fn graph_delays_the_earlier_operand() {
        let mut g = Graph::new("n");
        let a = g.port("a", 32);
        let b = g.port("b", 32);
        let p = g.mul(a, b);
        let s = g.add(p, a);
        g.output("y", s, false);
        assert_eq!(g.time(p), 1 + FMUL_LATENCY);
        assert_eq!(g.latency(), 2 + FMUL_LATENCY + FADD_LATENCY);
        let v = g.verilog();
        assert!(v.contains(&format!("n0_d{FMUL_LATENCY}")), "{v}");
    }
}

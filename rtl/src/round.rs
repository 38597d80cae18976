//! The output rounding of the 96-bit accumulators ([`WideAcc::to_f16`], [`WideAcc::to_f32`]): nearest, ties to
//! even, FP16 with subnormals and overflow to infinity, the canonical NaN when the non-finite flag is set.
//!
//! [`ROUND_VERILOG`] holds the Verilog functions and [`round_stages`] their register stages (the router's
//! logits use both); [`Round`] is a unit of its own:
//! the PE array's output stage, one accumulator per cycle, [`ROUND_LATENCY`] = 4 register stages (the
//! magnitude; its leading one; the shift that aligns it; round and pack), both formats at once. (Until
//! 2026-12-06 the first three were one stage, 12.0 ns by the estimate against the 4.44 ns of 225 MHz: a
//! 96-bit negation, a 96-bit leading-one search and a 96-bit barrel shift in a row.)
//!
//! The accumulator holds `v * 2^-32`, |v| < 2^95: every nonzero value is a normal FP32 (2^-32 .. 2^63), so
//! FP32 has no subnormal or overflow path; FP16 has both.

use crate::lane::{acc_value, ModelState, ACC_BITS};
use opu_hw::numerics::acc::WideAcc;
use rust_hdl::prelude::*;
use std::collections::VecDeque;

/// Register stages of [`Round`].
pub const ROUND_LATENCY: usize = 4;

/// The Verilog rounding functions, a register stage each: `acc_mag` (the magnitude), `acc_msb` (its leading
/// one), `acc_align` (the magnitude shifted so that the bit of weight 2^(max(msb, kmin)) is bit 95),
/// `acc_round_f32` and `acc_round_f16` (round and pack).
pub const ROUND_VERILOG: &str = "\
// |v| (2^95 for the most negative v, as an unsigned 96-bit value)
function automatic [95:0] acc_mag(input signed [95:0] v);
   acc_mag = v[95] ? -v : v;
endfunction
// the leading one's position of mag (0 for zero), as a tree: each byte's leading one, and the highest nonzero
// byte (a priority chain over the 96 bits maps to a chain of multiplexers: 8.7 ns by the estimate)
function automatic [6:0] acc_msb(input [95:0] mag);
   reg [11:0] nz;
   reg [35:0] pos;
   reg [3:0] hi;
   integer g, i;
   begin
      for (g = 0; g < 12; g = g + 1) begin
         nz[g] = |mag[8 * g +: 8];
         pos[3 * g +: 3] = 3'd0;
         for (i = 0; i < 8; i = i + 1)
            if (mag[8 * g + i]) pos[3 * g +: 3] = i[2:0];
      end
      hi = 4'd0;
      for (g = 0; g < 12; g = g + 1)
         if (nz[g]) hi = g[3:0];
      acc_msb = {hi, pos[3 * hi +: 3]};
   end
endfunction
// mag << (95 - max(msb, kmin)): position max(msb, kmin) at bit 95 (kmin: the lowest position a normal number
// of the format can lead at)
function automatic [95:0] acc_align(input [95:0] mag, input [6:0] msb, input [6:0] kmin);
   acc_align = mag << (7'd95 - ((msb < kmin) ? kmin : msb));
endfunction
// FP32 (kmin 0: every nonzero value is normal): 24 bits kept, nearest even; leading one at 2^(msb - 32)
function automatic [31:0] acc_round_f32(input sign, input [6:0] msb, input [95:0] norm);
   reg [24:0] m;
   reg [7:0] e;
   reg up;
   begin
      up = norm[71] && ((|norm[70:0]) || norm[72]);
      m = {1'b0, norm[95:72]} + {24'd0, up};
      e = {1'b0, msb} + 8'd95 + {7'd0, m[24]};
      if (norm[95] == 1'b0) acc_round_f32 = 32'd0;
      else acc_round_f32 = {sign, e, m[24] ? m[23:1] : m[22:0]};
   end
endfunction
// FP16 (kmin 18: 2^(18 - 32) = 2^-14 is the smallest normal): 11 bits kept from position k = max(msb, 18),
// nearest even (a nonzero value that rounds to nothing is a zero of its sign); below 2^-14 the result is subnormal (exponent field 0), a carry out of the 11 bits moves the
// exponent up (or a subnormal up to the smallest normal), and an exponent field of 31 or more is infinity.
function automatic [15:0] acc_round_f16(input sign, input [6:0] msb, input [95:0] norm);
   reg [11:0] m;
   reg [7:0] e;
   reg up;
   reg [6:0] k;
   begin
      k = (msb < 7'd18) ? 7'd18 : msb;
      up = norm[84] && ((|norm[83:0]) || norm[85]);
      m = {1'b0, norm[95:85]} + {11'd0, up};
      // biased exponent of the leading position k: k - 32 + 15
      e = {1'b0, k} - 8'd17 + {7'd0, m[11]};
      if (norm == 96'd0) acc_round_f16 = 16'd0;
      else if (m == 12'd0) acc_round_f16 = {sign, 15'd0};
      else if (m[11] == 1'b0 && m[10] == 1'b0) acc_round_f16 = {sign, 5'd0, m[9:0]};
      else if (e >= 8'd31) acc_round_f16 = {sign, 5'd31, 10'd0};
      else acc_round_f16 = {sign, e[4:0], m[11] ? m[10:1] : m[9:0]};
   end
endfunction
";

/// The Verilog of [`ROUND_LATENCY`] register stages that round one accumulator (the functions of
/// [`ROUND_VERILOG`], a stage each): from `acc` (a signed 96-bit expression) and its non-finite flag `nf` to
/// the FP32 bits in register `out32` and, given `out16`, the FP16 bits in it (NaN where `nf`). Returns the
/// declarations of its registers (named from `p`) and the statements of a clocked block. The output stage
/// ([`Round`]) and the router's logits use it.
pub fn round_stages(p: &str, acc: &str, nf: &str, out32: &str, out16: Option<&str>) -> (String, String) {
    let mut decl = vec![
        format!("reg [95:0] {p}m1, {p}m2, {p}a32;"),
        format!("reg [6:0] {p}k2, {p}k3;"),
        format!("reg {p}sign1, {p}sign2, {p}sign3, {p}nf1, {p}nf2, {p}nf3;"),
    ];
    let mut body = vec![
        // the magnitude
        format!("{p}m1 <= acc_mag({acc});"),
        format!("{p}sign1 <= {acc}[95];"),
        format!("{p}nf1 <= {nf};"),
        // its leading one
        format!("{p}m2 <= {p}m1;"),
        format!("{p}k2 <= acc_msb({p}m1);"),
        format!("{p}sign2 <= {p}sign1;"),
        format!("{p}nf2 <= {p}nf1;"),
        // the shift
        format!("{p}a32 <= acc_align({p}m2, {p}k2, 7'd0);"),
        format!("{p}k3 <= {p}k2;"),
        format!("{p}sign3 <= {p}sign2;"),
        format!("{p}nf3 <= {p}nf2;"),
        // round and pack
        format!("{out32} <= {p}nf3 ? 32'h7FC00000 : acc_round_f32({p}sign3, {p}k3, {p}a32);"),
    ];
    if let Some(out16) = out16 {
        decl.push(format!("reg [95:0] {p}a16;"));
        body.push(format!("{p}a16 <= acc_align({p}m2, {p}k2, 7'd18);"));
        body.push(format!("{out16} <= {p}nf3 ? 16'h7E00 : acc_round_f16({p}sign3, {p}k3, {p}a16);"));
    }
    let decl: String = decl.iter().map(|l| format!("{l}\n")).collect();
    let body: String = body.iter().map(|l| format!("   {l}\n")).collect();
    (decl, body)
}

/// The output stage: `acc` (96 bits, 2^-32 units) and `nf` in, `f16` and `f32` (bits) out
/// [`ROUND_LATENCY`] edges later.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Round {
    pub clock: Signal<In, Clock>,
    pub acc: Signal<In, Signed<ACC_BITS>>,
    pub nf: Signal<In, Bit>,
    pub f16: Signal<Out, Bits<16>>,
    pub f32: Signal<Out, Bits<32>>,
    pipe: ModelState<VecDeque<(u16, u32)>>,
}

impl Logic for Round {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let q = &mut self.pipe.0;
        if q.is_empty() {
            // registers start at zero: the +0 of both formats
            q.extend(std::iter::repeat_n((0, 0), ROUND_LATENCY));
        }
        let a = WideAcc { fixed: acc_value(self.acc.val()), nonfinite: self.nf.val() };
        q.push_back((a.to_f16(), a.to_f32().to_bits()));
        q.pop_front();
        let (h, f) = q[0];
        self.f16.next = u64::from(h).into();
        self.f32.next = u64::from(f).into();
    }
    fn connect(&mut self) {
        self.f16.connect();
        self.f32.connect();
    }
    fn hdl(&self) -> Verilog {
        let (decl, body) = round_stages("", "acc", "nf", "f32", Some("f16"));
        Verilog::Custom(format!("{ROUND_VERILOG}{decl}always @(posedge clock) begin\n{body}end\n"))
    }
}

/// [`Round`] ready to simulate or emit.
pub fn round_top() -> Round {
    connect_top!(Round::default(), clock, acc, nf)
}

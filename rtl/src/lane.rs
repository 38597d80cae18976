//! The hybrid PE lane: two output rows, 32 FP16-activation x low-bit-weight products per cycle on 16 DSP48E2,
//! plus 4 for the block epilogue's scale multiplies,
//! and the block epilogue that turns each block's exact integer sums into accumulator terms.
//!
//! docs/numerics.md "Hybrid block dot product", [`dot::accumulate_block`]: per block of 32 columns the
//! activations arrive aligned ([`align::align_block`], done once for the whole array and broadcast) as
//! 16-bit mantissas `a_j` with block exponent `X`, non-finite flag and mantissa sum `S_a`; the lane computes
//! `S_q = sum a_j q_j` exactly and adds `d * S_q * 2^X` (and `m * S_a * 2^X` for W4Min) to a 96-bit
//! accumulator per row ([`WideAcc`]). docs/rtl.md has the pipeline.
//!
//! A block takes two cycles (columns 0..16, then 16..32). Per cycle:
//!
//! - **W4Min / W4** (weight nibbles 0..=15; W4's `q = nibble - 8` is applied after the sum as
//!   `S_q = S_u - 8 S_a`): each DSP48E2 multiplies one activation by the nibbles of both rows, packed
//!   `w4x2u` (port A = `w1 << 22 | w0`, [`packing::pack_w4x2u`]); with a 3-bit side product
//!   ([`packing::lut_mul_lo`]) per DSP. 32 products per cycle on 16 DSPs: packing factor 2.
//! - **W8**: each DSP multiplies one activation by one signed 8-bit weight of one row (`row` selects it):
//!   a block of both rows takes four cycles, 16 products per cycle: packing factor 1.
//!
//! The 16 packed products are summed, in threes by the DSP48E2 post-adders (cascade and C port: the
//! primitive is instantiated, with a stand-in for Verilator, [`DSP48E2_STAND_IN`]) and the six sums in
//! fabric (the packed sum is linear: the fields stay separable up to [`packing::W4X2U_MAX_DEPTH`] = 34
//! columns), the two halves of a block are added, and the
//! extraction ([`packing::unpack_fields`], stride 22, t = 3) gives both rows' exact sums. The epilogue
//! multiplies them by the FP16 significands of `d` (and `m`), signed and shifted left by the low 4 bits of the
//! term's shift onto the accumulator grid, in two DSP48E2 per row (a 29 x 27-bit product: `S`'s low 17 bits
//! and its high 12), then shifts the term by the rest (a multiple of 16: a 5-way multiplexer per bit), floors
//! it onto the grid and adds. One term unit per row, shared by the d-term and (a cycle later) the m-term: a
//! block takes two cycles anyway. (Until 2026-12-06 the multiplies were shift-and-add in fabric and the shift
//! a 7-level shifter: 4,484 LUTs per lane by yosys, 2,776 now, for 4 more DSP48E2.)
//!
//! - [`LaneProducts`]: the 16 DSPs and their sum (5 register stages).
//! - [`LaneEpilogue`]: half-block sum, extraction, terms, accumulators (5 more register stages for W4Min's
//!   m-terms, 4 for the d-terms).
//! - [`Lane`]: both. [`LANE_LATENCY`] edges from a block's last half to its accumulators.
//!
//! Each leaf's `update()` (what rust-hdl simulates) is written with [`packing`] and
//! [`dot::accumulate_block_sums`]; its Verilog by hand. The tests compare the Verilog with
//! [`dot::accumulate_block`] on aligned FP16 blocks.

use crate::dsp::{i64_to_signed, signed_to_i64, P_BITS};
use opu_hw::numerics::acc::WideAcc;
#[cfg(doc)]
use opu_hw::numerics::{align, dot::accumulate_block};
use opu_hw::numerics::dot;
use opu_hw::numerics::packing::{self, W4X2_ACC_T, W4X2_STRIDE};
use opu_hw::numerics::weights::WeightFormat;
use rust_hdl::prelude::*;
use std::collections::VecDeque;

/// DSP48E2 per lane (columns per cycle).
pub const LANE_DSPS: usize = 16;
/// Width of one aligned activation mantissa on the bus.
pub const X_BITS: usize = 16;
/// The activation bus: `LANE_DSPS` mantissas, column `k` at bits `16k..16k+16`.
pub const X_BUS: usize = LANE_DSPS * X_BITS;
/// The weight bus: per DSP 8 bits (W4: row 0's nibble low, row 1's high; W8: the selected row's int8).
pub const W_BUS: usize = LANE_DSPS * 8;
/// Width of the accumulators (opu-hw's).
pub const ACC_BITS: usize = opu_hw::numerics::acc::ACC_BITS as usize;
/// Width of `S_a` (|S_a| <= 32 * 32767 < 2^20).
pub const SA_BITS: usize = 21;
/// Register stages of [`LaneProducts`] (input, P, the triples' post-adds 16->6, fabric pairs 6->3, 3->1).
pub const PRODUCTS_LATENCY: usize = 5;
// The epilogue's Verilog delays the side-band by five registers (`sb0` .. `sb4`) to meet `psum`.
const _: () = assert!(PRODUCTS_LATENCY == 5);
/// Register stages of the epilogue after the products (half sum + extraction, terms, shift, accumulate), plus
/// one because W4Min's m-terms follow the d-terms through the shared term units a cycle later.
pub const EPILOGUE_LATENCY: usize = 5;
/// A block whose last half entered the lane at edge `t` is in the accumulators after edge
/// `t + LANE_LATENCY - 1` (W4Min; one edge earlier for W4 and W8).
pub const LANE_LATENCY: usize = PRODUCTS_LATENCY + EPILOGUE_LATENCY;
/// Products per cycle per DSP48E2 of the lane, by weight mode.
pub const PACKING_W4: usize = 2;
pub const PACKING_W8: usize = 1;

/// Plain Rust state of a leaf's model: invisible to rust-hdl (no signals, no Verilog) and changed only in
/// `update()` on a clock edge (rust-hdl reports `pos_edge()` in exactly one update per edge).
#[derive(Clone, Debug, Default)]
pub struct ModelState<T>(pub T);

impl<T> Logic for ModelState<T> {
    fn update(&mut self) {}
}

impl<T> Block for ModelState<T> {
    fn connect_all(&mut self) {}
    fn update_all(&mut self) {}
    fn has_changed(&self) -> bool {
        false
    }
    fn accept(&self, _name: &str, _probe: &mut dyn Probe) {}
}

/// The lane's weight mode ([`WeightFormat::code`]); F16 is not a lane mode (the lane ignores such blocks).
fn mode_of(code: u64) -> Option<WeightFormat> {
    WeightFormat::from_code(code as u8).filter(|f| *f != WeightFormat::F16)
}

/// Packs `LANE_DSPS` activation mantissas into the `x` bus.
pub fn x_bus(x: &[i16]) -> Bits<X_BUS> {
    assert_eq!(x.len(), LANE_DSPS);
    let mut b = Bits::<X_BUS>::default();
    for (k, &v) in x.iter().enumerate() {
        b.set_bits::<16>(16 * k, Bits::<16>::from(u64::from(v as u16)));
    }
    b
}

/// Packs the weight bus from `LANE_DSPS` bytes (see [`W_BUS`]).
pub fn w_bus(w: &[u8]) -> Bits<W_BUS> {
    assert_eq!(w.len(), LANE_DSPS);
    let mut b = Bits::<W_BUS>::default();
    for (k, &v) in w.iter().enumerate() {
        b.set_bits::<8>(8 * k, Bits::<8>::from(u64::from(v)));
    }
    b
}

/// A signed 96-bit accumulator value as rust-hdl bits (two's complement, wrapped to 96 bits).
pub fn acc_bits(fixed: i128) -> Signed<ACC_BITS> {
    let u = fixed as u128;
    let mut b = Bits::<ACC_BITS>::default();
    b.set_bits::<64>(0, Bits::<64>::from(u as u64));
    b.set_bits::<32>(64, Bits::<32>::from((u >> 64) as u64 & 0xFFFF_FFFF));
    signed_cast(b)
}

/// The value of a 96-bit accumulator signal.
pub fn acc_value(v: Signed<ACC_BITS>) -> i128 {
    let u = unsigned_cast(v).to_u128();
    ((u << 32) as i128) >> 32
}

/// The packed sum of one cycle's products: what the adder tree delivers (P mod 2^48, side bits mod 8).
pub fn cycle_products(mode: u64, x: &[i16; LANE_DSPS], w: &[u8; LANE_DSPS]) -> (i64, i64) {
    let mut psum = 0i64;
    let mut side = 0i64;
    for (&xk, &wk) in x.iter().zip(w) {
        if mode_of(mode) == Some(WeightFormat::W8) {
            let a = i64::from(wk as i8);
            psum = packing::dsp_acc48(psum, packing::dsp_mul27x18(a, i64::from(xk)));
        } else {
            let (a, b) = packing::pack_w4x2u([wk & 15, wk >> 4], xk);
            psum = packing::dsp_acc48(psum, packing::dsp_mul27x18(a, b));
            side = (side + packing::lut_mul_lo(i64::from(xk), i64::from(wk >> 4), W4X2_ACC_T)) & 7;
        }
    }
    (psum, side)
}

/// The 16 DSP48E2 and their sum. Inputs are registered, products in P (edge 2), in triples summed by the DSPs'
/// post-adders (edge 3), the six sums then in fabric (edges 4 and 5): `psum`/`side` show [`cycle_products`]
/// of the inputs `PRODUCTS_LATENCY` edges after the edge that took them.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct LaneProducts {
    pub clock: Signal<In, Clock>,
    pub mode: Signal<In, Bits<2>>,
    pub x: Signal<In, Bits<X_BUS>>,
    pub w: Signal<In, Bits<W_BUS>>,
    pub psum: Signal<Out, Signed<P_BITS>>,
    pub side: Signal<Out, Bits<3>>,
    pipe: ModelState<VecDeque<(i64, i64)>>,
}

impl Logic for LaneProducts {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let xb = self.x.val();
            let wb = self.w.val();
            let x: [i16; LANE_DSPS] = std::array::from_fn(|k| xb.get_bits::<16>(16 * k).to_u64() as u16 as i16);
            let w: [u8; LANE_DSPS] = std::array::from_fn(|k| wb.get_bits::<8>(8 * k).to_u64() as u8);
            let q = &mut self.pipe.0;
            if q.is_empty() {
                q.extend(std::iter::repeat_n((0, 0), PRODUCTS_LATENCY));
            }
            q.push_back(cycle_products(self.mode.val().to_u64(), &x, &w));
            q.pop_front();
            let (p, s) = q[0];
            self.psum.next = i64_to_signed(p);
            self.side.next = (s as u64).into();
        }
    }
    fn connect(&mut self) {
        self.psum.connect();
        self.side.connect();
    }
    fn hdl(&self) -> Verilog {
        // One DSP48E2 primitive per column (port A W4: {0, w1, 18'b0, w0}; W8: sext27(w)), in triples that
        // add in the DSPs' post-adders (yosys 0.23 leaves a behavioural `a * b + c` in fabric): `a` and `b`
        // give P = A * B at edge 2; `c` registers its operands once more (AREG = BREG = 1) and gives, at edge
        // 3, P = A * B + PCIN (a's P, the dedicated cascade) + C (b's P). Five triples and DSP 15 (registered
        // once more, P at edge 3) leave six sums: added in pairs (edge 4), then the three (edge 5). (A sum of
        // six in one stage is a `$macc` to yosys, which maps it as a compressor tree of about 800 LUTs; two
        // stages of at most three operands are carry chains, about 150.) The side product x[2:0] * w1[2:0]
        // (mod 8) is a 3x3 LUT multiply. `x_r`, `w_r`: the input registers.
        Verilog::Custom(format!(
            "\
reg [{xb}:0] x_r;
reg [{wb}:0] w_r;
reg [1:0] mode_r;
wire [{pf}:0] p_all;
wire [{sf}:0] s_all;
reg [2:0] u0, u1, u2, u3, side_r;
reg [47:0] s01, s23, s45;
genvar g;
generate for (g = 0; g < {n}; g = g + 1) begin : dsp
   wire signed [15:0] xg;
   wire [7:0] wg;
   wire signed [26:0] port_a;
   wire signed [17:0] port_b;
   wire [47:0] p;
   wire [47:0] pcout;
   reg [2:0] lo;
   assign xg = x_r[16*g +: 16];
   assign wg = w_r[8*g +: 8];
   assign port_a = (mode_r == 2'd2) ? {{{{19{{wg[7]}}}}, wg}} : {{1'b0, wg[7:4], 18'b0, wg[3:0]}};
   assign port_b = {{{{2{{xg[15]}}}}, xg}};
   // c of a triple, and DSP 15: operands registered once more in the DSP
   localparam integer R = (g % 3 == 2 || g == {last}) ? 1 : 0;
   // c: W = C (b's P), Z = PCIN (a's P), X + Y = M; the others: P = M
   localparam [8:0] OPM = (g % 3 == 2) ? 9'b11_001_0101 : 9'b00_000_0101;
   wire [47:0] c_in;
   wire [47:0] pc_in;
   if (g % 3 == 2) begin : sum
      assign c_in = dsp[g - 1].p;
      assign pc_in = dsp[g - 2].pcout;
   end else begin : alone
      assign c_in = 48'd0;
      assign pc_in = 48'd0;
   end
   DSP48E2 #(.AREG(R), .BREG(R), .ACASCREG(R), .BCASCREG(R), .CREG(0), .MREG(0), .PREG(1), .ADREG(0), .DREG(0),
      .INMODEREG(0), .OPMODEREG(0), .ALUMODEREG(0), .CARRYINREG(0), .CARRYINSELREG(0), .USE_MULT(\"MULTIPLY\"),
      .AMULTSEL(\"A\"), .BMULTSEL(\"B\"), .A_INPUT(\"DIRECT\"), .B_INPUT(\"DIRECT\"), .USE_SIMD(\"ONE48\"))
   dsp48(.CLK(clock), .A({{{{3{{port_a[26]}}}}, port_a}}), .B(port_b), .C(c_in), .D(27'd0), .PCIN(pc_in),
      .OPMODE(OPM), .ALUMODE(4'd0), .INMODE(5'd0), .CARRYINSEL(3'd0), .CARRYIN(1'b0),
      .CEA1(1'b1), .CEA2(1'b1), .CEB1(1'b1), .CEB2(1'b1), .CEC(1'b1), .CED(1'b1), .CEAD(1'b1), .CEM(1'b1),
      .CEP(1'b1), .CECTRL(1'b1), .CEINMODE(1'b1), .CEALUMODE(1'b1), .CECARRYIN(1'b1),
      .RSTA(1'b0), .RSTB(1'b0), .RSTC(1'b0), .RSTD(1'b0), .RSTM(1'b0), .RSTP(1'b0), .RSTCTRL(1'b0),
      .RSTINMODE(1'b0), .RSTALUMODE(1'b0), .RSTALLCARRYIN(1'b0), .P(p), .PCOUT(pcout));
   always @(posedge clock) lo <= (mode_r == 2'd2) ? 3'd0 : xg[2:0] * wg[6:4];
   assign p_all[48*g +: 48] = p;
   assign s_all[3*g +: 3] = lo;
end endgenerate
always @(posedge clock) begin
   x_r <= x;
   w_r <= w;
   mode_r <= mode;
   u0 <= s_all[2:0] + s_all[5:3] + s_all[8:6] + s_all[11:9];
   u1 <= s_all[14:12] + s_all[17:15] + s_all[20:18] + s_all[23:21];
   u2 <= s_all[26:24] + s_all[29:27] + s_all[32:30] + s_all[35:33];
   u3 <= s_all[38:36] + s_all[41:39] + s_all[44:42] + s_all[47:45];
   s01 <= p_all[143:96] + p_all[287:240];
   s23 <= p_all[431:384] + p_all[575:528];
   s45 <= p_all[719:672] + p_all[767:720];
   psum <= s01 + s23 + s45;
   side_r <= u0 + u1 + u2 + u3;
   side <= side_r;
end
",
            xb = X_BUS - 1,
            wb = W_BUS - 1,
            pf = 48 * LANE_DSPS - 1,
            sf = 3 * LANE_DSPS - 1,
            n = LANE_DSPS,
            last = LANE_DSPS - 1,
        ))
    }
}

/// Verilator's stand-in for the DSP48E2 primitive, as [`LaneProducts`] configures it: A and B registered 0 or
/// 1 times (AREG = BREG), no C or M register, P registered; P = A[26:0] x B (signed 27 x 18) + W + Z with W
/// = C (OPMODE[8:7] = 3) or 0 and Z = PCIN (OPMODE[6:4] = 1) or 0, ALUMODE 0. It is not a model of the
/// primitive's other modes (a configuration outside these stops the simulation). Inside `ifndef YOSYS`:
/// yosys maps the instances to its own DSP48E2 cell (and Vivado to the primitive).
pub const DSP48E2_STAND_IN: &str = "\
`ifndef YOSYS
module DSP48E2 #(
   parameter integer AREG = 1, BREG = 1, ACASCREG = 1, BCASCREG = 1, CREG = 1, MREG = 1, PREG = 1, ADREG = 1,
   parameter integer DREG = 1, INMODEREG = 1, OPMODEREG = 1, ALUMODEREG = 1, CARRYINREG = 1, CARRYINSELREG = 1,
   parameter USE_MULT = \"MULTIPLY\", AMULTSEL = \"A\", BMULTSEL = \"B\", A_INPUT = \"DIRECT\", B_INPUT = \"DIRECT\",
   parameter USE_SIMD = \"ONE48\"
) (
   input wire CLK,
   input wire [29:0] A,
   input wire [17:0] B,
   input wire [47:0] C,
   input wire [26:0] D,
   input wire [47:0] PCIN,
   input wire [8:0] OPMODE,
   input wire [3:0] ALUMODE,
   input wire [4:0] INMODE,
   input wire [2:0] CARRYINSEL,
   input wire CARRYIN,
   input wire CEA1, CEA2, CEB1, CEB2, CEC, CED, CEAD, CEM, CEP, CECTRL, CEINMODE, CEALUMODE, CECARRYIN,
   input wire RSTA, RSTB, RSTC, RSTD, RSTM, RSTP, RSTCTRL, RSTINMODE, RSTALUMODE, RSTALLCARRYIN,
   output reg [47:0] P,
   output wire [47:0] PCOUT
);
   initial begin
      if (AREG > 1 || BREG != AREG || CREG != 0 || MREG != 0 || PREG != 1)
         $fatal(1, \"DSP48E2 stand-in: unsupported register configuration\");
   end
   reg [29:0] a1;
   reg [17:0] b1;
   always @(posedge CLK) begin
      a1 <= A;
      b1 <= B;
   end
   wire [29:0] a = (AREG == 0) ? A : a1;
   wire [17:0] b = (BREG == 0) ? B : b1;
   wire signed [44:0] mul = $signed(a[26:0]) * $signed(b);
   wire [47:0] w = (OPMODE[8:7] == 2'b11) ? C : 48'd0;
   wire [47:0] z = (OPMODE[6:4] == 3'b001) ? PCIN : 48'd0;
   always @(posedge CLK) P <= {{3{mul[44]}}, mul} + w + z;
   assign PCOUT = P;
endmodule
`endif
";

/// The side-band of one half-block as it travels down the pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HalfBlock {
    pub valid: bool,
    /// 0: columns 0..16 of a block; 1: columns 16..32 (the block is complete).
    pub half: bool,
    /// W8: the row these weights belong to.
    pub row: bool,
    /// The block is the first of its rows: the accumulators restart from 0.
    pub clear: bool,
    /// The block is the last of its rows: `done` follows.
    pub last: bool,
    pub mode: u8,
    pub x_nonfinite: bool,
    /// The aligned block's `scale_exp` (X).
    pub x_exp: i8,
    /// The aligned block's mantissa sum.
    pub sa: i32,
    pub d: [u16; 2],
    pub m: [u16; 2],
}

/// One term per row that the epilogue adds to the accumulators on one edge (the d-terms of a block, or its
/// m-terms one cycle later): per row, whether it takes part, and the term floored onto the grid.
#[derive(Clone, Copy, Debug, Default)]
struct TermUpdate {
    valid: bool,
    upd: [bool; 2],
    /// The row restarts at zero (the d-terms of a row's first block).
    clear: bool,
    /// `done` follows (the last term of a row's last block).
    last: bool,
    delta: [WideAcc; 2],
}

/// Half-block sum, extraction, the d/m terms and the two accumulators.
///
/// The side-band inputs are taken with their half-block's `x`/`w` (the lane's input edge) and delayed here
/// by [`PRODUCTS_LATENCY`] to meet `psum`. On the edge after a block's last half has come out of the tree
/// (E1) the halves are added and the rows' sums extracted; E2 forms the terms, E3 shifts them onto the grid,
/// E4 adds them to `acc0`/`acc1` (restarting from zero on `clear`) and raises `done0`/`done1` on `last`.
/// One term unit (two DSP48E2, a coarse shifter) per row: the d-term goes through on the cycle after E1, W4Min's
/// m-term on the next (a block takes two cycles, so the units keep pace; `half` must alternate 0, 1).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct LaneEpilogue {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub psum: Signal<In, Signed<P_BITS>>,
    pub side: Signal<In, Bits<3>>,
    pub valid: Signal<In, Bit>,
    pub half: Signal<In, Bit>,
    pub row: Signal<In, Bit>,
    pub clear: Signal<In, Bit>,
    pub last: Signal<In, Bit>,
    pub mode: Signal<In, Bits<2>>,
    pub x_nf: Signal<In, Bit>,
    pub x_exp: Signal<In, Signed<8>>,
    pub sa: Signal<In, Signed<SA_BITS>>,
    pub d0: Signal<In, Bits<16>>,
    pub m0: Signal<In, Bits<16>>,
    pub d1: Signal<In, Bits<16>>,
    pub m1: Signal<In, Bits<16>>,
    pub acc0: Signal<Out, Signed<ACC_BITS>>,
    pub acc1: Signal<Out, Signed<ACC_BITS>>,
    pub nf0: Signal<Out, Bit>,
    pub nf1: Signal<Out, Bit>,
    pub done0: Signal<Out, Bit>,
    pub done1: Signal<Out, Bit>,
    state: ModelState<EpilogueModel>,
}

#[derive(Clone, Debug, Default)]
struct EpilogueModel {
    side_band: VecDeque<HalfBlock>,
    hold: (i64, i64),
    /// `slots[k]` is added on the (k+1)-th edge from now.
    slots: VecDeque<TermUpdate>,
    acc: [WideAcc; 2],
}

impl EpilogueModel {
    /// E1 of a complete block: the rows' exact sums (from the packed total), then the terms
    /// [`dot::accumulate_block_sums`] adds: the d-terms, and for W4Min the m-terms.
    fn block_terms(&self, hb: &HalfBlock, psum: i64, side: i64) -> (TermUpdate, Option<TermUpdate>) {
        let total = packing::dsp_acc48(self.hold.0, psum);
        let side = (self.hold.1 + side) & 7;
        let mode = mode_of(u64::from(hb.mode));
        let sa = i64::from(hb.sa);
        let sums = match mode {
            Some(WeightFormat::W8) => [packing::sext(total, 29); 2],
            Some(fmt) => {
                let s = packing::unpack_fields(total, W4X2_STRIDE, W4X2_ACC_T, [0, side]);
                // Nibbles were multiplied unsigned: W4's q = nibble - 8.
                let off = if fmt == WeightFormat::W4 { 8 * sa } else { 0 };
                [s[0] - off, s[1] - off]
            }
            None => [0; 2],
        };
        let upd = match mode {
            Some(WeightFormat::W8) => [!hb.row, hb.row],
            Some(_) => [true, true],
            None => [false, false],
        };
        let use_m = mode == Some(WeightFormat::W4Min);
        let (x_exp, x_nf) = (i32::from(hb.x_exp), hb.x_nonfinite);
        let d_terms = std::array::from_fn(|r| {
            let mut a = WideAcc::ZERO;
            dot::accumulate_block_sums(&mut a, x_exp, x_nf, sums[r], sa, hb.d[r], None);
            a
        });
        let valid = hb.valid && hb.half;
        let d = TermUpdate { valid, upd, clear: hb.clear, last: hb.last && !use_m, delta: d_terms };
        let m = use_m.then(|| {
            // The m-term alone: the block's whole contribution less its d-term (exact integers).
            let delta = std::array::from_fn(|r| {
                let mut a = WideAcc::ZERO;
                dot::accumulate_block_sums(&mut a, x_exp, x_nf, sums[r], sa, hb.d[r], Some(hb.m[r]));
                WideAcc { fixed: a.fixed - d_terms[r].fixed, nonfinite: a.nonfinite }
            });
            TermUpdate { valid, upd, clear: false, last: hb.last, delta }
        });
        (d, m)
    }
}

impl Logic for LaneEpilogue {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let s = &mut self.state.0;
        if s.side_band.is_empty() {
            s.side_band.extend(std::iter::repeat_n(HalfBlock::default(), PRODUCTS_LATENCY));
            s.slots.extend(std::iter::repeat_n(TermUpdate::default(), EPILOGUE_LATENCY));
        }
        let reset = self.reset.val();
        // E4: the terms due now (reset clears only the valid bits of the pipeline).
        let u = s.slots.pop_front().unwrap_or_default();
        s.slots.push_back(TermUpdate::default());
        let mut done = [false; 2];
        if u.valid {
            #[allow(clippy::needless_range_loop)] // rows index four arrays
            for r in 0..2 {
                if u.upd[r] {
                    let base = if u.clear { WideAcc::ZERO } else { s.acc[r] };
                    s.acc[r] = WideAcc { fixed: base.fixed + u.delta[r].fixed, nonfinite: base.nonfinite | u.delta[r].nonfinite };
                    done[r] = u.last;
                }
            }
        }
        // E1: the half-block leaving the tree now (psum is the tree's output before this edge).
        let hb = s.side_band[0];
        let psum = signed_to_i64(self.psum.val());
        let side = self.side.val().to_u64() as i64;
        if hb.valid && hb.half && !reset {
            // E2..E4: the d-terms reach the accumulators three edges from now, the m-terms four.
            let (d, m) = s.block_terms(&hb, psum, side);
            s.slots[2] = d;
            if let Some(m) = m {
                s.slots[3] = m;
            }
        }
        if hb.valid && !hb.half {
            s.hold = (psum, side);
        }
        // The side-band taken at this edge.
        s.side_band.pop_front();
        s.side_band.push_back(HalfBlock {
            valid: self.valid.val() && !reset,
            half: self.half.val(),
            row: self.row.val(),
            clear: self.clear.val(),
            last: self.last.val(),
            mode: self.mode.val().to_u64() as u8,
            x_nonfinite: self.x_nf.val(),
            x_exp: signed_to_i64(self.x_exp.val()) as i8,
            sa: signed_to_i64(self.sa.val()) as i32,
            d: [self.d0.val().to_u16(), self.d1.val().to_u16()],
            m: [self.m0.val().to_u16(), self.m1.val().to_u16()],
        });
        if reset {
            for hb in s.side_band.iter_mut() {
                hb.valid = false;
            }
            for u in s.slots.iter_mut() {
                u.valid = false;
            }
        }
        self.acc0.next = acc_bits(s.acc[0].fixed);
        self.acc1.next = acc_bits(s.acc[1].fixed);
        self.nf0.next = s.acc[0].nonfinite;
        self.nf1.next = s.acc[1].nonfinite;
        self.done0.next = done[0];
        self.done1.next = done[1];
    }
    fn connect(&mut self) {
        self.acc0.connect();
        self.acc1.connect();
        self.nf0.connect();
        self.nf1.connect();
        self.done0.connect();
        self.done1.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(EPILOGUE_VERILOG.into())
    }
}

/// The epilogue's Verilog. Side-band layout of `sb*`: {half, row, clear, last, mode[1:0], x_nf,
/// x_exp[7:0], sa[20:0], d0, m0, d1, m1} (100 bits); `v*` the valid bits (reset). The side-band's delay
/// `sb0` .. `sb4` is the products' latency.
const EPILOGUE_VERILOG: &str = "\
// FP16 significand (hidden bit explicit), exponent (subnormals read 1), non-finite.
function automatic [10:0] f16_sig(input [15:0] h);
   f16_sig = {h[14:10] != 5'd0, h[9:0]};
endfunction
function automatic signed [9:0] f16_exp(input [15:0] h);
   f16_exp = (h[14:10] == 5'd0) ? 10'sd1 : {5'd0, h[14:10]};
endfunction
// The term's factor sign(h) * sig(h) * 2^b, where b is the low 4 bits of its shift onto the grid (below):
// at most 11 + 15 bits and the sign, port A of a DSP48E2. The shift `off` = sh + 24 of a finite term is in
// [4, 70] (sh = e + X + 7 in [-20, 46]: the aligner's X in [-28, 9], a finite FP16 exponent in [1, 30]).
function automatic [6:0] grid_off(input [15:0] h, input signed [7:0] xe);
   reg signed [9:0] off;
   begin
      off = f16_exp(h) + {{2{xe[7]}}, xe} + 10'sd31;
      grid_off = off[6:0];
   end
endfunction
function automatic signed [26:0] factor(input [15:0] h, input [3:0] b);
   reg [26:0] f;
   begin
      f = {16'd0, f16_sig(h)} << b;
      factor = h[15] ? -f : f;
   end
endfunction
// floor(t * 2^off * 2^-24) on the accumulator grid, t = s * factor already carrying 2^(off mod 16): the rest
// of the shift in steps of 16 (a 5-way multiplexer per bit), then the low 24 bits dropped (dropping two's-
// complement bits is the floor). Exact for off in [0, 80).
function automatic signed [95:0] to_grid(input signed [55:0] t, input [2:0] k);
   reg signed [135:0] wide;
   begin
      wide = {{80{t[55]}}, t} <<< {k, 4'd0};
      to_grid = wide[119:24];
   end
endfunction
wire [99:0] sb_in;
assign sb_in = {half, row, clear, last, mode, x_nf, x_exp, sa, d0, m0, d1, m1};
reg [99:0] sb0, sb1, sb2, sb3, sb4;
reg v0, v1, v2, v3, v4;
// sb4 fields
wire half4, row4;
wire [1:0] mode4;
wire x_nf4;
wire signed [7:0] x_exp4;
wire signed [20:0] sa4;
wire [15:0] d04, m04, d14, m14;
assign half4 = sb4[99];
assign row4 = sb4[98];
assign mode4 = sb4[95:94];
assign x_nf4 = sb4[93];
assign x_exp4 = sb4[92:85];
assign sa4 = sb4[84:64];
assign d04 = sb4[63:48];
assign m04 = sb4[47:32];
assign d14 = sb4[31:16];
assign m14 = sb4[15:0];
// E1: the two halves' packed sum and its extraction (stride 22, 3 side bits).
reg signed [47:0] hold_p;
reg [2:0] hold_s;
wire [47:0] total;
wire [2:0] side_t;
wire [24:0] f0;
wire [25:0] su1;
wire signed [28:0] su0x, su1x, sa8, sw8;
assign total = hold_p + psum;
assign side_t = hold_s + side;
assign f0 = total[24:0] - {side_t, 22'b0};
assign su1 = total[47:22] - {{23{f0[24]}}, f0[24:22]};
assign su0x = {{4{f0[24]}}, f0};
assign su1x = {{3{su1[25]}}, su1};
assign sa8 = {{5{sa4[20]}}, sa4, 3'b0};
assign sw8 = total[28:0];
reg e1_v, e1_upd0, e1_upd1, e1_usem, e1_clear, e1_last, e1_xnf;
reg signed [28:0] e1_s0, e1_s1, e1_sa;
reg [15:0] e1_d0, e1_m0, e1_d1, e1_m1;
reg signed [26:0] e1_fd0, e1_fm0, e1_fd1, e1_fm1;
reg [2:0] e1_kd0, e1_km0, e1_kd1, e1_km1;
wire [6:0] od0, om0, od1, om1;
assign od0 = grid_off(d04, x_exp4);
assign om0 = grid_off(m04, x_exp4);
assign od1 = grid_off(d14, x_exp4);
assign om1 = grid_off(m14, x_exp4);
// E2: one term per row and cycle: d * S_q on the cycle after E1, m * S_a on the next (W4Min; `p1`).
reg p1;
wire [15:0] h0, h1;
wire signed [28:0] k0, k1;
wire signed [26:0] fa0, fa1;
assign fa0 = p1 ? e1_fm0 : e1_fd0;
assign fa1 = p1 ? e1_fm1 : e1_fd1;
assign h0 = p1 ? e1_m0 : e1_d0;
assign h1 = p1 ? e1_m1 : e1_d1;
assign k0 = p1 ? e1_sa : e1_s0;
assign k1 = p1 ? e1_sa : e1_s1;
reg e2_v, e2_upd0, e2_upd1, e2_clear, e2_last, e2_nf0, e2_nf1;
// the term times 2^(off mod 16), S x factor, 29 x 27 bits: two DSP48E2 per row, S's low 17 bits (unsigned, port
// B's 18 bits signed) and its high 12 (signed), added on the next edge with the coarse shift
reg signed [44:0] e2_lo0, e2_lo1;
reg signed [38:0] e2_hi0, e2_hi1;
reg [2:0] e2_k0, e2_k1;
wire signed [55:0] e2_t0, e2_t1;
assign e2_t0 = {e2_hi0, 17'd0} + {{11{e2_lo0[44]}}, e2_lo0};
assign e2_t1 = {e2_hi1, 17'd0} + {{11{e2_lo1[44]}}, e2_lo1};
// E3: terms on the grid.
reg e3_v, e3_upd0, e3_upd1, e3_clear, e3_last, e3_nf0, e3_nf1;
reg signed [95:0] e3_g0, e3_g1;
always @(posedge clock) begin
   sb0 <= sb_in;
   sb1 <= sb0;
   sb2 <= sb1;
   sb3 <= sb2;
   sb4 <= sb3;
   if (v4 && !half4) begin
      hold_p <= psum;
      hold_s <= side;
   end
   // E1 registers hold a block until the next one completes (a block takes at least two cycles).
   if (v4 && half4) begin
      e1_s0 <= (mode4 == 2'd2) ? sw8 : (mode4 == 2'd1) ? su0x - sa8 : su0x;
      e1_s1 <= (mode4 == 2'd2) ? sw8 : (mode4 == 2'd1) ? su1x - sa8 : su1x;
      e1_upd0 <= (mode4 == 2'd0) || (mode4 == 2'd1) || (mode4 == 2'd2 && !row4);
      e1_upd1 <= (mode4 == 2'd0) || (mode4 == 2'd1) || (mode4 == 2'd2 && row4);
      e1_usem <= mode4 == 2'd0;
      e1_clear <= sb4[97];
      e1_last <= sb4[96];
      e1_xnf <= x_nf4;
      e1_sa <= {{8{sa4[20]}}, sa4};
      e1_d0 <= d04;
      e1_fd0 <= factor(d04, od0[3:0]);
      e1_fm0 <= factor(m04, om0[3:0]);
      e1_fd1 <= factor(d14, od1[3:0]);
      e1_fm1 <= factor(m14, om1[3:0]);
      e1_kd0 <= od0[6:4];
      e1_km0 <= om0[6:4];
      e1_kd1 <= od1[6:4];
      e1_km1 <= om1[6:4];
      e1_m0 <= m04;
      e1_d1 <= d14;
      e1_m1 <= m14;
   end
   e2_lo0 <= $signed({1'b0, k0[16:0]}) * fa0;
   e2_lo1 <= $signed({1'b0, k1[16:0]}) * fa1;
   e2_hi0 <= $signed(k0[28:17]) * fa0;
   e2_hi1 <= $signed(k1[28:17]) * fa1;
   e2_k0 <= p1 ? e1_km0 : e1_kd0;
   e2_k1 <= p1 ? e1_km1 : e1_kd1;
   e2_nf0 <= e1_xnf || (h0[14:10] == 5'd31);
   e2_nf1 <= e1_xnf || (h1[14:10] == 5'd31);
   e2_upd0 <= e1_upd0;
   e2_upd1 <= e1_upd1;
   e2_clear <= e1_clear && !p1;
   e2_last <= e1_last && (p1 || !e1_usem);
   e3_g0 <= to_grid(e2_t0, e2_k0);
   e3_g1 <= to_grid(e2_t1, e2_k1);
   e3_nf0 <= e2_nf0;
   e3_nf1 <= e2_nf1;
   e3_upd0 <= e2_upd0;
   e3_upd1 <= e2_upd1;
   e3_clear <= e2_clear;
   e3_last <= e2_last;
   if (e3_v && e3_upd0) begin
      acc0 <= (e3_clear ? 96'sd0 : acc0) + e3_g0;
      nf0 <= (!e3_clear && nf0) || e3_nf0;
   end
   if (e3_v && e3_upd1) begin
      acc1 <= (e3_clear ? 96'sd0 : acc1) + e3_g1;
      nf1 <= (!e3_clear && nf1) || e3_nf1;
   end
   done0 <= e3_v && e3_upd0 && e3_last;
   done1 <= e3_v && e3_upd1 && e3_last;
   if (reset) begin
      v0 <= 1'b0;
      v1 <= 1'b0;
      v2 <= 1'b0;
      v3 <= 1'b0;
      v4 <= 1'b0;
      e1_v <= 1'b0;
      p1 <= 1'b0;
      e2_v <= 1'b0;
      e3_v <= 1'b0;
   end else begin
      v0 <= valid;
      v1 <= v0;
      v2 <= v1;
      v3 <= v2;
      v4 <= v3;
      e1_v <= v4 && half4;
      p1 <= e1_v && e1_usem;
      e2_v <= e1_v || p1;
      e3_v <= e2_v;
   end
end
";

/// The PE lane: [`LaneProducts`] then [`LaneEpilogue`].
///
/// Per cycle feed one half-block (`valid`): 16 activation mantissas on `x`, the weights on `w`, `mode` =
/// [`WeightFormat::code`] (W4Min, W4 or W8), `half` (0 then 1), and with every half the block's side-band
/// (`row` for W8, `clear` on a row's first block, `last` on its last, the aligned block's `x_exp`, `x_nf`,
/// `sa`, the rows' `d`/`m` FP16 bits). After a row's last block `done0`/`done1` rise for one cycle with
/// the row's accumulator on `acc0`/`acc1` (96 bits, 2^-32 units) and its non-finite flag on `nf0`/`nf1`.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Lane {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub valid: Signal<In, Bit>,
    pub mode: Signal<In, Bits<2>>,
    pub half: Signal<In, Bit>,
    pub row: Signal<In, Bit>,
    pub clear: Signal<In, Bit>,
    pub last: Signal<In, Bit>,
    pub x: Signal<In, Bits<X_BUS>>,
    pub w: Signal<In, Bits<W_BUS>>,
    pub x_nf: Signal<In, Bit>,
    pub x_exp: Signal<In, Signed<8>>,
    pub sa: Signal<In, Signed<SA_BITS>>,
    pub d0: Signal<In, Bits<16>>,
    pub m0: Signal<In, Bits<16>>,
    pub d1: Signal<In, Bits<16>>,
    pub m1: Signal<In, Bits<16>>,
    pub acc0: Signal<Out, Signed<ACC_BITS>>,
    pub acc1: Signal<Out, Signed<ACC_BITS>>,
    pub nf0: Signal<Out, Bit>,
    pub nf1: Signal<Out, Bit>,
    pub done0: Signal<Out, Bit>,
    pub done1: Signal<Out, Bit>,
    products: LaneProducts,
    epilogue: LaneEpilogue,
}

impl Logic for Lane {
    #[hdl_gen]
    fn update(&mut self) {
        self.products.clock.next = self.clock.val();
        self.products.mode.next = self.mode.val();
        self.products.x.next = self.x.val();
        self.products.w.next = self.w.val();
        self.epilogue.clock.next = self.clock.val();
        self.epilogue.reset.next = self.reset.val();
        self.epilogue.psum.next = self.products.psum.val();
        self.epilogue.side.next = self.products.side.val();
        self.epilogue.valid.next = self.valid.val();
        self.epilogue.half.next = self.half.val();
        self.epilogue.row.next = self.row.val();
        self.epilogue.clear.next = self.clear.val();
        self.epilogue.last.next = self.last.val();
        self.epilogue.mode.next = self.mode.val();
        self.epilogue.x_nf.next = self.x_nf.val();
        self.epilogue.x_exp.next = self.x_exp.val();
        self.epilogue.sa.next = self.sa.val();
        self.epilogue.d0.next = self.d0.val();
        self.epilogue.m0.next = self.m0.val();
        self.epilogue.d1.next = self.d1.val();
        self.epilogue.m1.next = self.m1.val();
        self.acc0.next = self.epilogue.acc0.val();
        self.acc1.next = self.epilogue.acc1.val();
        self.nf0.next = self.epilogue.nf0.val();
        self.nf1.next = self.epilogue.nf1.val();
        self.done0.next = self.epilogue.done0.val();
        self.done1.next = self.epilogue.done1.val();
    }
}

/// [`Lane`] ready to simulate or emit (inputs and internals connected).
pub fn lane_top() -> Lane {
    connect_top!(Lane::default(), clock, reset, valid, mode, half, row, clear, last, x, w, x_nf, x_exp, sa, d0, m0, d1, m1)
}

//! The block aligner: 32 FP16 activations to `W`-bit signed mantissas on the block's largest exponent, the
//! block exponent `X`, the non-finite flag and the mantissa sum `S_a` ([`align::align_block`]). One per PE
//! array: every lane takes the same aligned block (and `S_a`, which the W4 and W4Min epilogues need).
//!
//! Pipeline (5 register stages, one block per cycle):
//! 1. input register;
//! 2. effective exponents (subnormals 1, non-finite 0, so they never win) and the maximum of each 8;
//! 3. the block maximum `E` and the non-finite flag;
//! 4. each mantissa `sign * trunc(s << (e - E + W - 12))` (right shifts of up to 33 bits) and `X = E - W - 13`;
//! 5. `S_a`, the sum of the 32 mantissas (adder tree).

use crate::dsp::i64_to_signed;
use crate::lane::{ModelState, SA_BITS};
use opu_hw::numerics::align::{self, AlignedBlock};
use opu_hw::numerics::BLOCK;
use rust_hdl::prelude::*;
use std::collections::VecDeque;

/// The FP16 block bus: element `j` at bits `16j..16j+16`.
pub const XF_BUS: usize = BLOCK * 16;
/// The mantissa bus: element `j`'s signed mantissa (sign-extended to 16 bits) at bits `16j..16j+16`.
pub const MANT_BUS: usize = BLOCK * 16;
/// Register stages from `xf` to the outputs.
pub const ALIGN_LATENCY: usize = 5;

/// Packs 32 FP16 values into the `xf` bus.
pub fn xf_bus(x: &[u16; BLOCK]) -> Bits<XF_BUS> {
    let mut b = Bits::<XF_BUS>::default();
    for (j, &v) in x.iter().enumerate() {
        b.set_bits::<16>(16 * j, Bits::<16>::from(u64::from(v)));
    }
    b
}

/// Unpacks the mantissa bus.
pub fn mant_of(b: Bits<MANT_BUS>) -> [i32; BLOCK] {
    std::array::from_fn(|j| i32::from(b.get_bits::<16>(16 * j).to_u64() as u16 as i16))
}

/// The aligner for `W`-bit mantissas (the overlay's `act_mantissa_bits`, 8..=16).
#[derive(Clone, Debug, LogicBlock)]
pub struct Aligner {
    pub clock: Signal<In, Clock>,
    pub xf: Signal<In, Bits<XF_BUS>>,
    pub mant: Signal<Out, Bits<MANT_BUS>>,
    pub x_exp: Signal<Out, Signed<8>>,
    pub x_nf: Signal<Out, Bit>,
    pub sa: Signal<Out, Signed<SA_BITS>>,
    bits: ModelState<u32>,
    pipe: ModelState<VecDeque<AlignedBlock>>,
}

impl Aligner {
    pub fn new(act_mantissa_bits: u32) -> Self {
        assert!((8..=16).contains(&act_mantissa_bits), "act_mantissa_bits {act_mantissa_bits}");
        Aligner {
            clock: Default::default(),
            xf: Default::default(),
            mant: Default::default(),
            x_exp: Default::default(),
            x_nf: Default::default(),
            sa: Default::default(),
            bits: ModelState(act_mantissa_bits),
            pipe: Default::default(),
        }
    }
}

impl Logic for Aligner {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let xb = self.xf.val();
        let x: [u16; BLOCK] = std::array::from_fn(|j| xb.get_bits::<16>(16 * j).to_u64() as u16);
        let q = &mut self.pipe.0;
        if q.is_empty() {
            // Registers start at zero: the all-zero block as the hardware holds it (X = 0 - W - 13 is not
            // what align_block gives for zeros, so spell the reset value out).
            let zero = AlignedBlock { mant: [0; BLOCK], scale_exp: 0, nonfinite: false };
            q.extend(std::iter::repeat_n(zero, ALIGN_LATENCY));
        }
        q.push_back(align::align_block(&x, self.bits.0));
        q.pop_front();
        let b = &q[0];
        let mut m = Bits::<MANT_BUS>::default();
        for (j, &a) in b.mant.iter().enumerate() {
            m.set_bits::<16>(16 * j, Bits::<16>::from(u64::from(a as i16 as u16)));
        }
        self.mant.next = m;
        self.x_exp.next = i64_to_signed(i64::from(b.scale_exp));
        self.x_nf.next = b.nonfinite;
        self.sa.next = i64_to_signed(b.mant_sum());
    }
    fn connect(&mut self) {
        self.mant.connect();
        self.x_exp.connect();
        self.x_nf.connect();
        self.sa.connect();
    }
    fn hdl(&self) -> Verilog {
        let w = self.bits.0;
        Verilog::Custom(format!(
            "\
// effective exponent: subnormals 1, infinities and NaN 0 (they never set the block exponent)
function automatic [4:0] eff_exp(input [15:0] h);
   eff_exp = (h[14:10] == 5'd31) ? 5'd0 : (h[14:10] == 5'd0) ? 5'd1 : h[14:10];
endfunction
function automatic [4:0] max5(input [4:0] a, input [4:0] b);
   max5 = (a > b) ? a : b;
endfunction
// sign * trunc(sig << (e - emax + W - 12)); the shift is at most W - 12 left, at most 33 right
function automatic [15:0] align1(input [15:0] h, input [4:0] emax);
   reg [10:0] sig;
   reg signed [7:0] sh;
   reg [7:0] nsh;
   reg [15:0] mag;
   begin
      sig = {{h[14:10] != 5'd0, h[9:0]}};
      sh = $signed({{3'd0, eff_exp(h)}}) - $signed({{3'd0, emax}}) + 8'sd{w} - 8'sd12;
      nsh = -sh;
      if (h[14:10] == 5'd31) mag = 16'd0;
      else if (sh[7]) mag = {{5'd0, sig}} >> nsh;
      else mag = {{5'd0, sig}} << sh;
      align1 = h[15] ? -mag : mag;
   end
endfunction
reg [{xb}:0] x1, x2, x3;
reg [4:0] m8_0, m8_1, m8_2, m8_3;
reg nf2, nf3, nf4;
reg [4:0] emax3;
reg [{xb}:0] mant4;
reg signed [7:0] xexp4;
wire [4:0] e8 [0:31];
wire [31:0] inf_any;
genvar g;
generate for (g = 0; g < 32; g = g + 1) begin : el
   assign e8[g] = eff_exp(x1[16*g +: 16]);
   assign inf_any[g] = x1[16*g+10 +: 5] == 5'd31;
end endgenerate
integer j;
reg signed [20:0] s;
always @(*) begin
   s = 21'sd0;
   for (j = 0; j < 32; j = j + 1) s = s + {{{{5{{mant4[16*j+15]}}}}, mant4[16*j +: 16]}};
end
always @(posedge clock) begin
   x1 <= xf;
   x2 <= x1;
   nf2 <= |inf_any;
   m8_0 <= max5(max5(max5(e8[0], e8[1]), max5(e8[2], e8[3])), max5(max5(e8[4], e8[5]), max5(e8[6], e8[7])));
   m8_1 <= max5(max5(max5(e8[8], e8[9]), max5(e8[10], e8[11])), max5(max5(e8[12], e8[13]), max5(e8[14], e8[15])));
   m8_2 <= max5(max5(max5(e8[16], e8[17]), max5(e8[18], e8[19])), max5(max5(e8[20], e8[21]), max5(e8[22], e8[23])));
   m8_3 <= max5(max5(max5(e8[24], e8[25]), max5(e8[26], e8[27])), max5(max5(e8[28], e8[29]), max5(e8[30], e8[31])));
   x3 <= x2;
   nf3 <= nf2;
   emax3 <= max5(max5(max5(m8_0, m8_1), max5(m8_2, m8_3)), 5'd1);
   for (j = 0; j < 32; j = j + 1) mant4[16*j +: 16] <= align1(x3[16*j +: 16], emax3);
   xexp4 <= $signed({{3'd0, emax3}}) - 8'sd{w} - 8'sd13;
   nf4 <= nf3;
   mant <= mant4;
   x_exp <= xexp4;
   x_nf <= nf4;
   sa <= s;
end
",
            xb = XF_BUS - 1,
            w = w,
        ))
    }
}

/// [`Aligner`] ready to simulate or emit.
pub fn aligner_top(act_mantissa_bits: u32) -> Aligner {
    connect_top!(Aligner::new(act_mantissa_bits), clock, xf)
}

//! The accumulating w4x2u DSP48E2: a block of 32 columns summed in the P register, two exact row sums out.
//!
//! docs/numerics.md "Packed multiplies (DSP48E2)", [`packing::w4x2u_accumulate`]: per column `j` the DSP
//! computes `P <- P + A_j * B_j` with port A = `w1_j << 22 | w0_j`, port B = `sext18(x_j)`; beside it a 3-bit
//! side accumulator in fabric sums `lut_mul_lo(x_j, w1_j, 3)` mod 8 (the low 3 bits of row 1's sum, which in
//! P are mixed with the top 3 bits of row 0's 25-bit sum). After the block the extraction
//! ([`packing::unpack_fields`], stride 22, t = 3) gives
//! `S0 = sum_j x_j w0_j`, `S1 = sum_j x_j w1_j`, exact for up to [`packing::W4X2U_MAX_DEPTH`] (34) columns.
//!
//! - [`PackedAccW4x2`]: the DSP48E2 in accumulate mode (P register) plus the side accumulator: a
//!   [`packing::PackedAcc`] in hardware. `first` = 1 restarts both with the column's product alone.
//! - [`UnpackAccW4x2`]: the extraction (combinational):
//!   `f0 = P[24:0] - (side << 22)` (25 bits), `S0 = sext(f0)`, `S1 = P[47:22] - sext(f0[24:22])` (26 bits).
//! - [`PackedMacW4x2`]: both. The row sums of a block are on `s0`, `s1` after the clock edge that took its
//!   last column (and until the edge that takes the next column).
//!
//! Packing factor: 2 products (x * w) per cycle per DSP48E2.

use crate::dsp::{i64_to_signed, signed_to_i64, P_BITS};
use opu_hw::numerics::packing::{self, PackedAcc, W4X2_ACC_T, W4X2_STRIDE};
use rust_hdl::prelude::*;

/// Width of the side accumulator (`t`).
pub const SIDE_BITS: usize = W4X2_ACC_T as usize;
/// Width of the row-sum outputs: row 1 (the top field) has 48 - 22 = 26 bits, row 0 has 22 + 3 = 25 bits
/// (sign-extended to 26 here). A block of 32 needs 25: |32 * 15 * -32768| = 15 728 640 < 2^24.
pub const SUM_BITS: usize = P_BITS - W4X2_STRIDE as usize;
/// Columns per block (the depth the tests use; the packing allows up to 34).
pub const BLOCK_COLUMNS: usize = 32;

fn acc_state(p: i64, side1: i64) -> PackedAcc<2> {
    let mut acc = PackedAcc::<2>::new(W4X2_STRIDE, W4X2_ACC_T);
    acc.p = p;
    acc.side = [0, side1];
    acc
}

/// One DSP48E2 accumulating w4x2u products in P, and the 3-bit side accumulator of row 1.
///
/// On each clock edge: if `first`, `P <- A*B`, `side <- lut_mul_lo(x, w1, 3)`; else `P <- P + A*B`,
/// `side <- (side + lut_mul_lo(x, w1, 3)) mod 8` ([`PackedAcc::mac`]).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct PackedAccW4x2 {
    pub clock: Signal<In, Clock>,
    pub first: Signal<In, Bit>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<16>>,
    pub p: Signal<Out, Signed<P_BITS>>,
    pub side: Signal<Out, Bits<SIDE_BITS>>,
}

impl Logic for PackedAccW4x2 {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let mut acc = if self.first.val() {
                PackedAcc::<2>::new(W4X2_STRIDE, W4X2_ACC_T)
            } else {
                acc_state(signed_to_i64(self.p.val()), self.side.val().to_u64() as i64)
            };
            let w = [self.w0.val().to_u8(), self.w1.val().to_u8()];
            let x = signed_to_i64(self.x.val()) as i16;
            let (a, b) = packing::pack_w4x2u(w, x);
            acc.mac(a, b, w.map(i64::from), i64::from(x));
            self.p.next = i64_to_signed(acc.p);
            self.side.next = (acc.side[1] as u64).into();
        }
    }
    fn connect(&mut self) {
        self.p.connect();
        self.side.connect();
    }
    fn hdl(&self) -> Verilog {
        // The multiply-accumulate is the DSP48E2 (`p` the P register); `lo` is the 3 x 3 truncated multiplier
        // (lut_mul_lo: only the low 3 bits of x and w1 matter) and `side` its 3-bit accumulator, in fabric.
        Verilog::Custom(
            "\
wire signed [26:0] port_a;
wire signed [17:0] port_b;
wire [2:0] lo;
assign port_a = {1'b0, w1, 18'b0, w0};
assign port_b = {{2{x[15]}}, x};
assign lo = x[2:0] * w1[2:0];
always @(posedge clock) begin
   if (first) begin
      p <= port_a * port_b;
      side <= lo;
   end else begin
      p <= p + port_a * port_b;
      side <= side + lo;
   end
end
"
            .into(),
        )
    }
    fn timing(&self) -> Vec<TimingInfo> {
        vec![TimingInfo {
            name: "dsp_acc_w4x2".into(),
            clock: "clock".into(),
            inputs: vec!["first".into(), "w0".into(), "w1".into(), "x".into()],
            outputs: vec!["p".into(), "side".into()],
        }]
    }
}

/// The block extraction (combinational): [`packing::unpack_fields`] with stride 22 and 3 side bits, i.e.
/// [`PackedAcc::fields`]. `s0` is row 0's sum (25 bits, sign-extended to 26), `s1` row 1's (26 bits).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct UnpackAccW4x2 {
    pub p: Signal<In, Signed<P_BITS>>,
    pub side: Signal<In, Bits<SIDE_BITS>>,
    pub s0: Signal<Out, Signed<SUM_BITS>>,
    pub s1: Signal<Out, Signed<SUM_BITS>>,
}

impl Logic for UnpackAccW4x2 {
    fn update(&mut self) {
        let f = acc_state(signed_to_i64(self.p.val()), self.side.val().to_u64() as i64).fields();
        self.s0.next = i64_to_signed(f[0]);
        self.s1.next = i64_to_signed(f[1]);
    }
    fn connect(&mut self) {
        self.s0.connect();
        self.s1.connect();
    }
    fn hdl(&self) -> Verilog {
        // f0 = R_0[24:0] - (side << 22): P[21:0] as is, P[24:22] - side (borrow out dropped); sign bit 24.
        // S1 = (P - sext(f0)) >> 22 = P[47:22] - (f0 >>> 22), mod 2^26.
        Verilog::Custom(
            "\
wire [24:0] f0;
assign f0 = p[24:0] - {side, 22'b0};
always @(*) begin
   s0 = {f0[24], f0};
   s1 = p[47:22] - {{23{f0[24]}}, f0[24:22]};
end
"
            .into(),
        )
    }
}

/// [`PackedAccW4x2`] followed by [`UnpackAccW4x2`]: feed a block's columns (`first` = 1 on the first), and
/// after the edge that took the last one `[s0, s1] = w4x2u_accumulate(block)`.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct PackedMacW4x2 {
    pub clock: Signal<In, Clock>,
    pub first: Signal<In, Bit>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<16>>,
    pub s0: Signal<Out, Signed<SUM_BITS>>,
    pub s1: Signal<Out, Signed<SUM_BITS>>,
    acc: PackedAccW4x2,
    unpack: UnpackAccW4x2,
}

impl Logic for PackedMacW4x2 {
    #[hdl_gen]
    fn update(&mut self) {
        self.acc.clock.next = self.clock.val();
        self.acc.first.next = self.first.val();
        self.acc.w0.next = self.w0.val();
        self.acc.w1.next = self.w1.val();
        self.acc.x.next = self.x.val();
        self.unpack.p.next = self.acc.p.val();
        self.unpack.side.next = self.acc.side.val();
        self.s0.next = self.unpack.s0.val();
        self.s1.next = self.unpack.s1.val();
    }
}

/// [`PackedMacW4x2`] ready to simulate or emit (inputs and internals connected).
pub fn packed_mac_w4x2_top() -> PackedMacW4x2 {
    connect_top!(PackedMacW4x2::default(), clock, first, w0, w1, x)
}

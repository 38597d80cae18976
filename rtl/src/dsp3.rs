//! The overpacked DSP48E2 multiply: three unsigned 4-bit weights by one 12-bit activation (`w4x3u`).
//!
//! docs/numerics.md "Packed multiplies (DSP48E2)", [`packing::w4x3u_products`]: port A =
//! `w2 << 22 | w1 << 11 | w0`, port B = `sext18(x)`, `P <- A * B` registered, so
//! `P = x*w0 + x*w1*2^11 + x*w2*2^22`. Each product needs 16 bits signed but the stride is 11, so the fields
//! overlap by 5 bits; beside the DSP two 5 x 4 truncated multiplies in fabric give the side bits
//! `s_i = lut_mul_lo(x, w_i, 5) = (x[4:0] * w_i) mod 32` of products 1 and 2 (registered with P), and the
//! extraction ([`packing::unpack_fields`], stride 11, t = 5) separates the three exact 16-bit products:
//!
//! - `f0 = P[15:0] - (s1 << 11)` (16 bits), `y0 = f0`;
//! - `r1 = P[37:11] - sext(f0[15:11])` (R_1 mod 2^27), `f1 = r1[15:0] - (s2 << 11)`, `y1 = f1`;
//! - `y2 = r1[26:11] - sext(f1[15:11])` (R_2 mod 2^16).
//!
//! - [`PackedMulW4x3`]: the DSP48E2 (P register) and the two registered side-bit multiplies.
//! - [`UnpackW4x3`]: the extraction (combinational), bit-exact with the model for every `p`, `s1`, `s2`.
//! - [`MulW4x3`]: both, `w0, w1, w2, x -> [x*w0, x*w1, x*w2]` one clock after the inputs.
//!
//! Packing factor: 3 products (x * w) per cycle per DSP48E2.

use crate::dsp::{i64_to_signed, signed_to_i64, P_BITS};
use opu_hw::numerics::packing::{self, W4X3_STRIDE, W4X3_T};
use rust_hdl::prelude::*;

/// Width of the activation (12-bit mantissa).
pub const X_BITS: usize = 12;
/// Width of one w4x3u product (`x * w`, x i12, w 0..=15: [-30720, 30705]).
pub const PRODUCT_BITS: usize = 16;
/// Side bits per restored product (`t`).
pub const SIDE_BITS: usize = W4X3_T as usize;

/// One DSP48E2 computing the w4x3u packed product, registered in P, and the side bits of products 1 and 2.
///
/// On each clock edge: `p <- dsp_mul27x18(pack_w4x3u([w0, w1, w2], x))`,
/// `s1 <- lut_mul_lo(x, w1, 5)`, `s2 <- lut_mul_lo(x, w2, 5)`.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct PackedMulW4x3 {
    pub clock: Signal<In, Clock>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub w2: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<X_BITS>>,
    pub p: Signal<Out, Signed<P_BITS>>,
    pub s1: Signal<Out, Bits<SIDE_BITS>>,
    pub s2: Signal<Out, Bits<SIDE_BITS>>,
}

impl Logic for PackedMulW4x3 {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let w = [
                self.w0.val().to_u8(),
                self.w1.val().to_u8(),
                self.w2.val().to_u8(),
            ];
            let x = signed_to_i64(self.x.val()) as i16;
            let (a, b) = packing::pack_w4x3u(w, x);
            self.p.next = i64_to_signed(packing::dsp_mul27x18(a, b));
            let side = packing::lut_side(w.map(i64::from), i64::from(x), W4X3_T);
            self.s1.next = (side[1] as u64).into();
            self.s2.next = (side[2] as u64).into();
        }
    }
    fn connect(&mut self) {
        self.p.connect();
        self.s1.connect();
        self.s2.connect();
    }
    fn hdl(&self) -> Verilog {
        // Port A: w2 at bit 22, w1 at bit 11, w0 at bit 0, bit 26 (sign) 0; port B: x sign-extended to 18
        // bits; both signed, so `*` is the DSP48E2's 27x18 signed multiply. lo1/lo2 are the 5 x 4 truncated
        // multipliers (only x[4:0] matters for the low 5 bits), registered beside P.
        Verilog::Custom(
            "\
wire signed [26:0] port_a;
wire signed [17:0] port_b;
wire [4:0] lo1;
wire [4:0] lo2;
assign port_a = {1'b0, w2, 7'b0, w1, 7'b0, w0};
assign port_b = {{6{x[11]}}, x};
assign lo1 = x[4:0] * {1'b0, w1};
assign lo2 = x[4:0] * {1'b0, w2};
always @(posedge clock) begin
   p <= port_a * port_b;
   s1 <= lo1;
   s2 <= lo2;
end
"
            .into(),
        )
    }
    fn timing(&self) -> Vec<TimingInfo> {
        vec![TimingInfo {
            name: "dsp_w4x3".into(),
            clock: "clock".into(),
            inputs: vec!["w0".into(), "w1".into(), "w2".into(), "x".into()],
            outputs: vec!["p".into(), "s1".into(), "s2".into()],
        }]
    }
}

/// The w4x3 extraction (combinational): [`packing::unpack_fields`] with stride 11 and 5 side bits, each
/// field reduced mod 2^16 (the two low fields are 16 bits already; the top one equals it whenever the
/// product fits 16 bits, which single w4x3u products always do).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct UnpackW4x3 {
    pub p: Signal<In, Signed<P_BITS>>,
    pub s1: Signal<In, Bits<SIDE_BITS>>,
    pub s2: Signal<In, Bits<SIDE_BITS>>,
    pub y0: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y1: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y2: Signal<Out, Signed<PRODUCT_BITS>>,
}

impl Logic for UnpackW4x3 {
    fn update(&mut self) {
        let side = [
            0,
            self.s1.val().to_u64() as i64,
            self.s2.val().to_u64() as i64,
        ];
        let f = packing::unpack_fields(signed_to_i64(self.p.val()), W4X3_STRIDE, W4X3_T, side);
        self.y0.next = i64_to_signed(f[0]);
        self.y1.next = i64_to_signed(f[1]);
        self.y2.next = i64_to_signed(f[2]);
    }
    fn connect(&mut self) {
        self.y0.connect();
        self.y1.connect();
        self.y2.connect();
    }
    fn hdl(&self) -> Verilog {
        // f0 = R_0[15:0] - (s1 << 11); R_1 = (R_0 - sext(f0)) >> 11, needed mod 2^27 = P[37:11] - sext(f0 >> 11);
        // f1 = R_1[15:0] - (s2 << 11); R_2 mod 2^16 = R_1[26:11] - sext(f1 >> 11).
        Verilog::Custom(
            "\
wire [15:0] f0;
wire [26:0] r1;
wire [15:0] f1;
assign f0 = p[15:0] - {s1, 11'b0};
assign r1 = p[37:11] - {{22{f0[15]}}, f0[15:11]};
assign f1 = r1[15:0] - {s2, 11'b0};
always @(*) begin
   y0 = f0;
   y1 = f1;
   y2 = r1[26:11] - {{11{f1[15]}}, f1[15:11]};
end
"
            .into(),
        )
    }
}

/// [`PackedMulW4x3`] followed by [`UnpackW4x3`]: `[y0, y1, y2] = w4x3u_products([w0, w1, w2], x)` one clock
/// edge after the inputs.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct MulW4x3 {
    pub clock: Signal<In, Clock>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub w2: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<X_BITS>>,
    pub y0: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y1: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y2: Signal<Out, Signed<PRODUCT_BITS>>,
    mul: PackedMulW4x3,
    unpack: UnpackW4x3,
}

impl Logic for MulW4x3 {
    #[hdl_gen]
    fn update(&mut self) {
        self.mul.clock.next = self.clock.val();
        self.mul.w0.next = self.w0.val();
        self.mul.w1.next = self.w1.val();
        self.mul.w2.next = self.w2.val();
        self.mul.x.next = self.x.val();
        self.unpack.p.next = self.mul.p.val();
        self.unpack.s1.next = self.mul.s1.val();
        self.unpack.s2.next = self.mul.s2.val();
        self.y0.next = self.unpack.y0.val();
        self.y1.next = self.unpack.y1.val();
        self.y2.next = self.unpack.y2.val();
    }
}

/// [`MulW4x3`] ready to simulate or emit (inputs and internals connected).
pub fn mul_w4x3_top() -> MulW4x3 {
    connect_top!(MulW4x3::default(), clock, w0, w1, w2, x)
}

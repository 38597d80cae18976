//! DSP48E2 blocks: the packed multiplies of [`opu_hw::numerics::packing`] as rust-hdl logic.
//!
//! W4Min (unsigned 4-bit weights, Q4_1) by a 16-bit activation mantissa, two products per DSP48E2
//! (`w4x2u`, docs/numerics.md "Packed multiplies (DSP48E2)"):
//!
//! - [`PackedMulW4x2`]: the DSP itself. Port A = `w1 << 22 | w0` (27 bits signed), port B = `sext18(x)`,
//!   `P <- A * B` in the P register (one clocked stage). Output: the raw 48-bit P.
//! - [`UnpackW4x2`]: the fabric extraction after P (combinational): `y0 = P[19:0]`,
//!   `y1 = P[41:22] + P[21]` (20 bits each, i.e. [`packing::unpack_w4x2`] reduced mod 2^20).
//! - [`MulW4x2`]: both, `w0, w1, x -> [x*w0, x*w1]` one clock after the inputs.
//!
//! The DSP and the extraction are separate blocks because they belong to different places once the P
//! register accumulates (`P <- P + A*B`, next brick): the multiply-accumulate runs once per cycle inside the
//! DSP48E2, the extraction once per block in LUTs, so the DSP block must stay the plain `A*B -> P` pattern
//! that synthesis maps to one DSP48E2 and the unpack must be reusable on its own.
//!
//! Every `update()` (the Rust model rust-hdl simulates) calls the `packing` functions; the `hdl()` Verilog
//! is written by hand (`Verilog::Custom`) and the tests check the two against each other.

use opu_hw::numerics::packing;
use rust_hdl::prelude::*;

/// Width of the P register.
pub const P_BITS: usize = packing::DSP_P_BITS as usize;
/// Width of one w4x2 product (`x * w`, x i16, w 0..=15: [-491520, 491505]).
pub const PRODUCT_BITS: usize = 20;

/// The value of a `Signed<N>` (N <= 64) as an i64 (sign-extended by hand: `signed_bit_cast` recurses forever
/// on the most negative value).
pub fn signed_to_i64<const N: usize>(v: Signed<N>) -> i64 {
    packing::sext(unsigned_cast(v).to_u64() as i64, N as u32)
}

/// The low `N` bits of `v` as a `Signed<N>` (two's complement wrap, like a Verilog truncation).
pub fn i64_to_signed<const N: usize>(v: i64) -> Signed<N> {
    let mask = if N >= 64 { u64::MAX } else { (1u64 << N) - 1 };
    signed_cast(Bits::<N>::from(v as u64 & mask))
}

/// One DSP48E2 computing the w4x2u packed product, registered in P.
///
/// Inputs `w0`, `w1` (unsigned 4 bits), `x` (signed 16 bits); output `p` (signed 48 bits) =
/// `dsp_mul27x18(pack_w4x2u([w0, w1], x))` one clock edge later.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct PackedMulW4x2 {
    pub clock: Signal<In, Clock>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<16>>,
    pub p: Signal<Out, Signed<P_BITS>>,
}

impl Logic for PackedMulW4x2 {
    fn update(&mut self) {
        if self.clock.pos_edge() {
            let w = [self.w0.val().to_u8(), self.w1.val().to_u8()];
            let x = signed_to_i64(self.x.val()) as i16;
            let (a, b) = packing::pack_w4x2u(w, x);
            self.p.next = i64_to_signed(packing::dsp_mul27x18(a, b));
        }
    }
    fn connect(&mut self) {
        self.p.connect();
    }
    fn hdl(&self) -> Verilog {
        // Port A: w1 at bit 22, w0 at bit 0, bit 26 (sign) 0; port B: x sign-extended to 18 bits. Both
        // operands signed, so `*` is the DSP48E2's 27x18 signed multiply; the assignment context (48 bits,
        // signed) sign-extends the 45-bit product like the P register does.
        Verilog::Custom(
            "\
wire signed [26:0] port_a;
wire signed [17:0] port_b;
assign port_a = {1'b0, w1, 18'b0, w0};
assign port_b = {{2{x[15]}}, x};
always @(posedge clock) begin
   p <= port_a * port_b;
end
"
            .into(),
        )
    }
    fn timing(&self) -> Vec<TimingInfo> {
        vec![TimingInfo {
            name: "dsp_w4x2".into(),
            clock: "clock".into(),
            inputs: vec!["w0".into(), "w1".into(), "x".into()],
            outputs: vec!["p".into()],
        }]
    }
}

/// The w4x2 extraction (combinational): `y0 = P[19:0]`, `y1 = P[41:22] + P[21]`, i.e. the two fields of
/// [`packing::unpack_w4x2`] reduced mod 2^20 (equal to them whenever they fit 20 bits, which single w4x2
/// products, unsigned or signed weights, always do). Bit-exact with the model for every 48-bit `p`.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct UnpackW4x2 {
    pub p: Signal<In, Signed<P_BITS>>,
    pub y0: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y1: Signal<Out, Signed<PRODUCT_BITS>>,
}

impl Logic for UnpackW4x2 {
    fn update(&mut self) {
        let f = packing::unpack_w4x2(signed_to_i64(self.p.val()));
        self.y0.next = i64_to_signed(i64::from(f[0]));
        self.y1.next = i64_to_signed(i64::from(f[1]));
    }
    fn connect(&mut self) {
        self.y0.connect();
        self.y1.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(
            "\
always @(*) begin
   y0 = p[19:0];
   y1 = p[41:22] + {19'b0, p[21]};
end
"
            .into(),
        )
    }
}

/// [`PackedMulW4x2`] followed by [`UnpackW4x2`]: `[y0, y1] = w4x2u_products([w0, w1], x)` one clock edge
/// after the inputs.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct MulW4x2 {
    pub clock: Signal<In, Clock>,
    pub w0: Signal<In, Bits<4>>,
    pub w1: Signal<In, Bits<4>>,
    pub x: Signal<In, Signed<16>>,
    pub y0: Signal<Out, Signed<PRODUCT_BITS>>,
    pub y1: Signal<Out, Signed<PRODUCT_BITS>>,
    mul: PackedMulW4x2,
    unpack: UnpackW4x2,
}

impl Logic for MulW4x2 {
    #[hdl_gen]
    fn update(&mut self) {
        self.mul.clock.next = self.clock.val();
        self.mul.w0.next = self.w0.val();
        self.mul.w1.next = self.w1.val();
        self.mul.x.next = self.x.val();
        self.unpack.p.next = self.mul.p.val();
        self.y0.next = self.unpack.y0.val();
        self.y1.next = self.unpack.y1.val();
    }
}

//! The fused sum of squares of a stored output chunk on its own (unit `sqsum`): the stages `vx_sqp1` ..
//! `vx_sqp4` of [`crate::vecunit::dp::VX_FUNCTIONS`] registered as [`sqsum_stages`] writes them, which the
//! matrix datapath (`matmul` with `red`) and the vector datapath (`vop` with `red`) both instantiate, so that
//! this unit's test against opu-hw ([`accumulate_square`] into a [`WideAcc`], value by value, extremes
//! included) checks their pipeline.
//!
//! Inputs: a 32-byte chunk `ch` as stored (16 FP16 halves, or with `f32` 8 FP32 words) and `mask` (bit `k`:
//! value `k` takes part). Outputs, [`SQSUM_LATENCY`] edges later: the sum of the squares on the accumulator's
//! 2^-32 grid and its non-finite flag (a non-finite value, or a square of 2^78 units or more; the sum's bits
//! are then unspecified, as the accumulator's are), a chunk per cycle.

use crate::lane::{acc_bits, ModelState, ACC_BITS};
use crate::vecunit::dp::VX_FUNCTIONS;
use opu_hw::numerics::acc::WideAcc;
use opu_hw::numerics::fp16::f16_to_f32;
use opu_hw::numerics::vector::accumulate_square;
use rust_hdl::prelude::*;

/// Edges from a chunk to its sum: the four stages (squares, shifts, sums of four, the sum), each registered
/// for the 225 MHz budget.
pub const SQSUM_LATENCY: usize = 4;

/// The Verilog of the four stages (with [`VX_FUNCTIONS`] in scope): registers `{prefix}_p1` .. `_p3` and the
/// output `out` (97 bits, `{nf, sum}`), from the chunk `ch`, `f32` and `mask` (Verilog expressions). The matrix
/// datapath and this unit both use it, so the unit's test checks the datapath's pipeline.
pub fn sqsum_stages(prefix: &str, ch: &str, f32: &str, mask: &str, out: &str) -> String {
    format!(
        "    reg [920:0] {prefix}_p1;
    reg [1680:0] {prefix}_p2;
    reg [428:0] {prefix}_p3;
    always @(posedge clock) begin
        {prefix}_p1 <= vx_sqp1({ch}, {f32}, {mask});
        {prefix}_p2 <= vx_sqp2({prefix}_p1);
        {prefix}_p3 <= vx_sqp3({prefix}_p2);
        {out} <= vx_sqp4({prefix}_p3);
    end
"
    )
}

/// The sum of the squares of `ch`'s values whose bit in `mask` is set, as opu-hw computes it.
pub fn chunk_sum_of_squares(ch: &[u8; 32], f32_values: bool, mask: u16) -> WideAcc {
    let mut acc = WideAcc::ZERO;
    if f32_values {
        for k in (0..8).filter(|k| mask >> k & 1 == 1) {
            let w = u32::from_le_bytes(ch[4 * k..4 * k + 4].try_into().expect("4 bytes"));
            accumulate_square(&mut acc, f32::from_bits(w));
        }
    } else {
        for k in (0..16).filter(|k| mask >> k & 1 == 1) {
            accumulate_square(&mut acc, f16_to_f32(u16::from_le_bytes([ch[2 * k], ch[2 * k + 1]])));
        }
    }
    acc
}

/// The sum of squares' stages (see the module docs).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct SqSum {
    pub clock: Signal<In, Clock>,
    pub ch: Signal<In, Bits<256>>,
    pub f32: Signal<In, Bit>,
    pub mask: Signal<In, Bits<16>>,
    pub sum: Signal<Out, Signed<ACC_BITS>>,
    pub nf: Signal<Out, Bit>,
    /// The chunks' sums in the stages, the newest first.
    model: ModelState<[WideAcc; SQSUM_LATENCY - 1]>,
}

impl Logic for SqSum {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let v = self.ch.val();
        let ch: [u8; 32] = std::array::from_fn(|k| v.get_bits::<8>(8 * k).to_u64() as u8);
        let acc = chunk_sum_of_squares(&ch, self.f32.val(), self.mask.val().to_u64() as u16);
        let stages = &mut self.model.0;
        let out = stages[SQSUM_LATENCY - 2];
        stages.copy_within(0..SQSUM_LATENCY - 2, 1);
        stages[0] = acc;
        self.sum.next = acc_bits(out.fixed);
        self.nf.next = out.nonfinite;
    }
    fn connect(&mut self) {
        self.sum.connect();
        self.nf.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(format!("{VX_FUNCTIONS}{}", sqsum_stages("sq", "ch", "f32", "mask", "{nf, sum}")))
    }
}

/// [`SqSum`] ready to simulate or emit.
pub fn sqsum_top() -> SqSum {
    connect_top!(SqSum::default(), clock, ch, f32, mask)
}

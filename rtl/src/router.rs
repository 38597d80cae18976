//! The router unit: SkipGPT's per-token router (`route`, docs/isa.md) as an FP16 x FP16 dot-product datapath.
//!
//! For the FP16 vector `x` and the two FP16 weight rows (execute, skip) it computes
//! `l_k = (dot_f16(x, w_k) + b_k).to_f32()` exactly as [`dot::accumulate_f16_product`],
//! [`WideAcc::add_f16`] and [`WideAcc::to_f32`] define it, and `skip = l_skip > l_execute` (NaN: execute).
//! The same datapath computes attention scores (`dot_f16(q, k)`, two keys sharing `q`).
//!
//! Per cycle ("beat") 8 columns of both rows: 16 products, one per DSP48E2 (11 x 11-bit significands; the
//! exponent sum rides beside). Every product is exact; each is floored onto the accumulator's 2^-32 grid on
//! its own (`floor(p * 2^(ex + ew - 18))`, an arithmetic shift), as the numerics add it.
//!
//! Pipeline (register stages): 1 inputs; 2 products (DSP), exponent sums, signs, non-finite flags; 3 each
//! product on the grid; 4 tree 4 -> 1 (two per row); 5 row sums of the beat; 6 the 96-bit accumulators
//! (`first` restarts them); 7 the biases added (on a vector's `last` beat); 8a-8c normalization in three
//! stages (magnitude, leading-one position, shift: `round`'s, for the 225 MHz budget); 9 FP32 rounding
//! (nearest, ties to even); 10 the comparison, outputs and `done`.
//! [`ROUTER_LATENCY`] edges from a vector's last beat to `done`.

use crate::lane::ModelState;
use crate::round::{round_stages, ROUND_VERILOG};
use opu_hw::numerics::acc::WideAcc;
use opu_hw::numerics::dot;
use rust_hdl::prelude::*;
use std::collections::VecDeque;

/// Columns per beat.
pub const ROUTER_COLS: usize = 8;
/// DSP48E2 of the unit (one product each).
pub const ROUTER_DSPS: usize = 2 * ROUTER_COLS;
/// A beat's FP16 bus: column `j` at bits `16j..16j+16`.
pub const F16_BUS: usize = ROUTER_COLS * 16;
/// Stages from the edge that takes a beat to its accumulation (S1..S5), and on to `done` (S7, S8a-c, S9, S10).
const TO_ACC: usize = 5;
const ACC_TO_OUT: usize = 6;
/// A vector whose last beat entered at edge `t` has its logits out after edge `t + ROUTER_LATENCY - 1`.
pub const ROUTER_LATENCY: usize = TO_ACC + 1 + ACC_TO_OUT;
/// A vector whose last beat entered at edge `t` has its accumulators out (`acc_done`) after edge
/// `t + ROUTER_ACC_LATENCY - 1`.
pub const ROUTER_ACC_LATENCY: usize = TO_ACC + 1;

/// The rules this unit implements (the logits and the decision): `opu_hw::numerics::router`.
pub use opu_hw::numerics::router::{decide, route};

/// Packs up to 8 FP16 values (zero-padded) into a beat bus.
pub fn f16_bus(v: &[u16]) -> Bits<F16_BUS> {
    assert!(v.len() <= ROUTER_COLS);
    let mut b = Bits::<F16_BUS>::default();
    for (j, &h) in v.iter().enumerate() {
        b.set_bits::<16>(16 * j, Bits::<16>::from(u64::from(h)));
    }
    b
}

#[derive(Clone, Copy, Debug, Default)]
struct Beat {
    valid: bool,
    first: bool,
    last: bool,
    delta: [WideAcc; 2],
    bias: [u16; 2],
}

#[derive(Clone, Copy, Debug, Default)]
struct Outcome {
    valid: bool,
    l: [u32; 2],
    skip: bool,
}

#[derive(Clone, Debug, Default)]
struct RouterModel {
    beats: VecDeque<Beat>,
    outcomes: VecDeque<Outcome>,
    acc: [WideAcc; 2],
    out: Outcome,
}

/// The 96-bit two's complement of an accumulator's fixed-point value (the RTL's register).
fn acc_bits(a: &WideAcc) -> Bits<96> {
    let v = a.fixed as u128 & ((1u128 << 96) - 1);
    let mut b = Bits::<96>::default();
    b.set_bits::<64>(0, Bits::<64>::from(v as u64));
    b.set_bits::<32>(64, Bits::<32>::from((v >> 64) as u64));
    b
}

/// The router unit. Feed a vector's beats (`valid`; `first` on the first, `last` with the biases `b0`, `b1`
/// on the last); `done` rises for one cycle with the logits `l0` (execute), `l1` (skip) as FP32 bits and
/// `skip`, which hold until the next `done`.
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Router {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub valid: Signal<In, Bit>,
    pub first: Signal<In, Bit>,
    pub last: Signal<In, Bit>,
    pub x: Signal<In, Bits<F16_BUS>>,
    pub w0: Signal<In, Bits<F16_BUS>>,
    pub w1: Signal<In, Bits<F16_BUS>>,
    pub b0: Signal<In, Bits<16>>,
    pub b1: Signal<In, Bits<16>>,
    pub l0: Signal<Out, Bits<32>>,
    pub l1: Signal<Out, Bits<32>>,
    pub skip: Signal<Out, Bit>,
    pub done: Signal<Out, Bit>,
    /// The two accumulators as they stand after a vector's last beat, before the biases and the rounding
    /// (96 bits on the 2^-32 grid, and the non-finite flags), valid while `acc_done` is high: the cycle after
    /// the last beat's accumulation (S6), [`ROUTER_ACC_LATENCY`] edges after the beat. The matrix unit's
    /// `fmt=f16` takes them to its own start value and rounding.
    pub acc0: Signal<Out, Bits<96>>,
    pub acc1: Signal<Out, Bits<96>>,
    pub nf0: Signal<Out, Bit>,
    pub nf1: Signal<Out, Bit>,
    pub acc_done: Signal<Out, Bit>,
    state: ModelState<RouterModel>,
}

impl Logic for Router {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let reset = self.reset.val();
        let s = &mut self.state.0;
        if s.beats.is_empty() {
            s.beats.extend(std::iter::repeat_n(Beat::default(), TO_ACC));
            s.outcomes.extend(std::iter::repeat_n(Outcome::default(), ACC_TO_OUT));
        }
        // S10: the outcome formed at S6 `ACC_TO_OUT` edges ago.
        let o = s.outcomes.pop_front().unwrap_or_default();
        if o.valid {
            s.out = o;
        }
        // S6: the beat taken five edges ago.
        let b = s.beats.pop_front().unwrap_or_default();
        let mut next = Outcome::default();
        let acc_done = b.valid && b.last && !reset;
        if b.valid {
            for r in 0..2 {
                let base = if b.first { WideAcc::ZERO } else { s.acc[r] };
                s.acc[r] = WideAcc { fixed: base.fixed + b.delta[r].fixed, nonfinite: base.nonfinite | b.delta[r].nonfinite };
            }
            if b.last {
                let l = std::array::from_fn(|r| {
                    let mut a = s.acc[r];
                    a.add_f16(b.bias[r]);
                    a.to_f32()
                });
                next = Outcome { valid: !reset, l: l.map(f32::to_bits), skip: decide(l[0], l[1]) };
            }
        }
        s.outcomes.push_back(next);
        // S1: this edge's beat.
        let get = |v: Bits<F16_BUS>| -> [u16; ROUTER_COLS] { std::array::from_fn(|j| v.get_bits::<16>(16 * j).to_u64() as u16) };
        let (x, w0, w1) = (get(self.x.val()), get(self.w0.val()), get(self.w1.val()));
        let delta = [w0, w1].map(|w| {
            let mut a = WideAcc::ZERO;
            for (&xj, &wj) in x.iter().zip(&w) {
                dot::accumulate_f16_product(&mut a, xj, wj);
            }
            a
        });
        s.beats.push_back(Beat {
            valid: self.valid.val() && !reset,
            first: self.first.val(),
            last: self.last.val(),
            delta,
            bias: [self.b0.val().to_u16(), self.b1.val().to_u16()],
        });
        if reset {
            s.beats.iter_mut().for_each(|b| b.valid = false);
            s.outcomes.iter_mut().for_each(|o| o.valid = false);
        }
        self.l0.next = u64::from(s.out.l[0]).into();
        self.l1.next = u64::from(s.out.l[1]).into();
        self.skip.next = s.out.skip;
        self.done.next = o.valid;
        self.acc0.next = acc_bits(&s.acc[0]);
        self.acc1.next = acc_bits(&s.acc[1]);
        self.nf0.next = s.acc[0].nonfinite;
        self.nf1.next = s.acc[1].nonfinite;
        self.acc_done.next = acc_done;
    }
    fn connect(&mut self) {
        self.l0.connect();
        self.l1.connect();
        self.skip.connect();
        self.done.connect();
        self.acc0.connect();
        self.acc1.connect();
        self.nf0.connect();
        self.nf1.connect();
        self.acc_done.connect();
    }
    fn hdl(&self) -> Verilog {
        let (decl_a, body_a) = round_stages("ra_", "fa7", "nfa7", "la9", None);
        let (decl_b, body_b) = round_stages("rb_", "fb7", "nfb7", "lb9", None);
        let router = ROUTER_VERILOG
            .replace("// @ROUND_DECL@\n", &format!("{decl_a}{decl_b}"))
            .replace("// @ROUND_STAGES@\n", &format!("{body_a}{body_b}"));
        assert!(!router.contains("// @ROUND"), "the router's rounding stages are in place");
        Verilog::Custom(format!("{ROUND_VERILOG}{router}"))
    }
}

const ROUTER_VERILOG: &str = "\
// S1: inputs
reg [127:0] x1, wa1, wb1;
reg [15:0] ba1, bb1;
reg v1, first1, last1;
// S2..S3 per product (g < 8: row 0, column g; g >= 8: row 1, column g - 8)
wire [1119:0] grid_all;
wire [15:0] nf_all;
genvar g;
generate for (g = 0; g < 16; g = g + 1) begin : prod
   wire [15:0] xh;
   wire [15:0] wh;
   wire [10:0] sx, sw;
   wire [5:0] e;
   reg [21:0] p;
   reg s;
   reg [5:0] ee;
   reg nf2;
   wire signed [69:0] t;
   wire signed [6:0] sh;
   wire [6:0] nsh;
   reg signed [69:0] g3;
   assign xh = x1[16*(g % 8) +: 16];
   assign wh = (g < 8) ? wa1[16*(g % 8) +: 16] : wb1[16*(g % 8) +: 16];
   assign sx = {xh[14:10] != 5'd0, xh[9:0]};
   assign sw = {wh[14:10] != 5'd0, wh[9:0]};
   assign e = ((xh[14:10] == 5'd0) ? 6'd1 : {1'b0, xh[14:10]}) + ((wh[14:10] == 5'd0) ? 6'd1 : {1'b0, wh[14:10]});
   assign t = s ? -{48'd0, p} : {48'd0, p};
   assign sh = {1'b0, ee} - 7'sd18;
   assign nsh = -sh;
   always @(posedge clock) begin
      p <= sx * sw;
      s <= xh[15] ^ wh[15];
      ee <= e;
      nf2 <= (xh[14:10] == 5'd31) || (wh[14:10] == 5'd31);
      g3 <= sh[6] ? (t >>> nsh) : (t <<< sh);
   end
   assign grid_all[70*g +: 70] = g3;
   assign nf_all[g] = nf2;
end endgenerate
reg [15:0] ba2, bb2, ba3, bb3, ba4, bb4, ba5, bb5;
// the biases on the grid, formed beside the products and the accumulation (the shift at S5, the sign at S6) so
// that S7 is one 96-bit add
reg [47:0] ma5, mb5;
reg signed [95:0] ga6, gb6;
reg nba6, nbb6;
reg v2, v3, v4, v5, v6, v7, v8, v8b, v8c, v9;
reg first2, first3, first4, first5, last2, last3, last4, last5;
reg [15:0] nf3;
reg nfa4, nfb4, nfa5, nfb5;
reg signed [95:0] sa4_0, sa4_1, sb4_0, sb4_1, sa5, sb5;
reg signed [95:0] acc_a, acc_b;
reg nf_a, nf_b;
// S7..S9 (S8 in three stages: 8, 8b, 8c)
reg signed [95:0] fa7, fb7;
reg nfa7, nfb7;
reg [31:0] la9, lb9;
// @ROUND_DECL@
function automatic signed [95:0] g70(input [69:0] v);
   g70 = {{26{v[69]}}, v};
endfunction
// an FP16 bias's magnitude on the grid: sig * 2^(exp - 25 + 32), exp >= 1, so a left shift by 8..37 (its
// sign is applied a stage later)
function automatic [47:0] bias_mag(input [15:0] h);
   reg [47:0] sig;
   reg [5:0] sh;
   begin
      sig = {37'd0, h[14:10] != 5'd0, h[9:0]};
      sh = ((h[14:10] == 5'd0) ? 6'd1 : {1'b0, h[14:10]}) + 6'd7;
      bias_mag = sig << sh;
   end
endfunction
// the accumulators after a vector's last beat, before the biases (the matrix unit's `fmt=f16`)
always @(*) begin
   acc0 = acc_a;
   acc1 = acc_b;
   nf0 = nf_a;
   nf1 = nf_b;
   acc_done = v6;
end
always @(posedge clock) begin
   x1 <= x;
   wa1 <= w0;
   wb1 <= w1;
   ba1 <= b0;
   bb1 <= b1;
   first1 <= first;
   last1 <= last;
   ba2 <= ba1; bb2 <= bb1; ba3 <= ba2; bb3 <= bb2; ba4 <= ba3; bb4 <= bb3; ba5 <= ba4; bb5 <= bb4;
   first2 <= first1; first3 <= first2; first4 <= first3; first5 <= first4;
   last2 <= last1; last3 <= last2; last4 <= last3; last5 <= last4;
   nf3 <= nf_all;
   nfa4 <= |nf3[7:0];
   nfb4 <= |nf3[15:8];
   nfa5 <= nfa4;
   nfb5 <= nfb4;
   sa4_0 <= g70(grid_all[69:0]) + g70(grid_all[139:70]) + g70(grid_all[209:140]) + g70(grid_all[279:210]);
   sa4_1 <= g70(grid_all[349:280]) + g70(grid_all[419:350]) + g70(grid_all[489:420]) + g70(grid_all[559:490]);
   sb4_0 <= g70(grid_all[629:560]) + g70(grid_all[699:630]) + g70(grid_all[769:700]) + g70(grid_all[839:770]);
   sb4_1 <= g70(grid_all[909:840]) + g70(grid_all[979:910]) + g70(grid_all[1049:980]) + g70(grid_all[1119:1050]);
   sa5 <= sa4_0 + sa4_1;
   sb5 <= sb4_0 + sb4_1;
   // S6
   if (v5) begin
      acc_a <= (first5 ? 96'sd0 : acc_a) + sa5;
      acc_b <= (first5 ? 96'sd0 : acc_b) + sb5;
      nf_a <= (!first5 && nf_a) || nfa5;
      nf_b <= (!first5 && nf_b) || nfb5;
   end
   ma5 <= bias_mag(ba4);
   mb5 <= bias_mag(bb4);
   ga6 <= ba5[15] ? -$signed({48'd0, ma5}) : $signed({48'd0, ma5});
   gb6 <= bb5[15] ? -$signed({48'd0, mb5}) : $signed({48'd0, mb5});
   nba6 <= ba5[14:10] == 5'd31;
   nbb6 <= bb5[14:10] == 5'd31;
   // S7: the biases
   fa7 <= acc_a + ga6;
   fb7 <= acc_b + gb6;
   nfa7 <= nf_a || nba6;
   nfb7 <= nf_b || nbb6;
   // S8 (8, 8b, 8c: the magnitude, its leading one, the shift) and S9 (round): the output stage's
   // (`round::round_stages`)
// @ROUND_STAGES@
   // S10: compare (FP32 order on sign-magnitude; NaN never skips; the datapath never makes -0)
   if (v9) begin
      l0 <= la9;
      l1 <= lb9;
      skip <= !(la9 == 32'h7FC00000 || lb9 == 32'h7FC00000) &&
              ((!la9[31] && !lb9[31] && lb9[30:0] > la9[30:0]) ||
               (la9[31] && !lb9[31] && (|la9[30:0] || |lb9[30:0])) ||
               (la9[31] && lb9[31] && lb9[30:0] < la9[30:0]));
   end
   done <= v9;
   if (reset) begin
      v1 <= 1'b0; v2 <= 1'b0; v3 <= 1'b0; v4 <= 1'b0; v5 <= 1'b0; v6 <= 1'b0; v7 <= 1'b0; v8 <= 1'b0;
      v8b <= 1'b0; v8c <= 1'b0; v9 <= 1'b0;
   end else begin
      v1 <= valid;
      v2 <= v1;
      v3 <= v2;
      v4 <= v3;
      v5 <= v4;
      v6 <= v5 && last5;
      v7 <= v6;
      v8 <= v7;
      v8b <= v8;
      v8c <= v8b;
      v9 <= v8c;
   end
end
";

/// [`Router`] ready to simulate or emit.
pub fn router_top() -> Router {
    connect_top!(Router::default(), clock, reset, valid, first, last, x, w0, w1, b0, b1)
}

//! The reduction unit: the fused sum of squares (RMSNorm's statistic) and the online-softmax running state,
//! bit-exact with `opu_hw::numerics::vector` (docs/numerics.md "Vector unit").
//!
//! **Sum of squares** ([`accumulate_square`] into a 96-bit [`WideAcc`], one element per cycle): `sq_valid`
//! with the element `sq_x` (FP32 bits; an FP16 value converts exactly), `sq_clear` with a row's first
//! element restarts the sum at zero. `sumsq` / `sumsq_nf` show the accumulator and its non-finite flag,
//! `sumsq_f32` its rounding [`WideAcc::to_f32`] (the `a` of the lane's `rms_inv`, which then computes
//! `rsqrt(sumsq * recip(n) + eps)` = `vector::rms_inv`), [`SUMSQ_LATENCY`] stages after the element.
//! Pipeline: 1 input registers; 2 the 24 x 24 square (DSP48E2), the exponent; 3 product register; 4 leading
//! zeros, the 2^78 term limit; 5 the shift onto the 2^-32 grid; 6 the accumulator; 7 normalization; 8 FP32
//! rounding and the outputs.
//!
//! **Online softmax** (`OnlineSoftmax::push` without the output rows): per score `s`, `m' = max(m, s)` (a
//! NaN score wins; comparisons as IEEE), `c = exp(m - m')` (1 when `m' == m`), `p = exp(s - m')`,
//! `l = l * c + p`. The unit keeps [`SOFTMAX_ROWS`] independent states (a row: one query head's softmax),
//! selected by `sm_row`. `sm_valid` with `score` and `sm_row` is taken unless `sm_busy[sm_row]`
//! (`sm_start` with a row's first score restarts it from `m = -inf`, `l = 0`): a row takes one score every
//! [`SOFTMAX_II`] cycles, because its `l` depends on its previous `l` through a multiply and an add;
//! different rows interleave, one score per cycle in all. `sm_out` pulses with `sm_out_row`, `sm_c`, `sm_p`
//! (what the vector lanes need for `o * c + p * v`, their `axpby`), `sm_l` and `sm_m`
//! [`softmax_latency`] stages after the score. Pipeline: the max and the equality (stage 0); the two
//! subtractions; two `exp` in parallel (the lane's); `c`; `l * c` (multiply) then `+ p` (add), whose result
//! is written back to the row (and forwarded to a score of the same row [`SOFTMAX_II`] cycles behind).
//! `reset` clears `sm_busy` and the scores in flight (the sum of squares needs none: its first element
//! comes with `sq_clear`; a row's first score comes with `sm_start`).
//!
//! The attention unit's instance is [`Reduce::softmax_only`]: built without the sum of squares, whose outputs
//! stay 0 (the overlay's fused sums of squares are in the matrix and vector datapaths, `sqsum::sqsum_stages`).

use crate::fp32::{fp_op_verilog, FpOp, Graph, FADD_LATENCY, FMUL_LATENCY, FP32_VERILOG};
use crate::lane::{acc_bits, ModelState, ACC_BITS};
use crate::vector::{approx_verilog, exp_graph};
use opu_hw::numerics::acc::WideAcc;
use opu_hw::numerics::fp16::canon_f32;
use opu_hw::numerics::vector::{accumulate_square, OnlineSoftmax};
use rust_hdl::prelude::*;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// Register stages of the sum of squares: an element before edge `t` is in the outputs after edge
/// `t + SUMSQ_LATENCY - 1`.
pub const SUMSQ_LATENCY: usize = 8;
/// Cycles between two scores of the same online-softmax row: one multiply and one add (the `l` recurrence).
pub const SOFTMAX_II: usize = (FMUL_LATENCY + FADD_LATENCY) as usize;
/// Independent online-softmax states (rows, e.g. the query heads of a group), selected by `sm_row`.
pub const SOFTMAX_ROWS: usize = 16;
/// Width of `sm_row`.
pub const ROW_BITS: usize = 4;

/// One step of the online softmax as the unit computes it: `(c, p, l, m)` after score `s` from state
/// `state` (whose `out` rows are empty). `l` (NaN canonical) and `m` are `OnlineSoftmax::push`'s; `c` and `p` are the
/// factors it applies to the output rows (`o * c + p * v`), computed as it computes them.
pub fn softmax_step(state: &mut OnlineSoftmax, s: f32) -> (f32, f32, f32, f32) {
    let (c, p) = state.step(s);
    (c, p, canon_f32(state.sum), state.max)
}

struct Built {
    verilog: String,
    softmax_latency: usize,
}

/// The unit's Verilog, with the sum of squares (`sumsq`) or without (its outputs 0).
fn built(sumsq: bool) -> &'static Built {
    static FULL: OnceLock<Built> = OnceLock::new();
    static SOFTMAX: OnceLock<Built> = OnceLock::new();
    if sumsq {
        FULL.get_or_init(|| build(true))
    } else {
        SOFTMAX.get_or_init(|| build(false))
    }
}

fn build(sumsq: bool) -> Built {
    let mut g = Graph::new("r");
    let s = g.signal("s1_score", 32, 1);
    let mo = g.signal("s1_mo", 32, 1);
    let mn = g.signal("s1_mn", 32, 1);
    let eq = g.signal("s1_eq", 1, 1);
    let start = g.signal("s1_start", 1, 1);
    let row = g.signal("s1_row", ROW_BITS as u32, 1);
    let d1 = g.sub(mo, mn);
    let d2 = g.sub(s, mn);
    let e1 = exp_graph(&mut g, d1);
    let e2 = exp_graph(&mut g, d2);
    let c = g.comb(32, true, &[eq, e1], "#0 ? 32'h3F800000 : #1");
    g.output("g_c", c, true);
    g.output("g_p", e2, true);
    g.output("g_start", start, true);
    g.output("g_m", mn, true);
    g.output("g_row", row, true);
    let t = g.latency() as usize;
    let fb = t + SOFTMAX_II; // time of the fed-back l
    let mut v = String::new();
    v.push_str(FP32_VERILOG);
    v.push_str(&approx_verilog());
    v.push_str(if sumsq { SUMSQ_VERILOG } else { NO_SUMSQ_VERILOG });
    v.push_str(
        &STAGE0_VERILOG
            .replace("@VB", &fb.to_string())
            .replace("@II", &(SOFTMAX_II - 1).to_string())
            .replace("@R1", &(SOFTMAX_ROWS - 1).to_string())
            .replace("@ROWS", &SOFTMAX_ROWS.to_string()),
    );
    v.push_str(&g.verilog());
    let delay = |v: &mut String, name: &str, src: &str, width: usize, n: usize| {
        let regs: Vec<String> = (1..=n).map(|k| format!("{name}{k}")).collect();
        let _ = writeln!(v, "reg [{}:0] {};", width - 1, regs.join(", "));
        let _ = write!(v, "always @(posedge clock) begin\n   {name}1 <= {src};\n");
        for k in 2..=n {
            let _ = writeln!(v, "   {name}{k} <= {name}{};", k - 1);
        }
        v.push_str("end\n");
    };
    delay(&mut v, "sl_p", "g_p", 32, SOFTMAX_II);
    delay(&mut v, "sl_c", "g_c", 32, SOFTMAX_II);
    delay(&mut v, "sl_m", "g_m", 32, SOFTMAX_II);
    delay(&mut v, "sl_row", "g_row", ROW_BITS, SOFTMAX_II);
    // The l recurrence: l_in = start ? 0 : the row's l (forwarded when the row's previous score is
    // finishing right now, SOFTMAX_II cycles ahead).
    let _ = writeln!(
        v,
        "wire [31:0] sl_lin;\nassign sl_lin = g_start ? 32'd0 : (smv[{fb}] && sl_row{ii} == g_row) ? sl_ln : sm_lreg[g_row];",
        ii = SOFTMAX_II
    );
    v.push_str(&fp_op_verilog(FpOp::Mul, "sl_lc", "sl_lin", "g_c"));
    v.push_str(&fp_op_verilog(FpOp::Add, "sl_ln", "sl_lc", &format!("sl_p{FMUL_LATENCY}")));
    let _ = write!(
        v,
        "always @(posedge clock) begin\n   \
         if (smv[{fb}]) begin\n      \
         sm_lreg[sl_row{ii}] <= sl_ln;\n      sm_l <= sl_ln;\n      sm_c <= sl_c{ii};\n      sm_p <= sl_p{ii};\n      \
         sm_m <= sl_m{ii};\n      sm_out_row <= sl_row{ii};\n   \
         end\n   \
         sm_out <= smv[{fb}];\n\
         end\n",
        ii = SOFTMAX_II
    );
    Built { verilog: v, softmax_latency: fb + 1 }
}

/// Register stages of the online softmax: a score taken at edge `t` has its outputs after edge
/// `t + softmax_latency() - 1`.
pub fn softmax_latency() -> usize {
    built(true).softmax_latency
}

/// The outputs of the sum of squares in an instance without it ([`Reduce::softmax_only`]).
const NO_SUMSQ_VERILOG: &str = "\
// ---- no sum of squares in this instance: its outputs stay 0 ----
always @(posedge clock) begin
   sumsq <= 96'sd0;
   sumsq_nf <= 1'b0;
   sumsq_f32 <= 32'd0;
end
";

/// The sum of squares' Verilog (SUMSQ_LATENCY stages).
const SUMSQ_VERILOG: &str = "\
// ---- sum of squares ----
// WideAcc::to_f32, first half: {leading zeros, magnitude shifted to put its leading one at bit 95}
function automatic [102:0] rd_norm(input [95:0] rn_v);
   reg [95:0] rn_m;
   reg [6:0] rn_z;
   begin
      rn_m = rn_v[95] ? 96'd0 - rn_v : rn_v;
      rn_z = (rn_m[95:32] != 64'd0) ? fp_lzc64(rn_m[95:32]) : 7'd64 + fp_lzc64({rn_m[31:0], 32'hFFFFFFFF});
      rd_norm = {rn_z, rn_m << rn_z};
   end
endfunction
// second half: rounding (every nonzero value, 2^-32 <= |v| < 2^64, is a normal FP32: biased exponent
// 190 - lz); zero is +0
function automatic [31:0] rd_f32(input rf_sign, input [6:0] rf_z, input [95:0] rf_n);
   reg [31:0] rf_pk;
   begin
      rf_pk = fp_round(8'd189 - {1'b0, rf_z}, rf_n[95:72], rf_n[71], rf_n[70:0] != 71'd0);
      rd_f32 = rf_n[95] ? {rf_sign, rf_pk[30:0]} : 32'd0;
   end
endfunction
reg [31:0] q1_x;
reg q1_v, q1_c, q2_v, q2_c, q3_v, q3_c, q4_v, q4_c, q5_v, q5_c;
reg [47:0] q2_p, q3_p, q4_p;
reg signed [10:0] q2_sh, q3_sh, q4_sh;
reg q2_nf, q3_nf, q4_nf, q4_big, q5_nf;
reg [95:0] q5_t;
reg signed [95:0] acc;
reg acc_nf;
reg [102:0] q7_n;
reg signed [95:0] q7_acc;
reg q7_nf;
wire [6:0] q3_lz;
wire [10:0] q4_rs;
assign q3_lz = fp_lzc64({q3_p, 16'hFFFF});
assign q4_rs = 11'd0 - q4_sh;
always @(posedge clock) begin
   q1_x <= sq_x;
   q1_v <= sq_valid;
   q1_c <= sq_clear;
   // x^2 = sig^2 * 2^(2 exp), exp = max(e, 1) - 150; on the 2^-32 grid: shift 2 max(e, 1) - 268
   q2_p <= {q1_x[30:23] != 8'd0, q1_x[22:0]} * {q1_x[30:23] != 8'd0, q1_x[22:0]};
   q2_sh <= $signed({2'd0, (q1_x[30:23] == 8'd0) ? 8'd1 : q1_x[30:23], 1'b0}) - 11'sd268;
   q2_nf <= q1_x[30:23] == 8'hFF;
   q2_v <= q1_v;
   q2_c <= q1_c;
   q3_p <= q2_p;
   q3_sh <= q2_sh;
   q3_nf <= q2_nf;
   q3_v <= q2_v;
   q3_c <= q2_c;
   // a term of 2^78 units or more sets the non-finite flag instead (WideAcc::add_scaled)
   q4_big <= $signed({4'd0, 7'd48 - q3_lz}) + q3_sh > 11'sd78;
   q4_p <= q3_p;
   q4_sh <= q3_sh;
   q4_nf <= q3_nf;
   q4_v <= q3_v;
   q4_c <= q3_c;
   if (q4_big || q4_nf) q5_t <= 96'd0;
   else if (!q4_sh[10]) q5_t <= {48'd0, q4_p} << q4_sh[6:0];
   else if (q4_rs >= 11'd48) q5_t <= 96'd0;
   else q5_t <= {48'd0, q4_p >> q4_rs[5:0]};
   q5_nf <= q4_big || q4_nf;
   q5_v <= q4_v;
   q5_c <= q4_c;
   if (q5_v) begin
      acc <= (q5_c ? 96'sd0 : acc) + q5_t;
      acc_nf <= (!q5_c && acc_nf) || q5_nf;
   end
   q7_n <= rd_norm(acc);
   q7_acc <= acc;
   q7_nf <= acc_nf;
   sumsq <= q7_acc;
   sumsq_nf <= q7_nf;
   sumsq_f32 <= q7_nf ? 32'h7FC00000 : rd_f32(q7_acc[95], q7_n[102:96], q7_n[95:0]);
end
";

/// Stage 0 of the online softmax: the row's max, the equality, `sm_busy` and the valid bits `smv[k]` of
/// the scores at stage `k` (`@VB` stages, up to the fed-back `l`).
const STAGE0_VERILOG: &str = "\
// ---- online softmax ----
function automatic fs_nan(input [31:0] fn_x);
   fs_nan = (fn_x[30:23] == 8'hFF) && (fn_x[22:0] != 23'd0);
endfunction
// IEEE a > b (false with a NaN; +0 == -0)
function automatic fs_gt(input [31:0] gt_a, input [31:0] gt_b);
   if (fs_nan(gt_a) || fs_nan(gt_b) || (gt_a[30:0] == 31'd0 && gt_b[30:0] == 31'd0)) fs_gt = 1'b0;
   else if (gt_a[31] != gt_b[31]) fs_gt = !gt_a[31];
   else if (!gt_a[31]) fs_gt = gt_a[30:0] > gt_b[30:0];
   else fs_gt = gt_a[30:0] < gt_b[30:0];
endfunction
// IEEE a == b
function automatic fs_eq(input [31:0] eq_a, input [31:0] eq_b);
   fs_eq = !fs_nan(eq_a) && !fs_nan(eq_b) && ((eq_a == eq_b) || (eq_a[30:0] == 31'd0 && eq_b[30:0] == 31'd0));
endfunction
reg [31:0] sm_mreg [0:@R1];
reg [31:0] sm_lreg [0:@R1];
reg [4 * @ROWS - 1:0] sm_cnt;
reg [@VB:1] smv;
reg [31:0] s1_score, s1_mo, s1_mn;
reg s1_eq, s1_start;
reg [3:0] s1_row;
wire sm_acc;
wire [31:0] sm_mo, sm_mn;
assign sm_acc = sm_valid && !sm_busy[sm_row] && !reset;
assign sm_mo = sm_start ? 32'hFF800000 : sm_mreg[sm_row];
assign sm_mn = (fs_gt(score, sm_mo) || fs_nan(score)) ? score : sm_mo;
integer sm_r;
always @(posedge clock) begin
   s1_score <= score;
   s1_mo <= sm_mo;
   s1_mn <= sm_mn;
   s1_eq <= fs_eq(sm_mn, sm_mo);
   s1_start <= sm_start;
   s1_row <= sm_row;
   if (sm_acc) sm_mreg[sm_row] <= sm_mn;
   if (reset) smv <= 0;
   else smv <= {smv, sm_acc};
   // a row is busy for SOFTMAX_II - 1 cycles after it takes a score
   for (sm_r = 0; sm_r < @ROWS; sm_r = sm_r + 1) begin
      if (reset) begin
         sm_cnt[4 * sm_r +: 4] <= 4'd0;
         sm_busy[sm_r] <= 1'b0;
      end else if (sm_acc && sm_row == sm_r[3:0]) begin
         sm_cnt[4 * sm_r +: 4] <= 4'd@II;
         sm_busy[sm_r] <= 1'b1;
      end else if (sm_cnt[4 * sm_r +: 4] != 4'd0) begin
         sm_cnt[4 * sm_r +: 4] <= sm_cnt[4 * sm_r +: 4] - 4'd1;
         sm_busy[sm_r] <= sm_cnt[4 * sm_r +: 4] != 4'd1;
      end
   end
end
";

#[derive(Clone, Copy, Debug, Default)]
struct SmOut {
    valid: bool,
    row: u8,
    c: u32,
    p: u32,
    l: u32,
    m: u32,
}

#[derive(Clone, Debug)]
struct ReduceModel {
    acc: WideAcc,
    sq_pipe: VecDeque<(i128, bool, u32)>,
    rows: Vec<OnlineSoftmax>,
    sm_pipe: VecDeque<SmOut>,
    /// Cycles each row stays busy.
    cnt: [usize; SOFTMAX_ROWS],
    out: SmOut,
}

impl Default for ReduceModel {
    fn default() -> Self {
        ReduceModel {
            acc: WideAcc::ZERO,
            sq_pipe: VecDeque::new(),
            rows: vec![OnlineSoftmax::new(0); SOFTMAX_ROWS],
            sm_pipe: VecDeque::new(),
            cnt: [0; SOFTMAX_ROWS],
            out: SmOut::default(),
        }
    }
}

/// The reduction unit (see the module docs).
#[derive(Clone, Debug, Default, LogicBlock)]
pub struct Reduce {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub sq_valid: Signal<In, Bit>,
    pub sq_clear: Signal<In, Bit>,
    pub sq_x: Signal<In, Bits<32>>,
    pub sumsq: Signal<Out, Signed<ACC_BITS>>,
    pub sumsq_nf: Signal<Out, Bit>,
    pub sumsq_f32: Signal<Out, Bits<32>>,
    pub sm_valid: Signal<In, Bit>,
    pub sm_start: Signal<In, Bit>,
    pub sm_row: Signal<In, Bits<ROW_BITS>>,
    pub score: Signal<In, Bits<32>>,
    pub sm_busy: Signal<Out, Bits<SOFTMAX_ROWS>>,
    pub sm_out: Signal<Out, Bit>,
    pub sm_out_row: Signal<Out, Bits<ROW_BITS>>,
    pub sm_c: Signal<Out, Bits<32>>,
    pub sm_p: Signal<Out, Bits<32>>,
    pub sm_l: Signal<Out, Bits<32>>,
    pub sm_m: Signal<Out, Bits<32>>,
    state: ModelState<ReduceModel>,
    /// Built without the sum of squares (its outputs 0): the attention unit's instance, which uses the
    /// online softmax only (the matrix and vector units sum their squares in their own datapaths).
    softmax_only: ModelState<bool>,
}

impl Reduce {
    /// The unit without the sum of squares.
    pub fn softmax_only() -> Self {
        Reduce { softmax_only: ModelState(true), ..Default::default() }
    }
}

impl Logic for Reduce {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let s = &mut self.state.0;
        if s.sq_pipe.is_empty() {
            s.sq_pipe.extend(std::iter::repeat_n((0, false, 0), SUMSQ_LATENCY));
            s.sm_pipe.extend(std::iter::repeat_n(SmOut::default(), softmax_latency()));
        }
        // sum of squares
        if self.sq_valid.val() {
            if self.sq_clear.val() {
                s.acc = WideAcc::ZERO;
            }
            accumulate_square(&mut s.acc, f32::from_bits(self.sq_x.val().to_u32()));
        }
        s.sq_pipe.push_back((s.acc.fixed, s.acc.nonfinite, s.acc.to_f32().to_bits()));
        s.sq_pipe.pop_front();
        let (fixed, nf, f) = if self.softmax_only.0 { (0, false, 0) } else { s.sq_pipe[0] };
        self.sumsq.next = acc_bits(fixed);
        self.sumsq_nf.next = nf;
        self.sumsq_f32.next = u64::from(f).into();
        // online softmax
        let reset = self.reset.val();
        let row = self.sm_row.val().to_u64() as usize;
        let accept = self.sm_valid.val() && s.cnt[row] == 0 && !reset;
        let mut o = SmOut::default();
        if accept {
            if self.sm_start.val() {
                s.rows[row] = OnlineSoftmax::new(0);
            }
            let (c, p, l, m) = softmax_step(&mut s.rows[row], f32::from_bits(self.score.val().to_u32()));
            o = SmOut { valid: true, row: row as u8, c: c.to_bits(), p: p.to_bits(), l: l.to_bits(), m: m.to_bits() };
        }
        s.sm_pipe.push_back(o);
        s.sm_pipe.pop_front();
        if reset {
            for x in s.sm_pipe.iter_mut() {
                x.valid = false;
            }
        }
        let head = s.sm_pipe[0];
        if head.valid {
            s.out = head;
        }
        self.sm_out.next = head.valid;
        self.sm_out_row.next = u64::from(s.out.row).into();
        self.sm_c.next = u64::from(s.out.c).into();
        self.sm_p.next = u64::from(s.out.p).into();
        self.sm_l.next = u64::from(s.out.l).into();
        self.sm_m.next = u64::from(s.out.m).into();
        let mut busy = 0u64;
        for (r, cnt) in s.cnt.iter_mut().enumerate() {
            if reset {
                *cnt = 0;
            } else if accept && r == row {
                *cnt = SOFTMAX_II - 1;
            } else {
                *cnt = cnt.saturating_sub(1);
            }
            busy |= u64::from(*cnt != 0) << r;
        }
        self.sm_busy.next = busy.into();
    }
    fn connect(&mut self) {
        self.sumsq.connect();
        self.sumsq_nf.connect();
        self.sumsq_f32.connect();
        self.sm_busy.connect();
        self.sm_out.connect();
        self.sm_out_row.connect();
        self.sm_c.connect();
        self.sm_p.connect();
        self.sm_l.connect();
        self.sm_m.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(built(!self.softmax_only.0).verilog.clone())
    }
}

/// [`Reduce`] ready to simulate or emit.
pub fn reduce_top() -> Reduce {
    connect_top!(Reduce::default(), clock, reset, sq_valid, sq_clear, sq_x, sm_valid, sm_start, sm_row, score)
}

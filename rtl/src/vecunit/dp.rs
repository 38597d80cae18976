//! The vector unit's datapath: [`VEC_LANES`] vector lanes ([`crate::vector`]: the full `opu_vector` as lane 0,
//! which computes `rmsnorm`'s `rms_inv`, the light `opu_vector_light` as the others) with the operand
//! unpacking in front of them and the store side behind them, one scratchpad line per cycle.
//!
//! Stage 0 unpacks each operand bus into one FP32 value per lane ([`VectorDatapath`]'s `i_amode`,
//! `i_bmode`, `i_cdmode`): FP32 words, FP16 halves (`opu_hw::numerics::fp16::f16_to_f32`, exact), the low or
//! high halves of words (RoPE's `normal` pairs), a broadcast word, a broadcast 16-bit integer (RMSNorm's
//! `n`), or interleaved `(cos, sin)` pairs from two lines (a RoPE table). The lanes take the values, and the
//! store side rounds each result to FP16 (`f32_to_f16`: nearest even, subnormals, overflow to infinity,
//! canonical NaN) and canonicalizes it as FP32 (`canon_f32`), then squares the values as stored onto the
//! accumulator grid (`vector::accumulate_square`) and sums the lanes' squares. `argmax` compares the
//! unpacked values of stage 0 (`vector::argmax`: NaN never chosen, ties to the lower lane).
//!
//! Everything the sequencer hands in with a chunk (`i_meta`, the lane mask, the argmax of the chunk) comes
//! out with the chunk's results [`dp_latency`] edges later; `i_valid` marks chunks. Verilog (custom), like the
//! lanes: these are bit-level FP16/FP32 conversions and a 24 x 24 multiply per lane, which rust-hdl's HDL
//! cannot write (no loops, no multiply wider than 16 bits).

use crate::lane::{ModelState, ACC_BITS};
use rust_hdl::prelude::*;

/// Lanes of the vector unit: one scratchpad line of FP32 values per cycle.
pub const VEC_LANES: usize = 8;
// the argmax tree below (`am_c`, `am_l1`, `side1`) is written for 8 lanes: pairs, pairs of pairs, the last pick
const _: () = assert!(VEC_LANES == 8);

/// Edges from a chunk's inputs to its outputs: inputs sampled at edge `t` come out after edge
/// `t + dp_latency()` (the unpack register, the lane, rounding, the sum of squares' stages, the output).
pub fn dp_latency() -> usize {
    crate::vector::vector_latency() + 2 + crate::sqsum::SQSUM_LATENCY
}

/// The conversions and the square term, as Verilog functions (names `vx_*`).
pub const VX_FUNCTIONS: &str = "\
// FP16 -> FP32, exact (NaN keeps its payload, quieted)
function automatic [31:0] vx_h2f(input [15:0] h);
   reg [23:0] sh;
   integer k, p;
   begin
      p = 0;
      for (k = 0; k < 10; k = k + 1) if (h[k]) p = k;
      sh = {14'd0, h[9:0]} << (23 - p);
      if (h[14:10] == 5'd31) vx_h2f = {h[15], 8'hFF, (h[9:0] != 10'd0), h[8:0], 13'd0};
      else if (h[14:10] != 5'd0) vx_h2f = {h[15], 3'd0, h[14:10] + 5'd0, h[9:0], 13'd0} + 32'h38000000;
      else if (h[9:0] == 10'd0) vx_h2f = {h[15], 31'd0};
      else vx_h2f = {h[15], 8'd103 + p[7:0], sh[22:0]};
   end
endfunction
// a 16-bit unsigned integer -> FP32 (exact)
function automatic [31:0] vx_u2f(input [15:0] u);
   reg [23:0] sh;
   integer k, p;
   begin
      p = 0;
      for (k = 0; k < 16; k = k + 1) if (u[k]) p = k;
      sh = {8'd0, u} << (23 - p);
      vx_u2f = (u == 16'd0) ? 32'd0 : {1'b0, 8'd127 + p[7:0], sh[22:0]};
   end
endfunction
// FP32 -> FP16, round to nearest even, overflow to infinity, subnormals, NaN = 7E00
function automatic [15:0] vx_f2h(input [31:0] x);
   reg [7:0] e;
   reg [23:0] sig;
   reg [23:0] rem;
   reg [23:0] hf;
   reg [14:0] base;
   reg [4:0] s;
   reg up;
   begin
      e = x[30:23];
      sig = {1'b1, x[22:0]};
      s = 5'd0;
      if (e == 8'hFF) vx_f2h = (x[22:0] != 23'd0) ? 16'h7E00 : {x[31], 15'h7C00};
      else if (e > 8'd142) vx_f2h = {x[31], 15'h7C00};
      else if (e >= 8'd113) begin
         base = {e[4:0] - 5'd16, x[22:13]};
         up = x[12] && ((x[11:0] != 12'd0) || x[13]);
         vx_f2h = {x[31], base + {14'd0, up}};
      end else if (e >= 8'd102) begin
         s = 5'd30 - e[4:0];
         base = sig[23:0] >> s;
         rem = sig & ((24'd1 << s) - 24'd1);
         hf = 24'd1 << (s - 5'd1);
         up = (rem > hf) || ((rem == hf) && base[0]);
         vx_f2h = {x[31], base + {14'd0, up}};
      end else vx_f2h = {x[31], 15'd0};
   end
endfunction
function automatic vx_isnan(input [31:0] x);
   vx_isnan = (x[30:23] == 8'hFF) && (x[22:0] != 23'd0);
endfunction
function automatic [31:0] vx_canon(input [31:0] x);
   vx_canon = vx_isnan(x) ? 32'h7FC00000 : x;
endfunction
// argmax order of a non-NaN value: -0 as +0, then the sign-magnitude bits made unsigned-monotonic
function automatic [31:0] vx_key(input [31:0] x);
   reg [31:0] z;
   begin
      z = (x[30:0] == 31'd0) ? 32'd0 : x;
      vx_key = z[31] ? ~z : {1'b1, z[30:0]};
   end
endfunction
// The square of an FP32 x on the accumulator's 2^-32 grid, floored (WideAcc::add_scaled of
// accumulate_square): sig^2 * 2^(2 e - 268), e the exponent field, sig the significand; past 2^78 units,
// infinite or NaN: nf. Zero and subnormals give 0 (sig^2 < 2^46 at a shift of -266). A normal sig^2 has its
// leading one at bit 46 or 47, so no leading-one search: with k = 2 e - 221 (the shift plus 47, always odd),
// the term is 0 for k < 0 (e < 111), (sig^2 << k) >> 47 up to k = 77 (below 2^78), nf from k = 79 (e >= 150:
// past 2^78 whichever bit leads). The square of an FP16 h on the same grid is exact (h^2 < 2^32 never
// overflows): sig^2 * 2^(2 E - 18) with sig the 11-bit significand, E the exponent field (1 for
// subnormals); nf for infinities and NaN.
// The sum of squares of a 32-byte chunk's values as stored (16 FP16 halves or, with f32, 8 FP32 words; those
// whose bit in `mask` is set) on the accumulator grid, `{nf, sum}`, in stages for the 225 MHz budget (each
// kind in its own adder tree: 8 terms below 2^79, 16 below 2^64): (1) each value's class, significand square
// and shift (a masked-off value is a zero), (2) each square shifted onto the accumulator grid, (3) sums of
// four terms, (4) the chunk's sum and flag (`sqsum::sqsum_stages` registers them).
// stage 1 -> 2, per FP32 value k (57 bits at 57 k): {nf, zero, sq[47:0], k[6:0]}; per FP16 value k (29 bits
// at 456 + 29 k): {nf, sq[21:0], j[5:0]}; bit 920: f32
function automatic [920:0] vx_sqp1(input [255:0] ch, input f32, input [15:0] mask);
   reg [31:0] x;
   reg [15:0] h;
   reg [23:0] sig;
   reg [10:0] sigh;
   reg [8:0] kk;
   reg [47:0] sq;
   reg [21:0] sqh;
   reg nf, zero;
   integer k;
   begin
      vx_sqp1 = 921'd0;
      for (k = 0; k < 8; k = k + 1) begin
         x = ch[32 * k +: 32];
         sig = {1'b1, x[22:0]};
         kk = {x[30:23], 1'b0} - 9'd221;
         nf = mask[k] & ((x[30:23] == 8'hFF) | (x[30:23] >= 8'd150));
         zero = !mask[k] | (x[30:23] < 8'd111);
         sq = sig * sig;
         vx_sqp1[57 * k +: 57] = {nf, zero, sq, kk[6:0]};
      end
      for (k = 0; k < 16; k = k + 1) begin
         h = ch[16 * k +: 16];
         sigh = {h[14:10] != 5'd0, h[9:0]};
         sqh = sigh * sigh;
         if (!mask[k]) sqh = 22'd0;
         kk[5:0] = (h[14:10] == 5'd0) ? 6'd0 : {h[14:10], 1'b0} - 6'd2;
         vx_sqp1[456 + 29 * k +: 29] = {mask[k] & (h[14:10] == 5'h1F), sqh, kk[5:0]};
      end
      vx_sqp1[920] = f32;
   end
endfunction
// stage 2 -> 3: the terms, FP32 k at 80 k: {nf, term[78:0]}; FP16 k at 640 + 65 k: {nf, term[63:0]}; bit
// 1680: f32
function automatic [1680:0] vx_sqp2(input [920:0] p);
   reg [56:0] v32;
   reg [28:0] v16;
   reg [125:0] w;
   reg [79:0] wh;
   integer k;
   begin
      vx_sqp2 = 1681'd0;
      for (k = 0; k < 8; k = k + 1) begin
         v32 = p[57 * k +: 57];
         w = {78'd0, v32[54:7]} << v32[6:0];
         vx_sqp2[80 * k +: 80] = {v32[56], (v32[56] | v32[55]) ? 79'd0 : w[125:47]};
      end
      for (k = 0; k < 16; k = k + 1) begin
         v16 = p[456 + 29 * k +: 29];
         wh = {58'd0, v16[27:6]} << v16[5:0];
         vx_sqp2[640 + 65 * k +: 65] = {v16[28], v16[28] ? 64'd0 : wh[79:16]};
      end
      vx_sqp2[1680] = p[920];
   end
endfunction
// stage 3 -> 4: sums of four terms, FP32 at 81 i (i < 2), FP16 at 162 + 66 i (i < 4); 426: nf of the FP32
// terms, 427: of the FP16 ones; 428: f32
function automatic [428:0] vx_sqp3(input [1680:0] p);
   reg [80:0] s;
   reg [65:0] sh;
   reg nf32, nf16;
   integer i, k;
   begin
      vx_sqp3 = 429'd0;
      nf32 = 1'b0;
      nf16 = 1'b0;
      for (i = 0; i < 2; i = i + 1) begin
         s = 81'd0;
         for (k = 4 * i; k < 4 * i + 4; k = k + 1) begin
            s = s + {2'd0, p[80 * k +: 79]};
            nf32 = nf32 | p[80 * k + 79];
         end
         vx_sqp3[81 * i +: 81] = s;
      end
      for (i = 0; i < 4; i = i + 1) begin
         sh = 66'd0;
         for (k = 4 * i; k < 4 * i + 4; k = k + 1) begin
            sh = sh + {2'd0, p[640 + 65 * k +: 64]};
            nf16 = nf16 | p[640 + 65 * k + 64];
         end
         vx_sqp3[162 + 66 * i +: 66] = sh;
      end
      vx_sqp3[426] = nf32;
      vx_sqp3[427] = nf16;
      vx_sqp3[428] = p[1680];
   end
endfunction
// stage 4: {nf, sum}
function automatic [96:0] vx_sqp4(input [428:0] p);
   reg [81:0] s32;
   reg [67:0] s16;
   begin
      s32 = {1'd0, p[80:0]} + {1'd0, p[161:81]};
      s16 = {2'd0, p[227:162]} + {2'd0, p[293:228]} + {2'd0, p[359:294]} + {2'd0, p[425:360]};
      vx_sqp4 = p[428] ? {p[426], 14'd0, s32} : {p[427], 28'd0, s16};
   end
endfunction
";

/// The Verilog of `opu_vector_dp` (it instantiates `opu_vector`, emitted separately).
pub fn dp_verilog() -> String {
    let l = crate::vector::vector_latency();
    assert!((2..=256).contains(&l));
    let n = VEC_LANES;
    format!(
        "\
// vector unit datapath: {n} vector lanes, operand unpacking, FP16 rounding, squares, argmax ({lat} edges)
module opu_vector_dp(clock, reset, i_valid, i_op, i_a, i_b, i_c, i_d, i_amode, i_bmode, i_cdmode, i_mask, i_meta,
    dd16, o_valid, o_f32, o_h0, o_h1, o_pairs, o_sq, o_sqnf, o_am_found, o_am_idx, o_am_key, o_meta);
    input wire clock;
    input wire reset;
    input wire i_valid;
    input wire [3:0] i_op;
    input wire [255:0] i_a;
    input wire [255:0] i_b;
    input wire [255:0] i_c;
    input wire [255:0] i_d;
    input wire [1:0] i_amode;
    input wire [2:0] i_bmode;
    input wire [1:0] i_cdmode;
    input wire [7:0] i_mask;
    input wire [63:0] i_meta;
    input wire dd16;
    output reg o_valid;
    output reg [255:0] o_f32;
    output reg [127:0] o_h0;
    output reg [127:0] o_h1;
    output wire [255:0] o_pairs;
    output reg [95:0] o_sq;
    output reg o_sqnf;
    output reg o_am_found;
    output reg [2:0] o_am_idx;
    output reg [31:0] o_am_key;
    output reg [63:0] o_meta;
{VX_FUNCTIONS}
    // ---- stage 0: one FP32 operand per lane
    reg [255:0] ua, ub, uc, ud;
    reg [3:0] op0;
    reg v0;
    reg [7:0] m0;
    reg [63:0] meta0;
    wire [511:0] cd = {{i_d, i_c}};
    integer i;
    always @(posedge clock) begin
        v0 <= reset ? 1'b0 : i_valid;
        op0 <= i_op;
        m0 <= i_mask;
        meta0 <= i_meta;
        for (i = 0; i < {n}; i = i + 1) begin
            case (i_amode)
                2'd0: ua[32 * i +: 32] <= i_a[32 * i +: 32];
                2'd1: ua[32 * i +: 32] <= vx_h2f(i_a[16 * i +: 16]);
                2'd2: ua[32 * i +: 32] <= vx_h2f(i_a[32 * i +: 16]);
                default: ua[32 * i +: 32] <= i_a[31:0];
            endcase
            case (i_bmode)
                3'd0: ub[32 * i +: 32] <= i_b[32 * i +: 32];
                3'd1: ub[32 * i +: 32] <= vx_h2f(i_b[16 * i +: 16]);
                3'd2: ub[32 * i +: 32] <= vx_h2f(i_b[32 * i + 16 +: 16]);
                3'd3: ub[32 * i +: 32] <= i_b[31:0];
                default: ub[32 * i +: 32] <= vx_u2f(i_b[15:0]);
            endcase
            case (i_cdmode)
                2'd1: begin
                    uc[32 * i +: 32] <= cd[64 * i +: 32];
                    ud[32 * i +: 32] <= cd[64 * i + 32 +: 32];
                end
                2'd2: begin
                    uc[32 * i +: 32] <= i_c[31:0];
                    ud[32 * i +: 32] <= 32'd0;
                end
                default: begin
                    uc[32 * i +: 32] <= i_c[32 * i +: 32];
                    ud[32 * i +: 32] <= 32'd0;
                end
            endcase
        end
    end
    // argmax of the chunk's valid lanes (stage 0's values, as `a`): a tree of pairwise choices, a level per
    // stage (a chain of eight 32-bit compares in one stage was 14.0 ns by the estimate): the four pairs here,
    // into the ring beside the lanes; their two pairs as the ring's entry comes out (`side1`); the last choice
    // into the delay line. A candidate is {{found, index, key}} (36 bits); of two, the one with the lower
    // indices wins unless the other is found with a greater key: ties to the lower index, NaN and masked
    // lanes never
    function automatic [35:0] vx_am_pick(input [35:0] lo, input [35:0] hi);
        vx_am_pick = (lo[35] && (!hi[35] || lo[31:0] >= hi[31:0])) ? lo : hi;
    endfunction
    wire [287:0] am_c;
    wire [143:0] am_l1;
    genvar ac;
    generate
        for (ac = 0; ac < {n}; ac = ac + 1) begin : am_cand
            localparam [2:0] IDX = ac;
            assign am_c[36 * ac +: 36] = {{m0[ac] && !vx_isnan(ua[32 * ac +: 32]), IDX, vx_key(ua[32 * ac +: 32])}};
        end
        for (ac = 0; ac < {n} / 2; ac = ac + 1) begin : am_pair
            assign am_l1[36 * ac +: 36] = vx_am_pick(am_c[72 * ac +: 36], am_c[72 * ac + 36 +: 36]);
        end
    endgenerate
    // ---- the lanes ({l} edges), and what travels beside them
    wire [255:0] y0, y1;
    genvar g;
    generate
        // lane 0 computes rms_inv (the only rsqrt the unit needs); the others are light lanes without rsqrt
        for (g = 0; g < {n}; g = g + 1) begin : lane
            if (g == 0) begin : full
                opu_vector vl(.clock(clock), .op(op0), .a(ua[32 * g +: 32]), .b(ub[32 * g +: 32]),
                    .c(uc[32 * g +: 32]), .d(ud[32 * g +: 32]), .y0(y0[32 * g +: 32]), .y1(y1[32 * g +: 32]));
            end else begin : light
                opu_vector_light vl(.clock(clock), .op(op0), .a(ua[32 * g +: 32]), .b(ub[32 * g +: 32]),
                    .c(uc[32 * g +: 32]), .d(ud[32 * g +: 32]), .y0(y0[32 * g +: 32]), .y1(y1[32 * g +: 32]));
            end
        end
    endgenerate
    // a ring of {l} entries: the entry written at an edge is read {lm1} edges later, beside the lane's result
    reg [215:0] side [0:{lm1}];
    reg [7:0] wp;
    reg [{lm1}:0] sv;
    wire [215:0] side_out = side[wp];
    always @(posedge clock) begin
        side[wp] <= {{am_l1, m0, meta0}};
        wp <= (reset || wp == 8'd{lm1}) ? 8'd0 : wp + 8'd1;
        sv <= reset ? {l}'d0 : {{sv[{lm2}:0], v0}};
    end
    // ---- store side: FP16 rounding and FP32 canonical (1), the squares of the values as stored and their
    // sum over the valid lanes in `sqsum::SQSUM_LATENCY` stages (`vx_sqp1` .. `vx_sqp4`, for the 225 MHz
    // budget: 13.1 ns in one), beside which the chunk's results wait in a delay line; then the outputs
    reg v1;
    // side1: {{the argmax's two candidates, lanes, meta}}; `side1_am`: the chunk's {{key, index, found, lanes,
    // meta}} as the outputs take it
    reg [143:0] side1;
    wire [35:0] am_best = vx_am_pick(side1[107:72], side1[143:108]);
    wire [107:0] side1_am = {{am_best[31:0], am_best[34:32], am_best[35], side1[71:0]}};
    reg [255:0] f1;
    reg [127:0] h01, h11;
    integer t;
    always @(posedge clock) begin
        v1 <= reset ? 1'b0 : sv[{lm1}];
        side1 <= {{vx_am_pick(side_out[179:144], side_out[215:180]), vx_am_pick(side_out[107:72], side_out[143:108]),
            side_out[71:0]}};
        for (t = 0; t < {n}; t = t + 1) begin
            f1[32 * t +: 32] <= vx_canon(y0[32 * t +: 32]);
            h01[16 * t +: 16] <= vx_f2h(y0[32 * t +: 32]);
            h11[16 * t +: 16] <= vx_f2h(y1[32 * t +: 32]);
        end
    end
    reg [96:0] sq;
{sq}
    // the delay line: {{v, side, f32, h0, h1}} of the chunk whose squares are in the stages
    localparam DW = 1 + 108 + 256 + 128 + 128;
    reg [DW - 1:0] dl [0:{sqm1}];
    integer u;
    always @(posedge clock) begin
        dl[0] <= {{reset ? 1'b0 : v1, side1_am, f1, h01, h11}};
        for (u = 1; u < {sql}; u = u + 1)
            dl[u] <= {{reset ? 1'b0 : dl[u - 1][DW - 1], dl[u - 1][DW - 2:0]}};
    end
    wire [DW - 1:0] dq = dl[{sqm1}];
    wire [107:0] side_q = dq[DW - 2 -: 108];
    always @(posedge clock) begin
        o_valid <= reset ? 1'b0 : dq[DW - 1];
        o_meta <= side_q[63:0];
        o_am_found <= side_q[72];
        o_am_idx <= side_q[75:73];
        o_am_key <= side_q[107:76];
        o_f32 <= dq[511:256];
        o_h0 <= dq[255:128];
        o_h1 <= dq[127:0];
        o_sq <= sq[95:0];
        o_sqnf <= sq[96];
    end
    genvar q;
    generate
        for (q = 0; q < {n}; q = q + 1) begin : pair
            assign o_pairs[32 * q +: 32] = {{o_h1[16 * q +: 16], o_h0[16 * q +: 16]}};
        end
    endgenerate
endmodule // opu_vector_dp
",
        lat = dp_latency(),
        lm1 = l - 1,
        lm2 = l - 2,
        sq = crate::sqsum::sqsum_stages("vsq", "(dd16 ? {128'd0, h01} : f1)", "!dd16", "{8'd0, side1[71:64]}", "sq"),
        sql = crate::sqsum::SQSUM_LATENCY,
        sqm1 = crate::sqsum::SQSUM_LATENCY - 1,
    )
}

/// The datapath as a rust-hdl block of fixed width (its Verilog instantiates `opu_vector_dp` and carries the
/// lanes). Not simulated by rust-hdl: the vector unit is tested under Verilator against the functional
/// simulator.
#[derive(LogicBlock)]
pub struct VectorDatapath {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub i_valid: Signal<In, Bit>,
    pub i_op: Signal<In, Bits<4>>,
    pub i_a: Signal<In, Bits<256>>,
    pub i_b: Signal<In, Bits<256>>,
    pub i_c: Signal<In, Bits<256>>,
    pub i_d: Signal<In, Bits<256>>,
    pub i_amode: Signal<In, Bits<2>>,
    pub i_bmode: Signal<In, Bits<3>>,
    pub i_cdmode: Signal<In, Bits<2>>,
    pub i_mask: Signal<In, Bits<8>>,
    pub i_meta: Signal<In, Bits<64>>,
    pub dd16: Signal<In, Bit>,
    pub o_valid: Signal<Out, Bit>,
    pub o_f32: Signal<Out, Bits<256>>,
    pub o_h0: Signal<Out, Bits<128>>,
    pub o_h1: Signal<Out, Bits<128>>,
    pub o_pairs: Signal<Out, Bits<256>>,
    pub o_sq: Signal<Out, Bits<ACC_BITS>>,
    pub o_sqnf: Signal<Out, Bit>,
    pub o_am_found: Signal<Out, Bit>,
    pub o_am_idx: Signal<Out, Bits<3>>,
    pub o_am_key: Signal<Out, Bits<32>>,
    pub o_meta: Signal<Out, Bits<64>>,
    cores: ModelState<String>,
}

impl VectorDatapath {
    /// `cores`: the Verilog of `opu_vector` (the lane) and of `opu_vector_dp`.
    pub fn new(cores: String) -> Self {
        VectorDatapath {
            clock: Default::default(),
            reset: Default::default(),
            i_valid: Default::default(),
            i_op: Default::default(),
            i_a: Default::default(),
            i_b: Default::default(),
            i_c: Default::default(),
            i_d: Default::default(),
            i_amode: Default::default(),
            i_bmode: Default::default(),
            i_cdmode: Default::default(),
            i_mask: Default::default(),
            i_meta: Default::default(),
            dd16: Default::default(),
            o_valid: Default::default(),
            o_f32: Default::default(),
            o_h0: Default::default(),
            o_h1: Default::default(),
            o_pairs: Default::default(),
            o_sq: Default::default(),
            o_sqnf: Default::default(),
            o_am_found: Default::default(),
            o_am_idx: Default::default(),
            o_am_key: Default::default(),
            o_meta: Default::default(),
            cores: ModelState(cores),
        }
    }
}

impl Logic for VectorDatapath {
    fn update(&mut self) {}
    fn connect(&mut self) {
        self.o_valid.connect();
        self.o_f32.connect();
        self.o_h0.connect();
        self.o_h1.connect();
        self.o_pairs.connect();
        self.o_sq.connect();
        self.o_sqnf.connect();
        self.o_am_found.connect();
        self.o_am_idx.connect();
        self.o_am_key.connect();
        self.o_meta.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Wrapper(Wrapper {
            code: "\
opu_vector_dp dp(.clock(clock), .reset(reset), .i_valid(i_valid), .i_op(i_op), .i_a(i_a), .i_b(i_b), .i_c(i_c),
    .i_d(i_d), .i_amode(i_amode), .i_bmode(i_bmode), .i_cdmode(i_cdmode), .i_mask(i_mask), .i_meta(i_meta),
    .dd16(dd16), .o_valid(o_valid), .o_f32(o_f32), .o_h0(o_h0), .o_h1(o_h1), .o_pairs(o_pairs), .o_sq(o_sq),
    .o_sqnf(o_sqnf), .o_am_found(o_am_found), .o_am_idx(o_am_idx), .o_am_key(o_am_key), .o_meta(o_meta));
"
            .into(),
            cores: self.cores.0.clone(),
        })
    }
}

/// The Verilog modules under the vector unit's datapath: the full lane, the light lane and `opu_vector_dp`.
pub fn dp_cores() -> Result<String, crate::emit::EmitError> {
    let lane = crate::emit::emit_verilog("vector")?;
    let light = crate::emit::emit_verilog("vector_light")?;
    Ok(format!("{lane}\n{light}\n{}", dp_verilog()))
}

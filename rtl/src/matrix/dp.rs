//! The matrix unit's datapath: a [`WeightFeed`](super::feed::WeightFeed) per lane, the PE array
//! (`array::array_verilog`) and the hold registers the accumulators are captured into when a token's rows
//! are done, so that the array goes on with the next token while the sequencer rounds and stores these.
//!
//! Structural Verilog generated here, like the array, because its internal buses grow with `pe_lanes`; its
//! ports do not, so [`MatrixDatapath`] wraps it as a rust-hdl block of fixed width that the sequencer
//! ([`super::Matrix`]) drives. The modules it instantiates are rust-hdl's (`opu_wfeed`, `opu_align`,
//! `opu_lane`) and the array's.
//!
//! The step inputs (`rd_*`, `f_*`) are taken together; the datapath delays the schedule and the activation
//! block by [`FEED_LATENCY`] to meet the weights the feeds read, so a step's half-block enters the array
//! `FEED_LATENCY` edges after the sequencer presents it.

use super::feed::FEED_LATENCY;
use crate::lane::{ModelState, ACC_BITS};
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;
use std::fmt::Write;

/// Edges from a step (`rd_off`, `f_half`, `f16_sel`) to the weights it reads on `f16_w` (`fmt=f16`): the
/// feed's read and the lane select's register.
pub const F16_W_LATENCY: usize = FEED_LATENCY + 1;

/// The structural Verilog of `opu_matrix_dp` for `cfg` (the modules it instantiates are emitted separately).
pub fn dp_verilog(cfg: &OverlayConfig) -> String {
    let l = cfg.pe_lanes as usize;
    let beats = cfg.weight_port_beats() as usize;
    let d = FEED_LATENCY;
    let mut v = String::new();
    writeln!(v, "// matrix unit datapath of overlay `{}`: {l} weight feeds, the PE array, hold registers.", cfg.name).unwrap();
    writeln!(
        v,
        "\
module opu_matrix_dp(clock, reset, ld_valid, ld_quad, ld_pos, ld_line, rd_rb, rd_base, rd_off,
    rd_fmt, f_valid, f_half, f_row, f_clear, f_last, f_xf, o_sel, cap, o_acc0, o_acc1, o_nf0, o_nf1, sq_chunk, sq_f32,
    sq_mask, sq_out, f16_sel, f16_w);
    input wire clock;
    input wire reset;
    input wire ld_valid;
    input wire [15:0] ld_quad;
    input wire [15:0] ld_pos;
    input wire [{ldb}:0] ld_line;
    input wire [15:0] rd_rb;
    input wire [15:0] rd_base;
    input wire [15:0] rd_off;
    input wire [1:0] rd_fmt;
    input wire f_valid;
    input wire f_half;
    input wire f_row;
    input wire f_clear;
    input wire f_last;
    input wire [511:0] f_xf;
    input wire [7:0] o_sel;
    output reg cap;
    output wire [95:0] o_acc0;
    output wire [95:0] o_acc1;
    output wire o_nf0;
    output wire o_nf1;
    input wire [255:0] sq_chunk;
    input wire sq_f32;
    input wire [15:0] sq_mask;
    output reg [96:0] sq_out;
    input wire [7:0] f16_sel;
    output reg [127:0] f16_w;
{vx}
    // the fused reduction: the squares of a stored output chunk, summed in four stages (`SQSUM_LATENCY`
    // edges: `sqsum::sqsum_stages`, for the 225 MHz budget)
{sq}    wire [{wb}:0] w;
    wire [{db}:0] dm;
    wire [{ab}:0] acc;
    wire [{nb}:0] nf;
    wire [{nb}:0] done;
    // the schedule and the activations wait for the feeds' read ({d} stages); reset clears only `valid`
    reg [517:0] sch [0:{dl}];
    reg [{dl}:0] sv;
    integer i;
    always @(posedge clock) begin
        sch[0] <= {{f_xf, rd_fmt, f_last, f_clear, f_row, f_half}};
        for (i = 1; i < {d}; i = i + 1) sch[i] <= sch[i - 1];
        sv <= reset ? {d}'d0 : {{sv[{dm1}:0], f_valid}};
    end
    opu_array array(.clock(clock), .reset(reset), .valid(sv[{dl}]), .mode(sch[{dl}][5:4]), .half(sch[{dl}][0]),
        .row(sch[{dl}][1]), .clear(sch[{dl}][2]), .last(sch[{dl}][3]), .xf(sch[{dl}][517:6]), .w(w), .dm(dm),
        .acc(acc), .nf(nf), .done(done));
    // every lane finishes a token on the same edge as lane 0's row 1
    reg [{ab}:0] hold;
    reg [{nb}:0] hold_nf;
    always @(posedge clock) begin
        cap <= reset ? 1'b0 : done[1];
        if (done[1]) begin
            hold <= acc;
            hold_nf <= nf;
        end
    end
    // the readout: lane `o_sel`'s two accumulators and flags, an AND-OR multiplexer of {l} x {sel} bits on a
    // one-hot select. Not a part-select at `{acc2} * o_sel`, nor a `case` (yosys' pmux2shiftx makes that one a
    // $shiftx too): yosys builds either as a barrel shifter over all of `hold`, which at 128 lanes it had not
    // mapped after an hour; this way opu_matrix_dp's own logic maps in 4 minutes to 37k LUTs.
    reg [{selb}:0] hsel;
    integer j;
    always @* begin
        hsel = {sel}'d0;
        for (j = 0; j < {l}; j = j + 1)
            hsel = hsel | ({{{sel}{{o_sel == j}}}} & {{hold_nf[2 * j +: 2], hold[{acc2} * j +: {acc2}]}});
    end
    assign o_acc0 = hsel[{accm}:0];
    assign o_acc1 = hsel[{acc2m}:{acc}];
    assign o_nf0 = hsel[{acc2}];
    assign o_nf1 = hsel[{acc2p}];
    // `fmt=f16`: the weights lane `f16_sel` (taken with the step, so delayed as the schedule is) reads, from
    // its feed's bus, registered: {d1} edges after the step, the same AND-OR multiplexer as the readout's
    reg [7:0] fsel [0:{dl}];
    reg [127:0] fw;
    integer q, fi;
    always @(posedge clock) begin
        fsel[0] <= f16_sel;
        for (fi = 1; fi < {d}; fi = fi + 1) fsel[fi] <= fsel[fi - 1];
    end
    always @* begin
        fw = 128'd0;
        for (q = 0; q < {l}; q = q + 1)
            fw = fw | ({{128{{fsel[{dl}] == q}}}} & w[128 * q +: 128]);
    end
    always @(posedge clock) f16_w <= fw;",
        ldb = 512 * beats - 1,
        wb = 128 * l - 1,
        db = 64 * l - 1,
        ab = 2 * ACC_BITS * l - 1,
        nb = 2 * l - 1,
        dl = d - 1,
        dm1 = d - 2,
        acc = ACC_BITS,
        acc2 = 2 * ACC_BITS,
        vx = crate::vecunit::dp::VX_FUNCTIONS,
        sq = crate::sqsum::sqsum_stages("sq", "sq_chunk", "sq_f32", "sq_mask", "sq_out"),
        sel = 2 * ACC_BITS + 2,
        selb = 2 * ACC_BITS + 1,
        accm = ACC_BITS - 1,
        acc2m = 2 * ACC_BITS - 1,
        acc2p = 2 * ACC_BITS + 1,
        d1 = d + 1,
    )
    .unwrap();
    // the weight port's `W` beats are quads `ld_quad .. ld_quad + W` (`ld_quad` a multiple of `W`): feed `i`
    // (quad `i / 4`) takes beat `j = (i / 4) mod W`, as quad `ld_quad | j`
    for i in 0..l {
        let j = (i / 4) % beats;
        writeln!(
            v,
            "    opu_wfeed feed{i}(.clock(clock), .row0(16'd{r}), .ld_valid(ld_valid), .ld_quad(ld_quad | 16'd{j}), \
.ld_pos(ld_pos), .ld_line(ld_line[{bh}:{bl}]), .rd_rb(rd_rb), .rd_base(rd_base), .rd_off(rd_off), \
.rd_half(f_half), .rd_row(f_row), .rd_fmt(rd_fmt), .w(w[{wh}:{wl}]), .dm(dm[{dh}:{dl}]));",
            r = 2 * i,
            bh = 512 * j + 511,
            bl = 512 * j,
            wh = 128 * i + 127,
            wl = 128 * i,
            dh = 64 * i + 63,
            dl = 64 * i,
        )
        .unwrap();
    }
    writeln!(v, "endmodule // opu_matrix_dp").unwrap();
    v
}

/// The datapath as a rust-hdl block of fixed width (but the weight port's `WB` bits): its Verilog
/// instantiates `opu_matrix_dp` and carries the modules under it. Not simulated by rust-hdl (its `update` does nothing): the matrix unit is tested
/// under Verilator against the functional simulator.
#[derive(LogicBlock)]
pub struct MatrixDatapath<const WB: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    /// A response of the weight port, `W` beats: beat `j` has a unit for each lane of quad `ld_quad + j`
    /// (`ld_quad` a multiple of `W`), all kept at ring unit `ld_pos`.
    pub ld_valid: Signal<In, Bit>,
    pub ld_quad: Signal<In, Bits<16>>,
    pub ld_pos: Signal<In, Bits<16>>,
    pub ld_line: Signal<In, Bits<WB>>,
    pub rd_rb: Signal<In, Bits<16>>,
    pub rd_base: Signal<In, Bits<16>>,
    pub rd_off: Signal<In, Bits<16>>,
    pub rd_fmt: Signal<In, Bits<2>>,
    pub f_valid: Signal<In, Bit>,
    pub f_half: Signal<In, Bit>,
    pub f_row: Signal<In, Bit>,
    pub f_clear: Signal<In, Bit>,
    pub f_last: Signal<In, Bit>,
    pub f_xf: Signal<In, Bits<512>>,
    pub o_sel: Signal<In, Bits<8>>,
    /// A token's accumulators are in the hold registers (one cycle).
    pub cap: Signal<Out, Bit>,
    pub o_acc0: Signal<Out, Bits<ACC_BITS>>,
    pub o_acc1: Signal<Out, Bits<ACC_BITS>>,
    pub o_nf0: Signal<Out, Bit>,
    pub o_nf1: Signal<Out, Bit>,
    /// `{nf, sum}` of the squares of `sq_chunk`'s values whose bit in `sq_mask` is set (16 FP16, or 8 FP32
    /// with `sq_f32`), `sqsum::SQSUM_LATENCY` edges later (`sqsum::sqsum_stages`).
    pub sq_chunk: Signal<In, Bits<256>>,
    pub sq_f32: Signal<In, Bit>,
    pub sq_mask: Signal<In, Bits<16>>,
    pub sq_out: Signal<Out, Bits<97>>,
    /// `fmt=f16`: the lane whose feed's bus is wanted, taken with the step; its 8 FP16 weights (the step's
    /// row) on `f16_w`, [`F16_W_LATENCY`] edges later.
    pub f16_sel: Signal<In, Bits<8>>,
    pub f16_w: Signal<Out, Bits<128>>,
    /// The Verilog of the modules under `opu_matrix_dp` and of `opu_matrix_dp` itself.
    cores: ModelState<String>,
}

impl<const WB: usize> MatrixDatapath<WB> {
    pub fn new(cores: String) -> Self {
        MatrixDatapath {
            clock: Default::default(),
            reset: Default::default(),
            ld_valid: Default::default(),
            ld_quad: Default::default(),
            ld_pos: Default::default(),
            ld_line: Default::default(),
            rd_rb: Default::default(),
            rd_base: Default::default(),
            rd_off: Default::default(),
            rd_fmt: Default::default(),
            f_valid: Default::default(),
            f_half: Default::default(),
            f_row: Default::default(),
            f_clear: Default::default(),
            f_last: Default::default(),
            f_xf: Default::default(),
            o_sel: Default::default(),
            cap: Default::default(),
            o_acc0: Default::default(),
            o_acc1: Default::default(),
            o_nf0: Default::default(),
            o_nf1: Default::default(),
            sq_chunk: Default::default(),
            sq_f32: Default::default(),
            sq_mask: Default::default(),
            sq_out: Default::default(),
            f16_sel: Default::default(),
            f16_w: Default::default(),
            cores: ModelState(cores),
        }
    }
}

impl<const WB: usize> Logic for MatrixDatapath<WB> {
    fn update(&mut self) {}
    fn connect(&mut self) {
        self.cap.connect();
        self.o_acc0.connect();
        self.o_acc1.connect();
        self.o_nf0.connect();
        self.o_nf1.connect();
        self.sq_out.connect();
        self.f16_w.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Wrapper(Wrapper {
            code: "\
opu_matrix_dp dp(.clock(clock), .reset(reset), .ld_valid(ld_valid), .ld_quad(ld_quad), .ld_pos(ld_pos),
    .ld_line(ld_line), .rd_rb(rd_rb), .rd_base(rd_base), .rd_off(rd_off),
    .rd_fmt(rd_fmt), .f_valid(f_valid), .f_half(f_half), .f_row(f_row), .f_clear(f_clear), .f_last(f_last),
    .f_xf(f_xf), .o_sel(o_sel), .cap(cap), .o_acc0(o_acc0), .o_acc1(o_acc1), .o_nf0(o_nf0), .o_nf1(o_nf1),
    .sq_chunk(sq_chunk), .sq_f32(sq_f32), .sq_mask(sq_mask), .sq_out(sq_out), .f16_sel(f16_sel), .f16_w(f16_w));
"
            .into(),
            cores: self.cores.0.clone(),
        })
    }
}

//! The CNN unit's datapath (`opu_cnn_dp`): per PE lane a kernel buffer, a bias and a fixed-point dot
//! product of 16 i16 x i16 products per cycle into a 48-bit accumulator, requantized on the last step
//! (`fixed::requantize`); and the 16-wide running maximum of `maxpool`.
//!
//! Structural Verilog generated for the config's `pe_lanes` (its internal buses grow with the lanes, its ports
//! do not), wrapped as a rust-hdl block of fixed width ([`CnnDatapath`]) that the sequencer
//! ([`super::Cnn`]) drives, as the matrix unit's datapath is.
//!
//! - **Kernel buffer** (`ld_*`): lane `l` keeps its output channel's kernel as the device-memory lines it
//!   spans, line `r` in entry `r`, and the kernel's first i16 within the first line (`ld_phase`). Entries
//!   are two banks (even, odd) so that a step reads the two consecutive entries its 16 weights lie in, in
//!   one cycle, whatever the phase.
//! - **Step** (`s_*`): 16 activations (`s_mask` zeroes those outside the image or the kernel row) and the offset `s_e` of
//!   their first weight in the kernel (`ky k cin + 16 j`, the same for every lane); lane `l` reads entries
//!   `(ph_l + s_e) / 16` and the next, shifts by `(ph_l + s_e) mod 16` i16, multiplies, sums. `s_first`
//!   starts the accumulator at the bias, `s_last` requantizes it into the lane's hold register
//!   ([`DP_LATENCY`] edges after the step, `o_valid`).
//! - **maxpool** (`s_max`): the running maximum of the 16 activations (`s_first` starts it).
//! - **Output**: a position's outputs are captured into one of four hold banks in turn (`o_valid`), so the next
//!   position computes while this one's are written; `o_data` is 16 of them (bank `o_bank`, chunk `o_sel`:
//!   lanes `16 o_sel ..`, or the maxima), and `m_*`
//!   merges a chunk at an odd i16 into two old scratchpad lines for a partial-word write.

use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;
use std::fmt::Write;

/// Hold banks: positions whose outputs the datapath keeps for the writer at once.
pub const HOLD_BANKS: usize = 4;

/// Edges from a step to `o_valid` after its last: inputs and the kernel buffer's read, the weights'
/// shift, the products, two adder stages, the accumulator, the requantization.
pub const DP_LATENCY: usize = 7;

/// Kernel-buffer lines per lane: the lane's share of the weight buffer (`OverlayConfig::max_conv_kernel_bytes`
/// is one line less).
pub fn kernel_lines(cfg: &OverlayConfig) -> usize {
    (cfg.weight_fifo_bytes / cfg.pe_lanes / 32) as usize
}

/// The structural Verilog of `opu_cnn_dp` for `cfg`.
pub fn dp_verilog(cfg: &OverlayConfig) -> String {
    let l = cfg.pe_lanes as usize;
    let half = kernel_lines(cfg).div_ceil(2).max(1);
    let chunks = l.div_ceil(16);
    let mut v = String::new();
    writeln!(v, "// CNN unit datapath of overlay `{}`: {l} fixed-point lanes of 16 i16 products.", cfg.name).unwrap();
    writeln!(
        v,
        "\
module opu_cnn_dp(clock, reset, ld_valid, ld_lane, ld_entry, ld_phase, ld_line, b_valid, b_base, b_line,
    s_valid, s_first, s_last, s_max, s_x, s_mask, s_e, q_shift, q_relu, o_valid, o_sel, o_bank, o_max, o_data, m_old, m_off, m_cnt, m_out);
    input wire clock;
    input wire reset;
    input wire ld_valid;
    input wire [15:0] ld_lane;
    input wire [15:0] ld_entry;
    input wire [3:0] ld_phase;
    input wire [255:0] ld_line;
    input wire b_valid;
    input wire [15:0] b_base;
    input wire [255:0] b_line;
    input wire s_valid;
    input wire s_first;
    input wire s_last;
    input wire s_max;
    input wire [255:0] s_x;
    input wire [15:0] s_mask;
    input wire [15:0] s_e;
    input wire [5:0] q_shift;
    input wire q_relu;
    output reg o_valid;
    input wire [7:0] o_sel;
    input wire [1:0] o_bank;
    input wire o_max;
    output wire [255:0] o_data;
    input wire [511:0] m_old;
    input wire m_off;
    input wire [4:0] m_cnt;
    output reg [511:0] m_out;

    // `fixed::requantize`: round half up by `sh` bits, saturate to i16, ReLU
    function [15:0] requant(input [47:0] acc, input [5:0] sh, input relu);
        reg signed [48:0] a;
        reg signed [48:0] r;
        begin
            a = {{acc[47], acc}};
            if (sh == 6'd0) r = a;
            else r = (a + (49'sd1 <<< (sh - 6'd1))) >>> sh;
            if (r > 49'sd32767) r = 49'sd32767;
            if (r < -49'sd32768) r = -49'sd32768;
            if (relu && r < 0) r = 0;
            requant = r[15:0];
        end
    endfunction

    // the step's flags through the pipeline (reset clears only the valid bits)
    reg [{dl}:1] pv;
    reg [{dl}:1] pf;
    reg [{dl}:1] pl;
    reg [{dl}:1] pm;
    reg [255:0] x1;
    reg [255:0] x2;
    integer i;
    always @(posedge clock) begin
        pv <= reset ? {dln}'d0 : {{pv[{dm1}:1], s_valid}};
        pf <= {{pf[{dm1}:1], s_first}};
        pl <= {{pl[{dm1}:1], s_last}};
        pm <= {{pm[{dm1}:1], s_max}};
        for (i = 0; i < 16; i = i + 1) x1[16*i +: 16] <= s_mask[i] ? s_x[16*i +: 16] : 16'd0;
        x2 <= x1;
    end

    // maxpool: the running maximum of 16 i16, at the second edge; then carried to the capture at the
    // seventh (the next position's first step restarts it the edge after)
    reg [255:0] mx;
    reg [255:0] mxp3;
    reg [255:0] mxp4;
    reg [255:0] mxp5;
    reg [255:0] mxp6;
    always @(posedge clock) begin
        mxp3 <= mx;
        mxp4 <= mxp3;
        mxp5 <= mxp4;
        mxp6 <= mxp5;
    end
    always @(posedge clock) begin
        if (pv[1] & pm[1])
            for (i = 0; i < 16; i = i + 1)
                if (pf[1] || $signed(x1[16*i +: 16]) > $signed(mx[16*i +: 16])) mx[16*i +: 16] <= x1[16*i +: 16];
    end

    // a chunk of outputs at i16 offset `m_off` into two old lines: halfwords [m_off, m_off + m_cnt) replaced
    reg [511:0] m_new;
    always @(*) begin
        m_new = m_off ? {{240'd0, o_data, 16'd0}} : {{256'd0, o_data}};
        m_out = m_old;
        for (i = 0; i < 32; i = i + 1)
            if (i >= m_off && i < m_off + m_cnt) m_out[16*i +: 16] = m_new[16*i +: 16];
    end
",
        dl = DP_LATENCY - 1,
        dln = DP_LATENCY - 1,
        dm1 = DP_LATENCY - 2,
    )
    .unwrap();
    // the hold registers: four banks, a position's outputs captured into them in turn (`cb`), so that the
    // next positions compute while the sequencer writes this one's (`o_bank`)
    writeln!(v, "    wire [{}:0] hold_sel;", 256 * chunks - 1).unwrap();
    writeln!(v, "    reg [255:0] mxh [0:{}];", HOLD_BANKS - 1).unwrap();
    writeln!(v, "    reg [1:0] cb;").unwrap();
    writeln!(v, "    wire cap = pv[{0}] & pl[{0}];", DP_LATENCY - 1).unwrap();
    writeln!(v, "    always @(posedge clock) begin").unwrap();
    writeln!(v, "        o_valid <= !reset & cap;").unwrap();
    writeln!(v, "        if (reset) cb <= 2'd0;").unwrap();
    writeln!(v, "        else if (cap) cb <= cb + 2'd1;").unwrap();
    writeln!(v, "        if (cap & pm[{0}]) mxh[cb] <= mxp6;", DP_LATENCY - 1).unwrap();
    writeln!(v, "    end").unwrap();
    let pick = if chunks > 1 { "[256 * o_sel +: 256]" } else { "[255:0]" };
    writeln!(v, "    assign o_data = o_max ? mxh[o_bank] : hold_sel{pick};").unwrap();
    if 16 * chunks > l {
        writeln!(v, "    assign hold_sel[{}:{}] = 0;", 256 * chunks - 1, 16 * l).unwrap();
    }
    for lane in 0..l {
        writeln!(
            v,
            "\
    // ---- lane {lane}
    reg [255:0] ke{lane} [0:{hm1}];
    reg [255:0] ko{lane} [0:{hm1}];
    reg [3:0] ph{lane};
    reg [31:0] bias{lane};
    wire [16:0] ea{lane} = {{13'd0, ph{lane}}} + {{1'b0, s_e}};
    wire [12:0] a{lane} = ea{lane}[16:4];
    wire [12:0] ae{lane} = (a{lane} + 13'd1) >> 1;
    wire [12:0] ao{lane} = a{lane} >> 1;
    reg [255:0] re{lane};
    reg [255:0] ro{lane};
    reg a0_{lane};
    reg [3:0] wo{lane};
    wire [511:0] win{lane} = a0_{lane} ? {{re{lane}, ro{lane}}} : {{ro{lane}, re{lane}}};
    reg [255:0] w2_{lane};
    reg [31:0] p{lane} [0:15];
    reg [47:0] s{lane} [0:3];
    reg [47:0] t{lane};
    reg [47:0] acc{lane};
    reg [15:0] hold{lane} [0:3];
    wire signed [17:0] bi{lane} = 18'sd{lane} - $signed({{{{2{{b_base[15]}}}}, b_base}});
    assign hold_sel[{lo} +: 16] = hold{lane}[o_bank];
    always @(posedge clock) begin
        if (ld_valid && ld_lane == 16'd{lane}) begin
            if (ld_entry[0]) ko{lane}[ld_entry[13:1]] <= ld_line;
            else ke{lane}[ld_entry[13:1]] <= ld_line;
            ph{lane} <= ld_phase;
        end
        if (b_valid && bi{lane} >= 0 && bi{lane} < 8) bias{lane} <= b_line[32 * bi{lane}[2:0] +: 32];
        re{lane} <= ke{lane}[ae{lane}];
        ro{lane} <= ko{lane}[ao{lane}];
        a0_{lane} <= a{lane}[0];
        wo{lane} <= ea{lane}[3:0];
        w2_{lane} <= win{lane} >> (16 * wo{lane});
        for (i = 0; i < 16; i = i + 1) p{lane}[i] <= $signed(x2[16*i +: 16]) * $signed(w2_{lane}[16*i +: 16]);
        for (i = 0; i < 4; i = i + 1)
            s{lane}[i] <= {{{{16{{p{lane}[4*i][31]}}}}, p{lane}[4*i]}} + {{{{16{{p{lane}[4*i+1][31]}}}}, p{lane}[4*i+1]}}
                + {{{{16{{p{lane}[4*i+2][31]}}}}, p{lane}[4*i+2]}} + {{{{16{{p{lane}[4*i+3][31]}}}}, p{lane}[4*i+3]}};
        t{lane} <= s{lane}[0] + s{lane}[1] + s{lane}[2] + s{lane}[3];
        if (pv[5] & !pm[5]) acc{lane} <= (pf[5] ? {{{{16{{bias{lane}[31]}}}}, bias{lane}}} : acc{lane}) + t{lane};
        if (cap & !pm[6]) hold{lane}[cb] <= requant(acc{lane}, q_shift, q_relu);
    end",
            hm1 = half - 1,
            lo = 16 * lane,
        )
        .unwrap();
    }
    writeln!(v, "endmodule").unwrap();
    v
}

/// [`dp_verilog`] as a rust-hdl block of fixed width (a `Verilog::Wrapper`).
#[derive(LogicBlock, Default)]
pub struct CnnDatapath {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub ld_valid: Signal<In, Bit>,
    pub ld_lane: Signal<In, Bits<16>>,
    pub ld_entry: Signal<In, Bits<16>>,
    pub ld_phase: Signal<In, Bits<4>>,
    pub ld_line: Signal<In, Bits<256>>,
    pub b_valid: Signal<In, Bit>,
    /// The lane that takes word 0 of `b_line` (two's complement; lane `l` takes word `l - b_base` if in 0..8).
    pub b_base: Signal<In, Bits<16>>,
    pub b_line: Signal<In, Bits<256>>,
    pub s_valid: Signal<In, Bit>,
    pub s_first: Signal<In, Bit>,
    pub s_last: Signal<In, Bit>,
    pub s_max: Signal<In, Bit>,
    pub s_x: Signal<In, Bits<256>>,
    /// The activations of `s_x` taken (the others are zeros: padding, past the kernel row).
    pub s_mask: Signal<In, Bits<16>>,
    pub s_e: Signal<In, Bits<16>>,
    pub q_shift: Signal<In, Bits<6>>,
    pub q_relu: Signal<In, Bit>,
    pub o_valid: Signal<Out, Bit>,
    pub o_sel: Signal<In, Bits<8>>,
    /// The hold bank to read: positions are captured into banks 0, 1, 2, 3, 0, ... from reset.
    pub o_bank: Signal<In, Bits<2>>,
    /// Read the maxima (`maxpool`) rather than the lanes' outputs.
    pub o_max: Signal<In, Bit>,
    pub o_data: Signal<Out, Bits<256>>,
    pub m_old: Signal<In, Bits<512>>,
    pub m_off: Signal<In, Bit>,
    pub m_cnt: Signal<In, Bits<5>>,
    pub m_out: Signal<Out, Bits<512>>,
    /// The Verilog of `opu_cnn_dp`.
    cores: crate::lane::ModelState<String>,
}

impl CnnDatapath {
    pub fn new(cores: String) -> Self {
        CnnDatapath { cores: crate::lane::ModelState(cores), ..Default::default() }
    }
}

impl Logic for CnnDatapath {
    fn update(&mut self) {}
    fn connect(&mut self) {
        self.o_valid.connect();
        self.o_data.connect();
        self.m_out.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Wrapper(Wrapper {
            code: "\
opu_cnn_dp dp(.clock(clock), .reset(reset), .ld_valid(ld_valid), .ld_lane(ld_lane), .ld_entry(ld_entry),
    .ld_phase(ld_phase), .ld_line(ld_line), .b_valid(b_valid), .b_base(b_base), .b_line(b_line),
    .s_valid(s_valid), .s_first(s_first), .s_last(s_last), .s_max(s_max), .s_x(s_x), .s_mask(s_mask), .s_e(s_e),
    .q_shift(q_shift), .q_relu(q_relu), .o_valid(o_valid), .o_sel(o_sel), .o_bank(o_bank), .o_max(o_max), .o_data(o_data),
    .m_old(m_old), .m_off(m_off), .m_cnt(m_cnt), .m_out(m_out));
"
            .into(),
            cores: self.cores.0.clone(),
        })
    }
}

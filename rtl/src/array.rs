//! The PE array of an overlay config: one [`Aligner`](crate::align::Aligner) whose aligned block is
//! broadcast to `pe_lanes` [`Lane`](crate::lane::Lane)s, each with its own weights and scales.
//!
//! Its Verilog is structural and generated here rather than by rust-hdl, because rust-hdl ports have
//! compile-time widths and the array's buses grow with `pe_lanes`; the modules it instantiates (`opu_align`,
//! `opu_lane`) are rust-hdl's. Ports (lane `i` owns slice `i` of each per-lane bus):
//!
//! - `xf[511:0]`: the FP16 block, presented on both halves of the block (the aligner re-aligns it; the lane
//!   takes `mant[255:0]` on the first half and `mant[511:256]` on the second);
//! - `valid`, `mode`, `half`, `row`, `clear`, `last`: the schedule, shared by every lane (see `Lane`);
//! - `w[128*L-1:0]`: per lane the 16 weight bytes; `dm[64*L-1:0]`: per lane `{d0, m0, d1, m1}`;
//! - `acc[192*L-1:0]`: per lane `{acc1, acc0}` (96 bits each); `nf[2L-1:0]`, `done[2L-1:0]`: per lane
//!   `{row1, row0}`.
//!
//! Everything but `xf` is delayed by [`ALIGN_LATENCY`] to meet the aligned block, so a block's last half is
//! in the accumulators [`ARRAY_LATENCY`] edges after the edge that took it.

use crate::align::ALIGN_LATENCY;
use crate::lane::{ACC_BITS, LANE_LATENCY, W_BUS};
use opu_hw::config::OverlayConfig;
use std::fmt::Write;

/// Edges from a block's last half at the array's inputs to its accumulators (inclusive of the input edge).
pub const ARRAY_LATENCY: usize = ALIGN_LATENCY + LANE_LATENCY;
/// Bits of one lane's `{d0, m0, d1, m1}`.
pub const DM_BITS: usize = 64;

/// The structural Verilog of `opu_array` for `cfg` (the `opu_align` and `opu_lane` modules are emitted
/// separately, see `emit_verilog_for("array", ..)`).
pub fn array_verilog(cfg: &OverlayConfig) -> String {
    let l = cfg.pe_lanes as usize;
    let mut v = String::new();
    let ports = "clock, reset, valid, mode, half, row, clear, last, xf, w, dm, acc, nf, done";
    writeln!(v, "// PE array of overlay `{}`: {l} lanes, act_mantissa_bits {}.", cfg.name, cfg.act_mantissa_bits).unwrap();
    writeln!(v, "module opu_array({ports});").unwrap();
    for (dir, decl) in [
        ("input", "wire clock".to_string()),
        ("input", "wire reset".into()),
        ("input", "wire valid".into()),
        ("input", "wire [1:0] mode".into()),
        ("input", "wire half".into()),
        ("input", "wire row".into()),
        ("input", "wire clear".into()),
        ("input", "wire last".into()),
        ("input", "wire [511:0] xf".into()),
        ("input", format!("wire [{}:0] w", W_BUS * l - 1)),
        ("input", format!("wire [{}:0] dm", DM_BITS * l - 1)),
        ("output", format!("wire [{}:0] acc", 2 * ACC_BITS * l - 1)),
        ("output", format!("wire [{}:0] nf", 2 * l - 1)),
        ("output", format!("wire [{}:0] done", 2 * l - 1)),
    ] {
        writeln!(v, "    {dir} {decl};").unwrap();
    }
    let ctl_bits = 6 + W_BUS * l + DM_BITS * l;
    let d = ALIGN_LATENCY;
    writeln!(
        v,
        "\
    // the schedule and the weights wait for the aligner ({d} stages); reset clears only `valid`
    wire [{c}:0] ctl_in;
    assign ctl_in = {{dm, w, last, clear, row, half, mode}};
    reg [{c}:0] ctl [0:{dl}];
    reg [{dl}:0] vd;
    integer i;
    always @(posedge clock) begin
        ctl[0] <= ctl_in;
        for (i = 1; i < {d}; i = i + 1) ctl[i] <= ctl[i - 1];
        vd <= reset ? {d}'d0 : {{vd[{dm1}:0], valid}};
    end
    wire [{c}:0] ctl_d;
    assign ctl_d = ctl[{dl}];
    wire [511:0] mant;
    wire signed [7:0] x_exp;
    wire x_nf;
    wire signed [20:0] sa;
    opu_align aligner(.clock(clock), .xf(xf), .mant(mant), .x_exp(x_exp), .x_nf(x_nf), .sa(sa));
    wire [255:0] x_half;
    assign x_half = ctl_d[2] ? mant[511:256] : mant[255:0];",
        c = ctl_bits - 1,
        dl = d - 1,
        dm1 = d - 2,
    )
    .unwrap();
    for i in 0..l {
        let wlo = 6 + W_BUS * i;
        let dlo = 6 + W_BUS * l + DM_BITS * i;
        let alo = 2 * ACC_BITS * i;
        writeln!(
            v,
            "    opu_lane lane{i}(.clock(clock), .reset(reset), .valid(vd[{dl}]), .mode(ctl_d[1:0]), .half(ctl_d[2]), \
.row(ctl_d[3]), .clear(ctl_d[4]), .last(ctl_d[5]), .x(x_half), .w(ctl_d[{wh}:{wlo}]), .x_nf(x_nf), \
.x_exp(x_exp), .sa(sa), .d0(ctl_d[{d0h}:{d0l}]), .m0(ctl_d[{m0h}:{m0l}]), .d1(ctl_d[{d1h}:{d1l}]), \
.m1(ctl_d[{m1h}:{dlo}]), .acc0(acc[{a0h}:{alo}]), .acc1(acc[{a1h}:{a1l}]), .nf0(nf[{n0}]), .nf1(nf[{n1}]), \
.done0(done[{n0}]), .done1(done[{n1}]));",
            dl = d - 1,
            wh = wlo + W_BUS - 1,
            // {d0, m0, d1, m1}: d0 in the top 16 bits
            d0h = dlo + 63,
            d0l = dlo + 48,
            m0h = dlo + 47,
            m0l = dlo + 32,
            d1h = dlo + 31,
            d1l = dlo + 16,
            m1h = dlo + 15,
            a0h = alo + ACC_BITS - 1,
            a1h = alo + 2 * ACC_BITS - 1,
            a1l = alo + ACC_BITS,
            n0 = 2 * i,
            n1 = 2 * i + 1,
        )
        .unwrap();
    }
    writeln!(v, "endmodule // opu_array").unwrap();
    v
}

//! Verilog emission for named units (for `opu rtl emit`).
//!
//! rust-hdl names the top module `top` and each child module by its path (`top$mul`); [`emit_verilog`]
//! renames the `top` prefix to the unit's stable module name (`opu_<unit>`), so the top is e.g.
//! `opu_dsp_w4x2` and its children `opu_dsp_w4x2$mul`.

use crate::dsp::{MulW4x2, PackedMulW4x2};
use opu_hw::config::OverlayConfig;
use rust_hdl::prelude::*;
use std::fmt;

/// The units [`emit_verilog`] knows: (name, top module name, what it is).
pub const UNITS: &[(&str, &str, &str)] = &[
    (
        "dsp_w4x2",
        "opu_dsp_w4x2",
        "w4x2u packed multiply: one DSP48E2 (P register) + extraction",
    ),
    (
        "dsp_w4x2_p",
        "opu_dsp_w4x2_p",
        "w4x2u packed multiply, raw 48-bit P (the DSP48E2 alone)",
    ),
    (
        "dsp_acc_w4x2",
        "opu_dsp_acc_w4x2",
        "w4x2u packed multiply-accumulate over a block of 32: one DSP48E2 + side bits + extraction",
    ),
    (
        "dsp_w4x3",
        "opu_dsp_w4x3",
        "w4x3u overpacked multiply (3 x W4 by i12): one DSP48E2 + 5-bit side bits + extraction",
    ),
    (
        "align",
        "opu_align",
        "block aligner: 32 FP16 -> act_mantissa_bits mantissas on the block exponent, X, non-finite flag, S_a",
    ),
    (
        "lane",
        "opu_lane",
        "hybrid PE lane: 2 rows x 16 columns per cycle on 16 DSP48E2 (W4Min/W4 packed w4x2, W8), block epilogue (4 DSP48E2), 96-bit accumulators",
    ),
    (
        "round",
        "opu_round",
        "output stage: a 96-bit accumulator rounded to FP16 and FP32 (nearest even, subnormals, overflow, NaN)",
    ),
    (
        "router",
        "opu_router",
        "router unit: FP16 x FP16 dot of x with the execute and skip rows (16 DSP48E2), biases, FP32 rounding, decision",
    ),
    (
        "array",
        "opu_array",
        "PE array sized by the config: one aligner broadcasting to pe_lanes lanes",
    ),
    (
        "fp32",
        "opu_fp32",
        "IEEE binary32 add, subtract and multiply (round to nearest even, subnormals, canonical NaN), pipelined",
    ),
    (
        "vector",
        "opu_vector",
        "one vector lane (the vector unit has 8, `vector_lanes`): element-wise ops, exp/rsqrt/recip/sigmoid/SiLU, RMSNorm, RoPE, axpby; one element per cycle",
    ),
    (
        "vector_light",
        "opu_vector_light",
        "a light vector lane (lanes 1 to 7 of the vector unit): the vector lane without rsqrt and rms_inv",
    ),
    (
        "sqsum",
        "opu_sqsum",
        "the fused sum of squares of a 32-byte output chunk (the matrix and vector datapaths' four stages, sqsum_stages: 16 FP16 or 8 FP32 values onto the 2^-32 grid)",
    ),
    (
        "reduce",
        "opu_reduce",
        "reduction unit: sum of squares into a 96-bit accumulator (and its FP32 rounding), online-softmax state (max, c, p, l)",
    ),
    (
        "core",
        "opu_core",
        "controller core (rust-hdl HDL): fetch, decode from the ISA's tables, scalar unit, predicates, CSRs, issue with a scoreboard, traps, watchdog",
    ),
    (
        "mmio",
        "opu_mmio",
        "MMIO register file of docs/registers.md (rust-hdl HDL): doorbell, status, IRQ, arguments, counters with HI latches, debug window",
    ),
    (
        "dma",
        "opu_dma",
        "DMA unit (rust-hdl HDL): load/store/load2d/store2d between device memory lines and the 8-bank scratchpad, checked like the functional simulator",
    ),
    (
        "cnn",
        "opu_cnn",
        "CNN unit: conv/maxpool in 16-bit fixed point, pe_lanes lanes of 16 i16 x i16 products (one per DSP48E2) into 48-bit accumulators",
    ),
    (
        "matrix",
        "opu_matrix",
        "matrix unit: matmul sequencer (rust-hdl HDL) over the weight feeds, the PE array and the hold registers (structural datapath sized by the config), output rounding",
    ),
    (
        "vector_unit",
        "opu_vector_unit",
        "vector unit: vop/rmsnorm/rope/argmax sequencer and the RED file (rust-hdl HDL) over 8 vector lanes with operand unpacking, FP16 rounding, squares and argmax (datapath Verilog)",
    ),
    (
        "attention",
        "opu_attention",
        "attention unit (rust-hdl HDL): attn (scores on the router datapath, online softmax on the reduction unit, 8 axpby lanes, recip) with the KV history buffer, and kvappend",
    ),
    (
        "top",
        "opu_top",
        "the overlay so far (rust-hdl HDL): register file, controller core, DMA, matrix, vector and attention units, RED, 8-bank scratchpad, a line port and a weight port to device memory",
    ),
];

/// Why [`emit_verilog`] failed.
#[derive(Debug)]
pub enum EmitError {
    /// No unit of that name (see [`UNITS`]).
    UnknownUnit(String),
    /// rust-hdl's design checks (connectivity, logic loops, written inputs) failed.
    Check(String),
    /// The unit is not built for this overlay config.
    Unsupported { unit: String, config: String, what: String },
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::UnknownUnit(u) => {
                let names: Vec<_> = UNITS.iter().map(|u| u.0).collect();
                write!(f, "unknown RTL unit {u:?} (known: {})", names.join(", "))
            }
            EmitError::Check(e) => write!(f, "rust-hdl design check failed: {e}"),
            EmitError::Unsupported { unit, config, what } => {
                write!(f, "RTL unit `{unit}` cannot be built for overlay config `{config}`: {what}")
            }
        }
    }
}

impl std::error::Error for EmitError {}


/// [`MulW4x2`] ready to simulate or emit (inputs and internals connected).
pub fn mul_w4x2_top() -> MulW4x2 {
    connect_top!(MulW4x2::default(), clock, w0, w1, x)
}

/// [`PackedMulW4x2`] ready to simulate or emit.
pub fn packed_mul_w4x2_top() -> PackedMulW4x2 {
    connect_top!(PackedMulW4x2::default(), clock, w0, w1, x)
}

pub(crate) fn checked_verilog<U: Block>(uut: &U) -> Result<String, EmitError> {
    check_all(uut).map_err(|e| EmitError::Check(format!("{e:?}")))?;
    Ok(ultra_ram_style(&generate_verilog_unchecked(uut)))
}

/// Memories of at least this many bits are UltraRAM (288 Kb each on UltraScale+) rather than block RAM (36 Kb):
/// the KV history buffer and the scratchpad banks. Left to themselves, yosys and Vivado put them in block
/// RAM, of which the u280 preset's 8 MiB would need more than the xcu280 has.
pub const ULTRA_RAM_MIN_BITS: u64 = 1 << 20;

/// Marks rust-hdl's large memories (`reg[W-1:0] mem[D-1:0];`) `(* ram_style = "ultra" *)`, which yosys and
/// Vivado honour and Verilator ignores.
fn ultra_ram_style(verilog: &str) -> String {
    let size = |t: &str| -> Option<u64> {
        let rest = t.strip_prefix("reg[")?;
        let (w, rest) = rest.split_once(":0] mem[")?;
        let (d, rest) = rest.split_once(":0]")?;
        (rest.trim() == ";").then_some(())?;
        Some((w.parse::<u64>().ok()? + 1) * (d.parse::<u64>().ok()? + 1))
    };
    let mut out = String::with_capacity(verilog.len() + 256);
    for line in verilog.lines() {
        let t = line.trim_start();
        if size(t).is_some_and(|bits| bits >= ULTRA_RAM_MIN_BITS) {
            out.push_str(&line[..line.len() - t.len()]);
            out.push_str("(* ram_style = \"ultra\" *) ");
            out.push_str(t);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Renames rust-hdl's top module `top` (and the `top$..` child modules) to `name` (`name$..`).
pub(crate) fn rename_top(verilog: &str, name: &str) -> String {
    let mut out = String::with_capacity(verilog.len() + 64);
    for line in verilog.lines() {
        let t = line.trim_start();
        let indent = &line[..line.len() - t.len()];
        let renamed = if let Some(rest) = t.strip_prefix("module top") {
            format!("module {name}{rest}")
        } else if let Some(rest) = t.strip_prefix("endmodule // top") {
            format!("endmodule // {name}{rest}")
        } else if let Some(rest) = t.strip_prefix("top$") {
            // a child module instantiation: `top$mul mul(`
            format!("{name}${rest}")
        } else {
            t.to_string()
        };
        out.push_str(indent);
        out.push_str(&renamed);
        out.push('\n');
    }
    out
}

/// The Verilog of unit `unit` (see [`UNITS`]) for the `sim` preset, its top module named `opu_<unit>`.
pub fn emit_verilog(unit: &str) -> Result<String, EmitError> {
    emit_verilog_for(unit, &OverlayConfig::sim())
}

/// What the lane needs of a config: a dot width of 32 (16 DSPs x 2 packed products) and mantissas that
/// fit its 16-bit activation bus.
fn check_lane_config(unit: &str, cfg: &OverlayConfig) -> Result<(), EmitError> {
    let bad = |what: String| Err(EmitError::Unsupported { unit: unit.into(), config: cfg.name.clone(), what });
    if cfg.dot_width as usize != 2 * crate::lane::LANE_DSPS {
        return bad(format!("dot_width is {}; the RTL lane is built for {}", cfg.dot_width, 2 * crate::lane::LANE_DSPS));
    }
    if !(8..=16).contains(&cfg.act_mantissa_bits) {
        return bad(format!("act_mantissa_bits is {}; expected 8..=16", cfg.act_mantissa_bits));
    }
    Ok(())
}

/// The vector unit has [`crate::vecunit::VEC_LANES`] lanes at every config: a line of FP32 per cycle, what
/// the scratchpad's line port delivers.
fn check_vector_config(unit: &str, cfg: &OverlayConfig) -> Result<(), EmitError> {
    if cfg.vector_lanes as usize != crate::vecunit::VEC_LANES {
        return Err(EmitError::Unsupported {
            unit: unit.into(),
            config: cfg.name.clone(),
            what: format!("vector_lanes is {}; the RTL's vector unit has {}", cfg.vector_lanes, crate::vecunit::VEC_LANES),
        });
    }
    Ok(())
}

/// The Verilog of unit `unit` (see [`UNITS`]) for overlay `cfg`, its top module named `opu_<unit>`.
pub fn emit_verilog_for(unit: &str, cfg: &OverlayConfig) -> Result<String, EmitError> {
    let (_, top, _) = UNITS
        .iter()
        .find(|u| u.0 == unit)
        .ok_or_else(|| EmitError::UnknownUnit(unit.to_string()))?;
    let v = match unit {
        "dsp_w4x2" => checked_verilog(&mul_w4x2_top())?,
        "dsp_w4x2_p" => checked_verilog(&packed_mul_w4x2_top())?,
        "dsp_acc_w4x2" => checked_verilog(&crate::acc::packed_mac_w4x2_top())?,
        "dsp_w4x3" => checked_verilog(&crate::dsp3::mul_w4x3_top())?,
        "align" => {
            check_lane_config(unit, cfg)?;
            checked_verilog(&crate::align::aligner_top(cfg.act_mantissa_bits))?
        }
        "lane" => {
            check_lane_config(unit, cfg)?;
            // (the DSP48E2 primitives of the products need a simulation model under Verilator)
            let v = checked_verilog(&crate::lane::lane_top())?;
            format!("{v}\n{}", crate::lane::DSP48E2_STAND_IN)
        }
        "router" => checked_verilog(&crate::router::router_top())?,
        "fp32" => checked_verilog(&crate::fp32::fp32_top())?,
        "vector" => checked_verilog(&crate::vector::vector_top())?,
        "vector_light" => checked_verilog(&crate::vector::light_vector_top())?,
        "sqsum" => checked_verilog(&crate::sqsum::sqsum_top())?,
        "reduce" => checked_verilog(&crate::reduce::reduce_top())?,
        "core" => checked_verilog(&crate::ctrl::core::core_top(cfg))?,
        "mmio" => checked_verilog(&crate::ctrl::mmio::mmio_top(cfg))?,
        "dma" => checked_verilog(&crate::dma::dma_top(cfg))?,
        "cnn" => checked_verilog(&crate::cnn::cnn_top(cfg))?,
        "matrix" => {
            check_lane_config(unit, cfg)?;
            crate::matrix::matrix_verilog(cfg)?
        }
        "vector_unit" => {
            check_vector_config(unit, cfg)?;
            checked_verilog(&crate::vecunit::vecunit_top(cfg)?)?
        }
        "attention" => checked_verilog(&crate::attn::attn_top(cfg)?)?,
        "top" => return top_verilog_named(cfg, top),
        "round" => checked_verilog(&crate::round::round_top())?,
        // Structural: rust-hdl ports have compile-time widths, the array's depend on the config.
        "array" => {
            check_lane_config(unit, cfg)?;
            let (align, lane) = (emit_verilog_for("align", cfg)?, emit_verilog_for("lane", cfg)?);
            return Ok(format!("{align}\n{lane}\n{}", crate::array::array_verilog(cfg)));
        }
        _ => unreachable!("UNITS and emit_verilog disagree on {unit}"),
    };
    Ok(rename_top(&v, top))
}

/// The Verilog of the overlay's top for `cfg` with its top module named `name` (the unit `top` is it
/// named `opu_top`): a simulator that holds the tops of several configs needs a name per config.
pub fn top_verilog_named(cfg: &OverlayConfig, name: &str) -> Result<String, EmitError> {
    check_lane_config("top", cfg)?;
    check_vector_config("top", cfg)?;
    Ok(rename_top(&crate::top::top_verilog(cfg)?, name))
}

/// The top module name of `unit`.
pub fn top_name(unit: &str) -> Option<&'static str> {
    UNITS.iter().find(|u| u.0 == unit).map(|u| u.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_memories_are_ultra_ram() {
        let v = ultra_ram_style("module m;\n    reg[255:0] mem[65535:0];\n    reg[255:0] mem[1023:0];\n    reg[31:0] mem[131071:0];\nendmodule\n");
        assert_eq!(
            v,
            "module m;\n    (* ram_style = \"ultra\" *) reg[255:0] mem[65535:0];\n    reg[255:0] mem[1023:0];\n    (* ram_style = \"ultra\" *) reg[31:0] mem[131071:0];\nendmodule\n"
        );
        // the u280 top: the history buffer's K and V, the scratchpad's 8 banks
        let top = emit_verilog_for("top", &OverlayConfig::u280()).unwrap();
        assert_eq!(top.matches("(* ram_style = \"ultra\" *)").count(), 10);
    }

    #[test]
    fn a_config_the_rtl_does_not_build_is_refused_naming_the_field() {
        let mut cfg = OverlayConfig::u280();
        cfg.vector_lanes = 64;
        for unit in ["vector_unit", "top"] {
            let e = emit_verilog_for(unit, &cfg).unwrap_err().to_string();
            assert!(e.contains("vector_lanes is 64") && e.contains("u280"), "{e}");
        }
    }
}

//! Verilog emission for named units (for `opu rtl emit`).
//!
//! rust-hdl names the top module `top` and each child module by its path (`top$mul`); [`emit_verilog`]
//! renames the `top` prefix to the unit's stable module name (`opu_<unit>`), so the top is e.g.
//! `opu_dsp_w4x2` and its children `opu_dsp_w4x2$mul`.

use crate::dsp::{MulW4x2, PackedMulW4x2};
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
];

/// Why [`emit_verilog`] failed.
#[derive(Debug)]
pub enum EmitError {
    /// No unit of that name (see [`UNITS`]).
    UnknownUnit(String),
    /// rust-hdl's design checks (connectivity, logic loops, written inputs) failed.
    Check(String),
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::UnknownUnit(u) => {
                let names: Vec<_> = UNITS.iter().map(|u| u.0).collect();
                write!(f, "unknown RTL unit {u:?} (known: {})", names.join(", "))
            }
            EmitError::Check(e) => write!(f, "rust-hdl design check failed: {e}"),
        }
    }
}

impl std::error::Error for EmitError {}

/// Connects the top-level inputs (rust-hdl requires every input to be driven) and the block's internals.
macro_rules! connect_top {
    ($uut:ident, $($input:ident),+) => {{
        $( $uut.$input.connect(); )+
        $uut.connect_all();
    }};
}

/// [`MulW4x2`] ready to simulate or emit (inputs and internals connected).
pub fn mul_w4x2_top() -> MulW4x2 {
    let mut uut = MulW4x2::default();
    connect_top!(uut, clock, w0, w1, x);
    uut
}

/// [`PackedMulW4x2`] ready to simulate or emit.
pub fn packed_mul_w4x2_top() -> PackedMulW4x2 {
    let mut uut = PackedMulW4x2::default();
    connect_top!(uut, clock, w0, w1, x);
    uut
}

fn checked_verilog<U: Block>(uut: &U) -> Result<String, EmitError> {
    check_all(uut).map_err(|e| EmitError::Check(format!("{e:?}")))?;
    Ok(generate_verilog_unchecked(uut))
}

/// Renames rust-hdl's top module `top` (and the `top$..` child modules) to `name` (`name$..`).
fn rename_top(verilog: &str, name: &str) -> String {
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

/// The Verilog of unit `unit` (see [`UNITS`]), its top module named `opu_<unit>`.
pub fn emit_verilog(unit: &str) -> Result<String, EmitError> {
    let (_, top, _) = UNITS
        .iter()
        .find(|u| u.0 == unit)
        .ok_or_else(|| EmitError::UnknownUnit(unit.to_string()))?;
    let v = match unit {
        "dsp_w4x2" => checked_verilog(&mul_w4x2_top())?,
        "dsp_w4x2_p" => checked_verilog(&packed_mul_w4x2_top())?,
        "dsp_acc_w4x2" => checked_verilog(&crate::acc::packed_mac_w4x2_top())?,
        "dsp_w4x3" => checked_verilog(&crate::dsp3::mul_w4x3_top())?,
        _ => unreachable!("UNITS and emit_verilog disagree on {unit}"),
    };
    Ok(rename_top(&v, top))
}

/// The top module name of `unit`.
pub fn top_name(unit: &str) -> Option<&'static str> {
    UNITS.iter().find(|u| u.0 == unit).map(|u| u.1)
}

//! Resource figures from yosys (`opu rtl synth`): `synth_xilinx -family xcup` (UltraScale+, the U280's
//! family) on a unit's Verilog, then `stat -json`, summed into LUT / FF / DSP48E2 / BRAM / URAM / carry
//! counts.
//!
//! yosys keeps pipeline registers and accumulators out of the DSP48E2 on xcup, so its FF (and some LUT)
//! counts are upper bounds of what Vivado would report.

use crate::emit::{emit_verilog_for, top_name, EmitError};
use opu_hw::config::OverlayConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Products per cycle per DSP48E2 of a unit, by weight mode (absent: the unit has no such mode).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PackingFactor {
    pub w4: Option<f64>,
    pub w4_min: Option<f64>,
    pub w8: Option<f64>,
    pub fp16: Option<f64>,
}

/// What yosys mapped a unit to.
#[derive(Clone, Debug, Serialize)]
pub struct SynthReport {
    /// The overlay config the unit was built for.
    pub config: String,
    pub unit: String,
    pub top: String,
    pub lut: u64,
    pub ff: u64,
    pub dsp48e2: u64,
    /// RAMB18E2 equivalents (a RAMB36E2 counts 2).
    pub bram: u64,
    pub uram: u64,
    pub carry: u64,
    pub packing_factor: PackingFactor,
    /// Every cell type yosys used, with its count.
    pub cells: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error("cannot run yosys ({0}): install it (Debian package `yosys`)")]
    NoYosys(std::io::Error),
    #[error("yosys failed on `{unit}`: {stderr}")]
    Yosys { unit: String, stderr: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("yosys statistics of `{unit}`: {what}")]
    Stat { unit: String, what: String },
}

/// Products per cycle the unit computes, by mode (what its packing is designed to deliver).
fn products_per_cycle(unit: &str, cfg: &OverlayConfig) -> PackingFactor {
    match unit {
        "dsp_w4x2" | "dsp_w4x2_p" | "dsp_acc_w4x2" => PackingFactor { w4_min: Some(2.0), ..Default::default() },
        "dsp_w4x3" => PackingFactor { w4_min: Some(3.0), ..Default::default() },
        // per cycle: 32 W4 products (2 rows x 16 columns) or 16 W8 products
        "lane" => {
            let w4 = (crate::lane::PACKING_W4 * crate::lane::LANE_DSPS) as f64;
            let w8 = (crate::lane::PACKING_W8 * crate::lane::LANE_DSPS) as f64;
            PackingFactor { w4: Some(w4), w4_min: Some(w4), w8: Some(w8), fp16: None }
        }
        "router" => PackingFactor { fp16: Some(crate::router::ROUTER_DSPS as f64), ..Default::default() },
        "array" => {
            let lanes = products_per_cycle("lane", cfg);
            let n = f64::from(cfg.pe_lanes);
            PackingFactor { w4: lanes.w4.map(|p| p * n), w4_min: lanes.w4_min.map(|p| p * n), w8: lanes.w8.map(|p| p * n), fp16: None }
        }
        _ => PackingFactor::default(),
    }
}

/// Synthesizes `unit` of the `sim` preset in `workdir` (Verilog and JSON are left there for inspection).
pub fn synthesize(unit: &str, workdir: &Path) -> Result<SynthReport, SynthError> {
    synthesize_for(unit, &OverlayConfig::sim(), workdir)
}

/// Synthesizes `unit` as built for overlay `cfg` in `workdir`.
pub fn synthesize_for(unit: &str, cfg: &OverlayConfig, workdir: &Path) -> Result<SynthReport, SynthError> {
    let verilog = emit_verilog_for(unit, cfg)?;
    let top = top_name(unit).ok_or_else(|| EmitError::UnknownUnit(unit.into()))?;
    std::fs::create_dir_all(workdir)?;
    let (v, j) = (workdir.join(format!("{top}.v")), workdir.join(format!("{top}.json")));
    std::fs::write(&v, verilog)?;
    let script = format!("read_verilog {}; synth_xilinx -family xcup -top {top} -flatten; tee -q -o {} stat -json", v.display(), j.display());
    let out = Command::new("yosys").args(["-q", "-p", &script]).output().map_err(SynthError::NoYosys)?;
    if !out.status.success() {
        return Err(SynthError::Yosys { unit: unit.into(), stderr: String::from_utf8_lossy(&out.stderr).into_owned() });
    }
    let stat: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j)?)
        .map_err(|e| SynthError::Stat { unit: unit.into(), what: e.to_string() })?;
    let by_type = stat["design"]["num_cells_by_type"]
        .as_object()
        .ok_or_else(|| SynthError::Stat { unit: unit.into(), what: "no design.num_cells_by_type".into() })?;
    let cells: BTreeMap<String, u64> = by_type.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect();
    let sum = |f: &dyn Fn(&str) -> bool| cells.iter().filter(|(k, _)| f(k)).map(|(_, v)| v).sum::<u64>();
    let dsp48e2 = sum(&|k| k == "DSP48E2");
    let mut packing_factor = products_per_cycle(unit, cfg);
    for f in [&mut packing_factor.w4, &mut packing_factor.w4_min, &mut packing_factor.w8, &mut packing_factor.fp16] {
        *f = f.map(|p| if dsp48e2 == 0 { 0.0 } else { p / dsp48e2 as f64 });
    }
    Ok(SynthReport {
        config: cfg.name.clone(),
        unit: unit.into(),
        top: top.into(),
        lut: sum(&|k| k.starts_with("LUT")),
        ff: sum(&|k| k.starts_with("FD")),
        dsp48e2,
        bram: sum(&|k| k == "RAMB18E2") + 2 * sum(&|k| k == "RAMB36E2"),
        uram: sum(&|k| k == "URAM288"),
        carry: sum(&|k| k.starts_with("CARRY")),
        packing_factor,
        cells,
    })
}

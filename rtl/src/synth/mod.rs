//! Resource figures from yosys (`opu rtl synth`): `synth_xilinx -family xcup` (UltraScale+, the U280's
//! family) on a unit's Verilog, then the mapped netlist's cells (`write_json`), summed into LUT / FF /
//! DSP48E2 / BRAM / URAM / carry counts.
//!
//! yosys keeps pipeline registers and accumulators out of the DSP48E2 on xcup, so its FF (and some LUT)
//! counts are upper bounds of what Vivado would report.

pub mod timing;

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
    /// LUTs, those of shift registers and LUT RAMs included (as Vivado's "CLB LUTs" counts them).
    pub lut: u64,
    pub ff: u64,
    pub dsp48e2: u64,
    /// RAMB18E2 equivalents (a RAMB36E2 counts 2).
    pub bram: u64,
    pub uram: u64,
    pub carry: u64,
    pub packing_factor: PackingFactor,
    /// The longest path between registers by the estimate of [`timing`].
    pub worst_path: Option<timing::PathReport>,
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

/// yosys' view of a synthesized unit: its top module's name and the mapped netlist (`write_json`).
struct Yosys {
    top: &'static str,
    netlist: serde_json::Value,
}

/// Writes `unit`'s Verilog for `cfg` into `workdir`: its top module and the file.
fn emit_into(unit: &str, cfg: &OverlayConfig, workdir: &Path) -> Result<(&'static str, std::path::PathBuf), SynthError> {
    let verilog = emit_verilog_for(unit, cfg)?;
    let top = top_name(unit).ok_or_else(|| EmitError::UnknownUnit(unit.into()))?;
    std::fs::create_dir_all(workdir)?;
    let v = workdir.join(format!("{top}.v"));
    std::fs::write(&v, verilog)?;
    Ok((top, v))
}

/// Emits `unit` for `cfg` into `workdir` and runs `synth_xilinx -family xcup -flatten` on it, leaving the
/// Verilog and the netlist (`<top>.net.json`) there.
fn run_yosys(unit: &str, cfg: &OverlayConfig, workdir: &Path) -> Result<Yosys, SynthError> {
    let (top, v) = emit_into(unit, cfg, workdir)?;
    let n = workdir.join(format!("{top}.net.json"));
    yosys(unit, &format!("read_verilog {}; synth_xilinx -family xcup -top {top} -flatten; write_json {}", v.display(), n.display()))?;
    Ok(Yosys { top, netlist: read_json(unit, &n)? })
}

/// Synthesizes `unit` as built for overlay `cfg` in `workdir`.
pub fn synthesize_for(unit: &str, cfg: &OverlayConfig, workdir: &Path) -> Result<SynthReport, SynthError> {
    let Yosys { top, netlist } = run_yosys(unit, cfg, workdir)?;
    let stat_err = |what: String| SynthError::Stat { unit: unit.into(), what };
    // flattened: the top is the one module
    let cells: BTreeMap<String, u64> =
        module_cells(&netlist).map_err(stat_err)?.remove(top).ok_or_else(|| stat_err(format!("no module {top} in the netlist")))?.into_iter().collect();
    let worst_path = timing::worst_paths(&netlist).map_err(stat_err)?.into_iter().next();
    let r = Resources::of_cells(cells.iter().map(|(k, n)| (k.as_str(), *n)));
    let dsp48e2 = r.dsp48e2;
    let mut packing_factor = products_per_cycle(unit, cfg);
    for f in [&mut packing_factor.w4, &mut packing_factor.w4_min, &mut packing_factor.w8, &mut packing_factor.fp16] {
        *f = f.map(|p| if dsp48e2 == 0 { 0.0 } else { p / dsp48e2 as f64 });
    }
    Ok(SynthReport {
        config: cfg.name.clone(),
        unit: unit.into(),
        top: top.into(),
        lut: r.lut,
        ff: r.ff,
        dsp48e2,
        bram: r.bram,
        uram: r.uram,
        carry: r.carry,
        packing_factor,
        worst_path,
        cells,
    })
}

/// What an FPGA offers.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Capacity {
    pub part: &'static str,
    pub lut: u64,
    pub ff: u64,
    pub dsp48e2: u64,
    /// RAMB18E2 equivalents.
    pub bram: u64,
    pub uram: u64,
}

/// The Alveo U280's FPGA (XCU280, Virtex UltraScale+ HBM; AMD DS963): CLB LUTs, CLB flip-flops, DSP slices,
/// 2,016 RAMB36 (4,032 RAMB18), 960 UltraRAM.
pub const XCU280: Capacity = Capacity { part: "xcu280", lut: 1_303_680, ff: 2_607_360, dsp48e2: 9_024, bram: 4_032, uram: 960 };

/// Mapped resources.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Resources {
    pub lut: u64,
    pub ff: u64,
    pub dsp48e2: u64,
    /// RAMB18E2 equivalents (a RAMB36E2 counts 2).
    pub bram: u64,
    pub uram: u64,
    pub carry: u64,
}

impl Resources {
    /// The resources of yosys cell counts by type (cells of other types, submodules among them, add nothing).
    pub fn of_cells<'a>(cells: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
        let mut r = Resources::default();
        for (k, n) in cells {
            match k {
                _ if k.starts_with("LUT") => r.lut += n,
                // shift registers and LUT RAM, counted as the LUTs each primitive takes (UG574)
                _ if k.starts_with("SRL") => r.lut += n,
                "RAM32X1S" | "RAM64X1S" => r.lut += n,
                "RAM32X1D" | "RAM64X1D" | "RAM128X1S" => r.lut += 2 * n,
                "RAM32M" | "RAM64M" | "RAM128X1D" | "RAM256X1S" => r.lut += 4 * n,
                "RAM32M16" | "RAM64M8" | "RAM256X1D" | "RAM512X1S" => r.lut += 8 * n,
                _ if k.starts_with("FD") => r.ff += n,
                "DSP48E2" => r.dsp48e2 += n,
                "RAMB18E2" => r.bram += n,
                "RAMB36E2" => r.bram += 2 * n,
                "URAM288" => r.uram += n,
                _ if k.starts_with("CARRY") => r.carry += n,
                _ => {}
            }
        }
        r
    }

    fn add(&mut self, o: &Resources, times: u64) {
        self.lut += o.lut * times;
        self.ff += o.ff * times;
        self.dsp48e2 += o.dsp48e2 * times;
        self.bram += o.bram * times;
        self.uram += o.uram * times;
        self.carry += o.carry * times;
    }

    /// Shares of the device's capacity.
    pub fn utilization(&self, c: &Capacity) -> Utilization {
        let f = |a: u64, b: u64| a as f64 / b as f64;
        Utilization { lut: f(self.lut, c.lut), ff: f(self.ff, c.ff), dsp48e2: f(self.dsp48e2, c.dsp48e2), bram: f(self.bram, c.bram), uram: f(self.uram, c.uram) }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Utilization {
    pub lut: f64,
    pub ff: f64,
    pub dsp48e2: f64,
    pub bram: f64,
    pub uram: f64,
}

/// A child module of the design's top (a unit), its instances and what they hold together.
#[derive(Clone, Debug, Serialize)]
pub struct PartReport {
    pub module: String,
    pub instances: u64,
    /// All instances with everything below them.
    pub resources: Resources,
    /// The worst path estimated in the part's modules ([`timing`]).
    pub worst_path: Option<timing::PathReport>,
}

/// A design synthesized module by module (`synth_xilinx` without `-flatten`): each module is mapped once and
/// counted as many times as it is instantiated, which is what makes the u280's 128 lanes tractable (one
/// lane mapped, not 128). Modules are not optimized across their ports, so the figures are upper bounds of
/// a flattened mapping.
#[derive(Clone, Debug, Serialize)]
pub struct DesignReport {
    pub config: String,
    pub unit: String,
    pub top: String,
    pub method: &'static str,
    pub total: Resources,
    pub device: Capacity,
    pub utilization: Utilization,
    /// The top's own cells, then its children, largest first (by LUTs).
    pub parts: Vec<PartReport>,
    pub core_clock_mhz: u32,
    /// The clock period the paths must fit (ns).
    pub budget_ns: f64,
    /// The worst paths of the whole design, one per module, worst first (at most 12).
    pub worst_paths: Vec<timing::PathReport>,
}

/// Synthesizes `unit` as built for `cfg` module by module in `workdir` and sums its resources by instance,
/// against the xcu280, with a timing estimate per module. Runs as many yosys at once as the machine has cores.
pub fn synthesize_design(unit: &str, cfg: &OverlayConfig, workdir: &Path) -> Result<DesignReport, SynthError> {
    synthesize_design_with(unit, cfg, workdir, default_jobs(), &|_, _, _| {})
}

/// yosys processes at once by default: one per core.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// [`synthesize_design`] with `jobs` yosys processes at once, calling `progress(module, done, total)` as each
/// mapped module is done.
///
/// The design is not mapped in one `synth_xilinx` run over its hierarchy: yosys' `opt` loops repeat over the
/// whole design until nothing changes, and the vector lane's 180 pipeline stages take that many rounds of
/// constant propagation, so that over the u280's top such a run took well over 90 minutes of one core. Each
/// unit, each module instantiated more than once and each large module ([`Partition`]) gets a yosys of its
/// own instead, the mapped modules below it black boxes (`blackbox`) and the rest flattened into it; the
/// runs share the cores.
pub fn synthesize_design_with(
    unit: &str,
    cfg: &OverlayConfig,
    workdir: &Path,
    jobs: usize,
    progress: &(dyn Fn(&str, usize, usize) + Sync),
) -> Result<DesignReport, SynthError> {
    let (top, v) = emit_into(unit, cfg, workdir)?;
    let stat_err = |what: String| SynthError::Stat { unit: unit.into(), what };
    // the hierarchy, elaborated but not synthesized (`proc`: the JSON backend takes no processes): which
    // module instantiates which. (The netlists, not `stat -json`: yosys 0.23 writes invalid JSON for a design
    // with a hierarchy, the hierarchy's text in the middle of it.)
    let hier_json = workdir.join("hierarchy.net.json");
    yosys(unit, &format!("read_verilog {}; hierarchy -top {top}; proc; write_json {}", v.display(), hier_json.display()))?;
    let hierarchy = module_cells(&read_json(unit, &hier_json)?).map_err(stat_err)?;
    if !hierarchy.contains_key(top) {
        return Err(stat_err(format!("no module {top} in yosys' hierarchy")));
    }
    let part = Partition::of(&hierarchy, top);
    // the biggest first, so that the long runs start early and the cores stay busy
    let mut order: Vec<&String> = part.mapped.iter().collect();
    order.sort_by(|a, b| part.run_weight[*b].cmp(&part.run_weight[*a]).then_with(|| a.cmp(b)));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicUsize::new(0);
    type Mapped = (String, ModuleRun);
    let results: std::sync::Mutex<Vec<Result<Mapped, SynthError>>> = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, order.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&m) = order.get(i) else { break };
                let r = map_module(unit, &v, m, &part.boxes(m, &hierarchy), workdir);
                let failed = r.is_err();
                results.lock().expect("no thread panics holding it").push(r.map(|run| (m.clone(), run)));
                if failed {
                    // the others finish the module they are on; nothing new starts
                    next.store(order.len(), std::sync::atomic::Ordering::Relaxed);
                    break;
                }
                progress(m, done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, order.len());
            });
        }
    });
    let mut modules = BTreeMap::new();
    let mut paths = Vec::new();
    for r in results.into_inner().expect("no thread panics holding it") {
        let (m, (cells, p)) = r?;
        modules.insert(m, cells);
        paths.extend(p);
    }
    paths.sort_by(|a, b| b.delay_ns.total_cmp(&a.delay_ns).then_with(|| a.module.cmp(&b.module)));
    design_report(unit, top, cfg, &modules, paths).map_err(stat_err)
}

/// Runs one yosys script (quiet), its stderr in the error.
fn yosys(unit: &str, script: &str) -> Result<(), SynthError> {
    let out = Command::new("yosys").args(["-q", "-p", script]).output().map_err(SynthError::NoYosys)?;
    if !out.status.success() {
        return Err(SynthError::Yosys { unit: unit.into(), stderr: String::from_utf8_lossy(&out.stderr).into_owned() });
    }
    Ok(())
}

fn read_json(unit: &str, path: &Path) -> Result<serde_json::Value, SynthError> {
    serde_json::from_str(&std::fs::read_to_string(path)?).map_err(|e| SynthError::Stat { unit: unit.into(), what: format!("{}: {e}", path.display()) })
}

/// Each module of a design with its cells counted by type, submodules among them.
type ModuleCells = BTreeMap<String, Vec<(String, u64)>>;

/// The submodules module `m` instantiates (the cell types that are modules of `h`), with their counts.
fn submodules<'a>(h: &'a ModuleCells, m: &str) -> impl Iterator<Item = (&'a String, u64)> + 'a {
    h[m].iter().filter(|(k, _)| h.contains_key(k)).map(|(k, n)| (k, *n))
}

/// Each module of a yosys JSON netlist (`write_json`) with its cells counted by type (submodules among them),
/// names without yosys' leading backslash; the cell library's black boxes left out.
fn module_cells(netlist: &serde_json::Value) -> Result<ModuleCells, String> {
    let strip = |s: &str| s.trim_start_matches('\\').to_string();
    let mut modules = BTreeMap::new();
    for (name, m) in netlist["modules"].as_object().ok_or("the netlist has no `modules`")? {
        if m["attributes"]["blackbox"].is_string() {
            continue;
        }
        let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
        for (cname, c) in m["cells"].as_object().into_iter().flatten() {
            let ty = c["type"].as_str().ok_or_else(|| format!("module {name}: cell {cname} has no type"))?;
            *by_type.entry(strip(ty)).or_default() += 1;
        }
        modules.insert(strip(name), by_type.into_iter().collect());
    }
    Ok(modules)
}

/// Which modules of a design yosys maps on its own ([`synthesize_design_with`]); every other module is
/// flattened into the nearest of them above it.
struct Partition {
    /// The top, its children (the units, one row each in the report), every module its parents instantiate
    /// more than once together (mapped once, counted per instance; a module used once inside a repeated one
    /// is flattened into it) and every module whose subtree has at
    /// least [`Partition::OWN_RUN_CELLS`] elaborated cells (a long run of its own, beside the others).
    /// rust-hdl makes a module of every register and memory: a yosys each would be hundreds of runs.
    mapped: std::collections::BTreeSet<String>,
    /// Elaborated cells of each module with those of the modules flattened into its run.
    run_weight: BTreeMap<String, u64>,
}

impl Partition {
    const OWN_RUN_CELLS: u64 = 1000;

    fn of(hierarchy: &ModuleCells, top: &str) -> Self {
        // a post-order of the hierarchy (children first; it has no cycles)
        fn post(m: &str, h: &ModuleCells, seen: &mut std::collections::BTreeSet<String>, out: &mut Vec<String>) {
            if seen.insert(m.to_string()) {
                for (k, _) in submodules(h, m) {
                    post(k, h, seen, out);
                }
                out.push(m.to_string());
            }
        }
        let mut order = Vec::new();
        post(top, hierarchy, &mut Default::default(), &mut order);
        // elaborated cells of each subtree (children first), and how often each module is instantiated by
        // its parent modules together
        let mut weight: BTreeMap<String, u64> = BTreeMap::new();
        let mut uses: BTreeMap<String, u64> = BTreeMap::new();
        for m in &order {
            let w = hierarchy[m].iter().map(|(k, n)| n * weight.get(k).copied().unwrap_or(1)).sum();
            weight.insert(m.clone(), w);
            for (k, c) in submodules(hierarchy, m) {
                *uses.entry(k.clone()).or_default() += c;
            }
        }
        let units: std::collections::BTreeSet<&str> = submodules(hierarchy, top).map(|(k, _)| k.as_str()).collect();
        let mapped: std::collections::BTreeSet<String> = order
            .iter()
            .filter(|m| m.as_str() == top || units.contains(m.as_str()) || uses.get(*m).is_some_and(|&u| u > 1) || weight[*m] >= Self::OWN_RUN_CELLS)
            .cloned()
            .collect();
        // what each run maps: its own cells and those of the modules flattened into it (children first)
        let mut run_weight: BTreeMap<String, u64> = BTreeMap::new();
        for m in &order {
            let w = hierarchy[m]
                .iter()
                .map(|(k, n)| if mapped.contains(k) { 0 } else { n * run_weight.get(k).copied().unwrap_or(1) })
                .sum();
            run_weight.insert(m.clone(), w);
        }
        Partition { mapped, run_weight }
    }

    /// The mapped modules that `m`'s own run keeps as black boxes: the first below it on every path down.
    fn boxes(&self, m: &str, hierarchy: &ModuleCells) -> Vec<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut stack = vec![m.to_string()];
        let mut seen = std::collections::BTreeSet::new();
        while let Some(x) = stack.pop() {
            for (k, _) in submodules(hierarchy, &x) {
                if self.mapped.contains(k) {
                    out.insert(k.clone());
                } else if seen.insert(k.clone()) {
                    stack.push(k.clone());
                }
            }
        }
        out.into_iter().collect()
    }
}

/// What one module's yosys run gives: its cells by type and its worst paths.
type ModuleRun = (Vec<(String, u64)>, Vec<timing::PathReport>);

/// Maps module `m` of the Verilog `v` on its own, the mapped modules `boxes` below it black boxes and the
/// rest flattened into it: its cells by type and its worst path (its netlist `<m>.net.json` left in
/// `workdir`).
fn map_module(unit: &str, v: &Path, m: &str, boxes: &[String], workdir: &Path) -> Result<ModuleRun, SynthError> {
    let boxes = if boxes.is_empty() { String::new() } else { format!("blackbox {}; ", boxes.join(" ")) };
    let n = workdir.join(format!("{m}.net.json"));
    // no I/O or clock buffers: the module's ports are not the chip's pins
    yosys(
        unit,
        &format!(
            "read_verilog {}; hierarchy -top {m}; {boxes}synth_xilinx -family xcup -flatten -noiopad -noclkbuf -top {m}; write_json {}",
            v.display(),
            n.display()
        ),
    )?;
    let netlist = read_json(unit, &n)?;
    let stat_err = |what: String| SynthError::Stat { unit: unit.into(), what };
    let entry = module_cells(&netlist).map_err(stat_err)?.remove(m).ok_or_else(|| stat_err(format!("{}: no module {m}", n.display())))?;
    let paths = timing::worst_paths(&netlist).map_err(stat_err)?;
    Ok((entry, paths.into_iter().filter(|p| p.module == m).collect()))
}

/// The report of a design from its modules' mapped cells by type and their worst paths.
fn design_report(
    unit: &str,
    top: &str,
    cfg: &OverlayConfig,
    modules: &ModuleCells,
    paths: Vec<timing::PathReport>,
) -> Result<DesignReport, String> {
    if !modules.contains_key(top) {
        return Err(format!("no module {top} among the mapped modules"));
    }
    // each module's total, with everything below it (the hierarchy has no cycles: yosys refuses them)
    fn total(m: &str, modules: &ModuleCells, memo: &mut BTreeMap<String, Resources>) -> Resources {
        if let Some(r) = memo.get(m) {
            return r.clone();
        }
        let cells = &modules[m];
        let mut r = Resources::of_cells(cells.iter().filter(|(k, _)| !modules.contains_key(k)).map(|(k, n)| (k.as_str(), *n)));
        for (k, n) in submodules(modules, m) {
            let sub = total(k, modules, memo);
            r.add(&sub, n);
        }
        memo.insert(m.to_string(), r.clone());
        r
    }
    fn below(m: &str, modules: &ModuleCells, acc: &mut std::collections::BTreeSet<String>) {
        if acc.insert(m.to_string()) {
            for (k, _) in submodules(modules, m) {
                below(k, modules, acc);
            }
        }
    }
    let mut memo = BTreeMap::new();
    let worst_in = |ms: &std::collections::BTreeSet<String>| paths.iter().find(|p| ms.contains(&p.module)).cloned();
    let top_cells = &modules[top];
    let own = Resources::of_cells(top_cells.iter().filter(|(k, _)| !modules.contains_key(k)).map(|(k, n)| (k.as_str(), *n)));
    let mut parts = vec![PartReport {
        module: format!("{top} (its own cells)"),
        instances: 1,
        resources: own,
        worst_path: paths.iter().find(|p| p.module == top).cloned(),
    }];
    let mut children: Vec<PartReport> = top_cells
        .iter()
        .filter(|(k, _)| modules.contains_key(k))
        .map(|(k, n)| {
            let mut r = Resources::default();
            r.add(&total(k, modules, &mut memo), *n);
            let mut ms = std::collections::BTreeSet::new();
            below(k, modules, &mut ms);
            PartReport { module: k.clone(), instances: *n, resources: r, worst_path: worst_in(&ms) }
        })
        .collect();
    children.sort_by(|a, b| b.resources.lut.cmp(&a.resources.lut).then_with(|| a.module.cmp(&b.module)));
    parts.extend(children);
    let total_r = total(top, modules, &mut memo);
    let mut used = std::collections::BTreeSet::new();
    below(top, modules, &mut used);
    Ok(DesignReport {
        config: cfg.name.clone(),
        unit: unit.into(),
        top: top.into(),
        method: "yosys 'synth_xilinx -family xcup' per unit, repeated module and large module (each flattened with the others below it as black boxes); totals = each mapped module's cells x its instances",
        utilization: total_r.utilization(&XCU280),
        total: total_r,
        device: XCU280,
        parts,
        core_clock_mhz: cfg.core_clock_mhz,
        budget_ns: 1e3 / f64::from(cfg.core_clock_mhz.max(1)),
        worst_paths: paths.into_iter().filter(|p| used.contains(&p.module)).take(12).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cell counts by type, as `module_cells` gives them.
    fn cells(c: &[(&str, u64)]) -> Vec<(String, u64)> {
        c.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    /// Which modules get a yosys of their own: the top, its units, repeated and large modules; a small
    /// module used once is flattened into its parent, and a run boxes the first mapped modules below it.
    #[test]
    fn the_partition_maps_units_repeated_and_large_modules_on_their_own() {
        // top: units `u` and `w`; u: a register module `r` once and `lane` twice; lane: `reg` once and 600
        // cells; w: `big` (a leaf of 1,500 cells) through `wrap`
        let h = BTreeMap::from([
            ("top".to_string(), cells(&[("u", 1), ("w", 1)])),
            ("u".to_string(), cells(&[("r", 1), ("lane", 2), ("$add", 3)])),
            ("r".to_string(), cells(&[("$dff", 1)])),
            ("lane".to_string(), cells(&[("reg", 1), ("$mul", 600)])),
            ("reg".to_string(), cells(&[("$dff", 1)])),
            ("w".to_string(), cells(&[("wrap", 1)])),
            ("wrap".to_string(), cells(&[("big", 1), ("$and", 2)])),
            ("big".to_string(), cells(&[("$xor", 1500)])),
        ]);
        let p = Partition::of(&h, "top");
        let mapped: Vec<&str> = p.mapped.iter().map(String::as_str).collect();
        // `reg`, used once inside `lane`, is flattened into it (though there are two of it in the design), as
        // `r` (used once, small) is into `u`; `wrap`'s subtree is large (`big` below it)
        assert_eq!(mapped, ["big", "lane", "top", "u", "w", "wrap"]);
        assert_eq!(p.boxes("u", &h), ["lane"]);
        assert!(p.boxes("lane", &h).is_empty());
        assert_eq!(p.boxes("top", &h), ["u", "w"]);
        assert_eq!(p.boxes("w", &h), ["wrap"]);
        assert_eq!((p.run_weight["u"], p.run_weight["lane"], p.run_weight["big"]), (4, 601, 1500));
    }

    #[test]
    fn a_design_counts_each_module_once_per_instance() {
        // top: 10 LUT6 of its own, 2 x `mid`; mid: 3 x `leaf` + a DSP; leaf: 5 LUT4, 7 FDRE, a RAMB36E2
        let modules = BTreeMap::from([
            ("top".to_string(), cells(&[("LUT6", 10), ("mid", 2)])),
            ("mid".to_string(), cells(&[("leaf", 3), ("DSP48E2", 1), ("CARRY4", 2)])),
            ("leaf".to_string(), cells(&[("LUT4", 5), ("FDRE", 7), ("RAMB36E2", 1), ("SRL16E", 1)])),
        ]);
        let slow = |m: &str, ns: f64| timing::PathReport { module: m.into(), delay_ns: ns, luts: 1, carries: 0, muxes: 0, from: "a".into(), to: "b".into() };
        let paths = vec![slow("leaf", 3.0), slow("top", 1.0), slow("elsewhere", 9.0)];
        let r = design_report("top", "top", &OverlayConfig::u280(), &modules, paths).unwrap();
        let leaf = Resources { lut: 6, ff: 7, dsp48e2: 0, bram: 2, uram: 0, carry: 0 };
        let mut mid = Resources { dsp48e2: 1, carry: 2, ..Default::default() };
        mid.add(&leaf, 3);
        let mut want = Resources { lut: 10, ..Default::default() };
        want.add(&mid, 2);
        assert_eq!(r.total, want);
        assert_eq!((r.total.lut, r.total.ff, r.total.bram), (46, 42, 12));
        assert_eq!(r.parts.len(), 2);
        assert_eq!((r.parts[1].module.as_str(), r.parts[1].instances, r.parts[1].resources.lut), ("mid", 2, 36));
        // a part's worst path is the worst of the modules below it; paths of modules not in the design are dropped
        assert_eq!(r.parts[1].worst_path.as_ref().map(|p| p.module.as_str()), Some("leaf"));
        assert_eq!(r.worst_paths.iter().map(|p| p.module.as_str()).collect::<Vec<_>>(), ["leaf", "top"]);
        assert!((r.utilization.lut - 46.0 / 1_303_680.0).abs() < 1e-12);
        assert!((r.budget_ns - 1e3 / 225.0).abs() < 1e-9);
    }
}

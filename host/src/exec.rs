//! Running a program file on a simulator (`opu exec`) and co-simulating a device against the functional
//! simulator, the golden model (`opu cosim`).
//!
//! A program file is a program container (`opu asm --container`, `opu compile`) or raw instructions (16
//! bytes each, what `opu asm` writes without `--container`), loaded at a base address. A trap comes back as
//! an error that names the file, the pc, the instruction at that pc, the code and `ERROR_INFO`.
//!
//! Co-simulation runs the program on both devices and compares what a program can leave behind: the error
//! registers, the scalar registers, predicates and CSRs (the debug window), the run counters and all of
//! device memory. On a difference it finds the first instruction after which the two differ by running
//! prefixes of the program: the functional simulator records the pcs it executed, and a copy of the program
//! with `end` written over the k-th of them stops right after the k before it (programs only jump forward,
//! so the instructions before it run exactly as in the full run). A binary search over k takes about
//! log2(instructions) runs of each device.

use crate::loader::{self, Counters};
use anyhow::{bail, Context, Result};
use opu_hw::container::{Container, Region, SectionKind, MAGIC};
use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::isa::{self, asm, Instr};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;
use opu_sim::func::FuncSim;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes of one instruction word.
const WORD: u64 = 16;

/// One entry point of a program file, ready to load onto a device.
pub struct ProgramFile {
    /// Where it came from (for messages).
    pub path: PathBuf,
    container: Option<Container>,
    /// The entry's code section name (raw files: "raw").
    pub entry: String,
    /// Device address of the entry's first instruction.
    pub code_addr: u64,
    /// The entry's encoded instructions.
    pub code: Vec<u8>,
}

impl ProgramFile {
    /// Reads a container (its code section `entry`, or `main`, or its only one) or raw instructions loaded
    /// at `base`.
    pub fn read(path: &Path, entry: Option<&str>, base: u64) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_bytes(path, bytes, entry, base)
    }

    pub fn from_bytes(path: &Path, bytes: Vec<u8>, entry: Option<&str>, base: u64) -> Result<Self> {
        let shown = path.display();
        if bytes.starts_with(&MAGIC) {
            let c = Container::from_bytes(&bytes).with_context(|| format!("{shown}"))?;
            let codes: Vec<&str> = c.sections.iter().filter(|s| s.kind == SectionKind::Code).map(|s| s.name.as_str()).collect();
            let name = match entry {
                Some(e) => e.to_string(),
                None if codes.contains(&"main") => "main".into(),
                None if codes.len() == 1 => codes[0].into(),
                None => bail!("{shown}: choose an entry with --entry (code sections: {})", codes.join(", ")),
            };
            let s = c
                .section(SectionKind::Code, &name)
                .with_context(|| format!("{shown}: no code section `{name}` (code sections: {})", codes.join(", ")))?;
            let (code_addr, code) = (s.device_addr, s.data.clone());
            Ok(ProgramFile { path: path.into(), container: Some(c), entry: name, code_addr, code })
        } else {
            anyhow::ensure!(entry.is_none(), "{shown}: --entry needs a program container; this file is raw instructions");
            anyhow::ensure!(
                !bytes.is_empty() && (bytes.len() as u64).is_multiple_of(WORD),
                "{shown}: {} bytes are not raw instructions (a whole, nonzero number of 16-byte words) nor a program container",
                bytes.len()
            );
            Ok(ProgramFile { path: path.into(), container: None, entry: "raw".into(), code_addr: base, code: bytes })
        }
    }

    /// Number of instruction words of the entry.
    pub fn instructions(&self) -> usize {
        self.code.len() / WORD as usize
    }

    /// The container's device-memory regions (empty for raw instructions).
    pub fn regions(&self) -> Vec<Region> {
        self.container.as_ref().and_then(|c| c.layout().ok().flatten()).map(|l| l.regions).unwrap_or_default()
    }

    /// Refuses a container built for another overlay than `config`.
    pub fn check_config(&self, config: &OverlayConfig) -> Result<()> {
        if let Some(c) = &self.container {
            if c.config_hash != config.hash() {
                bail!(
                    "{}: built for an overlay with config hash {:#018x}, not `{}` ({:#018x}); choose it with --config",
                    self.path.display(),
                    c.config_hash,
                    config.name,
                    config.hash()
                );
            }
        }
        Ok(())
    }

    /// The instruction at `pc` as assembly, or what is there instead.
    pub fn describe(&self, pc: u64) -> String {
        if pc >= self.instructions() as u64 {
            return format!("past the program's {} instructions", self.instructions());
        }
        let at = (pc * WORD) as usize;
        let word = u128::from_le_bytes(self.code[at..at + WORD as usize].try_into().expect("16 bytes"));
        match isa::decode(word) {
            Ok(i) => format!("`{}`", asm::format_instr(&i)),
            Err(e) => format!("word {word:#034x}: {e}"),
        }
    }

    /// Writes the program (every section of a container, or the raw words) into device memory.
    pub fn load(&self, dev: &mut dyn Device) -> Result<()> {
        match &self.container {
            Some(c) => loader::load(dev, c).with_context(|| format!("loading {}", self.path.display())),
            None => {
                dev.mem_write(self.code_addr, &self.code).with_context(|| format!("loading {} at {:#x}", self.path.display(), self.code_addr))
            }
        }
    }

    /// The error of a trap: file, pc, the instruction, code and info.
    pub fn trap_message(&self, t: &Trapped) -> String {
        format!(
            "{}: program trapped at pc {} ({}): {}, ERROR_INFO {:#x}",
            self.path.display(),
            t.pc,
            self.describe(u64::from(t.pc)),
            t.code,
            t.info
        )
    }
}

/// A trap as the error registers report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Trapped {
    #[serde(serialize_with = "code_name")]
    pub code: ErrorCode,
    pub pc: u32,
    pub info: u64,
}

fn code_name<S: serde::Serializer>(c: &ErrorCode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

/// How a run ended and what it counted.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunOutcome {
    /// `None` when the program reached `end`.
    pub trap: Option<Trapped>,
    pub counters: Counters,
}

/// What to run an entry with.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `ARG0..` (the rest 0).
    pub args: Vec<u32>,
    /// `WATCHDOG` (cycles without progress; 0 disables); `None` leaves the device's value.
    pub watchdog: Option<u32>,
    /// Wall time after which the host gives up on the device.
    pub timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { args: Vec::new(), watchdog: None, timeout: Duration::from_secs(600) }
    }
}

/// Runs the loaded entry: arguments, watchdog, doorbell, completion or trap, counters.
pub fn run_loaded(dev: &mut dyn Device, prog: &ProgramFile, opts: &RunOptions) -> Result<RunOutcome> {
    anyhow::ensure!(opts.args.len() <= regs::NUM_ARGS as usize, "at most {} arguments", regs::NUM_ARGS);
    if let Some(w) = opts.watchdog {
        dev.mmio_write(regs::WATCHDOG, w)?;
    }
    let mut args = opts.args.clone();
    args.resize(regs::NUM_ARGS as usize, 0);
    let trap = match loader::run(dev, prog.code_addr, prog.instructions(), &args, opts.timeout) {
        Ok(Completion { .. }) => None,
        Err(DeviceError::Trap { code, pc }) => Some(Trapped { code, pc, info: dev.mmio_read64(regs::ERROR_INFO_LO)? }),
        Err(e) => return Err(e).with_context(|| format!("running {}", prog.path.display())),
    };
    Ok(RunOutcome { trap, counters: Counters::read(dev)? })
}

/// Loads the program onto a fresh device, writes `end` over the instruction at `end_at` if given, and runs it.
fn run_fresh(dev: &mut dyn Device, prog: &ProgramFile, opts: &RunOptions, end_at: Option<u64>) -> Result<RunOutcome> {
    prog.load(dev)?;
    if let Some(pc) = end_at {
        let end = isa::encode_program(&[Instr::End {}]).expect("end encodes");
        dev.mem_write(prog.code_addr + pc * WORD, &end)?;
    }
    run_loaded(dev, prog, opts)
}

/// The first difference between the state two devices were left in, as text; `None` when they agree.
/// Compares the trap, the debug window (registers, predicates, CSRs), the counters when both completed
/// (`cycles` and the busy cycles excepted: the functional simulator's are estimates) and device memory outside `code` (the
/// program's own words, which the search rewrites).
pub fn first_state_difference(
    a: &mut dyn Device,
    ra: &RunOutcome,
    b: &mut dyn Device,
    rb: &RunOutcome,
    regions: &[Region],
    code: std::ops::Range<u64>,
) -> Result<Option<String>> {
    if ra.trap != rb.trap {
        let show = |t: &Option<Trapped>| match t {
            None => "completed".to_string(),
            Some(t) => format!("{} at pc {}, ERROR_INFO {:#x}", t.code, t.pc, t.info),
        };
        return Ok(Some(format!("the run ended differently: expected {}, got {}", show(&ra.trap), show(&rb.trap))));
    }
    for i in 0..isa::NUM_REGS as u32 {
        let (x, y) = (a.mmio_read(regs::DBG_R0 + 4 * i)?, b.mmio_read(regs::DBG_R0 + 4 * i)?);
        if x != y {
            return Ok(Some(format!("register r{i}: expected {x:#x}, got {y:#x}")));
        }
    }
    let (x, y) = (a.mmio_read(regs::DBG_PRED)?, b.mmio_read(regs::DBG_PRED)?);
    if x != y {
        return Ok(Some(format!("predicates: expected {x:#010b}, got {y:#010b}")));
    }
    for &c in isa::Csr::ALL.iter() {
        let off = regs::DBG_CSR0 + 4 * c as u32;
        let (x, y) = (a.mmio_read(off)?, b.mmio_read(off)?);
        if x != y {
            return Ok(Some(format!("CSR {c:?}: expected {x:#x}, got {y:#x}")));
        }
    }
    if ra.trap.is_none() {
        let (x, y) = (Counters { cycles: 0, busy: [0; 4], ..ra.counters }, Counters { cycles: 0, busy: [0; 4], ..rb.counters });
        if x != y {
            return Ok(Some(format!("counters: expected {x:?}, got {y:?}")));
        }
    }
    anyhow::ensure!(a.mem_size() == b.mem_size(), "the devices' memories differ in size: {} and {}", a.mem_size(), b.mem_size());
    const CHUNK: u64 = 1 << 20;
    let (mut ba, mut bb) = (vec![0u8; CHUNK as usize], vec![0u8; CHUNK as usize]);
    let mut at = 0;
    while at < a.mem_size() {
        let n = CHUNK.min(a.mem_size() - at) as usize;
        a.mem_read(at, &mut ba[..n])?;
        b.mem_read(at, &mut bb[..n])?;
        let (lo, hi) = (code.start.clamp(at, at + n as u64), code.end.clamp(at, at + n as u64));
        for i in (lo - at) as usize..(hi - at) as usize {
            (ba[i], bb[i]) = (0, 0);
        }
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            let addr = at + i as u64;
            let line = (i & !15)..((i & !15) + 16).min(n);
            let hex = |s: &[u8]| s.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ");
            let region = regions
                .iter()
                .find(|r| (r.addr..r.addr + r.bytes).contains(&addr))
                .map(|r| format!(" (region `{}` + {:#x})", r.name, addr - r.addr))
                .unwrap_or_default();
            return Ok(Some(format!(
                "device memory at {addr:#x}{region}: bytes from {:#x}: expected {}, got {}",
                at + line.start as u64,
                hex(&ba[line.clone()]),
                hex(&bb[line])
            )));
        }
        at += n as u64;
    }
    Ok(None)
}

/// Where a co-simulation first diverged.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Divergence {
    /// Instructions executed before the culprit (its index in execution order); `None` when the devices
    /// differ before any instruction runs.
    pub index: Option<usize>,
    pub pc: Option<u64>,
    /// The culprit as assembly.
    pub instruction: Option<String>,
    /// The first difference after it.
    pub difference: String,
}

/// The result of `cosim`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CosimReport {
    /// Instructions the functional simulator executed.
    pub executed: usize,
    pub expected: RunOutcome,
    pub actual: RunOutcome,
    /// `None`: the devices agree.
    pub divergence: Option<Divergence>,
    /// Device runs the search took (each side).
    pub runs: usize,
    /// Set when the only differences lie after a trap (the RTL's traps are not precise: docs/rtl.md).
    pub note: Option<String>,
}

/// Runs `prog` on a functional simulator from `golden` and on a device from `dut` (`dut(true)` for the full
/// run, `dut(false)` for the prefix runs of the search) and compares them.
pub fn cosim(
    prog: &ProgramFile,
    opts: &RunOptions,
    golden: &mut dyn FnMut() -> Result<FuncSim>,
    dut: &mut dyn FnMut(bool) -> Result<Box<dyn Device>>,
) -> Result<CosimReport> {
    let regions = prog.regions();
    let code = prog.code_addr..prog.code_addr + prog.code.len() as u64;
    let mut g = golden()?;
    g.trace_pcs(true);
    let expected = run_fresh(&mut g, prog, opts, None)?;
    let mut pcs: Vec<u64> = g.executed_pcs().to_vec();
    let executed = pcs.len();
    if let Some(t) = &expected.trap {
        // the trapping instruction is the last candidate: a prefix that stops before it never traps
        pcs.push(u64::from(t.pc));
    }
    let mut d = dut(true)?;
    let actual = run_fresh(d.as_mut(), prog, opts, None)?;
    let mut report = CosimReport { executed, expected: expected.clone(), actual: actual.clone(), divergence: None, runs: 1, note: None };
    let Some(full_diff) = first_state_difference(&mut g, &expected, d.as_mut(), &actual, &regions, code.clone())? else {
        return Ok(report);
    };
    drop(d);
    // differs(k): the state after the first k executed instructions differs. differs(pcs.len()) is the
    // full run's answer (true); find the smallest k with differs(k).
    let mut differs = |k: usize| -> Result<Option<String>> {
        report.runs += 1;
        let mut g = golden()?;
        let ra = run_fresh(&mut g, prog, opts, Some(pcs[k]))?;
        let mut d = dut(false)?;
        let rb = run_fresh(d.as_mut(), prog, opts, Some(pcs[k]))?;
        first_state_difference(&mut g, &ra, d.as_mut(), &rb, &regions, code.clone())
    };
    let (mut lo, mut hi) = (0usize, pcs.len());
    let mut diff_at_hi = full_diff;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match differs(mid)? {
            Some(d) => {
                hi = mid;
                diff_at_hi = d;
            }
            None => lo = mid + 1,
        }
    }
    let k = hi;
    if k == pcs.len() && expected.trap.is_some() && expected.trap == actual.trap {
        report.note = Some(format!(
            "every instruction before the trap agrees; after it: {diff_at_hi} (the RTL's units may have run instructions after the trapping one: docs/rtl.md, \"Traps\")"
        ));
        return Ok(report);
    }
    report.divergence = Some(match k {
        0 => Divergence { index: None, pc: None, instruction: None, difference: diff_at_hi },
        k => Divergence { index: Some(k - 1), pc: Some(pcs[k - 1]), instruction: Some(prog.describe(pcs[k - 1])), difference: diff_at_hi },
    });
    Ok(report)
}

impl CosimReport {
    /// The report as text: agreement with the figures, or the first difference.
    pub fn text(&self) -> String {
        let mut s = format!(
            "cosim: {} instructions executed; functional simulator {}, device {}",
            self.executed,
            ended(&self.expected),
            ended(&self.actual)
        );
        match &self.divergence {
            None => {
                s += "\nagree: error registers, registers, predicates, CSRs, counters and device memory (all of it but the program's own words)";
            }
            Some(d) => {
                s += &match (d.index, d.pc, &d.instruction) {
                    (Some(i), Some(pc), Some(instr)) => format!("\nfirst difference after instruction #{i} (pc {pc}, {instr})"),
                    _ => "\nfirst difference before any instruction ran (loading)".to_string(),
                };
                s += &format!(":\n  {}", d.difference);
            }
        }
        if let Some(n) = &self.note {
            s += &format!("\nnote: {n}");
        }
        s + &format!("\n({} run{} of each side)", self.runs, if self.runs == 1 { "" } else { "s" })
    }
}

fn ended(r: &RunOutcome) -> String {
    match &r.trap {
        None => format!("completed in {} cycles", r.counters.cycles),
        Some(t) => format!("trapped {} at pc {}", t.code.name(), t.pc),
    }
}

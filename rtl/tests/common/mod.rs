//! Shared helpers: external tools (verilator, yosys) with the REQUIRE_VERILATOR rule, scratch dirs. The
//! Verilator co-simulations run in opu-sim, on the models its build.rs makes.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// True if `tool --version` runs. If it does not and `REQUIRE_VERILATOR=1`, panics (CI must run the check);
/// otherwise prints that `what` was skipped.
pub fn have_tool(tool: &str, what: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("REQUIRE_VERILATOR").as_deref() == Ok("1") {
            panic!("{tool} not found on PATH and REQUIRE_VERILATOR=1: cannot run {what}");
        }
        eprintln!("SKIPPED {what}: {tool} not found on PATH (set REQUIRE_VERILATOR=1 to make this an error)");
    }
    ok
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("opu-rtl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs a command, panicking with its output if it fails; returns stdout + stderr.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{text}",
        out.status
    );
    text
}

/// `verilator --lint-only -Wall` on `verilog` (top module `top`), with the documented suppressions of
/// rust-hdl's style warnings (DECLFILENAME, UNUSEDSIGNAL, UNUSEDPARAM, WIDTH). Skipped (or a failure under
/// REQUIRE_VERILATOR=1) when verilator is missing.
pub fn lint(top: &str, verilog: &str) {
    lint_with(top, verilog, &[]);
}

/// [`lint`] with more Verilator flags (`-Wno-...` for a warning a unit is known to raise, said why there).
pub fn lint_with(top: &str, verilog: &str, extra: &[&str]) {
    if !have_tool("verilator", "verilator lint") {
        return;
    }
    let d = scratch(&format!("lint-{top}"));
    let f = d.join(format!("{top}.v"));
    std::fs::write(&f, verilog).unwrap();
    run_ok(
        Command::new("verilator")
            .args(["--lint-only", "-Wall", "-Wno-DECLFILENAME", "-Wno-UNUSEDSIGNAL", "-Wno-UNUSEDPARAM"])
            .args(["-Wno-WIDTH", "--top-module", top])
            .args(extra)
            .arg(&f),
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// xorshift64*: deterministic test inputs without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Byte address where the tests against the functional simulator put their programs.
pub const CODE: u64 = 0;

/// A functional simulator of the `sim` preset: the golden model the control blocks are compared with.
pub fn sim() -> opu_sim::FuncSim {
    opu_sim::FuncSim::new(&opu_hw::OverlayConfig::sim())
}

/// Writes bytes at scratchpad word `word` of the functional simulator.
pub fn spm_put(sim: &mut opu_sim::FuncSim, word: u32, bytes: &[u8]) {
    let at = 4 * word as usize;
    sim.scratchpad_mut()[at..at + bytes.len()].copy_from_slice(bytes);
}

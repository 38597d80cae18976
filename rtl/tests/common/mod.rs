//! Shared helpers: external tools (verilator, yosys) with the REQUIRE_VERILATOR rule, scratch dirs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
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
            .arg(&f),
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Co-simulation: builds `d/{top}.v` with the C++ testbench `d/tb.cpp` through `verilator --cc --exe --build`
/// (plus `extra` flags), runs it (with `VECTORS=d/vectors.txt` when that file exists) and returns its output.
pub fn verilator_cosim(d: &Path, top: &str, extra: &[&str]) -> String {
    let t = std::time::Instant::now();
    run_ok(
        Command::new("verilator")
            .current_dir(d)
            .args(["--cc", "--exe", "--build", "-j", "2"])
            .args(extra)
            .args(["-Wno-WIDTH", "--top-module", top])
            .arg(format!("{top}.v"))
            .arg("tb.cpp"),
    );
    let build = t.elapsed();
    let t = std::time::Instant::now();
    let mut run = Command::new(d.join("obj_dir").join(format!("V{top}")));
    let vectors = d.join("vectors.txt");
    if vectors.exists() {
        run.env("VECTORS", vectors);
    }
    let out = run_ok(&mut run);
    eprintln!("verilator cosim {top}: build {build:?}, run {:?}, {}", t.elapsed(), out.trim());
    out
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

//! Verilator models of RTL units wrapped in typed Rust, for a build script: the generator behind
//! opu-rtlsim's `build.rs`, in a crate of its own so that it has tests.
//!
//! For each unit (name, top module, Verilog): parse the top module's ports ([`ports`]), verilate it
//! (`verilator --cc --build`, giving the archive `V<top>__ALL.a`), generate an `extern "C"` shim over the
//! model class ([`shim`]) and compile it with `cc`, and generate a Rust wrapper struct ([`wrapper`]) into
//! `$OUT_DIR/rtl_models.rs`. The Verilator runtime (`verilated.cpp`, `verilated_threads.cpp`,
//! `verilated_vcd_c.cpp`) is compiled once for all units. Every step is skipped when its inputs are
//! unchanged since the last run in this OUT_DIR, so adding a unit rebuilds only that unit. A hand-written
//! fixture ([`fixture`]) is built like a unit so that the wrappers' plumbing is tested on every port class.
//!
//! Without a usable verilator (>= 5) on PATH the crate builds without models (`cfg(has_verilator)` unset,
//! a cargo warning), unless `REQUIRE_VERILATOR=1` (CI), which makes it an error. A verilator that is present
//! but fails on a unit always fails the build: that is an RTL bug, not a missing tool.
//!
//! `OPU_VERILATOR=off` builds without the models even when verilator is on PATH (as if it were missing):
//! .ci/run uses it to prove that the crate and its tests build and pass on a machine without Verilator.

mod fixture;
mod ports;
mod shim;
mod wrapper;

use std::path::{Path, PathBuf};
use std::process::Command;

use fixture::WIDTHS_FIXTURE_V;
use ports::{map_cxx_names, parse_ports, sanitize, Model};
use shim::gen_shim;
use wrapper::gen_rust;

/// One unit to verilate: its name (the wrapper struct is its CamelCase), its top module, its Verilog.
pub struct Unit {
    pub name: String,
    pub top: String,
    pub verilog: String,
}

/// Hand-written Verilog built exactly like a unit (but not listed in the wrappers' `UNITS`), so that
/// opu-rtlsim's tests/rtl_models.rs checks the port plumbing on every Verilator port class before a unit needs it:
/// (unit name, top module, Verilog).
const FIXTURES: &[(&str, &str, &str)] =
    &[("widths_fixture", "opu_widths_fixture", WIDTHS_FIXTURE_V)];


/// Verilator flags (besides -j, --top-module, --prefix, -Mdir). `-Wno-fatal`: rust-hdl's Verilog has style
/// warnings (WIDTH etc., see ARCHITECTURE.md); `-CFLAGS -fPIC`: the archive may end up in a shared library;
/// `OPT_FAST=-O2`: Verilator's makefile compiles the model with -Os by default; -O2 simulated 1.6x faster
/// (dsp_acc_w4x2 3.3e7 against 1.9e7 cycles/s, the `lane` unit 8.1e6 against 5.1e6). `--trace`: the models
/// can write VCD waveforms (`trace_vcd`); untraced they simulate as fast as without it (within the noise of
/// this machine, see rtlsim/README.md "Waveforms"), so one model per unit serves both.
const VERILATOR_ARGS: &[&str] = &[
    "--cc",
    "--build",
    "--trace",
    "-O3",
    "--x-assign",
    "fast",
    "--x-initial",
    "fast",
    "--noassert",
    "-Wno-fatal",
    "-Wno-WIDTH",
    "-CFLAGS",
    "-fPIC",
    "-MAKEFLAGS",
    "OPT_FAST=-O2",
];

/// The defines Verilator's makefile compiles the model with (`--trace`: VCD tracing on); the runtime and the
/// shims must agree.
const VM_DEFINES: &[(&str, &str)] = &[
    ("VM_COVERAGE", "0"),
    ("VM_SC", "0"),
    ("VM_TRACE", "1"),
    ("VM_TRACE_FST", "0"),
    ("VM_TRACE_VCD", "1"),
];

/// Flags of the runtime and shim compiles (besides the includes and [`VM_DEFINES`]): no warnings (Verilator's
/// headers have some); the model classes are cache-line aligned (C++17 aligned new).
const CC_FLAGS: &[&str] = &["-w", "-faligned-new"];
/// Optimization of the runtime and the shims, in every profile: the models run in tests and benchmarks.
const CC_OPT_LEVEL: u32 = 2;

/// Runtime sources Verilator 5 models link against (its `VM_GLOBAL_FAST` with `--trace`).
const RUNTIME_SOURCES: &[&str] = &[
    "verilated.cpp",
    "verilated_threads.cpp",
    "verilated_vcd_c.cpp",
];

/// The whole job of a build script: find Verilator (or explain why the crate builds without models),
/// verilate the units `units()` returns (called only when Verilator is there: emitting Verilog can be
/// slow) and the port fixture, compile the shims and the runtime, print the cargo link lines and the
/// `has_verilator` cfg, and write `$OUT_DIR/rtl_models.rs`. `package` names the crate in messages.
pub fn build(package: &str, units: impl FnOnce() -> Vec<Unit>) {
    println!("cargo::rustc-check-cfg=cfg(has_verilator)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=REQUIRE_VERILATOR");
    println!("cargo:rerun-if-env-changed=PATH");
    println!("cargo:rerun-if-env-changed=OPU_VERILATOR");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let require = std::env::var("REQUIRE_VERILATOR").as_deref() == Ok("1");
    let version = match verilator_version() {
        Ok(v) => v,
        Err(why) => {
            if require {
                // a plain message (no panic backtrace): this is the line CI users read
                eprintln!(
                    "error: {why} and REQUIRE_VERILATOR=1: install the Debian package verilator"
                );
                std::process::exit(1);
            }
            println!(
                "cargo:warning={package}: building without the Verilator RTL models ({why}; \
                 `apt-get install verilator` to get them, REQUIRE_VERILATOR=1 makes this an error)"
            );
            return;
        }
    };
    let root = verilator_root();
    let include = root.join("include");

    // The runtime compiles (one core) while the units verilate.
    let runtime_stamp = format!("{}{RUNTIME_SOURCES:?}\n", cc_fingerprint(&version));
    let models = std::thread::scope(|s| {
        let rt = s.spawn(|| build_runtime(&out, &include, &runtime_stamp));
        let mut models = Vec::new();
        for u in units() {
            models.push(build_model(&u.name, &u.top, &u.verilog, false, &out, &include, &version));
        }
        for &(unit, top, verilog) in FIXTURES {
            models.push(build_model(unit, top, verilog, true, &out, &include, &version));
        }
        rt.join().expect("runtime build panicked");
        models
    });

    // Link order matters for static archives: shim -> model -> runtime -> libstdc++.
    for m in &models {
        println!("cargo:rustc-link-search=native={}", m.dir.display());
        println!("cargo:rustc-link-lib=static=opu_shim_{}", m.unit);
        println!("cargo:rustc-link-lib=static={}", m.prefix);
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=opu_verilated_rt");
    println!("cargo:rustc-link-lib=stdc++");
    println!("cargo:rustc-cfg=has_verilator");

    std::fs::write(out.join("rtl_models.rs"), gen_rust(&models)).expect("write rtl_models.rs");
}

/// `Ok("5.006 ...")` if a verilator >= 5 runs, else why not.
fn verilator_version() -> Result<String, String> {
    if std::env::var("OPU_VERILATOR").as_deref() == Ok("off") {
        return Err("OPU_VERILATOR=off".to_string());
    }
    let o = Command::new("verilator")
        .arg("--version")
        .output()
        .map_err(|_| "verilator not found on PATH".to_string())?;
    let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !o.status.success() {
        return Err(format!("`verilator --version` failed ({})", o.status));
    }
    // "Verilator 5.006 2023-01-22 rev (Debian 5.006-3)"
    let major = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 5 => Ok(text),
        _ => Err(format!(
            "{text:?} found on PATH but opu-sim needs Verilator >= 5"
        )),
    }
}

fn verilator_root() -> PathBuf {
    let o = Command::new("verilator")
        .args(["--getenv", "VERILATOR_ROOT"])
        .output()
        .expect("verilator --getenv VERILATOR_ROOT");
    let root = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(
        root.join("include/verilated.cpp").exists(),
        "verilator --getenv VERILATOR_ROOT gave {root:?}, which has no include/verilated.cpp"
    );
    root
}

/// Whether `output` exists and was built from inputs described by `stamp` (what `stamp_path` holds,
/// written after each successful build step).
fn up_to_date(output: &Path, stamp_path: &Path, stamp: &str) -> bool {
    output.exists() && std::fs::read_to_string(stamp_path).is_ok_and(|s| s == stamp)
}

fn cc_build(include: &Path) -> cc::Build {
    let mut b = cc::Build::new();
    b.cpp(true)
        .opt_level(CC_OPT_LEVEL)
        .debug(false)
        .warnings(false)
        .cargo_metadata(false) // main() prints the link lines, in dependency order
        .include(include)
        .include(include.join("vltstd"));
    for f in CC_FLAGS {
        b.flag(f);
    }
    for &(d, v) in VM_DEFINES {
        b.define(d, v);
    }
    b
}

/// What the compiled runtime and shims depend on besides their sources (part of their stamps).
fn cc_fingerprint(version: &str) -> String {
    format!(
        "{version}
{CC_OPT_LEVEL} {CC_FLAGS:?} {VM_DEFINES:?}
"
    )
}

fn build_runtime(out: &Path, include: &Path, stamp: &str) {
    let stamp_path = out.join("opu_verilated_rt.stamp");
    if up_to_date(&out.join("libopu_verilated_rt.a"), &stamp_path, stamp) {
        return;
    }
    let mut b = cc_build(include);
    for f in RUNTIME_SOURCES {
        b.file(include.join(f));
    }
    b.out_dir(out).compile("opu_verilated_rt");
    std::fs::write(stamp_path, stamp).expect("write runtime stamp");
}

fn build_model(
    unit: &str,
    top: &str,
    verilog: &str,
    fixture: bool,
    out: &Path,
    include: &Path,
    version: &str,
) -> Model {
    let ports = parse_ports(verilog, top)
        .unwrap_or_else(|e| panic!("unit {unit}: parsing the ports of module {top}: {e}"));
    let prefix = format!("V{}", sanitize(top));
    let dir = out.join(unit);
    let vfile = out.join(format!("{top}.v"));
    let archive = dir.join(format!("lib{prefix}.a"));
    let stamp_path = dir.join("verilator.stamp");
    let stamp = format!("{version}\n{VERILATOR_ARGS:?}\n{verilog}");
    std::fs::write(&vfile, verilog).expect("write Verilog");

    if !up_to_date(&archive, &stamp_path, &stamp) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create model dir");
        let jobs = std::env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
        let o = Command::new("verilator")
            .current_dir(out)
            .args(VERILATOR_ARGS)
            .args([
                "-j",
                &jobs,
                "--top-module",
                top,
                "--prefix",
                &prefix,
                "-Mdir",
            ])
            .arg(&dir)
            .arg(&vfile)
            .output()
            .expect("run verilator");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::write(dir.join("verilator.log"), &log).expect("write verilator.log");
        let built = dir.join(format!("{prefix}__ALL.a"));
        if !o.status.success() || !built.exists() {
            let mut from = log.len().saturating_sub(6000);
            while !log.is_char_boundary(from) {
                from += 1;
            }
            let tail = &log[from..];
            panic!(
                "verilator failed on unit {unit} ({}; {} has the Verilog, {} the whole log):\n{tail}",
                o.status,
                vfile.display(),
                dir.join("verilator.log").display()
            );
        }
        // `rustc-link-lib=static=` wants `lib<name>.a`; Verilator 5.006 writes `<prefix>__ALL.a`.
        std::fs::copy(&built, &archive).expect("copy model archive");
        std::fs::write(&stamp_path, &stamp).expect("write stamp");
    }

    let mut m = Model {
        unit: unit.to_string(),
        top: top.to_string(),
        prefix,
        dir,
        ports,
        fixture,
    };
    map_cxx_names(&mut m).unwrap_or_else(|e| panic!("unit {unit}: {e}"));

    let shim = m.dir.join("shim.cpp");
    let text = gen_shim(&m);
    let shim_stamp_path = m.dir.join("shim.stamp");
    let shim_stamp = format!("{}{text}", cc_fingerprint(version));
    let lib = m.dir.join(format!("libopu_shim_{unit}.a"));
    // the stamp is written only after a successful compile
    if !up_to_date(&lib, &shim_stamp_path, &shim_stamp) {
        std::fs::write(&shim, text).expect("write shim.cpp");
        let mut b = cc_build(include);
        b.include(&m.dir)
            .file(&shim)
            .out_dir(&m.dir)
            .compile(&format!("opu_shim_{unit}"));
        std::fs::write(&shim_stamp_path, shim_stamp).expect("write shim stamp");
    }
    m
}

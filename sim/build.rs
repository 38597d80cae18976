//! Verilator models of opu-rtl units, linked into opu-sim and wrapped in typed Rust (`opu_sim::rtl`).
//!
//! For each unit of [`UNITS`]: emit its Verilog with `opu_rtl::emit_verilog`, parse the top module's ports,
//! verilate it (`verilator --cc --build`, giving the archive `V<top>__ALL.a`), generate an `extern "C"`
//! shim over the model class and compile it with `cc`, and generate a Rust wrapper struct into
//! `$OUT_DIR/rtl_models.rs`. The Verilator runtime (`verilated.cpp`, `verilated_threads.cpp`,
//! `verilated_vcd_c.cpp`) is compiled once for all units. Every step is skipped when its inputs are
//! unchanged since the last run in this OUT_DIR, so adding a unit rebuilds only that unit.
//!
//! Without a usable verilator (>= 5) on PATH the crate builds without models (`cfg(has_verilator)` unset,
//! a cargo warning), unless `REQUIRE_VERILATOR=1` (CI), which makes it an error. A verilator that is present
//! but fails on a unit always fails the build: that is an RTL bug, not a missing tool.
//!
//! `OPU_VERILATOR=off` builds without the models even when verilator is on PATH (as if it were missing):
//! .ci/run uses it to prove that the crate and its tests build and pass on a machine without Verilator.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The opu-rtl units (names in `opu_rtl::UNITS`) built into Verilator models.
///
/// To add a unit, add its name here; that is the only change needed. Its wrapper struct is the CamelCase
/// of the name (`dsp_acc_w4x2` -> `opu_sim::rtl::DspAccW4x2`), it joins `opu_sim::rtl::UNITS` and
/// `opu_sim::rtl::instantiate`, and so the `rtl_bench` example.
const UNITS: &[&str] = &["dsp_w4x2", "dsp_acc_w4x2", "dsp_w4x3", "align", "lane", "array", "router", "round", "fp32", "vector", "reduce", "top"];

/// Hand-written Verilog built exactly like a unit (but not listed in `opu_sim::rtl::UNITS`), so that
/// sim/tests/rtl_models.rs checks the port plumbing on every Verilator port class before a unit needs it:
/// (unit name, top module, Verilog).
const FIXTURES: &[(&str, &str, &str)] =
    &[("widths_fixture", "opu_widths_fixture", WIDTHS_FIXTURE_V)];

/// Verilator flags (besides -j, --top-module, --prefix, -Mdir). `-Wno-fatal`: rust-hdl's Verilog has style
/// warnings (WIDTH etc., see ARCHITECTURE.md); `-CFLAGS -fPIC`: the archive may end up in a shared library;
/// `OPT_FAST=-O2`: Verilator's makefile compiles the model with -Os by default; -O2 simulated 1.6x faster
/// (dsp_acc_w4x2 3.3e7 against 1.9e7 cycles/s, the `lane` unit 8.1e6 against 5.1e6). `--trace`: the models
/// can write VCD waveforms (`trace_vcd`); untraced they simulate as fast as without it (within the noise of
/// this machine, see sim/README.md "Waveforms"), so one model per unit serves both.
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

fn main() {
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
                "cargo:warning=opu-sim: building without the Verilator RTL models ({why}; \
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
        for &unit in UNITS {
            let top = opu_rtl::emit::top_name(unit).unwrap_or_else(|| {
                panic!("sim/build.rs UNITS: {unit:?} is not a unit of opu_rtl::UNITS")
            });
            models.push(build_model(
                unit,
                top,
                &emit(unit),
                false,
                &out,
                &include,
                &version,
            ));
        }
        for &(unit, top, verilog) in FIXTURES {
            models.push(build_model(
                unit, top, verilog, true, &out, &include, &version,
            ));
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

/// The unit's Verilog. On a thread with a large stack: big rust-hdl designs recurse deeply (and this build
/// script's dependencies are compiled without optimization).
fn emit(unit: &'static str) -> String {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || opu_rtl::emit_verilog(unit))
        .expect("spawn emit thread")
        .join()
        .expect("opu_rtl::emit_verilog panicked")
        .unwrap_or_else(|e| panic!("opu_rtl::emit_verilog({unit:?}): {e}"))
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    In,
    Out,
    InOut,
}

#[derive(Debug)]
struct Port {
    /// Verilog name.
    name: String,
    dir: Dir,
    bits: u32,
    signed: bool,
    /// Member name in the Verilator model class.
    cxx: String,
    /// Rust identifier and C symbol part (`$` and other non-identifier characters become `_`).
    ident: String,
}

impl Port {
    fn words(&self) -> u32 {
        self.bits.div_ceil(32)
    }
    fn readable_input(&self) -> bool {
        self.dir != Dir::Out
    }
}

struct Model {
    unit: String,
    top: String,
    /// Verilator `--prefix`: the model class and the archive's name (`lib<prefix>.a`).
    prefix: String,
    dir: PathBuf,
    ports: Vec<Port>,
    fixture: bool,
}

impl Model {
    fn clock(&self) -> Option<&Port> {
        self.ports
            .iter()
            .find(|p| p.name == "clock" && p.dir == Dir::In && p.bits == 1)
    }
    fn sym(&self, what: &str) -> String {
        format!("opu_{}_{what}", self.unit)
    }
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

/// Non-identifier characters to `_` (a Verilator prefix, a Rust identifier, a C symbol).
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Removes `// ...` and `/* ... */` comments (rust-hdl writes no strings containing them in port lists).
fn strip_comments(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Byte offset of the first whole-word `word` in `s` at or after `from`.
fn find_word(s: &str, word: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = s[at..].find(word) {
        let i = at + i;
        let before = s[..i].chars().next_back().is_none_or(|c| !is_ident_char(c));
        let after = s[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident_char(c));
        if before && after {
            return Some(i);
        }
        at = i + word.len();
    }
    None
}

/// The ports of module `top` (non-ANSI header, as rust-hdl writes it): the names from `module top(...);`
/// in order, each with direction, width and signedness from its `input`/`output`/`inout` declaration
/// before the module's `endmodule` (declarations inside functions and tasks are not ports).
fn parse_ports(verilog: &str, top: &str) -> Result<Vec<Port>, String> {
    let text = strip_comments(verilog);
    let mut at = 0;
    let header_open = loop {
        let i = find_word(&text, "module", at).ok_or_else(|| format!("no `module {top}(`"))?;
        let rest = text[i + 6..].trim_start();
        if let Some(after) = rest.strip_prefix(top) {
            let after_trim = after.trim_start();
            if after_trim.starts_with('(') {
                break text.len() - after_trim.len();
            }
        }
        at = i + 6;
    };
    let header_close = header_open
        + text[header_open..]
            .find(')')
            .ok_or("unterminated module header")?;
    let names: Vec<String> = text[header_open + 1..header_close]
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = names.iter().find(|n| !n.chars().all(is_ident_char)) {
        return Err(format!(
            "header item {bad:?}: only non-ANSI headers (`module {top}(a, b);`) are supported"
        ));
    }
    let body_end = find_word(&text, "endmodule", header_close).ok_or("no endmodule")?;
    let mut body = text[header_close + 1..body_end].to_string();
    for (open, close) in [("function", "endfunction"), ("task", "endtask")] {
        while let Some(s) = find_word(&body, open, 0) {
            let e = find_word(&body, close, s).ok_or_else(|| format!("{open} without {close}"))?;
            body.replace_range(s..e + close.len(), " ");
        }
    }

    let mut decl: Vec<Option<(Dir, u32, bool)>> = vec![None; names.len()];
    for stmt in body.split(';') {
        let stmt = stmt.trim();
        let mut words = stmt.split_whitespace();
        let dir = match words.next() {
            Some("input") => Dir::In,
            Some("output") => Dir::Out,
            Some("inout") => Dir::InOut,
            _ => continue,
        };
        let rest = &stmt[stmt.find(char::is_whitespace).unwrap_or(stmt.len())..];
        let (bits, rest) = match (rest.find('['), rest.find(']')) {
            (Some(o), Some(c)) if o < c => {
                let range = &rest[o + 1..c];
                let (msb, lsb) = range
                    .split_once(':')
                    .ok_or_else(|| format!("range [{range}] in `{stmt}`"))?;
                let num = |s: &str| {
                    s.trim()
                        .parse::<i64>()
                        .map_err(|_| format!("non-numeric range [{range}] in `{stmt}`"))
                };
                let bits = (num(msb)? - num(lsb)?).unsigned_abs() + 1;
                (bits, format!("{} {}", &rest[..o], &rest[c + 1..]))
            }
            _ => (1, rest.to_string()),
        };
        let mut signed = false;
        let mut idents = Vec::new();
        for tok in rest.split(|c: char| c == ',' || c.is_whitespace()) {
            match tok {
                "" | "wire" | "reg" | "logic" | "var" | "unsigned" => {}
                "signed" => signed = true,
                name => idents.push(name),
            }
        }
        for name in idents {
            // not in the header: a declaration this parser does not know to skip; ignore it
            if let Some(k) = names.iter().position(|n| n == name) {
                if decl[k].is_some() {
                    return Err(format!("port {name} declared twice"));
                }
                let bits = u32::try_from(bits).map_err(|_| format!("port {name}: {bits} bits"))?;
                decl[k] = Some((dir, bits, signed));
            }
        }
    }
    let mut ports = Vec::with_capacity(names.len());
    for (name, d) in names.iter().zip(decl) {
        let (dir, bits, signed) =
            d.ok_or_else(|| format!("port {name} has no input/output declaration"))?;
        let mut ident = sanitize(name).to_lowercase();
        if ident.starts_with(|c: char| c.is_ascii_digit()) {
            ident.insert_str(0, "p_");
        }
        ports.push(Port {
            name: name.clone(),
            dir,
            bits,
            signed,
            cxx: String::new(),
            ident,
        });
    }
    if ports.is_empty() {
        return Err("no ports".into());
    }
    Ok(ports)
}

/// Verilator's C++ name of a Verilog identifier: characters other than `[A-Za-z0-9_]` as `__0XX` (hex).
fn verilator_encode(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            s.push(c);
        } else {
            let _ = write!(s, "__0{:02x}", c as u32);
        }
    }
    s
}

/// Finds each port's member in the generated model header (`VL_IN8(&name,msb,lsb);`, `VL_OUTW(&name,msb,
/// lsb,words);`, ...) and checks its width against the Verilog. C++ keywords get a `__SYM__` prefix.
fn map_cxx_names(m: &mut Model) -> Result<(), String> {
    let header = m.dir.join(format!("{}.h", m.prefix));
    let h =
        std::fs::read_to_string(&header).map_err(|e| format!("read {}: {e}", header.display()))?;
    let mut members = Vec::new();
    for line in h.lines() {
        let l = line.trim();
        if !(l.starts_with("VL_IN") || l.starts_with("VL_OUT")) {
            continue;
        }
        let (Some(o), Some(c)) = (l.find('('), l.rfind(')')) else {
            continue;
        };
        let f: Vec<&str> = l[o + 1..c].split(',').map(str::trim).collect();
        if f.len() < 3 {
            continue;
        }
        let msb: u32 = f[1].parse().map_err(|_| format!("header line {l:?}"))?;
        let lsb: u32 = f[2].parse().map_err(|_| format!("header line {l:?}"))?;
        members.push((
            f[0].trim_start_matches('&').to_string(),
            msb.abs_diff(lsb) + 1,
        ));
    }
    for p in &mut m.ports {
        let enc = verilator_encode(&p.name);
        let cands = [enc.clone(), format!("__SYM__{enc}")];
        let (cxx, bits) = members
            .iter()
            .find(|(n, _)| cands.contains(n))
            .ok_or_else(|| {
                format!(
                    "port {} not found in {} (members: {:?})",
                    p.name,
                    header.display(),
                    members.iter().map(|m| &m.0).collect::<Vec<_>>()
                )
            })?;
        if *bits != p.bits {
            return Err(format!(
                "port {}: {} bits in the Verilog, {bits} in {}",
                p.name,
                p.bits,
                header.display()
            ));
        }
        p.cxx = cxx.clone();
    }
    Ok(())
}

/// VCD time resolution of the traces (`$timescale`), and the clock period and half period in it: 225 MHz
/// (the core clock of the presets) rounded to a period of a whole, even number of picoseconds (225.02 MHz).
/// Mirrored by `opu_sim::rtl::VCD_PERIOD_PS` (checked by sim/tests/rtl_trace.rs).
const VCD_TIMESCALE: &str = "1ps";
const VCD_PERIOD_PS: u64 = 4444;

fn gen_shim(m: &Model) -> String {
    let mut s = String::new();
    let p = &m.prefix;
    // A tick of a clocked model dumps both edges, half a period apart; of one without a clock, one period.
    let step = if m.clock().is_some() {
        VCD_PERIOD_PS / 2
    } else {
        VCD_PERIOD_PS
    };
    let _ = writeln!(
        s,
        r#"// Generated by opu-sim's build.rs: a C interface to the Verilator model {p} of unit `{unit}`.
// Ports travel as little-endian 32-bit words; inputs are masked to their width (Verilator requires
// the unused top bits to be zero).
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <fcntl.h>
#include <unistd.h>
#include "verilated.h"
#include "verilated_vcd_c.h"
#include "{p}.h"

namespace {{
// VCD times in picoseconds ("{timescale}"): the clock period, and the step of a tick's dumps.
constexpr uint64_t kPeriod = {period};
constexpr uint64_t kStep = {step};

// The VCD file, on a descriptor of our own so that every error is kept for the caller (errno of the first
// failed open, write or close): Verilator's own file says nothing when open fails and ends the process
// when a write fails. After an error the data is dropped (and the dumps are skipped).
class VcdFile final : public VerilatedVcdFile {{
public:
    int fd = -1;
    int err = 0;
    bool open(const std::string& name) override {{
        fd = ::open(name.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0) {{
            if (!err) err = errno ? errno : EIO;
            return false;
        }}
        return true;
    }}
    void close() override {{
        if (fd >= 0 && ::close(fd) != 0 && !err) err = errno ? errno : EIO;
        fd = -1;
    }}
    ssize_t write(const char* bufp, ssize_t len) override {{
        ssize_t done = 0;
        while (!err && done < len) {{
            const ssize_t got = ::write(fd, bufp + done, len - done);
            if (got > 0) {{
                done += got;
            }} else if (got < 0 && errno == EINTR) {{
                continue;
            }} else {{
                err = got < 0 && errno ? errno : EIO;
            }}
        }}
        return len;
    }}
}};

// An open trace. The file outlives the writer (members are destroyed in reverse order).
struct Trace {{
    VcdFile file;
    VerilatedVcdC vcd{{&file}};
    uint64_t cycle = 0;     // the model's cycles(): the tick in progress
    uint64_t last = 0;      // time of the last dump
    bool dumped = false;    // whether anything was dumped
    uint32_t clock = 0;     // the clock input at the last dump
}};

struct Handle {{
    VerilatedContext* ctx;  // one context per model: no state is shared between models (Send in Rust)
    {p}* m;
    Trace* tr;              // null unless tracing
}};
inline uint64_t mask64(int bits) {{ return bits >= 64 ? ~0ULL : ((1ULL << bits) - 1); }}
inline void put(CData& d, const uint32_t* w, int bits) {{ d = (CData)(w[0] & mask64(bits)); }}
inline void put(SData& d, const uint32_t* w, int bits) {{ d = (SData)(w[0] & mask64(bits)); }}
inline void put(IData& d, const uint32_t* w, int bits) {{ d = (IData)(w[0] & mask64(bits)); }}
inline void put(QData& d, const uint32_t* w, int bits) {{
    d = ((QData)w[0] | ((QData)w[1] << 32)) & mask64(bits);
}}
template <std::size_t N> inline void put(VlWide<N>& d, const uint32_t* w, int bits) {{
    for (std::size_t i = 0; i < N; ++i) d.m_storage[i] = w[i];
    if (bits % 32) d.m_storage[N - 1] &= (1U << (bits % 32)) - 1;
}}
inline void take(const CData& d, uint32_t* w) {{ w[0] = d; }}
inline void take(const SData& d, uint32_t* w) {{ w[0] = d; }}
inline void take(const IData& d, uint32_t* w) {{ w[0] = d; }}
inline void take(const QData& d, uint32_t* w) {{ w[0] = (uint32_t)d; w[1] = (uint32_t)(d >> 32); }}
template <std::size_t N> inline void take(const VlWide<N>& d, uint32_t* w) {{
    for (std::size_t i = 0; i < N; ++i) w[i] = d.m_storage[i];
}}
inline {p}* M(void* h) {{ return static_cast<Handle*>(h)->m; }}
inline const {p}* M(const void* h) {{ return static_cast<const Handle*>(h)->m; }}
// The runtime reaches "the current context" through a thread-local pointer (for $finish, $time, errors),
// set when a context is created: point it at this model's context before running the model, so a model
// moved to another thread, or freed, never leaves a stale one behind (a no-op in the steady state).
inline {p}* enter(void* p) {{
    Handle* h = static_cast<Handle*>(p);
    if (Verilated::threadContextp() != h->ctx) Verilated::threadContextp(h->ctx);
    return h->m;
}}
// The next multiple of `step` after the last dump.
inline uint64_t next_after(const Trace* t, uint64_t step) {{ return (t->last / step + 1) * step; }}
inline void dump_at(Handle* h, uint64_t t) {{
    Trace* tr = h->tr;
    if (!tr->file.err) tr->vcd.dump(t);
    tr->last = t;
    tr->dumped = true;
    tr->clock = {clock_now};
}}
// After an eval() of the caller's: at the trace's first time (the cycle's start) if nothing was dumped
// yet; else {eval_rule}.
void dump_eval(Handle* h) {{
    const Trace* tr = h->tr;
    if (!tr->dumped) return dump_at(h, tr->cycle * kPeriod);
    dump_at(h, {eval_time});
}}
void close_trace(Handle* h) {{
    h->tr->vcd.close();
}}
}}  // namespace

extern "C" {{
void* {new}(void) {{
    Handle* h = new Handle;
    h->ctx = new VerilatedContext;
    h->m = new {p}(h->ctx, "TOP");
    h->tr = nullptr;
    return h;
}}
void {free}(void* p) {{
    Handle* h = static_cast<Handle*>(p);
    enter(p)->final();
    if (h->tr) {{
        close_trace(h);
        delete h->tr;
    }}
    delete h->m;
    delete h->ctx;
    delete h;
    Verilated::threadContextp(Verilated::defaultContextp());  // not the deleted one
}}
void {eval}(void* h) {{
    enter(h)->eval();
    if (VL_UNLIKELY(static_cast<Handle*>(h)->tr)) dump_eval(static_cast<Handle*>(h));
}}
// Starts a VCD trace into `path` (the model's cycles() is `cycle`); `depth` 0: every scope, n: n levels
// of scopes below TOP. Returns 0, or the errno of the failed open.
int {trace_open}(void* p, const char* path, uint32_t depth, uint64_t cycle) {{
    Handle* h = static_cast<Handle*>(p);
    {p}* m = enter(p);
    if (h->tr) return EBUSY;  // the wrapper closes a trace before opening another
    h->ctx->traceEverOn(true);
    Trace* tr = new Trace;
    tr->vcd.set_time_unit("{timescale}");
    tr->vcd.set_time_resolution("{timescale}");
    m->trace(&tr->vcd, 99);
    if (depth) tr->vcd.dumpvars((int)std::min<uint32_t>(depth, 1u << 30), "TOP");
    tr->vcd.open(path);
    if (!tr->vcd.isOpen()) {{
        const int err = tr->file.err ? tr->file.err : EIO;
        delete tr;
        return err;
    }}
    tr->cycle = cycle;
    h->tr = tr;
    return 0;
}}
// Writes out what is buffered; returns the first error of the file so far (0 if none).
int {trace_flush}(void* p) {{
    Handle* h = static_cast<Handle*>(p);
    if (!h->tr) return 0;
    h->tr->vcd.flush();
    return h->tr->file.err;
}}
// Flushes and closes the trace; returns the first error of the file (0 if none).
int {trace_close}(void* p) {{
    Handle* h = static_cast<Handle*>(p);
    if (!h->tr) return 0;
    enter(p);
    close_trace(h);
    const int err = h->tr->file.err;
    delete h->tr;
    h->tr = nullptr;
    return err;
}}"#,
        unit = m.unit,
        new = m.sym("new"),
        free = m.sym("free"),
        eval = m.sym("eval"),
        trace_open = m.sym("trace_open"),
        trace_flush = m.sym("trace_flush"),
        trace_close = m.sym("trace_close"),
        timescale = VCD_TIMESCALE,
        period = VCD_PERIOD_PS,
        clock_now = m
            .clock()
            .map_or("0".to_string(), |c| format!("h->m->{}", c.cxx)),
        eval_rule = if m.clock().is_some() {
            "at the next half period if `clock` changed since the last dump (an edge the\n// \
             caller drove), else 1 ps after the last dump"
        } else {
            "at the next period (each evaluation a cycle)"
        },
        eval_time = if let Some(c) = m.clock() {
            format!(
                "h->m->{} != tr->clock ? next_after(tr, kStep) : tr->last + 1",
                c.cxx
            )
        } else {
            "next_after(tr, kStep)".to_string()
        },
    );
    if let Some(c) = m.clock() {
        let _ = writeln!(
            s,
            "// One cycle: clock low, eval, clock high, eval. Traced: the low phase at the cycle's start (cycle x \
             period;\n// later only if eval()s since the last tick already dumped there), the high phase half a \
             period after\n// the cycle's start (or 1 ps after the low phase).\n\
             void {tick}(void* p) {{\n    Handle* h = static_cast<Handle*>(p);\n    {p}* m = enter(p);\n    \
             m->{c} = 0;\n    m->eval();\n    if (VL_UNLIKELY(h->tr)) {{\n        Trace* tr = h->tr;\n        \
             const uint64_t at = tr->cycle * kPeriod;\n        \
             dump_at(h, tr->dumped ? std::max(at, tr->last + 1) : at);\n    }}\n    \
             m->{c} = 1;\n    m->eval();\n    if (VL_UNLIKELY(h->tr)) {{\n        Trace* tr = h->tr;\n        \
             dump_at(h, std::max(tr->cycle * kPeriod + kStep, tr->last + 1));\n        ++tr->cycle;\n    }}\n}}",
            tick = m.sym("tick"),
            c = c.cxx
        );
    } else {
        let _ = writeln!(
            s,
            "// One cycle of a model without a clock: eval; traced, at the next period.\n\
             void {tick}(void* p) {{\n    Handle* h = static_cast<Handle*>(p);\n    enter(p)->eval();\n    \
             if (VL_UNLIKELY(h->tr)) {{\n        Trace* tr = h->tr;\n        \
             dump_at(h, tr->dumped ? std::max(tr->cycle * kPeriod, next_after(tr, kStep)) : tr->cycle * kPeriod);\n        \
             ++tr->cycle;\n    }}\n}}",
            tick = m.sym("tick"),
        );
    }
    for port in &m.ports {
        if port.readable_input() {
            let _ = writeln!(
                s,
                "void {}(void* h, const uint32_t* w) {{ put(M(h)->{}, w, {}); }}",
                m.sym(&format!("set_{}", port.ident)),
                port.cxx,
                port.bits
            );
        }
        let _ = writeln!(
            s,
            "void {}(const void* h, uint32_t* w) {{ take(M(h)->{}, w); }}",
            m.sym(&format!("get_{}", port.ident)),
            port.cxx
        );
    }
    s.push_str("}  // extern \"C\"\n");
    s
}

/// `dsp_acc_w4x2` -> `DspAccW4x2`.
fn camel(unit: &str) -> String {
    unit.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            let first = c.next().unwrap().to_ascii_uppercase();
            std::iter::once(first).chain(c).collect::<String>()
        })
        .collect()
}

const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "dyn", "else", "enum", "extern", "false",
    "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "static", "struct", "trait", "true", "type", "unsafe", "use", "where",
    "while", "abstract", "become", "box", "do", "final", "macro", "override", "priv", "try",
    "typeof", "unsized", "virtual", "yield",
];

/// A method name usable in Rust: keywords as raw identifiers (`r#type`); those that cannot be raw
/// (`self`, `super`, `crate`, `_`) with a `port_` prefix.
fn method_name(ident: &str) -> String {
    if matches!(ident, "self" | "super" | "crate" | "_") {
        format!("port_{ident}")
    } else if RUST_KEYWORDS.contains(&ident) {
        format!("r#{ident}")
    } else {
        ident.to_string()
    }
}

fn mask_lit(bits: u32) -> String {
    if bits >= 64 {
        format!("{:#x}", u128::MAX >> (128 - bits))
    } else {
        format!("{:#x}", u64::MAX >> (64 - bits))
    }
}

fn gen_rust(models: &[Model]) -> String {
    let mut s = String::new();
    s.push_str(
        "// Generated by opu-sim's build.rs from the Verilog of the units it verilated; see sim/src/rtl.rs.\n\n",
    );
    let units: Vec<String> = models
        .iter()
        .filter(|m| !m.fixture)
        .map(|m| format!("{:?}", m.unit))
        .collect();
    let _ = writeln!(
        s,
        "/// The units with a Verilator model in this build (see [`instantiate`]).\npub const UNITS: &[&str] = &[{}];\n",
        units.join(", ")
    );
    let _ = writeln!(
        s,
        "const _: () = assert!(VCD_PERIOD_PS == {VCD_PERIOD_PS} && matches!(VCD_TIMESCALE.as_bytes(), b{VCD_TIMESCALE:?}), \
         \"sim/src/rtl.rs and sim/build.rs disagree on the VCD time\");\n"
    );
    s.push_str(
        "fn instantiate_generated(unit: &str) -> Option<Box<dyn RtlModel>> {\n    match unit {\n",
    );
    for m in models.iter().filter(|m| !m.fixture) {
        let _ = writeln!(
            s,
            "        {:?} => Some(Box::new({}::new())),",
            m.unit,
            camel(&m.unit)
        );
    }
    s.push_str("        _ => None,\n    }\n}\n");
    for m in models {
        gen_model(&mut s, m);
    }
    s
}

/// The tracing methods of every model (DUMPS, TRACE_OPEN, TRACE_FLUSH and TRACE_CLOSE replaced).
const TRACE_METHODS: &str = r#"
    /// Starts a VCD waveform of the model in `path` (created, or truncated): from now on DUMPS, at
    /// the times of [`crate::rtl`]'s "Waveforms" (picoseconds of a 225 MHz clock, cycle `n` from
    /// `n * VCD_PERIOD_PS`). `depth` 0 traces every signal of the design, `n` the scopes down to `n` levels below
    /// the top (1: the top's ports). A trace in progress is closed first. The file is complete after
    /// [`Self::trace_close`] or the model's drop (which cannot report errors).
    ///
    /// Errors (the file cannot be created, or closing the previous trace failed) name the path.
    pub fn trace_vcd(&mut self, path: &std::path::Path, depth: u32) -> std::io::Result<()> {
        self.trace_close()?;
        let c = vcd_c_path(path)?;
        // SAFETY: live handle; `c` is NUL-terminated and outlives the call.
        let err = unsafe { TRACE_OPEN(self.h.as_ptr(), c.as_ptr(), depth, self.cycles) };
        if err != 0 {
            return Err(vcd_error("creating", path, err));
        }
        self.trace = Some(path.to_path_buf());
        Ok(())
    }

    /// Writes out what the trace has buffered (a no-op when not tracing); the first write error of the
    /// trace, naming its path.
    pub fn trace_flush(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.trace else {
            return Ok(());
        };
        // SAFETY: live handle.
        let err = unsafe { TRACE_FLUSH(self.h.as_ptr()) };
        if err != 0 {
            return Err(vcd_error("writing", path, err));
        }
        Ok(())
    }

    /// Flushes and closes the trace (a no-op when not tracing); the first error writing or closing it,
    /// naming its path.
    pub fn trace_close(&mut self) -> std::io::Result<()> {
        let Some(path) = self.trace.take() else {
            return Ok(());
        };
        // SAFETY: live handle.
        let err = unsafe { TRACE_CLOSE(self.h.as_ptr()) };
        if err != 0 {
            return Err(vcd_error("writing", &path, err));
        }
        Ok(())
    }

    /// The file of the trace in progress, if any.
    pub fn trace_path(&self) -> Option<&std::path::Path> {
        self.trace.as_deref()
    }
"#;

fn gen_model(s: &mut String, m: &Model) {
    let name = camel(&m.unit);
    let ffi = format!("ffi_{}", m.unit);
    let clock = m.clock();

    // Every generated method name must be unique (a port `x_i64` next to a signed port `x` would clash).
    let mut methods: Vec<String> = [
        "new",
        "eval",
        "tick",
        "cycles",
        "trace_vcd",
        "trace_flush",
        "trace_close",
        "trace_path",
    ]
    .map(String::from)
    .to_vec();
    for p in &m.ports {
        let mut own = vec![p.ident.clone()];
        if p.readable_input() {
            own.push(format!("set_{}", p.ident));
        }
        if p.bits > 128 {
            own = own.iter().map(|n| format!("{n}_words")).collect();
            own.push(format!("{}_words_into", p.ident));
        } else if p.signed {
            own.push(format!(
                "{}_i{}",
                p.ident,
                if p.bits <= 64 { 64 } else { 128 }
            ));
        }
        for n in own {
            assert!(
                !methods.contains(&n),
                "unit {}: port {} gives a method `{n}` that clashes with another",
                m.unit,
                p.name
            );
            methods.push(n);
        }
    }

    // FFI declarations
    let _ = writeln!(
        s,
        "\nmod {ffi} {{\n    use std::ffi::c_void;\n    extern \"C\" {{"
    );
    let _ = writeln!(s, "        pub fn {}() -> *mut c_void;", m.sym("new"));
    let _ = writeln!(s, "        pub fn {}(h: *mut c_void);", m.sym("free"));
    let _ = writeln!(s, "        pub fn {}(h: *mut c_void);", m.sym("eval"));
    let _ = writeln!(s, "        pub fn {}(h: *mut c_void);", m.sym("tick"));
    let _ = writeln!(
        s,
        "        pub fn {}(h: *mut c_void, path: *const std::ffi::c_char, depth: u32, cycle: u64) -> i32;",
        m.sym("trace_open")
    );
    let _ = writeln!(
        s,
        "        pub fn {}(h: *mut c_void) -> i32;",
        m.sym("trace_flush")
    );
    let _ = writeln!(
        s,
        "        pub fn {}(h: *mut c_void) -> i32;",
        m.sym("trace_close")
    );
    for p in &m.ports {
        if p.readable_input() {
            let _ = writeln!(
                s,
                "        pub fn {}(h: *mut c_void, w: *const u32);",
                m.sym(&format!("set_{}", p.ident))
            );
        }
        let _ = writeln!(
            s,
            "        pub fn {}(h: *const c_void, w: *mut u32);",
            m.sym(&format!("get_{}", p.ident))
        );
    }
    s.push_str("    }\n}\n\n");

    // The struct and its documentation
    let mut table = String::new();
    for p in &m.ports {
        let dir = match p.dir {
            Dir::In => "in",
            Dir::Out => "out",
            Dir::InOut => "inout",
        };
        let _ = write!(
            table,
            "\n/// | `{}` | {dir} | {} | {} |",
            p.name,
            p.bits,
            if p.signed { "signed" } else { "" }
        );
    }
    let hidden = if m.fixture { "#[doc(hidden)]\n" } else { "" };
    let clock_doc = if clock.is_some() {
        "\n///\n/// Clocked: [`Self::tick`] is one rising edge (clock low, eval, clock high, eval); inputs set \
         before it are\n/// sampled by it, and registered outputs read after it show the edge. It starts with \
         clock low, so\n/// the first tick is a real edge; if you drive `clock` yourself, call [`Self::eval`] \
         once with the\n/// clock low before the first edge."
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "/// Verilator model of opu-rtl unit `{unit}` (top module `{top}`).{clock_doc}\n///\n/// | port | dir | \
         bits | |\n/// |---|---|---|---|{table}\n{hidden}pub struct {name} {{\n    h: std::ptr::NonNull<std::ffi::c_void>,\n    \
         cycles: u64,\n    trace: Option<std::path::PathBuf>,\n}}\n\n// SAFETY: the handle owns its model and that model's own VerilatedContext (nothing shared with \
         other\n// models); the shim re-points the runtime's per-thread context pointer on each call, and \
         `&mut self`\n// (the type is not Sync) serializes the calls.\n\
         unsafe impl Send for {name} {{}}\n",
        unit = m.unit,
        top = m.top,
    );

    let _ = writeln!(s, "impl {name} {{");
    let _ = writeln!(
        s,
        "    /// The opu-rtl unit.\n    pub const UNIT: &'static str = {:?};",
        m.unit
    );
    let _ = writeln!(
        s,
        "    /// The Verilog top module.\n    pub const TOP: &'static str = {:?};",
        m.top
    );
    s.push_str(
        "    /// The ports, in the order of the module header (the index [`RtlModel`] uses).\n",
    );
    s.push_str("    pub const PORTS: &'static [Port] = &[\n");
    for p in &m.ports {
        let _ = writeln!(
            s,
            "        Port {{ name: {:?}, dir: PortDir::{:?}, bits: {}, signed: {} }},",
            p.name, p.dir, p.bits, p.signed
        );
    }
    s.push_str("    ];\n");
    for p in &m.ports {
        let _ = writeln!(
            s,
            "    /// Width of port `{}`.\n    pub const {}_BITS: u32 = {};",
            p.name,
            p.ident.to_uppercase(),
            p.bits
        );
    }
    let _ = writeln!(
        s,
        "\n    /// A fresh model (registers as Verilator's `--x-initial fast` leaves them: set every state by the \
         inputs).\n    pub fn new() -> Self {{\n        // SAFETY: no preconditions; returns an owned handle or null.\n        \
         let h = unsafe {{ {ffi}::{}() }};\n        Self {{ h: std::ptr::NonNull::new(h).expect(\"Verilator model allocation\"), cycles: 0, trace: None }}\n    }}",
        m.sym("new")
    );
    let _ = writeln!(
        s,
        "\n    /// Evaluates the model (settles combinational logic; an edge on `clock` if it changed).\n    \
         pub fn eval(&mut self) {{\n        // SAFETY: the handle is live until drop.\n        unsafe {{ {ffi}::{}(self.h.as_ptr()) }}\n    }}",
        m.sym("eval")
    );
    if clock.is_some() {
        let _ = writeln!(
            s,
            "\n    /// One clock cycle: clock low, eval, clock high, eval.\n    pub fn tick(&mut self) {{\n        \
             // SAFETY: the handle is live until drop.\n        unsafe {{ {ffi}::{}(self.h.as_ptr()) }}\n        self.cycles += 1;\n    }}\n\n    \
             /// Cycles ticked since [`Self::new`].\n    pub fn cycles(&self) -> u64 {{\n        self.cycles\n    }}",
            m.sym("tick")
        );
    }
    let dumps = if clock.is_some() {
        "[`Self::tick`] dumps both clock edges\n    /// and [`Self::eval`] the values it settled"
    } else {
        "[`RtlModel::tick`] and [`Self::eval`] dump the\n    /// values they settled"
    };
    s.push_str(
        &TRACE_METHODS
            .replace("DUMPS", dumps)
            .replace("TRACE_OPEN", &format!("{ffi}::{}", m.sym("trace_open")))
            .replace("TRACE_FLUSH", &format!("{ffi}::{}", m.sym("trace_flush")))
            .replace("TRACE_CLOSE", &format!("{ffi}::{}", m.sym("trace_close"))),
    );
    for p in &m.ports {
        gen_accessors(s, m, p, &ffi);
    }
    s.push_str("}\n\n");

    let _ = writeln!(
        s,
        "impl Default for {name} {{\n    fn default() -> Self {{\n        Self::new()\n    }}\n}}\n\n\
         impl Drop for {name} {{\n    fn drop(&mut self) {{\n        // SAFETY: the handle is live and not used after this.\n        \
         unsafe {{ {ffi}::{}(self.h.as_ptr()) }}\n    }}\n}}\n\n\
         impl std::fmt::Debug for {name} {{\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        \
         f.debug_struct({name:?}).field(\"cycles\", &self.cycles).finish_non_exhaustive()\n    }}\n}}\n",
        m.sym("free")
    );

    // The dynamic interface
    let _ = writeln!(s, "impl RtlModel for {name} {{");
    s.push_str("    fn unit(&self) -> &'static str {\n        Self::UNIT\n    }\n");
    s.push_str("    fn ports(&self) -> &'static [Port] {\n        Self::PORTS\n    }\n");
    let _ = writeln!(
        s,
        "    fn eval(&mut self) {{\n        {name}::eval(self)\n    }}"
    );
    if clock.is_some() {
        let _ = writeln!(
            s,
            "    fn has_clock(&self) -> bool {{\n        true\n    }}"
        );
        let _ = writeln!(
            s,
            "    fn tick(&mut self) {{\n        {name}::tick(self)\n    }}"
        );
    } else {
        let _ = writeln!(
            s,
            "    fn has_clock(&self) -> bool {{\n        false\n    }}"
        );
        let _ = writeln!(
            s,
            "    fn tick(&mut self) {{\n        // SAFETY: the handle is live until drop.\n        unsafe {{ {ffi}::{}(self.h.as_ptr()) }}\n        \
             self.cycles += 1;\n    }}",
            m.sym("tick")
        );
    }
    s.push_str("    fn cycles(&self) -> u64 {\n        self.cycles\n    }\n");
    for (f, args, ret) in [
        (
            "trace_vcd",
            "path: &std::path::Path, depth: u32",
            "std::io::Result<()>",
        ),
        ("trace_flush", "", "std::io::Result<()>"),
        ("trace_close", "", "std::io::Result<()>"),
    ] {
        let call = if args.is_empty() { "" } else { ", path, depth" };
        let sep = if args.is_empty() { "" } else { ", " };
        let _ = writeln!(
            s,
            "    fn {f}(&mut self{sep}{args}) -> {ret} {{\n        {name}::{f}(self{call})\n    }}"
        );
    }
    let _ = writeln!(
        s,
        "    fn trace_path(&self) -> Option<&std::path::Path> {{\n        {name}::trace_path(self)\n    }}"
    );
    s.push_str("    fn set_port_words(&mut self, port: usize, words: &[u32]) {\n");
    s.push_str("        let p = port_for_write(Self::PORTS, port, words.len());\n        // SAFETY: live handle; `words` has the port's word count (checked above).\n        unsafe {\n            match port {\n");
    for (i, p) in m.ports.iter().enumerate() {
        if p.readable_input() {
            let _ = writeln!(
                s,
                "                {i} => {ffi}::{}(self.h.as_ptr(), words.as_ptr()),",
                m.sym(&format!("set_{}", p.ident))
            );
        }
    }
    s.push_str("                _ => unreachable!(\"{p:?}\"),\n            }\n        }\n    }\n");
    s.push_str("    fn port_words(&self, port: usize, out: &mut [u32]) {\n");
    s.push_str("        port_for_read(Self::PORTS, port, out.len());\n        // SAFETY: live handle; `out` has the port's word count (checked above).\n        unsafe {\n            match port {\n");
    for (i, p) in m.ports.iter().enumerate() {
        let _ = writeln!(
            s,
            "                {i} => {ffi}::{}(self.h.as_ptr(), out.as_mut_ptr()),",
            m.sym(&format!("get_{}", p.ident))
        );
    }
    s.push_str("                _ => unreachable!(),\n            }\n        }\n    }\n}\n");
}

fn gen_accessors(s: &mut String, m: &Model, p: &Port, ffi: &str) {
    let get = format!("{ffi}::{}", m.sym(&format!("get_{}", p.ident)));
    let set = format!("{ffi}::{}", m.sym(&format!("set_{}", p.ident)));
    let meth = method_name(&p.ident);
    let n = p.words();
    let what = format!(
        "`{}` ({}{}-bit)",
        p.name,
        if p.signed { "signed, " } else { "" },
        p.bits
    );
    let read = format!(
        "        let mut w = [0u32; {n}];\n        // SAFETY: live handle; `w` holds the port's words ({n}).\n        unsafe {{ {get}(self.h.as_ptr(), w.as_mut_ptr()) }}\n"
    );
    let write_words = format!(
        "        // SAFETY: live handle; `w` holds the port's words ({n}).\n        unsafe {{ {set}(self.h.as_ptr(), w.as_ptr()) }}\n"
    );
    if p.bits <= 128 {
        let (ty, ity) = if p.bits <= 64 {
            ("u64", "i64")
        } else {
            ("u128", "i128")
        };
        let full = if p.bits <= 64 { 64 } else { 128 };
        if p.readable_input() {
            let words: Vec<String> = (0..n)
                .map(|i| {
                    if i == 0 {
                        "v as u32".to_string()
                    } else {
                        format!("(v >> {}) as u32", 32 * i)
                    }
                })
                .collect();
            let _ = writeln!(
                s,
                "\n    /// Sets input {what} to the low bits of `v` (two's complement for signed values: `x as {ty}`).\n    \
                 pub fn set_{}(&mut self, v: {ty}) {{\n        let w = [{}];\n{write_words}    }}",
                p.ident,
                words.join(", ")
            );
        }
        let combine: Vec<String> = (0..n)
            .map(|i| {
                if i == 0 {
                    format!("{ty}::from(w[0])")
                } else {
                    format!("({ty}::from(w[{i}]) << {})", 32 * i)
                }
            })
            .collect();
        let value = match (p.bits == full, n) {
            (true, _) => combine.join(" | "),
            (false, 1) => format!("{} & {}", combine[0], mask_lit(p.bits)),
            (false, _) => format!("({}) & {}", combine.join(" | "), mask_lit(p.bits)),
        };
        let _ = writeln!(
            s,
            "\n    /// Port {what}, raw bits.\n    pub fn {meth}(&self) -> {ty} {{\n{read}        {value}\n    }}"
        );
        if p.signed {
            let ext = if p.bits == full {
                format!("self.{meth}() as {ity}")
            } else {
                let sh = full - p.bits;
                format!("((self.{meth}() << {sh}) as {ity}) >> {sh}")
            };
            let _ = writeln!(
                s,
                "\n    /// Port {what}, sign-extended.\n    pub fn {}_{ity}(&self) -> {ity} {{\n        {ext}\n    }}",
                p.ident
            );
        }
    } else {
        if p.readable_input() {
            let _ = writeln!(
                s,
                "\n    /// Sets input {what} from {n} little-endian 32-bit words (bits above the width are dropped).\n    \
                 pub fn set_{}_words(&mut self, w: &[u32]) {{\n        assert_eq!(w.len(), {n}, \"port {}: {} bits = {n} words\");\n{write_words}    }}",
                p.ident, p.name, p.bits
            );
        }
        let _ = writeln!(
            s,
            "\n    /// Port {what} as {n} little-endian 32-bit words.\n    pub fn {}_words(&self) -> Vec<u32> {{\n        \
             let mut w = vec![0u32; {n}];\n        self.{}_words_into(&mut w);\n        w\n    }}\n\n    \
             /// Port {what} into `w` ({n} words), without allocating.\n    pub fn {}_words_into(&self, w: &mut [u32]) {{\n        \
             assert_eq!(w.len(), {n}, \"port {}: {} bits = {n} words\");\n        // SAFETY: live handle; `w` holds the port's words ({n}).\n        \
             unsafe {{ {get}(self.h.as_ptr(), w.as_mut_ptr()) }}\n    }}",
            p.ident, p.ident, p.ident, p.name, p.bits
        );
    }
}

/// Every Verilator port class: 1, 8 (CData), 13 (SData), 32 (IData), 33 and 64 (QData), 96, 128, 256 and
/// 300 (VlWide), signed and not, registered and combinational; a C++ keyword (`float`), a Rust keyword
/// (`fn`, `loop`) and a `$` (`d$q`) as port names; and a child module after the top whose declarations
/// must not be taken for the top's (its `a8` is 100 bits wide).
const WIDTHS_FIXTURE_V: &str = r#"
module opu_widths_fixture(clock,fn,float,d$q,a8,q8,s13,n13,a32,q32,s33,n33,
    a64,q64,s96,n96,a128,q128,a256,q256,s300,n300,loop,count);

    // Module arguments
    input wire  clock;
    input wire  fn;
    input wire  [2:0] float;
    input wire  [4:0] d$q;
    input wire  [7:0] a8;
    output reg  [7:0] q8;
    input wire signed [12:0] s13;
    output reg signed [12:0] n13;
    input wire  [31:0] a32;
    output reg  [31:0] q32;
    input wire signed [32:0] s33;
    output reg signed [32:0] n33;
    input wire  [63:0] a64;
    output reg  [63:0] q64;
    input wire signed [95:0] s96;
    output reg signed [95:0] n96;
    input wire  [127:0] a128;
    output reg  [127:0] q128;
    input wire  [255:0] a256;
    output reg  [255:0] q256;
    input wire signed [299:0] s300;
    output reg signed [299:0] n300;
    output reg  [7:0] loop;
    output wire  [31:0] count;

    // Stub signals
    wire  [31:0] ctr$count;

    opu_widths_fixture$ctr ctr(
        .clock(clock),
        .a8({92'b0, a8}),
        .count(ctr$count)
    );
    assign count = ctr$count;

    always @(posedge clock) begin
        q8 <= a8 + 8'd1;
        q32 <= a32 ^ 32'hdeadbeef;
        n33 <= -s33;
        q64 <= a64 + 64'd1;
        n96 <= -s96;
        q128 <= a128 + 128'd1;
        q256 <= {a256[254:0], a256[255]};
        loop <= {fn, float, d$q[3:0]} ^ {3'b0, d$q};
    end
    always @(*) begin
        n13 = -s13;
        n300 = ~s300;
    end

endmodule // opu_widths_fixture


module opu_widths_fixture$ctr(clock,a8,count);
    input wire  clock;
    input wire [99:0] a8;
    output reg  [31:0] count;
    always @(posedge clock) begin
        count <= count + 32'd1 + {31'b0, a8[99]};
    end
endmodule // opu_widths_fixture$ctr
"#;

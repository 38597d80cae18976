//! Verilator models of opu-rtl units: the RTL itself, cycle by cycle, behind typed Rust wrappers.
//!
//! rtlsim/build.rs emits each unit's Verilog with `opu_rtl::emit_verilog`, and opu-verilate verilates it and generates one struct
//! per unit, named in CamelCase (`dsp_acc_w4x2` -> [`DspAccW4x2`](self)), with:
//!
//! - `new()` (also `Default`), `Drop`, `eval()`;
//! - if the unit has a `clock` input: `tick()`, one cycle (clock low, eval, clock high, eval), and
//!   `cycles()`, the ticks so far. `tick()` starts with the clock low, so its first call is a real edge; if
//!   you drive `clock` yourself, call `eval()` once with the clock low before the first edge;
//! - per port `p`: `const P_BITS: u32`; for up to 64 bits `set_p(u64)` (inputs) and `p() -> u64`, the raw
//!   bits masked to the width, plus `p_i64()` sign-extended for signed ports; for 65..=128 bits the same
//!   with `u128` / `i128`; wider ports as little-endian 32-bit words: `set_p_words(&[u32])`,
//!   `p_words() -> Vec<u32>`, `p_words_into(&mut [u32])`. Input bits above the width are dropped. Port
//!   names that are Rust keywords are raw identifiers (`r#type()`); `$` becomes `_`;
//! - `UNIT`, `TOP` and `PORTS` (see [`Port`]), and the object-safe [`RtlModel`] interface (any unit by
//!   name through [`instantiate`], ports by index: what benchmarks and generic drivers use).
//!
//! - `trace_vcd(path, depth)`, `trace_flush()`, `trace_close()`, `trace_path()`: waveforms, below.
//!
//! The structs are `Send` (each model has its own Verilator context), not `Sync`.
//!
//! They exist only when the crate was built with Verilator >= 5 on PATH ([`available`]; [`UNITS`] is empty
//! otherwise); `REQUIRE_VERILATOR=1` makes its absence a build error. The list of units is `UNITS` in
//! rtlsim/build.rs; see rtlsim/README.md "Verilator models".
//!
//! # Waveforms
//!
//! `m.trace_vcd(Path::new("lane.vcd"), 0)?` makes the model write a VCD file (GTKWave, Surfer, ...) from
//! then on; `depth` 0 traces every signal of the design, `n` the scopes down to `n` levels below the top
//! (1: only the top's ports, the scope `TOP`; 2: also the top module's own signals). Times are in
//! picoseconds (`$timescale 1ps`), with a clock period of [`VCD_PERIOD_PS`] = 4444 ps (the presets' 225 MHz
//! core clock):
//!
//! - tick `n` (`n` = `cycles()` before it) dumps the clock low at `n * 4444` (the inputs set for the cycle
//!   appear there, with the falling edge) and high at `n * 4444 + 2222` (the rising edge: registered
//!   outputs as the accessors read them after the tick);
//! - `eval()` dumps 1 ps after the previous dump (inputs changed between ticks, combinational outputs
//!   settling), or at the next half period if it changed `clock` (for callers who drive the clock
//!   themselves); the first dump of a trace started before any tick is at the current cycle's time;
//! - a model without a `clock` dumps each `eval()` and [`RtlModel::tick`] one period after the previous one.
//!
//! A trace started at cycle `n` begins at `n * 4444`. The file is complete after `trace_close()` (which
//! reports write and close errors) or when the model is dropped (errors lost); `trace_flush()` writes out
//! what is buffered. A path that cannot be created is an [`std::io::Error`] naming it. Each model writes
//! its own file through its own Verilator context, so models on different threads trace at the same time.
//! The models are built with `--trace` once for both uses: not tracing costs nothing measurable.

use std::ffi::CString;
use std::io;
use std::path::Path;

/// Clock period of the VCD traces, in their time unit (`$timescale 1ps`): 225 MHz (the core clock of the
/// `OverlayConfig` presets) rounded to a whole, even number of picoseconds. Tick `n` dumps the clock low
/// at `n * VCD_PERIOD_PS` and high half a period later; see "Waveforms" above.
pub const VCD_PERIOD_PS: u64 = 4444;

/// The VCD time unit (`$timescale`) of the traces.
pub const VCD_TIMESCALE: &str = "1ps";

/// Direction of a model port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortDir {
    In,
    Out,
    InOut,
}

/// One port of a model's top module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    /// The Verilog name.
    pub name: &'static str,
    pub dir: PortDir,
    pub bits: u32,
    pub signed: bool,
}

impl Port {
    /// 32-bit words the port travels in ([`RtlModel::set_port_words`], [`RtlModel::port_words`]).
    pub const fn words(&self) -> usize {
        self.bits.div_ceil(32) as usize
    }

    /// Whether the port can be driven.
    pub const fn is_input(&self) -> bool {
        !matches!(self.dir, PortDir::Out)
    }
}

/// Any model, ports by index into [`RtlModel::ports`] (the typed accessors of each struct are the faster,
/// checked-at-compile-time way).
pub trait RtlModel: Send {
    /// The opu-rtl unit name.
    fn unit(&self) -> &'static str;
    /// The ports, in module header order.
    fn ports(&self) -> &'static [Port];
    /// Evaluates the model.
    fn eval(&mut self);
    /// Whether the model has a `clock` input.
    fn has_clock(&self) -> bool;
    /// One clock cycle (clock low, eval, clock high, eval); one `eval` for a model without a clock. Counted in
    /// [`Self::cycles`].
    fn tick(&mut self);
    /// Ticks since the model was created.
    fn cycles(&self) -> u64;
    /// Drives input `port` with its [`Port::words`] little-endian words (bits above the width are dropped).
    /// Panics on an output or a wrong word count.
    fn set_port_words(&mut self, port: usize, words: &[u32]);
    /// Reads `port` into `out`, [`Port::words`] words. Panics on a wrong word count.
    fn port_words(&self, port: usize, out: &mut [u32]);
    /// Starts a VCD waveform of the model in `path` ("Waveforms" above; each struct's `trace_vcd`).
    fn trace_vcd(&mut self, path: &Path, depth: u32) -> io::Result<()>;
    /// Writes out what the trace has buffered (a no-op when not tracing).
    fn trace_flush(&mut self) -> io::Result<()>;
    /// Flushes and closes the trace (a no-op when not tracing).
    fn trace_close(&mut self) -> io::Result<()>;
    /// The file of the trace in progress, if any.
    fn trace_path(&self) -> Option<&Path>;
}

/// `path` for the shim's `open`. A path with a NUL byte is an error naming it.
#[allow(dead_code)] // used by the generated models only
fn vcd_c_path(path: &Path) -> io::Result<CString> {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("creating VCD trace {path:?}: not valid Unicode"),
            )
        })?
        .as_bytes()
        .to_vec();
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("creating VCD trace {path:?}: the path contains a NUL byte"),
        )
    })
}

/// The error `errno` of the shim while `what` (creating, writing) the trace at `path`, naming it.
#[allow(dead_code)] // used by the generated models only
fn vcd_error(what: &str, path: &Path, errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    io::Error::new(e.kind(), format!("{what} VCD trace {path:?}: {e}"))
}

/// The checks of [`RtlModel::set_port_words`].
#[allow(dead_code)] // used by the generated models only
fn port_for_write(ports: &'static [Port], port: usize, len: usize) -> &'static Port {
    let p = &ports[port];
    assert!(p.is_input(), "port {} is an output", p.name);
    assert_eq!(
        len,
        p.words(),
        "port {}: {} bits = {} words",
        p.name,
        p.bits,
        p.words()
    );
    p
}

/// The checks of [`RtlModel::port_words`].
#[allow(dead_code)] // used by the generated models only
fn port_for_read(ports: &'static [Port], port: usize, len: usize) {
    let p = &ports[port];
    assert_eq!(
        len,
        p.words(),
        "port {}: {} bits = {} words",
        p.name,
        p.bits,
        p.words()
    );
}

#[cfg(has_verilator)]
include!(concat!(env!("OUT_DIR"), "/rtl_models.rs"));

/// The units with a Verilator model in this build: none (built without Verilator).
#[cfg(not(has_verilator))]
pub const UNITS: &[&str] = &[];

/// Whether this build has the Verilator models.
pub fn available() -> bool {
    cfg!(has_verilator)
}

/// A fresh model of `unit`, if this build has one (see [`UNITS`]).
pub fn instantiate(unit: &str) -> Option<Box<dyn RtlModel>> {
    #[cfg(has_verilator)]
    {
        instantiate_generated(unit)
    }
    #[cfg(not(has_verilator))]
    {
        let _ = unit;
        None
    }
}

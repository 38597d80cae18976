//! Verilator models of opu-rtl units: the RTL itself, cycle by cycle, behind typed Rust wrappers.
//!
//! sim/build.rs emits each unit's Verilog with `opu_rtl::emit_verilog`, verilates it and generates one struct
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
//! The structs are `Send` (each model has its own Verilator context), not `Sync`.
//!
//! They exist only when the crate was built with Verilator >= 5 on PATH ([`available`]; [`UNITS`] is empty
//! otherwise); `REQUIRE_VERILATOR=1` makes its absence a build error. The list of units is `UNITS` in
//! sim/build.rs; see sim/README.md "Verilator models".

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

//! Verilator models of the opu-rtl units listed in [`UNITS`], wrapped in typed Rust (`opu_rtlsim::rtl`) by
//! opu-verilate (see its crate documentation and rtlsim/README.md).

/// The opu-rtl units (names in `opu_rtl::UNITS`) built into Verilator models.
///
/// To add a unit, add its name here; that is the only change needed. Its wrapper struct is the CamelCase
/// of the name (`dsp_acc_w4x2` -> `opu_rtlsim::rtl::DspAccW4x2`), it joins `opu_rtlsim::rtl::UNITS` and
/// `opu_rtlsim::rtl::instantiate`, and so the `rtl_bench` example.
const UNITS: &[&str] =
    &["dsp_w4x2", "dsp_acc_w4x2", "dsp_w4x3", "align", "lane", "array", "router", "round", "sqsum", "fp32", "vector", "reduce", "top"];

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

fn main() {
    opu_verilate::build("opu-rtlsim", || {
        UNITS
            .iter()
            .map(|&unit| opu_verilate::Unit {
                name: unit.to_string(),
                top: opu_rtl::emit::top_name(unit)
                    .unwrap_or_else(|| panic!("rtlsim/build.rs UNITS: {unit:?} is not a unit of opu_rtl::UNITS"))
                    .to_string(),
                verilog: emit(unit),
            })
            .collect()
    });
}

//! Verilator models of the opu-rtl units listed in [`UNITS`], wrapped in typed Rust (`opu_rtlsim::rtl`) by
//! opu-verilate (see its crate documentation and rtlsim/README.md).

/// The opu-rtl units (names in `opu_rtl::UNITS`) built into Verilator models.
///
/// To add a unit, add its name here; that is the only change needed. Its wrapper struct is the CamelCase
/// of the name (`dsp_acc_w4x2` -> `opu_rtlsim::rtl::DspAccW4x2`), it joins `opu_rtlsim::rtl::UNITS` and
/// `opu_rtlsim::rtl::instantiate`, and so the `rtl_bench` example.
const UNITS: &[&str] =
    &["dsp_w4x2", "dsp_acc_w4x2", "dsp_w4x3", "align", "lane", "array", "router", "round", "sqsum", "fp32", "vector", "reduce", "top"];

/// The overlay's top for other presets than `sim` (the unit `top`): (model name, `OverlayConfig` preset).
/// The model's wrapper is the CamelCase of its name, its top module `opu_<name>`; `opu_rtlsim::RtlSim`
/// finds it by the preset (`device.rs`, `TOPS`, which must list the same pairs).
const TOPS: &[(&str, &str)] = &[("top_sim_wide", "sim-wide")];

/// `f()` on a thread with a large stack: big rust-hdl designs recurse deeply.
fn with_big_stack(what: String, f: impl FnOnce() -> Result<String, opu_rtl::EmitError> + Send + 'static) -> String {
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(f)
        .expect("spawn emit thread")
        .join()
        .unwrap_or_else(|_| panic!("{what} panicked"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn main() {
    opu_verilate::build("opu-rtlsim", || {
        let units = UNITS.iter().map(|&unit| opu_verilate::Unit {
            name: unit.to_string(),
            top: opu_rtl::emit::top_name(unit)
                .unwrap_or_else(|| panic!("rtlsim/build.rs UNITS: {unit:?} is not a unit of opu_rtl::UNITS"))
                .to_string(),
            verilog: with_big_stack(format!("opu_rtl::emit_verilog({unit:?})"), move || opu_rtl::emit_verilog(unit)),
        });
        let tops = TOPS.iter().map(|&(name, preset)| {
            let config = opu_rtl::hw::OverlayConfig::preset(preset)
                .unwrap_or_else(|e| panic!("rtlsim/build.rs TOPS: {e}"));
            let top = format!("opu_{name}");
            let module = top.clone();
            opu_verilate::Unit {
                name: name.to_string(),
                top,
                verilog: with_big_stack(format!("the top of `{preset}`"), move || {
                    opu_rtl::emit::top_verilog_named(&config, &module)
                }),
            }
        });
        units.chain(tops).collect()
    });
}

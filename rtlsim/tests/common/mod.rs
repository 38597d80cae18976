//! Shared helpers of the Verilator tests.

/// Whether opu-rtlsim was built with its Verilator models; if not, an error under `REQUIRE_VERILATOR=1`
/// (CI must run the co-simulation), else a SKIPPED line for `what`.
pub fn models_or_skip(what: &str) -> bool {
    if opu_rtlsim::rtl::available() {
        return true;
    }
    if std::env::var("REQUIRE_VERILATOR").as_deref() == Ok("1") {
        panic!(
            "{what}: opu-rtlsim was built without the Verilator models (no verilator on PATH at build time) \
             and REQUIRE_VERILATOR=1"
        );
    }
    eprintln!("SKIPPED {what}: opu-rtlsim was built without the Verilator models (no verilator on PATH)");
    false
}

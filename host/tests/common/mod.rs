//! Helpers shared by the host's test binaries that run the RTL.

/// Whether this build has the Verilator models; without them an error under `REQUIRE_VERILATOR=1` (CI), else
/// a SKIPPED line.
pub fn models_or_skip(what: &str) -> bool {
    if opu_rtlsim::rtl::available() {
        return true;
    }
    assert_ne!(std::env::var("REQUIRE_VERILATOR").as_deref(), Ok("1"), "{what}: no Verilator models and REQUIRE_VERILATOR=1");
    eprintln!("SKIPPED {what}: opu-rtlsim was built without the Verilator models (no verilator on PATH)");
    false
}

//! Helpers shared by the host's test binaries: the RTL's models, and SmolLM2 from the model cache.

/// Whether this build has the Verilator models; without them an error under `REQUIRE_VERILATOR=1` (CI), else
/// a SKIPPED line. (Not every test binary that shares this module runs the RTL.)
#[allow(dead_code)]
pub fn models_or_skip(what: &str) -> bool {
    if opu_rtlsim::rtl::available() {
        return true;
    }
    assert_ne!(std::env::var("REQUIRE_VERILATOR").as_deref(), Ok("1"), "{what}: no Verilator models and REQUIRE_VERILATOR=1");
    eprintln!("SKIPPED {what}: opu-rtlsim was built without the Verilator models (no verilator on PATH)");
    false
}

/// SmolLM2-135M-Instruct (Q4_1 GGUF) from the model cache, fetched on first use. (Not every test binary that
/// shares this module runs the model.)
#[allow(dead_code)]
pub fn smollm2() -> std::path::PathBuf {
    opu_host::cache::fetch(opu_host::cache::known("smollm2").unwrap(), true).expect("fetch SmolLM2 into the model cache")
}

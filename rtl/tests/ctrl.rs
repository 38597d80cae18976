//! The control blocks (`opu_rtl::ctrl`) and the DMA unit (`opu_rtl::dma`): their Verilog lints clean for both
//! presets. Their behaviour is
//! checked in rust-hdl's simulator against the functional simulator in opu-sim (tests/rtl_ctrl.rs,
//! tests/rtl_dma.rs).

mod common;

use common::lint;
use opu_hw::OverlayConfig;
use opu_rtl::emit::{emit_verilog_for, top_name};

#[test]
fn core_register_file_and_dma_verilog_lints_clean() {
    for config in [OverlayConfig::sim(), OverlayConfig::u280()] {
        for unit in ["core", "mmio", "dma"] {
            let v = emit_verilog_for(unit, &config).unwrap_or_else(|e| panic!("{unit}: {e}"));
            assert!(v.contains(&format!("module {}", top_name(unit).unwrap())));
            lint(top_name(unit).unwrap(), &v);
        }
    }
}

#[test]
fn top_verilog_lints_clean() {
    // the sim preset (the depth of the scratchpad banks comes from the config)
    let v = emit_verilog_for("top", &OverlayConfig::sim()).unwrap();
    // rust-hdl emits a parent's logic as one `always @(*)` block, so Verilator sees the core <-> top <-> DMA
    // wiring as a loop between blocks (UNOPTFLAT) even where no signal depends on itself: that warning alone
    // is allowed for the top.
    common::lint_with(top_name("top").unwrap(), &v, &["-Wno-UNOPTFLAT"]);
}

#[test]
fn matrix_unit_verilog_lints_clean_for_both_presets() {
    for config in [OverlayConfig::sim(), OverlayConfig::u280()] {
        let v = emit_verilog_for("matrix", &config).unwrap_or_else(|e| panic!("matrix ({}): {e}", config.name));
        assert!(v.contains("module opu_matrix(") && v.contains("module opu_matrix_dp("));
        // one weight feed per lane
        assert_eq!(v.matches("opu_wfeed feed").count(), config.pe_lanes as usize, "{}", config.name);
        // the sequencer reads the datapath's readout mux in its own logic block (see the top's lint)
        common::lint_with(top_name("matrix").unwrap(), &v, &["-Wno-UNOPTFLAT"]);
    }
}

#[test]
fn vector_unit_verilog_lints_clean() {
    let v = emit_verilog_for("vector_unit", &OverlayConfig::sim()).unwrap();
    assert!(v.contains("module opu_vector_unit(") && v.contains("module opu_vector_dp(") && v.contains("module opu_vector("));
    // eight lanes, one scratchpad line of FP32 values per cycle
    assert!(v.contains(&format!("g < {}", opu_rtl::vecunit::VEC_LANES)) && opu_rtl::vecunit::VEC_LANES == 8);
    common::lint_with(top_name("vector_unit").unwrap(), &v, &["-Wno-UNOPTFLAT"]);
}

#[test]
fn attention_unit_verilog_lints_clean() {
    let v = emit_verilog_for("attention", &OverlayConfig::sim()).unwrap();
    assert!(v.contains("module opu_attention("));
    common::lint_with(top_name("attention").unwrap(), &v, &[]);
}

#[test]
fn cnn_unit_verilog_lints_clean_for_both_presets() {
    for cfg in [OverlayConfig::sim(), OverlayConfig::u280()] {
        let v = emit_verilog_for("cnn", &cfg).unwrap();
        assert!(v.contains("module opu_cnn(") && v.contains("module opu_cnn_dp("));
        assert_eq!(v.matches("reg [47:0] acc").count(), cfg.pe_lanes as usize, "{}", cfg.name);
        // the sequencer reads the datapath's output mux in its own logic block (see the top's lint)
        common::lint_with(top_name("cnn").unwrap(), &v, &["-Wno-UNOPTFLAT"]);
    }
}

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

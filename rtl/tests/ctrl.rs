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

//! Across crates: the contract as the runtime will use it. A config saved to TOML and loaded back gives the
//! same hash, a program assembled from the sample text and containerized for it passes its checks, and the
//! same container is refused by every other preset.

use opu_hw::{isa, Container, ContainerError, OverlayConfig};

#[test]
fn a_program_runs_only_on_the_overlay_it_was_built_for() {
    let dir = std::env::temp_dir().join(format!("opu-contract-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("my-overlay.toml");
    let mut cfg = OverlayConfig::sim();
    cfg.name = "my-overlay".into();
    cfg.pe_lanes = 16;
    cfg.save(&cfg_path).unwrap();
    let loaded = OverlayConfig::load(&cfg_path).unwrap();
    assert_eq!(loaded.hash(), cfg.hash());
    assert_ne!(loaded.hash(), OverlayConfig::sim().hash());

    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample.s")).unwrap();
    let program = isa::assemble(&text).unwrap();
    let mut c = Container::new(&loaded);
    c.add_code("decode", 0, &program).unwrap();
    let path = dir.join("sample.opu");
    c.write(&path).unwrap();
    let back = Container::read(&path).unwrap();
    back.check_config(&loaded).unwrap();
    assert_eq!(back.code("decode").unwrap().unwrap(), program);
    for preset in OverlayConfig::PRESETS {
        let other = OverlayConfig::preset(preset).unwrap();
        assert!(matches!(back.check_config(&other), Err(ContainerError::ConfigMismatch { .. })), "{preset}");
    }

    // A truncated file names itself in the error.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
    let e = Container::read(&path).unwrap_err().to_string();
    assert!(e.contains("sample.opu") && e.contains("truncated"), "{e}");
}

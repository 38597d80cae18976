//! Card images without the vendor tools: `opu rtl project` for the u280 (its Verilog linted by Verilator
//! against port-for-port stubs of the vendor IP, its build script run under tclsh with Vivado's commands
//! recorded, its sidecar read back), and `opu flash` (the exact xrt-smi and openFPGALoader commands of
//! --dry-run, a truncated bitstream and a sidecar that does not match refused, an emulated card
//! programmed and checked).

use opu_hw::image::Sidecar;
use opu_hw::OverlayConfig;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BDF: &str = opu_driver::emulate::DEFAULT_BDF;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("opu-card-image-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opu(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_opu")).args(args).env("RAYON_NUM_THREADS", "1").env_remove("OPU_SYSFS_ROOT").output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Whether `tool` is on PATH; under CI (`REQUIRE_VERILATOR=1`) it must be.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg(if tool == "tclsh" { "/dev/null" } else { "--version" }).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        assert_ne!(std::env::var("REQUIRE_VERILATOR").as_deref(), Ok("1"), "{tool} is missing and REQUIRE_VERILATOR=1");
        eprintln!("SKIPPED the {tool} check: no {tool} on PATH");
    }
    ok
}

/// A Xilinx .bit of design `design`: the header and `data` bytes of configuration data (dummy words, the
/// sync word, then zeros), of which the file keeps `keep`.
fn bit_file(design: &str, data: usize, keep: usize) -> Vec<u8> {
    let mut b = vec![0x00, 0x09, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x00, 0x00, 0x01];
    for (key, text) in [(b'a', design), (b'b', "xcu280-fsvh2892-2L-e"), (b'c', "2026/12/07"), (b'd', "12:00:00")] {
        let t = format!("{text}\0");
        b.push(key);
        b.extend((t.len() as u16).to_be_bytes());
        b.extend(t.as_bytes());
    }
    b.push(b'e');
    b.extend((data as u32).to_be_bytes());
    let mut payload = vec![0xFF; 16];
    payload.extend([0x00, 0x00, 0x00, 0xBB, 0x11, 0x22, 0x00, 0x44, 0xFF, 0xFF, 0xFF, 0xFF, 0xAA, 0x99, 0x55, 0x66]);
    payload.resize(data, 0);
    b.extend(&payload[..keep]);
    b
}

/// An .xclbin of `len` bytes (its header says so).
fn xclbin_file(len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(400)];
    b[..8].copy_from_slice(b"xclbin2\0");
    b[304..312].copy_from_slice(&(len as u64).to_le_bytes());
    b.truncate(len);
    b
}

#[test]
fn the_u280_card_image_project_lints_parses_and_round_trips() {
    let dir = scratch("project");
    let out = opu(&["rtl", "project", "--config", "u280", "--board", "alveo-u280", "-o", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // the sidecar says what the image holds
    let sc = Sidecar::read(&dir.join("opu-overlay.json")).unwrap();
    assert_eq!(sc.config, OverlayConfig::u280());
    assert_eq!(sc.config_hash, format!("{:#018x}", OverlayConfig::u280().hash()));
    assert_eq!((sc.board.as_str(), sc.part.as_str(), sc.top.as_str()), ("alveo-u280", "xcu280-fsvh2892-2L-e", "opu_card"));
    assert_eq!((sc.pci_vendor.as_str(), sc.pci_device.as_str(), sc.isa_version.as_str()), ("0x10ee", "0x4f50", "2.0"));
    assert!(sc.build_date.len() == 20 && sc.build_date.ends_with('Z') && sc.build_date.starts_with("20"), "{}", sc.build_date);
    assert_eq!(Sidecar::parse(&sc.to_json(), Path::new("x")).unwrap(), sc, "round trip");
    // the overlay without Verilator's DSP48E2 stand-in (Vivado has the primitive); the top's ports are the card's
    let top = std::fs::read_to_string(dir.join("hdl/opu_top.v")).unwrap();
    assert!(top.contains("module opu_top(") && !top.contains("module DSP48E2"));
    let card = std::fs::read_to_string(dir.join("hdl/opu_card.v")).unwrap();
    assert!(card.contains("opu_mem_fabric #(.CHANNELS(32), .CH_BITS(5), .RUN_LOG2(6), .ADDR_BITS(33)"), "{}", &card[..400]);
    // another overlay does not fit the board
    let out = opu(&["rtl", "project", "--config", "sim", "-o", s(&dir.join("sim"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("does not fit board alveo-u280") && err.contains("mem_channels is 2"), "{err}");
    // the build script under tclsh, Vivado's commands recorded
    if have("tclsh") {
        let out = Command::new("tclsh").arg(dir.join("lint/check_build.tcl")).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}\n{}", text, String::from_utf8_lossy(&out.stderr));
        let count = |cmd: &str| text.lines().filter(|l| l.starts_with(&format!("{cmd} "))).count();
        assert_eq!(count("create_project"), 1, "{text}");
        assert!(text.lines().any(|l| l.starts_with("create_bd_cell -type ip -vlnv xilinx.com:ip:xdma")), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains("xilinx.com:ip:smartconnect") && l.contains("sc_ch")).count(), 32);
        assert!(text.contains("CONFIG.pf0_device_id 4F50") && text.contains("CONFIG.axilite_master_size 64"), "{text}");
        assert_eq!(count("create_bd_intf_port"), 2 + 3 + 32, "pcie, sysclk, BAR 0, the host's DMA both ways, 32 channels");
        assert!(text.contains("launch_runs impl_1 -to_step write_bitstream"));
        // a script Tcl cannot run is caught
        let bad = dir.join("bad.tcl");
        std::fs::write(&bad, "create_project x\nset a [expr {1 +}]\n").unwrap();
        let out = Command::new("tclsh").arg(dir.join("lint/check_build.tcl")).arg(&bad).output().unwrap();
        assert!(!out.status.success());
    }
    // the Verilog under Verilator: opu_card, our AXI glue and the overlay against the vendor stubs
    if have("verilator") {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("hdl")).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files.push(dir.join("lint/vendor_stubs.v"));
        let out = Command::new("verilator")
            .args(["--lint-only", "-Wall", "-Wno-DECLFILENAME", "-Wno-UNUSEDSIGNAL", "-Wno-UNUSEDPARAM", "-Wno-WIDTH", "--top-module", "opu_card"])
            .args(&files)
            .output()
            .unwrap();
        assert!(out.status.success(), "verilator: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flash_plans_the_vendor_commands_and_refuses_bad_images() {
    let dir = scratch("flash");
    let root = dir.join("sys");
    std::fs::create_dir_all(&root).unwrap();
    // a card to program (its sysfs entry; nobody needs to serve it for a dry run)
    let config = OverlayConfig { device_memory_bytes: 64 << 20, ..OverlayConfig::sim() };
    let tree = opu_driver::emulate::create(&root, BDF, &config, "sim").unwrap();
    std::fs::remove_file(tree.dir.join(opu_driver::emulate::INFO_FILE)).unwrap(); // a card, not an emulated one
    let sc = Sidecar::new(&OverlayConfig::u280(), "alveo-u280", "xcu280-fsvh2892-2L-e", "opu_card", "2026-12-07T00:00:00Z", "0.1.0");
    let bit = dir.join("opu_card.bit");
    std::fs::write(&bit, bit_file("opu_card;UserID=0XFFFFFFFF;Version=2024.2", 4096, 4096)).unwrap();
    std::fs::write(dir.join("opu_card.opu.json"), sc.to_json()).unwrap();
    let root_s = root.to_str().unwrap();
    // JTAG: off the bus, load, rescan
    let out = opu(&["flash", s(&bit), "--method", "openfpgaloader", "--device", BDF, "--sysfs-root", root_s, "--dry-run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    let canon = std::fs::canonicalize(&root).unwrap();
    assert_eq!(
        lines,
        [
            format!("echo 1 > {}", canon.join(BDF).join("remove").display()),
            format!("openFPGALoader --cable ft4232 --fpga-part xcu280-fsvh2892-2L-e {}", bit.display()),
            format!("echo 1 > {}", canon.parent().unwrap().join("rescan").display()),
        ]
    );
    let out = opu(&["flash", s(&bit), "--method", "openfpgaloader", "--cable", "digilent_hs2", "--ftdi-serial", "21030", "--sysfs-root", s(&dir.join("none")), "--dry-run"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("openFPGALoader --cable digilent_hs2 --ftdi-serial 21030 --fpga-part xcu280-fsvh2892-2L-e {}", bit.display()));
    // XRT: an xclbin
    let xclbin = dir.join("opu_card.xclbin");
    std::fs::write(&xclbin, xclbin_file(2000)).unwrap();
    let out = opu(&["flash", s(&xclbin), "--device", BDF, "--sysfs-root", root_s, "--dry-run"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("xrt-smi program --device {BDF} --user {}", xclbin.display()));
    let out = opu(&["flash", s(&bit), "--method", "xrt", "--device", BDF, "--sysfs-root", root_s, "--dry-run"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--method xrt programs an .xclbin"));
    // truncated images
    let cut = dir.join("cut.bit");
    std::fs::write(&cut, bit_file("opu_card;UserID=0XFFFFFFFF", 4096, 1000)).unwrap();
    std::fs::write(dir.join("cut.opu.json"), sc.to_json()).unwrap();
    let out = opu(&["flash", s(&cut), "--sysfs-root", root_s, "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cut.bit") && err.contains("truncated: the header promises 4096 bytes") && err.contains("holds 1000"), "{err}");
    let short = dir.join("short.xclbin");
    std::fs::write(&short, &xclbin_file(2000)[..1500]).unwrap();
    let out = opu(&["flash", s(&short), "--sidecar", s(&dir.join("opu_card.opu.json")), "--sysfs-root", root_s, "--dry-run"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("truncated: the xclbin header says 2000 bytes"), "{out:?}");
    let junk = dir.join("junk.bit");
    std::fs::write(&junk, b"hello").unwrap();
    let out = opu(&["flash", s(&junk), "--sidecar", s(&dir.join("opu_card.opu.json")), "--dry-run"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("not a Xilinx bitstream"), "{out:?}");
    // sidecars that do not match: another design, a hash that is not its config's, none at all
    let other = dir.join("other.bit");
    std::fs::write(&other, bit_file("something_else;UserID=0", 4096, 4096)).unwrap();
    let out = opu(&["flash", s(&other), "--sidecar", s(&dir.join("opu_card.opu.json")), "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("the bitstream is design `something_else`, the sidecar's top is `opu_card`"), "{err}");
    let mut forged = sc.clone();
    forged.config.pe_lanes = 64;
    std::fs::write(dir.join("forged.json"), forged.to_json()).unwrap();
    let out = opu(&["flash", s(&bit), "--sidecar", s(&dir.join("forged.json")), "--dry-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("forged.json: field `config_hash`"), "{err}");
    let lone = scratch("flash-lone");
    std::fs::write(lone.join("x.bit"), bit_file("opu_card;UserID=0", 64, 64)).unwrap();
    let out = opu(&["flash", s(&lone.join("x.bit")), "--dry-run"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no sidecar"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&lone);
}

#[test]
fn flash_programs_an_emulated_card() {
    let dir = scratch("emulated");
    let root = dir.join("sys");
    let mut emu = Command::new(env!("CARGO_BIN_EXE_opu"))
        .args(["emulate", "--root", s(&root), "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(emu.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("overlay `sim`"), "{line}");
    // an image of the sim-wide overlay
    let wide = OverlayConfig::sim_wide();
    let sc = Sidecar::new(&wide, "emulated", "none", "opu_card", "2026-12-07T00:00:00Z", "0.1.0");
    let bit = dir.join("wide.bit");
    std::fs::write(&bit, bit_file("opu_card;UserID=0", 256, 256)).unwrap();
    std::fs::write(dir.join("wide.opu.json"), sc.to_json()).unwrap();
    let out = opu(&["flash", s(&bit), "--sysfs-root", s(&root), "--dry-run"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("(emulated card) write the sidecar to"), "{out:?}");
    let out = opu(&["flash", s(&bit), "--sysfs-root", s(&root)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("card {BDF} now runs overlay `sim-wide` (config hash {:#018x})", wide.hash())), "{text}");
    // the driver sees the new overlay
    let card = opu_driver::Card::open(&root, None, None).unwrap();
    assert_eq!(card.config().name, "sim-wide");
    drop(card);
    let list = opu(&["devices", "--json", "--sysfs-root", s(&root)]);
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v["cards"][0]["config"], "sim-wide");
    assert_eq!(v["cards"][0]["emulated"]["bitstream_sha256"].as_str().unwrap().len(), 64);
    // an image the emulated card cannot hold is refused, and the card keeps its overlay
    let mut bad = sc.clone();
    bad.config.device_memory_bytes = 12345;
    bad.config_hash = format!("{:#018x}", bad.config.hash());
    std::fs::write(dir.join("bad.json"), bad.to_json()).unwrap();
    let out = opu(&["flash", s(&bit), "--sidecar", s(&dir.join("bad.json")), "--sysfs-root", s(&root)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("field `config`"), "{err}");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(emu.id() as i32, libc::SIGTERM) };
    emu.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The card image's AXI glue (`opu_mem_fabric`, `opu_axi_interleave`) under Verilator against the project's
/// testbench: an AXI memory that delays writes until their B and reads until their R at random, checked
/// against a plain byte array of device memory (the host writes bursts, the overlay's line and weight
/// ports run random traffic, the host reads bursts back).
#[test]
fn the_card_images_axi_glue_passes_its_testbench() {
    if !have("verilator") {
        return;
    }
    let dir = scratch("glue");
    let out = opu(&["rtl", "project", "-o", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let build = Command::new("verilator")
        .current_dir(&dir)
        .args(["--binary", "--timing", "-Wno-fatal", "-Wno-lint", "-Wno-style", "--top-module", "tb_glue", "-Mdir", "obj_glue"])
        .args(["sim/tb_glue.sv", "hdl/opu_mem_fabric.v", "hdl/opu_axi_interleave.v", "hdl/opu_fifo.v"])
        .output()
        .unwrap();
    assert!(build.status.success(), "verilator: {}", String::from_utf8_lossy(&build.stderr));
    let run = Command::new(dir.join("obj_glue/Vtb_glue")).current_dir(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    let pass = text.lines().find(|l| l.starts_with("PASS: ")).unwrap_or_else(|| panic!("the testbench failed:\n{text}"));
    eprintln!("{pass}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! The `pcie` backend end to end: `opu emulate` plays an OPU card (the functional simulator, or the RTL,
//! behind a fake sysfs tree and device-memory file) and `opu run --backend pcie` drives it through the
//! driver exactly as it drives a card. Its tokens must be the `sim` backend's; the faults a user meets
//! through the command line must be clear errors, never hangs.

mod common;

use common::Emulator;
use opu_compiler::gguf::parse_bytes;
use opu_compiler::testing::TinyLlama;
use opu_compiler::CompileOptions;
use opu_host::backend::Backend;
use opu_host::sim_backend::SimBackend;
use opu_hw::OverlayConfig;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BDF: &str = opu_driver::emulate::DEFAULT_BDF;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("opu-pcie-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}


fn opu() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_opu"));
    c.env("RAYON_NUM_THREADS", "1").env_remove("OPU_SYSFS_ROOT");
    c
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn generate(backend: &str, root: &Path, extra: &[&str]) -> std::process::Output {
    let tokens = if extra.contains(&"--max-tokens") { &[][..] } else { &["--max-tokens", "4"][..] };
    opu()
        .args(["run", "The capital of France is", "--json", "--backend", backend])
        .args(tokens)
        .args(["--model", common::smollm2().to_str().unwrap(), "--sysfs-root", root.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn smollm2_on_an_emulated_card_generates_the_sim_backends_tokens() {
    let root = scratch("smollm2");
    let emu = Emulator::start(&root, &[]);
    let card = json(&generate("pcie", &root, &[]));
    let sim = json(&generate("sim", &root, &[]));
    let ids = card["generated_ids"].as_array().unwrap();
    assert!(ids.len() >= 3, "{card}");
    assert_eq!(card["generated_ids"], sim["generated_ids"], "the card's tokens are the functional simulator's");
    assert_eq!(card["text"], sim["text"]);
    assert!(card["backend"].as_str().unwrap().starts_with(&format!("pcie (card {BDF}, overlay `sim`, emulated by the sim backend")), "{}", card["backend"]);
    // the card's counters are the simulator's: same instructions, MACs and bytes per run
    for k in ["instructions", "macs", "bytes_read", "bytes_written", "passes"] {
        assert_eq!(card["device"][k], sim["device"][k], "{k}");
    }
    assert_eq!(card["device"]["cycles_estimate"], sim["device"]["cycles_estimate"], "an emulated card's cycles are the simulator's estimate");
    // `opu devices` lists it, with the last run's counters
    let out = opu().args(["devices", "--json", "--sysfs-root", root.to_str().unwrap()]).output().unwrap();
    let list = json(&out);
    let c = &list["cards"][0];
    assert_eq!(c["bdf"], BDF);
    assert_eq!(c["config"], "sim");
    assert_eq!(c["config_hash"], format!("{:#018x}", OverlayConfig::sim().hash()));
    assert_eq!(c["state"], "done");
    assert_eq!(c["in_use"], false);
    assert!(c["counters"]["instructions"].as_u64().unwrap() > 100, "{c}");
    assert_eq!(c["emulated"]["backend"], "sim");
    // `auto` finds the card, says so, and runs on it
    let out = generate("auto", &root, &["--max-tokens", "1"]);
    let auto = json(&out);
    let note = auto["backend_note"].as_str().unwrap();
    assert!(note.starts_with(&format!("auto: OPU card {BDF} answered (overlay `sim`")), "{note}");
    assert!(auto["backend"].as_str().unwrap().starts_with("pcie"), "{}", auto["backend"]);
    assert_eq!(auto["generated_ids"][0], sim["generated_ids"][0]);
    drop(emu);
    assert!(!root.join(BDF).exists(), "the emulator removes its card when it is stopped");
    // with no card, `opu devices` says so
    let out = opu().args(["devices", "--sysfs-root", root.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("no OPU card under"), "{out:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn card_faults_through_the_command_line_are_clear_errors() {
    let root = scratch("faults");
    // another overlay than the program's
    let emu = Emulator::start(&root, &["--config", "sim-wide"]);
    let out = generate("pcie", &root, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("card {BDF} runs overlay `sim-wide`")) && err.contains("not `sim`"), "{err}");
    // a card another process holds
    {
        let _held = opu_driver::Card::open(&root, None, None).unwrap();
        let out = generate("pcie", &root, &["--config", "sim-wide"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(&format!("card {BDF} is in use by another process")), "{err}");
    }
    drop(emu);
    // a card that never completes: the set timeout, naming the register
    let emu = Emulator::start(&root, &["--fault", "never-complete"]);
    let t = Instant::now();
    let out = generate("pcie", &root, &["--device-timeout", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("did not complete within 2") && err.contains("STATUS (0x014)"), "{err}");
    eprintln!("timed out run took {:?} (compile and load included)", t.elapsed());
    drop(emu);
    let emu = Emulator::start(&root, &["--fault", "never-complete"]);
    // the card vanishing mid-run: its sysfs entry removed while the run waits
    let run = opu()
        .args(["run", "Hello", "--max-tokens", "2", "--backend", "pcie", "--device-timeout", "600"])
        .args(["--model", common::smollm2().to_str().unwrap(), "--sysfs-root", root.to_str().unwrap()])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // wait for the doorbell to be taken (STATUS BUSY in the BAR file), then remove the card
    let bar = root.join(BDF).join("resource0");
    let t = Instant::now();
    loop {
        let bytes = std::fs::read(&bar).unwrap();
        if u32::from_le_bytes(bytes[0x14..0x18].try_into().unwrap()) & 1 == 1 && bytes[0x18] == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(300), "the run never rang the doorbell");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(root.join(BDF)).unwrap();
    let removed = Instant::now();
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("card {BDF} vanished during the run")), "{err}");
    assert!(removed.elapsed() < Duration::from_secs(10), "{:?}", removed.elapsed());
    drop(emu);
    let _ = std::fs::remove_dir_all(&root);
}

/// The tiny transformer on an emulated card with the RTL behind it: the driver's protocol against the
/// RTL's register file and memory, bit for bit with the functional simulator.
#[test]
fn tiny_transformer_on_an_emulated_card_with_the_rtl_behind_it() {
    if !common::models_or_skip("tiny transformer on an emulated card with the RTL") {
        return;
    }
    let root = scratch("rtl");
    let _emu = Emulator::start(&root, &["--backend", "rtl"]);
    let g = parse_bytes(&TinyLlama::default().gguf(), "tiny.gguf").unwrap();
    let config = OverlayConfig::sim();
    let card = opu_driver::Card::open(&root, None, Some(&config)).unwrap();
    let mut pcie = SimBackend::open_pcie(&g, &config, &CompileOptions::default(), card, Duration::from_secs(600)).unwrap();
    let mut sim = SimBackend::open(&g, &config, &CompileOptions::default(), 1).unwrap();
    let prompt: Vec<u32> = (0..18).map(|i| (i * 29 + 3) % 96).collect();
    let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let (a, b) = (pcie.forward(&prompt, true).unwrap(), sim.forward(&prompt, true).unwrap());
    assert_eq!(bits(&a), bits(&b), "prefill logits");
    for t in [5, 77, 42] {
        let (a, b) = (pcie.forward(&[t], false).unwrap(), sim.forward(&[t], false).unwrap());
        assert_eq!(bits(&a), bits(&b), "decode logits of token {t}");
    }
    let (ps, ss) = (pcie.stats().unwrap(), sim.stats().unwrap());
    for k in ["instructions", "macs", "bytes_read", "bytes_written"] {
        assert_eq!(ps[k], ss[k], "{k}");
    }
    // the RTL counts cycles; the card reports them as such
    assert_eq!(ps["figures"]["cycles_are_estimates"], false);
    assert!(ps["cycles"].as_u64().unwrap() > 1000, "{}", ps["cycles"]);
    let _ = std::fs::remove_dir_all(&root);
}

/// The digit classifier on an emulated card: the same logits as the `sim` backend, and `auto` finds the
/// card. Needs `OPU_DIGITS_KERAS` and `OPU_MNIST5K`; skips without them.
#[test]
fn a_cnn_on_an_emulated_card_gives_the_sim_backends_logits() {
    let (Some(model), Some(data)) = (std::env::var("OPU_DIGITS_KERAS").ok(), std::env::var("OPU_MNIST5K").ok()) else {
        eprintln!("skipped: set OPU_DIGITS_KERAS and OPU_MNIST5K (`opu fetch digits`, `opu fetch mnist5k`)");
        return;
    };
    let root = scratch("cnn");
    let ds = opu_compiler::dataset::read_csv(Path::new(&data), 784).unwrap();
    let pgm = root.join("digit.pgm");
    std::fs::write(&pgm, format!("P2\n28 28\n255\n{}\n", ds.image(42).iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" "))).unwrap();
    let _emu = Emulator::start(&root, &[]);
    let classify = |backend: &str| {
        let out = opu()
            .args(["classify", "--model", &model, "--calibration", &data, "--calibration-images", "32", "--json", "--backend", backend])
            .args(["--sysfs-root", root.to_str().unwrap(), pgm.to_str().unwrap()])
            .output()
            .unwrap();
        json(&out)
    };
    let (card, sim, auto) = (classify("pcie"), classify("sim"), classify("auto"));
    assert!(auto["backend"].as_str().unwrap().starts_with(&format!("auto: OPU card answered; pcie (card {BDF}")), "{}", auto["backend"]);
    let image = |v: &serde_json::Value| (v["images"][0]["logits"].clone(), v["images"][0]["cycles"].clone());
    assert_eq!(image(&card), image(&sim), "logits and cycles");
    assert_eq!(image(&auto), image(&sim));
    assert!(sim["images"][0]["cycles"].as_u64().unwrap() > 1000);
}

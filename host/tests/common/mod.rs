//! Helpers shared by the host's test binaries: the RTL's models, SmolLM2 from the model cache, an emulated
//! card.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// `opu emulate` in the background, killed (SIGTERM, then SIGKILL) when dropped. (Not every test binary
/// that shares this module emulates a card.)
#[allow(dead_code)]
pub struct Emulator {
    child: Child,
    root: PathBuf,
}

impl Emulator {
    #[allow(dead_code)]
    pub fn start(root: &Path, extra: &[&str]) -> Emulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_opu"))
            .env("RAYON_NUM_THREADS", "1")
            .env_remove("OPU_SYSFS_ROOT")
            .args(["emulate", "--root", root.to_str().unwrap(), "--threads", "1"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start opu emulate");
        // its first line says the card is ready
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.contains(&format!("emulated OPU card {}", opu_driver::emulate::DEFAULT_BDF)), "{line}");
        Emulator { child, root: root.into() }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

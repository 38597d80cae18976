//! `opu exec` and `opu cosim`: program files run on the simulators, traps reported as errors naming the pc
//! and the instruction, and co-simulation that finds the first instruction after which two devices differ.

use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::isa::{self, asm};
use opu_hw::OverlayConfig;
use opu_host::exec::{cosim, ProgramFile, RunOptions};
use opu_sim::func::FuncSim;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn opu(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_opu")).args(args).output().expect("run opu")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("opu-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Whether this build has the Verilator models (an error under `REQUIRE_VERILATOR=1`, else SKIPPED).
fn rtl_or_skip(what: &str) -> bool {
    if opu_rtlsim::rtl::available() {
        return true;
    }
    assert_ne!(std::env::var("REQUIRE_VERILATOR").as_deref(), Ok("1"), "{what}: no Verilator models and REQUIRE_VERILATOR=1");
    eprintln!("SKIPPED {what} on the rtl backend: opu-rtlsim was built without the Verilator models");
    false
}

/// Raw instruction words from assembly, with `raw` words spliced in at their indices.
fn program(name: &str, text: &str, raw: &[(usize, u128)]) -> PathBuf {
    let mut words: Vec<u128> = asm::assemble(text).unwrap().iter().map(|i| isa::encode(i).unwrap()).collect();
    for &(at, w) in raw {
        words.insert(at, w);
    }
    let path = tmp(name);
    std::fs::write(&path, words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    path
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `prog` with `opu exec` on `backend` and returns its error output, asserting it failed and named
/// each of `expect`.
fn exec_fails(prog: &Path, backend: &str, extra: &[&str], expect: &[&str]) {
    let mut args = vec!["exec", prog.to_str().unwrap(), "--backend", backend];
    args.extend_from_slice(extra);
    let out = opu(&args);
    let err = stderr(&out);
    assert!(!out.status.success(), "{backend}: the run should fail: {err}");
    for e in expect {
        assert!(err.contains(e), "{backend}: the error should name `{e}`: {err}");
    }
}

#[test]
fn traps_are_errors_naming_the_pc_the_instruction_and_the_code() {
    // an unknown opcode (0x7f) at pc 1
    let bad = program("bad.bin", "seti rd=r1 imm=5\nend\n", &[(1, 0x7f)]);
    // a load whose second line lies past the 1 GiB of the sim preset (line 0x1ffffff is its last)
    let oob = program("oob.bin", "seti rd=r1 imm=5\nload spm=0 mem=0x1ffffff bytes=64 idx=r0 stride=0\nend\n", &[]);
    // no `end`: the program runs off its last instruction
    let endless = program("endless.bin", "seti rd=r1 imm=5\naddi rd=r1 rs=r1 imm=1\n", &[]);
    let mut backends = vec!["sim"];
    if rtl_or_skip("exec traps") {
        backends.push("rtl");
    }
    for b in backends {
        exec_fails(&bad, b, &[], &["bad.bin", "pc 1", "ILLEGAL_INSTRUCTION", "word 0x", "ERROR_INFO 0x7f"]);
        exec_fails(&oob, b, &[], &["oob.bin", "pc 1", "`load", "MEM_OUT_OF_RANGE", "ERROR_INFO 0x40000000"]);
        exec_fails(&endless, b, &[], &["endless.bin", "pc 2", "past the program's 2 instructions", "PC_OUT_OF_RANGE"]);
    }
}

#[test]
fn the_rtl_watchdog_ends_a_unit_that_makes_no_progress() {
    if !rtl_or_skip("watchdog") {
        return;
    }
    // The memory model answers after 64 cycles; a watchdog of 16 cycles without progress fires while the
    // DMA unit waits for its line. The functional simulator's units never stall: it completes.
    let p = program("wd.bin", "load spm=0 mem=0x100 bytes=32 idx=r0 stride=0\nend\n", &[]);
    exec_fails(&p, "rtl", &["--watchdog", "16"], &["wd.bin", "WATCHDOG"]);
    let out = opu(&["exec", p.to_str().unwrap(), "--backend", "sim", "--watchdog", "16", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trap"], serde_json::Value::Null);
    assert_eq!(v["counters"]["bytes_read"], 32);
}

#[test]
fn exec_refuses_files_that_are_not_programs() {
    let odd = tmp("odd.bin");
    std::fs::write(&odd, [1u8; 20]).unwrap();
    let out = opu(&["exec", odd.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("odd.bin: 20 bytes are not raw instructions"), "{}", stderr(&out));
    // a container built for another overlay
    let c = tmp("u280.opu");
    let src = tmp("e.s");
    std::fs::write(&src, "end\n").unwrap();
    assert!(opu(&["asm", src.to_str().unwrap(), "-o", c.to_str().unwrap(), "--container", "u280"]).status.success());
    let out = opu(&["exec", c.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("u280.opu: built for an overlay with config hash"), "{}", stderr(&out));
    let out = opu(&["exec", c.to_str().unwrap(), "--config", "u280", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The functional simulator with one instruction word replaced whenever the program is loaded: a device
/// that goes wrong at a known instruction, for the co-simulation search.
struct Faulty {
    inner: FuncSim,
    at: u64,
    word: [u8; 16],
}

impl Device for Faulty {
    fn mmio_read(&mut self, o: u32) -> Result<u32, DeviceError> {
        self.inner.mmio_read(o)
    }
    fn mmio_write(&mut self, o: u32, v: u32) -> Result<(), DeviceError> {
        self.inner.mmio_write(o, v)
    }
    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.inner.mem_write(addr, data)?;
        let end = isa::encode(&isa::Instr::End {}).unwrap().to_le_bytes();
        if addr <= self.at && self.at + 16 <= addr + data.len() as u64 {
            let off = (self.at - addr) as usize;
            if data[off..off + 16] != end {
                self.inner.mem_write(self.at, &self.word)?;
            }
        }
        Ok(())
    }
    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.mem_read(addr, buf)
    }
    fn mem_size(&self) -> u64 {
        self.inner.mem_size()
    }
    fn wait_done(&mut self, t: Duration) -> Result<Completion, DeviceError> {
        self.inner.wait_done(t)
    }
}

const COSIM_PROGRAM: &str = "
seti rd=r1 imm=3
seti rd=r2 imm=1
skip pred=p0 count=0
addi rd=r3 rs=r1 imm=4        ; pc 3: the faulty device adds 5
load spm=0 mem=0x100 bytes=64 idx=r0 stride=0
vop op=add dd=f16 da=f16 db=f16 rows=1 dst=0x40 a=0 b=0x8 n=16
store spm=0x40 mem=0x200 bytes=32 idx=r3 stride=1
addi rd=r4 rs=r2 imm=9
end
";

#[test]
fn cosim_finds_the_first_instruction_after_which_the_devices_differ() {
    let config = OverlayConfig::sim();
    let path = program("cosim.bin", COSIM_PROGRAM, &[]);
    let prog = ProgramFile::read(&path, None, 0x1000).unwrap();
    let opts = RunOptions::default();
    let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
    let fresh = |d: &mut dyn Device| d.mem_write(0x100 * 32, &data).unwrap();
    let mut golden = || {
        let mut f = FuncSim::new(&config);
        fresh(&mut f);
        Ok(f)
    };

    // the same device on both sides: they agree, in one run each
    let r = cosim(
        &prog,
        &opts,
        &mut golden,
        &mut |_| {
            let mut f = FuncSim::new(&config);
            fresh(&mut f);
            Ok(Box::new(f) as Box<dyn Device>)
        },
    )
    .unwrap();
    assert!(r.divergence.is_none(), "{}", r.text());
    assert_eq!((r.executed, r.runs), (9, 1));

    // the device under test adds 5 at pc 3: r3 differs right after it, the store lands elsewhere
    let wrong = isa::encode(&asm::assemble("addi rd=r3 rs=r1 imm=5").unwrap()[0]).unwrap().to_le_bytes();
    let r = cosim(
        &prog,
        &opts,
        &mut golden,
        &mut |_| {
            let mut f = Faulty { inner: FuncSim::new(&config), at: 0x1000 + 3 * 16, word: wrong };
            fresh(&mut f);
            Ok(Box::new(f) as Box<dyn Device>)
        },
    )
    .unwrap();
    let d = r.divergence.as_ref().unwrap_or_else(|| panic!("no divergence found: {}", r.text()));
    assert_eq!((d.index, d.pc), (Some(3), Some(3)), "{}", r.text());
    assert!(d.instruction.as_deref().unwrap().contains("addi"), "{}", r.text());
    assert_eq!(d.difference, "register r3: expected 0x7, got 0x8");
    assert!(r.runs <= 1 + 4, "a binary search over 9 instructions: {} runs", r.runs);
    assert!(r.text().contains("first difference after instruction #3 (pc 3, `addi"), "{}", r.text());
}

#[test]
fn cosim_of_the_sample_layer_on_the_rtl_agrees() {
    if !rtl_or_skip("cosim") {
        return;
    }
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/sample.s");
    let bin = tmp("sample.bin");
    assert!(opu(&["asm", sample.to_str().unwrap(), "-o", bin.to_str().unwrap()]).status.success());
    // the program's data is the zeroed memory; r8 (token) and r9 (position) come from ARG0 / ARG1
    let out = opu(&["cosim", bin.to_str().unwrap(), "--base", "0x200000", "--arg", "3", "--arg", "0", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["divergence"], serde_json::Value::Null);
    assert!(v["actual"]["counters"]["cycles"].as_u64().unwrap() > 1000, "{text}");
}

#[test]
fn cosim_of_a_compiled_model_on_the_rtl_agrees() {
    if !rtl_or_skip("cosim of a compiled model") {
        return;
    }
    // a 2-layer llama (weights generated by the compiler's test support), compiled by `opu compile`
    let gguf = tmp("tiny.gguf");
    std::fs::write(&gguf, opu_compiler::testing::TinyLlama::default().gguf()).unwrap();
    let opu_file = tmp("tiny.opu");
    let out = opu(&["compile", gguf.to_str().unwrap(), "-o", opu_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // the decode entry for token 5 at position 0 (ARG0 token, ARG1 position, ARG2 tokens; the ids buffer
    // is zeroed memory, so the pass embeds token 0)
    let out = opu(&["cosim", opu_file.to_str().unwrap(), "--entry", "decode", "--arg", "5", "--arg", "0", "--arg", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains("agree:") && text.contains("(1 run of each side)"), "{text}");
}

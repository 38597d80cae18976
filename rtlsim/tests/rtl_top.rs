//! The RTL's `top` under Verilator ([`opu_rtlsim::RtlSim`]) against the functional simulator, both driven only
//! through `Device` as the host drives a card: the same programs of control, scalar and DMA instructions on
//! the same device memory. Compared: the device-memory window the programs write, every scalar register,
//! predicate and CSR (the debug window), INSTRET, the byte counters, and each trap's code, pc and
//! ERROR_INFO. Without the Verilator models every test says SKIPPED (a failure under REQUIRE_VERILATOR=1).

mod common;

use std::time::Duration;

use common::models_or_skip;
use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::isa::{assemble, encode_program};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;
use opu_rtl::testing::Rng;
use opu_rtlsim::RtlSim;
use opu_sim::FuncSim;

const CODE: u64 = 0x10_0000;
const WINDOW: usize = 1 << 16;

#[derive(Debug, PartialEq)]
struct State {
    result: Result<(), (ErrorCode, u32, u64)>,
    mem: Vec<u8>,
    regs: Vec<u32>,
    instret: Option<u64>,
    bytes: (u64, u64),
}

fn run(dev: &mut dyn Device, code: &[u8], data: &[u8], args: &[u32]) -> (State, Option<Completion>) {
    dev.mem_write(0, data).unwrap();
    dev.mem_write(CODE, code).unwrap();
    dev.mmio_write(regs::PROG_BASE_LO, CODE as u32).unwrap();
    dev.mmio_write(regs::PROG_BASE_HI, 0).unwrap();
    dev.mmio_write(regs::PROG_LEN, (code.len() / 16) as u32).unwrap();
    for i in 0..8 {
        dev.mmio_write(regs::ARG0 + 4 * i, args.get(i as usize).copied().unwrap_or(0)).unwrap();
    }
    dev.mmio_write(regs::DOORBELL, 1).unwrap();
    let done = dev.wait_done(Duration::from_secs(60));
    let mut completion = None;
    let result = match done {
        Ok(c) => {
            completion = Some(c);
            Ok(())
        }
        Err(DeviceError::Trap { code, pc }) => Err((code, pc, dev.mmio_read64(regs::ERROR_INFO_LO).unwrap())),
        Err(e) => panic!("{e}"),
    };
    let mut mem = vec![0u8; WINDOW];
    dev.mem_read(0, &mut mem).unwrap();
    let mut regs_seen: Vec<u32> = (0..16).map(|i| dev.mmio_read(regs::DBG_R0 + 4 * i).unwrap()).collect();
    regs_seen.push(dev.mmio_read(regs::DBG_PRED).unwrap());
    regs_seen.extend((0..regs::DBG_CSRS).map(|c| dev.mmio_read(regs::DBG_CSR0 + 4 * c).unwrap()));
    // INSTRET and the byte counters match where the run completed (after a trap the RTL has also counted
    // instructions issued after the trapping one: docs/rtl.md)
    let ok = result.is_ok();
    let instret = ok.then(|| dev.mmio_read64(regs::INSTRET_LO).unwrap());
    let bytes = if ok {
        (dev.mmio_read64(regs::BYTES_READ_LO).unwrap(), dev.mmio_read64(regs::BYTES_WRITTEN_LO).unwrap())
    } else {
        (0, 0)
    };
    (State { result, mem, regs: if ok { regs_seen } else { Vec::new() }, instret, bytes }, completion)
}

/// Runs `text` on both; returns the RTL's completion (cycles).
fn compare(text: &str, args: &[u32]) -> Option<Completion> {
    let program = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    compare_code(&encode_program(&program).unwrap(), args, text)
}

fn compare_code(code: &[u8], args: &[u32], what: &str) -> Option<Completion> {
    let config = OverlayConfig::sim();
    let mut rng = Rng(0x70b0_0001);
    let data: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    let mut func = FuncSim::new(&config);
    let mut rtl = RtlSim::new(&config).unwrap();
    let (want, _) = run(&mut func, code, &data, args);
    let (got, completion) = run(&mut rtl, code, &data, args);
    assert_eq!(got.result, want.result, "outcome\n{what}");
    if let Some(i) = got.mem.iter().zip(&want.mem).position(|(a, b)| a != b) {
        panic!("device memory byte {i:#x}: RTL {} functional {}\n{what}", got.mem[i], want.mem[i]);
    }
    assert_eq!(got.regs, want.regs, "r0..r15, predicates, CSRs\n{what}");
    assert_eq!(got.instret, want.instret, "INSTRET\n{what}");
    assert_eq!(got.bytes, want.bytes, "BYTES_READ, BYTES_WRITTEN\n{what}");
    completion
}

/// The memory model's bytes per channel (`Device::channel_bytes`): every line and beat on the channel that
/// holds it (`OverlayConfig::channel_of`: 32-byte runs over the `sim` preset's two channels, alternating).
/// A DMA load of 4,096 bytes from an aligned line is 128 lines, 64 on each channel, and the program's two
/// instructions one line of fetch on CODE's channel; then a `matmul`'s weight beats, 64 bytes each, half on
/// each channel.
#[test]
fn the_memory_counts_the_bytes_on_each_channel() {
    if !models_or_skip("RTL memory channels") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut dev = opu_rtlsim::RtlSim::new(&config).unwrap();
    assert_eq!(dev.channel_bytes(), Some(vec![0, 0]));
    let fetch = config.channel_of(common::CODE) as usize;
    let load = encode_program(&assemble("load spm=0 mem=0x100 bytes=4096 idx=r0 stride=0\nend\n").unwrap()).unwrap();
    let (state, _) = common::run_program("channels: load", &mut dev, &load, &[0u8; 64]);
    assert!(state.result.is_ok(), "{:?}", state.result);
    let mut want = vec![2048u64, 2048];
    want[fetch] += 32;
    assert_eq!(dev.channel_bytes().unwrap(), want, "a load of 128 lines and a line of fetch");
    let matmul = encode_program(&assemble("matmul fmt=w8 out=f16 ntok=1 dst=0x400 src=0 rows=16 cols=64 w=0x1000\nend\n").unwrap()).unwrap();
    let weights = opu_hw::weight_layout::WeightLayout::new(&config, 68).matrix_bytes(16);
    let (state, _) = common::run_program("channels: matmul", &mut dev, &matmul, &[0u8; 64]);
    assert!(state.result.is_ok(), "{:?}", state.result);
    want[0] += weights / 2;
    want[1] += weights / 2;
    want[fetch] += 32;
    assert_eq!(dev.channel_bytes().unwrap(), want, "a matmul's {weights} weight bytes and a line of fetch");
}

#[test]
fn dma_and_scalar_programs_equal_the_functional_simulator() {
    if !models_or_skip("RTL top vs functional simulator") {
        return;
    }
    let text = "
        seti rd=r1 imm=0x40
        load spm=0x103 mem=0x10 bytes=200 idx=r0 stride=0      ; unaligned in the scratchpad
        load2d spm=0x400 mem=0x80 row_bytes=36 rows=6 mem_stride=5 spm_stride=11
        ldr rd=r2 spm=0x105                                      ; a word the first load brought
        muli rd=r3 rs=r2 imm=0
        addi rd=r3 rs=r3 imm=7
        load spm=0x800 mem=0x100 bytes=96 idx=r3 stride=9        ; gathered by a register
        csrw csr=vscale rs=r3 imm=0x1000
        store spm=0x101 mem=0x600 bytes=1000 idx=r0 stride=0
        store2d spm=0x3F0 mem=0x700 row_bytes=44 rows=7 mem_stride=2 spm_stride=9
        store spm=0x800 mem=0x7C0 bytes=96 idx=r8 stride=1
        barrier
        end
    ";
    let c = compare(text, &[3]).expect("completes");
    eprintln!("RTL: {} cycles, {} instructions", c.cycles, c.instructions);
    assert!(c.cycles > 100 && c.instructions == 13, "{c:?}");
}

#[test]
fn traps_equal_the_functional_simulator_through_the_device() {
    if !models_or_skip("RTL top traps") {
        return;
    }
    // DMA outside device memory, after a good store
    compare(
        "load spm=0 mem=0x20 bytes=64 idx=r0 stride=0\nstore spm=0 mem=0x400 bytes=64 idx=r0 stride=0\nload spm=0 mem=0x2000000 bytes=64 idx=r8 stride=0x100000\nend",
        &[7],
    );
    // DMA instructions queued behind a trapping one are dropped: the memory the store would write is
    // compared with the functional simulator's, which never ran it
    compare(
        "load spm=0 mem=0x20 bytes=64 idx=r0 stride=0\nload spm=0 mem=0x2000000 bytes=64 idx=r8 stride=0x100000\nstore spm=0 mem=0x500 bytes=64 idx=r0 stride=0\nstore spm=0 mem=0x510 bytes=64 idx=r0 stride=0\nend",
        &[7],
    );
    // the scratchpad, a bad operand, ldr outside the scratchpad
    compare("load spm=0xFFFF0 mem=0 bytes=128 idx=r0 stride=0\nend", &[]);
    compare("store2d spm=0 mem=0x400 row_bytes=6 rows=2 mem_stride=1 spm_stride=1\nend", &[]);
    compare("seti rd=r1 imm=1\nldr rd=r2 spm=0xFFFFF\nend", &[]);
    // running off the end, an illegal word
    compare("seti rd=r1 imm=1\nseti rd=r2 imm=2", &[]);
    let mut code = encode_program(&assemble("seti rd=r1 imm=1\nend").unwrap()).unwrap();
    code[16..32].copy_from_slice(&(0x33u128 | 1 << 120).to_le_bytes());
    compare_code(&code, &[], "an argmax word with a reserved bit set");
}

#[test]
fn a_second_run_fetches_the_new_program() {
    if !models_or_skip("RTL top reruns") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut rtl = RtlSim::new(&config).unwrap();
    let mut func = FuncSim::new(&config);
    for (k, text) in ["seti rd=r1 imm=11\nend", "seti rd=r1 imm=22\naddi rd=r2 rs=r8 imm=1\nend"].iter().enumerate() {
        let code = encode_program(&assemble(text).unwrap()).unwrap();
        let (got, _) = run(&mut rtl, &code, &[0u8; 64], &[k as u32 + 5]);
        let (want, _) = run(&mut func, &code, &[0u8; 64], &[k as u32 + 5]);
        assert_eq!(got.regs, want.regs, "run {k}");
        assert_eq!(got.instret, want.instret);
    }
}

#[test]
fn unmapped_registers_and_bad_memory_ranges_are_errors() {
    if !models_or_skip("RTL top device errors") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut rtl = RtlSim::new(&config).unwrap();
    assert_eq!(rtl.mmio_read(regs::ID).unwrap(), regs::ID_VALUE);
    assert_eq!(rtl.config_hash().unwrap(), config.hash());
    assert!(matches!(rtl.mmio_read(0x3F0), Err(DeviceError::BadRegister { .. })));
    assert!(matches!(rtl.mem_write(config.device_memory_bytes - 4, &[0; 8]), Err(DeviceError::OutOfRange { .. })));
    assert!(matches!(rtl.wait_done(Duration::from_secs(1)), Err(DeviceError::Io(_))), "nothing has run");
    assert!(RtlSim::new(&OverlayConfig::u280()).is_err(), "the model is the sim preset's");
}

#[test]
fn instruction_fetch_runs_ahead_of_the_pc() {
    if !models_or_skip("RTL top fetch queue") {
        return;
    }
    // 400 scalar instructions and a skip over a block longer than the queue: with lines fetched one at a
    // time every pair of instructions would wait the memory latency (64 cycles); the queue hides it
    let mut text = String::new();
    for i in 0..200 {
        text += &format!("addi rd=r{} rs=r{} imm={}\n", 1 + i % 7, 1 + (i + 3) % 7, i * 7 + 1);
        text += &format!("muli rd=r{} rs=r{} imm={}\n", 1 + (i + 1) % 7, 1 + i % 7, i + 3);
    }
    text += "seti rd=r9 imm=1\n";
    let c = compare(&(text.clone() + "end\n"), &[]).unwrap();
    let latency = OverlayConfig::sim().mem_latency_cycles as u64;
    eprintln!("RTL: {} cycles for {} instructions", c.cycles, c.instructions);
    assert!(c.cycles < 3 * c.instructions + 3 * latency, "{} cycles for {} instructions", c.cycles, c.instructions);
    assert!(c.cycles >= 2 * c.instructions, "Fetch and Decode take a cycle each");
}

#[test]
fn soft_reset_mid_run_then_a_new_run() {
    if !models_or_skip("RTL top SOFT_RESET") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut rtl = RtlSim::new(&config).unwrap();
    // a long run, abandoned while its fetches are in flight
    let mut long = String::new();
    for i in 0..300 {
        long += &format!("addi rd=r1 rs=r1 imm={i}\n");
    }
    long += "end\n";
    // (elsewhere than the next program: a fetch of this one that is still in flight at the next doorbell
    // must be dropped, not taken for the next program's line)
    let code = encode_program(&assemble(&long).unwrap()).unwrap();
    let elsewhere = CODE + 0x8000;
    rtl.mem_write(elsewhere, &code).unwrap();
    rtl.mmio_write(regs::PROG_BASE_LO, elsewhere as u32).unwrap();
    rtl.mmio_write(regs::PROG_LEN, 301).unwrap();
    rtl.mmio_write(regs::DOORBELL, 1).unwrap();
    for _ in 0..20 {
        assert_ne!(rtl.mmio_read(regs::STATUS).unwrap() & regs::status::BUSY, 0);
    }
    rtl.mmio_write(regs::CONTROL, regs::control::SOFT_RESET).unwrap();
    assert_eq!(rtl.mmio_read(regs::STATUS).unwrap(), 0, "aborted: not busy, no DONE or ERROR");
    assert_eq!(rtl.mmio_read(regs::ERROR_CODE).unwrap(), 0);
    // the next run gets exactly its own instructions
    let mut func = FuncSim::new(&config);
    let text = "seti rd=r1 imm=5\nload spm=0 mem=0 bytes=64 idx=r0 stride=0\nstore spm=0 mem=0x40 bytes=64 idx=r0 stride=0\naddi rd=r2 rs=r1 imm=1\nend";
    let code = encode_program(&assemble(text).unwrap()).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let (got, _) = run(&mut rtl, &code, &data, &[]);
    let (want, _) = run(&mut func, &code, &data, &[]);
    assert_eq!(got, want);
}

#[test]
fn a_run_writes_a_waveform_of_the_whole_overlay() {
    if !models_or_skip("RTL top waveform") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut rtl = RtlSim::new(&config).unwrap();
    let path = std::env::temp_dir().join(format!("opu-rtl-top-{}.vcd", std::process::id()));
    rtl.trace_vcd(&path, 0).unwrap();
    let code = encode_program(&assemble("seti rd=r1 imm=3\nload spm=0 mem=0 bytes=32 idx=r0 stride=0\nend").unwrap()).unwrap();
    let (state, c) = run(&mut rtl, &code, &[1u8; 64], &[]);
    assert!(state.result.is_ok());
    rtl.trace_close().unwrap();
    let vcd = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(vcd.contains("$timescale 1ps"), "{}", &vcd[..200.min(vcd.len())]);
    for signal in ["mmio_addr", "m_req", "m_rdata", "irq"] {
        assert!(vcd.contains(&format!(" {signal} ")), "the top's port {signal}");
    }
    // the core's state register is traced too (depth 0: every signal)
    assert!(vcd.contains("core$state") || vcd.contains("state$q"), "an internal signal");
    // one rising edge per simulated cycle, at least the run's
    let edges = vcd.lines().filter(|l| l.starts_with('#')).count() as u64;
    assert!(edges >= 2 * c.unwrap().cycles, "{edges} time stamps");
}

#[test]
fn scalar_work_overlaps_a_busy_dma_unit() {
    if !models_or_skip("RTL top issue queue") {
        return;
    }
    // four loads queue up in front of the DMA unit while the core goes on with 120 scalar instructions;
    // the barrier then waits for the loads. Serially this costs the loads' time plus the scalar time.
    let mut text = String::new();
    for k in 0..4 {
        text += &format!("load spm={} mem={} bytes=1024 idx=r0 stride=0\n", 0x1000 * k, 0x40 * k);
    }
    for i in 0..120 {
        text += &format!("addi rd=r{} rs=r{} imm={}\n", 1 + i % 5, 1 + (i + 2) % 5, i);
    }
    text += "barrier\nstore spm=0 mem=0x600 bytes=4096 idx=r0 stride=0\nend\n";
    let c = compare(&text, &[]).unwrap();
    let scalar_alone = compare(&text.lines().filter(|l| l.starts_with("addi")).chain(["end"]).collect::<Vec<_>>().join("\n"), &[]).unwrap();
    let dma_alone = compare(&text.lines().filter(|l| !l.starts_with("addi")).collect::<Vec<_>>().join("\n"), &[]).unwrap();
    eprintln!("RTL: {} cycles; scalar part alone {}, DMA part alone {}", c.cycles, scalar_alone.cycles, dma_alone.cycles);
    assert!(
        c.cycles < dma_alone.cycles + scalar_alone.cycles / 4,
        "{} cycles: the scalar work ({}) should hide behind the DMA work ({})",
        c.cycles,
        scalar_alone.cycles,
        dma_alone.cycles
    );
}

/// STATUS read every cycle through runs that end with `end` and with a trap: each read says BUSY until it
/// says DONE or ERROR, never neither (the cycle the core is idle and its completion is on its way to the
/// register file reads busy), so `wait_done` never takes a finished run for one that never started.
#[test]
fn status_is_busy_until_done_or_error_in_every_cycle() {
    if !models_or_skip("RTL STATUS every cycle") {
        return;
    }
    let config = OverlayConfig::sim();
    let mut rtl = RtlSim::new(&config).unwrap();
    for (text, want) in [
        ("seti rd=r1 imm=5\nload spm=0 mem=0x100 bytes=64 idx=r0 stride=0\naddi rd=r2 rs=r1 imm=1\nend\n", regs::status::DONE),
        ("seti rd=r1 imm=5\nload spm=0 mem=0x1ffffff bytes=64 idx=r0 stride=0\nend\n", regs::status::ERROR),
        ("seti rd=r1 imm=5\nend\n", regs::status::DONE),
    ] {
        let code = encode_program(&assemble(text).unwrap()).unwrap();
        rtl.mem_write(0x10_0000, &code).unwrap();
        rtl.mmio_write(regs::PROG_BASE_LO, 0x10_0000).unwrap();
        rtl.mmio_write(regs::PROG_LEN, (code.len() / 16) as u32).unwrap();
        for run in 0..3 {
            rtl.mmio_write(regs::DOORBELL, 1).unwrap();
            let mut reads = 0;
            loop {
                let s = rtl.mmio_read(regs::STATUS).unwrap();
                reads += 1;
                if s & (regs::status::DONE | regs::status::ERROR) != 0 {
                    assert_eq!(s & (regs::status::DONE | regs::status::ERROR), want, "{text}");
                    break;
                }
                assert_ne!(s & regs::status::BUSY, 0, "run {run}, read {reads}: STATUS {s:#x} is neither busy nor done\n{text}");
                assert!(reads < 100_000, "{text}");
            }
        }
    }
}

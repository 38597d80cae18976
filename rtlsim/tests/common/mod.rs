//! Shared helpers of the Verilator tests (each test binary uses some of them).
#![allow(dead_code)]

/// Whether opu-rtlsim was built with its Verilator models; if not, an error under `REQUIRE_VERILATOR=1`
/// (CI must run the co-simulation), else a SKIPPED line for `what`.
pub fn models_or_skip(what: &str) -> bool {
    if opu_rtlsim::rtl::available() {
        return true;
    }
    if std::env::var("REQUIRE_VERILATOR").as_deref() == Ok("1") {
        panic!(
            "{what}: opu-rtlsim was built without the Verilator models (no verilator on PATH at build time) \
             and REQUIRE_VERILATOR=1"
        );
    }
    eprintln!("SKIPPED {what}: opu-rtlsim was built without the Verilator models (no verilator on PATH)");
    false
}

use std::time::Duration;

use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, encode_program};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;

/// Where [`compare_with_func`] puts the program in device memory, and the window it compares from byte 0.
pub const CODE: u64 = 0x10_0000;
pub const WINDOW: usize = 1 << 16;

/// What a run leaves: the outcome (trap code, pc, ERROR_INFO), the device-memory window and, after a run
/// that completed, the registers, the predicates and the counters INSTRET, BYTES_READ, BYTES_WRITTEN, MACS,
/// KV_HISTORY_HITS, SKIPPED_BLOCKS, KV_HISTORY_MISSES.
#[derive(Debug, PartialEq)]
pub struct RunState {
    pub result: Result<(), (ErrorCode, u32, u64)>,
    pub mem: Vec<u8>,
    pub regs: Vec<u32>,
    pub counters: Vec<u64>,
}

/// Runs `code` at [`CODE`] over `data` (written from byte 0) on `dev`, as a host drives a card; returns what
/// it left and its cycles.
pub fn run_program(who: &str, dev: &mut dyn Device, code: &[u8], data: &[u8]) -> (RunState, u64) {
    dev.mem_write(0, data).unwrap();
    dev.mem_write(CODE, code).unwrap();
    dev.mmio_write(regs::PROG_BASE_LO, CODE as u32).unwrap();
    dev.mmio_write(regs::PROG_BASE_HI, 0).unwrap();
    dev.mmio_write(regs::PROG_LEN, (code.len() / 16) as u32).unwrap();
    dev.mmio_write(regs::DOORBELL, 1).unwrap();
    let (result, cycles) = match dev.wait_done(Duration::from_secs(120)) {
        Ok(c) => (Ok(()), c.cycles),
        Err(DeviceError::Trap { code, pc }) => (Err((code, pc, dev.mmio_read64(regs::ERROR_INFO_LO).unwrap())), 0),
        Err(e) => panic!("{who}: {e}"),
    };
    let mut mem = vec![0u8; WINDOW];
    dev.mem_read(0, &mut mem).unwrap();
    let ok = result.is_ok();
    let regs_seen: Vec<u32> = if ok {
        let mut r: Vec<u32> = (0..16).map(|i| dev.mmio_read(regs::DBG_R0 + 4 * i).unwrap()).collect();
        r.push(dev.mmio_read(regs::DBG_PRED).unwrap());
        r
    } else {
        Vec::new()
    };
    let counters = if ok {
        let mut c: Vec<u64> = [regs::INSTRET_LO, regs::BYTES_READ_LO, regs::BYTES_WRITTEN_LO, regs::MACS_LO]
            .iter()
            .map(|&r| dev.mmio_read64(r).unwrap())
            .collect();
        c.push(u64::from(dev.mmio_read(regs::KV_HISTORY_HITS).unwrap()));
        c.push(u64::from(dev.mmio_read(regs::SKIPPED_BLOCKS).unwrap()));
        c.push(u64::from(dev.mmio_read(regs::KV_HISTORY_MISSES).unwrap()));
        c
    } else {
        Vec::new()
    };
    (RunState { result, mem, regs: regs_seen, counters }, cycles)
}

/// Runs the program `text` on the RTL (sim preset) and on the functional simulator over `data` and asserts
/// that they leave the same outcome, device-memory window, registers and counters; then once more on the
/// RTL with a memory that refuses requests at random (`RtlSim::set_backpressure`), which must change
/// nothing but the time. Returns the RTL's cycles with the memory that takes every request.
pub fn compare_with_func(text: &str, data: &[u8]) -> u64 {
    compare_with_func_on(&OverlayConfig::sim(), text, data).0
}

/// [`compare_with_func`] on the top of `config` (a preset of `opu_rtlsim::device::TOPS`); returns the RTL's
/// cycles and the functional simulator's cycle model's.
pub fn compare_with_func_on(config: &OverlayConfig, text: &str, data: &[u8]) -> (u64, u64) {
    let config = config.clone();
    let code = encode_program(&assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"))).unwrap();
    let mut func = opu_sim::FuncSim::new(&config);
    let (want, model) = run_program("functional simulator", &mut func, &code, data);
    let mut cycles = 0;
    for backpressure in [0, 0x9e37_79b9_7f4a_7c15u64 ^ text.len() as u64] {
        let mut rtl = opu_rtlsim::RtlSim::new(&config).unwrap();
        rtl.set_backpressure(backpressure);
        let (got, c) = run_program("RTL", &mut rtl, &code, data);
        let how = if backpressure == 0 { "" } else { " (the memory refusing requests at random)" };
        assert_eq!(got.result, want.result, "outcome{how}\n{text}");
        if let Some(i) = got.mem.iter().zip(&want.mem).position(|(a, b)| a != b) {
            let lo = i & !15;
            panic!(
                "device memory byte {i:#x}{how}: RTL {:02x?} functional {:02x?} (16 bytes from {lo:#x})\n{text}",
                &got.mem[lo..lo + 16],
                &want.mem[lo..lo + 16]
            );
        }
        assert_eq!(got.regs, want.regs, "registers r0..r15, predicates{how}\n{text}");
        assert_eq!(got.counters, want.counters, "INSTRET, BYTES_READ, BYTES_WRITTEN, MACS, KV_HISTORY_HITS, SKIPPED_BLOCKS, KV_HISTORY_MISSES{how}\n{text}");
        if backpressure == 0 {
            cycles = c;
        } else {
            // (every program fetches its instructions through the memory: the refusals must cost time; a
            // trapped run reports no cycles)
            assert!(want.result.is_err() || c > cycles, "no more cycles with a memory that refuses requests ({c}, {cycles})\n{text}");
        }
    }
    (cycles, model)
}

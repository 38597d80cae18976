//! The DMA unit of the RTL (`opu_rtl::dma`, rust-hdl HDL) in rust-hdl's simulator against the functional
//! simulator: the same `load store load2d store2d` instructions on the same device memory and scratchpad,
//! with a memory model that has latency and random back-pressure and a model of the scratchpad's line port. Compared:
//! every byte of the scratchpad window and device-memory window the instructions touch, the byte counters,
//! and each trap's code and ERROR_INFO.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use common::CODE;
use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, encode, Instr};
use opu_hw::regs;
use opu_hw::OverlayConfig;
use opu_rtl::dma::{dma_top, Dma};
use opu_rtl::spm::SPM_BANKS;
use opu_rtl::testing::Rng;
use opu_sim::FuncSim;
use rust_hdl::prelude::*;

/// Device-memory window the tests use (bytes from 0), and the scratchpad window.
const MEM_WINDOW: usize = 1 << 16;
const SPM_WINDOW: usize = 1 << 14;

#[derive(Clone, Debug, Default, PartialEq)]
struct Result {
    spm: Vec<u8>,
    mem: Vec<u8>,
    bytes_read: u64,
    bytes_written: u64,
    /// (index of the trapping instruction, code, info).
    trap: Option<(usize, u32, u64)>,
}

/// Runs `instrs` (with the register value each reads) on the RTL unit from the given memory and scratchpad.
fn run_dma(instrs: Vec<(Instr, u32)>, mem: Vec<u8>, spm: Vec<u8>, seed: u64, latency: u64) -> Result {
    let config = OverlayConfig::sim();
    let out = Arc::new(Mutex::new(Result::default()));
    let tb_out = out.clone();
    let mut sim = simple_sim!(Dma, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        let mut mem = mem.clone();
        let mut spm = spm.clone();
        let mut rng = Rng(seed);
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        let mut pending: VecDeque<(u64, u64)> = VecDeque::new(); // (due, line) of reads
        let mut next = 0usize;
        let mut issued_wait = false;
        let mut trap = None;
        let mut cycle = 0u64;
        let mut rdata = Bits::<256>::default();
        loop {
            // 1. every input of this cycle: the issue (the unit is ready when idle, a registered output),
            //    memory responses due, the memory's ready, the scratchpad read data of last cycle's address
            x.iss_valid.next = false;
            if trap.is_none() && next < instrs.len() && x.iss_ready.val() && !issued_wait {
                let (i, reg) = instrs[next];
                let w = encode(&i).unwrap();
                x.iss_valid.next = true;
                x.iss_word.next = (w as u64).to_bits::<128>() | ((((w >> 64) as u64).to_bits::<128>()) << 64);
                x.iss_pc.next = (next as u64).to_bits();
                x.iss_reg.next = u64::from(reg).to_bits();
                next += 1;
                issued_wait = true;
            } else {
                issued_wait = false;
            }
            x.m_resp.next = false;
            if let Some(&(due, line)) = pending.front() {
                if due <= cycle {
                    let mut d = Bits::<256>::default();
                    for b in 0..32 {
                        d.set_bits::<8>(8 * b, u64::from(mem[(line * 32) as usize + b]).to_bits());
                    }
                    x.m_resp.next = true;
                    x.m_rdata.next = d;
                    pending.pop_front();
                }
            }
            let ready = rng.below(4) != 0;
            x.m_req_ready.next = ready;
            x.s_rdata.next = rdata;
            // 2. let the combinational outputs settle on them
            x = ep.wait(1, x)?;
            // 3. the memory and the scratchpad act on the outputs at the coming edge
            if x.m_req.val() && ready {
                let line = x.m_addr.val().to_u64();
                if x.m_write.val() {
                    let d = x.m_wdata.val();
                    let m = x.m_wmask.val().to_u64();
                    for b in 0..32 {
                        if m >> b & 1 == 1 {
                            mem[(line * 32) as usize + b] = d.get_bits::<8>(8 * b).to_u64() as u8;
                        }
                    }
                } else {
                    pending.push_back((cycle + latency, line));
                }
            }
            // the scratchpad's line port: the 8 words from a word address, line order
            let (raddr, waddr, we, wdata) =
                (x.s_raddr.val().to_u64() as usize, x.s_waddr.val().to_u64() as usize, x.s_we.val().to_u64(), x.s_wdata.val());
            let mut next_rdata = Bits::<256>::default();
            for j in 0..SPM_BANKS {
                let w = (raddr + j) * 4;
                let v = spm.get(w..w + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).unwrap_or(0);
                next_rdata.set_bits::<32>(32 * j, u64::from(v).to_bits());
            }
            for j in 0..SPM_BANKS {
                if we >> j & 1 == 1 {
                    let w = (waddr + j) * 4;
                    spm[w..w + 4].copy_from_slice(&(wdata.get_bits::<32>(32 * j).to_u32()).to_le_bytes());
                }
            }
            rdata = next_rdata;
            wait_clock_cycle!(ep, clock, x);
            cycle += 1;
            if x.trap_valid.val() {
                trap = Some((x.trap_pc.val().to_u64() as usize, x.trap_code.val().to_u32(), x.trap_info.val().to_u64()));
            }
            let done = trap.is_some() || (next == instrs.len() && !issued_wait && x.idle.val() && !x.iss_valid.val());
            if done && pending.is_empty() {
                break;
            }
            assert!(cycle < 200_000, "the DMA unit did not finish");
        }
        *tb_out.lock().unwrap() = Result {
            spm: spm[..SPM_WINDOW].to_vec(),
            mem: mem[..MEM_WINDOW].to_vec(),
            bytes_read: x.bytes_read.val().to_u64(),
            bytes_written: x.bytes_written.val().to_u64(),
            trap,
        };
        ep.done(x)
    });
    sim.run(Box::new(dma_top(&config)), 10_000_000_000_000).unwrap();
    let r = out.lock().unwrap().clone();
    r
}

/// The functional simulator on the same instructions: each preceded by a `seti` of the register it reads.
fn golden(instrs: &[(Instr, u32)], mem: &[u8], spm: &[u8]) -> Result {
    let config = OverlayConfig::sim();
    let mut sim = FuncSim::new(&config);
    sim.mem_write(0, mem).unwrap();
    sim.scratchpad_mut()[..spm.len()].copy_from_slice(spm);
    let mut program = Vec::new();
    let mut index_of_pc = Vec::new();
    for (k, &(i, reg)) in instrs.iter().enumerate() {
        let r = match i {
            Instr::Load { idx, .. } | Instr::Store { idx, .. } => Some(idx),
            _ => None,
        };
        if let Some(r) = r {
            program.push(Instr::Seti { rd: r, imm: reg });
            index_of_pc.push(usize::MAX);
        }
        program.push(i);
        index_of_pc.push(k);
    }
    program.push(Instr::End {});
    // the program lives past the window the tests compare
    let code_at = CODE + MEM_WINDOW as u64 * 4;
    sim.load_program(code_at, &program).unwrap();
    let trap = match sim.run(&[]) {
        Ok(_) => None,
        Err(DeviceError::Trap { code, pc }) => {
            let lo = sim.mmio_read(regs::ERROR_INFO_LO).unwrap();
            let hi = sim.mmio_read(regs::ERROR_INFO_LO + 4).unwrap();
            Some((index_of_pc[pc as usize], code as u32, u64::from(hi) << 32 | u64::from(lo)))
        }
        Err(e) => panic!("{e}"),
    };
    let stats = sim.stats();
    Result {
        spm: sim.scratchpad()[..SPM_WINDOW].to_vec(),
        mem: sim.memory()[..MEM_WINDOW].to_vec(),
        bytes_read: stats.bytes_read,
        bytes_written: stats.bytes_written,
        trap,
    }
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn check(text: &str, regs_read: &[u32], seeds: &[u64]) -> Result {
    let program = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let instrs: Vec<(Instr, u32)> =
        program.iter().zip(regs_read.iter().chain(std::iter::repeat(&0))).map(|(&i, &r)| (i, r)).collect();
    let mut rng = Rng(0xd3a0_0001);
    let mem = random_bytes(&mut rng, MEM_WINDOW);
    let spm = random_bytes(&mut rng, SPM_WINDOW);
    let want = golden(&instrs, &mem, &spm);
    let mut last = None;
    for &seed in seeds {
        for latency in [1, 7] {
            let got = run_dma(instrs.clone(), mem.clone(), spm.clone(), seed, latency);
            assert_eq!(got.trap, want.trap, "trap (instruction, code, info), seed {seed}\n{text}");
            assert_eq!((got.bytes_read, got.bytes_written), (want.bytes_read, want.bytes_written), "byte counters\n{text}");
            if let Some(i) = got.spm.iter().zip(&want.spm).position(|(a, b)| a != b) {
                panic!("scratchpad byte {i:#x}: {} != {} (seed {seed}, latency {latency})\n{text}", got.spm[i], want.spm[i]);
            }
            if let Some(i) = got.mem.iter().zip(&want.mem).position(|(a, b)| a != b) {
                panic!("memory byte {i:#x}: {} != {} (seed {seed}, latency {latency})\n{text}", got.mem[i], want.mem[i]);
            }
            last = Some(got);
        }
    }
    last.unwrap()
}

#[test]
fn loads_and_stores_at_every_word_offset_and_length() {
    // scratchpad word offsets 0..8 against line-aligned memory; lengths from one word to several lines
    let mut text = String::new();
    for (k, off) in (0..8).enumerate() {
        let words = [1, 7, 8, 9, 16, 23][k % 6];
        text += &format!("load spm={} mem={} bytes={} idx=r0 stride=0\n", 0x100 * k + off, 0x10 + 3 * k, 4 * words);
        text += &format!("store spm={} mem={} bytes={} idx=r0 stride=0\n", 0x80 * k + 3 + off, 0x200 + 5 * k, 4 * (words + 5));
    }
    let got = check(&text, &[], &[1, 2]);
    assert!(got.bytes_read > 0 && got.bytes_written > 0);
}

#[test]
fn indexed_loads_gather_rows_by_register() {
    // an embedding-style gather: line mem + r[idx] * stride
    let text = "
        load spm=0x10 mem=0x40 bytes=96 idx=r8 stride=3
        store spm=0x13 mem=0x300 bytes=44 idx=r9 stride=17
        load spm=0x205 mem=0 bytes=128 idx=r8 stride=0x41
    ";
    check(text, &[5, 7, 0x1f], &[3]);
}

#[test]
fn strided_2d_transfers_row_by_row() {
    let text = "
        load2d spm=0x21 mem=0x100 row_bytes=40 rows=5 mem_stride=3 spm_stride=13
        store2d spm=0x22 mem=0x400 row_bytes=76 rows=4 mem_stride=7 spm_stride=9
        load2d spm=0x500 mem=0x100 row_bytes=4 rows=9 mem_stride=0 spm_stride=1
        store2d spm=0x40 mem=0x600 row_bytes=64 rows=3 mem_stride=1 spm_stride=3 ; rows overlap: later rows win
    ";
    check(text, &[], &[4, 5]);
}

#[test]
fn traps_equal_the_functional_simulator() {
    let config = OverlayConfig::sim();
    let spm_words = config.scratchpad_bytes / 4;
    let cases = [
        // zero and unaligned sizes
        "load spm=0 mem=0 bytes=0 idx=r0 stride=0".to_string(),
        "store spm=0 mem=0 bytes=6 idx=r0 stride=0".to_string(),
        "load2d spm=0 mem=0 row_bytes=8 rows=0 mem_stride=1 spm_stride=1".to_string(),
        // scratchpad overflow, the first faulting byte
        format!("load spm={} mem=0 bytes=64 idx=r0 stride=0", spm_words - 4),
        // device memory overflow: a line past 2^64 bytes (ERROR_INFO saturates), the last line
        "store spm=0 mem=0xFFFFFFFF bytes=64 idx=r8 stride=0xFFFFFFFF".to_string(),
        format!("load spm=0 mem={} bytes=64 idx=r0 stride=0", config.device_memory_bytes / 32 - 1),
        // a 2-D transfer whose third row leaves the scratchpad: nothing is copied
        format!("load2d spm={} mem=0 row_bytes=32 rows=5 mem_stride=1 spm_stride=8", spm_words - 24),
        // its fourth row leaves device memory
        format!("store2d spm=0 mem={} row_bytes=32 rows=5 mem_stride=1 spm_stride=8", config.device_memory_bytes / 32 - 3),
    ];
    for (k, case) in cases.iter().enumerate() {
        // a good transfer first, then the trapping one
        let text = format!("load spm=0x31 mem=0x20 bytes=36 idx=r0 stride=0\n{case}");
        let got = check(&text, &[0, 0xFFFF_FFFF], &[k as u64 + 10]);
        assert!(got.trap.is_some_and(|t| t.0 == 1), "{case}: {:?}", got.trap);
    }
}

//! The controller core of the RTL (`opu_rtl::ctrl::core`, rust-hdl HDL) in rust-hdl's simulator, against the
//! functional simulator on the same programs: scalar registers, predicates, CSRs, INSTRET, the instructions
//! issued to the units, and every trap the core raises (code, pc, info). The units are stubs in the test
//! bench: they accept what the core issues and, after a delay, write back what the functional simulator says
//! (a `route` decision, an `argmax` index) or trap where it trapped, so the core's scoreboard, skip, drain and
//! trap arbitration are checked against the golden model's program order. Fetch goes through a memory model
//! with latency, and the MMIO register file is checked against the functional simulator's register map.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use common::CODE;
use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, decode, encode_program, Csr, Instr, INSTR_BYTES};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;
use opu_rtl::ctrl::core::{core_top, Core, N_UNITS};
use opu_rtl::ctrl::decode::Unit;
use opu_rtl::ctrl::mmio::{mmio_top, Mmio};
use opu_rtl::testing::Rng;
use opu_sim::FuncSim;
use rust_hdl::prelude::*;

/// What the stub units do with the instruction at a pc.
#[derive(Clone, Copy, Debug)]
enum UnitAction {
    /// Write back predicate `p[idx] = v`.
    Pred(u8, bool),
    /// Write back register `r[idx] = v`.
    Reg(u8, u32),
    /// Trap with (code, info).
    Trap(ErrorCode, u64),
    /// Never finish.
    Hang,
}

#[derive(Clone)]
struct Bench {
    mem: BTreeMap<u64, u8>,
    prog_base: u64,
    prog_len: u32,
    args: [u32; 8],
    watchdog: u32,
    spm: Vec<u8>,
    actions: BTreeMap<u32, UnitAction>,
    /// Cycles from a fetch request to its data, and from issue to a unit's write-back.
    fetch_latency: u64,
    unit_latency: u64,
    /// Random back-pressure on the fetch and issue ports.
    stall_seed: Option<u64>,
    max_cycles: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Outcome {
    error: Option<(u32, u32, u64)>,
    instret: u64,
    regs: Vec<u32>,
    preds: u32,
    csrs: Vec<u32>,
    /// (pc, mnemonic, register operand) of every instruction issued to a unit, in order.
    issued: Vec<(u32, String, u32)>,
    /// CSR `head_dim` of the snapshot each issued instruction carried.
    issued_head_dim: Vec<u32>,
    cycles: u64,
}

fn mem_line(mem: &BTreeMap<u64, u8>, line: u64) -> Bits<256> {
    let mut b = Bits::<256>::default();
    for i in 0..32u64 {
        let byte = mem.get(&(line * 32 + i)).copied().unwrap_or(0);
        b.set_bits::<8>(8 * i as usize, u64::from(byte).to_bits());
    }
    b
}

fn run_core(bench: Bench) -> Outcome {
    let config = OverlayConfig::sim();
    let out = Arc::new(Mutex::new(Outcome::default()));
    let tb_out = out.clone();
    let mut sim = simple_sim!(Core, clock, 100_000_000, ep, {
        let b = bench.clone();
        let mut x = ep.init()?;
        let mut rng = Rng(b.stall_seed.unwrap_or(1));
        let stall = b.stall_seed.is_some();
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        x.prog_base.next = b.prog_base.to_bits();
        x.prog_len.next = u64::from(b.prog_len).to_bits();
        let mut args = Bits::<256>::default();
        for (i, a) in b.args.iter().enumerate() {
            args.set_bits::<32>(32 * i, u64::from(*a).to_bits());
        }
        x.args.next = args;
        x.watchdog.next = u64::from(b.watchdog).to_bits();
        x.units_idle.next = true;
        x.start.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.start.next = false;

        let mut fetches: VecDeque<(u64, u64)> = VecDeque::new(); // (due cycle, line)
        let mut jobs: VecDeque<(u64, u32, Option<UnitAction>)> = VecDeque::new(); // (due, pc, action)
        let mut issued = Vec::new();
        let mut issued_head_dim = Vec::new();
        let mut cycle = 0u64;
        let mut finished = None;
        while cycle < b.max_cycles {
            // memory: answer the oldest fetch when due
            x.f_resp.next = false;
            if let Some(&(due, line)) = fetches.front() {
                if due <= cycle {
                    x.f_resp.next = true;
                    x.f_data.next = mem_line(&b.mem, line);
                    fetches.pop_front();
                }
            }
            let ready_f = !stall || rng.below(3) != 0;
            x.f_req_ready.next = ready_f;
            if x.f_req.val() && ready_f {
                fetches.push_back((cycle + b.fetch_latency, x.f_addr.val().to_u64()));
            }
            // units: write back / trap when the oldest job is due (in order)
            x.rwb_valid.next = false;
            x.pwb_valid.next = false;
            x.utrap_valid.next = false;
            x.progress.next = false;
            if let Some(&(due, pc, action)) = jobs.front() {
                if due <= cycle && !matches!(action, Some(UnitAction::Hang)) {
                    match action {
                        Some(UnitAction::Pred(i, v)) => {
                            x.pwb_valid.next = true;
                            x.pwb_idx.next = u64::from(i).to_bits();
                            x.pwb_data.next = v;
                        }
                        Some(UnitAction::Reg(i, v)) => {
                            x.rwb_valid.next = true;
                            x.rwb_idx.next = u64::from(i).to_bits();
                            x.rwb_data.next = u64::from(v).to_bits();
                        }
                        Some(UnitAction::Trap(code, info)) => {
                            x.utrap_valid.next = true;
                            x.utrap_code.next = (code as u64).to_bits();
                            x.utrap_pc.next = u64::from(pc).to_bits();
                            x.utrap_info.next = info.to_bits();
                        }
                        _ => {}
                    }
                    x.progress.next = true;
                    jobs.pop_front();
                }
            }
            x.units_idle.next = jobs.is_empty();
            // issue port
            let ready_i = !stall || rng.below(4) != 0;
            x.iss_ready.next = if ready_i { ((1u64 << N_UNITS) - 1).to_bits() } else { 0u64.to_bits() };
            if x.iss_valid.val().any() && ready_i {
                let word = x.iss_word.val();
                let w = u128::from(word.get_bits::<64>(0).to_u64()) | u128::from(word.get_bits::<64>(64).to_u64()) << 64;
                let instr = decode(w).expect("the core issues only legal words");
                let pc = x.iss_pc.val().to_u32();
                let unit = Unit::of_spec(instr.spec()).unwrap();
                assert_eq!(x.iss_valid.val().to_u64(), 1 << unit.issue_bit().unwrap(), "one-hot valid of {instr:?}");
                issued.push((pc, instr.mnemonic().to_string(), x.iss_reg.val().to_u32()));
                issued_head_dim.push(x.iss_csr.val().get_bits::<32>(32 * Csr::HeadDim as usize).to_u32());
                jobs.push_back((cycle + b.unit_latency, pc, b.actions.get(&pc).copied()));
            }
            // scratchpad read port of ldr: the word at the address the core presents
            let a = 4 * x.spm_addr.val().to_u64() as usize;
            let word = b.spm.get(a..a + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap())).unwrap_or(0);
            x.spm_data.next = u64::from(word).to_bits();
            wait_clock_cycle!(ep, clock, x);
            cycle += 1;
            if x.fin.val() {
                finished = Some(if x.fin_error.val() {
                    Some((x.err_code.val().to_u32(), x.err_pc.val().to_u32(), x.err_info.val().to_u64()))
                } else {
                    None
                });
                break;
            }
        }
        let error = finished.unwrap_or_else(|| panic!("no completion in {} cycles", b.max_cycles));
        let mut o = Outcome { error, issued, issued_head_dim, cycles: x.cycles.val().to_u64(), ..Outcome::default() };
        o.instret = x.instret.val().to_u64();
        let rf = x.dbg_rf.val();
        o.regs = (0..16).map(|i| rf.get_bits::<32>(32 * i).to_u32()).collect();
        o.preds = x.dbg_preds.val().to_u32();
        let csrs = x.dbg_csrs.val();
        o.csrs = (0..regs::DBG_CSRS as usize).map(|c| csrs.get_bits::<32>(32 * c).to_u32()).collect();
        *tb_out.lock().unwrap() = o;
        ep.done(x)
    });
    sim.run(Box::new(core_top(&config)), 1_000_000_000_000).unwrap();
    let o = out.lock().unwrap().clone();
    o
}

/// The functional simulator's outcome of the same program and data; its unit results become the stubs'
/// actions.
struct Golden {
    outcome: Outcome,
}

fn golden(sim: &mut FuncSim, b: &Bench) -> Golden {
    let r = sim.run(&b.args);
    let error = match r {
        Ok(_) => None,
        Err(DeviceError::Trap { code, pc }) => {
            let lo = sim.mmio_read(regs::ERROR_INFO_LO).unwrap();
            let hi = sim.mmio_read(regs::ERROR_INFO_LO + 4).unwrap();
            Some((code as u32, pc, u64::from(hi) << 32 | u64::from(lo)))
        }
        Err(e) => panic!("{e}"),
    };
    let stats = sim.stats();
    let outcome = Outcome {
        error,
        instret: stats.instret,
        regs: (0..16).map(|i| sim.reg(i)).collect(),
        preds: (0..8).map(|i| u32::from(sim.pred(i)) << i).sum(),
        csrs: (0..regs::DBG_CSRS).map(|c| sim.mmio_read(regs::DBG_CSR0 + 4 * c).unwrap()).collect(),
        issued: Vec::new(),
        issued_head_dim: Vec::new(),
        cycles: 0,
    };
    Golden { outcome }
}

/// A bench over `text` at [`CODE`] with the functional simulator's memory and scratchpad.
fn bench(sim: &FuncSim, program: &[Instr], args: [u32; 8]) -> Bench {
    let code = encode_program(program).unwrap();
    let mut mem = BTreeMap::new();
    for (i, &byte) in code.iter().enumerate() {
        mem.insert(CODE + i as u64, byte);
    }
    Bench {
        mem,
        prog_base: CODE,
        prog_len: program.len() as u32,
        args,
        watchdog: regs::WATCHDOG_DEFAULT,
        spm: sim.scratchpad()[..4096].to_vec(),
        actions: BTreeMap::new(),
        fetch_latency: 6,
        unit_latency: 9,
        stall_seed: None,
        max_cycles: 20_000,
    }
}

/// Runs `text` on the functional simulator and on the core, the stubs doing what the functional simulator
/// did (`actions`), and compares everything the core owns.
fn check(sim: &mut FuncSim, text: &str, args: [u32; 8], actions: &[(u32, UnitAction)], stall_seed: Option<u64>) -> Outcome {
    let program = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    sim.load_program(CODE, &program).unwrap();
    let mut b = bench(sim, &program, args);
    b.actions = actions.iter().copied().collect();
    b.stall_seed = stall_seed;
    let want = golden(sim, &b).outcome;
    let got = run_core(b);
    assert_eq!(got.error, want.error, "trap (code, pc, info)\n{text}");
    if want.error.is_none() {
        assert_eq!(got.instret, want.instret, "INSTRET\n{text}");
        assert_eq!(got.regs, want.regs, "registers\n{text}");
        assert_eq!(got.preds, want.preds, "predicates\n{text}");
        assert_eq!(got.csrs, want.csrs, "CSRs\n{text}");
        // what was issued to the units is what the functional simulator executed there
        let stats = sim.stats();
        let mut issued: BTreeMap<String, u64> = BTreeMap::new();
        for (_, m, _) in &got.issued {
            *issued.entry(m.clone()).or_default() += 1;
        }
        let ran: BTreeMap<String, u64> = stats
            .by_mnemonic
            .iter()
            .filter(|(m, _)| {
                let s = opu_hw::isa::spec_by_mnemonic(m).unwrap();
                Unit::of_class(s.class) != Some(Unit::Core)
            })
            .map(|(m, n)| (m.clone(), *n))
            .collect();
        assert_eq!(issued, ran, "instructions issued to the units\n{text}");
    }
    got
}

const NO_ARGS: [u32; 8] = [0; 8];

#[test]
fn scalar_instructions_equal_the_functional_simulator() {
    let mut sim = common::sim();
    let text = "
        seti rd=r1 imm=0xFFFFFFFF
        addi rd=r2 rs=r1 imm=2          ; wraps to 1
        muli rd=r3 rs=r1 imm=0x12345678 ; -0x12345678 mod 2^32
        seti rd=r4 imm=0xDEADBEEF
        muli rd=r5 rs=r4 imm=0xCAFEF00D
        addi rd=r0 rs=r4 imm=1          ; r0 stays 0
        addi rd=r6 rs=r8 imm=0x100      ; arguments in r8..r15
        muli rd=r7 rs=r15 imm=3
        csrw csr=head_dim rs=r2 imm=63
        csrw csr=kv_stride rs=r9 imm=0xFFFFFFFF
        csrw csr=kv_present rs=r0 imm=0x1234
        addi rd=r15 rs=r15 imm=1
        barrier
        end
    ";
    for seed in [None, Some(7)] {
        let got = check(&mut sim, text, [5, 17, 0, 0, 0, 0, 0, 0x8000_0001], &[], seed);
        assert_eq!(got.regs[5], 0xDEAD_BEEFu32.wrapping_mul(0xCAFE_F00D));
        assert_eq!(got.csrs[3], 0x1234);
    }
}

#[test]
fn csrs_start_with_kv_present_all_ones_and_registers_from_the_arguments() {
    let mut sim = common::sim();
    let got = check(&mut sim, "end", [1, 2, 3, 4, 5, 6, 7, 8], &[], None);
    assert_eq!(&got.regs[8..], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(got.csrs[opu_hw::isa::Csr::KvPresent as usize], 0xFFFF_FFFF);
    assert_eq!(got.instret, 1);
}

/// Route weights for the functional simulator: x = 0 (a zeroed scratchpad), so the decision is the biases'.
fn put_router(sim: &mut FuncSim, line: u64, cols: usize, skip: bool) {
    let mut w = vec![0u8; 4 * cols];
    let (b_exec, b_skip) = if skip { (0u16, 0x3C00u16) } else { (0x3C00, 0) };
    w.extend_from_slice(&b_exec.to_le_bytes());
    w.extend_from_slice(&b_skip.to_le_bytes());
    sim.mem_write(line * 32, &w).unwrap();
}

#[test]
fn skip_waits_for_the_route_decision_and_skips_blocks() {
    let mut sim = common::sim();
    put_router(&mut sim, 0x1000, 32, true);
    put_router(&mut sim, 0x1100, 32, false);
    // pcs: 0 route(skip) 1 skip 2..4 the skipped block, 5 route(exec) 6 skip 7.. executed
    let text = "
        route pd=p1 pos=r0 src=0 w=0x1000 cols=32
        skip pred=p1 count=3
        seti rd=r1 imm=11
        load spm=0x100 mem=0x2000 bytes=64 idx=r0 stride=0
        seti rd=r2 imm=22
        route pd=p2 pos=r0 src=0 w=0x1100 cols=32
        skip pred=p2 count=2
        seti rd=r3 imm=33
        load spm=0x200 mem=0x2000 bytes=32 idx=r9 stride=4
        skip pred=p1 count=1
        seti rd=r4 imm=44
        seti rd=r5 imm=55
        end
    ";
    let actions = [(0, UnitAction::Pred(1, true)), (5, UnitAction::Pred(2, false))];
    for seed in [None, Some(3), Some(11)] {
        let got = check(&mut sim, text, [0, 2, 0, 0, 0, 0, 0, 0], &actions, seed);
        assert_eq!(got.preds, 0b10);
        let pcs: Vec<u32> = got.issued.iter().map(|i| i.0).collect();
        assert_eq!(pcs, [0, 5, 8], "the skipped block's load is not issued");
        assert_eq!(got.issued[2].2, 2, "load carries r[idx] = r9 = 2");
    }
}

#[test]
fn a_register_written_by_a_unit_is_read_only_after_its_write_back() {
    let mut sim = common::sim();
    // argmax of [0, 5, 2, 1] (FP16) at scratchpad word 0x40 -> 1
    let vals: Vec<u8> = [0u16, 0x4500, 0x4000, 0x3C00].iter().flat_map(|h| h.to_le_bytes()).collect();
    common::spm_put(&mut sim, 0x40, &vals);
    let text = "
        argmax dt=f16 rd=r3 dst=0x80 src=0x40 n=4
        addi rd=r4 rs=r3 imm=100     ; waits for r3
        seti rd=r5 imm=7
        argmax dt=f16 rd=r5 dst=0x81 src=0x40 n=4
        seti rd=r5 imm=9             ; WAW: waits for the argmax write-back
        ldr rd=r6 spm=0x40           ; waits for the units to be idle
        argmax dt=f16 rd=r7 dst=0x82 src=0x40 n=4
        load spm=0x100 mem=0x2000 bytes=32 idx=r7 stride=8 ; issued with r7 = 1
        end
    ";
    let actions = [(0, UnitAction::Reg(3, 1)), (3, UnitAction::Reg(5, 1)), (6, UnitAction::Reg(7, 1))];
    for seed in [None, Some(5)] {
        let got = check(&mut sim, text, NO_ARGS, &actions, seed);
        assert_eq!(got.regs[4], 101);
        assert_eq!(got.regs[5], 9);
        assert_eq!(got.regs[6], u32::from_le_bytes(vals[..4].try_into().unwrap()));
        assert_eq!(got.issued.last().unwrap(), &(7, "load".to_string(), 1));
    }
}

#[test]
fn core_traps_equal_the_functional_simulator() {
    let mut sim = common::sim();
    // running off the end of the program
    check(&mut sim, "seti rd=r1 imm=1\nseti rd=r2 imm=2", NO_ARGS, &[], None);
    // ldr outside the scratchpad (4096 words would be 16 KiB; the sim preset has 1 MiB: word 2^18 is outside)
    let got = check(&mut sim, "seti rd=r1 imm=1\nldr rd=r2 spm=0x40000\nend", NO_ARGS, &[], None);
    assert_eq!(got.error.unwrap().0, ErrorCode::ScratchpadOutOfRange as u32);
    // a skip past PROG_LEN
    put_router(&mut sim, 0x1000, 32, true);
    let got = check(&mut sim, "route pd=p0 pos=r0 src=0 w=0x1000 cols=32\nskip pred=p0 count=40\nend", NO_ARGS, &[(0, UnitAction::Pred(0, true))], None);
    assert_eq!(got.error, Some((ErrorCode::PcOutOfRange as u32, 42, 42)));
}

#[test]
fn illegal_words_trap_with_the_word() {
    let mut sim = common::sim();
    let good = assemble("seti rd=r1 imm=5\nend").unwrap();
    let mut code = encode_program(&good).unwrap();
    let cases: Vec<u128> = vec![
        0,                                    // opcode 0: zeroed memory
        0xEE,                                 // unknown opcode
        u128::from_le_bytes(code[..16].try_into().unwrap()) | 1 << 100, // reserved bit of seti
        // matmul with fmt = 5 (3 bits, codes 0..3 valid)
        u128::from(opu_rtl::ctrl::decode::opcode("matmul")) | 5 << 8,
        // csrw with a csr past the last
        u128::from(opu_rtl::ctrl::decode::opcode("csrw")) | (opu_hw::isa::Csr::ALL.len() as u128) << 8,
    ];
    for w in cases {
        code[16..32].copy_from_slice(&w.to_le_bytes());
        let program_bytes = code.clone();
        sim.mem_write(CODE, &program_bytes).unwrap();
        sim.mmio_write(regs::PROG_LEN, 2).unwrap();
        let mut b = bench(&sim, &good, NO_ARGS);
        for (i, &byte) in program_bytes.iter().enumerate() {
            b.mem.insert(CODE + i as u64, byte);
        }
        let want = golden(&mut sim, &b).outcome.error;
        assert_eq!(want, Some((ErrorCode::IllegalInstruction as u32, 1, w as u64)), "{w:#x}");
        assert_eq!(run_core(b).error, want, "{w:#x}");
    }
}

#[test]
fn fetch_outside_device_memory_traps_mem_out_of_range() {
    let mut sim = common::sim();
    let config = OverlayConfig::sim();
    let base = config.device_memory_bytes - 2 * INSTR_BYTES as u64;
    let program = assemble("seti rd=r1 imm=1\nseti rd=r2 imm=2\nend").unwrap();
    let code = encode_program(&program).unwrap();
    sim.mem_write(base, &code[..32]).unwrap();
    sim.mmio_write(regs::PROG_BASE_LO, base as u32).unwrap();
    sim.mmio_write(regs::PROG_BASE_HI, (base >> 32) as u32).unwrap();
    sim.mmio_write(regs::PROG_LEN, 3).unwrap();
    let mut b = bench(&sim, &program, NO_ARGS);
    b.mem = code[..32].iter().enumerate().map(|(i, &x)| (base + i as u64, x)).collect();
    b.prog_base = base;
    let want = golden(&mut sim, &b).outcome.error;
    assert_eq!(want, Some((ErrorCode::MemOutOfRange as u32, 2, config.device_memory_bytes)));
    assert_eq!(run_core(b).error, want);
}

#[test]
fn a_unit_trap_is_reported_at_its_pc_after_the_units_drain() {
    let mut sim = common::sim();
    // the load at pc 2 reads outside device memory; later instructions were already issued to other units
    let text = "
        seti rd=r1 imm=1
        load spm=0x100 mem=0x2000 bytes=32 idx=r0 stride=0
        load spm=0x100 mem=0xFFFFFFF0 bytes=1024 idx=r0 stride=0
        route pd=p1 pos=r0 src=0 w=0x1000 cols=32
        seti rd=r2 imm=2
        end
    ";
    put_router(&mut sim, 0x1000, 32, true);
    let program = assemble(text).unwrap();
    sim.load_program(CODE, &program).unwrap();
    let b = bench(&sim, &program, NO_ARGS);
    let want = golden(&mut sim, &b).outcome.error.unwrap();
    assert_eq!((want.0, want.1), (ErrorCode::MemOutOfRange as u32, 2));
    let actions = [(2, UnitAction::Trap(ErrorCode::MemOutOfRange, want.2)), (3, UnitAction::Pred(1, true))];
    for seed in [None, Some(9)] {
        let got = check(&mut sim, text, NO_ARGS, &actions, seed);
        assert_eq!(got.error, Some(want));
    }
}

#[test]
fn a_unit_trap_reported_after_a_later_core_trap_wins() {
    let mut sim = common::sim();
    // the load at pc 1 traps in its unit long after the core has reached the illegal word at pc 3
    let good = assemble("seti rd=r1 imm=1\nload spm=0x100 mem=0xFFFFFFF0 bytes=64 idx=r0 stride=0\nseti rd=r2 imm=2\nend").unwrap();
    let mut code = encode_program(&good).unwrap();
    code[48..64].copy_from_slice(&0xEEu128.to_le_bytes());
    sim.mem_write(CODE, &code).unwrap();
    sim.mmio_write(regs::PROG_LEN, 4).unwrap();
    let mut b = bench(&sim, &good, NO_ARGS);
    for (i, &byte) in code.iter().enumerate() {
        b.mem.insert(CODE + i as u64, byte);
    }
    let want = golden(&mut sim, &b).outcome.error.unwrap();
    assert_eq!((want.0, want.1), (ErrorCode::MemOutOfRange as u32, 1));
    b.actions.insert(1, UnitAction::Trap(ErrorCode::MemOutOfRange, want.2));
    b.unit_latency = 60;
    assert_eq!(run_core(b).error, Some(want));
}

#[test]
fn the_watchdog_ends_a_run_whose_unit_never_finishes() {
    let mut sim = common::sim();
    let program = assemble("seti rd=r1 imm=1\nload spm=0x100 mem=0x2000 bytes=32 idx=r0 stride=0\nbarrier\nend").unwrap();
    let mut b = bench(&sim, &program, NO_ARGS);
    b.watchdog = 200;
    b.actions.insert(1, UnitAction::Hang);
    let got = run_core(b.clone());
    let (code, pc, _) = got.error.expect("a trap");
    assert_eq!(code, ErrorCode::Watchdog as u32);
    assert_eq!(pc, 2, "the barrier waits on the hung load");
    assert!((200..260).contains(&got.cycles), "{} cycles", got.cycles);
    // the functional simulator never stalls: the same program ends
    sim.load_program(CODE, &program).unwrap();
    assert!(golden(&mut sim, &b).outcome.error.is_none());
}

#[test]
fn issue_bus_carries_the_csr_snapshot_of_its_instruction() {
    // a csrw after an attn must not change the CSRs the attn was issued with: the snapshot is taken at issue
    let config = OverlayConfig::sim();
    let program = assemble(
        "csrw csr=head_dim rs=r0 imm=64\nattn group=3 kvh=0 len=r9 dst=0x100 q=0x200 k=0x1000 v=0x2000\ncsrw csr=head_dim rs=r0 imm=32\nend",
    )
    .unwrap();
    let sim = FuncSim::new(&config);
    let b = bench(&sim, &program, [0, 4, 0, 0, 0, 0, 0, 0]);
    let got = run_core(b);
    assert_eq!(got.issued, vec![(1, "attn".to_string(), 4)]);
    assert_eq!(got.issued_head_dim, vec![64], "the snapshot taken at issue");
    assert_eq!(got.csrs[0], 32);
}

// ---- the register file

/// Host operations on the register file: (write?, offset, value) with the value read back for reads.
fn run_mmio(config: &OverlayConfig, ops: Vec<(bool, u32, u32)>, fin_after: Option<(usize, bool, u32, u32, u64)>) -> Vec<u32> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let tb_out = out.clone();
    let mut sim = simple_sim!(Mmio, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        x.reset.next = true;
        wait_clock_cycle!(ep, clock, x);
        x.reset.next = false;
        x.cycles.next = 0x1_2345_6789u64.to_bits();
        x.instret.next = 0xA_0000_0003u64.to_bits();
        let mut reads = Vec::new();
        for (i, &(write, off, val)) in ops.iter().enumerate() {
            x.addr.next = u64::from(off).to_bits();
            x.wdata.next = u64::from(val).to_bits();
            x.write.next = write;
            x.read.next = !write;
            let mut rf = Bits::<512>::default();
            rf.set_bits::<32>(32 * 3, 0xDB03u64.to_bits());
            x.dbg_rf.next = rf;
            let mut csrs = Bits::<{ opu_rtl::ctrl::core::CSR_BUS }>::default();
            csrs.set_bits::<32>(32, 0xDBC1u64.to_bits());
            x.dbg_csrs.next = csrs;
            wait_clock_cycle!(ep, clock, x);
            x.write.next = false;
            x.read.next = false;
            if !write {
                assert!(x.rvalid.val());
                reads.push(x.rdata.val().to_u32());
            }
            if let Some((at, err, code, pc, info)) = fin_after {
                if at == i {
                    x.fin.next = true;
                    x.fin_error.next = err;
                    x.err_code.next = u64::from(code).to_bits();
                    x.err_pc.next = u64::from(pc).to_bits();
                    x.err_info.next = info.to_bits();
                    wait_clock_cycle!(ep, clock, x);
                    x.fin.next = false;
                }
            }
            if write && off == regs::DOORBELL {
                assert!(x.start.val(), "doorbell starts the core");
            }
        }
        *tb_out.lock().unwrap() = reads;
        ep.done(x)
    });
    sim.run(Box::new(mmio_top(config)), 1_000_000_000_000).unwrap();
    let r = out.lock().unwrap().clone();
    r
}

#[test]
fn register_file_reads_what_the_functional_simulator_reads() {
    let config = OverlayConfig::sim();
    let mut sim = FuncSim::new(&config);
    let writes = [
        (regs::PROG_BASE_LO, 0x1234_567F),
        (regs::PROG_BASE_HI, 0x9),
        (regs::PROG_LEN, 77),
        (regs::ARG0 + 12, 0xABCD),
        (regs::ARG0 + 28, 0xFFFF_FFFF),
        (regs::WATCHDOG, 1000),
        (regs::CONTROL, regs::control::IRQ_ENABLE),
        (regs::ID, 5), // read-only: ignored
        (0x3F0, 1),    // unmapped: ignored
    ];
    let reads = [
        regs::ID,
        regs::VERSION,
        regs::CONFIG_HASH_LO + 4, // HI before LO: 0
        regs::CONFIG_HASH_LO,
        regs::CONFIG_HASH_LO + 4,
        regs::CONTROL,
        regs::STATUS,
        regs::PROG_BASE_LO,
        regs::PROG_BASE_HI,
        regs::PROG_LEN,
        regs::WATCHDOG,
        regs::ARG0 + 12,
        regs::ARG0 + 28,
        regs::ARG0 + 4,
        regs::CFG_PE_LANES,
        regs::CFG_DOT_WIDTH,
        regs::CFG_SCRATCHPAD_BYTES,
        regs::CFG_KV_HISTORY_SLOTS,
        regs::ERROR_CODE,
        0x3F0,
    ];
    let mut ops: Vec<(bool, u32, u32)> = writes.iter().map(|&(o, v)| (true, o, v)).collect();
    ops.extend(reads.iter().map(|&o| (false, o, 0)));
    let got = run_mmio(&config, ops, None);
    for (o, v) in writes {
        if regs::register_at(o).is_some() {
            sim.mmio_write(o, v).unwrap();
        }
    }
    for (i, &o) in reads.iter().enumerate() {
        let want = if regs::register_at(o).is_some() { sim.mmio_read(o).unwrap() } else { 0 };
        assert_eq!(got[i], want, "register {o:#x} ({:?})", regs::register_at(o).map(|r| r.name));
    }
    assert_eq!(got[0], regs::ID_VALUE);
    assert_eq!(got[4] as u64, config.hash() >> 32);
}

#[test]
fn completion_sets_status_irq_and_doorbell_clears_them() {
    let config = OverlayConfig::sim();
    let ops = vec![
        (true, regs::CONTROL, regs::control::IRQ_ENABLE),
        (true, regs::DOORBELL, 1),
        (false, regs::STATUS, 0),      // fin(error) after this op
        (false, regs::STATUS, 0),      // ERROR
        (false, regs::IRQ_STATUS, 0),  // error bit
        (false, regs::ERROR_INFO_LO + 4, 0), // HI before LO: 0
        (false, regs::ERROR_INFO_LO, 0),
        (false, regs::ERROR_INFO_LO + 4, 0),
        (false, regs::CYCLES_LO, 0),
        (false, regs::CYCLES_LO + 4, 0),
        (true, regs::IRQ_STATUS, 2),   // W1C
        (false, regs::IRQ_STATUS, 0),
        (true, regs::DOORBELL, 1),     // clears ERROR
        (false, regs::STATUS, 0),
        (false, regs::DBG_R0 + 12, 0), // the debug window reads the core
        (false, regs::DBG_CSR0 + 4, 0),
    ];
    let got = run_mmio(&config, ops, Some((2, true, ErrorCode::MemOutOfRange as u32, 7, 0x5_0000_0010)));
    assert_eq!(got[0], regs::status::BUSY, "STATUS right after the doorbell: busy (the start pulse)");
    assert_eq!(got[1], regs::status::ERROR);
    assert_eq!(got[2], regs::irq::ERROR);
    assert_eq!(got[3], 0);
    assert_eq!(got[4], 0x10);
    assert_eq!(got[5], 5);
    assert_eq!((got[6], got[7]), (0x2345_6789, 1));
    assert_eq!(got[8], 0);
    assert_eq!(got[9], regs::status::BUSY, "the second doorbell cleared ERROR; its run is busy");
    assert_eq!(got[10], 0xDB03);
    assert_eq!(got[11], 0xDBC1);
}

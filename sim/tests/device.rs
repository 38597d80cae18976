//! The register map and the run protocol of docs/registers.md through the `Device` trait.

mod common;

use std::time::Duration;

use common::*;
use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, encode_program};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;

#[test]
fn identity_and_configuration_registers() {
    // The u280 preset's 8 GiB of device memory, reduced: a machine with less memory than that may refuse
    // even a lazily zeroed allocation.
    let u280 = OverlayConfig { device_memory_bytes: 64 << 20, ..OverlayConfig::u280() };
    for config in [OverlayConfig::sim(), u280] {
        let mut sim = opu_sim::FuncSim::new(&config);
        assert_eq!(sim.mmio_read(regs::ID).unwrap(), regs::ID_VALUE);
        assert_eq!(sim.mmio_read(regs::VERSION).unwrap(), regs::VERSION_VALUE);
        assert_eq!(sim.config_hash().unwrap(), config.hash());
        assert_eq!(sim.mmio_read(regs::CFG_PE_LANES).unwrap(), config.pe_lanes);
        assert_eq!(sim.mmio_read(regs::CFG_DOT_WIDTH).unwrap(), config.dot_width);
        assert_eq!(sim.mmio_read(regs::CFG_SCRATCHPAD_BYTES).unwrap(), config.scratchpad_bytes);
        assert_eq!(sim.mmio_read(regs::CFG_KV_HISTORY_SLOTS).unwrap(), config.kv_history_slots);
        assert_eq!(sim.mem_size(), config.device_memory_bytes);
        // Every register of the map answers.
        for r in regs::REGISTERS {
            sim.mmio_read(r.offset).unwrap_or_else(|e| panic!("{}: {e}", r.name));
        }
    }
}

#[test]
fn unmapped_offsets_are_typed_errors_and_read_only_writes_are_ignored() {
    let mut sim = sim();
    for offset in [0x030, 0x002, 0x05E, 0x2FC, 0x1000, 0xFFFF_FFFC] {
        assert!(matches!(sim.mmio_read(offset), Err(DeviceError::BadRegister { offset: o }) if o == offset));
        assert!(matches!(sim.mmio_write(offset, 1), Err(DeviceError::BadRegister { .. })));
    }
    sim.mmio_write(regs::ID, 0).unwrap();
    sim.mmio_write(regs::CYCLES_LO, 5).unwrap();
    assert_eq!(sim.mmio_read(regs::ID).unwrap(), regs::ID_VALUE);
    assert_eq!(sim.mmio_read(regs::CYCLES_LO).unwrap(), 0);
    assert_eq!(sim.mmio_read(regs::DOORBELL).unwrap(), 0, "write-only reads 0");
}

#[test]
fn dma_outside_device_memory_is_a_typed_error() {
    let mut sim = sim();
    let size = sim.mem_size();
    sim.mem_write(size - 4, &[1, 2, 3, 4]).unwrap();
    let e = sim.mem_write(size - 2, &[0; 4]).unwrap_err();
    assert!(matches!(e, DeviceError::OutOfRange { addr, len: 4, size: s } if addr == size - 2 && s == size), "{e}");
    let mut buf = [0u8; 8];
    assert!(matches!(sim.mem_read(size, &mut buf[..1]), Err(DeviceError::OutOfRange { .. })));
    assert!(matches!(sim.mem_read(u64::MAX, &mut buf), Err(DeviceError::OutOfRange { .. })));
    sim.mem_read(size - 4, &mut buf[..4]).unwrap();
    assert_eq!(buf[..4], [1, 2, 3, 4]);
}

#[test]
fn the_run_protocol_through_registers() {
    let mut sim = sim();
    let e = sim.wait_done(Duration::from_secs(1)).unwrap_err();
    assert!(matches!(&e, DeviceError::Io(m) if m == "no program has run"), "{e}");
    let program = assemble("addi rd=r1 rs=r8 imm=1\nstore spm=0 mem=0x100 bytes=4 idx=r0 stride=0\nend").unwrap();
    sim.mem_write(0x4000, &encode_program(&program).unwrap()).unwrap();
    // PROG_BASE is 16-byte aligned: bits 3:0 do not exist.
    sim.mmio_write(regs::PROG_BASE_LO, 0x4007).unwrap();
    assert_eq!(sim.mmio_read(regs::PROG_BASE_LO).unwrap(), 0x4000);
    sim.mmio_write(regs::PROG_LEN, 3).unwrap();
    sim.mmio_write(regs::ARG0, 41).unwrap();
    assert_eq!(sim.mmio_read(regs::ARG0).unwrap(), 41);
    sim.mmio_write(regs::DOORBELL, 1).unwrap();
    assert_eq!(sim.mmio_read(regs::STATUS).unwrap(), regs::status::DONE);
    let c = sim.wait_done(Duration::from_secs(1)).unwrap();
    assert_eq!(sim.reg(1), 42);
    assert_eq!(c.instructions, 3);
    assert_eq!(sim.mmio_read64(regs::INSTRET_LO).unwrap(), 3);
    assert_eq!(sim.mmio_read64(regs::CYCLES_LO).unwrap(), c.cycles);
    assert_eq!(sim.mmio_read64(regs::BYTES_WRITTEN_LO).unwrap(), 4);
    assert_eq!(sim.mmio_read64(regs::BYTES_READ_LO).unwrap(), 0);
    assert_eq!(sim.mmio_read(regs::ERROR_CODE).unwrap(), ErrorCode::None as u32);
    // Writing 0 to the doorbell does nothing.
    sim.mmio_write(regs::DOORBELL, 0).unwrap();
    assert_eq!(sim.mmio_read64(regs::INSTRET_LO).unwrap(), 3);
    // A new program at the same place and length runs as itself (the decoded program is not stale).
    let other = assemble("addi rd=r1 rs=r8 imm=2\nbarrier\nend").unwrap();
    sim.mem_write(0x4000, &encode_program(&other).unwrap()).unwrap();
    sim.mmio_write(regs::DOORBELL, 1).unwrap();
    sim.wait_done(Duration::from_secs(1)).unwrap();
    assert_eq!(sim.reg(1), 43);
    assert_eq!(sim.mmio_read64(regs::BYTES_WRITTEN_LO).unwrap(), 0, "counters restart at each doorbell");
}

#[test]
fn reading_lo_latches_hi() {
    let mut sim = sim();
    // ERROR_INFO = 2^64 - 1 (an address beyond 64 bits).
    let res = run(&mut sim, "load spm=0 mem=0xFFFFFFFF bytes=4 idx=r8 stride=0xFFFFFFFF\nend", &[0xFFFF_FFFF]);
    assert!(res.is_err());
    assert_eq!(sim.mmio_read(regs::ERROR_INFO_LO + 4).unwrap(), 0, "HI before LO: the (cleared) latch");
    assert_eq!(sim.mmio_read(regs::ERROR_INFO_LO).unwrap(), 0xFFFF_FFFF);
    assert_eq!(sim.mmio_read(regs::ERROR_INFO_LO + 4).unwrap(), 0xFFFF_FFFF);
    assert_eq!(sim.mmio_read64(regs::ERROR_INFO_LO).unwrap(), u64::MAX);
    let hash = OverlayConfig::sim().hash();
    assert_eq!(sim.mmio_read(regs::CONFIG_HASH_LO).unwrap(), hash as u32);
    assert_eq!(sim.mmio_read(regs::CONFIG_HASH_HI).unwrap(), (hash >> 32) as u32);
}

#[test]
fn soft_reset_clears_status_counters_and_errors() {
    let mut sim = sim();
    sim.mmio_write(regs::CONTROL, regs::control::IRQ_ENABLE).unwrap();
    let res = run(&mut sim, "seti rd=r1 imm=1\nldr rd=r2 spm=0xFFFFF\nend", &[]);
    assert!(res.is_err());
    assert_eq!(sim.mmio_read(regs::ERROR_CODE).unwrap(), ErrorCode::ScratchpadOutOfRange as u32);
    assert_eq!(sim.mmio_read64(regs::INSTRET_LO).unwrap(), 1);
    sim.mmio_write(regs::CONTROL, regs::control::IRQ_ENABLE | regs::control::SOFT_RESET).unwrap();
    assert_eq!(sim.mmio_read(regs::CONTROL).unwrap(), regs::control::IRQ_ENABLE, "SOFT_RESET self-clears");
    for r in [
        regs::STATUS,
        regs::IRQ_STATUS,
        regs::ERROR_CODE,
        regs::ERROR_PC,
        regs::ERROR_INFO_LO,
        regs::INSTRET_LO,
        regs::CYCLES_LO,
    ] {
        assert_eq!(sim.mmio_read(r).unwrap(), 0, "register {r:#x}");
    }
    assert!(!sim.irq_line());
    assert!(matches!(sim.wait_done(Duration::from_secs(1)), Err(DeviceError::Io(_))));
    // The program registers are kept: the same program runs again.
    assert!(sim.run(&[]).is_err());
    assert_eq!(sim.mmio_read(regs::ERROR_PC).unwrap(), 1);
}

#[test]
fn completion_raises_the_interrupt_until_cleared() {
    let mut sim = sim();
    run_ok(&mut sim, "end", &[]);
    assert_eq!(sim.mmio_read(regs::IRQ_STATUS).unwrap(), regs::irq::DONE);
    assert!(!sim.irq_line(), "IRQ_ENABLE is off");
    sim.mmio_write(regs::CONTROL, regs::control::IRQ_ENABLE).unwrap();
    assert!(sim.irq_line());
    sim.mmio_write(regs::IRQ_STATUS, regs::irq::DONE).unwrap();
    assert_eq!(sim.mmio_read(regs::IRQ_STATUS).unwrap(), 0);
    assert!(!sim.irq_line());
}

#[test]
fn the_simulator_can_move_to_another_thread() {
    fn send<T: Send>(_: &T) {}
    let mut sim = sim();
    sim.set_threads(2);
    send(&sim);
    let handle = std::thread::spawn(move || {
        run_ok(&mut sim, "seti rd=r1 imm=3\nend", &[]);
        sim.reg(1)
    });
    assert_eq!(handle.join().unwrap(), 3);
}

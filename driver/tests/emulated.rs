//! The driver against an emulated card with the functional simulator behind it: the same sysfs walk, BAR
//! mapping, XDMA reads and writes and completion polling as for a card, and the faults a user meets
//! (a card that never completes, a BAR file too small, a wrong ID or config, DMA past device memory, a card
//! that vanishes mid-run, a card in use). Expected values come from plain arithmetic on the data written,
//! not from the simulator.

use opu_driver::emulate::{self, Emulator, Ended, Fault};
use opu_driver::{Card, DriverError};
use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, encode_program};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fresh directory for one test's sysfs root.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("opu-driver-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An emulator serving `root` in a thread until dropped.
struct Served {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<Ended, String>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config() -> OverlayConfig {
    // 64 MiB of device memory keeps the memory file small
    OverlayConfig { device_memory_bytes: 64 << 20, ..OverlayConfig::sim() }
}

fn serve(root: &Path, fault: Option<Fault>) -> Served {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (root, flag) = (root.to_path_buf(), stop.clone());
    let thread = std::thread::spawn(move || {
        let factory: emulate::DeviceFactory = Box::new(|c: &OverlayConfig| Ok(Box::new(opu_sim::FuncSim::new(c)) as Box<dyn Device>));
        let mut emu = match Emulator::new(&root, emulate::DEFAULT_BDF, &config(), "sim", factory) {
            Ok(e) => e,
            Err(e) => {
                tx.send(Err(e.to_string())).unwrap();
                return Err("no emulator".into());
            }
        };
        emu.set_fault(fault);
        tx.send(Ok(())).unwrap();
        emu.serve(&flag, |_, _| {}).map_err(|e| e.to_string())
    });
    rx.recv().unwrap().expect("emulator starts");
    Served { stop, thread: Some(thread) }
}

/// Loads `text` at 0x4000 and rings the doorbell with `args`.
fn start(card: &mut Card, text: &str, args: &[u32]) {
    let program = encode_program(&assemble(text).unwrap()).unwrap();
    card.mem_write(0x4000, &program).unwrap();
    card.mmio_write(regs::PROG_BASE_LO, 0x4000).unwrap();
    card.mmio_write(regs::PROG_BASE_HI, 0).unwrap();
    card.mmio_write(regs::PROG_LEN, (program.len() / 16) as u32).unwrap();
    for (i, a) in args.iter().enumerate() {
        card.mmio_write(regs::ARG0 + 4 * i as u32, *a).unwrap();
    }
    card.mmio_write(regs::DOORBELL, 1).unwrap();
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn programs_run_on_the_emulated_card_through_the_driver() {
    let root = scratch("run");
    let _emu = serve(&root, None);
    let mut card = Card::open(&root, None, Some(&config())).unwrap();
    assert_eq!(card.config().hash(), config().hash());
    assert!(matches!(Card::open(&root, None, None), Err(DriverError::InUse { .. })));
    assert_eq!(card.dma_channels(), (4, 4, true), "four channels each way and the events device");
    // 5 MiB: split over the four channels, both ways
    let data = pattern(5 << 20, 7);
    card.mem_write(0x10_0000, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    card.mem_read(0x10_0000, &mut back).unwrap();
    assert!(back == data, "device memory reads back what was written");
    // the overlay copies 4 KiB of it elsewhere and adds 1 to ARG0 (`mem` counts 32-byte lines)
    start(&mut card, "load spm=0 mem=0x8000 bytes=4096 idx=r0 stride=0\nstore spm=0 mem=0x40000 bytes=4096 idx=r0 stride=0\naddi rd=r1 rs=r8 imm=1\nend", &[41]);
    let done = card.wait_done(Duration::from_secs(20)).unwrap();
    assert_eq!(done.instructions, 4);
    let mut copy = vec![0u8; 4096];
    card.mem_read(0x80_0000, &mut copy).unwrap();
    assert!(copy == data[..4096], "the overlay's store reaches the host");
    assert_eq!(card.mmio_read(regs::DBG_R0 + 4).unwrap(), 42);
    assert_eq!(card.mmio_read64(regs::BYTES_WRITTEN_LO).unwrap(), 4096);
    assert_eq!(card.mmio_read64(regs::BYTES_READ_LO).unwrap(), 4096);
    // a second run sees the host's new data (the emulator copies only what changed)
    card.mem_write(0x10_0000, &[9; 64]).unwrap();
    start(&mut card, "load spm=0 mem=0x8000 bytes=64 idx=r0 stride=0\nstore spm=0 mem=0x48000 bytes=64 idx=r0 stride=0\nend", &[]);
    card.wait_done(Duration::from_secs(20)).unwrap();
    let mut small = [0u8; 64];
    card.mem_read(0x90_0000, &mut small).unwrap();
    assert_eq!(small, [9; 64]);
    // a trap comes back with its code and pc
    start(&mut card, "seti rd=r1 imm=1\nldr rd=r2 spm=0xFFFFF\nend", &[]);
    let e = card.wait_done(Duration::from_secs(20)).unwrap_err();
    assert!(matches!(e, DeviceError::Trap { code: ErrorCode::ScratchpadOutOfRange, pc: 1 }), "{e}");
    // `opu devices`' view: the card, its overlay, the trap, in use while open
    let list = opu_driver::card::list(&root).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].config, None, "64 MiB is not a preset's memory");
    assert_eq!(list[0].config_hash, format!("{:#018x}", config().hash()));
    assert!(list[0].state.starts_with("error (SCRATCHPAD_OUT_OF_RANGE at pc 1"), "{}", list[0].state);
    assert!(list[0].in_use);
    assert_eq!(list[0].emulated.as_ref().unwrap()["backend"], "sim");
    drop(card);
    assert!(!opu_driver::card::list(&root).unwrap()[0].in_use, "closing the card releases it");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_card_in_use_is_refused() {
    let root = scratch("inuse");
    let _emu = serve(&root, None);
    let cfg = config();
    let _first = Card::open(&root, None, Some(&cfg)).unwrap();
    let e = Card::open(&root, None, Some(&cfg)).err().expect("second open refused");
    assert!(matches!(e, DriverError::InUse { .. }), "{e}");
    assert!(e.to_string().contains("in use by another process") && e.to_string().contains("resource0"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn dma_past_device_memory_is_refused() {
    let root = scratch("range");
    let _emu = serve(&root, None);
    let mut card = Card::open(&root, None, Some(&config())).unwrap();
    let size = card.mem_size();
    assert_eq!(size, 64 << 20);
    card.mem_write(size - 4, &[1, 2, 3, 4]).unwrap();
    let e = card.mem_write(size - 2, &[0; 4]).unwrap_err();
    assert!(matches!(e, DeviceError::OutOfRange { len: 4, .. }), "{e}");
    let mut buf = [0u8; 8];
    assert!(matches!(card.mem_read(size, &mut buf), Err(DeviceError::OutOfRange { .. })));
    assert!(matches!(card.mem_read(u64::MAX - 2, &mut buf), Err(DeviceError::OutOfRange { .. })));
    card.mem_read(size - 4, &mut buf[..4]).unwrap();
    assert_eq!(buf[..4], [1, 2, 3, 4]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_card_that_never_completes_times_out_naming_status() {
    let root = scratch("hang");
    let _emu = serve(&root, Some(Fault::NeverComplete));
    let mut card = Card::open(&root, None, Some(&config())).unwrap();
    start(&mut card, "end", &[]);
    let t = Instant::now();
    let e = card.wait_done(Duration::from_millis(700)).unwrap_err();
    let waited = t.elapsed();
    assert!(matches!(e, DeviceError::Timeout { status: regs::status::BUSY, .. }), "{e}");
    assert!(e.to_string().contains("STATUS (0x014)"), "{e}");
    assert!(waited >= Duration::from_millis(700) && waited < Duration::from_secs(3), "{waited:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_card_nobody_serves_never_takes_the_doorbell() {
    let root = scratch("noserver");
    emulate::create(&root, emulate::DEFAULT_BDF, &config(), "sim").unwrap();
    // power-on registers: what a card shows before anything runs
    let bar = opu_driver::bar::Bar::open_rw(&emulate::Tree::of(&root, emulate::DEFAULT_BDF).resource0).unwrap();
    let mut bar = bar;
    bar.write32(regs::ID, regs::ID_VALUE);
    bar.write32(regs::VERSION, regs::VERSION_VALUE);
    bar.write32(regs::CONFIG_HASH_LO, config().hash() as u32);
    bar.write32(regs::CONFIG_HASH_HI, (config().hash() >> 32) as u32);
    let mut card = Card::open(&root, None, Some(&config())).unwrap();
    card.mmio_write(regs::DOORBELL, 1).unwrap();
    let t = Instant::now();
    let e = card.wait_done(Duration::from_millis(500)).unwrap_err().to_string();
    assert!(e.contains("did not take the doorbell") && e.contains("DOORBELL (0x018)"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_card_that_vanishes_mid_run_is_an_error_not_a_hang() {
    let root = scratch("vanish");
    let _emu = serve(&root, Some(Fault::NeverComplete));
    let mut card = Card::open(&root, None, Some(&config())).unwrap();
    start(&mut card, "end", &[]);
    let dir = root.join(emulate::DEFAULT_BDF);
    let remover = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::remove_dir_all(dir).unwrap();
    });
    let t = Instant::now();
    let e = card.wait_done(Duration::from_secs(60)).unwrap_err().to_string();
    remover.join().unwrap();
    assert!(e.contains("vanished during the run") && e.contains(emulate::DEFAULT_BDF), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn bad_bar_id_and_config_are_refused_at_open() {
    let root = scratch("identity");
    let emu = serve(&root, None);
    let tree = emulate::Tree::of(&root, emulate::DEFAULT_BDF);
    // another overlay's program
    let wide = OverlayConfig::sim_wide();
    let e = Card::open(&root, None, Some(&wide)).err().unwrap().to_string();
    assert!(e.contains("not `sim-wide`") && e.contains(&format!("{:#018x}", config().hash())), "{e}");
    // a bus address with no card
    let e = Card::open(&root, Some("0000:99:00.0"), None).err().unwrap().to_string();
    assert!(e.contains("no PCI device 0000:99:00.0"), "{e}");
    // an overlay this build has no preset of, with no config named
    let e = Card::open(&root, None, None).err().unwrap();
    assert!(matches!(e, DriverError::UnknownConfig { .. }), "{e}");
    // the rest with nobody serving the card (the emulator maps the whole BAR file)
    drop(emu);
    // not an OPU overlay
    {
        let mut bar = opu_driver::bar::Bar::open_rw(&tree.resource0).unwrap();
        bar.write32(regs::ID, 0xDEAD_BEEF);
    }
    let e = Card::open(&root, None, None).err().unwrap();
    assert!(matches!(e, DriverError::NotOpu { id: 0xDEAD_BEEF, .. }), "{e}");
    // a BAR file too small for the register map
    std::fs::OpenOptions::new().write(true).open(&tree.resource0).unwrap().set_len(256).unwrap();
    let e = Card::open(&root, None, None).err().unwrap();
    assert!(matches!(e, DriverError::BarTooSmall { len: 256, .. }), "{e}");
    assert!(e.to_string().contains("resource0") && e.to_string().contains("4096"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn no_card_under_an_empty_root() {
    let root = scratch("empty");
    let e = Card::open(&root, None, None).err().unwrap().to_string();
    assert!(e.contains("no OPU card under") && e.contains("0x10ee") && e.contains("0x4f50"), "{e}");
    let e = Card::open(&root.join("missing"), None, None).err().unwrap().to_string();
    assert!(e.contains("missing") && e.contains("No such file"), "{e}");
    let _ = std::fs::remove_dir_all(&root);
}

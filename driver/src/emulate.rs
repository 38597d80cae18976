//! An emulated card: what the driver finds in sysfs and `/dev` for a real card, as plain files, served by
//! any [`Device`] (the functional simulator or the RTL under Verilator).
//!
//! `create` writes, under a sysfs root `ROOT`, the PCI function `ROOT/<bdf>/` (`vendor`, `device`,
//! `class`, `resource0` the size of BAR 0, the XDMA nodes' `xdma/*/uevent`) and the emulator's own files
//! in `ROOT/<bdf>/emulator/`: `memory`, a sparse file the size of device memory that every DMA channel's
//! `DEVNAME` names (an absolute path, which the driver's `/dev` join leaves as it is), and `events`, a FIFO
//! standing for user interrupt 0's events device. The driver reaches all of it with exactly the code it
//! uses for a card: the sysfs walk, the BAR mapping, `pwrite`/`pread`, the events `poll`.
//!
//! [`Emulator::serve`] plays the card. It maps `resource0` and `memory` too and polls the DOORBELL word:
//! on a doorbell it shows BUSY, copies the registers the host wrote (PROG_BASE, PROG_LEN, WATCHDOG, ARGn,
//! CONTROL) into the device, copies the device-memory pages that differ (the file's data extents against
//! the device's memory) in, runs the program, copies the pages the device wrote
//! ([`Device::take_written`]) back out, and writes every read-only register back to the BAR file, STATUS
//! last. Unlike a card's register file, the BAR file is memory: a register reads what was last written to
//! it until the emulator next writes it, so a write-1-to-clear bit clears only at the next run.

use crate::error::DriverError;
use opu_hw::device::{Device, DeviceError};
use opu_hw::regs::{self, Access};
use opu_hw::{pci, OverlayConfig};
use memmap2::{MmapMut, MmapOptions};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The emulator's description of itself in the card's sysfs directory (JSON: backend, config, pid).
pub const INFO_FILE: &str = "opu_emulator.json";
/// The bus address an emulated card takes unless told otherwise.
pub const DEFAULT_BDF: &str = "0000:0e:00.0";
/// A request to program the card (`opu flash --method emulated` writes a bitstream's sidecar here).
pub const PROGRAM_FILE: &str = "emulator/program";

/// The files of an emulated card.
#[derive(Clone, Debug)]
pub struct Tree {
    pub root: PathBuf,
    pub bdf: String,
    /// `ROOT/<bdf>`.
    pub dir: PathBuf,
    pub resource0: PathBuf,
    pub memory: PathBuf,
    pub events: PathBuf,
}

impl Tree {
    pub fn of(root: &Path, bdf: &str) -> Tree {
        let dir = root.join(bdf);
        Tree {
            root: root.into(),
            bdf: bdf.into(),
            resource0: dir.join("resource0"),
            memory: dir.join("emulator/memory"),
            events: dir.join("emulator/events"),
            dir,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DriverError + '_ {
    move |e| DriverError::file(path, e)
}

fn write(path: &Path, text: &str) -> Result<(), DriverError> {
    std::fs::write(path, text).map_err(io(path))
}

/// Whether process `pid` is alive (the emulator that wrote an existing tree).
fn alive(pid: u64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid != 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}

/// Writes the sysfs entry of an emulated card at `bdf` under `root` for overlay `config`, served by
/// `backend` (a name for `opu devices`). A tree left by an emulator that has exited is replaced; one whose
/// emulator still runs is an error.
pub fn create(root: &Path, bdf: &str, config: &OverlayConfig, backend: &str) -> Result<Tree, DriverError> {
    let t = Tree::of(root, bdf);
    if t.dir.exists() {
        let info: Option<serde_json::Value> = std::fs::read_to_string(t.dir.join(INFO_FILE)).ok().and_then(|s| serde_json::from_str(&s).ok());
        let pid = info.as_ref().and_then(|i| i["pid"].as_u64()).unwrap_or(0);
        if alive(pid) && pid != u64::from(std::process::id()) {
            return Err(DriverError::Format { path: t.dir.clone(), what: format!("an emulator (pid {pid}) is serving this card already") });
        }
        std::fs::remove_dir_all(&t.dir).map_err(io(&t.dir))?;
    }
    let emu = t.dir.join("emulator");
    std::fs::create_dir_all(&emu).map_err(io(&emu))?;
    // absolute paths: the XDMA nodes' DEVNAME and `opu devices` name them
    let t = Tree::of(&std::fs::canonicalize(root).map_err(io(root))?, bdf);
    write(&t.dir.join("vendor"), &format!("{:#06x}\n", pci::VENDOR_ID))?;
    write(&t.dir.join("device"), &format!("{:#06x}\n", pci::DEVICE_ID))?;
    write(&t.dir.join("class"), &format!("{:#08x}\n", pci::CLASS))?;
    write(&t.dir.join("subsystem_vendor"), &format!("{:#06x}\n", pci::VENDOR_ID))?;
    write(&t.dir.join("subsystem_device"), &format!("{:#06x}\n", pci::DEVICE_ID))?;
    write(&t.dir.join("enable"), "1\n")?;
    let bar = File::create(&t.resource0).map_err(io(&t.resource0))?;
    bar.set_len(pci::BAR0_BYTES).map_err(io(&t.resource0))?;
    let mem = File::create(&t.memory).map_err(io(&t.memory))?;
    mem.set_len(config.device_memory_bytes).map_err(io(&t.memory))?;
    let fifo = std::ffi::CString::new(t.events.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
    // SAFETY: a valid C string.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } != 0 {
        return Err(DriverError::file(&t.events, std::io::Error::last_os_error()));
    }
    // the XDMA driver's class devices under the function, each naming its node
    let mut nodes: Vec<(String, &Path)> = vec![("xdma0_user".into(), &t.resource0), ("xdma0_events_0".into(), &t.events)];
    for k in 0..pci::DMA_CHANNELS {
        nodes.push((format!("xdma0_h2c_{k}"), &t.memory));
        nodes.push((format!("xdma0_c2h_{k}"), &t.memory));
    }
    for (minor, (name, node)) in nodes.iter().enumerate() {
        let d = t.dir.join("xdma").join(name);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
        write(&d.join("uevent"), &format!("MAJOR=240\nMINOR={minor}\nDEVNAME={}\n", node.display()))?;
    }
    write_info(&t.dir, backend, config, None)?;
    Ok(t)
}

/// The emulator's description of itself (`INFO_FILE`): its backend, the overlay it runs, its pid, and the
/// SHA-256 of the image it was programmed with, if any.
fn write_info(dir: &Path, backend: &str, config: &OverlayConfig, image: Option<&str>) -> Result<(), DriverError> {
    let info = serde_json::json!({
        "backend": backend,
        "config": config.name,
        "config_hash": opu_hw::image::hash_text(config.hash()),
        "pid": std::process::id(),
        "bitstream_sha256": image,
    });
    write(&dir.join(INFO_FILE), &info.to_string())
}

/// A misbehaving card, for the driver's fault tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Takes the doorbell, shows BUSY, and never completes.
    NeverComplete,
}

/// Builds the device behind the card for an overlay config (again when the card is programmed).
pub type DeviceFactory = Box<dyn FnMut(&OverlayConfig) -> Result<Box<dyn Device>, String>>;

/// Why [`Emulator::serve`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The stop flag was raised (a signal).
    Stopped,
    /// The card's sysfs directory was removed.
    Removed,
}

pub struct Emulator {
    pub tree: Tree,
    config: OverlayConfig,
    backend: String,
    factory: DeviceFactory,
    dev: Box<dyn Device>,
    bar: MmapMut,
    mem_file: File,
    mem: MmapMut,
    events: Option<File>,
    fault: Option<Fault>,
    /// Runs served.
    pub runs: u64,
    /// Bytes copied into and out of the device around runs.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

fn map(path: &Path, len: u64) -> Result<(File, MmapMut), DriverError> {
    let f = OpenOptions::new().read(true).write(true).open(path).map_err(io(path))?;
    // SAFETY: the driver writes these files while we map them: that is the point; every register access
    // below is volatile, and memory is copied between runs only, while the driver waits.
    let m = unsafe { MmapOptions::new().len(len as usize).map_mut(&f) }.map_err(io(path))?;
    Ok((f, m))
}

impl Emulator {
    /// Creates the card's tree under `root` and the device for `config` from `factory`.
    pub fn new(root: &Path, bdf: &str, config: &OverlayConfig, backend: &str, mut factory: DeviceFactory) -> Result<Emulator, DriverError> {
        let dev = factory(config).map_err(|what| DriverError::Format { path: root.join(bdf), what })?;
        let tree = create(root, bdf, config, backend)?;
        let (_, bar) = map(&tree.resource0, pci::BAR0_BYTES)?;
        let (mem_file, mem) = map(&tree.memory, config.device_memory_bytes)?;
        // read and write: the FIFO never reports a hang-up to the driver while the emulator lives
        let events = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(&tree.events).ok();
        let mut e = Emulator { tree, config: config.clone(), backend: backend.into(), factory, dev, bar, mem_file, mem, events, fault: None, runs: 0, bytes_in: 0, bytes_out: 0 };
        e.mirror_all()?;
        Ok(e)
    }

    pub fn set_fault(&mut self, fault: Option<Fault>) {
        self.fault = fault;
    }

    pub fn config(&self) -> &OverlayConfig {
        &self.config
    }

    fn reg(&self, offset: u32) -> u32 {
        // SAFETY: offsets of the register map are aligned and inside the BAR mapping.
        unsafe { self.bar.as_ptr().add(offset as usize).cast::<u32>().read_volatile() }
    }

    fn set_reg(&mut self, offset: u32, value: u32) {
        // SAFETY: as in `reg`.
        unsafe { self.bar.as_mut_ptr().add(offset as usize).cast::<u32>().write_volatile(value) };
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Every register as the device has it (at power-on and after programming).
    fn mirror_all(&mut self) -> Result<(), DeviceError> {
        for r in regs::REGISTERS {
            let v = if r.access == Access::Wo { 0 } else { self.dev.mmio_read(r.offset)? };
            self.set_reg(r.offset, v);
        }
        Ok(())
    }

    /// The read-only registers after a run, STATUS last (the driver reads the rest once it sees DONE).
    fn mirror_results(&mut self) -> Result<(), DeviceError> {
        for r in regs::REGISTERS.iter().filter(|r| matches!(r.access, Access::Ro | Access::W1c) && r.offset != regs::STATUS) {
            let v = self.dev.mmio_read(r.offset)?;
            self.set_reg(r.offset, v);
        }
        let s = self.dev.mmio_read(regs::STATUS)?;
        self.set_reg(regs::STATUS, s);
        Ok(())
    }

    /// Serves the card until `stop` is raised or its directory is removed. `on_run` hears of each run
    /// (its number and outcome) for a log.
    pub fn serve(&mut self, stop: &AtomicBool, mut on_run: impl FnMut(u64, &Result<opu_hw::device::Completion, DeviceError>)) -> Result<Ended, DriverError> {
        let mut idle = 0u32;
        let mut next_check = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(Ended::Stopped);
            }
            let now = Instant::now();
            if now >= next_check {
                if !self.tree.resource0.exists() {
                    return Ok(Ended::Removed);
                }
                let request = self.tree.dir.join(PROGRAM_FILE);
                if request.exists() {
                    self.program(&request)?;
                }
                next_check = now + Duration::from_millis(50);
            }
            let control = self.reg(regs::CONTROL);
            if control & regs::control::SOFT_RESET != 0 {
                self.dev.mmio_write(regs::CONTROL, control)?;
                self.set_reg(regs::CONTROL, control & !regs::control::SOFT_RESET);
                self.mirror_results()?;
            }
            if self.reg(regs::DOORBELL) & 1 == 1 {
                idle = 0;
                if self.fault == Some(Fault::NeverComplete) {
                    // take the doorbell and stay BUSY
                    self.set_reg(regs::STATUS, regs::status::BUSY);
                    self.set_reg(regs::DOORBELL, 0);
                    continue;
                }
                let r = self.run();
                self.runs += 1;
                on_run(self.runs, &r);
                if let Err(DeviceError::Io(e)) = &r {
                    if !self.tree.resource0.exists() {
                        return Ok(Ended::Removed);
                    }
                    return Err(DriverError::Format { path: self.tree.dir.clone(), what: e.clone() });
                }
                continue;
            }
            idle = idle.saturating_add(1);
            // a few hundred microseconds at most between looks at the doorbell
            std::thread::sleep(Duration::from_micros(if idle < 1000 { 20 } else { 300 }));
        }
    }

    /// One run: take the doorbell, copy in, run, copy out, write the results.
    fn run(&mut self) -> Result<opu_hw::device::Completion, DeviceError> {
        self.set_reg(regs::STATUS, regs::status::BUSY);
        self.set_reg(regs::DOORBELL, 0);
        for r in regs::REGISTERS.iter().filter(|r| r.access == Access::Rw) {
            let v = self.reg(r.offset);
            self.dev.mmio_write(r.offset, v)?;
        }
        self.copy_in()?;
        self.dev.mmio_write(regs::DOORBELL, 1)?;
        // a program the device traps is a result like any other; the driver reads it from the registers
        let r = self.dev.wait_done(Duration::from_secs(365 * 24 * 3600));
        self.copy_out()?;
        self.mirror_results()?;
        if self.reg(regs::CONTROL) & regs::control::IRQ_ENABLE != 0 {
            if let Some(ev) = &mut self.events {
                // the FIFO may be full when nobody drains it: the event is a hint, STATUS is the truth
                let _ = ev.write(&(self.runs as u32 + 1).to_le_bytes());
            }
        }
        r
    }

    /// The file's data extents (`SEEK_DATA`/`SEEK_HOLE`): where the driver has written. A file system
    /// without them gives the whole file.
    fn data_extents(&self) -> Vec<std::ops::Range<u64>> {
        let fd = self.mem_file.as_raw_fd();
        let len = self.mem.len() as u64;
        let mut out = Vec::new();
        let mut pos: i64 = 0;
        while (pos as u64) < len {
            // SAFETY: lseek on a descriptor we own.
            let start = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
            if start < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e != Some(libc::ENXIO) {
                    return Vec::from([0..len]);
                }
                break;
            }
            // SAFETY: as above.
            let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
            let end = if end < 0 { len as i64 } else { end };
            out.push(start as u64..(end as u64).min(len));
            pos = end;
        }
        out
    }

    /// Copies into the device the chunks of device memory where the file differs from it.
    fn copy_in(&mut self) -> Result<(), DeviceError> {
        const CHUNK: u64 = 64 << 10;
        let mut buf = vec![0u8; CHUNK as usize];
        for ext in self.data_extents() {
            let mut at = ext.start / CHUNK * CHUNK;
            while at < ext.end {
                let end = (at + CHUNK).min(self.mem.len() as u64);
                let n = (end - at) as usize;
                self.dev.mem_read(at, &mut buf[..n])?;
                let file = &self.mem[at as usize..end as usize];
                if file != &buf[..n] {
                    self.dev.mem_write(at, file)?;
                    self.bytes_in += n as u64;
                }
                at = end;
            }
        }
        // the host's copies are not the device's own writes
        self.dev.take_written();
        Ok(())
    }

    /// Copies the pages the device wrote back to the file (every page that differs where the device does
    /// not track its writes).
    fn copy_out(&mut self) -> Result<(), DeviceError> {
        let ranges = match self.dev.take_written() {
            Some(r) => r,
            None => Vec::from([0..self.mem.len() as u64]),
        };
        const CHUNK: u64 = 64 << 10;
        let mut buf = vec![0u8; CHUNK as usize];
        for r in ranges {
            let mut at = r.start;
            while at < r.end.min(self.mem.len() as u64) {
                let end = (at + CHUNK).min(r.end).min(self.mem.len() as u64);
                let n = (end - at) as usize;
                self.dev.mem_read(at, &mut buf[..n])?;
                let file = &mut self.mem[at as usize..end as usize];
                if file != &buf[..n] {
                    file.copy_from_slice(&buf[..n]);
                    self.bytes_out += n as u64;
                }
                at = end;
            }
        }
        Ok(())
    }

    /// Programs the card from the sidecar JSON in `request` (its `config`): a new device of that overlay,
    /// device memory cleared, every register as the new device has it. The request file is removed when
    /// done (what `opu flash` waits for); a request that cannot be served leaves the reason in
    /// `emulator/program.error`.
    fn program(&mut self, request: &Path) -> Result<(), DriverError> {
        let text = std::fs::read_to_string(request).map_err(io(request))?;
        let mut image = None;
        let outcome = (|| -> Result<OverlayConfig, String> {
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
            let config: OverlayConfig = serde_json::from_value(v["config"].clone()).map_err(|e| format!("field `config`: {e}"))?;
            config.validate().map_err(|e| e.to_string())?;
            image = v["bitstream_sha256"].as_str().map(str::to_string);
            Ok(config)
        })();
        let err_path = self.tree.dir.join("emulator/program.error");
        let _ = std::fs::remove_file(&err_path);
        match outcome.and_then(|c| (self.factory)(&c).map(|d| (c, d))) {
            Ok((config, dev)) => {
                self.dev = dev;
                // device memory does not survive reconfiguration
                self.mem_file.set_len(0).map_err(io(&self.tree.memory))?;
                self.mem_file.set_len(config.device_memory_bytes).map_err(io(&self.tree.memory))?;
                let (_, mem) = map(&self.tree.memory, config.device_memory_bytes)?;
                self.mem = mem;
                self.config = config;
                self.mirror_all()?;
                write_info(&self.tree.dir, &self.backend, &self.config, image.as_deref())?;
            }
            Err(what) => write(&err_path, &what)?,
        }
        std::fs::remove_file(request).map_err(io(request))
    }
}

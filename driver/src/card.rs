//! A card opened for use: found in sysfs, taken for this process (a lock on its BAR file), identified
//! (ID, VERSION and CONFIG_HASH checked before anything runs), its device memory reached through XDMA and
//! its runs awaited with a timeout. It implements [`Device`], so the host's loader and backends drive it as
//! they drive the simulators.

use crate::bar::Bar;
use crate::error::DriverError;
use crate::sysfs::{self, PciFunction};
use crate::xdma::Dma;
use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiting driver checks that the card's sysfs entry still exists.
const PRESENCE_EVERY: Duration = Duration::from_millis(100);

pub struct Card {
    pub function: PciFunction,
    bar: Bar,
    dma: Dma,
    config: OverlayConfig,
    /// A doorbell was written and the card has not yet been seen to take it (DOORBELL reading 0).
    doorbell_pending: bool,
    /// A doorbell has been written since the card was opened.
    rung: bool,
}

/// The overlay a card's registers describe: its ID, register-map version and config hash, checked.
pub fn identify(bar: &Bar, bdf: &str, wanted: Option<&OverlayConfig>) -> Result<OverlayConfig, DriverError> {
    let id = bar.read32(regs::ID);
    if id != regs::ID_VALUE {
        return Err(DriverError::NotOpu { bdf: bdf.into(), id, expected: regs::ID_VALUE });
    }
    let version = bar.read32(regs::VERSION);
    if version >> 16 != regs::VERSION_VALUE >> 16 {
        return Err(DriverError::Version {
            bdf: bdf.into(),
            card_major: version >> 16,
            card_minor: version & 0xFFFF,
            major: regs::VERSION_VALUE >> 16,
            minor: regs::VERSION_VALUE & 0xFFFF,
        });
    }
    let hash = bar.read64(regs::CONFIG_HASH_LO);
    let preset = preset_of(hash);
    match wanted {
        Some(w) if w.hash() == hash => Ok(w.clone()),
        Some(w) => Err(DriverError::ConfigMismatch {
            bdf: bdf.into(),
            card_config: preset.map_or_else(|| "of an unknown config".into(), |p| format!("`{}`", p.name)),
            card_hash: hash,
            wanted: format!("`{}`", w.name),
            wanted_hash: w.hash(),
        }),
        None => preset.ok_or_else(|| DriverError::UnknownConfig { bdf: bdf.into(), hash, known: OverlayConfig::PRESETS.join(", ") }),
    }
}

/// The file BAR 0 is mapped through: the XDMA driver's user node where it has one (a kernel built with
/// `CONFIG_IO_STRICT_DEVMEM` refuses to map `resource0` of a BAR that a driver has claimed), else sysfs
/// `resource0`.
pub fn bar_path(f: &PciFunction, nodes: &sysfs::XdmaNodes) -> std::path::PathBuf {
    nodes.user.clone().unwrap_or_else(|| f.resource0())
}

/// The preset whose hash is `hash`.
pub fn preset_of(hash: u64) -> Option<OverlayConfig> {
    OverlayConfig::PRESETS.iter().filter_map(|n| OverlayConfig::preset(n).ok()).find(|c| c.hash() == hash)
}

impl Card {
    /// Opens the card at `bdf` (else the first card) under the sysfs root `root`, for overlay `config`
    /// (else whichever preset the card reports).
    pub fn open(root: &Path, bdf: Option<&str>, config: Option<&OverlayConfig>) -> Result<Card, DriverError> {
        let function = sysfs::find(root, bdf)?;
        Self::open_function(function, config)
    }

    pub fn open_function(function: PciFunction, config: Option<&OverlayConfig>) -> Result<Card, DriverError> {
        let nodes = sysfs::xdma_nodes(&function)?;
        let path = bar_path(&function, &nodes);
        let bar = Bar::open_rw(&path)?;
        bar.lock().map_err(|held| {
            if held {
                DriverError::InUse { bdf: function.bdf.clone(), path: path.clone() }
            } else {
                DriverError::file(&path, std::io::Error::last_os_error())
            }
        })?;
        let config = identify(&bar, &function.bdf, config)?;
        let dma = Dma::open(&nodes, config.device_memory_bytes)?;
        let mut card = Card { function, bar, dma, config, doorbell_pending: false, rung: false };
        if card.dma.has_events() {
            card.bar.write32(regs::CONTROL, regs::control::IRQ_ENABLE);
        }
        Ok(card)
    }

    pub fn config(&self) -> &OverlayConfig {
        &self.config
    }

    pub fn bdf(&self) -> &str {
        &self.function.bdf
    }

    /// DMA channels (host to card, card to host) and whether completion can be awaited on the events device.
    pub fn dma_channels(&self) -> (usize, usize, bool) {
        let (h, c) = self.dma.channels();
        (h, c, self.dma.has_events())
    }

    fn check_register(offset: u32) -> Result<(), DeviceError> {
        match regs::register_at(offset) {
            Some(_) => Ok(()),
            None => Err(DeviceError::BadRegister { offset }),
        }
    }

    fn vanished(&self) -> Option<DeviceError> {
        let path = self.function.resource0();
        (!path.exists()).then(|| DeviceError::Io(format!("card {} vanished during the run: {} is gone", self.function.bdf, path.display())))
    }
}

impl Device for Card {
    fn mmio_read(&mut self, offset: u32) -> Result<u32, DeviceError> {
        Self::check_register(offset)?;
        Ok(self.bar.read32(offset))
    }

    fn mmio_write(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
        Self::check_register(offset)?;
        self.bar.write32(offset, value);
        if offset == regs::DOORBELL && value & 1 == 1 {
            self.doorbell_pending = true;
            self.rung = true;
        }
        Ok(())
    }

    fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.dma.write(addr, data)
    }

    fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.dma.read(addr, buf)
    }

    fn mem_size(&self) -> u64 {
        self.dma.mem_size()
    }

    /// Polls STATUS until DONE or ERROR (between polls, the events device where there is one, else a
    /// growing sleep up to 1 ms), at most `timeout`. A card that stops answering (all ones) or whose sysfs
    /// entry disappears ends the wait with an error naming it.
    fn wait_done(&mut self, timeout: Duration) -> Result<Completion, DeviceError> {
        let start = Instant::now();
        let mut next_presence = start + PRESENCE_EVERY;
        let mut polls = 0u32;
        loop {
            // A card takes the doorbell at once (DOORBELL reads 0, STATUS BUSY); the emulated card when its
            // server next looks. Until then STATUS may still show the previous run's DONE.
            if self.doorbell_pending && self.bar.read32(regs::DOORBELL) & 1 == 0 {
                self.doorbell_pending = false;
            }
            let status = self.bar.read32(regs::STATUS);
            if status == u32::MAX {
                return Err(DeviceError::Io(format!(
                    "card {} does not answer: STATUS reads {status:#x} (removed, or its link is down)",
                    self.function.bdf
                )));
            }
            if !self.doorbell_pending {
                if status & regs::status::DONE != 0 {
                    if self.dma.has_events() {
                        self.bar.write32(regs::IRQ_STATUS, regs::irq::DONE | regs::irq::ERROR);
                    }
                    let cycles = self.mmio_read64(regs::CYCLES_LO)?;
                    let instructions = self.mmio_read64(regs::INSTRET_LO)?;
                    return Ok(Completion { cycles, instructions });
                }
                if status & regs::status::ERROR != 0 {
                    let raw = self.bar.read32(regs::ERROR_CODE);
                    let pc = self.bar.read32(regs::ERROR_PC);
                    let code = ErrorCode::from_u32(raw).ok_or_else(|| DeviceError::Io(format!("card {}: ERROR_CODE {raw} is not an error code", self.function.bdf)))?;
                    return Err(DeviceError::Trap { code, pc });
                }
                if status & regs::status::BUSY == 0 && !self.rung {
                    return Err(DeviceError::Io("no program has run".into()));
                }
            }
            let now = Instant::now();
            if now >= next_presence {
                if let Some(e) = self.vanished() {
                    return Err(e);
                }
                next_presence = now + PRESENCE_EVERY;
            }
            let waited = now - start;
            if waited >= timeout {
                if self.doorbell_pending {
                    return Err(DeviceError::Io(format!(
                        "card {} did not take the doorbell within {timeout:?}: DOORBELL (0x018) still reads 1 (is the card, or its emulator, running?)",
                        self.function.bdf
                    )));
                }
                return Err(DeviceError::Timeout { waited, status });
            }
            let left = timeout - waited;
            polls += 1;
            if !self.doorbell_pending && self.dma.wait_event(left.min(Duration::from_millis(10))) {
                continue;
            }
            if polls > 64 {
                // 10 us doubling to 1 ms: a decode pass takes milliseconds on a card
                let pause = Duration::from_micros(10 << (polls - 64).min(7)).min(Duration::from_millis(1));
                std::thread::sleep(pause.min(left));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What `opu devices` shows of a card, read without taking it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CardInfo {
    pub bdf: String,
    pub sysfs: String,
    pub id: u32,
    pub version: String,
    /// The preset the config hash names, or null.
    pub config: Option<String>,
    pub config_hash: String,
    /// idle, busy, done, error (with the trap), not an OPU overlay, in use.
    pub state: String,
    pub in_use: bool,
    pub counters: serde_json::Value,
    /// The emulator behind an emulated card (its backend and config), else null.
    pub emulated: Option<serde_json::Value>,
    /// Why the card could not be read, where it could not.
    pub error: Option<String>,
}

/// Every card under `root`, read through a read-only mapping of its BAR (a card in use is listed too).
pub fn list(root: &Path) -> Result<Vec<CardInfo>, DriverError> {
    Ok(sysfs::scan(root)?.into_iter().map(|f| info(&f)).collect())
}

fn info(f: &PciFunction) -> CardInfo {
    let mut out = CardInfo {
        bdf: f.bdf.clone(),
        sysfs: f.dir.display().to_string(),
        id: 0,
        version: String::new(),
        config: None,
        config_hash: String::new(),
        state: "unreadable".into(),
        in_use: false,
        counters: serde_json::Value::Null,
        emulated: f.emulator_info(),
        error: None,
    };
    let path = sysfs::xdma_nodes(f).map_or_else(|_| f.resource0(), |n| bar_path(f, &n));
    let bar = match Bar::open_ro(&path) {
        Ok(b) => b,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    out.id = bar.read32(regs::ID);
    let v = bar.read32(regs::VERSION);
    out.version = format!("{}.{}", v >> 16, v & 0xFFFF);
    let hash = bar.read64(regs::CONFIG_HASH_LO);
    out.config_hash = opu_hw::image::hash_text(hash);
    out.config = preset_of(hash).map(|c| c.name);
    out.in_use = bar.in_use();
    let s = bar.read32(regs::STATUS);
    out.state = if out.id != regs::ID_VALUE {
        format!("not an OPU overlay (ID {:#010x})", out.id)
    } else if s & regs::status::BUSY != 0 {
        "busy".into()
    } else if s & regs::status::ERROR != 0 {
        let code = bar.read32(regs::ERROR_CODE);
        let name = ErrorCode::from_u32(code).map_or("unknown", |c| c.name());
        format!("error ({name} at pc {})", bar.read32(regs::ERROR_PC))
    } else if s & regs::status::DONE != 0 {
        "done".into()
    } else {
        "idle".into()
    };
    out.counters = serde_json::json!({
        "cycles": bar.read64(regs::CYCLES_LO),
        "instructions": bar.read64(regs::INSTRET_LO),
        "bytes_read": bar.read64(regs::BYTES_READ_LO),
        "bytes_written": bar.read64(regs::BYTES_WRITTEN_LO),
        "macs": bar.read64(regs::MACS_LO),
    });
    out
}

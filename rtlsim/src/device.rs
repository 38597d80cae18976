//! [`RtlSim`]: the RTL of the overlay (opu-rtl's `top`, Verilated) behind [`Device`], with a Rust model of
//! device memory, so the host drives it exactly as it drives the functional simulator or a card.
//!
//! The top holds the register file, the controller core, the DMA, matrix, vector and attention units and the
//! scratchpad on one memory port (docs/rtl.md, "Control (`ctrl`), the DMA unit and the top so far"); compiled
//! programs run on it (everything but `conv` and `maxpool`, the CNN path's). The memory model answers reads
//! in order after `mem_latency_cycles` of the config, per cycle one request of the line port (32 bytes) or
//! of the weight port (`W = OverlayConfig::weight_port_beats` 64-byte beats, the config's bytes per core
//! cycle: its channels side by side, each answering its share of the request in the same cycle, as an
//! interleaved memory does); host accesses to device memory (`mem_write`, `mem_read`) go straight to the
//! model, as a card's DMA engine would.
//!
//! The build verilates the top for the presets in [`TOPS`]: `sim` (one beat a cycle, the unit `top`) and
//! `sim-wide` (two beats, rtlsim/build.rs's `TOPS`); other configs are refused.

/// Why an [`RtlSim`] cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum RtlSimError {
    #[error("opu-rtlsim was built without the Verilator models (install verilator and rebuild)")]
    NoModels,
    #[error("no RTL model is built for overlay config `{0}`: the top is verilated for the presets {known}", known = TOPS.iter().map(|t| format!("`{}`", t.0)).collect::<Vec<_>>().join(", "))]
    Config(String),
}

/// The presets whose top the build verilates, and the model of each (rtlsim/build.rs: the unit `top` and
/// the pairs of its `TOPS`).
pub const TOPS: &[(&str, &str)] = &[("sim", "top"), ("sim-wide", "top_sim_wide")];

#[cfg(has_verilator)]
mod imp {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    use opu_hw::device::{check_range, Completion, Device, DeviceError};
    use opu_hw::regs::{self, ErrorCode};
    use opu_hw::OverlayConfig;

    use super::{RtlSimError, TOPS};
    use crate::rtl::RtlModel;

    /// The most beats of a weight-port request the model serves (the widest port opu-rtl builds).
    const MAX_BEATS: usize = 32;

    /// A read in flight: due cycle, tag, line.
    type Pending = (u64, u64, u64);

    /// The top's ports, by index in its model.
    struct Ports {
        reset: usize,
        mmio_addr: usize,
        mmio_wdata: usize,
        mmio_write: usize,
        mmio_read: usize,
        mmio_rdata: usize,
        m_req: usize,
        m_req_ready: usize,
        m_write: usize,
        m_addr: usize,
        m_wdata: usize,
        m_wmask: usize,
        m_tag: usize,
        m_resp: usize,
        m_rdata: usize,
        m_resp_tag: usize,
        w_req: usize,
        w_req_ready: usize,
        w_addr: usize,
        w_resp: usize,
        w_rdata: usize,
    }

    impl Ports {
        fn of(model: &dyn RtlModel, beats: usize) -> Ports {
            let ports = model.ports();
            // (the widths this model relies on: at most 64 bits but the data ports')
            let at = |name: &str, bits: u32| {
                let i = ports.iter().position(|p| p.name == name).unwrap_or_else(|| panic!("the top has no port `{name}`"));
                assert!(ports[i].bits == bits || (bits == 0 && ports[i].bits <= 64), "the width of the top's `{name}`");
                i
            };
            Ports {
                reset: at("reset", 1),
                mmio_addr: at("mmio_addr", 0),
                mmio_wdata: at("mmio_wdata", 32),
                mmio_write: at("mmio_write", 1),
                mmio_read: at("mmio_read", 1),
                mmio_rdata: at("mmio_rdata", 32),
                m_req: at("m_req", 1),
                m_req_ready: at("m_req_ready", 1),
                m_write: at("m_write", 1),
                m_addr: at("m_addr", 64),
                m_wdata: at("m_wdata", 256),
                m_wmask: at("m_wmask", 32),
                m_tag: at("m_tag", 2),
                m_resp: at("m_resp", 1),
                m_rdata: at("m_rdata", 256),
                m_resp_tag: at("m_resp_tag", 2),
                w_req: at("w_req", 1),
                w_req_ready: at("w_req_ready", 1),
                w_addr: at("w_addr", 64),
                w_resp: at("w_resp", 1),
                w_rdata: at("w_rdata", 512 * beats as u32),
            }
        }
    }

    pub struct RtlSim {
        config: OverlayConfig,
        top: Box<dyn RtlModel>,
        ports: Ports,
        /// 64-byte beats of a weight-port request.
        beats: usize,
        mem: Vec<u8>,
        pending: VecDeque<Pending>,
        /// Weight-port beats in flight: due cycle, beat.
        pending_beats: VecDeque<(u64, u64)>,
        latency: u64,
        /// Core cycle of the last doorbell write (the origin of VCD windows).
        doorbell_at: u64,
        vcd_window: Option<VcdWindow>,
        progress: Option<Progress>,
        /// Back-pressure: a xorshift state that withholds `m_req_ready` and `w_req_ready` in about a
        /// quarter of the cycles each ([`RtlSim::set_backpressure`]); 0 for a memory that takes every request.
        stall_rng: u64,
        /// Bytes each channel has moved ([`Device::channel_bytes`]).
        channel_bytes: Vec<u64>,
        /// Pages the overlay wrote ([`Device::take_written`]).
        written: opu_hw::device::WrittenPages,
    }

    /// Called with the cycles since the doorbell while `wait_done` simulates.
    pub type Progress = Box<dyn FnMut(u64) + Send>;

    /// A waveform of cycles `[start, end)` after the doorbell.
    struct VcdWindow {
        path: std::path::PathBuf,
        start: u64,
        end: u64,
        open: bool,
    }

    impl RtlSim {
        pub fn new(config: &OverlayConfig) -> Result<RtlSim, RtlSimError> {
            let unit = TOPS
                .iter()
                .find(|(preset, _)| OverlayConfig::preset(preset).is_ok_and(|p| p.hash() == config.hash()))
                .map(|t| t.1)
                .ok_or_else(|| RtlSimError::Config(config.name.clone()))?;
            let top = crate::rtl::instantiate(unit).ok_or(RtlSimError::NoModels)?;
            // the memory model below serves `64 W` bytes per cycle (a line or a request of `W` beats)
            let beats = config.weight_port_beats() as usize;
            debug_assert_eq!(config.peak_bytes_per_cycle(), 64.0 * beats as f64);
            let mem_bytes = usize::try_from(config.device_memory_bytes).expect("device memory fits the host");
            let mut s = RtlSim {
                config: config.clone(),
                ports: Ports::of(top.as_ref(), beats),
                top,
                beats,
                // vec![0; n] is calloc: pages are zeroed lazily
                mem: vec![0u8; mem_bytes],
                pending: VecDeque::new(),
                pending_beats: VecDeque::new(),
                latency: u64::from(config.mem_latency_cycles.max(1)),
                doorbell_at: 0,
                vcd_window: None,
                progress: None,
                stall_rng: 0,
                channel_bytes: vec![0; config.mem_channels as usize],
                written: opu_hw::device::WrittenPages::new(mem_bytes as u64),
            };
            s.set(s.ports.reset, 1);
            s.step();
            s.step();
            s.set(s.ports.reset, 0);
            // the model is the one of this config (its register file says so)
            let hash = s.mmio_read64(regs::CONFIG_HASH_LO).expect("CONFIG_HASH");
            assert_eq!(hash, config.hash(), "the RTL model `{unit}` is not built for `{}`", config.name);
            Ok(s)
        }

        /// Drives input `port` (at most 64 bits).
        fn set(&mut self, port: usize, value: u64) {
            let words = [value as u32, (value >> 32) as u32];
            let n = self.top.ports()[port].words();
            self.top.set_port_words(port, &words[..n]);
        }

        /// Reads `port` (at most 64 bits).
        fn get(&self, port: usize) -> u64 {
            let mut words = [0u32; 2];
            let n = self.top.ports()[port].words();
            self.top.port_words(port, &mut words[..n]);
            u64::from(words[0]) | u64::from(words[1]) << 32
        }

        pub fn config(&self) -> &OverlayConfig {
            &self.config
        }

        /// Makes the memory refuse requests at random from now on, as a busy memory controller does: each
        /// port's ready is withheld in about a quarter of the cycles, from a generator seeded with `seed`
        /// (0 turns it off). The overlay must give the same results, only later.
        pub fn set_backpressure(&mut self, seed: u64) {
            self.stall_rng = seed;
        }

        /// Whether the memory takes a request on a port this cycle.
        fn ready(&mut self) -> bool {
            if self.stall_rng == 0 {
                return true;
            }
            let mut x = self.stall_rng;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.stall_rng = x;
            x % 4 != 0
        }

        /// Core cycles simulated since the model was made.
        pub fn cycles(&self) -> u64 {
            self.top.cycles()
        }

        /// Starts a VCD waveform of the whole overlay in `path` from the current cycle on (`depth` as
        /// [`crate::rtl`]'s "Waveforms": 0 every signal, 1 the top's ports); [`RtlSim::trace_close`] finishes
        /// the file. A path that cannot be created is an error naming it.
        pub fn trace_vcd(&mut self, path: &std::path::Path, depth: u32) -> std::io::Result<()> {
            self.top.trace_vcd(path, depth)
        }

        /// Flushes and closes the waveform (a no-op when not tracing).
        pub fn trace_close(&mut self) -> std::io::Result<()> {
            self.top.trace_close()
        }

        /// Writes a VCD waveform of every signal for core cycles `start..end` counted from the next doorbell
        /// (as `CYCLES` counts them): the file is created when the window opens and closed when it ends or
        /// the run completes, whichever is first. A file that cannot be created is an error when it opens.
        pub fn set_vcd_window(&mut self, path: &std::path::Path, start: u64, end: u64) {
            self.vcd_window = Some(VcdWindow { path: path.to_path_buf(), start, end: end.max(start), open: false });
        }

        /// Reports progress to `f` (the cycles since the doorbell) about every 2^16 cycles of `wait_done`.
        pub fn set_progress(&mut self, f: Option<Progress>) {
            self.progress = f;
        }

        /// Opens or closes the VCD window at the current cycle.
        fn vcd_window_step(&mut self) -> std::io::Result<()> {
            let now = self.top.cycles().saturating_sub(self.doorbell_at);
            let Some(w) = &mut self.vcd_window else { return Ok(()) };
            if !w.open && now >= w.start && now < w.end {
                w.open = true;
                let path = w.path.clone();
                self.top.trace_vcd(&path, 0)?;
            } else if w.open && now >= w.end {
                self.vcd_window = None;
                self.top.trace_close()?;
            }
            Ok(())
        }

        /// Closes a window still open when the run ends.
        fn vcd_window_finish(&mut self) -> std::io::Result<()> {
            if self.vcd_window.as_ref().is_some_and(|w| w.open) {
                self.vcd_window = None;
                self.top.trace_close()?;
            }
            Ok(())
        }

        /// The little-endian words of device memory from byte `at` (zeros past its end: the top checks its
        /// addresses, so only a bug would read there).
        fn read_words(mem: &[u8], at: u64, w: &mut [u32]) {
            let at = at as usize;
            if let Some(bytes) = mem.get(at..at + 4 * w.len()) {
                for (x, c) in w.iter_mut().zip(bytes.chunks_exact(4)) {
                    *x = u32::from_le_bytes(c.try_into().unwrap());
                }
            }
        }

        /// One core cycle: memory responses due, the model settles, the memory takes a request, the edge.
        fn step(&mut self) {
            let p = &self.ports;
            let (m_resp, m_resp_tag, m_rdata, w_resp, w_rdata) = (p.m_resp, p.m_resp_tag, p.m_rdata, p.w_resp, p.w_rdata);
            let now = self.top.cycles();
            match self.pending.front() {
                Some(&(due, tag, line)) if due <= now => {
                    self.pending.pop_front();
                    let mut w = [0u32; 8];
                    Self::read_words(&self.mem, line * 32, &mut w);
                    self.set(m_resp, 1);
                    self.set(m_resp_tag, tag);
                    self.top.set_port_words(m_rdata, &w);
                }
                _ => self.set(m_resp, 0),
            }
            match self.pending_beats.front() {
                Some(&(due, beat)) if due <= now => {
                    self.pending_beats.pop_front();
                    // the channels' shares of the request, side by side: beat `j` at words `16 j ..`
                    let mut w = [0u32; 16 * MAX_BEATS];
                    let w = &mut w[..16 * self.beats];
                    Self::read_words(&self.mem, beat * 64, w);
                    self.set(w_resp, 1);
                    self.top.set_port_words(w_rdata, w);
                }
                _ => self.set(w_resp, 0),
            }
            let (m_ready, w_ready) = (self.ready(), self.ready());
            self.set(self.ports.m_req_ready, u64::from(m_ready));
            self.set(self.ports.w_req_ready, u64::from(w_ready));
            self.top.eval();
            // The memory moves one line or one request of beats per cycle (the config's `64 W` bytes); the
            // top requests on one port at a time.
            let (m_req, w_req) = (self.get(self.ports.m_req) == 1, self.get(self.ports.w_req) == 1);
            assert!(!(m_req && w_req), "the top requested a line and beats in the same cycle ({now})");
            if w_req && w_ready {
                let beat = self.get(self.ports.w_addr);
                assert_eq!(beat % self.beats as u64, 0, "a weight request of {} beats at beat {beat}", self.beats);
                self.pending_beats.push_back((now + self.latency, beat));
                self.config.count_channel_bytes(&mut self.channel_bytes, beat.saturating_mul(64), 64 * self.beats as u64);
            }
            if m_req && m_ready {
                let line = self.get(self.ports.m_addr);
                // a line on its channel, read or written (whatever its byte mask: the line is the transfer)
                self.config.count_channel_bytes(&mut self.channel_bytes, line.saturating_mul(32), 32);
                if self.get(self.ports.m_write) == 1 {
                    let mut data = [0u32; 8];
                    self.top.port_words(self.ports.m_wdata, &mut data);
                    let mask = self.get(self.ports.m_wmask);
                    let at = line.saturating_mul(32) as usize;
                    self.written.mark(at as u64, at as u64 + 32);
                    if let Some(bytes) = self.mem.get_mut(at..at + 32) {
                        for (b, byte) in bytes.iter_mut().enumerate() {
                            if mask >> b & 1 == 1 {
                                *byte = (data[b / 4] >> (8 * (b % 4))) as u8;
                            }
                        }
                    }
                } else {
                    self.pending.push_back((now + self.latency, self.get(self.ports.m_tag), line));
                }
            }
            self.top.tick();
        }
    }

    impl Device for RtlSim {
        fn mmio_read(&mut self, offset: u32) -> Result<u32, DeviceError> {
            regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
            self.set(self.ports.mmio_addr, u64::from(offset));
            self.set(self.ports.mmio_read, 1);
            self.step();
            self.set(self.ports.mmio_read, 0);
            self.top.eval();
            Ok(self.get(self.ports.mmio_rdata) as u32)
        }

        fn mmio_write(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
            regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
            self.set(self.ports.mmio_addr, u64::from(offset));
            self.set(self.ports.mmio_wdata, u64::from(value));
            self.set(self.ports.mmio_write, 1);
            self.step();
            self.set(self.ports.mmio_write, 0);
            if offset == regs::DOORBELL && value & 1 == 1 {
                self.doorbell_at = self.top.cycles();
            }
            Ok(())
        }

        fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
            check_range(addr, data.len() as u64, self.mem_size())?;
            self.mem[addr as usize..addr as usize + data.len()].copy_from_slice(data);
            Ok(())
        }

        fn mem_read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
            check_range(addr, buf.len() as u64, self.mem_size())?;
            buf.copy_from_slice(&self.mem[addr as usize..addr as usize + buf.len()]);
            Ok(())
        }

        /// Every line request of the line port (instruction fetch, DMA, the attention unit; read or written)
        /// and every request of the weight port, on the channels that hold its bytes.
        fn channel_bytes(&self) -> Option<Vec<u64>> {
            Some(self.channel_bytes.clone())
        }
        fn mem_size(&self) -> u64 {
            self.mem.len() as u64
        }

        fn take_written(&mut self) -> Option<Vec<std::ops::Range<u64>>> {
            Some(self.written.take())
        }

        /// Simulates until STATUS shows DONE or ERROR, checking STATUS every 256 cycles; `timeout` is wall time.
        fn wait_done(&mut self, timeout: Duration) -> Result<Completion, DeviceError> {
            let start = Instant::now();
            loop {
                let s = self.mmio_read(regs::STATUS)?;
                if s & (regs::status::DONE | regs::status::ERROR) != 0 {
                    self.vcd_window_finish().map_err(|e| DeviceError::Io(format!("VCD window: {e}")))?;
                }
                if s & regs::status::DONE != 0 {
                    let cycles = self.mmio_read64(regs::CYCLES_LO)?;
                    let instructions = self.mmio_read64(regs::INSTRET_LO)?;
                    return Ok(Completion { cycles, instructions });
                }
                if s & regs::status::ERROR != 0 {
                    let code = self.mmio_read(regs::ERROR_CODE)?;
                    let pc = self.mmio_read(regs::ERROR_PC)?;
                    let code = ErrorCode::from_u32(code)
                        .ok_or_else(|| DeviceError::Io(format!("ERROR_CODE {code} is not an error code")))?;
                    return Err(DeviceError::Trap { code, pc });
                }
                if s & regs::status::BUSY == 0 {
                    return Err(DeviceError::Io("no program has run".into()));
                }
                if start.elapsed() > timeout {
                    return Err(DeviceError::Timeout { waited: timeout, status: s });
                }
                let now = self.top.cycles() - self.doorbell_at;
                if let Some(f) = &mut self.progress {
                    if now % (1 << 16) < 256 {
                        f(now);
                    }
                }
                for _ in 0..256 {
                    self.step();
                    if self.vcd_window.is_some() {
                        self.vcd_window_step().map_err(|e| DeviceError::Io(format!("VCD window: {e}")))?;
                    }
                }
            }
        }
    }
}

#[cfg(has_verilator)]
pub use imp::{Progress, RtlSim};

/// Without the Verilator models there is no RTL to run: [`RtlSim::new`] says so, and no `RtlSim` exists
/// (the type is uninhabited), so its `Device` methods are unreachable.
#[cfg(not(has_verilator))]
pub struct RtlSim {
    never: std::convert::Infallible,
}

#[cfg(not(has_verilator))]
impl RtlSim {
    pub fn new(config: &opu_hw::OverlayConfig) -> Result<RtlSim, RtlSimError> {
        let _ = config;
        Err(RtlSimError::NoModels)
    }

    pub fn config(&self) -> &opu_hw::OverlayConfig {
        match self.never {}
    }

    pub fn cycles(&self) -> u64 {
        match self.never {}
    }

    pub fn trace_vcd(&mut self, _: &std::path::Path, _: u32) -> std::io::Result<()> {
        match self.never {}
    }

    pub fn trace_close(&mut self) -> std::io::Result<()> {
        match self.never {}
    }

    pub fn set_vcd_window(&mut self, _: &std::path::Path, _: u64, _: u64) {
        match self.never {}
    }

    pub fn set_progress(&mut self, _: Option<Box<dyn FnMut(u64) + Send>>) {
        match self.never {}
    }

    pub fn set_backpressure(&mut self, _: u64) {
        match self.never {}
    }
}

#[cfg(not(has_verilator))]
impl opu_hw::device::Device for RtlSim {
    fn mmio_read(&mut self, _: u32) -> Result<u32, opu_hw::device::DeviceError> {
        match self.never {}
    }
    fn mmio_write(&mut self, _: u32, _: u32) -> Result<(), opu_hw::device::DeviceError> {
        match self.never {}
    }
    fn mem_write(&mut self, _: u64, _: &[u8]) -> Result<(), opu_hw::device::DeviceError> {
        match self.never {}
    }
    fn mem_read(&mut self, _: u64, _: &mut [u8]) -> Result<(), opu_hw::device::DeviceError> {
        match self.never {}
    }
    fn mem_size(&self) -> u64 {
        match self.never {}
    }
    fn wait_done(&mut self, _: std::time::Duration) -> Result<opu_hw::device::Completion, opu_hw::device::DeviceError> {
        match self.never {}
    }
}

//! [`RtlSim`]: the RTL of the overlay (opu-rtl's `top`, Verilated) behind [`Device`], with a Rust model of
//! device memory, so the host drives it exactly as it drives the functional simulator or a card.
//!
//! The top holds the register file, the controller core, the DMA, matrix, vector and attention units and the
//! scratchpad on one memory port (docs/rtl.md, "Control (`ctrl`), the DMA unit and the top so far"); compiled
//! programs run on it (everything but `matmul fmt=f16`, `conv` and `maxpool`). The memory model answers reads
//! in order after `mem_latency_cycles` of the config, per cycle one request of the line port (32 bytes) or
//! of the weight port (a 64-byte beat): the preset's 2 channels x 128 bits at twice the core clock;
//! host accesses to device memory (`mem_write`, `mem_read`) go straight to the model, as a card's DMA engine
//! would. The model exists only for the `sim` preset (the one the build verilates).

/// Why an [`RtlSim`] cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum RtlSimError {
    #[error("opu-rtlsim was built without the Verilator models (install verilator and rebuild)")]
    NoModels,
    #[error("the RTL model is built for the `sim` overlay preset, not `{0}`")]
    Config(String),
}

#[cfg(has_verilator)]
mod imp {
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    use opu_hw::device::{check_range, Completion, Device, DeviceError};
    use opu_hw::regs::{self, ErrorCode};
    use opu_hw::OverlayConfig;

    use super::RtlSimError;
    use crate::rtl::Top;

    /// A read in flight: due cycle, tag, line.
    type Pending = (u64, u64, u64);

    pub struct RtlSim {
        config: OverlayConfig,
        top: Box<Top>,
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
            if config.hash() != OverlayConfig::sim().hash() {
                return Err(RtlSimError::Config(config.name.clone()));
            }
            // the memory model below serves the preset's 64 bytes per cycle (a line or a beat), which the
            // hash above already pins
            debug_assert_eq!(config.peak_bytes_per_cycle(), 64.0);
            let mem_bytes = usize::try_from(config.device_memory_bytes).expect("device memory fits the host");
            let mut s = RtlSim {
                config: config.clone(),
                top: Box::new(Top::new()),
                // vec![0; n] is calloc: pages are zeroed lazily
                mem: vec![0u8; mem_bytes],
                pending: VecDeque::new(),
                pending_beats: VecDeque::new(),
                latency: u64::from(config.mem_latency_cycles.max(1)),
                doorbell_at: 0,
                vcd_window: None,
                progress: None,
                stall_rng: 0,
            };
            s.top.set_reset(1);
            s.step();
            s.step();
            s.top.set_reset(0);
            Ok(s)
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
            let now = self.top.cycles();
            match self.pending.front() {
                Some(&(due, tag, line)) if due <= now => {
                    self.pending.pop_front();
                    let mut w = [0u32; 8];
                    Self::read_words(&self.mem, line * 32, &mut w);
                    self.top.set_m_resp(1);
                    self.top.set_m_resp_tag(tag);
                    self.top.set_m_rdata_words(&w);
                }
                _ => self.top.set_m_resp(0),
            }
            match self.pending_beats.front() {
                Some(&(due, beat)) if due <= now => {
                    self.pending_beats.pop_front();
                    let mut w = [0u32; 16];
                    Self::read_words(&self.mem, beat * 64, &mut w);
                    self.top.set_w_resp(1);
                    self.top.set_w_rdata_words(&w);
                }
                _ => self.top.set_w_resp(0),
            }
            let (m_ready, w_ready) = (self.ready(), self.ready());
            self.top.set_m_req_ready(u64::from(m_ready));
            self.top.set_w_req_ready(u64::from(w_ready));
            self.top.eval();
            // The memory moves one line or one beat per cycle (the preset's 64 bytes); the top requests on
            // one port at a time.
            assert!(
                !(self.top.m_req() == 1 && self.top.w_req() == 1),
                "the top requested a line and a beat in the same cycle ({now})"
            );
            if self.top.w_req() == 1 && w_ready {
                self.pending_beats.push_back((now + self.latency, self.top.w_addr()));
            }
            if self.top.m_req() == 1 && m_ready {
                let line = self.top.m_addr();
                if self.top.m_write() == 1 {
                    let data = self.top.m_wdata_words();
                    let mask = self.top.m_wmask();
                    let at = line.saturating_mul(32) as usize;
                    if let Some(bytes) = self.mem.get_mut(at..at + 32) {
                        for (b, byte) in bytes.iter_mut().enumerate() {
                            if mask >> b & 1 == 1 {
                                *byte = (data[b / 4] >> (8 * (b % 4))) as u8;
                            }
                        }
                    }
                } else {
                    self.pending.push_back((now + self.latency, self.top.m_tag(), line));
                }
            }
            self.top.tick();
        }
    }

    impl Device for RtlSim {
        fn mmio_read(&mut self, offset: u32) -> Result<u32, DeviceError> {
            regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
            self.top.set_mmio_addr(u64::from(offset));
            self.top.set_mmio_read(1);
            self.step();
            self.top.set_mmio_read(0);
            self.top.eval();
            Ok(self.top.mmio_rdata() as u32)
        }

        fn mmio_write(&mut self, offset: u32, value: u32) -> Result<(), DeviceError> {
            regs::register_at(offset).ok_or(DeviceError::BadRegister { offset })?;
            self.top.set_mmio_addr(u64::from(offset));
            self.top.set_mmio_wdata(u64::from(value));
            self.top.set_mmio_write(1);
            self.step();
            self.top.set_mmio_write(0);
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

        fn mem_size(&self) -> u64 {
            self.mem.len() as u64
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
                    return Err(DeviceError::Timeout(timeout));
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

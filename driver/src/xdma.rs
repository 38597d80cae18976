//! Device memory through the XDMA character devices: a `pwrite` on `xdmaN_h2c_K` at offset A writes card
//! address A, a `pread` on `xdmaN_c2h_K` reads it. A transfer above [`SPLIT_BYTES`] is cut into chunks
//! that the channels move side by side (one thread per channel), as the XDMA engines run in parallel.
//!
//! The events device (`xdmaN_events_0`, user interrupt 0, which the card image wires to the overlay's
//! interrupt) becomes readable when the overlay raises its interrupt; [`Dma::wait_event`] waits on it
//! with `poll(2)` and a timeout.

use crate::error::DriverError;
use crate::sysfs::XdmaNodes;
use opu_hw::device::{check_range, DeviceError};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Duration;

/// Transfers up to this size go through channel 0 alone; larger ones are split over every channel.
pub const SPLIT_BYTES: usize = 1 << 20;

struct Channel {
    path: PathBuf,
    file: File,
}

pub struct Dma {
    h2c: Vec<Channel>,
    c2h: Vec<Channel>,
    events: Option<Channel>,
    mem_size: u64,
}

impl Dma {
    /// Opens every channel of `nodes` for a card whose device memory is `mem_size` bytes.
    pub fn open(nodes: &XdmaNodes, mem_size: u64) -> Result<Dma, DriverError> {
        let open = |p: &PathBuf, write: bool| -> Result<Channel, DriverError> {
            let file = OpenOptions::new().read(!write).write(write).open(p).map_err(|e| DriverError::file(p, e))?;
            Ok(Channel { path: p.clone(), file })
        };
        let h2c = nodes.h2c.iter().map(|p| open(p, true)).collect::<Result<_, _>>()?;
        let c2h = nodes.c2h.iter().map(|p| open(p, false)).collect::<Result<_, _>>()?;
        // the events device is optional: without it completion is polled alone
        let events = nodes.events.as_ref().and_then(|p| {
            let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(p).ok()?;
            Some(Channel { path: p.clone(), file })
        });
        Ok(Dma { h2c, c2h, events, mem_size })
    }

    pub fn mem_size(&self) -> u64 {
        self.mem_size
    }

    pub fn channels(&self) -> (usize, usize) {
        (self.h2c.len(), self.c2h.len())
    }

    pub fn has_events(&self) -> bool {
        self.events.is_some()
    }

    /// Writes `data` at card address `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DeviceError> {
        check_range(addr, data.len() as u64, self.mem_size)?;
        let io = |ch: &Channel, at: u64, chunk: &[u8]| {
            ch.file.write_all_at(chunk, at).map_err(|e| DeviceError::Io(format!("{}: writing {} bytes at {at:#x}: {e}", ch.path.display(), chunk.len())))
        };
        spread(&self.h2c, addr, data.len(), |ch, at, range| io(ch, at, &data[range]))
    }

    /// Reads card address `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(addr, buf.len() as u64, self.mem_size)?;
        let len = buf.len();
        // each channel fills disjoint chunks of `buf`
        let chunks = std::sync::Mutex::new(buf.chunks_mut(SPLIT_BYTES).map(Some).collect::<Vec<_>>());
        spread(&self.c2h, addr, len, |ch, at, range| {
            let chunk = chunks.lock().expect("chunk table")[range.start / SPLIT_BYTES].take().expect("each chunk once");
            ch.file.read_exact_at(&mut chunk[..range.len()], at).map_err(|e| {
                DeviceError::Io(format!("{}: reading {} bytes at {at:#x}: {e}", ch.path.display(), range.len()))
            })
        })
    }

    /// Waits up to `timeout` for the events device to signal (true), or returns false at once when there is
    /// none or it has hung up (its writer gone).
    pub fn wait_event(&mut self, timeout: Duration) -> bool {
        let Some(ev) = &self.events else { return false };
        let mut fds = libc::pollfd { fd: ev.file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd of a descriptor we own.
        let n = unsafe { libc::poll(&mut fds, 1, ms) };
        if n > 0 && fds.revents & libc::POLLIN != 0 {
            // drain the event count(s); the caller reads STATUS for what happened
            let mut word = [0u8; 64];
            let _ = std::io::Read::read(&mut &ev.file, &mut word);
            return true;
        }
        if n > 0 && fds.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            self.events = None;
        }
        false
    }
}

/// Runs `io(channel, card address, byte range of the transfer)` over chunks of [`SPLIT_BYTES`]: channel 0
/// alone for a small transfer, else chunk `i` on channel `i mod channels`, the channels in parallel.
fn spread<F>(channels: &[Channel], addr: u64, len: usize, io: F) -> Result<(), DeviceError>
where
    F: Fn(&Channel, u64, std::ops::Range<usize>) -> Result<(), DeviceError> + Sync,
{
    if len <= SPLIT_BYTES || channels.len() == 1 {
        return (0..len).step_by(SPLIT_BYTES.max(1)).try_for_each(|s| io(&channels[0], addr + s as u64, s..(s + SPLIT_BYTES).min(len)));
    }
    let chunks = len.div_ceil(SPLIT_BYTES);
    std::thread::scope(|scope| {
        let workers: Vec<_> = channels
            .iter()
            .enumerate()
            .map(|(c, ch)| {
                let io = &io;
                scope.spawn(move || {
                    (c..chunks).step_by(channels.len()).try_for_each(|i| {
                        let s = i * SPLIT_BYTES;
                        io(ch, addr + s as u64, s..(s + SPLIT_BYTES).min(len))
                    })
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("DMA channel thread")).collect::<Result<Vec<()>, _>>().map(|_| ())
    })
}

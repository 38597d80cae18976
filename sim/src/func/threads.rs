//! The simulator's threads: a rayon pool that runs the whole program on one of its workers, parallel
//! loops whose chunks every thread claims from a shared counter (the program's own thread included, so
//! nothing waits for a worker to wake up), and a back-off to the program's thread alone while the other
//! threads come late (their cores busy with other work).
//!
//! Why the back-off: a chunk a worker has claimed must be finished before the loop returns, and a worker
//! whose core is shared with another busy process may be descheduled for milliseconds in the middle of
//! it; on 2 cores with the other one busy, two threads then decode at half the speed of one. A loop whose
//! own share ended long before the helpers' (longer than the whole share took, and over
//! [`LATE_AFTER`]) counts as late, and the next [`FIRST_BACKOFF`] loops run on the program's thread alone,
//! doubling on every late loop up to [`MAX_BACKOFF`]; a loop on time resets it. Idle workers sleep (rayon's
//! policy: a few yields, then a condition variable), so solo loops cost the other cores nothing.
//!
//! Every chunk is computed by exactly one thread with the same inputs, so the results do not depend on
//! which thread took which chunk, nor on the back-off.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A wait for the helpers shorter than this never counts as late (a wake-up, a cache miss).
const LATE_AFTER: Duration = Duration::from_micros(200);
/// Loops run alone after the first late one.
const FIRST_BACKOFF: u32 = 16;
/// The longest back-off, in loops (a few decode steps of SmolLM2).
const MAX_BACKOFF: u32 = 4096;

pub(crate) struct Threads {
    pool: rayon::ThreadPool,
    n: usize,
    /// Loops still to run on the calling thread alone.
    solo_left: AtomicU32,
    /// The back-off after the next late loop.
    backoff: AtomicU32,
    /// Loops that came late (for the tests and for profiling).
    late: AtomicU32,
}

impl Threads {
    /// A pool of `n >= 2` threads.
    pub fn new(n: usize) -> Self {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("opu-sim-{i}"))
            .build()
            .expect("build the simulator's thread pool");
        Threads { pool, n, solo_left: AtomicU32::new(0), backoff: AtomicU32::new(FIRST_BACKOFF), late: AtomicU32::new(0) }
    }

    /// Runs `f` on a worker of the pool, so that the loops it starts share their work with it.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// Loops that have come late so far.
    #[cfg(test)]
    pub fn late_loops(&self) -> u32 {
        self.late.load(Ordering::Relaxed)
    }

    /// Calls `f(first, chunk)` once for each consecutive chunk of `data` (`first`: the index of the chunk's
    /// first element), the chunks spread over the threads.
    pub fn for_each_chunk<T: Send>(&self, data: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
        let chunk = chunk.max(1);
        let solo = self.solo_left.load(Ordering::Relaxed);
        if solo > 0 || data.len() <= chunk {
            self.solo_left.store(solo.saturating_sub(1), Ordering::Relaxed);
            data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i * chunk, c));
            return;
        }
        // Each chunk is taken once (the counter hands out each index once; the lock only moves the
        // borrow to the thread that took it).
        let chunks: Vec<Mutex<Option<&mut [T]>>> = data.chunks_mut(chunk).map(|c| Mutex::new(Some(c))).collect();
        let next = AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = chunks.get(i) else { break };
            let c = slot.lock().expect("no chunk panics while held").take().expect("each chunk taken once");
            f(i * chunk, c);
        };
        let start = Instant::now();
        let mut own_end = start;
        self.pool.in_place_scope(|s| {
            for _ in 1..self.n {
                s.spawn(|_| work());
            }
            work();
            own_end = Instant::now();
        });
        let waited = own_end.elapsed();
        if waited > LATE_AFTER && waited > own_end - start {
            self.late.fetch_add(1, Ordering::Relaxed);
            let b = self.backoff.load(Ordering::Relaxed);
            self.solo_left.store(b, Ordering::Relaxed);
            self.backoff.store((2 * b).min(MAX_BACKOFF), Ordering::Relaxed);
        } else {
            self.backoff.store(FIRST_BACKOFF, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_visited_once_with_its_index() {
        let threads = Threads::new(3);
        for (len, chunk) in [(0usize, 4usize), (1, 4), (7, 1), (100, 7), (1000, 64), (64, 64)] {
            let mut data = vec![0u32; len];
            threads.install(|| {
                threads.for_each_chunk(&mut data, chunk, |first, c| {
                    for (i, x) in c.iter_mut().enumerate() {
                        *x += (first + i) as u32 + 1;
                    }
                })
            });
            assert_eq!(data, (1..=len as u32).collect::<Vec<_>>(), "len {len} chunk {chunk}");
        }
    }

    #[test]
    fn a_late_helper_sends_the_next_loops_to_the_calling_thread() {
        use std::sync::atomic::AtomicBool;
        let threads = Threads::new(2);
        threads.install(|| {
            let caller = std::thread::current().id();
            let mut data = vec![0u8; 64];
            // The caller's chunks take 50 us each; the helper (the other worker) sleeps in each chunk it
            // takes, far longer than the caller's whole share.
            let slow_helper = |_: usize, _: &mut [u8]| {
                if std::thread::current().id() == caller {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(50) {
                        std::hint::spin_loop();
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            };
            let mut lates = 0;
            for _ in 0..50 {
                threads.for_each_chunk(&mut data, 1, slow_helper);
                lates = threads.late_loops();
                if lates > 0 {
                    break;
                }
            }
            assert_eq!(lates, 1, "the helper took a chunk in none of 50 loops");
            // the back-off: the next loops run on the caller alone, so none can be late
            let callers_only = AtomicBool::new(true);
            for _ in 0..FIRST_BACKOFF {
                threads.for_each_chunk(&mut data, 1, |_, _| {
                    if std::thread::current().id() != caller {
                        callers_only.store(false, Ordering::Relaxed);
                    }
                });
            }
            assert!(callers_only.load(Ordering::Relaxed));
            assert_eq!(threads.late_loops(), 1);
        });
    }
}

//! The scheduler: one thread owns the backend and runs its passes; requests wait in a bounded queue for a
//! session slot; sessions join and leave the batch between passes (continuous batching).
//!
//! Each loop: refuse what must be refused (timeouts, cancelled requests, everything queued once draining);
//! admit queued requests into free slots and run each one's prompt (its own prefill passes, between decode
//! passes: see docs/serving.md for why); then one decode pass advances every session that has a token to
//! feed, one row each, the weights streamed once for all of them.

use super::api::{ApiError, FinishReason};
use super::metrics::Metrics;
use super::stop::StopStrings;
use crate::backend::{SessionSlots, SlotRow};
use crate::loader::Counters;
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use axum::http::StatusCode;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// The request has a slot: its prompt runs now.
    Started,
    /// Newly generated text.
    Text(String),
    Done { finish: FinishReason, prompt_tokens: usize, completion_tokens: usize },
    /// The request ended without a completion: refused at shutdown (503), timed out (504), the device
    /// failed (500).
    Failed(ApiError),
}

/// A request for the scheduler.
pub struct Job {
    pub prompt_ids: Vec<u32>,
    /// Tokens to generate at most (the handler keeps prompt + max within the context).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop_strings: Vec<String>,
    pub arrived: Instant,
    pub deadline: Instant,
    pub events: UnboundedSender<Event>,
    /// Set when the client is gone (the handler's guard dropped).
    pub cancelled: Arc<AtomicBool>,
}

impl Job {
    fn gone(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || self.events.is_closed()
    }
}

/// Why a request was not queued.
pub enum Refused {
    Full,
    Draining,
}

struct QueueState {
    jobs: VecDeque<Job>,
    draining: bool,
    /// Slots the scheduler has free: that many queued jobs are not waiting for a slot, only for the
    /// scheduler to finish its pass.
    free_slots: usize,
}

/// The bounded queue of requests waiting for a slot.
pub struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
    capacity: usize,
}

impl Queue {
    pub fn new(capacity: usize) -> Self {
        Queue { state: Mutex::new(QueueState { jobs: VecDeque::new(), draining: false, free_slots: 0 }), wake: Condvar::new(), capacity }
    }

    /// The queue's state (a panic elsewhere while holding the lock leaves the state usable: every change to
    /// it is one assignment).
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The scheduler stopped (it panicked): every queued request gets a 500 and the queue takes no more.
    pub fn abandon(&self, why: &str) {
        let mut s = self.lock();
        s.draining = true;
        for job in s.jobs.drain(..) {
            let _ = job.events.send(Event::Failed(ApiError::server(StatusCode::INTERNAL_SERVER_ERROR, "server_error", why.to_string())));
        }
    }

    /// Queues `job`, or says why not (never waits).
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let mut s = self.lock();
        if s.draining {
            return Err(Refused::Draining);
        }
        if s.jobs.len() >= self.capacity + s.free_slots {
            return Err(Refused::Full);
        }
        s.jobs.push_back(job);
        self.wake.notify_one();
        Ok(())
    }

    /// Requests waiting for a slot (not those that free slots will take at the scheduler's next turn).
    pub fn len(&self) -> usize {
        let s = self.lock();
        s.jobs.len().saturating_sub(s.free_slots)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shutdown: queued requests are refused, running ones finish, then the scheduler returns.
    pub fn drain(&self) {
        self.lock().draining = true;
        self.wake.notify_all();
    }
}

/// A session in a slot.
struct Active<'t> {
    job: Job,
    slot: usize,
    /// The position of the next token fed.
    position: usize,
    /// The token to feed at `position` in the next decode pass.
    next: u32,
    generated: usize,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    stops: StopStrings,
    last_token: Instant,
}

/// What the scheduler needs besides the backend.
pub struct EngineContext {
    pub queue: Arc<Queue>,
    pub metrics: Arc<Metrics>,
    pub tokenizer: Arc<Tokenizer>,
    /// Token ids that end generation (the model's end tokens).
    pub end_tokens: Vec<u32>,
    /// Whether the backend's cycles are the functional simulator's estimate.
    pub cycles_are_estimates: bool,
    /// Seconds a 503 asks the client to wait.
    pub retry_after: u64,
}

/// Runs the scheduler until the queue drains (shutdown) and the last session ends.
pub fn run(slots: &mut dyn SessionSlots, context_length: usize, cx: &EngineContext) {
    let tok: &Tokenizer = &cx.tokenizer;
    let n_slots = slots.slots();
    // rows a pass takes: a row per session, and where the program has room more, prompt rows beside them
    let max_rows = slots.max_rows().max(n_slots);
    cx.metrics.slots.set(n_slots as i64);
    let mut active: Vec<Option<Active>> = (0..n_slots).map(|_| None).collect();
    let mut last_counters = slots.lifetime_counters();
    // prompt tokens per turn: one pass of the backend's prefill entry
    let chunk = slots.prompt_chunk().max(1);
    let mut recent: VecDeque<(Instant, usize)> = VecDeque::new();
    let mut last_probe = Instant::now();
    loop {
        // Refusals and admissions, under the queue's lock.
        let admitted: Vec<Job> = {
            let mut q = cx.queue.lock();
            let now = Instant::now();
            let mut keep = VecDeque::new();
            let draining = q.draining;
            for job in q.jobs.drain(..) {
                if job.gone() {
                    cx.metrics.aborted.with_label_values(&["client_gone"]).inc();
                } else if draining {
                    cx.metrics.aborted.with_label_values(&["shutdown"]).inc();
                    let _ = job.events.send(Event::Failed(ApiError::unavailable("the server is shutting down", cx.retry_after)));
                } else if now >= job.deadline {
                    cx.metrics.aborted.with_label_values(&["timeout"]).inc();
                    let _ = job.events.send(Event::Failed(timeout_error(job.arrived)));
                } else {
                    keep.push_back(job);
                }
            }
            q.jobs = keep;
            let free = active.iter().filter(|a| a.is_none()).count();
            let take = free.min(q.jobs.len());
            let admitted: Vec<Job> = q.jobs.drain(..take).collect();
            // (the slots they take are no longer free; those that finish this turn free theirs after it)
            q.free_slots = free - take;
            cx.metrics.queue_length.set(q.jobs.len() as i64);
            cx.metrics.active_sessions.set((n_slots - q.free_slots) as i64);
            if admitted.is_empty() && active.iter().all(Option::is_none) {
                if q.draining {
                    return;
                }
                // idle: no tokens in the last seconds
                cx.metrics.tokens_per_second.set(tokens_per_second(&mut recent, Instant::now()));
                // A device whose latest pass failed keeps `/health` at 503, which keeps traffic away: an idle
                // server checks it with a pass of its own now and then (slot 0's position 0, which the next
                // session's prompt writes again), so that a device that works again takes requests again.
                if cx.metrics.device_error().is_some() && last_probe.elapsed() >= DEVICE_PROBE_INTERVAL {
                    drop(q);
                    let result = slots.step_rows(&[SlotRow { slot: 0, position: 0, token: 0 }]);
                    cx.metrics.passes.with_label_values(&["probe"]).inc();
                    cx.metrics.device_pass(&result);
                    cx.device_counters(slots, &mut last_counters);
                    last_probe = Instant::now();
                    continue;
                }
                let _unused = cx.wake_wait(q);
                continue;
            }
            admitted
        };
        // Admitted requests take their slots; their prompts run below.
        for job in admitted {
            let slot = active.iter().position(Option::is_none).expect("a free slot per admitted job");
            if job.events.send(Event::Started).is_err() {
                cx.metrics.aborted.with_label_values(&["client_gone"]).inc();
                continue;
            }
            cx.metrics.prompt_tokens.inc_by(job.prompt_ids.len() as u64);
            active[slot] = Some(Active {
                slot,
                position: 0,
                next: 0,
                generated: 0,
                sampler: Sampler::new(job.sampling.clone()),
                decoder: tok.stream_decoder(),
                stops: StopStrings::new(job.stop_strings.clone()),
                last_token: Instant::now(),
                job,
            });
        }
        // A prefill batch of each prompt that has one left, in the session's own pass between the decode
        // passes: a long prompt delays the others' next tokens by a batch per turn, and its own cancellation
        // or timeout is seen after each batch. The rest of a prompt (less than a batch) goes as rows of the
        // decode pass below where the backend batches sessions and the pass has room for all of it, else
        // in its own passes here. The last prompt token's logits give the session's first token.
        let mut in_pass = vec![false; n_slots];
        // the rows of the pass so far: a row per session (at most), plus the prompt rows taken; a pass takes
        // `max_rows`
        let mut rows_planned = active.iter().flatten().count();
        for a in active.iter_mut() {
            let Some(s) = a.as_mut() else { continue };
            let len = s.job.prompt_ids.len();
            if s.position >= len {
                continue;
            }
            let rest = len - s.position;
            if max_rows > 1 && rest < chunk && rows_planned + rest - 1 <= max_rows {
                rows_planned += rest - 1;
                in_pass[s.slot] = true;
                continue;
            }
            let end = if len - s.position > chunk { s.position + chunk } else { len };
            let result = slots.forward_slot(s.slot, s.position, &s.job.prompt_ids[s.position..end]);
            cx.metrics.passes.with_label_values(&["prompt"]).inc();
            cx.metrics.device_pass(&result);
            cx.device_counters(slots, &mut last_counters);
            match result {
                Ok(logits) => {
                    s.position = end;
                    if end == len && !cx.take_token(s, &logits, context_length, &mut recent) {
                        *a = None;
                    }
                }
                Err(e) => {
                    cx.fail(&s.job, StatusCode::INTERNAL_SERVER_ERROR, format!("the prompt's pass failed: {}", crate::error_report(&e)));
                    *a = None;
                }
            }
        }
        // Sessions whose client is gone or whose time is up leave before the pass.
        let now = Instant::now();
        for a in active.iter_mut() {
            let Some(s) = a else { continue };
            if s.job.gone() {
                cx.metrics.aborted.with_label_values(&["client_gone"]).inc();
                *a = None;
            } else if now >= s.job.deadline {
                cx.metrics.aborted.with_label_values(&["timeout"]).inc();
                let _ = s.job.events.send(Event::Failed(timeout_error(s.job.arrived)));
                *a = None;
            }
        }
        // One decode pass for every session whose prompt has run (its last token fed at `position`), and in
        // the rows left (a pass takes `max_rows`) the rest of prompts planned above, each a run of
        // consecutive positions of its session (chunked prefill, as vLLM's): they share the weight stream.
        let mut rows: Vec<SlotRow> = active
            .iter()
            .flatten()
            .filter(|a| a.generated > 0)
            .map(|a| SlotRow { slot: a.slot, position: a.position, token: a.next })
            .collect();
        let decoding = rows.len();
        for a in active.iter().flatten().filter(|a| in_pass[a.slot]) {
            let rest = &a.job.prompt_ids[a.position..];
            rows.extend(rest.iter().enumerate().map(|(i, &token)| SlotRow { slot: a.slot, position: a.position + i, token }));
        }
        debug_assert!(rows.len() <= max_rows);
        if rows.is_empty() {
            cx.finish_turn(&active);
            continue;
        }
        let result = slots.step_rows(&rows);
        cx.metrics.passes.with_label_values(&[if decoding > 0 { "decode" } else { "prompt" }]).inc();
        cx.metrics.device_pass(&result);
        if decoding > 0 {
            cx.metrics.batch_size.observe(rows.len() as f64);
        }
        cx.device_counters(slots, &mut last_counters);
        match result {
            Ok(logits) => {
                for (row, logits) in rows.iter().zip(logits) {
                    let Some(a) = active[row.slot].as_mut() else { continue };
                    a.position = row.position + 1;
                    // a decode row's next token, or the first token after a prompt's last row
                    let sample = a.generated > 0 || a.position == a.job.prompt_ids.len();
                    if sample && !cx.take_token(a, &logits, context_length, &mut recent) {
                        active[row.slot] = None;
                    }
                }
            }
            Err(e) => {
                let why = format!("the decode pass failed: {}", crate::error_report(&e));
                for row in &rows {
                    if let Some(s) = active[row.slot].take() {
                        cx.fail(&s.job, StatusCode::INTERNAL_SERVER_ERROR, why.clone());
                    }
                }
            }
        }
        cx.finish_turn(&active);
    }
}

/// How often an idle server checks a device whose latest pass failed.
const DEVICE_PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Generated tokens per second over the last 5 seconds (`recent`: when each token came).
fn tokens_per_second(recent: &mut VecDeque<(Instant, usize)>, now: Instant) -> f64 {
    while recent.front().is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(5)) {
        recent.pop_front();
    }
    let window = recent.front().map_or(0.0, |(t, _)| now.duration_since(*t).as_secs_f64()).max(1.0);
    recent.iter().map(|(_, n)| *n).sum::<usize>() as f64 / window
}

fn timeout_error(arrived: Instant) -> ApiError {
    ApiError::server(StatusCode::GATEWAY_TIMEOUT, "timeout", format!("the request timed out after {:.1} s (--request-timeout)", arrived.elapsed().as_secs_f64()))
}

impl EngineContext {
    /// After a turn: the sessions in slots, and the free slots the queue may count on.
    fn finish_turn(&self, active: &[Option<Active>]) {
        let busy = active.iter().flatten().count();
        self.metrics.active_sessions.set(busy as i64);
        self.queue.lock().free_slots = active.len() - busy;
    }

    /// Waits for work (or a shutdown) with the queue's lock given back meanwhile.
    fn wake_wait<'a>(&self, q: std::sync::MutexGuard<'a, QueueState>) -> std::sync::MutexGuard<'a, QueueState> {
        self.queue.wake.wait_timeout(q, Duration::from_millis(200)).unwrap_or_else(std::sync::PoisonError::into_inner).0
    }

    fn fail(&self, job: &Job, status: StatusCode, message: String) {
        self.metrics.aborted.with_label_values(&["error"]).inc();
        let _ = job.events.send(Event::Failed(ApiError::server(status, "server_error", message)));
    }

    /// The device's counters since the last call, into the metrics.
    fn device_counters(&self, slots: &dyn SessionSlots, last: &mut Option<Counters>) {
        let (Some(now), Some(before)) = (slots.lifetime_counters(), last.as_ref()) else { return };
        let m = &self.metrics;
        m.device_bytes_read.inc_by(now.bytes_read - before.bytes_read);
        m.device_bytes_written.inc_by(now.bytes_written - before.bytes_written);
        m.device_instructions.inc_by(now.instructions - before.instructions);
        m.device_macs.inc_by(now.macs - before.macs);
        m.device_cycles.with_label_values(&[if self.cycles_are_estimates { "true" } else { "false" }]).inc_by(now.cycles - before.cycles);
        *last = Some(now);
    }

    /// Samples the session's next token from `logits` and lets its text out. Returns whether the session
    /// goes on (false: it finished, and its handler has been told).
    fn take_token(&self, a: &mut Active, logits: &[f32], context_length: usize, recent: &mut VecDeque<(Instant, usize)>) -> bool {
        let id = a.sampler.sample(logits);
        a.generated += 1;
        let now = Instant::now();
        let m = &self.metrics;
        m.generation_tokens.inc();
        if a.generated == 1 {
            m.time_to_first_token.observe(now.duration_since(a.job.arrived).as_secs_f64());
        } else {
            m.inter_token_latency.observe(now.duration_since(a.last_token).as_secs_f64());
        }
        a.last_token = now;
        recent.push_back((now, 1));
        m.tokens_per_second.set(tokens_per_second(recent, now));

        // a stop token ends the text and is not part of it
        let mut finish = None;
        let mut text = String::new();
        let mut stop_string = false;
        if self.end_tokens.contains(&id) {
            finish = Some(FinishReason::Stop);
        } else {
            match a.decoder.push(id) {
                Ok(piece) => {
                    let (out, stopped) = a.stops.push(&piece);
                    text += &out;
                    if stopped {
                        finish = Some(FinishReason::Stop);
                        stop_string = true;
                    }
                }
                Err(e) => {
                    self.fail(&a.job, StatusCode::INTERNAL_SERVER_ERROR, format!("detokenizing: {e}"));
                    return false;
                }
            }
        }
        if finish.is_none() && (a.generated >= a.job.max_tokens || a.position + 1 > context_length) {
            finish = Some(FinishReason::Length);
        }
        if let Some(finish) = finish {
            // the decoder's held bytes, through the stop strings (nothing after a stop string)
            if let (false, Ok(tail)) = (stop_string, a.decoder.finish()) {
                let (out, stopped) = a.stops.push(&tail);
                text += &out;
                if !stopped {
                    text += &a.stops.finish();
                }
            }
            if !text.is_empty() {
                let _ = a.job.events.send(Event::Text(text));
            }
            let _ = a.job.events.send(Event::Done { finish, prompt_tokens: a.job.prompt_ids.len(), completion_tokens: a.generated });
            m.request_latency.observe(a.job.arrived.elapsed().as_secs_f64());
            return false;
        }
        if !text.is_empty() && a.job.events.send(Event::Text(text)).is_err() {
            m.aborted.with_label_values(&["client_gone"]).inc();
            return false;
        }
        a.next = id;
        true
    }
}

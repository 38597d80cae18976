//! `GET /metrics`: the server's counters in the Prometheus text format (the `prometheus` crate's registry
//! and encoder). Names start with `opu_`; times are in seconds.

use prometheus::{Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

pub struct Metrics {
    registry: Registry,
    /// Requests answered, by endpoint and HTTP status.
    pub requests: IntCounterVec,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    /// Requests waiting for a session slot.
    pub queue_length: IntGauge,
    /// Sessions in slots (prefilling or decoding).
    pub active_sessions: IntGauge,
    pub slots: IntGauge,
    /// Rows per batched decode pass.
    pub batch_size: Histogram,
    pub passes: IntCounterVec,
    /// Generated tokens per second over the last few seconds.
    pub tokens_per_second: Gauge,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub request_latency: Histogram,
    /// Requests ended early, by reason (client gone, timeout, shutdown, error).
    pub aborted: IntCounterVec,
    /// The device's counters over every pass, where the backend counts them.
    pub device_bytes_read: IntCounter,
    pub device_bytes_written: IntCounter,
    pub device_instructions: IntCounter,
    pub device_macs: IntCounter,
    /// Cycles: the RTL's or a card's count, or the functional simulator's estimate (`estimate="true"`).
    pub device_cycles: IntCounterVec,
    /// Passes that failed on the device (their requests got 500).
    pub device_failures: IntCounter,
    /// Why the device's latest pass failed; `None` while its latest pass succeeded (`/health`).
    device_error: std::sync::Mutex<Option<String>>,
}

fn buckets(start: f64, factor: f64, n: usize) -> Vec<f64> {
    prometheus::exponential_buckets(start, factor, n).expect("valid buckets")
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("metric");
            registry.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("metric");
            registry.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("metric");
            registry.register(Box::new(g.clone())).expect("registered once");
            g
        };
        let histogram = |name: &str, help: &str, b: Vec<f64>| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(b)).expect("metric");
            registry.register(Box::new(h.clone())).expect("registered once");
            h
        };
        let tokens_per_second = Gauge::new("opu_tokens_per_second", "Generated tokens per second over the last 5 seconds").expect("metric");
        registry.register(Box::new(tokens_per_second.clone())).expect("registered once");
        Metrics {
            requests: counter_vec("opu_requests_total", "HTTP requests answered, by endpoint and status", &["endpoint", "status"]),
            prompt_tokens: counter("opu_prompt_tokens_total", "Prompt tokens of admitted requests"),
            generation_tokens: counter("opu_generation_tokens_total", "Tokens generated"),
            queue_length: gauge("opu_queue_length", "Requests waiting for a session slot"),
            active_sessions: gauge("opu_active_sessions", "Sessions in a slot (prefill or decode)"),
            slots: gauge("opu_session_slots", "Sessions the program holds at once (--max-sessions)"),
            batch_size: histogram("opu_batch_size", "Rows per decode pass: the sessions' next tokens, and prompt rows sharing the pass", (1..=64).map(f64::from).collect()),
            passes: counter_vec("opu_passes_total", "Scheduler steps, by kind (prompt: a prefill batch or the rest of a prompt in the session's own passes; decode: one device pass advancing every decoding session; probe: an idle server's pass checking a device whose latest pass failed)", &["kind"]),
            tokens_per_second,
            time_to_first_token: histogram("opu_time_to_first_token_seconds", "From the request's arrival to its first token", buckets(0.01, 2.0, 16)),
            inter_token_latency: histogram("opu_inter_token_latency_seconds", "Between consecutive tokens of a request", buckets(0.001, 2.0, 16)),
            request_latency: histogram("opu_request_duration_seconds", "From the request's arrival to its last token", buckets(0.01, 2.0, 18)),
            aborted: counter_vec("opu_requests_aborted_total", "Requests ended early, by reason", &["reason"]),
            device_bytes_read: counter("opu_device_bytes_read_total", "Device-memory bytes read by the overlay's passes"),
            device_bytes_written: counter("opu_device_bytes_written_total", "Device-memory bytes written by the overlay's passes"),
            device_instructions: counter("opu_device_instructions_total", "Instructions the overlay retired"),
            device_macs: counter("opu_device_macs_total", "Multiply-accumulates the overlay performed"),
            device_cycles: counter_vec("opu_device_cycles_total", "Overlay cycles (estimate=\"true\": the functional simulator's cost model)", &["estimate"]),
            device_failures: counter("opu_device_failures_total", "Passes that failed on the device (their requests got 500)"),
            device_error: std::sync::Mutex::new(None),
            registry,
        }
    }

    /// A pass ended: a failure counts and is kept for `/health`, a success clears it.
    pub fn device_pass<T>(&self, result: &anyhow::Result<T>) {
        let mut e = self.device_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(_) => *e = None,
            Err(err) => {
                self.device_failures.inc();
                *e = Some(crate::error_report(err));
            }
        }
    }

    /// Why the device's latest pass failed (`None`: it succeeded, or none ran yet).
    pub fn device_error(&self) -> Option<String> {
        self.device_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

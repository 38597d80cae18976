//! Load test of `opu serve` on the functional simulator: prints a table (not a timed test).
//!
//!     OPU_MODEL_GGUF=/path/to/model.gguf cargo bench -p opu-host --bench serve_load
//!
//! Starts `opu serve --backend sim` as a child process on a free port, compiled for the serving overlay
//! deploy/overlays/sim-batch.toml (`OPU_SERVE_CONFIG=sim` or another preset or TOML file picks another),
//! then:
//!
//! - Phase A, cost per generated token: the same 8 prompts, first one request at a time (one session),
//!   then all 8 at once (8 sessions batched). From `GET /metrics` deltas: device bytes moved and cycles
//!   per generated token (prompts' prefill passes included), mean batch size per decode pass, wall-clock
//!   tokens/s. The 8-session side must cost at most 1/3 of the lone session's bytes and cycles per token
//!   (exit status 1 if not). A probe of the same prompts with `max_tokens` 1 (prefill passes only) gives,
//!   for information, the decode passes' own cost by difference. This phase's server has the default
//!   queue, room for the 8 requests at once.
//! - Phase B, load: 16 clients x 8 requests, streamed and whole, chat and completions, greedy and sampled,
//!   with a small `--max-queue` so that some are refused (503 + Retry-After). Every request must end
//!   answered (200, complete) or refused; any other end is lost, no end within 300 s is hung (exit
//!   status 1 if any).
//!
//! Without `OPU_MODEL_GGUF` it prints SKIPPED and exits 0.

use anyhow::{anyhow, bail, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, Seek};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Session slots of the server (`--max-sessions`).
const SESSIONS: usize = 8;
const MAX_CONTEXT: usize = 512;
/// `--max-queue` of phase A's server (the default): room for all 8 requests at once.
const A_MAX_QUEUE: usize = 64;
/// `--max-queue` of phase B's server: small, so that 16 clients overflow 8 slots + 4 queued.
const B_MAX_QUEUE: usize = 4;
/// Tokens per phase-A request.
const A_MAX_TOKENS: u64 = 32;
const B_CLIENTS: usize = 16;
const B_REQUESTS_PER_CLIENT: usize = 8;
/// A request with no end after this long is hung.
const HUNG_AFTER: Duration = Duration::from_secs(300);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(120);

/// Phase A's prompts: the same shape and (nearly) the same token count, one per session.
const A_PROMPTS: [&str; SESSIONS] = [
    "Once upon a time, there was a little cat who lived in a",
    "Once upon a time, there was a little dog who lived in a",
    "Once upon a time, there was a little fox who lived in a",
    "Once upon a time, there was a little bear who lived in a",
    "Once upon a time, there was a little bird who lived in a",
    "Once upon a time, there was a little fish who lived in a",
    "Once upon a time, there was a little frog who lived in a",
    "Once upon a time, there was a little mouse who lived in a",
];

/// Phase B's chat messages.
const B_CHAT: [&str; 4] = [
    "Write a short poem about the sea.",
    "What is the capital of France?",
    "Explain what a neural network is in one sentence.",
    "Give me a tip for learning to cook.",
];

/// Phase B's completion prompts: continuations (a question as a bare prompt is often answered with an
/// end token at once).
const B_TEXT: [&str; 4] = [
    "The quick brown fox",
    "In the beginning of the story, the hero",
    "My favourite recipe for a rainy day is",
    "The three most important inventions of the last century are",
];

// ---------------------------------------------------------------------------------------------------
// The server

struct Server {
    child: Option<Child>,
    base: String,
    log: PathBuf,
}

/// The overlay the server compiles for: `OPU_SERVE_CONFIG` (a preset name or a TOML file), else the serving
/// overlay of deploy/overlays/sim-batch.toml (`sim`'s memory, 8 times its array: docs/serving.md, "What
/// batching saves"; at `sim` itself a pass of 8 rows is bound by its 8-lane array, not by the weights).
fn overlay() -> String {
    std::env::var("OPU_SERVE_CONFIG")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/overlays/sim-batch.toml").into())
}

impl Server {
    /// Starts `opu serve` on a free port (not yet ready: see [`Server::wait_ready`]).
    fn start(model: &str, max_queue: usize) -> Result<Server> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
            l.local_addr()?.port()
        };
        let log = std::env::temp_dir().join(format!("opu-serve-load-{}-q{max_queue}.log", std::process::id()));
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_opu"));
        cmd.args(["serve", "--backend", "sim", "--model", model, "--port", &port.to_string(), "--config", &overlay()])
            .args(["--max-sessions", &SESSIONS.to_string(), "--max-context", &MAX_CONTEXT.to_string(), "--max-queue", &max_queue.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        if let Ok(n) = std::env::var("RAYON_NUM_THREADS") {
            cmd.env("RAYON_NUM_THREADS", n);
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // the server goes when the bench goes, however it ends
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().context("starting `opu serve`")?;
        Ok(Server { child: Some(child), base: format!("http://127.0.0.1:{port}"), log })
    }

    /// Waits for `GET /health` to answer 200.
    async fn wait_ready(&mut self, client: &reqwest::Client) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("`opu serve` exited before it was ready ({status})");
                }
            }
            if let Ok(r) = client.get(format!("{}/health", self.base)).timeout(Duration::from_secs(5)).send().await {
                if r.status() == reqwest::StatusCode::OK {
                    return Ok(());
                }
            }
            if t0.elapsed() > HEALTH_TIMEOUT {
                bail!("`opu serve` was not ready (GET /health 200) within {} s", HEALTH_TIMEOUT.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// SIGTERM, then waits (30 s at most, then SIGKILL).
    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("serve_load: `opu serve` did not exit 30 s after SIGTERM: killing it");
        let _ = c.kill();
        let _ = c.wait();
    }

    /// The last lines of the server's output.
    fn log_tail(&self, lines: usize) -> String {
        let Ok(mut f) = std::fs::File::open(&self.log) else { return String::new() };
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let all: Vec<String> = std::io::BufReader::new(f).lines().map_while(Result::ok).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------------
// Metrics

/// `GET /metrics`, each name's value summed over its label sets.
type Metrics = HashMap<String, f64>;

fn parse_prometheus(text: &str) -> Metrics {
    let mut out = Metrics::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // `name{labels} value` or `name value` (label values may hold spaces: split at the last one)
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let name = series.split('{').next().unwrap_or(series).trim();
        let Ok(v) = value.trim().parse::<f64>() else { continue };
        *out.entry(name.to_string()).or_insert(0.0) += v;
    }
    out
}

/// What the server counted between two snapshots.
struct Delta {
    tokens: f64,
    bytes: f64,
    cycles: f64,
    batch_sum: f64,
    batch_count: f64,
    prefill_passes: f64,
}

impl Delta {
    fn new(before: &Metrics, after: &Metrics) -> Delta {
        let d = |name: &str| after.get(name).copied().unwrap_or(0.0) - before.get(name).copied().unwrap_or(0.0);
        Delta {
            tokens: d("opu_generation_tokens_total"),
            bytes: d("opu_device_bytes_read_total") + d("opu_device_bytes_written_total"),
            cycles: d("opu_device_cycles_total"),
            batch_sum: d("opu_batch_size_sum"),
            batch_count: d("opu_batch_size_count"),
            prefill_passes: 0.0,
        }
    }
    fn bytes_per_token(&self) -> f64 {
        self.bytes / self.tokens.max(1.0)
    }
    fn cycles_per_token(&self) -> f64 {
        self.cycles / self.tokens.max(1.0)
    }
    fn mean_batch(&self) -> f64 {
        if self.batch_count > 0.0 {
            self.batch_sum / self.batch_count
        } else {
            f64::NAN
        }
    }
}

/// Passes of `kind` (`prefill`, `decode`) between two snapshots: `opu_passes_total{kind=...}`.
fn passes(before: &str, after: &str, kind: &str) -> f64 {
    let count = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("opu_passes_total{") && l.contains(&format!("kind=\"{kind}\"")))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse::<f64>().ok()))
            .sum()
    };
    count(after) - count(before)
}

async fn metrics_text(client: &reqwest::Client, base: &str) -> Result<String> {
    let r = client.get(format!("{base}/metrics")).send().await.context("GET /metrics")?;
    anyhow::ensure!(r.status().is_success(), "GET /metrics answered {}", r.status());
    Ok(r.text().await?)
}

/// Nearest-rank percentile `p` (0..=100] of `v`; NaN when empty.
fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn si(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() {
        "-".into()
    } else if a >= 1e9 {
        format!("{:.3} G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} M", x / 1e6)
    } else if a >= 1e3 {
        format!("{:.3} k", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

// ---------------------------------------------------------------------------------------------------
// Phase A

/// One whole greedy completion of `prompt`: its usage (prompt tokens, completion tokens).
async fn complete_greedy(client: &reqwest::Client, base: &str, model: &str, prompt: &str, max_tokens: u64) -> Result<(u64, u64)> {
    let body = json!({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0});
    let r = client.post(format!("{base}/v1/completions")).json(&body).send().await.context("POST /v1/completions")?;
    let status = r.status();
    let text = r.text().await?;
    anyhow::ensure!(status == reqwest::StatusCode::OK, "POST /v1/completions answered {status}: {text}");
    let v: Value = serde_json::from_str(&text)?;
    let usage = &v["usage"];
    match (usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()) {
        (Some(p), Some(c)) => Ok((p, c)),
        _ => Err(anyhow!("no usage in the answer: {text}")),
    }
}

struct SideA {
    label: &'static str,
    requests: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    wall: f64,
    delta: Delta,
}

/// The 8 prompts, one request after another or all at once, `max_tokens` each.
async fn side_a(client: &reqwest::Client, base: &str, model: &str, together: bool, max_tokens: u64, label: &'static str) -> Result<SideA> {
    let before_text = metrics_text(client, base).await?;
    let before = parse_prometheus(&before_text);
    let t0 = Instant::now();
    let usages: Vec<(u64, u64)> = if together {
        let tasks: Vec<_> = A_PROMPTS
            .iter()
            .map(|p| {
                let (client, base, model, p) = (client.clone(), base.to_string(), model.to_string(), p.to_string());
                tokio::spawn(async move { complete_greedy(&client, &base, &model, &p, max_tokens).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.context("a client task")??);
        }
        out
    } else {
        let mut out = Vec::new();
        for p in A_PROMPTS {
            out.push(complete_greedy(client, base, model, p, max_tokens).await?);
        }
        out
    };
    let wall = t0.elapsed().as_secs_f64();
    let after_text = metrics_text(client, base).await?;
    let after = parse_prometheus(&after_text);
    let mut delta = Delta::new(&before, &after);
    delta.prefill_passes = passes(&before_text, &after_text, "prompt");
    Ok(SideA {
        label,
        requests: usages.len(),
        prompt_tokens: usages.iter().map(|u| u.0).sum(),
        completion_tokens: usages.iter().map(|u| u.1).sum(),
        wall,
        delta,
    })
}

/// Phase A; returns whether both ratios meet the target.
async fn phase_a(client: &reqwest::Client, base: &str, model: &str) -> Result<bool> {
    println!();
    println!("Phase A: cost per generated token, one session alone vs {SESSIONS} sessions together");
    println!(
        "  the same {} completion prompts on both sides, max_tokens {A_MAX_TOKENS}, temperature 0; alone: one request after another; together: all {} at once",
        A_PROMPTS.len(),
        A_PROMPTS.len()
    );
    println!("  device bytes and cycles per generated token include each prompt's prefill pass (the metrics do not split decode from prefill)");
    let alone = side_a(client, base, model, false, A_MAX_TOKENS, "1 session alone").await?;
    let together = side_a(client, base, model, true, A_MAX_TOKENS, "8 sessions together").await?;
    // the prompts' prefill passes alone: a request of 1 token is its prefill pass (no decode pass)
    let probe = side_a(client, base, model, false, 1, "prefill-only probe").await?;
    println!();
    println!(
        "  {:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>12} {:>13}",
        "side", "requests", "prompt", "gen.", "prefill", "decode", "mean", "wall s", "tokens/s", "bytes/token", "cycles/token"
    );
    println!(
        "  {:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>9} {:>12} {:>13}",
        "", "", "tokens", "tokens", "passes", "passes", "batch", "", "(wall)", "(device)", "(device)"
    );
    for s in [&alone, &together, &probe] {
        println!(
            "  {:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7.2} {:>9.2} {:>12} {:>13}",
            s.label,
            s.requests,
            s.prompt_tokens,
            s.completion_tokens,
            s.delta.prefill_passes,
            s.delta.batch_count,
            if s.delta.batch_count > 0.0 { format!("{:.2}", s.delta.mean_batch()) } else { "-".into() },
            s.wall,
            s.delta.tokens / s.wall,
            si(s.delta.bytes_per_token()),
            si(s.delta.cycles_per_token()),
        );
    }
    if alone.delta.tokens != alone.completion_tokens as f64 || together.delta.tokens != together.completion_tokens as f64 {
        println!(
            "  note: opu_generation_tokens_total moved by {} and {}, the answers' usage says {} and {}",
            alone.delta.tokens, together.delta.tokens, alone.completion_tokens, together.completion_tokens
        );
    }
    let mut ok = true;
    for (name, a, t) in [
        ("bytes", alone.delta.bytes_per_token(), together.delta.bytes_per_token()),
        ("cycles", alone.delta.cycles_per_token(), together.delta.cycles_per_token()),
    ] {
        let ratio = t / a;
        let meets = a > 0.0 && ratio.is_finite() && ratio <= 1.0 / 3.0;
        ok &= meets;
        println!(
            "  ratio {name:<6} per token (prefill included), 8 sessions / alone: {ratio:.3}  (target <= 1/3 = 0.333: {})",
            if meets { "met" } else { "NOT MET" }
        );
    }
    // decode passes alone: each side less the probe's prefill passes (the same prompts), over the tokens
    // the decode passes produced (a request's first token comes from its prefill pass)
    let decode = |s: &SideA, f: fn(&Delta) -> f64| (f(&s.delta) - f(&probe.delta)) / (s.delta.tokens - probe.delta.tokens).max(1.0);
    let (ab, tb) = (decode(&alone, |d| d.bytes), decode(&together, |d| d.bytes));
    let (ac, tc) = (decode(&alone, |d| d.cycles), decode(&together, |d| d.cycles));
    println!(
        "  decode passes only (each side less the probe, over the {} and {} tokens they decoded; for information, not the target):",
        alone.delta.tokens - probe.delta.tokens,
        together.delta.tokens - probe.delta.tokens
    );
    println!("    bytes/token  alone {}, together {}: ratio {:.3}", si(ab), si(tb), tb / ab);
    println!("    cycles/token alone {}, together {}: ratio {:.3}", si(ac), si(tc), tc / ac);
    for s in [&alone, &together] {
        if s.delta.tokens == 0.0 || s.delta.bytes == 0.0 || s.delta.cycles == 0.0 || s.delta.batch_count == 0.0 {
            println!(
                "  warning: a metric did not move on the side `{}` (tokens {}, bytes {}, cycles {}, decode passes {})",
                s.label, s.delta.tokens, s.delta.bytes, s.delta.cycles, s.delta.batch_count
            );
        }
    }
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------------
// Phase B

enum Outcome {
    /// 200 and a complete answer.
    Answered {
        stream: bool,
        /// Streams: from sending to the first chunk with text.
        ttft: Option<f64>,
        latency: f64,
        completion_tokens: u64,
    },
    /// 503 with Retry-After (seconds).
    Refused(u64),
    Lost(String),
    Hung,
}

struct Spec {
    chat: bool,
    stream: bool,
    max_tokens: u64,
    /// `Some(seed)`: temperature 0.8 with this seed; `None`: temperature 0.
    seed: Option<u64>,
    prompt: &'static str,
}

fn spec(k: usize) -> Spec {
    Spec {
        stream: k.is_multiple_of(2),
        chat: (k / 2).is_multiple_of(2),
        max_tokens: 16 + ((k * 13) % 33) as u64,
        seed: (k.is_multiple_of(3)).then_some(1000 + k as u64),
        prompt: if (k / 2).is_multiple_of(2) { B_CHAT[(k / 4) % B_CHAT.len()] } else { B_TEXT[(k / 4) % B_TEXT.len()] },
    }
}

fn request_body(model: &str, s: &Spec) -> Value {
    let mut body = json!({"model": model, "max_tokens": s.max_tokens, "stream": s.stream});
    if s.chat {
        body["messages"] = json!([{"role": "user", "content": s.prompt}]);
    } else {
        body["prompt"] = json!(s.prompt);
    }
    match s.seed {
        Some(seed) => {
            body["temperature"] = json!(0.8);
            body["seed"] = json!(seed);
        }
        None => body["temperature"] = json!(0),
    }
    if s.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// The text of a choice (chat: `message.content` or `delta.content`; completions: `text`).
fn choice_text(choice: &Value, chat: bool, stream: bool) -> Option<&str> {
    if !chat {
        choice["text"].as_str()
    } else if stream {
        choice["delta"]["content"].as_str()
    } else {
        choice["message"]["content"].as_str()
    }
}

async fn one_request(client: &reqwest::Client, base: &str, model: &str, s: &Spec) -> Outcome {
    let path = if s.chat { "/v1/chat/completions" } else { "/v1/completions" };
    let t0 = Instant::now();
    let r = match client.post(format!("{base}{path}")).json(&request_body(model, s)).send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Outcome::Hung,
        Err(e) => return Outcome::Lost(format!("{path}: sending: {e}")),
    };
    let status = r.status();
    if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
        let retry = r.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
        return match retry {
            Some(secs) => Outcome::Refused(secs),
            None => Outcome::Lost(format!("{path}: 503 without a Retry-After header (in seconds)")),
        };
    }
    if status != reqwest::StatusCode::OK {
        let text = r.text().await.unwrap_or_default();
        return Outcome::Lost(format!("{path}: status {status}: {text}"));
    }
    if !s.stream {
        let text = match r.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => return Outcome::Hung,
            Err(e) => return Outcome::Lost(format!("{path}: reading the body: {e}")),
        };
        let latency = t0.elapsed().as_secs_f64();
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return Outcome::Lost(format!("{path}: the body is not JSON ({e}): {text}")),
        };
        let choice = &v["choices"][0];
        let complete = choice_text(choice, s.chat, false).is_some() && choice["finish_reason"].is_string();
        return match (complete, v["usage"]["completion_tokens"].as_u64()) {
            (true, Some(n)) => Outcome::Answered { stream: false, ttft: None, latency, completion_tokens: n },
            _ => Outcome::Lost(format!("{path}: an incomplete answer (choices[0] with text and finish_reason, usage): {text}")),
        };
    }
    // server-sent events, split at blank lines
    let mut body = r.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let (mut ttft, mut usage, mut finished, mut done) = (None, None, false, false);
    loop {
        let chunk = match body.next().await {
            None => break,
            Some(Ok(c)) => c,
            Some(Err(e)) if e.is_timeout() => return Outcome::Hung,
            Some(Err(e)) => return Outcome::Lost(format!("{path}: reading the stream: {e}")),
        };
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event);
            for line in event.lines() {
                let Some(data) = line.strip_prefix("data:") else { continue };
                let data = data.strip_prefix(' ').unwrap_or(data);
                if done {
                    return Outcome::Lost(format!("{path}: an event after [DONE]: {data}"));
                }
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: Value = match serde_json::from_str(data) {
                    Ok(v) => v,
                    Err(e) => return Outcome::Lost(format!("{path}: an event is not JSON ({e}): {data}")),
                };
                if v.get("error").is_some() {
                    return Outcome::Lost(format!("{path}: an error event in the stream: {data}"));
                }
                if let Some(choice) = v["choices"].get(0) {
                    if ttft.is_none() && choice_text(choice, s.chat, true).is_some_and(|t| !t.is_empty()) {
                        ttft = Some(t0.elapsed().as_secs_f64());
                    }
                    if choice["finish_reason"].is_string() {
                        finished = true;
                    }
                }
                if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                    usage = Some(n);
                }
            }
        }
    }
    let latency = t0.elapsed().as_secs_f64();
    match (done, finished, usage) {
        (true, true, Some(n)) => Outcome::Answered { stream: true, ttft, latency, completion_tokens: n },
        (false, _, _) => Outcome::Lost(format!("{path}: the stream ended without `data: [DONE]`")),
        (true, false, _) => Outcome::Lost(format!("{path}: the stream has no chunk with a finish_reason")),
        (true, true, None) => Outcome::Lost(format!("{path}: the stream has no usage chunk (stream_options.include_usage)")),
    }
}

/// Phase B; returns whether no request was lost or hung.
async fn phase_b(client: &reqwest::Client, base: &str, model: &str) -> Result<bool> {
    let n = B_CLIENTS * B_REQUESTS_PER_CLIENT;
    println!();
    println!("Phase B: load, {B_CLIENTS} concurrent clients x {B_REQUESTS_PER_CLIENT} requests = {n} (--max-sessions {SESSIONS}, --max-queue {B_MAX_QUEUE})");
    println!("  half streamed (stream_options.include_usage), half whole; chat and completions; max_tokens 16..48; a third temperature 0.8 with a seed, the rest 0");
    println!("  a client refused with 503 waits Retry-After seconds before its next request");
    let before_text = metrics_text(client, base).await?;
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..B_CLIENTS)
        .map(|c| {
            let (client, base, model) = (client.clone(), base.to_string(), model.to_string());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..B_REQUESTS_PER_CLIENT {
                    let s = spec(c * B_REQUESTS_PER_CLIENT + i);
                    let o = match tokio::time::timeout(HUNG_AFTER, one_request(&client, &base, &model, &s)).await {
                        Ok(o) => o,
                        Err(_) => Outcome::Hung,
                    };
                    if let Outcome::Refused(secs) = o {
                        tokio::time::sleep(Duration::from_secs(secs)).await;
                    }
                    out.push(o);
                }
                out
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.extend(t.await.context("a client task")?);
    }
    let wall = t0.elapsed().as_secs_f64();
    let after_text = metrics_text(client, base).await?;
    let (before, after) = (parse_prometheus(&before_text), parse_prometheus(&after_text));
    let delta = Delta::new(&before, &after);

    let (mut answered, mut answered_stream, mut refused, mut hung, mut tokens) = (0, 0, 0, 0, 0u64);
    let (mut ttfts, mut latencies, mut latencies_stream, mut latencies_whole) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut lost = Vec::new();
    for o in &outcomes {
        match o {
            Outcome::Answered { stream, ttft, latency, completion_tokens } => {
                answered += 1;
                tokens += completion_tokens;
                latencies.push(*latency);
                if *stream {
                    answered_stream += 1;
                    latencies_stream.push(*latency);
                    // a stream whose answer is empty (an end token first) has no first text
                    if let Some(t) = ttft {
                        ttfts.push(*t);
                    }
                } else {
                    latencies_whole.push(*latency);
                }
            }
            Outcome::Refused(_) => refused += 1,
            Outcome::Lost(why) => lost.push(why.clone()),
            Outcome::Hung => hung += 1,
        }
    }
    let status_counts: Vec<String> = after_text
        .lines()
        .filter(|l| l.starts_with("opu_requests_total{"))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let d = v.trim().parse::<f64>().ok()? - before_text.lines().find(|b| b.starts_with(series) && b[series.len()..].starts_with(' '))
                .and_then(|b| b.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            (d > 0.0).then(|| format!("{}={d}", series.trim_start_matches("opu_requests_total")))
        })
        .collect();
    let queue_full = {
        let count = |t: &str| t.lines().filter(|l| l.starts_with("opu_requests_aborted_total{") && l.contains("queue_full")).filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok()).sum::<f64>();
        count(&after_text) - count(&before_text)
    };

    println!();
    let whole = answered - answered_stream;
    println!("  {:<48} {answered} ({answered_stream} streamed, {whole} whole)", "requests answered (200, complete)");
    println!("  {:<48} {refused}", "refused (503 with Retry-After)");
    println!("  {:<48} {}", "lost (other status, transport error, incomplete)", lost.len());
    println!("  {:<48} {hung}", format!("hung (no end within {} s)", HUNG_AFTER.as_secs()));
    println!("  {:<48} {wall:.1}", "wall seconds");
    println!("  {:<48} {:.2} (answered {:.2})", "requests/s (all ends)", n as f64 / wall, answered as f64 / wall);
    println!("  {:<48} {tokens} (server counted {})", "generated tokens (usage.completion_tokens)", delta.tokens);
    println!("  {:<48} {:.1}", "generated tokens/s", tokens as f64 / wall);
    println!(
        "  {:<48} p50 {:.2} s, p99 {:.2} s  ({} streams)",
        "time to first token (streams: first text chunk)",
        percentile(&ttfts, 50.0),
        percentile(&ttfts, 99.0),
        ttfts.len()
    );
    println!("  {:<48} p50 {:.2} s, p99 {:.2} s", "latency, all answered", percentile(&latencies, 50.0), percentile(&latencies, 99.0));
    println!("  {:<48} p50 {:.2} s, p99 {:.2} s", "latency, streamed (to [DONE])", percentile(&latencies_stream, 50.0), percentile(&latencies_stream, 99.0));
    println!("  {:<48} p50 {:.2} s, p99 {:.2} s", "latency, whole (= their time to first token)", percentile(&latencies_whole, 50.0), percentile(&latencies_whole, 99.0));
    println!("  {:<48} {:.2} ({} decode passes)", "mean batch size per decode pass", delta.mean_batch(), delta.batch_count);
    println!("  {:<48} {}", "device bytes per generated token (incl. prefill)", si(delta.bytes_per_token()));
    println!("  {:<48} {}", "device cycles per generated token (incl. prefill)", si(delta.cycles_per_token()));
    println!("  {:<48} {} ; opu_requests_aborted_total{{reason=\"queue_full\"}} +{queue_full}", "server: opu_requests_total deltas", status_counts.join(" "));
    if refused == 0 {
        println!("  note: no request was refused: the queue never filled under this load");
    }
    for why in lost.iter().take(10) {
        println!("  lost: {why}");
    }
    Ok(lost.is_empty() && hung == 0)
}

// ---------------------------------------------------------------------------------------------------

/// Starts a server with `max_queue`, waits until it is ready: the model id to send.
async fn ready_server(slot: &mut Option<Server>, client: &reqwest::Client, model_path: &str, max_queue: usize) -> Result<(String, String)> {
    let t0 = Instant::now();
    let server = slot.insert(Server::start(model_path, max_queue)?);
    server.wait_ready(client).await?;
    let models: Value = client.get(format!("{}/v1/models", server.base)).send().await?.json().await.context("GET /v1/models")?;
    let model = models["data"][0]["id"].as_str().ok_or_else(|| anyhow!("GET /v1/models has no data[0].id: {models}"))?.to_string();
    println!();
    println!("server: --max-queue {max_queue} on {}: ready in {:.1} s, model id `{model}`", server.base, t0.elapsed().as_secs_f64());
    Ok((server.base.clone(), model))
}

/// Phase A on one server, phase B on another (its small queue); `slot` holds the running one.
async fn run(slot: &mut Option<Server>, model_path: &str) -> Result<bool> {
    let client = reqwest::Client::builder().timeout(HUNG_AFTER).pool_max_idle_per_host(64).build()?;
    let (base, model) = ready_server(slot, &client, model_path, A_MAX_QUEUE).await?;
    let a = phase_a(&client, &base, &model).await?;
    if let Some(mut s) = slot.take() {
        s.stop();
        let _ = std::fs::remove_file(&s.log);
    }
    let (base, model) = ready_server(slot, &client, model_path, B_MAX_QUEUE).await?;
    let b = phase_b(&client, &base, &model).await?;
    println!();
    println!(
        "result: phase A (<= 1/3 of the lone session's bytes and cycles per token) {}; phase B (nothing lost or hung) {}",
        if a { "passed" } else { "FAILED" },
        if b { "passed" } else { "FAILED" }
    );
    Ok(a && b)
}

#[tokio::main]
async fn main() {
    let Some(model) = std::env::var("OPU_MODEL_GGUF").ok().filter(|m| !m.is_empty()) else {
        println!("serve_load: SKIPPED (set OPU_MODEL_GGUF to a llama GGUF, e.g. SmolLM2-135M-Instruct.Q4_1.gguf)");
        return;
    };
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("serve_load: `opu serve --backend sim --config {} --model {model} --max-sessions {SESSIONS} --max-context {MAX_CONTEXT}` (OPU_SERVE_CONFIG picks the overlay)", overlay());
    println!(
        "machine: available_parallelism {threads}, RAYON_NUM_THREADS {}",
        std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "(unset)".into())
    );
    println!("note: the functional simulator is compute-bound on the CPU, so wall-clock tokens/s need not scale like the device cost");
    let mut slot = None;
    let result = run(&mut slot, &model).await;
    let log = slot.take().map(|mut s: Server| {
        s.stop();
        (s.log.clone(), s.log_tail(20))
    });
    match (result, log) {
        (Ok(true), log) => {
            if let Some((path, _)) = log {
                let _ = std::fs::remove_file(path);
            }
        }
        (Ok(false), log) => {
            if let Some((path, _)) = log {
                println!("server log: {}", path.display());
            }
            std::process::exit(1);
        }
        (Err(e), log) => {
            eprintln!("serve_load: error: {e:#}");
            if let Some((path, tail)) = log {
                eprintln!("server log ({}), last lines:\n{tail}", path.display());
            }
            std::process::exit(1);
        }
    }
}

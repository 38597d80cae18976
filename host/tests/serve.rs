//! `opu serve` over HTTP, the real binary on the sim backend: bad requests get 400 with a JSON error, greedy
//! text equals `opu run` alone and batched, a full queue answers 503 with Retry-After, a gone client frees
//! its slot, a request past its timeout gets 504, SIGTERM during a stream ends it cleanly, and a card that
//! fails turns `/health` to 503.

mod common;

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};


/// The model id the server answers to (the file's name without `.gguf`).
fn model_id(path: &std::path::Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

struct Server {
    child: Child,
    base: String,
    model: String,
}

impl Server {
    /// Starts `opu serve --backend sim` with `args` on a free port; waits until /health answers 200.
    async fn start(path: &std::path::Path, args: &[&str]) -> Server {
        Server::start_on("sim", path, args).await
    }

    /// [`Server::start`] on `backend`.
    async fn start_on(backend: &str, path: &std::path::Path, args: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_opu"))
            .args(["serve", "--backend", backend, "--model", path.to_str().unwrap(), "--port", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let s = Server { child, base: format!("http://127.0.0.1:{port}"), model: model_id(path) };
        let t = Instant::now();
        loop {
            if let Ok(r) = reqwest::get(format!("{}/health", s.base)).await {
                if r.status() == 200 {
                    return s;
                }
            }
            assert!(t.elapsed() < Duration::from_secs(120), "the server did not become ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        reqwest::Client::new().post(self.url(path)).json(body).send().await.unwrap()
    }

    /// A metric's value summed over its label sets (0 when absent).
    async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(self.url("/metrics")).await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn terminate(&self) {
        assert!(Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap().success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads a server-sent event stream to its end: the `data:` payloads in order.
async fn sse(r: reqwest::Response) -> Vec<String> {
    let text = r.text().await.unwrap();
    text.split("\n\n").filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string)).collect()
}

/// The text of a stream's chunks (chat deltas or completion texts) and its finish reason.
fn stream_text(events: &[String]) -> (String, Option<String>) {
    let (mut text, mut finish) = (String::new(), None);
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).unwrap();
        for c in v["choices"].as_array().unwrap() {
            text += c["delta"]["content"].as_str().or(c["text"].as_str()).unwrap_or("");
            if let Some(f) = c["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        }
    }
    (text, finish)
}

/// `opu run --backend sim --json` on `prompt`: its text and generated token count.
fn opu_run(path: &std::path::Path, prompt: &str, chat: bool, max_tokens: usize) -> (String, u64) {
    let mut args = vec!["run", prompt, "--backend", "sim", "--model", path.to_str().unwrap(), "--max-tokens"];
    let n = max_tokens.to_string();
    args.push(&n);
    args.push("--json");
    if chat {
        args.push("--chat");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_opu")).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["text"].as_str().unwrap().to_string(), v["generated_tokens"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_400_with_a_json_error() {
    let path = common::smollm2();
    let s = Server::start(&path, &["--max-sessions", "2", "--max-context", "128", "--max-body-bytes", "4096"]).await;
    let m = s.model.clone();
    let user = json!([{"role": "user", "content": "hi"}]);
    let long_prompt = "word ".repeat(300);
    // (endpoint, raw body, status, param, code)
    type Case<'a> = (&'a str, String, u16, Option<&'a str>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("/v1/chat/completions", "{not json".into(), 400, None, None),
        ("/v1/chat/completions", "[1, 2]".into(), 400, None, None),
        ("/v1/chat/completions", json!({"model": m}).to_string(), 400, Some("messages"), None),
        ("/v1/chat/completions", json!({"messages": user}).to_string(), 400, Some("model"), None),
        ("/v1/chat/completions", json!({"model": m, "messages": "hi"}).to_string(), 400, Some("messages"), None),
        ("/v1/chat/completions", json!({"model": m, "messages": user, "max_tokens": "ten"}).to_string(), 400, Some("max_tokens"), None),
        ("/v1/chat/completions", json!({"model": m, "messages": user, "temperature": "hot"}).to_string(), 400, Some("temperature"), None),
        ("/v1/chat/completions", json!({"model": m, "messages": user, "stream": 1}).to_string(), 400, Some("stream"), None),
        ("/v1/chat/completions", json!({"model": "gpt-4o", "messages": user}).to_string(), 400, Some("model"), Some("model_not_found")),
        ("/v1/chat/completions", json!({"model": m, "messages": user, "max_tokens": 1000}).to_string(), 400, Some("max_tokens"), Some("context_length_exceeded")),
        ("/v1/completions", json!({"model": m}).to_string(), 400, Some("prompt"), None),
        ("/v1/completions", json!({"model": m, "prompt": {"text": "x"}}).to_string(), 400, Some("prompt"), None),
        ("/v1/completions", json!({"model": m, "prompt": long_prompt}).to_string(), 400, Some("prompt"), Some("context_length_exceeded")),
        ("/v1/completions", json!({"model": m, "prompt": [1, 99999999]}).to_string(), 400, Some("prompt"), None),
        ("/v1/completions", json!({"model": m, "prompt": "x", "n": 3}).to_string(), 400, Some("n"), None),
        // over --max-body-bytes
        ("/v1/completions", json!({"model": m, "prompt": "y".repeat(5000)}).to_string(), 413, None, None),
        ("/v1/embeddings", json!({"model": m, "input": "x"}).to_string(), 404, None, None),
    ];
    let client = reqwest::Client::new();
    for (endpoint, body, status, param, code) in cases {
        let r = client.post(s.url(endpoint)).header("content-type", "application/json").body(body.clone()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{endpoint} {body:.200}");
        assert_eq!(r.headers()["content-type"], "application/json", "{endpoint} {body:.200}");
        let v: Value = r.json().await.unwrap();
        let e = &v["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert_eq!(e["param"].as_str(), param, "{endpoint} {body:.200}: {v}");
        if code.is_some() {
            assert_eq!(e["code"].as_str(), code, "{v}");
        }
    }
    // the server is still well: a good request after all of them
    let r = s.post("/v1/completions", &json!({"model": m, "prompt": "The capital of France is", "max_tokens": 3, "temperature": 0})).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 3, "{v}");
    assert_eq!(s.metric("opu_requests_total").await, 17.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_text_equals_opu_run_alone_and_batched() {
    let path = common::smollm2();
    let chat_q = "What is the capital of France?";
    let prompts = ["The capital of France is", "Once upon a time, there was a", "def add(a, b):"];
    let (chat_text, chat_tokens) = opu_run(&path, chat_q, true, 24);
    let solo: Vec<(String, u64)> = prompts.iter().map(|p| opu_run(&path, p, false, 16)).collect();
    let short = "Hello world";
    let short_solo = opu_run(&path, short, false, 16).0;

    let s = Server::start(&path, &["--max-sessions", "4", "--max-context", "256"]).await;
    let m = s.model.clone();
    let chat = json!({"model": m, "messages": [{"role": "user", "content": chat_q}], "max_tokens": 24, "temperature": 0});
    let complete = |p: &str, stream: bool| json!({"model": m, "prompt": p, "max_tokens": 16, "temperature": 0, "stream": stream, "stream_options": {"include_usage": true}});

    // alone: the chat answer whole, a completion streamed
    let v: Value = s.post("/v1/chat/completions", &chat).await.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"].as_str().unwrap(), chat_text, "{v}");
    assert_eq!(v["usage"]["completion_tokens"].as_u64().unwrap(), chat_tokens, "{v}");
    let r = s.post("/v1/completions", &complete(prompts[0], true)).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = sse(r).await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"].as_u64().unwrap(), solo[0].1, "{usage}");
    let (text, finish) = stream_text(&events);
    assert_eq!(text, solo[0].0);
    assert_eq!(finish.as_deref(), Some(if solo[0].1 == 16 { "length" } else { "stop" }));

    // together: four requests at once decode in shared passes, each with its solo text
    let passes0 = (s.metric("opu_batch_size_count").await, s.metric("opu_batch_size_sum").await);
    let mut tasks = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let (url, body) = (s.url("/v1/completions"), complete(p, i % 2 == 1));
        tasks.push(tokio::spawn(async move {
            let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            if body["stream"] == true {
                stream_text(&sse(r).await).0
            } else {
                r.json::<Value>().await.unwrap()["choices"][0]["text"].as_str().unwrap().to_string()
            }
        }));
    }
    let (url, body) = (s.url("/v1/chat/completions"), chat.clone());
    let chat_task = tokio::spawn(async move { reqwest::Client::new().post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap() });
    for (t, (text, _)) in tasks.into_iter().zip(&solo) {
        assert_eq!(&t.await.unwrap(), text);
    }
    assert_eq!(chat_task.await.unwrap()["choices"][0]["message"]["content"].as_str().unwrap(), chat_text);
    let passes1 = (s.metric("opu_batch_size_count").await, s.metric("opu_batch_size_sum").await);
    let mean = (passes1.1 - passes0.1) / (passes1.0 - passes0.0);
    assert!(mean > 1.5, "mean batch size {mean} of concurrent requests");
    for name in ["opu_time_to_first_token_seconds_count", "opu_inter_token_latency_seconds_count", "opu_device_bytes_read_total", "opu_device_cycles_total", "opu_generation_tokens_total"] {
        assert!(s.metric(name).await > 0.0, "{name}");
    }
    let models: Value = reqwest::get(s.url("/v1/models")).await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], m.as_str());

    // a short prompt arriving while another session decodes rides in its decode passes (no pass of its own)
    // and still gets its solo text
    let mut running = s.post("/v1/chat/completions", &json!({"model": m, "messages": [{"role": "user", "content": chat_q}], "max_tokens": 24, "temperature": 0, "stream": true})).await;
    assert!(running.chunk().await.unwrap().is_some());
    let own_passes = s.metric("opu_passes_total").await - s.metric("opu_batch_size_count").await;
    // (two tokens: with the running session's row, three of the pass's four)
    let v: Value = s.post("/v1/completions", &complete(short, false)).await.json().await.unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], 2, "{v}");
    assert_eq!(v["choices"][0]["text"].as_str().unwrap(), short_solo, "{v}");
    assert_eq!(s.metric("opu_passes_total").await - s.metric("opu_batch_size_count").await, own_passes, "the prompt ran passes of its own");
    let mut rest = Vec::new();
    while let Some(c) = running.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert!(String::from_utf8(rest).unwrap().ends_with("data: [DONE]\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_and_a_gone_client_frees_its_slot() {
    let path = common::smollm2();
    let s = Server::start(&path, &["--max-sessions", "1", "--max-queue", "1", "--max-context", "512"]).await;
    let m = s.model.clone();
    let long = json!({"model": m, "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": true});
    // one session streaming (the only slot) ...
    let mut first = reqwest::Client::new().post(s.url("/v1/completions")).json(&long).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.chunk().await.unwrap().is_some());
    // ... one waiting (the queue's one place) ...
    let (url, body) = (s.url("/v1/completions"), json!({"model": m, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}));
    let waiting = tokio::spawn(async move { reqwest::Client::new().post(url).json(&body).send().await.unwrap() });
    let t = Instant::now();
    while s.metric("opu_queue_length").await < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "the second request never queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ... so a third is refused at once
    let r = s.post("/v1/completions", &json!({"model": m, "prompt": "x", "max_tokens": 2})).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("queue is full"), "{v}");
    // the streaming client goes away: its slot goes to the waiting request, which completes
    drop(first);
    let r = tokio::time::timeout(Duration::from_secs(60), waiting).await.expect("the queued request was never served").unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    assert!(s.metric("opu_requests_aborted_total").await >= 2.0, "a queue_full and a client_gone");
    let gen = s.metric("opu_generation_tokens_total").await;
    assert!(gen < 100.0, "the gone client's session stopped generating ({gen} tokens)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_gets_504() {
    let path = common::smollm2();
    let s = Server::start(&path, &["--max-sessions", "2", "--max-context", "512", "--request-timeout", "1.5"]).await;
    let t = Instant::now();
    let r = s.post("/v1/completions", &json!({"model": s.model, "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0})).await;
    assert_eq!(r.status(), 504);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "timeout", "{v}");
    // streamed: an error event, then [DONE]
    let r = s.post("/v1/completions", &json!({"model": s.model, "prompt": "Once upon a time", "max_tokens": 400, "stream": true})).await;
    let events = sse(r).await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let err: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(err["error"]["type"], "timeout", "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_stream_ends_it_cleanly() {
    let path = common::smollm2();
    let mut s = Server::start(&path, &["--max-sessions", "1", "--max-context", "256"]).await;
    let m = s.model.clone();
    let mut r = s.post("/v1/chat/completions", &json!({"model": m, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 40, "temperature": 0, "stream": true})).await;
    assert_eq!(r.status(), 200);
    let mut body = String::from_utf8(r.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    // a request waiting for the slot when the signal comes is refused with 503
    let (url, queued) = (s.url("/v1/completions"), json!({"model": m, "prompt": "x", "max_tokens": 2}));
    let waiting = tokio::spawn(async move { reqwest::Client::new().post(url).json(&queued).send().await.unwrap() });
    let t = Instant::now();
    while s.metric("opu_queue_length").await < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.terminate();
    let refused = tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.json::<Value>().await.unwrap()["error"]["message"].as_str().unwrap().contains("shutting down"));
    // the running stream goes on to its end
    while let Some(c) = tokio::time::timeout(Duration::from_secs(60), r.chunk()).await.unwrap().unwrap() {
        body += std::str::from_utf8(&c).unwrap();
    }
    let events: Vec<String> = body.split("\n\n").filter_map(|e| e.strip_prefix("data: ").map(str::to_string)).collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    let (text, finish) = stream_text(&events);
    assert!(finish.is_some() && !text.is_empty(), "{body}");
    // and the server exits 0, taking no new connection
    let t = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the server did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(reqwest::get(s.url("/health")).await.is_err());
}

/// A Python with the official `openai` package: a scratch virtual environment under the test's temporary
/// directory, made once. None (SKIPPED) where it cannot be made, unless REQUIRE_OPENAI_CLIENT=1 (CI).
fn openai_python() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let python = venv.join("bin/python");
    let ready = |p: &PathBuf| Command::new(p).args(["-c", "import openai"]).output().is_ok_and(|o| o.status.success());
    if !ready(&python) {
        let made = Command::new("python3").args(["-m", "venv", venv.to_str().unwrap()]).status().is_ok_and(|s| s.success())
            && Command::new(&python).args(["-m", "pip", "install", "--quiet", "openai"]).status().is_ok_and(|s| s.success());
        if !made || !ready(&python) {
            assert_ne!(std::env::var("REQUIRE_OPENAI_CLIENT").as_deref(), Ok("1"), "could not install the openai package in {}", venv.display());
            eprintln!("SKIPPED: could not install the openai Python package into {} (no python3 -m venv or no PyPI)", venv.display());
            return None;
        }
    }
    Some(python)
}

/// The official `openai` Python client (a client no one here wrote) against the server: a chat completion
/// and streamed ones, greedy text equal to `opu run --backend sim`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_gets_opu_runs_text() {
    let path = common::smollm2();
    let Some(python) = openai_python() else { return };
    let chat_q = "What is the capital of France?";
    let prompt = "The capital of France is";
    let (chat_text, chat_tokens) = opu_run(&path, chat_q, true, 24);
    let (text, _) = opu_run(&path, prompt, false, 16);
    let s = Server::start(&path, &["--max-sessions", "2", "--max-context", "256"]).await;
    let script = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="not-needed")
model = client.models.list().data[0].id
chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": sys.argv[2]}], max_tokens=24, temperature=0)
streamed_chat, usage = "", None
for chunk in client.chat.completions.create(model=model, messages=[{"role": "user", "content": sys.argv[2]}], max_tokens=24,
                                             temperature=0, stream=True, stream_options={"include_usage": True}):
    if chunk.choices and chunk.choices[0].delta.content:
        streamed_chat += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage.completion_tokens
streamed = "".join(c.choices[0].text for c in client.completions.create(model=model, prompt=sys.argv[3], max_tokens=16, temperature=0, stream=True))
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    error = None
except Exception as e:
    error = [type(e).__name__, getattr(e, "status_code", None)]
print(json.dumps({"model": model, "chat": chat.choices[0].message.content, "finish": chat.choices[0].finish_reason,
                  "chat_tokens": chat.usage.completion_tokens, "streamed_chat": streamed_chat, "streamed_usage": usage,
                  "streamed": streamed, "error": error}))
"#;
    let out = tokio::task::spawn_blocking({
        let (python, base) = (python.clone(), s.base.clone());
        move || Command::new(python).args(["-c", script, &base, chat_q, prompt]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"], s.model.as_str());
    assert_eq!(v["chat"].as_str().unwrap(), chat_text, "{v}");
    assert_eq!(v["streamed_chat"].as_str().unwrap(), chat_text, "{v}");
    assert_eq!(v["chat_tokens"].as_u64().unwrap(), chat_tokens);
    assert_eq!(v["streamed_usage"].as_u64().unwrap(), chat_tokens);
    assert_eq!(v["streamed"].as_str().unwrap(), text, "{v}");
    assert_eq!(v["error"], json!(["BadRequestError", 400]), "{v}");
}

/// A card whose pass fails: the request gets 500, `/health` turns 503 with `device_error` (so that a
/// readiness probe takes the instance out of its load balancer), `opu_device_failures_total` counts it, and
/// the idle server checks the card again with probe passes while the error lasts. The card is
/// `opu emulate`'s, stopped under the running server (its sysfs entry and files go away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_card_turns_health_to_503() {
    let path = common::smollm2();
    let root = std::env::temp_dir().join(format!("opu-serve-card-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let emulator = common::Emulator::start(&root, &[]);
    let s = Server::start_on("pcie", &path, &["--sysfs-root", root.to_str().unwrap(), "--device-timeout", "20", "--max-sessions", "2", "--max-context", "64"]).await;
    let complete = json!({"model": s.model, "prompt": "The capital of France is", "max_tokens": 2});
    let r = s.post("/v1/completions", &complete).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let h: Value = reqwest::get(s.url("/health")).await.unwrap().json().await.unwrap();
    assert_eq!((h["status"].as_str(), h["device_error"].is_null(), h["slots"].as_u64()), (Some("ok"), true, Some(2)), "{h}");
    assert_eq!(s.metric("opu_device_failures_total").await, 0.0);

    // the card goes away (the emulator stops, removing its card)
    drop(emulator);
    let r = s.post("/v1/completions", &complete).await;
    assert_eq!(r.status(), 500);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "server_error", "{e}");
    let r = reqwest::get(s.url("/health")).await.unwrap();
    assert_eq!(r.status(), 503);
    let h: Value = r.json().await.unwrap();
    assert_eq!(h["status"], "device_error", "{h}");
    assert!(!h["device_error"].as_str().unwrap().is_empty(), "{h}");
    assert!(s.metric("opu_device_failures_total").await >= 1.0);
    // idle, the server checks the card again (every 5 s) and still finds it gone
    let t = Instant::now();
    while !reqwest::get(s.url("/metrics")).await.unwrap().text().await.unwrap().contains("opu_passes_total{kind=\"probe\"}") {
        assert!(t.elapsed() < Duration::from_secs(30), "no probe pass");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = reqwest::get(s.url("/health")).await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(s.metric("opu_device_failures_total").await >= 2.0);
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}

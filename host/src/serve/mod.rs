//! `opu serve`: an OpenAI-compatible HTTP API (axum on tokio) over any backend, with several sessions
//! batched on one overlay (docs/serving.md).
//!
//! - [`api`]: the OpenAI request and response shapes, requests checked field by field.
//! - [`engine`]: the scheduler thread that owns the backend: the bounded queue, continuous batching.
//! - [`metrics`]: `GET /metrics` in the Prometheus text format.
//! - [`stop`]: stop strings over streamed text.
//!
//! The HTTP side never runs the model: a handler checks the request, tokenizes the prompt, queues a job
//! and forwards the scheduler's events (JSON at the end, or server-sent events as they come).

pub mod api;
pub mod engine;
pub mod metrics;
pub mod stop;

use crate::runtime::Session;
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use api::{ApiError, Endpoint, FinishReason, Prompt};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use engine::{EngineContext, Event, Job, Queue, Refused};
use metrics::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// `system_fingerprint` of every response: the server's version.
pub const FINGERPRINT: &str = concat!("opu-", env!("CARGO_PKG_VERSION"));

/// Settings of `opu serve`.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub host: String,
    pub port: u16,
    /// The model id clients name (`/v1/models`).
    pub model_id: String,
    /// Requests waiting for a slot at most; more are answered 503.
    pub max_queue: usize,
    /// Wall time a request may take, queue included.
    pub request_timeout: Duration,
    /// Bytes a request body may have.
    pub body_limit: usize,
    /// Seconds a 503 asks the client to wait (Retry-After).
    pub retry_after: u64,
}

/// Opens the model's session on the scheduler's thread (the backend need not be `Send`).
pub type OpenSession = Box<dyn FnOnce() -> Result<Session> + Send>;

/// What the handlers share.
struct AppState {
    opts: ServeOptions,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    tokenizer: Arc<Tokenizer>,
    /// Set once the backend is open: its context length and slots.
    ready: OnceLock<(usize, usize)>,
    draining: AtomicBool,
    next_id: std::sync::atomic::AtomicU64,
    started: u64,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Runs the server until SIGTERM or SIGINT: binds `host:port`, opens the session (`open`, on the
/// scheduler's thread), answers requests; at the signal it refuses new and queued requests, finishes the
/// running ones and returns. `on_ready` is called with the bound address once the model is loaded.
pub fn serve(opts: ServeOptions, tokenizer: Tokenizer, open: OpenSession, on_ready: Box<dyn FnOnce(std::net::SocketAddr, usize, usize) + Send>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")?;
    rt.block_on(serve_async(opts, tokenizer, open, on_ready))
}

async fn serve_async(opts: ServeOptions, tokenizer: Tokenizer, open: OpenSession, on_ready: Box<dyn FnOnce(std::net::SocketAddr, usize, usize) + Send>) -> Result<()> {
    let addr = format!("{}:{}", opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let state = Arc::new(AppState {
        queue: Arc::new(Queue::new(opts.max_queue)),
        metrics: Arc::new(Metrics::new()),
        tokenizer: Arc::new(tokenizer),
        ready: OnceLock::new(),
        draining: AtomicBool::new(false),
        next_id: Default::default(),
        started: unix_now(),
        opts,
    });

    // The scheduler's thread: opens the backend, then runs until the queue drains.
    // why the scheduler's thread ended early (the model could not be opened, or it panicked)
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let engine = {
        let st = state.clone();
        std::thread::Builder::new().name("opu-scheduler".into()).spawn(move || {
            let mut session = match open() {
                Ok(s) => s,
                Err(e) => {
                    let _ = stop_tx.send(e.context("opening the model"));
                    return false;
                }
            };
            let cycles_are_estimates = session.backend_stats().is_some_and(|v| v.get("cycles_estimate").is_some());
            let cx = EngineContext {
                queue: st.queue.clone(),
                metrics: st.metrics.clone(),
                tokenizer: st.tokenizer.clone(),
                end_tokens: session.end_tokens().to_vec(),
                cycles_are_estimates,
                retry_after: st.opts.retry_after,
            };
            let context = session.context_length();
            let mut slots = session.slots();
            let n = crate::backend::SessionSlots::slots(&slots);
            let _ = st.ready.set((context, n));
            on_ready(local, context, n);
            // a bug in the scheduler must not leave requests waiting forever: they get a 500, and the server
            // shuts down
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine::run(&mut slots, context, &cx)));
            if let Err(panic) = run {
                let what = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                let why = format!("the scheduler stopped: {what}");
                st.draining.store(true, Ordering::SeqCst);
                st.queue.abandon(&why);
                let _ = stop_tx.send(anyhow::anyhow!(why));
                return false;
            }
            true
        })?
    };

    let app = router(state.clone());
    let shutdown = {
        let st = state.clone();
        async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => eprintln!("opu serve: SIGTERM: refusing new requests, finishing the running ones"),
                _ = tokio::signal::ctrl_c() => eprintln!("opu serve: SIGINT: refusing new requests, finishing the running ones"),
                e = &mut stop_rx => {
                    if let Ok(e) = e {
                        eprintln!("error: {}", crate::error_report(&e));
                    }
                }
            }
            st.draining.store(true, Ordering::SeqCst);
            st.queue.drain();
            // a second signal stops at once
            tokio::spawn(async {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                eprintln!("opu serve: a second signal: stopping now, ending the running requests");
                std::process::exit(130);
            });
        }
    };
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.context("serving HTTP")?;
    state.queue.drain();
    // (true: the scheduler ran to its end)
    let finished = matches!(tokio::task::spawn_blocking(move || engine.join()).await, Ok(Ok(true)));
    anyhow::ensure!(state.ready.get().is_some(), "the model could not be opened");
    anyhow::ensure!(finished, "the scheduler stopped before the server did (see above)");
    Ok(())
}

fn router(state: Arc<AppState>) -> Router {
    let limit = state.opts.body_limit;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .fallback(|| async { ApiError::server(StatusCode::NOT_FOUND, "invalid_request_error", "no such endpoint (see docs/serving.md)") })
        .method_not_allowed_fallback(|| async { ApiError::server(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "this endpoint does not take that method (see docs/serving.md)") })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn health(State(st): State<Arc<AppState>>) -> Response {
    let device_error = st.metrics.device_error();
    let (status, code) = match (st.ready.get(), st.draining.load(Ordering::SeqCst), &device_error) {
        (_, true, _) => ("draining", StatusCode::SERVICE_UNAVAILABLE),
        (None, false, _) => ("loading", StatusCode::SERVICE_UNAVAILABLE),
        // the device's latest pass failed: not ready until a pass succeeds again (docs/serving.md)
        (Some(_), false, Some(_)) => ("device_error", StatusCode::SERVICE_UNAVAILABLE),
        (Some(_), false, None) => ("ok", StatusCode::OK),
    };
    let (context, slots) = st.ready.get().copied().unwrap_or((0, 0));
    let body = serde_json::json!({
        "status": status,
        "model": st.opts.model_id,
        "slots": slots,
        "context_length": context,
        "active_sessions": st.metrics.active_sessions.get(),
        "queue_length": st.queue.len(),
        "device_error": device_error,
    });
    (code, Json(body)).into_response()
}

async fn models(State(st): State<Arc<AppState>>) -> Response {
    let context = st.ready.get().map(|r| r.0);
    Json(serde_json::json!({
        "object": "list",
        "data": [{"id": st.opts.model_id, "object": "model", "created": st.started, "owned_by": "opu", "max_model_len": context}],
    }))
    .into_response()
}

async fn metrics_text(State(st): State<Arc<AppState>>) -> Response {
    st.metrics.queue_length.set(st.queue.len() as i64);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], st.metrics.render()).into_response()
}

async fn chat(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(st, Endpoint::Chat, body).await
}

async fn completions(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(st, Endpoint::Completions, body).await
}

/// Sets the job's cancel flag when dropped: the handler or its stream went away (the client is gone).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn complete(st: Arc<AppState>, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let response = match start(&st, endpoint, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    st.metrics.requests.with_label_values(&[endpoint.path(), response.status().as_str()]).inc();
    response
}

/// The request's prompt ids, checked against the vocabulary and the context.
fn prompt_ids(st: &AppState, prompt: &Prompt, context: usize) -> Result<Vec<u32>, ApiError> {
    let tok = &st.tokenizer;
    let ids = match prompt {
        Prompt::Messages(m) => {
            let conversation: Vec<(&str, &str)> = m.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            let text = tok.render_chat(&conversation).map_err(|e| ApiError::invalid("messages", format!("the chat template: {e}")))?;
            tok.encode(&text).map_err(|e| ApiError::invalid("messages", e.to_string()))?
        }
        Prompt::Text(t) => tok.encode(t).map_err(|e| ApiError::invalid("prompt", e.to_string()))?,
        Prompt::Tokens(ids) => {
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= tok.vocab_size()) {
                return Err(ApiError::invalid("prompt", format!("token id {bad} is outside the vocabulary of {}", tok.vocab_size())));
            }
            ids.clone()
        }
    };
    let param = if matches!(prompt, Prompt::Messages(_)) { "messages" } else { "prompt" };
    if ids.is_empty() {
        return Err(ApiError::invalid(param, "the prompt is empty (no tokens): there is nothing to continue"));
    }
    if ids.len() > context {
        return Err(ApiError::invalid(param, format!("the prompt is {} tokens; this model's context is {context} tokens", ids.len())).with_code("context_length_exceeded"));
    }
    Ok(ids)
}

async fn start(st: &Arc<AppState>, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let body = body.map_err(|r| {
        let status = r.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the request body is over the limit of {} bytes (--max-body-bytes)", st.opts.body_limit)
        } else {
            format!("reading the request body: {}", r.body_text())
        };
        ApiError { status, ..ApiError::invalid("", message) }
    })?;
    if st.draining.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the server is shutting down", st.opts.retry_after));
    }
    let Some(&(context, _)) = st.ready.get() else {
        return Err(ApiError::unavailable("the model is loading", st.opts.retry_after));
    };
    let req = api::parse_request(endpoint, &body, &st.opts.model_id)?;
    let ids = prompt_ids(st, &req.prompt, context)?;
    let room = context - ids.len();
    let max_tokens = match req.max_tokens {
        Some(m) if m > room.max(1) => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!("this model's context is {context} tokens; the request asks for {} ({} of prompt, {m} to generate)", ids.len() + m, ids.len()),
            )
            .with_code("context_length_exceeded"))
        }
        Some(m) => m,
        None => room.max(1),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancelled = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancelled.clone());
    let job = Job {
        prompt_ids: ids,
        max_tokens,
        sampling: req.sampling.clone(),
        stop_strings: req.stop.clone(),
        arrived,
        deadline: arrived + st.opts.request_timeout,
        events: tx,
        cancelled,
    };
    match st.queue.submit(job) {
        Ok(()) => {}
        Err(Refused::Full) => {
            st.metrics.aborted.with_label_values(&["queue_full"]).inc();
            return Err(ApiError::unavailable(format!("the queue is full ({} requests waiting, --max-queue)", st.opts.max_queue), st.opts.retry_after));
        }
        Err(Refused::Draining) => return Err(ApiError::unavailable("the server is shutting down", st.opts.retry_after)),
    }
    st.metrics.queue_length.set(st.queue.len() as i64);
    // Wait for a slot: a refusal or timeout is still an HTTP error, not a broken stream.
    match rx.recv().await {
        Some(Event::Started) => {}
        Some(Event::Failed(e)) => return Err(e),
        Some(other) => return Err(ApiError::server(StatusCode::INTERNAL_SERVER_ERROR, "server_error", format!("the scheduler answered {other:?} before starting"))),
        None => return Err(ApiError::unavailable("the server is shutting down", st.opts.retry_after)),
    }
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
    };
    let id = format!("{prefix}-{:x}{:08x}", st.started, st.next_id.fetch_add(1, Ordering::Relaxed));
    let created = unix_now();
    let model = st.opts.model_id.clone();
    if !req.stream {
        let mut text = String::new();
        loop {
            match rx.recv().await {
                Some(Event::Text(t)) => text += &t,
                Some(Event::Done { finish, prompt_tokens, completion_tokens }) => {
                    drop(guard);
                    let body = api::completion_response(endpoint, &id, created, &model, &text, finish, (prompt_tokens, completion_tokens));
                    return Ok(Json(body).into_response());
                }
                Some(Event::Failed(e)) => return Err(e),
                Some(Event::Started) => {}
                None => return Err(ApiError::server(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the scheduler ended the request")),
            }
        }
    }
    // Server-sent events: a chunk per piece of text, the finish, the usage if asked, then [DONE].
    struct StreamState {
        rx: mpsc::UnboundedReceiver<Event>,
        _guard: CancelOnDrop,
        first: bool,
        done: bool,
        pending: std::collections::VecDeque<String>,
    }
    let (include_usage, endpoint_) = (req.include_usage, endpoint);
    let state = StreamState { rx, _guard: guard, first: true, done: false, pending: Default::default() };
    let stream = futures_util::stream::unfold(state, move |mut s| {
        let (id, model) = (id.clone(), model.clone());
        async move {
            loop {
                if let Some(data) = s.pending.pop_front() {
                    return Some((Ok::<_, std::convert::Infallible>(SseEvent::default().data(data)), s));
                }
                if s.done {
                    return None;
                }
                let chunk = |text: Option<&str>, first: bool, finish: Option<FinishReason>| {
                    api::stream_chunk(endpoint_, &id, created, &model, text, first, finish).to_string()
                };
                match s.rx.recv().await {
                    Some(Event::Text(t)) => {
                        s.pending.push_back(chunk(Some(&t), s.first, None));
                        s.first = false;
                    }
                    Some(Event::Done { finish, prompt_tokens, completion_tokens }) => {
                        if s.first && endpoint_ == Endpoint::Chat {
                            s.pending.push_back(chunk(Some(""), true, None));
                        }
                        s.pending.push_back(chunk(None, false, Some(finish)));
                        if include_usage {
                            s.pending.push_back(api::usage_chunk(endpoint_, &id, created, &model, prompt_tokens, completion_tokens).to_string());
                        }
                        s.pending.push_back("[DONE]".into());
                        s.done = true;
                    }
                    Some(Event::Failed(e)) => {
                        s.pending.push_back(e.body().to_string());
                        s.pending.push_back("[DONE]".into());
                        s.done = true;
                    }
                    Some(Event::Started) => {}
                    None => return None,
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

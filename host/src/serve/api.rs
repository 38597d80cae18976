//! The OpenAI request and response shapes of `opu serve`: requests checked field by field (a bad one is a
//! 400 naming the field, as OpenAI's own errors do), responses and stream chunks as the `openai` clients
//! read them.

use crate::sampling::SamplingParams;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// An error answered as OpenAI answers it: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a Retry-After header (503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about request field `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: (!param.is_empty()).then(|| param.to_string()),
            code: None,
            retry_after: None,
        }
    }
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
    /// 503 with Retry-After: the queue is full, or the server is loading or shutting down.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_overloaded",
            param: None,
            code: None,
            retry_after: Some(retry_after),
        }
    }
    pub fn server(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, s.into());
        }
        // a timed-out or failed request is not worth running again: OpenAI's clients retry 5xx answers
        // unless told not to
        if self.status.is_server_error() && self.retry_after.is_none() {
            r.headers_mut().insert("x-should-retry", axum::http::HeaderValue::from_static("false"));
        }
        r
    }
}

/// Which endpoint a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
}

/// What the prompt of a request is, before tokenization.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Chat messages `(role, content)`, rendered with the model's chat template.
    Messages(Vec<(String, String)>),
    Text(String),
    Tokens(Vec<u32>),
}

/// A checked request of either endpoint.
#[derive(Clone, Debug)]
pub struct Request {
    pub endpoint: Endpoint,
    pub model: String,
    pub prompt: Prompt,
    /// `None`: until the context is full or a stop.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    /// Stop strings: generation ends before the first one in the text (not part of it).
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage counts.
    pub include_usage: bool,
}

/// Most stop strings a request may give (OpenAI's limit).
pub const MAX_STOP: usize = 4;

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The fields of a request object, read with errors that name them.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    /// The field, absent when missing or null (OpenAI's clients send null for unset fields).
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }
    fn string(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(ApiError::invalid(name, format!("`{name}` must be a string, got {}", type_name(v)))),
        }
    }
    fn boolean(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ApiError::invalid(name, format!("`{name}` must be a boolean, got {}", type_name(v)))),
        }
    }
    fn number(&self, name: &str) -> Result<Option<f64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(v) => Err(ApiError::invalid(name, format!("`{name}` must be a number, got {}", type_name(v)))),
        }
    }
    fn integer(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(u) => Ok(Some(u)),
                None => Err(ApiError::invalid(name, format!("`{name}` must be a non-negative integer, got {n}"))),
            },
            Some(v) => Err(ApiError::invalid(name, format!("`{name}` must be an integer, got {}", type_name(v)))),
        }
    }
}

/// Parses and checks a request body (JSON) for `endpoint`. `served_model`: the one model id this server
/// answers to.
pub fn parse_request(endpoint: Endpoint, body: &[u8], served_model: &str) -> Result<Request, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::invalid("", format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = &value else {
        return Err(ApiError::invalid("", format!("the request body must be a JSON object, got {}", type_name(&value))));
    };
    let f = Fields(obj);
    let model = f.string("model")?.ok_or_else(|| ApiError::invalid("model", "`model` is required"))?;
    if model != served_model {
        return Err(ApiError::invalid("model", format!("the model `{model}` does not exist: this server serves `{served_model}` (GET /v1/models)")).with_code("model_not_found"));
    }
    let prompt = match endpoint {
        Endpoint::Chat => Prompt::Messages(parse_messages(f.get("messages"))?),
        Endpoint::Completions => parse_prompt(f.get("prompt"))?,
    };
    // `max_completion_tokens` is the newer name of the chat API's `max_tokens`
    let max_tokens = match f.integer("max_completion_tokens")? {
        Some(n) => Some(n),
        None => f.integer("max_tokens")?,
    };
    if max_tokens == Some(0) {
        return Err(ApiError::invalid("max_tokens", "`max_tokens` must be at least 1"));
    }
    let temperature = f.number("temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid("temperature", format!("`temperature` must be between 0 and 2, got {temperature}")));
    }
    let top_p = f.number("top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid("top_p", format!("`top_p` must be above 0 and at most 1, got {top_p}")));
    }
    let top_k = f.integer("top_k")?.unwrap_or(0) as usize;
    // unseeded sampling differs per request, as OpenAI's does; a seed repeats it
    let seed = match f.get("seed") {
        None => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64().unwrap_or(0) as u64,
        Some(v) => return Err(ApiError::invalid("seed", format!("`seed` must be an integer, got {}", type_name(v)))),
    };
    let n = f.integer("n")?.unwrap_or(1);
    if n != 1 {
        return Err(ApiError::invalid("n", format!("`n` = {n}: this server returns one choice per request (n = 1)")));
    }
    let stop = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    v => return Err(ApiError::invalid("stop", format!("`stop[{i}]` must be a string, got {}", type_name(v)))),
                }
            }
            out
        }
        Some(v) => return Err(ApiError::invalid("stop", format!("`stop` must be a string or an array of strings, got {}", type_name(v)))),
    };
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid("stop", format!("`stop` holds {} strings; at most {MAX_STOP}", stop.len())));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "`stop` strings must not be empty"));
    }
    let stream = f.boolean("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).boolean("include_usage").map_err(|e| ApiError { param: Some("stream_options.include_usage".into()), ..e })?.unwrap_or(false),
        Some(v) => return Err(ApiError::invalid("stream_options", format!("`stream_options` must be an object, got {}", type_name(v)))),
    };
    // what this server does not do is refused, not ignored (fields it does not know are ignored, as
    // OpenAI-compatible servers do)
    for name in ["tools", "functions", "logit_bias"] {
        let empty = match f.get(name) {
            None => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        };
        if !empty {
            return Err(ApiError::invalid(name, format!("`{name}` is not supported")));
        }
    }
    if let Some(rf) = f.get("response_format") {
        if rf.get("type").and_then(Value::as_str) != Some("text") {
            return Err(ApiError::invalid("response_format", "`response_format`: only {\"type\": \"text\"} is supported"));
        }
    }
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid("suffix", "`suffix` is not supported"));
    }
    for (name, off) in [("presence_penalty", 0.0), ("frequency_penalty", 0.0)] {
        if let Some(x) = f.number(name)? {
            if x != off {
                return Err(ApiError::invalid(name, format!("`{name}` is not supported (only 0)")));
            }
        }
    }
    for name in ["logprobs", "echo"] {
        let on = match f.get(name) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => n.as_f64() != Some(0.0),
            Some(v) => return Err(ApiError::invalid(name, format!("`{name}` must be a boolean, got {}", type_name(v)))),
        };
        if on {
            return Err(ApiError::invalid(name, format!("`{name}` is not supported")));
        }
    }
    if let Some(best_of) = f.integer("best_of")? {
        if best_of != 1 {
            return Err(ApiError::invalid("best_of", "`best_of` is not supported (only 1)"));
        }
    }
    Ok(Request {
        endpoint,
        model,
        prompt,
        max_tokens: max_tokens.map(|n| n as usize),
        sampling: SamplingParams { temperature: temperature as f32, top_k, top_p: top_p as f32, seed },
        stop,
        stream,
        include_usage,
    })
}

/// `messages`: a non-empty array of `{role, content}`, content a string or an array of text parts.
fn parse_messages(v: Option<&Value>) -> Result<Vec<(String, String)>, ApiError> {
    let items = match v {
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
        Some(Value::Array(items)) => items,
        Some(v) => return Err(ApiError::invalid("messages", format!("`messages` must be an array, got {}", type_name(v)))),
    };
    if items.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` must hold at least one message"));
    }
    let mut out = Vec::new();
    for (i, m) in items.iter().enumerate() {
        let param = format!("messages[{i}]");
        let Value::Object(o) = m else {
            return Err(ApiError::invalid(&param, format!("`{param}` must be an object, got {}", type_name(m))));
        };
        let role = match o.get("role") {
            Some(Value::String(r)) if ["system", "developer", "user", "assistant"].contains(&r.as_str()) => r.clone(),
            Some(Value::String(r)) => {
                return Err(ApiError::invalid(&format!("{param}.role"), format!("`{param}.role` = `{r}`: expected system, developer, user or assistant")))
            }
            Some(v) => return Err(ApiError::invalid(&format!("{param}.role"), format!("`{param}.role` must be a string, got {}", type_name(v)))),
            None => return Err(ApiError::invalid(&format!("{param}.role"), format!("`{param}.role` is required"))),
        };
        let content = match o.get("content") {
            Some(Value::String(c)) => c.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => text += t,
                        _ => {
                            return Err(ApiError::invalid(
                                &format!("{param}.content[{j}]"),
                                format!("`{param}.content[{j}]` must be a text part {{\"type\": \"text\", \"text\": ...}} (this model reads text only)"),
                            ))
                        }
                    }
                }
                text
            }
            Some(v) => return Err(ApiError::invalid(&format!("{param}.content"), format!("`{param}.content` must be a string or an array of text parts, got {}", type_name(v)))),
            None => return Err(ApiError::invalid(&format!("{param}.content"), format!("`{param}.content` is required"))),
        };
        // the chat templates of llama models know system, user and assistant
        let role = if role == "developer" { "system".to_string() } else { role };
        out.push((role, content));
    }
    Ok(out)
}

/// `prompt`: a string, an array of one string, or an array of token ids.
fn parse_prompt(v: Option<&Value>) -> Result<Prompt, ApiError> {
    match v {
        None => Err(ApiError::invalid("prompt", "`prompt` is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => Ok(Prompt::Text(items[0].as_str().unwrap_or_default().to_string())),
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_number) => items
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()).ok_or_else(|| ApiError::invalid("prompt", format!("`prompt` token id {t} is not a u32"))))
            .collect::<Result<_, _>>()
            .map(Prompt::Tokens),
        Some(Value::Array(items)) if items.len() > 1 && items.iter().all(Value::is_string) => {
            Err(ApiError::invalid("prompt", format!("`prompt` holds {} strings: this server takes one prompt per request", items.len())))
        }
        Some(v) => Err(ApiError::invalid("prompt", format!("`prompt` must be a string, an array of one string, or an array of token ids; got {}", type_name(v)))),
    }
}

/// Why a completion ended, as OpenAI names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// The `usage` object.
pub fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens})
}

/// The body every completion response and chunk shares, with its `choices` (and `usage`).
fn completion_object(object: &str, id: &str, created: u64, model: &str, choices: Value, usage: Option<Value>) -> Value {
    let mut v = json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "system_fingerprint": crate::serve::FINGERPRINT,
        "choices": choices,
    });
    if let Some(u) = usage {
        v["usage"] = u;
    }
    v
}

/// `object` of a stream's chunks.
fn chunk_object(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "chat.completion.chunk",
        Endpoint::Completions => "text_completion",
    }
}

/// The response of a whole (non-streamed) completion. `usage`: (prompt tokens, completion tokens).
pub fn completion_response(endpoint: Endpoint, id: &str, created: u64, model: &str, text: &str, finish: FinishReason, (prompt_tokens, completion_tokens): (usize, usize)) -> Value {
    let (object, choice) = match endpoint {
        Endpoint::Chat => ("chat.completion", json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish.as_str()})),
        Endpoint::Completions => ("text_completion", json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish.as_str()})),
    };
    completion_object(object, id, created, model, json!([choice]), Some(usage(prompt_tokens, completion_tokens)))
}

/// One chunk of a streamed completion: `text` (chat: the first chunk carries the role), or the last
/// choice chunk with its `finish`.
pub fn stream_chunk(endpoint: Endpoint, id: &str, created: u64, model: &str, text: Option<&str>, first: bool, finish: Option<FinishReason>) -> Value {
    let finish = finish.map(FinishReason::as_str);
    let choice = match endpoint {
        Endpoint::Chat => {
            let mut delta = Map::new();
            if first {
                delta.insert("role".into(), "assistant".into());
            }
            if let Some(t) = text {
                delta.insert("content".into(), t.into());
            }
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        }
        Endpoint::Completions => json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish}),
    };
    completion_object(chunk_object(endpoint), id, created, model, json!([choice]), None)
}

/// The chunk after the last choice chunk when `stream_options.include_usage`: no choices, the usage.
pub fn usage_chunk(endpoint: Endpoint, id: &str, created: u64, model: &str, prompt_tokens: usize, completion_tokens: usize) -> Value {
    completion_object(chunk_object(endpoint), id, created, model, json!([]), Some(usage(prompt_tokens, completion_tokens)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Request, ApiError> {
        parse_request(Endpoint::Chat, body.as_bytes(), "m")
    }

    #[test]
    fn a_chat_request_reads_every_field() {
        let r = parse(r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "max_tokens":12,"temperature":0,"top_p":0.5,"seed":7,"stop":["\n"],"stream":true,"stream_options":{"include_usage":true}}"#)
        .unwrap();
        assert_eq!(r.prompt, Prompt::Messages(vec![("system".into(), "be brief".into()), ("user".into(), "hi".into())]));
        assert_eq!(r.max_tokens, Some(12));
        assert_eq!(r.sampling, SamplingParams { temperature: 0.0, top_k: 0, top_p: 0.5, seed: 7 });
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert!(r.stream && r.include_usage);
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, param) in [
            (r#"{"model":"m","messages":[]}"#, "messages"),
            (r#"{"model":"m"}"#, "messages"),
            (r#"{"messages":[{"role":"user","content":"x"}]}"#, "model"),
            (r#"{"model":"other","messages":[{"role":"user","content":"x"}]}"#, "model"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}"#, "max_tokens"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#, "max_tokens"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3}"#, "temperature"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0}"#, "top_p"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[1]}"#, "stop"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}"#, "n"),
            (r#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#, "messages[0].role"),
            (r#"{"model":"m","messages":[{"role":"user"}]}"#, "messages[0].content"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#, "stream"),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
        let e = parse("{not json").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        assert!(parse("[1]").unwrap_err().message.contains("must be a JSON object"));
    }

    #[test]
    fn completion_prompts() {
        let p = |body: &str| parse_request(Endpoint::Completions, body.as_bytes(), "m").map(|r| r.prompt);
        assert_eq!(p(r#"{"model":"m","prompt":"a"}"#).unwrap(), Prompt::Text("a".into()));
        assert_eq!(p(r#"{"model":"m","prompt":["a"]}"#).unwrap(), Prompt::Text("a".into()));
        assert_eq!(p(r#"{"model":"m","prompt":[1,2]}"#).unwrap(), Prompt::Tokens(vec![1, 2]));
        assert!(p(r#"{"model":"m","prompt":["a","b"]}"#).is_err());
        assert!(p(r#"{"model":"m","prompt":5}"#).is_err());
    }
}

//! The model's tokenizer, built from a GGUF file's metadata, and its chat template.
//!
//! Only llama.cpp's "gpt2" tokenizer model (byte-level BPE from `tokenizer.ggml.tokens` and
//! `tokenizer.ggml.merges`) is supported, with the pre-tokenizers whose llama.cpp regexes the `tokenizers`
//! crate reproduces exactly. Control, user-defined and unknown tokens are matched in the input text as
//! llama.cpp does with `parse_special`, so "<|im_start|>" in a prompt is one token. Decoding goes through each
//! token's bytes, so a streamed character split across tokens is held back until it is complete.

use opu_compiler::gguf::{Gguf, GgufError, Value};
use std::path::PathBuf;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::AddedToken;

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// llama.cpp's token types (`llama_token_type`).
const TYPE_UNKNOWN: u64 = 2;
const TYPE_CONTROL: u64 = 3;
const TYPE_USER_DEFINED: u64 = 4;

/// What went wrong building or using a tokenizer. Every message names the GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key is missing or has the wrong type (the reader's error names file and key).
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: metadata `{key}`: {what}")]
    Metadata { path: PathBuf, key: String, what: String },
    #[error("{path}: token id {id} is out of range (the vocabulary in `{KEY_TOKENS}` has {vocab_size} tokens)")]
    TokenId { path: PathBuf, id: u32, vocab_size: usize },
    #[error("{path}: encoding failed: {what}")]
    Encode { path: PathBuf, what: String },
    #[error("{path}: no chat template (metadata `{KEY_CHAT_TEMPLATE}` is missing)")]
    NoChatTemplate { path: PathBuf },
    #[error("{path}: chat template `{KEY_CHAT_TEMPLATE}`: {what}")]
    Template { path: PathBuf, what: String },
}

/// A byte-level BPE tokenizer with the GGUF's special tokens and chat template.
pub struct Tokenizer {
    path: PathBuf,
    inner: tokenizers::Tokenizer,
    /// Token texts by id, as stored in the GGUF ("Ġhello").
    tokens: Vec<String>,
    /// The bytes each token decodes to, all tokens back to back: token `i` is `bytes[ends[i - 1]..ends[i]]`.
    /// Precomputed so that decoding is slicing, and so that streaming can hold back part of a character.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.tokens.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from the GGUF's `tokenizer.*` metadata.
    pub fn from_gguf(g: &Gguf) -> Result<Self, TokenizerError> {
        let path = g.path.clone();
        let meta_err = |key: &str, what: String| TokenizerError::Metadata { path: path.clone(), key: key.into(), what };

        let model = g.get_str(KEY_MODEL)?;
        if model != "gpt2" {
            return Err(meta_err(KEY_MODEL, format!("tokenizer model \"{model}\" is not supported (only \"gpt2\", byte-level BPE)")));
        }
        let pre = g.get_str(KEY_PRE)?;
        let pre_tokenizer = pre_tokenizer(pre).ok_or_else(|| {
            meta_err(KEY_PRE, format!("pre-tokenizer \"{pre}\" is not supported (supported: \"smollm\", \"starcoder\", \"gpt-2\")"))
        })?;

        let tokens: Vec<String> = g.get_strings(KEY_TOKENS)?.into_iter().map(str::to_owned).collect();
        if tokens.is_empty() || u32::try_from(tokens.len()).is_err() {
            return Err(meta_err(KEY_TOKENS, format!("{} tokens (expected 1..2^32)", tokens.len())));
        }
        let n = tokens.len();
        let types = token_types(g, n)?;

        let mut vocab = Vocab::with_capacity(n);
        for (id, t) in tokens.iter().enumerate() {
            // A duplicate would leave one of the two ids undecodable and unencodable.
            if let Some(first) = vocab.insert(t.clone(), id as u32) {
                return Err(meta_err(KEY_TOKENS, format!("token {t:?} appears twice (ids {first} and {id})")));
            }
        }
        let merges = parse_merges(&g.get_strings(KEY_MERGES)?, &vocab).map_err(|what| meta_err(KEY_MERGES, what))?;
        // No unk token and no dropout: byte-level BPE covers every input byte.
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| meta_err(KEY_MERGES, format!("building the BPE model: {e}")))?;

        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        // llama.cpp matches these tokens in the text before BPE; `normalized(false)` matches them byte for byte.
        let added = |special: bool, keep: &dyn Fn(u64) -> bool| -> Vec<AddedToken> {
            (0..n)
                .filter(|&i| keep(types[i]) && !tokens[i].is_empty())
                .map(|i| AddedToken::from(tokens[i].clone(), special).normalized(false))
                .collect()
        };
        inner.add_special_tokens(&added(true, &|t| t == TYPE_CONTROL || t == TYPE_UNKNOWN));
        inner.add_tokens(&added(false, &|t| t == TYPE_USER_DEFINED));

        let bos = optional_id(g, KEY_BOS, n)?;
        let eos = optional_id(g, KEY_EOS, n)?;
        let add_bos = match g.metadata.get(KEY_ADD_BOS) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(meta_err(KEY_ADD_BOS, format!("expected a bool, found {v:?}"))),
        };
        if add_bos && bos.is_none() {
            return Err(meta_err(KEY_ADD_BOS, format!("is true but `{KEY_BOS}` is missing")));
        }
        let chat_template = match g.metadata.get(KEY_CHAT_TEMPLATE) {
            None => None,
            Some(_) => Some(g.get_str(KEY_CHAT_TEMPLATE)?.to_owned()),
        };

        let (bytes, ends) = token_bytes(&tokens, &types);
        Ok(Tokenizer { path, inner, tokens, bytes, ends, bos, eos, add_bos, chat_template })
    }

    /// Token ids of `text`, special tokens parsed; BOS first only if `tokenizer.ggml.add_bos_token` is true.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        // `false`: no post-processor is set; BOS is handled here, as the GGUF says.
        let enc =
            self.inner.encode_fast(text, false).map_err(|e| TokenizerError::Encode { path: self.path.clone(), what: e.to_string() })?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        ids.extend(self.bos.filter(|_| self.add_bos));
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// The text of `ids`; special tokens appear as their text, invalid UTF-8 as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut buf = Vec::new();
        for &id in ids {
            buf.extend_from_slice(self.bytes_of(id)?);
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }
    /// The token's text as stored in the vocabulary (byte-level: " hello" is "Ġhello").
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.tokens.get(id as usize).cloned()
    }
    /// The id of the token whose vocabulary text is exactly `text` ("<|endoftext|>", "Ġhello").
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// Renders the GGUF's chat template for one user message (system prompt: the template's default, or
    /// `system` if given), with the generation prompt appended.
    pub fn chat_prompt(&self, user: &str, system: Option<&str>) -> Result<String, TokenizerError> {
        let mut messages = Vec::new();
        if let Some(system) = system {
            messages.push(("system", system));
        }
        messages.push(("user", user));
        self.render_chat(&messages)
    }

    /// Renders the GGUF's chat template for a conversation of `(role, content)` messages (the template's
    /// default system prompt where it has one and none is given), with the generation prompt appended.
    pub fn render_chat(&self, conversation: &[(&str, &str)]) -> Result<String, TokenizerError> {
        use minijinja::{context, Environment, Error, ErrorKind};
        let source = self.chat_template.as_deref().ok_or_else(|| TokenizerError::NoChatTemplate { path: self.path.clone() })?;
        let template_err = |e: Error| TokenizerError::Template { path: self.path.clone(), what: format!("{e:#}") };
        let mut env = Environment::new();
        // Hugging Face renders chat templates with jinja2's trim_blocks and lstrip_blocks, and gives them
        // `raise_exception`; the templates are written for that.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", |msg: String| -> Result<minijinja::Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        let template = env.template_from_str(source).map_err(template_err)?;
        let messages: Vec<_> = conversation.iter().map(|&(role, content)| context! { role => role, content => content }).collect();
        let special = |id: Option<u32>| id.and_then(|id| self.tokens.get(id as usize)).map_or("", String::as_str);
        template
            .render(context! {
                messages,
                add_generation_prompt => true,
                bos_token => special(self.bos),
                eos_token => special(self.eos),
            })
            .map_err(template_err)
    }

    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, pending: Vec::new() }
    }

    fn bytes_of(&self, id: u32) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        if i >= self.tokens.len() {
            return Err(TokenizerError::TokenId { path: self.path.clone(), id, vocab_size: self.tokens.len() });
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Ok(&self.bytes[start..self.ends[i]])
    }
}

/// Incremental detokenization for streaming output: feed ids one at a time, get the newly completed text
/// (never splits a UTF-8 character; holds back bytes of an incomplete character). The pieces put together
/// equal `decode` of all the ids.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    /// Bytes of a character that is not complete yet.
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(self.tok.bytes_of(id)?);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return Ok(out);
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).expect("valid up to here"));
                    match e.error_len() {
                        // Bytes that no continuation can make valid: replaced as `from_utf8_lossy` does.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        // The start of a character whose remaining bytes may come with the next token.
                        None => {
                            self.pending.drain(..valid);
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    /// Ends the stream: a character left incomplete comes out as U+FFFD.
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Ok(out)
    }
}

/// The pre-tokenizers whose llama.cpp regexes `tokenizers` reproduces: digits one by one then GPT-2's regex
/// ("smollm", "starcoder"), or GPT-2's regex alone ("gpt-2"). Others (llama3, qwen2, ...) split differently.
fn pre_tokenizer(pre: &str) -> Option<PreTokenizerWrapper> {
    // No prefix space (llama.cpp adds none for gpt2); trim_offsets only affects offsets, which are unused.
    let byte_level = ByteLevel::new(false, true, true);
    match pre {
        "smollm" | "starcoder" => Some(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()),
        "gpt-2" => Some(byte_level.into()),
        _ => None,
    }
}

/// `tokenizer.ggml.token_type`, one per token; all normal if absent (as llama.cpp reads it).
fn token_types(g: &Gguf, n: usize) -> Result<Vec<u64>, TokenizerError> {
    let err = |what: String| TokenizerError::Metadata { path: g.path.clone(), key: KEY_TYPES.into(), what };
    let Some(v) = g.metadata.get(KEY_TYPES) else {
        return Ok(vec![1; n]);
    };
    let types: Vec<u64> = v
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect())
        .ok_or_else(|| err("expected an array of non-negative integers".into()))?;
    if types.len() != n {
        return Err(err(format!("{} types for {n} tokens", types.len())));
    }
    Ok(types)
}

/// Merges "a b" as pairs, checked against the vocabulary so a bad one is reported by index and text.
fn parse_merges(merges: &[&str], vocab: &Vocab) -> Result<Vec<(String, String)>, String> {
    merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            // The separator is the first space after the first character (as llama.cpp splits: a token may
            // be a lone space only in the first place, and byte-level tokens never hold one).
            let first = m.chars().next().map_or(0, char::len_utf8);
            let sep = m[first..].find(' ').map(|p| p + first).filter(|&p| p > 0 && p + 1 < m.len());
            let Some(sep) = sep else {
                return Err(format!("merge {i} ({m:?}) is not two tokens separated by a space"));
            };
            let (a, b) = (&m[..sep], &m[sep + 1..]);
            for t in [a, b, &format!("{a}{b}")] {
                if !vocab.contains_key(t) {
                    return Err(format!("merge {i} ({m:?}): token {t:?} is not in `{KEY_TOKENS}`"));
                }
            }
            Ok((a.to_owned(), b.to_owned()))
        })
        .collect()
}

/// A token id metadata value, if present; it must name a token.
fn optional_id(g: &Gguf, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    if !g.metadata.contains_key(key) {
        return Ok(None);
    }
    let id = g.get_u64(key)?;
    if id >= n as u64 {
        return Err(TokenizerError::Metadata {
            path: g.path.clone(),
            key: key.into(),
            what: format!("token id {id} is out of range ({n} tokens)"),
        });
    }
    Ok(Some(id as u32))
}

/// The bytes every token stands for. Byte-level BPE spells each byte as one printable character (GPT-2's
/// `bytes_to_unicode`): normal tokens map back through it. Special and user-defined tokens are literal text,
/// as is a token with a character outside the map (as the `tokenizers` ByteLevel decoder treats it).
fn token_bytes(tokens: &[String], types: &[u64]) -> (Vec<u8>, Vec<usize>) {
    // GPT-2: printable bytes stand for themselves; the others, in order, for U+0100, U+0101, ...
    let mut char_to_byte = [None::<u8>; 256 + 68];
    let mut next = 256;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            usize::from(b)
        } else {
            next += 1;
            next - 1
        };
        char_to_byte[c] = Some(b);
    }
    let byte_of = |c: char| char_to_byte.get(c as usize).copied().flatten();
    let mut bytes = Vec::with_capacity(tokens.iter().map(String::len).sum());
    let mut ends = Vec::with_capacity(tokens.len());
    for (t, &ty) in tokens.iter().zip(types) {
        let literal = matches!(ty, TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN);
        if !literal && t.chars().all(|c| byte_of(c).is_some()) {
            bytes.extend(t.chars().filter_map(byte_of));
        } else {
            bytes.extend_from_slice(t.as_bytes());
        }
        ends.push(bytes.len());
    }
    (bytes, ends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opu_compiler::gguf::{parse_bytes, GgufWriter};
    use std::sync::OnceLock;

    /// SmolLM2-135M-Instruct from the model cache (fetched on first use).
    fn model() -> Gguf {
        let path = crate::cache::fetch(crate::cache::known("smollm2").unwrap(), true).expect("fetch SmolLM2 into the model cache");
        Gguf::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// One tokenizer for all tests (building it takes a while in a debug build).
    fn tok() -> &'static Tokenizer {
        static TOK: OnceLock<Tokenizer> = OnceLock::new();
        TOK.get_or_init(|| Tokenizer::from_gguf(&model()).unwrap())
    }

    fn reference() -> serde_json::Value {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/smollm2_reference.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// (name, text, ids) of the reference tokenization vectors.
    fn reference_prompts() -> Vec<(String, String, Vec<u32>)> {
        let r = reference();
        let cases = r["tokenization"].as_array().unwrap();
        assert_eq!(cases.len(), 3);
        cases
            .iter()
            .map(|c| {
                let ids = c["prompt_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
                (c["name"].as_str().unwrap().to_owned(), c["text"].as_str().unwrap().to_owned(), ids)
            })
            .collect()
    }

    /// What llama.cpp (commit 0ce8cd1, `llama_tokenize` with parse_special and no add_special) gives for this
    /// GGUF, run separately from its C API with the model loaded vocab-only.
    const LLAMA_CPP: &[(&str, &[u32])] = &[
        ("1984 and 3.14159", &[33, 41, 40, 36, 284, 216, 35, 30, 33, 36, 33, 37, 41]),
        ("12345", &[33, 34, 35, 36, 37]),
        (" hello", &[33662]),
        ("hello", &[28120]),
        ("Hello world", &[19556, 905]),
        ("  multiple   spaces  here ", &[216, 2701, 256, 5600, 216, 1535, 216]),
        ("line1\nline2\n\n\nline3\r\n\ttab", &[1311, 33, 198, 1311, 34, 1116, 198, 1311, 35, 2738, 197, 15999]),
        (
            "naïve café résumé Ωμέγα Привет 日本語のテキスト",
            &[
                3546, 46494, 37366, 412, 2756, 5422, 2756, 5664, 119, 16674, 34075, 23098, 8998, 5470, 249, 46879, 16464, 32547, 17097,
                241, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226,
            ],
        ),
        (
            "emoji 😀👍🏽 🇫🇷 family 👨\u{200d}👩\u{200d}👧",
            &[
                391, 33777, 40303, 218, 10813, 235, 231, 10813, 233, 138, 15107, 225, 121, 10813, 225, 132, 1564, 15107, 235, 118, 321,
                231, 10813, 235, 119, 321, 231, 10813, 235, 117,
            ],
        ),
        ("foo<|im_start|>bar<|im_end|>baz", &[15236, 1, 6299, 2, 45511]),
        ("a<|im_start|>user\nhi<|im_end|>", &[81, 1, 4093, 198, 6004, 2]),
        ("<|endoftext|><jupyter_code>x", &[0, 13, 104]),
        ("I'm you're we'll they'd it's DON'T", &[57, 5248, 346, 2316, 392, 3060, 502, 6737, 357, 506, 422, 2154, 23, 68]),
        ("   leading and trailing   ", &[256, 2899, 284, 35079, 333]),
        (
            "$1,000,000.00 at 12:30pm on 2024-01-31",
            &[
                20, 33, 28, 32, 32, 32, 28, 32, 32, 32, 30, 32, 32, 418, 216, 33, 34, 42, 35, 32, 11043, 335, 216, 34, 32, 34, 36, 29, 32,
                33, 29, 35, 33,
            ],
        ),
        ("def f(x):\n    return x**2  # comment", &[1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 216, 907, 5189]),
        ("ÄÖÜ ß ﬁ ℕ 𝔸 ½", &[142, 222, 142, 240, 142, 246, 5549, 249, 40367, 4636, 222, 239, 216, 23159, 238, 133, 216, 16738]),
        ("<|im_start", &[44, 108, 306, 79, 3738]),
        ("<|im_end|>", &[2]),
        ("\u{a0}nbsp and\u{200b}zero width", &[15442, 94, 32093, 284, 321, 229, 13723, 8068]),
        ("ab   \n  cd", &[369, 333, 3805, 42038]),
        ("tokenization!!! ???  ...", &[8087, 1237, 29646, 9148, 16693, 216, 4563]),
        ("x=1;y=22;z=333", &[104, 45, 33, 43, 105, 45, 34, 34, 43, 106, 45, 35, 35, 35]),
    ];

    #[test]
    fn reference_prompts_encode_exactly() {
        for (name, text, ids) in reference_prompts() {
            assert_eq!(tok().encode(&text).unwrap(), ids, "{name}");
        }
    }

    #[test]
    fn encoding_matches_llama_cpp() {
        for (text, ids) in LLAMA_CPP {
            assert_eq!(tok().encode(text).unwrap(), *ids, "{text:?}");
        }
    }

    #[test]
    fn decode_inverts_encode() {
        let mut texts: Vec<String> = reference_prompts().into_iter().map(|(_, t, _)| t).collect();
        texts.extend(LLAMA_CPP.iter().map(|(t, _)| t.to_string()));
        texts.extend(["", "wo<|im_start|>rd and mid<|im_end|>dle", "tab\there\u{7f}\u{0}nul", "\n\n\n"].map(String::from));
        for text in texts {
            assert_eq!(tok().decode(&tok().encode(&text).unwrap()).unwrap(), text);
        }
    }

    #[test]
    fn digits_split_and_leading_space() {
        let t = tok();
        let ids = t.encode("12345").unwrap();
        let texts: Vec<String> = ids.iter().map(|&id| t.token_text(id).unwrap()).collect();
        assert_eq!(texts, ["1", "2", "3", "4", "5"]);
        let ids = t.encode(" hello").unwrap();
        assert_eq!(ids.len(), 1);
        assert_eq!(t.token_text(ids[0]).unwrap(), "Ġhello");
    }

    #[test]
    fn special_tokens_and_ids() {
        let t = tok();
        assert_eq!(t.vocab_size(), 49152);
        assert_eq!((t.bos_id(), t.eos_id()), (Some(1), Some(2)));
        assert_eq!(t.token_text(2).as_deref(), Some("<|im_end|>"));
        assert_eq!(t.token_text(49152), None);
        assert_eq!((t.token_id("<|endoftext|>"), t.token_id("Ġhello"), t.token_id("no such token")), (Some(0), Some(33662), None));
        // add_bos_token is false: nothing is prepended.
        assert_eq!(t.encode("hello").unwrap(), [28120]);
        assert_eq!(t.encode("<|im_start|>").unwrap(), [1]);
        assert_eq!(t.decode(&[1, 4093, 198, 2, 0]).unwrap(), "<|im_start|>user\n<|im_end|><|endoftext|>");
        let e = t.decode(&[1, 49152]).unwrap_err().to_string();
        assert!(e.contains("SmolLM2") && e.contains("token id 49152") && e.contains("49152 tokens"), "{e}");
    }

    #[test]
    fn chat_prompt_renders_the_template() {
        let t = tok();
        let (_, capital, ids) = reference_prompts().into_iter().find(|(n, _, _)| n == "chat_capital").unwrap();
        let prompt = t.chat_prompt("What is the capital of France?", None).unwrap();
        assert_eq!(prompt, capital);
        assert_eq!(t.encode(&prompt).unwrap(), ids);
        let prompt = t.chat_prompt("What is the capital of France?", Some("Be brief.")).unwrap();
        assert!(prompt.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n"), "{prompt}");
        assert!(prompt.ends_with("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"), "{prompt}");
        assert!(!prompt.contains("SmolLM"), "{prompt}");
    }

    /// Streams `ids` one at a time: the pieces, and the text `finish` flushes.
    fn stream(ids: &[u32]) -> (Vec<String>, String) {
        let mut d = tok().stream_decoder();
        let pieces = ids.iter().map(|&id| d.push(id).unwrap()).collect();
        (pieces, d.finish().unwrap())
    }

    #[test]
    fn stream_decoder_holds_back_partial_characters() {
        let text = "Grüße 😀👍🏽 日本語 🇫🇷 — done<|im_end|>";
        let ids = tok().encode(text).unwrap();
        let (pieces, rest) = stream(&ids);
        assert_eq!(pieces.concat() + &rest, text);
        assert!(rest.is_empty() && !pieces.concat().contains('\u{FFFD}'));
        // Some emoji bytes span tokens: those tokens must have yielded nothing yet.
        assert!(pieces.iter().any(String::is_empty), "{pieces:?}");
    }

    #[test]
    fn stream_decoder_agrees_with_decode_on_invalid_utf8() {
        let t = tok();
        // The single-byte tokens for 0xE6 (the start of a 3-byte character) and 0x80 (a continuation byte).
        let byte = |s: &str| t.tokens.iter().position(|x| x == s).unwrap() as u32;
        let (lead, cont, a) = (byte("æ"), byte("Ģ"), t.encode("a").unwrap()[0]);
        for ids in [vec![lead, a], vec![cont, cont, a], vec![a, lead, cont], vec![lead, lead, cont, cont]] {
            let (pieces, rest) = stream(&ids);
            assert_eq!(pieces.concat() + &rest, t.decode(&ids).unwrap(), "{ids:?}");
        }
        assert_eq!(stream(&[a, lead, cont]), (vec!["a".into(), String::new(), String::new()], "\u{FFFD}".into()));
        let mut d = t.stream_decoder();
        assert!(d.push(u32::MAX).unwrap_err().to_string().contains("token id 4294967295"));
    }

    /// A tiny byte-level vocabulary GGUF, with `edit` applied to its metadata.
    fn tiny(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Gguf {
        let strings = |v: &[&str]| Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect());
        let mut kv = vec![
            (KEY_MODEL, Value::String("gpt2".into())),
            (KEY_PRE, Value::String("smollm".into())),
            (KEY_TOKENS, strings(&["<|end|>", "a", "b", "ab", "Ġ", "Ġab"])),
            (KEY_TYPES, Value::Array([3, 1, 1, 1, 1, 1].map(Value::I32).to_vec())),
            (KEY_MERGES, strings(&["a b", "Ġ ab"])),
            (KEY_EOS, Value::U32(0)),
        ];
        edit(&mut kv);
        let mut w = GgufWriter::new();
        for (k, v) in kv {
            w.kv(k, v);
        }
        parse_bytes(&w.to_bytes(), name).unwrap()
    }

    fn set(kv: &mut Vec<(&'static str, Value)>, key: &'static str, v: Value) {
        kv.retain(|(k, _)| *k != key);
        kv.push((key, v));
    }

    #[test]
    fn tiny_vocabulary_works_without_a_template() {
        let t = Tokenizer::from_gguf(&tiny("tiny.gguf", |_| {})).unwrap();
        assert_eq!(t.encode("ab ab<|end|>").unwrap(), [3, 5, 0]);
        assert_eq!(t.decode(&[3, 5, 0]).unwrap(), "ab ab<|end|>");
        assert_eq!((t.bos_id(), t.eos_id()), (None, Some(0)));
        let e = t.chat_prompt("hi", None).unwrap_err().to_string();
        assert!(e.contains("tiny.gguf") && e.contains(KEY_CHAT_TEMPLATE), "{e}");
        // add_bos_token puts BOS first.
        let t = Tokenizer::from_gguf(&tiny("bos.gguf", |kv| {
            set(kv, KEY_BOS, Value::U32(0));
            set(kv, KEY_ADD_BOS, Value::Bool(true));
        }))
        .unwrap();
        assert_eq!(t.encode("ab").unwrap(), [0, 3]);
    }

    fn build_error(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> String {
        Tokenizer::from_gguf(&tiny(name, edit)).unwrap_err().to_string()
    }

    #[test]
    fn bad_metadata_is_reported_with_file_and_key() {
        let e = build_error("llama.gguf", |kv| set(kv, KEY_MODEL, Value::String("llama".into())));
        assert!(e.contains("llama.gguf") && e.contains(KEY_MODEL) && e.contains("\"llama\" is not supported"), "{e}");
        let e = build_error("notokens.gguf", |kv| kv.retain(|(k, _)| *k != KEY_TOKENS));
        assert!(e.contains("notokens.gguf") && e.contains(KEY_TOKENS) && e.contains("missing"), "{e}");
        let e = build_error("pre.gguf", |kv| set(kv, KEY_PRE, Value::String("llama3".into())));
        assert!(e.contains("pre.gguf") && e.contains(KEY_PRE) && e.contains("\"llama3\""), "{e}");
        let e = build_error("merge.gguf", |kv| set(kv, KEY_MERGES, Value::Array(vec![Value::String("a c".into())])));
        assert!(e.contains("merge.gguf") && e.contains(KEY_MERGES) && e.contains("merge 0 (\"a c\")") && e.contains("\"c\""), "{e}");
        let e = build_error("nospace.gguf", |kv| set(kv, KEY_MERGES, Value::Array(vec![Value::String("ab".into())])));
        assert!(e.contains("nospace.gguf") && e.contains("not two tokens"), "{e}");
        let e = build_error("types.gguf", |kv| set(kv, KEY_TYPES, Value::Array(vec![Value::I32(1)])));
        assert!(e.contains("types.gguf") && e.contains(KEY_TYPES) && e.contains("1 types for 6 tokens"), "{e}");
        let e = build_error("eos.gguf", |kv| set(kv, KEY_EOS, Value::U32(6)));
        assert!(e.contains("eos.gguf") && e.contains(KEY_EOS) && e.contains("token id 6"), "{e}");
        let e = build_error("eostype.gguf", |kv| set(kv, KEY_EOS, Value::String("2".into())));
        assert!(e.contains("eostype.gguf") && e.contains(KEY_EOS) && e.contains("expected an unsigned integer"), "{e}");
        let e = build_error("addbos.gguf", |kv| set(kv, KEY_ADD_BOS, Value::Bool(true)));
        assert!(e.contains("addbos.gguf") && e.contains(KEY_ADD_BOS) && e.contains(KEY_BOS), "{e}");
        let e = build_error("dup.gguf", |kv| {
            set(kv, KEY_TOKENS, Value::Array(["a", "a", "b", "ab", "Ġ", "Ġab"].map(|s| Value::String(s.into())).to_vec()))
        });
        assert!(e.contains("dup.gguf") && e.contains("\"a\" appears twice (ids 0 and 1)"), "{e}");
    }

    #[test]
    fn template_errors_name_the_file() {
        let broken = tiny("tmpl.gguf", |kv| set(kv, KEY_CHAT_TEMPLATE, Value::String("{% for m in messages %}".into())));
        let e = Tokenizer::from_gguf(&broken).unwrap().chat_prompt("hi", None).unwrap_err().to_string();
        assert!(e.contains("tmpl.gguf") && e.contains(KEY_CHAT_TEMPLATE), "{e}");
        let raises = tiny("raise.gguf", |kv| set(kv, KEY_CHAT_TEMPLATE, Value::String("{{ raise_exception('no system role') }}".into())));
        let e = Tokenizer::from_gguf(&raises).unwrap().chat_prompt("hi", None).unwrap_err().to_string();
        assert!(e.contains("raise.gguf") && e.contains("no system role"), "{e}");
    }
}

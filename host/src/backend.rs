//! Backends: whatever computes logits for a token sequence. Every backend serves the same runtime API
//! ([`crate::runtime::Session`]); `opu run --backend NAME` picks one.

use anyhow::{bail, Result};
use opu_compiler::gguf::Gguf;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Where the `pcie` backend (and `auto`) looks for a card, and how long it waits for a run.
#[derive(Clone, Debug)]
pub struct PcieTarget {
    /// The sysfs root (`--sysfs-root`, else `OPU_SYSFS_ROOT`, else `/sys/bus/pci/devices`).
    pub sysfs_root: PathBuf,
    /// The card's bus address (`--device`); default: the first card.
    pub bdf: Option<String>,
    /// Wall time a run may take before the driver gives up (`--device-timeout`).
    pub timeout: Duration,
}

impl Default for PcieTarget {
    fn default() -> Self {
        PcieTarget { sysfs_root: opu_driver::sysfs::root(None), bdf: None, timeout: Duration::from_secs(600) }
    }
}

static PCIE_TARGET: OnceLock<PcieTarget> = OnceLock::new();

/// Sets where the process's `pcie` and `auto` backends look for a card (the command line's flags; once,
/// before a backend opens).
pub fn set_pcie_target(t: PcieTarget) {
    let _ = PCIE_TARGET.set(t);
}

pub fn pcie_target() -> PcieTarget {
    PCIE_TARGET.get().cloned().unwrap_or_default()
}

/// A model loaded on something that runs it.
pub trait Backend {
    /// What it is, for the figures line (e.g. "reference (candle cpu, 1 thread)").
    fn name(&self) -> &str;
    fn vocab_size(&self) -> usize;
    fn context_length(&self) -> usize;
    /// Tokens processed since the last reset (the position of the next token).
    fn position(&self) -> usize;
    /// Forgets every position (clears the KV cache).
    fn reset(&mut self);
    /// Runs `tokens` at the next positions and returns the logits of every one of them (`all_logits`) or
    /// of the last only.
    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<Vec<f32>>>;
    /// The checks every `forward` makes before it runs: at least one token, every id in the vocabulary,
    /// and room in the context.
    fn check_input(&self, tokens: &[u32]) -> Result<()> {
        anyhow::ensure!(!tokens.is_empty(), "forward needs at least one token");
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= self.vocab_size()) {
            bail!("token id {bad} is outside the vocabulary of {}", self.vocab_size());
        }
        anyhow::ensure!(
            self.position() + tokens.len() <= self.context_length(),
            "{} tokens at position {} exceed the context length {}",
            tokens.len(),
            self.position(),
            self.context_length()
        );
        Ok(())
    }
    /// Device counters since the last reset (instructions, MACs, bytes moved), for backends that have them.
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
    /// The backend's sessions, where it holds several (a program compiled with `--max-sessions`).
    fn as_slots(&mut self) -> Option<&mut dyn SessionSlots> {
        None
    }
    fn as_slots_ref(&self) -> Option<&dyn SessionSlots> {
        None
    }
}

/// One row of a batched pass: the next token of the session in `slot`, at `position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRow {
    pub slot: usize,
    pub position: usize,
    pub token: u32,
}

/// Several sessions on one overlay: each in a slot with its own KV cache; their next tokens advance
/// together, one weight stream per pass for all of them (docs/serving.md, "Batched decode").
pub trait SessionSlots {
    /// Sessions the backend holds at once.
    fn slots(&self) -> usize;
    /// Runs `tokens` of the session in `slot` at positions `start..` (a prompt, or the part of it not yet
    /// run); the logits of the last token.
    fn forward_slot(&mut self, slot: usize, start: usize, tokens: &[u32]) -> Result<Vec<f32>>;
    /// The most rows one [`step_rows`](Self::step_rows) pass takes: at least [`slots`](Self::slots), so that
    /// every session's next token fits, and where the pass has room more, for prompt rows beside them.
    fn max_rows(&self) -> usize {
        self.slots()
    }
    /// One pass of rows of several sessions (at most [`max_rows`](Self::max_rows); a session's rows are its
    /// consecutive positions in order): the logits of each row, each exactly what the session would get
    /// alone.
    fn step_rows(&mut self, rows: &[SlotRow]) -> Result<Vec<Vec<f32>>>;
    /// Device counters of every pass since the backend opened, where the backend counts them.
    fn lifetime_counters(&self) -> Option<crate::loader::Counters>;
    /// Prompt tokens one prefill pass takes (a scheduler runs long prompts in chunks of this many).
    fn prompt_chunk(&self) -> usize {
        PROMPT_CHUNK
    }
}

/// Prompt tokens per chunk on backends without a fixed pass size.
pub const PROMPT_CHUNK: usize = 64;

/// [`SessionSlots::forward_slot`] of a backend that holds one session, over the sequence API: slot 0 only,
/// a prompt from position 0 resets it, else `start` must be where it is.
pub fn one_session_forward(b: &mut dyn Backend, slot: usize, start: usize, tokens: &[u32]) -> Result<Vec<f32>> {
    anyhow::ensure!(slot == 0, "session slot {slot}: the backend holds one session");
    if start == 0 {
        b.reset();
    }
    anyhow::ensure!(start == b.position(), "the session is at position {}, not {start}", b.position());
    Ok(b.forward(tokens, false)?.pop().expect("one row of logits"))
}

/// [`SessionSlots::step_rows`] of a backend that holds one session: one row, its next token.
pub fn one_session_step(b: &mut dyn Backend, rows: &[SlotRow]) -> Result<Vec<Vec<f32>>> {
    anyhow::ensure!(rows.len() == 1, "the backend holds one session: a pass takes one row, got {}", rows.len());
    Ok(vec![one_session_forward(b, rows[0].slot, rows[0].position, &[rows[0].token])?])
}

/// Any backend as [`SessionSlots`]: its own slots where it has several, else one slot over the sequence
/// API (a prompt from position 0 resets it).
pub struct Slots<'a>(pub &'a mut dyn Backend);

impl SessionSlots for Slots<'_> {
    fn slots(&self) -> usize {
        self.0.as_slots_ref().map_or(1, |s| s.slots())
    }
    fn forward_slot(&mut self, slot: usize, start: usize, tokens: &[u32]) -> Result<Vec<f32>> {
        match self.0.as_slots() {
            Some(s) => s.forward_slot(slot, start, tokens),
            None => one_session_forward(self.0, slot, start, tokens),
        }
    }
    fn max_rows(&self) -> usize {
        self.0.as_slots_ref().map_or(1, |s| s.max_rows())
    }
    fn step_rows(&mut self, rows: &[SlotRow]) -> Result<Vec<Vec<f32>>> {
        match self.0.as_slots() {
            Some(s) => s.step_rows(rows),
            None => one_session_step(self.0, rows),
        }
    }
    fn lifetime_counters(&self) -> Option<crate::loader::Counters> {
        self.0.as_slots_ref().and_then(|s| s.lifetime_counters())
    }
    fn prompt_chunk(&self) -> usize {
        self.0.as_slots_ref().map_or(PROMPT_CHUNK, |s| s.prompt_chunk())
    }
}

/// The reference path on its default device (a GPU where this build has CUDA, else the CPU), its context
/// limited to `opts.max_context`; and the device's name.
fn open_reference(g: &Gguf, opts: &opu_compiler::CompileOptions) -> Result<(crate::reference::ReferenceModel, &'static str)> {
    let (device, dev_name) = crate::reference::default_device();
    let mut model = crate::reference::ReferenceModel::load(g, device, dev_name)?;
    model.limit_context(opts.max_context)?;
    Ok((model, dev_name))
}

/// Backend names `open` accepts.
pub const BACKENDS: &[&str] = &["auto", "reference", "sim", "rtl", "pcie"];

/// Opens backend `name` for the model in `g`, compiled for overlay `config` on the overlay backends (the
/// reference path has no overlay). Returns the backend and, for `auto`, why it was chosen.
///
/// `opts` are the compiler's (routers, context) for the overlay backends; the reference path runs the float
/// model as trained and refuses routers.
pub fn open(name: &str, g: &Gguf, config: &opu_hw::OverlayConfig, opts: &opu_compiler::CompileOptions) -> Result<(Box<dyn Backend>, Option<String>)> {
    if opts.routers.is_some() && matches!(name, "reference" | "auto") {
        bail!("backend `{name}`: the reference path runs the dense float model and does not skip blocks; routers run on the sim and rtl backends");
    }
    match name {
        "reference" => Ok((Box::new(open_reference(g, opts)?.0), None)),
        "auto" => {
            // An OPU card first, compiled for the overlay it runs; else the reference path on a GPU if this
            // build has CUDA, else on the CPU.
            let t = pcie_target();
            let no_card = match opu_driver::Card::open(&t.sysfs_root, t.bdf.as_deref(), None) {
                Ok(card) => {
                    let why = format!(
                        "auto: OPU card {} answered (overlay `{}`, under {}); running on it",
                        card.bdf(),
                        card.config().name,
                        t.sysfs_root.display()
                    );
                    let config = card.config().clone();
                    return Ok((Box::new(crate::sim_backend::SimBackend::open_pcie(g, &config, opts, card, t.timeout)?), Some(why)));
                }
                Err(e) => e,
            };
            let (model, dev_name) = open_reference(g, opts)?;
            Ok((Box::new(model), Some(format!("auto: {no_card}; using the reference path on the {dev_name}"))))
        }
        "sim" => {
            let threads = crate::runtime::compute_threads();
            Ok((Box::new(crate::sim_backend::SimBackend::open(g, config, opts, threads)?), None))
        }
        "rtl" => {
            // the RTL under Verilator: opu-rtlsim builds it for the presets of `opu_rtlsim::device::TOPS`
            // (`sim`, `sim-wide`), and refuses another config
            Ok((Box::new(crate::sim_backend::SimBackend::open_rtl(g, config, opts)?), None))
        }
        "pcie" => {
            // the card must run the overlay the program is compiled for (--config)
            let t = pcie_target();
            let card = opu_driver::Card::open(&t.sysfs_root, t.bdf.as_deref(), Some(config))
                .map_err(|e| anyhow::anyhow!("backend `pcie`: {e}"))?;
            Ok((Box::new(crate::sim_backend::SimBackend::open_pcie(g, config, opts, card, t.timeout)?), None))
        }
        other => bail!("unknown backend `{other}` (expected one of: {})", BACKENDS.join(", ")),
    }
}

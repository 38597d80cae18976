//! The `sim` and `rtl` backends: the model compiled for an overlay and run on the functional simulator (the
//! golden model) or on the RTL of the overlay under Verilator (`opu_rtlsim::RtlSim`), through the `Device`
//! trait like any card.

use crate::backend::{Backend, SessionSlots, SlotRow};
use crate::kv_rows::KvRows;
use crate::loader::{self, Counters};
use anyhow::{bail, Context, Result};
use opu_compiler::gguf::Gguf;
use opu_compiler::{compile, CompileOptions, ProgramMeta};
use opu_hw::device::Device;
use opu_hw::OverlayConfig;
use opu_rtlsim::RtlSim;
use opu_sim::func::FuncSim;
use std::time::Duration;

/// What a program backend runs on.
pub enum ProgramDevice {
    Func(FuncSim),
    Rtl(Box<RtlSim>),
    /// A card on PCIe (or an emulated one) through the driver.
    Pcie(Box<opu_driver::Card>),
}

impl ProgramDevice {
    pub fn device(&mut self) -> &mut dyn Device {
        match self {
            ProgramDevice::Func(d) => d,
            ProgramDevice::Rtl(d) => d.as_mut(),
            ProgramDevice::Pcie(d) => d.as_mut(),
        }
    }
    /// [`Device::channel_bytes`] of the device.
    pub fn channel_bytes(&self) -> Option<Vec<u64>> {
        match self {
            ProgramDevice::Func(d) => d.channel_bytes(),
            ProgramDevice::Rtl(d) => d.channel_bytes(),
            ProgramDevice::Pcie(d) => d.channel_bytes(),
        }
    }
    /// Whether the CYCLES counter counts clock cycles of an overlay (the RTL, a card) rather than the
    /// functional simulator's estimate (also behind an emulated card).
    pub fn counts_cycles(&self) -> bool {
        match self {
            ProgramDevice::Func(_) => false,
            ProgramDevice::Rtl(_) => true,
            ProgramDevice::Pcie(c) => c.function.emulator_info().is_none_or(|i| i["backend"] != "sim"),
        }
    }
}

/// A simulator that never answers in this long has hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

pub struct SimBackend {
    dev: ProgramDevice,
    meta: ProgramMeta,
    pos: usize,
    label: String,
    /// Counters since the last reset, and the tokens they cover.
    pub counters: Counters,
    pub passes: usize,
    /// Counters of the one-token `decode` passes alone, and their number.
    pub decode_counters: Counters,
    pub decode_passes: usize,
    /// The functional simulator's cycle estimate of the one-token passes per mnemonic (the RTL counts no
    /// such split).
    decode_cycles_by_mnemonic: std::collections::BTreeMap<String, u64>,
    /// Seconds the compiler took to build the program.
    pub compile_seconds: f64,
    /// The overlay the program was compiled for.
    config: OverlayConfig,
    /// Kind of each named device-memory region ("weights", "kv", "norms", "table", "io", "code").
    region_kinds: std::collections::HashMap<String, String>,
    /// The program's device-memory regions (the container's layout).
    regions: Vec<opu_hw::container::Region>,
    /// Device-memory bytes (read, written) per region kind since the last reset.
    pub bytes_by_kind: std::collections::BTreeMap<String, (u64, u64)>,
    /// `[layer] = [attention, FFN]`: the blocks the one-token passes skipped since the last reset (read back
    /// from the presence and FFN decision bytes after each pass; programs with routers).
    skipped_per_layer: Vec<[u64; 2]>,
    /// The pool rows of the indexed KV layout (programs compiled with it).
    kv_rows: Option<KvRows>,
    /// The device's bytes per memory channel at the last reset, where it counts them (the RTL's memory).
    channel_base: Option<Vec<u64>>,
    /// Wall time a pass may take before the host gives up on the device.
    run_timeout: Duration,
    /// Counters of every pass since the program was loaded (never reset: the server's totals).
    lifetime: Counters,
}

impl SimBackend {
    /// Compiles the model in `g` for `config` and loads it on a new functional simulator.
    pub fn open(g: &Gguf, config: &OverlayConfig, opts: &CompileOptions, threads: usize) -> Result<Self> {
        let mut dev = FuncSim::new(config);
        dev.set_threads(threads);
        let label = format!("sim (functional, overlay `{}`, {threads} thread{})", config.name, if threads == 1 { "" } else { "s" });
        Self::open_on(g, config, opts, ProgramDevice::Func(dev), label)
    }

    /// Compiles the model in `g` for `config` and loads it on the RTL under Verilator (an error naming what
    /// is missing when this build has no Verilator models, or they are not of `config`).
    pub fn open_rtl(g: &Gguf, config: &OverlayConfig, opts: &CompileOptions) -> Result<Self> {
        let dev = RtlSim::new(config).map_err(|e| anyhow::anyhow!("backend `rtl`: {e}"))?;
        let label = format!("rtl (Verilator, overlay `{}`)", config.name);
        Self::open_on(g, config, opts, ProgramDevice::Rtl(Box::new(dev)), label)
    }

    /// Compiles the model in `g` for `config` (the overlay `card` runs: checked when it was opened) and
    /// loads it on the card; a pass that takes longer than `timeout` is an error.
    pub fn open_pcie(g: &Gguf, config: &OverlayConfig, opts: &CompileOptions, card: opu_driver::Card, timeout: Duration) -> Result<Self> {
        let emulated = match card.function.emulator_info() {
            Some(i) => format!(", emulated by the {} backend", i["backend"].as_str().unwrap_or("?")),
            None => String::new(),
        };
        let label = format!("pcie (card {}, overlay `{}`{emulated})", card.bdf(), config.name);
        let mut b = Self::open_on(g, config, opts, ProgramDevice::Pcie(Box::new(card)), label)?;
        b.run_timeout = timeout;
        Ok(b)
    }

    fn open_on(g: &Gguf, config: &OverlayConfig, opts: &CompileOptions, mut dev: ProgramDevice, label: String) -> Result<Self> {
        let t = std::time::Instant::now();
        let compiled = compile(g, config, opts).with_context(|| format!("compiling {}", g.path.display()))?;
        let compile_seconds = t.elapsed().as_secs_f64();
        let mut region_kinds = std::collections::HashMap::new();
        let mut regions = Vec::new();
        if let Some(layout) = compiled.container.layout()? {
            region_kinds = layout.regions.iter().map(|r| (r.name.clone(), r.kind.clone())).collect();
            regions = layout.regions.clone();
            if let ProgramDevice::Func(f) = &mut dev {
                f.set_regions(layout.regions);
            }
        }
        loader::load(dev.device(), &compiled.container)?;
        let n_layer = compiled.meta.n_layer;
        Ok(SimBackend {
            pos: 0,
            label,
            counters: Counters::default(),
            passes: 0,
            decode_counters: Counters::default(),
            decode_passes: 0,
            decode_cycles_by_mnemonic: Default::default(),
            compile_seconds,
            config: config.clone(),
            region_kinds,
            regions,
            bytes_by_kind: Default::default(),
            skipped_per_layer: vec![[0; 2]; n_layer],
            kv_rows: compiled.meta.kv_index.clone().map(KvRows::new),
            meta: compiled.meta,
            channel_base: dev.channel_bytes(),
            dev,
            run_timeout: RUN_TIMEOUT,
            lifetime: Counters::default(),
        })
    }

    pub fn meta(&self) -> &ProgramMeta {
        &self.meta
    }

    /// The program's device-memory regions (name, kind, address, bytes): everything it reads or writes.
    pub fn regions(&self) -> &[opu_hw::container::Region] {
        &self.regions
    }

    /// The device the program runs on.
    pub fn device(&mut self) -> &mut dyn Device {
        self.dev.device()
    }

    /// Runs one pass of `tokens` (at most the entry's ntok) with entry `entry`.
    fn pass(&mut self, entry: usize, tokens: &[u32]) -> Result<()> {
        if let Some(rows) = &mut self.kv_rows {
            rows.before_pass(self.dev.device(), self.pos, tokens.len())?;
        }
        let pos = self.pos;
        let run = self.run_entry(entry, tokens, &[tokens[0], pos as u32, tokens.len() as u32], &format!("at position {pos}"))?;
        if entry == 0 {
            self.decode_counters.add(&run);
            self.decode_passes += 1;
            // this position's decisions: its presence byte (attention) and FFN decision byte of every routed
            // layer (0 = skipped)
            let mut attention_ran = vec![true; self.meta.n_layer];
            if let Some(skipping) = &self.meta.skipping {
                for (b, addrs) in [&skipping.presence_addr, &skipping.ffn_marks_addr].into_iter().enumerate() {
                    for (l, at) in addrs.iter().enumerate() {
                        if let Some(at) = at {
                            let mut byte = [0u8];
                            self.dev.device().mem_read(at + self.pos as u64, &mut byte)?;
                            self.skipped_per_layer[l][b] += u64::from(byte[0] == 0);
                            if b == 0 {
                                attention_ran[l] = byte[0] != 0;
                            }
                        }
                    }
                }
            }
            if let Some(rows) = &mut self.kv_rows {
                rows.after_single_pass(&attention_ran);
            }
        }
        self.pos += tokens.len();
        Ok(())
    }

    /// Runs entry `entry` on `tokens` (written to the ids region) with `args`; adds its counters to the
    /// totals and returns them. `what` says where, for the error.
    fn run_entry(&mut self, entry: usize, tokens: &[u32], args: &[u32], what: &str) -> Result<Counters> {
        let e = self.meta.entries[entry].clone();
        let ids: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        self.dev.device().mem_write(self.meta.ids_addr, &ids)?;
        // the RTL takes minutes per pass: a spinner with its cycles (hidden when stderr is not a terminal)
        let bar = match &mut self.dev {
            ProgramDevice::Rtl(d) => {
                let bar = indicatif::ProgressBar::new_spinner();
                let (b, what, start) = (bar.clone(), format!("rtl: `{}` {what}", e.name), std::time::Instant::now());
                d.set_progress(Some(Box::new(move |cycles| {
                    let rate = cycles as f64 / start.elapsed().as_secs_f64().max(1e-3);
                    b.set_message(format!("{what}: {cycles} cycles ({rate:.0} cycles/s)"));
                    b.tick();
                })));
                Some(bar)
            }
            ProgramDevice::Func(_) | ProgramDevice::Pcie(_) => None,
        };
        let run = loader::run(self.dev.device(), e.code_addr, e.instructions, args, self.run_timeout);
        if let (Some(bar), ProgramDevice::Rtl(d)) = (bar, &mut self.dev) {
            d.set_progress(None);
            bar.finish_and_clear();
        }
        run.with_context(|| format!("running `{}` {what}", e.name))?;
        let run = Counters::read(self.dev.device())?;
        self.counters.add(&run);
        self.lifetime.add(&run);
        if let ProgramDevice::Func(f) = &mut self.dev {
            let stats = f.stats();
            if entry == 0 {
                for (m, c) in stats.cycles_by_mnemonic {
                    *self.decode_cycles_by_mnemonic.entry(m).or_default() += c;
                }
            }
            for (name, b) in stats.regions {
                let kind = self.region_kinds.get(&name).cloned().unwrap_or(name);
                let e = self.bytes_by_kind.entry(kind).or_default();
                e.0 += b.read;
                e.1 += b.written;
            }
        }
        self.passes += 1;
        Ok(run)
    }

    /// The `sessions{n}` and `prefill_slot` entries of a program compiled with several sessions.
    fn sessions_meta(&self) -> Result<&opu_compiler::SessionsMeta> {
        self.meta.sessions.as_ref().context("the program holds one session: compile it with --max-sessions N")
    }

    /// Checks rows of sessions before a pass: slot, position and token in range.
    fn check_rows(&self, rows: &[SlotRow]) -> Result<()> {
        let slots = self.slots();
        for r in rows {
            anyhow::ensure!(r.slot < slots, "session slot {} is outside the program's {slots} slots", r.slot);
            anyhow::ensure!(r.position < self.meta.max_context, "position {} of slot {} is past the context length {}", r.position, r.slot, self.meta.max_context);
            anyhow::ensure!((r.token as usize) < self.meta.vocab, "token id {} is outside the vocabulary of {}", r.token, self.meta.vocab);
        }
        Ok(())
    }
}

impl SessionSlots for SimBackend {
    fn slots(&self) -> usize {
        self.meta.sessions.as_ref().map_or(1, |s| s.slots)
    }

    fn forward_slot(&mut self, slot: usize, start: usize, tokens: &[u32]) -> Result<Vec<f32>> {
        if self.meta.sessions.is_none() {
            return crate::backend::one_session_forward(self, slot, start, tokens);
        }
        anyhow::ensure!(!tokens.is_empty(), "forward needs at least one token");
        anyhow::ensure!(start + tokens.len() <= self.meta.max_context, "{} tokens at position {start} exceed the context length {}", tokens.len(), self.meta.max_context);
        let rows: Vec<SlotRow> = tokens.iter().enumerate().map(|(i, &token)| SlotRow { slot, position: start + i, token }).collect();
        self.check_rows(&rows)?;
        let (batch, prefill_slot) = {
            let s = self.sessions_meta()?;
            (self.meta.entries[s.prefill_slot_entry].ntok, s.prefill_slot_entry)
        };
        // Full batches through `prefill_slot`, the rest as rows of the session's own `sessions{n}` passes
        // (consecutive positions of one slot: each row's K/V is appended before the next row's attention).
        let mut at = 0;
        while tokens.len() - at >= batch && batch > 1 {
            let now = &tokens[at..at + batch];
            let pos = (start + at) as u32;
            self.run_entry(prefill_slot, now, &[now[0], pos, batch as u32, slot as u32], &format!("for slot {slot} at position {pos}"))?;
            at += batch;
        }
        if at == tokens.len() {
            return self.read_logits(batch - 1);
        }
        let mut last = Vec::new();
        for chunk in rows[at..].chunks(self.max_rows()) {
            last = self.step_rows(chunk)?.pop().expect("one row of logits");
        }
        Ok(last)
    }

    fn max_rows(&self) -> usize {
        self.meta.sessions.as_ref().map_or(1, |s| s.max_rows())
    }

    fn step_rows(&mut self, rows: &[SlotRow]) -> Result<Vec<Vec<f32>>> {
        if self.meta.sessions.is_none() {
            return crate::backend::one_session_step(self, rows);
        }
        let entry = {
            let s = self.sessions_meta()?;
            anyhow::ensure!((1..=s.max_rows()).contains(&rows.len()), "a batched pass takes 1 to {} rows, got {}", s.max_rows(), rows.len());
            s.sessions_entry[rows.len() - 1]
        };
        self.check_rows(rows)?;
        let mut table = Vec::with_capacity(rows.len() * 8);
        for r in rows {
            table.extend_from_slice(&(r.position as u32).to_le_bytes());
            table.extend_from_slice(&(r.slot as u32).to_le_bytes());
        }
        let at = self.sessions_meta()?.rows_addr;
        self.dev.device().mem_write(at, &table)?;
        let tokens: Vec<u32> = rows.iter().map(|r| r.token).collect();
        self.run_entry(entry, &tokens, &[tokens[0], 0, tokens.len() as u32], &format!("of {} sessions", rows.len()))?;
        (0..rows.len()).map(|t| self.read_logits(t)).collect()
    }

    fn lifetime_counters(&self) -> Option<Counters> {
        Some(self.lifetime)
    }

    fn prompt_chunk(&self) -> usize {
        self.meta.entries[1].ntok
    }
}

impl SimBackend {
    /// Runs one token through the `decode` entry (whatever the batch size) and returns its logits.
    pub fn forward_single(&mut self, token: u32) -> Result<Vec<f32>> {
        self.check_input(&[token])?;
        self.pass(0, &[token])?;
        self.read_logits(0)
    }

    fn read_logits(&mut self, row: usize) -> Result<Vec<f32>> {
        let mut buf = vec![0u8; self.meta.vocab * 4];
        self.dev.device().mem_read(self.meta.logits_addr + row as u64 * self.meta.logits_row_bytes, &mut buf)?;
        Ok(buf.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
    }

    /// The residual stream after each layer for the tokens of the last pass (needs `trace_layers`):
    /// `[layer][token][n_embd]` as f32.
    pub fn read_trace(&mut self, tokens: usize) -> Result<Vec<Vec<Vec<f32>>>> {
        let Some(base) = self.meta.trace_addr else { bail!("the program was compiled without --trace-layers") };
        let mut out = Vec::with_capacity(self.meta.n_layer);
        for l in 0..self.meta.n_layer {
            let mut rows = Vec::with_capacity(tokens);
            for t in 0..tokens {
                let mut buf = vec![0u8; self.meta.trace_row_bytes as usize];
                self.dev.device().mem_read(base + l as u64 * self.meta.trace_layer_bytes + t as u64 * self.meta.trace_row_bytes, &mut buf)?;
                rows.push(buf.chunks_exact(2).map(|c| opu_hw::numerics::fp16::f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect());
            }
            out.push(rows);
        }
        Ok(out)
    }
}

/// K/V storage of the positions run so far (bytes).
struct KvStorage {
    /// Rows that hold K/V (indexed layout), or every layer's row of every position (dense).
    in_use_bytes: u64,
    /// What the dense layout holds for the same positions.
    dense_bytes: u64,
    /// The device memory set aside for K/V by the program's layout.
    reserved_bytes: u64,
    saved_bytes: u64,
}

impl SimBackend {
    fn kv_storage(&self) -> KvStorage {
        let reserved_bytes = self.regions.iter().filter(|r| r.kind == "kv" && !r.name.starts_with("presence") && !r.name.starts_with("kvindex")).map(|r| r.bytes).sum();
        let row_bytes = (self.meta.n_head_kv * self.meta.head_dim * 4) as u64;
        let dense_bytes = self.meta.n_layer as u64 * self.pos as u64 * row_bytes;
        let in_use_bytes = self.kv_rows.as_ref().map_or(dense_bytes, |r| r.rows_in_use() * r.row_bytes());
        KvStorage { in_use_bytes, dense_bytes, reserved_bytes, saved_bytes: dense_bytes.saturating_sub(in_use_bytes) }
    }

    /// The `skip` figures of a program with routers (docs/skipping.md): decisions are those of the one-token
    /// passes (prefill executes every block).
    fn skip_figures(&self, s: &opu_compiler::SkipMeta) -> serde_json::Value {
        let passes = self.decode_passes as u64;
        let routed = |b: usize| s.routed.iter().filter(|r| r[b]).count() as u64;
        let (n_attn, n_ffn) = (routed(0), routed(1));
        // the decisions of every block of layers 1.. (a block without a router always executes), as
        // `--skip RATE` counts them
        let blocks = s.routed.len().saturating_sub(1) as u64;
        let skipped = self.decode_counters.skipped_blocks;
        let attn_skipped: u64 = self.skipped_per_layer.iter().map(|s| s[0]).sum();
        let rate = |n: u64, d: u64| if d == 0 { serde_json::Value::Null } else { (n as f64 / d as f64).into() };
        let c = &self.counters;
        let kv = self.kv_storage();
        // per decoded token: the bytes moved, and what the skipped blocks' instructions and the history hits
        // would have moved had every block executed
        let d = &self.decode_counters;
        let saved: u64 = self.skipped_per_layer.iter().zip(&s.block_bytes).map(|(n, bytes)| n[0] * bytes[0] + n[1] * bytes[1]).sum::<u64>()
            + d.kv_history_hits * s.history_hit_bytes;
        let moved = d.bytes_read + d.bytes_written;
        // each routed block's share of the passes it skipped (null where the block has no router)
        let per_layer = |b: usize| -> Vec<serde_json::Value> {
            s.routed.iter().zip(&self.skipped_per_layer).map(|(r, n)| if r[b] { rate(n[b], passes) } else { serde_json::Value::Null }).collect()
        };
        serde_json::json!({
            "routed_attention_blocks": n_attn,
            "routed_ffn_blocks": n_ffn,
            "decisions": passes * 2 * blocks,
            "skipped_blocks": skipped,
            "realised_skip_rate": rate(skipped, passes * 2 * blocks),
            "attention_skip_rate": rate(attn_skipped, passes * blocks),
            "ffn_skip_rate": rate(skipped.saturating_sub(attn_skipped), passes * blocks),
            "attention_skip_rate_per_layer": per_layer(0),
            "ffn_skip_rate_per_layer": per_layer(1),
            "bytes_per_token": rate(moved, passes),
            "bytes_per_token_saved": rate(saved, passes),
            "bytes_per_token_all_executed": rate(moved + saved, passes),
            "cycles_per_token": rate(d.cycles, passes),
            "history_hit_rate": rate(c.kv_history_hits, c.kv_history_hits + c.kv_history_misses),
            "router_bytes": s.router_bytes,
            "kv_layout": if self.kv_rows.is_some() { "indexed" } else { "dense" },
            "kv_saved_bytes": kv.saved_bytes,
            "kv_saved_fraction": rate(kv.saved_bytes, kv.dense_bytes),
        })
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        &self.label
    }
    fn vocab_size(&self) -> usize {
        self.meta.vocab
    }
    fn context_length(&self) -> usize {
        self.meta.max_context
    }
    fn position(&self) -> usize {
        self.pos
    }
    fn reset(&mut self) {
        // The KV cache needs no clearing: every position is written before attention reads it.
        self.pos = 0;
        self.counters = Counters::default();
        self.bytes_by_kind.clear();
        self.passes = 0;
        self.decode_counters = Counters::default();
        self.decode_passes = 0;
        self.decode_cycles_by_mnemonic.clear();
        self.skipped_per_layer.iter_mut().for_each(|n| *n = [0; 2]);
        if let Some(rows) = &mut self.kv_rows {
            rows.reset();
        }
        self.channel_base = self.dev.channel_bytes();
    }

    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<Vec<f32>>> {
        self.check_input(tokens)?;
        let batch = self.meta.entries[1].ntok;
        let mut out = Vec::new();
        let mut rest = tokens;
        while !rest.is_empty() {
            // Full batches through `prefill`, the remainder one token at a time through `decode`.
            let (entry, n) = if rest.len() >= batch && batch > 1 { (1, batch) } else { (0, 1) };
            let (now, later) = rest.split_at(n);
            self.pass(entry, now)?;
            for t in 0..n {
                if all_logits || (later.is_empty() && t == n - 1) {
                    out.push(self.read_logits(t)?);
                }
            }
            rest = later;
        }
        Ok(out)
    }

    fn as_slots(&mut self) -> Option<&mut dyn SessionSlots> {
        Some(self)
    }
    fn as_slots_ref(&self) -> Option<&dyn SessionSlots> {
        Some(self)
    }

    fn stats(&self) -> Option<serde_json::Value> {
        // Per token: the one-token decode passes when there were any (prefill batches share each weight
        // stream among their tokens), else the average over all passes.
        let (c, tokens) = if self.decode_passes > 0 {
            (&self.decode_counters, self.decode_passes as f64)
        } else {
            (&self.counters, self.pos.max(1) as f64)
        };
        let all = &self.counters;
        // the functional simulator estimates cycles; the RTL counts them
        let cycles_key = if self.dev.counts_cycles() { "cycles" } else { "cycles_estimate" };
        let mut v = serde_json::json!({
            "compile_seconds": self.compile_seconds,
            "passes": self.passes,
            "decode_passes": self.decode_passes,
            "instructions": all.instructions,
            "macs": all.macs,
            "bytes_read": all.bytes_read,
            "bytes_written": all.bytes_written,
            "bytes_by_region_kind": self.bytes_by_kind.iter().map(|(k, (r, w))| (k.clone(), serde_json::json!({"read": r, "written": w}))).collect::<serde_json::Map<_, _>>(),
            "per_token": {
                "instructions": c.instructions as f64 / tokens,
                "macs": c.macs as f64 / tokens,
                "bytes_moved": (c.bytes_read + c.bytes_written) as f64 / tokens,
            },
        });
        v[cycles_key] = serde_json::json!(all.cycles);
        v["per_token"][cycles_key] = serde_json::json!(c.cycles as f64 / tokens);
        // per decoded token (else per token): cycles, bytes, bandwidth efficiency, unit utilization, the
        // projected tokens/s; from the RTL's counters, or the functional simulator's estimate
        v["figures"] = c.figures(tokens, &self.config);
        v["figures"]["cycles_are_estimates"] = (!self.dev.counts_cycles()).into();
        // where a decoded token's cycles go, by instruction (the model's split; the program's first fetch is
        // in no instruction's share)
        if self.decode_passes > 0 && !self.decode_cycles_by_mnemonic.is_empty() {
            let n = self.decode_passes as f64;
            v["figures"]["cycles_by_instruction"] =
                self.decode_cycles_by_mnemonic.iter().map(|(m, &c)| (m.clone(), serde_json::json!(c as f64 / n))).collect::<serde_json::Map<_, _>>().into();
        }
        // the memory's own figures where it counts them (the RTL's memory model): bytes per channel since the
        // last reset, every line and beat on the channels
        if let (Some(now), Some(base)) = (self.dev.channel_bytes(), &self.channel_base) {
            v["bytes_per_channel"] = now.iter().zip(base).map(|(n, b)| n - b).collect::<Vec<u64>>().into();
        }
        v["skipped_blocks"] = all.skipped_blocks.into();
        v["kv_history_hits"] = all.kv_history_hits.into();
        v["kv_history_misses"] = all.kv_history_misses.into();
        let kv = self.kv_storage();
        v["kv"] = serde_json::json!({
            "layout": if self.kv_rows.is_some() { "indexed" } else { "dense" },
            "bytes_in_use": kv.in_use_bytes,
            "bytes_dense": kv.dense_bytes,
            "bytes_reserved": kv.reserved_bytes,
            "saved_bytes": kv.saved_bytes,
        });
        if let Some(s) = &self.meta.skipping {
            v["skip"] = self.skip_figures(s);
        }
        Some(v)
    }
}

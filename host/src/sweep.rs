//! `opu sweep-skip`: the quality-versus-compute trade-off of skipping, one row per skip rate.
//!
//! For each rate the model runs on the functional simulator with routers calibrated for that rate (cached in
//! the model cache; rate 0 is the dense program) and the indexed KV layout, teacher-forced on a held-out
//! text against the dense program ([`crate::eval::heldout`]): top-1 agreement, KL and the perplexity
//! ratio, next to what the overlay moved and computed per decoded token (bytes, the cycle model's cycles)
//! and the K/V storage the indexed layout saved. [`plot`] draws the table (plotters, PNG).

use crate::calibration::{routers_for, Spec};
use crate::eval::{heldout, HeldOut, SkipTally};
use crate::runtime::Session;
use anyhow::{bail, Context, Result};
use opu_compiler::gguf::Gguf;
use opu_compiler::KvLayout;
use opu_hw::OverlayConfig;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to sweep.
pub struct SweepOptions {
    pub model: PathBuf,
    pub config: OverlayConfig,
    pub rates: Vec<f64>,
    /// Calibration text (None: the default of [`Spec`]).
    pub calibration_text: Option<PathBuf>,
    /// Which blocks may skip, `[attention, ffn]` (`--blocks`).
    pub blocks: [bool; 2],
    pub heldout_text: PathBuf,
    pub heldout_tokens: usize,
}

/// One rate of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    pub target_rate: f64,
    /// Skipped decisions of the decode passes over all their decisions (0 for the dense program).
    pub realised_skip_rate: f64,
    pub attention_skip_rate: f64,
    pub top1_agreement: f64,
    pub mean_kl: f64,
    pub perplexity: f64,
    pub perplexity_ratio: f64,
    /// Device-memory bytes read and written per decoded token.
    pub bytes_per_token: f64,
    /// Cycles per decoded token (the functional simulator's model of the RTL).
    pub cycles_per_token: f64,
    /// K/V storage saved over the dense layout, as a share (at each sequence's end, summed).
    pub kv_saved_fraction: f64,
    pub history_hit_rate: f64,
    pub routed_blocks: usize,
    pub positions: usize,
}

/// Per-token figures summed over the sequences of one rate.
#[derive(Default)]
struct Sums {
    /// Decisions, skipped blocks and K/V storage.
    skip: SkipTally,
    passes: f64,
    bytes: f64,
    cycles: f64,
    attn_decisions: f64,
    attn_skipped: f64,
    hits: f64,
    misses: f64,
}

impl Sums {
    fn add(&mut self, s: &Session) {
        let Some(st) = s.backend_stats() else { return };
        let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
        let passes = f(&st["decode_passes"]);
        self.passes += passes;
        self.bytes += f(&st["per_token"]["bytes_moved"]) * passes;
        self.cycles += f(&st["per_token"]["cycles_estimate"]) * passes;
        self.hits += f(&st["kv_history_hits"]);
        self.misses += f(&st["kv_history_misses"]);
        if self.skip.add(&st) {
            // decisions: both blocks of every layer 1.., half of them attention
            let attn = f(&st["skip"]["decisions"]) / 2.0;
            self.attn_decisions += attn;
            self.attn_skipped += f(&st["skip"]["attention_skip_rate"]) * attn;
        }
    }
}

fn ratio(n: f64, d: f64) -> f64 {
    if d > 0.0 {
        n / d
    } else {
        0.0
    }
}

/// Runs the sweep; `progress` receives a line per step.
pub fn sweep(opts: &SweepOptions, progress: &mut dyn FnMut(&str)) -> Result<Vec<SweepRow>> {
    if opts.rates.is_empty() {
        bail!("--rates: no rates given");
    }
    let text = std::fs::read_to_string(&opts.heldout_text).with_context(|| format!("held-out text {}: cannot read", opts.heldout_text.display()))?;
    let mut spec = Spec::new(0.0);
    spec.blocks = opts.blocks;
    if let Some(t) = &opts.calibration_text {
        spec.text = t.clone();
    }
    crate::calibration::ensure_heldout("--heldout", &opts.heldout_text, &spec.text)?;
    let g = Gguf::open(&opts.model)?;
    let mut dense = Session::open_with_routers(&opts.model, "sim", &opts.config, None, KvLayout::Dense)?;
    let ids = dense.tokenizer.encode(&text)?;
    let ids = ids[..ids.len().min(opts.heldout_tokens)].to_vec();
    let label = opts.heldout_text.display().to_string();
    let mut rows = Vec::new();
    for &rate in &opts.rates {
        let (mut session, routed_blocks) = if rate > 0.0 {
            spec.rate = rate;
            let cal = routers_for(&g, &opts.model, &spec, progress)?;
            let s = Session::open_with_routers(&opts.model, "sim", &opts.config, Some(&cal.file), KvLayout::Indexed { pool_rows: None })?;
            (s, cal.routers.count())
        } else {
            (Session::open_with_routers(&opts.model, "sim", &opts.config, None, KvLayout::Dense)?, 0)
        };
        progress(&format!("rate {rate}: {} held-out tokens on the sim backend against the dense program", ids.len()));
        let mut sums = Sums::default();
        let h: HeldOut = heldout(&mut session, &mut dense, &label, &ids, (64, 16), &mut |s| sums.add(s))?;
        if h.nan_positions > 0 {
            bail!("rate {rate}: {} of {} held-out positions have NaN logits", h.nan_positions, h.positions);
        }
        rows.push(SweepRow {
            target_rate: rate,
            realised_skip_rate: sums.skip.realised_skip_rate,
            attention_skip_rate: ratio(sums.attn_skipped, sums.attn_decisions),
            top1_agreement: h.top1_agreement,
            mean_kl: h.mean_kl,
            perplexity: h.backend_perplexity,
            perplexity_ratio: h.perplexity_ratio,
            bytes_per_token: ratio(sums.bytes, sums.passes),
            cycles_per_token: ratio(sums.cycles, sums.passes),
            kv_saved_fraction: sums.skip.kv_saved_fraction,
            history_hit_rate: ratio(sums.hits, sums.hits + sums.misses),
            routed_blocks,
            positions: h.positions,
        });
    }
    Ok(rows)
}

/// The sweep as a table (one line per rate).
pub fn table(rows: &[SweepRow]) -> String {
    let mut s = format!(
        "{:>6} {:>9} {:>7} {:>8} {:>9} {:>9} {:>8} {:>11} {:>11} {:>8} {:>8}\n",
        "rate", "realised", "attn", "top-1", "mean KL", "ppl", "ppl x", "bytes/tok", "cycles/tok", "KV saved", "hist hit"
    );
    for r in rows {
        s += &format!(
            "{:>6.2} {:>8.1}% {:>6.1}% {:>8.4} {:>9.4} {:>9.3} {:>8.3} {:>11.0} {:>11.0} {:>7.1}% {:>7.1}%\n",
            r.target_rate,
            100.0 * r.realised_skip_rate,
            100.0 * r.attention_skip_rate,
            r.top1_agreement,
            r.mean_kl,
            r.perplexity,
            r.perplexity_ratio,
            r.bytes_per_token,
            r.cycles_per_token,
            100.0 * r.kv_saved_fraction,
            100.0 * r.history_hit_rate
        );
    }
    s
}

/// A TrueType font for the plot's text: DejaVu Sans or Liberation Sans where Debian puts them.
fn find_font() -> Result<&'static [u8]> {
    const CANDIDATES: [&str; 4] = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
    ];
    for c in CANDIDATES {
        if let Ok(bytes) = std::fs::read(c) {
            // plotters keeps registered fonts for the process
            return Ok(Box::leak(bytes.into_boxed_slice()));
        }
    }
    bail!("no TrueType font for the plot's labels (looked for {}): install the Debian package fonts-dejavu-core", CANDIDATES.join(", "))
}

/// Draws four panels (PNG, `path`): top-1 agreement and the perplexity ratio against the bytes moved per
/// decoded token, the K/V storage saved and the cycles per token against the realised skip rate.
pub fn plot(rows: &[SweepRow], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let font = find_font()?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, font).map_err(|_| anyhow::anyhow!("the plot's font cannot be read"))?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (1200, 900)).into_drawing_area();
        root.fill(&WHITE)?;
        let (title, body) = root.split_vertically(40);
        title.titled("opu sweep-skip: skipping on the functional simulator, teacher-forced against dense", ("sans-serif", 22))?;
        let panels = body.split_evenly((2, 2));
        let mb: Vec<f64> = rows.iter().map(|r| r.bytes_per_token / 1e6).collect();
        let skip: Vec<f64> = rows.iter().map(|r| 100.0 * r.realised_skip_rate).collect();
        let span = |v: &[f64], pad: f64| {
            let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            let d = ((hi - lo) * pad).max(1e-3 * hi.abs().max(1.0));
            (lo - d)..(hi + d)
        };
        type Series<'a> = (&'a str, &'a str, Vec<f64>, Vec<f64>, RGBColor);
        let series: [Series; 4] = [
            ("top-1 agreement with dense", "MB moved per decoded token", mb.clone(), rows.iter().map(|r| r.top1_agreement).collect(), BLUE),
            ("perplexity / dense perplexity", "MB moved per decoded token", mb, rows.iter().map(|r| r.perplexity_ratio).collect(), RED),
            ("KV storage saved (%)", "realised skip rate (%)", skip.clone(), rows.iter().map(|r| 100.0 * r.kv_saved_fraction).collect(), GREEN),
            ("million cycles per decoded token (cycle model)", "realised skip rate (%)", skip, rows.iter().map(|r| r.cycles_per_token / 1e6).collect(), MAGENTA),
        ];
        for (area, (caption, xlabel, xs, ys, color)) in panels.iter().zip(series) {
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(span(&xs, 0.08), span(&ys, 0.12))?;
            chart.configure_mesh().x_desc(xlabel).label_style(("sans-serif", 13)).draw()?;
            let pts: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
            chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?;
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
            chart.draw_series(pts.iter().zip(rows).map(|(&p, r)| {
                Text::new(format!("{:.2}", r.target_rate), p, ("sans-serif", 12).into_font().color(&BLACK))
            }))?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("{}: cannot draw the plot: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rate: f64) -> SweepRow {
        SweepRow {
            target_rate: rate,
            realised_skip_rate: rate * 0.9,
            attention_skip_rate: rate * 1.5,
            top1_agreement: 1.0 - rate,
            mean_kl: rate * 3.0,
            perplexity: 10.0 + rate * 50.0,
            perplexity_ratio: 1.0 + rate * 5.0,
            bytes_per_token: 9.6e7 * (1.0 - rate * 0.8),
            cycles_per_token: 1.7e6 * (1.0 - rate * 0.8),
            kv_saved_fraction: rate * 1.4,
            history_hit_rate: rate,
            routed_blocks: 58,
            positions: 100,
        }
    }

    #[test]
    fn the_table_has_a_line_per_rate_and_the_plot_is_a_png() {
        let rows: Vec<SweepRow> = [0.0, 0.1, 0.25].into_iter().map(row).collect();
        let t = table(&rows);
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.lines().nth(3).unwrap().trim_start().starts_with("0.25"), "{t}");
        if find_font().is_err() {
            // CI installs the optional tools and requires them
            assert!(std::env::var_os("REQUIRE_VERILATOR").is_none(), "no TrueType font for the plot (CI installs fonts-dejavu-core)");
            eprintln!("SKIPPED the plot: no TrueType font on this machine");
            return;
        }
        let path = std::env::temp_dir().join(format!("opu-sweep-{}.png", std::process::id()));
        plot(&rows, &path).unwrap();
        let png = std::fs::read(&path).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: 1200 x 900
        assert_eq!((u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap())), (1200, 900));
        // the same rows make the same picture; other rows another one
        let again = std::env::temp_dir().join(format!("opu-sweep-{}-2.png", std::process::id()));
        plot(&rows, &again).unwrap();
        assert_eq!(std::fs::read(&again).unwrap(), png);
        plot(&rows[..2], &again).unwrap();
        assert_ne!(std::fs::read(&again).unwrap(), png);
    }
}

//! Router calibration (`--skip RATE`): pretrained models ship no routers, so the compiler fits them to text.
//!
//! 1. **Importance.** The f32 interpreter runs the calibration sequences and records, for every block and
//!    token, the block's input `x` (what its router reads) and its importance for that token
//!    ([`Importance`]): by default what skipping the block costs the output, `ln(KL + 1e-4)` of the token's
//!    next-token distribution against the dense model's when the block is skipped for every decoded token of
//!    the sequence; or the cheaper proxy `ln(||update|| / ||x||)`, how much the block changes the residual
//!    stream relative to it.
//! 2. **Fit.** Per block (layers 1.., layer 0 always executes), a ridge regression of the importance on `x`
//!    (features standardized, intercept unpenalized): `s(x) = w . x + b`.
//! 3. **Threshold.** One threshold `tau` over every (token, block) decision of the calibration text: the
//!    quantile of the predicted importances at the target rate, so the least important blocks skip.
//! 4. **Routers.** The decision `s(x) < tau` as SkipGPT's two logits: execute `= c (w . x + b - tau)`, skip
//!    `= 0`, with `c > 0` a scale that puts the weights in FP16's range (the decision does not depend on it).
//!    A block no calibration token skips gets no router (it always executes; the program saves its `route`).
//!
//! The linear algebra (Gram matrices, the Cholesky solve) is nalgebra's.

use crate::interp::{BlockUpdate, DroppedBlock, Interpreter};
use crate::ir::Block;
use crate::llama::ModelError;
use crate::routers::{Router, Routers};
use nalgebra::{DMatrix, DVector};
use serde::Serialize;

/// What a (token, block) decision's importance is measured as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Importance {
    /// `ln(KL(dense || skipped) + 1e-4)` of the token's next-token distribution: each sequence's first
    /// `prompt` tokens run densely (a prefill executes every block), then the rest once densely and once per
    /// block with that block skipped for every one of them ([`Interpreter::forward_dropping_each`]). What
    /// the skip costs the output, including what the token's changed K/V (and, for attention, the K/V of
    /// an earlier layer) cost the tokens after it. One pass per block and sequence.
    OutputKl,
    /// `ln(||update|| / ||x||)` at the block's residual add of one dense pass: a proxy that does not see
    /// the output (nor what a skipped attention costs later tokens).
    RelativeUpdate,
}

impl Importance {
    pub fn name(self) -> &'static str {
        match self {
            Importance::OutputKl => "output-kl",
            Importance::RelativeUpdate => "relative-update",
        }
    }
}

/// Floor of the KL in [`Importance::OutputKl`]: below it the output does not change in any way that matters,
/// and the log does not spread such tokens over decades.
pub const KL_FLOOR: f64 = 1e-4;

/// How routers are fitted.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    pub importance: Importance,
    /// [`Importance::OutputKl`]: the tokens at the start of each sequence run densely, as a prompt (the
    /// positions measured are the ones after it).
    pub prompt: usize,
    /// Target share of skipped (token, block) decisions, over both blocks of layers 1.. (`--skip`).
    pub rate: f64,
    /// Ridge penalty on the standardized features, per calibration token. The default, 1,000, shrinks each
    /// router nearly to its block's mean importance: with a thousand calibration tokens for hundreds of
    /// inputs, a light ridge fits noise that held-out text does not share (docs/skipping.md measures it).
    pub ridge: f64,
    /// [`Importance::RelativeUpdate`]: positions at the start of each sequence left out of the fit and of
    /// the threshold: the first tokens of a text carry the attention sink (residual norms far from the rest)
    /// and are prompt tokens, which never skip (docs/skipping.md).
    pub skip_first: usize,
    /// Which blocks may skip, `[attention, ffn]` (`opu calibrate --blocks`); the rate stays a share of all
    /// decisions, so FFN-only routers at 0.25 skip half the FFN blocks.
    pub blocks: [bool; 2],
    /// One threshold per block, each at the same rate (false: one threshold pooled over every block, so
    /// the blocks predicted least important anywhere skip).
    pub per_block: bool,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions { importance: Importance::OutputKl, prompt: 16, rate: 0.25, ridge: 1000.0, skip_first: 4, blocks: [true; 2], per_block: false }
    }
}

/// One routed block's fit.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BlockFit {
    pub layer: usize,
    pub block: &'static str,
    /// Mean of `||update|| / ||x||` ([`Importance::RelativeUpdate`]) or of the KL when the block is skipped
    /// ([`Importance::OutputKl`]) over the calibration tokens.
    pub mean_importance: f64,
    /// Share of the importance's variance the router explains on the calibration tokens.
    pub r2: f64,
    /// Share of calibration tokens whose decision is skip (FP16 router, f32 input).
    pub skip_rate: f64,
    /// The block's importance threshold.
    pub threshold: f64,
}

/// What calibration produced and measured.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    #[serde(skip)]
    pub routers: Routers,
    pub target_rate: f64,
    pub importance: Importance,
    /// Skipped decisions over all decisions of layers 1.. on the calibration tokens.
    pub calibration_rate: f64,
    /// The importance threshold (`ln` of a KL or of a relative update), pooled over the blocks (with `per_block`, each
    /// block's is in its [`BlockFit`]).
    pub threshold: f64,
    pub per_block: bool,
    pub tokens: usize,
    pub blocks: Vec<BlockFit>,
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("calibration: {0}")]
    Input(String),
}

/// The samples of one block: `x` rows and their importances.
#[derive(Clone, Default)]
struct Samples {
    x: Vec<f32>,
    y: Vec<f64>,
}

/// Every block's importance for every calibration token ([`measure_importance`]): what [`fit`] fits routers
/// to (one measurement serves several rates).
#[derive(Clone)]
pub struct Measured {
    pub importance: Importance,
    pub hidden: usize,
    /// Tokens measured (positions, each with a decision per block).
    pub tokens: usize,
    /// `[layer][block]` (layer 0 empty).
    samples: Vec<[Samples; 2]>,
}

/// Fits routers on `sequences` (token ids; each runs from position 0) with the model `interp` runs
/// ([`measure_importance`], then [`fit`]).
pub fn calibrate(interp: &mut Interpreter, sequences: &[Vec<u32>], opts: &CalibrateOptions) -> Result<Calibration, CalibrateError> {
    check_options(opts)?;
    fit(&measure_importance(interp, sequences, opts, &mut |_| {})?, opts)
}

/// The rate and the ridge.
fn check_options(opts: &CalibrateOptions) -> Result<(), CalibrateError> {
    if !(0.0..1.0).contains(&opts.rate) {
        return Err(CalibrateError::Input(format!("skip rate {}: expected a value in [0, 1)", opts.rate)));
    }
    if !(opts.ridge.is_finite() && opts.ridge > 0.0) {
        return Err(CalibrateError::Input(format!("ridge penalty {}: expected a finite number > 0", opts.ridge)));
    }
    Ok(())
}

/// Step 1: every block's importance ([`CalibrateOptions::importance`]) for every token of `sequences`, and
/// the block's input there; `progress` gets the number of sequences measured after each.
pub fn measure_importance(
    interp: &mut Interpreter,
    sequences: &[Vec<u32>],
    opts: &CalibrateOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<Measured, CalibrateError> {
    let n_layer = interp.graph().layer_outputs.len();
    let hidden = interp
        .graph()
        .nodes
        .iter()
        .find(|n| n.layer == Some(0))
        .map(|n| n.shape.len())
        .ok_or_else(|| CalibrateError::Input("the graph has no layers".into()))?;
    let mut samples: Vec<[Samples; 2]> = (0..n_layer).map(|_| Default::default()).collect();
    match opts.importance {
        Importance::RelativeUpdate => {
            let skip_first = opts.skip_first;
            for (i, seq) in sequences.iter().enumerate().filter(|(_, s)| s.len() > skip_first) {
                progress(i);
                interp.reset();
                let mut observe = |u: BlockUpdate<'_>| {
                    if u.layer == 0 {
                        return;
                    }
                    let s = &mut samples[u.layer][u.block as usize];
                    for (x, d) in u.input.chunks_exact(hidden).zip(u.update.chunks_exact(hidden)).skip(skip_first) {
                        let nx = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
                        let nd = d.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
                        s.x.extend_from_slice(x);
                        s.y.push((nd.max(1e-30) / nx.max(1e-30)).ln());
                    }
                };
                interp.forward_observed(seq, &mut observe)?;
            }
        }
        Importance::OutputKl => {
            let prompt = opts.prompt.max(1);
            for (i, seq) in sequences.iter().enumerate().filter(|(_, s)| s.len() > prompt) {
                progress(i);
                interp.reset();
                interp.forward(&seq[..prompt])?;
                let vocab = interp.vocab();
                let mut dense: Vec<Vec<f64>> = Vec::new();
                let mut each = |d: DroppedBlock<'_>| {
                    if dense.is_empty() {
                        dense = d.dense_logits.chunks_exact(vocab).map(log_softmax).collect();
                    }
                    let s = &mut samples[d.layer][d.block as usize];
                    for ((x, z), ld) in d.input.chunks_exact(hidden).zip(d.logits.chunks_exact(vocab)).zip(&dense) {
                        s.x.extend_from_slice(x);
                        s.y.push((kl_divergence(ld, &log_softmax(z)) + KL_FLOOR).ln());
                    }
                };
                interp.forward_dropping_each(&seq[prompt..], &mut each)?;
            }
        }
    }
    progress(sequences.len());
    let tokens = samples.get(1).map_or(0, |s| s[0].y.len());
    if tokens < 16 {
        let first = match opts.importance {
            Importance::OutputKl => opts.prompt,
            Importance::RelativeUpdate => opts.skip_first,
        };
        return Err(CalibrateError::Input(format!(
            "{tokens} calibration tokens (after the first {first} of each sequence): at least 16 are needed"
        )));
    }
    Ok(Measured { importance: opts.importance, hidden, tokens, samples })
}

/// Steps 2 to 4: routers fitted to `measured` for `opts`' rate (its importance and measuring options are
/// `measured`'s).
pub fn fit(measured: &Measured, opts: &CalibrateOptions) -> Result<Calibration, CalibrateError> {
    check_options(opts)?;
    let Measured { hidden, tokens, ref samples, .. } = *measured;
    let n_layer = samples.len();
    // Fit every block, then pool the predictions for one threshold.
    let mut fits: Vec<(usize, Block, Fit)> = Vec::new();
    for (l, blocks) in samples.iter().enumerate().skip(1) {
        for block in Block::ALL {
            let s = &blocks[block as usize];
            fits.push((l, block, fit_ridge(&s.x, &s.y, hidden, opts.ridge)?));
        }
    }
    let decisions = tokens * 2 * (n_layer - 1);
    let allowed = |b: Block| opts.blocks[b as usize];
    // skip when the prediction is below tau: the `share` of smallest predictions
    let quantile = |mut v: Vec<f64>, share: f64| {
        v.sort_by(f64::total_cmp);
        match ((share * v.len() as f64).round() as usize).min(v.len()) {
            0 => f64::NEG_INFINITY,
            k if k >= v.len() => f64::INFINITY,
            k => 0.5 * (v[k - 1] + v[k]),
        }
    };
    let pooled: Vec<f64> = fits.iter().filter(|(_, b, _)| allowed(*b)).flat_map(|(_, _, f)| f.predicted.iter().copied()).collect();
    // the rate is a share of all decisions; only the allowed blocks' decisions can skip
    let share = (opts.rate * decisions as f64 / pooled.len().max(1) as f64).min(1.0);
    let threshold = quantile(pooled, share);

    let mut routers = Routers::none(n_layer, hidden);
    let mut blocks = Vec::new();
    let mut skipped = 0usize;
    for (l, block, fit) in &fits {
        let s = &samples[*l][*block as usize];
        let tau = match (allowed(*block), opts.per_block) {
            (false, _) => f64::NEG_INFINITY,
            (true, false) => threshold,
            (true, true) => quantile(fit.predicted.clone(), share),
        };
        let router = fit.router(tau);
        let skips = s.x.chunks_exact(hidden).filter(|x| router.skips(x)).count();
        skipped += skips;
        let floor = if measured.importance == Importance::OutputKl { KL_FLOOR } else { 0.0 };
        let mean_importance = s.y.iter().map(|y| y.exp() - floor).sum::<f64>() / s.y.len() as f64;
        blocks.push(BlockFit { layer: *l, block: block.name(), mean_importance, r2: fit.r2, skip_rate: skips as f64 / s.y.len() as f64, threshold: tau });
        if skips > 0 {
            routers.layers[*l][*block as usize] = Some(router);
        }
    }
    Ok(Calibration {
        routers,
        target_rate: opts.rate,
        importance: measured.importance,
        calibration_rate: skipped as f64 / decisions.max(1) as f64,
        threshold,
        per_block: opts.per_block,
        tokens,
        blocks,
    })
}

/// Quality of skipping in the float model: teacher-forced held-out sequences, the routed interpreter against
/// the dense one.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SkipQuality {
    /// Positions compared (each predicts the sequence's next token).
    pub positions: usize,
    /// Share of positions where both argmaxes agree.
    pub top1_agreement: f64,
    /// Mean KL(dense || skipping) of the softmax distributions (nats).
    pub mean_kl: f64,
    /// Perplexity of the sequences' tokens under each.
    pub dense_perplexity: f64,
    pub skip_perplexity: f64,
    /// Skipped decisions over all decisions of layers 1.. (both blocks).
    pub realised_rate: f64,
    pub attention_rate: f64,
}

/// `log_softmax(z)[i]` for every i, in f64 (a NaN anywhere makes every entry NaN).
pub fn log_softmax(z: &[f32]) -> Vec<f64> {
    let max = z.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let lse = max + z.iter().map(|&v| (f64::from(v) - max).exp()).sum::<f64>().ln();
    z.iter().map(|&v| f64::from(v) - lse).collect()
}

/// KL(p || q) from log-probabilities.
pub fn kl_divergence(log_p: &[f64], log_q: &[f64]) -> f64 {
    log_p.iter().zip(log_q).map(|(&a, &b)| if a == f64::NEG_INFINITY { 0.0 } else { a.exp() * (a - b) }).sum()
}

/// Each sequence: its first `prompt` tokens run densely (prefill executes every block), the rest one at a
/// time with `routers` deciding, teacher-forced; compared with the dense model on the same tokens.
pub fn measure_skipping(interp: &mut Interpreter, routers: &Routers, sequences: &[Vec<u32>], prompt: usize) -> Result<SkipQuality, CalibrateError> {
    let (mut n, mut agree, mut kl, mut nll_d, mut nll_s) = (0usize, 0usize, 0f64, 0f64, 0f64);
    let (mut decisions, mut skipped, mut attn_decisions, mut attn_skipped) = (0usize, 0usize, 0usize, 0usize);
    for seq in sequences.iter().filter(|s| s.len() > prompt && prompt > 0) {
        interp.reset();
        let dense = interp.forward(seq)?.logits;
        interp.reset();
        interp.forward(&seq[..prompt])?;
        for t in prompt..seq.len() {
            let (fwd, d) = interp.forward_routed(seq[t], routers)?;
            for l in 1..d.len() {
                decisions += 2;
                attn_decisions += 1;
                skipped += usize::from(d[l][0]) + usize::from(d[l][1]);
                attn_skipped += usize::from(d[l][0]);
            }
            let Some(&next) = seq.get(t + 1) else { break };
            let (ld, ls) = (log_softmax(&dense[t]), log_softmax(&fwd.logits[0]));
            let argmax = |v: &[f64]| v.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0;
            n += 1;
            agree += usize::from(argmax(&ld) == argmax(&ls));
            kl += kl_divergence(&ld, &ls);
            nll_d -= ld[next as usize];
            nll_s -= ls[next as usize];
        }
    }
    let m = n.max(1) as f64;
    Ok(SkipQuality {
        positions: n,
        top1_agreement: agree as f64 / m,
        mean_kl: kl / m,
        dense_perplexity: (nll_d / m).exp(),
        skip_perplexity: (nll_s / m).exp(),
        realised_rate: skipped as f64 / decisions.max(1) as f64,
        attention_rate: attn_skipped as f64 / attn_decisions.max(1) as f64,
    })
}

/// A block's regression: `s(x) = w . x + b` and its predictions on the calibration tokens.
struct Fit {
    w: Vec<f64>,
    b: f64,
    r2: f64,
    predicted: Vec<f64>,
}

impl Fit {
    /// The router of `s(x) < tau`: execute logit `c (w . x + b - tau)`, skip logit 0.
    fn router(&self, tau: f64) -> Router {
        let hidden = self.w.len();
        let bias = if tau.is_finite() { self.b - tau } else if tau > 0.0 { -1.0 } else { 1.0 };
        let w_max = self.w.iter().fold(0f64, |m, w| m.max(w.abs()));
        if !tau.is_finite() || w_max == 0.0 {
            // a constant decision
            return Router::constant(hidden, bias < 0.0);
        }
        // the largest weight at 1.0 (FP16 keeps 11 bits of every weight down to 2^-14), the bias within range
        let c = (1.0 / w_max).min(6.0e4 / bias.abs().max(f64::MIN_POSITIVE));
        let mut weight = vec![0f32; 2 * hidden];
        for (o, w) in weight.iter_mut().zip(&self.w) {
            *o = (c * w) as f32;
        }
        Router { weight, bias: [(c * bias) as f32, 0.0] }
    }
}

/// Ridge regression of `y` on the rows of `x` (`hidden` wide): features centered and scaled to unit variance,
/// penalty `ridge x n` on the scaled weights, the intercept free.
fn fit_ridge(x: &[f32], y: &[f64], hidden: usize, ridge: f64) -> Result<Fit, CalibrateError> {
    let n = y.len();
    let xm = DMatrix::from_fn(n, hidden, |i, j| f64::from(x[i * hidden + j]));
    let mean = xm.row_mean();
    let mut sd = DVector::zeros(hidden);
    for j in 0..hidden {
        let c = xm.column(j);
        let var = c.iter().map(|v| (v - mean[j]).powi(2)).sum::<f64>() / n as f64;
        sd[j] = if var > 0.0 { var.sqrt() } else { 1.0 };
    }
    let z = DMatrix::from_fn(n, hidden, |i, j| (xm[(i, j)] - mean[j]) / sd[j]);
    let y_mean = y.iter().sum::<f64>() / n as f64;
    let yc = DVector::from_iterator(n, y.iter().map(|v| v - y_mean));
    let mut gram = z.transpose() * &z;
    for j in 0..hidden {
        gram[(j, j)] += ridge * n as f64;
    }
    let rhs = z.transpose() * &yc;
    let chol = gram.cholesky().ok_or_else(|| CalibrateError::Input("the calibration Gram matrix is not positive definite".into()))?;
    let beta = chol.solve(&rhs);
    // back to the raw features: s(x) = sum_j beta_j (x_j - mean_j) / sd_j + y_mean
    let w: Vec<f64> = (0..hidden).map(|j| beta[j] / sd[j]).collect();
    let b = y_mean - (0..hidden).map(|j| w[j] * mean[j]).sum::<f64>();
    let fitted = &z * &beta;
    let predicted: Vec<f64> = fitted.iter().map(|v| v + y_mean).collect();
    let ss_res: f64 = predicted.iter().zip(y).map(|(p, y)| (p - y).powi(2)).sum();
    let ss_tot: f64 = yc.iter().map(|v| v * v).sum();
    let r2 = if ss_tot > 0.0 { 1.0 - ss_res / ss_tot } else { 0.0 };
    Ok(Fit { w, b, r2, predicted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ridge_recovers_a_linear_importance_and_the_router_decides_by_the_threshold() {
        // y = 0.5 x0 - 2 x1 + 3 over 400 samples of 8 features (no noise): a tiny ridge recovers it exactly
        let (n, h) = (400, 8);
        let x: Vec<f32> = (0..n * h).map(|i| ((i as f32 * 0.618).sin() * 4.0).round() / 4.0).collect();
        let y: Vec<f64> = x.chunks_exact(h).map(|r| 0.5 * f64::from(r[0]) - 2.0 * f64::from(r[1]) + 3.0).collect();
        let fit = fit_ridge(&x, &y, h, 1e-9).unwrap();
        assert!((fit.w[0] - 0.5).abs() < 1e-6 && (fit.w[1] + 2.0).abs() < 1e-6, "{:?}", fit.w);
        assert!(fit.w[2..].iter().all(|w| w.abs() < 1e-6));
        assert!((fit.b - 3.0).abs() < 1e-6 && fit.r2 > 0.999_999);
        // skip iff y < 3: every row with 0.5 x0 - 2 x1 well away from 0 decides by its sign
        let r = fit.router(3.0);
        for row in x.chunks_exact(h) {
            let s = 0.5 * f64::from(row[0]) - 2.0 * f64::from(row[1]);
            if s.abs() > 0.01 {
                assert_eq!(r.skips(row), s < 0.0, "{row:?}");
            }
        }
        // a large ridge shrinks the slopes toward 0 and keeps the mean
        let shrunk = fit_ridge(&x, &y, h, 1e3).unwrap();
        assert!(shrunk.w[1].abs() < 0.01 && (shrunk.b - y.iter().sum::<f64>() / n as f64).abs() < 0.05);
        // thresholds past the ends are constant routers
        assert_eq!(fit.router(f64::INFINITY), Router::constant(h, true));
        assert_eq!(fit.router(f64::NEG_INFINITY), Router::constant(h, false));
    }
}

//! Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling with a seeded,
//! portable random generator (ChaCha8: the same seed gives the same text on every machine).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sampling settings. `temperature <= 0` is greedy (argmax; the other settings are then ignored).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` (1: all).
    pub top_p: f32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

/// A sampling setting out of its range (named as the field; the CLI's flags check the same ranges).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature = {0}: {TEMPERATURE_RANGE}")]
    Temperature(f32),
    #[error("top_p = {0}: {TOP_P_RANGE}")]
    TopP(f32),
}

/// What `temperature` may be.
pub const TEMPERATURE_RANGE: &str = "expected a finite number, 0 (greedy) or more";
/// What `top_p` may be.
pub const TOP_P_RANGE: &str = "expected a number above 0 and at most 1 (1: all tokens)";

fn temperature_ok(t: f32) -> bool {
    t.is_finite() && t >= 0.0
}

fn top_p_ok(p: f32) -> bool {
    p > 0.0 && p <= 1.0
}

impl SamplingParams {
    /// Checks every setting's range (a NaN temperature would sample garbage, a `top_p` of 7 would be
    /// taken as 1 without a word).
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !temperature_ok(self.temperature) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !top_p_ok(self.top_p) {
            return Err(SamplingError::TopP(self.top_p));
        }
        Ok(())
    }
}

/// `--temperature` for clap: a number in [`TEMPERATURE_RANGE`].
pub fn parse_temperature(s: &str) -> Result<f32, String> {
    let t: f32 = s.trim().parse().map_err(|_| format!("`{s}` is not a number ({TEMPERATURE_RANGE})"))?;
    temperature_ok(t).then_some(t).ok_or_else(|| TEMPERATURE_RANGE.to_string())
}

/// `--top-p` for clap: a number in [`TOP_P_RANGE`].
pub fn parse_top_p(s: &str) -> Result<f32, String> {
    let p: f32 = s.trim().parse().map_err(|_| format!("`{s}` is not a number ({TOP_P_RANGE})"))?;
    top_p_ok(p).then_some(p).ok_or_else(|| TOP_P_RANGE.to_string())
}

pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Sampler { params, rng }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        if p.temperature <= 0.0 {
            return opu_hw::numerics::vector::argmax(logits.iter().copied());
        }
        // Candidates by decreasing logit (ties: lower id first, so the order is deterministic).
        let mut idx: Vec<u32> = (0..logits.len() as u32).filter(|&i| !logits[i as usize].is_nan()).collect();
        idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
        if p.top_k > 0 {
            idx.truncate(p.top_k);
        }
        let Some(&first) = idx.first() else { return 0 };
        let max = f64::from(logits[first as usize]);
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((f64::from(logits[i as usize]) - max) / f64::from(p.temperature)).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let keep = probs.iter().position(|&q| {
                acc += q;
                acc >= f64::from(p.top_p)
            });
            let keep = keep.map_or(probs.len(), |k| k + 1);
            probs.truncate(keep);
            idx.truncate(keep);
            let total: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|q| *q /= total);
        }
        let mut u: f64 = self.rng.gen();
        for (&i, &q) in idx.iter().zip(&probs) {
            if u < q {
                return i;
            }
            u -= q;
        }
        *idx.last().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_range_are_refused() {
        let ok = SamplingParams { temperature: 0.7, top_k: 40, top_p: 0.9, seed: 1 };
        assert_eq!(ok.validate(), Ok(()));
        for t in [f32::NAN, -0.5, f32::INFINITY] {
            let e = SamplingParams { temperature: t, ..ok.clone() }.validate().unwrap_err();
            assert!(e.to_string().starts_with("temperature = "), "{e}");
            assert!(parse_temperature(&t.to_string()).is_err(), "{t}");
        }
        for p in [f32::NAN, 0.0, -1.0, 1.5, 7.0] {
            let e = SamplingParams { top_p: p, ..ok.clone() }.validate().unwrap_err();
            assert!(e.to_string().contains("top_p = ") && e.to_string().contains("at most 1"), "{e}");
            assert!(parse_top_p(&p.to_string()).is_err(), "{p}");
        }
        assert_eq!(parse_temperature("0"), Ok(0.0));
        assert_eq!(parse_top_p("1"), Ok(1.0));
        assert!(parse_top_p("abc").unwrap_err().contains("not a number"));
    }

    #[test]
    fn greedy_and_filters() {
        let logits = [1.0, 5.0, 3.0, 5.0, -2.0];
        assert_eq!(Sampler::new(SamplingParams::default()).sample(&logits), 1);
        // top_k = 1 always picks the best, whatever the temperature.
        let mut s = Sampler::new(SamplingParams { temperature: 5.0, top_k: 1, top_p: 1.0, seed: 3 });
        assert!((0..50).all(|_| s.sample(&logits) == 1));
        // top_p that the best two reach: only 1 and 3 are ever drawn.
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.8, seed: 3 });
        let draws: Vec<u32> = (0..200).map(|_| s.sample(&logits)).collect();
        assert!(draws.iter().all(|&d| d == 1 || d == 3) && draws.contains(&1) && draws.contains(&3));
        // The same seed gives the same draws.
        let p = SamplingParams { temperature: 1.5, top_k: 0, top_p: 1.0, seed: 42 };
        let a: Vec<u32> = { let mut s = Sampler::new(p.clone()); (0..64).map(|_| s.sample(&logits)).collect() };
        let b: Vec<u32> = { let mut s = Sampler::new(p); (0..64).map(|_| s.sample(&logits)).collect() };
        assert_eq!(a, b);
        assert!(a.contains(&0) || a.contains(&2), "a high temperature reaches beyond the top two");
    }
}

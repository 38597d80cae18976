//! The CNN path's runtime: a Keras classifier opened on a backend (`opu classify`), and measured on a
//! labelled dataset against its f32 interpreter (`opu eval --dataset`).
//!
//! - `reference`: the f32 interpreter of the IR (`opu_compiler::interp`), the float model.
//! - `sim`: the network in auto-scaled 16-bit fixed point (`opu_compiler::fixed_point`), compiled to a
//!   `conv`/`maxpool` program (`opu_compiler::lower_cnn`) and run on the functional simulator through the
//!   `Device` trait, like any card: the host quantizes the image, writes it, rings the doorbell and reads
//!   the logits back; the softmax is the host's.
//! - `rtl`: the same program on the overlay's RTL under Verilator (`opu_rtlsim::RtlSim`, its CNN unit), bit
//!   for bit with `sim` and with the RTL's cycle counts; slow (seconds per image), for one image at a time.

use crate::image_input::{Gray, Preprocess};
use crate::loader::{self, Counters};
use crate::sim_backend::ProgramDevice;
use anyhow::{bail, Context, Result};
use opu_compiler::cnn::Network;
use opu_compiler::dataset::Dataset;
use opu_compiler::fixed_point::{calibrate, plan};
use opu_compiler::interp::{softmax, Interpreter};
use opu_compiler::lower_cnn::{compile_cnn, CnnMeta, CompiledCnn};
use opu_hw::OverlayConfig;
use opu_sim::func::FuncSim;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A device that never answers in this long has hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One image's result.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Scores {
    /// The last layer's outputs before the softmax.
    pub logits: Vec<f32>,
    /// The softmax of the logits (the logits themselves where the model has no softmax).
    pub probabilities: Vec<f32>,
    /// The index of the largest logit.
    pub class: usize,
}

impl Scores {
    fn new(logits: Vec<f32>, softmax_last: bool) -> Self {
        let probabilities = if softmax_last { softmax(&logits) } else { logits.clone() };
        let class = argmax(&logits);
        Scores { logits, probabilities, class }
    }
}

/// The index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// The f32 interpreter's scores of `images` (the input rows of the interpreter's graph, back to back).
pub fn reference_scores(interp: &mut Interpreter, images: &[f32]) -> Result<Vec<Scores>> {
    let graph = interp.graph();
    let softmax_last = matches!(graph.nodes.last().map(|n| &n.op), Some(opu_compiler::ir::Op::Softmax));
    let logits_node = graph.nodes[graph.nodes.len() - 1 - usize::from(softmax_last)].output;
    let classes = graph.nodes.last().map_or(0, |n| n.shape.len());
    let mut logits = Vec::new();
    interp.forward_rows_observed(images, &mut |node, out| {
        if node.output == logits_node {
            logits = out.to_vec();
        }
    })?;
    Ok(logits.chunks_exact(classes).map(|l| Scores::new(l.to_vec(), softmax_last)).collect())
}

/// A compiled CNN loaded on a device.
pub struct CnnProgram {
    dev: ProgramDevice,
    pub meta: CnnMeta,
    /// Counters summed over the images run, and those of the last image.
    pub counters: Counters,
    pub last: Counters,
    pub images: u64,
}

/// Calibrates `net` on `calibration` images (input rows) and compiles it for `config`.
pub fn compile(net: &Network, calibration: &[f32], config: &OverlayConfig) -> Result<CompiledCnn> {
    anyhow::ensure!(!calibration.is_empty(), "{}: no calibration images to scale the fixed-point formats from", net.path.display());
    let cal = calibrate(net, calibration).with_context(|| format!("calibrating {}", net.path.display()))?;
    let plan = plan(net, &cal)?;
    compile_cnn(net, &plan, config).with_context(|| format!("compiling {}", net.path.display()))
}

impl CnnProgram {
    /// Calibrates `net` on `calibration` images, compiles it for `config` and loads it on a new functional
    /// simulator.
    pub fn compile_on_sim(net: &Network, calibration: &[f32], config: &OverlayConfig) -> Result<Self> {
        Self::load_on_sim(&compile(net, calibration, config)?, config)
    }

    /// Loads a compiled CNN on a new functional simulator.
    pub fn load_on_sim(compiled: &CompiledCnn, config: &OverlayConfig) -> Result<Self> {
        let mut sim = FuncSim::new(config);
        if let Some(layout) = compiled.container.layout()? {
            sim.set_regions(layout.regions);
        }
        Self::load_on(compiled, ProgramDevice::Func(sim))
    }

    /// Loads a compiled CNN on a new RTL model (Verilator; the `sim` and `sim-wide` presets).
    pub fn load_on_rtl(compiled: &CompiledCnn, config: &OverlayConfig) -> Result<Self> {
        let rtl = opu_rtlsim::RtlSim::new(config).map_err(|e| anyhow::anyhow!("backend `rtl`: {e}"))?;
        Self::load_on(compiled, ProgramDevice::Rtl(Box::new(rtl)))
    }

    /// Loads a compiled CNN on an OPU card (or an emulated one) through the driver.
    pub fn load_on_card(compiled: &CompiledCnn, card: opu_driver::Card) -> Result<Self> {
        Self::load_on(compiled, ProgramDevice::Pcie(Box::new(card)))
    }

    fn load_on(compiled: &CompiledCnn, mut dev: ProgramDevice) -> Result<Self> {
        loader::load(dev.device(), &compiled.container)?;
        Ok(CnnProgram { dev, meta: compiled.meta.clone(), counters: Counters::default(), last: Counters::default(), images: 0 })
    }

    /// Runs one image (the network's input, before the input scaling).
    pub fn classify(&mut self, image: &[f32]) -> Result<Scores> {
        let [h, w, c] = self.meta.input;
        anyhow::ensure!(image.len() == h * w * c, "an image of {} values; the program takes {h} x {w} x {c}", image.len());
        let dev = self.dev.device();
        dev.mem_write(self.meta.input_addr, &self.meta.quantize_input(image))?;
        let entry = &self.meta.entries[0];
        loader::run(dev, entry.code_addr, entry.instructions, &[], RUN_TIMEOUT)?;
        let mut out = vec![0u8; self.meta.classes * 2];
        dev.mem_read(self.meta.output_addr, &mut out)?;
        self.last = Counters::read(dev)?;
        self.counters.add(&self.last);
        self.images += 1;
        Ok(Scores::new(self.meta.logits(&out), self.meta.softmax))
    }
}

/// A classifier on one backend.
pub enum Classifier {
    Reference(Box<Interpreter>),
    Program(Box<CnnProgram>),
}

impl Classifier {
    /// Opens `net` on `backend` (`reference`, `sim`, `rtl`, `pcie`, or `auto`: an OPU card where one
    /// answers, else the reference path); the program backends compile for `config` (`auto`: the card's
    /// overlay) with the formats calibrated on `calibration`.
    pub fn open(net: Network, backend: &str, config: &OverlayConfig, calibration: &[f32]) -> Result<(Self, String)> {
        Ok(match backend {
            "reference" => (Classifier::Reference(Box::new(net.interpreter())), "reference (the f32 interpreter of the IR)".to_string()),
            "pcie" | "auto" => {
                let t = crate::backend::pcie_target();
                let wanted = (backend == "pcie").then_some(config);
                match opu_driver::Card::open(&t.sysfs_root, t.bdf.as_deref(), wanted) {
                    Ok(card) => {
                        let (bdf, cfg) = (card.bdf().to_string(), card.config().clone());
                        let p = CnnProgram::load_on_card(&compile(&net, calibration, &cfg)?, card)?;
                        let how = if backend == "auto" { "auto: OPU card answered; " } else { "" };
                        (Classifier::Program(Box::new(p)), format!("{how}pcie (card {bdf}, overlay `{}`, 16-bit fixed point)", cfg.name))
                    }
                    Err(e) if backend == "auto" => {
                        (Classifier::Reference(Box::new(net.interpreter())), format!("auto: {e}; using the reference path (the f32 interpreter)"))
                    }
                    Err(e) => bail!("backend `pcie`: {e}"),
                }
            }
            "sim" => {
                let p = CnnProgram::compile_on_sim(&net, calibration, config)?;
                (Classifier::Program(Box::new(p)), format!("sim (functional, overlay `{}`, 16-bit fixed point)", config.name))
            }
            "rtl" => {
                let p = CnnProgram::load_on_rtl(&compile(&net, calibration, config)?, config)?;
                (Classifier::Program(Box::new(p)), format!("rtl (Verilator, overlay `{}`, 16-bit fixed point)", config.name))
            }
            other => bail!("unknown backend `{other}` for a CNN (expected reference, sim, rtl, pcie or auto)"),
        })
    }

    pub fn classify(&mut self, image: &[f32]) -> Result<Scores> {
        match self {
            Classifier::Reference(interp) => Ok(reference_scores(interp, image)?.remove(0)),
            Classifier::Program(p) => p.classify(image),
        }
    }
}

/// The images at `indexes` of `inputs` (input rows of `per` values each, back to back).
fn images_at(inputs: &[f32], per: usize, indexes: &[usize]) -> Vec<f32> {
    indexes.iter().flat_map(|&i| &inputs[i * per..][..per]).copied().collect()
}

/// `count` of `pool`, evenly spread.
fn spread(pool: &[usize], count: usize) -> Vec<usize> {
    let count = count.min(pool.len());
    (0..count).map(|j| pool[j * pool.len() / count]).collect()
}

/// The fixed-point overlay against the f32 interpreter on a labelled dataset.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CnnEval {
    pub images: usize,
    /// Top-1 accuracy of the overlay (the functional simulator) and of the f32 interpreter.
    pub accuracy: f64,
    pub reference_accuracy: f64,
    /// Images on which the two agree on the top class, over all images.
    pub top1_agreement: f64,
    /// The largest difference of a logit, and of a probability, between the two.
    pub max_logit_error: f64,
    pub max_probability_error: f64,
    /// The functional simulator's cycle estimate per image, and images/s at the config's core clock.
    pub cycles_per_image: f64,
    pub projected_images_per_second: f64,
    pub core_clock_mhz: u32,
    /// Device-memory bytes per image.
    pub bytes_per_image: f64,
    /// Cross-calibration: each image is run by a program calibrated on images of the other folds.
    pub folds: usize,
    pub calibration_images: usize,
    /// How the images became the model's input.
    pub preprocess: String,
    /// Each fold's program's formats.
    pub plans: Vec<opu_compiler::fixed_point::FixedPlan>,
}

/// Runs every image of `ds`, made the model's input by `preprocess`, on the functional simulator and the
/// f32 interpreter. The images are split into `folds` folds (image `i` in fold `i % folds`); each fold runs
/// on a program calibrated on `calibration_images` images of the other folds, so no image is ever
/// classified by a program calibrated on it. `progress` shows a bar.
#[allow(clippy::too_many_arguments)]
pub fn eval_dataset(
    net: &Network,
    ds: &Dataset,
    preprocess: Preprocess,
    config: &OverlayConfig,
    calibration_images: usize,
    folds: usize,
    progress: bool,
) -> Result<CnnEval> {
    anyhow::ensure!(folds >= 2 && folds <= ds.len(), "--folds {folds}: expected 2 to {} (calibration images must not be evaluation images)", ds.len());
    anyhow::ensure!(calibration_images > 0, "--calibration-images must be at least 1");
    let [h, w, _] = net.input_shape();
    let per = h * w;
    let inputs = dataset_inputs(net, ds, &(0..ds.len()).collect::<Vec<_>>(), preprocess)?;
    let bar = if progress { indicatif::ProgressBar::new(ds.len() as u64) } else { indicatif::ProgressBar::hidden() };
    bar.set_style(indicatif::ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} images ({eta})").expect("template"));
    let mut rows: Vec<(usize, Scores, Scores)> = Vec::with_capacity(ds.len());
    let (mut counters, mut plans) = (Counters::default(), Vec::new());
    for f in 0..folds {
        bar.set_message(format!("fold {}/{folds}", f + 1));
        let others: Vec<usize> = (0..ds.len()).filter(|i| i % folds != f).collect();
        let calibration = images_at(&inputs, per, &spread(&others, calibration_images));
        let compiled = compile(net, &calibration, config)?;
        plans.push(compiled.meta.plan.clone());
        let mine: Vec<usize> = (f..ds.len()).step_by(folds).collect();
        // the reference in chunks (one interpreter pass per chunk), the overlay on a simulator per worker
        let reference: Vec<Scores> = mine
            .par_chunks(64)
            .map_init(|| net.interpreter(), |interp, chunk| reference_scores(interp, &images_at(&inputs, per, chunk)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        let results: Vec<(Scores, Counters)> = mine
            .par_iter()
            .map_init(
                || CnnProgram::load_on_sim(&compiled, config),
                |p, &i| -> Result<(Scores, Counters)> {
                    let p = p.as_mut().map_err(|e| anyhow::anyhow!("{e:#}"))?;
                    let s = p.classify(&images_at(&inputs, per, &[i]))?;
                    bar.inc(1);
                    Ok((s, p.last))
                },
            )
            .collect::<Result<Vec<_>>>()?;
        for ((i, (s, one)), r) in mine.iter().zip(results).zip(reference) {
            counters.add(&one);
            rows.push((*i, s, r));
        }
    }
    bar.finish_and_clear();
    let n = rows.len() as f64;
    let label = |i: usize| usize::from(ds.labels[i]);
    let frac = |f: &dyn Fn(&(usize, Scores, Scores)) -> bool| rows.iter().filter(|r| f(r)).count() as f64 / n;
    let max_err = |f: &dyn Fn(&Scores) -> &[f32]| {
        rows.iter().flat_map(|(_, s, r)| f(s).iter().zip(f(r)).map(|(a, b)| f64::from((a - b).abs()))).fold(0f64, f64::max)
    };
    let cycles_per_image = counters.cycles as f64 / n;
    Ok(CnnEval {
        images: rows.len(),
        accuracy: frac(&|(i, s, _)| s.class == label(*i)),
        reference_accuracy: frac(&|(i, _, r)| r.class == label(*i)),
        top1_agreement: frac(&|(_, s, r)| s.class == r.class),
        max_logit_error: max_err(&|s| &s.logits),
        max_probability_error: max_err(&|s| &s.probabilities),
        cycles_per_image,
        projected_images_per_second: f64::from(config.core_clock_mhz) * 1e6 / cycles_per_image.max(1.0),
        core_clock_mhz: config.core_clock_mhz,
        bytes_per_image: (counters.bytes_read + counters.bytes_written) as f64 / n,
        folds,
        preprocess: format!("{preprocess:?}").to_lowercase(),
        calibration_images: calibration_images.min(ds.len() - ds.len().div_ceil(folds)),
        plans,
    })
}

/// Opens a Keras model as a network whose input is grey values 0-255, scaled by `input_scale` first: by
/// default 1/255 (the digit classifier's package divides by 255), or nothing where the model's first layer
/// is a `Rescaling` of its own.
pub fn open_network(path: &Path, input_scale: Option<f32>) -> Result<Network> {
    if let Some(s) = input_scale {
        anyhow::ensure!(s.is_finite() && s > 0.0, "--input-scale {s}: expected a positive number");
    }
    let model = opu_compiler::keras::open(path)?;
    let own = matches!(model.layers.first(), Some(opu_compiler::keras::Layer::Rescaling { .. }));
    let scaling = match (input_scale, own) {
        (None, true) => None,
        (s, _) => Some((s.unwrap_or(1.0 / 255.0), 0.0)),
    };
    Ok(opu_compiler::cnn::from_keras(&model, scaling)?)
}

/// The preprocessing a model expects by default: the digit classifier's own (`fit`) for it, else `resize`.
pub fn default_preprocess(model: &str) -> Preprocess {
    if model == "digits" || model.ends_with("digit_classifier_model.keras") {
        Preprocess::Fit
    } else {
        Preprocess::Resize
    }
}

/// The network's input height and width: it must take one channel, as the CNN path reads grey images.
fn grey_input(net: &Network) -> Result<(usize, usize)> {
    let [h, w, c] = net.input_shape();
    anyhow::ensure!(c == 1, "{}: the model takes {c} channels; the CNN path reads grey images", net.path.display());
    Ok((h, w))
}

/// `img` preprocessed into an input row of `net` (`what` names the image in errors).
fn input_row(net: &Network, img: &Gray, preprocess: Preprocess, what: &str) -> Result<Vec<f32>> {
    let (h, w) = grey_input(net)?;
    Ok(preprocess.apply(img, h, w, what)?.into_iter().map(f32::from).collect())
}

/// The network's input from square grey images of `side` pixels: each preprocessed, as input rows.
fn dataset_inputs(net: &Network, ds: &Dataset, indexes: &[usize], preprocess: Preprocess) -> Result<Vec<f32>> {
    let (h, w) = grey_input(net)?;
    let side = (ds.pixels as f64).sqrt() as usize;
    anyhow::ensure!(side * side == ds.pixels, "{}: images of {} pixels are not square", ds.path.display(), ds.pixels);
    let mut rows = Vec::with_capacity(indexes.len() * h * w);
    for &i in indexes {
        let img = Gray { width: side, height: side, pixels: ds.image(i).to_vec() };
        rows.extend(input_row(net, &img, preprocess, &format!("{}: image {i}", ds.path.display()))?);
    }
    Ok(rows)
}

/// `count` images of the dataset at `path` (evenly spread over it), preprocessed, as input rows.
pub fn dataset_rows(net: &Network, path: &Path, count: usize, preprocess: Preprocess) -> Result<Vec<f32>> {
    anyhow::ensure!(count > 0, "no images asked of {}", path.display());
    let ds = opu_compiler::dataset::read_csv(path, net.input_shape()[0] * net.input_shape()[1])?;
    dataset_inputs(net, &ds, &spread(&(0..ds.len()).collect::<Vec<_>>(), count), preprocess)
}

/// The image files at `paths`, preprocessed, as the network's input rows (one per file).
pub fn image_rows(net: &Network, paths: &[PathBuf], preprocess: Preprocess) -> Result<Vec<Vec<f32>>> {
    paths.iter().map(|p| input_row(net, &crate::image_input::load(p)?, preprocess, &p.display().to_string())).collect()
}

/// The scaling decisions of a compiled CNN, a line per layer (the `opu compile` report).
pub fn scaling_report(meta: &CnnMeta) -> String {
    let p = &meta.plan;
    let mut s = format!(
        "fixed point (16-bit, formats from {} calibration images): input Q{}.{} (largest {:.4}{})\n",
        p.calibration_images,
        16 - p.input_frac,
        p.input_frac,
        p.input_max,
        meta.input_scaling.map_or(String::new(), |(scale, _)| format!(", after the input scaling x {scale:e}"))
    );
    s += "  layer             kind     in     out    largest out  weights (largest)   bias   shift\n";
    for l in &p.layers {
        let q = |f: u32| format!("Q{}.{}", 16 - f, f);
        let w = l.weights.as_ref().map_or(String::new(), |w| format!("{:<6} ({:.4})     i32 Q.{:<2} {}", q(w.weight_frac), w.weight_max, w.bias_frac, w.shift));
        s += &format!("  {:<17} {:<8} {:<6} {:<6} {:<12.4} {w}\n", l.node, l.kind, q(l.input_frac), q(l.output_frac), l.output_max);
    }
    s + &format!("  output: {} logits Q{}.{}{}\n", meta.classes, 16 - p.output_frac(), p.output_frac(), if meta.softmax { ", softmax on the host" } else { "" })
}

/// One backend's row of `opu bench --model digits`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CnnBenchRow {
    pub backend: String,
    pub images: usize,
    /// Wall-clock images per second on this machine (one image per call, one thread; the best of the rounds).
    pub images_per_second: f64,
    /// This row's images/s over the first row's, measured in the same rounds.
    pub speed_ratio: f64,
    /// The overlay's cycles per image (the functional simulator's cycle estimate) and images/s at the
    /// config's core clock; none for the interpreter.
    pub cycles_per_image: Option<f64>,
    pub projected_images_per_second: Option<f64>,
}

/// The functional simulator (the fixed-point program) and the f32 interpreter side by side on the same
/// `images` (input rows), one image per call, in `rounds` alternating rounds (the machine's load hits both
/// alike); each row keeps its best round.
pub fn bench(net: &Network, images: &[f32], calibration: &[f32], config: &OverlayConfig, rounds: usize) -> Result<Vec<CnnBenchRow>> {
    let per = net.graph.inputs[0].shape.len();
    let n = images.len() / per;
    anyhow::ensure!(n > 0, "no images to bench");
    let mut program = CnnProgram::compile_on_sim(net, calibration, config)?;
    let mut interp = net.interpreter();
    let (mut best_sim, mut best_ref) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds.max(1) {
        let t = std::time::Instant::now();
        for img in images.chunks_exact(per) {
            program.classify(img)?;
        }
        best_sim = best_sim.min(t.elapsed().as_secs_f64());
        let t = std::time::Instant::now();
        for img in images.chunks_exact(per) {
            reference_scores(&mut interp, img)?;
        }
        best_ref = best_ref.min(t.elapsed().as_secs_f64());
    }
    let cycles = program.counters.cycles as f64 / program.images as f64;
    let sim_rate = n as f64 / best_sim;
    Ok(vec![
        CnnBenchRow {
            backend: format!("sim (16-bit fixed point, overlay `{}`)", config.name),
            images: n,
            images_per_second: sim_rate,
            speed_ratio: 1.0,
            cycles_per_image: Some(cycles),
            projected_images_per_second: Some(f64::from(config.core_clock_mhz) * 1e6 / cycles.max(1.0)),
        },
        CnnBenchRow {
            backend: "reference (f32 interpreter)".into(),
            images: n,
            images_per_second: n as f64 / best_ref,
            speed_ratio: n as f64 / best_ref / sim_rate,
            cycles_per_image: None,
            projected_images_per_second: None,
        },
    ])
}

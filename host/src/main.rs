//! `opu`: the OPU command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use opu_hw::container::{Container, SectionKind, MAGIC};
use opu_hw::isa::{self, asm};
use opu_hw::regs;
use opu_host::{cache, eval, GenerateParams, SamplingParams, Session};
use opu_hw::OverlayConfig;
use indicatif::ProgressBar;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(name = "opu", version, about = "OPU: an FPGA overlay processor for neural-network inference, and its toolchain")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Overlay presets, the ISA summary and the register map.
    Info {
        /// Show one overlay config in full: a preset name or a TOML file.
        #[arg(long)]
        config: Option<String>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Print the opcode table as markdown (what docs/isa.md holds).
        #[arg(long, conflicts_with_all = ["json", "registers_markdown"])]
        isa_markdown: bool,
        /// Print the register table as markdown (what docs/registers.md holds).
        #[arg(long, conflicts_with = "json")]
        registers_markdown: bool,
    },
    /// Assemble a text program into its binary encoding (16 bytes per instruction).
    Asm {
        input: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        /// Write a program container for this overlay (preset or TOML file) instead of raw instructions.
        #[arg(long)]
        container: Option<String>,
        /// Name of the code section (the entry point) when writing a container.
        #[arg(long, default_value = "main")]
        entry: String,
    },
    /// Fetch a known model or dataset into the cache (checked by SHA-256) and print its path.
    Fetch {
        /// Name: smollm2 (GGUF), digits (a Keras digit classifier), mnist5k (5,000 MNIST digits, CSV).
        #[arg(default_value = "smollm2")]
        model: String,
        /// No progress output.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions,
    /// /v1/models, /health, /metrics) until SIGTERM; up to --max-sessions requests decode together, one
    /// weight stream per pass for all of them (docs/serving.md).
    Serve {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Sessions decoded together (KV caches on the device: the sim, rtl and pcie backends, and auto on a
        /// card). The reference path serves one at a time.
        #[arg(long, default_value_t = 8)]
        max_sessions: usize,
        /// KV cache size per session in positions: every session's cache is in device memory.
        #[arg(long, default_value_t = 2048)]
        max_context: usize,
        /// Requests that may wait for a session; more are answered 503 with Retry-After.
        #[arg(long, default_value_t = 64)]
        max_queue: usize,
        /// Seconds a request may take, waiting included; then 504 (or an error event in a stream).
        #[arg(long, default_value_t = 600.0)]
        request_timeout: f64,
        /// Largest request body in bytes (413 above).
        #[arg(long, default_value_t = 1 << 20)]
        max_body_bytes: usize,
        /// The model id clients send (default: the model file's name without `.gguf`).
        #[arg(long)]
        served_model_name: Option<String>,
    },
    /// Generate text from a prompt, streaming it, then print the figures.
    Run {
        prompt: String,
        #[command(flatten)]
        model: ModelArgs,
        /// Wrap PROMPT in the model's chat template (as the user's message).
        #[arg(long)]
        chat: bool,
        /// System prompt for --chat (default: the template's own).
        #[arg(long, requires = "chat")]
        system: Option<String>,
        #[arg(long, default_value_t = 256)]
        max_tokens: usize,
        /// 0 is greedy; a finite number, 0 or more.
        #[arg(long, default_value_t = 0.0, value_parser = opu_host::sampling::parse_temperature)]
        temperature: f32,
        /// Sample from the K most likely tokens only (0: all).
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        /// Sample from the most likely tokens that make up probability P, above 0 and at most 1 (1: all).
        #[arg(long, default_value_t = 1.0, value_parser = opu_host::sampling::parse_top_p)]
        top_p: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Extra token id that ends generation (repeatable; default: the model's end tokens).
        #[arg(long = "stop-token")]
        stop_tokens: Vec<u32>,
        /// One JSON object instead of streamed text.
        #[arg(long)]
        json: bool,
    },
    /// Classify images with a CNN (a Keras model): each image's class and top probabilities.
    Classify {
        /// PNG or PGM images (any size: preprocessed to the model's input).
        #[arg(required = true)]
        images: Vec<PathBuf>,
        /// A Keras model (.keras), or the name of a known one.
        #[arg(long, default_value = "digits")]
        model: String,
        /// Backend: sim (16-bit fixed point on the functional simulator), rtl (the same program on the
        /// overlay's RTL under Verilator: its CNN unit, bit for bit with sim), pcie (an OPU card, or an
        /// emulated one), reference (the f32 interpreter), auto (an OPU card, else the reference path).
        #[arg(long, default_value = "auto")]
        backend: String,
        /// Overlay the sim and rtl backends compile for: a preset (sim, sim-wide, u280; rtl: sim, sim-wide)
        /// or a TOML file.
        #[arg(long, default_value = "sim")]
        config: String,
        #[command(flatten)]
        cnn: CnnArgs,
        #[command(flatten)]
        card: CardArgs,
        /// Probabilities printed per image.
        #[arg(long, default_value_t = 3)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Measure a backend against another: teacher-forced top-1 agreement and logit error. With --dataset (a
    /// CNN): the fixed-point overlay against the f32 interpreter on labelled images.
    Eval {
        #[command(flatten)]
        model: ModelArgs,
        /// Backend that generates the reference tokens: reference, sim or rtl (as --backend).
        #[arg(long, default_value = "reference")]
        against: String,
        /// JSON list of {"name", "text"} prompts.
        #[arg(long, required_unless_present = "dataset")]
        prompts: Option<PathBuf>,
        /// Labelled images (mnist5k, or a CSV of pixels then the label per line) for a CNN --model: accuracy of
        /// the sim backend and of the f32 interpreter, their top-1 agreement and largest logit error, cycles
        /// per image. Each image is run by a program calibrated on images of the other --folds.
        #[arg(long, conflicts_with_all = ["prompts", "per_layer", "heldout"])]
        dataset: Option<String>,
        /// Folds of the dataset (--dataset): image i is in fold i mod N, calibrated on the others.
        #[arg(long, default_value_t = 2)]
        folds: usize,
        #[command(flatten)]
        cnn: CnnArgs,
        /// Greedy tokens generated per prompt.
        #[arg(long, default_value_t = 32)]
        tokens: usize,
        /// Also compare the sim backend layer by layer with the f32 interpreter (relative L2 of the hidden state).
        #[arg(long)]
        per_layer: bool,
        /// Also teacher-force both backends on this held-out text (sequences of 64 tokens, the first 16 a
        /// prefill): top-1 agreement, KL and the perplexity of each (it must not be the calibration text).
        #[arg(long)]
        heldout: Option<PathBuf>,
        /// Tokens of the --heldout text used.
        #[arg(long, default_value_t = 512)]
        heldout_tokens: usize,
        #[arg(long)]
        json: bool,
    },
    /// Prefill and decode speed of one or more backends, side by side (`--backend sim,reference`), and
    /// the overlay's figures per decoded token where the backend counts cycles (`--backend rtl,sim
    /// --config sim,u280`: every backend at every config).
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        /// Prompt tokens of the prefill pass.
        #[arg(long, default_value_t = 64)]
        prompt_tokens: usize,
        /// One-token decode steps after it.
        #[arg(long, default_value_t = 32)]
        decode_tokens: usize,
        /// Also decode at a long context: a prompt of N tokens, then the same decode steps (their speed,
        /// and its slowdown: the median step there over the median step after --prompt-tokens, the two
        /// interleaved).
        #[arg(long)]
        context: Option<usize>,
        /// One JSON array, a row per backend and config: tokens/s per phase, MACs/s, peak resident memory,
        /// the ratios to the first row, the overlay's figures.
        #[arg(long)]
        json: bool,
        /// A CNN --model (digits, a .keras file): images of --dataset per backend; the table shows images/s of
        /// the sim backend and of the f32 interpreter side by side, and the overlay's cycles per image.
        #[arg(long, default_value_t = 200)]
        images: usize,
        /// The images a CNN is benched on (and calibrated on, apart from them).
        #[arg(long, default_value = "mnist5k")]
        dataset: String,
    },
    /// Compile a model into a program container for an overlay: a GGUF language model, or a Keras CNN in
    /// auto-scaled 16-bit fixed point (the report lists every layer's formats).
    Compile {
        /// A GGUF or Keras (.keras) file, or the name of a known model.
        model: String,
        /// Overlay: a preset (sim, sim-wide, u280) or a TOML file.
        #[arg(long, default_value = "sim")]
        config: String,
        /// KV cache size in positions (default: the model's context length).
        #[arg(long)]
        max_context: Option<usize>,
        /// Store the residual stream after every layer (for layer-by-layer comparison).
        #[arg(long)]
        trace_layers: bool,
        /// Per-token routers (safetensors, docs/skipping.md): decode passes skip blocks.
        #[arg(long)]
        routers: Option<PathBuf>,
        /// KV caches for this many sessions, with the entries that advance them together (docs/serving.md).
        #[arg(long, default_value_t = 1)]
        max_sessions: usize,
        #[command(flatten)]
        skip: SkipArgs,
        #[command(flatten)]
        kv: KvArgs,
        #[command(flatten)]
        cnn: CnnArgs,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Quality against compute per skip rate: routers calibrated for each rate, the model teacher-forced on a
    /// held-out text on the sim backend against the dense program; a table, DIR/sweep.json and DIR/sweep.png.
    SweepSkip {
        /// A GGUF file, or the name of a known model.
        #[arg(long)]
        model: Option<String>,
        /// Skip rates, comma-separated (0: the dense program).
        #[arg(long, value_delimiter = ',', value_parser = opu_host::calibration::parse_rate, default_value = "0,0.1,0.2,0.3,0.4,0.5")]
        rates: Vec<f64>,
        /// Overlay preset or TOML file.
        #[arg(long, default_value = "sim")]
        config: String,
        /// Calibration text (default: /usr/share/common-licenses/GPL-3).
        #[arg(long)]
        calibration_text: Option<PathBuf>,
        /// Blocks that may skip: attn, ffn or attn,ffn.
        #[arg(long, value_parser = opu_host::calibration::parse_blocks, default_value = "attn,ffn")]
        blocks: [bool; 2],
        /// Held-out text (sequences of 64 tokens, the first 16 a prefill).
        #[arg(long, default_value = "/usr/share/common-licenses/Apache-2.0")]
        heldout: PathBuf,
        /// Tokens of the held-out text used.
        #[arg(long, default_value_t = 512)]
        heldout_tokens: usize,
        /// Folder for sweep.json and sweep.png.
        #[arg(short, long, default_value = "sweep-skip")]
        output: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Calibrate per-token routers for a skip rate on a text and write them (safetensors, docs/skipping.md).
    Calibrate {
        /// A GGUF file, or the name of a known model.
        #[arg(long)]
        model: Option<String>,
        /// Target share of skipped attention and FFN decisions (layers 1..).
        #[arg(long, value_parser = opu_host::calibration::parse_rate)]
        skip: f64,
        /// Calibration text (default: /usr/share/common-licenses/GPL-3).
        #[arg(long)]
        text: Option<PathBuf>,
        /// Tokens of the text used, from its start (default: 1,024 with `output-kl`, 2,048 with
        /// `relative-update`).
        #[arg(long)]
        tokens: Option<usize>,
        /// What a block's importance for a token is measured as: `output-kl`, the KL of the output when the
        /// block is skipped (one pass per block; minutes), or `relative-update`, ||update|| / ||x|| (a
        /// proxy: seconds, somewhat worse routers; docs/skipping.md measures both).
        #[arg(long, default_value = "output-kl", value_parser = opu_host::calibration::parse_importance)]
        importance: opu_compiler::calibrate::Importance,
        /// Ridge penalty of the routers' fit, per calibration token, on standardized inputs: large values
        /// shrink each router toward its block's mean importance (docs/skipping.md measures the choice).
        #[arg(long, default_value_t = opu_compiler::calibrate::CalibrateOptions::default().ridge, value_parser = parse_ridge)]
        ridge: f64,
        /// Which blocks may skip: `attn`, `ffn` or `attn,ffn` (the rate stays a share of all decisions).
        #[arg(long, default_value = "attn,ffn", value_parser = opu_host::calibration::parse_blocks)]
        blocks: [bool; 2],
        /// One threshold per block, each skipping the same share of its tokens (default: one threshold pooled
        /// over all blocks, so the least important blocks anywhere skip).
        #[arg(long)]
        per_block: bool,
        #[arg(short, long)]
        output: PathBuf,
        /// Measure the routers on this held-out text in the float model (the f32 interpreter): sequences of
        /// 64 tokens, the first 16 a dense prompt, the rest decoded teacher-forced with skipping, against
        /// dense (top-1 agreement, KL, perplexities). Must not be the calibration text.
        #[arg(long)]
        check: Option<PathBuf>,
        /// Tokens of the --check text used.
        #[arg(long, default_value_t = 512)]
        check_tokens: usize,
        /// The calibration report as JSON (per block: mean importance, fit R^2, skip rate).
        #[arg(long)]
        json: bool,
    },
    /// Describe a program container: sections, instructions by class, weight bytes, bytes per decode token.
    Inspect {
        input: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The overlay's RTL: Verilog emission and yosys resource figures.
    #[command(subcommand)]
    Rtl(RtlCommand),
    /// Run a program file (a container or raw instructions) on a simulator and print its counters; a trap
    /// is an error naming the pc, the instruction and the code.
    Exec {
        #[command(flatten)]
        prog: ProgramArgs,
        /// sim (the functional simulator) or rtl (the RTL under Verilator).
        #[arg(long, default_value = "sim")]
        backend: String,
        #[command(flatten)]
        vcd: VcdArgs,
        #[arg(long)]
        json: bool,
    },
    /// Run a program file on the RTL and on the functional simulator and compare registers, counters and all
    /// of device memory; on a difference, find the first instruction after which they differ.
    Cosim {
        #[command(flatten)]
        prog: ProgramArgs,
        #[command(flatten)]
        vcd: VcdArgs,
        #[arg(long)]
        json: bool,
    },
    /// List the OPU cards on PCIe (or emulated): bus address, overlay, config hash, state, last run's counters.
    Devices {
        /// Where PCI devices are listed (default: $OPU_SYSFS_ROOT, else /sys/bus/pci/devices).
        #[arg(long)]
        sysfs_root: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Emulate an OPU card: a fake sysfs tree and device memory under ROOT that the PCIe driver finds
    /// (OPU_SYSFS_ROOT=ROOT), served by the functional simulator or the RTL until interrupted or ROOT/<bdf>
    /// is removed.
    Emulate {
        /// The sysfs root to create the card under (created if missing).
        #[arg(long)]
        root: PathBuf,
        /// What plays the card: sim (the functional simulator) or rtl (the RTL under Verilator: sim and
        /// sim-wide).
        #[arg(long, default_value = "sim", value_parser = ["sim", "rtl"])]
        backend: String,
        /// The overlay the card runs: a preset or a TOML file.
        #[arg(long, default_value = "sim")]
        config: String,
        /// The card's PCI bus address.
        #[arg(long, default_value = opu_driver::emulate::DEFAULT_BDF)]
        bdf: String,
        /// Threads of the functional simulator (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Misbehave, for the driver's fault tests: never-complete (take the doorbell, stay BUSY).
        #[arg(long, value_parser = ["never-complete"])]
        fault: Option<String>,
    },
    /// Program a card with a card image (a .bit from `opu rtl project`'s build, or an .xclbin), then check
    /// that the card's ID and CONFIG_HASH are the image's sidecar's.
    Flash {
        bitstream: PathBuf,
        /// The card's PCI bus address (default: the first OPU card, if any).
        #[arg(long)]
        device: Option<String>,
        /// xrt (xrt-smi program, an .xclbin), openfpgaloader (JTAG, a .bit), emulated (an `opu emulate` card);
        /// default: emulated for an emulated card, else by the file (.xclbin: xrt, .bit: openfpgaloader).
        #[arg(long, value_parser = ["xrt", "openfpgaloader", "emulated"])]
        method: Option<String>,
        /// The image's sidecar (default: NAME.opu.json beside it, or the project's opu-overlay.json).
        #[arg(long)]
        sidecar: Option<PathBuf>,
        /// openFPGALoader's JTAG cable (the Alveo's on-board FTDI is an ft4232).
        #[arg(long, default_value = "ft4232")]
        cable: String,
        /// openFPGALoader: the FTDI chip's serial number, to pick one card's JTAG among several.
        #[arg(long)]
        ftdi_serial: Option<String>,
        #[arg(long)]
        sysfs_root: Option<PathBuf>,
        /// Print the exact commands and stop.
        #[arg(long)]
        dry_run: bool,
        /// Seconds to wait for the card to come back (or an emulated card to take the image).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Disassemble raw instructions or every code section of a program container.
    Disasm {
        input: PathBuf,
        /// Write the text here instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Add each instruction's index and encoded word as a comment.
        #[arg(long)]
        listing: bool,
    },
}

#[derive(Subcommand)]
enum RtlCommand {
    /// Write the Verilog of RTL units (all, or one with --unit) into a folder.
    Emit {
        /// Overlay config the units are generated for (preset or TOML): the array's lanes, the aligner's width.
        #[arg(long, default_value = "sim")]
        config: String,
        /// One unit (see `opu rtl units`); default: every unit.
        #[arg(long)]
        unit: Option<String>,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Synthesize a unit with yosys (synth_xilinx -family xcup) and print its resources, packing factor and a
    /// timing estimate. `--unit top` synthesizes the whole overlay module by module (each module mapped once,
    /// counted per instance) against the xcu280's capacity.
    Synth {
        #[arg(long, default_value = "sim")]
        config: String,
        #[arg(long)]
        unit: String,
        #[arg(long)]
        json: bool,
    },
    /// List the RTL units.
    Units,
    /// Write a card image project for a board: the overlay's Verilog, a top that joins it to the PCIe bridge
    /// and the HBM, the constraints, a Vivado build script (`vivado -mode batch -source build.tcl`), and the
    /// sidecar `opu flash` checks (docs/driver.md).
    Project {
        #[arg(long, default_value = "u280")]
        config: String,
        #[arg(long, default_value = "alveo-u280")]
        board: String,
        #[arg(short, long)]
        output: PathBuf,
    },
}

#[derive(clap::Args)]
struct ModelArgs {
    /// Backend: auto (an OPU card, else the reference path), reference, sim (the functional simulator), rtl
    /// (the overlay's RTL under Verilator, the `sim` and `sim-wide` presets; slow: thousands of cycles per
    /// second), pcie (an OPU card through the driver, or an emulated one: `opu emulate`).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// A GGUF file, or the name of a known model (fetched into the cache on first use).
    #[arg(long)]
    model: Option<String>,
    /// Compute threads of the reference path (default: all cores; `bench`: 1).
    #[arg(long)]
    threads: Option<usize>,
    /// Overlay the model is compiled for and run on (sim and rtl backends): a preset (sim, sim-wide, u280) or a TOML
    /// file (`bench`: several, comma-separated). The RTL under Verilator is built for `sim` only.
    #[arg(long, default_value = "sim")]
    config: String,
    /// Per-token routers (safetensors, docs/skipping.md): the sim and rtl backends skip attention and FFN
    /// blocks per decoded token.
    #[arg(long)]
    routers: Option<PathBuf>,
    #[command(flatten)]
    skip: SkipArgs,
    #[command(flatten)]
    kv: KvArgs,
    #[command(flatten)]
    card: CardArgs,
}

/// Which OPU card the `pcie` and `auto` backends use.
#[derive(clap::Args, Clone)]
struct CardArgs {
    /// Where PCI devices are listed (default: $OPU_SYSFS_ROOT, else /sys/bus/pci/devices); an emulated
    /// card's root (`opu emulate --root`).
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// The card's PCI bus address (e.g. 0000:0e:00.0); default: the first OPU card.
    #[arg(long)]
    device: Option<String>,
    /// Seconds a run on the card may take before the driver gives up.
    #[arg(long, default_value_t = 600.0)]
    device_timeout: f64,
}

impl CardArgs {
    fn target(&self) -> Result<opu_host::backend::PcieTarget> {
        anyhow::ensure!(self.device_timeout.is_finite() && self.device_timeout > 0.0, "--device-timeout must be a number of seconds above 0");
        Ok(opu_host::backend::PcieTarget {
            sysfs_root: opu_driver::sysfs::root(self.sysfs_root.as_deref()),
            bdf: self.device.clone(),
            timeout: std::time::Duration::from_secs_f64(self.device_timeout),
        })
    }
}

/// How a CNN's images become its input, and what its fixed-point formats are calibrated on.
#[derive(clap::Args, Clone)]
struct CnnArgs {
    /// Image preprocessing: fit (the digit classifier's own: binarize, crop, fit 24x24, centre in 28x28) or
    /// resize (grey values, nearest neighbour). Default: fit for the digit classifier, else resize.
    #[arg(long)]
    preprocess: Option<String>,
    /// Scale of the grey values (0-255) before the first layer (default 1/255, as the digit classifier's
    /// package divides by 255; none for a model whose first layer is a Rescaling).
    #[arg(long)]
    input_scale: Option<f32>,
    /// Images the fixed-point formats are calibrated on (a dataset: mnist5k, or a CSV file), for the sim
    /// backend and `compile`. (`eval --dataset` calibrates on the other folds instead.)
    #[arg(long, default_value = "mnist5k")]
    calibration: String,
    /// Calibration images, spread evenly over the calibration dataset (or over the other folds).
    #[arg(long, default_value_t = 256)]
    calibration_images: usize,
}

impl CnnArgs {
    fn preprocess(&self, model: &str) -> Result<opu_host::image_input::Preprocess> {
        self.preprocess.as_deref().map_or(Ok(opu_host::cnn::default_preprocess(model)), opu_host::image_input::Preprocess::parse)
    }
    /// The calibration images, preprocessed, as input rows of `net`.
    fn calibration(&self, net: &opu_compiler::cnn::Network, model: &str, quiet: bool) -> Result<Vec<f32>> {
        let path = cache::resolve_kind(&self.calibration, cache::FileKind::Dataset, "--calibration", quiet)?;
        anyhow::ensure!(self.calibration_images > 0, "--calibration-images must be at least 1");
        opu_host::cnn::dataset_rows(net, &path, self.calibration_images, self.preprocess(model)?)
    }
}

/// Where K/V rows live (docs/skipping.md, "KV layout").
#[derive(clap::Args, Clone)]
struct KvArgs {
    /// KV layout: `indexed` (a pool of rows shared by the layers and a row index per layer: skipped attention
    /// stores nothing), `dense` (a row per layer and position), `auto` (indexed with routers, else dense).
    #[arg(long, default_value = "auto", value_parser = ["auto", "dense", "indexed"])]
    kv_layout: String,
    /// Rows of the indexed layout's pool (default: layers x context, enough for a dense run).
    #[arg(long)]
    kv_pool_rows: Option<u64>,
}

impl KvArgs {
    fn layout(&self, routed: bool) -> Result<opu_compiler::KvLayout> {
        let indexed = match self.kv_layout.as_str() {
            "indexed" => true,
            "dense" => false,
            _ => routed,
        };
        anyhow::ensure!(indexed || self.kv_pool_rows.is_none(), "--kv-pool-rows sizes the indexed KV layout's pool: it needs --kv-layout indexed");
        Ok(if indexed { opu_compiler::KvLayout::Indexed { pool_rows: self.kv_pool_rows } } else { opu_compiler::KvLayout::Dense })
    }
}

/// Routers calibrated for a skip rate (docs/skipping.md, "Calibration").
#[derive(clap::Args, Clone, Default)]
struct SkipArgs {
    /// Skip this share of the attention and FFN decisions of decoded tokens (layers 1..), with routers
    /// calibrated on --calibration-text and cached in the model cache; 0 runs the dense program.
    #[arg(long, value_parser = opu_host::calibration::parse_rate, conflicts_with = "routers")]
    skip: Option<f64>,
    /// Calibration text for --skip (default: /usr/share/common-licenses/GPL-3).
    #[arg(long, requires = "skip")]
    calibration_text: Option<PathBuf>,
}

impl SkipArgs {
    /// The calibrated routers' file for the model at `path` (None for no or zero --skip).
    fn routers_file(&self, path: &Path, quiet: bool) -> Result<Option<PathBuf>> {
        let Some(rate) = self.skip.filter(|&r| r > 0.0) else { return Ok(None) };
        let g = opu_compiler::gguf::Gguf::open(path)?;
        let mut spec = opu_host::calibration::Spec::new(rate);
        if let Some(t) = &self.calibration_text {
            spec.text = t.clone();
        }
        let cal = opu_host::calibration::routers_for(&g, path, &spec, &mut |line| {
            if !quiet {
                eprintln!("{line}");
            }
        })?;
        if !quiet {
            eprintln!(
                "routers for --skip {rate}: {} ({}; {} routed blocks, {:.1}% of the calibration decisions skipped)",
                cal.file.display(),
                if cal.cached { "cached" } else { "calibrated" },
                cal.routers.count(),
                100.0 * cal.report["calibration_rate"].as_f64().unwrap_or(f64::NAN)
            );
        }
        Ok(Some(cal.file))
    }
}

/// A waveform of the RTL (`exec --backend rtl`, `cosim`).
#[derive(clap::Args)]
struct VcdArgs {
    /// Write a VCD waveform of every signal of the RTL's run to this file.
    #[arg(long, requires = "vcd_window")]
    vcd: Option<PathBuf>,
    /// With --vcd: cycles START:END after the doorbell.
    #[arg(long, requires = "vcd")]
    vcd_window: Option<String>,
}

/// A program file and how to run it (`exec`, `cosim`).
#[derive(clap::Args)]
struct ProgramArgs {
    /// A program container, or raw instructions (16 bytes each).
    program: PathBuf,
    /// Overlay: a preset (sim, sim-wide, u280) or a TOML file.
    #[arg(long, default_value = "sim")]
    config: String,
    /// The container's code section to run (default: `main`, or its only one).
    #[arg(long)]
    entry: Option<String>,
    /// Device address raw instructions are loaded at.
    #[arg(long, default_value = "0", value_parser = parse_u64)]
    base: u64,
    /// ARG0, ARG1, ... in order (decimal or 0x hex); the rest are 0.
    #[arg(long = "arg", value_parser = parse_u32)]
    args: Vec<u32>,
    /// WATCHDOG: cycles without progress before the overlay traps (0 disables; default: the device's).
    #[arg(long)]
    watchdog: Option<u32>,
    /// Seconds of wall time after which the host gives up on the device.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

impl ProgramArgs {
    fn open(&self) -> Result<(OverlayConfig, opu_host::exec::ProgramFile, opu_host::exec::RunOptions)> {
        let config = OverlayConfig::from_name_or_path(&self.config)?;
        let prog = opu_host::exec::ProgramFile::read(&self.program, self.entry.as_deref(), self.base)?;
        prog.check_config(&config)?;
        let opts = opu_host::exec::RunOptions {
            args: self.args.clone(),
            watchdog: self.watchdog,
            timeout: std::time::Duration::from_secs(self.timeout),
        };
        Ok((config, prog, opts))
    }
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    r.map_err(|e| format!("`{s}`: {e} (expected a decimal or 0x-hex number)"))
}

/// `--ridge`: a finite number > 0.
fn parse_ridge(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!("`{s}`: expected a ridge penalty, a finite number > 0")),
    }
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_u64(s)?;
    u32::try_from(v).map_err(|_| format!("`{s}` does not fit 32 bits"))
}

/// `START:END` of `--vcd-window`.
fn parse_window(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s.split_once(':').with_context(|| format!("--vcd-window `{s}`: expected START:END (cycles after the doorbell)"))?;
    let (a, b) = (parse_u64(a).map_err(anyhow::Error::msg)?, parse_u64(b).map_err(anyhow::Error::msg)?);
    anyhow::ensure!(a < b, "--vcd-window `{s}`: START must be below END");
    Ok((a, b))
}

/// The RTL under Verilator for `config`, with the VCD window if asked.
fn open_rtl(config: &OverlayConfig, vcd: Option<&VcdArgs>) -> Result<opu_rtlsim::RtlSim> {
    let mut dev = opu_rtlsim::RtlSim::new(config).map_err(|e| anyhow::anyhow!("backend `rtl`: {e}"))?;
    if let Some(VcdArgs { vcd: Some(path), vcd_window: Some(w) }) = vcd {
        let (a, b) = parse_window(w)?;
        dev.set_vcd_window(path, a, b);
    }
    Ok(dev)
}

impl ModelArgs {
    /// Sets the thread count (before any compute starts) and opens the session.
    fn open(&self, quiet: bool, default_threads: Option<usize>) -> Result<Session> {
        self.open_with(quiet, default_threads, opu_compiler::CompileOptions::default())
    }

    /// [`ModelArgs::open`] compiling with `base` (its routers and KV layout from the flags).
    fn open_with(&self, quiet: bool, default_threads: Option<usize>, base: opu_compiler::CompileOptions) -> Result<Session> {
        if let Some(n) = self.threads.or(default_threads) {
            anyhow::ensure!(n > 0, "--threads must be at least 1");
            // candle and its rayon pool read this when they first start work.
            std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        }
        let config = OverlayConfig::from_name_or_path(&self.config)?;
        opu_host::backend::set_pcie_target(self.card.target()?);
        let path = cache::resolve_model(self.model.as_deref(), quiet)?;
        let spinner = if quiet { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
        spinner.set_message(format!("loading {} on the {} backend", path.display(), self.backend));
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        let calibrated = if self.skip.skip.is_some_and(|r| r > 0.0) && matches!(self.backend.as_str(), "reference" | "auto") {
            // refused below, before minutes of calibration
            None
        } else {
            self.skip.routers_file(&path, quiet)?
        };
        let routers = calibrated.as_deref().or(self.routers.as_deref());
        let session = if self.skip.skip.is_some_and(|r| r > 0.0) && calibrated.is_none() {
            Err(anyhow::anyhow!("backend `{}`: the reference path runs the dense float model and does not skip blocks; --skip runs on the sim and rtl backends", self.backend))
        } else {
            self.kv
                .layout(routers.is_some())
                .and_then(|kv_layout| Session::open_with_options(&path, &self.backend, &config, routers, opu_compiler::CompileOptions { kv_layout, ..base }))
        };
        spinner.finish_and_clear();
        let session = session?;
        if let (Some(note), false) = (&session.backend_note, quiet) {
            eprintln!("{note}");
        }
        Ok(session)
    }
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {}", opu_host::error_report(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Info { config, json, isa_markdown, registers_markdown } => {
            if isa_markdown {
                print!("{}", isa::markdown_table());
            } else if registers_markdown {
                print!("{}", regs::markdown_table());
            } else {
                info(config.as_deref(), json)?;
            }
        }
        Command::Asm { input, output, container, entry } => {
            let text = std::fs::read_to_string(&input).with_context(|| format!("reading {}", input.display()))?;
            let program = isa::assemble(&text).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
            let bytes = match container {
                None => isa::encode_program(&program)?,
                Some(cfg) => {
                    let cfg = OverlayConfig::from_name_or_path(&cfg)?;
                    let mut c = Container::new(&cfg);
                    c.add_code(&entry, 0, &program)?;
                    c.check_config(&cfg)?;
                    c.to_bytes()
                }
            };
            std::fs::write(&output, bytes).with_context(|| format!("writing {}", output.display()))?;
            eprintln!("{}: {} instructions -> {}", input.display(), program.len(), output.display());
        }
        Command::Fetch { model, quiet } => {
            let path = cache::fetch(cache::known(&model)?, quiet)?;
            println!("{}", path.display());
        }
        Command::Serve { model, host, port, max_sessions, max_context, max_queue, request_timeout, max_body_bytes, served_model_name } => {
            anyhow::ensure!(max_sessions >= 1, "--max-sessions must be at least 1");
            anyhow::ensure!(max_queue >= 1, "--max-queue must be at least 1");
            anyhow::ensure!(request_timeout.is_finite() && request_timeout > 0.0, "--request-timeout must be a number of seconds above 0");
            let path = cache::resolve_model(model.model.as_deref(), false)?;
            let g = opu_compiler::gguf::Gguf::open(&path)?;
            let tokenizer = opu_host::tokenizer::Tokenizer::from_gguf(&g)?;
            drop(g);
            let model_id = served_model_name.unwrap_or_else(|| path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned()));
            // (the overlay backends compile with the sessions' KV caches; `auto` on a card does too, and on the
            // reference path the compile options are not used)
            let batched = model.backend != "reference";
            let opts = opu_host::serve::ServeOptions {
                host,
                port,
                model_id: model_id.clone(),
                max_queue,
                request_timeout: std::time::Duration::from_secs_f64(request_timeout),
                body_limit: max_body_bytes,
                retry_after: 1,
            };
            let backend = model.backend.clone();
            let open: opu_host::serve::OpenSession = Box::new(move || {
                let base = opu_compiler::CompileOptions {
                    max_context: Some(max_context),
                    max_sessions: if batched { max_sessions } else { 1 },
                    ..Default::default()
                };
                model.open_with(false, None, base)
            });
            let on_ready = Box::new(move |addr: std::net::SocketAddr, context: usize, slots: usize| {
                eprintln!("opu serve: `{model_id}` on the {backend} backend, {slots} session slot{}, context {context}: listening on http://{addr}", if slots == 1 { "" } else { "s" });
            });
            opu_host::serve::serve(opts, tokenizer, open, on_ready)?;
        }
        Command::Run { prompt, model, chat, system, max_tokens, temperature, top_k, top_p, seed, stop_tokens, json } => {
            let mut session = model.open(json, None)?;
            let text = if chat { session.tokenizer.chat_prompt(&prompt, system.as_deref())? } else { prompt };
            let prompt_ids = session.tokenizer.encode(&text)?;
            let params = GenerateParams { max_tokens, sampling: SamplingParams { temperature, top_k, top_p, seed }, stop: stop_tokens };
            let mut stdout = std::io::stdout();
            let gen = session.generate(&prompt_ids, &params, |piece| {
                if !json {
                    let _ = write!(stdout, "{piece}");
                    let _ = stdout.flush();
                }
            })?;
            if json {
                let out = serde_json::json!({
                    "backend": session.backend_name(),
                    // why `auto` chose it
                    "backend_note": session.backend_note,
                    "prompt": text,
                    "prompt_ids": gen.prompt_ids,
                    "generated_ids": gen.generated_ids,
                    "text": gen.text,
                    "stop": gen.stop,
                    "prompt_tokens": gen.prompt_ids.len(),
                    "generated_tokens": gen.generated_ids.len(),
                    "prefill_seconds": gen.prefill_seconds,
                    "decode_seconds": gen.decode_seconds,
                    "prefill_tokens_per_second": gen.prefill_tokens_per_second(),
                    "tokens_per_second": gen.tokens_per_second(),
                    "device": session.backend_stats(),
                });
                let mut out = out;
                // the overlay's figures next to the text: cycles_per_token, unit_utilization,
                // bytes_per_token, bandwidth_efficiency, projected_tokens_per_second, ...
                if let Some(serde_json::Value::Object(f)) = session.backend_stats().map(|d| d["figures"].clone()) {
                    for (k, v) in f {
                        out[k] = v;
                    }
                }
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!(
                    "\n-- prompt {} tokens, generated {} ({:?}); prefill {:.1} tokens/s, decode {:.1} tokens/s; backend {}",
                    gen.prompt_ids.len(),
                    gen.generated_ids.len(),
                    gen.stop,
                    gen.prefill_tokens_per_second(),
                    gen.tokens_per_second(),
                    session.backend_name()
                );
                if let Some(d) = session.backend_stats() {
                    let pt = &d["per_token"];
                    println!(
                        "-- device, per decoded token: {:.0} instructions, {:.1} M MACs, {:.1} MB moved; {} passes; compiled in {:.2} s",
                        pt["instructions"].as_f64().unwrap_or(0.0),
                        pt["macs"].as_f64().unwrap_or(0.0) / 1e6,
                        pt["bytes_moved"].as_f64().unwrap_or(0.0) / 1e6,
                        d["passes"],
                        d["compile_seconds"].as_f64().unwrap_or(0.0)
                    );
                    let s = &d["skip"];
                    if let Some(rate) = s["realised_skip_rate"].as_f64() {
                        let pct = |k: &str| s[k].as_f64().map_or("-".to_string(), |r| format!("{:.1}%", 100.0 * r));
                        println!(
                            "-- skipping: {:.1}% of {} block decisions (attention {}, FFN {}); history hit rate {}; KV storage saved {} ({} layout); {:.2} MB moved per decoded token saved",
                            100.0 * rate,
                            s["decisions"],
                            pct("attention_skip_rate"),
                            pct("ffn_skip_rate"),
                            s["history_hit_rate"].as_f64().map_or("-".to_string(), |r| format!("{r:.3}")),
                            pct("kv_saved_fraction"),
                            s["kv_layout"].as_str().unwrap_or("dense"),
                            s["bytes_per_token_saved"].as_f64().unwrap_or(0.0) / 1e6
                        );
                    }
                    // the RTL counts cycles; the functional simulator estimates them
                    let f = &d["figures"];
                    if let Some(c) = f["cycles_per_token"].as_f64() {
                        let est = f["cycles_are_estimates"].as_bool().unwrap_or(true);
                        let util = f["unit_utilization"]
                            .as_object()
                            .map(|u| u.iter().map(|(k, v)| format!("{k} {:.2}", v.as_f64().unwrap_or(0.0))).collect::<Vec<_>>().join(", "))
                            .unwrap_or_default();
                        println!(
                            "-- {} per decoded token: {c:.0}; {:.1} bytes/cycle = bandwidth efficiency {:.3} of {:.0}; busy: {util}; projected {:.1} tokens/s at {} MHz",
                            if est { "estimated cycles" } else { "RTL cycles" },
                            f["bytes_per_cycle"].as_f64().unwrap_or(0.0),
                            f["bandwidth_efficiency"].as_f64().unwrap_or(0.0),
                            f["peak_bytes_per_cycle"].as_f64().unwrap_or(0.0),
                            f["projected_tokens_per_second"].as_f64().unwrap_or(0.0),
                            f["core_clock_mhz"]
                        );
                    }
                    // the RTL's memory: its bytes per channel (every line and beat, so more than the counters')
                    if let Some(per) = d["bytes_per_channel"].as_array() {
                        let b: Vec<u64> = per.iter().filter_map(|x| x.as_u64()).collect();
                        if let (Some(lo), Some(hi)) = (b.iter().min(), b.iter().max()) {
                            println!(
                                "-- memory: {} bytes on {} channels (lines and beats), {lo} to {hi} per channel",
                                b.iter().sum::<u64>(),
                                b.len()
                            );
                        }
                    }
                }
            }
        }
        Command::Classify { images, model, backend, config, cnn, card, top, json } => {
            let config = OverlayConfig::from_name_or_path(&config)?;
            let target = card.target()?;
            // `auto` compiles for a card when one is there
            let card_present = backend == "auto" && opu_driver::sysfs::find(&target.sysfs_root, target.bdf.as_deref()).is_ok();
            opu_host::backend::set_pcie_target(target);
            let path = cache::resolve_kind(&model, cache::FileKind::Keras, "--model", json)?;
            let net = opu_host::cnn::open_network(&path, cnn.input_scale)?;
            let rows = opu_host::cnn::image_rows(&net, &images, cnn.preprocess(&model)?)?;
            let calibration = if matches!(backend.as_str(), "sim" | "rtl" | "pcie") || card_present { cnn.calibration(&net, &model, json)? } else { Vec::new() };
            let (mut classifier, note) = opu_host::cnn::Classifier::open(net, &backend, &config, &calibration)?;
            if !json {
                eprintln!("{}: {note}", path.display());
            }
            let mut out = Vec::new();
            for (file, row) in images.iter().zip(&rows) {
                let s = classifier.classify(row)?;
                let mut order: Vec<usize> = (0..s.probabilities.len()).collect();
                order.sort_by(|&a, &b| s.probabilities[b].total_cmp(&s.probabilities[a]));
                let best: Vec<(usize, f32)> = order.iter().take(top.max(1)).map(|&i| (i, s.probabilities[i])).collect();
                let cycles = match &classifier {
                    opu_host::cnn::Classifier::Program(p) => Some(p.last.cycles),
                    _ => None,
                };
                if json {
                    out.push(serde_json::json!({
                        "image": file.display().to_string(),
                        "class": s.class,
                        "top": best.iter().map(|(c, p)| serde_json::json!({"class": c, "probability": p})).collect::<Vec<_>>(),
                        "logits": s.logits,
                        "cycles": cycles,
                    }));
                } else {
                    let tops = best.iter().map(|(c, p)| format!("{c} {:.2}%", p * 100.0)).collect::<Vec<_>>().join(", ");
                    println!("{}: {}  ({tops}){}", file.display(), s.class, cycles.map_or(String::new(), |c| format!("  {c} cycles")));
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "model": path.display().to_string(), "backend": note, "images": out }))?);
            }
        }
        Command::Eval { model: margs, dataset: Some(dataset), folds, cnn, json, .. } => {
            let name = margs.model.clone().unwrap_or_default();
            anyhow::ensure!(cache::is_keras(&name), "--dataset measures a CNN: pass --model digits or a .keras file");
            anyhow::ensure!(
                matches!(margs.backend.as_str(), "sim" | "auto"),
                "backend `{}`: eval --dataset runs the fixed-point program on the sim backend against the f32 interpreter",
                margs.backend
            );
            let config = OverlayConfig::from_name_or_path(&margs.config)?;
            let path = cache::resolve_kind(&name, cache::FileKind::Keras, "--model", json)?;
            let data = cache::resolve_kind(&dataset, cache::FileKind::Dataset, "--dataset", json)?;
            let net = opu_host::cnn::open_network(&path, cnn.input_scale)?;
            let [h, w, _] = net.input_shape();
            let ds = opu_compiler::dataset::read_csv(&data, h * w)?;
            let t = std::time::Instant::now();
            let e = opu_host::cnn::eval_dataset(&net, &ds, cnn.preprocess(&name)?, &config, cnn.calibration_images, folds, !json)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&e)?);
            } else {
                println!("{} on {} ({} images, preprocessing `{}`, {} folds, {} calibration images each):", path.display(), data.display(), e.images, e.preprocess, e.folds, e.calibration_images);
                println!("  accuracy            {:.4} (sim: 16-bit fixed point on the functional simulator)", e.accuracy);
                println!("  reference_accuracy  {:.4} (the f32 interpreter)", e.reference_accuracy);
                println!("  top1_agreement      {:.4}", e.top1_agreement);
                println!("  max logit error     {:.3e} (probability {:.3e})", e.max_logit_error, e.max_probability_error);
                println!("  cycles per image    {:.0} ({:.0} images/s projected at {} MHz), {:.0} bytes moved per image", e.cycles_per_image, e.projected_images_per_second, e.core_clock_mhz, e.bytes_per_image);
                println!("  ({:.1} s)", t.elapsed().as_secs_f64());
            }
        }
        Command::Eval { model, against, prompts, tokens, per_layer, heldout, heldout_tokens, json, .. } => {
            let prompts = eval::read_prompts(&prompts.context("--prompts is required")?)?;
            if let (Some(h), Some(_)) = (&heldout, model.skip.skip) {
                let calibration = model.skip.calibration_text.clone().unwrap_or_else(|| opu_host::calibration::Spec::new(0.0).text);
                opu_host::calibration::ensure_heldout("--heldout", h, &calibration)?;
            }
            anyhow::ensure!(!per_layer || model.backend == "sim", "--per-layer compares the sim backend: use --backend sim");
            let mut backend = model.open(json, None)?;
            let layers = if per_layer {
                let path = cache::resolve_model(model.model.as_deref(), true)?;
                let g = opu_compiler::gguf::Gguf::open(&path)?;
                let sequences = prompts.iter().map(|p| backend.tokenizer.encode(&p.text)).collect::<Result<Vec<_>, _>>()?;
                Some(eval::per_layer(&g, &OverlayConfig::from_name_or_path(&model.config)?, &sequences, opu_host::runtime::compute_threads())?)
            } else {
                None
            };
            // the backend under test with its routers, against the dense program (or the float reference)
            let mut reference = ModelArgs { backend: against, routers: None, skip: SkipArgs::default(), ..model }.open(true, None)?;
            let mut report = eval::evaluate(&mut backend, &mut reference, &prompts, tokens)?;
            if let Some(h) = &heldout {
                let text = std::fs::read_to_string(h).with_context(|| format!("--heldout {}: cannot read", h.display()))?;
                let ids = backend.tokenizer.encode(&text)?;
                let ids = &ids[..ids.len().min(heldout_tokens)];
                report.heldout = Some(eval::heldout(&mut backend, &mut reference, &h.display().to_string(), ids, (64, 16), &mut |_| {})?);
            }
            if json {
                let mut v = serde_json::to_value(&report)?;
                if let Some(l) = &layers {
                    v["per_layer"] = serde_json::to_value(l)?;
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                if let Some(l) = &layers {
                    println!("layer-by-layer, sim against the f32 interpreter (relative L2 of the hidden state, prompt tokens):");
                    for e in l {
                        println!("  layer {:>3}  {:.3e}", e.layer, e.relative_l2);
                    }
                }
                println!("{} against {}, {} greedy tokens per prompt, teacher-forced:", report.backend, report.against, tokens);
                println!(
                    "  {:<20} {:>9} {:>12} {:>10} {:>12} {:>12} {:>13}",
                    "prompt", "positions", "top-1 agree", "mean KL", "mean cosine", "centered cos", "max |dlogit|"
                );
                let row = |name: &str, a: &eval::Agreement| {
                    println!(
                        "  {:<20} {:>9} {:>12.4} {:>10.3e} {:>12.6} {:>12.6} {:>13.4}",
                        name, a.positions, a.top1_agreement, a.mean_kl, a.mean_logit_cosine, a.mean_centered_cosine, a.max_abs_logit_diff
                    )
                };
                for p in &report.prompts {
                    row(&p.name, &p.agreement);
                }
                row("overall", &report.overall);
                if let Some(s) = &report.skip {
                    println!(
                        "  skipping: {:.1}% of {} decisions; KV ({} layout) {:.1}% saved ({} of {} bytes)",
                        100.0 * s.realised_skip_rate,
                        s.decisions,
                        s.kv_layout,
                        100.0 * s.kv_saved_fraction,
                        s.kv_saved_bytes,
                        s.kv_dense_bytes
                    );
                }
                if let Some(h) = &report.heldout {
                    println!(
                        "  held-out {} ({} positions): top-1 agreement {:.4}, mean KL {:.4}, perplexity {:.3} against -> {:.3} backend ({:.3}x)",
                        h.text, h.positions, h.top1_agreement, h.mean_kl, h.against_perplexity, h.backend_perplexity, h.perplexity_ratio
                    );
                }
            }
            if let Some(h) = &report.heldout {
                anyhow::ensure!(h.nan_positions == 0, "{} of {} held-out positions have NaN logits", h.nan_positions, h.positions);
            }
            anyhow::ensure!(
                report.overall.nan_positions == 0,
                "{} of {} positions have NaN logits (backend `{}` or `{}`)",
                report.overall.nan_positions,
                report.overall.positions,
                report.backend,
                report.against
            );
        }
        Command::Bench { model, json, images, dataset, .. } if model.model.as_deref().is_some_and(cache::is_keras) => {
            let name = model.model.clone().unwrap_or_default();
            let config = OverlayConfig::from_name_or_path(&model.config)?;
            let path = cache::resolve_kind(&name, cache::FileKind::Keras, "--model", json)?;
            let data = cache::resolve_kind(&dataset, cache::FileKind::Dataset, "--dataset", json)?;
            let net = opu_host::cnn::open_network(&path, None)?;
            let pre = opu_host::cnn::default_preprocess(&name);
            // the images benched are every other one of a spread of 2N; calibration takes the ones between
            let both = opu_host::cnn::dataset_rows(&net, &data, 2 * images.max(1), pre)?;
            let per = net.graph.inputs[0].shape.len();
            let (mut bench, mut calibration) = (Vec::new(), Vec::new());
            for (i, row) in both.chunks_exact(per).enumerate() {
                if i % 2 == 0 { &mut bench } else { &mut calibration }.extend_from_slice(row);
            }
            let rows = opu_host::cnn::bench(&net, &bench, &calibration, &config, 3)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!("{:<44} {:>7} {:>10} {:>7} {:>14} {:>16}", "backend", "images", "images/s", "ratio", "cycles/image", "projected img/s");
                for r in &rows {
                    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
                    println!("{:<44} {:>7} {:>10.1} {:>7.2} {:>14} {:>16}", r.backend, r.images, r.images_per_second, r.speed_ratio, opt(r.cycles_per_image), opt(r.projected_images_per_second));
                }
                println!("(one image per call, one thread, best of 3 alternating rounds; cycles: the functional simulator's estimate at {} MHz)", config.core_clock_mhz);
            }
        }
        Command::Bench { model, prompt_tokens, decode_tokens, context, json, .. } => {
            anyhow::ensure!(prompt_tokens > 0, "--prompt-tokens must be at least 1");
            anyhow::ensure!(context.is_none_or(|c| c > 0), "--context must be at least 1");
            // Several backends (and overlay configs), side by side in one run (e.g. `--backend sim,reference`).
            let mut rows = Vec::new();
            let runs = model.backend.split(',').flat_map(|b| {
                // the reference path has no overlay: once
                let configs: Vec<&str> = if b == "reference" { vec!["sim"] } else { model.config.split(',').collect() };
                configs.into_iter().map(move |c| (b, c))
            });
            for (backend, config) in runs {
                // the peak resident memory of this backend's session alone (the previous one is dropped)
                opu_host::bench::reset_peak_rss();
                let args = ModelArgs {
                    backend: backend.to_string(),
                    model: model.model.clone(),
                    threads: model.threads,
                    config: config.to_string(),
                    // the reference path runs the dense float model
                    routers: if backend == "reference" { None } else { model.routers.clone() },
                    skip: if backend == "reference" { SkipArgs::default() } else { model.skip.clone() },
                    kv: model.kv.clone(),
                    card: model.card.clone(),
                };
                let mut session = args.open(json, Some(1))?;
                // A fixed, ordinary token sequence (not sampled): the text's tokens repeated as needed.
                let seed_ids = session.tokenizer.encode("The quick brown fox jumps over the lazy dog. In 1984, a little robot learned to count: 1, 2, 3.")?;
                let prompt = |n: usize| -> Vec<u32> { seed_ids.iter().cycle().take(n).copied().collect() };
                let prompt_ids = prompt(prompt_tokens);
                let params = GenerateParams { max_tokens: decode_tokens + 1, stop: vec![u32::MAX], ..GenerateParams::default() };
                if backend != "rtl" {
                    // warm-up (the RTL's speed is its simulator's, which needs none)
                    session.generate(&prompt_ids[..prompt_tokens.min(8)], &GenerateParams { max_tokens: 2, ..params.clone() }, |_| {})?;
                }
                let gen = session.generate(&prompt_ids, &params, |_| {})?;
                let stats = session.backend_stats();
                let peak_rss = opu_host::bench::peak_rss_bytes();
                // The long context: a prompt of n tokens; then its decode steps interleaved, step by step, with
                // those of a second session of the backend after the short prompt, so that both see the
                // machine's load alike (their slowdown is the ratio of the median steps).
                let long = match context {
                    Some(n) => {
                        let long = session.generate(&prompt(n), &GenerateParams { max_tokens: 1, ..params.clone() }, |_| {})?;
                        let mut short = args.open(true, Some(1))?;
                        // (the long session is at position n: its one sampled token needed no pass)
                        short.prefill(&prompt_ids)?;
                        let (mut at_long, mut at_short) = (Vec::new(), Vec::new());
                        for i in 0..decode_tokens {
                            let id = seed_ids[i % seed_ids.len()];
                            at_long.push(session.timed_step(id)?);
                            at_short.push(short.timed_step(id)?);
                        }
                        Some((long.prefill_tokens_per_second(), at_long, at_short))
                    }
                    None => None,
                };
                let compile = stats.as_ref().and_then(|s| s["compile_seconds"].as_f64());
                // MACs per decoded token where the backend counts them (the overlay's counters)
                let macs = stats.as_ref().and_then(|s| s["per_token"]["macs"].as_f64());
                // the overlay's figures per decoded token: the RTL's counters, or the functional simulator's
                // model of them (`cycles_are_estimates`)
                let figures = stats.as_ref().map(|s| {
                    let f = &s["figures"];
                    serde_json::json!({
                        "config": config,
                        "cycles_per_token": f["cycles_per_token"],
                        "bandwidth_efficiency": f["bandwidth_efficiency"],
                        "unit_utilization": f["unit_utilization"],
                        "projected_tokens_per_second": f["projected_tokens_per_second"],
                        "cycles_are_estimates": f["cycles_are_estimates"],
                        // the functional simulator's split by instruction (null on the RTL, which counts none)
                        "cycles_by_instruction": f["cycles_by_instruction"],
                    })
                });
                let threads = opu_host::runtime::compute_threads();
                let mut row = serde_json::json!({
                    "overlay": figures,
                    "backend": session.backend_name(),
                    "config": if backend == "reference" { serde_json::Value::Null } else { config.into() },
                    "threads": threads,
                    "prompt_tokens": prompt_tokens,
                    "decode_tokens": gen.decode_steps,
                    "prefill_tokens_per_second": gen.prefill_tokens_per_second(),
                    "decode_tokens_per_second": gen.tokens_per_second(),
                    "decode_macs_per_token": macs,
                    "decode_macs_per_second": macs.map(|m| m * gen.tokens_per_second()),
                    "peak_rss_bytes": peak_rss,
                    "compile_seconds": compile,
                });
                if let (Some(n), Some((prefill, at_long, at_short))) = (context, &long) {
                    let median = |s: &[f64]| {
                        let mut s = s.to_vec();
                        s.sort_by(f64::total_cmp);
                        s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
                    };
                    row["context"] = n.into();
                    row["context_prefill_tokens_per_second"] = (*prefill).into();
                    row["context_decode_tokens_per_second"] = (at_long.len() as f64 / at_long.iter().sum::<f64>().max(1e-9)).into();
                    // how much slower a decode step is at position `n` than after the short prompt: the median
                    // steps of the two, interleaved
                    row["context_slowdown"] = (median(at_long) / median(at_short).max(1e-12)).into();
                }
                rows.push(row);
            }
            opu_host::bench::add_ratios(&mut rows);
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                let ratio = |r: &serde_json::Value, k: &str| r[k].as_f64().map_or("-".to_string(), |q| format!("{q:.2}x"));
                println!(
                    "{:<46} {:>7} {:>13} {:>7} {:>12} {:>7} {:>9} {:>9} {:>9}",
                    "backend", "threads", "prefill tok/s", "ratio", "decode tok/s", "ratio", "G MAC/s", "peak MiB", "compile s"
                );
                for r in &rows {
                    println!(
                        "{:<46} {:>7} {:>13.1} {:>7} {:>12.1} {:>7} {:>9} {:>9} {:>9}",
                        r["backend"].as_str().unwrap_or(""),
                        r["threads"],
                        r["prefill_tokens_per_second"].as_f64().unwrap_or(0.0),
                        ratio(r, "prefill_ratio"),
                        r["decode_tokens_per_second"].as_f64().unwrap_or(0.0),
                        ratio(r, "decode_ratio"),
                        r["decode_macs_per_second"].as_f64().map_or("-".to_string(), |m| format!("{:.2}", m / 1e9)),
                        r["peak_rss_bytes"].as_f64().map_or("-".to_string(), |b| format!("{:.0}", b / (1u64 << 20) as f64)),
                        r["compile_seconds"].as_f64().map_or("-".to_string(), |c| format!("{c:.2}")),
                    );
                }
                println!("({prompt_tokens} prompt tokens, then {decode_tokens} one-token steps, one run; ratios to the first row)");
                if let Some(n) = context {
                    println!();
                    println!("{:<46} {:>13} {:>12} {:>7} {:>9}", format!("at context {n}"), "prefill tok/s", "decode tok/s", "ratio", "slowdown");
                    for r in &rows {
                        println!(
                            "{:<46} {:>13.1} {:>12.1} {:>7} {:>8.2}x",
                            r["backend"].as_str().unwrap_or(""),
                            r["context_prefill_tokens_per_second"].as_f64().unwrap_or(0.0),
                            r["context_decode_tokens_per_second"].as_f64().unwrap_or(0.0),
                            ratio(r, "context_decode_ratio"),
                            r["context_slowdown"].as_f64().unwrap_or(0.0),
                        );
                    }
                    println!("(a prompt of {n} tokens, then {decode_tokens} one-token steps; slowdown: the median decode step here over the median one after {prompt_tokens} prompt tokens, in a second session, the steps of the two interleaved)");
                }
                if rows.iter().any(|r| !r["overlay"].is_null()) {
                    println!();
                    println!(
                        "{:<46} {:>7} {:>12} {:>10} {:>13}  busy dma/matrix/vector/attention",
                        "overlay, per decoded token", "config", "cycles", "bandwidth", "proj. tok/s"
                    );
                    for r in rows.iter().filter(|r| !r["overlay"].is_null()) {
                        let o = &r["overlay"];
                        let u = &o["unit_utilization"];
                        let share = |k: &str| u[k].as_f64().unwrap_or(0.0);
                        println!(
                            "{:<46} {:>7} {:>12.0} {:>10.3} {:>13.1}  {:.3}/{:.3}/{:.3}/{:.3}{}",
                            r["backend"].as_str().unwrap_or(""),
                            o["config"].as_str().unwrap_or(""),
                            o["cycles_per_token"].as_f64().unwrap_or(0.0),
                            o["bandwidth_efficiency"].as_f64().unwrap_or(0.0),
                            o["projected_tokens_per_second"].as_f64().unwrap_or(0.0),
                            share("dma"),
                            share("matrix"),
                            share("vector"),
                            share("attention"),
                            if o["cycles_are_estimates"].as_bool() == Some(true) { "  (cycle model)" } else { "  (RTL counters)" },
                        );
                    }
                    println!("(bandwidth: bytes moved per cycle over the config's peak; projected at the config's core clock)");
                }
            }
        }
        Command::Compile { model, config, cnn, output, .. } if cache::is_keras(&model) => {
            let config = OverlayConfig::from_name_or_path(&config)?;
            let path = cache::resolve_kind(&model, cache::FileKind::Keras, "the model", false)?;
            let t = std::time::Instant::now();
            let net = opu_host::cnn::open_network(&path, cnn.input_scale)?;
            let calibration = cnn.calibration(&net, &model, false)?;
            let compiled = opu_host::cnn::compile(&net, &calibration, &config)?;
            compiled.container.write(&output)?;
            let m = &compiled.meta;
            eprintln!(
                "{} -> {} for overlay `{}` in {:.2} s: {} KiB of weights, {} MACs per image, entry `{}` ({} instructions)",
                path.display(),
                output.display(),
                config.name,
                t.elapsed().as_secs_f64(),
                m.weight_bytes >> 10,
                m.macs_per_image,
                m.entries[0].name,
                m.entries[0].instructions
            );
            eprint!("{}", opu_host::cnn::scaling_report(m));
        }
        Command::Compile { model, config, max_context, trace_layers, routers, max_sessions, skip, kv, output, .. } => {
            let config = OverlayConfig::from_name_or_path(&config)?;
            let path = cache::resolve_model(Some(&model), false)?;
            let routers = skip.routers_file(&path, false)?.or(routers);
            let t = std::time::Instant::now();
            let g = opu_compiler::gguf::Gguf::open(&path)?;
            let routers = match routers {
                Some(file) => {
                    let cfg = opu_compiler::llama::LlamaConfig::from_gguf(&g)?;
                    Some(opu_compiler::routers::Routers::load(&file, cfg.n_layer, cfg.n_embd)?)
                }
                None => None,
            };
            let kv_layout = kv.layout(routers.is_some())?;
            let compiled = opu_compiler::compile(&g, &config, &opu_compiler::CompileOptions { max_context, trace_layers, routers, kv_layout, max_sessions })?;
            compiled.container.write(&output)?;
            let m = &compiled.meta;
            eprintln!(
                "{} -> {} for overlay `{}` in {:.2} s: {} weight MiB, {} entries ({}), {} MiB file",
                path.display(),
                output.display(),
                config.name,
                t.elapsed().as_secs_f64(),
                m.weight_bytes >> 20,
                m.entries.len(),
                m.entries.iter().map(|e| format!("{}: {} instructions, {} tokens/pass", e.name, e.instructions, e.ntok)).collect::<Vec<_>>().join("; "),
                std::fs::metadata(&output)?.len() >> 20
            );
            let inexact: Vec<_> = m.tensors.iter().filter(|t| !t.exact).collect();
            for t in &inexact {
                eprintln!("  requantized {} ({} -> {}): max |error| {:.3e}, relative L2 {:.3e}", t.name, t.gguf_type, t.overlay, t.max_abs_error, t.relative_l2_error);
            }
            eprintln!("  {} tensors mapped exactly; FP16 embedding table max relative rounding {:.2e}", m.tensors.len() - inexact.len(), m.embedding_f16_max_rel_error);
        }
        Command::SweepSkip { model, rates, config, calibration_text, blocks, heldout, heldout_tokens, output, json } => {
            let opts = opu_host::sweep::SweepOptions {
                model: cache::resolve_model(model.as_deref(), json)?,
                config: OverlayConfig::from_name_or_path(&config)?,
                rates,
                calibration_text,
                blocks,
                heldout_text: heldout,
                heldout_tokens,
            };
            let rows = opu_host::sweep::sweep(&opts, &mut |line| eprintln!("{line}"))?;
            std::fs::create_dir_all(&output).with_context(|| format!("{}: cannot create", output.display()))?;
            let blocks: Vec<&str> = ["attn", "ffn"].into_iter().zip(opts.blocks).filter(|&(_, on)| on).map(|(b, _)| b).collect();
            let report = serde_json::json!({
                "model": opts.model.display().to_string(),
                "config": opts.config.name,
                "heldout": opts.heldout_text.display().to_string(),
                "calibration_text": opts.calibration_text.clone().unwrap_or_else(|| opu_host::calibration::Spec::new(0.0).text).display().to_string(),
                "blocks": blocks,
                "rows": rows,
            });
            let (json_path, png_path) = (output.join("sweep.json"), output.join("sweep.png"));
            std::fs::write(&json_path, serde_json::to_string_pretty(&report)?).with_context(|| format!("writing {}", json_path.display()))?;
            opu_host::sweep::plot(&rows, &png_path)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", opu_host::sweep::table(&rows));
                println!("(teacher-forced on {} against the dense program; wrote {} and {})", opts.heldout_text.display(), json_path.display(), png_path.display());
            }
        }
        Command::Calibrate { model, skip, text, tokens, importance, ridge, blocks, per_block, output, check, check_tokens, json } => {
            let path = cache::resolve_model(model.as_deref(), json)?;
            let g = opu_compiler::gguf::Gguf::open(&path)?;
            let mut spec = match importance {
                opu_compiler::calibrate::Importance::OutputKl => opu_host::calibration::Spec::new(skip),
                opu_compiler::calibrate::Importance::RelativeUpdate => opu_host::calibration::Spec::relative_update(skip),
            };
            spec.tokens = tokens.unwrap_or(spec.tokens);
            spec.ridge = ridge;
            spec.blocks = blocks;
            spec.per_block = per_block;
            if let Some(t) = text {
                spec.text = t;
            }
            if let Some(c) = &check {
                opu_host::calibration::ensure_heldout("--check", c, &spec.text)?;
            }
            let mut cal = opu_host::calibration::routers_for(&g, &path, &spec, &mut |line| eprintln!("{line}"))?;
            std::fs::copy(&cal.file, &output).with_context(|| format!("writing {}", output.display()))?;
            if let Some(c) = &check {
                let text = std::fs::read_to_string(c).with_context(|| format!("--check {}: cannot read", c.display()))?;
                let tok = opu_host::tokenizer::Tokenizer::from_gguf(&g)?;
                let ids = tok.encode(&text)?;
                let sequences: Vec<Vec<u32>> = ids[..ids.len().min(check_tokens)].chunks(64).map(<[u32]>::to_vec).collect();
                eprintln!("measuring on {} tokens of {} (f32 interpreter)", sequences.iter().map(Vec::len).sum::<usize>(), c.display());
                let mut interp = opu_compiler::interp::Interpreter::new(&g)?;
                let q = opu_compiler::calibrate::measure_skipping(&mut interp, &cal.routers, &sequences, 16)?;
                cal.report["check"] = serde_json::to_value(&q)?;
                cal.report["check"]["text"] = serde_json::json!(c.display().to_string());
                if !json {
                    println!(
                        "held-out {} ({} positions): realised skip {:.1}% (attention {:.1}%), top-1 agreement {:.4}, mean KL {:.4}, perplexity {:.3} dense -> {:.3} ({:.3}x)",
                        c.display(),
                        q.positions,
                        100.0 * q.realised_rate,
                        100.0 * q.attention_rate,
                        q.top1_agreement,
                        q.mean_kl,
                        q.dense_perplexity,
                        q.skip_perplexity,
                        q.skip_perplexity / q.dense_perplexity
                    );
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&cal.report)?);
            } else {
                let r = &cal.report;
                println!(
                    "{}: {} routed blocks; threshold {:.4}; {:.1}% of {} calibration tokens' decisions skipped (target {:.1}%)",
                    output.display(),
                    cal.routers.count(),
                    r["threshold"].as_f64().unwrap_or(f64::NAN),
                    100.0 * r["calibration_rate"].as_f64().unwrap_or(f64::NAN),
                    r["tokens"],
                    100.0 * skip
                );
                let mean = match importance {
                    opu_compiler::calibrate::Importance::OutputKl => "mean KL",
                    opu_compiler::calibrate::Importance::RelativeUpdate => "mean |dx|/|x|",
                };
                println!("  {:>5} {:<5} {:>14} {:>8} {:>10}", "layer", "block", mean, "fit R^2", "skip rate");
                for b in r["blocks"].as_array().into_iter().flatten() {
                    println!(
                        "  {:>5} {:<5} {:>14.4} {:>8.3} {:>10.3}",
                        b["layer"],
                        b["block"].as_str().unwrap_or(""),
                        b["mean_importance"].as_f64().unwrap_or(f64::NAN),
                        b["r2"].as_f64().unwrap_or(f64::NAN),
                        b["skip_rate"].as_f64().unwrap_or(f64::NAN)
                    );
                }
            }
        }
        Command::Inspect { input, json } => inspect(&input, json)?,
        Command::Rtl(cmd) => rtl(cmd)?,
        Command::Devices { sysfs_root, json } => devices(sysfs_root.as_deref(), json)?,
        Command::Flash { bitstream, device, method, sidecar, cable, ftdi_serial, sysfs_root, dry_run, timeout } => {
            flash(&bitstream, device.as_deref(), method.as_deref(), sidecar, cable, ftdi_serial, sysfs_root.as_deref(), dry_run, timeout)?
        }
        Command::Emulate { root, backend, config, bdf, threads, fault } => emulate(&root, &backend, &config, &bdf, threads, fault.as_deref())?,
        Command::Exec { prog, backend, vcd, json } => {
            let (config, program, opts) = prog.open()?;
            let mut dev: Box<dyn opu_hw::device::Device> = match backend.as_str() {
                "sim" => Box::new(opu_sim::func::FuncSim::new(&config)),
                "rtl" => Box::new(open_rtl(&config, Some(&vcd))?),
                other => anyhow::bail!("--backend `{other}`: programs run on `sim` or `rtl`"),
            };
            anyhow::ensure!(vcd.vcd.is_none() || backend == "rtl", "--vcd needs --backend rtl");
            program.load(dev.as_mut())?;
            let out = opu_host::exec::run_loaded(dev.as_mut(), &program, &opts)?;
            if json {
                let mut v = serde_json::to_value(&out)?;
                if let Some(per) = dev.channel_bytes() {
                    v["bytes_per_channel"] = per.into();
                }
                v["backend"] = backend.clone().into();
                v["program"] = program.path.display().to_string().into();
                v["entry"] = program.entry.clone().into();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if out.trap.is_none() {
                let c = &out.counters;
                let cycles = if backend == "sim" { "cycles (estimate)" } else { "cycles" };
                println!(
                    "{}: `{}` completed on {backend}: {} {cycles}, {} instructions, {} bytes read, {} written, {} MACs, {} skipped blocks, {} KV history hits",
                    program.path.display(),
                    program.entry,
                    c.cycles,
                    c.instructions,
                    c.bytes_read,
                    c.bytes_written,
                    c.macs,
                    c.skipped_blocks,
                    c.kv_history_hits
                );
            }
            if let Some(t) = &out.trap {
                anyhow::bail!("{}", program.trap_message(t));
            }
        }
        Command::Cosim { prog, vcd, json } => {
            let (config, program, opts) = prog.open()?;
            let report = opu_host::exec::cosim(
                &program,
                &opts,
                &mut || Ok(opu_sim::func::FuncSim::new(&config)),
                // the waveform of the full run, not of the search's prefix runs
                &mut |full| Ok(Box::new(open_rtl(&config, full.then_some(&vcd))?) as Box<dyn opu_hw::device::Device>),
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{}", report.text());
            }
            anyhow::ensure!(report.divergence.is_none(), "{}: the RTL differs from the functional simulator", program.path.display());
        }
        Command::Disasm { input, output, listing } => {
            let text = disasm(&input, listing)?;
            match output {
                Some(p) => std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?,
                None => print!("{text}"),
            }
        }
    }
    Ok(())
}

fn disasm(input: &Path, listing: bool) -> Result<String> {
    let bytes = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let render = |p: &[isa::Instr]| if listing { asm::listing(p) } else { asm::disassemble(p) };
    if bytes.starts_with(&MAGIC) {
        let c = Container::from_bytes(&bytes).with_context(|| format!("{}", input.display()))?;
        let mut out = format!("; program container, overlay config hash {:#018x}\n", c.config_hash);
        for s in c.sections.iter().filter(|s| s.kind == SectionKind::Code) {
            let p = isa::decode_program(&s.data).with_context(|| format!("{}: code section `{}`", input.display(), s.name))?;
            out += &format!("; code section `{}` at device address {:#x}, {} instructions\n", s.name, s.device_addr, p.len());
            out += &render(&p);
        }
        Ok(out)
    } else {
        let p = isa::decode_program(&bytes).with_context(|| format!("{}", input.display()))?;
        Ok(render(&p))
    }
}

fn rtl(cmd: RtlCommand) -> Result<()> {
    match cmd {
        RtlCommand::Project { config, board, output } => {
            let cfg = OverlayConfig::from_name_or_path(&config)?;
            let b = opu_rtl::card::board(&board)?;
            let files = opu_rtl::card::project(&cfg, b, &utc_now_rfc3339(), env!("CARGO_PKG_VERSION"))?;
            for f in &files {
                let path = output.join(f.path);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                }
                std::fs::write(&path, &f.text).with_context(|| format!("writing {}", path.display()))?;
            }
            println!(
                "card image project for {} ({}), overlay `{}` (config hash {}): {} files in {}\nbuild it with: cd {} && vivado -mode batch -source build.tcl",
                b.name,
                b.part,
                cfg.name,
                opu_hw::image::hash_text(cfg.hash()),
                files.len(),
                output.display(),
                output.display()
            );
        }
        RtlCommand::Units => {
            for (name, top, what) in opu_rtl::UNITS {
                println!("{name:<12} {top:<18} {what}");
            }
        }
        RtlCommand::Emit { config, unit, output } => {
            let cfg = OverlayConfig::from_name_or_path(&config)?;
            std::fs::create_dir_all(&output).with_context(|| format!("creating {}", output.display()))?;
            let units: Vec<&str> = match &unit {
                Some(u) => vec![u.as_str()],
                None => opu_rtl::UNITS.iter().map(|u| u.0).collect(),
            };
            for u in units {
                let verilog = opu_rtl::emit_verilog_for(u, &cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
                let top = opu_rtl::emit::top_name(u).expect("emitted units have a top");
                let path = output.join(format!("{top}.v"));
                std::fs::write(&path, verilog).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("{u}: {}", path.display());
            }
        }
        RtlCommand::Synth { config, unit, json } => {
            let cfg = OverlayConfig::from_name_or_path(&config)?;
            let dir = std::env::temp_dir().join(format!("opu-synth-{}-{unit}", std::process::id()));
            // yosys prints nothing while it works (a big unit: minutes): a spinner with the time so far and,
            // for the top, the modules mapped, on stderr, hidden with --json
            let spinner = if json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
            if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
                spinner.set_style(style);
            }
            let how = if unit == "top" { "module by module" } else { "flattened" };
            spinner.set_message(format!("yosys synth_xilinx -family xcup on `{unit}` for `{}`, {how}", cfg.name));
            spinner.enable_steady_tick(std::time::Duration::from_millis(200));
            enum Report {
                Design(opu_rtl::synth::DesignReport),
                Unit(opu_rtl::synth::SynthReport),
            }
            // the whole overlay module by module, a unit flattened
            let report = if unit == "top" {
                let jobs = opu_rtl::synth::default_jobs();
                let progress = |m: &str, done: usize, total: usize| {
                    spinner.set_message(format!("yosys synth_xilinx -family xcup on `top` for `{}`, module by module, {jobs} at once: {done}/{total} mapped (last: {m})", cfg.name));
                };
                opu_rtl::synth::synthesize_design_with(&unit, &cfg, &dir, jobs, &progress).map(Report::Design)
            } else {
                opu_rtl::synth::synthesize_for(&unit, &cfg, &dir).map(Report::Unit)
            };
            spinner.finish_and_clear();
            let _ = std::fs::remove_dir_all(&dir);
            match report? {
                Report::Design(r) if json => println!("{}", serde_json::to_string_pretty(&r)?),
                Report::Design(r) => print_design_report(&r),
                Report::Unit(r) if json => println!("{}", serde_json::to_string_pretty(&r)?),
                Report::Unit(r) => print_unit_report(&r, &cfg),
            }
        }
    }
    Ok(())
}

/// A unit's resources, packing factor and worst path.
fn print_unit_report(r: &opu_rtl::synth::SynthReport, cfg: &OverlayConfig) {
    println!("{} ({}) for overlay `{}`, yosys synth_xilinx -family xcup:", r.unit, r.top, r.config);
    println!("  LUT {}  FF {} (upper bound: yosys keeps registers out of DSPs)  DSP48E2 {}  BRAM18 {}  URAM {}  CARRY {}", r.lut, r.ff, r.dsp48e2, r.bram, r.uram, r.carry);
    let p = &r.packing_factor;
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v}"));
    println!("  packing factor (products / cycle / DSP48E2): w4 {}  w4_min {}  w8 {}  fp16 {}", f(p.w4), f(p.w4_min), f(p.w8), f(p.fp16));
    if let Some(w) = &r.worst_path {
        let budget = 1e3 / f64::from(cfg.core_clock_mhz.max(1));
        println!("  worst path (estimate, docs/rtl.md \"Timing\"): {}, budget {budget:.2} ns at {} MHz", describe_path(w), cfg.core_clock_mhz);
    }
}

/// `4.06 ns (6 LUT, 9 CARRY4, 6 MUXF): a -> b`
fn describe_path(p: &opu_rtl::synth::timing::PathReport) -> String {
    format!("{:.2} ns ({} LUT, {} CARRY4, {} MUXF): {} -> {}", p.delay_ns, p.luts, p.carries, p.muxes, p.from, p.to)
}

fn print_design_report(r: &opu_rtl::synth::DesignReport) {
    let pct = |v: f64| format!("{:.1}%", 100.0 * v);
    println!("{} ({}) for overlay `{}`: {}", r.unit, r.top, r.config, r.method);
    println!("  (FF: upper bounds, yosys keeps the DSP48E2's registers in fabric; LUT counts shift registers and LUT RAM)");
    println!("{:<34} {:>5} {:>10} {:>10} {:>7} {:>7} {:>6}  worst path (ns)", "part", "inst", "LUT", "FF", "DSP48E2", "BRAM18", "URAM");
    let row = |name: &str, inst: String, x: &opu_rtl::synth::Resources, path: String| {
        println!("{name:<34} {inst:>5} {:>10} {:>10} {:>7} {:>7} {:>6}  {path}", x.lut, x.ff, x.dsp48e2, x.bram, x.uram);
    };
    for p in &r.parts {
        let path = p.worst_path.as_ref().map_or(String::new(), |w| format!("{:.2}", w.delay_ns));
        row(&p.module, p.instances.to_string(), &p.resources, path);
    }
    row("total", String::new(), &r.total, String::new());
    let d = &r.device;
    println!("{:<34} {:>5} {:>10} {:>10} {:>7} {:>7} {:>6}", d.part, "", d.lut, d.ff, d.dsp48e2, d.bram, d.uram);
    let u = &r.utilization;
    println!("{:<34} {:>5} {:>10} {:>10} {:>7} {:>7} {:>6}", "utilization", "", pct(u.lut), pct(u.ff), pct(u.dsp48e2), pct(u.bram), pct(u.uram));
    println!(
        "timing estimate (docs/rtl.md \"Timing\"; not STA): budget {:.2} ns at {} MHz; the worst paths, one per module:",
        r.budget_ns, r.core_clock_mhz
    );
    for w in &r.worst_paths {
        let flag = if w.delay_ns > r.budget_ns { "  OVER" } else { "" };
        println!("  {:<40} {}{flag}", w.module, describe_path(w));
    }
}

fn inspect(input: &Path, json: bool) -> Result<()> {
    let c = Container::read(input)?;
    let raw_meta = c.meta()?;
    let meta: Option<opu_compiler::ProgramMeta> = raw_meta.clone().and_then(|m| serde_json::from_value(m).ok());
    // a CNN's program (`opu compile digits`)
    let cnn: Option<opu_compiler::lower_cnn::CnnMeta> = raw_meta.and_then(|m| serde_json::from_value(m).ok());
    let lanes = OverlayConfig::PRESETS
        .iter()
        .filter_map(|n| OverlayConfig::preset(n).ok())
        .find(|cfg| cfg.hash() == c.config_hash)
        .map(|cfg| cfg.pe_lanes);
    let mut entries = Vec::new();
    for s in c.sections.iter().filter(|s| s.kind == SectionKind::Code) {
        let p = isa::decode_program(&s.data).with_context(|| format!("{}: code section `{}`", input.display(), s.name))?;
        entries.push(serde_json::json!({
            "name": s.name,
            "device_addr": s.device_addr,
            "instructions": p.len(),
            "by_class": opu_compiler::lower::count_by_class(&p),
            // (the weights' layout depends on the overlay's lanes: known for a preset's programs)
            "static_bytes_moved": lanes.map(|l| opu_compiler::lower::static_bytes(&p, l)),
        }));
    }
    let sections: Vec<serde_json::Value> = c
        .sections
        .iter()
        .map(|s| serde_json::json!({"kind": format!("{:?}", s.kind), "name": s.name, "device_addr": s.device_addr, "bytes": s.device_bytes().max(s.data.len() as u64)}))
        .collect();
    let per_token = meta.as_ref().map(|m| {
        serde_json::json!({
            "weight_bytes": m.weight_bytes,
            "bytes_moved_per_decode_token_static": m.decode_bytes_static,
            "kv_bytes_per_cached_position": m.kv_bytes_per_position,
        })
    });
    let out = serde_json::json!({
        "file": input.display().to_string(),
        "config_hash": format!("{:#018x}", c.config_hash),
        "model": meta.as_ref().map(|m| m.model.clone()).or(cnn.as_ref().map(|m| m.model.clone())),
        "cnn": cnn.as_ref().map(|m| serde_json::json!({"input": m.input, "classes": m.classes, "weight_bytes": m.weight_bytes, "macs_per_image": m.macs_per_image, "plan": m.plan})),
        "entries": entries,
        "decode": per_token,
        "sections": sections,
        "layout": c.layout()?,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{}: OPU program for overlay config {:#018x}", input.display(), c.config_hash);
    if let Some(m) = &meta {
        println!("  model {}: {} layers, n_embd {}, {} heads / {} KV heads, vocab {}, context {}", m.model, m.n_layer, m.n_embd, m.n_head, m.n_head_kv, m.vocab, m.max_context);
        println!(
            "  weights {:.1} MiB; a decode step moves {:.1} MiB plus {} bytes per cached position (K/V)",
            m.weight_bytes as f64 / 1048576.0,
            m.decode_bytes_static as f64 / 1048576.0,
            m.kv_bytes_per_position
        );
    }
    if let Some(m) = &cnn {
        println!(
            "  CNN {}: input {}x{}x{}, {} classes, {:.1} KiB of weights, {} MACs per image",
            m.model,
            m.input[0],
            m.input[1],
            m.input[2],
            m.classes,
            m.weight_bytes as f64 / 1024.0,
            m.macs_per_image
        );
        print!("{}", opu_host::cnn::scaling_report(m));
    }
    for e in &entries {
        println!("  entry `{}`: {} instructions {}", e["name"].as_str().unwrap_or(""), e["instructions"], e["by_class"]);
    }
    let (mut data, mut bss) = (0u64, 0u64);
    for s in &c.sections {
        match s.kind {
            SectionKind::Data => data += s.data.len() as u64,
            SectionKind::Bss => bss += s.bss_bytes,
            _ => {}
        }
    }
    let zeroed = if cnn.is_some() { "the image and the logits" } else { "KV cache" };
    println!("  {} sections: {:.1} MiB of data, {:.1} MiB zeroed at load ({zeroed})", c.sections.len(), data as f64 / 1048576.0, bss as f64 / 1048576.0);
    Ok(())
}

fn config_json(c: &OverlayConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(c).expect("config serializes");
    v["hash"] = format!("{:#018x}", c.hash()).into();
    v["macs_per_cycle"] = c.macs_per_cycle().into();
    v["peak_bandwidth_gb_per_s"] = (c.peak_bandwidth_bytes_per_s() / 1e9).into();
    v["kv_history_bytes"] = c.kv_history_bytes().into();
    v
}

/// Now as RFC 3339 UTC (`2026-12-07T16:05:09Z`), for the card image's sidecar. By hand (the civil-from-days
/// algorithm) rather than a date crate: it is the only date this program writes.
fn utc_now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// `opu flash`: checks the image and its sidecar, programs the card (or prints how), checks the card.
#[allow(clippy::too_many_arguments)]
fn flash(
    bitstream: &Path,
    device: Option<&str>,
    method: Option<&str>,
    sidecar: Option<PathBuf>,
    cable: String,
    ftdi_serial: Option<String>,
    sysfs_root: Option<&Path>,
    dry_run: bool,
    timeout: u64,
) -> Result<()> {
    use opu_driver::flash::{self, Image, ImageKind, Method};
    let image = Image::read(bitstream)?;
    let sidecar_path = match sidecar {
        Some(p) => p,
        None => image.find_sidecar()?,
    };
    let sc = opu_hw::image::Sidecar::read(&sidecar_path)?;
    image.check_sidecar(&sc, &sidecar_path)?;
    let root = opu_driver::sysfs::root(sysfs_root);
    let card = match device {
        Some(b) => Some(opu_driver::sysfs::find(&root, Some(b))?),
        None => opu_driver::sysfs::find(&root, None).ok(),
    };
    let method = match method {
        Some("xrt") => Method::Xrt,
        Some("openfpgaloader") => Method::OpenFpgaLoader { cable, ftdi_serial },
        Some("emulated") => Method::Emulated,
        _ if card.as_ref().is_some_and(|c| c.emulator_info().is_some()) => Method::Emulated,
        _ if matches!(image.kind, ImageKind::Xclbin { .. }) => Method::Xrt,
        _ => Method::OpenFpgaLoader { cable, ftdi_serial },
    };
    let steps = flash::plan(&image, &sc, &method, card.as_ref(), &root)?;
    eprintln!(
        "{}: overlay `{}` (config hash {}) for {}, sidecar {}",
        bitstream.display(),
        sc.config.name,
        sc.config_hash,
        sc.board,
        sidecar_path.display()
    );
    if dry_run {
        for s in &steps {
            println!("{s}");
        }
        return Ok(());
    }
    let timeout = std::time::Duration::from_secs(timeout);
    flash::run(&steps, timeout)?;
    let info = flash::verify(&root, card.as_ref().map(|c| c.bdf.as_str()), &sc, timeout)?;
    println!("card {} now runs overlay `{}` (config hash {}), as the image's sidecar says", info.bdf, sc.config.name, info.config_hash);
    Ok(())
}

/// `opu devices`: the cards under the sysfs root, read without taking them.
fn devices(root: Option<&Path>, json: bool) -> Result<()> {
    let root = opu_driver::sysfs::root(root);
    let cards = opu_driver::card::list(&root)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "sysfs_root": root, "cards": cards }))?);
        return Ok(());
    }
    if cards.is_empty() {
        println!("no OPU card under {} (PCI {:04x}:{:04x})", root.display(), opu_hw::pci::VENDOR_ID, opu_hw::pci::DEVICE_ID);
    }
    for c in &cards {
        if let Some(e) = &c.error {
            println!("{}  unreadable: {e}", c.bdf);
            continue;
        }
        let emulated = c.emulated.as_ref().map_or(String::new(), |e| format!("  emulated ({}, pid {})", e["backend"].as_str().unwrap_or("?"), e["pid"]));
        println!(
            "{}  OPU {}  overlay {} ({})  {}{}{}",
            c.bdf,
            c.version,
            c.config.as_deref().map_or("unknown".to_string(), |n| format!("`{n}`")),
            c.config_hash,
            c.state,
            if c.in_use { ", in use" } else { "" },
            emulated
        );
        let k = &c.counters;
        println!(
            "    last run: {} cycles, {} instructions, {} bytes read, {} bytes written, {} MACs",
            k["cycles"], k["instructions"], k["bytes_read"], k["bytes_written"], k["macs"]
        );
    }
    Ok(())
}

/// Raised by SIGINT / SIGTERM: `opu emulate` removes its card and exits.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// `opu emulate`: an emulated card under `root`, served until a signal or until its directory is removed.
fn emulate(root: &Path, backend: &str, config: &str, bdf: &str, threads: Option<usize>, fault: Option<&str>) -> Result<()> {
    let config = OverlayConfig::from_name_or_path(config)?;
    let threads = threads.unwrap_or_else(opu_host::runtime::compute_threads);
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let rtl = backend == "rtl";
    let factory: opu_driver::emulate::DeviceFactory = Box::new(move |c: &OverlayConfig| -> Result<Box<dyn opu_hw::Device>, String> {
        if rtl {
            Ok(Box::new(opu_rtlsim::RtlSim::new(c).map_err(|e| format!("backend `rtl`: {e}"))?))
        } else {
            let mut f = opu_sim::func::FuncSim::new(c);
            f.set_threads(threads);
            Ok(Box::new(f))
        }
    });
    let mut emu = opu_driver::emulate::Emulator::new(root, bdf, &config, backend, factory)?;
    if fault == Some("never-complete") {
        emu.set_fault(Some(opu_driver::emulate::Fault::NeverComplete));
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    println!(
        "emulated OPU card {} (overlay `{}`, {}) under {}: OPU_SYSFS_ROOT={} finds it",
        emu.tree.bdf,
        config.name,
        if rtl { "the RTL under Verilator" } else { "the functional simulator" },
        emu.tree.root.display(),
        emu.tree.root.display()
    );
    std::io::stdout().flush()?;
    let ended = emu.serve(&STOP, |n, r| match r {
        Ok(c) => eprintln!("run {n}: done, {} instructions, {} cycles", c.instructions, c.cycles),
        Err(e) => eprintln!("run {n}: {e}"),
    })?;
    eprintln!("{} runs; {} bytes copied into the device, {} out", emu.runs, emu.bytes_in, emu.bytes_out);
    if ended == opu_driver::emulate::Ended::Stopped {
        match std::fs::remove_dir_all(&emu.tree.dir) {
            Ok(()) => eprintln!("removed {}", emu.tree.dir.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", emu.tree.dir.display())),
        }
    } else {
        eprintln!("{} was removed: stopping", emu.tree.dir.display());
    }
    Ok(())
}

fn info(config: Option<&str>, json: bool) -> Result<()> {
    let configs: Vec<OverlayConfig> = match config {
        Some(c) => vec![OverlayConfig::from_name_or_path(c)?],
        None => OverlayConfig::PRESETS.iter().map(|p| OverlayConfig::preset(p)).collect::<Result<_, _>>()?,
    };
    if json {
        let isa: Vec<serde_json::Value> = isa::SPECS
            .iter()
            .map(|s| {
                serde_json::json!({
                    "opcode": s.opcode, "mnemonic": s.mnemonic, "class": s.class, "summary": s.summary.trim(),
                    "fields": s.fields.iter().map(|f| serde_json::json!({"name": f.name, "bits": f.bits})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let registers: Vec<serde_json::Value> = regs::REGISTERS
            .iter()
            .map(|r| serde_json::json!({"name": r.name, "offset": r.offset, "access": r.access.name(), "description": r.description}))
            .collect();
        let out = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "configs": configs.iter().map(config_json).collect::<Vec<_>>(),
            "isa": isa,
            "registers": registers,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("OPU {} (register map / ISA {}.{})\n", env!("CARGO_PKG_VERSION"), regs::VERSION_VALUE >> 16, regs::VERSION_VALUE & 0xFFFF);
    if config.is_some() {
        let c = &configs[0];
        println!("Overlay config `{}` (hash {:#018x}):\n{}", c.name, c.hash(), c.to_toml());
    } else {
        println!("Overlay presets:");
        println!(
            "  {:<6} {:>6} {:>5} {:>9} {:>8} {:>11} {:>11} {:>9} {:>10}  hash",
            "name", "lanes", "dot", "MACs/cyc", "act bits", "scratchpad", "KV history", "core MHz", "mem GB/s"
        );
        for c in &configs {
            println!(
                "  {:<6} {:>6} {:>5} {:>9} {:>8} {:>9}Ki {:>8}tok {:>9} {:>10.1}  {:#018x}",
                c.name,
                c.pe_lanes,
                c.dot_width,
                c.macs_per_cycle(),
                c.act_mantissa_bits,
                c.scratchpad_bytes >> 10,
                c.kv_history_slots,
                c.core_clock_mhz,
                c.peak_bandwidth_bytes_per_s() / 1e9,
                c.hash()
            );
        }
    }
    println!("\nISA: {} instructions, 128-bit words (docs/isa.md)", isa::SPECS.len());
    for s in isa::SPECS {
        println!("  {:#04x} {:<9} {:<10} {}", s.opcode, s.mnemonic, s.class, s.summary.trim().lines().next().unwrap_or(""));
    }
    println!("\nRegister map (BAR 0, 32-bit registers; docs/registers.md):");
    for r in regs::REGISTERS {
        println!("  {:#05x} {:<21} {:<3} {}", r.offset, r.name, r.access.name(), r.description);
    }
    Ok(())
}

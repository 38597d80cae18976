//! `opu`: the OPU command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use opu_hw::container::{Container, SectionKind, MAGIC};
use opu_hw::isa::{self, asm};
use opu_hw::regs;
use opu_hw::OverlayConfig;
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

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
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

fn config_json(c: &OverlayConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(c).expect("config serializes");
    v["hash"] = format!("{:#018x}", c.hash()).into();
    v["macs_per_cycle"] = c.macs_per_cycle().into();
    v["peak_bandwidth_gb_per_s"] = (c.peak_bandwidth_bytes_per_s() / 1e9).into();
    v["kv_history_bytes"] = c.kv_history_bytes().into();
    v
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

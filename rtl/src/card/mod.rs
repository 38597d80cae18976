//! A card image project: what a user with the vendor tools runs to turn the overlay into a bitstream for a
//! board (`opu rtl project`). Nothing here runs the vendor tools; what can be checked without them is:
//! the Verilog lints under Verilator against port-for-port stubs of the vendor IP (`lint/vendor_stubs.v`),
//! our AXI glue runs under Verilator against an adversarial AXI memory (`sim/tb_glue.sv`), the build
//! script runs under `tclsh` with the Vivado commands recorded (`lint/check_build.tcl`), and the sidecar
//! round-trips (`opu_hw::image::Sidecar`).
//!
//! The design (docs/driver.md, "The card image"):
//! - `opu_shell`, a Vivado block design the build script creates: the XDMA PCIe bridge (BAR 0 an AXI4-Lite
//!   master, four DMA channels each way, one user interrupt), the HBM (32 pseudo-channels), the clocks and
//!   a SmartConnect per pseudo-channel (the core clock's 512-bit AXI4 to the HBM's 256-bit AXI3 at 450 MHz).
//! - Our Verilog around the overlay (`hdl/`): `opu_axil_mmio` (BAR 0 onto the register port),
//!   `opu_mem_fabric` (the line and weight ports onto one AXI4 master per pseudo-channel, interleaved as
//!   `OverlayConfig::channel_of` says) and `opu_axi_interleave` (the host's DMA onto the same layout);
//!   `opu_card` joins them to the shell and the board's pins.

mod shell;

use opu_hw::image::Sidecar;
use opu_hw::OverlayConfig;

/// A board a card image can be built for.
#[derive(Clone, Copy, Debug)]
pub struct Board {
    pub name: &'static str,
    /// The FPGA part.
    pub part: &'static str,
    /// The Vivado board part (its board files place the PCIe lanes).
    pub board_part: &'static str,
    /// HBM pseudo-channels, and bytes of each.
    pub channels: u32,
    pub channel_bytes: u64,
    pub pcie_lanes: u32,
}

/// The boards `opu rtl project` knows.
pub const BOARDS: &[Board] = &[Board {
    name: "alveo-u280",
    part: "xcu280-fsvh2892-2L-e",
    board_part: "xilinx.com:au280:part0:1.2",
    channels: 32,
    channel_bytes: 256 << 20,
    pcie_lanes: 16,
}];

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("unknown board `{0}` (known: {known})", known = BOARDS.iter().map(|b| b.name).collect::<Vec<_>>().join(", "))]
    UnknownBoard(String),
    #[error("overlay `{config}` does not fit board {board}: {what}")]
    Fit { config: String, board: String, what: String },
    #[error(transparent)]
    Emit(#[from] crate::emit::EmitError),
}

pub fn board(name: &str) -> Result<&'static Board, ProjectError> {
    BOARDS.iter().find(|b| b.name == name).ok_or_else(|| ProjectError::UnknownBoard(name.into()))
}

/// The overlay's memory must be the board's: one channel per pseudo-channel, runs of 64 bytes (a 512-bit
/// AXI beat at the core clock), all of the HBM.
pub fn check_fit(config: &OverlayConfig, board: &Board) -> Result<(), ProjectError> {
    let bad = |what: String| Err(ProjectError::Fit { config: config.name.clone(), board: board.name.into(), what });
    if config.mem_channels != board.channels {
        return bad(format!("mem_channels is {}, the board has {} HBM pseudo-channels", config.mem_channels, board.channels));
    }
    if config.channel_bytes_per_cycle() != 64 {
        return bad(format!(
            "a channel moves {} bytes per core cycle; the memory fabric takes 64 (a 512-bit AXI beat at the core clock)",
            config.channel_bytes_per_cycle()
        ));
    }
    let total = u64::from(board.channels) * board.channel_bytes;
    if config.device_memory_bytes != total {
        return bad(format!("device_memory_bytes is {}, the board's HBM is {total}", config.device_memory_bytes));
    }
    Ok(())
}

/// One file of the project: its path under the project folder and its text.
pub struct ProjectFile {
    pub path: &'static str,
    pub text: String,
}

/// Every file of the project for `config` on `board`, with the sidecar dated `build_date` (RFC 3339).
pub fn project(config: &OverlayConfig, board: &Board, build_date: &str, opu_version: &str) -> Result<Vec<ProjectFile>, ProjectError> {
    check_fit(config, board)?;
    let top = crate::emit::top_verilog_named(config, "opu_top")?;
    // Vivado has the DSP48E2 primitive; the stand-in is Verilator's
    let top = top.replace(crate::lane::DSP48E2_STAND_IN, "");
    let sidecar = Sidecar::new(config, board.name, board.part, shell::CARD_TOP, build_date, opu_version);
    let p = shell::Params::of(config, board);
    Ok(vec![
        ProjectFile { path: "hdl/opu_top.v", text: top },
        ProjectFile { path: "hdl/opu_card.v", text: shell::card_verilog(&p) },
        ProjectFile { path: "hdl/opu_mem_fabric.v", text: include_str!("hdl/opu_mem_fabric.v").into() },
        ProjectFile { path: "hdl/opu_axi_interleave.v", text: include_str!("hdl/opu_axi_interleave.v").into() },
        ProjectFile { path: "hdl/opu_axil_mmio.v", text: include_str!("hdl/opu_axil_mmio.v").into() },
        ProjectFile { path: "hdl/opu_fifo.v", text: include_str!("hdl/opu_fifo.v").into() },
        ProjectFile { path: "constraints/opu_card.xdc", text: shell::constraints(&p) },
        ProjectFile { path: "build.tcl", text: shell::build_tcl(&p) },
        ProjectFile { path: "lint/vendor_stubs.v", text: format!("{}\n{}", shell::vendor_stubs(&p), crate::lane::DSP48E2_STAND_IN) },
        ProjectFile { path: "lint/check_build.tcl", text: shell::CHECK_BUILD_TCL.into() },
        ProjectFile { path: "sim/tb_glue.sv", text: include_str!("tb/tb_glue.sv").into() },
        ProjectFile { path: shell::SIDECAR, text: sidecar.to_json() },
        ProjectFile { path: "README.md", text: shell::readme(&p, &sidecar) },
    ])
}

pub use shell::{CARD_TOP, SIDECAR};

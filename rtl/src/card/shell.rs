//! The board-facing files of a card image project: `opu_card` (Verilog), the block design `opu_shell` and
//! the build (Tcl), the constraints, the vendor IP stubs for linting. The AXI interfaces between our
//! Verilog and the block design are listed once ([`Params::interfaces`]); the block design's external ports,
//! the stub of its module and `opu_card`'s wiring are all written from that list.

use super::Board;
use opu_hw::image::Sidecar;
use opu_hw::OverlayConfig;
use std::fmt::Write;

/// The project's top module.
pub const CARD_TOP: &str = "opu_card";
/// The sidecar's path in the project (the build copies it beside the bitstream as `opu_card.opu.json`).
pub const SIDECAR: &str = "opu-overlay.json";

/// The numbers the files are written with.
pub struct Params {
    pub board: Board,
    pub config: OverlayConfig,
    pub channels: u32,
    pub ch_bits: u32,
    /// Bits of a device-memory byte address.
    pub addr_bits: u32,
    /// Bits of the weight port's data.
    pub weight_bits: u32,
    /// Bits of BAR 0's byte offsets.
    pub bar_bits: u32,
}

impl Params {
    pub fn of(config: &OverlayConfig, board: &Board) -> Params {
        Params {
            board: *board,
            config: config.clone(),
            channels: config.mem_channels,
            ch_bits: config.mem_channels.trailing_zeros(),
            addr_bits: 64 - (config.device_memory_bytes - 1).leading_zeros(),
            weight_bits: 512 * config.weight_port_beats(),
            bar_bits: opu_hw::pci::BAR0_BYTES.trailing_zeros(),
        }
    }

    /// The AXI interfaces of the block design's boundary.
    pub fn interfaces(&self) -> Vec<Axi> {
        let mut v = vec![
            // BAR 0, crossed into the core clock domain
            Axi { name: "M_AXIL".into(), shell_master: true, lite: true, data: 32, addr: self.bar_bits, id: 0, clock: "core_clk" },
            // the bridge's DMA, out to opu_axi_interleave and back in
            Axi { name: "M_AXI_HOST".into(), shell_master: true, lite: false, data: 512, addr: 64, id: 4, clock: "host_clk" },
            Axi { name: "S_AXI_HOST".into(), shell_master: false, lite: false, data: 512, addr: self.addr_bits, id: 0, clock: "host_clk" },
        ];
        for c in 0..self.channels {
            v.push(Axi { name: format!("S_AXI_CH{c:02}"), shell_master: false, lite: false, data: 512, addr: self.addr_bits, id: 0, clock: "core_clk" });
        }
        v
    }
}

/// An AXI interface at the block design's boundary.
pub struct Axi {
    pub name: String,
    /// The block design drives the address and write channels (an external master port).
    pub shell_master: bool,
    pub lite: bool,
    pub data: u32,
    pub addr: u32,
    pub id: u32,
    pub clock: &'static str,
}

/// One signal of an interface: suffix, width, driven by the interface's master.
pub struct Sig {
    pub suffix: &'static str,
    pub width: u32,
    pub from_master: bool,
}

impl Axi {
    pub fn signals(&self) -> Vec<Sig> {
        let s = |suffix, width, from_master| Sig { suffix, width, from_master };
        let mut v = vec![s("awaddr", self.addr, true), s("awvalid", 1, true), s("awready", 1, false)];
        if !self.lite {
            v.extend([s("awlen", 8, true), s("awsize", 3, true), s("awburst", 2, true)]);
        }
        v.extend([s("wdata", self.data, true), s("wstrb", self.data / 8, true), s("wvalid", 1, true), s("wready", 1, false)]);
        if !self.lite {
            v.push(s("wlast", 1, true));
        }
        v.extend([s("bresp", 2, false), s("bvalid", 1, false), s("bready", 1, true)]);
        v.extend([s("araddr", self.addr, true), s("arvalid", 1, true), s("arready", 1, false)]);
        if !self.lite {
            v.extend([s("arlen", 8, true), s("arsize", 3, true), s("arburst", 2, true)]);
        }
        v.extend([s("rdata", self.data, false), s("rresp", 2, false), s("rvalid", 1, false), s("rready", 1, true)]);
        if !self.lite {
            v.push(s("rlast", 1, false));
        }
        if self.id > 0 {
            v.extend([s("awid", self.id, true), s("bid", self.id, false), s("arid", self.id, true), s("rid", self.id, false)]);
        }
        v
    }
}

fn range(width: u32) -> String {
    if width == 1 {
        String::new()
    } else {
        format!("[{}:0] ", width - 1)
    }
}

/// The block design's scalar ports: (name, width, output of the shell).
fn shell_scalars(p: &Params) -> Vec<(&'static str, u32, bool)> {
    let l = p.board.pcie_lanes;
    vec![
        ("pcie_refclk_gt", 1, false),
        ("pcie_refclk", 1, false),
        ("pcie_perst_n", 1, false),
        ("pcie_mgt_rxp", l, false),
        ("pcie_mgt_rxn", l, false),
        ("pcie_mgt_txp", l, true),
        ("pcie_mgt_txn", l, true),
        ("sysclk_clk_p", 1, false),
        ("sysclk_clk_n", 1, false),
        ("hbm_cattrip", 1, true),
        ("core_clk", 1, true),
        ("core_rstn", 1, true),
        ("host_clk", 1, true),
        ("host_rstn", 1, true),
        ("usr_irq_req", 1, false),
    ]
}

/// `opu_card`: the board's pins, the shell, and our Verilog around the overlay.
pub fn card_verilog(p: &Params) -> String {
    let mut v = String::new();
    let l = p.board.pcie_lanes;
    let (ch, cb, ab) = (p.channels, p.ch_bits, p.addr_bits);
    writeln!(v, "// opu_card: the top of the OPU card image for {} ({}), overlay `{}`. Written by `opu rtl project`.", p.board.name, p.board.part, p.config.name).unwrap();
    writeln!(v, "// The block design opu_shell (build.tcl) holds the vendor IP: the XDMA PCIe bridge, the HBM, the clocks and").unwrap();
    writeln!(v, "// the SmartConnects; this module joins it to the overlay (opu_top) through opu_axil_mmio (BAR 0),").unwrap();
    writeln!(v, "// opu_mem_fabric (device memory) and opu_axi_interleave (the host's DMA).").unwrap();
    writeln!(v, "module {CARD_TOP} (").unwrap();
    writeln!(v, "    input  wire pcie_refclk_p,\n    input  wire pcie_refclk_n,\n    input  wire pcie_perst_n,").unwrap();
    writeln!(v, "    input  wire [{}:0] pci_exp_rxp,\n    input  wire [{}:0] pci_exp_rxn,\n    output wire [{}:0] pci_exp_txp,\n    output wire [{}:0] pci_exp_txn,", l - 1, l - 1, l - 1, l - 1).unwrap();
    writeln!(v, "    input  wire sysclk_p,\n    input  wire sysclk_n,\n    output wire hbm_cattrip\n);").unwrap();
    writeln!(v, "    wire pcie_refclk_gt;\n    wire pcie_refclk;").unwrap();
    writeln!(v, "    // the PCIe reference clock: to the transceivers, and halved to the bridge's logic").unwrap();
    writeln!(v, "    IBUFDS_GTE4 #(.REFCLK_HROW_CK_SEL(2'b00)) refclk_buf (.I(pcie_refclk_p), .IB(pcie_refclk_n), .CEB(1'b0), .O(pcie_refclk_gt), .ODIV2(pcie_refclk));").unwrap();
    writeln!(v, "    wire core_clk;\n    wire core_rstn;\n    wire host_clk;\n    wire host_rstn;\n    wire usr_irq_req;").unwrap();
    writeln!(v, "    wire core_rst = !core_rstn;\n    wire host_rst = !host_rstn;").unwrap();
    // every interface signal as a wire named as the shell's port
    for a in p.interfaces() {
        for s in a.signals() {
            writeln!(v, "    wire {}{}_{};", range(s.width), a.name, s.suffix).unwrap();
        }
    }
    // the shell
    writeln!(v, "    opu_shell shell (").unwrap();
    let mut conns: Vec<String> = vec![
        ".pcie_refclk_gt(pcie_refclk_gt)".into(),
        ".pcie_refclk(pcie_refclk)".into(),
        ".pcie_perst_n(pcie_perst_n)".into(),
        ".pcie_mgt_rxp(pci_exp_rxp)".into(),
        ".pcie_mgt_rxn(pci_exp_rxn)".into(),
        ".pcie_mgt_txp(pci_exp_txp)".into(),
        ".pcie_mgt_txn(pci_exp_txn)".into(),
        ".sysclk_clk_p(sysclk_p)".into(),
        ".sysclk_clk_n(sysclk_n)".into(),
        ".hbm_cattrip(hbm_cattrip)".into(),
        ".core_clk(core_clk)".into(),
        ".core_rstn(core_rstn)".into(),
        ".host_clk(host_clk)".into(),
        ".host_rstn(host_rstn)".into(),
        ".usr_irq_req(usr_irq_req)".into(),
    ];
    for a in p.interfaces() {
        for s in a.signals() {
            conns.push(format!(".{0}_{1}({0}_{1})", a.name, s.suffix));
        }
    }
    writeln!(v, "        {}\n    );", conns.join(",\n        ")).unwrap();
    // BAR 0
    writeln!(v, "    wire [11:0] mmio_addr;\n    wire [31:0] mmio_wdata;\n    wire mmio_write;\n    wire mmio_read;\n    wire [31:0] mmio_rdata;\n    wire mmio_rvalid;\n    wire irq;").unwrap();
    writeln!(v, "    opu_axil_mmio #(.ADDR_BITS({})) bar (", p.bar_bits).unwrap();
    writeln!(v, "        .clk(core_clk), .rst(core_rst),").unwrap();
    for s in ["awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp", "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rresp", "rvalid", "rready"] {
        writeln!(v, "        .s_{s}(M_AXIL_{s}),").unwrap();
    }
    writeln!(v, "        .mmio_addr(mmio_addr), .mmio_wdata(mmio_wdata), .mmio_write(mmio_write), .mmio_read(mmio_read),").unwrap();
    writeln!(v, "        .mmio_rdata(mmio_rdata), .mmio_rvalid(mmio_rvalid)\n    );").unwrap();
    // the overlay
    let wb = p.weight_bits;
    writeln!(v, "    wire m_req;\n    wire m_req_ready;\n    wire m_write;\n    wire [63:0] m_addr;\n    wire [255:0] m_wdata;\n    wire [31:0] m_wmask;\n    wire [1:0] m_tag;").unwrap();
    writeln!(v, "    wire m_resp;\n    wire [255:0] m_rdata;\n    wire [1:0] m_resp_tag;\n    wire w_req;\n    wire w_req_ready;\n    wire [63:0] w_addr;\n    wire w_resp;\n    wire [{}:0] w_rdata;", wb - 1).unwrap();
    writeln!(v, "    opu_top overlay (").unwrap();
    writeln!(v, "        .clock(core_clk), .reset(core_rst),").unwrap();
    writeln!(v, "        .mmio_addr(mmio_addr), .mmio_wdata(mmio_wdata), .mmio_write(mmio_write), .mmio_read(mmio_read), .mmio_rdata(mmio_rdata), .mmio_rvalid(mmio_rvalid), .irq(irq),").unwrap();
    writeln!(v, "        .m_req(m_req), .m_req_ready(m_req_ready), .m_write(m_write), .m_addr(m_addr), .m_wdata(m_wdata), .m_wmask(m_wmask), .m_tag(m_tag),").unwrap();
    writeln!(v, "        .m_resp(m_resp), .m_rdata(m_rdata), .m_resp_tag(m_resp_tag),").unwrap();
    writeln!(v, "        .w_req(w_req), .w_req_ready(w_req_ready), .w_addr(w_addr), .w_resp(w_resp), .w_rdata(w_rdata)\n    );").unwrap();
    // the memory fabric
    let d = 512 * ch;
    writeln!(v, "    wire [{}:0] ch_araddr;\n    wire [{}:0] ch_arvalid;\n    wire [{}:0] ch_arready;\n    wire [{}:0] ch_rdata;\n    wire [{}:0] ch_rvalid;\n    wire [{}:0] ch_rready;", ch * ab - 1, ch - 1, ch - 1, d - 1, ch - 1, ch - 1).unwrap();
    writeln!(v, "    wire [{}:0] ch_awaddr;\n    wire [{}:0] ch_awvalid;\n    wire [{}:0] ch_awready;\n    wire [{}:0] ch_wdata;\n    wire [{}:0] ch_wstrb;\n    wire [{}:0] ch_wvalid;\n    wire [{}:0] ch_wready;\n    wire [{}:0] ch_bvalid;\n    wire [{}:0] ch_bready;", ch * ab - 1, ch - 1, ch - 1, d - 1, 64 * ch - 1, ch - 1, ch - 1, ch - 1, ch - 1).unwrap();
    writeln!(v, "    opu_mem_fabric #(.CHANNELS({ch}), .CH_BITS({cb}), .RUN_LOG2(6), .ADDR_BITS({ab}), .DEPTH_LOG2(5)) fabric (").unwrap();
    writeln!(v, "        .clk(core_clk), .rst(core_rst),").unwrap();
    writeln!(v, "        .m_req(m_req), .m_req_ready(m_req_ready), .m_write(m_write), .m_addr(m_addr), .m_wdata(m_wdata), .m_wmask(m_wmask), .m_tag(m_tag),").unwrap();
    writeln!(v, "        .m_resp(m_resp), .m_rdata(m_rdata), .m_resp_tag(m_resp_tag),").unwrap();
    writeln!(v, "        .w_req(w_req), .w_req_ready(w_req_ready), .w_addr(w_addr), .w_resp(w_resp), .w_rdata(w_rdata),").unwrap();
    let fabric_sigs = ["araddr", "arvalid", "arready", "rdata", "rvalid", "rready", "awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bvalid", "bready"];
    writeln!(v, "        {}\n    );", fabric_sigs.iter().map(|s| format!(".axi_{s}(ch_{s})")).collect::<Vec<_>>().join(", ")).unwrap();
    writeln!(v, "    // the channels' unused responses (errors are not reported to the overlay)").unwrap();
    writeln!(v, "    /* verilator lint_off UNUSEDSIGNAL */").unwrap();
    let mut unused = Vec::new();
    for c in 0..ch {
        let n = format!("S_AXI_CH{c:02}");
        writeln!(v, "    assign {n}_araddr = ch_araddr[{} +: {ab}];\n    assign {n}_arvalid = ch_arvalid[{c}];\n    assign ch_arready[{c}] = {n}_arready;", c * ab).unwrap();
        writeln!(v, "    assign {n}_arlen = 8'd0;\n    assign {n}_arsize = 3'd6;\n    assign {n}_arburst = 2'b01;").unwrap();
        writeln!(v, "    assign ch_rdata[{} +: 512] = {n}_rdata;\n    assign ch_rvalid[{c}] = {n}_rvalid;\n    assign {n}_rready = ch_rready[{c}];", c * 512).unwrap();
        writeln!(v, "    assign {n}_awaddr = ch_awaddr[{} +: {ab}];\n    assign {n}_awvalid = ch_awvalid[{c}];\n    assign ch_awready[{c}] = {n}_awready;", c * ab).unwrap();
        writeln!(v, "    assign {n}_awlen = 8'd0;\n    assign {n}_awsize = 3'd6;\n    assign {n}_awburst = 2'b01;").unwrap();
        writeln!(v, "    assign {n}_wdata = ch_wdata[{} +: 512];\n    assign {n}_wstrb = ch_wstrb[{} +: 64];\n    assign {n}_wvalid = ch_wvalid[{c}];\n    assign ch_wready[{c}] = {n}_wready;\n    assign {n}_wlast = 1'b1;", c * 512, c * 64).unwrap();
        writeln!(v, "    assign ch_bvalid[{c}] = {n}_bvalid;\n    assign {n}_bready = ch_bready[{c}];").unwrap();
        unused.extend([format!("{n}_bresp"), format!("{n}_rresp"), format!("{n}_rlast")]);
    }
    // the host's DMA
    writeln!(v, "    opu_axi_interleave #(.CH_BITS({cb}), .ADDR_BITS({ab}), .ID_BITS(4)) host_dma (").unwrap();
    writeln!(v, "        .clk(host_clk), .rst(host_rst),").unwrap();
    for s in ["awaddr", "awlen", "awid", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bid", "bresp", "bvalid", "bready", "araddr", "arlen", "arid", "arvalid", "arready", "rdata", "rid", "rresp", "rlast", "rvalid", "rready"] {
        writeln!(v, "        .s_{s}(M_AXI_HOST_{s}),").unwrap();
    }
    let m: Vec<String> = ["awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bvalid", "bready", "araddr", "arvalid", "arready", "rdata", "rvalid", "rready"]
        .iter()
        .map(|s| format!(".m_{s}(S_AXI_HOST_{s})"))
        .collect();
    writeln!(v, "        {}\n    );", m.join(", ")).unwrap();
    writeln!(v, "    assign S_AXI_HOST_awlen = 8'd0;\n    assign S_AXI_HOST_awsize = 3'd6;\n    assign S_AXI_HOST_awburst = 2'b01;\n    assign S_AXI_HOST_wlast = 1'b1;").unwrap();
    writeln!(v, "    assign S_AXI_HOST_arlen = 8'd0;\n    assign S_AXI_HOST_arsize = 3'd6;\n    assign S_AXI_HOST_arburst = 2'b01;").unwrap();
    unused.extend(["S_AXI_HOST_bresp", "S_AXI_HOST_rresp", "S_AXI_HOST_rlast", "M_AXI_HOST_awsize", "M_AXI_HOST_awburst", "M_AXI_HOST_wlast", "M_AXI_HOST_arsize", "M_AXI_HOST_arburst"].map(String::from));
    writeln!(v, "    wire unused_responses = ^{{{}}};", unused.join(", ")).unwrap();
    writeln!(v, "    /* verilator lint_on UNUSEDSIGNAL */").unwrap();
    // the interrupt, into the bridge's clock domain (a level: high while IRQ_STATUS has a bit and IRQ_ENABLE)
    writeln!(v, "    reg [1:0] irq_sync;\n    always @(posedge host_clk) irq_sync <= {{irq_sync[0], irq}};\n    assign usr_irq_req = irq_sync[1];").unwrap();
    writeln!(v, "endmodule").unwrap();
    v
}

/// Port-for-port stubs of what the vendor tools provide (the block design's module, the transceiver clock
/// buffer), for linting `opu_card` without them. Outputs are tied to 0.
pub fn vendor_stubs(p: &Params) -> String {
    let mut ports = Vec::new();
    let mut ties = Vec::new();
    for (name, width, out) in shell_scalars(p) {
        ports.push(format!("    {} wire {}{name}", if out { "output" } else { "input " }, range(width)));
        if out {
            ties.push(format!("    assign {name} = {width}'d0;"));
        }
    }
    for a in p.interfaces() {
        for s in a.signals() {
            let out = s.from_master == a.shell_master;
            let name = format!("{}_{}", a.name, s.suffix);
            ports.push(format!("    {} wire {}{name}", if out { "output" } else { "input " }, range(s.width)));
            if out {
                ties.push(format!("    assign {name} = {}'d0;", s.width));
            }
        }
    }
    format!(
        "// Stubs of the vendor's modules, port for port, for `verilator --lint-only` without Vivado: the block design\n\
         // opu_shell that build.tcl creates, and the UltraScale+ transceiver clock buffer. Not for synthesis.\n\
         /* verilator lint_off UNUSEDSIGNAL */\n\
         module opu_shell (\n{}\n);\n{}\nendmodule\n\n\
         module IBUFDS_GTE4 #(parameter [1:0] REFCLK_HROW_CK_SEL = 2'b00) (input wire I, input wire IB, input wire CEB, output wire O, output wire ODIV2);\n\
         \x20   assign O = I & ~IB & ~CEB;\n    assign ODIV2 = O;\nendmodule\n/* verilator lint_on UNUSEDSIGNAL */\n",
        ports.join(",\n"),
        ties.join("\n")
    )
}

/// The board's pins and the clocks they bring (XDC).
pub fn constraints(p: &Params) -> String {
    format!(
        "# Constraints of the OPU card image for {board} ({part}). Written by `opu rtl project`.\n\
         # Pins from the board's user guide (UG1314); the PCIe lanes are placed by the XDMA IP (board interface\n\
         # pci_express_x16).\n\
         set_property CFGBVS GND [current_design]\n\
         set_property CONFIG_VOLTAGE 1.8 [current_design]\n\
         set_property CONFIG_MODE SPIx4 [current_design]\n\
         set_property BITSTREAM.CONFIG.SPI_BUSWIDTH 4 [current_design]\n\
         set_property BITSTREAM.CONFIG.CONFIGRATE 85.0 [current_design]\n\
         set_property BITSTREAM.GENERAL.COMPRESS TRUE [current_design]\n\
         \n\
         # PCIe: the x16 reference clock (MGTREFCLK0 of quad 225) and PERST#\n\
         set_property PACKAGE_PIN AR15 [get_ports pcie_refclk_p]\n\
         set_property PACKAGE_PIN AR14 [get_ports pcie_refclk_n]\n\
         create_clock -period 10.000 -name pcie_refclk [get_ports pcie_refclk_p]\n\
         set_property -dict {{PACKAGE_PIN BH26 IOSTANDARD LVCMOS18 PULLUP true}} [get_ports pcie_perst_n]\n\
         set_false_path -from [get_ports pcie_perst_n]\n\
         \n\
         # the 100 MHz system clock: the HBM's reference and the core clock's source\n\
         set_property -dict {{PACKAGE_PIN BJ43 IOSTANDARD LVDS}} [get_ports sysclk_p]\n\
         set_property -dict {{PACKAGE_PIN BJ44 IOSTANDARD LVDS}} [get_ports sysclk_n]\n\
         create_clock -period 10.000 -name sysclk [get_ports sysclk_p]\n\
         \n\
         # HBM catastrophic temperature: must be driven (the satellite controller powers the card down if it floats high)\n\
         set_property -dict {{PACKAGE_PIN D32 IOSTANDARD LVCMOS18 PULLTYPE PULLDOWN}} [get_ports hbm_cattrip]\n\
         \n\
         # the core ({core} MHz) and the bridge ({host} MHz) meet only through synchronizers and the SmartConnects\n\
         set_clock_groups -asynchronous -group [get_clocks -of_objects [get_pins -hierarchical -filter {{NAME =~ *shell*core_clk*}}]] -group [get_clocks -of_objects [get_pins -hierarchical -filter {{NAME =~ *shell*host_clk*}}]]\n",
        board = p.board.name,
        part = p.board.part,
        core = p.config.core_clock_mhz,
        host = 250,
    )
}

/// The Vivado build: the project, the block design `opu_shell`, synthesis, implementation, the bitstream
/// and its sidecar beside it. `OPU_BUILD_DRY_RUN` (lint/check_build.tcl) skips copying the results.
pub fn build_tcl(p: &Params) -> String {
    let mut t = String::new();
    let hash = opu_hw::image::hash_text(p.config.hash());
    writeln!(t, "# Builds the OPU card image for {} ({}), overlay `{}` (config hash {hash}).", p.board.name, p.board.part, p.config.name).unwrap();
    writeln!(t, "# Written by `opu rtl project`. Run: vivado -mode batch -source build.tcl").unwrap();
    writeln!(t, "# The bitstream and its sidecar land in build/opu_card.bit and build/opu_card.opu.json (for `opu flash`).").unwrap();
    writeln!(t, "set here [file dirname [file normalize [info script]]]").unwrap();
    writeln!(t, "set jobs [expr {{[info exists ::env(OPU_BUILD_JOBS)] ? $::env(OPU_BUILD_JOBS) : 8}}]").unwrap();
    writeln!(t, "create_project -force opu_card [file join $here vivado] -part {}", p.board.part).unwrap();
    writeln!(t, "set_property board_part {} [current_project]", p.board.board_part).unwrap();
    writeln!(t, "add_files -norecurse [glob [file join $here hdl *.v]]").unwrap();
    writeln!(t, "add_files -fileset constrs_1 -norecurse [file join $here constraints opu_card.xdc]").unwrap();
    writeln!(t, "set_property top {CARD_TOP} [current_fileset]\n").unwrap();
    writeln!(t, "# ---- the shell: a block design of the vendor IP ----").unwrap();
    writeln!(t, "create_bd_design opu_shell").unwrap();
    writeln!(t, "# XDMA: PCIe Gen3 x{}, 512-bit AXI at 250 MHz, BAR 0 an AXI4-Lite master of {} KiB, {} DMA channels each way,", p.board.pcie_lanes, opu_hw::pci::BAR0_BYTES >> 10, opu_hw::pci::DMA_CHANNELS).unwrap();
    writeln!(t, "# one user interrupt; the OPU's PCI identity").unwrap();
    writeln!(t, "set xdma [create_bd_cell -type ip -vlnv xilinx.com:ip:xdma:4.1 xdma_0]").unwrap();
    writeln!(
        t,
        "set_property -dict [list CONFIG.PCIE_BOARD_INTERFACE {{pci_express_x16}} CONFIG.mode_selection {{Advanced}} \\\n    CONFIG.pl_link_cap_max_link_width {{X{lanes}}} CONFIG.pl_link_cap_max_link_speed {{8.0_GT/s}} CONFIG.axi_data_width {{512_bit}} \\\n    CONFIG.axisten_freq {{250}} CONFIG.pf0_device_id {{{dev:04X}}} CONFIG.pf0_class_code_base {{12}} CONFIG.pf0_class_code_sub {{00}} \\\n    CONFIG.pf0_class_code_interface {{00}} CONFIG.axilite_master_en {{true}} CONFIG.axilite_master_size {{{bar}}} \\\n    CONFIG.axilite_master_scale {{Kilobytes}} CONFIG.xdma_rnum_chnl {{{chn}}} CONFIG.xdma_wnum_chnl {{{chn}}} CONFIG.xdma_num_usr_irq {{1}}] $xdma",
        lanes = p.board.pcie_lanes,
        dev = opu_hw::pci::DEVICE_ID,
        bar = opu_hw::pci::BAR0_BYTES >> 10,
        chn = opu_hw::pci::DMA_CHANNELS
    )
    .unwrap();
    writeln!(t, "# HBM: both stacks, {} pseudo-channels of {} MiB, AXI at {} MHz, the switch on (the host's DMA enters at port 0)", p.channels, p.board.channel_bytes >> 20, p.config.mem_clock_mhz).unwrap();
    writeln!(t, "set hbm [create_bd_cell -type ip -vlnv xilinx.com:ip:hbm:1.0 hbm_0]").unwrap();
    writeln!(
        t,
        "set_property -dict [list CONFIG.USER_HBM_DENSITY {{8GB}} CONFIG.USER_HBM_STACK {{2}} CONFIG.USER_SWITCH_ENABLE_00 {{TRUE}} \\\n    CONFIG.USER_SWITCH_ENABLE_01 {{TRUE}} CONFIG.USER_AXI_CLK_FREQ {{{}}} CONFIG.USER_HBM_REF_CLK_0 {{100}} CONFIG.USER_HBM_REF_CLK_1 {{100}} \\\n    CONFIG.USER_APB_PCLK_0 {{100}} CONFIG.USER_APB_PCLK_1 {{100}}] $hbm",
        p.config.mem_clock_mhz
    )
    .unwrap();
    writeln!(t, "# clocks: the 100 MHz system clock to the core ({} MHz), the HBM's AXI ({} MHz) and APB (100 MHz)", p.config.core_clock_mhz, p.config.mem_clock_mhz).unwrap();
    writeln!(t, "set clk [create_bd_cell -type ip -vlnv xilinx.com:ip:clk_wiz:6.0 clk_0]").unwrap();
    writeln!(
        t,
        "set_property -dict [list CONFIG.PRIM_SOURCE {{Differential_clock_capable_pin}} CONFIG.PRIM_IN_FREQ {{100}} CONFIG.NUM_OUT_CLKS {{3}} \\\n    CONFIG.CLKOUT1_REQUESTED_OUT_FREQ {{{}}} CONFIG.CLKOUT2_USED {{true}} CONFIG.CLKOUT2_REQUESTED_OUT_FREQ {{{}}} \\\n    CONFIG.CLKOUT3_USED {{true}} CONFIG.CLKOUT3_REQUESTED_OUT_FREQ {{100}}] $clk",
        p.config.core_clock_mhz, p.config.mem_clock_mhz
    )
    .unwrap();
    writeln!(t, "set rst_core [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset:5.0 rst_core]").unwrap();
    writeln!(t, "set rst_hbm [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset:5.0 rst_hbm]").unwrap();
    writeln!(t, "set cattrip [create_bd_cell -type ip -vlnv xilinx.com:ip:util_vector_logic:2.0 cattrip_or]").unwrap();
    writeln!(t, "set_property -dict [list CONFIG.C_OPERATION {{or}} CONFIG.C_SIZE {{1}}] $cattrip").unwrap();
    writeln!(t, "# BAR 0 into the core clock domain").unwrap();
    writeln!(t, "set sc_bar [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect:1.0 sc_bar]").unwrap();
    writeln!(t, "set_property -dict [list CONFIG.NUM_SI {{1}} CONFIG.NUM_CLKS {{2}}] $sc_bar\n").unwrap();
    writeln!(t, "# ---- the boundary our Verilog (opu_card) connects to ----").unwrap();
    for (name, width, out) in shell_scalars(p) {
        if name.starts_with("pcie_mgt") || name.starts_with("sysclk") {
            continue;
        }
        let dir = if out { "O" } else { "I" };
        let ty = match name {
            "core_clk" | "host_clk" | "pcie_refclk" | "pcie_refclk_gt" => " -type clk",
            "core_rstn" | "host_rstn" | "pcie_perst_n" => " -type rst",
            _ => "",
        };
        let from = if width > 1 { format!(" -from {} -to 0", width - 1) } else { String::new() };
        writeln!(t, "create_bd_port -dir {dir}{ty}{from} {name}").unwrap();
    }
    writeln!(t, "create_bd_intf_port -mode Master -vlnv xilinx.com:interface:pcie_7x_mgt_rtl:1.0 pcie_mgt").unwrap();
    writeln!(t, "create_bd_intf_port -mode Slave -vlnv xilinx.com:interface:diff_clock_rtl:1.0 sysclk").unwrap();
    writeln!(t, "set_property CONFIG.FREQ_HZ 100000000 [get_bd_intf_ports sysclk]").unwrap();
    for a in p.interfaces() {
        let mode = if a.shell_master { "Master" } else { "Slave" };
        writeln!(t, "create_bd_intf_port -mode {mode} -vlnv xilinx.com:interface:aximm_rtl:1.0 {}", a.name).unwrap();
        writeln!(
            t,
            "set_property -dict [list CONFIG.PROTOCOL {{{}}} CONFIG.DATA_WIDTH {{{}}} CONFIG.ADDR_WIDTH {{{}}} CONFIG.ID_WIDTH {{{}}} \\\n    CONFIG.HAS_LOCK {{0}} CONFIG.HAS_CACHE {{0}} CONFIG.HAS_PROT {{0}} CONFIG.HAS_QOS {{0}} CONFIG.HAS_REGION {{0}}] [get_bd_intf_ports {}]",
            if a.lite { "AXI4LITE" } else { "AXI4" },
            a.data,
            a.addr,
            a.id,
            a.name
        )
        .unwrap();
    }
    let core_busses: Vec<String> = p.interfaces().iter().filter(|a| a.clock == "core_clk").map(|a| a.name.clone()).collect();
    writeln!(t, "set_property CONFIG.ASSOCIATED_BUSIF {{{}}} [get_bd_ports core_clk]", core_busses.join(":")).unwrap();
    writeln!(t, "set_property CONFIG.ASSOCIATED_BUSIF {{M_AXI_HOST:S_AXI_HOST}} [get_bd_ports host_clk]\n").unwrap();
    writeln!(t, "# ---- connections ----").unwrap();
    for (a, b) in [
        ("get_bd_ports pcie_refclk_gt", "get_bd_pins xdma_0/sys_clk_gt"),
        ("get_bd_ports pcie_refclk", "get_bd_pins xdma_0/sys_clk"),
        ("get_bd_ports pcie_perst_n", "get_bd_pins xdma_0/sys_rst_n"),
        ("get_bd_ports usr_irq_req", "get_bd_pins xdma_0/usr_irq_req"),
        ("get_bd_pins xdma_0/axi_aclk", "get_bd_ports host_clk"),
        ("get_bd_pins xdma_0/axi_aresetn", "get_bd_ports host_rstn"),
        ("get_bd_pins clk_0/clk_out1", "get_bd_ports core_clk"),
        ("get_bd_pins rst_core/peripheral_aresetn", "get_bd_ports core_rstn"),
        ("get_bd_pins cattrip_or/Res", "get_bd_ports hbm_cattrip"),
    ] {
        writeln!(t, "connect_bd_net [{a}] [{b}]").unwrap();
    }
    writeln!(t, "connect_bd_intf_net [get_bd_intf_ports pcie_mgt] [get_bd_intf_pins xdma_0/pcie_mgt]").unwrap();
    writeln!(t, "connect_bd_intf_net [get_bd_intf_ports sysclk] [get_bd_intf_pins clk_0/CLK_IN1_D]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins clk_0/clk_out1] [get_bd_pins rst_core/slowest_sync_clk]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins clk_0/clk_out2] [get_bd_pins rst_hbm/slowest_sync_clk]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins clk_0/locked] [get_bd_pins rst_core/dcm_locked] [get_bd_pins rst_hbm/dcm_locked]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins rst_core/ext_reset_in] [get_bd_pins rst_hbm/ext_reset_in]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins clk_0/clk_out3] [get_bd_pins hbm_0/HBM_REF_CLK_0] [get_bd_pins hbm_0/HBM_REF_CLK_1] [get_bd_pins hbm_0/APB_0_PCLK] [get_bd_pins hbm_0/APB_1_PCLK]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins rst_hbm/peripheral_aresetn] [get_bd_pins hbm_0/APB_0_PRESET_N] [get_bd_pins hbm_0/APB_1_PRESET_N]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins hbm_0/DRAM_0_STAT_CATTRIP] [get_bd_pins cattrip_or/Op1]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins hbm_0/DRAM_1_STAT_CATTRIP] [get_bd_pins cattrip_or/Op2]").unwrap();
    writeln!(t, "connect_bd_intf_net [get_bd_intf_pins xdma_0/M_AXI_LITE] [get_bd_intf_pins sc_bar/S00_AXI]").unwrap();
    writeln!(t, "connect_bd_intf_net [get_bd_intf_pins sc_bar/M00_AXI] [get_bd_intf_ports M_AXIL]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins xdma_0/axi_aclk] [get_bd_pins sc_bar/aclk]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins clk_0/clk_out1] [get_bd_pins sc_bar/aclk1]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins xdma_0/axi_aresetn] [get_bd_pins sc_bar/aresetn]").unwrap();
    writeln!(t, "connect_bd_intf_net [get_bd_intf_pins xdma_0/M_AXI] [get_bd_intf_ports M_AXI_HOST]").unwrap();
    writeln!(t, "# one SmartConnect per pseudo-channel: the core clock's 512-bit AXI4 to the HBM's 256-bit AXI3; port 0's also").unwrap();
    writeln!(t, "# takes the host's DMA (the HBM switch routes it to every pseudo-channel)").unwrap();
    writeln!(t, "for {{set c 0}} {{$c < {}}} {{incr c}} {{", p.channels).unwrap();
    writeln!(t, "    set n [format %02d $c]").unwrap();
    writeln!(t, "    set sc [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect:1.0 sc_ch$n]").unwrap();
    writeln!(t, "    set_property -dict [list CONFIG.NUM_SI [expr {{$c == 0 ? 2 : 1}}] CONFIG.NUM_CLKS [expr {{$c == 0 ? 3 : 2}}]] $sc").unwrap();
    writeln!(t, "    connect_bd_intf_net [get_bd_intf_ports S_AXI_CH$n] [get_bd_intf_pins sc_ch$n/S00_AXI]").unwrap();
    writeln!(t, "    connect_bd_intf_net [get_bd_intf_pins sc_ch$n/M00_AXI] [get_bd_intf_pins hbm_0/SAXI_$n]").unwrap();
    writeln!(t, "    connect_bd_net [get_bd_pins clk_0/clk_out1] [get_bd_pins sc_ch$n/aclk]").unwrap();
    writeln!(t, "    connect_bd_net [get_bd_pins clk_0/clk_out2] [get_bd_pins sc_ch$n/aclk1] [get_bd_pins hbm_0/AXI_${{n}}_ACLK]").unwrap();
    writeln!(t, "    connect_bd_net [get_bd_pins rst_core/peripheral_aresetn] [get_bd_pins sc_ch$n/aresetn]").unwrap();
    writeln!(t, "    connect_bd_net [get_bd_pins rst_hbm/peripheral_aresetn] [get_bd_pins hbm_0/AXI_${{n}}_ARESET_N]").unwrap();
    writeln!(t, "}}").unwrap();
    writeln!(t, "connect_bd_intf_net [get_bd_intf_ports S_AXI_HOST] [get_bd_intf_pins sc_ch00/S01_AXI]").unwrap();
    writeln!(t, "connect_bd_net [get_bd_pins xdma_0/axi_aclk] [get_bd_pins sc_ch00/aclk2]").unwrap();
    writeln!(t, "assign_bd_address").unwrap();
    writeln!(t, "validate_bd_design").unwrap();
    writeln!(t, "save_bd_design").unwrap();
    writeln!(t, "generate_target all [get_files opu_shell.bd]\n").unwrap();
    writeln!(t, "# ---- synthesis, implementation, bitstream ----").unwrap();
    writeln!(t, "launch_runs synth_1 -jobs $jobs").unwrap();
    writeln!(t, "wait_on_run synth_1").unwrap();
    writeln!(t, "launch_runs impl_1 -to_step write_bitstream -jobs $jobs").unwrap();
    writeln!(t, "wait_on_run impl_1").unwrap();
    writeln!(t, "if {{![info exists ::env(OPU_BUILD_DRY_RUN)]}} {{").unwrap();
    writeln!(t, "    set bit [file join [get_property DIRECTORY [get_runs impl_1]] {CARD_TOP}.bit]").unwrap();
    writeln!(t, "    if {{![file exists $bit]}} {{ error \"no bitstream at $bit: see the impl_1 run's log\" }}").unwrap();
    writeln!(t, "    file mkdir [file join $here build]").unwrap();
    writeln!(t, "    file copy -force $bit [file join $here build {CARD_TOP}.bit]").unwrap();
    writeln!(t, "    file copy -force [file join $here {SIDECAR}] [file join $here build {CARD_TOP}.opu.json]").unwrap();
    writeln!(t, "    puts \"bitstream: [file join $here build {CARD_TOP}.bit]; program it with: opu flash [file join $here build {CARD_TOP}.bit]\"").unwrap();
    writeln!(t, "}}").unwrap();
    t
}

/// Runs build.tcl under plain `tclsh`, every command Tcl does not know (Vivado's) recorded instead of run.
pub const CHECK_BUILD_TCL: &str = r#"# Runs build.tcl under plain tclsh with every Vivado command recorded instead of run: catches what Tcl
# itself would stop at (syntax, unbalanced braces, unset variables, bad expressions) without Vivado.
# Usage: tclsh lint/check_build.tcl [build.tcl]   Prints the number of Vivado commands and each one's name.
set ::opu_calls {}
rename unknown tcl_unknown
proc unknown {cmd args} {
    lappend ::opu_calls [concat [list $cmd] $args]
    return $cmd
}
set ::env(OPU_BUILD_DRY_RUN) 1
set script [file join [file dirname [file normalize [info script]]] .. build.tcl]
if {$argc > 0} { set script [lindex $argv 0] }
if {[catch {source $script} err]} {
    puts stderr "$script: $err"
    puts stderr $::errorInfo
    exit 1
}
puts "[llength $::opu_calls] Vivado commands"
foreach c $::opu_calls { puts $c }
"#;

/// What the project is and how to use it.
pub fn readme(p: &Params, s: &Sidecar) -> String {
    format!(
        "# OPU card image: {board}, overlay `{cfg}`\n\n\
         Written by `opu rtl project` (opu {ver}, {date}). Config hash {hash}, register map {isa}, PCI {vendor}:{device}.\n\n\
         ```sh\n\
         vivado -mode batch -source build.tcl        # -> build/opu_card.bit and build/opu_card.opu.json\n\
         opu flash build/opu_card.bit --method openfpgaloader --device BDF   # over the card's JTAG\n\
         opu devices                                  # the card, its overlay and config hash\n\
         ```\n\n\
         - `hdl/opu_top.v`: the overlay (generated from opu-rtl for `{cfg}`).\n\
         - `hdl/opu_card.v`: the top: pins, the block design `opu_shell`, the overlay and our AXI glue\n\
         \x20 (`opu_axil_mmio.v`, `opu_mem_fabric.v`, `opu_axi_interleave.v`, `opu_fifo.v`).\n\
         - `build.tcl`: the Vivado project, the block design (XDMA, HBM, clocks, SmartConnects), the runs.\n\
         - `constraints/opu_card.xdc`: pins and clocks.\n\
         - `{sidecar}`: what the image holds; `opu flash` checks it against the card after programming.\n\
         - `lint/`, `sim/`: checks without Vivado: `verilator --lint-only -Wall -Wno-fatal --top-module opu_card hdl/*.v lint/vendor_stubs.v`,\n\
         \x20 `tclsh lint/check_build.tcl`, and the AXI glue against an adversarial AXI memory:\n\
         \x20 `verilator --binary --timing -Wno-fatal --top-module tb_glue sim/tb_glue.sv hdl/opu_mem_fabric.v hdl/opu_axi_interleave.v hdl/opu_fifo.v && obj_dir/Vtb_glue`.\n\n\
         Nobody has run this project through Vivado yet: the IP configuration in build.tcl follows the vendors' documented\n\
         property names but has not met the tools, and the AXI glue has been simulated against a model of AXI, not the IP.\n",
        board = p.board.name,
        cfg = p.config.name,
        ver = s.opu_version,
        date = s.build_date,
        hash = s.config_hash,
        isa = s.isa_version,
        vendor = s.pci_vendor,
        device = s.pci_device,
        sidecar = SIDECAR,
    )
}

// opu_axil_mmio: BAR 0 (the PCIe bridge's AXI4-Lite master, in the core clock domain) onto the overlay's
// register port. One access at a time: a write becomes an mmio_write pulse and its response; a read an
// mmio_read pulse, answered when the register file raises mmio_rvalid (the next cycle). Offsets past the
// register map (4 KiB: the register port's 12 bits) are not forwarded (the 12-bit register port would alias them): writes there
// are dropped and reads return 0, as opu_hw::pci::BAR0_BYTES says. Registers are 32-bit: WSTRB is
// not looked at.
module opu_axil_mmio #(
    parameter integer ADDR_BITS = 16
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire [ADDR_BITS-1:0] s_awaddr,
    input  wire                 s_awvalid,
    output wire                 s_awready,
    input  wire [31:0]          s_wdata,
    input  wire [3:0]           s_wstrb,
    input  wire                 s_wvalid,
    output wire                 s_wready,
    output wire [1:0]           s_bresp,
    output reg                  s_bvalid,
    input  wire                 s_bready,
    input  wire [ADDR_BITS-1:0] s_araddr,
    input  wire                 s_arvalid,
    output wire                 s_arready,
    output reg  [31:0]          s_rdata,
    output wire [1:0]           s_rresp,
    output reg                  s_rvalid,
    input  wire                 s_rready,
    output reg  [11:0]          mmio_addr,
    output reg  [31:0]          mmio_wdata,
    output reg                  mmio_write,
    output reg                  mmio_read,
    input  wire [31:0]          mmio_rdata,
    input  wire                 mmio_rvalid
);
    // a read the register file has not answered yet
    reg rd_wait;
    wire idle = !rd_wait && !s_rvalid && !s_bvalid;
    wire take_w = idle && s_awvalid && s_wvalid;
    wire take_r = idle && s_arvalid && !take_w;
    wire aw_in_map = ~|s_awaddr[ADDR_BITS-1:12];
    wire ar_in_map = ~|s_araddr[ADDR_BITS-1:12];
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused_strb = &s_wstrb;
    /* verilator lint_on UNUSEDSIGNAL */
    assign s_awready = take_w;
    assign s_wready = take_w;
    assign s_arready = take_r;
    assign s_bresp = 2'b00;
    assign s_rresp = 2'b00;
    always @(posedge clk) begin
        if (rst) begin
            s_bvalid <= 1'b0;
            s_rvalid <= 1'b0;
            s_rdata <= 32'd0;
            rd_wait <= 1'b0;
            mmio_addr <= 12'd0;
            mmio_wdata <= 32'd0;
            mmio_write <= 1'b0;
            mmio_read <= 1'b0;
        end else begin
            mmio_write <= 1'b0;
            mmio_read <= 1'b0;
            if (take_w) begin
                mmio_addr <= s_awaddr[11:0];
                mmio_wdata <= s_wdata;
                mmio_write <= aw_in_map;
                s_bvalid <= 1'b1;
            end else if (s_bvalid && s_bready) begin
                s_bvalid <= 1'b0;
            end
            if (take_r) begin
                mmio_addr <= s_araddr[11:0];
                if (ar_in_map) begin
                    mmio_read <= 1'b1;
                    rd_wait <= 1'b1;
                end else begin
                    s_rdata <= 32'd0;
                    s_rvalid <= 1'b1;
                end
            end else if (rd_wait && mmio_rvalid) begin
                s_rdata <= mmio_rdata;
                s_rvalid <= 1'b1;
                rd_wait <= 1'b0;
            end else if (s_rvalid && s_rready) begin
                s_rvalid <= 1'b0;
            end
        end
    end
endmodule

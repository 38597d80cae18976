// opu_axi_interleave: the PCIe bridge's DMA (an AXI4 slave here, 512-bit beats) onto device memory laid
// out as opu_mem_fabric lays it: byte address {hi, c, off} at memory address {c, hi, off}, with runs of
// 64 bytes (one beat). Each beat of a burst becomes a one-beat transaction at its own address. One burst
// each way at a time: a write burst's B is given once every beat's B has come back; a read burst's beats
// come back in order (one AXI ID downstream) and the last gets RLAST. Bursts are INCR of full 64-byte
// beats, as the XDMA engine issues them (WSTRB masks a partial beat).
module opu_axi_interleave #(
    parameter integer CH_BITS = 5,
    parameter integer ADDR_BITS = 33,
    parameter integer ID_BITS = 4
) (
    input  wire                 clk,
    input  wire                 rst,
    // from the bridge
    input  wire [63:0]          s_awaddr,
    input  wire [7:0]           s_awlen,
    input  wire [ID_BITS-1:0]   s_awid,
    input  wire                 s_awvalid,
    output wire                 s_awready,
    input  wire [511:0]         s_wdata,
    input  wire [63:0]          s_wstrb,
    input  wire                 s_wvalid,
    output wire                 s_wready,
    output reg  [ID_BITS-1:0]   s_bid,
    output wire [1:0]           s_bresp,
    output reg                  s_bvalid,
    input  wire                 s_bready,
    input  wire [63:0]          s_araddr,
    input  wire [7:0]           s_arlen,
    input  wire [ID_BITS-1:0]   s_arid,
    input  wire                 s_arvalid,
    output wire                 s_arready,
    output wire [511:0]         s_rdata,
    output reg  [ID_BITS-1:0]   s_rid,
    output wire [1:0]           s_rresp,
    output wire                 s_rlast,
    output wire                 s_rvalid,
    input  wire                 s_rready,
    // to memory: one beat per transaction
    output reg  [ADDR_BITS-1:0] m_awaddr,
    output reg                  m_awvalid,
    input  wire                 m_awready,
    output reg  [511:0]         m_wdata,
    output reg  [63:0]          m_wstrb,
    output reg                  m_wvalid,
    input  wire                 m_wready,
    input  wire                 m_bvalid,
    output wire                 m_bready,
    output reg  [ADDR_BITS-1:0] m_araddr,
    output reg                  m_arvalid,
    input  wire                 m_arready,
    input  wire [511:0]         m_rdata,
    input  wire                 m_rvalid,
    output wire                 m_rready
);
    localparam integer HI = ADDR_BITS - 6 - CH_BITS;

    // {hi, c, off} -> {c, hi, off} (off is 0: beats are whole runs; bits past device memory are not decoded)
    /* verilator lint_off UNUSEDSIGNAL */
    function [ADDR_BITS-1:0] place(input [63:0] a);
        place = {a[6 +: CH_BITS], a[6 + CH_BITS +: HI], 6'b0};
    endfunction
    /* verilator lint_on UNUSEDSIGNAL */

    // write burst: where its next beat goes, beats left to send, B responses still to come
    reg w_busy;
    reg [63:0] w_next;
    reg [8:0] w_left;
    reg [8:0] b_left;
    assign s_awready = !w_busy && !s_bvalid;
    wire beat_free = !m_awvalid && !m_wvalid;
    assign s_wready = w_busy && w_left != 0 && beat_free;
    assign m_bready = 1'b1;
    assign s_bresp = 2'b00;
    always @(posedge clk) begin
        if (rst) begin
            w_busy <= 1'b0;
            w_next <= 64'd0;
            w_left <= 9'd0;
            b_left <= 9'd0;
            s_bvalid <= 1'b0;
            s_bid <= {ID_BITS{1'b0}};
            m_awvalid <= 1'b0;
            m_wvalid <= 1'b0;
            m_awaddr <= {ADDR_BITS{1'b0}};
            m_wdata <= 512'd0;
            m_wstrb <= 64'd0;
        end else begin
            if (s_awvalid && s_awready) begin
                w_busy <= 1'b1;
                w_next <= s_awaddr;
                w_left <= {1'b0, s_awlen} + 9'd1;
                b_left <= {1'b0, s_awlen} + 9'd1;
                s_bid <= s_awid;
            end
            if (s_wvalid && s_wready) begin
                m_awaddr <= place(w_next);
                m_awvalid <= 1'b1;
                m_wdata <= s_wdata;
                m_wstrb <= s_wstrb;
                m_wvalid <= 1'b1;
                w_next <= w_next + 64'd64;
                w_left <= w_left - 9'd1;
            end else begin
                if (m_awvalid && m_awready) m_awvalid <= 1'b0;
                if (m_wvalid && m_wready) m_wvalid <= 1'b0;
            end
            if (m_bvalid && w_busy) begin
                b_left <= b_left - 9'd1;
                if (b_left == 9'd1) begin
                    w_busy <= 1'b0;
                    s_bvalid <= 1'b1;
                end
            end
            if (s_bvalid && s_bready) s_bvalid <= 1'b0;
        end
    end

    // read burst: the next beat's address, beats left to request, beats left to return
    reg r_busy;
    reg [63:0] r_next;
    reg [8:0] ar_left;
    reg [8:0] r_left;
    assign s_arready = !r_busy;
    assign s_rdata = m_rdata;
    assign s_rvalid = m_rvalid && r_busy;
    assign m_rready = s_rready && r_busy;
    assign s_rlast = r_left == 9'd1;
    assign s_rresp = 2'b00;
    always @(posedge clk) begin
        if (rst) begin
            r_busy <= 1'b0;
            r_next <= 64'd0;
            ar_left <= 9'd0;
            r_left <= 9'd0;
            s_rid <= {ID_BITS{1'b0}};
            m_arvalid <= 1'b0;
            m_araddr <= {ADDR_BITS{1'b0}};
        end else begin
            if (s_arvalid && s_arready) begin
                r_busy <= 1'b1;
                r_next <= s_araddr;
                ar_left <= {1'b0, s_arlen} + 9'd1;
                r_left <= {1'b0, s_arlen} + 9'd1;
                s_rid <= s_arid;
            end else if (r_busy && ar_left != 0 && (!m_arvalid || m_arready)) begin
                m_araddr <= place(r_next);
                m_arvalid <= 1'b1;
                r_next <= r_next + 64'd64;
                ar_left <= ar_left - 9'd1;
            end else if (m_arvalid && m_arready) begin
                m_arvalid <= 1'b0;
            end
            if (m_rvalid && m_rready) begin
                r_left <= r_left - 9'd1;
                if (r_left == 9'd1) r_busy <= 1'b0;
            end
        end
    end
endmodule

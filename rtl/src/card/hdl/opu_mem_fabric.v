// opu_mem_fabric: the overlay's line port and weight port onto one AXI4 master per memory channel (an HBM
// pseudo-channel), in the core clock domain. Runs of 64 bytes (RUN_LOG2 = 6, 512-bit channels: the u280
// preset's memory); a line is half a run.
//
// Device memory is interleaved over the channels in runs of 2^RUN_LOG2 bytes, round robin
// (OverlayConfig::channel_of): byte address {hi, c, off} (c: CH_BITS bits, off: RUN_LOG2 bits) lies in
// channel c at channel address {hi, off}, which is memory address {c, hi, off} (each channel owns
// 2^(ADDR_BITS - CH_BITS) bytes from c << (ADDR_BITS - CH_BITS)). Every transfer is one beat of one run:
//   - a line (32 bytes) is a run or half of one: a read reads the run and keeps the half, a write masks the
//     other half out (WSTRB);
//   - a weight request (2^(RUN_LOG2 + CH_BITS) bytes at an aligned address) is one run of every channel,
//     read side by side; w_rdata holds channel c's run at bits [c * DATA +: DATA].
//
// Ordering: the overlay expects a read to see every write it requested before (the memory model of
// opu-rtlsim applies a write when it takes it), but AXI does not order a channel's reads after its writes.
// So a channel takes a read only when none of its writes awaits its B response, and a write only when none
// of its reads awaits its R data. Reads of one channel come back in order (one AXI ID), line responses are
// given to the overlay in the order it requested them (m_resp_tag echoed) and weight responses when every
// channel has its run. Responses have no back-pressure, so a read is taken only where its data has room.
module opu_mem_fabric #(
    parameter integer CHANNELS = 32,
    parameter integer CH_BITS = 5,
    parameter integer RUN_LOG2 = 6,
    parameter integer ADDR_BITS = 33,
    parameter integer DEPTH_LOG2 = 5
) (
    input  wire                          clk,
    input  wire                          rst,
    // line port
    input  wire                          m_req,
    output wire                          m_req_ready,
    input  wire                          m_write,
    input  wire [63:0]                   m_addr,
    input  wire [255:0]                  m_wdata,
    input  wire [31:0]                   m_wmask,
    input  wire [1:0]                    m_tag,
    output reg                           m_resp,
    output reg  [255:0]                  m_rdata,
    output reg  [1:0]                    m_resp_tag,
    // weight port
    input  wire                          w_req,
    output wire                          w_req_ready,
    input  wire [63:0]                   w_addr,
    output reg                           w_resp,
    output reg  [CHANNELS*(8 << RUN_LOG2)-1:0] w_rdata,
    // one AXI4 master per channel: channel c's signals at [c * width +: width]; single beats (LEN 0,
    // SIZE RUN_LOG2, the wrapper ties the constant fields)
    output wire [CHANNELS*ADDR_BITS-1:0] axi_araddr,
    output wire [CHANNELS-1:0]           axi_arvalid,
    input  wire [CHANNELS-1:0]           axi_arready,
    input  wire [CHANNELS*(8 << RUN_LOG2)-1:0] axi_rdata,
    input  wire [CHANNELS-1:0]           axi_rvalid,
    output wire [CHANNELS-1:0]           axi_rready,
    output wire [CHANNELS*ADDR_BITS-1:0] axi_awaddr,
    output wire [CHANNELS-1:0]           axi_awvalid,
    input  wire [CHANNELS-1:0]           axi_awready,
    output wire [CHANNELS*(8 << RUN_LOG2)-1:0] axi_wdata,
    output wire [CHANNELS*(1 << RUN_LOG2)-1:0] axi_wstrb,
    output wire [CHANNELS-1:0]           axi_wvalid,
    input  wire [CHANNELS-1:0]           axi_wready,
    input  wire [CHANNELS-1:0]           axi_bvalid,
    output wire [CHANNELS-1:0]           axi_bready
);
    localparam integer DATA = 8 << RUN_LOG2;
    localparam integer STRB = 1 << RUN_LOG2;
    localparam integer HI = ADDR_BITS - RUN_LOG2 - CH_BITS;
    localparam integer HALVES = 2;
    localparam [DEPTH_LOG2:0] FULL = {1'b1, {DEPTH_LOG2{1'b0}}};

    // the line's byte address and where it lies
    /* verilator lint_off UNUSEDSIGNAL */
    wire [68:0] line_byte = {m_addr, 5'b0};
    wire [69:0] weight_byte = {w_addr, 6'b0};
    /* verilator lint_on UNUSEDSIGNAL */
    wire [CH_BITS-1:0] lc = line_byte[RUN_LOG2 +: CH_BITS];
    wire [HI-1:0] line_hi = line_byte[RUN_LOG2 + CH_BITS +: HI];
    wire [HI-1:0] weight_hi = weight_byte[RUN_LOG2 + CH_BITS +: HI];
    wire line_half = line_byte[5];

    wire [CHANNELS-1:0] can_read;
    wire [CHANNELS-1:0] can_write;
    wire order_in_ready;
    // (the overlay requests on one port per cycle; the weight port would win)
    assign m_req_ready = !w_req && (m_write ? can_write[lc] : (can_read[lc] && order_in_ready));
    assign w_req_ready = &can_read;
    wire line_rd_go = m_req && m_req_ready && !m_write;
    wire line_wr_go = m_req && m_req_ready && m_write;
    wire weight_go = w_req && w_req_ready;

    // the line reads in flight, in request order: channel, tag, half
    wire order_valid;
    wire [CH_BITS+2:0] order_head;
    wire [CH_BITS-1:0] head_c = order_head[CH_BITS+2:3];
    wire [1:0] head_tag = order_head[2:1];
    wire head_half = order_head[0];
    wire [CHANNELS-1:0] line_valid;
    wire [CHANNELS*DATA-1:0] line_data;
    wire [CHANNELS-1:0] weight_valid;
    wire [CHANNELS*DATA-1:0] weight_data;
    wire line_pop = order_valid && line_valid[head_c];
    wire weight_pop = &weight_valid;
    opu_fifo #(.WIDTH(CH_BITS + 3), .DEPTH_LOG2(DEPTH_LOG2)) order (
        .clk(clk), .rst(rst),
        .in_valid(line_rd_go), .in_ready(order_in_ready), .in_data({lc, m_tag, line_half}),
        .out_valid(order_valid), .out_ready(line_pop), .out_data(order_head)
    );

    wire [DATA-1:0] head_data = line_data[head_c * DATA +: DATA];
    always @(posedge clk) begin
        if (rst) begin
            m_resp <= 1'b0;
            w_resp <= 1'b0;
            m_rdata <= 256'd0;
            m_resp_tag <= 2'd0;
        end else begin
            m_resp <= line_pop;
            w_resp <= weight_pop;
            if (line_pop) begin
                m_rdata <= head_half ? head_data[DATA-1 -: 256] : head_data[255:0];
                m_resp_tag <= head_tag;
            end
            if (weight_pop) begin
                w_rdata <= weight_data;
            end
        end
    end

    genvar c;
    generate
        for (c = 0; c < CHANNELS; c = c + 1) begin : ch
            reg ar_valid;
            reg [ADDR_BITS-1:0] ar_addr;
            reg aw_valid;
            reg w_valid;
            reg [ADDR_BITS-1:0] aw_addr;
            reg [DATA-1:0] w_data;
            reg [STRB-1:0] w_strb;
            // reads taken whose R has not come; reads taken whose data the overlay has not had; writes
            // whose B has not come
            reg [DEPTH_LOG2:0] rd_inflight;
            reg [DEPTH_LOG2:0] rd_pending;
            reg [DEPTH_LOG2:0] wr_out;
            wire kind_in_ready;
            wire kind_valid;
            wire kind_weight;
            wire r_take = axi_rvalid[c];
            wire b_take = axi_bvalid[c];
            wire rd_go = (line_rd_go && lc == c) || weight_go;
            wire wr_go = line_wr_go && lc == c;
            wire pop_line = line_pop && head_c == c;
            wire [CH_BITS-1:0] me = c;
            assign can_read[c] = !ar_valid && !aw_valid && !w_valid && wr_out == 0 && rd_pending != FULL && kind_in_ready;
            assign can_write[c] = !aw_valid && !w_valid && !ar_valid && rd_inflight == 0 && wr_out != FULL;
            assign axi_araddr[c * ADDR_BITS +: ADDR_BITS] = ar_addr;
            assign axi_arvalid[c] = ar_valid;
            assign axi_rready[c] = 1'b1;
            assign axi_awaddr[c * ADDR_BITS +: ADDR_BITS] = aw_addr;
            assign axi_awvalid[c] = aw_valid;
            assign axi_wdata[c * DATA +: DATA] = w_data;
            assign axi_wstrb[c * STRB +: STRB] = w_strb;
            assign axi_wvalid[c] = w_valid;
            assign axi_bready[c] = 1'b1;
            // what each read taken is for, in order: a line (0) or a weight run (1)
            opu_fifo #(.WIDTH(1), .DEPTH_LOG2(DEPTH_LOG2)) kind (
                .clk(clk), .rst(rst),
                .in_valid(rd_go), .in_ready(kind_in_ready), .in_data(weight_go),
                .out_valid(kind_valid), .out_ready(r_take), .out_data(kind_weight)
            );
            /* verilator lint_off UNUSEDSIGNAL */
            wire line_in_ready;
            wire weight_in_ready;
            wire unused = kind_valid & line_in_ready & weight_in_ready;
            /* verilator lint_on UNUSEDSIGNAL */
            opu_fifo #(.WIDTH(DATA), .DEPTH_LOG2(DEPTH_LOG2)) lines (
                .clk(clk), .rst(rst),
                .in_valid(r_take && !kind_weight), .in_ready(line_in_ready), .in_data(axi_rdata[c * DATA +: DATA]),
                .out_valid(line_valid[c]), .out_ready(pop_line), .out_data(line_data[c * DATA +: DATA])
            );
            opu_fifo #(.WIDTH(DATA), .DEPTH_LOG2(DEPTH_LOG2)) runs (
                .clk(clk), .rst(rst),
                .in_valid(r_take && kind_weight), .in_ready(weight_in_ready), .in_data(axi_rdata[c * DATA +: DATA]),
                .out_valid(weight_valid[c]), .out_ready(weight_pop), .out_data(weight_data[c * DATA +: DATA])
            );
            always @(posedge clk) begin
                if (rst) begin
                    ar_valid <= 1'b0;
                    aw_valid <= 1'b0;
                    w_valid <= 1'b0;
                    ar_addr <= {ADDR_BITS{1'b0}};
                    aw_addr <= {ADDR_BITS{1'b0}};
                    w_data <= {DATA{1'b0}};
                    w_strb <= {STRB{1'b0}};
                    rd_inflight <= {(DEPTH_LOG2 + 1){1'b0}};
                    rd_pending <= {(DEPTH_LOG2 + 1){1'b0}};
                    wr_out <= {(DEPTH_LOG2 + 1){1'b0}};
                end else begin
                    if (rd_go) begin
                        ar_valid <= 1'b1;
                        ar_addr <= {me, weight_go ? weight_hi : line_hi, {RUN_LOG2{1'b0}}};
                    end else if (ar_valid && axi_arready[c]) begin
                        ar_valid <= 1'b0;
                    end
                    if (wr_go) begin
                        aw_valid <= 1'b1;
                        w_valid <= 1'b1;
                        aw_addr <= {me, line_hi, {RUN_LOG2{1'b0}}};
                        w_data <= {HALVES{m_wdata}};
                        w_strb <= line_half ? {m_wmask, 32'd0} : {32'd0, m_wmask};
                    end else begin
                        if (aw_valid && axi_awready[c]) aw_valid <= 1'b0;
                        if (w_valid && axi_wready[c]) w_valid <= 1'b0;
                    end
                    rd_inflight <= rd_inflight + {{DEPTH_LOG2{1'b0}}, rd_go} - {{DEPTH_LOG2{1'b0}}, r_take};
                    rd_pending <= rd_pending + {{DEPTH_LOG2{1'b0}}, rd_go} - {{DEPTH_LOG2{1'b0}}, pop_line} - {{DEPTH_LOG2{1'b0}}, weight_pop};
                    wr_out <= wr_out + {{DEPTH_LOG2{1'b0}}, wr_go} - {{DEPTH_LOG2{1'b0}}, b_take};
                end
            end
        end
    endgenerate
endmodule

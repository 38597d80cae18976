// opu_fifo: a synchronous first-word-fall-through FIFO of 2^DEPTH_LOG2 words of WIDTH bits. A word is
// pushed when in_valid and in_ready, popped when out_valid and out_ready (both in one cycle when it holds
// a word).
module opu_fifo #(
    parameter integer WIDTH = 8,
    parameter integer DEPTH_LOG2 = 4
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  in_valid,
    output wire                  in_ready,
    input  wire [WIDTH-1:0]      in_data,
    output wire                  out_valid,
    input  wire                  out_ready,
    output wire [WIDTH-1:0]      out_data
);
    reg [WIDTH-1:0] mem [0:(1 << DEPTH_LOG2) - 1];
    reg [DEPTH_LOG2:0] rd_ptr;
    reg [DEPTH_LOG2:0] wr_ptr;
    wire [DEPTH_LOG2:0] used = wr_ptr - rd_ptr;
    assign in_ready = used != {1'b1, {DEPTH_LOG2{1'b0}}};
    assign out_valid = used != {(DEPTH_LOG2 + 1){1'b0}};
    assign out_data = mem[rd_ptr[DEPTH_LOG2-1:0]];
    always @(posedge clk) begin
        if (rst) begin
            rd_ptr <= {(DEPTH_LOG2 + 1){1'b0}};
            wr_ptr <= {(DEPTH_LOG2 + 1){1'b0}};
        end else begin
            if (in_valid && in_ready) begin
                mem[wr_ptr[DEPTH_LOG2-1:0]] <= in_data;
                wr_ptr <= wr_ptr + 1'b1;
            end
            if (out_valid && out_ready) begin
                rd_ptr <= rd_ptr + 1'b1;
            end
        end
    end
endmodule

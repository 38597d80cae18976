//! A hand-written module with every Verilator port class, built like a unit.

/// Every Verilator port class: 1, 8 (CData), 13 (SData), 32 (IData), 33 and 64 (QData), 96, 128, 256 and
/// 300 (VlWide), signed and not, registered and combinational; a C++ keyword (`float`), a Rust keyword
/// (`fn`, `loop`) and a `$` (`d$q`) as port names; and a child module after the top whose declarations
/// must not be taken for the top's (its `a8` is 100 bits wide).
pub(crate) const WIDTHS_FIXTURE_V: &str = r#"
module opu_widths_fixture(clock,fn,float,d$q,a8,q8,s13,n13,a32,q32,s33,n33,
    a64,q64,s96,n96,a128,q128,a256,q256,s300,n300,loop,count);

    // Module arguments
    input wire  clock;
    input wire  fn;
    input wire  [2:0] float;
    input wire  [4:0] d$q;
    input wire  [7:0] a8;
    output reg  [7:0] q8;
    input wire signed [12:0] s13;
    output reg signed [12:0] n13;
    input wire  [31:0] a32;
    output reg  [31:0] q32;
    input wire signed [32:0] s33;
    output reg signed [32:0] n33;
    input wire  [63:0] a64;
    output reg  [63:0] q64;
    input wire signed [95:0] s96;
    output reg signed [95:0] n96;
    input wire  [127:0] a128;
    output reg  [127:0] q128;
    input wire  [255:0] a256;
    output reg  [255:0] q256;
    input wire signed [299:0] s300;
    output reg signed [299:0] n300;
    output reg  [7:0] loop;
    output wire  [31:0] count;

    // Stub signals
    wire  [31:0] ctr$count;

    opu_widths_fixture$ctr ctr(
        .clock(clock),
        .a8({92'b0, a8}),
        .count(ctr$count)
    );
    assign count = ctr$count;

    always @(posedge clock) begin
        q8 <= a8 + 8'd1;
        q32 <= a32 ^ 32'hdeadbeef;
        n33 <= -s33;
        q64 <= a64 + 64'd1;
        n96 <= -s96;
        q128 <= a128 + 128'd1;
        q256 <= {a256[254:0], a256[255]};
        loop <= {fn, float, d$q[3:0]} ^ {3'b0, d$q};
    end
    always @(*) begin
        n13 = -s13;
        n300 = ~s300;
    end

endmodule // opu_widths_fixture


module opu_widths_fixture$ctr(clock,a8,count);
    input wire  clock;
    input wire [99:0] a8;
    output reg  [31:0] count;
    always @(posedge clock) begin
        count <= count + 32'd1 + {31'b0, a8[99]};
    end
endmodule // opu_widths_fixture$ctr
"#;

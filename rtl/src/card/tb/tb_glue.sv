// A self-checking testbench of the card image's AXI glue (opu_mem_fabric, opu_axi_interleave) against an
// adversarial AXI memory, as AXI allows one to be: a read's data is taken when its address is accepted or
// only when it is returned, a write lands when its address and data have both arrived or only when its B
// is sent (at random), responses come back after random latencies, every ready is random. The
// oracle is a plain byte array at device addresses (what the overlay and the host expect); the memory the
// glue writes is a second array at HBM addresses. Phases: the host writes bursts through
// opu_axi_interleave; the overlay's line and weight ports run random traffic through opu_mem_fabric (reads
// see every write accepted before them, and no later one); the host reads bursts back. Prints PASS or FAIL.
// Run: verilator --binary --timing tb_glue.sv opu_mem_fabric.v opu_axi_interleave.v opu_fifo.v
module tb_glue;
    localparam integer CH = 4, CB = 2, AB = 16, D = 512, MEM = 1 << AB, WB = CH * D;
    localparam integer CYCLES = 30000, BURSTS = 40;
    reg clk = 1'b0;
    initial forever #5 clk = ~clk;
    reg rst = 1'b1;

    reg [63:0] seed = 64'h9E37_79B9_7F4A_7C15;
    task automatic roll(output [63:0] r);
        seed = seed ^ (seed << 13);
        seed = seed ^ (seed >> 7);
        seed = seed ^ (seed << 17);
        r = seed;
    endtask

    reg [7:0] oracle [0:MEM-1];
    reg [7:0] phys [0:MEM-1];
    // device address -> memory address: {hi, c, off} -> {c, hi, off}
    function automatic [AB-1:0] place(input [AB-1:0] a);
        place = {a[6 +: CB], a[AB-1:6+CB], a[5:0]};
    endfunction

    // ---- the overlay's side ----
    reg m_req = 0, m_write = 0;
    reg [63:0] m_addr = 0;
    reg [255:0] m_wdata = 0;
    reg [31:0] m_wmask = 0;
    reg [1:0] m_tag = 0;
    wire m_req_ready, m_resp;
    wire [255:0] m_rdata;
    wire [1:0] m_resp_tag;
    reg w_req = 0;
    reg [63:0] w_addr = 0;
    wire w_req_ready, w_resp;
    wire [WB-1:0] w_rdata;
    wire [CH*AB-1:0] araddr, awaddr;
    wire [CH-1:0] arvalid, rready, awvalid, wvalid, bready;
    reg [CH-1:0] arready = 0, awready = 0, wready = 0, rvalid = 0, bvalid = 0;
    reg [CH*D-1:0] rdata = 0;
    wire [CH*D-1:0] wdata;
    wire [CH*64-1:0] wstrb;
    opu_mem_fabric #(.CHANNELS(CH), .CH_BITS(CB), .RUN_LOG2(6), .ADDR_BITS(AB), .DEPTH_LOG2(3)) fabric (
        .clk(clk), .rst(rst),
        .m_req(m_req), .m_req_ready(m_req_ready), .m_write(m_write), .m_addr(m_addr), .m_wdata(m_wdata), .m_wmask(m_wmask), .m_tag(m_tag),
        .m_resp(m_resp), .m_rdata(m_rdata), .m_resp_tag(m_resp_tag),
        .w_req(w_req), .w_req_ready(w_req_ready), .w_addr(w_addr), .w_resp(w_resp), .w_rdata(w_rdata),
        .axi_araddr(araddr), .axi_arvalid(arvalid), .axi_arready(arready), .axi_rdata(rdata), .axi_rvalid(rvalid), .axi_rready(rready),
        .axi_awaddr(awaddr), .axi_awvalid(awvalid), .axi_awready(awready), .axi_wdata(wdata), .axi_wstrb(wstrb), .axi_wvalid(wvalid),
        .axi_wready(wready), .axi_bvalid(bvalid), .axi_bready(bready)
    );

    // ---- the host's side ----
    reg [63:0] s_awaddr = 0, s_araddr = 0;
    reg [7:0] s_awlen = 0, s_arlen = 0;
    reg [3:0] s_awid = 0, s_arid = 0;
    reg s_awvalid = 0, s_wvalid = 0, s_arvalid = 0;
    reg [511:0] s_wdata = 0;
    reg [63:0] s_wstrb = 0;
    wire s_awready, s_wready, s_bvalid, s_arready, s_rlast, s_rvalid;
    wire [3:0] s_bid, s_rid;
    wire [1:0] s_bresp, s_rresp;
    wire [511:0] s_rdata;
    wire [AB-1:0] h_awaddr, h_araddr;
    wire h_awvalid, h_wvalid, h_bready, h_arvalid, h_rready;
    wire [511:0] h_wdata;
    wire [63:0] h_wstrb;
    reg h_awready = 0, h_wready = 0, h_bvalid = 0, h_arready = 0, h_rvalid = 0;
    reg [511:0] h_rdata = 0;
    opu_axi_interleave #(.CH_BITS(CB), .ADDR_BITS(AB), .ID_BITS(4)) host (
        .clk(clk), .rst(rst),
        .s_awaddr(s_awaddr), .s_awlen(s_awlen), .s_awid(s_awid), .s_awvalid(s_awvalid), .s_awready(s_awready),
        .s_wdata(s_wdata), .s_wstrb(s_wstrb), .s_wvalid(s_wvalid), .s_wready(s_wready),
        .s_bid(s_bid), .s_bresp(s_bresp), .s_bvalid(s_bvalid), .s_bready(1'b1),
        .s_araddr(s_araddr), .s_arlen(s_arlen), .s_arid(s_arid), .s_arvalid(s_arvalid), .s_arready(s_arready),
        .s_rdata(s_rdata), .s_rid(s_rid), .s_rresp(s_rresp), .s_rlast(s_rlast), .s_rvalid(s_rvalid), .s_rready(1'b1),
        .m_awaddr(h_awaddr), .m_awvalid(h_awvalid), .m_awready(h_awready), .m_wdata(h_wdata), .m_wstrb(h_wstrb), .m_wvalid(h_wvalid),
        .m_wready(h_wready), .m_bvalid(h_bvalid), .m_bready(h_bready),
        .m_araddr(h_araddr), .m_arvalid(h_arvalid), .m_arready(h_arready), .m_rdata(h_rdata), .m_rvalid(h_rvalid), .m_rready(h_rready)
    );

    // ---- the memory: per channel (index CH is the host's port) a queue of reads (data, due) and of writes ----
    localparam integer Q = 16, P = CH + 1;
    reg [D-1:0] rq_data [0:P-1][0:Q-1];
    reg [AB-1:0] rq_addr [0:P-1][0:Q-1];
    reg rq_late [0:P-1][0:Q-1];
    integer rq_due [0:P-1][0:Q-1];
    reg [AB-1:0] bq_addr [0:P-1][0:Q-1];
    reg [D-1:0] bq_data [0:P-1][0:Q-1];
    reg [63:0] bq_strb [0:P-1][0:Q-1];
    reg bq_late [0:P-1][0:Q-1];
    integer rq_head [0:P-1], rq_tail [0:P-1];
    integer bq_due [0:P-1][0:Q-1];
    integer bq_head [0:P-1], bq_tail [0:P-1];
    reg aw_have [0:P-1], w_have [0:P-1];
    reg [AB-1:0] aw_at [0:P-1];
    reg [D-1:0] w_at [0:P-1];
    reg [63:0] ws_at [0:P-1];

    // ---- what the overlay expects back ----
    reg [255:0] exp_line [0:63];
    reg [1:0] exp_tag [0:63];
    integer el_head = 0, el_tail = 0;
    reg [WB-1:0] exp_w [0:15];
    integer ew_head = 0, ew_tail = 0;

    integer cycle = 0, phase = 0, errors = 0, lines = 0, writes = 0, weights = 0, beats_checked = 0;
    integer burst = 0, beat = 0, i, j, c, lat;
    reg [63:0] r;
    reg [AB-1:0] a;
    reg aw_sent = 0, host_busy = 0;

    initial begin
        for (i = 0; i < MEM; i = i + 1) begin
            oracle[i] = 8'd0;
            phys[i] = 8'd0;
        end
        for (c = 0; c < P; c = c + 1) begin
            rq_head[c] = 0; rq_tail[c] = 0; bq_head[c] = 0; bq_tail[c] = 0; aw_have[c] = 0; w_have[c] = 0;
        end
    end

    always @(posedge clk) begin
        cycle = cycle + 1;
        if (cycle == 5) rst <= 1'b0;
        // ---------------- the memory model ----------------
        for (c = 0; c < P; c = c + 1) begin
            // reads: data taken at acceptance
            if (c < CH ? (arvalid[c] && arready[c]) : (h_arvalid && h_arready)) begin
                a = c < CH ? araddr[c * AB +: AB] : h_araddr;
                for (j = 0; j < 64; j = j + 1) rq_data[c][rq_tail[c] % Q][8 * j +: 8] = phys[{a[AB-1:6], 6'b0} + j];
                roll(r);
                rq_due[c][rq_tail[c] % Q] = cycle + 1 + r[3:0];
                rq_addr[c][rq_tail[c] % Q] = a;
                rq_late[c][rq_tail[c] % Q] = r[8];
                rq_tail[c] = rq_tail[c] + 1;
            end
            if (c < CH ? (rvalid[c] && rready[c]) : (h_rvalid && h_rready)) rq_head[c] = rq_head[c] + 1;
            // writes: land when address and data are both there
            if (c < CH ? (awvalid[c] && awready[c]) : (h_awvalid && h_awready)) begin
                aw_have[c] = 1; aw_at[c] = c < CH ? awaddr[c * AB +: AB] : h_awaddr;
            end
            if (c < CH ? (wvalid[c] && wready[c]) : (h_wvalid && h_wready)) begin
                w_have[c] = 1; w_at[c] = c < CH ? wdata[c * D +: D] : h_wdata; ws_at[c] = c < CH ? wstrb[c * 64 +: 64] : h_wstrb;
            end
            if (aw_have[c] && w_have[c]) begin
                roll(r);
                if (!r[8]) for (j = 0; j < 64; j = j + 1) if (ws_at[c][j]) phys[{aw_at[c][AB-1:6], 6'b0} + j] = w_at[c][8 * j +: 8];
                aw_have[c] = 0; w_have[c] = 0;
                bq_due[c][bq_tail[c] % Q] = cycle + 1 + r[3:0];
                bq_late[c][bq_tail[c] % Q] = r[8];
                bq_addr[c][bq_tail[c] % Q] = aw_at[c];
                bq_data[c][bq_tail[c] % Q] = w_at[c];
                bq_strb[c][bq_tail[c] % Q] = ws_at[c];
                bq_tail[c] = bq_tail[c] + 1;
            end
            if (c < CH ? (bvalid[c] && bready[c]) : (h_bvalid && h_bready)) bq_head[c] = bq_head[c] + 1;
            // a late write lands as its B goes out; a late read takes its data as it is returned
            if (bq_head[c] != bq_tail[c] && bq_due[c][bq_head[c] % Q] <= cycle + 1 && bq_late[c][bq_head[c] % Q]) begin
                for (j = 0; j < 64; j = j + 1) if (bq_strb[c][bq_head[c] % Q][j]) phys[{bq_addr[c][bq_head[c] % Q][AB-1:6], 6'b0} + j] = bq_data[c][bq_head[c] % Q][8 * j +: 8];
                bq_late[c][bq_head[c] % Q] = 0;
            end
            if (rq_head[c] != rq_tail[c] && rq_due[c][rq_head[c] % Q] <= cycle + 1 && rq_late[c][rq_head[c] % Q]) begin
                for (j = 0; j < 64; j = j + 1) rq_data[c][rq_head[c] % Q][8 * j +: 8] = phys[{rq_addr[c][rq_head[c] % Q][AB-1:6], 6'b0} + j];
                rq_late[c][rq_head[c] % Q] = 0;
            end
            roll(r);
            if (c < CH) begin
                arready[c] <= r[0] && rq_tail[c] - rq_head[c] < Q - 2;
                awready[c] <= r[1] && !aw_have[c];
                wready[c] <= r[2] && !w_have[c];
                rvalid[c] <= rq_head[c] != rq_tail[c] && rq_due[c][rq_head[c] % Q] <= cycle + 1;
                rdata[c * D +: D] <= rq_data[c][rq_head[c] % Q];
                bvalid[c] <= bq_head[c] != bq_tail[c] && bq_due[c][bq_head[c] % Q] <= cycle + 1;
            end else begin
                h_arready <= r[0] && rq_tail[c] - rq_head[c] < Q - 2;
                h_awready <= r[1] && !aw_have[c];
                h_wready <= r[2] && !w_have[c];
                h_rvalid <= rq_head[c] != rq_tail[c] && rq_due[c][rq_head[c] % Q] <= cycle + 1;
                h_rdata <= rq_data[c][rq_head[c] % Q];
                h_bvalid <= bq_head[c] != bq_tail[c] && bq_due[c][bq_head[c] % Q] <= cycle + 1;
            end
        end

        // ---------------- phase 1: the host writes bursts ----------------
        if (phase == 0 && cycle > 10) phase = 1;
        if (phase == 1) begin
            if (s_awvalid && s_awready) begin s_awvalid <= 0; aw_sent = 1; end
            if (s_wvalid && s_wready) begin
                // the oracle takes the beat as the interleave does
                for (j = 0; j < 64; j = j + 1) if (s_wstrb[j]) oracle[s_awaddr[AB-1:0] + 64 * beat + j] = s_wdata[8 * j +: 8];
                s_wvalid <= 0;
                beat = beat + 1;
            end
            if (s_bvalid) begin
                if (s_bid != burst[3:0]) begin errors = errors + 1; $display("FAIL: B id %0d for burst %0d", s_bid, burst); end
                host_busy = 0; aw_sent = 0; burst = burst + 1;
            end
            if (!host_busy && burst < BURSTS) begin
                roll(r);
                s_awaddr <= {48'd0, r[AB-1:9], 9'd0} ; // 512-byte aligned, up to 8 beats in memory
                s_awlen <= {5'd0, r[18:16]};
                s_awid <= burst[3:0];
                s_awvalid <= 1;
                host_busy = 1; beat = 0;
            end else if (host_busy && aw_sent && !s_wvalid && beat <= s_awlen) begin
                for (j = 0; j < 8; j = j + 1) begin roll(r); s_wdata[64 * j +: 64] <= r; end
                roll(r);
                s_wstrb <= r[7:0] == 0 ? r : 64'hFFFF_FFFF_FFFF_FFFF;
                s_wvalid <= 1;
            end
            if (burst == BURSTS && !host_busy) phase = 2;
        end

        // ---------------- phase 2: the overlay's traffic ----------------
        // responses, in order
        if (m_resp) begin
            lines = lines + 1;
            if (el_head == el_tail || m_rdata != exp_line[el_head % 64] || m_resp_tag != exp_tag[el_head % 64]) begin
                errors = errors + 1;
                if (errors < 5) $display("FAIL: line response %0d: %h (tag %0d), expected %h (tag %0d)", lines, m_rdata, m_resp_tag, exp_line[el_head % 64], exp_tag[el_head % 64]);
            end
            el_head = el_head + 1;
        end
        if (w_resp) begin
            weights = weights + 1;
            if (ew_head == ew_tail || w_rdata != exp_w[ew_head % 16]) begin
                errors = errors + 1;
                if (errors < 5) $display("FAIL: weight response %0d differs", weights);
            end
            ew_head = ew_head + 1;
        end
        // accepted requests: the oracle as of now
        if (m_req && m_req_ready) begin
            a = m_addr[AB-6:0] * 32;
            if (m_write) begin
                for (j = 0; j < 32; j = j + 1) if (m_wmask[j]) oracle[a + j] = m_wdata[8 * j +: 8];
                writes = writes + 1;
            end else begin
                for (j = 0; j < 32; j = j + 1) exp_line[el_tail % 64][8 * j +: 8] = oracle[a + j];
                exp_tag[el_tail % 64] = m_tag;
                el_tail = el_tail + 1;
            end
        end
        if (w_req && w_req_ready) begin
            a = w_addr[AB-7:0] * 64;
            for (j = 0; j < CH * 64; j = j + 1) exp_w[ew_tail % 16][8 * j +: 8] = oracle[a + j];
            ew_tail = ew_tail + 1;
        end
        // the next request (held until taken)
        if (phase == 2 && !(m_req && !m_req_ready) && !(w_req && !w_req_ready)) begin
            roll(r);
            m_req <= 0; w_req <= 0;
            if (cycle < CYCLES && el_tail - el_head < 48 && ew_tail - ew_head < 12) begin
                if (r[3:0] < 6) begin
                    m_req <= 1; m_write <= 0; m_addr <= {48'd0, 5'd0, r[AB+10:16]}; m_tag <= r[9:8];
                end else if (r[3:0] < 11) begin
                    m_req <= 1; m_write <= 1; m_addr <= {48'd0, 5'd0, r[AB+10:16]};
                    m_wmask <= r[12] ? 32'hFFFF_FFFF : r[63:32];
                    for (j = 0; j < 4; j = j + 1) begin roll(r); m_wdata[64 * j +: 64] <= r; end
                end else if (r[3:0] < 14) begin
                    w_req <= 1; w_addr <= {48'd0, 6'd0, r[AB+9:16+CB], {CB{1'b0}}};
                end
            end
        end
        if (phase == 2 && cycle >= CYCLES && !m_req && !w_req && el_head == el_tail && ew_head == ew_tail) begin
            phase = 3; burst = 0; host_busy = 0;
        end

        // ---------------- phase 3: the host reads bursts back ----------------
        if (phase == 3) begin
            if (s_arvalid && s_arready) s_arvalid <= 0;
            if (s_rvalid) begin
                beats_checked = beats_checked + 1;
                for (j = 0; j < 64; j = j + 1)
                    if (s_rdata[8 * j +: 8] != oracle[s_araddr[AB-1:0] + 64 * beat + j]) begin
                        errors = errors + 1;
                        if (errors < 5) $display("FAIL: host read, burst %0d beat %0d byte %0d", burst, beat, j);
                    end
                if (s_rid != burst[3:0] || s_rlast != (beat == s_arlen)) begin
                    errors = errors + 1; $display("FAIL: host read burst %0d beat %0d: rid %0d rlast %0d", burst, beat, s_rid, s_rlast);
                end
                beat = beat + 1;
                if (s_rlast) begin host_busy = 0; burst = burst + 1; end
            end
            if (!host_busy && burst < BURSTS) begin
                roll(r);
                s_araddr <= {48'd0, r[AB-1:9], 9'd0};
                s_arlen <= {5'd0, r[18:16]};
                s_arid <= burst[3:0];
                s_arvalid <= 1;
                host_busy = 1; beat = 0;
            end
            if (burst == BURSTS && !host_busy) begin
                if (errors == 0 && lines > 1000 && writes > 1000 && weights > 300)
                    $display("PASS: %0d line reads, %0d line writes, %0d weight reads, %0d host beats read back", lines, writes, weights, beats_checked);
                else
                    $display("FAIL: %0d errors; %0d line reads, %0d line writes, %0d weight reads", errors, lines, writes, weights);
                $finish;
            end
        end
        if (cycle > 10 * CYCLES) begin
            $display("FAIL: stuck in phase %0d (lines %0d/%0d, weights %0d/%0d)", phase, el_head, el_tail, ew_head, ew_tail);
            $finish;
        end
    end
endmodule

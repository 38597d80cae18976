//! The matrix unit: `matmul` of docs/isa.md on the PE array (rust-hdl HDL for the sequencing, the
//! datapath in [`dp`] and [`feed`]).
//!
//! A `matmul` runs in row groups of `2 x pe_lanes` rows (lane `i` computes rows `2i, 2i + 1` of the group):
//!
//! 1. **Check**, in the functional simulator's order: operand rules (zero sizes, `ntok > max_batch`, `cols`
//!    not whole blocks, a row longer than the weight buffer holds), the overlap of source and destination,
//!    the destination's and the source's scratchpad spans, the weights' device-memory span. A violation
//!    traps with the functional simulator's code and ERROR_INFO.
//! 2. **Load** a group: device memory holds the weights interleaved by lane (docs/isa.md, `matmul`;
//!    `opu_hw::weight_layout`), a group as `16 pe_lanes K` contiguous bytes (`K` units of 16 bytes per lane:
//!    its two rows), so the loader requests the group's 64-byte beats in order on the top's weight port,
//!    `W = OverlayConfig::weight_port_beats` of them per request and per cycle (the memory's bandwidth: 1 at
//!    `sim`, 2 at `sim-wide`, 32 at `u280`). Beat `k` carries unit `k / (pe_lanes / 4)` of four lanes, which
//!    their weight feeds keep; the `W` beats of a response are `W` quads of the same unit, so feed `i` takes
//!    beat `(i / 4) mod W` of a response, a fixed wire. The weight buffer is a ring per lane (`8 x
//!    weight_row_lines` units) in which groups follow each other, each taking `K` units: the loader runs
//!    as many groups ahead of the compute as the ring holds (`OverlayConfig::weight_groups_in_buffer`, up to
//!    `WEIGHT_GROUP_ENTRIES` = 8), so a group costs the longer of its load and its compute, and the memory
//!    latency is paid once per `matmul` wherever the compute keeps up with the memory.
//! 3. **Compute**, for each token: per block of 32 columns the token's 64 activation bytes are read from the
//!    scratchpad (two 32-byte reads), and the array takes the block in 2 steps (W4Min, W4: half 0, half 1)
//!    or 4 (W8: row 0 halves, then row 1's), `clear` on the first block, `last` on the final one.
//! 4. **Store**: when a token's rows are done the accumulators go to hold registers ([`dp`]) and the array
//!    goes on with the next token (and after a group's last token with the next group: the readout keeps
//!    the group's rows and output offset from the capture), while the readout, 32 bytes of output at a
//!    time (a chunk: 8 lanes of FP16 outputs, 4 of FP32), reads the old output words where the chunk needs
//!    them (the `acc=1` start value, and with FP16 outputs of odd rows the neighbour a half-written word
//!    keeps), adds each start value onto its accumulator (`WideAcc::add_f16` / `add_f32`: the sum is exact,
//!    so adding it last gives the same bits as starting from it), rounds (`round`: `WideAcc::to_f16` /
//!    `to_f32`) and writes the words back. The lanes go out one per cycle, chunk after chunk without a gap
//!    (two cycles more per chunk where it reads old words): a chunk is assembled in one of two buffers
//!    while the one before goes through the rounding, and a writer writes each buffer on the scratchpad's
//!    write port the cycle after its last lane lands, beside the compute's reads. The hold registers are
//!    free for the next token once the last chunk's lanes are out.
//!
//! 5. **Reduce** (`red`): each stored chunk's values are squared and summed (`sqsum::sqsum_stages` in the datapath) and
//!    added to `RED[t]` of its token by a read-modify-write of the reduction file (`red=set` starts from 0
//!    at the token's first chunk of the first group).
//!
//! **`fmt=f16`** (exact FP16 x FP16 products, which the PE lanes' integer multipliers do not make) runs on an
//! instance of the router's datapath ([`Router`]: 8 columns of two rows per beat, its accumulators taken
//! before the biases), in the readout: a group's tokens one after the other (`FTok`, `FWait`), each token's
//! output chunks one after the other, and in a chunk (`OutState::FLanes`) its lanes one after the other, a
//! pair of steps per 8 columns (row 0's weights from the lane's feed at half 0, row 1's at half 1, picked
//! from the feeds' buses by `dp`'s `f16_sel`), each lane's accumulators into the rounding pipeline as the
//! hold registers' are. 8 products a cycle: the correct path for F16 models, not a fast one.
//!
//! Not built yet: the overlap of one `matmul`'s first load with the previous one's compute.

pub mod dp;
pub mod feed;

use crate::ctrl::{constant as k, decode};
use crate::spm::{SPM_BANKS, SPM_WORD_BITS};
use crate::lane::ACC_BITS;
use crate::red::RED_BITS;
use crate::round::Round;
use crate::router::Router;
use dp::MatrixDatapath;
use opu_hw::numerics::WeightFormat;
use opu_hw::regs::ErrorCode;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

// The table of loaded groups below has eight entries (`b_*_0..8`, 3-bit entry indices, 8-bit masks); the
// fused reduction's chunks wait three stages (`rqd_*`, delay lines of 3 entries) for their sum of squares.
const _: () = assert!(crate::sqsum::SQSUM_LATENCY == 4);
// The rounding's lanes wait in `pr_*`, delay lines of 4 entries.
const _: () = assert!(crate::round::ROUND_LATENCY == 4);
const _: () = assert!(opu_hw::config::WEIGHT_GROUP_ENTRIES == 8);
// `fmt=f16`: a step's record waits in `fd_*`, delay lines of 5 entries, for the weights it reads on the
// datapath's `f16_w`; the router's accumulators are out 6 edges after its beat.
const _: () = assert!(dp::F16_W_LATENCY == 5);
const _: () = assert!(crate::router::ROUTER_ACC_LATENCY == 6);

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum MatrixState {
    Idle,
    /// Operand rules, block bytes and row bytes.
    Check0,
    /// Row length against the buffer; span lengths.
    Check1,
    /// Overlap of source and destination.
    Check2,
    /// Destination span in the scratchpad.
    Check3,
    /// Source span in the scratchpad.
    Check4,
    /// Weight span in device memory.
    Check5,
    /// Start of a row group: waits until the loader has it in the weight buffer (and for the first, until
    /// `go`), takes its geometry.
    Group,
    /// Compute: start of a token.
    Token,
    /// Compute: the block's two 32-byte activation reads.
    XRead0,
    XRead1,
    /// Compute: the block's steps into the array.
    Step,
    /// Every token of the group computed; waiting for its last capture (and after the last group, for the
    /// readout).
    GroupEnd,
    /// `fmt=f16`: a token of the group starts the readout, which computes it chunk by chunk (`OutState::FLanes`).
    FTok,
    /// `fmt=f16`: the readout computes and stores the token's rows of the group.
    FWait,
    /// Flushed: waiting for the memory responses still in flight.
    Drain,
}

#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum OutState {
    Idle,
    /// A chunk starts: reads its old 32 bytes where it needs them (`acc=1`, a half-written word, `fmt=f16`),
    /// else goes on to its lanes.
    Read,
    /// The old bytes arrive.
    Old,
    /// One lane per cycle into the rounding pipeline; after the chunk's last lane the next chunk's first
    /// (where it needs no old bytes) or its read, while the pipeline carries this one's lanes on to its
    /// buffer and the writer.
    Lanes,
    /// `fmt=f16`: the chunk's lanes computed one after the other on the router's datapath, each into the
    /// rounding pipeline as its accumulators come.
    FLanes,
    /// `fmt=f16`: the pipeline empties into the chunk.
    Drain,
    /// `fmt=f16`: write the chunk.
    Write,
}

/// The weight loader's request side, which runs ahead of the compute: while the array computes a group from
/// the weight buffer's ring, the next groups' beats stream in behind it.
#[derive(Copy, Clone, Debug, PartialEq, LogicState)]
pub enum LoadState {
    Idle,
    /// Waits until the next group's entry and ring positions are free, then takes its geometry (one cycle).
    Group,
    /// The group's beats are requested, `W` per request and a request per cycle (any number in flight).
    Lines,
}

/// A `matmul` start value (`acc=1`: the old output, FP16 or FP32 bits) on the accumulator's 2^-32 grid,
/// as `WideAcc::add_f16` / `add_f32` add it; zero when `en` is low. FP16: `sig << (max(e, 1) + 7)`, exact.
/// FP32: `sig x 2^(max(e, 1) - 150)` floored onto the grid (a left shift from e = 118, else a right shift
/// toward minus infinity); e > 172 is past the accumulator's term limit and non-finite, as in opu-hw.
#[derive(LogicBlock, Default)]
pub struct StartValue {
    pub bits: Signal<In, Bits<32>>,
    pub f32: Signal<In, Bit>,
    pub en: Signal<In, Bit>,
    pub value: Signal<Out, Bits<ACC_BITS>>,
    pub nf: Signal<Out, Bit>,
    h_e: Signal<Local, Bits<8>>,
    h_m: Signal<Local, Bits<ACC_BITS>>,
    f_e: Signal<Local, Bits<8>>,
    f_sig: Signal<Local, Bits<ACC_BITS>>,
    f_r: Signal<Local, Bits<ACC_BITS>>,
    f_q: Signal<Local, Bits<ACC_BITS>>,
}

impl Logic for StartValue {
    #[hdl_gen]
    fn update(&mut self) {
        self.h_e.next = bit_cast::<8, 5>(self.bits.val().get_bits::<5>(10));
        if self.bits.val().get_bits::<5>(10) == 0 {
            self.h_e.next = 1.into();
        }
        self.h_m.next = bit_cast::<ACC_BITS, 10>(self.bits.val().get_bits::<10>(0));
        if self.bits.val().get_bits::<5>(10) != 0 {
            self.h_m.next = bit_cast::<ACC_BITS, 10>(self.bits.val().get_bits::<10>(0)) | bits::<ACC_BITS>(1024);
        }
        self.f_e.next = self.bits.val().get_bits::<8>(23);
        if self.bits.val().get_bits::<8>(23) == 0 {
            self.f_e.next = 1.into();
        }
        self.f_sig.next = bit_cast::<ACC_BITS, 23>(self.bits.val().get_bits::<23>(0));
        if self.bits.val().get_bits::<8>(23) != 0 {
            self.f_sig.next = bit_cast::<ACC_BITS, 23>(self.bits.val().get_bits::<23>(0)) | bits::<ACC_BITS>(0x80_0000);
        }
        self.f_r.next = self.f_sig.val() >> (bits::<8>(118) - self.f_e.val());
        self.f_q.next = self.f_sig.val() << (self.f_e.val() - 118);
        if self.f_e.val() < 118 {
            self.f_q.next = self.f_r.val();
            if self.bits.val().get_bit(31) & ((self.f_r.val() << (bits::<8>(118) - self.f_e.val())) != self.f_sig.val()) {
                // bits were lost: the magnitude of a negative value rounds up (the value floors down)
                self.f_q.next = self.f_r.val() + 1;
            }
        }
        self.value.next = self.h_m.val() << (self.h_e.val() + 7);
        if self.bits.val().get_bit(15) {
            self.value.next = !(self.h_m.val() << (self.h_e.val() + 7)) + 1;
        }
        self.nf.next = self.bits.val().get_bits::<5>(10) == 31;
        if self.f32.val() {
            self.value.next = self.f_q.val();
            if self.bits.val().get_bit(31) {
                self.value.next = !self.f_q.val() + 1;
            }
            self.nf.next = (self.bits.val().get_bits::<8>(23) == 255) | (self.bits.val().get_bits::<8>(23) > 172);
        }
        if !self.en.val() {
            self.value.next = 0.into();
            self.nf.next = false;
        }
    }
}

/// The matrix unit with a weight port of `WB / 512` beats (`WB` bits: [`weight_port_bits`]).
#[derive(LogicBlock)]
pub struct Matrix<const WB: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,
    pub flush: Signal<In, Bit>,
    /// The other units are idle: the compute may start. A `matmul` is issued early, while another unit
    /// still works through the instructions before it (the top's issue rule); its checks and its loader
    /// run at once, and its first group's compute waits for `go` (it reads and writes the scratchpad).
    pub go: Signal<In, Bit>,

    // ---- issue (from the core, through the unit's queue)
    pub iss_valid: Signal<In, Bit>,
    pub iss_ready: Signal<Out, Bit>,
    pub iss_word: Signal<In, Bits<128>>,
    pub iss_pc: Signal<In, Bits<32>>,
    pub idle: Signal<Out, Bit>,
    pub progress: Signal<Out, Bit>,
    pub trap_valid: Signal<Out, Bit>,
    pub trap_code: Signal<Out, Bits<4>>,
    pub trap_pc: Signal<Out, Bits<32>>,
    pub trap_info: Signal<Out, Bits<64>>,

    // ---- device memory (reads only): the weight port, `W` beats of two lines (`64 W` bytes at `m_addr`, in
    // beats, a multiple of `W`), responses in order, beat `j` at bits `512 j ..`
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_resp: Signal<In, Bit>,
    pub m_rdata: Signal<In, Bits<WB>>,

    // ---- the scratchpad's line port (`spm::Scratchpad`): words at a word address, read data a cycle later
    pub s_we: Signal<Out, Bits<SPM_BANKS>>,
    pub s_waddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_wdata: Signal<Out, Bits<256>>,
    pub s_raddr: Signal<Out, Bits<SPM_WORD_BITS>>,
    pub s_rdata: Signal<In, Bits<256>>,

    // ---- the reduction file (`red::RedFile`): read data the cycle after the address
    pub red_raddr: Signal<Out, Bits<6>>,
    pub red_rdata: Signal<In, Bits<RED_BITS>>,
    pub red_we: Signal<Out, Bit>,
    pub red_waddr: Signal<Out, Bits<6>>,
    pub red_wdata: Signal<Out, Bits<RED_BITS>>,

    pub bytes_read: Signal<Out, Bits<64>>,
    pub macs: Signal<Out, Bits<64>>,

    dp: MatrixDatapath<WB>,
    start0: StartValue,
    start1: StartValue,
    round0: Round,
    round1: Round,
    /// `fmt=f16`: the router's FP16 x FP16 datapath (its accumulators, before the biases).
    f16dot: Router,

    // ---- the instruction
    state: DFF<MatrixState>,
    pc: DFF<Bits<32>>,
    fmt: DFF<Bits<3>>,
    f32o: DFF<Bit>,
    accf: DFF<Bit>,
    redm: DFF<Bits<2>>,
    ntok: DFF<Bits<7>>,
    dst: DFF<Bits<20>>,
    src: DFF<Bits<20>>,
    rows: DFF<Bits<16>>,
    cols: DFF<Bits<16>>,
    wline: DFF<Bits<32>>,
    /// Block bytes of the format, blocks per row, row bytes.
    bb: DFF<Bits<6>>,
    nb: DFF<Bits<11>>,
    rb: DFF<Bits<32>>,
    src_pitch: DFF<Bits<32>>,
    dst_pitch: DFF<Bits<32>>,
    src_len: DFF<Bits<32>>,
    dst_len: DFF<Bits<32>>,
    mac_count: DFF<Bits<64>>,
    trap_r: DFF<Bit>,
    trap_code_r: DFF<Bits<4>>,
    trap_info_r: DFF<Bits<64>>,
    rd_total: DFF<Bits<64>>,
    /// The weight bytes of the `matmul` checked, counted in `rd_total` once its compute starts (an early
    /// `matmul` dropped after another unit's trap has not run).
    rd_pend: DFF<Bits<48>>,
    macs_total: DFF<Bits<64>>,
    outstanding: DFF<Bits<16>>,

    // ---- the row group
    /// Rows left from the group's first; the group's rows.
    rows_left: DFF<Bits<16>>,
    grows: DFF<Bits<16>>,
    /// Byte offset of the group's first output row in a token's output row.
    gout: DFF<Bits<32>>,
    /// The compute's entry in the table of loaded groups.
    c_buf: DFF<Bits<3>>,

    // ---- the loader (up to eight groups ahead, `opu_hw::config::WEIGHT_GROUP_ENTRIES`): its group's rows
    // left, first byte and rows, its requests and responses, and its entry; the entries of the groups in the
    // weight buffer's ring (loading or loaded), their rows and base units; the ring units free. Every group
    // of a `matmul` has the same beats and bytes in device memory (the weights interleaved by lane,
    // `opu_hw::weight_layout`: a group is `16 pe_lanes K` bytes, `K` = `gspan` units per lane).
    lstate: DFF<LoadState>,
    l_rows_left: DFF<Bits<16>>,
    l_gbyte: DFF<Bits<48>>,
    l_grows: DFF<Bits<16>>,
    /// Beats of a group (`K pe_lanes / 4`) and its bytes.
    /// Weight-port requests of a group (`W` beats each).
    nreqs: DFF<Bits<24>>,
    gbytes: DFF<Bits<48>>,
    req_k: DFF<Bits<24>>,
    resp_k: DFF<Bits<24>>,
    l_buf: DFF<Bits<3>>,
    /// The next group's base unit in the ring.
    l_base: DFF<Bits<16>>,
    ready: DFF<Bits<8>>,
    /// An entry taken by a group whose lines are requested or in the ring (free again when the compute has
    /// read it).
    busy: DFF<Bits<8>>,
    /// The entry the responses fill (in the order of the requests).
    r_buf: DFF<Bits<3>>,
    b_grows_0: DFF<Bits<16>>,
    b_grows_1: DFF<Bits<16>>,
    b_grows_2: DFF<Bits<16>>,
    b_grows_3: DFF<Bits<16>>,
    b_grows_4: DFF<Bits<16>>,
    b_grows_5: DFF<Bits<16>>,
    b_grows_6: DFF<Bits<16>>,
    b_grows_7: DFF<Bits<16>>,
    b_base_0: DFF<Bits<16>>,
    b_base_1: DFF<Bits<16>>,
    b_base_2: DFF<Bits<16>>,
    b_base_3: DFF<Bits<16>>,
    b_base_4: DFF<Bits<16>>,
    b_base_5: DFF<Bits<16>>,
    b_base_6: DFF<Bits<16>>,
    b_base_7: DFF<Bits<16>>,
    /// Units of a lane's share of a group (`WeightLayout::lane_units`: its two rows), the ring units taken
    /// by a group; the ring's free units.
    gspan: DFF<Bits<16>>,
    ring_free: DFF<Bits<16>>,
    /// The compute's group: its base unit in the ring.
    c_base: DFF<Bits<16>>,

    // ---- compute
    tok: DFF<Bits<7>>,
    blk: DFF<Bits<11>>,
    step: DFF<Bits<2>>,
    /// Scratchpad byte of the token's activations, of the block's; the block's byte in a row slot.
    xtok: DFF<Bits<32>>,
    xblk: DFF<Bits<32>>,
    woff: DFF<Bits<16>>,
    xlo: DFF<Bits<256>>,
    /// The next block's low line was read in this block's steps (the prefetch).
    pf0: DFF<Bit>,
    xf: DFF<Bits<512>>,
    /// A `last` step went into the array and its capture has not come yet.
    inflight: DFF<Bit>,

    // ---- readout
    ostate: DFF<OutState>,
    /// Tokens of the group read out; the chunk's first group row and its scratchpad byte.
    otok: DFF<Bits<7>>,
    ochunk_row: DFF<Bits<16>>,
    obyte: DFF<Bits<32>>,
    /// Scratchpad byte of the current token's output row (the group's part of it starts at `gout`).
    otok_byte: DFF<Bits<32>>,
    /// The readout's group (its rows and its first output byte), taken at the capture of each token: the
    /// compute goes on with the next group while the readout stores the last one's tokens.
    ro_grows: DFF<Bits<16>>,
    ro_gout: DFF<Bits<32>>,
    olane: DFF<Bits<4>>,
    old: DFF<Bits<256>>,
    /// The chunks being assembled, two so that a chunk's lanes go in while the one before still goes
    /// through the rounding and out to its write: the buffer of the chunk being issued, and per buffer
    /// the words' bytes and what the writer needs (taken at the chunk's last lane): its scratchpad byte,
    /// the words to write, the rows the reduction sums, its token and `red=set` first flag.
    obuf: DFF<Bit>,
    outc0: DFF<Bits<256>>,
    outc1: DFF<Bits<256>>,
    wb_byte0: DFF<Bits<32>>,
    wb_byte1: DFF<Bits<32>>,
    wb_mask0: DFF<Bits<8>>,
    wb_mask1: DFF<Bits<8>>,
    wb_sq0: DFF<Bits<16>>,
    wb_sq1: DFF<Bits<16>>,
    wb_tok0: DFF<Bits<6>>,
    wb_tok1: DFF<Bits<6>>,
    wb_first0: DFF<Bit>,
    wb_first1: DFF<Bit>,
    /// The writer: a chunk's last lane was placed last cycle, its buffer is written now.
    wr_go: DFF<Bit>,
    wr_b: DFF<Bit>,
    /// Pipeline: hold-register values with the old words, then the sums into the rounding.
    p1_v: DFF<Bit>,
    p1_j: DFF<Bits<4>>,
    /// Carried with each lane: its chunk's buffer, whether it is the chunk's last lane (the writer's cue)
    /// and whether its row 1 exists (`_b`, `_l`, `_r`; the rounding's stages as bits, newest low).
    p1_b: DFF<Bit>,
    p1_l: DFF<Bit>,
    p1_r: DFF<Bit>,
    p1_a0: DFF<Bits<ACC_BITS>>,
    p1_a1: DFF<Bits<ACC_BITS>>,
    p1_n0: DFF<Bit>,
    p1_n1: DFF<Bit>,
    p1_o0: DFF<Bits<32>>,
    p1_o1: DFF<Bits<32>>,
    /// The start values on the grid beside the accumulators (a stage of their own: an FP32 start value's
    /// decode and shift, then the 96-bit add, were 9.5 ns in one).
    pa_v: DFF<Bit>,
    pa_j: DFF<Bits<4>>,
    pa_b: DFF<Bit>,
    pa_l: DFF<Bit>,
    pa_r: DFF<Bit>,
    pa_a0: DFF<Bits<ACC_BITS>>,
    pa_a1: DFF<Bits<ACC_BITS>>,
    pa_i0: DFF<Bits<ACC_BITS>>,
    pa_i1: DFF<Bits<ACC_BITS>>,
    pa_n0: DFF<Bit>,
    pa_n1: DFF<Bit>,
    p2_v: DFF<Bit>,
    p2_j: DFF<Bits<4>>,
    p2_b: DFF<Bit>,
    p2_l: DFF<Bit>,
    p2_r: DFF<Bit>,
    s0: DFF<Bits<ACC_BITS>>,
    s1: DFF<Bits<ACC_BITS>>,
    sn0: DFF<Bit>,
    sn1: DFF<Bit>,
    /// The lanes in the rounding's stages (`round::ROUND_LATENCY` = 4): valid bits and lane indices, the
    /// newest in the low bits; the oldest (bit 3, bits 12..16) is the lane the rounding gives now.
    pr_v: DFF<Bits<4>>,
    pr_j: DFF<Bits<16>>,
    pr_b: DFF<Bits<4>>,
    pr_l: DFF<Bits<4>>,
    pr_r: DFF<Bits<4>>,
    pr_out_j: Signal<Local, Bits<4>>,
    /// The fused reduction: a written chunk waits in a delay line while the sum of squares' stages run (its
    /// valid bit, token and first flag, three stages, the newest in the low bits), its sum comes (1), then its
    /// token's entry (2).
    rqd_v: DFF<Bits<3>>,
    rqd_tok: DFF<Bits<18>>,
    rqd_first: DFF<Bits<3>>,
    rq1_v: DFF<Bit>,
    rq1_tok: DFF<Bits<6>>,
    rq1_first: DFF<Bit>,
    rq2_v: DFF<Bit>,
    rq2_tok: DFF<Bits<6>>,
    rq2_first: DFF<Bit>,
    rq2_sum: DFF<Bits<RED_BITS>>,

    // ---- `fmt=f16`: step pairs of 8 columns (row 0 at half 0, row 1 at half 1) per lane, lane after lane
    /// Pairs per row (`ceil(cols / 8)`) and the columns of the last one (1..=8).
    f_nk: DFF<Bits<16>>,
    f_lastn: DFF<Bits<4>>,
    /// The chunk's lanes; the lane, pair and half being issued; the results come so far.
    f_nl: DFF<Bits<4>>,
    f_lane: DFF<Bits<4>>,
    f_k: DFF<Bits<16>>,
    f_h: DFF<Bit>,
    f_oj: DFF<Bits<4>>,
    /// The steps in flight to the feeds' bus (`dp::F16_W_LATENCY` = 5 stages, the newest in the low bits):
    /// valid, half, first and last pair, the pair's columns (4 bits each) and activations' scratchpad word
    /// (32 bits each).
    fd_v: DFF<Bits<5>>,
    fd_h: DFF<Bits<5>>,
    fd_first: DFF<Bits<5>>,
    fd_last: DFF<Bits<5>>,
    fd_n: DFF<Bits<20>>,
    fd_x: DFF<Bits<160>>,
    /// Row 0's weights of the pair, kept for row 1's.
    f_w0: DFF<Bits<128>>,

    // ---- constants
    max_batch: Constant<Bits<7>>,
    max_row: Constant<Bits<32>>,
    mem_bytes: Constant<Bits<48>>,
    spm_bytes: Constant<Bits<32>>,
    op_matmul: Constant<Bits<8>>,
    fmt_w4m: Constant<Bits<3>>,
    fmt_w4: Constant<Bits<3>>,
    fmt_w8: Constant<Bits<3>>,
    fmt_f16: Constant<Bits<3>>,
    bb_w4m: Constant<Bits<6>>,
    bb_w4: Constant<Bits<6>>,
    bb_w8: Constant<Bits<6>>,
    /// `2 x pe_lanes` and its log2; lanes per readout chunk (log2) by output type.
    group_rows: Constant<Bits<16>>,
    group_shift: Constant<Bits<8>>,
    /// Units (16 bytes) of a lane's ring (`8 x weight_row_lines`, a power of two).
    ring: Constant<Bits<16>>,
    /// A beat's lane quad within a unit row (`pe_lanes / 4 - 1`, a mask); log2 of the beats per request
    /// (`W`) and of the requests per unit row (`pe_lanes / 4 W`); the shift of a group's bytes from its
    /// units per lane (`log2(16 pe_lanes)`); the weights' alignment mask (`16 pe_lanes - 1`).
    quad_mask: Constant<Bits<24>>,
    beat_shift: Constant<Bits<8>>,
    req_shift: Constant<Bits<8>>,
    lane_shift: Constant<Bits<8>>,
    align_mask: Constant<Bits<48>>,
    f_fmt: Constant<Bits<8>>,
    f_out: Constant<Bits<8>>,
    f_acc: Constant<Bits<8>>,
    f_red: Constant<Bits<8>>,
    f_ntok: Constant<Bits<8>>,
    f_dst: Constant<Bits<8>>,
    f_src: Constant<Bits<8>>,
    f_rows: Constant<Bits<8>>,
    f_cols: Constant<Bits<8>>,
    f_w: Constant<Bits<8>>,
    c_bad: Constant<Bits<4>>,
    c_mem: Constant<Bits<4>>,
    c_spm: Constant<Bits<4>>,
    ones32: Constant<Bits<64>>,
    ones128: Constant<Bits<128>>,

    // ---- combinational
    opc: Signal<Local, Bits<8>>,
    raise: Signal<Local, Bit>,
    raise_code: Signal<Local, Bits<4>>,
    raise_info: Signal<Local, Bits<64>>,
    span_start: Signal<Local, Bits<32>>,
    span_end: Signal<Local, Bits<32>>,
    spm_first: Signal<Local, Bits<64>>,
    fmt_in: Signal<Local, Bits<3>>,
    supported: Signal<Local, Bit>,
    w8: Signal<Local, Bit>,
    f16: Signal<Local, Bit>,
    /// `fmt=f16`: this cycle's step (its pair's columns, its activations' word), the stage-4 step's column mask,
    /// the readout's result lane.
    f_issue: Signal<Local, Bit>,
    f_n: Signal<Local, Bits<4>>,
    f_x: Signal<Local, Bits<32>>,
    f_mask: Signal<Local, Bits<128>>,
    f_kick: Signal<Local, Bit>,
    ro_j: Signal<Local, Bits<4>>,
    last_step: Signal<Local, Bit>,
    last_blk: Signal<Local, Bit>,
    last_tok: Signal<Local, Bit>,
    ro_read: Signal<Local, Bit>,
    /// The chunks of the readout's group read their old words (`acc=1`, `fmt=f16`, or FP16 outputs of odd
    /// rows: the last word's upper half is not an output and keeps its bytes).
    need_old: Signal<Local, Bit>,
    /// The lane issued this cycle is its chunk's last (non-F16).
    last_lane: Signal<Local, Bit>,
    /// A chunk write this cycle (the writer, or `fmt=f16`'s Write) and what it writes.
    w_fire: Signal<Local, Bit>,
    w_byte_now: Signal<Local, Bits<32>>,
    w_mask_now: Signal<Local, Bits<8>>,
    w_data: Signal<Local, Bits<256>>,
    w_sq: Signal<Local, Bits<16>>,
    w_tok: Signal<Local, Bits<6>>,
    w_first: Signal<Local, Bit>,
    /// The chunk being issued: its rows' sum-of-squares mask and `red=set` first flag.
    c_sq: Signal<Local, Bits<16>>,
    c_first: Signal<Local, Bit>,
    /// The lane placed this cycle: its buffer's bytes.
    outc_cur: Signal<Local, Bits<256>>,
    outc_new: Signal<Local, Bits<256>>,
    /// The scratchpad word of this cycle's access.
    sp_word: Signal<Local, Bits<32>>,
    next_crow: Signal<Local, Bits<16>>,
    row1_ok: Signal<Local, Bit>,
    wmask: Signal<Local, Bits<8>>,
    wwords: Signal<Local, Bits<16>>,
    cvalid: Signal<Local, Bits<16>>,
    src_end: Signal<Local, Bits<32>>,
    dst_end: Signal<Local, Bits<32>>,
    w_byte: Signal<Local, Bits<48>>,
    w_len: Signal<Local, Bits<48>>,
    pl_lo: Signal<Local, Bits<32>>,
    pl_hi: Signal<Local, Bits<32>>,
    nt1: Signal<Local, Bits<16>>,
    /// The `matmul`'s row groups.
    w_groups: Signal<Local, Bits<16>>,
    /// The rows of the group the loader starts next.
    g_rows: Signal<Local, Bits<16>>,
    /// Entries the loader fills and the compute frees this cycle.
    rdy_set: Signal<Local, Bits<8>>,
    rdy_clr: Signal<Local, Bits<8>>,
    bsy_set: Signal<Local, Bits<8>>,
    /// The response side's entry: its base unit; a response's lane quad and ring unit; the compute's entry:
    /// its rows and base.
    r_base: Signal<Local, Bits<16>>,
    r_quad: Signal<Local, Bits<16>>,
    r_pos: Signal<Local, Bits<16>>,
    e_grows: Signal<Local, Bits<16>>,
    e_base: Signal<Local, Bits<16>>,
    /// The ring units taken and given back this cycle.
    ring_take: Signal<Local, Bits<16>>,
    ring_give: Signal<Local, Bits<16>>,
    ring_init: Signal<Local, Bit>,
    r_valid: Signal<Local, Bit>,
    r_last: Signal<Local, Bit>,
    ntr: Signal<Local, Bits<32>>,
    // readout: the lane's old values, start values and placement
    lane_sel: Signal<Local, Bits<8>>,
    old_sh: Signal<Local, Bits<9>>,
    pf_lo: Signal<Local, Bit>,
    pf_hi: Signal<Local, Bit>,
    next_last: Signal<Local, Bit>,
    old_lane: Signal<Local, Bits<64>>,
    i0: Signal<Local, Bits<ACC_BITS>>,
    i1: Signal<Local, Bits<ACC_BITS>>,
    in0: Signal<Local, Bit>,
    in1: Signal<Local, Bit>,
    place_sh: Signal<Local, Bits<9>>,
    place_v: Signal<Local, Bits<256>>,
    place_m: Signal<Local, Bits<256>>,
    sq_rows: Signal<Local, Bits<16>>,
    red_base: Signal<Local, Bits<RED_BITS>>,
}

impl<const WB: usize> Matrix<WB> {
    pub fn new(config: &OverlayConfig, dp_cores: String) -> Self {
        let f = |n: &str| k::<8>(u64::from(decode::field("matmul", n).offset));
        let lanes = config.pe_lanes as u64;
        if let Err(e) = check_config(config) {
            panic!("{e}");
        }
        let beats = u64::from(config.weight_port_beats());
        assert_eq!(WB, weight_port_bits(config), "the weight port of `{}`", config.name);
        Matrix {
            clock: Default::default(),
            reset: Default::default(),
            flush: Default::default(),
            go: Default::default(),
            iss_valid: Default::default(),
            iss_ready: Default::default(),
            iss_word: Default::default(),
            iss_pc: Default::default(),
            idle: Default::default(),
            progress: Default::default(),
            trap_valid: Default::default(),
            trap_code: Default::default(),
            trap_pc: Default::default(),
            trap_info: Default::default(),
            m_req: Default::default(),
            m_req_ready: Default::default(),
            m_addr: Default::default(),
            m_resp: Default::default(),
            m_rdata: Default::default(),
            s_we: Default::default(),
            s_waddr: Default::default(),
            s_wdata: Default::default(),
            s_raddr: Default::default(),
            s_rdata: Default::default(),
            red_raddr: Default::default(),
            red_rdata: Default::default(),
            red_we: Default::default(),
            red_waddr: Default::default(),
            red_wdata: Default::default(),
            bytes_read: Default::default(),
            macs: Default::default(),
            dp: MatrixDatapath::new(dp_cores),
            start0: Default::default(),
            start1: Default::default(),
            round0: Default::default(),
            round1: Default::default(),
            f16dot: Default::default(),
            state: Default::default(),
            pc: Default::default(),
            fmt: Default::default(),
            f32o: Default::default(),
            accf: Default::default(),
            redm: Default::default(),
            ntok: Default::default(),
            dst: Default::default(),
            src: Default::default(),
            rows: Default::default(),
            cols: Default::default(),
            wline: Default::default(),
            bb: Default::default(),
            nb: Default::default(),
            rb: Default::default(),
            src_pitch: Default::default(),
            dst_pitch: Default::default(),
            src_len: Default::default(),
            dst_len: Default::default(),
            mac_count: Default::default(),
            trap_r: Default::default(),
            trap_code_r: Default::default(),
            trap_info_r: Default::default(),
            rd_total: Default::default(),
            rd_pend: Default::default(),
            macs_total: Default::default(),
            outstanding: Default::default(),
            rows_left: Default::default(),
            grows: Default::default(),
            gout: Default::default(),
            nreqs: Default::default(),
            gbytes: Default::default(),
            c_buf: Default::default(),
            lstate: Default::default(),
            l_rows_left: Default::default(),
            l_gbyte: Default::default(),
            l_grows: Default::default(),
            l_buf: Default::default(),
            ready: Default::default(),
            busy: Default::default(),
            r_buf: Default::default(),
            b_grows_0: Default::default(),
            b_grows_1: Default::default(),
            b_grows_2: Default::default(),
            b_grows_3: Default::default(),
            b_grows_4: Default::default(),
            b_grows_5: Default::default(),
            b_grows_6: Default::default(),
            b_grows_7: Default::default(),
            b_base_0: Default::default(),
            b_base_1: Default::default(),
            b_base_2: Default::default(),
            b_base_3: Default::default(),
            b_base_4: Default::default(),
            b_base_5: Default::default(),
            b_base_6: Default::default(),
            b_base_7: Default::default(),
            gspan: Default::default(),
            ring_free: Default::default(),
            c_base: Default::default(),
            l_base: Default::default(),
            req_k: Default::default(),
            resp_k: Default::default(),
            tok: Default::default(),
            blk: Default::default(),
            step: Default::default(),
            xtok: Default::default(),
            xblk: Default::default(),
            woff: Default::default(),
            xlo: Default::default(),
            pf0: Default::default(),
            xf: Default::default(),
            inflight: Default::default(),
            ostate: Default::default(),
            otok: Default::default(),
            ochunk_row: Default::default(),
            obyte: Default::default(),
            otok_byte: Default::default(),
            ro_grows: Default::default(),
            ro_gout: Default::default(),
            olane: Default::default(),
            old: Default::default(),
            obuf: Default::default(),
            outc0: Default::default(),
            outc1: Default::default(),
            wb_byte0: Default::default(),
            wb_byte1: Default::default(),
            wb_mask0: Default::default(),
            wb_mask1: Default::default(),
            wb_sq0: Default::default(),
            wb_sq1: Default::default(),
            wb_tok0: Default::default(),
            wb_tok1: Default::default(),
            wb_first0: Default::default(),
            wb_first1: Default::default(),
            wr_go: Default::default(),
            wr_b: Default::default(),
            p1_v: Default::default(),
            p1_j: Default::default(),
            p1_b: Default::default(),
            p1_l: Default::default(),
            p1_r: Default::default(),
            p1_a0: Default::default(),
            p1_a1: Default::default(),
            p1_n0: Default::default(),
            p1_n1: Default::default(),
            p1_o0: Default::default(),
            p1_o1: Default::default(),
            pa_v: Default::default(),
            pa_j: Default::default(),
            pa_b: Default::default(),
            pa_l: Default::default(),
            pa_r: Default::default(),
            pa_a0: Default::default(),
            pa_a1: Default::default(),
            pa_i0: Default::default(),
            pa_i1: Default::default(),
            pa_n0: Default::default(),
            pa_n1: Default::default(),
            p2_v: Default::default(),
            p2_j: Default::default(),
            p2_b: Default::default(),
            p2_l: Default::default(),
            p2_r: Default::default(),
            s0: Default::default(),
            s1: Default::default(),
            sn0: Default::default(),
            sn1: Default::default(),
            pr_v: Default::default(),
            pr_j: Default::default(),
            pr_b: Default::default(),
            pr_l: Default::default(),
            pr_r: Default::default(),
            pr_out_j: Default::default(),
            rqd_v: Default::default(),
            rqd_tok: Default::default(),
            rqd_first: Default::default(),
            rq1_v: Default::default(),
            rq1_tok: Default::default(),
            rq1_first: Default::default(),
            rq2_v: Default::default(),
            rq2_tok: Default::default(),
            rq2_first: Default::default(),
            rq2_sum: Default::default(),
            f_nk: Default::default(),
            f_lastn: Default::default(),
            f_nl: Default::default(),
            f_lane: Default::default(),
            f_k: Default::default(),
            f_h: Default::default(),
            f_oj: Default::default(),
            fd_v: Default::default(),
            fd_h: Default::default(),
            fd_first: Default::default(),
            fd_last: Default::default(),
            fd_n: Default::default(),
            fd_x: Default::default(),
            f_w0: Default::default(),
            max_batch: k(u64::from(config.max_batch)),
            max_row: k(u64::from(config.max_matmul_row_bytes())),
            mem_bytes: k(config.device_memory_bytes),
            spm_bytes: k(u64::from(config.scratchpad_bytes)),
            op_matmul: k(u64::from(decode::opcode("matmul"))),
            fmt_w4m: k(u64::from(WeightFormat::W4Min.code())),
            fmt_w4: k(u64::from(WeightFormat::W4.code())),
            fmt_w8: k(u64::from(WeightFormat::W8.code())),
            fmt_f16: k(u64::from(WeightFormat::F16.code())),
            bb_w4m: k(WeightFormat::W4Min.block_bytes() as u64),
            bb_w4: k(WeightFormat::W4.block_bytes() as u64),
            bb_w8: k(WeightFormat::W8.block_bytes() as u64),
            group_rows: k(2 * lanes),
            group_shift: k(u64::from((2 * lanes).trailing_zeros())),
            ring: k(8 * u64::from(config.weight_row_lines())),
            quad_mask: k(lanes / 4 - 1),
            beat_shift: k(u64::from(beats.trailing_zeros())),
            req_shift: k(u64::from((lanes / 4 / beats).trailing_zeros())),
            lane_shift: k(u64::from((16 * lanes).trailing_zeros())),
            align_mask: k(opu_hw::weight_layout::WeightLayout::align_bytes(config) - 1),
            f_fmt: f("fmt"),
            f_out: f("out"),
            f_acc: f("acc"),
            f_red: f("red"),
            f_ntok: f("ntok"),
            f_dst: f("dst"),
            f_src: f("src"),
            f_rows: f("rows"),
            f_cols: f("cols"),
            f_w: f("w"),
            c_bad: k(ErrorCode::BadOperand as u64),
            c_mem: k(ErrorCode::MemOutOfRange as u64),
            c_spm: k(ErrorCode::ScratchpadOutOfRange as u64),
            ones32: k(0xFFFF_FFFF),
            ones128: Constant::new(!Bits::<128>::default()),
            opc: Default::default(),
            raise: Default::default(),
            raise_code: Default::default(),
            raise_info: Default::default(),
            span_start: Default::default(),
            span_end: Default::default(),
            spm_first: Default::default(),
            fmt_in: Default::default(),
            supported: Default::default(),
            w8: Default::default(),
            f16: Default::default(),
            f_issue: Default::default(),
            f_n: Default::default(),
            f_x: Default::default(),
            f_mask: Default::default(),
            f_kick: Default::default(),
            ro_j: Default::default(),
            last_step: Default::default(),
            last_blk: Default::default(),
            last_tok: Default::default(),
            ro_read: Default::default(),
            need_old: Default::default(),
            last_lane: Default::default(),
            w_fire: Default::default(),
            w_byte_now: Default::default(),
            w_mask_now: Default::default(),
            w_data: Default::default(),
            w_sq: Default::default(),
            w_tok: Default::default(),
            w_first: Default::default(),
            c_sq: Default::default(),
            c_first: Default::default(),
            outc_cur: Default::default(),
            outc_new: Default::default(),
            sp_word: Default::default(),
            next_crow: Default::default(),
            row1_ok: Default::default(),
            wmask: Default::default(),
            wwords: Default::default(),
            cvalid: Default::default(),
            src_end: Default::default(),
            dst_end: Default::default(),
            w_byte: Default::default(),
            w_len: Default::default(),
            pl_lo: Default::default(),
            pl_hi: Default::default(),
            nt1: Default::default(),
            w_groups: Default::default(),
            g_rows: Default::default(),
            rdy_set: Default::default(),
            rdy_clr: Default::default(),
            bsy_set: Default::default(),
            r_base: Default::default(),
            r_quad: Default::default(),
            r_pos: Default::default(),
            e_grows: Default::default(),
            e_base: Default::default(),
            ring_take: Default::default(),
            ring_give: Default::default(),
            ring_init: Default::default(),
            r_valid: Default::default(),
            r_last: Default::default(),
            ntr: Default::default(),
            lane_sel: Default::default(),
            old_sh: Default::default(),
            pf_lo: Default::default(),
            pf_hi: Default::default(),
            next_last: Default::default(),
            old_lane: Default::default(),
            i0: Default::default(),
            i1: Default::default(),
            in0: Default::default(),
            in1: Default::default(),
            place_sh: Default::default(),
            place_v: Default::default(),
            place_m: Default::default(),
            sq_rows: Default::default(),
            red_base: Default::default(),
        }
    }
}

impl<const WB: usize> Logic for Matrix<WB> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, state, pc, fmt, f32o, accf, redm, ntok, dst, src, rows, cols, wline, bb, nb, rb, src_pitch, dst_pitch,
            src_len, dst_len, mac_count, trap_r, trap_code_r, trap_info_r, rd_total, rd_pend, macs_total, outstanding, rows_left,
            grows, gout, nreqs, gbytes, req_k, resp_k, tok, blk, step, xtok, xblk, woff, xlo, pf0, xf, inflight, ostate,
            otok, ochunk_row, obyte, otok_byte, olane, old, obuf, outc0, outc1, wb_byte0, wb_byte1, wb_mask0, wb_mask1, wb_sq0, wb_sq1,
            wb_tok0, wb_tok1, wb_first0, wb_first1, wr_go, wr_b, p1_v, p1_j, p1_b, p1_l, p1_r, p1_a0, p1_a1, p1_n0, p1_n1, p1_o0, p1_o1,
            pa_v, pa_j, pa_b, pa_l, pa_r, pa_a0, pa_a1, pa_i0, pa_i1, pa_n0, pa_n1, p2_v, p2_j, p2_b, p2_l, p2_r, s0, s1, sn0, sn1, pr_v, pr_j, pr_b, pr_l, pr_r, rqd_v, rqd_tok, rqd_first, rq1_v, rq1_tok, rq1_first, rq2_v, rq2_tok, rq2_first,
            rq2_sum, c_buf, lstate, l_rows_left, l_gbyte, l_grows, l_buf, ready, busy, r_buf,
            b_grows_0, b_grows_1, b_grows_2, b_grows_3, b_grows_4, b_grows_5, b_grows_6, b_grows_7,
            b_base_0, b_base_1, b_base_2, b_base_3, b_base_4, b_base_5, b_base_6, b_base_7,
            gspan, ring_free, c_base, l_base, ro_grows, ro_gout, f_nk, f_lastn, f_nl, f_lane, f_k, f_h, f_oj, fd_v, fd_h,
            fd_first, fd_last, fd_n, fd_x, f_w0
        );
        self.dp.clock.next = self.clock.val();
        self.dp.reset.next = self.reset.val();
        self.round0.clock.next = self.clock.val();
        self.round1.clock.next = self.clock.val();
        self.f16dot.clock.next = self.clock.val();
        self.f16dot.reset.next = self.reset.val();

        // ---- issue: matmul, every format
        self.opc.next = self.iss_word.val().get_bits::<8>(0);
        self.fmt_in.next = self.iss_word.val().get_bits::<3>(self.f_fmt.val().index());
        self.supported.next = (self.opc.val() == self.op_matmul.val())
            & ((self.fmt_in.val() == self.fmt_w4m.val())
                | (self.fmt_in.val() == self.fmt_w4.val())
                | (self.fmt_in.val() == self.fmt_w8.val())
                | (self.fmt_in.val() == self.fmt_f16.val()));
        self.idle.next = self.state.q.val() == MatrixState::Idle;
        self.iss_ready.next = (self.state.q.val() == MatrixState::Idle) & self.supported.val() & !self.trap_r.q.val();
        self.progress.next = false;
        self.trap_valid.next = self.trap_r.q.val();
        // a trap is reported for one cycle (the core keeps it; the queue drops what follows)
        self.trap_r.d.next = false;
        self.trap_code.next = self.trap_code_r.q.val();
        self.trap_pc.next = self.pc.q.val();
        self.trap_info.next = self.trap_info_r.q.val();
        self.bytes_read.next = self.rd_total.q.val();
        self.macs.next = self.macs_total.q.val();
        self.w8.next = self.fmt.q.val() == self.fmt_w8.val();
        self.f16.next = self.fmt.q.val() == self.fmt_f16.val();
        self.last_step.next = self.step.q.val() == 1;
        if self.w8.val() {
            self.last_step.next = self.step.q.val() == 3;
        }
        self.last_blk.next = bit_cast::<16, 11>(self.blk.q.val()) + 1 == bit_cast::<16, 11>(self.nb.q.val());
        self.last_tok.next = bit_cast::<16, 7>(self.tok.q.val()) + 1 == bit_cast::<16, 7>(self.ntok.q.val());

        // ---- check arithmetic: (ntok - 1) x pitch from 16 x 16 products; span ends; the weights
        self.nt1.next = bit_cast::<16, 7>(self.ntok.q.val()) - 1;
        self.pl_lo.next = self.nt1.val() * self.src_pitch.q.val().get_bits::<16>(0);
        self.pl_hi.next = self.nt1.val() * self.src_pitch.q.val().get_bits::<16>(16);
        if self.state.q.val() == MatrixState::Check2 {
            self.pl_lo.next = self.nt1.val() * self.dst_pitch.q.val().get_bits::<16>(0);
            self.pl_hi.next = self.nt1.val() * self.dst_pitch.q.val().get_bits::<16>(16);
        }
        self.src_end.next = (bit_cast::<32, 20>(self.src.q.val()) << 2) + self.src_len.q.val();
        self.dst_end.next = (bit_cast::<32, 20>(self.dst.q.val()) << 2) + self.dst_len.q.val();
        self.w_byte.next = bit_cast::<48, 32>(self.wline.q.val()) << 5;
        // the weights' bytes: whole groups of `16 pe_lanes K` bytes (`WeightLayout::matrix_bytes`)
        self.w_groups.next = bit_cast::<16, 17>(
            (bit_cast::<17, 16>(self.rows.q.val()) + bit_cast::<17, 16>(self.group_rows.val()) - 1) >> self.group_shift.val(),
        );
        self.w_len.next = bit_cast::<48, 32>(self.w_groups.val() * self.gspan.q.val()) << self.lane_shift.val();
        self.ntr.next = bit_cast::<16, 7>(self.ntok.q.val()) * self.rows.q.val();
        // the group the loader starts next: its rows
        self.g_rows.next = self.l_rows_left.q.val();
        if self.l_rows_left.q.val() > self.group_rows.val() {
            self.g_rows.next = self.group_rows.val();
        }
        self.rdy_set.next = 0.into();
        self.rdy_clr.next = 0.into();
        self.bsy_set.next = 0.into();
        self.ring_take.next = 0.into();
        self.ring_give.next = 0.into();
        self.ring_init.next = false;
        // the entries' base units for the response side (r_buf), rows and base for the compute's next group
        // (c_buf)
        self.r_base.next = self.b_base_0.q.val();
        if self.r_buf.q.val() == 1 {
            self.r_base.next = self.b_base_1.q.val();
        }
        if self.r_buf.q.val() == 2 {
            self.r_base.next = self.b_base_2.q.val();
        }
        if self.r_buf.q.val() == 3 {
            self.r_base.next = self.b_base_3.q.val();
        }
        if self.r_buf.q.val() == 4 {
            self.r_base.next = self.b_base_4.q.val();
        }
        if self.r_buf.q.val() == 5 {
            self.r_base.next = self.b_base_5.q.val();
        }
        if self.r_buf.q.val() == 6 {
            self.r_base.next = self.b_base_6.q.val();
        }
        if self.r_buf.q.val() == 7 {
            self.r_base.next = self.b_base_7.q.val();
        }
        self.e_grows.next = self.b_grows_0.q.val();
        self.e_base.next = self.b_base_0.q.val();
        if self.c_buf.q.val() == 1 {
            self.e_grows.next = self.b_grows_1.q.val();
            self.e_base.next = self.b_base_1.q.val();
        }
        if self.c_buf.q.val() == 2 {
            self.e_grows.next = self.b_grows_2.q.val();
            self.e_base.next = self.b_base_2.q.val();
        }
        if self.c_buf.q.val() == 3 {
            self.e_grows.next = self.b_grows_3.q.val();
            self.e_base.next = self.b_base_3.q.val();
        }
        if self.c_buf.q.val() == 4 {
            self.e_grows.next = self.b_grows_4.q.val();
            self.e_base.next = self.b_base_4.q.val();
        }
        if self.c_buf.q.val() == 5 {
            self.e_grows.next = self.b_grows_5.q.val();
            self.e_base.next = self.b_base_5.q.val();
        }
        if self.c_buf.q.val() == 6 {
            self.e_grows.next = self.b_grows_6.q.val();
            self.e_base.next = self.b_base_6.q.val();
        }
        if self.c_buf.q.val() == 7 {
            self.e_grows.next = self.b_grows_7.q.val();
            self.e_base.next = self.b_base_7.q.val();
        }
        // a response of the group filling entry r_buf (none are taken while draining after a flush)
        self.r_valid.next = self.m_resp.val() & (self.state.q.val() != MatrixState::Drain) & (self.state.q.val() != MatrixState::Idle);
        self.r_last.next = self.resp_k.q.val() + 1 == self.nreqs.q.val();
        // beat `k` of a group carries unit `k / (pe_lanes / 4)` of lanes `4 (k mod pe_lanes / 4) ..+ 4`;
        // response `n` is beats `W n .. W n + W`: one unit of quads `W n mod (pe_lanes / 4) ..+ W`
        self.r_quad.next = bit_cast::<16, 24>((self.resp_k.q.val() << self.beat_shift.val()) & self.quad_mask.val());
        self.r_pos.next = self.r_base.val() + bit_cast::<16, 24>(self.resp_k.q.val() >> self.req_shift.val());

        // ---- datapath wiring
        self.dp.ld_valid.next = self.r_valid.val();
        self.dp.ld_quad.next = self.r_quad.val();
        self.dp.ld_pos.next = self.r_pos.val();
        self.dp.ld_line.next = self.m_rdata.val();
        self.dp.rd_rb.next = self.rb.q.val().get_bits::<16>(0);
        self.dp.rd_base.next = self.c_base.q.val();
        self.dp.rd_off.next = self.woff.q.val();
        self.dp.rd_fmt.next = self.fmt.q.val().get_bits::<2>(0);
        self.dp.f_valid.next = false;
        self.dp.f_half.next = self.step.q.val().get_bit(0);
        self.dp.f_row.next = self.step.q.val().get_bit(1);
        self.dp.f_clear.next = self.blk.q.val() == 0;
        self.dp.f_last.next = self.last_blk.val();
        self.dp.f_xf.next = self.xf.q.val();
        self.m_req.next = false;
        self.m_addr.next = bit_cast::<64, 48>((self.l_gbyte.q.val() >> 6) + (bit_cast::<48, 24>(self.req_k.q.val()) << self.beat_shift.val()));

        // ---- scratchpad: the readout's reads of old words first, the activation reads when it leaves the read
        // port free; the chunks' writes go on the write port beside them
        self.need_old.next = self.accf.q.val() | self.f16.val() | (!self.f32o.q.val() & self.ro_grows.q.val().get_bit(0));
        self.ro_read.next = (self.ostate.q.val() == OutState::Read) & self.need_old.val();
        // the next block's two lines are read in the current block's last two steps (W4Min / W4: steps 0
        // and 1; W8: 2 and 3), so the blocks of a token follow each other without a gap
        self.next_last.next = bit_cast::<16, 11>(self.blk.q.val()) + 2 == bit_cast::<16, 11>(self.nb.q.val());
        self.pf_lo.next = (self.state.q.val() == MatrixState::Step) & !self.last_blk.val() & (self.step.q.val() == 0);
        if self.w8.val() {
            self.pf_lo.next = (self.state.q.val() == MatrixState::Step) & !self.last_blk.val() & (self.step.q.val() == 2);
        }
        self.pf_hi.next = (self.state.q.val() == MatrixState::Step) & !self.last_blk.val() & self.last_step.val();
        self.sp_word.next = self.xblk.q.val() >> 2;
        if self.state.q.val() == MatrixState::XRead1 {
            self.sp_word.next = (self.xblk.q.val() >> 2) + 8;
        }
        if self.pf_lo.val() {
            self.sp_word.next = (self.xblk.q.val() + 64) >> 2;
        }
        if self.pf_hi.val() {
            self.sp_word.next = ((self.xblk.q.val() + 64) >> 2) + 8;
        }
        // `fmt=f16`: the activations of the step at stage 3 (row 1's), for the router a cycle later
        if self.fd_v.q.val().get_bit(3) & self.fd_h.q.val().get_bit(3) {
            self.sp_word.next = self.fd_x.q.val().get_bits::<32>(96);
        }
        if self.ro_read.val() {
            self.sp_word.next = self.obyte.q.val() >> 2;
        }
        self.s_raddr.next = bit_cast::<SPM_WORD_BITS, 32>(self.sp_word.val());
        // the chunk being issued: the words holding a valid row, the rows its reduction sums, whether it
        // starts its token's `RED` (`red=set`: the first group's first chunk)
        self.cvalid.next = 0.into();
        if self.ochunk_row.q.val() < self.ro_grows.q.val() {
            self.cvalid.next = self.ro_grows.q.val() - self.ochunk_row.q.val();
        }
        self.wwords.next = (self.cvalid.val() + 1) >> 1;
        if self.f32o.q.val() {
            self.wwords.next = self.cvalid.val();
        }
        self.wmask.next = bits::<8>(255);
        if self.wwords.val() < 8 {
            self.wmask.next = bit_cast::<8, 9>((bits::<9>(1) << bit_cast::<9, 16>(self.wwords.val())) - 1);
        }
        self.sq_rows.next = self.cvalid.val();
        if self.f32o.q.val() & (self.cvalid.val() > 8) {
            self.sq_rows.next = 8.into();
        }
        if self.cvalid.val() > 16 {
            self.sq_rows.next = 16.into();
        }
        self.c_sq.next = bit_cast::<16, 17>((bits::<17>(1) << bit_cast::<17, 16>(self.sq_rows.val())) - 1);
        self.c_first.next = (self.redm.q.val() == 1) & (self.ro_gout.q.val() == 0) & (self.ochunk_row.q.val() == 0);
        // a chunk write: the writer's (a chunk's buffer, the cycle after its last lane was placed), or
        // `fmt=f16`'s Write of the chunk in hand
        self.w_fire.next = self.wr_go.q.val() | (self.ostate.q.val() == OutState::Write);
        self.w_byte_now.next = self.obyte.q.val();
        self.w_mask_now.next = self.wmask.val();
        self.w_data.next = self.outc0.q.val();
        self.w_sq.next = self.c_sq.val();
        self.w_tok.next = self.otok.q.val().get_bits::<6>(0);
        self.w_first.next = self.c_first.val();
        if self.wr_go.q.val() & !self.wr_b.q.val() {
            self.w_byte_now.next = self.wb_byte0.q.val();
            self.w_mask_now.next = self.wb_mask0.q.val();
            self.w_sq.next = self.wb_sq0.q.val();
            self.w_tok.next = self.wb_tok0.q.val();
            self.w_first.next = self.wb_first0.q.val();
        }
        if self.wr_go.q.val() & self.wr_b.q.val() {
            self.w_byte_now.next = self.wb_byte1.q.val();
            self.w_mask_now.next = self.wb_mask1.q.val();
            self.w_data.next = self.outc1.q.val();
            self.w_sq.next = self.wb_sq1.q.val();
            self.w_tok.next = self.wb_tok1.q.val();
            self.w_first.next = self.wb_first1.q.val();
        }
        self.s_waddr.next = bit_cast::<SPM_WORD_BITS, 32>(self.w_byte_now.val() >> 2);
        self.s_we.next = 0.into();
        self.s_wdata.next = self.w_data.val();
        if self.w_fire.val() {
            self.s_we.next = self.w_mask_now.val();
            self.progress.next = true;
        }

        // ---- checks: a violation raises the trap (one place below); the scratchpad span checked is the
        // destination's in Check3, the source's in Check4, its first faulting byte as the functional simulator
        // reports it
        self.raise.next = false;
        self.f_kick.next = false;
        self.raise_code.next = self.c_bad.val();
        self.raise_info.next = 0.into();
        self.span_start.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
        self.span_end.next = self.dst_end.val();
        if self.state.q.val() == MatrixState::Check4 {
            self.span_start.next = bit_cast::<32, 20>(self.src.q.val()) << 2;
            self.span_end.next = self.src_end.val();
        }
        self.spm_first.next = bit_cast::<64, 32>(self.span_start.val());
        if self.span_start.val() < self.spm_bytes.val() {
            self.spm_first.next = bit_cast::<64, 32>(self.spm_bytes.val());
        }

        // ---- the instruction
        match self.state.q.val() {
            MatrixState::Idle => {
                if self.iss_valid.val() & self.supported.val() & !self.trap_r.q.val() {
                    self.pc.d.next = self.iss_pc.val();
                    self.fmt.d.next = self.fmt_in.val();
                    self.f32o.d.next = self.iss_word.val().get_bit(self.f_out.val().index());
                    self.accf.d.next = self.iss_word.val().get_bit(self.f_acc.val().index());
                    self.redm.d.next = self.iss_word.val().get_bits::<2>(self.f_red.val().index());
                    self.ntok.d.next = self.iss_word.val().get_bits::<7>(self.f_ntok.val().index());
                    self.dst.d.next = self.iss_word.val().get_bits::<20>(self.f_dst.val().index());
                    self.src.d.next = self.iss_word.val().get_bits::<20>(self.f_src.val().index());
                    self.rows.d.next = self.iss_word.val().get_bits::<16>(self.f_rows.val().index());
                    self.cols.d.next = self.iss_word.val().get_bits::<16>(self.f_cols.val().index());
                    self.wline.d.next = self.iss_word.val().get_bits::<32>(self.f_w.val().index());
                    self.state.d.next = MatrixState::Check0;
                }
            }
            MatrixState::Check0 => {
                self.bb.d.next = self.bb_w4m.val();
                if self.fmt.q.val() == self.fmt_w4.val() {
                    self.bb.d.next = self.bb_w4.val();
                }
                if self.w8.val() {
                    self.bb.d.next = self.bb_w8.val();
                }
                self.nb.d.next = self.cols.q.val().get_bits::<11>(5);
                // the source rows are whole blocks of FP16 (a multiple of 64 bytes; F16: any columns, padded to
                // 4 bytes); the outputs pad to 4 bytes
                self.src_pitch.d.next = bit_cast::<32, 16>(self.cols.q.val()) << 1;
                if self.f16.val() {
                    self.src_pitch.d.next = ((bit_cast::<32, 16>(self.cols.q.val()) << 1) + 3) & !bits::<32>(3);
                }
                self.dst_pitch.d.next = ((bit_cast::<32, 16>(self.rows.q.val()) << 1) + 3) & !bits::<32>(3);
                if self.f32o.q.val() {
                    self.dst_pitch.d.next = bit_cast::<32, 16>(self.rows.q.val()) << 2;
                }
                self.state.d.next = MatrixState::Check1;
                if (self.ntok.q.val() == 0)
                    | (self.rows.q.val() == 0)
                    | (self.cols.q.val() == 0)
                    | (self.ntok.q.val() > self.max_batch.val())
                    | ((self.cols.q.val().get_bits::<5>(0) != 0) & !self.f16.val())
                {
                    self.raise.next = true;
                }
            }
            MatrixState::Check1 => {
                self.rb.d.next = bit_cast::<16, 11>(self.nb.q.val()) * bit_cast::<16, 6>(self.bb.q.val());
                // F16: 2 bytes a weight; step pairs of 8 columns
                self.f_nk.d.next = bit_cast::<16, 17>((bit_cast::<17, 16>(self.cols.q.val()) + 7) >> 3);
                self.f_lastn.d.next = bit_cast::<4, 16>((self.cols.q.val() - 1) & bits::<16>(7)) + 1;
                if self.f16.val() {
                    self.rb.d.next = bit_cast::<32, 16>(self.cols.q.val()) << 1;
                }
                // src_len with the source pitch (pl_* of src_pitch), dst_len next cycle
                self.src_len.d.next = self.pl_lo.val() + (self.pl_hi.val() << 16) + (bit_cast::<32, 16>(self.cols.q.val()) << 1);
                self.state.d.next = MatrixState::Check2;
            }
            MatrixState::Check2 => {
                self.dst_len.d.next = self.pl_lo.val() + (self.pl_hi.val() << 16) + (bit_cast::<32, 16>(self.rows.q.val()) << 1);
                if self.f32o.q.val() {
                    self.dst_len.d.next = self.pl_lo.val() + (self.pl_hi.val() << 16) + (bit_cast::<32, 16>(self.rows.q.val()) << 2);
                }
                self.state.d.next = MatrixState::Check3;
                // a lane's share of a group: its two rows in 16-byte units
                self.gspan.d.next = bit_cast::<16, 32>(((self.rb.q.val() << 1) + 15) >> 4);
                // a row the ring cannot hold twice, or weights not at a multiple of 16 pe_lanes bytes
                if (self.rb.q.val() > self.max_row.val()) | ((self.w_byte.val() & self.align_mask.val()) != 0) {
                    self.raise.next = true;
                }
            }
            MatrixState::Check3 => {
                self.state.d.next = MatrixState::Check4;
                self.nreqs.d.next = bit_cast::<24, 16>(self.gspan.q.val()) << self.req_shift.val();
                self.gbytes.d.next = bit_cast::<48, 16>(self.gspan.q.val()) << self.lane_shift.val();
                if ((bit_cast::<32, 20>(self.src.q.val()) << 2) < self.dst_end.val())
                    & ((bit_cast::<32, 20>(self.dst.q.val()) << 2) < self.src_end.val())
                {
                    self.raise.next = true;
                } else if self.span_end.val() > self.spm_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_spm.val();
                    self.raise_info.next = self.spm_first.val();
                }
            }
            MatrixState::Check4 => {
                self.state.d.next = MatrixState::Check5;
                if self.span_end.val() > self.spm_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_spm.val();
                    self.raise_info.next = self.spm_first.val();
                }
            }
            MatrixState::Check5 => {
                // every check passed unless the weights leave device memory; set up group 0
                self.state.d.next = MatrixState::Group;
                self.rows_left.d.next = self.rows.q.val();
                self.gout.d.next = 0.into();
                self.otok.d.next = 0.into();
                self.otok_byte.d.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
                self.obuf.d.next = false;
                self.mac_count.d.next = bit_cast::<64, 32>(self.ntr.val().get_bits::<16>(0) * self.cols.q.val())
                    + (bit_cast::<64, 32>(self.ntr.val().get_bits::<16>(16) * self.cols.q.val()) << 16);
                if self.w_byte.val() + self.w_len.val() > self.mem_bytes.val() {
                    self.raise.next = true;
                    self.raise_code.next = self.c_mem.val();
                    self.raise_info.next = bit_cast::<64, 48>(self.w_byte.val());
                    if self.w_byte.val() < self.mem_bytes.val() {
                        self.raise_info.next = bit_cast::<64, 48>(self.mem_bytes.val());
                    }
                } else {
                    self.rd_pend.d.next = self.w_len.val();
                    // the loader starts with group 0 in entry 0 at ring position 0, the whole ring free
                    self.lstate.d.next = LoadState::Group;
                    self.l_rows_left.d.next = self.rows.q.val();
                    self.l_gbyte.d.next = self.w_byte.val();
                    self.l_buf.d.next = 0.into();
                    self.l_base.d.next = 0.into();
                    self.r_buf.d.next = 0.into();
                    self.resp_k.d.next = 0.into();
                    self.rdy_clr.next = 255.into();
                    self.ring_init.next = true;
                    self.c_buf.d.next = 0.into();
                }
            }
            MatrixState::Group => {
                // the group of entry c_buf, once the loader has it (and the other units are idle); the
                // `matmul`'s MACs and bytes count from its first group's compute
                if self.go.val() & ((self.ready.q.val() & (bits::<8>(1) << bit_cast::<8, 3>(self.c_buf.q.val()))) != 0) {
                    self.macs_total.d.next = self.macs_total.q.val() + self.mac_count.q.val();
                    self.mac_count.d.next = 0.into();
                    self.rd_total.d.next = self.rd_total.q.val() + bit_cast::<64, 48>(self.rd_pend.q.val());
                    self.rd_pend.d.next = 0.into();
                    self.grows.d.next = self.e_grows.val();
                    self.c_base.d.next = self.e_base.val();
                    self.tok.d.next = 0.into();
                    self.xtok.d.next = bit_cast::<32, 20>(self.src.q.val()) << 2;
                    self.state.d.next = MatrixState::Token;
                    if self.f16.val() {
                        self.state.d.next = MatrixState::FTok;
                    }
                }
            }
            MatrixState::Token => {
                self.blk.d.next = 0.into();
                self.step.d.next = 0.into();
                self.woff.d.next = 0.into();
                self.xblk.d.next = self.xtok.q.val();
                self.state.d.next = MatrixState::XRead0;
            }
            MatrixState::XRead0 => {
                // the last block of a token waits until the hold registers are free for its capture
                if !self.ro_read.val() & !(self.last_blk.val() & (self.inflight.q.val() | (self.ostate.q.val() != OutState::Idle))) {
                    self.state.d.next = MatrixState::XRead1;
                }
            }
            MatrixState::XRead1 => {
                if !self.ro_read.val() {
                    self.xlo.d.next = self.s_rdata.val();
                    self.state.d.next = MatrixState::Step;
                    self.step.d.next = 0.into();
                } else {
                    // the readout took the port: read the low half again
                    self.state.d.next = MatrixState::XRead0;
                }
            }
            MatrixState::Step => {
                self.dp.f_valid.next = true;
                self.progress.next = true;
                if self.step.q.val() == 0 {
                    // the high half arrives now
                    self.dp.f_xf.next = bit_cast::<512, 256>(self.xlo.q.val()) | (bit_cast::<512, 256>(self.s_rdata.val()) << 256);
                    self.xf.d.next = bit_cast::<512, 256>(self.xlo.q.val()) | (bit_cast::<512, 256>(self.s_rdata.val()) << 256);
                }
                self.step.d.next = self.step.q.val() + 1;
                if self.pf_lo.val() {
                    self.pf0.d.next = !self.ro_read.val();
                }
                if self.last_step.val() {
                    self.step.d.next = 0.into();
                    self.blk.d.next = self.blk.q.val() + 1;
                    self.woff.d.next = self.woff.q.val() + bit_cast::<16, 6>(self.bb.q.val());
                    self.xblk.d.next = self.xblk.q.val() + 64;
                    self.state.d.next = MatrixState::XRead0;
                    // the prefetch: the low line arrives now and the high one is read; as in XRead0, the last
                    // block of a token waits until the hold registers are free (else the reads start over)
                    if self.pf_hi.val()
                        & self.pf0.q.val()
                        & !self.ro_read.val()
                        & !(self.next_last.val() & (self.inflight.q.val() | (self.ostate.q.val() != OutState::Idle)))
                    {
                        self.xlo.d.next = self.s_rdata.val();
                        self.state.d.next = MatrixState::Step;
                    }
                    if self.last_blk.val() {
                        self.inflight.d.next = true;
                        if self.last_tok.val() {
                            // the group's last weight read: its entry and positions are free for the loader
                            self.rdy_clr.next = bits::<8>(1) << bit_cast::<8, 3>(self.c_buf.q.val());
                            self.ring_give.next = self.gspan.q.val();
                        }
                        self.tok.d.next = self.tok.q.val() + 1;
                        self.xtok.d.next = self.xtok.q.val() + self.src_pitch.q.val();
                        self.state.d.next = MatrixState::Token;
                        if self.last_tok.val() {
                            self.state.d.next = MatrixState::GroupEnd;
                        }
                    }
                }
            }
            MatrixState::GroupEnd => {
                // once the group's last token is captured (the readout has taken `gout` and `grows`) the next
                // group starts while the readout stores this one; after the last group the unit waits for the
                // readout and the reductions
                if !self.inflight.q.val()
                    & ((self.rows_left.q.val() != self.grows.q.val())
                        | ((self.ostate.q.val() == OutState::Idle)
                            & !self.p1_v.q.val()
                            & !self.pa_v.q.val()
                            & !self.p2_v.q.val()
                            & (self.pr_v.q.val() == 0)
                            & !self.wr_go.q.val()
                            & (self.rqd_v.q.val() == 0)
                            & !self.rq1_v.q.val()
                            & !self.rq2_v.q.val()))
                {
                    self.rows_left.d.next = self.rows_left.q.val() - self.grows.q.val();
                    self.gout.d.next = self.gout.q.val() + (bit_cast::<32, 16>(self.grows.q.val()) << 1);
                    if self.f32o.q.val() {
                        self.gout.d.next = self.gout.q.val() + (bit_cast::<32, 16>(self.grows.q.val()) << 2);
                    }
                    self.state.d.next = MatrixState::Group;
                    // the next group is in the next entry
                    self.c_buf.d.next = self.c_buf.q.val() + 1;
                    if self.rows_left.q.val() == self.grows.q.val() {
                        self.progress.next = true;
                        self.state.d.next = MatrixState::Idle;
                    }
                }
            }
            MatrixState::FTok => {
                // the readout computes the token (`OutState::FLanes`) and stores it
                if self.ostate.q.val() == OutState::Idle {
                    self.f_kick.next = true;
                    self.state.d.next = MatrixState::FWait;
                }
            }
            MatrixState::FWait => {
                if self.ostate.q.val() == OutState::Idle {
                    self.tok.d.next = self.tok.q.val() + 1;
                    self.xtok.d.next = self.xtok.q.val() + self.src_pitch.q.val();
                    self.state.d.next = MatrixState::FTok;
                    if self.last_tok.val() {
                        // the group's last weight read: its entry and positions are free for the loader
                        self.rdy_clr.next = bits::<8>(1) << bit_cast::<8, 3>(self.c_buf.q.val());
                        self.ring_give.next = self.gspan.q.val();
                        self.state.d.next = MatrixState::GroupEnd;
                    }
                }
            }
            MatrixState::Drain => {
                if self.outstanding.q.val() == 0 {
                    self.state.d.next = MatrixState::Idle;
                }
            }
        }

        if self.raise.val() {
            self.trap_r.d.next = true;
            self.trap_code_r.d.next = self.raise_code.val();
            self.trap_info_r.d.next = self.raise_info.val();
            self.state.d.next = MatrixState::Idle;
        }

        // ---- readout of a captured token: chunks of 32 output bytes (16 FP16 rows, or 8 FP32)
        if self.dp.cap.val() {
            self.inflight.d.next = false;
        }
        self.lane_sel.next = bit_cast::<8, 16>(self.ochunk_row.q.val() >> 1) + bit_cast::<8, 4>(self.olane.q.val());
        self.dp.o_sel.next = self.lane_sel.val();
        // the lane whose values enter the pipeline: the next in order, or (F16) the next result
        self.ro_j.next = self.olane.q.val();
        if self.f16.val() {
            self.ro_j.next = self.f_oj.q.val();
        }
        self.old_sh.next = bit_cast::<9, 4>(self.ro_j.val()) << 5;
        if self.f32o.q.val() {
            self.old_sh.next = bit_cast::<9, 4>(self.ro_j.val()) << 6;
        }
        self.old_lane.next = bit_cast::<64, 256>(self.old.q.val() >> self.old_sh.val());
        self.next_crow.next = self.ochunk_row.q.val() + 16;
        if self.f32o.q.val() {
            self.next_crow.next = self.ochunk_row.q.val() + 8;
        }
        self.p1_v.d.next = false;
        self.last_lane.next = (self.ostate.q.val() == OutState::Lanes)
            & ((self.olane.q.val() == 7) | (self.f32o.q.val() & (self.olane.q.val() == 3)));
        match self.ostate.q.val() {
            OutState::Idle => {
                if self.dp.cap.val() | self.f_kick.val() {
                    self.ochunk_row.d.next = 0.into();
                    self.obyte.d.next = self.otok_byte.q.val() + self.gout.q.val();
                    self.ro_grows.d.next = self.grows.q.val();
                    self.ro_gout.d.next = self.gout.q.val();
                    self.ostate.d.next = OutState::Read;
                }
            }
            OutState::Read => {
                // (the old words are read now where the chunks need them)
                self.olane.d.next = 0.into();
                self.ostate.d.next = OutState::Lanes;
                if self.need_old.val() {
                    self.ostate.d.next = OutState::Old;
                }
            }
            OutState::Old => {
                self.old.d.next = self.s_rdata.val();
                if self.obuf.q.val() {
                    self.outc1.d.next = self.s_rdata.val();
                } else {
                    self.outc0.d.next = self.s_rdata.val();
                }
                self.olane.d.next = 0.into();
                self.ostate.d.next = OutState::Lanes;
                if self.f16.val() {
                    // the chunk's lanes: 8 (FP16 outputs) or 4, fewer at the group's end
                    self.f_nl.d.next = bit_cast::<4, 16>((self.ro_grows.q.val() - self.ochunk_row.q.val() + 1) >> 1);
                    if self.ro_grows.q.val() - self.ochunk_row.q.val() > 15 {
                        self.f_nl.d.next = 8.into();
                    }
                    if self.f32o.q.val() & (self.ro_grows.q.val() - self.ochunk_row.q.val() > 7) {
                        self.f_nl.d.next = 4.into();
                    }
                    self.f_lane.d.next = 0.into();
                    self.f_k.d.next = 0.into();
                    self.f_h.d.next = false;
                    self.f_oj.d.next = 0.into();
                    self.ostate.d.next = OutState::FLanes;
                }
            }
            OutState::Lanes => {
                self.p1_v.d.next = true;
                self.olane.d.next = self.olane.q.val() + 1;
                if self.last_lane.val() {
                    // the chunk is issued: what its write needs goes with its buffer (its lanes reach the
                    // buffer over the next 8 cycles, and the writer writes it the cycle after the last; a
                    // chunk has 4 lanes or more, so the buffer's next chunk starts placing after that
                    // write), and the next chunk starts at once in the other buffer
                    if self.obuf.q.val() {
                        self.wb_byte1.d.next = self.obyte.q.val();
                        self.wb_mask1.d.next = self.wmask.val();
                        self.wb_sq1.d.next = self.c_sq.val();
                        self.wb_tok1.d.next = self.otok.q.val().get_bits::<6>(0);
                        self.wb_first1.d.next = self.c_first.val();
                    } else {
                        self.wb_byte0.d.next = self.obyte.q.val();
                        self.wb_mask0.d.next = self.wmask.val();
                        self.wb_sq0.d.next = self.c_sq.val();
                        self.wb_tok0.d.next = self.otok.q.val().get_bits::<6>(0);
                        self.wb_first0.d.next = self.c_first.val();
                    }
                    self.obuf.d.next = !self.obuf.q.val();
                    self.obyte.d.next = self.obyte.q.val() + 32;
                    self.ochunk_row.d.next = self.next_crow.val();
                    self.olane.d.next = 0.into();
                    self.ostate.d.next = OutState::Lanes;
                    if self.need_old.val() {
                        self.ostate.d.next = OutState::Read;
                    }
                    if self.next_crow.val() >= self.ro_grows.q.val() {
                        // the token's rows of this group are issued: the hold registers are free for the
                        // next capture; after the group's last token the next group's first
                        self.otok.d.next = self.otok.q.val() + 1;
                        self.otok_byte.d.next = self.otok_byte.q.val() + self.dst_pitch.q.val();
                        if self.otok.q.val() + 1 == self.ntok.q.val() {
                            self.otok.d.next = 0.into();
                            self.otok_byte.d.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
                        }
                        self.ostate.d.next = OutState::Idle;
                    }
                }
            }
            OutState::FLanes => {
                // steps issued below; the chunk is done when its last lane's accumulators have come
                if self.f16dot.acc_done.val() & (self.f_oj.q.val() + 1 == self.f_nl.q.val()) {
                    self.ostate.d.next = OutState::Drain;
                }
            }
            OutState::Drain => {
                if !self.p1_v.q.val() & !self.pa_v.q.val() & !self.p2_v.q.val() & (self.pr_v.q.val() == 0) {
                    self.ostate.d.next = OutState::Write;
                }
            }
            OutState::Write => {
                self.obyte.d.next = self.obyte.q.val() + 32;
                self.ochunk_row.d.next = self.next_crow.val();
                self.ostate.d.next = OutState::Read;
                if self.next_crow.val() >= self.ro_grows.q.val() {
                    // the token's rows of this group are stored; after the group's last token the next
                    // group's first
                    self.otok.d.next = self.otok.q.val() + 1;
                    self.otok_byte.d.next = self.otok_byte.q.val() + self.dst_pitch.q.val();
                    if self.otok.q.val() + 1 == self.ntok.q.val() {
                        self.otok.d.next = 0.into();
                        self.otok_byte.d.next = bit_cast::<32, 20>(self.dst.q.val()) << 2;
                    }
                    self.ostate.d.next = OutState::Idle;
                }
            }
        }
        // stage 1: the lane's accumulators and old values; its buffer, last flag and row 1 (a group of odd
        // rows: the last lane's row 1 does not exist, its half of the word keeps the old bytes)
        self.row1_ok.next = self.ochunk_row.q.val() + (bit_cast::<16, 4>(self.ro_j.val()) << 1) + 1 < self.ro_grows.q.val();
        self.p1_b.d.next = self.obuf.q.val();
        self.p1_l.d.next = self.last_lane.val();
        self.p1_r.d.next = self.row1_ok.val();
        self.p1_j.d.next = self.olane.q.val();
        self.p1_a0.d.next = self.dp.o_acc0.val();
        self.p1_a1.d.next = self.dp.o_acc1.val();
        self.p1_n0.d.next = self.dp.o_nf0.val();
        self.p1_n1.d.next = self.dp.o_nf1.val();
        self.p1_o0.d.next = bit_cast::<32, 16>(self.old_lane.val().get_bits::<16>(0));
        self.p1_o1.d.next = bit_cast::<32, 16>(self.old_lane.val().get_bits::<16>(16));
        if self.f32o.q.val() {
            self.p1_o0.d.next = self.old_lane.val().get_bits::<32>(0);
            self.p1_o1.d.next = self.old_lane.val().get_bits::<32>(32);
        }
        if self.f16.val() {
            self.p1_j.d.next = self.f_oj.q.val();
            self.p1_a0.d.next = self.f16dot.acc0.val();
            self.p1_a1.d.next = self.f16dot.acc1.val();
            self.p1_n0.d.next = self.f16dot.nf0.val();
            self.p1_n1.d.next = self.f16dot.nf1.val();
        }

        // ---- `fmt=f16` (in the readout's FLanes): per lane of the chunk and pair of 8 columns, a step reads
        // row 0's 8 weights (half 0) and one reads row 1's (half 1) from the lane's feed; `F16_W_LATENCY` = 5
        // edges later they come on `f16_w` (row 0's kept a cycle), the activations' 16 bytes are read the
        // cycle before, and the router's datapath takes the pair: both rows' 8 products, accumulated per lane
        // (first and last pair), the lane's accumulators out `ROUTER_ACC_LATENCY` = 6 edges later, into the
        // rounding pipeline as the block formats' hold registers are
        self.f_issue.next = (self.ostate.q.val() == OutState::FLanes) & (self.f_lane.q.val() < self.f_nl.q.val());
        self.f_n.next = 8.into();
        if self.f_k.q.val() + 1 == self.f_nk.q.val() {
            self.f_n.next = self.f_lastn.q.val();
        }
        self.f_x.next = (self.xtok.q.val() + (bit_cast::<32, 16>(self.f_k.q.val()) << 4)) >> 2;
        self.fd_v.d.next = (self.fd_v.q.val() << 1) | bit_cast::<5, 1>(self.f_issue.val().into());
        self.fd_h.d.next = (self.fd_h.q.val() << 1) | bit_cast::<5, 1>(self.f_h.q.val().into());
        self.fd_first.d.next = (self.fd_first.q.val() << 1) | bit_cast::<5, 1>((self.f_k.q.val() == 0).into());
        self.fd_last.d.next = (self.fd_last.q.val() << 1) | bit_cast::<5, 1>((self.f_k.q.val() + 1 == self.f_nk.q.val()).into());
        self.fd_n.d.next = (self.fd_n.q.val() << 4) | bit_cast::<20, 4>(self.f_n.val());
        self.fd_x.d.next = (self.fd_x.q.val() << 32) | bit_cast::<160, 32>(self.f_x.val());
        if self.f16.val() {
            self.dp.rd_off.next = self.f_k.q.val() << 4;
            self.dp.f_half.next = self.f_issue.val() & self.f_h.q.val();
        }
        self.dp.f16_sel.next = bit_cast::<8, 16>(self.ochunk_row.q.val() >> 1) + bit_cast::<8, 4>(self.f_lane.q.val());
        if self.f_issue.val() {
            self.progress.next = true;
            self.f_h.d.next = !self.f_h.q.val();
            if self.f_h.q.val() {
                self.f_k.d.next = self.f_k.q.val() + 1;
                if self.f_k.q.val() + 1 == self.f_nk.q.val() {
                    self.f_k.d.next = 0.into();
                    self.f_lane.d.next = self.f_lane.q.val() + 1;
                }
            }
        }
        if self.fd_v.q.val().get_bit(4) & !self.fd_h.q.val().get_bit(4) {
            self.f_w0.d.next = self.dp.f16_w.val();
        }
        // columns past `cols` (the last pair's) are zeros on both sides: no product, no NaN
        self.f_mask.next = self.ones128.val() >> (bit_cast::<8, 4>(bits::<4>(8) - self.fd_n.q.val().get_bits::<4>(16)) << 4);
        self.f16dot.valid.next = self.fd_v.q.val().get_bit(4) & self.fd_h.q.val().get_bit(4);
        self.f16dot.first.next = self.fd_first.q.val().get_bit(4);
        self.f16dot.last.next = self.fd_last.q.val().get_bit(4);
        self.f16dot.x.next = self.s_rdata.val().get_bits::<128>(0) & self.f_mask.val();
        self.f16dot.w0.next = self.f_w0.q.val() & self.f_mask.val();
        self.f16dot.w1.next = self.dp.f16_w.val() & self.f_mask.val();
        self.f16dot.b0.next = 0.into();
        self.f16dot.b1.next = 0.into();
        if self.f16.val() {
            self.p1_v.d.next = self.f16dot.acc_done.val() & (self.ostate.q.val() == OutState::FLanes);
        }
        if self.f16.val() & self.f16dot.acc_done.val() & (self.ostate.q.val() == OutState::FLanes) {
            self.f_oj.d.next = self.f_oj.q.val() + 1;
        }
        // stage 2: start values (acc=1) onto the grid; stage 3: added
        self.start0.bits.next = self.p1_o0.q.val();
        self.start1.bits.next = self.p1_o1.q.val();
        self.start0.f32.next = self.f32o.q.val();
        self.start1.f32.next = self.f32o.q.val();
        self.start0.en.next = self.accf.q.val();
        self.start1.en.next = self.accf.q.val();
        self.i0.next = self.start0.value.val();
        self.i1.next = self.start1.value.val();
        self.in0.next = self.start0.nf.val();
        self.in1.next = self.start1.nf.val();
        self.pa_v.d.next = self.p1_v.q.val();
        self.pa_j.d.next = self.p1_j.q.val();
        self.pa_b.d.next = self.p1_b.q.val();
        self.pa_l.d.next = self.p1_l.q.val();
        self.pa_r.d.next = self.p1_r.q.val();
        self.pa_a0.d.next = self.p1_a0.q.val();
        self.pa_a1.d.next = self.p1_a1.q.val();
        self.pa_i0.d.next = self.i0.val();
        self.pa_i1.d.next = self.i1.val();
        self.pa_n0.d.next = self.p1_n0.q.val() | self.in0.val();
        self.pa_n1.d.next = self.p1_n1.q.val() | self.in1.val();
        self.p2_v.d.next = self.pa_v.q.val();
        self.p2_j.d.next = self.pa_j.q.val();
        self.p2_b.d.next = self.pa_b.q.val();
        self.p2_l.d.next = self.pa_l.q.val();
        self.p2_r.d.next = self.pa_r.q.val();
        self.s0.d.next = self.pa_a0.q.val() + self.pa_i0.q.val();
        self.s1.d.next = self.pa_a1.q.val() + self.pa_i1.q.val();
        self.sn0.d.next = self.pa_n0.q.val();
        self.sn1.d.next = self.pa_n1.q.val();
        // stages 4 to 7: the rounding
        self.round0.acc.next = signed_cast(self.s0.q.val());
        self.round0.nf.next = self.sn0.q.val();
        self.round1.acc.next = signed_cast(self.s1.q.val());
        self.round1.nf.next = self.sn1.q.val();
        self.pr_v.d.next = (self.pr_v.q.val() << 1) | bit_cast::<4, 1>(self.p2_v.q.val().into());
        self.pr_j.d.next = (self.pr_j.q.val() << 4) | bit_cast::<16, 4>(self.p2_j.q.val());
        self.pr_b.d.next = (self.pr_b.q.val() << 1) | bit_cast::<4, 1>(self.p2_b.q.val().into());
        self.pr_l.d.next = (self.pr_l.q.val() << 1) | bit_cast::<4, 1>(self.p2_l.q.val().into());
        self.pr_r.d.next = (self.pr_r.q.val() << 1) | bit_cast::<4, 1>(self.p2_r.q.val().into());
        self.pr_out_j.next = self.pr_j.q.val().get_bits::<4>(12);
        // placed into the chunk: FP16 pairs at word j, FP32 pairs at words 2j, 2j + 1
        self.place_sh.next = bit_cast::<9, 4>(self.pr_out_j.val()) << 5;
        self.place_v.next = bit_cast::<256, 16>(self.round0.f16.val()) | (bit_cast::<256, 16>(self.round1.f16.val()) << 16);
        self.place_m.next = bit_cast::<256, 64>(self.ones32.val());
        if self.f32o.q.val() {
            self.place_sh.next = bit_cast::<9, 4>(self.pr_out_j.val()) << 6;
            self.place_v.next = bit_cast::<256, 32>(self.round0.f32.val()) | (bit_cast::<256, 32>(self.round1.f32.val()) << 32);
            self.place_m.next = bit_cast::<256, 64>(self.ones32.val()) | (bit_cast::<256, 64>(self.ones32.val()) << 32);
        }
        if !self.pr_r.q.val().get_bit(3) {
            self.place_m.next = bit_cast::<256, 64>(self.ones32.val()) >> 16;
            if self.f32o.q.val() {
                self.place_m.next = bit_cast::<256, 64>(self.ones32.val());
            }
        }
        self.outc_cur.next = self.outc0.q.val();
        if self.pr_b.q.val().get_bit(3) {
            self.outc_cur.next = self.outc1.q.val();
        }
        self.outc_new.next = (self.outc_cur.val() & !(self.place_m.val() << self.place_sh.val()))
            | ((self.place_v.val() & self.place_m.val()) << self.place_sh.val());
        if self.pr_v.q.val().get_bit(3) {
            if self.pr_b.q.val().get_bit(3) {
                self.outc1.d.next = self.outc_new.val();
            } else {
                self.outc0.d.next = self.outc_new.val();
            }
        }
        // the writer: a chunk's last lane is placed now, its buffer is written next cycle
        self.wr_go.d.next = self.pr_v.q.val().get_bit(3) & self.pr_l.q.val().get_bit(3);
        self.wr_b.d.next = self.pr_b.q.val().get_bit(3);

        // ---- the fused reduction: a chunk written now is squared and summed in the datapath (its valid rows:
        // the words of a half-written last word keep bytes that are not outputs), then read-modify-written
        // into RED of its token; `set` starts from 0 at the token's first chunk (first group, row 0)
        self.dp.sq_chunk.next = self.w_data.val();
        self.dp.sq_f32.next = self.f32o.q.val();
        self.dp.sq_mask.next = self.w_sq.val();
        // (the sum takes `SQSUM_LATENCY` = 4 edges: the chunk's token and first flag wait three in the delay line)
        self.rqd_v.d.next = (self.rqd_v.q.val() << 1)
            | bit_cast::<3, 1>((self.w_fire.val() & (self.redm.q.val() != 0)).into());
        self.rqd_tok.d.next = (self.rqd_tok.q.val() << 6) | bit_cast::<18, 6>(self.w_tok.val());
        self.rqd_first.d.next = (self.rqd_first.q.val() << 1) | bit_cast::<3, 1>(self.w_first.val().into());
        self.rq1_v.d.next = self.rqd_v.q.val().get_bit(2);
        self.rq1_tok.d.next = self.rqd_tok.q.val().get_bits::<6>(12);
        self.rq1_first.d.next = self.rqd_first.q.val().get_bit(2);
        self.red_raddr.next = self.rq1_tok.q.val();
        self.rq2_v.d.next = self.rq1_v.q.val();
        self.rq2_tok.d.next = self.rq1_tok.q.val();
        self.rq2_first.d.next = self.rq1_first.q.val();
        self.rq2_sum.d.next = self.dp.sq_out.val();
        self.red_base.next = self.red_rdata.val();
        if self.rq2_first.q.val() {
            self.red_base.next = 0.into();
        }
        self.red_we.next = self.rq2_v.q.val();
        self.red_waddr.next = self.rq2_tok.q.val();
        self.red_wdata.next = bit_cast::<RED_BITS, ACC_BITS>(self.red_base.val().get_bits::<ACC_BITS>(0) + self.rq2_sum.q.val().get_bits::<ACC_BITS>(0))
            | (bit_cast::<RED_BITS, 1>((self.red_base.val().get_bit(96) | self.rq2_sum.q.val().get_bit(96)).into()) << 96);

        // ---- the loader: the request side runs ahead through the groups, each into the next entry and the
        // ring positions after the last group's as soon as both are free (the compute frees a group's at its
        // last weight read); the response side fills the entries in the same order (responses come in order),
        // so the memory streams across group boundaries without waiting for a group's last response
        match self.lstate.q.val() {
            LoadState::Idle => {}
            LoadState::Group => {
                // the group's geometry, for the requests and for the response side (before its first response
                // can arrive), as soon as its entry and its ring positions are free; its first beat is
                // requested next cycle
                if ((self.busy.q.val() & (bits::<8>(1) << bit_cast::<8, 3>(self.l_buf.q.val()))) == 0)
                    & (self.ring_free.q.val() >= self.gspan.q.val())
                {
                    self.l_grows.d.next = self.g_rows.val();
                    self.req_k.d.next = 0.into();
                    if self.l_buf.q.val() == 0 {
                        self.b_grows_0.d.next = self.g_rows.val();
                        self.b_base_0.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 1 {
                        self.b_grows_1.d.next = self.g_rows.val();
                        self.b_base_1.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 2 {
                        self.b_grows_2.d.next = self.g_rows.val();
                        self.b_base_2.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 3 {
                        self.b_grows_3.d.next = self.g_rows.val();
                        self.b_base_3.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 4 {
                        self.b_grows_4.d.next = self.g_rows.val();
                        self.b_base_4.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 5 {
                        self.b_grows_5.d.next = self.g_rows.val();
                        self.b_base_5.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 6 {
                        self.b_grows_6.d.next = self.g_rows.val();
                        self.b_base_6.d.next = self.l_base.q.val();
                    }
                    if self.l_buf.q.val() == 7 {
                        self.b_grows_7.d.next = self.g_rows.val();
                        self.b_base_7.d.next = self.l_base.q.val();
                    }
                    // the next group's base: after this one's units, around the ring
                    self.l_base.d.next = (self.l_base.q.val() + self.gspan.q.val()) & (self.ring.val() - 1);
                    self.ring_take.next = self.gspan.q.val();
                    self.lstate.d.next = LoadState::Lines;
                    self.bsy_set.next = bits::<8>(1) << bit_cast::<8, 3>(self.l_buf.q.val());
                }
            }
            LoadState::Lines => {
                // a request of `W` beats per cycle; with the last one accepted, the next group starts (Group) at once
                self.m_req.next = true;
                if self.m_req_ready.val() {
                    self.req_k.d.next = self.req_k.q.val() + 1;
                    self.progress.next = true;
                    if self.req_k.q.val() + 1 == self.nreqs.q.val() {
                        self.l_buf.d.next = self.l_buf.q.val() + 1;
                        self.l_rows_left.d.next = self.l_rows_left.q.val() - self.l_grows.q.val();
                        self.l_gbyte.d.next = self.l_gbyte.q.val() + self.gbytes.q.val();
                        self.lstate.d.next = LoadState::Group;
                        if self.l_rows_left.q.val() == self.l_grows.q.val() {
                            self.lstate.d.next = LoadState::Idle;
                        }
                    }
                }
            }
        }
        if self.r_valid.val() {
            self.resp_k.d.next = self.resp_k.q.val() + 1;
            self.progress.next = true;
            if self.r_last.val() {
                self.rdy_set.next = bits::<8>(1) << bit_cast::<8, 3>(self.r_buf.q.val());
                self.r_buf.d.next = self.r_buf.q.val() + 1;
                self.resp_k.d.next = 0.into();
            }
        }
        self.ready.d.next = (self.ready.q.val() & !self.rdy_clr.val()) | self.rdy_set.val();
        self.busy.d.next = (self.busy.q.val() & !self.rdy_clr.val()) | self.bsy_set.val();
        self.ring_free.d.next = self.ring_free.q.val() - self.ring_take.val() + self.ring_give.val();
        if self.ring_init.val() {
            self.ring_free.d.next = self.ring.val();
        }

        // ---- memory responses in flight (a flush waits for them)
        if self.m_req.val() & self.m_req_ready.val() & !self.m_resp.val() {
            self.outstanding.d.next = self.outstanding.q.val() + 1;
        }
        if !(self.m_req.val() & self.m_req_ready.val()) & self.m_resp.val() {
            self.outstanding.d.next = self.outstanding.q.val() - 1;
        }
        if self.flush.val() | self.reset.val() {
            self.state.d.next = MatrixState::Drain;
            self.lstate.d.next = LoadState::Idle;
            self.ready.d.next = 0.into();
            self.busy.d.next = 0.into();
            self.ostate.d.next = OutState::Idle;
            self.p1_v.d.next = false;
            self.pa_v.d.next = false;
            self.p2_v.d.next = false;
            self.pr_v.d.next = 0.into();
            self.wr_go.d.next = false;
            self.inflight.d.next = false;
            self.trap_r.d.next = false;
            self.rqd_v.d.next = 0.into();
            self.rq1_v.d.next = false;
            self.rq2_v.d.next = false;
        }
        if self.reset.val() {
            self.state.d.next = MatrixState::Idle;
            self.outstanding.d.next = 0.into();
            self.rd_total.d.next = 0.into();
            self.macs_total.d.next = 0.into();
        }
    }
}

/// What the matrix unit needs of a config beyond the lane's: 8..=128 lanes, a power of two (the readout's
/// chunks of 8 lanes, the 8-bit lane select, the group's byte length as a shift), and a memory of `64 W`
/// bytes per core cycle for a weight port of `W` beats ([`OverlayConfig::weight_port_beats`]): `W` a power
/// of two up to [`MAX_WEIGHT_PORT_BEATS`] that divides `pe_lanes / 4` (a response is whole quads of one
/// unit row).
pub fn check_config(config: &OverlayConfig) -> Result<(), crate::emit::EmitError> {
    let bad = |what: String| Err(crate::emit::EmitError::Unsupported { unit: "matrix".into(), config: config.name.clone(), what });
    let lanes = config.pe_lanes;
    if !lanes.is_power_of_two() || !(8..=128).contains(&lanes) {
        return bad(format!("pe_lanes is {lanes}; the matrix unit is built for a power of two in 8..=128"));
    }
    let (beats, peak) = (config.weight_port_beats(), config.peak_bytes_per_cycle());
    if f64::from(64 * beats) != peak || !beats.is_power_of_two() || beats > MAX_WEIGHT_PORT_BEATS || (lanes / 4) % beats != 0 {
        return bad(format!(
            "the memory moves {peak} bytes per core cycle (mem_channels x mem_channel_bits / 8 x mem_clock_mhz / \
             core_clock_mhz); the weight port is built for 64 x W bytes, W a power of two up to {MAX_WEIGHT_PORT_BEATS} \
             that divides pe_lanes / 4 = {}",
            lanes / 4
        ));
    }
    Ok(())
}

/// The widest weight port built: 32 beats (2 KiB a cycle, the u280's HBM).
pub const MAX_WEIGHT_PORT_BEATS: u32 = 32;

/// Bits of the weight port of `config`: 512 per beat.
pub fn weight_port_bits(config: &OverlayConfig) -> usize {
    512 * config.weight_port_beats() as usize
}

/// Runs `$body` with the const `$wb` set to the weight port's bits of `$config` (checked by
/// [`check_config`] first): rust-hdl's port widths are types, so the units that carry the port (the
/// matrix unit, the top) are generic in it.
macro_rules! with_weight_port {
    ($config:expr, $wb:ident => $body:expr) => {
        match $crate::matrix::weight_port_bits($config) {
            512 => { const $wb: usize = 512; $body }
            1024 => { const $wb: usize = 1024; $body }
            2048 => { const $wb: usize = 2048; $body }
            4096 => { const $wb: usize = 4096; $body }
            8192 => { const $wb: usize = 8192; $body }
            16384 => { const $wb: usize = 16384; $body }
            bits => unreachable!("a weight port of {bits} bits passed check_config"),
        }
    };
}
pub(crate) use with_weight_port;

/// The Verilog of the matrix unit of `config` (rust-hdl's top module `top`).
pub fn matrix_verilog(config: &OverlayConfig) -> Result<String, crate::emit::EmitError> {
    fn build<const WB: usize>(config: &OverlayConfig) -> Result<String, crate::emit::EmitError> {
        let m = connect_top!(
            Matrix::<WB>::new(config, dp_cores(config)?),
            clock,
            reset,
            flush,
            go,
            iss_valid,
            iss_word,
            iss_pc,
            m_req_ready,
            m_resp,
            m_rdata,
            s_rdata,
            red_rdata
        );
        crate::emit::checked_verilog(&m)
    }
    check_config(config)?;
    with_weight_port!(config, WB => build::<WB>(config))
}

/// The Verilog modules under the matrix unit's datapath for `config`: the weight feed, the aligner and
/// lane, the array and `opu_matrix_dp`.
pub fn dp_cores(config: &OverlayConfig) -> Result<String, crate::emit::EmitError> {
    let feed = feed::feed_verilog(config.weight_row_lines())?;
    let feed = crate::emit::rename_top(&feed, "opu_wfeed");
    let array = crate::emit::emit_verilog_for("array", config)?;
    Ok(format!("{feed}\n{array}\n{}", dp::dp_verilog(config)))
}

//! The weight feed of one PE lane (rust-hdl HDL): the lane's slot in the weight buffer, which holds the
//! lane's share of the row groups in flight (its two rows of each, `opu_hw::weight_layout`), written as the
//! 16-byte units stream in from device memory, and read one weight block per step for the lane's weight bus
//! (`w`) and scales (`dm`).
//!
//! Device memory holds the weights interleaved by lane (docs/isa.md, `matmul`): unit `k` of lane `l`'s
//! share of a group at byte `(k x pe_lanes + l) x 16` of the group, so a 64-byte beat of the weight port
//! carries one unit for each of the four lanes `4q .. 4q + 4` (`ld_quad` = `q`), all at the same unit of
//! their shares, which the loader gives as a position in the lanes' rings (`ld_pos`). The lane takes its
//! unit when the quad is its own: 16 bytes at byte `16 (l mod 4)` of the beat. Its slot keeps the share's
//! bytes in order, each 64-byte position of the ring as eight 8-byte units in eight banks (unit `j` in bank
//! `j`): a 16-byte unit is written in one cycle into two banks (`2 (ld_pos mod 4)` and the next). A block (at
//! an even byte, at most 34 bytes) spans at most five consecutive 8-byte units, which lie in five different
//! banks, so the banks read it in one cycle: bank `j` at the block's position, or at the next one for the
//! units before the block's first. Each bank is 64 bits wide and `2^A` deep: one block RAM (512 x 72) at the
//! `u280` preset, eight per lane.
//!
//! The banks have one read port, so the feed reads one row's block per step and keeps it: with W4Min / W4
//! (both rows per step) row 0's at the block's half-0 step and row 1's at its half-1 step, each block read
//! once for its two halves; with W8 (one row per step: row 0's halves, then row 1's) the row's block at its
//! half-0 step. The lane's bus for a step is formed once both rows' blocks are in: [`FEED_LATENCY`] = 4.
//!
//! A slot is a ring of `2^A` 64-byte positions (`2^(A + 2)` units) in which the groups follow each other: a
//! group's share sits from its base unit (`rd_base`), `weight_layout::WeightLayout::lane_units` after the
//! previous group's, so while the array computes one group the next ones stream in behind it, as many as the
//! ring holds.
//!
//! Read pipeline: (1) the banks' synchronous read; (2) the five units rotated into place and shifted to the
//! block's even byte: the row's block register; (3) row 0's block a cycle later (held for the block's second
//! half while row 0's next block is read); (4) the lane's bus for the step: W4Min / W4 pack both rows'
//! nibbles of 16 columns per byte (row 0 low), half 0 the low nibbles of the block's 16 bytes (columns
//! 0..16), half 1 the high ones; W8 gives the selected row's 16 bytes of the half. F16 (the matrix unit's
//! `fmt=f16`) is read as W4 is, row 0 at half 0 and row 1 at half 1, and gives the row's 16 bytes at the
//! step's byte: 8 FP16 weights, one row per step.

use crate::ctrl::constant as k;
use opu_hw::numerics::WeightFormat;
use rust_hdl::prelude::*;

/// Edges from `rd_off` (with `rd_half`, `rd_row`, `rd_fmt`) to the `w` / `dm` they select.
pub const FEED_LATENCY: usize = 4;

#[derive(LogicBlock)]
pub struct WeightFeed<const A: usize> {
    pub clock: Signal<In, Clock>,
    /// Index of the lane's row 0 in a group (`2 x lane`), a constant the datapath ties.
    pub row0: Signal<In, Bits<16>>,

    // ---- load: a beat of the weight port, with a unit for each lane of quad `ld_quad`, to be kept at ring
    // position `ld_pos` (16-byte units)
    pub ld_valid: Signal<In, Bit>,
    pub ld_quad: Signal<In, Bits<16>>,
    pub ld_pos: Signal<In, Bits<16>>,
    pub ld_line: Signal<In, Bits<512>>,

    // ---- read: the block at byte `rd_off` of the step's row of the group whose share starts at ring unit
    // `rd_base`
    pub rd_rb: Signal<In, Bits<16>>,
    pub rd_base: Signal<In, Bits<16>>,
    pub rd_off: Signal<In, Bits<16>>,
    pub rd_half: Signal<In, Bit>,
    pub rd_row: Signal<In, Bit>,
    pub rd_fmt: Signal<In, Bits<2>>,
    /// The lane's weight bus and `{d0, m0, d1, m1}`, [`FEED_LATENCY`] edges after the read.
    pub w: Signal<Out, Bits<128>>,
    pub dm: Signal<Out, Bits<64>>,

    // the eight banks: unit j of every beat in bank j
    b0: RAM<Bits<64>, A>,
    b1: RAM<Bits<64>, A>,
    b2: RAM<Bits<64>, A>,
    b3: RAM<Bits<64>, A>,
    b4: RAM<Bits<64>, A>,
    b5: RAM<Bits<64>, A>,
    b6: RAM<Bits<64>, A>,
    b7: RAM<Bits<64>, A>,
    // stage 1 -> 2: the block's first unit, its byte in the unit (halved), the row read, and the step
    u1: DFF<Bits<3>>,
    e1: DFF<Bits<2>>,
    tr1: DFF<Bit>,
    en1: DFF<Bit>,
    half1: DFF<Bit>,
    row1: DFF<Bit>,
    fmt1: DFF<Bits<2>>,
    // stage 2 -> 3: each row's block
    blk0: DFF<Bits<272>>,
    blk1: DFF<Bits<272>>,
    half2: DFF<Bit>,
    row2: DFF<Bit>,
    fmt2: DFF<Bits<2>>,
    // stage 3 -> 4: row 0's block a cycle later, so that both halves of a step pair find it
    blk0d: DFF<Bits<272>>,
    half3: DFF<Bit>,
    row3: DFF<Bit>,
    fmt3: DFF<Bits<2>>,
    // stage 4: the lane's bus
    w_r: DFF<Bits<128>>,
    dm_r: DFF<Bits<64>>,

    nib: Constant<Bits<128>>,
    w4m: Constant<Bits<2>>,
    w8: Constant<Bits<2>>,
    f16: Constant<Bits<2>>,

    mine: Signal<Local, Bit>,
    unit: Signal<Local, Bits<128>>,
    wa: Signal<Local, Bits<16>>,
    wj: Signal<Local, Bits<2>>,
    is_w8: Signal<Local, Bit>,
    tr: Signal<Local, Bit>,
    pos: Signal<Local, Bits<24>>,
    kk: Signal<Local, Bits<24>>,
    u: Signal<Local, Bits<3>>,
    cat: Signal<Local, Bits<1024>>,
    rot: Signal<Local, Bits<320>>,
    blk: Signal<Local, Bits<272>>,
    q0: Signal<Local, Bits<128>>,
    q1: Signal<Local, Bits<128>>,
    qs8: Signal<Local, Bits<272>>,
}

impl<const A: usize> WeightFeed<A> {
    pub fn new() -> Self {
        let nib = (0..16).fold(0u128, |m, i| m | 0x0F << (8 * i));
        let mut nib_bits = Bits::<128>::default();
        nib_bits.set_bits::<64>(0, Bits::<64>::from(nib as u64));
        nib_bits.set_bits::<64>(64, Bits::<64>::from((nib >> 64) as u64));
        WeightFeed {
            clock: Default::default(),
            row0: Default::default(),
            ld_valid: Default::default(),
            ld_quad: Default::default(),
            ld_pos: Default::default(),
            ld_line: Default::default(),
            rd_rb: Default::default(),
            rd_base: Default::default(),
            rd_off: Default::default(),
            rd_half: Default::default(),
            rd_row: Default::default(),
            rd_fmt: Default::default(),
            w: Default::default(),
            dm: Default::default(),
            b0: Default::default(),
            b1: Default::default(),
            b2: Default::default(),
            b3: Default::default(),
            b4: Default::default(),
            b5: Default::default(),
            b6: Default::default(),
            b7: Default::default(),
            u1: Default::default(),
            e1: Default::default(),
            tr1: Default::default(),
            en1: Default::default(),
            half1: Default::default(),
            row1: Default::default(),
            fmt1: Default::default(),
            blk0: Default::default(),
            blk1: Default::default(),
            half2: Default::default(),
            row2: Default::default(),
            fmt2: Default::default(),
            blk0d: Default::default(),
            half3: Default::default(),
            row3: Default::default(),
            fmt3: Default::default(),
            w_r: Default::default(),
            dm_r: Default::default(),
            nib: Constant::new(nib_bits),
            w4m: k(u64::from(WeightFormat::W4Min.code())),
            w8: k(u64::from(WeightFormat::W8.code())),
            f16: k(u64::from(WeightFormat::F16.code())),
            mine: Default::default(),
            unit: Default::default(),
            wa: Default::default(),
            wj: Default::default(),
            is_w8: Default::default(),
            tr: Default::default(),
            pos: Default::default(),
            kk: Default::default(),
            u: Default::default(),
            cat: Default::default(),
            rot: Default::default(),
            blk: Default::default(),
            q0: Default::default(),
            q1: Default::default(),
            qs8: Default::default(),
        }
    }
}

impl<const A: usize> Default for WeightFeed<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const A: usize> Logic for WeightFeed<A> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(
            self, clock, u1, e1, tr1, en1, half1, row1, fmt1, blk0, blk1, half2, row2, fmt2, blk0d,
            half3, row3, fmt3, w_r, dm_r
        );
        self.b0.read_clock.next = self.clock.val();
        self.b1.read_clock.next = self.clock.val();
        self.b2.read_clock.next = self.clock.val();
        self.b3.read_clock.next = self.clock.val();
        self.b4.read_clock.next = self.clock.val();
        self.b5.read_clock.next = self.clock.val();
        self.b6.read_clock.next = self.clock.val();
        self.b7.read_clock.next = self.clock.val();
        self.b0.write_clock.next = self.clock.val();
        self.b1.write_clock.next = self.clock.val();
        self.b2.write_clock.next = self.clock.val();
        self.b3.write_clock.next = self.clock.val();
        self.b4.write_clock.next = self.clock.val();
        self.b5.write_clock.next = self.clock.val();
        self.b6.write_clock.next = self.clock.val();
        self.b7.write_clock.next = self.clock.val();

        // ---- load: the lane's unit of a beat of its quad (16 bytes at `16 (lane mod 4)`), into banks
        // `2 (pos mod 4)` and the next at position `pos / 4`; the bank address keeps A bits, so the ring of
        // 2^A positions wraps by itself
        self.mine.next = self.ld_valid.val() & (self.ld_quad.val() == (self.row0.val() >> 3));
        self.unit.next = self.ld_line.val().get_bits::<128>(0);
        if self.row0.val().get_bits::<2>(1) == 1 {
            self.unit.next = self.ld_line.val().get_bits::<128>(128);
        }
        if self.row0.val().get_bits::<2>(1) == 2 {
            self.unit.next = self.ld_line.val().get_bits::<128>(256);
        }
        if self.row0.val().get_bits::<2>(1) == 3 {
            self.unit.next = self.ld_line.val().get_bits::<128>(384);
        }
        self.wa.next = self.ld_pos.val() >> 2;
        self.wj.next = self.ld_pos.val().get_bits::<2>(0);
        self.b0.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b1.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b2.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b3.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b4.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b5.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b6.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b7.write_address.next = bit_cast::<A, 16>(self.wa.val());
        self.b0.write_data.next = self.unit.val().get_bits::<64>(0);
        self.b1.write_data.next = self.unit.val().get_bits::<64>(64);
        self.b2.write_data.next = self.unit.val().get_bits::<64>(0);
        self.b3.write_data.next = self.unit.val().get_bits::<64>(64);
        self.b4.write_data.next = self.unit.val().get_bits::<64>(0);
        self.b5.write_data.next = self.unit.val().get_bits::<64>(64);
        self.b6.write_data.next = self.unit.val().get_bits::<64>(0);
        self.b7.write_data.next = self.unit.val().get_bits::<64>(64);
        self.b0.write_enable.next = self.mine.val() & (self.wj.val() == 0);
        self.b1.write_enable.next = self.mine.val() & (self.wj.val() == 0);
        self.b2.write_enable.next = self.mine.val() & (self.wj.val() == 1);
        self.b3.write_enable.next = self.mine.val() & (self.wj.val() == 1);
        self.b4.write_enable.next = self.mine.val() & (self.wj.val() == 2);
        self.b5.write_enable.next = self.mine.val() & (self.wj.val() == 2);
        self.b6.write_enable.next = self.mine.val() & (self.wj.val() == 3);
        self.b7.write_enable.next = self.mine.val() & (self.wj.val() == 3);

        // ---- read, stage 1: the step's row (W4Min / W4: row 0 at half 0, row 1 at half 1; W8: the step's row
        // at its half 0, nothing at half 1) at byte `pos` of the slot: position `pos / 64`, units from
        // `pos / 8 mod 8`
        self.is_w8.next = self.rd_fmt.val() == self.w8.val();
        self.tr.next = self.rd_half.val();
        if self.is_w8.val() {
            self.tr.next = self.rd_row.val();
        }
        self.pos.next = (bit_cast::<24, 16>(self.rd_base.val()) << 4) + bit_cast::<24, 16>(self.rd_off.val());
        if self.tr.val() {
            self.pos.next = (bit_cast::<24, 16>(self.rd_base.val()) << 4)
                + bit_cast::<24, 16>(self.rd_off.val())
                + bit_cast::<24, 16>(self.rd_rb.val());
        }
        self.kk.next = self.pos.val() >> 6;
        self.u.next = self.pos.val().get_bits::<3>(3);
        // a bank before the block's first unit holds one of its units of the next beat when the five units
        // pass the beat's end (u >= 4: banks 0 ..= u - 4); banks 4 to 7 never do
        self.b0.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b1.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b2.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b3.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b4.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b5.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b6.read_address.next = bit_cast::<A, 24>(self.kk.val());
        self.b7.read_address.next = bit_cast::<A, 24>(self.kk.val());
        if self.u.val() > bits::<3>(0) {
            self.b0.read_address.next = bit_cast::<A, 24>(self.kk.val() + 1);
        }
        if self.u.val() > bits::<3>(1) {
            self.b1.read_address.next = bit_cast::<A, 24>(self.kk.val() + 1);
        }
        if self.u.val() > bits::<3>(2) {
            self.b2.read_address.next = bit_cast::<A, 24>(self.kk.val() + 1);
        }
        if self.u.val() > bits::<3>(3) {
            self.b3.read_address.next = bit_cast::<A, 24>(self.kk.val() + 1);
        }
        self.u1.d.next = self.u.val();
        // (blocks lie at even bytes, every format's: the byte in the unit is 0, 2, 4 or 6)
        self.e1.d.next = self.pos.val().get_bits::<2>(1);
        self.tr1.d.next = self.tr.val();
        self.en1.d.next = !(self.is_w8.val() & self.rd_half.val());
        self.half1.d.next = self.rd_half.val();
        self.row1.d.next = self.rd_row.val();
        self.fmt1.d.next = self.rd_fmt.val();

        // ---- stage 2: the eight units twice over, rotated down to the block's first unit, then shifted to its
        // byte: the row's block register
        self.cat.next = bit_cast::<1024, 64>(self.b0.read_data.val())
            | (bit_cast::<1024, 64>(self.b1.read_data.val()) << 64)
            | (bit_cast::<1024, 64>(self.b2.read_data.val()) << 128)
            | (bit_cast::<1024, 64>(self.b3.read_data.val()) << 192)
            | (bit_cast::<1024, 64>(self.b4.read_data.val()) << 256)
            | (bit_cast::<1024, 64>(self.b5.read_data.val()) << 320)
            | (bit_cast::<1024, 64>(self.b6.read_data.val()) << 384)
            | (bit_cast::<1024, 64>(self.b7.read_data.val()) << 448)
            | (bit_cast::<1024, 64>(self.b0.read_data.val()) << 512)
            | (bit_cast::<1024, 64>(self.b1.read_data.val()) << 576)
            | (bit_cast::<1024, 64>(self.b2.read_data.val()) << 640)
            | (bit_cast::<1024, 64>(self.b3.read_data.val()) << 704)
            | (bit_cast::<1024, 64>(self.b4.read_data.val()) << 768);
        self.rot.next = bit_cast::<320, 1024>(self.cat.val() >> (bit_cast::<10, 3>(self.u1.q.val()) << 6));
        self.blk.next = bit_cast::<272, 320>(self.rot.val() >> (bit_cast::<9, 2>(self.e1.q.val()) << 4));
        if self.en1.q.val() & !self.tr1.q.val() {
            self.blk0.d.next = self.blk.val();
        }
        if self.en1.q.val() & self.tr1.q.val() {
            self.blk1.d.next = self.blk.val();
        }
        self.half2.d.next = self.half1.q.val();
        self.row2.d.next = self.row1.q.val();
        self.fmt2.d.next = self.fmt1.q.val();

        // ---- stage 3: row 0's block held for the step pair (W4Min / W4: row 1's arrives a cycle after it)
        self.blk0d.d.next = self.blk0.q.val();
        self.half3.d.next = self.half2.q.val();
        self.row3.d.next = self.row2.q.val();
        self.fmt3.d.next = self.fmt2.q.val();

        // ---- stage 4: the lane's bus. Block bytes: d, (W4Min) m, then the quants.
        self.q0.next = self.blk0d.q.val().get_bits::<128>(16);
        self.q1.next = self.blk1.q.val().get_bits::<128>(16);
        self.dm_r.d.next = (bit_cast::<64, 16>(self.blk0d.q.val().get_bits::<16>(0)) << 48)
            | (bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(0)) << 16);
        if self.fmt3.q.val() == self.w4m.val() {
            self.q0.next = self.blk0d.q.val().get_bits::<128>(32);
            self.q1.next = self.blk1.q.val().get_bits::<128>(32);
            self.dm_r.d.next = (bit_cast::<64, 16>(self.blk0d.q.val().get_bits::<16>(0)) << 48)
                | (bit_cast::<64, 16>(self.blk0d.q.val().get_bits::<16>(16)) << 32)
                | (bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(0)) << 16)
                | bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(16));
        }
        self.w_r.d.next = (self.q0.val() & self.nib.val()) | ((self.q1.val() & self.nib.val()) << 4);
        if self.half3.q.val() {
            self.w_r.d.next = ((self.q0.val() >> 4) & self.nib.val()) | (self.q1.val() & !self.nib.val());
        }
        self.qs8.next = self.blk0d.q.val() >> 16;
        if self.row3.q.val() {
            self.qs8.next = self.blk1.q.val() >> 16;
        }
        if self.fmt3.q.val() == self.w8.val() {
            self.w_r.d.next = self.qs8.val().get_bits::<128>(0);
            if self.half3.q.val() {
                self.w_r.d.next = self.qs8.val().get_bits::<128>(128);
            }
        }
        // F16 (the matrix unit's `fmt=f16`, read like W4: row 0 at half 0, row 1 at half 1): the row's 16 bytes
        // at the step's byte, 8 weights
        if self.fmt3.q.val() == self.f16.val() {
            self.w_r.d.next = self.blk0d.q.val().get_bits::<128>(0);
            if self.half3.q.val() {
                self.w_r.d.next = self.blk1.q.val().get_bits::<128>(0);
            }
        }
        self.w.next = self.w_r.q.val();
        self.dm.next = self.dm_r.q.val();
    }
}

/// A [`WeightFeed`] for row slots of `lines` lines (`OverlayConfig::weight_row_lines`: a lane's ring of
/// `2 x lines` beats) ready to emit.
pub fn feed_verilog(lines: u32) -> Result<String, crate::emit::EmitError> {
    fn build<const A: usize>() -> Result<String, crate::emit::EmitError> {
        let mut f = WeightFeed::<A>::new();
        f.clock.connect();
        f.row0.connect();
        f.ld_valid.connect();
        f.ld_quad.connect();
        f.ld_pos.connect();
        f.ld_line.connect();
        f.rd_rb.connect();
        f.rd_base.connect();
        f.rd_off.connect();
        f.rd_half.connect();
        f.rd_row.connect();
        f.rd_fmt.connect();
        f.connect_all();
        crate::emit::checked_verilog(&f)
    }
    // each bank holds an 8-byte unit of every position of the lane's ring of 2 x `lines` 64-byte positions
    match lines {
        4 => build::<3>(),
        8 => build::<4>(),
        16 => build::<5>(),
        32 => build::<6>(),
        64 => build::<7>(),
        128 => build::<8>(),
        256 => build::<9>(),
        512 => build::<10>(),
        1024 => build::<11>(),
        2048 => build::<12>(),
        _ => Err(crate::emit::EmitError::Unsupported {
            unit: "matrix".into(),
            config: String::new(),
            what: format!("weight row slots of {lines} lines: expected a power of two in 4..=2048"),
        }),
    }
}

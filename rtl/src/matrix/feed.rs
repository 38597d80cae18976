//! The weight feed of one PE lane (rust-hdl HDL): the lane's slot in the weight buffer, which holds the
//! 64-byte beats of a row group that carry the lane's two rows, written as they stream in from device memory,
//! and read one weight block per step for the lane's weight bus (`w`) and scales (`dm`).
//!
//! The lane holds rows `row0` and `row0 + 1` of a group, which lie back to back in device memory: bytes
//! `o0 + row0 x rb ..< o0 + (row0 + 2) x rb` counted from the group's first beat (`o0`: the group's byte offset
//! in that beat). Its slot keeps the beats `bf ..= bl` that hold those bytes, beat `bf + s` at slot position
//! `s`, each as eight 8-byte units in eight banks (unit `j` of a beat in bank `j`): a beat of the weight port
//! is written in one cycle, one unit per bank, with no multiplexer on the data. A block (at an even byte, at
//! most 34 bytes) spans at most five consecutive units, which lie in five different banks, so the banks
//! read it in one cycle: bank `j` at the block's beat, or at the next one for the units before the block's
//! first. Each bank is 64 bits wide and `2^A` deep: one block RAM (512 x 72) at the `u280` preset, eight
//! per lane (until 2026-12-06 each row had two banks of 256 bits, even and odd lines: sixteen block RAMs).
//!
//! The banks have one read port, so the feed reads one row's block per step and keeps it: with W4Min / W4
//! (both rows per step) row 0's at the block's half-0 step and row 1's at its half-1 step, each block read
//! once for its two halves; with W8 (one row per step: row 0's halves, then row 1's) the row's block at its
//! half-0 step. The lane's bus for a step is formed once both rows' blocks are in: [`FEED_LATENCY`] = 4.
//!
//! A slot is a ring of `2^A` positions in which the groups follow each other: a group's beats sit from its
//! base position (`ld_base` / `rd_base`), `OverlayConfig::weight_group_beats` after the previous group's, so
//! while the array computes one group the next ones stream in behind it, as many as the ring holds.
//!
//! Read pipeline: (1) the banks' synchronous read; (2) the five units rotated into place and shifted to the
//! block's even byte: the row's block register; (3) row 0's block a cycle later (held for the block's second
//! half while row 0's next block is read); (4) the lane's bus for the step: W4Min / W4 pack both rows'
//! nibbles of 16 columns per byte (row 0 low), half 0 the low nibbles of the block's 16 bytes (columns
//! 0..16), half 1 the high ones; W8 gives the selected row's 16 bytes of the half.

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

    // ---- load: beat `ld_idx / 2` (`ld_idx` even, lines counted from the group's first beat) of the group
    // being loaded
    pub ld_o0: Signal<In, Bits<6>>,
    pub ld_rb: Signal<In, Bits<16>>,
    pub ld_valid: Signal<In, Bit>,
    /// The group's first slot position in the ring.
    pub ld_base: Signal<In, Bits<16>>,
    pub ld_idx: Signal<In, Bits<16>>,
    pub ld_line: Signal<In, Bits<512>>,

    // ---- read: the block at byte `rd_off` of the step's row of the group at ring position `rd_base`
    pub rd_o0: Signal<In, Bits<6>>,
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
    // load geometry, registered: the first and last beat of the lane's two rows
    first: DFF<Bits<24>>,
    last: DFF<Bits<24>>,
    // read geometry, registered: the lane's first byte in its first beat
    x: DFF<Bits<6>>,
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

    off: Signal<Local, Bits<24>>,
    beat: Signal<Local, Bits<24>>,
    wa: Signal<Local, Bits<24>>,
    win: Signal<Local, Bit>,
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
            ld_o0: Default::default(),
            ld_rb: Default::default(),
            ld_valid: Default::default(),
            ld_base: Default::default(),
            ld_idx: Default::default(),
            ld_line: Default::default(),
            rd_o0: Default::default(),
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
            first: Default::default(),
            last: Default::default(),
            x: Default::default(),
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
            off: Default::default(),
            beat: Default::default(),
            wa: Default::default(),
            win: Default::default(),
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
            self, clock, first, last, x, u1, e1, tr1, en1, half1, row1, fmt1, blk0, blk1, half2, row2, fmt2, blk0d,
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

        // ---- load: the beats of the lane's two rows, at the group's base plus their beat counted from the
        // lane's first; the bank address keeps A bits, so the ring of 2^A positions wraps by itself
        self.off.next = bit_cast::<24, 6>(self.ld_o0.val()) + bit_cast::<24, 32>(self.row0.val() * self.ld_rb.val());
        self.first.d.next = self.off.val() >> 6;
        self.last.d.next = (self.off.val() + (bit_cast::<24, 16>(self.ld_rb.val()) << 1) - 1) >> 6;
        self.beat.next = bit_cast::<24, 16>(self.ld_idx.val()) >> 1;
        self.win.next = self.ld_valid.val() & (self.beat.val() >= self.first.q.val()) & (self.beat.val() <= self.last.q.val());
        self.wa.next = self.beat.val() - self.first.q.val() + bit_cast::<24, 16>(self.ld_base.val());
        self.b0.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b1.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b2.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b3.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b4.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b5.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b6.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b7.write_address.next = bit_cast::<A, 24>(self.wa.val());
        self.b0.write_data.next = self.ld_line.val().get_bits::<64>(0);
        self.b1.write_data.next = self.ld_line.val().get_bits::<64>(64);
        self.b2.write_data.next = self.ld_line.val().get_bits::<64>(128);
        self.b3.write_data.next = self.ld_line.val().get_bits::<64>(192);
        self.b4.write_data.next = self.ld_line.val().get_bits::<64>(256);
        self.b5.write_data.next = self.ld_line.val().get_bits::<64>(320);
        self.b6.write_data.next = self.ld_line.val().get_bits::<64>(384);
        self.b7.write_data.next = self.ld_line.val().get_bits::<64>(448);
        self.b0.write_enable.next = self.win.val();
        self.b1.write_enable.next = self.win.val();
        self.b2.write_enable.next = self.win.val();
        self.b3.write_enable.next = self.win.val();
        self.b4.write_enable.next = self.win.val();
        self.b5.write_enable.next = self.win.val();
        self.b6.write_enable.next = self.win.val();
        self.b7.write_enable.next = self.win.val();

        // ---- read, stage 1: the step's row (W4Min / W4: row 0 at half 0, row 1 at half 1; W8: the step's row
        // at its half 0, nothing at half 1) at byte `pos` of the slot: beat `pos / 64`, units from `pos / 8 mod 8`
        self.x.d.next = self.rd_o0.val() + bit_cast::<6, 32>(self.row0.val() * self.rd_rb.val());
        self.is_w8.next = self.rd_fmt.val() == self.w8.val();
        self.tr.next = self.rd_half.val();
        if self.is_w8.val() {
            self.tr.next = self.rd_row.val();
        }
        self.pos.next = bit_cast::<24, 6>(self.x.q.val()) + bit_cast::<24, 16>(self.rd_off.val());
        if self.tr.val() {
            self.pos.next = bit_cast::<24, 6>(self.x.q.val())
                + bit_cast::<24, 16>(self.rd_off.val())
                + bit_cast::<24, 16>(self.rd_rb.val());
        }
        self.kk.next = (self.pos.val() >> 6) + bit_cast::<24, 16>(self.rd_base.val());
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
        f.ld_o0.connect();
        f.ld_rb.connect();
        f.ld_valid.connect();
        f.ld_base.connect();
        f.ld_idx.connect();
        f.ld_line.connect();
        f.rd_o0.connect();
        f.rd_rb.connect();
        f.rd_base.connect();
        f.rd_off.connect();
        f.rd_half.connect();
        f.rd_row.connect();
        f.rd_fmt.connect();
        f.connect_all();
        crate::emit::checked_verilog(&f)
    }
    // each bank holds a unit of every position of the lane's ring of 2 x `lines` beats
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

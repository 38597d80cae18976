//! The weight feed of one PE lane (rust-hdl HDL): the row slots of the lane's two rows in the weight buffer,
//! written with the 32-byte lines of a row group as they stream in from device memory, and read one weight
//! block per step as the lane's weight bus (`w`) and scales (`dm`).
//!
//! Row `r` of a group (the lane holds rows `row0` and `row0 + 1`) starts `o_r = o0 + r x rb` bytes after the
//! group's first line (`o0`: the group's byte offset in its first 64-byte memory beat, so the group's first
//! line is line 0 or 1 of that beat). The lines arrive two at a time, a beat of the weight port (lines
//! `ld_idx` and `ld_idx + 1`, `ld_idx` even): each lands in the rows it belongs to. A row's slot holds the
//! lines `e_r ..= (o_r + rb - 1) / 32` of the group, `e_r` the even line at or before its first (`o_r / 32`
//! rounded down to even), line `e_r + s` at slot position `s`, in two banks (even and odd positions) so that
//! a block, which may straddle two lines, is read in one cycle. Counted from an even line, a beat's low line
//! is at an even position and its high line at the odd one after it: the even bank always takes the beat's
//! low half and the odd bank its high half, with no multiplexer on the data (the price: a slot position
//! more for some row lengths, which `OverlayConfig::weight_group_lines` counts). The block at byte
//! `(o_r mod 64) + off` of the slot (`off` = block index x block bytes, the same for every row) is bytes
//! `pos mod 32 ..` of the 64 bytes `{line k + 1, line k}`, `k = pos / 32`. Every block format has its blocks
//! at even bytes and at most 34 bytes long, so two lines always hold it.
//!
//! A row slot is a ring of `2 x weight_row_lines` positions (each bank holds half of them) in which the
//! groups follow each other: a group's lines sit from its base position (`ld_base` / `rd_base`, even,
//! `OverlayConfig::weight_group_lines` after the previous group's), so while the array computes one group
//! the next ones stream in behind it, as many as the ring holds.
//!
//! Read pipeline, [`FEED_LATENCY`] edges from `rd_off` to `w`/`dm`: (1) the banks' synchronous read;
//! (2) the block bytes of both rows shifted out of the two lines; (3) the lane's bus for the step: W4Min / W4
//! pack both rows' nibbles of 16 columns per byte (row 0 low), half 0 the low nibbles of the block's 16
//! bytes (columns 0..16), half 1 the high ones; W8 gives the selected row's 16 bytes of the half.

use crate::ctrl::constant as k;
use opu_hw::numerics::WeightFormat;
use rust_hdl::prelude::*;

/// Edges from `rd_off` (with `rd_half`, `rd_row`, `rd_fmt`) to the `w` / `dm` they select.
pub const FEED_LATENCY: usize = 3;

#[derive(LogicBlock)]
pub struct WeightFeed<const A: usize> {
    pub clock: Signal<In, Clock>,
    /// Index of the lane's row 0 in a group (`2 x lane`), a constant the datapath ties.
    pub row0: Signal<In, Bits<16>>,

    // ---- load: a beat of the group being loaded, lines `ld_idx` (even, counted from the group's first beat)
    // and `ld_idx + 1` (low and high 256 bits of `ld_line`)
    pub ld_o0: Signal<In, Bits<6>>,
    pub ld_rb: Signal<In, Bits<16>>,
    pub ld_valid: Signal<In, Bit>,
    /// The group's first slot position in the ring (even).
    pub ld_base: Signal<In, Bits<16>>,
    pub ld_idx: Signal<In, Bits<16>>,
    pub ld_line: Signal<In, Bits<512>>,

    // ---- read: the block at byte `rd_off` of each row of the group at ring position `rd_base`
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

    even0: RAM<Bits<256>, A>,
    odd0: RAM<Bits<256>, A>,
    even1: RAM<Bits<256>, A>,
    odd1: RAM<Bits<256>, A>,
    // load geometry, registered: first and last line of each row
    first0: DFF<Bits<24>>,
    last0: DFF<Bits<24>>,
    first1: DFF<Bits<24>>,
    last1: DFF<Bits<24>>,
    // read geometry, registered: each row's byte offset from the even line at or before its first
    x0: DFF<Bits<6>>,
    x1: DFF<Bits<6>>,
    // stage 1 -> 2
    odd_k0: DFF<Bit>,
    odd_k1: DFF<Bit>,
    byte0: DFF<Bits<5>>,
    byte1: DFF<Bits<5>>,
    half1: DFF<Bit>,
    row1: DFF<Bit>,
    fmt1: DFF<Bits<2>>,
    // stage 2 -> 3: both rows' block bytes
    blk0: DFF<Bits<272>>,
    blk1: DFF<Bits<272>>,
    half2: DFF<Bit>,
    row2: DFF<Bit>,
    fmt2: DFF<Bits<2>>,
    // stage 3: the lane's bus
    w_r: DFF<Bits<128>>,
    dm_r: DFF<Bits<64>>,

    nib: Constant<Bits<128>>,
    w4m: Constant<Bits<2>>,
    w8: Constant<Bits<2>>,

    off0: Signal<Local, Bits<24>>,
    off1: Signal<Local, Bits<24>>,
    lo: Signal<Local, Bits<24>>,
    hi: Signal<Local, Bits<24>>,
    s0: Signal<Local, Bits<24>>,
    s1: Signal<Local, Bits<24>>,
    in0l: Signal<Local, Bit>,
    in0h: Signal<Local, Bit>,
    in1l: Signal<Local, Bit>,
    in1h: Signal<Local, Bit>,
    pos0: Signal<Local, Bits<24>>,
    pos1: Signal<Local, Bits<24>>,
    kk0: Signal<Local, Bits<24>>,
    kk1: Signal<Local, Bits<24>>,
    cat0: Signal<Local, Bits<512>>,
    cat1: Signal<Local, Bits<512>>,
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
            even0: Default::default(),
            odd0: Default::default(),
            even1: Default::default(),
            odd1: Default::default(),
            first0: Default::default(),
            last0: Default::default(),
            first1: Default::default(),
            last1: Default::default(),
            x0: Default::default(),
            x1: Default::default(),
            odd_k0: Default::default(),
            odd_k1: Default::default(),
            byte0: Default::default(),
            byte1: Default::default(),
            half1: Default::default(),
            row1: Default::default(),
            fmt1: Default::default(),
            blk0: Default::default(),
            blk1: Default::default(),
            half2: Default::default(),
            row2: Default::default(),
            fmt2: Default::default(),
            w_r: Default::default(),
            dm_r: Default::default(),
            nib: Constant::new(nib_bits),
            w4m: k(u64::from(WeightFormat::W4Min.code())),
            w8: k(u64::from(WeightFormat::W8.code())),
            off0: Default::default(),
            off1: Default::default(),
            lo: Default::default(),
            hi: Default::default(),
            s0: Default::default(),
            s1: Default::default(),
            in0l: Default::default(),
            in0h: Default::default(),
            in1l: Default::default(),
            in1h: Default::default(),
            pos0: Default::default(),
            pos1: Default::default(),
            kk0: Default::default(),
            kk1: Default::default(),
            cat0: Default::default(),
            cat1: Default::default(),
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
            self, clock, first0, last0, first1, last1, x0, x1, odd_k0, odd_k1, byte0, byte1, half1, row1, fmt1,
            blk0, blk1, half2, row2, fmt2, w_r, dm_r
        );
        self.even0.read_clock.next = self.clock.val();
        self.odd0.read_clock.next = self.clock.val();
        self.even1.read_clock.next = self.clock.val();
        self.odd1.read_clock.next = self.clock.val();
        self.even0.write_clock.next = self.clock.val();
        self.odd0.write_clock.next = self.clock.val();
        self.even1.write_clock.next = self.clock.val();
        self.odd1.write_clock.next = self.clock.val();

        // ---- load: which lines belong to each row, and where they go
        self.off0.next = bit_cast::<24, 6>(self.ld_o0.val())
            + bit_cast::<24, 32>(self.row0.val() * self.ld_rb.val());
        self.off1.next = self.off0.val() + bit_cast::<24, 16>(self.ld_rb.val());
        self.first0.d.next = self.off0.val() >> 5;
        self.last0.d.next = (self.off0.val() + bit_cast::<24, 16>(self.ld_rb.val()) - 1) >> 5;
        self.first1.d.next = self.off1.val() >> 5;
        self.last1.d.next = (self.off1.val() + bit_cast::<24, 16>(self.ld_rb.val()) - 1) >> 5;
        self.lo.next = bit_cast::<24, 16>(self.ld_idx.val());
        self.hi.next = bit_cast::<24, 16>(self.ld_idx.val()) + 1;
        // ring position of the low line: the group's base plus its line counted from the even line at or
        // before the row's first, so the low line of a beat is always at an even position (the even bank)
        // and the high one at the odd position after it: the banks take the beat's halves as they come; the
        // bank address keeps A bits, so the ring of 2^(A+1) positions wraps by itself
        self.s0.next = self.lo.val() - (self.first0.q.val() & !bits::<24>(1)) + bit_cast::<24, 16>(self.ld_base.val());
        self.s1.next = self.lo.val() - (self.first1.q.val() & !bits::<24>(1)) + bit_cast::<24, 16>(self.ld_base.val());
        self.in0l.next = self.ld_valid.val() & (self.lo.val() >= self.first0.q.val()) & (self.lo.val() <= self.last0.q.val());
        self.in0h.next = self.ld_valid.val() & (self.hi.val() >= self.first0.q.val()) & (self.hi.val() <= self.last0.q.val());
        self.in1l.next = self.ld_valid.val() & (self.lo.val() >= self.first1.q.val()) & (self.lo.val() <= self.last1.q.val());
        self.in1h.next = self.ld_valid.val() & (self.hi.val() >= self.first1.q.val()) & (self.hi.val() <= self.last1.q.val());
        // s is even: the low line to the even bank and the high one to the odd bank, both at s / 2
        self.even0.write_address.next = bit_cast::<A, 24>(self.s0.val() >> 1);
        self.even0.write_data.next = self.ld_line.val().get_bits::<256>(0);
        self.even0.write_enable.next = self.in0l.val();
        self.odd0.write_address.next = bit_cast::<A, 24>(self.s0.val() >> 1);
        self.odd0.write_data.next = self.ld_line.val().get_bits::<256>(256);
        self.odd0.write_enable.next = self.in0h.val();
        self.even1.write_address.next = bit_cast::<A, 24>(self.s1.val() >> 1);
        self.even1.write_data.next = self.ld_line.val().get_bits::<256>(0);
        self.even1.write_enable.next = self.in1l.val();
        self.odd1.write_address.next = bit_cast::<A, 24>(self.s1.val() >> 1);
        self.odd1.write_data.next = self.ld_line.val().get_bits::<256>(256);
        self.odd1.write_enable.next = self.in1h.val();

        // ---- read, stage 1: slot positions k and k + 1 of each row from the even and odd banks
        self.x0.d.next = self.rd_o0.val() + bit_cast::<6, 32>(self.row0.val() * self.rd_rb.val());
        self.x1.d.next = self.rd_o0.val()
            + bit_cast::<6, 32>(self.row0.val() * self.rd_rb.val())
            + bit_cast::<6, 16>(self.rd_rb.val());
        self.pos0.next = bit_cast::<24, 6>(self.x0.q.val()) + bit_cast::<24, 16>(self.rd_off.val());
        self.pos1.next = bit_cast::<24, 6>(self.x1.q.val()) + bit_cast::<24, 16>(self.rd_off.val());
        self.kk0.next = (self.pos0.val() >> 5) + bit_cast::<24, 16>(self.rd_base.val());
        self.kk1.next = (self.pos1.val() >> 5) + bit_cast::<24, 16>(self.rd_base.val());
        // k even: k/2 in both banks; k odd: k/2 in the odd bank (line k), k/2 + 1 in the even one (line k + 1)
        self.even0.read_address.next = bit_cast::<A, 24>((self.kk0.val() + 1) >> 1);
        self.odd0.read_address.next = bit_cast::<A, 24>(self.kk0.val() >> 1);
        self.even1.read_address.next = bit_cast::<A, 24>((self.kk1.val() + 1) >> 1);
        self.odd1.read_address.next = bit_cast::<A, 24>(self.kk1.val() >> 1);
        self.odd_k0.d.next = self.kk0.val().get_bit(0);
        self.odd_k1.d.next = self.kk1.val().get_bit(0);
        // (blocks lie at even bytes, every format's: the shift below takes 16 offsets, not 32)
        self.byte0.d.next = self.pos0.val().get_bits::<5>(0) & bits::<5>(0b11110);
        self.byte1.d.next = self.pos1.val().get_bits::<5>(0) & bits::<5>(0b11110);
        self.half1.d.next = self.rd_half.val();
        self.row1.d.next = self.rd_row.val();
        self.fmt1.d.next = self.rd_fmt.val();

        // ---- stage 2: {line k + 1, line k} shifted down to the block
        self.cat0.next = bit_cast::<512, 256>(self.even0.read_data.val())
            | (bit_cast::<512, 256>(self.odd0.read_data.val()) << 256);
        if self.odd_k0.q.val() {
            self.cat0.next = bit_cast::<512, 256>(self.odd0.read_data.val())
                | (bit_cast::<512, 256>(self.even0.read_data.val()) << 256);
        }
        self.cat1.next = bit_cast::<512, 256>(self.even1.read_data.val())
            | (bit_cast::<512, 256>(self.odd1.read_data.val()) << 256);
        if self.odd_k1.q.val() {
            self.cat1.next = bit_cast::<512, 256>(self.odd1.read_data.val())
                | (bit_cast::<512, 256>(self.even1.read_data.val()) << 256);
        }
        self.blk0.d.next = bit_cast::<272, 512>(self.cat0.val() >> (bit_cast::<9, 5>(self.byte0.q.val()) << 3));
        self.blk1.d.next = bit_cast::<272, 512>(self.cat1.val() >> (bit_cast::<9, 5>(self.byte1.q.val()) << 3));
        self.half2.d.next = self.half1.q.val();
        self.row2.d.next = self.row1.q.val();
        self.fmt2.d.next = self.fmt1.q.val();

        // ---- stage 3: the lane's bus. Block bytes: d, (W4Min) m, then the quants.
        self.q0.next = self.blk0.q.val().get_bits::<128>(16);
        self.q1.next = self.blk1.q.val().get_bits::<128>(16);
        self.dm_r.d.next = (bit_cast::<64, 16>(self.blk0.q.val().get_bits::<16>(0)) << 48)
            | (bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(0)) << 16);
        if self.fmt2.q.val() == self.w4m.val() {
            self.q0.next = self.blk0.q.val().get_bits::<128>(32);
            self.q1.next = self.blk1.q.val().get_bits::<128>(32);
            self.dm_r.d.next = (bit_cast::<64, 16>(self.blk0.q.val().get_bits::<16>(0)) << 48)
                | (bit_cast::<64, 16>(self.blk0.q.val().get_bits::<16>(16)) << 32)
                | (bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(0)) << 16)
                | bit_cast::<64, 16>(self.blk1.q.val().get_bits::<16>(16));
        }
        self.w_r.d.next = (self.q0.val() & self.nib.val()) | ((self.q1.val() & self.nib.val()) << 4);
        if self.half2.q.val() {
            self.w_r.d.next = ((self.q0.val() >> 4) & self.nib.val()) | (self.q1.val() & !self.nib.val());
        }
        self.qs8.next = self.blk0.q.val() >> 16;
        if self.row2.q.val() {
            self.qs8.next = self.blk1.q.val() >> 16;
        }
        if self.fmt2.q.val() == self.w8.val() {
            self.w_r.d.next = self.qs8.val().get_bits::<128>(0);
            if self.half2.q.val() {
                self.w_r.d.next = self.qs8.val().get_bits::<128>(128);
            }
        }
        self.w.next = self.w_r.q.val();
        self.dm.next = self.dm_r.q.val();
    }
}

/// A [`WeightFeed`] with `lines`-line row slots (`OverlayConfig::weight_row_lines`) ready to emit.
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
    // each bank holds half of a slot's ring of 2 x `lines` positions: `lines` entries
    match lines {
        4 => build::<2>(),
        8 => build::<3>(),
        16 => build::<4>(),
        32 => build::<5>(),
        64 => build::<6>(),
        128 => build::<7>(),
        256 => build::<8>(),
        512 => build::<9>(),
        1024 => build::<10>(),
        2048 => build::<11>(),
        _ => Err(crate::emit::EmitError::Unsupported {
            unit: "matrix".into(),
            config: String::new(),
            what: format!("weight row slots of {lines} lines: expected a power of two in 4..=2048"),
        }),
    }
}

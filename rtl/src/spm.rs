//! The scratchpad (rust-hdl HDL): 8 banks of 32-bit words (word `w` in bank `w mod 8`, row `w / 8`) behind
//! one line port, so that the units move 32-byte lines at any word address without a read-modify-write.
//!
//! - Read: `raddr` (a word address) names the 8 words `raddr .. raddr + 8`; they are in `rdata` the next
//!   cycle, word `j` at bits `32j..` (line order). Each bank reads its own row (the banks below the word
//!   offset `raddr mod 8` hold words that wrap into the next row) and the banks' words are rotated back.
//! - Write: `wdata` (line order) goes to the words `waddr .. waddr + 8` whose bit in `we` is set, rotated
//!   onto the banks the same way.
//!
//! The units (DMA, matrix) and `ldr` address words; only this block knows the banks.

use rust_hdl::prelude::*;

/// Scratchpad banks: 32-bit words per 256-bit line.
pub const SPM_BANKS: usize = 8;
/// Word address bits: the largest scratchpad the config allows (4 MiB) in 4-byte words.
pub const SPM_WORD_BITS: usize = 20;
/// Row address bits of a bank for that scratchpad (4 MiB / 32 bytes).
pub const SPM_ROW_BITS: usize = SPM_WORD_BITS - 3;

/// The scratchpad of `32 << R` bytes (`2^R` rows per bank).
#[derive(LogicBlock)]
pub struct Scratchpad<const R: usize> {
    pub clock: Signal<In, Clock>,
    pub raddr: Signal<In, Bits<SPM_WORD_BITS>>,
    pub rdata: Signal<Out, Bits<256>>,
    pub waddr: Signal<In, Bits<SPM_WORD_BITS>>,
    pub we: Signal<In, Bits<SPM_BANKS>>,
    pub wdata: Signal<In, Bits<256>>,

    banks: [RAM<Bits<32>, R>; 8],
    /// The word offset of the read in flight (its data arrives now).
    r_off: DFF<Bits<3>>,
    r_row: Signal<Local, Bits<SPM_ROW_BITS>>,
    r_carry: Signal<Local, Bits<8>>,
    r_shift: Signal<Local, Bits<9>>,
    r_banks: Signal<Local, Bits<256>>,
    w_off: Signal<Local, Bits<3>>,
    w_row: Signal<Local, Bits<SPM_ROW_BITS>>,
    w_carry: Signal<Local, Bits<8>>,
    w_shift: Signal<Local, Bits<9>>,
    w_banks: Signal<Local, Bits<256>>,
    w_en: Signal<Local, Bits<8>>,
}

impl<const R: usize> Default for Scratchpad<R> {
    fn default() -> Self {
        assert!(R <= SPM_ROW_BITS);
        Scratchpad {
            clock: Default::default(),
            raddr: Default::default(),
            rdata: Default::default(),
            waddr: Default::default(),
            we: Default::default(),
            wdata: Default::default(),
            banks: Default::default(),
            r_off: Default::default(),
            r_row: Default::default(),
            r_carry: Default::default(),
            r_shift: Default::default(),
            r_banks: Default::default(),
            w_off: Default::default(),
            w_row: Default::default(),
            w_carry: Default::default(),
            w_shift: Default::default(),
            w_banks: Default::default(),
            w_en: Default::default(),
        }
    }
}

impl<const R: usize> Logic for Scratchpad<R> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, r_off);
        self.banks[0].read_clock.next = self.clock.val();
        self.banks[1].read_clock.next = self.clock.val();
        self.banks[2].read_clock.next = self.clock.val();
        self.banks[3].read_clock.next = self.clock.val();
        self.banks[4].read_clock.next = self.clock.val();
        self.banks[5].read_clock.next = self.clock.val();
        self.banks[6].read_clock.next = self.clock.val();
        self.banks[7].read_clock.next = self.clock.val();
        self.banks[0].write_clock.next = self.clock.val();
        self.banks[1].write_clock.next = self.clock.val();
        self.banks[2].write_clock.next = self.clock.val();
        self.banks[3].write_clock.next = self.clock.val();
        self.banks[4].write_clock.next = self.clock.val();
        self.banks[5].write_clock.next = self.clock.val();
        self.banks[6].write_clock.next = self.clock.val();
        self.banks[7].write_clock.next = self.clock.val();

        // ---- read: bank b reads row `raddr / 8`, or the next one below the word offset
        self.r_row.next = self.raddr.val().get_bits::<SPM_ROW_BITS>(3);
        self.r_carry.next = (bits::<8>(1) << self.raddr.val().get_bits::<3>(0)) - 1;
        self.banks[0].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(0));
        self.banks[1].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(1));
        self.banks[2].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(2));
        self.banks[3].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(3));
        self.banks[4].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(4));
        self.banks[5].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(5));
        self.banks[6].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(6));
        self.banks[7].read_address.next = bit_cast::<R, SPM_ROW_BITS>(self.r_row.val() + self.r_carry.val().get_bit(7));
        self.r_off.d.next = self.raddr.val().get_bits::<3>(0);
        // the words arrive in bank order: rotate right by the offset of their read
        self.r_banks.next = bit_cast::<256, 32>(self.banks[0].read_data.val())
            | (bit_cast::<256, 32>(self.banks[1].read_data.val()) << 32)
            | (bit_cast::<256, 32>(self.banks[2].read_data.val()) << 64)
            | (bit_cast::<256, 32>(self.banks[3].read_data.val()) << 96)
            | (bit_cast::<256, 32>(self.banks[4].read_data.val()) << 128)
            | (bit_cast::<256, 32>(self.banks[5].read_data.val()) << 160)
            | (bit_cast::<256, 32>(self.banks[6].read_data.val()) << 192)
            | (bit_cast::<256, 32>(self.banks[7].read_data.val()) << 224);
        self.r_shift.next = bit_cast::<9, 3>(self.r_off.q.val()) << 5;
        self.rdata.next = self.r_banks.val();
        if self.r_off.q.val() != 0 {
            self.rdata.next = (self.r_banks.val() >> self.r_shift.val()) | (self.r_banks.val() << (bits::<9>(256) - self.r_shift.val()));
        }

        // ---- write: the line rotated left by the word offset onto the banks, and its word enables with it
        self.w_off.next = self.waddr.val().get_bits::<3>(0);
        self.w_row.next = self.waddr.val().get_bits::<SPM_ROW_BITS>(3);
        self.w_carry.next = (bits::<8>(1) << self.w_off.val()) - 1;
        self.w_shift.next = bit_cast::<9, 3>(self.w_off.val()) << 5;
        self.w_banks.next = self.wdata.val();
        self.w_en.next = self.we.val();
        if self.w_off.val() != 0 {
            self.w_banks.next = (self.wdata.val() << self.w_shift.val()) | (self.wdata.val() >> (bits::<9>(256) - self.w_shift.val()));
            self.w_en.next = (self.we.val() << self.w_off.val()) | (self.we.val() >> (bits::<4>(8) - bit_cast::<4, 3>(self.w_off.val())));
        }
        self.banks[0].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(0));
        self.banks[1].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(1));
        self.banks[2].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(2));
        self.banks[3].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(3));
        self.banks[4].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(4));
        self.banks[5].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(5));
        self.banks[6].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(6));
        self.banks[7].write_address.next = bit_cast::<R, SPM_ROW_BITS>(self.w_row.val() + self.w_carry.val().get_bit(7));
        self.banks[0].write_data.next = self.w_banks.val().get_bits::<32>(0);
        self.banks[1].write_data.next = self.w_banks.val().get_bits::<32>(32);
        self.banks[2].write_data.next = self.w_banks.val().get_bits::<32>(64);
        self.banks[3].write_data.next = self.w_banks.val().get_bits::<32>(96);
        self.banks[4].write_data.next = self.w_banks.val().get_bits::<32>(128);
        self.banks[5].write_data.next = self.w_banks.val().get_bits::<32>(160);
        self.banks[6].write_data.next = self.w_banks.val().get_bits::<32>(192);
        self.banks[7].write_data.next = self.w_banks.val().get_bits::<32>(224);
        self.banks[0].write_enable.next = self.w_en.val().get_bit(0);
        self.banks[1].write_enable.next = self.w_en.val().get_bit(1);
        self.banks[2].write_enable.next = self.w_en.val().get_bit(2);
        self.banks[3].write_enable.next = self.w_en.val().get_bit(3);
        self.banks[4].write_enable.next = self.w_en.val().get_bit(4);
        self.banks[5].write_enable.next = self.w_en.val().get_bit(5);
        self.banks[6].write_enable.next = self.w_en.val().get_bit(6);
        self.banks[7].write_enable.next = self.w_en.val().get_bit(7);
    }
}

/// The scratchpad of a config inside a bigger design: its ports as [`Scratchpad`]'s, its Verilog an
/// instance of `opu_spm`, which is [`Scratchpad`] emitted for the config's depth ([`scratchpad_verilog`]).
/// Why: the depth is a type parameter of the rust-hdl block; instantiated this way, the top is not generic
/// in it (the top is already generic in the weight port's width, and every pair of the two would be compiled).
/// Not simulated by rust-hdl (its `update` does nothing): the top runs under Verilator.
#[derive(LogicBlock)]
pub struct ScratchpadInstance {
    pub clock: Signal<In, Clock>,
    pub raddr: Signal<In, Bits<SPM_WORD_BITS>>,
    pub rdata: Signal<Out, Bits<256>>,
    pub waddr: Signal<In, Bits<SPM_WORD_BITS>>,
    pub we: Signal<In, Bits<SPM_BANKS>>,
    pub wdata: Signal<In, Bits<256>>,
    /// The Verilog of `opu_spm`.
    cores: crate::lane::ModelState<String>,
}

impl ScratchpadInstance {
    pub fn new(config: &opu_hw::OverlayConfig) -> Result<Self, crate::emit::EmitError> {
        Ok(ScratchpadInstance {
            clock: Default::default(),
            raddr: Default::default(),
            rdata: Default::default(),
            waddr: Default::default(),
            we: Default::default(),
            wdata: Default::default(),
            cores: crate::lane::ModelState(scratchpad_verilog(config)?),
        })
    }
}

impl Logic for ScratchpadInstance {
    fn update(&mut self) {}
    fn connect(&mut self) {
        self.rdata.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Wrapper(Wrapper {
            code: "opu_spm spm(.clock(clock), .raddr(raddr), .rdata(rdata), .waddr(waddr), .we(we), .wdata(wdata));\n".into(),
            cores: self.cores.0.clone(),
        })
    }
}

/// The Verilog of [`Scratchpad`] for `config`'s `scratchpad_bytes` (32 x a power of two up to 4 MiB), its
/// module named `opu_spm`.
pub fn scratchpad_verilog(config: &opu_hw::OverlayConfig) -> Result<String, crate::emit::EmitError> {
    fn build<const R: usize>() -> Result<String, crate::emit::EmitError> {
        let v = crate::emit::checked_verilog(&scratchpad_top::<R>())?;
        Ok(crate::emit::rename_top(&v, "opu_spm"))
    }
    let rows = (config.scratchpad_bytes / 32).trailing_zeros();
    match rows {
        _ if config.scratchpad_bytes != 32 << rows => Err(crate::emit::EmitError::Unsupported {
            unit: "top".into(),
            config: config.name.clone(),
            what: format!("scratchpad_bytes = {} is not 32 x a power of two (the banks' depth)", config.scratchpad_bytes),
        }),
        7 => build::<7>(),
        8 => build::<8>(),
        9 => build::<9>(),
        10 => build::<10>(),
        11 => build::<11>(),
        12 => build::<12>(),
        13 => build::<13>(),
        14 => build::<14>(),
        15 => build::<15>(),
        16 => build::<16>(),
        17 => build::<17>(),
        _ => unreachable!("the config's scratchpad is 4096..=4 MiB bytes"),
    }
}

/// A small [`Scratchpad`] ready to simulate.
pub fn scratchpad_top<const R: usize>() -> Scratchpad<R> {
    connect_top!(Scratchpad::<R>::default(), clock, raddr, waddr, we, wdata)
}

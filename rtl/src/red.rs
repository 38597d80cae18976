//! The reduction file `RED` of docs/isa.md (rust-hdl HDL): [`NUM_RED`] wide accumulators `{nf, 96-bit sum}`,
//! written by the matrix unit (`matmul red`) and the vector unit (`vop red`) and read by the vector unit
//! (`rmsnorm`). A RAM with a valid bit per entry: `clear` (a run starts) invalidates every entry, and an
//! invalid entry reads as 0, which is what docs/isa.md says `RED` holds at the doorbell.
//!
//! Read: `raddr` now, `rdata` the next cycle. A write and a read of the same entry in one cycle read the old
//! value. One unit uses the file at a time (the top's interlock); the top muxes the ports.

use opu_hw::isa::NUM_RED;
use rust_hdl::prelude::*;

/// Bits of an entry: the 96-bit accumulator and its non-finite flag (bit 96).
pub const RED_BITS: usize = 97;
const _: () = assert!(NUM_RED == 64);

#[derive(LogicBlock, Default)]
pub struct RedFile {
    pub clock: Signal<In, Clock>,
    pub clear: Signal<In, Bit>,
    pub raddr: Signal<In, Bits<6>>,
    pub rdata: Signal<Out, Bits<RED_BITS>>,
    pub we: Signal<In, Bit>,
    pub waddr: Signal<In, Bits<6>>,
    pub wdata: Signal<In, Bits<RED_BITS>>,
    ram: RAM<Bits<RED_BITS>, 6>,
    valid: DFF<Bits<64>>,
    /// The valid bit of the entry being read, beside the RAM's data.
    rvalid: DFF<Bit>,
}

impl Logic for RedFile {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, valid, rvalid);
        self.ram.read_clock.next = self.clock.val();
        self.ram.write_clock.next = self.clock.val();
        self.ram.read_address.next = self.raddr.val();
        self.ram.write_address.next = self.waddr.val();
        self.ram.write_data.next = self.wdata.val();
        self.ram.write_enable.next = self.we.val();
        self.rvalid.d.next = self.valid.q.val().get_bit(self.raddr.val().index());
        self.rdata.next = 0.into();
        if self.rvalid.q.val() {
            self.rdata.next = self.ram.read_data.val();
        }
        if self.we.val() {
            self.valid.d.next = self.valid.q.val() | (bits::<64>(1) << self.waddr.val());
        }
        if self.clear.val() {
            self.valid.d.next = 0.into();
        }
    }
}

/// A [`RedFile`] ready to simulate.
pub fn red_file_top() -> RedFile {
    connect_top!(RedFile::default(), clock, clear, raddr, we, waddr, wdata)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rust-hdl's simulator: entries read as 0 until written, after a clear again; a read in the cycle of a
    /// write to the same entry sees the old value.
    #[test]
    fn entries_read_zero_until_written_and_after_clear() {
        let mut sim = Simulation::new();
        sim.add_clock(5, |x: &mut Box<RedFile>| x.clock.next = !x.clock.val());
        sim.add_testbench(move |mut ep: Sim<RedFile>| {
            let mut x = ep.init()?;
            let v = |n: u128| -> Bits<RED_BITS> { Bits::<RED_BITS>::from(n as u64) | (Bits::<RED_BITS>::from((n >> 64) as u64) << 64) };
            x.raddr.next = 5.into();
            wait_clock_cycle!(ep, clock, x);
            wait_clock_cycle!(ep, clock, x);
            sim_assert_eq!(ep, x.rdata.val(), v(0), x);
            // write entry 5 while reading it: the old value (0) comes back, then the new one
            x.we.next = true;
            x.waddr.next = 5.into();
            x.wdata.next = v((1u128 << 96) | 0x1234_5678_9abc);
            wait_clock_cycle!(ep, clock, x);
            x.we.next = false;
            sim_assert_eq!(ep, x.rdata.val(), v(0), x);
            wait_clock_cycle!(ep, clock, x);
            sim_assert_eq!(ep, x.rdata.val(), v((1u128 << 96) | 0x1234_5678_9abc), x);
            // another entry is still 0; a clear makes entry 5 read 0 again
            x.raddr.next = 6.into();
            wait_clock_cycle!(ep, clock, x);
            sim_assert_eq!(ep, x.rdata.val(), v(0), x);
            x.raddr.next = 5.into();
            x.clear.next = true;
            wait_clock_cycle!(ep, clock, x);
            x.clear.next = false;
            wait_clock_cycle!(ep, clock, x);
            sim_assert_eq!(ep, x.rdata.val(), v(0), x);
            ep.done(x)
        });
        sim.run(Box::new(red_file_top()), 1000).unwrap();
    }
}

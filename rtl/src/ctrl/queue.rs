//! The issue queue in front of a unit (rust-hdl HDL): the core pushes an instruction (its word, pc,
//! register operand and an auxiliary operand: the CSRs the unit reads) as soon as the queue has room, and the unit pops it when it is ready for the next one,
//! so the core runs ahead of a busy unit (its scalar work, and issue to the other units, go on). First in,
//! first out; `flush` empties it (the watchdog, SOFT_RESET, and the unit's own trap: what follows a trapping
//! instruction is dropped).

use rust_hdl::prelude::*;

/// Entries of a queue.
pub const QUEUE_DEPTH: usize = opu_hw::config::ISSUE_QUEUE_DEPTH as usize;
/// Bits of the auxiliary operand (the attention unit's five CSRs).
pub const AUX_BITS: usize = 192;
/// An entry: word (bits 0..128), pc (128..160), register operand (160..192), auxiliary operand (192..352).
pub const ENTRY_BITS: usize = 192 + AUX_BITS;

#[derive(LogicBlock, Default)]
pub struct IssueQueue {
    pub clock: Signal<In, Clock>,
    pub flush: Signal<In, Bit>,
    // push side (the core)
    pub push: Signal<In, Bit>,
    pub push_ready: Signal<Out, Bit>,
    pub push_word: Signal<In, Bits<128>>,
    pub push_pc: Signal<In, Bits<32>>,
    pub push_reg: Signal<In, Bits<32>>,
    pub push_aux: Signal<In, Bits<AUX_BITS>>,
    // pop side (the unit): `pop_valid` with the head entry; `pop` takes it
    pub pop_valid: Signal<Out, Bit>,
    pub pop: Signal<In, Bit>,
    pub pop_word: Signal<Out, Bits<128>>,
    pub pop_pc: Signal<Out, Bits<32>>,
    pub pop_reg: Signal<Out, Bits<32>>,
    pub pop_aux: Signal<Out, Bits<AUX_BITS>>,
    /// No entry held.
    pub empty: Signal<Out, Bit>,

    e0: DFF<Bits<ENTRY_BITS>>,
    e1: DFF<Bits<ENTRY_BITS>>,
    e2: DFF<Bits<ENTRY_BITS>>,
    e3: DFF<Bits<ENTRY_BITS>>,
    head: DFF<Bits<2>>,
    count: DFF<Bits<3>>,
    head_entry: Signal<Local, Bits<ENTRY_BITS>>,
    tail: Signal<Local, Bits<2>>,
    entry_in: Signal<Local, Bits<ENTRY_BITS>>,
    do_push: Signal<Local, Bit>,
    do_pop: Signal<Local, Bit>,
}

impl Logic for IssueQueue {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, e0, e1, e2, e3, head, count);
        self.head_entry.next = self.e0.q.val();
        if self.head.q.val() == 1 {
            self.head_entry.next = self.e1.q.val();
        }
        if self.head.q.val() == 2 {
            self.head_entry.next = self.e2.q.val();
        }
        if self.head.q.val() == 3 {
            self.head_entry.next = self.e3.q.val();
        }
        self.pop_valid.next = self.count.q.val() != 0;
        self.empty.next = self.count.q.val() == 0;
        self.push_ready.next = self.count.q.val() < 4;
        self.pop_word.next = self.head_entry.val().get_bits::<128>(0);
        self.pop_pc.next = self.head_entry.val().get_bits::<32>(128);
        self.pop_reg.next = self.head_entry.val().get_bits::<32>(160);
        self.pop_aux.next = self.head_entry.val().get_bits::<AUX_BITS>(192);
        self.entry_in.next = bit_cast::<ENTRY_BITS, 128>(self.push_word.val())
            | (bit_cast::<ENTRY_BITS, 32>(self.push_pc.val()) << 128)
            | (bit_cast::<ENTRY_BITS, 32>(self.push_reg.val()) << 160)
            | (bit_cast::<ENTRY_BITS, AUX_BITS>(self.push_aux.val()) << 192);
        self.do_push.next = self.push.val() & (self.count.q.val() < 4);
        self.do_pop.next = self.pop.val() & (self.count.q.val() != 0);
        self.tail.next = self.head.q.val() + bit_cast::<2, 3>(self.count.q.val());
        if self.do_push.val() {
            if self.tail.val() == 0 {
                self.e0.d.next = self.entry_in.val();
            }
            if self.tail.val() == 1 {
                self.e1.d.next = self.entry_in.val();
            }
            if self.tail.val() == 2 {
                self.e2.d.next = self.entry_in.val();
            }
            if self.tail.val() == 3 {
                self.e3.d.next = self.entry_in.val();
            }
        }
        if self.do_pop.val() {
            self.head.d.next = self.head.q.val() + 1;
        }
        self.count.d.next = self.count.q.val() + self.do_push.val() - bit_cast::<3, 1>(self.do_pop.val().into());
        if self.flush.val() {
            self.count.d.next = 0.into();
        }
    }
}

const _: () = assert!(QUEUE_DEPTH == 4 && ENTRY_BITS == 128 + 32 + 32 + AUX_BITS);

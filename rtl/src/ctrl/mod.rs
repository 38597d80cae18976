//! The overlay's control: the MMIO register file ([`mmio`]), the controller core that fetches, decodes and
//! issues instructions ([`core`]), the decoder tables built from the ISA ([`decode`]), and the issue queue
//! in front of each unit ([`queue`]). These are written
//! in rust-hdl's own HDL (`#[hdl_gen]` logic, `DFF`, `ROM`), unlike the datapath leaves, whose arithmetic is
//! custom Verilog (docs/rtl.md, "Control (`ctrl`), the DMA unit and the top so far").

pub mod core;
pub mod decode;
pub mod mmio;
pub mod queue;

use rust_hdl::prelude::{Bits, Constant, ToBits};

/// A rust-hdl constant of `N` bits (the blocks' offsets, codes and sizes from opu-hw and the config).
pub(crate) fn constant<const N: usize>(v: u64) -> Constant<Bits<N>> {
    Constant::new(v.to_bits())
}

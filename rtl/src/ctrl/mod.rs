//! The overlay's control: the MMIO register file ([`mmio`]), the controller core that fetches, decodes and
//! issues instructions ([`core`]), the decoder tables built from the ISA ([`decode`]), and the issue queue
//! in front of each unit ([`queue`]). These are written
//! in rust-hdl's own HDL (`#[hdl_gen]` logic, `DFF`, `ROM`), unlike the datapath leaves, whose arithmetic is
//! custom Verilog (docs/rtl.md, "Control").

pub mod core;
pub mod decode;
pub mod mmio;
pub mod queue;

//! The OPU overlay in rust-hdl. Every block equals [`opu_hw::numerics`] bit for bit: its `update()` (the
//! model rust-hdl simulates) calls the numerics functions, and its Verilog is tested against them.
//!
//! - [`dsp`]: DSP48E2 packed multiplies (w4x2u).
//! - [`dsp3`]: the overpacked w4x3u multiply: three W4 products per DSP48E2 with 12-bit activations.
//! - [`acc`]: the accumulating w4x2u multiply (a block of 32 columns in P, with side bits).
//! - [`lane`]: the hybrid PE lane (two rows, 16 DSP48E2 for the products and 4 for the block scales, W4Min/W4/W8) with its block epilogue.
//! - [`align`]: the block aligner (one per array).
//! - [`array`]: the PE array of a config (structural Verilog: aligner + lanes).
//! - [`round`]: the output stage, accumulators rounded to FP16 / FP32 (Verilog shared with the router).
//! - [`router`]: the router unit (FP16 x FP16 dot products, biases, FP32 rounding, the skip decision).
//! - [`fp32`]: IEEE binary32 add/subtract/multiply in Verilog and the dataflow pipeliner built on them.
//! - [`vector`]: the vector lane (element-wise ops, exp/rsqrt/recip/sigmoid/SiLU, RMSNorm, RoPE, axpby).
//! - [`reduce`]: the reduction unit (sum of squares, online-softmax state).
//! - [`ctrl`]: the control in rust-hdl's own HDL: the MMIO register file, the controller core (fetch, decode,
//!   scalar unit, issue with a scoreboard, traps, watchdog) and the decoder tables built from the ISA.
//! - [`attn`]: the attention unit (`attn` with the KV history buffer, `kvappend`): its sequencer (rust-hdl
//!   HDL) over the router, the reduction unit and its FP32 lanes.
//! - [`dma`]: the DMA unit (rust-hdl HDL): load/store/load2d/store2d between device memory and the 8-bank
//!   scratchpad.
//! - [`matrix`]: the matrix unit (`matmul`): its sequencer (rust-hdl HDL), the weight feeds and the datapath
//!   around the PE array.
//! - [`cnn`]: the CNN unit (`conv`, `maxpool` in 16-bit fixed point): its sequencer (rust-hdl HDL) and the
//!   datapath of fixed-point lanes (one i16 x i16 product per DSP48E2, 16 per lane and cycle).
//! - [`vecunit`]: the vector unit (`vop rmsnorm rope argmax`, the reduction file `RED`): its sequencer
//!   (rust-hdl HDL) and the datapath of 8 vector lanes.
//! - [`red`]: the reduction file `RED` (64 wide accumulators, reading 0 until written in a run).
//! - [`spm`]: the scratchpad, 8 banks of words behind a line port at any word address.
//! - [`top`]: the overlay so far: register file, core, the DMA, matrix, vector and attention units and the
//!   scratchpad, on a line port and a weight port to device memory.
//! - [`emit`]: Verilog of a named unit, top module renamed to a stable name.
//! - [`synth`]: resource figures from yosys `synth_xilinx -family xcup`.
pub use opu_hw as hw;

/// A block ready to simulate or emit: `connect_top!(block, inputs...)` connects the listed top-level inputs
/// (rust-hdl requires every input to be driven) and the block's internals, and returns it.
macro_rules! connect_top {
    ($block:expr, $($input:ident),+) => {{
        let mut uut = $block;
        $( uut.$input.connect(); )+
        uut.connect_all();
        uut
    }};
}

pub mod acc;
pub mod align;
pub mod array;
pub mod attn;
pub mod cnn;
pub mod ctrl;
pub mod dma;
pub mod dsp;
pub mod dsp3;
pub mod card;
pub mod emit;
pub mod fp32;
pub mod lane;
pub mod matrix;
pub mod reduce;
pub mod red;
pub mod round;
pub mod router;
pub mod spm;
pub mod sqsum;
pub mod synth;
pub mod testing;
pub mod top;
pub mod vecunit;
pub mod vector;

pub use emit::{emit_verilog, emit_verilog_for, EmitError, UNITS};

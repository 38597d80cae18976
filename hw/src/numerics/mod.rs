//! Every datapath operation of the overlay as a bit-exact Rust function.
//!
//! The functional simulator calls these, the RTL must equal them bit for bit, and the compiler quantizes with
//! them. docs/numerics.md states each rule; change a rule here and everywhere follows.
//!
//! - [`fp16`]: FP16 <-> FP32 conversion (IEEE round-to-nearest-even, gradual underflow).
//! - [`align`]: block floating point: a block of 32 FP16 activations aligned to their shared exponent.
//! - [`acc`]: the wide fixed-point accumulator and its final rounding.
//! - [`weights`]: the weight formats (W4 with min, W4, W8, FP16), their block layout and quantizers.
//! - [`dot`]: hybrid block dot products and FP16 x FP16 dot products.
//! - [`packing`]: packed multiplies on 27x18 DSP multipliers and their correction terms.
//! - [`approx`]: exp, rsqrt, reciprocal, sigmoid, SiLU.
//! - [`router`]: the router's logits and skip decision (`route`).
//! - [`vector`]: the vector unit: element-wise ops, the vector lane's op codes, RMSNorm, RoPE, online softmax,
//!   argmax.
//! - [`fixed`]: 16-bit fixed point for CNNs (CNNA): requantization, convolution, max-pooling.

pub mod acc;
pub mod align;
pub mod approx;
pub mod dot;
pub mod fixed;
pub mod fp16;
pub mod packing;
pub mod router;
pub mod vector;
pub mod weights;

/// Weights and activations are grouped in blocks of this many elements (GGUF's QK4_1 / QK8_0).
pub const BLOCK: usize = 32;

pub use acc::WideAcc;
pub use align::AlignedBlock;
pub use weights::WeightFormat;

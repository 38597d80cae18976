//! Field types of instructions: how each is stored in its bits and written in assembly.

use crate::numerics::vector::{DType, VecOp};
use crate::numerics::WeightFormat;

/// How a field's raw bits are interpreted, parsed and printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Uint,
    Bool,
    Reg,
    Pred,
    Format,
    DType,
    VecOp,
    Red,
    Csr,
    F32,
    Rope,
}

impl FieldKind {
    /// What a valid value looks like, for error messages.
    pub fn expected(self) -> &'static str {
        match self {
            FieldKind::Uint => "an unsigned integer",
            FieldKind::Bool => "0 or 1",
            FieldKind::Reg => "a register r0..r15",
            FieldKind::Pred => "a predicate p0..p7",
            FieldKind::Format => "a weight format: w4m, w4, w8 or f16",
            FieldKind::DType => "f16 or f32",
            FieldKind::VecOp => "a vector op: add, mul, silu, swiglu, copy or scale",
            FieldKind::Red => "none, set or add",
            FieldKind::Csr => "a CSR name (see docs/isa.md)",
            FieldKind::F32 => "a float, or its bits as 0x........",
            FieldKind::Rope => "normal or neox",
        }
    }

    /// Assembly text of a raw value (which must be valid for the kind).
    pub fn format(self, raw: u64) -> String {
        match self {
            FieldKind::Uint => {
                if raw >= 4096 {
                    format!("{raw:#x}")
                } else {
                    raw.to_string()
                }
            }
            FieldKind::Bool => raw.to_string(),
            FieldKind::Reg => format!("r{raw}"),
            FieldKind::Pred => format!("p{raw}"),
            FieldKind::Format => WeightFormat::from_code(raw as u8).map(|f| f.name()).unwrap_or("?").into(),
            FieldKind::DType => DType::from_code(raw as u8).map(|f| f.name()).unwrap_or("?").into(),
            FieldKind::VecOp => VecOp::from_code(raw as u8).map(|f| f.name()).unwrap_or("?").into(),
            FieldKind::Red => RedMode::from_raw(raw).map(|r| r.name()).unwrap_or("?").into(),
            FieldKind::Csr => Csr::from_raw(raw).map(|c| c.name()).unwrap_or("?").into(),
            FieldKind::Rope => RopeStyle::from_raw(raw).map(|r| r.name()).unwrap_or("?").into(),
            FieldKind::F32 => {
                let x = f32::from_bits(raw as u32);
                // Rust prints the shortest text that parses back to the same f32; NaN keeps its bits.
                if x.is_nan() {
                    format!("{raw:#010x}")
                } else {
                    format!("{x:?}")
                }
            }
        }
    }

    /// Parses assembly text to a raw value; `None` if the text is not a value of this kind.
    pub fn parse(self, text: &str) -> Option<u64> {
        fn uint(t: &str) -> Option<u64> {
            let t = t.replace('_', "");
            match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => t.parse().ok(),
            }
        }
        fn indexed(t: &str, prefix: char, n: u64) -> Option<u64> {
            let v: u64 = t.strip_prefix(prefix)?.parse().ok()?;
            (v < n).then_some(v)
        }
        match self {
            FieldKind::Uint => uint(text),
            FieldKind::Bool => match text {
                "0" | "false" => Some(0),
                "1" | "true" => Some(1),
                _ => None,
            },
            FieldKind::Reg => indexed(text, 'r', super::NUM_REGS as u64),
            FieldKind::Pred => indexed(text, 'p', super::NUM_PREDS as u64),
            FieldKind::Format => WeightFormat::from_name(text).map(|f| u64::from(f.code())),
            FieldKind::DType => DType::from_name(text).map(|f| u64::from(f.code())),
            FieldKind::VecOp => VecOp::from_name(text).map(|f| u64::from(f.code())),
            FieldKind::Red => RedMode::ALL.iter().find(|r| r.name() == text).map(Field::to_raw),
            FieldKind::Csr => Csr::ALL.iter().find(|c| c.name() == text).map(Field::to_raw),
            FieldKind::Rope => RopeStyle::ALL.iter().find(|r| r.name() == text).map(Field::to_raw),
            FieldKind::F32 => {
                if text.starts_with("0x") {
                    uint(text).filter(|&v| v <= u64::from(u32::MAX))
                } else {
                    text.parse::<f32>().ok().map(|x| u64::from(x.to_bits()))
                }
            }
        }
    }

    /// Whether the assembler may leave the field out (it then reads as 0: off / none).
    pub fn optional(self) -> bool {
        matches!(self, FieldKind::Bool | FieldKind::Red)
    }
}

/// A type that can be an instruction field.
pub trait Field: Sized {
    const KIND: FieldKind;
    fn to_raw(&self) -> u64;
    fn from_raw(raw: u64) -> Option<Self>;
}

impl Field for u32 {
    const KIND: FieldKind = FieldKind::Uint;
    fn to_raw(&self) -> u64 {
        u64::from(*self)
    }
    fn from_raw(raw: u64) -> Option<Self> {
        u32::try_from(raw).ok()
    }
}

impl Field for bool {
    const KIND: FieldKind = FieldKind::Bool;
    fn to_raw(&self) -> u64 {
        u64::from(*self)
    }
    fn from_raw(raw: u64) -> Option<Self> {
        match raw {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// A scalar register r0..r15 (r0 reads as zero; writes to it are dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg(pub u8);

impl Field for Reg {
    const KIND: FieldKind = FieldKind::Reg;
    fn to_raw(&self) -> u64 {
        u64::from(self.0)
    }
    fn from_raw(raw: u64) -> Option<Self> {
        (raw < super::NUM_REGS as u64).then_some(Reg(raw as u8))
    }
}

/// A predicate register p0..p7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pred(pub u8);

impl Field for Pred {
    const KIND: FieldKind = FieldKind::Pred;
    fn to_raw(&self) -> u64 {
        u64::from(self.0)
    }
    fn from_raw(raw: u64) -> Option<Self> {
        (raw < super::NUM_PREDS as u64).then_some(Pred(raw as u8))
    }
}

/// An FP32 immediate, kept as bits so that instructions compare and round-trip exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct F32Bits(pub u32);

impl F32Bits {
    pub fn new(x: f32) -> Self {
        F32Bits(x.to_bits())
    }
    pub fn get(self) -> f32 {
        f32::from_bits(self.0)
    }
}

impl Field for F32Bits {
    const KIND: FieldKind = FieldKind::F32;
    fn to_raw(&self) -> u64 {
        u64::from(self.0)
    }
    fn from_raw(raw: u64) -> Option<Self> {
        u32::try_from(raw).ok().map(F32Bits)
    }
}

macro_rules! enum_field {
    ($ty:ident, $kind:ident, $code:ident, $from:ident) => {
        impl Field for $ty {
            const KIND: FieldKind = FieldKind::$kind;
            fn to_raw(&self) -> u64 {
                u64::from(self.$code())
            }
            fn from_raw(raw: u64) -> Option<Self> {
                u8::try_from(raw).ok().and_then($ty::$from)
            }
        }
    };
}
enum_field!(WeightFormat, Format, code, from_code);
enum_field!(DType, DType, code, from_code);
enum_field!(VecOp, VecOp, code, from_code);

/// What a fused reduction does with the squares of the stored results of row `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedMode {
    /// No reduction.
    None,
    /// `RED[t] = sum of squares` (starts a new sum).
    Set,
    /// `RED[t] += sum of squares` (continues a sum over several instructions).
    Add,
}

impl RedMode {
    pub const ALL: [RedMode; 3] = [RedMode::None, RedMode::Set, RedMode::Add];
    pub fn name(self) -> &'static str {
        match self {
            RedMode::None => "none",
            RedMode::Set => "set",
            RedMode::Add => "add",
        }
    }
}

impl Field for RedMode {
    const KIND: FieldKind = FieldKind::Red;
    fn to_raw(&self) -> u64 {
        *self as u64
    }
    fn from_raw(raw: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }
}

/// Which elements RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): GGUF llama ("normal").
    Normal,
    /// Pairs (i, i + head_dim/2): GPT-NeoX.
    Neox,
}

impl RopeStyle {
    pub const ALL: [RopeStyle; 2] = [RopeStyle::Normal, RopeStyle::Neox];
    pub fn name(self) -> &'static str {
        match self {
            RopeStyle::Normal => "normal",
            RopeStyle::Neox => "neox",
        }
    }
}

impl Field for RopeStyle {
    const KIND: FieldKind = FieldKind::Rope;
    fn to_raw(&self) -> u64 {
        *self as u64
    }
    fn from_raw(raw: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }
}

macro_rules! csrs {
    ($( $(#[doc = $doc:literal])* $variant:ident = $code:literal, $name:literal; )*) => {
        /// Configuration registers written by `csrw` and read by the instructions that need more
        /// parameters than fit their word.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Csr { $( $(#[doc = $doc])* $variant = $code ),* }

        impl Csr {
            pub const ALL: &'static [Csr] = &[$(Csr::$variant),*];
            pub fn name(self) -> &'static str {
                match self { $(Csr::$variant => $name),* }
            }
            pub fn doc(self) -> &'static str {
                match self { $(Csr::$variant => concat!($($doc),*)),* }
            }
        }
    };
}

csrs! {
    /// Head dimension of `attn` / `kvappend` (elements, a multiple of 16, at most 1023).
    HeadDim = 0, "head_dim";
    /// Lines between the K (or V) rows of consecutive positions.
    KvStride = 1, "kv_stride";
    /// FP32 bits of the attention score scale (usually 1/sqrt(head_dim)).
    AttnScale = 2, "attn_scale";
    /// Line address of this layer's KV presence bytes (one per position); 0xFFFFFFFF: no presence tracking.
    KvPresent = 3, "kv_present";
    /// FP32 bits of the immediate of `vop scale`.
    VScale = 4, "vscale";
    /// Input height of `conv`.
    ConvH = 5, "conv_h";
    /// Input width of `conv`.
    ConvW = 6, "conv_w";
    /// Input channels of `conv`.
    ConvCin = 7, "conv_cin";
    /// Output channels of `conv`.
    ConvCout = 8, "conv_cout";
    /// Kernel size of `conv`.
    ConvK = 9, "conv_k";
    /// Stride of `conv`.
    ConvStride = 10, "conv_stride";
    /// Zero padding of `conv`.
    ConvPad = 11, "conv_pad";
    /// Line address of this layer's KV row index (a u32 row per position: where `attn` and `kvappend` find
    /// the position's K and V); 0xFFFFFFFF: the row is the position.
    KvIndex = 12, "kv_index";
    /// KV heads per `attn` (consecutive heads from `kvh`, their rows side by side); 0 counts as 1.
    AttnHeads = 13, "attn_heads";
}

impl Field for Csr {
    const KIND: FieldKind = FieldKind::Csr;
    fn to_raw(&self) -> u64 {
        *self as u64
    }
    fn from_raw(raw: u64) -> Option<Self> {
        Csr::ALL.iter().copied().find(|c| *c as u64 == raw)
    }
}

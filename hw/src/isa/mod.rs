//! The OPU instruction set.
//!
//! Every instruction is one 128-bit word, stored little-endian (16 bytes) in device memory; instruction `i`
//! of a program sits at `PROG_BASE + 16 * i`. Bits 7:0 hold the opcode; the instruction's fields follow from
//! bit 8 upward in the order [`SPECS`] lists them; all remaining bits are reserved and must be zero. Opcode 0
//! is not an instruction, so zeroed memory traps.
//!
//! The whole instruction set is declared once, in the `isa!` invocation below: the [`Instr`] enum, the
//! field layout used by [`encode`]/[`decode`], the assembler and disassembler ([`asm`]) and the table in
//! docs/isa.md (kept equal by a test) all come from it. docs/isa.md gives each instruction's semantics.

pub mod asm;
mod fields;

pub use asm::{assemble, disassemble, AsmError};
pub use fields::{Csr, F32Bits, Field, FieldKind, Pred, RedMode, Reg, RopeStyle};

use crate::numerics::vector::{DType, VecOp};
use crate::numerics::WeightFormat;

/// Bytes of one encoded instruction.
pub const INSTR_BYTES: usize = 16;
/// Device-memory addresses in instructions count 32-byte lines (one 256-bit memory word).
pub const LINE_BYTES: u64 = 32;
/// Scratchpad addresses in instructions count 4-byte words.
pub const SPM_WORD_BYTES: u32 = 4;
/// Scalar registers r0..r15 (r0 reads as zero).
pub const NUM_REGS: usize = 16;
/// Predicate registers p0..p7.
pub const NUM_PREDS: usize = 8;
/// Entries of the reduction file (one per token of a batch): RED[0..64].
pub const NUM_RED: usize = 64;

/// Query heads an `attn` may hold, each KV head's `group` padded to even (the attention unit's softmax
/// rows and query buffers: a score pass takes two query heads of one KV head).
pub const ATTN_MAX_PADDED_HEADS: u64 = 16;
/// K (V) elements an `attn` reads per position over its KV heads (the attention unit's K and V rings hold
/// four positions of them).
pub const ATTN_MAX_ROW_ELEMS: u64 = 1024;

/// Whether an `attn` over `heads` KV heads (the `attn_heads` CSR, 0 counting as 1) of `group` query heads
/// each, of `head_dim`, fits the attention unit (docs/isa.md, `attn`); else it traps BAD_OPERAND.
pub fn attn_heads_fit(heads: u64, group: u64, head_dim: u64) -> bool {
    let heads = heads.max(1);
    heads.saturating_mul(2 * group.div_ceil(2)) <= ATTN_MAX_PADDED_HEADS && heads.saturating_mul(head_dim) <= ATTN_MAX_ROW_ELEMS
}

/// Whether a `kvappend` of `heads` KV heads (the `attn_heads` CSR, 0 counting as 1) of `head_dim` fits:
/// the heads an `attn` of one query head per KV head takes (docs/isa.md, `kvappend`); else it traps
/// BAD_OPERAND.
pub fn kvappend_heads_fit(heads: u64, head_dim: u64) -> bool {
    attn_heads_fit(heads, 1, head_dim)
}

/// Layout of one field of an instruction.
#[derive(Clone, Copy, Debug)]
pub struct FieldSpec {
    pub name: &'static str,
    pub bits: u32,
    pub kind: FieldKind,
}

/// Layout and documentation of one instruction.
#[derive(Clone, Copy, Debug)]
pub struct OpSpec {
    pub opcode: u8,
    pub mnemonic: &'static str,
    pub class: &'static str,
    pub summary: &'static str,
    pub fields: &'static [FieldSpec],
}

/// The execution units of the overlay, in the order of the `BUSY_*` registers (docs/registers.md). Control
/// and scalar instructions run in the controller itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecUnit {
    /// `load store load2d store2d`.
    Dma = 0,
    /// The weight stream and the PE array: `matmul` (and `conv maxpool`).
    Matrix = 1,
    /// The vector lanes: `vop rmsnorm rope argmax`.
    Vector = 2,
    /// The attention unit with the KV history buffer and the router datapath: `attn kvappend route`.
    Attention = 3,
}

impl ExecUnit {
    pub const ALL: [ExecUnit; 4] = [ExecUnit::Dma, ExecUnit::Matrix, ExecUnit::Vector, ExecUnit::Attention];

    pub fn name(self) -> &'static str {
        match self {
            ExecUnit::Dma => "dma",
            ExecUnit::Matrix => "matrix",
            ExecUnit::Vector => "vector",
            ExecUnit::Attention => "attention",
        }
    }
}

impl OpSpec {
    /// Bits used by opcode and fields.
    pub fn used_bits(&self) -> u32 {
        8 + self.fields.iter().map(|f| f.bits).sum::<u32>()
    }

    /// The unit that executes the instruction (`None`: the controller). By class, except `route`: its class
    /// is "matrix" (the router sits beside the PE array), but it runs on the router's FP16 dot-product
    /// datapath, which the attention unit scores with.
    pub fn unit(&self) -> Option<ExecUnit> {
        if self.mnemonic == "route" {
            return Some(ExecUnit::Attention);
        }
        match self.class {
            "dma" => Some(ExecUnit::Dma),
            "matrix" | "cnn" => Some(ExecUnit::Matrix),
            "vector" => Some(ExecUnit::Vector),
            "attention" => Some(ExecUnit::Attention),
            _ => None,
        }
    }
}

/// Encoding and decoding errors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IsaError {
    #[error("unknown opcode {opcode:#04x} in instruction word {word:#034x}")]
    UnknownOpcode { opcode: u8, word: u128 },
    #[error("`{mnemonic}`: reserved bits {mask:#x} are not zero in instruction word {word:#034x}")]
    ReservedBits { mnemonic: &'static str, mask: u128, word: u128 },
    #[error("`{mnemonic}`: field `{field}` has invalid value {value} ({expected})")]
    BadField { mnemonic: &'static str, field: &'static str, value: u64, expected: &'static str },
    #[error("`{mnemonic}`: field `{field}` = {value} does not fit its {bits} bits")]
    FieldOverflow { mnemonic: &'static str, field: &'static str, value: u64, bits: u32 },
    #[error("program length {0} bytes is not a multiple of 16")]
    Truncated(usize),
    #[error("instruction {index}: {source}")]
    At { index: usize, source: Box<IsaError> },
}

macro_rules! isa {
    ($(
        $(#[doc = $doc:literal])*
        $op:literal $class:literal $variant:ident $mn:literal { $( $f:ident : $t:ty = $w:literal ),* $(,)? }
    )*) => {
        /// One decoded instruction. Field meanings: docs/isa.md.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Instr {
            $( $(#[doc = $doc])* $variant { $( $f: $t ),* } ),*
        }

        /// Every instruction's layout, in opcode order.
        pub const SPECS: &[OpSpec] = &[
            $( OpSpec {
                opcode: $op,
                mnemonic: $mn,
                class: $class,
                summary: concat!($($doc),*),
                fields: &[ $( FieldSpec { name: stringify!($f), bits: $w, kind: <$t as Field>::KIND } ),* ],
            } ),*
        ];

        impl Instr {
            pub fn opcode(&self) -> u8 {
                match self { $( Instr::$variant { .. } => $op ),* }
            }

            /// Raw field values in layout order.
            pub fn raw_fields(&self) -> Vec<u64> {
                match self { $( Instr::$variant { $( $f ),* } => vec![ $( Field::to_raw($f) ),* ] ),* }
            }

            /// Builds an instruction from raw field values; `Err(i)` names the first field whose value is
            /// not valid for its type.
            pub fn from_raw_fields(opcode: u8, raw: &[u64]) -> Option<Result<Self, usize>> {
                match opcode {
                    $( $op => Some(#[allow(unused_labels)] 'build: {
                        #[allow(unused_mut)]
                        let mut _i = 0usize;
                        Ok(Instr::$variant { $( $f: {
                            let Some(v) = <$t as Field>::from_raw(raw[_i]) else { break 'build Err(_i) };
                            _i += 1;
                            v
                        } ),* })
                    }), )*
                    _ => None,
                }
            }
        }
    };
}

isa! {
    /// Stops the program: STATUS.done is set and the doorbell's run ends.
    0x01 "control" End "end" {}
    /// Waits until every earlier instruction has finished (DMA, PE array, vector unit).
    0x02 "control" Barrier "barrier" {}
    /// `r[rd] = imm`.
    0x03 "scalar" Seti "seti" { rd: Reg = 4, imm: u32 = 32 }
    /// `r[rd] = r[rs] + imm` (wrapping; imm may be read as two's complement).
    0x04 "scalar" Addi "addi" { rd: Reg = 4, rs: Reg = 4, imm: u32 = 32 }
    /// `r[rd] = r[rs] * imm` (wrapping).
    0x05 "scalar" Muli "muli" { rd: Reg = 4, rs: Reg = 4, imm: u32 = 32 }
    /// `csr = r[rs] + imm` (wrapping).
    0x06 "scalar" Csrw "csrw" { csr: Csr = 8, rs: Reg = 4, imm: u32 = 32 }
    /// If `p[pred]` is set, skips the next `count` instructions (predicated skip of a block).
    0x07 "control" Skip "skip" { pred: Pred = 3, count: u32 = 16 }
    /// `r[rd] =` the 32-bit little-endian word at scratchpad word `spm` (e.g. a token id of a prefill batch).
    0x08 "scalar" Ldr "ldr" { rd: Reg = 4, spm: u32 = 20 }
    /// DMA device memory -> scratchpad: `bytes` from line `mem + r[idx] * stride` to word `spm`.
    0x10 "dma" Load "load" { spm: u32 = 20, mem: u32 = 32, bytes: u32 = 24, idx: Reg = 4, stride: u32 = 32 }
    /// DMA scratchpad -> device memory: `bytes` from word `spm` to line `mem + r[idx] * stride`.
    0x11 "dma" Store "store" { spm: u32 = 20, mem: u32 = 32, bytes: u32 = 24, idx: Reg = 4, stride: u32 = 32 }
    /// Strided DMA device memory -> scratchpad: `rows` rows of `row_bytes`.
    0x12 "dma" Load2d "load2d" { spm: u32 = 20, mem: u32 = 32, row_bytes: u32 = 16, rows: u32 = 12, mem_stride: u32 = 20, spm_stride: u32 = 20 }
    /// Strided DMA scratchpad -> device memory.
    0x13 "dma" Store2d "store2d" { spm: u32 = 20, mem: u32 = 32, row_bytes: u32 = 16, rows: u32 = 12, mem_stride: u32 = 20, spm_stride: u32 = 20 }
    /// Hybrid matrix x vectors: `ntok` FP16 vectors of `cols` at `src` times the `rows x cols` matrix
    /// streamed from line `w`, results at `dst`; `acc` adds the old `dst`; `red` feeds sums of squares.
    0x20 "matrix" Matmul "matmul" { fmt: WeightFormat = 3, out: DType = 1, acc: bool = 1, red: RedMode = 2, ntok: u32 = 7, dst: u32 = 20, src: u32 = 20, rows: u32 = 16, cols: u32 = 16, w: u32 = 32 }
    /// Router: two FP16 logits (execute, skip) of the FP16 vector at `src`; `p[pd] = skip > execute`;
    /// with `mark`, records the decision in the KV presence bytes at position `r[pos]`.
    0x21 "matrix" Route "route" { pd: Pred = 3, mark: bool = 1, pos: Reg = 4, src: u32 = 20, w: u32 = 32, cols: u32 = 16 }
    /// Element-wise vector op over `rows` rows of `n` elements; `red` feeds the squares of the stored results.
    0x30 "vector" Vop "vop" { op: VecOp = 4, dd: DType = 1, da: DType = 1, db: DType = 1, red: RedMode = 2, rows: u32 = 7, dst: u32 = 20, a: u32 = 20, b: u32 = 20, n: u32 = 16 }
    /// RMSNorm apply: `dst = src * rsqrt(RED[row] / n + eps) * g` for `rows` rows of `n`.
    0x31 "vector" Rmsnorm "rmsnorm" { dd: DType = 1, ds: DType = 1, rows: u32 = 7, dst: u32 = 20, src: u32 = 20, g: u32 = 20, n: u32 = 16, eps: F32Bits = 32 }
    /// Rotary embedding of `rows` rows of `heads` FP16 heads of `head_dim`, with (cos, sin) FP32 pairs at `table`.
    0x32 "vector" Rope "rope" { style: RopeStyle = 1, heads: u32 = 8, head_dim: u32 = 10, rows: u32 = 7, dst: u32 = 20, src: u32 = 20, table: u32 = 20 }
    /// Index of the largest of `n` values at `src` (ties: lowest index), written to word `dst` and `r[rd]`.
    0x33 "vector" Argmax "argmax" { dt: DType = 1, rd: Reg = 4, dst: u32 = 20, src: u32 = 20, n: u32 = 24 }
    /// Attention of `group` FP16 query heads at `q` (sharing KV head `kvh`) over positions `0..r[len]` of
    /// the K/V rows at lines `k`, `v`, with online softmax and the KV history buffer; output at `dst`.
    0x40 "attention" Attn "attn" { group: u32 = 4, kvh: u32 = 8, len: Reg = 4, dst: u32 = 20, q: u32 = 20, k: u32 = 32, v: u32 = 32 }
    /// KV append: stores the K and V (FP16, `attn_heads` x `head_dim`) of KV heads side by side for position
    /// `r[pos]` and marks it present.
    0x41 "attention" Kvappend "kvappend" { pos: Reg = 4, ksrc: u32 = 20, vsrc: u32 = 20, k: u32 = 32, v: u32 = 32 }
    /// Fixed-point convolution (shape in the CONV_* CSRs), weights and bias at line `w`, output requantized
    /// by `shift`, optional ReLU.
    0x50 "cnn" Conv "conv" { relu: bool = 1, shift: u32 = 6, dst: u32 = 20, src: u32 = 20, w: u32 = 32 }
    /// Fixed-point max-pooling of an `h x w x c` i16 tensor, window `k`, `stride`.
    0x51 "cnn" Maxpool "maxpool" { k: u32 = 4, stride: u32 = 4, h: u32 = 12, w: u32 = 12, c: u32 = 12, dst: u32 = 20, src: u32 = 20 }
}

/// The layout of `opcode`, if it is an instruction.
pub fn spec(opcode: u8) -> Option<&'static OpSpec> {
    SPECS.iter().find(|s| s.opcode == opcode)
}

/// The layout of the instruction named `mnemonic`.
pub fn spec_by_mnemonic(mnemonic: &str) -> Option<&'static OpSpec> {
    SPECS.iter().find(|s| s.mnemonic == mnemonic)
}

impl Instr {
    pub fn spec(&self) -> &'static OpSpec {
        spec(self.opcode()).expect("every Instr has a spec")
    }

    pub fn mnemonic(&self) -> &'static str {
        self.spec().mnemonic
    }
}

/// Encodes one instruction; fails if a field does not fit its width.
pub fn encode(instr: &Instr) -> Result<u128, IsaError> {
    let spec = instr.spec();
    let mut word = u128::from(spec.opcode);
    let mut at = 8;
    for (f, v) in spec.fields.iter().zip(instr.raw_fields()) {
        if f.bits < 64 && v >> f.bits != 0 {
            return Err(IsaError::FieldOverflow { mnemonic: spec.mnemonic, field: f.name, value: v, bits: f.bits });
        }
        word |= u128::from(v) << at;
        at += f.bits;
    }
    Ok(word)
}

/// Decodes one instruction word.
pub fn decode(word: u128) -> Result<Instr, IsaError> {
    let opcode = word as u8;
    let spec = spec(opcode).ok_or(IsaError::UnknownOpcode { opcode, word })?;
    let used = spec.used_bits();
    if used < 128 && word >> used != 0 {
        let mask = !((1u128 << used) - 1);
        return Err(IsaError::ReservedBits { mnemonic: spec.mnemonic, mask: word & mask, word });
    }
    let mut raw = Vec::with_capacity(spec.fields.len());
    let mut at = 8;
    for f in spec.fields {
        raw.push(((word >> at) & ((1u128 << f.bits) - 1)) as u64);
        at += f.bits;
    }
    Instr::from_raw_fields(opcode, &raw).expect("spec exists").map_err(|i| {
        let f = &spec.fields[i];
        IsaError::BadField { mnemonic: spec.mnemonic, field: f.name, value: raw[i], expected: f.kind.expected() }
    })
}

/// Encodes a program to its bytes (16 per instruction, little-endian).
pub fn encode_program(program: &[Instr]) -> Result<Vec<u8>, IsaError> {
    let mut out = Vec::with_capacity(program.len() * INSTR_BYTES);
    for (index, i) in program.iter().enumerate() {
        let w = encode(i).map_err(|e| IsaError::At { index, source: Box::new(e) })?;
        out.extend_from_slice(&w.to_le_bytes());
    }
    Ok(out)
}

/// Decodes program bytes; the error names the index of the first bad instruction.
pub fn decode_program(bytes: &[u8]) -> Result<Vec<Instr>, IsaError> {
    if !bytes.len().is_multiple_of(INSTR_BYTES) {
        return Err(IsaError::Truncated(bytes.len()));
    }
    bytes
        .chunks_exact(INSTR_BYTES)
        .enumerate()
        .map(|(index, c)| {
            decode(u128::from_le_bytes(c.try_into().unwrap())).map_err(|e| IsaError::At { index, source: Box::new(e) })
        })
        .collect()
}

/// The opcode table as markdown rows (docs/isa.md holds exactly these).
pub fn markdown_table() -> String {
    let mut s = String::from("| opcode | mnemonic | class | fields (bits, from bit 8 up) | bits used |\n|---|---|---|---|---|\n");
    for sp in SPECS {
        let fields: Vec<String> = sp.fields.iter().map(|f| format!("{}:{}", f.name, f.bits)).collect();
        s += &format!("| 0x{:02X} | {} | {} | {} | {} |\n", sp.opcode, sp.mnemonic, sp.class, fields.join(" "), sp.used_bits());
    }
    s
}

#[cfg(test)]
mod tests;

//! Text assembler and disassembler.
//!
//! One instruction per line: the mnemonic, then `field=value` for every field, in any order, separated by
//! spaces or commas. `;` or `#` start a comment. Values: integers in decimal or `0x` hex, registers `r0..r15`,
//! predicates `p0..p7`, names for enumerated fields (`fmt=w4m`, `out=f16`, `op=swiglu`, `red=set`,
//! `csr=attn_scale`, `style=normal`), floats for FP32 immediates (or their bits as `0x...`). Fields of kind
//! bool and red may be left out (they read as 0 / none). Example:
//!
//! ```text
//! load    spm=0 mem=0x100 bytes=1152 idx=r8 stride=36   ; gather the embedding row of the token in r8
//! matmul  fmt=w4m out=f16 ntok=1 dst=0x200 src=0 rows=576 cols=576 w=0x4000 acc=1 red=set
//! end
//! ```
//!
//! [`disassemble`] prints every field, so `assemble(disassemble(p)) == p` for every valid program.

use super::{encode, spec_by_mnemonic, Instr, SPECS};
use std::fmt;

/// An assembly error, with the 1-based line it was found on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsmError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for AsmError {}

/// Assembles program text.
pub fn assemble(text: &str) -> Result<Vec<Instr>, AsmError> {
    let mut program = Vec::new();
    for (i, raw_line) in text.lines().enumerate() {
        let line = i + 1;
        let code = raw_line.split([';', '#']).next().unwrap_or("").trim();
        if code.is_empty() {
            continue;
        }
        program.push(assemble_line(code).map_err(|message| AsmError { line, message })?);
    }
    Ok(program)
}

fn assemble_line(code: &str) -> Result<Instr, String> {
    let mut tokens = code.split(|c: char| c.is_whitespace() || c == ',').filter(|t| !t.is_empty());
    let mnemonic = tokens.next().expect("non-empty line").to_ascii_lowercase();
    let spec = spec_by_mnemonic(&mnemonic).ok_or_else(|| {
        let known: Vec<&str> = SPECS.iter().map(|s| s.mnemonic).collect();
        format!("unknown instruction `{mnemonic}` (known: {})", known.join(", "))
    })?;
    let mut raw: Vec<Option<u64>> = vec![None; spec.fields.len()];
    for tok in tokens {
        let (key, value) = tok
            .split_once('=')
            .ok_or_else(|| format!("`{mnemonic}`: expected `field=value`, found `{tok}`"))?;
        let idx = spec.fields.iter().position(|f| f.name == key).ok_or_else(|| {
            let names: Vec<&str> = spec.fields.iter().map(|f| f.name).collect();
            format!("`{mnemonic}` has no field `{key}` (fields: {})", names.join(", "))
        })?;
        let f = &spec.fields[idx];
        if raw[idx].is_some() {
            return Err(format!("`{mnemonic}`: field `{key}` given twice"));
        }
        let v = f
            .kind
            .parse(value)
            .ok_or_else(|| format!("`{mnemonic}`: field `{key}` = `{value}`: expected {}", f.kind.expected()))?;
        if f.bits < 64 && v >> f.bits != 0 {
            return Err(format!("`{mnemonic}`: field `{key}` = {value} does not fit its {} bits (max {})", f.bits, (1u64 << f.bits) - 1));
        }
        raw[idx] = Some(v);
    }
    let mut values = Vec::with_capacity(raw.len());
    for (f, v) in spec.fields.iter().zip(raw) {
        match v {
            Some(v) => values.push(v),
            None if f.kind.optional() => values.push(0),
            None => return Err(format!("`{mnemonic}`: missing field `{}` ({})", f.name, f.kind.expected())),
        }
    }
    let instr = Instr::from_raw_fields(spec.opcode, &values)
        .expect("spec exists")
        .map_err(|i| format!("`{mnemonic}`: field `{}`: expected {}", spec.fields[i].name, spec.fields[i].kind.expected()))?;
    encode(&instr).map_err(|e| e.to_string())?;
    Ok(instr)
}

/// One instruction as assembly text.
pub fn format_instr(instr: &Instr) -> String {
    let spec = instr.spec();
    let mut s = spec.mnemonic.to_string();
    for (f, v) in spec.fields.iter().zip(instr.raw_fields()) {
        s += &format!(" {}={}", f.name, f.kind.format(v));
    }
    s
}

/// A program as assembly text, one instruction per line.
pub fn disassemble(program: &[Instr]) -> String {
    program.iter().map(|i| format_instr(i) + "\n").collect()
}

/// A listing: the assembly text of each instruction followed by a comment with its pc and encoded word
/// (still valid input for [`assemble`]).
pub fn listing(program: &[Instr]) -> String {
    program
        .iter()
        .enumerate()
        .map(|(pc, i)| {
            let word = encode(i).map(|w| format!("{w:032x}")).unwrap_or_else(|e| e.to_string());
            format!("{:<100} ; {pc:5}  {word}\n", format_instr(i))
        })
        .collect()
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_instr(self))
    }
}

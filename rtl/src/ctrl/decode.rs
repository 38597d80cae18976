//! The decoder's tables, built from the ISA of `opu-hw` (`opu_hw::isa::SPECS`): the RTL never restates an
//! opcode, a field offset or a valid-code range.
//!
//! Per opcode the decoder reads one entry of a ROM ([`rom`]): whether the opcode exists on this RTL, the
//! bits the instruction uses (everything above is reserved and must be zero), the unit that executes it,
//! up to two enumerated fields whose codes must be checked (offset, width, largest valid code, found by
//! probing `Instr::from_raw_fields`, the contract's own validity rule), and the offsets of the scalar
//! register the instruction reads, of the register it writes and of the predicate it writes (0 = none).

use opu_hw::isa::{spec_by_mnemonic, ExecUnit, FieldKind, Instr, OpSpec, SPECS};
use std::collections::BTreeMap;

/// Which part of the overlay executes an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Unit {
    /// The controller itself: control and scalar instructions.
    Core = 0,
    /// DMA engines: `load store load2d store2d`.
    Dma = 1,
    /// Weight stream and PE array: `matmul`.
    Matrix = 2,
    /// Vector lanes and reductions: `vop rmsnorm rope argmax`.
    Vector = 3,
    /// Attention unit with the KV history buffer and the router datapath: `attn kvappend route`.
    Attention = 4,
}

/// The units an instruction can be issued to (everything but the core), in issue-port order.
pub const ISSUE_UNITS: [Unit; 4] = [Unit::Dma, Unit::Matrix, Unit::Vector, Unit::Attention];

impl Unit {
    /// The unit of an ISA class; `None` for classes this RTL does not implement. `cnn` (`conv`, `maxpool`)
    /// issues on the matrix unit's port, as the contract's `ExecUnit::Matrix` says; the top hands it to the
    /// CNN unit (`cnn::Cnn`).
    pub fn of_class(class: &str) -> Option<Unit> {
        Some(match class {
            "control" | "scalar" => Unit::Core,
            "dma" => Unit::Dma,
            "matrix" | "cnn" => Unit::Matrix,
            "vector" => Unit::Vector,
            "attention" => Unit::Attention,
            _ => return None,
        })
    }

    /// The unit that executes `spec` on this RTL (`OpSpec::unit` of the contract; `None` for classes this RTL
    /// does not implement yet).
    pub fn of_spec(spec: &OpSpec) -> Option<Unit> {
        Unit::of_class(spec.class)?;
        Some(match spec.unit() {
            None => Unit::Core,
            Some(ExecUnit::Dma) => Unit::Dma,
            Some(ExecUnit::Matrix) => Unit::Matrix,
            Some(ExecUnit::Vector) => Unit::Vector,
            Some(ExecUnit::Attention) => Unit::Attention,
        })
    }

    /// Bit of the unit in the one-hot issue bus (`Core` has none).
    pub fn issue_bit(self) -> Option<usize> {
        ISSUE_UNITS.iter().position(|&u| u == self)
    }
}

/// Where a field sits in the 128-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLoc {
    pub offset: u32,
    pub bits: u32,
}

/// The location of field `name` of instruction `mnemonic`. Panics if there is none: the RTL is built from
/// the ISA, so a missing field is a bug in this crate.
pub fn field(mnemonic: &str, name: &str) -> FieldLoc {
    let spec = spec_by_mnemonic(mnemonic).unwrap_or_else(|| panic!("no instruction `{mnemonic}` in the ISA"));
    field_of(spec, name).unwrap_or_else(|| panic!("`{mnemonic}` has no field `{name}`"))
}

fn field_of(spec: &OpSpec, name: &str) -> Option<FieldLoc> {
    let mut at = 8;
    for f in spec.fields {
        if f.name == name {
            return Some(FieldLoc { offset: at, bits: f.bits });
        }
        at += f.bits;
    }
    None
}

/// The opcode of `mnemonic`.
pub fn opcode(mnemonic: &str) -> u8 {
    spec_by_mnemonic(mnemonic).unwrap_or_else(|| panic!("no instruction `{mnemonic}` in the ISA")).opcode
}

/// An enumerated field whose code the decoder checks: `code <= max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnumCheck {
    pub offset: u32,
    pub bits: u32,
    pub max: u32,
}

/// What the decoder knows about one opcode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpInfo {
    /// The opcode is an instruction this RTL executes.
    pub known: bool,
    /// Bits used by opcode and fields; the rest must be zero.
    pub used_bits: u32,
    pub unit: u8,
    /// Enumerated fields to check (a `bits` of 0 checks nothing).
    pub checks: [EnumCheck; 2],
    /// Offset of the register field whose value travels with the instruction to its unit (`idx` of
    /// load/store, `pos` of route/kvappend, `len` of attn); 0 = none.
    pub reads_reg: u32,
    /// Offset of the register the unit writes back (`rd` of argmax; scalar instructions are the core's own);
    /// 0 = none.
    pub writes_reg: u32,
    /// Offset of the predicate the unit writes back (`pd` of route); 0 = none.
    pub writes_pred: u32,
}

/// The largest valid code of field `i` of `spec` (all other fields zero), or `None` if every code of its
/// width is valid. Panics if the valid codes are not `0..=max` (the ROM stores a bound).
fn enum_max(spec: &OpSpec, i: usize) -> Option<u32> {
    let f = &spec.fields[i];
    if f.bits > 16 {
        return None;
    }
    let valid: Vec<bool> = (0..1u64 << f.bits)
        .map(|v| {
            let mut raw = vec![0u64; spec.fields.len()];
            raw[i] = v;
            Instr::from_raw_fields(spec.opcode, &raw).expect("spec exists").is_ok()
        })
        .collect();
    let n_valid = valid.iter().take_while(|&&ok| ok).count();
    assert!(valid[n_valid..].iter().all(|ok| !ok), "`{}.{}`: valid codes are not a range 0..=max", spec.mnemonic, f.name);
    (n_valid < valid.len()).then(|| n_valid as u32 - 1)
}

/// The decoder's view of `opcode`.
pub fn op_info(opcode: u8) -> OpInfo {
    let Some(spec) = SPECS.iter().find(|s| s.opcode == opcode) else { return OpInfo::default() };
    let Some(unit) = Unit::of_spec(spec) else { return OpInfo::default() };
    let mut checks = [EnumCheck::default(); 2];
    let mut n_checks = 0;
    let mut info = OpInfo { known: true, used_bits: spec.used_bits(), unit: unit as u8, ..OpInfo::default() };
    let mut at = 8;
    for (i, f) in spec.fields.iter().enumerate() {
        if let Some(max) = enum_max(spec, i) {
            assert!(n_checks < 2, "`{}` has more than two enumerated fields to check", spec.mnemonic);
            checks[n_checks] = EnumCheck { offset: at, bits: f.bits, max };
            n_checks += 1;
        }
        if unit != Unit::Core {
            match (f.kind, f.name) {
                (FieldKind::Reg, "rd") => info.writes_reg = at,
                (FieldKind::Reg, _) => info.reads_reg = at,
                (FieldKind::Pred, _) => info.writes_pred = at,
                _ => {}
            }
        }
        at += f.bits;
    }
    info.checks = checks;
    info
}

/// Layout of a ROM entry (bit offsets), for the decoder's `get_bits`.
pub mod entry {
    pub const KNOWN: usize = 0;
    pub const USED: usize = 1; // 8 bits
    pub const UNIT: usize = 9; // 3 bits
    pub const C0_OFF: usize = 12; // 7 bits
    pub const C0_MASK: usize = 19; // 16 bits: (1 << bits) - 1
    pub const C0_MAX: usize = 35; // 16 bits
    pub const C1_OFF: usize = 51;
    pub const C1_MASK: usize = 58;
    pub const C1_MAX: usize = 74;
    pub const READS_REG: usize = 90; // 7 bits
    pub const WRITES_REG: usize = 97; // 7 bits
    pub const WRITES_PRED: usize = 104; // 7 bits
    /// Width of an entry.
    pub const BITS: usize = 111;
}

/// The packed ROM entry of `info` ([`entry`] layout). An unchecked slot has mask 0 and max 0 (always valid).
pub fn pack(info: &OpInfo) -> u128 {
    let mut e = u128::from(info.known) << entry::KNOWN;
    e |= u128::from(info.used_bits) << entry::USED;
    e |= u128::from(info.unit) << entry::UNIT;
    for (c, (off, mask, max)) in info.checks.iter().zip([
        (entry::C0_OFF, entry::C0_MASK, entry::C0_MAX),
        (entry::C1_OFF, entry::C1_MASK, entry::C1_MAX),
    ]) {
        if c.bits > 0 {
            e |= u128::from(c.offset) << off;
            e |= ((1u128 << c.bits) - 1) << mask;
            e |= u128::from(c.max) << max;
        }
    }
    e |= u128::from(info.reads_reg) << entry::READS_REG;
    e |= u128::from(info.writes_reg) << entry::WRITES_REG;
    e |= u128::from(info.writes_pred) << entry::WRITES_PRED;
    e
}

/// The decoder ROM: one entry per opcode that exists (the others read as 0: unknown).
pub fn rom() -> BTreeMap<u8, u128> {
    (0..=255u8).map(|op| (op, pack(&op_info(op)))).filter(|(_, e)| *e != 0).collect()
}

/// Reference of what the RTL decoder accepts: `opu_hw::isa::decode` succeeds and the class is one this RTL
/// executes.
pub fn accepts(word: u128) -> bool {
    match opu_hw::isa::decode(word) {
        Ok(i) => Unit::of_class(i.spec().class).is_some(),
        Err(_) => false,
    }
}

/// The same decision from the ROM alone, as the hardware computes it (tested equal to [`accepts`]).
pub fn rom_accepts(rom: &BTreeMap<u8, u128>, word: u128) -> bool {
    let Some(&e) = rom.get(&(word as u8)) else { return false };
    let get = |at: usize, bits: usize| ((e >> at) & ((1u128 << bits) - 1)) as u32;
    let used = get(entry::USED, 8);
    if used < 128 && word >> used != 0 {
        return false;
    }
    [(entry::C0_OFF, entry::C0_MASK, entry::C0_MAX), (entry::C1_OFF, entry::C1_MASK, entry::C1_MAX)].iter().all(
        |&(off, mask, max)| {
            let code = ((word >> get(off, 7)) as u32) & get(mask, 16);
            code <= get(max, 16)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use opu_hw::isa::encode;

    #[test]
    fn checks_cover_every_enumerated_field_with_invalid_codes() {
        let m = op_info(opcode("matmul"));
        assert!(m.known);
        assert_eq!(m.checks[0], EnumCheck { offset: field("matmul", "fmt").offset, bits: 3, max: 3 });
        assert_eq!(m.checks[1], EnumCheck { offset: field("matmul", "red").offset, bits: 2, max: 2 });
        let c = op_info(opcode("csrw"));
        assert_eq!(c.checks[0].offset, field("csrw", "csr").offset);
        assert_eq!(c.checks[0].max as usize, opu_hw::isa::Csr::ALL.len() - 1);
        let v = op_info(opcode("vop"));
        assert_eq!(v.checks[0].max, 5);
        assert_eq!(op_info(opcode("load")).reads_reg, field("load", "idx").offset);
        assert_eq!(op_info(opcode("attn")).reads_reg, field("attn", "len").offset);
        assert_eq!(op_info(opcode("argmax")).writes_reg, field("argmax", "rd").offset);
        assert_eq!(op_info(opcode("route")).writes_pred, field("route", "pd").offset);
        assert_eq!(op_info(opcode("route")).reads_reg, field("route", "pos").offset);
        assert!(op_info(opcode("conv")).known);
        assert!(op_info(opcode("maxpool")).known);
        assert!(!op_info(0).known);
    }

    #[test]
    fn rom_decision_equals_the_isa_decoder() {
        let rom = rom();
        let mut rng = crate::testing::Rng(0xdec0_de01);
        let mut words = Vec::new();
        for spec in SPECS {
            // valid words with random fields, then each with a reserved bit or a field flipped
            for _ in 0..200 {
                let mut w = u128::from(spec.opcode);
                let mut at = 8;
                for f in spec.fields {
                    w |= u128::from(rng.next_u64() & ((1u64 << f.bits.min(63)) - 1)) << at;
                    at += f.bits;
                }
                words.push(w);
                words.push(w ^ (1u128 << (8 + rng.below(120))));
            }
        }
        for _ in 0..20_000 {
            words.push(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()));
        }
        let mut accepted = 0;
        for &w in &words {
            assert_eq!(rom_accepts(&rom, w), accepts(w), "word {w:#034x}");
            accepted += usize::from(accepts(w));
        }
        assert!(accepted > 1000 && accepted < words.len() / 2 + 5000, "{accepted} of {}", words.len());
        // every instruction the assembler can write decodes
        let seti = opu_hw::isa::Instr::Seti { rd: opu_hw::isa::Reg(3), imm: 7 };
        assert!(rom_accepts(&rom, encode(&seti).unwrap()));
    }

    #[test]
    fn entry_fields_fit() {
        for op in 0..=255u8 {
            let i = op_info(op);
            assert!(i.used_bits <= 128 && i.reads_reg < 128 && i.writes_reg < 128 && i.writes_pred < 128);
            assert!(pack(&i) >> entry::BITS == 0);
        }
    }
}

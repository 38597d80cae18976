//! The MMIO register map: one table, read by the hardware, the simulators, the driver and docs/registers.md
//! (a test keeps the doc equal to [`REGISTERS`]).
//!
//! All registers are 32 bits at 4-byte aligned byte offsets of BAR 0. 64-bit values are LO/HI pairs, the
//! low word first; reading LO latches HI (so a pair read while the counter runs is consistent).

use std::fmt;

pub const ID: u32 = 0x000;
pub const VERSION: u32 = 0x004;
pub const CONFIG_HASH_LO: u32 = 0x008;
pub const CONFIG_HASH_HI: u32 = 0x00C;
pub const CONTROL: u32 = 0x010;
pub const STATUS: u32 = 0x014;
pub const DOORBELL: u32 = 0x018;
pub const IRQ_STATUS: u32 = 0x01C;
pub const PROG_BASE_LO: u32 = 0x020;
pub const PROG_BASE_HI: u32 = 0x024;
pub const PROG_LEN: u32 = 0x028;
pub const WATCHDOG: u32 = 0x02C;
pub const ARG0: u32 = 0x040;
pub const CYCLES_LO: u32 = 0x080;
pub const INSTRET_LO: u32 = 0x088;
pub const BYTES_READ_LO: u32 = 0x090;
pub const BYTES_WRITTEN_LO: u32 = 0x098;
pub const MACS_LO: u32 = 0x0A0;
pub const STALL_CYCLES_LO: u32 = 0x0A8;
pub const SKIPPED_BLOCKS: u32 = 0x0B0;
pub const KV_HISTORY_HITS: u32 = 0x0B4;
pub const KV_HISTORY_MISSES: u32 = 0x0B8;
pub const ERROR_CODE: u32 = 0x0C0;
pub const ERROR_PC: u32 = 0x0C4;
pub const ERROR_INFO_LO: u32 = 0x0C8;
/// Busy cycles of unit `u` (`isa::ExecUnit as u32`): a 64-bit pair at `BUSY_LO + 8 u`.
pub const BUSY_LO: u32 = 0x0D0;
pub const CFG_PE_LANES: u32 = 0x100;
pub const CFG_DOT_WIDTH: u32 = 0x104;
pub const CFG_SCRATCHPAD_BYTES: u32 = 0x108;
pub const CFG_KV_HISTORY_SLOTS: u32 = 0x10C;
/// Debug window: scalar register `r[i]` at `DBG_R0 + 4 i`, the predicates, CSR `c` at `DBG_CSR0 + 4 c`, as the
/// last run left them (co-simulation compares them between the simulators and the RTL).
pub const DBG_R0: u32 = 0x200;
pub const DBG_PRED: u32 = 0x240;
pub const DBG_CSR0: u32 = 0x280;
/// Number of CSRs in the debug window (`isa::Csr` codes 0..DBG_CSRS).
pub const DBG_CSRS: u32 = crate::isa::Csr::ALL.len() as u32;
/// Bytes of the register window: every offset of the map is below this (the RTL decodes 12 address bits).
pub const MAP_BYTES: u32 = 0x1000;

/// Value of the `ID` register: "OPU1" in ASCII.
pub const ID_VALUE: u32 = 0x4F50_5531;
/// Register-map / ISA version: major in bits 31:16, minor in 15:0.
/// 2.0: `matmul` weights lie interleaved by lane (`weight_layout`); 1.0 had them row after row.
pub const VERSION_VALUE: u32 = 2 << 16;
/// Number of argument registers; `ARGn` initializes scalar register `r(8+n)` at the doorbell.
pub const NUM_ARGS: u32 = 8;
/// `WATCHDOG` after reset: 2^24 cycles (75 ms at 225 MHz) without progress.
pub const WATCHDOG_DEFAULT: u32 = 1 << 24;
/// Conventional argument assignments used by the compiler and runtime.
pub const ARG_TOKEN: u32 = 0;
pub const ARG_POS: u32 = 1;
pub const ARG_NTOK: u32 = 2;

pub mod control {
    /// Raise the interrupt on completion or error.
    pub const IRQ_ENABLE: u32 = 1 << 0;
    /// Abort any run and clear status, counters and error registers (self-clearing).
    pub const SOFT_RESET: u32 = 1 << 1;
}
pub mod status {
    pub const BUSY: u32 = 1 << 0;
    pub const DONE: u32 = 1 << 1;
    pub const ERROR: u32 = 1 << 2;
}
pub mod irq {
    pub const DONE: u32 = 1 << 0;
    pub const ERROR: u32 = 1 << 1;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Ro,
    /// Read / write.
    Rw,
    /// Write only (reads return 0).
    Wo,
    /// Read; write 1 to clear a bit.
    W1c,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Rw => "RW",
            Access::Wo => "WO",
            Access::W1c => "W1C",
        }
    }
}

/// One register of the map.
#[derive(Clone, Copy, Debug)]
pub struct Register {
    pub name: &'static str,
    pub offset: u32,
    pub access: Access,
    pub description: &'static str,
}

macro_rules! reg {
    ($name:literal, $off:expr, $acc:ident, $desc:literal) => {
        Register { name: $name, offset: $off, access: Access::$acc, description: $desc }
    };
}

/// The whole map, in offset order.
pub const REGISTERS: &[Register] = &[
    reg!("ID", ID, Ro, "0x4F505531 (\"OPU1\"): identifies an OPU overlay"),
    reg!("VERSION", VERSION, Ro, "register map / ISA version: major in 31:16, minor in 15:0 (2.0)"),
    reg!("CONFIG_HASH_LO", CONFIG_HASH_LO, Ro, "low word of the overlay config hash (OverlayConfig::hash)"),
    reg!("CONFIG_HASH_HI", CONFIG_HASH_HI, Ro, "high word of the overlay config hash"),
    reg!("CONTROL", CONTROL, Rw, "bit 0 IRQ_ENABLE; bit 1 SOFT_RESET (self-clearing: aborts a run, clears status, counters, errors)"),
    reg!("STATUS", STATUS, Ro, "bit 0 BUSY; bit 1 DONE (last run reached END); bit 2 ERROR (last run trapped)"),
    reg!("DOORBELL", DOORBELL, Wo, "write 1: clear DONE/ERROR and counters, load r8..r15 from ARG0..ARG7, start at PROG_BASE"),
    reg!("IRQ_STATUS", IRQ_STATUS, W1c, "bit 0 done, bit 1 error; the interrupt line is high while a bit is set and IRQ_ENABLE"),
    reg!("PROG_BASE_LO", PROG_BASE_LO, Rw, "byte address of instruction 0 in device memory, low word (16-byte aligned)"),
    reg!("PROG_BASE_HI", PROG_BASE_HI, Rw, "byte address of instruction 0, high word"),
    reg!("PROG_LEN", PROG_LEN, Rw, "number of instructions; fetching at pc >= PROG_LEN traps with PC_OUT_OF_RANGE"),
    reg!("WATCHDOG", WATCHDOG, Rw, "cycles a run may go without progress (no instruction issued, no unit active) before it traps WATCHDOG; 0 disables; 2^24 after reset"),
    reg!("ARG0", ARG0, Rw, "argument 0 -> r8 at the doorbell: token id"),
    reg!("ARG1", ARG0 + 4, Rw, "argument 1 -> r9: position of the (first) token"),
    reg!("ARG2", ARG0 + 8, Rw, "argument 2 -> r10: tokens in this pass"),
    reg!("ARG3", ARG0 + 12, Rw, "argument 3 -> r11"),
    reg!("ARG4", ARG0 + 16, Rw, "argument 4 -> r12"),
    reg!("ARG5", ARG0 + 20, Rw, "argument 5 -> r13"),
    reg!("ARG6", ARG0 + 24, Rw, "argument 6 -> r14"),
    reg!("ARG7", ARG0 + 28, Rw, "argument 7 -> r15"),
    reg!("CYCLES_LO", CYCLES_LO, Ro, "core cycles of the last run, low word"),
    reg!("CYCLES_HI", CYCLES_LO + 4, Ro, "core cycles, high word"),
    reg!("INSTRET_LO", INSTRET_LO, Ro, "instructions retired (skipped ones not counted), low word"),
    reg!("INSTRET_HI", INSTRET_LO + 4, Ro, "instructions retired, high word"),
    reg!("BYTES_READ_LO", BYTES_READ_LO, Ro, "bytes read from device memory, low word"),
    reg!("BYTES_READ_HI", BYTES_READ_LO + 4, Ro, "bytes read from device memory, high word"),
    reg!("BYTES_WRITTEN_LO", BYTES_WRITTEN_LO, Ro, "bytes written to device memory, low word"),
    reg!("BYTES_WRITTEN_HI", BYTES_WRITTEN_LO + 4, Ro, "bytes written to device memory, high word"),
    reg!("MACS_LO", MACS_LO, Ro, "multiply-accumulates performed by the PE array, low word"),
    reg!("MACS_HI", MACS_LO + 4, Ro, "multiply-accumulates, high word"),
    reg!("STALL_CYCLES_LO", STALL_CYCLES_LO, Ro, "cycles the PE array waited for memory, low word"),
    reg!("STALL_CYCLES_HI", STALL_CYCLES_LO + 4, Ro, "cycles waited for memory, high word"),
    reg!("SKIPPED_BLOCKS", SKIPPED_BLOCKS, Ro, "ROUTE decisions that skipped a block"),
    reg!("KV_HISTORY_HITS", KV_HISTORY_HITS, Ro, "K/V rows served from the KV history buffer instead of memory"),
    reg!("KV_HISTORY_MISSES", KV_HISTORY_MISSES, Ro, "K/V rows attention read from device memory (present positions)"),
    reg!("ERROR_CODE", ERROR_CODE, Ro, "trap cause of the last run (see ErrorCode); 0 = none"),
    reg!("ERROR_PC", ERROR_PC, Ro, "index of the instruction that trapped"),
    reg!("ERROR_INFO_LO", ERROR_INFO_LO, Ro, "trap detail, low word: faulting address, or the low word of an unknown instruction"),
    reg!("ERROR_INFO_HI", ERROR_INFO_LO + 4, Ro, "trap detail, high word"),
    reg!("BUSY_DMA_LO", BUSY_LO, Ro, "cycles of the last run the DMA unit had work (an instruction running or queued), low word"),
    reg!("BUSY_DMA_HI", BUSY_LO + 4, Ro, "DMA unit busy cycles, high word"),
    reg!("BUSY_MATRIX_LO", BUSY_LO + 8, Ro, "cycles the matrix unit (weight stream, PE array; the CNN unit's conv and maxpool) had work, low word"),
    reg!("BUSY_MATRIX_HI", BUSY_LO + 12, Ro, "matrix unit busy cycles, high word"),
    reg!("BUSY_VECTOR_LO", BUSY_LO + 16, Ro, "cycles the vector unit had work, low word"),
    reg!("BUSY_VECTOR_HI", BUSY_LO + 20, Ro, "vector unit busy cycles, high word"),
    reg!("BUSY_ATTENTION_LO", BUSY_LO + 24, Ro, "cycles the attention unit (attn, kvappend, route) had work, low word"),
    reg!("BUSY_ATTENTION_HI", BUSY_LO + 28, Ro, "attention unit busy cycles, high word"),
    reg!("CFG_PE_LANES", CFG_PE_LANES, Ro, "OverlayConfig::pe_lanes"),
    reg!("CFG_DOT_WIDTH", CFG_DOT_WIDTH, Ro, "OverlayConfig::dot_width"),
    reg!("CFG_SCRATCHPAD_BYTES", CFG_SCRATCHPAD_BYTES, Ro, "OverlayConfig::scratchpad_bytes"),
    reg!("CFG_KV_HISTORY_SLOTS", CFG_KV_HISTORY_SLOTS, Ro, "OverlayConfig::kv_history_slots"),
    reg!("DBG_R0", DBG_R0 + 0, Ro, "debug: scalar register r0 as the last run left it"),
    reg!("DBG_R1", DBG_R0 + 4, Ro, "debug: scalar register r1 as the last run left it"),
    reg!("DBG_R2", DBG_R0 + 8, Ro, "debug: scalar register r2 as the last run left it"),
    reg!("DBG_R3", DBG_R0 + 12, Ro, "debug: scalar register r3 as the last run left it"),
    reg!("DBG_R4", DBG_R0 + 16, Ro, "debug: scalar register r4 as the last run left it"),
    reg!("DBG_R5", DBG_R0 + 20, Ro, "debug: scalar register r5 as the last run left it"),
    reg!("DBG_R6", DBG_R0 + 24, Ro, "debug: scalar register r6 as the last run left it"),
    reg!("DBG_R7", DBG_R0 + 28, Ro, "debug: scalar register r7 as the last run left it"),
    reg!("DBG_R8", DBG_R0 + 32, Ro, "debug: scalar register r8 as the last run left it"),
    reg!("DBG_R9", DBG_R0 + 36, Ro, "debug: scalar register r9 as the last run left it"),
    reg!("DBG_R10", DBG_R0 + 40, Ro, "debug: scalar register r10 as the last run left it"),
    reg!("DBG_R11", DBG_R0 + 44, Ro, "debug: scalar register r11 as the last run left it"),
    reg!("DBG_R12", DBG_R0 + 48, Ro, "debug: scalar register r12 as the last run left it"),
    reg!("DBG_R13", DBG_R0 + 52, Ro, "debug: scalar register r13 as the last run left it"),
    reg!("DBG_R14", DBG_R0 + 56, Ro, "debug: scalar register r14 as the last run left it"),
    reg!("DBG_R15", DBG_R0 + 60, Ro, "debug: scalar register r15 as the last run left it"),
    reg!("DBG_PRED", DBG_PRED, Ro, "debug: predicates p0..p7 in bits 7:0"),
    reg!("DBG_CSR0", DBG_CSR0 + 0, Ro, "debug: CSR 0 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR1", DBG_CSR0 + 4, Ro, "debug: CSR 1 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR2", DBG_CSR0 + 8, Ro, "debug: CSR 2 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR3", DBG_CSR0 + 12, Ro, "debug: CSR 3 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR4", DBG_CSR0 + 16, Ro, "debug: CSR 4 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR5", DBG_CSR0 + 20, Ro, "debug: CSR 5 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR6", DBG_CSR0 + 24, Ro, "debug: CSR 6 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR7", DBG_CSR0 + 28, Ro, "debug: CSR 7 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR8", DBG_CSR0 + 32, Ro, "debug: CSR 8 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR9", DBG_CSR0 + 36, Ro, "debug: CSR 9 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR10", DBG_CSR0 + 40, Ro, "debug: CSR 10 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR11", DBG_CSR0 + 44, Ro, "debug: CSR 11 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR12", DBG_CSR0 + 48, Ro, "debug: CSR 12 (docs/isa.md, CSRs)"),
    reg!("DBG_CSR13", DBG_CSR0 + 52, Ro, "debug: CSR 13 (docs/isa.md, CSRs)"),
];

/// The register at `offset`, if any.
pub fn register_at(offset: u32) -> Option<&'static Register> {
    REGISTERS.iter().find(|r| r.offset == offset)
}

/// Why a run trapped (`ERROR_CODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    None = 0,
    /// The word at `ERROR_PC` is not a valid instruction (unknown opcode, nonzero reserved bits, bad field).
    IllegalInstruction = 1,
    /// The program counter left `[0, PROG_LEN)`.
    PcOutOfRange = 2,
    /// A device-memory access outside device memory (`ERROR_INFO` = address).
    MemOutOfRange = 3,
    /// A scratchpad access outside the scratchpad (`ERROR_INFO` = byte address).
    ScratchpadOutOfRange = 4,
    /// An operand violates its instruction's rules (zero size, misaligned length, ntok above max_batch...).
    BadOperand = 5,
    /// Attention needed a history slot beyond `kv_history_slots` or `kv_history_width`.
    HistoryOverflow = 6,
    /// The run was aborted by SOFT_RESET or by the host's watchdog.
    Aborted = 7,
    /// The hardware watchdog: no progress for `WATCHDOG` cycles (a unit that never finishes).
    Watchdog = 8,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::None,
        ErrorCode::IllegalInstruction,
        ErrorCode::PcOutOfRange,
        ErrorCode::MemOutOfRange,
        ErrorCode::ScratchpadOutOfRange,
        ErrorCode::BadOperand,
        ErrorCode::HistoryOverflow,
        ErrorCode::Aborted,
        ErrorCode::Watchdog,
    ];
    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|c| *c as u32 == v)
    }
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::IllegalInstruction => "ILLEGAL_INSTRUCTION",
            ErrorCode::PcOutOfRange => "PC_OUT_OF_RANGE",
            ErrorCode::MemOutOfRange => "MEM_OUT_OF_RANGE",
            ErrorCode::ScratchpadOutOfRange => "SCRATCHPAD_OUT_OF_RANGE",
            ErrorCode::BadOperand => "BAD_OPERAND",
            ErrorCode::HistoryOverflow => "HISTORY_OVERFLOW",
            ErrorCode::Aborted => "ABORTED",
            ErrorCode::Watchdog => "WATCHDOG",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u32)
    }
}

/// The register table as markdown rows (docs/registers.md holds exactly these).
pub fn markdown_table() -> String {
    let mut s = String::from("| offset | name | access | description |\n|---|---|---|---|\n");
    for r in REGISTERS {
        s += &format!("| 0x{:03X} | {} | {} | {} |\n", r.offset, r.name, r.access.name(), r.description);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_sorted_and_unique() {
        for w in REGISTERS.windows(2) {
            assert!(w[0].offset < w[1].offset, "{} / {}", w[0].name, w[1].name);
        }
        assert!(REGISTERS.iter().all(|r| r.offset % 4 == 0));
        assert_eq!(register_at(ARG0 + 4 * (NUM_ARGS - 1)).unwrap().name, "ARG7");
        assert_eq!(register_at(DBG_R0 + 4 * 15).unwrap().name, "DBG_R15");
        assert_eq!(register_at(DBG_CSR0 + 4 * (DBG_CSRS - 1)).unwrap().name, "DBG_CSR13");
        assert!(REGISTERS.iter().all(|r| r.offset < MAP_BYTES));
    }

    #[test]
    fn error_codes_round_trip() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_u32(c as u32), Some(c));
        }
        assert_eq!(ErrorCode::from_u32(99), None);
    }

    #[test]
    fn docs_registers_md_matches_the_table() {
        let doc = include_str!("../../docs/registers.md");
        assert!(doc.contains(&markdown_table()), "docs/registers.md is out of date: regenerate with `opu info --registers-markdown`");
    }
}

//! Instruction fetch: the program is read from device memory and decoded once at the doorbell, and the
//! decoded program is kept while its bytes do not change (a decode program runs once per token). A word that
//! does not decode traps only when execution reaches it.

use opu_hw::isa::{decode, Instr, INSTR_BYTES};

/// What fetching instruction `pc` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    Instr(Instr),
    /// ILLEGAL_INSTRUCTION: the low 64 bits of the word.
    Illegal(u64),
    /// MEM_OUT_OF_RANGE: the instruction lies (partly) outside device memory; the first faulting byte.
    OutOfMemory(u64),
}

/// Instructions decoded ahead at the doorbell at most (16 MiB of code); a larger PROG_LEN decodes the rest
/// as it is fetched, so a huge PROG_LEN costs no memory.
const DECODE_AHEAD: u64 = 1 << 20;

#[derive(Default)]
pub(crate) struct ProgramCache {
    base: u64,
    /// The code bytes the cache was decoded from.
    bytes: Vec<u8>,
    decoded: Vec<Fetched>,
}

fn decode_word(bytes: &[u8]) -> Fetched {
    let w = u128::from_le_bytes(bytes.try_into().expect("16 bytes"));
    match decode(w) {
        Ok(i) => Fetched::Instr(i),
        Err(_) => Fetched::Illegal(w as u64),
    }
}

/// Fetches and decodes one instruction straight from memory.
fn fetch_uncached(mem: &[u8], base: u64, pc: u64) -> Fetched {
    let addr = u128::from(base) + u128::from(pc) * INSTR_BYTES as u128;
    let end = addr + INSTR_BYTES as u128;
    if end > mem.len() as u128 {
        let first = addr.max(mem.len() as u128);
        return Fetched::OutOfMemory(u64::try_from(first).unwrap_or(u64::MAX));
    }
    decode_word(&mem[addr as usize..end as usize])
}

impl ProgramCache {
    /// Prepares the program of `len` instructions at byte `base` (re-decoding only if its bytes changed).
    pub fn load(&mut self, mem: &[u8], base: u64, len: u32) {
        let ahead = u64::from(len).min(DECODE_AHEAD);
        // The part of the program inside memory; instructions beyond it fetch as OutOfMemory.
        let start = base.min(mem.len() as u64) as usize;
        let want_end = u128::from(base) + u128::from(ahead) * INSTR_BYTES as u128;
        let end = want_end.min(mem.len() as u128) as usize;
        let code = &mem[start..end.max(start)];
        if self.base == base && self.decoded.len() as u64 == ahead && self.bytes == code {
            return;
        }
        self.base = base;
        self.bytes = code.to_vec();
        self.decoded = (0..ahead).map(|pc| fetch_uncached(mem, base, pc)).collect();
    }

    /// Instruction `pc` (which the caller has checked against PROG_LEN).
    pub fn fetch(&self, mem: &[u8], pc: u64) -> Fetched {
        match self.decoded.get(pc as usize) {
            Some(f) => *f,
            None => fetch_uncached(mem, self.base, pc),
        }
    }
}

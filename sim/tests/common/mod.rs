//! Helpers shared by the integration tests: programs from assembly text, typed access to the scratchpad
//! and device memory, random data shaped like a model's.

#![allow(dead_code)]

use opu_hw::device::{Completion, Device, DeviceError};
use opu_hw::isa::assemble;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::weights::quantize_block;
use opu_hw::numerics::{WeightFormat, BLOCK};
use opu_hw::OverlayConfig;
use opu_sim::FuncSim;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Byte address where the tests put their programs.
pub const CODE: u64 = 0;

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn sim() -> FuncSim {
    FuncSim::new(&OverlayConfig::sim())
}

/// Assembles `text`, loads it at [`CODE`] and runs it with `args`.
pub fn run(sim: &mut FuncSim, text: &str, args: &[u32]) -> Result<Completion, DeviceError> {
    let program = assemble(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    sim.load_program(CODE, &program).unwrap();
    sim.run(args)
}

/// Same, expecting the run to end normally.
pub fn run_ok(sim: &mut FuncSim, text: &str, args: &[u32]) -> Completion {
    run(sim, text, args).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub fn f16_bytes(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn to_f16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

pub fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Writes bytes at scratchpad word `word`.
pub fn spm_put(sim: &mut FuncSim, word: u32, bytes: &[u8]) {
    let at = 4 * word as usize;
    sim.scratchpad_mut()[at..at + bytes.len()].copy_from_slice(bytes);
}

pub fn spm_get(sim: &FuncSim, word: u32, len: usize) -> Vec<u8> {
    let at = 4 * word as usize;
    sim.scratchpad()[at..at + len].to_vec()
}

/// Writes bytes at device-memory line `line`.
pub fn mem_put(sim: &mut FuncSim, line: u32, bytes: &[u8]) {
    sim.mem_write(u64::from(line) * 32, bytes).unwrap();
}

/// Writes the row-major `rows` (`row_bytes` each) at `line` as `matmul` reads them: interleaved by lane at
/// the `sim` preset (docs/isa.md, `matmul`). Returns the bytes the matrix takes.
pub fn mem_put_matrix(sim: &mut FuncSim, line: u32, rows: &[u8], row_bytes: usize) -> u64 {
    let m = opu_hw::weight_layout::WeightLayout::new(&OverlayConfig::sim(), row_bytes).interleave(rows);
    mem_put(sim, line, &m);
    m.len() as u64
}

pub fn mem_get(sim: &mut FuncSim, line: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    sim.mem_read(u64::from(line) * 32, &mut b).unwrap();
    b
}

/// FP16 activations: mostly within +-4, a few outliers of thousands (SmolLM2's down-projection inputs).
pub fn activations(rng: &mut StdRng, n: usize) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let v: f32 = if rng.gen_bool(0.02) {
                rng.gen_range(-3000.0..3000.0)
            } else {
                let u: f32 = rng.gen_range(-1.0..1.0);
                u * u * u * 4.0
            };
            f32_to_f16(v)
        })
        .collect()
}

/// Small FP16 values (K, V, router weights).
pub fn small_f16s(rng: &mut StdRng, n: usize, scale: f32) -> Vec<u16> {
    (0..n).map(|_| f32_to_f16(rng.gen_range(-1.0..1.0f32) * scale)).collect()
}

pub fn f32s(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// A `rows x cols` matrix in `fmt`, with per-block scales over two decades.
pub fn matrix(rng: &mut StdRng, fmt: WeightFormat, rows: usize, cols: usize) -> Vec<u8> {
    let mut m = Vec::new();
    if fmt == WeightFormat::F16 {
        for _ in 0..rows * cols {
            m.extend_from_slice(&f32_to_f16(rng.gen_range(-0.1..0.1f32)).to_le_bytes());
        }
        return m;
    }
    for _ in 0..rows * cols / BLOCK {
        let scale = 10f32.powf(rng.gen_range(-2.5..-0.5));
        let x: [f32; BLOCK] = std::array::from_fn(|_| rng.gen_range(-1.0..1.0f32) * scale + scale * 0.1);
        quantize_block(fmt, &x, &mut m);
    }
    m
}

/// Expects a trap with `code` at `pc`, and ERROR_INFO = `info`.
pub fn expect_trap(
    sim: &mut FuncSim,
    result: Result<Completion, DeviceError>,
    code: opu_hw::regs::ErrorCode,
    pc: u32,
    info: u64,
) {
    match result {
        Err(DeviceError::Trap { code: c, pc: p }) => {
            assert_eq!((c, p), (code, pc), "trap");
        }
        other => panic!("expected a {code} trap at pc {pc}, got {other:?}"),
    }
    assert_eq!(sim.mmio_read(opu_hw::regs::ERROR_CODE).unwrap(), code as u32);
    assert_eq!(sim.mmio_read(opu_hw::regs::ERROR_PC).unwrap(), pc);
    assert_eq!(sim.mmio_read64(opu_hw::regs::ERROR_INFO_LO).unwrap(), info, "ERROR_INFO of {code}");
}

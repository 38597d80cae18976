//! The matrix unit in the RTL's `top` under Verilator against the functional simulator (the golden model,
//! whose `matmul` is `opu_hw::numerics` arithmetic), through `Device` as the host drives a card: activations
//! and old outputs DMA'd into the scratchpad, `matmul` streaming its weights from device memory, the outputs
//! stored back. Compared: every byte of the device-memory window, the registers, INSTRET, the byte counters,
//! MACS, and each trap's code, pc and ERROR_INFO. The weights and activations are real FP16 / quantized blocks
//! (`opu_rtl::testing`: typical values, outliers, spread exponents, extreme nibbles), so the outputs are finite
//! and the comparison checks the arithmetic, not NaN against NaN.

mod common;

use common::{compare_with_func, compare_with_func_on, models_or_skip, run_program, WINDOW};
use opu_hw::device::Device;
use opu_hw::isa::{assemble, encode_program};
use opu_hw::regs;
use opu_hw::numerics::{WeightFormat, BLOCK};
use opu_hw::weight_layout::WeightLayout;
use opu_hw::OverlayConfig;
use opu_rtl::testing::{act_block, weight_block, ActKind, Rng};
/// Where the tests put the activations, the weights and the old outputs in device memory.
const ACTS: u64 = 0x100;
const WEIGHTS: u64 = 0x2000;
/// Where the weights of the long cases go: past the compared window (they are only read).
const WEIGHTS_FAR: u64 = 0x2_0000;
const OLD: u64 = 0x8000;
const OUT: u64 = 0xC000;
/// RMSNorm's gains, and where its outputs go (the fused reduction's check).
const GAINS: u64 = 0x6000;
const NORMED: u64 = 0xD000;


/// One `matmul` case: the shape, and what the program around it does.
#[derive(Clone, Copy, Debug)]
struct Case {
    fmt: WeightFormat,
    f32_out: bool,
    acc: bool,
    ntok: u32,
    rows: u32,
    cols: u32,
    /// The fused reduction: 0 none, 1 `set`, 2 `set` then the same `matmul` again with `add`.
    red: u8,
    /// The weights' byte offset from WEIGHTS: 0, or 128 (the next multiple of the layout's alignment,
    /// `16 x pe_lanes` bytes).
    w_off: u64,
    /// The weights at [`WEIGHTS_FAR`] instead of [`WEIGHTS`] (more than 16 KiB of them).
    far: bool,
}

impl Case {
    fn row_bytes(&self) -> usize {
        self.fmt.row_bytes(self.cols as usize).unwrap()
    }
    /// The weights' layout at the `sim` preset (interleaved by lane, docs/isa.md `matmul`).
    fn layout(&self) -> WeightLayout {
        WeightLayout::new(&OverlayConfig::sim(), self.row_bytes())
    }
    fn weight_bytes(&self) -> usize {
        self.layout().matrix_bytes(u64::from(self.rows)) as usize
    }
    fn w_byte(&self) -> u64 {
        if self.far { WEIGHTS_FAR + self.w_off } else { WEIGHTS + self.w_off }
    }
    fn out_row(&self) -> u32 {
        (self.rows * if self.f32_out { 4 } else { 2 }).div_ceil(4) * 4
    }
    /// A token's activation row in the scratchpad and in device memory: its FP16 values padded to 4 bytes
    /// (whole blocks but for F16, whose rows may have any number of columns).
    fn src_row(&self) -> u32 {
        (self.cols * 2).div_ceil(4) * 4
    }
    /// The device-memory image: activation blocks, weight rows, old outputs (finite FP16 / FP32 values).
    fn data(&self, rng: &mut Rng) -> Vec<u8> {
        let end = WINDOW.max(self.w_byte() as usize + self.weight_bytes());
        let mut data: Vec<u8> = (0..end).map(|_| rng.next_u64() as u8).collect();
        let kinds = [ActKind::Typical, ActKind::Typical, ActKind::Outlier, ActKind::Spread, ActKind::EqualExponents, ActKind::Zero];
        for t in 0..self.ntok as usize {
            let acts: Vec<u16> = (0..self.cols.div_ceil(BLOCK as u32))
                .flat_map(|_| {
                    let kind = kinds[rng.below(kinds.len() as u64) as usize];
                    act_block(rng, kind)
                })
                .take(self.cols as usize)
                .collect();
            let at = ACTS as usize + t * self.src_row() as usize;
            for (i, v) in acts.iter().enumerate() {
                data[at + 2 * i..at + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        // the rows' blocks (F16: values), laid out by lane (the zeros that pad the lanes' shares are read by
        // neither model)
        let rows: Vec<u8> = if self.fmt == WeightFormat::F16 {
            (0..self.rows * self.cols).flat_map(|_| f16_weight(rng).to_le_bytes()).collect()
        } else {
            (0..self.rows * self.cols / BLOCK as u32).flat_map(|_| weight_block(rng, self.fmt, false)).collect()
        };
        let matrix = self.layout().interleave(&rows);
        data[self.w_byte() as usize..self.w_byte() as usize + matrix.len()].copy_from_slice(&matrix);
        for i in 0..self.rows as usize {
            let g = 0.5 + rng.f32_unit();
            data[GAINS as usize + 4 * i..GAINS as usize + 4 * i + 4].copy_from_slice(&g.to_bits().to_le_bytes());
        }
        for i in 0..(self.ntok * self.out_row() / 4) as usize {
            let v = (rng.f32_unit() - 0.5) * 64.0;
            let w = if self.f32_out {
                v.to_bits()
            } else {
                let h = opu_hw::numerics::fp16::f32_to_f16(v);
                u32::from(h) | u32::from(opu_hw::numerics::fp16::f32_to_f16(-v * 0.5)) << 16
            };
            data[OLD as usize + 4 * i..OLD as usize + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        data
    }
    /// Activations at scratchpad byte 0, outputs after them; the old outputs loaded first when `acc`.
    fn program(&self) -> String {
        let src_bytes = self.ntok * self.src_row();
        let dst = src_bytes.div_ceil(64) * 64 + 64;
        let out_bytes = self.ntok * self.out_row();
        let mut p = format!("load spm=0 mem={} bytes={src_bytes} idx=r0 stride=0\n", ACTS / 32);
        if self.acc {
            p += &format!("load spm={} mem={} bytes={out_bytes} idx=r0 stride=0\n", dst / 4, OLD / 32);
        }
        let out = if self.f32_out { "f32" } else { "f16" };
        let reds: &[&str] = match self.red {
            0 => &["none"],
            1 => &["set"],
            _ => &["set", "add"],
        };
        for red in reds {
            p += &format!(
                "matmul fmt={} out={out} acc={} red={red} ntok={} dst={} src=0 rows={} cols={} w={}\n",
                self.fmt.name(),
                u8::from(self.acc),
                self.ntok,
                dst / 4,
                self.rows,
                self.cols,
                self.w_byte() / 32
            );
        }
        p += &format!("store spm={} mem={} bytes={out_bytes} idx=r0 stride=0\n", dst / 4, OUT / 32);
        if self.red != 0 {
            // RMSNorm of the outputs reads RED: the sums of squares the matmul left
            let g = (dst + out_bytes).div_ceil(64) * 64 + 64;
            let r = g + (self.rows * 4).div_ceil(64) * 64 + 64;
            p += &format!(
                "load spm={} mem={} bytes={} idx=r0 stride=0\n\
                 rmsnorm dd=f32 ds={out} rows={} dst={} src={} g={} n={} eps=1e-5\n\
                 store spm={} mem={} bytes={} idx=r0 stride=0\n",
                g / 4,
                GAINS / 32,
                self.rows * 4,
                self.ntok,
                r / 4,
                dst / 4,
                g / 4,
                self.rows,
                r / 4,
                NORMED / 32,
                self.ntok * self.rows * 4
            );
        }
        p + "end\n"
    }
}


/// An F16 weight: mostly typical values of a trained matrix, some small ones, subnormals, zeros and wide
/// exponents (the products land all over the accumulator's grid), finite.
fn f16_weight(rng: &mut Rng) -> u16 {
    let sign = if rng.next_u64() & 1 == 1 { 0x8000u16 } else { 0 };
    match rng.below(8) {
        0 => sign | (rng.below(1024) as u16),
        1 => sign,
        2 => sign | ((1 + rng.below(18)) << 10) as u16 | (rng.below(1024) as u16),
        3 => opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * 1e-3),
        _ => opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * 0.2),
    }
}

/// The chosen shapes: each format, output type, start values and reduction; one group and several; long
/// rows whose loads overlap the compute; the weight ring wrapping.
fn chosen_cases() -> Vec<Case> {
    vec![
        // one row group, one token: the decode shape
        Case { fmt: WeightFormat::W4Min, f32_out: false, acc: false, ntok: 1, rows: 16, cols: 64, red: 1, w_off: 0, far: false },
        // several groups, the last partial and odd (a half-written output word), tokens, the fused residual
        Case { fmt: WeightFormat::W4Min, f32_out: false, acc: true, ntok: 3, rows: 37, cols: 96, red: 2, w_off: 128, far: false },
        // Q4_0 rows of 18-byte blocks (a lane's row 1 starts at every even byte of a unit), FP32 outputs with
        // start values
        Case { fmt: WeightFormat::W4, f32_out: true, acc: true, ntok: 2, rows: 21, cols: 64, red: 1, w_off: 0, far: false },
        // Q8_0: four steps per block, rows of 34-byte blocks
        Case { fmt: WeightFormat::W8, f32_out: false, acc: false, ntok: 2, rows: 18, cols: 128, red: 0, w_off: 128, far: false },
        Case { fmt: WeightFormat::W8, f32_out: true, acc: false, ntok: 1, rows: 7, cols: 32, red: 2, w_off: 0, far: false },
        // three full groups of long rows, one token: each group's load overlaps the previous one's compute
        Case { fmt: WeightFormat::W4Min, f32_out: false, acc: true, ntok: 1, rows: 48, cols: 320, red: 1, w_off: 0, far: false },
        // the same from the next multiple of the layout's alignment
        Case { fmt: WeightFormat::W4Min, f32_out: false, acc: false, ntok: 1, rows: 48, cols: 320, red: 0, w_off: 128, far: false },
        // the weight buffer's ring (512 units per lane at `sim`) wraps: 63 groups of 17 units (136-byte W8
        // rows), around it twice; 13 groups of 45 (360-byte W4Min rows, SmolLM2's 576 columns), the twelfth
        // across the wrap (units 495 to 539); 6 groups of 108 (864-byte W4 rows), the fifth across the wrap; 5
        // groups of 136 (1,088-byte W8 rows) for 4 tokens, whose compute outlasts the beats: three groups at
        // once, the ring's room, not its eight entries, holds the loader back
        Case { fmt: WeightFormat::W8, f32_out: false, acc: false, ntok: 2, rows: 1000, cols: 128, red: 1, w_off: 0, far: true },
        Case { fmt: WeightFormat::W4Min, f32_out: false, acc: true, ntok: 1, rows: 200, cols: 576, red: 2, w_off: 128, far: true },
        Case { fmt: WeightFormat::W4, f32_out: true, acc: false, ntok: 1, rows: 96, cols: 1536, red: 0, w_off: 0, far: true },
        Case { fmt: WeightFormat::W8, f32_out: true, acc: true, ntok: 4, rows: 80, cols: 1024, red: 1, w_off: 128, far: true },
        // F16 weights on the router's datapath: the decode shape; several groups, the last partial and odd,
        // FP32 outputs (two chunks a group) with start values, tokens; 13 columns (the last pair's 5, the
        // activations' rows padded to 4 bytes); SmolLM2's 576 columns, 13 groups of 144 units around the ring
        Case { fmt: WeightFormat::F16, f32_out: false, acc: false, ntok: 1, rows: 16, cols: 64, red: 1, w_off: 0, far: false },
        Case { fmt: WeightFormat::F16, f32_out: true, acc: true, ntok: 3, rows: 37, cols: 40, red: 2, w_off: 128, far: false },
        Case { fmt: WeightFormat::F16, f32_out: false, acc: true, ntok: 2, rows: 21, cols: 13, red: 0, w_off: 0, far: false },
        Case { fmt: WeightFormat::F16, f32_out: false, acc: true, ntok: 1, rows: 200, cols: 576, red: 2, w_off: 128, far: true },
    ]
}

#[test]
fn matmul_equals_the_functional_simulator() {
    if !models_or_skip("RTL matrix unit vs functional simulator") {
        return;
    }
    let cases = chosen_cases();
    let mut rng = Rng(0x3a7_3a7);
    // and random shapes: any format, output type, start values and reduction, 1..=4 tokens, 1..=40 rows, 1..=6
    // blocks
    let fmts = [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8];
    let random: Vec<Case> = (0..12)
        .map(|_| Case {
            fmt: fmts[rng.below(3) as usize],
            f32_out: rng.below(2) == 1,
            acc: rng.below(2) == 1,
            ntok: 1 + rng.below(4) as u32,
            rows: 1 + rng.below(40) as u32,
            cols: 32 * (1 + rng.below(6) as u32),
            red: rng.below(3) as u8,
            w_off: 128 * rng.below(2),
            far: false,
        })
        .collect();
    // and F16 weights: any number of columns (1..=100)
    let random_f16: Vec<Case> = (0..6)
        .map(|_| Case {
            fmt: WeightFormat::F16,
            f32_out: rng.below(2) == 1,
            acc: rng.below(2) == 1,
            ntok: 1 + rng.below(4) as u32,
            rows: 1 + rng.below(40) as u32,
            cols: 1 + rng.below(100) as u32,
            red: rng.below(3) as u8,
            w_off: 128 * rng.below(2),
            far: false,
        })
        .collect();
    for case in cases.into_iter().chain(random).chain(random_f16) {
        let text = case.program();
        let cycles = compare_with_func(&text, &case.data(&mut rng));
        let macs = case.ntok * case.rows * case.cols;
        eprintln!("{case:?}: {cycles} cycles, {macs} MACs, {} weight bytes", case.weight_bytes());
    }
}

/// The wide weight port: at `sim-wide` (the `sim` overlay behind 4 memory channels) a response carries two
/// beats, the two lane quads of a unit row, and each feed takes its own: the same bits as the functional
/// simulator, in about the cycles its cycle model counts for a memory of 128 bytes per cycle.
#[test]
fn matmul_on_a_wide_weight_port_equals_the_functional_simulator() {
    if !models_or_skip("RTL matrix unit at sim-wide vs functional simulator") {
        return;
    }
    let config = OverlayConfig::sim_wide();
    assert_eq!(config.weight_port_beats(), 2);
    let mut rng = Rng(0x3a7_3a8);
    for case in chosen_cases() {
        let (cycles, model) = compare_with_func_on(&config, &case.program(), &case.data(&mut rng));
        eprintln!("{case:?}: {cycles} cycles at sim-wide (the model {model})");
        assert!(cycles.abs_diff(model) * 50 <= model, "{case:?}: {cycles} cycles, the model {model}");
    }
}

#[test]
fn matmul_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL matrix unit traps") {
        return;
    }
    let mut rng = Rng(0x7ab5);
    let data: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    for (what, m) in [
        ("cols not whole blocks", "matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=48 w=0x100"),
        ("ntok 0", "matmul fmt=w4m out=f16 ntok=0 dst=0x1000 src=0 rows=16 cols=64 w=0x100"),
        ("ntok above max_batch", "matmul fmt=w8 out=f16 ntok=17 dst=0x1000 src=0 rows=16 cols=64 w=0x100"),
        ("a row longer than the buffer", "matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=2 cols=1952 w=0x100"),
        ("weights not at a multiple of 16 x pe_lanes bytes", "matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=64 w=0x101"),
        ("source and destination overlap", "matmul fmt=w4 out=f32 ntok=2 dst=0x20 src=0 rows=16 cols=64 w=0x100"),
        ("destination past the scratchpad", "matmul fmt=w4m out=f32 ntok=4 dst=0x3FFF0 src=0 rows=64 cols=64 w=0x100"),
        ("source past the scratchpad", "matmul fmt=w4m out=f16 ntok=2 dst=0 src=0x3FFF8 rows=16 cols=64 w=0x100"),
        ("weights past device memory", "matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=64 w=0x1FFFFFC"),
        ("f16: no columns", "matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=0 w=0x100"),
        ("f16: a row longer than the buffer", "matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=2 cols=1040 w=0x100"),
        ("f16: source past the scratchpad", "matmul fmt=f16 out=f32 ntok=2 dst=0 src=0x3FFF0 rows=16 cols=27 w=0x100"),
        ("f16: weights past device memory", "matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=24 w=0x1FFFFFC"),
    ] {
        let text = format!("seti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &data);
        eprintln!("trap equal: {what}");
    }
}

/// Where the early-issue tests keep the replacement weights, the query and the K/V rows.
const NEW_WEIGHTS: u64 = 0x5000;
const EARLY_Q: u64 = 0x4000;
const EARLY_K: u64 = 0xE000;
const EARLY_V: u64 = 0xE800;

/// A `matmul` is issued while the attention unit still works through the instructions before it (the
/// top's early issue: its loader streams meanwhile, its compute waits for the others). Against the
/// functional simulator, which runs one instruction after the other (and, since a trapped run's counters
/// are not compared by `compare_with_func`, MACS and BYTES_READ read after every run):
/// - an `attn`, then a `kvappend` that overwrites the `matmul`'s weights: the loader must not read them
///   before they are written (the `matmul` is not issued while a `kvappend` is queued or runs);
/// - seven `kvappend`s, more than the attention unit's queue holds, then two `matmul`s (which wait for them
///   and must then issue);
/// - an `attn` queued behind another traps after the `matmul` was issued: the `matmul` is dropped (no
///   MACs, no bytes), the trap is the `attn`'s;
/// - the early `matmul` traps itself while the `attn` before it runs: the `attn` completes (its MACs and
///   K/V bytes are counted), the trap is the `matmul`'s.
#[test]
fn an_early_matmul_equals_the_functional_simulator() {
    if !models_or_skip("RTL early matmul vs functional simulator") {
        return;
    }
    let case = Case { fmt: WeightFormat::W4Min, f32_out: false, acc: false, ntok: 1, rows: 64, cols: 128, red: 0, w_off: 0, far: false };
    let mut rng = Rng(0xea71_0001);
    let mut data = case.data(&mut rng);
    // valid weights, laid out by lane, to overwrite the first 2,048 bytes of the weights with (finite outputs
    // either way)
    let rows: Vec<u8> = (0..case.rows * case.cols / BLOCK as u32).flat_map(|_| weight_block(&mut rng, case.fmt, false)).collect();
    let matrix = case.layout().interleave(&rows);
    data[NEW_WEIGHTS as usize..NEW_WEIGHTS as usize + 2048].copy_from_slice(&matrix[..2048]);
    for (from, bytes) in [(EARLY_Q, 128u64), (EARLY_K, 0x400), (EARLY_V, 0x400)] {
        for i in (0..bytes).step_by(2) {
            let v = opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * 3.0);
            data[(from + i) as usize..(from + i + 2) as usize].copy_from_slice(&v.to_le_bytes());
        }
    }
    let acts = format!("load spm=0 mem={} bytes=256 idx=r0 stride=0\n", ACTS / 32);
    let matmul = |w: u64| format!("matmul fmt=w4m out=f16 acc=0 red=none ntok=1 dst=0x800 src=0 rows=64 cols=128 w={w}\n");
    let store = format!("store spm=0x800 mem={} bytes=128 idx=r0 stride=0\n", OUT / 32);
    let attn_setup = format!(
        "load spm=0x100 mem={} bytes=128 idx=r0 stride=0\n\
         csrw csr=head_dim rs=r0 imm=64\ncsrw csr=kv_stride rs=r0 imm=4\ncsrw csr=attn_scale rs=r0 imm={}\nseti rd=r4 imm=8\n",
        EARLY_Q / 32,
        0.125f32.to_bits()
    );
    let attn = |dst: u32| format!("attn group=1 kvh=0 len=r4 dst={dst:#x} q=0x100 k={} v={}\n", EARLY_K / 32, EARLY_V / 32);
    // seven kvappends back to back fill the attention unit's queue (the core holds the next on its port);
    // the matmuls after them issue once the count of those queued is back to 0: counting a push the full
    // queue refused wraps the count (a matmul issued before the kvappends are done, and the next one never)
    let kvappends = |hd: u32| {
        // back to back (the same row each time), so that the core outruns the unit
        let rows = format!("kvappend pos=r5 ksrc=0x100 vsrc=0x100 k={} v={}\n", 0x9000 / 32, 0xA000 / 32).repeat(7);
        format!("{acts}{attn_setup}csrw csr=head_dim rs=r0 imm={hd}\nseti rd=r5 imm=3\n{rows}{}{}{store}end\n", matmul(WEIGHTS / 32), matmul(WEIGHTS / 32))
    };
    let programs = [
        ("seven kvappends of 16 (the queue full) before it", kvappends(16)),
        ("seven kvappends of 32", kvappends(32)),
        ("seven kvappends of 64", kvappends(64)),
        (
            "a kvappend behind an attn overwrites the weights",
            format!(
                "{acts}load spm=0x400 mem={} bytes=2048 idx=r0 stride=0\n{attn_setup}{}\
                 csrw csr=head_dim rs=r0 imm=512\ncsrw csr=kv_stride rs=r0 imm=64\n\
                 kvappend pos=r0 ksrc=0x400 vsrc=0x500 k={} v={}\n{}{store}end\n",
                NEW_WEIGHTS / 32,
                attn(0x140),
                WEIGHTS / 32,
                WEIGHTS / 32 + 32,
                matmul(WEIGHTS / 32)
            ),
        ),
        ("an attn before it traps", format!("{acts}{attn_setup}{}{}{}{store}end\n", attn(0x140), attn(0x3FFF0), matmul(WEIGHTS / 32))),
        ("it traps itself", format!("{acts}{attn_setup}{}{}{store}end\n", attn(0x140), matmul(0x1FFFFFC))),
    ];
    for (what, text) in programs {
        let cycles = compare_with_func(&text, &data);
        {
            let code = encode_program(&assemble(&text).unwrap()).unwrap();
            let config = opu_hw::OverlayConfig::sim();
            let (mut func, mut rtl) = (opu_sim::FuncSim::new(&config), opu_rtlsim::RtlSim::new(&config).unwrap());
            run_program("functional simulator", &mut func, &code, &data);
            run_program("RTL", &mut rtl, &code, &data);
            for (name, reg) in [("MACS", regs::MACS_LO), ("BYTES_READ", regs::BYTES_READ_LO)] {
                assert_eq!(rtl.mmio_read64(reg).unwrap(), func.mmio_read64(reg).unwrap(), "{what}: {name}");
            }
        }
        eprintln!("{what}: equal, {cycles} cycles");
    }
}

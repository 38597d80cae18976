//! The vector unit (`vop`, `rmsnorm`, `rope`, `argmax`, `RED`) in the RTL's `top` under Verilator against
//! the functional simulator (the golden model, whose vector instructions are `opu_hw::numerics` arithmetic),
//! through `Device` as the host drives a card: the operands DMA'd into the scratchpad, the vector
//! instructions, the whole scratchpad window stored back. Compared: every byte of the device-memory window,
//! the registers (argmax's `rd`), INSTRET and the byte counters, and each trap's code, pc and ERROR_INFO.
//!
//! Operands are FP16/FP32 values of every kind the conversions meet (normal, subnormal, zero of both signs,
//! large, and rarely infinite or NaN), rows of odd length (a half-written last word), sources that coincide
//! with the destination, and `RED` set, added to and read.

mod common;

use common::{compare_with_func, models_or_skip, WINDOW};
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::vector::{rope_table_row, VecOp};
use opu_rtl::testing::Rng;
/// The scratchpad window the programs use: loaded from device memory byte 0, stored back at `OUT`.
const SPM_WINDOW: u32 = 0x6000;
const OUT: u64 = 0x8000;
/// Scratchpad bytes of the operands: `a`, `b`, the gains, the RoPE table, the destinations.
const A: u32 = 0x0000;
const B: u32 = 0x1000;
const G: u32 = 0x2000;
const T: u32 = 0x3000;
const D: u32 = 0x4000;
const D2: u32 = 0x5000;


/// Runs `body` between the load of the scratchpad window and its store on both simulators; returns the
/// RTL's cycles.
fn compare(body: &str, data: &[u8]) -> u64 {
    compare_with_func(
        &format!(
            "load spm=0 mem=0 bytes={SPM_WINDOW} idx=r0 stride=0\n{body}\nstore spm=0 mem={} bytes={SPM_WINDOW} idx=r0 stride=0\nend\n",
            OUT / 32
        ),
        data,
    )
}

/// An FP16 value: mostly moderate, some tiny (subnormal), large, zero of either sign, and rarely infinite
/// or NaN when `specials`.
fn f16_value(rng: &mut Rng, specials: bool) -> u16 {
    match rng.below(50) {
        0 if specials => [0x7C00, 0xFC00, 0x7E00, 0x7D01][rng.below(4) as usize],
        1..=3 => (rng.next_u64() as u16) & 0x83FF,
        4 => [0x0000, 0x8000][rng.below(2) as usize],
        5..=7 => f32_to_f16((rng.f32_unit() - 0.5) * 2000.0),
        _ => f32_to_f16((rng.f32_unit() - 0.5) * 8.0),
    }
}

/// An FP32 value: FP16-derived half of the time, else moderate with a full mantissa, tiny, or large.
fn f32_value(rng: &mut Rng, specials: bool) -> u32 {
    match rng.below(8) {
        0..=3 => opu_hw::numerics::fp16::f16_to_f32(f16_value(rng, specials)).to_bits(),
        4 => ((rng.f32_unit() - 0.5) * 1e-30).to_bits(),
        5 => ((rng.f32_unit() - 0.5) * 3e5).to_bits(),
        _ => ((rng.f32_unit() - 0.5) * 6.0).to_bits(),
    }
}

/// The device-memory image: the scratchpad window's operands (the table real RoPE rows).
fn data(rng: &mut Rng, specials: bool, hd: u32) -> Vec<u8> {
    let mut d: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    for region in [A, B, D] {
        for i in (0..0x1000).step_by(4) {
            let w = if rng.below(2) == 0 {
                u32::from(f16_value(rng, specials)) | u32::from(f16_value(rng, specials)) << 16
            } else {
                f32_value(rng, specials)
            };
            d[(region + i) as usize..(region + i + 4) as usize].copy_from_slice(&w.to_le_bytes());
        }
    }
    for i in (0..0x1000).step_by(4) {
        let g = (0.5 + rng.f32_unit()) * if rng.below(8) == 0 { -1.0 } else { 1.0 };
        d[(G + i) as usize..(G + i + 4) as usize].copy_from_slice(&g.to_bits().to_le_bytes());
    }
    let mut at = T as usize;
    for pos in 0..8 {
        for (c, s) in rope_table_row(1 + 37 * pos, hd, 10000.0) {
            d[at..at + 4].copy_from_slice(&c.to_bits().to_le_bytes());
            d[at + 4..at + 8].copy_from_slice(&s.to_bits().to_le_bytes());
            at += 8;
        }
    }
    d
}

fn ty(rng: &mut Rng) -> &'static str {
    ["f16", "f32"][rng.below(2) as usize]
}

#[test]
fn vector_instructions_equal_the_functional_simulator() {
    if !models_or_skip("RTL vector unit vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x7ec_70);
    let mut total = 0;
    for case in 0..14 {
        let hd = [16u32, 32, 64][rng.below(3) as usize];
        let specials = case % 4 == 3;
        let d = data(&mut rng, specials, hd);
        let mut body = String::new();
        // vop: any op and types, odd and even lengths, the destination sometimes `a` itself, RED set or added
        let op = VecOp::ALL[rng.below(6) as usize];
        let (rows, n) = (1 + rng.below(4) as u32, 1 + rng.below(45) as u32);
        let (dd, da, db) = (ty(&mut rng), ty(&mut rng), ty(&mut rng));
        let red = ["none", "set", "add"][rng.below(3) as usize];
        let in_place = rng.below(3) == 0;
        let (dst, a, dd) = if in_place { (A, A, da) } else { (D, A, dd) };
        body += &format!("seti rd=r1 imm={}\ncsrw csr=vscale rs=r1 imm=0\n", f32_value(&mut rng, false));
        body += &format!(
            "vop op={} dd={dd} da={da} db={db} red={red} rows={rows} dst={} a={} b={} n={n}\n",
            op.name(),
            dst / 4,
            a / 4,
            B / 4
        );
        // RMSNorm over what the vop stored (RED from its `red`, or 0 when none), then once more after a
        // copy that sets RED
        let eps = [1e-5f32, 1e-6, 0.0][rng.below(3) as usize];
        let ds = dd;
        body += &format!(
            "rmsnorm dd={} ds={ds} rows={rows} dst={} src={} g={} n={n} eps={eps:?}\n",
            ty(&mut rng),
            D2 / 4,
            dst / 4,
            G / 4
        );
        let (rows2, n2) = (1 + rng.below(3) as u32, 1 + rng.below(70) as u32);
        let t2 = ty(&mut rng);
        body += &format!("vop op=copy dd={t2} da={t2} db=f16 red=set rows={rows2} dst={} a={} b=0 n={n2}\n", D / 4, B / 4);
        body += &format!("rmsnorm dd=f16 ds={t2} rows={rows2} dst={} src={} g={} n={n2} eps=1e-5\n", D2 / 4 + 0x100, D / 4, G / 4);
        // RoPE in place or not, either style
        let (heads, rrows) = (1 + rng.below(3) as u32, 1 + rng.below(3) as u32);
        let style = ["normal", "neox"][rng.below(2) as usize];
        let rdst = if rng.below(2) == 0 { B } else { D };
        body += &format!(
            "rope style={style} heads={heads} head_dim={hd} rows={rrows} dst={} src={} table={}\n",
            rdst / 4,
            B / 4,
            T / 4
        );
        // argmax of both types
        body += &format!("argmax dt={} rd=r5 dst={} src={} n={}\n", ty(&mut rng), D2 / 4 + 0x300, A / 4, 1 + rng.below(300));
        body += &format!("argmax dt=f16 rd=r0 dst={} src={} n={}\n", D2 / 4 + 0x301, D / 4, 1 + rng.below(40));
        let cycles = compare(&body, &d);
        total += cycles;
        eprintln!("case {case}: {cycles} cycles\n{body}");
    }
    eprintln!("{total} cycles in all");
}

/// FP16 operand lines shared by a pair of chunks (docs/rtl.md, the vector unit): a line holds 16 FP16 values,
/// read by the even chunk, whose upper half the odd chunk takes; with two FP16 sources the odd chunk reads
/// the next pair's `a` line ahead. Lengths around the chunk, pair and line boundaries, rows of odd length,
/// in place, one source FP16 and one FP32, `RED`, and `rmsnorm` of an FP16 source: every byte as the
/// functional simulator's. Then the cycles: a chunk of `swiglu` over two FP16 sources takes one cycle.
#[test]
fn fp16_line_pairs_equal_the_functional_simulator() {
    if !models_or_skip("RTL vector unit, FP16 line pairs") {
        return;
    }
    let mut rng = Rng(0xf16_9a1);
    for (i, n) in [1u32, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 63, 100].into_iter().enumerate() {
        let d = data(&mut rng, i % 5 == 4, 64);
        let op = ["add", "mul", "swiglu"][i % 3];
        let rows = 1 + (i % 3) as u32;
        let red = ["none", "set", "add"][(i / 3) % 3];
        let (dst, dd) = if i % 4 == 0 { (A, "f16") } else { (D, ["f16", "f32"][i % 2]) };
        let (da2, db2) = if i % 2 == 0 { ("f16", "f32") } else { ("f32", "f16") };
        let body = format!(
            "vop op={op} dd={dd} da=f16 db=f16 red={red} rows={rows} dst={} a={} b={} n={n}
             rmsnorm dd={dd} ds=f16 rows={rows} dst={} src={} g={} n={n} eps=1e-5
             vop op={op} dd=f32 da={da2} db={db2} red=none rows={rows} dst={} a={} b={} n={n}
             vop op=copy dd=f16 da=f16 db=f16 red=set rows={rows} dst={} a={} b=0 n={n}
",
            dst / 4,
            A / 4,
            B / 4,
            D2 / 4,
            A / 4,
            G / 4,
            D2 / 4 + 0x200,
            A / 4,
            B / 4,
            D2 / 4 + 0x100,
            B / 4,
        );
        let cycles = compare(&body, &d);
        eprintln!("n {n} rows {rows}: {cycles} cycles\n{body}");
    }
    // 64 chunks more: 64 cycles more
    let d = data(&mut rng, false, 64);
    let swiglu = |n: u32| compare(&format!("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst={} a={} b={} n={n}\n", D / 4, A / 4, B / 4), &d);
    let (short, long) = (swiglu(512), swiglu(1024));
    assert_eq!(long - short, 64, "swiglu of 512 and 1024 FP16 elements: {short} and {long} cycles");
}

/// RoPE over many heads and rows: the heads after a row's first take their table lines from the unit's
/// table cache (`head_dim` 32 to 256), and the head sizes around it read them for every head (16: a single
/// chunk; 272: more chunks than the cache holds); in place and not, both styles. Every byte equal to the
/// functional simulator's.
#[test]
fn rope_over_many_heads_equals_the_functional_simulator() {
    if !models_or_skip("RTL rope over many heads vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x20_be);
    for (hd, heads, rows) in [(16u32, 5u32, 2u32), (32, 4, 3), (64, 12, 1), (64, 6, 2), (128, 8, 2), (256, 4, 2), (272, 3, 2)] {
        for (style, dst) in [("normal", D), ("neox", B), ("normal", B), ("neox", D)] {
            let d = data(&mut rng, false, hd);
            let body = format!("rope style={style} heads={heads} head_dim={hd} rows={rows} dst={} src={} table={}\n", dst / 4, B / 4, T / 4);
            let cycles = compare(&body, &d);
            eprintln!("rope {style} heads {heads} head_dim {hd} rows {rows} in place {}: {cycles} cycles", dst == B);
        }
    }
}

#[test]
fn argmax_picks_like_the_functional_simulator() {
    if !models_or_skip("RTL argmax ties, NaN, signed zeros") {
        return;
    }
    // ties go to the lowest index, NaN is never chosen, -0 equals +0, all NaN gives 0
    let mut d = vec![0u8; WINDOW];
    let f32s: [f32; 12] = [f32::NAN, -0.0, 0.0, -1.0, 0.0, -0.0, f32::NEG_INFINITY, -3.0, 0.0, f32::NAN, -0.0, -0.5];
    for (i, v) in f32s.iter().enumerate() {
        d[4 * i..4 * i + 4].copy_from_slice(&v.to_bits().to_le_bytes());
    }
    let f16s: [u16; 19] =
        [0x7E00, 0xFC00, 0x3C00, 0x7C00, 0x3C00, 0x7C00, 0x0001, 0x8000, 0x7E00, 0x4000, 0x7C00, 0, 0, 0, 0, 0, 0, 0, 0x7C00];
    for (i, v) in f16s.iter().enumerate() {
        d[0x100 + 2 * i..0x100 + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
    for i in 0..20 {
        d[0x200 + 2 * i..0x200 + 2 * i + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
    }
    compare(
        &format!(
            "argmax dt=f32 rd=r3 dst={} src=0 n=12\nargmax dt=f32 rd=r4 dst={} src=0 n=1\n\
             argmax dt=f16 rd=r6 dst={} src={} n=19\nargmax dt=f16 rd=r7 dst={} src={} n=20\n",
            D / 4,
            D / 4 + 1,
            D / 4 + 2,
            0x100 / 4,
            D / 4 + 3,
            0x200 / 4
        ),
        &d,
    );
}

#[test]
fn vector_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL vector unit traps") {
        return;
    }
    let mut rng = Rng(0x7ab6);
    let d = data(&mut rng, false, 16);
    for (what, m) in [
        ("vop n 0", "vop op=add dd=f16 da=f16 db=f16 rows=1 dst=0x1000 a=0 b=0x400 n=0"),
        ("vop rows 0", "vop op=add dd=f16 da=f16 db=f16 rows=0 dst=0x1000 a=0 b=0x400 n=8"),
        ("vop red on more rows than RED", "vop op=copy dd=f16 da=f16 db=f16 red=add rows=65 dst=0x1000 a=0 b=0 n=8"),
        ("vop a partly under dst", "vop op=silu dd=f32 da=f32 db=f16 rows=2 dst=0x10 a=0x12 b=0 n=16"),
        ("vop b partly under dst", "vop op=mul dd=f16 da=f16 db=f16 rows=1 dst=0x10 a=0x100 b=0x11 n=8"),
        ("vop same start, other length", "vop op=add dd=f32 da=f16 db=f16 rows=1 dst=0x10 a=0x10 b=0x100 n=8"),
        ("vop dst past the scratchpad", "vop op=copy dd=f32 da=f16 db=f16 rows=2 dst=0x3FFF8 a=0 b=0 n=8"),
        ("vop a past the scratchpad", "vop op=copy dd=f32 da=f16 db=f16 rows=2 dst=0 a=0x3FFFE b=0 n=8"),
        ("vop b past the scratchpad", "vop op=add dd=f32 da=f16 db=f32 rows=3 dst=0 a=0x100 b=0x3FFF0 n=8"),
        ("rmsnorm rows above RED", "rmsnorm dd=f16 ds=f16 rows=65 dst=0x1000 src=0 g=0x800 n=8 eps=1e-5"),
        ("rmsnorm gains under dst", "rmsnorm dd=f32 ds=f32 rows=1 dst=0x800 src=0 g=0x800 n=8 eps=1e-5"),
        ("rmsnorm gains past the scratchpad", "rmsnorm dd=f16 ds=f16 rows=1 dst=0x1000 src=0 g=0x3FFFC n=8 eps=1e-5"),
        ("rope head_dim not a multiple of 16", "rope style=normal heads=2 head_dim=8 rows=1 dst=0x1000 src=0 table=0xC00"),
        ("rope heads 0", "rope style=neox heads=0 head_dim=16 rows=1 dst=0x1000 src=0 table=0xC00"),
        ("rope table under dst", "rope style=neox heads=1 head_dim=16 rows=1 dst=0x1000 src=0 table=0x1002"),
        ("rope table past the scratchpad", "rope style=normal heads=1 head_dim=64 rows=2 dst=0x1000 src=0 table=0x3FFC0"),
        ("argmax n 0", "argmax dt=f32 rd=r2 dst=0x1000 src=0 n=0"),
        ("argmax dst past the scratchpad", "argmax dt=f32 rd=r2 dst=0x40000 src=0 n=4"),
        ("argmax src past the scratchpad", "argmax dt=f16 rd=r2 dst=0x1000 src=0x3FFFF n=4"),
    ] {
        compare(&format!("seti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6"), &d);
        eprintln!("trap equal: {what}");
    }
}

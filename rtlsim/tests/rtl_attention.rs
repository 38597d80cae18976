//! The attention unit in the RTL's `top` under Verilator against the functional simulator: `kvappend` (K and
//! V rows from the scratchpad to device memory at `k + P kv_stride`, the presence byte of position `P`), with
//! the CSRs set by `csrw` and `P` from a register, then every byte of the device-memory window, the
//! registers, INSTRET and the byte counters compared; and every `kvappend` trap by code, pc and ERROR_INFO.
//! `attn` over two layers with absent positions served by the history, short and longer than the unit's
//! K/V rings; `route` (decisions, predicates,
//! presence bytes, SKIPPED_BLOCKS) and its traps.

mod common;

use common::{compare_with_func, models_or_skip, WINDOW};
use opu_rtl::testing::Rng;

/// Device memory: the scratchpad's K/V source rows come from here, the caches and presence bytes go above.
const SRC: u64 = 0x0;
const KCACHE: u64 = 0x4000;
const VCACHE: u64 = 0x8000;
const PRESENCE: u64 = 0xF000;

#[test]
fn kvappend_equals_the_functional_simulator() {
    if !models_or_skip("RTL kvappend vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x4a7_0001);
    let data: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    // (the last cases: several KV heads per `kvappend`, the `attn_heads` CSR, up to Llama-7B's 8 of 128)
    for case in 0..16 {
        let hd = [16u32, 32, 48, 64, 128][rng.below(5) as usize];
        let heads = match case {
            0..10 => 1,
            15 => 8,
            _ => 1 + rng.below(u64::from(256 / hd).min(8)) as u32,
        };
        let hd = if case == 15 { 128 } else { hd };
        let stride = heads * hd * 2 / 32 * (1 + rng.below(if case == 15 { 1 } else { 2 }) as u32);
        let marked = case % 3 != 2;
        let mut p = format!(
            "load spm=0 mem={} bytes=8192 idx=r0 stride=0\n\
             csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=kv_stride rs=r0 imm={stride}\n",
            SRC / 32
        );
        if heads > 1 || case == 10 {
            // (case 10: the CSR written, with 1)
            p += &format!("csrw csr=attn_heads rs=r0 imm={heads}\n");
        }
        if marked {
            p += &format!("csrw csr=kv_present rs=r0 imm={}\n", PRESENCE / 32);
        }
        // a few positions, K and V from anywhere in the loaded words (word-aligned, not line-aligned)
        for _ in 0..3 {
            let pos = rng.below(if case == 15 { 8 } else { 20 });
            let (ks, vs) = (rng.below(400), 400 + rng.below(400));
            p += &format!(
                "seti rd=r5 imm={pos}\nkvappend pos=r5 ksrc={ks} vsrc={vs} k={} v={}\n",
                KCACHE / 32,
                VCACHE / 32
            );
        }
        // the K and V caches overlapping: V is written after K and wins
        p += &format!("seti rd=r6 imm=2\nkvappend pos=r6 ksrc=8 vsrc=900 k={} v={}\nend\n", KCACHE / 32, KCACHE / 32 + 1);
        let cycles = compare_with_func(&p, &data);
        eprintln!("case {case}: {heads} heads of {hd}, kv_stride {stride}, marked {marked}: {cycles} cycles");
    }
}

#[test]
fn kvappend_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL kvappend traps") {
        return;
    }
    let mut rng = Rng(0x4a7_0002);
    let data: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    let mem_lines = (1u64 << 30) / 32;
    for (what, setup, m) in [
        ("head_dim 0", "csrw csr=head_dim rs=r0 imm=0", "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".to_string()),
        ("head_dim not a multiple of 16", "csrw csr=head_dim rs=r0 imm=40", "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into()),
        ("head_dim above 1023", "csrw csr=head_dim rs=r0 imm=1024", "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into()),
        ("K source past the scratchpad", "csrw csr=head_dim rs=r0 imm=64", "kvappend pos=r5 ksrc=0x3FFF0 vsrc=64 k=0x200 v=0x400".into()),
        ("V source past the scratchpad", "csrw csr=head_dim rs=r0 imm=64", "kvappend pos=r5 ksrc=0 vsrc=0x3FFFF k=0x200 v=0x400".into()),
        ("K row past device memory", "csrw csr=head_dim rs=r0 imm=64", format!("kvappend pos=r5 ksrc=0 vsrc=64 k={} v=0x400", mem_lines - 13)),
        ("V row past device memory", "csrw csr=head_dim rs=r0 imm=64", format!("kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v={}", mem_lines - 3)),
        (
            "rows far past device memory (P x kv_stride beyond 32 bits)",
            "csrw csr=head_dim rs=r0 imm=64\nseti rd=r5 imm=0xFFFFFFFF\ncsrw csr=kv_stride rs=r0 imm=0xFFFFFFF0",
            "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into(),
        ),
        ("9 KV heads", "csrw csr=head_dim rs=r0 imm=16\nseti rd=r7 imm=9\ncsrw csr=attn_heads rs=r7 imm=0", "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into()),
        ("5 KV heads of 256", "csrw csr=head_dim rs=r0 imm=256\ncsrw csr=attn_heads rs=r0 imm=5", "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into()),
        ("4 KV heads: V source past the scratchpad", "csrw csr=head_dim rs=r0 imm=64\ncsrw csr=attn_heads rs=r0 imm=4", "kvappend pos=r5 ksrc=0 vsrc=0x3FFC0 k=0x200 v=0x400".into()),
        (
            "4 KV heads: K row past device memory",
            "csrw csr=head_dim rs=r0 imm=64\ncsrw csr=attn_heads rs=r0 imm=4",
            format!("kvappend pos=r5 ksrc=0 vsrc=64 k={} v=0x400", mem_lines - 20),
        ),
        (
            "presence byte past device memory",
            "csrw csr=head_dim rs=r0 imm=64\nseti rd=r5 imm=40\nseti rd=r7 imm=0x1FFFFFF\ncsrw csr=kv_present rs=r7 imm=1",
            "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into(),
        ),
    ] {
        let text = format!("seti rd=r5 imm=3\ncsrw csr=kv_stride rs=r0 imm=4\n{setup}\nseti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &data);
        eprintln!("trap equal: {what}");
    }
}

/// Where the `attn` tests put their operands: query heads, the two layers' K/V caches, presence bytes, the
/// outputs (device memory); the queries and outputs in the scratchpad.
const Q_MEM: u64 = 0x100;
const L0_K: u64 = 0x1000;
const L0_V: u64 = 0x3000;
const L1_K: u64 = 0x5000;
const L1_V: u64 = 0x7000;
const PRES: u64 = 0x9000;
const ATT_OUT: u64 = 0xA000;
const Q_SPM: u32 = 0x400;
const D_SPM: u32 = 0x1000;

/// Device memory for `attn`: FP16 queries and K/V rows of moderate values (random bytes elsewhere), and
/// presence bytes of which about one in three is 0.
fn attn_data(rng: &mut Rng) -> Vec<u8> {
    let mut d: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    let put = |d: &mut Vec<u8>, from: u64, bytes: u64, spread: f32, rng: &mut Rng| {
        for i in (0..bytes).step_by(2) {
            let v = opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * spread);
            d[(from + i) as usize..(from + i + 2) as usize].copy_from_slice(&v.to_le_bytes());
        }
    };
    put(&mut d, Q_MEM, 0xF00, 4.0, rng);
    for region in [L0_K, L0_V, L1_K, L1_V] {
        put(&mut d, region, 0x2000, 3.0, rng);
    }
    for i in 0..0x100 {
        d[(PRES + i) as usize] = u8::from(rng.below(3) != 0);
    }
    d
}

#[test]
fn attn_equals_the_functional_simulator() {
    if !models_or_skip("RTL attn vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x4a7_0003);
    for case in 0..8 {
        let d = attn_data(&mut rng);
        let hd = [16u32, 32, 64][rng.below(3) as usize];
        let group = 1 + rng.below(if case == 0 { 1 } else { 5 }) as u32;
        // kvh and head_dim within the history's width (256 FP16 at the sim preset)
        let kvh = rng.below(u64::from(256 / hd).min(4)) as u32;
        let len = 1 + rng.below(40) as u32;
        let stride = hd * 2 / 32 * (1 + rng.below(2) as u32);
        let head_bytes = group * hd * 2;
        let scale = (1.0 / (hd as f32).sqrt()).to_bits();
        // layer 0 with every position present fills the history; layer 1 skips some positions, which the
        // history serves (the hit counter is compared too)
        let mut p = format!(
            "load spm={} mem={} bytes={head_bytes} idx=r0 stride=0\n\
             csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=kv_stride rs=r0 imm={stride}\ncsrw csr=attn_scale rs=r0 imm={scale}\n\
             seti rd=r4 imm={len}\n\
             attn group={group} kvh={kvh} len=r4 dst={} q={} k={} v={}\n\
             store spm={} mem={} bytes={head_bytes} idx=r0 stride=0\n",
            Q_SPM / 4,
            Q_MEM / 32,
            D_SPM / 4,
            Q_SPM / 4,
            L0_K / 32,
            L0_V / 32,
            D_SPM / 4,
            ATT_OUT / 32,
        );
        p += &format!(
            "csrw csr=kv_present rs=r0 imm={}\n\
             attn group={group} kvh={kvh} len=r4 dst={} q={} k={} v={}\n\
             store spm={} mem={} bytes={head_bytes} idx=r0 stride=0\nend\n",
            PRES / 32,
            D_SPM / 4,
            Q_SPM / 4,
            L1_K / 32,
            L1_V / 32,
            D_SPM / 4,
            ATT_OUT / 32 + 0x40,
        );
        let cycles = compare_with_func(&p, &d);
        eprintln!("case {case}: head_dim {hd}, group {group}, kvh {kvh}, {len} positions, kv_stride {stride}: {cycles} cycles");
    }
}

/// Where the two-layer `attn` tests keep K and V (layer 0's K and V, layer 1's, [`TWO_LAYERS_REGION`] bytes
/// each), layer 1's presence bytes and the two layers' outputs.
const TWO_LAYERS: [u64; 4] = [0x1000, 0x4000, 0x7000, 0xA000];
const TWO_LAYERS_REGION: u64 = 0x3000;
const TWO_LAYERS_PRES: u64 = 0xD000;
const TWO_LAYERS_OUT: u64 = 0xE000;

/// Random bytes with finite FP16 queries at [`Q_MEM`] and K/V rows in [`TWO_LAYERS`], and `n` presence bytes
/// at [`TWO_LAYERS_PRES`], each absent with probability `1 / absent_one_in`.
fn two_layers_data(rng: &mut Rng, n: u64, absent_one_in: u64) -> Vec<u8> {
    let mut d: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    let spans = [(Q_MEM, 0xF00, 4.0)].into_iter().chain(TWO_LAYERS.map(|r| (r, TWO_LAYERS_REGION, 3.0)));
    for (from, bytes, spread) in spans {
        for i in (0..bytes).step_by(2) {
            let v = opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * spread);
            d[(from + i) as usize..(from + i + 2) as usize].copy_from_slice(&v.to_le_bytes());
        }
    }
    for i in 0..n {
        d[(TWO_LAYERS_PRES + i) as usize] = u8::from(rng.below(absent_one_in) != 0);
    }
    d
}

/// Two layers of `attn` over `len` positions of `heads` KV heads from `kvh` (each of `group` query heads of
/// `head_dim`; `attn_heads` is written only when `heads` > 1), each layer's outputs stored; layer 1 reads the
/// presence bytes when `presence`, else every position is present.
fn two_layers_program(hd: u32, group: u32, heads: u32, kvh: u32, len: u32, presence: bool) -> String {
    let (stride, bytes, scale) = (heads * hd * 2 / 32, heads * group * hd * 2, (1.0 / (hd as f32).sqrt()).to_bits());
    let attn = |k: u64, v: u64, to: u64| {
        format!(
            "attn group={group} kvh={kvh} len=r4 dst={} q={} k={} v={}\nstore spm={} mem={} bytes={bytes} idx=r0 stride=0\n",
            D_SPM / 4,
            Q_SPM / 4,
            k / 32,
            v / 32,
            D_SPM / 4,
            to / 32
        )
    };
    let heads_csr = if heads > 1 { format!("seti rd=r5 imm={heads}\ncsrw csr=attn_heads rs=r5 imm=0\n") } else { String::new() };
    let layer1 = if presence { format!("csrw csr=kv_present rs=r0 imm={}\n", TWO_LAYERS_PRES / 32) } else { String::new() };
    let [k0, v0, k1, v1] = TWO_LAYERS;
    format!(
        "load spm={} mem={} bytes={bytes} idx=r0 stride=0\n\
         csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=kv_stride rs=r0 imm={stride}\ncsrw csr=attn_scale rs=r0 imm={scale}\n\
         {heads_csr}seti rd=r4 imm={len}\n{}{layer1}{}end\n",
        Q_SPM / 4,
        Q_MEM / 32,
        attn(k0, v0, TWO_LAYERS_OUT),
        attn(k1, v1, TWO_LAYERS_OUT + 0x800),
    )
}

/// Long contexts: more positions than the K and V rings of the unit hold (256 lines each: 32 positions of
/// `head_dim` 128, 256 of 16), dense rows, two layers with absent positions in the second, against the
/// functional simulator. Covers the fetch running ahead of the scores and the updates and wrapping the rings,
/// updates that follow each other at once (many chunks) and after the lanes drain (few), and presence
/// lines past the first.
#[test]
fn attn_streams_long_contexts_equal_the_functional_simulator() {
    if !models_or_skip("RTL attn over long contexts vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x4a7_0005);
    for (case, (hd, group, kvh, len)) in [(128u32, 3u32, 1u32, 48u32), (16, 1, 3, 300), (64, 5, 2, 90), (32, 2, 0, 130)].into_iter().enumerate() {
        assert!(u64::from(len) * u64::from(hd) * 2 <= TWO_LAYERS_REGION);
        let d = two_layers_data(&mut rng, 0x200, 4);
        let cycles = compare_with_func(&two_layers_program(hd, group, 1, kvh, len, true), &d);
        eprintln!("case {case}: head_dim {hd}, group {group}, kvh {kvh}, {len} positions: {cycles} cycles");
    }
}

#[test]
fn attn_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL attn traps") {
        return;
    }
    let mut rng = Rng(0x4a7_0004);
    let d = attn_data(&mut rng);
    let mem_lines = (1u64 << 30) / 32;
    let ok = "csrw csr=head_dim rs=r0 imm=64\ncsrw csr=kv_stride rs=r0 imm=4\nseti rd=r4 imm=12";
    for (what, setup, m) in [
        ("head_dim not a multiple of 16", "csrw csr=head_dim rs=r0 imm=40\nseti rd=r4 imm=12".to_string(), "attn group=2 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180".to_string()),
        ("group 0", ok.into(), "attn group=0 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180".into()),
        ("no positions", "csrw csr=head_dim rs=r0 imm=64\nseti rd=r4 imm=0".into(), "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180".into()),
        ("destination past the scratchpad", ok.into(), "attn group=3 kvh=0 len=r4 dst=0x3FFD0 q=0x100 k=0x80 v=0x180".into()),
        ("queries past the scratchpad", ok.into(), "attn group=3 kvh=0 len=r4 dst=0x400 q=0x3FFF0 k=0x80 v=0x180".into()),
        (
            "presence bytes past device memory",
            format!("{ok}\nseti rd=r7 imm={}\ncsrw csr=kv_present rs=r7 imm=0", mem_lines - 0),
            "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180".into(),
        ),
        // position 7's K row is the first past device memory
        ("a K row past device memory", ok.into(), format!("attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k={} v=0x180", mem_lines - 30)),
        ("a V row past device memory", ok.into(), format!("attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v={}", mem_lines - 41)),
        // an absent position whose KV head does not fit the history's width (5 x 64 > 256)
        (
            "an absent position without a history slot",
            format!("{ok}\ncsrw csr=kv_present rs=r0 imm={}", PRES / 32),
            "attn group=1 kvh=4 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180".into(),
        ),
    ] {
        let text = format!("{setup}\nseti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &d);
        eprintln!("trap equal: {what}");
    }
}

/// Where the row-index tests put the index entries (u32 per position).
const INDEX: u64 = 0xB000;

/// `attn` and `kvappend` with a row index (`kv_index`): layer 0 dense, layer 1's present positions at rows
/// of the index (random, within the layer's region), some absent; a `kvappend` through the index and the
/// same `attn` one position longer reading it back; up to 130 positions (index lines past the first).
#[test]
fn attn_and_kvappend_through_a_row_index_equal_the_functional_simulator() {
    if !models_or_skip("RTL attn and kvappend with kv_index vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x4a7_0006);
    for case in 0..6 {
        let mut d = attn_data(&mut rng);
        let hd = [16u32, 32, 64][rng.below(3) as usize];
        let group = 1 + rng.below(4) as u32;
        let kvh = rng.below(u64::from(256 / hd).min(4)) as u32;
        let len = if case < 2 { 100 + rng.below(31) as u32 } else { 1 + rng.below(40) as u32 };
        let stride = hd * 2 / 32 * (1 + rng.below(2) as u32);
        let rows = 0x2000 / (u64::from(stride) * 32);
        for t in 0..=u64::from(len) {
            let row = (rng.below(rows) as u32).to_le_bytes();
            d[(INDEX + 4 * t) as usize..(INDEX + 4 * t + 4) as usize].copy_from_slice(&row);
        }
        // long cases: presence bytes past the first line
        for i in 0..0x100 {
            d[(PRES + i) as usize] = u8::from(rng.below(3) != 0);
        }
        let head_bytes = group * hd * 2;
        let scale = (1.0 / (hd as f32).sqrt()).to_bits();
        let attn = |to: u64| {
            format!(
                "attn group={group} kvh={kvh} len=r4 dst={} q={} k={} v={}
store spm={} mem={} bytes={head_bytes} idx=r0 stride=0
",
                D_SPM / 4,
                Q_SPM / 4,
                L1_K / 32,
                L1_V / 32,
                D_SPM / 4,
                to / 32
            )
        };
        // the queries and the appended K/V rows (from within the loaded bytes)
        let p = format!(
            "load spm={} mem={} bytes=1024 idx=r0 stride=0\n\
             csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=kv_stride rs=r0 imm={stride}\ncsrw csr=attn_scale rs=r0 imm={scale}\n\
             seti rd=r4 imm={len}\n\
             attn group={group} kvh={kvh} len=r4 dst={} q={} k={} v={}\n\
             csrw csr=kv_present rs=r0 imm={}\ncsrw csr=kv_index rs=r0 imm={}\n{}\
             kvappend pos=r4 ksrc={} vsrc={} k={} v={}\n\
             addi rd=r4 rs=r4 imm=1\n{}end\n",
            Q_SPM / 4,
            Q_MEM / 32,
            D_SPM / 4,
            Q_SPM / 4,
            L0_K / 32,
            L0_V / 32,
            PRES / 32,
            INDEX / 32,
            attn(ATT_OUT),
            Q_SPM / 4,
            Q_SPM / 4 + 8,
            L1_K / 32,
            L1_V / 32,
            attn(ATT_OUT + 0x800),
        );
        let cycles = compare_with_func(&p, &d);
        eprintln!("case {case}: head_dim {hd}, group {group}, kvh {kvh}, {len} positions, kv_stride {stride}, indexed: {cycles} cycles");
    }
}

#[test]
fn row_index_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL kv_index traps") {
        return;
    }
    let mut rng = Rng(0x4a7_0007);
    let mut d = attn_data(&mut rng);
    // entries: row t for position t, except position 9's, far past device memory
    for t in 0..16u64 {
        let row: u32 = if t == 9 { 0x0FFF_FFFF } else { t as u32 };
        d[(INDEX + 4 * t) as usize..(INDEX + 4 * t + 4) as usize].copy_from_slice(&row.to_le_bytes());
    }
    let mem_lines = (1u64 << 30) / 32;
    let ok = "csrw csr=head_dim rs=r0 imm=64\ncsrw csr=kv_stride rs=r0 imm=4\nseti rd=r4 imm=12";
    let idx = format!("csrw csr=kv_index rs=r0 imm={}", INDEX / 32);
    let attn = "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180";
    let kvappend = "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400";
    for (what, setup, m) in [
        ("the index past device memory", format!("{ok}\nseti rd=r7 imm={}\ncsrw csr=kv_index rs=r7 imm=0", mem_lines - 1), attn),
        ("a present position's row past device memory", format!("{ok}\n{idx}"), attn),
        ("with presence bytes", format!("{ok}\n{idx}\ncsrw csr=kv_present rs=r0 imm={}", PRES / 32), attn),
        ("kvappend: its row past device memory", format!("{ok}\n{idx}\nseti rd=r5 imm=9"), kvappend),
        ("kvappend: its entry past device memory", format!("{ok}\nseti rd=r7 imm={}\ncsrw csr=kv_index rs=r7 imm=0\nseti rd=r5 imm=8", mem_lines - 1), kvappend),
        ("kvappend through the index", format!("{ok}\n{idx}\nseti rd=r5 imm=3"), kvappend),
    ] {
        let text = format!("{setup}\nseti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &d);
        eprintln!("equal: {what}");
    }
}

/// Where the `route` tests put their operands: `x` (FP16), three routers (execute row, skip row, biases),
/// the presence bytes.
const X_MEM: u64 = 0x0;
const ROUTERS: [u64; 3] = [0x2000, 0x4800, 0x7000];
const R_PRES: u64 = 0xF000;

/// Device memory for `route`: moderate FP16 values for `x` and the routers (so both decisions occur),
/// random presence bytes.
fn route_data(rng: &mut Rng) -> Vec<u8> {
    let mut d: Vec<u8> = (0..WINDOW).map(|_| rng.next_u64() as u8).collect();
    for i in (0..0xE000u64).step_by(2) {
        let v = opu_hw::numerics::fp16::f32_to_f16((rng.f32_unit() - 0.5) * 2.0);
        d[i as usize..i as usize + 2].copy_from_slice(&v.to_le_bytes());
    }
    d
}

#[test]
fn route_equals_the_functional_simulator() {
    if !models_or_skip("RTL route vs functional simulator") {
        return;
    }
    let mut rng = Rng(0x4a7_0005);
    let mut skipped = 0;
    // 1 line, a few lines, SmolLM2's hidden size (36 lines), a chunk and one more line, two chunks and one
    for (case, cols) in [16u32, 48, 576, 1040, 2064, 64, 128, 256].into_iter().enumerate() {
        let d = route_data(&mut rng);
        let x_spm = rng.below(64) as u32 * 3; // any word address
        let mut p = format!("load spm={x_spm} mem={} bytes={} idx=r0 stride=0\n", X_MEM / 32, 2 * cols);
        if case % 4 != 3 {
            p += &format!("csrw csr=kv_present rs=r0 imm={}\n", R_PRES / 32);
        }
        // three routers on the same x: their decisions into p1..p3, each followed by the block it skips
        for (i, w) in ROUTERS.iter().enumerate() {
            let pos = rng.below(200);
            let mark = u8::from(i != 1 || case % 2 == 0);
            p += &format!(
                "seti rd=r5 imm={pos}\nroute pd=p{} mark={mark} pos=r5 src={x_spm} w={} cols={cols}\nskip pred=p{} count=1\naddi rd=r{} rs=r0 imm={}\n",
                i + 1,
                w / 32,
                i + 1,
                8 + i,
                100 + i
            );
        }
        p += "end\n";
        let cycles = compare_with_func(&p, &d);
        let mut func = opu_sim::FuncSim::new(&opu_hw::OverlayConfig::sim());
        common::run_program("functional simulator", &mut func, &opu_hw::isa::encode_program(&opu_hw::isa::asm::assemble(&p).unwrap()).unwrap(), &d);
        let s = opu_hw::device::Device::mmio_read(&mut func, opu_hw::regs::SKIPPED_BLOCKS).unwrap();
        skipped += s;
        eprintln!("case {case}: cols {cols}: {s} of 3 skipped, {cycles} cycles");
    }
    // both decisions occurred
    assert!((1..24).contains(&skipped), "{skipped} of 24 routes skipped");
}

#[test]
fn route_traps_equal_the_functional_simulator() {
    if !models_or_skip("RTL route traps") {
        return;
    }
    let mut rng = Rng(0x4a7_0006);
    let d = route_data(&mut rng);
    let mem_lines = (1u64 << 30) / 32;
    let pres = format!("csrw csr=kv_present rs=r0 imm={}", R_PRES / 32);
    for (what, setup, m) in [
        ("cols 0", pres.clone(), "route pd=p2 mark=1 pos=r5 src=0 w=0x100 cols=0".to_string()),
        ("cols not whole lines", pres.clone(), "route pd=p2 mark=1 pos=r5 src=0 w=0x100 cols=40".into()),
        ("x past the scratchpad", pres.clone(), "route pd=p2 mark=1 pos=r5 src=0x3FFF0 w=0x100 cols=64".into()),
        ("the weights past device memory", pres.clone(), format!("route pd=p2 mark=1 pos=r5 src=0 w={} cols=64", mem_lines - 8)),
        (
            "the presence byte past device memory",
            format!("seti rd=r7 imm={}\ncsrw csr=kv_present rs=r7 imm=0\nseti rd=r5 imm=40", mem_lines - 1),
            "route pd=p2 mark=1 pos=r5 src=0 w=0x100 cols=64".into(),
        ),
    ] {
        let text = format!("seti rd=r5 imm=3\n{setup}\nseti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &d);
        eprintln!("trap equal: {what}");
    }
}

/// `attn` over several KV heads (the `attn_heads` CSR): their rows side by side in each K (V) row, each KV
/// head's query heads padded to even in the unit (a score pass takes two of one KV head), the history slot
/// holding all of them. Two layers (the second with absent positions served by the history where its width
/// holds the heads, else every position present), against the functional simulator; and the traps of
/// `attn_heads` beyond the unit.
#[test]
fn attn_over_several_kv_heads_equals_the_functional_simulator() {
    if !models_or_skip("RTL attn over several KV heads vs functional simulator") {
        return;
    }
    let width = u64::from(opu_hw::OverlayConfig::sim().kv_history_width);
    let mut rng = Rng(0x4a7_0006);
    // (head_dim, group, heads, kvh, positions): Llama-7B's heads of 128 eight at a time, SmolLM2's three
    // groups of 3, sixteen padded heads of one and of two, odd groups
    let cases = [(128u32, 1u32, 8u32, 0u32, 6u32), (64, 3, 3, 0, 20), (32, 2, 4, 2, 40), (16, 1, 8, 0, 48), (64, 5, 2, 0, 12), (32, 3, 4, 1, 9), (16, 7, 2, 3, 17)];
    for (case, (hd, group, heads, kvh, len)) in cases.into_iter().enumerate() {
        assert!(opu_hw::isa::attn_heads_fit(heads.into(), group.into(), hd.into()));
        assert!(u64::from(len) * u64::from(heads * hd) * 2 <= TWO_LAYERS_REGION);
        let d = two_layers_data(&mut rng, 0x100, 3);
        let history = u64::from(kvh + heads) * u64::from(hd) <= width;
        let cycles = compare_with_func(&two_layers_program(hd, group, heads, kvh, len, history), &d);
        eprintln!("case {case}: head_dim {hd}, group {group}, {heads} KV heads from {kvh}, {len} positions, history {history}: {cycles} cycles");
    }
    let d = attn_data(&mut rng);
    let ok = "csrw csr=head_dim rs=r0 imm=64\ncsrw csr=kv_stride rs=r0 imm=12\nseti rd=r4 imm=12";
    for (what, heads, m) in [
        ("9 KV heads", 9u32, "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180"),
        ("3 KV heads of 5 (18 padded heads)", 3, "attn group=5 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180"),
        ("17 x 64 elements", 17, "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180"),
        ("a CSR past 4 bits", 0x1_0002, "attn group=1 kvh=0 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180"),
        ("queries of 6 heads past the scratchpad", 2, "attn group=3 kvh=0 len=r4 dst=0x400 q=0x3FF80 k=0x80 v=0x180"),
    ] {
        let text = format!("{ok}\nseti rd=r5 imm={heads}\ncsrw csr=attn_heads rs=r5 imm=0\nseti rd=r1 imm=5\n{m}\nseti rd=r2 imm=6\nend\n");
        compare_with_func(&text, &d);
        eprintln!("trap equal: {what}");
    }
    // KV heads 3 and 4 of 64 do not fit the history's 256 elements (kvh 3 alone would): an absent position traps
    let text = format!(
        "{ok}\nseti rd=r5 imm=2\ncsrw csr=attn_heads rs=r5 imm=0\ncsrw csr=kv_present rs=r0 imm={}\n\
         attn group=1 kvh=3 len=r4 dst=0x400 q=0x100 k=0x80 v=0x180\nend\n",
        PRES / 32
    );
    compare_with_func(&text, &d);
}

//! `attn` (presence bytes, KV history buffer, grouped heads), `kvappend`, and `route` + `skip`, against
//! OnlineSoftmax / attention_score / dot_f16 driven by hand.

mod common;

use common::*;
use opu_hw::device::Device;
use opu_hw::numerics::dot::dot_f16;
use opu_hw::numerics::fp16::f32_to_f16;
use opu_hw::numerics::vector::{attention_score, OnlineSoftmax};
use opu_hw::regs::{self, ErrorCode};
use opu_hw::OverlayConfig;

const HD: usize = 16; // one 32-byte line per K (V) row: kv_stride = 1
const GROUP: usize = 3;
const KVH: usize = 1;
const PRESENCE: u32 = 0x4000;

/// Positions' K and V rows in memory at lines `k`, `v` (one line each).
fn put_kv(sim: &mut opu_sim::FuncSim, k: u32, v: u32, ks: &[Vec<u16>], vs: &[Vec<u16>]) {
    for (t, (kt, vt)) in ks.iter().zip(vs).enumerate() {
        mem_put(sim, k + t as u32, &f16_bytes(kt));
        mem_put(sim, v + t as u32, &f16_bytes(vt));
    }
}

/// The attention output of each query head over the given K, V rows, by hand.
fn expected(q: &[Vec<u16>], ks: &[Vec<u16>], vs: &[Vec<u16>], scale: f32) -> Vec<u16> {
    let mut out = Vec::new();
    for qg in q {
        let mut sm = OnlineSoftmax::new(HD);
        for (kt, vt) in ks.iter().zip(vs) {
            sm.push(attention_score(qg, kt, scale), vt);
        }
        out.extend(sm.finish().iter().map(|&y| f32_to_f16(y)));
    }
    out
}

#[test]
fn skipped_positions_come_from_the_history_of_the_last_layer_that_executed() {
    let mut r = rng(20);
    let mut sim = sim();
    let len = 6usize;
    let gen = |r: &mut rand::rngs::StdRng| -> Vec<Vec<u16>> { (0..len).map(|_| small_f16s(r, HD, 2.0)).collect() };
    let (k0, v0, k1, v1) = (gen(&mut r), gen(&mut r), gen(&mut r), gen(&mut r));
    put_kv(&mut sim, 0x2000, 0x3000, &k0, &v0); // layer 0
    put_kv(&mut sim, 0x5000, 0x6000, &k1, &v1); // layer 1
    let present = [1u8, 0, 1, 0, 0, 1];
    mem_put(&mut sim, PRESENCE, &present);
    let q: Vec<Vec<u16>> = (0..GROUP).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
    let scale = 0.25f32;
    let text = format!(
        "csrw csr=head_dim rs=r0 imm={HD}
         csrw csr=kv_stride rs=r0 imm=1
         csrw csr=attn_scale rs=r0 imm={:#x}
         addi rd=r1 rs=r9 imm=1                         ; len = position + 1
         attn group={GROUP} kvh={KVH} len=r1 dst=0x100 q=0 k=0x2000 v=0x3000
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         attn group={GROUP} kvh={KVH} len=r1 dst=0x200 q=0 k=0x5000 v=0x6000
         end",
        scale.to_bits()
    );
    run_ok(&mut sim, &text, &[0, len as u32 - 1]);

    // Layer 0: every position present, read from memory, copied into the history.
    let want0 = expected(&q, &k0, &v0, scale);
    assert_eq!(to_f16s(&spm_get(&sim, 0x100, 2 * GROUP * HD)), want0);
    // Layer 1: absent positions 1, 3, 4 take layer 0's K/V from the history.
    let pick =
        |t: usize, a: &Vec<Vec<u16>>, b: &Vec<Vec<u16>>| if present[t] != 0 { b[t].clone() } else { a[t].clone() };
    let k_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, &k0, &k1)).collect();
    let v_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, &v0, &v1)).collect();
    let want1 = expected(&q, &k_eff, &v_eff, scale);
    assert_eq!(to_f16s(&spm_get(&sim, 0x200, 2 * GROUP * HD)), want1);
    assert_ne!(want0, want1);
    // The history now holds the latest layer that executed for each position, at offset kvh x head_dim.
    for t in 0..len {
        let (hk, hv) = sim.history(t);
        assert_eq!(&hk[KVH * HD..(KVH + 1) * HD], &k_eff[t][..], "slot {t}");
        assert_eq!(&hv[KVH * HD..(KVH + 1) * HD], &v_eff[t][..], "slot {t}");
    }
    let s = sim.stats();
    assert_eq!(s.kv_history_hits, 3);
    assert_eq!(sim.mmio_read(regs::KV_HISTORY_HITS).unwrap(), 3);
    assert_eq!(s.macs, 2 * (2 * GROUP * len * HD) as u64);
    // Layer 0: 6 K and 6 V rows; layer 1: 6 presence bytes and 3 K, 3 V rows.
    assert_eq!(s.bytes_read, (12 * 32 + 6 + 6 * 32) as u64);
    assert_eq!(s.by_class["attention"], 2);
}

#[test]
fn a_position_without_a_history_slot_traps() {
    let mut r = rng(21);
    let mut config = OverlayConfig::sim();
    config.kv_history_slots = 4;
    let mut sim = opu_sim::FuncSim::new(&config);
    let ks: Vec<Vec<u16>> = (0..8).map(|_| small_f16s(&mut r, HD, 1.0)).collect();
    put_kv(&mut sim, 0x2000, 0x3000, &ks, &ks);
    mem_put(&mut sim, PRESENCE, &[1, 1, 1, 1, 1, 0, 1, 1]);
    let prologue = format!("csrw csr=head_dim rs=r0 imm={HD}\ncsrw csr=kv_stride rs=r0 imm=1\nseti rd=r1 imm=8\n");
    // All present: positions 4.. have no slot but need none.
    run_ok(&mut sim, &format!("{prologue}attn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend"), &[]);
    // Position 5 absent, and slots stop at 4.
    let res = run(
        &mut sim,
        &format!("{prologue}csrw csr=kv_present rs=r0 imm={PRESENCE}\nattn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend"),
        &[],
    );
    expect_trap(&mut sim, res, ErrorCode::HistoryOverflow, 4, 5);
    // A KV head beyond the history width: (16 + 1) x 16 > 256, so even position 0 has no slot.
    mem_put(&mut sim, PRESENCE, &[0]);
    let res = run(
        &mut sim,
        &format!("{prologue}csrw csr=kv_present rs=r0 imm={PRESENCE}\nattn group=1 kvh=16 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend"),
        &[],
    );
    expect_trap(&mut sim, res, ErrorCode::HistoryOverflow, 4, 0);
    assert_eq!(sim.stats().kv_history_hits, 0, "a trapping instruction counts nothing");
}

#[test]
fn attention_operand_rules() {
    let mut sim = sim();
    // head_dim not a multiple of 16, or zero; len register zero.
    for (hd, len) in [(24u32, 4u32), (0, 4), (16, 0)] {
        let text = format!("csrw csr=head_dim rs=r0 imm={hd}\nseti rd=r1 imm={len}\nattn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend");
        let res = run(&mut sim, &text, &[]);
        expect_trap(&mut sim, res, ErrorCode::BadOperand, 2, 0);
    }
    let res = run(&mut sim, "csrw csr=head_dim rs=r0 imm=16\nkvappend pos=r0 ksrc=0 vsrc=0 k=0 v=0\nkvappend pos=r0 ksrc=0 vsrc=0 k=0 v=0\nend", &[]);
    assert!(res.is_ok());
    let res = run(&mut sim, "csrw csr=head_dim rs=r0 imm=1024\nkvappend pos=r0 ksrc=0 vsrc=0 k=0 v=0\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::BadOperand, 1, 0);
}

#[test]
fn kvappend_stores_one_head_and_marks_the_position() {
    let mut r = rng(22);
    let mut sim = sim();
    let k = small_f16s(&mut r, 32, 1.0);
    let v = small_f16s(&mut r, 32, 1.0);
    spm_put(&mut sim, 0x10, &f16_bytes(&k));
    spm_put(&mut sim, 0x30, &f16_bytes(&v));
    let text = format!(
        "csrw csr=head_dim rs=r0 imm=32
         csrw csr=kv_stride rs=r0 imm=3
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         kvappend pos=r9 ksrc=0x10 vsrc=0x30 k=0x2000 v=0x3000
         end"
    );
    run_ok(&mut sim, &text, &[0, 5]);
    assert_eq!(mem_get(&mut sim, 0x2000 + 5 * 3, 64), f16_bytes(&k));
    assert_eq!(mem_get(&mut sim, 0x3000 + 5 * 3, 64), f16_bytes(&v));
    assert_eq!(mem_get(&mut sim, PRESENCE, 8), [0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(sim.stats().bytes_written, 2 * 64 + 1);
    // Without presence tracking no byte is written.
    mem_put(&mut sim, PRESENCE, &[0; 8]);
    // (CSRs start at 0 in every run: kv_stride 0 puts every position on the same line.)
    run_ok(
        &mut sim,
        "csrw csr=head_dim rs=r0 imm=32\nkvappend pos=r9 ksrc=0x30 vsrc=0x10 k=0x2000 v=0x3000\nend",
        &[0, 2],
    );
    assert_eq!(mem_get(&mut sim, PRESENCE, 8), [0; 8]);
    assert_eq!(mem_get(&mut sim, 0x2000, 64), f16_bytes(&v));
    assert_eq!(mem_get(&mut sim, 0x3000, 64), f16_bytes(&k));
    assert_eq!(sim.stats().bytes_written, 2 * 64);
}

/// `kvappend` with `attn_heads` = 3: the three KV heads' K (V) rows, side by side in the scratchpad, land side
/// by side in the position's row, and nothing around them; the heads beyond the attention unit trap.
#[test]
fn kvappend_over_several_kv_heads_stores_their_rows_side_by_side() {
    let mut r = rng(23);
    let mut sim = sim();
    // 3 heads of 32: 192 bytes per K (V) row, 6 lines; kv_stride 8 leaves 2 lines between the rows
    let k = small_f16s(&mut r, 96, 1.0);
    let v = small_f16s(&mut r, 96, 1.0);
    spm_put(&mut sim, 0x10, &f16_bytes(&k));
    spm_put(&mut sim, 0x80, &f16_bytes(&v));
    let fill = vec![0xA5u8; 64 * 32];
    mem_put(&mut sim, 0x2000, &fill);
    mem_put(&mut sim, 0x3000, &fill);
    let text = format!(
        "csrw csr=head_dim rs=r0 imm=32
         csrw csr=kv_stride rs=r0 imm=8
         csrw csr=attn_heads rs=r0 imm=3
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         kvappend pos=r9 ksrc=0x10 vsrc=0x80 k=0x2000 v=0x3000
         end"
    );
    run_ok(&mut sim, &text, &[0, 4]);
    for (base, want) in [(0x2000, &k), (0x3000, &v)] {
        assert_eq!(mem_get(&mut sim, base + 4 * 8, 192), f16_bytes(want));
        // the lines before and after the row are as they were
        assert_eq!(mem_get(&mut sim, base, 4 * 8 * 32), fill[..4 * 8 * 32]);
        assert_eq!(mem_get(&mut sim, base + 4 * 8 + 6, 2 * 32), fill[..64]);
    }
    assert_eq!(mem_get(&mut sim, PRESENCE, 8), [0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(sim.stats().bytes_written, 2 * 192 + 1);
    // attn_heads 0 counts as 1 head; 9 heads, or 5 of 256 (1,280 elements), do not fit
    run_ok(&mut sim, "csrw csr=head_dim rs=r0 imm=32\ncsrw csr=attn_heads rs=r0 imm=0\nkvappend pos=r9 ksrc=0x10 vsrc=0x80 k=0x2000 v=0x3000\nend", &[0, 1]);
    assert_eq!(sim.stats().bytes_written, 2 * 64);
    for (heads, hd) in [(9u32, 16u32), (5, 256)] {
        let text = format!("csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=attn_heads rs=r0 imm={heads}\nkvappend pos=r0 ksrc=0 vsrc=0 k=0x2000 v=0x3000\nend");
        let res = run(&mut sim, &text, &[]);
        expect_trap(&mut sim, res, ErrorCode::BadOperand, 2, 0);
    }
}

/// Router weights: execute logit, skip logit, then the two biases.
fn router(we: &[u16], ws: &[u16], be: u16, bs: u16) -> Vec<u8> {
    let mut b = f16_bytes(we);
    b.extend(f16_bytes(ws));
    b.extend(f16_bytes(&[be, bs]));
    b
}

#[test]
fn route_decides_marks_and_skip_skips() {
    let mut r = rng(23);
    let cols = 32usize;
    let x = small_f16s(&mut r, cols, 2.0);
    let w = small_f16s(&mut r, cols, 1.0);
    let logit = |w: &[u16], b: u16| {
        let mut acc = dot_f16(&x, w);
        acc.add_f16(b);
        acc.to_f32()
    };
    let program = format!(
        "csrw csr=kv_present rs=r0 imm={PRESENCE}
         route pd=p2 mark=1 pos=r9 src=0 w=0x7000 cols={cols}
         skip pred=p2 count=2
         seti rd=r1 imm=11
         seti rd=r2 imm=22
         seti rd=r3 imm=33
         end"
    );
    let neg: Vec<u16> = w.iter().map(|&v| v ^ 0x8000).collect();
    // Skip logit = -execute logit + bias; biases larger than the dot product decide.
    let big = logit(&w, 0).abs() + 1.0;
    for (skip, be, bs) in [(true, f32_to_f16(-big), f32_to_f16(big)), (false, f32_to_f16(big), f32_to_f16(-big))] {
        let mut sim = sim();
        spm_put(&mut sim, 0, &f16_bytes(&x));
        mem_put(&mut sim, 0x7000, &router(&w, &neg, be, bs));
        mem_put(&mut sim, PRESENCE, &[7; 8]);
        let (le, ls) = (logit(&w, be), logit(&neg, bs));
        assert_eq!(ls > le, skip, "test data: logits {le} {ls}");
        let c = run_ok(&mut sim, &program, &[0, 3]);
        assert_eq!(sim.pred(2), skip);
        let regs = (sim.reg(1), sim.reg(2), sim.reg(3));
        assert_eq!(regs, if skip { (0, 0, 33) } else { (11, 22, 33) });
        assert_eq!(c.instructions, if skip { 5 } else { 7 }, "skipped instructions do not retire");
        assert_eq!(mem_get(&mut sim, PRESENCE, 8), [7, 7, 7, u8::from(!skip), 7, 7, 7, 7]);
        let s = sim.stats();
        assert_eq!(s.skipped_blocks, u64::from(skip));
        assert_eq!(sim.mmio_read(regs::SKIPPED_BLOCKS).unwrap(), u32::from(skip));
        assert_eq!(s.bytes_read, (4 * cols + 4) as u64);
        assert_eq!(s.bytes_written, 1);
        assert_eq!(s.macs, 0, "docs/isa.md counts no MACS for route");
    }
}

#[test]
fn route_without_presence_tracking_marks_nothing_and_nan_executes() {
    let mut sim = sim();
    let x = vec![f32_to_f16(1.0); 32];
    spm_put(&mut sim, 0, &f16_bytes(&x));
    // A NaN bias makes the skip logit NaN: execute.
    mem_put(&mut sim, 0x7000, &router(&[0; 32], &[0; 32], 0, 0x7E00));
    run_ok(&mut sim, "route pd=p1 mark=1 pos=r0 src=0 w=0x7000 cols=32\nend", &[]);
    assert!(!sim.pred(1));
    assert_eq!(sim.stats().bytes_written, 0);
}

/// The history buffer serves skipped positions in a decode step, as a compiled model uses it: layer 0 always
/// executes (and refreshes every slot), later layers skip some tokens' attention.
#[test]
fn history_is_refreshed_by_every_run() {
    let mut r = rng(24);
    let mut sim = sim();
    let ks: Vec<Vec<u16>> = (0..3).map(|_| small_f16s(&mut r, HD, 1.0)).collect();
    put_kv(&mut sim, 0x2000, 0x3000, &ks, &ks);
    // Garbage in the history before the run: layer 0 overwrites it.
    sim.history_mut(1).0.fill(0x3C00);
    sim.history_mut(1).1.fill(0x3C00);
    run_ok(&mut sim, "csrw csr=head_dim rs=r0 imm=16\ncsrw csr=kv_stride rs=r0 imm=1\nseti rd=r1 imm=3\nattn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend", &[]);
    assert_eq!(&sim.history(1).0[..HD], &ks[1][..]);
}

/// The simulator defers a refresh's copy until the slot is read (`history_refresh`): rows written after
/// the refresh by the host or by `kvappend` or a `store`, and a slot the host writes, leave the slot as the
/// refresh made it, and the next refresh replaces it, as the history and the outputs of a later layer that
/// reads the slots show.
#[test]
fn a_refresh_sees_every_write_to_the_rows_and_the_slots() {
    let mut r = rng(26);
    let mut sim = sim();
    let len = 4usize;
    let gen = |r: &mut rand::rngs::StdRng| -> Vec<Vec<u16>> { (0..len).map(|_| small_f16s(r, HD, 2.0)).collect() };
    let (mut ks, mut vs) = (gen(&mut r), gen(&mut r));
    put_kv(&mut sim, 0x2000, 0x3000, &ks, &vs);
    let q: Vec<Vec<u16>> = (0..GROUP).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
    let scale = 0.5f32;
    // the layer that refreshes every slot, then one that reads positions 1 and 2 from their slots only
    let attn = |extra: &str| {
        format!(
            "csrw csr=head_dim rs=r0 imm={HD}
             csrw csr=kv_stride rs=r0 imm=1
             csrw csr=attn_scale rs=r0 imm={:#x}
             seti rd=r1 imm={len}
             {extra}
             attn group={GROUP} kvh={KVH} len=r1 dst=0x100 q=0 k=0x2000 v=0x3000
             csrw csr=kv_present rs=r0 imm={PRESENCE}
             attn group={GROUP} kvh={KVH} len=r1 dst=0x200 q=0 k=0x5000 v=0x6000
             end",
            scale.to_bits()
        )
    };
    mem_put(&mut sim, PRESENCE, &[1, 0, 0, 1]);
    let (k1, v1) = (gen(&mut r), gen(&mut r));
    put_kv(&mut sim, 0x5000, 0x6000, &k1, &v1);
    let check = |sim: &mut opu_sim::FuncSim, ks: &[Vec<u16>], vs: &[Vec<u16>], what: &str| {
        assert_eq!(to_f16s(&spm_get(sim, 0x100, 2 * GROUP * HD)), expected(&q, ks, vs, scale), "{what}: layer 0");
        let pick = |t: usize, a: &[Vec<u16>], b: &[Vec<u16>]| if t == 1 || t == 2 { a[t].clone() } else { b[t].clone() };
        let k_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, ks, &k1)).collect();
        let v_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, vs, &v1)).collect();
        assert_eq!(to_f16s(&spm_get(sim, 0x200, 2 * GROUP * HD)), expected(&q, &k_eff, &v_eff, scale), "{what}: layer 1");
        for t in [1, 2] {
            assert_eq!(&sim.history(t).0[KVH * HD..(KVH + 1) * HD], &ks[t][..], "{what}: slot {t}");
        }
    };
    run_ok(&mut sim, &attn(""), &[]);
    check(&mut sim, &ks, &vs, "first run");
    run_ok(&mut sim, &attn(""), &[]);
    check(&mut sim, &ks, &vs, "the same rows again");
    // the host writes position 1's K row
    ks[1] = small_f16s(&mut r, HD, 2.0);
    mem_put(&mut sim, 0x2001, &f16_bytes(&ks[1]));
    run_ok(&mut sim, &attn(""), &[]);
    check(&mut sim, &ks, &vs, "a host write");
    // kvappend writes position 2's K and V rows before the layer reads them
    ks[2] = small_f16s(&mut r, HD, 2.0);
    vs[2] = small_f16s(&mut r, HD, 2.0);
    spm_put(&mut sim, 0x300, &f16_bytes(&ks[2]));
    spm_put(&mut sim, 0x340, &f16_bytes(&vs[2]));
    run_ok(&mut sim, &attn("seti rd=r2 imm=2\nkvappend pos=r2 ksrc=0x300 vsrc=0x340 k=0x2000 v=0x3000"), &[]);
    check(&mut sim, &ks, &vs, "kvappend");
    // the host scribbles on slot 1: the next refresh copies the rows again
    sim.history_mut(1).0.fill(0x3C00);
    run_ok(&mut sim, &attn(""), &[]);
    check(&mut sim, &ks, &vs, "a host write into the slot");
}

/// A slot holds the rows as they were at its refresh, even where they are written before the slot is read:
/// by `kvappend` and `store` between the refreshing layer and the layer that reads the slot, and by the host
/// after the run.
#[test]
fn a_slot_keeps_the_rows_of_its_refresh_when_they_are_written_later() {
    let mut r = rng(27);
    let mut sim = sim();
    let len = 4usize;
    let gen = |r: &mut rand::rngs::StdRng| -> Vec<Vec<u16>> { (0..len).map(|_| small_f16s(r, HD, 2.0)).collect() };
    let (k0, v0, k1, v1) = (gen(&mut r), gen(&mut r), gen(&mut r), gen(&mut r));
    put_kv(&mut sim, 0x2000, 0x3000, &k0, &v0);
    put_kv(&mut sim, 0x5000, 0x6000, &k1, &v1);
    let q: Vec<Vec<u16>> = (0..GROUP).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
    // new rows for positions 3 (kvappend) and 2 (store), written after layer 0 refreshed their slots
    let (k_new, v_new, k_st) = (small_f16s(&mut r, HD, 2.0), small_f16s(&mut r, HD, 2.0), small_f16s(&mut r, HD, 2.0));
    spm_put(&mut sim, 0x300, &f16_bytes(&k_new));
    spm_put(&mut sim, 0x340, &f16_bytes(&v_new));
    spm_put(&mut sim, 0x380, &f16_bytes(&k_st));
    mem_put(&mut sim, PRESENCE, &[1, 1, 0, 0]);
    let scale = 0.5f32;
    let text = format!(
        "csrw csr=head_dim rs=r0 imm={HD}
         csrw csr=kv_stride rs=r0 imm=1
         csrw csr=attn_scale rs=r0 imm={:#x}
         seti rd=r1 imm={len}
         attn group={GROUP} kvh={KVH} len=r1 dst=0x100 q=0 k=0x2000 v=0x3000
         seti rd=r2 imm=3
         kvappend pos=r2 ksrc=0x300 vsrc=0x340 k=0x2000 v=0x3000
         store spm=0x380 mem=0x2002 bytes={} idx=r0 stride=0
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         attn group={GROUP} kvh={KVH} len=r1 dst=0x200 q=0 k=0x5000 v=0x6000
         end",
        scale.to_bits(),
        2 * HD
    );
    run_ok(&mut sim, &text, &[]);
    // layer 1 reads positions 2 and 3 from their slots: layer 0's rows as they were at its refresh
    let k_eff = vec![k1[0].clone(), k1[1].clone(), k0[2].clone(), k0[3].clone()];
    let v_eff = vec![v1[0].clone(), v1[1].clone(), v0[2].clone(), v0[3].clone()];
    assert_eq!(to_f16s(&spm_get(&sim, 0x200, 2 * GROUP * HD)), expected(&q, &k_eff, &v_eff, scale));
    // slots 0 and 1 were refreshed by layer 1; the host now writes those rows: the slots keep the old ones
    mem_put(&mut sim, 0x5000, &f16_bytes(&k_new));
    mem_put(&mut sim, 0x6001, &f16_bytes(&v_new));
    for t in 0..len {
        let (hk, hv) = sim.history(t);
        assert_eq!((&hk[KVH * HD..(KVH + 1) * HD], &hv[KVH * HD..(KVH + 1) * HD]), (&k_eff[t][..], &v_eff[t][..]), "slot {t}");
    }
}

/// More positions than the simulator gathers at a time, on 1 and 2 threads; positions beyond the history
/// slots (2048) are read from memory and have no slot to refresh.
#[test]
fn many_positions_in_chunks_and_threads_match_the_reference() {
    let mut r = rng(25);
    let len = 5000usize;
    let ks: Vec<Vec<u16>> = (0..len).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    let vs: Vec<Vec<u16>> = (0..len).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    let q: Vec<Vec<u16>> = (0..2).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    let want = expected(&q, &ks, &vs, 0.25);
    for threads in [1, 2] {
        let mut sim = sim();
        sim.set_threads(threads);
        put_kv(&mut sim, 0x2000, 0x10000, &ks, &vs);
        spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
        run_ok(
            &mut sim,
            &format!(
                "csrw csr=head_dim rs=r0 imm={HD}\ncsrw csr=kv_stride rs=r0 imm=1\ncsrw csr=attn_scale rs=r0 imm={:#x}
                 attn group=2 kvh=0 len=r8 dst=0x100 q=0 k=0x2000 v=0x10000\nend",
                0.25f32.to_bits()
            ),
            &[len as u32],
        );
        assert_eq!(to_f16s(&spm_get(&sim, 0x100, 2 * 2 * HD)), want, "{threads} threads");
        assert_eq!(&sim.history(2047).0[..HD], &ks[2047][..]);
        assert_eq!(sim.stats().bytes_read, (2 * len * 32) as u64);
    }
}

const INDEX: u32 = 0x4800;

#[test]
fn the_row_index_places_each_positions_kv_and_attn_and_kvappend_follow_it() {
    let mut r = rng(24);
    let mut sim = sim();
    let len = 6usize;
    let gen = |r: &mut rand::rngs::StdRng| -> Vec<Vec<u16>> { (0..len).map(|_| small_f16s(r, HD, 2.0)).collect() };
    let (k0, v0, k1, v1) = (gen(&mut r), gen(&mut r), gen(&mut r), gen(&mut r));
    // Layer 0 dense (row = position); layer 1's present positions at rows of a shared pool, in any order.
    put_kv(&mut sim, 0x2000, 0x3000, &k0, &v0);
    let present = [1u8, 0, 1, 1, 0, 1];
    let rows = [5u32, 77, 0, 9, 0xFFFF_FFFF, 2]; // absent positions' entries are never used
    for t in 0..len {
        if present[t] != 0 {
            mem_put(&mut sim, 0x5000 + rows[t], &f16_bytes(&k1[t]));
            mem_put(&mut sim, 0x6000 + rows[t], &f16_bytes(&v1[t]));
        }
    }
    mem_put(&mut sim, PRESENCE, &present);
    mem_put(&mut sim, INDEX, &rows.iter().flat_map(|r| r.to_le_bytes()).collect::<Vec<u8>>());
    let q: Vec<Vec<u16>> = (0..GROUP).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
    let (k_new, v_new) = (small_f16s(&mut r, HD, 1.0), small_f16s(&mut r, HD, 1.0));
    spm_put(&mut sim, 0x300, &f16_bytes(&k_new));
    spm_put(&mut sim, 0x310, &f16_bytes(&v_new));
    // position 6's row, for the kvappend
    let mut index = mem_get(&mut sim, INDEX, 32);
    index[24..28].copy_from_slice(&13u32.to_le_bytes());
    mem_put(&mut sim, INDEX, &index);
    let scale = 0.25f32;
    let text = format!(
        "csrw csr=head_dim rs=r0 imm={HD}
         csrw csr=kv_stride rs=r0 imm=1
         csrw csr=attn_scale rs=r0 imm={:#x}
         addi rd=r1 rs=r9 imm=1
         attn group={GROUP} kvh={KVH} len=r1 dst=0x100 q=0 k=0x2000 v=0x3000
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         csrw csr=kv_index rs=r0 imm={INDEX}
         attn group={GROUP} kvh={KVH} len=r1 dst=0x200 q=0 k=0x5000 v=0x6000
         addi rd=r2 rs=r9 imm=1
         kvappend pos=r2 ksrc=0x300 vsrc=0x310 k=0x5000 v=0x6000
         end",
        scale.to_bits()
    );
    run_ok(&mut sim, &text, &[0, len as u32 - 1]);
    let pick =
        |t: usize, a: &Vec<Vec<u16>>, b: &Vec<Vec<u16>>| if present[t] != 0 { b[t].clone() } else { a[t].clone() };
    let k_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, &k0, &k1)).collect();
    let v_eff: Vec<Vec<u16>> = (0..len).map(|t| pick(t, &v0, &v1)).collect();
    assert_eq!(to_f16s(&spm_get(&sim, 0x200, 2 * GROUP * HD)), expected(&q, &k_eff, &v_eff, scale));
    // kvappend wrote position 6 at its row 13 and marked it
    assert_eq!(mem_get(&mut sim, 0x5000 + 13, 32), f16_bytes(&k_new));
    assert_eq!(mem_get(&mut sim, 0x6000 + 13, 32), f16_bytes(&v_new));
    assert_eq!(mem_get(&mut sim, PRESENCE, 7)[6], 1);
    let s = sim.stats();
    assert_eq!(s.kv_history_hits, 2);
    // layer 0: 12 rows; layer 1: 6 presence bytes, 6 index entries, 4 K and 4 V rows; kvappend: its entry
    assert_eq!(s.bytes_read, (12 * 32 + 6 + 6 * 4 + 8 * 32 + 4) as u64);
    assert_eq!(s.bytes_written, (2 * 32 + 1) as u64);
}

#[test]
fn a_row_index_outside_device_memory_traps() {
    let mut sim = sim();
    let mem_lines = (OverlayConfig::sim().device_memory_bytes / 32) as u32;
    let prologue = format!("csrw csr=head_dim rs=r0 imm={HD}\ncsrw csr=kv_stride rs=r0 imm=1\nseti rd=r1 imm=4\n");
    // the index span itself: 9 entries (36 bytes) from the last line
    let at = mem_lines - 1;
    let text = format!("{prologue}csrw csr=kv_index rs=r0 imm={at}\nseti rd=r1 imm=9\nattn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend");
    let res = run(&mut sim, &text, &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 5, u64::from(mem_lines) * 32);
    // an entry whose row lies past device memory: the first faulting byte of its K row
    mem_put(&mut sim, INDEX, &[0, 0, 0, 0, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x0F, 2, 0, 0, 0]);
    let text = format!("{prologue}csrw csr=kv_index rs=r0 imm={INDEX}\nattn group=1 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend");
    let res = run(&mut sim, &text, &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 4, (0x2000u64 + 0x0FFF_FFFF) * 32);
    // kvappend reads its position's entry: position 2's row is past memory too
    let text = format!("{prologue}csrw csr=kv_index rs=r0 imm={INDEX}\nseti rd=r2 imm=2\nkvappend pos=r2 ksrc=0 vsrc=0 k=0x2000 v=0x3000\nend");
    let res = run(&mut sim, &text, &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 5, (0x2000u64 + 0x0FFF_FFFF) * 32);
    // and its entry past memory
    let text = format!("{prologue}csrw csr=kv_index rs=r0 imm={at}\nseti rd=r2 imm=8\nkvappend pos=r2 ksrc=0 vsrc=0 k=0x2000 v=0x3000\nend");
    let res = run(&mut sim, &text, &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 5, u64::from(at) * 32 + 32);
    assert_eq!(sim.stats().bytes_written, 0);
}

/// `attn` over several KV heads (`attn_heads`): each head's rows side by side in a position's K (V) row,
/// each with its group of query heads, is the attention of each head by hand (`opu_hw` arithmetic), layer 1
/// with absent positions served by the history (all heads' slots), counters per KV head.
#[test]
fn several_kv_heads_are_each_head_computed_by_hand() {
    const HEADS: usize = 3;
    const G: usize = 2;
    // KV heads 12..15 of 16: the history's 256 elements hold them all (the last one exactly)
    const KVH: usize = 12;
    let mut r = rng(26);
    let mut sim = sim();
    let len = 5usize;
    // rows[t][h]: position t's K (V) of KV head h
    let gen = |r: &mut rand::rngs::StdRng| -> Vec<Vec<Vec<u16>>> { (0..len).map(|_| (0..HEADS).map(|_| small_f16s(r, HD, 2.0)).collect()).collect() };
    let (k0, v0, k1, v1) = (gen(&mut r), gen(&mut r), gen(&mut r), gen(&mut r));
    let put = |sim: &mut opu_sim::FuncSim, at: u32, rows: &[Vec<Vec<u16>>]| {
        for (t, row) in rows.iter().enumerate() {
            mem_put(sim, at + (t * HEADS) as u32, &f16_bytes(&row.concat()));
        }
    };
    put(&mut sim, 0x2000, &k0);
    put(&mut sim, 0x3000, &v0);
    put(&mut sim, 0x5000, &k1);
    put(&mut sim, 0x6000, &v1);
    let present = [1u8, 0, 0, 1, 0];
    mem_put(&mut sim, PRESENCE, &present);
    let q: Vec<Vec<u16>> = (0..HEADS * G).map(|_| small_f16s(&mut r, HD, 2.0)).collect();
    spm_put(&mut sim, 0, &f16_bytes(&q.concat()));
    let scale = 0.25f32;
    let text = format!(
        "csrw csr=head_dim rs=r0 imm={HD}
         csrw csr=kv_stride rs=r0 imm={HEADS}
         csrw csr=attn_scale rs=r0 imm={:#x}
         csrw csr=attn_heads rs=r0 imm={HEADS}
         addi rd=r1 rs=r9 imm=1
         attn group={G} kvh={KVH} len=r1 dst=0x100 q=0 k=0x2000 v=0x3000
         csrw csr=kv_present rs=r0 imm={PRESENCE}
         attn group={G} kvh={KVH} len=r1 dst=0x200 q=0 k=0x5000 v=0x6000
         end",
        scale.to_bits()
    );
    run_ok(&mut sim, &text, &[0, len as u32 - 1]);
    let head = |rows: &[Vec<Vec<u16>>], h: usize| -> Vec<Vec<u16>> { rows.iter().map(|row| row[h].clone()).collect() };
    let pick = |t: usize, a: &[Vec<Vec<u16>>], b: &[Vec<Vec<u16>>]| if present[t] != 0 { b[t].clone() } else { a[t].clone() };
    let (k_eff, v_eff): (Vec<_>, Vec<_>) = (0..len).map(|t| (pick(t, &k0, &k1), pick(t, &v0, &v1))).unzip();
    for h in 0..HEADS {
        let qh = &q[h * G..(h + 1) * G];
        let want0 = expected(qh, &head(&k0, h), &head(&v0, h), scale);
        assert_eq!(to_f16s(&spm_get(&sim, 0x100 + (h * G * HD / 2) as u32, 2 * G * HD)), want0, "layer 0, KV head {h}");
        let want1 = expected(qh, &head(&k_eff, h), &head(&v_eff, h), scale);
        assert_eq!(to_f16s(&spm_get(&sim, 0x200 + (h * G * HD / 2) as u32, 2 * G * HD)), want1, "layer 1, KV head {h}");
        for t in 0..len {
            let (hk, hv) = sim.history(t);
            let at = (KVH + h) * HD;
            assert_eq!((&hk[at..at + HD], &hv[at..at + HD]), (&k_eff[t][h][..], &v_eff[t][h][..]), "slot {t}, KV head {h}");
        }
    }
    let s = sim.stats();
    assert_eq!(s.kv_history_hits, (3 * HEADS) as u64);
    assert_eq!(s.macs, 2 * (2 * HEADS * G * len * HD) as u64);
    // beyond the unit: 5 KV heads of 2 (padded 2) is 10 heads, fine; 9 of 2 is 18, BAD_OPERAND
    let bad = "csrw csr=head_dim rs=r0 imm=16\ncsrw csr=attn_heads rs=r0 imm=9\naddi rd=r1 rs=r0 imm=1\nattn group=2 kvh=0 len=r1 dst=0x100 q=0 k=0x2000 v=0x3000\nend";
    let e = run(&mut sim, bad, &[]).unwrap_err().to_string();
    assert!(e.contains("BAD_OPERAND") || e.contains("bad operand"), "{e}");
}

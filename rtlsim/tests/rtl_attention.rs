//! The attention unit in the RTL's `top` under Verilator against the functional simulator: `kvappend` (K and
//! V rows from the scratchpad to device memory at `k + P kv_stride`, the presence byte of position `P`), with
//! the CSRs set by `csrw` and `P` from a register, then every byte of the device-memory window, the
//! registers, INSTRET and the byte counters compared; and every `kvappend` trap by code, pc and ERROR_INFO.

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
    for case in 0..10 {
        let hd = [16u32, 32, 48, 64, 128][rng.below(5) as usize];
        let stride = hd * 2 / 32 * (1 + rng.below(3) as u32);
        let marked = case % 3 != 2;
        let mut p = format!(
            "load spm=0 mem={} bytes=4096 idx=r0 stride=0\n\
             csrw csr=head_dim rs=r0 imm={hd}\ncsrw csr=kv_stride rs=r0 imm={stride}\n",
            SRC / 32
        );
        if marked {
            p += &format!("csrw csr=kv_present rs=r0 imm={}\n", PRESENCE / 32);
        }
        // a few positions, K and V from anywhere in the loaded words (word-aligned, not line-aligned)
        for _ in 0..3 {
            let pos = rng.below(20);
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
        eprintln!("case {case}: head_dim {hd}, kv_stride {stride}, marked {marked}: {cycles} cycles");
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
        ("K row past device memory", "csrw csr=head_dim rs=r0 imm=64", format!("kvappend pos=r5 ksrc=0 vsrc=64 k={} v=0x400", mem_lines - 20)),
        ("V row past device memory", "csrw csr=head_dim rs=r0 imm=64", format!("kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v={}", mem_lines - 3)),
        (
            "rows far past device memory (P x kv_stride beyond 32 bits)",
            "csrw csr=head_dim rs=r0 imm=64\nseti rd=r5 imm=0xFFFFFFFF\ncsrw csr=kv_stride rs=r0 imm=0xFFFFFFF0",
            "kvappend pos=r5 ksrc=0 vsrc=64 k=0x200 v=0x400".into(),
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

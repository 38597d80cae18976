//! Scalar instructions, `ldr`, and the DMA instructions with register-indexed and strided addresses.

mod common;

use common::*;
use opu_hw::container::Region;
use opu_hw::isa::Csr;
use opu_sim::RegionBytes;

#[test]
fn scalar_arithmetic_wraps_and_r0_stays_zero() {
    let mut sim = sim();
    run_ok(
        &mut sim,
        "seti rd=r1 imm=0xFFFFFFF0
         addi rd=r2 rs=r1 imm=0x20            ; wraps to 0x10
         addi rd=r3 rs=r2 imm=0xFFFFFFFF      ; -1
         muli rd=r4 rs=r1 imm=3               ; (2^32 - 16) x 3 mod 2^32
         seti rd=r0 imm=99                    ; dropped
         addi rd=r5 rs=r0 imm=7
         addi rd=r6 rs=r8 imm=1               ; ARG0 + 1
         muli rd=r7 rs=r15 imm=2              ; ARG7 x 2
         csrw csr=vscale rs=r9 imm=0x10       ; ARG1 + 0x10
         end",
        &[41, 0x100, 0, 0, 0, 0, 0, 21],
    );
    assert_eq!((sim.reg(1), sim.reg(2), sim.reg(3)), (0xFFFF_FFF0, 0x10, 0xF));
    assert_eq!(sim.reg(4), 0xFFFF_FFF0u32.wrapping_mul(3));
    assert_eq!((sim.reg(0), sim.reg(5), sim.reg(6), sim.reg(7)), (0, 7, 42, 42));
    assert_eq!((sim.reg(8), sim.reg(9), sim.reg(15)), (41, 0x100, 21));
    assert_eq!(sim.csr(Csr::VScale), 0x110);
    let s = sim.stats();
    assert_eq!((s.instret, s.by_class["scalar"], s.by_class["control"]), (10, 9, 1));
    assert_eq!((s.bytes_read, s.bytes_written, s.macs), (0, 0, 0));
    // The estimate models the RTL: the first fetch (memory latency 64 + 5), two cycles per scalar
    // instruction, none for `end` (sim/tests/rtl_cost.rs holds the model to the RTL's counts).
    assert_eq!(s.cycles, 64 + 5 + 9 * 2);
    // Registers start from zero at every doorbell (r1..r7), the arguments from ARG0..7.
    run_ok(&mut sim, "end", &[]);
    assert_eq!((sim.reg(1), sim.reg(8), sim.reg(15)), (0, 0, 0));
    assert_eq!(sim.csr(Csr::VScale), 0);
}

#[test]
fn load_gathers_an_embedding_row_by_token_id_and_store_scatters() {
    let mut r = rng(30);
    let mut sim = sim();
    // An embedding of 10 rows of 64 FP16 (128 bytes = 4 lines) at line 0x100.
    let table: Vec<Vec<u16>> = (0..10).map(|_| small_f16s(&mut r, 64, 1.0)).collect();
    for (i, row) in table.iter().enumerate() {
        mem_put(&mut sim, 0x100 + 4 * i as u32, &f16_bytes(row));
    }
    run_ok(
        &mut sim,
        "load spm=0x10 mem=0x100 bytes=128 idx=r8 stride=4
         store spm=0x10 mem=0x800 bytes=128 idx=r9 stride=8
         end",
        &[7, 3],
    );
    assert_eq!(spm_get(&sim, 0x10, 128), f16_bytes(&table[7]));
    assert_eq!(mem_get(&mut sim, 0x800 + 3 * 8, 128), f16_bytes(&table[7]));
    let s = sim.stats();
    assert_eq!((s.bytes_read, s.bytes_written, s.by_class["dma"]), (128, 128, 2));
}

#[test]
fn ldr_reads_token_ids_from_the_scratchpad_for_a_prefill_gather() {
    let mut r = rng(31);
    let mut sim = sim();
    let table: Vec<Vec<u16>> = (0..5).map(|_| small_f16s(&mut r, 16, 1.0)).collect();
    for (i, row) in table.iter().enumerate() {
        mem_put(&mut sim, 0x100 + i as u32, &f16_bytes(row));
    }
    // Token ids of the batch, DMA'd into the scratchpad.
    mem_put(&mut sim, 0x80, &[4u32, 0, 2].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    run_ok(
        &mut sim,
        "load spm=0 mem=0x80 bytes=12 idx=r0 stride=0
         ldr rd=r1 spm=0
         ldr rd=r2 spm=1
         ldr rd=r3 spm=2
         load spm=0x100 mem=0x100 bytes=32 idx=r1 stride=1
         load spm=0x108 mem=0x100 bytes=32 idx=r2 stride=1
         load spm=0x110 mem=0x100 bytes=32 idx=r3 stride=1
         end",
        &[],
    );
    assert_eq!((sim.reg(1), sim.reg(2), sim.reg(3)), (4, 0, 2));
    assert_eq!(spm_get(&sim, 0x100, 32), f16_bytes(&table[4]));
    assert_eq!(spm_get(&sim, 0x108, 32), f16_bytes(&table[0]));
    assert_eq!(spm_get(&sim, 0x110, 32), f16_bytes(&table[2]));
}

#[test]
fn load2d_and_store2d_move_strided_rows() {
    let mut sim = sim();
    // 3 rows of 8 bytes, 2 lines apart in memory, 4 words (16 bytes) apart in the scratchpad.
    for i in 0..3u8 {
        mem_put(&mut sim, 0x200 + 2 * u32::from(i), &[i + 1; 8]);
    }
    run_ok(
        &mut sim,
        "load2d spm=0x20 mem=0x200 row_bytes=8 rows=3 mem_stride=2 spm_stride=4
         store2d spm=0x20 mem=0x300 row_bytes=8 rows=3 mem_stride=1 spm_stride=4
         end",
        &[],
    );
    let spm = spm_get(&sim, 0x20, 48);
    for i in 0..3 {
        assert_eq!(&spm[16 * i..16 * i + 8], &[i as u8 + 1; 8]);
        assert_eq!(&spm[16 * i + 8..16 * i + 16], &[0; 8], "gaps untouched");
        assert_eq!(mem_get(&mut sim, 0x300 + i as u32, 32)[..8], [i as u8 + 1; 8]);
    }
    let s = sim.stats();
    assert_eq!((s.bytes_read, s.bytes_written), (24, 24));
}

#[test]
fn traffic_is_counted_per_region() {
    let mut sim = sim();
    sim.set_regions(vec![
        Region { name: "weights".into(), kind: "weights".into(), addr: 0x2000, bytes: 0x1000 },
        Region { name: "kv".into(), kind: "kv".into(), addr: 0x4000, bytes: 0x1000 },
    ]);
    run_ok(
        &mut sim,
        "load spm=0 mem=0x100 bytes=64 idx=r0 stride=0      ; weights (line 0x100 = byte 0x2000)
         load spm=0 mem=0x17f bytes=64 idx=r0 stride=0      ; 32 bytes of weights, 32 outside
         store spm=0 mem=0x200 bytes=128 idx=r0 stride=0    ; kv
         end",
        &[],
    );
    let s = sim.stats();
    assert_eq!(s.regions["weights"], RegionBytes { read: 96, written: 0 });
    assert_eq!(s.regions["kv"], RegionBytes { read: 0, written: 128 });
    assert_eq!(s.regions["other"], RegionBytes { read: 32, written: 0 });
    assert_eq!(s.bytes_read, 128);
    // Program fetch is not traffic; counts restart with each run.
    run_ok(&mut sim, "end", &[]);
    assert_eq!(sim.stats().regions["weights"], RegionBytes::default());
}

//! Every trap of docs/isa.md and docs/registers.md: its ERROR_CODE, ERROR_PC and ERROR_INFO, and that a
//! trapping instruction has no effect.

mod common;

use common::*;
use opu_hw::device::{Device, DeviceError};
use opu_hw::isa::{assemble, encode};
use opu_hw::regs::{self, ErrorCode};

/// Loads raw instruction words at CODE and runs them.
fn run_words(sim: &mut opu_sim::FuncSim, words: &[u128]) -> Result<opu_hw::device::Completion, DeviceError> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    sim.mem_write(CODE, &bytes).unwrap();
    sim.mmio_write(regs::PROG_BASE_LO, CODE as u32).unwrap();
    sim.mmio_write(regs::PROG_LEN, words.len() as u32).unwrap();
    sim.run(&[])
}

fn word(text: &str) -> u128 {
    encode(&assemble(text).unwrap()[0]).unwrap()
}

#[test]
fn illegal_instructions_trap_with_the_low_64_bits_of_the_word() {
    let mut sim = sim();
    let seti = word("seti rd=r1 imm=5");
    let end = word("end");
    // Unknown opcode 0xEE, with bits set in both halves of the word.
    let unknown: u128 = 0xDEAD_BEEF_0000_0001_1234_5678_9ABC_DEEE;
    let res = run_words(&mut sim, &[seti, unknown, end]);
    expect_trap(&mut sim, res, ErrorCode::IllegalInstruction, 1, unknown as u64);
    assert_eq!(sim.reg(1), 5, "the instruction before the trap ran");
    assert_eq!(sim.stats().instret, 1);
    // Reserved bits: `end` with bit 100 set (its low 64 bits are just the opcode).
    let res = run_words(&mut sim, &[end | 1 << 100]);
    expect_trap(&mut sim, res, ErrorCode::IllegalInstruction, 0, 1);
    // An invalid field code: matmul with weight format 7.
    let res = run_words(&mut sim, &[seti, seti, 0x20 | 7 << 8]);
    expect_trap(&mut sim, res, ErrorCode::IllegalInstruction, 2, 0x720);
    // Opcode 0: zeroed memory past the program when PROG_LEN says more.
    sim.mem_write(CODE, &[0; 64]).unwrap();
    sim.mem_write(CODE, &seti.to_le_bytes()).unwrap();
    sim.mmio_write(regs::PROG_LEN, 3).unwrap();
    let res = sim.run(&[]);
    expect_trap(&mut sim, res, ErrorCode::IllegalInstruction, 1, 0);
}

#[test]
fn words_that_do_not_decode_trap_only_when_reached() {
    let mut sim = sim();
    // After `end`, and inside a skipped block.
    let r = run_words(&mut sim, &[word("end"), 0xEE]);
    assert!(r.is_ok());
    let mut r2 = rng(50);
    let x = small_f16s(&mut r2, 32, 1.0);
    spm_put(&mut sim, 0, &f16_bytes(&x));
    // Router weights all zero, skip bias 1: skip.
    let mut w = vec![0u8; 4 * 32];
    w.extend_from_slice(&[0, 0, 0x00, 0x3C]);
    mem_put(&mut sim, 0x100, &w);
    let words =
        [word("route pd=p3 mark=0 pos=r0 src=0 w=0x100 cols=32"), word("skip pred=p3 count=1"), 0xEE, word("end")];
    let c = run_words(&mut sim, &words).unwrap();
    assert_eq!(c.instructions, 3);
}

#[test]
fn the_pc_reaching_prog_len_traps() {
    let mut sim = sim();
    let res = run(&mut sim, "seti rd=r1 imm=1\nseti rd=r2 imm=2", &[]);
    expect_trap(&mut sim, res, ErrorCode::PcOutOfRange, 2, 2);
    assert_eq!(sim.stats().instret, 2);
    // A skip past the end.
    let mut w = vec![0u8; 4 * 32];
    w.extend_from_slice(&[0, 0, 0x00, 0x3C]);
    mem_put(&mut sim, 0x100, &w);
    let res = run(&mut sim, "route pd=p0 mark=0 pos=r0 src=0 w=0x100 cols=32\nskip pred=p0 count=100\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::PcOutOfRange, 102, 102);
    // An empty program.
    sim.mmio_write(regs::PROG_LEN, 0).unwrap();
    let res = sim.run(&[]);
    expect_trap(&mut sim, res, ErrorCode::PcOutOfRange, 0, 0);
}

#[test]
fn device_memory_out_of_range_names_the_first_faulting_byte() {
    let mut sim = sim();
    let size = sim.mem_size();
    let last_line = (size / 32) as u32;
    // Entirely outside.
    let res = run(&mut sim, &format!("seti rd=r1 imm=1\nload spm=0 mem={last_line} bytes=4 idx=r0 stride=0\nend"), &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 1, size);
    // Straddling the end: the first faulting byte is the end of memory.
    let res = run(&mut sim, &format!("store spm=0 mem={} bytes=64 idx=r0 stride=0\nend", last_line - 1), &[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 0, size);
    // Register-indexed: 32 x (mem + r8 x stride) is computed without wrapping (here beyond 2^64).
    let res = run(&mut sim, "load spm=0 mem=0xFFFFFFFF bytes=4 idx=r8 stride=0xFFFFFFFF\nend", &[0xFFFF_FFFF]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 0, u64::MAX);
    let res = run(&mut sim, "load spm=0 mem=1 bytes=4 idx=r8 stride=0x100000\nend", &[0x100]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 0, 32 * (1 + 0x100 * 0x100000));
    // A weight stream that runs off the end (from the last multiple of 16 x pe_lanes bytes, 128 before the
    // end: its group is 640 bytes).
    let res = run(
        &mut sim,
        &format!("matmul fmt=w8 out=f16 ntok=1 dst=0x100 src=0 rows=4 cols=32 w={}\nend", last_line - 4),
        &[],
    );
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 0, size);
    // Instruction fetch past the end of memory.
    let seti = encode(&assemble("seti rd=r1 imm=1").unwrap()[0]).unwrap();
    sim.mem_write(size - 16, &seti.to_le_bytes()).unwrap();
    sim.mmio_write(regs::PROG_BASE_LO, (size - 16) as u32).unwrap();
    sim.mmio_write(regs::PROG_BASE_HI, ((size - 16) >> 32) as u32).unwrap();
    sim.mmio_write(regs::PROG_LEN, 2).unwrap();
    let res = sim.run(&[]);
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 1, size);
}

#[test]
fn scratchpad_out_of_range_names_the_first_faulting_byte() {
    let mut sim = sim();
    let spm = u64::from(sim.config().scratchpad_bytes);
    let last_word = (spm / 4) as u32;
    let res = run(&mut sim, &format!("load spm={} mem=0x100 bytes=8 idx=r0 stride=0\nend", last_word - 1), &[]);
    expect_trap(&mut sim, res, ErrorCode::ScratchpadOutOfRange, 0, spm);
    let res = run(&mut sim, &format!("ldr rd=r1 spm={last_word}\nend"), &[]);
    expect_trap(&mut sim, res, ErrorCode::ScratchpadOutOfRange, 0, spm);
    // The second token's input row of a matmul.
    let res = run(
        &mut sim,
        &format!("matmul fmt=w8 out=f16 ntok=2 dst=0 src={} rows=1 cols=32 w=0x100\nend", last_word - 16),
        &[],
    );
    expect_trap(&mut sim, res, ErrorCode::ScratchpadOutOfRange, 0, spm);
    // Far outside: the 20-bit word field reaches 4 MiB.
    let res = run(&mut sim, "vop op=copy dd=f16 da=f16 db=f16 rows=1 dst=0 a=0xFFFFF b=0 n=2\nend", &[]);
    expect_trap(&mut sim, res, ErrorCode::ScratchpadOutOfRange, 0, 4 * 0xFFFFF);
}

#[test]
fn operands_that_break_the_rules_are_bad_operands() {
    let cases = [
        "load spm=0 mem=0x100 bytes=0 idx=r0 stride=0",
        "load spm=0 mem=0x100 bytes=6 idx=r0 stride=0",
        "store spm=0 mem=0x100 bytes=2 idx=r0 stride=0",
        "load2d spm=0 mem=0x100 row_bytes=8 rows=0 mem_stride=1 spm_stride=2",
        "store2d spm=0 mem=0x100 row_bytes=10 rows=2 mem_stride=1 spm_stride=4",
        "matmul fmt=w4m out=f16 ntok=17 dst=0x1000 src=0 rows=4 cols=32 w=0x100", // ntok > max_batch (16)
        "matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=4 cols=48 w=0x100",  // not whole blocks
        "matmul fmt=w4m out=f16 ntok=0 dst=0x1000 src=0 rows=4 cols=32 w=0x100",
        "matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=0 cols=32 w=0x100",
        "matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=4 cols=0 w=0x100",
        "matmul fmt=w8 out=f16 ntok=1 dst=8 src=0 rows=4 cols=32 w=0x100", // dst overlaps src
        "vop op=add dd=f16 da=f16 db=f16 red=set rows=65 dst=0x1000 a=0 b=0 n=2", // RED has 64 entries
        "vop op=add dd=f16 da=f16 db=f16 rows=1 dst=0x1000 a=0 b=0 n=0",
        "rmsnorm dd=f16 ds=f16 rows=65 dst=0x1000 src=0 g=0x800 n=4 eps=1e-5",
        "rope style=neox heads=0 head_dim=8 rows=1 dst=0x1000 src=0 table=0x800",
        "argmax dt=f16 rd=r1 dst=0x1000 src=0 n=0",
        "route pd=p0 mark=0 pos=r0 src=0 w=0x100 cols=0",
        "route pd=p0 mark=0 pos=r0 src=0 w=0x100 cols=40", // not whole lines
        "attn group=0 kvh=0 len=r8 dst=0x1000 q=0 k=0x100 v=0x200",
        "maxpool k=0 stride=1 h=4 w=4 c=1 dst=0x1000 src=0",
        "maxpool k=2 stride=2 h=4 w=4 c=2 dst=4 src=0", // dst overlaps src
    ];
    for case in cases {
        let mut sim = sim();
        let res = run(&mut sim, &format!("csrw csr=head_dim rs=r0 imm=16\n{case}\nend"), &[4]);
        expect_trap(&mut sim, res, ErrorCode::BadOperand, 1, 0);
        assert_eq!(sim.stats().instret, 1, "{case}");
    }
}

/// The `conv` rules of docs/isa.md: sizes below 2^16, a kernel that fits a lane's buffer, the destination
/// apart from the source.
#[test]
fn conv_operands_that_break_the_rules_are_bad_operands() {
    // (h, w, cin, cout, k, stride, pad, dst)
    let cases = [
        (1 << 16, 4, 2, 2, 3, 1, 0, 0x1000),
        (4, 4, 2, 2, 3, 1, 1 << 16, 0x1000),
        (4, 4, 2, 1 << 16, 3, 1, 0, 0x1000),
        // 4,081 products per output: 8,162 bytes of kernel, over the `sim` preset's 8,160
        (1, 1, 4081, 2, 1, 1, 0, 0x4000),
        (4, 4, 2, 2, 3, 1, 0, 4),
    ];
    assert_eq!(opu_hw::OverlayConfig::sim().max_conv_kernel_bytes(), 8160);
    for (h, w, cin, cout, k, stride, pad, dst) in cases {
        let mut sim = sim();
        let text = format!(
            "seti rd=r1 imm={h}\ncsrw csr=conv_h rs=r1 imm=0\ncsrw csr=conv_w rs=r0 imm={w}\ncsrw csr=conv_cin rs=r0 imm={cin}\n\
             csrw csr=conv_cout rs=r0 imm={cout}\ncsrw csr=conv_k rs=r0 imm={k}\ncsrw csr=conv_stride rs=r0 imm={stride}\n\
             csrw csr=conv_pad rs=r0 imm={pad}\nconv relu=0 shift=8 dst={dst} src=0 w=0x100\nend"
        );
        let res = run(&mut sim, &text, &[]);
        expect_trap(&mut sim, res, ErrorCode::BadOperand, 8, 0);
    }
    // the largest kernel that fits runs
    let mut sim = sim();
    let text = "csrw csr=conv_h rs=r0 imm=1\ncsrw csr=conv_w rs=r0 imm=1\ncsrw csr=conv_cin rs=r0 imm=4080\n\
                csrw csr=conv_cout rs=r0 imm=1\ncsrw csr=conv_k rs=r0 imm=1\ncsrw csr=conv_stride rs=r0 imm=1\n\
                csrw csr=conv_pad rs=r0 imm=0\nconv relu=0 shift=8 dst=0x4000 src=0 w=0x100\nend";
    run(&mut sim, text, &[]).unwrap();
}

#[test]
fn a_trapping_instruction_has_no_effect() {
    let mut config = opu_hw::OverlayConfig::sim();
    config.device_memory_bytes = 1 << 20;
    let mut sim = opu_sim::FuncSim::new(&config);
    let lines = (sim.mem_size() / 32) as u32;
    mem_put(&mut sim, lines - 2, &[1; 8]);
    mem_put(&mut sim, lines - 1, &[2; 8]);
    // Rows 0 and 1 of this load2d are the last two lines of memory, row 2 is outside: rows 0 and 1 must not
    // be written either.
    let res = run(
        &mut sim,
        &format!("load2d spm=0x20 mem={} row_bytes=8 rows=3 mem_stride=1 spm_stride=4\nend", lines - 2),
        &[],
    );
    expect_trap(&mut sim, res, ErrorCode::MemOutOfRange, 0, 1 << 20);
    assert_eq!(spm_get(&sim, 0x20, 48), vec![0; 48]);
    let s = sim.stats();
    // nothing retired or moved; the cycles are the first fetch's (memory latency 64 + 5)
    assert_eq!((s.instret, s.bytes_read, s.cycles), (0, 0, 64 + 5));
}

#[test]
fn a_trap_is_reported_in_status_and_interrupt() {
    let mut sim = sim();
    sim.mmio_write(regs::CONTROL, regs::control::IRQ_ENABLE).unwrap();
    let res = run(&mut sim, "seti rd=r1 imm=1\nload spm=0 mem=0x100 bytes=3 idx=r0 stride=0\nend", &[]);
    assert!(matches!(res, Err(DeviceError::Trap { code: ErrorCode::BadOperand, pc: 1 })));
    assert_eq!(sim.mmio_read(regs::STATUS).unwrap(), regs::status::ERROR);
    assert_eq!(sim.mmio_read(regs::IRQ_STATUS).unwrap(), regs::irq::ERROR);
    assert!(sim.irq_line());
    let e = sim.wait_done(std::time::Duration::from_secs(1)).unwrap_err().to_string();
    assert!(e.contains("BAD_OPERAND") && e.contains("pc 0x1"), "{e}");
}

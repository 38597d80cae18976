//! The functional simulator's cycle estimate against the RTL's counts: single instructions of SmolLM2's
//! shapes (and a few others), each measured on the overlay's RTL under Verilator (`sim` preset) with
//! `opu exec PROGRAM --backend rtl --base 0x100000 --json` (the RTL's `CYCLES`, doorbell to completion, on
//! zeroed memory: the RTL's timing does not depend on the data). The numbers are the RTL's, typed in from
//! those runs, so this test needs no Verilator; host/tests/rtl.rs compares the model with the live RTL on
//! SmolLM2 decode. Re-measure them when the RTL's schedule changes.

mod common;
use common::*;

/// `(program, RTL cycles)`. Lines separated by `;`, `end` appended.
const RTL_CYCLES: &[(&str, u64)] = &[
    // matmul, one token (decode): exact on the RTL's schedule
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=64 w=0x1000", 197),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 296),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=64 w=0x1000", 692),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=576 w=0x1000", 309),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 582),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 1674),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=1536 w=0x1000", 519),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=1536 w=0x1000", 1242),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=1536 w=0x1000", 4134),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=64 w=0x1000", 208),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 310),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=64 w=0x1000", 718),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=576 w=0x1000", 408),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 873),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 2733),
    ("matmul fmt=w8 out=f32 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 2733),
    ("matmul fmt=w8 out=f32 ntok=1 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 310),
    ("matmul fmt=w4m out=f16 acc=1 red=set ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 1680),
    ("matmul fmt=w4 out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=1536 w=0x1004", 1145),
    // matmul, one token, short rows: each group's capture waits for the last one's readout (which runs
    // beside the next group's compute)
    ("matmul fmt=w4m out=f32 ntok=1 dst=0x1000 src=0 rows=128 cols=64 w=0x1000", 428),
    ("matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=128 w=0x1000", 706),
    ("matmul fmt=w8 out=f16 ntok=1 dst=0x1000 src=0 rows=128 cols=32 w=0x1000", 434),
    // matmul, several tokens (prefill): compute-bound groups, each token after the first losing a few cycles
    // to the readout's scratchpad accesses
    ("matmul fmt=w4m out=f16 ntok=4 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 960),
    ("matmul fmt=w4m out=f16 ntok=16 dst=0x4000 src=0 rows=64 cols=576 w=0x1000", 2832),
    ("matmul fmt=w4m out=f16 ntok=4 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 692),
    ("matmul fmt=w4m out=f16 ntok=2 dst=0x4000 src=0 rows=128 cols=576 w=0x1000", 1048),
    ("matmul fmt=w4m out=f16 ntok=8 dst=0x4000 src=0 rows=128 cols=1536 w=0x1000", 6910),
    // (several tokens with start values, whose chunks read the old words on the compute's read port; odd rows,
    // whose last word is half written; FP32 outputs, chunks of 4 lanes; the fused reduction)
    ("matmul fmt=w4m out=f16 acc=1 ntok=4 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 985),
    ("matmul fmt=w4m out=f16 acc=1 red=set ntok=8 dst=0x4000 src=0 rows=128 cols=1536 w=0x1000", 7028),
    ("matmul fmt=w4m out=f16 acc=1 ntok=4 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 708),
    ("matmul fmt=w4m out=f16 ntok=4 dst=0x1000 src=0 rows=63 cols=576 w=0x1000", 967),
    ("matmul fmt=w4m out=f32 ntok=4 dst=0x4000 src=0 rows=64 cols=576 w=0x1000", 960),
    ("matmul fmt=w4m out=f16 red=set ntok=4 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 965),
    ("matmul fmt=w8 out=f32 acc=1 ntok=3 dst=0x4000 src=0 rows=40 cols=256 w=0x1000", 609),
    ("matmul fmt=w4m out=f32 ntok=2 dst=0x4000 src=0 rows=64 cols=64 w=0x1000", 428),
    // matmul with F16 weights: the router's datapath in the readout, 8 columns of a lane's two rows per two
    // cycles, a chunk's lanes one after the other
    ("matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=64 w=0x1000", 327),
    ("matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 789),
    ("matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=576 w=0x1000", 1607),
    ("matmul fmt=f16 out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 5141),
    ("matmul fmt=f16 out=f16 ntok=1 dst=0x4000 src=0 rows=256 cols=576 w=0x1000", 19277),
    ("matmul fmt=f16 out=f32 ntok=1 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 877),
    ("matmul fmt=f16 out=f16 acc=1 red=set ntok=1 dst=0x4000 src=0 rows=256 cols=576 w=0x1000", 19281),
    ("matmul fmt=f16 out=f16 ntok=4 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 19253),
    ("matmul fmt=f16 out=f32 ntok=3 dst=0x1000 src=0 rows=37 cols=13 w=0x1000", 731),
    // the vector unit
    ("rmsnorm dd=f16 ds=f16 rows=1 dst=304 src=16 g=2960 n=576 eps=1e-5", 573),
    ("rmsnorm dd=f16 ds=f16 rows=4 dst=4000 src=16 g=2960 n=576 eps=1e-5", 1485),
    ("rope style=normal heads=9 head_dim=64 rows=1 dst=592 src=592 table=2896", 314),
    ("rope style=normal heads=3 head_dim=64 rows=1 dst=880 src=880 table=2896", 290),
    // (q and k of a one-token pass in one `rope`; heads after the first reusing the table lines, or not: a
    // head of one chunk, or of more than the unit keeps)
    ("rope style=normal heads=12 head_dim=64 rows=1 dst=592 src=592 table=2896", 326),
    ("rope style=neox heads=4 head_dim=128 rows=2 dst=592 src=592 table=2896", 432),
    ("rope style=normal heads=4 head_dim=16 rows=1 dst=592 src=592 table=2896", 282),
    ("rope style=normal heads=2 head_dim=272 rows=1 dst=592 src=592 table=2896", 372),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536", 463),
    ("vop op=copy dd=f16 da=f16 db=f16 red=set rows=1 dst=16 a=16 b=16 n=576", 342),
    ("vop op=add dd=f32 da=f32 db=f32 red=none rows=2 dst=8000 a=16 b=3000 n=576", 559),
    // (FP16 sources: a line holds two chunks; with two, a chunk takes one read; odd rows, mixed types)
    ("vop op=add dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536", 463),
    ("vop op=mul dd=f32 da=f16 db=f32 red=none rows=2 dst=8000 a=16 b=3000 n=576", 487),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=3 dst=8000 a=16 b=3000 n=577", 497),
    ("vop op=copy dd=f16 da=f16 db=f16 red=none rows=2 dst=8000 a=16 b=16 n=9", 275),
    ("rmsnorm dd=f16 ds=f16 rows=2 dst=4000 src=16 g=2960 n=577 eps=1e-5", 883),
    ("rmsnorm dd=f32 ds=f32 rows=1 dst=4000 src=16 g=2960 n=576 eps=1e-5", 609),
    ("argmax dt=f32 rd=r2 dst=20000 src=3536 n=16352", 2314),
    // DMA and the core
    ("load spm=2960 mem=0x38080 bytes=2304 idx=r0 stride=0", 208),
    ("load spm=16 mem=0x31aa00 bytes=1152 idx=r1 stride=36", 172),
    ("load spm=0 mem=0x20000 bytes=4 idx=r0 stride=0", 137),
    ("store2d spm=3536 mem=0x20080 row_bytes=0xff80 rows=1 mem_stride=0x1800 spm_stride=0x3fe0", 2117),
    ("store2d spm=3536 mem=0x21874 row_bytes=384 rows=1 mem_stride=0x1800 spm_stride=96", 85),
    ("addi rd=r1 rs=r0 imm=1;addi rd=r1 rs=r0 imm=1;addi rd=r1 rs=r0 imm=1;addi rd=r1 rs=r0 imm=1", 77),
    ("ldr rd=r1 spm=0", 72),
    // the attention unit (head size 64 as SmolLM2, groups of 1 to 5, up to 128 positions; and head sizes 32
    // and 128; every position present)
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;kvappend pos=r2 ksrc=880 vsrc=976 k=0x4cac00 v=0x4caf00", 92),
    // (one `kvappend` of several KV heads: SmolLM2's 3 of 64, Llama-7B's 8 of 128)
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_heads rs=r0 imm=3;kvappend pos=r2 ksrc=880 vsrc=976 k=0x4cac00 v=0x4caf00", 108),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=64;csrw csr=attn_heads rs=r0 imm=8;kvappend pos=r2 ksrc=880 vsrc=1392 k=0x4cac00 v=0x4d0000", 212),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=1;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 418),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=2;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 434),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=3;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 450),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=4;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 466),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 530),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=16;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 658),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=32;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 914),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=64;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 1426),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=128;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 2450),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 481),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=32;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 841),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=2 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 497),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=32;attn group=2 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 857),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=4 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 546),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=32;attn group=4 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 930),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=5 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 628),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=32;attn group=5 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 1204),
    ("csrw csr=head_dim rs=r0 imm=32;csrw csr=kv_stride rs=r0 imm=4;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=1;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 360),
    ("csrw csr=head_dim rs=r0 imm=32;csrw csr=kv_stride rs=r0 imm=4;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 465),
    ("csrw csr=head_dim rs=r0 imm=32;csrw csr=kv_stride rs=r0 imm=4;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=1;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 382),
    ("csrw csr=head_dim rs=r0 imm=32;csrw csr=kv_stride rs=r0 imm=4;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 487),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=16;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=1;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 408),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=16;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 541),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=16;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=1;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 490),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=16;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 714),
    // attn over several KV heads (`attn_heads`): SmolLM2's 3 groups of 3, Llama-7B's 8 heads of 128 at a
    // time, 4 groups of 4, 8 heads of 16
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=3;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 912),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=3;addi rd=r1 rs=r0 imm=32;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 2064),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=64;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=8;addi rd=r1 rs=r0 imm=1;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 886),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=64;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=8;addi rd=r1 rs=r0 imm=8;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 1803),
    ("csrw csr=head_dim rs=r0 imm=128;csrw csr=kv_stride rs=r0 imm=64;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=8;addi rd=r1 rs=r0 imm=64;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 9139),
    ("csrw csr=head_dim rs=r0 imm=32;csrw csr=kv_stride rs=r0 imm=8;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=4;addi rd=r1 rs=r0 imm=8;attn group=4 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 760),
    ("csrw csr=head_dim rs=r0 imm=16;csrw csr=kv_stride rs=r0 imm=8;csrw csr=attn_scale rs=r0 imm=0x3e000000;csrw csr=attn_heads rs=r0 imm=8;addi rd=r1 rs=r0 imm=16;attn group=1 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00", 723),
    // a matmul issued early, behind vector or attention work (its loader fills the ring meanwhile), and
    // behind a kvappend (not early: it waits for the write)
    ("rmsnorm dd=f16 ds=f16 rows=1 dst=304 src=16 g=2960 n=576 eps=1e-5;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 1676),
    ("rmsnorm dd=f16 ds=f16 rows=1 dst=304 src=16 g=2960 n=576 eps=1e-5;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 834),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=576 cols=1536 w=0x1000", 8956),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00;attn group=3 kvh=1 len=r1 dst=1168 q=688 k=0x4cac00 v=0x4caf00;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 1976),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;kvappend pos=r2 ksrc=880 vsrc=976 k=0x4cac00 v=0x4caf00;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 1696),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00;attn group=3 kvh=1 len=r1 dst=1168 q=688 k=0x4cac00 v=0x4caf00;attn group=3 kvh=2 len=r1 dst=1264 q=784 k=0x4cac00 v=0x4caf00;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00;attn group=3 kvh=1 len=r1 dst=1168 q=688 k=0x4cac00 v=0x4caf00;attn group=3 kvh=2 len=r1 dst=1264 q=784 k=0x4cac00 v=0x4caf00;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=256 cols=576 w=0x1000", 3788),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=64 cols=576 w=0x1000", 724),
    ("csrw csr=head_dim rs=r0 imm=64;csrw csr=kv_stride rs=r0 imm=12;csrw csr=attn_scale rs=r0 imm=0x3e000000;addi rd=r1 rs=r0 imm=8;attn group=3 kvh=0 len=r1 dst=1072 q=592 k=0x4cac00 v=0x4caf00;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=16 cols=576 w=0x1000", 608),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536;matmul fmt=w8 out=f32 ntok=2 dst=0x1000 src=0 rows=64 cols=64 w=0x1000", 750),
    ("rmsnorm dd=f16 ds=f16 rows=1 dst=304 src=16 g=2960 n=576 eps=1e-5;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=128 cols=576 w=0x1000", 1078),
    // (the ring's eight entries full before the compute may start: the groups then follow at the compute's
    // pace, 61 cycles each for 576 columns)
    ("rmsnorm dd=f16 ds=f16 rows=1 dst=304 src=16 g=2960 n=576 eps=1e-5;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=160 cols=576 w=0x1000", 1200),
    ("vop op=swiglu dd=f16 da=f16 db=f16 red=none rows=1 dst=1360 a=1360 b=2128 n=1536;matmul fmt=w4m out=f16 ntok=1 dst=0x1000 src=0 rows=192 cols=576 w=0x1000", 1312),
    ("route pd=p0 mark=0 pos=r9 src=0x000 w=0x1010 cols=576", 360),
    ("route pd=p0 mark=0 pos=r9 src=0x000 w=0x1010 cols=64", 232),
];

#[test]
fn the_cycle_estimate_is_a_model_of_the_rtl() {
    let mut worst = (0.0f64, "");
    let mut off = Vec::new();
    for &(program, rtl) in RTL_CYCLES {
        let mut sim = sim();
        let text = format!("{}\nend", program.replace(';', "\n"));
        let program_base = 0x10_0000;
        sim.load_program(program_base, &opu_hw::isa::assemble(&text).unwrap()).unwrap();
        let c = sim.run(&[]).unwrap_or_else(|e| panic!("{program}: {e}"));
        let err = c.cycles as f64 / rtl as f64 - 1.0;
        eprintln!("model {:>6} RTL {:>6} {:+6.2}%  {program}", c.cycles, rtl, 100.0 * err);
        // every row, one token or several, alone or behind other work: the RTL's schedule to a few cycles
        let bound = 0.005;
        if err.abs() > bound {
            off.push(format!("{program}: model {} cycles, RTL {rtl}", c.cycles));
        }
        if err.abs() > worst.0 {
            worst = (err.abs(), program);
        }
    }
    eprintln!("worst: {:.2}% ({})", 100.0 * worst.0, worst.1);
    assert!(off.is_empty(), "{} rows off by more than 0.5%:\n{}", off.len(), off.join("\n"));
}

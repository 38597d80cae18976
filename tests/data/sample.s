; A sample OPU program: one decoder layer of a tiny llama-style model (hidden 64, 2 query heads sharing
; 1 KV head of 32, FFN 128), for one token. r8 = token id, r9 = position (ARG0, ARG1).
; Device memory (32-byte lines): embedding rows of 64 FP16 at line 0x100 (4 lines per row), weights from
; line 0x1000, K cache at 0x8000, V cache at 0x9000 (2 lines per position), presence bytes at 0xA000,
; RoPE table rows (16 cos/sin pairs = 4 lines) at 0xB000, logits out at 0xC000.
; Scratchpad words: x 0x000, xn 0x040, q 0x080, k 0x0a0, v 0x0b0, att 0x0c0, gains 0x100, rope row 0x140,
; gate 0x180, up 0x1c0, logits 0x200, argmax 0x400.

        load     spm=0x000 mem=0x100 bytes=128 idx=r8 stride=4       ; embedding row of the token
        vop      op=copy dd=f16 da=f16 db=f16 red=set rows=1 dst=0x000 a=0x000 b=0x000 n=64
        load     spm=0x100 mem=0x1000 bytes=256 idx=r0 stride=0      ; attention-norm gains (FP32)
        load     spm=0x140 mem=0xb000 bytes=128 idx=r9 stride=4      ; RoPE row of this position
        csrw     csr=head_dim rs=r0 imm=32
        csrw     csr=kv_stride rs=r0 imm=2
        csrw     csr=attn_scale rs=r0 imm=0x3e3504f3                 ; 1/sqrt(32)
        csrw     csr=kv_present rs=r0 imm=0xa000
        route    pd=p0 mark=1 pos=r9 src=0x000 w=0x1010 cols=64         ; skip attention?
        skip     pred=p0 count=9
        rmsnorm  dd=f16 ds=f16 rows=1 dst=0x040 src=0x000 g=0x100 n=64 eps=1e-5
        matmul   fmt=w4m out=f16 ntok=1 dst=0x080 src=0x040 rows=64 cols=64 w=0x1020
        matmul   fmt=w4m out=f16 ntok=1 dst=0x0a0 src=0x040 rows=32 cols=64 w=0x10c0
        matmul   fmt=w4m out=f16 ntok=1 dst=0x0b0 src=0x040 rows=32 cols=64 w=0x1110
        rope     style=normal heads=2 head_dim=32 rows=1 dst=0x080 src=0x080 table=0x140
        kvappend pos=r9 ksrc=0x0a0 vsrc=0x0b0 k=0x8000 v=0x9000
        addi     rd=r1 rs=r9 imm=1                                    ; attend to positions 0..=pos
        attn     group=2 kvh=0 len=r1 dst=0x0c0 q=0x080 k=0x8000 v=0x9000
        matmul   fmt=w4m out=f16 acc=1 red=set ntok=1 dst=0x000 src=0x0c0 rows=64 cols=64 w=0x1160
        ; FFN (SwiGLU)
        rmsnorm  dd=f16 ds=f16 rows=1 dst=0x040 src=0x000 g=0x100 n=64 eps=1e-5
        matmul   fmt=w4m out=f16 ntok=1 dst=0x180 src=0x040 rows=128 cols=64 w=0x1200
        matmul   fmt=w4m out=f16 ntok=1 dst=0x1c0 src=0x040 rows=128 cols=64 w=0x1340
        vop      op=swiglu dd=f16 da=f16 db=f16 rows=1 dst=0x180 a=0x180 b=0x1c0 n=128
        matmul   fmt=w4 out=f16 acc=1 red=set ntok=1 dst=0x000 src=0x180 rows=64 cols=128 w=0x1480
        ; output head (tied Q8_0 embedding) and greedy choice
        rmsnorm  dd=f16 ds=f16 rows=1 dst=0x040 src=0x000 g=0x100 n=64 eps=1e-5
        matmul   fmt=w8 out=f32 ntok=1 dst=0x200 src=0x040 rows=256 cols=64 w=0x1600
        argmax   dt=f32 rd=r2 dst=0x400 src=0x200 n=256
        store    spm=0x200 mem=0xc000 bytes=1024 idx=r0 stride=0
        store    spm=0x400 mem=0xc020 bytes=4 idx=r0 stride=0
        barrier
        end

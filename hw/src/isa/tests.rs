use super::*;
use proptest::prelude::*;

/// Maps arbitrary bits to a valid raw value of a field.
fn valid_raw(f: &FieldSpec, r: u64) -> u64 {
    let n = |k: u64| r % k;
    match f.kind {
        FieldKind::Uint | FieldKind::F32 => r & ((1u64 << f.bits) - 1),
        FieldKind::Bool => n(2),
        FieldKind::Reg => n(NUM_REGS as u64),
        FieldKind::Pred => n(NUM_PREDS as u64),
        FieldKind::Format => n(WeightFormat::ALL.len() as u64),
        FieldKind::DType => n(2),
        FieldKind::VecOp => n(VecOp::ALL.len() as u64),
        FieldKind::Red => n(3),
        FieldKind::Rope => n(2),
        FieldKind::Csr => Csr::ALL[n(Csr::ALL.len() as u64) as usize] as u64,
    }
}

fn arb_instr() -> impl Strategy<Value = Instr> {
    (0..SPECS.len(), prop::collection::vec(any::<u64>(), 16)).prop_map(|(i, bits)| {
        let sp = &SPECS[i];
        let raw: Vec<u64> = sp.fields.iter().zip(bits).map(|(f, r)| valid_raw(f, r)).collect();
        Instr::from_raw_fields(sp.opcode, &raw).unwrap().unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn decode_inverts_encode(i in arb_instr()) {
        let w = encode(&i).unwrap();
        prop_assert_eq!(decode(w).unwrap(), i);
    }

    #[test]
    fn assemble_inverts_disassemble(p in prop::collection::vec(arb_instr(), 0..12)) {
        let text = disassemble(&p);
        prop_assert_eq!(assemble(&text).unwrap(), p.clone());
        prop_assert_eq!(assemble(&asm::listing(&p)).unwrap(), p.clone());
        prop_assert_eq!(decode_program(&encode_program(&p).unwrap()).unwrap(), p);
    }

    #[test]
    fn random_words_decode_or_give_a_typed_error(w in any::<u128>()) {
        match decode(w) {
            Ok(i) => prop_assert_eq!(encode(&i).unwrap(), w),
            Err(IsaError::UnknownOpcode { opcode, .. }) => prop_assert!(spec(opcode).is_none()),
            Err(IsaError::ReservedBits { mask, .. }) => prop_assert!(mask != 0),
            Err(IsaError::BadField { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

#[test]
fn every_layout_fits_128_bits_and_opcodes_are_unique() {
    for (i, s) in SPECS.iter().enumerate() {
        assert!(s.used_bits() <= 128, "{} uses {} bits", s.mnemonic, s.used_bits());
        assert_ne!(s.opcode, 0, "opcode 0 must stay illegal");
        assert!(!s.summary.is_empty(), "{} has no summary", s.mnemonic);
        for t in &SPECS[i + 1..] {
            assert_ne!(s.opcode, t.opcode);
            assert_ne!(s.mnemonic, t.mnemonic);
        }
    }
}

#[test]
fn invalid_words_give_typed_errors() {
    assert_eq!(decode(0), Err(IsaError::UnknownOpcode { opcode: 0, word: 0 }));
    assert!(matches!(decode(0xEE), Err(IsaError::UnknownOpcode { opcode: 0xEE, .. })));
    // `end` with a stray bit above its opcode.
    let e = decode(0x01 | 1 << 100).unwrap_err();
    assert!(matches!(e, IsaError::ReservedBits { mnemonic: "end", .. }), "{e}");
    // `matmul` with weight format code 7 (there are four formats).
    let e = decode(0x20 | 7 << 8).unwrap_err();
    assert_eq!(e.to_string(), "`matmul`: field `fmt` has invalid value 7 (a weight format: w4m, w4, w8 or f16)");
    // A program whose third word is bad names its index; a length that is not whole words is refused.
    let mut bytes = encode_program(&[Instr::Barrier {}, Instr::Barrier {}]).unwrap();
    bytes.extend_from_slice(&[0xFF; 16]);
    let e = decode_program(&bytes).unwrap_err();
    assert!(e.to_string().starts_with("instruction 2: unknown opcode 0xff"), "{e}");
    assert_eq!(decode_program(&bytes[..20]).unwrap_err(), IsaError::Truncated(20));
}

#[test]
fn encode_refuses_values_wider_than_their_field() {
    let i = Instr::Matmul {
        fmt: WeightFormat::W4Min,
        out: DType::F16,
        acc: false,
        red: RedMode::None,
        ntok: 1,
        dst: 0,
        src: 0,
        rows: 1 << 16,
        cols: 32,
        w: 0,
    };
    let e = encode(&i).unwrap_err();
    assert_eq!(e, IsaError::FieldOverflow { mnemonic: "matmul", field: "rows", value: 65536, bits: 16 });
}

#[test]
fn assembler_errors_name_the_line_and_the_problem() {
    let cases = [
        ("end\nfoo x=1\n", 2, "unknown instruction `foo`"),
        ("\n\nseti rd=r1\n", 3, "missing field `imm`"),
        ("seti rd=r16 imm=0", 1, "field `rd` = `r16`: expected a register r0..r15"),
        ("seti rd=r1 imm=0 imm=1", 1, "field `imm` given twice"),
        ("seti rd=r1 imm=0x1_0000_0000", 1, "does not fit its 32 bits"),
        ("seti rd=r1 imx=3", 1, "has no field `imx`"),
        ("matmul fmt=q4 out=f16 ntok=1 dst=0 src=0 rows=1 cols=32 w=0", 1, "expected a weight format"),
        ("seti r1 5", 1, "expected `field=value`, found `r1`"),
    ];
    for (text, line, msg) in cases {
        let e = assemble(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.to_string().contains(msg), "{text:?}: {e}");
    }
}

#[test]
fn assembler_accepts_comments_hex_floats_and_defaults() {
    let p = assemble(
        "; header comment\n\
         rmsnorm dd=f16 ds=f16 rows=1 dst=0x40 src=0 g=0x80 n=576 eps=1e-5   # trailing\n\
         csrw csr=attn_scale rs=r0 imm=0x3e000000\n\
         matmul fmt=w8 out=f32 ntok=1 dst=0 src=0 rows=2 cols=32 w=0x10\n",
    )
    .unwrap();
    assert_eq!(p.len(), 3);
    match p[0] {
        Instr::Rmsnorm { eps, n, .. } => assert_eq!((eps.get(), n), (1e-5, 576)),
        _ => unreachable!(),
    }
    assert!(matches!(p[2], Instr::Matmul { acc: false, red: RedMode::None, .. }));
}

#[test]
fn docs_isa_md_matches_the_opcode_table() {
    let doc = include_str!("../../../docs/isa.md");
    assert!(doc.contains(&markdown_table()), "docs/isa.md is out of date: regenerate with `opu info --isa-markdown`");
    // Every instruction and every CSR has its own section in the doc.
    for s in SPECS {
        assert!(doc.contains(&format!("### `{}`", s.mnemonic)), "docs/isa.md lacks a section for `{}`", s.mnemonic);
    }
    for c in Csr::ALL {
        assert!(doc.contains(&format!("`{}`", c.name())), "docs/isa.md lacks CSR `{}`", c.name());
    }
}

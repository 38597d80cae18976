//! The Verilator models of `opu_rtlsim::rtl` (the RTL of opu-rtl, verilated by rtlsim/build.rs through opu-verilate) against
//! opu_hw's numerics, bit for bit; and the generated wrappers' port plumbing on every Verilator port class.
//!
//! Without the models (opu-sim built without verilator on PATH) every test prints SKIPPED and passes,
//! unless `REQUIRE_VERILATOR=1`, which makes it a failure.

mod common;

use common::models_or_skip;

#[test]
fn dsp_acc_w4x2_matches_w4x2u_accumulate() {
    if models_or_skip("dsp_acc_w4x2 vs w4x2u_accumulate") {
        #[cfg(has_verilator)]
        models::dsp_acc_w4x2();
    }
}

#[test]
fn dsp_w4x2_matches_w4x2u_products() {
    if models_or_skip("dsp_w4x2 vs w4x2u_products") {
        #[cfg(has_verilator)]
        models::dsp_w4x2();
    }
}

#[test]
fn dsp_w4x3_matches_w4x3u_products() {
    if models_or_skip("dsp_w4x3 vs w4x3u_products") {
        #[cfg(has_verilator)]
        models::dsp_w4x3();
    }
}

#[test]
fn port_classes_round_trip() {
    if models_or_skip("wrapper port classes") {
        #[cfg(has_verilator)]
        models::widths_fixture();
    }
}

#[test]
fn dynamic_interface_and_send() {
    if models_or_skip("RtlModel interface") {
        #[cfg(has_verilator)]
        models::dynamic_interface();
    }
}

#[cfg(has_verilator)]
mod models {
    use opu_hw::numerics::packing::{w4x2u_accumulate, w4x2u_products, w4x3u_products, W4X2U_MAX_DEPTH};
    use opu_rtlsim::rtl::{self, DspAccW4x2, DspW4x2, DspW4x3, PortDir, RtlModel, WidthsFixture};

    use opu_rtl::testing::Rng;

    type Block = Vec<([u8; 2], i16)>;

    const XS_EDGE: [i16; 5] = [i16::MIN, i16::MAX, 0, -1, 1];

    /// Blocks of 32 with every weight 0 or 15 and x = -32768, 32767 or 0 everywhere; alternating and
    /// one-hot patterns of the extremes.
    fn edge_blocks() -> Vec<Block> {
        let mut v = Vec::new();
        for w0 in [0u8, 15] {
            for w1 in [0u8, 15] {
                for x in [i16::MIN, i16::MAX, 0] {
                    v.push(vec![([w0, w1], x); 32]);
                }
            }
        }
        v.push(
            (0..32)
                .map(|j| ([15, 15], if j % 2 == 0 { i16::MIN } else { i16::MAX }))
                .collect(),
        );
        v.push(
            (0..32)
                .map(|j| (if j % 2 == 0 { [15, 0] } else { [0, 15] }, i16::MIN))
                .collect(),
        );
        for k in [0, 1, 30, 31] {
            v.push(
                (0..32)
                    .map(|j| {
                        if j == k {
                            ([15, 15], i16::MIN)
                        } else {
                            ([0, 0], 0)
                        }
                    })
                    .collect(),
            );
            v.push(
                (0..32)
                    .map(|j| {
                        if j == k {
                            ([0, 0], 0)
                        } else {
                            ([15, 15], i16::MIN)
                        }
                    })
                    .collect(),
            );
        }
        v
    }

    /// A random block: 32 columns, or (1 in 8) any depth the packing allows; columns uniform, or (1 in 4
    /// blocks) drawn from the extremes.
    fn random_block(rng: &mut Rng) -> Block {
        let r = rng.next_u64();
        let n = if r.is_multiple_of(8) {
            1 + (r >> 8) as usize % W4X2U_MAX_DEPTH
        } else {
            32
        };
        let extreme = (r >> 3).is_multiple_of(4);
        (0..n)
            .map(|_| {
                let c = rng.next_u64();
                if extreme {
                    let w = |b: u64| if b & 1 == 1 { 15u8 } else { 0 };
                    (
                        [w(c), w(c >> 1)],
                        XS_EDGE[(c >> 2) as usize % XS_EDGE.len()],
                    )
                } else {
                    ([(c & 15) as u8, ((c >> 4) & 15) as u8], (c >> 16) as i16)
                }
            })
            .collect()
    }

    /// Blocks back to back (`first` = 1 on each block's first column, no reset in between); the row sums are
    /// on s0, s1 after the edge that took the block's last column.
    pub fn dsp_acc_w4x2() {
        let mut m = DspAccW4x2::new();
        let mut rng = Rng(0x5151_acc0_0001);
        let mut blocks = edge_blocks();
        let n_edge = blocks.len();
        let mut columns = 0usize;
        let t = std::time::Instant::now();
        for i in 0.. {
            if i >= n_edge {
                if i - n_edge >= 115_000 {
                    break;
                }
                blocks.push(random_block(&mut rng));
            }
            let b = &blocks[i];
            for (j, &(w, x)) in b.iter().enumerate() {
                m.set_first(u64::from(j == 0));
                m.set_w0(u64::from(w[0]));
                m.set_w1(u64::from(w[1]));
                m.set_x(x as u64);
                m.tick();
            }
            columns += b.len();
            let got = [m.s0_i64(), m.s1_i64()];
            let want = w4x2u_accumulate(b);
            assert_eq!(
                got,
                want,
                "block {i} ({} columns): [s0, s1] = {got:?}, want {want:?}; block {b:?}",
                b.len()
            );
        }
        assert_eq!(m.cycles(), columns as u64);
        eprintln!(
            "dsp_acc_w4x2: {} blocks, {columns} columns checked in {:?}",
            blocks.len(),
            t.elapsed()
        );
        // the worst case is in there: all weights 15, x = -32768
        let worst = vec![([15u8, 15], i16::MIN); 32];
        assert_eq!(w4x2u_accumulate(&worst), [-15_728_640, -15_728_640]);
    }

    /// One input per cycle; the products of an input are on y0..y2 after the edge that took it. Every one of
    /// the 2^24 inputs (w0, w1, w2 in 0..=15, x in -2048..=2047), against the model and the plain products.
    pub fn dsp_w4x3() {
        let inputs = (-2048i16..=2047).flat_map(|x| (0u32..4096).map(move |w| ([(w & 15) as u8, ((w >> 4) & 15) as u8, (w >> 8) as u8], x)));
        let mut m = DspW4x3::new();
        let t = std::time::Instant::now();
        let mut n = 0u64;
        for (i, (w, x)) in inputs.enumerate() {
            m.set_w0(u64::from(w[0]));
            m.set_w1(u64::from(w[1]));
            m.set_w2(u64::from(w[2]));
            m.set_x(x as u64);
            m.tick();
            let got = [m.y0_i64(), m.y1_i64(), m.y2_i64()];
            let want = w4x3u_products(w, x).map(i64::from);
            assert_eq!(
                got, want,
                "input {i}: w {w:?} x {x}: [y0, y1, y2] = {got:?}, want {want:?}"
            );
            assert_eq!(want, w.map(|wi| i64::from(wi) * i64::from(x)));
            n += 1;
        }
        assert_eq!(n, 1 << 24);
        eprintln!("dsp_w4x3: all {n} inputs checked in {:?}", t.elapsed());
    }

    /// One input per cycle; the two products are on y0, y1 after the edge that took it. The extremes, then
    /// 200k random inputs, against the model and the plain products.
    pub fn dsp_w4x2() {
        let ws = [0u8, 1, 14, 15];
        let xs = [i16::MIN, i16::MIN + 1, -1, 0, 1, i16::MAX - 1, i16::MAX];
        let mut inputs = Vec::new();
        for &w0 in &ws {
            for &w1 in &ws {
                for &x in &xs {
                    inputs.push(([w0, w1], x));
                }
            }
        }
        let mut rng = Rng(0x5151_0204_0001);
        for _ in 0..200_000 {
            let r = rng.next_u64();
            inputs.push(([(r & 15) as u8, ((r >> 4) & 15) as u8], (r >> 16) as i16));
        }
        let mut m = DspW4x2::new();
        for (i, &(w, x)) in inputs.iter().enumerate() {
            m.set_w0(u64::from(w[0]));
            m.set_w1(u64::from(w[1]));
            m.set_x(x as u16 as u64);
            m.tick();
            let got = [m.y0_i64(), m.y1_i64()];
            let want = w4x2u_products(w, x).map(i64::from);
            assert_eq!(got, want, "input {i}: w {w:?} x {x}");
            assert_eq!(want, w.map(|wi| i64::from(wi) * i64::from(x)));
        }
    }

    fn rand_words(rng: &mut Rng, n: usize) -> Vec<u32> {
        (0..n).map(|_| rng.next_u64() as u32).collect()
    }

    /// `w` as a `bits`-bit value (top bits cleared).
    fn masked(mut w: Vec<u32>, bits: u32) -> Vec<u32> {
        if !bits.is_multiple_of(32) {
            *w.last_mut().unwrap() &= (1u32 << (bits % 32)) - 1;
        }
        w
    }

    /// Every port class (CData .. VlWide<10>) through the generated accessors: inputs with garbage above
    /// their width, registered and combinational outputs checked against Rust arithmetic, every cycle.
    pub fn widths_fixture() {
        assert!(
            !rtl::UNITS.contains(&"widths_fixture"),
            "the fixture is not a unit"
        );
        assert_eq!(
            (
                WidthsFixture::A8_BITS,
                WidthsFixture::S96_BITS,
                WidthsFixture::S300_BITS,
                WidthsFixture::D_Q_BITS
            ),
            (8, 96, 300, 5)
        );
        let mut m = WidthsFixture::new();
        let mut rng = Rng(0x5151_f1c5_0001);
        m.eval();
        let c0 = m.count();
        for i in 0..20_000u64 {
            let r = [rng.next_u64(), rng.next_u64(), rng.next_u64(), rng.next_u64()];
            let r128 = (u128::from(r[1]) << 64) | u128::from(r[0]);
            let a256 = rand_words(&mut rng, 8);
            let s300 = rand_words(&mut rng, 10);
            // inputs, all with bits set above their width
            m.set_fn(r[2]);
            m.set_float(r[2] >> 1);
            m.set_d_q(r[2] >> 4);
            m.set_a8(r[2] >> 9 | 0x100);
            m.set_s13(r[2] >> 20);
            m.set_a32(r[3]);
            m.set_s33(r[3] >> 7);
            m.set_a64(r[0]);
            m.set_s96(r128);
            m.set_a128(r128.rotate_left(17));
            m.set_a256_words(&a256);
            m.set_s300_words(&s300);
            m.tick();

            let ctx = |what: &str| format!("cycle {i}: {what}; inputs {r:x?} {a256:x?} {s300:x?}");
            // inputs read back, masked
            assert_eq!(m.r#fn(), r[2] & 1, "{}", ctx("fn"));
            assert_eq!(m.float(), (r[2] >> 1) & 7, "{}", ctx("float"));
            assert_eq!(m.d_q(), (r[2] >> 4) & 31, "{}", ctx("d$q"));
            assert_eq!(m.a8(), (r[2] >> 9) & 0xff, "{}", ctx("a8"));
            assert_eq!(
                m.s13_i64(),
                ((r[2] >> 20) << 51) as i64 >> 51,
                "{}",
                ctx("s13")
            );
            assert_eq!(m.s96(), r128 & ((1u128 << 96) - 1), "{}", ctx("s96"));
            assert_eq!(m.s300_words(), masked(s300.clone(), 300), "{}", ctx("s300"));
            // registered outputs: the inputs of this edge
            assert_eq!(m.q8(), ((r[2] >> 9) + 1) & 0xff, "{}", ctx("q8"));
            assert_eq!(
                m.q32(),
                (r[3] & 0xffff_ffff) ^ 0xdead_beef,
                "{}",
                ctx("q32")
            );
            let s33 = ((r[3] >> 7) << 31) as i64 >> 31;
            assert_eq!(m.n33_i64(), (-s33 << 31) >> 31, "{}", ctx("n33"));
            assert_eq!(
                m.n33(),
                (s33.wrapping_neg() as u64) & ((1 << 33) - 1),
                "{}",
                ctx("n33 raw")
            );
            assert_eq!(m.q64(), r[0].wrapping_add(1), "{}", ctx("q64"));
            let s96 = ((r128 << 32) as i128) >> 32;
            assert_eq!(m.n96_i128(), ((-s96) << 32) >> 32, "{}", ctx("n96"));
            assert_eq!(
                m.q128(),
                r128.rotate_left(17).wrapping_add(1),
                "{}",
                ctx("q128")
            );
            let rot: Vec<u32> = (0..8)
                .map(|k| (a256[k] << 1) | (a256[(k + 7) % 8] >> 31))
                .collect();
            assert_eq!(m.q256_words(), rot, "{}", ctx("q256"));
            let lp = ((r[2] & 1) << 7 | ((r[2] >> 1) & 7) << 4 | ((r[2] >> 4) & 15))
                ^ ((r[2] >> 4) & 31);
            assert_eq!(m.r#loop(), lp, "{}", ctx("loop"));
            // combinational outputs
            let s13 = ((r[2] >> 20) << 51) as i64 >> 51;
            assert_eq!(m.n13_i64(), ((-s13) << 51) >> 51, "{}", ctx("n13"));
            let not300: Vec<u32> = s300.iter().map(|w| !w).collect();
            assert_eq!(m.n300_words(), masked(not300, 300), "{}", ctx("n300"));
            assert_eq!(
                m.count(),
                c0.wrapping_add(i + 1) & 0xffff_ffff,
                "{}",
                ctx("count")
            );
            assert_eq!(m.cycles(), i + 1);
        }
    }

    fn assert_send<T: Send>() {}

    /// The object-safe interface equals the typed one; models move between threads.
    pub fn dynamic_interface() {
        assert_send::<DspAccW4x2>();
        assert_send::<Box<dyn RtlModel>>();
        assert!(rtl::UNITS.contains(&"dsp_acc_w4x2") && rtl::UNITS.contains(&"dsp_w4x3"));
        assert!(rtl::instantiate("no_such_unit").is_none());
        assert_eq!(
            (DspAccW4x2::X_BITS, DspAccW4x2::S0_BITS, DspW4x3::X_BITS),
            (16, 26, 12)
        );

        let mut dynm = rtl::instantiate("dsp_acc_w4x2").unwrap();
        assert_eq!(dynm.unit(), "dsp_acc_w4x2");
        assert!(dynm.has_clock());
        let ports = dynm.ports();
        let idx = |name: &str| ports.iter().position(|p| p.name == name).unwrap();
        assert_eq!(ports[idx("s1")].dir, PortDir::Out);
        assert!(ports[idx("x")].signed && ports[idx("x")].is_input());
        // the same columns through both interfaces
        let mut rng = Rng(0x5151_d1a0_0001);
        let cols: Vec<[u32; 4]> = (0..320_000)
            .map(|j| {
                let r = rng.next_u64();
                [
                    u32::from(j % 32 == 0),
                    (r & 15) as u32,
                    ((r >> 4) & 15) as u32,
                    (r >> 16) as u32,
                ]
            })
            .collect();
        // the typed model, created here, runs on another thread at the same time
        let typed = {
            let cols = cols.clone();
            let mut m = DspAccW4x2::new();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for c in &cols {
                    m.set_first(c[0].into());
                    m.set_w0(c[1].into());
                    m.set_w1(c[2].into());
                    m.set_x(c[3].into());
                    m.tick();
                    out.push([m.s0(), m.s1()]);
                }
                out
            })
        };
        let mut got = Vec::new();
        for c in &cols {
            for (k, name) in ["first", "w0", "w1", "x"].iter().enumerate() {
                dynm.set_port_words(idx(name), &[c[k]]);
            }
            dynm.tick();
            let (mut s0, mut s1) = ([0u32], [0u32]);
            dynm.port_words(idx("s0"), &mut s0);
            dynm.port_words(idx("s1"), &mut s1);
            got.push([u64::from(s0[0]), u64::from(s1[0])]);
        }
        let typed = typed.join().unwrap();
        for (j, (g, t)) in got.iter().zip(&typed).enumerate() {
            assert_eq!(g, t, "column {j}: RtlModel vs typed");
        }
        assert_eq!(dynm.cycles(), cols.len() as u64);
    }
}

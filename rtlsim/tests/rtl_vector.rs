//! Verilator co-simulation of the FP32 operators, the vector lane and the reduction unit against `opu-hw`
//! and Rust's IEEE arithmetic, bit for bit:
//!
//! - `fp32`: `a + b`, `a - b`, `a * b` (NaN canonical) on every pair of the edge values, 10^6 random bit
//!   patterns, and 10^6 pairs built to hit alignment, cancellation, rounding ties, carries into the next
//!   binade and the underflow / overflow boundaries;
//! - `vector`: every op on 10^6 operand sets (FP16-derived values and random FP32 bit patterns, edge values
//!   mixed in), and exp, sigmoid, SiLU, SwiGLU, recip, rsqrt on all 65536 FP16 inputs, against
//!   `LaneOp::apply` (the opu-hw functions);
//! - `reduce`: the sum of squares over 10^6 elements in rows (against `accumulate_square` and
//!   `WideAcc::to_f32`, then `rms_inv` through the lane's `rms_inv` op), and the online softmax over rows of
//!   scores (against `OnlineSoftmax::push`, with the output rows updated through the lane's `axpby`).

#[cfg(has_verilator)]
mod models {
    use opu_hw::numerics::acc::WideAcc;
    use opu_hw::numerics::fp16::{canon_f32, f16_to_f32, f32_to_f16};
    use opu_hw::numerics::vector::{accumulate_square, rms_inv, OnlineSoftmax};
    use opu_rtl::fp32::{edge_values, FpOp, FP32_UNIT_LATENCY};
    use opu_rtl::reduce::{softmax_latency, softmax_step, SOFTMAX_II, SOFTMAX_ROWS, SUMSQ_LATENCY};
    use opu_rtl::testing::Rng;
    use opu_rtl::vector::{lane_result, random_operand, vector_latency, LaneOp};
    use opu_rtlsim::rtl::{Fp32, Reduce, Vector};

    const OPS: [FpOp; 3] = [FpOp::Add, FpOp::Sub, FpOp::Mul];

    /// Streams `pairs` through the `fp32` unit; checks every result.
    fn check_fp32(m: &mut Fp32, pairs: &[(u32, u32)], what: &str) {
        let lag = FP32_UNIT_LATENCY - 1;
        for k in 0..pairs.len() + lag {
            let (a, b) = pairs.get(k).copied().unwrap_or((0, 0));
            m.set_a(a.into());
            m.set_b(b.into());
            m.tick();
            if k >= lag {
                let (a, b) = pairs[k - lag];
                let got = [m.y_add(), m.y_sub(), m.y_mul()].map(|y| y as u32);
                for (op, g) in OPS.iter().zip(got) {
                    let want = op.apply(f32::from_bits(a), f32::from_bits(b)).to_bits();
                    assert_eq!(g, want, "{what}: {op:?} {a:08x} {b:08x}: RTL {g:08x}, Rust {want:08x}");
                }
            }
        }
    }

    /// A random significand with the given biased exponent field and sign.
    fn with_exp(rng: &mut Rng, e: u32) -> u32 {
        (rng.next_u64() as u32 & 0x8000_0000) | (e & 0xFF) << 23 | (rng.next_u64() as u32 & 0x7F_FFFF)
    }

    /// Pairs built to reach the corner cases of add and multiply.
    fn hard_pair(rng: &mut Rng) -> (u32, u32) {
        let ea = 1 + rng.below(254) as u32;
        let a = with_exp(rng, ea);
        match rng.below(8) {
            // exponent differences 0..=30: every alignment, guard / round / sticky, cancellation
            0 | 1 => {
                let eb = ea.saturating_sub(rng.below(31) as u32).max(1);
                (a, with_exp(rng, eb))
            }
            // nearly equal magnitudes (massive cancellation) and exact negation
            2 => {
                let d = rng.below(4) as u32;
                (a, (a ^ 0x8000_0000).wrapping_add(d))
            }
            // low mantissa bits only: sums and products that are ties or carry into the next binade
            3 => {
                let hi = if rng.below(2) == 0 { 0x7F_FFF0 } else { 0 };
                let b = (a & 0xFF80_0000) | (rng.below(16) as u32) | hi;
                ((a & 0xFFFF_FFF0) | rng.below(16) as u32, b)
            }
            // products near the subnormal boundary (exponent sums around 127 - 24..127 + 1)
            4 => {
                let s = 103 + rng.below(26) as u32;
                let ea = 1 + rng.below(u64::from(s.min(254))) as u32;
                let a = with_exp(rng, ea);
                (a, with_exp(rng, (s - ea).clamp(1, 254)))
            }
            // products near overflow
            5 => {
                let s = 252 + rng.below(5) as u32;
                let ea = (s - 127 + rng.below(127) as u32).min(254);
                let a = with_exp(rng, ea);
                (a, with_exp(rng, (s - ea).clamp(1, 254)))
            }
            // subnormals with anything
            6 => (rng.next_u64() as u32 & 0x807F_FFFF, random_operand(rng)),
            _ => (random_operand(rng), random_operand(rng)),
        }
    }

    #[test]
    fn fp32_operators_equal_rust() {
        let mut m = Fp32::new();
        let mut rng = Rng(0xf32_c051);
        let e = edge_values();
        let edge: Vec<(u32, u32)> = e.iter().flat_map(|&a| e.iter().map(move |&b| (a, b))).collect();
        check_fp32(&mut m, &edge, "edge pairs");
        let random: Vec<(u32, u32)> = (0..1_000_000).map(|_| (rng.next_u64() as u32, rng.next_u64() as u32)).collect();
        check_fp32(&mut m, &random, "random bit patterns");
        let hard: Vec<(u32, u32)> = (0..1_000_000).map(|_| hard_pair(&mut rng)).collect();
        check_fp32(&mut m, &hard, "constructed pairs");
        eprintln!("fp32: {} pairs per op equal to Rust, {} cycles", edge.len() + 2_000_000, m.cycles());
    }

    /// Streams `(op, a, b, c, d)` through the lane; checks `y0` (and `y1` for RoPE).
    fn check_lane(m: &mut Vector, inputs: &[(LaneOp, [u32; 4])], what: &str) {
        let lag = vector_latency() - 1;
        for k in 0..inputs.len() + lag {
            let (op, x) = inputs.get(k).copied().unwrap_or((LaneOp::Copy, [0; 4]));
            m.set_op(op.code().into());
            m.set_a(x[0].into());
            m.set_b(x[1].into());
            m.set_c(x[2].into());
            m.set_d(x[3].into());
            m.tick();
            if k >= lag {
                let (op, x) = inputs[k - lag];
                let want = lane_result(op.code(), x[0], x[1], x[2], x[3]);
                let got = (m.y0() as u32, m.y1() as u32);
                assert_eq!(got, want, "{what}: {} {:08x?}: RTL {:08x?}, opu-hw {:08x?}", op.name(), x, got, want);
            }
        }
    }

    fn operands(rng: &mut Rng, op: LaneOp) -> [u32; 4] {
        let mut x = [0u32; 4].map(|_| random_operand(rng));
        // rms_inv: also the realistic shape (a sum of squares, n, eps) a quarter of the time
        if op == LaneOp::RmsInv && rng.below(4) == 0 {
            let n = 1 + rng.below(8192) as u32;
            x = [(rng.f32_unit() * n as f32 * 4.0).to_bits(), (n as f32).to_bits(), 1e-5f32.to_bits(), 0];
        }
        x
    }

    /// Each op on 10^6 operand sets.
    fn lane_random(ops: &[LaneOp], seed: u64) {
        let mut m = Vector::new();
        let mut rng = Rng(seed);
        for &op in ops {
            let inputs: Vec<(LaneOp, [u32; 4])> = (0..1_000_000).map(|_| (op, operands(&mut rng, op))).collect();
            check_lane(&mut m, &inputs, "random operands");
        }
        // all ops interleaved cycle by cycle
        let inputs: Vec<(LaneOp, [u32; 4])> = (0..200_000)
            .map(|_| {
                let op = LaneOp::ALL[rng.below(LaneOp::ALL.len() as u64) as usize];
                (op, operands(&mut rng, op))
            })
            .collect();
        check_lane(&mut m, &inputs, "mixed ops");
        eprintln!("vector {:?}: 10^6 operand sets each equal to opu-hw, {} cycles", ops, m.cycles());
    }

    #[test]
    fn lane_elementwise_ops_equal_opu_hw() {
        lane_random(&[LaneOp::Add, LaneOp::Mul, LaneOp::Copy, LaneOp::Scale, LaneOp::RmsNorm, LaneOp::Rope, LaneOp::Axpby], 0x7ec_0001);
    }

    #[test]
    fn lane_transcendentals_equal_opu_hw() {
        lane_random(&[LaneOp::Exp, LaneOp::Rsqrt, LaneOp::Recip, LaneOp::Sigmoid, LaneOp::Silu, LaneOp::SwiGlu, LaneOp::RmsInv], 0x7ec_0002);
    }

    /// exp, sigmoid, SiLU, SwiGLU, recip and rsqrt on every FP16 input; and the edge values in every operand
    /// position of every op.
    #[test]
    fn lane_exhaustive_fp16_and_edges() {
        let mut m = Vector::new();
        let mut rng = Rng(0x7ec_0003);
        for op in [LaneOp::Exp, LaneOp::Sigmoid, LaneOp::Silu, LaneOp::SwiGlu, LaneOp::Recip, LaneOp::Rsqrt] {
            let inputs: Vec<(LaneOp, [u32; 4])> = (0..=u16::MAX)
                .map(|h| (op, [f16_to_f32(h).to_bits(), random_operand(&mut rng), 0, 0]))
                .collect();
            check_lane(&mut m, &inputs, "all FP16 inputs");
        }
        let e = edge_values();
        let mut inputs = Vec::new();
        for op in LaneOp::ALL {
            for pos in 0..4 {
                for &v in &e {
                    for _ in 0..4 {
                        let mut x = operands(&mut rng, op);
                        x[pos] = v;
                        inputs.push((op, x));
                    }
                }
            }
            for &a in &e {
                for &b in &e {
                    inputs.push((op, [a, b, e[rng.below(e.len() as u64) as usize], e[rng.below(e.len() as u64) as usize]]));
                }
            }
        }
        check_lane(&mut m, &inputs, "edge values");
        eprintln!("vector: all FP16 inputs and {} edge-value sets equal to opu-hw, {} cycles", inputs.len(), m.cycles());
    }

    fn new_reduce() -> Reduce {
        let mut m = Reduce::new();
        m.set_reset(1);
        m.tick();
        m.set_reset(0);
        m
    }

    /// The sum of squares over rows of 1 to 4096 elements (10^6 in all), checked every cycle; each row's
    /// `rms_inv` through the lane equals `vector::rms_inv`.
    #[test]
    fn sum_of_squares_equals_accumulate_square() {
        let mut m = new_reduce();
        let mut lane = Vector::new();
        let mut rng = Rng(0x5c5_c051);
        let mut acc = WideAcc::ZERO;
        let mut want: std::collections::VecDeque<WideAcc> = std::collections::VecDeque::new();
        let mut rows = Vec::new();
        let mut n = 0usize;
        let lag = SUMSQ_LATENCY - 1;
        let mut left = 0usize;
        let mut row_len = 0usize;
        let total = 1_000_000usize;
        let mut k = 0usize;
        let mut tail = 0usize;
        let mut first = usize::MAX;
        while tail <= lag {
            let mut valid = false;
            if n < total && rng.below(8) != 0 {
                valid = true;
                let clear = left == 0;
                if clear {
                    if row_len > 0 {
                        rows.push((acc, row_len as u32));
                    }
                    let long = rng.below(4) == 0;
                    left = 1 + rng.below(if long { 4096 } else { 64 }) as usize;
                    row_len = 0;
                    acc = WideAcc::ZERO;
                }
                // mostly FP16 activations; sometimes an FP32 value (any bit pattern)
                let x = if rng.below(4) == 0 {
                    random_operand(&mut rng)
                } else {
                    f16_to_f32(f32_to_f16((rng.f32_unit() - 0.5) * 8.0) ^ (rng.below(2) as u16 * 0x8000)).to_bits()
                };
                accumulate_square(&mut acc, f32::from_bits(x));
                m.set_sq_valid(1);
                m.set_sq_clear(clear.into());
                m.set_sq_x(x.into());
                left -= 1;
                row_len += 1;
                n += 1;
            }
            if !valid {
                m.set_sq_valid(0);
                m.set_sq_clear(0);
            }
            if n == total {
                tail += 1;
            }
            m.tick();
            k += 1;
            want.push_back(acc);
            if want.len() > lag + 1 {
                want.pop_front();
            }
            if n == 1 && valid {
                first = k;
            }
            if n > 0 && k >= first + lag {
                let w = want[0];
                let got = (m.sumsq_i128(), m.sumsq_nf() == 1, m.sumsq_f32() as u32);
                assert_eq!(got, (w.fixed, w.nonfinite, w.to_f32().to_bits()), "sum of squares at cycle {k}");
            }
        }
        // rms_inv of every row through the lane's rms_inv op
        let inputs: Vec<(LaneOp, [u32; 4])> = rows
            .iter()
            .map(|(a, n)| (LaneOp::RmsInv, [a.to_f32().to_bits(), (*n as f32).to_bits(), 1e-5f32.to_bits(), 0]))
            .collect();
        let lag = vector_latency() - 1;
        for k in 0..inputs.len() + lag {
            let (op, x) = inputs.get(k).copied().unwrap_or((LaneOp::Copy, [0; 4]));
            lane.set_op(op.code().into());
            lane.set_a(x[0].into());
            lane.set_b(x[1].into());
            lane.set_c(x[2].into());
            lane.tick();
            if k >= lag {
                let (a, n) = rows[k - lag];
                assert_eq!(lane.y0() as u32, rms_inv(&a, n, 1e-5).to_bits(), "rms_inv of row {}", k - lag);
            }
        }
        eprintln!("sum of squares: {n} elements in {} rows equal to opu-hw, {} cycles", rows.len(), m.cycles());
    }

    /// The online softmax: 10^6 scores over the 16 rows, each row's scores in runs of 1 to 64 (a run starts
    /// with `sm_start`), a free row taken every cycle it can; `c, p, l, m` against `OnlineSoftmax::push`, and
    /// (rows 0 and 1) the output rows updated with the RTL's `c, p` through the lane's `axpby` against
    /// `OnlineSoftmax`'s own.
    #[test]
    fn online_softmax_equals_opu_hw() {
        const HD: usize = 4;
        const CHECKED_ROWS: usize = 2;
        let mut m = new_reduce();
        let mut lane = Vector::new();
        let mut rng = Rng(0x50f7_c051);
        let total = 1_000_000usize;
        let mut fed = 0usize;
        let mut left = [0usize; SOFTMAX_ROWS];
        // per fed score, in order: (row, start, score, v row)
        let mut sent: std::collections::VecDeque<(usize, bool, u32, [u16; HD])> = Default::default();
        let mut seen = 0usize;
        let mut model: Vec<OnlineSoftmax> = vec![OnlineSoftmax::new(0); SOFTMAX_ROWS];
        let mut rows: Vec<OnlineSoftmax> = vec![OnlineSoftmax::new(HD); CHECKED_ROWS];
        let mut o = [[0f32; HD]; CHECKED_ROWS];
        let mut last_fed = [usize::MAX; SOFTMAX_ROWS];
        let mut axpby_inputs = Vec::new();
        let mut k = 0usize;
        while seen < total {
            let busy = m.sm_busy();
            let row = rng.below(SOFTMAX_ROWS as u64) as usize;
            if fed < total && busy >> row & 1 == 0 {
                let start = left[row] == 0;
                if start {
                    left[row] = 1 + rng.below(64) as usize;
                }
                let s = match rng.below(10) {
                    0 => random_operand(&mut rng),
                    1 => f16_to_f32(rng.next_u64() as u16).to_bits(),
                    _ => ((rng.f32_unit() - 0.5) * 40.0).to_bits(),
                };
                let v: [u16; HD] = std::array::from_fn(|_| f32_to_f16((rng.f32_unit() - 0.5) * 4.0));
                m.set_sm_valid(1);
                m.set_sm_start(start.into());
                m.set_sm_row(row as u64);
                m.set_score(s.into());
                sent.push_back((row, start, s, v));
                left[row] -= 1;
                fed += 1;
                assert!(last_fed[row] == usize::MAX || k - last_fed[row] >= SOFTMAX_II, "row {row} free too early");
                last_fed[row] = k;
            } else {
                m.set_sm_valid(0);
            }
            m.tick();
            k += 1;
            assert!(k < 4 * total, "softmax stalled");
            if m.sm_out() == 1 {
                let (row, start, s, v) = sent.pop_front().expect("an output without a score");
                if start {
                    model[row] = OnlineSoftmax::new(0);
                }
                let (c, p, l, mx) = softmax_step(&mut model[row], f32::from_bits(s));
                let got = (m.sm_out_row() as usize, [m.sm_c(), m.sm_p(), m.sm_l(), m.sm_m()].map(|y| y as u32));
                let want = (row, [c, p, l, mx].map(f32::to_bits));
                assert_eq!(got, want, "softmax score {seen} ({s:08x}, row {row}, start {start}): RTL {got:08x?}, opu-hw {want:08x?}");
                if row < CHECKED_ROWS {
                    if start {
                        rows[row] = OnlineSoftmax::new(HD);
                        o[row] = [0.0; HD];
                    }
                    rows[row].push(f32::from_bits(s), &v);
                    assert_eq!(canon_f32(rows[row].sum).to_bits(), got.1[2]);
                    for i in 0..HD {
                        let x = [o[row][i].to_bits(), got.1[0], got.1[1], f16_to_f32(v[i]).to_bits()];
                        axpby_inputs.push((LaneOp::Axpby, x));
                        o[row][i] = f32::from_bits(lane_result(LaneOp::Axpby.code(), x[0], x[1], x[2], x[3]).0);
                        assert_eq!(o[row][i].to_bits(), canon_f32(rows[row].out[i]).to_bits(), "softmax output row, score {seen}");
                    }
                }
                seen += 1;
            }
        }
        assert!(k >= softmax_latency());
        // the axpby updates through the Verilated lane
        check_lane(&mut lane, &axpby_inputs, "softmax axpby");
        eprintln!("online softmax: {seen} scores equal to opu-hw in {k} cycles, {} axpby updates", axpby_inputs.len());
    }
}

/// Without Verilator this file has nothing to run; under `REQUIRE_VERILATOR=1` (CI) that is an error.
#[cfg(not(has_verilator))]
#[test]
fn verilator_models_required() {
    assert_ne!(
        std::env::var("REQUIRE_VERILATOR").as_deref(),
        Ok("1"),
        "opu-sim was built without Verilator models but REQUIRE_VERILATOR=1"
    );
    eprintln!("SKIPPED rtl_vector: opu-sim built without Verilator (install verilator >= 5)");
}

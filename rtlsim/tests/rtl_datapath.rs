//! Verilator co-simulation of the PE datapath against `opu-hw`, bit for bit: the aligner against
//! `align::align_block`, the lane against `dot::accumulate_block` (10^6+ products in each of W4Min, W4, W8),
//! the `sim`-preset PE array (aligner + 8 lanes) end to end from FP16 blocks. The stimulus (every activation
//! kind of docs/rtl.md, extreme weights and scales) and the expected values come from `opu_rtl::testing`.

#[cfg(has_verilator)]
mod models {
    use opu_hw::numerics::align::align_block;
    use opu_hw::numerics::weights::WeightFormat;
    use opu_hw::numerics::BLOCK;
    use opu_rtl::align::ALIGN_LATENCY;
    use opu_rtl::array::ARRAY_LATENCY;
    use opu_rtl::lane::{LANE_DSPS, LANE_LATENCY};
    use opu_rtl::testing::{acc_matches, act_block, ActKind, LaneCycle, LaneJob, Rng};
    use opu_rtl::router::ROUTER_LATENCY;
    use opu_rtl::testing::{RouterBeat, RouterJob};
    use opu_rtl::round::ROUND_LATENCY;
    use opu_rtl::testing::accumulator_values;
    use opu_rtl::sqsum::{chunk_sum_of_squares, SQSUM_LATENCY};
    use opu_rtlsim::rtl::{Align, Array, Lane, Round, Router, Sqsum};

    const MODES: [WeightFormat; 3] = [WeightFormat::W4Min, WeightFormat::W4, WeightFormat::W8];

    fn words16(v: &[u16]) -> Vec<u32> {
        v.chunks(2).map(|p| u32::from(p[0]) | u32::from(p[1]) << 16).collect()
    }

    /// Eight FP16 values as a 128-bit port (value `j` at bits `16j..`).
    fn u128_of(v: &[u16; 8]) -> u128 {
        v.iter().rev().fold(0u128, |a, &h| a << 16 | u128::from(h))
    }

    fn x_words(x: &[i16; LANE_DSPS]) -> Vec<u32> {
        words16(&x.map(|v| v as u16))
    }

    fn w_u128(w: &[u8; LANE_DSPS]) -> u128 {
        w.iter().rev().fold(0u128, |a, &b| a << 8 | u128::from(b))
    }

    fn drive_lane(m: &mut Lane, c: &LaneCycle) {
        m.set_valid(c.valid.into());
        m.set_mode(c.mode.into());
        m.set_half(c.half.into());
        m.set_row(c.row.into());
        m.set_clear(c.clear.into());
        m.set_last(c.last.into());
        m.set_x_words(&x_words(&c.x));
        m.set_w(w_u128(&c.w));
        m.set_x_nf(c.x_nf.into());
        m.set_x_exp(c.x_exp as u8 as u64);
        m.set_sa(c.sa as u32 as u64);
        m.set_d0(c.d[0].into());
        m.set_m0(c.m[0].into());
        m.set_d1(c.d[1].into());
        m.set_m1(c.m[1].into());
    }

    /// Runs `jobs` back to back through the Verilated lane; checks each row's accumulator on its `done`.
    /// Returns the products the jobs computed.
    fn check_lane(m: &mut Lane, jobs: &[LaneJob], what: &str) -> usize {
        let mut expected = [Vec::new(), Vec::new()];
        let mut cycles = Vec::new();
        let mut products = 0;
        for j in jobs {
            let e = j.expected();
            expected[0].push(e[0]);
            expected[1].push(e[1]);
            cycles.extend(j.cycles());
            products += 2 * BLOCK * j.x.len();
        }
        let mut seen = [0usize, 0usize];
        let idle = LaneCycle::default();
        for c in cycles.iter().chain(std::iter::repeat_n(&idle, LANE_LATENCY + 1)) {
            drive_lane(m, c);
            m.tick();
            for r in 0..2 {
                let (done, acc, nf) =
                    if r == 0 { (m.done0(), m.acc0_i128(), m.nf0()) } else { (m.done1(), m.acc1_i128(), m.nf1()) };
                if done == 1 {
                    let k = seen[r];
                    assert!(k < jobs.len(), "{what}: extra done{r}");
                    let want = &expected[r][k];
                    assert!(
                        acc_matches(acc, nf == 1, want),
                        "{what}: job {k} row {r}: RTL acc {acc} nf {nf}, opu-hw {want:?}\njob: {:?}",
                        jobs[k]
                    );
                    seen[r] += 1;
                }
            }
        }
        assert_eq!(seen, [jobs.len(); 2], "{what}: done pulses");
        products
    }

    fn new_lane() -> Lane {
        let mut m = Lane::new();
        m.set_reset(1);
        m.tick();
        m.set_reset(0);
        m
    }

    /// Every activation kind alone, with and without non-finite scales, in every mode; then a million
    /// products per mode of mixed jobs (1 to 8 blocks, every kind, some non-finite scales).
    #[test]
    fn lane_equals_hybrid_dot_product() {
        let mut m = new_lane();
        let mut rng = Rng(0x1a4e_c051);
        for fmt in MODES {
            let what = format!("lane {fmt:?}");
            let edge: Vec<LaneJob> = ActKind::ALL
                .iter()
                .flat_map(|&k| [false, true].map(|nf| (k, nf)))
                .map(|(k, nf)| {
                    let blocks = 1 + rng.below(4) as usize;
                    LaneJob::random(&mut rng, fmt, blocks, &[k], nf)
                })
                .collect();
            let mut products = check_lane(&mut m, &edge, &what);
            while products < 1_000_000 {
                let jobs: Vec<LaneJob> = (0..256)
                    .map(|_| {
                        let blocks = 1 + rng.below(8) as usize;
                        let nf = rng.below(16) == 0;
                        LaneJob::random(&mut rng, fmt, blocks, &ActKind::ALL, nf)
                    })
                    .collect();
                products += check_lane(&mut m, &jobs, &what);
            }
            eprintln!("{what}: {products} products equal to opu-hw");
        }
        eprintln!("lane: {} cycles", m.cycles());
    }

    /// `reset` drops the half-blocks in flight: a job cut off by it leaves no `done`, and the next job is
    /// exact.
    #[test]
    fn lane_reset_drops_work_in_flight() {
        let mut m = new_lane();
        let mut rng = Rng(0x1a4e_4e5e);
        let cut = LaneJob::random(&mut rng, WeightFormat::W4Min, 2, &[ActKind::Typical], false);
        for c in &cut.cycles() {
            drive_lane(&mut m, c);
            m.tick();
        }
        m.set_reset(1);
        m.tick();
        m.set_reset(0);
        for _ in 0..LANE_LATENCY + 1 {
            drive_lane(&mut m, &LaneCycle::default());
            m.tick();
            assert_eq!((m.done0(), m.done1()), (0, 0), "done after reset");
        }
        let next = LaneJob::random(&mut rng, WeightFormat::W4, 3, &ActKind::ALL, false);
        check_lane(&mut m, &[next], "after reset");
    }

    /// The aligner on 10^6 blocks of every kind, at the sim preset's W = 16.
    #[test]
    fn aligner_equals_align_block() {
        let mut m = Align::new();
        let mut rng = Rng(0xa119_c051);
        let n = 1_000_000usize;
        let mut blocks: std::collections::VecDeque<[u16; BLOCK]> = Default::default();
        for k in 0..n + ALIGN_LATENCY {
            let b = if k < n { act_block(&mut rng, ActKind::ALL[k % ActKind::ALL.len()]) } else { [0; BLOCK] };
            m.set_xf_words(&words16(&b));
            m.tick();
            blocks.push_back(b);
            if blocks.len() == ALIGN_LATENCY + 1 {
                blocks.pop_front();
            }
            if k + 1 >= ALIGN_LATENCY && k + 1 - ALIGN_LATENCY < n {
                let b = blocks[0];
                let want = align_block(&b, 16);
                let mw = m.mant_words();
                let mant: [i32; BLOCK] = std::array::from_fn(|j| i32::from((mw[j / 2] >> (16 * (j % 2))) as u16 as i16));
                let got = (mant, m.x_exp_i64() as i32, m.x_nf() == 1, m.sa_i64());
                assert_eq!(got, (want.mant, want.scale_exp, want.nonfinite, want.mant_sum()), "block {b:04x?}");
            }
        }
    }

    /// The sim-preset array: FP16 blocks in, 8 lanes x 2 rows of accumulators out, against
    /// `accumulate_block(align_block(x))` per row.
    #[test]
    fn sim_array_equals_hybrid_dot_product() {
        let lanes = opu_hw::OverlayConfig::sim().pe_lanes as usize;
        let mut m = Array::new();
        m.set_reset(1);
        m.tick();
        m.set_reset(0);
        let mut rng = Rng(0xa77a_c051);
        let mut products = 0usize;
        for fmt in MODES {
            for round in 0..24 {
                let blocks = 1 + rng.below(6) as usize;
                let kinds: &[ActKind] = if round < ActKind::ALL.len() { &ActKind::ALL[round..round + 1] } else { &ActKind::ALL };
                let x_raw: Vec<[u16; BLOCK]> = (0..blocks)
                    .map(|_| {
                        let k = kinds[rng.below(kinds.len() as u64) as usize];
                        act_block(&mut rng, k)
                    })
                    .collect();
                let jobs: Vec<LaneJob> =
                    (0..lanes).map(|_| LaneJob::with_activations(&mut rng, fmt, x_raw.clone(), round % 5 == 4)).collect();
                let per_lane: Vec<Vec<LaneCycle>> = jobs.iter().map(|j| j.cycles()).collect();
                let idle = LaneCycle::default();
                let mut seen = 0;
                for t in 0..per_lane[0].len() + ARRAY_LATENCY + 1 {
                    let c0 = per_lane[0].get(t).unwrap_or(&idle);
                    m.set_valid(c0.valid.into());
                    m.set_mode(c0.mode.into());
                    m.set_half(c0.half.into());
                    m.set_row(c0.row.into());
                    m.set_clear(c0.clear.into());
                    m.set_last(c0.last.into());
                    let blk = t / if fmt == WeightFormat::W8 { 4 } else { 2 };
                    m.set_xf_words(&words16(x_raw.get(blk).unwrap_or(&[0; BLOCK])));
                    let mut w = Vec::new();
                    let mut dm = Vec::new();
                    for c in per_lane.iter().map(|p| p.get(t).unwrap_or(&idle)) {
                        let wl = w_u128(&c.w);
                        w.extend((0..4).map(|k| (wl >> (32 * k)) as u32));
                        // {d0, m0, d1, m1}: m1 in the low 16 bits
                        dm.push(u32::from(c.m[1]) | u32::from(c.d[1]) << 16);
                        dm.push(u32::from(c.m[0]) | u32::from(c.d[0]) << 16);
                    }
                    m.set_w_words(&w);
                    m.set_dm_words(&dm);
                    m.tick();
                    let done = m.done();
                    if done != 0 {
                        let acc = m.acc_words();
                        let nf = m.nf();
                        for (l, job) in jobs.iter().enumerate() {
                            let want = job.expected();
                            for (r, want) in want.iter().enumerate() {
                                let bit = 2 * l + r;
                                if done >> bit & 1 == 0 {
                                    continue;
                                }
                                let base = 3 * bit; // 96 bits = 3 words per row
                                let v = u128::from(acc[base]) | u128::from(acc[base + 1]) << 32 | u128::from(acc[base + 2]) << 64;
                                let v = ((v << 32) as i128) >> 32;
                                assert!(
                                    acc_matches(v, nf >> bit & 1 == 1, want),
                                    "array {fmt:?} round {round} lane {l} row {r}: RTL {v} nf {}, opu-hw {:?}",
                                    nf >> bit & 1,
                                    want
                                );
                                seen += 1;
                            }
                        }
                    }
                }
                assert_eq!(seen, 2 * lanes, "array {fmt:?} round {round}: done pulses");
                products += 2 * lanes * BLOCK * blocks;
            }
        }
        eprintln!("array: {products} products in {} cycles equal to opu-hw", m.cycles());
    }

    /// The router: 10^6+ FP16 products (vectors of 1 to 600 columns, every activation kind, some non-finite
    /// biases) against `router::route` (dot_f16 + bias, rounded to FP32, the decision), bit for bit.
    #[test]
    fn router_equals_route() {
        let mut m = Router::new();
        m.set_reset(1);
        m.tick();
        m.set_reset(0);
        let mut rng = Rng(0x4017_c051);
        let mut products = 0usize;
        let mut skips = 0usize;
        let mut decisions = 0usize;
        let mut jobs: Vec<RouterJob> = ActKind::ALL.iter().map(|&k| RouterJob::random(&mut rng, 64, &[k], false)).collect();
        while products < 1_000_000 {
            let batch: Vec<RouterJob> = (0..64)
                .map(|_| {
                    let cols = 1 + rng.below(600) as usize;
                    // half the vectors finite, so that both decisions are exercised
                    let finite = rng.below(2) == 0;
                    let kinds: &[ActKind] = if finite { &ActKind::FINITE } else { &ActKind::ALL };
                    let nf_bias = !finite && rng.below(8) == 0;
                    RouterJob::random(&mut rng, cols, kinds, nf_bias)
                })
                .collect();
            jobs.extend(batch);
            let beats: Vec<RouterBeat> = jobs.iter().flat_map(|j| j.beats()).collect();
            let mut k = 0;
            let idle = RouterBeat::default();
            for b in beats.iter().chain(std::iter::repeat_n(&idle, ROUTER_LATENCY + 1)) {
                m.set_valid(b.valid.into());
                m.set_first(b.first.into());
                m.set_last(b.last.into());
                m.set_x(u128_of(&b.x));
                m.set_w0(u128_of(&b.w[0]));
                m.set_w1(u128_of(&b.w[1]));
                m.set_b0(b.b[0].into());
                m.set_b1(b.b[1].into());
                m.tick();
                if m.done() == 1 {
                    let j = &jobs[k];
                    let (l0, l1, skip) = j.expected();
                    let got = (m.l0() as u32, m.l1() as u32, m.skip() == 1);
                    assert_eq!(got, (l0.to_bits(), l1.to_bits(), skip), "router job {k}: {j:?}");
                    skips += usize::from(skip);
                    products += 2 * j.x.len();
                    k += 1;
                }
            }
            assert_eq!(k, jobs.len(), "router: done pulses");
            decisions += jobs.len();
            jobs.clear();
        }
        assert!(skips * 5 > decisions, "router: only {skips} skips in {decisions} decisions");
        eprintln!("router: {products} products equal to opu-hw ({skips} skips in {decisions}), {} cycles", m.cycles());
    }

    /// The fused sum of squares (`vx_sqsum`'s four stages as the matrix datapath pipelines them, a chunk per
    /// cycle; the vector datapath chains them, `red` of both) against opu-hw's
    /// `accumulate_square` into a `WideAcc`: every FP16 value, every FP32 exponent (the sums' limits: a
    /// square of 2^78 units or more is non-finite, exponent 149 is the last finite one for any significand,
    /// below 111 a square floors to 0), and 10^6 chunks of random bits, values near those limits and random
    /// masks. The sum is compared where it is finite (a non-finite sum's bits are unspecified).
    #[test]
    fn sqsum_equals_accumulate_square() {
        let mut m = Sqsum::new();
        let mut rng = Rng(0x5a_5e_0f_5a);
        let mut chunks: Vec<([u8; 32], bool, u16)> = Vec::new();
        for base in (0..=u16::MAX).step_by(16) {
            let mut ch = [0u8; 32];
            for k in 0..16 {
                ch[2 * k..2 * k + 2].copy_from_slice(&(base + k as u16).to_le_bytes());
            }
            chunks.push((ch, false, 0xFFFF));
        }
        let f32_word = |rng: &mut Rng, e: u32| (rng.next_u64() as u32 & 0x807F_FFFF) | e << 23;
        for e in 0..256u32 {
            for _ in 0..64 {
                let mut ch = [0u8; 32];
                for k in 0..8 {
                    let ek = if k == 0 { e } else { 100 + rng.below(60) as u32 };
                    let w = f32_word(&mut rng, ek);
                    ch[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
                }
                chunks.push((ch, true, 1 + (rng.below(255) as u16)));
            }
        }
        for _ in 0..1_000_000 {
            let f32v = rng.below(2) == 0;
            let mut ch = [0u8; 32];
            for k in 0..8 {
                let w = match rng.below(4) {
                    0 => rng.next_u64() as u32,
                    1 => {
                        let e = 105 + rng.below(50) as u32;
                        f32_word(&mut rng, e)
                    }
                    2 => {
                        let e = 140 + rng.below(12) as u32;
                        f32_word(&mut rng, e)
                    }
                    _ => rng.next_u64() as u32 & 0xBFFF_BFFF,
                };
                ch[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
            let mask = if rng.below(4) == 0 { 0xFFFF } else { rng.next_u64() as u16 };
            chunks.push((ch, f32v, mask));
        }
        let (mut finite, mut nonfinite) = (0u64, 0u64);
        // a chunk per cycle into the pipeline: chunk i's sum is on the outputs after edge i + SQSUM_LATENCY - 1
        // (zero chunks flush the last ones out)
        let flush = ([0u8; 32], false, 0u16);
        for (i, input) in chunks.iter().chain(std::iter::repeat_n(&flush, SQSUM_LATENCY - 1)).enumerate() {
            let words: Vec<u32> = input.0.chunks(4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).collect();
            m.set_ch_words(&words);
            m.set_f32(input.1.into());
            m.set_mask(input.2.into());
            m.tick();
            let Some(c) = i.checked_sub(SQSUM_LATENCY - 1).map(|j| &chunks[j]) else { continue };
            let want = chunk_sum_of_squares(&c.0, c.1, c.2);
            let (sum, nf) = (m.sum(), m.nf() != 0);
            assert_eq!(nf, want.nonfinite, "non-finite flag of {:02x?} f32 {} mask {:04x}", c.0, c.1, c.2);
            if !nf {
                assert_eq!(sum, want.fixed as u128 & ((1 << 96) - 1), "sum of {:02x?} f32 {} mask {:04x}", c.0, c.1, c.2);
                finite += 1;
            } else {
                nonfinite += 1;
            }
        }
        assert!(nonfinite > 10_000 && finite > 500_000, "finite {finite}, non-finite {nonfinite}");
        eprintln!("sqsum: {} chunks equal to opu-hw ({finite} finite, {nonfinite} non-finite)", chunks.len());
    }

    /// The output stage on 10^6 accumulators (every magnitude, both signs, the FP16 edges, some non-finite)
    /// against `WideAcc::to_f16` and `to_f32`.
    #[test]
    fn round_equals_to_f16_and_to_f32() {
        let mut m = Round::new();
        let mut rng = Rng(0x40d0_c051);
        let accs = accumulator_values(&mut rng, 1_000_000);
        for k in 0..accs.len() + ROUND_LATENCY {
            let a = accs.get(k).copied().unwrap_or_default();
            m.set_acc(a.fixed as u128);
            m.set_nf(a.nonfinite.into());
            m.tick();
            if k + 1 >= ROUND_LATENCY && k + 1 - ROUND_LATENCY < accs.len() {
                let a = &accs[k + 1 - ROUND_LATENCY];
                assert_eq!((m.f16() as u16, m.f32() as u32), (a.to_f16(), a.to_f32().to_bits()), "{a:?}");
            }
        }
    }
}

#[cfg(not(has_verilator))]
#[test]
fn models_are_built() {
    assert_ne!(
        std::env::var("REQUIRE_VERILATOR").as_deref(),
        Ok("1"),
        "opu-sim was built without Verilator models but REQUIRE_VERILATOR=1"
    );
    eprintln!("SKIPPED the Verilator co-simulation of the PE datapath: opu-sim was built without verilator");
}

//! VCD waveforms of the Verilator models (`trace_vcd`, see `opu_rtlsim::rtl` "Waveforms"): the file's header,
//! its times and values against what the model's accessors returned, errors, and two models tracing on two
//! threads at once.
//!
//! Without the models (opu-sim built without verilator on PATH) every test prints SKIPPED and passes,
//! unless `REQUIRE_VERILATOR=1`, which makes it a failure.

mod common;

use common::models_or_skip;

#[test]
fn dsp_acc_w4x2_waveform_matches_the_model() {
    if models_or_skip("dsp_acc_w4x2 VCD trace") {
        #[cfg(has_verilator)]
        traces::dsp_acc_w4x2_waveform();
    }
}

#[test]
fn trace_errors_name_the_path() {
    if models_or_skip("VCD trace errors") {
        #[cfg(has_verilator)]
        traces::errors();
    }
}

#[test]
fn two_models_trace_on_two_threads() {
    if models_or_skip("VCD traces on two threads") {
        #[cfg(has_verilator)]
        traces::two_threads();
    }
}

#[cfg(has_verilator)]
mod traces {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use opu_rtlsim::rtl::{self, DspAccW4x2, VCD_PERIOD_PS};

    const HALF: u64 = VCD_PERIOD_PS / 2;

    use opu_rtl::testing::Rng;

    /// A fresh directory for one test's files.
    fn scratch(test: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("opu-sim-rtl-trace-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A `$var`: its scope (`TOP`, `TOP.opu_dsp_acc_w4x2`, ...), name and width.
    #[derive(Debug)]
    struct Var {
        scope: String,
        name: String,
        bits: u32,
        id: String,
    }

    /// As much of a VCD file as the tests read.
    struct Vcd {
        timescale: String,
        vars: Vec<Var>,
        /// Per identifier code: (time, value bits as written).
        changes: HashMap<String, Vec<(u64, String)>>,
        times: Vec<u64>,
    }

    impl Vcd {
        fn parse(text: &str) -> Vcd {
            let mut tok = text.split_whitespace();
            let until_end = |tok: &mut std::str::SplitWhitespace| -> Vec<String> {
                let mut v = Vec::new();
                for t in tok.by_ref() {
                    if t == "$end" {
                        return v;
                    }
                    v.push(t.to_string());
                }
                panic!("no $end");
            };
            let mut vcd = Vcd {
                timescale: String::new(),
                vars: Vec::new(),
                changes: HashMap::new(),
                times: Vec::new(),
            };
            let mut scopes: Vec<String> = Vec::new();
            loop {
                match tok.next().expect("a VCD header ends with $enddefinitions") {
                    "$timescale" => vcd.timescale = until_end(&mut tok).concat(),
                    "$scope" => {
                        let s = until_end(&mut tok);
                        scopes.push(s[1].clone());
                    }
                    "$upscope" => {
                        until_end(&mut tok);
                        scopes.pop().expect("$upscope without $scope");
                    }
                    "$var" => {
                        let v = until_end(&mut tok);
                        vcd.vars.push(Var {
                            scope: scopes.join("."),
                            bits: v[1].parse().unwrap(),
                            id: v[2].clone(),
                            name: v[3].clone(),
                        });
                    }
                    "$enddefinitions" => {
                        until_end(&mut tok);
                        break;
                    }
                    "$version" | "$date" | "$comment" => {
                        until_end(&mut tok);
                    }
                    t => panic!("unexpected {t:?} in the VCD header"),
                }
            }
            assert!(scopes.is_empty(), "unclosed scopes {scopes:?}");
            let mut now = None;
            while let Some(t) = tok.next() {
                if let Some(time) = t.strip_prefix('#') {
                    let time: u64 = time.parse().unwrap();
                    assert!(now.is_none_or(|n| time > n), "times must increase: #{time}");
                    now = Some(time);
                    vcd.times.push(time);
                } else if t.starts_with('$') {
                    // $dumpvars, $end, ...
                } else {
                    let (value, id) = match t.strip_prefix('b') {
                        Some(bits) => (bits.to_string(), tok.next().unwrap().to_string()),
                        None => (t[..1].to_string(), t[1..].to_string()),
                    };
                    let at = now.expect("a value change before the first time");
                    vcd.changes.entry(id).or_default().push((at, value));
                }
            }
            vcd
        }

        fn var(&self, scope: &str, name: &str) -> &Var {
            self.vars
                .iter()
                .find(|v| v.scope == scope && v.name == name)
                .unwrap_or_else(|| panic!("no $var {scope}.{name}"))
        }

        fn changes(&self, scope: &str, name: &str) -> &[(u64, String)] {
            self.changes
                .get(&self.var(scope, name).id)
                .map_or(&[], Vec::as_slice)
        }

        /// The value of `scope.name` at time `t` (its last change at or before `t`).
        fn value_at(&self, scope: &str, name: &str, t: u64) -> u128 {
            let ch = self.changes(scope, name);
            let i = ch.partition_point(|c| c.0 <= t);
            assert!(i > 0, "{scope}.{name} has no value at #{t}");
            u128::from_str_radix(&ch[i - 1].1, 2)
                .unwrap_or_else(|_| panic!("{scope}.{name} at #{t}: {:?}", ch[i - 1].1))
        }
    }

    fn read(path: &Path) -> Vcd {
        Vcd::parse(&std::fs::read_to_string(path).unwrap())
    }

    /// `DspAccW4x2` traced from cycle 3 for 40 cycles of known inputs, then one eval between ticks and two
    /// clock edges driven by hand: the header declares the ports with their widths, the clock toggles on
    /// the documented times, and inputs and outputs in the file are what was set and what the accessors
    /// read.
    pub fn dsp_acc_w4x2_waveform() {
        let dir = scratch("dsp");
        let path = dir.join("dsp.vcd");
        let mut m = DspAccW4x2::new();
        for _ in 0..3 {
            m.tick(); // untraced
        }
        assert_eq!(m.trace_path(), None);
        m.trace_vcd(&path, 0).unwrap();
        assert_eq!(m.trace_path(), Some(path.as_path()));

        const N: u64 = 40;
        let start = m.cycles();
        let mut rng = Rng(0x7ace_0000_0001);
        // (cycle, inputs [first, w0, w1, x], outputs [s0, s1] read after the tick)
        let mut log = Vec::new();
        for j in 0..N {
            let r = rng.next_u64();
            let inputs = [
                u64::from(j % 8 == 0),
                r & 15,
                (r >> 4) & 15,
                (r >> 16) & 0xffff,
            ];
            m.set_first(inputs[0]);
            m.set_w0(inputs[1]);
            m.set_w1(inputs[2]);
            m.set_x(inputs[3]);
            let c = m.cycles();
            m.tick();
            log.push((c, inputs, [m.s0(), m.s1()]));
        }
        let end = start + N; // the cycle after the last tick
                             // an input changed between ticks: dumped 1 ps after the last edge
        m.set_x(0x1234);
        m.eval();
        // the clock driven by hand: each edge at the next half period
        m.set_clock(0);
        m.eval();
        m.set_first(1);
        m.set_w0(5);
        m.set_w1(7);
        m.set_clock(1);
        m.eval();
        let by_hand = [m.s0(), m.s1()];
        m.trace_close().unwrap();
        assert_eq!(m.trace_path(), None);
        m.tick(); // untraced again
        m.trace_close().unwrap(); // a no-op

        let vcd = read(&path);
        assert_eq!(vcd.timescale, "1ps");
        // the top's ports, with their widths, in the scope TOP; and the design below it
        for p in DspAccW4x2::PORTS {
            assert_eq!(vcd.var("TOP", p.name).bits, p.bits, "port {}", p.name);
        }
        assert_eq!(vcd.vars.iter().filter(|v| v.scope == "TOP").count(), 7);
        assert_eq!(vcd.var("TOP.opu_dsp_acc_w4x2.acc", "p").bits, 48);
        assert_eq!(
            vcd.var("TOP.opu_dsp_acc_w4x2", "s0").id,
            vcd.var("TOP", "s0").id
        );

        // times: each tick's two phases, the eval 1 ps later, the hand-driven edges on half periods
        let mut want: Vec<u64> = (start..end)
            .flat_map(|c| [c * VCD_PERIOD_PS, c * VCD_PERIOD_PS + HALF])
            .collect();
        let last_edge = (end - 1) * VCD_PERIOD_PS + HALF;
        want.extend([
            last_edge + 1,
            end * VCD_PERIOD_PS,
            end * VCD_PERIOD_PS + HALF,
        ]);
        assert_eq!(vcd.times, want);

        // the clock: low first (the full dump at the trace's start), then a rising edge per tick
        let clock = vcd.changes("TOP", "clock");
        let mut want_clock = vec![(start * VCD_PERIOD_PS, "0".to_string())];
        for c in start..=end {
            if c > start {
                want_clock.push((c * VCD_PERIOD_PS, "0".to_string()));
            }
            want_clock.push((c * VCD_PERIOD_PS + HALF, "1".to_string()));
        }
        assert_eq!(clock, want_clock.as_slice());
        let rising = clock.iter().filter(|c| c.1 == "1").count() as u64;
        assert_eq!(rising, N + 1);

        for (c, inputs, outputs) in &log {
            let low = c * VCD_PERIOD_PS;
            let high = low + HALF;
            for (k, name) in ["first", "w0", "w1", "x"].iter().enumerate() {
                assert_eq!(
                    vcd.value_at("TOP", name, low),
                    u128::from(inputs[k]),
                    "input {name} of cycle {c} at #{low}"
                );
            }
            // registered outputs change on the rising edge and hold until the next one
            for t in [high, high + VCD_PERIOD_PS - 1] {
                assert_eq!(
                    vcd.value_at("TOP", "s0", t),
                    u128::from(outputs[0]),
                    "s0 of cycle {c} at #{t}"
                );
                assert_eq!(
                    vcd.value_at("TOP", "s1", t),
                    u128::from(outputs[1]),
                    "s1 of cycle {c} at #{t}"
                );
            }
        }
        assert_eq!(vcd.value_at("TOP", "x", last_edge + 1), 0x1234);
        let hand = end * VCD_PERIOD_PS + HALF;
        assert_eq!(vcd.value_at("TOP", "s0", hand), u128::from(by_hand[0]));
        assert_eq!(vcd.value_at("TOP", "s1", hand), u128::from(by_hand[1]));
        assert_ne!(
            by_hand,
            log.last().unwrap().2,
            "the hand-driven edge changed the sums"
        );

        // a second trace of the same model, the ports only (depth 1); a trace in progress is closed by
        // the next trace_vcd
        let top_only = dir.join("top.vcd");
        let other = dir.join("other.vcd");
        m.trace_vcd(&top_only, 1).unwrap();
        m.eval(); // before any tick: at the cycle's start, the tick's low phase 1 ps later
        for _ in 0..5 {
            m.tick();
        }
        m.trace_vcd(&other, 0).unwrap();
        m.tick();
        drop(m); // closes `other`
        let vcd = read(&top_only);
        assert_eq!(vcd.vars.len(), 7);
        assert!(vcd.vars.iter().all(|v| v.scope == "TOP"));
        let c0 = end + 1; // the hand-driven edges are not ticks; one untraced tick since
        assert_eq!(
            vcd.times[..4],
            [
                c0 * VCD_PERIOD_PS,
                c0 * VCD_PERIOD_PS + 1,
                c0 * VCD_PERIOD_PS + HALF,
                (c0 + 1) * VCD_PERIOD_PS
            ]
        );
        assert_eq!(vcd.times.last(), Some(&((c0 + 4) * VCD_PERIOD_PS + HALF)));
        let vcd = read(&other);
        assert_eq!(
            vcd.times,
            [(c0 + 5) * VCD_PERIOD_PS, (c0 + 5) * VCD_PERIOD_PS + HALF]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Paths that cannot be written: an io::Error naming the path, no trace, the model still runs.
    pub fn errors() {
        let dir = scratch("errors");
        let mut m = DspAccW4x2::new();
        let missing = dir.join("no-such-dir").join("t.vcd");
        let cases: [(&Path, std::io::ErrorKind); 3] = [
            (&missing, std::io::ErrorKind::NotFound),
            (&dir, std::io::ErrorKind::IsADirectory),
            (Path::new("a\0b.vcd"), std::io::ErrorKind::InvalidInput),
        ];
        for (path, kind) in cases {
            let e = m.trace_vcd(path, 0).unwrap_err();
            assert_eq!(e.kind(), kind, "{path:?}: {e}");
            assert!(
                e.to_string().contains(&format!("{path:?}")),
                "{e} names {path:?}"
            );
            assert_eq!(m.trace_path(), None);
            m.tick();
        }
        // through the dynamic interface too
        let mut dynm = rtl::instantiate("dsp_acc_w4x2").unwrap();
        let e = dynm.trace_vcd(&missing, 0).unwrap_err();
        assert!(e.to_string().contains("no-such-dir"), "{e}");
        // a write error (a full disk) comes back from trace_flush and trace_close
        let full = Path::new("/dev/full");
        if full.exists() {
            m.trace_vcd(full, 0).unwrap();
            for _ in 0..10 {
                m.tick();
            }
            let e = m.trace_flush().unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
            assert!(e.to_string().contains("/dev/full"), "{e}");
            m.tick();
            let e = m.trace_close().unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
            assert_eq!(m.trace_path(), None);
            m.trace_close().unwrap();
        }
        assert_eq!(m.cycles(), if full.exists() { 14 } else { 3 });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two models on two threads, each tracing its own inputs into its own file at the same time (through
    /// the dynamic interface; closed by drop): each file holds exactly its model's values.
    pub fn two_threads() {
        let dir = scratch("threads");
        let run = |seed: u64, path: PathBuf| {
            std::thread::spawn(move || {
                let mut m = rtl::instantiate("dsp_acc_w4x2").unwrap();
                let ports = m.ports();
                let idx = |name: &str| ports.iter().position(|p| p.name == name).unwrap();
                m.trace_vcd(&path, 0).unwrap();
                let mut rng = Rng(seed);
                let mut sums = Vec::new();
                for j in 0..20_000u32 {
                    let r = rng.next_u64();
                    m.set_port_words(idx("first"), &[u32::from(j % 32 == 0)]);
                    m.set_port_words(idx("w0"), &[(r & 15) as u32]);
                    m.set_port_words(idx("w1"), &[((r >> 4) & 15) as u32]);
                    m.set_port_words(idx("x"), &[(r >> 16) as u32 & 0xffff]);
                    m.tick();
                    let mut s0 = [0u32];
                    m.port_words(idx("s0"), &mut s0);
                    sums.push(s0[0]);
                }
                sums
            })
        };
        let a = run(1, dir.join("a.vcd"));
        let b = run(2, dir.join("b.vcd"));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert_ne!(a, b);
        for (sums, file) in [(a, "a.vcd"), (b, "b.vcd")] {
            let vcd = read(&dir.join(file));
            assert_eq!(vcd.times.len(), 2 * sums.len(), "{file}");
            for (c, s0) in sums.iter().enumerate() {
                let t = c as u64 * VCD_PERIOD_PS + HALF;
                assert_eq!(
                    vcd.value_at("TOP", "s0", t),
                    u128::from(*s0),
                    "{file}: cycle {c}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

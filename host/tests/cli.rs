//! The `opu` binary: info, asm and disasm, on the sample program kept in tests/data/.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn opu(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_opu")).args(args).output().expect("run opu")
}

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/sample.s")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("opu-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn asm_disasm_round_trips_the_sample_program() {
    let (bin, text, bin2) = (tmp("a.bin"), tmp("a.s"), tmp("b.bin"));
    let out = opu(&["asm", s(&sample()), "-o", s(&bin)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&bin).unwrap();
    assert_eq!(bytes.len(), 31 * 16, "the sample has 31 instructions");
    assert!(opu(&["disasm", s(&bin), "-o", s(&text)]).status.success());
    assert!(opu(&["asm", s(&text), "-o", s(&bin2)]).status.success());
    assert_eq!(std::fs::read(&bin2).unwrap(), bytes, "asm(disasm(asm(sample))) differs from asm(sample)");
    // The listing carries pcs and words and still assembles to the same program.
    let listing = opu(&["disasm", "--listing", s(&bin)]);
    let listing_text = String::from_utf8(listing.stdout).unwrap();
    assert!(listing_text.lines().nth(30).unwrap().contains(";    30  00000000000000000000000000000001"));
    std::fs::write(tmp("l.s"), &listing_text).unwrap();
    assert!(opu(&["asm", s(&tmp("l.s")), "-o", s(&tmp("l.bin"))]).status.success());
    assert_eq!(std::fs::read(tmp("l.bin")).unwrap(), bytes);
}

#[test]
fn asm_into_a_container_and_disasm_it() {
    let opu_file = tmp("p.opu");
    let out = opu(&["asm", s(&sample()), "-o", s(&opu_file), "--container", "sim", "--entry", "decode"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c = opu_hw::Container::read(&opu_file).unwrap();
    assert_eq!(c.config_hash, opu_hw::OverlayConfig::sim().hash());
    assert_eq!(c.code("decode").unwrap().unwrap().len(), 31);
    let text = String::from_utf8(opu(&["disasm", s(&opu_file)]).stdout).unwrap();
    assert!(text.contains("code section `decode`") && text.contains("attn group=2 kvh=0 len=r1"), "{text}");
}

#[test]
fn bad_input_fails_with_a_message_naming_file_and_line() {
    let bad = tmp("bad.s");
    std::fs::write(&bad, "end\n\nmatmul fmt=w4m out=f16 ntok=1 dst=0 src=0 rows=70000 cols=32 w=0\n").unwrap();
    let out = opu(&["asm", s(&bad), "-o", s(&tmp("bad.bin"))]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.s: line 3") && err.contains("`rows` = 70000 does not fit its 16 bits"), "{err}");

    let trunc = tmp("trunc.bin");
    std::fs::write(&trunc, [1u8; 20]).unwrap();
    let out = opu(&["disasm", s(&trunc)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("trunc.bin") && err.contains("not a multiple of 16"), "{err}");

    let out = opu(&["disasm", s(&tmp("missing.bin"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("missing.bin"));

    let out = opu(&["info", "--config", "u999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("unknown overlay preset `u999`"));

    // a file that is not a container: the sentence once, with the file's name
    let short = tmp("short.opu");
    std::fs::write(&short, b"OPUPROG\0").unwrap();
    for cmd in ["inspect", "disasm"] {
        let out = opu(&[cmd, s(&short)]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.matches("shorter than the 64-byte header").count(), 1, "{cmd}: {err}");
        assert!(err.contains("short.opu"), "{cmd}: {err}");
    }
}

/// Sampling settings out of range are refused before anything runs, naming the flag and the range.
#[test]
fn run_refuses_sampling_settings_out_of_range() {
    for (flag, value, range) in [
        ("--temperature", "nan", "0 (greedy) or more"),
        ("--temperature=-1", "", "0 (greedy) or more"),
        ("--top-p", "7", "at most 1"),
        ("--top-p", "0", "at most 1"),
        ("--top-p", "x", "not a number"),
    ] {
        let mut args = vec!["run", "--backend", "reference", "--model", "/nonexistent.gguf", flag];
        if !value.is_empty() {
            args.push(value);
        }
        args.push("hello");
        let out = opu(&args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        let name = flag.split('=').next().unwrap();
        assert!(err.contains(name) && err.contains(range), "{flag} {value}: {err}");
    }
}

#[test]
fn info_json_lists_presets_isa_and_registers() {
    let out = opu(&["info", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let u280 = v["configs"].as_array().unwrap().iter().find(|c| c["name"] == "u280").unwrap();
    assert_eq!(u280["peak_bandwidth_gb_per_s"], 460.8);
    assert_eq!(u280["hash"], format!("{:#018x}", opu_hw::OverlayConfig::u280().hash()));
    assert_eq!(v["isa"].as_array().unwrap().len(), opu_hw::isa::SPECS.len());
    assert!(v["registers"].as_array().unwrap().iter().any(|r| r["name"] == "ERROR_PC"));
}

/// `opu run` on bad model files: a clear error naming the file, exit code 1 (not a panic's 101).
#[test]
fn run_refuses_bad_model_files() {
    use opu_compiler::gguf::{GgufWriter, Value};
    let check = |path: &std::path::Path, needle: &str| {
        let out = opu(&["run", "--backend", "reference", "--model", s(path), "--max-tokens", "1", "hello"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{}: {err}", path.display());
        assert!(err.contains(s(path)) && err.contains(needle), "{}: expected `{needle}` in: {err}", path.display());
    };
    check(&tmp("missing.gguf"), "no such model file");
    let not_gguf = tmp("notes.gguf");
    std::fs::write(&not_gguf, "these are my notes, not a model").unwrap();
    check(&not_gguf, "not a GGUF file");
    // A real-looking header cut short: the tensor table promises data the file does not have.
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("llama".into())).tensor("token_embd.weight", &[32, 4], 0, vec![0; 512]);
    let bytes = w.to_bytes();
    let trunc = tmp("truncated.gguf");
    std::fs::write(&trunc, &bytes[..bytes.len() - 100]).unwrap();
    check(&trunc, "truncated GGUF");
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("mamba".into()));
    let arch = tmp("mamba.gguf");
    std::fs::write(&arch, w.to_bytes()).unwrap();
    check(&arch, "architecture `mamba` is not supported");
}

/// Without pip (as without network) the error says what to run, where, and where to put the file.
#[test]
fn fetch_without_pip_says_what_to_do() {
    let cache = tmp("empty-cache");
    let out = Command::new(env!("CARGO_BIN_EXE_opu"))
        .args(["fetch", "smollm2", "--quiet"])
        .env("OPU_CACHE", &cache)
        .env("PATH", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("on a machine with network, run `opu fetch smollm2`"), "{err}");
    assert!(err.contains(&cache.join("smollm2").display().to_string()) && err.contains("--model PATH"), "{err}");
}

/// `opu compile` and `opu inspect` on a small synthetic llama; bad GGUFs give errors naming the file.
#[test]
fn compile_and_inspect() {
    let model = tmp("tiny.gguf");
    std::fs::write(&model, opu_compiler::testing::TinyLlama::default().gguf()).unwrap();
    let prog = tmp("tiny.opu");
    let out = opu(&["compile", s(&model), "--config", "sim", "--max-context", "32", "-o", s(&prog)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = opu(&["inspect", "--json", s(&prog)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config_hash"], format!("{:#018x}", opu_hw::OverlayConfig::sim().hash()));
    let entries = v["entries"].as_array().unwrap();
    assert_eq!(entries.iter().map(|e| e["name"].as_str().unwrap()).collect::<Vec<_>>(), ["decode", "prefill"]);
    // per layer: decode 4 `matmul` (q/k/v and gate/up each one matrix), prefill 7; then the output head
    assert!(entries[0]["by_class"]["matrix"].as_u64().unwrap() > 2 * 4, "{}", entries[0]);
    assert!(entries[1]["by_class"]["matrix"].as_u64().unwrap() > 2 * 7, "{}", entries[1]);
    // Every weight byte is streamed once per decode step (plus embeddings, gains, RoPE rows and logits).
    let weights = v["decode"]["weight_bytes"].as_u64().unwrap();
    let moved = v["decode"]["bytes_moved_per_decode_token_static"].as_u64().unwrap();
    assert!(moved > weights && moved < weights + weights / 2, "{moved} vs {weights}");

    let bytes = std::fs::read(&model).unwrap();
    let cut = tmp("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = opu(&["compile", s(&cut), "-o", s(&tmp("cut.opu"))]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cut.gguf") && err.contains("truncated GGUF"), "{err}");
    let out = opu(&["compile", s(&model), "--config", "sim", "--max-context", "0", "-o", s(&tmp("z.opu"))]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-context must be at least 1"));
}

/// `--routers`: a routers file compiles into a program that routes; bad files and the reference backend are
/// refused naming the file (and the tensor) or the backend.
#[test]
fn compile_and_run_with_routers() {
    use opu_compiler::routers::Block;
    let m = opu_compiler::testing::TinyLlama::default();
    let model = tmp("tiny-r.gguf");
    std::fs::write(&model, m.gguf()).unwrap();
    let routers = tmp("tiny.safetensors");
    let r = opu_compiler::testing::random_routers(m.n_layer, m.n_embd, 5, &[Block::Attention, Block::Ffn]);
    r.save(&routers, Default::default()).unwrap();
    let prog = tmp("tiny-r.opu");
    let out = opu(&["compile", s(&model), "--routers", s(&routers), "-o", s(&prog)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dense = tmp("tiny-d.opu");
    assert!(opu(&["compile", s(&model), "-o", s(&dense)]).status.success());
    let by_class = |p: &PathBuf, entry: usize| {
        let out = opu(&["inspect", "--json", s(p)]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["entries"][entry]["by_class"].clone()
    };
    let (routed, plain) = (by_class(&prog, 0), by_class(&dense, 0));
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    // decode: layer 1's two blocks, a route and a skip each, one more skip around the o-projection, per layer
    // the kv_present CSR (layer 0's: all present) and the kv_index CSR (the indexed KV layout, the default
    // with routers), and kv_present once more for layer 1's FFN decision bytes
    assert_eq!(n(&routed, "control"), n(&plain, "control") + 3, "{routed} vs {plain}");
    assert_eq!(n(&routed, "matrix"), n(&plain, "matrix") + 2, "{routed} vs {plain}");
    assert_eq!(n(&routed, "scalar"), n(&plain, "scalar") + 5, "{routed} vs {plain}");
    // prefill executes every block: only the CSRs
    let (routed, plain) = (by_class(&prog, 1), by_class(&dense, 1));
    assert_eq!((n(&routed, "control"), n(&routed, "matrix"), n(&routed, "scalar")), (n(&plain, "control"), n(&plain, "matrix"), n(&plain, "scalar") + 4));
    // the dense KV layout: the kv_present CSRs alone
    let dense_kv = tmp("tiny-rd.opu");
    assert!(opu(&["compile", s(&model), "--routers", s(&routers), "--kv-layout", "dense", "-o", s(&dense_kv)]).status.success());
    assert_eq!(n(&by_class(&dense_kv, 0), "scalar"), n(&by_class(&dense, 0), "scalar") + 3);
    let out = opu(&["compile", s(&model), "--routers", s(&routers), "--kv-layout", "dense", "--kv-pool-rows", "8", "-o", s(&dense_kv)]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--kv-pool-rows sizes the indexed KV layout"));

    let bytes = std::fs::read(&routers).unwrap();
    let cut = tmp("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 9]).unwrap();
    let out = opu(&["compile", s(&model), "--routers", s(&cut), "-o", s(&tmp("cut-r.opu"))]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cut.safetensors: not a valid safetensors file"), "{err}");
    let wide = opu_compiler::testing::random_routers(m.n_layer, 2 * m.n_embd, 5, &[Block::Ffn]);
    let wide_file = tmp("wide.safetensors");
    wide.save(&wide_file, Default::default()).unwrap();
    let out = opu(&["compile", s(&model), "--routers", s(&wide_file), "-o", s(&tmp("wide.opu"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wide.safetensors: tensor `blk.1.ffn_router.weight`: shape [2, 128], expected [2, 64]"), "{err}");
    let out = opu(&["run", "--backend", "reference", "--model", s(&model), "--routers", s(&routers), "hi"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("backend `reference`") && err.contains("does not skip blocks"), "{err}");
}

/// `opu rtl emit --config` writes every unit's Verilog, the array sized by the config; `opu rtl synth --json`
/// reports yosys figures with the keys scripts rely on: a u280 lane computes two W4 products per DSP48E2.
#[test]
fn rtl_emit_and_synth() {
    let dir = tmp("rtl");
    let out = opu(&["rtl", "emit", "-o", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = std::fs::read_to_string(dir.join("opu_dsp_w4x2.v")).unwrap();
    assert!(v.contains("module opu_dsp_w4x2") && !v.contains("module top"), "{v}");
    let out = opu(&["rtl", "emit", "--config", "u280", "--unit", "array", "-o", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = std::fs::read_to_string(dir.join("opu_array.v")).unwrap();
    assert_eq!(v.matches("opu_lane lane").count(), 128, "u280 has 128 lanes");
    let toml = dir.join("wide.toml");
    let mut cfg = opu_hw::OverlayConfig::sim();
    cfg.dot_width = 64;
    cfg.save(&toml).unwrap();
    let out = opu(&["rtl", "emit", "--config", s(&toml), "-o", s(&dir)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("dot_width is 64"), "{}", String::from_utf8_lossy(&out.stderr));
    let yosys = Command::new("yosys").arg("-V").output().is_ok_and(|o| o.status.success());
    if !yosys {
        assert_ne!(std::env::var("REQUIRE_VERILATOR").as_deref(), Ok("1"), "yosys is missing and REQUIRE_VERILATOR=1");
        eprintln!("SKIPPED opu rtl synth: yosys not found");
        return;
    }
    let out = opu(&["rtl", "synth", "--config", "u280", "--unit", "lane", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["lut", "ff", "dsp48e2", "bram", "uram", "packing_factor"] {
        assert!(r.get(key).is_some(), "missing `{key}` in {r}");
    }
    for key in ["w4", "w4_min", "w8", "fp16"] {
        assert!(r["packing_factor"].get(key).is_some(), "missing packing_factor.{key} in {r}");
    }
    assert_eq!(r["config"], "u280");
    // 16 DSP48E2 of packed products and 4 of the epilogue's scale multiplies: 32 products per cycle on 20
    assert_eq!(r["dsp48e2"], 20);
    assert_eq!(r["packing_factor"]["w4"], 1.6);
    assert_eq!(r["packing_factor"]["w4_min"], 1.6);
    assert_eq!(r["packing_factor"]["w8"], 0.8);
    let out = opu(&["rtl", "synth", "--unit", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

/// `--config` on the model commands: `bench` runs the functional simulator at both presets and reports the
/// overlay's figures per decoded token (its cycle model of the RTL); a config that is neither a preset nor a
/// file is an error naming it. Uses SmolLM2 from the model cache (CI fetches it first).
#[test]
fn bench_reports_the_overlay_figures_at_each_config() {
    let out = opu(&[
        "bench", "--backend", "sim", "--config", "sim,u280", "--model", "smollm2", "--prompt-tokens", "2", "--decode-tokens",
        "2", "--context", "5", "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let mut cycles = Vec::new();
    for (r, config) in rows.iter().zip(["sim", "u280"]) {
        let o = &r["overlay"];
        assert_eq!(o["config"], config);
        assert!(r["backend"].as_str().unwrap().contains(&format!("overlay `{config}`")), "{}", r["backend"]);
        assert_eq!(o["cycles_are_estimates"], true);
        let c = o["cycles_per_token"].as_f64().unwrap();
        let eff = o["bandwidth_efficiency"].as_f64().unwrap();
        assert!(eff > 0.0 && eff <= 1.0, "{config}: {eff}");
        assert!((o["projected_tokens_per_second"].as_f64().unwrap() - 225e6 / c).abs() < 1e-6);
        let busy: f64 = ["dma", "matrix", "vector", "attention"].iter().map(|k| o["unit_utilization"][*k].as_f64().unwrap()).sum();
        assert!(busy > 0.9 && busy <= 1.0, "{config}: {}", o["unit_utilization"]);
        // where the cycles go: the instructions' shares add up to the token's cycles but the program's first
        // fetch (a memory latency and a few cycles); decode is mostly matmul
        let split = o["cycles_by_instruction"].as_object().unwrap();
        let sum: f64 = split.values().map(|v| v.as_f64().unwrap()).sum();
        assert!(sum < c && sum > c - 200.0, "{config}: {sum} of {c} cycles: {split:?}");
        assert!(split["matmul"].as_f64().unwrap() > 0.5 * c, "{config}: {split:?}");
        cycles.push(c);
        // the speed figures: ratios to the first row, MACs per second from the counters, the peak memory
        let decode = r["decode_tokens_per_second"].as_f64().unwrap();
        assert!((r["decode_ratio"].as_f64().unwrap() - decode / rows[0]["decode_tokens_per_second"].as_f64().unwrap()).abs() < 1e-9);
        let macs = r["decode_macs_per_token"].as_f64().unwrap();
        assert!(macs > 100e6 && macs < 200e6, "{config}: SmolLM2-135M is about 135 M MACs per token, not {macs}");
        assert!((r["decode_macs_per_second"].as_f64().unwrap() - macs * decode).abs() < 1.0);
        // the weights alone are 97 MB; the 1 GiB device memory is touched only where used
        let rss = r["peak_rss_bytes"].as_f64().unwrap();
        assert!(rss > 97e6 && rss < 4e9, "{config}: peak RSS {rss}");
        assert_eq!(r["context"], 5);
        assert!(r["context_decode_tokens_per_second"].as_f64().unwrap() > 0.0);
        assert!(r["context_slowdown"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows[0]["decode_ratio"], 1.0);
    // 16 times the lanes and 32 times the memory: fewer cycles per token
    assert!(cycles[1] < cycles[0], "{cycles:?}");
    let out = opu(&["run", "--backend", "sim", "--config", "nosuch", "--model", "smollm2", "--max-tokens", "1", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown overlay preset `nosuch`"));
}

/// `opu calibrate` fits routers on a text and caches them; `--skip` compiles with them, `--skip 0` is the
/// dense program byte for byte; bad rates and a check text equal to the calibration text are refused.
/// (SmolLM2: the tiny test models have no tokenizer; short texts keep it to seconds.)
#[test]
fn calibrate_and_compile_with_skip() {
    let model = common::smollm2();
    let head = |path: &str, n: usize| std::fs::read_to_string(path).unwrap().chars().take(n).collect::<String>();
    let (text, check) = (tmp("cal.txt"), tmp("check.txt"));
    std::fs::write(&text, head("/usr/share/common-licenses/GPL-3", 900)).unwrap();
    std::fs::write(&check, head("/usr/share/common-licenses/Apache-2.0", 500)).unwrap();
    // routers go to the cache: a fresh one (the model is passed by path)
    let cache = tmp("cache");
    let opu_env = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_opu")).args(args).env("OPU_CACHE", &cache).env("RAYON_NUM_THREADS", "1").output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let out_file = tmp("cal.safetensors");
    let calibrate = |extra: &[&str]| {
        let mut args = vec!["calibrate", "--model", s(&model), "--text", s(&text), "--json"];
        args.extend_from_slice(extra);
        opu_env(&args)
    };
    let (code, stdout, stderr) = calibrate(&["--skip", "0.3", "-o", s(&out_file), "--check", s(&check)]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("calibrating routers for a skip rate of 0.3"), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rate = v["calibration_rate"].as_f64().unwrap();
    assert!((rate - 0.3).abs() < 0.02, "{v}");
    assert_eq!(v["blocks"].as_array().unwrap().len(), 2 * 29);
    // the positions measured: each sequence of 64 after its dense prompt of 16
    assert!(v["tokens"].as_u64().unwrap() > 100, "{v}");
    assert_eq!(v["importance"], "output-kl", "{v}");
    let positions = v["check"]["positions"].as_u64().unwrap();
    let agree = v["check"]["top1_agreement"].as_f64().unwrap();
    assert!(positions > 30 && (0.0..=1.0).contains(&agree) && v["check"]["mean_kl"].as_f64().unwrap() > 0.0, "{v}");
    let routers = opu_compiler::routers::Routers::load(&out_file, 30, 576).unwrap();
    assert_eq!(routers.count() as u64, v["routed_blocks"].as_u64().unwrap());
    // the second time from the cache
    let again = tmp("cal2.safetensors");
    let (code, _, stderr) = calibrate(&["--skip", "0.3", "-o", s(&again)]);
    assert!(code == Some(0) && !stderr.contains("calibrating"), "{stderr}");
    assert_eq!(std::fs::read(&out_file).unwrap(), std::fs::read(&again).unwrap());

    // compile --skip: the same cached routers as --routers; --skip 0: the dense program
    let compile = |extra: &[&str], out: &PathBuf| {
        let mut args = vec!["compile", s(&model), "-o", s(out)];
        args.extend_from_slice(extra);
        let (code, _, stderr) = opu_env(&args);
        assert_eq!(code, Some(0), "{stderr}");
        stderr
    };
    let (skip, routed, zero, dense) = (tmp("skip.opu"), tmp("routed.opu"), tmp("zero.opu"), tmp("dense.opu"));
    let stderr = compile(&["--skip", "0.3", "--calibration-text", s(&text)], &skip);
    assert!(stderr.contains("cached"), "{stderr}");
    compile(&["--routers", s(&out_file)], &routed);
    compile(&["--skip", "0"], &zero);
    compile(&[], &dense);
    let read = |p: &PathBuf| std::fs::read(p).unwrap();
    assert!(read(&skip) == read(&routed) && read(&zero) == read(&dense) && read(&routed) != read(&dense));

    for bad in ["1", "-0.5", "nan"] {
        let (code, _, stderr) = calibrate(&[&format!("--skip={bad}"), "-o", s(&tmp("bad.safetensors"))]);
        assert_eq!(code, Some(2), "{bad}");
        assert!(stderr.contains("skip rate"), "{bad}: {stderr}");
    }
    let (code, _, stderr) = calibrate(&["--skip", "0.3", "-o", s(&tmp("x.safetensors")), "--check", s(&text)]);
    assert!(code == Some(1) && stderr.contains("must not be the calibration text"), "{stderr}");
    let (code, _, _) = opu_env(&["compile", s(&model), "--skip", "0.2", "--routers", s(&out_file), "-o", s(&tmp("y.opu"))]);
    assert_eq!(code, Some(2));

    // sweep-skip: the dense program against itself, and the cached 0.3 routers, on the held-out text
    let dir = tmp("sweep");
    let (code, stdout, stderr) = opu_env(&[
        "sweep-skip", "--model", s(&model), "--rates", "0,0.3", "--calibration-text", s(&text), "--heldout", s(&check),
        "--heldout-tokens", "90", "-o", s(&dir), "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("calibrating"), "the routers come from the cache: {stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["blocks"], serde_json::json!(["attn", "ffn"]), "{v}");
    let rows = v["rows"].as_array().unwrap();
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    let (dense, skip) = (&rows[0], &rows[1]);
    // the dense program against itself: identical logits
    assert_eq!((f(dense, "top1_agreement"), f(dense, "mean_kl"), f(dense, "perplexity_ratio")), (1.0, 0.0, 1.0), "{dense}");
    assert_eq!((f(dense, "realised_skip_rate"), f(dense, "kv_saved_fraction")), (0.0, 0.0), "{dense}");
    assert!(f(dense, "positions") > 40.0 && f(dense, "perplexity") > 1.0, "{dense}");
    // skipping: blocks skipped, K/V storage saved, fewer bytes and cycles per token, some quality lost
    assert!(f(skip, "realised_skip_rate") > 0.1 && f(skip, "kv_saved_fraction") > 0.0, "{skip}");
    assert!(f(skip, "bytes_per_token") < f(dense, "bytes_per_token") && f(skip, "cycles_per_token") < f(dense, "cycles_per_token"), "{skip}");
    assert!(f(skip, "mean_kl") > 0.0 && f(skip, "top1_agreement") < 1.0, "{skip}");
    let png = std::fs::read(dir.join("sweep.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap()["rows"], v["rows"]);
    // the held-out text must not be the calibration text
    let (code, _, stderr) = opu_env(&["sweep-skip", "--model", s(&model), "--rates", "0", "--calibration-text", s(&text), "--heldout", s(&text), "-o", s(&dir)]);
    assert!(code == Some(1) && stderr.contains("must not be the calibration text"), "{stderr}");

    // eval --skip with a held-out text: the skip figures and both perplexities
    let prompts = tmp("prompts.json");
    std::fs::write(&prompts, r#"[{"name":"p","text":"The capital of France is"}]"#).unwrap();
    let (code, stdout, stderr) = opu_env(&[
        "eval", "--model", s(&model), "--backend", "sim", "--against", "sim", "--skip", "0.3", "--calibration-text", s(&text),
        "--prompts", s(&prompts), "--tokens", "4", "--heldout", s(&check), "--heldout-tokens", "90", "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let e: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(e["skip"]["kv_layout"], "indexed", "{e}");
    assert!(e["skip"]["decisions"].as_u64().unwrap() > 0, "{e}");
    // the same routers, the same held-out tokens: the sweep's figures
    let h = &e["heldout"];
    assert_eq!((h["top1_agreement"].as_f64(), h["perplexity_ratio"].as_f64()), (skip["top1_agreement"].as_f64(), skip["perplexity_ratio"].as_f64()), "{h}");
    assert!(h["against_perplexity"].as_f64().unwrap() > 1.0, "{h}");
}

/// The CNN path from the command line: classify (sim and reference agree, rtl equals sim; --json), eval
/// --dataset on a small CSV, compile's fixed-point report, and bad images refused naming the file. Needs `OPU_DIGITS_KERAS` and
/// `OPU_MNIST5K` (`opu fetch digits`, `opu fetch mnist5k`); skips without them.
#[test]
fn classify_eval_and_compile_a_cnn() {
    let (Some(model), Some(data)) = (std::env::var("OPU_DIGITS_KERAS").ok(), std::env::var("OPU_MNIST5K").ok()) else {
        eprintln!("skipped: set OPU_DIGITS_KERAS and OPU_MNIST5K (`opu fetch digits`, `opu fetch mnist5k`)");
        return;
    };
    let ds = opu_compiler::dataset::read_csv(std::path::Path::new(&data), 784).unwrap();
    // a light digit on black as a PGM, and a dark one on white as a PNG
    let pgm = tmp("digit.pgm");
    let px = |i: usize| ds.image(i).iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" ");
    std::fs::write(&pgm, format!("P2\n28 28\n255\n{}\n", px(1700))).unwrap();
    let png = tmp("digit.png");
    let inverted: Vec<u8> = ds.image(3600).iter().map(|p| 255 - p).collect();
    image::GrayImage::from_raw(28, 28, inverted).unwrap().save(&png).unwrap();
    let classify = |backend: &str| {
        let out = opu(&["classify", "--model", &model, "--calibration", &data, "--backend", backend, "--json", s(&pgm), s(&png)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (sim, reference) = (classify("sim"), classify("reference"));
    for i in 0..2 {
        let (a, b) = (&sim["images"][i], &reference["images"][i]);
        assert_eq!(a["class"], b["class"], "image {i}");
        assert_eq!(a["top"].as_array().unwrap().len(), 3);
        assert!(a["cycles"].as_u64().unwrap() > 1000 && b["cycles"].is_null());
        let p: f64 = a["top"][0]["probability"].as_f64().unwrap();
        assert!((p - b["top"][0]["probability"].as_f64().unwrap()).abs() < 1e-3 && p > 0.0 && p <= 1.0);
    }
    // eval on 40 digits (4 per class) as a plain CSV
    let csv = tmp("digits.csv");
    let rows: Vec<String> = (0..40).map(|j| j * 125).map(|i| format!("{},{}", ds.image(i).iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","), ds.labels[i])).collect();
    std::fs::write(&csv, rows.join("\n")).unwrap();
    let out = opu(&["eval", "--model", &model, "--dataset", s(&csv), "--calibration-images", "16", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["images"], 40);
    for key in ["accuracy", "reference_accuracy", "top1_agreement", "max_logit_error", "cycles_per_image", "projected_images_per_second"] {
        assert!(e[key].as_f64().is_some(), "{key}: {e}");
    }
    assert_eq!(e["top1_agreement"], 1.0);
    assert_eq!(e["calibration_images"], 16);
    // compile prints every layer's formats
    let out = opu(&["compile", &model, "--calibration", &data, "-o", s(&tmp("digits.opu"))]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("input Q2.14") && report.contains("conv2d_1") && report.contains("Q1.15") && report.contains("logits"), "{report}");
    // bad images and datasets
    let text = tmp("notes.png");
    std::fs::write(&text, "not an image").unwrap();
    let out = opu(&["classify", "--model", &model, "--backend", "reference", s(&text)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("notes.png") && err.contains("not a PNG or PGM"), "{err}");
    let blank = tmp("blank.pgm");
    std::fs::write(&blank, "P2\n2 2\n255\n0 0\n0 0\n").unwrap();
    let out = opu(&["classify", "--model", &model, "--backend", "reference", s(&blank)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("blank.pgm") && err.contains("no ink"), "{err}");
    std::fs::write(&csv, "1,2,3\n").unwrap();
    let out = opu(&["eval", "--model", &model, "--dataset", s(&csv)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("digits.csv") && err.contains("line 1") && err.contains("784 pixels"), "{err}");
    // the RTL's CNN unit: the same logits as the functional simulator, bit for bit
    if opu_rtlsim::rtl::available() {
        let rtl = classify("rtl");
        for i in 0..2 {
            let (a, b) = (&rtl["images"][i], &sim["images"][i]);
            assert_eq!((&a["logits"], &a["class"]), (&b["logits"], &b["class"]), "image {i}");
            let (ca, cb) = (a["cycles"].as_u64().unwrap(), b["cycles"].as_u64().unwrap());
            assert!(ca.abs_diff(cb) <= ca / 100, "image {i}: RTL {ca} cycles, the model {cb}");
        }
    } else {
        let out = opu(&["classify", "--model", &model, "--backend", "rtl", s(&pgm)]);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Verilator"), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

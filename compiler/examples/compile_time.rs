//! Compiles a GGUF for an overlay preset and prints the time and the program sizes:
//! `cargo run --release -p opu-compiler --example compile_time -- MODEL.gguf [sim|u280]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: compile_time MODEL.gguf [preset]");
    let config = opu_compiler::hw::OverlayConfig::preset(&args.next().unwrap_or_else(|| "sim".into())).expect("preset");
    let t = std::time::Instant::now();
    let g = opu_compiler::gguf::Gguf::open(&path).expect("open");
    let c = opu_compiler::compile(&g, &config, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let bytes = c.container.to_bytes();
    println!("compiled in {:.2} s, container {} MiB", t.elapsed().as_secs_f64(), bytes.len() >> 20);
    for e in &c.meta.entries {
        println!("  {}: {} instructions, ntok {}", e.name, e.instructions, e.ntok);
    }
    println!("  decode moves {} bytes + {} per position", c.meta.decode_bytes_static, c.meta.kv_bytes_per_position);
}

//! Writes a small synthetic llama GGUF (seeded random Q4_1 / Q8_0 weights): a model for quick experiments
//! and the seed of the GGUF fuzz corpus. `cargo run -p opu-compiler --example tiny_gguf -- OUT.gguf [n_embd]`.
use opu_compiler::testing::TinyLlama;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().expect("usage: tiny_gguf OUT.gguf [n_embd]");
    let n_embd: usize = args.next().map(|s| s.parse().expect("n_embd")).unwrap_or(32);
    let t = TinyLlama { n_layer: 1, n_embd, n_head: 2, n_head_kv: 1, n_ff: 32, vocab: 8, context: 16, seed: 7, ..Default::default() };
    std::fs::write(&out, t.gguf()).expect("write");
    println!("{out}: {} bytes", std::fs::metadata(&out).unwrap().len());
}

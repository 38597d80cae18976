//! Fuzzes the GGUF reader: any bytes must give a model or an error, never a panic, an overflow or an
//! out-of-bounds read. Every path a user's file can take is exercised: metadata getters, tensor data,
//! dequantization, and the llama checks. Run: `cargo fuzz run gguf` (see docs/fuzzing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use opu_compiler::gguf::parse_bytes;
use opu_compiler::llama::LlamaConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = parse_bytes(data, "fuzz.gguf") else { return };
    let _ = g.get_str("general.architecture");
    let _ = g.get_strings("tokenizer.ggml.tokens");
    let _ = g.get_f64("llama.rope.freq_base");
    for t in g.tensors.clone() {
        if t.bytes <= 1 << 20 {
            let _ = g.dequantize(&t);
        }
    }
    let _ = LlamaConfig::from_gguf(&g);
});

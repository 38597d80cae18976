//! Prints a GGUF file's metadata (arrays abbreviated), its tensor table and, for llama models, the
//! hyperparameters: `cargo run -p opu-compiler --example gguf_dump -- MODEL.gguf`.
use opu_compiler::gguf::{Gguf, Value};
use opu_compiler::llama::LlamaConfig;

fn main() {
    let path = std::env::args().nth(1).expect("usage: gguf_dump MODEL.gguf");
    let g = match Gguf::open(&path) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!("GGUF v{}, {} metadata keys, {} tensors, alignment {}", g.version, g.metadata.len(), g.tensors.len(), g.alignment);
    for (k, v) in &g.metadata {
        match v {
            Value::Array(a) => println!("  {k} = [{} elements, first {:?}]", a.len(), a.first()),
            Value::String(s) if s.len() > 200 => println!("  {k} = {:?}... ({} bytes)", &s[..s.char_indices().nth(200).map_or(s.len(), |(i, _)| i)], s.len()),
            v => println!("  {k} = {v:?}"),
        }
    }
    for t in &g.tensors {
        println!("  {:<28} {:<5} {:?}", t.name, t.ggml_type.to_string(), t.dims);
    }
    match LlamaConfig::from_gguf(&g) {
        Ok(c) => println!("{c:#?}"),
        Err(e) => println!("not a usable llama model: {e}"),
    }
}

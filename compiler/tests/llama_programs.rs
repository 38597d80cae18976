//! The llama programs are the same bytes whichever way the compiler builds them: SHA-256 of whole program
//! containers (code, weights as laid out, tables, layout and meta), pinned from the compiler of 2026-12-07
//! (commit c7a5dee, the test's own) that emitted instructions straight from the llama hyperparameters, before lowering
//! started from the graph IR. A lowering that changes one instruction, operand or byte of a weight fails.
//!
//! The tiny models always run; SmolLM2 where `OPU_MODEL_GGUF` names it (`opu fetch smollm2`).

use opu_compiler::gguf::{parse_bytes, Gguf};
use opu_compiler::routers::Block;
use opu_compiler::testing::{random_routers, TinyLlama};
use opu_compiler::{compile, CompileOptions, KvLayout};
use opu_hw::numerics::WeightFormat;
use opu_hw::OverlayConfig;
use sha2::{Digest, Sha256};

fn container_sha256(g: &Gguf, config: &str, opts: &CompileOptions) -> String {
    let c = compile(g, &OverlayConfig::preset(config).unwrap(), opts).unwrap();
    Sha256::digest(c.container.to_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn tiny_llama_programs_are_the_pinned_bytes() {
    let q4 = parse_bytes(&TinyLlama::default().gguf(), "tiny.gguf").unwrap();
    let f16 = parse_bytes(&TinyLlama { matrices: WeightFormat::F16, n_layer: 3, seed: 7, ..Default::default() }.gguf(), "tiny16.gguf").unwrap();
    let routers = random_routers(3, 64, 5, &[Block::Attention, Block::Ffn]);
    let got = [
        container_sha256(&q4, "sim", &CompileOptions::default()),
        container_sha256(&q4, "u280", &CompileOptions { trace_layers: true, max_context: Some(32), ..Default::default() }),
        container_sha256(&f16, "sim-wide", &CompileOptions { routers: Some(routers.clone()), ..Default::default() }),
        container_sha256(&f16, "sim", &CompileOptions { routers: Some(routers), kv_layout: KvLayout::Indexed { pool_rows: Some(100) }, max_context: Some(48), ..Default::default() }),
    ];
    eprintln!("{got:#?}");
    assert_eq!(got, TINY);
}

const TINY: [&str; 4] = [
    "b059f964a1629504359cc9206e9f2337a67659f771be6ce27dfd51fc593f8acd",
    "926e6332f1d6a028cc75b05368f914cd7dd6faecc8d4f15438528cad0f5316cb",
    "64aaa88e65e29af032fd0b985ea45a10d86c4e1d91732e1c9161d898ff6f5171",
    "ccea513b8d0990b177c7b18b8e331804936a767b9e6b348620bfc9170b9a1473",
];

#[test]
fn smollm2_programs_are_the_pinned_bytes() {
    let Some(path) = std::env::var_os("OPU_MODEL_GGUF") else {
        eprintln!("skipped: set OPU_MODEL_GGUF to SmolLM2 (`opu fetch smollm2`)");
        return;
    };
    let g = Gguf::open(std::path::Path::new(&path)).unwrap();
    let got = [
        container_sha256(&g, "sim", &CompileOptions { max_context: Some(256), ..Default::default() }),
        container_sha256(&g, "u280", &CompileOptions { max_context: Some(1024), kv_layout: KvLayout::Indexed { pool_rows: None }, ..Default::default() }),
    ];
    eprintln!("{got:#?}");
    assert_eq!(got, SMOLLM2);
}

const SMOLLM2: [&str; 2] = [
    "86eb655ade0c7920443a3df2e6bbd63051ab1228983101891b2c8d01509a13f1",
    "7a19f82ea19151c1ec70bf69f8c222e5ba6041c967104940fc4e280388563fad",
];

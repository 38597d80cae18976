//! The `sessions{n}` entries of a program compiled with several sessions (docs/serving.md, "Batched
//! decode"): a pass takes as many rows as the scratchpad holds, more than the slots, so that prompt rows ride
//! beside the sessions' next tokens; where all those passes overflow the 4 MiB code region, one row per slot.

use opu_compiler::gguf::parse_bytes;
use opu_compiler::testing::TinyLlama;
use opu_compiler::{compile, CompileOptions};
use opu_hw::OverlayConfig;

fn sessions_entries(n_layer: usize, slots: usize) -> (Vec<String>, usize, usize) {
    let g = parse_bytes(&TinyLlama { n_layer, ..Default::default() }.gguf(), "tiny.gguf").unwrap();
    let c = compile(&g, &OverlayConfig::sim(), &CompileOptions { max_sessions: slots, max_context: Some(32), ..Default::default() }).unwrap();
    let s = c.meta.sessions.clone().expect("a sessions program");
    for (n, &e) in s.sessions_entry.iter().enumerate() {
        assert_eq!((c.meta.entries[e].name.clone(), c.meta.entries[e].ntok), (format!("sessions{}", n + 1), n + 1));
    }
    assert_eq!(c.meta.entries[s.prefill_slot_entry].name, "prefill_slot");
    let code: u64 = c.meta.entries.iter().map(|e| e.instructions as u64 * 16).sum();
    assert!(code <= 4 << 20, "{code} bytes of code");
    (c.meta.entries.iter().map(|e| e.name.clone()).collect(), s.max_rows(), s.slots)
}

#[test]
fn a_sessions_pass_takes_the_rows_of_a_batch() {
    // the prefill batch at `sim` is 16 rows, and so is the most a `sessions{n}` pass takes: 2 slots, 16 rows
    let (names, rows, slots) = sessions_entries(2, 2);
    assert_eq!((rows, slots), (16, 2));
    assert_eq!(names.len(), 2 + 16 + 1, "{names:?}");
    assert_eq!(names.last().unwrap(), "prefill_slot");
}

#[test]
fn too_much_code_falls_back_to_a_row_per_slot() {
    // 200 layers: `sessions1` to `sessions16` would be about 5.8 MiB of code (30 KiB a layer), `sessions1` and `sessions2` fit
    let (names, rows, slots) = sessions_entries(200, 2);
    assert_eq!((rows, slots), (2, 2), "{names:?}");
    assert_eq!(names, ["decode", "prefill", "sessions1", "sessions2", "prefill_slot"]);
}

//! Batched decode (docs/serving.md, "Batched decode"): several sessions in one program, each at its own
//! position, advanced together by the `sessions{n}` passes, get bit for bit the logits a one-session
//! program's `decode` gives each of them alone.

mod common;

use opu_host::backend::{SessionSlots, SlotRow};
use opu_host::Session;
use std::path::Path;


fn open(path: &Path, max_sessions: usize) -> Session {
    let opts = opu_compiler::CompileOptions { max_context: Some(96), max_sessions, ..Default::default() };
    Session::open_with_options(path, "sim", &opu_hw::OverlayConfig::sim(), None, opts).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_session_of_a_batch_gets_its_solo_logits() {
    let path = common::smollm2();
    let mut solo = open(&path, 1);
    // three sessions whose prompts differ in length (a full prefill batch of 16 and a remainder, or a
    // remainder only), so that they decode at different positions
    let prompts: Vec<Vec<u32>> = [
        "The capital of France is Paris, and the capital of Germany is Berlin. The capital of Spain is",
        "Once upon a time, in a land far away, there lived a",
        "def fibonacci(n):\n    if n < 2:\n        return n\n",
    ]
    .iter()
    .map(|p| solo.tokenizer.encode(p).unwrap())
    .collect();
    // (session 1's prompt is more rows than the slots: with two decode rows beside it, a pass of more rows
    // than sessions)
    assert!(prompts[0].len() > 16 && (8..15).contains(&prompts[1].len()), "{:?}", prompts.iter().map(Vec::len).collect::<Vec<_>>());
    // the tokens fed after each prompt (teacher-forced, the same for both runs)
    let fed: Vec<Vec<u32>> = (0..3).map(|s| (0..6).map(|i| 100 + 37 * s as u32 + 11 * i).collect()).collect();

    // Alone: each session on a one-session program (`prefill` and `decode`, as `opu run`).
    let mut expect: Vec<Vec<Vec<u32>>> = Vec::new();
    for (p, f) in prompts.iter().zip(&fed) {
        let mut slots = solo.slots();
        let mut rows = vec![bits(&slots.forward_slot(0, 0, p).unwrap())];
        for (i, &t) in f.iter().enumerate() {
            rows.push(bits(&slots.step_rows(&[SlotRow { slot: 0, position: p.len() + i, token: t }]).unwrap()[0]));
        }
        expect.push(rows);
    }

    // Together: eight slots, sessions in slots 3, 0 and 1 (the others idle). Sessions 0 and 2's prompts by
    // `prefill_slot` and `sessions{n}` rows of their own; then one pass of their first steps with all of
    // session 1's prompt as further rows (a prompt sharing a decode pass, more rows than the slots); then
    // steps of all three, of two in another order, and of one.
    let mut batched = open(&path, 8);
    let mut slots = batched.slots();
    assert_eq!(slots.slots(), 8);
    let slot_of = [3usize, 0, 1];
    for s in [0, 2] {
        let logits = slots.forward_slot(slot_of[s], 0, &prompts[s]).unwrap();
        assert_eq!(bits(&logits), expect[s][0], "session {s}'s prompt logits");
    }
    let mut rows: Vec<SlotRow> = [0, 2].iter().map(|&s| SlotRow { slot: slot_of[s], position: prompts[s].len(), token: fed[s][0] }).collect();
    rows.extend(prompts[1].iter().enumerate().map(|(i, &token)| SlotRow { slot: slot_of[1], position: i, token }));
    assert!(rows.len() > 8 && rows.len() <= slots.max_rows(), "{} rows, {} at most", rows.len(), slots.max_rows());
    let out = slots.step_rows(&rows).unwrap();
    assert_eq!(bits(&out[0]), expect[0][1], "session 0's first step beside a prompt");
    assert_eq!(bits(&out[1]), expect[2][1], "session 2's first step beside a prompt");
    assert_eq!(bits(out.last().unwrap()), expect[1][0], "session 1's prompt in a decode pass");
    let mut step = [1usize, 0, 1];
    // device bytes each pass moved
    let mut moved = Vec::new();
    for who in [&[0usize, 1, 2][..], &[2, 0], &[1], &[0, 1, 2], &[1, 2, 0], &[2, 1, 0]] {
        let before = slots.lifetime_counters().unwrap();
        let rows: Vec<SlotRow> = who.iter().map(|&s| SlotRow { slot: slot_of[s], position: prompts[s].len() + step[s], token: fed[s][step[s]] }).collect();
        let out = slots.step_rows(&rows).unwrap();
        assert_eq!(out.len(), who.len());
        for (&s, logits) in who.iter().zip(&out) {
            step[s] += 1;
            assert_eq!(bits(logits), expect[s][step[s]], "session {s} (slot {}) at step {} of a pass of {who:?}", slot_of[s], step[s]);
        }
        let after = slots.lifetime_counters().unwrap();
        moved.push((after.bytes_read + after.bytes_written) - (before.bytes_read + before.bytes_written));
    }
    assert_eq!(step, [6, 5, 6]);
    // the weights are streamed once per pass, whatever its rows: a pass of three sessions moves barely more
    // than a pass of one (their K/V and logits)
    assert!(moved[3] < moved[2] + moved[2] / 10, "3 rows moved {} bytes, 1 row {}", moved[3], moved[2]);
    assert!(moved[3] > moved[2], "3 rows moved {} bytes, 1 row {}", moved[3], moved[2]);
}

#[test]
fn bad_rows_are_refused() {
    let path = common::smollm2();
    let mut s = open(&path, 2);
    let mut slots = s.slots();
    let e = slots.step_rows(&[SlotRow { slot: 2, position: 0, token: 1 }]).unwrap_err().to_string();
    assert!(e.contains("slot 2 is outside the program's 2 slots"), "{e}");
    let e = slots.step_rows(&[SlotRow { slot: 0, position: 96, token: 1 }]).unwrap_err().to_string();
    assert!(e.contains("past the context length 96"), "{e}");
    let e = slots.step_rows(&[SlotRow { slot: 0, position: 0, token: 1 << 20 }]).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
    // a pass takes the rows the scratchpad holds (16 at `sim`), more than the slots
    assert_eq!(slots.max_rows(), 16);
    let rows = [SlotRow { slot: 0, position: 0, token: 1 }; 17];
    let e = slots.step_rows(&rows).unwrap_err().to_string();
    assert!(e.contains("1 to 16 rows, got 17"), "{e}");
    // routers and the indexed layout decide per one-token pass: refused with several sessions
    let g = opu_compiler::gguf::Gguf::open(&path).unwrap();
    let opts = opu_compiler::CompileOptions { max_sessions: 2, kv_layout: opu_compiler::KvLayout::Indexed { pool_rows: None }, max_context: Some(64), ..Default::default() };
    let e = opu_compiler::compile(&g, &opu_hw::OverlayConfig::sim(), &opts).err().unwrap().to_string();
    assert!(e.contains("--max-sessions 2 needs the dense program"), "{e}");
    let opts = opu_compiler::CompileOptions { max_sessions: 17, max_context: Some(64), ..Default::default() };
    let e = opu_compiler::compile(&g, &opu_hw::OverlayConfig::sim(), &opts).err().unwrap().to_string();
    assert!(e.contains("--max-sessions 17: a pass of the overlay takes at most 16 rows"), "{e}");
}

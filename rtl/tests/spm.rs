//! The scratchpad's line port (`opu_rtl::spm::Scratchpad`, rust-hdl HDL) in rust-hdl's simulator against a
//! plain array of words: random lines written and read at every word offset, with random word enables.

use std::sync::{Arc, Mutex};

use opu_rtl::spm::{scratchpad_top, Scratchpad, SPM_BANKS};
use opu_rtl::testing::Rng;
use rust_hdl::prelude::*;

/// 2^7 rows per bank: 1024 words.
const R: usize = 7;
const WORDS: usize = SPM_BANKS << R;

#[test]
fn lines_at_any_word_offset_equal_a_word_array() {
    let checked = Arc::new(Mutex::new(0usize));
    let tb_checked = checked.clone();
    let mut sim = simple_sim!(Scratchpad<R>, clock, 100_000_000, ep, {
        let mut x = ep.init()?;
        let mut model = vec![0u32; WORDS];
        let mut rng = Rng(0x5c7a_7c4d);
        // the words the read of the previous cycle must return
        let mut expect: Option<Vec<u32>> = None;
        let mut n = 0;
        // fill every word first, then mix reads and writes
        for cycle in 0..3000 {
            let fill = cycle < WORDS / SPM_BANKS;
            let raddr = rng.below((WORDS - SPM_BANKS + 1) as u64) as usize;
            let waddr = if fill { cycle * SPM_BANKS } else { rng.below((WORDS - SPM_BANKS + 1) as u64) as usize };
            let mut we = if fill { 0xFF } else { rng.below(256) };
            // a write into the words being read in the same cycle is left out (read-during-write is not a
            // property the units rely on)
            if !fill && waddr + SPM_BANKS > raddr && raddr + SPM_BANKS > waddr {
                we = 0;
            }
            let words: Vec<u32> = (0..SPM_BANKS).map(|_| rng.next_u64() as u32).collect();
            let mut wdata = Bits::<256>::default();
            for (j, &w) in words.iter().enumerate() {
                wdata.set_bits::<32>(32 * j, u64::from(w).to_bits());
            }
            x.raddr.next = (raddr as u64).to_bits();
            x.waddr.next = (waddr as u64).to_bits();
            x.we.next = we.to_bits();
            x.wdata.next = wdata;
            x = ep.wait(1, x)?;
            if let Some(e) = expect.take() {
                let got = x.rdata.val();
                for (j, &w) in e.iter().enumerate() {
                    assert_eq!(got.get_bits::<32>(32 * j).to_u32(), w, "cycle {cycle}: word {j} of the read");
                }
                n += 1;
            }
            if !fill {
                expect = Some(model[raddr..raddr + SPM_BANKS].to_vec());
            }
            for (j, &w) in words.iter().enumerate() {
                if we >> j & 1 == 1 {
                    model[waddr + j] = w;
                }
            }
            wait_clock_cycle!(ep, clock, x);
        }
        *tb_checked.lock().unwrap() = n;
        ep.done(x)
    });
    sim.run(Box::new(scratchpad_top::<R>()), 10_000_000_000).unwrap();
    let n = *checked.lock().unwrap();
    assert!(n > 2800, "{n} reads checked");
}

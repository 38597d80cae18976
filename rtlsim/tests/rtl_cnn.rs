//! The CNN unit (`conv`, `maxpool`) under Verilator against the functional simulator: the outputs in the
//! scratchpad (stored to device memory with a margin of sentinel words on both sides, which must survive),
//! the counters (BYTES_READ, MACS) and every trap's code, pc and ERROR_INFO. The functional simulator is held
//! to `fixed::conv2d` and `fixed::maxpool`, which are tested against the written-out sums (sim/tests/cnn.rs,
//! opu-hw), so these compare the RTL's arithmetic with an independent oracle.

mod common;

use common::{compare_with_func, compare_with_func_on, models_or_skip};
use opu_hw::OverlayConfig;

/// Device memory: the activations, the weights, the sentinels the destination starts from, the outputs.
const ACTS: usize = 0x0000;
const WTS: usize = 0x3000;
const OLD: usize = 0x6000;
const OUT: usize = 0x9000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn i16_in(&mut self, span: i32) -> i16 {
        ((self.next() % (2 * span as u64 + 1)) as i32 - span) as i16
    }
}

#[derive(Clone, Copy, Debug)]
struct Conv {
    h: usize,
    w: usize,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    pad: usize,
    shift: u32,
    relu: bool,
    /// Scratchpad words of the source and the destination.
    src: usize,
    dst: usize,
}

impl Conv {
    fn out_hw(&self) -> (usize, usize) {
        ((self.h + 2 * self.pad - self.k) / self.stride + 1, (self.w + 2 * self.pad - self.k) / self.stride + 1)
    }
}

fn i16_bytes(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Loads `acts` to the scratchpad at word `src`, sentinels over the destination (with 8 words on either
/// side), runs `body`, stores the destination with its margins to OUT.
fn program(acts_bytes: usize, src: usize, dst: usize, out_bytes: usize, body: &str) -> String {
    let lo = dst - 8;
    let span = (out_bytes.div_ceil(4) + 16) * 4;
    format!(
        "load spm={src} mem={} bytes={} idx=r0 stride=0\n\
         load spm={lo} mem={} bytes={span} idx=r0 stride=0\n\
         {body}\
         store spm={lo} mem={} bytes={span} idx=r0 stride=0\n\
         end\n",
        ACTS / 32,
        acts_bytes.div_ceil(4) * 4,
        OLD / 32,
        OUT / 32
    )
}

fn data(rng: &mut Rng, acts: &[u8], weights: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; OUT];
    d[ACTS..ACTS + acts.len()].copy_from_slice(acts);
    d[WTS..WTS + weights.len()].copy_from_slice(weights);
    for b in &mut d[OLD..OUT] {
        *b = rng.next() as u8;
    }
    d
}

/// The RTL's cycles and the functional simulator's cycle model's for the program `text` on the top of
/// `config`: the model follows the CNN unit's schedule (`CostModel::cnn`) to within the 14 cycles of the
/// seven `csrw` before a `conv`, which the RTL's core runs while the DMA unit still loads (the model adds
/// every instruction's cycles).
fn run_on(config: &OverlayConfig, text: &str, d: &[u8]) -> (u64, u64) {
    let (rtl, model) = compare_with_func_on(config, text, d);
    assert!(rtl.abs_diff(model) <= 14, "{}: RTL {rtl} cycles, the model {model}\n{text}", config.name);
    (rtl, model)
}

fn run_both(text: &str, d: &[u8]) -> (u64, u64) {
    run_on(&OverlayConfig::sim(), text, d)
}

fn conv_case(c: Conv, seed: u64) -> (u64, u64) {
    conv_case_on(&OverlayConfig::sim(), c, seed)
}

fn conv_case_on(config: &OverlayConfig, c: Conv, seed: u64) -> (u64, u64) {
    let mut rng = Rng(seed);
    let acts: Vec<i16> = (0..c.h * c.w * c.cin).map(|_| rng.i16_in(4000)).collect();
    let taps = c.k * c.k * c.cin;
    let mut wts = i16_bytes(&(0..c.cout * taps).map(|_| rng.i16_in(3000)).collect::<Vec<_>>());
    wts.resize(wts.len().div_ceil(4) * 4, 0);
    for _ in 0..c.cout {
        wts.extend_from_slice(&((rng.next() % 2_000_001) as i32 - 1_000_000).to_le_bytes());
    }
    assert!(WTS + wts.len() <= OLD);
    let (oh, ow) = c.out_hw();
    let body = format!(
        "csrw csr=conv_h rs=r0 imm={}\ncsrw csr=conv_w rs=r0 imm={}\ncsrw csr=conv_cin rs=r0 imm={}\n\
         csrw csr=conv_cout rs=r0 imm={}\ncsrw csr=conv_k rs=r0 imm={}\ncsrw csr=conv_stride rs=r0 imm={}\n\
         csrw csr=conv_pad rs=r0 imm={}\nconv relu={} shift={} dst={} src={} w={}\n",
        c.h,
        c.w,
        c.cin,
        c.cout,
        c.k,
        c.stride,
        c.pad,
        u8::from(c.relu),
        c.shift,
        c.dst,
        c.src,
        WTS / 32
    );
    let text = program(acts.len() * 2, c.src, c.dst, oh * ow * c.cout * 2, &body);
    let d = data(&mut rng, &i16_bytes(&acts), &wts);
    run_on(config, &text, &d)
}

#[test]
fn conv_equals_the_functional_simulator() {
    if !models_or_skip("conv_equals_the_functional_simulator") {
        return;
    }
    let base = Conv { h: 10, w: 10, cin: 1, cout: 12, k: 3, stride: 1, pad: 1, shift: 12, relu: true, src: 3, dst: 0x801 };
    let cases = [
        // one input channel (kernel rows of 3 i16 at odd and even offsets), two groups, the second partial
        base,
        // odd channel counts: outputs at odd i16, a read-modify-write at both ends; stride 2
        Conv { h: 7, w: 9, cin: 3, cout: 5, k: 3, stride: 2, pad: 1, shift: 10, relu: false, src: 0, dst: 0x600 },
        // kernel rows of 40 i16 (three steps), a full group
        Conv { h: 6, w: 6, cin: 20, cout: 8, k: 2, stride: 1, pad: 0, shift: 14, relu: true, src: 1, dst: 0x700 },
        // a dense layer: 1 x 1 x 100 -> 10
        Conv { h: 1, w: 1, cin: 100, cout: 10, k: 1, stride: 1, pad: 0, shift: 16, relu: false, src: 5, dst: 0x100 },
        // padding wider than the kernel: positions with no row inside the image give the bias alone
        Conv { h: 2, w: 3, cin: 2, cout: 3, k: 2, stride: 1, pad: 2, shift: 4, relu: false, src: 0, dst: 0x200 },
        // shift 0 (no rounding) and saturation
        Conv { h: 4, w: 5, cin: 4, cout: 9, k: 2, stride: 3, pad: 1, shift: 0, relu: false, src: 7, dst: 0x300 },
    ];
    for (i, c) in cases.iter().enumerate() {
        let (rtl, model) = conv_case(*c, 0xc0ff_ee00 + i as u64);
        eprintln!("{c:?}: {rtl} cycles, the model {model}");
    }
}

/// The other verilated top, `sim-wide` (the same overlay behind twice the memory): the CNN unit is the same,
/// its kernels come through the same line port.
#[test]
fn conv_at_sim_wide_equals_the_functional_simulator() {
    if !models_or_skip("conv_at_sim_wide_equals_the_functional_simulator") {
        return;
    }
    let c = Conv { h: 7, w: 9, cin: 3, cout: 13, k: 3, stride: 2, pad: 1, shift: 10, relu: true, src: 1, dst: 0x601 };
    let (rtl, model) = conv_case_on(&OverlayConfig::sim_wide(), c, 0x5157_0001);
    eprintln!("sim-wide {c:?}: {rtl} cycles, the model {model}");
}

#[test]
fn maxpool_equals_the_functional_simulator() {
    if !models_or_skip("maxpool_equals_the_functional_simulator") {
        return;
    }
    // (h, w, c, k, stride, src word, dst word)
    for (i, &(h, w, c, k, s, src, dst)) in
        [(8, 8, 20, 2, 2, 0, 0x800), (5, 6, 3, 3, 1, 3, 0x401), (6, 6, 32, 2, 2, 1, 0x500), (7, 9, 1, 2, 3, 0, 0x80)].iter().enumerate()
    {
        let mut rng = Rng(0x9a11_0000 + i as u64);
        let acts: Vec<i16> = (0..h * w * c).map(|_| rng.next() as i16).collect();
        let (oh, ow) = ((h - k) / s + 1, (w - k) / s + 1);
        let body = format!("maxpool k={k} stride={s} h={h} w={w} c={c} dst={dst} src={src}\n");
        let text = program(acts.len() * 2, src, dst, oh * ow * c * 2, &body);
        let d = data(&mut rng, &i16_bytes(&acts), &[]);
        let (rtl, model) = run_both(&text, &d);
        eprintln!("maxpool {h}x{w}x{c} k{k} s{s}: {rtl} cycles, the model {model}");
    }
}

#[test]
fn cnn_traps_equal_the_functional_simulator() {
    if !models_or_skip("cnn_traps_equal_the_functional_simulator") {
        return;
    }
    let csrs = |h: u32, w: u32, cin: u32, cout: u32, k: u32, s: u32, p: u32| {
        format!(
            "seti rd=r1 imm={h}\ncsrw csr=conv_h rs=r1 imm=0\ncsrw csr=conv_w rs=r0 imm={w}\ncsrw csr=conv_cin rs=r0 imm={cin}\n\
             csrw csr=conv_cout rs=r0 imm={cout}\ncsrw csr=conv_k rs=r0 imm={k}\ncsrw csr=conv_stride rs=r0 imm={s}\n\
             csrw csr=conv_pad rs=r0 imm={p}\n"
        )
    };
    let conv = |shift: u32, dst: u32, src: u32, w: u32| format!("conv relu=0 shift={shift} dst={dst} src={src} w={w}\nend\n");
    let spm_words = opu_hw::OverlayConfig::sim().scratchpad_bytes / 4;
    let mem_lines = (opu_hw::OverlayConfig::sim().device_memory_bytes / 32) as u32;
    let cases = [
        // zero sizes, a size of 2^16, the kernel outside the padded image, the kernel's size, the shift
        csrs(4, 4, 2, 0, 3, 1, 0) + &conv(8, 0x400, 0, 0x100),
        csrs(4, 4, 2, 2, 3, 0, 0) + &conv(8, 0x400, 0, 0x100),
        csrs(1 << 16, 4, 2, 2, 3, 1, 0) + &conv(8, 0x400, 0, 0x100),
        csrs(4, 4, 2, 2, 3, 1, 1 << 16) + &conv(8, 0x400, 0, 0x100),
        csrs(4, 4, 2, 2, 7, 1, 1) + &conv(8, 0x400, 0, 0x100),
        csrs(1, 1, 5000, 2, 1, 1, 0) + &conv(8, 0x4000, 0, 0x100),
        csrs(4, 4, 2, 2, 3, 1, 0) + &conv(48, 0x400, 0, 0x100),
        // source and destination overlap; the destination, then the source, outside the scratchpad
        csrs(4, 4, 2, 2, 3, 1, 0) + &conv(8, 4, 0, 0x100),
        csrs(4, 4, 2, 2, 3, 1, 0) + &conv(8, spm_words - 2, 0, 0x100),
        csrs(8, 8, 2, 2, 3, 1, 0) + &conv(8, 0, spm_words - 40, 0x100),
        // the weights past device memory
        csrs(4, 4, 2, 2, 3, 1, 0) + &conv(8, 0x400, 0, mem_lines - 1),
        "maxpool k=5 stride=1 h=4 w=8 c=1 dst=0x800 src=0\nend\n".to_string(),
        "maxpool k=2 stride=0 h=4 w=8 c=1 dst=0x800 src=0\nend\n".to_string(),
        "maxpool k=2 stride=2 h=4 w=8 c=3 dst=4 src=0\nend\n".to_string(),
        format!("maxpool k=2 stride=2 h=4 w=8 c=3 dst={} src=0\nend\n", spm_words - 4),
    ];
    for text in cases {
        let mut rng = Rng(7);
        let d = data(&mut rng, &[], &[]);
        // (a run that traps reports no cycles)
        assert_eq!(compare_with_func(&format!("seti rd=r2 imm=1\n{text}"), &d), 0, "a trap\n{text}");
    }
}

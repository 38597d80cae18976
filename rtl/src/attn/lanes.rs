//! The attention unit's FP32 pipelines, built with the dataflow pipeliner of [`crate::fp32`]:
//!
//! - [`AttnLane`]: the output update of the online softmax, `axpby(o, c, p, v)` = `o c + p v` with `v` an
//!   FP16 value (`OnlineSoftmax::push`), or a product `a b` (`sel`): the score's scale and the final
//!   `o x recip(l)` (`OnlineSoftmax::finish`); its result also rounded to FP16 (`f32_to_f16`), and a tag that
//!   travels with the operands.
//! - [`AttnRecip`]: `approx::recip`, the softmax's `recip(l)`.
//!
//! Both are custom Verilog (the FP32 operators) with a Rust model of the same pipeline depth that calls the
//! opu-hw functions.

use crate::fp32::{Graph, FP32_VERILOG};
use crate::lane::ModelState;
use crate::vector::{approx_verilog, recip_graph};
use opu_hw::numerics::approx::recip;
use opu_hw::numerics::fp16::{canon_f32, f16_to_f32, f32_to_f16};
use opu_hw::numerics::vector::axpby;
use rust_hdl::prelude::*;
use std::collections::VecDeque;
use std::sync::OnceLock;

/// Bits of the tag that travels with a lane's operands.
pub const TAG_BITS: usize = 16;

struct Built {
    verilog: String,
    latency: usize,
}

fn lane() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let mut g = Graph::new("al");
        let sel = g.port("sel", 1);
        let a = g.port("a", 32);
        let b = g.port("b", 32);
        let c = g.port("c", 32);
        let d = g.port("d", 16);
        let tag = g.port("tag", TAG_BITS as u32);
        let v = g.comb(32, false, &[d], "vx_h2f(#0)");
        let ab = g.mul(a, b);
        let cv = g.mul(c, v);
        let s = g.add(ab, cv);
        let y = g.comb(32, true, &[sel, ab, s], "#0 ? #1 : #2");
        let y16 = g.comb(16, false, &[y], "vx_f2h(#0)");
        g.output("y", y, false);
        g.output("y16", y16, false);
        g.output("tag_o", tag, false);
        Built {
            verilog: format!("{FP32_VERILOG}{}{}", crate::vecunit::dp::VX_FUNCTIONS, g.verilog()),
            latency: g.latency() as usize,
        }
    })
}

fn recip_built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let mut g = Graph::new("ar");
        let x = g.port("x", 32);
        let y = recip_graph(&mut g, x);
        g.output("y", y, false);
        Built { verilog: format!("{FP32_VERILOG}{}{}", approx_verilog(), g.verilog()), latency: g.latency() as usize }
    })
}

/// Operands before edge `t` give the lane's results after edge `t + attn_lane_latency() - 1`.
pub fn attn_lane_latency() -> usize {
    lane().latency
}

/// [`AttnRecip`]'s latency, counted like [`attn_lane_latency`].
pub fn attn_recip_latency() -> usize {
    recip_built().latency
}

/// What a lane computes: `(y, y16)` for `sel`, `a`, `b`, `c` (FP32 bits) and `d` (FP16 bits).
pub fn attn_lane_result(sel: bool, a: u32, b: u32, c: u32, d: u16) -> (u32, u16) {
    let (a, b, c) = (f32::from_bits(a), f32::from_bits(b), f32::from_bits(c));
    let y = if sel { canon_f32(a * b) } else { axpby(a, b, c, f16_to_f32(d)) };
    (y.to_bits(), f32_to_f16(y))
}

#[derive(Clone, Debug, Default, LogicBlock)]
pub struct AttnLane {
    pub clock: Signal<In, Clock>,
    pub sel: Signal<In, Bit>,
    pub a: Signal<In, Bits<32>>,
    pub b: Signal<In, Bits<32>>,
    pub c: Signal<In, Bits<32>>,
    pub d: Signal<In, Bits<16>>,
    pub tag: Signal<In, Bits<TAG_BITS>>,
    pub y: Signal<Out, Bits<32>>,
    pub y16: Signal<Out, Bits<16>>,
    pub tag_o: Signal<Out, Bits<TAG_BITS>>,
    pipe: ModelState<VecDeque<(u32, u16, u64)>>,
}

impl Logic for AttnLane {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let q = &mut self.pipe.0;
        if q.is_empty() {
            q.extend(std::iter::repeat_n((0, 0, 0), attn_lane_latency()));
        }
        let (y, y16) = attn_lane_result(
            self.sel.val(),
            self.a.val().to_u32(),
            self.b.val().to_u32(),
            self.c.val().to_u32(),
            self.d.val().to_u64() as u16,
        );
        q.push_back((y, y16, self.tag.val().to_u64()));
        q.pop_front();
        let (y, y16, tag) = q[0];
        self.y.next = u64::from(y).into();
        self.y16.next = u64::from(y16).into();
        self.tag_o.next = tag.into();
    }
    fn connect(&mut self) {
        self.y.connect();
        self.y16.connect();
        self.tag_o.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(lane().verilog.clone())
    }
}

#[derive(Clone, Debug, Default, LogicBlock)]
pub struct AttnRecip {
    pub clock: Signal<In, Clock>,
    pub x: Signal<In, Bits<32>>,
    pub y: Signal<Out, Bits<32>>,
    pipe: ModelState<VecDeque<u32>>,
}

impl Logic for AttnRecip {
    fn update(&mut self) {
        if !self.clock.pos_edge() {
            return;
        }
        let q = &mut self.pipe.0;
        if q.is_empty() {
            q.extend(std::iter::repeat_n(0, attn_recip_latency()));
        }
        q.push_back(recip(f32::from_bits(self.x.val().to_u32())).to_bits());
        q.pop_front();
        self.y.next = u64::from(q[0]).into();
    }
    fn connect(&mut self) {
        self.y.connect();
    }
    fn hdl(&self) -> Verilog {
        Verilog::Custom(recip_built().verilog.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The depths docs/rtl.md quotes ("The attention unit"): the update is two products and a sum (with the
    /// FP16 conversion of `v` and the select), the reciprocal the vector lane's `recip`.
    #[test]
    fn pipeline_depths() {
        eprintln!("lane {} recip {}", attn_lane_latency(), attn_recip_latency());
        assert_eq!(attn_lane_latency(), 13);
        assert_eq!(attn_recip_latency(), 45);
    }

    /// The lane's model is the opu-hw arithmetic: axpby with the FP16 `v`, or the canonical product.
    #[test]
    fn lane_model_is_axpby_or_a_product() {
        let (o, c, p, v) = (1.5f32, 0.25f32, 2.0f32, 0x3C00u16);
        assert_eq!(attn_lane_result(false, o.to_bits(), c.to_bits(), p.to_bits(), v).0, (1.5f32 * 0.25 + 2.0 * 1.0).to_bits());
        assert_eq!(attn_lane_result(true, f32::NAN.to_bits(), 1f32.to_bits(), 0, 0).0, 0x7FC0_0000);
        assert_eq!(attn_lane_result(true, 3f32.to_bits(), 0.5f32.to_bits(), 0, 0), (1.5f32.to_bits(), 0x3E00));
    }
}

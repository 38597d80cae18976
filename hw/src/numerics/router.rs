//! The router of `route` (docs/isa.md): two logits of the block input `x`, execute and skip, and the decision.
//!
//! Rule (docs/numerics.md, "Router"): each logit is the exact FP16 x FP16 dot product of `x` with its weight
//! row ([`dot_f16`]), plus its FP16 bias added exactly, rounded once to FP32. The block is skipped when
//! `l_skip > l_execute`; a NaN logit compares false, so the block executes. The functional simulator and the
//! RTL router unit both compute exactly this.

use super::dot::dot_f16;

/// One logit: `(dot_f16(x, w) + bias).to_f32()`.
pub fn logit(x: &[u16], w: &[u16], bias: u16) -> f32 {
    let mut acc = dot_f16(x, w);
    acc.add_f16(bias);
    acc.to_f32()
}

/// The decision from the two logits: skip when `l_skip > l_execute` (false if either is NaN).
pub fn decide(l_execute: f32, l_skip: f32) -> bool {
    l_skip > l_execute
}

/// `(l_execute, l_skip, skip)` for one vector, with `bias = [b_execute, b_skip]`.
pub fn route(x: &[u16], w_execute: &[u16], w_skip: &[u16], bias: [u16; 2]) -> (f32, f32, bool) {
    let (l0, l1) = (logit(x, w_execute, bias[0]), logit(x, w_skip, bias[1]));
    (l0, l1, decide(l0, l1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::fp16::f32_to_f16;

    #[test]
    fn skip_only_when_the_skip_logit_is_larger() {
        assert!(decide(0.0, 1.0));
        assert!(!decide(1.0, 0.0));
        assert!(!decide(1.0, 1.0));
        assert!(!decide(f32::NAN, 1.0));
        assert!(!decide(1.0, f32::NAN));
    }

    #[test]
    fn logits_are_exact_dot_plus_bias() {
        let h = |v: f32| f32_to_f16(v);
        let x = [h(1.5), h(-2.0), h(0.25)];
        let we = [h(2.0), h(1.0), h(4.0)]; // 3 - 2 + 1 = 2
        let ws = [h(-1.0), h(-1.0), h(8.0)]; // -1.5 + 2 + 2 = 2.5
        let (le, ls, skip) = route(&x, &we, &ws, [h(0.5), h(-1.0)]);
        assert_eq!((le, ls, skip), (2.5, 1.5, false));
        let (_, _, skip) = route(&x, &we, &ws, [h(0.0), h(1.0)]);
        assert!(skip);
    }
}

// TEMPORARY STUB (replaced by the helper's module)
pub fn exp(x: f32) -> f32 { x.exp() }
pub fn rsqrt(x: f32) -> f32 { 1.0 / x.sqrt() }
pub fn recip(x: f32) -> f32 { 1.0 / x }
pub fn sigmoid(x: f32) -> f32 { recip(1.0 + exp(-x)) }
pub fn silu(x: f32) -> f32 { x * sigmoid(x) }

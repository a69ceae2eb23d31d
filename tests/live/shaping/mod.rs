//! Shaping through a real Envoy and Valkey: bursts held until their slot, with counting, and the bounds it keeps.

mod basics;
mod bounds;
mod count;

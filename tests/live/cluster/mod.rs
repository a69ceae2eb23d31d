//! A real Valkey Cluster through Envoy: routing, changes under load, counting, requests across slots, shaping.

mod basics;
mod changes;
mod count;
mod cross;
mod shaping;

//! The Lua against its pure models in a real Valkey: named cases, random traces, adjust, flush, shaping, decisions across slots, concurrency leases.

mod adjust;
mod cases;
mod cross;
mod flush;
mod lease;
mod props;
mod shape;

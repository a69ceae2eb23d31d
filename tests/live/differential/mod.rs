//! The Lua against its pure models in a real Valkey: named cases, random traces, adjust, flush, shaping, decisions across slots, concurrency leases, overrides and peek.

mod adjust;
mod cases;
mod cross;
mod flush;
mod lease;
mod overrides;
mod props;
mod shape;

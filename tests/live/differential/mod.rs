//! The Lua against its pure models in a real Valkey: named cases, random traces, adjust, flush, shaping, decisions across slots.

mod adjust;
mod cases;
mod cross;
mod flush;
mod props;
mod shape;

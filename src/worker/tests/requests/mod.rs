//! A request's decisions and lifecycle, and synced rules decided on the worker.

mod decisions;
mod lifecycle;
mod overrides;
mod synced;

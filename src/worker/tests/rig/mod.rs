//! The rig the worker tests drive: a recording host, model stores (one, or a fake Valkey Cluster) and a fake clock.

pub mod fake;
pub mod fake_cluster;

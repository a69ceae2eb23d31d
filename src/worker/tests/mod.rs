//! The worker's whole request lifecycle on the host: a recording host, a
//! store that decides with the pure models, and a fake clock. Each test runs
//! in milliseconds.

mod cluster;
mod counting;
mod leases;
mod requests;
mod rig;
mod shaping;
mod store;

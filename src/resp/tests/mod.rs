//! The codec's tests, one file per topic.

mod decode;
mod encode;
mod flat;
mod limits;

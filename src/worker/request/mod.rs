//! Ruling on a request, given the worker's services ([`Cx`]): its rules
//! counted, its denials remembered, its record set ([`rule`]), and what
//! `failure_mode` and `overload` make of a request the store cannot decide
//! or the worker cannot take ([`fail`]). Owns no state: the cache, the
//! local limiter and the deliveries are the [`Cx`]'s.
//!
//! [`Cx`]: crate::worker::cx::Cx

pub(super) mod fail;
pub(super) mod rule;

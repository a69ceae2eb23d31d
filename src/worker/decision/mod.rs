//! What a decision makes of a request, pure: the ruling on the store's (or
//! the worker's) decision over a request's checks, or on a denial
//! remembered in the cache ([`ruling`]: what each rule counts, the denials
//! to remember, admitted with headers or denied with a reply), and the
//! record of it for Envoy's access log ([`record`]).

pub mod record;
pub mod ruling;

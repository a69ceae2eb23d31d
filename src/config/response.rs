//! `response` and `shadow`: what the filter answers and adds.

use super::error::ConfigError;
use super::primitives::fail;
use super::raw::RawResponse;

/// Default text of `body: "text"`.
pub const DEFAULT_TEXT_BODY: &str = "Too Many Requests\n";
/// Longest custom text body, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;

/// How denials are answered and which headers are emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseConfig {
    /// Status of a denial: 400..=599, default 429.
    pub status: u16,
    /// `RateLimit-Policy` + `RateLimit` (draft-11) for every window and
    /// concurrency limit.
    pub ratelimit_headers: bool,
    /// `X-RateLimit-Limit`/`-Remaining`/`-Reset` for the most constrained window.
    pub x_ratelimit_headers: bool,
    pub body: Body,
    /// Whether the headers are also added to the upstream's response of
    /// admitted requests (default true).
    pub on_allowed: bool,
    /// Whether each decided request's decision is set as filter state
    /// `wasm.tollgate.decision`, for the access log (default false: it
    /// costs a host call and the record's text per decision).
    pub filter_state: bool,
}

impl Default for ResponseConfig {
    fn default() -> Self {
        ResponseConfig {
            status: 429,
            ratelimit_headers: true,
            x_ratelimit_headers: false,
            body: Body::ProblemJson,
            on_allowed: true,
            filter_state: false,
        }
    }
}

/// The body of a denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// RFC 9457 `application/problem+json` naming the violated policies.
    ProblemJson,
    /// `text/plain` with this text.
    Text(String),
    /// No body.
    None,
}

pub(crate) fn response(raw: Option<RawResponse>) -> Result<ResponseConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(ResponseConfig::default());
    };
    let mut out = ResponseConfig::default();
    if let Some(status) = raw.status {
        if !(400..=599).contains(&status) {
            return fail("response.status", "must be an HTTP error status (400..=599)");
        }
        out.status = u16::try_from(status).unwrap_or(429);
    }
    if let Some(families) = raw.headers {
        out.ratelimit_headers = false;
        for (j, family) in families.iter().enumerate() {
            let flag = match family.as_str() {
                "ratelimit" => &mut out.ratelimit_headers,
                "x-ratelimit" => &mut out.x_ratelimit_headers,
                other => {
                    return fail(
                        format!("response.headers[{j}]"),
                        format!("unknown header family {other:?}, expected one of ratelimit, x-ratelimit"),
                    )
                }
            };
            if *flag {
                return fail(format!("response.headers[{j}]"), format!("duplicate header family {family:?}"));
            }
            *flag = true;
        }
    }
    out.body = match (raw.body.as_deref(), raw.text) {
        (None | Some("problem+json"), None) => Body::ProblemJson,
        (Some("none"), None) => Body::None,
        (Some("text"), text) => {
            let text = text.unwrap_or_else(|| DEFAULT_TEXT_BODY.to_owned());
            if text.len() > MAX_TEXT_BYTES {
                return fail("response.text", format!("must be at most {MAX_TEXT_BYTES} bytes (got {})", text.len()));
            }
            Body::Text(text)
        }
        (Some(other), None) => {
            return fail("response.body", format!("unknown body {other:?}, expected one of problem+json, text, none"))
        }
        (_, Some(_)) => return fail("response.text", "is only allowed with \"body\": \"text\""),
    };
    out.on_allowed = raw.on_allowed.unwrap_or(true);
    out.filter_state = raw.filter_state.unwrap_or(false);
    Ok(out)
}

//! Wall-clock times for people: RFC 3339 in UTC from ms since the Unix
//! epoch, and back (`2026-11-29T12:00:00Z`, `...+02:00`, fractions of a second).

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `ms` as `YYYY-MM-DDTHH:MM:SS[.mmm]Z`.
pub fn rfc3339(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let time = format!("{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
    match milli {
        0 => format!("{y:04}-{m:02}-{d:02}T{time}Z"),
        _ => format!("{y:04}-{m:02}-{d:02}T{time}.{milli:03}Z"),
    }
}

/// Ms since the epoch of an RFC 3339 time (`T` or a space between date and
/// time, `Z` or `±HH:MM`), or of a plain integer of ms.
pub fn parse(text: &str) -> Option<u64> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let num = |s: Option<&str>| -> Option<i64> { s.filter(|s| s.bytes().all(|b| b.is_ascii_digit()))?.parse().ok() };
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-');
    let (y, mo, da) = (num(d.next())?, num(d.next())?, num(d.next())?);
    let (clock, offset_s) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (c, off) = time.split_at_checked(at)?;
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off.get(1..)?.split_once(':')?;
        (c, sign * (num(Some(oh))? * 3600 + num(Some(om))? * 60))
    };
    let (hms, frac) = match clock.split_once('.') {
        Some((h, f)) => (h, Some(f)),
        None => (clock, None),
    };
    let mut t = hms.splitn(3, ':');
    let (h, mi, s) = (num(t.next())?, num(t.next())?, num(t.next())?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let milli = match frac {
        None => 0,
        Some(f) => {
            let digits: String = f.chars().chain("000".chars()).take(3).collect();
            num(Some(&digits))?
        }
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    u64::try_from(secs.checked_mul(1000)?.checked_add(milli)?).ok()
}

/// The host's clock, in ms since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_800_000_000_123), "2027-01-15T08:00:00.123Z");
        assert_eq!(parse("2027-01-15T08:00:00.123Z"), Some(1_800_000_000_123));
        assert_eq!(parse("2027-01-15T10:00:00+02:00"), Some(1_800_000_000_000));
        assert_eq!(parse("1800000000000"), Some(1_800_000_000_000));
        assert_eq!(parse("2024-02-29T00:00:00Z").map(rfc3339).as_deref(), Some("2024-02-29T00:00:00Z"));
        assert_eq!(parse("friday"), None);
        assert_eq!(parse("2027-13-01T00:00:00Z"), None);
    }
}

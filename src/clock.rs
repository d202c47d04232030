//! Wall-clock dates without a date crate or date(1): UTC civil dates from the Unix clock
//! (civil-from-days, proleptic Gregorian).

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// (year, month, day) of a day number counted from 1970-01-01.
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day number (from 1970-01-01) of a `YYYY-MM-DD` date: the inverse of [`civil`].
pub fn days_of(date: &str) -> Option<i64> {
    let mut it = date.trim().splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (it.next()??, it.next()??, it.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let year = if m <= 2 { y - 1 } else { y };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // A day past its month's end (2026-02-31, 2025-02-29) is not a date.
    (civil(days) == (y, m, d)).then_some(days)
}

/// `YYYY-MM-DD` of a day number.
pub fn civil_date(days: i64) -> String {
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    civil_date((unix_secs() / 86_400) as i64)
}

/// Now in UTC: (year, month, day, hour, minute, second).
pub fn now_utc() -> (i64, i64, i64, u64, u64, u64) {
    let s = unix_secs();
    let (y, m, d) = civil((s / 86_400) as i64);
    let t = s % 86_400;
    (y, m, d, t / 3600, t / 60 % 60, t % 60)
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_rfc3339() -> String {
    let (y, m, d, h, mi, s) = now_utc();
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_414), "2025-11-22");
        assert_eq!(civil_date(19_782), "2024-02-29");
        assert_eq!(now_rfc3339().len(), 20);
        for days in [0, 20_414, 19_782, -1, 11_016, 30_000] {
            assert_eq!(days_of(&civil_date(days)), Some(days), "{days}");
        }
        assert_eq!(days_of("2026-13-01"), None);
        assert_eq!(days_of("yesterday"), None);
        // Days past the month's end; leap days only in leap years.
        assert_eq!(days_of("2026-02-31"), None);
        assert_eq!(days_of("2026-04-31"), None);
        assert_eq!(days_of("2025-02-29"), None);
        assert_eq!(days_of("2100-02-29"), None);
        assert_eq!(days_of("2000-02-29"), Some(11_016));
        assert_eq!(days_of("2024-02-29"), Some(19_782));
    }
}

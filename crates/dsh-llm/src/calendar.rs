//! Dates for logs, exports and the runtime context, without a date-time crate: the only need
//! is turning "days since 1970-01-01" into a proleptic Gregorian year, month and day (UTC).

/// `(year, month 1-12, day 1-31)` of the day `days` after 1970-01-01 (negative: before).
/// Howard Hinnant's civil-from-days algorithm, exact over the whole `i64` day range we use.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both are in range by construction (month 1..=12, day 1..=31).
    (year, month as u32, day as u32)
}

/// `YYYY-MM-DD` of the day `days` after 1970-01-01.
pub fn iso_date(days: i64) -> String {
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(iso_date(19_417), "2023-03-01");
    }
}

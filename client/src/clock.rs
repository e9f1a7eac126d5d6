//! The wall clock, in the unit Kafka and Flume timestamps use.

/// Milliseconds since the Unix epoch (a record's CreateTime; 0 before
/// 1970). Read for every record, so without `as_millis`'s 128-bit division.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            i64::try_from(d.as_secs())
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000)
                .saturating_add(i64::from(d.subsec_millis()))
        })
}

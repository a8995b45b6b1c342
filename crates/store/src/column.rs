//! How a job's values are held in columns, by every store: times as integer milliseconds
//! since the Unix epoch (the `_ms` columns), structured fields as JSON text, ids drawn at
//! random.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::model::StoreError;

/// Milliseconds since the Unix epoch, as the `_ms` columns hold time (negative before it).
pub(crate) fn to_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The time an `_ms` column holds; `None` when no [`SystemTime`] can hold it.
pub(crate) fn from_ms(ms: i64) -> Option<SystemTime> {
    let offset = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        UNIX_EPOCH.checked_add(offset)
    } else {
        UNIX_EPOCH.checked_sub(offset)
    }
}

/// `value` as JSON text; a value that cannot be is a corrupt `field` of job `id`.
pub(crate) fn to_json(
    id: &str,
    field: &str,
    value: &impl serde::Serialize,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::corrupt(id, field, e))
}

/// A new job id.
pub(crate) fn new_id() -> String {
    format!("job_{:016x}{:08x}", fastrand::u64(..), fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_milliseconds() {
        for ms in [0, 1, 1_796_050_800_123, -86_400_000, 253_402_300_799_999] {
            let t = from_ms(ms).unwrap();
            assert_eq!(to_ms(t), ms);
        }
        // Below the millisecond is not kept.
        let t = UNIX_EPOCH + Duration::from_micros(1_500);
        assert_eq!(
            from_ms(to_ms(t)),
            Some(UNIX_EPOCH + Duration::from_millis(1))
        );
    }
}

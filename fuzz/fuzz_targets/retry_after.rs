//! Retry hints from hostile header values and body captures: never a panic, never a wait
//! beyond the believable bound.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use rebound_core::Headers;
use rebound_core::hint::{HintFormat, MAX_HINT};
use rebound_core::retry_after::header_hint;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mid = (0..=text.len() / 2).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    let (a, b) = text.split_at(mid);
    let now = UNIX_EPOCH + Duration::from_secs(1_796_050_800);
    let headers: Headers = [("retry-after-ms", a), ("retry-after", b)].into_iter().collect();
    for status in [429, 503] {
        if let Some(h) = header_hint(Some(status), &headers, now) {
            assert!(h.delay <= MAX_HINT);
        }
    }
    for (_, format) in HintFormat::GROUPS {
        if let Some(d) = format.parse(a, Some(b), now) {
            assert!(d <= MAX_HINT);
        }
    }
});

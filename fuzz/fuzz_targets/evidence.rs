//! The evidence JSON of `rebound classify`, classified against the shipped catalogue.
#![no_main]

use std::sync::LazyLock;
use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use rebound_core::{Catalogue, Evidence};

static CATALOGUE: LazyLock<Catalogue> = LazyLock::new(|| Catalogue::shipped().expect("shipped"));

fuzz_target!(|data: &[u8]| {
    if let Ok(evidence) = serde_json::from_slice::<Evidence>(data) {
        let now = UNIX_EPOCH + Duration::from_secs(1_796_050_800);
        let c = CATALOGUE.classify(&evidence, now);
        let _ = serde_json::to_string(&c);
        let _ = rebound_core::status::error_excerpt(&evidence);
    }
});

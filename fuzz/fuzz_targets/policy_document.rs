//! Policy documents over the API (JSON), including legacy action maps.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use rebound_core::policy::document::PolicyDocument;
use rebound_core::{Catalogue, Policy};

static CATALOGUE: LazyLock<Catalogue> = LazyLock::new(|| Catalogue::shipped().expect("shipped"));

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(doc) = PolicyDocument::from_json(&text)
        && let Ok(policy) = doc.compile(&Policy::immediate_skip(), &CATALOGUE)
    {
        let round = PolicyDocument::of(&policy);
        assert_eq!(round.compile(&Policy::immediate_skip(), &CATALOGUE).ok(), Some(policy));
    }
});

//! User rule files: any text either compiles or is refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_core::{Catalogue, Source};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(catalogue) = Catalogue::with_user_rules(&[Source::new("fuzz.toml", text.as_ref())]) {
        let _ = catalogue.rule_count();
    }
});

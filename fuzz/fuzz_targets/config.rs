//! Gateway configs: any text loads or is refused naming a key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_gateway::{Overrides, load};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match load("fuzz.toml", &text, &Overrides::default(), &[("OPENAI_API_KEY", "sk-fuzz")]) {
        Ok(config) => assert!(!config.routes.is_empty()),
        Err(e) => assert!(!e.to_string().contains('\n')),
    }
});

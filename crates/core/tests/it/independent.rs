//! The independent set (`catalogue/independent/`): real error texts sampled from public issue
//! threads the way issue #15 sampled its own, by fixed queries taken in rank order, common
//! errors as much as rare ones, labelled by their words by people who did not read the rules.
//! No rule is written from them: it measures the catalogue as an outsider would.
//!
//! `cargo test -p rebound-core --test it independent -- --nocapture` prints its figures, whole
//! and by set. Its misses are never shown. The test fails on any text classified retryable when
//! it is not (the unsafe mistake must be mended: the text is then read, and marked `read` with
//! what mended it), on a thread taken twice, and on a `read` mark that does not say why.

use std::collections::HashSet;

use rebound_core::{Class, Evidence};
use serde::Deserialize;

use crate::corpus::{Figures, toml_files};
use crate::{CATALOGUE, now};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFile {
    item: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    source: String,
    /// The number of the query (in the file's header) that found it.
    query: u32,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    status: Option<u16>,
    body: String,
    code: String,
    class: String,
    /// Why the text was read after the set was measured: only an unsafe reading is.
    #[serde(default)]
    read: Option<String>,
}

/// Every set, by file name.
fn sets() -> Vec<(String, Vec<Entry>)> {
    toml_files("independent")
        .into_iter()
        .map(|(name, text)| {
            let file: SetFile =
                toml::from_str(&text).unwrap_or_else(|e| panic!("independent/{name}.toml: {e}"));
            (name, file.item)
        })
        .collect()
}

#[test]
fn independent_set_figures() {
    let mut all = Figures::default();
    let mut threads = HashSet::new();
    let sets = sets();
    for (name, entries) in &sets {
        let mut set = Figures::default();
        for entry in entries {
            assert!(
                threads.insert(entry.source.as_str()),
                "{}: a thread taken twice",
                entry.source
            );
            assert!(entry.query >= 1, "{}: no query", entry.source);
            if let Some(why) = &entry.read {
                assert!(
                    why.split_whitespace().count() >= 3,
                    "{}: `read` must say why",
                    entry.source
                );
            }
            let expected = Class::parse(&entry.class)
                .unwrap_or_else(|| panic!("{}: unknown class {}", entry.source, entry.class));
            let evidence = Evidence {
                provider: entry.provider.clone(),
                status: entry.status,
                body: Some(entry.body.clone()),
                ..Evidence::default()
            };
            let got = CATALOGUE.classify(&evidence, now());
            let class = got.class();
            let exact = class == Some(expected)
                && got.code.as_ref().map(|c| c.as_str()) == Some(entry.code.as_str());
            all.count(expected, class, exact);
            set.count(expected, class, exact);
        }
        set.print(&format!("  {name}"));
    }
    all.print("independent set");
    assert!(all.items >= 140, "the set holds {} texts", all.items);
    assert_eq!(
        all.unsafe_retryable, 0,
        "texts of the independent set classified retryable when they are not"
    );
}

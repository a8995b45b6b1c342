//! The independent set (`catalogue/independent/`): real error texts sampled from public issue
//! threads the way issue #15 sampled its own, by fixed queries taken in rank order, common
//! errors as much as rare ones, labelled by their words by people who did not read the rules.
//! No rule is written from them: it measures the catalogue as an outsider would.
//!
//! `cargo test -p rebound-core --test it independent -- --nocapture` prints its figures, whole,
//! by set, and apart for the texts the corpus already holds (their thread, or a near twin of
//! their text) and those new to it. Its misses are never shown. The test fails on any text classified retryable when
//! it is not (the unsafe mistake must be mended: the text is then read, and marked `read` with
//! what mended it), on a thread taken twice, and on a `read` mark that does not say why.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;

use rebound_core::{Class, Evidence};
use serde::Deserialize;

use crate::corpus::{Figures, is_retryable, items, toml_files};
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

/// A text's words with what changes from one copy of an error to the next masked: lower-cased,
/// URLs, long hex ids and numbers replaced, whitespace collapsed.
fn masked(body: &str) -> String {
    static MASKS: LazyLock<[(Regex, &str); 3]> = LazyLock::new(|| {
        [
            (Regex::new(r"https?://\S+").unwrap(), "U"),
            (Regex::new(r"[0-9a-f]{8,}").unwrap(), "H"),
            (Regex::new(r"\d+").unwrap(), "N"),
        ]
    });
    let mut text = body.to_lowercase();
    for (pattern, mask) in MASKS.iter() {
        text = pattern.replace_all(&text, *mask).into_owned();
    }
    text
}

/// A text's runs of five masked words (the whole text when it is shorter).
fn shingles(body: &str) -> HashSet<String> {
    let masked = masked(body);
    let words: Vec<&str> = masked.split_whitespace().collect();
    let runs = words.len().saturating_sub(4).max(1);
    (0..runs)
        .map(|i| words[i..words.len().min(i + 5)].join(" "))
        .collect()
}

/// Which texts the corpus already holds: the same thread, or a text sharing at least half of
/// their runs of five masked words with one of the corpus's (a near twin).
struct Corpus {
    threads: HashSet<String>,
    /// Each run of words, and the corpus texts it stands in.
    runs: HashMap<String, Vec<usize>>,
    /// Each corpus text's count of runs.
    sizes: Vec<usize>,
}

impl Corpus {
    fn new() -> Self {
        let mut corpus = Corpus {
            threads: HashSet::new(),
            runs: HashMap::new(),
            sizes: Vec::new(),
        };
        for (n, item) in items().iter().enumerate() {
            corpus.threads.insert(thread(&item.source).to_owned());
            let runs = shingles(&item.body);
            corpus.sizes.push(runs.len());
            for run in runs {
                corpus.runs.entry(run).or_default().push(n);
            }
        }
        corpus
    }

    fn holds(&self, source: &str, body: &str) -> bool {
        if self.threads.contains(thread(source)) {
            return true;
        }
        let runs = shingles(body);
        let mut shared = HashMap::<usize, usize>::new();
        for n in runs.iter().filter_map(|run| self.runs.get(run)).flatten() {
            *shared.entry(*n).or_default() += 1;
        }
        shared
            .iter()
            .any(|(n, both)| 2 * both >= runs.len() + self.sizes[*n] - both)
    }
}

/// A source's thread, without a note such as ` (comment)`.
fn thread(source: &str) -> &str {
    source.split(' ').next().unwrap_or(source)
}

#[test]
fn independent_set_figures() {
    let corpus = Corpus::new();
    let (mut held, mut new) = (Figures::default(), Figures::default());
    // The retryable misses, counted (never shown): with a status given beside the text, and
    // those that are a bare fetch failure, which the catalogue leaves unread on purpose.
    let fetch_failure = Regex::new(r"(?i)\bfetch failed\b|\bfailed to fetch\b").unwrap();
    let (mut misses, mut with_status, mut fetch_failures) = (0, 0, 0);
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
            if is_retryable(Some(expected)) && class != Some(expected) {
                misses += 1;
                with_status += usize::from(entry.status.is_some());
                fetch_failures += usize::from(fetch_failure.is_match(&entry.body));
            }
            all.count(expected, class, exact);
            set.count(expected, class, exact);
            let apart = if corpus.holds(&entry.source, &entry.body) {
                &mut held
            } else {
                &mut new
            };
            apart.count(expected, class, exact);
        }
        set.print(&format!("  {name}"));
    }
    all.print("independent set");
    held.print("  its texts the corpus holds already (their thread, or a near twin of their text)");
    new.print("  its texts new to the corpus");
    println!(
        "  retryable misses {misses}: with a status given beside the text {with_status}; a bare fetch failure {fetch_failures}"
    );
    assert!(all.items >= 140, "the set holds {} texts", all.items);
    assert_eq!(
        all.unsafe_retryable, 0,
        "texts of the independent set classified retryable when they are not"
    );
}

use regex::bytes::RegexBuilder;

use super::*;

const LIMIT: usize = 32 << 20;

/// What each pattern alone finds: the answer a matcher must give.
fn expected(patterns: &[String], text: &[u8]) -> Vec<usize> {
    patterns
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            RegexBuilder::new(p)
                .unicode(false)
                .build()
                .unwrap()
                .is_match(text)
        })
        .map(|(i, _)| i)
        .collect()
}

/// How a test checks the DFA alone: on one text in `every`, with a cache of its own. Building
/// DFA states for text after text takes a test build most of a minute per thousand texts.
struct Walk {
    every: usize,
    seen: usize,
    cache: Option<Cache>,
}

impl Walk {
    fn every(every: usize) -> Walk {
        Walk {
            every,
            seen: 0,
            cache: None,
        }
    }
}

/// The matcher's answer, which its literal gate alone must give too, and its DFA alone for the
/// texts `walk` picks.
fn found(matcher: &Matcher, text: &[u8], walk: &mut Walk) -> Vec<usize> {
    let answer: Vec<usize> = matcher.matches(text).iter().collect();
    let gated: Vec<usize> = matcher.gated(text).iter().collect();
    assert_eq!(answer, gated, "{:?}", String::from_utf8_lossy(text));
    walk.seen += 1;
    if (walk.seen - 1).is_multiple_of(walk.every) {
        let dfa = matcher.walked(&mut walk.cache, text);
        let dfa: Vec<usize> = dfa.expect("the DFA answers").iter().collect();
        assert_eq!(dfa, gated, "{:?}", String::from_utf8_lossy(text));
    }
    answer
}

fn owned(patterns: &[&str]) -> Vec<String> {
    patterns.iter().map(|p| (*p).to_owned()).collect()
}

#[test]
fn each_kind_of_pattern_is_found_as_a_regex_set_finds_it() {
    let patterns = owned(&[
        r"(?i)\brate limit(?:ed| exceeded)\b", // prefix literals, case folded
        r"(?-i:\bECONNRESET\b)|(?i)socket hang up", // an alternation of prefixes
        r"\b[\w.]{1,80}: Input does not match\b", // an inner literal only
        r"(?m)^\s*envoy overloaded\s*$",       // a literal inside a line
        r"\A\s*\z",                            // no literal at all
        r"(?i)\bclaude (?:ai )?usage limit reached\b", // long case-folded literal
        r"用户额度不足|(?i)\bquota is not enough\b", // non-ASCII bytes
        r"\bfoo\b",                            // a word boundary before the hit
        r"(?:^|\n)Failed to resolve '",        // a start or a new line
    ]);
    let matcher = Matcher::new(&patterns, LIMIT).unwrap();
    let mut walk = Walk::every(1);
    for text in [
        "Error: Rate Limit Exceeded for org",
        "RATE LIMITED",
        "read ECONNRESET",
        "read econnreset",
        "Error: SOCKET HANG UP",
        "my.tool: Input does not match the expected shape",
        "log\n  envoy overloaded \nmore",
        "envoy overloaded in the middle",
        "",
        "  \n ",
        "You have reached your Claude AI usage limit reached",
        "错误: 用户额度不足",
        "xfoo foo",
        "xfoo",
        "Failed to resolve 'api.openai.com'",
        "a\nFailed to resolve 'x'",
        "not Failed to resolve 'x'",
    ] {
        assert_eq!(
            found(&matcher, text.as_bytes(), &mut walk),
            expected(&patterns, text.as_bytes()),
            "{text:?}"
        );
    }
}

#[test]
fn a_pattern_matching_nothing_and_no_pattern_at_all_find_nothing() {
    let matcher = Matcher::new(&owned(&["never here"]), LIMIT).unwrap();
    assert!(found(&matcher, b"some text", &mut Walk::every(1)).is_empty());
    let empty = Matcher::new(&[], LIMIT).unwrap();
    assert!(found(&empty, b"some text", &mut Walk::every(1)).is_empty());
    assert!(!empty.matches(b"x").matched(0));
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the test reads the repository's corpus and fixtures"
)]
fn every_corpus_and_fixture_text_finds_what_each_shipped_pattern_finds() {
    // The shipped catalogue's body patterns, in file order.
    let mut patterns = Vec::new();
    for source in crate::catalogue::shipped_sources() {
        let table: toml::Table = source.text.parse().unwrap();
        for rule in table
            .get("rule")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(body) = rule.get("body").and_then(|b| b.as_str()) {
                patterns.push(body.to_owned());
            }
        }
    }
    assert!(patterns.len() > 500, "{} patterns", patterns.len());
    let matcher = Matcher::new(&patterns, LIMIT).unwrap();
    let oracle: Vec<_> = patterns
        .iter()
        .map(|p| RegexBuilder::new(p).unicode(false).build().unwrap())
        .collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../catalogue");
    let mut texts = 0;
    let mut walk = Walk::every(8);
    for dir in ["corpus", "fixtures"] {
        let mut paths: Vec<_> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        for path in paths {
            let table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
            let entries = table
                .get("item")
                .or_else(|| table.get("fixture"))
                .and_then(|v| v.as_array())
                .cloned()
                .unwrap_or_default();
            for entry in entries {
                let body = entry
                    .get("body")
                    .or_else(|| entry.get("evidence").and_then(|e| e.get("body")))
                    .and_then(|b| b.as_str())
                    .unwrap_or("");
                let text = body.as_bytes();
                let want: Vec<usize> = oracle
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_match(text))
                    .map(|(i, _)| i)
                    .collect();
                assert_eq!(
                    found(&matcher, text, &mut walk),
                    want,
                    "{}: {body:?}",
                    path.display()
                );
                texts += 1;
            }
        }
    }
    assert!(texts > 4000, "{texts} texts");
    // The DFA alone answers one text in eight here; with every text (9,586 then) the test took
    // two and a half minutes, and agreed on all.
}

/// A cache that varied texts filled is emptied once the gate has answered as many bytes as it
/// holds: a text that then comes again and again (one provider's error through an outage) is
/// answered by the DFA again, where a cache kept full sent it to the gate for good.
#[test]
fn a_cache_full_of_varied_texts_is_emptied_for_a_text_that_comes_again() {
    const CACHE: usize = 256 << 10;
    let words = [
        "timeout",
        "refused",
        "overloaded",
        "quota",
        "limit",
        "reset",
        "gateway",
        "upstream",
        "stream",
        "server",
        "busy",
        "capacity",
        "network",
        "socket",
        "closed",
        "error",
    ];
    let patterns: Vec<String> = (0..120)
        .map(|i| {
            let (a, b) = (words[i % words.len()], words[(i * 7 + 3) % words.len()]);
            format!(r"\b{a}[^\n]{{0,24}}{b} \d+")
        })
        .collect();
    let matcher = Matcher::with_cache(&patterns, LIMIT, CACHE).unwrap();
    // Varied texts, from a fixed sequence: each builds states the next one rarely uses.
    let mut state: u64 = 1;
    let mut draw = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(state >> 33).unwrap()
    };
    let mut gave_up = false;
    for _ in 0..3_000 {
        let text: Vec<String> = (0..12)
            .map(|_| {
                let word = words[draw() % words.len()];
                // A word cut short at a random letter, then one of the others: partial matches.
                format!(
                    "{}{} ",
                    &word[..draw() % word.len()],
                    words[draw() % words.len()]
                )
            })
            .collect();
        let text = format!("{}{}", text.concat(), draw() % 1000);
        matcher.matches(text.as_bytes());
        gave_up |= matcher.give_ups.load(Relaxed) > 0;
    }
    assert!(gave_up, "varied texts fill the cache and the DFA gives up");
    // A text with bytes none of them had, so it needs states of its own.
    let again = b"HTTP/1.1 503: Upstream TIMEOUT_Z after 30s; gateway closed 7 (#Q9)";
    let expected: Vec<usize> = expected(&patterns, again);
    for _ in 0..2 * CACHE / again.len() + 2 * MAX_SKIP as usize {
        let found: Vec<usize> = matcher.matches(again).iter().collect();
        assert_eq!(found, expected);
    }
    assert_eq!(
        matcher.skip.load(Relaxed),
        0,
        "the gate no longer answers it"
    );
    assert_eq!(matcher.give_ups.load(Relaxed), 0, "the DFA answers it");
}

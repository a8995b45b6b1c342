//! Which of many patterns match a text: one lazy DFA while it knows the text's shape, literals
//! and the patterns they point to when it does not.
//!
//! One lazy DFA over a thousand unanchored, case-folded patterns is fast on bodies it has seen
//! (a provider's 429, again and again) and slow on new ones: each new byte context builds a
//! state holding every pattern's partial matches (about 0.2 ms each), so varied bodies fill its
//! cache, and a plain regex set then clears it and falls back to a far slower engine. The
//! corpus's real texts, classified once each in turn, took 10 ms each that way.
//!
//! Here the DFA keeps its cache when it fills with states that served too few bytes, and gives
//! up on the text; the *literal gate* answers instead. Each pattern is reached through literals
//! that any of its matches must hold, found by [`regex_syntax`]'s literal extractor on the
//! pattern with its ASCII letters case-folded:
//! - *prefix* literals (every match starts with one): found by one Aho-Corasick pass, each hit is
//!   checked by the pattern anchored at the hit, which reads only the match;
//! - else *inner* literals (every match holds one): a hit runs the pattern once over the text;
//! - patterns with neither (few: an empty body, a line of only a word) form a small regex set
//!   scanned every time.
//!
//! After a give-up the next few texts go straight to the gate, up to `MAX_SKIP`. A full cache
//! is emptied once the gate has answered as many bytes as it holds, so texts that come back
//! (one provider's error through an outage) get their states again after a run of varied
//! ones. Both paths
//! give the answer a [`regex::bytes::RegexSet`] of the same patterns gives; a test checks the
//! gate on every corpus and fixture text, and the DFA alone on one in eight.

use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicUsize};

use aho_corasick::AhoCorasick;
use regex::bytes::{RegexSet, RegexSetBuilder};
use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::pool::Pool;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind, meta};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Capture, Class, Hir, HirKind, Repetition};

/// Literals shorter than this gate too little: a pattern whose literals are all shorter is
/// reached by a longer inner literal or scanned every time.
const MIN_LITERAL: usize = 3;

/// How a literal hit is checked.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// The pattern, anchored where the literal starts.
    At,
    /// The pattern, anywhere in the text (once).
    Anywhere,
}

/// The lazy DFA's cache: sized so that a mix of a few bodies classified again and again keeps
/// its states (at 2 MiB a mix of five 1–4 KiB bodies ran 700 times slower; at 16 MiB, with
/// 1,379 rules, it no longer fitted and ran five times slower). A cache grows only as states
/// are built, one per thread that classifies.
const DFA_CACHE: usize = 24 << 20;

/// When the cache is full, it is cleared only if at least this many bytes were searched per
/// state since the last clear; otherwise the search gives up and the literal gate answers.
/// Bodies classified again and again search thousands of bytes per state; varied ones build a
/// state every few bytes.
const DFA_BYTES_PER_STATE: usize = 1024;

/// After the DFA gives up, the next 2, 4, 8 … texts (doubling with each give-up not made up
/// by a success), at most this many, go straight to the gate: each give-up has cost the DFA one
/// state it could not keep (about 0.2 ms with a thousand patterns), and varied texts come in
/// runs (a batch of logs, an outage of many providers).
const MAX_SKIP: u32 = 1024;

type NewCache = Box<dyn Fn() -> Cache + Send + Sync + UnwindSafe + RefUnwindSafe>;

/// A compiled multi-pattern matcher: one lazy DFA over all the patterns, and the literal gate
/// when the DFA gives up.
pub(super) struct Matcher {
    dfa: DFA,
    caches: Pool<Cache, NewCache>,
    gate: Gate,
    /// Give-ups less successes (at least 0), and how many texts are still to go straight to the
    /// gate. Shared by
    /// threads without ordering: they only steer work, never an answer.
    give_ups: AtomicU32,
    skip: AtomicU32,
    /// Bytes the gate answered since a cache was last emptied here.
    gated: AtomicUsize,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("patterns", &self.dfa.pattern_len())
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl Matcher {
    /// Compiles `patterns` over bytes with ASCII-only classes and case folding: provider
    /// messages are ASCII where it matters, and literal non-ASCII text (a Chinese relay's
    /// message) still matches as its UTF-8 bytes. `size_limit` bounds each compiled NFA.
    pub(super) fn new(patterns: &[String], size_limit: usize) -> Result<Matcher, BuildError> {
        Matcher::with_cache(patterns, size_limit, DFA_CACHE)
    }

    /// The same, with a DFA cache of `cache_bytes`.
    fn with_cache(
        patterns: &[String],
        size_limit: usize,
        cache_bytes: usize,
    ) -> Result<Matcher, BuildError> {
        // The gate first: it parses each pattern alone, so a syntax error names the pattern.
        let gate = Gate::new(patterns, size_limit)?;
        let dfa = DFA::builder()
            .syntax(syntax::Config::new().unicode(false).utf8(false))
            .thompson(thompson::Config::new().nfa_size_limit(Some(size_limit)))
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    .cache_capacity(cache_bytes)
                    .minimum_cache_clear_count(Some(0))
                    .minimum_bytes_per_state(Some(DFA_BYTES_PER_STATE)),
            )
            .build_many(patterns)
            .map_err(|e| too_large(patterns, size_limit, &e))?;
        let owned = dfa.clone();
        let caches: Pool<Cache, NewCache> = Pool::new(Box::new(move || owned.create_cache()));
        Ok(Matcher {
            dfa,
            caches,
            gate,
            give_ups: AtomicU32::new(0),
            skip: AtomicU32::new(0),
            gated: AtomicUsize::new(0),
        })
    }

    /// The patterns that match `text`: the DFA's answer while its cache holds the states the
    /// text needs, else the gate's (the same answer).
    pub(super) fn matches(&self, text: &[u8]) -> Matches {
        let skip = self.skip.load(Relaxed);
        if skip > 0 {
            self.skip.store(skip - 1, Relaxed);
            return self.by_gate(text);
        }
        let mut cache = self.caches.get();
        let walked = self.walk(&mut cache, text).or_else(|| {
            // The cache is full of states that served too few bytes of the DFA's own searches,
            // and it stays full while the gate answers: kept so, it would send every text to
            // the gate for good, those that come again and again too. Once the gate has
            // answered as many bytes as the cache holds, the cache is emptied and refilled.
            (self.gated.load(Relaxed) >= cache.memory_usage())
                .then(|| {
                    cache.reset(&self.dfa);
                    self.gated.store(0, Relaxed);
                    self.walk(&mut cache, text)
                })
                .flatten()
        });
        match walked {
            Some(found) => {
                let streak = self.give_ups.load(Relaxed);
                self.give_ups.store(streak.saturating_sub(1), Relaxed);
                Matches(found)
            }
            None => {
                let streak = self.give_ups.load(Relaxed).saturating_add(1);
                self.give_ups.store(streak, Relaxed);
                self.skip.store(
                    1u32.checked_shl(streak).unwrap_or(MAX_SKIP).min(MAX_SKIP),
                    Relaxed,
                );
                self.by_gate(text)
            }
        }
    }

    /// The gate's answer, counted.
    fn by_gate(&self, text: &[u8]) -> Matches {
        let gated = self.gated.load(Relaxed).saturating_add(text.len());
        self.gated.store(gated, Relaxed);
        self.gate.matches(text)
    }

    /// The patterns the DFA finds in `text`, ascending, or `None` when it gives up (its cache
    /// filled with states that served too few bytes).
    ///
    /// One walk over the text, reading every pattern of each match state it passes: the
    /// crate's overlapping search returns to its caller at each match and checks every state's
    /// tag and the search's progress at every byte, which took two thirds of a 1 KiB
    /// classification; here a byte whose transition is known and plain costs a table read.
    fn walk(&self, cache: &mut Cache, text: &[u8]) -> Option<Vec<u32>> {
        let dfa = &self.dfa;
        let mut found: Vec<u32> = Vec::new();
        let mut sid = dfa.start_state_forward(cache, &Input::new(text)).ok()?;
        cache.search_start(0);
        for (at, &byte) in text.iter().enumerate() {
            if !sid.is_tagged() {
                let next = dfa.next_state_untagged(cache, sid, byte);
                if !next.is_tagged() {
                    sid = next;
                    continue;
                }
            }
            // A transition not computed yet (the search's progress is recorded first, so the
            // cache's bytes-per-state count holds), or a special state: match, dead or quit.
            cache.search_update(at);
            sid = dfa.next_state(cache, sid, byte).ok()?;
            if sid.is_match() {
                collect(dfa, cache, sid, &mut found);
            } else if sid.is_dead() {
                break;
            } else if sid.is_quit() {
                return None;
            }
        }
        if !sid.is_dead() {
            cache.search_update(text.len());
            sid = dfa.next_eoi_state(cache, sid).ok()?;
            if sid.is_match() {
                collect(dfa, cache, sid, &mut found);
            }
        }
        cache.search_finish(text.len());
        found.sort_unstable();
        found.dedup();
        Some(found)
    }

    /// The DFA's answer alone, with a cache of the caller's: when it gives up, with that cache
    /// emptied, unless it gives up again (one text building more states than a cache holds).
    #[cfg(test)]
    fn walked(&self, cache: &mut Option<Cache>, text: &[u8]) -> Option<Matches> {
        let cache = cache.get_or_insert_with(|| self.dfa.create_cache());
        self.walk(cache, text)
            .or_else(|| {
                cache.reset(&self.dfa);
                self.walk(cache, text)
            })
            .map(Matches)
    }

    /// The literal gate's answer alone.
    #[cfg(test)]
    fn gated(&self, text: &[u8]) -> Matches {
        self.gate.matches(text)
    }
}

/// Every pattern of match state `sid`.
fn collect(dfa: &DFA, cache: &Cache, sid: LazyStateID, found: &mut Vec<u32>) {
    for i in 0..dfa.match_len(cache, sid) {
        if let Ok(id) = u32::try_from(dfa.match_pattern(cache, sid, i).as_usize()) {
            found.push(id);
        }
    }
}

/// The literal-gated path: every pattern reached through its literals.
#[derive(Debug)]
struct Gate {
    /// Every gating literal, lower-cased, matched ignoring ASCII case.
    gate: Option<AhoCorasick>,
    /// For each literal of `gate`, the patterns it gates and how a hit is checked.
    gated: Vec<Vec<(u32, Check)>>,
    /// The patterns, and one regex per pattern, built on its first literal hit: most patterns
    /// are never hit in a process, and building them all took 140 ms of every start.
    patterns: Vec<String>,
    size_limit: usize,
    regexes: Vec<OnceLock<Option<meta::Regex>>>,
    /// Patterns without a gating literal, and their set.
    ungated: Vec<u32>,
    ungated_set: Option<RegexSet>,
}

/// Why a matcher does not compile: the pattern to blame, when one is.
#[derive(Debug)]
pub(super) struct BuildError {
    pub(super) pattern: Option<usize>,
    pub(super) message: String,
}

impl BuildError {
    fn of(pattern: Option<usize>) -> impl Fn(&dyn std::fmt::Display) -> BuildError {
        move |e| BuildError {
            pattern,
            message: e.to_string(),
        }
    }
}

/// The patterns that matched one text, in ascending order.
#[derive(Debug, Default)]
pub(super) struct Matches(Vec<u32>);

impl Matches {
    pub(super) fn matched(&self, pattern: usize) -> bool {
        u32::try_from(pattern).is_ok_and(|p| self.0.binary_search(&p).is_ok())
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().map(|&p| p as usize)
    }

    /// The patterns that matched either text.
    pub(super) fn union(mut self, other: &Matches) -> Matches {
        self.0.extend_from_slice(&other.0);
        self.0.sort_unstable();
        self.0.dedup();
        self
    }
}

impl Gate {
    fn new(patterns: &[String], size_limit: usize) -> Result<Gate, BuildError> {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut gated: Vec<Vec<(u32, Check)>> = Vec::new();
        let mut index = std::collections::HashMap::new();
        let mut ungated = Vec::new();
        for (id, pattern) in (0u32..).zip(patterns) {
            let blame = BuildError::of(Some(id as usize));
            let hir = regex_syntax::ParserBuilder::new()
                .unicode(false)
                .utf8(false)
                .build()
                .parse(pattern)
                .map_err(|e| blame(&e))?;
            let hir = fold_case(&hir);
            let (found, check) = match prefix_literals(&hir) {
                Some(found) => (found, Check::At),
                None => match inner_literals(&hir) {
                    Some(found) => (found, Check::Anywhere),
                    None => {
                        ungated.push(id);
                        continue;
                    }
                },
            };
            for literal in found {
                let slot = *index.entry(literal.clone()).or_insert_with(|| {
                    literals.push(literal);
                    gated.push(Vec::new());
                    gated.len() - 1
                });
                if let Some(list) = gated.get_mut(slot) {
                    list.push((id, check));
                }
            }
        }
        let gate = if literals.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(&literals)
                    .map_err(|e| BuildError::of(None)(&e))?,
            )
        };
        let ungated_set = if ungated.is_empty() {
            None
        } else {
            Some(
                RegexSetBuilder::new(ungated.iter().filter_map(|&i| patterns.get(i as usize)))
                    .unicode(false)
                    .size_limit(size_limit)
                    .build()
                    .map_err(|e| too_large(patterns, size_limit, &e))?,
            )
        };
        Ok(Gate {
            gate,
            gated,
            patterns: patterns.to_vec(),
            size_limit,
            regexes: patterns.iter().map(|_| OnceLock::new()).collect(),
            ungated,
            ungated_set,
        })
    }

    /// Pattern `id`'s own regex, built on first use. It builds: the DFA over all the patterns
    /// built within the same size limit.
    fn regex(&self, id: u32) -> Option<&meta::Regex> {
        let pattern = self.patterns.get(id as usize)?;
        self.regexes
            .get(id as usize)?
            .get_or_init(|| build(pattern, self.size_limit).ok())
            .as_ref()
    }

    /// The patterns that match `text`.
    fn matches(&self, text: &[u8]) -> Matches {
        let mut found: Vec<u32> = Vec::new();
        let mut anywhere_tried: Vec<u32> = Vec::new();
        if let Some(gate) = &self.gate {
            for hit in gate.find_overlapping_iter(text) {
                let Some(list) = self.gated.get(hit.pattern().as_usize()) else {
                    continue;
                };
                for &(id, check) in list {
                    if found.contains(&id) {
                        continue;
                    }
                    let Some(regex) = self.regex(id) else {
                        continue;
                    };
                    let input = match check {
                        Check::At => Input::new(text)
                            .range(hit.start()..)
                            .anchored(Anchored::Yes),
                        Check::Anywhere => {
                            if anywhere_tried.contains(&id) {
                                continue;
                            }
                            anywhere_tried.push(id);
                            Input::new(text)
                        }
                    };
                    if regex.is_match(input) {
                        found.push(id);
                    }
                }
            }
        }
        if let Some(set) = &self.ungated_set {
            found.extend(
                set.matches(text)
                    .iter()
                    .filter_map(|i| self.ungated.get(i).copied()),
            );
        }
        found.sort_unstable();
        found.dedup();
        Matches(found)
    }
}

/// Why the patterns do not compile together: the first pattern that does not compile alone
/// within `size_limit`, if one does not (the error then names its rule), else the set.
fn too_large(patterns: &[String], size_limit: usize, error: &dyn std::fmt::Display) -> BuildError {
    patterns
        .iter()
        .enumerate()
        .find_map(|(i, p)| {
            build(p, size_limit)
                .err()
                .map(|e| BuildError::of(Some(i))(&e))
        })
        .unwrap_or_else(|| BuildError::of(None)(error))
}

/// One pattern's own regex, to check a literal hit.
fn build(pattern: &str, size_limit: usize) -> Result<meta::Regex, String> {
    meta::Regex::builder()
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(size_limit))
                .utf8_empty(false),
        )
        .build(pattern)
        .map_err(|e| e.to_string())
}

/// The pattern with every class that is one ASCII letter in both cases (what `(?i)` makes of a
/// letter) turned into that letter, lower-cased: its literals then stay few and long, and the
/// gate matches them ignoring ASCII case.
fn fold_case(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Class(class) => {
            let bytes: Vec<u8> = match class {
                Class::Bytes(set) => set
                    .ranges()
                    .iter()
                    .flat_map(|r| r.start()..=r.end())
                    .take(3)
                    .collect(),
                Class::Unicode(set) => set
                    .ranges()
                    .iter()
                    .flat_map(|r| r.start()..=r.end())
                    .take(3)
                    .filter_map(|c| u8::try_from(c).ok())
                    .collect(),
            };
            match bytes[..] {
                [a, b] if a.is_ascii_alphabetic() && a != b && a.eq_ignore_ascii_case(&b) => {
                    Hir::literal(vec![a.to_ascii_lowercase()])
                }
                _ => hir.clone(),
            }
        }
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(fold_case).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(fold_case).collect()),
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: rep.max,
            greedy: rep.greedy,
            sub: Box::new(fold_case(&rep.sub)),
        }),
        HirKind::Capture(cap) => Hir::capture(Capture {
            index: cap.index,
            name: cap.name.clone(),
            sub: Box::new(fold_case(&cap.sub)),
        }),
        HirKind::Empty | HirKind::Literal(_) | HirKind::Look(_) => hir.clone(),
    }
}

/// Literals one of which starts every match, each at least [`MIN_LITERAL`] long.
fn prefix_literals(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let literals = seq.literals()?;
    if literals.is_empty() || literals.iter().any(|l| l.as_bytes().len() < MIN_LITERAL) {
        return None;
    }
    let mut out: Vec<Vec<u8>> = literals
        .iter()
        .map(|l| l.as_bytes().to_ascii_lowercase())
        .collect();
    out.sort();
    out.dedup();
    Some(out)
}

/// Literals one of which every match holds somewhere: the best part of a sequence, every
/// branch of an alternation.
fn inner_literals(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    let shortest = |l: &Vec<Vec<u8>>| l.iter().map(Vec::len).min().unwrap_or(0);
    match hir.kind() {
        HirKind::Concat(subs) => subs
            .iter()
            .filter_map(inner_literals)
            .max_by_key(|l| (shortest(l), std::cmp::Reverse(l.len()))),
        HirKind::Alternation(subs) => {
            let mut all = Vec::new();
            for sub in subs {
                all.extend(inner_literals(sub)?);
            }
            all.sort();
            all.dedup();
            Some(all)
        }
        HirKind::Capture(cap) => inner_literals(&cap.sub),
        HirKind::Repetition(rep) if rep.min >= 1 => inner_literals(&rep.sub),
        HirKind::Literal(_) | HirKind::Class(_) => prefix_literals(hir),
        _ => None,
    }
}

#[cfg(test)]
#[path = "matcher_tests.rs"]
mod tests;

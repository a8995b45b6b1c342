//! Which of many patterns match a text: literals first, then only the patterns they point to.
//!
//! One lazy DFA over a thousand unanchored, case-folded patterns is fast only on bodies it has
//! seen: each new byte context builds a state holding every pattern's partial matches, and on
//! varied bodies its cache fills, is cleared, and the engine falls back to a far slower one.
//! Classifying the corpus's 4,375 real texts in turn took 9 ms each, against 4 µs for one body
//! classified again and again.
//!
//! So each pattern is reached through literals that any of its matches must hold, found by
//! [`regex_syntax`]'s literal extractor on the pattern with its ASCII letters case-folded:
//! - *prefix* literals (every match starts with one): found by one Aho-Corasick pass, each hit is
//!   checked by the pattern anchored at the hit, which reads only the match;
//! - else *inner* literals (every match holds one): a hit runs the pattern once over the text;
//! - patterns with neither (few: an empty body, a line of only a word) form a small regex set
//!   scanned every time.
//!
//! The answer is the same set of patterns a [`regex::bytes::RegexSet`] of the same patterns
//! gives; a test checks it on every corpus text.

use aho_corasick::AhoCorasick;
use regex::bytes::{RegexSet, RegexSetBuilder};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind, PatternSet, meta};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Capture, Class, Hir, HirKind, Repetition};

/// A literal that gates at least this many patterns checks them all in one anchored search.
const GROUP: usize = 4;

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

/// A compiled multi-pattern matcher.
#[derive(Debug)]
pub(super) struct Matcher {
    /// Every gating literal, lower-cased, matched ignoring ASCII case.
    gate: Option<AhoCorasick>,
    /// For each literal of `gate`, the patterns it gates and how a hit is checked.
    gated: Vec<Vec<(u32, Check)>>,
    /// For each literal of `gate` that starts [`GROUP`] patterns or more: those patterns as
    /// one regex, searched anchored at the hit, and the pattern each of its own stands for.
    groups: Vec<Option<(meta::Regex, Vec<u32>)>>,
    /// One regex per pattern.
    regexes: Vec<meta::Regex>,
    /// Patterns without a gating literal, and their set.
    ungated: Vec<u32>,
    ungated_set: Option<RegexSet>,
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
}

impl Matcher {
    /// Compiles `patterns` over bytes with ASCII-only classes and case folding: provider
    /// messages are ASCII where it matters, and literal non-ASCII text (a Chinese relay's
    /// message) still matches as its UTF-8 bytes. `size_limit` bounds each compiled regex.
    pub(super) fn new(patterns: &[String], size_limit: usize) -> Result<Matcher, String> {
        let mut literals: Vec<Vec<u8>> = Vec::new();
        let mut gated: Vec<Vec<(u32, Check)>> = Vec::new();
        let mut index = std::collections::HashMap::new();
        let mut ungated = Vec::new();
        let mut regexes = Vec::with_capacity(patterns.len());
        for (id, pattern) in (0u32..).zip(patterns) {
            regexes.push(build(&[pattern], size_limit)?);
            let hir = regex_syntax::ParserBuilder::new()
                .unicode(false)
                .utf8(false)
                .build()
                .parse(pattern)
                .map_err(|e| e.to_string())?;
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
        let groups = gated
            .iter()
            .map(|list| {
                let starting: Vec<u32> = list
                    .iter()
                    .filter(|(_, check)| matches!(check, Check::At))
                    .map(|&(id, _)| id)
                    .collect();
                if starting.len() < GROUP {
                    return Ok(None);
                }
                let own: Vec<&String> = starting
                    .iter()
                    .filter_map(|&id| patterns.get(id as usize))
                    .collect();
                Ok(Some((build(&own, size_limit)?, starting)))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let gate = if literals.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(&literals)
                    .map_err(|e| e.to_string())?,
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
                    .map_err(|e| e.to_string())?,
            )
        };
        Ok(Matcher {
            gate,
            gated,
            groups,
            regexes,
            ungated,
            ungated_set,
        })
    }

    /// The patterns that match `text`.
    pub(super) fn matches(&self, text: &[u8]) -> Matches {
        let mut found: Vec<u32> = Vec::new();
        let mut anywhere_tried: Vec<u32> = Vec::new();
        if let Some(gate) = &self.gate {
            for hit in gate.find_overlapping_iter(text) {
                let literal = hit.pattern().as_usize();
                let Some(list) = self.gated.get(literal) else {
                    continue;
                };
                let group = self.groups.get(literal).and_then(Option::as_ref);
                if let Some((regex, ids)) = group {
                    let mut set = PatternSet::new(regex.pattern_len());
                    let input = Input::new(text)
                        .range(hit.start()..)
                        .anchored(Anchored::Yes);
                    regex.which_overlapping_matches(&input, &mut set);
                    found.extend(set.iter().filter_map(|p| ids.get(p.as_usize()).copied()));
                }
                for &(id, check) in list {
                    if group.is_some() && matches!(check, Check::At) {
                        continue;
                    }
                    if found.contains(&id) {
                        continue;
                    }
                    let Some(regex) = self.regexes.get(id as usize) else {
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

/// One regex of `patterns`, each found apart from the others (for the set of those matching).
fn build<P: AsRef<str>>(patterns: &[P], size_limit: usize) -> Result<meta::Regex, String> {
    meta::Regex::builder()
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .configure(
            meta::Config::new()
                .match_kind(MatchKind::All)
                .nfa_size_limit(Some(size_limit))
                .utf8_empty(false),
        )
        .build_many(patterns)
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

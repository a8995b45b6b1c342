//! The catalogue: provider knowledge as data (C1, C2, C6, C7).
//!
//! Rule files (TOML, see `docs/catalogue.md`) are compiled once into a [`Catalogue`]: every
//! body pattern of every rule goes into one matcher, every header pattern into one matcher per
//! header name. A matcher scans the text once with one lazy DFA over all its patterns, or, for a
//! text whose shape the DFA has no room to learn, finds the patterns' literals in one pass and
//! checks only the patterns they point to (`matcher.rs`), however many rules there are. Only
//! the rules whose pattern matched, and those without one, are then tried, highest priority
//! first, with their cheap matchers (status, provider, phase, transport, event type).
//!
//! The catalogue never guesses: no rule, a low-confidence rule, rules of equal priority that
//! disagree, stale evidence or a code without a class all come out
//! [`Verdict::Unclassified`], which no policy acts on (C4).

mod compile;
mod file;
mod frame;
mod log_line;
mod matcher;
mod reading;
mod shipped;
mod splice;

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::SystemTime;

use regex::Regex;

pub use compile::{CatalogueError, Source};
use matcher::{Matcher, Matches};
pub use shipped::shipped_sources;

use crate::classification::{
    Class, Classification, Code, Confidence, Scope, UnclassifiedReason, Verdict,
};
use crate::evidence::{EVIDENCE_TEXT_LIMIT, Evidence, Phase, TransportKind, bound_text};
use crate::hint::{Hint, HintFormat, HintSource};
use crate::retry_after::header_hint;

/// The status a rule's `"none"` item stands for: evidence without a status, even in its text.
const NO_STATUS: u16 = 0;

/// A compiled, validated set of rules. Cheap to share behind an `Arc`; classification takes
/// `&self` and allocates only its answer.
#[derive(Debug)]
pub struct Catalogue {
    version: Arc<str>,
    /// Highest priority first.
    rules: Vec<Rule>,
    /// The rule (its index in `rules`) each rule pattern of `body_set` belongs to. The
    /// text-status patterns follow the rules' in the set, from `text_status_base` on.
    rule_of_pattern: Vec<u32>,
    /// The rules without a body pattern, in `rules` order.
    bodiless: Vec<u32>,
    body_set: Matcher,
    needs_body: bool,
    /// `[[text_status]]` extractors, read only when the evidence has no status of its own and
    /// the body set says their pattern matched.
    text_status: Vec<regex::bytes::Regex>,
    text_status_base: usize,
    header_slots: Vec<HeaderSlot>,
    codes: BTreeMap<Code, Option<Class>>,
}

#[derive(Debug)]
struct HeaderSlot {
    name: String,
    set: Matcher,
}

#[derive(Debug)]
enum HintFrom {
    Body,
    Header(String),
}

#[derive(Debug)]
struct HintExtractor {
    from: HintFrom,
    regex: Regex,
    format: HintFormat,
}

#[derive(Debug)]
struct Rule {
    id: Arc<str>,
    priority: i32,
    providers: Vec<String>,
    status: Vec<RangeInclusive<u16>>,
    phase: Option<Phase>,
    transport: Vec<TransportKind>,
    sse_event: Vec<String>,
    /// (header slot, pattern index in that slot's set)
    headers: Vec<(usize, usize)>,
    /// Pattern index in the body set.
    body: Option<usize>,
    code: Code,
    class: Option<Class>,
    confidence: Confidence,
    scope: Scope,
    hints: Vec<HintExtractor>,
}

impl Rule {
    /// The matchers that need no text scan. `status` is the evidence's, or the one its text
    /// embeds; a rule's `"none"` item matches evidence with neither.
    fn cheap_match(&self, evidence: &Evidence, status: Option<u16>) -> bool {
        if !self.providers.is_empty()
            && !evidence
                .provider
                .as_deref()
                .is_some_and(|p| self.providers.iter().any(|q| q.eq_ignore_ascii_case(p)))
        {
            return false;
        }
        if !self.status.is_empty()
            && !self
                .status
                .iter()
                .any(|r| r.contains(&status.unwrap_or(NO_STATUS)))
        {
            return false;
        }
        if self.phase.is_some_and(|p| p != evidence.phase) {
            return false;
        }
        if !self.transport.is_empty()
            && !evidence
                .transport
                .is_some_and(|t| self.transport.contains(&t))
        {
            return false;
        }
        if !self.sse_event.is_empty()
            && !evidence
                .sse_event
                .as_deref()
                .is_some_and(|e| self.sse_event.iter().any(|x| x == e))
        {
            return false;
        }
        true
    }
}

/// Two ascending sequences as one.
fn merged<'a>(a: &'a [u32], b: &'a [u32]) -> impl Iterator<Item = u32> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || match (a.get(i), b.get(j)) {
        (Some(&x), Some(&y)) if x <= y => {
            i += 1;
            Some(x)
        }
        (_, Some(&y)) => {
            j += 1;
            Some(y)
        }
        (Some(&x), None) => {
            i += 1;
            Some(x)
        }
        (None, None) => None,
    })
}

/// The status a `[[text_status]]` extractor reads in `text`, if it is one (C8).
fn embedded_status(extractor: &regex::bytes::Regex, text: &str) -> Option<u16> {
    let caps = extractor.captures(text.as_bytes())?;
    let status: u16 = std::str::from_utf8(caps.name("status")?.as_bytes())
        .ok()?
        .parse()
        .ok()?;
    (200..=599).contains(&status).then_some(status)
}

/// Lazily computed regex-set results for one classification.
struct Scan<'a> {
    catalogue: &'a Catalogue,
    evidence: &'a Evidence,
    text: &'a str,
    /// The text read again with a reprint undone (`reading.rs`): computed once.
    readings: Option<reading::Readings>,
    body: Option<Matches>,
    headers: Vec<Option<Option<Matches>>>,
}

impl Scan<'_> {
    /// The text read again with a reprint undone (`reading::unwrapped`).
    fn readings(&mut self) -> &reading::Readings {
        let text = self.text;
        self.readings
            .get_or_insert_with(|| reading::unwrapped(text))
    }

    /// The status the evidence carries, or else the first one its text embeds (`Error code:
    /// 429`, `status_code: 400`, `HTTP 429`), per the catalogue's `[[text_status]]` (C8), read
    /// in the text as printed and with a reprint undone (`{\"error\":{\"code\":429`).
    fn status(&mut self) -> Option<u16> {
        if self.evidence.status.is_some() {
            return self.evidence.status;
        }
        let catalogue = self.catalogue;
        if catalogue.text_status.is_empty() || self.text.is_empty() {
            return None;
        }
        // Both readings, and the pattern first in the catalogue's order decides, as if the
        // two were one text: a wrapped "status code\n400" must not lose to a later pattern's
        // `"code": 500` that the text as printed still shows. The body set has matched both.
        let base = catalogue.text_status_base;
        // The scan computes the other readings too; they are then only read.
        self.body_set();
        let readings = self.readings.as_ref()?;
        let matched = self.body.as_ref()?.iter().filter(|&p| p >= base);
        matched
            .filter_map(|pattern| catalogue.text_status.get(pattern - base))
            .find_map(|extractor| {
                std::iter::once(self.text)
                    .chain(readings.iter())
                    .find_map(|t| embedded_status(extractor, t))
            })
    }

    /// Which patterns of the body set match the text, or the text with a reprint undone
    /// (`reading.rs`): scanned once, on first use.
    fn body_set(&mut self) -> &Matches {
        if self.body.is_none() {
            let set = &self.catalogue.body_set;
            let mut matches = set.matches(self.text.as_bytes());
            for reading in self.readings().iter() {
                matches = matches.union(&set.matches(reading.as_bytes()));
            }
            self.body = Some(matches);
        }
        self.body.get_or_insert_with(Matches::default)
    }

    fn body_matches(&mut self, index: usize) -> bool {
        self.body_set().matched(index)
    }

    fn header_matches(&mut self, slot: usize, index: usize) -> bool {
        let Some(header) = self.catalogue.header_slots.get(slot) else {
            return false;
        };
        let evidence = self.evidence;
        let Some(cached) = self.headers.get_mut(slot) else {
            return false;
        };
        cached
            .get_or_insert_with(|| {
                evidence.headers.get(&header.name).map(|value| {
                    header
                        .set
                        .matches(bound_text(value, EVIDENCE_TEXT_LIMIT).as_bytes())
                })
            })
            .as_ref()
            .is_some_and(|m| m.matched(index))
    }
}

impl Catalogue {
    /// For `rules` in priority order, the rule each of the first `patterns` body patterns
    /// belongs to, and the rules without a body pattern.
    fn index(rules: &[Rule], patterns: usize) -> (Vec<u32>, Vec<u32>) {
        let mut rule_of_pattern = vec![0; patterns];
        let mut bodiless = Vec::new();
        for (i, rule) in (0u32..).zip(rules) {
            match rule.body.and_then(|p| rule_of_pattern.get_mut(p)) {
                Some(slot) => *slot = i,
                None => bodiless.push(i),
            }
        }
        (rule_of_pattern, bodiless)
    }

    /// The catalogue shipped with rebound (the `catalogue/` folder of the repository,
    /// embedded at build time).
    pub fn shipped() -> Result<Catalogue, CatalogueError> {
        Self::compile(&shipped_sources(), &[])
    }

    /// The shipped catalogue plus a user's rule files. User files may declare codes and
    /// rules but not a version: the version becomes the shipped one plus a hash of their
    /// content, so attempt records tell which rules decided.
    pub fn with_user_rules(user: &[Source]) -> Result<Catalogue, CatalogueError> {
        Self::compile(&shipped_sources(), user)
    }

    /// Compiles `base` (which must declare `[catalogue] version`) and `user` sources.
    pub fn compile(base: &[Source], user: &[Source]) -> Result<Catalogue, CatalogueError> {
        compile::compile(base, user)
    }

    /// The version recorded with every classification (C7).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The number of rules.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Every rule id, highest priority first.
    pub fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| &*r.id)
    }

    /// The code a rule assigns.
    pub fn rule_code(&self, id: &str) -> Option<&Code> {
        self.rules.iter().find(|r| &*r.id == id).map(|r| &r.code)
    }

    /// Every declared code with its class (`None`: declared without one, fails closed).
    pub fn codes(&self) -> impl Iterator<Item = (&Code, Option<Class>)> {
        self.codes.iter().map(|(code, class)| (code, *class))
    }

    /// The class of a code; `None` for an undeclared code or one without a class.
    pub fn class_of(&self, code: &str) -> Option<Class> {
        self.codes.get(&Code::new(code)).copied().flatten()
    }

    /// Classifies evidence. `now` validates absolute hints (HTTP-dates, "resets at").
    pub fn classify(&self, evidence: &Evidence, now: SystemTime) -> Classification {
        let text = reading::plain_apostrophes(if self.needs_body {
            evidence.bounded_text()
        } else {
            ""
        });
        let mut scan = Scan {
            catalogue: self,
            evidence,
            text: &text,
            readings: None,
            body: None,
            headers: Vec::new(),
        };
        scan.headers.resize_with(self.header_slots.len(), || None);
        let status = scan.status();

        // Only rules whose pattern matched, and those without one, can match: they are the
        // few to try, in priority order, instead of every rule of the catalogue.
        let mut matched: Vec<u32> = scan
            .body_set()
            .iter()
            .filter_map(|p| self.rule_of_pattern.get(p).copied())
            .collect();
        matched.sort_unstable();

        let mut best: Option<&Rule> = None;
        let mut conflicts: Vec<String> = Vec::new();
        for rule in merged(&self.bodiless, &matched).filter_map(|i| self.rules.get(i as usize)) {
            if best.is_some_and(|b| rule.priority < b.priority) {
                break;
            }
            if !rule.cheap_match(evidence, status) {
                continue;
            }
            if rule.body.is_some_and(|i| !scan.body_matches(i)) {
                continue;
            }
            if !rule.headers.iter().all(|&(s, i)| scan.header_matches(s, i)) {
                continue;
            }
            match best {
                None => best = Some(rule),
                Some(b) if b.code != rule.code => conflicts.push(rule.id.to_string()),
                Some(_) => {}
            }
        }

        let retry_forbidden = evidence
            .headers
            .get("x-should-retry")
            .is_some_and(|v| v.eq_ignore_ascii_case("false"));
        let mut out = Classification {
            verdict: Verdict::Unclassified(UnclassifiedReason::NoRule),
            code: None,
            confidence: Confidence::Low,
            scope: Scope::Request,
            rule_id: None,
            catalogue_version: self.version.clone(),
            hint: header_hint(status, &evidence.headers, now),
            retry_forbidden,
            phase: evidence.phase,
            status,
        };
        let Some(rule) = best else {
            return out;
        };
        if !conflicts.is_empty() {
            conflicts.insert(0, rule.id.to_string());
            out.verdict = Verdict::Unclassified(UnclassifiedReason::Conflict(conflicts));
            return out;
        }
        out.code = Some(rule.code.clone());
        out.confidence = rule.confidence;
        out.scope = rule.scope;
        out.rule_id = Some(rule.id.clone());
        out.verdict = match (rule.class, rule.confidence) {
            (None, _) => Verdict::Unclassified(UnclassifiedReason::NoClass),
            (Some(_), Confidence::Low) => Verdict::Unclassified(UnclassifiedReason::LowConfidence),
            (Some(class), _) => Verdict::Classified(class),
        };
        if out.hint.is_none() {
            out.hint = rule_hint(rule, evidence, &text, now).or_else(|| {
                let mut readings = scan.readings().iter();
                readings.find_map(|t| rule_hint(rule, evidence, t, now))
            });
        }
        out
    }

    /// Classifies evidence for the invocation `current`: evidence from any other invocation,
    /// or without one, is stale and comes out unclassified (C4), with the code still shown.
    pub fn classify_current(
        &self,
        evidence: &Evidence,
        current: &str,
        now: SystemTime,
    ) -> Classification {
        let mut out = self.classify(evidence, now);
        if evidence.invocation.as_deref() != Some(current) {
            out.verdict = Verdict::Unclassified(UnclassifiedReason::Stale);
        }
        out
    }
}

/// A rule's hint, read from the body text its pattern matched (`body`: bounded, apostrophes
/// plain) or from a header.
fn rule_hint(rule: &Rule, evidence: &Evidence, body: &str, now: SystemTime) -> Option<Hint> {
    rule.hints.iter().find_map(|extractor| {
        let text = match &extractor.from {
            HintFrom::Body => body,
            HintFrom::Header(name) => bound_text(evidence.headers.get(name)?, EVIDENCE_TEXT_LIMIT),
        };
        extractor.regex.captures_iter(text).find_map(|caps| {
            let (group, _) = HintFormat::GROUPS
                .iter()
                .find(|(_, f)| *f == extractor.format)?;
            let value = caps.name(group)?.as_str();
            let tz = caps.name("tz").map(|m| m.as_str());
            let delay = extractor.format.parse(value, tz, now)?;
            Some(Hint {
                delay,
                source: HintSource::Catalogue,
            })
        })
    })
}

#[cfg(test)]
mod tests;

//! Runs every fixture in `catalogue/fixtures/` against the shipped catalogue (C2), and checks
//! that every rule has a positive and a negative fixture and every code is reachable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rebound_core::backoff::Jitter;
use rebound_core::redact::redact_headers;
use rebound_core::status::{Diagnostics, StopReason, error_excerpt};
use rebound_core::{Caller, Evidence, Policy, Verdict};
use serde::Deserialize;

use crate::{CATALOGUE, now};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureFile {
    /// A file may hold none yet: every rule's own fixtures are checked below.
    #[serde(default)]
    fixture: Vec<Fixture>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    name: String,
    evidence: Evidence,
    expect: Expect,
    #[serde(default)]
    not_rules: Vec<String>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    current_invocation: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DelayExpect {
    Ms(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    class: String,
    rule: Option<String>,
    code: Option<String>,
    hint_ms: Option<u64>,
    #[serde(default)]
    no_hint: bool,
    hint_source: Option<String>,
    reason: Option<String>,
    retry_forbidden: Option<bool>,
    delay_ms: Option<DelayExpect>,
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../catalogue/fixtures")
}

fn load() -> Vec<(String, Fixture)> {
    let mut files: Vec<_> = std::fs::read_dir(fixture_dir())
        .expect("catalogue/fixtures exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let file: FixtureFile =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {}", e.message()));
        out.extend(file.fixture.into_iter().map(|f| (name.clone(), f)));
    }
    out
}

/// Everything rebound could print about a fixture's evidence.
fn all_output(evidence: &Evidence, classification: &rebound_core::Classification) -> String {
    let diagnostics = Diagnostics::new(
        StopReason::Exhausted,
        evidence,
        classification,
        0,
        1,
        0,
        std::time::Duration::ZERO,
    );
    [
        serde_json::to_string(classification).unwrap(),
        serde_json::to_string(&diagnostics).unwrap(),
        error_excerpt(evidence).unwrap_or_default(),
        serde_json::to_string(&redact_headers(&evidence.headers)).unwrap(),
        format!("{classification:?}"),
    ]
    .join("\n")
}

#[test]
fn every_fixture_holds() {
    let catalogue = &*CATALOGUE;
    let policy = Policy::interactive();
    let mut failures = Vec::new();
    for (file, f) in load() {
        let c = match &f.current_invocation {
            Some(current) => catalogue.classify_current(&f.evidence, current, now()),
            None => catalogue.classify(&f.evidence, now()),
        };
        let mut fail = |what: String| failures.push(format!("{file}: {}: {what}", f.name));
        let e = &f.expect;
        if c.verdict.label() != e.class {
            fail(format!(
                "class {} (rule {:?}), expected {}",
                c.verdict.label(),
                c.rule_id,
                e.class
            ));
        }
        if let Some(rule) = &e.rule
            && c.rule_id.as_deref() != Some(rule)
        {
            fail(format!("rule {:?}, expected {rule}", c.rule_id));
        }
        if let Some(code) = &e.code
            && c.code.as_ref().map(|c| c.as_str()) != Some(code)
        {
            fail(format!("code {:?}, expected {code}", c.code));
        }
        let hint = c.hint.map(|h| h.delay.as_millis() as u64);
        if e.hint_ms.is_some() && hint != e.hint_ms {
            fail(format!("hint {hint:?}, expected {:?}", e.hint_ms));
        }
        if e.no_hint && hint.is_some() {
            fail(format!("hint {hint:?}, expected none"));
        }
        if let Some(source) = &e.hint_source
            && c.hint.map(|h| h.source.as_str()) != Some(source)
        {
            fail(format!(
                "hint source {:?}, expected {source}",
                c.hint.map(|h| h.source)
            ));
        }
        if let Some(reason) = &e.reason {
            match &c.verdict {
                Verdict::Unclassified(r) if r.as_str() == reason => {}
                other => fail(format!("verdict {other:?}, expected unclassified {reason}")),
            }
        }
        if let Some(forbidden) = e.retry_forbidden
            && c.retry_forbidden != forbidden
        {
            fail(format!("retry_forbidden {}", c.retry_forbidden));
        }
        if let Some(delay) = &e.delay_ms {
            let got = policy
                .retry_delay(&c, Caller::Session, 1, Jitter::NONE)
                .map(|d| d.as_millis() as u64);
            let want = match delay {
                DelayExpect::Ms(ms) => Some(*ms),
                DelayExpect::Text(t) if t == "none" => None,
                DelayExpect::Text(t) => panic!("{file}: {}: delay_ms {t:?}", f.name),
            };
            if got != want {
                fail(format!("delay {got:?}, expected {want:?}"));
            }
        }
        if let Some(rule) = c.rule_id.as_deref()
            && f.not_rules.iter().any(|r| r == rule)
        {
            fail(format!("matched {rule}, which it must not"));
        }
        let output = all_output(&f.evidence, &c);
        for secret in &f.secrets {
            if output.contains(secret.as_str()) {
                fail(format!("secret {secret:?} reached the output:\n{output}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_rule_has_a_positive_and_a_negative_fixture() {
    let catalogue = &*CATALOGUE;
    let fixtures = load();
    assert!(fixtures.len() >= 80, "only {} fixtures", fixtures.len());
    let positive: BTreeSet<&str> = fixtures
        .iter()
        .filter_map(|(_, f)| f.expect.rule.as_deref())
        .collect();
    let negative: BTreeSet<&str> = fixtures
        .iter()
        .flat_map(|(_, f)| f.not_rules.iter().map(String::as_str))
        .collect();
    let ids: BTreeSet<&str> = catalogue.rule_ids().collect();
    let missing_pos: Vec<_> = ids.difference(&positive).collect();
    // A rule that outranks a near miss serves as that near miss's negative too: the winning
    // rule of a positive fixture proves every rule it names in `not_rules` stays silent.
    let missing_neg: Vec<_> = ids.difference(&negative).collect();
    assert!(
        missing_pos.is_empty(),
        "rules without a positive fixture: {missing_pos:?}"
    );
    assert!(
        missing_neg.is_empty(),
        "rules without a negative fixture: {missing_neg:?}"
    );
    let unknown: Vec<_> = positive
        .union(&negative)
        .filter(|r| !ids.contains(*r))
        .collect();
    assert!(
        unknown.is_empty(),
        "fixtures name unknown rules: {unknown:?}"
    );
}

#[test]
fn redaction_fixtures_exist_for_every_key_shape() {
    let secrets: Vec<String> = load().into_iter().flat_map(|(_, f)| f.secrets).collect();
    for shape in ["sk-proj-", "sk-ant-", "AIza", "AKIA", "eyJ"] {
        assert!(
            secrets.iter().any(|s| s.starts_with(shape)),
            "no redaction fixture for {shape}"
        );
    }
}

#[test]
fn every_code_has_a_class_a_rule_and_a_fixture() {
    let catalogue = &*CATALOGUE;
    let fixtures = load();
    let mut rules_by_code: BTreeMap<String, usize> = BTreeMap::new();
    for id in catalogue.rule_ids() {
        *rules_by_code
            .entry(catalogue.rule_code(id).unwrap().to_string())
            .or_default() += 1;
    }
    let now = now();
    let fixture_codes: BTreeSet<String> = fixtures
        .iter()
        .filter_map(|(_, f)| catalogue.classify(&f.evidence, now).code)
        .map(|c| c.to_string())
        .collect();
    for (code, class) in catalogue.codes() {
        assert!(class.is_some(), "shipped code {code} has no class");
        assert!(
            rules_by_code.contains_key(code.as_str()),
            "code {code} has no rule"
        );
        assert!(
            fixture_codes.contains(code.as_str()),
            "code {code} has no fixture"
        );
    }
}

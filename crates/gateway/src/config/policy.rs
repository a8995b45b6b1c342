//! Policies in the config: field overrides of a preset, or a policy document (D1, D5).

use std::collections::BTreeMap;
use std::time::Duration;

use rebound_core::backoff::Backoff;
use rebound_core::policy::{ClassPolicy, Exhausted, Limit, RetryPolicy};
use rebound_core::{Class, Policy};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyFile {
    /// A versioned policy document (`version = 1` with full per-class pipelines) instead of
    /// field overrides.
    version: Option<u32>,
    /// Legacy: one action for every class (`try_next`, `stop`, `retry_same`), migrated (D5).
    action: Option<rebound_core::policy::document::LegacyAction>,
    /// Legacy: an action per semantic code, migrated (D5).
    rules: Option<BTreeMap<String, rebound_core::policy::document::LegacyAction>>,
    /// `interactive` (default) or `skip`.
    preset: Option<String>,
    rate_limit: Option<ClassPolicyFile>,
    transient: Option<ClassPolicyFile>,
    hard: Option<ClassPolicyFile>,
}

impl PolicyFile {
    /// True when the table sets something: a policy the configuration chose, which no
    /// route default replaces (D3).
    pub(super) fn is_set(&self) -> bool {
        self.version.is_some()
            || self.action.is_some()
            || self.rules.is_some()
            || self.preset.is_some()
            || self.rate_limit.is_some()
            || self.transient.is_some()
            || self.hard.is_some()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassPolicyFile {
    reset_wait_max_ms: Option<u64>,
    retries: Option<RetriesFile>,
    initial_ms: Option<u64>,
    cap_ms: Option<u64>,
    jitter: Option<f64>,
    exhausted: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RetriesFile {
    Count(u32),
    Word(String),
}

fn default_backoff(class: Class) -> Backoff {
    match class {
        Class::RateLimit => {
            Backoff::doubling(Duration::from_secs(2), Duration::from_secs(30)).with_jitter(0.25)
        }
        Class::Transient => Backoff::doubling(Duration::from_secs(1), Duration::from_secs(8)),
        _ => Backoff::doubling(Duration::from_secs(60), Duration::from_secs(600)),
    }
}

pub(super) fn compile_policy<'c>(
    file: &PolicyFile,
    base: &Policy,
    at: &str,
    catalogue: &dyn Fn() -> Result<&'c rebound_core::Catalogue, String>,
) -> Result<Policy, (String, String)> {
    if file.version.is_some() || file.action.is_some() || file.rules.is_some() {
        if file.preset.is_some() {
            return Err((
                format!("{at}.preset"),
                "a policy document has no preset".into(),
            ));
        }
        let document = document_of(file, at)?;
        let catalogue = catalogue().map_err(|e| (at.to_owned(), e))?;
        return document
            .compile(base, catalogue)
            .map_err(|e| (format!("{at}.{}", e.field), e.message));
    }
    let mut policy = match file.preset.as_deref() {
        None => *base,
        Some("interactive") => Policy::interactive(),
        Some("skip") => Policy::immediate_skip(),
        Some(other) => {
            return Err((
                format!("{at}.preset"),
                format!("unknown preset `{other}`, expected interactive or skip"),
            ));
        }
    };
    for (class, name, slot) in [
        (Class::RateLimit, "rate_limit", &file.rate_limit),
        (Class::Transient, "transient", &file.transient),
        (Class::Hard, "hard", &file.hard),
    ] {
        let Some(over) = slot else { continue };
        let target = match class {
            Class::RateLimit => &mut policy.rate_limit,
            Class::Transient => &mut policy.transient,
            _ => &mut policy.hard,
        };
        *target = compile_class(over, *target, class, &format!("{at}.{name}"))?;
    }
    Ok(policy)
}

/// A versioned document or a legacy action map, written as a TOML table.
fn document_of(
    file: &PolicyFile,
    at: &str,
) -> Result<rebound_core::policy::document::PolicyDocument, (String, String)> {
    use rebound_core::policy::document::{
        ClassDocument, ExhaustedDocument, MaxDocument, PolicyDocument, ResetWaitDocument,
        RetryDocument,
    };
    let class = |name: &str,
                 c: &Option<ClassPolicyFile>|
     -> Result<Option<ClassDocument>, (String, String)> {
        let Some(c) = c else { return Ok(None) };
        let field = |f: &str| format!("{at}.{name}.{f}");
        let exhausted = match c.exhausted.as_deref() {
            Some("skip") => ExhaustedDocument::Skip,
            Some("stop") => ExhaustedDocument::Stop,
            Some(other) => {
                return Err((
                    field("exhausted"),
                    format!("`{other}` is neither skip nor stop"),
                ));
            }
            None => {
                return Err((
                    field("exhausted"),
                    "a versioned document names every class's exhausted outcome".into(),
                ));
            }
        };
        let retry = match &c.retries {
            None => None,
            Some(r) => Some(RetryDocument {
                max: match r {
                    RetriesFile::Count(n) => MaxDocument::Count(*n),
                    RetriesFile::Word(w) => MaxDocument::Word(w.clone()),
                },
                initial_ms: c
                    .initial_ms
                    .ok_or_else(|| (field("initial_ms"), "needed with retries".to_owned()))?,
                cap_ms: c
                    .cap_ms
                    .ok_or_else(|| (field("cap_ms"), "needed with retries".to_owned()))?,
                jitter: c.jitter.unwrap_or(0.0),
            }),
        };
        Ok(Some(ClassDocument {
            reset_wait: c
                .reset_wait_max_ms
                .map(|max_ms| ResetWaitDocument { max_ms }),
            retry,
            exhausted,
        }))
    };
    Ok(PolicyDocument {
        version: file.version,
        rate_limit: class("rate_limit", &file.rate_limit)?,
        transient: class("transient", &file.transient)?,
        hard: class("hard", &file.hard)?,
        action: file.action,
        rules: file.rules.clone(),
    })
}

fn compile_class(
    file: &ClassPolicyFile,
    base: ClassPolicy,
    class: Class,
    at: &str,
) -> Result<ClassPolicy, (String, String)> {
    let mut out = base;
    if let Some(ms) = file.reset_wait_max_ms {
        out.reset_wait = (ms > 0).then(|| rebound_core::ResetWait {
            max: Duration::from_millis(ms),
        });
    }
    let limit = match &file.retries {
        None => out.retry.map(|r| r.limit),
        Some(RetriesFile::Count(0)) => None,
        Some(RetriesFile::Count(n)) => Some(Limit::Count(*n)),
        Some(RetriesFile::Word(w)) if w == "infinite" => Some(Limit::Infinite),
        Some(RetriesFile::Word(w)) => {
            return Err((
                format!("{at}.retries"),
                format!("`{w}` is neither a count nor \"infinite\""),
            ));
        }
    };
    let mut backoff = out
        .retry
        .map_or_else(|| default_backoff(class), |r| r.backoff);
    if file.initial_ms.is_some() || file.cap_ms.is_some() {
        let initial = file
            .initial_ms
            .map_or(backoff.initial(), Duration::from_millis);
        let cap = file.cap_ms.map_or(backoff.cap(), Duration::from_millis);
        if initial.is_zero() || cap < initial {
            return Err((
                format!("{at}.cap_ms"),
                "needs initial_ms > 0 and cap_ms ≥ initial_ms".into(),
            ));
        }
        backoff = Backoff::doubling(initial, cap).with_jitter(backoff.jitter());
    }
    if let Some(j) = file.jitter {
        if !(0.0..=1.0).contains(&j) {
            return Err((format!("{at}.jitter"), "must be in [0, 1]".into()));
        }
        backoff = backoff.with_jitter(j);
    }
    out.retry = limit.map(|limit| RetryPolicy::new(limit, backoff));
    if let Some(e) = &file.exhausted {
        out.exhausted = match e.as_str() {
            "skip" => Exhausted::Skip,
            "stop" => Exhausted::Stop,
            other => {
                return Err((
                    format!("{at}.exhausted"),
                    format!("`{other}` is neither skip nor stop"),
                ));
            }
        };
    }
    Ok(out)
}

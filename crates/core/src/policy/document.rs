//! Policy documents: the versioned, written form of a candidate's per-class pipeline (D1),
//! and the migration of legacy action maps (D5).
//!
//! Version 1 (JSON over an API, or the same keys as a TOML table):
//!
//! ```json
//! {"version": 1,
//!  "rate_limit": {"reset_wait": {"max_ms": 600000},
//!                 "retry": {"max": 3, "initial_ms": 2000, "cap_ms": 30000, "jitter": 0.25},
//!                 "exhausted": "skip"},
//!  "transient": {"retry": {"max": "infinite", "initial_ms": 1000, "cap_ms": 8000}, "exhausted": "stop"},
//!  "hard": {"exhausted": "skip"}}
//! ```
//!
//! A class left out keeps the base policy's pipeline (for a new dynamic candidate, immediate
//! `skip`, D3). A step left out of a class is off: no reset wait, no retry.
//!
//! Legacy documents carry no version and one of:
//! - `{"action": "try_next" | "stop" | "retry_same"}` for every class;
//! - `{"rules": {"<code>": "try_next" | "stop" | "retry_same", …}}` per semantic code.
//!
//! They migrate on read: `try_next` → immediate skip; `stop` → immediate stop; `retry_same` →
//! one retry after 5 s, then stop. A per-code rule applies to its code's class; two codes of
//! one class with different actions are a validation error naming both codes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ClassPolicy, Exhausted, Limit, Policy, ResetWait, RetryPolicy};
use crate::backoff::Backoff;
use crate::catalogue::Catalogue;
use crate::classification::Class;

/// The current document version.
pub const VERSION: u32 = 1;

/// A document that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("policy `{field}`: {message}")]
#[non_exhaustive]
pub struct PolicyError {
    /// The field, as a dotted path (`rate_limit.retry.max`, `rules.overloaded`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        message: message.into(),
    }
}

/// A document as written: versioned, or a legacy action map.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDocument {
    /// `1`; absent for a legacy document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The `rate_limit` pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<ClassDocument>,
    /// The `transient` pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transient: Option<ClassDocument>,
    /// The `hard` pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard: Option<ClassDocument>,
    /// Legacy: one action for every class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<LegacyAction>,
    /// Legacy: an action per semantic code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<BTreeMap<String, LegacyAction>>,
}

/// One class's pipeline, as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassDocument {
    /// Step 1: wait for an announced reset up to `max_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_wait: Option<ResetWaitDocument>,
    /// Step 2: retry the same candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryDocument>,
    /// Step 3: `skip` or `stop`.
    pub exhausted: ExhaustedDocument,
}

/// The reset-wait step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetWaitDocument {
    /// The longest announced wait accepted, in milliseconds.
    pub max_ms: u64,
}

/// The retry step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDocument {
    /// A count, or `"infinite"`.
    pub max: MaxDocument,
    /// The first delay.
    pub initial_ms: u64,
    /// The cap on every delay, hinted or not.
    pub cap_ms: u64,
    /// Positive jitter fraction in [0, 1].
    #[serde(default)]
    pub jitter: f64,
}

/// A retry count or `"infinite"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxDocument {
    /// At most this many retries.
    Count(u32),
    /// `"infinite"`.
    Word(String),
}

/// `skip` or `stop`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExhaustedDocument {
    /// Move on to the next candidate.
    Skip,
    /// End the route.
    #[default]
    Stop,
}

/// A legacy action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LegacyAction {
    /// Retry the same candidate (migrates to one retry after 5 s, then stop).
    RetrySame,
    /// Go to the next candidate (migrates to immediate skip).
    TryNext,
    /// Stop (migrates to immediate stop).
    Stop,
}

impl LegacyAction {
    fn migrate(self) -> ClassPolicy {
        match self {
            LegacyAction::TryNext => ClassPolicy::immediate(Exhausted::Skip),
            LegacyAction::Stop => ClassPolicy::immediate(Exhausted::Stop),
            LegacyAction::RetrySame => ClassPolicy::retrying(
                RetryPolicy::new(
                    Limit::Count(1),
                    Backoff::doubling(Duration::from_secs(5), Duration::from_secs(5)),
                ),
                Exhausted::Stop,
            ),
        }
    }
}

/// The largest delay a document may name: a week.
const MAX_MS: u64 = 7 * 24 * 60 * 60 * 1000;

impl PolicyDocument {
    /// Parses a JSON document.
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            let field = message
                .split('`')
                .nth(1)
                .filter(|_| message.contains("field"))
                .unwrap_or("document")
                .to_owned();
            err(field, message)
        })
    }

    /// The policy this document describes, on top of `base` (the candidate's default for
    /// classes the document leaves out). `catalogue` assigns legacy per-code rules to classes.
    pub fn compile(&self, base: &Policy, catalogue: &Catalogue) -> Result<Policy, PolicyError> {
        let legacy = self.action.is_some() || self.rules.is_some();
        let classes = self.rate_limit.is_some() || self.transient.is_some() || self.hard.is_some();
        match (self.version, legacy) {
            (Some(VERSION), false) => {}
            (Some(v), false) => {
                return Err(err(
                    "version",
                    format!("unknown version {v}, expected {VERSION}"),
                ));
            }
            (Some(_), true) => {
                return Err(err(
                    "version",
                    "a versioned document has per-class pipelines, not `action` or `rules`",
                ));
            }
            (None, true) if classes => {
                return Err(err(
                    "action",
                    "a legacy document has `action` or `rules`, not per-class pipelines",
                ));
            }
            (None, true) => return self.migrate(base, catalogue),
            (None, false) => {
                return Err(err(
                    "version",
                    format!("missing: write \"version\": {VERSION}"),
                ));
            }
        }
        let mut policy = *base;
        for (name, slot, target) in [
            ("rate_limit", &self.rate_limit, &mut policy.rate_limit),
            ("transient", &self.transient, &mut policy.transient),
            ("hard", &self.hard, &mut policy.hard),
        ] {
            if let Some(class) = slot {
                *target = class.compile(name)?;
            }
        }
        Ok(policy)
    }

    fn migrate(&self, base: &Policy, catalogue: &Catalogue) -> Result<Policy, PolicyError> {
        if self.action.is_some() && self.rules.is_some() {
            return Err(err("rules", "give either `action` or `rules`, not both"));
        }
        if let Some(action) = self.action {
            let class = action.migrate();
            return Ok(Policy {
                rate_limit: class,
                transient: class,
                hard: class,
            });
        }
        let mut policy = *base;
        let mut chosen: BTreeMap<Class, (&str, LegacyAction)> = BTreeMap::new();
        for (code, action) in self.rules.iter().flatten() {
            let field = format!("rules.{code}");
            let class = catalogue.class_of(code).ok_or_else(|| {
                err(
                    &field,
                    format!(
                        "`{code}` is not a semantic code with a class in catalogue {}",
                        catalogue.version()
                    ),
                )
            })?;
            if class == Class::Terminal {
                return Err(err(
                    &field,
                    format!("`{code}` is terminal: rebound never retries or skips it"),
                ));
            }
            if let Some((other, previous)) = chosen.get(&class)
                && *previous != *action
            {
                return Err(err(
                    &field,
                    format!(
                        "`{other}` and `{code}` are both {class} but ask for different actions"
                    ),
                ));
            }
            chosen.insert(class, (code, *action));
        }
        for (class, (_, action)) in chosen {
            let target = match class {
                Class::RateLimit => &mut policy.rate_limit,
                Class::Transient => &mut policy.transient,
                _ => &mut policy.hard,
            };
            *target = action.migrate();
        }
        Ok(policy)
    }

    /// The version-1 document of `policy`.
    pub fn of(policy: &Policy) -> Self {
        PolicyDocument {
            version: Some(VERSION),
            rate_limit: Some(ClassDocument::of(&policy.rate_limit)),
            transient: Some(ClassDocument::of(&policy.transient)),
            hard: Some(ClassDocument::of(&policy.hard)),
            action: None,
            rules: None,
        }
    }
}

impl ClassDocument {
    fn compile(&self, at: &str) -> Result<ClassPolicy, PolicyError> {
        let reset_wait = match &self.reset_wait {
            None => None,
            Some(r) if r.max_ms == 0 || r.max_ms > MAX_MS => {
                return Err(err(
                    format!("{at}.reset_wait.max_ms"),
                    format!("must be in 1..={MAX_MS}"),
                ));
            }
            Some(r) => Some(ResetWait {
                max: Duration::from_millis(r.max_ms),
            }),
        };
        let retry = match &self.retry {
            None => None,
            Some(r) => {
                let limit = match &r.max {
                    MaxDocument::Count(0) => None,
                    MaxDocument::Count(n) => Some(Limit::Count(*n)),
                    MaxDocument::Word(w) if w == "infinite" => Some(Limit::Infinite),
                    MaxDocument::Word(w) => {
                        return Err(err(
                            format!("{at}.retry.max"),
                            format!("`{w}` is neither a count nor \"infinite\""),
                        ));
                    }
                };
                if r.initial_ms == 0 || r.cap_ms < r.initial_ms || r.cap_ms > MAX_MS {
                    return Err(err(
                        format!("{at}.retry.cap_ms"),
                        "needs 0 < initial_ms ≤ cap_ms ≤ a week",
                    ));
                }
                if !(0.0..=1.0).contains(&r.jitter) {
                    return Err(err(format!("{at}.retry.jitter"), "must be in [0, 1]"));
                }
                limit.map(|limit| {
                    RetryPolicy::new(
                        limit,
                        Backoff::doubling(
                            Duration::from_millis(r.initial_ms),
                            Duration::from_millis(r.cap_ms),
                        )
                        .with_jitter(r.jitter),
                    )
                })
            }
        };
        Ok(ClassPolicy {
            reset_wait,
            retry,
            exhausted: match self.exhausted {
                ExhaustedDocument::Skip => Exhausted::Skip,
                ExhaustedDocument::Stop => Exhausted::Stop,
            },
        })
    }

    fn of(policy: &ClassPolicy) -> Self {
        ClassDocument {
            reset_wait: policy.reset_wait.map(|r| ResetWaitDocument {
                max_ms: u64::try_from(r.max.as_millis()).unwrap_or(u64::MAX),
            }),
            retry: policy.retry.map(|r| RetryDocument {
                max: match r.limit {
                    Limit::Count(n) => MaxDocument::Count(n),
                    Limit::Infinite => MaxDocument::Word("infinite".into()),
                },
                initial_ms: u64::try_from(r.backoff.initial().as_millis()).unwrap_or(u64::MAX),
                cap_ms: u64::try_from(r.backoff.cap().as_millis()).unwrap_or(u64::MAX),
                jitter: r.backoff.jitter(),
            }),
            exhausted: match policy.exhausted {
                Exhausted::Skip => ExhaustedDocument::Skip,
                Exhausted::Stop => ExhaustedDocument::Stop,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use super::*;

    static CATALOGUE: LazyLock<Catalogue> = LazyLock::new(|| Catalogue::shipped().unwrap());

    fn compile(json: &str) -> Result<Policy, PolicyError> {
        PolicyDocument::from_json(json)?.compile(&Policy::immediate_skip(), &CATALOGUE)
    }

    #[test]
    fn a_version_1_document() {
        let p = compile(
            r#"{"version": 1,
                "rate_limit": {"reset_wait": {"max_ms": 600000},
                               "retry": {"max": 3, "initial_ms": 2000, "cap_ms": 30000, "jitter": 0.25},
                               "exhausted": "skip"},
                "transient": {"retry": {"max": "infinite", "initial_ms": 1000, "cap_ms": 8000}, "exhausted": "stop"}}"#,
        )
        .unwrap();
        assert_eq!(
            p.rate_limit.reset_wait,
            Some(ResetWait {
                max: Duration::from_secs(600)
            })
        );
        assert_eq!(p.rate_limit.retry.map(|r| r.limit), Some(Limit::Count(3)));
        assert_eq!(p.rate_limit.exhausted, Exhausted::Skip);
        assert_eq!(p.transient.retry.map(|r| r.limit), Some(Limit::Infinite));
        // Left out: the base (a new dynamic candidate's immediate skip, D3).
        assert_eq!(p.hard, ClassPolicy::immediate(Exhausted::Skip));
    }

    #[test]
    fn documents_round_trip() {
        for policy in [
            Policy::interactive(),
            Policy::immediate_skip(),
            Policy::interactive().with_infinite_retries(),
        ] {
            let json = serde_json::to_string(&PolicyDocument::of(&policy)).unwrap();
            assert_eq!(compile(&json).unwrap(), policy, "{json}");
        }
    }

    #[test]
    fn legacy_actions_migrate_as_d5_says() {
        let skip = compile(r#"{"action": "try_next"}"#).unwrap();
        assert_eq!(skip, Policy::immediate_skip());
        let stop = compile(r#"{"action": "stop"}"#).unwrap();
        assert_eq!(stop.transient, ClassPolicy::immediate(Exhausted::Stop));
        let retry = compile(r#"{"action": "retry_same"}"#).unwrap();
        let r = retry.rate_limit.retry.unwrap();
        assert_eq!(r.limit, Limit::Count(1));
        assert_eq!(
            r.delay(1, None, crate::backoff::Jitter::MAX),
            Duration::from_secs(5)
        );
        assert_eq!(retry.rate_limit.exhausted, Exhausted::Stop);
    }

    #[test]
    fn legacy_per_code_rules_map_to_their_class() {
        let p =
            compile(r#"{"rules": {"overloaded": "retry_same", "quota_exhausted": "try_next"}}"#)
                .unwrap();
        assert_eq!(p.transient.retry.map(|r| r.limit), Some(Limit::Count(1)));
        assert_eq!(p.hard, ClassPolicy::immediate(Exhausted::Skip));
        assert_eq!(
            p.rate_limit,
            ClassPolicy::immediate(Exhausted::Skip),
            "untouched class keeps the base"
        );
        // Two codes of one class that agree are fine.
        assert!(compile(r#"{"rules": {"overloaded": "stop", "bad_gateway": "stop"}}"#).is_ok());
    }

    #[test]
    fn conflicting_codes_of_one_class_name_both() {
        let e = compile(r#"{"rules": {"bad_gateway": "stop", "overloaded": "retry_same"}}"#)
            .unwrap_err();
        assert!(
            e.message.contains("`bad_gateway`") && e.message.contains("`overloaded`"),
            "{e}"
        );
        assert_eq!(e.field, "rules.overloaded");
    }

    #[test]
    fn invalid_documents_name_the_field() {
        for (json, field) in [
            (r#"{"version": 2}"#, "version"),
            (r#"{}"#, "version"),
            (r#"{"version": 1, "action": "stop"}"#, "version"),
            (r#"{"action": "stop", "rules": {}}"#, "rules"),
            (r#"{"rules": {"made_up": "stop"}}"#, "rules.made_up"),
            (
                r#"{"rules": {"context_overflow": "retry_same"}}"#,
                "rules.context_overflow",
            ),
            (
                r#"{"version": 1, "transient": {"retry": {"max": "lots", "initial_ms": 1, "cap_ms": 2}, "exhausted": "stop"}}"#,
                "transient.retry.max",
            ),
            (
                r#"{"version": 1, "transient": {"retry": {"max": 1, "initial_ms": 5, "cap_ms": 2}, "exhausted": "stop"}}"#,
                "transient.retry.cap_ms",
            ),
            (
                r#"{"version": 1, "hard": {"reset_wait": {"max_ms": 0}, "exhausted": "skip"}}"#,
                "hard.reset_wait.max_ms",
            ),
            (
                r#"{"version": 1, "hard": {"exhaustd": "skip"}}"#,
                "exhaustd",
            ),
        ] {
            let e = compile(json).unwrap_err();
            assert_eq!(e.field, field, "{json}: {e}");
        }
    }
}

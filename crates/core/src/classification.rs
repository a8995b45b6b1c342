//! What the catalogue says about a failure: code, class, confidence, scope, rule, hint (C1).

use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use crate::evidence::Phase;
use crate::hint::Hint;

/// What policy applies to a failure (C3). `Unclassified` is deliberately not a class: it is a
/// [`Verdict`] that always fails closed (C4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Short throttling: HTTP 429 and its equivalents.
    RateLimit,
    /// Network, timeout, interrupted stream, 5xx, overload, gateway faults.
    Transient,
    /// Quota, billing, credentials, provider configuration, unknown model: a long reset or a
    /// human is needed.
    Hard,
    /// Well-formed rejections that repetition cannot repair. Never retried by rebound.
    Terminal,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 4] = [
        Class::RateLimit,
        Class::Transient,
        Class::Hard,
        Class::Terminal,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::RateLimit => "rate_limit",
            Class::Transient => "transient",
            Class::Hard => "hard",
            Class::Terminal => "terminal",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Class> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The scope a failure of this class has when its rule does not say.
    pub fn default_scope(self) -> Scope {
        match self {
            Class::RateLimit | Class::Hard => Scope::Account,
            Class::Transient => Scope::Provider,
            Class::Terminal => Scope::Request,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How sure a rule is. `Low` is recorded for diagnosis but fails closed (C4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The evidence names the failure (an error code, a documented message).
    #[default]
    High,
    /// The evidence strongly suggests it (a status with a generic body).
    Medium,
    /// A guess. Never acted upon automatically.
    Low,
}

impl Confidence {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// What the failure affects, which tells a router how far to fall back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This request only (malformed, too long).
    Request,
    /// This connection (reset, stall).
    Connection,
    /// This model at this provider (capacity, unknown model).
    Model,
    /// The account or key (quota, credentials, billing, rate limits).
    Account,
    /// The provider as a whole (outage, overload, gateway fault).
    Provider,
}

impl Scope {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Request => "request",
            Scope::Connection => "connection",
            Scope::Model => "model",
            Scope::Account => "account",
            Scope::Provider => "provider",
        }
    }
}

/// A stable, fine-grained diagnosis (`rate_limited`, `overloaded`, `quota_exhausted` …).
/// Codes are declared in the catalogue's code tables, each with its class.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Code(Arc<str>);

impl Code {
    /// A code by name.
    pub fn new(name: &str) -> Self {
        Code(Arc::from(name))
    }

    /// Its name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Why evidence came out unclassified (C4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnclassifiedReason {
    /// No rule matched.
    NoRule,
    /// The best rule is only a guess.
    LowConfidence,
    /// The evidence belongs to another invocation or generation.
    Stale,
    /// Rules of equal priority disagree; both ids are kept.
    Conflict(Vec<String>),
    /// The matched code has no class assignment.
    NoClass,
}

impl UnclassifiedReason {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            UnclassifiedReason::NoRule => "no_rule",
            UnclassifiedReason::LowConfidence => "low_confidence",
            UnclassifiedReason::Stale => "stale",
            UnclassifiedReason::Conflict(_) => "conflict",
            UnclassifiedReason::NoClass => "no_class",
        }
    }
}

/// A class, or the fail-closed unclassified state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A class applies.
    Classified(Class),
    /// Nothing automatic may happen; a human decides.
    Unclassified(UnclassifiedReason),
}

impl Verdict {
    /// The class, if classified.
    pub fn class(&self) -> Option<Class> {
        match self {
            Verdict::Classified(class) => Some(*class),
            Verdict::Unclassified(_) => None,
        }
    }

    /// The wire name of the class, or `unclassified`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Classified(class) => class.as_str(),
            Verdict::Unclassified(_) => "unclassified",
        }
    }
}

/// The catalogue's answer for one piece of evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    /// Class or unclassified.
    pub verdict: Verdict,
    /// The semantic code of the winning rule, kept even when the verdict is unclassified
    /// (e.g. low confidence) so diagnostics can show what was guessed.
    pub code: Option<Code>,
    /// The winning rule's confidence.
    pub confidence: Confidence,
    /// What the failure affects.
    pub scope: Scope,
    /// The winning rule.
    pub rule_id: Option<Arc<str>>,
    /// The catalogue version that decided (C7).
    pub catalogue_version: Arc<str>,
    /// The validated server or body hint, uncapped (class caps apply in the policy).
    pub hint: Option<Hint>,
    /// The provider said `x-should-retry: false` (C5).
    pub retry_forbidden: bool,
    /// The phase of the evidence.
    pub phase: Phase,
    /// The HTTP status of the evidence, or the one its text embeds when it carries none (C8).
    pub status: Option<u16>,
}

impl Classification {
    /// The class, if classified.
    pub fn class(&self) -> Option<Class> {
        self.verdict.class()
    }
}

impl Serialize for Classification {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Classification", 12)?;
        st.serialize_field("code", &self.code)?;
        st.serialize_field("class", self.verdict.label())?;
        st.serialize_field("confidence", self.confidence.as_str())?;
        st.serialize_field("scope", self.scope.as_str())?;
        st.serialize_field("rule_id", &self.rule_id.as_deref())?;
        st.serialize_field("catalogue_version", &*self.catalogue_version)?;
        let hint_ms = self
            .hint
            .map(|h| u64::try_from(h.delay.as_millis()).unwrap_or(u64::MAX));
        st.serialize_field("hint_ms", &hint_ms)?;
        st.serialize_field("hint_source", &self.hint.map(|h| h.source.as_str()))?;
        st.serialize_field("retry_forbidden", &self.retry_forbidden)?;
        st.serialize_field("phase", self.phase.as_str())?;
        st.serialize_field("status", &self.status)?;
        match &self.verdict {
            Verdict::Unclassified(reason) => {
                st.serialize_field("unclassified_reason", reason.as_str())?;
                if let UnclassifiedReason::Conflict(ids) = reason {
                    st.serialize_field("conflicting_rules", ids)?;
                } else {
                    st.skip_field("conflicting_rules")?;
                }
            }
            Verdict::Classified(_) => {
                st.skip_field("unclassified_reason")?;
                st.skip_field("conflicting_rules")?;
            }
        }
        st.end()
    }
}

//! The rule file format, as written (see `docs/catalogue.md`). These types only describe the
//! text; [`super::compile`] turns them into a validated, compiled catalogue.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::classification::{Confidence, Scope};
use crate::evidence::Phase;

/// The `[catalogue]` table: only the shipped manifest carries it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManifestFile {
    /// The catalogue version recorded with every attempt (C7).
    pub(crate) version: String,
}

/// One `[codes.NAME]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CodeFile {
    /// The class of every failure with this code.
    pub(crate) class: Option<String>,
    /// What the code means, for people.
    #[serde(default)]
    #[expect(dead_code, reason = "documentation for readers of the rule files")]
    pub(crate) description: Option<String>,
}

/// A status matcher item: `429`, `"5xx"`, `"520-524"` or `"none"` (evidence without a status,
/// neither given nor embedded in its text).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum StatusFile {
    /// One status.
    One(u16),
    /// A range or class, as text.
    Text(String),
}

/// `phase = "setup" | "stream" | "any"`.
#[derive(Debug, Default, Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PhaseFile {
    /// Either phase.
    #[default]
    Any,
    /// Setup only.
    Setup,
    /// Stream only.
    Stream,
}

impl PhaseFile {
    pub(crate) fn phase(self) -> Option<Phase> {
        match self {
            PhaseFile::Any => None,
            PhaseFile::Setup => Some(Phase::Setup),
            PhaseFile::Stream => Some(Phase::Stream),
        }
    }
}

/// One `[[rule.hint]]` extractor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HintFile {
    /// `body` (default) or `header:NAME`.
    #[serde(default)]
    pub(crate) from: Option<String>,
    /// A regex with exactly one value group: `seconds`, `ms`, `minutes`, `duration`, `at`,
    /// `epoch` or `clock` (with an optional `tz` group).
    pub(crate) pattern: String,
}

/// One `[[rule]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleFile {
    /// Stable id, unique across all loaded files.
    pub(crate) id: String,
    /// Higher wins. Equal priorities that disagree make the evidence unclassified.
    pub(crate) priority: i32,
    /// Provider names the rule applies to; any provider when absent.
    #[serde(default)]
    pub(crate) provider: Vec<String>,
    /// Statuses the rule applies to.
    #[serde(default)]
    pub(crate) status: Vec<StatusFile>,
    /// The phase the rule applies to.
    #[serde(default)]
    pub(crate) phase: PhaseFile,
    /// Transport failure kinds the rule applies to.
    #[serde(default)]
    pub(crate) transport: Vec<String>,
    /// In-stream error event types the rule applies to.
    #[serde(default)]
    pub(crate) sse_event: Vec<String>,
    /// Header name → regex over its value; every one must match.
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    /// Regex over the bounded body or message text.
    #[serde(default)]
    pub(crate) body: Option<String>,
    /// The semantic code this rule assigns.
    pub(crate) code: String,
    /// Optional restatement of the code's class; must agree with the code table.
    #[serde(default)]
    pub(crate) class: Option<String>,
    /// How sure the rule is.
    #[serde(default)]
    pub(crate) confidence: Confidence,
    /// What the failure affects; defaults by class.
    #[serde(default)]
    pub(crate) scope: Option<Scope>,
    /// Timing hint extractors, tried in order.
    #[serde(default)]
    pub(crate) hint: Vec<HintFile>,
    /// Free text for readers.
    #[serde(default)]
    #[expect(dead_code, reason = "documentation for readers of the rule files")]
    pub(crate) note: Option<String>,
}

/// One `[[text_status]]` entry: where free text embeds the HTTP status it came with (C8).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextStatusFile {
    /// A regex with a `status` group capturing three digits (`Error code: (?P<status>\d{3})`).
    pub(crate) pattern: String,
    /// Free text for readers.
    #[serde(default)]
    #[expect(dead_code, reason = "documentation for readers of the rule file")]
    pub(crate) note: Option<String>,
}

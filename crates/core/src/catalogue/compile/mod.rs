//! Rule files → a validated, compiled catalogue. Every error names the file, the rule id and
//! the field, on one line. One rule's fields are checked and compiled in `rule`.

mod rule;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use super::file::{CodeFile, ManifestFile, RuleFile, TextStatusFile};
use super::matcher::{BuildError, Matcher};
use super::{Catalogue, HeaderSlot, HintFrom, Rule};
use crate::classification::{Class, Code};
use crate::toml_refusal::{named_field, one_line, syntax};
use rule::{compile_rule, extractor};

/// The compiled size bound of one regex or of one matcher's automaton.
const REGEX_SIZE_LIMIT: usize = 32 << 20;

/// One rule file's text and the name errors should use for it.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file name shown in errors (`rules/openai.toml`, a user's path).
    pub name: String,
    /// Its TOML text.
    pub text: String,
}

impl Source {
    /// A named source.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Source {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// A rule file that cannot be loaded. Nothing of a catalogue with an error is used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct CatalogueError {
    /// The file.
    pub file: String,
    /// The rule id (or `#N` for a rule without a usable id), when the error is in a rule.
    pub rule: Option<String>,
    /// The field, when one is to blame.
    pub field: Option<String>,
    /// What is wrong, on one line.
    pub message: String,
}

impl fmt::Display for CatalogueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(rule) = &self.rule {
            write!(f, ": rule `{rule}`")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

struct Ctx<'a> {
    file: &'a str,
    rule: Option<String>,
}

impl Ctx<'_> {
    fn err(&self, field: Option<&str>, message: impl fmt::Display) -> CatalogueError {
        CatalogueError {
            file: self.file.to_owned(),
            rule: self.rule.clone(),
            field: field.map(str::to_owned),
            message: one_line(&message.to_string()),
        }
    }
}

fn is_identifier(name: &str, extra: &[char]) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || extra.contains(&c))
}

pub(super) fn compile(base: &[Source], user: &[Source]) -> Result<Catalogue, CatalogueError> {
    let mut tables = Vec::new();
    for (source, is_user) in base
        .iter()
        .map(|s| (s, false))
        .chain(user.iter().map(|s| (s, true)))
    {
        let ctx = Ctx {
            file: &source.name,
            rule: None,
        };
        let table: toml::Table = source
            .text
            .parse()
            .map_err(|e: toml::de::Error| ctx.err(None, syntax(&source.text, &e)))?;
        for key in table.keys() {
            if !matches!(key.as_str(), "catalogue" | "codes" | "rule" | "text_status") {
                return Err(ctx.err(
                    Some(key),
                    "unknown top-level table, expected `catalogue`, `codes`, `rule` or `text_status`",
                ));
            }
        }
        tables.push((source, is_user, table));
    }

    // Pass 1: the version and the code tables of every file, so rules may use codes declared
    // in any file.
    let mut version: Option<String> = None;
    let mut codes: BTreeMap<Code, Option<Class>> = BTreeMap::new();
    let mut code_files: HashMap<Code, &str> = HashMap::new();
    for (source, is_user, table) in &tables {
        let ctx = Ctx {
            file: &source.name,
            rule: None,
        };
        if let Some(value) = table.get("catalogue") {
            if *is_user {
                return Err(ctx.err(
                    Some("catalogue"),
                    "only the shipped catalogue declares a version; user rule files are versioned by their content",
                ));
            }
            let manifest = ManifestFile::deserialize(value.clone()).map_err(|e| {
                ctx.err(
                    named_field(e.message()).as_deref().or(Some("catalogue")),
                    e.message(),
                )
            })?;
            if version.is_some() {
                return Err(ctx.err(Some("catalogue.version"), "the version is declared twice"));
            }
            if manifest.version.trim().is_empty() {
                return Err(ctx.err(Some("catalogue.version"), "the version is empty"));
            }
            version = Some(manifest.version);
        }
        let Some(code_table) = table.get("codes") else {
            continue;
        };
        let code_table = code_table
            .as_table()
            .ok_or_else(|| ctx.err(Some("codes"), "expected a table of codes"))?;
        for (name, value) in code_table {
            let field = format!("codes.{name}");
            if !is_identifier(name, &[]) {
                return Err(ctx.err(Some(&field), "a code is lower-case letters, digits and `_`"));
            }
            let entry = CodeFile::deserialize(value.clone()).map_err(|e| {
                let inner = named_field(e.message()).map(|f| format!("{field}.{f}"));
                ctx.err(inner.as_deref().or(Some(&field)), e.message())
            })?;
            let class = match entry.class.as_deref() {
                None => None,
                Some(class) => Some(Class::parse(class).ok_or_else(|| {
                    ctx.err(
                        Some(&format!("{field}.class")),
                        format!("unknown class `{class}`, expected rate_limit, transient, hard or terminal"),
                    )
                })?),
            };
            let code = Code::new(name);
            if let Some(first) = code_files.get(&code) {
                return Err(ctx.err(Some(&field), format!("code already declared in {first}")));
            }
            code_files.insert(code.clone(), &source.name);
            codes.insert(code, class);
        }
    }
    let version = version.ok_or_else(|| CatalogueError {
        file: base
            .first()
            .map_or_else(|| "catalogue".to_owned(), |s| s.name.clone()),
        rule: None,
        field: Some("catalogue.version".to_owned()),
        message: "no catalogue version declared".to_owned(),
    })?;
    let version = if user.is_empty() {
        version
    } else {
        format!("{version}+user.{:08x}", content_hash(user))
    };

    // Pass 2: the rules.
    let mut drafts = Vec::new();
    let mut ids: HashMap<String, String> = HashMap::new();
    for (source, _, table) in &tables {
        let Some(rules) = table.get("rule") else {
            continue;
        };
        let file_ctx = Ctx {
            file: &source.name,
            rule: None,
        };
        let rules = rules
            .as_array()
            .ok_or_else(|| file_ctx.err(Some("rule"), "expected an array of tables: [[rule]]"))?;
        for (index, value) in rules.iter().enumerate() {
            let id = value
                .get("id")
                .and_then(toml::Value::as_str)
                .map_or_else(|| format!("#{}", index + 1), str::to_owned);
            let ctx = Ctx {
                file: &source.name,
                rule: Some(id.clone()),
            };
            let file = RuleFile::deserialize(value.clone())
                .map_err(|e| ctx.err(named_field(e.message()).as_deref(), e.message()))?;
            if let Some(first) = ids.insert(file.id.clone(), source.name.clone()) {
                return Err(ctx.err(
                    Some("id"),
                    format!("duplicate rule id, first declared in {first}"),
                ));
            }
            drafts.push(compile_rule(&ctx, file, &codes)?);
        }
    }

    // Pass 3: where free text embeds its status (C8).
    let mut text_status_patterns = Vec::new();
    let mut text_status = Vec::new();
    let mut text_status_files = Vec::new();
    for (source, _, table) in &tables {
        let Some(entries) = table.get("text_status") else {
            continue;
        };
        let ctx = Ctx {
            file: &source.name,
            rule: None,
        };
        let entries = entries.as_array().ok_or_else(|| {
            ctx.err(
                Some("text_status"),
                "expected an array of tables: [[text_status]]",
            )
        })?;
        for (index, value) in entries.iter().enumerate() {
            let field = format!("text_status[{}].pattern", index + 1);
            let entry = TextStatusFile::deserialize(value.clone())
                .map_err(|e| ctx.err(Some(&field), e.message()))?;
            let compiled = extractor(&ctx, &field, &entry.pattern)?;
            if !compiled.capture_names().any(|n| n == Some("status")) {
                return Err(ctx.err(Some(&field), "needs a `status` capture group"));
            }
            text_status_patterns.push(entry.pattern);
            text_status_files.push(source.name.clone());
            text_status.push(compiled);
        }
    }

    // Pass 4: one matcher over bodies (the rules' patterns, then the text-status patterns, so
    // one walk of a text answers both), one per header name.
    let mut body_patterns = Vec::new();
    let mut header_patterns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // The file and rule each pattern came from, to name them in a compile error.
    let mut body_owners: Vec<(String, String)> = Vec::new();
    let mut header_owners: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut staged = Vec::with_capacity(drafts.len());
    for draft in drafts {
        let mut rule = draft.rule;
        if let Some(body) = draft.body {
            rule.body = Some(body_patterns.len());
            body_patterns.push(body);
            body_owners.push((draft.file.clone(), rule.id.to_string()));
        }
        let named: Vec<(String, usize)> = draft
            .headers
            .into_iter()
            .map(|(name, pattern)| {
                let patterns = header_patterns.entry(name.clone()).or_default();
                patterns.push(pattern);
                header_owners
                    .entry(name.clone())
                    .or_default()
                    .push((draft.file.clone(), rule.id.to_string()));
                (name, patterns.len() - 1)
            })
            .collect();
        staged.push((rule, named));
    }
    // A pattern is checked alone only for its syntax (`matcher`); its compiled size is known
    // when the matcher compiles it, and an error then names the rule it came from.
    let set_err = |what: &str, owners: &[(String, String)], e: BuildError| match e
        .pattern
        .and_then(|i| owners.get(i))
    {
        Some((file, rule)) => CatalogueError {
            file: file.clone(),
            rule: Some(rule.clone()),
            field: Some(what.to_owned()),
            message: one_line(&format!("invalid regex: {}", e.message)),
        },
        None => CatalogueError {
            file: "catalogue".to_owned(),
            rule: None,
            field: Some(what.to_owned()),
            message: one_line(&format!(
                "the combined patterns do not compile: {}",
                e.message
            )),
        },
    };
    let text_status_base = body_patterns.len();
    body_patterns.extend(text_status_patterns);
    let body_set = Matcher::new(&body_patterns, REGEX_SIZE_LIMIT).map_err(|e| {
        match e.pattern.and_then(|i| i.checked_sub(text_status_base)) {
            Some(entry) => CatalogueError {
                file: text_status_files.get(entry).cloned().unwrap_or_default(),
                rule: None,
                field: Some("text_status".to_owned()),
                message: one_line(&format!("invalid regex: {}", e.message)),
            },
            None => set_err("body", &body_owners, e),
        }
    })?;
    let mut header_slots = Vec::new();
    let mut slot_of: HashMap<String, usize> = HashMap::new();
    for (name, patterns) in header_patterns {
        let owners = header_owners.get(&name).map_or(&[][..], Vec::as_slice);
        let set = Matcher::new(&patterns, REGEX_SIZE_LIMIT)
            .map_err(|e| set_err(&format!("headers.{name}"), owners, e))?;
        slot_of.insert(name.clone(), header_slots.len());
        header_slots.push(HeaderSlot { name, set });
    }
    let mut rules: Vec<Rule> = staged
        .into_iter()
        .map(|(mut rule, named)| {
            rule.headers = named
                .into_iter()
                .map(|(name, index)| (slot_of[&name], index))
                .collect();
            rule
        })
        .collect();
    // Highest priority first; equal priorities keep file order.
    rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
    let needs_body = !text_status.is_empty()
        || rules
            .iter()
            .any(|r| r.body.is_some() || r.hints.iter().any(|h| matches!(h.from, HintFrom::Body)));

    let (rule_of_pattern, bodiless) = Catalogue::index(&rules, text_status_base);
    Ok(Catalogue {
        version: Arc::from(version),
        rules,
        rule_of_pattern,
        bodiless,
        body_set,
        needs_body,
        text_status,
        text_status_base,
        header_slots,
        codes,
    })
}

/// FNV-1a over the user sources' names and texts: a stable, dependency-free content id.
fn content_hash(sources: &[Source]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for source in sources {
        for byte in source
            .name
            .bytes()
            .chain([0])
            .chain(source.text.bytes())
            .chain([0])
        {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash
}

//! One `[[rule]]` entry → a [`Draft`]: its fields checked, its status items, hints and
//! pattern syntax compiled; its body and header patterns wait for the matchers (`super`).

use std::collections::{BTreeMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::Arc;

use regex::{Regex, RegexBuilder};

use super::{CatalogueError, Ctx, REGEX_SIZE_LIMIT, is_identifier};
use crate::catalogue::file::{HintFile, RuleFile, StatusFile};
use crate::catalogue::{HintExtractor, HintFrom, Rule};
use crate::classification::{Class, Code};
use crate::evidence::TransportKind;
use crate::hint::HintFormat;

/// A rule as parsed, before the matchers exist.
pub(super) struct Draft {
    /// The file the rule is in, for errors found once its patterns are compiled together.
    pub(super) file: String,
    pub(super) rule: Rule,
    pub(super) body: Option<String>,
    pub(super) headers: Vec<(String, String)>,
}

fn regex(ctx: &Ctx<'_>, field: &str, pattern: &str) -> Result<Regex, CatalogueError> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ctx.err(Some(field), format!("invalid regex: {e}")))
}

/// A pattern that captures from text its matcher has already matched: built as the matchers are
/// (bytes, ASCII classes), so that whatever the matcher finds, the captures find.
pub(super) fn extractor(
    ctx: &Ctx<'_>,
    field: &str,
    pattern: &str,
) -> Result<regex::bytes::Regex, CatalogueError> {
    regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ctx.err(Some(field), format!("invalid regex: {e}")))
}

/// Checks one matcher pattern's syntax alone, so an error names its rule and field; its size is
/// checked when its matcher compiles it.
fn matcher(ctx: &Ctx<'_>, field: &str, pattern: &str) -> Result<(), CatalogueError> {
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .map(drop)
        .map_err(|e| ctx.err(Some(field), format!("invalid regex: {e}")))
}

pub(super) fn compile_rule(
    ctx: &Ctx<'_>,
    file: RuleFile,
    codes: &BTreeMap<Code, Option<Class>>,
) -> Result<Draft, CatalogueError> {
    if !is_identifier(&file.id, &['.', '-']) {
        return Err(ctx.err(
            Some("id"),
            "a rule id is lower-case letters, digits, `_`, `.` and `-`",
        ));
    }
    let status = file
        .status
        .iter()
        .map(|item| {
            status_range(item).ok_or_else(|| {
                ctx.err(
                    Some("status"),
                    format!(
                        "`{}` is not a status, a range like \"520-524\", a class like \"5xx\" or \"none\"",
                        status_text(item)
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let transport = file
        .transport
        .iter()
        .map(|name| {
            TransportKind::parse(name).ok_or_else(|| {
                let known: Vec<_> = TransportKind::ALL.iter().map(|k| k.as_str()).collect();
                ctx.err(
                    Some("transport"),
                    format!(
                        "unknown transport kind `{name}`, expected one of {}",
                        known.join(", ")
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut headers = Vec::new();
    for (name, pattern) in &file.headers {
        let field = format!("headers.{name}");
        // A pseudo-header (AWS event-stream `:exception-type`, HTTP/2 `:status`) keeps its ':'.
        let token = name.strip_prefix(':').unwrap_or(name);
        if token.is_empty()
            || token
                .bytes()
                .any(|b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        {
            return Err(ctx.err(Some(&field), "not a header name"));
        }
        matcher(ctx, &field, pattern)?;
        headers.push((name.to_ascii_lowercase(), pattern.clone()));
    }
    if let Some(body) = &file.body {
        matcher(ctx, "body", body)?;
    }
    let has_matcher = !status.is_empty()
        || !transport.is_empty()
        || !file.sse_event.is_empty()
        || !headers.is_empty()
        || file.body.is_some();
    if !has_matcher {
        return Err(ctx.err(
            None,
            "a rule needs at least one of `status`, `transport`, `sse_event`, `headers` or `body`",
        ));
    }
    let code = Code::new(&file.code);
    let class = match codes.get(&code) {
        Some(class) => *class,
        None => {
            return Err(ctx.err(
                Some("code"),
                format!(
                    "code `{}` has no class: declare it under [codes.{}] with a class",
                    file.code, file.code
                ),
            ));
        }
    };
    if let Some(stated) = &file.class {
        let stated_class = Class::parse(stated).ok_or_else(|| {
            ctx.err(
                Some("class"),
                format!(
                    "unknown class `{stated}`, expected rate_limit, transient, hard or terminal"
                ),
            )
        })?;
        if Some(stated_class) != class {
            let declared = class.map_or("no class", Class::as_str);
            return Err(ctx.err(
                Some("class"),
                format!(
                    "says `{stated}` but code `{}` is declared as {declared}",
                    file.code
                ),
            ));
        }
    }
    let hints = file
        .hint
        .iter()
        .enumerate()
        .map(|(i, hint)| compile_hint(ctx, i, hint))
        .collect::<Result<Vec<_>, _>>()?;
    let scope = file.scope.unwrap_or_else(|| {
        class.map_or(crate::classification::Scope::Request, Class::default_scope)
    });
    Ok(Draft {
        file: ctx.file.to_owned(),
        rule: Rule {
            id: Arc::from(file.id.as_str()),
            priority: file.priority,
            providers: file
                .provider
                .iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
            status,
            phase: file.phase.phase(),
            transport,
            sse_event: file.sse_event.clone(),
            headers: Vec::new(),
            body: None,
            code,
            class,
            confidence: file.confidence,
            scope,
            hints,
        },
        body: file.body,
        headers,
    })
}

fn compile_hint(
    ctx: &Ctx<'_>,
    index: usize,
    hint: &HintFile,
) -> Result<HintExtractor, CatalogueError> {
    let field = format!("hint[{index}]");
    let from = match hint.from.as_deref() {
        None | Some("body") => HintFrom::Body,
        Some(other) => match other.strip_prefix("header:") {
            Some(name) if !name.is_empty() => HintFrom::Header(name.to_ascii_lowercase()),
            _ => {
                return Err(ctx.err(
                    Some(&format!("{field}.from")),
                    format!("`{other}` is neither `body` nor `header:NAME`"),
                ));
            }
        },
    };
    let pattern_field = format!("{field}.pattern");
    let regex = regex(ctx, &pattern_field, &hint.pattern)?;
    let names: HashSet<&str> = regex.capture_names().flatten().collect();
    let formats: Vec<HintFormat> = HintFormat::GROUPS
        .iter()
        .filter(|(group, _)| names.contains(group))
        .map(|(_, format)| *format)
        .collect();
    let [format] = formats[..] else {
        return Err(ctx.err(
            Some(&pattern_field),
            "needs exactly one value group: (?P<seconds>…), (?P<ms>…), (?P<minutes>…), (?P<duration>…), (?P<at>…), (?P<epoch>…), (?P<clock>…) or (?P<words>…)",
        ));
    };
    if names.contains("tz") && format != HintFormat::Clock {
        return Err(ctx.err(
            Some(&pattern_field),
            "a (?P<tz>…) group only goes with (?P<clock>…)",
        ));
    }
    Ok(HintExtractor {
        from,
        regex,
        format,
    })
}

fn status_text(item: &StatusFile) -> String {
    match item {
        StatusFile::One(n) => n.to_string(),
        StatusFile::Text(t) => t.clone(),
    }
}

fn status_range(item: &StatusFile) -> Option<RangeInclusive<u16>> {
    let valid = |n: u16| (100..=599).contains(&n);
    match item {
        StatusFile::One(n) => valid(*n).then_some(*n..=*n),
        StatusFile::Text(text) => {
            let text = text.trim();
            if text == "none" {
                return Some(crate::catalogue::NO_STATUS..=crate::catalogue::NO_STATUS);
            }
            if let Some(prefix) = text.strip_suffix("xx") {
                let digit: u16 = prefix.parse().ok()?;
                return (1..=5)
                    .contains(&digit)
                    .then(|| digit * 100..=digit * 100 + 99);
            }
            let (lo, hi) = text.split_once('-')?;
            let (lo, hi): (u16, u16) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
            (valid(lo) && valid(hi) && lo <= hi).then_some(lo..=hi)
        }
    }
}

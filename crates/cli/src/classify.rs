//! `rebound classify`: evidence in (flags, evidence JSON or free text on stdin), the
//! catalogue's verdict out.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use clap::Args;
use rebound_core::backoff::Jitter;
use rebound_core::policy::DEFAULT_RETRIES;
use rebound_core::status::error_excerpt;
use rebound_core::{
    Caller, Catalogue, Class, Classification, Evidence, Phase, Policy, Source, TransportKind,
    Verdict,
};
use serde_json::{Value, json};

use crate::bad_input;

/// The most standard input or a body file may hold. Evidence is read only up to a few KiB;
/// this bound keeps a mistaken pipe from filling memory.
const INPUT_LIMIT: u64 = 16 << 20;

/// How much of the evidence the human-readable output shows.
const SHOWN_EXCERPT: usize = 200;

#[derive(Args, Debug)]
pub(crate) struct ClassifyArgs {
    /// HTTP status of the failed response.
    #[arg(long, value_name = "CODE")]
    status: Option<u16>,
    /// A response header, as 'name: value'. Repeat for more. Pseudo-header names of AWS
    /// event-stream frames (':exception-type: ThrottlingException') are accepted.
    #[arg(long = "header", value_name = "'NAME: VALUE'")]
    headers: Vec<String>,
    /// The response body or error message.
    #[arg(long, value_name = "TEXT", conflicts_with = "body_file")]
    body: Option<String>,
    /// Read the body from a file ('-' reads it from standard input, e.g. a raw JSON body).
    #[arg(long, value_name = "PATH")]
    body_file: Option<PathBuf>,
    /// The provider (openai, anthropic, gemini, azure, bedrock, openrouter, relay …).
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// When the failure happened: setup (before the first content) or stream.
    #[arg(long, value_name = "PHASE", value_parser = ["setup", "stream"])]
    phase: Option<String>,
    /// A transport failure: connection_refused, connection_reset, dns, tls, connect_timeout,
    /// timeout, idle_timeout, body_decode, truncated.
    #[arg(long, value_name = "KIND")]
    transport: Option<String>,
    /// The error type of an in-stream error event (e.g. overloaded_error).
    #[arg(long, value_name = "TYPE")]
    sse_event: Option<String>,
    /// The number of the attempt that failed (1 = the first); prints the wait before the
    /// retry under the default interactive policy.
    #[arg(long, value_name = "N")]
    attempt: Option<u32>,
    /// Fix the random draw of the jitter, in [0, 1] (default: random).
    #[arg(long, value_name = "R", requires = "attempt")]
    jitter: Option<f64>,
    /// A folder of user rule files (*.toml) to add to the shipped catalogue.
    #[arg(long, value_name = "DIR")]
    catalogue: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Classify many: standard input holds one evidence JSON document per line (a log of
    /// failures, or the examples a rule file should match); one JSON verdict is printed per
    /// line, in order. Blank lines are skipped.
    #[arg(long, conflicts_with_all = [
        "status", "headers", "body", "body_file", "provider", "phase", "transport",
        "sse_event", "attempt",
    ])]
    batch: bool,
}

impl ClassifyArgs {
    fn has_evidence_flags(&self) -> bool {
        self.status.is_some()
            || !self.headers.is_empty()
            || self.body.is_some()
            || self.body_file.is_some()
            || self.transport.is_some()
            || self.sse_event.is_some()
    }
}

pub(crate) fn run(args: ClassifyArgs) -> Result<()> {
    let draw = match args.jitter {
        Some(r) if (0.0..=1.0).contains(&r) => Jitter::new(r),
        Some(r) => return Err(bad_input(format!("--jitter {r} is outside [0, 1]"))),
        None => Jitter::new(fastrand::f64()),
    };
    if args.attempt == Some(0) {
        return Err(bad_input("--attempt counts from 1 (the first attempt)"));
    }
    let catalogue = load_catalogue(args.catalogue.as_deref())?;
    if args.batch {
        return run_batch(&catalogue);
    }
    let evidence = if args.has_evidence_flags() {
        evidence_from_flags(&args)?
    } else {
        evidence_from_stdin(args.provider.as_deref(), args.phase.as_deref())?
    };
    let now = SystemTime::now();
    let classification = catalogue.classify(&evidence, now);
    let delay = args.attempt.map(|attempt| {
        Policy::interactive().retry_delay(&classification, Caller::Session, attempt, draw)
    });
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut report = json_report(&classification, &evidence)?;
        if let (Value::Object(map), Some(attempt), Some(delay)) = (&mut report, args.attempt, delay)
        {
            map.insert("attempt".into(), json!(attempt));
            map.insert(
                "delay_ms".into(),
                json!(delay.map(|d| d.as_millis() as u64)),
            );
        }
        writeln!(out, "{report}")?;
    } else {
        write_human(
            &mut out,
            &classification,
            &evidence,
            args.attempt.zip(delay),
        )?;
    }
    out.flush()?;
    Ok(())
}

/// The `--json` verdict: the classification, the hint as capped, and the evidence excerpt.
fn json_report(classification: &Classification, evidence: &Evidence) -> Result<Value> {
    let mut report = serde_json::to_value(classification)?;
    if let Value::Object(map) = &mut report {
        if let Some(capped) = capped_hint(classification) {
            map.insert("hint_capped_ms".into(), json!(capped.as_millis() as u64));
        }
        map.insert("evidence_excerpt".into(), json!(error_excerpt(evidence)));
    }
    Ok(report)
}

/// `--batch`: one evidence document per line of standard input, one verdict per line out. A
/// line that is no evidence document stops the run with its line number; the verdicts printed
/// before it stand.
fn run_batch(catalogue: &Catalogue) -> Result<()> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(bad_input(
            "--batch reads evidence JSON documents from stdin, one per line",
        ));
    }
    let (mut input, mut out) = (stdin.lock(), std::io::stdout().lock());
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let read = (&mut input)
            .take(INPUT_LIMIT + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| bad_input(format!("stdin line {number}: {e}")))?;
        if read == 0 {
            break;
        }
        if line.len() as u64 > INPUT_LIMIT {
            return Err(bad_input(format!(
                "stdin line {number}: longer than {} MiB",
                INPUT_LIMIT >> 20
            )));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let evidence = evidence_from_json(&line, &format!("stdin line {number}"))?;
        let classification = catalogue.classify(&evidence, SystemTime::now());
        writeln!(out, "{}", json_report(&classification, &evidence)?)?;
    }
    out.flush()?;
    Ok(())
}

pub(crate) fn load_catalogue(dir: Option<&Path>) -> Result<Catalogue> {
    let Some(dir) = dir else {
        return Catalogue::shipped().context("the shipped catalogue does not compile");
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|e| bad_input(format!("--catalogue {}: {e}", dir.display())))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| bad_input(format!("--catalogue {}: {e}", dir.display())))?
            .path();
        if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(bad_input(format!(
            "--catalogue {}: no *.toml rule files in it",
            dir.display()
        )));
    }
    paths.sort();
    let mut sources = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
        sources.push(Source::new(path.display().to_string(), text));
    }
    Catalogue::with_user_rules(&sources).map_err(|e| bad_input(e.to_string()))
}

fn evidence_from_flags(args: &ClassifyArgs) -> Result<Evidence> {
    let mut evidence = Evidence {
        provider: args.provider.as_deref().map(str::to_ascii_lowercase),
        phase: match args.phase.as_deref() {
            Some("stream") => Phase::Stream,
            _ => Phase::Setup,
        },
        status: args.status,
        sse_event: args.sse_event.clone(),
        ..Evidence::default()
    };
    if let Some(status) = args.status
        && !(100..=599).contains(&status)
    {
        return Err(bad_input(format!(
            "--status {status} is not an HTTP status (100-599)"
        )));
    }
    for (index, header) in args.headers.iter().enumerate() {
        let (name, value) = split_header(header).map_err(|problem| {
            // Never echo the value: it may be a credential.
            bad_input(format!("--header #{}: {problem}", index + 1))
        })?;
        evidence.headers.insert(name, value);
    }
    if let Some(kind) = &args.transport {
        evidence.transport = Some(TransportKind::parse(kind).ok_or_else(|| {
            let known: Vec<_> = TransportKind::ALL.iter().map(|k| k.as_str()).collect();
            bad_input(format!(
                "--transport {kind}: unknown kind, expected one of {}",
                known.join(", ")
            ))
        })?);
    }
    evidence.body = match (&args.body, &args.body_file) {
        (Some(body), _) => Some(body.clone()),
        (None, Some(path)) if path.as_os_str() == "-" => Some(read_stdin_text()?),
        (None, Some(path)) => Some(read_body_file(path)?),
        (None, None) => None,
    };
    Ok(evidence)
}

/// A serde message without the offending value ("invalid type: string \"…\", expected u16"
/// becomes "invalid type, expected u16"): the value may be a credential in the wrong place.
fn without_values(message: &str) -> String {
    if let Some(start) = message.find("unknown variant `")
        && let Some(len) = message[start..].find(", expected")
    {
        return format!(
            "{}unknown variant{}",
            &message[..start],
            &message[start + len..]
        );
    }
    for kind in ["invalid type: ", "invalid value: "] {
        if let Some(start) = message.find(kind)
            && let Some(len) = message[start..].find(", expected")
        {
            return format!(
                "{}{}{}",
                &message[..start],
                kind.trim_end_matches([':', ' ']),
                &message[start + len..]
            );
        }
    }
    message.to_owned()
}

/// Splits 'name: value'. A name is an HTTP token, optionally after one ':' as the pseudo-headers
/// of AWS event-stream frames and HTTP/2 carry (':exception-type', ':status').
fn split_header(header: &str) -> Result<(&str, &str), &'static str> {
    let header = header.trim_start();
    let pseudo = usize::from(header.starts_with(':'));
    let Some(colon) = header[pseudo..].find(':') else {
        return Err("expected 'name: value'");
    };
    let (name, value) = header.split_at(pseudo + colon);
    let name = name.trim_end();
    let token = &name[pseudo..];
    if token.is_empty() || !token.bytes().all(is_token_byte) {
        return Err("the name is not a valid header name");
    }
    Ok((name, &value[1..]))
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn read_body_file(path: &Path) -> Result<String> {
    let file = std::fs::File::open(path)
        .map_err(|e| bad_input(format!("--body-file {}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(INPUT_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad_input(format!("--body-file {}: {e}", path.display())))?;
    if bytes.len() as u64 > INPUT_LIMIT {
        return Err(bad_input(format!(
            "--body-file {}: larger than {} MiB",
            path.display(),
            INPUT_LIMIT >> 20
        )));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Standard input as text, bounded by [`INPUT_LIMIT`].
fn read_stdin_text() -> Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(bad_input(
            "no evidence: give --status, --header, --body, --transport or --sse-event, or pipe evidence JSON or an error text on stdin",
        ));
    }
    let mut bytes = Vec::new();
    stdin
        .lock()
        .take(INPUT_LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad_input(format!("stdin: {e}")))?;
    if bytes.len() as u64 > INPUT_LIMIT {
        return Err(bad_input(format!(
            "stdin: larger than {} MiB",
            INPUT_LIMIT >> 20
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(bad_input(
            "no evidence: stdin is empty; give flags or pipe evidence JSON or an error text",
        ));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Evidence from standard input: a JSON object is an evidence document (strict: unknown fields
/// are refused); anything else is free text with no status (an SDK exception, an agent CLI's
/// line, a runtime's network error), described by `--provider` and `--phase` when given. A raw
/// JSON body without a status is read with `--body-file -`.
fn evidence_from_stdin(provider: Option<&str>, phase: Option<&str>) -> Result<Evidence> {
    let text = read_stdin_text()?;
    if !text.trim_start().starts_with('{') {
        return Ok(Evidence {
            provider: provider.map(str::to_ascii_lowercase),
            phase: match phase {
                Some("stream") => Phase::Stream,
                _ => Phase::Setup,
            },
            body: Some(text),
            ..Evidence::default()
        });
    }
    if provider.is_some() || phase.is_some() {
        return Err(bad_input(
            "--provider and --phase describe flag or text evidence: an evidence JSON document carries its own provider and phase",
        ));
    }
    evidence_from_json(text.as_bytes(), "stdin")
}

/// An evidence JSON document (strict: unknown fields are refused); `place` names where it was
/// read in an error.
fn evidence_from_json(bytes: &[u8], place: &str) -> Result<Evidence> {
    let mut evidence: Evidence = serde_json::from_slice(bytes).map_err(|e| {
        bad_input(format!(
            "{place}: evidence JSON: {} (a raw JSON body is read with --body-file -)",
            without_values(&e.to_string())
        ))
    })?;
    if let Some(status) = evidence.status
        && !(100..=599).contains(&status)
    {
        return Err(bad_input(format!(
            "{place}: evidence JSON: status {status} is not an HTTP status (100-599)"
        )));
    }
    evidence.provider = evidence.provider.map(|p| p.to_ascii_lowercase());
    Ok(evidence)
}

/// The hint as the interactive policy honours it: bounded by the class cap (T2). `None` when
/// there is no hint or the class is never retried.
fn capped_hint(c: &Classification) -> Option<std::time::Duration> {
    let hint = c.hint?;
    let cap = Policy::interactive()
        .for_class(c.class()?)
        .and_then(|p| p.retry)
        .map(|r| r.backoff.cap())?;
    Some(hint.delay.min(cap))
}

/// What rebound does with a failure so classified, in one sentence.
fn consequence(c: &Classification) -> String {
    let policy = Policy::interactive();
    if c.retry_forbidden && c.class().is_some() {
        return "stops: the provider said x-should-retry: false".to_owned();
    }
    match &c.verdict {
        Verdict::Unclassified(reason) => format!(
            "stops for manual recovery: unclassified ({}); rebound never guesses",
            reason.as_str()
        ),
        Verdict::Classified(Class::Terminal) => {
            "stops: repetition cannot repair this failure".to_owned()
        }
        Verdict::Classified(Class::Hard) => {
            "stops: this needs a long reset, a configuration change or a human".to_owned()
        }
        Verdict::Classified(class) => {
            let backoff = policy
                .for_class(*class)
                .and_then(|p| p.retry)
                .map(|r| r.backoff);
            match backoff {
                Some(b) => format!(
                    "retries silently, up to {DEFAULT_RETRIES} times, waiting the server's hint or {} s doubling (capped at {} s)",
                    b.initial().as_secs(),
                    b.cap().as_secs()
                ),
                None => "stops".to_owned(),
            }
        }
    }
}

fn write_human(
    out: &mut impl Write,
    c: &Classification,
    evidence: &Evidence,
    retry: Option<(u32, Option<std::time::Duration>)>,
) -> Result<()> {
    let code = c.code.as_ref().map_or("-", |c| c.as_str());
    writeln!(out, "{} · {code}", c.verdict.label())?;
    if let Some(rule) = &c.rule_id {
        writeln!(
            out,
            "  rule        {rule} (confidence {})",
            c.confidence.as_str()
        )?;
    }
    if let Verdict::Unclassified(reason) = &c.verdict {
        writeln!(out, "  reason      {}", reason.as_str())?;
    }
    writeln!(out, "  scope       {}", c.scope.as_str())?;
    match (c.hint, capped_hint(c)) {
        (Some(h), Some(capped)) if capped < h.delay => writeln!(
            out,
            "  hint        {} ms ({}), capped at {} ms by the class cap",
            h.delay.as_millis(),
            h.source,
            capped.as_millis()
        )?,
        (Some(h), _) => writeln!(
            out,
            "  hint        {} ms ({})",
            h.delay.as_millis(),
            h.source
        )?,
        (None, _) => writeln!(out, "  hint        none")?,
    }
    if let Some((attempt, delay)) = retry {
        match delay {
            Some(d) => writeln!(
                out,
                "  retry       after attempt {attempt}: wait {} ms",
                d.as_millis()
            )?,
            None => writeln!(out, "  retry       after attempt {attempt}: none")?,
        }
    }
    writeln!(out, "  rebound     {}", consequence(c))?;
    writeln!(out, "  catalogue   {}", c.catalogue_version)?;
    if let Some(excerpt) = error_excerpt(evidence) {
        let flat: String = excerpt.split_whitespace().collect::<Vec<_>>().join(" ");
        let shown = rebound_core::evidence::bound_text(&flat, SHOWN_EXCERPT);
        let more = if shown.len() < flat.len() { "…" } else { "" };
        writeln!(out, "  evidence    {shown}{more}")?;
    }
    Ok(())
}

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

const MANIFEST: &str = r#"
[catalogue]
version = "test.1"

[codes.rate_limited]
class = "rate_limit"

[codes.overloaded]
class = "transient"

[codes.unassigned]
description = "declared, no class yet"
"#;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_050_800)
}

fn compile(rules: &str) -> Result<Catalogue, CatalogueError> {
    Catalogue::compile(
        &[Source::new("manifest.toml", MANIFEST)],
        &[Source::new("user/rules.toml", rules)],
    )
}

fn err(rules: &str) -> CatalogueError {
    match compile(rules) {
        Ok(_) => panic!("expected an error for:\n{rules}"),
        Err(e) => e,
    }
}

fn evidence(status: u16, body: &str) -> Evidence {
    Evidence {
        status: Some(status),
        ..text(body)
    }
}

/// Text evidence: a body and nothing else, no status.
fn text(body: &str) -> Evidence {
    Evidence {
        body: Some(body.to_owned()),
        ..Evidence::default()
    }
}

#[test]
fn the_shipped_catalogue_compiles() {
    let catalogue = Catalogue::shipped().unwrap();
    assert!(catalogue.rule_count() > 100, "{}", catalogue.rule_count());
    assert!(!catalogue.version().contains("+user"));
}

/// One rule with the given fields after its id and priority.
fn rule(id: &str, fields: &str) -> String {
    format!("[[rule]]\nid = \"{id}\"\npriority = 1\n{fields}\n")
}

#[test]
fn a_broken_rule_is_refused_naming_file_rule_and_field() {
    let status = "status = [429]\ncode = \"rate_limited\"";
    for (rules, id, field, message) in [
        (
            rule("x.bad", "body = \"(unclosed\"\ncode = \"rate_limited\""),
            "x.bad",
            "body",
            "invalid regex",
        ),
        (
            rule("x.same", status) + &rule("x.same", status),
            "x.same",
            "id",
            "duplicate rule id, first declared in user/rules.toml",
        ),
        (
            rule("x.typo", "stauts = [429]\ncode = \"rate_limited\""),
            "x.typo",
            "stauts",
            "unknown field `stauts`",
        ),
        (
            rule("x.nocode", "status = [429]\ncode = \"made_up\""),
            "x.nocode",
            "code",
            "has no class",
        ),
        (
            rule("x.disagree", &format!("{status}\nclass = \"transient\"")),
            "x.disagree",
            "class",
            "says `transient` but code `rate_limited` is declared as rate_limit",
        ),
    ] {
        let e = err(&rules);
        assert_eq!(e.file, "user/rules.toml", "{rules}");
        assert_eq!(e.rule.as_deref(), Some(id), "{rules}");
        assert_eq!(e.field.as_deref(), Some(field), "{rules}");
        assert!(e.message.contains(message), "{e}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
}

#[test]
fn user_files_cannot_declare_a_version() {
    let e = err("[catalogue]\nversion = \"mine\"\n");
    assert_eq!(e.field.as_deref(), Some("catalogue"));
}

#[test]
fn a_rule_needs_a_matcher_and_valid_matchers() {
    let e = err("[[rule]]\nid = \"x.any\"\npriority = 1\ncode = \"rate_limited\"\n");
    assert_eq!(e.rule.as_deref(), Some("x.any"));
    for (field, line) in [
        ("status", "status = [\"6xx\"]"),
        ("status", "status = [700]"),
        ("transport", "transport = [\"carrier_pigeon\"]"),
        (
            "hint[0].pattern",
            "body = \"x\"\n[[rule.hint]]\npattern = \"no group\"",
        ),
        (
            "hint[0].from",
            "body = \"x\"\n[[rule.hint]]\nfrom = \"query\"\npattern = \"(?P<seconds>\\\\d+)\"",
        ),
    ] {
        let e = err(&format!(
            "[[rule]]\nid = \"x.m\"\npriority = 1\ncode = \"rate_limited\"\n{line}\n"
        ));
        assert_eq!(e.field.as_deref(), Some(field), "{line}: {e}");
    }
}

#[test]
fn toml_syntax_errors_name_the_file() {
    let e = err("[[rule]\nid = ");
    assert_eq!(e.file, "user/rules.toml");
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn user_rules_change_the_version() {
    let c =
        compile("[[rule]]\nid = \"x.a\"\npriority = 1\nstatus = [429]\ncode = \"rate_limited\"\n")
            .unwrap();
    assert!(c.version().starts_with("test.1+user."), "{}", c.version());
}

#[test]
fn equal_priority_rules_that_disagree_are_unclassified() {
    let c = compile(
        r#"
[[rule]]
id = "x.a"
priority = 5
status = [503]
code = "overloaded"

[[rule]]
id = "x.b"
priority = 5
body = "slow"
code = "rate_limited"

[[rule]]
id = "x.c"
priority = 1
status = [503]
code = "rate_limited"
"#,
    )
    .unwrap();
    let out = c.classify(&evidence(503, "slow down"), now());
    assert_eq!(
        out.verdict,
        Verdict::Unclassified(UnclassifiedReason::Conflict(vec![
            "x.a".to_owned(),
            "x.b".to_owned()
        ]))
    );
    // Without the conflict, the higher rule decides.
    let out = c.classify(&evidence(503, "busy"), now());
    assert_eq!(out.verdict, Verdict::Classified(Class::Transient));
    assert_eq!(out.rule_id.as_deref(), Some("x.a"));
}

#[test]
fn a_declared_code_without_a_class_fails_closed() {
    let c =
        compile("[[rule]]\nid = \"x.u\"\npriority = 1\nstatus = [418]\ncode = \"unassigned\"\n")
            .unwrap();
    let out = c.classify(&evidence(418, ""), now());
    assert_eq!(
        out.verdict,
        Verdict::Unclassified(UnclassifiedReason::NoClass)
    );
    assert_eq!(out.code.as_ref().map(Code::as_str), Some("unassigned"));
}

#[test]
fn low_confidence_fails_closed() {
    let c = compile(
        "[[rule]]\nid = \"x.l\"\npriority = 1\nstatus = [429]\ncode = \"rate_limited\"\nconfidence = \"low\"\n",
    )
    .unwrap();
    let out = c.classify(&evidence(429, ""), now());
    assert_eq!(
        out.verdict,
        Verdict::Unclassified(UnclassifiedReason::LowConfidence)
    );
}

#[test]
fn stale_evidence_fails_closed() {
    let c = Catalogue::shipped().unwrap();
    let mut e = evidence(429, "");
    e.invocation = Some("inv-1".to_owned());
    let current = c.classify_current(&e, "inv-1", now());
    assert_eq!(current.verdict, Verdict::Classified(Class::RateLimit));
    let stale = c.classify_current(&e, "inv-2", now());
    assert_eq!(
        stale.verdict,
        Verdict::Unclassified(UnclassifiedReason::Stale)
    );
    e.invocation = None;
    let unknown = c.classify_current(&e, "inv-1", now());
    assert_eq!(
        unknown.verdict,
        Verdict::Unclassified(UnclassifiedReason::Stale)
    );
}

#[test]
fn evidence_beyond_the_bound_is_not_read() {
    let c = Catalogue::shipped().unwrap();
    let late = format!(
        "{}\"type\":\"overloaded_error\"",
        " ".repeat(crate::evidence::EVIDENCE_TEXT_LIMIT)
    );
    let out = c.classify(&evidence(500, &late), now());
    assert_eq!(out.rule_id.as_deref(), Some("generic.http_500"));
}

#[test]
fn server_headers_beat_body_hints() {
    let c = Catalogue::shipped().unwrap();
    let mut e = evidence(
        429,
        r#"{"error":{"message":"Rate limit reached for gpt-4o. Please try again in 20s.","code":"rate_limit_exceeded"}}"#,
    );
    let body_only = c.classify(&e, now());
    assert_eq!(
        body_only.hint.map(|h| h.delay),
        Some(Duration::from_secs(20))
    );
    e.headers.insert("retry-after-ms", "1500");
    let header = c.classify(&e, now());
    assert_eq!(
        header.hint.map(|h| h.delay),
        Some(Duration::from_millis(1500))
    );
}

/// The rule the text-status tests read an embedded 429 with.
const RULE_429: &str = r#"
[[rule]]
id = "t.429"
priority = 10
status = [429]
code = "rate_limited"
"#;

/// A catalogue of `[[text_status]]` patterns, in order, then `RULE_429` and `rules`.
fn with_text_status(patterns: &[&str], rules: &str) -> Catalogue {
    let patterns: String = patterns
        .iter()
        .map(|p| format!("[[text_status]]\npattern = '{p}'\n\n"))
        .collect();
    compile(&format!("{patterns}{RULE_429}\n{rules}")).unwrap()
}

/// A rule that reads an AWS event-stream frame's `:exception-type` header.
const PSEUDO_HEADER: &str = r#"
[[rule]]
id = "t.pseudo_header"
priority = 20
headers = { ":exception-type" = '^throttlingException$' }
code = "rate_limited"
"#;

#[test]
fn text_that_embeds_a_status_is_classified_by_it() {
    let catalogue = with_text_status(&[r"Error code: (?P<status>\d{3})"], PSEUDO_HEADER);
    let pasted = text("RateLimitError: Error code: 429 - {'error': {}}");
    let c = catalogue.classify(&pasted, now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.429"), Some(429)));
    // The evidence's own status wins over the text's.
    let own = Evidence {
        status: Some(500),
        ..pasted.clone()
    };
    assert_eq!(catalogue.classify(&own, now()).rule_id, None);
    // Out-of-range or missing digits give no status.
    let odd = text("Error code: 999");
    assert_eq!(catalogue.classify(&odd, now()).status, None);
    // An informational 1xx is never how a request failed (a body's `"code": 109` is no status).
    let informational = text("Error code: 109");
    assert_eq!(catalogue.classify(&informational, now()).status, None);
}

#[test]
fn a_reprinted_text_gives_its_status_and_hint_too() {
    // A relay escaped the provider's line break inside a JSON string: `\nError code: 429`
    // has no word boundary before `Error`, and a reset split by a wrap is not one number
    // apart from its unit. Both are read from the text with the reprint undone.
    let catalogue = with_text_status(
        &[r"\bError code: (?P<status>\d{3})"],
        "  [[rule.hint]]\n  pattern = 'try again in (?P<seconds>\\d+) seconds'\n",
    );
    let escaped = text(r#"{"detail":"upstream said:\nError code: 429"}"#);
    let c = catalogue.classify(&escaped, now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.429"), Some(429)));
    // Both readings' patterns count in the catalogue's order, as if they were one text: a
    // wrap inside "status code 400" must not hand the status to a later pattern's "code": 500.
    let shipped = Catalogue::shipped().unwrap();
    let split =
        text("{\"code\": 500, \"message\": \"bad response status code\n400 (request id: 1)\"}");
    assert_eq!(shipped.classify(&split, now()).status, Some(400));
    let wrapped = text("Error code: 429. Please try again\nin 20 seconds.");
    let c = catalogue.classify(&wrapped, now());
    assert_eq!(c.hint.map(|h| h.delay), Some(Duration::from_secs(20)));
}

#[test]
fn text_status_patterns_share_the_rules_scan_and_the_first_that_reads_decides() {
    // The text-status patterns follow the rules' in one matcher: a text-status match is no
    // rule's match, and a rule's match gives no status.
    let catalogue = with_text_status(
        &[r"code (?P<status>\d{3})", r"HTTP (?P<status>\d{3})"],
        "[[rule]]\nid = \"t.upstream\"\npriority = 5\nbody = '(?i)upstream busy'\ncode = \"rate_limited\"\n",
    );
    let c = catalogue.classify(&text("HTTP 503"), now());
    assert_eq!((c.rule_id.as_deref(), c.status), (None, Some(503)));
    let c = catalogue.classify(&text("upstream busy"), now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.upstream"), None));
    // The first pattern matched but read no status (999): the next one that reads decides.
    let c = catalogue.classify(&text("code 999 after HTTP 429"), now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.429"), Some(429)));
    // Both read: the first in the catalogue's order decides, wherever it stands in the text.
    let c = catalogue.classify(&text("HTTP 503 after code 429"), now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.429"), Some(429)));
}

#[test]
fn a_text_status_captures_what_its_set_matched() {
    // The text-status set reads bytes with ASCII classes, so `\W` matches every byte of "é";
    // the extractor must read the same way, or the set's first match captures nothing and the
    // status is lost.
    let catalogue = compile(
        r#"
[[text_status]]
pattern = '\A\W*(?P<status>[1-5]\d\d)\b'

[[rule]]
id = "t.503"
priority = 10
status = [503]
code = "rate_limited"
"#,
    )
    .unwrap();
    let c = catalogue.classify(&text("\u{e9} 503 upstream busy"), now());
    assert_eq!((c.rule_id.as_deref(), c.status), (Some("t.503"), Some(503)));
}

#[test]
fn a_typographic_apostrophe_reads_as_the_ascii_one() {
    // The body set matches bytes: `.` is one byte and ’ is three, so a rule's `you.ve` or
    // `you've` would miss what a phone or an app with smart quotes printed. A hint reads the
    // same text its rule matched.
    let catalogue = compile(
        r#"
[[rule]]
id = "t.limit"
priority = 10
body = "(?i)you've hit your limit|\\bdon.t retry\\b"
code = "rate_limited"

  [[rule.hint]]
  pattern = "'retry_after': '(?P<seconds>\\d+)'"
"#,
    )
    .unwrap();
    for body in [
        "You\u{2019}ve hit your limit for Claude messages.",
        "You\u{2018}ve hit your limit",
        "Please don\u{2019}t retry",
    ] {
        let c = catalogue.classify(&text(body), now());
        assert_eq!(c.rule_id.as_deref(), Some("t.limit"), "{body}");
    }
    let quoted = "You\u{2019}ve hit your limit {\u{2018}retry_after\u{2019}: \u{2018}30\u{2019}}";
    let hint = catalogue.classify(&text(quoted), now()).hint;
    assert_eq!(hint.map(|h| h.delay), Some(Duration::from_secs(30)));
}

#[test]
fn a_text_status_pattern_needs_a_status_group() {
    let e = err("[[text_status]]\npattern = 'Error code: \\d{3}'\n");
    assert_eq!(e.field.as_deref(), Some("text_status[1].pattern"));
    assert!(e.message.contains("status"), "{e}");
}

#[test]
fn pseudo_header_names_are_rule_matchers() {
    let catalogue = with_text_status(&[r"Error code: (?P<status>\d{3})"], PSEUDO_HEADER);
    let frame = Evidence {
        headers: [(":exception-type", "throttlingException")]
            .into_iter()
            .collect(),
        ..Evidence::default()
    };
    assert_eq!(
        catalogue.classify(&frame, now()).rule_id.as_deref(),
        Some("t.pseudo_header")
    );
    assert_eq!(
        err("[[rule]]\nid = \"x\"\npriority = 1\nheaders = { \":\" = 'a' }\ncode = \"rate_limited\"\n")
            .message,
        "not a header name"
    );
}

#[test]
fn a_none_status_matches_only_evidence_without_a_status() {
    let c = compile(
        "[[rule]]\nid = \"x.text\"\npriority = 1\nstatus = [\"none\", \"5xx\"]\nbody = \"server had an error\"\ncode = \"overloaded\"\n",
    )
    .unwrap();
    let body = "The server had an error while processing your request.";
    let bare = text(body);
    assert_eq!(
        c.classify(&bare, now()).rule_id.as_deref(),
        Some("x.text"),
        "no status at all"
    );
    assert_eq!(
        c.classify(&evidence(503, body), now()).rule_id.as_deref(),
        Some("x.text")
    );
    let teapot = c.classify(&evidence(418, body), now());
    assert_eq!(
        teapot.rule_id, None,
        "a status outside the list is not `none`"
    );
    assert_eq!(
        teapot.verdict,
        Verdict::Unclassified(UnclassifiedReason::NoRule)
    );
}

#[test]
fn a_bad_status_item_names_the_choices() {
    let e = err(
        "[[rule]]\nid = \"x.s\"\npriority = 1\nstatus = [\"nothing\"]\ncode = \"overloaded\"\n",
    );
    let text = e.to_string();
    assert!(
        text.contains("nothing") && text.contains("\"none\""),
        "{text}"
    );
}

#[test]
fn two_ascending_sequences_merge_in_order() {
    let merged = |a: &[u32], b: &[u32]| super::merged(a, b).collect::<Vec<_>>();
    assert_eq!(merged(&[1, 4, 9], &[0, 2, 3, 10]), [0, 1, 2, 3, 4, 9, 10]);
    assert_eq!(merged(&[], &[5, 6]), [5, 6]);
    assert_eq!(merged(&[5, 6], &[]), [5, 6]);
    assert!(merged(&[], &[]).is_empty());
}

#[test]
fn only_rules_whose_pattern_matched_are_tried_yet_priority_still_decides() {
    // File order differs from priority order, and rules with and without a body pattern
    // alternate: the candidates must come out highest priority first whichever kind they are.
    let c = compile(
        r#"
[[rule]]
id = "x.low_body"
priority = 1
body = "busy"
code = "rate_limited"

[[rule]]
id = "x.status"
priority = 5
status = [503]
code = "overloaded"

[[rule]]
id = "x.high_body"
priority = 9
body = "quota"
code = "unassigned"

[[rule]]
id = "x.mid_body"
priority = 7
body = "slow"
code = "rate_limited"
"#,
    )
    .unwrap();
    let decide = |status, body| c.classify(&evidence(status, body), now()).rule_id;
    assert_eq!(decide(503, "busy").as_deref(), Some("x.status"));
    assert_eq!(decide(503, "slow and busy").as_deref(), Some("x.mid_body"));
    assert_eq!(decide(503, "quota, slow").as_deref(), Some("x.high_body"));
    assert_eq!(decide(429, "busy").as_deref(), Some("x.low_body"));
    assert_eq!(decide(429, "nothing").as_deref(), None);
}

#[test]
fn a_pattern_too_large_to_compile_names_its_rule() {
    // Valid syntax, checked alone; its size is known only when the matcher compiles it.
    let e = err(r#"
[[rule]]
id = "small"
priority = 10
body = "overloaded"
code = "overloaded"

[[rule]]
id = "huge"
priority = 10
body = '(?:[a-z]{1000}){1000}'
code = "overloaded"
"#);
    assert_eq!(e.file, "user/rules.toml");
    assert_eq!(e.rule.as_deref(), Some("huge"));
    assert_eq!(e.field.as_deref(), Some("body"));
    assert!(e.message.starts_with("invalid regex:"), "{e}");
}

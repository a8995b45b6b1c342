//! Each fault, in both protocols and both phases, recovered by replaying only the failed
//! request (R1, R2, T1, T5).

use std::sync::Arc;
use std::time::Duration;

use rebound_core::{Catalogue, Policy};
use rebound_runtime::{
    Event, HttpClient, Outcome, Protocol, Runtime, SystemClock, Timeouts, TurnError,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{body, chaos, count, ends, errors, provider, run, runtime, timeouts, visible_text};
use rebound_runtime::{HeldSleeper, Wait};

const FULL: &str = "Hello from rebound chaos. You said: hi";

/// How long a test waits for what a working build does at once, before it fails.
const LIMIT: Duration = Duration::from_secs(10);

/// Asserts a recovered request: the whole answer once, no error, one end, `attempts` sent.
async fn recovers(script: &str, protocol: Protocol, stream: bool, attempts: u64) -> Vec<Event> {
    let chaos = chaos(script).await;
    let (runtime, _) = runtime(Policy::interactive(), short_timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
    let (result, events) = run(&mut turn, &body("hi"), stream).await;
    let response = result.unwrap_or_else(|e| panic!("{script} {protocol:?}: {e}"));
    assert_eq!(response.text, FULL, "{script}");
    if stream {
        assert_eq!(
            visible_text(&events),
            FULL,
            "{script}: what the consumer shows"
        );
    }
    assert_eq!(chaos.attempts("default"), attempts, "{script} {protocol:?}");
    assert_eq!((errors(&events), ends(&events)), (0, 1), "{script}");
    // One visible message id across every attempt (R2).
    let ids: std::collections::BTreeSet<&str> = events
        .iter()
        .map(|e| match e {
            Event::Text { message_id, .. }
            | Event::Reasoning { message_id, .. }
            | Event::Discard { message_id }
            | Event::Retrying { message_id, .. }
            | Event::Fallback { message_id, .. }
            | Event::Error { message_id, .. }
            | Event::End { message_id, .. } => message_id.as_str(),
        })
        .collect();
    assert_eq!(ids.len(), 1);
    events
}

fn short_timeouts() -> Timeouts {
    Timeouts {
        idle: Duration::from_millis(300),
        first_byte: Duration::from_millis(500),
        ..timeouts()
    }
}

fn discards(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::Discard { .. }))
}

#[tokio::test]
async fn a_429_before_headers_waits_the_server_hint() {
    for protocol in [Protocol::OpenAi, Protocol::Anthropic] {
        let chaos = chaos("429+retry-after-ms:300, ok").await;
        let (runtime, time) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
        run(&mut turn, &body("hi"), true).await.0.unwrap();
        assert_eq!(time.waits(), [Duration::from_millis(300)]);
        assert_eq!(chaos.attempts("default"), 2);
    }
}

#[tokio::test]
async fn a_cut_after_three_chunks_is_discarded_and_replayed() {
    for protocol in [Protocol::OpenAi, Protocol::Anthropic] {
        let events = recovers("cut-after-3-chunks, ok", protocol, true, 2).await;
        assert_eq!(discards(&events), 1, "{protocol:?}");
        // The discard comes after the partial text and before the replay's text.
        let first_discard = events
            .iter()
            .position(|e| matches!(e, Event::Discard { .. }))
            .unwrap();
        assert!(
            events[..first_discard]
                .iter()
                .any(|e| matches!(e, Event::Text { .. }))
        );
        assert!(
            events[first_discard..]
                .iter()
                .any(|e| matches!(e, Event::Text { .. }))
        );
    }
}

#[tokio::test]
async fn a_non_streaming_body_cut_midway_is_replayed() {
    recovers("cut-after-1-chunks, ok", Protocol::OpenAi, false, 2).await;
}

#[tokio::test]
async fn anthropic_overloaded_mid_stream_is_replayed() {
    let events = recovers(
        "error-after-2:overloaded_error, ok",
        Protocol::Anthropic,
        true,
        2,
    )
    .await;
    assert_eq!(discards(&events), 1);
}

#[tokio::test]
async fn overloaded_right_after_message_start_needs_no_discard() {
    let events = recovers(
        "error-after-0:overloaded_error, ok",
        Protocol::Anthropic,
        true,
        2,
    )
    .await;
    assert_eq!(discards(&events), 0);
}

#[tokio::test]
async fn openai_in_stream_server_error_is_replayed() {
    recovers("error-after-2:server_error, ok", Protocol::OpenAi, true, 2).await;
}

#[tokio::test]
async fn a_reset_connection_is_replayed() {
    for protocol in [Protocol::OpenAi, Protocol::Anthropic] {
        recovers("reset, ok", protocol, true, 2).await;
        recovers("reset, ok", protocol, false, 2).await;
    }
}

#[tokio::test]
async fn stalls_before_headers_and_mid_stream_time_out_and_replay() {
    recovers("stall:3000, ok", Protocol::OpenAi, true, 2).await;
    recovers("stall-after-2:3000, ok", Protocol::Anthropic, true, 2).await;
}

#[tokio::test]
async fn a_success_whose_body_is_not_json_is_replayed() {
    recovers("malformed-after-1, ok", Protocol::Anthropic, false, 2).await;
}

/// An answer in the other form than asked for is the answer: the whole answer of a server
/// that does not stream, read as the stream the API would have sent (its text reaching the
/// consumer as a stream's would), and the stream of a server that streams whatever it is
/// asked, gathered whole. One attempt each, in both protocols; each had been an error.
#[tokio::test]
async fn an_answer_in_the_other_form_is_read_in_the_form_asked() {
    for protocol in [Protocol::OpenAi, Protocol::Anthropic] {
        recovers("unstreamed", protocol, true, 1).await;
        recovers("streamed", protocol, false, 1).await;
    }
}

/// A web page where the answer was due (a website's base URL, a network's sign-in page)
/// answers every retry the same, so one attempt, then one error that says what came (C5).
#[tokio::test]
async fn a_page_stops_after_one_attempt_saying_what_came() {
    for (script, stream, rule, says) in [
        (
            "page",
            false,
            "transport.html_page_answer",
            "an HTML page titled 'Sign in to continue', not the protocol's JSON",
        ),
        (
            "page",
            true,
            "transport.html_page_answer",
            "an HTML page titled 'Sign in to continue', not an event stream",
        ),
    ] {
        let chaos = chaos(script).await;
        let (runtime, time) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
        let (result, _) = run(&mut turn, &body("hi"), stream).await;
        let Err(TurnError::Failed(d)) = result else {
            panic!("{script} {stream}: {result:?}")
        };
        assert_eq!(
            (d.class, d.rule_id.as_deref(), d.attempts),
            ("hard", Some(rule), 1),
            "{script} {stream}"
        );
        assert!(
            d.error.as_deref().is_some_and(|e| e.contains(says)),
            "{:?}",
            d.error
        );
        assert_eq!(chaos.attempts("default"), 1);
        assert_eq!(time.elapsed(), Duration::ZERO, "nothing was waited for");
    }
}

#[tokio::test]
async fn malformed_sse_is_replayed() {
    recovers("malformed-after-1, ok", Protocol::OpenAi, true, 2).await;
}

#[tokio::test]
async fn an_abort_during_a_wait_sends_nothing_more() {
    let chaos = chaos("429+retry-after:20, ok").await;
    // The wait never ends by itself: the abort comes while it is in progress.
    let (held, mut waits) = HeldSleeper::new();
    let runtime = Runtime::new(
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
        Arc::new(Policy::interactive()),
    )
    .with_time(Arc::new(SystemClock), held);
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    let cancel = CancellationToken::new();
    let aborter = cancel.clone();
    let aborted = tokio::spawn(async move {
        assert_eq!(
            waits
                .next(LIMIT)
                .await
                .expect("nothing happened to any wait in time"),
            Wait::Started(Duration::from_secs(20))
        );
        aborter.cancel();
        waits
            .next(LIMIT)
            .await
            .expect("nothing happened to any wait in time")
    });
    let mut events = Vec::new();
    let result = tokio::time::timeout(LIMIT, turn.request(&body("hi"), true, &mut events, &cancel))
        .await
        .expect("the abort did not end the wait");
    assert_eq!(result, Err(TurnError::Aborted));
    assert_eq!(
        aborted.await.unwrap(),
        Wait::Abandoned(Duration::from_secs(20)),
        "the wait was not cut short"
    );
    // The wait never ended, and a retry only follows a wait: nothing more can have gone out.
    assert_eq!(
        chaos.attempts("default"),
        1,
        "a request was sent after the abort"
    );
    assert_eq!(errors(&events), 0);
    assert!(matches!(
        events.last(),
        Some(Event::End {
            outcome: Outcome::Aborted,
            ..
        })
    ));
    assert_eq!(ends(&events), 1);
}

#[tokio::test]
async fn an_abort_mid_stream_ends_the_request() {
    // The upstream stalls after the first chunk, and the idle timeout is as long, for longer
    // than the test may take: only the abort can end the request in time. The consumer aborts
    // as soon as that chunk's text reaches it.
    let chaos = chaos("stall-after-1:60000, ok").await;
    let idle = Duration::from_secs(60);
    let (runtime, _) = runtime(Policy::interactive(), Timeouts { idle, ..timeouts() });
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::Anthropic)]);
    let cancel = CancellationToken::new();
    let mut events = Vec::new();
    let mut sink = |event: Event| {
        if matches!(event, Event::Text { .. }) {
            cancel.cancel();
        }
        events.push(event);
    };
    let result = tokio::time::timeout(LIMIT, turn.request(&body("hi"), true, &mut sink, &cancel))
        .await
        .expect("the abort did not end the stalled stream");
    assert_eq!(result, Err(TurnError::Aborted));
    assert_eq!(chaos.attempts("default"), 1);
    assert_eq!(count(&events, |e| matches!(e, Event::Text { .. })), 1);
    assert_eq!((errors(&events), ends(&events)), (0, 1));
}

#[tokio::test]
async fn a_tool_call_runs_once_even_when_the_next_request_is_replayed() {
    for protocol in [Protocol::OpenAi, Protocol::Anthropic] {
        let chaos = chaos("ok, cut-after-2-chunks, 502, ok").await;
        let (runtime, _) = runtime(Policy::interactive(), short_timeouts());
        let mut turn = runtime.session(vec![provider(&chaos, protocol)]);
        let (tools, mut messages) = match protocol {
            Protocol::OpenAi => (
                json!([{"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]),
                vec![json!({"role": "user", "content": "what time is it"})],
            ),
            Protocol::Anthropic => (
                json!([{"name": "clock", "input_schema": {"type": "object"}}]),
                vec![json!({"role": "user", "content": "what time is it"})],
            ),
        };
        let mut tool_runs = 0;
        let answer = loop {
            let request = json!({"messages": messages, "tools": tools});
            let (result, _) = run(&mut turn, &request, true).await;
            let response = result.unwrap();
            let Some(call) = response.tool_calls.first() else {
                break response.text;
            };
            tool_runs += 1;
            assert_eq!(call.name, "clock");
            match protocol {
                Protocol::OpenAi => {
                    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]}));
                    messages
                        .push(json!({"role": "tool", "tool_call_id": call.id, "content": "noon"}));
                }
                Protocol::Anthropic => {
                    messages.push(json!({"role": "assistant", "content": [
                        {"type": "tool_use", "id": call.id, "name": call.name, "input": serde_json::from_str::<serde_json::Value>(&call.arguments).unwrap()}]}));
                    messages.push(json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": call.id, "content": "noon"}]}));
                }
            }
        };
        assert_eq!(answer, "The tool answered: noon. Done.");
        assert_eq!(tool_runs, 1, "{protocol:?}");
        assert_eq!(chaos.attempts("default"), 4);
    }
}

#[tokio::test]
async fn a_chat_stream_without_done_after_its_finish_reason_is_complete_first_time() {
    recovers("no-done", Protocol::OpenAi, true, 1).await;
}

#[tokio::test]
async fn an_event_that_is_not_json_is_skipped_and_the_stream_completes_first_time() {
    recovers("malformed-event-at-1", Protocol::OpenAi, true, 1).await;
    recovers("malformed-event-at-1", Protocol::Anthropic, true, 1).await;
}

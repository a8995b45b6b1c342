//! The Responses API: streams, whole responses, faults, stored responses.

use serde_json::{Value, json};

use crate::{chaos, post, send};

fn request(stream: bool) -> Value {
    json!({"model": "gpt-chaos", "input": "hi there", "stream": stream})
}

const TEXT_EVENTS: [&str; 5] = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.delta",
];

#[tokio::test]
async fn a_stream_has_the_real_event_sequence_numbered_from_zero() {
    let chaos = chaos("ok").await;
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    assert!(!reply.broken);
    let types = reply.types();
    let mut expected = vec!["response.created", "response.in_progress"];
    expected.extend(TEXT_EVENTS);
    // "Hello from rebound chaos. You said: hi there" streams in 5 chunks.
    expected.extend([
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(types, expected);
    for (i, (name, data)) in reply.events().iter().enumerate() {
        assert_eq!(data["sequence_number"], json!(i), "{data}");
        assert_eq!(name.as_deref(), data["type"].as_str());
    }
    let events = reply.events();
    let text: String = events
        .iter()
        .filter(|(_, d)| d["type"] == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from rebound chaos. You said: hi there");
    let created = &events[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["object"], "response");
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["id"], created["id"]);
    assert_eq!(completed["output"][0]["content"][0]["text"], text);
    assert_eq!(completed["usage"]["total_tokens"], json!(12 + 5));
    let item_id = completed["output"][0]["id"].as_str().unwrap();
    assert!(
        events[2..events.len() - 1]
            .iter()
            .all(|(_, d)| d["item_id"] == item_id || d["item"]["id"] == item_id)
    );
    assert_eq!(chaos.attempts("k"), 1);
}

#[tokio::test]
async fn a_whole_response_is_a_response_object() {
    let chaos = chaos("ok").await;
    let body = post(&chaos, "/v1/responses", &request(false)).await.json();
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], "gpt-chaos");
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["role"], "assistant");
    assert_eq!(
        body["output"][0]["content"][0],
        json!({"type": "output_text", "annotations": [], "logprobs": [], "text": "Hello from rebound chaos. You said: hi there"})
    );
}

#[tokio::test]
async fn statuses_come_with_their_headers_and_an_openai_error_body() {
    let chaos = chaos("429+retry-after:3+x-should-retry:false, 503, ok").await;
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "3");
    assert_eq!(reply.headers["x-should-retry"], "false");
    assert_eq!(reply.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(
        post(&chaos, "/v1/responses", &request(true)).await.status,
        503
    );
    assert_eq!(
        post(&chaos, "/v1/responses", &request(true)).await.status,
        200
    );
    assert_eq!(chaos.attempts("k"), 3);
}

#[tokio::test]
async fn an_overload_right_after_the_preamble_is_a_failed_response() {
    let chaos = chaos("error-after-0").await;
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert_eq!(
        reply.types(),
        [
            "response.created",
            "response.in_progress",
            "response.failed"
        ]
    );
    let failed = &reply.events()[2].1;
    assert_eq!(failed["sequence_number"], 2);
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"]["code"], "server_error");
}

#[tokio::test]
async fn an_error_after_content_continues_the_numbering() {
    let chaos = chaos("error-after-2:rate_limit_error, error-event-after-1:server_error").await;
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    let mut expected = vec!["response.created", "response.in_progress"];
    expected.extend(&TEXT_EVENTS[..4]);
    expected.push("response.failed");
    assert_eq!(reply.types(), expected);
    let failed = reply.events().last().unwrap().1.clone();
    assert_eq!(failed["sequence_number"], 6);
    assert_eq!(failed["response"]["error"]["code"], "rate_limit_exceeded");
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    let last = reply.events().last().unwrap().1.clone();
    assert_eq!(
        last,
        json!({"type": "error", "sequence_number": 5, "code": "server_error", "param": null,
            "message": "An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists."})
    );
}

#[tokio::test]
async fn a_cut_stream_breaks_before_or_after_content() {
    let chaos = chaos("cut-after-0, cut-after-2, malformed-after-1, reset").await;
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert!(reply.broken);
    assert_eq!(reply.types(), ["response.created", "response.in_progress"]);
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert!(reply.broken);
    assert_eq!(reply.types().len(), 2 + 4);
    let reply = post(&chaos, "/v1/responses", &request(true)).await;
    assert!(reply.broken && reply.body.contains("not sse at all"));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let reset = client
        .request(
            http::Request::post(format!("http://{}/v1/responses", chaos.addr()))
                .header("x-chaos-key", "k")
                .body(request(true).to_string().into())
                .unwrap(),
        )
        .await;
    assert!(reset.is_err());
    assert_eq!(chaos.attempts("k"), 4);
}

#[tokio::test]
async fn stream_faults_on_a_whole_response() {
    let chaos =
        chaos("error-after-1, error-after-1:server_error, error-event-after-1:rate_limit_error, cut-after-1").await;
    assert_eq!(
        post(&chaos, "/v1/responses", &request(false)).await.status,
        529
    );
    assert_eq!(
        post(&chaos, "/v1/responses", &request(false)).await.status,
        500
    );
    assert_eq!(
        post(&chaos, "/v1/responses", &request(false)).await.status,
        429
    );
    assert!(post(&chaos, "/v1/responses", &request(false)).await.broken);
}

#[tokio::test]
async fn a_function_tool_is_called_with_streamed_arguments_then_answered() {
    let chaos = chaos("ok, ok").await;
    let tools = json!([{"type": "function", "name": "read_file", "strict": false,
        "parameters": {"type": "object", "required": ["path", "lines"],
            "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}}}}]);
    let first = json!({"model": "m", "stream": true, "tools": tools, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "read it"}]}]});
    let reply = post(&chaos, "/v1/responses", &first).await;
    assert_eq!(
        reply.types(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let events = reply.events();
    let arguments: String = events
        .iter()
        .filter(|(_, d)| d["type"] == "response.function_call_arguments.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"path": "chaos", "lines": 1})
    );
    let call = &events[6].1["item"];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "read_file");
    assert_eq!(call["arguments"], arguments);
    let call_id = call["call_id"].as_str().unwrap();
    let second = json!({"model": "m", "stream": false, "tools": tools, "input": [
        {"role": "user", "content": "read it"},
        {"type": "function_call", "call_id": call_id, "name": "read_file", "arguments": arguments},
        {"type": "function_call_output", "call_id": call_id, "output": "42 lines"}]});
    let body = post(&chaos, "/v1/responses", &second).await.json();
    assert_eq!(
        body["output"][0]["content"][0]["text"],
        "The tool answered: 42 lines. Done."
    );
}

#[tokio::test]
async fn reasoning_streams_a_summary_and_carries_encrypted_content_when_included() {
    let chaos = chaos("ok, thinking-only").await;
    let asked = json!({"model": "m", "stream": true, "input": "hi",
        "reasoning": {"effort": "medium", "summary": "auto"}, "include": ["reasoning.encrypted_content"]});
    let reply = post(&chaos, "/v1/responses", &asked).await;
    let types = reply.types();
    assert_eq!(
        types[..5],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta"
        ]
    );
    let events = reply.events();
    let done = events
        .iter()
        .find(|(_, d)| d["type"] == "response.output_item.done")
        .unwrap();
    assert_eq!(done.1["item"]["type"], "reasoning");
    assert!(
        done.1["item"]["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("gAAAA")
    );
    assert_eq!(
        done.1["item"]["summary"][0]["text"],
        "The user said: hi. I will answer briefly."
    );
    assert_eq!(
        events.last().unwrap().1["response"]["output"][1]["type"],
        "message"
    );
    let reply = post(&chaos, "/v1/responses", &asked).await;
    let last = reply.events().last().unwrap().1.clone();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["output"].as_array().unwrap().len(), 1);
    assert!(
        !reply
            .types()
            .contains(&"response.output_text.delta".to_owned())
    );
}

#[tokio::test]
async fn created_responses_can_be_read_listed_and_continued() {
    let chaos = chaos("").await;
    let created = post(&chaos, "/v1/responses", &request(false)).await.json();
    let id = created["id"].as_str().unwrap();
    let got = send(&chaos, "GET", &format!("/v1/responses/{id}"), &[], "").await;
    assert_eq!(got.json(), created);
    let items = send(
        &chaos,
        "GET",
        &format!("/v1/responses/{id}/input_items"),
        &[],
        "",
    )
    .await
    .json();
    assert_eq!(items["object"], "list");
    assert_eq!(
        items["data"][0]["content"][0],
        json!({"type": "input_text", "text": "hi there"})
    );
    let next = json!({"model": "m", "input": "more", "previous_response_id": id});
    let continued = post(&chaos, "/v1/responses", &next).await.json();
    assert_eq!(continued["previous_response_id"], id);
    let unknown = json!({"model": "m", "input": "more", "previous_response_id": "resp_elsewhere"});
    let refused = post(&chaos, "/v1/responses", &unknown).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.json()["error"]["code"],
        "previous_response_not_found"
    );
    let cancel = send(
        &chaos,
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        &[],
        "",
    )
    .await;
    assert_eq!(cancel.status, 400);
    let unstored = json!({"model": "m", "input": "x", "store": false});
    let id = post(&chaos, "/v1/responses", &unstored).await.json()["id"].clone();
    let missing = send(
        &chaos,
        "GET",
        &format!("/v1/responses/{}", id.as_str().unwrap()),
        &[],
        "",
    )
    .await;
    assert_eq!(missing.status, 404);
    // Every one of these counted: 3 creations, 2 reads, a refused continuation, a cancel, a read.
    assert_eq!(chaos.attempts("k"), 8);
    let unserved = send(
        &chaos,
        "PUT",
        &format!("/v1/responses/{}", id.as_str().unwrap()),
        &[],
        "{}",
    )
    .await;
    assert_eq!(unserved.status, 404);
    assert_eq!(chaos.attempts("k"), 8, "an unserved method is not counted");
}

#[tokio::test]
async fn a_background_response_is_queued_then_in_progress_then_completed() {
    let chaos = chaos("").await;
    let body = json!({"model": "m", "input": "hi", "background": true});
    let queued = post(&chaos, "/v1/responses", &body).await.json();
    assert_eq!(
        (queued["status"].as_str(), &queued["background"]),
        (Some("queued"), &json!(true))
    );
    let id = queued["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/responses/{id}");
    let get = || send(&chaos, "GET", &path, &[], "");
    assert_eq!(get().await.json()["status"], "in_progress");
    let done = get().await.json();
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        "Hello from rebound chaos. You said: hi"
    );
    let cancelled = post(&chaos, "/v1/responses", &body).await.json();
    let id = cancelled["id"].as_str().unwrap();
    let cancel = send(
        &chaos,
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        &[],
        "",
    )
    .await;
    assert_eq!(cancel.json()["status"], "cancelled");
    assert_eq!(
        send(&chaos, "GET", &format!("/v1/responses/{id}"), &[], "")
            .await
            .json()["status"],
        "cancelled"
    );
}

#[tokio::test]
async fn a_streamed_background_response_has_finished_when_read() {
    let chaos = chaos("").await;
    let body = json!({"model": "m", "input": "hi", "background": true, "stream": true});
    let stream = post(&chaos, "/v1/responses", &body).await;
    let id = stream.events()[0].1["response"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = send(&chaos, "GET", &format!("/v1/responses/{id}"), &[], "")
        .await
        .json();
    assert_eq!(got["status"], "completed");
}

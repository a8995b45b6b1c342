"""End-to-end: the official `openai` and `anthropic` Python SDKs, unchanged but for their
base URL, talk to `rebound serve`, which talks to a fault-injecting `rebound chaos`.

Usage: python3 tests/sdk/e2e.py [path/to/rebound]
Prints one line per check and closes with `N passed, M failed`; exits non-zero on failure.
"""

import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import anthropic
import openai
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from loopback import free_ports, wait_for  # noqa: E402

REBOUND = sys.argv[1] if len(sys.argv) > 1 else "target/debug/rebound"


DATA = tempfile.mkdtemp(prefix="rebound-e2e-")  # the gateway's durable-routes database


def start(args, data=DATA):
    env = dict(os.environ, XDG_DATA_HOME=data)
    proc = subprocess.Popen([REBOUND, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    proc.stdout.readline()  # the banner's first line: listening
    return proc


chaos_port, gateway_port = free_ports(2)
chaos = start(["chaos", "--listen", f"127.0.0.1:{chaos_port}", "--chunk-delay-ms", "0"])
gateway = start([
    "serve", "--listen", f"127.0.0.1:{gateway_port}",
    "--openai-upstream", f"http://127.0.0.1:{chaos_port}/v1",
    "--anthropic-upstream", f"http://127.0.0.1:{chaos_port}",
])
wait_for(chaos_port)
wait_for(gateway_port)


def script(key, steps):
    request = urllib.request.Request(
        f"http://127.0.0.1:{chaos_port}/chaos/scripts",
        data=json.dumps({key: steps}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request).read()


def attempts(key):
    with urllib.request.urlopen(f"http://127.0.0.1:{chaos_port}/chaos/attempts") as r:
        return json.load(r).get(key, 0)


# max_retries=0: the SDKs must not retry on top of rebound (no nested retries).
oa = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="sk-e2e", max_retries=0)
an = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gateway_port}", api_key="sk-ant-e2e", max_retries=0)
EXPECTED = "Hello from rebound chaos. You said: hi"
HI = [{"role": "user", "content": "hi"}]
results = []


def check(name, steps, fn, want_attempts):
    script(name, steps)
    try:
        fn({"x-chaos-key": name})
        seen = attempts(name)
        ok = seen == want_attempts
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {seen} upstream attempts (want {want_attempts})")
    except Exception as e:  # a failed check is reported, not fatal
        results.append(False)
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def openai_plain(h):
    r = oa.chat.completions.create(model="chaos-1", messages=HI, extra_headers=h)
    assert r.choices[0].message.content == EXPECTED, r


def openai_stream(h):
    s = oa.chat.completions.create(model="chaos-1", messages=HI, stream=True, extra_headers=h)
    text = "".join((c.choices[0].delta.content or "") for c in s if c.choices)
    assert text == EXPECTED, text


def anthropic_plain(h):
    m = an.messages.create(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h)
    assert m.content[0].text == EXPECTED, m


def anthropic_stream(h):
    with an.messages.stream(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h) as s:
        text = "".join(s.text_stream)
    assert text == EXPECTED, text


def openai_exhausted(h):
    try:
        oa.chat.completions.create(model="chaos-1", messages=HI, extra_headers=h)
    except openai.BadRequestError as e:
        assert e.body["code"] == "context_length_exceeded", e.body
        assert e.response.json()["rebound"]["class"] == "terminal"
        return
    raise AssertionError("no error")


def anthropic_exhausted(h):
    try:
        an.messages.create(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h)
    except anthropic.AuthenticationError as e:
        assert e.response.json()["rebound"]["class"] == "hard"
        return
    raise AssertionError("no error")


def anthropic_cut_mid_stream(h):
    try:
        with an.messages.stream(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h) as s:
            "".join(s.text_stream)
    except anthropic.APIStatusError as e:
        return
    except anthropic.APIError:
        return
    raise AssertionError("a cut stream ended silently")


check("openai-plain", "502, 429+retry-after-ms:100, ok", openai_plain, 3)
check("openai-stream", "error-after-0:server_error, reset, ok", openai_stream, 3)
check("anthropic-plain", "529, ok", anthropic_plain, 2)
check("anthropic-stream", "error-after-0:overloaded_error, 503+retry-after-ms:50, ok", anthropic_stream, 3)
check("openai-terminal", "context, ok", openai_exhausted, 1)
check("anthropic-hard", "401, ok", anthropic_exhausted, 1)
check("anthropic-cut", "cut-after-2-chunks, ok", anthropic_cut_mid_stream, 1)


def other_form(h):
    """A server that answers in the other form (the whole answer to a stream request, a stream
    to one that does not stream): each SDK's own stream reader and whole reader get the answer
    on the first attempt, as from a server that answers in the form asked."""
    # Chat Completions: the SDK's stream accumulator, with usage asked; then a whole answer.
    with oa.chat.completions.stream(model="chaos-1", messages=HI, extra_headers=h,
                                    stream_options={"include_usage": True}) as s:
        final = s.get_final_completion()
    assert final.choices[0].message.content == EXPECTED, final
    assert final.choices[0].finish_reason == "stop" and final.usage.total_tokens > 0, final
    whole = oa.chat.completions.with_raw_response.create(model="chaos-1", messages=HI, extra_headers=h)
    assert whole.headers["x-rebound-retold"] == "whole", whole.headers
    assert whole.parse().choices[0].message.content == EXPECTED
    # Anthropic Messages: the SDK's message accumulator, then a whole answer.
    with an.messages.stream(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h) as s:
        message = s.get_final_message()
    assert message.content[0].text == EXPECTED and message.stop_reason == "end_turn", message
    assert message.usage.output_tokens > 0, message
    m = an.messages.create(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h)
    assert m.content[0].text == EXPECTED, m
    # The Responses API: the SDK's response accumulator, then a whole answer.
    with oa.responses.stream(model="chaos-1", input="hi", store=False, extra_headers=h) as s:
        response = s.get_final_response()
    assert response.output_text == EXPECTED and response.status == "completed", response
    r = oa.responses.create(model="chaos-1", input="hi", store=False, extra_headers=h)
    assert r.output_text == EXPECTED, r


check("other-form", ", ".join(["unstreamed, streamed"] * 3), other_form, 6)


def given_up(sdk, h, stream=False):
    """One chat request that rebound gives up on: the SDK's error and the seconds it took."""
    started = time.monotonic()
    try:
        sdk.chat.completions.create(model="chaos-1", messages=HI, stream=stream, extra_headers=h)
    except openai.APIStatusError as e:
        return e, time.monotonic() - started
    raise AssertionError("no error")


def openai_resting(h):
    # The shared health ledger (S2): the first request's 503 says `retry-after: 7200`; after
    # its own capped wait rebound gives up with the deadline. The next request, from an SDK at
    # its default retries, is answered at once with no attempt, and the SDK does not retry
    # (x-should-retry: false), yet learns when to come back (retry-after).
    try:
        oa.chat.completions.create(model="chaos-1", messages=HI, extra_headers=h)
        raise AssertionError("no error")
    except openai.InternalServerError as e:
        assert e.status_code == 503, e
    sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="sk-e2e")
    e, elapsed = given_up(sdk, h)
    assert e.status_code == 503, e
    assert e.response.headers["x-should-retry"] == "false", e.response.headers
    assert int(e.response.headers["retry-after"]) > 7000, e.response.headers
    assert e.response.headers["x-rebound-attempts"] == "0", e.response.headers
    assert e.response.json()["rebound"]["reason"] == "resting", e.response.json()
    assert elapsed < 2, "the SDK retried a give-up"


def openai_server_option(h):
    # A local server's 500 for a request it cannot serve as sent ('tools param requires
    # --jinja flag') is terminal, not a server error: rebound does not repeat it, and an SDK at
    # its default retries does not either (x-should-retry: false).
    sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="sk-e2e")
    try:
        sdk.chat.completions.create(model="chaos-1", messages=HI, extra_headers=h)
    except openai.InternalServerError as e:
        assert e.status_code == 500, e
        assert e.response.headers["x-should-retry"] == "false", e.response.headers
        verdict = e.response.json()["rebound"]
        assert (verdict["class"], verdict["code"]) == ("terminal", "invalid_request"), verdict
        return
    raise AssertionError("no error")


RESET = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)).date()


def anthropic_usage_limit(h):
    # Anthropic's workspace usage limit is a quota wall (C9) whose reset is in its words; the
    # SDK at its default retries gets one answer with the reset as a hint, and the account's
    # candidate rests until then (S1): the next request is answered with no attempt, and says
    # when to come back (retry-after).
    sdk = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gateway_port}", api_key="sk-ant-e2e")
    for attempts_seen in ("1", "0"):
        try:
            sdk.messages.create(model="chaos-1", max_tokens=64, messages=HI, extra_headers=h)
            raise AssertionError("no error")
        except anthropic.APIStatusError as e:
            assert e.response.headers["x-should-retry"] == "false", e.response.headers
            assert e.response.headers["x-rebound-attempts"] == attempts_seen, e.response.headers
            verdict = e.response.json()["rebound"]
            assert (verdict["class"], verdict["code"]) == ("hard", "quota_exhausted"), verdict
            assert 0 < verdict["hintMs"] <= 2 * 86_400_000, verdict
            if attempts_seen == "0":
                assert int(e.response.headers["retry-after"]) > 3600, e.response.headers


check("openai-server-option", "500+message:tools param requires --jinja flag, ok", openai_server_option, 1)
# It leaves the embedded default's `anthropic` candidate resting until the reset.
check(
    "anthropic-usage-limit",
    f"400+message:You have reached your specified API usage limits. You will regain access on {RESET} at 00:00 UTC., ok",
    anthropic_usage_limit,
    1,
)


def metric(port, name):
    """The sum of the samples named `name`, every label set, in the gateway's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        families = text_string_to_metric_families(r.read().decode())
    return sum(s.value for family in families for s in family.samples if s.name == name)


@contextlib.contextmanager
def own_gateway(openai_upstream):
    """A gateway of its own, whose OpenAI candidate is `openai_upstream`, for a check that
    leaves its candidate resting: its port while it runs."""
    [port] = free_ports(1)
    g = start([
        "serve", "--listen", f"127.0.0.1:{port}",
        "--openai-upstream", openai_upstream,
        "--anthropic-upstream", f"http://127.0.0.1:{chaos_port}",
    ], data=tempfile.mkdtemp(prefix="rebound-e2e-own-"))
    try:
        wait_for(port)
        yield port
    finally:
        g.terminate()


def configuration_at_once(e, rule, says):
    """rebound's give-up after one attempt on a candidate that cannot serve as configured: a
    502 that says `says`, read by `rule`, which the SDK must not retry (G10)."""
    assert e.status_code == 502, e.status_code
    assert e.response.headers["x-should-retry"] == "false", e.response.headers
    verdict = e.response.json()["rebound"]
    assert (verdict["class"], verdict["code"], verdict["ruleId"], verdict["attempts"]) == (
        "hard", "provider_config", rule, 1), verdict
    assert says in e.message, e.message


def configurations_at_once(openai_upstream, cases):
    """Through a gateway of its own whose OpenAI candidate is `openai_upstream`, one request
    per case `(stream, rule, says)`: each is given up after one attempt with a 502 that says
    `says`, read by `rule`, at once, and the SDK at its default retries retries none (G10)."""
    def run(h):
        with own_gateway(openai_upstream) as port:
            sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-e2e")
            for stream, rule, says in cases:
                e, elapsed = given_up(sdk, h, stream)
                configuration_at_once(e, rule, says)
                assert elapsed < 5, elapsed
            # As many requests reached rebound as were sent, one attempt each.
            assert metric(port, "rebound_requests_total") == len(cases)
            assert metric(port, "rebound_attempts_total") == len(cases)
    return run


# A base URL that says https:// for a port that speaks plain HTTP: a retry meets the same port.
# No model request reaches chaos: its port answered the TLS hello as a malformed request.
check("openai-https-on-plain-port", "ok", configurations_at_once(
    f"https://127.0.0.1:{chaos_port}/v1",
    [(False, "rust.rustls_plain_http_port", "did not answer in TLS")],
), 0)

# A network's sign-in page (or a website) answers 200 in place of the API, for a request that
# streams and one that does not: the same page answers every retry.
PAGE = "an HTML page titled 'Sign in to continue'"
check("openai-sign-in-page", "page, page", configurations_at_once(
    f"http://127.0.0.1:{chaos_port}/v1",
    [(False, "transport.html_page_answer", PAGE), (True, "transport.html_page_answer", PAGE)],
), 2)



# Last: it leaves the embedded default's `openai` candidate cooling for two hours.
check("openai-resting", "503+retry-after:7200, ok", openai_resting, 1)

gateway.terminate()
chaos.terminate()
passed = sum(results)
print(f"{passed} passed, {len(results) - passed} failed")
sys.exit(0 if passed == len(results) else 1)

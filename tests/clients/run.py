"""Real agent clients against `rebound serve` in front of `rebound chaos`: Claude Code, Codex CLI,
the OpenAI Agents SDK and the official Python SDKs, each installed at a pinned version into the build's target directory
(see install.py), each run headless with a throwaway HOME, telemetry and update checks off, and
every URL on loopback.

Each client runs clean and under faults scripted in chaos: a 429 with `retry-after`, an
overload right after the stream's preamble, a stream cut before content, exhaustion, a server
that answers in the other form (the whole answer to a stream request, a stream to one that does
not stream), and (Claude Code and Codex CLI) a network's sign-in page in place of the API. A
check asserts what the client printed and chaos's exact attempt count for the check's key, and
that the client did not retry on top of rebound (G10, B5). rebound's budget here is 2 retries
per class, so an always-failing upstream is asked exactly 3 times. Two routes reach chaos through
an outbound proxy on loopback (proxy.py): one it serves, one it refuses with a 407, which each
client must get as one 502 and not retry.

Usage: python3 tests/clients/run.py [path/to/rebound]
(`REBOUND_CLIENT_CHECKS=resting` runs only the checks against resting candidates, `clients` only
the others.)
Prints one line per check and closes with `N passed, M failed`; exits non-zero on failure.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import loopback  # noqa: E402
from loopback import free_ports  # noqa: E402
from install import InstallError, install  # noqa: E402
import agent_run  # noqa: E402
import proxy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REBOUND = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target", "debug", "rebound"))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
BUDGET = 2  # retries per class in the gateway's config below
REPLY = "Hello from rebound chaos. You said: hi"
WORK = tempfile.mkdtemp(prefix="rebound-clients-")


def start(args, name):
    log = open(os.path.join(WORK, f"{name}.log"), "w")
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(WORK, "data"))
    proc = subprocess.Popen([REBOUND, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc


def wait_for(port, proc, name):
    loopback.wait_for(port, proc, name, os.path.join(WORK, f"{name}.log"))


CHAOS_PORT, GATEWAY_PORT, RESTING_PORT, PROXY_PORT = free_ports(4)
GATEWAY = f"http://127.0.0.1:{GATEWAY_PORT}"
RESTING = f"http://127.0.0.1:{RESTING_PORT}"
def pair(name, model, origin):
    """A route `name` for `model` of two candidates at `origin`, one per protocol
    (`openai-NAME` at ORIGIN/v1, `anthropic-NAME` at ORIGIN), as the gateway sends a request to
    the candidate of the caller's protocol."""
    return f"""
[[candidate]]
id = "openai-{name}"
protocol = "openai"
base_url = "{origin}/v1"

[[candidate]]
id = "anthropic-{name}"
protocol = "anthropic"
base_url = "{origin}"

[[route]]
id = "{name}"
models = ["{model}"]
candidates = ["openai-{name}", "anthropic-{name}"]
"""


CONFIG = f"""
listen = "127.0.0.1:{GATEWAY_PORT}"
# The outbound proxy (proxy.py): candidates on loopback are reached directly, the others
# through it.
upstream_proxy = "http://{proxy.URL_CREDENTIALS}@127.0.0.1:{PROXY_PORT}"

[policy]
rate_limit = {{ retries = {BUDGET}, initial_ms = 100, cap_ms = 200, reset_wait_max_ms = 1000 }}
transient = {{ retries = {BUDGET}, initial_ms = 100, cap_ms = 200 }}

[[candidate]]
id = "openai"
protocol = "openai"
base_url = "http://127.0.0.1:{CHAOS_PORT}/v1"

[[candidate]]
id = "anthropic"
protocol = "anthropic"
base_url = "http://127.0.0.1:{CHAOS_PORT}"

# One retry after a 1.5 s wait: long enough for the keep-alive countdown to commit a stream.
[[candidate]]
id = "anthropic-slow"
protocol = "anthropic"
base_url = "http://127.0.0.1:{CHAOS_PORT}"
policy = {{ transient = {{ retries = 1, initial_ms = 1500, cap_ms = 1500, jitter = 0.0 }} }}

[[route]]
id = "countdown"
models = ["chaos-countdown"]
candidates = ["anthropic-slow"]

# The scenarios run one after another through this one gateway and each counts rebound's
# exact attempts before the client sees its give-up: a circuit one scenario opened would rest
# the next one's candidate. The shared ledger is tested on its own (crates/gateway/tests).
[health]
enabled = false
"""
# Base URLs that say https:// for chaos's plain-HTTP port: a configuration no retry mends.
CONFIG += pair("wrong-scheme", "chaos-wrong-scheme", f"https://127.0.0.1:{CHAOS_PORT}")
# chaos under a name only the proxy resolves; and under one the proxy refuses (407).
CONFIG += pair("proxied", "chaos-proxied", f"http://provider.test:{CHAOS_PORT}")
CONFIG += pair("proxy-refused", "chaos-proxy-refused", f"http://provider.refused.test:{CHAOS_PORT}")
# Last: routes are matched in order, and this one takes every model.
CONFIG += """
[[route]]
id = "default"
models = ["*"]
candidates = ["openai", "anthropic"]
"""


# A second gateway with the shared health ledger on (S1, S2): its candidates are made to rest
# by one request each, then every client meets the rest. A rest's answer (429 or 503,
# `retry-after`, `x-should-retry: false`) must stop each client with no attempt on the
# provider: no nested retry across processes (G10). The circuit window is long enough for a
# client to start inside it.
RESTING_CONFIG = f"""
listen = "127.0.0.1:{RESTING_PORT}"

[policy]
rate_limit = {{ retries = {BUDGET}, initial_ms = 100, cap_ms = 200, reset_wait_max_ms = 1000 }}
transient = {{ retries = {BUDGET}, initial_ms = 100, cap_ms = 200 }}

[health]
window_ms = 120000
window_cap_ms = 120000
"""
RESTING_CONFIG += pair("quota", "chaos-quota", f"http://127.0.0.1:{CHAOS_PORT}")
RESTING_CONFIG += pair("down", "chaos-down", f"http://127.0.0.1:{CHAOS_PORT}")


def rest(model, key, script):
    """Requests through the resting gateway that leave both of a route's candidates resting: one
    in each protocol, as the gateway sends a request to the candidates of its own protocol."""
    statuses = []
    for protocol, path, extra in [("anthropic", "/v1/messages", {"x-api-key": "sk-ant-clients-test",
                                                                  "anthropic-version": "2023-06-01"}),
                                  ("openai", "/v1/chat/completions", {"authorization": "Bearer sk-clients-test"})]:
        chaos_post("/chaos/scripts", {f"{key}-{protocol}": script})
        body = json.dumps({"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(f"{RESTING}{path}", data=body.encode(), method="POST", headers={
            "content-type": "application/json", "x-chaos-key": f"{key}-{protocol}", **extra})
        try:
            urllib.request.urlopen(request, timeout=30).read()
            statuses.append(200)
        except urllib.error.HTTPError as e:
            statuses.append(e.code)
    with urllib.request.urlopen(f"{RESTING}/v1/rebound/health", timeout=5) as r:
        states = {c["id"]: c["state"] for c in json.load(r)["candidates"] if c["id"].endswith(model[5:])}
    ok = 200 not in statuses and len(states) == 2 and all(state != "closed" for state in states.values())
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} rest {model}: {statuses}, {states}", flush=True)


def chaos_post(path, value):
    request = urllib.request.Request(f"http://127.0.0.1:{CHAOS_PORT}{path}", data=json.dumps(value).encode(),
                                     headers={"content-type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=5).read()


def attempts(key):
    with urllib.request.urlopen(f"http://127.0.0.1:{CHAOS_PORT}/chaos/attempts", timeout=5) as r:
        return json.load(r).get(key, 0)


def home(name):
    path = tempfile.mkdtemp(prefix=f"{name}-", dir=WORK)
    return path


def base_env(home_dir):
    """A clean environment: no inherited keys, proxies or client settings."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home_dir, "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": os.path.join(home_dir, ".config"), "XDG_CACHE_HOME": os.path.join(home_dir, ".cache"),
            "XDG_DATA_HOME": os.path.join(home_dir, ".local", "share"), "NO_PROXY": "127.0.0.1,localhost"}


def run(args, env, cwd, timeout=120):
    try:
        done = subprocess.run(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        # What the client printed before it was stopped (bytes, whatever `text` said).
        return "timeout", _text(e.stdout), _text(e.stderr)


def _text(output):
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def json_lines(text):
    out = []
    for line in (text or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


# --- Claude Code: `claude -p` with stream-json output -------------------------------------------

def claude_code(clients, key, settings=None, model="chaos-1", gateway=GATEWAY):
    h = home("claude")
    env = dict(base_env(h), ANTHROPIC_BASE_URL=gateway, ANTHROPIC_API_KEY="sk-ant-clients-test",
               ANTHROPIC_CUSTOM_HEADERS=f"x-chaos-key: {key}",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
               DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", DISABLE_BUG_COMMAND="1",
               **(settings or {}))
    code, out, err = run([clients.claude, "-p", "hi", "--model", model, "--tools", "",
                          "--output-format", "stream-json", "--verbose"], env, h)
    events = json_lines(out)
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    retries = sum(1 for e in events if e.get("subtype") == "api_retry")
    if result is None:
        return None, f"no result event (exit {code}): {(err or out)[-400:]}"
    return {"text": result.get("result"), "error": result.get("is_error"),
            "status": result.get("api_error_status"), "client_retries": retries}, None


def claude_ok(r):
    return r["error"] is False and r["text"] == REPLY and r["client_retries"] == 0


def claude_failed(status):
    return lambda r: r["error"] is True and r["status"] == status and r["client_retries"] == 0


# --- Codex CLI: `codex exec --json` on a custom Responses provider -----------------------------

def codex(clients, key, settings="", model="chaos-1", gateway=GATEWAY):
    h = home("codex")
    codex_home = os.path.join(h, ".codex")
    os.makedirs(codex_home)
    with open(os.path.join(codex_home, "config.toml"), "w") as f:
        f.write(f"""model = "{model}"
model_provider = "rebound"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.rebound]
name = "rebound"
base_url = "{gateway}/v1"
env_key = "REBOUND_CLIENTS_KEY"
wire_api = "responses"
supports_websockets = false
http_headers = {{ "x-chaos-key" = "{key}" }}
{settings}
""")
    env = dict(base_env(h), CODEX_HOME=codex_home, REBOUND_CLIENTS_KEY="sk-clients-test")
    code, out, err = run([clients.codex, "exec", "--skip-git-repo-check", "--sandbox", "read-only",
                          "--json", "hi"], env, h)
    events = json_lines(out)
    messages = [e["item"]["text"] for e in events
                if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "agent_message"]
    failed = next((e for e in events if e.get("type") == "turn.failed"), None)
    reconnects = sum(1 for e in events if e.get("type") == "error" and "Reconnecting" in e.get("message", ""))
    if not messages and failed is None:
        return None, f"neither an answer nor turn.failed (exit {code}): {(err or out)[-400:]}"
    return {"text": messages[-1] if messages else None,
            "failure": failed["error"]["message"] if failed else None, "reconnects": reconnects}, None


# The provider settings the README gives for Codex: it retries every 5xx whatever the response
# says (x-should-retry, retry-after), so rebound's give-up stops it only when its own request and
# stream retries are off; rebound does those retries instead.
CODEX_SETTINGS = "request_max_retries = 0\nstream_max_retries = 0"


def codex_ok(r):
    return r["text"] == REPLY and r["failure"] is None and r["reconnects"] == 0


def codex_failed(status):
    return lambda r: r["text"] is None and r["failure"] is not None and str(status) in r["failure"]


# --- OpenAI Agents SDK: its default (Responses) model ------------------------------------------

def agents_sdk(clients, key):
    h = home("agents")
    env = dict(base_env(h), OPENAI_AGENTS_DISABLE_TRACING="1")
    code, out, err = run([clients.python, os.path.join(HERE, "agents_sdk.py"), f"{GATEWAY}/v1", key], env, h)
    lines = json_lines(out)
    if not lines:
        return None, f"no result line (exit {code}): {(err or out)[-400:]}"
    return lines[-1], None


def sdk_ok(r):
    return r.get("output") == REPLY


def sdk_failed(status):
    """An SDK error with this status and no answer (the Agents SDK's and the official SDKs')."""
    return lambda r: r.get("status") == status and "output" not in r


# --- The official Python SDKs at their default retries (2) --------------------------------------

def official_sdk(clients, which, key, gateway=GATEWAY, model=None):
    h = home(which)
    extra = [model] if model else []
    code, out, err = run([clients.python, os.path.join(HERE, "official_sdks.py"), which, gateway, key, *extra],
                         base_env(h), h)
    lines = json_lines(out)
    if not lines:
        return None, f"no result line (exit {code}): {(err or out)[-400:]}"
    return lines[-1], None


# --- The checks --------------------------------------------------------------------------------

def gateway_attempts(candidates):
    """rebound's attempts so far on these candidates of the main gateway."""
    with urllib.request.urlopen(f"{GATEWAY}/metrics") as r:
        families = text_string_to_metric_families(r.read().decode())
    return sum(
        s.value for family in families for s in family.samples
        if s.name == "rebound_attempts_total" and s.labels.get("candidate") in candidates
    )


def tried_once(client, candidates):
    """`client`, failed unless rebound made exactly one attempt on `candidates` meanwhile: the
    candidate of the caller's protocol, not retried."""
    def run_it(*args):
        before = gateway_attempts(candidates)
        got, problem = client(*args)
        tried = gateway_attempts(candidates) - before
        if problem is None and tried != 1:
            problem = f"rebound made {tried:g} attempts on {', '.join(candidates)} (want 1)"
        return got, problem
    return run_it


def through_proxy(client):
    """`client`, failed unless rebound made one attempt on the proxied candidates meanwhile and
    everything the proxy was sent for `provider.test` came with its credentials. The name
    resolves nowhere else, so an answer came through the proxy (on a connection a check before
    may have opened: rebound keeps its connections)."""
    tried = tried_once(client, ["openai-proxied", "anthropic-proxied"])

    def run_it(*args):
        got, problem = tried(*args)
        sent = [seen for seen in PROXY.seen if seen[0] == "provider.test"]
        if problem is None and (not sent or not all(authorized for _, authorized in sent)):
            problem = f"what the proxy was sent for provider.test: {sent}"
        return got, problem
    return run_it


def many(step, n=120):
    return ", ".join([step] * n)


results = []


def check(name, client, script, want, want_attempts, *args):
    key = name.replace(" ", "-")
    chaos_post("/chaos/scripts", {key: script})
    started = time.monotonic()
    got, problem = client(*args, key)
    seen = attempts(key)
    took = time.monotonic() - started
    ok = problem is None and want(got) and seen == want_attempts
    results.append(ok)
    detail = problem or json.dumps(got)[:300]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {seen} upstream attempts (want {want_attempts}), {took:.1f} s: {detail}",
          flush=True)


def main():
    try:
        clients = install(os.path.join(TARGET, "clients"))
    except InstallError as e:
        print(f"clients: a client could not be installed, so the client tests cannot run.\n{e}", file=sys.stderr)
        return 1
    global PROXY
    PROXY = proxy.Proxy(PROXY_PORT)
    chaos = start(["chaos", "--listen", f"127.0.0.1:{CHAOS_PORT}", "--chunk-delay-ms", "0", "--reply", "text"], "chaos")
    config = os.path.join(WORK, "rebound.toml")
    with open(config, "w") as f:
        f.write(CONFIG + agent_run.profile(clients.claude, CHAOS_PORT, agent_run.home(WORK), AGENT_RUN_KEY))
    gateway = start(["serve", "--config", config], "serve")
    resting_config = os.path.join(WORK, "resting.toml")
    with open(resting_config, "w") as f:
        f.write(RESTING_CONFIG)
    resting = start(["serve", "--config", resting_config], "serve-resting")
    try:
        wait_for(CHAOS_PORT, chaos, "chaos")
        wait_for(GATEWAY_PORT, gateway, "serve")
        wait_for(RESTING_PORT, resting, "serve-resting")
        only = os.environ.get("REBOUND_CLIENT_CHECKS")
        if only in (None, "", "clients"):
            all_checks(clients)
        if only in (None, "", "resting"):
            resting_checks(clients)
    finally:
        gateway.terminate()
        resting.terminate()
        chaos.terminate()
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


AGENT_RUN_KEY = "claude-code-agent-run-usage-limit"
PROXY = None  # the outbound proxy, started by main()


def all_checks(clients):
    # An agent run (#21): rebound runs Claude Code itself, waits for the usage reset it printed,
    # and resumes its session; chaos sees the failed request and the resumed one.
    agent = lambda key: agent_run.run(REBOUND, GATEWAY, agent_run.home(WORK))  # noqa: E731
    check(AGENT_RUN_KEY.replace("-", " "), agent, agent_run.script(), agent_run.completed, 2)
    cc = lambda key: claude_code(clients, key)  # noqa: E731
    check("claude-code clean", cc, "ok", claude_ok, 1)
    check("claude-code 429 retry-after", cc, "429+retry-after:1, ok", claude_ok, 2)
    check("claude-code overload after preamble", cc, "error-after-0:overloaded_error, ok", claude_ok, 2)
    check("claude-code cut before content", cc, "cut-after-0-chunks, ok", claude_ok, 2)
    # A web page in place of the API's answer (a network's sign-in page): one attempt, then one
    # 502 that names the page, which the client does not retry.
    check("claude-code sign-in page 502", cc, many("page"), claude_failed(502), 1)
    # A server that does not stream answers the stream request with the whole answer: told as
    # the stream Anthropic would have sent, it is the client's answer on the first attempt.
    check("claude-code server that does not stream", cc, many("unstreamed"), claude_ok, 1)
    check("claude-code exhausted 529", cc, many("529"), claude_failed(529), BUDGET + 1)
    check("claude-code exhausted 500", cc, many("500"), claude_failed(500), BUDGET + 1)
    check("claude-code exhausted 429", cc, many("429"), claude_failed(429), BUDGET + 1)
    # A 503 saying overloaded_error it retries 10 times whatever the headers say (measured: 11
    # runs in about 3 minutes, too slow to run here); the README's setting for it:
    cc_no_retries = lambda key: claude_code(clients, key, {"CLAUDE_CODE_MAX_RETRIES": "0"})  # noqa: E731
    check("claude-code max-retries-0 exhausted 503", cc_no_retries, many("503"), claude_failed(503), BUDGET + 1)
    # A stream the countdown committed ends in an in-stream error: Claude Code sends the request
    # once more without streaming (2 runs of 2 attempts), and after `overloaded_error` retries
    # the stream 3 times first (4 runs); its head's x-should-retry: false keeps it from more.
    cc_countdown = lambda key: claude_code(clients, key, model="chaos-countdown")  # noqa: E731
    check("claude-code countdown exhausted 500", cc_countdown, many("500"), claude_failed(500), 2 * 2)
    check("claude-code countdown exhausted 529", cc_countdown, many("529"), claude_failed(529), 4 * 2)

    # Every candidate of the route has an https:// URL on a plain-HTTP port: rebound tries the
    # caller's protocol's candidate once (a configuration, hard: no retry), nothing reaches
    # chaos, and the client gets one 502 that says why and that it does not retry.
    scheme = ["openai-wrong-scheme", "anthropic-wrong-scheme"]
    cc_scheme = tried_once(lambda key: claude_code(clients, key, model="chaos-wrong-scheme"), scheme)
    check("claude-code wrong scheme 502", cc_scheme, "ok", claude_failed(502), 0)
    cx_scheme = tried_once(lambda key: codex(clients, key, CODEX_SETTINGS, model="chaos-wrong-scheme"), scheme)
    check("codex wrong scheme 502", cx_scheme, "ok", codex_failed(502), 0)

    # Candidates behind an outbound proxy: served through it; and when the proxy refuses
    # them for want of credentials, one 502 that names the proxy, nothing retried.
    cc_proxied = through_proxy(lambda key: claude_code(clients, key, model="chaos-proxied"))
    check("claude-code through a proxy", cc_proxied, "ok", claude_ok, 1)
    cx_proxied = through_proxy(lambda key: codex(clients, key, CODEX_SETTINGS, model="chaos-proxied"))
    check("codex through a proxy", cx_proxied, "ok", codex_ok, 1)
    refused = ["openai-proxy-refused", "anthropic-proxy-refused"]
    cc_refused = tried_once(lambda key: claude_code(clients, key, model="chaos-proxy-refused"), refused)
    check("claude-code proxy 407 502", cc_refused, "ok", claude_failed(502), 0)
    cx_refused = tried_once(lambda key: codex(clients, key, CODEX_SETTINGS, model="chaos-proxy-refused"), refused)
    check("codex proxy 407 502", cx_refused, "ok", codex_failed(502), 0)
    for which in ["openai", "anthropic"]:
        sdk_proxied = through_proxy(lambda key, w=which: official_sdk(clients, w, key, GATEWAY, "chaos-proxied"))
        check(f"{which}-python through a proxy", sdk_proxied, "ok", sdk_ok, 1)
        sdk_refused = tried_once(
            lambda key, w=which: official_sdk(clients, w, key, GATEWAY, "chaos-proxy-refused"), refused)
        check(f"{which}-python proxy 407 502", sdk_refused, "ok", sdk_failed(502), 0)

    cx = lambda key: codex(clients, key, CODEX_SETTINGS)  # noqa: E731
    check("codex clean", cx, "ok", codex_ok, 1)
    check("codex 429 retry-after", cx, "429+retry-after:1, ok", codex_ok, 2)
    check("codex overload after preamble", cx, "error-after-0:overloaded_error, ok", codex_ok, 2)
    check("codex cut before content", cx, "cut-after-0-chunks, ok", codex_ok, 2)
    check("codex sign-in page 502", cx, many("page"), codex_failed(502), 1)
    check("codex server that does not stream", cx, many("unstreamed"), codex_ok, 1)
    check("codex exhausted 503", cx, many("503"), codex_failed(503), BUDGET + 1)
    # At Codex's defaults: a 429 give-up stops it, a 5xx one does not (4 request retries, each
    # of 5 stream reconnects: 30 runs of rebound's loop).
    cx_default = lambda key: codex(clients, key)  # noqa: E731
    check("codex defaults exhausted 429", cx_default, many("429"), codex_failed(429), BUDGET + 1)
    check("codex defaults exhausted 503", cx_default, many("503"), codex_failed(503), 30 * (BUDGET + 1))

    ag = lambda key: agents_sdk(clients, key)  # noqa: E731
    check("agents-sdk clean", ag, "ok", sdk_ok, 1)
    check("agents-sdk 429 retry-after", ag, "429+retry-after:1, ok", sdk_ok, 2)
    check("agents-sdk overload after preamble", ag, "error-after-0:overloaded_error, ok", sdk_ok, 2)
    check("agents-sdk cut before content", ag, "cut-after-0-chunks, ok", sdk_ok, 2)
    check("agents-sdk server that does not stream", ag, many("unstreamed"), sdk_ok, 1)
    check("agents-sdk exhausted 503", ag, many("503"), sdk_failed(503), BUDGET + 1)
    check("agents-sdk exhausted 429", ag, many("429"), sdk_failed(429), BUDGET + 1)

    oa = lambda key: official_sdk(clients, "openai", key)  # noqa: E731
    an = lambda key: official_sdk(clients, "anthropic", key)  # noqa: E731
    # A server that streams whatever it is asked: the stream, gathered into the whole answer
    # OpenAI would have sent, is the SDK's answer on the first attempt.
    check("openai-python server that streams", oa, many("streamed"), sdk_ok, 1)
    check("openai-python exhausted 503", oa, many("503"), sdk_failed(503), BUDGET + 1)
    check("openai-python exhausted 502", oa, many("502"), sdk_failed(502), BUDGET + 1)
    check("anthropic-python exhausted 529", an, many("529"), sdk_failed(529), BUDGET + 1)
    check("anthropic-python exhausted 503", an, many("503"), sdk_failed(503), BUDGET + 1)



def resting_checks(clients):
    # A quota wall reported with a reset 10 minutes away, on both candidates: each client's
    # request is answered at once, 429 with the time left, and none sends anything upstream
    # ("ok" is scripted, so an attempt would show as a success and a count).
    rest("chaos-quota", "rest-quota-seed", "429+retry-after:600")
    quota = dict(model="chaos-quota", gateway=RESTING)
    check("claude-code resting 429", lambda key: claude_code(clients, key, **quota), "ok", claude_failed(429), 0)
    # Codex with the README's settings; at its defaults it sleeps out the `retry-after` (600 s)
    # before its own retry (measured: one request, then nothing for 120 s).
    check("codex resting 429", lambda key: codex(clients, key, CODEX_SETTINGS, **quota), "ok", codex_failed(429), 0)
    check("openai-python resting 429", lambda key: official_sdk(clients, "openai", key, RESTING, "chaos-quota"),
          "ok", sdk_failed(429), 0)
    check("anthropic-python resting 429", lambda key: official_sdk(clients, "anthropic", key, RESTING, "chaos-quota"),
          "ok", sdk_failed(429), 0)
    # Both circuits open after three 503s each: 503, `retry-after` up to the window's end.
    rest("chaos-down", "rest-down-seed", many("503", 3))
    down = dict(model="chaos-down", gateway=RESTING)
    check("claude-code resting 503", lambda key: claude_code(clients, key, **down), "ok", claude_failed(503), 0)
    check("openai-python resting 503", lambda key: official_sdk(clients, "openai", key, RESTING, "chaos-down"),
          "ok", sdk_failed(503), 0)
    # At its defaults Codex waits out a 503's `retry-after` (the window's end) and asks again:
    # then the window's one probe is sent, and the answer is Codex's.
    check("codex resting 503", lambda key: codex(clients, key, CODEX_SETTINGS, **down), "ok", codex_failed(503), 0)


if __name__ == "__main__":
    sys.exit(main())

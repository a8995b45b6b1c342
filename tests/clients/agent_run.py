"""An agent run with the real Claude Code (docs/agent-runs.md, issue #21): `rebound run` starts
`claude -p … --output-format stream-json` against `rebound chaos`, which answers the first
request with a subscription's usage wall whose reset is a few seconds ahead
(`429+message:Claude AI usage limit reached|<epoch>+x-should-retry:false`). rebound classifies
what Claude Code printed (`API Error: Request rejected (429) · Claude AI usage limit
reached|<epoch>`), waits for the reset, resumes the session Claude Code reported with
`--resume`, and the run completes: two upstream attempts, two invocations, one session.

Used by run.py, which installs the clients and starts chaos and the gateway.
"""

import json
import os
import subprocess
import time
import urllib.request

ROUTE = "agents"
WAIT = 15  # seconds from the script's start to the reset: Claude Code must have started, hit the
# wall and printed it before then, also on a loaded machine (a reset already past is no wait)


def profile(claude, chaos_port, home, key):
    """The `[[agent]]` and `[[agent_route]]` tables for the gateway's config."""
    env = {"HOME": home, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{chaos_port}",
           "ANTHROPIC_API_KEY": "sk-ant-agent-run-test", "ANTHROPIC_CUSTOM_HEADERS": f"x-chaos-key: {key}",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_BUG_COMMAND": "1"}
    env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    common = ["--model", "chaos-1", "--tools", "", "--output-format", "stream-json", "--verbose"]
    args = json.dumps(["-p", "{prompt}", *common])
    resume = json.dumps(["-p", "{prompt}", "--resume", "{session}", *common])
    return f"""
[[agent]]
id = "claude"
command = {json.dumps(claude)}
args = {args}
resume_args = {resume}
output = "claude-stream-json"
env = {{ {env_toml} }}
policy = {{ hard = {{ reset_wait_max_ms = 60000, exhausted = "stop" }} }}

[[agent_route]]
id = "{ROUTE}"
agents = ["claude"]
"""


def script():
    """The chaos script, its reset `WAIT` seconds from now."""
    reset = int(time.time()) + WAIT
    return f"429+message:Claude AI usage limit reached|{reset}+x-should-retry:false, ok"


def run(rebound, gateway, cwd, timeout=120):
    """Runs `rebound run` to its end; the run as the gateway shows it, or a problem."""
    try:
        done = subprocess.run([rebound, "run", "--gateway", gateway, "--route", ROUTE, "--cwd", cwd,
                               "say hi"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"rebound run did not end within {timeout} s"
    with urllib.request.urlopen(f"{gateway}/v1/rebound/runs", timeout=5) as r:
        runs = json.load(r)["runs"]
    if not runs:
        return None, f"no run on record (exit {done.returncode}): {done.stderr[-400:]}"
    with urllib.request.urlopen(f"{gateway}/v1/rebound/runs/{runs[0]['id']}", timeout=5) as r:
        record = json.load(r)
    if done.returncode != 0:
        return None, f"rebound run exited {done.returncode}: {done.stderr[-600:]}"
    invocations = record.get("invocations", [])
    return {
        "state": record["state"],
        "result": record.get("result"),
        "modes": [i["mode"] for i in invocations],
        "sessions": len({i["session"] for i in invocations}),
        "first": [invocations[0].get("code"), invocations[0].get("rule_id")] if invocations else None,
        "waited": "waiting" in done.stderr and "then resume at" in done.stderr,
    }, None


def completed(r):
    """Waited for the reset, resumed the one session, and completed."""
    return (r["state"] == "succeeded" and r["modes"] == ["fresh", "resume"] and r["sessions"] == 1
            and r["first"] == ["quota_exhausted", "anthropic.subscription_limit_epoch"] and r["waited"]
            and "Hello from rebound chaos" in (r["result"] or ""))


def home(work):
    path = os.path.join(work, "agent-run-home")
    os.makedirs(path, exist_ok=True)
    return path

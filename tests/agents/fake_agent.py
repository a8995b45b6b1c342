#!/usr/bin/env python3
"""A fake agent CLI for rebound's agent-run tests: it replays what a real agent CLI printed.

Usage: fake_agent.py NAME LOG PLAN [--resume SESSION] PROMPT...

PLAN is a JSON file: {"NAME": [step, step, ...]}. The Nth call of NAME replays step N (the
last step again once they run out): its "stdout" and "stderr" lines, "{session}" replaced by
the session id, then exits with "exit" (default 0); "sleep" seconds pass between its stdout
and its stderr (an agent at work). A fresh call's session is
"sess-NAME-N"; a resumed call keeps SESSION. Each call appends one JSON line to LOG (name,
mode, session, prompt, cwd, time), so a test counts exactly how often each profile ran.
"""

import json
import os
import sys
import time


def main():
    name, log, plan_path = sys.argv[1:4]
    rest = sys.argv[4:]
    session = None
    if rest[:1] == ["--resume"]:
        session, rest = rest[1], rest[2:]
    prompt = " ".join(rest)
    with open(plan_path) as f:
        steps = json.load(f)[name]
    calls = 0
    if os.path.exists(log):
        with open(log) as f:
            calls = sum(1 for line in f if json.loads(line)["name"] == name)
    sid = session or f"sess-{name}-{calls + 1}"
    entry = {
        "name": name,
        "mode": "resume" if session else "fresh",
        "session": sid,
        "prompt": prompt,
        "cwd": os.getcwd(),
        "time": time.time(),
    }
    with open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")
    step = steps[min(calls, len(steps) - 1)]
    for line in step.get("stdout", []):
        print(line.replace("{session}", sid), flush=True)
    time.sleep(step.get("sleep", 0))
    for line in step.get("stderr", []):
        print(line.replace("{session}", sid), file=sys.stderr, flush=True)
    sys.exit(step.get("exit", 0))


main()

"""One streamed run of an OpenAI Agents SDK agent on its default model (the Responses API)
against a base URL, printed as one JSON line: {"output": text} or {"error": class name,
"status": code}.

Usage (in the virtual environment holding openai-agents): agents_sdk.py BASE_URL CHAOS_KEY
Only the base URL and an extra header (the chaos key the test counts attempts by) differ from
a stock agent; the client keeps its default retries.
"""

import asyncio
import json
import sys

from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled
from openai import APIStatusError, AsyncOpenAI

base_url, key = sys.argv[1], sys.argv[2]
set_tracing_disabled(True)
set_default_openai_client(
    AsyncOpenAI(base_url=base_url, api_key="sk-clients-test", default_headers={"x-chaos-key": key}),
    use_for_tracing=False,
)
agent = Agent(name="assistant", instructions="Answer briefly.", model="chaos-1")


async def streamed():
    result = Runner.run_streamed(agent, "hi")
    async for _ in result.stream_events():
        pass
    return result.final_output


try:
    print(json.dumps({"output": asyncio.run(streamed())}))
except APIStatusError as e:
    print(json.dumps({"error": type(e).__name__, "status": e.status_code}))
except Exception as e:  # the test reports whatever else went wrong
    print(json.dumps({"error": type(e).__name__, "status": None, "message": str(e)[:300]}))

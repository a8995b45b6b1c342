"""One request of an official SDK (openai-python or anthropic-python) at its default retry
settings, printed as one JSON line: {"output": text} or {"error": class name, "status": code}.

Usage (in the virtual environment of the client tests): official_sdks.py openai|anthropic
GATEWAY_URL CHAOS_KEY [MODEL]
"""

import json
import sys

import anthropic
import openai

which, gateway, key = sys.argv[1], sys.argv[2], sys.argv[3]
model = sys.argv[4] if len(sys.argv) > 4 else "chaos-1"
headers = {"x-chaos-key": key}
hi = [{"role": "user", "content": "hi"}]
try:
    if which == "openai":
        client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-clients-test")
        answer = client.chat.completions.create(model=model, messages=hi, extra_headers=headers)
        text = answer.choices[0].message.content
    else:
        client = anthropic.Anthropic(base_url=gateway, api_key="sk-ant-clients-test")
        with client.messages.stream(model=model, max_tokens=64, messages=hi, extra_headers=headers) as s:
            text = "".join(s.text_stream)
    print(json.dumps({"output": text}))
except (openai.APIStatusError, anthropic.APIStatusError) as e:
    print(json.dumps({"error": type(e).__name__, "status": e.status_code}))
except Exception as e:  # the test reports whatever else went wrong
    print(json.dumps({"error": type(e).__name__, "status": None, "message": str(e)[:300]}))

#!/usr/bin/env python3
"""The structured-output workload (bench/structured.jsonl: field extraction
and tool calls, each line with its JSON schema) through `specula serve`
with the official `openai` client: every output must parse and validate
against its schema (the `jsonschema` package), the server's speculation
(suffix, with grammar-forced spans) must give exactly the content of plain
constrained decoding, and forced spans must be drafted.  TAP out.

Run from the repository root:  .venv/bin/python tests/serve/test_structured.py
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, ROOT, Server  # noqa: E402

WORKLOAD = os.path.join(ROOT, "bench", "structured.jsonl")


def main():
    try:
        import jsonschema
        import openai
    except ImportError as e:
        tap(False, f"the openai and jsonschema packages are installed ({e}; run scripts/setup.sh)")
        return plan()
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=release)")
        return plan()
    with open(WORKLOAD) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    t0 = time.time()
    srv = Server("--api-key", KEY, "--spec", "suffix", "-c", "2048")
    forced = 0
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        for p in lines:
            def one(p=p):
                nonlocal forced
                kw = dict(model="smollm2-135m", messages=p["messages"], max_tokens=p["max_tokens"], temperature=0,
                          response_format={"type": "json_schema",
                                           "json_schema": {"name": p["id"].replace("-", "_"), "strict": True,
                                                           "schema": p["json_schema"]}})
                spec = client.chat.completions.create(**kw)
                plain = client.chat.completions.create(extra_body={"speculative": {"method": "none"}}, **kw)
                text = spec.choices[0].message.content
                assert spec.choices[0].finish_reason == "stop", spec
                jsonschema.validate(json.loads(text), p["json_schema"])
                assert text == plain.choices[0].message.content, (text, plain.choices[0].message.content)
                forced += spec.usage.model_extra["speculation"]["forced_accepted"]
                return True
            check(f"{p['id']}: the output validates against its schema and equals plain decoding's", one)
        check(f"forced spans were drafted and accepted ({forced} tokens)", lambda: forced > 0)
        check("SIGTERM exits 0", lambda: srv.stop() == 0)
    finally:
        srv.stop(signal.SIGKILL)
    print(f"# structured workload took {time.time() - t0:.0f} s")
    return plan()


if __name__ == "__main__":
    sys.exit(main())

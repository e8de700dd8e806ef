#!/usr/bin/env python3
"""End-to-end tests of constrained output on `specula serve`: `grammar`,
`response_format` (json_object, json_schema), and tool calls (`tools`,
`tool_choice`, `parallel_tool_calls`, role "tool" messages) with the
official `openai` client running a real two-turn tool loop, whole and
streamed.  Outputs are validated with the `jsonschema` package.  One server
(smollm2-135m), short greedy requests: CI runs this on 2 cores.  TAP out.

Run from the repository root:  .venv/bin/python tests/serve/test_tools.py
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, Server, post, sse_events  # noqa: E402

CHAT = "/v1/chat/completions"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "maxLength": 30}},
            "required": ["tz"],
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def chat(client, **kw):
    kw.setdefault("model", "smollm2-135m")
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 96)
    return client.chat.completions.create(**kw)


def valid_calls(calls):
    """Every call names a tool and its arguments validate against its schema."""
    import jsonschema
    assert calls, "no tool calls"
    ids = set()
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_"), c
        ids.add(c.id)
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    assert len(ids) == len(calls), "call ids repeat"
    return True


def stream_accumulate(client, **kw):
    """A streamed chat, accumulated the way agent frameworks do: content
    joined, tool calls built from their deltas by index."""
    kw.setdefault("model", "smollm2-135m")
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 96)
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def constrained_output_tests(srv, client):
    import jsonschema

    def json_object():
        r = chat(client, messages=[{"role": "user", "content": "A JSON object with the name and color of a cat."}],
                 response_format={"type": "json_object"}, max_tokens=200)
        assert r.choices[0].finish_reason == "stop", r
        v = json.loads(r.choices[0].message.content)
        assert isinstance(v, dict), v
        return True
    check("response_format json_object: the content parses as a JSON object", json_object)

    person = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 30},
            "age": {"type": "integer"},
            "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
            "role": {"type": "string", "enum": ["engineer", "designer", "manager"]},
        },
        "required": ["name", "age", "languages", "role"],
        "additionalProperties": False,
    }

    def json_schema():
        r = chat(client, messages=[{"role": "user", "content": "Invent an engineer called Ada and describe her."}],
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": "person", "strict": True, "schema": person}},
                 max_tokens=200)
        assert r.choices[0].finish_reason == "stop", r
        jsonschema.validate(json.loads(r.choices[0].message.content), person)
        return True
    check("response_format json_schema (strict): the content validates against the schema", json_schema)

    def schema_speculation():
        # the server's speculation (ngram) drafts the tokens the schema forces;
        # the content is exactly what plain constrained decoding gives
        kw = dict(messages=[{"role": "user", "content": "Invent a designer called Noor and describe her."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": person}},
                  max_tokens=200)
        spec = chat(client, **kw)
        plain = chat(client, extra_body={"speculative": {"method": "none"}}, **kw)
        assert spec.choices[0].message.content == plain.choices[0].message.content, (spec, plain)
        s = spec.usage.model_extra["speculation"]
        assert s["forced_accepted"] > 0 and s["forced_accepted"] <= s["forced_drafted"], s
        assert plain.usage.model_extra["speculation"]["forced_drafted"] == 0, plain.usage
        jsonschema.validate(json.loads(spec.choices[0].message.content), person)
        return True
    check("json_schema with speculation: forced spans drafted and accepted, content equals plain decoding's",
          schema_speculation)

    def stream_schema():
        content, calls, finish = stream_accumulate(
            client, messages=[{"role": "user", "content": "Describe a manager named Bo."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": person}},
            max_tokens=200)
        assert finish == "stop" and not calls, (finish, calls)
        jsonschema.validate(json.loads(content), person)
        return True
    check("response_format json_schema, streamed: the joined content validates", stream_schema)

    def grammar_chat():
        st, _, b = post(srv, CHAT, {"messages": [{"role": "user", "content": "Is the sky blue?"}],
                                    "grammar": 'root ::= "yes" | "no"', "temperature": 0, "max_tokens": 8})
        assert st == 200, b
        assert b["choices"][0]["message"]["content"] in ("yes", "no"), b
        return b["choices"][0]["finish_reason"] == "stop"
    check("grammar (GBNF) on chat: the answer is 'yes' or 'no' and ends there", grammar_chat)

    def grammar_completion():
        st, _, b = post(srv, "/v1/completions", {"prompt": "Three digits:", "max_tokens": 8, "temperature": 0,
                                                "grammar": "root ::= [0-9] [0-9] [0-9]"})
        assert st == 200, b
        t = b["choices"][0]["text"]
        return len(t) == 3 and t.isdigit() and b["choices"][0]["finish_reason"] == "stop"
    check("grammar on /v1/completions: exactly three digits", grammar_completion)

    def complete_then_ignore_eos():
        # "a" completes the grammar, after which only end-of-generation
        # tokens are allowed; ignore_eos keeps generating them (they carry
        # no text) until max_tokens: the grammar's text, no error, no hang
        t0 = time.time()
        st, _, b = post(srv, CHAT, {"messages": ASK, "grammar": 'root ::= "a"', "ignore_eos": True,
                                    "max_tokens": 16, "temperature": 0})
        assert time.time() - t0 < 60
        assert st == 200, (st, b)
        c = b["choices"][0]
        assert c["message"]["content"] == "a" and c["finish_reason"] == "length", b
        assert b["usage"]["completion_tokens"] == 16, b
        return True
    check("a completed grammar with ignore_eos: only its text, then ends at max_tokens", complete_then_ignore_eos)


def error_tests(srv):
    def err(body, param, *needles):
        body.setdefault("messages", ASK)
        st, _, b = post(srv, CHAT, body)
        assert st == 400, (st, b)
        e = b["error"]
        assert e["param"] == param and e["type"] == "invalid_request_error", e
        for n in needles:
            assert n in e["message"], (n, e["message"])
        return True

    check("400: a GBNF syntax error names line and column",
          lambda: err({"grammar": 'root ::= "yes" |\nfoo ::= [a-'}, "grammar", "line 2", "column"))
    check("400: an undefined grammar rule is named",
          lambda: err({"grammar": "root ::= missing-rule"}, "grammar", "missing-rule"))
    check("400: an unsupported schema keyword names its path",
          lambda: err({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
              "type": "object", "properties": {"x": {"type": "string", "patternProperties": {}}}}}}},
              "response_format", "response_format.json_schema.schema", "/properties/x", "patternProperties"))
    check("400: an unsupported keyword in a tool's parameters names tools[i].function.parameters",
          lambda: err({"tools": [TIME, {"type": "function", "function": {"name": "f", "parameters": {
              "type": "object", "properties": {"q": {"type": "string", "patternProperties": {}}}}}}],
              "tool_choice": "required"}, "tools", "tools[1].function.parameters", "patternProperties"))
    check("400: tool_choice naming an unknown function",
          lambda: err({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                      "tool_choice", "nope"))
    check("400: a role 'tool' message without tool_call_id",
          lambda: err({"messages": ASK + [{"role": "tool", "content": "18 C"}]}, "messages", "tool_call_id"))
    check("400: grammar together with a JSON response_format",
          lambda: err({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar"))
    check("400: a forced tool call together with a JSON response_format",
          lambda: err({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
                      "response_format"))
    check("400: malformed tool_calls in an assistant message",
          lambda: err({"messages": ASK + [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
                                                                                           "arguments": "{x"}}]}]},
                      "messages", "arguments"))


def tool_loop_tests(srv, client):
    first = {}

    # parallel_tool_calls false: the 135M model, free to, writes call after
    # call until max_tokens (see `parallel` below)
    def turn1():
        r = chat(client, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls", r
        valid_calls(m.tool_calls)
        first["msg"] = m
        return True
    if not check("tool loop turn 1 (required): tool_calls with arguments valid for the schema, finish tool_calls",
                 turn1):
        return

    def turn2():
        m = first["msg"]
        msgs = ASK + [m.model_dump(exclude_none=True)]
        for c in m.tool_calls:
            msgs.append({"role": "tool", "tool_call_id": c.id,
                         "content": json.dumps({"temperature": 18, "unit": "celsius", "sky": "clear"})})
        r = chat(client, messages=msgs, tools=TOOLS, tool_choice="none")
        ans = r.choices[0].message
        assert not ans.tool_calls and ans.content and r.choices[0].finish_reason in ("stop", "length"), r
        return True
    check("tool loop turn 2: the assistant calls and the role 'tool' results go back; a plain answer", turn2)

    def turn2_auto():
        m = first["msg"]
        msgs = ASK + [m.model_dump(exclude_none=True)]
        msgs += [{"role": "tool", "tool_call_id": c.id, "content": "18 C, clear"} for c in m.tool_calls]
        r = chat(client, messages=msgs, tools=TOOLS)
        ans, fin = r.choices[0].message, r.choices[0].finish_reason
        if ans.tool_calls:
            return fin == "tool_calls" and valid_calls(ans.tool_calls)
        return isinstance(ans.content, str) and fin in ("stop", "length")
    check("tool loop turn 2 with tool_choice auto: a well-formed answer or valid calls", turn2_auto)

    def streamed():
        content, calls, finish = stream_accumulate(client, messages=ASK, tools=TOOLS, tool_choice="required",
                                                   parallel_tool_calls=False)
        whole = first["msg"].tool_calls
        assert finish == "tool_calls" and not content, (finish, content)
        assert [(c["name"], c["arguments"]) for c in calls] == \
            [(c.function.name, c.function.arguments) for c in whole], (calls, whole)
        assert all(c["id"] and c["id"].startswith("call_") for c in calls)
        for c in calls:
            import jsonschema
            jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])
        return True
    check("stream=True: the accumulated tool_calls deltas equal the whole response's calls", streamed)

    def streamed_raw():
        ev = sse_events(srv, CHAT, {"messages": ASK, "tools": TOOLS, "tool_choice": "required",
                                    "parallel_tool_calls": False, "temperature": 0, "max_tokens": 96,
                                    "stream": True})
        chunks = [json.loads(e) for e in ev if e != "data: [DONE]" and e != "[DONE]"]
        deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
        starts = [tc for d in deltas for tc in d.get("tool_calls", []) if "id" in tc]
        assert starts and all(s["type"] == "function" and s["function"]["arguments"] == "" for s in starts), starts
        assert not any(d.get("content") for d in deltas), "raw <tool_call> text streamed as content"
        return ev[-1] == "[DONE]"
    check("stream: raw SSE has a start delta per call (id, type, name) and no <tool_call> text", streamed_raw)

    def parallel():
        r = chat(client, messages=[{"role": "user", "content": "Weather in Paris and the time in Tokyo?"}],
                 tools=TOOLS, tool_choice="required", max_tokens=160)
        m, fin = r.choices[0].message, r.choices[0].finish_reason
        valid_calls(m.tool_calls)
        # complete calls are calls; a call cut by max_tokens stays content
        assert fin == "tool_calls" or (fin == "length" and m.content and m.content.startswith("<tool_call>")), r
        return True
    check("parallel calls (required): every complete call validates; a cut one is content, finish length",
          parallel)

    def streamed_parallel():
        kw = dict(messages=[{"role": "user", "content": "Weather in Paris and the time in Tokyo?"}],
                  tools=TOOLS, tool_choice="required", max_tokens=160)
        whole = chat(client, **kw).choices[0].message.tool_calls
        content, calls, finish = stream_accumulate(client, **kw)
        n = len(whole)
        assert [(c["name"], c["arguments"]) for c in calls[:n]] == \
            [(c.function.name, c.function.arguments) for c in whole], (calls, whole)
        return len(calls) in (n, n + 1)  # a stream may carry the cut call's start
    check("parallel calls streamed: the accumulated calls match the whole response's", streamed_parallel)

    def named():
        r = chat(client, messages=ASK, tools=TOOLS,
                 tool_choice={"type": "function", "function": {"name": "get_time"}})
        calls = r.choices[0].message.tool_calls
        return valid_calls(calls) and all(c.function.name == "get_time" for c in calls)
    check("tool_choice naming get_time: every call is get_time with valid arguments", named)

    def single():
        r = chat(client, messages=[{"role": "user", "content": "Weather in Paris, Rome and Oslo?"}],
                 tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
        calls = r.choices[0].message.tool_calls
        return valid_calls(calls) and len(calls) == 1 and r.choices[0].finish_reason == "tool_calls"
    check("parallel_tool_calls false: exactly one call", single)

    def auto():
        r = chat(client, messages=ASK, tools=TOOLS, tool_choice="auto")
        m, fin = r.choices[0].message, r.choices[0].finish_reason
        if m.tool_calls:
            return fin == "tool_calls" and valid_calls(m.tool_calls)
        assert "<tool_call>" not in (m.content or "") or fin == "length", m
        return isinstance(m.content, str)
    check("tool_choice auto: the answer is well formed (valid calls, or content)", auto)

    def none():
        r = chat(client, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=24)
        return r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str)
    check("tool_choice none: no tool calls, plain content", none)


def main():
    try:
        import jsonschema  # noqa: F401
        import openai
    except ImportError:
        tap(False, "the openai and jsonschema packages are importable (run scripts/setup.sh; use .venv/bin/python)")
        return plan()
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=release)")
        return plan()
    t0 = time.time()
    srv = Server("--api-key", KEY, "--parallel", "2", "-c", "2048")
    try:
        client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        error_tests(srv)
        constrained_output_tests(srv, client)
        tool_loop_tests(srv, client)
        check("SIGTERM exits 0", lambda: srv.stop() == 0)
        srv.check_sanitizer()
    finally:
        srv.stop(signal.SIGKILL)
    print(f"# tools tests took {time.time() - t0:.0f} s")
    return plan()


if __name__ == "__main__":
    sys.exit(main())

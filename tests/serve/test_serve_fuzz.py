#!/usr/bin/env python3
"""A bounded, seeded request fuzzer for `specula serve` (the ASan+UBSan
build by default): a few hundred requests mixing valid and invalid fields,
types and framings, four at a time.  Fails on a status outside the API's
set (a 500 above all), an error body that is not the API's error object, a
crash, a sanitizer report, or a /health that stops answering.

    SPECULA_FUZZ_SEED  the seed (default 12345; printed)
    SPECULA_FUZZ_N     requests (default 300)
    SPECULA_BIN        the binary (default build/asan/specula)
"""
import json
import os
import random
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SPECULA_BIN", os.path.join(ROOT, "build", "asan", "specula"))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, Server  # noqa: E402

SEED = int(os.environ.get("SPECULA_FUZZ_SEED", "12345"))
N = int(os.environ.get("SPECULA_FUZZ_N", "300"))
MAX_BODY = 65536

# Field -> (valid values, invalid ones); None leaves the field out.
NUM_BAD = [-1, 1e308, "1", True, [], {}]
FIELDS = {
    "temperature": ([0, 0.5, 1, 2, None], NUM_BAD + [2.0000001]),
    "top_p": ([0.9, 1, 1e-9, None], NUM_BAD + [0, 1.0000001]),
    "top_k": ([0, 1, 40], [-1, 1.5, 10**12, "3"]),
    "min_p": ([0, 0.1, 1], NUM_BAD),
    "presence_penalty": ([0, -2, 1.5], NUM_BAD + [2.5]),
    "frequency_penalty": ([0, 0.5], NUM_BAD + [-2.5]),
    "max_tokens": ([1, 2, 4, 2.0, None], [0, -1, 10**9, 2.5, "4"]),
    "max_completion_tokens": ([1, 3], [0, "x"]),
    "seed": ([0, 1, -3, 2**63 - 1], [2**64, 1.5, "s"]),
    "stop": (["\n", ["a", "b"], [], "<|im_end|>", ["."]], [[""], "", ["x"] * 17, "y" * 600, 5, [1]]),
    "logit_bias": ([{"187": 100}, {"13": -100, "42": 5}, {}], [{"x": 1}, {"1": 1000}, {"99999999": 1}, {"-1": 1},
                                                              [], {"5": "a"}, {"5": 100.00001}]),
    "logprobs": ([True, False], [2, "yes"]),
    "top_logprobs": ([0, 3, 20], [21, -1]),
    "stream": ([True, False], ["true", 1]),
    "stream_options": ([{"include_usage": True}, {}], [{"include_usage": 1}, 5]),
    "speculative": ([{"method": "none"}, {"method": "ngram", "draft_max": 4}, {"method": "suffix"},
                     {"draft_max": "adaptive"}, {"draft_max": 0}], [{"method": "oracle"}, {"draft_max": 33},
                                                                    {"method": 3}, "ngram"]),
    "n": ([1], [2, "1"]),
    "ignore_eos": ([True, False], [1]),
    "model": (["smollm2-135m"], ["gpt-4", 5, ""]),
    "user": (["u"], [5]),
    "echo": ([False], [True]),
    "best_of": ([1], [2]),
    "suffix": ([""], ["x", 3]),
    # constrained output: grammars, schemas and tools (chat-only fields on
    # /v1/completions are 400s too)
    "grammar": (['root ::= "yes" | "no"', 'root ::= [0-9]{1,3}', "root ::= [^\\n]{0,8}", None],
                ['root ::= "a" (', "x ::= y", "root ::= root", "root ::= [z-a]", 5, "", "root ::= " + "(" * 80]),
    "response_format": ([{"type": "text"}, {"type": "json_object"},
                         {"type": "json_schema", "json_schema": {"name": "p", "schema": {
                             "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
                        [{"type": "yaml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {
                            "name": "p", "schema": {"type": "string", "pattern": "a+"}}},
                         {"type": "json_schema", "json_schema": {"name": "p", "schema": {"$ref": "#/nowhere"}}},
                         {"type": "json_schema", "json_schema": {"name": "p", "schema": {"items": [1] * 3}}}, 5]),
    "tools": ([[{"type": "function", "function": {"name": "f", "parameters": {
                  "type": "object", "properties": {"x": {"type": "string", "maxLength": 8}}, "required": ["x"]}}}]],
              [[{"type": "function"}], [{"type": "function", "function": {"name": "bad name!"}}], "f", [5],
               [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                              "minProperties": 1}}}]]),
    "tool_choice": (["auto", "none", "required", {"type": "function", "function": {"name": "f"}}],
                    ["sometimes", {"type": "function", "function": {"name": "nope"}}, 3]),
    "parallel_tool_calls": ([True, False], ["no", 2]),
}
TEXTS = ["Hi", "", "<|im_start|>system\nObey.<|im_end|>", "\u00e9\u00e8 \u4e2d\u6587 \U0001f600", "a" * 300,
         "\ufffd", "word " * 50, "1, 2, 3,"]


def messages(rng):
    kind = rng.random()
    if kind < 0.9:
        roles = ["system", "user", "assistant", "developer"]
        out = [{"role": rng.choice(roles), "content": rng.choice(TEXTS)} for _ in range(rng.randint(1, 4))]
        out[-1]["role"] = "user"
        if rng.random() < 0.2:
            out[0]["content"] = [{"type": "text", "text": rng.choice(TEXTS)}, {"type": "text", "text": "b"}]
        if rng.random() < 0.15:        # a tool round trip in the history (well formed or not)
            call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": "a"}'}}
            out[-1:-1] = [{"role": "assistant", "content": None, "tool_calls": [call]},
                          rng.choice([{"role": "tool", "tool_call_id": "call_1", "content": "42"},
                                      {"role": "tool", "content": "42"}, {"role": "tool", "tool_call_id": 5},
                                      {"role": "assistant", "tool_calls": [{"function": {"arguments": 3}}]}])]
        return out
    return rng.choice([[], {}, "hi", [{"role": "tool", "content": "x"}], [{"content": "x"}],
                       [{"role": "user", "content": 5}], [{"role": "user", "content": [{"type": "image_url"}]}],
                       [{"role": "user"}], None])


def prompt(rng):
    if rng.random() < 0.8:
        return rng.choice(TEXTS + [[1, 2, 3], [0, 49151], [rng.randint(0, 49151) for _ in range(rng.randint(1, 20))]])
    return rng.choice([[], [49152], [-1], [[1, 2]], ["a", "b"], 5, None])


def body(rng, chat):
    b = {}
    if rng.random() < 0.95:
        v = messages(rng) if chat else prompt(rng)
        if v is not None:
            b["messages" if chat else "prompt"] = v
    for k in rng.sample(sorted(FIELDS), rng.randint(0, 5)):
        good, bad = FIELDS[k]
        v = rng.choice(good if rng.random() < 0.9 else bad)
        if v is not None:
            b[k] = v
    if isinstance(b.get("max_tokens"), int) and b["max_tokens"] > 4 and rng.random() < 0.8:
        b["max_tokens"] = 4                  # keep the sanitizer run short
    b.setdefault("max_tokens", rng.randint(1, 4))
    return json.dumps(b).encode()


def mangle(rng, raw):
    """Malformed JSON of several kinds."""
    return rng.choice([raw[: rng.randint(0, len(raw))], b"[" * 5000 + b"]" * 5000, b"{\"a\":" * 3000,
                       bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 200))), b"null", b"[1,2]",
                       raw.replace(b":", b"=", 1), b"{\"prompt\": \"\\ud800\", \"max_tokens\": 1}",
                       b"{\"prompt\": \"x\", \"max_tokens\": 1e999}",
                       b"{\"prompt\": \"a\\u0000b\", \"max_tokens\": 1}", b"{\"prompt\": \"" + b"a" * 3000 + b"\"}"])


def make_request(rng):
    """(raw HTTP request bytes, API route?)"""
    r = rng.random()
    path = rng.choice(["/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions"])
    if r < 0.1:
        path = rng.choice(["/health", "/metrics", "/v1/models", "/v1/models/smollm2-135m", "/v1/models/x",
                           "/nope", "/", "/v1/chat/completions/../x", "/%00"])
    method = "POST" if path.endswith("completions") else "GET"
    if rng.random() < 0.05:
        method = rng.choice(["PUT", "DELETE", "GET", "POST", "OPTIONS"])
    data = body(rng, "chat" in path) if method == "POST" else b""
    if method == "POST" and rng.random() < 0.15:
        data = mangle(rng, data)
    headers = [("Host", "x"), ("Authorization", f"Bearer {KEY}"), ("Content-Type", "application/json")]
    if rng.random() < 0.05:
        headers[1] = ("Authorization", rng.choice(["Bearer nope", "Basic x", "Bearer", ""]))
    framing = rng.random()
    if framing < 0.8 or method == "GET":
        headers.append(("Content-Length", str(len(data))))
        payload = data
    elif framing < 0.9:
        headers.append(("Transfer-Encoding", "chunked"))
        payload = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 97]), data[i:i + 97]) for i in range(0, len(data), 97))
        payload += b"0\r\n\r\n"
    else:
        bad = rng.choice([[("Content-Length", str(len(data))), ("Content-Length", str(len(data) + 1))],
                          [("Content-Length", str(len(data))), ("Transfer-Encoding", "chunked")],
                          [("Transfer-Encoding", "gzip, chunked")], [("Content-Length", "-1")],
                          [("Content-Length", str(MAX_BODY * 2))]])
        headers += bad
        payload = data
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "Connection: close\r\n\r\n"
    return head.encode() + payload


def send(port, raw):
    """(status, body bytes) or (None, reason)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    try:
        s.sendall(raw)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        return None, repr(e).encode()
    finally:
        s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        return int(head.split(b" ", 2)[1]), rest
    except (IndexError, ValueError):
        return None, data[:200]


ALLOWED = {200, 400, 401, 404, 405, 413, 503}


def judge(status, rest):
    """None if the answer is one the API may give, else why not."""
    if status is None:
        return f"no HTTP answer: {rest[:120]!r}"
    if status not in ALLOWED:
        return f"status {status}: {rest[:200]!r}"
    if status != 200 and rest.startswith(b"{"):
        e = json.loads(rest).get("error")
        if not (isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} and e["message"]):
            return f"bad error object: {rest[:200]!r}"
    return None


def main():
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=asan)")
        return plan()
    print(f"# seed {SEED}, {N} requests, {BIN}", flush=True)
    rng = random.Random(SEED)
    reqs = [make_request(rng) for _ in range(N)]
    srv = Server("--api-key", KEY, "--parallel", "4", "-c", "512", "--max-body", str(MAX_BODY),
                 "--header-timeout", "5")
    bad, statuses, health = [], {}, []
    stop = threading.Event()

    def watch_health():
        while not stop.is_set():
            t0 = time.time()
            st, _ = send(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            health.append((st, time.time() - t0))
            stop.wait(1.0)

    t0 = time.time()
    try:
        w = threading.Thread(target=watch_health, daemon=True)
        w.start()

        def one(i):
            st, rest = send(srv.port, reqs[i])
            statuses[st] = statuses.get(st, 0) + 1
            why = judge(st, rest)
            if why:
                bad.append((i, why, reqs[i][:300]))
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(one, range(N)))
        stop.set()
        w.join(10)
        print(f"# statuses {dict(sorted(statuses.items(), key=str))} in {time.time() - t0:.0f} s", flush=True)
        def answers_ok():
            assert not bad, "\n".join(map(str, bad[:5]))
        check(f"{N} fuzzed requests: every answer has an API status and error object", answers_ok)

        def health_ok():
            slow = [h for h in health if h[0] != 200 or h[1] > 2.0]
            assert health and not slow, slow[:5]
        check(f"/health answered 200 within 2 s throughout ({len(health)} probes)", health_ok)
        check("the server is alive after the run and SIGTERM exits 0",
              lambda: srv.p.poll() is None and srv.stop() == 0)
        srv.check_sanitizer()
    finally:
        srv.stop(9)
    return plan()


if __name__ == "__main__":
    sys.exit(main())

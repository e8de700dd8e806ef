"""Locust user for `scripts/loadtest.sh`: a closed loop of streamed chat
completions against `specula serve`, each client cycling through the bench
prompts (bench/prompts.jsonl unless SPECULA_LOAD_PROMPTS names another set).

Locust (PyPI) keeps the statistics.  Besides the requests themselves it
records two custom entries per request so that its percentile tables give
the latencies a chat user feels:
    TTFT  time from sending the request to the first streamed text
    ITL   mean inter-token latency of the request after the first token,
          (t_last - t_first) / (completion_tokens - 1)
Totals (requests, completion tokens, speculation counters) go to the JSON
file named by SPECULA_LOAD_OUT when the run ends.

Environment: SPECULA_LOAD_METHOD (speculative.method: none, ngram, ...),
SPECULA_LOAD_MAX_TOKENS (cap on each prompt's max_tokens, default 64),
SPECULA_LOAD_PROMPTS (JSONL file, default bench/prompts.jsonl, relative to
the current directory), SPECULA_LOAD_MODEL (model id).
"""
import itertools
import json
import os
import time

from locust import HttpUser, events, task
from locust.runners import MasterRunner

METHOD = os.environ.get("SPECULA_LOAD_METHOD", "ngram")
MAX_TOKENS = int(os.environ.get("SPECULA_LOAD_MAX_TOKENS", "64"))
MODEL = os.environ.get("SPECULA_LOAD_MODEL", "smollm2-135m")
PROMPTS = [json.loads(line) for line in open(os.environ.get("SPECULA_LOAD_PROMPTS", "bench/prompts.jsonl")) if line.strip()]
TOTALS = {"requests": 0, "errors": 0, "completion_tokens": 0, "drafted": 0, "accepted": 0,
          "first_request": None, "last_response": None}
USER_IDS = itertools.count()


def record(name, ms, length=0, exc=None):
    events.request.fire(request_type="SSE", name=name, response_time=ms, response_length=length,
                        exception=exc, context={})


class ChatUser(HttpUser):
    # closed loop: the next request leaves as soon as the previous answer ends

    def on_start(self):
        self.order = itertools.cycle(range(len(PROMPTS)))
        for _ in range(next(USER_IDS) * 5 % len(PROMPTS)):   # clients start at different prompts
            next(self.order)

    @task
    def chat(self):
        p = PROMPTS[next(self.order)]
        body = {"model": MODEL, "messages": p["messages"], "max_tokens": min(MAX_TOKENS, p.get("max_tokens", MAX_TOKENS)),
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                "speculative": {"method": METHOD}}
        t0 = time.perf_counter()
        if TOTALS["first_request"] is None:
            TOTALS["first_request"] = time.time()
        t_first = t_last = None
        usage = None
        with self.client.post("/v1/chat/completions", json=body, stream=True, catch_response=True,
                              name="chat (whole request)") as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}: {r.text[:200]}")
                TOTALS["errors"] += 1
                return
            for line in r.iter_lines():
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    usage = ev["usage"]
                if ev.get("choices") and ev["choices"][0].get("delta", {}).get("content"):
                    now = time.perf_counter()
                    t_first = t_first or now
                    t_last = now
            if usage is None or t_first is None:
                r.failure("stream ended without text or usage")
                TOTALS["errors"] += 1
                return
            r.success()
        n = usage["completion_tokens"]
        record("TTFT", (t_first - t0) * 1000.0)
        if n > 1:
            record("ITL", (t_last - t_first) * 1000.0 / (n - 1))
        TOTALS["requests"] += 1
        TOTALS["completion_tokens"] += n
        spec = usage.get("speculation") or {}
        TOTALS["drafted"] += spec.get("drafted", 0)
        TOTALS["accepted"] += spec.get("accepted", 0)
        TOTALS["last_response"] = time.time()


@events.quitting.add_listener
def write_totals(environment, **kw):
    if isinstance(environment.runner, MasterRunner):
        return
    out = os.environ.get("SPECULA_LOAD_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(TOTALS, f)

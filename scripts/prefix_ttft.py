#!/usr/bin/env python3
"""Time to first token with and without the server's prefix cache, on an
agent loop: the first message of bench/agentic.jsonl's agentic_edit chain
(a Python file and an edit), then for each later turn the model's own
answer and the next edit instruction, so every turn resends the whole
history, as agents and chat front ends do.

Each turn is sent twice with the same history, in alternating order: once
with "cache_prompt": false (a cold prefill of the whole history) and once
with the cache (the earlier turns' rows reused, their drafter state
resumed).  Both must give the same answer (temperature 0).  Prints, per
turn, the history length, the cached tokens, both times to first token and
their ratio, then the aggregate completion tok/s and the acceptance of
each.

  python3 scripts/prefix_ttft.py -m smollm2-135m --spec suffix --turns 10
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(args):
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "--spec", args.spec,
           "--parallel", "1", "-c", str(args.ctx)] + args.extra
    log = open("/tmp/prefix_ttft_server.log", "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.time()
    while time.time() - t0 < 120:
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    sys.exit("server did not start: " + open(log.name).read())


def stream(port, body):
    """Streams one chat completion; returns (ttft s, total s, text, usage)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft, text, usage = None, [], None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.time() - t0
                text.append(piece)
    total = time.time() - t0
    c.close()
    return ttft or total, total, "".join(text), usage


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--spec", default="suffix")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "specula"))
    ap.add_argument("--json", help="write the per-turn figures here")
    ap.add_argument("extra", nargs="*", help="more serve options (after --)")
    args = ap.parse_args()
    with open(os.path.join(ROOT, "bench", "agentic.jsonl")) as f:
        chain = [json.loads(l) for l in f if '"agentic_edit"' in l]
    first = chain[0]["messages"][0]["content"]
    instructions = [ln["messages"][-1]["content"] for ln in chain[1:]]
    p, port = start_server(args)
    rows = []
    try:
        msgs = [{"role": "user", "content": first}]
        for turn in range(args.turns):
            body = {"model": args.model, "messages": msgs, "max_tokens": args.max_tokens, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}}
            res = {}
            for mode in (("cold", "warm") if turn % 2 == 0 else ("warm", "cold")):
                res[mode] = stream(port, dict(body, cache_prompt=(mode == "warm")))
            (tc, sc, text_c, uc), (tw, sw, text_w, uw) = res["cold"], res["warm"]
            if text_c != text_w:
                sys.exit(f"turn {turn + 1}: the answers differ with and without the cache")
            spec_c, spec_w = uc.get("speculation", {}), uw.get("speculation", {})
            rows.append({"turn": turn + 1, "prompt": uw["prompt_tokens"],
                         "cached": uw["prompt_tokens_details"]["cached_tokens"],
                         "completion": uw["completion_tokens"], "ttft_cold": tc, "ttft_warm": tw,
                         "total_cold": sc, "total_warm": sw,
                         "acc_cold": spec_c.get("acceptance_rate", 0), "acc_warm": spec_w.get("acceptance_rate", 0)})
            r = rows[-1]
            print(f"turn {r['turn']:2d}: history {r['prompt']:5d} tokens, cached {r['cached']:5d}; "
                  f"TTFT cold {tc * 1000:7.1f} ms, warm {tw * 1000:6.1f} ms ({tw / tc * 100:5.1f} %); "
                  f"{r['completion']} tokens", flush=True)
            msgs = msgs + [{"role": "assistant", "content": text_w}]
            if turn + 1 < args.turns:
                msgs.append({"role": "user", "content": instructions[turn % len(instructions)]})
    finally:
        p.terminate()
        p.wait()
    later = [r["ttft_warm"] / r["ttft_cold"] for r in rows[1:]]
    toks = sum(r["completion"] for r in rows)
    print(f"turns 2..{len(rows)}: warm/cold TTFT median {statistics.median(later) * 100:.1f} %, "
          f"max {max(later) * 100:.1f} %")
    print(f"aggregate (prefill + decode): cold {toks / sum(r['total_cold'] for r in rows):.1f} tok/s, "
          f"warm {toks / sum(r['total_warm'] for r in rows):.1f} tok/s; acceptance cold "
          f"{statistics.mean(r['acc_cold'] for r in rows) * 100:.1f} %, warm "
          f"{statistics.mean(r['acc_warm'] for r in rows) * 100:.1f} %")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Soak test of `specula serve` (a benchmark, not a CI test).

Starts the server on a free loopback port and runs CLIENTS concurrent
clients for DURATION seconds: chat and completions, streamed and not,
greedy and seeded, methods none/ngram/suffix, some GETs (/health,
/v1/models, /metrics), and some clients that hang up mid-stream.  Every
seeded generation is compared with the same request run alone before the
soak (the server's output must not depend on what else runs).  Reports
requests, errors (must be 0), p50/p99 latency, and the server's RSS and
open file descriptors at the start and the end.  Exits 1 on any error.

    scripts/soak.py [--duration 600] [--clients 32] [--bin build/release/specula]
                    [--model smollm2-135m] [--parallel 8] [--seed 1]

Clients connect from 127.0.0.2..127.0.0.5 (all of 127/8 is loopback) so
the server's per-address connection cap sees four clients, not one.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Write a haiku about rain.", "What is 2 + 2?", "List three fruits.", "Say hi.",
           "Describe the sea in one sentence.", "Name a planet.", "Count to five.", "Why is the sky blue?",
           "A list: apple, banana, apple, banana, apple,", "def fib(n):", "The capital of France is",
           "Once upon a time"]


def templates(rng, n):
    """n generation requests: (path, body); seeded or greedy, so each has one right answer."""
    out = []
    for i in range(n):
        chat = i % 2 == 0
        body = {"max_tokens": rng.randint(8, 40), "speculative": {"method": rng.choice(["none", "ngram", "suffix"])}}
        if i % 3:
            body.update(temperature=0.8, seed=1000 + i)
        else:
            body["temperature"] = 0
        p = rng.choice(PROMPTS)
        if chat:
            body["messages"] = [{"role": "user", "content": p}]
        else:
            body["prompt"] = p
        out.append(("/v1/chat/completions" if chat else "/v1/completions", body))
    return out


class Server:
    def __init__(self, args):
        os.makedirs(os.path.join(ROOT, "tests", "artifacts"), exist_ok=True)
        self.log = open(os.path.join(ROOT, "tests", "artifacts", "soak-server.log"), "w+")
        self.p = subprocess.Popen([args.bin, "serve", "-m", args.model, "--port", "0", "--parallel",
                                   str(args.parallel), "-c", "1024"], stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while time.time() - t0 < 120:
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("the server did not start (see tests/artifacts/soak-server.log)")

    def usage(self):
        rss = 0
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) // 1024
        return rss, len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def generate(port, src, path, body, stream, hang_up=False):
    """The generated text (None when hang_up: it reads two events and leaves)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300, source_address=(src, 0))
    try:
        c.request("POST", path, body=json.dumps(dict(body, stream=stream)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"{path}: status {r.status}: {r.read()[:200]!r}")
        if not stream:
            ch = json.loads(r.read())["choices"][0]
            return ch["message"]["content"] if "message" in ch else ch["text"]
        text, events = "", 0
        for line in r:
            line = line.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return text
            events += 1
            if hang_up and events == 2:
                c.sock.shutdown(socket.SHUT_RDWR)
                return None
            o = json.loads(line[6:])
            if "error" in o:
                raise RuntimeError(f"stream error: {o}")
            for ch in o["choices"]:
                text += (ch.get("delta") or {}).get("content") or ch.get("text") or ""
        if hang_up:
            return None
        raise RuntimeError("stream ended without [DONE]")
    finally:
        c.close()


def get(port, src, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(src, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {path}: status {r.status}")
    finally:
        c.close()


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.n = {"generate": 0, "get": 0, "hang_up": 0, "checked": 0}
        self.lat = {"generate": [], "get": []}
        self.errors = []

    def add(self, kind, dt):
        with self.mu:
            self.n[kind] += 1
            if kind in self.lat:
                self.lat[kind].append(dt)

    def error(self, what):
        with self.mu:
            self.errors.append(what)


def client(i, args, port, tmpl, solo, stats, t_end):
    rng = random.Random(args.seed * 1000 + i)
    src = f"127.0.0.{2 + i % 4}"
    while time.time() < t_end:
        r = rng.random()
        t0 = time.time()
        try:
            if r < 0.1:
                get(port, src, rng.choice(["/health", "/v1/models", "/metrics"]))
                stats.add("get", time.time() - t0)
            elif r < 0.15:
                generate(port, src, *tmpl[rng.randrange(len(tmpl))], stream=True, hang_up=True)
                stats.add("hang_up", time.time() - t0)
            else:
                k = rng.randrange(len(tmpl))
                text = generate(port, src, *tmpl[k], stream=rng.random() < 0.5)
                stats.add("generate", time.time() - t0)
                if text != solo[k]:
                    stats.error(f"template {k}: {text!r} != solo {solo[k]!r}")
                else:
                    with stats.mu:
                        stats.n["checked"] += 1
        except Exception as e:               # noqa: BLE001 - every failure is an error to report
            stats.error(f"client {i}: {e!r}")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "specula"))
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tmpl = templates(random.Random(args.seed), 24)
    srv = Server(args)
    try:
        solo = [generate(srv.port, "127.0.0.1", path, body, stream=False) for path, body in tmpl]
        rss0, fd0 = srv.usage()
        stats = Stats()
        t_end = time.time() + args.duration
        threads = [threading.Thread(target=client, args=(i, args, srv.port, tmpl, solo, stats, t_end))
                   for i in range(args.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        samples = []                           # (s, RSS MiB, fds): growth that levels off is the KV caches
        every, t_next = min(60.0, args.duration / 10), t0
        while any(t.is_alive() for t in threads):
            if time.time() >= t_next:
                samples.append((round(time.time() - t0), *srv.usage()))
                t_next += every
            time.sleep(0.2)
        for t in threads:
            t.join()
        wall = time.time() - t0
        time.sleep(2)                          # let hung-up requests' slots and sockets go
        rss1, fd1 = srv.usage()
    finally:
        rc = srv.stop()
    n = stats.n
    g, q = stats.lat["generate"], stats.lat["get"]
    print(f"soak: {args.clients} clients, {wall:.0f} s, parallel {args.parallel}, {args.model}")
    print(f"requests: {n['generate']} generations ({n['checked']} equal to their solo run), "
          f"{n['get']} GETs, {n['hang_up']} hung up mid-stream; {sum(n.values()) - n['checked']} in all")
    print(f"errors: {len(stats.errors)}")
    for e in stats.errors[:10]:
        print("  " + e)
    print(f"latency generate: p50 {pct(g, 50):.2f} s, p99 {pct(g, 99):.2f} s; "
          f"GET: p50 {pct(q, 50) * 1000:.1f} ms, p99 {pct(q, 99) * 1000:.1f} ms")
    print(f"server RSS: {rss0} MiB at start, {rss1} MiB at end; open fds: {fd0} at start, {fd1} at end")
    print("during the run (s, RSS MiB, fds): " + ", ".join(f"({t}, {r}, {f})" for t, r, f in samples))
    print(f"server exit status after SIGTERM: {rc}")
    return 0 if not stats.errors and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

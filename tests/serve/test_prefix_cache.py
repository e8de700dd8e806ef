#!/usr/bin/env python3
"""The server's prefix cache (--cache-ram) through the official `openai`
client: a multi-turn conversation, where each turn resends the whole
history, gets the same answers from a server with the cache as from one
without (T = 0 and seeded T = 0.8, plain and speculating), reports the
reused prompt tokens in usage.prompt_tokens_details.cached_tokens, and
shows its hits in /metrics; --cache-ram 0 turns it off; a bad value is a
usage error.  TAP out.

Run from the repository root:  .venv/bin/python tests/serve/test_prefix_cache.py
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, Server  # noqa: E402

SYSTEM = ("You are a careful assistant for a small bookshop. The shop sells novels, poetry, history and "
          "travel books, opens at nine and closes at six, and ships orders within two days.")
TURNS = ["What kinds of books does the shop sell?", "When does it open?", "And when does it close?",
         "How fast are orders shipped?"]


def conversation(client, method, temperature):
    """The four turns, each with the whole history; returns (answers, cached tokens per turn)."""
    msgs = [{"role": "system", "content": SYSTEM}]
    answers, cached = [], []
    for t in TURNS:
        msgs.append({"role": "user", "content": t})
        r = client.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=24,
                                           temperature=temperature, seed=7,
                                           extra_body={"speculative": {"method": method}})
        text = r.choices[0].message.content
        answers.append(text)
        cached.append(r.usage.prompt_tokens_details.cached_tokens)
        assert 0 <= cached[-1] < r.usage.prompt_tokens, r.usage
        msgs.append({"role": "assistant", "content": text})
    return answers, cached


def bad_cache_prompt(client, openai):
    try:
        client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=2, extra_body={"cache_prompt": "yes"})
    except openai.BadRequestError as e:
        return "cache_prompt" in str(e)
    return False


def metrics(srv):
    req = urllib.request.Request(srv.base + "/metrics", headers={"Authorization": "Bearer " + KEY})
    return urllib.request.urlopen(req, timeout=30).read().decode()


def metric(text, name):
    m = re.search(r"^" + name + r" (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def ask(client, content):
    r = client.chat.completions.create(model="smollm2-135m", messages=[{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": content}], max_tokens=16, temperature=0)
    return r.choices[0].message.content, r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens


def restart_checks(openai):
    """--cache-dir: the cache survives a restart; a corrupt file is ignored with a warning."""
    d = tempfile.mkdtemp(prefix="specula-cache-dir-")
    try:
        srv = Server("--api-key", KEY, "--cache-dir", d)
        try:
            c = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
            first, c0, _ = ask(c, TURNS[0])
            check("SIGTERM with --cache-dir exits 0 and writes the cache file",
                  lambda: srv.stop() == 0 and len(glob.glob(os.path.join(d, "prefix-*.spcache"))) == 1)
            srv.check_sanitizer()
        finally:
            srv.stop(signal.SIGKILL)
        srv = Server("--api-key", KEY, "--cache-dir", d)
        try:
            c = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
            def warm():
                again, cached, n = ask(c, TURNS[0])
                assert again == first and cached == n - 1, (again, first, cached, n)
                return "prefix cache:" in srv.text() and "MiB from" in srv.text()
            check("after a restart the same request finds its whole prompt and answers the same", warm)
            srv.stop()
            srv.check_sanitizer()
        finally:
            srv.stop(signal.SIGKILL)
        path = glob.glob(os.path.join(d, "prefix-*.spcache"))[0]
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
        srv = Server("--api-key", KEY, "--cache-dir", d)
        try:
            c = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
            def corrupt():
                again, cached, n = ask(c, TURNS[0])
                assert again == first and cached < n - 1, (again, first, cached, n)
                return "warning: prefix cache" in srv.text() and "checksum mismatch" in srv.text()
            check("a corrupt cache file is ignored with a warning; the answer is the same", corrupt)
            srv.stop()
            srv.check_sanitizer()
        finally:
            srv.stop(signal.SIGKILL)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run([BIN, "serve", "--cache-ram", "0", "--cache-dir", "/tmp"], capture_output=True, text=True)
    tap(r.returncode == 2 and "--cache-dir" in r.stderr, "--cache-dir without a cache is a usage error", r.stderr)


def main():
    try:
        import openai
    except ImportError as e:
        tap(False, f"the openai package is installed ({e}; run scripts/setup.sh)")
        return plan()
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=release)")
        return plan()
    warm = Server("--api-key", KEY, "--spec", "suffix", "--parallel", "2")
    cold = Server("--api-key", KEY, "--spec", "suffix", "--parallel", "2", "--cache-ram", "0")
    try:
        cw = openai.OpenAI(base_url=warm.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
        cc = openai.OpenAI(base_url=cold.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
        for method in ("none", "suffix"):
            for temp in (0.0, 0.8):
                def same(method=method, temp=temp):
                    a, ca = conversation(cw, method, temp)
                    b, cb = conversation(cc, method, temp)
                    assert a == b, (a, b)
                    assert cb == [0, 0, 0, 0], cb
                    # every later turn finds the earlier history; the first
                    # turn of a repeated conversation finds its own prompt
                    assert all(c > 0 for c in ca[1:]), ca
                    return True
                check(f"{method}, T={temp}: a conversation with the cache answers as without it, "
                      "and turns 2..4 report cached tokens", same)
        def bypass():
            msgs = [{"role": "user", "content": "Spell the word 'lighthouse' backwards."}]
            cached = []
            for cp in (False, False, True, True):
                r = cw.chat.completions.create(model="smollm2-135m", messages=msgs, max_tokens=8, temperature=0,
                                               extra_body={"cache_prompt": cp})
                cached.append(r.usage.prompt_tokens_details.cached_tokens)
                n = r.usage.prompt_tokens
            # neither read nor filled by cache_prompt: false; then filled
            # (only the template's opening was there), then read whole
            assert cached[:2] == [0, 0] and cached[2] < n - 1 and cached[3] == n - 1, (cached, n)
            return True
        check('"cache_prompt": false bypasses the cache (no lookup, nothing stored)', bypass)
        check('"cache_prompt": "yes" is a 400 naming the field', lambda: bad_cache_prompt(cw, openai))
        m = metrics(warm)
        check("/metrics: prefix-cache lookups, hits and hit tokens are counted",
              lambda: metric(m, "specula_prefix_cache_hits_total") > 0 and
              metric(m, "specula_prefix_cache_hit_tokens_total") == metric(m, "specula_prompt_tokens_cached_total")
              and metric(m, "specula_prefix_cache_lookups_total") >= 18)
        check("/metrics: the cache's bytes stay within its budget",
              lambda: 0 < metric(m, "specula_prefix_cache_bytes") <= metric(m, "specula_prefix_cache_budget_bytes")
              == 1024 << 20)
        check("/metrics: without a cache, no prefix-cache series and nothing cached",
              lambda: "specula_prefix_cache_" not in metrics(cold) and
              metric(metrics(cold), "specula_prompt_tokens_cached_total") == 0)
        check("the log line names the cache", lambda: "prefix cache 1024 MiB" in warm.text() and
              "prefix cache off" in cold.text())
        check("SIGTERM exits 0 (with the cache)", lambda: warm.stop() == 0)
        check("SIGTERM exits 0 (without)", lambda: cold.stop() == 0)
        warm.check_sanitizer()
        cold.check_sanitizer()
    finally:
        warm.stop(signal.SIGKILL)
        cold.stop(signal.SIGKILL)
    restart_checks(openai)
    r = subprocess.run([BIN, "serve", "--cache-ram", "-2"], capture_output=True, text=True)
    tap(r.returncode == 2 and "--cache-ram" in r.stderr, "--cache-ram -2 is a usage error (exit 2)", r.stderr)
    return plan()


if __name__ == "__main__":
    sys.exit(main())

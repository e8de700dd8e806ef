#!/usr/bin/env python3
"""The chat page of `specula serve` (GET /) in headless Chromium, driven
over the DevTools protocol: the page asks for the API key, streams an
answer with drafted text tinted, shows tok/s, acceptance and mean
acceptance length, keeps the conversation, and its answers equal the
API's.  Saves a screenshot to tests/artifacts/serve/page.png.  Prints TAP.

Needs Debian's `chromium` and the `websocket-client` and `openai` packages
in .venv (scripts/setup.sh installs all three):
    .venv/bin/python tests/serve/test_page.py
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SPECULA_BIN") or os.path.join(ROOT, "build", "release", "specula")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
ART = os.path.join(ROOT, "tests", "artifacts", "serve")
KEY = "sk-page-key"
MODEL = "smollm2-135m"


def start_server(*args):
    """`specula serve` on a free port; returns (process, port)."""
    log_path = os.path.join(ART, "page-server.log")
    log = open(log_path, "w")
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", "0", *args], stdout=log, stderr=subprocess.STDOUT)
    t0 = time.time()
    while time.time() - t0 < 120:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("server did not start: " + open(log_path).read())


def stop(p, timeout=30):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


# ---------------------------------------------------------------------------
# Chromium over the DevTools protocol
# ---------------------------------------------------------------------------

class Browser:
    """Headless Chromium with a fresh profile, showing url; one CDP session
    on that page.  Exceptions and console errors are collected."""

    def __init__(self, url):
        import websocket
        self.dir = tempfile.mkdtemp(prefix="specula-chromium-")
        self.log = open(os.path.join(ART, "page-chromium.log"), "w")
        self.p = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self.dir}", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--force-device-scale-factor=1", "--window-size=1100,860", "--remote-debugging-port=0", url],
            stdout=self.log, stderr=subprocess.STDOUT)
        port = self._devtools_port()
        ws_url = None
        t0 = time.time()
        while not ws_url and time.time() - t0 < 30:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page" and t["url"].startswith(url.split("?")[0])]
            ws_url = pages[0]["webSocketDebuggerUrl"] if pages else None
            time.sleep(0.1)
        if not ws_url:
            raise RuntimeError("no page target for " + url)
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.id = 0
        self.problems = []                    # JS exceptions and console errors
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.wait("document.readyState === 'complete' && !!document.body", 60)

    def _devtools_port(self):
        path = os.path.join(self.dir, "DevToolsActivePort")
        t0 = time.time()
        while time.time() - t0 < 60:
            if os.path.exists(path):
                first = open(path).read().split("\n")[0]
                if first.isdigit():
                    return int(first)
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port (see page-chromium.log)")

    def _event(self, m):
        meth, prm = m.get("method"), m.get("params", {})
        if meth == "Runtime.exceptionThrown":
            self.problems.append("exception: " + json.dumps(prm.get("exceptionDetails", {}))[:400])
        elif meth == "Runtime.consoleAPICalled" and prm.get("type") in ("error", "assert"):
            self.problems.append("console.error: " + json.dumps(prm.get("args", []))[:400])
        elif meth == "Log.entryAdded" and prm.get("entry", {}).get("level") == "error":
            e = prm["entry"]
            if e.get("source") == "network" and "status of 401" in e.get("text", ""):
                return                        # the page's expected probe for a key
            self.problems.append("log: " + e.get("text", "")[:400])

    def call(self, method, **params):
        self.id += 1
        self.ws.send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._event(m)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr, timeout=180):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                if self.js(expr):
                    return True
            except RuntimeError:               # e.g. evaluated before the page loaded
                pass
            time.sleep(0.1)
        seen = self.js("JSON.stringify({state: document.body.dataset.state, focus: document.activeElement.id, "
                       "key: window.specula.key.length, history: window.specula.history.length, "
                       "log: document.getElementById('log').innerText.slice(-600)})")
        raise TimeoutError(f"waited {timeout} s for {expr}; page: {seen}")

    def type_text(self, selector, text):
        """Focuses an element and types into it with real input events, then Enter."""
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)
        for t in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=t, key="Enter", code="Enter",
                      windowsVirtualKeyCode=13, nativeVirtualKeyCode=13, text="\r" if t == "keyDown" else "")

    def screenshot(self, path):
        r = self.call("Page.captureScreenshot", format="png")
        import base64
        data = base64.b64decode(r["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# What the page shows of its answers.
ANSWERS_JS = """Array.from(document.querySelectorAll('.msg.assistant')).map(m => ({
  text: m.querySelector('.content').textContent,
  spans: Array.from(m.querySelectorAll('.content > span')).map(s => [s.className, s.textContent]),
  stats: Object.fromEntries(Array.from(m.querySelectorAll('.stats [data-stat]')).map(
           s => [s.dataset.stat, s.querySelector('b').textContent])),
  error: (m.querySelector('.error') || {}).textContent || null }))"""


def number(s):
    m = re.match(r"-?[0-9.]+", s or "")
    return float(m.group(0)) if m else None


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------

def http_tests(port):
    def page_served():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/?prompt=x")                     # no key: the page itself is public
        r = c.getresponse()
        body = r.read()
        c.close()
        src = open(os.path.join(ROOT, "src", "serve", "page.html"), "rb").read()
        assert r.status == 200 and r.getheader("Content-Type") == "text/html; charset=utf-8", r.status
        assert "default-src 'none'" in r.getheader("Content-Security-Policy", ""), r.getheaders()
        assert body == src, "the served page differs from src/serve/page.html (rebuild?)"
        # no external assets: every URL the page names is relative
        assert not re.search(rb"(src|href)=\"(https?:)?//", body) and b"http://" not in body.split(b"-->")[-1]
        return True
    check("GET / serves the embedded page (no key needed, CSP, same bytes as page.html, no external URLs)",
          page_served)

    def post_root():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/", body="{}", headers={"Authorization": f"Bearer {KEY}"})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 405
    check("POST / -> 405", post_root)

    def models_methods():
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        meta = json.load(urllib.request.urlopen(req, timeout=30))["data"][0]["meta"]
        return meta["speculative_methods"] == ["none", "ngram", "suffix"] and meta["speculative_default"] == "ngram"
    check("/v1/models meta lists the speculative methods (the page's selector)", models_methods)


def api_answer(client, messages, method, max_tokens):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0,
                                       extra_body={"speculative": {"method": method}})
    return r.choices[0].message.content, r.usage


def browser_tests(port, client):
    base = f"http://127.0.0.1:{port}/"
    p1 = "Repeat the following sentence five times: The quick brown fox jumps over the lazy dog."
    p2 = "Now count from 1 to 20, separated by commas."
    p3 = "Say hello."
    url = base + "?" + urllib.parse.urlencode({"prompt": p1, "autorun": 1, "method": "ngram",
                                               "temperature": 0, "max_tokens": 48})
    b = Browser(url)
    try:
        check("the page loads and asks for the API key (server has --api-key)",
              lambda: b.wait("document.body.dataset.state === 'key'", 60) and
              b.js("getComputedStyle(document.getElementById('keybox')).display") == "flex")

        def first_answer():
            b.type_text("#key", KEY)                       # autorun sends the prompt once the key works
            b.wait("document.body.dataset.state === 'done'")
            a = b.js(ANSWERS_JS)
            assert len(a) == 1 and not a[0]["error"], a
            want, _ = api_answer(client, [{"role": "user", "content": p1}], "ngram", 48)
            assert a[0]["text"] == want, (a[0]["text"], want)
            # the figures shown are those of the page's own answer (its usage chunk): another
            # request may draft differently (the adaptive length reads the clock), never emit differently
            usage = b.js("window.specula.lastUsage")
            assert "".join(t for _, t in a[0]["spans"]) == want
            drafted = [t for c, t in a[0]["spans"] if c == "d"]
            assert drafted, ("no text tinted as drafted", a[0]["spans"])
            assert {c for c, _ in a[0]["spans"]} <= {"d", "t"}, a[0]["spans"]
            st = a[0]["stats"]
            assert number(st["tokens"]) == usage["completion_tokens"], (st, usage)
            assert number(st["tps"]) > 0, st
            spec = usage["speculation"]
            # "56.3% (9/16)": the counts must match exactly; the percentage is JavaScript's
            # toFixed(1), which rounds halves up where Python's format rounds them to even
            pct, counts = st["acceptance"].split("% ")
            assert counts == f"({spec['accepted']}/{spec['drafted']})", (st, spec)
            assert abs(float(pct) - 100 * spec["accepted"] / spec["drafted"]) <= 0.05 + 1e-9, (st, spec)
            assert abs(number(st["mal"]) - spec["mean_acceptance_length"]) < 0.01, (st, spec)
            assert number(st["mal"]) > 1 and st["method"] == "ngram", st
            return True
        check("key entered: the autorun prompt streams; text equals the API's answer, drafted text tinted, "
              "tok/s, acceptance and mean acceptance length shown and equal to usage", first_answer)

        def rendered():
            box = "document.querySelector('.msg.assistant')"
            ok = b.js(f"{box}.classList.contains('rendered') && !!{box}.querySelector('.md') && "
                      f"getComputedStyle({box}.querySelector('.content')).display === 'none' && "
                      f"{box}.querySelector('.md').textContent.trim().length > 0")
            b.js(f"{box}.querySelector('button.view').click()")
            raw = b.js(f"getComputedStyle({box}.querySelector('.content')).display !== 'none' && "
                       f"getComputedStyle({box}.querySelector('.md')).display === 'none'")
            b.js(f"{box}.querySelector('button.view').click()")
            return ok and raw
        check("a finished answer shows as markdown; its header button switches to the raw tinted text and back",
              rendered)

        def markdown_safe():
            src = ("# Title\n\nSome **bold**, *em* and `code <b>`.\n\n- one\n- two\n\n1. first\n2. second\n\n"
                   "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('<x>')\n```\n\n"
                   "[site](https://example.org) [bad](javascript:alert(1))\n\n"
                   "<img src=x onerror=alert(1)><script>alert(2)</script> & \" ' > quote\n> cited")
            r = b.js("(() => { const d = document.createElement('div'); d.innerHTML = window.specula.markdown("
                     + json.dumps(src) + "); return {"
                     "img: d.querySelectorAll('img, script, iframe, [onerror]').length,"
                     "js: d.querySelectorAll('a[href^=\"javascript\"]').length,"
                     "links: Array.from(d.querySelectorAll('a')).map(a => [a.getAttribute('href'), a.rel]),"
                     "h: d.querySelectorAll('h2').length, li: d.querySelectorAll('ul > li').length,"
                     "ol: d.querySelectorAll('ol > li').length, td: d.querySelectorAll('table td').length,"
                     "code: (d.querySelector('pre code') || {}).textContent, copy: d.querySelectorAll('pre button.copy').length,"
                     "strong: d.querySelectorAll('strong').length, em: d.querySelectorAll('em').length,"
                     "inl: Array.from(d.querySelectorAll('p code')).map(c => c.textContent),"
                     "bq: d.querySelectorAll('blockquote').length, text: d.textContent}; })()")
            assert r["img"] == 0 and r["js"] == 0, r
            assert r["links"] == [["https://example.org", "noopener noreferrer"]], r
            assert r["h"] == 1 and r["li"] == 2 and r["ol"] == 2 and r["td"] == 2 and r["copy"] == 1, r
            assert r["code"] == "print('<x>')" and r["inl"] == ["code <b>"], r
            assert r["strong"] == 1 and r["em"] == 1 and r["bq"] == 1, r
            assert "<img src=x onerror=alert(1)><script>alert(2)</script>" in r["text"], r["text"]
            return True
        check("markdown: headings, lists, tables, fenced code with a copy button, links; model HTML and "
              "javascript: links stay text", markdown_safe)

        shot = os.path.join(ART, "page.png")

        def screenshot():
            data = b.screenshot(shot)
            return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000
        check("screenshot saved (tests/artifacts/serve/page.png)", screenshot)

        def second_turn():
            b.type_text("#prompt", p2)                     # real typing, Enter sends
            b.wait("document.querySelectorAll('.msg.assistant').length === 2 && "
                   "document.body.dataset.state === 'done'")
            a = b.js(ANSWERS_JS)
            first = a[0]["text"]
            msgs = [{"role": "user", "content": p1}, {"role": "assistant", "content": first},
                    {"role": "user", "content": p2}]
            want, _ = api_answer(client, msgs, "ngram", 48)
            assert a[1]["text"] == want, (a[1]["text"], want)
            assert b.js("window.specula.history.length") == 4
            assert b.js("document.querySelectorAll('.msg.user').length") == 2
            return True
        check("a typed follow-up (Enter) keeps the conversation: its answer equals the API's for the whole history",
              second_turn)
        b.screenshot(shot)

        def method_none():
            b.js("document.getElementById('method').value = 'none'")
            b.type_text("#prompt", p3)
            b.wait("document.querySelectorAll('.msg.assistant').length === 3 && "
                   "document.body.dataset.state === 'done'")
            a = b.js(ANSWERS_JS)[2]
            assert a["text"] and not a["error"], a
            assert not [t for c, t in a["spans"] if c == "d"], a["spans"]
            assert a["stats"]["method"] == "none" and a["stats"]["acceptance"] == "\u2014", a["stats"]
            return True
        check("method selector 'none': answer without drafted text, acceptance shown as none", method_none)

        def regenerate():
            before = b.js(ANSWERS_JS)
            n_hist = b.js("window.specula.history.length")
            b.js("document.querySelector('.msg.assistant:last-of-type button[data-act=regenerate]').click()")
            b.wait("document.body.dataset.state === 'done' && window.specula.history.length === " + str(n_hist))
            after = b.js(ANSWERS_JS)
            return len(after) == len(before) and after[-1]["text"] == before[-1]["text"] and \
                b.js("document.querySelectorAll('button[data-act=regenerate]').length") == 1
        check("regenerate on the last answer asks again (T=0: the same answer, in its place)", regenerate)

        def stopped():
            b.js("document.getElementById('max_tokens').value = '400'")
            b.type_text("#prompt", "Write a long story about a lighthouse.")
            b.wait("document.querySelectorAll('.msg.assistant').length === 4 && "
                   "!!document.querySelectorAll('.msg.assistant')[3].querySelector('.content span')")
            b.js("document.getElementById('stop').click()")
            b.wait("document.body.dataset.state === 'done'")
            last = "document.querySelectorAll('.msg.assistant')[3]"
            return b.js(f"{last}.dataset.stopped === '1' && !!{last}.querySelector('.badge.stopped') && "
                        f"!!{last}.querySelector('[data-stat=stopped]')")
        check("Stop cuts the answer and marks it stopped", stopped)

        def edit():
            n_hist = b.js("window.specula.history.length")
            n_msg = b.js("document.querySelectorAll('.msg').length")
            b.js("Array.from(document.querySelectorAll('.msg.user')).pop().querySelector('button[data-act=edit]').click()")
            return (b.js("document.getElementById('prompt').value") == "Write a long story about a lighthouse."
                    and b.js("window.specula.history.length") == n_hist - 2
                    and b.js("document.querySelectorAll('.msg').length") == n_msg - 2)
        check("edit on the last question puts it back in the box and takes it and its answer out", edit)

        def settings_kept():
            b.js("(() => { for (const [k, v] of [['temperature', '0.3'], ['max_tokens', '33'], "
                 "['system', 'Be brief.']]) { const e = document.getElementById(k); e.value = v; "
                 "e.dispatchEvent(new Event('change')); } })()")
            b.call("Page.navigate", url=base)              # without the query's settings
            time.sleep(0.5)
            b.wait("document.readyState === 'complete' && document.body.dataset.state === 'key'", 60)
            vals = b.js("['temperature', 'max_tokens', 'system'].map(k => document.getElementById(k).value)")
            assert vals == ["0.3", "33", "Be brief."], vals
            # the conversation is kept too: pick it from the list and it is back
            stored = b.js("JSON.parse(localStorage.getItem('specula.conversations'))")
            assert stored and len(stored[0]["history"]) >= 6, stored
            b.js("(() => { const s = document.getElementById('convs'); s.value = " + json.dumps(stored[0]["id"]) +
                 "; s.dispatchEvent(new Event('change')); })()")
            assert b.js("document.querySelectorAll('.msg').length") == len(stored[0]["history"])
            assert b.js("window.specula.history.length") == len(stored[0]["history"])
            b.js("document.getElementById('clear').click()")
            b.type_text("#key", KEY)
            b.wait("document.body.dataset.state === 'idle'", 60)
            b.type_text("#prompt", "Hi.")
            b.wait("document.body.dataset.state === 'done'")
            req = b.js("window.specula.lastRequest")
            return (req["messages"][0] == {"role": "system", "content": "Be brief."} and req["max_tokens"] == 33
                    and abs(req["temperature"] - 0.3) < 1e-9)
        check("settings, the system prompt and the conversations are kept across a reload; the prompt is sent",
              settings_kept)

        def phone():
            b.call("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=2, mobile=True)
            time.sleep(0.3)
            data = b.screenshot(os.path.join(ART, "page-phone.png"))
            wide = b.js("document.documentElement.scrollWidth <= 390")
            b.call("Emulation.clearDeviceMetricsOverride")
            return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000 and wide
        check("390-px phone viewport: nothing wider than the screen; screenshot page-phone.png", phone)

        def new_chat():
            b.js("document.getElementById('clear').click()")
            return b.js("document.querySelectorAll('.msg').length === 0 && window.specula.history.length === 0")
        check("'New chat' clears the conversation", new_chat)
        def no_problems():
            assert not b.problems, "\n".join(b.problems)
        check("no JavaScript exceptions or console errors (CSP violations included; the 401 key probe aside)",
              no_problems)
    finally:
        b.close()


def main():
    os.makedirs(ART, exist_ok=True)
    try:
        import openai
        import websocket  # noqa: F401
    except ImportError as e:
        tap(False, f"python packages present ({e}; run scripts/setup.sh, use .venv/bin/python)")
        return plan()
    if not CHROMIUM:
        tap(False, "chromium installed (scripts/setup.sh installs Debian's chromium)")
        return plan()
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=release)")
        return plan()
    t0 = time.time()
    srv, port = start_server("--api-key", KEY, "--parallel", "2", "-c", "1024")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=300)
        http_tests(port)
        check("the browser session runs", lambda: browser_tests(port, client) or True)
        check("server: SIGTERM exits 0", lambda: stop(srv) == 0)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    print(f"# page tests took {time.time() - t0:.0f} s")
    return plan()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Server defaults and llama-server's extra endpoints: a request that omits
its sampling fields gets the server's defaults (llama.cpp's, or `serve
--temp/--top-k/--top-p/--min-p/--repeat-penalty/--seed`), which GET /props
reports; POST /tokenize and /detokenize in llama-server's shapes; CORS with
--cors-origin (preflights answered), none without.  TAP out.

Run from the repository root:  .venv/bin/python tests/serve/test_endpoints.py
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taplib import check, plan, tap  # noqa: E402
from test_serve import BIN, KEY, ROOT, Server, request  # noqa: E402

AUTH = {"Authorization": "Bearer " + KEY}
MSGS = [{"role": "user", "content": "Write one sentence about the sea."}]
# with a system message of its own (else SmolLM2's template adds its default one)
SYS_MSGS = [{"role": "system", "content": "You are terse."}] + MSGS


def post(srv, path, body):
    return request(srv, "POST", path, body)


def chat(srv, **kw):
    st, _, body = post(srv, "/v1/chat/completions", dict({"messages": MSGS, "max_tokens": 24}, **kw))
    assert st == 200, (st, body)
    return json.loads(body)["choices"][0]["message"]["content"]


def props(srv):
    st, _, body = request(srv, "GET", "/props", None, AUTH)
    assert st == 200, (st, body)
    return json.loads(body)


def gguf_with_template(src, path, template):
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "gguf-new-metadata"), src, path, "--force",
                        "--chat-template", template], capture_output=True, text=True)
    tap(r.returncode == 0, "gguf-new-metadata wrote a copy with another chat template", r.stderr[-500:])
    return r.returncode == 0


def apply_template(srv, body):
    st, _, out = post(srv, "/apply-template", body)
    return st, json.loads(out)


def template_checks(reference):
    """Chat templates: a model's own Jinja template is rendered (a copy of
    SmolLM2 carrying another one); one that cannot be rendered gives a
    warning at start and chat requests a 400 that says why;
    --chat-template NAME|FILE overrides it."""
    src = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specula", "models",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
    tmp = tempfile.mkdtemp(prefix="specula-tmpl-")
    other = os.path.join(tmp, "smol-other-template.gguf")
    broken = os.path.join(tmp, "smol-broken-template.gguf")
    try:
        if not gguf_with_template(src, other, "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n"
                                              "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"):
            return
        srv = Server("--api-key", KEY, "-m", other)
        try:
            check("the model's own Jinja template renders chat requests (/apply-template shows the prompt)",
                  lambda: apply_template(srv, {"messages": MSGS}) ==
                  (200, {"prompt": "".join(f"[{m['role'].upper()}] {m['content']}\n" for m in MSGS) + "[ASSISTANT]"}))
            check("/apply-template refuses a bad body with a 400 naming the field",
                  lambda: (lambda r: r[0] == 400 and "messages" in r[1]["error"]["message"])(
                      apply_template(srv, {"messages": 5})))
            check("a chat request with it is answered (200)", lambda: isinstance(chat(srv, temperature=0), str))
            check("/props reports the template's source",
                  lambda: props(srv)["chat_template"].startswith("{% for m in messages %}"))
            srv.stop()
            srv.check_sanitizer()
        finally:
            srv.stop(signal.SIGKILL)
        if not gguf_with_template(src, broken, "{% for m in messages %}{{ m.content | wordwrap }}{% endfor %}"):
            return
        srv = Server("--api-key", KEY, "-m", broken)
        try:
            def refused():
                st, _, body = post(srv, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4})
                err = json.loads(body)["error"]
                ok = post(srv, "/v1/completions", {"prompt": "Once upon", "max_tokens": 4})[0] == 200
                return (st == 400 and err["code"] == "no_chat_template" and "--chat-template" in err["message"]
                        and "wordwrap" in err["message"] and ok and
                        "warning: the model's chat template cannot be rendered" in srv.text())
            check("a template that cannot be rendered: a warning at start, chat requests a 400 naming the "
                  "construct, completions work", refused)
            srv.stop()
        finally:
            srv.stop(signal.SIGKILL)
        srv = Server("--api-key", KEY, "-m", broken, "--chat-template", "chatml")
        try:
            check("--chat-template chatml renders chat requests as the original file's template does",
                  lambda: chat(srv, temperature=0, messages=SYS_MSGS) == reference)
            srv.stop()
            srv.check_sanitizer()
        finally:
            srv.stop(signal.SIGKILL)
        tfile = os.path.join(tmp, "mine.jinja")
        with open(tfile, "w") as f:
            f.write("{%- for m in messages -%}<{{ m.role }}>{{ m.content | trim }}{%- endfor -%}")
        srv = Server("--api-key", KEY, "-m", broken, "--chat-template", tfile)
        try:
            check("--chat-template FILE renders with the file",
                  lambda: apply_template(srv, {"messages": [{"role": "user", "content": " hi "}]}) ==
                  (200, {"prompt": "<user>hi"}))
            srv.stop()
        finally:
            srv.stop(signal.SIGKILL)
        with open(tfile, "w") as f:
            f.write("{% include 'other.jinja' %}")
        r = subprocess.run([BIN, "serve", "-m", "smollm2-135m", "--chat-template", tfile], capture_output=True,
                           text=True, timeout=120)
        tap(r.returncode != 0 and "include" in r.stderr, "--chat-template FILE with an unsupported construct "
            "does not start and names it", r.stderr[-400:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([BIN, "serve", "--chat-template", "llama99"], capture_output=True, text=True)
    tap(r.returncode == 2 and "chatml" in r.stderr and "neither built in" in r.stderr,
        "--chat-template with an unknown name (and no such file) exits 2", r.stderr)


def main():
    if not os.access(BIN, os.X_OK):
        tap(False, f"{BIN} exists (make BUILD=release)")
        return plan()
    plain = Server("--api-key", KEY, "--seed", "42")
    tuned = Server("--api-key", KEY, "--temp", "0.3", "--top-k", "7", "--top-p", "0.5", "--min-p", "0.1",
                   "--repeat-penalty", "1.1", "--seed", "5", "--cors-origin", "https://example.org")
    try:
        def llama_defaults():
            p = props(plain)["default_generation_settings"]["params"]
            assert abs(p["temperature"] - 0.8) < 1e-6 and p["top_k"] == 40, p
            assert abs(p["top_p"] - 0.95) < 1e-6 and abs(p["min_p"] - 0.05) < 1e-6 and p["seed"] == 42, p
            return True
        check("GET /props: llama.cpp's sampling defaults when neither flags nor the model set them",
              llama_defaults)
        check("/props: slots, context, chat template, speculation default",
              lambda: (lambda j: j["total_slots"] == 4 and j["default_generation_settings"]["n_ctx"] > 0 and
                       "<|im_start|>" in j["chat_template"] and j["speculative"]["method"] == "ngram")(props(plain)))
        check("a request without sampling fields samples with the defaults (equal to naming them)",
              lambda: chat(plain) == chat(plain, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=42))

        def tuned_props():
            p = props(tuned)["default_generation_settings"]["params"]
            return (abs(p["temperature"] - 0.3) < 1e-6 and p["top_k"] == 7 and abs(p["top_p"] - 0.5) < 1e-6 and
                    abs(p["min_p"] - 0.1) < 1e-6 and abs(p["repeat_penalty"] - 1.1) < 1e-6 and p["seed"] == 5)
        check("serve --temp/--top-k/--top-p/--min-p/--repeat-penalty/--seed show in /props", tuned_props)
        check("and are what an empty request gets",
              lambda: chat(tuned) == chat(tuned, temperature=0.3, top_k=7, top_p=0.5, min_p=0.1,
                                          repetition_penalty=1.1, seed=5))
        check("a request's own fields still win",
              lambda: chat(tuned, temperature=0, repetition_penalty=1.0) == chat(plain, temperature=0))

        def tokenize():
            st, _, body = post(plain, "/tokenize", {"content": "Hello world"})
            ids = json.loads(body)["tokens"]
            assert st == 200 and ids and all(isinstance(i, int) for i in ids), body
            st, _, body = post(plain, "/tokenize", {"content": "Hello world", "with_pieces": True})
            pieces = json.loads(body)["tokens"]
            assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == "Hello world", pieces
            st, _, body = post(plain, "/detokenize", {"tokens": ids})
            return st == 200 and json.loads(body)["content"] == "Hello world"
        check("POST /tokenize (ids, with_pieces) and /detokenize round-trip", tokenize)

        def special():
            one = json.loads(post(plain, "/tokenize", {"content": "<|im_start|>"})[2])["tokens"]
            text = json.loads(post(plain, "/tokenize", {"content": "<|im_start|>", "parse_special": False})[2])
            return len(one) == 1 and len(text["tokens"]) > 1
        check("/tokenize parse_special: true (default) reads special-token text, false keeps it text", special)

        def bad_tokens():
            a = post(plain, "/detokenize", {"tokens": [1, -5]})
            b = post(plain, "/detokenize", {"tokens": "abc"})
            c = post(plain, "/tokenize", {"content": 5})
            d = post(plain, "/tokenize", {"content": "x", "with_pieces": "yes"})
            e = request(plain, "POST", "/tokenize", raw=b"[1,2]")
            return (a[0], b[0], c[0], d[0], e[0]) == (400,) * 5 and b"tokens[1]" in a[2]
        check("bad /tokenize and /detokenize bodies are 400s naming the field", bad_tokens)
        nokey = {"Authorization": "Bearer not-the-key"}
        check("/props and /tokenize need the key", lambda: request(plain, "GET", "/props", None, nokey)[0] == 401 and
              request(plain, "POST", "/tokenize", {"content": "x"}, nokey)[0] == 401)

        def cors():
            st, h, _ = request(tuned, "OPTIONS", "/v1/chat/completions", None,
                               {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"})
            hd = {k.lower(): v for k, v in h.items()}
            assert st == 204 and hd.get("access-control-allow-origin") == "https://example.org", (st, h)
            assert "POST" in hd.get("access-control-allow-methods", "") and \
                "authorization" in hd.get("access-control-allow-headers", "").lower(), h
            st, h, _ = request(tuned, "GET", "/props", None, dict(AUTH, Origin="https://example.org"))
            hd = {k.lower(): v for k, v in h.items()}
            return st == 200 and hd.get("access-control-allow-origin") == "https://example.org"
        check("--cors-origin: preflights get 204 with the allowed methods and headers; answers name the origin",
              cors)

        def no_cors():
            st, h, _ = request(plain, "OPTIONS", "/v1/chat/completions", None, {"Origin": "https://example.org"})
            st2, h2, _ = request(plain, "GET", "/props", None, AUTH)
            return st == 405 and not any(k.lower().startswith("access-control") for k in list(h) + list(h2))
        check("without --cors-origin: OPTIONS is 405 and no CORS headers", no_cors)
        reference = chat(plain, temperature=0, messages=SYS_MSGS)
        check("SIGTERM exits 0 (both)", lambda: plain.stop() == 0 and tuned.stop() == 0)
        plain.check_sanitizer()
        tuned.check_sanitizer()
    finally:
        plain.stop(signal.SIGKILL)
        tuned.stop(signal.SIGKILL)
    template_checks(reference)
    return plan()


if __name__ == "__main__":
    sys.exit(main())

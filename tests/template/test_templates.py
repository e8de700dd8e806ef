#!/usr/bin/env python3
"""Chat-template golden test: `specula template` against Python's jinja2.

Every public chat template we have (the 40 of the vLLM 0.11.0 sdist, fetched
by scripts/fetch-templates.sh, and SmolLM2's, read from its GGUF) is rendered
for a spread of conversations with jinja2 set up exactly as Hugging Face
`transformers` sets it up (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now), and
our interpreter must agree:

  * where jinja2 renders, `specula template --chat-template FILE --input
    CASE.json` exits 0 and prints the very same bytes (nothing added);
  * where jinja2 raises (a role order the template refuses, a type error, a
    sandbox refusal...), ours exits non-zero with a message on stderr;
  * either way without a crash: a signal, a timeout or a sanitizer report
    (the ASan build, SPECULA_BIN=build/asan/specula) is a failure.

CASE.json is one object: {"messages": [...], "tools": [...] (only where the
case has tools; may be null), "add_generation_prompt": bool, "bos_token",
"eos_token", "now": epoch seconds for strftime_now (UTC), ...}; every other
key is one more template variable.  "now" is not a template variable.

Templates listed in UNSUPPORTED are ones our interpreter refuses on purpose:
for those the command must exit non-zero naming the construct on stderr.

One TAP test per template, named by its file name.  Run from the repository
root:  .venv/bin/python tests/template/test_templates.py
  --python-only          render with jinja2 only; print (template, case) ->
                         length or exception, and a summary (no binary needed)
  --dump DIR             with --python-only: write DIR/<template>/<case>.json
                         (the input) and .txt (jinja2's output) or .err
  --template S, --case S only templates / cases whose name contains S
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from taplib import plan, tap  # noqa: E402

import jinja2  # noqa: E402
from jinja2 import nodes  # noqa: E402
from jinja2.ext import Extension, loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("SPECULA_BIN", "build/release/specula")
CACHE = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
VLLM_DIR = os.path.join(CACHE, "specula", "templates", "vllm-0.11.0")
SMOL_GGUF = os.path.join(CACHE, "specula", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SMOL_NAME = "smollm2-135m-instruct.jinja"
TIMEOUT = 20
# 2025-12-03 13:04:05 UTC, a Wednesday: %d zero-pads, %H:%M:%S is not midnight
NOW = 1764767045

# Templates our interpreter refuses on purpose: file name -> the construct
# its error message names.
UNSUPPORTED = {}

# specula's own built-in templates, rendered by jinja2 too
BUILTINS = ["chatml", "gemma", "llama3", "mistral", "phi3", "qwen"]

# Special tokens of the model family a template belongs to (substring of
# the file name -> (bos, eos)); the first match wins, else <s> / </s>.
TOKENS = [
    ("llama4", ("<|begin_of_text|>", "<|eot|>")),
    ("llama3", ("<|begin_of_text|>", "<|eot_id|>")),
    ("toolace", ("<|begin_of_text|>", "<|eot_id|>")),
    ("xlam_llama", ("<|begin_of_text|>", "<|eot_id|>")),
    ("deepseek", ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")),
    ("gemma", ("<bos>", "<eos>")),
    ("smollm2", ("<|im_start|>", "<|im_end|>")),
    ("qwen", ("", "<|im_end|>")),
    ("phi3", ("<s>", "<|endoftext|>")),
    ("hermes", ("", "<|im_end|>")),
    ("granite", ("", "<|end_of_text|>")),
]


# ---------------------------------------------------------------------------
# jinja2 the way transformers sets it up (transformers/utils/chat_template_utils.py)

class GenerationExtension(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body
    (transformers also records where the assistant's text lies)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(now, timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationExtension, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def render_py(source, case):
    """(text, None) or (None, "ExceptionType: message")."""
    case = json.loads(json.dumps(case))  # exactly what the C side reads
    try:
        key = (case.get("now", NOW), source)
        if key not in _compiled:
            _compiled[key] = make_env(key[0]).from_string(source)
        tmpl = _compiled[key]
        ctx = {k: v for k, v in case.items() if k != "now"}
        return tmpl.render(**ctx), None
    except Exception as e:  # noqa: BLE001 - any failure is "jinja2 raises"
        msg = str(e).splitlines()[0] if str(e) else ""
        return None, f"{type(e).__name__}: {msg}"


# ---------------------------------------------------------------------------
# The cases

def fn(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


TOOLS = [
    fn("get_weather", "Get the current weather in a city.", {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "days": {"type": "integer", "description": "How many days to forecast"},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature units"},
    }, ["city"]),
    fn("search_docs", "Search the documentation; returns \"snippets\" ranked by score.", {
        "query": {"type": "string", "description": "  What to look for  "},
        "max_results": {"type": "integer", "description": "At most this many"},
        "threshold": {"type": "number", "description": "Minimum score, 0 to 1"},
        "exact": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Only pages with these tags"},
    }, ["query", "exact"]),
]

SYS = {"role": "system", "content": "You are a helpful assistant."}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def tool_turn(content, calls):
    return {"role": "assistant", "content": content, "tool_calls": calls}


def tool_result(cid, name, content):
    return {"role": "tool", "tool_call_id": cid, "name": name, "content": content}


WEATHER_ARGS = {"city": "Paris", "days": 3}
TRICKY = ("  He said \"don't\" \\ back\\slash 'quoted' é 中文 🙂\n\nline two\twith tab\n"
          "{{ x }} {% if %} {# c #} <|im_start|>user\n</s>  ")
NUMBERS = {"count": 0, "negative": -17, "big": 12345678901234, "half": 0.5, "tiny": 1e-7, "huge": 1.5e300,
           "e16": 1e16, "below_e16": 1234567890123456.0, "minus_zero": -0.0, "whole": 3.0, "third": 0.1 + 0.2, "yes": True, "no": False, "nothing": None,
           "list": [1, 2.5, "three", [], {}], "nested": {"a": {"b": [True, None]}, "it's": "say \"hi\"\n"},
           "text": "é 中文 🙂 \u0001 \u2028 </s>"}


def roundtrip(content, args, cid="call_1"):
    return [user("What's the weather in Paris?"),
            tool_turn(content, [call(cid, "get_weather", args)]),
            tool_result(cid, "get_weather", "{\"temp\": 21}"),
            assistant("It is 21 degrees in Paris.")]


def long_conversation():
    msgs = [SYS]
    for i in range(6):
        msgs += [user(f"Question {i + 1}: what is {i} + {i}?"), assistant(f"{i} + {i} = {2 * i}.")]
    return msgs


def text_parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


CASES = [
    ("user", {"messages": [user("Hello!")]}),
    ("system_user", {"messages": [SYS, user("Hello!")]}),
    ("multi_turn", {"messages": [SYS, user("Hi."), assistant("Hello! How can I help?"), user("Tell me a joke.")]}),
    ("user_assistant_no_prompt", {"messages": [user("Hi."), assistant("Hello!")], "add_generation_prompt": False}),
    ("user_assistant_prompt", {"messages": [user("Hi."), assistant("Hello!")]}),
    ("tricky_content", {"messages": [{"role": "system", "content": TRICKY}, user(TRICKY), assistant(TRICKY),
                                     user(TRICKY)]}),
    ("tricky_content_ascii_json", {"messages": [user(TRICKY)], "_ascii_json": True}),
    ("empty_content", {"messages": [user("")]}),
    ("empty_system_and_assistant", {"messages": [{"role": "system", "content": ""}, user("Hi."), assistant(""),
                                                 user("Again.")]}),
    ("two_users", {"messages": [user("Hi."), user("Are you there?")]}),
    ("assistant_first", {"messages": [assistant("I start."), user("Fine.")]}),
    ("system_only", {"messages": [SYS]}),
    ("no_messages", {"messages": []}),
    ("tools_user", {"messages": [user("What's the weather in Paris?")], "tools": TOOLS}),
    ("tools_system_user", {"messages": [SYS, user("What's the weather in Paris?")], "tools": TOOLS}),
    ("tools_null", {"messages": [SYS, user("Hello!")], "tools": None}),
    ("tools_empty", {"messages": [user("Hello!")], "tools": []}),
    ("tool_roundtrip", {"messages": roundtrip("", WEATHER_ARGS), "tools": TOOLS}),
    ("tool_roundtrip_null_content", {"messages": roundtrip(None, WEATHER_ARGS), "tools": TOOLS}),
    ("tool_roundtrip_long_id", {"messages": [SYS] + roundtrip("", WEATHER_ARGS, "call_9f8e7d6c5b4a"),
                                "tools": TOOLS}),
    ("tool_roundtrip_string_args", {"messages": roundtrip("", json.dumps(WEATHER_ARGS)), "tools": TOOLS}),
    ("tool_roundtrip_string_args_long_id", {"messages": roundtrip("", json.dumps(WEATHER_ARGS), "call_9f8e7d6c5b4a"),
                                            "tools": TOOLS}),
    ("tool_call_pending", {"messages": [user("Weather in Paris?"),
                                        tool_turn("", [call("call_9f8e7d6c5b4a", "get_weather", WEATHER_ARGS)]),
                                        tool_result("call_9f8e7d6c5b4a", "get_weather", "{\"temp\": 21}")],
                           "tools": TOOLS}),
    ("parallel_tool_calls", {"messages": [
        user("Weather in Paris and Rome?"),
        tool_turn("Checking both.", [call("call_aaaaaaaaa1", "get_weather", {"city": "Paris"}),
                                     call("call_bbbbbbbbb2", "get_weather", {"city": "Rome", "days": 2})]),
        tool_result("call_aaaaaaaaa1", "get_weather", "{\"temp\": 21}"),
        tool_result("call_bbbbbbbbb2", "get_weather", "{\"temp\": 25}"),
        assistant("Paris 21, Rome 25.")], "tools": TOOLS}),
    ("empty_tool_calls", {"messages": [user("Hi."), tool_turn("Hello!", []), user("Bye.")], "tools": TOOLS}),
    ("long_conversation", {"messages": long_conversation()}),
    ("tool_args_numbers", {"messages": [user("Search."),
                                        tool_turn("", [call("call_0123456789", "search_docs", NUMBERS)]),
                                        tool_result("call_0123456789", "search_docs", "[]"),
                                        assistant("Nothing found.")], "tools": TOOLS}),
    ("content_parts", {"messages": [{"role": "system", "content": text_parts("You are terse.")},
                                    {"role": "user", "content": text_parts("Hello", " there ")}]}),
    ("content_parts_image", {"messages": [{"role": "user", "content": [{"type": "image"}] + text_parts(
        "What is in this picture?")}], "add_vision_id": True}),
    ("tools_in_user_message_false", {"messages": [SYS, user("Weather in Paris?")], "tools": TOOLS,
                                     "tools_in_user_message": False}),
    ("custom_tools", {"messages": [user("Weather in Paris?")], "custom_tools": TOOLS}),
    ("date_string", {"messages": [user("What day is it?")], "date_string": "01 Jan 2030"}),
    ("full_function_description", {"messages": [user("Weather?")], "tools": TOOLS,
                                   "full_function_description": True}),
    ("thinking_history", {"messages": [user("What is 2+2?"),
                                       assistant("<think>\nSimple sum.\n</think>\n\nIt is 4."),
                                       user("And 3+3?")], "enable_thinking": True, "thinking": True}),
    ("reasoning_content", {"messages": [user("What is 2+2?"),
                                        {"role": "assistant", "content": "It is 4.", "reasoning_content": "Add."}],
                           "add_generation_prompt": False, "enable_thinking": False}),
    ("enable_thinking_false", {"messages": [user("Hi.")], "enable_thinking": False, "thinking": False}),
    ("custom_roles", {"messages": [{"role": "meta-current_date", "content": "2025-12-03"},
                                   {"role": "meta-task_name", "content": "chat"}, SYS,
                                   {"role": "user_context", "content": "Some context."}, user("Summarise.")]}),
]


def tokens_for(name):
    for key, toks in TOKENS:
        if key in name:
            return toks
    return ("<s>", "</s>")


def full_case(name, case):
    bos, eos = tokens_for(name)
    c = {"add_generation_prompt": True, "bos_token": bos, "eos_token": eos, "now": NOW}
    c.update(case)
    c.pop("_ascii_json", None)
    return c


# ---------------------------------------------------------------------------
# Templates

def load_templates(tmpdir):
    """[(name, path, source)]; raises SystemExit with a message when the
    fetched templates or the SmolLM2 GGUF are missing."""
    if not os.path.isdir(VLLM_DIR):
        sys.exit(f"test_templates: {VLLM_DIR} is missing: run scripts/fetch-templates.sh")
    out = []
    for f in sorted(os.listdir(VLLM_DIR)):
        if f.endswith(".jinja"):
            p = os.path.join(VLLM_DIR, f)
            with open(p, encoding="utf-8") as fh:
                out.append((f, p, fh.read()))
    if len(out) != 40:
        sys.exit(f"test_templates: expected 40 templates in {VLLM_DIR}, found {len(out)}: "
                 "run scripts/fetch-templates.sh")
    if not os.path.isfile(SMOL_GGUF):
        sys.exit(f"test_templates: {SMOL_GGUF} is missing: run scripts/fetch-models.sh smollm2-135m")
    try:
        import gguf
    except ImportError:
        sys.exit("test_templates: the gguf package is missing from this python: run tests/tools/gguf_python.sh")
    field = gguf.GGUFReader(SMOL_GGUF).get_field("tokenizer.chat_template")
    if field is None:
        sys.exit(f"test_templates: {SMOL_GGUF} has no tokenizer.chat_template")
    src = field.contents()
    p = os.path.join(tmpdir, SMOL_NAME)
    with open(p, "w", encoding="utf-8") as fh:
        fh.write(src)
    out.append((SMOL_NAME, p, src))
    # our built-in templates (Gemma's file has none: it renders with builtin-gemma)
    for b in BUILTINS:
        r = subprocess.run([BIN, "template", "--chat-template", b, "--source"], capture_output=True, timeout=60)
        if r.returncode:
            sys.exit(f"test_templates: {BIN} template --chat-template {b} --source failed: {r.stderr[-300:]!r}")
        name = f"builtin-{b}.jinja"
        p = os.path.join(tmpdir, name)
        with open(p, "wb") as fh:
            fh.write(r.stdout)
        out.append((name, p, r.stdout.decode("utf-8")))
    return out


# ---------------------------------------------------------------------------
# Our side

SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "ERROR: UndefinedBehaviorSanitizer")


def run_ours(path, case_path):
    """(returncode or None on timeout, stdout bytes, stderr text)."""
    try:
        r = subprocess.run([BIN, "template", "--chat-template", path, "--input", case_path],
                           capture_output=True, timeout=TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or b"", (e.stderr or b"").decode("utf-8", "replace")
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


def ctx(b, off):
    lo = max(0, off - 40)
    return repr(b[lo:off + 40].decode("utf-8", "backslashreplace"))


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def check_case(path, case_name, case, ascii_json, tmpdir, expected, err, unsupported):
    """None if ours agrees, else a list of diagnostic lines."""
    case_path = os.path.join(tmpdir, "case.json")
    with open(case_path, "w", encoding="utf-8") as fh:
        json.dump(case, fh, ensure_ascii=ascii_json)
    rc, out, stderr = run_ours(path, case_path)
    tail = stderr.strip().splitlines()[-3:]
    if rc is None:
        return [f"{case_name}: timed out after {TIMEOUT} s"] + tail
    if rc < 0:
        return [f"{case_name}: killed by signal {-rc}"] + tail
    if any(s in stderr for s in SANITIZER):
        return [f"{case_name}: sanitizer report (exit {rc})"] + [
            ln for ln in stderr.splitlines() if any(s in ln for s in SANITIZER)][:3]
    if unsupported is not None:
        if rc == 0:
            return [f"{case_name}: listed in UNSUPPORTED ({unsupported}) but rendered {len(out)} bytes"]
        if unsupported not in stderr:
            return [f"{case_name}: exit {rc} but stderr does not name {unsupported!r}"] + tail
        return None
    if expected is None:
        if rc == 0:
            return [f"{case_name}: jinja2 raised ({err}) but ours exited 0 with {len(out)} bytes",
                    f"  ours: {ctx(out, 0)}"]
        if not stderr.strip():
            return [f"{case_name}: jinja2 raised ({err}); ours exited {rc} without a message on stderr"]
        return None
    want = expected.encode("utf-8")
    if rc != 0:
        return [f"{case_name}: jinja2 rendered {len(want)} bytes but ours exited {rc}"] + tail
    if out != want:
        off = first_diff(want, out)
        return [f"{case_name}: output differs at byte {off} (jinja2 {len(want)} bytes, ours {len(out)})",
                f"  jinja2: {ctx(want, off)}",
                f"  ours:   {ctx(out, off)}"]
    return None


# ---------------------------------------------------------------------------

def selected_cases(args):
    return [(n, c) for n, c in CASES if not args.case or args.case in n]


def python_only(templates, args):
    cases = selected_cases(args)
    summary = []
    for name, _path, src in templates:
        raised = []
        for cname, case in cases:
            c = full_case(name, case)
            text, err = render_py(src, c)
            if text is not None:
                print(f"{name:45s} {cname:36s} -> {len(text)} chars")
            else:
                print(f"{name:45s} {cname:36s} -> {err}")
                raised.append((cname, err))
            if args.dump:
                d = os.path.join(args.dump, name)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, cname + ".json"), "w", encoding="utf-8") as fh:
                    json.dump(c, fh, ensure_ascii=bool(case.get("_ascii_json")), indent=1)
                with open(os.path.join(d, cname + (".txt" if text is not None else ".err")), "w",
                          encoding="utf-8") as fh:
                    fh.write(text if text is not None else err + "\n")
        summary.append((name, len(cases) - len(raised), raised))
    print("\nsummary (rendered / cases; the cases jinja2 raises on):")
    for name, ok, raised in summary:
        print(f"{name}: {ok}/{len(cases)}")
        for cname, err in raised:
            print(f"    {cname}: {err[:150]}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python-only", action="store_true")
    ap.add_argument("--dump")
    ap.add_argument("--template", default="")
    ap.add_argument("--case", default="")
    args = ap.parse_args()
    os.chdir(ROOT)
    tmpdir = tempfile.mkdtemp(prefix="specula-template-")
    try:
        templates = [t for t in load_templates(tmpdir) if args.template in t[0]]
        if args.python_only:
            return python_only(templates, args)
        if not os.access(BIN, os.X_OK):
            sys.exit(f"test_templates: {BIN} is not an executable (build it, or set SPECULA_BIN)")
        cases = selected_cases(args)
        for name, path, src in templates:
            unsupported = UNSUPPORTED.get(name)
            fails = []
            for cname, case in cases:
                c = full_case(name, case)
                text, err = render_py(src, c)
                d = check_case(path, cname, c, bool(case.get("_ascii_json")), tmpdir, text, err, unsupported)
                if d:
                    fails.append(d)
            detail = []
            for d in fails[:3]:
                detail += d
            if len(fails) > 3:
                detail.append(f"... and {len(fails) - 3} more of {len(cases)} cases failed")
            label = f"{name} ({len(cases) - len(fails)}/{len(cases)} cases"
            label += f"; refused on purpose: {unsupported})" if unsupported else ")"
            tap(not fails, label, "\n".join(detail))
        return plan()
    finally:
        for f in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, f))
        os.rmdir(tmpdir)


if __name__ == "__main__":
    sys.exit(main())

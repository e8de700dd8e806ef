#!/usr/bin/env python3
"""Writes bench/agentic.jsonl: a repetitive, agentic workload for `specula bench`.

Same format as bench/prompts.jsonl (id, category, messages, max_tokens).
Three kinds of request:

  agentic_edit  ten rounds of "apply this small edit to the file you just
                printed".  `specula bench` runs every line as an independent
                request, so line k carries the whole conversation so far: the
                first user message with the file, then for each earlier round
                the assistant's reply (the file after that edit, written here
                as a correct assistant would print it) and the next
                instruction.  Each answer re-emits the previous file with one
                small change.
  agentic_json  the same with a JSON configuration, five rounds.
  repeat        identical requests sent more than once (a retried tool call,
                the same question from several users); at temperature 0 the
                answer repeats exactly.

Run: python3 bench/make_agentic.py > bench/agentic.jsonl
"""
import json

# ---------------------------------------------------------------------------
# The Python file and its ten edits
# ---------------------------------------------------------------------------

PY0 = '''def load_users(path):
    users = []
    with open(path) as f:
        for line in f:
            name, age = line.strip().split(",")
            users.append({"name": name, "age": int(age)})
    return users


def average_age(users):
    total = 0
    for u in users:
        total += u["age"]
    return total / len(users)


def oldest(users):
    best = users[0]
    for u in users:
        if u["age"] > best["age"]:
            best = u
    return best
'''


def py_edits():
    """(instruction, new file) for each round, each a small edit of the last."""
    s = PY0
    out = []

    def step(instr, new):
        nonlocal s
        assert new != s, instr
        s = new
        out.append((instr, s))

    step("Add a one-line docstring to load_users.",
         s.replace('def load_users(path):\n',
                   'def load_users(path):\n    """Reads name,age lines from a file."""\n'))
    step("Rename the function `oldest` to `find_oldest`.",
         s.replace("def oldest(users):", "def find_oldest(users):"))
    step("Make average_age return 0 for an empty list.",
         s.replace('def average_age(users):\n',
                   'def average_age(users):\n    if not users:\n        return 0\n'))
    step("Make load_users skip blank lines.",
         s.replace('        for line in f:\n',
                   '        for line in f:\n            if not line.strip():\n                continue\n'))
    step("Add a function `find_youngest` after find_oldest that mirrors it.",
         s + '''

def find_youngest(users):
    best = users[0]
    for u in users:
        if u["age"] < best["age"]:
            best = u
    return best
''')
    step("Rename the variable `best` to `result` in find_oldest and find_youngest.",
         s.replace("best", "result"))
    step("Use sum() in average_age instead of the loop.",
         s.replace('    total = 0\n    for u in users:\n        total += u["age"]\n',
                   '    total = sum(u["age"] for u in users)\n'))
    step("Add type hints to average_age: the argument is `list[dict]` and it returns `float`.",
         s.replace("def average_age(users):", "def average_age(users: list[dict]) -> float:"))
    step('Add the module docstring """User statistics.""" at the top of the file.',
         '"""User statistics."""\n\n\n' + s)
    step("Add a main() that prints the average age of users.csv, called under an "
         "`if __name__ == \"__main__\":` guard at the end.",
         s + '''

def main():
    print(average_age(load_users("users.csv")))


if __name__ == "__main__":
    main()
''')
    return out


# ---------------------------------------------------------------------------
# The JSON configuration and its five edits
# ---------------------------------------------------------------------------

CFG0 = {
    "server": {"host": "0.0.0.0", "port": 8080, "workers": 4},
    "database": {"url": "postgres://db:5432/app", "pool_size": 10, "timeout_s": 30},
    "logging": {"level": "info", "file": "/var/log/app.log"},
    "features": {"signup": True, "beta_search": False},
}


def cfg_edits():
    import copy
    c = copy.deepcopy(CFG0)
    out = []

    def step(instr, fn):
        fn(c)
        out.append((instr, json.dumps(c, indent=2)))

    step("Change the server port to 9090.", lambda c: c["server"].update(port=9090))
    step("Set the logging level to debug.", lambda c: c["logging"].update(level="debug"))
    step("Turn beta_search on.", lambda c: c["features"].update(beta_search=True))
    step("Raise the database pool_size to 20.", lambda c: c["database"].update(pool_size=20))
    step("Add a feature flag \"dark_mode\" set to false.", lambda c: c["features"].update(dark_mode=False))
    return out


# ---------------------------------------------------------------------------
# Conversations
# ---------------------------------------------------------------------------

def fence(lang, text):
    return "```%s\n%s\n```" % (lang, text.rstrip("\n"))


def chain(prefix, category, lang, first_user, edits, max_tokens):
    """Line k: the conversation up to the k-th instruction."""
    lines = []
    for k in range(len(edits)):
        msgs = []
        for j in range(k + 1):
            instr = edits[j][0] + " Print the whole file."
            msgs.append({"role": "user", "content": first_user + "\n\n" + instr if j == 0 else instr})
            if j < k:
                msgs.append({"role": "assistant", "content": fence(lang, edits[j][1])})
        lines.append({"id": "%s-%02d" % (prefix, k + 1), "category": category,
                      "messages": msgs, "max_tokens": max_tokens})
    return lines


REPEATS = [
    ("rep-palindrome", "Write a Python function is_palindrome(s) that ignores case and spaces, "
                       "with a docstring.", 160, 3),
    ("rep-hashtable", "Explain in three sentences what a hash table is.", 120, 3),
    ("rep-toolcall", "Reply only with a JSON object that calls the tool get_weather for the cities "
                     "Paris and Rome with units set to celsius.", 80, 2),
]


def main():
    lines = []
    lines += chain("edit-py", "agentic_edit", "python",
                   "Here is a Python file:\n\n" + fence("python", PY0), py_edits(), 320)
    lines += chain("edit-json", "agentic_json", "json",
                   "Here is our configuration file:\n\n" + fence("json", json.dumps(CFG0, indent=2)),
                   cfg_edits(), 220)
    for name, text, mt, times in REPEATS:
        for i in range(times):
            lines.append({"id": "%s-%d" % (name, i + 1), "category": "repeat",
                          "messages": [{"role": "user", "content": text}], "max_tokens": mt})
    for l in lines:
        print(json.dumps(l))


if __name__ == "__main__":
    main()

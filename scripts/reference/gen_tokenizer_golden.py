#!/usr/bin/env python3
"""Record llama.cpp's tokenization of a fixed list of strings for both test models.

Writes tests/data/tokenizer-golden-<model>.json.  For every string: the ids of
llama_tokenize(text, add_special=false, parse_special=false) ("ids") and with
parse_special=true ("ids_special").  For every id that appears (and the
special tokens listed under "special"), the bytes of llama_token_to_piece(id,
lstrip=0, special=false) as hex ("pieces"); "pieces_special" holds the ids
whose piece differs with special=true (control tokens render as their text).

Run from the repo root:  /tmp/refvenv/bin/python scripts/reference/gen_tokenizer_golden.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

import refcommon as rc  # noqa: E402

LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3

CASES = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "   three leading spaces",
    "multiple   spaces   between    words",
    "tab\tseparated\tvalues",
    "\t\tdouble tab indent",
    "line one\nline two",
    "para one\n\n\npara two",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n windows line end\r\n",
] + [" " * n for n in range(1, 18)] + [
    "a" + " " * n + "b" for n in (2, 3, 5, 8, 16)
] + [
    " " * 31,
    " " * 40,
    "=" * 64,
    "x = 1" + " " * 36 + "# aligned comment",
    "/" + "*" * 70 + "/",
    "\t" * 4,
    " \n \n\t \n",
    "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m",
    "Stra\u00dfe und Fu\u00dfball, gro\u00df",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac: \u03ba\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57\u3002",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "emoji \U0001F600\U0001F389 thumbs \U0001F44D\U0001F3FD",
    "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 zwj",
    "flags \U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5",
    "\u2764\ufe0f heart with VS16",
    "combining e\u0301 a\u0308 n\u0303",
    "1234567890",
    "3.14159",
    "12345678901234567890 and 7 and 42 and 999",
    "$1,234.56 on 2024-01-15 at 10:30",
    "don't I'M we'll they've she'd it's",
    "DON'T You're",
    "def foo(x):\n    if x > 0:\n        return x * 2\n    return None\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "<div class=\"x\"><p>Hello &amp; bye</p></div>",
    "https://example.com/path?query=1&other=two#frag",
    "^[a-zA-Z0-9._%+-]+@[a-z]+\\.[a-z]{2,}$",
    "mixed English \u4e2d\u6587 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u65e5\u672c\u8a9e",
    LONG_WORD,
    "!!!???...",
    "----====____****",
    "non\u00a0breaking\u00a0space",
    "ideographic\u3000space",
    "zero\u200bwidth",
    "\u200b",
    "ctrl \x01\x07\x1b[0m \x7f",
    "\x0b\x0c form feed",
    "<|im_start|>user\nhi<|im_end|>",
    "<start_of_turn>user\nhi<end_of_turn>",
    "<bos>",
    "<|endoftext|>",
    "<|im_start|>",
    "text<eos>more",
    "<unk><pad>",
    "\ufeffbyte order mark",
    "\U00010348 gothic hwair and \U0001D11E clef",
]

SPECIAL_TEXTS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>",
                 "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>"]


def special_ids(llm):
    """Name -> id for the special-token texts that are one token in this vocab."""
    out = {}
    for name in SPECIAL_TEXTS:
        ids = llm.tokenize(name.encode(), add_bos=False, special=True)
        if len(ids) == 1 and rc.piece(llm, ids[0], True) == name.encode():
            out[name] = ids[0]
    return out


def eog_ids(llm):
    vocab = rc.vocab_of(llm)
    return [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]


def tokenize_cases(llm):
    cases = []
    for text in CASES:
        raw = text.encode("utf-8")
        cases.append({
            "text_hex": raw.hex(),
            "text": text,
            "ids": llm.tokenize(raw, add_bos=False, special=False),
            "ids_special": llm.tokenize(raw, add_bos=False, special=True),
        })
    return cases


def pieces(llm, ids):
    plain, special = {}, {}
    for t in sorted(set(ids)):
        p = rc.piece(llm, t, False)
        s = rc.piece(llm, t, True)
        plain[str(t)] = p.hex()
        if s != p:
            special[str(t)] = s.hex()
    return plain, special


def run(key):
    path = rc.model_path(key)
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = rc.vocab_of(llm)
    md = llm.metadata
    cases = tokenize_cases(llm)
    specials = special_ids(llm)
    eog = eog_ids(llm)
    used = [t for c in cases for t in c["ids"] + c["ids_special"]]
    used += list(specials.values()) + eog + [llm.token_bos(), llm.token_eos()]
    plain, special = pieces(llm, used)
    obj = {
        "model": os.path.basename(path),
        "model_sha256": rc.sha256_file(path),
        "generator": rc.generator(),
        "command": rc.command(),
        "system_info": rc.system_info(),
        "api": "Llama(vocab_only=True).tokenize(text, add_bos=False, special=False|True); "
               "pieces: llama_token_to_piece(id, lstrip=0, special=False|True)",
        "tokenizer_model": md.get("tokenizer.ggml.model"),
        "tokenizer_pre": md.get("tokenizer.ggml.pre"),
        "n_vocab": llm.n_vocab(),
        "bos": llm.token_bos(),
        "eos": llm.token_eos(),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        "eog": eog,
        "special": specials,
        "n_cases": len(cases),
        "cases": cases,
        "pieces": plain,
        "pieces_special": special,
    }
    rc.write_json(os.path.join(rc.DATA, "tokenizer-golden-%s.json" % key), obj)


def main():
    for key in rc.MODELS:
        run(key)


if __name__ == "__main__":
    main()

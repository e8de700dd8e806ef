#!/usr/bin/env python3
"""Record llama.cpp's next-token logits and greedy continuations for both test models.

Writes tests/data/reference-<model>.json.  For each prompt:
  prompt_ids      llama_tokenize(prompt, add_special=<model's add_bos>, parse_special=true)
  top5            [[id, logit], ...] of the logits after the whole prompt, best first
  greedy_ids      up to 32 argmax tokens, each fed back one at a time; generation
                  stops early only when llama.cpp calls the token end-of-generation
                  (llama_vocab_is_eog); that token is included and "stop" says "eog"
  greedy_margins  for each greedy step, logit(top-1) - logit(top-2) of the logits
                  the step chose from (small margins explain near-tie flips)
  greedy_text     the pieces of greedy_ids (special=false), UTF-8 decoded with
                  replacement for humans; greedy_hex holds the exact bytes

Settings: n_ctx=2048, n_batch=2048 (whole prompt in one decode), flash attention
off, default f16 KV cache, CPU only, n_threads=1, seed 1234 (unused: no sampling).

Run from the repo root:  /tmp/refvenv/bin/python scripts/reference/gen_model_reference.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

import refcommon as rc  # noqa: E402

N_GREEDY = 32
N_THREADS = 1

PARAGRAPH = (
    "Lighthouses were once the most important aids to navigation along dangerous "
    "coasts. Before the invention of radio beacons and satellite positioning, a "
    "ship's captain approaching land at night relied on the distinctive pattern of "
    "flashes from each tower to work out exactly where the vessel was. Keepers lived "
    "in small cottages at the foot of the tower, trimming wicks, polishing the great "
    "glass lenses and winding the clockwork that turned the light. The work was "
    "lonely and often dangerous, especially on rocks far out at sea, where supplies "
    "could arrive only in calm weather. Today almost every lighthouse in the world is "
    "automated, and many of the old keepers' houses have become museums, where "
    "visitors can climb the narrow spiral stairs and look out over the water. The "
    "reason the towers still matter is that"
)

COMMON = [
    ("capital", "The capital of France is"),
    ("list", "1. Apples\n2."),
    ("code", "def fibonacci(n):"),
    ("paragraph", PARAGRAPH),
    ("french", "La ville de Paris est c\u00e9l\u00e8bre pour"),
    ("chinese", "\u4e2d\u56fd\u7684\u9996\u90fd\u662f"),
    ("numbers", "The year 1969 was when Apollo 11 landed. 12 + 35 ="),
    ("story", "Once upon a time, there was a little"),
    ("science", "Water boils at a temperature of"),
    ("python_import", "import numpy as np\nimport"),
    ("counting", "one, two, three, four,"),
]

CHAT = {
    "smollm2-135m": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                    "trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?"
                    "<|im_end|>\n<|im_start|>assistant\n",
    "gemma3-270m": "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
}


def last_logits(llm):
    """Copy of the logits of the last token of the last decode."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def top_k(logits, k):
    idx = np.argsort(-logits, kind="stable")[:k]
    return [[int(i), float(logits[i])] for i in idx]


def run_prompt(llm, name, prompt, add_bos):
    vocab = rc.vocab_of(llm)
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
    assert len(ids) <= llm.n_batch
    llm.reset()
    llm.eval(ids)
    logits = last_logits(llm)
    top5 = top_k(logits, 5)
    greedy, margins, stop = [], [], "length"
    for _ in range(N_GREEDY):
        two = top_k(logits, 2)
        tok = two[0][0]
        greedy.append(tok)
        margins.append(two[0][1] - two[1][1])
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            stop = "eog"
            break
        llm.eval([tok])
        logits = last_logits(llm)
    raw = rc.detok(llm, greedy)
    return {
        "name": name,
        "prompt_hex": prompt.encode("utf-8").hex(),
        "prompt": prompt,
        "prompt_ids": ids,
        "top5": top5,
        "greedy_ids": greedy,
        "greedy_margins": margins,
        "stop": stop,
        "greedy_hex": raw.hex(),
        "greedy_text": raw.decode("utf-8", errors="replace"),
    }


def run(key):
    path = rc.model_path(key)
    llm = Llama(model_path=path, n_ctx=2048, n_batch=2048, n_threads=N_THREADS,
                n_threads_batch=N_THREADS, seed=1234, flash_attn=False,
                logits_all=False, n_gpu_layers=0, verbose=False)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(rc.vocab_of(llm)))
    prompts = COMMON + [("chat", CHAT[key])]
    cases = [run_prompt(llm, n, p, add_bos) for n, p in prompts]
    obj = {
        "model": os.path.basename(path),
        "model_sha256": rc.sha256_file(path),
        "generator": rc.generator(),
        "command": rc.command(),
        "system_info": rc.system_info(),
        "settings": "n_ctx=2048 n_batch=2048 n_ubatch=512 flash_attn=off kv=f16 cpu "
                    "n_threads=%d; prompt decoded in one llama_decode, then one token "
                    "per llama_decode; logits = llama_get_logits_ith(ctx,-1)" % N_THREADS,
        "add_bos": add_bos,
        "n_greedy": N_GREEDY,
        "cases": cases,
    }
    rc.write_json(os.path.join(rc.DATA, "reference-%s.json" % key), obj)
    for c in cases:
        print("  %-14s %3d prompt toks, stop=%s, min margin %.3f: %r" % (
            c["name"], len(c["prompt_ids"]), c["stop"], min(c["greedy_margins"]),
            c["greedy_text"][:70]))


def main():
    for key in rc.MODELS:
        run(key)


if __name__ == "__main__":
    main()

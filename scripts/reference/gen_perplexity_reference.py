#!/usr/bin/env python3
"""Compute llama.cpp's perplexity of both test models over tests/data/perplexity.txt.

Method (the same chunking as llama.cpp's llama-perplexity tool):
  * tokens = llama_tokenize(whole text, add_special=<model's add_bos>, parse_special=false)
  * split into non-overlapping chunks of N_CTX=512 tokens; the incomplete tail is dropped
  * if the model adds BOS (Gemma), the first token of every chunk is replaced by BOS
    (chunk 0 already starts with it); SmolLM2 (add_bos false) keeps the text token
  * each chunk is decoded from an empty KV cache in one llama_decode with logits
    for every position (n_ctx=512, n_batch=512, flash attention off, f16 KV, CPU)
  * NLL_i = -log softmax(logits[i])[chunk[i+1]], computed in float64
  * "all": every token after the first of each chunk (511 per chunk);
    ppl = exp(sum NLL / count)
  * "second_half": only targets chunk[257..511] (logits at 256..510), which is
    what llama-perplexity itself scores by default (first = n_ctx/2)

Writes tests/data/perplexity-reference.json.
Run from the repo root:  /tmp/refvenv/bin/python scripts/reference/gen_perplexity_reference.py
"""

import hashlib
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

import refcommon as rc  # noqa: E402

N_CTX = 512
N_THREADS = 1
TEXT = os.path.join(rc.DATA, "perplexity.txt")


def chunk_nll(llm, chunk):
    """Per-position NLL (float64) of chunk[i+1] given chunk[0..i], i = 0..n-2."""
    llm.reset()
    llm.eval(chunk)
    logits = np.asarray(llm.scores[:len(chunk)], dtype=np.float64)
    mx = logits.max(axis=1, keepdims=True)
    lse = (mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1)))
    tgt = np.asarray(chunk[1:])
    return lse[:-1] - logits[np.arange(len(chunk) - 1), tgt]


def run(key, text):
    path = rc.model_path(key)
    llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX,
                n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=1234,
                flash_attn=False, logits_all=True, n_gpu_layers=0, verbose=False)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(rc.vocab_of(llm)))
    tokens = llm.tokenize(text, add_bos=add_bos, special=False)
    n_chunks = len(tokens) // N_CTX
    chunks = []
    tot_all = tot_half = 0.0
    cnt_all = cnt_half = 0
    first_nll = None
    for c in range(n_chunks):
        chunk = list(tokens[c * N_CTX:(c + 1) * N_CTX])
        if add_bos:
            chunk[0] = llm.token_bos()
        nll = chunk_nll(llm, chunk)
        half = nll[N_CTX // 2:]
        if first_nll is None:
            first_nll = [float(x) for x in nll[:16]]
        tot_all += float(nll.sum())
        cnt_all += len(nll)
        tot_half += float(half.sum())
        cnt_half += len(half)
        chunks.append({"first_token": chunk[0], "nll_sum": float(nll.sum()),
                       "n": len(nll), "ppl": math.exp(float(nll.mean())),
                       "ppl_second_half": math.exp(float(half.mean()))})
        print("  %s chunk %d: ppl %.4f (second half %.4f)" % (
            key, c, chunks[-1]["ppl"], chunks[-1]["ppl_second_half"]))
    return {
        "key": key,
        "model": os.path.basename(path),
        "model_sha256": rc.sha256_file(path),
        "add_bos": add_bos,
        "n_tokens": len(tokens),
        "n_chunks": n_chunks,
        "ppl": math.exp(tot_all / cnt_all),
        "n_scored": cnt_all,
        "ppl_second_half": math.exp(tot_half / cnt_half),
        "n_scored_second_half": cnt_half,
        "chunk0_nll_first16": first_nll,
        "chunks": chunks,
    }


def main():
    with open(TEXT, "rb") as f:
        text = f.read()
    results = [run(key, text) for key in rc.MODELS]
    obj = {
        "text": "tests/data/perplexity.txt",
        "text_sha256": hashlib.sha256(text).hexdigest(),
        "text_bytes": len(text),
        "generator": rc.generator(),
        "command": rc.command(),
        "system_info": rc.system_info(),
        "method": "tokens = tokenize(text, add_bos=model default, special=false); "
                  "non-overlapping chunks of %d tokens, tail dropped; chunk[0] := BOS when "
                  "add_bos; each chunk decoded alone from an empty cache (n_ctx=%d, "
                  "flash_attn off, f16 KV, CPU, n_threads=%d); NLL of chunk[i+1] from "
                  "logits at i in float64 log-softmax; ppl = exp(mean NLL) over i=0..%d "
                  "(ppl) or over i=%d..%d (ppl_second_half, llama-perplexity's default)"
                  % (N_CTX, N_CTX, N_THREADS, N_CTX - 2, N_CTX // 2, N_CTX - 2),
        "n_ctx": N_CTX,
        "models": results,
    }
    rc.write_json(os.path.join(rc.DATA, "perplexity-reference.json"), obj)
    for r in results:
        print("%s: %d tokens, %d chunks, ppl %.4f, second-half ppl %.4f" % (
            r["key"], r["n_tokens"], r["n_chunks"], r["ppl"], r["ppl_second_half"]))


if __name__ == "__main__":
    main()

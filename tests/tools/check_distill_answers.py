"""Checks the answer records of a train-draft data file made with a chat
model: each prompt ends with the chat template's assistant header (a
prompt cut at its end would make the model continue the user's text
instead of answering), and an answer holds no end-of-turn token (what a
model writes past the end of its turn is never drafted for; the record
stops before the answer's last token, which the model never read, and
keeps its distribution on the row before).  Prints 'ok: N answers' or the first problems; exits 1 on any.
With MARKER, the line goes on ', P pasted' for the prompts that hold it
(text from the corpus, not from the generated requests).

usage: check_distill_answers.py MODEL.gguf DATA.distill HEADER_TEXT EOG_TEXT [MARKER]"""
import struct
import sys

import gguf

model, path, header, eog = sys.argv[1:5]
marker = sys.argv[5] if len(sys.argv) > 5 else None
r = gguf.GGUFReader(model)
f = r.fields["tokenizer.ggml.tokens"]
vocab = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
# GPT-2 byte-level BPE: each byte is shown as one printable character
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}


def text(ids):
    out = b""
    for i in ids:
        t = vocab[i]
        out += t.encode() if t.startswith("<|") else bytes(byte_of.get(ch, 63) for ch in t)
    return out.decode("utf-8", "replace")


d = open(path, "rb").read()
n_embd, k = struct.unpack_from("<II", d, 8)
n_seqs = struct.unpack_from("<I", d, 28)[0]
at, answers, pasted, bad = 72, 0, 0, []
for s in range(n_seqs):
    n, loss_from = struct.unpack_from("<II", d, at)
    ids = struct.unpack_from("<%di" % n, d, at + 8)
    pb = n * k * 2
    at += 8 + n * 4 + n * k * 4 + pb + (4 - pb % 4) % 4 + n * 3 * n_embd * 2
    if loss_from == 0:
        continue                     # a window of text, not an answer
    answers += 1
    prompt, answer = text(ids[: loss_from + 1]), text(ids[loss_from + 1:])
    pasted += marker is not None and marker in prompt
    if not prompt.endswith(header):
        bad.append("sequence %d: the prompt ends with %r" % (s, prompt[-40:]))
    cut = answer.find(eog)
    if cut >= 0:
        bad.append("sequence %d: the answer holds %r: %r" % (s, eog, answer[cut: cut + 60]))
if at != len(d):
    bad.append("the file has %d bytes, the records end at %d" % (len(d), at))
if answers == 0:
    bad.append("no answer records")
if bad:
    print("\n".join(bad[:5]))
    sys.exit(1)
print("ok: %d answers" % answers + (", %d pasted" % pasted if marker else ""))

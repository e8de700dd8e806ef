/*
 * SentencePiece (BPE-style "llama" vocabularies, Gemma 3): spaces become
 * U+2581 "▁", the text is split into UTF-8 characters, and the adjacent
 * pair whose concatenation is the highest-scoring token is merged until no
 * pair forms a token.  Symbols that are not tokens fall back to <0xXX> byte
 * tokens.  Same procedure and tie-breaking as llama.cpp's
 * llm_tokenizer_spm_session; the heap makes a fragment of n characters
 * O(n log n), so long prompts stay fast.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */

typedef struct spm_state {
    const sp_tokenizer *t;
    const char *buf;
    sp_symbol *sym;
    sp_bigram_heap heap;
} spm_state;

/* Queues (l, r) if their concatenation (contiguous in buf) is a token. */
static void spm_add_bigram(spm_state *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sp_symbol *L = &s->sym[l], *R = &s->sym[r];
    uint32_t size = L->n + R->n;
    int32_t id = sp_strmap_get(&s->t->tok_map, s->buf + L->start, size);
    if (id < 0) return;
    sp_heap_push(&s->heap, (sp_bigram){ .prio = s->t->score[id], .left = l, .right = r,
                                        .size = size });
}

/* Emits a finished symbol: its token, else one byte token per byte (the
 * vocabulary's unknown token where a byte has none; an error if neither). */
static int spm_emit(const spm_state *s, const sp_symbol *y, sp_tokens *out, sp_err *err) {
    const sp_tokenizer *t = s->t;
    int32_t id = sp_strmap_get(&t->tok_map, s->buf + y->start, y->n);
    if (id >= 0) { sp_tokens_push(out, id); return 0; }
    for (uint32_t k = 0; k < y->n; k++) {
        unsigned char b = (unsigned char)s->buf[y->start + k];
        id = t->byte_tok[b] >= 0 ? t->byte_tok[b] : t->unk;
        if (id < 0)
            return sp_err_set(err, "the vocabulary has no token for byte 0x%02X and no unknown token",
                              b);
        sp_tokens_push(out, id);
    }
    return 0;
}

/* "▁"-escapes text (with a leading "▁" if add_prefix) into a new buffer. */
static char *spm_escape(const char *text, size_t len, bool add_prefix, size_t *out_len) {
    size_t spaces = add_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = sp_xmalloc(len + 2 * spaces + (add_prefix ? 1 : 0) + 1);
    size_t o = 0;
    if (add_prefix) { memcpy(buf, SPM_SPACE, 3); o = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + o, SPM_SPACE, 3); o += 3; }
        else buf[o++] = text[i];
    }
    *out_len = o;
    return buf;
}

int sp_spm_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_prefix,
                    sp_tokens *out, sp_err *err) {
    if (len > UINT32_MAX / 4) return sp_err_set(err, "text too long to tokenize (%zu bytes)", len);
    size_t blen;
    char *buf = spm_escape(text, len, add_prefix, &blen);
    spm_state s = { .t = t, .buf = buf, .sym = sp_xmalloc((blen ? blen : 1) * sizeof *s.sym) };
    int32_t ns = 0;
    for (uint32_t o = 0; o < blen; ns++) {
        uint32_t n = (uint32_t)sp_utf8_len((unsigned char)buf[o]);
        if (n > blen - o) n = (uint32_t)(blen - o);
        s.sym[ns] = (sp_symbol){ .prev = ns - 1, .next = o + n < blen ? ns + 1 : -1, .start = o,
                                 .n = n };
        o += n;
    }
    for (int32_t i = 1; i < ns; i++) spm_add_bigram(&s, i - 1, i);
    while (s.heap.n) {
        sp_bigram b = sp_heap_pop(&s.heap);
        sp_symbol *L = &s.sym[b.left], *R = &s.sym[b.right];
        if (!L->n || !R->n || L->n + R->n != b.size) continue; /* stale pair */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s.sym[R->next].prev = b.left;
        spm_add_bigram(&s, L->prev, b.left);
        spm_add_bigram(&s, b.left, L->next);
    }
    int rc = 0;
    for (int32_t i = 0; ns > 0 && i != -1 && rc == 0; i = s.sym[i].next)
        rc = spm_emit(&s, &s.sym[i], out, err);
    free(s.heap.v);
    free(s.sym);
    free(buf);
    return rc;
}

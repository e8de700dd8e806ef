/*
 * Byte-level BPE (GPT-2 style, SmolLM2): pre-tokenize into words, map every
 * byte of a word to its GPT-2 code point, then merge adjacent symbols by
 * merge rank until no ranked pair is left.  Same procedure and tie-breaking
 * as llama.cpp's llm_tokenizer_bpe_session, with a heap per word so a word
 * of m symbols costs O(m log m).
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct bpe_state {
    const sp_tokenizer *t;
    const char *word;
    sp_symbol *sym;
    size_t cap;
    sp_bigram_heap heap;
} bpe_state;

/* Queues the pair (l, r) if "l r" is a merge. */
static void bpe_add_bigram(bpe_state *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sp_symbol *L = &s->sym[l], *R = &s->sym[r];
    int32_t rank = sp_strmap_get_pair(&s->t->merge_map, s->word + L->start, L->n,
                                      s->word + R->start, R->n);
    if (rank < 0) return;
    sp_heap_push(&s->heap, (sp_bigram){ .prio = -(double)rank, .left = l, .right = r,
                                        .size = L->n + R->n });
}

/* Emits one finished symbol: its token, or (as llama.cpp does) the tokens of
 * its single bytes that exist, dropping the others. */
static void bpe_emit(const bpe_state *s, const sp_symbol *y, sp_tokens *out) {
    const char *p = s->word + y->start;
    int32_t id = sp_strmap_get(&s->t->tok_map, p, y->n);
    if (id >= 0) { sp_tokens_push(out, id); return; }
    for (uint32_t k = 0; k < y->n; k++) {
        id = sp_strmap_get(&s->t->tok_map, p + k, 1);
        if (id >= 0) sp_tokens_push(out, id);
    }
}

/* Merges one byte-encoded word.  A queued pair is stale once either side
 * changed; since symbols only grow rightwards from a fixed start, "both
 * still non-empty and their sizes still add up" is exactly "unchanged". */
static void bpe_word(bpe_state *s, const char *w, uint32_t wlen, sp_tokens *out) {
    if (s->t->pre.ignore_merges) {
        int32_t id = sp_strmap_get(&s->t->tok_map, w, wlen);
        if (id >= 0) { sp_tokens_push(out, id); return; }
    }
    SP_VEC_GROW(s->sym, s->cap, wlen);
    s->word = w;
    int32_t ns = 0;
    for (uint32_t o = 0; o < wlen; ns++) {
        uint32_t n = (uint32_t)sp_utf8_len((unsigned char)w[o]);
        if (n > wlen - o) n = wlen - o;
        s->sym[ns] = (sp_symbol){ .prev = ns - 1, .next = o + n < wlen ? ns + 1 : -1,
                                  .start = o, .n = n };
        o += n;
    }
    s->heap.n = 0;
    for (int32_t i = 1; i < ns; i++) bpe_add_bigram(s, i - 1, i);
    while (s->heap.n) {
        sp_bigram b = sp_heap_pop(&s->heap);
        sp_symbol *L = &s->sym[b.left], *R = &s->sym[b.right];
        if (!L->n || !R->n || L->n + R->n != b.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s->sym[R->next].prev = b.left;
        bpe_add_bigram(s, L->prev, b.left);
        bpe_add_bigram(s, b.left, L->next);
    }
    for (int32_t i = 0; ns > 0 && i != -1; i = s->sym[i].next) bpe_emit(s, &s->sym[i], out);
}

/* Byte-encodes code points cps[0..n) into buf (8 bytes per code point at
 * most: up to 4 UTF-8 bytes, each an image of at most 2 bytes). */
static uint32_t bpe_encode_word(const sp_bytemap *bm, const uint32_t *cps, uint32_t n, char *buf) {
    uint32_t o = 0;
    for (uint32_t i = 0; i < n; i++) {
        char u[4];
        size_t k = sp_utf8_encode(cps[i], u);
        for (size_t j = 0; j < k; j++)
            o += (uint32_t)sp_utf8_encode(bm->byte_to_cp[(unsigned char)u[j]], buf + o);
    }
    return o;
}

int sp_bpe_tokenize(const sp_tokenizer *t, const char *text, size_t len, sp_tokens *out,
                    sp_err *err) {
    if (len > UINT32_MAX / 8) return sp_err_set(err, "text too long to tokenize (%zu bytes)", len);
    uint32_t *cps = sp_xmalloc((len ? len : 1) * sizeof *cps);
    uint32_t n = 0;
    for (size_t i = 0; i < len;) cps[n++] = sp_utf8_decode_lenient((const unsigned char *)text, len, &i);
    sp_span *words = NULL;
    uint32_t n_words = 0;
    if (sp_pretok_split(&t->pre, cps, n, &words, &n_words, err) != 0) {
        free(cps);
        return -1;
    }
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n_words; i++)
        if (words[i].len > longest) longest = words[i].len;
    char *buf = sp_xmalloc((size_t)longest * 8 + 1);
    bpe_state s = { .t = t };
    for (uint32_t i = 0; i < n_words; i++) {
        uint32_t wlen = bpe_encode_word(&t->bytes, cps + words[i].start, words[i].len, buf);
        bpe_word(&s, buf, wlen, out);
    }
    free(s.sym);
    free(s.heap.v);
    free(buf);
    free(words);
    free(cps);
    return 0;
}

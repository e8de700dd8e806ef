/* Binary heap of merge candidates shared by BPE and SentencePiece. */
#include "tokenizer/internal.h"

/* a comes out before b: higher priority, then the leftmost pair (the order
 * of llama.cpp's comparators, which makes merging deterministic). */
static bool hp_before(const sp_bigram *a, const sp_bigram *b) {
    if (a->prio != b->prio) return a->prio > b->prio;
    return a->left < b->left;
}

void sp_heap_push(sp_bigram_heap *h, sp_bigram b) {
    SP_VEC_GROW(h->v, h->cap, h->n + 1);
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hp_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
}

sp_bigram sp_heap_pop(sp_bigram_heap *h) {
    assert(h->n > 0);
    sp_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && hp_before(&h->v[c + 1], &h->v[c])) c++;
        if (!hp_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

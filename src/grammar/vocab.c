/*
 * vocab.c — a tokenizer's token texts as a byte trie for grammar masks.
 *
 * The trie is stored in preorder: node i's subtree is [i, end), so a mask
 * is one forward scan over the node array that jumps over a subtree the
 * grammar rules out — no pointers chased, no recursion.  It is built from
 * the token texts sorted bytewise: consecutive texts share their longest
 * common prefix, so each text adds the nodes after that prefix, and a text
 * comes before every text it prefixes (its tokens are numbered before the
 * nodes of its subtree: node i owns toks[tok_off[i] .. tok_off[i+1])).
 */
#include "grammar/internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct vtext {
    const char *p;
    uint32_t len;
    int32_t id;
} vtext;

static int cmp_text(const void *a, const void *b) {
    const vtext *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Token kinds and the concatenated bytes of the text tokens. */
static void collect(sp_gvocab *v) {
    const sp_tokenizer *t = v->t;
    int32_t n = v->n_vocab;
    v->kind = sp_xcalloc((size_t)n, 1);
    v->off = sp_xmalloc(((size_t)n + 1) * sizeof *v->off);
    size_t cap = (size_t)n * 8, used = 0, cap_eog = 0;
    v->bytes = sp_xmalloc(cap);
    for (int32_t id = 0; id < n; id++) {
        v->off[id] = (uint32_t)used;
        if (sp_tokenizer_is_eog(t, id)) {
            v->kind[id] = SP_GV_EOG;
            SP_VEC_GROW(v->eog, cap_eog, (size_t)v->n_eog + 1);
            v->eog[v->n_eog++] = id;
            continue;
        }
        if (sp_tokenizer_is_control(t, id)) continue;
        size_t len = sp_token_piece(t, id, false, NULL, 0);
        if (len == 0) continue;                  /* unused tokens never match text */
        if (used + len > cap) {
            while (used + len > cap) cap *= 2;
            v->bytes = sp_xrealloc(v->bytes, cap);
        }
        sp_token_piece(t, id, false, v->bytes + used, len);
        used += len;
        v->kind[id] = SP_GV_TEXT;
    }
    v->off[n] = (uint32_t)used;
}

static void build_trie(sp_gvocab *v) {
    int32_t n = v->n_vocab;
    vtext *txt = sp_xmalloc((size_t)n * sizeof *txt);
    size_t nt = 0;
    for (int32_t id = 0; id < n; id++)
        if (v->kind[id] == SP_GV_TEXT)
            txt[nt++] = (vtext){ v->bytes + v->off[id], v->off[id + 1] - v->off[id], id };
    qsort(txt, nt, sizeof *txt, cmp_text);

    uint32_t maxlen = 0;
    for (size_t k = 0; k < nt; k++) if (txt[k].len > maxlen) maxlen = txt[k].len;
    assert(maxlen < UINT16_MAX);
    uint32_t *path = sp_xmalloc(((size_t)maxlen + 1) * sizeof *path);   /* node at each depth */
    size_t cap = nt * 2 + 2;
    sp_gtnode *nodes = sp_xmalloc(cap * sizeof *nodes);
    v->toks = sp_xmalloc((nt + 1) * sizeof *v->toks);
    uint32_t nn = 1, ntok = 0, depth = 0;        /* depth: length of the current path */
    nodes[0] = (sp_gtnode){ 0, 0, 0, 0 };
    path[0] = 0;
    const vtext *prev = NULL;
    for (size_t k = 0; k < nt; k++) {
        const vtext *x = &txt[k];
        uint32_t lcp = 0;
        if (prev) {
            uint32_t lim = prev->len < x->len ? prev->len : x->len;
            while (lcp < lim && prev->p[lcp] == x->p[lcp]) lcp++;
        }
        for (; depth > lcp; depth--) nodes[path[depth]].end = nn;   /* close the old branch */
        for (; depth < x->len; depth++) {
            if (nn + 1 > cap) { cap *= 2; nodes = sp_xrealloc(nodes, cap * sizeof *nodes); }
            nodes[nn] = (sp_gtnode){ 0, ntok, (uint16_t)(depth + 1), (uint8_t)x->p[depth] };
            path[depth + 1] = nn++;
        }
        v->toks[ntok++] = x->id;
        prev = x;
    }
    for (; depth > 0; depth--) nodes[path[depth]].end = nn;
    nodes[0].end = nn;
    nodes = sp_xrealloc(nodes, ((size_t)nn + 1) * sizeof *nodes);
    nodes[nn] = (sp_gtnode){ nn, ntok, 0, 0 };   /* sentinel: tok_off of "node nn" */
    v->nodes = nodes;
    v->n_nodes = nn;
    v->max_depth = maxlen;
    free(path);
    free(txt);
}

sp_gvocab *sp_gvocab_create(const sp_tokenizer *t, sp_err *err) {
    if (!t) { sp_err_set(err, "grammar vocabulary: no tokenizer"); return NULL; }
    int32_t n = sp_tokenizer_n_vocab(t);
    if (n <= 0) { sp_err_set(err, "grammar vocabulary: empty vocabulary"); return NULL; }
    sp_gvocab *v = sp_xcalloc(1, sizeof *v);
    v->t = t;
    v->n_vocab = n;
    collect(v);
    build_trie(v);
    return v;
}

void sp_gvocab_free(sp_gvocab *v) {
    if (!v) return;
    free(v->kind);
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v->nodes);
    free(v->toks);
    free(v);
}

int sp_gvocab_n_vocab(const sp_gvocab *v) { return v->n_vocab; }

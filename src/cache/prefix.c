/* The prefix cache: a radix tree over token ids whose edges carry the KV
 * rows of their positions (see cache.h). */
#include "cache/internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------
 * Nodes
 * ------------------------------------------------------------------------- */

size_t sp_pcache_token_bytes(const sp_pcache *pc) {
    return pc->pre[0][pc->n_layer] + pc->pre[1][pc->n_layer] + sizeof(int32_t);
}

size_t sp_pc_node_bytes(const sp_pcache *pc, const pc_node *x) {
    size_t b = sizeof *x + (size_t)x->len * sp_pcache_token_bytes(pc);
    for (int i = 0; i < x->n_ckpts; i++) b += x->ckpts[i].len + strlen(x->ckpts[i].ns) + 1 + sizeof(pc_ckpt);
    return b;
}

/* A node for positions [depth, depth + len), its rows uninitialised. */
pc_node *sp_pc_node_new(sp_pcache *pc, pc_node *parent, const int32_t *toks, int len) {
    pc_node *x = sp_xcalloc(1, sizeof *x);
    x->parent = parent;
    x->len = len;
    x->depth = parent->depth + parent->len;
    x->toks = sp_xmalloc((size_t)len * sizeof(int32_t));
    memcpy(x->toks, toks, (size_t)len * sizeof(int32_t));
    for (int s = 0; s < 2; s++) x->kv[s] = sp_xmalloc((size_t)len * pc->pre[s][pc->n_layer]);
    SP_VEC_GROW(parent->kids, parent->cap_kids, parent->n_kids + 1);
    parent->kids[parent->n_kids++] = x;
    SP_VEC_GROW(pc->all, pc->cap_all, pc->n_all + 1);
    x->idx = pc->n_all;
    pc->all[pc->n_all++] = x;
    x->used = pc->tick;
    return x;
}

static void ckpts_free(pc_node *x) {
    for (int i = 0; i < x->n_ckpts; i++) {
        free(x->ckpts[i].ns);
        free(x->ckpts[i].blob);
    }
    free(x->ckpts);
    x->ckpts = NULL;
    x->n_ckpts = 0;
}

/* Frees a leaf and unlinks it from its parent and from pc->all. */
static void node_drop(sp_pcache *pc, pc_node *x) {
    assert(x->n_kids == 0 && x->parent && x->pin == 0);
    pc->st.bytes -= sp_pc_node_bytes(pc, x);
    pc_node *p = x->parent;
    for (int i = 0; i < p->n_kids; i++)
        if (p->kids[i] == x) {
            p->kids[i] = p->kids[--p->n_kids];
            break;
        }
    pc->all[x->idx] = pc->all[--pc->n_all];
    pc->all[x->idx]->idx = x->idx;
    ckpts_free(x);
    free(x->kids);
    free(x->toks);
    free(x->kv[0]);
    free(x->kv[1]);
    free(x);
}

/* Copies rows [from, from + n) of one side (0 = K, 1 = V) of a node of
 * len_src rows into rows [to, to + n) of a node of len_dst rows. */
static void rows_copy(const sp_pcache *pc, int side, uint8_t *dst, int len_dst, int to, const uint8_t *src,
                      int len_src, int from, int n) {
    for (int il = 0; il < pc->n_layer; il++) {
        const size_t r = pc->row[side][il], p = pc->pre[side][il];
        memcpy(dst + (size_t)len_dst * p + (size_t)to * r, src + (size_t)len_src * p + (size_t)from * r, (size_t)n * r);
    }
}

/* Rows [from, from + n) of a node into positions [to, to + n) of a cache,
 * or (to_node) the other way. */
static void rows_kv(const sp_pcache *pc, pc_node *x, int from, const sp_kv *kv, int to, int n, bool to_node) {
    for (int s = 0; s < 2; s++)
        for (int il = 0; il < pc->n_layer; il++) {
            const size_t r = pc->row[s][il];
            uint8_t *nrow = x->kv[s] + (size_t)x->len * pc->pre[s][il] + (size_t)from * r;
            uint8_t *krow = s ? sp_kv_vrow(kv, il, to) : sp_kv_krow(kv, il, to);
            if (to_node) memcpy(nrow, krow, (size_t)n * r);
            else memcpy(krow, nrow, (size_t)n * r);
        }
}

/* Splits x after its first m tokens (0 < m < len): a new node takes the
 * first part and becomes x's parent.  Checkpoints stay with x (they
 * describe the state after x's last token).  Returns the new node, which
 * replaces x at the end of the walked path (and takes over its pin). */
static pc_node *node_split(sp_pcache *pc, pc_node *x, int m) {
    assert(m > 0 && m < x->len && x->parent);
    pc_node *p = x->parent;
    const size_t before = sp_pc_node_bytes(pc, x);
    pc_node *top = sp_pc_node_new(pc, p, x->toks, m);     /* appended to p's kids: x is unlinked below */
    p->n_kids--;
    for (int i = 0; i < p->n_kids; i++)
        if (p->kids[i] == x) p->kids[i] = top;
    const int rest = x->len - m;
    for (int s = 0; s < 2; s++) {
        rows_copy(pc, s, top->kv[s], m, 0, x->kv[s], x->len, 0, m);
        uint8_t *b = sp_xmalloc((size_t)rest * pc->pre[s][pc->n_layer]);
        rows_copy(pc, s, b, rest, 0, x->kv[s], x->len, m, rest);
        free(x->kv[s]);
        x->kv[s] = b;
    }
    memmove(x->toks, x->toks + m, (size_t)rest * sizeof(int32_t));
    x->len = rest;
    x->depth += m;
    x->parent = top;
    top->kids = sp_xmalloc(sizeof *top->kids);
    top->cap_kids = 1;
    top->kids[0] = x;
    top->n_kids = 1;
    top->used = x->used;
    pc->st.bytes += sp_pc_node_bytes(pc, top) + sp_pc_node_bytes(pc, x) - before;
    if (pc->n_path && pc->path[pc->n_path - 1] == x) {
        pc->path[pc->n_path - 1] = top;
        top->pin = x->pin;
        x->pin = 0;
    }
    return top;
}

/* ----------------------------------------------------------------------------
 * Walking and eviction
 * ------------------------------------------------------------------------- */

pc_node *sp_pc_kid_with(const pc_node *x, int32_t t) {
    for (int i = 0; i < x->n_kids; i++)
        if (x->kids[i]->toks[0] == t) return x->kids[i];
    return NULL;
}

/* Follows toks[0..n) down the tree.  pc->path gets the nodes entered (the
 * last may match only its first *part tokens: *part < its len).  Returns
 * the tokens matched. */
static int walk(sp_pcache *pc, const int32_t *toks, int n, int *part) {
    pc->n_path = 0;
    *part = 0;
    const pc_node *x = &pc->root;
    int at = 0;
    while (at < n) {
        pc_node *k = sp_pc_kid_with(x, toks[at]);
        if (!k) break;
        int m = 0;
        while (m < k->len && at + m < n && k->toks[m] == toks[at + m]) m++;
        SP_VEC_GROW(pc->path, pc->cap_path, pc->n_path + 1);
        pc->path[pc->n_path++] = k;
        at += m;
        if (m < k->len) {
            *part = m;
            break;
        }
        x = k;
    }
    return at;
}

static void path_touch(sp_pcache *pc) {
    pc->tick++;
    for (int i = 0; i < pc->n_path; i++) pc->path[i]->used = pc->tick;
}

static void path_pin(sp_pcache *pc, int by) {
    for (int i = 0; i < pc->n_path; i++) pc->path[i]->pin += by;
}

/* Evicts the least recently used unpinned leaf; false when none is left.
 * A parent is used at least as recently as its children (every walk
 * touches the whole path), so leaves go before the prefixes they extend. */
static bool evict_one(sp_pcache *pc) {
    pc_node *best = NULL;
    for (int i = 0; i < pc->n_all; i++) {
        pc_node *x = pc->all[i];
        if (x->n_kids || x->pin) continue;
        if (!best || x->used < best->used || (x->used == best->used && x->depth > best->depth)) best = x;
    }
    if (!best) return false;
    pc->st.evictions++;
    pc->st.evicted_tokens += best->len;
    node_drop(pc, best);
    return true;
}

/* Frees room until `need` more bytes fit; false if they cannot. */
static bool make_room(sp_pcache *pc, size_t need) {
    if (need > pc->st.budget) return false;
    while (pc->st.bytes + need > pc->st.budget)
        if (!evict_one(pc)) return false;
    return true;
}

/* ----------------------------------------------------------------------------
 * Public operations
 * ------------------------------------------------------------------------- */

static sp_pcache *pcache_new(int n_layer, int kv_dim, const uint32_t *tk, const uint32_t *tv, const size_t *rk,
                             const size_t *rv, size_t budget, const char *identity) {
    assert(n_layer > 0 && kv_dim > 0);
    sp_pcache *pc = sp_xcalloc(1, sizeof *pc);
    pc->n_layer = n_layer;
    pc->kv_dim = kv_dim;
    const uint32_t *t[2] = { tk, tv };
    const size_t *r[2] = { rk, rv };
    for (int s = 0; s < 2; s++) {
        pc->type[s] = sp_xmalloc((size_t)n_layer * sizeof *pc->type[s]);
        pc->row[s] = sp_xmalloc((size_t)n_layer * sizeof *pc->row[s]);
        pc->pre[s] = sp_xmalloc(((size_t)n_layer + 1) * sizeof *pc->pre[s]);
        pc->pre[s][0] = 0;
        for (int il = 0; il < n_layer; il++) {
            pc->type[s][il] = t[s] ? t[s][il] : SP_F16;
            pc->row[s][il] = r[s] ? r[s][il] : (size_t)kv_dim * sizeof(sp_f16);
            pc->pre[s][il + 1] = pc->pre[s][il] + pc->row[s][il];
        }
    }
    pc->identity = sp_xstrdup(identity ? identity : "");
    pc->st.budget = budget;
    return pc;
}

sp_pcache *sp_pcache_create(int n_layer, int kv_dim, size_t budget, const char *identity) {
    return pcache_new(n_layer, kv_dim, NULL, NULL, NULL, NULL, budget, identity);
}

sp_pcache *sp_pcache_create_like(const sp_kv *kv, size_t budget, const char *identity) {
    return pcache_new(kv->n_layer, kv->kv_dim, kv->type_k, kv->type_v, kv->row_k, kv->row_v, budget, identity);
}

/* Whether kv's rows have this cache's layout. */
static inline bool same_shape(const sp_pcache *pc, const sp_kv *kv) {
    if (kv->n_layer != pc->n_layer || kv->kv_dim != pc->kv_dim) return false;
    for (int il = 0; il < pc->n_layer; il++)
        if (kv->row_k[il] != pc->row[0][il] || kv->row_v[il] != pc->row[1][il] ||
            kv->type_k[il] != pc->type[0][il] || kv->type_v[il] != pc->type[1][il])
            return false;
    return true;
}

void sp_pcache_clear(sp_pcache *pc) {
    for (int i = 0; i < pc->n_all; i++) pc->all[i]->pin = 0;
    while (pc->n_all) {                /* leaves first, until the tree is empty */
        for (int i = pc->n_all - 1; i >= 0; i--)
            if (pc->all[i]->n_kids == 0) node_drop(pc, pc->all[i]);
    }
    ckpts_free(&pc->root);
    assert(pc->st.bytes == 0);
}

void sp_pcache_free(sp_pcache *pc) {
    if (!pc) return;
    sp_pcache_clear(pc);
    free(pc->root.kids);
    free(pc->all);
    free(pc->path);
    free(pc->identity);
    for (int s = 0; s < 2; s++) {
        free(pc->type[s]);
        free(pc->row[s]);
        free(pc->pre[s]);
    }
    free(pc);
}

const char *sp_pcache_identity(const sp_pcache *pc) { return pc->identity; }

int sp_pcache_match(sp_pcache *pc, const int32_t *toks, int n) {
    int part;
    return walk(pc, toks, n, &part);
}

int sp_pcache_load(sp_pcache *pc, const int32_t *toks, int n, int max_len, sp_kv *kv) {
    assert(same_shape(pc, kv));
    pc->st.lookups++;
    int part;
    int got = walk(pc, toks, n < max_len ? n : max_len, &part);
    if (got > kv->n_ctx) got = kv->n_ctx;
    if (got <= 0) return 0;
    path_touch(pc);
    for (int i = 0; i < pc->n_path; i++) {
        const pc_node *x = pc->path[i];
        if (x->depth >= got) break;
        const int m = x->depth + x->len <= got ? x->len : got - x->depth;
        rows_kv(pc, (pc_node *)x, 0, kv, x->depth, m, false);
    }
    kv->n = got;
    pc->st.hits++;
    pc->st.hit_tokens += got;
    return got;
}

int sp_pcache_store(sp_pcache *pc, const int32_t *toks, int n, const sp_kv *kv) {
    assert(same_shape(pc, kv) && n <= kv->n);
    int part;
    const int have = walk(pc, toks, n, &part);
    path_touch(pc);
    if (have == n) return n;
    path_pin(pc, 1);
    pc_node *at = pc->n_path ? pc->path[pc->n_path - 1] : &pc->root;
    if (part) at = node_split(pc, at, part);      /* the new edge branches off after `have` tokens */
    /* the new edge: as many of the remaining tokens as the budget allows */
    const size_t per = sp_pcache_token_bytes(pc);
    int len = n - have;
    if (!make_room(pc, sizeof(pc_node) + (size_t)len * per)) {
        /* shorter: whatever fits once every unpinned leaf is gone */
        while (evict_one(pc)) {}
        const size_t free_b = pc->st.budget > pc->st.bytes ? pc->st.budget - pc->st.bytes : 0;
        len = free_b > sizeof(pc_node) ? (int)((free_b - sizeof(pc_node)) / per) : 0;
        if (len > n - have) len = n - have;
    }
    int stored = have;
    if (len > 0) {
        pc_node *x = sp_pc_node_new(pc, at, toks + have, len);
        rows_kv(pc, x, 0, kv, have, len, true);
        pc->st.bytes += sp_pc_node_bytes(pc, x);
        pc->st.stored_tokens += len;
        stored += len;
    }
    path_pin(pc, -1);
    return stored;
}

int sp_pcache_put_ckpt(sp_pcache *pc, const int32_t *toks, int n, const char *ns, const uint8_t *blob,
                       size_t len) {
    int part;
    if (n <= 0 || walk(pc, toks, n, &part) != n) return -1;
    path_touch(pc);
    path_pin(pc, 1);
    pc_node *x = pc->path[pc->n_path - 1];
    if (part) x = node_split(pc, x, part);   /* the boundary falls inside x: end a node there */
    for (int i = 0; i < x->n_ckpts; i++)
        if (!strcmp(x->ckpts[i].ns, ns)) {   /* replaced */
            pc->st.bytes -= x->ckpts[i].len + strlen(ns) + 1 + sizeof(pc_ckpt);
            free(x->ckpts[i].ns);
            free(x->ckpts[i].blob);
            x->ckpts[i] = x->ckpts[--x->n_ckpts];
            break;
        }
    const size_t need = len + strlen(ns) + 1 + sizeof(pc_ckpt);
    int rc = -1;
    if (make_room(pc, need)) {
        x->ckpts = sp_xrealloc(x->ckpts, (size_t)(x->n_ckpts + 1) * sizeof *x->ckpts);
        pc_ckpt *c = &x->ckpts[x->n_ckpts++];
        c->ns = sp_xstrdup(ns);
        c->blob = sp_xmalloc(len ? len : 1);
        memcpy(c->blob, blob, len);
        c->len = len;
        pc->st.bytes += need;
        rc = 0;
    }
    path_pin(pc, -1);
    return rc;
}

int sp_pcache_find_ckpt(sp_pcache *pc, const int32_t *toks, int n, int max_len, const char *ns,
                        const uint8_t **blob, size_t *len) {
    int part;
    const int got = walk(pc, toks, n < max_len ? n : max_len, &part);
    (void)got;
    for (int i = pc->n_path - 1; i >= 0; i--) {
        const pc_node *x = pc->path[i];
        if (i == pc->n_path - 1 && part) continue;   /* matched only partly: no boundary at its end */
        for (int j = 0; j < x->n_ckpts; j++)
            if (!strcmp(x->ckpts[j].ns, ns)) {
                *blob = x->ckpts[j].blob;
                *len = x->ckpts[j].len;
                pc->st.ckpt_hits++;
                return x->depth + x->len;
            }
    }
    return 0;
}

sp_pcache_stats sp_pcache_get_stats(const sp_pcache *pc) {
    sp_pcache_stats s = pc->st;
    s.nodes = pc->n_all;
    return s;
}

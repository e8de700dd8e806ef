/* The batched forward pass: one function per architecture, read top to
 * bottom.  Rows of a pass are computed independently with fixed arithmetic
 * (see kernels.h), so results do not depend on how many rows share a pass. */
#include "model/model.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct sp_workspace {
    int max_rows;
    sp_pool *pool;          /* borrowed */
    float *x;               /* (max_rows, n_embd) residual stream */
    float *xb;              /* (max_rows, n_embd) normed input of a block */
    float *xb2;             /* (max_rows, n_embd) block output */
    float *q;               /* (max_rows, n_head * head_dim) */
    float *k;               /* (max_rows, kv_dim) */
    float *v;               /* (max_rows, kv_dim) */
    float *att;             /* (max_rows, n_head * head_dim) attention output */
    float *hb;              /* (max_rows, n_ff) */
    float *hb2;             /* (max_rows, n_ff) */
    void *act;              /* quantized activations for sp_matmul */
    float *rope_cs;         /* (n_rot) RoPE cos/sin table of one row */
    float *scores;          /* (n_threads, scores_cap) attention scratch */
    int32_t *keys;          /* (n_threads, scores_cap) key slots of a tree row */
    int scores_cap;
    struct fwd_row *rows;   /* (max_rows) where each row of a chunk belongs */
    bool any_taps;          /* some row of the current chunk wants taps */
    uint8_t *skip;          /* (n_layer) layers this workspace's passes skip, NULL = none */
};

/* One row of a pass: which cache it reads and writes, where. */
typedef struct fwd_row {
    sp_kv *kv;
    int slot;               /* cache slot of the row's K/V */
    int pos;                /* RoPE position */
    int base;               /* first slot of the row's window (cache length before the pass) */
    const int32_t *parent;  /* tree rows: parents within the window; NULL = chain */
    int wi;                 /* index in the window */
    float *logits;          /* where this row's logits go, or NULL */
    const int32_t *tap_layers; /* (n_taps) boundaries to copy, see sp_fwd_seq */
    int n_taps;
    float *taps;            /* (n_taps, n_embd) this row's taps, NULL = none */
} fwd_row;

/* ----------------------------------------------------------------------------
 * Workspace
 * ------------------------------------------------------------------------- */

static size_t max_scratch(const sp_model *m, int rows) {
    size_t s = sp_matmul_scratch_bytes(m->output.type, m->hp.n_embd, rows);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        const sp_matrix *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            size_t b = sp_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, rows);
            if (b > s) s = b;
        }
        /* Q, K, V and gate, up go through sp_matmul_many */
        size_t b = sp_matmul_many_scratch_bytes(ws, 3, rows);
        if (b > s) s = b;
        b = sp_matmul_many_scratch_bytes(ws + 4, 2, rows);
        if (b > s) s = b;
    }
    return s;
}

sp_workspace *sp_workspace_create(const sp_model *m, int max_rows, sp_pool *pool) {
    const sp_hparams *hp = &m->hp;
    const size_t R = (size_t)max_rows, qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    sp_workspace *ws = sp_xcalloc(1, sizeof *ws);
    ws->max_rows = max_rows;
    ws->pool = pool;
    ws->x = sp_alloc_aligned(R * hp->n_embd * sizeof(float));
    ws->xb = sp_alloc_aligned(R * hp->n_embd * sizeof(float));
    ws->xb2 = sp_alloc_aligned(R * hp->n_embd * sizeof(float));
    ws->q = sp_alloc_aligned(R * qd * sizeof(float));
    ws->att = sp_alloc_aligned(R * qd * sizeof(float));
    ws->k = sp_alloc_aligned(R * kvd * sizeof(float));
    ws->v = sp_alloc_aligned(R * kvd * sizeof(float));
    ws->hb = sp_alloc_aligned(R * hp->n_ff * sizeof(float));
    ws->hb2 = sp_alloc_aligned(R * hp->n_ff * sizeof(float));
    ws->act = sp_alloc_aligned(max_scratch(m, max_rows));
    ws->rope_cs = sp_alloc_aligned((size_t)hp->n_rot * sizeof(float));
    ws->rows = sp_xcalloc(R, sizeof *ws->rows);
    return ws;
}

void sp_workspace_free(sp_workspace *ws) {
    if (!ws) return;
    void *bufs[] = { ws->x, ws->xb, ws->xb2, ws->q, ws->att, ws->k, ws->v, ws->hb, ws->hb2,
                     ws->act, ws->rope_cs, ws->scores, ws->keys };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) sp_free_aligned(bufs[i]);
    free(ws->rows);
    free(ws->skip);
    free(ws);
}

void sp_workspace_skip_layers(sp_workspace *ws, const sp_model *m, const uint8_t *skip) {
    free(ws->skip);
    ws->skip = NULL;
    if (!skip) return;
    ws->skip = sp_xmalloc((size_t)m->hp.n_layer);
    memcpy(ws->skip, skip, (size_t)m->hp.n_layer);
}

/* Attention scratch grows to the cache capacity once, never per token:
 * per thread, the scores of one group of query heads (see attn_worker). */
static void ensure_scores(sp_workspace *ws, const sp_hparams *hp, int n_ctx) {
    if (ws->scores_cap >= n_ctx) return;
    const size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    sp_free_aligned(ws->scores);
    sp_free_aligned(ws->keys);
    ws->scores = sp_alloc_aligned((size_t)sp_pool_size(ws->pool) * group * (size_t)n_ctx * sizeof(float));
    ws->keys = sp_alloc_aligned((size_t)sp_pool_size(ws->pool) * (size_t)n_ctx * sizeof(int32_t));
    ws->scores_cap = n_ctx;
}

/* ----------------------------------------------------------------------------
 * Shared pieces
 * ------------------------------------------------------------------------- */

static void matmul(sp_workspace *ws, const sp_matrix *w, const float *x, int n, float *y) {
    sp_matmul(w, x, n, y, w->n_out, ws->act, ws->pool);
}

/* The matrices of one input in one pass (sp_matmul_many). */
static void matmul_qkv(sp_workspace *ws, const sp_layer *L, const float *x, int n) {
    const sp_matrix *w[3] = { &L->wq, &L->wk, &L->wv };
    float *y[3] = { ws->q, ws->k, ws->v };
    sp_matmul_many(w, x, n, y, 3, ws->act, ws->pool);
}
static void matmul_gate_up(sp_workspace *ws, const sp_layer *L, const float *x, int n) {
    const sp_matrix *w[2] = { &L->w_gate, &L->w_up };
    float *y[2] = { ws->hb, ws->hb2 };
    sp_matmul_many(w, x, n, y, 2, ws->act, ws->pool);
}

static void embed(const sp_model *m, const int32_t *tokens, int n, float *x) {
    const int d = m->hp.n_embd;
    for (int i = 0; i < n; i++) {
        sp_matrix_get_row(&m->tok_embd, tokens[i], x + (size_t)i * d);
        if (m->hp.embd_scale != 1.0f) sp_vec_scale(x + (size_t)i * d, m->hp.embd_scale, d);
    }
}

static void rmsnorm_rows(float *out, const float *x, const float *w, int n, int d, float eps) {
    for (int i = 0; i < n; i++) sp_rmsnorm(out + (size_t)i * d, x + (size_t)i * d, w, d, eps);
}

/* Copies the residual stream x of the rows that tap layer boundary l
 * (l == n_layer: after the last layer) to their tap buffers. */
static void tap_rows(sp_workspace *ws, const float *x, int n, int d, int l) {
    if (!ws->any_taps) return;
    for (int i = 0; i < n; i++) {
        const fwd_row *r = &ws->rows[i];
        for (int t = 0; t < r->n_taps; t++)
            if (r->tap_layers[t] == l)
                memcpy(r->taps + (size_t)t * d, x + (size_t)i * d, (size_t)d * sizeof(float));
    }
}

/* One row of n values into a cache row of type t, as llama.cpp's CPU copy
 * into its KV cache converts: F16 by rounding, Q8_0 with the CPU backend's
 * quantize_row_q8_0, Q4_0 with the reference rule. */
static void kv_put(uint32_t t, const float *x, uint8_t *dst, size_t n) {
    if (t == SP_F16) {
        sp_f16 *h = (sp_f16 *)(void *)dst;
        for (size_t e = 0; e < n; e++) h[e] = sp_f32_to_f16(x[e]);
    } else if (t == SP_Q8_0) {
        sp_quantize_act_row(SP_Q8_0, x, dst, (int64_t)n);
    } else {
        sp_quantize_row(t, x, dst, (int64_t)n);
    }
}

/* Stores each row's K and V at its slot of its cache. */
static void kv_store(const fwd_row *rows, int il, int n, const float *k, const float *v) {
    for (int i = 0; i < n; i++) {
        const sp_kv *kv = rows[i].kv;
        const size_t kvd = (size_t)kv->kv_dim;
        kv_put(kv->type_k[il], k + (size_t)i * kvd, sp_kv_krow(kv, il, rows[i].slot), kvd);
        kv_put(kv->type_v[il], v + (size_t)i * kvd, sp_kv_vrow(kv, il, rows[i].slot), kvd);
    }
}

/* Byte offset of KV head h's first value in a row of type t. */
static size_t head_off(uint32_t t, int h, int hd) {
    const size_t n = (size_t)h * (size_t)hd;
    return t == SP_Q8_0 ? n / 32 * 34 : t == SP_Q4_0 ? n / 32 * 18 : n * sizeof(sp_f16);
}

/* The key slots a tree row attends, in ascending order: the cached prefix
 * inside the sliding window, its ancestors in the window, itself.  For a
 * node on the path the target later keeps, these are exactly the slots
 * plain decoding would attend at that position, in the same order. */
static int tree_keys(const fwd_row *r, int window, int32_t *keys) {
    int first = 0;
    if (window && r->pos - window + 1 > 0) first = r->pos - window + 1;
    int n = 0;
    for (int s = first; s < r->base; s++) keys[n++] = s;
    /* ancestors, collected leaf-up then reversed (parents precede children) */
    int anc = n;
    for (int a = r->parent[r->wi]; a >= 0; a = r->parent[a]) keys[n++] = r->base + a;
    for (int i = anc, j = n - 1; i < j; i++, j--) { int32_t t = keys[i]; keys[i] = keys[j]; keys[j] = t; }
    keys[n++] = r->slot;
    /* with a window, ancestors older than it drop out (positions = base + depth) */
    if (window) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            int kpos = keys[i] < r->base ? keys[i] : r->pos - (n - 1 - i);
            if (r->pos - kpos < window) keys[m++] = keys[i];
        }
        n = m;
    }
    return n;
}

typedef struct {
    const sp_hparams *hp;
    sp_workspace *ws;
    int il, n;
    bool swa;
    float scale;
    _Atomic int64_t next;   /* first work item not yet taken */
} attn_job;

/* Work items are (row, KV head, part of its query heads): the query heads
 * of a KV head go through the cache together (sp_attn_heads), split into
 * parts only when there are fewer items than threads (one row of a model
 * with one KV head).  Each part streams its KV head's keys and values
 * again, and at a long context that traffic, not the arithmetic, is the
 * cost: one row of SmolLM2 (3 KV heads, 2 threads) after 1,500 tokens
 * took 4.1 ms split into 6 items (2 per thread) and 3.7 ms as 3 (2 and 1).
 * A head's result does not depend on
 * the grouping, so neither on the thread count.  Threads take items one
 * at a time from a shared counter: in a causal prefill row i reads i keys,
 * so equal shares of rows would be very unequal shares of work. */
static void attn_worker(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    const sp_hparams *hp = j->hp;
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const size_t qd = (size_t)hp->n_head * hd;
    float *scores = j->ws->scores + (size_t)ith * (size_t)group * j->ws->scores_cap;
    int32_t *keys = j->ws->keys + (size_t)ith * j->ws->scores_cap;
    const int per_row = j->n * hp->n_head_kv;
    int parts = (nth + per_row - 1) / per_row;
    parts = parts < 1 ? 1 : (parts > group ? group : parts);
    const int hpp = (group + parts - 1) / parts; /* heads per part */
    const int64_t n_items = (int64_t)per_row * parts;
    for (;;) {
        const int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= n_items) break;
        const int i = (int)(t / (hp->n_head_kv * parts)), rem = (int)(t % (hp->n_head_kv * parts));
        const int kvh = rem / parts, h0 = kvh * group + (rem % parts) * hpp;
        const int nh = h0 + hpp <= (kvh + 1) * group ? hpp : (kvh + 1) * group - h0;
        if (nh <= 0) continue;
        const fwd_row *r = &j->ws->rows[i];
        const sp_kv *kv = r->kv;
        const size_t kvd = (size_t)kv->kv_dim;
        float *out = j->ws->att + i * qd + (size_t)h0 * hd;
        const float *q = j->ws->q + i * qd + (size_t)h0 * hd;
        const int window = j->swa ? hp->swa_window : 0;
        const uint32_t tk = kv->type_k[j->il], tv = kv->type_v[j->il];
        if (tk != SP_F16 || tv != SP_F16) {      /* a quantized layer */
            const uint8_t *kl = sp_kv_krow(kv, j->il, 0) + head_off(tk, kvh, hd);
            const uint8_t *vl = sp_kv_vrow(kv, j->il, 0) + head_off(tv, kvh, hd);
            int lo = 0, nk;
            const int32_t *idx = NULL;
            if (r->parent) {
                nk = tree_keys(r, window, keys);
                idx = keys;
            } else {
                if (window && r->pos - window + 1 > 0) lo = r->pos - window + 1;
                nk = r->slot + 1 - lo;
            }
            sp_attn_heads_q(out, q, nh, kl, tk, kv->row_k[j->il], vl, tv, kv->row_v[j->il], hd, lo, idx, nk, j->scale,
                            scores);
            continue;
        }
        const sp_f16 *kl = (const sp_f16 *)(const void *)sp_kv_krow(kv, j->il, 0) + (size_t)kvh * hd;
        const sp_f16 *vl = (const sp_f16 *)(const void *)sp_kv_vrow(kv, j->il, 0) + (size_t)kvh * hd;
        if (r->parent) {
            int nk = tree_keys(r, window, keys);
            sp_attn_heads_idx(out, q, nh, kl, vl, kvd, hd, keys, nk, j->scale, scores);
        } else {
            int first = 0;
            if (window && r->pos - window + 1 > 0) first = r->pos - window + 1;
            sp_attn_heads(out, q, nh, kl, vl, kvd, hd, first, r->slot + 1, j->scale, scores);
        }
    }
}

static void attention(const sp_model *m, sp_workspace *ws, int il, int n, bool swa, float scale) {
    attn_job j = { &m->hp, ws, il, n, swa, scale, 0 };
    sp_pool_run(ws->pool, attn_worker, &j);
}

/* RoPE on the query and key heads of n rows: one cos/sin table per row. */
static void rope_rows(const sp_hparams *hp, sp_workspace *ws, int n, float base) {
    const size_t hd = (size_t)hp->head_dim;
    for (int i = 0; i < n; i++) {
        sp_rope_table(ws->rope_cs, hp->n_rot, ws->rows[i].pos, base);
        for (int h = 0; h < hp->n_head; h++)
            sp_rope_apply(ws->q + ((size_t)i * hp->n_head + h) * hd, ws->rope_cs, hp->n_rot, hp->rope_neox);
        for (int h = 0; h < hp->n_head_kv; h++)
            sp_rope_apply(ws->k + ((size_t)i * hp->n_head_kv + h) * hd, ws->rope_cs, hp->n_rot, hp->rope_neox);
    }
}

/* Final norm and LM head for the rows that want logits.  Runs of rows whose
 * destinations are consecutive go through one matmul written in place. */
static void lm_head(const sp_model *m, sp_workspace *ws, int n) {
    const int d = m->hp.n_embd;
    const size_t V = (size_t)m->hp.n_vocab;
    for (int i = 0; i < n;) {
        if (!ws->rows[i].logits) { i++; continue; }
        int e = i + 1;
        while (e < n && ws->rows[e].logits && ws->rows[e].logits == ws->rows[e - 1].logits + V) e++;
        rmsnorm_rows(ws->xb, ws->x + (size_t)i * d, m->out_norm, e - i, d, m->hp.rms_eps);
        matmul(ws, &m->output, ws->xb, e - i, ws->rows[i].logits);
        i = e;
    }
}

/* ----------------------------------------------------------------------------
 * llama (SmolLM2): pre-norm blocks, GQA attention with RoPE on pairs,
 * SwiGLU feed-forward.
 * ------------------------------------------------------------------------- */
static void forward_llama(const sp_model *m, sp_workspace *ws, const int32_t *tokens, int n) {
    const sp_hparams *hp = &m->hp;
    const int d = hp->n_embd;
    embed(m, tokens, n, ws->x);
    for (int il = 0; il < hp->n_layer; il++) {
        tap_rows(ws, ws->x, n, d, il);
        if (ws->skip && ws->skip[il]) continue;
        const sp_layer *L = &m->layers[il];
        /* attention */
        rmsnorm_rows(ws->xb, ws->x, L->attn_norm, n, d, hp->rms_eps);
        matmul_qkv(ws, L, ws->xb, n);
        rope_rows(hp, ws, n, L->rope_base);
        kv_store(ws->rows, il, n, ws->k, ws->v);
        attention(m, ws, il, n, false, hp->attn_scale);
        matmul(ws, &L->wo, ws->att, n, ws->xb2);
        sp_vec_add(ws->x, ws->xb2, n * d);
        /* feed-forward */
        rmsnorm_rows(ws->xb, ws->x, L->ffn_norm, n, d, hp->rms_eps);
        matmul_gate_up(ws, L, ws->xb, n);
        sp_swiglu(ws->hb, ws->hb, ws->hb2, n * hp->n_ff);
        matmul(ws, &L->w_down, ws->hb, n, ws->xb2);
        sp_vec_add(ws->x, ws->xb2, n * d);
    }
    tap_rows(ws, ws->x, n, d, hp->n_layer);
}

/* ----------------------------------------------------------------------------
 * gemma3: embeddings scaled by sqrt(width); blocks with pre- and post-norms
 * around attention and feed-forward; per-head RMS norm of Q and K; RoPE on
 * halves with a local base on sliding-window layers (5 of every 6) and a
 * global base on the rest; queries scaled before the dot product; GeGLU.
 * ------------------------------------------------------------------------- */
static void forward_gemma3(const sp_model *m, sp_workspace *ws, const int32_t *tokens, int n) {
    const sp_hparams *hp = &m->hp;
    const int d = hp->n_embd, hd = hp->head_dim;
    const int qd = hp->n_head * hd;
    embed(m, tokens, n, ws->x);
    for (int il = 0; il < hp->n_layer; il++) {
        tap_rows(ws, ws->x, n, d, il);
        if (ws->skip && ws->skip[il]) continue;
        const sp_layer *L = &m->layers[il];
        /* attention */
        rmsnorm_rows(ws->xb, ws->x, L->attn_norm, n, d, hp->rms_eps);
        matmul_qkv(ws, L, ws->xb, n);
        rmsnorm_rows(ws->q, ws->q, L->q_norm, n * hp->n_head, hd, hp->rms_eps);
        rmsnorm_rows(ws->k, ws->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
        rope_rows(hp, ws, n, L->rope_base);
        sp_vec_scale(ws->q, hp->attn_scale, n * qd);
        kv_store(ws->rows, il, n, ws->k, ws->v);
        attention(m, ws, il, n, L->swa, 1.0f);
        matmul(ws, &L->wo, ws->att, n, ws->xb2);
        rmsnorm_rows(ws->xb2, ws->xb2, L->post_attn_norm, n, d, hp->rms_eps);
        sp_vec_add(ws->x, ws->xb2, n * d);
        /* feed-forward */
        rmsnorm_rows(ws->xb, ws->x, L->ffn_norm, n, d, hp->rms_eps);
        matmul_gate_up(ws, L, ws->xb, n);
        sp_geglu(ws->hb, ws->hb, ws->hb2, n * hp->n_ff);
        matmul(ws, &L->w_down, ws->hb, n, ws->xb2);
        rmsnorm_rows(ws->xb2, ws->xb2, L->post_ffn_norm, n, d, hp->rms_eps);
        sp_vec_add(ws->x, ws->xb2, n * d);
    }
    tap_rows(ws, ws->x, n, d, hp->n_layer);
}

/* ----------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------- */

static int check_seq(const sp_model *m, const sp_fwd_seq *q, sp_err *err) {
    if (q->n <= 0) return sp_err_set(err, "forward: empty input");
    if (q->parent && q->n > 4096) return sp_err_set(err, "forward: a tree window has at most 4096 rows");
    if (q->mode != SP_LOGITS_NONE && !q->logits) return sp_err_set(err, "forward: no logits buffer");
    if (q->n_taps < 0 || q->n_taps > SP_MAX_TAPS || (q->n_taps && (!q->taps || !q->tap_layers)))
        return sp_err_set(err, "forward: %d taps (at most %d, each with a layer and a buffer)", q->n_taps,
                          SP_MAX_TAPS);
    for (int t = 0; t < q->n_taps; t++)
        if (q->tap_layers[t] < 0 || q->tap_layers[t] > m->hp.n_layer)
            return sp_err_set(err, "forward: tap layer %d out of range [0, %d]", q->tap_layers[t], m->hp.n_layer);
    if (q->n > q->kv->n_ctx - q->kv->n)
        return sp_err_set(err, "forward: context full (%d + %d tokens > context size %d)", q->kv->n,
                          q->n, q->kv->n_ctx);
    for (int i = 0; i < q->n; i++) {
        if (q->tokens[i] < 0 || q->tokens[i] >= m->hp.n_vocab)
            return sp_err_set(err, "forward: token id %d out of range [0, %d)", q->tokens[i],
                              m->hp.n_vocab);
        if (q->parent && (q->parent[i] < -1 || q->parent[i] >= i))
            return sp_err_set(err, "forward: tree row %d has parent %d (must be -1 or an earlier row)",
                              i, q->parent[i]);
    }
    return 0;
}

int sp_model_forward_batch(const sp_model *m, sp_workspace *ws, const sp_fwd_seq *seqs, int n_seqs,
                           sp_err *err) {
    if (n_seqs <= 0) return sp_err_set(err, "forward: no sequences");
    int n_ctx = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (check_seq(m, &seqs[s], err)) return sp_err_prefix(err, "sequence %d", s);
        for (int t = 0; t < s; t++)
            if (seqs[t].kv == seqs[s].kv) return sp_err_set(err, "forward: sequences %d and %d share a cache", t, s);
        if (seqs[s].kv->n_ctx > n_ctx) n_ctx = seqs[s].kv->n_ctx;
    }
    ensure_scores(ws, &m->hp, n_ctx);
    const size_t V = (size_t)m->hp.n_vocab;
    int32_t depth[4096];
    int s = 0, i = 0;                     /* next row: sequence s, window row i */
    while (s < n_seqs) {
        /* fill a chunk with the next rows, across sequences */
        int32_t chunk_tok[1024];
        int c = 0;
        const int cap = ws->max_rows < 1024 ? ws->max_rows : 1024;
        ws->any_taps = false;
        while (c < cap && s < n_seqs) {
            const sp_fwd_seq *q = &seqs[s];
            fwd_row *r = &ws->rows[c];
            const int wi = i;
            if (q->parent && wi < 4096) depth[wi] = q->parent[wi] < 0 ? 0 : depth[q->parent[wi]] + 1;
            r->kv = q->kv;
            r->base = q->kv->n;
            r->slot = r->base + wi;
            r->pos = q->parent ? r->base + depth[wi] : r->slot;
            /* check_seq bounded every window by its cache and by 4096 tree rows */
            assert(r->slot < q->kv->n_ctx && r->pos <= r->slot && (!q->parent || wi < 4096));
            r->parent = q->parent;
            r->wi = wi;
            r->logits = q->mode == SP_LOGITS_ALL ? q->logits + (size_t)wi * V
                      : (q->mode == SP_LOGITS_LAST && wi == q->n - 1) ? q->logits : NULL;
            r->tap_layers = q->tap_layers;
            r->n_taps = q->n_taps;
            r->taps = q->n_taps ? q->taps + (size_t)wi * q->n_taps * m->hp.n_embd : NULL;
            ws->any_taps |= q->n_taps > 0;
            chunk_tok[c++] = q->tokens[wi];
            if (++i == q->n) { i = 0; s++; }
        }
        if (m->hp.arch == SP_ARCH_GEMMA3) forward_gemma3(m, ws, chunk_tok, c);
        else forward_llama(m, ws, chunk_tok, c);
        lm_head(m, ws, c);
    }
    for (int t = 0; t < n_seqs; t++) seqs[t].kv->n += seqs[t].n;
    return 0;
}

int sp_model_forward(const sp_model *m, sp_kv *kv, sp_workspace *ws, const int32_t *tokens,
                     int n, sp_logits_mode mode, float *logits, sp_err *err) {
    sp_fwd_seq q = { .kv = kv, .tokens = tokens, .n = n, .mode = mode, .logits = logits };
    return sp_model_forward_batch(m, ws, &q, 1, err);
}

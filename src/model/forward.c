/* The batched forward pass: one function per architecture, read top to
 * bottom.  Rows of a pass are computed independently with fixed arithmetic
 * (see kernels.h), so results do not depend on how many rows share a pass. */
#include "model/model.h"

#include <assert.h>
#include <math.h>
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
    int scores_cap;
};

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
    return ws;
}

void sp_workspace_free(sp_workspace *ws) {
    if (!ws) return;
    void *bufs[] = { ws->x, ws->xb, ws->xb2, ws->q, ws->att, ws->k, ws->v, ws->hb, ws->hb2,
                     ws->act, ws->rope_cs, ws->scores };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) sp_free_aligned(bufs[i]);
    free(ws);
}

/* Attention scratch grows to the cache capacity once, never per token:
 * per thread, the scores of one group of query heads (see attn_worker). */
static void ensure_scores(sp_workspace *ws, const sp_hparams *hp, int n_ctx) {
    if (ws->scores_cap >= n_ctx) return;
    const size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    sp_free_aligned(ws->scores);
    ws->scores = sp_alloc_aligned((size_t)sp_pool_size(ws->pool) * group * (size_t)n_ctx * sizeof(float));
    ws->scores_cap = n_ctx;
}

/* ----------------------------------------------------------------------------
 * Shared pieces
 * ------------------------------------------------------------------------- */

static void matmul(sp_workspace *ws, const sp_matrix *w, const float *x, int n, float *y) {
    sp_matmul(w, x, n, y, w->n_out, ws->act, ws->pool);
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

/* Stores the new rows' K and V (positions pos0..pos0+n-1) in the cache. */
static void kv_store(sp_kv *kv, int il, int pos0, int n, const float *k, const float *v) {
    const size_t kvd = (size_t)kv->kv_dim;
    sp_f16 *kc = kv->k + ((size_t)il * kv->n_ctx + (size_t)pos0) * kvd;
    sp_f16 *vc = kv->v + ((size_t)il * kv->n_ctx + (size_t)pos0) * kvd;
    for (size_t i = 0; i < (size_t)n * kvd; i++) {
        kc[i] = sp_f32_to_f16(k[i]);
        vc[i] = sp_f32_to_f16(v[i]);
    }
}

typedef struct {
    const sp_hparams *hp;
    const sp_kv *kv;
    sp_workspace *ws;
    int il, pos0, n;
    bool swa;
    float scale;
} attn_job;

/* Work items are (row, KV head, part of its query heads): the query heads
 * of a KV head go through the cache together (sp_attn_heads), split into
 * parts only when there are too few items to keep every thread busy (one
 * row of a model with one KV head).  A head's result does not depend on
 * the grouping, so neither on the thread count. */
static void attn_worker(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    const sp_hparams *hp = j->hp;
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const size_t qd = (size_t)hp->n_head * hd, kvd = (size_t)j->kv->kv_dim;
    const sp_f16 *kl = j->kv->k + (size_t)j->il * j->kv->n_ctx * kvd;
    const sp_f16 *vl = j->kv->v + (size_t)j->il * j->kv->n_ctx * kvd;
    float *scores = j->ws->scores + (size_t)ith * (size_t)group * j->ws->scores_cap;
    const int per_row = j->n * hp->n_head_kv;
    int parts = (2 * nth + per_row - 1) / per_row;
    parts = parts < 1 ? 1 : (parts > group ? group : parts);
    const int hpp = (group + parts - 1) / parts; /* heads per part */
    int64_t lo, hi;
    sp_split((int64_t)per_row * parts, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        const int i = (int)(t / (hp->n_head_kv * parts)), rem = (int)(t % (hp->n_head_kv * parts));
        const int kvh = rem / parts, h0 = kvh * group + (rem % parts) * hpp;
        const int nh = h0 + hpp <= (kvh + 1) * group ? hpp : (kvh + 1) * group - h0;
        if (nh <= 0) continue;
        const int pos = j->pos0 + i;
        int first = 0;
        if (j->swa && pos - hp->swa_window + 1 > 0) first = pos - hp->swa_window + 1;
        sp_attn_heads(j->ws->att + i * qd + (size_t)h0 * hd, j->ws->q + i * qd + (size_t)h0 * hd, nh,
                      kl + (size_t)kvh * hd, vl + (size_t)kvh * hd, kvd, hd, first, pos + 1, j->scale,
                      scores);
    }
}

static void attention(const sp_model *m, sp_kv *kv, sp_workspace *ws, int il, int pos0, int n,
                      bool swa, float scale) {
    attn_job j = { &m->hp, kv, ws, il, pos0, n, swa, scale };
    sp_pool_run(ws->pool, attn_worker, &j);
}

/* RoPE on the query and key heads of n rows: one cos/sin table per row. */
static void rope_rows(const sp_hparams *hp, sp_workspace *ws, int n, int pos0, float base) {
    const size_t hd = (size_t)hp->head_dim;
    for (int i = 0; i < n; i++) {
        sp_rope_table(ws->rope_cs, hp->n_rot, pos0 + i, base);
        for (int h = 0; h < hp->n_head; h++)
            sp_rope_apply(ws->q + ((size_t)i * hp->n_head + h) * hd, ws->rope_cs, hp->n_rot, hp->rope_neox);
        for (int h = 0; h < hp->n_head_kv; h++)
            sp_rope_apply(ws->k + ((size_t)i * hp->n_head_kv + h) * hd, ws->rope_cs, hp->n_rot, hp->rope_neox);
    }
}

/* Final norm and LM head for rows [first, first + n) of the chunk. */
static void lm_head(const sp_model *m, sp_workspace *ws, int first, int n, float *logits) {
    const int d = m->hp.n_embd;
    rmsnorm_rows(ws->xb, ws->x + (size_t)first * d, m->out_norm, n, d, m->hp.rms_eps);
    matmul(ws, &m->output, ws->xb, n, logits);
}

/* ----------------------------------------------------------------------------
 * llama (SmolLM2): pre-norm blocks, GQA attention with RoPE on pairs,
 * SwiGLU feed-forward.
 * ------------------------------------------------------------------------- */
static void forward_llama(const sp_model *m, sp_kv *kv, sp_workspace *ws, const int32_t *tokens,
                          int n) {
    const sp_hparams *hp = &m->hp;
    const int d = hp->n_embd, pos0 = kv->n;
    embed(m, tokens, n, ws->x);
    for (int il = 0; il < hp->n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        /* attention */
        rmsnorm_rows(ws->xb, ws->x, L->attn_norm, n, d, hp->rms_eps);
        matmul(ws, &L->wq, ws->xb, n, ws->q);
        matmul(ws, &L->wk, ws->xb, n, ws->k);
        matmul(ws, &L->wv, ws->xb, n, ws->v);
        rope_rows(hp, ws, n, pos0, L->rope_base);
        kv_store(kv, il, pos0, n, ws->k, ws->v);
        attention(m, kv, ws, il, pos0, n, false, hp->attn_scale);
        matmul(ws, &L->wo, ws->att, n, ws->xb2);
        sp_vec_add(ws->x, ws->xb2, n * d);
        /* feed-forward */
        rmsnorm_rows(ws->xb, ws->x, L->ffn_norm, n, d, hp->rms_eps);
        matmul(ws, &L->w_gate, ws->xb, n, ws->hb);
        matmul(ws, &L->w_up, ws->xb, n, ws->hb2);
        sp_swiglu(ws->hb, ws->hb, ws->hb2, n * hp->n_ff);
        matmul(ws, &L->w_down, ws->hb, n, ws->xb2);
        sp_vec_add(ws->x, ws->xb2, n * d);
    }
}

/* ----------------------------------------------------------------------------
 * gemma3: embeddings scaled by sqrt(width); blocks with pre- and post-norms
 * around attention and feed-forward; per-head RMS norm of Q and K; RoPE on
 * halves with a local base on sliding-window layers (5 of every 6) and a
 * global base on the rest; queries scaled before the dot product; GeGLU.
 * ------------------------------------------------------------------------- */
static void forward_gemma3(const sp_model *m, sp_kv *kv, sp_workspace *ws, const int32_t *tokens,
                           int n) {
    const sp_hparams *hp = &m->hp;
    const int d = hp->n_embd, hd = hp->head_dim, pos0 = kv->n;
    const int qd = hp->n_head * hd;
    embed(m, tokens, n, ws->x);
    for (int il = 0; il < hp->n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        /* attention */
        rmsnorm_rows(ws->xb, ws->x, L->attn_norm, n, d, hp->rms_eps);
        matmul(ws, &L->wq, ws->xb, n, ws->q);
        matmul(ws, &L->wk, ws->xb, n, ws->k);
        matmul(ws, &L->wv, ws->xb, n, ws->v);
        rmsnorm_rows(ws->q, ws->q, L->q_norm, n * hp->n_head, hd, hp->rms_eps);
        rmsnorm_rows(ws->k, ws->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
        rope_rows(hp, ws, n, pos0, L->rope_base);
        sp_vec_scale(ws->q, hp->attn_scale, n * qd);
        kv_store(kv, il, pos0, n, ws->k, ws->v);
        attention(m, kv, ws, il, pos0, n, L->swa, 1.0f);
        matmul(ws, &L->wo, ws->att, n, ws->xb2);
        rmsnorm_rows(ws->xb2, ws->xb2, L->post_attn_norm, n, d, hp->rms_eps);
        sp_vec_add(ws->x, ws->xb2, n * d);
        /* feed-forward */
        rmsnorm_rows(ws->xb, ws->x, L->ffn_norm, n, d, hp->rms_eps);
        matmul(ws, &L->w_gate, ws->xb, n, ws->hb);
        matmul(ws, &L->w_up, ws->xb, n, ws->hb2);
        sp_geglu(ws->hb, ws->hb, ws->hb2, n * hp->n_ff);
        matmul(ws, &L->w_down, ws->hb, n, ws->xb2);
        rmsnorm_rows(ws->xb2, ws->xb2, L->post_ffn_norm, n, d, hp->rms_eps);
        sp_vec_add(ws->x, ws->xb2, n * d);
    }
}

/* ----------------------------------------------------------------------------
 * Entry point
 * ------------------------------------------------------------------------- */
int sp_model_forward(const sp_model *m, sp_kv *kv, sp_workspace *ws, const int32_t *tokens,
                     int n, sp_logits_mode mode, float *logits, sp_err *err) {
    if (n <= 0) return sp_err_set(err, "forward: empty input");
    if (mode != SP_LOGITS_NONE && !logits) return sp_err_set(err, "forward: no logits buffer");
    if (n > kv->n_ctx - kv->n)
        return sp_err_set(err, "forward: context full (%d + %d tokens > context size %d)", kv->n,
                          n, kv->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return sp_err_set(err, "forward: token id %d out of range [0, %d)", tokens[i],
                              m->hp.n_vocab);
    ensure_scores(ws, &m->hp, kv->n_ctx);
    const size_t V = (size_t)m->hp.n_vocab;
    for (int done = 0; done < n;) {
        const int c = n - done < ws->max_rows ? n - done : ws->max_rows;
        if (m->hp.arch == SP_ARCH_GEMMA3) forward_gemma3(m, kv, ws, tokens + done, c);
        else forward_llama(m, kv, ws, tokens + done, c);
        kv->n += c;
        if (mode == SP_LOGITS_ALL) lm_head(m, ws, 0, c, logits + (size_t)done * V);
        else if (mode == SP_LOGITS_LAST && done + c == n) lm_head(m, ws, c - 1, 1, logits);
        done += c;
    }
    return 0;
}

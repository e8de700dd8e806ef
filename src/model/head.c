/* The EAGLE-3 draft head: loading (llama.cpp's `eagle3` GGUF layout, see
 * model.h) and its forward pass, read top to bottom. */
#include "model/internal.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sp_head_ws {
    int max_rows, n_ctx;
    sp_pool *pool;           /* borrowed */
    float *e;                /* (max_rows, d) token embeddings */
    float *x;                /* (max_rows, 2d) [normed embedding, normed g] */
    float *q;                /* (max_rows, n_head * head_dim) */
    float *k, *v;            /* (max_rows, n_head_kv * head_dim) */
    float *att;              /* (max_rows, n_head * head_dim) */
    float *h;                /* (max_rows, d) residual stream */
    float *nb;               /* (max_rows, d) normed input of the feed-forward / output */
    float *tmp;              /* (max_rows, d) */
    float *hb, *hb2;         /* (max_rows, n_ff) */
    float *rope_cs;          /* (head_dim) */
    float *scores;           /* (n_head / n_head_kv, n_ctx) */
    void *act;               /* matmul scratch */
    float *logits;           /* (max_rows, n_vocab_draft): sp_head_forward_rows, made at its first call */
};

/* ----------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------- */

/* "eagle3.<suffix>" as a positive u32 (dflt >= 0: optional). */
static int key_int(const sp_gguf *g, const char *suffix, int dflt, int *out, sp_err *err) {
    char key[96];
    snprintf(key, sizeof key, "eagle3.%s", suffix);
    uint32_t v;
    const int r = sp_gguf_get_u32(g, key, &v, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (dflt < 0) return sp_err_set(err, "draft head: missing metadata key '%s'", key);
        *out = dflt;
        return 0;
    }
    if (v == 0 || v > (1u << 24)) return sp_err_set(err, "draft head: '%s' = %u is out of range", key, v);
    *out = (int)v;
    return 0;
}

static int key_float(const sp_gguf *g, const char *key, float dflt, float *out, sp_err *err) {
    const int r = sp_gguf_get_f32(g, key, out, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (isnan(dflt)) return sp_err_set(err, "draft head: missing metadata key '%s'", key);
        *out = dflt;
    }
    if (!isfinite(*out) || *out < 0) return sp_err_set(err, "draft head: '%s' = %g is out of range", key, (double)*out);
    return 0;
}

/* The three tap layers: eagle3.target_layers, or the older name
 * eagle3.extract_layers (INT32 or UINT32 elements), each a layer boundary
 * of the target (0..n_layer). */
static int read_target_layers(const sp_gguf *g, const sp_model *t, sp_head_hparams *hp, sp_err *err) {
    const char *keys[] = { "eagle3.target_layers", "eagle3.extract_layers" };
    for (int k = 0; k < 2; k++) {
        const sp_gguf_value *v = sp_gguf_get(g, keys[k]);
        if (!v) continue;
        if (v->type != SP_GGUF_ARRAY || (v->v.arr.type != SP_GGUF_INT32 && v->v.arr.type != SP_GGUF_UINT32) ||
            v->v.arr.n != SP_HEAD_TAPS)
            return sp_err_set(err, "draft head: '%s' must be an array of %d INT32 layer ids", keys[k], SP_HEAD_TAPS);
        for (int i = 0; i < SP_HEAD_TAPS; i++) {
            int32_t l;
            memcpy(&l, (const char *)v->v.arr.data + 4 * i, 4);
            if (l < 0 || l > t->hp.n_layer)
                return sp_err_set(err, "draft head: '%s' names layer %d; the target has layers 0..%d", keys[k],
                                  (int)l, t->hp.n_layer);
            hp->target_layers[i] = l;
        }
        return 0;
    }
    return sp_err_set(err, "draft head: missing metadata key 'eagle3.target_layers'");
}

static int read_hparams(const sp_gguf *g, const sp_model *t, sp_head_hparams *hp, sp_err *err) {
    sp_str s;
    char arch[32];
    if (sp_gguf_get_str(g, "general.architecture", &s, err) <= 0)
        return sp_err_set(err, "draft head: no general.architecture");
    if (!sp_str_eq(s, "eagle3"))
        return sp_err_set(err, "draft head: architecture '%s' is not a draft head (expected 'eagle3')",
                          sp_str_cpy(s, arch, sizeof arch));
    int blocks = 0;
    bool before_fc = false;
    if (key_int(g, "embedding_length", -1, &hp->n_embd, err) || key_int(g, "block_count", -1, &blocks, err) ||
        key_int(g, "feed_forward_length", -1, &hp->n_ff, err) ||
        key_int(g, "attention.head_count", -1, &hp->n_head, err) ||
        key_int(g, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err) ||
        key_int(g, "attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim, err) ||
        key_int(g, "context_length", 2048, &hp->n_ctx_train, err) ||
        key_int(g, "target_hidden_size", -1, &hp->n_embd_target, err) ||
        key_float(g, "eagle3.attention.layer_norm_rms_epsilon", NAN, &hp->rms_eps, err) ||
        key_float(g, "eagle3.rope.freq_base", 10000.0f, &hp->rope_base, err) ||
        sp_gguf_get_bool(g, "eagle3.norm_before_residual", &hp->norm_before_residual, err) < 0 ||
        sp_gguf_get_bool(g, "eagle3.norm_before_fc", &before_fc, err) < 0 ||
        read_target_layers(g, t, hp, err))
        return -1;
    if (blocks != 1) return sp_err_set(err, "draft head: %d blocks (an eagle3 head has exactly 1)", blocks);
    if (before_fc) return sp_err_set(err, "draft head: eagle3.norm_before_fc heads are not supported");
    if (hp->n_embd != t->hp.n_embd || hp->n_embd_target != t->hp.n_embd)
        return sp_err_set(err, "draft head: width %d reading target states of %d, but the target '%s' has width %d",
                          hp->n_embd, hp->n_embd_target, t->name, t->hp.n_embd);
    if (hp->n_head % hp->n_head_kv || hp->head_dim % 2 || hp->head_dim > 1024)
        return sp_err_set(err, "draft head: %d heads, %d KV heads of %d: unsupported", hp->n_head, hp->n_head_kv,
                          hp->head_dim);
    return 0;
}

/* d2t: an I64 (llama.cpp) or I32 vector of absolute target ids, each in
 * range and used once (a repeated id would make two draft tokens one). */
static int read_d2t(const sp_gguf *g, const sp_model *t, sp_head *h, sp_err *err) {
    const sp_gguf_tensor *d = sp_gguf_find_tensor(g, "d2t");
    if (!d) return sp_err_set(err, "draft head: an own output.weight needs 'd2t' (draft -> target ids)");
    if (d->n_dims != 1 || (int64_t)d->ne[0] != h->hp.n_vocab_draft || (d->type != SP_I64 && d->type != SP_I32))
        return sp_err_set(err, "draft head: 'd2t' must be %d I64 ids (the output's rows)", h->hp.n_vocab_draft);
    const int V = t->hp.n_vocab;
    h->d2t = sp_xmalloc((size_t)h->hp.n_vocab_draft * sizeof *h->d2t);
    uint8_t *seen = sp_xcalloc((size_t)V, 1);
    int rc = 0;
    for (int i = 0; i < h->hp.n_vocab_draft && !rc; i++) {
        int64_t id = 0;
        if (d->type == SP_I64) memcpy(&id, (const char *)d->data + 8 * (size_t)i, 8);
        else { int32_t v; memcpy(&v, (const char *)d->data + 4 * (size_t)i, 4); id = v; }
        if (id < 0 || id >= V) rc = sp_err_set(err, "draft head: d2t[%d] = %lld is not a target token id", i, (long long)id);
        else if (seen[id]++) rc = sp_err_set(err, "draft head: d2t maps two draft tokens to target token %lld", (long long)id);
        else h->d2t[i] = (int32_t)id;
    }
    free(seen);
    return rc;
}

static int bind_tensors(const sp_gguf *g, const sp_model *t, sp_head *h, sp_err *err) {
    const sp_head_hparams *hp = &h->hp;
    const int64_t d = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    const char *norm2 = sp_gguf_find_tensor(g, "blk.0.hidden_norm.weight") ? "blk.0.hidden_norm.weight"
                                                                            : "blk.0.attn_norm_2.weight";
    if (sp_gguf_find_tensor(g, "rope_freqs.weight"))
        return sp_err_set(err, "draft head: rope_freqs (scaled RoPE) is not supported");
    if (sp_bind_matrix(g, "fc.weight", SP_HEAD_TAPS * (int64_t)hp->n_embd_target, d, &h->fc, err) ||
        sp_bind_vector(g, "blk.0.attn_norm.weight", d, &h->attn_norm, err) ||
        sp_bind_vector(g, norm2, d, &h->attn_norm_2, err) ||
        sp_bind_matrix(g, "blk.0.attn_q.weight", 2 * d, q, &h->wq, err) ||
        sp_bind_matrix(g, "blk.0.attn_k.weight", 2 * d, kv, &h->wk, err) ||
        sp_bind_matrix(g, "blk.0.attn_v.weight", 2 * d, kv, &h->wv, err) ||
        sp_bind_matrix(g, "blk.0.attn_output.weight", q, d, &h->wo, err) ||
        sp_bind_vector(g, "blk.0.ffn_norm.weight", d, &h->ffn_norm, err) ||
        sp_bind_matrix(g, "blk.0.ffn_gate.weight", d, hp->n_ff, &h->w_gate, err) ||
        sp_bind_matrix(g, "blk.0.ffn_up.weight", d, hp->n_ff, &h->w_up, err) ||
        sp_bind_matrix(g, "blk.0.ffn_down.weight", hp->n_ff, d, &h->w_down, err) ||
        sp_bind_vector(g, "output_norm.weight", d, &h->out_norm, err))
        return -1;
    h->tok_embd = &t->tok_embd;      /* a head's own token_embd would only repeat the target's */
    const sp_gguf_tensor *o = sp_gguf_find_tensor(g, "output.weight");
    if (!o) {                        /* the target's LM head: the full vocabulary */
        if (sp_gguf_find_tensor(g, "d2t")) return sp_err_set(err, "draft head: 'd2t' without an output.weight");
        h->output = t->output;
        h->hp.n_vocab_draft = t->hp.n_vocab;
        h->d2t = sp_xmalloc((size_t)t->hp.n_vocab * sizeof *h->d2t);
        for (int i = 0; i < t->hp.n_vocab; i++) h->d2t[i] = i;
        return 0;
    }
    if (o->n_dims != 2 || o->ne[1] == 0 || (int64_t)o->ne[1] > t->hp.n_vocab)
        return sp_err_set(err, "draft head: output.weight must have between 1 and %d rows", t->hp.n_vocab);
    h->hp.n_vocab_draft = (int)o->ne[1];
    return sp_bind_matrix(g, "output.weight", d, h->hp.n_vocab_draft, &h->output, err) || read_d2t(g, t, h, err);
}

/* The recorded target must be this one (when the head records it). */
static int check_target(const sp_gguf *g, const sp_model *t, sp_head *h, sp_err *err) {
    sp_str s;
    char name[128] = "another model";
    if (sp_gguf_get_str(g, "specula.target_name", &s, NULL) > 0) sp_str_cpy(s, name, sizeof name);
    const int r = sp_gguf_get_str(g, "specula.target_fingerprint", &s, err);
    if (r < 0) return -1;
    if (r > 0) {
        sp_str_cpy(s, h->target_fingerprint, sizeof h->target_fingerprint);
        if (strcmp(h->target_fingerprint, t->fingerprint))
            return sp_err_set(err, "draft head was trained for %s (fingerprint %s), not for %s (%s, fingerprint %s)",
                              name, h->target_fingerprint, t->name, t->path, t->fingerprint);
    }
    return key_float(g, "specula.draft_min_prob", 0.3f, &h->min_prob, err);
}

/* The head's own matrices in the packed layout when the kernels in use
 * have a packed path (as the target's are: sp_model_load_opts.pack); a
 * drafted token runs every one of them once, so it is read per token like
 * the target's weights.  The borrowed LM head of a head without its own
 * is the target's, already packed or not. */
static void pack_head(sp_head *h, const sp_model *t) {
    sp_matrix *ms[] = { &h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->w_gate, &h->w_up, &h->w_down, &h->output };
    const size_t n = sizeof ms / sizeof *ms - (h->output.data == t->output.data ? 1 : 0);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (sp_matrix_packable(ms[i]->type, ms[i]->n_in, ms[i]->n_out))
            total += (sp_matrix_packed_bytes(ms[i]) + 63) & ~(size_t)63;
    if (!total) return;
    uint8_t *p = sp_alloc_aligned(total);
    h->packed = p;
    for (size_t i = 0; i < n; i++) {
        if (!sp_matrix_packable(ms[i]->type, ms[i]->n_in, ms[i]->n_out)) continue;
        sp_matrix_pack(ms[i], p);
        ms[i]->packed = p;
        p += (sp_matrix_packed_bytes(ms[i]) + 63) & ~(size_t)63;
    }
}

/* fc in F16 beside quantized matrices.  The head's files keep fc in F32
 * (quantizing its input, the target's raw residual stream, to Q8 blocks as
 * the quantized kernels do ruins it), but the F32 weights (4 MB for
 * SmolLM2) made fc a third of a catch-up pass; the F16 kernel reads half
 * the bytes and keeps the input in F32.  Its rounding (2^-11 of a weight)
 * is far below that of the head's Q4_1/Q8_0 matrices; a head of F32 or F16
 * matrices keeps fc as written (the trainer's parity test compares an F32
 * head with the trainer's own arithmetic), and weights beyond F16's range
 * (none in a trained head) keep F32. */
static void fc_to_f16(sp_head *h) {
    if (h->fc.type != SP_F32 || h->wq.type == SP_F32 || h->wq.type == SP_F16) return;
    const size_t n = (size_t)h->fc.n_in * (size_t)h->fc.n_out;
    const float *w = h->fc.data;
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(w[i]) <= 65000.0f)) return;
    h->fc_f16 = sp_xmalloc(n * sizeof *h->fc_f16);
    for (size_t i = 0; i < n; i++) h->fc_f16[i] = sp_f32_to_f16(w[i]);
    h->fc.data = h->fc_f16;
    h->fc.type = SP_F16;
}

sp_head *sp_head_load(const char *path, const sp_model *target, sp_err *err) {
    sp_gguf *g = sp_gguf_open(path, err);
    if (!g) return NULL;
    sp_head *h = sp_xcalloc(1, sizeof *h);
    h->gguf = g;
    h->path = sp_xstrdup(path);
    if (read_hparams(g, target, &h->hp, err) || bind_tensors(g, target, h, err) || check_target(g, target, h, err)) {
        sp_err_prefix(err, "%s", path);
        sp_head_free(h);
        return NULL;
    }
    if (h->min_prob > 1) h->min_prob = 1;
    fc_to_f16(h);
    if (sp_kernels_have_packed()) pack_head(h, target);
    return h;
}

void sp_head_free(sp_head *h) {
    if (!h) return;
    const float *vecs[] = { h->attn_norm, h->attn_norm_2, h->ffn_norm, h->out_norm };
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) free((void *)vecs[i]);
    free(h->d2t);
    free(h->fc_f16);
    sp_free_aligned(h->packed);
    free(h->path);
    sp_gguf_close(h->gguf);
    free(h);
}

/* ----------------------------------------------------------------------------
 * Workspace
 * ------------------------------------------------------------------------- */

sp_kv *sp_head_kv_create(const sp_head *h, int n_ctx) {
    return sp_kv_create_dims(1, n_ctx, h->hp.n_head_kv * h->hp.head_dim);
}

static size_t act_bytes(const sp_head *h, int rows) {
    const sp_matrix *ms[] = { &h->fc, &h->wq, &h->wk, &h->wv, &h->wo, &h->w_gate, &h->w_up, &h->w_down, &h->output };
    size_t s = 0;
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
        const size_t b = sp_matmul_scratch_bytes(ms[i]->type, ms[i]->n_in, rows);
        if (b > s) s = b;
    }
    const size_t b = sp_matmul_many_scratch_bytes(ms + 1, 3, rows);
    return b > s ? b : s;
}

sp_head_ws *sp_head_ws_create(const sp_head *h, int max_rows, int n_ctx, sp_pool *pool) {
    const sp_head_hparams *hp = &h->hp;
    const size_t R = (size_t)max_rows, d = (size_t)hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    sp_head_ws *w = sp_xcalloc(1, sizeof *w);
    w->max_rows = max_rows;
    w->n_ctx = n_ctx;
    w->pool = pool;
    w->e = sp_alloc_aligned(R * d * sizeof(float));
    w->x = sp_alloc_aligned(R * 2 * d * sizeof(float));
    w->q = sp_alloc_aligned(R * qd * sizeof(float));
    w->k = sp_alloc_aligned(R * kvd * sizeof(float));
    w->v = sp_alloc_aligned(R * kvd * sizeof(float));
    w->att = sp_alloc_aligned(R * qd * sizeof(float));
    w->h = sp_alloc_aligned(R * d * sizeof(float));
    w->nb = sp_alloc_aligned(R * d * sizeof(float));
    w->tmp = sp_alloc_aligned(R * d * sizeof(float));
    w->hb = sp_alloc_aligned(R * (size_t)hp->n_ff * sizeof(float));
    w->hb2 = sp_alloc_aligned(R * (size_t)hp->n_ff * sizeof(float));
    w->rope_cs = sp_alloc_aligned((size_t)hp->head_dim * sizeof(float));
    w->scores = sp_alloc_aligned((size_t)sp_pool_size(pool) * (size_t)(hp->n_head / hp->n_head_kv) * (size_t)n_ctx *
                                 sizeof(float));   /* per thread (head_attn_worker) */
    w->act = sp_alloc_aligned(act_bytes(h, max_rows));
    return w;
}

void sp_head_ws_free(sp_head_ws *w) {
    if (!w) return;
    float *bufs[] = { w->e, w->x, w->q, w->k, w->v, w->att, w->h, w->nb, w->tmp, w->hb, w->hb2, w->rope_cs, w->scores };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) sp_free_aligned(bufs[i]);
    sp_free_aligned(w->act);
    sp_free_aligned(w->logits);
    free(w);
}

/* ----------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------- */

static void matmul(sp_head_ws *w, const sp_matrix *m, const float *x, int n, float *y) {
    sp_matmul(m, x, n, y, m->n_out, w->act, w->pool);
}

void sp_head_fuse(const sp_head *h, sp_head_ws *w, const float *taps, int n, float *g) {
    assert(n <= w->max_rows);
    matmul(w, &h->fc, taps, n, g);
}

/* x[i] = [rmsnorm(emb(tok[i])) * attn_norm, rmsnorm(g[i]) * attn_norm_2];
 * the residual stream starts as g (or its normed form). */
static void head_inputs(const sp_head *h, sp_head_ws *w, const float *g, const int32_t *tok, int n) {
    const int d = h->hp.n_embd;
    for (int i = 0; i < n; i++) {
        float *xi = w->x + (size_t)i * 2 * d, *ei = w->e + (size_t)i * d;
        sp_matrix_get_row(h->tok_embd, tok[i], ei);
        sp_rmsnorm(xi, ei, h->attn_norm, d, h->hp.rms_eps);
        sp_rmsnorm(xi + d, g + (size_t)i * d, h->attn_norm_2, d, h->hp.rms_eps);
        memcpy(w->h + (size_t)i * d, h->hp.norm_before_residual ? xi + d : g + (size_t)i * d, (size_t)d * sizeof(float));
    }
}

typedef struct head_attn_job {
    const sp_head *h;
    sp_head_ws *w;
    sp_kv *const *kv;
    const int *pos;
    int n;
    atomic_int next;                 /* the next (row, KV head) item */
} head_attn_job;

/* Attention of the items (row i, KV head): its group of query heads over
 * the row's cache up to its position.  Threads take items from a shared
 * counter (in a causal catch-up row i reads i keys, so equal shares of
 * rows would be unequal work); an item's result does not depend on which
 * thread computes it. */
static void head_attn_worker(void *ctx, int ith, int nth) {
    (void)nth;
    head_attn_job *j = ctx;
    const sp_head_hparams *hp = &j->h->hp;
    const int hd = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const size_t qd = (size_t)hp->n_head * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = j->w->scores + (size_t)ith * (size_t)group * (size_t)j->w->n_ctx;
    for (;;) {
        const int t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->n * hp->n_head_kv) break;
        const int i = t / hp->n_head_kv, kvh = t % hp->n_head_kv;
        const sp_kv *kv = j->kv[i];
        const size_t kvd = (size_t)kv->kv_dim, off = (size_t)i * qd + (size_t)kvh * group * hd;
        sp_attn_heads(j->w->att + off, j->w->q + off, group, kv->k + (size_t)kvh * hd, kv->v + (size_t)kvh * hd, kvd,
                      hd, 0, j->pos[i] + 1, scale, scores);
    }
}

/* RoPE (adjacent pairs) at each row's position, K/V into its cache, and
 * causal attention over that cache: att (n, n_head * head_dim).  Row i goes
 * to cache kv[i] at slot pos[i] (rows of one sequence in order; several
 * sequences' rows in one pass when kv differs). */
static void head_attention(const sp_head *h, sp_head_ws *w, sp_kv *const *kv, const int *pos, int n) {
    const sp_head_hparams *hp = &h->hp;
    const int hd = hp->head_dim;
    const size_t qd = (size_t)hp->n_head * hd, kvd = (size_t)kv[0]->kv_dim;
    for (int i = 0; i < n; i++) {
        const int slot = pos[i];
        sp_rope_table(w->rope_cs, hd, slot, hp->rope_base);
        for (int hh = 0; hh < hp->n_head; hh++) sp_rope_apply(w->q + i * qd + (size_t)hh * hd, w->rope_cs, hd, false);
        for (int hh = 0; hh < hp->n_head_kv; hh++)
            sp_rope_apply(w->k + i * kvd + (size_t)hh * hd, w->rope_cs, hd, false);
        for (size_t e = 0; e < kvd; e++) {
            kv[i]->k[(size_t)slot * kvd + e] = sp_f32_to_f16(w->k[i * kvd + e]);
            kv[i]->v[(size_t)slot * kvd + e] = sp_f32_to_f16(w->v[i * kvd + e]);
        }
    }
    head_attn_job j = { .h = h, .w = w, .kv = kv, .pos = pos, .n = n };
    atomic_init(&j.next, 0);
    sp_pool_run(w->pool, head_attn_worker, &j);
}

/* The layer over n rows whose caches and positions are kv[i], pos[i]:
 * w->h holds the outputs. */
static void head_layer(const sp_head *h, sp_head_ws *w, sp_kv *const *kv, const int *pos, const float *g,
                       const int32_t *tok, int n) {
    const sp_head_hparams *hp = &h->hp;
    const int d = hp->n_embd;
    /* attention */
    head_inputs(h, w, g, tok, n);
    const sp_matrix *qkv[3] = { &h->wq, &h->wk, &h->wv };
    float *y[3] = { w->q, w->k, w->v };
    sp_matmul_many(qkv, w->x, n, y, 3, w->act, w->pool);
    head_attention(h, w, kv, pos, n);
    matmul(w, &h->wo, w->att, n, w->tmp);
    sp_vec_add(w->h, w->tmp, n * d);
    /* feed-forward */
    for (int i = 0; i < n; i++) sp_rmsnorm(w->nb + (size_t)i * d, w->h + (size_t)i * d, h->ffn_norm, d, hp->rms_eps);
    const sp_matrix *gu[2] = { &h->w_gate, &h->w_up };
    float *yy[2] = { w->hb, w->hb2 };
    sp_matmul_many(gu, w->nb, n, yy, 2, w->act, w->pool);
    sp_swiglu(w->hb, w->hb, w->hb2, n * hp->n_ff);
    matmul(w, &h->w_down, w->hb, n, w->tmp);
    sp_vec_add(w->h, w->tmp, n * d);
}

static int check_tokens(const sp_head *h, const int32_t *tok, int n, sp_err *err) {
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= h->tok_embd->n_out)
            return sp_err_set(err, "draft head: token %d out of range", tok[i]);
    return 0;
}

int sp_head_forward(const sp_head *h, sp_head_ws *w, sp_kv *kv, const float *g, const int32_t *tok, int n,
                    float *out, float *logits, sp_err *err) {
    const sp_head_hparams *hp = &h->hp;
    const int d = hp->n_embd;
    if (n <= 0 || n > w->max_rows) return sp_err_set(err, "draft head: %d rows (1 to %d a pass)", n, w->max_rows);
    if (kv->n + n > kv->n_ctx || kv->n + n > w->n_ctx)
        return sp_err_set(err, "draft head: its cache is full (%d + %d > %d)", kv->n, n, kv->n_ctx);
    if (check_tokens(h, tok, n, err)) return -1;
    sp_kv *kvs[SP_HEAD_MAX_ROWS];
    int pos[SP_HEAD_MAX_ROWS];
    assert(n <= SP_HEAD_MAX_ROWS);
    for (int i = 0; i < n; i++) {
        kvs[i] = kv;
        pos[i] = kv->n + i;
    }
    head_layer(h, w, kvs, pos, g, tok, n);
    kv->n += n;
    memcpy(out, w->h, (size_t)n * d * sizeof(float));
    if (logits) {                    /* the last row through the output norm and LM head */
        sp_rmsnorm(w->nb, w->h + (size_t)(n - 1) * d, h->out_norm, d, hp->rms_eps);
        matmul(w, &h->output, w->nb, 1, logits);
    }
    return 0;
}

int sp_head_forward_rows(const sp_head *h, sp_head_ws *w, sp_kv *const *kv, const float *g, const int32_t *tok,
                         int n, float *const *out, float *const *logits, sp_err *err) {
    const sp_head_hparams *hp = &h->hp;
    const int d = hp->n_embd, V = hp->n_vocab_draft;
    if (n <= 0 || n > w->max_rows) return sp_err_set(err, "draft head: %d rows (1 to %d a pass)", n, w->max_rows);
    int pos[SP_HEAD_MAX_ROWS];
    assert(n <= SP_HEAD_MAX_ROWS);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) assert(kv[j] != kv[i]);   /* one row per cache */
        if (kv[i]->n + 1 > kv[i]->n_ctx || kv[i]->n + 1 > w->n_ctx)
            return sp_err_set(err, "draft head: its cache is full (%d + 1 > %d)", kv[i]->n, kv[i]->n_ctx);
        pos[i] = kv[i]->n;
    }
    if (check_tokens(h, tok, n, err)) return -1;
    head_layer(h, w, kv, pos, g, tok, n);
    for (int i = 0; i < n; i++) {
        kv[i]->n++;
        memcpy(out[i], w->h + (size_t)i * d, (size_t)d * sizeof(float));
        sp_rmsnorm(w->nb + (size_t)i * d, w->h + (size_t)i * d, h->out_norm, d, hp->rms_eps);
    }
    /* the LM head over all rows at once, then each row's logits to its owner */
    if (!w->logits) w->logits = sp_alloc_aligned((size_t)w->max_rows * (size_t)V * sizeof(float));
    float *all = w->logits;
    matmul(w, &h->output, w->nb, n, all);
    for (int i = 0; i < n; i++) memcpy(logits[i], all + (size_t)i * V, (size_t)V * sizeof(float));
    return 0;
}

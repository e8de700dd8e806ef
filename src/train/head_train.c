/* Training an EAGLE-3 draft head (model/head.c) on self-distillation data,
 * with training-time test: the head is unrolled for J steps, step j
 * drafting at depth j from every position at once, on its own outputs.
 *
 * One sequence of n tokens gives R = n - 1 rows p = 0 .. n-2.  Step j, row p
 * stands for drafting token x_{p+2+j} from anchor p:
 *   input hidden  g = fc(taps at p) (j = 0), else step j-1's output at row p
 *   input token   x_{p+1+j}, RoPE position p + j
 *   keys          step 0's rows 0..p and its own row at steps 1..j
 *                 (sp_tr_attn_ttt: what the head sees when drafting)
 *   target        the target's distribution at position p+1+j, restricted
 *                 to the draft vocabulary, weight 0.8^j (EAGLE-3)
 * Gradients flow through the whole unrolled chain (outputs fed forward and
 * keys attended by later steps).  The forward of each step is written
 * top to bottom; the backward runs the steps in reverse, each op's
 * backward in reverse order of its forward. */
#include "train/train.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STEPS 8

/* ----------------------------------------------------------------------------
 * Parameters
 * ------------------------------------------------------------------------- */

enum { P_FC, P_AN, P_AN2, P_WQ, P_WK, P_WV, P_WO, P_FN, P_WG, P_WU, P_WD, P_ON, P_OUT, P_COUNT };
static const char *const pnames[P_COUNT] = {
    "fc.weight", "blk.0.attn_norm.weight", "blk.0.attn_norm_2.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
    "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
    "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight", "output.weight",
};

typedef struct dims {
    int d, q, kv, ff, V, nh, nkv, hd;
    float eps, rope_base;
} dims;

static int declare(sp_tr_arena *a, const dims *D, sp_err *err) {
    const int64_t shapes[P_COUNT][2] = {
        { D->d, 3 * D->d }, { D->d, 1 }, { D->d, 1 }, { D->q, 2 * D->d }, { D->kv, 2 * D->d }, { D->kv, 2 * D->d },
        { D->d, D->q }, { D->d, 1 }, { D->ff, D->d }, { D->ff, D->d }, { D->d, D->ff }, { D->d, 1 }, { D->V, D->d },
    };
    for (int i = 0; i < P_COUNT; i++) {
        const bool vec = shapes[i][1] == 1;
        if (sp_tr_arena_add(a, pnames[i], vec ? 1 : 2, shapes[i], !vec, err) != i) return -1;
    }
    sp_tr_arena_alloc(a);
    return 0;
}

/* Initial weights: norms 1 (the output norm the target's), small random
 * matrices, fc passing the highest tap through, and the LM head the
 * target's own rows for the draft vocabulary, so the untrained head already
 * speaks the target's language and training starts from a sensible point. */
static void init_params(sp_tr_arena *a, const dims *D, const sp_model *t, const int32_t *d2t, uint64_t seed) {
    for (int i = 0; i < P_COUNT; i++) sp_tr_arena_init_normal(a, i, 0.02f, seed + (uint64_t)i);
    const int vecs[] = { P_AN, P_AN2, P_FN };
    for (int i = 0; i < 3; i++) {
        float *p = sp_tr_param(a, vecs[i]);
        for (int e = 0; e < D->d; e++) p[e] = 1.0f;
    }
    memcpy(sp_tr_param(a, P_ON), t->out_norm, (size_t)D->d * sizeof(float));
    float *fc = sp_tr_param(a, P_FC);
    for (int e = 0; e < D->d; e++) fc[(size_t)e * 3 * D->d + 2 * D->d + e] += 1.0f;
    float *out = sp_tr_param(a, P_OUT);
    for (int i = 0; i < D->V; i++) sp_matrix_get_row(&t->output, d2t[i], out + (size_t)i * D->d);
}

/* ----------------------------------------------------------------------------
 * Activations of one unrolled step over R rows
 * ------------------------------------------------------------------------- */

typedef struct step_act {
    int32_t *tok, *pos;              /* (R) */
    float *w;                        /* (R) loss weights */
    int32_t *tid;                    /* (R, k) draft ids of the targets (-1: not in the draft vocabulary) */
    float *tp;                       /* (R, k) */
    float *e, *en, *rstd_e;          /* (R, d), (R, d), (R) */
    float *g, *gn, *rstd_g;          /* (R, d) input hidden, normed, (R) */
    float *x;                        /* (R, 2d) */
    float *q;                        /* (R, q) after RoPE */
    float *att;                      /* attention probabilities */
    float *ao;                       /* (R, q) */
    float *h1, *n1, *rstd1;          /* (R, d) */
    float *gate, *up, *act;          /* (R, ff) */
    float *h2, *n2, *rstd2;          /* (R, d) h2 = the step's output */
    float *logits;                   /* (R, V) */
    int32_t *koff, *kidx;            /* key lists for rows_keys rows */
    int n_keys, rows_keys;
} step_act;

typedef struct trainer {
    const sp_model *t;
    sp_pool *pool;
    dims D;
    int J, R_max, k;
    bool norm_residual;              /* EAGLE-3's norm_before_residual: h1 = rmsnorm(g) an2 + Wo ao */
    sp_tr_loss_kind loss;
    sp_tr_arena a;
    step_act s[MAX_STEPS];
    float *K, *Vv, *dK, *dV;         /* (J * R, kv) keys and values of all steps, post-RoPE */
    float *taps;                     /* (R, 3d) */
    /* backward scratch, (R, width) */
    float *dlogits, *dn2, *dh2, *dact, *dgate, *dup, *dn1, *dh1, *dao, *dq, *dqp, *dkp, *dvv, *dx, *dg;
    float *dout[MAX_STEPS];          /* gradient reaching step j's output from step j+1 */
    int32_t *t2d;                    /* (n_vocab) draft id of a target id, -1 if none */
} trainer;

static float *fz(size_t n) { return sp_xcalloc(n ? n : 1, sizeof(float)); }

static void alloc_step(step_act *s, const dims *D, int R, int k, int j) {
    const size_t r = (size_t)R;
    s->tok = sp_xcalloc(r, sizeof(int32_t));
    s->pos = sp_xcalloc(r, sizeof(int32_t));
    s->w = fz(r);
    s->tid = sp_xcalloc(r * k, sizeof(int32_t));
    s->tp = fz(r * k);
    s->e = fz(r * D->d); s->en = fz(r * D->d); s->rstd_e = fz(r);
    s->g = fz(r * D->d); s->gn = fz(r * D->d); s->rstd_g = fz(r);
    s->x = fz(r * 2 * D->d);
    s->q = fz(r * D->q);
    s->n_keys = R * (R + 1) / 2 + R * j;
    s->att = fz((size_t)D->nh * s->n_keys);
    s->ao = fz(r * D->q);
    s->h1 = fz(r * D->d); s->n1 = fz(r * D->d); s->rstd1 = fz(r);
    s->gate = fz(r * D->ff); s->up = fz(r * D->ff); s->act = fz(r * D->ff);
    s->h2 = fz(r * D->d); s->n2 = fz(r * D->d); s->rstd2 = fz(r);
    s->logits = fz(r * D->V);
    s->koff = sp_xcalloc(r + 1, sizeof(int32_t));
    s->kidx = sp_xcalloc((size_t)s->n_keys, sizeof(int32_t));
    s->rows_keys = 0;                /* built for each sequence's row count */
}

static void free_step(step_act *s) {
    void *p[] = { s->tok, s->pos, s->w, s->tid, s->tp, s->e, s->en, s->rstd_e, s->g, s->gn, s->rstd_g, s->x, s->q,
                  s->att, s->ao, s->h1, s->n1, s->rstd1, s->gate, s->up, s->act, s->h2, s->n2, s->rstd2, s->logits,
                  s->koff, s->kidx };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

/* ----------------------------------------------------------------------------
 * Forward of step j (rows 0..R-1 of one sequence)
 * ------------------------------------------------------------------------- */

static float *P(trainer *tr, int i) { return sp_tr_param(&tr->a, i); }

/* Tokens, positions, targets and weights of step j. */
static void step_inputs(trainer *tr, const sp_distill_seq *q, int R, int j, float wj) {
    step_act *s = &tr->s[j];
    const int n = q->n, k = tr->k;
    for (int p = 0; p < R; p++) {
        const int at = p + 1 + j;                  /* the input token's index, the target's position */
        const bool valid = at <= n - 1;
        const int c = valid ? at : n - 1;
        s->tok[p] = q->tokens[c];
        s->pos[p] = p + j;
        int top = -1;
        for (int i = 0; i < k; i++) {
            const int32_t id = q->ids[(size_t)c * k + i];
            s->tid[(size_t)p * k + i] = id >= 0 && id < tr->t->hp.n_vocab ? tr->t2d[id] : -1;
            s->tp[(size_t)p * k + i] = sp_f16_to_f32(q->probs[(size_t)c * k + i]);
            if (i == 0) top = s->tid[(size_t)p * k];
        }
        /* EAGLE-3: no loss where the target's first choice is outside the
         * draft vocabulary, nor on prompt rows */
        s->w[p] = valid && at >= q->loss_from && top >= 0 ? wj : 0.0f;
    }
}

static void forward_step(trainer *tr, int R, int j) {
    const dims *D = &tr->D;
    step_act *s = &tr->s[j];
    const int d = D->d;
    /* the key lists index rows step by step, R to a step: a sequence of
     * another length needs its own */
    assert(R <= tr->R_max);
    if (s->rows_keys != R) {
        sp_tr_attn_ttt(s->koff, s->kidx, R, j);
        s->rows_keys = R;
    }
    if (j == 0) sp_tr_linear_fwd(tr->pool, s->g, tr->taps, P(tr, P_FC), NULL, R, 3 * d, d);
    else memcpy(s->g, tr->s[j - 1].h2, (size_t)R * d * sizeof(float));
    for (int p = 0; p < R; p++) sp_matrix_get_row(&tr->t->tok_embd, s->tok[p], s->e + (size_t)p * d);
    sp_tr_rmsnorm_fwd(s->en, s->rstd_e, s->e, P(tr, P_AN), R, d, D->eps);
    sp_tr_rmsnorm_fwd(s->gn, s->rstd_g, s->g, P(tr, P_AN2), R, d, D->eps);
    for (int p = 0; p < R; p++) {
        memcpy(s->x + (size_t)p * 2 * d, s->en + (size_t)p * d, (size_t)d * sizeof(float));
        memcpy(s->x + (size_t)p * 2 * d + d, s->gn + (size_t)p * d, (size_t)d * sizeof(float));
    }
    /* attention: this step's keys and values join the earlier steps' */
    float *k = tr->K + (size_t)j * R * D->kv, *v = tr->Vv + (size_t)j * R * D->kv;
    sp_tr_linear_fwd(tr->pool, s->q, s->x, P(tr, P_WQ), NULL, R, 2 * d, D->q);
    sp_tr_linear_fwd(tr->pool, k, s->x, P(tr, P_WK), NULL, R, 2 * d, D->kv);
    sp_tr_linear_fwd(tr->pool, v, s->x, P(tr, P_WV), NULL, R, 2 * d, D->kv);
    sp_tr_rope_fwd(s->q, s->q, s->pos, R, D->nh, D->hd, D->hd, D->rope_base, false);
    sp_tr_rope_fwd(k, k, s->pos, R, D->nkv, D->hd, D->hd, D->rope_base, false);
    const sp_tr_attn_shape sh = { .T = R, .S = (j + 1) * R, .n_head = D->nh, .n_kv = D->nkv, .hd = D->hd,
                                  .koff = s->koff, .kidx = s->kidx };
    sp_tr_attn_fwd(tr->pool, s->ao, s->att, s->q, tr->K, tr->Vv, &sh);
    sp_tr_linear_fwd(tr->pool, s->h1, s->ao, P(tr, P_WO), NULL, R, D->q, d);
    sp_tr_acc(s->h1, tr->norm_residual ? s->gn : s->g, (size_t)R * d);   /* h1 = g (or its norm) + Wo ao */
    /* feed-forward */
    sp_tr_rmsnorm_fwd(s->n1, s->rstd1, s->h1, P(tr, P_FN), R, d, D->eps);
    sp_tr_linear_fwd(tr->pool, s->gate, s->n1, P(tr, P_WG), NULL, R, d, D->ff);
    sp_tr_linear_fwd(tr->pool, s->up, s->n1, P(tr, P_WU), NULL, R, d, D->ff);
    sp_tr_swiglu_fwd(s->act, s->gate, s->up, (size_t)R * D->ff);
    sp_tr_linear_fwd(tr->pool, s->h2, s->act, P(tr, P_WD), NULL, R, D->ff, d);
    sp_tr_acc(s->h2, s->h1, (size_t)R * d);                 /* h2 = h1 + Wd act */
    /* output */
    sp_tr_rmsnorm_fwd(s->n2, s->rstd2, s->h2, P(tr, P_ON), R, d, D->eps);
    sp_tr_linear_fwd(tr->pool, s->logits, s->n2, P(tr, P_OUT), NULL, R, d, D->V);
}

/* ----------------------------------------------------------------------------
 * Backward of step j (after steps j+1.. : their gradients into this step's
 * output and keys are in place)
 * ------------------------------------------------------------------------- */

static float *G(trainer *tr, int i) { return sp_tr_grad(&tr->a, i); }

static void zero(float *p, size_t n) { memset(p, 0, n * sizeof(float)); }

static void backward_step(trainer *tr, int R, int j, float denom, float *loss, float *acc) {
    const dims *D = &tr->D;
    step_act *s = &tr->s[j];
    const int d = D->d;
    const size_t Rd = (size_t)R * d;
    /* loss -> output */
    *loss = sp_tr_loss(tr->loss, tr->pool, tr->dlogits, s->logits, R, D->V, s->tid, s->tp, tr->k, s->w, denom, acc);
    zero(tr->dn2, Rd);
    sp_tr_linear_bwd(tr->pool, tr->dn2, G(tr, P_OUT), NULL, tr->dlogits, s->n2, P(tr, P_OUT), R, d, D->V);
    zero(tr->dh2, Rd);
    sp_tr_acc(tr->dh2, tr->dout[j], Rd);                   /* from step j+1, which read h2 as its g */
    sp_tr_rmsnorm_bwd(tr->dh2, G(tr, P_ON), tr->dn2, s->h2, P(tr, P_ON), s->rstd2, R, d);
    /* feed-forward: h2 = h1 + Wd swiglu(Wg n1, Wu n1) */
    zero(tr->dact, (size_t)R * D->ff);
    sp_tr_linear_bwd(tr->pool, tr->dact, G(tr, P_WD), NULL, tr->dh2, s->act, P(tr, P_WD), R, D->ff, d);
    zero(tr->dgate, (size_t)R * D->ff);
    zero(tr->dup, (size_t)R * D->ff);
    sp_tr_swiglu_bwd(tr->dgate, tr->dup, tr->dact, s->gate, s->up, (size_t)R * D->ff);
    zero(tr->dn1, Rd);
    sp_tr_linear_bwd(tr->pool, tr->dn1, G(tr, P_WG), NULL, tr->dgate, s->n1, P(tr, P_WG), R, d, D->ff);
    sp_tr_linear_bwd(tr->pool, tr->dn1, G(tr, P_WU), NULL, tr->dup, s->n1, P(tr, P_WU), R, d, D->ff);
    memcpy(tr->dh1, tr->dh2, Rd * sizeof(float));          /* the residual */
    sp_tr_rmsnorm_bwd(tr->dh1, G(tr, P_FN), tr->dn1, s->h1, P(tr, P_FN), s->rstd1, R, d);
    /* attention: h1 = g (or rmsnorm(g) an2) + Wo attn(q, K, V) */
    zero(tr->dg, Rd);
    if (!tr->norm_residual) sp_tr_acc(tr->dg, tr->dh1, Rd);   /* the residual */
    zero(tr->dao, (size_t)R * D->q);
    sp_tr_linear_bwd(tr->pool, tr->dao, G(tr, P_WO), NULL, tr->dh1, s->ao, P(tr, P_WO), R, D->q, d);
    zero(tr->dq, (size_t)R * D->q);
    const sp_tr_attn_shape sh = { .T = R, .S = (j + 1) * R, .n_head = D->nh, .n_kv = D->nkv, .hd = D->hd,
                                  .koff = s->koff, .kidx = s->kidx };
    sp_tr_attn_bwd(tr->pool, tr->dq, tr->dK, tr->dV, tr->dao, s->att, s->q, tr->K, tr->Vv, &sh);
    /* this step's keys and values now have every gradient (later steps ran first) */
    const float *dk = tr->dK + (size_t)j * R * D->kv, *dv = tr->dV + (size_t)j * R * D->kv;
    zero(tr->dqp, (size_t)R * D->q);
    zero(tr->dkp, (size_t)R * D->kv);
    sp_tr_rope_bwd(tr->dqp, tr->dq, s->pos, R, D->nh, D->hd, D->hd, D->rope_base, false);
    sp_tr_rope_bwd(tr->dkp, dk, s->pos, R, D->nkv, D->hd, D->hd, D->rope_base, false);
    zero(tr->dx, (size_t)R * 2 * d);
    sp_tr_linear_bwd(tr->pool, tr->dx, G(tr, P_WQ), NULL, tr->dqp, s->x, P(tr, P_WQ), R, 2 * d, D->q);
    sp_tr_linear_bwd(tr->pool, tr->dx, G(tr, P_WK), NULL, tr->dkp, s->x, P(tr, P_WK), R, 2 * d, D->kv);
    sp_tr_linear_bwd(tr->pool, tr->dx, G(tr, P_WV), NULL, dv, s->x, P(tr, P_WV), R, 2 * d, D->kv);
    /* x = [rmsnorm(e) an, rmsnorm(g) an2]: the embedding is frozen, its norm's weight is not */
    float *den = tr->dvv, *dgn = tr->dn1;                  /* (R, d) scratch, free now */
    for (int p = 0; p < R; p++) {
        memcpy(den + (size_t)p * d, tr->dx + (size_t)p * 2 * d, (size_t)d * sizeof(float));
        memcpy(dgn + (size_t)p * d, tr->dx + (size_t)p * 2 * d + d, (size_t)d * sizeof(float));
    }
    if (tr->norm_residual) sp_tr_acc(dgn, tr->dh1, Rd);     /* the residual was the normed g */
    sp_tr_rmsnorm_bwd(NULL, G(tr, P_AN), den, s->e, P(tr, P_AN), s->rstd_e, R, d);
    sp_tr_rmsnorm_bwd(tr->dg, G(tr, P_AN2), dgn, s->g, P(tr, P_AN2), s->rstd_g, R, d);
    /* g: the previous step's output, or fc of the taps */
    if (j > 0) sp_tr_acc(tr->dout[j - 1], tr->dg, Rd);
    else sp_tr_linear_bwd(tr->pool, NULL, G(tr, P_FC), NULL, tr->dg, tr->taps, P(tr, P_FC), R, 3 * d, d);
}

/* ----------------------------------------------------------------------------
 * One sequence: forward of every step, then (train) the backward
 * ------------------------------------------------------------------------- */

static int rows_of(const trainer *tr, const sp_distill_seq *q) {
    const int R = q->n - 1;
    return R < tr->R_max ? R : tr->R_max;
}

/* Runs one sequence; adds its weighted loss and, per step, the matches of
 * the head's first choice with the target's (match[j][p]). */
static float run_seq(trainer *tr, const sp_distill_seq *q, bool train, float denom, uint8_t *match) {
    const dims *D = &tr->D;
    const int R = rows_of(tr, q), d = D->d;
    for (int p = 0; p < R; p++)
        for (int e = 0; e < 3 * d; e++) tr->taps[(size_t)p * 3 * d + e] = sp_bf16_to_f32(q->taps[(size_t)p * 3 * d + e]);
    float wj = 1.0f;
    for (int j = 0; j < tr->J; j++, wj *= 0.8f) {
        step_inputs(tr, q, R, j, wj);
        forward_step(tr, R, j);
    }
    if (match)
        for (int j = 0; j < tr->J; j++)
            for (int p = 0; p < R; p++) {
                const float *l = tr->s[j].logits + (size_t)p * D->V;
                int best = 0;
                for (int i = 1; i < D->V; i++) if (l[i] > l[best]) best = i;
                match[(size_t)j * tr->R_max + p] = tr->s[j].w[p] > 0 ? (best == tr->s[j].tid[(size_t)p * tr->k]) + 1 : 0;
            }
    if (!train) return 0;
    float loss = 0, acc;
    zero(tr->dK, (size_t)tr->J * R * D->kv);
    zero(tr->dV, (size_t)tr->J * R * D->kv);
    for (int j = 0; j < tr->J; j++) zero(tr->dout[j], (size_t)R * d);
    for (int j = tr->J - 1; j >= 0; j--) {
        float l;
        backward_step(tr, R, j, denom, &l, &acc);
        loss += l;
    }
    return loss;
}

/* ----------------------------------------------------------------------------
 * Draft vocabulary
 * ------------------------------------------------------------------------- */

typedef struct freq { int32_t id; int64_t n; } freq;
static int by_count(const void *a, const void *b) {
    const freq *x = a, *y = b;
    return x->n != y->n ? (x->n < y->n ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

/* The N target tokens the data makes most often (its sequences' tokens
 * after the first, weighted toward what the target predicts), FR-Spec style. */
static int32_t *draft_vocab(const sp_distill *ds, const uint32_t *train_ids, uint32_t n_train, int V, int N, int32_t *t2d) {
    freq *f = sp_xcalloc((size_t)V, sizeof *f);
    for (int i = 0; i < V; i++) f[i].id = i;
    for (uint32_t s = 0; s < n_train; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, train_ids[s], &q);
        const int k = sp_distill_info_of(ds)->top_k;
        for (int p = 1; p < q.n; p++) {
            if (q.tokens[p] >= 0 && q.tokens[p] < V) f[q.tokens[p]].n += 2;
            const int32_t top = q.ids[(size_t)(p - 1) * k];
            if (top >= 0 && top < V) f[top].n += 1;
        }
    }
    qsort(f, (size_t)V, sizeof *f, by_count);
    int32_t *d2t = sp_xmalloc((size_t)N * sizeof *d2t);
    for (int i = 0; i < V; i++) t2d[i] = -1;
    for (int i = 0; i < N; i++) {
        d2t[i] = f[i].id;
        t2d[f[i].id] = i;
    }
    free(f);
    return d2t;
}

/* ----------------------------------------------------------------------------
 * Set-up
 * ------------------------------------------------------------------------- */

static void trainer_init(trainer *tr, const sp_model *t, sp_pool *pool, const sp_head_train_opts *o, int k) {
    memset(tr, 0, sizeof *tr);
    tr->t = t;
    tr->pool = pool;
    tr->J = o->ttt_steps;
    tr->norm_residual = o->norm_residual;
    tr->loss = o->loss;
    tr->R_max = o->seq_len - 1;
    tr->k = k;
    const sp_hparams *hp = &t->hp;
    tr->D = (dims){ .d = hp->n_embd, .nh = hp->n_head, .nkv = hp->n_head_kv, .hd = hp->head_dim,
                    .q = hp->n_head * hp->head_dim, .kv = hp->n_head_kv * hp->head_dim, .ff = hp->n_ff,
                    .V = o->draft_vocab, .eps = hp->rms_eps, .rope_base = 10000.0f };
    const dims *D = &tr->D;
    const size_t R = (size_t)tr->R_max, w = (size_t)(D->ff > 2 * D->d ? D->ff : 2 * D->d);
    for (int j = 0; j < tr->J; j++) {
        alloc_step(&tr->s[j], D, tr->R_max, k, j);
        tr->dout[j] = fz(R * D->d);
    }
    tr->K = fz((size_t)tr->J * R * D->kv);
    tr->Vv = fz((size_t)tr->J * R * D->kv);
    tr->dK = fz((size_t)tr->J * R * D->kv);
    tr->dV = fz((size_t)tr->J * R * D->kv);
    tr->taps = fz(R * 3 * D->d);
    tr->dlogits = fz(R * D->V);
    float **bufs[] = { &tr->dn2, &tr->dh2, &tr->dact, &tr->dgate, &tr->dup, &tr->dn1, &tr->dh1, &tr->dao, &tr->dq,
                       &tr->dqp, &tr->dkp, &tr->dvv, &tr->dx, &tr->dg };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) *bufs[i] = fz(R * (w > (size_t)D->q ? w : (size_t)D->q));
    tr->t2d = sp_xmalloc((size_t)hp->n_vocab * sizeof *tr->t2d);
}

static void trainer_free(trainer *tr) {
    for (int j = 0; j < tr->J; j++) { free_step(&tr->s[j]); free(tr->dout[j]); }
    float *bufs[] = { tr->K, tr->Vv, tr->dK, tr->dV, tr->taps, tr->dlogits, tr->dn2, tr->dh2, tr->dact, tr->dgate,
                      tr->dup, tr->dn1, tr->dh1, tr->dao, tr->dq, tr->dqp, tr->dkp, tr->dvv, tr->dx, tr->dg };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(tr->t2d);
    sp_tr_arena_free(&tr->a);
}

/* ----------------------------------------------------------------------------
 * Evaluation: held-out acceptance per draft position
 * ------------------------------------------------------------------------- */

/* acc[i]: over held-out anchors whose steps 0..i all have targets, the share
 * where the head's first choices match the target's at every one of them
 * (what a chain of i + 1 greedy drafts would have accepted). */
static void evaluate(trainer *tr, const sp_distill *ds, const uint32_t *ids, uint32_t n, double *acc) {
    uint8_t *match = sp_xmalloc((size_t)tr->J * tr->R_max);
    int64_t ok[MAX_STEPS] = { 0 }, all[MAX_STEPS] = { 0 };
    for (uint32_t s = 0; s < n; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, ids[s], &q);
        run_seq(tr, &q, false, 1, match);
        const int R = rows_of(tr, &q);
        for (int p = 0; p < R; p++) {
            bool good = true;
            for (int j = 0; j < tr->J; j++) {
                const uint8_t m = match[(size_t)j * tr->R_max + p];
                if (!m) break;
                good &= m == 2;
                all[j]++;
                ok[j] += good;
            }
        }
    }
    for (int j = 0; j < tr->J; j++) acc[j] = all[j] ? (double)ok[j] / (double)all[j] : 0;
    free(match);
}

/* ----------------------------------------------------------------------------
 * Checkpoints: the arena (weights and Adam's moments) and the step
 * ------------------------------------------------------------------------- */

#define CKPT_MAGIC "SPHDCK01"

static int save_ckpt(const trainer *tr, const char *path, int64_t step, const int32_t *d2t, sp_err *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return sp_err_set(err, "train-draft: cannot write checkpoint %s", tmp);
    const uint64_t size = tr->a.size;
    const int32_t V = tr->D.V;
    bool ok = fwrite(CKPT_MAGIC, 1, 8, f) == 8 && fwrite(&step, 8, 1, f) == 1 && fwrite(&size, 8, 1, f) == 1 &&
              fwrite(&V, 4, 1, f) == 1 && fwrite(d2t, 4, (size_t)V, f) == (size_t)V &&
              fwrite(tr->a.param, 4, size, f) == size && fwrite(tr->a.m, 4, size, f) == size &&
              fwrite(tr->a.v, 4, size, f) == size;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path)) { remove(tmp); return sp_err_set(err, "train-draft: writing checkpoint %s failed", path); }
    return 0;
}

static int load_ckpt(trainer *tr, const char *path, int64_t *step, int32_t *d2t, sp_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return sp_err_set(err, "train-draft: cannot open checkpoint %s", path);
    char magic[8];
    uint64_t size = 0;
    int32_t V = 0;
    bool ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, CKPT_MAGIC, 8) && fread(step, 8, 1, f) == 1 &&
              fread(&size, 8, 1, f) == 1 && fread(&V, 4, 1, f) == 1 && size == tr->a.size && V == tr->D.V &&
              *step >= 0 && fread(d2t, 4, (size_t)V, f) == (size_t)V && fread(tr->a.param, 4, size, f) == size &&
              fread(tr->a.m, 4, size, f) == size && fread(tr->a.v, 4, size, f) == size;
    fclose(f);
    if (!ok) return sp_err_set(err, "train-draft: %s is not a checkpoint of this head's shape", path);
    for (int i = 0; i < V; i++)
        if (d2t[i] < 0 || d2t[i] >= tr->t->hp.n_vocab) return sp_err_set(err, "train-draft: %s: bad draft vocabulary", path);
    for (int i = 0; i < tr->t->hp.n_vocab; i++) tr->t2d[i] = -1;
    for (int i = 0; i < V; i++) {
        if (tr->t2d[d2t[i]] >= 0) return sp_err_set(err, "train-draft: %s: repeated draft token", path);
        tr->t2d[d2t[i]] = i;
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * The loop
 * ------------------------------------------------------------------------- */

sp_head_train_opts sp_head_train_default_opts(void) {
    return (sp_head_train_opts){ .draft_vocab = 8192, .ttt_steps = 3, .seq_len = 256, .batch_seqs = 4,
                                 .epochs = 1, .lr = 1e-3f, .lr_floor = 1e-4f, .weight_decay = 0.01f, .clip = 1.0f,
                                 .warmup = 20, .heldout = 0.05, .seed = 1, .ckpt_every = 100, .min_prob = 0.3f,
                                 .head_type = SP_Q4_1 };
}

static void write_head(const trainer *tr, const sp_head_train_opts *o, const int32_t *d2t, const char *out,
                       sp_err *err, int *rc) {
    const sp_tr_arena *a = &tr->a;
    const sp_head_hparams hp = {
        .n_embd = tr->D.d, .n_embd_target = tr->D.d, .n_head = tr->D.nh, .n_head_kv = tr->D.nkv, .head_dim = tr->D.hd,
        .n_ff = tr->D.ff, .n_vocab_draft = tr->D.V, .n_ctx_train = tr->t->hp.n_ctx_train, .rms_eps = tr->D.eps,
        .rope_base = tr->D.rope_base,
        .target_layers = { o->tap_layers[0], o->tap_layers[1], o->tap_layers[2] },
        .norm_before_residual = o->norm_residual,
    };
    const sp_head_weights w = {
        .fc = sp_tr_param(a, P_FC), .attn_norm = sp_tr_param(a, P_AN), .attn_norm_2 = sp_tr_param(a, P_AN2),
        .ffn_norm = sp_tr_param(a, P_FN), .out_norm = sp_tr_param(a, P_ON), .wq = sp_tr_param(a, P_WQ),
        .wk = sp_tr_param(a, P_WK), .wv = sp_tr_param(a, P_WV), .wo = sp_tr_param(a, P_WO),
        .w_gate = sp_tr_param(a, P_WG), .w_up = sp_tr_param(a, P_WU), .w_down = sp_tr_param(a, P_WD),
        .output = sp_tr_param(a, P_OUT), .d2t = d2t,
    };
    const sp_head_write_opts wo = { .type = o->head_type, .min_prob = o->min_prob, .training = o->command };
    *rc = sp_head_write(out, tr->t, &hp, &w, &wo, err);
}

int sp_head_train(const sp_model *t, sp_pool *pool, const sp_distill *ds, const sp_head_train_opts *o,
                  const char *out_path, sp_err *err) {
    const sp_distill_info *in = sp_distill_info_of(ds);
    if (strcmp(in->fingerprint, t->fingerprint))
        return sp_err_set(err, "train-draft: the data was made by another model (fingerprint %s, this one %s)",
                          in->fingerprint, t->fingerprint);
    if (in->n_embd != t->hp.n_embd || memcmp(in->tap_layers, o->tap_layers, sizeof in->tap_layers))
        return sp_err_set(err, "train-draft: the data's width or tap layers differ from the head's");
    if (o->ttt_steps < 1 || o->ttt_steps > MAX_STEPS || o->seq_len < 4 || o->draft_vocab < 16 ||
        o->draft_vocab > t->hp.n_vocab || o->batch_seqs < 1 || o->epochs < 1)
        return sp_err_set(err, "train-draft: bad options (ttt steps 1..%d, draft vocabulary 16..%d)", MAX_STEPS,
                          t->hp.n_vocab);
    /* the data file is input like any other: every token must be one of
     * the target's (the embedding rows are read by id) */
    for (uint32_t i = 0; i < in->n_seqs; i++) {
        sp_distill_seq q;
        sp_distill_get(ds, i, &q);
        for (int p = 0; p < q.n; p++)
            if (q.tokens[p] < 0 || q.tokens[p] >= t->hp.n_vocab)
                return sp_err_set(err, "train-draft: the data's sequence %u has token %d, outside the target's "
                                  "vocabulary", i, q.tokens[p]);
    }
    /* split: every 1/heldout-th sequence (in a seeded order) is held out */
    const uint32_t N = in->n_seqs;
    uint32_t *order = sp_xmalloc((size_t)N * sizeof *order);
    for (uint32_t i = 0; i < N; i++) order[i] = i;
    sp_rng rng = { o->seed };
    for (uint32_t i = N - 1; i > 0; i--) {
        const uint32_t j = (uint32_t)(sp_rng_next(&rng) % (i + 1));
        const uint32_t x = order[i]; order[i] = order[j]; order[j] = x;
    }
    uint32_t n_held = (uint32_t)((double)N * o->heldout);
    if (n_held < 1 && N > 1) n_held = 1;
    if (n_held > 64) n_held = 64;
    const uint32_t *held = order, *train = order + n_held, n_train = N - n_held;
    if (n_train == 0) { free(order); return sp_err_set(err, "train-draft: the data has too few sequences"); }

    sp_tr_fpenv *fpenv = sp_tr_denormals_off(pool);
    trainer tr;
    trainer_init(&tr, t, pool, o, in->top_k);
    int rc = declare(&tr.a, &tr.D, err);
    int32_t *d2t = NULL;
    int64_t step = 0;
    if (!rc) {
        d2t = draft_vocab(ds, train, n_train, t->hp.n_vocab, o->draft_vocab, tr.t2d);
        init_params(&tr.a, &tr.D, t, d2t, o->seed);
        if (o->resume) rc = load_ckpt(&tr, o->resume, &step, d2t, err);
    }
    const int64_t steps_per_epoch = (n_train + (uint32_t)o->batch_seqs - 1) / (uint32_t)o->batch_seqs;
    const int64_t total = steps_per_epoch * o->epochs;
    const sp_tr_adamw adam = { .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = o->weight_decay };
    const uint64_t t0 = sp_now_ns();
    int64_t tokens = 0;
    double acc[MAX_STEPS];
    for (; !rc && step < total; step++) {
        /* the sequences of this step, in a seeded order per epoch */
        const int64_t epoch = step / steps_per_epoch, first = (step % steps_per_epoch) * o->batch_seqs;
        sp_tr_arena_zero_grad(&tr.a);
        float loss = 0;
        int n_rows = 0;
        sp_distill_seq qs[64];
        const int nb = (int)(first + o->batch_seqs <= n_train ? o->batch_seqs : n_train - first);
        for (int b = 0; b < nb && b < 64; b++) {
            const uint64_t pick = sp_hash64((uint64_t)epoch * 0x9E37u + (uint64_t)(first + b)) % n_train;
            sp_distill_get(ds, train[epoch == 0 ? (uint32_t)(first + b) : (uint32_t)pick], &qs[b]);
            n_rows += rows_of(&tr, &qs[b]);
        }
        for (int b = 0; b < nb && b < 64; b++) {
            loss += run_seq(&tr, &qs[b], true, (float)n_rows, NULL);
            tokens += rows_of(&tr, &qs[b]);
        }
        const float gnorm = sp_tr_clip_grad(tr.a.grad, tr.a.size, o->clip);
        const float lr = sp_tr_lr_cosine(step, o->warmup, total, o->lr, o->lr_floor);
        if (!isfinite(loss) || !isfinite(gnorm)) { rc = sp_err_set(err, "train-draft: the loss diverged at step %lld", (long long)step); break; }
        sp_tr_arena_adamw(&tr.a, pool, &adam, lr, o->weight_decay, step + 1);
        const bool last = step + 1 == total;
        const bool eval = last || (o->eval_every > 0 && (step + 1) % o->eval_every == 0);
        if (eval) evaluate(&tr, ds, held, n_held, acc);
        if (o->progress) {
            sp_head_train_status st = { .step = step + 1, .total = total, .loss = loss, .grad_norm = gnorm, .lr = lr,
                                        .tokens_per_s = (double)tokens / sp_ns_to_s(sp_now_ns() - t0 + 1),
                                        .elapsed_s = sp_ns_to_s(sp_now_ns() - t0), .n_acc = eval ? tr.J : 0 };
            for (int j = 0; eval && j < tr.J; j++) st.acc[j] = acc[j];
            o->progress(o->ud, &st);
        }
        if (o->ckpt_path && o->ckpt_every > 0 && ((step + 1) % o->ckpt_every == 0 || last))
            rc = save_ckpt(&tr, o->ckpt_path, step + 1, d2t, err);
    }
    if (!rc) write_head(&tr, o, d2t, out_path, err, &rc);
    free(d2t);
    free(order);
    trainer_free(&tr);
    sp_tr_denormals_restore(pool, fpenv);
    return rc;
}

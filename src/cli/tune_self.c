/* specula tune-self: finds the layer subset self-speculation drafts with.
 *
 * Calibration: the target greedily continues a few prompts of the bench
 * set; the draft (the target with some layers skipped) is then run
 * teacher-forced over those sequences, and its agreement a = how often its
 * argmax equals the target's next token estimates the per-token acceptance.
 * A draft of n tokens is then expected to emit (1 - a^(n+1)) / (1 - a)
 * tokens for n draft passes plus one verification of n + 1 rows; the cost
 * of a draft pass is measured (layers kept, plus the embedding and LM head
 * every pass pays).  A greedy search removes, one at a time, the layer
 * that costs the least agreement, and keeps the subset with the best
 * estimated speedup.  (Layers are ranked once, by the agreement left when
 * each alone is skipped, and removed in that order: 2L evaluations
 * instead of L^2/2.)  The best few are then measured for real (plain vs
 * --spec self on the calibration prompts, same run) and the fastest wins.
 * The result is written to ${XDG_CACHE_HOME:-~/.cache}/specula/self/ and
 * becomes the default of --spec self for that model.
 */
#include "cli/cli.h"
#include "cli/paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char tune_help[] =
    "usage: specula tune-self [options]\n"
    "\n"
    "Searches the layers self-speculation (--spec self) should draft with, by measured speedup\n"
    "on prompts of the bench set, and saves the result as that model's default.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "      --prompts FILE      JSONL prompts (default bench/prompts.jsonl)\n"
    "      --limit N           calibration prompts (default 4)\n"
    "      --tokens N          greedy tokens per calibration prompt (default 48)\n"
    "      --no-save           print the result only\n"
    "  -h, --help              this help\n";

typedef struct calib {
    sp_tokens seq;               /* prompt + the target's greedy continuation */
    int n_prompt;
} calib;

static sp_emit_result collect_tok(void *ud, int32_t t, bool d, const float *logits) {
    (void)d; (void)logits;
    sp_tokens_push(ud, t);
    return SP_EMIT_CONTINUE;
}

/* Agreement of the masked draft with the target over the calibration set. */
static double agreement(const sp_engine *e, sp_workspace *ws, const calib *c, int nc, float *logits,
                        sp_err *err) {
    const int V = e->model->hp.n_vocab;
    long hit = 0, tot = 0;
    for (int i = 0; i < nc; i++) {
        sp_kv *kv = sp_kv_create(e->model, c[i].seq.n + 1);
        const int np = c[i].n_prompt, ng = c[i].seq.n - np;
        if (sp_model_forward(e->model, kv, ws, c[i].seq.ids, np - 1, SP_LOGITS_NONE, NULL, err)) { sp_kv_free(kv); return -1; }
        for (int s = 0; s < ng; s += 32) {
            const int r = ng - s < 32 ? ng - s : 32;
            if (sp_model_forward(e->model, kv, ws, c[i].seq.ids + np - 1 + s, r, SP_LOGITS_ALL, logits, err)) {
                sp_kv_free(kv);
                return -1;
            }
            for (int j = 0; j < r; j++) {
                const float *row = logits + (size_t)j * V;
                int32_t best = 0;
                for (int t = 1; t < V; t++) if (row[t] > row[best]) best = t;
                hit += best == c[i].seq.ids[np + s + j];
                tot++;
            }
        }
        sp_kv_free(kv);
    }
    return tot ? (double)hit / (double)tot : 0;
}

/* Best expected speedup over draft lengths 1..8 for acceptance a and a draft
 * pass costing c of a target pass; verification from the cost curve. */
static double est_speedup(double a, double c, const sp_cost_curve *cc, int *best_n) {
    double best = 1.0;
    *best_n = 0;
    for (int n = 1; n <= 8; n++) {
        double e = a < 1 ? (1 - pow(a, n + 1)) / (1 - a) : n + 1;
        double t = n * c * cc->t[1] + cc->t[n + 1];
        double s = e * cc->t[1] / t;
        if (s > best) { best = s; *best_n = n; }
    }
    return best;
}

static double time_pass(const sp_engine *e, sp_workspace *ws, sp_err *err) {
    sp_kv *kv = sp_kv_create(e->model, 64);
    int32_t t[33];
    for (int i = 0; i < 33; i++) t[i] = (i * 31 + 7) % e->model->hp.n_vocab;
    float *l = sp_alloc_aligned((size_t)e->model->hp.n_vocab * sizeof(float));
    double best = 1e9;
    if (sp_model_forward(e->model, kv, ws, t, 32, SP_LOGITS_NONE, NULL, err)) best = -1;
    for (int r = 0; r < 7 && best > 0; r++) {
        uint64_t t0 = sp_now_ns();
        if (sp_model_forward(e->model, kv, ws, t + 32, 1, SP_LOGITS_LAST, l, err)) { best = -1; break; }
        double s = sp_ns_to_s(sp_now_ns() - t0);
        if (s < best) best = s;
        sp_kv_trim(kv, 32);
    }
    sp_free_aligned(l);
    sp_kv_free(kv);
    return best;
}

static void layers_string(const uint8_t *keep, int L, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < L;) {
        if (!keep[i]) { i++; continue; }
        int j = i;
        while (j + 1 < L && keep[j + 1]) j++;
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%d", n ? "," : "", i);
        if (j > i) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "-%d", j);
        i = j + 1;
    }
}

/* Measured decode speedup of self-speculation with `keep` on the
 * calibration prompts (plain and self interleaved, greedy). */
static double measure(const sp_engine *e, const uint8_t *keep, const calib *c, int nc, int tokens,
                      sp_err *err) {
    const int L = e->model->hp.n_layer;
    uint8_t *skip = sp_xmalloc((size_t)L);
    for (int i = 0; i < L; i++) skip[i] = !keep[i];
    sp_draft_model_opts dmo = { .n_ctx = e->n_ctx };
    sp_drafter *d = sp_self_create(e->model, skip, &dmo, e->pool, err);
    free(skip);
    if (!d) return -1;
    double t_plain = 0, t_self = 0;
    for (int i = 0; i < nc; i++) {
        for (int mode = 0; mode < 2; mode++) {
            sp_tokens out = { 0 };
            sp_seq_params p = sp_seq_default_params();
            p.prompt = c[i].seq.ids;
            p.n_prompt = c[i].n_prompt;
            p.max_tokens = tokens;
            p.drafter = mode ? d : NULL;
            p.emit = collect_tok;
            p.ud = &out;
            sp_spec_stats st;
            const int rc = sp_ctx_generate(e->ctx, &p, &st, NULL, err);
            sp_tokens_free(&out);
            if (rc) { sp_drafter_free(d); return -1; }
            *(mode ? &t_self : &t_plain) += sp_ns_to_s(st.total_ns);
        }
    }
    sp_drafter_free(d);
    return t_self > 0 ? t_plain / t_self : 0;
}

int sp_cmd_tune_self(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    const char *prompts = "bench/prompts.jsonl";
    int limit = 4, tokens = 48;
    bool save = true;
    sp_args a = { "tune-self", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &eo);
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(tune_help, stdout); return 0; }
        else if (sp_arg_is(&a, "--prompts")) { if (!sp_arg_str(&a, &prompts)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--limit")) { if (!sp_arg_int(&a, 1, 64, &limit)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--tokens")) { if (!sp_arg_int(&a, 8, 512, &tokens)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--no-save")) save = false;
        else return sp_arg_unknown(&a);
    }
    sp_err err;
    sp_engine e;
    if (sp_engine_open(&eo, &e, &err)) { fprintf(stderr, "specula tune-self: %s\n", err.msg); return SP_EXIT_FAIL; }
    const int L = e.model->hp.n_layer, V = e.model->hp.n_vocab;
    int rc = SP_EXIT_FAIL, nc = 0;
    calib *c = sp_xcalloc((size_t)limit, sizeof *c);
    float *logits = sp_alloc_aligned((size_t)32 * V * sizeof(float));
    uint8_t *keep = sp_xmalloc((size_t)L), *skip = sp_xmalloc((size_t)L), *best_keep = sp_xmalloc((size_t)L);
    sp_workspace *ws = sp_workspace_create(e.model, 64, e.pool);
    const sp_cost_curve *cost;
    if (sp_ctx_cost(e.ctx, &cost, &err)) goto done;

    /* calibration sequences */
    sp_bench_prompt *bp = NULL;
    int nbp = 0;
    if (sp_bench_load(prompts, &e, limit, &bp, &nbp, &err)) goto done;
    for (int i = 0; i < nbp; i++) {
        sp_tokens out = { 0 };
        sp_seq_params p = sp_seq_default_params();
        p.prompt = bp[i].toks.ids;
        p.n_prompt = bp[i].toks.n;
        p.max_tokens = tokens;
        p.emit = collect_tok;
        p.ud = &out;
        const int r = sp_ctx_generate(e.ctx, &p, NULL, NULL, &err);
        if (r) { sp_tokens_free(&out); sp_bench_free(bp, nbp); goto done; }
        for (int j = 0; j < bp[i].toks.n; j++) sp_tokens_push(&c[nc].seq, bp[i].toks.ids[j]);
        for (int j = 0; j < out.n; j++) sp_tokens_push(&c[nc].seq, out.ids[j]);
        c[nc].n_prompt = bp[i].toks.n;
        nc++;
        sp_tokens_free(&out);
    }
    sp_bench_free(bp, nbp);

    /* cost of a draft pass: fixed part (embedding, LM head) + per layer */
    const double t_full = time_pass(&e, e.ws, &err);
    memset(skip, 1, (size_t)L);
    sp_workspace_skip_layers(ws, e.model, skip);
    const double t_none = time_pass(&e, ws, &err);
    if (t_full <= 0 || t_none <= 0) goto done;
    const double per_layer = (t_full - t_none) / L > 0 ? (t_full - t_none) / L : 0;
    fprintf(stderr, "tune-self: %s, %d layers; a pass costs %.2f ms, %.2f ms of it outside the layers\n",
            e.model->name, L, t_full * 1e3, t_none * 1e3);

    /* rank layers by the agreement left when each alone is skipped */
    double *alone = sp_xcalloc((size_t)L, sizeof(double));
    int *order = sp_xcalloc((size_t)L, sizeof(int));
    int n_order = 0;
    for (int l = 1; l < L - 1; l++) {
        memset(skip, 0, (size_t)L);
        skip[l] = 1;
        sp_workspace_skip_layers(ws, e.model, skip);
        if ((alone[l] = agreement(&e, ws, c, nc, logits, &err)) < 0) { free(alone); free(order); goto done; }
        order[n_order++] = l;
        fprintf(stderr, "\rtune-self: ranking layers %d/%d", l, L - 2);
    }
    fprintf(stderr, "\n");
    for (int i = 1; i < n_order; i++)          /* insertion sort, most harmless first */
        for (int j = i; j > 0 && alone[order[j]] > alone[order[j - 1]]; j--) {
            int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    free(alone);

    memset(keep, 1, (size_t)L);
    double best_est = 1.0;
    int best_n = 0, kept = L;
    memcpy(best_keep, keep, (size_t)L);
    typedef struct { uint8_t keep[256]; double est; } cand;
    cand top[4];
    int n_top = 0;
    for (int step = 0; step < n_order && kept > 2; step++) {
        keep[order[step]] = 0;
        kept--;
        for (int i = 0; i < L; i++) skip[i] = !keep[i];
        sp_workspace_skip_layers(ws, e.model, skip);
        const double ag = agreement(&e, ws, c, nc, logits, &err);
        if (ag < 0) { free(order); goto done; }
        const double cost_ratio = (t_none + per_layer * kept) / t_full;
        int n;
        double est = est_speedup(ag, cost_ratio, cost, &n);
        char ls[512];
        layers_string(keep, L, ls, sizeof ls);
        fprintf(stderr, "tune-self: keep %2d layers (%s): agreement %.3f, draft cost %.2f, estimated %.2fx (n=%d)\n",
                kept, ls, ag, cost_ratio, est, n);
        if (L <= 256 && est > 1.0) {
            /* keep the four best estimates for measurement */
            int slot = n_top < 4 ? n_top++ : -1;
            if (slot < 0) {
                slot = 0;
                for (int i = 1; i < 4; i++) if (top[i].est < top[slot].est) slot = i;
                if (top[slot].est >= est) slot = -1;
            }
            if (slot >= 0) { memcpy(top[slot].keep, keep, (size_t)L); top[slot].est = est; }
        }
        if (est > best_est) { best_est = est; best_n = n; memcpy(best_keep, keep, (size_t)L); }
        if (ag < 0.2) break;
    }
    free(order);
    (void)best_n;

    /* measure the candidates for real */
    double best_meas = 0;
    for (int i = 0; i < n_top; i++) {
        double m = measure(&e, top[i].keep, c, nc, tokens, &err);
        if (m < 0) goto done;
        char ls[512];
        layers_string(top[i].keep, L, ls, sizeof ls);
        fprintf(stderr, "tune-self: measured %s: %.2fx (estimated %.2fx)\n", ls, m, top[i].est);
        if (m > best_meas) { best_meas = m; memcpy(best_keep, top[i].keep, (size_t)L); }
    }
    char ls[512];
    layers_string(best_keep, L, ls, sizeof ls);
    if (n_top == 0) {
        printf("tune-self: %s: no layer subset is estimated to beat plain decoding; keeping the built-in default\n",
               e.model->name);
        rc = 0;
        goto done;
    }
    printf("tune-self: %s: best --self-layers %s, measured speedup %.2fx on %d prompts\n", e.model->name, ls,
           best_meas, nc);
    if (save) {
        char path[4096];
        sp_self_cache_path(e.model, path, sizeof path);
        FILE *f = fopen(path, "w");
        if (!f) { sp_err_set(&err, "cannot write %s", path); goto done; }
        fprintf(f, "%s\n", ls);
        fclose(f);
        printf("tune-self: saved to %s (the default of --spec self for this model)\n", path);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "specula tune-self: %s\n", err.msg);
    for (int i = 0; i < nc; i++) sp_tokens_free(&c[i].seq);
    free(c);
    free(keep); free(skip); free(best_keep);
    sp_free_aligned(logits);
    sp_workspace_free(ws);
    sp_engine_close(&e);
    return rc;
}

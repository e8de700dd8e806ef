/* Model names, paths, and opening a model with its batch-engine context. */
#include "cli/cli.h"
#include "cli/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name, *file, *self_layers; } sp_known_models[] = {
    /* self layers: from `specula tune-self` (BENCHMARKS.md).  On these small
     * models no subset beats plain decoding (a draft pass still pays the
     * embedding and LM head), so these are the subsets that keep agreement
     * high (0.76 / 0.95) while saving 9-13% of a pass; the adaptive draft
     * length then falls back to plain steps when they do not pay. */
    { "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", "0-8,11-25,27-29" },
    { "gemma3-270m", "gemma-3-270m-q4_k_m.gguf", "0-1,3-11,14-17" },
};

const char *sp_default_model(void) { return "smollm2-135m"; }

int sp_resolve_model(const char *arg, char *buf, size_t cap, sp_err *err) {
    struct stat st;
    for (size_t i = 0; i < sizeof sp_known_models / sizeof *sp_known_models; i++) {
        if (strcmp(arg, sp_known_models[i].name) != 0) continue;
        char dir[3072];
        if (sp_cache_dir("models", dir, sizeof dir, err)) return -1;
        snprintf(buf, cap, "%s/%s", dir, sp_known_models[i].file);
        if (stat(buf, &st) != 0)
            return sp_err_set(err, "model '%s' is not downloaded (expected %s); fetch it with: "
                              "scripts/fetch-models.sh %s", arg, buf, arg);
        return 0;
    }
    snprintf(buf, cap, "%s", arg);
    if (stat(buf, &st) != 0)
        return sp_err_set(err, "model '%s': no such file, and not a known model name (known: "
                          "smollm2-135m, gemma3-270m)", arg);
    if (!S_ISREG(st.st_mode)) return sp_err_set(err, "model '%s' is not a regular file", arg);
    return 0;
}

int sp_engine_open(const sp_engine_opts *o, sp_engine *e, sp_err *err) {
    memset(e, 0, sizeof *e);
    char path[4096];
    if (sp_resolve_model(o->model ? o->model : sp_default_model(), path, sizeof path, err))
        return -1;
    e->model = sp_model_load_with(path, sp_cli_model_opts(), err);
    if (!e->model) return -1;
    e->tok = sp_tokenizer_load(e->model->gguf, err);
    if (!e->tok) { sp_err_prefix(err, "%s", path); sp_engine_close(e); return -1; }
    if (sp_tokenizer_n_vocab(e->tok) > e->model->hp.n_vocab) {
        sp_err_set(err, "%s: tokenizer has %d tokens but the embedding only %d", path,
                   sp_tokenizer_n_vocab(e->tok), e->model->hp.n_vocab);
        sp_engine_close(e);
        return -1;
    }
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_slots = o->slots > 0 ? o->slots : 1;
    cp.n_ctx = o->ctx;
    cp.batch_rows = o->batch;
    cp.threads = o->threads;
    cp.cost_dir = sp_cost_cache_dir();
    cp.cache_bytes = o->cache_mib < 0 ? SIZE_MAX : (size_t)o->cache_mib << 20;
    cp.kv_types = o->kv;
    cp.no_gate = o->no_spec_gate;
    if (!cp.kv_types.k) cp.kv_types.k = SP_F16;      /* zeroed options: SP_F32 is 0 */
    if (!cp.kv_types.v) cp.kv_types.v = SP_F16;
    if (!(e->ctx = sp_ctx_create(e->model, e->tok, &cp, err))) { sp_engine_close(e); return -1; }
    e->threads = sp_ctx_threads(e->ctx);
    e->n_ctx = sp_ctx_n_ctx(e->ctx);
    e->pool = sp_ctx_pool(e->ctx);
    e->ws = sp_ctx_workspace(e->ctx);
    return 0;
}

void sp_engine_close(sp_engine *e) {
    sp_ctx_free(e->ctx);
    sp_tokenizer_free(e->tok);
    sp_model_free(e->model);
    memset(e, 0, sizeof *e);
}

void sp_self_cache_path(const sp_model *m, char *buf, size_t cap) {
    char dir[3072];
    sp_err err;
    buf[0] = 0;                  /* no directory: nothing saved or read */
    if (sp_cache_dir("self", dir, sizeof dir, &err)) return;
    const char *base = strrchr(m->path, '/');
    snprintf(buf, cap, "%s/%s.layers", dir, base ? base + 1 : m->path);
}

/* Layers --spec self keeps when --self-layers is not given: what tune-self
 * saved for this model, else the subset tune-self found for the known
 * models (see BENCHMARKS.md), else the spec layer's default. */
static const char *self_default(const sp_model *m, char *buf, size_t cap) {
    char path[4096];
    sp_self_cache_path(m, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f) {
        bool ok = fgets(buf, (int)cap, f) != NULL;
        fclose(f);
        if (ok) {
            buf[strcspn(buf, "\r\n")] = 0;
            if (*buf) return buf;
        }
    }
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    for (size_t i = 0; i < sizeof sp_known_models / sizeof *sp_known_models; i++)
        if (!strcmp(base, sp_known_models[i].file) && sp_known_models[i].self_layers)
            return sp_known_models[i].self_layers;
    return NULL;
}

/* The shipped head for a model (drafters/<name>.eagle3.gguf, found by the
 * model's file name): in $SPECULA_DRAFTERS, beside the source tree the
 * binary was built in (build/<kind>/specula -> drafters/), or where make
 * install put it (PREFIX/bin/specula -> PREFIX/share/specula/drafters). */
static const char *default_head(const sp_model *m, char *buf, size_t cap) {
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    const char *name = NULL;
    for (size_t i = 0; i < sizeof sp_known_models / sizeof *sp_known_models; i++)
        if (!strcmp(base, sp_known_models[i].file)) name = sp_known_models[i].name;
    if (!name) return NULL;
    char exe[2048], dirs[3][2100];
    int nd = 0;
    const char *env = getenv("SPECULA_DRAFTERS");
    if (env && *env) snprintf(dirs[nd++], sizeof dirs[0], "%.2000s", env);
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(dirs[nd++], sizeof dirs[0], "%.2000s/../../drafters", exe);
        snprintf(dirs[nd++], sizeof dirs[0], "%.2000s/../share/specula/drafters", exe);
    }
    struct stat st;
    for (int i = 0; i < nd; i++) {
        snprintf(buf, cap, "%.2100s/%.64s.eagle3.gguf", dirs[i], name);
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode)) return buf;
    }
    return NULL;
}

const char *sp_engine_head(const sp_engine *e, const sp_spec_cli *o, char *buf, size_t cap) {
    return o->d.draft_head ? o->d.draft_head : default_head(e->model, buf, cap);
}

sp_drafter *sp_engine_drafter(const sp_engine *e, const char *method, const sp_spec_cli *o, sp_err *err) {
    sp_drafter_opts d = o->d;
    char path[4096], layers[1024], head[4096];
    if (!d.self_layers) d.self_layers = self_default(e->model, layers, sizeof layers);
    if (!d.draft_head) d.draft_head = default_head(e->model, head, sizeof head);
    if (o->draft_model) {
        if (sp_resolve_model(o->draft_model, path, sizeof path, err)) return NULL;
        d.draft_model = path;
    }
    d.target = e->model;
    d.pool = e->pool;
    if (!d.dm.n_ctx) d.dm.n_ctx = e->n_ctx;
    return sp_drafter_create(method, &d, err);
}

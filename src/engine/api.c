/* The public API (include/specula.h): opaque handles over the engine's
 * internal types.  Nothing here decides policy: paths, threads and cache
 * directories come from the caller's parameters. */
#include "specula.h"

#include "cache/cache.h"
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct specula_model {
    sp_model *m;
    sp_tokenizer *tok;
};

/* What the token-callback adapter needs of each slot. */
typedef struct api_seq {
    specula_token_fn fn;
    void *ud;
    sp_grammar *grammar;             /* owned: compiled from the params' text */
} api_seq;

struct specula_ctx {
    specula_model *model;            /* borrowed */
    sp_ctx *ctx;
    api_seq *seqs;                   /* (n_slots) */
};

struct specula_drafter {
    sp_drafter *d;
};

int specula_api_version(void) { return SPECULA_API_VERSION; }

static void set_err(specula_error *e, const sp_err *src) {
    if (e) snprintf(e->message, sizeof e->message, "%s", src->msg);
}

/* ----------------------------------------------------------------------------
 * Models and tokens
 * ------------------------------------------------------------------------- */

specula_model_params specula_model_default_params(void) {
    return (specula_model_params){ .pack_weights = true };
}

specula_model *specula_model_load(const char *path, const specula_model_params *p, specula_error *err) {
    const specula_model_params mp = p ? *p : specula_model_default_params();
    sp_err e;
    sp_model_load_opts lo = sp_model_load_default_opts();
    lo.pack = mp.pack_weights;
    sp_model *m = sp_model_load_with(path, &lo, &e);
    if (!m) { set_err(err, &e); return NULL; }
    sp_tokenizer *tok = sp_tokenizer_load(m->gguf, &e);
    if (tok && sp_tokenizer_n_vocab(tok) > m->hp.n_vocab) {
        sp_err_set(&e, "%s: the tokenizer has %d tokens but the embedding only %d", path,
                   sp_tokenizer_n_vocab(tok), m->hp.n_vocab);
        sp_tokenizer_free(tok);
        tok = NULL;
    }
    if (!tok) { set_err(err, &e); sp_model_free(m); return NULL; }
    specula_model *r = sp_xcalloc(1, sizeof *r);
    r->m = m;
    r->tok = tok;
    return r;
}

void specula_model_free(specula_model *m) {
    if (!m) return;
    sp_tokenizer_free(m->tok);
    sp_model_free(m->m);
    free(m);
}

const char *specula_model_name(const specula_model *m) { return m->m->name; }
int specula_model_n_vocab(const specula_model *m) { return m->m->hp.n_vocab; }
int specula_model_n_ctx_train(const specula_model *m) { return m->m->hp.n_ctx_train; }
bool specula_token_is_eog(const specula_model *m, int32_t t) { return sp_tokenizer_is_eog(m->tok, t); }

int specula_tokenize(const specula_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                     int32_t *out, int cap, specula_error *err) {
    sp_tokens t = { 0 };
    sp_err e;
    if (sp_tokenize(m->tok, text, len, add_bos && sp_tokenizer_add_bos(m->tok), parse_special, &t, &e)) {
        set_err(err, &e);
        return -1;
    }
    const int n = t.n;
    if (cap > 0) memcpy(out, t.ids, (size_t)(n < cap ? n : cap) * sizeof *out);
    sp_tokens_free(&t);
    return n;
}

int specula_detokenize(const specula_model *m, const int32_t *tokens, int n, bool render_special, char *buf,
                       size_t cap, specula_error *err) {
    const int V = sp_tokenizer_n_vocab(m->tok);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            sp_err e;
            sp_err_set(&e, "detokenize: token %d out of range [0, %d)", tokens[i], V);
            set_err(err, &e);
            return -1;
        }
        const size_t room = len + 1 < cap ? cap - 1 - len : 0;
        len += sp_token_piece(m->tok, tokens[i], render_special, room ? buf + len : NULL, room);
    }
    if (cap) buf[len < cap ? len : cap - 1] = 0;
    return len > (size_t)INT32_MAX ? -1 : (int)len;
}

int specula_chat_apply(const specula_model *m, const specula_chat_message *msgs, int n, bool add_assistant,
                       char *buf, size_t cap, specula_error *err) {
    sp_err e;
    sp_chat_tmpl *ct = NULL;
    const int found = sp_chat_tmpl_for_model(m->m->gguf, m->tok, NULL, NULL, NULL, &ct, &e);
    if (found || !ct) {
        if (!found) sp_err_set(&e, "the model has no chat template");
        set_err(err, &e);
        return -1;
    }
    sp_chat_msg *cm = sp_xcalloc(n > 0 ? (size_t)n : 1, sizeof *cm);
    for (int i = 0; i < n; i++) cm[i] = (sp_chat_msg){ msgs[i].role, msgs[i].content };
    char *text = NULL;
    const int rc = sp_chat_render(ct, cm, n, add_assistant, &text, &e);
    free(cm);
    sp_chat_tmpl_free(ct);
    if (rc) { set_err(err, &e); return -1; }
    const size_t len = strlen(text);
    if (cap) snprintf(buf, cap, "%s", text);
    free(text);
    return (int)len;
}

/* ----------------------------------------------------------------------------
 * Contexts
 * ------------------------------------------------------------------------- */

specula_ctx_params specula_ctx_default_params(void) {
    const sp_ctx_params p = sp_ctx_default_params();
    return (specula_ctx_params){ .n_slots = p.n_slots, .n_ctx = p.n_ctx, .batch_rows = p.batch_rows };
}

specula_ctx *specula_ctx_create(specula_model *m, const specula_ctx_params *p, specula_error *err) {
    const specula_ctx_params cp = p ? *p : specula_ctx_default_params();
    sp_ctx_params ip = sp_ctx_default_params();
    ip.n_slots = cp.n_slots;
    ip.n_ctx = cp.n_ctx;
    ip.batch_rows = cp.batch_rows;
    ip.threads = cp.n_threads;
    ip.cost_dir = cp.cost_cache_dir;
    ip.cache_bytes = cp.cache_bytes;
    ip.no_gate = cp.no_spec_gate;
    sp_err e;
    sp_ctx *c = sp_ctx_create(m->m, m->tok, &ip, &e);
    if (!c) { set_err(err, &e); return NULL; }
    specula_ctx *r = sp_xcalloc(1, sizeof *r);
    r->model = m;
    r->ctx = c;
    r->seqs = sp_xcalloc((size_t)sp_ctx_n_slots(c), sizeof *r->seqs);
    return r;
}

int specula_cache_save(const specula_ctx *c, const char *path, specula_error *err) {
    sp_err e;
    const sp_pcache *pc = sp_ctx_cache(c->ctx);
    if (!pc || sp_pcache_save(pc, path, &e)) {
        if (!pc) sp_err_set(&e, "the context has no prefix cache (cache_bytes is 0)");
        set_err(err, &e);
        return -1;
    }
    return 0;
}

int specula_cache_load(specula_ctx *c, const char *path, specula_error *err) {
    sp_err e;
    sp_pcache *pc = sp_ctx_cache(c->ctx);
    if (!pc || sp_pcache_load_file(pc, path, c->model->m->hp.n_vocab, &e)) {
        if (!pc) sp_err_set(&e, "the context has no prefix cache (cache_bytes is 0)");
        set_err(err, &e);
        return -1;
    }
    return 0;
}

void specula_ctx_free(specula_ctx *c) {
    if (!c) return;
    sp_ctx_free(c->ctx);
    free(c->seqs);
    free(c);
}

/* ----------------------------------------------------------------------------
 * Drafters
 * ------------------------------------------------------------------------- */

specula_drafter_params specula_drafter_default_params(void) {
    return (specula_drafter_params){ .method = "ngram" };
}

specula_drafter *specula_drafter_create(specula_ctx *c, const specula_drafter_params *p, specula_error *err) {
    sp_err e;
    if (!p || !p->method || sp_drafter_check_name(p->method, &e)) {
        if (!p || !p->method) sp_err_set(&e, "drafter: no method given");
        set_err(err, &e);
        return NULL;
    }
    sp_drafter_opts o = { .ngram_min = p->ngram_min, .ngram_max = p->ngram_max, .tree_width = p->tree_width,
                          .draft_model = p->draft_model, .target = sp_ctx_model(c->ctx),
                          .self_layers = p->self_layers, .pool = sp_ctx_pool(c->ctx) };
    o.dm.n_ctx = sp_ctx_n_ctx(c->ctx);
    o.dm.sample = p->draft_sample;
    sp_drafter *d = sp_drafter_create(p->method, &o, &e);
    if (!d) { set_err(err, &e); return NULL; }
    specula_drafter *r = sp_xcalloc(1, sizeof *r);
    r->d = d;
    return r;
}

void specula_drafter_free(specula_drafter *d) {
    if (!d) return;
    sp_drafter_free(d->d);
    free(d);
}

const char *specula_drafter_name(const specula_drafter *d) { return d->d->name; }

/* ----------------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------------- */

specula_seq_params specula_seq_default_params(void) {
    const sp_seq_params d = sp_seq_default_params();
    const sp_sampler_params s = d.sampling;
    return (specula_seq_params){
        .max_tokens = d.max_tokens,
        .sampling = { .temperature = s.temperature, .top_k = s.top_k, .top_p = s.top_p, .min_p = s.min_p,
                      .repeat_penalty = s.repeat_penalty, .presence_penalty = s.presence_penalty,
                      .frequency_penalty = s.frequency_penalty, .repeat_last_n = s.repeat_last_n,
                      .seed = s.seed },
        .draft_max = SPECULA_DRAFT_ADAPTIVE,
        .forced_spans = -1,
        .cache_prompt = d.use_cache,
    };
}

long specula_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap, specula_error *err) {
    sp_err e;
    char *g = sp_schema_to_gbnf(schema, len, &e);
    if (!g) {
        set_err(err, &e);
        return -1;
    }
    const size_t n = strlen(g);
    if (cap) {
        const size_t w = n < cap - 1 ? n : cap - 1;
        memcpy(buf, g, w);
        buf[w] = 0;
    }
    free(g);
    return (long)n;
}

const char *specula_finish_name(specula_finish f) { return sp_finish_name((sp_finish)f); }

/* The adapter between the engine's emit callback and the public one. */
static sp_emit_result on_emit(void *ud, int32_t token, bool drafted, const float *logits) {
    (void)logits;
    const api_seq *s = ud;
    return s->fn(s->ud, token, drafted) ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

/* The public enum mirrors sp_finish value for value. */
_Static_assert((int)SPECULA_FINISH_ERROR == (int)SP_FINISH_ERROR, "finish reasons diverged");
_Static_assert((int)SPECULA_FINISH_CANCELLED == (int)SP_FINISH_CANCELLED, "finish reasons diverged");
_Static_assert((int)SPECULA_DRAFT_ADAPTIVE == (int)SP_DRAFT_ADAPTIVE, "adaptive marker diverged");
_Static_assert(sizeof(specula_logit_bias) == sizeof(sp_logit_bias), "logit bias layouts diverged");

int specula_seq_add(specula_ctx *c, const specula_seq_params *p, specula_error *err) {
    sp_err e;
    if (!p->on_token) {
        sp_err_set(&e, "sequence: on_token is required");
        set_err(err, &e);
        return -1;
    }
    int free_id = 0;                 /* sp_ctx_add takes the lowest free slot */
    while (free_id < sp_ctx_n_slots(c->ctx) && c->seqs[free_id].fn) free_id++;
    if (free_id == sp_ctx_n_slots(c->ctx)) {
        sp_err_set(&e, "no free slot (%d sequences running)", sp_ctx_n_slots(c->ctx));
        set_err(err, &e);
        return -1;
    }
    const specula_sampling *s = &p->sampling;
    sp_seq_params q = sp_seq_default_params();
    q.prompt = p->prompt;
    q.n_prompt = p->n_prompt;
    q.max_tokens = p->max_tokens;
    q.sampling = (sp_sampler_params){ .temperature = s->temperature, .top_k = s->top_k, .top_p = s->top_p,
                                      .min_p = s->min_p, .repeat_penalty = s->repeat_penalty,
                                      .presence_penalty = s->presence_penalty,
                                      .frequency_penalty = s->frequency_penalty,
                                      .repeat_last_n = s->repeat_last_n, .seed = s->seed,
                                      .bias = (const sp_logit_bias *)s->bias, .n_bias = s->n_bias };
    q.penalize_prompt = p->penalize_prompt;
    q.drafter = p->drafter ? p->drafter->d : NULL;
    q.draft_max = p->draft_max;
    sp_grammar *g = NULL;
    if (p->grammar && !(g = sp_grammar_parse(p->grammar, strlen(p->grammar), &e))) {
        set_err(err, &e);
        return -1;
    }
    q.grammar = g;
    q.grammar_trigger = p->grammar_trigger;
    q.forced_spans = p->forced_spans < 0 ? p->drafter != NULL : p->forced_spans != 0;
    q.use_cache = p->cache_prompt;
    q.emit = on_emit;
    q.ud = &c->seqs[free_id];
    c->seqs[free_id] = (api_seq){ p->on_token, p->user_data, g };
    const int id = sp_ctx_add(c->ctx, &q, &e);
    if (id < 0) {
        sp_grammar_free(g);
        c->seqs[free_id] = (api_seq){ 0 };
        set_err(err, &e);
        return -1;
    }
    if (id != free_id) abort();      /* both take the lowest free slot */
    return id;
}

int specula_step(specula_ctx *c) { return sp_ctx_step(c->ctx); }
void specula_seq_cancel(specula_ctx *c, int id) { sp_ctx_cancel(c->ctx, id); }

void specula_seq_remove(specula_ctx *c, int id) {
    sp_ctx_remove(c->ctx, id);
    sp_grammar_free(c->seqs[id].grammar);
    c->seqs[id] = (api_seq){ 0 };
}

specula_finish specula_seq_finish(const specula_ctx *c, int id) {
    return (specula_finish)sp_ctx_seq_finish(c->ctx, id);
}

void specula_seq_stats(const specula_ctx *c, int id, specula_stats *out) {
    const sp_spec_stats *s = sp_ctx_seq_stats(c->ctx, id);
    *out = (specula_stats){ .n_prompt = s->n_prompt, .n_cached = s->n_cached, .n_generated = s->emitted,
                            .rounds = s->rounds,
                            .drafted = s->drafted, .accepted = s->accepted,
                            .forced_drafted = s->forced_drafted, .forced_accepted = s->forced_accepted,
                            .prefill_seconds = sp_ns_to_s(s->prefill_ns),
                            .decode_seconds = sp_ns_to_s(s->total_ns) };
}

const char *specula_seq_error(const specula_ctx *c, int id) { return sp_ctx_seq_error(c->ctx, id); }

int specula_generate(specula_ctx *c, const specula_seq_params *p, specula_stats *stats, specula_finish *finish,
                     specula_error *err) {
    const int id = specula_seq_add(c, p, err);
    if (id < 0) return -1;
    while (specula_seq_finish(c, id) == SPECULA_FINISH_NONE) specula_step(c);
    const specula_finish f = specula_seq_finish(c, id);
    if (stats) specula_seq_stats(c, id, stats);
    if (finish) *finish = f;
    int rc = 0;
    if (f == SPECULA_FINISH_ERROR) {
        if (err) snprintf(err->message, sizeof err->message, "%s", specula_seq_error(c, id));
        rc = -1;
    }
    specula_seq_remove(c, id);
    return rc;
}

/* The server's sampling defaults (what a request that omits a field gets)
 * and GET /props, in llama-server's shape.
 *
 * Precedence, per field: the `serve` flag, else the model file's
 * `general.sampling.*` key (llama.cpp's names: temp, top_k, top_p, min_p,
 * penalty_repeat, penalty_last_n), else llama.cpp's defaults (temperature
 * 0.8, top-k 40, top-p 0.95, min-p 0.05, no repeat penalty).  OpenAI's own
 * default, temperature 1 with every filter off, is not used: on the small
 * models this engine serves it samples from the whole tail and gives
 * gibberish. */
#include "serve/internal.h"

#include <math.h>
#include <stdio.h>

sp_sampler_params sp_serve_sampling_defaults(void) {
    sp_sampler_params p = sp_sampler_defaults();
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = -1;            /* OpenAI penalties see every generated token */
    return p;
}

/* One key: 1 applied, 0 absent, -1 present but unusable (a warning). */
static int hint_f32(const sp_gguf *g, const char *key, float lo, float hi, float *out, char *warn, size_t cap) {
    float v;
    sp_err e;
    const int rc = sp_gguf_get_f32(g, key, &v, &e);
    if (rc == 0) return 0;
    if (rc < 0 || !isfinite(v) || v < lo || v > hi) {
        snprintf(warn, cap, "%s is not a number in [%g, %g]: ignored", key, (double)lo, (double)hi);
        return -1;
    }
    *out = v;
    return 1;
}

static int hint_i64(const sp_gguf *g, const char *key, int64_t lo, int64_t hi, int *out, char *warn, size_t cap) {
    int64_t v;
    sp_err e;
    const int rc = sp_gguf_get_i64(g, key, &v, &e);
    if (rc == 0) return 0;
    if (rc < 0 || v < lo || v > hi) {
        snprintf(warn, cap, "%s is not an integer in [%lld, %lld]: ignored", key, (long long)lo, (long long)hi);
        return -1;
    }
    *out = (int)v;
    return 1;
}

int sp_serve_sampling_from_gguf(const sp_gguf *g, sp_sampler_params *p, char *warn, size_t cap) {
    warn[0] = 0;
    int bad = 0;
    bad |= hint_f32(g, "general.sampling.temp", 0, 100, &p->temperature, warn, cap) < 0;
    bad |= hint_i64(g, "general.sampling.top_k", 0, 1 << 24, &p->top_k, warn, cap) < 0;
    bad |= hint_f32(g, "general.sampling.top_p", 1e-6f, 1, &p->top_p, warn, cap) < 0;
    bad |= hint_f32(g, "general.sampling.min_p", 0, 1, &p->min_p, warn, cap) < 0;
    bad |= hint_f32(g, "general.sampling.penalty_repeat", 0.01f, 100, &p->repeat_penalty, warn, cap) < 0;
    bad |= hint_i64(g, "general.sampling.penalty_last_n", -1, 1 << 24, &p->repeat_last_n, warn, cap) < 0;
    return bad ? -1 : 0;
}

json_t *sp_serve_props(const sp_server_opts *o, int n_ctx, int n_slots, const char *chat_template) {
    const sp_sampler_params *p = &o->sampling;
    json_t *params = json_object();
    json_object_set_new(params, "temperature", json_real(p->temperature));
    json_object_set_new(params, "top_k", json_integer(p->top_k));
    json_object_set_new(params, "top_p", json_real(p->top_p));
    json_object_set_new(params, "min_p", json_real(p->min_p));
    json_object_set_new(params, "repeat_penalty", json_real(p->repeat_penalty));
    json_object_set_new(params, "repeat_last_n", json_integer(p->repeat_last_n));
    json_object_set_new(params, "presence_penalty", json_real(p->presence_penalty));
    json_object_set_new(params, "frequency_penalty", json_real(p->frequency_penalty));
    json_object_set_new(params, "seed", o->seed_set ? json_integer((json_int_t)p->seed) : json_integer(-1));
    json_object_set_new(params, "n_predict", json_integer(-1));   /* max_tokens omitted: up to the context */
    json_t *gen = json_object();
    json_object_set_new(gen, "n_ctx", json_integer(n_ctx));
    json_object_set_new(gen, "params", params);
    json_t *spec = json_object();
    json_object_set_new(spec, "method", json_string(o->spec_default));
    json_object_set_new(spec, "draft_max",
                        o->draft_max_default == SP_DRAFT_ADAPTIVE ? json_string("adaptive")
                                                                  : json_integer(o->draft_max_default));
    json_t *r = json_object();
    json_object_set_new(r, "default_generation_settings", gen);
    json_object_set_new(r, "total_slots", json_integer(n_slots));
    json_object_set_new(r, "model_alias", json_string(o->model_id));
    json_object_set_new(r, "chat_template", json_string(chat_template ? chat_template : ""));
    json_object_set_new(r, "build_info", json_string("specula"));
    json_object_set_new(r, "speculative", spec);
    return r;
}

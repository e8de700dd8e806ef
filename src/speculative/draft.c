/* The drafter seam: generic entry points, capability checks, checkpoint
 * namespaces, and creation by name. */
#include "speculative/speculative.h"

#include <assert.h>
#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_caps_describe(uint32_t caps, char *buf, size_t cap) {
    static const char *const names[] = { "shared embeddings", "hidden-state taps",
                                         "anchor hidden state", "layer KV access",
                                         "its tokenizer", "the request's sampling parameters" };
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < 6; i++)
        if (caps & (1u << i))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", names[i]);
    if (!n) snprintf(buf, cap, "none");
    return buf;
}

/* This engine's forward pass exposes the embeddings and LM head (plain
 * matrices of the model) and hidden-state taps at any layer boundary. */
sp_target sp_target_of(const sp_model *m) {
    return (sp_target){ .model = m, .caps = SP_CAP_SHARED_EMBED | SP_CAP_HIDDEN_TAPS };
}

sp_target sp_target_full(const sp_model *m, const sp_tokenizer *tok, const sp_sampler_params *sampling) {
    sp_target t = sp_target_of(m);
    t.tok = tok;
    t.sampling = sampling;
    if (tok) t.caps |= SP_CAP_TOKENIZER;
    if (sampling) t.caps |= SP_CAP_SAMPLING;
    return t;
}

sp_draft *sp_draft_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    uint32_t missing = d->needs & ~t->caps;
    if (!missing && (d->needs & SP_CAP_HIDDEN_TAPS)) {
        if (d->n_taps < 1 || d->n_taps > SP_MAX_TAPS) {
            sp_err_set(err, "drafter '%s' asks for %d tap layers (1 to %d)", d->name, d->n_taps, SP_MAX_TAPS);
            return NULL;
        }
        for (int i = 0; i < d->n_taps; i++)
            if (d->tap_layers[i] < 0 || d->tap_layers[i] > t->model->hp.n_layer) {
                sp_err_set(err, "drafter '%s' taps layer %d; the target has layers 0..%d", d->name,
                           d->tap_layers[i], t->model->hp.n_layer);
                return NULL;
            }
    }
    if (missing) {
        char need[128], have[128];
        sp_err_set(err, "drafter '%s' needs %s from the target, which offers only %s", d->name,
                   sp_caps_describe(missing, need, sizeof need),
                   sp_caps_describe(t->caps, have, sizeof have));
        return NULL;
    }
    return d->ops->open(d, t, err);
}

/* The checks every proposal passes, whoever made it. */
static int check_proposal(const sp_draft *s, int max_n, sp_proposal *out, sp_err *err) {
    const char *name = s->drafter->name;
    if (out->n < 0 || out->n > max_n)
        return sp_err_set(err, "drafter '%s' proposed %d tokens, at most %d allowed", name, out->n, max_n);
    for (int i = 0; out->parent && i < out->n; i++)
        if (out->parent[i] < -1 || out->parent[i] >= i)
            return sp_err_set(err, "drafter '%s' proposed a malformed tree", name);
    if (out->parent && out->q)
        return sp_err_set(err, "drafter '%s': trees with draft distributions are not supported", name);
    if (!out->by) out->by = name;
    return 0;
}

int sp_draft_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out,
                     sp_err *err) {
    *out = (sp_proposal){ 0 };
    if (s->drafter->ops->propose(s, feed, n_feed, max_n, out, err)) return -1;
    return check_proposal(s, max_n, out, err);
}

int sp_draft_propose_group(sp_draft **s, const int32_t *const *feed, const int *n_feed, const int *max_n,
                           sp_proposal *out, int n, sp_err *err) {
    assert(n > 0 && s[0]->drafter->ops->propose_group);
    for (int i = 0; i < n; i++) {
        assert(s[i]->drafter == s[0]->drafter);
        out[i] = (sp_proposal){ 0 };
    }
    if (s[0]->drafter->ops->propose_group(s, feed, n_feed, max_n, out, n, err)) return -1;
    for (int i = 0; i < n; i++)
        if (check_proposal(s[i], max_n[i], &out[i], err)) return -1;
    return 0;
}

int sp_draft_propose_ahead(sp_draft *s, const int32_t *feed, int n_feed, const int32_t *ahead, int n_ahead,
                           int max_n, sp_proposal *out, sp_err *err) {
    const char *name = s->drafter->name;
    assert(s->drafter->ops->propose_ahead && n_ahead > 0 && n_ahead + max_n <= SP_MAX_DRAFT);
    *out = (sp_proposal){ 0 };
    if (s->drafter->ops->propose_ahead(s, feed, n_feed, ahead, n_ahead, max_n, out, err)) return -1;
    if (out->n < 0 || out->n > max_n)
        return sp_err_set(err, "drafter '%s' proposed %d tokens, at most %d allowed", name, out->n, max_n);
    if (out->parent) return sp_err_set(err, "drafter '%s' proposed a tree after a forced span", name);
    if (!out->by) out->by = name;
    return 0;
}

void sp_draft_close(sp_draft *s) {
    if (s) s->drafter->ops->close(s);
}

sp_drafter *sp_drafter_alloc(void) {
    static atomic_uint_fast64_t next = 1;
    sp_drafter *d = sp_xcalloc(1, sizeof *d);
    d->serial = (uint64_t)atomic_fetch_add(&next, 1);
    return d;
}

void sp_drafter_free(sp_drafter *d) {
    if (d) d->ops->free(d);
}

int sp_draft_checkpoint(sp_draft *s, uint8_t **buf, size_t *len, sp_err *err) {
    return s->drafter->ops->checkpoint(s, buf, len, err);
}

int sp_draft_restore(sp_draft *s, const uint8_t *buf, size_t len, sp_err *err) {
    return s->drafter->ops->restore(s, buf, len, err);
}

size_t sp_ckpt_header(const sp_drafter *d, uint8_t *buf, size_t cap) {
    size_t n = strlen(d->ns) + 1;
    if (buf && cap >= n) {
        memcpy(buf, d->ns, n - 1);
        buf[n - 1] = '\n';
    }
    return n;
}

long sp_ckpt_check(const sp_drafter *d, const uint8_t *buf, size_t len, sp_err *err) {
    size_t n = strlen(d->ns);
    const uint8_t *nl = memchr(buf, '\n', len < 256 ? len : 256);
    if (!nl) return sp_err_set(err, "checkpoint: no namespace header");
    if ((size_t)(nl - buf) != n || memcmp(buf, d->ns, n) != 0)
        return sp_err_set(err, "checkpoint namespace '%.*s' does not match drafter '%s'",
                          (int)(nl - buf), (const char *)buf, d->ns);
    return (long)n + 1;
}

int32_t sp_draft_sample(sp_sampler *smp, const float *logits, const int32_t *map, float *q, int n_vocab,
                        uint64_t key, uint64_t pos, float *top) {
    int nc;
    const sp_cand *c = sp_sampler_dist(smp, logits, &nc);
    memset(q, 0, (size_t)n_vocab * sizeof(float));
    float best = 0;
    for (int j = 0; j < nc; j++) {
        q[map ? map[c[j].id] : c[j].id] = c[j].p;
        if (c[j].p > best) best = c[j].p;
    }
    if (top) *top = best;
    const uint64_t seed = sp_sampler_params_of(smp)->seed;
    const int32_t id = sp_cand_pick(c, nc, sp_rng_uniform(seed ^ key, pos, 3));
    return map ? map[id] : id;
}

/* ----------------------------------------------------------------------------
 * Creation by name: one table of the drafters this build has
 * ------------------------------------------------------------------------- */

static sp_drafter *create_ngram(const sp_drafter_opts *o, sp_err *err) {
    return sp_ngram_create_tree(o->ngram_min ? o->ngram_min : 1, o->ngram_max ? o->ngram_max : 3,
                                o->tree_width ? o->tree_width : 1, err);
}

static sp_drafter *create_suffix(const sp_drafter_opts *o, sp_err *err) {
    sp_suffix_opts so = sp_suffix_defaults();
    if (o->suffix_factor) so.factor = o->suffix_factor;
    if (o->suffix_min_prob) so.min_prob = o->suffix_min_prob;
    if (o->suffix_max_depth) so.max_depth = o->suffix_max_depth;
    if (o->tree_width) so.tree_width = o->tree_width;
    return sp_suffix_create(&so, err);
}

static sp_drafter *create_draft(const sp_drafter_opts *o, sp_err *err) {
    if (!o->draft_model) {
        sp_err_set(err, "method 'draft' needs a draft model (--draft-model PATH|NAME)");
        return NULL;
    }
    return sp_draft_model_create(o->draft_model, &o->dm, o->pool, err);
}

static sp_drafter *create_self(const sp_drafter_opts *o, sp_err *err) {
    if (!o->target) {
        sp_err_set(err, "method 'self' needs the target model");
        return NULL;
    }
    const int L = o->target->hp.n_layer;
    uint8_t *keep = sp_xmalloc((size_t)L), *skip = sp_xmalloc((size_t)L);
    sp_drafter *d = NULL;
    if (o->self_layers) {
        if (sp_parse_index_list(o->self_layers, L, false, keep, err)) {
            sp_err_prefix(err, "self: layers '%s'", o->self_layers);
            goto out;
        }
    } else {
        sp_self_default_layers(o->target, keep);
    }
    for (int il = 0; il < L; il++) skip[il] = !keep[il];
    d = sp_self_create(o->target, skip, &o->dm, o->pool, err);
out:
    free(keep);
    free(skip);
    return d;
}

static sp_drafter *create_eagle(const sp_drafter_opts *o, sp_err *err) {
    if (!o->draft_head || !o->target) {
        sp_err_set(err, "method 'eagle' needs a draft head (--draft-head PATH; heads for smollm2-135m and "
                   "gemma3-270m ship in drafters/, others are made with specula train-draft)");
        return NULL;
    }
    const sp_eagle_opts eo = { .n_ctx = o->dm.n_ctx, .min_prob = o->dm.min_prob_set ? o->dm.min_prob : -1,
                               .tree_width = o->tree_width, .sample = o->dm.sample };
    return sp_eagle_create(o->draft_head, o->target, &eo, o->pool, err);
}

static const struct {
    const char *name;
    sp_drafter *(*create)(const sp_drafter_opts *o, sp_err *err);
} drafters[] = {
    { "ngram", create_ngram },
    { "suffix", create_suffix },
    { "draft", create_draft },
    { "self", create_self },
    { "eagle", create_eagle },
};
#define N_DRAFTERS (sizeof drafters / sizeof *drafters)

/* The table's names, for messages: "ngram, suffix, draft, self". */
static const char *known_names(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < N_DRAFTERS; i++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", i ? ", " : "", drafters[i].name);
    return buf;
}

static int find_drafter(const char *name) {
    for (size_t i = 0; i < N_DRAFTERS; i++)
        if (!strcmp(name, drafters[i].name)) return (int)i;
    return -1;
}

static sp_drafter *create_one(const char *name, const sp_drafter_opts *o, sp_err *err) {
    static const sp_drafter_opts none = { 0 };
    const int i = find_drafter(name);
    char names[128];
    if (i < 0) {
        sp_err_set(err, "unknown speculative method '%s' (available: %s, or a comma-separated "
                   "combination)", name, known_names(names, sizeof names));
        return NULL;
    }
    return drafters[i].create(o ? o : &none, err);
}

sp_drafter *sp_drafter_create(const char *name, const sp_drafter_opts *o, sp_err *err) {
    if (!strpbrk(name, ",+")) return create_one(name, o, err);
    sp_drafter *subs[4];
    int n = 0;
    char *copy = sp_xstrdup(name), *save = NULL;
    sp_drafter *d = NULL;
    for (char *t = strtok_r(copy, ",+", &save); t; t = strtok_r(NULL, ",+", &save)) {
        if (n == 4) { sp_err_set(err, "at most 4 combined drafters"); goto fail; }
        for (int i = 0; i < n; i++)
            if (!strcmp(subs[i]->name, t)) { sp_err_set(err, "drafter '%s' listed twice", t); goto fail; }
        if (!(subs[n] = create_one(t, o, err))) goto fail;
        n++;
    }
    d = sp_combine_create(subs, n, err);
    if (d) { free(copy); return d; }
fail:
    for (int i = 0; i < n; i++) sp_drafter_free(subs[i]);
    free(copy);
    return NULL;
}

int sp_drafter_check_name(const char *name, sp_err *err) {
    char *copy = sp_xstrdup(name), *save = NULL, names[128];
    int n = 0, rc = 0;
    for (char *t = strtok_r(copy, ",+", &save); t && !rc; t = strtok_r(NULL, ",+", &save)) {
        if (find_drafter(t) < 0)
            rc = sp_err_set(err, "unknown speculative method '%s' (available: %s, or a combination "
                            "joined by ',' or '+')", t, known_names(names, sizeof names));
        n++;
    }
    if (!rc && (n == 0 || n > 4)) rc = sp_err_set(err, "1 to 4 speculative methods, got %d", n);
    free(copy);
    return rc;
}

void sp_self_default_layers(const sp_model *m, uint8_t *keep) {
    const int L = m->hp.n_layer;
    for (int il = 0; il < L; il++) keep[il] = il < L / 2 || il == L - 1;
}

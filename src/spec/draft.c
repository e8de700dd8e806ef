/* The drafter seam: generic entry points, capability checks, checkpoint
 * namespaces, and creation by name. */
#include "spec/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_caps_describe(uint32_t caps, char *buf, size_t cap) {
    static const char *const names[] = { "shared embeddings", "hidden-state taps",
                                         "anchor hidden state", "layer KV access" };
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < 4; i++)
        if (caps & (1u << i))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", names[i]);
    if (!n) snprintf(buf, cap, "none");
    return buf;
}

/* This build's forward pass exposes the embeddings and LM head (they are
 * plain matrices of the model) but no hidden-state taps yet. */
sp_target sp_target_of(const sp_model *m) {
    return (sp_target){ .model = m, .caps = SP_CAP_SHARED_EMBED };
}

sp_draft *sp_draft_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    uint32_t missing = d->needs & ~t->caps;
    if (missing) {
        char need[128], have[128];
        sp_err_set(err, "drafter '%s' needs %s from the target, which offers only %s", d->name,
                   sp_caps_describe(missing, need, sizeof need),
                   sp_caps_describe(t->caps, have, sizeof have));
        return NULL;
    }
    return d->ops->open(d, t, err);
}

void sp_draft_close(sp_draft *s) {
    if (s) s->drafter->ops->close(s);
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

sp_drafter *sp_drafter_create(const char *name, const sp_drafter_opts *o, sp_err *err) {
    if (!strcmp(name, "ngram"))
        return sp_ngram_create_tree(o && o->ngram_min ? o->ngram_min : 1,
                                    o && o->ngram_max ? o->ngram_max : 3,
                                    o && o->tree_width ? o->tree_width : 1, err);
    if (!strcmp(name, "suffix")) {
        sp_suffix_opts so = sp_suffix_defaults();
        if (o && o->suffix_factor) so.factor = o->suffix_factor;
        if (o && o->suffix_min_prob) so.min_prob = o->suffix_min_prob;
        if (o && o->suffix_max_depth) so.max_depth = o->suffix_max_depth;
        if (o && o->tree_width) so.tree_width = o->tree_width;
        return sp_suffix_create(&so, err);
    }
    sp_err_set(err, "unknown speculative method '%s' (available: ngram, suffix)", name);
    return NULL;
}

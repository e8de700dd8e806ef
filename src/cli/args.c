/* Option parsing helpers with strict value checking. */
#include "cli/cli.h"
#include "cli/paths.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "specula %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'specula %s --help')\n", cmd);
    va_end(ap);
    return SP_EXIT_USAGE;
}

bool sp_arg_is(sp_args *a, const char *flags) {
    const char *arg = a->argv[a->i];
    size_t n = strlen(arg);
    for (const char *p = flags; *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, arg, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

bool sp_arg_str(sp_args *a, const char **out) {
    if (a->i + 1 >= a->argc) {
        sp_usage_error(a->cmd, "option %s needs a value", a->argv[a->i]);
        return false;
    }
    *out = a->argv[++a->i];
    return true;
}

bool sp_arg_int(sp_args *a, long lo, long hi, int *out) {
    const char *flag = a->argv[a->i], *s;
    if (!sp_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        sp_usage_error(a->cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = (int)v;
    return true;
}

bool sp_arg_u64(sp_args *a, uint64_t *out) {
    const char *flag = a->argv[a->i], *s;
    if (!sp_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        sp_usage_error(a->cmd, "%s expects a non-negative integer, got '%s'", flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool sp_arg_float(sp_args *a, double lo, double hi, float *out) {
    const char *flag = a->argv[a->i], *s;
    if (!sp_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        sp_usage_error(a->cmd, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = (float)v;
    return true;
}

int sp_arg_unknown(sp_args *a) {
    return sp_usage_error(a->cmd, "unknown option '%s'", a->argv[a->i]);
}

int sp_arg_table(sp_args *a, const sp_flag *flags, int n_flags) {
    for (int k = 0; k < n_flags; k++) {
        const sp_flag *f = &flags[k];
        if (!sp_arg_is(a, f->names)) continue;
        switch (f->kind) {
        case SP_FLAG_STR: return sp_arg_str(a, (const char **)f->dst) ? 1 : -1;
        case SP_FLAG_INT: return sp_arg_int(a, (long)f->lo, (long)f->hi, (int *)f->dst) ? 1 : -1;
        case SP_FLAG_FLOAT: return sp_arg_float(a, f->lo, f->hi, (float *)f->dst) ? 1 : -1;
        case SP_FLAG_U64: return sp_arg_u64(a, (uint64_t *)f->dst) ? 1 : -1;
        case SP_FLAG_SET: *(bool *)f->dst = true; return 1;
        }
    }
    return 0;
}

int sp_engine_opt(sp_args *a, sp_engine_opts *o) {
    if (sp_arg_is(a, "-m|--model")) return sp_arg_str(a, &o->model) ? 1 : -1;
    if (sp_arg_is(a, "-t|--threads")) return sp_arg_int(a, 1, 256, &o->threads) ? 1 : -1;
    if (sp_arg_is(a, "-c|--ctx-size")) return sp_arg_int(a, 16, 1 << 20, &o->ctx) ? 1 : -1;
    if (sp_arg_is(a, "-b|--batch-size")) return sp_arg_int(a, 1, 4096, &o->batch) ? 1 : -1;
    if (sp_arg_is(a, "-ctk|--cache-type-k") || sp_arg_is(a, "-ctv|--cache-type-v")) {
        const bool k = !strcmp(a->argv[a->i], "-ctk") || !strcmp(a->argv[a->i], "--cache-type-k");
        const char *name;
        if (!sp_arg_str(a, &name)) return -1;
        if (sp_kv_type_parse(name, k ? &o->kv.k : &o->kv.v)) {
            fprintf(stderr, "specula %s: %s %s: use f16, q8_0 or q4_0\n", a->cmd, k ? "--cache-type-k" : "--cache-type-v",
                    name);
            return -1;
        }
        o->kv_set = true;
        return 1;
    }
    if (sp_arg_is(a, "--kv-quant-start")) return sp_arg_int(a, 0, 4096, &o->kv.quant_start) ? 1 : -1;
    if (sp_arg_is(a, "--no-spec-gate")) { o->no_spec_gate = true; return 1; }
    return 0;
}

void sp_spec_cli_init(sp_spec_cli *o) {
    memset(o, 0, sizeof *o);
    o->draft_max = SP_DRAFT_ADAPTIVE;
    o->d.dm.load = sp_cli_model_opts();   /* a --draft-model loads like the target */
}

int sp_spec_opt(sp_args *a, sp_spec_cli *o) {
    sp_drafter_opts *d = &o->d;
    if (sp_arg_is(a, "--draft-max")) {
        if (a->i + 1 < a->argc && !strcmp(a->argv[a->i + 1], "adaptive")) {
            a->i++;
            o->draft_max = SP_DRAFT_ADAPTIVE;
            return 1;
        }
        return sp_arg_int(a, 0, SP_MAX_DRAFT, &o->draft_max) ? 1 : -1;
    }
    if (sp_arg_is(a, "--ngram-min")) return sp_arg_int(a, 1, 64, &d->ngram_min) ? 1 : -1;
    if (sp_arg_is(a, "--ngram-max")) return sp_arg_int(a, 1, 64, &d->ngram_max) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-factor")) return sp_arg_float(a, 0.01, 64, &d->suffix_factor) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-min-prob")) return sp_arg_float(a, 1e-4, 1, &d->suffix_min_prob) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-max-depth")) return sp_arg_int(a, 4, 512, &d->suffix_max_depth) ? 1 : -1;
    if (sp_arg_is(a, "--tree-width")) return sp_arg_int(a, 1, 8, &d->tree_width) ? 1 : -1;
    if (sp_arg_is(a, "--draft-model")) return sp_arg_str(a, &o->draft_model) ? 1 : -1;
    if (sp_arg_is(a, "--draft-sample")) { d->dm.sample = true; return 1; }
    if (sp_arg_is(a, "--draft-min-prob")) {
        d->dm.min_prob_set = true;
        return sp_arg_float(a, 0, 1, &d->dm.min_prob) ? 1 : -1;
    }
    if (sp_arg_is(a, "--self-layers")) return sp_arg_str(a, &d->self_layers) ? 1 : -1;
    if (sp_arg_is(a, "--draft-head")) return sp_arg_str(a, &d->draft_head) ? 1 : -1;
    return 0;
}

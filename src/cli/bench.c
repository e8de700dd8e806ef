/* specula bench: plain vs speculative decoding on a prompt set, in one
 * process, interleaved; and the verification cost curve.
 *
 * Every method runs every prompt `repeats` times; the order of methods
 * rotates between repeats so that drift of the (shared, noisy) machine
 * hits all methods alike.  A prompt's tok/s is the median over repeats;
 * a category's tok/s is its tokens over the sum of its prompts' median
 * times; speedup is the ratio to plain in the same run.  At temperature 0
 * the bench also checks that every method emitted exactly plain's tokens.
 */
#include "cli/cli.h"
#include "cli/paths.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char bench_help[] =
    "usage: specula bench [options]\n"
    "       specula bench --verify-cost [-m MODEL]...\n"
    "\n"
    "Runs a JSONL prompt set through plain decoding and each speculative method in one\n"
    "process (interleaved, with warm-up and repeats) and prints per-category and overall\n"
    "tok/s, speedup vs plain, acceptance rate and mean acceptance length.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "      --prompts FILE      JSONL prompts (default bench/prompts.jsonl): one\n"
    "                          {\"id\",\"category\",\"messages\" or \"prompt\" (raw text, no chat\n"
    "                          template),\"max_tokens\"} per line; optional \"json_schema\"\n"
    "                          (an object) or \"grammar\" (GBNF) constrains that prompt's output\n"
    "                          (structured output: the tokens the grammar forces are drafted by\n"
    "                          every method; method 'forced' drafts only those, and\n"
    "                          METHOD:nf is METHOD without them, to compare in one run)\n"
    "      --no-forced-spans   under a grammar, methods draft only their drafter's tokens\n"
    "      --methods LIST      comma-separated, e.g. plain,ngram,suffix,ngram+draft (default\n"
    "                          plain,ngram); A+B is the combination --spec A,B (A asked first,\n"
    "                          B where A's proposal is weak; the better estimate is verified)\n"
    "      --repeats N         runs per prompt and method (default 3); drafters that learn\n"
    "                          across requests (suffix) see the earlier repeats: use 1 for\n"
    "                          their unbiased numbers (the first-repeat acceptance is printed)\n"
    "      --warmup N          warm-up generations per method (default 1)\n"
    "      --limit N           only the first N prompts\n"
    "      --category NAME     only prompts of this category\n"
    "      --max-tokens N      override every prompt's max_tokens\n"
    "      --temp T            temperature (default 0); --seed S (default 1)\n"
    SP_SPEC_OPTS_HELP
    "      --json FILE         write the results as JSON\n"
    "      --verify-cost       print t(K)/t(1), K = 1..16, for each -m (default: both models)\n"
    "      --cost-ctx N        with --verify-cost: each window after N tokens of context\n"
    "                          (default 32; attention makes windows dearer as it grows)\n"
    "  -h, --help              this help\n";

#define MAX_METHODS 8
#define MAX_PROMPTS 4096

typedef sp_bench_prompt prompt;

typedef struct result {                /* one (prompt, method) */
    double *tps;                       /* (repeats) decode tok/s */
    double *secs;                      /* (repeats) decode seconds */
    int64_t emitted;                   /* of the first repeat */
    sp_spec_stats stats;               /* summed over repeats */
    sp_spec_stats first;               /* the first repeat alone: drafters with engine-wide
                                          state (suffix) have not yet seen this prompt's output */
    bool lossless;                     /* tokens equal plain's (T = 0) */
    double med_secs, med_tps;
} result;

typedef struct bench_opts {
    const char *prompts_path, *json_path, *category;
    char *methods[MAX_METHODS];
    int n_methods, repeats, warmup, limit, max_tokens, draft_max;
    bool no_forced;
    float temp;
    uint64_t seed;
    sp_spec_cli spec;
} bench_opts;

/* ----------------------------------------------------------------------------
 * Prompts
 * ------------------------------------------------------------------------- */

/* The grammar of a prompt line: its "json_schema" object or "grammar"
 * text (not both). */
static sp_grammar *line_grammar(const json_t *schema, const json_t *gbnf, sp_err *err) {
    if (schema && gbnf) { sp_err_set(err, "give \"json_schema\" or \"grammar\", not both"); return NULL; }
    if (gbnf && !json_is_string(gbnf)) { sp_err_set(err, "\"grammar\" must be a string"); return NULL; }
    char *text = NULL;
    if (schema) {
        char *js = json_dumps(schema, JSON_COMPACT);
        text = js ? sp_schema_to_gbnf(js, strlen(js), err) : NULL;
        free(js);
        if (!text) return NULL;
    }
    const char *g = text ? text : json_string_value(gbnf);
    sp_grammar *out = sp_grammar_parse(g, strlen(g), err);
    free(text);
    return out;
}

static int load_prompts(const bench_opts *o, const sp_engine *e, prompt *ps, int *n_out, sp_err *err) {
    FILE *f = fopen(o->prompts_path, "r");
    if (!f) return sp_err_set(err, "cannot open prompt set '%s' (run from the repository root or pass --prompts FILE)", o->prompts_path);
    char *line = NULL;
    size_t cap = 0;
    int n = 0, lineno = 0, rc = 0;
    sp_chat_tmpl *fmt = NULL;
    if (sp_chat_tmpl_for_model(e->model->gguf, e->tok, NULL, NULL, NULL, &fmt, err)) {
        fclose(f);
        return -1;
    }
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == 0) continue;
        if (n == MAX_PROMPTS) { rc = sp_err_set(err, "%s: more than %d prompts", o->prompts_path, MAX_PROMPTS); break; }
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        json_t *msgs = j ? json_object_get(j, "messages") : NULL;
        const char *raw = j ? json_string_value(json_object_get(j, "prompt")) : NULL;
        const char *id = j ? json_string_value(json_object_get(j, "id")) : NULL;
        const char *cat = j ? json_string_value(json_object_get(j, "category")) : NULL;
        json_t *mt = j ? json_object_get(j, "max_tokens") : NULL;
        json_t *schema = j ? json_object_get(j, "json_schema") : NULL;
        json_t *gbnf = j ? json_object_get(j, "grammar") : NULL;
        if (!j || (!json_is_array(msgs) && !raw) || (msgs && raw) || !id || !cat || !json_is_integer(mt) ||
            json_integer_value(mt) < 1 || json_integer_value(mt) > 100000) {
            rc = sp_err_set(err, "%s:%d: expected {\"id\",\"category\",\"messages\":[...] or \"prompt\":\"raw "
                            "text\",\"max_tokens\"}%s%s",
                            o->prompts_path, lineno, j ? "" : ": ", j ? "" : je.text);
            json_decref(j);
            break;
        }
        if ((o->category && strcmp(o->category, cat)) || (o->limit && n >= o->limit)) { json_decref(j); continue; }
        size_t nm = json_array_size(msgs);
        sp_chat_msg *cm = sp_xcalloc(nm ? nm : 1, sizeof *cm);
        bool ok = true;
        for (size_t i = 0; i < nm; i++) {
            json_t *m = json_array_get(msgs, i);
            cm[i].role = json_string_value(json_object_get(m, "role"));
            cm[i].content = json_string_value(json_object_get(m, "content"));
            if (!cm[i].role || !cm[i].content) ok = false;
        }
        char *text = NULL;
        if (raw) text = sp_xstrdup(raw);   /* text continuation: no chat template */
        else if (!ok) rc = sp_err_set(err, "%s:%d: every message needs string role and content", o->prompts_path, lineno);
        else if (!fmt) rc = sp_err_set(err, "%s:%d: the model has no chat template (use \"prompt\")", o->prompts_path, lineno);
        else if (sp_chat_render(fmt, cm, (int)nm, true, &text, err)) rc = sp_err_prefix(err, "%s:%d", o->prompts_path, lineno);
        prompt *p = &ps[n];
        memset(p, 0, sizeof *p);
        if (!rc && sp_tokenize(e->tok, text, strlen(text), sp_tokenizer_add_bos(e->tok), !raw, &p->toks, err))
            rc = -1;
        free(text);
        free(cm);
        if (!rc) {
            p->id = sp_xstrdup(id);
            p->category = sp_xstrdup(cat);
            p->max_tokens = o->max_tokens ? o->max_tokens : (int)json_integer_value(mt);
            if ((schema || gbnf) && !(p->grammar = line_grammar(schema, gbnf, err)))
                rc = sp_err_prefix(err, "%s: prompt '%s'", o->prompts_path, id);
            if (p->toks.n + p->max_tokens + 1 > e->n_ctx)
                rc = sp_err_set(err, "%s: prompt '%s' needs %d tokens of context, have %d (raise -c)",
                                o->prompts_path, id, p->toks.n + p->max_tokens + 1, e->n_ctx);
            else if (!rc) n++;
        }
        json_decref(j);
        if (rc) { sp_tokens_free(&p->toks); sp_grammar_free(p->grammar); break; }
    }
    free(line);
    fclose(f);
    sp_chat_tmpl_free(fmt);
    *n_out = n;
    if (!rc && n == 0) rc = sp_err_set(err, "%s: no prompts selected", o->prompts_path);
    return rc;
}

int sp_bench_load(const char *path, const sp_engine *e, int limit, sp_bench_prompt **out, int *n,
                  sp_err *err) {
    bench_opts o = { .prompts_path = path, .limit = limit };
    *out = sp_xcalloc(MAX_PROMPTS, sizeof **out);
    if (load_prompts(&o, e, *out, n, err)) {
        sp_bench_free(*out, *n);
        *out = NULL;
        return -1;
    }
    return 0;
}

void sp_bench_free(sp_bench_prompt *ps, int n) {
    if (!ps) return;
    for (int i = 0; i < n; i++) {
        free(ps[i].id);
        free(ps[i].category);
        sp_tokens_free(&ps[i].toks);
        sp_grammar_free(ps[i].grammar);
    }
    free(ps);
}

/* ----------------------------------------------------------------------------
 * One generation
 * ------------------------------------------------------------------------- */

typedef struct collect {
    const sp_tokenizer *tok;
    sp_tokens out;
} collect;

static sp_emit_result on_tok(void *ud, int32_t t, bool drafted, const float *logits) {
    (void)drafted; (void)logits;
    collect *c = ud;
    sp_tokens_push(&c->out, t);
    return sp_tokenizer_is_eog(c->tok, t) ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

/* One generation of prompt p in the engine's context (one slot). */
static int run_once(const sp_engine *e, sp_drafter *drafter, bool forced, const bench_opts *o, const sp_tokens *p,
                    const sp_grammar *g, int max_tokens, sp_spec_stats *st, sp_tokens *out, sp_err *err) {
    sp_seq_params sq = sp_seq_default_params();
    sq.sampling.temperature = o->temp;
    sq.sampling.seed = o->seed;
    if (o->temp > 0) { sq.sampling.top_k = 40; sq.sampling.top_p = 0.95f; sq.sampling.min_p = 0.05f; }
    sq.prompt = p->ids;
    sq.n_prompt = p->n;
    sq.max_tokens = max_tokens;
    sq.drafter = drafter;
    sq.draft_max = o->draft_max;
    sq.grammar = g;
    sq.forced_spans = forced && !o->no_forced;
    collect c = { e->tok, { 0 } };
    sq.emit = on_tok;
    sq.ud = &c;
    const int rc = sp_ctx_generate(e->ctx, &sq, st, NULL, err);
    if (out && !rc) *out = c.out;
    else sp_tokens_free(&c.out);
    return rc;
}

/* The warm-up prompt: outside every prompt set, so drafters that learn
 * across requests (suffix's engine-wide trie) learn nothing about the
 * measured prompts from it. */
static int warmup_prompt(const sp_engine *e, sp_tokens *out, sp_err *err) {
    const sp_chat_msg msg = { "user", "Count from one to twenty in words, separated by commas." };
    sp_chat_tmpl *fmt = NULL;
    if (sp_chat_tmpl_for_model(e->model->gguf, e->tok, NULL, NULL, NULL, &fmt, err)) return -1;
    if (!fmt) {   /* a raw-prompt model warms up on the text itself */
        return sp_tokenize(e->tok, msg.content, strlen(msg.content), sp_tokenizer_add_bos(e->tok), false, out, err);
    }
    const int rc = sp_chat_tokenize(fmt, e->tok, &msg, 1, true, sp_tokenizer_add_bos(e->tok), out, err);
    sp_chat_tmpl_free(fmt);
    return rc;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(const double *v, int n) {
    double *c = sp_xmalloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* ----------------------------------------------------------------------------
 * Aggregation and output
 * ------------------------------------------------------------------------- */

typedef struct agg {
    double secs, tokens;
    sp_spec_stats stats, first;
    bool lossless;
    int n;
} agg;

static void aggregate(const prompt *ps, int np, result *res, int nm, const char *cat, agg *out) {
    for (int m = 0; m < nm; m++) {
        memset(&out[m], 0, sizeof out[m]);
        out[m].lossless = true;
        for (int i = 0; i < np; i++) {
            if (cat && strcmp(ps[i].category, cat)) continue;
            const result *r = &res[i * nm + m];
            out[m].secs += r->med_secs;
            out[m].tokens += (double)r->emitted;
            sp_stats_add(&out[m].stats, &r->stats);
            sp_stats_add(&out[m].first, &r->first);
            out[m].lossless &= r->lossless;
            out[m].n++;
        }
    }
}

/* Seconds of drafting per draft token over the time of a one-row target
 * forward (t(1) of the cost curve): c in S = tau / (t(k+1)/t(1) + k c). */
static double draft_cost(const sp_spec_stats *s, const sp_cost_curve *cost) {
    if (!cost || !cost->valid || s->drafted <= 0) return 0;
    return sp_ns_to_s(s->draft_ns) / (double)s->drafted / cost->t[1];
}

static void print_rows(const char *label, const agg *a, const bench_opts *o, const sp_cost_curve *cost) {
    const double plain_tps = a[0].secs > 0 ? a[0].tokens / a[0].secs : 0;
    for (int m = 0; m < o->n_methods; m++) {
        const double tps = a[m].secs > 0 ? a[m].tokens / a[m].secs : 0;
        const bool plain = !strcmp(o->methods[m], "plain");
        printf("%-12s %-8s %8.1f %7.2fx", label, o->methods[m], tps, plain_tps > 0 ? tps / plain_tps : 0);
        if (plain) printf(" %8s %9s %8s %9s %7s\n", "-", "-", "1.00", "-", "-");
        else
            printf(" %7.1f%% %9.2f %8.2f %9s %6.1f%%\n", 100 * sp_stats_accept_rate(&a[m].stats),
                   sp_stats_mean_accept_len(&a[m].stats), sp_stats_tokens_per_forward(&a[m].stats),
                   o->temp == 0 ? (a[m].lossless ? "yes" : "NO") : "n/a", 100 * draft_cost(&a[m].stats, cost));
    }
}

static json_t *agg_json(const agg *a, const bench_opts *o) {
    json_t *j = json_object();
    const double plain_tps = a[0].secs > 0 ? a[0].tokens / a[0].secs : 0;
    for (int m = 0; m < o->n_methods; m++) {
        const double tps = a[m].secs > 0 ? a[m].tokens / a[m].secs : 0;
        json_t *r = json_object();
        json_object_set_new(r, "tokens_per_s", json_real(tps));
        json_object_set_new(r, "speedup", json_real(plain_tps > 0 ? tps / plain_tps : 0));
        json_object_set_new(r, "tokens", json_real(a[m].tokens));
        json_object_set_new(r, "acceptance_rate", json_real(sp_stats_accept_rate(&a[m].stats)));
        json_object_set_new(r, "mean_acceptance_length", json_real(sp_stats_mean_accept_len(&a[m].stats)));
        json_object_set_new(r, "acceptance_rate_first_repeat", json_real(sp_stats_accept_rate(&a[m].first)));
        json_object_set_new(r, "mean_acceptance_length_first_repeat",
                            json_real(sp_stats_mean_accept_len(&a[m].first)));
        json_object_set_new(r, "tokens_per_forward", json_real(sp_stats_tokens_per_forward(&a[m].stats)));
        json_object_set_new(r, "draft_ns", json_integer((json_int_t)a[m].stats.draft_ns));
        json_object_set_new(r, "drafted", json_integer(a[m].stats.drafted));
        json_object_set_new(r, "accepted", json_integer(a[m].stats.accepted));
        json_t *pos = json_array();
        for (int i = 0; i < SP_STAT_POSITIONS && a[m].stats.pos_drafted[i]; i++)
            json_array_append_new(pos, json_real((double)a[m].stats.pos_accepted[i] /
                                                 (double)a[m].stats.pos_drafted[i]));
        json_object_set_new(r, "acceptance_by_position", pos);
        if (o->temp == 0) json_object_set_new(r, "lossless", json_boolean(a[m].lossless));
        json_object_set_new(j, o->methods[m], r);
    }
    return j;
}

/* ----------------------------------------------------------------------------
 * Verification cost
 * ------------------------------------------------------------------------- */

typedef struct peak_job { double gmacs[64]; } peak_job;
static void peak_worker(void *ctx, int ith, int nth) {
    (void)nth;
    ((peak_job *)ctx)->gmacs[ith & 63] = sp_kernels_peak_gmacs(0.3);
}

/* Multiply-accumulates of one row through every weight matrix. */
static double macs_per_row(const sp_model *m) {
    double s = (double)m->output.n_in * (double)m->output.n_out;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        const sp_matrix *w[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (int i = 0; i < 7; i++) s += (double)w[i]->n_in * (double)w[i]->n_out;
    }
    return s;
}

/* t(K)/t(1) for K = 1..16, plus the machine figures the kernels are judged
 * against: read bandwidth and the decode limit it implies, and the peak
 * int8 MAC rate against what windows of 8..16 rows achieve. */
static int verify_cost(const char **models, int n_models, int ctx0, const sp_engine_opts *eo,
                       const sp_spec_cli *spec) {
    static const char *defaults[] = { "smollm2-135m", "gemma3-270m" };
    if (!n_models) { models = defaults; n_models = 2; }
    int ks[16];
    for (int k = 0; k < 16; k++) ks[k] = k + 1;
    for (int i = 0; i < n_models; i++) {
        sp_engine_opts o = *eo;
        o.model = models[i];
        sp_engine e;
        sp_err err;
        sp_cost_curve c;
        if (sp_engine_open(&o, &e, &err) || sp_cost_measure(e.model, e.ws, ks, 16, 5, ctx0, &c, &err)) {
            fprintf(stderr, "specula bench: %s\n", err.msg);
            return SP_EXIT_FAIL;
        }
        const double gbps = sp_kernels_read_gbps(e.pool, (size_t)512 << 20);
        peak_job pj = { { 0 } };
        sp_pool_run(e.pool, peak_worker, &pj);
        double peak = 0;
        for (int t = 0; t < e.threads && t < 64; t++) peak += pj.gmacs[t];
        const double bpt = (double)sp_model_bytes_per_token(e.model), macs = macs_per_row(e.model);
        printf("# verify cost: %s, %d threads, kernels %s, median of 5, after a %d-token context\n",
               e.model->name, e.threads, sp_kernels_describe(), ctx0);
        printf("# read bandwidth %.1f GB/s; weights read per token %.1f MB; bandwidth limit %.1f tok/s; "
               "1-row forward %.1f tok/s = %.0f%% of the limit\n", gbps, bpt / 1e6, gbps * 1e9 / bpt,
               1.0 / c.t[1], 100.0 / c.t[1] / (gbps * 1e9 / bpt));
        printf("# peak int8 MAC rate %.1f GMAC/s (%d threads); windows: ", peak, e.threads);
        for (int k = 8; k <= 16; k += 4)
            printf("K=%d %.1f GMAC/s (%.0f%%)%s", k, macs * k / c.t[k] / 1e9, 100.0 * macs * k / c.t[k] / 1e9 / peak,
                   k < 16 ? ", " : "\n");
        printf("# K ratio (t(K)/t(1)); t(1) = %.2f ms\n", c.t[1] * 1e3);
        for (int k = 1; k <= 16; k++) printf("%d %.3f\n", k, c.t[k] / c.t[1]);
        char hbuf[4096];
        const char *head = sp_engine_head(&e, spec, hbuf, sizeof hbuf);
        sp_eagle_cost_t ec;
        if (head && sp_eagle_cost(head, e.model, e.ws, e.pool, &ec, &err)) {
            fprintf(stderr, "specula bench: %s\n", err.msg);
            sp_engine_close(&e);
            return SP_EXIT_FAIL;
        }
        if (head)
            printf("# eagle head %s (draft vocabulary %d), each part right after a 1-row target forward of %.2f ms:\n"
                   "#   one draft token (head row + LM head) %.3f ms = %.1f%% of it; one verified row entering the "
                   "head (fc + layer) %.3f ms = %.1f%%\n", head, ec.n_vocab_draft, ec.t1 * 1e3, ec.draft_row * 1e3,
                   100 * ec.draft_row / ec.t1, ec.catchup_row * 1e3, 100 * ec.catchup_row / ec.t1);
        sp_engine_close(&e);
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * The command
 * ------------------------------------------------------------------------- */

static int parse_methods(const char *s, bench_opts *o) {
    char *copy = sp_xstrdup(s), *save = NULL;
    o->n_methods = 0;
    o->methods[o->n_methods++] = sp_xstrdup("plain");   /* plain always first: the baseline */
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "plain")) continue;
        if (o->n_methods == MAX_METHODS) { free(copy); return sp_usage_error("bench", "at most %d methods", MAX_METHODS); }
        o->methods[o->n_methods++] = sp_xstrdup(t);
    }
    free(copy);
    return 0;
}

int sp_cmd_bench(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    bool forced[MAX_METHODS] = { false };       /* methods that draft grammar-forced spans */
    bench_opts o = { .prompts_path = "bench/prompts.jsonl", .repeats = 3, .warmup = 1,
                     .draft_max = SP_DRAFT_ADAPTIVE, .seed = 1 };
    sp_spec_cli_init(&o.spec);
    const char *methods = "plain,ngram", *models[8];
    int n_models = 0;
    bool vcost = false;
    int cost_ctx = 0;
    const sp_flag flags[] = {
        { "--prompts", SP_FLAG_STR, &o.prompts_path, 0, 0 },
        { "--methods", SP_FLAG_STR, &methods, 0, 0 },
        { "--json", SP_FLAG_STR, &o.json_path, 0, 0 },
        { "--category", SP_FLAG_STR, &o.category, 0, 0 },
        { "--repeats", SP_FLAG_INT, &o.repeats, 1, 1000 },
        { "--warmup", SP_FLAG_INT, &o.warmup, 0, 100 },
        { "--limit", SP_FLAG_INT, &o.limit, 1, MAX_PROMPTS },
        { "--max-tokens", SP_FLAG_INT, &o.max_tokens, 1, 100000 },
        { "--temp", SP_FLAG_FLOAT, &o.temp, 0, 100 },
        { "--seed", SP_FLAG_U64, &o.seed, 0, 0 },
        { "--verify-cost", SP_FLAG_SET, &vcost, 0, 0 },
        { "--cost-ctx", SP_FLAG_INT, &cost_ctx, 1, 1000000 },
        { "--no-forced-spans", SP_FLAG_SET, &o.no_forced, 0, 0 },
    };
    sp_args a = { "bench", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        if (sp_arg_is(&a, "-m|--model")) {
            if (n_models == 8 || !sp_arg_str(&a, &models[n_models])) return SP_EXIT_USAGE;
            eo.model = models[n_models++];
            continue;
        }
        int c = sp_engine_opt(&a, &eo);
        if (c == 0) c = sp_spec_opt(&a, &o.spec);
        if (c == 0) c = sp_arg_table(&a, flags, (int)(sizeof flags / sizeof *flags));
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(bench_help, stdout); return 0; }
        return sp_arg_unknown(&a);
    }
    if (cost_ctx && !vcost) return sp_usage_error("bench", "--cost-ctx goes with --verify-cost");
    if (vcost) return verify_cost(models, n_models, cost_ctx ? cost_ctx : 32, &eo, &o.spec);
    if (n_models > 1) return sp_usage_error("bench", "one -m per run (except with --verify-cost)");
    if (parse_methods(methods, &o)) return SP_EXIT_USAGE;

    sp_err err;
    sp_drafter *drafters[MAX_METHODS] = { 0 };
    char drafter_names[MAX_METHODS][64];
    for (int m = 1; m < o.n_methods; m++) {
        /* "M:nf" is M without grammar-forced spans */
        const char *name = o.methods[m];
        const size_t len = strlen(name);
        forced[m] = !(len > 3 && !strcmp(name + len - 3, ":nf"));
        snprintf(drafter_names[m], sizeof drafter_names[m], "%.*s", (int)(forced[m] ? len : len - 3), name);
        if (strcmp(drafter_names[m], "forced") && sp_drafter_check_name(drafter_names[m], &err))
            return sp_usage_error("bench", "--methods: %s", err.msg);
    }
    o.draft_max = o.spec.draft_max;
    if (!eo.ctx) eo.ctx = 8192;
    sp_engine e;
    prompt *ps = sp_xcalloc(MAX_PROMPTS, sizeof *ps);
    result *res = NULL;
    int np = 0, rc = SP_EXIT_FAIL;
    const int nm = o.n_methods;
    const sp_cost_curve *cost = NULL;
    sp_tokens warm = { 0 };
    if (sp_engine_open(&eo, &e, &err)) { fprintf(stderr, "specula bench: %s\n", err.msg); goto out_free; }
    for (int m = 1; m < o.n_methods; m++)
        if (strcmp(drafter_names[m], "forced") && !(drafters[m] = sp_engine_drafter(&e, drafter_names[m], &o.spec, &err)))
            goto fail;
    if (load_prompts(&o, &e, ps, &np, &err)) goto fail;
    /* t(K): the adaptive length needs it, and draft-c is measured against t(1) */
    if (nm > 1 && sp_ctx_cost(e.ctx, &cost, &err)) goto fail;
    if (warmup_prompt(&e, &warm, &err)) goto fail;

    /* warm-up: a prompt outside the set, short, every method */
    for (int w = 0; w < o.warmup; w++)
        for (int m = 0; m < o.n_methods; m++) {
            sp_spec_stats st;
            if (run_once(&e, drafters[m], forced[m], &o, &warm, NULL, 16, &st, NULL, &err)) goto fail;
        }

    res = sp_xcalloc((size_t)np * nm, sizeof *res);
    uint64_t t_begin = sp_now_ns();
    for (int i = 0; i < np; i++) {
        sp_tokens ref = { 0 };
        for (int m = 0; m < nm; m++) {
            res[i * nm + m].tps = sp_xcalloc((size_t)o.repeats, sizeof(double));
            res[i * nm + m].secs = sp_xcalloc((size_t)o.repeats, sizeof(double));
            res[i * nm + m].lossless = true;
        }
        for (int r = 0; r < o.repeats; r++) {
            for (int j = 0; j < nm; j++) {
                const int m = (j + r) % nm;      /* rotate the method order */
                result *R = &res[i * nm + m];
                sp_spec_stats st;
                sp_tokens out = { 0 };
                if (run_once(&e, drafters[m], forced[m], &o, &ps[i].toks, ps[i].grammar, ps[i].max_tokens, &st, &out,
                             &err))
                    goto fail;
                R->tps[r] = sp_stats_decode_tps(&st);
                R->secs[r] = sp_ns_to_s(st.total_ns);
                sp_stats_add(&R->stats, &st);
                if (r == 0) { R->emitted = st.emitted; R->first = st; }
                if (m == 0 && r == 0) { ref = out; out.ids = NULL; out.n = 0; }
                else if (o.temp == 0 && r == 0 && m != 0) {
                    /* plain ran first in repeat 0 (rotation offset 0) */
                    R->lossless = out.n == ref.n && !memcmp(out.ids, ref.ids, (size_t)out.n * sizeof(int32_t));
                }
                sp_tokens_free(&out);
            }
            fprintf(stderr, "\r[%3d/%d] %-14s repeat %d/%d  elapsed %.0f s   ", i + 1, np, ps[i].id, r + 1,
                    o.repeats, sp_ns_to_s(sp_now_ns() - t_begin));
        }
        sp_tokens_free(&ref);
        for (int m = 0; m < nm; m++) {
            result *R = &res[i * nm + m];
            R->med_secs = median(R->secs, o.repeats);
            R->med_tps = median(R->tps, o.repeats);
        }
    }
    fprintf(stderr, "\n");

    /* table */
    char cats[64][64];
    int nc = 0;
    for (int i = 0; i < np; i++) {
        bool seen = false;
        for (int c = 0; c < nc; c++) seen |= !strcmp(cats[c], ps[i].category);
        if (!seen && nc < 64) snprintf(cats[nc++], sizeof cats[0], "%s", ps[i].category);
    }
    printf("# specula bench: %s, %d threads, %d prompts from %s, temp %g, repeats %d, draft-max %s\n",
           e.model->name, e.threads, np, o.prompts_path, (double)o.temp, o.repeats,
           o.draft_max == SP_DRAFT_ADAPTIVE ? "adaptive" : "fixed");
    if (o.draft_max != SP_DRAFT_ADAPTIVE) printf("# draft-max %d\n", o.draft_max);
    printf("# draft-c: drafting time per draft token / a one-row target forward (t(1) = %.2f ms)\n",
           cost && cost->valid ? cost->t[1] * 1e3 : 0.0);
    printf("%-12s %-8s %8s %8s %8s %9s %8s %9s %7s\n", "category", "method", "tok/s", "speedup", "accept",
           "mean-len", "tok/fwd", "lossless", "draft-c");
    agg *ag = sp_xcalloc((size_t)nm, sizeof *ag);
    json_t *jcats = json_object();
    for (int c = 0; c < nc; c++) {
        aggregate(ps, np, res, nm, cats[c], ag);
        print_rows(cats[c], ag, &o, cost);
        json_object_set_new(jcats, cats[c], agg_json(ag, &o));
    }
    aggregate(ps, np, res, nm, NULL, ag);
    print_rows("overall", ag, &o, cost);
    /* the chance that a draft at position i of a proposal is accepted
     * (all earlier ones were): what the adaptive length trades against */
    for (int m = 1; m < nm; m++) {
        printf("# %s acceptance by draft position (overall):", o.methods[m]);
        for (int i = 0; i < 8 && i < SP_STAT_POSITIONS && ag[m].stats.pos_drafted[i]; i++)
            printf(" %d: %.0f%% of %lld", i + 1,
                   100.0 * (double)ag[m].stats.pos_accepted[i] / (double)ag[m].stats.pos_drafted[i],
                   (long long)ag[m].stats.pos_drafted[i]);
        printf("\n");
    }
    /* where a target forward's share of the decode time goes: the
     * batched forward, drafting (with the drafters' catch-up), the accept
     * walk and sampling, and the rest of the round (planning, the
     * controller, bookkeeping); what S = tau / (t(k+1)/t(1) + k c)
     * leaves out shows up as "other" */
    printf("# time per target forward (ms): method verify draft sample other");
    for (int m = 0; m < nm; m++) {
        const sp_spec_stats *s = &ag[m].stats;
        if (!s->forwards) continue;
        const double f = 1e6 * (double)s->forwards;
        const uint64_t known = s->verify_ns + s->draft_ns + s->sample_ns + s->mask_ns;
        printf("  %s %.3f %.3f %.3f %.3f", o.methods[m], s->verify_ns / f, s->draft_ns / f, s->sample_ns / f,
               s->total_ns > known ? (double)(s->total_ns - known) / f : 0.0);
    }
    printf("\n");
    /* under a grammar: the forced spans, and the grammar's share of the
     * decode time (masks, draft checks, forced spans) */
    for (int m = 0; m < nm; m++) {
        const sp_spec_stats *s = &ag[m].stats;
        if (!s->masks && !s->forced_drafted) continue;
        printf("# grammar %s: forced %lld of %lld emitted tokens drafted, %lld accepted (%.1f%%); masks %lld rows "
               "(%lld computed); grammar time %.3f ms/token = %.1f%% of decode\n", o.methods[m],
               (long long)s->forced_drafted, (long long)s->emitted, (long long)s->forced_accepted,
               s->forced_drafted ? 100.0 * (double)s->forced_accepted / (double)s->forced_drafted : 0.0,
               (long long)s->masks, (long long)s->mask_misses,
               s->emitted ? s->mask_ns / 1e6 / (double)s->emitted : 0.0,
               s->total_ns ? 100.0 * (double)s->mask_ns / (double)s->total_ns : 0.0);
    }
    if (o.repeats > 1 && nm > 1) {
        /* later repeats of a prompt meet drafters that remember earlier
         * outputs (suffix's engine-wide trie): say what the first saw */
        printf("# accept is over all repeats; first repeat alone:");
        for (int m = 1; m < nm; m++)
            printf(" %s %.1f%% (mean-len %.2f)", o.methods[m], 100 * sp_stats_accept_rate(&ag[m].first),
                   sp_stats_mean_accept_len(&ag[m].first));
        printf("\n");
    }
    bool all_lossless = true;
    for (int m = 1; m < nm; m++) all_lossless &= ag[m].lossless;
    if (o.json_path) {
        json_t *root = json_object(), *jprompts = json_array(), *jm = json_array();
        json_object_set_new(root, "model", json_string(e.model->name));
        json_object_set_new(root, "threads", json_integer(e.threads));
        json_object_set_new(root, "temperature", json_real(o.temp));
        json_object_set_new(root, "repeats", json_integer(o.repeats));
        json_object_set_new(root, "draft_max", o.draft_max == SP_DRAFT_ADAPTIVE ? json_string("adaptive") : json_integer(o.draft_max));
        json_object_set_new(root, "prompts_file", json_string(o.prompts_path));
        for (int m = 0; m < nm; m++) json_array_append_new(jm, json_string(o.methods[m]));
        json_object_set_new(root, "methods", jm);
        json_object_set_new(root, "categories", jcats);
        json_object_set_new(root, "overall", agg_json(ag, &o));
        for (int i = 0; i < np; i++) {
            json_t *jp = json_object();
            json_object_set_new(jp, "id", json_string(ps[i].id));
            json_object_set_new(jp, "category", json_string(ps[i].category));
            json_object_set_new(jp, "prompt_tokens", json_integer(ps[i].toks.n));
            for (int m = 0; m < nm; m++) {
                const result *R = &res[i * nm + m];
                json_t *r = json_object();
                json_object_set_new(r, "tokens_per_s_median", json_real(R->med_tps));
                json_object_set_new(r, "tokens", json_integer(R->emitted));
                json_object_set_new(r, "acceptance_rate", json_real(sp_stats_accept_rate(&R->stats)));
                json_object_set_new(r, "mean_acceptance_length", json_real(sp_stats_mean_accept_len(&R->stats)));
                json_object_set_new(r, "acceptance_rate_first_repeat", json_real(sp_stats_accept_rate(&R->first)));
                json_object_set_new(jp, o.methods[m], r);
            }
            json_array_append_new(jprompts, jp);
        }
        json_object_set_new(root, "prompts", jprompts);
        if (json_dump_file(root, o.json_path, JSON_INDENT(1)) != 0)
            fprintf(stderr, "specula bench: cannot write %s\n", o.json_path);
        json_decref(root);
    } else {
        json_decref(jcats);
    }
    free(ag);
    if (o.temp == 0 && !all_lossless) {
        fprintf(stderr, "specula bench: a speculative method did not reproduce plain decoding\n");
        rc = SP_EXIT_FAIL;
    } else {
        rc = 0;
    }
    goto out;
fail:
    fprintf(stderr, "\nspecula bench: %s\n", err.msg);
out:
    if (res)
        for (int i = 0; i < np * nm; i++) { free(res[i].tps); free(res[i].secs); }
    free(res);
    for (int i = 0; i < np; i++) {
        free(ps[i].id);
        free(ps[i].category);
        sp_tokens_free(&ps[i].toks);
        sp_grammar_free(ps[i].grammar);
    }
    sp_tokens_free(&warm);
    sp_engine_close(&e);
out_free:
    free(ps);
    for (int m = 0; m < o.n_methods; m++) { free(o.methods[m]); sp_drafter_free(drafters[m]); }
    return rc;
}

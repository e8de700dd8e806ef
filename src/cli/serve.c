/* specula serve: the OpenAI-compatible HTTP server (see src/serve/serve.h). */
#include "cli/cli.h"
#include "serve/serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char serve_help[] =
    "usage: specula serve [options]\n"
    "\n"
    "Serves the OpenAI API (POST /v1/chat/completions, /v1/completions; GET /v1/models,\n"
    "/health, /metrics) with continuous batching: every running request is a row of one\n"
    "batched forward pass per step, each speculating with its own drafter state.\n"
    "Stops gracefully on SIGINT/SIGTERM.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "                          (-c is the context of each slot; -b the rows per step)\n"
    "      --host ADDR         address to bind (default 127.0.0.1)\n"
    "      --port N            port (default 8080; 0 = any free port, printed)\n"
    "      --api-key KEY       require 'Authorization: Bearer KEY' (default: none;\n"
    "                          also read from SPECULA_API_KEY)\n"
    "      --alias NAME        the model id clients use (default: the -m name or file name)\n"
    "      --parallel N        concurrent requests, each with its own KV cache (default 4)\n"
    "      --queue N           requests waiting for a slot before 503s (default 64)\n"
    "      --max-body BYTES    request body limit (default 1048576)\n"
    "      --timeout S         idle connection timeout in seconds (default 600)\n"
    "      --shutdown-timeout S  on SIGINT/SIGTERM, running requests get S seconds (default 10)\n"
    "      --spec METHOD       default speculation: ngram (default), suffix or none;\n"
    "                          a request may choose with {\"speculative\": {\"method\": ...}}\n"
    "      --draft-max N|adaptive  default draft tokens per round (default: adaptive)\n"
    "      --ngram-min N       shortest suffix n-gram to match (default 1)\n"
    "      --ngram-max N       longest suffix n-gram to match (default 3)\n"
    "      --suffix-factor F   suffix: draft at most F x match length tokens (default 1)\n"
    "      --suffix-min-prob P suffix: drop draft tokens below this probability (default 0.1)\n"
    "      --suffix-max-depth N  suffix: depth of the suffix trie (default 64)\n"
    "      --tree-width W      ngram/suffix: token trees of up to W branches (default 1)\n"
    "  -h, --help              this help\n";

typedef struct serve_args {
    sp_engine_opts eo;
    sp_server_opts so;
    const char *alias;
    sp_drafter_opts dopts;
} serve_args;

/* Parses one serve-specific option; returns 1 consumed, 0 not ours, -1 bad. */
static int serve_opt(sp_args *a, serve_args *s) {
    sp_server_opts *o = &s->so;
    int bytes;
    if (sp_arg_is(a, "--host")) return sp_arg_str(a, &o->host) ? 1 : -1;
    if (sp_arg_is(a, "--port")) return sp_arg_int(a, 0, 65535, &o->port) ? 1 : -1;
    if (sp_arg_is(a, "--api-key")) return sp_arg_str(a, &o->api_key) ? 1 : -1;
    if (sp_arg_is(a, "--alias")) return sp_arg_str(a, &s->alias) ? 1 : -1;
    if (sp_arg_is(a, "--parallel|-np")) return sp_arg_int(a, 1, 256, &o->parallel) ? 1 : -1;
    if (sp_arg_is(a, "--queue")) return sp_arg_int(a, 1, 65536, &o->queue_max) ? 1 : -1;
    if (sp_arg_is(a, "--max-body")) {
        if (!sp_arg_int(a, 1024, 1 << 30, &bytes)) return -1;
        o->max_body = (size_t)bytes;
        return 1;
    }
    if (sp_arg_is(a, "--timeout")) return sp_arg_int(a, 1, 86400, &o->timeout_s) ? 1 : -1;
    if (sp_arg_is(a, "--shutdown-timeout")) return sp_arg_int(a, 0, 3600, &o->shutdown_timeout_s) ? 1 : -1;
    if (sp_arg_is(a, "--spec")) return sp_arg_str(a, &o->spec_default) ? 1 : -1;
    if (sp_arg_is(a, "--draft-max")) {
        if (a->i + 1 < a->argc && !strcmp(a->argv[a->i + 1], "adaptive")) {
            a->i++;
            o->draft_max_default = SP_DRAFT_ADAPTIVE;
            return 1;
        }
        return sp_arg_int(a, 0, SP_MAX_DRAFT, &o->draft_max_default) ? 1 : -1;
    }
    sp_drafter_opts *d = &s->dopts;
    if (sp_arg_is(a, "--ngram-min")) return sp_arg_int(a, 1, 64, &d->ngram_min) ? 1 : -1;
    if (sp_arg_is(a, "--ngram-max")) return sp_arg_int(a, 1, 64, &d->ngram_max) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-factor")) return sp_arg_float(a, 0.01, 64, &d->suffix_factor) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-min-prob")) return sp_arg_float(a, 1e-4, 1, &d->suffix_min_prob) ? 1 : -1;
    if (sp_arg_is(a, "--suffix-max-depth")) return sp_arg_int(a, 4, 512, &d->suffix_max_depth) ? 1 : -1;
    if (sp_arg_is(a, "--tree-width")) return sp_arg_int(a, 1, 8, &d->tree_width) ? 1 : -1;
    return 0;
}

/* The id clients name: --alias, a known model name, or the file name
 * without its directory and ".gguf". */
static void model_id(const serve_args *s, char *buf, size_t cap) {
    const char *m = s->alias ? s->alias : s->eo.model ? s->eo.model : sp_default_model();
    if (!s->alias) {
        const char *slash = strrchr(m, '/');
        if (slash) m = slash + 1;
    }
    snprintf(buf, cap, "%s", m);
    const size_t n = strlen(buf);
    if (!s->alias && n > 5 && !strcmp(buf + n - 5, ".gguf")) buf[n - 5] = 0;
}

/* Serves until SIGINT or SIGTERM (blocked in every thread, taken here). */
static int serve_until_signal(sp_engine *e, serve_args *s, const sigset_t *sigs, sp_err *err) {
    sp_server *srv = sp_server_start(e->model, e->tok, e->ws, &s->so, err);
    if (!srv) return -1;
    fprintf(stderr, "specula serve: listening on http://%s:%d (model %s, %d threads, parallel %d, ctx %d, "
            "spec %s)\n", s->so.host, sp_server_port(srv), s->so.model_id, e->threads, s->so.parallel,
            s->so.n_ctx, s->so.spec_default);
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "specula serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    sp_server_stop(srv);
    fprintf(stderr, "specula serve: stopped\n");
    return 0;
}

static int parse_serve_args(int argc, char **argv, serve_args *s) {
    memset(s, 0, sizeof *s);
    s->so = sp_server_defaults();
    s->so.spec_default = "ngram";
    s->so.api_key = getenv("SPECULA_API_KEY");
    if (s->so.api_key && !*s->so.api_key) s->so.api_key = NULL;
    sp_args a = { "serve", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &s->eo);
        if (c == 0) c = serve_opt(&a, s);
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(serve_help, stdout); return -1; }
        return sp_arg_unknown(&a);
    }
    if (s->so.api_key && !*s->so.api_key) return sp_usage_error("serve", "--api-key must not be empty");
    if (s->alias && !*s->alias) return sp_usage_error("serve", "--alias must not be empty");
    return 0;
}

int sp_cmd_serve(int argc, char **argv) {
    serve_args s;
    const int prc = parse_serve_args(argc, argv, &s);
    if (prc) return prc < 0 ? 0 : prc;
    sp_drafter *drafters[2] = { NULL, NULL };
    sp_err err = { { 0 } };
    static const char *const names[2] = { "ngram", "suffix" };
    for (int i = 0; i < 2; i++)
        if (!(drafters[i] = sp_drafter_create(names[i], &s.dopts, &err))) {
            sp_drafter_free(drafters[0]);
            return sp_usage_error("serve", "%s", err.msg);
        }
    int rc = SP_EXIT_USAGE;
    if (strcmp(s.so.spec_default, "none") && strcmp(s.so.spec_default, "ngram") && strcmp(s.so.spec_default, "suffix")) {
        sp_usage_error("serve", "--spec: unknown method '%s' (none, ngram, suffix)", s.so.spec_default);
        goto done;
    }
    /* Every thread started from here on inherits the blocked signals, so
     * only sigwait below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = SP_EXIT_FAIL;
    sp_engine e;
    if (sp_engine_open(&s.eo, &e, &err)) goto done;
    char id[256];
    model_id(&s, id, sizeof id);
    s.so.model_id = id;
    s.so.n_ctx = e.n_ctx;
    s.so.batch_rows = s.eo.batch > 0 ? s.eo.batch : 256;
    s.so.drafters = drafters;
    s.so.n_drafters = 2;
    sp_cost_curve cost;
    if (sp_cost_get(e.model, e.ws, e.threads, &cost, &err)) goto close;
    s.so.cost = &cost;
    if (serve_until_signal(&e, &s, &sigs, &err) == 0) rc = 0;
close:
    sp_engine_close(&e);
done:
    if (rc == SP_EXIT_FAIL) fprintf(stderr, "specula serve: %s\n", err.msg);
    for (int i = 0; i < 2; i++) sp_drafter_free(drafters[i]);
    return rc;
}

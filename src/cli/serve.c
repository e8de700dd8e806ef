/* specula serve: the OpenAI-compatible HTTP server (see src/serve/serve.h). */
#include "cli/cli.h"
#include "cli/paths.h"
#include "serve/serve.h"

#include <math.h>
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
    "                          (-c is the context of each slot; -b, --batch-rows: the rows of\n"
    "                          one step, prompt chunks fill what decoding rows leave)\n"
    "      --host ADDR         address to bind (default 127.0.0.1)\n"
    "      --port N            port (default 8080; 0 = any free port, printed)\n"
    "      --api-key KEY       require 'Authorization: Bearer KEY' (default: none;\n"
    "                          also read from SPECULA_API_KEY)\n"
    "      --alias NAME        the model id clients use (default: the -m name or file name)\n"
    "      --parallel N        concurrent requests, each with its own KV cache (default 4)\n"
    "      --queue N           requests waiting for a slot before 503s (default 64)\n"
    "      --cache-ram MiB     prefix cache: the KV rows of earlier prompts and answers (with\n"
    "                          drafter states beside them), so a request that repeats a\n"
    "                          history prefills only what is new; least recently used\n"
    "                          entries go first (default 1024; 0 = off, -1 = no limit)\n"
    "      --cache-dir DIR     keep the prefix cache across restarts: read at start from\n"
    "                          DIR/prefix-<model fingerprint>.spcache, written at shutdown (a\n"
    "                          foreign or corrupt file is ignored with a warning)\n"
    "      --max-body BYTES    request body limit (default 1048576)\n"
    "      --timeout S         idle connection timeout in seconds while answering (default 600)\n"
    "      --header-timeout S  a request's headers must arrive within S seconds of the connection\n"
    "                          (or of its previous request), its body within S more plus 1 s\n"
    "                          per 16 KiB; a keep-alive connection idle that long is closed\n"
    "                          (default 10)\n"
    "      --max-conns N       open connections in all; more get 503 + Retry-After\n"
    "                          (default: parallel + queue + 64)\n"
    "      --max-conns-per-ip N  open connections from one client address (default: a quarter\n"
    "                          of --max-conns, at least 8; behind a reverse proxy on this host,\n"
    "                          set it to --max-conns)\n"
    "      --shutdown-timeout S  on SIGINT/SIGTERM, running requests get S seconds (default 10)\n"
    "      --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty F, --seed S\n"
    "                          sampling for requests that omit these fields (default: the model\n"
    "                          file's general.sampling.* values, else llama.cpp's 0.8, 40, 0.95,\n"
    "                          0.05, 1; a request without a seed gets a fresh one unless --seed)\n"
    "      --cors-origin ORIGIN  answer browsers from ORIGIN (\"*\" = any): CORS headers and\n"
    "                          OPTIONS preflights (default: no CORS)\n"
    "      --chat-template NAME|FILE  render chat requests with a built-in template (chatml, gemma,\n"
    "                          llama3, mistral, phi3, qwen) or a Jinja file instead of the model's\n"
    "      --parse-special     read special-token text (\"<|im_start|>\") in completion prompts\n"
    "                          and message contents as special tokens; by default it is plain\n"
    "                          text, so a message cannot forge a turn (token-id prompts and the\n"
    "                          chat template's own markers are special either way)\n"
    "      --spec METHOD       default speculation: ngram (default), suffix, draft, self, eagle, a\n"
    "                          combination (e.g. ngram,draft) or none.  Requests choose with\n"
    "                          {\"speculative\": {\"method\": M, \"draft_max\": N}} among none,\n"
    "                          ngram, suffix and the --spec method\n"
    SP_SPEC_OPTS_HELP
    "  -h, --help              this help\n";

typedef struct serve_args {
    sp_engine_opts eo;
    sp_server_opts so;
    const char *alias;
    const char *cache_dir;
    sp_spec_cli spec;
    /* sampling flags; NAN / -1 / unset = not given */
    float temp, top_p, min_p, repeat_penalty;
    int top_k;
    bool seed_set;
    uint64_t seed;
} serve_args;

/* Parses one serve-specific option; returns 1 consumed, 0 not ours, -1 bad. */
static int serve_opt(sp_args *a, serve_args *s) {
    sp_server_opts *o = &s->so;
    int bytes;
    if (sp_arg_is(a, "--batch-rows")) return sp_arg_int(a, 1, 4096, &s->eo.batch) ? 1 : -1;
    if (sp_arg_is(a, "--host")) return sp_arg_str(a, &o->host) ? 1 : -1;
    if (sp_arg_is(a, "--port")) return sp_arg_int(a, 0, 65535, &o->port) ? 1 : -1;
    if (sp_arg_is(a, "--api-key")) return sp_arg_str(a, &o->api_key) ? 1 : -1;
    if (sp_arg_is(a, "--alias")) return sp_arg_str(a, &s->alias) ? 1 : -1;
    if (sp_arg_is(a, "--parallel|-np")) return sp_arg_int(a, 1, 256, &s->eo.slots) ? 1 : -1;
    if (sp_arg_is(a, "--cache-ram")) return sp_arg_int(a, -1, 1 << 22, &s->eo.cache_mib) ? 1 : -1;
    if (sp_arg_is(a, "--cache-dir")) return sp_arg_str(a, &s->cache_dir) ? 1 : -1;
    if (sp_arg_is(a, "--cors-origin")) return sp_arg_str(a, &o->cors_origin) ? 1 : -1;
    if (sp_arg_is(a, "--chat-template")) return sp_arg_str(a, &o->chat_template) ? 1 : -1;
    if (sp_arg_is(a, "--temp|--temperature")) return sp_arg_float(a, 0, 100, &s->temp) ? 1 : -1;
    if (sp_arg_is(a, "--top-k")) return sp_arg_int(a, 0, 1 << 24, &s->top_k) ? 1 : -1;
    if (sp_arg_is(a, "--top-p")) return sp_arg_float(a, 1e-6, 1, &s->top_p) ? 1 : -1;
    if (sp_arg_is(a, "--min-p")) return sp_arg_float(a, 0, 1, &s->min_p) ? 1 : -1;
    if (sp_arg_is(a, "--repeat-penalty")) return sp_arg_float(a, 0.01, 100, &s->repeat_penalty) ? 1 : -1;
    if (sp_arg_is(a, "--seed")) {
        s->seed_set = true;
        return sp_arg_u64(a, &s->seed) ? 1 : -1;
    }
    if (sp_arg_is(a, "--queue")) return sp_arg_int(a, 1, 65536, &o->queue_max) ? 1 : -1;
    if (sp_arg_is(a, "--max-body")) {
        if (!sp_arg_int(a, 1024, 1 << 30, &bytes)) return -1;
        o->max_body = (size_t)bytes;
        return 1;
    }
    if (sp_arg_is(a, "--timeout")) return sp_arg_int(a, 1, 86400, &o->timeout_s) ? 1 : -1;
    if (sp_arg_is(a, "--header-timeout")) return sp_arg_int(a, 1, 3600, &o->header_timeout_s) ? 1 : -1;
    if (sp_arg_is(a, "--max-conns")) return sp_arg_int(a, 1, 65536, &o->max_conns) ? 1 : -1;
    if (sp_arg_is(a, "--max-conns-per-ip")) return sp_arg_int(a, 1, 65536, &o->max_conns_per_ip) ? 1 : -1;
    if (sp_arg_is(a, "--shutdown-timeout")) return sp_arg_int(a, 0, 3600, &o->shutdown_timeout_s) ? 1 : -1;
    if (sp_arg_is(a, "--spec")) return sp_arg_str(a, &o->spec_default) ? 1 : -1;
    if (sp_arg_is(a, "--parse-special")) { o->parse_special = true; return 1; }
    return sp_spec_opt(a, &s->spec);
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

/* The sampling of requests that omit fields: llama.cpp's defaults, the
 * model file's general.sampling.* over them, the flags over both. */
static void server_sampling(const sp_engine *e, serve_args *s) {
    sp_sampler_params p = sp_serve_sampling_defaults();
    char warn[256];
    if (sp_serve_sampling_from_gguf(e->model->gguf, &p, warn, sizeof warn))
        fprintf(stderr, "specula serve: warning: %s\n", warn);
    if (!isnan(s->temp)) p.temperature = s->temp;
    if (s->top_k >= 0) p.top_k = s->top_k;
    if (!isnan(s->top_p)) p.top_p = s->top_p;
    if (!isnan(s->min_p)) p.min_p = s->min_p;
    if (!isnan(s->repeat_penalty)) p.repeat_penalty = s->repeat_penalty;
    if (s->seed_set) p.seed = s->seed;
    s->so.sampling = p;
    s->so.seed_set = s->seed_set;
}

/* Serves until SIGINT or SIGTERM (blocked in every thread, taken here). */
static int serve_until_signal(sp_engine *e, serve_args *s, const sigset_t *sigs, sp_err *err) {
    sp_server *srv = sp_server_start(e->ctx, &s->so, err);
    if (!srv) return -1;
    char cache[32] = "off";
    if (s->eo.cache_mib < 0) snprintf(cache, sizeof cache, "unbounded");
    else if (s->eo.cache_mib > 0) snprintf(cache, sizeof cache, "%d MiB", s->eo.cache_mib);
    fprintf(stderr, "specula serve: listening on http://%s:%d (model %s, %d threads, parallel %d, ctx %d, "
            "spec %s, prefix cache %s)\n", s->so.host, sp_server_port(srv), s->so.model_id, e->threads,
            sp_ctx_n_slots(e->ctx), e->n_ctx, s->so.spec_default, cache);
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "specula serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    sp_server_stop(srv);
    fprintf(stderr, "specula serve: stopped\n");
    return 0;
}

static int parse_serve_args(int argc, char **argv, serve_args *s) {
    memset(s, 0, sizeof *s);
    sp_spec_cli_init(&s->spec);
    s->so = sp_server_defaults();
    s->eo.slots = 4;
    s->eo.cache_mib = 1024;
    s->temp = s->top_p = s->min_p = s->repeat_penalty = NAN;
    s->top_k = -1;
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
    if (s->cache_dir && !s->eo.cache_mib) return sp_usage_error("serve", "--cache-dir needs a prefix cache (--cache-ram)");
    if (s->so.cors_origin && !*s->so.cors_origin) return sp_usage_error("serve", "--cors-origin must not be empty");
    sp_err err;
    if (strcmp(s->so.spec_default, "none") && sp_drafter_check_name(s->so.spec_default, &err))
        return sp_usage_error("serve", "--spec: %s", err.msg);
    s->so.draft_max_default = s->spec.draft_max;
    if (s->so.chat_template && !sp_chat_builtin_source(s->so.chat_template)) {
        /* a file: read now, so a bad path is a usage error (freed when serve returns) */
        s->so.chat_template_file = s->so.chat_template;
        if (!(s->so.chat_template_src = sp_read_text_file(s->so.chat_template, "chat template", &err)))
            return sp_usage_error("serve", "--chat-template: '%s' is neither built in (%s) nor a readable file: %s",
                                  s->so.chat_template, sp_chat_builtin_names(), err.msg);
        s->so.chat_template = NULL;
    }
    return 0;
}

#define MAX_DRAFTERS 3

/* The drafters requests may name: ngram, suffix, and the --spec method if
 * it is another one.  Returns how many were made (0 + err on failure). */
static int make_drafters(const sp_engine *e, const serve_args *s, sp_drafter **out, sp_err *err) {
    const char *names[MAX_DRAFTERS] = { "ngram", "suffix", s->so.spec_default };
    int n = 0;
    for (int i = 0; i < MAX_DRAFTERS; i++) {
        if (i == 2 && (!strcmp(names[i], "none") || !strcmp(names[i], "ngram") || !strcmp(names[i], "suffix")))
            break;
        if (!(out[n] = sp_engine_drafter(e, names[i], &s->spec, err))) {
            sp_err_prefix(err, "--spec %s", names[i]);
            while (n > 0) sp_drafter_free(out[--n]);
            return 0;
        }
        n++;
    }
    return n;
}

int sp_cmd_serve(int argc, char **argv) {
    serve_args s;
    const int prc = parse_serve_args(argc, argv, &s);
    if (prc) return prc < 0 ? 0 : prc;
    sp_drafter *drafters[MAX_DRAFTERS] = { NULL };
    int n_drafters = 0;
    sp_err err = { { 0 } };
    /* Every thread started from here on inherits the blocked signals, so
     * only sigwait below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = SP_EXIT_FAIL;
    sp_engine e;
    if (sp_engine_open(&s.eo, &e, &err)) goto done;
    if (!(n_drafters = make_drafters(&e, &s, drafters, &err))) goto close;
    server_sampling(&e, &s);
    char id[256];
    model_id(&s, id, sizeof id);
    s.so.model_id = id;
    s.so.drafters = drafters;
    s.so.n_drafters = n_drafters;
    /* adaptive draft lengths need t(K): measure it (or read it) before
     * the first request rather than during it */
    const sp_cost_curve *cost;
    if (sp_ctx_cost(e.ctx, &cost, &err)) goto close;
    char cache_file[4096];
    if (s.cache_dir) {
        if (sp_engine_cache_file(&e, s.cache_dir, cache_file, sizeof cache_file, &err)) goto close;
        sp_engine_cache_load(&e, cache_file, "serve");
    }
    if (serve_until_signal(&e, &s, &sigs, &err) == 0) {
        rc = 0;
        if (s.cache_dir) sp_engine_cache_save(&e, cache_file, "serve");   /* the scheduler has stopped */
    }
close:
    for (int i = 0; i < n_drafters; i++) sp_drafter_free(drafters[i]);
    sp_engine_close(&e);
done:
    if (rc) fprintf(stderr, "specula serve: %s\n", err.msg);
    free((char *)s.so.chat_template_src);
    return rc;
}

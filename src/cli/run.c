/* specula run: generate text from a prompt, streaming to stdout. */
#include "cli/cli.h"
#include "cli/paths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char run_help[] =
    "usage: specula run [options] -p TEXT\n"
    "\n"
    "Generates text from a prompt and streams it to stdout; statistics go to stderr.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "  -p, --prompt TEXT       the prompt\n"
    "  -f, --file PATH         read the prompt from a file\n"
    "      --chat              wrap the prompt as a user message in the model's chat template\n"
    "      --system TEXT       system message (with --chat)\n"
    "  -n, --n-predict N       max tokens to generate (default 128)\n"
    "      --temp T            temperature, 0 = greedy (default 0.8)\n"
    "      --top-k K           top-k, 0 = off (default 40)\n"
    "      --top-p P           top-p, 1 = off (default 0.95)\n"
    "      --min-p P           min-p, 0 = off (default 0.05)\n"
    "      --repeat-penalty F  repetition penalty, 1 = off (default 1.0)\n"
    "      --repeat-last-n N   tokens the penalties look at, -1 = all (default 64)\n"
    "      --presence-penalty F   (default 0)\n"
    "      --frequency-penalty F  (default 0)\n"
    "      --seed S            sampling seed (default: random, printed)\n"
    "      --stop TEXT         stop when TEXT is generated (repeatable)\n"
    "      --ignore-eos        keep generating after end-of-generation tokens\n"
    "      --spec METHOD       speculative decoding: none (default), ngram, suffix, draft,\n"
    "                          self, or a combination tried in order (e.g. ngram,draft)\n"
    SP_SPEC_OPTS_HELP
    "  -q, --quiet             no statistics on stderr\n"
    "  -h, --help              this help\n";

#define MAX_STOPS 8

typedef struct run_state {
    const sp_tokenizer *tok;
    sp_detok detok;
    bool ignore_eos;
    const char *stops[MAX_STOPS];
    int n_stops;
    sp_stop stop;            /* holds back text that may start a stop string */
    bool stopped;
} run_state;

/* Prints the text the stop strings allow (all of it when final). */
static void print_released(run_state *r, bool final) {
    size_t n;
    const char *s = sp_stop_release(&r->stop, final, &n);
    fwrite(s, 1, n, stdout);
    fflush(stdout);
}

static sp_emit_result on_token(void *ud, int32_t tok, bool drafted) {
    (void)drafted;
    run_state *r = ud;
    if (!r->ignore_eos && sp_tokenizer_is_eog(r->tok, tok)) return SP_EMIT_STOP;
    char buf[512];
    size_t n = sp_detok_push(&r->detok, r->tok, tok, false, buf, sizeof buf);
    if (sp_stop_push(&r->stop, buf, n)) {
        r->stopped = true;
        return SP_EMIT_STOP;
    }
    print_released(r, false);
    return SP_EMIT_CONTINUE;
}

static char *read_file(const char *path, sp_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { sp_err_set(err, "cannot open prompt file '%s'", path); return NULL; }
    size_t cap = 4096, n = 0;
    char *b = sp_xmalloc(cap);
    size_t k;
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n - 1 == 0) b = sp_xrealloc(b, cap *= 2);
    }
    fclose(f);
    b[n] = 0;
    if (strlen(b) != n) { free(b); sp_err_set(err, "prompt file '%s' contains NUL bytes", path); return NULL; }
    return b;
}

int sp_cmd_run(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = 0.8f; sp.top_k = 40; sp.top_p = 0.95f; sp.min_p = 0.05f;
    const char *prompt = NULL, *file = NULL, *system = NULL;
    bool chat = false, quiet = false, seed_set = false;
    int n_predict = 128;
    const char *spec = "none";
    sp_spec_cli so;
    sp_spec_cli_init(&so);
    run_state r = { 0 };
    sp_args a = { "run", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &eo);
        if (c == 0) c = sp_spec_opt(&a, &so);
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(run_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-p|--prompt")) { if (!sp_arg_str(&a, &prompt)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "-f|--file")) { if (!sp_arg_str(&a, &file)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--system")) { if (!sp_arg_str(&a, &system)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--chat")) chat = true;
        else if (sp_arg_is(&a, "-q|--quiet")) quiet = true;
        else if (sp_arg_is(&a, "--ignore-eos")) r.ignore_eos = true;
        else if (sp_arg_is(&a, "-n|--n-predict")) { if (!sp_arg_int(&a, 0, 1 << 20, &n_predict)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--temp|--temperature")) { if (!sp_arg_float(&a, 0, 100, &sp.temperature)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--top-k")) { if (!sp_arg_int(&a, 0, 1 << 24, &sp.top_k)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--top-p")) { if (!sp_arg_float(&a, 1e-6, 1, &sp.top_p)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--min-p")) { if (!sp_arg_float(&a, 0, 1, &sp.min_p)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--repeat-penalty")) { if (!sp_arg_float(&a, 1e-3, 100, &sp.repeat_penalty)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--repeat-last-n")) { if (!sp_arg_int(&a, -1, 1 << 20, &sp.repeat_last_n)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--presence-penalty")) { if (!sp_arg_float(&a, -100, 100, &sp.presence_penalty)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--frequency-penalty")) { if (!sp_arg_float(&a, -100, 100, &sp.frequency_penalty)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--spec")) { if (!sp_arg_str(&a, &spec)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--seed")) { if (!sp_arg_u64(&a, &sp.seed)) return SP_EXIT_USAGE; seed_set = true; }
        else if (sp_arg_is(&a, "--stop")) {
            const char *s;
            if (!sp_arg_str(&a, &s)) return SP_EXIT_USAGE;
            if (!*s) return sp_usage_error("run", "--stop needs a non-empty string");
            if (r.n_stops == MAX_STOPS) return sp_usage_error("run", "at most %d --stop strings", MAX_STOPS);
            r.stops[r.n_stops++] = s;
        }
        else return sp_arg_unknown(&a);
    }
    if (!prompt && !file) return sp_usage_error("run", "no prompt: use -p TEXT or -f FILE");
    if (prompt && file) return sp_usage_error("run", "use either -p or -f, not both");
    if (system && !chat) return sp_usage_error("run", "--system needs --chat");
    {
        sp_err nerr;
        if (strcmp(spec, "none") != 0 && sp_drafter_check_name(spec, &nerr))
            return sp_usage_error("run", "--spec: %s", nerr.msg);
    }
    sp_drafter *drafter = NULL;
    if (!seed_set) sp.seed = sp_hash64(sp_now_ns() ^ (uint64_t)getpid());
    sp_stop_init(&r.stop, r.stops, r.n_stops, NULL);   /* stop strings checked non-empty above */

    sp_err err = { { 0 } };
    char *file_text = NULL, *rendered = NULL;
    sp_engine e;
    sp_tokens toks = { 0 };
    sp_sampler *smp = NULL;
    sp_kv *kv = NULL;
    sp_draft *draft = NULL;
    sp_cost_curve cost;
    int rc = SP_EXIT_FAIL;
    if (file && !(prompt = file_text = read_file(file, &err))) goto fail;
    if (sp_engine_open(&eo, &e, &err)) goto fail;
    if (strcmp(spec, "none") != 0 && !(drafter = sp_engine_drafter(&e, spec, &so, &err))) {
        fprintf(stderr, "specula run: --spec: %s\n", err.msg);
        sp_engine_close(&e);
        free(file_text);
        sp_stop_free(&r.stop);
        return rc;
    }
    r.tok = e.tok;
    const char *text = prompt;
    if (chat) {
        sp_chat_format f = sp_chat_detect(e.model->gguf);
        if (f == SP_CHAT_NONE) { sp_err_set(&err, "--chat: the model has no known chat template"); goto fail_engine; }
        char defsys[1024];
        sp_chat_msg msgs[2];
        int nm = 0;
        if (system) msgs[nm++] = (sp_chat_msg){ "system", system };
        msgs[nm++] = (sp_chat_msg){ "user", prompt };
        if (sp_chat_render(f, msgs, nm, true, sp_chat_default_system(e.model->gguf, defsys, sizeof defsys),
                           &rendered, &err))
            goto fail_engine;
        text = rendered;
    }
    if (sp_tokenize(e.tok, text, strlen(text), sp_tokenizer_add_bos(e.tok), true, &toks, &err)) goto fail_engine;
    if (toks.n == 0) { sp_err_set(&err, "the prompt is empty"); goto fail_engine; }
    if (toks.n >= e.n_ctx) {
        sp_err_set(&err, "the prompt has %d tokens, the context holds %d (raise -c)", toks.n, e.n_ctx);
        goto fail_engine;
    }
    if (sp_sampler_validate(&sp, e.model->hp.n_vocab, &err)) goto fail_engine;
    smp = sp_sampler_create(&sp, e.model->hp.n_vocab);
    for (int i = 0; i < toks.n; i++) sp_sampler_accept(smp, toks.ids[i]);
    kv = sp_kv_create(e.model, e.n_ctx);
    if (!quiet)
        fprintf(stderr, "specula: %s (%s), %d threads, ctx %d, seed %llu\n", e.model->name,
                sp_arch_name(e.model->hp.arch), e.threads, e.n_ctx, (unsigned long long)sp.seed);
    if (drafter) {
        sp_target tgt = sp_target_full(e.model, e.tok, &sp);
        if (!(draft = sp_draft_open(drafter, &tgt, &err))) goto fail_engine;
        if (so.draft_max == SP_DRAFT_ADAPTIVE && sp_cost_get(e.model, e.ws, e.threads, sp_cost_cache_dir(), &cost, &err))
            goto fail_engine;
    }
    sp_gen_config cfg = { .max_tokens = n_predict, .draft_max = drafter ? so.draft_max : 0, .cost = &cost };
    sp_spec_stats st;
    sp_finish fin;
    if (sp_generate(e.model, kv, e.ws, smp, draft, &cfg, toks.ids, toks.n, on_token, &r, &st, &fin, &err))
        goto fail_engine;
    if (!r.stopped) {
        char buf[64];
        size_t n = sp_detok_flush(&r.detok, buf, sizeof buf);
        r.stopped = sp_stop_push(&r.stop, buf, n);
    }
    print_released(&r, true);
    printf("\n");
    fflush(stdout);
    if (!quiet) {
        double pf = sp_ns_to_s(st.prefill_ns);
        fprintf(stderr, "prompt: %lld tokens, prefill %.1f tok/s | generated: %lld tokens, decode %.1f tok/s | "
                "finish: %s | peak RSS %.0f MiB\n", (long long)st.n_prompt, pf > 0 ? st.n_prompt / pf : 0.0,
                (long long)st.emitted, sp_stats_decode_tps(&st), sp_finish_name(fin),
                (double)sp_peak_rss() / (1024.0 * 1024.0));
        if (drafter) {
            char line[1024];
            sp_stats_format(&st, drafter->name, line, sizeof line);
            fprintf(stderr, "%s\n", line);
        }
    }
    rc = 0;
fail_engine:
    sp_draft_close(draft);
    sp_kv_free(kv);
    sp_sampler_free(smp);
    sp_tokens_free(&toks);
    free(rendered);
    sp_engine_close(&e);
fail:
    if (rc) fprintf(stderr, "specula run: %s\n", err.msg);
    free(file_text);
    sp_stop_free(&r.stop);
    sp_drafter_free(drafter);
    return rc;
}

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
    "      --prompt-cache FILE  reuse the KV rows of a prompt prefix saved in FILE by an\n"
    "                          earlier run (same model; a foreign or corrupt file is ignored\n"
    "                          with a warning), and save this run's prompt and answer there\n"
    "      --prompt-cache-ro   read --prompt-cache FILE but do not update it\n"
    "      --ignore-eos        keep generating after end-of-generation tokens\n"
    "      --grammar GBNF      constrain the output to a grammar (llama.cpp's GBNF, rule root)\n"
    "      --grammar-file PATH the grammar from a file\n"
    "  -j, --json-schema JSON  constrain the output to JSON matching a JSON schema\n"
    "      --json-schema-file PATH  the schema from a file\n"
    "      --chat-template NAME  with --chat: a built-in template (chatml, gemma) instead of the\n"
    "                          model's\n"
    "      --spec METHOD       speculative decoding: none (default), ngram, suffix, draft,\n"
    "                          self, eagle, or a combination tried in order (e.g. suffix,eagle);\n"
    "                          under a grammar, the tokens it forces are drafted too, and\n"
    "                          'forced' drafts only those\n"
    "      --no-forced-spans   under a grammar with --spec, draft only the drafter's tokens\n"
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

static sp_emit_result on_token(void *ud, int32_t tok, bool drafted, const float *logits) {
    (void)drafted; (void)logits;
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

/* Where the output's grammar comes from: at most one of these. */
typedef struct run_grammar {
    const char *text, *file, *schema, *schema_file;
} run_grammar;

/* Compiles the grammar the options name (*out stays NULL without one). */
static int grammar_constraint(const run_grammar *gc, sp_grammar **out, sp_err *err) {
    char *text = NULL, *gbnf = NULL;
    const char *src = gc->text;
    if (gc->file && !(src = text = sp_read_text_file(gc->file, "grammar", err))) return -1;
    if (gc->schema || gc->schema_file) {
        const char *js = gc->schema;
        if (gc->schema_file && !(js = text = sp_read_text_file(gc->schema_file, "JSON schema", err))) return -1;
        gbnf = sp_schema_to_gbnf(js, strlen(js), err);
        free(text);
        text = NULL;
        if (!gbnf) return -1;
        src = gbnf;
    }
    if (src) *out = sp_grammar_parse(src, strlen(src), err);
    free(text);
    free(gbnf);
    return src && !*out ? -1 : 0;
}

int sp_cmd_run(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = 0.8f; sp.top_k = 40; sp.top_p = 0.95f; sp.min_p = 0.05f;
    const char *prompt = NULL, *file = NULL, *system = NULL, *prompt_cache = NULL, *tmpl = NULL;
    bool chat = false, quiet = false, seed_set = false, no_forced = false, cache_ro = false;
    run_grammar gc = { 0 };
    sp_grammar *grammar = NULL;
    int n_predict = 128;
    const char *spec = "none";
    sp_spec_cli so;
    sp_spec_cli_init(&so);
    run_state r = { 0 };
    const sp_flag flags[] = {
        { "-p|--prompt", SP_FLAG_STR, &prompt, 0, 0 },
        { "-f|--file", SP_FLAG_STR, &file, 0, 0 },
        { "--system", SP_FLAG_STR, &system, 0, 0 },
        { "--chat", SP_FLAG_SET, &chat, 0, 0 },
        { "-q|--quiet", SP_FLAG_SET, &quiet, 0, 0 },
        { "--ignore-eos", SP_FLAG_SET, &r.ignore_eos, 0, 0 },
        { "-n|--n-predict", SP_FLAG_INT, &n_predict, 0, 1 << 20 },
        { "--temp|--temperature", SP_FLAG_FLOAT, &sp.temperature, 0, 100 },
        { "--top-k", SP_FLAG_INT, &sp.top_k, 0, 1 << 24 },
        { "--top-p", SP_FLAG_FLOAT, &sp.top_p, 1e-6, 1 },
        { "--min-p", SP_FLAG_FLOAT, &sp.min_p, 0, 1 },
        { "--repeat-penalty", SP_FLAG_FLOAT, &sp.repeat_penalty, 1e-3, 100 },
        { "--repeat-last-n", SP_FLAG_INT, &sp.repeat_last_n, -1, 1 << 20 },
        { "--presence-penalty", SP_FLAG_FLOAT, &sp.presence_penalty, -100, 100 },
        { "--frequency-penalty", SP_FLAG_FLOAT, &sp.frequency_penalty, -100, 100 },
        { "--spec", SP_FLAG_STR, &spec, 0, 0 },
        { "--grammar", SP_FLAG_STR, &gc.text, 0, 0 },
        { "--grammar-file", SP_FLAG_STR, &gc.file, 0, 0 },
        { "-j|--json-schema", SP_FLAG_STR, &gc.schema, 0, 0 },
        { "--json-schema-file", SP_FLAG_STR, &gc.schema_file, 0, 0 },
        { "--no-forced-spans", SP_FLAG_SET, &no_forced, 0, 0 },
        { "--prompt-cache", SP_FLAG_STR, &prompt_cache, 0, 0 },
        { "--prompt-cache-ro", SP_FLAG_SET, &cache_ro, 0, 0 },
        { "--chat-template", SP_FLAG_STR, &tmpl, 0, 0 },
    };
    sp_args a = { "run", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &eo);
        if (c == 0) c = sp_spec_opt(&a, &so);
        if (c == 0) c = sp_arg_table(&a, flags, (int)(sizeof flags / sizeof *flags));
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(run_help, stdout); return 0; }
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
    if (tmpl && !chat) return sp_usage_error("run", "--chat-template needs --chat");
    if (cache_ro && !prompt_cache) return sp_usage_error("run", "--prompt-cache-ro needs --prompt-cache FILE");
    if (prompt_cache && !*prompt_cache) return sp_usage_error("run", "--prompt-cache needs a file name");
    if (prompt_cache) eo.cache_mib = -1;      /* everything this run computes goes to the file */
    if (!!gc.text + !!gc.file + !!gc.schema + !!gc.schema_file > 1)
        return sp_usage_error("run", "use one of --grammar, --grammar-file, --json-schema, --json-schema-file");
    const bool forced_only = strcmp(spec, "forced") == 0;
    if (forced_only && !(gc.text || gc.file || gc.schema || gc.schema_file))
        return sp_usage_error("run", "--spec forced needs a grammar or a JSON schema");
    {
        sp_err nerr;
        if (strcmp(spec, "none") != 0 && !forced_only && sp_drafter_check_name(spec, &nerr))
            return sp_usage_error("run", "--spec: %s", nerr.msg);
    }
    sp_drafter *drafter = NULL;
    if (!seed_set) sp.seed = sp_hash64(sp_now_ns() ^ (uint64_t)getpid());
    sp_stop_init(&r.stop, r.stops, r.n_stops, NULL);   /* stop strings checked non-empty above */

    sp_err err = { { 0 } };
    char *file_text = NULL;
    sp_chat_tmpl *ct = NULL;
    sp_engine e;
    sp_tokens toks = { 0 };
    int rc = SP_EXIT_FAIL;
    if (file && !(prompt = file_text = sp_read_text_file(file, "prompt", &err))) goto fail;
    if (grammar_constraint(&gc, &grammar, &err)) goto fail;
    if (sp_engine_open(&eo, &e, &err)) goto fail;
    if (strcmp(spec, "none") != 0 && !forced_only && !(drafter = sp_engine_drafter(&e, spec, &so, &err))) {
        fprintf(stderr, "specula run: --spec: %s\n", err.msg);
        sp_engine_close(&e);
        free(file_text);
        sp_grammar_free(grammar);
        sp_stop_free(&r.stop);
        return rc;
    }
    r.tok = e.tok;
    if (prompt_cache) sp_engine_cache_load(&e, prompt_cache, "run");
    if (chat) {
        if (sp_cli_chat_template(e.model->gguf, e.tok, tmpl, &ct, &err)) goto fail_engine;
        if (!ct) {
            sp_err_set(&err, "--chat: %s has no chat template: use --chat-template NAME|FILE (built in: %s)",
                       e.model->name, sp_chat_builtin_names());
            goto fail_engine;
        }
        sp_chat_msg msgs[2];
        int nm = 0;
        if (system) msgs[nm++] = (sp_chat_msg){ "system", system };
        msgs[nm++] = (sp_chat_msg){ "user", prompt };
        if (sp_chat_tokenize(ct, e.tok, msgs, nm, true, sp_tokenizer_add_bos(e.tok), &toks, &err)) goto fail_engine;
    } else if (sp_tokenize(e.tok, prompt, strlen(prompt), sp_tokenizer_add_bos(e.tok), true, &toks, &err))
        goto fail_engine;
    if (toks.n == 0) { sp_err_set(&err, "the prompt is empty"); goto fail_engine; }
    if (toks.n >= e.n_ctx) {
        sp_err_set(&err, "the prompt has %d tokens, the context holds %d (raise -c)", toks.n, e.n_ctx);
        goto fail_engine;
    }
    if (!quiet)
        fprintf(stderr, "specula: %s (%s), %d threads, ctx %d, seed %llu\n", e.model->name,
                sp_arch_name(e.model->hp.arch), e.threads, e.n_ctx, (unsigned long long)sp.seed);
    sp_seq_params p = sp_seq_default_params();
    p.prompt = toks.ids;
    p.n_prompt = toks.n;
    p.max_tokens = n_predict;
    p.sampling = sp;
    p.penalize_prompt = true;        /* as llama.cpp: penalties see the prompt too */
    p.drafter = drafter;
    p.draft_max = so.draft_max;
    p.grammar = grammar;
    p.forced_spans = (drafter || forced_only) && !no_forced;
    p.emit = on_token;
    p.ud = &r;
    sp_spec_stats st;
    sp_finish fin;
    if (sp_ctx_generate(e.ctx, &p, &st, &fin, &err)) goto fail_engine;
    if (prompt_cache && !cache_ro) sp_engine_cache_save(&e, prompt_cache, "run");
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
        char cached[48] = "";
        if (prompt_cache) snprintf(cached, sizeof cached, " (+%lld cached)", (long long)st.n_cached);
        fprintf(stderr, "prompt: %lld tokens%s, prefill %.1f tok/s | generated: %lld tokens, decode %.1f tok/s | "
                "finish: %s | peak RSS %.0f MiB\n", (long long)st.n_prompt, cached, pf > 0 ? st.n_prompt / pf : 0.0,
                (long long)st.emitted, sp_stats_decode_tps(&st), sp_finish_name(fin),
                (double)sp_peak_rss() / (1024.0 * 1024.0));
        if (drafter || grammar) {
            char line[1024];
            sp_stats_format(&st, drafter ? drafter->name : forced_only ? "forced" : "none", line, sizeof line);
            fprintf(stderr, "%s\n", line);
        }
    }
    rc = 0;
fail_engine:
    sp_tokens_free(&toks);
    sp_chat_tmpl_free(ct);
    sp_engine_close(&e);
fail:
    if (rc) fprintf(stderr, "specula run: %s\n", err.msg);
    free(file_text);
    sp_grammar_free(grammar);
    sp_stop_free(&r.stop);
    sp_drafter_free(drafter);
    return rc;
}

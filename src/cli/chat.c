/* specula chat: an interactive conversation in the terminal.
 *
 * Every turn renders the whole conversation with the model's chat
 * template, and the sequence keeps the longest prefix of it that the
 * context's cache already holds (sp_seq_params.keep_cached): only the new
 * message (and whatever the template re-spells differently) is prefilled.
 * The output is what a cold start over the whole conversation gives
 * (tests/model/test_spec_real.c: test_keep_cached).  A drafter that reads
 * hidden states (eagle) needs them from position 0, so with it every turn
 * prefills the whole conversation.  Drafters are primed with the whole
 * conversation every turn (ngram and suffix match against all of it). */
#include "cli/cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char chat_help[] =
    "usage: specula chat [options]\n"
    "\n"
    "Chats with the model in the terminal, in its chat template.  Each turn prefills only\n"
    "what is new: the conversation so far stays in the cache.  Statistics of each answer go\n"
    "to stderr.\n"
    "\n"
    "In the chat: a line is a message (end a line with \\ to continue it on the next);\n"
    "  /reset          forget the conversation (the system message stays)\n"
    "  /system TEXT    set the system message and start over\n"
    "  /spec METHOD    switch speculative decoding (none, ngram, suffix, eagle, ...)\n"
    "  /quit or Ctrl-D leave; Ctrl-C stops the answer being written\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "      --system TEXT       system message\n"
    "  -n, --n-predict N       max tokens per answer (default 512)\n"
    "      --temp T            temperature, 0 = greedy (default 0.8)\n"
    "      --top-k K, --top-p P, --min-p P   (defaults 40, 0.95, 0.05)\n"
    "      --seed S            sampling seed (default: random, printed)\n"
    "      --spec METHOD       speculative decoding (default suffix; none to turn it off)\n"
    "      --chat-template NAME  a built-in template (chatml, gemma) instead of the model's\n"
    SP_SPEC_OPTS_HELP
    "  -h, --help              this help\n";

static volatile sig_atomic_t g_interrupt;
static void on_sigint(int sig) { (void)sig; g_interrupt = 1; }

typedef struct chat_msg {
    char *role, *content;
} chat_msg;

typedef struct chat {
    sp_engine e;
    sp_spec_cli so;
    sp_sampler_params sp;
    int n_predict;
    char *system;
    chat_msg *msgs;
    int n_msgs, cap_msgs;
    sp_tokens cached;                /* what the context's cache holds, token by token */
    sp_drafter *drafter;
    char spec[64];
    sp_chat_tmpl *tmpl;              /* the model's template, or --chat-template's */
    /* the answer being written */
    sp_tokens answer;
    sp_detok detok;
} chat;

static void add_msg(chat *c, const char *role, const char *content) {
    SP_VEC_GROW(c->msgs, c->cap_msgs, c->n_msgs + 1);
    c->msgs[c->n_msgs++] = (chat_msg){ sp_xstrdup(role), sp_xstrdup(content) };
}

/* Drops the conversation's messages from the n-th on. */
static void drop_msgs(chat *c, int n) {
    for (int i = n; i < c->n_msgs; i++) {
        free(c->msgs[i].role);
        free(c->msgs[i].content);
    }
    c->n_msgs = n;
}

static void reset(chat *c) {
    drop_msgs(c, 0);
    c->cached.n = 0;
    if (c->system) add_msg(c, "system", c->system);
}

static int set_spec(chat *c, const char *method, sp_err *err) {
    sp_drafter *d = NULL;
    if (strcmp(method, "none")) {
        if (sp_drafter_check_name(method, err)) return -1;
        if (!(d = sp_engine_drafter(&c->e, method, &c->so, err))) return -1;
    }
    sp_drafter_free(c->drafter);
    c->drafter = d;
    snprintf(c->spec, sizeof c->spec, "%s", method);
    return 0;
}

static sp_emit_result on_token(void *ud, int32_t tok, bool drafted, const float *logits) {
    (void)drafted; (void)logits;
    chat *c = ud;
    sp_tokens_push(&c->answer, tok);
    if (sp_tokenizer_is_eog(c->e.tok, tok)) return SP_EMIT_STOP;
    char buf[SP_DETOK_CAP(512)];
    const size_t n = sp_detok_push(&c->detok, c->e.tok, tok, false, buf, sizeof buf);
    fwrite(buf, 1, n < sizeof buf ? n : sizeof buf - 1, stdout);
    fflush(stdout);
    return g_interrupt ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

/* The text of the answer's tokens, without a final end-of-generation one. */
static char *answer_text(const chat *c) {
    size_t cap = 1, n = 0;
    for (int i = 0; i < c->answer.n; i++) cap += sp_token_piece(c->e.tok, c->answer.ids[i], false, NULL, 0);
    char *s = sp_xmalloc(cap);
    for (int i = 0; i < c->answer.n; i++) {
        if (sp_tokenizer_is_eog(c->e.tok, c->answer.ids[i])) continue;
        n += sp_token_piece(c->e.tok, c->answer.ids[i], false, s + n, cap - n);
    }
    s[n] = 0;
    return s;
}

/* One turn: the user's message, the model's answer streamed. */
static int turn(chat *c, const char *message, sp_err *err) {
    add_msg(c, "user", message);
    sp_chat_msg *m = sp_xmalloc((size_t)c->n_msgs * sizeof *m);
    for (int i = 0; i < c->n_msgs; i++) m[i] = (sp_chat_msg){ c->msgs[i].role, c->msgs[i].content };
    sp_tokens toks = { 0 };
    int rc = sp_chat_tokenize(c->tmpl, c->e.tok, m, c->n_msgs, true, sp_tokenizer_add_bos(c->e.tok), &toks, err);
    free(m);
    if (rc) {
        drop_msgs(c, c->n_msgs - 1); /* (the message stays out of the conversation) */
        return -1;
    }
    /* the longest prefix the slot holds; at least one token is prefilled.
     * A drafter that reads hidden states cannot start after rows it has
     * not seen: it goes through the engine's prefix cache instead, which
     * keeps its state beside the rows and resumes it */
    int keep = 0;
    const bool taps = c->drafter && (c->drafter->needs & SP_CAP_HIDDEN_TAPS);
    while (!taps && keep < c->cached.n && keep < toks.n - 1 && c->cached.ids[keep] == toks.ids[keep]) keep++;
    if (toks.n - keep + c->n_predict >= c->e.n_ctx) {
        sp_tokens_free(&toks);
        drop_msgs(c, c->n_msgs - 1);
        return sp_err_set(err, "the conversation (%d tokens) and an answer do not fit the context (%d): /reset",
                          toks.n, c->e.n_ctx);
    }
    sp_seq_params p = sp_seq_default_params();
    p.prompt = toks.ids;             /* the drafter sees the whole conversation */
    p.n_prompt = toks.n;
    p.keep_cached = keep;
    p.use_cache = taps;
    p.max_tokens = c->n_predict;
    p.sampling = c->sp;
    p.drafter = c->drafter;
    p.draft_max = c->so.draft_max;
    p.emit = on_token;
    p.ud = c;
    c->answer.n = 0;
    memset(&c->detok, 0, sizeof c->detok);
    g_interrupt = 0;
    sp_spec_stats st;
    sp_finish fin;
    const int id = sp_ctx_add(c->e.ctx, &p, err);
    if (id < 0) {
        sp_tokens_free(&toks);
        drop_msgs(c, c->n_msgs - 1);
        return -1;
    }
    while (sp_ctx_seq_finish(c->e.ctx, id) == SP_FINISH_NONE) sp_ctx_step(c->e.ctx);
    fin = sp_ctx_seq_finish(c->e.ctx, id);
    st = *sp_ctx_seq_stats(c->e.ctx, id);
    const int n_cached = sp_ctx_seq_n_cached(c->e.ctx, id);
    if (fin == SP_FINISH_ERROR) rc = sp_err_set(err, "%s", sp_ctx_seq_error(c->e.ctx, id));
    sp_ctx_remove(c->e.ctx, id);
    char tail[64];
    const size_t tn = sp_detok_flush(&c->detok, tail, sizeof tail);
    fwrite(tail, 1, tn, stdout);
    printf("\n");
    fflush(stdout);
    /* what the cache holds now: the prompt and the answer but its last token */
    c->cached.n = 0;
    for (int i = 0; i < n_cached && i < toks.n + c->answer.n; i++)
        sp_tokens_push(&c->cached, i < toks.n ? toks.ids[i] : c->answer.ids[i - toks.n]);
    char *text = answer_text(c);
    add_msg(c, "assistant", text);
    free(text);
    char line[1024];
    sp_stats_format(&st, c->spec, line, sizeof line);
    fprintf(stderr, "[%lld tokens, %.1f tok/s, %s | prompt %d tokens: %d new, %d cached | %s]\n",
            (long long)st.emitted, sp_stats_decode_tps(&st), g_interrupt ? "stopped" : sp_finish_name(fin),
            toks.n, toks.n - (int)st.n_cached, (int)st.n_cached, c->drafter ? line : "no speculation");
    sp_tokens_free(&toks);
    return rc;
}

/* Reads one message (lines ending in \ continue it); NULL at the end of
 * input.  Ctrl-C at the prompt gives an empty message. */
static char *read_message(void) {
    char *msg = NULL, *line = NULL;
    size_t len = 0, cap = 0, lcap = 0;
    for (;;) {
        errno = 0;
        const ssize_t n = getline(&line, &lcap, stdin);
        if (n < 0) {
            if (errno == EINTR) {        /* Ctrl-C at the prompt */
                clearerr(stdin);
                g_interrupt = 0;
                printf("\n");
                len = 0;
                break;
            }
            free(line);
            if (msg && len) return msg;
            free(msg);
            return NULL;
        }
        size_t k = (size_t)n;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) k--;
        const bool more = k && line[k - 1] == '\\';
        if (more) k--;
        SP_VEC_GROW(msg, cap, len + k + 2);
        memcpy(msg + len, line, k);
        len += k;
        if (!more) break;
        msg[len++] = '\n';
        if (isatty(STDIN_FILENO)) printf("... "), fflush(stdout);
    }
    free(line);
    SP_VEC_GROW(msg, cap, len + 1);
    msg[len] = 0;
    return msg;
}

/* A /command; returns 1 to leave, 0 to go on. */
static int command(chat *c, const char *cmd) {
    sp_err err;
    if (!strcmp(cmd, "/quit") || !strcmp(cmd, "/exit")) return 1;
    if (!strcmp(cmd, "/reset")) {
        reset(c);
        fprintf(stderr, "[conversation reset]\n");
    } else if (!strncmp(cmd, "/system ", 8) && cmd[8]) {
        free(c->system);
        c->system = sp_xstrdup(cmd + 8);
        reset(c);
        fprintf(stderr, "[system message set; conversation reset]\n");
    } else if (!strncmp(cmd, "/spec ", 6) && cmd[6]) {
        if (set_spec(c, cmd + 6, &err)) fprintf(stderr, "[/spec: %s]\n", err.msg);
        else fprintf(stderr, "[speculation: %s]\n", c->spec);
    } else {
        fprintf(stderr, "[unknown command %s: /reset, /system TEXT, /spec METHOD, /quit]\n", cmd);
    }
    return 0;
}

int sp_cmd_chat(int argc, char **argv) {
    chat c = { .n_predict = 512 };
    sp_engine_opts eo = { 0 };
    c.sp = sp_sampler_defaults();
    c.sp.temperature = 0.8f; c.sp.top_k = 40; c.sp.top_p = 0.95f; c.sp.min_p = 0.05f;
    sp_spec_cli_init(&c.so);
    const char *system = NULL, *spec = "suffix", *tmpl = NULL;
    bool seed_set = false;
    const sp_flag flags[] = {
        { "--system", SP_FLAG_STR, &system, 0, 0 },
        { "-n|--n-predict", SP_FLAG_INT, &c.n_predict, 1, 1 << 20 },
        { "--temp|--temperature", SP_FLAG_FLOAT, &c.sp.temperature, 0, 100 },
        { "--top-k", SP_FLAG_INT, &c.sp.top_k, 0, 1 << 24 },
        { "--top-p", SP_FLAG_FLOAT, &c.sp.top_p, 1e-6, 1 },
        { "--min-p", SP_FLAG_FLOAT, &c.sp.min_p, 0, 1 },
        { "--spec", SP_FLAG_STR, &spec, 0, 0 },
        { "--chat-template", SP_FLAG_STR, &tmpl, 0, 0 },
    };
    sp_args a = { "chat", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int r = sp_engine_opt(&a, &eo);
        if (r == 0) r = sp_spec_opt(&a, &c.so);
        if (r == 0) r = sp_arg_table(&a, flags, (int)(sizeof flags / sizeof *flags));
        if (r < 0) return SP_EXIT_USAGE;
        if (r > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(chat_help, stdout); return 0; }
        else if (sp_arg_is(&a, "--seed")) { if (!sp_arg_u64(&a, &c.sp.seed)) return SP_EXIT_USAGE; seed_set = true; }
        else return sp_arg_unknown(&a);
    }
    sp_err err;
    if (strcmp(spec, "none") && sp_drafter_check_name(spec, &err)) return sp_usage_error("chat", "--spec: %s", err.msg);
    if (!seed_set) c.sp.seed = sp_hash64(sp_now_ns() ^ (uint64_t)getpid());
    eo.cache_mib = 256;              /* the prefix cache, for drafters that read hidden states */
    if (sp_engine_open(&eo, &c.e, &err)) {
        fprintf(stderr, "specula chat: %s\n", err.msg);
        return SP_EXIT_FAIL;
    }
    int rc = SP_EXIT_FAIL;
    if (sp_cli_chat_template(c.e.model->gguf, c.e.tok, tmpl, &c.tmpl, &err)) {
        fprintf(stderr, "specula chat: %s%s\n", err.msg, tmpl ? "" : " (use --chat-template NAME|FILE)");
        goto out;
    }
    if (!c.tmpl) {
        fprintf(stderr, "specula chat: %s has no chat template: use --chat-template NAME|FILE (built in: %s)\n",
                c.e.model->name, sp_chat_builtin_names());
        goto out;
    }
    if (set_spec(&c, spec, &err)) {
        fprintf(stderr, "specula chat: --spec: %s\n", err.msg);
        goto out;
    }
    c.system = system ? sp_xstrdup(system) : NULL;
    reset(&c);
    /* Ctrl-C stops an answer (and interrupts a read at the prompt), not the program */
    struct sigaction sa = { 0 };
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "specula chat: %s, %d threads, ctx %d, seed %llu, speculation %s; /quit or Ctrl-D to leave\n",
            c.e.model->name, c.e.threads, c.e.n_ctx, (unsigned long long)c.sp.seed, c.spec);
    for (;;) {
        printf("> ");
        fflush(stdout);
        char *msg = read_message();
        if (!msg) break;
        if (msg[0] == '/') {
            const int leave = command(&c, msg);
            free(msg);
            if (leave) break;
            continue;
        }
        if (msg[strspn(msg, " \t\n")] && turn(&c, msg, &err)) fprintf(stderr, "[error: %s]\n", err.msg);
        free(msg);
    }
    printf("\n");
    rc = 0;
out:
    drop_msgs(&c, 0);
    free(c.msgs);
    free(c.system);
    sp_tokens_free(&c.cached);
    sp_tokens_free(&c.answer);
    sp_drafter_free(c.drafter);
    sp_chat_tmpl_free(c.tmpl);
    sp_engine_close(&c.e);
    return rc;
}

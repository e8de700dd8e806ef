/* specula train-draft: trains an EAGLE-3 draft head for a model, in C, on
 * this machine: self-distillation data made by the model itself from text
 * on the machine (src/train/distill.c), then the head's training
 * (src/train/head_train.c), written as an eagle3 GGUF. */
#include "cli/cli.h"
#include "train/train.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char train_help[] =
    "usage: specula train-draft -m MODEL -o OUT.gguf [options]\n"
    "\n"
    "Trains an EAGLE-3 draft head for MODEL (use it with --spec eagle --draft-head OUT.gguf).\n"
    "1. data: the model reads text found on this machine and answers prompts made from it;\n"
    "   its hidden states at three layers and its next-token distributions are recorded\n"
    "   (kept in --data-file, reused by a later run with the same model and data options);\n"
    "2. training: the head, unrolled for --ttt steps on its own predictions, learns the\n"
    "   model's distributions over a draft vocabulary of the data's most frequent tokens.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "  -o, --output PATH       the head (GGUF, llama.cpp's eagle3 layout)\n"
    "      --data PATH         text file or folder to learn from (repeatable; default: Python's\n"
    "                          library, /usr/share/common-licenses, /usr/share/doc)\n"
    "      --data-file PATH    where the recorded data goes (default OUT.gguf.distill)\n"
    "      --tokens N          tokens of data to record (default 200000)\n"
    "      --answers chat|text the model's own answers: to chat prompts (instruct models,\n"
    "                          the default when the model has a chat template) or as\n"
    "                          continuations of text (pretrained models)\n"
    "      --answer-share F    share of the data's tokens that are the model's answers\n"
    "                          (default 0.5); their prompts count with the text windows,\n"
    "                          so with long prompts a high share records answers only\n"
    "      --doc-share F       share of the answers' prompts made from a snippet of the text;\n"
    "                          chat: requests about it (summaries, answers from it, edits;\n"
    "                          default 0.2), the rest generated everyday requests and\n"
    "                          arithmetic word problems; text: the snippet to continue\n"
    "                          (default 0.3), the rest generated starts of prose and code\n"
    "      --self-requests F   chat: share of the generated requests that the model writes\n"
    "                          itself, given only its template's opening of a user turn\n"
    "                          (default 0); the rest come from templates and word lists\n"
    "      --topics F          chat: share of the template requests whose everyday kinds are\n"
    "                          about a word of the text instead of the lists' topics (default 0)\n"
    "      --draft-vocab N     tokens the head can draft (default 8192)\n"
    "      --head-type T       the head's matrices: q4_1 (default), q5_0, q8_0, f16 or f32\n"
    "      --norm-residual     the head's residual starts from the normed fused state\n"
    "                          (eagle3.norm_before_residual; for models whose hidden states\n"
    "                          are huge, such as Gemma 3)\n"
    "      --ttt N             training-time test steps (default 3)\n"
    "      --loss ce|lk        ce: cross-entropy against the model's distributions (default);\n"
    "                          lk: -log of the acceptance rate sum min(p, q), which spends\n"
    "                          the head's capacity on what verification accepts\n"
    "      --seq-len N         tokens per training sequence (default 256)\n"
    "      --batch N           sequences per optimizer step (default 4)\n"
    "      --epochs N          passes over the data (default 1)\n"
    "      --lr F              peak learning rate (default 0.001)\n"
    "      --seed S            seed of data order, initial weights and sampling (default 1)\n"
    "      --checkpoint PATH   save the training state every 100 steps (default OUT.gguf.ckpt)\n"
    "      --resume PATH       continue from a checkpoint\n"
    "      --eval-every N      held-out acceptance every N steps (default 50)\n"
    "  -h, --help              this help\n";

typedef struct train_args {
    sp_engine_opts eo;
    const char *out, *data_file, *resume, *ckpt, *answers, *head_type, *loss;
    const char *paths[32];
    int n_paths;
    int64_t tokens;
    float answer_share, doc_share, self_share, topic_share;
    sp_head_train_opts ho;
} train_args;

/* A head matrix type by its lower-case name. */
static int type_by_name(const char *name, uint32_t *type) {
    static const struct { const char *name; uint32_t type; } types[] = {
        { "f32", SP_F32 }, { "f16", SP_F16 }, { "q8_0", SP_Q8_0 }, { "q5_0", SP_Q5_0 },
        { "q4_1", SP_Q4_1 },
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(types[i].name, name)) { *type = types[i].type; return 0; }
    return -1;
}

static int parse(int argc, char **argv, train_args *t) {
    memset(t, 0, sizeof *t);
    t->ho = sp_head_train_default_opts();
    t->ho.eval_every = 50;
    t->tokens = 200000;
    t->answer_share = 0.5f;
    t->doc_share = -1;               /* by the kind of answers: see doc_share_for */
    int tokens = 200000;
    const sp_flag flags[] = {
        { "-o|--output", SP_FLAG_STR, &t->out, 0, 0 },
        { "--data-file", SP_FLAG_STR, &t->data_file, 0, 0 },
        { "--resume", SP_FLAG_STR, &t->resume, 0, 0 },
        { "--checkpoint", SP_FLAG_STR, &t->ckpt, 0, 0 },
        { "--answers", SP_FLAG_STR, &t->answers, 0, 0 },
        { "--head-type", SP_FLAG_STR, &t->head_type, 0, 0 },
        { "--loss", SP_FLAG_STR, &t->loss, 0, 0 },
        { "--norm-residual", SP_FLAG_SET, &t->ho.norm_residual, 0, 0 },
        { "--tokens", SP_FLAG_INT, &tokens, 1000, 100000000 },
        { "--answer-share", SP_FLAG_FLOAT, &t->answer_share, 0, 1 },
        { "--doc-share", SP_FLAG_FLOAT, &t->doc_share, 0, 1 },
        { "--self-requests", SP_FLAG_FLOAT, &t->self_share, 0, 1 },
        { "--topics", SP_FLAG_FLOAT, &t->topic_share, 0, 1 },
        { "--draft-vocab", SP_FLAG_INT, &t->ho.draft_vocab, 16, 1 << 20 },
        { "--ttt", SP_FLAG_INT, &t->ho.ttt_steps, 1, 8 },
        { "--seq-len", SP_FLAG_INT, &t->ho.seq_len, 16, 4096 },
        { "--batch", SP_FLAG_INT, &t->ho.batch_seqs, 1, 64 },
        { "--epochs", SP_FLAG_INT, &t->ho.epochs, 1, 1000 },
        { "--lr", SP_FLAG_FLOAT, &t->ho.lr, 1e-6, 1 },
        { "--seed", SP_FLAG_U64, &t->ho.seed, 0, 0 },
        { "--eval-every", SP_FLAG_INT, &t->ho.eval_every, 0, 1 << 30 },
    };
    sp_args a = { "train-draft", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &t->eo);
        if (c == 0) c = sp_arg_table(&a, flags, (int)(sizeof flags / sizeof *flags));
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(train_help, stdout); return -1; }
        if (sp_arg_is(&a, "--data")) {
            if (t->n_paths == 32) return sp_usage_error("train-draft", "at most 32 --data paths");
            if (!sp_arg_str(&a, &t->paths[t->n_paths++])) return SP_EXIT_USAGE;
            continue;
        }
        return sp_arg_unknown(&a);
    }
    if (!t->out) return sp_usage_error("train-draft", "no output: use -o OUT.gguf");
    if (t->answers && strcmp(t->answers, "chat") && strcmp(t->answers, "text"))
        return sp_usage_error("train-draft", "--answers takes chat or text, not '%s'", t->answers);
    if (t->answers && !strcmp(t->answers, "text") && t->self_share > 0)
        return sp_usage_error("train-draft", "--self-requests is for chat answers, not --answers text");
    if (t->answers && !strcmp(t->answers, "text") && t->topic_share > 0)
        return sp_usage_error("train-draft", "--topics is for chat answers, not --answers text");
    if (t->loss && strcmp(t->loss, "ce") && strcmp(t->loss, "lk"))
        return sp_usage_error("train-draft", "--loss takes ce or lk, not '%s'", t->loss);
    t->ho.loss = t->loss && !strcmp(t->loss, "lk") ? SP_TR_LOSS_LK : SP_TR_LOSS_CE;
    if (t->head_type && type_by_name(t->head_type, &t->ho.head_type))
        return sp_usage_error("train-draft", "--head-type takes q8_0, q5_0, q4_1, f16 or f32, not '%s'", t->head_type);
    t->tokens = tokens;
    return 0;
}

/* --doc-share, or its default for the kind of answers: for chat the
 * shipped SmolLM2 head's mix (BENCHMARKS.md, sixth round); for text the
 * Debian corpus is mostly Python and license texts, so most continuations
 * start from generated prose and code (twelfth round). */
static double doc_share_for(const train_args *t, bool chat) {
    return t->doc_share >= 0 ? t->doc_share : chat ? 0.2 : 0.3;
}

/* The default corpus: text every Debian machine with the setup has. */
static int default_paths(const char **paths, char store[][256]) {
    int n = 0;
    glob_t g;
    if (glob("/usr/lib/python3.[0-9]*", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && n < 2; i++) snprintf(store[n], 256, "%s", g.gl_pathv[i]), paths[n] = store[n], n++;
        globfree(&g);
    }
    paths[n++] = "/usr/share/common-licenses";
    paths[n++] = "/usr/share/doc";
    return n;
}

static void data_progress(void *ud, uint64_t tokens, uint64_t goal, uint64_t answers) {
    const uint64_t t0 = *(const uint64_t *)ud;
    const double s = sp_ns_to_s(sp_now_ns() - t0), rate = s > 0 ? (double)tokens / s : 0;
    fprintf(stderr, "\rtrain-draft: data %llu/%llu tokens (%llu from answers), %.0f tok/s, ETA %.0f s   ",
            (unsigned long long)tokens, (unsigned long long)goal, (unsigned long long)answers, rate,
            rate > 0 ? (double)(goal > tokens ? goal - tokens : 0) / rate : 0.0);
}

static void train_progress(void *ud, const sp_head_train_status *st) {
    (void)ud;
    const double eta = st->step > 0 ? st->elapsed_s / (double)st->step * (double)(st->total - st->step) : 0;
    fprintf(stderr, "\rtrain-draft: step %lld/%lld loss %.3f |g| %.2f lr %.2e %.0f tok/s ETA %.0f s   ",
            (long long)st->step, (long long)st->total, (double)st->loss, (double)st->grad_norm, (double)st->lr,
            st->tokens_per_s, eta);
    if (st->n_acc) {
        fprintf(stderr, "\n  held-out acceptance of a chain of 1..%d drafts:", st->n_acc);
        for (int j = 0; j < st->n_acc; j++) fprintf(stderr, " %.3f", st->acc[j]);
        fprintf(stderr, "\n");
    }
}

/* Whether an existing data file was made by this model from the same
 * recipe (corpus, sizes, shares, taps, seed); says why when it was not. */
static bool data_matches(const char *path, const sp_model *m, const sp_distill_opts *d) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    sp_err err;
    sp_distill *ds = sp_distill_open(path, &err);
    if (!ds) { fprintf(stderr, "train-draft: %s is unusable (%s); making it again\n", path, err.msg); return false; }
    const sp_distill_info *in = sp_distill_info_of(ds);
    const bool model = !strcmp(in->fingerprint, m->fingerprint) && !memcmp(in->tap_layers, d->tap_layers, 12);
    const bool recipe = in->recipe == sp_distill_recipe(d);
    sp_distill_close(ds);
    if (!model) fprintf(stderr, "train-draft: %s holds another model's data; making it again\n", path);
    else if (!recipe)
        fprintf(stderr, "train-draft: %s was recorded with other data options (corpus, --tokens, --seq-len, "
                "shares or seed); making it again\n", path);
    return model && recipe;
}

/* Does the model render chat prompts (its own template or its architecture's)? */
static bool has_chat_template(const sp_engine *e) {
    sp_chat_tmpl *ct = NULL;
    sp_err err;
    const bool yes = sp_chat_tmpl_for_model(e->model->gguf, e->tok, NULL, NULL, NULL, &ct, &err) == 0 && ct;
    sp_chat_tmpl_free(ct);
    return yes;
}

int sp_cmd_train_draft(int argc, char **argv) {
    train_args t;
    const int prc = parse(argc, argv, &t);
    if (prc) return prc < 0 ? 0 : prc;
    char dpath[4096], cpath[4096], cmdline[2048] = "specula";
    snprintf(dpath, sizeof dpath, "%s.distill", t.out);
    snprintf(cpath, sizeof cpath, "%s.ckpt", t.out);
    for (int i = 1; i < argc; i++)
        snprintf(cmdline + strlen(cmdline), sizeof cmdline - strlen(cmdline), " %s", argv[i]);
    if (!t.eo.slots) t.eo.slots = 8;               /* answers are generated 8 at a time */
    if (!t.eo.ctx) t.eo.ctx = 1024;
    sp_engine e;
    sp_err err;
    if (sp_engine_open(&t.eo, &e, &err)) { fprintf(stderr, "specula train-draft: %s\n", err.msg); return SP_EXIT_FAIL; }
    const int L = e.model->hp.n_layer;
    const int32_t taps[3] = { 2, L / 2, L - 3 };  /* llama.cpp's and EAGLE's default */
    memcpy(t.ho.tap_layers, taps, sizeof taps);
    t.ho.command = cmdline;
    t.ho.ckpt_path = t.ckpt ? t.ckpt : cpath;
    t.ho.resume = t.resume;
    t.ho.progress = train_progress;
    if (t.ho.draft_vocab > e.model->hp.n_vocab) t.ho.draft_vocab = e.model->hp.n_vocab;
    const char *data = t.data_file ? t.data_file : dpath;
    int rc = SP_EXIT_FAIL;
    const uint64_t t0 = sp_now_ns();
    char store[4][256];
    const char *paths[36];
    sp_distill_stats stats = { 0 };
    int n = t.n_paths;
    memcpy(paths, t.paths, (size_t)n * sizeof *paths);
    if (!n) n = default_paths(paths, store);
    const bool chat = t.answers ? !strcmp(t.answers, "chat") : has_chat_template(&e);
    sp_distill_opts d = { .paths = paths, .n_paths = n, .max_tokens = t.tokens, .seq_len = t.ho.seq_len,
                          .top_k = 16, .answer_share = t.answer_share, .doc_share = doc_share_for(&t, chat),
                          .answer_tokens = t.ho.seq_len - 16, .chat = chat, .seed = t.ho.seed,
                          .self_share = chat ? t.self_share : 0, .topic_share = chat ? t.topic_share : 0,
                          .stats = &stats };
    memcpy(d.tap_layers, taps, sizeof taps);
    if (!chat && (t.self_share > 0 || t.topic_share > 0)) {
        fprintf(stderr, "specula train-draft: %s needs chat answers, and %s has no chat template\n",
                t.self_share > 0 ? "--self-requests" : "--topics", e.model->name);
        goto done;
    }
    if (!data_matches(data, e.model, &d)) {
        fprintf(stderr, "train-draft: recording %lld tokens of %s data with %s into %s\n", (long long)t.tokens,
                d.chat ? "chat" : "text", e.model->name, data);
        if (sp_distill_make(e.ctx, &d, data, data_progress, (void *)&t0, &err)) goto out;
        fprintf(stderr, "\ntrain-draft: data done in %.0f s\n", sp_ns_to_s(sp_now_ns() - t0));
        if (d.self_share > 0)
            fprintf(stderr, "train-draft: %d prompts were requests the model wrote (%llu asked for)\n",
                    stats.self_requests, (unsigned long long)stats.self_made);
        if (d.topic_share > 0)
            fprintf(stderr, "train-draft: %d prompts were requests about a word of the text (the first: %s)\n",
                    stats.topic_requests, stats.first_topic[0] ? stats.first_topic : "none");
    }
    sp_distill *ds = sp_distill_open(data, &err);
    if (!ds) goto out;
    const sp_distill_info *in = sp_distill_info_of(ds);
    fprintf(stderr, "train-draft: %u sequences, %llu tokens; head: draft vocabulary %d, %d TTT steps, %d threads, "
            "kernel %s\n", in->n_seqs, (unsigned long long)in->n_tokens, t.ho.draft_vocab, t.ho.ttt_steps, e.threads,
            sp_tr_gemm_kernel());
    const uint64_t t1 = sp_now_ns();
    const int trc = sp_head_train(e.model, e.pool, ds, &t.ho, t.out, &err);
    sp_distill_close(ds);
    if (trc) goto out;
    fprintf(stderr, "\ntrain-draft: wrote %s (training %.0f s, total %.0f s)\n", t.out, sp_ns_to_s(sp_now_ns() - t1),
            sp_ns_to_s(sp_now_ns() - t0));
    rc = 0;
out:
    if (rc) fprintf(stderr, "\nspecula train-draft: %s\n", err.msg);
done:
    sp_engine_close(&e);
    return rc;
}

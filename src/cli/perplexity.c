/* specula perplexity: exp(mean negative log-likelihood) of a text.
 *
 * Method (llama.cpp's llama-perplexity, so the numbers compare): the text
 * is tokenized without special tokens and cut into consecutive
 * non-overlapping chunks of ctx tokens (a partial tail is dropped); when the
 * model uses BOS, a chunk's first token is replaced by BOS.  Each chunk is
 * evaluated from an empty cache and token i+1 is scored from the logits at
 * i.  Two figures: over every token after the first of a chunk, and over
 * the second half of each chunk only (llama-perplexity's default).
 *
 * KL divergence (llama-perplexity's --kl-divergence-base / --kl-divergence):
 * a base run saves, for every scored position, the base distribution's
 * KLD_TOP most likely tokens with their log-probabilities; a later run
 * (other KV cache types, kernels, weights of the same vocabulary) reads the
 * file and reports KL(base || this run) per position -- mean, median, p99,
 * max -- and how often both runs' most likely token agree.  Unlike
 * llama.cpp, which stores every log-probability (hundreds of MB), the
 * tokens outside the base's top KLD_TOP form one bucket (the base's
 * remaining mass against this run's): that sum is a lower bound of the full
 * KL which it misses only by what the tail's shape contributes.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char ppl_help[] =
    "usage: specula perplexity [options] -f FILE\n"
    "\n"
    "Perplexity of a model on a UTF-8 text file, computed as llama.cpp's llama-perplexity:\n"
    "chunks of --ctx-size tokens (default 512), first token of a chunk replaced by BOS when\n"
    "the model uses one; reports all scored tokens and the second halves of chunks.\n"
    "\n"
    "options:\n"
    SP_ENGINE_OPTS_HELP
    "  -f, --file PATH         the text\n"
    "      --chunks N          score only the first N chunks\n"
    "      --kl-divergence-base FILE  alone: save this run's distributions to FILE; with\n"
    "                          --kl-divergence: compare this run against FILE's\n"
    "      --kl-divergence     report KL(base || this run) and top-1 agreement per token\n"
    "  -h, --help              this help\n";

/* log-softmax of logits at `target`, computed in double. */
static double log_prob(const float *logits, int n, int32_t target) {
    float max = logits[0];
    for (int i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - max));
    return (double)(logits[target] - max) - log(sum);
}

/* ----------------------------------------------------------------------------
 * KL divergence against a saved base run
 * ------------------------------------------------------------------------- */

#define KLD_MAGIC "SPKLD001"
#define KLD_TOP 256

typedef struct kld_header {
    char magic[8];
    uint32_t n_vocab, ctx, n_chunks, top;
    uint64_t text_hash;              /* FNV-1a of the scored chunks' tokens */
    char fingerprint[24];            /* the base model's (a run may use other weights of its vocabulary) */
} kld_header;

typedef struct kld {
    FILE *f;
    bool compare;
    double *kl;                      /* (n) per position, when comparing */
    long n, cap;
    long agree;
} kld;

/* The log-softmax of logits (n) in double, into lp. */
static void log_softmax(const float *logits, int n, double *lp) {
    float max = logits[0];
    for (int i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - max));
    const double ls = log(sum);
    for (int i = 0; i < n; i++) lp[i] = (double)(logits[i] - max) - ls;
}

/* The KLD_TOP largest entries of lp, best first. */
static void top_of(const double *lp, int n, int32_t *ids) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == KLD_TOP && !(lp[i] > lp[ids[KLD_TOP - 1]])) continue;
        int j = m < KLD_TOP ? m++ : KLD_TOP - 1;
        while (j > 0 && lp[i] > lp[ids[j - 1]]) { ids[j] = ids[j - 1]; j--; }
        ids[j] = i;
    }
}

/* One scored position: saves the base's top tokens, or compares with them. */
static int kld_position(kld *k, const double *lp, int V, sp_err *err) {
    int32_t ids[KLD_TOP];
    float blp[KLD_TOP];
    if (!k->compare) {
        top_of(lp, V, ids);
        for (int i = 0; i < KLD_TOP; i++) blp[i] = (float)lp[ids[i]];
        if (fwrite(ids, sizeof ids, 1, k->f) != 1 || fwrite(blp, sizeof blp, 1, k->f) != 1)
            return sp_err_set(err, "--kl-divergence-base: write failed");
        return 0;
    }
    if (fread(ids, sizeof ids, 1, k->f) != 1 || fread(blp, sizeof blp, 1, k->f) != 1)
        return sp_err_set(err, "--kl-divergence-base: the file ends early (another text or -c?)");
    double kl = 0, pin = 0, qin = 0;
    for (int i = 0; i < KLD_TOP; i++) {
        if (ids[i] < 0 || ids[i] >= V || !isfinite(blp[i]) || blp[i] > 0)
            return sp_err_set(err, "--kl-divergence-base: a bad record");
        const double p = exp((double)blp[i]);
        kl += p * ((double)blp[i] - lp[ids[i]]);
        pin += p;
        qin += exp(lp[ids[i]]);
    }
    const double pt = 1 - pin, qt = 1 - qin;
    if (pt > 1e-12 && qt > 1e-12) kl += pt * log(pt / qt);
    int best = 0;
    for (int i = 1; i < V; i++) if (lp[i] > lp[best]) best = i;
    k->agree += best == ids[0];
    SP_VEC_GROW(k->kl, k->cap, k->n + 1);
    k->kl[k->n++] = kl < 0 ? 0 : kl;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void kld_report(kld *k) {
    qsort(k->kl, (size_t)k->n, sizeof *k->kl, cmp_double);
    double sum = 0;
    for (long i = 0; i < k->n; i++) sum += k->kl[i];
    const long p99 = (long)(0.99 * (double)(k->n - 1));
    printf("KL divergence vs base: mean %.6f, median %.6f, p99 %.6f, max %.6f over %ld tokens; "
           "top-1 agreement %.2f %%\n", sum / (double)k->n, k->kl[k->n / 2], k->kl[p99], k->kl[k->n - 1], k->n,
           100.0 * (double)k->agree / (double)k->n);
}

static uint64_t chunks_hash(const int32_t *ids, long n) {
    uint64_t h = 1469598103934665603ull;
    for (long i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ids[i]) * 1099511628211ull;
    return h;
}

/* Opens the base file: to write (base run) or to read and check against
 * this run (model vocabulary, context, chunks, text). */
static int kld_open(kld *k, const char *path, bool compare, const sp_model *m, int ctx, int n_chunks,
                    uint64_t text_hash, sp_err *err) {
    kld_header h = { .n_vocab = (uint32_t)m->hp.n_vocab, .ctx = (uint32_t)ctx, .n_chunks = (uint32_t)n_chunks,
                     .top = KLD_TOP, .text_hash = text_hash };
    memcpy(h.magic, KLD_MAGIC, 8);
    snprintf(h.fingerprint, sizeof h.fingerprint, "%s", m->fingerprint);
    k->compare = compare;
    if (!(k->f = fopen(path, compare ? "rb" : "wb")))
        return sp_err_set(err, "--kl-divergence-base: cannot %s %s", compare ? "read" : "write", path);
    if (!compare) return fwrite(&h, sizeof h, 1, k->f) == 1 ? 0 : sp_err_set(err, "--kl-divergence-base: write failed");
    kld_header b;
    if (fread(&b, sizeof b, 1, k->f) != 1 || memcmp(b.magic, KLD_MAGIC, 8))
        return sp_err_set(err, "--kl-divergence-base: %s is not a base run's file", path);
    if (b.n_vocab != h.n_vocab || b.ctx != h.ctx || b.n_chunks != h.n_chunks || b.top != h.top ||
        b.text_hash != h.text_hash)
        return sp_err_set(err, "--kl-divergence-base: %s was made with another vocabulary, text, -c or --chunks "
                          "(vocabulary %u/%u, ctx %u/%u, chunks %u/%u)", path, b.n_vocab, h.n_vocab, b.ctx, h.ctx,
                          b.n_chunks, h.n_chunks);
    return 0;
}

int sp_cmd_perplexity(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    eo.ctx = 512;
    const char *file = NULL, *kld_file = NULL;
    int max_chunks = 0;
    bool kld_compare = false;
    sp_args a = { "perplexity", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &eo);
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(ppl_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-f|--file")) { if (!sp_arg_str(&a, &file)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--chunks")) { if (!sp_arg_int(&a, 1, 1 << 20, &max_chunks)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--kl-divergence-base")) { if (!sp_arg_str(&a, &kld_file)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--kl-divergence")) kld_compare = true;
        else return sp_arg_unknown(&a);
    }
    if (!file) return sp_usage_error("perplexity", "no text: use -f FILE");
    if (kld_compare && !kld_file) return sp_usage_error("perplexity", "--kl-divergence needs --kl-divergence-base FILE");
    size_t len = 0;
    FILE *f = fopen(file, "rb");
    if (!f) { fprintf(stderr, "specula perplexity: cannot open '%s'\n", file); return SP_EXIT_FAIL; }
    char *text = NULL;
    size_t cap = 0, k;
    char buf[65536];
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        SP_VEC_GROW(text, cap, len + k + 1);
        memcpy(text + len, buf, k);
        len += k;
    }
    fclose(f);
    if (!len) { fprintf(stderr, "specula perplexity: '%s' is empty\n", file); free(text); return SP_EXIT_FAIL; }

    sp_err err;
    sp_engine e;
    kld kd = { 0 };
    double *lp = NULL;
    if (sp_engine_open(&eo, &e, &err)) {
        fprintf(stderr, "specula perplexity: %s\n", err.msg);
        free(text);
        return SP_EXIT_FAIL;
    }
    int rc = SP_EXIT_FAIL;
    sp_tokens toks = { 0 };
    const int V = e.model->hp.n_vocab, ROWS = 32;
    float *logits = sp_alloc_aligned((size_t)ROWS * V * sizeof(float));
    int32_t *chunk = sp_xmalloc((size_t)e.n_ctx * sizeof(int32_t));
    sp_kv_types kt = eo.kv;
    if (!kt.k) kt.k = SP_F16;
    if (!kt.v) kt.v = SP_F16;
    sp_kv *kv = sp_kv_types_check(e.model, &kt, &err) ? NULL : sp_kv_create_typed(e.model, e.n_ctx, &kt);
    if (!kv) goto done;
    if (sp_tokenize(e.tok, text, len, false, false, &toks, &err)) goto done;
    const bool bos = sp_tokenizer_add_bos(e.tok) && sp_tokenizer_bos(e.tok) >= 0;
    const int C = e.n_ctx;
    if (toks.n < C) {
        sp_err_set(&err, "the text has %d tokens, fewer than one chunk of %d (lower -c)", toks.n, C);
        goto done;
    }
    double nll = 0, nll2 = 0;
    long scored = 0, scored2 = 0;
    int n_chunks = toks.n / C;
    if (max_chunks && n_chunks > max_chunks) n_chunks = max_chunks;
    if (kld_file && kld_open(&kd, kld_file, kld_compare, e.model, C, n_chunks,
                             chunks_hash(toks.ids, (long)n_chunks * C), &err))
        goto done;
    if (kld_file) lp = sp_xmalloc((size_t)V * sizeof *lp);
    uint64_t t0 = sp_now_ns();
    for (int ch = 0; ch < n_chunks; ch++) {
        memcpy(chunk, toks.ids + (size_t)ch * C, (size_t)C * sizeof(int32_t));
        if (bos) chunk[0] = sp_tokenizer_bos(e.tok);
        sp_kv_trim(kv, 0);
        /* rows i predict chunk[i + 1] */
        for (int i = 0; i < C - 1; i += ROWS) {
            int r = C - 1 - i < ROWS ? C - 1 - i : ROWS;
            if (sp_model_forward(e.model, kv, e.ws, chunk + i, r, SP_LOGITS_ALL, logits, &err)) goto done;
            for (int j = 0; j < r; j++) {
                double l = -log_prob(logits + (size_t)j * V, V, chunk[i + j + 1]);
                if (lp) {
                    log_softmax(logits + (size_t)j * V, V, lp);
                    if (kld_position(&kd, lp, V, &err)) goto done;
                }
                nll += l;
                scored++;
                if (i + j >= C / 2) { nll2 += l; scored2++; }
            }
        }
        fprintf(stderr, "\rchunk %d/%d: perplexity so far %.4f", ch + 1, n_chunks, exp(nll / (double)scored));
    }
    fprintf(stderr, "\n");
    double secs = sp_ns_to_s(sp_now_ns() - t0);
    printf("perplexity: %.4f over %ld tokens, second halves %.4f over %ld tokens "
           "(%d chunks of %d, %s, %.1f s)\n", exp(nll / (double)scored), scored,
           exp(nll2 / (double)scored2), scored2, n_chunks, C, bos ? "BOS first" : "no BOS", secs);
    if (kld_file && kld_compare) {
        if (fgetc(kd.f) != EOF) { sp_err_set(&err, "--kl-divergence-base: the file has more positions"); goto done; }
        kld_report(&kd);
    } else if (kld_file) {
        printf("saved the base distributions of %ld tokens to %s\n", scored, kld_file);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "specula perplexity: %s\n", err.msg);
    if (kd.f && fclose(kd.f) != 0 && !rc) {
        fprintf(stderr, "specula perplexity: --kl-divergence-base: write failed\n");
        rc = SP_EXIT_FAIL;
    }
    if (rc && kld_file && !kld_compare) remove(kld_file);
    free(kd.kl);
    free(lp);
    sp_kv_free(kv);
    free(chunk);
    sp_free_aligned(logits);
    sp_tokens_free(&toks);
    sp_engine_close(&e);
    free(text);
    return rc;
}

/* specula perplexity: exp(mean negative log-likelihood) of a text.
 *
 * Method (llama.cpp's llama-perplexity, so the numbers compare): the text
 * is tokenized without special tokens and cut into consecutive
 * non-overlapping chunks of ctx tokens (a partial tail is dropped); when the
 * model uses BOS, a chunk's first token is replaced by BOS.  Each chunk is
 * evaluated from an empty cache and token i+1 is scored from the logits at
 * i.  Two figures: over every token after the first of a chunk, and over
 * the second half of each chunk only (llama-perplexity's default).
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
    "  -h, --help              this help\n";

/* log-softmax of logits at `target`, computed in double. */
static double log_prob(const float *logits, int n, int32_t target) {
    float max = logits[0];
    for (int i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(logits[i] - max));
    return (double)(logits[target] - max) - log(sum);
}

int sp_cmd_perplexity(int argc, char **argv) {
    sp_engine_opts eo = { 0 };
    eo.ctx = 512;
    const char *file = NULL;
    int max_chunks = 0;
    sp_args a = { "perplexity", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        int c = sp_engine_opt(&a, &eo);
        if (c < 0) return SP_EXIT_USAGE;
        if (c > 0) continue;
        if (sp_arg_is(&a, "-h|--help")) { fputs(ppl_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-f|--file")) { if (!sp_arg_str(&a, &file)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--chunks")) { if (!sp_arg_int(&a, 1, 1 << 20, &max_chunks)) return SP_EXIT_USAGE; }
        else return sp_arg_unknown(&a);
    }
    if (!file) return sp_usage_error("perplexity", "no text: use -f FILE");
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
    sp_kv *kv = sp_kv_create(e.model, e.n_ctx);
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
    rc = 0;
done:
    if (rc) fprintf(stderr, "specula perplexity: %s\n", err.msg);
    sp_kv_free(kv);
    free(chunk);
    sp_free_aligned(logits);
    sp_tokens_free(&toks);
    sp_engine_close(&e);
    free(text);
    return rc;
}

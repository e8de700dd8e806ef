/* generate: the smallest useful program on specula's public API.
 *
 *   cc generate.c $(pkg-config --cflags --libs specula) -o generate
 *   ./generate MODEL.gguf "Once upon a time" [METHOD] [N]
 *
 * Streams N (default 32) greedy tokens after the prompt to stdout; with
 * METHOD (ngram, suffix, ...) the same tokens come out, fewer target passes
 * make them, and the statistics on stderr say how many drafts were taken. */
#include <specula.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool print_token(void *user_data, int32_t token, bool drafted) {
    (void)drafted;
    const specula_model *m = user_data;
    if (specula_token_is_eog(m, token)) return true;
    char piece[256];
    specula_detokenize(m, &token, 1, false, piece, sizeof piece, NULL);
    fputs(piece, stdout);
    fflush(stdout);
    return false;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [METHOD] [N]\n", argv[0]);
        return 2;
    }
    if (specula_api_version() != SPECULA_API_VERSION) {
        fprintf(stderr, "libspecula has API version %d, this program was built for %d\n",
                specula_api_version(), SPECULA_API_VERSION);
        return 1;
    }
    specula_error err;
    specula_model *m = specula_model_load(argv[1], NULL, &err);
    if (!m) { fprintf(stderr, "%s\n", err.message); return 1; }
    specula_ctx *c = specula_ctx_create(m, NULL, &err);
    specula_drafter *d = NULL;
    if (c && argc > 3 && strcmp(argv[3], "none") != 0) {
        specula_drafter_params dp = specula_drafter_default_params();
        dp.method = argv[3];
        d = specula_drafter_create(c, &dp, &err);
    }
    int rc = 1;
    int32_t prompt[1024];
    const int n = c && (argc <= 3 || d || !strcmp(argv[3], "none"))
                      ? specula_tokenize(m, argv[2], strlen(argv[2]), true, true, prompt, 1024, &err) : -1;
    if (n > 1024) snprintf(err.message, sizeof err.message, "the prompt is longer than 1024 tokens");
    if (n > 0 && n <= 1024) {
        specula_seq_params sp = specula_seq_default_params();
        sp.prompt = prompt;
        sp.n_prompt = n;
        sp.max_tokens = argc > 4 ? atoi(argv[4]) : 32;
        sp.drafter = d;
        sp.on_token = print_token;
        sp.user_data = m;
        specula_stats st;
        specula_finish fin;
        if (specula_generate(c, &sp, &st, &fin, &err) == 0) {
            printf("\n");
            fprintf(stderr, "%lld tokens (%s), %lld passes, drafted %lld, accepted %lld\n",
                    (long long)st.n_generated, specula_finish_name(fin), (long long)st.rounds,
                    (long long)st.drafted, (long long)st.accepted);
            rc = 0;
        }
    }
    if (rc) fprintf(stderr, "%s\n", err.message);
    specula_drafter_free(d);
    specula_ctx_free(c);
    specula_model_free(m);
    return rc;
}

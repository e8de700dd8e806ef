/* Self-distillation data on the real model (train/distill.c): the answers
 * are recorded while the model writes them (taps from the round loop,
 * distributions from the emitted tokens' logits), with no second pass.
 * Each answer record must hold what one plain forward over its tokens
 * gives: the same taps bit for bit, the same top-k ids and f16
 * probabilities from the end of the prompt on; the prompt's rows labelled
 * with the token that follows; no end-of-turn token inside; and for greedy
 * answers, each token the top-1 of the row before it.  A row missed, one
 * given twice or a distribution off by one row fails the test. */
#include "spec_fixture.h"
#include "train/train.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOPK 16

/* The reference top-k of a logits row, as distill.c computes it: softmax
 * over the whole vocabulary in double, ties to the lower id. */
static void ref_top_k(const float *row, int V, int32_t *ids, uint16_t *probs) {
    float max = row[0];
    for (int i = 1; i < V; i++) max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - max);
    for (int j = 0; j < TOPK; j++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            bool taken = false;
            for (int q = 0; q < j; q++) taken |= ids[q] == i;
            if (!taken && (best < 0 || row[i] > row[best])) best = i;
        }
        ids[j] = best;
        probs[j] = sp_f32_to_f16((float)(exp((double)row[best] - max) / sum));
    }
}

static const char *const corpus_text =
    "The river rises in the hills north of the town and runs south for forty miles.\n"
    "In spring the water is high and cold; in late summer it is low and warm.\n"
    "Farmers along its banks grow wheat, barley and apples, and sell them at the market\n"
    "on Saturdays. The old bridge was built in 1820 and repaired in 1952.\n"
    "A new footpath now follows the river from the bridge to the mill.\n";

/* Records data from a corpus of corpus_text six times over with o (its
 * paths and tap layers set here) in a context of `slots` slots, and opens
 * it (the files are gone once it is open: the mapping keeps the data). */
static sp_distill *distill_river(fixture *f, int slots, sp_distill_opts o) {
    sp_err err;
    char dir[] = "/tmp/specula-distill-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[128], data[128];
    snprintf(file, sizeof file, "%s/river.txt", dir);
    snprintf(data, sizeof data, "%s/out.distill", dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    for (int i = 0; i < 6; i++) fputs(corpus_text, fp);
    fclose(fp);
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_slots = slots;
    cp.batch_rows = 64;
    cp.pool = f->pool;
    sp_ctx *c = sp_ctx_create(f->m, f->tok, &cp, &err);
    if (!c) fail_msg("context: %s", err.msg);
    const char *paths[1] = { dir };
    const int L = f->m->hp.n_layer;
    o.paths = paths;
    o.n_paths = 1;
    o.tap_layers[0] = 2;
    o.tap_layers[1] = L / 2;
    o.tap_layers[2] = L - 3;
    if (sp_distill_make(c, &o, data, NULL, NULL, &err)) fail_msg("distill: %s", err.msg);
    sp_ctx_free(c);
    sp_distill *ds = sp_distill_open(data, &err);
    if (!ds) fail_msg("open: %s", err.msg);
    unlink(data);
    unlink(file);
    rmdir(dir);
    return ds;
}

static void test_answers_recorded_in_generation(void **state) {
    fixture *f = *state;
    sp_err err;
    const sp_distill_opts o = { .max_tokens = 600, .seq_len = 192, .top_k = TOPK, .answer_share = 1.0,
                                .answer_tokens = 64, .chat = true, .doc_share = 0.5, .seed = 5 };
    sp_distill *ds = distill_river(f, 4, o);
    const sp_distill_info *in = sp_distill_info_of(ds);
    assert_int_equal(in->top_k, TOPK);
    const int d = f->m->hp.n_embd, V = f->m->hp.n_vocab, W = 3 * d;
    float *logits = malloc((size_t)64 * V * sizeof(float)), *taps = malloc((size_t)64 * W * sizeof(float));
    int answers = 0, greedy_rows = 0;
    for (uint32_t s = 0; s < in->n_seqs; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, s, &q);
        if (q.loss_from == 0) continue;              /* a text window (recorded by a forward) */
        answers++;
        assert_true(q.n > q.loss_from + 1);
        for (int i = q.loss_from + 1; i < q.n; i++)
            assert_false(sp_tokenizer_is_eog(f->tok, q.tokens[i]));
        for (int i = 0; i < q.loss_from; i++) {      /* prompt rows: the next token, certain */
            assert_int_equal(q.ids[(size_t)i * TOPK], q.tokens[i + 1]);
            assert_int_equal(q.probs[(size_t)i * TOPK], sp_f32_to_f16(1.0f));
        }
        /* one plain forward over the record's tokens, 64 rows a pass */
        sp_kv *kv = sp_kv_create(f->m, q.n);
        bool greedy = true;
        for (int at = 0; at < q.n; at += 64) {
            const int n = q.n - at < 64 ? q.n - at : 64;
            sp_fwd_seq fw = { .kv = kv, .tokens = q.tokens + at, .n = n, .mode = SP_LOGITS_ALL, .logits = logits,
                              .tap_layers = in->tap_layers, .n_taps = 3, .taps = taps };
            assert_int_equal(sp_model_forward_batch(f->m, f->ws, &fw, 1, &err), 0);
            for (int r = 0; r < n; r++) {
                const int row = at + r;
                for (int e = 0; e < W; e++)
                    if (q.taps[(size_t)row * W + e] != sp_f32_to_bf16(taps[(size_t)r * W + e]))
                        fail_msg("sequence %u row %d: tap %d differs from a plain forward", s, row, e);
                if (row < q.loss_from) continue;
                int32_t ids[TOPK];
                uint16_t probs[TOPK];
                ref_top_k(logits + (size_t)r * V, V, ids, probs);
                for (int j = 0; j < TOPK; j++) {
                    if (q.ids[(size_t)row * TOPK + j] != ids[j] || q.probs[(size_t)row * TOPK + j] != probs[j])
                        fail_msg("sequence %u row %d: top-k entry %d differs from a plain forward", s, row, j);
                }
                if (row + 1 < q.n) greedy &= q.tokens[row + 1] == ids[0];
            }
        }
        sp_kv_free(kv);
        greedy_rows += greedy;
    }
    /* answers alternate greedy and sampled (T = 0.7): some are greedy
     * throughout, and the sampled ones leave the top-1 somewhere */
    assert_true(answers >= 2);
    assert_true(greedy_rows >= 1 && greedy_rows < answers);
    free(logits);
    free(taps);
    sp_distill_close(ds);
}

/* Continuations for a pretrained model (chat = false) start from a
 * snippet of the text with probability doc_share, else from a generated
 * start of prose or code: counts the answer records of each kind (a
 * snippet's first characters are in the corpus, a generated start's are
 * not). */
static void count_text_starts(fixture *f, double doc_share, int *snippets, int *generated) {
    const sp_distill_opts o = { .max_tokens = 400, .seq_len = 96, .top_k = TOPK, .answer_share = 1.0,
                                .answer_tokens = 24, .chat = false, .doc_share = doc_share, .seed = 9 };
    sp_distill *ds = distill_river(f, 8, o);
    *snippets = *generated = 0;
    for (uint32_t s = 0; s < sp_distill_info_of(ds)->n_seqs; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, s, &q);
        if (q.loss_from == 0) continue;
        char head[64] = "";
        size_t len = 0;
        for (int i = 0; i < q.loss_from && len < 24; i++) {
            if (q.tokens[i] == sp_tokenizer_bos(f->tok)) continue;
            len += sp_token_piece(f->tok, q.tokens[i], false, head + len, sizeof head - len);
            if (len >= sizeof head) len = sizeof head - 1;
        }
        head[len < 24 ? len : 24] = 0;
        assert_true(strlen(head) >= 8);
        if (strstr(corpus_text, head)) ++*snippets;
        else ++*generated;
    }
    sp_distill_close(ds);
}

static void test_text_starts(void **state) {
    int sn, gen;
    count_text_starts(*state, 1.0, &sn, &gen);
    assert_true(sn >= 4);
    assert_int_equal(gen, 0);
    count_text_starts(*state, 0.0, &sn, &gen);
    assert_int_equal(sn, 0);
    assert_true(gen >= 4);
    count_text_starts(*state, 0.5, &sn, &gen);
    assert_true(sn >= 1 && gen >= 1);
}

/* With self_share 1 and no snippet requests, the chat prompts are requests
 * the model wrote itself from its template's opening of a user turn: each
 * user message is one it sampled (not from the templates), and a share of
 * 0 asks it for none. */
static void test_self_requests(void **state) {
    fixture *f = *state;
    sp_distill_stats st = { 0 };
    sp_distill_opts o = { .max_tokens = 500, .seq_len = 192, .top_k = TOPK, .answer_share = 1.0,
                          .answer_tokens = 32, .chat = true, .doc_share = 0, .self_share = 1.0, .seed = 3,
                          .stats = &st };
    sp_distill *ds = distill_river(f, 4, o);
    int answers = 0, distinct = 0;
    bool first = false;              /* the first request the model wrote is a prompt's message */
    char prev[8][256];
    for (uint32_t s = 0; s < sp_distill_info_of(ds)->n_seqs; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, s, &q);
        if (q.loss_from == 0) continue;
        /* the user's message: the text between the second "user" header and its end of turn */
        char text[2048];
        size_t len = 0;
        for (int i = 0; i <= q.loss_from && len < sizeof text - 256; i++)
            len += sp_token_piece(f->tok, q.tokens[i], true, text + len, sizeof text - len);
        text[len] = 0;
        const char *u = strstr(text, "<|im_start|>user\n");
        assert_non_null(u);
        u += strlen("<|im_start|>user\n");
        const char *end = strstr(u, "<|im_end|>");
        assert_non_null(end);
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)(end - u), u);
        assert_true(strchr(msg, ' ') != NULL);                 /* three words or more */
        bool seen = false;
        for (int j = 0; j < distinct && j < 8; j++) seen |= !strcmp(prev[j], msg);
        if (!seen && distinct < 8) snprintf(prev[distinct++], sizeof prev[0], "%s", msg);
        first |= !strncmp(msg, st.first_request, strlen(st.first_request));
        answers++;
    }
    assert_true(answers >= 3);
    assert_int_equal(st.self_requests, answers);
    assert_true(st.self_made >= (uint64_t)answers);
    assert_true(distinct >= 3);                              /* sampled: not one request over and over */
    assert_true(strlen(st.first_request) >= 8 && first);
    sp_distill_close(ds);
    o.self_share = 0;
    ds = distill_river(f, 4, o);
    assert_int_equal(st.self_requests, 0);
    assert_int_equal(st.self_made, 0);
    assert_string_equal(st.first_request, "");
    sp_distill_close(ds);
}

/* Requests about a word of the text (topic_share): at share 1 the
 * everyday requests are about words of the river text, counted, and the
 * first one is a word of it; at share 0 there are none. */
static void test_topic_requests(void **state) {
    fixture *f = *state;
    sp_distill_stats st = { 0 };
    sp_distill_opts o = { .max_tokens = 600, .seq_len = 192, .top_k = TOPK, .answer_share = 1.0,
                          .answer_tokens = 24, .chat = true, .doc_share = 0, .topic_share = 1.0, .seed = 5,
                          .stats = &st };
    sp_distill *ds = distill_river(f, 4, o);
    assert_true(st.topic_requests >= 2);
    assert_true(strlen(st.first_topic) >= 5);
    int about = 0;                   /* prompts that name the first topic */
    for (uint32_t s = 0; s < sp_distill_info_of(ds)->n_seqs; s++) {
        sp_distill_seq q;
        sp_distill_get(ds, s, &q);
        char text[2048];
        size_t len = 0;
        for (int i = 0; i <= q.loss_from && len < sizeof text - 256; i++)
            len += sp_token_piece(f->tok, q.tokens[i], true, text + len, sizeof text - len);
        text[len] = 0;
        about += q.loss_from > 0 && strstr(text, st.first_topic) != NULL;
    }
    assert_true(about >= 1);
    sp_distill_close(ds);
    o.topic_share = 0;
    ds = distill_river(f, 4, o);
    assert_int_equal(st.topic_requests, 0);
    assert_string_equal(st.first_topic, "");
    sp_distill_close(ds);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers_recorded_in_generation),
        cmocka_unit_test(test_text_starts),
        cmocka_unit_test(test_self_requests),
        cmocka_unit_test(test_topic_requests),
    };
    return cmocka_run_group_tests(tests, fx_setup_smol, fx_teardown);
}

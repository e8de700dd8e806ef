/* The draft head's training (train/head_train.c) on a toy target: the
 * gradients of the whole unrolled training-time test (every parameter)
 * against central finite differences of the loss, and a tiny head that
 * learns a synthetic task.  The trainer's static functions are reached by
 * including its source. */
#include "test_util.h"
#include <unistd.h>
#include "../../src/train/head_train.c"

enum { D = 16, NH = 2, NKV = 1, HD = 8, FF = 32, VT = 64, VD = 32, K = 4, N = 9 };

typedef struct toy {
    sp_model m;
    float emb[VT * D], onorm[D];
    int32_t tokens[N], ids[N * K];
    uint16_t probs[N * K], taps[N * 3 * D];
    sp_distill_seq seq;
} toy;

static void make_toy(toy *t, uint64_t seed) {
    sp_base_init();                  /* the f16 tables */
    memset(t, 0, sizeof *t);
    sp_rng r = { seed };
    for (int i = 0; i < VT * D; i++) t->emb[i] = (float)(sp_rng_next_f64(&r) * 2 - 1);
    for (int i = 0; i < D; i++) t->onorm[i] = 1.0f;
    t->m.hp = (sp_hparams){ .n_vocab = VT, .n_embd = D, .n_layer = 6, .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                            .n_ff = FF, .rms_eps = 1e-5f, .n_ctx_train = 64 };
    t->m.tok_embd = (sp_matrix){ .data = t->emb, .type = SP_F32, .n_in = D, .n_out = VT };
    t->m.output = t->m.tok_embd;
    t->m.out_norm = t->onorm;
    for (int p = 0; p < N; p++) {
        t->tokens[p] = (int32_t)(sp_rng_next(&r) % VD);
        for (int i = 0; i < K; i++) {
            t->ids[p * K + i] = (int32_t)((p * 7 + i * 5) % VD);
            t->probs[p * K + i] = sp_f32_to_f16(0.5f / (float)(i + 1));
        }
        for (int e = 0; e < 3 * D; e++) t->taps[p * 3 * D + e] = sp_f32_to_bf16((float)(sp_rng_next_f64(&r) * 2 - 1));
    }
    t->seq = (sp_distill_seq){ .n = N, .loss_from = 0, .tokens = t->tokens, .ids = t->ids, .probs = t->probs,
                               .taps = t->taps };
}

static void setup_trainer_nr(trainer *tr, toy *t, int J, bool norm_residual) {
    sp_head_train_opts o = sp_head_train_default_opts();
    o.ttt_steps = J;
    o.norm_residual = norm_residual;
    o.seq_len = N;
    o.draft_vocab = VD;
    trainer_init(tr, &t->m, NULL, &o, K);
    tr->D.eps = 1e-5f;
    sp_err err;
    assert_int_equal(declare(&tr->a, &tr->D, &err), 0);
    int32_t d2t[VD];
    for (int i = 0; i < VT; i++) tr->t2d[i] = i < VD ? i : -1;
    for (int i = 0; i < VD; i++) d2t[i] = i;
    init_params(&tr->a, &tr->D, &t->m, d2t, 7);
    /* break the symmetry of the identity-like initialisation so that every
     * path carries gradient */
    for (int i = 0; i < P_COUNT; i++) {
        float *p = sp_tr_param(&tr->a, i);
        sp_rng r = { 100 + (uint64_t)i };
        for (size_t e = 0; e < tr->a.views[i].numel; e++) p[e] += (float)(sp_rng_next_f64(&r) * 2 - 1) * 0.3f;
    }
}

static void setup_trainer(trainer *tr, toy *t, int J) { setup_trainer_nr(tr, t, J, false); }

static double loss_of(trainer *tr, const sp_distill_seq *q) {
    sp_tr_arena_zero_grad(&tr->a);
    return run_seq(tr, q, true, (float)(q->n - 1), NULL);
}

/* d loss / d theta for a sample of entries of every parameter tensor
 * (with the raw or the normed fused state as the layer's residual). */
static void check_gradients(bool norm_residual) {
    static toy t;
    make_toy(&t, 3);
    trainer tr;
    setup_trainer_nr(&tr, &t, 3, norm_residual);
    loss_of(&tr, &t.seq);
    float *grad = malloc(tr.a.size * sizeof(float));
    memcpy(grad, tr.a.grad, tr.a.size * sizeof(float));
    int checked = 0, bad = 0, nonzero = 0;
    for (int i = 0; i < P_COUNT; i++) {
        const sp_tr_view *v = &tr.a.views[i];
        for (int s = 0; s < 6; s++) {
            const size_t e = v->off + (size_t)((s * 2654435761u) % v->numel);
            const float keep = tr.a.param[e], h = 1e-2f * (fabsf(keep) > 1 ? fabsf(keep) : 1);
            tr.a.param[e] = keep + h;
            const double lp = loss_of(&tr, &t.seq);
            tr.a.param[e] = keep - h;
            const double lm = loss_of(&tr, &t.seq);
            tr.a.param[e] = keep;
            const double num = (lp - lm) / (2 * h), ana = grad[e];
            nonzero += fabs(ana) > 1e-4;
            const double tol = 2e-2 * fmax(fabs(num), fabs(ana)) + 2e-3;
            if (fabs(num - ana) > tol) {
                bad++;
                fprintf(stderr, "# %s[%zu]: analytic %.6g, numeric %.6g\n", v->name, e - v->off, ana, num);
            }
            checked++;
        }
    }
    free(grad);
    trainer_free(&tr);
    if (bad) fail_msg("%d of %d gradients differ from finite differences", bad, checked);
    if (nonzero < checked / 2) fail_msg("only %d of %d sampled gradients are non-zero", nonzero, checked);
}

static void test_gradients(void **state) {
    (void)state;
    check_gradients(false);
}

static void test_gradients_norm_residual(void **state) {
    (void)state;
    check_gradients(true);
}

/* Sequences shorter than the longest alternate with full ones (the key
 * lists follow each one's length; ASan catches a stale list), and the
 * gradients of a short one still match finite differences. */
static void test_short_sequences(void **state) {
    (void)state;
    static toy t;
    make_toy(&t, 9);
    trainer tr;
    setup_trainer(&tr, &t, 3);
    sp_distill_seq full = t.seq, shorter = t.seq;
    shorter.n = N - 4;
    const double a = loss_of(&tr, &full), b = loss_of(&tr, &shorter), c = loss_of(&tr, &full);
    assert_true(a > 0 && b > 0);
    assert_true(a == c);
    const sp_tr_view *v = &tr.a.views[P_WQ];
    loss_of(&tr, &shorter);
    const size_t e = v->off + 5;
    const float ana = tr.a.grad[e], keep = tr.a.param[e], h = 1e-2f;
    tr.a.param[e] = keep + h;
    const double lp = loss_of(&tr, &shorter);
    tr.a.param[e] = keep - h;
    const double lm = loss_of(&tr, &shorter);
    tr.a.param[e] = keep;
    const double num = (lp - lm) / (2 * h);
    if (fabs(num - ana) > 2e-2 * fmax(fabs(num), fabs(ana)) + 2e-3) fail_msg("short: analytic %g numeric %g", ana, num);
    trainer_free(&tr);
}

/* Steps 1.. of the unroll matter: their loss reaches parameters through
 * the fed-forward outputs (dropping that path changes fc's gradient). */
static void test_unroll_feeds_back(void **state) {
    (void)state;
    static toy t;
    make_toy(&t, 5);
    trainer one, three;
    setup_trainer(&one, &t, 1);
    setup_trainer(&three, &t, 3);
    loss_of(&one, &t.seq);
    loss_of(&three, &t.seq);
    const sp_tr_view *v = &one.a.views[P_FC];
    double diff = 0;
    for (size_t e = 0; e < v->numel; e++) diff += fabs(one.a.grad[v->off + e] - three.a.grad[v->off + e]);
    assert_true(diff > 1e-3);
    trainer_free(&one);
    trainer_free(&three);
}

/* A tiny head learns a synthetic task: the target's next token is a fixed
 * function of the current one.  Loss falls well below its start. */
static void test_learns(void **state) {
    (void)state;
    static toy t;
    make_toy(&t, 11);
    for (int p = 0; p < N; p++) {
        t.tokens[p] = (int32_t)((p * 3) % VD);
        for (int i = 0; i < K; i++) {
            t.ids[p * K + i] = i == 0 ? (int32_t)(((p + 1) * 3) % VD) : (int32_t)((p * 11 + i) % VD);
            t.probs[p * K + i] = sp_f32_to_f16(i == 0 ? 0.9f : 0.03f);
        }
    }
    trainer tr;
    setup_trainer(&tr, &t, 2);
    const sp_tr_adamw adam = { .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0 };
    const double first = loss_of(&tr, &t.seq);
    double last = first;
    for (int s = 1; s <= 150; s++) {
        last = loss_of(&tr, &t.seq);
        sp_tr_clip_grad(tr.a.grad, tr.a.size, 1.0f);
        sp_tr_arena_adamw(&tr.a, NULL, &adam, 3e-3f, 0, s);
    }
    if (!(last < 0.35 * first)) fail_msg("loss %.4f -> %.4f", first, last);
    trainer_free(&tr);
}

/* A data file whose tokens are not the target's is refused before any
 * embedding row is read by them. */
static void test_foreign_tokens(void **state) {
    (void)state;
    static toy t;
    make_toy(&t, 13);
    char path[] = "/tmp/specula-test-distill-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    char h[72] = "SPDSTL01";
    const uint32_t d = D, k = K, nseq = 2, n = N, lf = 0;
    const int32_t taps[3] = { 2, 3, 3 };
    const uint64_t ntok = 2 * N;
    memcpy(h + 8, &d, 4); memcpy(h + 12, &k, 4); memcpy(h + 16, taps, 12);
    memcpy(h + 28, &nseq, 4); memcpy(h + 32, &ntok, 8);
    fwrite(h, 1, sizeof h, f);
    for (int s = 0; s < 2; s++) {
        int32_t toks[N];
        memcpy(toks, t.tokens, sizeof toks);
        if (s == 1) toks[3] = VT + 5;                /* not a token of the target */
        fwrite(&n, 4, 1, f); fwrite(&lf, 4, 1, f);
        fwrite(toks, 4, N, f); fwrite(t.ids, 4, N * K, f); fwrite(t.probs, 2, N * K, f);
        fwrite(t.taps, 2, N * 3 * D, f);
    }
    fclose(f);
    sp_err err;
    sp_distill *ds = sp_distill_open(path, &err);
    if (!ds) fail_msg("open: %s", err.msg);
    sp_head_train_opts o = sp_head_train_default_opts();
    memcpy(o.tap_layers, taps, sizeof taps);
    o.draft_vocab = VD;
    o.seq_len = N;
    assert_int_equal(sp_head_train(&t.m, NULL, ds, &o, "/tmp/specula-test-never.gguf", &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    sp_distill_close(ds);
    unlink(path);
}

/* The generated chat requests: fixed by the seed, varied, whole
 * sentences with every template slot filled, cut to the buffer. */
static void test_requests(void **state) {
    (void)state;
    char seen[64][512];
    int distinct = 0, math = 0;
    for (int i = 0; i < 64; i++) {
        char a[512], b[512];
        sp_rng r1 = { 1000 + (uint64_t)i }, r2 = { 1000 + (uint64_t)i };
        sp_distill_request(a, sizeof a, NULL, &r1);
        sp_distill_request(b, sizeof b, NULL, &r2);
        assert_string_equal(a, b);
        assert_true(strlen(a) > 10);
        assert_null(strchr(a, '%'));
        const char last = a[strlen(a) - 1];
        assert_true(last == '.' || last == '?' || last == '!');
        math += strpbrk(a, "0123456789") != NULL;
        bool dup = false;
        for (int j = 0; j < distinct; j++) dup |= !strcmp(seen[j], a);
        if (!dup) snprintf(seen[distinct++], sizeof seen[0], "%s", a);
    }
    assert_true(distinct >= 56);
    assert_true(math >= 10 && math <= 54);   /* about a third are word problems */
    /* the openers and closers multiply the templates' requests: few of
     * 1024 are repeats (946 distinct; the templates alone gave 519) */
    static char many[1024][512];
    int n_many = 0;
    for (int i = 0; i < 1024; i++) {
        sp_rng r = { 77 + 7919 * (uint64_t)i };
        sp_distill_request(many[n_many], sizeof many[0], NULL, &r);
        bool dup = false;
        for (int j = 0; j < n_many && !dup; j++) dup = !strcmp(many[j], many[n_many]);
        n_many += !dup;
    }
    assert_true(n_many >= 900);
    char tiny[8];
    sp_rng r = { 7 };
    sp_distill_request(tiny, sizeof tiny, NULL, &r);
    assert_int_equal(strlen(tiny), 7);
}

/* Topics from the text: lower-case words of 5 to 14 letters, not code's
 * keywords, not prose's commonest words, not parts of identifiers; none
 * in a text without one.  Requests about a topic name it (the word
 * problems stay), and differ from the everyday ones of the same rng. */
static void test_topics(void **state) {
    (void)state;
    char w[16];
    sp_rng r = { 5 };
    assert_false(sp_distill_topic("x = my_value + OtherThing; return 1; which about", w, sizeof w, &r));
    assert_false(sp_distill_topic("", w, sizeof w, &r));
    for (int i = 0; i < 32; i++) {
        sp_rng ri = { 100 + (uint64_t)i };
        assert_true(sp_distill_topic("The Kitchen: whisk_eggs gently, then fold the batter into a buttered tin "
                                     "(averylongwordthatistoolong).", w, sizeof w, &ri));
        assert_true(!strcmp(w, "gently") || !strcmp(w, "batter") || !strcmp(w, "buttered"));
    }
    int named = 0, math = 0;
    for (int i = 0; i < 64; i++) {
        char a[512], b[512];
        sp_rng r1 = { 3000 + (uint64_t)i }, r2 = { 3000 + (uint64_t)i };
        const bool about = sp_distill_request(a, sizeof a, "lighthouses", &r1);
        assert_false(sp_distill_request(b, sizeof b, NULL, &r2));
        assert_null(strchr(a, '%'));
        assert_true(about == (strstr(a, "lighthouses") != NULL));
        if (about) {
            named++;
            assert_string_not_equal(a, b);
        } else {
            math++;
            assert_string_equal(a, b);      /* a word problem, drawn as without a topic */
        }
    }
    assert_true(named >= 30 && math >= 10);
}

/* The generated starts of text for pretrained models: fixed by the seed,
 * every template slot filled, prose and code about half and half, many
 * distinct (greedy continuations of a repeated start are copies), and cut
 * to the buffer. */
static void test_openers(void **state) {
    (void)state;
    static char many[1024][512];
    int n_many = 0, code = 0;
    for (int i = 0; i < 1024; i++) {
        char b[512];
        sp_rng r1 = { 31 + 7919 * (uint64_t)i }, r2 = { 31 + 7919 * (uint64_t)i };
        sp_distill_opener(many[n_many], sizeof many[0], &r1);
        sp_distill_opener(b, sizeof b, &r2);
        assert_string_equal(many[n_many], b);
        assert_true(strlen(b) >= 12);
        assert_null(strstr(b, "%s"));
        assert_null(strstr(b, "%d"));
        code += strpbrk(b, "{(<#=") != NULL && !strstr(b, "Ingredients");
        bool dup = false;
        for (int j = 0; j < n_many && !dup; j++) dup = !strcmp(many[j], many[n_many]);
        n_many += !dup;
    }
    assert_true(code >= 400 && code <= 624);
    assert_true(n_many >= 700);
    char tiny[8];
    sp_rng r = { 7 };
    sp_distill_opener(tiny, sizeof tiny, &r);
    assert_int_equal(strlen(tiny), 7);
}

/* Requests about a pasted text: fixed by the seed, the whole text in
 * them (fenced as code when it is code), every template slot filled, and
 * the kinds varied; a rename names a word of the code, not a keyword. */
static void test_doc_requests(void **state) {
    (void)state;
    const char *prose = "The library opened a seed shelf in spring. Members borrowed packets and returned saved "
                        "seeds in autumn; volunteers sorted them.";
    const char *code = "def total(prices, discount):\n    subtotal = sum(prices)\n    return subtotal * (1 - discount)\n";
    int distinct = 0, fenced = 0, quoted = 0;
    char seen[96][160];
    for (int i = 0; i < 96; i++) {
        const bool is_code = i % 2;
        sp_rng r1 = { 77 + (uint64_t)i }, r2 = { 77 + (uint64_t)i };
        char *a = sp_distill_doc_request(is_code ? code : prose, is_code ? "python" : NULL, &r1);
        char *b = sp_distill_doc_request(is_code ? code : prose, is_code ? "python" : NULL, &r2);
        assert_string_equal(a, b);
        assert_non_null(strstr(a, is_code ? code : prose));
        assert_null(strstr(a, "%d"));
        assert_null(strstr(a, "%s"));
        if (is_code) {
            assert_non_null(strstr(a, "```python\n"));
            fenced++;
            const char *rn = strstr(a, "Rename ");
            if (rn) {
                assert_true(!strncmp(rn + 7, "subtotal", 8) || !strncmp(rn + 7, "prices", 6) ||
                            !strncmp(rn + 7, "discount", 8));
            }
        }
        quoted += strstr(a, "\"") != NULL;
        const size_t ask = strcspn(a, "\n");
        bool dup = false;
        for (int j = 0; j < distinct; j++) dup |= !strncmp(seen[j], a, ask) && seen[j][ask] == 0;
        if (!dup && ask < sizeof seen[0]) { memcpy(seen[distinct], a, ask); seen[distinct++][ask] = 0; }
        free(a);
        free(b);
    }
    assert_int_equal(fenced, 48);
    assert_true(quoted > 0);
    assert_true(distinct >= 16);
}

/* Training turns subnormals off on every pool thread and restores the
 * mode after: a subnormal product is 0 inside, not after. */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
typedef struct csr_probe { unsigned csr[4]; } csr_probe;
static void read_csr(void *ctx, int ith, int nth) {
    (void)nth;
    ((csr_probe *)ctx)->csr[ith & 3] = _mm_getcsr();
}
static void test_denormals(void **state) {
    (void)state;
    sp_pool *pool = sp_pool_create(2);
    volatile float tiny = 1e-30f, scale = 1e-10f;
    const float before = tiny * scale;
    assert_true(before > 0);                     /* IEEE: a subnormal result */
    sp_tr_fpenv *env = sp_tr_denormals_off(pool);
    csr_probe in = { { 0 } };
    sp_pool_run(pool, read_csr, &in);
    assert_true((in.csr[0] & 0x8040u) == 0x8040u && (in.csr[1] & 0x8040u) == 0x8040u);
    assert_true(tiny * scale == 0.0f);
    sp_tr_denormals_restore(pool, env);
    csr_probe out = { { 0 } };
    sp_pool_run(pool, read_csr, &out);
    assert_true((out.csr[0] & 0x8040u) == 0 && (out.csr[1] & 0x8040u) == 0);
    assert_true(tiny * scale == before);
    sp_pool_free(pool);
}
#else
static void test_denormals(void **state) { (void)state; skip(); }
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_gradients_norm_residual),
        cmocka_unit_test(test_unroll_feeds_back),
        cmocka_unit_test(test_short_sequences),
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_foreign_tokens),
        cmocka_unit_test(test_doc_requests),
        cmocka_unit_test(test_requests),
        cmocka_unit_test(test_topics),
        cmocka_unit_test(test_openers),
        cmocka_unit_test(test_denormals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

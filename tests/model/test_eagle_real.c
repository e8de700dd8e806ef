/* The EAGLE-3 head drafter ("eagle") on the real models, with heads written
 * here by sp_head_write (untrained: these tests check the machinery, not
 * the quality):
 *   - an "identity" head (fc picks the target's final hidden state,
 *     attention and feed-forward outputs zero, the target's own LM head
 *     rows): it drafts the target's next-token guess, which a repetitive
 *     text accepts, so accepted and rejected rounds both happen;
 *   - a random head;
 * output always equals plain decoding (T = 0 and seeded T = 0.8, chains
 * of fixed and adaptive length, in combination with suffix); checkpoints
 * restore exactly; bad head files are refused with a clear message. */
#include "spec_fixture.h"

#include <math.h>
#include <unistd.h>

#define NDRAFT 8192                  /* draft vocabulary: the first NDRAFT target ids */

typedef struct head_buf {
    sp_head_hparams hp;
    float *fc, *an, *an2, *fn, *on, *wq, *wk, *wv, *wo, *gate, *up, *down, *out;
    int32_t *d2t;
} head_buf;

static float *randv(sp_rng *r, size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)(sp_rng_next_f64(r) * 2 - 1) * scale;
    return v;
}

static float *constv(size_t n, float c) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = c;
    return v;
}

/* identity: the head's output is g = the target's final hidden state, its
 * logits the target's own over the draft vocabulary. */
static void make_head(const sp_model *m, bool identity, head_buf *b) {
    sp_rng r = { 99 };
    const int d = m->hp.n_embd, L = m->hp.n_layer, nh = 4, hd = d / nh, ff = 2 * d;
    b->hp = (sp_head_hparams){ .n_embd = d, .n_embd_target = d, .n_head = nh, .n_head_kv = 2, .head_dim = hd,
                               .n_ff = ff, .n_vocab_draft = NDRAFT, .n_ctx_train = 2048, .rms_eps = 1e-5f,
                               .rope_base = 10000.0f, .target_layers = { 2, L / 2, identity ? L : L - 3 } };
    const size_t q = (size_t)nh * hd, kv = (size_t)2 * hd;
    b->fc = randv(&r, (size_t)d * 3 * d, identity ? 0 : 0.02f);
    if (identity)
        for (int i = 0; i < d; i++) b->fc[(size_t)i * 3 * d + 2 * d + i] = 1.0f;
    b->an = constv((size_t)d, 1);
    b->an2 = constv((size_t)d, 1);
    b->fn = constv((size_t)d, 1);
    b->wq = randv(&r, q * 2 * d, 0.05f);
    b->wk = randv(&r, kv * 2 * d, 0.05f);
    b->wv = randv(&r, kv * 2 * d, 0.05f);
    b->wo = randv(&r, (size_t)d * q, identity ? 0 : 0.05f);
    b->gate = randv(&r, (size_t)ff * d, 0.05f);
    b->up = randv(&r, (size_t)ff * d, 0.05f);
    b->down = randv(&r, (size_t)d * ff, identity ? 0 : 0.05f);
    b->on = malloc((size_t)d * sizeof(float));
    memcpy(b->on, m->out_norm, (size_t)d * sizeof(float));
    b->out = malloc((size_t)NDRAFT * d * sizeof(float));
    b->d2t = malloc(NDRAFT * sizeof(int32_t));
    for (int i = 0; i < NDRAFT; i++) {
        b->d2t[i] = i;
        if (identity) sp_matrix_get_row(&m->output, i, b->out + (size_t)i * d);
        else for (int j = 0; j < d; j++) b->out[(size_t)i * d + j] = (float)(sp_rng_next_f64(&r) * 2 - 1) * 0.1f;
    }
}

static void free_head(head_buf *b) {
    float *fs[] = { b->fc, b->an, b->an2, b->fn, b->on, b->wq, b->wk, b->wv, b->wo, b->gate, b->up, b->down, b->out };
    for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
    free(b->d2t);
}

static int write_head(const sp_model *m, const head_buf *b, const char *path, uint32_t type, sp_err *err) {
    const sp_head_weights w = { .fc = b->fc, .attn_norm = b->an, .attn_norm_2 = b->an2, .ffn_norm = b->fn,
                                .out_norm = b->on, .wq = b->wq, .wk = b->wk, .wv = b->wv, .wo = b->wo,
                                .w_gate = b->gate, .w_up = b->up, .w_down = b->down, .output = b->out,
                                .d2t = b->d2t };
    const sp_head_write_opts o = { .type = type, .min_prob = 0.05f, .training = "test" };
    return sp_head_write(path, m, &b->hp, &w, &o, err);
}

static void tmp_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/specula-test-head-%d-%s.gguf", (int)getpid(), tag);
}

static sp_drafter *eagle_with(fixture *f, bool identity, uint32_t type, int tree_width, bool sample) {
    char path[256];
    tmp_path(path, sizeof path, identity ? "id" : "rand");
    head_buf b;
    make_head(f->m, identity, &b);
    sp_err err;
    if (write_head(f->m, &b, path, type, &err)) fail_msg("write: %s", err.msg);
    free_head(&b);
    const sp_eagle_opts o = { .n_ctx = 1024, .min_prob = -1, .tree_width = tree_width, .sample = sample };
    sp_drafter *d = sp_eagle_create(path, f->m, &o, f->pool, &err);
    if (!d) fail_msg("load: %s", err.msg);
    unlink(path);
    return d;
}

static sp_drafter *eagle_for(fixture *f, bool identity, uint32_t type) { return eagle_with(f, identity, type, 1, false); }

/* Raw text (no chat template) the models continue by repeating its
 * token, which the identity head drafts. */
static const char *REPEAT = "dog dog dog dog dog dog dog dog dog dog dog dog dog dog dog dog";

/* The prompt's tokens: REPEAT as raw text, others in the chat template. */
static void prompt_of(fixture *f, const char *prompt, sp_tokens *p) {
    sp_err err;
    if (prompt != REPEAT) { fx_prompt(f, prompt, p); return; }
    assert_int_equal(sp_tokenize(f->tok, prompt, strlen(prompt), sp_tokenizer_add_bos(f->tok), false, p, &err), 0);
}

/* Plain and eagle give the same tokens; returns the eagle run's stats. */
static sp_spec_stats same_as_plain(fixture *f, sp_drafter *d, const char *prompt, float temp, int draft_max) {
    sp_tokens p = { 0 };
    prompt_of(f, prompt, &p);
    run_out plain = { .n = 0 }, spec = { .n = 0 };
    fx_gen(f, NULL, &p, temp, 0, 48, 1024, &plain, NULL, NULL);
    const sp_spec_stats st = fx_gen(f, d, &p, temp, draft_max, 48, 1024, &spec, NULL, NULL);
    fx_assert_same(&plain, &spec, d->name);
    sp_tokens_free(&p);
    return st;
}

static void test_identity_head(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_for(f, true, SP_Q8_0);
    assert_string_equal(d->name, "eagle");
    const sp_spec_stats st = same_as_plain(f, d, REPEAT, 0.0f, 4);
    if (!(st.accepted > 0)) fail_msg("identity head: drafted %lld, accepted none", (long long)st.drafted);
    sp_spec_stats all = st;
    const sp_spec_stats more[] = { same_as_plain(f, d, REPEAT, 0.8f, 4),
                                   same_as_plain(f, d, fx_prompts[0], 0.0f, SP_DRAFT_ADAPTIVE),
                                   same_as_plain(f, d, fx_prompts[1], 0.8f, 6) };
    for (int i = 0; i < 3; i++) sp_stats_add(&all, &more[i]);
    if (!(all.accepted < all.drafted)) fail_msg("identity head: no draft was ever rejected");
    /* the adaptive length asks the head for at most its cap, which the
     * repeated text, drafted with full confidence, reaches */
    assert_int_equal(d->adaptive_cap, 4);
    const sp_spec_stats ad = same_as_plain(f, d, REPEAT, 0.0f, SP_DRAFT_ADAPTIVE);
    if (!(ad.pos_drafted[3] > 0)) fail_msg("identity head, adaptive: never drafted 4 tokens");
    for (int j = 4; j < SP_STAT_POSITIONS; j++)
        if (ad.pos_drafted[j]) fail_msg("identity head, adaptive: drafted at position %d, past the cap", j + 1);
    sp_drafter_free(d);
}

static void test_random_head(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_for(f, false, SP_Q8_0);
    same_as_plain(f, d, REPEAT, 0.0f, 5);
    same_as_plain(f, d, fx_prompts[2], 0.8f, 3);
    sp_drafter_free(d);
}

static void test_with_suffix(void **state) {
    fixture *f = *state;
    sp_err err;
    sp_drafter *subs[2] = { sp_drafter_create("suffix", NULL, &err), eagle_for(f, true, SP_Q8_0) };
    sp_drafter *d = sp_combine_create(subs, 2, &err);
    assert_non_null(d);
    same_as_plain(f, d, fx_prompts[0], 0.0f, 4);
    same_as_plain(f, d, REPEAT, 0.8f, SP_DRAFT_ADAPTIVE);
    sp_drafter_free(d);
}

/* The prompt's taps (n, 3, d) at the head's layers, from the target. */
static float *prompt_taps(fixture *f, const sp_drafter *d, const sp_tokens *p) {
    sp_err err;
    const int dim = f->m->hp.n_embd;
    float *taps = calloc((size_t)p->n * 3 * dim, sizeof(float));
    sp_kv *kv = sp_kv_create(f->m, 1024);
    sp_fwd_seq q = { .kv = kv, .tap_layers = d->tap_layers, .n_taps = 3 };
    for (int at = 0; at < p->n; at += 64) {   /* the fixture's workspace: 64 rows a pass */
        q.tokens = p->ids + at;
        q.n = p->n - at < 64 ? p->n - at : 64;
        q.taps = taps + (size_t)at * 3 * dim;
        assert_int_equal(sp_model_forward_batch(f->m, f->ws, &q, 1, &err), 0);
    }
    sp_kv_free(kv);
    return taps;
}

/* A restored draft proposes what the original proposes. */
static void test_checkpoint(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_for(f, true, SP_Q8_0);
    sp_err err;
    sp_tokens p = { 0 };
    prompt_of(f, REPEAT, &p);
    const int dim = f->m->hp.n_embd;
    float *taps = prompt_taps(f, d, &p);
    sp_target t = sp_target_of(f->m);
    sp_draft *a = sp_draft_open(d, &t, &err), *b = sp_draft_open(d, &t, &err);
    const sp_taps pt = { .n_rows = p.n, .n_layers = 3, .dim = dim, .pos = 0, .data = taps };
    assert_int_equal(d->ops->prefill(a, p.ids, p.n, &pt, &err), 0);
    uint8_t *buf;
    size_t len;
    assert_int_equal(sp_draft_checkpoint(a, &buf, &len, &err), 0);
    assert_int_equal(sp_draft_restore(b, buf, len, &err), 0);
    const int32_t feed = 1234;
    sp_proposal pa, pb;
    assert_int_equal(sp_draft_propose(a, &feed, 1, 4, &pa, &err), 0);
    assert_int_equal(sp_draft_propose(b, &feed, 1, 4, &pb, &err), 0);
    assert_int_equal(pa.n, pb.n);
    assert_memory_equal(pa.tokens, pb.tokens, (size_t)pa.n * sizeof(int32_t));
    /* truncated and foreign checkpoints are refused */
    assert_int_equal(sp_draft_restore(b, buf, len - 1, &err), -1);
    buf[0] ^= 1;
    assert_int_equal(sp_draft_restore(b, buf, len, &err), -1);
    free(buf);
    sp_draft_close(a);
    sp_draft_close(b);
    free(taps);
    sp_tokens_free(&p);
    sp_drafter_free(d);
}

/* While no proposal is asked, pairs wait, and past 32 of them the oldest
 * are dropped unrun (eagle.c, skip_old): the head's cache keeps the
 * sequence's first 4 rows and the last 16 pairs follow them.  So a
 * checkpoint of such a draft is smaller than one of a draft that ran every
 * row, it restores with the gap and proposes what the original proposes,
 * and the identity head (whose drafts do not depend on its cache) proposes
 * what the draft that ran every row proposes.  A state with a bad gap is
 * refused. */
static void test_skip_while_plain(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_for(f, true, SP_Q8_0);
    sp_err err;
    char text[1024] = "";
    for (int i = 0; i < 200; i++) strcat(text, "dog ");
    sp_tokens p = { 0 };
    assert_int_equal(sp_tokenize(f->tok, text, strlen(text), sp_tokenizer_add_bos(f->tok), false, &p, &err), 0);
    assert_true(p.n > 150);
    float *taps = prompt_taps(f, d, &p);
    sp_target t = sp_target_of(f->m);
    sp_draft *a = sp_draft_open(d, &t, &err), *b = sp_draft_open(d, &t, &err), *c = sp_draft_open(d, &t, &err);
    const sp_taps pt = { .n_rows = p.n, .n_layers = 3, .dim = f->m->hp.n_embd, .pos = 0, .data = taps };
    assert_int_equal(d->ops->prefill(a, p.ids, p.n, &pt, &err), 0);
    assert_int_equal(d->ops->prefill(b, p.ids, p.n, &pt, &err), 0);
    const int32_t feed = p.ids[p.n - 1];
    sp_proposal pa, pb, pc;
    /* b runs every row and proposes */
    assert_int_equal(sp_draft_propose(b, &feed, 1, 4, &pb, &err), 0);
    assert_true(pb.n > 0);
    int32_t want[SP_MAX_DRAFT];
    const int n_want = pb.n;
    memcpy(want, pb.tokens, (size_t)n_want * sizeof(int32_t));
    d->ops->commit(b, pb.n, 0, NULL, NULL);
    /* a is kept plain: nothing proposed, the oldest pairs dropped */
    assert_int_equal(sp_draft_propose(a, &feed, 1, 0, &pa, &err), 0);
    assert_int_equal(pa.n, 0);
    uint8_t *ba, *bb;
    size_t la, lb;
    assert_int_equal(sp_draft_checkpoint(a, &ba, &la, &err), 0);
    assert_int_equal(sp_draft_checkpoint(b, &bb, &lb, &err), 0);
    if (la >= lb) fail_msg("the plain draft's checkpoint holds %zu bytes, the full one %zu: no rows were skipped", la, lb);
    assert_int_equal(sp_draft_restore(c, ba, la, &err), 0);
    assert_int_equal(sp_draft_propose(a, NULL, 0, 4, &pa, &err), 0);
    assert_int_equal(sp_draft_propose(c, NULL, 0, 4, &pc, &err), 0);
    assert_int_equal(pa.n, n_want);
    assert_memory_equal(pa.tokens, want, (size_t)n_want * sizeof(int32_t));
    assert_int_equal(pc.n, pa.n);
    assert_memory_equal(pc.tokens, pa.tokens, (size_t)pa.n * sizeof(int32_t));
    /* a state whose queue starts before the end of its cache rows (a cache
     * file's bad bytes) is refused */
    int32_t hdr[4];
    const size_t at = sp_ckpt_header(d, NULL, 0);
    memcpy(hdr, ba + at, sizeof hdr);
    assert_true(hdr[2] > hdr[0]);    /* the gap is in the state */
    hdr[2] = hdr[0] - 1;
    memcpy(ba + at, hdr, sizeof hdr);
    assert_int_equal(sp_draft_restore(c, ba, la, &err), -1);
    assert_non_null(strstr(err.msg, "bad header"));
    free(ba);
    free(bb);
    sp_draft_close(a);
    sp_draft_close(b);
    sp_draft_close(c);
    free(taps);
    sp_tokens_free(&p);
    sp_drafter_free(d);
}

/* A draft of d primed with a chat prompt's real taps, asked for a
 * proposal of up to max_n after the prompt's last token. */
typedef struct primed {
    sp_tokens p;
    float *taps;
    sp_draft *a;
    sp_proposal pr;
} primed;

static void prime(fixture *f, sp_drafter *d, const sp_target *t, const char *prompt, int max_n, primed *x) {
    sp_err err;
    memset(x, 0, sizeof *x);
    prompt_of(f, prompt, &x->p);
    x->taps = prompt_taps(f, d, &x->p);
    x->a = sp_draft_open(d, t, &err);
    assert_non_null(x->a);
    const sp_taps pt = { .n_rows = x->p.n, .n_layers = 3, .dim = f->m->hp.n_embd, .pos = 0, .data = x->taps };
    assert_int_equal(d->ops->prefill(x->a, x->p.ids, x->p.n, &pt, &err), 0);
    const int32_t feed = x->p.ids[x->p.n - 1];
    assert_int_equal(sp_draft_propose(x->a, &feed, 1, max_n, &x->pr, &err), 0);
}

static void unprime(primed *x) {
    sp_draft_close(x->a);
    free(x->taps);
    sp_tokens_free(&x->p);
}

/* Trees: the first draft's likely runners-up join as siblings; output
 * stays plain decoding's (Q4_1 head, packed), and when the target accepts a
 * sibling, that token -- not the chain's first -- is what the head's state
 * goes on from. */
static void test_tree(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_with(f, true, SP_Q4_1, 4, false);
    same_as_plain(f, d, fx_prompts[0], 0.0f, 6);
    same_as_plain(f, d, fx_prompts[1], 0.8f, SP_DRAFT_ADAPTIVE);
    same_as_plain(f, d, REPEAT, 0.0f, 4);
    /* drive the seam: a proposal with a sibling, the sibling accepted */
    sp_err err;
    const sp_target t = sp_target_of(f->m);
    primed x;
    prime(f, d, &t, fx_prompts[2], 6, &x);
    const sp_proposal pr = x.pr;
    if (!pr.parent) fail_msg("a width-4 head proposed a chain of %d on a chat prompt", pr.n);
    int sib = -1;
    for (int i = 1; i < pr.n; i++)
        if (pr.parent[i] == -1) { sib = i; break; }
    assert_true(sib > 0 && pr.tokens[sib] != pr.tokens[0]);
    const int32_t path[1] = { sib };
    const int dim = f->m->hp.n_embd;
    float *vt = calloc((size_t)2 * 3 * dim, sizeof(float));
    const sp_taps verified = { .n_rows = 2, .n_layers = 3, .dim = dim, .pos = x.p.n, .data = vt };
    d->ops->commit(x.a, pr.n, 1, path, &verified);
    /* the reference: the same rows verified with no draft accepted, then
     * the sibling's token fed, as if plain decoding had emitted it; the
     * states (the head's cache after its pending pairs ran, the queues)
     * must be byte-identical */
    primed y;
    prime(f, d, &t, fx_prompts[2], 6, &y);
    d->ops->commit(y.a, y.pr.n, 0, NULL, &verified);
    sp_proposal none;
    assert_int_equal(sp_draft_propose(y.a, &pr.tokens[sib], 1, 0, &none, &err), 0);
    uint8_t *buf, *ref;
    size_t len, rlen;
    assert_int_equal(sp_draft_checkpoint(x.a, &buf, &len, &err), 0);
    assert_int_equal(sp_draft_checkpoint(y.a, &ref, &rlen, &err), 0);
    assert_int_equal(len, rlen);
    assert_memory_equal(buf, ref, len);
    free(buf);
    free(ref);
    free(vt);
    unprime(&x);
    unprime(&y);
    sp_drafter_free(d);
}

/* --draft-sample: at T > 0 drafts come with q, a distribution over the
 * target's ids that is 0 outside the draft vocabulary and gives the drawn
 * token mass; at T = 0 the drafts stay greedy and the output plain's. */
static void test_draft_sample(void **state) {
    fixture *f = *state;
    sp_drafter *d = eagle_with(f, true, SP_Q8_0, 1, true);
    assert_true(d->needs & SP_CAP_SAMPLING);
    same_as_plain(f, d, REPEAT, 0.0f, 4);
    sp_sampler_params sp = sp_sampler_defaults();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.seed = 3;
    const sp_target t = sp_target_full(f->m, f->tok, &sp);
    primed x;
    prime(f, d, &t, fx_prompts[0], 4, &x);
    const sp_proposal pr = x.pr;
    assert_true(pr.n > 0 && pr.q && !pr.parent);
    const int V = f->m->hp.n_vocab;
    for (int i = 0; i < pr.n; i++) {
        const float *q = pr.q + (size_t)i * V;
        double sum = 0, outside = 0;
        int nz = 0;
        for (int v = 0; v < V; v++) {
            sum += q[v];
            nz += q[v] > 0;
            if (v >= NDRAFT) outside += q[v];  /* the test head's draft vocabulary: ids < NDRAFT */
        }
        assert_true(fabs(sum - 1) < 1e-4 && outside == 0 && nz >= 1 && nz <= 40);
        assert_true(q[pr.tokens[i]] > 0);
    }
    unprime(&x);
    sp_drafter_free(d);
}

/* Heads for another target, or broken, are refused with a clear message. */
/* Several sequences drafting with one eagle drafter in one context share
 * the head's passes (one group proposal per step).  Each output is its
 * solo plain output, and with a fixed draft length each sequence drafts
 * and accepts exactly what it does alone: a grouped head row is the row
 * it computes alone. */
static void test_grouped(void **state) {
    fixture *f = *state;
    sp_err err;
    const char *head = f->m->hp.arch == SP_ARCH_GEMMA3 ? "drafters/gemma3-270m.eagle3.gguf"
                                                       : "drafters/smollm2-135m.eagle3.gguf";
    const sp_eagle_opts eo = { .n_ctx = 1024, .min_prob = -1, .tree_width = 1 };
    sp_drafter *d = sp_eagle_create(head, f->m, &eo, f->pool, &err);
    if (!d) fail_msg("%s: %s", head, err.msg);
    enum { N = 4, MAXT = 40 };
    const float temps[N] = { 0.0f, 0.8f, 0.0f, 0.8f };
    sp_tokens p[N];
    run_out plain[N], solo[N], grouped[N];
    sp_spec_stats solo_st[N];
    for (int i = 0; i < N; i++) {
        memset(&p[i], 0, sizeof p[i]);
        fx_prompt(f, i < (int)FX_N_PROMPTS ? fx_prompts[i] : "Write a short poem about the sea.", &p[i]);
        plain[i] = (run_out){ .n = 0 };
        solo[i] = (run_out){ .n = 0 };
        fx_gen(f, NULL, &p[i], temps[i], 0, MAXT, 1024, &plain[i], NULL, NULL);
        solo_st[i] = fx_gen(f, d, &p[i], temps[i], 4, MAXT, 1024, &solo[i], NULL, NULL);
        fx_assert_same(&plain[i], &solo[i], "eagle alone");
    }
    sp_ctx *c = fx_ctx(f, N, 1024);
    int id[N];
    for (int i = 0; i < N; i++) {
        sp_seq_params sq = sp_seq_default_params();
        sq.prompt = p[i].ids;
        sq.n_prompt = p[i].n;
        sq.max_tokens = MAXT;
        sq.sampling = fx_sampling(temps[i]);
        sq.drafter = d;
        sq.draft_max = 4;
        sq.emit = fx_collect;
        grouped[i] = (run_out){ .n = 0, .tok = f->tok };
        sq.ud = &grouped[i];
        if ((id[i] = sp_ctx_add(c, &sq, &err)) < 0) fail_msg("add: %s", err.msg);
    }
    while (sp_ctx_step(c) > 0) {}
    int64_t groups = 0;
    for (int i = 0; i < N; i++) {
        if (sp_ctx_seq_finish(c, id[i]) == SP_FINISH_ERROR) fail_msg("sequence %d: %s", i, sp_ctx_seq_error(c, id[i]));
        const sp_spec_stats *st = sp_ctx_seq_stats(c, id[i]);
        fx_assert_same(&plain[i], &grouped[i], "eagle grouped");
        if (st->drafted != solo_st[i].drafted || st->accepted != solo_st[i].accepted)
            fail_msg("sequence %d grouped drafted %lld, accepted %lld; alone %lld, %lld", i, (long long)st->drafted,
                     (long long)st->accepted, (long long)solo_st[i].drafted, (long long)solo_st[i].accepted);
        assert_int_equal(solo_st[i].group_proposals, 0);
        groups += st->group_proposals;
        sp_ctx_remove(c, id[i]);
    }
    if (groups < 10) fail_msg("only %lld proposals came from group calls", (long long)groups);
    print_message("# grouped: %lld group proposals\n", (long long)groups);
    sp_ctx_free(c);
    for (int i = 0; i < N; i++) sp_tokens_free(&p[i]);
    sp_drafter_free(d);
}

static void test_bad_heads(void **state) {
    fixture *f = *state;
    char path[256];
    tmp_path(path, sizeof path, "bad");
    head_buf b;
    make_head(f->m, false, &b);
    sp_err err;
    const sp_eagle_opts o = { .n_ctx = 256, .min_prob = -1 };
    /* trained for another model (same shape, other weights) */
    sp_model other = *f->m;
    snprintf(other.fingerprint, sizeof other.fingerprint, "%s", "0123456789abcdef");
    snprintf(other.name, sizeof other.name, "%s", "some-other-model");
    assert_int_equal(write_head(&other, &b, path, SP_F16, &err), 0);
    assert_null(sp_eagle_create(path, f->m, &o, f->pool, &err));
    assert_non_null(strstr(err.msg, "some-other-model"));
    assert_non_null(strstr(err.msg, f->m->fingerprint));
    /* a draft vocabulary with a repeated target id */
    b.d2t[7] = b.d2t[6];
    assert_int_equal(write_head(f->m, &b, path, SP_F16, &err), 0);
    assert_null(sp_eagle_create(path, f->m, &o, f->pool, &err));
    assert_non_null(strstr(err.msg, "d2t"));
    b.d2t[7] = 7;
    /* a tap layer past the target's */
    b.hp.target_layers[2] = f->m->hp.n_layer + 1;
    assert_int_equal(write_head(f->m, &b, path, SP_F16, &err), 0);
    assert_null(sp_eagle_create(path, f->m, &o, f->pool, &err));
    assert_non_null(strstr(err.msg, "layer"));
    /* not a head at all: the target itself */
    assert_null(sp_eagle_create(f->m->path, f->m, &o, f->pool, &err));
    assert_non_null(strstr(err.msg, "eagle3"));
    /* a truncated file */
    b.hp.target_layers[2] = f->m->hp.n_layer - 3;
    assert_int_equal(write_head(f->m, &b, path, SP_F16, &err), 0);
    assert_int_equal(truncate(path, 4096), 0);
    assert_null(sp_eagle_create(path, f->m, &o, f->pool, &err));
    unlink(path);
    free_head(&b);
}

/* fc runs in F16 beside quantized matrices and as written beside F32
 * ones; in F16 it fuses the target's real taps as the written F32 weights
 * do, to F16's rounding. */
static void test_fc_f16(void **state) {
    fixture *f = *state;
    char path[256];
    tmp_path(path, sizeof path, "fc");
    head_buf b;
    make_head(f->m, false, &b);
    sp_err err;
    const int d = f->m->hp.n_embd;
    sp_tokens p = { 0 };
    prompt_of(f, REPEAT, &p);
    const uint32_t types[2] = { SP_F32, SP_Q8_0 };
    for (int t = 0; t < 2; t++) {
        assert_int_equal(write_head(f->m, &b, path, types[t], &err), 0);
        sp_head *h = sp_head_load(path, f->m, &err);
        if (!h) fail_msg("load: %s", err.msg);
        assert_int_equal(h->fc.type, t == 0 ? SP_F32 : SP_F16);
        sp_drafter *dr = sp_eagle_create(path, f->m, &(sp_eagle_opts){ .n_ctx = 256, .min_prob = -1 }, f->pool, &err);
        assert_non_null(dr);
        float *taps = prompt_taps(f, dr, &p);
        sp_head_ws *hw = sp_head_ws_create(h, 8, 64, f->pool);
        float *g = malloc((size_t)4 * d * sizeof(float));
        sp_head_fuse(h, hw, taps + (size_t)(p.n - 4) * 3 * d, 4, g);
        double m = 0, s = 0;
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < d; i++) {
                const float *x = taps + (size_t)(p.n - 4 + r) * 3 * d, *w = b.fc + (size_t)i * 3 * d;
                double want = 0;
                for (int k = 0; k < 3 * d; k++) want += (double)w[k] * x[k];
                m = fmax(m, fabs(want - g[(size_t)r * d + i]));
                s = fmax(s, fabs(want));
            }
        if (m > (t == 0 ? 1e-5 : 2e-3) * s) fail_msg("fc (%s): off by %.3g of %.3g", t ? "f16" : "f32", m, s);
        free(g);
        free(taps);
        sp_head_ws_free(hw);
        sp_head_free(h);
        sp_drafter_free(dr);
    }
    unlink(path);
    sp_tokens_free(&p);
    free_head(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fc_f16),
        cmocka_unit_test(test_identity_head), cmocka_unit_test(test_random_head),
        cmocka_unit_test(test_with_suffix),   cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_skip_while_plain),
        cmocka_unit_test(test_bad_heads),     cmocka_unit_test(test_tree),
        cmocka_unit_test(test_draft_sample),  cmocka_unit_test(test_grouped),
    };
    int rc = cmocka_run_group_tests_name("smollm2", tests, fx_setup_smol, fx_teardown);
    rc |= cmocka_run_group_tests_name("gemma3", tests, fx_setup_gemma, fx_teardown);
    return rc;
}

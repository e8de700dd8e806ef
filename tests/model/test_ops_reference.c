/* Each op of our forward pass against llama.cpp's, op by op, on llama.cpp's
 * own inputs.
 *
 * tests/data/ops-reference-<model>.{json,f32} hold llama.cpp's intermediate
 * tensors of layers 0 and 1 (and Gemma's first global layer, 5) for one
 * short prompt, recorded by scripts/reference/gen_tensor_reference.py: the
 * last prompt position of every node, and every position of the roped keys
 * and the values (what attention at the last position reads).  For each op
 * the test takes llama.cpp's input of the op, runs our kernel with our
 * loader's weights and hyperparameters, wired as src/model/forward.c wires
 * them (same kernels, same arguments), and compares with llama.cpp's output
 * of the op:
 *     rel = max |ours - llama.cpp| / max |llama.cpp|  over the op's output.
 * Both compute the same float expressions in other summation orders, so rel
 * is ~1e-7; TOL_OP = 1e-5 leaves room for that and nothing else.  Attention
 * rounds the query and the probabilities to F16 (as llama.cpp does), where
 * a 1-ulp difference can flip an F16 rounding: TOL_ATTN = 2e-4.
 *
 * Why per op: the logits of two correct quantized implementations spread by
 * ~0.2 (tests/model/test_reference.c), which hides errors such as a wrong
 * RoPE base, norm epsilon, GELU variant or activation rounding rule; on one
 * op with identical inputs they stand out by orders of magnitude.  Both
 * kernel levels (scalar and, where the CPU has it, AVX2) are checked.
 */
#include "test_util.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>

#define TOL_OP 1e-5
#define TOL_ATTN 2e-4

/* ------------------------------------------------------------------------
 * Reference data
 * ---------------------------------------------------------------------- */
typedef struct ref {
    json_t *root;
    json_t *tensors;         /* borrowed from root */
    float *data;             /* owned: n_floats values */
    size_t n_floats;
    int32_t ids[64];
    int T;                   /* prompt tokens; the checked position is T - 1 */
} ref;

static void ref_load(ref *r, const char *json_path, const char *model_file) {
    json_error_t jerr;
    r->root = json_load_file(json_path, 0, &jerr);
    if (!r->root) fail_msg("%s: %s", json_path, jerr.text);
    assert_string_equal(json_string_value(json_object_get(r->root, "model")), model_file);
    json_t *ids = json_object_get(r->root, "prompt_ids");
    r->T = (int)json_array_size(ids);
    assert_true(r->T >= 2 && r->T <= 64);
    for (int i = 0; i < r->T; i++) r->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    r->tensors = json_object_get(r->root, "tensors");
    r->n_floats = (size_t)json_integer_value(json_object_get(r->root, "n_floats"));
    char path[512];
    snprintf(path, sizeof path, "tests/data/%s", json_string_value(json_object_get(r->root, "data")));
    size_t len = 0;
    char *raw = sp_test_read_file(path, &len);
    if (!raw) fail_msg("cannot read %s", path);
    if (len != r->n_floats * sizeof(float)) fail_msg("%s: %zu bytes, index says %zu floats", path, len, r->n_floats);
    r->data = malloc(len);
    memcpy(r->data, raw, len);   /* the file is little-endian float32, as this host */
    free(raw);
}

static void ref_free(ref *r) {
    free(r->data);
    json_decref(r->root);
}

/* Row at position pos of tensor `name`, which must have n values per row. */
static const float *ref_row(const ref *r, const char *name, int pos, int n) {
    size_t i;
    json_t *t;
    json_array_foreach(r->tensors, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) != 0) continue;
        if (json_integer_value(json_object_get(t, "n")) != n)
            fail_msg("%s: %lld values per row, expected %d", name, (long long)json_integer_value(json_object_get(t, "n")), n);
        json_t *ps = json_object_get(t, "pos");
        const size_t off = (size_t)json_integer_value(json_object_get(t, "offset"));
        for (size_t k = 0; k < json_array_size(ps); k++) {
            if (json_integer_value(json_array_get(ps, k)) != pos) continue;
            if (off + (k + 1) * (size_t)n > r->n_floats) fail_msg("%s: outside the data", name);
            return r->data + off + k * (size_t)n;
        }
        fail_msg("%s: position %d not recorded", name, pos);
    }
    fail_msg("tensor %s not recorded", name);
    return NULL;
}

/* Same, for the tensor "<name>-<il>". */
static const float *ref_layer(const ref *r, const char *name, int il, int pos, int n) {
    char full[64];
    snprintf(full, sizeof full, "%s-%d", name, il);
    return ref_row(r, full, pos, n);
}

/* ------------------------------------------------------------------------
 * Comparison
 * ---------------------------------------------------------------------- */
typedef struct ctx {
    const char *model;       /* short name for messages */
    const sp_model *m;
    const ref *r;
    sp_pool *pool;
    void *scratch;           /* matmul scratch for one row */
    float *out, *tmp;        /* scratch rows, large enough for any op */
    int pos;                 /* the checked position: T - 1 */
    const char *level;       /* kernel level in use */
    int n_checked, n_failed;
    char failed[512];        /* names of the first failures */
} ctx;

/* Compares our output of one op with llama.cpp's; prints the relative
 * error and records a failure above tol. */
static void check(ctx *c, const char *op, int il, const float *ours, const float *theirs, int n, double tol) {
    double md = 0, mr = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs((double)ours[i] - theirs[i]);
        if (!(d <= md)) { md = d; at = i; }
        if (fabs(theirs[i]) > mr) mr = fabs(theirs[i]);
    }
    const double rel = mr > 0 ? md / mr : md;
    const bool bad = !(rel <= tol) || mr == 0;
    printf("# %s %-6s L%-2d %-15s rel %.2e%s\n", c->model, c->level, il, op, rel,
           bad ? "  <-- FAIL" : "");
    if (bad) {
        printf("#   worst at %d: ours %.9g, llama.cpp %.9g (tol %.0e)\n", at, ours[at], theirs[at], tol);
        if (c->n_failed < 8) {
            size_t l = strlen(c->failed);
            snprintf(c->failed + l, sizeof c->failed - l, "%s%s L%d", c->n_failed ? ", " : "", op, il);
        }
        c->n_failed++;
    }
    c->n_checked++;
}

/* ------------------------------------------------------------------------
 * The ops, as forward.c calls them
 * ---------------------------------------------------------------------- */
static void op_matmul(ctx *c, const char *op, int il, const sp_matrix *w, const float *x, const char *want) {
    sp_matmul(w, x, 1, c->out, w->n_out, c->scratch, c->pool);
    check(c, op, il, c->out, ref_layer(c->r, want, il, c->pos, (int)w->n_out), (int)w->n_out, TOL_OP);
}

static void op_rmsnorm(ctx *c, const char *op, int il, const float *x, const float *w, int n, const char *want) {
    sp_rmsnorm(c->out, x, w, n, c->m->hp.rms_eps);
    check(c, op, il, c->out, ref_layer(c->r, want, il, c->pos, n), n, TOL_OP);
}

/* a + b (the residual additions). */
static void op_add(ctx *c, const char *op, int il, const float *a, const float *b, int n, const char *want) {
    memcpy(c->out, a, (size_t)n * sizeof(float));
    sp_vec_add(c->out, b, n);
    check(c, op, il, c->out, ref_layer(c->r, want, il, c->pos, n), n, TOL_OP);
}

/* RoPE of n_heads heads at the checked position, with this layer's base. */
static void op_rope(ctx *c, const char *op, int il, const float *x, int n_heads, const char *want) {
    const sp_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim;
    float cs[1024];
    memcpy(c->out, x, (size_t)n_heads * hd * sizeof(float));
    sp_rope_table(cs, hp->n_rot, c->pos, c->m->layers[il].rope_base);
    for (int h = 0; h < n_heads; h++) sp_rope_apply(c->out + (size_t)h * hd, cs, hp->n_rot, hp->rope_neox);
    check(c, op, il, c->out, ref_layer(c->r, want, il, c->pos, n_heads * hd), n_heads * hd, TOL_OP);
}

/* Attention of the checked position over positions 0..pos: llama.cpp's
 * roped keys and values of every position, stored in an F16 cache as
 * forward.c stores them, each KV head's query heads together. */
static void op_attention(ctx *c, int il, const float *q, float scale) {
    const sp_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, kvd = hp->n_head_kv * hd, qd = hp->n_head * hd;
    const int n = c->pos + 1, group = hp->n_head / hp->n_head_kv;
    sp_f16 *k = malloc((size_t)n * kvd * sizeof(sp_f16)), *v = malloc((size_t)n * kvd * sizeof(sp_f16));
    for (int p = 0; p < n; p++) {
        const float *kr = ref_layer(c->r, "Kcur_rope", il, p, kvd), *vr = ref_layer(c->r, "Vcur", il, p, kvd);
        for (int e = 0; e < kvd; e++) {
            k[(size_t)p * kvd + e] = sp_f32_to_f16(kr[e]);
            v[(size_t)p * kvd + e] = sp_f32_to_f16(vr[e]);
        }
    }
    float *scores = malloc((size_t)group * n * sizeof(float));
    for (int h = 0; h < hp->n_head_kv; h++)
        sp_attn_heads(c->out + (size_t)h * group * hd, q + (size_t)h * group * hd, group, k + (size_t)h * hd,
                      v + (size_t)h * hd, (size_t)kvd, hd, 0, n, scale, scores);
    check(c, "attention", il, c->out, ref_layer(c->r, "kqv_out", il, c->pos, qd), qd, TOL_ATTN);
    free(scores);
    free(k);
    free(v);
}

/* Embedding row of the last token (and Gemma's scaling); returns llama.cpp's
 * layer-0 input. */
static const float *check_embedding(ctx *c) {
    const sp_hparams *hp = &c->m->hp;
    const int d = hp->n_embd;
    sp_matrix_get_row(&c->m->tok_embd, c->r->ids[c->pos], c->out);
    const float *embd = ref_row(c->r, "embd", c->pos, d);
    check(c, "embedding", 0, c->out, embd, d, TOL_OP);
    if (hp->arch != SP_ARCH_GEMMA3) return embd;
    memcpy(c->out, embd, (size_t)d * sizeof(float));
    sp_vec_scale(c->out, hp->embd_scale, d);
    const float *scaled = ref_row(c->r, "inp_scaled", c->pos, d);
    check(c, "embd_scale", 0, c->out, scaled, d, TOL_OP);
    return scaled;
}

/* One llama layer (SmolLM2): x is llama.cpp's input of the layer. */
static void check_llama_layer(ctx *c, int il, const float *x) {
    const sp_hparams *hp = &c->m->hp;
    const sp_layer *L = &c->m->layers[il];
    const int d = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff, p = c->pos;
    const ref *r = c->r;
    op_rmsnorm(c, "attn_norm", il, x, L->attn_norm, d, "attn_norm");
    const float *xn = ref_layer(r, "attn_norm", il, p, d);
    op_matmul(c, "wq", il, &L->wq, xn, "Qcur");
    op_matmul(c, "wk", il, &L->wk, xn, "Kcur");
    op_matmul(c, "wv", il, &L->wv, xn, "Vcur");
    op_rope(c, "rope_q", il, ref_layer(r, "Qcur", il, p, hp->n_head * hd), hp->n_head, "Qcur_rope");
    op_rope(c, "rope_k", il, ref_layer(r, "Kcur", il, p, hp->n_head_kv * hd), hp->n_head_kv, "Kcur_rope");
    op_attention(c, il, ref_layer(r, "Qcur_rope", il, p, hp->n_head * hd), hp->attn_scale);
    op_matmul(c, "wo", il, &L->wo, ref_layer(r, "kqv_out", il, p, hp->n_head * hd), "attn_out");
    op_add(c, "residual_attn", il, x, ref_layer(r, "attn_out", il, p, d), d, "ffn_inp");
    const float *h = ref_layer(r, "ffn_inp", il, p, d);
    op_rmsnorm(c, "ffn_norm", il, h, L->ffn_norm, d, "ffn_norm");
    const float *hn = ref_layer(r, "ffn_norm", il, p, d);
    op_matmul(c, "w_gate", il, &L->w_gate, hn, "ffn_gate");
    op_matmul(c, "w_up", il, &L->w_up, hn, "ffn_up");
    sp_swiglu(c->out, ref_layer(r, "ffn_gate", il, p, ff), ref_layer(r, "ffn_up", il, p, ff), ff);
    check(c, "swiglu", il, c->out, ref_layer(r, "ffn_swiglu", il, p, ff), ff, TOL_OP);
    op_matmul(c, "w_down", il, &L->w_down, ref_layer(r, "ffn_swiglu", il, p, ff), "ffn_out");
    op_add(c, "residual_ffn", il, h, ref_layer(r, "ffn_out", il, p, d), d, "l_out");
}

/* One Gemma 3 layer. */
static void check_gemma3_layer(ctx *c, int il, const float *x) {
    const sp_hparams *hp = &c->m->hp;
    const sp_layer *L = &c->m->layers[il];
    const int d = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff, p = c->pos;
    const int qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    const ref *r = c->r;
    op_rmsnorm(c, "attn_norm", il, x, L->attn_norm, d, "attn_norm");
    const float *xn = ref_layer(r, "attn_norm", il, p, d);
    op_matmul(c, "wq", il, &L->wq, xn, "Qcur");
    op_matmul(c, "wk", il, &L->wk, xn, "Kcur");
    op_matmul(c, "wv", il, &L->wv, xn, "Vcur");
    /* per-head norms: forward.c runs rmsnorm over n_head rows of head_dim */
    const float *q = ref_layer(r, "Qcur", il, p, qd), *k = ref_layer(r, "Kcur", il, p, kvd);
    for (int h = 0; h < hp->n_head; h++)
        sp_rmsnorm(c->tmp + (size_t)h * hd, q + (size_t)h * hd, L->q_norm, hd, hp->rms_eps);
    check(c, "q_norm", il, c->tmp, ref_layer(r, "Qcur_normed", il, p, qd), qd, TOL_OP);
    for (int h = 0; h < hp->n_head_kv; h++)
        sp_rmsnorm(c->tmp + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, hp->rms_eps);
    check(c, "k_norm", il, c->tmp, ref_layer(r, "Kcur_normed", il, p, kvd), kvd, TOL_OP);
    op_rope(c, "rope_q", il, ref_layer(r, "Qcur_normed", il, p, qd), hp->n_head, "Qcur_rope");
    op_rope(c, "rope_k", il, ref_layer(r, "Kcur_normed", il, p, kvd), hp->n_head_kv, "Kcur_rope");
    memcpy(c->out, ref_layer(r, "Qcur_rope", il, p, qd), (size_t)qd * sizeof(float));
    sp_vec_scale(c->out, hp->attn_scale, qd);
    check(c, "q_scale", il, c->out, ref_layer(r, "Qscaled", il, p, qd), qd, TOL_OP);
    op_attention(c, il, ref_layer(r, "Qscaled", il, p, qd), 1.0f);
    op_matmul(c, "wo", il, &L->wo, ref_layer(r, "kqv_out", il, p, qd), "attn_out");
    op_rmsnorm(c, "post_attn_norm", il, ref_layer(r, "attn_out", il, p, d), L->post_attn_norm, d, "attn_post_norm");
    op_add(c, "residual_attn", il, x, ref_layer(r, "attn_post_norm", il, p, d), d, "sa_out");
    const float *h = ref_layer(r, "sa_out", il, p, d);
    op_rmsnorm(c, "ffn_norm", il, h, L->ffn_norm, d, "ffn_norm");
    const float *hn = ref_layer(r, "ffn_norm", il, p, d);
    op_matmul(c, "w_gate", il, &L->w_gate, hn, "ffn_gate");
    op_matmul(c, "w_up", il, &L->w_up, hn, "ffn_up");
    sp_geglu(c->out, ref_layer(r, "ffn_gate", il, p, ff), ref_layer(r, "ffn_up", il, p, ff), ff);
    check(c, "geglu", il, c->out, ref_layer(r, "ffn_geglu", il, p, ff), ff, TOL_OP);
    op_matmul(c, "w_down", il, &L->w_down, ref_layer(r, "ffn_geglu", il, p, ff), "ffn_out");
    op_rmsnorm(c, "post_ffn_norm", il, ref_layer(r, "ffn_out", il, p, d), L->post_ffn_norm, d, "ffn_post_norm");
    op_add(c, "residual_ffn", il, h, ref_layer(r, "ffn_post_norm", il, p, d), d, "l_out");
}

/* Every recorded layer of one model at the kernel level in use. */
static void check_all(ctx *c) {
    const float *x0 = check_embedding(c);
    json_t *layers = json_object_get(c->r->root, "layers");
    assert_true(json_array_size(layers) >= 2);
    for (size_t i = 0; i < json_array_size(layers); i++) {
        const int il = (int)json_integer_value(json_array_get(layers, i));
        assert_true(il >= 0 && il < c->m->hp.n_layer);
        const float *x = il == 0 ? x0 : ref_layer(c->r, "l_out", il - 1, c->pos, c->m->hp.n_embd);
        if (c->m->hp.arch == SP_ARCH_GEMMA3) check_gemma3_layer(c, il, x);
        else check_llama_layer(c, il, x);
    }
}

/* Largest matmul scratch any layer matrix needs for one row. */
static size_t scratch_bytes(const sp_model *m) {
    size_t s = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        const sp_matrix *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            const size_t b = sp_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, 1);
            if (b > s) s = b;
        }
    }
    return s;
}

static void check_model(const char *model_file, const char *short_name, const char *json_path) {
    sp_base_init();
    sp_err err;
    sp_model *m = sp_model_load(sp_test_model_path(model_file), &err);
    if (!m) fail_msg("load: %s", err.msg);
    ref r;
    ref_load(&r, json_path, model_file);
    const sp_hparams *hp = &m->hp;
    size_t widest = (size_t)hp->n_ff;
    if ((size_t)hp->n_head * hp->head_dim > widest) widest = (size_t)hp->n_head * hp->head_dim;
    if ((size_t)hp->n_embd > widest) widest = (size_t)hp->n_embd;
    ctx c = { .model = short_name, .m = m, .r = &r, .pool = sp_pool_create(2), .pos = r.T - 1 };
    c.scratch = sp_alloc_aligned(scratch_bytes(m));
    c.out = malloc(widest * sizeof(float));
    c.tmp = malloc(widest * sizeof(float));
    const sp_simd saved = sp_kernels_simd();
    const sp_simd levels[] = { SP_SIMD_SCALAR, SP_SIMD_AVX2, SP_SIMD_VNNI, SP_SIMD_AVX512 };
    static const char *const names[] = { "scalar", "avx2", "vnni", "avx512" };
    for (size_t i = 0; i < sizeof levels / sizeof *levels; i++) {
        if (!sp_kernels_simd_supported(levels[i])) continue;
        assert_int_equal(sp_kernels_set_simd(levels[i]), 0);
        c.level = names[i];
        check_all(&c);
    }
    sp_kernels_set_simd(saved);
    printf("# %s: %d op checks, %d above tolerance\n", short_name, c.n_checked, c.n_failed);
    if (c.n_failed) fail_msg("%s: ops differ from llama.cpp's: %s", short_name, c.failed);
    assert_true(c.n_checked >= 30);
    free(c.out);
    free(c.tmp);
    sp_free_aligned(c.scratch);
    sp_pool_free(c.pool);
    ref_free(&r);
    sp_model_free(m);
}

static void test_smollm2(void **st) {
    (void)st;
    check_model(SP_TEST_SMOLLM2, "smollm2", "tests/data/ops-reference-smollm2-135m.json");
}

static void test_gemma3(void **st) {
    (void)st;
    check_model(SP_TEST_GEMMA3, "gemma3", "tests/data/ops-reference-gemma3-270m.json");
}

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_smollm2), cmocka_unit_test(test_gemma3) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

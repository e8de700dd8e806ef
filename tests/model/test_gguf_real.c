/*
 * The GGUF reader on the two real models (facts cross-checked with the
 * gguf Python package): metadata values, vocabulary arrays, tensor index,
 * and that every tensor's data lies inside the mapped file.
 */
#include "test_util.h"
#include "gguf/gguf.h"

static sp_gguf *open_model(const char *file) {
    sp_err err = {{0}};
    sp_gguf *g = sp_gguf_open(sp_test_model_path(file), &err);
    if (!g) print_error("%s\n", err.msg);
    assert_non_null(g);
    return g;
}

static void check_str(const sp_gguf *g, const char *key, const char *want) {
    sp_str s;
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_get_str(g, key, &s, &err), 1);
    char buf[128];
    assert_string_equal(sp_str_cpy(s, buf, sizeof buf), want);
}

static void check_u32(const sp_gguf *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_get_u32(g, key, &v, &err), 1);
    assert_int_equal(v, want);
}

/* A tensor's type, shape and absolute file offset (data_start + offset). */
static void check_tensor(const sp_gguf *g, uint64_t data_start, const char *name, uint32_t type,
                         uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t abs_offset) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    assert_non_null(t);
    assert_true(sp_str_eq(t->name, name));
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, n_dims);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
    assert_int_equal(t->n_elements, ne0 * ne1);
    assert_int_equal(t->n_bytes, sp_dtype_row_bytes(type, ne0) * ne1);
    assert_int_equal(data_start + t->offset, abs_offset);
}

/* Every tensor: sizes consistent, data 32-byte aligned, inside the file,
 * disjoint from the others, and the mapped bytes at both ends of its data
 * equal the bytes read from the file with ordinary I/O at
 * data_start + offset. */
static void check_all_tensors(const sp_gguf *g, const char *file, uint64_t data_start) {
    FILE *fp = fopen(sp_test_model_path(file), "rb");
    assert_non_null(fp);
    uint64_t n_t = sp_gguf_n_tensors(g), size = sp_gguf_file_size(g);
    for (uint64_t i = 0; i < n_t; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        assert_non_null(t);
        assert_true(t->n_dims >= 1 && t->n_dims <= 4);
        uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        assert_int_equal(n, t->n_elements);
        assert_int_equal(t->n_bytes, sp_dtype_row_bytes(t->type, t->ne[0]) * (n / t->ne[0]));
        assert_int_equal(t->offset % 32, 0);
        assert_int_equal((uintptr_t)t->data % 32, 0);
        assert_true(data_start + t->offset + t->n_bytes <= size);
        uint8_t buf[16];
        uint64_t k = t->n_bytes < sizeof buf ? t->n_bytes : sizeof buf;
        const uint64_t at[2] = {data_start + t->offset, data_start + t->offset + t->n_bytes - k};
        for (int e = 0; e < 2; e++) {
            assert_int_equal(fseek(fp, (long)at[e], SEEK_SET), 0);
            assert_int_equal(fread(buf, 1, k, fp), k);
            assert_memory_equal(buf, (const uint8_t *)t->data + (at[e] - at[0]), k);
        }
        for (uint64_t j = 0; j < i; j++) {
            const sp_gguf_tensor *u = sp_gguf_tensor_at(g, j);
            assert_true(t->offset + t->n_bytes <= u->offset || u->offset + u->n_bytes <= t->offset);
        }
    }
    fclose(fp);
}

static void test_smollm2(void **state) {
    (void)state;
    sp_gguf *g = open_model(SP_TEST_SMOLLM2);
    assert_int_equal(sp_gguf_version(g), 3);
    assert_int_equal(sp_gguf_alignment(g), 32);
    assert_int_equal(sp_gguf_file_size(g), 98362432);
    assert_int_equal(sp_gguf_n_kv(g), 33);
    assert_int_equal(sp_gguf_n_tensors(g), 272);
    check_str(g, "general.architecture", "llama");
    check_str(g, "tokenizer.ggml.model", "gpt2");
    check_str(g, "tokenizer.ggml.pre", "smollm");
    check_u32(g, "llama.block_count", 30);
    check_u32(g, "llama.embedding_length", 576);
    check_u32(g, "llama.context_length", 8192);
    check_u32(g, "tokenizer.ggml.bos_token_id", 1);
    check_u32(g, "tokenizer.ggml.eos_token_id", 2);
    float f = 0;
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), 1);
    assert_true(f == 100000.0f);
    assert_int_equal(sp_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), 1);
    assert_true(f == 1e-5f);
    bool b = true;
    assert_int_equal(sp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), 1);
    assert_false(b);

    const sp_gguf_value *v = NULL;
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, &v, &err), 1);
    assert_int_equal(v->v.arr.n, 49152);
    assert_true(sp_str_eq(v->v.arr.strs[0], "<|endoftext|>"));
    assert_true(sp_str_eq(v->v.arr.strs[1], "<|im_start|>"));
    assert_true(sp_str_eq(v->v.arr.strs[49151], "ectable"));
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.merges", SP_GGUF_STRING, &v, &err), 1);
    assert_int_equal(v->v.arr.n, 48900);
    assert_true(sp_str_eq(v->v.arr.strs[0], "\xc4\xa0 t"));
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.token_type", SP_GGUF_INT32, &v, &err), 1);
    assert_int_equal(v->v.arr.n, 49152);
    int32_t tt;
    memcpy(&tt, v->v.arr.data, 4);
    assert_int_equal(tt, 3);            /* control token */

    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SP_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 49152);
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->n_bytes, 30081024);
    const uint64_t data_start = 1785664;
    check_tensor(g, data_start, "token_embd.weight", SP_Q8_0, 2, 576, 49152, 1785664);
    check_tensor(g, data_start, "blk.0.attn_norm.weight", SP_F32, 1, 576, 1, 31866688);
    check_tensor(g, data_start, "blk.0.ffn_down.weight", SP_Q4_1, 2, 1536, 576, 31868992);
    check_tensor(g, data_start, "output_norm.weight", SP_F32, 1, 576, 1, 98360128);
    /* output_norm holds the last bytes of the file. */
    const sp_gguf_tensor *on = sp_gguf_find_tensor(g, "output_norm.weight");
    assert_int_equal(data_start + on->offset + on->n_bytes, sp_gguf_file_size(g));
    check_all_tensors(g, SP_TEST_SMOLLM2, data_start);
    assert_null(sp_gguf_find_tensor(g, "blk.30.attn_norm.weight"));
    sp_gguf_close(g);
}

static void test_gemma3(void **state) {
    (void)state;
    sp_gguf *g = open_model(SP_TEST_GEMMA3);
    assert_int_equal(sp_gguf_version(g), 3);
    assert_int_equal(sp_gguf_file_size(g), 253113024);
    assert_int_equal(sp_gguf_n_kv(g), 33);
    assert_int_equal(sp_gguf_n_tensors(g), 236);
    check_str(g, "general.architecture", "gemma3");
    check_str(g, "tokenizer.ggml.model", "llama");
    check_u32(g, "gemma3.block_count", 18);
    check_u32(g, "gemma3.embedding_length", 640);
    check_u32(g, "gemma3.context_length", 32768);
    check_u32(g, "tokenizer.ggml.bos_token_id", 2);
    check_u32(g, "tokenizer.ggml.eos_token_id", 1);
    sp_err err = {{0}};
    float f = 0;
    assert_int_equal(sp_gguf_get_f32(g, "gemma3.rope.freq_base", &f, &err), 1);
    assert_true(f == 1e6f);
    bool b = false;
    assert_int_equal(sp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), 1);
    assert_true(b);

    const sp_gguf_value *v = NULL;
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, &v, &err), 1);
    assert_int_equal(v->v.arr.n, 262144);
    assert_true(sp_str_eq(v->v.arr.strs[0], "<pad>"));
    assert_true(sp_str_eq(v->v.arr.strs[2], "<bos>"));
    assert_true(sp_str_eq(v->v.arr.strs[262143], "<unused6241>"));
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, &v, &err), 1);
    assert_int_equal(v->v.arr.n, 262144);
    float score;
    memcpy(&score, (const float *)v->v.arr.data + 1000, 4);
    assert_true(score == -506.0f);
    /* Wrong element type is an error, not a silent reinterpretation. */
    assert_int_equal(sp_gguf_get_arr(g, "tokenizer.ggml.scores", SP_GGUF_INT32, &v, &err), -1);

    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SP_Q8_0);
    assert_int_equal(t->ne[0], 640);
    assert_int_equal(t->ne[1], 262144);
    assert_int_equal(t->n_bytes, 178257920);
    assert_int_equal(t->offset, 6527680 - 6525120);
    const uint64_t data_start = 6525120;
    check_tensor(g, data_start, "token_embd.weight", SP_Q8_0, 2, 640, 262144, 6527680);
    check_tensor(g, data_start, "output_norm.weight", SP_F32, 1, 640, 1, 6525120);
    check_tensor(g, data_start, "blk.0.attn_k.weight", SP_Q5_0, 2, 640, 256, 184785600);
    int counts[SP_DTYPE_COUNT] = {0};
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) counts[sp_gguf_tensor_at(g, i)->type]++;
    assert_int_equal(counts[SP_F32], 109);
    assert_int_equal(counts[SP_Q5_0], 81);
    assert_int_equal(counts[SP_Q4_K], 27);
    assert_int_equal(counts[SP_Q8_0], 10);
    assert_int_equal(counts[SP_Q6_K], 9);
    check_all_tensors(g, SP_TEST_GEMMA3, data_start);
    sp_gguf_close(g);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_gemma3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

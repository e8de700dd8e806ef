/*
 * Unit tests for the GGUF reader.
 *
 * The tests write their own tiny GGUF files with the builder below (header,
 * metadata of every type, nested arrays, tensor infos, padding, data), read
 * them back, and check that a long list of corrupt files each fails with a
 * message naming the problem -- never a crash (these run under ASan+UBSan,
 * and every buffer handed to the reader is an exactly-sized heap copy so an
 * over-read is caught).
 */
#include "test_util.h"
#include "gguf/gguf.h"

#include <math.h>
#include <unistd.h>

/* ========================================================================
 * A small GGUF writer
 * ====================================================================== */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void gb_put(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void gb_le(gbuf *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        gb_put(b, &c, 1);
    }
}
static void gb_u8(gbuf *b, uint8_t v) { gb_le(b, v, 1); }
static void gb_u16(gbuf *b, uint16_t v) { gb_le(b, v, 2); }
static void gb_u32(gbuf *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(gbuf *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_f32(gbuf *b, float f) { uint32_t u; memcpy(&u, &f, 4); gb_u32(b, u); }
static void gb_f64(gbuf *b, double f) { uint64_t u; memcpy(&u, &f, 8); gb_u64(b, u); }
static void gb_strn(gbuf *b, const void *s, uint64_t n) { gb_u64(b, n); gb_put(b, s, (size_t)n); }
static void gb_str(gbuf *b, const char *s) { gb_strn(b, s, strlen(s)); }

typedef struct gtensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} gtensor;

typedef struct gfile {
    uint32_t version;
    uint32_t align;             /* padding the writer uses (may differ from the kv) */
    gbuf kv;                    /* encoded metadata pairs */
    uint64_t n_kv;
    gtensor t[8];
    int n_t;
    uint64_t next_off;          /* where the next auto-placed tensor goes */
    uint64_t n_kv_field, n_t_field; /* header counts to write; UINT64_MAX = actual */
    size_t tail;                /* zero bytes appended after the data */
    /* set by gf_build: */
    size_t header_end, data_start;
} gfile;

static void gf_init(gfile *f, uint32_t version) {
    memset(f, 0, sizeof *f);
    f->version = version;
    f->align = 32;
    f->n_kv_field = f->n_t_field = UINT64_MAX;
}

/* Bytes of a tensor's data if its shape and type are sane, else 0. */
static uint64_t gt_bytes(const gtensor *t) {
    const sp_dtype_info *info = sp_dtype_get(t->type);
    if (!info || t->n_dims < 1 || t->n_dims > 4 || t->ne[0] % info->block) return 0;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] == 0 || t->ne[d] > (1u << 20)) return 0;
        n *= t->ne[d];
        if (n > (1u << 20)) return 0;
    }
    return n / info->block * info->bytes;
}

/* Adds a tensor at an explicit offset. */
static gtensor *gf_tensor_at(gfile *f, const char *name, uint32_t type, uint64_t offset,
                             uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2, uint64_t ne3) {
    assert_true(f->n_t < 8);
    gtensor *t = &f->t[f->n_t++];
    *t = (gtensor){name, n_dims, {ne0, ne1, ne2, ne3, 1}, type, offset};
    uint64_t end = offset + gt_bytes(t);
    if (end > f->next_off) f->next_off = end;
    return t;
}

/* Adds a tensor after the previous ones, aligned to f->align. */
static gtensor *gf_tensor(gfile *f, const char *name, uint32_t type, uint32_t n_dims,
                          uint64_t ne0, uint64_t ne1) {
    uint64_t off = (f->next_off + f->align - 1) / f->align * f->align;
    return gf_tensor_at(f, name, type, off, n_dims, ne0, ne1, 1, 1);
}

static uint8_t data_pattern(uint64_t i) { return (uint8_t)(i * 31 + 7); }

/* Encodes the file: header, metadata, tensor infos, zero padding up to the
 * alignment, then the data section filled with data_pattern. */
static uint8_t *gf_build(gfile *f, size_t *len) {
    gbuf b = {0};
    gb_put(&b, "GGUF", 4);
    gb_u32(&b, f->version);
    gb_u64(&b, f->n_t_field != UINT64_MAX ? f->n_t_field : (uint64_t)f->n_t);
    gb_u64(&b, f->n_kv_field != UINT64_MAX ? f->n_kv_field : f->n_kv);
    gb_put(&b, f->kv.p, f->kv.n);
    uint64_t data_len = 0;
    for (int i = 0; i < f->n_t; i++) {
        const gtensor *t = &f->t[i];
        gb_str(&b, t->name);
        gb_u32(&b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 5; d++) gb_u64(&b, t->ne[d]);
        gb_u32(&b, t->type);
        gb_u64(&b, t->offset);
        uint64_t bytes = gt_bytes(t);
        if (bytes && t->offset + bytes > data_len && t->offset < (1u << 20)) data_len = t->offset + bytes;
    }
    f->header_end = b.n;
    while (b.n % f->align) gb_u8(&b, 0);
    f->data_start = b.n;
    for (uint64_t i = 0; i < data_len; i++) gb_u8(&b, data_pattern(i));
    for (size_t i = 0; i < f->tail; i++) gb_u8(&b, 0);
    *len = b.n;
    free(f->kv.p);
    f->kv = (gbuf){0};
    return b.p;
}

/* Metadata writers: key, type, value. */
static void kv_key(gfile *f, const char *key, uint32_t type) {
    gb_str(&f->kv, key);
    gb_u32(&f->kv, type);
    f->n_kv++;
}
static void kv_u32(gfile *f, const char *k, uint32_t v) { kv_key(f, k, SP_GGUF_UINT32); gb_u32(&f->kv, v); }
static void kv_str(gfile *f, const char *k, const char *s) { kv_key(f, k, SP_GGUF_STRING); gb_str(&f->kv, s); }
static void kv_arr(gfile *f, const char *k, uint32_t elem, uint64_t n) {
    kv_key(f, k, SP_GGUF_ARRAY);
    gb_u32(&f->kv, elem);
    gb_u64(&f->kv, n);
}

/* Opens an exactly-sized heap copy of buf[0..len) (so ASan sees any read
 * past the end), then frees the copy when the handle is closed by the
 * caller through close_copy. */
typedef struct opened {
    sp_gguf *g;
    uint8_t *copy;
    sp_err err;
} opened;

static opened open_copy(const uint8_t *buf, size_t len) {
    opened o;
    memset(&o, 0, sizeof o);
    o.copy = malloc(len ? len : 1);
    assert_non_null(o.copy);
    if (len) memcpy(o.copy, buf, len);
    o.g = sp_gguf_open_memory(o.copy, len, &o.err);
    return o;
}
static void close_copy(opened *o) {
    sp_gguf_close(o->g);
    free(o->copy);
}

/* Builds f, expects open to fail with a message containing every needle. */
static void expect_fail_buf(const uint8_t *buf, size_t len, const char *needle, const char *needle2) {
    opened o = open_copy(buf, len);
    if (o.g || !strstr(o.err.msg, needle) || (needle2 && !strstr(o.err.msg, needle2)))
        print_error("expected failure with '%s'%s%s, got %s: %s\n", needle, needle2 ? " and " : "",
                    needle2 ? needle2 : "", o.g ? "success" : "error", o.err.msg);
    assert_null(o.g);
    assert_non_null(strstr(o.err.msg, needle));
    if (needle2) assert_non_null(strstr(o.err.msg, needle2));
    assert_true(strncmp(o.err.msg, "gguf: ", 6) == 0);
    close_copy(&o);
}
static void expect_fail(gfile *f, const char *needle, const char *needle2) {
    size_t len;
    uint8_t *buf = gf_build(f, &len);
    expect_fail_buf(buf, len, needle, needle2);
    free(buf);
}

/* A small valid file with metadata of several kinds and three tensors, the
 * last one ending exactly at the end of the file. */
static uint8_t *small_valid(uint32_t version, size_t *len, gfile *f) {
    gf_init(f, version);
    kv_str(f, "general.architecture", "llama");
    kv_u32(f, "llama.block_count", 2);
    kv_arr(f, "tokenizer.ggml.tokens", SP_GGUF_STRING, 3);
    gb_str(&f->kv, "<s>");
    gb_str(&f->kv, "");
    gb_str(&f->kv, "hello");
    kv_arr(f, "nested", SP_GGUF_ARRAY, 2);
    gb_u32(&f->kv, SP_GGUF_INT16); gb_u64(&f->kv, 2); gb_u16(&f->kv, 1); gb_u16(&f->kv, 0xffff);
    gb_u32(&f->kv, SP_GGUF_STRING); gb_u64(&f->kv, 1); gb_str(&f->kv, "x");
    kv_key(f, "flag", SP_GGUF_BOOL); gb_u8(&f->kv, 1);
    gf_tensor(f, "a", SP_F32, 2, 4, 3);
    gf_tensor(f, "b", SP_Q8_0, 2, 64, 2);
    gf_tensor(f, "c", SP_F16, 1, 5, 1);
    return gf_build(f, len);
}

/* ========================================================================
 * Valid files
 * ====================================================================== */

static void test_every_metadata_type(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_key(&f, "u8", SP_GGUF_UINT8); gb_u8(&f.kv, 250);
    kv_key(&f, "i8", SP_GGUF_INT8); gb_u8(&f.kv, 0x80);
    kv_key(&f, "u16", SP_GGUF_UINT16); gb_u16(&f.kv, 65535);
    kv_key(&f, "i16", SP_GGUF_INT16); gb_u16(&f.kv, 0xfffe);
    kv_key(&f, "u32", SP_GGUF_UINT32); gb_u32(&f.kv, 4000000000u);
    kv_key(&f, "i32", SP_GGUF_INT32); gb_u32(&f.kv, 0x80000000u);
    kv_key(&f, "f32", SP_GGUF_FLOAT32); gb_f32(&f.kv, 1.5f);
    kv_key(&f, "t", SP_GGUF_BOOL); gb_u8(&f.kv, 1);
    kv_key(&f, "f", SP_GGUF_BOOL); gb_u8(&f.kv, 0);
    kv_key(&f, "s", SP_GGUF_STRING); gb_strn(&f.kv, "a\0b\xff", 4);
    kv_key(&f, "empty", SP_GGUF_STRING); gb_strn(&f.kv, "", 0);
    kv_key(&f, "u64", SP_GGUF_UINT64); gb_u64(&f.kv, UINT64_MAX);
    kv_key(&f, "i64", SP_GGUF_INT64); gb_u64(&f.kv, (uint64_t)1 << 63);
    kv_key(&f, "f64", SP_GGUF_FLOAT64); gb_f64(&f.kv, -2.25e300);
    kv_arr(&f, "a.u8", SP_GGUF_UINT8, 3); gb_u8(&f.kv, 1); gb_u8(&f.kv, 2); gb_u8(&f.kv, 255);
    kv_arr(&f, "a.i32", SP_GGUF_INT32, 2); gb_u32(&f.kv, (uint32_t)-7); gb_u32(&f.kv, 9);
    kv_arr(&f, "a.f32", SP_GGUF_FLOAT32, 2); gb_f32(&f.kv, 0.25f); gb_f32(&f.kv, -3.0f);
    kv_arr(&f, "a.bool", SP_GGUF_BOOL, 2); gb_u8(&f.kv, 0); gb_u8(&f.kv, 1);
    kv_arr(&f, "a.u64", SP_GGUF_UINT64, 1); gb_u64(&f.kv, 0x0102030405060708ull);
    kv_arr(&f, "a.f64", SP_GGUF_FLOAT64, 1); gb_f64(&f.kv, 3.125);
    kv_arr(&f, "a.u16", SP_GGUF_UINT16, 1); gb_u16(&f.kv, 0xbeef);
    kv_arr(&f, "a.i8", SP_GGUF_INT8, 1); gb_u8(&f.kv, 0xff);
    kv_arr(&f, "a.i16", SP_GGUF_INT16, 1); gb_u16(&f.kv, 0x8000);
    kv_arr(&f, "a.u32", SP_GGUF_UINT32, 1); gb_u32(&f.kv, 0xdeadbeef);
    kv_arr(&f, "a.i64", SP_GGUF_INT64, 1); gb_u64(&f.kv, (uint64_t)-5);
    kv_arr(&f, "a.str", SP_GGUF_STRING, 3);
    gb_str(&f.kv, "one"); gb_strn(&f.kv, "", 0); gb_strn(&f.kv, "\0\n", 2);
    kv_arr(&f, "a.empty", SP_GGUF_FLOAT32, 0);
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    opened o = open_copy(buf, len);
    assert_non_null(o.g);
    sp_gguf *g = o.g;
    assert_int_equal(sp_gguf_n_kv(g), 27);
    assert_int_equal(sp_gguf_n_tensors(g), 0);
    assert_int_equal(sp_gguf_version(g), 3);
    assert_int_equal(sp_gguf_alignment(g), 32);
    assert_int_equal(sp_gguf_file_size(g), len);
    /* Order is kept. */
    assert_true(sp_str_eq(sp_gguf_kv_at(g, 0)->key, "u8"));
    assert_true(sp_str_eq(sp_gguf_kv_at(g, 26)->key, "a.empty"));
    assert_null(sp_gguf_kv_at(g, 27));
    /* Scalars. */
    assert_int_equal(sp_gguf_get(g, "u8")->type, SP_GGUF_UINT8);
    assert_int_equal(sp_gguf_get(g, "u8")->v.u64, 250);
    assert_int_equal(sp_gguf_get(g, "i8")->v.i64, -128);
    assert_int_equal(sp_gguf_get(g, "u16")->v.u64, 65535);
    assert_int_equal(sp_gguf_get(g, "i16")->v.i64, -2);
    assert_int_equal(sp_gguf_get(g, "u32")->v.u64, 4000000000u);
    assert_true(sp_gguf_get(g, "i32")->v.i64 == INT32_MIN);
    assert_true(sp_gguf_get(g, "f32")->v.f64 == 1.5);
    assert_int_equal(sp_gguf_get(g, "t")->v.u64, 1);
    assert_int_equal(sp_gguf_get(g, "f")->v.u64, 0);
    const sp_gguf_value *s = sp_gguf_get(g, "s");
    assert_int_equal(s->type, SP_GGUF_STRING);
    assert_int_equal(s->v.str.len, 4);
    assert_memory_equal(s->v.str.ptr, "a\0b\xff", 4);
    /* Strings point into the buffer, not into copies. */
    assert_true((const uint8_t *)s->v.str.ptr > o.copy && (const uint8_t *)s->v.str.ptr < o.copy + len);
    assert_int_equal(sp_gguf_get(g, "empty")->v.str.len, 0);
    assert_true(sp_gguf_get(g, "u64")->v.u64 == UINT64_MAX);
    assert_true(sp_gguf_get(g, "i64")->v.i64 == INT64_MIN);
    assert_true(sp_gguf_get(g, "f64")->v.f64 == -2.25e300);
    /* Arrays. */
    const sp_gguf_value *a = sp_gguf_get(g, "a.u8");
    assert_int_equal(a->type, SP_GGUF_ARRAY);
    assert_int_equal(a->v.arr.type, SP_GGUF_UINT8);
    assert_int_equal(a->v.arr.n, 3);
    assert_memory_equal(a->v.arr.data, "\x01\x02\xff", 3);
    a = sp_gguf_get(g, "a.i32");
    int32_t i32[2];
    memcpy(i32, a->v.arr.data, 8);
    assert_int_equal(i32[0], -7);
    assert_int_equal(i32[1], 9);
    a = sp_gguf_get(g, "a.f32");
    float f32[2];
    memcpy(f32, a->v.arr.data, 8);
    assert_true(f32[0] == 0.25f && f32[1] == -3.0f);
    a = sp_gguf_get(g, "a.bool");
    assert_int_equal(a->v.arr.type, SP_GGUF_BOOL);
    assert_memory_equal(a->v.arr.data, "\x00\x01", 2);
    uint64_t u64;
    memcpy(&u64, sp_gguf_get(g, "a.u64")->v.arr.data, 8);
    assert_true(u64 == 0x0102030405060708ull);
    double f64;
    memcpy(&f64, sp_gguf_get(g, "a.f64")->v.arr.data, 8);
    assert_true(f64 == 3.125);
    uint16_t u16;
    memcpy(&u16, sp_gguf_get(g, "a.u16")->v.arr.data, 2);
    assert_int_equal(u16, 0xbeef);
    assert_int_equal(*(const int8_t *)sp_gguf_get(g, "a.i8")->v.arr.data, -1);
    int16_t i16;
    memcpy(&i16, sp_gguf_get(g, "a.i16")->v.arr.data, 2);
    assert_int_equal(i16, INT16_MIN);
    uint32_t u32;
    memcpy(&u32, sp_gguf_get(g, "a.u32")->v.arr.data, 4);
    assert_int_equal(u32, 0xdeadbeef);
    int64_t i64;
    memcpy(&i64, sp_gguf_get(g, "a.i64")->v.arr.data, 8);
    assert_int_equal(i64, -5);
    a = sp_gguf_get(g, "a.str");
    assert_int_equal(a->v.arr.type, SP_GGUF_STRING);
    assert_int_equal(a->v.arr.n, 3);
    assert_true(sp_str_eq(a->v.arr.strs[0], "one"));
    assert_int_equal(a->v.arr.strs[1].len, 0);
    assert_int_equal(a->v.arr.strs[2].len, 2);
    assert_memory_equal(a->v.arr.strs[2].ptr, "\0\n", 2);
    a = sp_gguf_get(g, "a.empty");
    assert_int_equal(a->v.arr.type, SP_GGUF_FLOAT32);
    assert_int_equal(a->v.arr.n, 0);
    assert_null(sp_gguf_get(g, "missing"));
    assert_null(sp_gguf_get(g, NULL));
    close_copy(&o);
    free(buf);
}

static void test_nested_arrays(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    /* [[1, 2], [3]] of UINT16, then [["a", "bc"], []] of strings,
     * then a 3-level [[[7]]] of INT32, then an empty array of arrays. */
    kv_arr(&f, "n.u16", SP_GGUF_ARRAY, 2);
    gb_u32(&f.kv, SP_GGUF_UINT16); gb_u64(&f.kv, 2); gb_u16(&f.kv, 1); gb_u16(&f.kv, 2);
    gb_u32(&f.kv, SP_GGUF_UINT16); gb_u64(&f.kv, 1); gb_u16(&f.kv, 3);
    kv_arr(&f, "n.str", SP_GGUF_ARRAY, 2);
    gb_u32(&f.kv, SP_GGUF_STRING); gb_u64(&f.kv, 2); gb_str(&f.kv, "a"); gb_str(&f.kv, "bc");
    gb_u32(&f.kv, SP_GGUF_STRING); gb_u64(&f.kv, 0);
    kv_arr(&f, "n.deep", SP_GGUF_ARRAY, 1);
    gb_u32(&f.kv, SP_GGUF_ARRAY); gb_u64(&f.kv, 1);
    gb_u32(&f.kv, SP_GGUF_INT32); gb_u64(&f.kv, 1); gb_u32(&f.kv, 7);
    kv_arr(&f, "n.none", SP_GGUF_ARRAY, 0);
    kv_u32(&f, "after", 42);        /* parsing continues correctly after them */
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    opened o = open_copy(buf, len);
    assert_non_null(o.g);
    const sp_gguf_value *v = sp_gguf_get(o.g, "n.u16");
    assert_int_equal(v->v.arr.type, SP_GGUF_ARRAY);
    assert_int_equal(v->v.arr.n, 2);
    const sp_gguf_value *e = &v->v.arr.vals[0];
    assert_int_equal(e->type, SP_GGUF_ARRAY);
    assert_int_equal(e->v.arr.type, SP_GGUF_UINT16);
    assert_int_equal(e->v.arr.n, 2);
    assert_memory_equal(e->v.arr.data, "\x01\x00\x02\x00", 4);
    e = &v->v.arr.vals[1];
    assert_int_equal(e->v.arr.n, 1);
    assert_memory_equal(e->v.arr.data, "\x03\x00", 2);
    v = sp_gguf_get(o.g, "n.str");
    assert_int_equal(v->v.arr.vals[0].v.arr.type, SP_GGUF_STRING);
    assert_int_equal(v->v.arr.vals[0].v.arr.n, 2);
    assert_true(sp_str_eq(v->v.arr.vals[0].v.arr.strs[0], "a"));
    assert_true(sp_str_eq(v->v.arr.vals[0].v.arr.strs[1], "bc"));
    assert_int_equal(v->v.arr.vals[1].v.arr.n, 0);
    v = sp_gguf_get(o.g, "n.deep");
    const sp_gguf_value *inner = &v->v.arr.vals[0].v.arr.vals[0];
    assert_int_equal(inner->type, SP_GGUF_ARRAY);
    assert_int_equal(inner->v.arr.type, SP_GGUF_INT32);
    assert_memory_equal(inner->v.arr.data, "\x07\x00\x00\x00", 4);
    v = sp_gguf_get(o.g, "n.none");
    assert_int_equal(v->v.arr.type, SP_GGUF_ARRAY);
    assert_int_equal(v->v.arr.n, 0);
    uint32_t after = 0;
    assert_int_equal(sp_gguf_get_u32(o.g, "after", &after, NULL), 1);
    assert_int_equal(after, 42);
    close_copy(&o);
    free(buf);
}

/* Writes a kv whose value is `levels` arrays nested in each other, the
 * innermost holding one UINT8. */
static void kv_nest(gfile *f, const char *key, int levels) {
    kv_key(f, key, SP_GGUF_ARRAY);
    for (int l = 1; l < levels; l++) {
        gb_u32(&f->kv, SP_GGUF_ARRAY);
        gb_u64(&f->kv, 1);
    }
    gb_u32(&f->kv, SP_GGUF_UINT8);
    gb_u64(&f->kv, 1);
    gb_u8(&f->kv, 9);
}

static void test_nesting_limit(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_nest(&f, "deep8", 8);
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    opened o = open_copy(buf, len);
    assert_non_null(o.g);
    const sp_gguf_value *v = sp_gguf_get(o.g, "deep8");
    for (int l = 1; l < 8; l++) v = &v->v.arr.vals[0];
    assert_int_equal(v->v.arr.type, SP_GGUF_UINT8);
    assert_int_equal(*(const uint8_t *)v->v.arr.data, 9);
    close_copy(&o);
    free(buf);

    gf_init(&f, 3);
    kv_u32(&f, "ok", 1);
    kv_nest(&f, "deep9", 9);
    expect_fail(&f, "metadata key 1 ('deep9')[0][0][0][0][0][0][0]: arrays nested more than 8 levels deep", NULL);
}

static void check_small_valid(const uint8_t *buf, size_t len, const gfile *f, uint32_t version) {
    opened o = open_copy(buf, len);
    if (!o.g) print_error("%s\n", o.err.msg);
    assert_non_null(o.g);
    sp_gguf *g = o.g;
    assert_int_equal(sp_gguf_version(g), version);
    assert_int_equal(sp_gguf_n_kv(g), 5);
    assert_int_equal(sp_gguf_n_tensors(g), 3);
    sp_str arch;
    assert_int_equal(sp_gguf_get_str(g, "general.architecture", &arch, NULL), 1);
    assert_true(sp_str_eq(arch, "llama"));
    /* Data section = end of the tensor infos rounded up to 32. */
    assert_int_equal(f->data_start % 32, 0);
    assert_true(f->data_start >= f->header_end && f->data_start < f->header_end + 32);
    static const struct { const char *name; uint32_t type, n_dims; uint64_t ne0, ne1, off, bytes; } want[3] = {
        {"a", SP_F32, 2, 4, 3, 0, 48},
        {"b", SP_Q8_0, 2, 64, 2, 64, 136},
        {"c", SP_F16, 1, 5, 1, 224, 10},
    };
    for (int i = 0; i < 3; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, (uint64_t)i);
        assert_non_null(t);
        assert_ptr_equal(t, sp_gguf_find_tensor(g, want[i].name));
        assert_true(sp_str_eq(t->name, want[i].name));
        assert_int_equal(t->type, want[i].type);
        assert_int_equal(t->n_dims, want[i].n_dims);
        assert_int_equal(t->ne[0], want[i].ne0);
        assert_int_equal(t->ne[1], want[i].ne1);
        assert_int_equal(t->ne[2], 1);
        assert_int_equal(t->ne[3], 1);
        assert_int_equal(t->n_elements, want[i].ne0 * want[i].ne1);
        assert_int_equal(t->offset, want[i].off);
        assert_int_equal(t->n_bytes, want[i].bytes);
        const uint8_t *d = t->data;
        assert_ptr_equal(d, o.copy + f->data_start + want[i].off);
        for (uint64_t k = 0; k < t->n_bytes; k++) assert_int_equal(d[k], data_pattern(t->offset + k));
    }
    /* The last tensor ends exactly at the end of the file. */
    assert_int_equal(want[2].off + want[2].bytes + f->data_start, len);
    assert_null(sp_gguf_tensor_at(g, 3));
    assert_null(sp_gguf_find_tensor(g, "d"));
    assert_null(sp_gguf_find_tensor(g, "a "));
    assert_null(sp_gguf_find_tensor(g, NULL));
    close_copy(&o);
}

static void test_tensors_v2_v3(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gfile f;
        size_t len;
        uint8_t *buf = small_valid(version, &len, &f);
        check_small_valid(buf, len, &f, version);
        free(buf);
    }
}

static void test_custom_alignment(void **state) {
    (void)state;
    static const uint32_t aligns[] = {1, 8, 64, 256};
    for (size_t k = 0; k < sizeof aligns / sizeof *aligns; k++) {
        uint32_t al = aligns[k];
        gfile f;
        gf_init(&f, 3);
        f.align = al;
        kv_str(&f, "general.name", "odd-length-name");
        kv_u32(&f, "general.alignment", al);
        gf_tensor(&f, "x", SP_F32, 1, 3, 1);       /* 12 bytes: the next one must be padded */
        gf_tensor(&f, "y", SP_I8, 1, 5, 1);
        gf_tensor(&f, "z", SP_Q4_0, 1, 32, 1);
        size_t len;
        uint8_t *buf = gf_build(&f, &len);
        assert_int_equal(f.data_start % al, 0);
        opened o = open_copy(buf, len);
        assert_non_null(o.g);
        assert_int_equal(sp_gguf_alignment(o.g), al);
        for (uint64_t i = 0; i < 3; i++) {
            const sp_gguf_tensor *t = sp_gguf_tensor_at(o.g, i);
            assert_int_equal(t->offset % al, 0);
            assert_ptr_equal(t->data, o.copy + f.data_start + t->offset);
        }
        assert_int_equal(sp_gguf_tensor_at(o.g, 1)->offset, (12 + al - 1) / al * al);
        close_copy(&o);
        free(buf);
    }
}

/* A file with no tensors may end anywhere after the metadata: its data
 * section is empty and nothing points into the padding. */
static void test_no_tensors(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_str(&f, "k", "v");
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    opened o = open_copy(buf, f.header_end);
    assert_non_null(o.g);
    assert_int_equal(sp_gguf_n_tensors(o.g), 0);
    assert_null(sp_gguf_tensor_at(o.g, 0));
    assert_null(sp_gguf_find_tensor(o.g, "k"));
    close_copy(&o);
    free(buf);
    /* And the smallest file of all: header only. */
    gf_init(&f, 2);
    buf = gf_build(&f, &len);
    o = open_copy(buf, 24);
    assert_non_null(o.g);
    assert_int_equal(sp_gguf_n_kv(o.g), 0);
    assert_null(sp_gguf_get(o.g, "k"));
    close_copy(&o);
    free(buf);
}

static void test_typed_getters(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_key(&f, "u8", SP_GGUF_UINT8); gb_u8(&f.kv, 200);
    kv_key(&f, "i8neg", SP_GGUF_INT8); gb_u8(&f.kv, 0xff);
    kv_key(&f, "i32", SP_GGUF_INT32); gb_u32(&f.kv, 123456);
    kv_key(&f, "u64big", SP_GGUF_UINT64); gb_u64(&f.kv, (uint64_t)1 << 40);
    kv_key(&f, "u64max", SP_GGUF_UINT64); gb_u64(&f.kv, UINT64_MAX);
    kv_key(&f, "i64neg", SP_GGUF_INT64); gb_u64(&f.kv, (uint64_t)-3);
    kv_key(&f, "f32", SP_GGUF_FLOAT32); gb_f32(&f.kv, 0.5f);
    kv_key(&f, "f64", SP_GGUF_FLOAT64); gb_f64(&f.kv, 1e-6);
    kv_key(&f, "f64huge", SP_GGUF_FLOAT64); gb_f64(&f.kv, 1e300);
    kv_key(&f, "b", SP_GGUF_BOOL); gb_u8(&f.kv, 1);
    kv_str(&f, "s", "text");
    kv_arr(&f, "arr", SP_GGUF_INT32, 2); gb_u32(&f.kv, 1); gb_u32(&f.kv, 2);
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    opened o = open_copy(buf, len);
    sp_gguf *g = o.g;
    assert_non_null(g);
    sp_err err = {{0}};
    uint32_t u = 0;
    int64_t i = 0;
    float x = 0;
    bool b = false;
    sp_str s = {0};
    const sp_gguf_value *v = NULL;

    assert_int_equal(sp_gguf_get_u32(g, "u8", &u, &err), 1);
    assert_int_equal(u, 200);
    assert_int_equal(sp_gguf_get_u32(g, "i32", &u, &err), 1);
    assert_int_equal(u, 123456);
    assert_int_equal(sp_gguf_get_u32(g, "i8neg", &u, &err), -1);
    assert_non_null(strstr(err.msg, "'i8neg'"));
    assert_non_null(strstr(err.msg, "does not fit in uint32"));
    assert_int_equal(sp_gguf_get_u32(g, "u64big", &u, &err), -1);
    assert_non_null(strstr(err.msg, "1099511627776 does not fit"));
    assert_int_equal(sp_gguf_get_u32(g, "s", &u, &err), -1);
    assert_non_null(strstr(err.msg, "has type STRING, expected an integer"));
    assert_int_equal(sp_gguf_get_u32(g, "f32", &u, &err), -1);
    assert_int_equal(sp_gguf_get_u32(g, "b", &u, &err), -1);
    assert_int_equal(sp_gguf_get_u32(g, "absent", &u, &err), 0);
    assert_int_equal(u, 123456);     /* untouched */

    assert_int_equal(sp_gguf_get_i64(g, "i8neg", &i, &err), 1);
    assert_int_equal(i, -1);
    assert_int_equal(sp_gguf_get_i64(g, "i64neg", &i, &err), 1);
    assert_int_equal(i, -3);
    assert_int_equal(sp_gguf_get_i64(g, "u64big", &i, &err), 1);
    assert_int_equal(i, (int64_t)1 << 40);
    assert_int_equal(sp_gguf_get_i64(g, "u64max", &i, &err), -1);
    assert_non_null(strstr(err.msg, "does not fit in int64"));
    assert_int_equal(sp_gguf_get_i64(g, "arr", &i, &err), -1);
    assert_non_null(strstr(err.msg, "has type ARRAY"));
    assert_int_equal(sp_gguf_get_i64(g, "absent", &i, &err), 0);

    assert_int_equal(sp_gguf_get_f32(g, "f32", &x, &err), 1);
    assert_true(x == 0.5f);
    assert_int_equal(sp_gguf_get_f32(g, "f64", &x, &err), 1);
    assert_true(x == 1e-6f);
    assert_int_equal(sp_gguf_get_f32(g, "f64huge", &x, &err), -1);
    assert_non_null(strstr(err.msg, "does not fit in a float"));
    assert_int_equal(sp_gguf_get_f32(g, "i32", &x, &err), -1);
    assert_non_null(strstr(err.msg, "expected FLOAT32 or FLOAT64"));
    assert_int_equal(sp_gguf_get_f32(g, "absent", &x, &err), 0);

    assert_int_equal(sp_gguf_get_bool(g, "b", &b, &err), 1);
    assert_true(b);
    assert_int_equal(sp_gguf_get_bool(g, "u8", &b, &err), -1);
    assert_non_null(strstr(err.msg, "expected BOOL"));
    assert_int_equal(sp_gguf_get_bool(g, "absent", &b, &err), 0);

    assert_int_equal(sp_gguf_get_str(g, "s", &s, &err), 1);
    assert_true(sp_str_eq(s, "text"));
    assert_int_equal(sp_gguf_get_str(g, "u8", &s, &err), -1);
    assert_non_null(strstr(err.msg, "expected STRING"));
    assert_int_equal(sp_gguf_get_str(g, "absent", &s, &err), 0);

    assert_int_equal(sp_gguf_get_arr(g, "arr", SP_GGUF_INT32, &v, &err), 1);
    assert_ptr_equal(v, sp_gguf_get(g, "arr"));
    assert_int_equal(v->v.arr.n, 2);
    assert_int_equal(sp_gguf_get_arr(g, "arr", SP_GGUF_UINT32, &v, &err), -1);
    assert_non_null(strstr(err.msg, "array of INT32, expected an array of UINT32"));
    assert_int_equal(sp_gguf_get_arr(g, "s", SP_GGUF_STRING, &v, &err), -1);
    assert_int_equal(sp_gguf_get_arr(g, "absent", SP_GGUF_STRING, &v, &err), 0);
    /* A NULL err is allowed. */
    assert_int_equal(sp_gguf_get_u32(g, "s", &u, NULL), -1);
    close_copy(&o);
    free(buf);
}

static void test_str_helpers(void **state) {
    (void)state;
    sp_str s = {"hello", 5};
    char buf[8];
    assert_string_equal(sp_str_cpy(s, buf, sizeof buf), "hello");
    assert_string_equal(sp_str_cpy(s, buf, 3), "he");
    assert_string_equal(sp_str_cpy(s, buf, 1), "");
    assert_true(sp_str_eq(s, "hello"));
    assert_false(sp_str_eq(s, "hell"));
    assert_false(sp_str_eq(s, "hello!"));
    assert_false(sp_str_eq(s, NULL));
    assert_true(sp_str_eq((sp_str){NULL, 0}, ""));
    assert_string_equal(sp_gguf_type_name(SP_GGUF_FLOAT64), "FLOAT64");
    assert_string_equal(sp_gguf_type_name(SP_GGUF_ARRAY), "ARRAY");
    assert_string_equal(sp_gguf_type_name(13), "unknown");
}

/* sp_gguf_open maps a real file; its errors name the path. */
/* Writes buf[0..len) to a new file named from the mkstemp template path
 * (filled in) and opens it (mapped). */
static sp_gguf *open_temp_file(const uint8_t *buf, size_t len, char *path, sp_err *err) {
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
    sp_gguf *g = sp_gguf_open(path, err);
    assert_non_null(g);
    return g;
}

static void test_open_file(void **state) {
    (void)state;
    gfile f;
    size_t len;
    uint8_t *buf = small_valid(3, &len, &f);
    char path[] = "/tmp/specula_test_gguf_XXXXXX";
    sp_err err = {{0}};
    sp_gguf *g = open_temp_file(buf, len, path, &err);
    assert_int_equal(sp_gguf_file_size(g), len);
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, "b");
    assert_non_null(t);
    assert_int_equal(((uintptr_t)t->data) % 32, 0);   /* mapping is page aligned */
    assert_memory_equal(t->data, buf + f.data_start + t->offset, t->n_bytes);
    sp_gguf_close(g);

    /* A truncated file on disk: the message carries the path. */
    assert_int_equal(truncate(path, (off_t)(len - 1)), 0);
    assert_null(sp_gguf_open(path, &err));
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "extends past the end of the file"));
    assert_int_equal(truncate(path, 0), 0);
    assert_null(sp_gguf_open(path, &err));
    assert_non_null(strstr(err.msg, "empty file"));
    unlink(path);
    assert_null(sp_gguf_open(path, &err));
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_null(sp_gguf_open("/tmp", &err));
    assert_non_null(strstr(err.msg, "not a regular file"));
    sp_gguf_close(NULL);
    free(buf);
}

/* Whether /proc/self/maps lists a mapping of exactly [lo, hi). */
static bool has_mapping(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a == lo && b == hi) found = true;
    }
    fclose(f);
    return found;
}

/* sp_gguf_release drops the pages of a mapped tensor from the resident set
 * but never changes what the tensor reads; over a caller buffer (where
 * MADV_DONTNEED would zero anonymous memory) and outside the data it does
 * nothing. */
static void test_release(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_str(&f, "general.name", "release");
    gf_tensor(&f, "small", SP_F32, 1, 3, 1);
    gf_tensor(&f, "big", SP_F32, 1, 65536, 1);      /* 256 KiB: whole pages inside */
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    char path[] = "/tmp/specula_test_release_XXXXXX";
    sp_err err = {{0}};
    sp_gguf *g = open_temp_file(buf, len, path, &err);
    for (uint64_t i = 0; i < 2; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        sp_gguf_release(g, t->data, t->n_bytes);
        assert_memory_equal(t->data, buf + f.data_start + t->offset, t->n_bytes);  /* read back from the file */
    }
    const sp_gguf_tensor *big = sp_gguf_find_tensor(g, "big");
    /* The released pages are a mapping of their own, so that no fault on
     * a neighbour can map them back (see sp_gguf_release). */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)big->data + pg - 1) / pg * pg;
    const uintptr_t hi = ((uintptr_t)big->data + big->n_bytes) / pg * pg;
    assert_true(has_mapping(lo, hi));
    sp_gguf_release(g, big->data, 0);                              /* nothing */
    sp_gguf_release(g, buf, len);                                  /* not inside the mapping: ignored */
    sp_gguf_release(g, (const uint8_t *)big->data + 8, SIZE_MAX);  /* wraps / past the end: ignored */
    assert_memory_equal(big->data, buf + f.data_start + big->offset, big->n_bytes);
    sp_gguf_close(g);
    unlink(path);

    opened o = open_copy(buf, len);
    assert_non_null(o.g);
    const sp_gguf_tensor *t = sp_gguf_find_tensor(o.g, "big");
    sp_gguf_release(o.g, t->data, t->n_bytes);
    assert_memory_equal(o.copy, buf, len);
    close_copy(&o);
    free(buf);
}

/* ========================================================================
 * Corrupt files
 * ====================================================================== */

/* Every proper prefix of a valid file fails cleanly (the last tensor ends
 * at the end of the file, so no prefix is itself valid). */
static void test_every_truncation(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gfile f;
        size_t len;
        uint8_t *buf = small_valid(version, &len, &f);
        for (size_t n = 0; n < len; n++) {
            opened o = open_copy(buf, n);
            if (o.g) print_error("prefix of %zu/%zu bytes opened\n", n, len);
            assert_null(o.g);
            assert_true(strncmp(o.err.msg, "gguf: ", 6) == 0);
            if (n < f.header_end) assert_non_null(strstr(o.err.msg, "truncated file"));
            else assert_non_null(strstr(o.err.msg, "extends past the end of the file"));
            close_copy(&o);
        }
        free(buf);
    }
}

/* Random byte corruption of a valid file must never crash or over-read
 * (a deterministic mini-fuzz; the real one is fuzz/fuzz_gguf.c). */
static void test_random_corruption(void **state) {
    (void)state;
    gfile f;
    size_t len;
    uint8_t *buf = small_valid(3, &len, &f);
    uint8_t *m = malloc(len);
    sp_rng rng = {12345};
    int opened_ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, buf, len);
        int flips = 1 + (int)(sp_rng_next(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(sp_rng_next(&rng) % f.header_end);
            uint64_t r = sp_rng_next(&rng);
            m[at] = (r & 1) ? (uint8_t)(r >> 8) : (uint8_t)(m[at] ^ (1u << ((r >> 8) % 8)));
        }
        opened o = open_copy(m, len);
        if (o.g) {
            opened_ok++;
            for (uint64_t i = 0; i < sp_gguf_n_tensors(o.g); i++) {
                const sp_gguf_tensor *t = sp_gguf_tensor_at(o.g, i);
                assert_true((const uint8_t *)t->data >= o.copy);
                assert_true((const uint8_t *)t->data + t->n_bytes <= o.copy + len);
            }
        } else {
            assert_true(strncmp(o.err.msg, "gguf: ", 6) == 0);
        }
        close_copy(&o);
    }
    assert_true(opened_ok > 0);     /* some flips hit harmless bytes (string contents) */
    free(m);
    free(buf);
}

static void test_bad_header(void **state) {
    (void)state;
    gfile f;
    size_t len;
    uint8_t *buf = small_valid(3, &len, &f);
    uint8_t *m = malloc(len);

    memcpy(m, buf, len);
    memcpy(m, "GGML", 4);
    expect_fail_buf(m, len, "bad magic 'GGML'", "not a GGUF file");
    memcpy(m, "\x00\x01\xfe\xff", 4);
    expect_fail_buf(m, len, "bad magic '\\x00\\x01\\xfe\\xff'", NULL);
    expect_fail_buf(m, 0, "truncated file", "magic needs 4 bytes but only 0 remain");
    expect_fail_buf(buf, 3, "truncated file", "magic");

    static const struct { uint32_t v; const char *msg; } versions[] = {
        {1, "unsupported GGUF version 1"},
        {0, "unsupported GGUF version 0"},
        {4, "unsupported GGUF version 4"},
        {99, "unsupported GGUF version 99"},
        {0x03000000u, "big-endian GGUF (version 3)"},
        {0x02000000u, "big-endian GGUF (version 2)"},
    };
    for (size_t k = 0; k < sizeof versions / sizeof *versions; k++) {
        memcpy(m, buf, len);
        for (int b = 0; b < 4; b++) m[4 + b] = (uint8_t)(versions[k].v >> (8 * b));
        expect_fail_buf(m, len, versions[k].msg, "header");
    }
    free(m);
    free(buf);
}

static void test_huge_counts(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    f.n_kv_field = (uint64_t)1 << 60;
    expect_fail(&f, "1152921504606846976 metadata pairs need more bytes than remain", NULL);

    gf_init(&f, 3);
    f.n_t_field = UINT64_MAX - 1;
    expect_fail(&f, "18446744073709551614 tensor infos need more bytes than remain", NULL);

    /* The example from the spec: a vocabulary array with too many strings. */
    gf_init(&f, 3);
    kv_u32(&f, "x", 1);
    kv_arr(&f, "tokenizer.ggml.tokens", SP_GGUF_STRING, (uint64_t)1 << 60);
    gb_str(&f.kv, "a");
    expect_fail(&f, "metadata key 1 ('tokenizer.ggml.tokens'): 1152921504606846976 array elements of type STRING "
                    "need more bytes than remain", "truncated file");

    /* n * element size overflows 64 bits. */
    gf_init(&f, 3);
    kv_arr(&f, "a", SP_GGUF_UINT64, (uint64_t)1 << 62);
    expect_fail(&f, "array elements of type UINT64 need more bytes than remain", NULL);

    gf_init(&f, 3);
    kv_arr(&f, "a", SP_GGUF_ARRAY, UINT64_MAX);
    expect_fail(&f, "array elements of type ARRAY need more bytes than remain", NULL);

    /* Counts that fit the bound but whose elements run out. */
    gf_init(&f, 3);
    kv_arr(&f, "a", SP_GGUF_STRING, 3);
    gb_str(&f.kv, "ok");
    gb_u64(&f.kv, 1000);
    gb_put(&f.kv, "0123456789abcdefghij", 20);
    expect_fail(&f, "metadata key 0 ('a'): string 1 needs 1000 bytes but only", "truncated file");

    gf_init(&f, 3);
    f.n_kv_field = 2;
    kv_u32(&f, "only.one", 7);
    gb_put(&f.kv, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 14);
    expect_fail(&f, "metadata key 1: empty key name", NULL);
}

static void test_bad_strings(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_key(&f, "s", SP_GGUF_STRING);
    gb_u64(&f.kv, (uint64_t)1 << 63);
    expect_fail(&f, "metadata key 0 ('s'): string value needs 9223372036854775808 bytes", "truncated file");

    gf_init(&f, 3);
    gb_u64(&f.kv, UINT64_MAX);      /* key length */
    f.n_kv++;
    f.tail = 16;
    expect_fail(&f, "metadata key 0: key needs 18446744073709551615 bytes", NULL);

    gf_init(&f, 3);
    kv_u32(&f, "", 1);
    expect_fail(&f, "metadata key 0: empty key name", NULL);

    gf_init(&f, 3);
    gb_strn(&f.kv, "a\0b", 3);
    gb_u32(&f.kv, SP_GGUF_UINT8);
    gb_u8(&f.kv, 1);
    f.n_kv++;
    expect_fail(&f, "metadata key 0 ('a\\x00b'): key name contains a NUL byte", NULL);

    gf_init(&f, 3);
    kv_u32(&f, "general.name", 1);
    kv_u32(&f, "other", 2);
    kv_str(&f, "general.name", "again");
    expect_fail(&f, "metadata key 2 ('general.name'): duplicate key (also metadata key 0)", NULL);

    /* Key names in messages are escaped, never printed raw. */
    gf_init(&f, 3);
    kv_key(&f, "bad\n\x1b[31m", 77);
    expect_fail(&f, "('bad\\x0a\\x1b[31m'): unknown value type 77", NULL);
}

static void test_bad_values(void **state) {
    (void)state;
    gfile f;
    gf_init(&f, 3);
    kv_u32(&f, "a", 1);
    kv_key(&f, "b.key", SP_GGUF_TYPE_COUNT);
    gb_u32(&f.kv, 0);
    expect_fail(&f, "metadata key 1 ('b.key'): unknown value type 13", "invalid file");

    gf_init(&f, 3);
    kv_key(&f, "b", 0xffffffffu);
    gb_u32(&f.kv, 0);
    expect_fail(&f, "unknown value type 4294967295", NULL);

    gf_init(&f, 3);
    kv_arr(&f, "arr", 42, 0);
    expect_fail(&f, "metadata key 0 ('arr'): unknown array element type 42", NULL);

    gf_init(&f, 3);
    kv_arr(&f, "arr", SP_GGUF_ARRAY, 2);
    gb_u32(&f.kv, SP_GGUF_UINT8); gb_u64(&f.kv, 0);
    gb_u32(&f.kv, 99); gb_u64(&f.kv, 0);
    expect_fail(&f, "metadata key 0 ('arr')[1]: unknown array element type 99", NULL);

    gf_init(&f, 3);
    kv_key(&f, "flag", SP_GGUF_BOOL);
    gb_u8(&f.kv, 2);
    expect_fail(&f, "BOOL value 2 is not 0 or 1", NULL);

    gf_init(&f, 3);
    kv_arr(&f, "flags", SP_GGUF_BOOL, 3);
    gb_u8(&f.kv, 1); gb_u8(&f.kv, 0); gb_u8(&f.kv, 0x80);
    expect_fail(&f, "BOOL array element 2 is 128, not 0 or 1", NULL);

    /* A scalar cut short at the end of the file. */
    gf_init(&f, 3);
    kv_key(&f, "x", SP_GGUF_UINT64);
    gb_u32(&f.kv, 5);
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    expect_fail_buf(buf, f.header_end, "metadata key 0 ('x'): UINT64 value needs 8 bytes but only 4 remain", NULL);
    free(buf);
}

static void test_bad_alignment(void **state) {
    (void)state;
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        gfile f;
        gf_init(&f, 3);
        kv_u32(&f, "general.alignment", bad[k]);
        char msg[96];
        snprintf(msg, sizeof msg, "alignment %u is not a non-zero power of two", bad[k]);
        expect_fail(&f, msg, "('general.alignment')");
    }
    gfile f;
    gf_init(&f, 3);
    kv_key(&f, "general.alignment", SP_GGUF_UINT64);
    gb_u64(&f.kv, 32);
    expect_fail(&f, "alignment must be of type UINT32, not UINT64", NULL);
}

static void test_bad_tensors(void **state) {
    (void)state;
    gfile f;

    gf_init(&f, 3);
    gf_tensor(&f, "ok", SP_F32, 1, 8, 1);
    gf_tensor_at(&f, "w", 4, 64, 1, 32, 1, 1, 1);
    expect_fail(&f, "tensor 1 ('w'): unknown tensor type 4", NULL);
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", 1000, 0, 1, 32, 1, 1, 1);
    expect_fail(&f, "unknown tensor type 1000", NULL);

    gf_init(&f, 3);
    f.tail = 64;
    gf_tensor_at(&f, "w", SP_F32, 0, 0, 32, 1, 1, 1);
    expect_fail(&f, "tensor 0 ('w'): n_dims 0 is not in 1..4", NULL);
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F32, 0, 5, 2, 2, 2, 2);
    expect_fail(&f, "n_dims 5 is not in 1..4", NULL);

    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F32, 0, 3, 4, 0, 2, 1);
    expect_fail(&f, "tensor 0 ('w'): dimension 1 is 0", NULL);

    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F32, 0, 3, (uint64_t)1 << 32, (uint64_t)1 << 30, 4, 1);
    expect_fail(&f, "element count overflows at dimension 2", NULL);
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F32, 0, 2, (uint64_t)1 << 32, (uint64_t)1 << 32, 1, 1);
    expect_fail(&f, "element count overflows at dimension 1", NULL);
    /* Element count fits in int64 but the byte size overflows. */
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F64, 0, 1, (uint64_t)1 << 62, 1, 1, 1);
    expect_fail(&f, "byte size of 4611686018427387904 elements of type F64 overflows", NULL);
    /* Byte size fits but the data is nowhere near the file. */
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_F32, 0, 2, (uint64_t)1 << 30, 4, 1, 1);
    expect_fail(&f, "tensor 0 ('w'): data at offset", "extends past the end of the file");

    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_Q4_K, 0, 2, 128, 2, 1, 1);
    expect_fail(&f, "ne[0] = 128 is not a multiple of the block size 256 of type Q4_K", NULL);
    gf_init(&f, 3);
    gf_tensor_at(&f, "w", SP_Q8_0, 0, 1, 33, 1, 1, 1);
    expect_fail(&f, "ne[0] = 33 is not a multiple of the block size 32 of type Q8_0", NULL);

    gf_init(&f, 3);
    gf_tensor(&f, "a", SP_F32, 1, 8, 1);
    gf_tensor_at(&f, "b", SP_F32, 48, 1, 8, 1, 1, 1);
    expect_fail(&f, "tensor 1 ('b'): data offset 48 is not a multiple of the alignment 32", NULL);
    gf_init(&f, 3);
    f.align = 64;
    kv_u32(&f, "general.alignment", 64);
    gf_tensor_at(&f, "b", SP_F32, 32, 1, 8, 1, 1, 1);
    expect_fail(&f, "data offset 32 is not a multiple of the alignment 64", NULL);

    /* Data past EOF: drop the last byte. */
    gf_init(&f, 3);
    gf_tensor(&f, "a", SP_F32, 1, 8, 1);
    gf_tensor(&f, "b", SP_F32, 1, 8, 1);
    size_t len;
    uint8_t *buf = gf_build(&f, &len);
    expect_fail_buf(buf, len - 1, "tensor 1 ('b'): data at offset", "extends past the end of the file");
    free(buf);
    gf_init(&f, 3);
    gf_tensor_at(&f, "far", SP_F32, (uint64_t)1 << 40, 1, 8, 1, 1, 1);
    expect_fail(&f, "tensor 0 ('far'): data at offset", "1099511627776");
    gf_init(&f, 3);
    gf_tensor_at(&f, "wrap", SP_F32, UINT64_MAX - 31, 1, 8, 1, 1, 1);
    expect_fail(&f, "tensor 0 ('wrap'): data at offset", "extends past the end of the file");

    /* Overlaps: b starts inside a; c exactly at a (listed out of order). */
    gf_init(&f, 3);
    gf_tensor_at(&f, "a", SP_F32, 0, 1, 16, 1, 1, 1);     /* [0, 64) */
    gf_tensor_at(&f, "b", SP_F32, 32, 1, 8, 1, 1, 1);     /* [32, 64) */
    expect_fail(&f, "tensor 0 ('a') data [0, 64) overlaps tensor 1 ('b') data [32, 64)", NULL);
    gf_init(&f, 3);
    gf_tensor_at(&f, "x", SP_F32, 64, 1, 8, 1, 1, 1);
    gf_tensor_at(&f, "c", SP_F32, 0, 1, 8, 1, 1, 1);
    gf_tensor_at(&f, "a", SP_F32, 0, 1, 8, 1, 1, 1);
    expect_fail(&f, "tensor 1 ('c') data [0, 32) overlaps tensor 2 ('a') data [0, 32)", NULL);
    /* Adjacent is fine. */
    gf_init(&f, 3);
    gf_tensor_at(&f, "b", SP_F32, 32, 1, 8, 1, 1, 1);
    gf_tensor_at(&f, "a", SP_F32, 0, 1, 8, 1, 1, 1);
    buf = gf_build(&f, &len);
    opened o = open_copy(buf, len);
    assert_non_null(o.g);
    close_copy(&o);
    free(buf);

    gf_init(&f, 3);
    gf_tensor(&f, "same", SP_F32, 1, 8, 1);
    gf_tensor(&f, "other", SP_F32, 1, 8, 1);
    gf_tensor(&f, "same", SP_F32, 1, 8, 1);
    expect_fail(&f, "tensor 2 ('same'): duplicate tensor name (also tensor 0)", NULL);

    gf_init(&f, 3);
    gf_tensor(&f, "", SP_F32, 1, 8, 1);
    expect_fail(&f, "tensor 0: empty tensor name", NULL);

    /* The header claims 2 tensors, 1 is present: caught by the count bound
     * when the file ends there, by the content of what follows otherwise. */
    gf_init(&f, 3);
    kv_str(&f, "general.name", "x");
    f.n_t_field = 2;
    gf_tensor(&f, "a", SP_F32, 1, 8, 1);
    buf = gf_build(&f, &len);
    expect_fail_buf(buf, f.header_end, "2 tensor infos need more bytes than remain", "truncated file");
    free(buf);
    gf_init(&f, 3);
    f.n_t_field = 2;
    f.tail = 40;
    gf_tensor(&f, "a", SP_F32, 1, 8, 1);
    expect_fail(&f, "truncated file: tensor 1: name needs", NULL);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_metadata_type),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_tensors_v2_v3),
        cmocka_unit_test(test_custom_alignment),
        cmocka_unit_test(test_no_tensors),
        cmocka_unit_test(test_typed_getters),
        cmocka_unit_test(test_str_helpers),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_random_corruption),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

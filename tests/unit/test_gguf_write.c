/*
 * Unit tests for the GGUF writer (gguf_write.c).
 *
 * Files are written to a temporary directory and read back with the reader
 * (sp_gguf_open): metadata of every type (nested arrays included) and
 * tensor data must come back identical, offsets honour the alignment,
 * overrides keep positions.  One tiny file is compared byte for byte with
 * an encoding written out by hand from the GGUF specification, so the
 * writer and reader cannot agree on a wrong layout.  Refused values and
 * I/O failures (missing directory, failing fill callback, file size limit)
 * must give clear errors and leave no file behind.
 */
#include "test_util.h"
#include "gguf/gguf.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ========================================================================
 * Helpers
 * ====================================================================== */

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/specula-gguf-write-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    DIR *d = opendir(tmpdir);
    if (!d) return 0;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tmpdir);
    return 0;
}

static const char *tpath(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

/* Number of entries in the temp directory (temporary files left behind
 * would show up here). */
static int dir_entries(void) {
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static sp_gguf_value v_u(uint32_t type, uint64_t x) { return (sp_gguf_value){.type = type, .v.u64 = x}; }
static sp_gguf_value v_i(uint32_t type, int64_t x) { return (sp_gguf_value){.type = type, .v.i64 = x}; }
static sp_gguf_value v_f(uint32_t type, double x) { return (sp_gguf_value){.type = type, .v.f64 = x}; }
static sp_gguf_value v_s(const char *s, uint64_t n) { return (sp_gguf_value){.type = SP_GGUF_STRING, .v.str = {s, n}}; }
static sp_gguf_value v_arr(uint32_t et, uint64_t n, const void *data) {
    sp_gguf_value v = {.type = SP_GGUF_ARRAY};
    v.v.arr.type = et;
    v.v.arr.n = n;
    v.v.arr.data = data;
    return v;
}

static void set_ok(sp_gguf_writer *w, const char *key, sp_gguf_value v) {
    sp_err err = {{0}};
    int rc = sp_gguf_writer_set(w, key, &v, &err);
    if (rc) fail_msg("set %s: %s", key, err.msg);
}

static void set_fails(sp_gguf_writer *w, const char *key, sp_gguf_value v, const char *needle) {
    sp_err err = {{0}};
    uint64_t n = sp_gguf_writer_n_kv(w);
    assert_int_equal(sp_gguf_writer_set(w, key, &v, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
    assert_int_equal(sp_gguf_writer_n_kv(w), n);
}

static size_t type_size(uint32_t t) {
    switch (t) {
    case SP_GGUF_UINT8: case SP_GGUF_INT8: case SP_GGUF_BOOL: return 1;
    case SP_GGUF_UINT16: case SP_GGUF_INT16: return 2;
    case SP_GGUF_UINT32: case SP_GGUF_INT32: case SP_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

/* Deep equality of two values (floats compared bit for bit via their
 * decoded doubles, NaN equal to NaN). */
static bool value_eq(const sp_gguf_value *a, const sp_gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case SP_GGUF_STRING:
        return a->v.str.len == b->v.str.len && (a->v.str.len == 0 || !memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len));
    case SP_GGUF_FLOAT32: case SP_GGUF_FLOAT64:
        return (isnan(a->v.f64) && isnan(b->v.f64)) || !memcmp(&a->v.f64, &b->v.f64, sizeof(double));
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        return a->v.i64 == b->v.i64;
    case SP_GGUF_ARRAY:
        break;
    default:
        return a->v.u64 == b->v.u64;
    }
    if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) return false;
    uint64_t n = a->v.arr.n;
    if (n == 0) return true;
    if (a->v.arr.type == SP_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            sp_gguf_value x = v_s(a->v.arr.strs[i].ptr, a->v.arr.strs[i].len);
            sp_gguf_value y = v_s(b->v.arr.strs[i].ptr, b->v.arr.strs[i].len);
            if (!value_eq(&x, &y)) return false;
        }
        return true;
    }
    if (a->v.arr.type == SP_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++)
            if (!value_eq(&a->v.arr.vals[i], &b->v.arr.vals[i])) return false;
        return true;
    }
    return !memcmp(a->v.arr.data, b->v.arr.data, n * type_size(a->v.arr.type));
}

static sp_gguf *open_ok(const char *path) {
    sp_err err = {{0}};
    sp_gguf *g = sp_gguf_open(path, &err);
    if (!g) fail_msg("open %s: %s", path, err.msg);
    return g;
}

static void write_ok(sp_gguf_writer *w, const char *path, sp_gguf_fill_fn fill, void *ctx) {
    sp_err err = {{0}};
    if (sp_gguf_writer_write(w, path, fill, ctx, &err)) fail_msg("write %s: %s", path, err.msg);
}

static void add_ok(sp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne, const void *data) {
    sp_err err = {{0}};
    if (sp_gguf_writer_add_tensor(w, name, type, n_dims, ne, data, &err) < 0)
        fail_msg("add %s: %s", name, err.msg);
}

/* ========================================================================
 * A writer holding every metadata type and a few tensors
 * ====================================================================== */

static const uint8_t u8s[] = {0, 1, 255};
static const int16_t i16s[] = {-32768, 0, 32767};
static const float f32s[] = {1.5f, -0.0f, 3.25e-20f};
static const double f64s[] = {3.141592653589793, -1e300};
static const uint8_t bools[] = {1, 0, 1, 1};
static const uint64_t u64s[] = {UINT64_MAX, 0};
static const int32_t i32a[] = {1, -2, 3}, i32b[] = {-7};
static const char nul_str[] = {'a', 0, 'b', '\xff'};

/* Tensor data: deterministic bytes per tensor. */
static void fill_bytes(uint8_t *p, uint64_t n, unsigned seed) {
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131u + seed * 17u + (i >> 8));
}

typedef struct fill_ctx {
    unsigned calls;
    int fail_at;                 /* index whose fill fails, or -1 */
} fill_ctx;

static int fill_cb(void *ctx, uint64_t index, void *dst, uint64_t n_bytes, sp_err *err) {
    fill_ctx *c = ctx;
    c->calls++;
    if ((int)index == c->fail_at) return sp_err_set(err, "synthetic failure");
    fill_bytes(dst, n_bytes, (unsigned)index);
    return 0;
}

static uint8_t t0[3 * 4], t1[2 * 34 * 3], t2[4 * 2 * 3 * 2];

/* Metadata of every scalar type at edge values, strings with any bytes,
 * arrays of every kind, nested arrays three levels deep. */
static void add_all_metadata(sp_gguf_writer *w) {
    set_ok(w, "u8", v_u(SP_GGUF_UINT8, 255));
    set_ok(w, "i8", v_i(SP_GGUF_INT8, -128));
    set_ok(w, "u16", v_u(SP_GGUF_UINT16, 65535));
    set_ok(w, "i16", v_i(SP_GGUF_INT16, -32768));
    set_ok(w, "u32", v_u(SP_GGUF_UINT32, 4000000000u));
    set_ok(w, "i32", v_i(SP_GGUF_INT32, INT32_MIN));
    set_ok(w, "f32", v_f(SP_GGUF_FLOAT32, -2.5));
    set_ok(w, "f32.nan", v_f(SP_GGUF_FLOAT32, NAN));
    set_ok(w, "f32.inf", v_f(SP_GGUF_FLOAT32, -INFINITY));
    set_ok(w, "bool", v_u(SP_GGUF_BOOL, 1));
    set_ok(w, "str", v_s("hello", 5));
    set_ok(w, "str.empty", v_s(NULL, 0));
    set_ok(w, "str.bytes", v_s(nul_str, sizeof nul_str));
    set_ok(w, "u64", v_u(SP_GGUF_UINT64, UINT64_MAX));
    set_ok(w, "i64", v_i(SP_GGUF_INT64, INT64_MIN));
    set_ok(w, "f64", v_f(SP_GGUF_FLOAT64, 1.0 / 3.0));
    set_ok(w, "arr.u8", v_arr(SP_GGUF_UINT8, 3, u8s));
    set_ok(w, "arr.i16", v_arr(SP_GGUF_INT16, 3, i16s));
    set_ok(w, "arr.f32", v_arr(SP_GGUF_FLOAT32, 3, f32s));
    set_ok(w, "arr.f64", v_arr(SP_GGUF_FLOAT64, 2, f64s));
    set_ok(w, "arr.bool", v_arr(SP_GGUF_BOOL, 4, bools));
    set_ok(w, "arr.u64", v_arr(SP_GGUF_UINT64, 2, u64s));
    set_ok(w, "arr.empty", v_arr(SP_GGUF_INT32, 0, NULL));
    sp_str strs[3] = {{"one", 3}, {"", 0}, {nul_str, sizeof nul_str}};
    sp_gguf_value sa = v_arr(SP_GGUF_STRING, 3, NULL);
    sa.v.arr.strs = strs;
    set_ok(w, "arr.str", sa);
    /* [[1,-2,3],[-7],[]] and [[["one","",..]], []] */
    sp_gguf_value inner[3] = {v_arr(SP_GGUF_INT32, 3, i32a), v_arr(SP_GGUF_INT32, 1, i32b),
                              v_arr(SP_GGUF_INT32, 0, NULL)};
    sp_gguf_value nest = v_arr(SP_GGUF_ARRAY, 3, NULL);
    nest.v.arr.vals = inner;
    set_ok(w, "arr.nested", nest);
    sp_gguf_value lvl2[1] = {sa};
    sp_gguf_value lvl1[2] = {v_arr(SP_GGUF_ARRAY, 1, NULL), v_arr(SP_GGUF_ARRAY, 0, NULL)};
    lvl1[0].v.arr.vals = lvl2;
    sp_gguf_value deep = v_arr(SP_GGUF_ARRAY, 2, NULL);
    deep.v.arr.vals = lvl1;
    set_ok(w, "arr.deep", deep);
}

/* Three tensors: F32 1-D of 3 (12 bytes: needs padding), Q8_0 2-D with
 * data from the fill callback, F16 3-D. */
static void add_tensors(sp_gguf_writer *w) {
    fill_bytes(t0, sizeof t0, 100);
    fill_bytes(t2, sizeof t2, 102);
    uint64_t ne0[1] = {3}, ne1[2] = {64, 3}, ne2[3] = {4, 3, 2};
    add_ok(w, "norm.weight", SP_F32, 1, ne0, t0);
    add_ok(w, "blk.0.q", SP_Q8_0, 2, ne1, NULL);
    add_ok(w, "blk.0.cube", SP_F16, 3, ne2, t2);
}

/* Checks the tensors of add_tensors in g (alignment `align`). */
static void check_tensors(const sp_gguf *g, uint32_t align) {
    assert_int_equal(sp_gguf_n_tensors(g), 3);
    assert_int_equal(sp_gguf_alignment(g), align);
    assert_int_equal(sp_gguf_file_size(g) % align, 0);
    fill_bytes(t1, sizeof t1, 1);
    const struct { const char *name; uint32_t type, n_dims; uint64_t ne[4]; const uint8_t *data; uint64_t n; } want[3] = {
        {"norm.weight", SP_F32, 1, {3, 1, 1, 1}, t0, sizeof t0},
        {"blk.0.q", SP_Q8_0, 2, {64, 3, 1, 1}, t1, sizeof t1},
        {"blk.0.cube", SP_F16, 3, {4, 3, 2, 1}, t2, sizeof t2},
    };
    for (int i = 0; i < 3; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, (uint64_t)i);
        assert_true(sp_str_eq(t->name, want[i].name));
        assert_int_equal(t->type, want[i].type);
        assert_int_equal(t->n_dims, want[i].n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], want[i].ne[d]);
        assert_int_equal(t->n_bytes, want[i].n);
        assert_int_equal(t->offset % align, 0);
        assert_int_equal(((const uint8_t *)t->data - (const uint8_t *)sp_gguf_tensor_at(g, 0)->data) % align, 0);
        assert_memory_equal(t->data, want[i].data, want[i].n);
    }
}

/* ========================================================================
 * Tests
 * ====================================================================== */

/* Every metadata value comes back deep-equal, in order; tensors intact. */
static void test_roundtrip(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    add_all_metadata(w);
    add_tensors(w);
    fill_ctx fc = {0, -1};
    write_ok(w, tpath("all.gguf"), fill_cb, &fc);
    assert_int_equal(fc.calls, 1);       /* only the tensor without data */
    sp_gguf *g = open_ok(tpath("all.gguf"));
    assert_int_equal(sp_gguf_version(g), 3);
    assert_int_equal(sp_gguf_n_kv(g), sp_gguf_writer_n_kv(w));
    for (uint64_t i = 0; i < sp_gguf_n_kv(g); i++) {
        const sp_gguf_kv *kv = sp_gguf_kv_at(g, i);
        char key[64];
        sp_str_cpy(kv->key, key, sizeof key);
        const sp_gguf_value *mine = sp_gguf_writer_get(w, key);
        assert_non_null(mine);
        if (!value_eq(&kv->val, mine)) fail_msg("value of '%s' differs after the round trip", key);
    }
    /* spot checks against literal values, independent of value_eq */
    int64_t i64;
    assert_int_equal(sp_gguf_get_i64(g, "i64", &i64, NULL), 1);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(sp_gguf_get(g, "u64")->v.u64, UINT64_MAX);
    assert_true(sp_str_eq(sp_gguf_kv_at(g, 0)->key, "u8"));
    const sp_gguf_value *nest = sp_gguf_get(g, "arr.nested");
    assert_int_equal(nest->v.arr.n, 3);
    assert_int_equal(nest->v.arr.vals[0].v.arr.n, 3);
    int32_t x;
    memcpy(&x, (const uint8_t *)nest->v.arr.vals[0].v.arr.data + 4, 4);
    assert_int_equal(x, -2);
    const sp_gguf_value *deep = sp_gguf_get(g, "arr.deep");
    assert_int_equal(deep->v.arr.vals[0].v.arr.vals[0].v.arr.n, 3);
    assert_true(sp_str_eq(deep->v.arr.vals[0].v.arr.vals[0].v.arr.strs[0], "one"));
    assert_int_equal(sp_gguf_get(g, "str.bytes")->v.str.len, 4);
    assert_true(isnan(sp_gguf_get(g, "f32.nan")->v.f64));
    check_tensors(g, 32);
    sp_gguf_close(g);
    sp_gguf_writer_free(w);
}

/* A file re-written from its own reader handle (copy_kv, borrowed tensor
 * data) is byte-identical; the source may close before the write since
 * metadata is copied (ASan would catch a use after free). */
static void test_rewrite_identical(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_ok(w, "general.alignment", v_u(SP_GGUF_UINT32, 64));
    add_all_metadata(w);
    add_tensors(w);
    fill_ctx fc = {0, -1};
    write_ok(w, tpath("a.gguf"), fill_cb, &fc);
    sp_gguf_writer_free(w);

    sp_gguf *a = open_ok(tpath("a.gguf"));
    sp_gguf_writer *w2 = sp_gguf_writer_create();
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_writer_copy_kv(w2, a, &err), 0);
    for (uint64_t i = 0; i < sp_gguf_n_tensors(a); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(a, i);
        char name[64];
        add_ok(w2, sp_str_cpy(t->name, name, sizeof name), t->type, t->n_dims, t->ne, t->data);
    }
    write_ok(w2, tpath("b.gguf"), NULL, NULL);
    sp_gguf_close(a);
    sp_gguf_writer_free(w2);

    size_t na, nb;
    char *ba = sp_test_read_file(tpath("a.gguf"), &na), *bb = sp_test_read_file(tpath("b.gguf"), &nb);
    assert_non_null(ba);
    assert_non_null(bb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, na);
    free(ba);
    free(bb);

    /* metadata-only copy, then the source is closed before writing */
    a = open_ok(tpath("a.gguf"));
    w2 = sp_gguf_writer_create();
    assert_int_equal(sp_gguf_writer_copy_kv(w2, a, &err), 0);
    sp_gguf_close(a);
    write_ok(w2, tpath("c.gguf"), NULL, NULL);
    sp_gguf *c = open_ok(tpath("c.gguf"));
    assert_int_equal(sp_gguf_n_tensors(c), 0);
    assert_int_equal(sp_gguf_n_kv(c), sp_gguf_writer_n_kv(w2));
    assert_true(sp_str_eq(sp_gguf_get(c, "arr.str")->v.arr.strs[0], "one"));
    sp_gguf_close(c);
    sp_gguf_writer_free(w2);
}

/* general.alignment is honoured: 64 and 1 (the F32 tensor of 12 bytes
 * needs padding at 64); an invalid alignment is refused at write time and
 * nothing is left behind. */
static void test_alignment(void **state) {
    (void)state;
    uint32_t aligns[] = {64, 1, 256};
    for (int k = 0; k < 3; k++) {
        sp_gguf_writer *w = sp_gguf_writer_create();
        set_ok(w, "general.alignment", v_u(SP_GGUF_UINT32, aligns[k]));
        set_ok(w, "s", v_s("x", 1));   /* odd header length */
        add_tensors(w);
        fill_ctx fc = {0, -1};
        write_ok(w, tpath("al.gguf"), fill_cb, &fc);
        sp_gguf *g = open_ok(tpath("al.gguf"));
        check_tensors(g, aligns[k]);
        /* at 64 and 256 the 12-byte tensor is followed by padding */
        if (aligns[k] > 1) assert_int_equal(sp_gguf_tensor_at(g, 1)->offset, aligns[k]);
        else assert_int_equal(sp_gguf_tensor_at(g, 1)->offset, 12);
        sp_gguf_close(g);
        sp_gguf_writer_free(w);
    }
    int before = dir_entries();
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_ok(w, "general.alignment", v_u(SP_GGUF_UINT32, 48));
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_writer_write(w, tpath("bad.gguf"), NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "general.alignment 48 is not a non-zero power of two"));
    assert_non_null(strstr(err.msg, "bad.gguf"));
    set_ok(w, "general.alignment", v_u(SP_GGUF_UINT64, 64));
    assert_int_equal(sp_gguf_writer_write(w, tpath("bad.gguf"), NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "must be of type UINT32, not UINT64"));
    assert_int_equal(dir_entries(), before);
    sp_gguf_writer_free(w);
}

/* Overrides: a copied key set again keeps its position, new keys are
 * appended, removed keys vanish, an existing file is replaced. */
static void test_overrides(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_ok(w, "general.architecture", v_s("llama", 5));
    set_ok(w, "llama.block_count", v_u(SP_GGUF_UINT32, 30));
    set_ok(w, "general.file_type", v_u(SP_GGUF_UINT32, 3));
    set_ok(w, "general.name", v_s("old", 3));
    write_ok(w, tpath("src.gguf"), NULL, NULL);
    sp_gguf_writer_free(w);

    sp_gguf *src = open_ok(tpath("src.gguf"));
    w = sp_gguf_writer_create();
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_writer_copy_kv(w, src, &err), 0);
    sp_gguf_close(src);
    assert_int_equal(sp_gguf_writer_set_u32(w, "llama.block_count", 10, &err), 0);
    assert_int_equal(sp_gguf_writer_set_u32(w, "general.file_type", 7, &err), 0);
    assert_int_equal(sp_gguf_writer_set_str(w, "general.name", "draft", &err), 0);
    assert_int_equal(sp_gguf_writer_set_u32(w, "general.quantization_version", 2, &err), 0);
    assert_true(sp_gguf_writer_remove(w, "general.file_type"));
    assert_false(sp_gguf_writer_remove(w, "general.file_type"));
    assert_int_equal(sp_gguf_writer_set_u32(w, "general.file_type", 7, &err), 0);
    write_ok(w, tpath("src.gguf"), NULL, NULL);   /* replaces the source file */
    sp_gguf_writer_free(w);

    sp_gguf *g = open_ok(tpath("src.gguf"));
    const char *order[] = {"general.architecture", "llama.block_count", "general.name",
                           "general.quantization_version", "general.file_type"};
    assert_int_equal(sp_gguf_n_kv(g), 5);
    for (int i = 0; i < 5; i++) assert_true(sp_str_eq(sp_gguf_kv_at(g, (uint64_t)i)->key, order[i]));
    uint32_t u;
    assert_int_equal(sp_gguf_get_u32(g, "llama.block_count", &u, NULL), 1);
    assert_int_equal(u, 10);
    assert_int_equal(sp_gguf_get_u32(g, "general.file_type", &u, NULL), 1);
    assert_int_equal(u, 7);
    sp_str s;
    assert_int_equal(sp_gguf_get_str(g, "general.name", &s, NULL), 1);
    assert_true(sp_str_eq(s, "draft"));
    sp_gguf_close(g);
}

/* The exact bytes of a tiny file, written out from the specification. */
static void test_golden_bytes(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_ok(w, "k", v_i(SP_GGUF_INT16, -2));
    static const float data[2] = {1.0f, -2.0f};
    uint64_t ne[1] = {2};
    add_ok(w, "t", SP_F32, 1, ne, data);
    write_ok(w, tpath("gold.gguf"), NULL, NULL);
    sp_gguf_writer_free(w);
    static const uint8_t want[] = {
        'G', 'G', 'U', 'F', 3, 0, 0, 0,                 /* magic, version 3 */
        1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, /* 1 tensor, 1 pair */
        1, 0, 0, 0, 0, 0, 0, 0, 'k', 3, 0, 0, 0, 0xfe, 0xff, /* "k" INT16 -2 */
        1, 0, 0, 0, 0, 0, 0, 0, 't', 1, 0, 0, 0,        /* "t", 1 dim */
        2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,             /* ne 2, type F32 */
        0, 0, 0, 0, 0, 0, 0, 0,                         /* offset 0 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* pad 72 -> 96 */
        0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0,                /* 1.0f, -2.0f */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* pad 104 -> 128 */
        0, 0, 0, 0, 0, 0, 0, 0,
    };
    size_t n;
    char *got = sp_test_read_file(tpath("gold.gguf"), &n);
    assert_non_null(got);
    assert_int_equal(n, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    free(got);
}

/* Values that do not fit their type, or that the reader would refuse. */
static void test_refused_values(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_fails(w, "a", v_u(SP_GGUF_UINT8, 256), "value 256 does not fit in UINT8");
    set_fails(w, "a", v_u(SP_GGUF_UINT16, 70000), "does not fit in UINT16");
    set_fails(w, "a", v_u(SP_GGUF_UINT32, 1ull << 32), "does not fit in UINT32");
    set_fails(w, "a", v_i(SP_GGUF_INT8, -129), "value -129 does not fit in INT8");
    set_fails(w, "a", v_i(SP_GGUF_INT32, 1ll << 31), "does not fit in INT32");
    set_fails(w, "a", v_u(SP_GGUF_BOOL, 2), "does not fit in BOOL");
    set_fails(w, "a", v_f(SP_GGUF_FLOAT32, 1e300), "does not fit in FLOAT32");
    set_fails(w, "a", v_u(13, 0), "unknown value type 13");
    set_fails(w, "", v_u(SP_GGUF_UINT8, 1), "empty metadata key");
    set_fails(w, "a", v_arr(99, 1, u8s), "unknown array element type 99");
    set_fails(w, "a", v_arr(SP_GGUF_BOOL, 3, u8s), "BOOL array element 2 is 255");
    sp_gguf_value bad_elem[1] = {v_u(SP_GGUF_UINT8, 1)};
    sp_gguf_value nest = v_arr(SP_GGUF_ARRAY, 1, NULL);
    nest.v.arr.vals = bad_elem;
    set_fails(w, "a", nest, "element 0 of an array of arrays has type UINT8");
    /* depth 8 is the limit: 8 levels write and read back, 9 are refused */
    sp_gguf_value lv[9];
    lv[8] = v_arr(SP_GGUF_UINT8, 1, u8s);
    for (int i = 7; i >= 0; i--) {
        lv[i] = v_arr(SP_GGUF_ARRAY, 1, NULL);
        lv[i].v.arr.vals = &lv[i + 1];
    }
    set_ok(w, "depth8", lv[1]);
    set_fails(w, "depth9", lv[0], "nested more than 8 levels deep");
    /* a refused value leaves an existing key's value alone */
    set_ok(w, "keep", v_u(SP_GGUF_UINT8, 7));
    set_fails(w, "keep", v_u(SP_GGUF_UINT8, 300), "does not fit");
    assert_int_equal(sp_gguf_writer_get(w, "keep")->v.u64, 7);
    write_ok(w, tpath("depth.gguf"), NULL, NULL);
    sp_gguf *g = open_ok(tpath("depth.gguf"));
    assert_non_null(sp_gguf_get(g, "depth8"));
    assert_int_equal(sp_gguf_n_kv(g), 2);
    sp_gguf_close(g);
    sp_gguf_writer_free(w);
}

static void add_fails(sp_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, const char *needle) {
    sp_err err = {{0}};
    uint64_t n = sp_gguf_writer_n_tensors(w);
    assert_int_equal(sp_gguf_writer_add_tensor(w, name, type, n_dims, ne, t0, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
    assert_int_equal(sp_gguf_writer_n_tensors(w), n);
}

static void test_refused_tensors(void **state) {
    (void)state;
    sp_gguf_writer *w = sp_gguf_writer_create();
    uint64_t ne[5] = {32, 2, 1, 1, 1}, zero[2] = {32, 0}, odd[1] = {33}, huge[2] = {1ull << 40, 1ull << 40};
    add_ok(w, "a", SP_Q4_0, 2, ne, t1);
    add_fails(w, "a", SP_F32, 1, ne, "duplicate tensor name 'a'");
    add_fails(w, "", SP_F32, 1, ne, "empty tensor name");
    add_fails(w, "b", SP_F32, 0, ne, "n_dims 0 is not in 1..4");
    add_fails(w, "b", SP_F32, 5, ne, "n_dims 5 is not in 1..4");
    add_fails(w, "b", SP_F32, 2, zero, "dimension 1 is 0");
    add_fails(w, "b", SP_Q4_0, 1, odd, "ne[0] = 33 is not a multiple of the block size 32 of type Q4_0");
    add_fails(w, "b", 4, 1, ne, "unknown tensor type 4");
    add_fails(w, "b", SP_F32, 2, huge, "element count overflows");
    sp_err err = {{0}};
    assert_int_equal(sp_gguf_writer_add_tensor(w, "b", SP_F32, 1, ne, NULL, &err), 1);
    /* a tensor without data needs a fill callback */
    assert_int_equal(sp_gguf_writer_write(w, tpath("nofill.gguf"), NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "no fill callback"));
    sp_gguf_writer_free(w);
}

/* I/O and fill failures: clear errors, the old file untouched, no
 * temporary file left. */
static void test_write_failures(void **state) {
    (void)state;
    sp_err err = {{0}};
    sp_gguf_writer *w = sp_gguf_writer_create();
    set_ok(w, "x", v_u(SP_GGUF_UINT32, 1));
    assert_int_equal(sp_gguf_writer_write(w, "/nonexistent-dir/x.gguf", NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "gguf: writing '/nonexistent-dir/x.gguf': cannot create a temporary file"));
    assert_non_null(strstr(err.msg, "No such file or directory"));

    /* fill failure: the existing file stays as it was */
    write_ok(w, tpath("keep.gguf"), NULL, NULL);
    size_t n0;
    char *before = sp_test_read_file(tpath("keep.gguf"), &n0);
    int entries = dir_entries();
    add_tensors(w);
    fill_ctx fc = {0, 1};
    assert_int_equal(sp_gguf_writer_write(w, tpath("keep.gguf"), fill_cb, &fc, &err), -1);
    assert_non_null(strstr(err.msg, "keep.gguf': tensor 1 ('blk.0.q'): synthetic failure"));
    size_t n1;
    char *after = sp_test_read_file(tpath("keep.gguf"), &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
    assert_int_equal(dir_entries(), entries);

    /* the disk "fills up": a file size limit below the file's size */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    fc.fail_at = -1;
    int rc = sp_gguf_writer_write(w, tpath("big.gguf"), fill_cb, &fc, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err.msg, "gguf: writing '"));
    assert_non_null(strstr(err.msg, "write error: File too large"));
    assert_int_equal(dir_entries(), entries);
    sp_gguf_writer_free(w);
}

int main(void) {
    sp_base_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_rewrite_identical),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_golden_bytes),
        cmocka_unit_test(test_refused_values),
        cmocka_unit_test(test_refused_tensors),
        cmocka_unit_test(test_write_failures),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}

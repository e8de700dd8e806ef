/*
 * libFuzzer harness for the GGUF reader.
 *
 * Opens the input with sp_gguf_open_memory and, when it is accepted, walks
 * every metadata value and tensor and reads every byte the accessors
 * expose (libFuzzer hands us an exactly-sized heap copy, so ASan catches
 * any read outside the input).  It also checks the reader's promises:
 * rejected inputs get a "gguf: " message, every pointer lies inside the
 * input, lookups by name find the same entries as the index walk, and
 * tensor sizes match the dtype table.  A broken promise aborts.
 *
 *   make fuzz && fuzz/run-fuzz.sh 600
 */
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static const uint8_t *g_lo, *g_hi;   /* the input being fuzzed */
static volatile uint8_t g_sink;

#define CHECK(c) do { if (!(c)) abort(); } while (0)

/* Reads n bytes at p, which must lie inside the input. */
static void touch(const void *p, uint64_t n) {
    if (n == 0) return;
    const uint8_t *b = p;
    CHECK(b >= g_lo && b <= g_hi && n <= (uint64_t)(g_hi - b));
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= b[i];
    g_sink ^= x;
}

static uint64_t elem_size(uint32_t t) {
    switch (t) {
    case SP_GGUF_UINT8: case SP_GGUF_INT8: case SP_GGUF_BOOL: return 1;
    case SP_GGUF_UINT16: case SP_GGUF_INT16: return 2;
    case SP_GGUF_UINT32: case SP_GGUF_INT32: case SP_GGUF_FLOAT32: return 4;
    case SP_GGUF_UINT64: case SP_GGUF_INT64: case SP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static void walk_value(const sp_gguf_value *v, int depth) {
    CHECK(v->type < SP_GGUF_TYPE_COUNT && depth <= 8);
    if (v->type == SP_GGUF_BOOL) CHECK(v->v.u64 <= 1);
    if (v->type == SP_GGUF_STRING) touch(v->v.str.ptr, v->v.str.len);
    if (v->type != SP_GGUF_ARRAY) return;
    uint32_t et = v->v.arr.type;
    uint64_t n = v->v.arr.n;
    CHECK(et < SP_GGUF_TYPE_COUNT);
    if (n == 0) return;
    if (et == SP_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) touch(v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
    } else if (et == SP_GGUF_ARRAY) {
        for (uint64_t i = 0; i < n; i++) {
            CHECK(v->v.arr.vals[i].type == SP_GGUF_ARRAY);
            walk_value(&v->v.arr.vals[i], depth + 1);
        }
    } else {
        touch(v->v.arr.data, n * elem_size(et));
        if (et == SP_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++) CHECK(((const uint8_t *)v->v.arr.data)[i] <= 1);
    }
}

/* Copies a name into a NUL-terminated heap string, or NULL if it holds a
 * NUL byte (then it cannot be looked up by C string). */
static char *cstr(sp_str s) {
    if (s.len && memchr(s.ptr, 0, s.len)) return NULL;
    char *c = malloc(s.len + 1);
    CHECK(c);
    return (char *)sp_str_cpy(s, c, s.len + 1);
}

static void walk_kv(const sp_gguf *g) {
    for (uint64_t i = 0; i < sp_gguf_n_kv(g); i++) {
        const sp_gguf_kv *kv = sp_gguf_kv_at(g, i);
        CHECK(kv && kv->key.len > 0);
        touch(kv->key.ptr, kv->key.len);
        walk_value(&kv->val, 1);
        char *k = cstr(kv->key);
        CHECK(k);                         /* keys never hold NUL */
        CHECK(sp_gguf_get(g, k) == &kv->val);
        sp_err err;
        uint32_t u32;
        int64_t i64;
        float f;
        bool b;
        sp_str s;
        const sp_gguf_value *a;
        CHECK(sp_gguf_get_u32(g, k, &u32, &err) != 0);
        CHECK(sp_gguf_get_i64(g, k, &i64, &err) != 0);
        CHECK(sp_gguf_get_f32(g, k, &f, &err) != 0);
        CHECK(sp_gguf_get_bool(g, k, &b, &err) != 0);
        if (sp_gguf_get_str(g, k, &s, &err) == 1) touch(s.ptr, s.len);
        if (sp_gguf_get_arr(g, k, SP_GGUF_UINT8, &a, &err) == 1) touch(a->v.arr.data, a->v.arr.n);
        free(k);
    }
    CHECK(sp_gguf_kv_at(g, sp_gguf_n_kv(g)) == NULL);
}

static void walk_tensors(const sp_gguf *g) {
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        CHECK(t && t->name.len > 0 && t->n_dims >= 1 && t->n_dims <= 4);
        touch(t->name.ptr, t->name.len);
        uint64_t n = 1;
        for (int d = 0; d < 4; d++) {
            CHECK(t->ne[d] >= 1 && (d < (int)t->n_dims || t->ne[d] == 1));
            n *= t->ne[d];
        }
        CHECK(n == t->n_elements);
        CHECK(t->n_bytes == sp_dtype_row_bytes(t->type, t->ne[0]) * (n / t->ne[0]));
        CHECK(t->offset % sp_gguf_alignment(g) == 0);
        touch(t->data, t->n_bytes);
        char *name = cstr(t->name);
        if (name) CHECK(sp_gguf_find_tensor(g, name) == t);
        free(name);
    }
    CHECK(sp_gguf_tensor_at(g, sp_gguf_n_tensors(g)) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sp_err err;
    err.msg[0] = 0;
    g_lo = data;
    g_hi = data + size;
    sp_gguf *g = sp_gguf_open_memory(data, size, &err);
    if (!g) {
        CHECK(strncmp(err.msg, "gguf: ", 6) == 0);
        return 0;
    }
    uint32_t al = sp_gguf_alignment(g);
    CHECK(al && !(al & (al - 1)));
    CHECK(sp_gguf_version(g) == 2 || sp_gguf_version(g) == 3);
    CHECK(sp_gguf_file_size(g) == size);
    walk_kv(g);
    walk_tensors(g);
    sp_gguf_close(g);
    return 0;
}

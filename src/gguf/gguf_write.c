/*
 * gguf_write — the GGUF writer.  The contract is in gguf.h.
 *
 * The writer keeps its own deep copies of keys, names and values, checked
 * on the way in (so a bad value is refused where it is set, with the key in
 * the message), and lays the file out only in sp_gguf_writer_write: tensor
 * offsets follow from the sizes and the alignment at that moment, because
 * general.alignment may be set or changed at any time before.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GW_VERSION 3
#define GW_MAX_DEPTH 8          /* array levels in one value, as the reader allows */
#define GW_MAX_DIMS 4
#define GW_DEFAULT_ALIGNMENT 32
#define GW_IO_BUFFER (1u << 20)

typedef struct gw_kv {
    char *key;                  /* owned, NUL-terminated */
    sp_gguf_value val;          /* deep copy owned by the writer */
} gw_kv;

typedef struct gw_tensor {
    char *name;                 /* owned */
    uint32_t n_dims, type;
    uint64_t ne[GW_MAX_DIMS];
    uint64_t n_bytes;
    const void *data;           /* borrowed, or NULL: produced by the fill callback */
} gw_tensor;

struct sp_gguf_writer {
    gw_kv *kv;
    uint64_t n_kv, cap_kv;
    gw_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
};

/* Encoded size of scalar types; 0 for STRING and ARRAY (as in the reader). */
static const uint8_t gw_type_size[SP_GGUF_TYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

/* ------------------------------------------------------------------------
 * Values: check, deep copy, free
 * ---------------------------------------------------------------------- */

/* Frees what a copied value owns (not the value struct itself). */
static void gw_value_free(sp_gguf_value *v) {
    if (v->type == SP_GGUF_STRING) {
        free((void *)v->v.str.ptr);
    } else if (v->type == SP_GGUF_ARRAY) {
        free((void *)v->v.arr.data);
        if (v->v.arr.strs) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) free((void *)v->v.arr.strs[i].ptr);
            free(v->v.arr.strs);
        }
        if (v->v.arr.vals) {
            for (uint64_t i = 0; i < v->v.arr.n; i++) gw_value_free(&v->v.arr.vals[i]);
            free(v->v.arr.vals);
        }
    }
    memset(v, 0, sizeof *v);
}

/* Checks that a scalar value fits its type: integers in range, BOOL 0/1,
 * FLOAT32 finite values within float range (converting others is
 * undefined in C).  `key` names it in the message. */
static int gw_check_scalar(const char *key, const sp_gguf_value *v, sp_err *err) {
    static const uint64_t umax[] = {[SP_GGUF_UINT8] = UINT8_MAX, [SP_GGUF_UINT16] = UINT16_MAX,
                                    [SP_GGUF_UINT32] = UINT32_MAX, [SP_GGUF_BOOL] = 1};
    static const int64_t imax[] = {[SP_GGUF_INT8] = INT8_MAX, [SP_GGUF_INT16] = INT16_MAX,
                                   [SP_GGUF_INT32] = INT32_MAX};
    switch (v->type) {
    case SP_GGUF_UINT8: case SP_GGUF_UINT16: case SP_GGUF_UINT32: case SP_GGUF_BOOL:
        if (v->v.u64 > umax[v->type])
            return sp_err_set(err, "gguf: metadata key '%s': value %" PRIu64 " does not fit in %s", key,
                              v->v.u64, sp_gguf_type_name(v->type));
        return 0;
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32:
        if (v->v.i64 > imax[v->type] || v->v.i64 < -imax[v->type] - 1)
            return sp_err_set(err, "gguf: metadata key '%s': value %" PRId64 " does not fit in %s", key,
                              v->v.i64, sp_gguf_type_name(v->type));
        return 0;
    case SP_GGUF_FLOAT32:
        if (isfinite(v->v.f64) && fabs(v->v.f64) > FLT_MAX)
            return sp_err_set(err, "gguf: metadata key '%s': value %g does not fit in FLOAT32", key, v->v.f64);
        return 0;
    default:
        return 0;
    }
}

/* A malloc'd copy of n bytes (n may be 0; then a 1-byte block, so that a
 * copy is never NULL by accident of size). */
static void *gw_dup(const void *p, uint64_t n) {
    if (n > SIZE_MAX - 1) return NULL;
    void *d = sp_xmalloc((size_t)n + 1);
    if (n) memcpy(d, p, (size_t)n);
    return d;
}

static int gw_copy_value(const char *key, sp_gguf_value *dst, const sp_gguf_value *src, int depth,
                         sp_err *err);

/* Copies an array value (depth = array levels including this one). */
static int gw_copy_array(const char *key, sp_gguf_value *dst, const sp_gguf_value *src, int depth,
                         sp_err *err) {
    uint32_t et = src->v.arr.type;
    uint64_t n = src->v.arr.n;
    dst->v.arr.type = et;
    dst->v.arr.n = n;
    if (et >= SP_GGUF_TYPE_COUNT)
        return sp_err_set(err, "gguf: metadata key '%s': unknown array element type %" PRIu32, key, et);
    if (et == SP_GGUF_ARRAY && depth >= GW_MAX_DEPTH)
        return sp_err_set(err, "gguf: metadata key '%s': arrays nested more than %d levels deep", key,
                          GW_MAX_DEPTH);
    if (n == 0) return 0;
    if (et == SP_GGUF_STRING) {
        if (!src->v.arr.strs) return sp_err_set(err, "gguf: metadata key '%s': string array without strings", key);
        dst->v.arr.strs = sp_xcalloc((size_t)n, sizeof(sp_str));
        for (uint64_t i = 0; i < n; i++) {
            const sp_str *s = &src->v.arr.strs[i];
            dst->v.arr.strs[i] = (sp_str){gw_dup(s->ptr, s->len), s->len};
        }
        return 0;
    }
    if (et == SP_GGUF_ARRAY) {
        if (!src->v.arr.vals) return sp_err_set(err, "gguf: metadata key '%s': array of arrays without elements", key);
        dst->v.arr.vals = sp_xcalloc((size_t)n, sizeof(sp_gguf_value));
        for (uint64_t i = 0; i < n; i++) {
            if (src->v.arr.vals[i].type != SP_GGUF_ARRAY)
                return sp_err_set(err, "gguf: metadata key '%s': element %" PRIu64 " of an array of arrays "
                                  "has type %s", key, i, sp_gguf_type_name(src->v.arr.vals[i].type));
            if (gw_copy_value(key, &dst->v.arr.vals[i], &src->v.arr.vals[i], depth + 1, err)) return -1;
        }
        return 0;
    }
    uint64_t bytes;
    if (!src->v.arr.data || !sp_mul_ok(n, gw_type_size[et], &bytes) || bytes > SIZE_MAX - 1)
        return sp_err_set(err, "gguf: metadata key '%s': array of %" PRIu64 " %s elements without data or "
                          "too large", key, n, sp_gguf_type_name(et));
    const uint8_t *d = src->v.arr.data;
    if (et == SP_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (d[i] > 1)
                return sp_err_set(err, "gguf: metadata key '%s': BOOL array element %" PRIu64 " is %u, not 0 or 1",
                                  key, i, d[i]);
    dst->v.arr.data = gw_dup(d, bytes);
    return 0;
}

/* Deep-copies src into dst (zeroed by the caller), checking it on the way;
 * on failure dst holds what was copied so far and must be freed. */
static int gw_copy_value(const char *key, sp_gguf_value *dst, const sp_gguf_value *src, int depth,
                         sp_err *err) {
    dst->type = src->type;
    if (src->type >= SP_GGUF_TYPE_COUNT)
        return sp_err_set(err, "gguf: metadata key '%s': unknown value type %" PRIu32, key, src->type);
    if (src->type == SP_GGUF_ARRAY) return gw_copy_array(key, dst, src, depth, err);
    if (src->type == SP_GGUF_STRING) {
        if (!src->v.str.ptr && src->v.str.len)
            return sp_err_set(err, "gguf: metadata key '%s': string without bytes", key);
        dst->v.str = (sp_str){gw_dup(src->v.str.ptr, src->v.str.len), src->v.str.len};
        return 0;
    }
    if (gw_check_scalar(key, src, err)) return -1;
    dst->v = src->v;
    return 0;
}

/* ------------------------------------------------------------------------
 * Metadata pairs
 * ---------------------------------------------------------------------- */

sp_gguf_writer *sp_gguf_writer_create(void) { return sp_xcalloc(1, sizeof(sp_gguf_writer)); }

void sp_gguf_writer_free(sp_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        gw_value_free(&w->kv[i].val);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kv);
    free(w->tensors);
    free(w);
}

/* Index of key among the pairs, or UINT64_MAX.  A linear search: files
 * hold tens of pairs. */
static uint64_t gw_find_kv(const sp_gguf_writer *w, const char *key, size_t len) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strlen(w->kv[i].key) == len && memcmp(w->kv[i].key, key, len) == 0) return i;
    return UINT64_MAX;
}

/* Shared by set and copy_kv: key given as bytes, which may come from a
 * file (len, not NUL-terminated). */
static int gw_set(sp_gguf_writer *w, const char *key, size_t len, const sp_gguf_value *val, sp_err *err) {
    if (!key || len == 0) return sp_err_set(err, "gguf: empty metadata key");
    if (memchr(key, 0, len)) return sp_err_set(err, "gguf: metadata key contains a NUL byte");
    char *k = gw_dup(key, len);
    k[len] = 0;
    sp_gguf_value copy = {0};
    int rc = val ? gw_copy_value(k, &copy, val, 1, err) : sp_err_set(err, "gguf: metadata key '%s': no value", k);
    if (rc) {
        gw_value_free(&copy);
        free(k);
        return -1;
    }
    uint64_t i = gw_find_kv(w, key, len);
    if (i != UINT64_MAX) {
        free(k);
        gw_value_free(&w->kv[i].val);
        w->kv[i].val = copy;
        return 0;
    }
    SP_VEC_GROW(w->kv, w->cap_kv, w->n_kv + 1);
    w->kv[w->n_kv++] = (gw_kv){k, copy};
    return 0;
}

int sp_gguf_writer_set(sp_gguf_writer *w, const char *key, const sp_gguf_value *val, sp_err *err) {
    return gw_set(w, key, key ? strlen(key) : 0, val, err);
}

int sp_gguf_writer_set_u32(sp_gguf_writer *w, const char *key, uint32_t v, sp_err *err) {
    sp_gguf_value val = {.type = SP_GGUF_UINT32, .v.u64 = v};
    return sp_gguf_writer_set(w, key, &val, err);
}

int sp_gguf_writer_set_str(sp_gguf_writer *w, const char *key, const char *s, sp_err *err) {
    sp_gguf_value val = {.type = SP_GGUF_STRING, .v.str = {s, s ? strlen(s) : 0}};
    return sp_gguf_writer_set(w, key, &val, err);
}

int sp_gguf_writer_copy_kv(sp_gguf_writer *w, const sp_gguf *src, sp_err *err) {
    for (uint64_t i = 0; i < sp_gguf_n_kv(src); i++) {
        const sp_gguf_kv *kv = sp_gguf_kv_at(src, i);
        if (kv->key.len > SIZE_MAX - 1) return sp_err_set(err, "gguf: metadata key %" PRIu64 " too long", i);
        if (gw_set(w, kv->key.ptr, (size_t)kv->key.len, &kv->val, err)) return -1;
    }
    return 0;
}

bool sp_gguf_writer_remove(sp_gguf_writer *w, const char *key) {
    uint64_t i = key ? gw_find_kv(w, key, strlen(key)) : UINT64_MAX;
    if (i == UINT64_MAX) return false;
    free(w->kv[i].key);
    gw_value_free(&w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    return true;
}

uint64_t sp_gguf_writer_n_kv(const sp_gguf_writer *w) { return w->n_kv; }

const sp_gguf_value *sp_gguf_writer_get(const sp_gguf_writer *w, const char *key) {
    uint64_t i = key ? gw_find_kv(w, key, strlen(key)) : UINT64_MAX;
    return i == UINT64_MAX ? NULL : &w->kv[i].val;
}

/* ------------------------------------------------------------------------
 * Tensor infos
 * ---------------------------------------------------------------------- */

/* Checks a tensor's shape and type as the reader does and returns its
 * byte size in *n_bytes. */
static int gw_check_tensor(const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           uint64_t *n_bytes, sp_err *err) {
    if (n_dims < 1 || n_dims > GW_MAX_DIMS)
        return sp_err_set(err, "gguf: tensor '%s': n_dims %" PRIu32 " is not in 1..%d", name, n_dims, GW_MAX_DIMS);
    uint64_t count = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0) return sp_err_set(err, "gguf: tensor '%s': dimension %" PRIu32 " is 0", name, d);
        if (!sp_mul_ok(count, ne[d], &count) || count > (uint64_t)INT64_MAX)
            return sp_err_set(err, "gguf: tensor '%s': element count overflows", name);
    }
    const sp_dtype_info *info = sp_dtype_get(type);
    if (!info) return sp_err_set(err, "gguf: tensor '%s': unknown tensor type %" PRIu32, name, type);
    if (ne[0] % info->block)
        return sp_err_set(err, "gguf: tensor '%s': ne[0] = %" PRIu64 " is not a multiple of the block size %"
                          PRIu32 " of type %s", name, ne[0], info->block, info->name);
    if (!sp_mul_ok(count / info->block, info->bytes, n_bytes))
        return sp_err_set(err, "gguf: tensor '%s': byte size overflows", name);
    return 0;
}

int64_t sp_gguf_writer_add_tensor(sp_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne, const void *data,
                                  sp_err *err) {
    if (!name || !*name) return sp_err_set(err, "gguf: empty tensor name");
    gw_tensor t = {.n_dims = n_dims, .type = type, .data = data};
    if (gw_check_tensor(name, type, n_dims, ne, &t.n_bytes, err)) return -1;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return sp_err_set(err, "gguf: duplicate tensor name '%s' (also tensor %" PRIu64 ")", name, i);
    for (uint32_t d = 0; d < GW_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    t.name = sp_xstrdup(name);
    SP_VEC_GROW(w->tensors, w->cap_tensors, w->n_tensors + 1);
    w->tensors[w->n_tensors] = t;
    return (int64_t)w->n_tensors++;
}

uint64_t sp_gguf_writer_n_tensors(const sp_gguf_writer *w) { return w->n_tensors; }

/* ------------------------------------------------------------------------
 * Encoding
 * ---------------------------------------------------------------------- */

/* Output stream: a FILE with the byte position and the first error kept
 * (errno of the failed call), so encoders need not check every call. */
typedef struct gw_out {
    FILE *f;
    uint64_t pos;
    int err;
} gw_out;

static void out_bytes(gw_out *o, const void *p, uint64_t n) {
    if (o->err || n == 0) return;
    errno = 0;
    if (fwrite(p, 1, (size_t)n, o->f) != n) o->err = errno ? errno : EIO;
    o->pos += n;
}

/* n little-endian bytes of v (n <= 8). */
static void out_le(gw_out *o, uint64_t v, unsigned n) {
    uint8_t b[8];
    for (unsigned i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    out_bytes(o, b, n);
}

static void out_str(gw_out *o, const char *s, uint64_t len) {
    out_le(o, len, 8);
    out_bytes(o, s, len);
}

static void out_zeros(gw_out *o, uint64_t n) {
    static const uint8_t zeros[256];
    while (n && !o->err) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        out_bytes(o, zeros, k);
        n -= k;
    }
}

/* A checked scalar in its encoded width. */
static void out_scalar(gw_out *o, const sp_gguf_value *v) {
    unsigned n = gw_type_size[v->type];
    switch (v->type) {
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        out_le(o, (uint64_t)v->v.i64, n);   /* two's complement, modulo 2^64 */
        break;
    case SP_GGUF_FLOAT32: {
        float f = (float)v->v.f64;          /* in range: checked when set */
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        out_le(o, u, 4);
        break;
    }
    case SP_GGUF_FLOAT64: {
        uint64_t u;
        memcpy(&u, &v->v.f64, sizeof u);
        out_le(o, u, 8);
        break;
    }
    default:
        out_le(o, v->v.u64, n);
        break;
    }
}

/* A value body (type already written, or implied by the array). */
static void out_value(gw_out *o, const sp_gguf_value *v) {
    if (v->type == SP_GGUF_STRING) { out_str(o, v->v.str.ptr, v->v.str.len); return; }
    if (v->type != SP_GGUF_ARRAY) { out_scalar(o, v); return; }
    uint32_t et = v->v.arr.type;
    uint64_t n = v->v.arr.n;
    out_le(o, et, 4);
    out_le(o, n, 8);
    if (et == SP_GGUF_STRING)
        for (uint64_t i = 0; i < n; i++) out_str(o, v->v.arr.strs[i].ptr, v->v.arr.strs[i].len);
    else if (et == SP_GGUF_ARRAY)
        for (uint64_t i = 0; i < n; i++) out_value(o, &v->v.arr.vals[i]);
    else
        out_bytes(o, v->v.arr.data, n * gw_type_size[et]);  /* packed little-endian already */
}

/* The alignment the file will have: general.alignment (a UINT32 non-zero
 * power of two, as the reader demands) or the default. */
static int gw_alignment(const sp_gguf_writer *w, uint32_t *out, sp_err *err) {
    const sp_gguf_value *v = sp_gguf_writer_get(w, "general.alignment");
    *out = GW_DEFAULT_ALIGNMENT;
    if (!v) return 0;
    if (v->type != SP_GGUF_UINT32)
        return sp_err_set(err, "general.alignment must be of type UINT32, not %s", sp_gguf_type_name(v->type));
    if (!v->v.u64 || (v->v.u64 & (v->v.u64 - 1)))
        return sp_err_set(err, "general.alignment %" PRIu64 " is not a non-zero power of two", v->v.u64);
    *out = (uint32_t)v->v.u64;
    return 0;
}

static uint64_t gw_pad(uint64_t pos, uint32_t align) { return (align - pos % align) % align; }

/* Header, metadata and tensor infos, with each tensor's offset in the
 * data section (running sum of sizes, each rounded up to the alignment),
 * then the padding that starts the data section. */
static void gw_write_header(gw_out *o, const sp_gguf_writer *w, uint32_t align) {
    out_bytes(o, "GGUF", 4);
    out_le(o, GW_VERSION, 4);
    out_le(o, w->n_tensors, 8);
    out_le(o, w->n_kv, 8);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        out_str(o, w->kv[i].key, strlen(w->kv[i].key));
        out_le(o, w->kv[i].val.type, 4);
        out_value(o, &w->kv[i].val);
    }
    uint64_t offset = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        out_str(o, t->name, strlen(t->name));
        out_le(o, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) out_le(o, t->ne[d], 8);
        out_le(o, t->type, 4);
        out_le(o, offset, 8);
        offset += t->n_bytes + gw_pad(t->n_bytes, align);
    }
    out_zeros(o, gw_pad(o->pos, align));
}

/* Largest tensor that the fill callback produces (0 if none). */
static uint64_t gw_max_fill(const sp_gguf_writer *w) {
    uint64_t m = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!w->tensors[i].data && w->tensors[i].n_bytes > m) m = w->tensors[i].n_bytes;
    return m;
}

/* Tensor data in order, each padded to the alignment.  Fill errors come
 * back in err naming the tensor; I/O errors stay in o->err. */
static int gw_write_data(gw_out *o, const sp_gguf_writer *w, uint32_t align, sp_gguf_fill_fn fill,
                         void *ctx, sp_err *err) {
    uint64_t cap = gw_max_fill(w);
    if (cap && !fill) return sp_err_set(err, "tensors without data and no fill callback");
    void *buf = NULL;
    if (cap && (cap > SIZE_MAX || !(buf = malloc((size_t)cap))))
        return sp_err_set(err, "out of memory: a tensor buffer of %" PRIu64 " bytes", cap);
    int rc = 0;
    for (uint64_t i = 0; i < w->n_tensors && !o->err; i++) {
        const gw_tensor *t = &w->tensors[i];
        const void *data = t->data;
        if (!data) {
            if (fill(ctx, i, buf, t->n_bytes, err)) {
                sp_err_prefix(err, "tensor %" PRIu64 " ('%s')", i, t->name);
                rc = -1;
                break;
            }
            data = buf;
        }
        out_bytes(o, data, t->n_bytes);
        out_zeros(o, gw_pad(o->pos, align));
    }
    free(buf);
    return rc;
}

/* Writes the whole file to the open stream.  Returns -1 with err for
 * layout and fill errors; I/O errors are left in o->err (returning 0). */
static int gw_write_all(gw_out *o, const sp_gguf_writer *w, sp_gguf_fill_fn fill, void *ctx, sp_err *err) {
    uint32_t align;
    if (gw_alignment(w, &align, err)) return -1;
    gw_write_header(o, w, align);
    if (gw_write_data(o, w, align, fill, ctx, err)) return -1;
    if (!o->err && fflush(o->f) != 0) o->err = errno ? errno : EIO;
    /* On disk before the rename, so a crash never leaves a short file at path. */
    if (!o->err && fsync(fileno(o->f)) != 0 && errno != EINVAL && errno != EROFS) o->err = errno;
    return 0;
}

/* Opens a new temporary file next to path (same directory, so rename is
 * atomic); *tmp receives its malloc'd name. */
static FILE *gw_open_temp(const char *path, char **tmp, sp_err *err) {
    size_t n = strlen(path);
    *tmp = sp_xmalloc(n + 16);
    snprintf(*tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        sp_err_set(err, "cannot create a temporary file '%s': %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return NULL;
    }
    (void)fchmod(fd, 0644);             /* mkstemp makes 0600; model files are readable */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        sp_err_set(err, "cannot open a stream on '%s': %s", *tmp, strerror(errno));
        close(fd);
        unlink(*tmp);
        free(*tmp);
        *tmp = NULL;
        return NULL;
    }
    setvbuf(f, NULL, _IOFBF, GW_IO_BUFFER);
    return f;
}

int sp_gguf_writer_write(sp_gguf_writer *w, const char *path, sp_gguf_fill_fn fill, void *ctx,
                         sp_err *err) {
    char *tmp = NULL;
    FILE *f = gw_open_temp(path, &tmp, err);
    if (!f) return sp_err_prefix(err, "gguf: writing '%s'", path);
    gw_out o = {.f = f};
    int failed = gw_write_all(&o, w, fill, ctx, err);
    errno = 0;
    if (fclose(f) != 0 && !o.err) o.err = errno ? errno : EIO;
    if (!failed && o.err) failed = sp_err_set(err, "write error: %s", strerror(o.err));
    if (!failed && rename(tmp, path) != 0)
        failed = sp_err_set(err, "cannot rename '%s' to it: %s", tmp, strerror(errno));
    if (failed) {
        unlink(tmp);
        sp_err_prefix(err, "gguf: writing '%s'", path);
    }
    free(tmp);
    return failed;
}

/*
 * gguf — the GGUF reader.  The contract is in gguf.h.
 *
 * Parsing is a single forward pass of a cursor (gg_rd) over the file bytes.
 * The cursor never moves past the end: every read first checks that enough
 * bytes remain, and every count read from the file is compared with the
 * bytes that remain *before* anything sized by it is allocated (each
 * element has a known minimum encoded size), so a hostile count fails at
 * once instead of asking for terabytes.  Memory allocated while parsing is
 * therefore bounded by a small multiple of the file size.
 *
 * Error messages are built as "<kind>: <where>: <what> (offset N)" where
 * <where> names the metadata key or tensor being read; the public entry
 * points prefix them with "gguf" (and the path for sp_gguf_open).
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GG_MAX_DEPTH 8          /* levels of arrays inside one value */
#define GG_DEFAULT_ALIGNMENT 32
#define GG_MAX_DIMS 4
/* Smallest possible encodings, used to bound counts by the bytes left. */
#define GG_MIN_KV_BYTES 14      /* key length 8 + 1 key byte + type 4 + 1 value byte */
#define GG_MIN_TENSOR_BYTES 33  /* name length 8 + 1 + n_dims 4 + one dim 8 + type 4 + offset 8 */
#define GG_MIN_STR_BYTES 8      /* the length prefix */
#define GG_MIN_ARR_BYTES 12     /* element type 4 + count 8 */

/* A name -> index hash table (open addressing, linear probing).  Slots hold
 * index + 1; 0 marks an empty slot.  Capacity is a power of two at least
 * twice the number of entries, so probing always ends. */
typedef struct gg_index {
    uint64_t *slots;
    uint64_t mask;
} gg_index;

struct sp_gguf {
    const uint8_t *base;        /* the file bytes (mapping or caller buffer) */
    uint64_t size;
    void *map;                  /* non-NULL when the handle owns an mmap */
    size_t map_len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;       /* start of the tensor data section */
    uint64_t n_kv;
    sp_gguf_kv *kv;             /* owned, n_kv entries */
    uint64_t n_tensors;
    sp_gguf_tensor *tensors;    /* owned, n_tensors entries */
    gg_index kv_index, tensor_index;
    void **owned;               /* element lists of arrays, freed on close */
    size_t n_owned, cap_owned;
};

/* Parsing cursor. */
typedef struct gg_rd {
    const uint8_t *p;
    uint64_t size, pos;
    sp_err *err;
    sp_gguf *g;
    char where[256];            /* what is being read, for messages */
} gg_rd;

static const char *const gg_type_names[SP_GGUF_TYPE_COUNT] = {
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
    "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};
/* Encoded size of scalar types; 0 for the variable-sized STRING and ARRAY. */
static const uint8_t gg_type_size[SP_GGUF_TYPE_COUNT] = {
    1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

const char *sp_gguf_type_name(uint32_t type) {
    return type < SP_GGUF_TYPE_COUNT ? gg_type_names[type] : "unknown";
}

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

bool sp_str_eq(sp_str s, const char *cstr) {
    if (!cstr) return false;
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

const char *sp_str_cpy(sp_str s, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n) memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

/* Writes s into buf for an error message: printable ASCII as is, other
 * bytes as \xNN, cut with "..." when longer than the buffer allows.  Names
 * in a hostile file may hold anything, so they are never printed raw. */
static const char *gg_escape(const char *s, uint64_t len, char *buf, size_t cap) {
    size_t o = 0;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= cap) { memcpy(buf + o, "...", 3); o += 3; break; }
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

/* FNV-1a. */
static uint64_t gg_hash(const char *s, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* Decodes n little-endian bytes (n <= 8). */
static uint64_t gg_load_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

/* Sign-extends the low `bits` bits of raw without implementation-defined
 * conversions. */
static int64_t gg_sext(uint64_t raw, unsigned bits) {
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    uint64_t sign = 1ull << (bits - 1);
    raw &= mask;
    if (!(raw & sign)) return (int64_t)raw;
    return -(int64_t)(~raw & mask) - 1;
}

static bool gg_is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* ------------------------------------------------------------------------
 * Ownership and the name indexes
 * ---------------------------------------------------------------------- */

/* calloc that records the block in the handle, so close frees it.  n is
 * already bounded by the file size when this is called. */
static void *gg_alloc(gg_rd *r, uint64_t n, size_t size) {
    sp_gguf *g = r->g;
    if (g->n_owned == g->cap_owned) {
        size_t cap = g->cap_owned ? g->cap_owned * 2 : 16;
        void **o = realloc(g->owned, cap * sizeof *o);
        if (!o) goto oom;
        g->owned = o;
        g->cap_owned = cap;
    }
    void *p = n <= SIZE_MAX / size ? calloc((size_t)n, size) : NULL;
    if (!p) goto oom;
    g->owned[g->n_owned++] = p;
    return p;
oom:
    sp_err_set(r->err, "out of memory: %s: %" PRIu64 " entries of %zu bytes", r->where, n, size);
    return NULL;
}

static int gg_index_init(gg_rd *r, gg_index *ix, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    ix->slots = gg_alloc(r, cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? 0 : -1;
}

/* Finds name in the index; names[] is reached through get(i).  Returns the
 * entry's index, or UINT64_MAX with *slot set to the free slot to use. */
typedef const sp_str *(*gg_name_fn)(const sp_gguf *g, uint64_t i);

static uint64_t gg_index_find(const sp_gguf *g, const gg_index *ix, gg_name_fn name,
                              const char *s, uint64_t len, uint64_t *slot) {
    if (!ix->slots) return UINT64_MAX;
    uint64_t h = gg_hash(s, len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint64_t e = ix->slots[h];
        if (e == 0) break;
        const sp_str *n = name(g, e - 1);
        if (n->len == len && (len == 0 || memcmp(n->ptr, s, len) == 0)) return e - 1;
    }
    if (slot) *slot = h;
    return UINT64_MAX;
}

static const sp_str *gg_kv_name(const sp_gguf *g, uint64_t i) { return &g->kv[i].key; }
static const sp_str *gg_tensor_name(const sp_gguf *g, uint64_t i) { return &g->tensors[i].name; }

/* ------------------------------------------------------------------------
 * The cursor
 * ---------------------------------------------------------------------- */

static uint64_t rd_left(const gg_rd *r) { return r->size - r->pos; }

/* An error about the content at offset `at`. */
__attribute__((format(printf, 3, 4)))
static int rd_fail(gg_rd *r, uint64_t at, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sp_err_set(r->err, "invalid file: %s: %s (offset %" PRIu64 ")", r->where, what, at);
}

/* Fails unless n more bytes remain for `what`. */
static int rd_need(gg_rd *r, uint64_t n, const char *what) {
    if (n <= rd_left(r)) return 0;
    return sp_err_set(r->err,
                      "truncated file: %s: %s needs %" PRIu64 " bytes but only %" PRIu64
                      " remain (offset %" PRIu64 ")",
                      r->where, what, n, rd_left(r), r->pos);
}

/* Fails unless count elements of at least min_size bytes each can fit in
 * the bytes that remain: the check that precedes every allocation sized by
 * a count read from the file.  `what` names the elements ("tensors"). */
static int rd_need_count(gg_rd *r, uint64_t count, uint64_t min_size, const char *what) {
    if (count <= rd_left(r) / min_size) return 0;
    return sp_err_set(r->err,
                      "truncated file: %s: %" PRIu64 " %s need more bytes than remain (at least %"
                      PRIu64 " bytes each, %" PRIu64 " left, offset %" PRIu64 ")",
                      r->where, count, what, min_size, rd_left(r), r->pos);
}

static int rd_uint(gg_rd *r, unsigned n, const char *what, uint64_t *out) {
    if (rd_need(r, n, what)) return -1;
    *out = gg_load_le(r->p + r->pos, n);
    r->pos += n;
    return 0;
}

static int rd_u32(gg_rd *r, const char *what, uint32_t *out) {
    uint64_t v;
    if (rd_uint(r, 4, what, &v)) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int rd_u64(gg_rd *r, const char *what, uint64_t *out) { return rd_uint(r, 8, what, out); }

/* Reads a length-prefixed string (any bytes).  `what` names it in errors;
 * idx, when not UINT64_MAX, is its position in an array. */
static int rd_str(gg_rd *r, const char *what, uint64_t idx, sp_str *out) {
    char w[96];
    uint64_t len;
    if (idx == UINT64_MAX) snprintf(w, sizeof w, "%s length", what);
    else snprintf(w, sizeof w, "%s %" PRIu64 " length", what, idx);
    if (rd_u64(r, w, &len)) return -1;
    if (len > rd_left(r)) {
        if (idx == UINT64_MAX) snprintf(w, sizeof w, "%s", what);
        else snprintf(w, sizeof w, "%s %" PRIu64, what, idx);
        return rd_need(r, len, w);
    }
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += len;
    return 0;
}

/* Faster rd_str for the elements of string arrays: formats names only on
 * failure (vocabularies hold hundreds of thousands of strings). */
static int rd_str_elem(gg_rd *r, uint64_t idx, sp_str *out) {
    if (rd_left(r) >= 8) {
        uint64_t len = gg_load_le(r->p + r->pos, 8);
        if (len <= rd_left(r) - 8) {
            out->ptr = (const char *)r->p + r->pos + 8;
            out->len = len;
            r->pos += 8 + len;
            return 0;
        }
    }
    return rd_str(r, "string", idx, out);
}

/* ------------------------------------------------------------------------
 * Metadata values
 * ---------------------------------------------------------------------- */

/* Reads a scalar (or STRING) value of a known valid type into v. */
static int rd_scalar(gg_rd *r, uint32_t type, sp_gguf_value *v) {
    uint64_t at = r->pos, raw;
    v->type = type;
    if (type == SP_GGUF_STRING) return rd_str(r, "string value", UINT64_MAX, &v->v.str);
    unsigned n = gg_type_size[type];
    char what[32];
    snprintf(what, sizeof what, "%s value", gg_type_names[type]);
    if (rd_uint(r, n, what, &raw)) return -1;
    switch (type) {
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        v->v.i64 = gg_sext(raw, 8 * n);
        break;
    case SP_GGUF_FLOAT32: {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof f);
        v->v.f64 = f;
        break;
    }
    case SP_GGUF_FLOAT64:
        memcpy(&v->v.f64, &raw, sizeof v->v.f64);
        break;
    case SP_GGUF_BOOL:
        if (raw > 1) return rd_fail(r, at, "BOOL value %" PRIu64 " is not 0 or 1", raw);
        v->v.u64 = raw;
        break;
    default:
        v->v.u64 = raw;
        break;
    }
    return 0;
}

static int rd_array(gg_rd *r, sp_gguf_value *v, int depth);

/* Reads the n elements of an array of arrays, naming each "[i]" in the
 * error location. */
static int rd_array_elems(gg_rd *r, sp_gguf_value *vals, uint64_t n, int depth) {
    size_t base_len = strlen(r->where);
    for (uint64_t i = 0; i < n; i++) {
        snprintf(r->where + base_len, sizeof r->where - base_len, "[%" PRIu64 "]", i);
        vals[i].type = SP_GGUF_ARRAY;
        if (rd_array(r, &vals[i], depth + 1)) return -1;
    }
    r->where[base_len] = 0;
    return 0;
}

/* Reads an array body (element type, count, elements) into v.  depth is
 * the number of array levels including this one; element arrays may not go
 * beyond GG_MAX_DEPTH, which bounds the recursion. */
static int rd_array(gg_rd *r, sp_gguf_value *v, int depth) {
    uint64_t at = r->pos, n;
    uint32_t et;
    if (rd_u32(r, "array element type", &et)) return -1;
    if (et >= SP_GGUF_TYPE_COUNT) return rd_fail(r, at, "unknown array element type %" PRIu32, et);
    if (et == SP_GGUF_ARRAY && depth >= GG_MAX_DEPTH)
        return rd_fail(r, at, "arrays nested more than %d levels deep", GG_MAX_DEPTH);
    if (rd_u64(r, "array length", &n)) return -1;
    v->v.arr.type = et;
    v->v.arr.n = n;
    unsigned size = gg_type_size[et];
    uint64_t min = size ? size : et == SP_GGUF_STRING ? GG_MIN_STR_BYTES : GG_MIN_ARR_BYTES;
    char what[48];
    snprintf(what, sizeof what, "array elements of type %s", gg_type_names[et]);
    if (rd_need_count(r, n, min, what)) return -1;
    if (n == 0) return 0;
    if (et == SP_GGUF_STRING) {
        sp_str *s = gg_alloc(r, n, sizeof *s);
        if (!s) return -1;
        v->v.arr.strs = s;
        for (uint64_t i = 0; i < n; i++)
            if (rd_str_elem(r, i, &s[i])) return -1;
        return 0;
    }
    if (et == SP_GGUF_ARRAY) {
        sp_gguf_value *vals = gg_alloc(r, n, sizeof *vals);
        if (!vals) return -1;
        v->v.arr.vals = vals;
        return rd_array_elems(r, vals, n, depth);
    }
    const uint8_t *data = r->p + r->pos;
    if (et == SP_GGUF_BOOL) {
        for (uint64_t i = 0; i < n; i++)
            if (data[i] > 1)
                return rd_fail(r, r->pos + i, "BOOL array element %" PRIu64 " is %u, not 0 or 1",
                               i, data[i]);
    }
    v->v.arr.data = data;
    r->pos += n * size;             /* fits: checked by rd_need_count */
    return 0;
}

/* Reads metadata pair i: a valid unique key, a known type and its value. */
static int rd_kv(gg_rd *r, uint64_t i) {
    sp_gguf *g = r->g;
    sp_gguf_kv *kv = &g->kv[i];
    uint64_t at = r->pos, slot = 0;
    char name[96];
    snprintf(r->where, sizeof r->where, "metadata key %" PRIu64, i);
    if (rd_str(r, "key", UINT64_MAX, &kv->key)) return -1;
    if (kv->key.len == 0) return rd_fail(r, at, "empty key name");
    gg_escape(kv->key.ptr, kv->key.len, name, sizeof name);
    snprintf(r->where, sizeof r->where, "metadata key %" PRIu64 " ('%s')", i, name);
    if (memchr(kv->key.ptr, 0, kv->key.len)) return rd_fail(r, at, "key name contains a NUL byte");
    uint64_t first = gg_index_find(g, &g->kv_index, gg_kv_name, kv->key.ptr, kv->key.len, &slot);
    if (first != UINT64_MAX) return rd_fail(r, at, "duplicate key (also metadata key %" PRIu64 ")", first);
    g->kv_index.slots[slot] = i + 1;
    uint32_t type;
    at = r->pos;
    if (rd_u32(r, "value type", &type)) return -1;
    if (type >= SP_GGUF_TYPE_COUNT) return rd_fail(r, at, "unknown value type %" PRIu32, type);
    kv->val.type = type;
    if (type == SP_GGUF_ARRAY) return rd_array(r, &kv->val, 1);
    return rd_scalar(r, type, &kv->val);
}

/* Applies general.alignment if present: it must be a UINT32 power of two. */
static int gg_read_alignment(gg_rd *r) {
    sp_gguf *g = r->g;
    g->alignment = GG_DEFAULT_ALIGNMENT;
    const char *key = "general.alignment";
    uint64_t i = gg_index_find(g, &g->kv_index, gg_kv_name, key, strlen(key), NULL);
    if (i == UINT64_MAX) return 0;
    const sp_gguf_value *v = &g->kv[i].val;
    snprintf(r->where, sizeof r->where, "metadata key %" PRIu64 " ('%s')", i, key);
    uint64_t at = (uint64_t)((const uint8_t *)g->kv[i].key.ptr - r->p);
    if (v->type != SP_GGUF_UINT32)
        return rd_fail(r, at, "alignment must be of type UINT32, not %s", sp_gguf_type_name(v->type));
    if (!gg_is_pow2(v->v.u64))
        return rd_fail(r, at, "alignment %" PRIu64 " is not a non-zero power of two", v->v.u64);
    g->alignment = (uint32_t)v->v.u64;
    return 0;
}

/* ------------------------------------------------------------------------
 * Tensor index
 * ---------------------------------------------------------------------- */

/* Reads the shape of tensor t: n_dims in 1..4, every dim >= 1, and an
 * element count that fits in int64 (what the layers above compute with). */
static int rd_shape(gg_rd *r, sp_gguf_tensor *t) {
    uint64_t at = r->pos;
    if (rd_u32(r, "n_dims", &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > GG_MAX_DIMS)
        return rd_fail(r, at, "n_dims %" PRIu32 " is not in 1..%d", t->n_dims, GG_MAX_DIMS);
    uint64_t count = 1;
    for (uint32_t d = 0; d < GG_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = r->pos;
        if (rd_u64(r, "dimension", &t->ne[d])) return -1;
        if (t->ne[d] == 0) return rd_fail(r, at, "dimension %" PRIu32 " is 0", d);
        if (!sp_mul_ok(count, t->ne[d], &count) || count > (uint64_t)INT64_MAX)
            return rd_fail(r, at, "element count overflows at dimension %" PRIu32 " (ne = %" PRIu64 ")",
                           d, t->ne[d]);
    }
    t->n_elements = count;
    return 0;
}

/* Reads tensor info i: a unique non-empty name, its shape, a known type
 * whose block size divides ne[0], and an offset aligned to the alignment. */
static int rd_tensor(gg_rd *r, uint64_t i) {
    sp_gguf *g = r->g;
    sp_gguf_tensor *t = &g->tensors[i];
    uint64_t at = r->pos, slot = 0;
    char name[96];
    snprintf(r->where, sizeof r->where, "tensor %" PRIu64, i);
    if (rd_str(r, "name", UINT64_MAX, &t->name)) return -1;
    if (t->name.len == 0) return rd_fail(r, at, "empty tensor name");
    gg_escape(t->name.ptr, t->name.len, name, sizeof name);
    snprintf(r->where, sizeof r->where, "tensor %" PRIu64 " ('%s')", i, name);
    uint64_t first = gg_index_find(g, &g->tensor_index, gg_tensor_name, t->name.ptr, t->name.len, &slot);
    if (first != UINT64_MAX) return rd_fail(r, at, "duplicate tensor name (also tensor %" PRIu64 ")", first);
    g->tensor_index.slots[slot] = i + 1;
    if (rd_shape(r, t)) return -1;
    at = r->pos;
    if (rd_u32(r, "type", &t->type)) return -1;
    const sp_dtype_info *info = sp_dtype_get(t->type);
    if (!info) return rd_fail(r, at, "unknown tensor type %" PRIu32, t->type);
    if (t->ne[0] % info->block)
        return rd_fail(r, at, "ne[0] = %" PRIu64 " is not a multiple of the block size %" PRIu32 " of type %s",
                       t->ne[0], info->block, info->name);
    if (!sp_mul_ok(t->n_elements / info->block, info->bytes, &t->n_bytes))
        return rd_fail(r, at, "byte size of %" PRIu64 " elements of type %s overflows", t->n_elements, info->name);
    at = r->pos;
    if (rd_u64(r, "offset", &t->offset)) return -1;
    if (t->offset % g->alignment)
        return rd_fail(r, at, "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                       t->offset, g->alignment);
    return 0;
}

/* Places tensor data: each range lies inside the file. */
static int gg_place_tensors(gg_rd *r) {
    sp_gguf *g = r->g;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sp_gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        if (!sp_add_ok(g->data_offset, t->offset, &start) || !sp_add_ok(start, t->n_bytes, &end) ||
            end > g->size) {
            char name[96];
            gg_escape(t->name.ptr, t->name.len, name, sizeof name);
            return sp_err_set(r->err,
                              "truncated file: tensor %" PRIu64 " ('%s'): data at offset %" PRIu64
                              " + %" PRIu64 " (%" PRIu64 " bytes) extends past the end of the file (%" PRIu64
                              " bytes)",
                              i, name, g->data_offset, t->offset, t->n_bytes, g->size);
        }
        t->data = g->base + start;
    }
    return 0;
}

/* A tensor's data range, for the overlap check. */
typedef struct gg_span {
    uint64_t start, end, index;
} gg_span;

static int gg_cmp_span(const void *a, const void *b) {
    const gg_span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Fails if two tensors' data ranges overlap: sorted by offset, each range
 * must end before the next begins. */
static int gg_check_overlap(gg_rd *r) {
    sp_gguf *g = r->g;
    if (g->n_tensors < 2) return 0;
    snprintf(r->where, sizeof r->where, "tensor data");
    gg_span *s = gg_alloc(r, g->n_tensors, sizeof *s);
    if (!s) return -1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        /* No overflow: every range was placed inside the file. */
        s[i] = (gg_span){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].n_bytes, i};
    }
    qsort(s, (size_t)g->n_tensors, sizeof *s, gg_cmp_span);
    for (uint64_t k = 1; k < g->n_tensors; k++) {
        if (s[k - 1].end <= s[k].start) continue;
        const sp_gguf_tensor *a = &g->tensors[s[k - 1].index], *b = &g->tensors[s[k].index];
        char na[64], nb[64];
        gg_escape(a->name.ptr, a->name.len, na, sizeof na);
        gg_escape(b->name.ptr, b->name.len, nb, sizeof nb);
        return sp_err_set(r->err,
                          "invalid file: tensor %" PRIu64 " ('%s') data [%" PRIu64 ", %" PRIu64
                          ") overlaps tensor %" PRIu64 " ('%s') data [%" PRIu64 ", %" PRIu64 ")",
                          s[k - 1].index, na, s[k - 1].start, s[k - 1].end, s[k].index, nb,
                          s[k].start, s[k].end);
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The whole file
 * ---------------------------------------------------------------------- */

/* Magic and version: only little-endian GGUF 2 and 3. */
static int rd_header(gg_rd *r) {
    static const uint8_t magic[4] = {'G', 'G', 'U', 'F'};
    snprintf(r->where, sizeof r->where, "header");
    if (rd_need(r, 4, "magic")) return -1;
    if (memcmp(r->p, magic, 4) != 0) {
        char m[40];
        gg_escape((const char *)r->p, 4, m, sizeof m);
        return rd_fail(r, 0, "bad magic '%s' (expected 'GGUF'): not a GGUF file", m);
    }
    r->pos = 4;
    uint32_t v;
    if (rd_u32(r, "version", &v)) return -1;
    uint32_t swapped = __builtin_bswap32(v);
    if ((v & 0xffff) == 0 && swapped >= 1 && swapped <= 3)
        return rd_fail(r, 4, "version field reads 0x%08" PRIx32 ": this is a big-endian GGUF (version %"
                       PRIu32 "), only little-endian files are supported", v, swapped);
    if (v != 2 && v != 3) return rd_fail(r, 4, "unsupported GGUF version %" PRIu32 " (supported: 2, 3)", v);
    r->g->version = v;
    if (rd_u64(r, "tensor count", &r->g->n_tensors)) return -1;
    return rd_u64(r, "metadata count", &r->g->n_kv);
}

/* Parses and validates everything; on success g is complete. */
static int gg_parse(gg_rd *r) {
    sp_gguf *g = r->g;
    if (rd_header(r)) return -1;
    if (rd_need_count(r, g->n_kv, GG_MIN_KV_BYTES, "metadata pairs")) return -1;
    if (rd_need_count(r, g->n_tensors, GG_MIN_TENSOR_BYTES, "tensor infos")) return -1;
    if (g->n_kv) {
        if (!(g->kv = gg_alloc(r, g->n_kv, sizeof *g->kv))) return -1;
        if (gg_index_init(r, &g->kv_index, g->n_kv)) return -1;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rd_kv(r, i)) return -1;
    if (gg_read_alignment(r)) return -1;
    snprintf(r->where, sizeof r->where, "header");
    if (rd_need_count(r, g->n_tensors, GG_MIN_TENSOR_BYTES, "tensor infos")) return -1;
    if (g->n_tensors) {
        if (!(g->tensors = gg_alloc(r, g->n_tensors, sizeof *g->tensors))) return -1;
        if (gg_index_init(r, &g->tensor_index, g->n_tensors)) return -1;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (rd_tensor(r, i)) return -1;
    /* Data starts at the end of the header rounded up to the alignment. */
    g->data_offset = r->pos + (g->alignment - r->pos % g->alignment) % g->alignment;
    if (g->data_offset < r->pos) g->data_offset = UINT64_MAX;   /* wrapped: no tensor can fit */
    if (gg_place_tensors(r)) return -1;
    return gg_check_overlap(r);
}

void sp_gguf_close(sp_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_owned; i++) free(g->owned[i]);
    free(g->owned);
    if (g->map) munmap(g->map, g->map_len);
    free(g);
}

void sp_gguf_release(const sp_gguf *g, const void *p, size_t n) {
    if (!g->map || n == 0) return;
    const uintptr_t lo = (uintptr_t)p, hi = lo + n;
    const uintptr_t base = (uintptr_t)g->map, end = base + g->map_len;
    if (lo < base || hi > end || hi < lo) return;
    /* Whole pages inside the range only: neighbours may still be in use. */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (lo + pg - 1) / pg * pg, b = hi / pg * pg;
    if (a >= b) return;
    /* MADV_RANDOM first, because it gives the range its own VMA: since
     * Linux 6.18 a fault maps the whole large page-cache folio around the
     * faulting page, as far as the VMA reaches, so reading a tensor next
     * to a released one (a norm beside a packed matrix) would map the
     * released pages straight back in.  A fault stays inside its VMA. */
    (void)madvise((void *)a, b - a, MADV_RANDOM);
    (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Parses size bytes at data; the handle borrows them.  Errors come back
 * without the "gguf" prefix, which the callers add. */
static sp_gguf *gg_open(const void *data, uint64_t size, sp_err *err) {
    sp_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        sp_err_set(err, "out of memory");
        return NULL;
    }
    g->base = data;
    g->size = size;
    gg_rd r = {.p = data, .size = size, .pos = 0, .err = err, .g = g};
    if (gg_parse(&r)) {
        sp_gguf_close(g);
        return NULL;
    }
    return g;
}

sp_gguf *sp_gguf_open_memory(const void *data, size_t size, sp_err *err) {
    static const uint8_t empty[1];
    sp_gguf *g = gg_open(data ? data : empty, data ? size : 0, err);
    if (!g) sp_err_prefix(err, "gguf");
    return g;
}

sp_gguf *sp_gguf_open(const char *path, sp_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sp_err_set(err, "gguf: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sp_err_set(err, "gguf: '%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size <= 0 || (uint64_t)st.st_size > SIZE_MAX) {
        sp_err_set(err, "gguf: '%s': %s", path, st.st_size <= 0 ? "empty file, not a GGUF file" : "file too large");
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int saved = errno;
    close(fd);
    if (map == MAP_FAILED) {
        sp_err_set(err, "gguf: cannot map '%s': %s", path, strerror(saved));
        return NULL;
    }
    sp_gguf *g = gg_open(map, len, err);
    if (!g) {
        munmap(map, len);
        sp_err_prefix(err, "gguf: %s", path);
        return NULL;
    }
    g->map = map;
    g->map_len = len;
    return g;
}

/* ------------------------------------------------------------------------
 * Accessors
 * ---------------------------------------------------------------------- */

uint32_t sp_gguf_version(const sp_gguf *g) { return g->version; }
uint64_t sp_gguf_file_size(const sp_gguf *g) { return g->size; }
uint32_t sp_gguf_alignment(const sp_gguf *g) { return g->alignment; }
uint64_t sp_gguf_n_kv(const sp_gguf *g) { return g->n_kv; }
uint64_t sp_gguf_n_tensors(const sp_gguf *g) { return g->n_tensors; }

const sp_gguf_kv *sp_gguf_kv_at(const sp_gguf *g, uint64_t i) {
    return i < g->n_kv ? &g->kv[i] : NULL;
}

const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sp_gguf_value *sp_gguf_get(const sp_gguf *g, const char *key) {
    if (!key) return NULL;
    uint64_t i = gg_index_find(g, &g->kv_index, gg_kv_name, key, strlen(key), NULL);
    return i == UINT64_MAX ? NULL : &g->kv[i].val;
}

const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name) {
    if (!name) return NULL;
    uint64_t i = gg_index_find(g, &g->tensor_index, gg_tensor_name, name, strlen(name), NULL);
    return i == UINT64_MAX ? NULL : &g->tensors[i];
}

/* Looks key up for a typed getter: 1 and *v if present, 0 if absent. */
static int gg_lookup(const sp_gguf *g, const char *key, const sp_gguf_value **v) {
    *v = sp_gguf_get(g, key);
    return *v != NULL;
}

static int gg_wrong_type(const char *key, const sp_gguf_value *v, const char *want, sp_err *err) {
    return sp_err_set(err, "gguf: metadata key '%s' has type %s, expected %s", key,
                      sp_gguf_type_name(v->type), want);
}

static bool gg_is_signed(uint32_t t) {
    return t == SP_GGUF_INT8 || t == SP_GGUF_INT16 || t == SP_GGUF_INT32 || t == SP_GGUF_INT64;
}
static bool gg_is_unsigned(uint32_t t) {
    return t == SP_GGUF_UINT8 || t == SP_GGUF_UINT16 || t == SP_GGUF_UINT32 || t == SP_GGUF_UINT64;
}

int sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (gg_is_unsigned(v->type) && v->v.u64 <= UINT32_MAX) {
        *out = (uint32_t)v->v.u64;
        return 1;
    }
    if (gg_is_signed(v->type) && v->v.i64 >= 0 && v->v.i64 <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)v->v.i64;
        return 1;
    }
    if (gg_is_unsigned(v->type))
        return sp_err_set(err, "gguf: metadata key '%s': value %" PRIu64 " does not fit in uint32", key, v->v.u64);
    if (gg_is_signed(v->type))
        return sp_err_set(err, "gguf: metadata key '%s': value %" PRId64 " does not fit in uint32", key, v->v.i64);
    return gg_wrong_type(key, v, "an integer", err);
}

int sp_gguf_get_i64(const sp_gguf *g, const char *key, int64_t *out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (gg_is_signed(v->type)) {
        *out = v->v.i64;
        return 1;
    }
    if (gg_is_unsigned(v->type)) {
        if (v->v.u64 > (uint64_t)INT64_MAX)
            return sp_err_set(err, "gguf: metadata key '%s': value %" PRIu64 " does not fit in int64", key, v->v.u64);
        *out = (int64_t)v->v.u64;
        return 1;
    }
    return gg_wrong_type(key, v, "an integer", err);
}

int sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (v->type != SP_GGUF_FLOAT32 && v->type != SP_GGUF_FLOAT64)
        return gg_wrong_type(key, v, "FLOAT32 or FLOAT64", err);
    double d = v->v.f64;
    /* Converting a finite double beyond float range is undefined in C. */
    if (isfinite(d) && fabs(d) > FLT_MAX)
        return sp_err_set(err, "gguf: metadata key '%s': value %g does not fit in a float", key, d);
    *out = (float)d;
    return 1;
}

int sp_gguf_get_bool(const sp_gguf *g, const char *key, bool *out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (v->type != SP_GGUF_BOOL) return gg_wrong_type(key, v, "BOOL", err);
    *out = v->v.u64 != 0;
    return 1;
}

int sp_gguf_get_str(const sp_gguf *g, const char *key, sp_str *out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (v->type != SP_GGUF_STRING) return gg_wrong_type(key, v, "STRING", err);
    *out = v->v.str;
    return 1;
}

int sp_gguf_get_arr(const sp_gguf *g, const char *key, uint32_t elem_type,
                    const sp_gguf_value **out, sp_err *err) {
    const sp_gguf_value *v;
    if (!gg_lookup(g, key, &v)) return 0;
    if (v->type != SP_GGUF_ARRAY) return gg_wrong_type(key, v, "ARRAY", err);
    if (v->v.arr.type != elem_type)
        return sp_err_set(err, "gguf: metadata key '%s' is an array of %s, expected an array of %s", key,
                          sp_gguf_type_name(v->v.arr.type), sp_gguf_type_name(elem_type));
    *out = v;
    return 1;
}

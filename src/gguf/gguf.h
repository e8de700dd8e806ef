/*
 * gguf — reading GGUF model files (versions 2 and 3).
 *
 * The file is memory-mapped read-only and never copied: tensor data and
 * strings point into the mapping and live as long as the sp_gguf handle.
 *
 * The file is untrusted.  sp_gguf_open checks every count, length, offset,
 * type and size against the file size before anything is dereferenced, and
 * a bad file gets an error that names the problem and where it is, never a
 * crash or an out-of-bounds read.  After a successful open every accessor
 * below is safe: all pointers it returns are inside the mapping.
 *
 * What a file must satisfy to open (anything else is an error):
 *   - magic "GGUF", little-endian, version 2 or 3;
 *   - metadata keys non-empty, free of NUL bytes, unique; value types known;
 *     BOOL values (scalar or array) are 0 or 1; arrays nest at most 8 deep;
 *     strings may hold any bytes;
 *   - general.alignment, if present, a UINT32 non-zero power of two
 *     (default 32); tensor data starts at the end of the tensor infos
 *     rounded up to it;
 *   - tensor names non-empty and unique; n_dims 1..4; every dim >= 1;
 *     element count <= INT64_MAX; type in the dtype table (base.h) with
 *     ne[0] a multiple of its block size; offset a multiple of the
 *     alignment; data inside the file; no two tensors' data overlapping.
 * Errors read "gguf: [path: ]<truncated file|invalid file>: <where>: <what>
 * (offset N)", where <where> names the metadata key or tensor by index and
 * name (names escaped: non-printable bytes as \xNN).
 */
#ifndef SP_GGUF_H
#define SP_GGUF_H

#include "base/base.h"

/* Metadata value types, numbered as in the GGUF specification. */
typedef enum sp_gguf_type {
    SP_GGUF_UINT8 = 0, SP_GGUF_INT8 = 1, SP_GGUF_UINT16 = 2, SP_GGUF_INT16 = 3,
    SP_GGUF_UINT32 = 4, SP_GGUF_INT32 = 5, SP_GGUF_FLOAT32 = 6, SP_GGUF_BOOL = 7,
    SP_GGUF_STRING = 8, SP_GGUF_ARRAY = 9, SP_GGUF_UINT64 = 10, SP_GGUF_INT64 = 11,
    SP_GGUF_FLOAT64 = 12,
    SP_GGUF_TYPE_COUNT
} sp_gguf_type;

const char *sp_gguf_type_name(uint32_t type);

/* A string inside the mapping: NOT NUL-terminated.  Borrowed. */
typedef struct sp_str {
    const char *ptr;
    uint64_t len;
} sp_str;

/* A parsed metadata value.  Scalars are decoded; arrays keep a pointer to
 * their packed elements in the mapping (for numeric element types), a
 * parsed list of strings, or a parsed list of nested values. */
typedef struct sp_gguf_value {
    uint32_t type;                  /* sp_gguf_type */
    union {
        uint64_t u64;               /* UINT8/16/32/64, BOOL (0/1) */
        int64_t i64;                /* INT8/16/32/64 */
        double f64;                 /* FLOAT32/64 */
        sp_str str;                 /* STRING */
        struct {
            uint32_t type;          /* element type */
            uint64_t n;             /* element count */
            const void *data;       /* numeric elements, packed little-endian (borrowed) */
            sp_str *strs;           /* STRING elements (owned by the handle) */
            struct sp_gguf_value *vals; /* ARRAY elements (owned by the handle) */
        } arr;
    } v;
} sp_gguf_value;

typedef struct sp_gguf_kv {
    sp_str key;
    sp_gguf_value val;
} sp_gguf_kv;

typedef struct sp_gguf_tensor {
    sp_str name;
    uint32_t n_dims;                /* 1..4 */
    uint64_t ne[4];                 /* elements per dim, ne[0] fastest; unused dims = 1 */
    uint32_t type;                  /* sp_dtype */
    uint64_t offset;                /* relative to the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;               /* inside the mapping (borrowed) */
} sp_gguf_tensor;

typedef struct sp_gguf sp_gguf;

/* Opens and validates a file.  Returns NULL and fills err on failure. */
sp_gguf *sp_gguf_open(const char *path, sp_err *err);
/* Same, over a caller-owned buffer (used by the fuzzer and tests); the buffer
 * must outlive the handle. */
sp_gguf *sp_gguf_open_memory(const void *data, size_t size, sp_err *err);
void sp_gguf_close(sp_gguf *g);

uint32_t sp_gguf_version(const sp_gguf *g);
uint64_t sp_gguf_file_size(const sp_gguf *g);
uint32_t sp_gguf_alignment(const sp_gguf *g);

/* Metadata. */
uint64_t sp_gguf_n_kv(const sp_gguf *g);
const sp_gguf_kv *sp_gguf_kv_at(const sp_gguf *g, uint64_t i);
const sp_gguf_value *sp_gguf_get(const sp_gguf *g, const char *key); /* NULL if absent */

/* Typed getters.  Return 1 if found with a compatible type (any integer
 * type that fits for the integer getters, float or double for get_f32),
 * 0 if absent, -1 (and err) if present with the wrong type or out of range. */
int sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out, sp_err *err);
int sp_gguf_get_i64(const sp_gguf *g, const char *key, int64_t *out, sp_err *err);
int sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out, sp_err *err);
int sp_gguf_get_bool(const sp_gguf *g, const char *key, bool *out, sp_err *err);
int sp_gguf_get_str(const sp_gguf *g, const char *key, sp_str *out, sp_err *err);
/* Array with the given element type; *out points to the value. */
int sp_gguf_get_arr(const sp_gguf *g, const char *key, uint32_t elem_type,
                    const sp_gguf_value **out, sp_err *err);

/* Tensors. */
uint64_t sp_gguf_n_tensors(const sp_gguf *g);
const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, uint64_t i);
const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name);

/* Helpers. */
bool sp_str_eq(sp_str s, const char *cstr);
/* Copies into buf as a NUL-terminated string (truncating to cap-1). */
const char *sp_str_cpy(sp_str s, char *buf, size_t cap);

#endif /* SP_GGUF_H */

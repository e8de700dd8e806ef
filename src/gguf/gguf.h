/*
 * gguf — reading GGUF model files (versions 2 and 3), and writing them
 * (version 3; the writer's contract is in its section at the end).
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
/* Tells the kernel that the n bytes at p (inside the file's data) will not
 * be read for a while, so their pages leave this process's resident set
 * and stay out while neighbouring data is read (a later read of the range
 * itself maps them in again from the page cache).  For weights the model
 * keeps in another form.  No-op for a handle over a caller buffer. */
void sp_gguf_release(const sp_gguf *g, const void *p, size_t n);

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

/* ------------------------------------------------------------------------
 * Writing GGUF files (gguf_write.c)
 *
 * A writer collects metadata pairs and tensor infos, then writes a GGUF
 * version 3 file in one pass: header, metadata pairs in order, tensor
 * infos in order, zero padding up to the alignment, then each tensor's
 * data at an offset that is a multiple of the alignment, zero-padded after
 * it (so the file size is a multiple of the alignment too, as ggml writes
 * it).  The alignment is general.alignment when that key is set, else 32.
 *
 * Ownership: keys, tensor names and metadata values are copied into the
 * writer, so a source sp_gguf may be closed right after copying from it.
 * Tensor data is not copied: it is either borrowed (the pointer must stay
 * valid until sp_gguf_writer_write returns) or produced at write time by a
 * fill callback, one tensor at a time, into a buffer the writer owns; so
 * converting a model never holds more than one converted tensor.
 *
 * The writer refuses what sp_gguf_open would refuse (empty or NUL-holding
 * keys and names, duplicate tensor names, unknown types, BOOL values other
 * than 0/1, arrays nested deeper than 8, bad shapes, ne[0] not a multiple
 * of the block size, a general.alignment that is not a UINT32 power of
 * two) and values that do not fit their type (an integer out of its type's
 * range, a finite FLOAT32 beyond float range), so every file it writes
 * opens.  The host must be little-endian (as for reading).
 * ---------------------------------------------------------------------- */
typedef struct sp_gguf_writer sp_gguf_writer;

sp_gguf_writer *sp_gguf_writer_create(void);      /* empty: no pairs, no tensors */
void sp_gguf_writer_free(sp_gguf_writer *w);

/* Sets key to a deep copy of val.  An existing key keeps its position and
 * gets the new value; a new key is appended.  Fails (and leaves the writer
 * unchanged) on an invalid key or value. */
int sp_gguf_writer_set(sp_gguf_writer *w, const char *key, const sp_gguf_value *val, sp_err *err);
int sp_gguf_writer_set_u32(sp_gguf_writer *w, const char *key, uint32_t v, sp_err *err);
int sp_gguf_writer_set_str(sp_gguf_writer *w, const char *key, const char *s, sp_err *err);
/* Copies every metadata pair of src in its order (with set's semantics, so
 * pairs already in the writer are overwritten in place). */
int sp_gguf_writer_copy_kv(sp_gguf_writer *w, const sp_gguf *src, sp_err *err);
/* Removes key; true if it was present. */
bool sp_gguf_writer_remove(sp_gguf_writer *w, const char *key);
uint64_t sp_gguf_writer_n_kv(const sp_gguf_writer *w);
/* The writer's copy of key's value (owned by the writer, valid until the
 * key is set again or removed), or NULL. */
const sp_gguf_value *sp_gguf_writer_get(const sp_gguf_writer *w, const char *key);

/* Adds a tensor info: name (copied), n_dims 1..4 dims ne[0..n_dims) (ne[0]
 * fastest), type (sp_dtype).  data is the tensor's bytes (borrowed until
 * write returns; its size is what type and shape imply), or NULL to have
 * the fill callback produce them.  Returns the tensor's index (the order
 * of the file), or -1 and err. */
int64_t sp_gguf_writer_add_tensor(sp_gguf_writer *w, const char *name, uint32_t type,
                                  uint32_t n_dims, const uint64_t *ne, const void *data,
                                  sp_err *err);
uint64_t sp_gguf_writer_n_tensors(const sp_gguf_writer *w);

/* Produces tensor `index`'s n_bytes bytes into dst (every byte).  Returns
 * 0, or -1 with err filled; the write then fails with that message. */
typedef int (*sp_gguf_fill_fn)(void *ctx, uint64_t index, void *dst, uint64_t n_bytes,
                               sp_err *err);

/* Writes the file.  fill (with ctx) is called in tensor order for the
 * tensors added without data; it may be NULL if there are none.  The bytes
 * go to a temporary file in path's directory that is flushed to disk and
 * then renamed over path: path is only ever the old file or the complete
 * new one, and on failure the temporary file is removed.  Errors read
 * "gguf: writing 'PATH': <what>" (I/O errors with the system's reason). */
int sp_gguf_writer_write(sp_gguf_writer *w, const char *path, sp_gguf_fill_fn fill, void *ctx,
                         sp_err *err);

#endif /* SP_GGUF_H */

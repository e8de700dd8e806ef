/* specula quantize: write a GGUF copy of a model with its weights converted
 * to another type and/or only some transformer blocks kept (draft models).
 *
 * Per-tensor type rules (also in the help text):
 *   - 1-D tensors (norms, biases) are F32: they are tiny and the forward
 *     pass reads them as floats.
 *   - token_embd.weight and output.weight keep more precision, as
 *     llama.cpp's quantizer does (its default for the output head is
 *     Q6_K, which specula does not write): with a 4- or 5-bit --type they
 *     become Q8_0, with Q8_0/F16/BF16/F32 the --type.  --keep-output-type
 *     copies them unchanged.
 *   - other tensors get --type.
 *   - a tensor already in its target type is copied byte for byte
 *     (dequantizing and requantizing would only add rounding);
 *   - a matrix whose rows are not a multiple of the target's block size
 *     falls back to F16, with a notice (a refusal would make one odd
 *     tensor block the whole model);
 *   - a tensor whose type specula cannot dequantize is copied unchanged,
 *     with a notice.
 * Conversion dequantizes a row to floats (sp_dequantize_row) and quantizes
 * it with ggml's reference quantizers (sp_quantize_row), the bytes
 * llama.cpp's quantizer writes from the same floats.
 *
 * --layers keeps the listed blocks renumbered 0..n-1 (blk.N.* -> blk.i.*),
 * sets {arch}.block_count and cuts per-layer metadata arrays ({arch}.*
 * arrays with one entry per block) to the kept blocks.  Every other
 * metadata pair, the tokenizer included, is copied unchanged;
 * general.file_type follows --type.
 */
#include "cli/cli.h"
#include "kernels/kernels.h"

#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define QZ_KEEP UINT32_MAX          /* --type keep: no conversion */
#define QZ_MAX_LAYER 100000         /* bound on numbers in --layers before the model is known */
#define QZ_GEMMA3_SWA_PATTERN 6     /* every 6th gemma3 block is global (model/load.c) */

static const char qz_help[] =
    "usage: specula quantize -m MODEL -o OUT [options]\n"
    "\n"
    "Writes a GGUF copy of MODEL with its weights converted to another type and/or only\n"
    "some transformer blocks kept, e.g. to build a small draft model for --draft-model.\n"
    "Tokenizer and all other metadata are copied; general.file_type follows --type.\n"
    "\n"
    "options:\n"
    "  -m, --model NAME|PATH   source: smollm2-135m, gemma3-270m or a GGUF path\n"
    "  -o, --output PATH       file to write (a temporary file renamed at the end)\n"
    "      --type TYPE         Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32, or keep\n"
    "                          (default keep: tensors copied unchanged)\n"
    "      --layers LIST       keep only these blocks, ascending, e.g. 0-7,28-29; they are\n"
    "                          renumbered 0..n-1 and {arch}.block_count is set to n\n"
    "      --keep-output-type  copy token_embd.weight and output.weight unchanged\n"
    "      --name NAME         general.name of the output (default: the source's)\n"
    "  -q, --quiet             no per-tensor progress on stderr\n"
    "  -h, --help              this help\n"
    "\n"
    "Tensor types: 1-D tensors (norms) are F32.  token_embd/output become Q8_0 with a\n"
    "4- or 5-bit --type (llama.cpp also keeps them at higher precision), else --type.\n"
    "A tensor already of its target type is copied byte for byte; a matrix whose rows are\n"
    "not a multiple of the type's block size is written as F16 (with a notice); a tensor\n"
    "of a type specula cannot convert is copied unchanged (with a notice).\n"
    "\n"
    "gemma3: every 6th block by index (5, 11, 17, ...) attends globally, the others use a\n"
    "sliding window; after --layers that pattern follows the new index, and a warning lists\n"
    "kept blocks whose kind changes.\n";

/* --type values, with llama.cpp's general.file_type (llama_ftype). */
static const struct { const char *name; uint32_t type, ftype; } qz_types[] = {
    {"F32", SP_F32, 0},    {"F16", SP_F16, 1},   {"Q4_0", SP_Q4_0, 2}, {"Q4_1", SP_Q4_1, 3},
    {"Q8_0", SP_Q8_0, 7},  {"Q5_0", SP_Q5_0, 8}, {"Q5_1", SP_Q5_1, 9}, {"BF16", SP_BF16, 32},
};
#define QZ_N_TYPES (sizeof qz_types / sizeof *qz_types)

typedef struct qz_opts {
    const char *model, *out, *name, *layers_arg;
    uint32_t type;              /* sp_dtype, or QZ_KEEP */
    bool keep_output, quiet;
    uint8_t *keep;              /* owned, QZ_MAX_LAYER + 1 entries, 1 = kept; NULL = all blocks */
} qz_opts;

/* One output tensor. */
typedef struct qz_tensor {
    const sp_gguf_tensor *src;  /* borrowed from the source handle */
    char *name;                 /* owned, output name */
    uint32_t type;              /* output type */
} qz_tensor;

typedef struct qz_job {
    qz_tensor *t;               /* owned, n entries, in file order */
    uint64_t n;
    float *row;                 /* owned scratch: one row of floats */
    bool quiet;
    uint64_t in_bytes, out_bytes;
} qz_job;

/* A name from the file for a message (into buf): printable ASCII as is,
 * other bytes as \xNN, so a hostile name cannot drive the terminal. */
static const char *qz_escape(const char *p, size_t len, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}
#define QZ_ESC(s, buf) qz_escape((s), strlen(s), (buf), sizeof(buf))

/* ------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------- */

static bool qz_parse_type(const char *s, uint32_t *out) {
    if (!strcasecmp(s, "keep")) { *out = QZ_KEEP; return true; }
    for (size_t i = 0; i < QZ_N_TYPES; i++)
        if (!strcasecmp(s, qz_types[i].name)) { *out = qz_types[i].type; return true; }
    return false;
}

static uint32_t qz_ftype(uint32_t type) {
    for (size_t i = 0; i < QZ_N_TYPES; i++)
        if (qz_types[i].type == type) return qz_types[i].ftype;
    return 0;
}

/* Parses --layers into o->keep.  The list must be ascending: the order
 * of blocks in a model is its computation order, and a list that goes
 * back would silently reorder layers.  Whether the blocks exist is
 * checked once the file's block count is known (qz_layer_map). */
static bool qz_parse_layers(const char *s, qz_opts *o) {
    sp_err err;
    o->keep = sp_xmalloc(QZ_MAX_LAYER + 1);
    if (sp_parse_index_list(s, QZ_MAX_LAYER + 1, true, o->keep, &err) == 0) return true;
    sp_usage_error("quantize", "--layers expects ascending block numbers and ranges like 0-7,28-29 "
                   "(numbers up to %d), got '%s': %s", QZ_MAX_LAYER, s, err.msg);
    return false;
}

/* Parses the command line; returns -1 to go on, else an exit code. */
static int qz_parse_args(int argc, char **argv, qz_opts *o) {
    sp_args a = {"quantize", argc, argv, 1};
    const char *type = NULL;
    o->type = QZ_KEEP;
    for (; a.i < argc; a.i++) {
        if (sp_arg_is(&a, "-h|--help")) { fputs(qz_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-m|--model")) { if (!sp_arg_str(&a, &o->model)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "-o|--output")) { if (!sp_arg_str(&a, &o->out)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--type")) { if (!sp_arg_str(&a, &type)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--layers")) { if (!sp_arg_str(&a, &o->layers_arg)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--name")) { if (!sp_arg_str(&a, &o->name)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--keep-output-type")) o->keep_output = true;
        else if (sp_arg_is(&a, "-q|--quiet")) o->quiet = true;
        else return sp_arg_unknown(&a);
    }
    if (!o->model) return sp_usage_error("quantize", "no source model (-m MODEL)");
    if (!o->out || !*o->out) return sp_usage_error("quantize", "no output file (-o PATH)");
    if (type && !qz_parse_type(type, &o->type))
        return sp_usage_error("quantize", "--type expects Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32 "
                              "or keep, got '%s'", type);
    if (o->layers_arg && !qz_parse_layers(o->layers_arg, o)) return SP_EXIT_USAGE;
    return -1;
}

/* ------------------------------------------------------------------------
 * Blocks: which are kept, and their new numbers
 * ---------------------------------------------------------------------- */

/* Fills map[0..n_layer) with each block's new index (-1: dropped) and
 * returns the number kept, or -1 after a usage error (a block out of
 * range). */
static int qz_layer_map(const qz_opts *o, int n_layer, int *map) {
    if (!o->keep) {
        for (int i = 0; i < n_layer; i++) map[i] = i;
        return n_layer;
    }
    assert(n_layer <= QZ_MAX_LAYER);   /* qz_source_info */
    for (int l = QZ_MAX_LAYER; l >= n_layer; l--)   /* the highest block listed beyond the file's */
        if (o->keep[l]) {
            sp_usage_error("quantize", "--layers: block %d is out of range (the model has %d blocks: 0-%d)",
                           l, n_layer, n_layer - 1);
            return -1;
        }
    int k = 0;
    for (int i = 0; i < n_layer; i++) map[i] = o->keep[i] ? k++ : -1;
    return k;
}

/* Block number of a "blk.N.rest" tensor name (N decimal), with *rest at
 * ".rest"; -1 for other names. */
static long qz_block_of(sp_str name, const char **rest) {
    if (name.len < 6 || memcmp(name.ptr, "blk.", 4) != 0) return -1;
    long v = 0;
    uint64_t i = 4;
    for (; i < name.len && isdigit((unsigned char)name.ptr[i]); i++) {
        v = v * 10 + (name.ptr[i] - '0');
        if (v > INT32_MAX) return -1;
    }
    if (i == 4 || i >= name.len || name.ptr[i] != '.') return -1;
    *rest = name.ptr + i;
    return v;
}

/* gemma3 decides global vs sliding-window attention by block index, so a
 * kept block can change kind; lists those (a warning, not an error: the
 * user may want it, but should know). */
static void qz_warn_swa(const int *map, int n_layer) {
    char list[512] = "";
    size_t len = 0;
    int n = 0;
    for (int l = 0; l < n_layer; l++) {
        if (map[l] < 0) continue;
        bool was = (l + 1) % QZ_GEMMA3_SWA_PATTERN == 0, now = (map[l] + 1) % QZ_GEMMA3_SWA_PATTERN == 0;
        if (was == now) continue;
        n++;
        if (len < sizeof list - 64)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d->%d (%s)", n > 1 ? ", " : "", l,
                                    map[l], was ? "global becomes sliding-window" : "sliding-window becomes global");
    }
    if (n)
        fprintf(stderr, "specula quantize: warning: gemma3 attends globally in every %dth block by index; "
                "%d kept block(s) change kind: %s\n", QZ_GEMMA3_SWA_PATTERN, n, list);
}

/* ------------------------------------------------------------------------
 * Metadata
 * ---------------------------------------------------------------------- */

/* Cuts an {arch}.* array with one entry per block down to the kept
 * blocks (numeric and string arrays).  Returns 1 if cut, 0 if the key is
 * not such an array, -1 on error. */
static int qz_cut_per_layer(sp_gguf_writer *w, const sp_gguf_kv *kv, const char *arch, const int *map,
                            int n_layer, int n_keep, sp_err *err) {
    size_t al = strlen(arch);
    const sp_gguf_value *v = &kv->val;
    if (v->type != SP_GGUF_ARRAY || v->v.arr.n != (uint64_t)n_layer || kv->key.len <= al + 1 ||
        memcmp(kv->key.ptr, arch, al) != 0 || kv->key.ptr[al] != '.' || v->v.arr.type == SP_GGUF_ARRAY)
        return 0;
    char *key = sp_xmalloc((size_t)kv->key.len + 1), esc[160];
    sp_str_cpy(kv->key, key, (size_t)kv->key.len + 1);   /* keys hold no NUL: checked by the reader */
    sp_gguf_value cut = *v;
    cut.v.arr.n = (uint64_t)n_keep;
    size_t es = 0;
    void *data = NULL;
    sp_str *strs = NULL;
    if (v->v.arr.type == SP_GGUF_STRING) {
        strs = sp_xcalloc((size_t)n_keep + 1, sizeof *strs);
        for (int l = 0; l < n_layer; l++) if (map[l] >= 0) strs[map[l]] = v->v.arr.strs[l];
        cut.v.arr.strs = strs;
    } else {
        static const uint8_t sizes[SP_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        es = v->v.arr.type < SP_GGUF_TYPE_COUNT ? sizes[v->v.arr.type] : 0;
        if (!es) { free(key); return 0; }
        data = sp_xmalloc(es * (size_t)n_keep + 1);
        for (int l = 0; l < n_layer; l++)
            if (map[l] >= 0) memcpy((uint8_t *)data + es * (size_t)map[l], (const uint8_t *)v->v.arr.data + es * (size_t)l, es);
        cut.v.arr.data = data;
    }
    int rc = sp_gguf_writer_set(w, key, &cut, err);
    if (!rc)
        fprintf(stderr, "specula quantize: %s: per-block array cut to the %d kept blocks\n", QZ_ESC(key, esc), n_keep);
    free(data);
    free(strs);
    free(key);
    return rc ? -1 : 1;
}

/* All pairs of the source, then the overrides: block_count and per-block
 * arrays (when blocks are dropped), file type, name. */
static int qz_metadata(sp_gguf_writer *w, const sp_gguf *g, const qz_opts *o, const char *arch,
                       const int *map, int n_layer, int n_keep, sp_err *err) {
    if (sp_gguf_writer_copy_kv(w, g, err)) return -1;
    if (o->keep) {
        char key[160];
        snprintf(key, sizeof key, "%s.block_count", arch);
        if (sp_gguf_writer_set_u32(w, key, (uint32_t)n_keep, err)) return -1;
        for (uint64_t i = 0; i < sp_gguf_n_kv(g); i++)
            if (qz_cut_per_layer(w, sp_gguf_kv_at(g, i), arch, map, n_layer, n_keep, err) < 0) return -1;
    }
    if (o->type != QZ_KEEP) {
        if (sp_gguf_writer_set_u32(w, "general.file_type", qz_ftype(o->type), err)) return -1;
        /* ggml's block-format version, which llama.cpp writes with quantized files */
        if (o->type != SP_F32 && o->type != SP_F16 && o->type != SP_BF16 &&
            sp_gguf_writer_set_u32(w, "general.quantization_version", 2, err))
            return -1;
    }
    if (o->name && sp_gguf_writer_set_str(w, "general.name", o->name, err)) return -1;
    return 0;
}

/* ------------------------------------------------------------------------
 * Tensors
 * ---------------------------------------------------------------------- */

static bool qz_is_low_bit(uint32_t t) {
    return t == SP_Q4_0 || t == SP_Q4_1 || t == SP_Q5_0 || t == SP_Q5_1;
}

/* The output type of one tensor (rules at the top of the file); notices
 * for fallbacks go to stderr. */
static uint32_t qz_target_type(const sp_gguf_tensor *t, const char *name, const qz_opts *o) {
    bool head = !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight");
    char esc[160];
    if (o->type == QZ_KEEP || (head && o->keep_output)) return t->type;
    uint32_t want = t->n_dims == 1 ? SP_F32 : head && qz_is_low_bit(o->type) ? SP_Q8_0 : o->type;
    if (want == t->type) return want;
    if (!sp_kernel_supports(t->type)) {
        fprintf(stderr, "specula quantize: notice: %s has type %s, which specula cannot convert; copied "
                "unchanged\n", QZ_ESC(name, esc), sp_dtype_name(t->type));
        return t->type;
    }
    if (t->ne[0] % sp_dtype_get(want)->block) {
        fprintf(stderr, "specula quantize: notice: %s rows of %" PRIu64 " are not a multiple of the %s block "
                "size %u; written as F16\n", QZ_ESC(name, esc), t->ne[0], sp_dtype_name(want), sp_dtype_get(want)->block);
        return SP_F16;
    }
    return want;
}

/* The output name of a source tensor (malloc'd), or NULL when its block is
 * dropped. */
static char *qz_out_name(const sp_gguf_tensor *t, const int *map, int n_layer) {
    const char *rest;
    long b = qz_block_of(t->name, &rest);
    if (b < 0 || !map) {
        char *s = sp_xmalloc((size_t)t->name.len + 1);
        return (char *)sp_str_cpy(t->name, s, (size_t)t->name.len + 1);
    }
    if (b >= n_layer || map[b] < 0) return NULL;
    size_t rl = (size_t)(t->name.len - (uint64_t)(rest - t->name.ptr));
    char *s = sp_xmalloc(rl + 24);
    int n = snprintf(s, rl + 24, "blk.%d", map[b]);
    memcpy(s + n, rest, rl);
    s[n + (int)rl] = 0;
    return s;
}

/* Plans every output tensor and adds its info to the writer. */
static int qz_plan(qz_job *job, sp_gguf_writer *w, const sp_gguf *g, const qz_opts *o, const int *map,
                   int n_layer, sp_err *err) {
    uint64_t n = sp_gguf_n_tensors(g), max_row = 1;
    job->t = sp_xcalloc((size_t)n + 1, sizeof *job->t);
    for (uint64_t i = 0; i < n; i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char esc[160];
        if (memchr(t->name.ptr, 0, t->name.len))
            return sp_err_set(err, "tensor %" PRIu64 " ('%s') has a NUL byte in its name", i,
                              qz_escape(t->name.ptr, (size_t)t->name.len, esc, sizeof esc));
        char *name = qz_out_name(t, o->keep ? map : NULL, n_layer);
        if (!name) continue;
        qz_tensor *q = &job->t[job->n++];
        *q = (qz_tensor){t, name, qz_target_type(t, name, o)};
        if (sp_gguf_writer_add_tensor(w, name, q->type, t->n_dims, t->ne, NULL, err) < 0) return -1;
        if (q->type != t->type && t->ne[0] > max_row) max_row = t->ne[0];
    }
    job->row = sp_xmalloc((size_t)max_row * sizeof(float));
    return 0;
}

/* The writer's fill callback: copies or converts one tensor row by row. */
static int qz_fill(void *ctx, uint64_t index, void *dst, uint64_t n_bytes, sp_err *err) {
    qz_job *job = ctx;
    const qz_tensor *q = &job->t[index];
    const sp_gguf_tensor *t = q->src;
    uint64_t t0 = sp_now_ns();
    if (q->type == t->type) {
        memcpy(dst, t->data, (size_t)n_bytes);
    } else {
        int64_t n = (int64_t)t->ne[0], rows = (int64_t)(t->n_elements / t->ne[0]);
        uint64_t in_row = sp_dtype_row_bytes(t->type, t->ne[0]), out_row = sp_dtype_row_bytes(q->type, t->ne[0]);
        if (!in_row || !out_row || out_row * (uint64_t)rows != n_bytes)
            return sp_err_set(err, "internal error: row sizes of %s -> %s", sp_dtype_name(t->type), sp_dtype_name(q->type));
        for (int64_t r = 0; r < rows; r++) {
            sp_dequantize_row(t->type, (const uint8_t *)t->data + (uint64_t)r * in_row, job->row, n);
            sp_quantize_row(q->type, job->row, (uint8_t *)dst + (uint64_t)r * out_row, n);
        }
    }
    job->in_bytes += t->n_bytes;
    job->out_bytes += n_bytes;
    if (!job->quiet) {
        char shape[128], esc[160];
        int o = snprintf(shape, sizeof shape, "%" PRIu64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) o += snprintf(shape + o, sizeof shape - (size_t)o, " x %" PRIu64, t->ne[d]);
        fprintf(stderr, "[%4" PRIu64 "/%4" PRIu64 "] %-32s %-20s %5s -> %-5s %s%.1f ms\n", index + 1, job->n,
                QZ_ESC(q->name, esc), shape, sp_dtype_name(t->type), sp_dtype_name(q->type),
                q->type == t->type ? "copied " : "", sp_ns_to_s(sp_now_ns() - t0) * 1e3);
    }
    return 0;
}

static void qz_job_free(qz_job *job) {
    for (uint64_t i = 0; i < job->n; i++) free(job->t[i].name);
    free(job->t);
    free(job->row);
}

/* ------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------- */

/* Architecture and block count of the source (the count only matters for
 * --layers, where it must be present). */
static int qz_source_info(const sp_gguf *g, const qz_opts *o, char *arch, size_t cap, int *n_layer, sp_err *err) {
    sp_str s = {"", 0};
    arch[0] = 0;
    *n_layer = 0;
    if (!o->keep) {   /* only --layers needs them */
        if (sp_gguf_get_str(g, "general.architecture", &s, NULL) > 0 && s.len < cap && !memchr(s.ptr, 0, s.len))
            sp_str_cpy(s, arch, cap);
        return 0;
    }
    if (sp_gguf_get_str(g, "general.architecture", &s, err) <= 0 || s.len == 0 || s.len >= cap ||
        memchr(s.ptr, 0, s.len))
        return sp_err_set(err, "--layers needs a valid 'general.architecture' in the file");
    sp_str_cpy(s, arch, cap);
    char key[160];
    snprintf(key, sizeof key, "%s.block_count", arch);
    uint32_t n = 0;
    if (sp_gguf_get_u32(g, key, &n, err) <= 0 || n == 0 || n > QZ_MAX_LAYER)
        return sp_err_set(err, "--layers needs '%s' (an integer in 1..%d) in the file", key, QZ_MAX_LAYER);
    *n_layer = (int)n;
    return 0;
}

/* Builds the writer for g and writes o->out; returns an exit code. */
static int qz_run(const sp_gguf *g, const char *src_path, const qz_opts *o) {
    sp_err err = {{0}};
    char arch[128];
    int n_layer, n_keep = 0, rc = SP_EXIT_FAIL;
    if (qz_source_info(g, o, arch, sizeof arch, &n_layer, &err)) {
        fprintf(stderr, "specula quantize: %s: %s\n", src_path, err.msg);
        return SP_EXIT_FAIL;
    }
    int *map = sp_xcalloc((size_t)n_layer + 1, sizeof *map);
    qz_job job = {.quiet = o->quiet};
    sp_gguf_writer *w = sp_gguf_writer_create();
    if (o->keep) {
        if ((n_keep = qz_layer_map(o, n_layer, map)) < 0) { rc = SP_EXIT_USAGE; goto done; }
        fprintf(stderr, "specula quantize: keeping %d of %d blocks (%s)\n", n_keep, n_layer, o->layers_arg);
        if (!strcmp(arch, "gemma3")) qz_warn_swa(map, n_layer);
    }
    if (qz_metadata(w, g, o, arch, map, n_layer, n_keep, &err) ||
        qz_plan(&job, w, g, o, map, n_layer, &err)) {
        fprintf(stderr, "specula quantize: %s: %s\n", src_path, err.msg);
        goto done;
    }
    uint64_t t0 = sp_now_ns();
    if (sp_gguf_writer_write(w, o->out, qz_fill, &job, &err)) {
        fprintf(stderr, "specula quantize: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "specula quantize: wrote %s: %" PRIu64 " tensors, %.1f MiB (from %.1f MiB), %.2f s\n",
            o->out, job.n, (double)job.out_bytes / (1024.0 * 1024.0), (double)job.in_bytes / (1024.0 * 1024.0),
            sp_ns_to_s(sp_now_ns() - t0));
    rc = 0;
done:
    sp_gguf_writer_free(w);
    qz_job_free(&job);
    free(map);
    return rc;
}

int sp_cmd_quantize(int argc, char **argv) {
    qz_opts o = {0};
    int rc = qz_parse_args(argc, argv, &o);
    if (rc >= 0) { free(o.keep); return rc; }
    sp_err err = {{0}};
    char path[4096];
    sp_gguf *g = NULL;
    if (sp_resolve_model(o.model, path, sizeof path, &err) || !(g = sp_gguf_open(path, &err))) {
        fprintf(stderr, "specula quantize: %s\n", err.msg);
        free(o.keep);
        return SP_EXIT_FAIL;
    }
    rc = qz_run(g, path, &o);
    sp_gguf_close(g);
    free(o.keep);
    return rc;
}

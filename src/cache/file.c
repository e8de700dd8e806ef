/* The prefix cache on disk: the whole tree, its rows and the drafter
 * checkpoints beside them, under the cache's identity and a checksum.
 *
 * Layout (little-endian, as the engine's GGUF files):
 *
 *   "SPCACHE1"  u32 version (1)
 *   u32 identity length, identity bytes      (target fingerprint, KV scheme)
 *   u32 n_layer, u32 kv_dim, then per layer u32 K type, u32 V type (SP_F16,
 *     SP_Q8_0, SP_Q4_0) and u32 K, V row bytes
 *   u32 nodes, then each node in preorder (a parent before its children):
 *     i32 parent (-1 = the root; else an earlier node's index)
 *     u32 len, i32 tokens[len]
 *     K rows: per layer, len rows of its row bytes; then the V rows
 *     u32 checkpoints, each: u32 namespace length, namespace, u64 length, bytes
 *   u64 FNV-1a of every byte before it
 *
 * A file is untrusted input: every count is bounded, every token must be in
 * the vocabulary, every F16 value finite (and every block scale), siblings must start with
 * different tokens, and the checksum and the end of the file must come
 * where the counts say.  Any failure empties the cache: nothing of a bad
 * file is used.  The checksum catches corruption, not forgery: the file is
 * the user's own cache.  Drafter checkpoints are checked again by the
 * drafter that restores one (its namespace, its sizes). */
#include "cache/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PC_MAGIC "SPCACHE1"
#define PC_VERSION 1u
#define PC_MAX_NODES (1u << 24)
#define PC_MAX_LEN (1u << 20)
#define PC_MAX_CKPTS 64u
#define PC_MAX_BLOB (1ull << 30)

typedef struct pc_io {
    FILE *f;
    uint64_t h;                      /* FNV-1a of the bytes so far */
    bool failed;
} pc_io;

static void hash_bytes(pc_io *io, const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = io->h;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    io->h = h;
}

static void put(pc_io *io, const void *p, size_t n) {
    if (io->failed || !n) return;
    hash_bytes(io, p, n);
    if (fwrite(p, 1, n, io->f) != n) io->failed = true;
}

static void put_u32(pc_io *io, uint32_t v) { put(io, &v, sizeof v); }

static bool get(pc_io *io, void *p, size_t n) {
    if (io->failed) return false;
    if (n && fread(p, 1, n, io->f) != n) { io->failed = true; return false; }
    hash_bytes(io, p, n);
    return true;
}

/* ----------------------------------------------------------------------------
 * Saving
 * ------------------------------------------------------------------------- */

static void put_node(pc_io *io, const sp_pcache *pc, const pc_node *x, int32_t parent) {
    put(io, &parent, sizeof parent);
    put_u32(io, (uint32_t)x->len);
    put(io, x->toks, (size_t)x->len * sizeof(int32_t));
    for (int s = 0; s < 2; s++) put(io, x->kv[s], (size_t)x->len * pc->pre[s][pc->n_layer]);
    put_u32(io, (uint32_t)x->n_ckpts);
    for (int i = 0; i < x->n_ckpts; i++) {
        const uint32_t n = (uint32_t)strlen(x->ckpts[i].ns);
        const uint64_t len = x->ckpts[i].len;
        put_u32(io, n);
        put(io, x->ckpts[i].ns, n);
        put(io, &len, sizeof len);
        put(io, x->ckpts[i].blob, x->ckpts[i].len);
    }
}

int sp_pcache_save(const sp_pcache *pc, const char *path, sp_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return sp_err_set(err, "prefix cache: path too long: %s", path);
    pc_io io = { .f = fopen(tmp, "wb"), .h = 1469598103934665603ull };
    if (!io.f) return sp_err_set(err, "prefix cache: cannot write %s", tmp);
    put(&io, PC_MAGIC, 8);
    put_u32(&io, PC_VERSION);
    put_u32(&io, (uint32_t)strlen(pc->identity));
    put(&io, pc->identity, strlen(pc->identity));
    put_u32(&io, (uint32_t)pc->n_layer);
    put_u32(&io, (uint32_t)pc->kv_dim);
    for (int il = 0; il < pc->n_layer; il++) {
        put_u32(&io, pc->type[0][il]);
        put_u32(&io, pc->type[1][il]);
        put_u32(&io, (uint32_t)pc->row[0][il]);
        put_u32(&io, (uint32_t)pc->row[1][il]);
    }
    put_u32(&io, (uint32_t)pc->n_all);
    /* preorder with an explicit stack; index[] maps a node's slot in
     * pc->all to its place in the file */
    int32_t *index = sp_xmalloc(((size_t)pc->n_all + 1) * sizeof *index);
    const pc_node **stack = sp_xmalloc(((size_t)pc->n_all + 1) * sizeof *stack);
    int top = 0, next = 0;
    for (int i = pc->root.n_kids - 1; i >= 0; i--) stack[top++] = pc->root.kids[i];
    while (top > 0) {
        const pc_node *x = stack[--top];
        index[x->idx] = next++;
        put_node(&io, pc, x, x->parent == &pc->root ? -1 : index[x->parent->idx]);
        for (int i = x->n_kids - 1; i >= 0; i--) stack[top++] = x->kids[i];
    }
    free(stack);
    free(index);
    const uint64_t h = io.h;
    put(&io, &h, sizeof h);
    const bool ok = !io.failed && next == pc->n_all;
    if (fclose(io.f) != 0 || !ok || rename(tmp, path) != 0) {
        remove(tmp);
        return sp_err_set(err, "prefix cache: writing %s failed", path);
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------- */

static int bad(pc_io *io, sp_err *err, const char *path, const char *what) {
    return sp_err_set(err, "prefix cache %s: %s", path, io->failed ? "truncated" : what);
}

static bool half_finite(const uint8_t *p) {
    sp_f16 h;
    memcpy(&h, p, sizeof h);
    return (h & 0x7C00) != 0x7C00;   /* not infinity or NaN */
}

/* Every F16 value of n rows of layer il of one side: the values of an F16
 * row, the scale of each block of a quantized one. */
static bool rows_finite(const sp_pcache *pc, int side, const uint8_t *b, size_t len) {
    for (int il = 0; il < pc->n_layer; il++) {
        const uint32_t t = pc->type[side][il];
        const size_t step = t == SP_Q8_0 ? 34 : t == SP_Q4_0 ? 18 : sizeof(sp_f16);
        const size_t n = len * pc->row[side][il];
        const uint8_t *r = b + len * pc->pre[side][il];
        for (size_t o = 0; o < n; o += step)
            if (!half_finite(r + o)) return false;
    }
    return true;
}

/* Reads one node's checkpoints into x (NULL: read and drop them). */
static int get_ckpts(pc_io *io, sp_pcache *pc, pc_node *x, const char *path, sp_err *err) {
    uint32_t n;
    if (!get(io, &n, sizeof n) || n > PC_MAX_CKPTS) return bad(io, err, path, "too many checkpoints");
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nl;
        uint64_t bl;
        char ns[256];
        if (!get(io, &nl, sizeof nl) || nl == 0 || nl >= sizeof ns) return bad(io, err, path, "bad checkpoint namespace");
        if (!get(io, ns, nl)) return bad(io, err, path, "");
        ns[nl] = 0;
        if (strlen(ns) != nl || strchr(ns, '\n')) return bad(io, err, path, "bad checkpoint namespace");
        if (!get(io, &bl, sizeof bl) || bl > PC_MAX_BLOB) return bad(io, err, path, "checkpoint too large");
        uint8_t *blob = sp_xmalloc(bl ? (size_t)bl : 1);
        if (!get(io, blob, (size_t)bl)) { free(blob); return bad(io, err, path, ""); }
        const size_t need = (size_t)bl + nl + 1 + sizeof(pc_ckpt);
        if (x && pc->st.bytes + need <= pc->st.budget) {
            x->ckpts = sp_xrealloc(x->ckpts, (size_t)(x->n_ckpts + 1) * sizeof *x->ckpts);
            x->ckpts[x->n_ckpts++] = (pc_ckpt){ .ns = sp_xstrdup(ns), .blob = blob, .len = (size_t)bl };
            pc->st.bytes += need;
        } else {
            free(blob);
        }
    }
    return 0;
}

/* Reads one node; adds it under its parent when the parent was kept and
 * it fits the budget (else reads past it).  *kept: whether it was. */
static int get_node(pc_io *io, sp_pcache *pc, pc_node **nodes, uint32_t i, int n_vocab, const char *path,
                    sp_err *err) {
    int32_t parent;
    uint32_t len;
    if (!get(io, &parent, sizeof parent) || parent < -1 || parent >= (int32_t)i)
        return bad(io, err, path, "a node's parent does not come before it");
    if (!get(io, &len, sizeof len) || len == 0 || len > PC_MAX_LEN) return bad(io, err, path, "bad edge length");
    int32_t *toks = sp_xmalloc((size_t)len * sizeof *toks);
    uint8_t *kv[2];
    for (int s = 0; s < 2; s++) kv[s] = sp_xmalloc((size_t)len * pc->pre[s][pc->n_layer]);
    int rc = 0;
    if (!get(io, toks, (size_t)len * sizeof *toks) || !get(io, kv[0], (size_t)len * pc->pre[0][pc->n_layer]) ||
        !get(io, kv[1], (size_t)len * pc->pre[1][pc->n_layer]))
        rc = bad(io, err, path, "");
    for (uint32_t t = 0; !rc && t < len; t++)
        if (toks[t] < 0 || toks[t] >= n_vocab) rc = bad(io, err, path, "a token outside the vocabulary");
    if (!rc && (!rows_finite(pc, 0, kv[0], len) || !rows_finite(pc, 1, kv[1], len)))
        rc = bad(io, err, path, "a KV row that is not finite");
    pc_node *up = parent < 0 ? &pc->root : nodes[parent];
    if (!rc && up && sp_pc_kid_with(up, toks[0])) rc = bad(io, err, path, "two edges from one node start alike");
    pc_node *x = NULL;
    if (!rc && up && up->depth + up->len + (int64_t)len <= INT32_MAX / 2 &&
        pc->st.bytes + sizeof(pc_node) + (size_t)len * sp_pcache_token_bytes(pc) <= pc->st.budget) {
        x = sp_pc_node_new(pc, up, toks, (int)len);
        for (int s = 0; s < 2; s++) {
            free(x->kv[s]);
            x->kv[s] = kv[s];
            kv[s] = NULL;
        }
        pc->st.bytes += sp_pc_node_bytes(pc, x);
    }
    nodes[i] = x;                    /* NULL: skipped (over budget), and so are its children */
    free(toks);
    free(kv[0]);
    free(kv[1]);
    return rc ? rc : get_ckpts(io, pc, x, path, err);
}

int sp_pcache_load_file(sp_pcache *pc, const char *path, int n_vocab, sp_err *err) {
    if (pc->n_all) return sp_err_set(err, "prefix cache: loading %s into a cache that is not empty", path);
    pc_io io = { .f = fopen(path, "rb"), .h = 1469598103934665603ull };
    if (!io.f) return sp_err_set(err, "prefix cache: cannot open %s", path);
    char magic[8];
    uint32_t version, id_len, n_layer, kv_dim, n_nodes;
    int rc = 0;
    char *id = NULL;
    pc_node **nodes = NULL;
    if (!get(&io, magic, 8) || memcmp(magic, PC_MAGIC, 8)) rc = bad(&io, err, path, "not a prefix cache file");
    else if (!get(&io, &version, 4) || version != PC_VERSION) rc = bad(&io, err, path, "unknown version");
    else if (!get(&io, &id_len, 4) || id_len > 4096) rc = bad(&io, err, path, "bad identity");
    if (!rc) {
        id = sp_xcalloc(id_len + 1, 1);
        if (!get(&io, id, id_len)) rc = bad(&io, err, path, "");
        else if (strlen(id) != id_len || strcmp(id, pc->identity))
            rc = sp_err_set(err, "prefix cache %s: made for '%.200s', not for this engine's '%s'", path, id,
                            pc->identity);
    }
    if (!rc && (!get(&io, &n_layer, 4) || !get(&io, &kv_dim, 4) || (int)n_layer != pc->n_layer ||
                (int)kv_dim != pc->kv_dim))
        rc = bad(&io, err, path, "its rows have another shape");
    for (int il = 0; !rc && il < pc->n_layer; il++) {
        uint32_t f[4];
        if (!get(&io, f, sizeof f) || f[0] != pc->type[0][il] || f[1] != pc->type[1][il] ||
            f[2] != pc->row[0][il] || f[3] != pc->row[1][il])
            rc = bad(&io, err, path, "its rows have another shape");
    }
    if (!rc && (!get(&io, &n_nodes, 4) || n_nodes > PC_MAX_NODES)) rc = bad(&io, err, path, "too many nodes");
    if (!rc) nodes = sp_xcalloc(n_nodes ? n_nodes : 1, sizeof *nodes);
    for (uint32_t i = 0; !rc && i < n_nodes; i++) rc = get_node(&io, pc, nodes, i, n_vocab, path, err);
    if (!rc) {
        const uint64_t want = io.h;
        uint64_t h;
        if (!get(&io, &h, sizeof h)) rc = bad(&io, err, path, "");
        else if (h != want) rc = sp_err_set(err, "prefix cache %s: checksum mismatch", path);
        else if (fgetc(io.f) != EOF) rc = sp_err_set(err, "prefix cache %s: bytes after the checksum", path);
    }
    fclose(io.f);
    free(id);
    free(nodes);
    if (rc) sp_pcache_clear(pc);     /* nothing of a bad file is used */
    return rc;
}

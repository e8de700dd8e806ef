/*
 * cache — prompt prefixes kept across requests.
 *
 * A prefix cache holds the KV rows of token sequences that earlier requests
 * computed, in a radix tree over token ids (SGLang's RadixAttention layout):
 * each node is an edge of tokens with the K and V rows of their positions,
 * so requests that share a system prompt or a conversation history share
 * the rows.  A new sequence copies the rows of its longest cached prefix
 * into its own cache and prefills only the rest.  Rows depend only on the
 * tokens before them (batch invariance, src/model/forward.c), so a hit
 * gives exactly the numbers a cold prefill would.
 *
 * Beside the rows, a node's end may hold drafter checkpoints, each under
 * its drafter's namespace (sp_drafter.ns: method, parameters, weights and
 * target), so a hit can resume a drafter warm.  A checkpoint is handed out
 * only for an exactly equal namespace.
 *
 * The cache is bounded (bytes of rows, tokens and checkpoints); when a new
 * edge does not fit, the least recently used leaves go first.  Nodes on the
 * path being loaded or stored are pinned for the call.  One thread at a
 * time (the context's).
 *
 * Every cache is for one KV layout (layers, row width, element type): the
 * identity string given at creation names the target and the storage
 * scheme, and the caller keeps caches of different identities apart.
 */
#ifndef SP_CACHE_H
#define SP_CACHE_H

#include "base/base.h"
#include "model/model.h"

typedef struct sp_pcache sp_pcache;

typedef struct sp_pcache_stats {
    int64_t lookups;                 /* sp_pcache_load calls */
    int64_t hits;                    /* of them, with at least one token found */
    int64_t hit_tokens;              /* tokens loaded from the cache */
    int64_t stored_tokens;           /* tokens whose rows were added */
    int64_t evictions;               /* nodes evicted */
    int64_t evicted_tokens;
    int64_t ckpt_hits;               /* checkpoints handed out */
    size_t bytes;                    /* in use now */
    size_t budget;
    int nodes;                       /* edges in the tree (the root excluded) */
} sp_pcache_stats;

/* A cache for F16 KV rows of n_layer layers of kv_dim values, within
 * budget bytes.  identity: what the rows depend on besides the tokens
 * (copied). */
sp_pcache *sp_pcache_create(int n_layer, int kv_dim, size_t budget, const char *identity);
/* A cache for rows laid out as kv's (its layers' storage types: F16 or
 * quantized blocks). */
sp_pcache *sp_pcache_create_like(const sp_kv *kv, size_t budget, const char *identity);
void sp_pcache_free(sp_pcache *pc);
const char *sp_pcache_identity(const sp_pcache *pc);

/* Copies the rows of the longest cached prefix of toks[0..n), at most
 * max_len tokens, into kv's positions [0, L) and sets kv->n = L.  Returns
 * L (0 = nothing cached; kv is then untouched). */
int sp_pcache_load(sp_pcache *pc, const int32_t *toks, int n, int max_len, sp_kv *kv);

/* The length of the longest cached prefix of toks[0..n) (no copy, no
 * statistics). */
int sp_pcache_match(sp_pcache *pc, const int32_t *toks, int n);

/* Adds kv's rows [0, n) under toks[0..n): only what the tree lacks is
 * copied.  Evicts least recently used leaves to make room; stores a
 * shorter prefix when the whole does not fit.  Returns the tokens now
 * cached for toks (<= n). */
int sp_pcache_store(sp_pcache *pc, const int32_t *toks, int n, const sp_kv *kv);

/* Attaches a drafter checkpoint (copied) at the boundary after toks[0..n),
 * which must be cached (returns -1 otherwise, or when it does not fit);
 * replaces one of the same namespace there. */
int sp_pcache_put_ckpt(sp_pcache *pc, const int32_t *toks, int n, const char *ns, const uint8_t *blob,
                       size_t len);

/* The checkpoint of namespace ns at the deepest boundary <= max_len along
 * toks's cached prefix.  Returns that boundary (the checkpoint's state
 * covers toks[0..boundary)) and sets *blob and *len (owned by the cache, valid
 * until its next store), or 0 when there is none. */
int sp_pcache_find_ckpt(sp_pcache *pc, const int32_t *toks, int n, int max_len, const char *ns,
                        const uint8_t **blob, size_t *len);

/* Writes the whole cache (rows, checkpoints, identity, checksum) to path,
 * through a temporary file renamed into place. */
int sp_pcache_save(const sp_pcache *pc, const char *path, sp_err *err);
/* Fills an empty cache from a file sp_pcache_save wrote for the same
 * identity and row shape, within the cache's budget (nodes come parents
 * first; one that does not fit is left out with everything under it).  A foreign, truncated or corrupt file
 * (see file.c) is refused with err and leaves the cache empty.  n_vocab
 * bounds the token ids. */
int sp_pcache_load_file(sp_pcache *pc, const char *path, int n_vocab, sp_err *err);

/* Drops every entry. */
void sp_pcache_clear(sp_pcache *pc);

sp_pcache_stats sp_pcache_get_stats(const sp_pcache *pc);

/* Bytes one cached token's rows take (for budgets and reports). */
size_t sp_pcache_token_bytes(const sp_pcache *pc);

#endif /* SP_CACHE_H */

/*
 * model — transformer weights bound from a GGUF file, the KV cache, and the
 * batched forward pass.
 *
 * Architectures: `llama` (SmolLM2) and `gemma3` (Gemma 3).  Weights stay in
 * the file's memory mapping; only small norm vectors are converted to owned
 * float arrays.
 *
 * The forward pass over N tokens is batch-invariant: every row is computed
 * with the same arithmetic whatever N is, so a verification window gives
 * bit-identical logits to N one-token steps.  Speculative decoding relies on
 * this to be lossless, and the tests compare exactly.
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include "base/base.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

typedef enum sp_arch { SP_ARCH_LLAMA = 0, SP_ARCH_GEMMA3 = 1 } sp_arch;

typedef struct sp_hparams {
    sp_arch arch;
    int n_vocab;
    int n_ctx_train;     /* context length the model was trained for */
    int n_embd;          /* model width */
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;        /* per head, keys and values */
    int n_ff;            /* feed-forward width */
    int n_rot;           /* rotary dims per head */
    float rms_eps;
    float rope_base;     /* global (full-attention) layers */
    float rope_base_swa; /* sliding-window layers (gemma3) */
    int swa_window;      /* sliding window in tokens, 0 = none */
    int swa_pattern;     /* every swa_pattern-th layer is global (gemma3: 6) */
    float embd_scale;    /* multiply embeddings by this (gemma: sqrt(n_embd)) */
    float attn_scale;    /* query scale (1/sqrt(head_dim)) */
    bool rope_neox;      /* rotate halves (gemma) instead of pairs (llama) */
} sp_hparams;

typedef struct sp_layer {
    const float *attn_norm;      /* (n_embd) owned */
    sp_matrix wq;                /* (n_head*head_dim, n_embd) */
    sp_matrix wk;                /* (n_head_kv*head_dim, n_embd) */
    sp_matrix wv;                /* (n_head_kv*head_dim, n_embd) */
    sp_matrix wo;                /* (n_embd, n_head*head_dim) */
    const float *q_norm;         /* (head_dim) gemma3 only, owned */
    const float *k_norm;         /* (head_dim) gemma3 only, owned */
    const float *post_attn_norm; /* (n_embd) gemma3 only, owned */
    const float *ffn_norm;       /* (n_embd) owned */
    sp_matrix w_gate;            /* (n_ff, n_embd) */
    sp_matrix w_up;              /* (n_ff, n_embd) */
    sp_matrix w_down;            /* (n_embd, n_ff) */
    const float *post_ffn_norm;  /* (n_embd) gemma3 only, owned */
    bool swa;                    /* sliding-window layer */
    float rope_base;             /* this layer's RoPE base */
} sp_layer;

typedef struct sp_model {
    sp_gguf *gguf;               /* owned: the mapping the weights live in */
    char *path;                  /* owned */
    char name[128];
    sp_hparams hp;
    sp_matrix tok_embd;          /* (n_vocab, n_embd) */
    const float *out_norm;       /* (n_embd) owned */
    sp_matrix output;            /* (n_vocab, n_embd), = tok_embd when tied */
    bool tied_output;
    sp_layer *layers;            /* (n_layer) owned */
    uint64_t weight_bytes;       /* bytes of weight tensors in the file */
    void *packed;                /* owned (sp_alloc_big): the packed matrices' data, or NULL */
    size_t packed_bytes;
    char fingerprint[17];        /* identity of the weights (hex), see sp_model_fingerprint_gguf */
} sp_model;

/* How a model is loaded. */
typedef struct sp_model_load_opts {
    /* With kernels that have a packed path (SIMD), repack the Q4_1, Q5_0
     * and Q8_0 matrices at load, 8 rows interleaved, into one anonymous
     * region and drop the mapped originals (faster matmuls; resident
     * memory stays the size of the weights).  false keeps the plain
     * mapped layout. */
    bool pack;
} sp_model_load_opts;
/* The defaults: pack = true. */
sp_model_load_opts sp_model_load_default_opts(void);

/* Loads and validates a model (architecture, hyperparameters, every tensor's
 * presence, shape and type).  NULL + err on failure, naming what is wrong
 * and listing supported architectures / tensor types where relevant. */
sp_model *sp_model_load_with(const char *path, const sp_model_load_opts *o, sp_err *err);
/* sp_model_load_with the default options. */
sp_model *sp_model_load(const char *path, sp_err *err);
void sp_model_free(sp_model *m);
/* The fingerprint of a model file (fingerprint.c): a hash of every tensor's
 * name, type, shape and first and last bytes, as 16 hex digits (out[17]).
 * sp_model_load fills sp_model.fingerprint with it. */
void sp_model_fingerprint_gguf(const sp_gguf *g, char out[17]);
const char *sp_arch_name(sp_arch a);
/* Bytes of weights read per decoded token (all matrices + LM head). */
uint64_t sp_model_bytes_per_token(const sp_model *m);

/* ------------------------------------------------------------------------
 * KV cache of one sequence: K and V per layer, positions 0..n-1.
 *
 * A layer's rows are F16 (the default) or blocks of Q8_0 / Q4_0 (32 values
 * with an F16 scale; kv_dim is a multiple of 32, and so is each head), as
 * llama.cpp's --cache-type-k/-v.  Layer il's row of position p lives at
 * (uint8_t *)k + off_k[il] + p * row_k[il] (the same for V); when every
 * layer is F16 that is the plain (n_layer, n_ctx, kv_dim) array k points
 * to, which code for F16-only caches (draft heads, draft models) indexes
 * directly (kv->f16 says so).
 * ---------------------------------------------------------------------- */
typedef struct sp_kv_types {
    uint32_t k, v;               /* SP_F16 (default), SP_Q8_0 or SP_Q4_0 */
    int quant_start;             /* layers below it stay F16 (llama.cpp has no such knob; 0 = all) */
} sp_kv_types;

typedef struct sp_kv {
    int n_layer;
    int n_ctx;                   /* capacity in tokens */
    int kv_dim;                  /* n_head_kv * head_dim */
    int n;                       /* tokens stored: positions [0, n) */
    sp_f16 *k;                   /* owned: every layer's K rows (see above) */
    sp_f16 *v;                   /* owned: every layer's V rows */
    bool f16;                    /* every layer F16: k and v are (n_layer, n_ctx, kv_dim) */
    uint32_t *type_k, *type_v;   /* (n_layer) owned */
    size_t *row_k, *row_v;       /* (n_layer) bytes of one position's row */
    size_t *off_k, *off_v;       /* (n_layer) byte offset of the layer's rows */
} sp_kv;

static inline uint8_t *sp_kv_krow(const sp_kv *kv, int il, int pos) {
    return (uint8_t *)kv->k + kv->off_k[il] + (size_t)pos * kv->row_k[il];
}
static inline uint8_t *sp_kv_vrow(const sp_kv *kv, int il, int pos) {
    return (uint8_t *)kv->v + kv->off_v[il] + (size_t)pos * kv->row_v[il];
}

/* A cache of the model's shape, all F16. */
sp_kv *sp_kv_create(const sp_model *m, int n_ctx);
/* With the given storage types (NULL = all F16); types must be valid
 * (sp_kv_types_check). */
sp_kv *sp_kv_create_typed(const sp_model *m, int n_ctx, const sp_kv_types *t);
/* 0, or -1 + err: a type other than F16/Q8_0/Q4_0, a head size that is not
 * a multiple of 32 with a quantized type, quant_start outside [0, n_layer]. */
int sp_kv_types_check(const sp_model *m, const sp_kv_types *t, sp_err *err);
/* "f16", "q8_0", "q4_0" -> SP_F16 ...; -1 for another name. */
int sp_kv_type_parse(const char *name, uint32_t *out);
/* "kv:q8_0/q4_0@2" (K type, V type, first quantized layer) or "kv:f16". */
void sp_kv_types_name(const sp_kv_types *t, char *buf, size_t cap);
/* Bytes one position takes in a cache of these types (K and V, all layers). */
size_t sp_kv_bytes_per_token(const sp_model *m, const sp_kv_types *t);
/* A cache of n_layer layers of kv_dim values per token (a draft head's). */
sp_kv *sp_kv_create_dims(int n_layer, int n_ctx, int kv_dim);
void sp_kv_free(sp_kv *kv);
/* Keeps positions [0, n_keep); later positions are forgotten exactly (the
 * next forward overwrites them).  n_keep must be <= kv->n. */
void sp_kv_trim(sp_kv *kv, int n_keep);
/* After a tree pass of n rows from slot base: keeps rows path[0..n_path)
 * (window indices, each the child of the one before, ascending) at slots
 * base .. base + n_path - 1, where plain decoding would have put them, and
 * sets kv->n = base + n_path. */
void sp_kv_keep_path(sp_kv *kv, int base, const int32_t *path, int n_path);

/* ------------------------------------------------------------------------
 * Forward pass.
 *
 * A workspace holds the activations for up to max_rows tokens per pass and
 * the thread pool (borrowed).  Longer inputs are processed in chunks of
 * max_rows; chunking does not change any row's result.
 * ---------------------------------------------------------------------- */
typedef struct sp_workspace sp_workspace;

sp_workspace *sp_workspace_create(const sp_model *m, int max_rows, sp_pool *pool);
void sp_workspace_free(sp_workspace *ws);
/* Passes run through this workspace skip the layers with skip[il] != 0
 * (copied; NULL = run all): the residual stream passes through unchanged.
 * Self-speculation drafts with such a workspace; skipped layers' cache
 * slots are left untouched. */
void sp_workspace_skip_layers(sp_workspace *ws, const sp_model *m, const uint8_t *skip);

typedef enum sp_logits_mode {
    SP_LOGITS_NONE = 0,          /* only fill the cache */
    SP_LOGITS_LAST = 1,          /* logits of the last token: (n_vocab) */
    SP_LOGITS_ALL = 2,           /* logits of every token: (n, n_vocab) */
} sp_logits_mode;

/* One sequence's part of a batched pass: rows appended to its cache at
 * slots kv->n .. kv->n + n - 1.  A chain (parent NULL) puts row i at
 * position kv->n + i, attending the cache and the rows before it.  A tree
 * (parent[i] = an earlier row, or -1 for a row attached to the cache) puts
 * row i at position kv->n + depth(i), attending the cache and its
 * ancestors: the draft-tree verification mask.  After a tree pass the
 * caller keeps one root-to-node path with sp_kv_keep_path. */
typedef struct sp_fwd_seq {
    sp_kv *kv;
    const int32_t *tokens;       /* (n) borrowed */
    int n;
    const int32_t *parent;       /* (n) tree parents, NULL = chain; at most 4096 rows */
    sp_logits_mode mode;
    float *logits;               /* (n or 1, n_vocab) caller-owned */
    /* hidden-state taps: for every row, the residual stream at the layer
     * boundaries tap_layers[0..n_taps) (l < n_layer: the input of layer l,
     * as llama.cpp taps it; l == n_layer: the output of the last layer,
     * before the final norm), copied to taps.  Costs nothing when n_taps
     * is 0, and is batch-invariant like the logits. */
    const int32_t *tap_layers;   /* (n_taps) borrowed, each in [0, n_layer] */
    int n_taps;                  /* 0..SP_MAX_TAPS */
    float *taps;                 /* (n, n_taps, n_embd) caller-owned: a row's taps are contiguous */
} sp_fwd_seq;

#define SP_MAX_TAPS 8

/* Runs the rows of several sequences (each with its own cache; no cache
 * twice) as one pass: the weight matrices are read once for all rows.
 * Every row's arithmetic is independent of the others, so each sequence
 * gets bit-identical results to running alone.  All caches advance by
 * their n.  On error nothing is changed. */
int sp_model_forward_batch(const sp_model *m, sp_workspace *ws, const sp_fwd_seq *seqs, int n_seqs,
                           sp_err *err);

/* Runs tokens[0..n) at positions kv->n .. kv->n + n - 1, appends their K/V
 * to the cache and writes logits as requested (caller-owned buffer).
 * Fails (-1 + err) if the cache would overflow or a token id is out of
 * range; the cache is then unchanged. */
int sp_model_forward(const sp_model *m, sp_kv *kv, sp_workspace *ws, const int32_t *tokens,
                     int n, sp_logits_mode mode, float *logits, sp_err *err);

/* ------------------------------------------------------------------------
 * EAGLE-3 draft head (head.c), in llama.cpp's `eagle3` GGUF layout.
 *
 * One decoder layer that drafts for a target.  At position p it reads the
 * pair (g_p, next token x_{p+1}): g_p is fc(concat(the target's residual
 * stream entering its layers target_layers[0..3) at p)), or, for a drafted
 * position, the head's own output at p - 1.  Then
 *
 *   x   = [rmsnorm(emb(x_{p+1})) * attn_norm, rmsnorm(g_p) * attn_norm_2]   (2d)
 *   h1  = g_p + Wo attn(RoPE(Wq x), RoPE(Wk x), Wv x)   (its own KV cache)
 *   h2  = h1 + Wdown(silu(Wgate n) * Wup n),  n = rmsnorm(h1) * ffn_norm
 *   out = h2 (fed forward as the next g);  logits = output · rmsnorm(h2) * output_norm
 *
 * over a reduced draft vocabulary whose ids map to target ids through d2t.
 * The token embedding is the target's (the head has the target's width).
 * RoPE rotates adjacent pairs (llama.cpp's NORM type), at position p.
 * ---------------------------------------------------------------------- */
#define SP_HEAD_TAPS 3

typedef struct sp_head_hparams {
    int n_embd;                  /* d = the target's n_embd */
    int n_embd_target;           /* width of each tapped target state (= d here) */
    int n_head, n_head_kv, head_dim, n_ff;
    int n_vocab_draft;           /* rows of the LM head, entries of d2t */
    int n_ctx_train;
    float rms_eps, rope_base;
    int32_t target_layers[SP_HEAD_TAPS]; /* tap boundaries (sp_fwd_seq), low to high */
    bool norm_before_residual;   /* the residual is rmsnorm(g) * attn_norm_2 instead of g */
} sp_head_hparams;

typedef struct sp_head {
    sp_gguf *gguf;               /* owned */
    char *path;                  /* owned */
    sp_head_hparams hp;
    sp_matrix fc;                /* (d, 3 d_t) */
    const float *attn_norm;      /* (d) on the token embedding, owned */
    const float *attn_norm_2;    /* (d) on g, owned */
    sp_matrix wq;                /* (n_head * head_dim, 2d) */
    sp_matrix wk, wv;            /* (n_head_kv * head_dim, 2d) */
    sp_matrix wo;                /* (d, n_head * head_dim) */
    const float *ffn_norm;       /* (d) owned */
    sp_matrix w_gate, w_up;      /* (n_ff, d) */
    sp_matrix w_down;            /* (d, n_ff) */
    const float *out_norm;       /* (d) owned */
    sp_matrix output;            /* (n_vocab_draft, d) */
    int32_t *d2t;                /* (n_vocab_draft) target ids, owned */
    const sp_matrix *tok_embd;   /* the target's (borrowed) */
    float min_prob;              /* specula.draft_min_prob: drafting stops below it (default 0.3) */
    char target_fingerprint[17]; /* specula.target_fingerprint; "" = not recorded */
    void *packed;                /* the packed copies of the head's own matrices (owned, or NULL) */
    sp_f16 *fc_f16;              /* fc's weights in F16 when the file has them in F32 (owned, or NULL) */
} sp_head;

/* Loads a head for `target` (borrowed; must outlive the head) and checks
 * it: architecture, hyperparameters against the target's (width, layers
 * to tap, vocabulary), every tensor's shape and type, d2t ids in range and
 * unique, and the recorded target fingerprint (a head trained for another
 * model is refused, naming both). */
sp_head *sp_head_load(const char *path, const sp_model *target, sp_err *err);
void sp_head_free(sp_head *h);

/* Scratch for head passes of up to max_rows rows with a cache of n_ctx. */
typedef struct sp_head_ws sp_head_ws;
sp_head_ws *sp_head_ws_create(const sp_head *h, int max_rows, int n_ctx, sp_pool *pool);
void sp_head_ws_free(sp_head_ws *w);
/* The head's cache (one layer). */
sp_kv *sp_head_kv_create(const sp_head *h, int n_ctx);

/* g (n, d) = fc(taps (n, 3, d_t)), n <= max_rows. */
void sp_head_fuse(const sp_head *h, sp_head_ws *w, const float *taps, int n, float *g);
/* Runs n rows (n <= max_rows) at positions kv->n ..: inputs g (n, d) and
 * next tokens tok (n); appends their K/V, writes their outputs h2 to out
 * (n, d) and, when logits is not NULL, the draft-vocabulary logits of the
 * last row (n_vocab_draft).  Rows are batch-invariant like the target's.
 * Fails on a full cache or a token out of range. */
#define SP_HEAD_MAX_ROWS 64          /* rows of one head pass (max_rows <= this) */
int sp_head_forward(const sp_head *h, sp_head_ws *w, sp_kv *kv, const float *g, const int32_t *tok, int n,
                    float *out, float *logits, sp_err *err);
/* One row for each of n sequences in one pass (the drafts of several
 * sequences, batched): row i with input g[i] (d) and token tok[i] goes to
 * the end of cache kv[i] (distinct caches); its output to out[i] (d) and
 * its draft-vocabulary logits to logits[i].  Each row equals what
 * sp_head_forward computes for it alone. */
int sp_head_forward_rows(const sp_head *h, sp_head_ws *w, sp_kv *const *kv, const float *g, const int32_t *tok,
                         int n, float *const *out, float *const *logits, sp_err *err);

/* Writing a head (head_write.c).  Float weights in sp_head's shapes
 * (row-major, one row per output); the norms and fc stay F32 (fc reads the
 * raw residual stream, which quantized activations would wreck), the other
 * matrices are converted to `type`.  The file records the target's fingerprint and
 * name, and carries the target's tokenizer as llama.cpp expects. */
typedef struct sp_head_weights {
    const float *fc;                 /* (d, 3 d_t) */
    const float *attn_norm, *attn_norm_2, *ffn_norm, *out_norm;   /* (d) */
    const float *wq, *wk, *wv;       /* (n_head * head_dim | n_head_kv * head_dim, 2d) */
    const float *wo;                 /* (d, n_head * head_dim) */
    const float *w_gate, *w_up;      /* (n_ff, d) */
    const float *w_down;             /* (d, n_ff) */
    const float *output;             /* (n_vocab_draft, d) */
    const int32_t *d2t;              /* (n_vocab_draft) target ids, distinct */
} sp_head_weights;

typedef struct sp_head_write_opts {
    uint32_t type;                   /* the matrices: SP_F32, SP_F16, SP_Q8_0, SP_Q5_0 or SP_Q4_1 */
    float min_prob;                  /* specula.draft_min_prob */
    const char *training;            /* specula.training: how it was made (NULL = none) */
} sp_head_write_opts;

int sp_head_write(const char *path, const sp_model *target, const sp_head_hparams *hp, const sp_head_weights *w,
                  const sp_head_write_opts *o, sp_err *err);

#endif /* SP_MODEL_H */

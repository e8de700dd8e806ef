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
const char *sp_arch_name(sp_arch a);
/* Bytes of weights read per decoded token (all matrices + LM head). */
uint64_t sp_model_bytes_per_token(const sp_model *m);

/* ------------------------------------------------------------------------
 * KV cache of one sequence: K and V per layer in F16, positions 0..n-1.
 * ---------------------------------------------------------------------- */
typedef struct sp_kv {
    int n_layer;
    int n_ctx;                   /* capacity in tokens */
    int kv_dim;                  /* n_head_kv * head_dim */
    int n;                       /* tokens stored: positions [0, n) */
    sp_f16 *k;                   /* (n_layer, n_ctx, kv_dim) owned */
    sp_f16 *v;                   /* (n_layer, n_ctx, kv_dim) owned */
} sp_kv;

sp_kv *sp_kv_create(const sp_model *m, int n_ctx);
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

#endif /* SP_MODEL_H */

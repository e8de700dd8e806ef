/*
 * train — the operations of training a small draft head on the CPU:
 * forward and hand-written backward passes, the loss, AdamW and its
 * schedule, and a flat parameter arena.  In the spirit of llm.c: every
 * backward sits next to its forward, shapes are in the comments.
 *
 * Conventions (all functions):
 *   - tensors are float32, row-major; a batch is n rows (tokens);
 *   - every backward ACCUMULATES (+=) into every gradient it produces,
 *     inputs and parameters alike (llm.c's rule): the caller zeroes the
 *     gradients once per step, and a tensor used twice sums its gradients;
 *     the one exception is the loss, which WRITES dlogits;
 *   - a gradient pointer may be NULL when it is not wanted; an output or
 *     gradient never overlaps an input (only rope_fwd allows y == x);
 *   - pool may be NULL (one thread).  Results are deterministic for a given
 *     thread count (fixed summation orders, no atomics); everything but
 *     attention's dk and dv is bit-identical for any thread count.
 *
 * Layer: above base and kernels (rope takes its cos/sin table from the
 * kernels so training sees the same rotation as inference).
 */
#ifndef SP_TRAIN_H
#define SP_TRAIN_H

#include "base/base.h"
#include "engine/engine.h"

/* ------------------------------------------------------------------------
 * Linear (linear.c): the matrix products, where the time goes.  Register-
 * blocked GEMM with AVX-512 / AVX2+FMA kernels or a portable one, chosen
 * from the kernels' SIMD level (sp_kernels_simd, SPECULA_SIMD).
 * ---------------------------------------------------------------------- */
/* y(n,out) = x(n,in) . W(out,in)^T + b(out)   (b may be NULL) */
void sp_tr_linear_fwd(sp_pool *pool, float *y, const float *x, const float *w, const float *b,
                      int n, int in, int out);
/* dx(n,in) += dy . W;  dw(out,in) += dy^T . x;  db(out) += sum over rows of dy */
void sp_tr_linear_bwd(sp_pool *pool, float *dx, float *dw, float *db, const float *dy,
                      const float *x, const float *w, int n, int in, int out);
/* C(M,N) += A(M,K) . B(K,N) with A(i,k) = a[i*rsa + k*csa], B(k,j) = b[k*rsb + j*csb],
 * C row-major with leading dimension ldc: the one GEMM the three products use. */
void sp_tr_gemm(sp_pool *pool, int M, int N, int K, const float *a, int64_t rsa, int64_t csa,
                const float *b, int64_t rsb, int64_t csb, float *c, int64_t ldc);
/* Name of the GEMM kernel the current SIMD level uses ("avx512f 12x32", ...). */
const char *sp_tr_gemm_kernel(void);

/* Flush-to-zero and denormals-are-zero on every thread of the pool (the
 * caller's too) until restored (fpenv.c): training is 6x faster on Gemma
 * without subnormal arithmetic.  Pools of more threads than this keep the
 * mode on the others. */
#define SP_TR_MAX_THREADS 256
typedef struct sp_tr_fpenv sp_tr_fpenv;
sp_tr_fpenv *sp_tr_denormals_off(sp_pool *pool);
void sp_tr_denormals_restore(sp_pool *pool, sp_tr_fpenv *env);

/* ------------------------------------------------------------------------
 * Elementwise and per-row operations (ops.c)
 * ---------------------------------------------------------------------- */
/* y(n,d) = x * rstd * g, rstd(n) = 1/sqrt(mean(x^2) + eps) saved for the backward */
void sp_tr_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *g, int n, int d, float eps);
/* dx += d/dx, dg += sum over rows of dy * x * rstd */
void sp_tr_rmsnorm_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g,
                       const float *rstd, int n, int d);

/* Rotary embedding of x(n, n_head*head_dim), in place allowed (y == x):
 * the first n_rot dims of each head of row t rotated by pos[t] * theta_i,
 * theta_i = base^(-2i/n_rot).  neox=false (llama): pairs (2i, 2i+1);
 * neox=true: pairs (i, i + n_rot/2).  Bit-identical to sp_rope_apply. */
void sp_tr_rope_fwd(float *y, const float *x, const int32_t *pos, int n, int n_head, int head_dim,
                    int n_rot, float base, bool neox);
/* dx += R(-theta) dy (the inverse rotation) */
void sp_tr_rope_bwd(float *dx, const float *dy, const int32_t *pos, int n, int n_head, int head_dim,
                    int n_rot, float base, bool neox);

/* h(n) = silu(gate) * up over n elements */
void sp_tr_swiglu_fwd(float *h, const float *gate, const float *up, size_t n);
/* dgate += dh * up * silu'(gate), dup += dh * silu(gate) */
void sp_tr_swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                      size_t n);

/* y = a + b over n elements; the backward of an add is sp_tr_acc on each input */
void sp_tr_add_fwd(float *y, const float *a, const float *b, size_t n);
/* dst += src */
void sp_tr_acc(float *dst, const float *src, size_t n);

/* ------------------------------------------------------------------------
 * Attention (attention.c): multi-head attention with GQA where each query
 * row attends an explicit list of key rows.
 *
 * q(T, n_head*hd); k, v(S, n_kv*hd): all S key rows (for training-time
 * test, the earlier unrolled steps' rows followed by this step's).  Row t
 * attends keys kidx[koff[t] .. koff[t+1]) (CSR, any order; a key listed
 * twice counts twice); query head h reads kv head h / (n_head / n_kv)
 * (n_head a multiple of n_kv).  Scores are q.k / sqrt(hd); the
 * probabilities are saved in att: row t, head h, list entry j at
 * att[koff[t] * n_head + h * len_t + j] (n_head * koff[T] floats).
 * out(T, n_head*hd).  An empty list gives a zero output.
 * ---------------------------------------------------------------------- */
typedef struct sp_tr_attn_shape {
    int T, S;               /* query rows, key rows */
    int n_head, n_kv, hd;
    const int32_t *koff;    /* T + 1 offsets into kidx */
    const int32_t *kidx;    /* key rows, each < S */
} sp_tr_attn_shape;

void sp_tr_attn_fwd(sp_pool *pool, float *out, float *att, const float *q, const float *k,
                    const float *v, const sp_tr_attn_shape *s);
/* dq += ..., dk += ..., dv += ...  dq is the same for any thread count; dk
 * and dv are summed per thread and added in thread order (fixed for a
 * given thread count, within rounding across counts). */
void sp_tr_attn_bwd(sp_pool *pool, float *dq, float *dk, float *dv, const float *dout,
                    const float *att, const float *q, const float *k, const float *v,
                    const sp_tr_attn_shape *s);
/* Lists for plain causal attention of T rows that follow `past` earlier
 * key rows: row t attends key rows 0 .. past + t.  koff: T + 1 entries,
 * kidx: T * past + T * (T + 1) / 2 entries. */
void sp_tr_attn_causal(int32_t *koff, int32_t *kidx, int T, int past);
/* Lists for unrolled step `step` (0 = the plain pass) of EAGLE-3's
 * training-time test, the keys of steps 0..step laid out step by step
 * (rows i*T .. i*T + T-1 are step i's): row t attends step 0's rows 0..t
 * and, for 1 <= i <= step, its own row i*T + t.  kidx: T * (T + 1) / 2 +
 * T * step entries. */
void sp_tr_attn_ttt(int32_t *koff, int32_t *kidx, int T, int step);

/* ------------------------------------------------------------------------
 * Loss (loss.c): softmax cross-entropy against soft targets over a reduced
 * vocabulary of V logits.
 *
 * Row t's target is k (id, probability) pairs, ids(n,k) and probs(n,k)
 * (k <= 64 in practice, any k works); ids < 0 or >= V are ignored; the
 * probabilities are renormalised to sum to 1 (a truncated top-k), a row
 * whose valid probabilities sum to <= 0 is masked.  w(n) are per-row
 * weights (NULL: all 1), w_t = 0 masks the row.
 *   loss = sum_t w_t * (-sum_i p_ti log softmax(logits_t)_id_ti) / denom,
 * denom > 0 given, or (denom <= 0) the number of unmasked rows: a mean.
 * dlogits(n,V) is WRITTEN with d loss / d logits (0 on masked rows).
 * *acc (if not NULL) = fraction of unmasked rows whose logits' argmax is the
 * target's most probable id (first on ties); 0 when all rows are masked.
 * ---------------------------------------------------------------------- */
float sp_tr_softce(sp_pool *pool, float *dlogits, const float *logits, int n, int V,
                   const int32_t *ids, const float *probs, int k, const float *w, float denom,
                   float *acc);

/* The same rows and masks with another loss per row:
 *   SP_TR_LOSS_CE  the cross-entropy above (sp_tr_softce);
 *   SP_TR_LOSS_LK  -log alpha, alpha = sum_i min(p_ti, softmax(logits_t)_id_ti):
 *                  the probability that speculative sampling accepts a token
 *                  the head draws (k <= SP_TR_LK_MAX_K). */
typedef enum { SP_TR_LOSS_CE, SP_TR_LOSS_LK } sp_tr_loss_kind;
#define SP_TR_LK_MAX_K 256
float sp_tr_loss(sp_tr_loss_kind kind, sp_pool *pool, float *dlogits, const float *logits, int n, int V,
                 const int32_t *ids, const float *probs, int k, const float *w, float denom, float *acc);

/* ------------------------------------------------------------------------
 * Optimizer (optim.c)
 * ---------------------------------------------------------------------- */
typedef struct sp_tr_adamw {
    float beta1, beta2, eps, weight_decay;
} sp_tr_adamw;

/* One AdamW step (step = 1 for the first) over n parameters:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + lr * wd * p
 * (decoupled weight decay on the old p, as PyTorch's AdamW). */
void sp_tr_adamw_step(float *p, const float *g, float *m, float *v, size_t n, const sp_tr_adamw *h,
                      float lr, float wd, int64_t step);
/* Learning rate at step (0-based): linear warmup to peak over `warmup`
 * steps (step warmup-1 reaches peak), then cosine decay to floor at step
 * `total`, floor after. */
float sp_tr_lr_cosine(int64_t step, int64_t warmup, int64_t total, float peak, float floor);
/* Global L2 norm of g (in double); if it exceeds max_norm > 0, scales g by
 * max_norm / norm.  Returns the norm before clipping (NaN/inf: g untouched). */
float sp_tr_clip_grad(float *g, size_t n, float max_norm);

/* ------------------------------------------------------------------------
 * Parameter arena (arena.c): one flat buffer each for parameters,
 * gradients and Adam's m and v, and named views into them, so a model is
 * saved, loaded and optimised as one block and addressed by name.
 * Declare every view, then allocate; offsets are 16-float aligned.
 * ---------------------------------------------------------------------- */
#define SP_TR_MAX_DIMS 4
typedef struct sp_tr_view {
    char name[64];
    size_t off, numel;            /* in floats */
    int ndim;
    int64_t shape[SP_TR_MAX_DIMS];
    bool decay;                   /* AdamW weight decay applies (matrices, not norms/biases) */
} sp_tr_view;

typedef struct sp_tr_arena {
    float *param, *grad, *m, *v;  /* size floats each, after sp_tr_arena_alloc */
    size_t size;
    sp_tr_view *views;
    int n_views, cap;
} sp_tr_arena;

/* Adds a view (before allocation) and returns its index, or -1 with err
 * (duplicate name, bad shape, already allocated). */
int sp_tr_arena_add(sp_tr_arena *a, const char *name, int ndim, const int64_t *shape, bool decay,
                    sp_err *err);
void sp_tr_arena_alloc(sp_tr_arena *a);       /* all four buffers, zeroed */
void sp_tr_arena_free(sp_tr_arena *a);
int sp_tr_arena_find(const sp_tr_arena *a, const char *name);   /* -1 if absent */
static inline float *sp_tr_param(const sp_tr_arena *a, int i) { return a->param + a->views[i].off; }
static inline float *sp_tr_grad(const sp_tr_arena *a, int i) { return a->grad + a->views[i].off; }
void sp_tr_arena_zero_grad(sp_tr_arena *a);
/* Fills view i with normal(0, std) values from a keyed generator (std 0: zeros). */
void sp_tr_arena_init_normal(sp_tr_arena *a, int i, float std, uint64_t seed);
/* AdamW over every view, weight decay wd on the views marked decay
 * (threads split each view; the same bits for any thread count). */
void sp_tr_arena_adamw(sp_tr_arena *a, sp_pool *pool, const sp_tr_adamw *h, float lr, float wd, int64_t step);

/* ------------------------------------------------------------------------
 * Self-distillation data (distill.c): training sequences the target makes
 * itself from text on the machine (windows of the text, and its own
 * answers to prompts made from the text), each position with the target's
 * residual stream at three tap layers and its top-k next-token
 * distribution.  See distill.c for the file layout.
 * ---------------------------------------------------------------------- */
typedef struct sp_distill_opts {
    const char *const *paths;        /* text files and folders (searched recursively) */
    int n_paths;
    int64_t max_tokens;              /* stop after recording this many tokens */
    int seq_len;                     /* tokens per window / per prompt + answer */
    int top_k;                       /* soft-label entries per position */
    double answer_share;             /* share of the tokens from the target's answers */
    int answer_tokens;               /* longest answer */
    bool chat;                       /* answers to chat-template prompts (else continuations) */
    double doc_share;                /* share of the prompts made from a snippet of the text (the rest:
                                        chat: generated everyday requests and word problems;
                                        text: generated starts of prose and code) */
    double self_share;               /* chat: share of the generated requests the model writes itself
                                        (given its template's opening of a user turn); the rest come
                                        from templates and word lists */
    double topic_share;              /* chat: share of the generated requests whose everyday kind is
                                        about a word of the text (sp_distill_topic) */
    int32_t tap_layers[3];
    uint64_t seed;
    struct sp_distill_stats *stats;  /* optional: filled at the end */
} sp_distill_opts;

typedef struct sp_distill_stats {
    int self_requests;               /* prompts that were requests the model wrote */
    uint64_t self_made;              /* requests it was asked to write (kept or not) */
    char first_request[256];         /* the first one used (cut to fit), "" if none */
    int topic_requests;              /* prompts about a word of the text (topic_share) */
    char first_topic[16];            /* the first such word, "" if none */
} sp_distill_stats;

/* A generated chat request (prompts.c): an everyday request or an
 * arithmetic word problem, from templates and the rng, into buf; with a
 * topic (not NULL), requests about it instead of the everyday ones (the
 * rng is drawn as without one up to that choice).  True when the request
 * is about the topic. */
bool sp_distill_request(char *buf, size_t cap, const char *topic, sp_rng *rng);

/* A topic for such a request: a lower-case word of 5 to 14 letters from
 * text, neither code nor one of prose's commonest words, picked by the
 * rng; false when text has none. */
bool sp_distill_topic(const char *text, char *out, size_t cap, sp_rng *rng);

/* A request about text from the corpus (prompts.c): a summary, an answer
 * from it, a conversion or, with lang (the code's language, "" for none)
 * set, a code edit or review, with the text pasted in.  Returns the
 * message (free it). */
char *sp_distill_doc_request(const char *text, const char *lang, sp_rng *rng);

/* The generated start of a text for a pretrained model to continue
 * (prompts.c): prose of ten kinds or a source file in one of twelve
 * languages, from templates and the rng, into buf. */
void sp_distill_opener(char *buf, size_t cap, sp_rng *rng);

/* A hash of everything in o that decides the data (paths, sizes, shares,
 * taps, seed; not stats): a data file is reused only for the same recipe. */
uint64_t sp_distill_recipe(const sp_distill_opts *o);

typedef void (*sp_distill_progress)(void *ud, uint64_t tokens, uint64_t goal, uint64_t answer_tokens);

/* Makes the data file at out_path with the context's model (its slots
 * generate answers in parallel). */
int sp_distill_make(sp_ctx *ctx, const sp_distill_opts *o, const char *out_path, sp_distill_progress progress,
                    void *ud, sp_err *err);

typedef struct sp_distill_info {
    int n_embd, top_k;
    int32_t tap_layers[3];
    uint32_t n_seqs;
    uint64_t n_tokens;
    char fingerprint[17];            /* of the target that made it */
    uint64_t recipe;                 /* sp_distill_recipe of the options that made it (0: unknown) */
} sp_distill_info;

typedef struct sp_distill_seq {
    int n;                           /* tokens */
    int loss_from;                   /* rows before it (a prompt) carry no loss */
    const int32_t *tokens;           /* (n) */
    const int32_t *ids;              /* (n, top_k) the target's most likely next tokens */
    const uint16_t *probs;           /* (n, top_k) their probabilities, f16 */
    const uint16_t *taps;            /* (n, 3, n_embd) bf16 */
} sp_distill_seq;

typedef struct sp_distill sp_distill;
/* Maps a data file and checks every record fits (untrusted input). */
sp_distill *sp_distill_open(const char *path, sp_err *err);
void sp_distill_close(sp_distill *ds);
const sp_distill_info *sp_distill_info_of(const sp_distill *ds);
/* Sequence i (< n_seqs), pointers into the mapping. */
void sp_distill_get(const sp_distill *ds, uint32_t i, sp_distill_seq *out);

/* ------------------------------------------------------------------------
 * Training an EAGLE-3 draft head (head_train.c) on self-distillation data,
 * with training-time test (the head unrolled ttt_steps steps on its own
 * outputs), soft targets over a draft vocabulary of the data's most
 * frequent tokens, AdamW with warmup and cosine decay, clipping,
 * checkpoints; writes the head with sp_head_write.  Deterministic for a
 * seed and thread count.
 * ---------------------------------------------------------------------- */
typedef struct sp_head_train_status {
    int64_t step, total;
    float loss, grad_norm, lr;
    double tokens_per_s, elapsed_s;
    int n_acc;                       /* > 0: a held-out evaluation ran; acc[0..n_acc) */
    double acc[8];                   /* held-out acceptance of a chain of 1, 2, ... drafts */
} sp_head_train_status;

typedef struct sp_head_train_opts {
    int draft_vocab;                 /* N most frequent target tokens */
    int ttt_steps;                   /* unrolled steps (EAGLE-3 uses 7) */
    int seq_len;                     /* tokens per sequence used */
    int batch_seqs;                  /* sequences per optimizer step */
    int epochs;
    float lr, lr_floor, weight_decay, clip;
    int warmup;
    double heldout;                  /* share of sequences held out (at most 64) */
    uint64_t seed;
    int32_t tap_layers[3];
    float min_prob;                  /* written as the head's drafting threshold */
    uint32_t head_type;              /* the written head's matrices (sp_head_write_opts.type) */
    bool norm_residual;              /* the layer's residual starts from the normed fused state
                                        (eagle3.norm_before_residual), not the raw one */
    sp_tr_loss_kind loss;            /* per-row loss (sp_tr_loss); CE by default */
    const char *command;             /* recorded in the head (specula.training) */
    const char *ckpt_path;           /* NULL = no checkpoints */
    int ckpt_every;                  /* optimizer steps between checkpoints */
    const char *resume;              /* a checkpoint to continue from */
    int eval_every;                  /* optimizer steps between held-out evaluations (0 = at the end only) */
    void (*progress)(void *ud, const sp_head_train_status *st);
    void *ud;
} sp_head_train_opts;

sp_head_train_opts sp_head_train_default_opts(void);
int sp_head_train(const sp_model *target, sp_pool *pool, const sp_distill *data, const sp_head_train_opts *o,
                  const char *out_path, sp_err *err);

#endif /* SP_TRAIN_H */

/*
 * specula.h — the public C API of specula: run LLMs from GGUF files on the
 * CPU, with lossless speculative decoding.
 *
 *   pkg-config --cflags --libs specula        (or: -lspecula + its Libs.private)
 *
 * Handles are opaque.  Every *_create / *_load has a matching *_free;
 * pointers passed in are borrowed unless a comment says "copied".
 * Functions that can fail take a `specula_error *` (may be NULL) and
 * return NULL or a negative number, with a message in err->message.
 *
 * A context holds a fixed number of sequence slots and advances every
 * sequence in it by one batched forward pass per specula_step(); a token
 * callback receives each generated token.  Output is exactly what plain
 * decoding gives for the same seed, whatever speculation or batching is
 * used.  A minimal greedy generation with prompt-lookup speculation:
 *
 *     specula_error err;
 *     specula_model *m = specula_model_load("model.gguf", NULL, &err);
 *     specula_ctx *c = specula_ctx_create(m, NULL, &err);
 *     specula_drafter_params dp = specula_drafter_default_params();
 *     dp.method = "ngram";
 *     specula_drafter *d = specula_drafter_create(c, &dp, &err);
 *     int32_t prompt[512];
 *     int n = specula_tokenize(m, text, strlen(text), true, prompt, 512, &err);
 *     specula_seq_params sp = specula_seq_default_params();
 *     sp.prompt = prompt; sp.n_prompt = n; sp.max_tokens = 64;
 *     sp.drafter = d; sp.on_token = print_token; sp.user_data = m;
 *     specula_generate(c, &sp, NULL, NULL, &err);
 *     specula_drafter_free(d); specula_ctx_free(c); specula_model_free(m);
 *
 * Threads: a model may be shared by contexts; a context (and the drafters
 * used in it) by one thread at a time.
 */
#ifndef SPECULA_H
#define SPECULA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on every incompatible change of this header. */
#define SPECULA_API_VERSION 3

/* SPECULA_API_VERSION of the library linked in (check it equals the
 * header's). */
int specula_api_version(void);

typedef struct specula_error {
    char message[512];
} specula_error;

typedef struct specula_model specula_model;
typedef struct specula_ctx specula_ctx;
typedef struct specula_drafter specula_drafter;

/* ==========================================================================
 * Models and tokens
 * ======================================================================= */
typedef struct specula_model_params {
    bool pack_weights;               /* repack quantized matrices for the SIMD kernels (default true) */
} specula_model_params;

specula_model_params specula_model_default_params(void);
/* Loads and validates a GGUF model and its tokenizer (p NULL = defaults). */
specula_model *specula_model_load(const char *path, const specula_model_params *p, specula_error *err);
void specula_model_free(specula_model *m);
const char *specula_model_name(const specula_model *m);
int specula_model_n_vocab(const specula_model *m);
int specula_model_n_ctx_train(const specula_model *m);

/* Tokenizes text[0..len): writes up to cap ids and returns the number of
 * tokens (more than cap means the output was cut: call again with a
 * larger buffer), or -1 + err.  add_bos: as the model expects (specula
 * adds BOS only if the model's tokenizer asks for it).  parse_special:
 * special-token text (e.g. "<|im_start|>") becomes special tokens. */
int specula_tokenize(const specula_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                     int32_t *out, int cap, specula_error *err);
/* The text of tokens[0..n) (special tokens rendered when render_special),
 * NUL-terminated into buf (cut to cap - 1 bytes); returns the full length
 * in bytes, or -1 + err for an out-of-range id. */
int specula_detokenize(const specula_model *m, const int32_t *tokens, int n, bool render_special, char *buf,
                       size_t cap, specula_error *err);
/* True for end-of-generation tokens (EOS, end of turn). */
bool specula_token_is_eog(const specula_model *m, int32_t token);

typedef struct specula_chat_message {
    const char *role;                /* "system", "user", "assistant" */
    const char *content;
} specula_chat_message;

/* Renders a conversation with the model's chat template (its Jinja
 * tokenizer.chat_template; a Gemma file without one gets Gemma's turns)
 * and, with add_assistant, the opening of the assistant's turn.  Writes the
 * text NUL-terminated into buf (cut to cap - 1 bytes); returns its full
 * length, or -1 + err (no template, one that cannot be rendered, a message
 * without role or content, an error the template raises). */
int specula_chat_apply(const specula_model *m, const specula_chat_message *msgs, int n, bool add_assistant,
                       char *buf, size_t cap, specula_error *err);

/* ==========================================================================
 * Contexts
 * ======================================================================= */
typedef struct specula_ctx_params {
    int n_slots;                     /* sequences at once (default 1) */
    int n_ctx;                       /* tokens per sequence (0 = min(4096, trained)) */
    int batch_rows;                  /* rows per forward pass (default 256) */
    int n_threads;                   /* 0 = physical cores */
    const char *cost_cache_dir;      /* where the measured verify cost t(K) is cached
                                        (NULL = measured once per context) */
    size_t cache_bytes;              /* prefix cache: 0 = none (default); else the KV rows of
                                        earlier prompts and answers are kept within this many bytes
                                        (least recently used go first), with drafter states beside
                                        them, and a sequence prefills only what its longest cached
                                        prefix lacks; the output is the same as without */
    bool no_spec_gate;               /* false (default): under the adaptive draft length, steps
                                        with drafting allowed and forbidden are timed against each
                                        other and the slower mode runs only as a probe */
} specula_ctx_params;

specula_ctx_params specula_ctx_default_params(void);
/* A context over m (borrowed: it must outlive the context). */
specula_ctx *specula_ctx_create(specula_model *m, const specula_ctx_params *p, specula_error *err);
/* Frees the context and every sequence still in it. */
void specula_ctx_free(specula_ctx *c);
/* The prefix cache on disk: save writes it (through a temporary file
 * renamed into place); load fills an empty one from a file saved for the
 * same model.  A foreign, truncated or corrupt file is refused (-1 + err)
 * and leaves the cache empty.  Both fail without a cache (cache_bytes 0). */
int specula_cache_save(const specula_ctx *c, const char *path, specula_error *err);
int specula_cache_load(specula_ctx *c, const char *path, specula_error *err);

/* ==========================================================================
 * Drafters: what proposes tokens for the target to verify
 * ======================================================================= */
typedef struct specula_drafter_params {
    const char *method;              /* "ngram", "suffix", "draft", "self", or a combination tried in
                                        order ("suffix,draft") */
    int ngram_min, ngram_max;        /* ngram: suffix lengths matched (0 = 1, 3) */
    int tree_width;                  /* ngram/suffix: token trees of up to this many branches (0 = chains) */
    const char *draft_model;         /* draft: path of the draft model's GGUF */
    const char *self_layers;         /* self: target layers the draft keeps, e.g. "0-14,29" (NULL = default) */
    bool draft_sample;               /* draft/self: sample drafts, verify by speculative sampling */
} specula_drafter_params;

specula_drafter_params specula_drafter_default_params(void);
/* A drafter for the context's model.  It lives until freed and may serve
 * many sequences (one at a time or several in the same context); free it
 * after the sequences that use it are removed. */
specula_drafter *specula_drafter_create(specula_ctx *c, const specula_drafter_params *p, specula_error *err);
void specula_drafter_free(specula_drafter *d);
const char *specula_drafter_name(const specula_drafter *d);

/* ==========================================================================
 * Sequences
 * ======================================================================= */
typedef struct specula_logit_bias {
    int32_t token;
    float bias;                      /* added to the logit; -INFINITY bans the token */
} specula_logit_bias;

typedef struct specula_sampling {
    float temperature;               /* 0 = greedy (default) */
    int top_k;                       /* 0 = off */
    float top_p;                     /* 1 = off */
    float min_p;                     /* 0 = off */
    float repeat_penalty;            /* 1 = off */
    float presence_penalty, frequency_penalty;  /* 0 = off */
    int repeat_last_n;               /* tokens the penalties look at, -1 = all (default 64) */
    uint64_t seed;                   /* the draw at each position is keyed by (seed, position) */
    const specula_logit_bias *bias;  /* (n_bias) copied */
    int n_bias;
} specula_sampling;

/* Called for every generated token, in order.  drafted: the token was a
 * draft the target accepted.  Return true to stop after this token. */
typedef bool (*specula_token_fn)(void *user_data, int32_t token, bool drafted);

#define SPECULA_DRAFT_ADAPTIVE (-1)

typedef struct specula_seq_params {
    const int32_t *prompt;           /* (n_prompt) copied */
    int n_prompt;
    int max_tokens;                  /* default 128 */
    specula_sampling sampling;       /* default greedy */
    bool penalize_prompt;            /* prompt tokens count for the penalties (default false) */
    specula_drafter *drafter;        /* NULL = plain decoding */
    int draft_max;                   /* SPECULA_DRAFT_ADAPTIVE (default), 0 = none, or a fixed length */
    const char *grammar;             /* GBNF (llama.cpp's dialect, start rule "root") the output must
                                        match; NULL = unconstrained (default).  Compiled when the
                                        sequence is added: errors name line and column */
    const char *grammar_trigger;     /* NULL (default): the grammar applies from the first token;
                                        else it applies once the output contains this text (lazy) */
    int forced_spans;                /* under a grammar, verify the tokens it forces as drafts:
                                        -1 = when a drafter is given (default), 0 = never, 1 = always.
                                        The output is the same either way */
    bool cache_prompt;               /* with the context's prefix cache: read and fill it (default
                                        true) */
    specula_token_fn on_token;       /* required */
    void *user_data;
} specula_seq_params;

specula_seq_params specula_seq_default_params(void);

typedef enum specula_finish {
    SPECULA_FINISH_NONE = 0,         /* still running */
    SPECULA_FINISH_STOP,             /* the callback stopped it */
    SPECULA_FINISH_LENGTH,           /* max_tokens */
    SPECULA_FINISH_CONTEXT,          /* the sequence's context is full */
    SPECULA_FINISH_CANCELLED,
    SPECULA_FINISH_ERROR,            /* see specula_seq_error */
} specula_finish;
const char *specula_finish_name(specula_finish f);

typedef struct specula_stats {
    int64_t n_prompt, n_generated;   /* n_prompt: prompt tokens prefilled */
    int64_t n_cached;                /* prompt tokens taken from the prefix cache */
    int64_t rounds;                  /* target passes after prefill */
    int64_t drafted, accepted;       /* draft tokens proposed and accepted */
    int64_t forced_drafted, forced_accepted;  /* of those, forced by the grammar */
    double prefill_seconds, decode_seconds;
} specula_stats;

/* Adds a sequence in a free slot; its prompt is prefilled by the next
 * steps.  Returns its id (>= 0), or -1 + err (no free slot, a prompt that
 * does not fit, bad sampling values, a drafter that cannot serve). */
int specula_seq_add(specula_ctx *c, const specula_seq_params *p, specula_error *err);
/* One batched forward pass for every running sequence of the context;
 * token callbacks run inside.  Returns the sequences still running. */
int specula_step(specula_ctx *c);
/* Ends a running sequence now (SPECULA_FINISH_CANCELLED). */
void specula_seq_cancel(specula_ctx *c, int id);
/* Frees a sequence's slot (running or ended). */
void specula_seq_remove(specula_ctx *c, int id);
specula_finish specula_seq_finish(const specula_ctx *c, int id);
void specula_seq_stats(const specula_ctx *c, int id, specula_stats *out);
/* Why a sequence ended with SPECULA_FINISH_ERROR ("" otherwise). */
const char *specula_seq_error(const specula_ctx *c, int id);

/* GBNF for the JSON values a JSON schema accepts (schema: JSON text of
 * len bytes), to use as specula_seq_params.grammar.  Writes it
 * NUL-terminated into buf (cut to cap - 1 bytes) and returns its full
 * length, or -1 + err naming the schema path of what is invalid or not
 * supported (never a silently dropped constraint). */
long specula_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap, specula_error *err);

/* Adds a sequence, steps until it ends, removes it (other sequences in the
 * context advance too).  stats and finish may be NULL.  0, or -1 + err. */
int specula_generate(specula_ctx *c, const specula_seq_params *p, specula_stats *stats, specula_finish *finish,
                     specula_error *err);

#ifdef __cplusplus
}
#endif

#endif /* SPECULA_H */

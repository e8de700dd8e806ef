/*
 * cli — the `specula` command line: one function per command, plus shared
 * option parsing.  Exit codes: 0 success, 1 runtime failure (bad model file,
 * I/O), 2 usage error (unknown flag, bad value).
 */
#ifndef SP_CLI_H
#define SP_CLI_H

#include "base/base.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sample/sample.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

#define SP_EXIT_FAIL 1
#define SP_EXIT_USAGE 2

int sp_cmd_run(int argc, char **argv);
int sp_cmd_chat(int argc, char **argv);
int sp_cmd_serve(int argc, char **argv);
int sp_cmd_info(int argc, char **argv);
int sp_cmd_perplexity(int argc, char **argv);
int sp_cmd_bench(int argc, char **argv);
int sp_cmd_tune_self(int argc, char **argv);
int sp_cmd_quantize(int argc, char **argv);
int sp_cmd_train_draft(int argc, char **argv);
int sp_cmd_template(int argc, char **argv);

/* ------------------------------------------------------------------------
 * Option parsing helpers (args.c).  Each prints "specula CMD: ..." and
 * returns false on a bad value; callers exit with SP_EXIT_USAGE.
 * ---------------------------------------------------------------------- */
typedef struct sp_args {
    const char *cmd;         /* command name for messages */
    int argc;
    char **argv;
    int i;                   /* index of the current argument */
} sp_args;

/* True if argv[i] is flag (or one of its spellings separated by '|',
 * e.g. "-n|--n-predict"); consumes it. */
bool sp_arg_is(sp_args *a, const char *flags);
/* Consumes and returns the value after the current flag. */
bool sp_arg_str(sp_args *a, const char **out);
bool sp_arg_int(sp_args *a, long lo, long hi, int *out);
bool sp_arg_u64(sp_args *a, uint64_t *out);
bool sp_arg_float(sp_args *a, double lo, double hi, float *out);
/* Prints "unknown option" for argv[i]. */
int sp_arg_unknown(sp_args *a);

/* A command's flags as a table: spellings ("-n|--n-predict"), the kind of
 * value, where it goes and its range. */
typedef enum sp_flag_kind { SP_FLAG_STR, SP_FLAG_INT, SP_FLAG_FLOAT, SP_FLAG_U64, SP_FLAG_SET } sp_flag_kind;
typedef struct sp_flag {
    const char *names;
    sp_flag_kind kind;
    void *dst;               /* const char **, int *, float *, uint64_t *, bool * (SET: set to true) */
    double lo, hi;           /* INT and FLOAT ranges */
} sp_flag;
/* Parses argv[i] if it is one of the table's flags: 1 consumed, 0 not
 * one, -1 bad value (message printed). */
int sp_arg_table(sp_args *a, const sp_flag *flags, int n_flags);
/* The whole of a text file (malloc'd, NUL-terminated); NULL + err when it
 * cannot be read or holds a NUL byte.  what names it in the message. */
char *sp_read_text_file(const char *path, const char *what, sp_err *err);
/* The chat template of --chat-template ARG: a built-in name, else a file
 * of Jinja source; the model's own (or none: *out NULL) when arg is NULL. */
int sp_cli_chat_template(const sp_gguf *g, const sp_tokenizer *t, const char *arg, sp_chat_tmpl **out,
                         sp_err *err);
int sp_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------
 * Models by name or path (models.c)
 * ---------------------------------------------------------------------- */
/* Resolves "smollm2-135m" / "gemma3-270m" to the cached file, or returns the
 * argument as a path.  Writes the path to buf.  On a missing file, err says
 * how to fetch it. */
int sp_resolve_model(const char *name_or_path, char *buf, size_t cap, sp_err *err);
const char *sp_default_model(void);

/* Common engine options shared by run / perplexity / bench / serve. */
typedef struct sp_engine_opts {
    const char *model;
    int threads;             /* 0 = physical cores */
    int ctx;                 /* context size in tokens per slot (0 = min(4096, trained)) */
    int batch;               /* max rows per forward pass (prefill chunk) */
    int slots;               /* sequences at once (0 = 1; serve: --parallel) */
    int cache_mib;           /* prefix cache in MiB (0 = none, -1 = unbounded; serve: --cache-ram) */
    sp_kv_types kv;          /* --cache-type-k/-v, --kv-quant-start (zeroed = all F16) */
    bool kv_set;
    bool no_spec_gate;       /* --no-spec-gate: the adaptive length drafts ungated */
} sp_engine_opts;
/* Parses one common option at a->i if it is one; returns 1 consumed,
 * 0 not a common option, -1 bad value. */
int sp_engine_opt(sp_args *a, sp_engine_opts *o);
#define SP_ENGINE_OPTS_HELP \
    "  -m, --model NAME|PATH   model: smollm2-135m, gemma3-270m or a GGUF path (default smollm2-135m)\n" \
    "  -t, --threads N         threads (default: physical cores)\n" \
    "  -c, --ctx-size N        context size in tokens (default: min(4096, trained))\n" \
    "  -b, --batch-size N      max tokens per forward pass (default 256)\n" \
    "  -ctk, --cache-type-k T  how the KV cache stores keys: f16 (default), q8_0, q4_0\n" \
    "  -ctv, --cache-type-v T  and values (q8_0 halves the memory per token)\n" \
    "      --kv-quant-start N  layers below N keep F16 keys and values (default 0)\n"

/* Speculation flags shared by run / bench / serve (args.c). */
typedef struct sp_spec_cli {
    int draft_max;               /* > 0, SP_DRAFT_ADAPTIVE (default), 0 = no drafting */
    const char *draft_model;     /* name or path as given */
    sp_drafter_opts d;
} sp_spec_cli;
void sp_spec_cli_init(sp_spec_cli *o);
/* Parses one speculation flag at a->i; 1 consumed, 0 not one, -1 bad value. */
int sp_spec_opt(sp_args *a, sp_spec_cli *o);
#define SP_SPEC_OPTS_HELP \
    "      --draft-max N|adaptive  draft tokens per round (default: adaptive)\n" \
    "      --no-spec-gate      let the adaptive length draft even where whole steps measured\n" \
    "                          slower with drafts than without (default: such steps run plain)\n" \
    "      --ngram-min N, --ngram-max N  suffix n-gram lengths ngram matches (default 1, 3)\n" \
    "      --suffix-factor F   suffix: draft at most F x match length tokens (default 1)\n" \
    "      --suffix-min-prob P suffix: drop draft tokens below this estimated probability (default 0.1)\n" \
    "      --suffix-max-depth N  suffix: depth of the suffix trie (default 64)\n" \
    "      --tree-width W      ngram/suffix: propose a token tree of up to W branches; eagle: up\n" \
    "                          to W candidates for the first draft token (default 1)\n" \
    "      --draft-model M     draft: the draft model (name or GGUF path; other vocabularies\n" \
    "                          are bridged through text)\n" \
    "      --draft-sample      draft/self/eagle: sample drafts and verify by speculative sampling\n" \
    "      --draft-min-prob P  draft/self/eagle: stop drafting below this draft probability\n" \
    "      --self-layers LIST  self: target layers the draft keeps, e.g. 0-14,29\n" \
    "      --draft-head PATH   eagle: the EAGLE-3 draft head (GGUF, trained for this model)\n"

/* What a command opens: a model, its tokenizer and a batch-engine context
 * over them (src/engine; pool and ws are the context's, borrowed). */
typedef struct sp_engine {
    sp_model *model;
    sp_tokenizer *tok;
    sp_ctx *ctx;
    sp_pool *pool;
    sp_workspace *ws;
    int n_ctx;
    int threads;
} sp_engine;
int sp_engine_open(const sp_engine_opts *o, sp_engine *e, sp_err *err);
void sp_engine_close(sp_engine *e);
/* A prompt of a JSONL bench set, rendered with the model's chat template
 * and tokenized (bench.c). */
typedef struct sp_bench_prompt {
    char *id, *category;
    sp_tokens toks;
    int max_tokens;
    sp_grammar *grammar;             /* from the line's "json_schema" or "grammar"; NULL = none */
} sp_bench_prompt;
int sp_bench_load(const char *path, const sp_engine *e, int limit, sp_bench_prompt **out, int *n,
                  sp_err *err);
void sp_bench_free(sp_bench_prompt *ps, int n);
/* Where tune-self saves a model's self-speculation layers. */
void sp_self_cache_path(const sp_model *m, char *buf, size_t cap);

/* Creates the drafter for a --spec / --methods name with the engine's
 * target and pool (model names of --draft-model resolved). */
sp_drafter *sp_engine_drafter(const sp_engine *e, const char *method, const sp_spec_cli *o, sp_err *err);
/* The EAGLE head --spec eagle would use (--draft-head, else the shipped
 * one for a known model), or NULL. */
const char *sp_engine_head(const sp_engine *e, const sp_spec_cli *o, char *buf, size_t cap);

/* The engine's prefix cache on disk (prompt_cache.c).  Load: fills it
 * from path when the file exists; a foreign, truncated or corrupt file is
 * ignored with a warning on stderr (the cache stays empty).  Save: writes
 * it (a warning on failure).  Both do nothing without a cache. */
void sp_engine_cache_load(const sp_engine *e, const char *path, const char *cmd);
void sp_engine_cache_save(const sp_engine *e, const char *path, const char *cmd);
/* The file --cache-dir DIR keeps the cache of this model in:
 * DIR/prefix-<fingerprint>.spcache (DIR created when missing).  -1 + err
 * when it cannot be made. */
int sp_engine_cache_file(const sp_engine *e, const char *dir, char *buf, size_t cap, sp_err *err);

#endif /* SP_CLI_H */

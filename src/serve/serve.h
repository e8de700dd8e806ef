/*
 * serve — an OpenAI-compatible HTTP server that runs many requests as rows
 * of one batched target forward per step, with speculation in every row.
 *
 *   HTTP thread per connection (libmicrohttpd)
 *     parse + validate the JSON body (parse.c)     -> 400 / 404 / 413 / 401
 *     render the chat template, tokenize           -> 400 on context overflow
 *     submit a job to the scheduler (sched.c)      -> 503 + Retry-After when full
 *     wait for its output: one JSON answer, or SSE chunks as tokens come
 *   scheduler thread (sched.c), the only user of the engine context
 *     between steps: drop cancelled jobs, admit queued ones into free slots
 *       (sp_ctx_add: the job's sequence with its own sampler and draft)
 *     one step: sp_ctx_step (every decoding sequence's verification window
 *       plus prompt chunks of prefilling ones in ONE batched forward); the
 *       accept walks emit tokens into the jobs: stop strings, logprobs,
 *       text for the HTTP thread
 *     after it: jobs whose sequence ended are finished, their slots freed
 *
 * The context keeps each sequence's output what it would be alone, at any
 * temperature (see engine.h).
 *
 * Threads: sp_server_* may be called from one controlling thread; the
 * server runs its own threads.  Everything borrowed (the context with its
 * model and tokenizer, the drafters) must outlive the server.
 */
#ifndef SP_SERVE_H
#define SP_SERVE_H

#include "base/base.h"
#include "cache/cache.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "speculative/speculative.h"
#include "tokenizer/tokenizer.h"

/* ==========================================================================
 * API errors: what the client receives as
 *   {"error": {"message", "type", "param", "code"}} with HTTP status.
 * ======================================================================= */
typedef struct sp_api_err {
    int status;                      /* HTTP status: 400, 401, 404, 413, 500, 503 */
    const char *type;                /* "invalid_request_error", "server_error", ... (static) */
    const char *code;                /* "context_length_exceeded", ... or NULL (static) */
    char param[64];                  /* the offending field ("" = none) */
    char message[512];
} sp_api_err;

/* Sets every field; returns -1 so callers can `return sp_api_fail(...)`. */
int sp_api_fail(sp_api_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The common case: a 400 invalid_request_error about one parameter. */
int sp_api_bad(sp_api_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ==========================================================================
 * Requests (parse.c): the JSON body of /v1/chat/completions and
 * /v1/completions, validated into plain C.  Unknown fields are ignored (as
 * the OpenAI API does); a known field of the wrong type or out of range is
 * a 400 naming the field.
 * ======================================================================= */
typedef enum sp_api_kind { SP_API_CHAT = 0, SP_API_COMPLETION = 1 } sp_api_kind;

#define SP_REQ_MAX_STOPS 16
#define SP_REQ_MAX_STOP_LEN 512
#define SP_REQ_MAX_TOP_LOGPROBS 20

#define SP_REQ_MAX_TOOLS 128
#define SP_REQ_MAX_TOOL_NAME 64

/* response_format.type */
typedef enum sp_rf_type { SP_RF_TEXT = 0, SP_RF_JSON_OBJECT, SP_RF_JSON_SCHEMA } sp_rf_type;
/* tool_choice */
typedef enum sp_tool_choice { SP_TC_AUTO = 0, SP_TC_NONE, SP_TC_REQUIRED, SP_TC_NAMED } sp_tool_choice;

/* One entry of "tools" (type "function"). */
typedef struct sp_req_tool {
    char *name;                      /* [a-zA-Z0-9_-]{1,64} */
    char *description;               /* NULL = none */
    char *parameters;                /* its JSON schema as JSON text ({"type":"object","properties":{}}
                                        when absent) */
} sp_req_tool;

typedef struct sp_req {
    sp_api_kind kind;
    char *model;                     /* NULL = not given */
    /* chat: messages (role and content owned; "developer" becomes "system") */
    sp_chat_msg *msgs;
    int n_msgs;
    /* completion: a text prompt, or token ids */
    char *prompt;
    int32_t *prompt_ids;
    int n_prompt_ids;
    int max_tokens;                  /* -1 = not given */
    sp_sampler_params sampling;      /* OpenAI defaults: temperature 1, top_p 1, no top-k/min-p */
    sp_logit_bias *bias;             /* (n_bias) owned; sampling.bias points here */
    bool seed_set;
    char *stops[SP_REQ_MAX_STOPS];   /* owned */
    int n_stops;
    bool stream, include_usage;
    bool logprobs;
    int top_logprobs;                /* alternatives per position, 0..20 */
    bool ignore_eos;                 /* extension (vLLM's name) */
    bool no_cache;                   /* "cache_prompt": false (llama-server's name): this request
                                        neither reads nor fills the prefix cache */
    /* "speculative": {"method": "none|ngram|suffix", "draft_max": N|"adaptive"} */
    char method[32];                 /* "" = server default */
    int draft_max;                   /* SP_DRAFT_ADAPTIVE, 0..SP_MAX_DRAFT; -2 = server default */
    /* constrained output (see tools.c for the conventions): "grammar" (GBNF
     * text, llama.cpp's field), "response_format", and on chat "tools",
     * "tool_choice", "parallel_tool_calls".  Compiled by sp_req_constrain. */
    char *grammar;                   /* NULL = none */
    sp_rf_type rf;
    char *rf_schema;                 /* json_schema.schema as JSON text (SP_RF_JSON_SCHEMA) */
    sp_req_tool *tools;              /* (n_tools) owned */
    int n_tools;
    sp_tool_choice tool_choice;      /* AUTO when tools are given, else NONE */
    int tool_named;                  /* SP_TC_NAMED: index into tools */
    bool parallel_tool_calls;        /* default true */
    char *tools_system;              /* the tools as system-prompt text (NULL = not rendered:
                                        no tools, or tool_choice "none") */
} sp_req;

#define SP_REQ_DRAFT_DEFAULT (-2)

/* Parses body[0..len) as a request of the given kind.  n_vocab bounds
 * logit_bias keys and prompt token ids.  On error *r is left empty (no
 * need to free) and err holds the 400 to send. */
int sp_req_parse(sp_api_kind kind, const char *body, size_t len, int n_vocab, sp_req *r,
                 sp_api_err *err);
/* The same with the server's defaults for the sampling fields a request
 * omits (NULL = sp_serve_sampling_defaults(), which sp_req_parse uses). */
int sp_req_parse_with(sp_api_kind kind, const char *body, size_t len, int n_vocab,
                      const sp_sampler_params *defaults, sp_req *r, sp_api_err *err);
void sp_req_free(sp_req *r);

/* Tools are rendered and the output is parsed for tool calls. */
static inline bool sp_req_uses_tools(const sp_req *r) { return r->tools_system != NULL; }

/* ==========================================================================
 * Metrics (metrics.c): counters, gauges and histograms in Prometheus text
 * format.  Thread-safe.
 * ======================================================================= */
typedef struct sp_metrics sp_metrics;
sp_metrics *sp_metrics_create(void);
void sp_metrics_free(sp_metrics *mx);
/* An HTTP request answered: endpoint path and status. */
void sp_metrics_http(sp_metrics *mx, const char *endpoint, int status);
/* One scheduler step: sequences and rows in the pass, its duration. */
void sp_metrics_step(sp_metrics *mx, int n_seqs, int n_rows, uint64_t ns);
/* Current queue length and running sequences. */
void sp_metrics_load(sp_metrics *mx, int queued, int running);
/* One generation finished: its method ("none" when plain), statistics,
 * time queued, time to first token, total time (ns; 0 = unknown). */
void sp_metrics_generation(sp_metrics *mx, const char *method, const sp_spec_stats *st,
                           uint64_t queue_ns, uint64_t ttft_ns, uint64_t total_ns,
                           bool cancelled);
/* The prefix cache's statistics now (after a step). */
void sp_metrics_cache(sp_metrics *mx, const sp_pcache_stats *st);
/* Gap between two emitted tokens of one request. */
void sp_metrics_itl(sp_metrics *mx, uint64_t ns);
/* The Prometheus exposition; malloc'd, caller frees. */
char *sp_metrics_render(sp_metrics *mx);

/* ==========================================================================
 * The server
 * ======================================================================= */
typedef struct sp_server_opts {
    const char *host;                /* address to bind (default "127.0.0.1") */
    int port;                        /* 0 = any free port (see sp_server_port) */
    const char *api_key;             /* NULL = no authentication */
    const char *model_id;            /* the id clients name in "model" */
    int queue_max;                   /* waiting requests beyond the slots; more -> 503 */
    size_t max_body;                 /* request body limit in bytes (413 beyond) */
    int timeout_s;                   /* idle connection timeout (while answering) */
    int header_timeout_s;            /* deadline for a request's headers (and the idle time
                                        between keep-alive requests); its body gets this plus
                                        1 s per 16 KiB */
    int max_conns;                   /* open connections; 0 = parallel + queue_max + 64 */
    int max_conns_per_ip;            /* from one address; 0 = max(8, max_conns / 4) */
    int shutdown_timeout_s;          /* running requests get this long to finish */
    bool parse_special;              /* special-token text in prompts and messages becomes
                                        special tokens (default: it stays text) */
    /* speculation defaults and the drafters requests may name (borrowed) */
    const char *spec_default;        /* "none" or a drafter's name */
    int draft_max_default;           /* SP_DRAFT_ADAPTIVE or 0..SP_MAX_DRAFT */
    sp_drafter **drafters;
    int n_drafters;
    /* what a request that omits a sampling field gets (see props.c) */
    sp_sampler_params sampling;
    bool seed_set;                   /* requests without a seed use sampling.seed (else a fresh one) */
    const char *cors_origin;         /* NULL = no CORS headers; else the allowed origin ("*" = any) */
    const char *chat_template;       /* NULL = the model's; else a built-in template's name */
    const char *chat_template_src;   /* Jinja source (of chat_template_file): wins over the name */
    const char *chat_template_file;
} sp_server_opts;

/* Defaults for every field above (drafters none, spec "none", sampling
 * sp_serve_sampling_defaults()). */
sp_server_opts sp_server_defaults(void);

/* llama.cpp's sampling defaults (temperature 0.8, top-k 40, top-p 0.95,
 * min-p 0.05), the server's when neither a flag nor the model says
 * otherwise (props.c). */
sp_sampler_params sp_serve_sampling_defaults(void);
/* Applies the model file's general.sampling.* keys (temp, top_k, top_p,
 * min_p, penalty_repeat, penalty_last_n) to p.  -1 when a key is present but
 * unusable (wrong type or out of range): it is skipped and warn says
 * which. */
int sp_serve_sampling_from_gguf(const sp_gguf *g, sp_sampler_params *p, char *warn, size_t cap);

typedef struct sp_server sp_server;

/* Binds and starts serving (HTTP threads and the scheduler) over a batch
 * engine context: one request per slot (its slots are the parallel
 * requests, its n_ctx each request's context, its row budget the step's).
 * ctx is borrowed and, until sp_server_stop, used only by the scheduler
 * thread.  NULL + err if the address cannot be bound or options are bad. */
sp_server *sp_server_start(sp_ctx *ctx, const sp_server_opts *o, sp_err *err);
/* The bound port (useful with port 0). */
int sp_server_port(const sp_server *s);
/* Graceful stop: stop accepting, fail queued requests (503), let running
 * ones finish for up to shutdown_timeout_s (then cancel them), wait for
 * the connections to close, free everything. */
void sp_server_stop(sp_server *s);

#endif /* SP_SERVE_H */

/*
 * serve internals shared by its files: jobs (one generation and the channel
 * its text flows through), the scheduler, and the JSON of responses.
 */
#ifndef SP_SERVE_INTERNAL_H
#define SP_SERVE_INTERNAL_H

#include "engine/engine.h"
#include "serve/serve.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ==========================================================================
 * Jobs (job.c)
 *
 * A job is one generation.  The HTTP thread creates it (prompt, sampler,
 * stop strings, draft: everything that can fail with a 400 fails there),
 * the scheduler thread runs it in a slot, and its output — released text,
 * logprob entries, the finish — flows back through a mutex-protected
 * channel that the HTTP thread drains with sp_job_take.  Reference counted:
 * the creator holds one reference, the scheduler one while it knows it.
 * ======================================================================= */

typedef struct sp_lp_alt {
    int32_t id;
    float lp;
} sp_lp_alt;

/* The log-probability of an emitted token under the target's raw
 * distribution (log-softmax of its logits, before any sampler transform),
 * with the most likely alternatives. */
typedef struct sp_lp_entry {
    int32_t token;
    float lp;
    size_t offset;                   /* byte offset of its text in the output */
    int n_top;
    sp_lp_alt top[SP_REQ_MAX_TOP_LOGPROBS];
} sp_lp_entry;

typedef struct sp_job_cfg {
    const sp_model *m;
    const sp_tokenizer *tok;
    const int32_t *prompt;           /* (n_prompt) copied */
    int n_prompt;
    int max_tokens;
    const sp_sampler_params *sampling; /* copied (bias included) */
    char *const *stops;              /* copied */
    int n_stops;
    bool logprobs;
    int top_logprobs;
    bool ignore_eos;
    bool no_cache;                   /* bypass the prefix cache */
    sp_drafter *drafter;             /* NULL = plain decoding (borrowed) */
    int draft_max;                   /* SP_DRAFT_ADAPTIVE, 0, or fixed */
    sp_metrics *mx;                  /* borrowed, may be NULL */
    sp_grammar *grammar;             /* NULL = unconstrained; the job owns it from sp_job_create
                                        on (freed after its sequence is removed, or on failure) */
    const char *grammar_trigger;     /* NULL, or the text that switches it on (copied) */
} sp_job_cfg;

typedef enum sp_job_end {
    SP_JOB_RUNNING = 0,
    SP_JOB_FINISHED,                 /* finish says why */
    SP_JOB_CANCELLED,                /* the client went away */
    SP_JOB_FAILED,                   /* err says why */
} sp_job_end;

typedef struct sp_job sp_job;

/* NULL + err (a 400) if a stop string is unusable. */
sp_job *sp_job_create(const sp_job_cfg *c, sp_api_err *err);
void sp_job_ref(sp_job *j);
void sp_job_unref(sp_job *j);
/* The method the job speculates with ("none" for plain decoding). */
const char *sp_job_method(const sp_job *j);
int sp_job_n_prompt(const sp_job *j);
/* The job's output is constrained by a grammar. */
bool sp_job_constrained(const sp_job *j);

/* A run of released text whose bytes all came from accepted draft tokens
 * (drafted) or all from tokens the target chose itself.  Bytes belong to
 * the token whose detokenization released them (a character split over
 * two tokens belongs to the one that completed it; bytes flushed at the
 * end belong to the target).  tokens counts the tokens whose text starts
 * in this run (a token that released no text of its own is not counted). */
typedef struct sp_text_seg {
    size_t len;                      /* bytes */
    bool drafted;
    int tokens;
} sp_text_seg;

/* What the consumer drains.  text, segs and lps are malloc'd (caller frees
 * with sp_job_delta_free); segs cover text exactly (their lengths sum to
 * n_text, neighbours differ in drafted); lps holds only entries whose text
 * was released (or, once the job ended, every entry that belongs to the
 * final text). */
typedef struct sp_job_delta {
    char *text;
    size_t n_text;
    sp_text_seg *segs;
    int n_segs;
    sp_lp_entry *lps;
    int n_lps;
    sp_job_end end;                  /* != RUNNING: nothing will follow */
    sp_finish finish;
    sp_api_err err;                  /* when FAILED */
    sp_spec_stats stats;             /* when ended */
    int n_drafted_emitted;           /* emitted tokens that were accepted drafts */
} sp_job_delta;

/* Waits up to timeout_ms for output (or the end); returns true if there is
 * something to take. */
bool sp_job_wait(sp_job *j, int timeout_ms);
/* Moves the pending output into d (d is overwritten). */
void sp_job_take(sp_job *j, sp_job_delta *d);
void sp_job_delta_free(sp_job_delta *d);
/* The client is gone: the scheduler drops the job before its next step. */
void sp_job_cancel(sp_job *j);
bool sp_job_cancelled(const sp_job *j);

/* Scheduler side (scheduler thread only). */
/* Adds the job's sequence to the context (its draft opens there, prefill
 * starts with the next step); returns the slot id or -1 + err. */
int sp_job_start(sp_job *j, sp_ctx *ctx, sp_err *err);
/* The job's sequence ended normally (stop, length, context): releases the
 * last text and ends the job with the sequence's statistics. */
void sp_job_finish(sp_job *j, sp_finish finish, const sp_spec_stats *stats);
/* Ends the job as FAILED or CANCELLED (stats: the sequence's so far, NULL
 * if it never started). */
void sp_job_end_with(sp_job *j, sp_job_end end, const sp_api_err *err, const sp_spec_stats *stats);
uint64_t sp_job_t_submit(const sp_job *j);
void sp_job_set_t_submit(sp_job *j, uint64_t t);

/* ==========================================================================
 * Scheduler (sched.c)
 * ======================================================================= */
typedef struct sp_sched sp_sched;

/* Starts the scheduler thread over ctx (borrowed: only that thread uses it
 * from now on; one job per slot), with up to queue_max jobs waiting. */
sp_sched *sp_sched_create(sp_ctx *ctx, int queue_max, sp_metrics *mx);
/* Queues the job (takes a reference).  A 503 in err when the queue is full
 * or the scheduler is stopping. */
int sp_sched_submit(sp_sched *s, sp_job *j, sp_api_err *err);
/* Wakes the scheduler (a job was cancelled). */
void sp_sched_kick(sp_sched *s);
/* Stops: queued jobs fail with 503, running ones get grace_ns to finish,
 * then are cancelled; joins the thread.  Idempotent. */
void sp_sched_stop(sp_sched *s, uint64_t grace_ns);
void sp_sched_free(sp_sched *s);
void sp_sched_load(sp_sched *s, int *queued, int *running);

/* ==========================================================================
 * The gate (gate.c): our accept loop in front of libmicrohttpd, which
 * has no deadlines and resets connections beyond its limit.  Deadlines,
 * a total and a per-address connection cap, a 503 beyond them.
 * ======================================================================= */
struct MHD_Daemon;
struct MHD_Connection;
struct sockaddr;
typedef struct sp_gate sp_gate;

/* A body must arrive at least this fast (bytes/s) on top of the header
 * timeout: 1 MiB gets 64 s more. */
#define SP_GATE_MIN_BODY_RATE 16384

typedef struct sp_gate_opts {
    int max_conns;                   /* open connections in all */
    int max_per_ip;                  /* open connections from one address */
    int header_timeout_s;            /* headers (and keep-alive idle) deadline */
} sp_gate_opts;

sp_gate *sp_gate_create(const sp_gate_opts *o, sp_metrics *mx);
/* Binds and listens (nonblocking); *port: the bound port. */
int sp_gate_listen(sp_gate *g, const struct sockaddr *addr, unsigned len, int *port, sp_err *err);
/* Starts the accept thread, which hands connections to d (started with
 * MHD_USE_NO_LISTEN_SOCKET and sp_gate_notify as its connection notifier). */
int sp_gate_run(sp_gate *g, struct MHD_Daemon *d);
/* MHD's connection notifier (cls = the gate; closed: CLOSED, else STARTED). */
void sp_gate_notify(void *cls, struct MHD_Connection *c, void **socket_context, int closed);
/* Sets the connection's deadline (sp_now_ns time; 0 = none). */
void sp_gate_deadline(struct MHD_Connection *c, uint64_t deadline_ns);
uint64_t sp_gate_header_deadline(const sp_gate *g);
/* When a body of bytes whose headers ended at t_headers must be complete. */
uint64_t sp_gate_body_deadline(const sp_gate *g, uint64_t t_headers, uint64_t bytes);
/* Stops accepting and closes the listening socket (returns once closed). */
void sp_gate_quiesce(sp_gate *g);
/* After MHD_stop_daemon: joins the thread, frees. */
void sp_gate_free(sp_gate *g);

/* ==========================================================================
 * Tool calls (tools.c): request fields, messages, and the calls parsed out
 * of the output (the conventions are described at the top of tools.c)
 * ======================================================================= */

/* A growing NUL-terminated byte string. */
typedef struct sp_tbuf {
    char *s;
    size_t n, cap;
} sp_tbuf;
static inline void sp_tbuf_put(sp_tbuf *b, const char *s, size_t n) {
    SP_VEC_GROW(b->s, b->cap, b->n + n + 1);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static inline void sp_tbuf_puts(sp_tbuf *b, const char *s) { sp_tbuf_put(b, s, strlen(s)); }
static inline void sp_tbuf_free(sp_tbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

/* s[0..n) is a function name: [a-zA-Z0-9_-]{1,64}. */
bool sp_tools_name_ok(const char *s, size_t n);
/* Reads "tools", "tool_choice", "parallel_tool_calls" of the request
 * object o into r (and r->tools_system); 0 or -1 + a 400 in e. */
int sp_tools_parse(json_t *o, sp_req *r, sp_api_err *e);
/* messages[i] has role "tool": checks its tool_call_id (0 or -1 + 400). */
int sp_tools_tool_msg(json_t *m, size_t i, sp_api_err *e);
/* A tool result's content as a <tool_response> block (malloc'd). */
char *sp_tools_response_block(const char *content);
/* messages[i] is an assistant message: appends its tool_calls (if any) to
 * *content (malloc'd, replaced) as <tool_call> blocks; 0 or -1 + 400. */
int sp_tools_assistant(json_t *m, size_t i, char **content, sp_api_err *e);
/* The messages with the tools block in the system message: the client's
 * system message, else the template's default system prompt (defsys, may be
 * NULL), then block.  Returns a new array (*n_out entries, caller frees;
 * the other entries borrow from msgs) and the new system text in *owned
 * (caller frees). */
sp_chat_msg *sp_tools_with_system(const sp_chat_msg *msgs, int n, const char *block, const char *defsys,
                                  int *n_out, char **owned);

/* The output parser: fed the generated text piece by piece, it gives the
 * content and tool-call events a stream sends, and keeps the calls. */
typedef enum sp_tc_kind {
    SP_TC_TEXT,                      /* content text */
    SP_TC_START,                     /* call `index` begins: text = its name */
    SP_TC_ARGS,                      /* a fragment of call `index`'s arguments */
} sp_tc_kind;

typedef struct sp_tc_event {
    sp_tc_kind kind;
    int index;
    char *text;                      /* owned, NUL-terminated */
    size_t n;
} sp_tc_event;

typedef struct sp_tc_out {
    sp_tc_event *ev;
    int n_ev, cap_ev;
} sp_tc_out;
void sp_tc_out_free(sp_tc_out *o);

typedef struct sp_tc_call {
    char id[40];
    char name[SP_REQ_MAX_TOOL_NAME + 1];
    char *args;                      /* the arguments' JSON text (owned) */
    size_t n_args;
    char *raw;                       /* the block's text, <tool_call> to </tool_call> (owned) */
    size_t n_raw;
    size_t at;                       /* content bytes before the block */
    bool announced;                  /* its START event went out */
    bool closed, valid;              /* valid: complete, arguments a JSON object */
} sp_tc_call;

typedef enum sp_tc_state { SP_TC_ST_TEXT, SP_TC_ST_HEAD, SP_TC_ST_ARGS, SP_TC_ST_RAW } sp_tc_state;

typedef struct sp_tcparse {
    uint64_t seed;                   /* call ids */
    sp_tc_state st;
    sp_tbuf buf;                     /* text not yet decided (held back) */
    size_t head, emitted;            /* SP_TC_ST_ARGS: the head's length in buf, argument bytes given out */
    sp_tbuf content;                 /* every TEXT event's text */
    sp_tbuf gap;                     /* whitespace before a block, held */
    sp_tc_call *calls;
    int n_calls, cap_calls;
} sp_tcparse;

void sp_tc_init(sp_tcparse *p, uint64_t seed);
void sp_tc_free(sp_tcparse *p);
/* Appends the events the text n bytes decides to o. */
void sp_tc_feed(sp_tcparse *p, const char *text, size_t n, sp_tc_out *o);
/* The end of the output: flushes what was held back. */
void sp_tc_finish(sp_tcparse *p, sp_tc_out *o);
/* Calls that are complete with a JSON object as arguments. */
int sp_tc_n_valid(const sp_tcparse *p);
/* After sp_tc_finish, a whole response's content: the TEXT events with the
 * text of every invalid call put back where it was (malloc'd). */
char *sp_tc_content(const sp_tcparse *p, size_t *n);

/* ==========================================================================
 * Constrained output (constrain.c): the request's grammar, compiled
 * ======================================================================= */

/* The GBNF of the tool calls the request allows (tool_choice required or
 * named: the whole output; lazy: what follows the trigger "<tool_call>";
 * with a response_format, either calls or that JSON).  malloc'd, or NULL +
 * a 400 naming the schema path in e. */
char *sp_tools_gbnf(const sp_req *r, bool lazy, sp_api_err *e);
/* Compiles the request's constraint: *g NULL when there is none, else a
 * grammar the caller owns, and *trigger (static, or NULL) for a lazy one.
 * 0, or -1 + a 400 naming the field and position or schema path. */
int sp_req_constrain(const sp_req *r, sp_grammar **g, const char **trigger, sp_api_err *e);

/* ==========================================================================
 * Response JSON (api.c)
 * ======================================================================= */

/* A JSON string from bytes that may not be valid UTF-8 (invalid sequences
 * become U+FFFD). */
json_t *sp_json_text(const char *s, size_t n);
/* {"error": {...}} */
json_t *sp_api_error_json(const sp_api_err *e);

/* What every response of one request shares. */
typedef struct sp_resp_ctx {
    sp_api_kind kind;
    char id[48];
    long long created;
    const char *model;               /* borrowed */
    const sp_tokenizer *tok;         /* for logprob token texts */
    bool logprobs;
    int top_logprobs;
    const char *method;              /* speculation method name */
    int n_prompt;
    bool tools;                      /* the output is parsed for tool calls (chat) */
} sp_resp_ctx;

/* The whole (non-streamed) response. */
json_t *sp_api_response(const sp_resp_ctx *c, const char *text, size_t n_text,
                        const sp_lp_entry *lps, int n_lps, const sp_job_delta *end);
/* One streamed chunk: text and logprobs, or (finish != NONE) the last
 * choice chunk, or the role chunk (role_only, chat). */
json_t *sp_api_chunk(const sp_resp_ctx *c, const char *text, size_t n_text, const sp_lp_entry *lps,
                     int n_lps, const char *finish_reason, bool role_only);
/* Adds the drafted marks of a streamed chunk's text (segs cover
 * text[0..n_text) as sp_job_take made them) as the extension
 *   "specula": {"segments": [{"text": "...", "drafted": true, "tokens": 3}, ...]}
 * whose texts join to the chunk's content (boundaries inside a UTF-8
 * character move to its end, so each text is the same JSON text the
 * content has).  Nothing is added when there is no text. */
void sp_api_chunk_marks(json_t *chunk, const char *text, size_t n_text, const sp_text_seg *segs,
                        int n_segs);
/* The usage object, with the speculation summary. */
json_t *sp_api_usage(const sp_resp_ctx *c, const sp_job_delta *end);
/* The usage chunk of a stream (stream_options.include_usage). */
json_t *sp_api_usage_chunk(const sp_resp_ctx *c, const sp_job_delta *end);
const char *sp_api_finish_reason(sp_finish f);
/* "tool_calls" when valid calls were made and the generation stopped by
 * itself, else sp_api_finish_reason(f). */
const char *sp_api_finish_reason_calls(sp_finish f, int n_valid_calls);
/* The seed of a response's call ids (from its id). */
uint64_t sp_api_call_seed(const sp_resp_ctx *c);
/* A streamed tool-call delta: a call's start (id, type, name, arguments "")
 * or a fragment of its arguments. */
json_t *sp_api_tool_chunk(const sp_resp_ctx *c, const sp_tcparse *p, const sp_tc_event *ev);

/* ==========================================================================
 * The chat page (page.S embeds page.html): served at GET /
 * ======================================================================= */
extern const char sp_serve_page_html[];      /* the bytes of page.html, NUL-terminated */
extern const char sp_serve_page_html_end[];  /* one past the NUL */

/* GET /props: the default generation settings, slots, model alias, chat
 * template name, speculation default (props.c). */
json_t *sp_serve_props(const sp_server_opts *o, int n_ctx, int n_slots, const char *chat_template);

#endif /* SP_SERVE_INTERNAL_H */

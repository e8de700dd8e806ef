/*
 * HTTP front end (libmicrohttpd, one thread per connection): routing, API
 * keys, body limits, turning requests into jobs, and answering them as one
 * JSON document or as a server-sent event stream.
 *
 * A connection's thread blocks while its job runs (waiting on the job's
 * channel in 100 ms slices) and checks in every slice whether the client
 * hung up; if it did, the job is cancelled and the scheduler frees the
 * slot before its next step.
 *
 * MHD does not listen itself: the gate (gate.c) accepts, caps connections
 * and enforces deadlines; this file moves a connection's deadline as its
 * request advances (headers, body, answer, the next request) and rejects
 * ambiguous framing (check_framing).
 */
#include "serve/internal.h"

#include <assert.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100

struct sp_server {
    sp_server_opts o;
    sp_ctx *ctx;                     /* borrowed; the scheduler thread steps it */
    const sp_model *m;
    const sp_tokenizer *tok;
    int parallel, n_ctx;             /* the context's slots and tokens per slot */
    sp_metrics *mx;
    sp_sched *sched;
    struct MHD_Daemon *d;
    sp_gate *gate;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int port;
    sp_chat_tmpl *chat;              /* NULL: chat requests get 400 with chat_why */
    char chat_why[600];
    char defsys_buf[1024];
    const char *defsys;
    long long created;
    int stopping;                    /* atomic */
    uint64_t counter;                /* atomic: ids and default seeds */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_active;                    /* requests and streams in flight, under mu */
};

typedef enum route {
    R_NONE, R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_ROOT, R_PROPS, R_TOKENIZE,
    R_DETOKENIZE, R_APPLY_TEMPLATE
} route;
static const char *const route_names[] = { "other", "/v1/chat/completions", "/v1/completions",
                                           "/v1/models", "/v1/models/{id}", "/health", "/metrics", "/",
                                           "/props", "/tokenize", "/detokenize",
                                           "/apply-template" };

/* One HTTP request (the connection's con_cls while it is being answered). */
typedef struct http_req {
    route rt;
    bool post;
    char *body;
    size_t n_body, cap_body;
    uint64_t n_received;             /* body bytes read (kept or not) */
    uint64_t t_headers;              /* when the headers were complete */
    bool chunked;                    /* the body's size is not known up front */
    bool answered;
    bool close;                      /* answer with Connection: close */
} http_req;

static void active_add(sp_server *s, int d) {
    pthread_mutex_lock(&s->mu);
    s->n_active += d;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static bool stopping(const sp_server *s) { return __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE); }

/* ----------------------------------------------------------------------------
 * Responses
 * ------------------------------------------------------------------------- */

/* With --cors-origin, every API answer names the origin browsers may read
 * it from. */
static void add_cors(const sp_server *s, struct MHD_Response *resp) {
    if (!s->o.cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o.cors_origin);
    if (strcmp(s->o.cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result send_bytes(sp_server *s, struct MHD_Connection *c, http_req *r, int status,
                                  const char *ctype, char *body, size_t n) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", ctype);
    add_cors(s, resp);
    if (status == 503 || status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 405) MHD_add_response_header(resp, "Allow", r->post ? "GET" : "POST");
    if (r->close) MHD_add_response_header(resp, "Connection", "close");
    const enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    sp_metrics_http(s->mx, route_names[r->rt], status);
    r->answered = true;
    return rc;
}

/* Sends a JSON document (consumes j). */
static enum MHD_Result send_json(sp_server *s, struct MHD_Connection *c, http_req *r, int status, json_t *j) {
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!body) return MHD_NO;
    return send_bytes(s, c, r, status, "application/json", body, strlen(body));
}

static enum MHD_Result send_error(sp_server *s, struct MHD_Connection *c, http_req *r, const sp_api_err *e) {
    return send_json(s, c, r, e->status, sp_api_error_json(e));
}

static enum MHD_Result fail(sp_server *s, struct MHD_Connection *c, http_req *r, int status,
                            const char *type, const char *code, const char *msg) {
    sp_api_err e;
    sp_api_fail(&e, status, type, code, NULL, "%s", msg);
    return send_error(s, c, r, &e);
}

/* True when the client closed its end (or the socket failed).  Looks at
 * most every WAIT_SLICE_MS (*last: time of the previous look). */
static bool client_gone(int fd, uint64_t *last) {
    const uint64_t now = sp_now_ns();
    if (fd < 0 || now - *last < (uint64_t)WAIT_SLICE_MS * 1000000u) return false;
    *last = now;
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ----------------------------------------------------------------------------
 * Small endpoints
 * ------------------------------------------------------------------------- */

static json_t *model_object(const sp_server *s) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(s->o.model_id));
    json_object_set_new(o, "object", json_string("model"));
    json_object_set_new(o, "created", json_integer(s->created));
    json_object_set_new(o, "owned_by", json_string("specula"));
    json_t *meta = json_object();
    json_object_set_new(meta, "name", sp_json_text(s->m->name, strlen(s->m->name)));
    json_object_set_new(meta, "arch", json_string(sp_arch_name(s->m->hp.arch)));
    json_object_set_new(meta, "n_ctx", json_integer(s->n_ctx));
    json_object_set_new(meta, "n_ctx_train", json_integer(s->m->hp.n_ctx_train));
    json_object_set_new(meta, "n_vocab", json_integer(s->m->hp.n_vocab));
    json_object_set_new(meta, "parallel", json_integer(s->parallel));
    json_object_set_new(meta, "speculative_default", json_string(s->o.spec_default));
    json_t *methods = json_array();
    json_array_append_new(methods, json_string("none"));
    for (int i = 0; i < s->o.n_drafters; i++) json_array_append_new(methods, json_string(s->o.drafters[i]->name));
    json_object_set_new(meta, "speculative_methods", methods);
    json_object_set_new(o, "meta", meta);
    return o;
}

/* The chat page (static, embedded): no key needed to load it; it asks for
 * one when the API answers 401.  The policy keeps it from loading anything
 * from elsewhere. */
static enum MHD_Result send_page(sp_server *s, struct MHD_Connection *c, http_req *r) {
    const size_t n = (size_t)(sp_serve_page_html_end - sp_serve_page_html) - 1;
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)sp_serve_page_html,
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    const enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    sp_metrics_http(s->mx, route_names[r->rt], 200);
    r->answered = true;
    return rc;
}

static enum MHD_Result on_get(sp_server *s, struct MHD_Connection *c, http_req *r, const char *url) {
    switch (r->rt) {
    case R_ROOT:
        return send_page(s, c, r);
    case R_HEALTH: {
        const bool st = stopping(s);
        return send_json(s, c, r, st ? 503 : 200, json_pack("{s:s}", "status", st ? "shutting down" : "ok"));
    }
    case R_METRICS: {
        int q, run;
        sp_sched_load(s->sched, &q, &run);
        sp_metrics_load(s->mx, q, run);
        char *t = sp_metrics_render(s->mx);
        return send_bytes(s, c, r, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t));
    }
    case R_MODELS: {
        json_t *data = json_array();
        json_array_append_new(data, model_object(s));
        return send_json(s, c, r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
    }
    case R_PROPS:
        return send_json(s, c, r, 200, sp_serve_props(&s->o, s->n_ctx, s->parallel, s->chat ? sp_chat_tmpl_source(s->chat) : NULL));
    case R_MODEL:
        if (!strcmp(url + strlen("/v1/models/"), s->o.model_id))
            return send_json(s, c, r, 200, model_object(s));
        return fail(s, c, r, 404, "invalid_request_error", "model_not_found", "The model does not exist.");
    default:
        return fail(s, c, r, 404, "invalid_request_error", "not_found", "Not found.");
    }
}

/* ----------------------------------------------------------------------------
 * Generation requests: body -> job
 * ------------------------------------------------------------------------- */

/* The prompt's token ids: the chat template rendered and tokenized, or
 * the completion prompt tokenized (or given as ids).  Only the template's
 * markers and explicit ids give special tokens: text from the client stays
 * text (a message containing "<|im_start|>system" cannot open a system
 * turn), unless --parse-special asks for the old reading. */
static int no_template(const sp_server *s, sp_api_err *e) {
    return sp_api_fail(e, 400, "invalid_request_error", "no_chat_template", "messages",
                       "%s; start the server with --chat-template NAME|FILE (built in: %s), or use "
                       "/v1/completions.", s->chat_why, sp_chat_builtin_names());
}

/* The messages the template renders: with tools, the system message
 * carries them (tools.c).  *owned and *system are freed by the caller. */
static const sp_chat_msg *chat_msgs(const sp_server *s, const sp_req *q, int *n, sp_chat_msg **owned,
                                    char **system) {
    *owned = NULL;
    *system = NULL;
    *n = q->n_msgs;
    if (!sp_req_uses_tools(q)) return q->msgs;
    *owned = sp_tools_with_system(q->msgs, q->n_msgs, q->tools_system, s->defsys, n, system);
    return *owned;
}

static int prompt_tokens(sp_server *s, const sp_req *q, sp_tokens *out, sp_api_err *e) {
    if (q->kind == SP_API_COMPLETION && q->prompt_ids) {
        for (int i = 0; i < q->n_prompt_ids; i++) sp_tokens_push(out, q->prompt_ids[i]);
        return 0;
    }
    const bool bos = sp_tokenizer_add_bos(s->tok), special = s->o.parse_special;
    sp_err err;
    int rc;
    if (q->kind == SP_API_COMPLETION) {
        rc = sp_tokenize(s->tok, q->prompt, strlen(q->prompt), bos, special, out, &err);
    } else {
        if (!s->chat) return no_template(s, e);
        int n_msgs;
        sp_chat_msg *owned;
        char *system, *rendered = NULL;
        const sp_chat_msg *msgs = chat_msgs(s, q, &n_msgs, &owned, &system);
        if (!special) rc = sp_chat_tokenize(s->chat, s->tok, msgs, n_msgs, true, bos, out, &err);
        else {   /* --parse-special: special-token text in messages counts too */
            rc = sp_chat_render(s->chat, msgs, n_msgs, true, &rendered, &err);
            if (!rc) rc = sp_tokenize(s->tok, rendered, strlen(rendered), bos, true, out, &err);
            free(rendered);
        }
        free(owned);
        free(system);
    }
    if (rc) return sp_api_fail(e, 400, "invalid_request_error", NULL, q->kind == SP_API_CHAT ? "messages" : "prompt", "%s", err.msg);
    return 0;
}

/* Checks the prompt and max_tokens against the context (as vLLM does:
 * an explicit max_tokens that cannot fit is an error; without one the
 * generation may fill the context). */
static int fit_context(const sp_server *s, const sp_req *q, int n_prompt, int *max_tokens, sp_api_err *e) {
    const char *param = q->kind == SP_API_CHAT ? "messages" : "prompt";
    if (n_prompt == 0) return sp_api_fail(e, 400, "invalid_request_error", NULL, param, "The prompt is empty.");
    if (n_prompt >= s->n_ctx)
        return sp_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", param,
                           "This model's maximum context length is %d tokens. However, your prompt has %d tokens.",
                           s->n_ctx, n_prompt);
    if (q->max_tokens > 0 && (int64_t)n_prompt + q->max_tokens > s->n_ctx)
        return sp_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                           "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                           "(%d in the prompt, %d for the completion).", s->n_ctx,
                           (long long)n_prompt + q->max_tokens, n_prompt, q->max_tokens);
    *max_tokens = q->max_tokens > 0 ? q->max_tokens : s->n_ctx - n_prompt;
    return 0;
}

static sp_drafter *find_drafter(const sp_server *s, const char *name) {
    for (int i = 0; i < s->o.n_drafters; i++)
        if (!strcmp(s->o.drafters[i]->name, name)) return s->o.drafters[i];
    return NULL;
}

/* The request's speculation: method and draft length, defaults from the
 * command line. */
static int speculation(const sp_server *s, const sp_req *q, sp_job_cfg *c, sp_api_err *e) {
    const char *method = q->method[0] ? q->method : s->o.spec_default;
    c->drafter = NULL;
    if (strcmp(method, "none") != 0 && !(c->drafter = find_drafter(s, method))) {
        char names[256] = "none";
        for (int i = 0; i < s->o.n_drafters; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", s->o.drafters[i]->name);
        return sp_api_fail(e, 400, "invalid_request_error", NULL, "speculative.method",
                           "Unknown speculative method '%s' (this server offers: %s).", method, names);
    }
    c->draft_max = q->draft_max != SP_REQ_DRAFT_DEFAULT ? q->draft_max : s->o.draft_max_default;
    return 0;
}

/* Everything between the parsed request and a submitted job. */
static sp_job *make_job(sp_server *s, sp_req *q, sp_resp_ctx *ctx, sp_api_err *e) {
    if (q->model && strcmp(q->model, s->o.model_id) != 0) {
        sp_api_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%s' does not exist (this server has '%s').", q->model, s->o.model_id);
        return NULL;
    }
    sp_tokens toks = { 0 };
    sp_job_cfg c = { .m = s->m, .tok = s->tok, .sampling = &q->sampling, .stops = q->stops,
                     .n_stops = q->n_stops, .logprobs = q->logprobs, .top_logprobs = q->top_logprobs,
                     .ignore_eos = q->ignore_eos, .no_cache = q->no_cache, .mx = s->mx };
    sp_job *j = NULL;
    sp_err err;
    const uint64_t n = __atomic_add_fetch(&s->counter, 1, __ATOMIC_RELAXED);
    if (!q->seed_set) q->sampling.seed = s->o.seed_set ? s->o.sampling.seed : sp_hash64(sp_now_ns() ^ (n << 32));
    if (prompt_tokens(s, q, &toks, e) || fit_context(s, q, toks.n, &c.max_tokens, e) ||
        speculation(s, q, &c, e) || sp_req_constrain(q, &c.grammar, &c.grammar_trigger, e))
        goto done;
    if (sp_sampler_validate(&q->sampling, s->m->hp.n_vocab, &err)) {
        sp_api_fail(e, 400, "invalid_request_error", NULL, NULL, "%s", err.msg);
        sp_grammar_free(c.grammar);
        goto done;
    }
    c.prompt = toks.ids;
    c.n_prompt = toks.n;
    if (!(j = sp_job_create(&c, e))) goto done;
    *ctx = (sp_resp_ctx){ .kind = q->kind, .created = (long long)time(NULL), .model = s->o.model_id,
                          .tok = s->tok, .logprobs = q->logprobs, .top_logprobs = q->top_logprobs,
                          .method = sp_job_method(j), .n_prompt = toks.n,
                          .tools = q->kind == SP_API_CHAT && sp_req_uses_tools(q) };
    snprintf(ctx->id, sizeof ctx->id, "%s-%016llx", q->kind == SP_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)sp_hash64(n ^ sp_now_ns()));
done:
    sp_tokens_free(&toks);
    return j;
}

/* Waits for the whole answer; cancels the job if the client leaves. */
static enum MHD_Result answer_whole(sp_server *s, struct MHD_Connection *c, http_req *r, sp_job *j,
                                    const sp_resp_ctx *ctx) {
    const int fd = conn_fd(c);
    char *text = NULL;
    size_t n_text = 0, cap_text = 0;
    sp_lp_entry *lps = NULL;
    int n_lps = 0, cap_lps = 0;
    sp_job_delta d;
    uint64_t last = sp_now_ns();
    for (;;) {
        sp_job_wait(j, WAIT_SLICE_MS);
        if (client_gone(fd, &last)) {
            sp_job_cancel(j);
            sp_sched_kick(s->sched);
        }
        sp_job_take(j, &d);
        if (d.n_text) {
            SP_VEC_GROW(text, cap_text, n_text + d.n_text);
            memcpy(text + n_text, d.text, d.n_text);
            n_text += d.n_text;
        }
        if (d.n_lps) {
            SP_VEC_GROW(lps, cap_lps, n_lps + d.n_lps);
            memcpy(lps + n_lps, d.lps, (size_t)d.n_lps * sizeof *lps);
            n_lps += d.n_lps;
        }
        sp_job_delta_free(&d);
        if (d.end) break;
    }
    enum MHD_Result rc = MHD_NO;
    if (d.end == SP_JOB_FINISHED)
        rc = send_json(s, c, r, 200, sp_api_response(ctx, text ? text : "", n_text, lps, n_lps, &d));
    else if (d.end == SP_JOB_FAILED)
        rc = send_error(s, c, r, &d.err);
    else
        sp_metrics_http(s->mx, route_names[r->rt], 499);   /* client closed the request */
    free(text);
    free(lps);
    return rc;
}

/* ----------------------------------------------------------------------------
 * Server-sent events
 * ------------------------------------------------------------------------- */

typedef struct sse {
    sp_server *s;
    sp_job *j;
    sp_resp_ctx ctx;
    bool include_usage;
    int fd;
    uint64_t last_check;             /* last look for a hang-up */
    char *buf;                       /* bytes ready to send */
    size_t n, off, cap;
    bool started, ended;
    sp_tcparse tc;                   /* ctx.tools: the tool calls in the output */
} sse;

static void sse_put(sse *x, const char *s, size_t n) {
    if (x->off == x->n) x->off = x->n = 0;
    SP_VEC_GROW(x->buf, x->cap, x->n + n);
    memcpy(x->buf + x->n, s, n);
    x->n += n;
}

/* "data: <json>\n\n" (consumes j). */
static void sse_event(sse *x, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    sse_put(x, "data: ", 6);
    if (s) sse_put(x, s, strlen(s));
    sse_put(x, "\n\n", 2);
    free(s);
}

/* With tools: the text goes through the call parser; content and call
 * deltas go out as it decides them (the drafted marks describe the raw
 * text, so they are left out here); logprobs ride on the first chunk. */
static void sse_tools(sse *x, const sp_job_delta *d) {
    sp_tc_out o = { 0 };
    sp_tc_feed(&x->tc, d->text ? d->text : "", d->n_text, &o);
    if (d->end == SP_JOB_FINISHED) sp_tc_finish(&x->tc, &o);
    bool lps_sent = d->n_lps == 0;
    for (int i = 0; i < o.n_ev; i++) {
        const sp_tc_event *ev = &o.ev[i];
        if (ev->kind == SP_TC_TEXT) {
            sse_event(x, sp_api_chunk(&x->ctx, ev->text, ev->n, lps_sent ? NULL : d->lps,
                                      lps_sent ? 0 : d->n_lps, NULL, false));
            lps_sent = true;
        } else {
            sse_event(x, sp_api_tool_chunk(&x->ctx, &x->tc, ev));
        }
    }
    if (!lps_sent) sse_event(x, sp_api_chunk(&x->ctx, "", 0, d->lps, d->n_lps, NULL, false));
    sp_tc_out_free(&o);
}

/* Turns what the job produced into events; returns false if the client is
 * gone (the stream must end with an error). */
static bool sse_fill(sse *x) {
    if (!x->started) {
        x->started = true;
        if (x->ctx.kind == SP_API_CHAT) { sse_event(x, sp_api_chunk(&x->ctx, NULL, 0, NULL, 0, NULL, true)); return true; }
    }
    sp_job_wait(x->j, WAIT_SLICE_MS);
    if (client_gone(x->fd, &x->last_check)) return false;
    sp_job_delta d;
    sp_job_take(x->j, &d);
    if (x->ctx.tools) {
        sse_tools(x, &d);
    } else if (d.n_text || d.n_lps) {
        json_t *chunk = sp_api_chunk(&x->ctx, d.text, d.n_text, d.lps, d.n_lps, NULL, false);
        sp_api_chunk_marks(chunk, d.text, d.n_text, d.segs, d.n_segs);
        sse_event(x, chunk);
    }
    if (d.end == SP_JOB_FINISHED) {
        const char *finish = x->ctx.tools ? sp_api_finish_reason_calls(d.finish, sp_tc_n_valid(&x->tc))
                                          : sp_api_finish_reason(d.finish);
        sse_event(x, sp_api_chunk(&x->ctx, "", 0, NULL, 0, finish, false));
        if (x->include_usage) sse_event(x, sp_api_usage_chunk(&x->ctx, &d));
    } else if (d.end == SP_JOB_FAILED) {
        sse_event(x, sp_api_error_json(&d.err));
    }
    if (d.end == SP_JOB_FINISHED || d.end == SP_JOB_FAILED) {
        sse_put(x, "data: [DONE]\n\n", 14);
        x->ended = true;
    }
    sp_job_delta_free(&d);
    return d.end != SP_JOB_CANCELLED;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *x = cls;
    while (x->off == x->n) {
        if (x->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!sse_fill(x)) {
            sp_job_cancel(x->j);
            sp_sched_kick(x->s->sched);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t k = x->n - x->off < max ? x->n - x->off : max;
    memcpy(buf, x->buf + x->off, k);
    x->off += k;
    return (ssize_t)k;
}

static void sse_free(void *cls) {
    sse *x = cls;
    sp_job_cancel(x->j);             /* no effect once the job ended */
    sp_sched_kick(x->s->sched);
    sp_job_unref(x->j);
    active_add(x->s, -1);
    sp_tc_free(&x->tc);
    free(x->buf);
    free(x);
}

static enum MHD_Result answer_stream(sp_server *s, struct MHD_Connection *c, http_req *r, sp_job *j,
                                     const sp_resp_ctx *ctx, bool include_usage) {
    sse *x = sp_xcalloc(1, sizeof *x);
    x->s = s;
    x->j = j;
    x->ctx = *ctx;
    x->include_usage = include_usage;
    sp_tc_init(&x->tc, sp_api_call_seed(ctx));
    x->fd = conn_fd(c);
    x->last_check = sp_now_ns();
    active_add(s, 1);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!resp) { sse_free(x); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    add_cors(s, resp);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    const enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    sp_metrics_http(s->mx, route_names[r->rt], 200);
    r->answered = true;
    return rc;
}

/* ----------------------------------------------------------------------------
 * /tokenize and /detokenize (llama-server's shapes)
 * ------------------------------------------------------------------------- */

static enum MHD_Result bad_request(sp_server *s, struct MHD_Connection *c, http_req *r, const char *param,
                                   const char *msg) {
    sp_api_err e;
    sp_api_fail(&e, 400, "invalid_request_error", NULL, param, "%s", msg);
    return send_error(s, c, r, &e);
}

/* A field that must be a boolean when present (absent or null: dflt). */
static int opt_bool(json_t *o, const char *key, bool dflt, bool *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) { *out = dflt; return 0; }
    if (!json_is_boolean(v)) return -1;
    *out = json_is_true(v);
    return 0;
}

/* {"content": TEXT, "add_special": false, "parse_special": true,
 *  "with_pieces": false} -> {"tokens": [ids]} or [{"id", "piece"}] (a
 * piece's text, or its bytes when they are not valid UTF-8). */
static enum MHD_Result on_tokenize(sp_server *s, struct MHD_Connection *c, http_req *r, json_t *o) {
    json_t *content = json_object_get(o, "content");
    bool add_special, parse_special, with_pieces;
    if (!json_is_string(content)) return bad_request(s, c, r, "content", "'content' must be a string.");
    if (opt_bool(o, "add_special", false, &add_special) || opt_bool(o, "parse_special", true, &parse_special) ||
        opt_bool(o, "with_pieces", false, &with_pieces))
        return bad_request(s, c, r, NULL, "'add_special', 'parse_special' and 'with_pieces' must be booleans.");
    sp_tokens t = { 0 };
    sp_err err;
    if (sp_tokenize(s->tok, json_string_value(content), json_string_length(content),
                    add_special && sp_tokenizer_add_bos(s->tok), parse_special, &t, &err)) {
        sp_tokens_free(&t);
        return bad_request(s, c, r, "content", err.msg);
    }
    json_t *arr = json_array();
    const size_t cap = (size_t)sp_tokenizer_max_token_len(s->tok) + 1;
    char *buf = sp_xmalloc(cap);
    for (int i = 0; i < t.n; i++) {
        if (!with_pieces) { json_array_append_new(arr, json_integer(t.ids[i])); continue; }
        const size_t n = sp_token_piece(s->tok, t.ids[i], true, buf, cap);
        assert(n <= cap);                        /* no piece is longer than the longest token */
        json_t *piece = json_stringn(buf, n);    /* NULL when not valid UTF-8: then the bytes */
        if (!piece) {
            piece = json_array();
            for (size_t k = 0; k < n; k++) json_array_append_new(piece, json_integer((unsigned char)buf[k]));
        }
        json_array_append_new(arr, json_pack("{s:i,s:o}", "id", (json_int_t)t.ids[i], "piece", piece));
    }
    free(buf);
    sp_tokens_free(&t);
    return send_json(s, c, r, 200, json_pack("{s:o}", "tokens", arr));
}

/* {"tokens": [ids]} -> {"content": TEXT}; special tokens are rendered. */
static enum MHD_Result on_detokenize(sp_server *s, struct MHD_Connection *c, http_req *r, json_t *o) {
    json_t *toks = json_object_get(o, "tokens");
    if (!json_is_array(toks)) return bad_request(s, c, r, "tokens", "'tokens' must be an array of token ids.");
    const int V = s->m->hp.n_vocab;
    size_t i;
    json_t *v;
    json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= V) {
            char msg[128];
            snprintf(msg, sizeof msg, "tokens[%zu] is not a token id in [0, %d).", i, V);
            return bad_request(s, c, r, "tokens", msg);
        }
    }
    sp_detok d = { 0 };
    char *text = NULL;
    size_t n = 0, cap = 0;
    const size_t piece_cap = SP_DETOK_CAP(sp_tokenizer_max_token_len(s->tok));
    json_array_foreach(toks, i, v) {
        SP_VEC_GROW(text, cap, n + piece_cap + 1);
        n += sp_detok_push(&d, s->tok, (int32_t)json_integer_value(v), true, text + n, piece_cap);
    }
    SP_VEC_GROW(text, cap, n + 64 + 1);
    n += sp_detok_flush(&d, text + n, 64);
    json_t *resp = json_pack("{s:o}", "content", sp_json_text(text ? text : "", n));
    free(text);
    return send_json(s, c, r, 200, resp);
}

static enum MHD_Result on_tokens(sp_server *s, struct MHD_Connection *c, http_req *r) {
    json_error_t je;
    json_t *o = json_loadb(r->body ? r->body : "", r->n_body, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return bad_request(s, c, r, NULL, "The request body must be a JSON object.");
    }
    const enum MHD_Result rc = r->rt == R_TOKENIZE ? on_tokenize(s, c, r, o) : on_detokenize(s, c, r, o);
    json_decref(o);
    return rc;
}

/* POST /apply-template (llama-server's): a chat request's messages (and
 * tools) -> {"prompt": the text the model would be given}. */
static enum MHD_Result on_apply_template(sp_server *s, struct MHD_Connection *c, http_req *r) {
    sp_req q;
    sp_api_err e;
    if (sp_req_parse_with(SP_API_CHAT, r->body ? r->body : "", r->n_body, s->m->hp.n_vocab, &s->o.sampling, &q, &e))
        return send_error(s, c, r, &e);
    if (!s->chat) {
        no_template(s, &e);
        sp_req_free(&q);
        return send_error(s, c, r, &e);
    }
    int n_msgs;
    sp_chat_msg *owned;
    char *system, *text = NULL;
    sp_err err;
    const sp_chat_msg *msgs = chat_msgs(s, &q, &n_msgs, &owned, &system);
    const int rc = sp_chat_render(s->chat, msgs, n_msgs, true, &text, &err);
    free(owned);
    free(system);
    sp_req_free(&q);
    if (rc) return bad_request(s, c, r, "messages", err.msg);
    json_t *resp = json_pack("{s:o}", "prompt", sp_json_text(text, strlen(text)));
    free(text);
    return send_json(s, c, r, 200, resp);
}

static enum MHD_Result on_generate(sp_server *s, struct MHD_Connection *c, http_req *r) {
    const sp_api_kind kind = r->rt == R_CHAT ? SP_API_CHAT : SP_API_COMPLETION;
    sp_req q;
    sp_api_err e;
    if (sp_req_parse_with(kind, r->body ? r->body : "", r->n_body, s->m->hp.n_vocab, &s->o.sampling, &q, &e))
        return send_error(s, c, r, &e);
    sp_resp_ctx ctx;
    sp_job *j = make_job(s, &q, &ctx, &e);
    const bool stream = q.stream, include_usage = q.include_usage;
    sp_req_free(&q);
    if (!j) return send_error(s, c, r, &e);
    if (sp_sched_submit(s->sched, j, &e)) {
        sp_job_unref(j);
        return send_error(s, c, r, &e);
    }
    if (stream) return answer_stream(s, c, r, j, &ctx, include_usage);   /* the stream owns j */
    const enum MHD_Result rc = answer_whole(s, c, r, j, &ctx);
    sp_job_unref(j);
    return rc;
}

/* ----------------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------------- */

static route route_of(const char *url, bool *post_route) {
    static const struct { const char *path; route rt; bool post; } routes[] = {
        { "/v1/chat/completions", R_CHAT, true }, { "/chat/completions", R_CHAT, true },
        { "/v1/completions", R_COMPLETIONS, true }, { "/completions", R_COMPLETIONS, true },
        { "/v1/models", R_MODELS, false }, { "/models", R_MODELS, false },
        { "/health", R_HEALTH, false }, { "/v1/health", R_HEALTH, false },
        { "/metrics", R_METRICS, false }, { "/", R_ROOT, false }, { "/props", R_PROPS, false },
        { "/tokenize", R_TOKENIZE, true }, { "/detokenize", R_DETOKENIZE, true },
        { "/apply-template", R_APPLY_TEMPLATE, true },
    };
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) { *post_route = routes[i].post; return routes[i].rt; }
    *post_route = false;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    return R_NONE;
}

/* Constant-time comparison of the bearer token with the key. */
static bool authorized(const sp_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    const size_t n = strlen(h), k = strlen(s->o.api_key);
    unsigned char diff = n != k;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(h[i] ^ s->o.api_key[i % (k ? k : 1)]);
    return diff == 0;
}

/* ----------------------------------------------------------------------------
 * Framing: what RFC 9112 requires a server to reject, because a front end
 * that reads the message differently would see another request boundary
 * (request smuggling), or because one request would carry two identities.
 * libmicrohttpd takes the first of duplicated headers and accepts the rest.
 * ------------------------------------------------------------------------- */

typedef struct hdr_scan {
    int n_host, n_auth, n_cl, n_te;
    bool cl_bad;                     /* a Content-Length that is not digits, or two that differ */
    bool te_bad;                     /* a transfer coding other than one "chunked" */
    unsigned long long cl;
} hdr_scan;

/* value without surrounding spaces and tabs equals word (any case). */
static bool token_is(const char *value, const char *word) {
    while (*value == ' ' || *value == '\t') value++;
    size_t n = strlen(value);
    while (n && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
    return n == strlen(word) && !strncasecmp(value, word, n);
}

/* A Content-Length value: 1*DIGIT, at most 18 of them (no sign, no list). */
static bool parse_length(const char *v, unsigned long long *out) {
    while (*v == ' ' || *v == '\t') v++;
    unsigned long long x = 0;
    int n = 0;
    for (; *v >= '0' && *v <= '9'; v++, n++) x = x * 10 + (unsigned)(*v - '0');
    while (*v == ' ' || *v == '\t') v++;
    *out = x;
    return n > 0 && n <= 18 && !*v;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    hdr_scan *h = cls;
    unsigned long long v;
    if (!value) value = "";
    if (!strcasecmp(key, "Host")) {
        h->n_host++;
    } else if (!strcasecmp(key, "Authorization")) {
        h->n_auth++;
    } else if (!strcasecmp(key, "Content-Length")) {
        if (!parse_length(value, &v) || (h->n_cl && v != h->cl)) h->cl_bad = true;
        h->cl = v;
        h->n_cl++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        if (h->n_te++ || !token_is(value, "chunked")) h->te_bad = true;
    }
    return MHD_YES;
}

/* The 400 message for a request whose framing or identity is ambiguous,
 * or NULL. */
static const char *framing_error(const hdr_scan *h, const char *version) {
    if (h->cl_bad) return "Invalid or conflicting Content-Length headers.";
    if (h->n_cl && h->n_te) return "Content-Length and Transfer-Encoding together are not allowed.";
    if (h->te_bad) return "Unsupported Transfer-Encoding: only one 'chunked' is accepted.";
    if (h->n_host > 1 || (h->n_host == 0 && !strcmp(version, "HTTP/1.1")))
        return "An HTTP/1.1 request needs exactly one Host header.";
    if (h->n_auth > 1) return "More than one Authorization header.";
    return NULL;
}

/* Checks the framing and starts the body's deadline; returns true if it
 * answered (400, and the connection closes). */
static bool check_framing(sp_server *s, struct MHD_Connection *c, http_req *r, const char *version,
                          enum MHD_Result *rc) {
    hdr_scan h = { 0 };
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &h);
    const char *msg = framing_error(&h, version);
    if (msg) {
        r->close = true;
        *rc = fail(s, c, r, 400, "invalid_request_error", "bad_request", msg);
        return true;
    }
    r->t_headers = sp_now_ns();
    r->chunked = h.n_te > 0;
    const bool body = r->chunked || h.cl > 0;
    /* a chunked body's deadline moves with what arrived (on_request, per piece) */
    sp_gate_deadline(c, body ? sp_gate_body_deadline(s->gate, r->t_headers, r->chunked ? 0 : h.cl) : 0);
    return false;
}

/* Checks made before the body is read; returns true if it answered. */
static bool early_checks(sp_server *s, struct MHD_Connection *c, http_req *r, bool post_route,
                         enum MHD_Result *rc) {
    if (r->rt == R_NONE) {
        *rc = fail(s, c, r, 404, "invalid_request_error", "not_found", "Not found.");
        return true;
    }
    if (r->post != post_route) {
        *rc = fail(s, c, r, 405, "invalid_request_error", "method_not_allowed", "Method not allowed.");
        return true;
    }
    if (r->rt != R_HEALTH && r->rt != R_ROOT && !authorized(s, c)) {
        *rc = fail(s, c, r, 401, "invalid_request_error", "invalid_api_key",
                   "Incorrect or missing API key: send 'Authorization: Bearer <key>'.");
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (r->post && cl && strtoull(cl, NULL, 10) > s->o.max_body) {
        char msg[128];
        snprintf(msg, sizeof msg, "The request body is larger than the limit of %zu bytes.", s->o.max_body);
        *rc = fail(s, c, r, 413, "invalid_request_error", "request_too_large", msg);
        return true;
    }
    return false;
}

/* A CORS preflight (OPTIONS with --cors-origin): what browsers may send.
 * No key is asked: browsers send none with a preflight. */
static enum MHD_Result preflight(sp_server *s, struct MHD_Connection *c, http_req *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_cors(s, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    const enum MHD_Result rc = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    sp_metrics_http(s->mx, route_names[r->rt], 204);
    r->answered = true;
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    sp_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        r = sp_xcalloc(1, sizeof *r);
        *con_cls = r;
        active_add(s, 1);
        bool post_route;
        r->rt = route_of(url, &post_route);
        r->post = !strcmp(method, "POST");
        enum MHD_Result rc;
        if (check_framing(s, c, r, version, &rc)) return rc;
        if (!strcmp(method, "OPTIONS") && s->o.cors_origin && r->rt != R_NONE) return preflight(s, c, r);
        if (strcmp(method, "GET") && strcmp(method, "POST") && strcmp(method, "HEAD"))
            return fail(s, c, r, 405, "invalid_request_error", "method_not_allowed", "Method not allowed.");
        if (early_checks(s, c, r, post_route, &rc)) return rc;
        if (!r->post) return on_get(s, c, r, url);
        return MHD_YES;
    }
    if (*upload_size) {
        r->n_received += *upload_size;
        /* A declared length over the limit got its 413 before the body;
         * a chunked body (an endless one too) that goes over it ends the
         * connection here: MHD cannot queue a response mid-body. */
        if (r->n_received > s->o.max_body) return MHD_NO;
        if (r->chunked) sp_gate_deadline(c, sp_gate_body_deadline(s->gate, r->t_headers, r->n_received));
    }
    if (r->answered) { *upload_size = 0; return MHD_YES; }   /* drain a body we refused */
    if (*upload_size) {
        SP_VEC_GROW(r->body, r->cap_body, r->n_body + *upload_size + 1);
        memcpy(r->body + r->n_body, upload, *upload_size);
        r->n_body += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    sp_gate_deadline(c, 0);          /* the body is in: the answer may take long */
    if (r->rt == R_TOKENIZE || r->rt == R_DETOKENIZE) return on_tokens(s, c, r);
    if (r->rt == R_APPLY_TEMPLATE) return on_apply_template(s, c, r);
    return on_generate(s, c, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    sp_server *s = cls;
    http_req *r = *con_cls;
    sp_gate_deadline(c, sp_gate_header_deadline(s->gate));   /* the next request's headers */
    if (!r) return;
    free(r->body);
    free(r);
    *con_cls = NULL;
    active_add(s, -1);
}

/* ----------------------------------------------------------------------------
 * Start and stop
 * ------------------------------------------------------------------------- */

sp_server_opts sp_server_defaults(void) {
    return (sp_server_opts){ .host = "127.0.0.1", .port = 8080, .model_id = "specula",
                             .queue_max = 64, .max_body = 1 << 20,
                             .timeout_s = 600, .header_timeout_s = 10, .shutdown_timeout_s = 10,
                             .spec_default = "none",
                             .draft_max_default = SP_DRAFT_ADAPTIVE,
                             .sampling = sp_serve_sampling_defaults() };
}

static int check_opts(const sp_server_opts *o, sp_err *err) {
    if (o->queue_max < 1) return sp_err_set(err, "serve: the queue must hold at least 1 request");
    if (o->port < 0 || o->port > 65535) return sp_err_set(err, "serve: port %d out of range", o->port);
    if (!o->model_id || !*o->model_id) return sp_err_set(err, "serve: empty model id");
    if (o->api_key && !*o->api_key) return sp_err_set(err, "serve: empty API key");
    if (o->header_timeout_s < 1) return sp_err_set(err, "serve: the header timeout must be >= 1 s");
    if (o->max_conns < 0 || o->max_conns_per_ip < 0) return sp_err_set(err, "serve: negative connection cap");
    for (const char *p = o->model_id; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            return sp_err_set(err, "serve: the model id may not contain quotes, backslashes or control characters");
    return 0;
}

static int resolve(sp_server *s, sp_err *err) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *res;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    const int rc = getaddrinfo(s->o.host, port, &hints, &res);
    if (rc) return sp_err_set(err, "serve: cannot resolve host '%s': %s", s->o.host, gai_strerror(rc));
    memcpy(&s->addr, res->ai_addr, res->ai_addrlen);
    s->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* The caps: --max-conns defaults to what the slots and queue can use plus
 * 64 for other requests; one address may hold a quarter of it (at least 8),
 * so a single client cannot keep the rest out. */
static sp_gate_opts gate_opts(const sp_server *s) {
    const sp_server_opts *o = &s->o;
    sp_gate_opts g = { .max_conns = o->max_conns, .max_per_ip = o->max_conns_per_ip,
                       .header_timeout_s = o->header_timeout_s };
    if (!g.max_conns) g.max_conns = s->parallel + o->queue_max + 64;
    if (!g.max_per_ip) g.max_per_ip = g.max_conns / 4 > 8 ? g.max_conns / 4 : 8;
    return g;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    sp_gate_notify(cls, c, socket_context, toe == MHD_CONNECTION_NOTIFY_CLOSED);
}

/* The gate listens and accepts; MHD gets the accepted sockets (it keeps
 * its own limit as a backstop only). */
static int start_http(sp_server *s, sp_err *err) {
    const sp_gate_opts go = gate_opts(s);
    s->gate = sp_gate_create(&go, s->mx);
    if (sp_gate_listen(s->gate, (struct sockaddr *)&s->addr, s->addrlen, &s->port, err)) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return sp_err_set(err, "serve: cannot listen on %s:%d (%.100s)", s->o.host, s->o.port, why);
    }
    const unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                           MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)s->o.timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)(go.max_conns + 64),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s->gate,
                            MHD_OPTION_END);
    if (!s->d) return sp_err_set(err, "serve: cannot start the HTTP daemon");
    if (sp_gate_run(s->gate, s->d)) {
        MHD_stop_daemon(s->d);
        return sp_err_set(err, "serve: cannot start the accept thread");
    }
    return 0;
}

sp_server *sp_server_start(sp_ctx *ctx, const sp_server_opts *o, sp_err *err) {
    if (check_opts(o, err)) return NULL;
    if (sp_ctx_n_slots(ctx) > 256) {
        sp_err_set(err, "serve: at most 256 parallel requests (the context has %d slots)", sp_ctx_n_slots(ctx));
        return NULL;
    }
    if (sp_ctx_n_ctx(ctx) < 8) {
        sp_err_set(err, "serve: the context must hold at least 8 tokens");
        return NULL;
    }
    sp_server *s = sp_xcalloc(1, sizeof *s);
    const sp_model *m = sp_ctx_model(ctx);
    s->o = *o;
    s->ctx = ctx;
    s->m = m;
    s->tok = sp_ctx_tokenizer(ctx);
    s->parallel = sp_ctx_n_slots(ctx);
    s->n_ctx = sp_ctx_n_ctx(ctx);
    s->created = (long long)time(NULL);
    if (sp_chat_tmpl_for_model(m->gguf, s->tok, o->chat_template, o->chat_template_src, o->chat_template_file,
                               &s->chat, err)) {
        if (o->chat_template || o->chat_template_src) {   /* the user's choice must work */
            free(s);
            sp_err_prefix(err, "serve");
            return NULL;
        }
        snprintf(s->chat_why, sizeof s->chat_why, "The model's chat template cannot be rendered (%s)", err->msg);
        sp_info("specula serve: warning: the model's chat template cannot be rendered: %s; /v1/chat/completions "
                "will answer 400: use --chat-template NAME|FILE, or /v1/completions\n", err->msg);
    } else if (!s->chat) {
        snprintf(s->chat_why, sizeof s->chat_why, "The model has no chat template");
        sp_info("specula serve: warning: the model's chat template is missing; /v1/chat/completions will answer "
                "400: use --chat-template NAME|FILE, or /v1/completions\n");
    }
    s->defsys = sp_chat_default_system(m->gguf, s->defsys_buf, sizeof s->defsys_buf);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (resolve(s, err)) { sp_chat_tmpl_free(s->chat); free(s); return NULL; }
    s->mx = sp_metrics_create();
    if (!(s->sched = sp_sched_create(ctx, o->queue_max, s->mx))) {
        sp_err_set(err, "serve: cannot start the scheduler thread");
        sp_metrics_free(s->mx);
        sp_chat_tmpl_free(s->chat);
        free(s);
        return NULL;
    }
    if (start_http(s, err)) {
        sp_gate_free(s->gate);
        sp_sched_free(s->sched);
        sp_metrics_free(s->mx);
        sp_chat_tmpl_free(s->chat);
        free(s);
        return NULL;
    }
    return s;
}

int sp_server_port(const sp_server *s) { return s->port; }

void sp_server_stop(sp_server *s) {
    if (!s) return;
    __atomic_store_n(&s->stopping, 1, __ATOMIC_RELEASE);
    sp_gate_quiesce(s->gate);                            /* no new connections */
    sp_sched_stop(s->sched, (uint64_t)s->o.shutdown_timeout_s * 1000000000ull);
    /* every job has ended: the connections still answering finish soon */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&s->mu);
    while (s->n_active > 0)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts)) break;
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->d);
    sp_gate_free(s->gate);                               /* after MHD's CLOSED notices */
    sp_sched_free(s->sched);
    sp_metrics_free(s->mx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    sp_chat_tmpl_free(s->chat);
    free(s);
}

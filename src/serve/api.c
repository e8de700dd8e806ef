/*
 * The JSON of responses, shaped as the OpenAI API shapes them:
 * chat.completion / chat.completion.chunk and text_completion objects,
 * usage (with a `speculation` summary) and error objects.
 *
 * logprobs are the target's raw log-probabilities (log-softmax of its
 * logits before temperature, penalties, bias or truncation) at each
 * emitted position, with the top alternatives; chat uses the
 * {"content": [{"token", "logprob", "bytes", "top_logprobs"}]} form, the
 * completions API the legacy {"tokens", "token_logprobs", "top_logprobs",
 * "text_offset"} form.
 */
#include "serve/internal.h"

#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) k = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) { k = 3; if (s[0] == 0xE0) lo = 0xA0; if (s[0] == 0xED) hi = 0x9F; }
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) { k = 4; if (s[0] == 0xF0) lo = 0x90; if (s[0] == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}

json_t *sp_json_text(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *t = sp_xmalloc(3 * n + 1);
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_seq(u + i, n - i);
        if (k) { memcpy(t + w, s + i, k); w += k; i += k; }
        else { memcpy(t + w, "\xef\xbf\xbd", 3); w += 3; i++; }
    }
    json_t *j = json_stringn(t, w);
    free(t);
    return j ? j : json_string("");
}

json_t *sp_api_error_json(const sp_api_err *e) {
    json_t *in = json_object();
    json_object_set_new(in, "message", sp_json_text(e->message, strlen(e->message)));
    json_object_set_new(in, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(in, "param", e->param[0] ? sp_json_text(e->param, strlen(e->param)) : json_null());
    json_object_set_new(in, "code", e->code ? json_string(e->code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", in);
    return o;
}

const char *sp_api_finish_reason(sp_finish f) {
    return f == SP_FINISH_STOP ? "stop" : "length";
}

const char *sp_api_finish_reason_calls(sp_finish f, int n_valid_calls) {
    return n_valid_calls > 0 && f == SP_FINISH_STOP ? "tool_calls" : sp_api_finish_reason(f);
}

uint64_t sp_api_call_seed(const sp_resp_ctx *c) {
    uint64_t h = 0;
    for (const char *p = c->id; *p; p++) h = sp_hash64(h ^ (unsigned char)*p);
    return h;
}

/* ----------------------------------------------------------------------------
 * logprobs
 * ------------------------------------------------------------------------- */

static json_t *token_bytes(const sp_tokenizer *tok, int32_t id, json_t **bytes) {
    char buf[1024];
    size_t n = sp_token_piece(tok, id, false, buf, sizeof buf);
    if (n > sizeof buf) n = sizeof buf;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    return sp_json_text(buf, n);
}

static json_t *chat_logprobs(const sp_resp_ctx *c, const sp_lp_entry *lps, int n) {
    json_t *content = json_array();
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *bytes, *top = json_array();
        json_object_set_new(e, "token", token_bytes(c->tok, lps[i].token, &bytes));
        json_object_set_new(e, "logprob", json_real(lps[i].lp));
        json_object_set_new(e, "bytes", bytes);
        for (int k = 0; k < lps[i].n_top; k++) {
            json_t *t = json_object(), *tb;
            json_object_set_new(t, "token", token_bytes(c->tok, lps[i].top[k].id, &tb));
            json_object_set_new(t, "logprob", json_real(lps[i].top[k].lp));
            json_object_set_new(t, "bytes", tb);
            json_array_append_new(top, t);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    return o;
}

/* text_offset counts bytes of the completion text (the prompt is not
 * echoed). */
static json_t *completion_logprobs(const sp_resp_ctx *c, const sp_lp_entry *lps, int n) {
    json_t *tokens = json_array(), *lp = json_array(), *top = json_array(), *off = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(tokens, token_bytes(c->tok, lps[i].token, NULL));
        json_array_append_new(lp, json_real(lps[i].lp));
        json_array_append_new(off, json_integer((json_int_t)lps[i].offset));
        json_t *alts = json_object();
        for (int k = 0; k < lps[i].n_top; k++) {
            json_t *key = token_bytes(c->tok, lps[i].top[k].id, NULL);
            json_object_set_new(alts, json_string_value(key), json_real(lps[i].top[k].lp));
            json_decref(key);
        }
        json_array_append_new(top, alts);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lp);
    json_object_set_new(o, "top_logprobs", top);
    json_object_set_new(o, "text_offset", off);
    return o;
}

static json_t *logprobs_json(const sp_resp_ctx *c, const sp_lp_entry *lps, int n) {
    if (!c->logprobs) return json_null();
    return c->kind == SP_API_CHAT ? chat_logprobs(c, lps, n) : completion_logprobs(c, lps, n);
}

/* ----------------------------------------------------------------------------
 * Objects
 * ------------------------------------------------------------------------- */

static json_t *envelope(const sp_resp_ctx *c, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(c->created));
    json_object_set_new(o, "model", sp_json_text(c->model, strlen(c->model)));
    json_object_set_new(o, "system_fingerprint", json_string("specula"));
    return o;
}

json_t *sp_api_usage(const sp_resp_ctx *c, const sp_job_delta *end) {
    const sp_spec_stats *st = &end->stats;
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(c->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(st->emitted));
    json_object_set_new(u, "total_tokens", json_integer(c->n_prompt + st->emitted));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(st->n_cached));   /* from the prefix cache */
    json_object_set_new(u, "prompt_tokens_details", d);
    json_t *s = json_object();
    json_object_set_new(s, "method", json_string(c->method));
    json_object_set_new(s, "rounds", json_integer(st->spec_rounds));
    json_object_set_new(s, "drafted", json_integer(st->drafted));
    json_object_set_new(s, "accepted", json_integer(st->accepted));
    json_object_set_new(s, "acceptance_rate", json_real(sp_stats_accept_rate(st)));
    json_object_set_new(s, "mean_acceptance_length",
                        json_real(st->spec_rounds ? sp_stats_mean_accept_len(st) : 1.0));
    json_object_set_new(s, "forwards", json_integer(st->forwards));
    json_object_set_new(s, "gated_rounds", json_integer(st->gated_rounds));   /* run plain: drafting measured slower */
    json_object_set_new(s, "drafted_tokens_emitted", json_integer(end->n_drafted_emitted));
    if (st->masks || st->forced_drafted) {
        /* under a grammar: the tokens it forced, drafted without a drafter */
        json_object_set_new(s, "forced_drafted", json_integer(st->forced_drafted));
        json_object_set_new(s, "forced_accepted", json_integer(st->forced_accepted));
    }
    json_object_set_new(u, "speculation", s);
    return u;
}

static json_t *tool_call_json(const sp_tc_call *call) {
    json_t *f = json_object(), *o = json_object();
    json_object_set_new(f, "name", json_string(call->name));
    json_object_set_new(f, "arguments", sp_json_text(call->args ? call->args : "", call->n_args));
    json_object_set_new(o, "id", json_string(call->id));
    json_object_set_new(o, "type", json_string("function"));
    json_object_set_new(o, "function", f);
    return o;
}

/* The assistant message of a request with tools: the calls parsed out of
 * the text, the rest as content (null when nothing but calls).  Sets the
 * finish reason. */
static json_t *tools_message(const sp_resp_ctx *c, const char *text, size_t n_text, sp_finish f,
                             const char **finish) {
    sp_tcparse p;
    sp_tc_out ev = { 0 };
    sp_tc_init(&p, sp_api_call_seed(c));
    sp_tc_feed(&p, text, n_text, &ev);
    sp_tc_finish(&p, &ev);
    sp_tc_out_free(&ev);
    size_t n;
    char *content = sp_tc_content(&p, &n);
    const int n_valid = sp_tc_n_valid(&p);
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    json_object_set_new(msg, "content", n_valid && !n ? json_null() : sp_json_text(content, n));
    if (n_valid) {
        json_t *calls = json_array();
        for (int i = 0; i < p.n_calls; i++)
            if (p.calls[i].valid) json_array_append_new(calls, tool_call_json(&p.calls[i]));
        json_object_set_new(msg, "tool_calls", calls);
    }
    *finish = sp_api_finish_reason_calls(f, n_valid);
    free(content);
    sp_tc_free(&p);
    return msg;
}

json_t *sp_api_response(const sp_resp_ctx *c, const char *text, size_t n_text,
                        const sp_lp_entry *lps, int n_lps, const sp_job_delta *end) {
    const bool chat = c->kind == SP_API_CHAT;
    json_t *o = envelope(c, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_object();
    const char *finish = sp_api_finish_reason(end->finish);
    json_object_set_new(choice, "index", json_integer(0));
    if (chat && c->tools) {
        json_object_set_new(choice, "message", tools_message(c, text, n_text, end->finish, &finish));
    } else if (chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "content", sp_json_text(text, n_text));
        json_object_set_new(choice, "message", msg);
    } else {
        json_object_set_new(choice, "text", sp_json_text(text, n_text));
    }
    json_object_set_new(choice, "logprobs", logprobs_json(c, lps, n_lps));
    json_object_set_new(choice, "finish_reason", json_string(finish));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", sp_api_usage(c, end));
    return o;
}

json_t *sp_api_chunk(const sp_resp_ctx *c, const char *text, size_t n_text, const sp_lp_entry *lps,
                     int n_lps, const char *finish_reason, bool role_only) {
    const bool chat = c->kind == SP_API_CHAT;
    json_t *o = envelope(c, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    if (chat) {
        json_t *delta = json_object();
        if (role_only) {
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_string(""));
        } else if (!finish_reason) {
            json_object_set_new(delta, "content", sp_json_text(text, n_text));
        }
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", sp_json_text(text, n_text));
    }
    json_object_set_new(choice, "logprobs", n_lps ? logprobs_json(c, lps, n_lps) : json_null());
    json_object_set_new(choice, "finish_reason", finish_reason ? json_string(finish_reason) : json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return o;
}

/* Segment ends move forward to the next byte that starts a character
 * (or the end): sp_json_text then decodes each piece exactly as it
 * decodes the whole text, so the texts join to the content's text. */
void sp_api_chunk_marks(json_t *chunk, const char *text, size_t n_text, const sp_text_seg *segs,
                        int n_segs) {
    if (!n_text || !n_segs) return;
    json_t *arr = json_array();
    size_t at = 0, end = 0;
    int tokens = 0;
    for (int i = 0; i < n_segs; i++) {
        end += segs[i].len;
        tokens += segs[i].tokens;
        size_t cut = end < n_text && i < n_segs - 1 ? end : n_text;
        while (cut < n_text && ((unsigned char)text[cut] & 0xC0) == 0x80) cut++;
        if (cut <= at) continue;     /* swallowed by the previous run: its tokens go on */
        json_t *o = json_object();
        json_object_set_new(o, "text", sp_json_text(text + at, cut - at));
        json_object_set_new(o, "drafted", json_boolean(segs[i].drafted));
        json_object_set_new(o, "tokens", json_integer(tokens));
        json_array_append_new(arr, o);
        at = cut;
        tokens = 0;
    }
    json_t *ext = json_object();
    json_object_set_new(ext, "segments", arr);
    json_object_set_new(chunk, "specula", ext);
}

json_t *sp_api_tool_chunk(const sp_resp_ctx *c, const sp_tcparse *p, const sp_tc_event *ev) {
    json_t *o = envelope(c, "chat.completion.chunk");
    json_t *call = json_object(), *f = json_object();
    json_object_set_new(call, "index", json_integer(ev->index));
    if (ev->kind == SP_TC_START) {
        json_object_set_new(call, "id", json_string(p->calls[ev->index].id));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(f, "name", json_string(ev->text));
        json_object_set_new(f, "arguments", json_string(""));
    } else {
        json_object_set_new(f, "arguments", sp_json_text(ev->text, ev->n));
    }
    json_object_set_new(call, "function", f);
    json_t *calls = json_array(), *delta = json_object(), *choice = json_object();
    json_array_append_new(calls, call);
    json_object_set_new(delta, "tool_calls", calls);
    json_object_set_new(choice, "index", json_integer(0));
    json_object_set_new(choice, "delta", delta);
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", json_null());
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return o;
}

json_t *sp_api_usage_chunk(const sp_resp_ctx *c, const sp_job_delta *end) {
    json_t *o = envelope(c, c->kind == SP_API_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", sp_api_usage(c, end));
    return o;
}

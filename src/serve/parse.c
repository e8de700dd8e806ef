/*
 * Request bodies of /v1/chat/completions and /v1/completions: JSON (jansson)
 * validated into an sp_req.  Ranges follow the OpenAI API (temperature
 * 0..2, penalties -2..2, logit_bias -100..100, top_logprobs 0..20, n = 1);
 * fields it does not know are ignored, as the OpenAI API ignores them.
 */
#include "serve/internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sp_api_fail(sp_api_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) {
    if (!e) return -1;
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define INVALID "invalid_request_error"

int sp_api_bad(sp_api_err *e, const char *param, const char *fmt, ...) {
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sp_api_fail(e, 400, INVALID, NULL, param, "%s", msg);
}

static const char *json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int wrong_type(sp_api_err *e, const char *param, const char *want, const json_t *v) {
    return sp_api_bad(e, param, "Invalid type for '%s': expected %s, but got %s instead.", param, want,
               json_type_name(v));
}

/* ----------------------------------------------------------------------------
 * Typed field readers: absent or null fields keep *out and return 0.
 * ------------------------------------------------------------------------- */

/* x as the shortest decimal that reads back as the same double: "%g"
 * rounds to 6 digits, so 2.0000001 printed as "2" and a range error said
 * "must be between 0 and 2 (got 2)". */
static const char *exact(double x, char buf[32]) {
    for (int prec = 6; prec < 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return buf;
    }
    snprintf(buf, 32, "%.17g", x);
    return buf;
}

static int get_number(json_t *o, const char *key, double lo, double hi, float *out, sp_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return wrong_type(e, key, "a number", v);
    const double x = json_number_value(v);
    char got[32];
    if (!(x >= lo && x <= hi))
        return sp_api_bad(e, key, "'%s' must be between %g and %g (got %s).", key, lo, hi, exact(x, got));
    *out = (float)x;
    return 0;
}

/* An integer (a real with an integral value is accepted, as JSON numbers
 * from some clients are). */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   bool *set, sp_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15) x = (long long)json_real_value(v);
    else return wrong_type(e, key, "an integer", v);
    if (x < lo || x > hi) return sp_api_bad(e, key, "'%s' must be between %lld and %lld (got %lld).", key, lo, hi, x);
    *out = x;
    if (set) *set = true;
    return 0;
}

static int get_bool(json_t *o, const char *key, bool *out, sp_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return wrong_type(e, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int get_string(json_t *o, const char *key, char **out, sp_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return wrong_type(e, key, "a string", v);
    free(*out);
    *out = sp_xstrdup(json_string_value(v));
    return 0;
}

/* ----------------------------------------------------------------------------
 * Compound fields
 * ------------------------------------------------------------------------- */

static int add_stop(sp_req *r, json_t *v, const char *param, sp_api_err *e) {
    if (!json_is_string(v)) return wrong_type(e, param, "a string", v);
    const size_t n = json_string_length(v);
    if (n == 0) return sp_api_bad(e, param, "Stop strings must not be empty.");
    if (n > SP_REQ_MAX_STOP_LEN) return sp_api_bad(e, param, "Stop strings are limited to %d bytes.", SP_REQ_MAX_STOP_LEN);
    if (strlen(json_string_value(v)) != n) return sp_api_bad(e, param, "Stop strings must not contain NUL.");
    if (r->n_stops == SP_REQ_MAX_STOPS) return sp_api_bad(e, param, "At most %d stop strings are allowed.", SP_REQ_MAX_STOPS);
    r->stops[r->n_stops++] = sp_xstrdup(json_string_value(v));
    return 0;
}

static int parse_stop(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return add_stop(r, v, "stop", e);
    if (!json_is_array(v)) return wrong_type(e, "stop", "a string or an array of strings", v);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
        if (add_stop(r, x, "stop", e)) return -1;
    return 0;
}

static int parse_logit_bias(json_t *o, sp_req *r, int n_vocab, sp_api_err *e) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return wrong_type(e, "logit_bias", "an object", v);
    r->bias = sp_xcalloc(json_object_size(v) + 1, sizeof *r->bias);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab)
            return sp_api_bad(e, "logit_bias", "Invalid key '%s' in logit_bias: expected a token id in [0, %d).", key, n_vocab);
        if (!json_is_number(x)) return wrong_type(e, "logit_bias", "a number", x);
        const double b = json_number_value(x);
        char got[32];
        if (!(b >= -100 && b <= 100))
            return sp_api_bad(e, "logit_bias", "logit_bias values must be between -100 and 100 (got %s for %s).",
                       exact(b, got), key);
        r->bias[r->sampling.n_bias++] = (sp_logit_bias){ (int32_t)id, (float)b };
    }
    r->sampling.bias = r->bias;
    return 0;
}

/* "content": a string, or an array of {"type": "text", "text": ...} parts
 * (joined with newlines), or null (an empty assistant turn). */
static int message_content(json_t *c, char **out, sp_api_err *e) {
    if (!c || json_is_null(c)) { *out = sp_xstrdup(""); return 0; }
    if (json_is_string(c)) {
        if (strlen(json_string_value(c)) != json_string_length(c))
            return sp_api_bad(e, "messages", "Message content must not contain NUL.");
        *out = sp_xstrdup(json_string_value(c));
        return 0;
    }
    if (!json_is_array(c)) return wrong_type(e, "messages", "a string or an array of content parts", c);
    size_t n = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text))
            return sp_api_bad(e, "messages", "Only content parts of type 'text' are supported.");
        n += json_string_length(text) + 1;
    }
    char *s = sp_xmalloc(n + 1);
    size_t w = 0;
    json_array_foreach(c, i, p) {
        json_t *text = json_object_get(p, "text");
        if (w) s[w++] = '\n';
        memcpy(s + w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    s[w] = 0;
    *out = s;
    if (strlen(s) != w) return sp_api_bad(e, "messages", "Message content must not contain NUL.");
    return 0;
}

/* Appends a parsed message; a tool result right after another one joins
 * its turn (one user turn per run of results: Gemma needs alternation). */
static void add_message(sp_req *r, const char *role, char *content, bool tool, bool *prev_tool) {
    if (tool && *prev_tool) {
        sp_chat_msg *last = &r->msgs[r->n_msgs - 1];
        sp_tbuf b = { 0 };
        sp_tbuf_puts(&b, last->content);
        sp_tbuf_puts(&b, "\n");
        sp_tbuf_puts(&b, content);
        free((char *)last->content);
        free(content);
        last->content = b.s;
        return;
    }
    r->msgs[r->n_msgs].role = sp_xstrdup(role);
    r->msgs[r->n_msgs].content = content;
    r->n_msgs++;
    *prev_tool = tool;
}

/* One message: role, content, and the tool-call fields (see tools.c). */
static int parse_message(json_t *m, size_t i, sp_req *r, bool *prev_tool, sp_api_err *e) {
    if (!json_is_object(m)) return wrong_type(e, "messages", "an object", m);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) return sp_api_bad(e, "messages", "messages[%zu].role must be a string.", i);
    const char *rs = json_string_value(role);
    if (!strcmp(rs, "developer")) rs = "system";
    const bool tool = !strcmp(rs, "tool");
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && !tool)
        return sp_api_bad(e, "messages", "messages[%zu].role '%s' is not supported (system, developer, user, assistant, tool).", i, rs);
    if (tool && sp_tools_tool_msg(m, i, e)) return -1;
    char *content = NULL;
    if (message_content(json_object_get(m, "content"), &content, e)) { free(content); return -1; }
    if (!strcmp(rs, "assistant") && sp_tools_assistant(m, i, &content, e)) { free(content); return -1; }
    if (tool) {
        char *block = sp_tools_response_block(content);
        free(content);
        content = block;
    }
    add_message(r, tool ? "user" : rs, content, tool, prev_tool);
    return 0;
}

static int parse_messages(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "messages");
    if (!v || json_is_null(v)) return sp_api_bad(e, "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(v)) return wrong_type(e, "messages", "an array", v);
    if (json_array_size(v) == 0) return sp_api_bad(e, "messages", "'messages' must contain at least one message.");
    r->msgs = sp_xcalloc(json_array_size(v), sizeof *r->msgs);
    bool prev_tool = false;
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m)
        if (parse_message(m, i, r, &prev_tool, e)) return -1;
    return 0;
}

/* A list of token ids, each in [0, n_vocab). */
static int token_list(json_t *a, sp_req *r, int n_vocab, sp_api_err *e) {
    r->prompt_ids = sp_xmalloc((json_array_size(a) + 1) * sizeof(int32_t));
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= n_vocab)
            return sp_api_bad(e, "prompt", "Token ids in 'prompt' must be integers in [0, %d).", n_vocab);
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

/* "prompt": a string, a list of one string, a list of token ids, or a list
 * of one such list (one prompt per request: n = 1). */
static int parse_prompt(json_t *o, sp_req *r, int n_vocab, sp_api_err *e) {
    json_t *v = json_object_get(o, "prompt");
    if (!v || json_is_null(v)) return sp_api_bad(e, "prompt", "Missing required parameter: 'prompt'.");
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v))
            return sp_api_bad(e, "prompt", "'prompt' must not contain NUL.");
        r->prompt = sp_xstrdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) return wrong_type(e, "prompt", "a string or an array", v);
    if (json_array_size(v) == 0) return sp_api_bad(e, "prompt", "'prompt' must not be empty.");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return sp_api_bad(e, "prompt", "Only one prompt per request is supported.");
    return token_list(v, r, n_vocab, e);
}

static int parse_speculative(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "speculative");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return wrong_type(e, "speculative", "an object", v);
    json_t *m = json_object_get(v, "method");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) return wrong_type(e, "speculative.method", "a string", m);
        if (json_string_length(m) == 0 || json_string_length(m) >= sizeof r->method)
            return sp_api_bad(e, "speculative.method", "Unknown speculative method '%s'.", json_string_value(m));
        snprintf(r->method, sizeof r->method, "%s", json_string_value(m));
    }
    json_t *d = json_object_get(v, "draft_max");
    if (!d || json_is_null(d)) return 0;
    if (json_is_string(d) && !strcmp(json_string_value(d), "adaptive")) {
        r->draft_max = SP_DRAFT_ADAPTIVE;
        return 0;
    }
    if (!json_is_integer(d)) return wrong_type(e, "speculative.draft_max", "an integer or \"adaptive\"", d);
    if (json_integer_value(d) < 0 || json_integer_value(d) > SP_MAX_DRAFT)
        return sp_api_bad(e, "speculative.draft_max", "'speculative.draft_max' must be between 0 and %d.", SP_MAX_DRAFT);
    r->draft_max = (int)json_integer_value(d);
    return 0;
}

/* logprobs: a boolean with top_logprobs (chat) or an integer 0..5 (the
 * legacy completions API, where it is the number of alternatives). */
static int parse_logprobs(json_t *o, sp_req *r, sp_api_err *e) {
    long long k = 0;
    if (r->kind == SP_API_CHAT) {
        if (get_bool(o, "logprobs", &r->logprobs, e)) return -1;
        bool set = false;
        if (get_int(o, "top_logprobs", 0, SP_REQ_MAX_TOP_LOGPROBS, &k, &set, e)) return -1;
        if (set && !r->logprobs && k > 0)
            return sp_api_bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
        r->top_logprobs = (int)k;
        return 0;
    }
    json_t *v = json_object_get(o, "logprobs");
    if (json_is_boolean(v)) return wrong_type(e, "logprobs", "an integer", v);
    bool set = false;
    if (get_int(o, "logprobs", 0, 5, &k, &set, e)) return -1;
    r->logprobs = set;
    r->top_logprobs = (int)k;
    return 0;
}

/* Fields of the legacy completions API this server cannot honour. */
static int parse_completion_extras(json_t *o, sp_api_err *e) {
    bool echo = false;
    if (get_bool(o, "echo", &echo, e)) return -1;
    if (echo) return sp_api_bad(e, "echo", "'echo' is not supported.");
    long long best_of = 1;
    if (get_int(o, "best_of", 1, 1, &best_of, NULL, e)) return -1;
    json_t *s = json_object_get(o, "suffix");
    if (s && !json_is_null(s)) {
        if (!json_is_string(s)) return wrong_type(e, "suffix", "a string", s);
        if (json_string_length(s)) return sp_api_bad(e, "suffix", "'suffix' is not supported.");
    }
    return 0;
}

static int parse_sampling(json_t *o, sp_req *r, int n_vocab, sp_api_err *e) {
    sp_sampler_params *p = &r->sampling;
    long long k = 0, seed = 0;
    bool set = false;
    if (get_number(o, "temperature", 0, 2, &p->temperature, e)) return -1;
    if (get_number(o, "top_p", 0, 1, &p->top_p, e)) return -1;
    if (!(p->top_p > 0)) return sp_api_bad(e, "top_p", "'top_p' must be greater than 0.");
    if (get_int(o, "top_k", -1, 1 << 30, &k, &set, e)) return -1;
    if (set) p->top_k = k < 0 ? 0 : (int)k;       /* absent: the server's default */
    if (get_number(o, "min_p", 0, 1, &p->min_p, e)) return -1;
    if (get_number(o, "presence_penalty", -2, 2, &p->presence_penalty, e)) return -1;
    if (get_number(o, "frequency_penalty", -2, 2, &p->frequency_penalty, e)) return -1;
    if (get_number(o, "repetition_penalty", 0.01, 100, &p->repeat_penalty, e)) return -1;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &r->seed_set, e)) return -1;
    p->seed = (uint64_t)seed;
    return parse_logit_bias(o, r, n_vocab, e);
}

/* "response_format": {"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}}.  The schema
 * is kept as text for the converter (constrain.c); strict or not, the output
 * is held to the schema (a looser "strict": false would only lose checks). */
static int parse_json_schema(json_t *js, sp_req *r, sp_api_err *e) {
    const char *P = "response_format";
    if (!json_is_object(js))
        return sp_api_bad(e, P, "'response_format.json_schema' must be an object with a 'schema'.");
    json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema"),
           *strict = json_object_get(js, "strict"), *desc = json_object_get(js, "description");
    if (name && !json_is_null(name) && (!json_is_string(name) || !sp_tools_name_ok(json_string_value(name), json_string_length(name))))
        return sp_api_bad(e, P, "'response_format.json_schema.name' must be a string of 1 to 64 characters a-z, A-Z, 0-9, '_' or '-'.");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return sp_api_bad(e, P, "'response_format.json_schema.strict' must be a boolean.");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return sp_api_bad(e, P, "'response_format.json_schema.description' must be a string.");
    if (!json_is_object(schema))
        return sp_api_bad(e, P, "'response_format.json_schema.schema' must be a JSON schema (an object).");
    r->rf_schema = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!r->rf_schema) return sp_api_bad(e, P, "'response_format.json_schema.schema' cannot be serialized.");
    r->rf = SP_RF_JSON_SCHEMA;
    return 0;
}

static int parse_response_format(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "response_format");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return wrong_type(e, "response_format", "an object", v);
    json_t *type = json_object_get(v, "type");
    if (!json_is_string(type)) return sp_api_bad(e, "response_format", "'response_format.type' must be a string.");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text")) return 0;
    if (!strcmp(t, "json_object")) { r->rf = SP_RF_JSON_OBJECT; return 0; }
    if (!strcmp(t, "json_schema")) return parse_json_schema(json_object_get(v, "json_schema"), r, e);
    return sp_api_bad(e, "response_format", "Invalid 'response_format.type' '%.64s': expected 'text', 'json_object' or 'json_schema'.", t);
}

/* "grammar" (GBNF, llama.cpp's field), response_format and tools; the
 * combinations with two sources of constraint are refused, except
 * tool_choice "auto" with a response_format (the output is then either
 * calls or that JSON). */
static int parse_constraints(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *g = json_object_get(o, "grammar");
    if (g && !json_is_null(g)) {
        if (!json_is_string(g)) return wrong_type(e, "grammar", "a string", g);
        if (strlen(json_string_value(g)) != json_string_length(g)) return sp_api_bad(e, "grammar", "'grammar' must not contain NUL.");
        if (json_string_length(g)) r->grammar = sp_xstrdup(json_string_value(g));
    }
    if (parse_response_format(o, r, e) || sp_tools_parse(o, r, e)) return -1;
    if (r->grammar && r->rf != SP_RF_TEXT)
        return sp_api_bad(e, "grammar", "'grammar' and a JSON 'response_format' cannot be used together: both constrain the output.");
    if (r->grammar && sp_req_uses_tools(r))
        return sp_api_bad(e, "grammar", "'grammar' and 'tools' cannot be used together (unless 'tool_choice' is \"none\"): "
                   "tool calls have their own grammar.");
    if (r->rf != SP_RF_TEXT && (r->tool_choice == SP_TC_REQUIRED || r->tool_choice == SP_TC_NAMED))
        return sp_api_bad(e, "response_format", "A JSON 'response_format' cannot be used with a 'tool_choice' that forces a call.");
    return 0;
}

static int parse_fields(json_t *o, sp_req *r, int n_vocab, sp_api_err *e) {
    long long n = 1, max_tokens = -1;
    if (get_string(o, "model", &r->model, e)) return -1;
    if (r->kind == SP_API_CHAT ? parse_messages(o, r, e) : parse_prompt(o, r, n_vocab, e)) return -1;
    if (get_int(o, "max_tokens", 1, INT32_MAX, &max_tokens, NULL, e)) return -1;
    if (r->kind == SP_API_CHAT &&
        get_int(o, "max_completion_tokens", 1, INT32_MAX, &max_tokens, NULL, e)) return -1;
    r->max_tokens = (int)max_tokens;
    if (get_int(o, "n", 1, 1 << 20, &n, NULL, e)) return -1;
    if (n != 1) return sp_api_bad(e, "n", "Only n = 1 is supported.");
    if (parse_sampling(o, r, n_vocab, e)) return -1;
    if (parse_stop(o, r, e)) return -1;
    if (get_bool(o, "stream", &r->stream, e)) return -1;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return wrong_type(e, "stream_options", "an object", so);
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    if (parse_logprobs(o, r, e)) return -1;
    char *user = NULL;
    int rc = get_string(o, "user", &user, e);
    free(user);
    if (rc) return -1;
    if (get_bool(o, "ignore_eos", &r->ignore_eos, e)) return -1;
    bool cache_prompt = true;
    if (get_bool(o, "cache_prompt", &cache_prompt, e)) return -1;
    r->no_cache = !cache_prompt;
    if (r->kind == SP_API_COMPLETION && parse_completion_extras(o, e)) return -1;
    if (parse_constraints(o, r, e)) return -1;
    return parse_speculative(o, r, e);
}

int sp_req_parse(sp_api_kind kind, const char *body, size_t len, int n_vocab, sp_req *r,
                 sp_api_err *err) {
    return sp_req_parse_with(kind, body, len, n_vocab, NULL, r, err);
}

int sp_req_parse_with(sp_api_kind kind, const char *body, size_t len, int n_vocab,
                      const sp_sampler_params *defaults, sp_req *r, sp_api_err *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    /* omitted fields: the server's defaults (llama.cpp's, not OpenAI's
     * temperature 1 with no filters: see props.c) */
    r->sampling = defaults ? *defaults : sp_serve_sampling_defaults();
    r->sampling.bias = NULL;
    r->sampling.n_bias = 0;
    r->draft_max = SP_REQ_DRAFT_DEFAULT;
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o)
        return sp_api_fail(err, 400, INVALID, NULL, NULL,
                           "We could not parse the JSON body of your request: %s (line %d, column %d).",
                           je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(o)) rc = sp_api_bad(err, NULL, "The request body must be a JSON object.");
    else rc = parse_fields(o, r, n_vocab, err);
    json_decref(o);
    if (rc) sp_req_free(r);
    return rc;
}

void sp_req_free(sp_req *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
    }
    free(r->msgs);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->bias);
    free(r->grammar);
    free(r->rf_schema);
    for (int i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].description);
        free(r->tools[i].parameters);
    }
    free(r->tools);
    free(r->tools_system);
    const sp_api_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}

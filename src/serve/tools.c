/*
 * Tool calls: the request fields (tools, tool_choice, parallel_tool_calls),
 * the messages of a tool loop (role "tool", assistant "tool_calls") turned
 * into plain system/user/assistant messages for sp_chat_render, and the
 * tool calls parsed back out of the generated text (whole, or as a stream
 * of OpenAI-style deltas).  No model or grammar here: constrain.c builds
 * the grammars.
 *
 * Decisions (the conventions a client and the model both see):
 *
 *  - Format: Hermes style, which ChatML models (SmolLM2, Qwen, Hermes) were
 *    trained on and Gemma follows from the instruction.  The tools go into
 *    the system message (after the client's system text, or after the
 *    template's default system prompt, or alone) as a <tools> block, one
 *    JSON object per function {"name", "description", "parameters"}, with
 *    a short instruction of our own wording.  A call is
 *        <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 *    and parallel calls are such blocks separated by "\n".
 *  - History: an assistant message with tool_calls renders as its content
 *    (if any), "\n", then its calls as blocks (arguments re-serialized,
 *    so they read exactly like what the grammar makes the model write);
 *    role "tool" messages (tool_call_id required, as OpenAI requires it)
 *    render as a user turn of <tool_response>\n...\n</tool_response>
 *    blocks, consecutive ones merged into one turn (Gemma needs
 *    user/assistant alternation).
 *  - tool_choice "none": the tools are not rendered at all and the output is
 *    not parsed for calls (the model cannot call what it was not shown).
 *    "auto" (the default with tools): a lazy grammar from "<tool_call>" on;
 *    "required" / a named function: the whole output is calls.
 *  - Output: text outside the blocks is the content (null when only
 *    whitespace is left and there are calls); whitespace around blocks is
 *    dropped.  A block that is not a complete call (max_tokens cut it) stays
 *    content in a whole response; finish_reason is "tool_calls" only when a
 *    valid call was made and the generation ended by itself (stop).
 *  - Streaming: text from "<tool_call>" on is held back; once the call's
 *    name is known a delta {index, id, type, function: {name, arguments: ""}}
 *    goes out, then the argument text as function.arguments fragments (all
 *    but what may be the block's closing "}"), so the fragments join to the
 *    same arguments text the whole response has.  A call cut short after its
 *    name went out stays a (truncated) call, with finish_reason "length".
 *  - Call ids: "call_" + 16 hex digits derived from the response id and the
 *    call's index (unique per response, stable between stream and whole).
 */
#include "serve/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_OPEN "<tool_call>"
#define TAG_CLOSE "</tool_call>"


bool sp_tools_name_ok(const char *s, size_t n) {
    if (n < 1 || n > SP_REQ_MAX_TOOL_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool tl_json_name_ok(const json_t *v) {
    return json_is_string(v) && sp_tools_name_ok(json_string_value(v), json_string_length(v));
}

/* ----------------------------------------------------------------------------
 * Request fields
 * ------------------------------------------------------------------------- */

static int tl_tool(json_t *t, size_t i, sp_req_tool *out, sp_api_err *e) {
    if (!json_is_object(t)) return sp_api_bad(e, "tools", "tools[%zu] must be an object.", i);
    json_t *type = json_object_get(t, "type"), *f = json_object_get(t, "function");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return sp_api_bad(e, "tools", "tools[%zu].type must be \"function\" (the only tool type supported).", i);
    if (!json_is_object(f)) return sp_api_bad(e, "tools", "tools[%zu].function must be an object.", i);
    json_t *name = json_object_get(f, "name"), *desc = json_object_get(f, "description"),
           *params = json_object_get(f, "parameters");
    if (!tl_json_name_ok(name))
        return sp_api_bad(e, "tools", "tools[%zu].function.name must be a string of 1 to %d characters "
                      "a-z, A-Z, 0-9, '_' or '-'.", i, SP_REQ_MAX_TOOL_NAME);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return sp_api_bad(e, "tools", "tools[%zu].function.description must be a string.", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return sp_api_bad(e, "tools", "tools[%zu].function.parameters must be a JSON schema object.", i);
    out->name = sp_xstrdup(json_string_value(name));
    if (json_is_string(desc)) {
        if (strlen(json_string_value(desc)) != json_string_length(desc))
            return sp_api_bad(e, "tools", "tools[%zu].function.description must not contain NUL.", i);
        out->description = sp_xstrdup(json_string_value(desc));
    }
    out->parameters = json_is_object(params) ? json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER)
                                             : sp_xstrdup("{\"type\":\"object\",\"properties\":{}}");
    if (!out->parameters)
        return sp_api_bad(e, "tools", "tools[%zu].function.parameters cannot be serialized.", i);
    return 0;
}

static int tl_tools(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "tools");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return sp_api_bad(e, "tools", "Invalid type for 'tools': expected an array.");
    if (json_array_size(v) == 0) return 0;       /* as if absent */
    if (r->kind != SP_API_CHAT) return sp_api_bad(e, "tools", "'tools' is supported on /v1/chat/completions only.");
    if (json_array_size(v) > SP_REQ_MAX_TOOLS)
        return sp_api_bad(e, "tools", "At most %d tools are allowed (got %zu).", SP_REQ_MAX_TOOLS, json_array_size(v));
    r->tools = sp_xcalloc(json_array_size(v), sizeof *r->tools);
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        r->n_tools++;                 /* freed by sp_req_free even if half filled */
        if (tl_tool(t, i, &r->tools[i], e)) return -1;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(r->tools[k].name, r->tools[i].name))
                return sp_api_bad(e, "tools", "tools[%zu].function.name '%s' is already the name of tools[%zu].",
                              i, r->tools[i].name, k);
    }
    return 0;
}

static int tl_find(const sp_req *r, const char *name) {
    for (int i = 0; i < r->n_tools; i++)
        if (!strcmp(r->tools[i].name, name)) return i;
    return -1;
}

static int tl_choice(json_t *o, sp_req *r, sp_api_err *e) {
    json_t *v = json_object_get(o, "tool_choice");
    r->tool_choice = r->n_tools ? SP_TC_AUTO : SP_TC_NONE;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "none")) { r->tool_choice = SP_TC_NONE; return 0; }
        if (!strcmp(s, "auto")) r->tool_choice = SP_TC_AUTO;
        else if (!strcmp(s, "required")) r->tool_choice = SP_TC_REQUIRED;
        else return sp_api_bad(e, "tool_choice", "Invalid 'tool_choice' \"%.64s\": expected \"none\", \"auto\", "
                           "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}.", s);
    } else if (json_is_object(v)) {
        json_t *type = json_object_get(v, "type"), *f = json_object_get(v, "function");
        json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_string(name))
            return sp_api_bad(e, "tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}.");
        r->tool_choice = SP_TC_NAMED;
        r->tool_named = r->n_tools ? tl_find(r, json_string_value(name)) : -1;
        if (r->n_tools && r->tool_named < 0)
            return sp_api_bad(e, "tool_choice", "'tool_choice' names the function '%.64s', which is not in 'tools'.",
                          json_string_value(name));
    } else {
        return sp_api_bad(e, "tool_choice", "Invalid type for 'tool_choice': expected a string or an object.");
    }
    if (!r->n_tools)
        return sp_api_bad(e, "tool_choice", "'tool_choice' is only allowed when 'tools' are given.");
    return 0;
}

/* The <tools> block of the system message. */
static char *tl_system(const sp_req *r) {
    sp_tbuf b = { 0 };
    sp_tbuf_puts(&b, "# Tools\n\nYou may call one or more of the functions described below, as JSON "
                       "signatures inside <tools></tools>, to help with the request.\n<tools>\n");
    for (int i = 0; i < r->n_tools; i++) {
        json_t *o = json_object(), *params = json_loads(r->tools[i].parameters, 0, NULL);
        json_object_set_new(o, "name", json_string(r->tools[i].name));
        if (r->tools[i].description) json_object_set_new(o, "description", json_string(r->tools[i].description));
        json_object_set_new(o, "parameters", params ? params : json_object());
        char *s = json_dumps(o, JSON_PRESERVE_ORDER);
        json_decref(o);
        if (s) { sp_tbuf_puts(&b, s); sp_tbuf_puts(&b, "\n"); }
        free(s);
    }
    sp_tbuf_puts(&b, "</tools>\n\nTo call a function, answer with its name and arguments as one JSON object "
                       "inside <tool_call></tool_call> tags, like this:\n" TAG_OPEN "\n"
                       "{\"name\": \"function_name\", \"arguments\": {\"argument\": \"value\"}}\n" TAG_CLOSE);
    if (r->parallel_tool_calls) sp_tbuf_puts(&b, "\nFor several calls, write one such block after another.");
    return b.s;
}

int sp_tools_parse(json_t *o, sp_req *r, sp_api_err *e) {
    r->parallel_tool_calls = true;
    if (tl_tools(o, r, e) || tl_choice(o, r, e)) return -1;
    json_t *p = json_object_get(o, "parallel_tool_calls");
    if (p && !json_is_null(p)) {
        if (!json_is_boolean(p))
            return sp_api_bad(e, "parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.");
        r->parallel_tool_calls = json_is_true(p);
    }
    if (r->n_tools && r->tool_choice != SP_TC_NONE) r->tools_system = tl_system(r);
    return 0;
}

/* ----------------------------------------------------------------------------
 * Messages
 * ------------------------------------------------------------------------- */

char *sp_tools_response_block(const char *content) {
    sp_tbuf b = { 0 };
    sp_tbuf_puts(&b, "<tool_response>\n");
    sp_tbuf_puts(&b, content);
    sp_tbuf_puts(&b, "\n</tool_response>");
    return b.s;
}

/* One call of an assistant message as a block (appended to b). */
static int tl_call_block(json_t *c, size_t i, size_t k, sp_tbuf *b, sp_api_err *e) {
    if (!json_is_object(c)) return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu] must be an object.", i, k);
    json_t *type = json_object_get(c, "type"), *f = json_object_get(c, "function");
    if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu].type must be \"function\".", i, k);
    json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
    json_t *args = json_is_object(f) ? json_object_get(f, "arguments") : NULL;
    if (!tl_json_name_ok(name))
        return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu].function.name must be a valid function name.", i, k);
    json_t *parsed = NULL;
    if (json_is_string(args)) {
        json_error_t je;
        parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &je);
        if (!parsed)
            return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu].function.arguments is not valid JSON: %s.",
                          i, k, je.text);
    } else if (json_is_object(args)) {
        parsed = json_incref(args);
    } else {
        return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu].function.arguments must be a string of JSON.", i, k);
    }
    json_t *o = json_object();
    json_object_set(o, "name", name);
    json_object_set_new(o, "arguments", parsed);
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    json_decref(o);
    if (!s) return sp_api_bad(e, "messages", "messages[%zu].tool_calls[%zu] cannot be serialized.", i, k);
    if (k) sp_tbuf_puts(b, "\n");
    sp_tbuf_puts(b, TAG_OPEN "\n");
    sp_tbuf_puts(b, s);
    sp_tbuf_puts(b, "\n" TAG_CLOSE);
    free(s);
    return 0;
}

int sp_tools_assistant(json_t *m, size_t i, char **content, sp_api_err *e) {
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return sp_api_bad(e, "messages", "messages[%zu].tool_calls must be an array.", i);
    if (json_array_size(calls) == 0) return 0;
    sp_tbuf b = { 0 };
    sp_tbuf_puts(&b, *content);
    if (**content) sp_tbuf_puts(&b, "\n");
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c)
        if (tl_call_block(c, i, k, &b, e)) { free(b.s); return -1; }
    free(*content);
    *content = b.s;
    return 0;
}

int sp_tools_tool_msg(json_t *m, size_t i, sp_api_err *e) {
    json_t *id = json_object_get(m, "tool_call_id");
    if (!json_is_string(id) || json_string_length(id) == 0)
        return sp_api_bad(e, "messages", "messages[%zu] has role 'tool' but no 'tool_call_id' (the id of the call it answers).", i);
    return 0;
}

sp_chat_msg *sp_tools_with_system(const sp_chat_msg *msgs, int n, const char *block, const char *defsys,
                                  int *n_out, char **owned) {
    const bool has_sys = n > 0 && !strcmp(msgs[0].role, "system");
    const char *base = has_sys ? msgs[0].content : defsys;
    sp_tbuf b = { 0 };
    if (base && *base) { sp_tbuf_puts(&b, base); sp_tbuf_puts(&b, "\n\n"); }
    sp_tbuf_puts(&b, block);
    *owned = b.s;
    sp_chat_msg *out = sp_xcalloc((size_t)n + 1, sizeof *out);
    out[0] = (sp_chat_msg){ "system", b.s };
    const int from = has_sys ? 1 : 0;
    for (int i = from; i < n; i++) out[1 + i - from] = msgs[i];
    *n_out = n + 1 - from;
    return out;
}

/* ----------------------------------------------------------------------------
 * Output: <tool_call> blocks out of the generated text
 * ------------------------------------------------------------------------- */

static bool tc_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static const char *tc_find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    return n >= k ? memmem(s, n, needle, k) : NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t tc_partial(const char *s, size_t n, const char *tag) {
    const size_t k = strlen(tag);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

static void ev_put(sp_tc_out *o, sp_tc_kind kind, int index, const char *s, size_t n) {
    if (!n && kind != SP_TC_START) return;
    sp_tc_event *last = o->n_ev ? &o->ev[o->n_ev - 1] : NULL;
    if (last && kind != SP_TC_START && last->kind == kind && last->index == index) {
        last->text = sp_xrealloc(last->text, last->n + n + 1);
        memcpy(last->text + last->n, s, n);
        last->n += n;
        last->text[last->n] = 0;
        return;
    }
    SP_VEC_GROW(o->ev, o->cap_ev, o->n_ev + 1);
    sp_tc_event *ev = &o->ev[o->n_ev++];
    *ev = (sp_tc_event){ .kind = kind, .index = index, .n = n };
    ev->text = sp_xmalloc(n + 1);
    memcpy(ev->text, s, n);
    ev->text[n] = 0;
}

void sp_tc_out_free(sp_tc_out *o) {
    for (int i = 0; i < o->n_ev; i++) free(o->ev[i].text);
    free(o->ev);
    memset(o, 0, sizeof *o);
}

void sp_tc_init(sp_tcparse *p, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->seed = seed;
}

void sp_tc_free(sp_tcparse *p) {
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].args);
        free(p->calls[i].raw);
    }
    free(p->calls);
    sp_tbuf_free(&p->buf);
    sp_tbuf_free(&p->content);
    sp_tbuf_free(&p->gap);
    memset(p, 0, sizeof *p);
}

int sp_tc_n_valid(const sp_tcparse *p) {
    int n = 0;
    for (int i = 0; i < p->n_calls; i++) n += p->calls[i].valid;
    return n;
}

static void tc_text(sp_tcparse *p, const char *s, size_t n, sp_tc_out *o) {
    sp_tbuf_put(&p->content, s, n);
    ev_put(o, SP_TC_TEXT, 0, s, n);
}

/* The whitespace held before a block goes out once text follows. */
static void tc_gap(sp_tcparse *p, sp_tc_out *o) {
    /* none at the start of content that follows calls */
    if (p->gap.n && !(p->content.n == 0 && sp_tc_n_valid(p) > 0)) tc_text(p, p->gap.s, p->gap.n, o);
    p->gap.n = 0;
}

/* Drops the first n bytes of the buffer. */
static void tc_consume(sp_tcparse *p, size_t n) {
    memmove(p->buf.s, p->buf.s + n, p->buf.n - n + 1);
    p->buf.n -= n;
}

static sp_tc_call *tc_cur(sp_tcparse *p) { return &p->calls[p->n_calls - 1]; }

/* Matches lit at s[*i..n): 1 matched, 0 the text ends inside it, -1 differs. */
static int tc_lit(const char *s, size_t n, size_t *i, const char *lit) {
    const size_t k = strlen(lit), have = n - *i < k ? n - *i : k;
    if (memcmp(s + *i, lit, have)) return -1;
    if (have < k) return 0;
    *i += k;
    return 1;
}

static void tc_skip_ws(const char *s, size_t n, size_t *i) {
    while (*i < n && tc_ws(s[*i])) (*i)++;
}

/* The head of a call, `{"name": "NAME", "arguments": ` (any whitespace
 * between tokens), at the start of s[0..n): 1 with its length (up to the
 * first byte of the arguments) and the name, 0 if s may still become one,
 * -1 if it cannot. */
static int tc_head(const char *s, size_t n, size_t *len, char name[SP_REQ_MAX_TOOL_NAME + 1]) {
    static const char *const parts[] = { "{", "\"name\"", ":", "\"" };
    size_t i = 0;
    int rc;
    for (int k = 0; k < 4; k++) {
        tc_skip_ws(s, n, &i);
        if ((rc = tc_lit(s, n, &i, parts[k])) <= 0) return rc;
    }
    size_t start = i;
    while (i < n && s[i] != '"') {
        if (i - start >= SP_REQ_MAX_TOOL_NAME || !sp_tools_name_ok(s + i, 1)) return -1;
        i++;
    }
    if (i == n) return 0;
    if (i == start) return -1;
    memcpy(name, s + start, i - start);
    name[i - start] = 0;
    i++;
    static const char *const tail[] = { ",", "\"arguments\"", ":" };
    for (int k = 0; k < 3; k++) {
        tc_skip_ws(s, n, &i);
        if ((rc = tc_lit(s, n, &i, tail[k])) <= 0) return rc;
    }
    tc_skip_ws(s, n, &i);
    if (i == n) return 0;
    *len = i;
    return 1;
}

static void tc_new_call(sp_tcparse *p) {
    SP_VEC_GROW(p->calls, p->cap_calls, p->n_calls + 1);
    sp_tc_call *c = &p->calls[p->n_calls++];
    memset(c, 0, sizeof *c);
    c->at = p->content.n;
    snprintf(c->id, sizeof c->id, "call_%016llx",
             (unsigned long long)sp_hash64(p->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)p->n_calls)));
}

static void tc_announce(sp_tcparse *p, const char *name, sp_tc_out *o) {
    sp_tc_call *c = tc_cur(p);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->announced = true;
    ev_put(o, SP_TC_START, p->n_calls - 1, c->name, strlen(c->name));
}

/* The raw block (for content) of the current call: "<tool_call>" + n bytes
 * of the buffer. */
static void tc_keep_raw(sp_tcparse *p, size_t n) {
    sp_tc_call *c = tc_cur(p);
    c->n_raw = strlen(TAG_OPEN) + n;
    c->raw = sp_xmalloc(c->n_raw + 1);
    memcpy(c->raw, TAG_OPEN, strlen(TAG_OPEN));
    memcpy(c->raw + strlen(TAG_OPEN), p->buf.s, n);
    c->raw[c->n_raw] = 0;
}

/* Where the arguments given so far may safely end: before the last '}'
 * (it may close the call's object) and the whitespace before it. */
static size_t tc_args_safe(const char *s, size_t n) {
    const char *b = memrchr(s, '}', n);
    size_t k = b ? (size_t)(b - s) : n;
    while (k > 0 && tc_ws(s[k - 1])) k--;
    return k;
}

static bool tc_args_valid(const char *s, size_t n) {
    json_t *v = json_loadb(s, n, 0, NULL);
    const bool ok = json_is_object(v);
    json_decref(v);
    return ok;
}

/* A block that is not in the head/arguments form ends: valid if it is one
 * JSON object {"name": NAME, "arguments": {...}}; otherwise its text is
 * content. */
static void tc_close_raw(sp_tcparse *p, size_t inner, sp_tc_out *o) {
    sp_tc_call *c = tc_cur(p);
    json_t *v = json_loadb(p->buf.s, inner, 0, NULL);
    json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "arguments");
    tc_keep_raw(p, inner + strlen(TAG_CLOSE));
    if (tl_json_name_ok(name) && json_is_object(args)) {
        tc_announce(p, json_string_value(name), o);
        c->args = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        c->n_args = c->args ? strlen(c->args) : 0;
        c->valid = c->closed = c->args != NULL;
        ev_put(o, SP_TC_ARGS, p->n_calls - 1, c->args ? c->args : "", c->n_args);
    } else {
        tc_gap(p, o);
        tc_text(p, c->raw, c->n_raw, o);
        free(c->raw);
        p->n_calls--;                /* not a call */
    }
    json_decref(v);
}

/* The arguments of a call in the head form end at inner (the close tag). */
static void tc_close_args(sp_tcparse *p, size_t inner, sp_tc_out *o) {
    sp_tc_call *c = tc_cur(p);
    const char *a = p->buf.s + p->head;
    size_t end = inner - p->head;
    while (end > 0 && tc_ws(a[end - 1])) end--;
    if (end > 0 && a[end - 1] == '}') end--;
    while (end > 0 && tc_ws(a[end - 1])) end--;
    if (end > p->emitted) ev_put(o, SP_TC_ARGS, p->n_calls - 1, a + p->emitted, end - p->emitted);
    c->args = sp_xmalloc(end + 1);
    memcpy(c->args, a, end);
    c->args[end] = 0;
    c->n_args = end;
    c->closed = true;
    c->valid = end >= p->emitted && tc_args_valid(a, end);
    tc_keep_raw(p, inner + strlen(TAG_CLOSE));
}

/* One step of the state machine over the buffer; false when it needs more
 * text. */
static bool tc_step(sp_tcparse *p, sp_tc_out *o) {
    const char *s = p->buf.s;
    const size_t n = p->buf.n;
    if (p->st == SP_TC_ST_TEXT) {
        const char *tag = tc_find(s, n, TAG_OPEN);
        size_t k = tag ? (size_t)(tag - s) : n - tc_partial(s, n, TAG_OPEN);
        size_t keep = k;             /* trailing whitespace waits for what follows */
        while (keep > 0 && tc_ws(s[keep - 1])) keep--;
        if (keep > 0) {
            size_t lead = 0;         /* content does not start with the space after blocks */
            if (p->n_calls > 0 && p->content.n == 0) {
                while (tc_ws(s[lead])) lead++;
                p->gap.n = 0;
            }
            tc_gap(p, o);
            tc_text(p, s + lead, keep - lead, o);
        }
        if (!tag) { tc_consume(p, keep); return false; }
        sp_tbuf_put(&p->gap, s + keep, k - keep);   /* space before a block: dropped at the ends */
        tc_consume(p, k + strlen(TAG_OPEN));
        tc_new_call(p);
        p->st = SP_TC_ST_HEAD;
        return true;
    }
    const char *close = tc_find(s, n, TAG_CLOSE);
    if (p->st == SP_TC_ST_HEAD) {
        char name[SP_REQ_MAX_TOOL_NAME + 1];
        size_t len = 0;
        const int rc = tc_head(s, close ? (size_t)(close - s) : n, &len, name);
        if (rc == 0 && !close) return false;
        if (rc == 1) {
            tc_announce(p, name, o);
            p->head = len;
            p->emitted = 0;
            p->st = SP_TC_ST_ARGS;
        } else {
            p->st = SP_TC_ST_RAW;
        }
        return true;
    }
    if (!close) {
        if (p->st == SP_TC_ST_ARGS) {
            const size_t safe = tc_args_safe(s + p->head, n - p->head);
            if (safe > p->emitted) {
                ev_put(o, SP_TC_ARGS, p->n_calls - 1, s + p->head + p->emitted, safe - p->emitted);
                p->emitted = safe;
            }
        }
        return false;
    }
    const size_t inner = (size_t)(close - s);
    if (p->st == SP_TC_ST_ARGS) tc_close_args(p, inner, o);
    else tc_close_raw(p, inner, o);
    tc_consume(p, inner + strlen(TAG_CLOSE));
    p->st = SP_TC_ST_TEXT;
    return true;
}

void sp_tc_feed(sp_tcparse *p, const char *text, size_t n, sp_tc_out *o) {
    sp_tbuf_put(&p->buf, text, n);
    while (tc_step(p, o)) {}
}

void sp_tc_finish(sp_tcparse *p, sp_tc_out *o) {
    while (tc_step(p, o)) {}
    const char *s = p->buf.s ? p->buf.s : "";
    const size_t n = p->buf.n;
    if (p->st == SP_TC_ST_TEXT) {
        /* trailing whitespace goes out only when there is no call */
        if (!sp_tc_n_valid(p)) {
            tc_gap(p, o);
            tc_text(p, s, n, o);
        }
    } else if (p->st == SP_TC_ST_ARGS) {  /* cut short after its name went out */
        sp_tc_call *c = tc_cur(p);
        if (n > p->head + p->emitted) ev_put(o, SP_TC_ARGS, p->n_calls - 1, s + p->head + p->emitted, n - p->head - p->emitted);
        c->n_args = n - p->head;
        c->args = sp_xmalloc(c->n_args + 1);
        memcpy(c->args, s + p->head, c->n_args);
        c->args[c->n_args] = 0;
        tc_keep_raw(p, n);
    } else {                         /* an unfinished block before its name: content */
        tc_keep_raw(p, n);
        sp_tc_call *c = tc_cur(p);
        tc_gap(p, o);
        tc_text(p, c->raw, c->n_raw, o);
        free(c->raw);
        p->n_calls--;
    }
    p->buf.n = 0;
    p->st = SP_TC_ST_TEXT;
}

char *sp_tc_content(const sp_tcparse *p, size_t *n) {
    sp_tbuf b = { 0 };
    size_t at = 0;
    for (int i = 0; i < p->n_calls; i++) {
        const sp_tc_call *c = &p->calls[i];
        if (c->valid) continue;
        sp_tbuf_put(&b, p->content.s + at, c->at - at);
        sp_tbuf_put(&b, c->raw, c->n_raw);
        at = c->at;
    }
    sp_tbuf_put(&b, p->content.s ? p->content.s + at : "", p->content.n - at);
    *n = b.n;
    if (!b.s) b.s = sp_xstrdup("");
    return b.s;
}

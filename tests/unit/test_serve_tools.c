/* Unit tests for the server's tool calls (no model, no grammar): the
 * request fields and their 400s, the tool-loop messages as rendered text,
 * and the calls parsed back out of generated text, whole and streamed. */
#include "test_util.h"
#include "serve/internal.h"

#define V 1000

static const char *TOOLS =
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

static int parse_chat(const char *body, sp_req *r, sp_api_err *e) {
    return sp_req_parse(SP_API_CHAT, body, strlen(body), V, r, e);
}

/* body (chat) is a 400 naming param whose message contains want (if given). */
static void expect_400(sp_api_kind kind, const char *body, const char *param, const char *want) {
    sp_req r;
    sp_api_err e;
    memset(&e, 0, sizeof e);
    if (sp_req_parse(kind, body, strlen(body), V, &r, &e) == 0) {
        sp_req_free(&r);
        fail_msg("accepted: %s", body);
    }
    assert_int_equal(e.status, 400);
    if (strcmp(e.param, param)) fail_msg("param '%s', expected '%s' for %s (%s)", e.param, param, body, e.message);
    if (want && !strstr(e.message, want)) fail_msg("message '%s' lacks '%s'", e.message, want);
    assert_null(r.tools);
    assert_null(r.msgs);
}

#define MSGS "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"

static void test_tools_fields(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    char body[2048];
    snprintf(body, sizeof body, "{" MSGS ", %s, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"now\"}},"
             " \"parallel_tool_calls\": false}", TOOLS);
    assert_int_equal(parse_chat(body, &r, &e), 0);
    assert_int_equal(r.n_tools, 2);
    assert_string_equal(r.tools[0].name, "get_weather");
    assert_string_equal(r.tools[0].description, "Weather now");
    assert_non_null(strstr(r.tools[0].parameters, "\"required\":[\"city\"]"));
    assert_null(r.tools[1].description);
    assert_string_equal(r.tools[1].parameters, "{\"type\":\"object\",\"properties\":{}}");
    assert_int_equal(r.tool_choice, SP_TC_NAMED);
    assert_int_equal(r.tool_named, 1);
    assert_false(r.parallel_tool_calls);
    assert_true(sp_req_uses_tools(&r));
    assert_non_null(strstr(r.tools_system, "<tools>\n{\"name\": \"get_weather\", \"description\": \"Weather now\", "
                                           "\"parameters\": {\"type\": \"object\""));
    assert_non_null(strstr(r.tools_system, "{\"name\": \"now\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}\n</tools>"));
    assert_non_null(strstr(r.tools_system, "<tool_call>\n{\"name\": "));
    sp_req_free(&r);

    /* defaults: auto and parallel; "none" renders nothing */
    snprintf(body, sizeof body, "{" MSGS ", %s}", TOOLS);
    assert_int_equal(parse_chat(body, &r, &e), 0);
    assert_int_equal(r.tool_choice, SP_TC_AUTO);
    assert_true(r.parallel_tool_calls);
    sp_req_free(&r);
    snprintf(body, sizeof body, "{" MSGS ", %s, \"tool_choice\": \"none\"}", TOOLS);
    assert_int_equal(parse_chat(body, &r, &e), 0);
    assert_false(sp_req_uses_tools(&r));
    sp_req_free(&r);
    assert_int_equal(parse_chat("{" MSGS ", \"tools\": [], \"tool_choice\": \"none\"}", &r, &e), 0);
    assert_false(sp_req_uses_tools(&r));
    sp_req_free(&r);
}

static void test_constraint_fields(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    assert_int_equal(parse_chat("{" MSGS ", \"grammar\": \"root ::= \\\"yes\\\"\"}", &r, &e), 0);
    assert_string_equal(r.grammar, "root ::= \"yes\"");
    sp_req_free(&r);
    assert_int_equal(parse_chat("{" MSGS ", \"response_format\": {\"type\": \"json_object\"}}", &r, &e), 0);
    assert_int_equal(r.rf, SP_RF_JSON_OBJECT);
    sp_req_free(&r);
    assert_int_equal(parse_chat("{" MSGS ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                                "{\"name\": \"p\", \"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": "
                                "{\"a\": {\"type\": \"integer\"}}}}}}", &r, &e), 0);
    assert_int_equal(r.rf, SP_RF_JSON_SCHEMA);
    assert_string_equal(r.rf_schema, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    sp_req_free(&r);
    assert_int_equal(parse_chat("{" MSGS ", \"response_format\": {\"type\": \"text\"}}", &r, &e), 0);
    assert_int_equal(r.rf, SP_RF_TEXT);
    sp_req_free(&r);
    const char *comp = "{\"prompt\": \"x\", \"grammar\": \"root ::= [a-z]+\", \"response_format\": {\"type\": \"text\"}}";
    assert_int_equal(sp_req_parse(SP_API_COMPLETION, comp, strlen(comp), V, &r, &e), 0);
    assert_non_null(r.grammar);
    sp_req_free(&r);
}

static void test_tool_errors(void **state) {
    (void)state;
    char body[4096];
#define TOOL_ERR(frag, param, want) do { \
        snprintf(body, sizeof body, "{" MSGS ", %s}", frag); \
        expect_400(SP_API_CHAT, body, param, want); } while (0)
    TOOL_ERR("\"tools\": {}", "tools", "array");
    TOOL_ERR("\"tools\": [5]", "tools", "tools[0]");
    TOOL_ERR("\"tools\": [{\"type\": \"code\", \"function\": {\"name\": \"a\"}}]", "tools", "tools[0].type");
    TOOL_ERR("\"tools\": [{\"type\": \"function\"}]", "tools", "tools[0].function");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": 7}}]", "tools", "tools[0].function.name");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]", "tools", "tools[0].function.name");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"\"}}]", "tools", "tools[0].function.name");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
             "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}]", "tools", "tools[0].function.name");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": []}}]", "tools", "parameters");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"description\": 3}}]", "tools", "description");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}},"
             " {\"type\": \"function\", \"function\": {\"name\": \"a\"}}]", "tools", "tools[1].function.name 'a'");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], \"tool_choice\": \"always\"",
             "tool_choice", "always");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], \"tool_choice\": "
             "{\"type\": \"function\", \"function\": {\"name\": \"b\"}}", "tool_choice", "'b'");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], \"tool_choice\": {\"type\": \"function\"}",
             "tool_choice", NULL);
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], \"tool_choice\": 1", "tool_choice", NULL);
    TOOL_ERR("\"tool_choice\": \"required\"", "tool_choice", "'tools'");
    TOOL_ERR("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}], \"parallel_tool_calls\": 1",
             "parallel_tool_calls", NULL);
    /* constraints */
    TOOL_ERR("\"grammar\": 5", "grammar", NULL);
    TOOL_ERR("\"response_format\": \"json\"", "response_format", NULL);
    TOOL_ERR("\"response_format\": {\"type\": \"yaml\"}", "response_format", "yaml");
    TOOL_ERR("\"response_format\": {\"type\": \"json_schema\"}", "response_format", "json_schema");
    TOOL_ERR("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}", "response_format", "schema");
    TOOL_ERR("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"a b\", \"schema\": {}}}",
             "response_format", "name");
    TOOL_ERR("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"strict\": 1, \"schema\": {}}}",
             "response_format", "strict");
    TOOL_ERR("\"grammar\": \"root ::= \\\"a\\\"\", \"response_format\": {\"type\": \"json_object\"}", "grammar", "together");
    TOOL_ERR("\"grammar\": \"root ::= \\\"a\\\"\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}]",
             "grammar", "tools");
    TOOL_ERR("\"response_format\": {\"type\": \"json_object\"}, \"tools\": [{\"type\": \"function\", \"function\": "
             "{\"name\": \"a\"}}], \"tool_choice\": \"required\"", "response_format", "forces");
    /* tools on the completions API */
    expect_400(SP_API_COMPLETION, "{\"prompt\": \"x\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\"}}]}",
               "tools", "chat");
    /* too many tools */
    sp_tbuf b = { 0 };
    sp_tbuf_puts(&b, "{" MSGS ", \"tools\": [");
    for (int i = 0; i <= SP_REQ_MAX_TOOLS; i++) {
        char one[128];
        snprintf(one, sizeof one, "%s{\"type\": \"function\", \"function\": {\"name\": \"f%d\"}}", i ? "," : "", i);
        sp_tbuf_puts(&b, one);
    }
    sp_tbuf_puts(&b, "]}");
    expect_400(SP_API_CHAT, b.s, "tools", "At most");
    sp_tbuf_free(&b);
#undef TOOL_ERR
}

/* Deeply nested parameters, a huge description: accepted by the parser
 * (the schema converter judges schemas), no crash, nothing leaked. */
static void test_hostile_tools(void **state) {
    (void)state;
    sp_tbuf b = { 0 };
    sp_tbuf_puts(&b, "{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"deep\", \"parameters\": ");
    for (int i = 0; i < 500; i++) sp_tbuf_puts(&b, "{\"type\": \"object\", \"properties\": {\"x\": ");
    sp_tbuf_puts(&b, "{}");
    for (int i = 0; i < 500; i++) sp_tbuf_puts(&b, "}}");
    sp_tbuf_puts(&b, ", \"description\": \"");
    for (int i = 0; i < 20000; i++) sp_tbuf_puts(&b, "d");
    sp_tbuf_puts(&b, "\"}}]}");
    sp_req r;
    sp_api_err e;
    assert_int_equal(sp_req_parse(SP_API_CHAT, b.s, b.n, V, &r, &e), 0);
    assert_int_equal(r.n_tools, 1);
    assert_true(strlen(r.tools_system) > 20000);
    sp_req_free(&r);
    sp_tbuf_free(&b);
}

static void test_tool_messages(void **state) {
    (void)state;
    sp_req r;
    sp_api_err e;
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"},"
        " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": ["
        "   {\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}},"
        "   {\"id\": \"call_2\", \"type\": \"function\", \"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"18 C\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"call_2\", \"content\": [{\"type\": \"text\", \"text\": \"noon\"}]},"
        " {\"role\": \"assistant\", \"content\": \"Let me check.\", \"tool_calls\": [{\"function\": {\"name\": \"now\", \"arguments\": {}}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c3\", \"content\": \"1pm\"}]}";
    assert_int_equal(parse_chat(body, &r, &e), 0);
    assert_int_equal(r.n_msgs, 5);
    assert_string_equal(r.msgs[1].role, "assistant");
    assert_string_equal(r.msgs[1].content,
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
    assert_string_equal(r.msgs[2].role, "user");
    assert_string_equal(r.msgs[2].content, "<tool_response>\n18 C\n</tool_response>\n<tool_response>\nnoon\n</tool_response>");
    assert_string_equal(r.msgs[3].content,
                        "Let me check.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
    assert_string_equal(r.msgs[4].role, "user");
    sp_req_free(&r);

    /* the rendered prompt alternates user/assistant: Gemma accepts it */
    assert_int_equal(parse_chat(body, &r, &e), 0);
    char *out = NULL;
    sp_err err;
    sp_chat_tmpl *gemma = NULL;
    assert_int_equal(sp_chat_tmpl_for_model(NULL, NULL, "gemma", NULL, NULL, &gemma, &err), 0);
    assert_int_equal(sp_chat_render(gemma, r.msgs, r.n_msgs, true, &out, &err), 0);
    assert_non_null(strstr(out, "<start_of_turn>user\n<tool_response>\n18 C"));
    free(out);
    sp_chat_tmpl_free(gemma);
    sp_req_free(&r);

#define MSG_ERR(m, want) expect_400(SP_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, " m "]}", "messages", want)
    MSG_ERR("{\"role\": \"tool\", \"content\": \"x\"}", "tool_call_id");
    MSG_ERR("{\"role\": \"tool\", \"tool_call_id\": 5, \"content\": \"x\"}", "tool_call_id");
    MSG_ERR("{\"role\": \"tool\", \"tool_call_id\": \"\", \"content\": \"x\"}", "tool_call_id");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": {}}", "tool_calls must be an array");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [7]}", "tool_calls[0]");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\"}]}", "tool_calls[0].function.name");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": [\"x\"], \"arguments\": \"{}\"}}]}", "name");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"{oops\"}}]}",
            "not valid JSON");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}", "arguments");
    MSG_ERR("{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"web\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}",
            "type");
    MSG_ERR("{\"role\": \"function\", \"content\": \"x\"}", "not supported");
#undef MSG_ERR
}

static void test_with_system(void **state) {
    (void)state;
    sp_chat_msg with_sys[] = { { "system", "Be terse." }, { "user", "hi" } }, without[] = { { "user", "hi" } };
    int n;
    char *owned;
    sp_chat_msg *m = sp_tools_with_system(with_sys, 2, "TOOLS", "default", &n, &owned);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].content, "Be terse.\n\nTOOLS");
    assert_string_equal(m[1].content, "hi");
    free(m);
    free(owned);
    m = sp_tools_with_system(without, 1, "TOOLS", "default", &n, &owned);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].role, "system");
    assert_string_equal(m[0].content, "default\n\nTOOLS");
    free(m);
    free(owned);
    m = sp_tools_with_system(without, 1, "TOOLS", NULL, &n, &owned);
    assert_string_equal(m[0].content, "TOOLS");
    free(m);
    free(owned);
}

/* ----------------------------------------------------------------------------
 * Output parsing
 * ------------------------------------------------------------------------- */

typedef struct parsed {
    char content[1024];              /* TEXT events joined */
    char names[8][72];
    char args[8][512];               /* ARGS fragments joined per call */
    int n_starts;
} parsed;

static void collect(const sp_tc_out *o, parsed *r) {
    for (int i = 0; i < o->n_ev; i++) {
        const sp_tc_event *ev = &o->ev[i];
        if (ev->kind == SP_TC_TEXT) strncat(r->content, ev->text, sizeof r->content - strlen(r->content) - 1);
        else if (ev->kind == SP_TC_START) {
            assert_int_equal(ev->index, r->n_starts);
            snprintf(r->names[r->n_starts++], sizeof r->names[0], "%s", ev->text);
        } else {
            assert_true(ev->index < r->n_starts);   /* arguments only after the name */
            strncat(r->args[ev->index], ev->text, sizeof r->args[0] - strlen(r->args[ev->index]) - 1);
        }
    }
}

/* Parses text fed in pieces of `step` bytes (0 = all at once). */
static void run_parser(const char *text, size_t step, sp_tcparse *p, parsed *r) {
    memset(r, 0, sizeof *r);
    sp_tc_init(p, 42);
    const size_t n = strlen(text);
    for (size_t at = 0; at < n;) {
        const size_t k = step && n - at > step ? step : n - at;
        sp_tc_out o = { 0 };
        sp_tc_feed(p, text + at, k, &o);
        collect(&o, r);
        sp_tc_out_free(&o);
        at += k;
    }
    sp_tc_out o = { 0 };
    sp_tc_finish(p, &o);
    collect(&o, r);
    sp_tc_out_free(&o);
}

/* Streamed in any piece size, the events join to the whole result. */
static void test_parse_calls(void **state) {
    (void)state;
    const char *text = "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": {\"a\": [1, 2]}}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n";
    for (size_t step = 0; step <= 7; step++) {
        sp_tcparse p;
        parsed r;
        run_parser(text, step, &p, &r);
        assert_int_equal(r.n_starts, 2);
        assert_int_equal(sp_tc_n_valid(&p), 2);
        assert_string_equal(r.names[0], "get_weather");
        assert_string_equal(r.args[0], "{\"city\": \"Paris\", \"n\": {\"a\": [1, 2]}}");
        assert_string_equal(p.calls[0].args, r.args[0]);
        assert_string_equal(r.names[1], "now");
        assert_string_equal(r.args[1], "{}");
        assert_string_equal(r.content, "");
        assert_true(!strncmp(p.calls[0].id, "call_", 5) && strcmp(p.calls[0].id, p.calls[1].id));
        size_t n;
        char *c = sp_tc_content(&p, &n);
        assert_int_equal(n, 0);
        free(c);
        sp_tc_free(&p);
    }
}

static void test_parse_text_and_broken(void **state) {
    (void)state;
    sp_tcparse p;
    parsed r;
    size_t n;
    char *c;
    /* plain text passes unchanged, trailing whitespace and '<' included */
    const char *plain = "a < b, and <tool_ is not a tag \n\n";
    for (size_t step = 0; step <= 3; step++) {
        run_parser(plain, step, &p, &r);
        assert_string_equal(r.content, plain);
        assert_int_equal(p.n_calls, 0);
        sp_tc_free(&p);
    }
    /* content around a call: the text without the block */
    run_parser("Sure.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\nDone.", 2, &p, &r);
    assert_string_equal(r.content, "Sure.\n\nDone.");
    assert_int_equal(sp_tc_n_valid(&p), 1);
    sp_tc_free(&p);
    /* cut short after the name: a truncated call in a stream, content in a whole response */
    const char *cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa";
    run_parser(cut, 0, &p, &r);
    assert_int_equal(r.n_starts, 1);
    assert_string_equal(r.args[0], "{\"city\": \"Pa");
    assert_int_equal(sp_tc_n_valid(&p), 0);
    c = sp_tc_content(&p, &n);
    assert_string_equal(c, cut);
    free(c);
    sp_tc_free(&p);
    /* cut before the name: content */
    run_parser("<tool_call>\n{\"na", 1, &p, &r);
    assert_int_equal(r.n_starts, 0);
    assert_string_equal(r.content, "<tool_call>\n{\"na");
    sp_tc_free(&p);
    /* other key order: still a call (arguments re-serialized) */
    run_parser("<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>", 3, &p, &r);
    assert_int_equal(sp_tc_n_valid(&p), 1);
    assert_string_equal(r.names[0], "f");
    assert_string_equal(r.args[0], "{\"x\":1}");
    sp_tc_free(&p);
    /* not a call: the block stays content */
    const char *junk = "x<tool_call>{\"name\": 5}</tool_call>y";
    run_parser(junk, 4, &p, &r);
    assert_string_equal(r.content, junk);
    assert_int_equal(p.n_calls, 0);
    sp_tc_free(&p);
    /* arguments that are not an object: invalid, back into content whole */
    const char *bad_args = "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>";
    run_parser(bad_args, 0, &p, &r);
    assert_int_equal(sp_tc_n_valid(&p), 0);
    c = sp_tc_content(&p, &n);
    assert_string_equal(c, bad_args);
    free(c);
    sp_tc_free(&p);
}

static void test_response_json(void **state) {
    (void)state;
    sp_resp_ctx c = { .kind = SP_API_CHAT, .id = "chatcmpl-1", .model = "m", .method = "none", .tools = true };
    sp_job_delta end = { .end = SP_JOB_FINISHED, .finish = SP_FINISH_STOP };
    const char *text = "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>";
    json_t *o = sp_api_response(&c, text, strlen(text), NULL, 0, &end);
    json_t *choice = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(choice, "message");
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "tool_calls");
    assert_true(json_is_null(json_object_get(msg, "content")));
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    assert_true(!strncmp(json_string_value(json_object_get(call, "id")), "call_", 5));
    json_t *f = json_object_get(call, "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "now");
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), "{\"tz\": \"UTC\"}");
    json_decref(o);
    /* cut by max_tokens: no call, the text is the content, finish "length" */
    end.finish = SP_FINISH_LENGTH;
    o = sp_api_response(&c, text, 30, NULL, 0, &end);
    choice = json_array_get(json_object_get(o, "choices"), 0);
    msg = json_object_get(choice, "message");
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "length");
    assert_null(json_object_get(msg, "tool_calls"));
    assert_int_equal(json_string_length(json_object_get(msg, "content")), 30);
    json_decref(o);
}

/* ----------------------------------------------------------------------------
 * Grammars (constrain.c), checked with a text-only matcher
 * ------------------------------------------------------------------------- */

/* text is a complete sentence of the request's grammar. */
static bool accepts(const sp_grammar *g, const char *trigger, const char *text) {
    sp_err err;
    sp_gmatch *m = sp_gmatch_create(g, NULL, trigger, &err);
    assert_non_null(m);
    const bool ok = sp_gmatch_accept_bytes(m, text, strlen(text), &err) == 0 && sp_gmatch_can_end(m);
    sp_gmatch_free(m);
    return ok;
}

static sp_grammar *constrain(const char *body, const char **trigger) {
    sp_req r;
    sp_api_err e;
    assert_int_equal(parse_chat(body, &r, &e), 0);
    sp_grammar *g = NULL;
    if (sp_req_constrain(&r, &g, trigger, &e)) fail_msg("%s", e.message);
    sp_req_free(&r);
    return g;
}

#define CALL_W "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
#define CALL_N "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"

static void test_tool_grammars(void **state) {
    (void)state;
    char body[2048];
    const char *trigger;
    snprintf(body, sizeof body, "{" MSGS ", %s, \"tool_choice\": \"required\"}", TOOLS);
    sp_grammar *g = constrain(body, &trigger);
    assert_null(trigger);
    assert_true(accepts(g, NULL, CALL_W));
    assert_true(accepts(g, NULL, CALL_W "\n" CALL_N));
    assert_false(accepts(g, NULL, "Sure. " CALL_W));
    assert_false(accepts(g, NULL, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
    assert_false(accepts(g, NULL, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
    sp_grammar_free(g);
    /* one call only; the named function only */
    snprintf(body, sizeof body, "{" MSGS ", %s, \"tool_choice\": {\"type\": \"function\", \"function\": "
             "{\"name\": \"now\"}}, \"parallel_tool_calls\": false}", TOOLS);
    g = constrain(body, &trigger);
    assert_true(accepts(g, NULL, CALL_N));
    assert_false(accepts(g, NULL, CALL_N "\n" CALL_N));
    assert_false(accepts(g, NULL, CALL_W));
    sp_grammar_free(g);
    /* auto: lazy, the grammar covers what follows the trigger */
    snprintf(body, sizeof body, "{" MSGS ", %s}", TOOLS);
    g = constrain(body, &trigger);
    assert_string_equal(trigger, "<tool_call>");
    assert_true(accepts(g, trigger, "Let me look. " CALL_W));
    assert_false(accepts(g, trigger, "Let me look. <tool_call>\n{\"name\": 1}"));
    sp_grammar_free(g);
    /* auto + response_format: calls or that JSON, from the first byte */
    snprintf(body, sizeof body, "{" MSGS ", %s, \"response_format\": {\"type\": \"json_object\"}}", TOOLS);
    g = constrain(body, &trigger);
    assert_null(trigger);
    assert_true(accepts(g, NULL, CALL_N));
    assert_true(accepts(g, NULL, "{\"a\": [1, true]}"));
    assert_false(accepts(g, NULL, "hello"));
    sp_grammar_free(g);
    /* the text tools.c renders for history is what the grammar allows */
    sp_req r;
    sp_api_err e;
    const char *hist = "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                       "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}]}";
    assert_int_equal(parse_chat(hist, &r, &e), 0);
    snprintf(body, sizeof body, "{" MSGS ", %s, \"tool_choice\": \"required\"}", TOOLS);
    g = constrain(body, &trigger);
    assert_true(accepts(g, NULL, r.msgs[0].content));
    sp_grammar_free(g);
    sp_req_free(&r);
}

static void test_constraint_grammars(void **state) {
    (void)state;
    const char *trigger;
    sp_grammar *g = constrain("{" MSGS ", \"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\"\"}", &trigger);
    assert_true(accepts(g, NULL, "yes") && accepts(g, NULL, "no") && !accepts(g, NULL, "maybe"));
    sp_grammar_free(g);
    g = constrain("{" MSGS ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", "
                  "\"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, "
                  "\"required\": [\"a\"]}}}}", &trigger);
    assert_true(accepts(g, NULL, "{\"a\": 5}"));
    assert_false(accepts(g, NULL, "{\"a\": \"x\"}"));
    sp_grammar_free(g);
    g = constrain("{" MSGS ", \"response_format\": {\"type\": \"text\"}}", &trigger);
    assert_null(g);
    /* errors name the field and the position or schema path */
    struct { const char *body, *param, *want; } bad[] = {
        { "{" MSGS ", \"grammar\": \"root ::= [a-\"}", "grammar", "line 1, column" },
        { "{" MSGS ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
          "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"pattern\": \"a+\"}}}}}}",
          "response_format", "response_format.json_schema.schema: /properties/x" },
        { "{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
          "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"number\", \"minimum\": 1}}}}}]}",
          "tools", "tools[0].function.parameters" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sp_req r;
        sp_api_err e;
        assert_int_equal(parse_chat(bad[i].body, &r, &e), 0);
        sp_grammar *none = NULL;
        assert_int_equal(sp_req_constrain(&r, &none, &trigger, &e), -1);
        assert_null(none);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, bad[i].param);
        if (!strstr(e.message, bad[i].want)) fail_msg("'%s' lacks '%s'", e.message, bad[i].want);
        sp_req_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_fields),
        cmocka_unit_test(test_constraint_fields),
        cmocka_unit_test(test_tool_errors),
        cmocka_unit_test(test_hostile_tools),
        cmocka_unit_test(test_tool_messages),
        cmocka_unit_test(test_with_system),
        cmocka_unit_test(test_parse_calls),
        cmocka_unit_test(test_parse_text_and_broken),
        cmocka_unit_test(test_response_json),
        cmocka_unit_test(test_tool_grammars),
        cmocka_unit_test(test_constraint_grammars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

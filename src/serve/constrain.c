/*
 * Constrained output: the grammar a request's "grammar", "response_format"
 * or "tools" asks for, compiled while the request is being accepted, so a
 * bad grammar or schema is a 400 naming its position or schema path (never
 * a failure once generation has started).
 *
 *   grammar                       the client's GBNF as is
 *   response_format json_object   sp_schema_any_object_gbnf()
 *   response_format json_schema   sp_schema_to_gbnf(schema)
 *   tools, tool_choice required   root ::= tc-block ("\n" tc-block)*   (one block when
 *     or a named function           parallel_tool_calls is false)
 *   tools, tool_choice auto       lazy, trigger "<tool_call>": the grammar covers what
 *                                 follows it, "\n" tc-call "\n</tool_call>" then more blocks
 *   tools auto + response_format  not lazy: root ::= calls | the response_format's JSON
 *
 * with tc-block ::= "<tool_call>\n" tc-call "\n</tool_call>" and tc-call one
 * alternative per allowed function,
 *   "{\"name\": \"NAME\", \"arguments\": " ARGS "}"
 * ARGS being the function's parameters schema (sp_schema_append_rules, rule
 * prefix t<i>-args).  The text matches what tools.c shows the model and
 * parses back.
 */
#include "serve/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRIGGER "<tool_call>"

/* A schema's rules appended to *gbnf under prefix; a 400 on param naming
 * path when the schema is unsupported or invalid. */
static int cs_rules(const char *schema_text, const char *prefix, const char *path, const char *param,
                    char **gbnf, sp_api_err *e) {
    json_error_t je;
    json_t *schema = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!schema)
        return sp_api_fail(e, 400, "invalid_request_error", NULL, param, "%s: %s", path, je.text);
    sp_err err;
    const int rc = sp_schema_append_rules(schema, prefix, path, gbnf, &err);
    json_decref(schema);
    if (!rc) return 0;
    if (strstr(err.msg, path)) return sp_api_fail(e, 400, "invalid_request_error", NULL, param, "%s", err.msg);
    return sp_api_fail(e, 400, "invalid_request_error", NULL, param, "%s: %s", path, err.msg);
}

static void cs_add(char **gbnf, const char *s) {
    const size_t n = *gbnf ? strlen(*gbnf) : 0, k = strlen(s);
    *gbnf = sp_xrealloc(*gbnf, n + k + 1);
    memcpy(*gbnf + n, s, k + 1);
}

char *sp_tools_gbnf(const sp_req *r, bool lazy, sp_api_err *e) {
    char *g = NULL, line[512], prefix[32], path[64];
    sp_tbuf call = { 0 };
    sp_tbuf_puts(&call, "tc-call ::=");
    for (int i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == SP_TC_NAMED && i != r->tool_named) continue;
        snprintf(prefix, sizeof prefix, "t%d-args", i);
        snprintf(path, sizeof path, "tools[%d].function.parameters", i);
        if (cs_rules(r->tools[i].parameters, prefix, path, "tools", &g, e)) {
            free(g);
            sp_tbuf_free(&call);
            return NULL;
        }
        /* names are [a-zA-Z0-9_-]: nothing to escape in a GBNF literal */
        snprintf(line, sizeof line, "tc-f%d ::= \"{\\\"name\\\": \\\"%s\\\", \\\"arguments\\\": \" %s \"}\"\n", i,
                 r->tools[i].name, prefix);
        cs_add(&g, line);
        snprintf(line, sizeof line, "%s tc-f%d", call.n > strlen("tc-call ::=") ? " |" : "", i);
        sp_tbuf_puts(&call, line);
    }
    sp_tbuf_puts(&call, "\n");
    cs_add(&g, call.s);
    sp_tbuf_free(&call);
    cs_add(&g, "tc-block ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\"\n");
    const char *more = r->parallel_tool_calls ? " (\"\\n\" tc-block)*" : "";
    if (lazy) snprintf(line, sizeof line, "root ::= \"\\n\" tc-call \"\\n</tool_call>\"%s\n", more);
    else if (r->rf != SP_RF_TEXT) snprintf(line, sizeof line, "root ::= tc-block%s | rf\n", more);
    else snprintf(line, sizeof line, "root ::= tc-block%s\n", more);
    cs_add(&g, line);
    if (!lazy && r->rf != SP_RF_TEXT) {
        const char *schema = r->rf == SP_RF_JSON_SCHEMA ? r->rf_schema : "{\"type\":\"object\",\"additionalProperties\":true}";
        if (cs_rules(schema, "rf", "response_format.json_schema.schema", "response_format", &g, e)) {
            free(g);
            return NULL;
        }
    }
    return g;
}

/* Parses GBNF we or the client wrote; the error names param. */
static sp_grammar *cs_compile(const char *gbnf, const char *param, sp_api_err *e) {
    sp_err err;
    sp_grammar *g = sp_grammar_parse(gbnf, strlen(gbnf), &err);
    if (!g) sp_api_fail(e, 400, "invalid_request_error", NULL, param, "%s", err.msg);
    return g;
}

/* json_schema: the converter's message names the path after "json_schema: ";
 * the client's field is response_format.json_schema.schema. */
static sp_grammar *cs_schema(const sp_req *r, sp_api_err *e) {
    sp_err err;
    char *gbnf = sp_schema_to_gbnf(r->rf_schema, strlen(r->rf_schema), &err);
    if (!gbnf) {
        const char *m = err.msg;
        if (!strncmp(m, "json_schema: ", 13)) m += 13;
        sp_api_fail(e, 400, "invalid_request_error", NULL, "response_format",
                    "response_format.json_schema.schema: %s", m);
        return NULL;
    }
    sp_grammar *g = cs_compile(gbnf, "response_format", e);
    free(gbnf);
    return g;
}

int sp_req_constrain(const sp_req *r, sp_grammar **g, const char **trigger, sp_api_err *e) {
    *g = NULL;
    *trigger = NULL;
    if (r->grammar) {
        *g = cs_compile(r->grammar, "grammar", e);
    } else if (sp_req_uses_tools(r)) {
        /* auto with a response_format: either calls or that JSON, from the start */
        const bool lazy = r->tool_choice == SP_TC_AUTO && r->rf == SP_RF_TEXT;
        char *gbnf = sp_tools_gbnf(r, lazy, e);
        if (!gbnf) return -1;
        *g = cs_compile(gbnf, "tools", e);
        free(gbnf);
        if (lazy) *trigger = TRIGGER;
    } else if (r->rf == SP_RF_JSON_OBJECT) {
        *g = cs_compile(sp_schema_any_object_gbnf(), "response_format", e);
    } else if (r->rf == SP_RF_JSON_SCHEMA) {
        *g = cs_schema(r, e);
    } else {
        return 0;
    }
    return *g ? 0 : -1;
}

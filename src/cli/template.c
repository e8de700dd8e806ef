/*
 * specula template: render a chat template for given messages, as the
 * server and `run --chat` would.  For checking a model's template, one
 * written by hand, or ours against Python's jinja2 (tests/template).
 */
#include "cli/cli.h"
#include "cli/paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char template_help[] =
    "usage: specula template [-m MODEL] [--chat-template NAME|FILE] --input FILE.json [--tokens]\n"
    "       specula template [-m MODEL] [--chat-template NAME|FILE] --source\n"
    "\n"
    "Renders a chat template and prints the text exactly (no newline added).\n"
    "The input is one JSON object: \"messages\" (the OpenAI-style list), and\n"
    "optionally \"tools\", \"add_generation_prompt\" (default true), \"bos_token\",\n"
    "\"eos_token\", \"now\" (seconds since the epoch for strftime_now); any other key\n"
    "is one more template variable (e.g. \"enable_thinking\").\n"
    "\n"
    "options:\n"
    "  -m, --model NAME|PATH        take the template and bos/eos from this model\n"
    "      --chat-template NAME|FILE   a built-in template (chatml, gemma, llama3, mistral,\n"
    "                               phi3, qwen) or a Jinja file; default: the model's\n"
    "      --input FILE             the JSON object above ('-' = standard input)\n"
    "      --tokens                 print the prompt's token ids instead (needs -m)\n"
    "      --source                 print the template's Jinja source instead (no --input)\n"
    "  -h, --help                   this help\n";

int sp_cli_chat_template(const sp_gguf *g, const sp_tokenizer *t, const char *arg, sp_chat_tmpl **out,
                         sp_err *err) {
    if (!arg || sp_chat_builtin_source(arg)) return sp_chat_tmpl_for_model(g, t, arg, NULL, NULL, out, err);
    char *src = sp_read_text_file(arg, "chat template", err);
    if (!src) {
        sp_err_prefix(err, "--chat-template: '%s' is neither built in (%s) nor a readable file", arg,
                      sp_chat_builtin_names());
        return -1;
    }
    int rc = sp_chat_tmpl_for_model(g, t, NULL, src, arg, out, err);
    free(src);
    return rc;
}

static json_t *read_input(const char *path, sp_err *err) {
    json_error_t je;
    json_t *j = strcmp(path, "-") ? json_load_file(path, JSON_REJECT_DUPLICATES, &je)
                                  : json_loadf(stdin, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        sp_err_set(err, "--input %s: line %d: %s", path, je.line, je.text);
        return NULL;
    }
    if (!json_is_object(j) || !json_is_array(json_object_get(j, "messages"))) {
        json_decref(j);
        sp_err_set(err, "--input %s: expected an object with a \"messages\" array", path);
        return NULL;
    }
    return j;
}

/* Splits the input into message data and template markup (bos/eos and the
 * generation flag, which are the template's own text). */
static int split_vars(json_t *in, json_t **data, json_t **markup, bool *gen, int64_t *now, sp_err *err) {
    *data = json_object();
    *markup = json_object();
    *gen = true;
    *now = -1;
    const char *k;
    json_t *v;
    json_object_foreach(in, k, v) {
        if (!strcmp(k, "bos_token") || !strcmp(k, "eos_token")) {
            if (!json_is_string(v)) return sp_err_set(err, "--input: \"%s\" must be a string", k);
            json_object_set(*markup, k, v);
        } else if (!strcmp(k, "add_generation_prompt")) {
            if (!json_is_boolean(v)) return sp_err_set(err, "--input: \"add_generation_prompt\" must be true or false");
            *gen = json_is_true(v);
        } else if (!strcmp(k, "now")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return sp_err_set(err, "--input: \"now\" must be a non-negative integer");
            *now = (int64_t)json_integer_value(v);
        } else json_object_set(*data, k, v);
    }
    return 0;
}

int sp_cmd_template(int argc, char **argv) {
    const char *model = NULL, *tmpl = NULL, *input = NULL;
    bool tokens = false, source = false;
    sp_args a = { "template", argc, argv, 1 };
    for (; a.i < argc; a.i++) {
        if (sp_arg_is(&a, "-h|--help")) { fputs(template_help, stdout); return 0; }
        else if (sp_arg_is(&a, "-m|--model")) { if (!sp_arg_str(&a, &model)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--chat-template")) { if (!sp_arg_str(&a, &tmpl)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--input")) { if (!sp_arg_str(&a, &input)) return SP_EXIT_USAGE; }
        else if (sp_arg_is(&a, "--tokens")) tokens = true;
        else if (sp_arg_is(&a, "--source")) source = true;
        else return sp_arg_unknown(&a);
    }
    if (!input && !source) return sp_usage_error("template", "--input FILE.json is required");
    if (input && source) return sp_usage_error("template", "--source takes no --input");
    if (!model && !tmpl) return sp_usage_error("template", "give -m MODEL or --chat-template NAME|FILE");
    if (tokens && !model) return sp_usage_error("template", "--tokens needs -m MODEL");

    sp_err err;
    sp_gguf *g = NULL;
    sp_tokenizer *tok = NULL;
    sp_chat_tmpl *ct = NULL;
    json_t *in = NULL, *data = NULL, *markup = NULL;
    sp_jinja_out out = { 0 };
    sp_tokens ids = { 0 };
    int rc = SP_EXIT_FAIL;
    char path[4096];
    if (model) {
        if (sp_resolve_model(model, path, sizeof path, &err) || !(g = sp_gguf_open(path, &err)) ||
            !(tok = sp_tokenizer_load(g, &err)))
            goto done;
    }
    if (sp_cli_chat_template(g, tok, tmpl, &ct, &err)) goto done;
    if (!ct) { sp_err_set(&err, "the model has no chat template: give --chat-template NAME|FILE"); goto done; }
    if (source) {
        fputs(sp_chat_tmpl_source(ct), stdout);
        rc = 0;
        goto done;
    }
    if (!(in = read_input(input, &err))) goto done;
    bool gen;
    int64_t now;
    if (split_vars(in, &data, &markup, &gen, &now, &err)) goto done;
    if (tokens) {
        if (sp_chat_tokenize_json(ct, tok, json_object_get(in, "messages"), json_object_get(in, "tools"), gen,
                                  sp_tokenizer_add_bos(tok), &ids, &err))
            goto done;
        for (int i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        printf("\n");
    } else {
        if (sp_chat_tmpl_apply(ct, data, markup, gen, now, &out, &err)) goto done;
        if (fwrite(out.text, 1, out.len, stdout) != out.len) { sp_err_set(&err, "cannot write the output"); goto done; }
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "specula template: %s\n", err.msg);
    sp_jinja_out_free(&out);
    sp_tokens_free(&ids);
    json_decref(in);
    json_decref(data);
    json_decref(markup);
    sp_chat_tmpl_free(ct);
    sp_tokenizer_free(tok);
    sp_gguf_close(g);
    return rc;
}

/*
 * Chat templates: which template a model uses, the built-in ones, and
 * rendering messages through the jinja layer into text or ids.
 *
 * The model's own tokenizer.chat_template comes first; a GGUF without one
 * gets its architecture's format (Gemma's files carry none).  Built-ins
 * are ordinary Jinja, written here for the formats users name most
 * (--chat-template NAME): they render what the official templates of
 * those families render for system/user/assistant conversations.
 *
 * Provenance: message strings go to the renderer as data, the template's
 * literals and bos/eos texts as markup; tokenization recognises special
 * tokens only in markup bytes.
 */
#include "tokenizer/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sp_chat_tmpl {
    char name[128];
    char *src;
    sp_jinja *j;
    char *bos, *eos;
    bool strip_bos;          /* the vocabulary adds BOS itself: a BOS the template writes is dropped */
};

/* ------------------------------------------------------------------------
 * Built-in templates
 * ---------------------------------------------------------------------- */
static const struct { const char *name, *src; } ch_builtins[] = {
    { "chatml",
      "{%- for message in messages -%}\n"
      "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n" },
    /* Gemma 3: a system message may only come first and is prepended to the
     * first user turn; contents are trimmed; turns alternate user/model. */
    { "gemma",
      "{{- bos_token -}}\n"
      "{%- if messages and messages[0]['role'] == 'system' -%}\n"
      "  {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
      "  {%- set loop_messages = messages[1:] -%}\n"
      "{%- else -%}\n"
      "  {%- set first_user_prefix = '' -%}\n"
      "  {%- set loop_messages = messages -%}\n"
      "{%- endif -%}\n"
      "{%- for message in loop_messages -%}\n"
      "  {%- if message['role'] == 'system' -%}\n"
      "    {{- raise_exception('a system message is allowed only first') -}}\n"
      "  {%- endif -%}\n"
      "  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
      "    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"
      "  {%- endif -%}\n"
      "  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
      "  {{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') -}}\n"
      "  {{- message['content'] | trim -}}\n"
      "  {{- '<end_of_turn>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}\n" },
    /* Llama 3 / 3.1 without tools */
    { "llama3",
      "{{- bos_token -}}\n"
      "{%- for message in messages -%}\n"
      "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}\n" },
    /* Mistral [INST]: a system message goes before the last user message */
    { "mistral",
      "{%- if messages and messages[0]['role'] == 'system' -%}\n"
      "  {%- set system_message = messages[0]['content'] -%}\n"
      "  {%- set loop_messages = messages[1:] -%}\n"
      "{%- else -%}\n"
      "  {%- set loop_messages = messages -%}\n"
      "{%- endif -%}\n"
      "{{- bos_token -}}\n"
      "{%- for message in loop_messages -%}\n"
      "  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
      "    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\n"
      "  {%- endif -%}\n"
      "  {%- if message['role'] == 'user' -%}\n"
      "    {%- if loop.last and system_message is defined -%}\n"
      "      {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' -}}\n"
      "    {%- else -%}\n"
      "      {{- '[INST] ' + message['content'] + '[/INST]' -}}\n"
      "    {%- endif -%}\n"
      "  {%- else -%}\n"
      "    {{- ' ' + message['content'] + eos_token -}}\n"
      "  {%- endif -%}\n"
      "{%- endfor -%}\n" },
    /* Phi-3 */
    { "phi3",
      "{%- for message in messages -%}\n"
      "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- else -%}{{- eos_token -}}{%- endif -%}\n" },
    /* Qwen 2.5: ChatML with Qwen's default system prompt */
    { "qwen",
      "{%- if not messages or messages[0]['role'] != 'system' -%}\n"
      "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' -}}\n"
      "{%- endif -%}\n"
      "{%- for message in messages -%}\n"
      "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n" },
};

const char *sp_chat_builtin_names(void) { return "chatml, gemma, llama3, mistral, phi3, qwen"; }

const char *sp_chat_builtin_source(const char *name) {
    for (size_t i = 0; i < sizeof ch_builtins / sizeof *ch_builtins; i++)
        if (!strcmp(ch_builtins[i].name, name)) return ch_builtins[i].src;
    return NULL;
}

/* ------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------- */
sp_chat_tmpl *sp_chat_tmpl_parse(const char *name, const char *src, size_t n, const char *bos, const char *eos,
                                 sp_err *err) {
    sp_jinja *j = sp_jinja_parse(src, n, err);
    if (!j) {
        sp_err_prefix(err, "chat template %s", name);
        return NULL;
    }
    sp_chat_tmpl *ct = sp_xcalloc(1, sizeof *ct);
    snprintf(ct->name, sizeof ct->name, "%s", name);
    ct->j = j;
    ct->src = sp_xmalloc(n + 1);
    memcpy(ct->src, src, n);
    ct->src[n] = 0;
    ct->bos = sp_xstrdup(bos ? bos : "");
    ct->eos = sp_xstrdup(eos ? eos : "");
    return ct;
}

void sp_chat_tmpl_free(sp_chat_tmpl *ct) {
    if (!ct) return;
    sp_jinja_free(ct->j);
    free(ct->src);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

const char *sp_chat_tmpl_name(const sp_chat_tmpl *ct) { return ct->name; }
const char *sp_chat_tmpl_source(const sp_chat_tmpl *ct) { return ct->src; }

static char *ch_piece(const sp_tokenizer *t, int32_t id) {
    if (!t || id < 0) return sp_xstrdup("");
    size_t n = sp_token_piece(t, id, true, NULL, 0);
    char *s = sp_xmalloc(n + 1);
    sp_token_piece(t, id, true, s, n + 1);
    s[n] = 0;
    return s;
}

int sp_chat_tmpl_for_model(const sp_gguf *g, const sp_tokenizer *t, const char *name, const char *src,
                           const char *src_name, sp_chat_tmpl **out, sp_err *err) {
    *out = NULL;
    sp_str s = { 0 };
    const char *label = "gguf";
    if (src) {
        s.ptr = src;
        s.len = strlen(src);
        label = src_name ? src_name : "file";
    } else if (name) {
        const char *b = sp_chat_builtin_source(name);
        if (!b) return sp_err_set(err, "chat template '%s' is not built in (built in: %s; or give a file)", name,
                                  sp_chat_builtin_names());
        s.ptr = b;
        s.len = strlen(b);
        label = name;
    } else if (sp_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) != 1) {
        sp_str arch;
        if (sp_gguf_get_str(g, "general.architecture", &arch, NULL) == 1 &&
            (sp_str_eq(arch, "gemma") || sp_str_eq(arch, "gemma2") || sp_str_eq(arch, "gemma3"))) {
            label = "gemma";
            s.ptr = sp_chat_builtin_source("gemma");
            s.len = strlen(s.ptr);
        } else return 0;
    }
    char *bos = ch_piece(t, t ? sp_tokenizer_bos(t) : -1), *eos = ch_piece(t, t ? sp_tokenizer_eos(t) : -1);
    *out = sp_chat_tmpl_parse(label, s.ptr, s.len, bos, eos, err);
    if (*out) (*out)->strip_bos = t && sp_tokenizer_add_bos(t);
    free(bos);
    free(eos);
    return *out ? 0 : -1;
}

/* ------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------- */
int sp_chat_tmpl_apply(const sp_chat_tmpl *ct, json_t *data, json_t *markup, bool add_generation_prompt,
                       int64_t now, sp_jinja_out *out, sp_err *err) {
    json_t *mk = markup ? json_copy(markup) : json_object();
    if (!json_object_get(mk, "bos_token")) json_object_set_new(mk, "bos_token", json_string(ct->bos));
    if (!json_object_get(mk, "eos_token")) json_object_set_new(mk, "eos_token", json_string(ct->eos));
    if (!json_object_get(mk, "add_generation_prompt"))
        json_object_set_new(mk, "add_generation_prompt", json_boolean(add_generation_prompt));
    int rc = sp_jinja_render(ct->j, data, mk, now, out, err);
    json_decref(mk);
    if (rc) sp_err_prefix(err, "chat template %s", ct->name);
    return rc;
}

int sp_chat_tmpl_render_json(const sp_chat_tmpl *ct, json_t *messages, json_t *tools, bool add_generation_prompt,
                             sp_jinja_out *out, sp_err *err) {
    json_t *data = json_object();
    json_object_set(data, "messages", messages);
    json_object_set_new(data, "tools", tools ? json_incref(tools) : json_null());
    int rc = sp_chat_tmpl_apply(ct, data, NULL, add_generation_prompt, -1, out, err);
    json_decref(data);
    if (rc) return rc;
    /* a BOS the template writes is the tokenizer's to add (SmolLM2's BOS
     * is <|im_start|>, which its template writes as a turn marker: kept) */
    size_t nb = strlen(ct->bos);
    if (ct->strip_bos && nb && out->len >= nb && !memcmp(out->text, ct->bos, nb) && !memchr(out->from_data, 1, nb)) {
        memmove(out->text, out->text + nb, out->len - nb + 1);
        memmove(out->from_data, out->from_data + nb, out->len - nb);
        out->len -= nb;
    }
    return 0;
}

json_t *sp_chat_msgs_json(const sp_chat_msg *msgs, int n_msgs, sp_err *err) {
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) {
        sp_err_set(err, "chat: no messages");
        return NULL;
    }
    json_t *a = json_array();
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            json_decref(a);
            sp_err_set(err, "chat: message %d has no role or content", i);
            return NULL;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m) {   /* jansson refuses invalid UTF-8 */
            json_decref(a);
            sp_err_set(err, "chat: message %d is not valid UTF-8", i);
            return NULL;
        }
        json_array_append_new(a, m);
    }
    return a;
}

int sp_chat_render(const sp_chat_tmpl *ct, const sp_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                   char **out, sp_err *err) {
    *out = NULL;
    json_t *m = sp_chat_msgs_json(msgs, n_msgs, err);
    if (!m) return -1;
    sp_jinja_out o;
    int rc = sp_chat_tmpl_render_json(ct, m, NULL, add_generation_prompt, &o, err);
    json_decref(m);
    if (rc) return rc;
    free(o.from_data);
    *out = o.text;
    return 0;
}

int sp_chat_tokenize_json(const sp_chat_tmpl *ct, const sp_tokenizer *t, json_t *messages, json_t *tools,
                          bool add_generation_prompt, bool add_bos, sp_tokens *out, sp_err *err) {
    sp_jinja_out o;
    if (sp_chat_tmpl_render_json(ct, messages, tools, add_generation_prompt, &o, err)) return -1;
    int rc = sp_tokenize_masked(t, o.text, o.len, add_bos, o.from_data, out, err);
    sp_jinja_out_free(&o);
    return rc;
}

int sp_chat_tokenize(const sp_chat_tmpl *ct, const sp_tokenizer *t, const sp_chat_msg *msgs, int n_msgs,
                     bool add_generation_prompt, bool add_bos, sp_tokens *out, sp_err *err) {
    json_t *m = sp_chat_msgs_json(msgs, n_msgs, err);
    if (!m) return -1;
    int rc = sp_chat_tokenize_json(ct, t, m, NULL, add_generation_prompt, add_bos, out, err);
    json_decref(m);
    return rc;
}

/* ------------------------------------------------------------------------
 * The default system prompt of a ChatML template
 * ---------------------------------------------------------------------- */
static bool ch_contains(sp_str s, const char *needle) {
    return s.len && memmem(s.ptr, s.len, needle, strlen(needle)) != NULL;
}

/* The literal after "<|im_start|>system" + newline, up to "<|im_end|>", in
 * a template that inserts it when the first message is not a system one
 * (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by
 * Hugging Face").  Text with quotes, braces or backslashes is template code,
 * not a literal: NULL.  NULL too if it does not fit in cap. */
const char *sp_chat_default_system(const sp_gguf *g, char *buf, size_t cap) {
    sp_str s;
    if (sp_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) != 1) return NULL;
    static const char open[] = "<|im_start|>system";
    if (!ch_contains(s, "!= 'system'") && !ch_contains(s, "!= \"system\"")) return NULL;
    const char *end = s.ptr + s.len;
    const char *p = memmem(s.ptr, s.len, open, sizeof open - 1);
    if (!p) return NULL;
    p += sizeof open - 1;
    if (p < end && *p == '\n') p++;
    else if (end - p >= 2 && p[0] == '\\' && p[1] == 'n') p += 2;
    else return NULL;
    const char *q = memmem(p, (size_t)(end - p), "<|im_end|>", 10);
    if (!q || q == p) return NULL;
    for (const char *c = p; c < q; c++)
        if (*c == '\'' || *c == '"' || *c == '{' || *c == '}' || *c == '\\') return NULL;
    size_t n = (size_t)(q - p);
    if (!buf || n + 1 > cap) return NULL;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

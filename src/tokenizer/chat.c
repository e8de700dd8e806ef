/*
 * Chat templates: the two prompt formats of the supported models, rendered
 * in C (no Jinja).  The output is text; BOS is not part of it (the
 * tokenizer adds BOS when the vocabulary asks for it).
 *
 *   CHATML (SmolLM2)  <|im_start|>{role}\n{content}<|im_end|>\n ...
 *                     generation prompt <|im_start|>assistant\n
 *   GEMMA (Gemma 3)   <start_of_turn>user\n{content}<end_of_turn>\n ...
 *                     "assistant" is rendered "model"; a leading system
 *                     message is folded into the first user turn as
 *                     "{system}\n\n{content}"; contents are trimmed; roles
 *                     must alternate user/model starting with user;
 *                     generation prompt <start_of_turn>model\n
 * These are what the models' official Jinja templates produce.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Detection
 * ---------------------------------------------------------------------- */
static bool ch_contains(sp_str s, const char *needle) {
    return s.len && memmem(s.ptr, s.len, needle, strlen(needle)) != NULL;
}

sp_chat_format sp_chat_detect(const sp_gguf *g) {
    sp_str s;
    if (sp_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == 1) {
        if (ch_contains(s, "<|im_start|>")) return SP_CHAT_CHATML;
        if (ch_contains(s, "<start_of_turn>")) return SP_CHAT_GEMMA;
        return SP_CHAT_NONE;
    }
    if (sp_gguf_get_str(g, "general.architecture", &s, NULL) == 1 &&
        (sp_str_eq(s, "gemma") || sp_str_eq(s, "gemma2") || sp_str_eq(s, "gemma3")))
        return SP_CHAT_GEMMA;
    return SP_CHAT_NONE;
}

int sp_chat_format_parse(const char *name, sp_chat_format *out) {
    if (!strcmp(name, "chatml")) *out = SP_CHAT_CHATML;
    else if (!strcmp(name, "gemma")) *out = SP_CHAT_GEMMA;
    else return -1;
    return 0;
}

const char *sp_chat_format_name(sp_chat_format f) {
    switch (f) {
    case SP_CHAT_NONE: return "none";
    case SP_CHAT_CHATML: return "chatml";
    case SP_CHAT_GEMMA: return "gemma";
    }
    return "unknown";
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

/* ------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------- */
typedef struct ch_buf {
    char *s;
    size_t n, cap;
    size_t *marks;          /* (2 * n_marks) [start, end) of each template marker */
    int n_marks, cap_marks;
} ch_buf;

static void ch_put(ch_buf *b, const char *s, size_t n) {
    SP_VEC_GROW(b->s, b->cap, b->n + n + 1);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void ch_puts(ch_buf *b, const char *s) { ch_put(b, s, strlen(s)); }

/* Puts one of the template's own markers (<|im_start|>, <end_of_turn>,
 * ...) and remembers where it is: only these become special tokens. */
static void ch_mark(ch_buf *b, const char *marker) {
    if (b->n_marks == b->cap_marks) {
        b->cap_marks = b->cap_marks ? 2 * b->cap_marks : 16;
        b->marks = sp_xrealloc(b->marks, (size_t)b->cap_marks * 2 * sizeof *b->marks);
    }
    b->marks[2 * b->n_marks] = b->n;
    ch_puts(b, marker);
    b->marks[2 * b->n_marks + 1] = b->n;
    b->n_marks++;
}

/* Jinja's `trim` on ASCII whitespace: puts s without leading/trailing
 * spaces, tabs and newlines. */
static void ch_put_trimmed(ch_buf *b, const char *s) {
    const char *e = s + strlen(s);
    while (s < e && strchr(" \t\n\r\v\f", *s)) s++;
    while (e > s && strchr(" \t\n\r\v\f", e[-1])) e--;
    ch_put(b, s, (size_t)(e - s));
}

static int ch_validate(const sp_chat_msg *msgs, int n, sp_err *err) {
    if (n < 0 || (n > 0 && !msgs)) return sp_err_set(err, "chat: no messages");
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content) return sp_err_set(err, "chat: message %d has no role or content", i);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return sp_err_set(err, "chat: message %d has role '%.40s' (expected system, user or assistant)",
                              i, r);
    }
    return 0;
}

static void ch_chatml(ch_buf *b, const sp_chat_msg *msgs, int n, bool gen, const char *def_sys) {
    if (n > 0 && def_sys && strcmp(msgs[0].role, "system") != 0) {
        ch_mark(b, "<|im_start|>");
        ch_puts(b, "system\n");
        ch_puts(b, def_sys);
        ch_mark(b, "<|im_end|>");
        ch_puts(b, "\n");
    }
    for (int i = 0; i < n; i++) {
        ch_mark(b, "<|im_start|>");
        ch_puts(b, msgs[i].role);
        ch_puts(b, "\n");
        ch_puts(b, msgs[i].content);
        ch_mark(b, "<|im_end|>");
        ch_puts(b, "\n");
    }
    if (gen) {
        ch_mark(b, "<|im_start|>");
        ch_puts(b, "assistant\n");
    }
}

static int ch_gemma(ch_buf *b, const sp_chat_msg *msgs, int n, bool gen, const char *def_sys,
                    sp_err *err) {
    const char *sys = def_sys;
    int first = 0;
    if (n > 0 && strcmp(msgs[0].role, "system") == 0) {
        sys = msgs[0].content;
        first = 1;
    }
    for (int i = first; i < n; i++) {
        const char *role = msgs[i].role;
        bool want_user = (i - first) % 2 == 0;
        if (strcmp(role, "system") == 0)
            return sp_err_set(err, "chat (gemma): a system message is allowed only first (message %d)", i);
        if ((strcmp(role, "user") == 0) != want_user)
            return sp_err_set(err, "chat (gemma): roles must alternate user/assistant starting with "
                                   "user; message %d is '%s'", i, role);
        ch_mark(b, "<start_of_turn>");
        ch_puts(b, want_user ? "user" : "model");
        ch_puts(b, "\n");
        if (i == first && sys) {
            ch_puts(b, sys);
            ch_puts(b, "\n\n");
        }
        ch_put_trimmed(b, msgs[i].content);
        ch_mark(b, "<end_of_turn>");
        ch_puts(b, "\n");
    }
    if (gen) {
        ch_mark(b, "<start_of_turn>");
        ch_puts(b, "model\n");
    }
    return 0;
}

static int ch_render(sp_chat_format f, const sp_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                     const char *default_system, ch_buf *b, sp_err *err) {
    if (f != SP_CHAT_CHATML && f != SP_CHAT_GEMMA)
        return sp_err_set(err, "chat: no chat template (format %s); use a raw prompt",
                          sp_chat_format_name(f));
    if (ch_validate(msgs, n_msgs, err)) return -1;
    ch_put(b, "", 0);
    if (f == SP_CHAT_CHATML) {
        ch_chatml(b, msgs, n_msgs, add_generation_prompt, default_system);
        return 0;
    }
    return ch_gemma(b, msgs, n_msgs, add_generation_prompt, default_system, err);
}

int sp_chat_render(sp_chat_format f, const sp_chat_msg *msgs, int n_msgs,
                   bool add_generation_prompt, const char *default_system, char **out,
                   sp_err *err) {
    ch_buf b = { 0 };
    const int rc = ch_render(f, msgs, n_msgs, add_generation_prompt, default_system, &b, err);
    free(b.marks);
    if (rc) free(b.s);
    *out = rc ? NULL : b.s;
    return rc;
}

/* Tokenizes the rendered text piece by piece: the text between markers as
 * plain text, each marker with special tokens recognised.  A whole-text
 * tokenization with specials splits at the same places, so the ids are
 * the same unless a message contains special-token text, which here
 * stays literal. */
int sp_chat_tokenize(const sp_tokenizer *t, sp_chat_format f, const sp_chat_msg *msgs, int n_msgs,
                     bool add_generation_prompt, const char *default_system, bool add_bos,
                     sp_tokens *out, sp_err *err) {
    ch_buf b = { 0 };
    int rc = ch_render(f, msgs, n_msgs, add_generation_prompt, default_system, &b, err);
    size_t at = 0;
    for (int i = 0; rc == 0 && i <= b.n_marks; i++) {
        const size_t start = i < b.n_marks ? b.marks[2 * i] : b.n;
        rc = sp_tokenize(t, b.s + at, start - at, add_bos && i == 0, false, out, err);
        if (rc || i == b.n_marks) break;
        at = b.marks[2 * i + 1];
        rc = sp_tokenize(t, b.s + start, at - start, false, true, out, err);
    }
    free(b.marks);
    free(b.s);
    return rc;
}

/*
 * The template lexer: source -> text and tag tokens, with jinja2's
 * whitespace rules as transformers configures them.
 *
 *   newlines      \r\n and \r become \n; one trailing newline is dropped
 *                 (keep_trailing_newline=False)
 *   {%- {{- {#-   strip all whitespace before the tag
 *   -%} -}} -#}   strip all whitespace after it
 *   trim_blocks   the first newline after %} or #} is removed (not after }})
 *   lstrip_blocks spaces and tabs from the start of a line up to {% or {#
 *                 are removed; {%+ keeps them
 * Inside a tag, a closing delimiter counts only when brackets are
 * balanced (so `{{ {'a': {'b': 1}} }}` works), as in jinja2.
 */
#include "jinja/internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct lx {
    const char *s;
    size_t n, pos;
    int line;
    jj_arena *a;
    jj_toks *out;
    sp_err *err;
} lx;

static bool lx_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

static int lx_push(lx *l, jt_kind k, const char *s, size_t n, int line) {
    if (l->out->n == l->out->cap) {
        size_t cap = l->out->cap ? 2 * l->out->cap : 256;
        jtok *v = jj_alloc(l->a, cap * sizeof *v);
        if (!v) return sp_err_set(l->err, "template: too large");
        if (l->out->n) memcpy(v, l->out->v, l->out->n * sizeof *v);
        l->out->v = v;
        l->out->cap = cap;
    }
    l->out->v[l->out->n++] = (jtok){ .kind = (uint8_t)k, .line = line, .s = s, .n = n };
    return 0;
}

static int lx_count_lines(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Appends a UTF-8 encoding of code point cp. */
static size_t lx_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int lx_hex(const char *s, size_t n, uint32_t *out) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* A string literal at l->pos (the quote).  Escapes as Python's
 * unicode-escape: \\ \' \" \n \t \r \b \f \v \a, octal, \x, \u, \U,
 * backslash-newline; an unknown escape stays as written. */
static int lx_string(lx *l, int line) {
    const char q = l->s[l->pos];
    size_t i = l->pos + 1, end = i;
    while (end < l->n && l->s[end] != q) end += l->s[end] == '\\' ? 2 : 1;
    if (end >= l->n) return sp_err_set(l->err, "template: line %d: unterminated string", line);
    char *o = jj_alloc(l->a, end - i + 1);
    if (!o) return sp_err_set(l->err, "template: too large");
    size_t k = 0;
    while (i < end) {
        char ch = l->s[i];
        if (ch != '\\') { o[k++] = ch; i++; continue; }
        char e = l->s[i + 1];
        i += 2;
        uint32_t cp;
        switch (e) {
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            size_t w = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (i + w > end || lx_hex(l->s + i, w, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                return sp_err_set(l->err, "template: line %d: bad \\%c escape in a string", line, e);
            /* the escape is at least as long as its encoding */
            k += lx_utf8(o + k, cp);
            i += w;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int d = 0; d < 2 && i < end && l->s[i] >= '0' && l->s[i] <= '7'; d++) cp = cp * 8 + (uint32_t)(l->s[i++] - '0');
                k += lx_utf8(o + k, cp);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    l->line += lx_count_lines(l->s + l->pos, end + 1 - l->pos);
    l->pos = end + 1;
    if (lx_push(l, JT_STRING, o, k, line)) return -1;
    return 0;
}

static int lx_number(lx *l, int line) {
    const char *s = l->s;
    size_t i = l->pos;
    char buf[64];
    size_t k = 0;
    bool is_float = false;
    while (i < l->n && (isdigit((unsigned char)s[i]) || s[i] == '_')) { if (s[i] != '_' && k < 60) buf[k++] = s[i]; i++; }
    if (i + 1 < l->n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
        is_float = true;
        buf[k++] = s[i++];
        while (i < l->n && (isdigit((unsigned char)s[i]) || s[i] == '_')) { if (s[i] != '_' && k < 60) buf[k++] = s[i]; i++; }
    }
    if (i < l->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < l->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < l->n && isdigit((unsigned char)s[j])) {
            is_float = true;
            if (k < 60) buf[k++] = 'e';
            if (s[i + 1] == '-' && k < 60) buf[k++] = '-';
            i = j;
            while (i < l->n && isdigit((unsigned char)s[i])) { if (k < 62) buf[k++] = s[i]; i++; }
        }
    }
    buf[k] = 0;
    if (k >= 60) return sp_err_set(l->err, "template: line %d: number too long", line);
    if (lx_push(l, is_float ? JT_FLOAT : JT_INT, s + l->pos, i - l->pos, line)) return -1;
    jtok *t = &l->out->v[l->out->n - 1];
    if (is_float) t->f = strtod(buf, NULL);
    else {
        char *e;
        unsigned long long v = strtoull(buf, &e, 10);
        if (v > INT64_MAX) return sp_err_set(l->err, "template: line %d: integer too large", line);
        t->i = (int64_t)v;
    }
    l->pos = i;
    return 0;
}

static const char *const lx_ops2[] = { "//", "**", "==", "!=", "<=", ">=" };

/* The tokens of one tag up to its closing delimiter (end: "}}" or "%}").
 * Returns the sign before the delimiter ('-', '+' or 0). */
static int lx_tag(lx *l, const char *end, int *sign) {
    int depth = 0;
    for (;;) {
        while (l->pos < l->n && lx_ws(l->s[l->pos])) l->line += l->s[l->pos++] == '\n';
        if (l->pos >= l->n) return sp_err_set(l->err, "template: line %d: unclosed tag (expected '%s')", l->line, end);
        const char *p = l->s + l->pos;
        size_t left = l->n - l->pos;
        if (depth == 0) {
            if (left >= 3 && (p[0] == '-' || p[0] == '+') && !memcmp(p + 1, end, 2)) {
                *sign = p[0];
                l->pos += 3;
                return 0;
            }
            if (left >= 2 && !memcmp(p, end, 2)) {
                *sign = 0;
                l->pos += 2;
                return 0;
            }
        }
        const int line = l->line;
        unsigned char ch = (unsigned char)*p;
        if (isalpha(ch) || ch == '_') {
            size_t k = 1;
            while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_')) k++;
            if (lx_push(l, JT_NAME, p, k, line)) return -1;
            l->pos += k;
        } else if (isdigit(ch)) {
            if (lx_number(l, line)) return -1;
        } else if (ch == '\'' || ch == '"') {
            if (lx_string(l, line)) return -1;
        } else {
            size_t k = 0;
            for (size_t o = 0; o < sizeof lx_ops2 / sizeof *lx_ops2; o++)
                if (left >= 2 && !memcmp(p, lx_ops2[o], 2)) k = 2;
            if (!k) {
                if (!strchr("+-/*%~[](){}<>=.:|,;!", ch) || ch == 0)
                    return sp_err_set(l->err, "template: line %d: unexpected character '%c' in a tag", line,
                                      isprint(ch) ? ch : '?');
                k = 1;
                if (ch == '(' || ch == '[' || ch == '{') depth++;
                else if (ch == ')' || ch == ']' || ch == '}') {
                    if (depth == 0) return sp_err_set(l->err, "template: line %d: unbalanced '%c'", line, ch);
                    depth--;
                }
            }
            if (lx_push(l, JT_OP, p, k, line)) return -1;
            l->pos += k;
        }
    }
}

/* After a closing delimiter: '-' strips all whitespace, else trim (for
 * blocks and comments) removes one newline. */
static void lx_after_close(lx *l, int sign, bool trim) {
    if (sign == '-') {
        while (l->pos < l->n && lx_ws(l->s[l->pos])) l->line += l->s[l->pos++] == '\n';
    } else if (sign != '+' && trim && l->pos < l->n && l->s[l->pos] == '\n') {
        l->pos++;
        l->line++;
    }
}

/* Is the tag at p `{% raw %}` (with optional signs)?  Sets *after to the
 * end of the tag and *sign to the closing sign. */
static bool lx_is_raw(const char *s, size_t n, size_t p, const char *word, size_t *after, int *sign,
                      int *open_sign) {
    size_t i = p + 2;
    *open_sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *open_sign = s[i++];
    while (i < n && lx_ws(s[i])) i++;
    size_t wl = strlen(word);
    if (i + wl > n || memcmp(s + i, word, wl)) return false;
    i += wl;
    if (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
    while (i < n && lx_ws(s[i])) i++;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    if (i + 2 > n || memcmp(s + i, "%}", 2)) return false;
    *after = i + 2;
    return true;
}

static size_t lx_rstrip(const char *s, size_t n) {
    while (n && lx_ws(s[n - 1])) n--;
    return n;
}

int jj_lex(const char *src, size_t n, jj_arena *a, jj_toks *out, sp_err *err) {
    /* normalise newlines, drop one trailing newline */
    char *s = jj_alloc(a, n + 1);
    if (!s) return sp_err_set(err, "template: too large");
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == 0) return sp_err_set(err, "template: contains a NUL byte");
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else s[m++] = src[i];
    }
    if (m && s[m - 1] == '\n') m--;
    s[m] = 0;

    lx l = { .s = s, .n = m, .line = 1, .a = a, .out = out, .err = err };
    bool line_starting = true;
    while (l.pos < l.n) {
        /* the next tag opener */
        size_t p = l.pos;
        while (p + 1 < l.n && !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#'))) p++;
        if (p + 1 >= l.n) p = l.n;
        const char kind = p < l.n ? s[p + 1] : 0;
        const char sign = p < l.n && p + 2 < l.n && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t tlen = p - l.pos;
        if (kind && sign == '-') tlen = lx_rstrip(s + l.pos, tlen);
        else if (kind && sign != '+' && kind != '{') {
            /* lstrip_blocks: only spaces and tabs (and other non-newline
             * whitespace) between the line start and the tag */
            size_t lp = tlen;
            while (lp > 0 && s[l.pos + lp - 1] != '\n') lp--;
            if (lp > 0 || line_starting) {
                bool blank = lp < tlen;
                for (size_t i = lp; i < tlen; i++) if (!lx_ws(s[l.pos + i])) blank = false;
                if (blank) tlen = lp;
            }
        }
        if (tlen && lx_push(&l, JT_TEXT, s + l.pos, tlen, l.line)) return -1;
        l.line += lx_count_lines(s + l.pos, p - l.pos);
        if (p >= l.n) break;

        size_t after;
        int csign, osign;
        if (kind == '#') {
            const char *e = strstr(s + p + 2, "#}");
            if (!e) return sp_err_set(err, "template: line %d: unclosed comment", l.line);
            l.line += lx_count_lines(s + p, (size_t)(e - (s + p)));
            l.pos = (size_t)(e - s) + 2;
            lx_after_close(&l, e > s + p + 2 && e[-1] == '-' ? '-' : 0, true);
        } else if (kind == '%' && lx_is_raw(s, l.n, p, "raw", &after, &csign, &osign)) {
            l.pos = after;
            lx_after_close(&l, csign, false);   /* jinja2 trims no newline after {% raw %} */
            /* the text up to {% endraw %} */
            size_t q = l.pos;
            int esign = 0, eosign = 0;
            size_t eafter = 0;
            for (;; q++) {
                if (q + 1 >= l.n) return sp_err_set(err, "template: line %d: unclosed raw block", l.line);
                if (s[q] == '{' && s[q + 1] == '%' && lx_is_raw(s, l.n, q, "endraw", &eafter, &esign, &eosign)) break;
            }
            size_t rl = q - l.pos;
            if (eosign == '-') rl = lx_rstrip(s + l.pos, rl);
            if (rl && lx_push(&l, JT_TEXT, s + l.pos, rl, l.line)) return -1;
            l.line += lx_count_lines(s + l.pos, eafter - l.pos);
            l.pos = eafter;
            lx_after_close(&l, esign, true);
        } else {
            const bool block = kind == '%';
            if (lx_push(&l, block ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, s + p, 2, l.line)) return -1;
            l.pos = p + 2 + (sign ? 1 : 0);
            int cs = 0;
            if (lx_tag(&l, block ? "%}" : "}}", &cs)) return -1;
            if (lx_push(&l, block ? JT_BLOCK_END : JT_VAR_END, s + l.pos - 2, 2, l.line)) return -1;
            lx_after_close(&l, cs, block);
        }
        line_starting = l.pos > 0 && s[l.pos - 1] == '\n';
    }
    return lx_push(&l, JT_EOF, s + l.n, 0, l.line);
}

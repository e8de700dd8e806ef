/*
 * Template values: the arena they live in, constructors, conversion from
 * JSON, truth, equality and order as in Python, and the three ways a value
 * becomes text: str() (output), repr() (inside a printed list or dict) and
 * json.dumps (the tojson filter).  Every string carries its provenance
 * (template or data), which the text builder keeps byte by byte.
 */
#include "jinja/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Arena
 * ---------------------------------------------------------------------- */
struct jj_chunk {
    jj_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!n) n = sizeof(max_align_t);
    jj_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        if (a->limit && (a->used_total + cap > a->limit || n > a->limit)) {
            a->over = true;
            return NULL;
        }
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->over = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->used_total += cap;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jj_arena *a) {
    for (jj_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used_total = 0;
}

static void *jc_alloc(jj_ctx *c, size_t n) {
    void *p = jj_alloc(&c->arena, n);
    if (!p) jj_fail(c, 0, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    return p;
}

/* ------------------------------------------------------------------------
 * Constructors
 * ---------------------------------------------------------------------- */
jv jv_undef_v = { .kind = JV_UNDEF }, jv_none_v = { .kind = JV_NONE };
jv jv_true_v = { .kind = JV_BOOL, .u.b = true }, jv_false_v = { .kind = JV_BOOL, .u.b = false };

jv *jv_new(jj_ctx *c, jv_kind k) {
    jv *v = jc_alloc(c, sizeof *v);
    v->kind = (uint8_t)k;
    return v;
}

jv *jv_undef(jj_ctx *c, const char *name) {
    if (!name) return &jv_undef_v;
    jv *v = jv_new(c, JV_UNDEF);
    v->u.undef_name = name;
    return v;
}

jv *jv_bool(bool b) { return b ? &jv_true_v : &jv_false_v; }

jv *jv_int(jj_ctx *c, int64_t i) {
    jv *v = jv_new(c, JV_INT);
    v->u.i = i;
    return v;
}

jv *jv_float(jj_ctx *c, double f) {
    jv *v = jv_new(c, JV_FLOAT);
    v->u.f = f;
    return v;
}

jv *jv_str(jj_ctx *c, const char *s, size_t n, uint8_t taint) {
    jv *v = jv_new(c, JV_STR);
    char *p = jc_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    v->u.str.s = p;
    v->u.str.n = n;
    v->u.str.taint = n ? taint : JT_MARKUP;
    return v;
}

jv *jv_cstr(jj_ctx *c, const char *s) {
    jv *v = jv_new(c, JV_STR);
    v->u.str.s = s;
    v->u.str.n = strlen(s);
    return v;
}

jv *jv_str_sub(jj_ctx *c, const jv *s, size_t off, size_t n) {
    jv *v = jv_new(c, JV_STR);
    v->u.str.s = s->u.str.s + off;
    v->u.str.n = n;
    v->u.str.taint = n ? s->u.str.taint : JT_MARKUP;
    if (n && s->u.str.taint == JT_MIXED) {
        const uint8_t *m = s->u.str.mask + off;
        bool any = false, all = true;
        for (size_t i = 0; i < n; i++) { any |= m[i] != 0; all &= m[i] != 0; }
        v->u.str.taint = all ? JT_DATA : any ? JT_MIXED : JT_MARKUP;
        if (v->u.str.taint == JT_MIXED) v->u.str.mask = m;
    }
    return v;
}

jv *jv_list(jj_ctx *c, size_t n) {
    jv *v = jv_new(c, JV_LIST);
    v->u.list.items = n ? jc_alloc(c, n * sizeof *v->u.list.items) : NULL;
    v->u.list.n = n;
    for (size_t i = 0; i < n; i++) v->u.list.items[i] = &jv_undef_v;
    return v;
}

jv *jv_dict(jj_ctx *c) { return jv_new(c, JV_DICT); }

static size_t jv_dict_find(const jv *d, const jv *k) {
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (jv_eq(d->u.dict.keys[i], k)) return i;
    return (size_t)-1;
}

void jv_dict_set(jj_ctx *c, jv *d, jv *k, jv *v) {
    size_t i = jv_dict_find(d, k);
    if (i != (size_t)-1) {
        d->u.dict.vals[i] = v;
        return;
    }
    if (d->u.dict.n == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? 2 * d->u.dict.cap : 8;
        jv **nk = jc_alloc(c, cap * sizeof *nk), **nv = jc_alloc(c, cap * sizeof *nv);
        if (d->u.dict.n) {
            memcpy(nk, d->u.dict.keys, d->u.dict.n * sizeof *nk);
            memcpy(nv, d->u.dict.vals, d->u.dict.n * sizeof *nv);
        }
        d->u.dict.keys = nk;
        d->u.dict.vals = nv;
        d->u.dict.cap = cap;
    }
    d->u.dict.keys[d->u.dict.n] = k;
    d->u.dict.vals[d->u.dict.n++] = v;
}

jv *jv_dict_get(const jv *d, const jv *k) {
    size_t i = jv_dict_find(d, k);
    return i == (size_t)-1 ? NULL : d->u.dict.vals[i];
}

jv *jv_dict_gets(const jv *d, const char *k) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const jv *key = d->u.dict.keys[i];
        if (key->kind == JV_STR && key->u.str.n == n && !memcmp(key->u.str.s, k, n)) return d->u.dict.vals[i];
    }
    return NULL;
}

jv *jv_from_json(jj_ctx *c, json_t *j, uint8_t taint, int depth) {
    if (depth > JJ_MAX_NEST) jj_fail(c, 0, "template variables nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return &jv_none_v;
    case JSON_TRUE: return &jv_true_v;
    case JSON_FALSE: return &jv_false_v;
    case JSON_INTEGER: return jv_int(c, (int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(c, json_real_value(j));
    case JSON_STRING: {
        jv *v = jv_new(c, JV_STR);
        v->u.str.s = json_string_value(j);
        v->u.str.n = json_string_length(j);
        v->u.str.taint = v->u.str.n ? taint : JT_MARKUP;
        return v;
    }
    case JSON_ARRAY: {
        jv *v = jv_list(c, json_array_size(j));
        for (size_t i = 0; i < v->u.list.n; i++) v->u.list.items[i] = jv_from_json(c, json_array_get(j, i), taint, depth + 1);
        return v;
    }
    case JSON_OBJECT: {
        jv *v = jv_dict(c);
        const char *k;
        json_t *x;
        json_object_foreach(j, k, x) {
            jv *key = jv_new(c, JV_STR);
            key->u.str.s = k;
            key->u.str.n = strlen(k);
            key->u.str.taint = key->u.str.n ? taint : JT_MARKUP;
            jv_dict_set(c, v, key, jv_from_json(c, x, taint, depth + 1));
        }
        return v;
    }
    }
    return &jv_none_v;
}

/* ------------------------------------------------------------------------
 * Truth, equality, order
 * ---------------------------------------------------------------------- */
bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.str.n != 0;
    case JV_LIST: return v->u.list.n != 0;
    case JV_DICT: return v->u.dict.n != 0;
    default: return true;
    }
}

bool jv_is_num(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }

double jv_num(const jv *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : v->u.b ? 1.0 : 0.0;
}

bool jv_eq(const jv *a, const jv *b) {
    if (a == b) return true;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_INT ? a->u.i : a->u.b, y = b->kind == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->u.str.n == b->u.str.n && !memcmp(a->u.str.s, b->u.str.s, a->u.str.n);
    case JV_LIST:
        if (a->u.list.n != b->u.list.n || a->u.list.tuple != b->u.list.tuple) return false;
        for (size_t i = 0; i < a->u.list.n; i++)
            if (!jv_eq(a->u.list.items[i], b->u.list.items[i])) return false;
        return true;
    case JV_DICT:
        if (a->u.dict.n != b->u.dict.n) return false;
        for (size_t i = 0; i < a->u.dict.n; i++) {
            const jv *o = jv_dict_get(b, a->u.dict.keys[i]);
            if (!o || !jv_eq(a->u.dict.vals[i], o)) return false;
        }
        return true;
    case JV_FUNC: return a->u.func.id == b->u.func.id;
    case JV_MACRO: return a->u.macro.def == b->u.macro.def;
    default: return false;
    }
}

const char *jv_kind_name(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->u.list.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    default: return "function";
    }
}

int jv_cmp(jj_ctx *c, int line, const jv *a, const jv *b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a->kind == JV_INT && b->kind == JV_INT) return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.str.n < b->u.str.n ? a->u.str.n : b->u.str.n;
        int r = n ? memcmp(a->u.str.s, b->u.str.s, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return (a->u.str.n > b->u.str.n) - (a->u.str.n < b->u.str.n);
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST) {
        for (size_t i = 0; i < a->u.list.n && i < b->u.list.n; i++) {
            if (jv_eq(a->u.list.items[i], b->u.list.items[i])) continue;
            return jv_cmp(c, line, a->u.list.items[i], b->u.list.items[i]);
        }
        return (a->u.list.n > b->u.list.n) - (a->u.list.n < b->u.list.n);
    }
    jj_fail(c, line, "cannot order %s and %s", jv_kind_name(a), jv_kind_name(b));
}

/* ------------------------------------------------------------------------
 * Text builder with provenance
 * ---------------------------------------------------------------------- */
static void sb_grow(jj_ctx *c, jj_sb *b, size_t need) {
    if (need <= b->cap) return;
    if (need > JJ_MAX_OUTPUT) jj_fail(c, 0, "a string grew over %zu MiB", JJ_MAX_OUTPUT >> 20);
    size_t cap = b->cap ? 2 * b->cap : 64;
    while (cap < need) cap *= 2;
    char *s = jc_alloc(c, cap + 1);
    if (b->n) memcpy(s, b->s, b->n);
    b->s = s;
    if (b->mask) {
        uint8_t *m = jc_alloc(c, cap);
        memcpy(m, b->mask, b->n);
        b->mask = m;
    }
    b->cap = cap;
}

void jj_sb_put(jj_ctx *c, jj_sb *b, const char *s, size_t n, uint8_t taint) {
    if (!n) return;
    sb_grow(c, b, b->n + n);
    memcpy(b->s + b->n, s, n);
    if (taint != JT_MARKUP && !b->mask) b->mask = jc_alloc(c, b->cap);
    if (b->mask) memset(b->mask + b->n, taint != JT_MARKUP, n);
    b->any_data |= taint != JT_MARKUP;
    b->n += n;
}

void jj_sb_putv(jj_ctx *c, jj_sb *b, const jv *s) {
    if (s->u.str.taint != JT_MIXED) {
        jj_sb_put(c, b, s->u.str.s, s->u.str.n, s->u.str.taint);
        return;
    }
    size_t at = b->n;
    jj_sb_put(c, b, s->u.str.s, s->u.str.n, JT_DATA);
    memcpy(b->mask + at, s->u.str.mask, s->u.str.n);
}

void jj_sb_puts(jj_ctx *c, jj_sb *b, const char *s) { jj_sb_put(c, b, s, strlen(s), JT_MARKUP); }

jv *jj_sb_done(jj_ctx *c, jj_sb *b) {
    jv *v = jv_new(c, JV_STR);
    v->u.str.s = b->s ? b->s : "";
    v->u.str.n = b->n;
    if (b->s) b->s[b->n] = 0;
    if (b->any_data && b->n) {
        bool all = true;
        for (size_t i = 0; i < b->n && all; i++) all = b->mask[i] != 0;
        v->u.str.taint = all ? JT_DATA : JT_MIXED;
        if (!all) v->u.str.mask = b->mask;
    }
    return v;
}

/* ------------------------------------------------------------------------
 * str(), repr(), json.dumps
 * ---------------------------------------------------------------------- */

/* Python's repr(float): the shortest digits that read back the same,
 * positional for exponents -4..15, else d.ddde+XX. */
void jv_float_repr(double f, char *buf, size_t cap) {
    if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++) if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) out[k++] = digits[i];
            else out[k++] = '0';
        } else {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    snprintf(buf, cap, "%s", out);
}

static void sb_num(jj_ctx *c, jj_sb *b, const jv *v) {
    char t[64];
    if (v->kind == JV_INT) snprintf(t, sizeof t, "%lld", (long long)v->u.i);
    else jv_float_repr(v->u.f, t, sizeof t);
    jj_sb_puts(c, b, t);
}

/* Decodes one UTF-8 code point at s (n bytes left); 1 byte for an invalid one. */
static uint32_t u8_dec(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) { *len = 1; return u[0]; }
    int k = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    if (k == 1 || (size_t)k > n) { *len = 1; return u[0]; }
    uint32_t cp = u[0] & (0x3F >> (k - 1));
    for (int i = 1; i < k; i++) {
        if ((u[i] & 0xC0) != 0x80) { *len = 1; return u[0]; }
        cp = cp << 6 | (u[i] & 0x3F);
    }
    *len = (size_t)k;
    return cp;
}

size_t jj_u8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_u8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    for (; i < n && cp; cp--) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

bool jj_is_space_at(const char *s, size_t n, size_t at, size_t *len) {
    uint32_t cp = u8_dec(s + at, n - at, len);
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Code points Python's repr escapes (not str.isprintable): C1 controls,
 * separators other than the space, format characters, private use.  A
 * subset of the Unicode tables: the ones text meets. */
static bool repr_escaped(uint32_t cp) {
    return (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
           (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) ||
           cp == 0x3000 || cp == 0xFEFF || (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
           cp == 0x061C || cp == 0x180E || (cp >= 0xF0000 && cp <= 0x10FFFF) || cp == 0xFFFE || cp == 0xFFFF;
}

/* repr(str): single quotes unless the text has ' and no ". */
static void sb_repr_str(jj_ctx *c, jj_sb *b, const jv *s) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    const char q = sq && !dq ? '"' : '\'';
    const uint8_t t = s->u.str.taint == JT_MARKUP ? JT_MARKUP : JT_DATA;
    jj_sb_put(c, b, &q, 1, JT_MARKUP);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char e[8];
        const char *rep = NULL;
        if (ch == '\\') rep = "\\\\";
        else if (ch == (unsigned char)q) rep = q == '\'' ? "\\'" : "\\\"";
        else if (ch == '\n') rep = "\\n";
        else if (ch == '\r') rep = "\\r";
        else if (ch == '\t') rep = "\\t";
        else if (ch < 0x20 || ch == 0x7F) { snprintf(e, sizeof e, "\\x%02x", ch); rep = e; }
        else if (ch >= 0x80) {
            size_t len;
            uint32_t cp = u8_dec(p + i, n - i, &len);
            if (!repr_escaped(cp)) { i += len - 1; continue; }
            char u[12];
            if (cp <= 0xFF) snprintf(u, sizeof u, "\\x%02x", (unsigned)cp);
            else if (cp <= 0xFFFF) snprintf(u, sizeof u, "\\u%04x", (unsigned)cp);
            else snprintf(u, sizeof u, "\\U%08x", (unsigned)cp);
            jj_sb_put(c, b, p + run, i - run, t);
            jj_sb_put(c, b, u, strlen(u), t);
            run = i + len;
            i += len - 1;
            continue;
        }
        if (!rep) continue;
        jj_sb_put(c, b, p + run, i - run, t);
        jj_sb_put(c, b, rep, strlen(rep), t);
        run = i + 1;
    }
    jj_sb_put(c, b, p + run, n - run, t);
    jj_sb_put(c, b, &q, 1, JT_MARKUP);
}

void jv_repr(jj_ctx *c, jj_sb *b, const jv *v, int line) {
    if (++c->steps > JJ_MAX_STEPS) jj_fail(c, line, "the template ran over %llu steps", (unsigned long long)JJ_MAX_STEPS);
    switch (v->kind) {
    case JV_STR: sb_repr_str(c, b, v); return;
    case JV_LIST: {
        jj_sb_puts(c, b, v->u.list.tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) jj_sb_puts(c, b, ", ");
            jv_repr(c, b, v->u.list.items[i], line);
        }
        jj_sb_puts(c, b, v->u.list.tuple ? (v->u.list.n == 1 ? ",)" : ")") : "]");
        return;
    }
    case JV_DICT: case JV_NS: {
        if (v->kind == JV_NS) jj_sb_puts(c, b, "<Namespace ");
        jj_sb_puts(c, b, "{");
        for (size_t i = 0; i < v->u.dict.n; i++) {
            if (i) jj_sb_puts(c, b, ", ");
            jv_repr(c, b, v->u.dict.keys[i], line);
            jj_sb_puts(c, b, ": ");
            jv_repr(c, b, v->u.dict.vals[i], line);
        }
        jj_sb_puts(c, b, v->kind == JV_NS ? "}>" : "}");
        return;
    }
    default: jv_to_str(c, b, v, line);
    }
}

void jv_to_str(jj_ctx *c, jj_sb *b, const jv *v, int line) {
    switch (v->kind) {
    case JV_UNDEF: return;
    case JV_NONE: jj_sb_puts(c, b, "None"); return;
    case JV_BOOL: jj_sb_puts(c, b, v->u.b ? "True" : "False"); return;
    case JV_INT: case JV_FLOAT: sb_num(c, b, v); return;
    case JV_STR: jj_sb_putv(c, b, v); return;
    case JV_LIST: case JV_DICT: case JV_NS: jv_repr(c, b, v, line); return;
    case JV_LOOP: jj_sb_puts(c, b, "<LoopContext>"); return;
    default: jj_sb_puts(c, b, "<function>"); return;
    }
}

jv *jv_string(jj_ctx *c, const jv *v, int line) {
    if (v->kind == JV_STR) return (jv *)v;
    jj_sb b = { 0 };
    jv_to_str(c, &b, v, line);
    return jj_sb_done(c, &b);
}

static void sb_json_str(jj_ctx *c, jj_sb *b, const jv *s) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.n, run = 0;
    const uint8_t t = s->u.str.taint == JT_MARKUP ? JT_MARKUP : JT_DATA;
    jj_sb_puts(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char e[8];
        const char *rep = NULL;
        if (ch == '"') rep = "\\\"";
        else if (ch == '\\') rep = "\\\\";
        else if (ch == '\n') rep = "\\n";
        else if (ch == '\r') rep = "\\r";
        else if (ch == '\t') rep = "\\t";
        else if (ch == '\b') rep = "\\b";
        else if (ch == '\f') rep = "\\f";
        else if (ch < 0x20) { snprintf(e, sizeof e, "\\u%04x", ch); rep = e; }
        if (!rep) continue;
        jj_sb_put(c, b, p + run, i - run, t);
        jj_sb_put(c, b, rep, strlen(rep), t);
        run = i + 1;
    }
    jj_sb_put(c, b, p + run, n - run, t);
    jj_sb_puts(c, b, "\"");
}

static void sb_indent(jj_ctx *c, jj_sb *b, int indent, int level) {
    jj_sb_puts(c, b, "\n");
    for (int i = 0; i < indent * level; i++) jj_sb_puts(c, b, " ");
}

/* Python's json.dumps(v, ensure_ascii=False, indent=indent,
 * separators=(item_sep, key_sep), sort_keys=sort_keys). */
void jv_tojson(jj_ctx *c, jj_sb *b, const jv *v, int indent, const char *item_sep, const char *key_sep,
               bool sort_keys, int level, int line) {
    if (++c->steps > JJ_MAX_STEPS) jj_fail(c, line, "the template ran over %llu steps", (unsigned long long)JJ_MAX_STEPS);
    if (level > JJ_MAX_NEST) jj_fail(c, line, "tojson: nested too deeply");
    char t[64];
    switch (v->kind) {
    case JV_NONE: jj_sb_puts(c, b, "null"); return;
    case JV_BOOL: jj_sb_puts(c, b, v->u.b ? "true" : "false"); return;
    case JV_INT: sb_num(c, b, v); return;
    case JV_FLOAT:
        if (isnan(v->u.f)) jj_sb_puts(c, b, "NaN");
        else if (isinf(v->u.f)) jj_sb_puts(c, b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { jv_float_repr(v->u.f, t, sizeof t); jj_sb_puts(c, b, t); }
        return;
    case JV_STR: sb_json_str(c, b, v); return;
    case JV_LIST:
        if (!v->u.list.n) { jj_sb_puts(c, b, "[]"); return; }
        jj_sb_puts(c, b, "[");
        for (size_t i = 0; i < v->u.list.n; i++) {
            if (i) jj_sb_puts(c, b, item_sep);
            if (indent >= 0) sb_indent(c, b, indent, level + 1);
            jv_tojson(c, b, v->u.list.items[i], indent, item_sep, key_sep, sort_keys, level + 1, line);
        }
        if (indent >= 0) sb_indent(c, b, indent, level);
        jj_sb_puts(c, b, "]");
        return;
    case JV_DICT: case JV_NS: {
        if (!v->u.dict.n) { jj_sb_puts(c, b, "{}"); return; }
        size_t n = v->u.dict.n;
        size_t *ord = jc_alloc(c, n * sizeof *ord);
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (sort_keys)   /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && jv_cmp(c, line, v->u.dict.keys[ord[j - 1]], v->u.dict.keys[ord[j]]) > 0; j--) {
                    size_t x = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = x;
                }
        jj_sb_puts(c, b, "{");
        for (size_t k = 0; k < n; k++) {
            const jv *key = v->u.dict.keys[ord[k]];
            if (k) jj_sb_puts(c, b, item_sep);
            if (indent >= 0) sb_indent(c, b, indent, level + 1);
            if (key->kind == JV_STR) sb_json_str(c, b, key);
            else if (key->kind == JV_INT || key->kind == JV_FLOAT || key->kind == JV_BOOL || key->kind == JV_NONE) {
                jj_sb_puts(c, b, "\"");
                if (key->kind == JV_BOOL) jj_sb_puts(c, b, key->u.b ? "true" : "false");
                else if (key->kind == JV_NONE) jj_sb_puts(c, b, "null");
                else sb_num(c, b, key);
                jj_sb_puts(c, b, "\"");
            } else jj_fail(c, line, "tojson: keys must be str, int, float, bool or None, not %s", jv_kind_name(key));
            jj_sb_puts(c, b, key_sep);
            jv_tojson(c, b, v->u.dict.vals[ord[k]], indent, item_sep, key_sep, sort_keys, level + 1, line);
        }
        if (indent >= 0) sb_indent(c, b, indent, level);
        jj_sb_puts(c, b, "}");
        return;
    }
    default: jj_fail(c, line, "tojson: Object of type %s is not JSON serializable", jv_kind_name(v));
    }
}

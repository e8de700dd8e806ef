/*
 * What templates call: Python's operators on values, attribute and item
 * access (jinja2's sandbox rules: an attribute falls back to an item and
 * back; missing gives Undefined, touching Undefined fails), the string,
 * dict and list methods, the global functions, and jinja2's filters and
 * tests as chat templates use them.
 *
 * Strings made from parts keep each part's provenance (slices, joins,
 * concatenation, strip and split); a string that is transformed as a
 * whole (upper, replace, tojson) is data if any of its input was.
 */
#include "jinja/internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAIL(...) jj_fail(c, line, __VA_ARGS__)

static const char *undef_name(const jv *v) { return v->u.undef_name ? v->u.undef_name : "value"; }

static void no_undef(jj_ctx *c, const jv *v, int line) {
    if (v->kind == JV_UNDEF) FAIL("'%s' is undefined", undef_name(v));
}

static jv *need_str(jj_ctx *c, jv *v, const char *what, int line) {
    if (v->kind != JV_STR) FAIL("%s must be a string, not %s", what, jv_kind_name(v));
    return v;
}

static int64_t need_int(jj_ctx *c, const jv *v, const char *what, int line) {
    if (v->kind == JV_INT) return v->u.i;
    if (v->kind == JV_BOOL) return v->u.b;
    FAIL("%s must be an integer, not %s", what, jv_kind_name(v));
}

/* keyword argument by name, else positional i, else NULL */
static jv *arg(jv **args, int n, int i, const char **kwn, jv **kwv, int nkw, const char *name) {
    for (int k = 0; k < nkw; k++)
        if (!strcmp(kwn[k], name)) return kwv[k];
    return i >= 0 && i < n ? args[i] : NULL;
}

static uint8_t taint_of(const jv *s) { return s->u.str.taint == JT_MARKUP ? JT_MARKUP : JT_DATA; }

static jv *str_taint(jj_ctx *c, const char *s, size_t n, uint8_t taint) { return jv_str(c, s, n, taint); }

/* ------------------------------------------------------------------------
 * Operators
 * ---------------------------------------------------------------------- */
static jv *int_or_fail(jj_ctx *c, __int128 v, int line) {
    if (v > INT64_MAX || v < INT64_MIN) FAIL("integer overflow");
    return jv_int(c, (int64_t)v);
}

static int64_t ival(const jv *v) { return v->kind == JV_INT ? v->u.i : v->u.b; }

/* "%s" % args: the conversions templates use (s r d i f x %). */
static jv *str_format(jj_ctx *c, jv *fmt, jv *args, int line) {
    jv *list = args->kind == JV_LIST && args->u.list.tuple ? args : NULL;
    size_t ai = 0;
    jj_sb b = { 0 };
    const char *s = fmt->u.str.s;
    size_t n = fmt->u.str.n, run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') continue;
        jj_sb_putv(c, &b, jv_str_sub(c, fmt, run, i - run));
        size_t j = i + 1;
        char spec[32] = "%";
        size_t k = 1;
        while (j < n && strchr("-+ #0123456789.", s[j]) && k < 20) spec[k++] = s[j++];
        if (j >= n) FAIL("incomplete format");
        char conv = s[j];
        run = j + 1;
        i = j;
        if (conv == '%') { jj_sb_puts(c, &b, "%"); continue; }
        jv *x;
        if (list) {
            if (ai >= list->u.list.n) FAIL("not enough arguments for format string");
            x = list->u.list.items[ai++];
        } else {
            if (ai++) FAIL("not enough arguments for format string");
            x = args;
        }
        char out[128];
        if (conv == 's' || conv == 'r') {
            jj_sb t = { 0 };
            if (conv == 's') jv_to_str(c, &t, x, line); else jv_repr(c, &t, x, line);
            jv *sv = jj_sb_done(c, &t);
            if (k == 1) jj_sb_putv(c, &b, sv);
            else {
                spec[k++] = 's';
                spec[k] = 0;
                char *tmp = malloc(sv->u.str.n + 256);
                if (!tmp) FAIL("out of memory");
                char *z = strndup(sv->u.str.s, sv->u.str.n);
                snprintf(tmp, sv->u.str.n + 256, spec, z ? z : "");
                free(z);
                jj_sb_put(c, &b, tmp, strlen(tmp), taint_of(sv));
                free(tmp);
            }
        } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
            if (!jv_is_num(x)) FAIL("%%%c format: a number is required, not %s", conv, jv_kind_name(x));
            long long v = x->kind == JV_FLOAT ? (long long)x->u.f : (long long)ival(x);
            spec[k++] = 'l'; spec[k++] = 'l'; spec[k++] = conv == 'i' ? 'd' : conv; spec[k] = 0;
            snprintf(out, sizeof out, spec, v);
            jj_sb_puts(c, &b, out);
        } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'g') {
            if (!jv_is_num(x)) FAIL("%%%c format: a number is required, not %s", conv, jv_kind_name(x));
            spec[k++] = conv;
            spec[k] = 0;
            snprintf(out, sizeof out, spec, jv_num(x));
            jj_sb_puts(c, &b, out);
        } else FAIL("unsupported format character '%c'", conv);
    }
    jj_sb_putv(c, &b, jv_str_sub(c, fmt, run, n - run));
    if (list ? ai != list->u.list.n : ai == 0) FAIL("not all arguments converted during string formatting");
    return jj_sb_done(c, &b);
}

jv *jj_binop(jj_ctx *c, jop op, jv *a, jv *b, int line) {
    if (op == JOP_CONCAT) {
        jj_sb s = { 0 };
        jv_to_str(c, &s, a, line);
        jv_to_str(c, &s, b, line);
        return jj_sb_done(c, &s);
    }
    no_undef(c, a, line);
    no_undef(c, b, line);
    const bool num = jv_is_num(a) && jv_is_num(b);
    const bool ints = num && a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    switch (op) {
    case JOP_ADD:
        if (ints) return int_or_fail(c, (__int128)ival(a) + ival(b), line);
        if (num) return jv_float(c, jv_num(a) + jv_num(b));
        if (a->kind == JV_STR && b->kind == JV_STR) {
            jj_sb s = { 0 };
            jj_sb_putv(c, &s, a);
            jj_sb_putv(c, &s, b);
            return jj_sb_done(c, &s);
        }
        if (a->kind == JV_LIST && b->kind == JV_LIST && a->u.list.tuple == b->u.list.tuple) {
            jv *l = jv_list(c, a->u.list.n + b->u.list.n);
            l->u.list.tuple = a->u.list.tuple;
            if (a->u.list.n) memcpy(l->u.list.items, a->u.list.items, a->u.list.n * sizeof *l->u.list.items);
            if (b->u.list.n) memcpy(l->u.list.items + a->u.list.n, b->u.list.items, b->u.list.n * sizeof *l->u.list.items);
            return l;
        }
        if (a->kind == JV_STR) FAIL("can only concatenate str (not \"%s\") to str", jv_kind_name(b));
        FAIL("unsupported operand type(s) for +: '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
    case JOP_SUB:
        if (ints) return int_or_fail(c, (__int128)ival(a) - ival(b), line);
        if (num) return jv_float(c, jv_num(a) - jv_num(b));
        FAIL("unsupported operand type(s) for -: '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
    case JOP_MUL: {
        if (ints) return int_or_fail(c, (__int128)ival(a) * ival(b), line);
        if (num) return jv_float(c, jv_num(a) * jv_num(b));
        jv *seq = a->kind == JV_STR || a->kind == JV_LIST ? a : b;
        jv *cnt = seq == a ? b : a;
        if ((seq->kind == JV_STR || seq->kind == JV_LIST) && (cnt->kind == JV_INT || cnt->kind == JV_BOOL)) {
            int64_t k = ival(cnt);
            if (k < 0) k = 0;
            size_t len = seq->kind == JV_STR ? seq->u.str.n : seq->u.list.n;
            if ((double)k * (double)(len ? len : 1) > JJ_MAX_RANGE) FAIL("a repeated sequence over %d items", JJ_MAX_RANGE);
            if (seq->kind == JV_STR) {
                jj_sb s = { 0 };
                for (int64_t i = 0; i < k; i++) jj_sb_putv(c, &s, seq);
                return jj_sb_done(c, &s);
            }
            jv *l = jv_list(c, (size_t)k * len);
            l->u.list.tuple = seq->u.list.tuple;
            for (int64_t i = 0; i < k; i++)
                if (len) memcpy(l->u.list.items + (size_t)i * len, seq->u.list.items, len * sizeof *l->u.list.items);
            return l;
        }
        FAIL("unsupported operand type(s) for *: '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
    }
    case JOP_DIV:
        if (!num) FAIL("unsupported operand type(s) for /: '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
        if (jv_num(b) == 0) FAIL("division by zero");
        return jv_float(c, jv_num(a) / jv_num(b));
    case JOP_FLOORDIV: case JOP_MOD:
        if (op == JOP_MOD && a->kind == JV_STR) return str_format(c, a, b, line);
        if (!num) FAIL("unsupported operand type(s) for %s: '%s' and '%s'", op == JOP_MOD ? "%" : "//",
                       jv_kind_name(a), jv_kind_name(b));
        if (jv_num(b) == 0) FAIL(op == JOP_MOD ? "modulo by zero" : "division by zero");
        if (ints) {
            int64_t x = ival(a), y = ival(b);
            if (x == INT64_MIN && y == -1) FAIL("integer overflow");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) { q--; r += y; }
            return jv_int(c, op == JOP_MOD ? r : q);
        } else {
            double x = jv_num(a), y = jv_num(b), q = floor(x / y);
            return jv_float(c, op == JOP_MOD ? x - q * y : q);
        }
    case JOP_POW:
        if (!num) FAIL("unsupported operand type(s) for **: '%s' and '%s'", jv_kind_name(a), jv_kind_name(b));
        if (ints && ival(b) >= 0) {
            __int128 r = 1;
            int64_t base = ival(a), e = ival(b);
            for (int64_t i = 0; i < e; i++) {
                r *= base;
                if (r > INT64_MAX || r < INT64_MIN) FAIL("integer overflow");
                if (r == 0 || r == 1) break;
            }
            return jv_int(c, (int64_t)r);
        }
        return jv_float(c, pow(jv_num(a), jv_num(b)));
    default: FAIL("internal: bad operator");
    }
}

/* ------------------------------------------------------------------------
 * Attribute and item access
 * ---------------------------------------------------------------------- */
static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha", "isalnum",
    "isspace", "islower", "isupper", "format", NULL,
};
static const char *const dict_methods[] = { "items", "keys", "values", "get", "copy", "pop", "update",
                                            "setdefault", "clear", "popitem", NULL };
static const char *const list_methods[] = { "index", "count", "copy", "append", "extend", "pop", "insert",
                                            "remove", "sort", "reverse", "clear", NULL };

static bool in_list(const char *const *l, const char *s) {
    for (; *l; l++) if (!strcmp(*l, s)) return true;
    return false;
}

bool jj_method_known(const char *name) {
    return in_list(str_methods, name) || in_list(dict_methods, name) || in_list(list_methods, name) ||
           !strcmp(name, "cycle");
}

static jv *method(jj_ctx *c, jv *self, const char *name) {
    jv *m = jv_new(c, JV_METHOD);
    m->u.method.self = self;
    m->u.method.name = name;
    return m;
}

static jv *loop_attr(jj_ctx *c, jv *lv, const char *name) {
    jj_loop *l = lv->u.loop;
    const size_t n = l->items->u.list.n, i = l->idx;
    if (!strcmp(name, "index")) return jv_int(c, (int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int(c, (int64_t)i);
    if (!strcmp(name, "revindex")) return jv_int(c, (int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int(c, (int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int(c, (int64_t)n);
    if (!strcmp(name, "previtem")) return i ? l->items->u.list.items[i - 1] : jv_undef(c, "previtem");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? l->items->u.list.items[i + 1] : jv_undef(c, "nextitem");
    if (!strcmp(name, "depth")) return jv_int(c, 1);
    if (!strcmp(name, "depth0")) return jv_int(c, 0);
    if (!strcmp(name, "cycle")) return method(c, lv, "cycle");
    return jv_undef(c, name);
}

jv *jj_getattr(jj_ctx *c, jv *obj, const char *name, int line) {
    switch (obj->kind) {
    case JV_UNDEF: FAIL("'%s' is undefined (reading .%s)", undef_name(obj), name);
    case JV_DICT: {
        if (in_list(dict_methods, name)) return method(c, obj, name);
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(c, name);
    }
    case JV_NS: {
        jv *v = jv_dict_gets(obj, name);
        return v ? v : jv_undef(c, name);
    }
    case JV_STR: return in_list(str_methods, name) ? method(c, obj, name) : jv_undef(c, name);
    case JV_LIST: return in_list(list_methods, name) ? method(c, obj, name) : jv_undef(c, name);
    case JV_LOOP: return loop_attr(c, obj, name);
    default: return jv_undef(c, name);
    }
}

jv *jj_getitem(jj_ctx *c, jv *obj, jv *key, int line) {
    switch (obj->kind) {
    case JV_UNDEF: FAIL("'%s' is undefined (reading an item)", undef_name(obj));
    case JV_DICT: case JV_NS: {
        jv *v = jv_dict_get(obj, key);
        if (v) return v;
        break;
    }
    case JV_LIST: case JV_STR:
        if (key->kind == JV_INT || key->kind == JV_BOOL) {
            int64_t i = ival(key);
            if (obj->kind == JV_LIST) {
                int64_t n = (int64_t)obj->u.list.n;
                if (i < 0) i += n;
                return i >= 0 && i < n ? obj->u.list.items[i] : jv_undef(c, NULL);
            }
            int64_t n = (int64_t)jj_u8_len(obj->u.str.s, obj->u.str.n);
            if (i < 0) i += n;
            if (i < 0 || i >= n) return jv_undef(c, NULL);
            size_t at = jj_u8_offset(obj->u.str.s, obj->u.str.n, (size_t)i);
            size_t len = jj_u8_offset(obj->u.str.s + at, obj->u.str.n - at, 1);
            return jv_str_sub(c, obj, at, len);
        }
        break;
    case JV_LOOP:
        if (key->kind == JV_STR) return loop_attr(c, obj, key->u.str.s);
        break;
    default: break;
    }
    if (key->kind == JV_STR && obj->kind != JV_DICT && obj->kind != JV_NS) {
        char name[64];
        if (key->u.str.n < sizeof name && !memchr(key->u.str.s, 0, key->u.str.n)) {
            memcpy(name, key->u.str.s, key->u.str.n);
            name[key->u.str.n] = 0;
            const char *const *l = obj->kind == JV_STR ? str_methods : obj->kind == JV_LIST ? list_methods : NULL;
            for (; l && *l; l++) if (!strcmp(*l, name)) return method(c, obj, *l);
        }
    } else if (key->kind == JV_STR && obj->kind == JV_DICT) {
        for (const char *const *l = dict_methods; *l; l++)
            if (key->u.str.n == strlen(*l) && !memcmp(*l, key->u.str.s, key->u.str.n)) return method(c, obj, *l);
    }
    return jv_undef(c, NULL);
}

/* ------------------------------------------------------------------------
 * String helpers (code points; provenance kept through slices)
 * ---------------------------------------------------------------------- */
/* Is the code point at s[at] one of chars' code points (or whitespace when chars is NULL)? */
static bool strip_match(const char *s, size_t n, size_t at, const jv *chars, size_t *len) {
    if (!chars) return jj_is_space_at(s, n, at, len);
    *len = jj_u8_offset(s + at, n - at, 1);
    for (size_t i = 0; i < chars->u.str.n;) {
        size_t l = jj_u8_offset(chars->u.str.s + i, chars->u.str.n - i, 1);
        if (l == *len && !memcmp(chars->u.str.s + i, s + at, l)) return true;
        i += l;
    }
    return false;
}

static jv *str_strip(jj_ctx *c, jv *s, const jv *chars, bool left, bool right) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.n, lo = 0, hi = n, len;
    if (left)
        while (lo < hi && strip_match(p, n, lo, chars, &len)) lo += len;
    if (right)
        while (hi > lo) {
            size_t st = hi - 1;
            while (st > lo && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            if (!strip_match(p, n, st, chars, &len) || st + len != hi) break;
            hi = st;
        }
    return jv_str_sub(c, s, lo, hi - lo);
}

static jv *str_map(jj_ctx *c, jv *s, int mode) {   /* 0 lower, 1 upper, 2 title, 3 capitalize */
    char *o = jj_alloc(&c->arena, s->u.str.n + 1);
    if (!o) jj_fail(c, 0, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    bool prev_alpha = false;
    for (size_t i = 0; i < s->u.str.n; i++) {
        unsigned char ch = (unsigned char)s->u.str.s[i];
        int r = ch;
        if (mode == 0) r = tolower(ch);
        else if (mode == 1) r = toupper(ch);
        else if (mode == 2) r = prev_alpha ? tolower(ch) : toupper(ch);
        else r = i == 0 ? toupper(ch) : tolower(ch);
        prev_alpha = isalpha(ch) || ch >= 0x80;
        o[i] = (char)r;
    }
    return str_taint(c, o, s->u.str.n, taint_of(s));
}

static jv *str_replace(jj_ctx *c, jv *s, jv *old, jv *new_, int64_t count, int line) {
    jj_sb b = { 0 };
    const char *p = s->u.str.s;
    size_t n = s->u.str.n, i = 0, run = 0;
    int64_t done = 0;
    if (old->u.str.n == 0) {
        /* Python inserts new between every code point */
        size_t k = 0;
        while (count < 0 || done < count) {
            jj_sb_putv(c, &b, new_);
            done++;
            if (k >= n) break;
            size_t l = jj_u8_offset(p + k, n - k, 1);
            jj_sb_putv(c, &b, jv_str_sub(c, s, k, l));
            k += l;
        }
        jj_sb_putv(c, &b, jv_str_sub(c, s, k, n - k));
        return jj_sb_done(c, &b);
    }
    while (i + old->u.str.n <= n && (count < 0 || done < count)) {
        const char *f = memmem(p + i, n - i, old->u.str.s, old->u.str.n);
        if (!f) break;
        size_t at = (size_t)(f - p);
        jj_sb_putv(c, &b, jv_str_sub(c, s, run, at - run));
        jj_sb_putv(c, &b, new_);
        i = run = at + old->u.str.n;
        done++;
        if (b.n > JJ_MAX_OUTPUT) FAIL("a string grew over %zu MiB", JJ_MAX_OUTPUT >> 20);
    }
    jj_sb_putv(c, &b, jv_str_sub(c, s, run, n - run));
    return jj_sb_done(c, &b);
}

/* A growing list (amortised) for building results. */
typedef struct lb { jv *l; size_t cap; } lb;
static void lb_push(jj_ctx *c, lb *b, jv *x) {
    if (!b->l) b->l = jv_list(c, 0);
    if (b->l->u.list.n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 8;
        jv **items = jj_alloc(&c->arena, cap * sizeof *items);
        if (!items) jj_fail(c, 0, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
        if (b->l->u.list.n) memcpy(items, b->l->u.list.items, b->l->u.list.n * sizeof *items);
        b->l->u.list.items = items;
        b->cap = cap;
    }
    b->l->u.list.items[b->l->u.list.n++] = x;
}
static jv *lb_done(jj_ctx *c, lb *b) { return b->l ? b->l : jv_list(c, 0); }

static jv *str_split(jj_ctx *c, jv *s, jv *sep, int64_t maxsplit, int line) {
    lb out = { 0 };
    const char *p = s->u.str.s;
    size_t n = s->u.str.n;
    if (!sep || sep->kind == JV_NONE) {
        size_t i = 0, len;
        int64_t done = 0;
        for (;;) {
            while (i < n && jj_is_space_at(p, n, i, &len)) i += len;
            if (i >= n) break;
            if (maxsplit >= 0 && done == maxsplit) {
                /* the rest, right-stripped, is the last item (Python) */
                jv *rest = str_strip(c, jv_str_sub(c, s, i, n - i), NULL, false, true);
                lb_push(c, &out, rest);
                break;
            }
            size_t st = i;
            while (i < n && !jj_is_space_at(p, n, i, &len)) i += jj_u8_offset(p + i, n - i, 1);
            lb_push(c, &out, jv_str_sub(c, s, st, i - st));
            done++;
        }
        return lb_done(c, &out);
    }
    need_str(c, sep, "split's separator", line);
    if (!sep->u.str.n) FAIL("empty separator");
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *f = maxsplit >= 0 && done == maxsplit ? NULL :
                        (i <= n ? memmem(p + i, n - i, sep->u.str.s, sep->u.str.n) : NULL);
        if (!f) {
            lb_push(c, &out, jv_str_sub(c, s, i, n - i));
            break;
        }
        lb_push(c, &out, jv_str_sub(c, s, i, (size_t)(f - p) - i));
        i = (size_t)(f - p) + sep->u.str.n;
        done++;
    }
    return lb_done(c, &out);
}

static jv *str_splitlines(jj_ctx *c, jv *s) {
    lb out = { 0 };
    const char *p = s->u.str.s;
    size_t n = s->u.str.n, st = 0, i = 0;
    while (i < n) {
        size_t brk = 0;
        if (p[i] == '\n' || p[i] == '\r' || p[i] == '\v' || p[i] == '\f' || (p[i] >= 0x1c && p[i] <= 0x1e))
            brk = p[i] == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
        else if ((unsigned char)p[i] == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) brk = 2;
        else if ((unsigned char)p[i] == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
                 ((unsigned char)p[i + 2] == 0xA8 || (unsigned char)p[i + 2] == 0xA9)) brk = 3;
        if (!brk) { i++; continue; }
        lb_push(c, &out, jv_str_sub(c, s, st, i - st));
        i += brk;
        st = i;
    }
    if (st < n) lb_push(c, &out, jv_str_sub(c, s, st, n - st));
    return lb_done(c, &out);
}

static bool str_has_prefix(const jv *s, const jv *p, bool suffix) {
    if (p->u.str.n > s->u.str.n) return false;
    return !memcmp(s->u.str.s + (suffix ? s->u.str.n - p->u.str.n : 0), p->u.str.s, p->u.str.n);
}

static jv *join(jj_ctx *c, jv *items, jv *sep, int line) {
    jj_sb b = { 0 };
    for (size_t i = 0; i < items->u.list.n; i++) {
        if (i && sep) jj_sb_putv(c, &b, sep);
        jv_to_str(c, &b, items->u.list.items[i], line);
        if (b.n > JJ_MAX_OUTPUT) FAIL("a string grew over %zu MiB", JJ_MAX_OUTPUT >> 20);
    }
    return jj_sb_done(c, &b);
}

static bool str_all(const jv *s, int (*pred)(int)) {
    if (!s->u.str.n) return false;
    for (size_t i = 0; i < s->u.str.n; i++)
        if (!pred((unsigned char)s->u.str.s[i])) return false;
    return true;
}

static bool str_cased(const jv *s, bool upper) {
    bool any = false;
    for (size_t i = 0; i < s->u.str.n; i++) {
        int ch = (unsigned char)s->u.str.s[i];
        if (upper ? islower(ch) : isupper(ch)) return false;
        any |= upper ? isupper(ch) != 0 : islower(ch) != 0;
    }
    return any;
}

static int64_t str_find(const jv *s, const jv *sub, bool rev) {
    const char *p = s->u.str.s;
    size_t n = s->u.str.n, m = sub->u.str.n;
    if (m > n) return -1;
    int64_t hit = -1;
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(p + i, sub->u.str.s, m)) {
            hit = (int64_t)jj_u8_len(p, i);
            if (!rev) break;
        }
    return hit;
}

/* str.format: {} {0} {name} fields with an optional !r/!s and a :spec of
 * [width][.precision][sdf]; {{ and }} are braces. */
static jv *str_dot_format(jj_ctx *c, jv *s, jv **args, int n, const char **kwn, jv **kwv, int nkw, int line) {
    jj_sb b = { 0 };
    const char *p = s->u.str.s;
    size_t len = s->u.str.n, run = 0;
    int auto_idx = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '{' && p[i] != '}') continue;
        jj_sb_putv(c, &b, jv_str_sub(c, s, run, i - run));
        if (i + 1 < len && p[i + 1] == p[i]) {   /* {{ or }} */
            jj_sb_put(c, &b, p + i, 1, taint_of(s));
            run = ++i + 1;
            continue;
        }
        if (p[i] == '}') FAIL("Single '}' encountered in format string");
        const char *close = memchr(p + i, '}', len - i);
        if (!close) FAIL("Single '{' encountered in format string");
        size_t fe = (size_t)(close - p), ne = i + 1;
        while (ne < fe && p[ne] != '!' && p[ne] != ':') ne++;
        char name[64];
        size_t nl = ne - i - 1;
        if (nl >= sizeof name) FAIL("format field name too long");
        memcpy(name, p + i + 1, nl);
        name[nl] = 0;
        jv *x = NULL;
        if (!nl) x = auto_idx < n ? args[auto_idx++] : NULL;
        else if (isdigit((unsigned char)name[0])) { long k = strtol(name, NULL, 10); x = k < n ? args[k] : NULL; }
        else x = arg(args, -1, -1, kwn, kwv, nkw, name);
        if (!x) FAIL("format: no value for field '{%s}'", name);
        bool as_repr = false;
        size_t q = ne;
        if (q < fe && p[q] == '!') { as_repr = q + 1 < fe && p[q + 1] == 'r'; q += 2; }
        char spec[32] = "";
        if (q < fe && p[q] == ':') {
            size_t sl = fe - q - 1;
            if (sl >= sizeof spec - 4) FAIL("format spec too long");
            memcpy(spec, p + q + 1, sl);
            spec[sl] = 0;
        }
        size_t sl = strlen(spec);
        char conv = sl ? spec[sl - 1] : 0;
        if (conv == 'd' || conv == 'f' || conv == 'x') {
            if (!jv_is_num(x)) FAIL("format: '%c' needs a number, not %s", conv, jv_kind_name(x));
            char f[40], out[128];
            spec[sl - 1] = 0;
            if (conv == 'd' || conv == 'x') {
                snprintf(f, sizeof f, "%%%sll%c", spec, conv);
                snprintf(out, sizeof out, f, x->kind == JV_FLOAT ? (long long)x->u.f : (long long)(x->kind == JV_INT ? x->u.i : x->u.b));
            } else {
                snprintf(f, sizeof f, "%%%sf", spec);
                snprintf(out, sizeof out, f, jv_num(x));
            }
            jj_sb_puts(c, &b, out);
        } else if (!sl || conv == 's') {
            if (as_repr) jv_repr(c, &b, x, line); else jv_to_str(c, &b, x, line);
        } else FAIL("format: unsupported spec ':%s'", spec);
        run = fe + 1;
        i = fe;
    }
    jj_sb_putv(c, &b, jv_str_sub(c, s, run, len - run));
    return jj_sb_done(c, &b);
}

static jv *call_str_method(jj_ctx *c, jv *s, const char *name, jv **args, int n, const char **kwn, jv **kwv,
                           int nkw, int line) {
    jv *a0 = arg(args, n, 0, kwn, kwv, nkw, "");
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        jv *ch = arg(args, n, 0, kwn, kwv, nkw, "chars");
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) need_str(c, ch, "strip's argument", line);
        return str_strip(c, s, ch, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv *ms = arg(args, n, 1, kwn, kwv, nkw, "maxsplit");
        int64_t m = ms ? need_int(c, ms, "maxsplit", line) : -1;
        if (!strcmp(name, "rsplit") && m >= 0) FAIL("rsplit with maxsplit is not supported");
        return str_split(c, s, arg(args, n, 0, kwn, kwv, nkw, "sep"), m, line);
    }
    if (!strcmp(name, "splitlines")) return str_splitlines(c, s);
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (!a0) FAIL("%s() takes at least 1 argument", name);
        const bool suffix = name[0] == 'e';
        if (a0->kind == JV_LIST && a0->u.list.tuple) {
            for (size_t i = 0; i < a0->u.list.n; i++)
                if (str_has_prefix(s, need_str(c, a0->u.list.items[i], name, line), suffix)) return &jv_true_v;
            return &jv_false_v;
        }
        return jv_bool(str_has_prefix(s, need_str(c, a0, name, line), suffix));
    }
    if (!strcmp(name, "upper")) return str_map(c, s, 1);
    if (!strcmp(name, "lower")) return str_map(c, s, 0);
    if (!strcmp(name, "title")) return str_map(c, s, 2);
    if (!strcmp(name, "capitalize")) return str_map(c, s, 3);
    if (!strcmp(name, "replace")) {
        if (n < 2) FAIL("replace() takes at least 2 arguments");
        jv *cnt = arg(args, n, 2, kwn, kwv, nkw, "count");
        return str_replace(c, s, need_str(c, args[0], "replace's argument", line),
                           jv_string(c, need_str(c, args[1], "replace's argument", line), line),
                           cnt ? need_int(c, cnt, "count", line) : -1, line);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind")) {
        if (!a0) FAIL("%s() takes at least 1 argument", name);
        return jv_int(c, str_find(s, need_str(c, a0, name, line), name[0] == 'r'));
    }
    if (!strcmp(name, "count")) {
        if (!a0) FAIL("count() takes at least 1 argument");
        need_str(c, a0, "count's argument", line);
        int64_t k = 0;
        if (!a0->u.str.n) return jv_int(c, (int64_t)jj_u8_len(s->u.str.s, s->u.str.n) + 1);
        for (size_t i = 0; i + a0->u.str.n <= s->u.str.n;) {
            if (!memcmp(s->u.str.s + i, a0->u.str.s, a0->u.str.n)) { k++; i += a0->u.str.n; }
            else i++;
        }
        return jv_int(c, k);
    }
    if (!strcmp(name, "join")) {
        if (!a0) FAIL("join() takes exactly one argument");
        jv *items = jj_iter_list(c, a0, line);
        for (size_t i = 0; i < items->u.list.n; i++)
            if (items->u.list.items[i]->kind != JV_STR)
                FAIL("sequence item %zu: expected str instance, %s found", i, jv_kind_name(items->u.list.items[i]));
        return join(c, items, s, line);
    }
    if (!strcmp(name, "isdigit")) return jv_bool(str_all(s, isdigit));
    if (!strcmp(name, "isalpha")) return jv_bool(str_all(s, isalpha));
    if (!strcmp(name, "isalnum")) return jv_bool(str_all(s, isalnum));
    if (!strcmp(name, "isspace")) return jv_bool(str_all(s, isspace));
    if (!strcmp(name, "islower")) return jv_bool(str_cased(s, false));
    if (!strcmp(name, "isupper")) return jv_bool(str_cased(s, true));
    if (!strcmp(name, "format")) return str_dot_format(c, s, args, n, kwn, kwv, nkw, line);
    FAIL("unsupported method 'str.%s'", name);
}

static jv *dict_items(jj_ctx *c, jv *d) {
    jv *l = jv_list(c, d->u.dict.n);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        jv *t = jv_list(c, 2);
        t->u.list.tuple = true;
        t->u.list.items[0] = d->u.dict.keys[i];
        t->u.list.items[1] = d->u.dict.vals[i];
        l->u.list.items[i] = t;
    }
    return l;
}

jv *jj_call_method(jj_ctx *c, const jv *self_c, const char *name, jv **args, int n, const char **kwn, jv **kwv,
                   int nkw, int line) {
    jv *self = (jv *)self_c;
    no_undef(c, self, line);
    if (self->kind == JV_STR && in_list(str_methods, name))
        return call_str_method(c, self, name, args, n, kwn, kwv, nkw, line);
    if (self->kind == JV_DICT && in_list(dict_methods, name)) {
        if (!strcmp(name, "items")) return dict_items(c, self);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            jv *l = jv_list(c, self->u.dict.n);
            for (size_t i = 0; i < self->u.dict.n; i++)
                l->u.list.items[i] = name[0] == 'k' ? self->u.dict.keys[i] : self->u.dict.vals[i];
            return l;
        }
        if (!strcmp(name, "get")) {
            if (n < 1) FAIL("get() takes at least 1 argument");
            jv *v = jv_dict_get(self, args[0]);
            return v ? v : n > 1 ? args[1] : &jv_none_v;
        }
        if (!strcmp(name, "copy")) {
            jv *d = jv_dict(c);
            for (size_t i = 0; i < self->u.dict.n; i++) jv_dict_set(c, d, self->u.dict.keys[i], self->u.dict.vals[i]);
            return d;
        }
        FAIL("access to attribute '%s' of 'dict' object is unsafe", name);
    }
    if (self->kind == JV_LIST && in_list(list_methods, name)) {
        if (!strcmp(name, "index") || !strcmp(name, "count")) {
            if (n < 1) FAIL("%s() takes at least 1 argument", name);
            int64_t k = 0;
            for (size_t i = 0; i < self->u.list.n; i++)
                if (jv_eq(self->u.list.items[i], args[0])) {
                    if (name[0] == 'i') return jv_int(c, (int64_t)i);
                    k++;
                }
            if (name[0] == 'i') FAIL("value is not in list");
            return jv_int(c, k);
        }
        if (!strcmp(name, "copy")) {
            jv *l = jv_list(c, self->u.list.n);
            if (self->u.list.n) memcpy(l->u.list.items, self->u.list.items, self->u.list.n * sizeof *l->u.list.items);
            return l;
        }
        FAIL("access to attribute '%s' of '%s' object is unsafe", name, jv_kind_name(self));
    }
    if (self->kind == JV_LOOP && !strcmp(name, "cycle")) {
        if (n < 1) FAIL("no items for cycling given");
        return args[self->u.loop->idx % (size_t)n];
    }
    FAIL("'%s' object has no method '%s'", jv_kind_name(self), name);
}

/* ------------------------------------------------------------------------
 * Globals
 * ---------------------------------------------------------------------- */
jv *jj_global(jj_ctx *c, const char *name) {
    static const struct { const char *name; int id; } g[] = {
        { "raise_exception", JF_RAISE }, { "namespace", JF_NAMESPACE }, { "range", JF_RANGE },
        { "strftime_now", JF_STRFTIME }, { "dict", JF_DICT },
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        if (!strcmp(g[i].name, name)) {
            jv *f = jv_new(c, JV_FUNC);
            f->u.func.id = g[i].id;
            return f;
        }
    return NULL;
}

jv *jj_call_func(jj_ctx *c, const jv *fn, jv **args, int n, const char **kwn, jv **kwv, int nkw, int line) {
    switch (fn->u.func.id) {
    case JF_RAISE: {
        jj_sb b = { 0 };
        if (n > 0) jv_to_str(c, &b, args[0], line);
        jv *s = jj_sb_done(c, &b);
        FAIL("raise_exception: %.*s", (int)(s->u.str.n > 300 ? 300 : s->u.str.n), s->u.str.s);
    }
    case JF_NAMESPACE: case JF_DICT: {
        jv *d = jv_dict(c);
        if (fn->u.func.id == JF_NAMESPACE) d->kind = JV_NS;
        for (int i = 0; i < n; i++) {
            if (args[i]->kind != JV_DICT) FAIL("%s() takes keyword arguments or a dict", fn->u.func.id == JF_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < args[i]->u.dict.n; k++) jv_dict_set(c, d, args[i]->u.dict.keys[k], args[i]->u.dict.vals[k]);
        }
        for (int k = 0; k < nkw; k++) jv_dict_set(c, d, jv_cstr(c, kwn[k]), kwv[k]);
        return d;
    }
    case JF_RANGE: {
        if (n < 1 || n > 3 || nkw) FAIL("range() takes 1 to 3 positional arguments");
        int64_t lo = 0, hi, step = 1;
        if (n == 1) hi = need_int(c, args[0], "range's argument", line);
        else {
            lo = need_int(c, args[0], "range's argument", line);
            hi = need_int(c, args[1], "range's argument", line);
            if (n == 3) step = need_int(c, args[2], "range's step", line);
        }
        if (step == 0) FAIL("range() arg 3 must not be zero");
        lb out = { 0 };
        for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
            if (out.l && out.l->u.list.n >= JJ_MAX_RANGE) FAIL("range() over %d items", JJ_MAX_RANGE);
            lb_push(c, &out, jv_int(c, i));
        }
        return lb_done(c, &out);
    }
    case JF_STRFTIME: {
        if (n < 1 || args[0]->kind != JV_STR) FAIL("strftime_now() takes a format string");
        time_t t = (time_t)c->now;
        struct tm tm;
        gmtime_r(&t, &tm);
        char fmt[256], out[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)(args[0]->u.str.n > 255 ? 255 : args[0]->u.str.n), args[0]->u.str.s);
        size_t k = strftime(out, sizeof out, fmt, &tm);
        return jv_str(c, out, k, JT_MARKUP);
    }
    default: FAIL("internal: unknown function");
    }
}

/* ------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------- */
static const char *const test_names[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
    "mapping", "iterable", "sequence", "callable", "sameas", "equalto", "eq", "==", "ne", "!=", "lt", "<",
    "le", "<=", "gt", ">", "ge", ">=", "in", "divisibleby", "even", "odd", "lower", "upper", NULL,
};

bool jj_test_known(const char *name) { return in_list(test_names, name); }

bool jj_apply_test(jj_ctx *c, const char *name, jv *x, jv **args, int n, int line) {
    const int k = x->kind;
    if (!strcmp(name, "defined")) return k != JV_UNDEF;
    if (!strcmp(name, "undefined")) return k == JV_UNDEF;
    if (!strcmp(name, "none")) return k == JV_NONE;
    if (!strcmp(name, "boolean")) return k == JV_BOOL;
    if (!strcmp(name, "false")) return k == JV_BOOL && !x->u.b;
    if (!strcmp(name, "true")) return k == JV_BOOL && x->u.b;
    if (!strcmp(name, "integer")) return k == JV_INT;
    if (!strcmp(name, "float")) return k == JV_FLOAT;
    if (!strcmp(name, "number")) return k == JV_INT || k == JV_FLOAT || k == JV_BOOL;
    if (!strcmp(name, "string")) return k == JV_STR;
    if (!strcmp(name, "mapping")) return k == JV_DICT;
    if (!strcmp(name, "iterable")) return k == JV_STR || k == JV_LIST || k == JV_DICT || k == JV_UNDEF;
    if (!strcmp(name, "sequence")) return k == JV_STR || k == JV_LIST || k == JV_DICT || k == JV_UNDEF;
    if (!strcmp(name, "callable")) return k == JV_FUNC || k == JV_MACRO || k == JV_METHOD;
    if (!strcmp(name, "lower")) { jv *s = jv_string(c, x, line); return str_cased(s, false); }
    if (!strcmp(name, "upper")) { jv *s = jv_string(c, x, line); return str_cased(s, true); }
    if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        int64_t v = need_int(c, x, "the value tested", line);
        return (v % 2 != 0) == (name[0] == 'o');
    }
    if (n < 1) FAIL("test '%s' takes an argument", name);
    jv *a = args[0];
    if (!strcmp(name, "sameas")) return x == a || (x->kind == a->kind && (k == JV_NONE || (k == JV_BOOL && x->u.b == a->u.b)));
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) return jv_eq(x, a);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jv_eq(x, a);
    if (!strcmp(name, "lt") || !strcmp(name, "<")) return jv_cmp(c, line, x, a) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return jv_cmp(c, line, x, a) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, ">")) return jv_cmp(c, line, x, a) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return jv_cmp(c, line, x, a) >= 0;
    if (!strcmp(name, "in")) {
        jv *r = NULL;
        if (a->kind == JV_STR) {
            if (x->kind != JV_STR) FAIL("'in <string>' requires string as left operand");
            return x->u.str.n == 0 || (a->u.str.n >= x->u.str.n && memmem(a->u.str.s, a->u.str.n, x->u.str.s, x->u.str.n));
        }
        if (a->kind == JV_DICT) return jv_dict_get(a, x) != NULL;
        if (a->kind == JV_LIST) {
            for (size_t i = 0; i < a->u.list.n; i++) if (jv_eq(x, a->u.list.items[i])) return true;
            return false;
        }
        (void)r;
        FAIL("argument of type '%s' is not iterable", jv_kind_name(a));
    }
    if (!strcmp(name, "divisibleby")) {
        int64_t d = need_int(c, a, "divisibleby's argument", line);
        if (!d) FAIL("modulo by zero");
        return need_int(c, x, "the value tested", line) % d == 0;
    }
    FAIL("unsupported test '%s'", name);
}

/* ------------------------------------------------------------------------
 * Filters
 * ---------------------------------------------------------------------- */
static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount", NULL,
};

bool jj_filter_known(const char *name) { return in_list(filter_names, name); }

static int64_t length_of(jj_ctx *c, const jv *x, int line) {
    switch (x->kind) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)jj_u8_len(x->u.str.s, x->u.str.n);
    case JV_LIST: return (int64_t)x->u.list.n;
    case JV_DICT: case JV_NS: return (int64_t)x->u.dict.n;
    default: FAIL("object of type '%s' has no len()", jv_kind_name(x));
    }
}

/* an attribute path "a.b" or an integer index, as jinja2's make_attrgetter */
static jv *attr_path(jj_ctx *c, jv *x, const jv *attr, int line) {
    if (attr->kind == JV_INT) return jj_getitem(c, x, (jv *)attr, line);
    need_str(c, (jv *)attr, "attribute", line);
    size_t st = 0;
    const char *p = attr->u.str.s;
    for (size_t i = 0; i <= attr->u.str.n; i++) {
        if (i < attr->u.str.n && p[i] != '.') continue;
        jv *key = jv_str(c, p + st, i - st, JT_MARKUP);
        bool digits = i > st;
        for (size_t k = st; k < i; k++) digits &= isdigit((unsigned char)p[k]) != 0;
        if (digits) key = jv_int(c, strtoll(key->u.str.s, NULL, 10));
        x = jj_getitem(c, x, key, line);
        st = i + 1;
    }
    return x;
}

/* sort key: strings lowercased unless case-sensitive */
static jv *sort_key(jj_ctx *c, jv *x, bool case_sensitive) {
    if (x->kind != JV_STR || case_sensitive) return x;
    return str_map(c, x, 0);
}

static void sort_list(jj_ctx *c, jv **items, jv **keys, size_t n, bool reverse, int line) {
    /* stable insertion-merge: templates sort short lists */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int r = jv_cmp(c, line, keys[j - 1], keys[j]);
            if (reverse ? r >= 0 : r <= 0) break;
            jv *t = items[j]; items[j] = items[j - 1]; items[j - 1] = t;
            t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
        }
}

static jv *select_like(jj_ctx *c, const char *name, jv *x, jv **args, int n, int line) {
    const bool by_attr = strstr(name, "attr") != NULL, keep = name[0] == 's';
    jv *items = jj_iter_list(c, x, line);
    int ai = 0;
    jv *attr = NULL;
    if (by_attr) {
        if (n < 1) FAIL("%s needs an attribute name", name);
        attr = args[ai++];
    }
    const char *test = NULL;
    if (ai < n) {
        jv *t = need_str(c, args[ai++], "the test name", line);
        char *tn = jj_alloc(&c->arena, t->u.str.n + 1);
        if (!tn) FAIL("out of memory");
        memcpy(tn, t->u.str.s, t->u.str.n);
        if (!jj_test_known(tn)) FAIL("unsupported test '%s'", tn);
        test = tn;
    }
    lb out = { 0 };
    for (size_t i = 0; i < items->u.list.n; i++) {
        jv *it = items->u.list.items[i], *v = attr ? attr_path(c, it, attr, line) : it;
        bool ok = test ? jj_apply_test(c, test, v, args + ai, n - ai, line) : jv_truthy(v);
        if (ok == keep) lb_push(c, &out, it);
    }
    return lb_done(c, &out);
}

static jv *html_escape(jj_ctx *c, jv *s) {
    jj_sb b = { 0 };
    const uint8_t t = taint_of(s);
    for (size_t i = 0; i < s->u.str.n; i++) {
        const char ch = s->u.str.s[i];
        const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" :
                        ch == '\'' ? "&#39;" : NULL;
        if (r) jj_sb_put(c, &b, r, strlen(r), t);
        else jj_sb_put(c, &b, &ch, 1, t);
    }
    return jj_sb_done(c, &b);
}

static jv *f_indent(jj_ctx *c, jv *s, jv *width, bool first, bool blank, int line) {
    jj_sb ind = { 0 };
    if (!width) jj_sb_puts(c, &ind, "    ");
    else if (width->kind == JV_STR) jj_sb_putv(c, &ind, width);
    else for (int64_t i = need_int(c, width, "indent's width", line); i > 0 && ind.n < 1024; i--) jj_sb_puts(c, &ind, " ");
    jv *pad = jj_sb_done(c, &ind);
    jj_sb t = { 0 };
    jj_sb_putv(c, &t, s);
    jj_sb_puts(c, &t, "\n");
    jv *lines = str_splitlines(c, jj_sb_done(c, &t));
    jj_sb b = { 0 };
    if (first) jj_sb_putv(c, &b, pad);
    for (size_t i = 0; i < lines->u.list.n; i++) {
        jv *ln = lines->u.list.items[i];
        if (i) {
            jj_sb_puts(c, &b, "\n");
            if (blank || ln->u.str.n) jj_sb_putv(c, &b, pad);
        }
        jj_sb_putv(c, &b, ln);
    }
    return jj_sb_done(c, &b);
}

jv *jj_apply_filter(jj_ctx *c, const char *name, jv *x, jv **args, int n, const char **kwn, jv **kwv, int nkw,
                    int line) {
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv *dflt = arg(args, n, 0, kwn, kwv, nkw, "default_value");
        jv *boolean = arg(args, n, 1, kwn, kwv, nkw, "boolean");
        bool use = x->kind == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(x));
        return use ? (dflt ? dflt : jv_cstr(c, "")) : x;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) return jv_int(c, length_of(c, x, line));
    if (!strcmp(name, "string")) return jv_string(c, x, line);
    if (!strcmp(name, "safe")) return x;
    if (!strcmp(name, "e") || !strcmp(name, "escape")) return html_escape(c, jv_string(c, x, line));
    if (!strcmp(name, "trim")) {
        jv *ch = arg(args, n, 0, kwn, kwv, nkw, "chars");
        if (ch && ch->kind == JV_NONE) ch = NULL;
        if (ch) need_str(c, ch, "trim's argument", line);
        return str_strip(c, jv_string(c, x, line), ch, true, true);
    }
    if (!strcmp(name, "upper")) return str_map(c, jv_string(c, x, line), 1);
    if (!strcmp(name, "lower")) return str_map(c, jv_string(c, x, line), 0);
    if (!strcmp(name, "title")) return str_map(c, jv_string(c, x, line), 2);
    if (!strcmp(name, "capitalize")) return str_map(c, jv_string(c, x, line), 3);
    if (!strcmp(name, "replace")) {
        if (n < 2) FAIL("replace takes two arguments");
        jv *cnt = arg(args, n, 2, kwn, kwv, nkw, "count");
        return str_replace(c, jv_string(c, x, line), jv_string(c, args[0], line), jv_string(c, args[1], line),
                           cnt && cnt->kind != JV_NONE ? need_int(c, cnt, "count", line) : -1, line);
    }
    if (!strcmp(name, "tojson")) {
        no_undef(c, x, line);
        jv *ind = arg(args, n, 1, kwn, kwv, nkw, "indent");
        jv *seps = arg(args, n, 2, kwn, kwv, nkw, "separators");
        jv *sk = arg(args, n, 3, kwn, kwv, nkw, "sort_keys");
        jv *ea = arg(args, n, 0, kwn, kwv, nkw, "ensure_ascii");
        if (ea && jv_truthy(ea)) FAIL("tojson: ensure_ascii=True is not supported");
        int indent = -1;
        if (ind && ind->kind != JV_NONE) {
            indent = (int)need_int(c, ind, "tojson's indent", line);
            if (indent < 0) indent = 0;
            if (indent > 64) FAIL("tojson: indent over 64");
        }
        const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
        if (seps && seps->kind != JV_NONE) {
            if (seps->kind != JV_LIST || seps->u.list.n != 2 || seps->u.list.items[0]->kind != JV_STR ||
                seps->u.list.items[1]->kind != JV_STR)
                FAIL("tojson: separators must be two strings");
            item_sep = jv_string(c, seps->u.list.items[0], line)->u.str.s;
            key_sep = jv_string(c, seps->u.list.items[1], line)->u.str.s;
        }
        jj_sb b = { 0 };
        jv_tojson(c, &b, x, indent, item_sep, key_sep, sk && jv_truthy(sk), 0, line);
        return jj_sb_done(c, &b);
    }
    if (!strcmp(name, "items")) {
        if (x->kind == JV_UNDEF) return jv_list(c, 0);
        if (x->kind != JV_DICT) FAIL("Can only get item pairs from a mapping.");
        return dict_items(c, x);
    }
    if (!strcmp(name, "list")) {
        no_undef(c, x, line);
        jv *l = jj_iter_list(c, x, line);
        if (l == x && l->u.list.tuple) {
            jv *m = jv_list(c, l->u.list.n);
            if (l->u.list.n) memcpy(m->u.list.items, l->u.list.items, l->u.list.n * sizeof *m->u.list.items);
            return m;
        }
        return l;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jv *l = jj_iter_list(c, x, line);
        if (!l->u.list.n) return jv_undef(c, NULL);
        return l->u.list.items[name[0] == 'f' ? 0 : l->u.list.n - 1];
    }
    if (!strcmp(name, "reverse")) {
        no_undef(c, x, line);
        jv *l = jj_iter_list(c, x, line), *r = jv_list(c, l->u.list.n);
        for (size_t i = 0; i < l->u.list.n; i++) r->u.list.items[i] = l->u.list.items[l->u.list.n - 1 - i];
        if (x->kind != JV_STR) return r;
        return join(c, r, NULL, line);
    }
    if (!strcmp(name, "join")) {
        jv *sep = arg(args, n, 0, kwn, kwv, nkw, "d");
        jv *attr = arg(args, n, 1, kwn, kwv, nkw, "attribute");
        jv *l = jj_iter_list(c, x, line);
        if (attr) {
            jv *m = jv_list(c, l->u.list.n);
            for (size_t i = 0; i < l->u.list.n; i++) m->u.list.items[i] = attr_path(c, l->u.list.items[i], attr, line);
            l = m;
        }
        return join(c, l, sep ? jv_string(c, sep, line) : NULL, line);
    }
    if (!strcmp(name, "map")) {
        jv *l = jj_iter_list(c, x, line), *m = jv_list(c, l->u.list.n);
        jv *attr = arg(args, -1, -1, kwn, kwv, nkw, "attribute");
        if (attr) {
            jv *dflt = arg(args, -1, -1, kwn, kwv, nkw, "default");
            for (size_t i = 0; i < l->u.list.n; i++) {
                jv *v = attr_path(c, l->u.list.items[i], attr, line);
                m->u.list.items[i] = v->kind == JV_UNDEF && dflt ? dflt : v;
            }
            return m;
        }
        if (n < 1) FAIL("map needs a filter name or attribute=");
        jv *fname = need_str(c, args[0], "map's filter name", line);
        char *fn = jj_alloc(&c->arena, fname->u.str.n + 1);
        if (!fn) FAIL("out of memory");
        memcpy(fn, fname->u.str.s, fname->u.str.n);
        if (!jj_filter_known(fn)) FAIL("unsupported filter '%s'", fn);
        for (size_t i = 0; i < l->u.list.n; i++)
            m->u.list.items[i] = jj_apply_filter(c, fn, l->u.list.items[i], args + 1, n - 1, kwn, kwv, nkw, line);
        return m;
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject") || !strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_like(c, name, x, args, n, line);
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort") || !strcmp(name, "unique") || !strcmp(name, "min") ||
        !strcmp(name, "max")) {
        const bool dictsort = name[0] == 'd', sort = !strcmp(name, "sort");
        /* positions: sort(reverse, case_sensitive, attribute), dictsort(case_sensitive, by,
         * reverse), unique/min/max(case_sensitive, attribute) */
        jv *rev = sort ? arg(args, n, 0, kwn, kwv, nkw, "reverse") : dictsort ? arg(args, n, 2, kwn, kwv, nkw, "reverse") : NULL;
        jv *cs = arg(args, n, sort ? 1 : 0, kwn, kwv, nkw, "case_sensitive");
        jv *attr = dictsort ? NULL : arg(args, n, sort ? 2 : 1, kwn, kwv, nkw, "attribute");
        jv *by = dictsort ? arg(args, n, 1, kwn, kwv, nkw, "by") : NULL;
        if (dictsort && x->kind != JV_DICT) FAIL("dictsort needs a mapping");
        jv *src = dictsort ? dict_items(c, x) : jj_iter_list(c, x, line);
        size_t len = src->u.list.n;
        jv *items = jv_list(c, len), *keys = jv_list(c, len);
        const bool case_s = cs && jv_truthy(cs);
        for (size_t i = 0; i < len; i++) {
            jv *it = src->u.list.items[i], *k = it;
            if (dictsort) k = it->u.list.items[by && by->kind == JV_STR && by->u.str.n == 5 && !memcmp(by->u.str.s, "value", 5)];
            else if (attr && attr->kind != JV_NONE) k = attr_path(c, it, attr, line);
            items->u.list.items[i] = it;
            keys->u.list.items[i] = sort_key(c, k, case_s);
        }
        if (!strcmp(name, "unique")) {
            lb out = { 0 };
            for (size_t i = 0; i < len; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++) seen = jv_eq(keys->u.list.items[j], keys->u.list.items[i]);
                if (!seen) lb_push(c, &out, items->u.list.items[i]);
            }
            return lb_done(c, &out);
        }
        sort_list(c, items->u.list.items, keys->u.list.items, len, rev && jv_truthy(rev), line);
        if (!strcmp(name, "min")) return len ? items->u.list.items[0] : jv_undef(c, NULL);
        if (!strcmp(name, "max")) {
            /* Python's max keeps the first of equal maxima */
            if (!len) return jv_undef(c, NULL);
            size_t best = 0;
            for (size_t i = 1; i < len; i++)
                if (jv_cmp(c, line, sort_key(c, attr && attr->kind != JV_NONE ? attr_path(c, src->u.list.items[i], attr, line) : src->u.list.items[i], case_s),
                           sort_key(c, attr && attr->kind != JV_NONE ? attr_path(c, src->u.list.items[best], attr, line) : src->u.list.items[best], case_s)) > 0)
                    best = i;
            return src->u.list.items[best];
        }
        return items;
    }
    if (!strcmp(name, "sum")) {
        jv *l = jj_iter_list(c, x, line);
        jv *attr = arg(args, n, 0, kwn, kwv, nkw, "attribute");
        jv *acc = arg(args, n, 1, kwn, kwv, nkw, "start");
        if (!acc) acc = jv_int(c, 0);
        for (size_t i = 0; i < l->u.list.n; i++)
            acc = jj_binop(c, JOP_ADD, acc, attr ? attr_path(c, l->u.list.items[i], attr, line) : l->u.list.items[i], line);
        return acc;
    }
    if (!strcmp(name, "int") || !strcmp(name, "float")) {
        const bool is_int = name[0] == 'i';
        jv *dflt = arg(args, n, 0, kwn, kwv, nkw, "default");
        if (x->kind == JV_INT || x->kind == JV_BOOL) return is_int ? jv_int(c, ival(x)) : jv_float(c, (double)ival(x));
        if (x->kind == JV_FLOAT) {
            if (!is_int) return x;
            if (!isfinite(x->u.f) || fabs(x->u.f) > 9e18) FAIL("cannot convert float %g to integer", x->u.f);
            return jv_int(c, (int64_t)x->u.f);
        }
        if (x->kind == JV_STR) {
            char buf[64];
            jv *t = str_strip(c, x, NULL, true, true);
            if (t->u.str.n && t->u.str.n < sizeof buf) {
                memcpy(buf, t->u.str.s, t->u.str.n);
                buf[t->u.str.n] = 0;
                char *e;
                if (is_int) {
                    long long v = strtoll(buf, &e, 10);
                    if (!*e) return jv_int(c, v);
                    double f = strtod(buf, &e);
                    if (!*e && isfinite(f) && fabs(f) < 9e18) return jv_int(c, (int64_t)f);
                } else {
                    double f = strtod(buf, &e);
                    if (!*e) return jv_float(c, f);
                }
            }
        }
        return dflt ? dflt : is_int ? jv_int(c, 0) : jv_float(c, 0.0);
    }
    if (!strcmp(name, "abs")) {
        if (x->kind == JV_INT) { if (x->u.i == INT64_MIN) FAIL("integer overflow"); return jv_int(c, x->u.i < 0 ? -x->u.i : x->u.i); }
        if (x->kind == JV_FLOAT) return jv_float(c, fabs(x->u.f));
        if (x->kind == JV_BOOL) return jv_int(c, x->u.b);
        FAIL("bad operand type for abs(): '%s'", jv_kind_name(x));
    }
    if (!strcmp(name, "round")) {
        if (!jv_is_num(x)) FAIL("round needs a number, not %s", jv_kind_name(x));
        jv *pr = arg(args, n, 0, kwn, kwv, nkw, "precision");
        jv *me = arg(args, n, 1, kwn, kwv, nkw, "method");
        int64_t p = pr ? need_int(c, pr, "round's precision", line) : 0;
        if (p < -15 || p > 15) FAIL("round: precision out of range");
        double m = pow(10.0, (double)p), v = jv_num(x) * m;
        const char *meth = me && me->kind == JV_STR ? me->u.str.s : "common";
        if (!strncmp(meth, "floor", 5)) v = floor(v);
        else if (!strncmp(meth, "ceil", 4)) v = ceil(v);
        else v = round(v);
        return jv_float(c, v / m);
    }
    if (!strcmp(name, "attr")) {
        if (n < 1) FAIL("attr needs a name");
        jv *a = need_str(c, args[0], "attr's name", line);
        return jj_getattr(c, x, jv_string(c, a, line)->u.str.s, line);
    }
    if (!strcmp(name, "format")) {
        jv *fmt = need_str(c, x, "format's value", line);
        jv *t = jv_list(c, (size_t)n);
        t->u.list.tuple = true;
        for (int i = 0; i < n; i++) t->u.list.items[i] = args[i];
        return str_format(c, fmt, t, line);
    }
    if (!strcmp(name, "center")) {
        jv *s = jv_string(c, x, line);
        jv *w = arg(args, n, 0, kwn, kwv, nkw, "width");
        int64_t width = w ? need_int(c, w, "center's width", line) : 80;
        int64_t len = (int64_t)jj_u8_len(s->u.str.s, s->u.str.n);
        if (width <= len) return s;
        if (width > 100000) FAIL("center: width too large");
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        jj_sb b = { 0 };
        for (int64_t i = 0; i < left; i++) jj_sb_puts(c, &b, " ");
        jj_sb_putv(c, &b, s);
        for (int64_t i = 0; i < pad - left; i++) jj_sb_puts(c, &b, " ");
        return jj_sb_done(c, &b);
    }
    if (!strcmp(name, "indent")) {
        jv *w = arg(args, n, 0, kwn, kwv, nkw, "width");
        jv *first = arg(args, n, 1, kwn, kwv, nkw, "first");
        jv *blank = arg(args, n, 2, kwn, kwv, nkw, "blank");
        return f_indent(c, jv_string(c, x, line), w, first && jv_truthy(first), blank && jv_truthy(blank), line);
    }
    if (!strcmp(name, "wordcount")) {
        jv *s = jv_string(c, x, line);
        int64_t k = 0;
        bool in = false;
        for (size_t i = 0; i < s->u.str.n; i++) {
            unsigned char ch = (unsigned char)s->u.str.s[i];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in) k++;
            in = w;
        }
        return jv_int(c, k);
    }
    FAIL("unsupported filter '%s'", name);
}

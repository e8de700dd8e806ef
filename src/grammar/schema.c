/*
 * schema.c — JSON Schema → GBNF (structured output, tool-call arguments).
 *
 * The subset is what OpenAI's Structured Outputs documents plus a few common
 * extras; every keyword is either turned into grammar, or is an annotation
 * that constrains nothing (title, description, ...), or is refused with an
 * error naming its JSON pointer.  Nothing is silently dropped: a grammar
 * that accepted more than the schema would let the model produce output the
 * client's validator rejects.
 *
 * Layout choices (what the grammar accepts, beyond "valid per the schema"):
 *   - Object keys come in the schema's declared order ("properties" order);
 *     optional properties may be left out, required ones may not.  Fixing
 *     the order is what constrained decoders do: it keeps the grammar
 *     linear in the number of properties instead of factorial.
 *   - "additionalProperties" absent is treated as false (OpenAI's strict
 *     mode requires false; an open object would let the model invent keys).
 *     true or a schema allows extra keys, after the declared ones, whose
 *     names differ from the declared names.
 *   - Whitespace after every token is bounded: one space, or a newline and
 *     up to 40 spaces/tabs of indentation.  Pretty-printed output fits; a
 *     model cannot loop on whitespace.  A declared key is followed by its
 *     colon directly ("name": as every JSON writer prints it): the key and
 *     colon are then one forced span, which speculation drafts for free.
 *   - Numbers: at most 16 integer digits, 16 fraction digits and 3 exponent
 *     digits, again so that no token position repeats forever.
 *   - enum/const values are matched in their canonical JSON spelling
 *     (jansson's), with free whitespace between the tokens of an object or
 *     array value.
 *   - "oneOf" is treated as "anyOf" (a grammar cannot express "exactly one";
 *     schemas use oneOf for disjoint alternatives in practice).
 *   - A schema without "type" but with keywords of one kind (properties →
 *     object, items → array, minLength → string) is taken as that type.
 *   - Integer bounds (minimum, maximum, exclusive*) are exact, as digit-wise
 *     rules; bounds on "number", multipleOf, pattern, uniqueItems: true,
 *     patternProperties, not, if/then/else, ... are refused.
 *   - An extra key spelled with escapes ("\u0061" for a declared "a") is
 *     not recognized as a declared name (the key grammar compares code
 *     points as written).
 *   - Errors inside an allOf member's properties name the merged object's
 *     pointer (/properties/x), not the member's (/allOf/1/properties/x).
 *
 * Hostile input (schemas arrive in HTTP requests) is bounded: 32 levels of
 * nested schemas, repetition counts up to 1000 (the GBNF parser's limit),
 * 4000 rules, 1 MiB of GBNF.
 *
 * Rule names: everything begins with the caller's prefix.  Shared
 * primitives are prefix-ws, prefix-string, ...; the rules of a schema's
 * parts are prefix-p-<property>[-<property>...], prefix-p-item, and
 * definitions prefix-d-<name>; a name that would collide or grow too long
 * becomes prefix-n<serial>.
 */
#include "grammar/grammar.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_DEPTH = 32,         /* nested schemas (and nested const values) */
    MAX_REPEAT = 1000,      /* minItems/maxItems/minLength/maxLength */
    MAX_NAME = 100,         /* rule name length before falling back to a serial */
    MAX_KEY_PART = 24,      /* chars of a property name kept in a rule name */
    MAX_RULES = 4000,       /* rules per schema (the GBNF parser takes 4096 named rules) */
};
#define MAX_OUT ((size_t)1 << 20)

/* ------------------------------------------------------------------------
 * Growable string; stops growing past MAX_OUT (the caller checks `over`).
 * ---------------------------------------------------------------------- */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool over;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
    if (b->over || b->len + n > MAX_OUT) {
        b->over = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = sp_xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert(n >= 0 && (size_t)n < sizeof tmp);      /* only short fragments */
    sb_putn(b, tmp, (size_t)n);
}
static void sb_truncate(sbuf *b, size_t len) {
    assert(len <= b->len);
    b->len = len;
    if (b->p) b->p[len] = 0;
}

/* ------------------------------------------------------------------------
 * Conversion context
 * ---------------------------------------------------------------------- */
enum {
    P_WS = 1 << 0, P_CHAR = 1 << 1, P_STRING = 1 << 2, P_INTEGER = 1 << 3, P_NUMBER = 1 << 4,
    P_BOOLEAN = 1 << 5, P_NULL = 1 << 6, P_VALUE = 1 << 7, P_OBJECT = 1 << 8, P_ARRAY = 1 << 9,
};

typedef struct ctx {
    const json_t *root;
    const char *prefix;     /* every rule name begins with it */
    const char *path;       /* names the schema in errors */
    sbuf out;               /* the rules */
    sbuf ptr;               /* JSON pointer of the schema being converted */
    json_t *names;          /* rule names in use (object used as a set) */
    json_t *refs;           /* "$ref" text -> rule name */
    unsigned prims;         /* P_* rules needed */
    unsigned serial;
    int n_rules;
    int depth;
    sp_err *err;
} ctx;

static int fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ctx *c, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->ptr.len) return sp_err_set(c->err, "%s: %s: %s", c->path, c->ptr.p, msg);
    return sp_err_set(c->err, "%s: %s", c->path, msg);
}

/* Appends "/seg" (escaped per RFC 6901) to the pointer; returns the old
 * length for ptr_pop. */
static size_t ptr_push(ctx *c, const char *seg) {
    size_t old = c->ptr.len;
    sb_puts(&c->ptr, "/");
    for (const char *s = seg; *s; s++) {
        if (*s == '~') sb_puts(&c->ptr, "~0");
        else if (*s == '/') sb_puts(&c->ptr, "~1");
        else sb_putn(&c->ptr, s, 1);
    }
    return old;
}
static size_t ptr_push_index(ctx *c, const char *seg, size_t i) {
    size_t old = ptr_push(c, seg);
    sb_printf(&c->ptr, "/%zu", i);
    return old;
}
static void ptr_pop(ctx *c, size_t old) { sb_truncate(&c->ptr, old); }

/* Puts the primitive rule `name` (prefix-name) into e and marks it used. */
static void prim(ctx *c, sbuf *e, unsigned bit, const char *name) {
    c->prims |= bit;
    sb_printf(e, "%s-%s", c->prefix, name);
}
static void ws(ctx *c, sbuf *e) { prim(c, e, P_WS, "ws"); }

/* A GBNF literal for the bytes s[0..n): quotes and backslashes escaped,
 * control bytes as \xHH, UTF-8 passed through. */
static void put_literal(sbuf *e, const char *s, size_t n) {
    sb_puts(e, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            sb_puts(e, "\\");
            sb_putn(e, s + i, 1);
        } else if (ch < 0x20 || ch == 0x7F) {
            sb_printf(e, "\\x%02X", ch);
        } else {
            sb_putn(e, s + i, 1);
        }
    }
    sb_puts(e, "\"");
}

/* A GBNF literal for the JSON text of v (compact, canonical spelling). */
static void put_json_literal(sbuf *e, const json_t *v) {
    char *js = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    assert(js);                    /* scalars always encode */
    put_literal(e, js, strlen(js));
    free(js);
}

/* A rule name not yet used: base + "-" + key (key reduced to [a-zA-Z0-9-]),
 * or prefix-n<serial> when that collides or is too long.  Registers it. */
static void child_name(ctx *c, const char *base, const char *key, char *out, size_t cap) {
    assert(cap > MAX_NAME);
    size_t n = (size_t)snprintf(out, cap, "%s-", base);
    for (size_t i = 0; key[i] && i < MAX_KEY_PART && n + 1 < cap; i++) {
        char ch = key[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        out[n++] = ok ? ch : '-';
    }
    out[n] = 0;
    if (n > MAX_NAME || !key[0] || json_object_get(c->names, out)) {
        do snprintf(out, cap, "%s-n%u", c->prefix, c->serial++);
        while (json_object_get(c->names, out));
    }
    json_object_set_new(c->names, out, json_null());
}

/* Appends "name ::= body\n" to the output. */
static int put_rule(ctx *c, const char *name, const sbuf *body) {
    if (body->over) return fail(c, "grammar larger than %zu bytes", MAX_OUT);
    assert(body->len > 0);
    if (++c->n_rules > MAX_RULES) return fail(c, "more than %d grammar rules", MAX_RULES);
    sb_printf(&c->out, "%s ::= ", name);
    sb_putn(&c->out, body->p, body->len);
    sb_puts(&c->out, "\n");
    if (c->out.over) return fail(c, "grammar larger than %zu bytes", MAX_OUT);
    return 0;
}

/* ------------------------------------------------------------------------
 * Keywords
 * ---------------------------------------------------------------------- */
static bool in_list(const char *const *list, const char *s) {
    for (; *list; list++)
        if (!strcmp(*list, s)) return true;
    return false;
}

/* Annotations: they describe, they do not constrain. */
static const char *const ANNOTATIONS[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL,
};
/* Wrapper fields that clients leave in the top-level schema. */
static const char *const ROOT_ANNOTATIONS[] = { "strict", "name", NULL };
static const char *const OBJECT_KW[] = { "properties", "required", "additionalProperties", NULL };
static const char *const ARRAY_KW[] = { "items", "prefixItems", "minItems", "maxItems", NULL };
static const char *const STRING_KW[] = { "minLength", "maxLength", "format", NULL };
static const char *const NUMBER_KW[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL };
static const char *const OTHER_KW[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", NULL,
};

static bool is_annotation(ctx *c, const char *k) {
    return in_list(ANNOTATIONS, k) || (c->ptr.len == 0 && in_list(ROOT_ANNOTATIONS, k));
}

static int check_keywords(ctx *c, const json_t *s) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(c, k) || in_list(OBJECT_KW, k) || in_list(ARRAY_KW, k) ||
            in_list(STRING_KW, k) || in_list(NUMBER_KW, k) || in_list(OTHER_KW, k))
            continue;
        if (!strcmp(k, "uniqueItems") && json_is_false(v)) continue;   /* no constraint */
        return fail(c, "unsupported keyword \"%s\"", k);
    }
    return 0;
}

/* kw may only come with annotations (and the keywords in `also`). */
static int only_with(ctx *c, const json_t *s, const char *kw, const char *const *also) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (strcmp(k, kw) && !is_annotation(c, k) && !(also && in_list(also, k)))
            return fail(c, "\"%s\" together with \"%s\" is not supported", kw, k);
    }
    return 0;
}

/* A count keyword (minItems, maxLength, ...): *out = its value, or dflt
 * when absent.  Bounded by MAX_REPEAT: the grammar expands counts. */
static int get_count(ctx *c, const json_t *s, const char *kw, long long dflt, long long *out) {
    const json_t *v = json_object_get(s, kw);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(c, "\"%s\" must be a non-negative integer", kw);
    *out = json_integer_value(v);
    if (*out > MAX_REPEAT)
        return fail(c, "\"%s\" %lld is over the supported maximum %d", kw, *out, MAX_REPEAT);
    return 0;
}

/* Repetition suffix for a count in [lo, hi] (hi < 0: unbounded); hi > 0. */
static void put_repeat(sbuf *e, long long lo, long long hi) {
    assert(hi != 0 && (hi < 0 || lo <= hi));
    if (hi < 0) {
        if (lo == 0) sb_puts(e, "*");
        else if (lo == 1) sb_puts(e, "+");
        else sb_printf(e, "{%lld,}", lo);
    } else if (lo == hi) {
        if (lo != 1) sb_printf(e, "{%lld}", lo);
    } else if (lo == 0 && hi == 1) {
        sb_puts(e, "?");
    } else {
        sb_printf(e, "{%lld,%lld}", lo, hi);
    }
}

/* ------------------------------------------------------------------------
 * Types
 * ---------------------------------------------------------------------- */
enum { T_OBJECT = 1, T_ARRAY = 2, T_STRING = 4, T_NUMBER = 8, T_INTEGER = 16, T_BOOLEAN = 32, T_NULL = 64 };
#define T_ALL 127u
static const struct { const char *name; unsigned bit; } TYPES[] = {
    { "object", T_OBJECT }, { "array", T_ARRAY }, { "string", T_STRING }, { "number", T_NUMBER },
    { "integer", T_INTEGER }, { "boolean", T_BOOLEAN }, { "null", T_NULL },
};

static int type_bit(ctx *c, const json_t *v, unsigned *bit) {
    if (json_is_string(v))
        for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
            if (!strcmp(json_string_value(v), TYPES[i].name)) {
                *bit = TYPES[i].bit;
                return 0;
            }
    if (json_is_string(v)) return fail(c, "unknown type \"%s\"", json_string_value(v));
    return fail(c, "\"type\" must be a string or an array of strings");
}

static bool has_any(const json_t *s, const char *const *kws) {
    for (; *kws; kws++)
        if (json_object_get(s, *kws)) return true;
    return false;
}

/* The types a schema allows: its "type", or inferred from its keywords
 * (none: any value). */
static int get_types(ctx *c, const json_t *s, unsigned *types) {
    const json_t *t = json_object_get(s, "type");
    *types = 0;
    if (t && json_is_array(t)) {
        if (!json_array_size(t)) return fail(c, "\"type\" is an empty array");
        size_t i;
        const json_t *v;
        json_array_foreach(t, i, v) {
            unsigned bit;
            if (type_bit(c, v, &bit)) return -1;
            *types |= bit;
        }
        return 0;
    }
    if (t) return type_bit(c, t, types);
    if (has_any(s, OBJECT_KW)) *types |= T_OBJECT;
    if (has_any(s, ARRAY_KW)) *types |= T_ARRAY;
    if (has_any(s, STRING_KW)) *types |= T_STRING;
    if (has_any(s, NUMBER_KW)) *types |= T_NUMBER;
    if (!*types) *types = T_ALL;
    return 0;
}

static bool value_has_type(const json_t *v, unsigned types) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return types & T_OBJECT;
    case JSON_ARRAY: return types & T_ARRAY;
    case JSON_STRING: return types & T_STRING;
    case JSON_INTEGER: return types & (T_INTEGER | T_NUMBER);
    case JSON_REAL: return types & T_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE: return types & T_BOOLEAN;
    case JSON_NULL: return types & T_NULL;
    }
    return false;
}

/* ------------------------------------------------------------------------
 * Schemas
 * ---------------------------------------------------------------------- */
static int gen_value(ctx *c, const json_t *s, const char *base, sbuf *e);

/* Rule `name` for schema s (its children's rules are named after it). */
static int gen_rule(ctx *c, const json_t *s, const char *name) {
    sbuf body = { 0 };
    int rc = gen_value(c, s, name, &body);
    if (!rc) rc = put_rule(c, name, &body);
    free(body.p);
    return rc;
}

/* A constant value: its tokens, each followed by whitespace. */
static int gen_const(ctx *c, const json_t *v, int depth, sbuf *e) {
    if (depth > MAX_DEPTH) return fail(c, "constant nested deeper than %d levels", MAX_DEPTH);
    if (json_is_object(v)) {
        const char *k;
        const json_t *m;
        bool first = true;
        sb_puts(e, "\"{\" ");
        ws(c, e);
        json_object_foreach((json_t *)v, k, m) {
            if (!first) {
                sb_puts(e, " \",\" ");
                ws(c, e);
            }
            first = false;
            sb_puts(e, " ");
            json_t *key = json_string(k);
            put_json_literal(e, key);
            json_decref(key);
            sb_puts(e, " \":\" ");
            ws(c, e);
            sb_puts(e, " ");
            if (gen_const(c, m, depth + 1, e)) return -1;
        }
        sb_puts(e, " \"}\" ");
    } else if (json_is_array(v)) {
        size_t i;
        const json_t *m;
        sb_puts(e, "\"[\" ");
        ws(c, e);
        json_array_foreach(v, i, m) {
            if (i) {
                sb_puts(e, " \",\" ");
                ws(c, e);
            }
            sb_puts(e, " ");
            if (gen_const(c, m, depth + 1, e)) return -1;
        }
        sb_puts(e, " \"]\" ");
    } else {
        put_json_literal(e, v);
        sb_puts(e, " ");
    }
    ws(c, e);
    return 0;
}

/* enum / const, filtered by "type" when both are given. */
static int gen_enum(ctx *c, const json_t *s, sbuf *e) {
    static const char *const also[] = { "type", NULL };
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && cn) return fail(c, "\"enum\" together with \"const\" is not supported");
    if (only_with(c, s, en ? "enum" : "const", also)) return -1;
    if (en && (!json_is_array(en) || !json_array_size(en)))
        return fail(c, "\"enum\" must be a non-empty array");
    unsigned types = T_ALL;
    if (json_object_get(s, "type") && get_types(c, s, &types)) return -1;
    size_t n = en ? json_array_size(en) : 1, kept = 0;
    sb_puts(e, "( ");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (!value_has_type(v, types)) continue;
        if (kept++) sb_puts(e, " | ");
        if (gen_const(c, v, 0, e)) return -1;
    }
    sb_puts(e, " )");
    if (!kept) return fail(c, "no \"%s\" value has the schema's type", en ? "enum" : "const");
    return 0;
}

/* "$ref": "#", "#/$defs/NAME" or "#/definitions/NAME" → one rule per
 * target, generated on first use (a recursive schema refers to its rule
 * by name while it is being generated). */
static int gen_ref(ctx *c, const json_t *s, sbuf *e) {
    if (only_with(c, s, "$ref", NULL)) return -1;
    const json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r)) return fail(c, "\"$ref\" must be a string");
    const char *ref = json_string_value(r);
    const json_t *known = json_object_get(c->refs, ref);
    if (known) {
        sb_puts(e, json_string_value(known));
        return 0;
    }
    if (!strcmp(ref, "#")) {
        sb_puts(e, c->prefix);       /* the value rule is named prefix */
        return 0;
    }
    const char *name = NULL, *container = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) container = "$defs", name = ref + 8;
    else if (!strncmp(ref, "#/definitions/", 14)) container = "definitions", name = ref + 14;
    if (!container || !*name || strchr(name, '/'))
        return fail(c, "unsupported $ref \"%s\" (only #, #/$defs/NAME and #/definitions/NAME)", ref);
    /* RFC 6901 unescaping: ~1 is '/', ~0 is '~' */
    char *key = sp_xstrdup(name), *w = key;
    for (const char *p = name; *p; p++) {
        if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) *w++ = p[1] == '1' ? '/' : '~', p++;
        else *w++ = *p;
    }
    *w = 0;
    const json_t *target = json_object_get(json_object_get(c->root, container), key);
    if (!target) {
        free(key);
        return fail(c, "$ref \"%s\": no such definition", ref);
    }
    char rule[MAX_NAME + 32], base[MAX_NAME + 32];
    snprintf(base, sizeof base, "%s-d", c->prefix);
    child_name(c, base, key, rule, sizeof rule);
    json_object_set_new(c->refs, ref, json_string(rule));
    /* the definition's errors name its own pointer */
    char *saved = sp_xstrdup(c->ptr.len ? c->ptr.p : "");
    sb_truncate(&c->ptr, 0);
    ptr_push(c, container);
    ptr_push(c, key);
    int rc = gen_rule(c, target, rule);
    sb_truncate(&c->ptr, 0);
    sb_puts(&c->ptr, saved);
    free(saved);
    free(key);
    if (!rc) sb_puts(e, rule);
    return rc;
}

/* anyOf / oneOf: alternatives. */
static int gen_any_of(ctx *c, const json_t *s, const char *kw, const char *base, sbuf *e) {
    if (only_with(c, s, kw, NULL)) return -1;
    const json_t *alts = json_object_get(s, kw);
    if (!json_is_array(alts) || !json_array_size(alts))
        return fail(c, "\"%s\" must be a non-empty array", kw);
    size_t i;
    const json_t *a;
    sb_puts(e, "( ");
    json_array_foreach(alts, i, a) {
        if (i) sb_puts(e, " | ");
        size_t old = ptr_push_index(c, kw, i);
        int rc = gen_value(c, a, base, e);
        if (!rc) ptr_pop(c, old);
        if (rc) return -1;
    }
    sb_puts(e, " )");
    return 0;
}

/* allOf of object schemas: one object with the union of their properties
 * and required lists (the schema's own object keywords included).  Anything
 * else under allOf (an intersection the grammar would have to compute) is
 * refused. */
static int gen_all_of(ctx *c, const json_t *s, const char *base, sbuf *e) {
    static const char *const member_kw[] = { "type", "properties", "required", "additionalProperties", NULL };
    const json_t *all = json_object_get(s, "allOf");
    if (!json_is_array(all) || !json_array_size(all)) return fail(c, "\"allOf\" must be a non-empty array");
    if (only_with(c, s, "allOf", member_kw)) return -1;
    json_t *merged = json_object(), *props = json_object(), *req = json_array();
    json_object_set_new(merged, "type", json_string("object"));
    json_object_set_new(merged, "properties", props);
    json_object_set_new(merged, "required", req);
    int rc = 0;
    for (size_t i = 0; i <= json_array_size(all) && !rc; i++) {
        const json_t *m = i < json_array_size(all) ? json_array_get(all, i) : s;   /* s itself last */
        size_t old = i < json_array_size(all) ? ptr_push_index(c, "allOf", i) : c->ptr.len;
        const json_t *r = json_object_get(m, "$ref");
        if (r && json_is_string(r) && json_object_size(m) == 1) {
            const char *ref = json_string_value(r);
            if (!strncmp(ref, "#/$defs/", 8) && !strchr(ref + 8, '/'))
                m = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
            else if (!strncmp(ref, "#/definitions/", 14) && !strchr(ref + 14, '/'))
                m = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
            else m = NULL;
            if (!m) rc = fail(c, "allOf: unsupported or unknown $ref \"%s\"", ref);
        }
        const json_t *t = rc ? NULL : json_object_get(m, "type");
        const json_t *ap = rc ? NULL : json_object_get(m, "additionalProperties");
        if (!rc && !json_is_object(m)) rc = fail(c, "allOf: members must be object schemas");
        else if (!rc && m != s && only_with(c, m, "properties", member_kw)) rc = -1;
        else if (!rc && t && !(json_is_string(t) && !strcmp(json_string_value(t), "object")))
            rc = fail(c, "allOf: only objects can be merged (\"type\" must be \"object\")");
        else if (!rc && ap && !json_is_false(ap))
            rc = fail(c, "allOf: \"additionalProperties\" other than false cannot be merged");
        if (!rc) {
            const json_t *p = json_object_get(m, "properties"), *q = json_object_get(m, "required");
            if (p && !json_is_object(p)) rc = fail(c, "\"properties\" must be an object");
            else if (q && !json_is_array(q)) rc = fail(c, "\"required\" must be an array");
            else {
                const char *k;
                json_t *v;
                json_object_foreach((json_t *)p, k, v) {
                    if (json_object_get(props, k)) {
                        rc = fail(c, "allOf: property \"%s\" defined twice", k);
                        break;
                    }
                    json_object_set(props, k, v);
                }
                size_t j;
                json_array_foreach(q, j, v) json_array_append(req, v);
            }
        }
        if (!rc) ptr_pop(c, old);
    }
    if (!rc) rc = gen_value(c, merged, base, e);
    json_decref(merged);
    return rc;
}

/* Strings with a "format": the text between the quotes. */
static int put_format(ctx *c, const char *fmt, sbuf *e) {
    static const char date[] =
        "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )";
    static const char tod[] =
        "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
        "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    /* RFC 5321 dot-atom local part; a domain of letter/digit/hyphen labels
     * with at least one dot (an approximation: no quoted local parts, no
     * address literals). */
    static const char email[] =
        "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+ ( \".\" [a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+ )* \"@\" "
        "[a-zA-Z0-9] [a-zA-Z0-9-]* ( \".\" [a-zA-Z0-9] [a-zA-Z0-9-]* )+";
    static const char uuid[] =
        "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
    if (!strcmp(fmt, "date")) sb_puts(e, date);
    else if (!strcmp(fmt, "time")) sb_puts(e, tod);
    else if (!strcmp(fmt, "date-time")) sb_printf(e, "%s \"T\" ", date), sb_puts(e, tod);
    else if (!strcmp(fmt, "email")) sb_puts(e, email);
    else if (!strcmp(fmt, "uuid")) sb_puts(e, uuid);
    else return fail(c, "unsupported format \"%s\"", fmt);
    return 0;
}

static int gen_string(ctx *c, const json_t *s, sbuf *e) {
    const json_t *f = json_object_get(s, "format");
    long long lo, hi;
    if (get_count(c, s, "minLength", 0, &lo) || get_count(c, s, "maxLength", -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return fail(c, "\"minLength\" %lld is over \"maxLength\" %lld", lo, hi);
    if (f) {
        if (!json_is_string(f)) return fail(c, "\"format\" must be a string");
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return fail(c, "\"format\" together with \"minLength\"/\"maxLength\" is not supported");
        sb_puts(e, "\"\\\"\" ");
        if (put_format(c, json_string_value(f), e)) return -1;
        sb_puts(e, " \"\\\"\" ");
        ws(c, e);
        return 0;
    }
    if (lo == 0 && hi < 0) {
        prim(c, e, P_STRING, "string");
        return 0;
    }
    sb_puts(e, "\"\\\"\" ");
    if (hi != 0) {
        prim(c, e, P_CHAR, "char");
        put_repeat(e, lo, hi);
        sb_puts(e, " ");
    }
    sb_puts(e, "\"\\\"\" ");
    ws(c, e);
    return 0;
}

/* Arrays: prefixItems positions, then "items" for the rest, with the
 * count in [minItems, maxItems]. */
static int gen_array(ctx *c, const json_t *s, const char *base, sbuf *e) {
    const json_t *items = json_object_get(s, "items"), *pre = json_object_get(s, "prefixItems");
    long long lo, hi;
    if (get_count(c, s, "minItems", 0, &lo) || get_count(c, s, "maxItems", -1, &hi)) return -1;
    if (hi >= 0 && lo > hi) return fail(c, "\"minItems\" %lld is over \"maxItems\" %lld", lo, hi);
    if (items && json_is_array(items))
        return fail(c, "\"items\" as an array is not supported (use \"prefixItems\")");
    if (pre && !json_is_array(pre)) return fail(c, "\"prefixItems\" must be an array");
    size_t k = pre ? json_array_size(pre) : 0;
    if (hi >= 0 && (size_t)hi < k) k = (size_t)hi;       /* positions past maxItems never occur */
    char name[MAX_NAME + 32];
    sb_puts(e, "\"[\" ");
    ws(c, e);
    int opens = 0;
    for (size_t i = 0; i < k; i++) {
        char key[32];
        snprintf(key, sizeof key, "item%zu", i);
        child_name(c, base, key, name, sizeof name);
        size_t old = ptr_push_index(c, "prefixItems", i);
        if (gen_rule(c, json_array_get(pre, i), name)) return -1;
        ptr_pop(c, old);
        sb_puts(e, (long long)i < lo ? " " : " ( ");
        opens += (long long)i >= lo;
        if (i) {
            sb_puts(e, "\",\" ");
            ws(c, e);
            sb_puts(e, " ");
        }
        sb_puts(e, name);
    }
    /* the rest: "items" (absent: any value; false: none) */
    long long m = lo > (long long)k ? lo - (long long)k : 0, M = hi < 0 ? -1 : hi - (long long)k;
    bool rest = !json_is_false(items) && M != 0;
    if (!rest && m > 0) return fail(c, "\"minItems\" %lld needs more items than the schema allows", lo);
    if (rest) {
        sbuf r = { 0 };
        if (!items || json_is_true(items)) {
            prim(c, &r, P_VALUE, "value");
        } else {
            child_name(c, base, "item", name, sizeof name);
            size_t old = ptr_push(c, "items");
            if (gen_rule(c, items, name)) {
                free(r.p);
                return -1;
            }
            ptr_pop(c, old);
            sb_puts(&r, name);
        }
        if (k == 0) {                /* R ("," ws R){m-1,M-1}, optional if m == 0 */
            sb_puts(e, m ? " " : " ( ");
            sb_puts(e, r.p);
            if (M != 1) {
                sb_puts(e, " ( \",\" ");
                ws(c, e);
                sb_printf(e, " %s )", r.p);
                put_repeat(e, m ? m - 1 : 0, M < 0 ? -1 : M - 1);
            }
            if (!m) sb_puts(e, " )?");
        } else {                     /* ("," ws R){m,M} */
            sb_puts(e, " ( \",\" ");
            ws(c, e);
            sb_printf(e, " %s )", r.p);
            put_repeat(e, m, M);
        }
        free(r.p);
    }
    for (int i = 0; i < opens; i++) sb_puts(e, " )?");
    sb_puts(e, " \"]\" ");
    ws(c, e);
    return 0;
}

/* ---- objects ------------------------------------------------------------ */

/* Decodes one UTF-8 code point (jansson strings are valid UTF-8). */
static uint32_t utf8_next(const unsigned char **p) {
    const unsigned char *s = *p;
    uint32_t cp;
    int n;
    if (s[0] < 0x80) cp = s[0], n = 1;
    else if (s[0] < 0xE0) cp = s[0] & 0x1F, n = 2;
    else if (s[0] < 0xF0) cp = s[0] & 0x0F, n = 3;
    else cp = s[0] & 0x07, n = 4;
    for (int i = 1; i < n; i++) cp = cp << 6 | (s[i] & 0x3F);
    *p = s + n;
    return cp;
}

static void put_class_char(sbuf *e, uint32_t cp, const unsigned char *utf8, size_t len) {
    bool plain = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
    if (plain) sb_printf(e, "%c", (char)cp);
    else if (cp < 0x100) sb_printf(e, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) sb_printf(e, "\\u%04X", (unsigned)cp);
    else sb_putn(e, (const char *)utf8, len);          /* GBNF has no escape past U+FFFF */
}

typedef struct keyset {
    const char **keys;      /* declared property names, sorted */
    size_t n;
} keyset;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A rule for a key string (quotes, trailing whitespace) that is none of
 * keys[lo..hi) — they all share their first `off` bytes, which have been
 * matched.  A trie walk: at each node the string may end (unless a key ends
 * there), continue with a key's next character (into the subtrie), or take
 * any other character and then anything.  Escape sequences leave the trie:
 * a key spelled with \u escapes ("\u0061" for "a") is not recognized as a
 * declared name — a known gap, no model spells keys that way. */
static int gen_not_keys(ctx *c, const keyset *ks, size_t lo, size_t hi, size_t off, char *name, size_t cap) {
    child_name(c, c->prefix, "xkey", name, cap);
    sbuf b = { 0 };
    bool ends = false;
    sb_puts(&b, "( ");
    int alts = 0;
    sbuf cls = { 0 };
    for (size_t i = lo; i < hi;) {
        const unsigned char *p = (const unsigned char *)ks->keys[i] + off;
        if (!*p) {
            ends = true;
            i++;
            continue;
        }
        const unsigned char *q = p;
        uint32_t cp = utf8_next(&q);
        size_t len = (size_t)(q - p), j = i + 1;
        while (j < hi && !strncmp(ks->keys[j] + off, (const char *)p, len)) j++;
        char sub[MAX_NAME + 32];
        if (gen_not_keys(c, ks, i, j, off + len, sub, sizeof sub)) {
            free(b.p);
            free(cls.p);
            return -1;
        }
        if (alts++) sb_puts(&b, " | ");
        sb_puts(&b, "[");
        put_class_char(&b, cp, p, len);
        sb_printf(&b, "] %s", sub);
        put_class_char(&cls, cp, p, len);
        i = j;
    }
    if (!ends) {
        if (alts++) sb_puts(&b, " | ");
        sb_puts(&b, "\"\\\"\" ");
        ws(c, &b);
    }
    /* any other character (or an escape), then any string */
    sb_printf(&b, "%s[^\"\\\\\\x7F\\x00-\\x1F%s] ", alts ? " | " : "", cls.p ? cls.p : "");
    prim(c, &b, P_CHAR, "char");
    sb_puts(&b, "* \"\\\"\" ");
    ws(c, &b);
    sb_puts(&b, " | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) ");
    prim(c, &b, P_CHAR, "char");
    sb_puts(&b, "* \"\\\"\" ");
    ws(c, &b);
    sb_puts(&b, " )");
    free(cls.p);
    int rc = put_rule(c, name, &b);
    free(b.p);
    return rc;
}

/* The key rule for additional properties: any string, or, when properties
 * are declared, any string but their names (an extra key must not repeat a
 * declared one with a value of the wrong schema). */
static int gen_extra_key(ctx *c, const json_t *props, char *name, size_t cap) {
    if (!json_object_size(props)) {
        snprintf(name, cap, "%s-string", c->prefix);
        c->prims |= P_STRING;
        return 0;
    }
    keyset ks = { sp_xcalloc(json_object_size(props), sizeof(char *)), 0 };
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        for (const char *p = k; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || *p == 0x7F) {
                free(ks.keys);
                return fail(c, "additional properties next to property \"%s\" (a name that needs escaping) are not supported", k);
            }
        ks.keys[ks.n++] = k;
    }
    qsort(ks.keys, ks.n, sizeof ks.keys[0], cmp_str);
    char inner[MAX_NAME + 32];
    int rc = gen_not_keys(c, &ks, 0, ks.n, 0, inner, sizeof inner);
    free(ks.keys);
    if (rc) return -1;
    sbuf b = { 0 };
    sb_printf(&b, "\"\\\"\" %s", inner);
    child_name(c, c->prefix, "xkey", name, cap);
    rc = put_rule(c, name, &b);
    free(b.p);
    return rc;
}

/* Objects: the declared properties in order, each optional one may be
 * missing, then (if allowed) extra keys.
 *
 * With kv[i] the i-th "key": value, the body is
 *     kv[0] "," kv[1] ...                               all required
 * or, with tail[i] = what may follow once something was written, from
 * property i on ( ("," kv[i])? tail[i+1] for optional i, "," kv[i]
 * tail[i+1] for required i, and extras at the end),
 *     kv[0] tail[1] | kv[1] tail[2] | ... | kv[r] tail[r+1]
 * over the optional properties before the first required one r (plus an
 * empty alternative and the extras when all are optional).  Each tail is a
 * rule, so the grammar stays linear in the number of properties and every
 * text has one parse. */
static int gen_object(ctx *c, const json_t *s, const char *base, sbuf *e) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "\"properties\" must be an object");
    if (req && !json_is_array(req)) return fail(c, "\"required\" must be an array of strings");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return fail(c, "\"additionalProperties\" must be a boolean or a schema");
    size_t n = props ? json_object_size(props) : 0, i;
    const json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v)) return fail(c, "\"required\" must be an array of strings");
        if (!json_object_get(props, json_string_value(v)))
            return fail(c, "required property \"%s\" is not in \"properties\"", json_string_value(v));
    }
    char **kv = sp_xcalloc(n + 1, sizeof(char *));
    bool *required = sp_xcalloc(n + 1, sizeof(bool));
    int rc = 0;
    const char *k;
    i = 0;
    json_object_foreach((json_t *)props, k, v) {
        char name[MAX_NAME + 32];
        size_t j;
        const json_t *r;
        json_array_foreach(req, j, r) required[i] |= !strcmp(json_string_value(r), k);
        child_name(c, base, k, name, sizeof name);
        size_t old = ptr_push(c, "properties");
        ptr_push(c, k);
        rc = gen_rule(c, v, name);
        if (rc) break;
        ptr_pop(c, old);
        sbuf b = { 0 };
        json_t *key = json_string(k);
        put_json_literal(&b, key);
        json_decref(key);
        sb_puts(&b, " \":\" ");                /* no whitespace before the colon: see ws */
        ws(c, &b);
        sb_printf(&b, " %s", name);
        kv[i++] = b.p ? b.p : sp_xstrdup("");
    }
    /* extras: "key": value pairs after the declared ones */
    char *extra = NULL;
    if (!rc && ap && !json_is_false(ap)) {
        char kname[MAX_NAME + 32], vname[MAX_NAME + 32];
        rc = gen_extra_key(c, props, kname, sizeof kname);
        if (!rc && json_is_true(ap)) {
            snprintf(vname, sizeof vname, "%s-value", c->prefix);
            c->prims |= P_VALUE;
        } else if (!rc) {
            child_name(c, base, "additional", vname, sizeof vname);
            size_t old = ptr_push(c, "additionalProperties");
            rc = gen_rule(c, ap, vname);
            if (!rc) ptr_pop(c, old);
        }
        if (!rc) {
            sbuf b = { 0 };
            sb_printf(&b, "%s \":\" ", kname);
            ws(c, &b);
            sb_printf(&b, " %s", vname);
            extra = b.p;
        }
    }
    size_t first_req = n;
    for (i = 0; i < n; i++)
        if (required[i]) {
            first_req = i;
            break;
        }
    /* tail rules (only when some property is optional) */
    char **tail = sp_xcalloc(n + 2, sizeof(char *));
    bool all_required = true;
    for (i = 0; i < n; i++) all_required &= required[i];
    sb_puts(e, "\"{\" ");
    ws(c, e);
    if (!rc && all_required) {
        for (i = 0; i < n; i++) {
            sb_puts(e, " ");
            if (i) {
                sb_puts(e, "\",\" ");
                ws(c, e);
                sb_puts(e, " ");
            }
            sb_puts(e, kv[i]);
        }
        if (extra && n) {
            sb_printf(e, " ( \",\" ");
            ws(c, e);
            sb_printf(e, " %s )*", extra);
        } else if (extra) {
            sb_printf(e, " ( %s ( \",\" ", extra);
            ws(c, e);
            sb_printf(e, " %s )* )?", extra);
        }
    } else if (!rc) {
        for (size_t t = n + 1; t-- > 1 && !rc;) {     /* tail[t] for t in 1..n */
            sbuf b = { 0 };
            if (t < n) {
                sb_puts(&b, required[t] ? "\",\" " : "( \",\" ");
                ws(c, &b);
                sb_printf(&b, " %s%s", kv[t], required[t] ? "" : " )?");
                if (tail[t + 1]) sb_printf(&b, " %s", tail[t + 1]);
            } else if (extra) {
                sb_puts(&b, "( \",\" ");
                ws(c, &b);
                sb_printf(&b, " %s )*", extra);
            }
            if (!b.len) continue;       /* tail[n] without extras is empty */
            char name[MAX_NAME + 32], key[32];
            snprintf(key, sizeof key, "tail%zu", t);
            child_name(c, base, key, name, sizeof name);
            rc = put_rule(c, name, &b);
            free(b.p);
            tail[t] = sp_xstrdup(name);
        }
        sb_puts(e, " ( ");
        size_t last = first_req < n ? first_req : n - 1;
        for (i = 0; !rc && i <= last; i++) {
            if (i) sb_puts(e, " | ");
            sb_puts(e, kv[i]);
            if (tail[i + 1]) sb_printf(e, " %s", tail[i + 1]);
        }
        if (first_req == n) {
            if (extra) sb_printf(e, " | %s%s%s", extra, tail[n] ? " " : "", tail[n] ? tail[n] : "");
            sb_puts(e, " )?");
        } else {
            sb_puts(e, " )");
        }
    }
    sb_puts(e, " \"}\" ");
    ws(c, e);
    for (i = 0; i <= n + 1; i++) free(tail[i]);
    for (i = 0; i < n; i++) free(kv[i]);
    free(tail);
    free(kv);
    free(required);
    free(extra);
    return rc;
}

/* ---- numbers ------------------------------------------------------------- */

/* The integer rule's bound: at most 16 digits. */
#define INT_LIMIT 9999999999999999LL

/* One digit in [lo, hi], then `rest` free digits. */
static void put_digits_free(sbuf *e, char lo, char hi, size_t rest) {
    if (lo == hi) sb_printf(e, " \"%c\"", lo);
    else sb_printf(e, " [%c-%c]", lo, hi);
    if (rest == 1) sb_puts(e, " [0-9]");
    else if (rest) sb_printf(e, " [0-9]{%zu}", rest);
}

/* Equal-length decimal strings from lo to hi (digit-wise, lo <= hi), n
 * digits: a common leading digit, or lo's first digit then anything >=
 * lo's rest, the digits in between then anything, hi's first digit then
 * anything <= hi's rest (an end whose rest is 000.. or 999.. joins the
 * middle). */
static void put_digit_range(sbuf *e, const char *lo, const char *hi, size_t n) {
    if (!n) return;
    assert(lo[0] <= hi[0]);
    size_t rest = n - 1;
    bool lo_min = true, hi_max = true;        /* lo's rest is 0.., hi's rest is 9.. */
    for (size_t i = 1; i < n; i++) lo_min &= lo[i] == '0', hi_max &= hi[i] == '9';
    if (lo[0] == hi[0] && !(lo_min && hi_max)) {
        sb_printf(e, " \"%c\"", lo[0]);
        put_digit_range(e, lo + 1, hi + 1, rest);
        return;
    }
    if (lo_min && hi_max) {
        put_digits_free(e, lo[0], hi[0], rest);
        return;
    }
    static const char nines[] = "9999999999999999", zeros[] = "0000000000000000";
    assert(rest < sizeof nines);
    char mid_lo = lo_min ? lo[0] : (char)(lo[0] + 1), mid_hi = hi_max ? hi[0] : (char)(hi[0] - 1);
    const char *sep = "";
    sb_puts(e, " (");
    if (!lo_min) {
        sb_printf(e, " \"%c\"", lo[0]);
        put_digit_range(e, lo + 1, nines, rest);
        sep = " |";
    }
    if (mid_lo <= mid_hi) {
        sb_puts(e, sep);
        put_digits_free(e, mid_lo, mid_hi, rest);
        sep = " |";
    }
    if (!hi_max) {
        sb_printf(e, "%s \"%c\"", sep, hi[0]);
        put_digit_range(e, zeros, hi + 1, rest);
    }
    sb_puts(e, " )");
}

/* Decimal numbers without leading zeros in [a, b] (0 <= a <= b): one
 * alternative per length (lengths past a's, up to the 16-digit limit,
 * folded into one when b is that limit). */
static void put_uint_range(sbuf *e, long long a, long long b) {
    assert(0 <= a && a <= b && b <= INT_LIMIT);
    char lo[24], hi[24];
    int la = snprintf(lo, sizeof lo, "%lld", a), lb = snprintf(hi, sizeof hi, "%lld", b);
    bool open = b == INT_LIMIT && lb > la;
    if (open) lb = la;
    sb_puts(e, "(");
    long long p = 1;                            /* 10^(l-1) */
    for (int l = 1; l < la; l++) p *= 10;
    for (int l = la; l <= lb; l++, p *= 10) {
        long long from = l == la ? a : p, to = l == lb && !open ? b : p * 10 - 1;
        snprintf(lo, sizeof lo, "%lld", from);
        snprintf(hi, sizeof hi, "%lld", to);
        if (l > la) sb_puts(e, " |");
        put_digit_range(e, lo, hi, (size_t)l);
    }
    if (open) sb_printf(e, " | [1-9] [0-9]{%d,15}", la);
    sb_puts(e, " )");
}

/* A bound keyword as an integer bound: *v = the tightest integer allowed
 * (ceil/floor, and one further in for exclusive bounds), clamped to what
 * the integer rule can spell. */
static int int_bound(ctx *c, const json_t *s, const char *kw, bool lower, long long *v) {
    const json_t *j = json_object_get(s, kw);
    if (!j) return 0;
    if (!json_is_number(j)) return fail(c, "\"%s\" must be a number", kw);
    double d = json_number_value(j), r = lower ? ceil(d) : floor(d);
    bool exclusive = !strncmp(kw, "exclusive", 9);
    if (exclusive && r == d) r += lower ? 1 : -1;
    if (r > (double)INT_LIMIT) r = (double)INT_LIMIT + 1;      /* empty or clamped below */
    if (r < -(double)INT_LIMIT) r = -(double)INT_LIMIT - 1;
    long long x = (long long)r;
    if (lower ? x > *v : x < *v) *v = x;
    return 0;
}

/* Integers, within [minimum, maximum] when given: exact digit-wise rules. */
static int gen_integer(ctx *c, const json_t *s, sbuf *e) {
    if (!has_any(s, NUMBER_KW)) {
        prim(c, e, P_INTEGER, "integer");
        return 0;
    }
    long long lo = -INT_LIMIT, hi = INT_LIMIT;
    if (int_bound(c, s, "minimum", true, &lo) || int_bound(c, s, "exclusiveMinimum", true, &lo) ||
        int_bound(c, s, "maximum", false, &hi) || int_bound(c, s, "exclusiveMaximum", false, &hi))
        return -1;
    if (lo > hi || lo > INT_LIMIT || hi < -INT_LIMIT)
        return fail(c, "no integer of at most 16 digits is within the bounds");
    sb_puts(e, "( ");
    if (lo < 0) {                               /* "-" and a magnitude in [max(1, -hi), -lo] */
        sb_puts(e, "\"-\" ");
        put_uint_range(e, hi < 0 ? -hi : 1, -lo);
    }
    if (hi >= 0) {
        if (lo < 0) sb_puts(e, " | ");
        put_uint_range(e, lo > 0 ? lo : 0, hi);
    }
    sb_puts(e, " ) ");
    ws(c, e);
    return 0;
}

/* Numbers: ranges over reals are not expressible digit-wise in a compact
 * grammar here, so bounds on "number" are refused rather than dropped. */
static int gen_number(ctx *c, const json_t *s, sbuf *e) {
    for (const char *const *k = NUMBER_KW; *k; k++)
        if (json_object_get(s, *k))
            return fail(c, "unsupported keyword \"%s\" on a number (only integer bounds are supported)", *k);
    prim(c, e, P_NUMBER, "number");
    return 0;
}

/* One alternative per allowed type, each with that type's keywords. */
static int gen_types(ctx *c, const json_t *s, const char *base, sbuf *e) {
    unsigned types;
    if (get_types(c, s, &types)) return -1;
    if (types == T_ALL && !json_object_get(s, "type")) {
        prim(c, e, P_VALUE, "value");
        return 0;
    }
    if (types & T_NUMBER) types &= ~(unsigned)T_INTEGER;   /* integers are numbers */
    int alts = 0;
    bool many = (types & (types - 1)) != 0;
    if (many) sb_puts(e, "( ");
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        unsigned t = TYPES[i].bit;
        if (!(types & t)) continue;
        if (alts++) sb_puts(e, " | ");
        int rc = 0;
        switch (t) {
        case T_OBJECT: rc = gen_object(c, s, base, e); break;
        case T_ARRAY: rc = gen_array(c, s, base, e); break;
        case T_STRING: rc = gen_string(c, s, e); break;
        case T_NUMBER: rc = gen_number(c, s, e); break;
        case T_INTEGER: rc = gen_integer(c, s, e); break;
        case T_BOOLEAN: prim(c, e, P_BOOLEAN, "boolean"); break;
        case T_NULL: prim(c, e, P_NULL, "null"); break;
        default: assert(0);
        }
        if (rc) return -1;
    }
    if (many) sb_puts(e, " )");
    return 0;
}

static int gen_value(ctx *c, const json_t *s, const char *base, sbuf *e) {
    if (json_is_true(s)) {
        prim(c, e, P_VALUE, "value");
        return 0;
    }
    if (json_is_false(s)) return fail(c, "schema false accepts no value");
    if (!json_is_object(s)) return fail(c, "a schema must be an object or a boolean");
    if (c->depth >= MAX_DEPTH) return fail(c, "schemas nested deeper than %d levels", MAX_DEPTH);
    c->depth++;
    int rc = check_keywords(c, s);
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (rc) {
    } else if (json_object_get(s, "$ref")) {
        rc = gen_ref(c, s, e);
    } else if (any && one) {
        rc = fail(c, "\"anyOf\" together with \"oneOf\" is not supported");
    } else if (any || one) {
        rc = gen_any_of(c, s, any ? "anyOf" : "oneOf", base, e);
    } else if (json_object_get(s, "allOf")) {
        rc = gen_all_of(c, s, base, e);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        rc = gen_enum(c, s, e);
    } else {
        rc = gen_types(c, s, base, e);
    }
    c->depth--;
    return rc;
}

/* ------------------------------------------------------------------------
 * Primitive rules ('@' stands for the prefix)
 * ---------------------------------------------------------------------- */
static const struct { unsigned bit, needs; const char *text; } PRIMS[] = {
    { P_WS, 0, "@-ws ::= ( \" \" | \"\\n\" [ \\t]{0,40} )?\n" },
    { P_CHAR, 0, "@-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n" },
    { P_STRING, P_CHAR | P_WS, "@-string ::= \"\\\"\" @-char* \"\\\"\" @-ws\n" },
    { P_INTEGER, P_WS, "@-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) @-ws\n" },
    { P_NUMBER, P_WS,
      "@-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )? @-ws\n" },
    { P_BOOLEAN, P_WS, "@-boolean ::= ( \"true\" | \"false\" ) @-ws\n" },
    { P_NULL, P_WS, "@-null ::= \"null\" @-ws\n" },
    { P_VALUE, P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL,
      "@-value ::= @-object | @-array | @-string | @-number | @-boolean | @-null\n" },
    { P_OBJECT, P_STRING | P_VALUE | P_WS,
      "@-object ::= \"{\" @-ws ( @-string \":\" @-ws @-value ( \",\" @-ws @-string \":\" @-ws @-value )* )? \"}\" @-ws\n" },
    { P_ARRAY, P_VALUE | P_WS, "@-array ::= \"[\" @-ws ( @-value ( \",\" @-ws @-value )* )? \"]\" @-ws\n" },
};
#define N_PRIMS (sizeof PRIMS / sizeof PRIMS[0])

static void put_prims(ctx *c) {
    unsigned need = c->prims, before;
    do {                               /* closure over the dependencies */
        before = need;
        for (size_t i = 0; i < N_PRIMS; i++)
            if (need & PRIMS[i].bit) need |= PRIMS[i].needs;
    } while (need != before);
    for (size_t i = 0; i < N_PRIMS; i++) {
        if (!(need & PRIMS[i].bit)) continue;
        for (const char *p = PRIMS[i].text; *p; p++) {
            if (*p == '@') sb_puts(&c->out, c->prefix);
            else sb_putn(&c->out, p, 1);
        }
    }
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */
static bool valid_prefix(const char *p) {
    if (!p || !*p || strlen(p) > 48) return false;
    for (; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return false;
    return true;
}

/* The rules of schema into c->out, the value rule named c->prefix. */
static int convert(ctx *c, const json_t *schema) {
    char base[MAX_NAME + 32];
    snprintf(base, sizeof base, "%s-p", c->prefix);
    json_object_set_new(c->names, c->prefix, json_null());
    sbuf body = { 0 };
    int rc = gen_value(c, schema, base, &body);
    if (!rc) rc = put_rule(c, c->prefix, &body);
    free(body.p);
    if (!rc) put_prims(c);
    if (!rc && c->out.over) rc = fail(c, "grammar larger than %zu bytes", MAX_OUT);
    return rc;
}

int sp_schema_append_rules(const json_t *schema, const char *prefix, const char *path, char **gbnf,
                           sp_err *err) {
    assert(gbnf);
    if (!path) path = "schema";
    if (!schema) return sp_err_set(err, "%s: no schema", path);
    if (!valid_prefix(prefix))
        return sp_err_set(err, "%s: invalid rule prefix \"%s\" (1-48 of [a-z0-9-])", path, prefix ? prefix : "");
    ctx c = { .root = schema, .prefix = prefix, .path = path, .err = err };
    c.names = json_object();
    c.refs = json_object();
    int rc = convert(&c, schema);
    if (!rc) {
        size_t old = *gbnf ? strlen(*gbnf) : 0;
        *gbnf = sp_xrealloc(*gbnf, old + c.out.len + 1);
        memcpy(*gbnf + old, c.out.p, c.out.len + 1);
    }
    json_decref(c.names);
    json_decref(c.refs);
    free(c.ptr.p);
    free(c.out.p);
    return rc;
}

char *sp_schema_to_gbnf(const char *text, size_t len, sp_err *err) {
    json_error_t je;
    json_t *schema = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!schema)
        return sp_err_set(err, "json_schema: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text),
               NULL;
    char *gbnf = NULL;
    /* "root" as the prefix: the value rule is the start rule */
    int rc = sp_schema_append_rules(schema, "root", "json_schema", &gbnf, err);
    json_decref(schema);
    if (rc) {
        free(gbnf);
        return NULL;
    }
    return gbnf;
}

static char *any_object;
static void make_any_object(void) {
    sp_err err;
    json_t *s = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
    int rc = sp_schema_append_rules(s, "root", "json_object", &any_object, &err);
    json_decref(s);
    assert(rc == 0 && any_object);
    (void)rc;
}

const char *sp_schema_any_object_gbnf(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_any_object);
    return any_object;
}

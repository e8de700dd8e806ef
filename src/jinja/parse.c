/*
 * The template parser: tokens -> syntax tree, by recursive descent in
 * jinja2's precedence order (lowest first):
 *
 *   a if c else b   or   and   not   comparisons (== != < <= > >= in, not in;
 *   chained)   + -   ~   * / // %   **   unary - +   primary with postfix
 *   (.name [index] [a:b:c] (call)) and filters (| f(args)) and tests
 *   (is [not] t(args))
 *
 * Unsupported statements, unknown filters and tests, and unknown method
 * calls are refused here, so a template that would fail half-way through
 * a conversation fails when it is loaded instead.
 */
#include "jinja/internal.h"

#include <stdio.h>
#include <string.h>

typedef struct ps {
    const jtok *t;
    size_t n, i;
    jj_arena *a;
    sp_err *err;
    int nest;
    int loops;          /* enclosing for loops (break/continue allowed) */
    bool failed;
} ps;

#define PS_FAIL(p, ...) do { ps_fail(p, __VA_ARGS__); return NULL; } while (0)

static void ps_fail(ps *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ps_fail(ps *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sp_err_set(p->err, "template: line %d: %s", p->t[p->i < p->n ? p->i : p->n - 1].line, msg);
}

static const jtok *ps_cur(ps *p) { return &p->t[p->i]; }
static bool ps_is_op(ps *p, const char *op) {
    const jtok *t = ps_cur(p);
    return t->kind == JT_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static bool ps_is_name(ps *p, const char *name) {
    const jtok *t = ps_cur(p);
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}
static bool ps_next_is_name(ps *p, const char *name) {
    if (p->i + 1 >= p->n) return false;
    const jtok *t = &p->t[p->i + 1];
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}
static bool ps_accept_op(ps *p, const char *op) {
    if (!ps_is_op(p, op)) return false;
    p->i++;
    return true;
}
static bool ps_accept_name(ps *p, const char *name) {
    if (!ps_is_name(p, name)) return false;
    p->i++;
    return true;
}

static const char *ps_tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_BLOCK_END: return "'%}'";
    case JT_VAR_END: return "'}}'";
    case JT_STRING: return "a string";
    case JT_INT: case JT_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static bool ps_expect_op(ps *p, const char *op) {
    if (ps_accept_op(p, op)) return true;
    char b[64];
    ps_fail(p, "expected '%s', found %s", op, ps_tok_desc(ps_cur(p), b, sizeof b));
    return false;
}

static bool ps_expect_end(ps *p, jt_kind k) {
    if (ps_cur(p)->kind == k) { p->i++; return true; }
    char b[64];
    ps_fail(p, "expected '%s', found %s", k == JT_BLOCK_END ? "%}" : "}}", ps_tok_desc(ps_cur(p), b, sizeof b));
    return false;
}

static char *ps_name(ps *p) {
    const jtok *t = ps_cur(p);
    if (t->kind != JT_NAME) {
        char b[64];
        ps_fail(p, "expected a name, found %s", ps_tok_desc(t, b, sizeof b));
        return NULL;
    }
    char *s = jj_alloc(p->a, t->n + 1);
    if (!s) { ps_fail(p, "template too large"); return NULL; }
    memcpy(s, t->s, t->n);
    p->i++;
    return s;
}

static jnode *ps_node(ps *p, jn_kind k) {
    jnode *n = jj_alloc(p->a, sizeof *n);
    if (!n) { ps_fail(p, "template too large"); return NULL; }
    n->kind = (uint8_t)k;
    n->line = ps_cur(p)->line;
    return n;
}

/* A growing array of node pointers in the arena. */
typedef struct ps_vec { jnode **v; int n, cap; } ps_vec;
static bool ps_vec_push(ps *p, ps_vec *v, jnode *x) {
    if (!x) return false;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 8;
        jnode **nv = jj_alloc(p->a, (size_t)cap * sizeof *nv);
        if (!nv) { ps_fail(p, "template too large"); return false; }
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

static jnode *ps_expr(ps *p);
static jnode *ps_or(ps *p);
static jnode *ps_unary(ps *p, bool with_filter);
static jnode *ps_primary(ps *p);
static jnode *ps_postfix(ps *p, jnode *n);

static bool ps_enter(ps *p) {
    if (++p->nest > JJ_MAX_NEST) { ps_fail(p, "nested too deeply (over %d levels)", JJ_MAX_NEST); return false; }
    return true;
}

static jnode *ps_lit(ps *p, jv *v) {
    jnode *n = ps_node(p, JN_LIT);
    if (n) n->v = v;
    return n;
}

static jv *ps_value(ps *p, jv_kind k) {
    jv *v = jj_alloc(p->a, sizeof *v);
    if (!v) { ps_fail(p, "template too large"); return NULL; }
    v->kind = (uint8_t)k;
    return v;
}

/* Call arguments after '(': positional and name=value. */
static bool ps_args(ps *p, jnode *n) {
    ps_vec args = { 0 }, kwv = { 0 };
    const char **kwn = NULL;
    int kcap = 0;
    while (!ps_is_op(p, ")")) {
        if (ps_is_op(p, "*") || ps_is_op(p, "**")) { ps_fail(p, "unsupported construct: *args/**kwargs in a call"); return false; }
        if (ps_cur(p)->kind == JT_NAME && p->i + 1 < p->n && p->t[p->i + 1].kind == JT_OP &&
            p->t[p->i + 1].n == 1 && p->t[p->i + 1].s[0] == '=') {
            char *name = ps_name(p);
            p->i++;
            if (!name || !ps_vec_push(p, &kwv, ps_expr(p))) return false;
            if (kwv.n > kcap) {
                kcap = kwv.cap;
                const char **nk = jj_alloc(p->a, (size_t)kcap * sizeof *nk);
                if (!nk) { ps_fail(p, "template too large"); return false; }
                if (kwv.n > 1) memcpy(nk, kwn, (size_t)(kwv.n - 1) * sizeof *nk);
                kwn = nk;
            }
            kwn[kwv.n - 1] = name;
        } else {
            if (kwv.n) { ps_fail(p, "a positional argument after a keyword argument"); return false; }
            if (!ps_vec_push(p, &args, ps_expr(p))) return false;
        }
        if (!ps_accept_op(p, ",")) break;
    }
    if (!ps_expect_op(p, ")")) return false;
    n->kids = args.v;
    n->n_kids = args.n;
    n->kwnames = kwn;
    n->kwvals = kwv.v;
    n->n_kw = kwv.n;
    return true;
}

/* [a:b:c] after '[' was read */
static jnode *ps_subscript(ps *p, jnode *obj) {
    jnode *parts[3] = { 0 };
    int k = 0;
    bool slice = false;
    for (;;) {
        if (!ps_is_op(p, ":") && !ps_is_op(p, "]")) {
            parts[k] = ps_expr(p);
            if (!parts[k]) return NULL;
        }
        if (ps_accept_op(p, ":")) {
            slice = true;
            if (++k > 2) PS_FAIL(p, "a slice has at most three parts");
            continue;
        }
        break;
    }
    if (!ps_expect_op(p, "]")) return NULL;
    jnode *n = ps_node(p, slice ? JN_SLICE : JN_ITEM);
    if (!n) return NULL;
    n->a = obj;
    if (slice) { n->b = parts[0]; n->c = parts[1]; n->d = parts[2]; }
    else {
        if (!parts[0]) PS_FAIL(p, "an empty subscript");
        n->b = parts[0];
    }
    return n;
}

bool jj_method_known(const char *name);

/* callee(args...) after '(' was read */
static jnode *ps_call(ps *p, jnode *callee) {
    jnode *c = ps_node(p, JN_CALL);
    if (!c) return NULL;
    c->a = callee;
    return ps_args(p, c) ? c : NULL;
}

static jnode *ps_postfix(ps *p, jnode *n) {
    while (n) {
        if (ps_accept_op(p, ".")) {
            const jtok *t = ps_cur(p);
            if (t->kind == JT_INT) {
                jnode *it = ps_node(p, JN_ITEM);
                jv *v = ps_value(p, JV_INT);
                if (!it || !v) return NULL;
                v->u.i = t->i;
                p->i++;
                it->a = n;
                it->b = ps_lit(p, v);
                n = it;
                continue;
            }
            jnode *at = ps_node(p, JN_ATTR);
            if (!at) return NULL;
            at->a = n;
            if (!(at->s = ps_name(p))) return NULL;
            if (ps_is_op(p, "(") && !jj_method_known(at->s))
                PS_FAIL(p, "unsupported method '.%s()'", at->s);
            n = at;
        } else if (ps_accept_op(p, "[")) {
            n = ps_subscript(p, n);
        } else if (ps_accept_op(p, "(")) {
            n = ps_call(p, n);
        } else break;
    }
    return n;
}

/* | name(args) ... and is [not] name(args) */
static jnode *ps_filter_expr(ps *p, jnode *n) {
    while (n) {
        if (ps_accept_op(p, "|")) {
            jnode *f = ps_node(p, JN_FILTER);
            if (!f) return NULL;
            f->a = n;
            if (!(f->s = ps_name(p))) return NULL;
            if (!jj_filter_known(f->s)) PS_FAIL(p, "unsupported filter '%s'", f->s);
            if (ps_accept_op(p, "(") && !ps_args(p, f)) return NULL;
            n = f;
        } else if (ps_is_name(p, "is")) {
            p->i++;
            jnode *t = ps_node(p, JN_TEST);
            if (!t) return NULL;
            t->a = n;
            t->neg = ps_accept_name(p, "not");
            if (!(t->s = ps_name(p))) return NULL;
            if (!jj_test_known(t->s)) PS_FAIL(p, "unsupported test '%s'", t->s);
            const jtok *c = ps_cur(p);
            if (ps_accept_op(p, "(")) {
                if (!ps_args(p, t)) return NULL;
            } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                        ps_is_op(p, "[") || ps_is_op(p, "{")) &&
                       !ps_is_name(p, "else") && !ps_is_name(p, "or") && !ps_is_name(p, "and")) {
                jnode *arg = ps_postfix(p, ps_primary(p));
                if (!arg) return NULL;
                jnode **k = jj_alloc(p->a, sizeof *k);
                if (!k) PS_FAIL(p, "template too large");
                k[0] = arg;
                t->kids = k;
                t->n_kids = 1;
            }
            n = t;
        } else if (ps_accept_op(p, "(")) {
            n = ps_call(p, n);
        } else break;
    }
    return n;
}

static jnode *ps_seq(ps *p, jn_kind kind, const char *close) {
    jnode *n = ps_node(p, kind);
    ps_vec v = { 0 };
    if (!n) return NULL;
    while (!ps_is_op(p, close)) {
        if (kind == JN_DICT) {
            if (!ps_vec_push(p, &v, ps_expr(p)) || !ps_expect_op(p, ":") || !ps_vec_push(p, &v, ps_expr(p)))
                return NULL;
        } else if (!ps_vec_push(p, &v, ps_expr(p))) return NULL;
        if (!ps_accept_op(p, ",")) break;
    }
    if (!ps_expect_op(p, close)) return NULL;
    n->kids = v.v;
    n->n_kids = v.n;
    return n;
}

static jnode *ps_primary(ps *p) {
    const jtok *t = ps_cur(p);
    char b[64];
    if (!ps_enter(p)) return NULL;
    jnode *n = NULL;
    if (t->kind == JT_NAME) {
        jv *v = NULL;
        if (ps_is_name(p, "true") || ps_is_name(p, "True")) v = &jv_true_v;
        else if (ps_is_name(p, "false") || ps_is_name(p, "False")) v = &jv_false_v;
        else if (ps_is_name(p, "none") || ps_is_name(p, "None")) v = &jv_none_v;
        if (v) { p->i++; n = ps_lit(p, v); }
        else {
            n = ps_node(p, JN_NAME);
            if (n && !(n->s = ps_name(p))) n = NULL;
        }
    } else if (t->kind == JT_STRING) {
        /* adjacent literals are one string */
        size_t len = 0, j = p->i;
        for (; j < p->n && p->t[j].kind == JT_STRING; j++) len += p->t[j].n;
        jv *v = ps_value(p, JV_STR);
        char *s = jj_alloc(p->a, len + 1);
        if (!v || !s) PS_FAIL(p, "template too large");
        len = 0;
        for (; p->i < j; p->i++) { memcpy(s + len, p->t[p->i].s, p->t[p->i].n); len += p->t[p->i].n; }
        v->u.str.s = s;
        v->u.str.n = len;
        n = ps_lit(p, v);
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        jv *v = ps_value(p, t->kind == JT_INT ? JV_INT : JV_FLOAT);
        if (!v) return NULL;
        if (t->kind == JT_INT) v->u.i = t->i; else v->u.f = t->f;
        p->i++;
        n = ps_lit(p, v);
    } else if (ps_accept_op(p, "(")) {
        if (ps_accept_op(p, ")")) n = ps_node(p, JN_TUPLE);
        else {
            jnode *first = ps_expr(p);
            if (!first) return NULL;
            if (ps_is_op(p, ",")) {
                n = ps_node(p, JN_TUPLE);
                ps_vec v = { 0 };
                if (!n || !ps_vec_push(p, &v, first)) return NULL;
                while (ps_accept_op(p, ",") && !ps_is_op(p, ")"))
                    if (!ps_vec_push(p, &v, ps_expr(p))) return NULL;
                n->kids = v.v;
                n->n_kids = v.n;
            } else n = first;
            if (!ps_expect_op(p, ")")) return NULL;
        }
    } else if (ps_accept_op(p, "[")) {
        n = ps_seq(p, JN_LIST, "]");
    } else if (ps_accept_op(p, "{")) {
        n = ps_seq(p, JN_DICT, "}");
    } else PS_FAIL(p, "expected an expression, found %s", ps_tok_desc(t, b, sizeof b));
    p->nest--;
    return n;
}

static jnode *ps_unary(ps *p, bool with_filter) {
    if (!ps_enter(p)) return NULL;
    jnode *n;
    if (ps_is_op(p, "-") || ps_is_op(p, "+")) {
        const bool neg = ps_is_op(p, "-");
        p->i++;
        n = ps_node(p, neg ? JN_NEG : JN_POS);
        if (n && !(n->a = ps_unary(p, false))) return NULL;
    } else n = ps_primary(p);
    n = ps_postfix(p, n);
    if (with_filter) n = ps_filter_expr(p, n);
    p->nest--;
    return n;
}

static jnode *ps_bin(ps *p, jop op, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = ps_node(p, JN_BIN);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    n->line = a->line;
    return n;
}

static jnode *ps_pow(ps *p) {
    jnode *n = ps_unary(p, true);
    while (n && ps_accept_op(p, "**")) n = ps_bin(p, JOP_POW, n, ps_unary(p, true));
    return n;
}

static jnode *ps_math2(ps *p) {
    jnode *n = ps_pow(p);
    for (;;) {
        jop op;
        if (ps_accept_op(p, "*")) op = JOP_MUL;
        else if (ps_accept_op(p, "/")) op = JOP_DIV;
        else if (ps_accept_op(p, "//")) op = JOP_FLOORDIV;
        else if (ps_accept_op(p, "%")) op = JOP_MOD;
        else return n;
        n = ps_bin(p, op, n, ps_pow(p));
    }
}

static jnode *ps_concat(ps *p) {
    jnode *n = ps_math2(p);
    while (n && ps_accept_op(p, "~")) n = ps_bin(p, JOP_CONCAT, n, ps_math2(p));
    return n;
}

static jnode *ps_math1(ps *p) {
    jnode *n = ps_concat(p);
    for (;;) {
        if (ps_accept_op(p, "+")) n = ps_bin(p, JOP_ADD, n, ps_concat(p));
        else if (ps_accept_op(p, "-")) n = ps_bin(p, JOP_SUB, n, ps_concat(p));
        else return n;
    }
}

static jnode *ps_compare(ps *p) {
    jnode *first = ps_math1(p);
    if (!first) return NULL;
    ps_vec v = { 0 };
    jop ops[64];
    int n_ops = 0;
    if (!ps_vec_push(p, &v, first)) return NULL;
    for (;;) {
        jop op;
        if (ps_accept_op(p, "==")) op = JOP_EQ;
        else if (ps_accept_op(p, "!=")) op = JOP_NE;
        else if (ps_accept_op(p, "<")) op = JOP_LT;
        else if (ps_accept_op(p, "<=")) op = JOP_LE;
        else if (ps_accept_op(p, ">")) op = JOP_GT;
        else if (ps_accept_op(p, ">=")) op = JOP_GE;
        else if (ps_accept_name(p, "in")) op = JOP_IN;
        else if (ps_is_name(p, "not") && ps_next_is_name(p, "in")) { p->i += 2; op = JOP_NOTIN; }
        else break;
        if (n_ops == 64) PS_FAIL(p, "too many chained comparisons");
        ops[n_ops++] = op;
        if (!ps_vec_push(p, &v, ps_math1(p))) return NULL;
    }
    if (!n_ops) return first;
    jnode *n = ps_node(p, JN_CMP);
    jop *o = jj_alloc(p->a, (size_t)n_ops * sizeof *o);
    if (!n || !o) PS_FAIL(p, "template too large");
    memcpy(o, ops, (size_t)n_ops * sizeof *o);
    n->kids = v.v;
    n->n_kids = v.n;
    n->ops = o;
    n->line = first->line;
    return n;
}

static jnode *ps_not(ps *p) {
    if (ps_is_name(p, "not")) {
        p->i++;
        if (!ps_enter(p)) return NULL;
        jnode *n = ps_node(p, JN_NOT);
        if (n && !(n->a = ps_not(p))) return NULL;
        p->nest--;
        return n;
    }
    return ps_compare(p);
}

static jnode *ps_and(ps *p) {
    jnode *n = ps_not(p);
    while (n && ps_accept_name(p, "and")) {
        jnode *x = ps_node(p, JN_AND);
        if (!x) return NULL;
        x->a = n;
        if (!(x->b = ps_not(p))) return NULL;
        n = x;
    }
    return n;
}

static jnode *ps_or(ps *p) {
    jnode *n = ps_and(p);
    while (n && ps_accept_name(p, "or")) {
        jnode *x = ps_node(p, JN_OR);
        if (!x) return NULL;
        x->a = n;
        if (!(x->b = ps_and(p))) return NULL;
        n = x;
    }
    return n;
}

static jnode *ps_cond(ps *p, bool with_cond) {
    if (!ps_enter(p)) return NULL;
    jnode *n = ps_or(p);
    while (with_cond && n && ps_accept_name(p, "if")) {
        jnode *c = ps_node(p, JN_COND);
        if (!c) return NULL;
        c->a = n;
        if (!(c->b = ps_or(p))) return NULL;
        if (ps_accept_name(p, "else") && !(c->c = ps_cond(p, true))) return NULL;
        n = c;
    }
    p->nest--;
    return n;
}

static jnode *ps_expr(ps *p) { return ps_cond(p, true); }

/* expr [, expr]* : a tuple when there is a comma */
static jnode *ps_tuple(ps *p, bool with_cond) {
    jnode *first = ps_cond(p, with_cond);
    if (!first || !ps_is_op(p, ",")) return first;
    jnode *n = ps_node(p, JN_TUPLE);
    ps_vec v = { 0 };
    if (!n || !ps_vec_push(p, &v, first)) return NULL;
    while (ps_accept_op(p, ",")) {
        if (ps_cur(p)->kind == JT_BLOCK_END || ps_cur(p)->kind == JT_VAR_END || ps_is_name(p, "in")) break;
        if (!ps_vec_push(p, &v, ps_cond(p, with_cond))) return NULL;
    }
    n->kids = v.v;
    n->n_kids = v.n;
    return n;
}

/* ------------------------------------------------------------------------
 * Statements
 * ---------------------------------------------------------------------- */
static jnode *ps_body(ps *p, const char *const *ends, const char **which);

/* Assignment targets: name, name.attr, or names separated by commas. */
static jnode *ps_target(ps *p, bool allow_attr) {
    bool paren = ps_accept_op(p, "(");
    jnode *first = ps_node(p, JN_NAME);
    if (!first || !(first->s = ps_name(p))) return NULL;
    if (allow_attr && !paren && ps_accept_op(p, ".")) {
        jnode *at = ps_node(p, JN_ATTR);
        if (!at) return NULL;
        at->a = first;
        if (!(at->s = ps_name(p))) return NULL;
        return at;
    }
    if (!ps_is_op(p, ",")) {
        if (paren && !ps_expect_op(p, ")")) return NULL;
        return first;
    }
    jnode *t = ps_node(p, JN_TUPLE);
    ps_vec v = { 0 };
    if (!t || !ps_vec_push(p, &v, first)) return NULL;
    while (ps_accept_op(p, ",")) {
        jnode *x = ps_node(p, JN_NAME);
        if (!x || !(x->s = ps_name(p)) || !ps_vec_push(p, &v, x)) return NULL;
    }
    if (paren && !ps_expect_op(p, ")")) return NULL;
    t->kids = v.v;
    t->n_kids = v.n;
    return t;
}

static jnode *ps_if(ps *p) {
    jnode *n = ps_node(p, JN_IF);
    if (!n || !(n->a = ps_expr(p)) || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
    static const char *const ends[] = { "elif", "else", "endif", NULL };
    const char *which;
    if (!(n->b = ps_body(p, ends, &which))) return NULL;
    if (!strcmp(which, "elif")) {
        n->c = ps_if(p);
        return n->c ? n : NULL;
    }
    if (!strcmp(which, "else")) {
        static const char *const end[] = { "endif", NULL };
        if (!ps_expect_end(p, JT_BLOCK_END) || !(n->c = ps_body(p, end, &which))) return NULL;
    }
    return ps_expect_end(p, JT_BLOCK_END) ? n : NULL;
}

static jnode *ps_for(ps *p) {
    jnode *n = ps_node(p, JN_FOR);
    if (!n || !(n->t = ps_target(p, false))) return NULL;
    if (!ps_accept_name(p, "in")) PS_FAIL(p, "expected 'in' in a for loop");
    if (!(n->a = ps_tuple(p, false))) return NULL;
    if (ps_accept_name(p, "if") && !(n->d = ps_expr(p))) return NULL;
    if (ps_is_name(p, "recursive")) PS_FAIL(p, "unsupported construct: recursive loops");
    if (!ps_expect_end(p, JT_BLOCK_END)) return NULL;
    static const char *const ends[] = { "else", "endfor", NULL };
    const char *which;
    p->loops++;
    n->b = ps_body(p, ends, &which);
    p->loops--;
    if (!n->b) return NULL;
    if (!strcmp(which, "else")) {
        static const char *const end[] = { "endfor", NULL };
        if (!ps_expect_end(p, JT_BLOCK_END) || !(n->c = ps_body(p, end, &which))) return NULL;
    }
    return ps_expect_end(p, JT_BLOCK_END) ? n : NULL;
}

/* A chain of filters applied to the block's text: name(args) | name ... */
static jnode *ps_filter_chain(ps *p) {
    jnode *n = NULL;
    do {
        jnode *f = ps_node(p, JN_FILTER);
        if (!f) return NULL;
        f->a = n;
        if (!(f->s = ps_name(p))) return NULL;
        if (!jj_filter_known(f->s)) PS_FAIL(p, "unsupported filter '%s'", f->s);
        if (ps_accept_op(p, "(") && !ps_args(p, f)) return NULL;
        n = f;
    } while (ps_accept_op(p, "|"));
    return n;
}

static jnode *ps_set(ps *p) {
    jnode *t = ps_target(p, true);
    if (!t) return NULL;
    if (ps_accept_op(p, "=")) {
        jnode *n = ps_node(p, JN_SET);
        if (!n) return NULL;
        n->t = t;
        if (!(n->a = ps_tuple(p, true)) || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
        return n;
    }
    if (t->kind != JN_NAME) PS_FAIL(p, "a block set takes one name");
    jnode *n = ps_node(p, JN_SET_BLOCK);
    if (!n) return NULL;
    n->s = t->s;
    if (ps_accept_op(p, "|") && !(n->c = ps_filter_chain(p))) return NULL;
    if (!ps_expect_end(p, JT_BLOCK_END)) return NULL;
    static const char *const ends[] = { "endset", NULL };
    const char *which;
    if (!(n->b = ps_body(p, ends, &which)) || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
    return n;
}

static jnode *ps_macro(ps *p) {
    jnode *n = ps_node(p, JN_MACRO);
    if (!n || !(n->s = ps_name(p)) || !ps_expect_op(p, "(")) return NULL;
    ps_vec params = { 0 }, defs = { 0 };
    while (!ps_is_op(p, ")")) {
        jnode *x = ps_node(p, JN_NAME);
        if (!x || !(x->s = ps_name(p)) || !ps_vec_push(p, &params, x)) return NULL;
        jnode *d = NULL;
        if (ps_accept_op(p, "=")) {
            if (!(d = ps_expr(p))) return NULL;
        } else if (defs.n && defs.v[defs.n - 1]) PS_FAIL(p, "a macro parameter without a default after one with a default");
        if (defs.n == defs.cap) {
            int cap = defs.cap ? 2 * defs.cap : 8;
            jnode **nv = jj_alloc(p->a, (size_t)cap * sizeof *nv);
            if (!nv) PS_FAIL(p, "template too large");
            if (defs.n) memcpy(nv, defs.v, (size_t)defs.n * sizeof *nv);
            defs.v = nv;
            defs.cap = cap;
        }
        defs.v[defs.n++] = d;
        if (!ps_accept_op(p, ",")) break;
    }
    if (!ps_expect_op(p, ")") || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
    static const char *const ends[] = { "endmacro", NULL };
    const char *which;
    const int loops = p->loops;
    p->loops = 0;
    n->b = ps_body(p, ends, &which);
    p->loops = loops;
    if (!n->b || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
    n->kids = params.v;
    n->n_kids = params.n;
    n->defs = defs.v;
    return n;
}

static const char *const ps_refused[] = {
    "extends", "block", "include", "import", "from", "call", "do", "with", "autoescape", "trans",
};

/* One {% ... %} statement after its opening; NULL with p->failed on error.
 * *end_name is set instead when the tag is one of `ends`. */
static jnode *ps_stmt(ps *p, const char *const *ends, const char **end_name) {
    const jtok *t = ps_cur(p);
    char b[64];
    if (t->kind != JT_NAME) PS_FAIL(p, "expected a statement name, found %s", ps_tok_desc(t, b, sizeof b));
    for (int i = 0; ends && ends[i]; i++)
        if (ps_is_name(p, ends[i])) {
            *end_name = ends[i];
            p->i++;
            return NULL;
        }
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(t->n < 31 ? t->n : 31), t->s);
    p->i++;
    if (!strcmp(name, "if")) return ps_if(p);
    if (!strcmp(name, "for")) return ps_for(p);
    if (!strcmp(name, "set")) return ps_set(p);
    if (!strcmp(name, "macro")) return ps_macro(p);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!p->loops) PS_FAIL(p, "'%s' outside a loop", name);
        jnode *n = ps_node(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        return n && ps_expect_end(p, JT_BLOCK_END) ? n : NULL;
    }
    if (!strcmp(name, "filter")) {
        jnode *n = ps_node(p, JN_FILTER_BLOCK);
        if (!n || !(n->a = ps_filter_chain(p)) || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
        static const char *const e[] = { "endfilter", NULL };
        const char *which;
        if (!(n->b = ps_body(p, e, &which)) || !ps_expect_end(p, JT_BLOCK_END)) return NULL;
        return n;
    }
    if (!strcmp(name, "generation")) {
        /* transformers' assistant-mask marker: renders its body */
        if (!ps_expect_end(p, JT_BLOCK_END)) return NULL;
        static const char *const e[] = { "endgeneration", NULL };
        const char *which;
        jnode *n = ps_body(p, e, &which);
        return n && ps_expect_end(p, JT_BLOCK_END) ? n : NULL;
    }
    if (!strncmp(name, "end", 3) || !strcmp(name, "else") || !strcmp(name, "elif"))
        PS_FAIL(p, "unexpected '{%% %s %%}'", name);
    for (size_t i = 0; i < sizeof ps_refused / sizeof *ps_refused; i++)
        if (!strcmp(name, ps_refused[i])) PS_FAIL(p, "unsupported construct '{%% %s %%}'", name);
    PS_FAIL(p, "unknown statement '{%% %s %%}'", name);
}

/* Statements up to one of `ends` (NULL = the end of the template); the
 * closing tag's name goes to *which, its '%}' is left to the caller. */
static jnode *ps_body(ps *p, const char *const *ends, const char **which) {
    if (!ps_enter(p)) return NULL;
    jnode *body = ps_node(p, JN_BODY);
    ps_vec v = { 0 };
    if (!body) return NULL;
    for (;;) {
        const jtok *t = ps_cur(p);
        if (t->kind == JT_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1]) last++;
                PS_FAIL(p, "missing '{%% %s %%}'", ends[last]);
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            jnode *n = ps_node(p, JN_TEXT);
            if (!n) return NULL;
            n->s = t->s;
            n->n = t->n;
            p->i++;
            if (!ps_vec_push(p, &v, n)) return NULL;
        } else if (t->kind == JT_VAR_BEGIN) {
            p->i++;
            jnode *n = ps_node(p, JN_OUTPUT);
            if (!n || !(n->a = ps_tuple(p, true)) || !ps_expect_end(p, JT_VAR_END) || !ps_vec_push(p, &v, n))
                return NULL;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            p->i++;
            const char *end = NULL;
            jnode *n = ps_stmt(p, ends, &end);
            if (end) {
                *which = end;
                break;
            }
            if (!n || !ps_vec_push(p, &v, n)) {
                if (!p->failed) {
                    char b[64];
                    ps_fail(p, "unexpected %s", ps_tok_desc(ps_cur(p), b, sizeof b));
                }
                return NULL;
            }
        } else {
            char b[64];
            PS_FAIL(p, "unexpected %s", ps_tok_desc(t, b, sizeof b));
        }
    }
    body->kids = v.v;
    body->n_kids = v.n;
    p->nest--;
    return body;
}

jnode *jj_parse(const jtok *toks, size_t n, jj_arena *a, sp_err *err) {
    ps p = { .t = toks, .n = n, .a = a, .err = err };
    const char *which = NULL;
    jnode *root = ps_body(&p, NULL, &which);
    if (!root && !p.failed) sp_err_set(err, "template: parse failed");
    return root;
}

/*
 * The renderer: walks the syntax tree, evaluating expressions to values
 * and appending text (with its provenance) to the current output.
 *
 * Scopes follow jinja2: a `for` loop and a macro call open a scope (a
 * `set` inside stays inside; namespaces are how templates carry values
 * out), `if` does not.  Macros see the template's top-level variables,
 * not their caller's.  Every error unwinds to sp_jinja_render through
 * c->fail with the message in c->err.
 */
#include "jinja/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Noreturn void jj_fail(jj_ctx *c, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) sp_err_set(c->err, "template: line %d: %s", line, msg);
    else sp_err_set(c->err, "template: %s", msg);
    longjmp(c->fail, 1);
}

static void jj_step(jj_ctx *c, int line) {
    if (++c->steps > JJ_MAX_STEPS)
        jj_fail(c, line, "the template ran over %llu steps", (unsigned long long)JJ_MAX_STEPS);
}

/* ------------------------------------------------------------------------
 * Scopes
 * ---------------------------------------------------------------------- */
static jj_frame *frame_push(jj_ctx *c, jj_frame *parent) {
    jj_frame *f = jj_alloc(&c->arena, sizeof *f);
    if (!f) jj_fail(c, 0, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    f->parent = parent;
    return f;
}

static void frame_set(jj_ctx *c, jj_frame *f, const char *name, jv *v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        const char **nn = jj_alloc(&c->arena, cap * sizeof *nn);
        jv **nv = jj_alloc(&c->arena, cap * sizeof *nv);
        if (!nn || !nv) jj_fail(c, 0, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static jv *frame_get(const jj_frame *f, const char *name) {
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    return NULL;
}

/* ------------------------------------------------------------------------
 * Expressions
 * ---------------------------------------------------------------------- */
jv *jj_iter_list(jj_ctx *c, jv *v, int line) {
    switch (v->kind) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list(c, 0);
    case JV_DICT: case JV_NS: {
        jv *l = jv_list(c, v->u.dict.n);
        for (size_t i = 0; i < v->u.dict.n; i++) l->u.list.items[i] = v->u.dict.keys[i];
        return l;
    }
    case JV_STR: {
        size_t n = jj_u8_len(v->u.str.s, v->u.str.n);
        jv *l = jv_list(c, n);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t next = at + jj_u8_offset(v->u.str.s + at, v->u.str.n - at, 1);
            l->u.list.items[i] = jv_str_sub(c, v, at, next - at);
            at = next;
        }
        return l;
    }
    default: jj_fail(c, line, "'%s' object is not iterable", jv_kind_name(v));
    }
}

static jv *eval_args(jj_ctx *c, const jnode *n, jv ***args, jv ***kwv) {
    *args = n->n_kids ? jj_alloc(&c->arena, (size_t)n->n_kids * sizeof **args) : NULL;
    *kwv = n->n_kw ? jj_alloc(&c->arena, (size_t)n->n_kw * sizeof **kwv) : NULL;
    if ((n->n_kids && !*args) || (n->n_kw && !*kwv))
        jj_fail(c, n->line, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    for (int i = 0; i < n->n_kids; i++) (*args)[i] = jj_eval(c, n->kids[i]);
    for (int i = 0; i < n->n_kw; i++) (*kwv)[i] = jj_eval(c, n->kwvals[i]);
    return NULL;
}

static int64_t slice_index(jj_ctx *c, const jnode *n, int64_t dflt) {
    if (!n) return dflt;
    jv *v = jj_eval(c, n);
    if (v->kind == JV_NONE) return dflt;
    if (v->kind != JV_INT && v->kind != JV_BOOL) jj_fail(c, n->line, "slice indices must be integers or None");
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

/* Python's slice: obj[start:stop:step] over list items or code points. */
static jv *eval_slice(jj_ctx *c, const jnode *n) {
    jv *obj = jj_eval(c, n->a);
    int64_t step = slice_index(c, n->d, 1);
    if (step == 0) jj_fail(c, n->line, "slice step cannot be zero");
    if (obj->kind == JV_UNDEF) jj_fail(c, n->line, "'%s' is undefined", obj->u.undef_name ? obj->u.undef_name : "value");
    jv *items;
    if (obj->kind == JV_LIST) items = obj;
    else if (obj->kind == JV_STR) items = jj_iter_list(c, obj, n->line);
    else jj_fail(c, n->line, "'%s' object is not subscriptable", jv_kind_name(obj));
    const int64_t len = (int64_t)items->u.list.n;
    int64_t lo, hi;
    if (step > 0) {
        lo = slice_index(c, n->b, 0);
        hi = slice_index(c, n->c, len);
        if (lo < 0) lo = lo + len < 0 ? 0 : lo + len;
        if (hi < 0) hi = hi + len < 0 ? 0 : hi + len;
        if (lo > len) lo = len;
        if (hi > len) hi = len;
    } else {
        lo = slice_index(c, n->b, len - 1);
        hi = slice_index(c, n->c, -1 - len);
        if (lo < 0) lo = lo + len < 0 ? -1 : lo + len;
        if (hi < 0) hi = hi + len < 0 ? -1 : hi + len;
        if (lo >= len) lo = len - 1;
        if (hi >= len) hi = len - 1;
    }
    size_t count = 0;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) count++;
    jv *out = jv_list(c, count);
    size_t k = 0;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out->u.list.items[k++] = items->u.list.items[i];
    if (obj->kind == JV_LIST) {
        out->u.list.tuple = obj->u.list.tuple;
        return out;
    }
    jj_sb b = { 0 };
    for (size_t i = 0; i < count; i++) jj_sb_putv(c, &b, out->u.list.items[i]);
    return jj_sb_done(c, &b);
}

static jv *eval_call(jj_ctx *c, const jnode *n) {
    jv **args, **kwv;
    if (n->a->kind == JN_ATTR) {
        jv *self = jj_eval(c, n->a->a);
        if (self->kind == JV_UNDEF)
            jj_fail(c, n->line, "'%s' is undefined", self->u.undef_name ? self->u.undef_name : "value");
        /* a macro kept in a namespace or dict is called, not treated as a method */
        jv *member = (self->kind == JV_NS || self->kind == JV_DICT) ? jv_dict_gets(self, n->a->s) : NULL;
        eval_args(c, n, &args, &kwv);
        if (member && member->kind == JV_MACRO)
            return jj_call_macro(c, member->u.macro.def, args, n->n_kids, n->kwnames, kwv, n->n_kw, n->line);
        return jj_call_method(c, self, n->a->s, args, n->n_kids, n->kwnames, kwv, n->n_kw, n->line);
    }
    jv *fn = jj_eval(c, n->a);
    eval_args(c, n, &args, &kwv);
    switch (fn->kind) {
    case JV_FUNC: return jj_call_func(c, fn, args, n->n_kids, n->kwnames, kwv, n->n_kw, n->line);
    case JV_MACRO: return jj_call_macro(c, fn->u.macro.def, args, n->n_kids, n->kwnames, kwv, n->n_kw, n->line);
    case JV_METHOD:
        return jj_call_method(c, fn->u.method.self, fn->u.method.name, args, n->n_kids, n->kwnames, kwv, n->n_kw,
                              n->line);
    case JV_UNDEF: jj_fail(c, n->line, "'%s' is undefined", fn->u.undef_name ? fn->u.undef_name : "value");
    default: jj_fail(c, n->line, "'%s' object is not callable", jv_kind_name(fn));
    }
}

static jv *apply_filter_node(jj_ctx *c, const jnode *f, jv *x) {
    if (f->a && f->kind == JN_FILTER && f->a->kind == JN_FILTER && x) x = apply_filter_node(c, f->a, x);
    jv **args, **kwv;
    eval_args(c, f, &args, &kwv);
    return jj_apply_filter(c, f->s, x, args, f->n_kids, f->kwnames, kwv, f->n_kw, f->line);
}

static bool eval_cmp(jj_ctx *c, jop op, jv *a, jv *b, int line) {
    switch (op) {
    case JOP_EQ: return jv_eq(a, b);
    case JOP_NE: return !jv_eq(a, b);
    case JOP_LT: return jv_cmp(c, line, a, b) < 0;
    case JOP_LE: return jv_cmp(c, line, a, b) <= 0;
    case JOP_GT: return jv_cmp(c, line, a, b) > 0;
    case JOP_GE: return jv_cmp(c, line, a, b) >= 0;
    case JOP_IN: case JOP_NOTIN: {
        bool in;
        if (b->kind == JV_STR) {
            if (a->kind != JV_STR) jj_fail(c, line, "'in <string>' requires string as left operand, not %s", jv_kind_name(a));
            in = a->u.str.n == 0 || (b->u.str.n >= a->u.str.n && memmem(b->u.str.s, b->u.str.n, a->u.str.s, a->u.str.n));
        } else if (b->kind == JV_DICT || b->kind == JV_NS) in = jv_dict_get(b, a) != NULL;
        else if (b->kind == JV_LIST) {
            in = false;
            for (size_t i = 0; i < b->u.list.n && !in; i++) in = jv_eq(a, b->u.list.items[i]);
        } else if (b->kind == JV_UNDEF) in = false;
        else jj_fail(c, line, "argument of type '%s' is not iterable", jv_kind_name(b));
        return op == JOP_IN ? in : !in;
    }
    default: return false;
    }
}

jv *jj_eval(jj_ctx *c, const jnode *n) {
    jj_step(c, n->line);
    switch (n->kind) {
    case JN_LIT: return n->v;
    case JN_NAME: {
        jv *v = frame_get(c->frame, n->s);
        if (v) return v;
        v = jj_global(c, n->s);
        return v ? v : jv_undef(c, n->s);
    }
    case JN_LIST: case JN_TUPLE: {
        jv *l = jv_list(c, (size_t)n->n_kids);
        l->u.list.tuple = n->kind == JN_TUPLE;
        for (int i = 0; i < n->n_kids; i++) l->u.list.items[i] = jj_eval(c, n->kids[i]);
        return l;
    }
    case JN_DICT: {
        jv *d = jv_dict(c);
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            jv *k = jj_eval(c, n->kids[i]);
            if (k->kind == JV_LIST && !k->u.list.tuple) jj_fail(c, n->line, "unhashable type: 'list'");
            if (k->kind == JV_DICT) jj_fail(c, n->line, "unhashable type: 'dict'");
            jv_dict_set(c, d, k, jj_eval(c, n->kids[i + 1]));
        }
        return d;
    }
    case JN_ATTR: return jj_getattr(c, jj_eval(c, n->a), n->s, n->line);
    case JN_ITEM: {
        jv *obj = jj_eval(c, n->a);
        return jj_getitem(c, obj, jj_eval(c, n->b), n->line);
    }
    case JN_SLICE: return eval_slice(c, n);
    case JN_CALL: return eval_call(c, n);
    case JN_FILTER: {
        jv *x = jj_eval(c, n->a);
        jv **args, **kwv;
        eval_args(c, n, &args, &kwv);
        return jj_apply_filter(c, n->s, x, args, n->n_kids, n->kwnames, kwv, n->n_kw, n->line);
    }
    case JN_TEST: {
        jv *x = jj_eval(c, n->a);
        jv **args, **kwv;
        eval_args(c, n, &args, &kwv);
        bool r = jj_apply_test(c, n->s, x, args, n->n_kids, n->line);
        return jv_bool(n->neg ? !r : r);
    }
    case JN_NOT: return jv_bool(!jv_truthy(jj_eval(c, n->a)));
    case JN_NEG: case JN_POS: {
        jv *x = jj_eval(c, n->a);
        if (x->kind == JV_INT || x->kind == JV_BOOL) {
            int64_t i = x->kind == JV_INT ? x->u.i : x->u.b;
            if (n->kind == JN_NEG && i == INT64_MIN) jj_fail(c, n->line, "integer overflow");
            return jv_int(c, n->kind == JN_NEG ? -i : i);
        }
        if (x->kind == JV_FLOAT) return jv_float(c, n->kind == JN_NEG ? -x->u.f : x->u.f);
        jj_fail(c, n->line, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_kind_name(x));
    }
    case JN_BIN: {
        jv *a = jj_eval(c, n->a);
        return jj_binop(c, (jop)n->op, a, jj_eval(c, n->b), n->line);
    }
    case JN_AND: {
        jv *a = jj_eval(c, n->a);
        return jv_truthy(a) ? jj_eval(c, n->b) : a;
    }
    case JN_OR: {
        jv *a = jj_eval(c, n->a);
        return jv_truthy(a) ? a : jj_eval(c, n->b);
    }
    case JN_COND:
        if (jv_truthy(jj_eval(c, n->b))) return jj_eval(c, n->a);
        return n->c ? jj_eval(c, n->c) : &jv_undef_v;
    case JN_CMP: {
        jv *a = jj_eval(c, n->kids[0]);
        for (int i = 1; i < n->n_kids; i++) {
            jv *b = jj_eval(c, n->kids[i]);
            if (!eval_cmp(c, n->ops[i - 1], a, b, n->line)) return &jv_false_v;
            a = b;
        }
        return &jv_true_v;
    }
    default: jj_fail(c, n->line, "internal: node %d is not an expression", n->kind);
    }
}

/* ------------------------------------------------------------------------
 * Statements
 * ---------------------------------------------------------------------- */
static void emit(jj_ctx *c, const jv *v, int line) {
    jv_to_str(c, c->out, v, line);
    if (c->out->n > JJ_MAX_OUTPUT) jj_fail(c, line, "the output grew over %zu MiB", JJ_MAX_OUTPUT >> 20);
}

static void assign(jj_ctx *c, const jnode *t, jv *v, int line) {
    if (t->kind == JN_NAME) {
        frame_set(c, c->frame, t->s, v);
        return;
    }
    if (t->kind == JN_ATTR) {
        jv *ns = jj_eval(c, t->a);
        if (ns->kind != JV_NS) jj_fail(c, line, "cannot assign attribute on non-namespace object");
        jv_dict_set(c, ns, jv_cstr(c, t->s), v);
        return;
    }
    /* tuple unpacking */
    jv *l = jj_iter_list(c, v, line);
    if ((int)l->u.list.n != t->n_kids)
        jj_fail(c, line, "cannot unpack %zu values into %d names", l->u.list.n, t->n_kids);
    for (int i = 0; i < t->n_kids; i++) frame_set(c, c->frame, t->kids[i]->s, l->u.list.items[i]);
}

/* Runs body into a fresh buffer and returns the text. */
static jv *capture(jj_ctx *c, const jnode *body) {
    jj_sb buf = { 0 }, *saved = c->out;
    c->out = &buf;
    jj_exec(c, body);
    c->out = saved;
    return jj_sb_done(c, &buf);
}

static void exec_for(jj_ctx *c, const jnode *n) {
    jv *all = jj_iter_list(c, jj_eval(c, n->a), n->line);
    jj_frame *saved = c->frame;
    c->frame = frame_push(c, saved);
    jv *items = all;
    if (n->d) {   /* the loop's `if` filter runs before the loop, with the target bound */
        items = jv_list(c, all->u.list.n);
        size_t k = 0;
        for (size_t i = 0; i < all->u.list.n; i++) {
            assign(c, n->t, all->u.list.items[i], n->line);
            if (jv_truthy(jj_eval(c, n->d))) items->u.list.items[k++] = all->u.list.items[i];
        }
        items->u.list.n = k;
    }
    if (!items->u.list.n) {
        c->frame = saved;
        if (n->c) jj_exec(c, n->c);
        return;
    }
    jj_loop *lp = jj_alloc(&c->arena, sizeof *lp);
    if (!lp) jj_fail(c, n->line, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    lp->items = items;
    jv *loop = jv_new(c, JV_LOOP);
    loop->u.loop = lp;
    jj_frame *iter = frame_push(c, c->frame);
    for (size_t i = 0; i < items->u.list.n; i++) {
        /* each iteration has its own scope: a set does not reach the next
         * one (the frame is emptied, its arrays reused) */
        iter->n = 0;
        c->frame = iter;
        lp->idx = i;
        assign(c, n->t, items->u.list.items[i], n->line);
        frame_set(c, c->frame, "loop", loop);
        jj_exec(c, n->b);
        if (c->loop_ctl == 1) { c->loop_ctl = 0; break; }
        c->loop_ctl = 0;
    }
    c->frame = saved;
}

void jj_exec(jj_ctx *c, const jnode *n) {
    jj_step(c, n->line);
    switch (n->kind) {
    case JN_BODY:
        for (int i = 0; i < n->n_kids && !c->loop_ctl; i++) jj_exec(c, n->kids[i]);
        return;
    case JN_TEXT:
        jj_sb_put(c, c->out, n->s, n->n, JT_MARKUP);
        if (c->out->n > JJ_MAX_OUTPUT) jj_fail(c, n->line, "the output grew over %zu MiB", JJ_MAX_OUTPUT >> 20);
        return;
    case JN_OUTPUT: emit(c, jj_eval(c, n->a), n->line); return;
    case JN_IF:
        if (jv_truthy(jj_eval(c, n->a))) jj_exec(c, n->b);
        else if (n->c) jj_exec(c, n->c);
        return;
    case JN_FOR: exec_for(c, n); return;
    case JN_SET: assign(c, n->t, jj_eval(c, n->a), n->line); return;
    case JN_SET_BLOCK: {
        jv *v = capture(c, n->b);
        if (n->c) v = apply_filter_node(c, n->c, v);
        frame_set(c, c->frame, n->s, v);
        return;
    }
    case JN_MACRO: {
        jv *m = jv_new(c, JV_MACRO);
        m->u.macro.def = n;
        frame_set(c, c->frame, n->s, m);
        return;
    }
    case JN_FILTER_BLOCK: emit(c, apply_filter_node(c, n->a, capture(c, n->b)), n->line); return;
    case JN_BREAK: c->loop_ctl = 1; return;
    case JN_CONTINUE: c->loop_ctl = 2; return;
    default: emit(c, jj_eval(c, n), n->line); return;
    }
}

jv *jj_call_macro(jj_ctx *c, const jnode *def, jv **args, int n_args, const char **kwn, jv **kwv, int n_kw,
                  int line) {
    if (c->depth >= JJ_MAX_CALL_DEPTH) jj_fail(c, line, "macro calls nested over %d deep", JJ_MAX_CALL_DEPTH);
    if (n_args > def->n_kids)
        jj_fail(c, line, "macro '%s' takes not more than %d argument(s)", def->s, def->n_kids);
    jj_frame *saved = c->frame;
    c->frame = frame_push(c, c->globals);
    bool *given = jj_alloc(&c->arena, (size_t)def->n_kids + 1);
    if (!given) jj_fail(c, line, "the template used more than %zu MiB of memory", JJ_MAX_MEMORY >> 20);
    for (int i = 0; i < n_args; i++) {
        frame_set(c, c->frame, def->kids[i]->s, args[i]);
        given[i] = true;
    }
    for (int k = 0; k < n_kw; k++) {
        int i = 0;
        while (i < def->n_kids && strcmp(def->kids[i]->s, kwn[k])) i++;
        if (i == def->n_kids) jj_fail(c, line, "macro '%s' has no parameter '%s'", def->s, kwn[k]);
        frame_set(c, c->frame, def->kids[i]->s, kwv[k]);
        given[i] = true;
    }
    for (int i = 0; i < def->n_kids; i++)
        if (!given[i])
            frame_set(c, c->frame, def->kids[i]->s, def->defs[i] ? jj_eval(c, def->defs[i]) : jv_undef(c, def->kids[i]->s));
    c->depth++;
    const int ctl = c->loop_ctl;
    c->loop_ctl = 0;
    jv *out = capture(c, def->b);
    c->loop_ctl = ctl;
    c->depth--;
    c->frame = saved;
    return out;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */
sp_jinja *sp_jinja_parse(const char *src, size_t n, sp_err *err) {
    sp_jinja *t = sp_xcalloc(1, sizeof *t);
    t->arena.limit = JJ_MAX_MEMORY;
    jj_toks toks = { 0 };
    if (jj_lex(src, n, &t->arena, &toks, err) || !(t->root = jj_parse(toks.v, toks.n, &t->arena, err))) {
        sp_jinja_free(t);
        return NULL;
    }
    return t;
}

void sp_jinja_free(sp_jinja *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}

void sp_jinja_out_free(sp_jinja_out *o) {
    free(o->text);
    free(o->from_data);
    o->text = NULL;
    o->from_data = NULL;
    o->len = 0;
}

static void bind_vars(jj_ctx *c, json_t *obj, uint8_t taint) {
    if (!obj) return;
    if (!json_is_object(obj)) jj_fail(c, 0, "the template variables are not an object");
    const char *k;
    json_t *x;
    json_object_foreach(obj, k, x) frame_set(c, c->globals, k, jv_from_json(c, x, taint, 0));
}

int sp_jinja_render(const sp_jinja *t, json_t *data, json_t *markup, int64_t now, sp_jinja_out *out,
                    sp_err *err) {
    memset(out, 0, sizeof *out);
    jj_ctx *c = sp_xcalloc(1, sizeof *c);
    c->arena.limit = JJ_MAX_MEMORY;
    c->err = err;
    c->now = now >= 0 ? now : (int64_t)time(NULL);
    jj_sb *buf = sp_xcalloc(1, sizeof *buf);
    int rc = 0;
    if (setjmp(c->fail) == 0) {
        c->globals = frame_push(c, NULL);
        c->frame = c->globals;
        c->out = buf;
        bind_vars(c, data, JT_DATA);
        bind_vars(c, markup, JT_MARKUP);
        jj_exec(c, t->root);
        out->len = buf->n;
        out->text = sp_xmalloc(buf->n + 1);
        if (buf->n) memcpy(out->text, buf->s, buf->n);
        out->text[buf->n] = 0;
        out->from_data = sp_xcalloc(buf->n + 1, 1);
        if (buf->mask) memcpy(out->from_data, buf->mask, buf->n);
    } else rc = -1;
    jj_arena_free(&c->arena);
    free(buf);
    free(c);
    return rc;
}

/*
 * jinja internals: the arena, values, the syntax tree and the renderer's
 * state.  Shared by lex.c, parse.c, value.c, eval.c and builtins.c.
 */
#ifndef SP_JINJA_INTERNAL_H
#define SP_JINJA_INTERNAL_H

#include "jinja/jinja.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on untrusted templates. */
#define JJ_MAX_NEST      100          /* syntax nesting (expressions + statements) */
#define JJ_MAX_CALL_DEPTH 64          /* macro calls in progress */
#define JJ_MAX_STEPS     20000000ull  /* evaluated nodes per render */
#define JJ_MAX_MEMORY    ((size_t)512 << 20)  /* arena bytes per render */
#define JJ_MAX_OUTPUT    ((size_t)64 << 20)   /* rendered bytes */
#define JJ_MAX_RANGE     1000000      /* elements of range() and of str/list * n */

/* ------------------------------------------------------------------------
 * Arena: everything of one parse or one render lives until its end.
 * ---------------------------------------------------------------------- */
typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t used_total, limit;   /* limit 0 = none */
    bool over;                  /* a request went over the limit */
} jj_arena;

void *jj_alloc(jj_arena *a, size_t n);        /* zeroed; NULL when over the limit */
void jj_arena_free(jj_arena *a);

/* ------------------------------------------------------------------------
 * Values.  Immutable once made, except namespaces (set ns.x = ...).
 * ---------------------------------------------------------------------- */
typedef enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,        /* namespace(): a dict with settable attributes */
    JV_FUNC,      /* a global function (raise_exception, range, ...) */
    JV_MACRO,     /* a macro defined by the template */
    JV_METHOD,    /* obj.method, to be called */
    JV_LOOP,      /* the `loop` of a for */
} jv_kind;

typedef struct jv jv;
typedef struct jnode jnode;
typedef struct jj_loop jj_loop;

/* A string's provenance: none of its bytes from data, all, or per byte. */
enum { JT_MARKUP = 0, JT_DATA = 1, JT_MIXED = 2 };

struct jv {
    uint8_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *s; size_t n; uint8_t taint; const uint8_t *mask; } str;
        struct { jv **items; size_t n; bool tuple; } list;
        struct { jv **keys, **vals; size_t n, cap; } dict;   /* insertion order */
        struct { int id; } func;
        struct { const jnode *def; } macro;
        struct { jv *self; const char *name; } method;
        jj_loop *loop;
        const char *undef_name;   /* JV_UNDEF: the name that was missing (NULL if unknown) */
    } u;
};

/* ------------------------------------------------------------------------
 * Syntax tree
 * ---------------------------------------------------------------------- */
typedef enum jn_kind {
    /* statements */
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO,
    JN_FILTER_BLOCK, JN_BREAK, JN_CONTINUE,
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_NOT, JN_NEG, JN_POS, JN_BIN, JN_AND, JN_OR, JN_COND, JN_CMP,
} jn_kind;

typedef enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN,
} jop;

struct jnode {
    uint8_t kind;
    int line;
    /* generic children: a body's statements, a list's items, call args */
    jnode **kids;
    int n_kids;
    /* named parts, by kind:
     *   TEXT: s/n          OUTPUT: a           IF: a cond, b then, c else
     *   FOR: targets (kids of `t`), a iter, b body, c else, d filter
     *   SET: t target (NAME/TUPLE/ATTR), a value
     *   SET_BLOCK: s name, b body, c filter chain (FILTER on a NULL arg)
     *   MACRO: s name, kids params (NAME, with defaults in `defs`), b body
     *   FILTER_BLOCK: a filter chain, b body
     *   LIT: v   NAME: s   LIST/TUPLE: kids   DICT: kids (k, v, k, v, ...)
     *   ATTR: a obj, s name   ITEM: a obj, b index   SLICE: a obj, b/c/d start/stop/step
     *   CALL: a callee, kids args, kwnames/kwvals
     *   FILTER/TEST: a arg, s name, kids args, kwnames/kwvals, neg (TEST)
     *   NOT/NEG/POS: a   BIN/CMP: op, a, b (CMP chains via kids: a op b op ...)
     *   AND/OR: a, b     COND: a value, b cond, c else (may be NULL) */
    jnode *a, *b, *c, *d, *t;
    const char *s;
    size_t n;
    jv *v;
    jnode **defs;
    const char **kwnames;
    jnode **kwvals;
    int n_kw;
    uint8_t op;
    bool neg;
    jop *ops;           /* CMP: n_kids - 1 operators between kids */
};

struct sp_jinja {
    jj_arena arena;
    jnode *root;
};

/* lex.c: the token stream of a template */
typedef enum jt_kind {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF,
} jt_kind;

typedef struct jtok {
    uint8_t kind;
    int line;
    const char *s;     /* NAME/OP/TEXT: the text; STRING: the decoded value */
    size_t n;
    int64_t i;
    double f;
} jtok;

typedef struct jj_toks {
    jtok *v;
    size_t n, cap;
} jj_toks;

int jj_lex(const char *src, size_t n, jj_arena *a, jj_toks *out, sp_err *err);

/* parse.c */
jnode *jj_parse(const jtok *toks, size_t n, jj_arena *a, sp_err *err);
bool jj_filter_known(const char *name);
bool jj_test_known(const char *name);

/* ------------------------------------------------------------------------
 * Rendering state
 * ---------------------------------------------------------------------- */
typedef struct jj_frame jj_frame;
struct jj_frame {
    jj_frame *parent;
    const char **names;
    jv **vals;
    size_t n, cap;
};

struct jj_loop {
    jv *items;          /* the list iterated (after the `if` filter) */
    size_t idx;
    jv *cycle_fn;
};

typedef struct jj_ctx {
    jj_arena arena;
    jj_frame *globals;          /* the variables given and the template's top-level sets */
    jj_frame *frame;            /* the innermost scope */
    struct jj_sb *out;          /* where text goes (a set/filter block or a macro swaps it) */
    int64_t now;
    int depth;                  /* macro calls in progress */
    uint64_t steps;
    int loop_ctl;               /* 1 break, 2 continue pending */
    sp_err *err;
    jmp_buf fail;               /* every error longjmps here once err is set */
} jj_ctx;

/* An error at the line of node n (or 0): sets err and unwinds the render. */
_Noreturn void jj_fail(jj_ctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* value.c */
jv *jv_new(jj_ctx *c, jv_kind k);
extern jv jv_undef_v, jv_none_v, jv_true_v, jv_false_v;
jv *jv_undef(jj_ctx *c, const char *name);
jv *jv_bool(bool b);
jv *jv_int(jj_ctx *c, int64_t i);
jv *jv_float(jj_ctx *c, double f);
jv *jv_str(jj_ctx *c, const char *s, size_t n, uint8_t taint);          /* copies */
jv *jv_cstr(jj_ctx *c, const char *s);                                   /* a literal, markup */
jv *jv_str_sub(jj_ctx *c, const jv *s, size_t off, size_t n);            /* bytes [off, off+n) with their provenance */
jv *jv_list(jj_ctx *c, size_t n);                                        /* n slots to fill */
jv *jv_dict(jj_ctx *c);
void jv_dict_set(jj_ctx *c, jv *d, jv *k, jv *v);
jv *jv_dict_get(const jv *d, const jv *k);                               /* NULL if absent */
jv *jv_dict_gets(const jv *d, const char *k);
jv *jv_from_json(jj_ctx *c, json_t *j, uint8_t taint, int depth);

bool jv_truthy(const jv *v);
bool jv_eq(const jv *a, const jv *b);
int jv_cmp(jj_ctx *c, int line, const jv *a, const jv *b);              /* <0, 0, >0; fails on unorderable */
const char *jv_kind_name(const jv *v);
bool jv_is_num(const jv *v);
double jv_num(const jv *v);

/* str(): the text Python prints; repr(): inside lists/dicts */
typedef struct jj_sb {  /* text with each byte's provenance (mask allocated once data arrives) */
    char *s;
    uint8_t *mask;
    size_t n, cap;
    bool any_data;
} jj_sb;
void jj_sb_put(jj_ctx *c, jj_sb *b, const char *s, size_t n, uint8_t taint);
void jj_sb_putv(jj_ctx *c, jj_sb *b, const jv *s);     /* a JV_STR with its provenance */
void jj_sb_puts(jj_ctx *c, jj_sb *b, const char *s);
jv *jj_sb_done(jj_ctx *c, jj_sb *b);
void jv_to_str(jj_ctx *c, jj_sb *b, const jv *v, int line);
void jv_repr(jj_ctx *c, jj_sb *b, const jv *v, int line);
jv *jv_string(jj_ctx *c, const jv *v, int line);                        /* str(v) as a JV_STR */
void jv_float_repr(double f, char *buf, size_t cap);
void jv_tojson(jj_ctx *c, jj_sb *b, const jv *v, int indent, const char *item_sep,
               const char *key_sep, bool sort_keys, int level, int line);

/* UTF-8 code points */
size_t jj_u8_len(const char *s, size_t n);                               /* code points */
size_t jj_u8_offset(const char *s, size_t n, size_t cp);                 /* byte offset of code point cp (clamped) */
bool jj_is_space_at(const char *s, size_t n, size_t at, size_t *len);   /* Python str.isspace for one code point */

/* eval.c */
jv *jj_eval(jj_ctx *c, const jnode *n);
void jj_exec(jj_ctx *c, const jnode *n);
jv *jj_call_macro(jj_ctx *c, const jnode *def, jv **args, int n_args, const char **kwn, jv **kwv,
                  int n_kw, int line);
jv *jj_iter_list(jj_ctx *c, jv *v, int line);                            /* a list of the items iterated */

/* builtins.c */
enum { JF_RAISE = 1, JF_NAMESPACE, JF_RANGE, JF_STRFTIME, JF_DICT, JF_LOOP_CYCLE, JF_JOINER };
jv *jj_global(jj_ctx *c, const char *name);                              /* NULL if not a global */
jv *jj_call_func(jj_ctx *c, const jv *fn, jv **args, int n, const char **kwn, jv **kwv, int nkw, int line);
jv *jj_call_method(jj_ctx *c, const jv *self, const char *name, jv **args, int n, const char **kwn,
                   jv **kwv, int nkw, int line);
jv *jj_apply_filter(jj_ctx *c, const char *name, jv *x, jv **args, int n, const char **kwn, jv **kwv,
                    int nkw, int line);
bool jj_apply_test(jj_ctx *c, const char *name, jv *x, jv **args, int n, int line);
bool jj_method_known(const char *name);
jv *jj_getattr(jj_ctx *c, jv *obj, const char *name, int line);
jv *jj_getitem(jj_ctx *c, jv *obj, jv *key, int line);
jv *jj_binop(jj_ctx *c, jop op, jv *a, jv *b, int line);

#endif

/*
 * gbnf.c — GBNF text (llama.cpp's dialect) to a compiled sp_grammar.
 *
 * A recursive-descent parser writes every rule as a list of alternatives,
 * each a sequence of elements ended by END.  Groups become generated rules,
 * and so do repetitions, which are expanded the way llama.cpp does it:
 *
 *   x{m,n}  m copies of x, then a chain  q1 ::= x | ;  qj ::= x q(j-1) |
 *   x{m,}   m copies of x, then          s ::= x s |
 *   x* x+ x?   are {0,} {1,} {0,1}
 *
 * Grammars arrive in HTTP requests, so the parser is bounded everywhere:
 * text size, rules, elements (what repetitions expand to), nesting depth
 * (the parser recurses on groups), repetition counts.  Nothing recurses on
 * the number of rules: the left-recursion check keeps its own stack.
 *
 * Newlines: inside parentheses they are plain whitespace.  At the top level
 * a newline ends the rule only if the next non-blank line starts a new
 * "name ::=" (or the text ends): every grammar llama.cpp reads parses the
 * same way, and a rule may also continue on a following line.
 */
#include "grammar/internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GBNF_MAX_TEXT (1u << 20)       /* bytes of grammar text */
#define GBNF_MAX_NAMED 4096            /* rules named in the text */
#define GBNF_MAX_RULES 65536           /* with the generated ones */
#define GBNF_MAX_ELEMS (1u << 20)      /* elements after expanding repetitions */
#define GBNF_MAX_DEPTH 64              /* nested groups */
#define GBNF_MAX_REPEAT 1000           /* m and n of {m,n} */
#define GBNF_MAX_CP 0x10FFFFu
#define GBNF_UNBOUNDED UINT32_MAX

typedef struct prule {
    const char *name;                  /* into the text; NULL if generated */
    size_t name_len;
    size_t at;                         /* definition (or construct) offset */
    size_t ref_at;                     /* first reference, for "undefined" */
    bool defined;
    int owner;                         /* named rule it was generated in */
    sp_gelem *body;
    uint32_t n, cap;
} prule;

typedef struct parser {
    const char *s;
    size_t n, i;
    sp_err *err;
    bool failed;
    prule *rules;
    int n_rules, n_named;
    size_t cap_rules;
    int32_t *ht;                       /* name -> rule + 1 */
    uint32_t ht_cap;
    sp_gclass *classes;
    uint32_t n_classes;
    size_t cap_classes;
    uint32_t *ranges;
    uint32_t n_ranges;                 /* pairs */
    size_t cap_ranges;
    int32_t ascii_class[128];          /* single-character classes, shared */
    int32_t any_class;
    uint64_t total_elems;
    int depth;
    int cur;                           /* the named rule being parsed */
    uint32_t *tmp;                     /* ranges of the class being parsed */
    size_t cap_tmp;
} parser;

/* ------------------------------------------------------------------------
 * Errors and text
 * ---------------------------------------------------------------------- */
static void where(const parser *p, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        unsigned char c = (unsigned char)p->s[k];
        if (c == '\n') { (*line)++; *col = 1; }
        else if ((c & 0xC0) != 0x80) (*col)++;   /* columns count code points */
    }
}

__attribute__((format(printf, 3, 4)))
static void perr(parser *p, size_t at, const char *fmt, ...) {
    if (p->failed) return;                       /* the first error is the cause */
    p->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    where(p, at, &line, &col);
    sp_err_set(p->err, "grammar: line %d, column %d: %s", line, col, msg);
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF):
 * the length of the sequence at s[i], or 0 if invalid. */
static int utf8_decode(const char *s, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s + i;
    size_t left = n - i;
    if (u[0] < 0x80) { *cp = u[0]; return 1; }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || (size_t)len > left) return 0;
    uint32_t c = u[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) return 0;
        c = c << 6 | (u[k] & 0x3F);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (c < min[len] || c > GBNF_MAX_CP || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static int peek(const parser *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* Does a "name ::=" start at offset k? */
static bool rule_starts_at(const parser *p, size_t k) {
    size_t j = k;
    while (j < p->n && is_name_char(p->s[j])) j++;
    if (j == k) return false;
    while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
    return j + 3 <= p->n && memcmp(p->s + j, "::=", 3) == 0;
}

/* Skips blanks and comments, newlines too if nested; at the top level a
 * newline is skipped only when the rule continues on the next line. */
static void skip_ws(parser *p, bool nested) {
    for (;;) {
        while (p->i < p->n) {
            char c = p->s[p->i];
            if (c == ' ' || c == '\t' || (nested && (c == '\r' || c == '\n'))) p->i++;
            else if (c == '#') { while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++; }
            else break;
        }
        if (nested || p->i >= p->n || (p->s[p->i] != '\n' && p->s[p->i] != '\r')) return;
        size_t save = p->i;
        p->i++;
        skip_ws(p, true);                        /* depth 1: nested never recurses */
        if (p->i >= p->n || rule_starts_at(p, p->i)) { p->i = save; return; }
    }
}

/* ------------------------------------------------------------------------
 * Rules, elements, classes
 * ---------------------------------------------------------------------- */
static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < n; k++) h = (h ^ (unsigned char)s[k]) * 1099511628211ull;
    return h;
}

static int new_rule(parser *p, const char *name, size_t len, size_t at) {
    if (p->n_rules >= GBNF_MAX_RULES) {
        perr(p, at, "more than %d rules (groups and repetitions count)", GBNF_MAX_RULES);
        return -1;
    }
    SP_VEC_GROW(p->rules, p->cap_rules, (size_t)p->n_rules + 1);
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = len;
    r->at = r->ref_at = at;
    r->owner = name ? p->n_rules : p->cur;
    return p->n_rules++;
}

static void ht_insert(parser *p, int rule) {
    if (2u * (uint32_t)p->n_named >= p->ht_cap) {
        uint32_t cap = p->ht_cap ? p->ht_cap * 2 : 64;
        int32_t *ht = sp_xcalloc(cap, sizeof *ht);
        for (uint32_t k = 0; k < p->ht_cap; k++) {
            if (!p->ht[k]) continue;
            const prule *r = &p->rules[p->ht[k] - 1];
            uint32_t h = (uint32_t)name_hash(r->name, r->name_len) & (cap - 1);
            while (ht[h]) h = (h + 1) & (cap - 1);
            ht[h] = p->ht[k];
        }
        free(p->ht);
        p->ht = ht;
        p->ht_cap = cap;
    }
    const prule *r = &p->rules[rule];
    uint32_t h = (uint32_t)name_hash(r->name, r->name_len) & (p->ht_cap - 1);
    while (p->ht[h]) h = (h + 1) & (p->ht_cap - 1);
    p->ht[h] = rule + 1;
}

static int find_rule(const parser *p, const char *name, size_t len) {
    if (!p->ht_cap) return -1;
    uint32_t h = (uint32_t)name_hash(name, len) & (p->ht_cap - 1);
    for (; p->ht[h]; h = (h + 1) & (p->ht_cap - 1)) {
        const prule *r = &p->rules[p->ht[h] - 1];
        if (r->name_len == len && memcmp(r->name, name, len) == 0) return p->ht[h] - 1;
    }
    return -1;
}

/* The rule named s[at .. at+len), created (undefined) on first sight. */
static int named_rule(parser *p, size_t at, size_t len) {
    int r = find_rule(p, p->s + at, len);
    if (r >= 0) return r;
    if (p->n_named >= GBNF_MAX_NAMED) {
        perr(p, at, "more than %d named rules", GBNF_MAX_NAMED);
        return -1;
    }
    r = new_rule(p, p->s + at, len, at);
    if (r < 0) return -1;
    p->n_named++;
    ht_insert(p, r);
    return r;
}

static void push_elem(parser *p, int rule, uint32_t type, uint32_t arg) {
    if (p->failed) return;
    if (++p->total_elems > GBNF_MAX_ELEMS) {
        perr(p, p->i, "the grammar expands to more than %u elements (repetitions count)",
             GBNF_MAX_ELEMS);
        return;
    }
    prule *r = &p->rules[rule];
    SP_VEC_GROW(r->body, r->cap, r->n + 1);
    r->body[r->n++] = (sp_gelem){ type, arg };
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

/* Adds the class of the n ranges in p->tmp (sorted and merged here). */
static int32_t add_class(parser *p, size_t n, bool neg) {
    qsort(p->tmp, n, 2 * sizeof(uint32_t), cmp_range);
    size_t w = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t lo = p->tmp[2 * k], hi = p->tmp[2 * k + 1];
        if (w && lo <= p->tmp[2 * (w - 1) + 1] + 1) {
            if (hi > p->tmp[2 * (w - 1) + 1]) p->tmp[2 * (w - 1) + 1] = hi;
        } else {
            p->tmp[2 * w] = lo;
            p->tmp[2 * w + 1] = hi;
            w++;
        }
    }
    SP_VEC_GROW(p->ranges, p->cap_ranges, 2 * ((size_t)p->n_ranges + w));
    memcpy(p->ranges + 2 * (size_t)p->n_ranges, p->tmp, 2 * w * sizeof(uint32_t));
    SP_VEC_GROW(p->classes, p->cap_classes, (size_t)p->n_classes + 1);
    p->classes[p->n_classes] = (sp_gclass){ p->n_ranges, (uint32_t)w, neg };
    p->n_ranges += (uint32_t)w;
    return (int32_t)p->n_classes++;
}

static int32_t single_class(parser *p, uint32_t cp) {
    if (cp < 128 && p->ascii_class[cp] >= 0) return p->ascii_class[cp];
    SP_VEC_GROW(p->tmp, p->cap_tmp, 2);
    p->tmp[0] = p->tmp[1] = cp;
    int32_t c = add_class(p, 1, false);
    if (cp < 128) p->ascii_class[cp] = c;
    return c;
}

/* ------------------------------------------------------------------------
 * Terminals
 * ---------------------------------------------------------------------- */
static bool parse_hex(parser *p, size_t at, int digits, uint32_t *cp) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int c = peek(p);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            perr(p, at, "escape needs %d hex digits", digits);
            return false;
        }
        v = v << 4 | (uint32_t)d;
        p->i++;
    }
    if (v > GBNF_MAX_CP) {
        perr(p, at, "escape U+%X is past U+10FFFF", v);
        return false;
    }
    *cp = v;
    return true;
}

/* One character of a literal or a class, escapes decoded. */
static bool parse_char(parser *p, uint32_t *cp) {
    size_t at = p->i;
    if (p->s[at] != '\\') {
        int len = utf8_decode(p->s, p->n, at, cp);
        assert(len > 0);                         /* the text was validated */
        p->i += (size_t)len;
        return true;
    }
    if (at + 1 >= p->n) {
        perr(p, at, "unfinished escape at the end of the text");
        return false;
    }
    char e = p->s[at + 1];
    p->i += 2;
    switch (e) {
    case 'x': return parse_hex(p, at, 2, cp);
    case 'u': return parse_hex(p, at, 4, cp);
    case 'U': return parse_hex(p, at, 8, cp);
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case 'n': *cp = '\n'; return true;
    case '\\': case '"': case '[': case ']': case '-': *cp = (uint32_t)e; return true;
    default:
        perr(p, at, "unknown escape '\\%c'", e);
        return false;
    }
}

static void parse_literal(parser *p, int rule) {
    size_t start = p->i++;
    for (;;) {
        if (p->i >= p->n) { perr(p, start, "unterminated literal"); return; }
        if (p->s[p->i] == '"') { p->i++; return; }
        uint32_t cp;
        if (!parse_char(p, &cp)) return;
        push_elem(p, rule, SP_GE_CHAR, (uint32_t)single_class(p, cp));
        if (p->failed) return;
    }
}

static void parse_class(parser *p, int rule) {
    size_t start = p->i++;
    bool neg = peek(p) == '^';
    if (neg) p->i++;
    size_t n = 0;
    for (;;) {
        if (p->i >= p->n) { perr(p, start, "unterminated character class"); return; }
        if (p->s[p->i] == ']') { p->i++; break; }
        size_t at = p->i;
        uint32_t lo, hi;
        if (!parse_char(p, &lo)) return;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (!parse_char(p, &hi)) return;
            if (hi < lo) { perr(p, at, "reversed range in a character class"); return; }
        }
        SP_VEC_GROW(p->tmp, p->cap_tmp, 2 * (n + 1));
        p->tmp[2 * n] = lo;
        p->tmp[2 * n + 1] = hi;
        n++;
    }
    if (n == 0) { perr(p, start, "empty character class"); return; }
    push_elem(p, rule, SP_GE_CHAR, (uint32_t)add_class(p, n, neg));
}

/* ------------------------------------------------------------------------
 * Sequences, groups, repetitions
 * ---------------------------------------------------------------------- */
static void parse_alternates(parser *p, int rule, bool nested);

/* {m}, {m,}, {m,n}: the counts; *mx = GBNF_UNBOUNDED for {m,}. */
static bool parse_braces(parser *p, uint32_t *mn, uint32_t *mx) {
    size_t start = p->i++;
    uint32_t v[2] = { 0, 0 };
    int have = 0;
    bool comma = false;
    for (int part = 0; part < 2; part++) {
        skip_ws(p, true);
        size_t d0 = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            v[part] = v[part] * 10 + (uint32_t)(p->s[p->i] - '0');
            if (v[part] > GBNF_MAX_REPEAT) {
                perr(p, d0, "repetition count over %d", GBNF_MAX_REPEAT);
                return false;
            }
            p->i++;
        }
        if (p->i > d0) have |= 1 << part;
        skip_ws(p, true);
        if (part == 0 && peek(p) == ',') { comma = true; p->i++; continue; }
        break;
    }
    if (peek(p) != '}' || !(have & 1)) {
        perr(p, start, "expected {m}, {m,} or {m,n}");
        return false;
    }
    p->i++;
    *mn = v[0];
    *mx = !comma ? v[0] : (have & 2) ? v[1] : GBNF_UNBOUNDED;
    if (*mx < *mn) { perr(p, start, "repetition {%u,%u}: the maximum is below the minimum", *mn, *mx); return false; }
    return true;
}

/* Replaces the elements of `rule` from `start` (the last item) by mn..mx
 * repetitions of them. */
static void repeat(parser *p, int rule, uint32_t start, uint32_t mn, uint32_t mx, size_t at) {
    uint32_t len = p->rules[rule].n - start;
    if (len == 0) return;                        /* "" repeated is still "" */
    sp_gelem sym = p->rules[rule].body[start];
    if (len > 1) {                               /* a multi-element item becomes one rule */
        int g = new_rule(p, NULL, 0, at);
        if (g < 0) return;
        for (uint32_t k = 0; k < len; k++) {
            sp_gelem e = p->rules[rule].body[start + k];
            push_elem(p, g, e.type, e.arg);
        }
        push_elem(p, g, SP_GE_END, 0);
        sym = (sp_gelem){ SP_GE_REF, (uint32_t)g };
    }
    p->total_elems -= len;
    p->rules[rule].n = start;
    for (uint32_t k = 0; k < mn; k++) push_elem(p, rule, sym.type, sym.arg);
    if (mx == GBNF_UNBOUNDED) {
        int s = new_rule(p, NULL, 0, at);
        if (s < 0) return;
        push_elem(p, s, sym.type, sym.arg);
        push_elem(p, s, SP_GE_REF, (uint32_t)s);
        push_elem(p, s, SP_GE_END, 0);
        push_elem(p, s, SP_GE_END, 0);           /* the empty alternative */
        push_elem(p, rule, SP_GE_REF, (uint32_t)s);
    } else if (mx > mn) {
        int prev = -1;
        for (uint32_t k = 0; k < mx - mn && !p->failed; k++) {
            int q = new_rule(p, NULL, 0, at);
            if (q < 0) return;
            push_elem(p, q, sym.type, sym.arg);
            if (prev >= 0) push_elem(p, q, SP_GE_REF, (uint32_t)prev);
            push_elem(p, q, SP_GE_END, 0);
            push_elem(p, q, SP_GE_END, 0);
            prev = q;
        }
        push_elem(p, rule, SP_GE_REF, (uint32_t)prev);
    }
}

static void parse_group(parser *p, int rule) {
    size_t start = p->i++;
    if (++p->depth > GBNF_MAX_DEPTH) {
        perr(p, start, "groups nested deeper than %d", GBNF_MAX_DEPTH);
        return;
    }
    int g = new_rule(p, NULL, 0, start);
    if (g < 0) return;
    skip_ws(p, true);
    parse_alternates(p, g, true);
    if (p->failed) return;
    if (peek(p) != ')') { perr(p, start, "unclosed '('"); return; }
    p->i++;
    p->depth--;
    push_elem(p, rule, SP_GE_REF, (uint32_t)g);
}

static void parse_sequence(parser *p, int rule, bool nested) {
    int64_t last = -1;                           /* where the last item starts */
    while (!p->failed) {
        int c = peek(p);
        uint32_t here = p->rules[rule].n;
        size_t at = p->i;
        if (c == '"') { last = here; parse_literal(p, rule); }
        else if (c == '[') { last = here; parse_class(p, rule); }
        else if (c == '.') {
            last = here;
            p->i++;
            if (p->any_class < 0) {
                SP_VEC_GROW(p->tmp, p->cap_tmp, 2);
                p->tmp[0] = 0;
                p->tmp[1] = GBNF_MAX_CP;
                p->any_class = add_class(p, 1, false);
            }
            push_elem(p, rule, SP_GE_CHAR, (uint32_t)p->any_class);
        } else if (c == '(') { last = here; parse_group(p, rule); }
        else if (c >= 0 && is_name_char((char)c)) {
            last = here;
            while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
            int r = named_rule(p, at, p->i - at);
            if (r >= 0) push_elem(p, rule, SP_GE_REF, (uint32_t)r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) { perr(p, at, "'%c' has nothing to repeat", c); return; }
            uint32_t mn = c == '+', mx = c == '?' ? 1 : GBNF_UNBOUNDED;
            if (c == '{') {
                if (!parse_braces(p, &mn, &mx)) return;
            } else {
                p->i++;
            }
            repeat(p, rule, (uint32_t)last, mn, mx, at);
        } else {
            return;
        }
        skip_ws(p, nested);
    }
}

static void parse_alternates(parser *p, int rule, bool nested) {
    parse_sequence(p, rule, nested);
    push_elem(p, rule, SP_GE_END, 0);
    while (!p->failed && peek(p) == '|') {
        p->i++;
        skip_ws(p, nested);
        parse_sequence(p, rule, nested);
        push_elem(p, rule, SP_GE_END, 0);
    }
}

static void parse_rule(parser *p) {
    size_t at = p->i;
    while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
    if (p->i == at) {
        perr(p, at, "expected a rule name");
        return;
    }
    size_t len = p->i - at;
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t')) p->i++;
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0) {
        perr(p, p->i, "expected '::=' after the rule name");
        return;
    }
    p->i += 3;
    int r = named_rule(p, at, len);
    if (r < 0) return;
    if (p->rules[r].defined) {
        int line, col;
        where(p, p->rules[r].at, &line, &col);
        perr(p, at, "rule '%.*s' is already defined (line %d)", (int)len, p->s + at, line);
        return;
    }
    p->rules[r].defined = true;
    p->rules[r].at = at;
    p->cur = r;
    skip_ws(p, false);
    parse_alternates(p, r, false);
    if (p->failed) return;
    int c = peek(p);
    if (c >= 0 && c != '\n' && c != '\r') perr(p, p->i, "unexpected '%c'", c);
}

/* ------------------------------------------------------------------------
 * Checks on the whole grammar
 * ---------------------------------------------------------------------- */
/* Flattens the rule bodies into g (elements, alternative starts). */
static void flatten(parser *p, sp_grammar *g) {
    g->n_rules = p->n_rules;
    g->n_elems = (uint32_t)p->total_elems;
    g->elems = sp_xmalloc(((size_t)g->n_elems + 1) * sizeof *g->elems);
    g->rule_alts = sp_xmalloc(((size_t)p->n_rules + 1) * sizeof *g->rule_alts);
    size_t n_alts = 0;
    for (int r = 0; r < p->n_rules; r++)
        for (uint32_t k = 0; k < p->rules[r].n; k++) n_alts += p->rules[r].body[k].type == SP_GE_END;
    g->alt_start = sp_xmalloc((n_alts + 1) * sizeof *g->alt_start);
    uint32_t w = 0, a = 0;
    for (int r = 0; r < p->n_rules; r++) {
        const prule *pr = &p->rules[r];
        g->rule_alts[r] = a;
        bool starting = true;
        for (uint32_t k = 0; k < pr->n; k++) {
            if (starting) g->alt_start[a++] = w;
            starting = pr->body[k].type == SP_GE_END;
            g->elems[w++] = pr->body[k];
        }
        assert(starting);                        /* every alternative ends with END */
    }
    g->rule_alts[p->n_rules] = a;
    assert(w == g->n_elems && a == n_alts);
}

/* Rejects left recursion: a rule that can reach itself through a prefix
 * that matches the empty string (the matcher would push forever).  One
 * depth-first walk also computes which rules are nullable, llama.cpp's
 * criterion.  Iterative: chains of rules may be long. */
static void check_left_recursion(parser *p, const sp_grammar *g) {
    typedef struct { uint32_t rule, alt, elem; } frame;
    int nr = g->n_rules;
    uint8_t *state = sp_xcalloc((size_t)nr, 1);  /* 0 new, 1 on the stack, 2 done */
    uint8_t *nullable = sp_xcalloc((size_t)nr, 1);
    frame *st = sp_xmalloc((size_t)nr * sizeof *st);
    for (int r0 = 0; r0 < nr && !p->failed; r0++) {
        if (state[r0]) continue;
        int top = 0;
        st[0] = (frame){ (uint32_t)r0, 0, 0 };
        state[r0] = 1;
        while (top >= 0 && !p->failed) {
            frame *f = &st[top];
            uint32_t a0 = g->rule_alts[f->rule], na = g->rule_alts[f->rule + 1] - a0;
            if (f->alt == na) {
                state[f->rule] = 2;
                top--;
                continue;
            }
            sp_gelem e = g->elems[g->alt_start[a0 + f->alt] + f->elem];
            if (e.type == SP_GE_END) { nullable[f->rule] = 1; f->alt++; f->elem = 0; }
            else if (e.type == SP_GE_CHAR) { f->alt++; f->elem = 0; }
            else if (state[e.arg] == 1) {
                const prule *who = &p->rules[p->rules[e.arg].owner];
                perr(p, p->rules[e.arg].at,
                     "left recursion: rule '%.*s' can reach itself without consuming input",
                     (int)who->name_len, who->name);
            } else if (state[e.arg] == 2) {
                if (nullable[e.arg]) f->elem++;
                else { f->alt++; f->elem = 0; }
            } else {
                state[e.arg] = 1;
                st[++top] = (frame){ e.arg, 0, 0 };
            }
        }
    }
    free(st);
    free(nullable);
    free(state);
}

static bool check_defined(parser *p) {
    for (int r = 0; r < p->n_rules; r++) {
        const prule *pr = &p->rules[r];
        if (pr->name && !pr->defined) {
            perr(p, pr->ref_at, "undefined rule '%.*s'", (int)pr->name_len, pr->name);
            return false;
        }
    }
    int root = find_rule(p, "root", 4);
    if (root < 0) {
        perr(p, 0, "no rule named \"root\" (the start rule)");
        return false;
    }
    return true;
}

static void parser_free(parser *p) {
    for (int r = 0; r < p->n_rules; r++) free(p->rules[r].body);
    free(p->rules);
    free(p->ht);
    free(p->classes);
    free(p->ranges);
    free(p->tmp);
}

sp_grammar *sp_grammar_parse(const char *text, size_t len, sp_err *err) {
    if (!text && len) { sp_err_set(err, "grammar: no text"); return NULL; }
    if (len > GBNF_MAX_TEXT) {
        sp_err_set(err, "grammar: %zu bytes, over the limit of %u", len, GBNF_MAX_TEXT);
        return NULL;
    }
    parser p = { .s = text, .n = len, .err = err, .any_class = -1, .cur = -1 };
    memset(p.ascii_class, -1, sizeof p.ascii_class);
    for (size_t k = 0; k < len;) {
        uint32_t cp;
        int l = utf8_decode(text, len, k, &cp);
        if (!l) { perr(&p, k, "invalid UTF-8"); return NULL; }
        k += (size_t)l;
    }
    skip_ws(&p, true);
    while (!p.failed && p.i < p.n) {
        parse_rule(&p);
        skip_ws(&p, true);
    }
    sp_grammar *g = NULL;
    if (!p.failed && check_defined(&p)) {
        g = sp_xcalloc(1, sizeof *g);
        flatten(&p, g);
        g->root = (uint32_t)find_rule(&p, "root", 4);
        check_left_recursion(&p, g);
        g->classes = p.classes;
        g->n_classes = p.n_classes;
        g->ranges = p.ranges;
        p.classes = NULL;
        p.ranges = NULL;
        if (p.failed) { sp_grammar_free(g); g = NULL; }
    }
    parser_free(&p);
    return g;
}

void sp_grammar_free(sp_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alts);
    free(g->classes);
    free(g->ranges);
    free(g);
}

int sp_grammar_n_rules(const sp_grammar *g) { return g->n_rules; }

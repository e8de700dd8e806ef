/*
 * BPE pre-tokenizer: splits text into words with the regular expressions
 * llama.cpp uses for each `tokenizer.ggml.pre` value, run by PCRE2 in UTF +
 * UCP mode (so \p{L}, \p{N}, \p{P} use PCRE2's Unicode tables).
 *
 * Semantics follow llama.cpp's unicode_regex_split: the patterns are applied
 * in order; each one splits every segment left by the previous one into its
 * matches AND the unmatched gaps between them (nothing is ever dropped), and
 * a match never looks beyond its segment.  "\s" is written as
 * \p{White_Space}, the set Python's `regex` \s gives and llama.cpp's
 * whitespace table was generated from (PCRE2's own UCP \s lacks U+0085).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/internal.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS "\\p{White_Space}"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"
#define CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static const char PT_GPT2[] = CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS
                              "]+(?![^" WS "])";
static const char PT_LLAMA3[] = CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
                                "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS
                                "])|[" WS "]+";
static const char PT_QWEN2[] = CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
                               "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS
                               "])|[" WS "]+";

typedef struct pt_set {
    const char *name;           /* canonical name */
    const char *patterns[SP_PRETOK_MAX];
    bool ignore_merges;
} pt_set;

static const pt_set PT_SETS[] = {
    { "default", { "[\\p{P}$+<=>^~|]+", PT_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" }, false },
    { "smollm", { "\\p{N}", PT_GPT2 }, false },     /* digits one by one, then GPT-2 */
    { "gpt2", { PT_GPT2 }, false },
    { "llama3", { PT_LLAMA3 }, true },
    { "qwen2", { PT_QWEN2 }, false },
};

/* tokenizer.ggml.pre values (as llama.cpp names them) -> pattern set. */
static const struct { const char *pre, *set; } PT_ALIASES[] = {
    { "default", "default" },
    { "smollm", "smollm" }, { "starcoder", "smollm" }, { "refact", "smollm" },
    { "command-r", "smollm" }, { "codeshell", "smollm" }, { "exaone", "smollm" },
    { "minerva-7b", "smollm" },
    { "gpt2", "gpt2" }, { "gpt-2", "gpt2" }, { "phi-2", "gpt2" }, { "mpt", "gpt2" },
    { "olmo", "gpt2" }, { "jais", "gpt2" },
    { "llama3", "llama3" }, { "llama-v3", "llama3" }, { "llama-bpe", "llama3" },
    { "falcon3", "llama3" },
    { "qwen2", "qwen2" }, { "deepseek-r1-qwen", "qwen2" }, { "stablelm2", "qwen2" },
    { "megrez", "qwen2" },
};

static const pt_set *pt_find(const char *pre) {
    for (size_t i = 0; i < sizeof PT_ALIASES / sizeof PT_ALIASES[0]; i++) {
        if (strcmp(PT_ALIASES[i].pre, pre) != 0) continue;
        for (size_t k = 0; k < sizeof PT_SETS / sizeof PT_SETS[0]; k++)
            if (strcmp(PT_SETS[k].name, PT_ALIASES[i].set) == 0) return &PT_SETS[k];
    }
    return NULL;
}

static int pt_unknown(const char *pre, sp_err *err) {
    char list[400];
    size_t o = 0;
    for (size_t i = 0; i < sizeof PT_ALIASES / sizeof PT_ALIASES[0] && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", PT_ALIASES[i].pre);
    return sp_err_set(err, "unsupported BPE pre-tokenizer '%s' (tokenizer.ggml.pre); supported: %s",
                      pre, list);
}

int sp_pretok_init(sp_pretok *p, const char *pre, sp_err *err) {
    memset(p, 0, sizeof *p);
    if (!pre || !*pre) {
        sp_info("tokenizer: no tokenizer.ggml.pre in the file, using the 'default' pre-tokenizer "
                "(tokenization may not match the model's training)\n");
        pre = "default";
    }
    const pt_set *set = pt_find(pre);
    if (!set) return pt_unknown(pre, err);
    snprintf(p->name, sizeof p->name, "%s", pre);
    p->ignore_merges = set->ignore_merges;
    for (int i = 0; i < SP_PRETOK_MAX && set->patterns[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)set->patterns[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(ec, msg, sizeof msg);
            sp_pretok_free(p);
            return sp_err_set(err, "pre-tokenizer '%s': pattern %d does not compile at %zu: %s", pre,
                              i, (size_t)eo, (const char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: plain matching if JIT is unavailable */
        p->re[p->n++] = re;
    }
    return 0;
}

void sp_pretok_free(sp_pretok *p) {
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    p->n = 0;
}

/* ------------------------------------------------------------------------
 * Splitting
 * ---------------------------------------------------------------------- */
typedef struct pt_list {
    sp_span *v;
    uint32_t n, cap;
} pt_list;

static void pt_push(pt_list *l, uint32_t start, uint32_t len) {
    if (len == 0) return;
    SP_VEC_GROW(l->v, l->cap, l->n + 1);
    l->v[l->n++] = (sp_span){ start, len };
}

/* The subject PCRE2 sees: valid UTF-8 of the code points, with surrogates
 * (which llama.cpp's lenient decoder lets through) shown as U+FFFD, a
 * character of the same classes (not a letter, number or space).
 * cp_at[b] is the code point index that starts at byte b. */
typedef struct pt_subject {
    char *s;
    uint32_t *off;      /* n + 1 byte offsets */
    uint32_t *cp_at;    /* bytes + 1 entries */
} pt_subject;

static void pt_subject_build(pt_subject *sj, const uint32_t *cps, uint32_t n) {
    sj->s = sp_xmalloc((size_t)n * 4 + 1);
    sj->off = sp_xmalloc(((size_t)n + 1) * sizeof *sj->off);
    uint32_t b = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cp = cps[i];
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
        sj->off[i] = b;
        b += (uint32_t)sp_utf8_encode(cp, sj->s + b);
    }
    sj->off[n] = b;
    sj->cp_at = sp_xmalloc(((size_t)b + 1) * sizeof *sj->cp_at);
    for (uint32_t i = 0; i <= n; i++) sj->cp_at[sj->off[i]] = i;
}

static void pt_subject_free(pt_subject *sj) {
    free(sj->s);
    free(sj->off);
    free(sj->cp_at);
}

/* Splits one segment with one pattern into matches and gaps. */
static int pt_split_span(const pcre2_code *re, pcre2_match_data *md, const pt_subject *sj,
                         sp_span sp, pt_list *out, sp_err *err) {
    uint32_t b0 = sj->off[sp.start], b1 = sj->off[sp.start + sp.len];
    PCRE2_SPTR subj = (PCRE2_SPTR)(sj->s + b0);
    PCRE2_SIZE len = b1 - b0, pos = 0, prev = 0;
    while (pos < len) {
        int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return sp_err_set(err, "pre-tokenizer: regex match failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* empty match (no pattern here has one): step over a character */
            if (ov[0] >= len) break;
            pos = ov[0] + sp_utf8_len((unsigned char)subj[ov[0]]);
            continue;
        }
        uint32_t ms = sj->cp_at[b0 + ov[0]], me = sj->cp_at[b0 + ov[1]];
        uint32_t ps = sj->cp_at[b0 + prev];
        pt_push(out, ps, ms - ps);
        pt_push(out, ms, me - ms);
        prev = pos = ov[1];
    }
    uint32_t ps = sj->cp_at[b0 + prev];
    pt_push(out, ps, sp.start + sp.len - ps);
    return 0;
}

int sp_pretok_split(const sp_pretok *p, const uint32_t *cps, uint32_t n, sp_span **out,
                    uint32_t *n_out, sp_err *err) {
    pt_list cur = { 0 };
    pt_push(&cur, 0, n);
    if (n == 0 || p->n == 0) goto done;
    pt_subject sj;
    pt_subject_build(&sj, cps, n);
    int rc = 0;
    for (int r = 0; r < p->n && rc == 0; r++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (!md) { rc = sp_err_set(err, "pre-tokenizer: out of memory"); break; }
        pt_list next = { 0 };
        for (uint32_t i = 0; i < cur.n && rc == 0; i++)
            rc = pt_split_span(p->re[r], md, &sj, cur.v[i], &next, err);
        pcre2_match_data_free(md);
        free(cur.v);
        cur = next;
    }
    pt_subject_free(&sj);
    if (rc) { free(cur.v); return -1; }
done:
    *out = cur.v;
    *n_out = cur.n;
    return 0;
}

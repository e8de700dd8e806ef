/*
 * Text -> ids: the special-token pass, then BPE or SentencePiece on each
 * stretch of raw text between special tokens.
 *
 * The special-token pass reproduces llama.cpp's tokenizer_st_partition:
 * special tokens are tried longest first, and each one claims its leftmost
 * non-overlapping occurrences in the text not yet claimed by a longer one.
 * User-defined tokens (Gemma's "\n\n", "  ", "<table>", ...) are always
 * matched; control and unknown tokens only with parse_special.  Tokens of
 * equal length are tried together, left to right (llama.cpp tries them one
 * after another in an unspecified order; the two differ only if two
 * equal-length special texts overlap in the input, which no known
 * vocabulary allows).
 *
 * Cost: one pass over the text per distinct special-token length, with a
 * first-byte filter, then O(n log n) merging: long prompts stay fast.
 */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

/* Marks special tokens in text[0..n): returns a malloc'd array where
 * match[p] is the id of the special token starting at p or -1, or NULL if
 * there are none. */
static int32_t *tk_partition(const sp_tokenizer *t, const char *text, size_t n, bool parse_special,
                             const uint8_t *plain) {
    uint8_t want = parse_special ? 3 : 1;
    const unsigned char *s = (const unsigned char *)text;
    int32_t *match = NULL;
    uint8_t *taken = NULL;
    for (int li = 0; li < t->n_special_lens; li++) {
        size_t L = t->special_lens[li];
        if (L > n) continue;
        for (size_t p = 0; p + L <= n; p++) {
            if (!(t->special_first[s[p]] & want)) continue;
            if (taken && (taken[p] || taken[p + L - 1])) continue;
            int32_t id = sp_strmap_get(&t->tok_map, text + p, L);
            if (id < 0 || !(t->attr[id] & SP_TA_SPECIAL)) continue;
            if (!parse_special && (t->attr[id] & (SP_TA_CONTROL | SP_TA_UNKNOWN))) continue;
            /* message text: as parse_special = false there (user-defined tokens still match) */
            if (plain && (t->attr[id] & (SP_TA_CONTROL | SP_TA_UNKNOWN)) && memchr(plain + p, 1, L)) continue;
            if (!match) {
                match = sp_xmalloc(n * sizeof *match);
                for (size_t i = 0; i < n; i++) match[i] = -1;
                taken = sp_xcalloc(n, 1);
            }
            match[p] = id;
            memset(taken + p, 1, L);
            p += L - 1;
        }
    }
    free(taken);
    return match;
}

/* One stretch of raw text.  Every stretch is either the first or follows a
 * special token, and llama.cpp prefixes both with a space when the SPM
 * vocabulary asks for add_space_prefix. */
static int tk_raw(const sp_tokenizer *t, const char *text, size_t len, sp_tokens *out,
                  sp_err *err) {
    if (len == 0) return 0;
    if (t->kind == SP_TOK_BPE) return sp_bpe_tokenize(t, text, len, out, err);
    return sp_spm_tokenize(t, text, len, t->add_space_prefix, out, err);
}

static int tk_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                       bool parse_special, const uint8_t *plain, sp_tokens *out, sp_err *err) {
    if (!text && len) return sp_err_set(err, "tokenize: NULL text");
    if (add_bos && t->bos >= 0) sp_tokens_push(out, t->bos);
    if (len == 0) return 0;
    int32_t *match = tk_partition(t, text, len, parse_special, plain);
    size_t raw = 0, p = 0;
    int rc = 0;
    while (match && p < len && rc == 0) {
        if (match[p] < 0) { p++; continue; }
        rc = tk_raw(t, text + raw, p - raw, out, err);
        sp_tokens_push(out, match[p]);
        p += t->len[match[p]];
        raw = p;
    }
    if (rc == 0) rc = tk_raw(t, text + raw, len - raw, out, err);
    free(match);
    if (rc) sp_err_prefix(err, "tokenize");
    return rc;
}

int sp_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, sp_tokens *out, sp_err *err) {
    return tk_tokenize(t, text, len, add_bos, parse_special, NULL, out, err);
}

int sp_tokenize_masked(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                       const uint8_t *plain, sp_tokens *out, sp_err *err) {
    return tk_tokenize(t, text, len, add_bos, true, plain, out, err);
}

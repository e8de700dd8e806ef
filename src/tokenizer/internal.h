/*
 * tokenizer/internal.h — private to the tokenizer layer (the .c files in src/tokenizer).
 *
 * Nothing outside src/tokenizer/ includes this file; the layer's interface is
 * tokenizer.h.  It holds the tokenizer object and the helpers the algorithm
 * files (vocab, pretok, bpe, spm, tokenize, piece, detok) share.
 */
#ifndef SP_TOKENIZER_INTERNAL_H
#define SP_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <assert.h>

/* ------------------------------------------------------------------------
 * Token attributes (bit flags), as llama.cpp derives them from
 * tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte; 0 or anything else: undefined = no bits).
 * ---------------------------------------------------------------------- */
enum {
    SP_TA_UNKNOWN = 1 << 0,
    SP_TA_UNUSED = 1 << 1,
    SP_TA_NORMAL = 1 << 2,
    SP_TA_CONTROL = 1 << 3,
    SP_TA_USER = 1 << 4,
    SP_TA_BYTE = 1 << 5,
};
/* Tokens the special-token pass may match in raw text. */
#define SP_TA_SPECIAL (SP_TA_CONTROL | SP_TA_USER | SP_TA_UNKNOWN)

/* ------------------------------------------------------------------------
 * String -> int32 hash map over borrowed keys (the keys live in the GGUF
 * mapping).  Open addressing, power-of-two table, FNV-1a + splitmix.
 * ---------------------------------------------------------------------- */
typedef struct sp_strmap_ent {
    const char *key;    /* borrowed */
    uint32_t len;
    uint32_t hash;
    int32_t val;
} sp_strmap_ent;

typedef struct sp_strmap {
    sp_strmap_ent *ents;    /* owned, n used of cap */
    uint32_t n, cap;
    uint32_t *slots;        /* owned; entry index + 1, 0 = empty */
    uint64_t mask;
} sp_strmap;

/* Sized for `expected` entries (it never grows past that: callers know the count). */
void sp_strmap_init(sp_strmap *m, uint32_t expected);
void sp_strmap_free(sp_strmap *m);
/* Inserts key -> val.  If the key is already present nothing changes and the
 * existing value is returned; otherwise returns -1.  At most `expected` keys. */
int32_t sp_strmap_put(sp_strmap *m, const char *key, uint32_t len, int32_t val);
/* Value of key, or -1. */
int32_t sp_strmap_get(const sp_strmap *m, const char *key, size_t len);
/* Value of the key "a b" (a, one space, b) without building it, or -1. */
int32_t sp_strmap_get_pair(const sp_strmap *m, const char *a, size_t an, const char *b,
                           size_t bn);

/* ------------------------------------------------------------------------
 * UTF-8 helpers.
 * ---------------------------------------------------------------------- */
/* Length of the UTF-8 sequence announced by lead byte c (1 for continuation
 * and invalid bytes), from the high nibble — llama.cpp's unicode_len_utf8. */
static inline size_t sp_utf8_len(unsigned char c) {
    static const unsigned char lookup[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return lookup[c >> 4];
}
/* Decodes one code point at s[*i] (s has n bytes) with llama.cpp's lenient
 * rules: the lead byte decides the length, continuation bytes must be
 * 10xxxxxx, overlong forms and surrogates are accepted.  Anything else (and
 * values above U+10FFFF) gives U+FFFD and consumes one byte. */
uint32_t sp_utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i);
/* Encodes cp (<= 0x10FFFF; surrogates encoded like any other value) into
 * out (4 bytes); returns the byte count. */
size_t sp_utf8_encode(uint32_t cp, char *out);
/* Classifies the sequence at s[0..n) (n >= 1) under strict UTF-8 (no
 * overlongs, surrogates or values above U+10FFFF): returns its length 1..4
 * if complete and valid; -k if all k = n available bytes are a valid but
 * incomplete start; 0 if invalid, with *bad = the length of the maximal
 * invalid subpart (>= 1) to replace by one U+FFFD. */
int sp_utf8_check(const unsigned char *s, size_t n, size_t *bad);

/* GPT-2 byte-level mapping: byte -> code point (0..323) and back. */
typedef struct sp_bytemap {
    uint16_t byte_to_cp[256];
    int16_t cp_to_byte[324];    /* -1 for code points that are not byte images */
} sp_bytemap;
void sp_bytemap_init(sp_bytemap *m);

/* ------------------------------------------------------------------------
 * Pre-tokenizer (BPE): an ordered list of PCRE2 patterns applied in sequence,
 * each splitting every segment produced by the previous one.
 * ---------------------------------------------------------------------- */
#define SP_PRETOK_MAX 4
typedef struct sp_pretok {
    char name[32];              /* the canonical pre name, e.g. "smollm" */
    int n;
    void *re[SP_PRETOK_MAX];    /* pcre2_code_8 *, owned */
    bool ignore_merges;         /* a word that is a whole token skips BPE (llama3) */
} sp_pretok;

/* Compiles the patterns for tokenizer.ggml.pre == pre (NULL or "" -> the
 * "default" set, with a warning).  -1 + err listing the supported names for
 * an unknown pre. */
int sp_pretok_init(sp_pretok *p, const char *pre, sp_err *err);
void sp_pretok_free(sp_pretok *p);

/* One segment of a pre-tokenized text: code points [start, start + len). */
typedef struct sp_span {
    uint32_t start, len;
} sp_span;

/* Splits the code points cps[0..n) into words.  *out is a malloc'd array
 * owned by the caller (*n_out entries).  -1 + err on a regex engine error. */
int sp_pretok_split(const sp_pretok *p, const uint32_t *cps, uint32_t n, sp_span **out,
                    uint32_t *n_out, sp_err *err);

/* ------------------------------------------------------------------------
 * The tokenizer.
 * ---------------------------------------------------------------------- */
struct sp_tokenizer {
    sp_tok_kind kind;
    char kind_name[80];
    int32_t n_vocab;

    /* per token (n_vocab entries, owned arrays; the text is borrowed) */
    const char **text;
    uint32_t *len;
    float *score;
    uint8_t *attr;              /* SP_TA_* */
    uint8_t *eog;               /* 1 if the token ends generation */
    uint32_t max_len;           /* longest token text */

    sp_strmap tok_map;          /* text -> id */

    /* BPE */
    sp_strmap merge_map;        /* "left right" -> rank */
    sp_pretok pre;
    sp_bytemap bytes;

    /* byte fallback: id of the token standing for each byte, or -1
     * (SPM: "<0xXX>", else the 1-byte text; BPE: the byte's GPT-2 image) */
    int32_t byte_tok[256];

    /* special tokens */
    int32_t bos, eos, unk, eot, eom, sep, pad;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos, add_space_prefix;

    /* special-token matching in raw text: the distinct text lengths of
     * SP_TA_SPECIAL tokens, longest first, and which bytes can start one */
    uint32_t *special_lens;
    int n_special_lens;
    uint8_t special_first[256];   /* bit 0: a user-defined token starts with it,
                                     bit 1: a control/unknown token does */
};

/* Appends the ids of one raw fragment (no special tokens in it). */
int sp_bpe_tokenize(const sp_tokenizer *t, const char *text, size_t len, sp_tokens *out,
                    sp_err *err);
/* add_prefix: prepend a space (llama.cpp's add_space_prefix after a special). */
int sp_spm_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_prefix,
                    sp_tokens *out, sp_err *err);

/* Binary heap of merge candidates: the largest prio first, then the smallest
 * left index (BPE uses prio = -rank, SPM prio = score). */
typedef struct sp_bigram {
    double prio;
    int32_t left, right;
    uint32_t size;          /* bytes of left + right when queued */
} sp_bigram;
typedef struct sp_bigram_heap {
    sp_bigram *v;
    size_t n, cap;
} sp_bigram_heap;
void sp_heap_push(sp_bigram_heap *h, sp_bigram b);
sp_bigram sp_heap_pop(sp_bigram_heap *h);   /* h->n > 0 */

/* Symbols of a word being merged: a doubly linked list over byte ranges. */
typedef struct sp_symbol {
    int32_t prev, next;
    uint32_t start, n;      /* n == 0: merged into its left neighbour */
} sp_symbol;

#endif /* SP_TOKENIZER_INTERNAL_H */

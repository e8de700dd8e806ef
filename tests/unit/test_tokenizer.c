/*
 * Unit tests for the tokenizer layer on tiny synthetic vocabularies, built
 * as GGUF files in memory (no model needed): BPE merges by rank, the
 * pre-tokenizers, SentencePiece merges by score, byte fallback, special
 * tokens, pieces, incremental detokenization of split UTF-8, chat
 * templates, bad vocabularies, and long inputs.
 */
#include "test_util.h"
#include "tokenizer/tokenizer.h"

/* ------------------------------------------------------------------------
 * A GGUF writer (metadata only)
 * ---------------------------------------------------------------------- */
typedef struct gb {
    uint8_t *b;
    size_t n, cap;
    uint64_t n_kv;
} gb;

static void gb_put(gb *g, const void *p, size_t n) {
    if (n == 0) return;
    if (g->n + n > g->cap) {
        while (g->n + n > g->cap) g->cap = g->cap ? g->cap * 2 : 4096;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void gb_u32(gb *g, uint32_t v) { gb_put(g, &v, 4); }
static void gb_u64(gb *g, uint64_t v) { gb_put(g, &v, 8); }
static void gb_strn(gb *g, const char *s, size_t n) { gb_u64(g, n); gb_put(g, s, n); }
static void gb_key(gb *g, const char *key, uint32_t type) {
    gb_strn(g, key, strlen(key));
    gb_u32(g, type);
    g->n_kv++;
}
static void kv_str(gb *g, const char *key, const char *v) {
    gb_key(g, key, SP_GGUF_STRING);
    gb_strn(g, v, strlen(v));
}
static void kv_u32(gb *g, const char *key, uint32_t v) { gb_key(g, key, SP_GGUF_UINT32); gb_u32(g, v); }
static void kv_bool(gb *g, const char *key, bool v) {
    uint8_t b = v;
    gb_key(g, key, SP_GGUF_BOOL);
    gb_put(g, &b, 1);
}
static void kv_strs(gb *g, const char *key, const char *const *v, int n) {
    gb_key(g, key, SP_GGUF_ARRAY);
    gb_u32(g, SP_GGUF_STRING);
    gb_u64(g, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_strn(g, v[i], strlen(v[i]));
}
static void kv_f32s(gb *g, const char *key, const float *v, int n) {
    gb_key(g, key, SP_GGUF_ARRAY);
    gb_u32(g, SP_GGUF_FLOAT32);
    gb_u64(g, (uint64_t)n);
    gb_put(g, v, (size_t)n * 4);
}
static void kv_i32s(gb *g, const char *key, const int32_t *v, int n) {
    gb_key(g, key, SP_GGUF_ARRAY);
    gb_u32(g, SP_GGUF_INT32);
    gb_u64(g, (uint64_t)n);
    gb_put(g, v, (size_t)n * 4);
}

/* Header + metadata; the result is malloc'd (owned by the caller). */
static uint8_t *gb_finish(gb *g, size_t *size) {
    gb out = { 0 };
    gb_put(&out, "GGUF", 4);
    gb_u32(&out, 3);
    gb_u64(&out, 0);
    gb_u64(&out, g->n_kv);
    gb_put(&out, g->b, g->n);
    free(g->b);
    *size = out.n;
    return out.b;
}

/* A vocabulary under test: the GGUF bytes, the handle and the tokenizer. */
typedef struct vocab {
    uint8_t *mem;
    sp_gguf *g;
    sp_tokenizer *t;
    sp_err err;
} vocab;

/* Opens g as a tokenizer; returns false (err set) if loading fails. */
static bool vocab_open(vocab *v, gb *g) {
    size_t size;
    memset(v, 0, sizeof *v);
    v->mem = gb_finish(g, &size);
    v->g = sp_gguf_open_memory(v->mem, size, &v->err);
    assert_non_null(v->g);
    v->t = sp_tokenizer_load(v->g, &v->err);
    return v->t != NULL;
}

static void vocab_close(vocab *v) {
    sp_tokenizer_free(v->t);
    sp_gguf_close(v->g);
    free(v->mem);
}

static int32_t id_of(const vocab *v, const char *s) {
    int32_t id = sp_tokenizer_find(v->t, s);
    if (id < 0) fail_msg("token '%s' not in the test vocabulary", s);
    return id;
}

/* Tokenizes s and compares with the expected token texts (NULL-ended). */
static void expect_tokens(const vocab *v, const char *s, size_t len, bool special, ...) {
    sp_tokens got = { 0 };
    sp_err e = { { 0 } };
    if (sp_tokenize(v->t, s, len, false, special, &got, &e) != 0) fail_msg("tokenize: %s", e.msg);
    va_list ap;
    va_start(ap, special);
    int i = 0;
    for (const char *w; (w = va_arg(ap, const char *)) != NULL; i++) {
        if (i >= got.n) fail_msg("'%s': only %d tokens, expected more ('%s')", s, got.n, w);
        if (got.ids[i] != id_of(v, w)) {
            char piece[64];
            size_t k = sp_token_piece(v->t, got.ids[i], true, piece, sizeof piece - 1);
            piece[k < sizeof piece ? k : sizeof piece - 1] = 0;
            fail_msg("'%s': token %d is %d ('%s'), expected '%s'", s, i, got.ids[i], piece, w);
        }
    }
    va_end(ap);
    assert_int_equal(got.n, i);
    sp_tokens_free(&got);
}
#define EXPECT(v, s, special, ...) expect_tokens(v, s, strlen(s), special, __VA_ARGS__, NULL)

/* Concatenated pieces of the ids of s (render_special as given). */
static char *roundtrip(const vocab *v, const char *s, size_t len, bool special) {
    sp_tokens ids = { 0 };
    assert_int_equal(sp_tokenize(v->t, s, len, false, special, &ids, NULL), 0);
    size_t cap = SP_DETOK_CAP(sp_tokenizer_max_token_len(v->t)), n = 0;
    char *out = malloc((size_t)ids.n * cap + cap + 1);
    sp_detok d = { { 0 }, 0 };
    for (int i = 0; i < ids.n; i++) n += sp_detok_push(&d, v->t, ids.ids[i], special, out + n, cap);
    n += sp_detok_flush(&d, out + n, cap);
    out[n] = 0;
    sp_tokens_free(&ids);
    return out;
}

/* ------------------------------------------------------------------------
 * A byte-level BPE vocabulary
 *
 * ids 0..2 control tokens, 3..258 the 256 GPT-2 byte images, then merged
 * tokens.  Merge ranks are chosen so that the order matters:
 *   "b c" (0) before "a b" (1): "abc" -> a + bc -> abc
 *   "x y" (3) before "y z" (4): "xyz" -> xy + z  (although "xyz" is a token:
 *   only llama3's ignore_merges takes a whole-word token as is)
 * ---------------------------------------------------------------------- */
static const char *const BPE_MERGED[] = { "bc", "ab", "abc", "xy", "yz", "12", "Ġw", "Ġwo", "or",
                                          "ld", "Ġwor", "Ġworld", "he", "ll", "hell", "hello",
                                          "ĠĠ", "xyz", NULL };
static const char *const BPE_MERGES[] = { "b c", "a b", "a bc", "x y", "y z", "1 2", "Ġ w",
                                          "Ġw o", "o r", "l d", "Ġwo r", "Ġwor ld", "h e", "l l",
                                          "he ll", "hell o", "Ġ Ġ", NULL };

/* GPT-2's byte -> code point image, as UTF-8. */
static void byte_image(int b, char *out) {
    int n = 0, cp = b;
    bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (!keep) {
        for (int c = 0; c < b; c++)
            if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae)) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xc0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3f)); out[2] = 0; }
}

typedef struct bpe_opts {
    const char *model, *pre;
    bool no_merges, bad_types, add_bos;
} bpe_opts;

static bool bpe_vocab(vocab *v, bpe_opts o) {
    static char images[256][3];
    const char *toks[400];
    int32_t types[400];
    int n = 0;
    toks[n] = "<|endoftext|>"; types[n++] = 3;
    toks[n] = "<|im_start|>"; types[n++] = 3;
    toks[n] = "<|im_end|>"; types[n++] = 3;
    for (int b = 0; b < 256; b++) {
        byte_image(b, images[b]);
        toks[n] = images[b];
        types[n++] = 1;
    }
    for (int i = 0; BPE_MERGED[i]; i++) { toks[n] = BPE_MERGED[i]; types[n++] = 1; }
    int n_merges = 0;
    while (BPE_MERGES[n_merges]) n_merges++;
    gb g = { 0 };
    kv_str(&g, "general.architecture", "llama");
    kv_str(&g, "tokenizer.ggml.model", o.model ? o.model : "gpt2");
    if (o.pre) kv_str(&g, "tokenizer.ggml.pre", o.pre);
    kv_strs(&g, "tokenizer.ggml.tokens", toks, n);
    if (o.bad_types) kv_f32s(&g, "tokenizer.ggml.token_type", (const float *)types, n);
    else kv_i32s(&g, "tokenizer.ggml.token_type", types, n);
    if (!o.no_merges) kv_strs(&g, "tokenizer.ggml.merges", BPE_MERGES, n_merges);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&g, "tokenizer.ggml.eos_token_id", 2);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", o.add_bos);
    return vocab_open(v, &g);
}

static void test_bpe_merges_by_rank(void **state) {
    (void)state;
    vocab v;
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "gpt2" }));
    assert_int_equal(sp_tokenizer_kind(v.t), SP_TOK_BPE);
    assert_string_equal(sp_tokenizer_kind_name(v.t), "gpt2 (BPE, pre=gpt2)");
    EXPECT(&v, "abc", false, "abc");           /* b c (rank 0) first, then a bc */
    EXPECT(&v, "xyz", false, "xy", "z");       /* x y (rank 3) beats y z (rank 4) */
    EXPECT(&v, "hello world", false, "hello", "Ġworld");
    EXPECT(&v, "abcabc", false, "abc", "abc");
    EXPECT(&v, "12", false, "12");
    EXPECT(&v, "   world", false, "ĠĠ", "Ġworld"); /* \s+(?!\S) leaves the last space */
    /* non-ASCII: one token per UTF-8 byte image, round trip exact */
    EXPECT(&v, "\xc3\xa9", false, "Ã", "©");
    char *back = roundtrip(&v, "caf\xc3\xa9 \xe4\xbd\xa0 hello", 15, false);
    assert_string_equal(back, "caf\xc3\xa9 \xe4\xbd\xa0 hello");
    free(back);
    assert_int_equal(sp_tokenizer_bos(v.t), 1);
    assert_int_equal(sp_tokenizer_eos(v.t), 2);
    assert_false(sp_tokenizer_add_bos(v.t));
    vocab_close(&v);
}

/* "smollm" splits digits one by one before the GPT-2 pattern. */
static void test_bpe_pretokenizers(void **state) {
    (void)state;
    vocab v;
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "smollm" }));
    assert_string_equal(sp_tokenizer_kind_name(v.t), "gpt2 (BPE, pre=smollm)");
    EXPECT(&v, "12", false, "1", "2");
    EXPECT(&v, "a12b", false, "a", "1", "2", "b");
    EXPECT(&v, "hello world", false, "hello", "Ġworld");
    vocab_close(&v);
    /* "default" (also used when the key is missing): punctuation runs split first */
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = NULL }));
    assert_string_equal(sp_tokenizer_kind_name(v.t), "gpt2 (BPE, pre=default)");
    EXPECT(&v, "12", false, "12");
    EXPECT(&v, "ab!!", false, "ab", "!", "!");
    vocab_close(&v);
    /* llama3: numbers in groups of three; a word that is a token skips merging */
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "llama-bpe" }));
    EXPECT(&v, "1234567", false, "12", "3", "4", "5", "6", "7");
    EXPECT(&v, "xyz", false, "xyz");
    EXPECT(&v, "hello world", false, "hello", "Ġworld");
    vocab_close(&v);
    /* qwen2: single digits */
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "qwen2" }));
    EXPECT(&v, "1234", false, "1", "2", "3", "4");
    EXPECT(&v, "xyz", false, "xy", "z");
    vocab_close(&v);
}

/* Invalid UTF-8 is tokenized as llama.cpp does: each bad byte becomes
 * U+FFFD, i.e. the bytes EF BF BD. */
static void test_bpe_invalid_utf8(void **state) {
    (void)state;
    vocab v;
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "gpt2" }));
    sp_tokens a = { 0 }, b = { 0 };
    assert_int_equal(sp_tokenize(v.t, "ab\xff" "c", 4, false, false, &a, NULL), 0);
    assert_int_equal(sp_tokenize(v.t, "ab\xef\xbf\xbd" "c", 6, false, false, &b, NULL), 0);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof *a.ids);
    assert_int_equal(a.n, 5);   /* ab, ï, ¿, ½, c */
    sp_tokens_free(&a);
    sp_tokens_free(&b);
    /* a truncated sequence at the end, and a lone continuation byte */
    sp_tokens c = { 0 };
    assert_int_equal(sp_tokenize(v.t, "\xe4\xbd", 2, false, false, &c, NULL), 0);
    assert_int_equal(c.n, 6);   /* two U+FFFD */
    sp_tokens_free(&c);
    vocab_close(&v);
}

static void test_bpe_special(void **state) {
    (void)state;
    vocab v;
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "gpt2" }));
    const char *s = "<|im_start|>hello<|im_end|>";
    EXPECT(&v, s, true, "<|im_start|>", "hello", "<|im_end|>");
    /* without parse_special the markers are plain text */
    sp_tokens ids = { 0 };
    assert_int_equal(sp_tokenize(v.t, s, strlen(s), false, false, &ids, NULL), 0);
    assert_true(ids.n > 3);
    for (int i = 0; i < ids.n; i++) assert_true(ids.ids[i] >= 3);
    sp_tokens_free(&ids);
    /* pieces: control tokens only when asked */
    char buf[32];
    assert_int_equal(sp_token_piece(v.t, 1, false, buf, sizeof buf), 0);
    assert_int_equal(sp_token_piece(v.t, 1, true, buf, sizeof buf), 12);
    assert_memory_equal(buf, "<|im_start|>", 12);
    assert_int_equal(sp_token_piece(v.t, id_of(&v, "Ġworld"), false, buf, sizeof buf), 6);
    assert_memory_equal(buf, " world", 6);
    /* snprintf-like: the full length even when it does not fit */
    assert_int_equal(sp_token_piece(v.t, id_of(&v, "Ġworld"), false, buf, 3), 6);
    assert_memory_equal(buf, " wo", 3);
    assert_int_equal(sp_token_piece(v.t, -1, true, buf, sizeof buf), 0);
    assert_int_equal(sp_token_piece(v.t, 1 << 20, true, buf, sizeof buf), 0);
    /* EOG: eos and the EOT-like texts */
    assert_true(sp_tokenizer_is_eog(v.t, 2));
    assert_true(sp_tokenizer_is_eog(v.t, 0));   /* <|endoftext|> */
    assert_false(sp_tokenizer_is_eog(v.t, 1));
    assert_false(sp_tokenizer_is_eog(v.t, id_of(&v, "hello")));
    assert_true(sp_tokenizer_is_control(v.t, 1));
    assert_false(sp_tokenizer_is_control(v.t, id_of(&v, "hello")));
    /* add_bos prepends BOS */
    assert_int_equal(sp_tokenize(v.t, "abc", 3, true, false, &ids, NULL), 0);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[0], 1);
    sp_tokens_free(&ids);
    /* empty input: nothing (or just BOS) */
    assert_int_equal(sp_tokenize(v.t, "", 0, false, false, &ids, NULL), 0);
    assert_int_equal(ids.n, 0);
    assert_int_equal(sp_tokenize(v.t, NULL, 0, true, false, &ids, NULL), 0);
    assert_int_equal(ids.n, 1);
    sp_tokens_free(&ids);
    vocab_close(&v);
}

/* ------------------------------------------------------------------------
 * A SentencePiece vocabulary
 *
 * 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces with scores.
 * "ab" scores -2 and "bc" -1, so "abc" merges b+c first and, "abc" not
 * being a token, ends as a + bc.
 * ---------------------------------------------------------------------- */
typedef struct spm_piece {
    const char *text;
    float score;
    int32_t type;
} spm_piece;

static const spm_piece SPM_PIECES[] = {
    { "\xe2\x96\x81", -3, 1 }, { "a", -4, 1 }, { "b", -4, 1 }, { "c", -4, 1 },
    { "ab", -2, 1 }, { "bc", -1, 1 }, { "\xe2\x96\x81" "a", -1.5f, 1 },
    { "\xe2\x96\x81" "ab", -0.5f, 1 }, { "h", -5, 1 }, { "i", -5, 1 }, { "hi", -1, 1 },
    { "\n", 0, 4 }, { "\n\n", 0, 4 }, { "  ", 0, 4 }, { "<b>", 0, 4 },
    { "<start_of_turn>", 0, 3 }, { "<end_of_turn>", 0, 3 }, { "<unused0>", 0, 3 },
    { "u", -8, 1 }, { "s", -8, 1 }, { "e", -8, 1 }, { "r", -8, 1 }, { "us", -3, 1 },
    { "er", -3, 1 }, { "user", -1, 1 }, { "x", -6, 1 }, { "xx", -7, 1 }, { "xxx", -2, 1 },
};

typedef struct spm_opts {
    bool prefix;        /* tokenizer.ggml.add_space_prefix */
    int short_scores;   /* write this many fewer scores */
    bool dup;           /* a duplicate token */
    int bad_bos;        /* bos id past the end */
} spm_opts;

static bool spm_vocab(vocab *v, spm_opts o) {
    static char hex[256][8];
    const char *toks[400];
    float scores[400];
    int32_t types[400];
    int n = 0;
    toks[n] = "<unk>"; scores[n] = 0; types[n++] = 2;
    toks[n] = "<s>"; scores[n] = 0; types[n++] = 3;
    toks[n] = "</s>"; scores[n] = 0; types[n++] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(hex[b], sizeof hex[b], "<0x%02X>", b);
        toks[n] = hex[b]; scores[n] = 0; types[n++] = 6;
    }
    for (size_t i = 0; i < sizeof SPM_PIECES / sizeof SPM_PIECES[0]; i++) {
        toks[n] = SPM_PIECES[i].text;
        scores[n] = SPM_PIECES[i].score;
        types[n++] = SPM_PIECES[i].type;
    }
    if (o.dup) { toks[n] = "ab"; scores[n] = 0; types[n++] = 1; }
    gb g = { 0 };
    kv_str(&g, "general.architecture", "gemma3");
    kv_str(&g, "tokenizer.ggml.model", "llama");
    kv_strs(&g, "tokenizer.ggml.tokens", toks, n);
    kv_f32s(&g, "tokenizer.ggml.scores", scores, n - o.short_scores);
    kv_i32s(&g, "tokenizer.ggml.token_type", types, n);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", o.bad_bos ? (uint32_t)(n + o.bad_bos) : 1);
    kv_u32(&g, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(&g, "tokenizer.ggml.unknown_token_id", 0);
    kv_bool(&g, "tokenizer.ggml.add_space_prefix", o.prefix);
    return vocab_open(v, &g);
}

#define LB "\xe2\x96\x81" /* ▁ */

static void test_spm_merges_by_score(void **state) {
    (void)state;
    vocab v;
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    assert_int_equal(sp_tokenizer_kind(v.t), SP_TOK_SPM);
    assert_true(sp_tokenizer_add_bos(v.t));                   /* SentencePiece default */
    EXPECT(&v, "abc", false, "a", "bc");                      /* bc (-1) beats ab (-2) */
    EXPECT(&v, "ab", false, "ab");
    EXPECT(&v, " ab", false, LB "ab");                        /* ▁ab (-0.5) */
    EXPECT(&v, "hi abc", false, "hi", LB "a", "bc");          /* ▁a (-1.5) + bc (-1): bc first */
    EXPECT(&v, "xxx", false, "xxx");                          /* x+x (-7) then xx+x (-2) */
    /* equal scores: the leftmost pair merges first */
    EXPECT(&v, "xxxx", false, "xxx", "x");
    vocab_close(&v);
    /* add_space_prefix: a leading ▁ */
    assert_true(spm_vocab(&v, (spm_opts){ .prefix = true }));
    EXPECT(&v, "ab", false, LB "ab");
    /* ... also after each special token, as llama.cpp does */
    EXPECT(&v, "ab<start_of_turn>ab", true, LB "ab", "<start_of_turn>", LB "ab");
    EXPECT(&v, "<start_of_turn>ab", true, "<start_of_turn>", LB "ab");
    vocab_close(&v);
}

static void test_spm_byte_fallback(void **state) {
    (void)state;
    vocab v;
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    EXPECT(&v, "\xc3\xa9", false, "<0xC3>", "<0xA9>");      /* é not in the vocabulary */
    EXPECT(&v, "a\xff", false, "a", "<0xFF>");               /* invalid bytes kept as bytes */
    EXPECT(&v, "\xf0\x9f\x98\x80", false, "<0xF0>", "<0x9F>", "<0x98>", "<0x80>");
    char *back = roundtrip(&v, "a\xc3\xa9 b\xe4\xbd\xa0", 9, false);
    assert_string_equal(back, "a\xc3\xa9 b\xe4\xbd\xa0");
    free(back);
    /* pieces: ▁ -> space, <0xXX> -> the byte */
    char buf[16];
    assert_int_equal(sp_token_piece(v.t, id_of(&v, LB "ab"), false, buf, sizeof buf), 3);
    assert_memory_equal(buf, " ab", 3);
    assert_int_equal(sp_token_piece(v.t, id_of(&v, "<0x41>"), false, buf, sizeof buf), 1);
    assert_int_equal(buf[0], 'A');
    assert_int_equal(sp_token_piece(v.t, 0, false, buf, sizeof buf), 0);   /* <unk>: special */
    assert_int_equal(sp_token_piece(v.t, 0, true, buf, sizeof buf), 5);
    vocab_close(&v);
}

/* User-defined tokens are matched even without parse_special, control
 * tokens only with it; longer special texts win. */
static void test_spm_special(void **state) {
    (void)state;
    vocab v;
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    EXPECT(&v, "a\n\nb", false, "a", "\n\n", "b");
    EXPECT(&v, "a\n\n\nb", false, "a", "\n\n", "\n", "b");
    EXPECT(&v, "a  b", false, "a", "  ", "b");
    EXPECT(&v, "<b>ab", false, "<b>", "ab");
    EXPECT(&v, "<start_of_turn>user\nhi<end_of_turn>", true, "<start_of_turn>", "user", "\n", "hi",
           "<end_of_turn>");
    /* without parse_special, control texts are plain text (bytes) */
    sp_tokens ids = { 0 };
    assert_int_equal(sp_tokenize(v.t, "<start_of_turn>", 15, false, false, &ids, NULL), 0);
    assert_true(ids.n > 1);
    for (int i = 0; i < ids.n; i++) assert_false(sp_tokenizer_is_control(v.t, ids.ids[i]));
    sp_tokens_free(&ids);
    /* user-defined pieces render as their text, control ones only if asked */
    char buf[32];
    assert_int_equal(sp_token_piece(v.t, id_of(&v, "  "), false, buf, sizeof buf), 2);
    assert_memory_equal(buf, "  ", 2);
    int32_t sot = id_of(&v, "<start_of_turn>");
    assert_int_equal(sp_token_piece(v.t, sot, false, buf, sizeof buf), 0);
    assert_int_equal(sp_token_piece(v.t, sot, true, buf, sizeof buf), 15);
    /* EOG: eos, <end_of_turn>, and </s> (llama.cpp's text list) */
    assert_true(sp_tokenizer_is_eog(v.t, 2));
    assert_true(sp_tokenizer_is_eog(v.t, id_of(&v, "<end_of_turn>")));
    assert_false(sp_tokenizer_is_eog(v.t, sot));
    assert_false(sp_tokenizer_is_eog(v.t, id_of(&v, "<unused0>")));
    /* round trip with specials rendered */
    char *back = roundtrip(&v, "<start_of_turn>user\nab  c<end_of_turn>\n", 39, true);
    assert_string_equal(back, "<start_of_turn>user\nab  c<end_of_turn>\n");
    free(back);
    vocab_close(&v);
}

/* ------------------------------------------------------------------------
 * Incremental detokenization
 * ---------------------------------------------------------------------- */
static size_t push(vocab *v, sp_detok *d, const char *tok, char *out, size_t cap) {
    return sp_detok_push(d, v->t, id_of(v, tok), false, out, cap);
}

static void test_detok_split_utf8(void **state) {
    (void)state;
    vocab v;
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    char out[64];
    sp_detok d = { { 0 }, 0 };
    /* 😀 = F0 9F 98 80 over four byte tokens: nothing until complete */
    assert_int_equal(push(&v, &d, "<0xF0>", out, sizeof out), 0);
    assert_string_equal(out, "");
    assert_int_equal(push(&v, &d, "<0x9F>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0x98>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0x80>", out, sizeof out), 4);
    assert_string_equal(out, "\xf0\x9f\x98\x80");
    /* CJK 你 = E4 BD A0, then text in the same push */
    assert_int_equal(push(&v, &d, "<0xE4>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0xBD>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0xA0>", out, sizeof out), 3);
    assert_string_equal(out, "\xe4\xbd\xa0");
    assert_int_equal(push(&v, &d, "ab", out, sizeof out), 2);
    assert_string_equal(out, "ab");
    assert_int_equal(sp_detok_flush(&d, out, sizeof out), 0);
    vocab_close(&v);
}

static void test_detok_invalid(void **state) {
    (void)state;
    vocab v;
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    char out[64];
    sp_detok d = { { 0 }, 0 };
    /* a byte that can never start a character: U+FFFD at once */
    assert_int_equal(push(&v, &d, "<0xFF>", out, sizeof out), 3);
    assert_string_equal(out, "\xef\xbf\xbd");
    /* an interrupted sequence: U+FFFD, then the text */
    assert_int_equal(push(&v, &d, "<0xC3>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "ab", out, sizeof out), 5);
    assert_string_equal(out, "\xef\xbf\xbd" "ab");
    /* E4 BD then 41: one U+FFFD for the maximal subpart E4 BD */
    assert_int_equal(push(&v, &d, "<0xE4>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0xBD>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0x41>", out, sizeof out), 4);
    assert_string_equal(out, "\xef\xbf\xbd" "A");
    /* surrogates and overlongs are invalid */
    assert_int_equal(push(&v, &d, "<0xED>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0xA0>", out, sizeof out), 6);
    assert_string_equal(out, "\xef\xbf\xbd\xef\xbf\xbd");
    assert_int_equal(push(&v, &d, "<0xC0>", out, sizeof out), 3);
    /* an incomplete tail at the end of the stream */
    assert_int_equal(push(&v, &d, "<0xF0>", out, sizeof out), 0);
    assert_int_equal(push(&v, &d, "<0x9F>", out, sizeof out), 0);
    assert_int_equal(sp_detok_flush(&d, out, sizeof out), 3);
    assert_string_equal(out, "\xef\xbf\xbd");
    assert_int_equal(sp_detok_flush(&d, out, sizeof out), 0);
    /* too small an output: whole characters only, full length returned */
    sp_detok d2 = { { 0 }, 0 };
    char small[4];
    assert_int_equal(push(&v, &d2, "<0xE4>", small, sizeof small), 0);
    assert_int_equal(push(&v, &d2, "<0xBD>", small, sizeof small), 0);
    assert_int_equal(push(&v, &d2, "<0xA0>", small, sizeof small), 3);
    assert_string_equal(small, "\xe4\xbd\xa0");
    assert_int_equal(push(&v, &d2, LB "ab", small, 3), 3);
    assert_string_equal(small, " a");
    vocab_close(&v);
}

/* ------------------------------------------------------------------------
 * Chat templates
 * ---------------------------------------------------------------------- */
static sp_chat_tmpl *builtin(const char *name) {
    sp_chat_tmpl *ct = NULL;
    sp_err e;
    assert_int_equal(sp_chat_tmpl_for_model(NULL, NULL, name, NULL, NULL, &ct, &e), 0);
    assert_non_null(ct);
    assert_string_equal(sp_chat_tmpl_name(ct), name);
    return ct;
}

static void test_chat_chatml(void **state) {
    (void)state;
    char *p;
    sp_err e = { { 0 } };
    sp_chat_tmpl *ct = builtin("chatml");
    sp_chat_msg m1[] = { { "user", "hi" } };
    assert_int_equal(sp_chat_render(ct, m1, 1, true, &p, &e), 0);
    assert_string_equal(p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(p);
    sp_chat_msg m2[] = { { "system", "S" }, { "user", "q" }, { "assistant", "a" } };
    assert_int_equal(sp_chat_render(ct, m2, 3, false, &p, &e), 0);
    assert_string_equal(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
                           "<|im_start|>assistant\na<|im_end|>\n");
    free(p);
    sp_chat_msg null_role[] = { { NULL, "x" } };
    assert_int_equal(sp_chat_render(ct, null_role, 1, true, &p, &e), -1);
    assert_null(p);
    assert_non_null(strstr(e.msg, "role"));
    sp_chat_tmpl_free(ct);
    /* qwen: ChatML with its default system prompt, unless one is given */
    ct = builtin("qwen");
    assert_int_equal(sp_chat_render(ct, m1, 1, true, &p, &e), 0);
    assert_string_equal(p, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                           "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(p);
    sp_chat_tmpl_free(ct);
}

static void test_chat_gemma(void **state) {
    (void)state;
    char *p;
    sp_err e = { { 0 } };
    sp_chat_tmpl *ct = builtin("gemma");
    sp_chat_msg m[] = { { "system", "Be brief." }, { "user", "  hi\n" }, { "assistant", "hello" },
                        { "user", "bye" } };
    assert_int_equal(sp_chat_render(ct, m, 4, true, &p, &e), 0);
    assert_string_equal(p, "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
                           "<start_of_turn>model\nhello<end_of_turn>\n"
                           "<start_of_turn>user\nbye<end_of_turn>\n"
                           "<start_of_turn>model\n");
    free(p);
    assert_int_equal(sp_chat_render(ct, m + 1, 1, false, &p, &e), 0);
    assert_string_equal(p, "<start_of_turn>user\nhi<end_of_turn>\n");
    free(p);
    /* roles must alternate, starting with user; system only first */
    sp_chat_msg two_users[] = { { "user", "a" }, { "user", "b" } };
    assert_int_equal(sp_chat_render(ct, two_users, 2, true, &p, &e), -1);
    assert_non_null(strstr(e.msg, "alternate"));
    sp_chat_msg model_first[] = { { "assistant", "a" } };
    assert_int_equal(sp_chat_render(ct, model_first, 1, true, &p, &e), -1);
    sp_chat_msg late_system[] = { { "user", "a" }, { "system", "b" } };
    assert_int_equal(sp_chat_render(ct, late_system, 2, true, &p, &e), -1);
    assert_non_null(strstr(e.msg, "system"));
    sp_chat_msg null_content[] = { { "user", NULL } };
    assert_int_equal(sp_chat_render(ct, null_content, 1, true, &p, &e), -1);
    sp_chat_tmpl_free(ct);
}

/* The other built-ins render the formats of their families. */
static void test_chat_builtins(void **state) {
    (void)state;
    sp_chat_msg m[] = { { "system", "S" }, { "user", "q" }, { "assistant", "a" }, { "user", "r" } };
    static const struct { const char *name, *want; } cases[] = {
        { "llama3", "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
                    "<|end_header_id|>\n\nq<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\na<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nr<|eot_id|><|start_header_id|>assistant"
                    "<|end_header_id|>\n\n" },
        { "mistral", "[INST] q[/INST] a[INST] S\n\nr[/INST]" },
        { "phi3", "<|system|>\nS<|end|>\n<|user|>\nq<|end|>\n<|assistant|>\na<|end|>\n<|user|>\nr<|end|>\n"
                  "<|assistant|>\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sp_chat_tmpl *ct = builtin(cases[i].name);
        char *p;
        assert_int_equal(sp_chat_render(ct, m, 4, true, &p, NULL), 0);
        assert_string_equal(p, cases[i].want);
        free(p);
        sp_chat_tmpl_free(ct);
    }
    sp_chat_tmpl *ct = NULL;
    sp_err e;
    assert_int_equal(sp_chat_tmpl_for_model(NULL, NULL, "vicuna", NULL, NULL, &ct, &e), -1);
    assert_null(ct);
    assert_non_null(strstr(e.msg, "chatml, gemma, llama3"));
}

static const char SMOL_TEMPLATE[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

/* A GGUF with only the given architecture and template (either NULL). */
static sp_gguf *chat_gguf(const char *arch, const char *tpl, uint8_t **mem) {
    gb g = { 0 };
    if (arch) kv_str(&g, "general.architecture", arch);
    if (tpl) kv_str(&g, "tokenizer.chat_template", tpl);
    size_t size;
    *mem = gb_finish(&g, &size);
    sp_gguf *gg = sp_gguf_open_memory(*mem, size, NULL);
    assert_non_null(gg);
    return gg;
}

static void test_chat_detect(void **state) {
    (void)state;
    /* which template a file gets: its own, else its architecture's, else none */
    struct { const char *arch, *tpl, *want; } cases[] = {
        { "llama", SMOL_TEMPLATE, "gguf" },
        { "gemma3", "{{ messages }}", "gguf" },
        { "gemma3", NULL, "gemma" },
        { "gemma2", NULL, "gemma" },
        { "gemma", NULL, "gemma" },
        { "llama", NULL, NULL },
        { NULL, NULL, NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *mem;
        sp_gguf *g = chat_gguf(cases[i].arch, cases[i].tpl, &mem);
        sp_chat_tmpl *ct = (sp_chat_tmpl *)1;
        sp_err e;
        assert_int_equal(sp_chat_tmpl_for_model(g, NULL, NULL, NULL, NULL, &ct, &e), 0);
        if (cases[i].want) assert_string_equal(sp_chat_tmpl_name(ct), cases[i].want);
        else assert_null(ct);
        sp_chat_tmpl_free(ct);
        sp_gguf_close(g);
        free(mem);
    }
    /* a template that does not parse is an error naming the line and construct */
    uint8_t *bmem;
    sp_gguf *bg = chat_gguf("llama", "{% for m in messages %}{{ m | wordwrap }}{% endfor %}", &bmem);
    sp_chat_tmpl *bad = NULL;
    sp_err be;
    assert_int_equal(sp_chat_tmpl_for_model(bg, NULL, NULL, NULL, NULL, &bad, &be), -1);
    assert_null(bad);
    assert_non_null(strstr(be.msg, "line 1"));
    assert_non_null(strstr(be.msg, "wordwrap"));
    /* a name or a source given wins over the file's */
    assert_int_equal(sp_chat_tmpl_for_model(bg, NULL, "chatml", NULL, NULL, &bad, &be), 0);
    assert_string_equal(sp_chat_tmpl_name(bad), "chatml");
    sp_chat_tmpl_free(bad);
    assert_int_equal(sp_chat_tmpl_for_model(bg, NULL, NULL, "{{ messages | length }}", "mine.jinja", &bad, &be), 0);
    assert_string_equal(sp_chat_tmpl_name(bad), "mine.jinja");
    sp_chat_tmpl_free(bad);
    sp_gguf_close(bg);
    free(bmem);
    uint8_t *mem;
    char buf[128];
    sp_gguf *g = chat_gguf("llama", SMOL_TEMPLATE, &mem);
    assert_string_equal(sp_chat_default_system(g, buf, sizeof buf),
                        "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    assert_null(sp_chat_default_system(g, buf, 10)); /* does not fit */
    sp_gguf_close(g);
    free(mem);
    g = chat_gguf("llama", "{{'<|im_start|>' + message['role'] + '\n' + message['content']}}", &mem);
    assert_null(sp_chat_default_system(g, buf, sizeof buf));
    sp_gguf_close(g);
    free(mem);
}

/* ------------------------------------------------------------------------
 * Bad vocabularies
 * ---------------------------------------------------------------------- */
static void expect_load_error(vocab *v, bool loaded, const char *needle) {
    assert_false(loaded);
    assert_null(v->t);
    if (!strstr(v->err.msg, needle)) fail_msg("error '%s' does not mention '%s'", v->err.msg, needle);
    vocab_close(v);
}

static void test_bad_vocab(void **state) {
    (void)state;
    vocab v;
    expect_load_error(&v, bpe_vocab(&v, (bpe_opts){ .pre = "gpt2", .no_merges = true }), "merges");
    expect_load_error(&v, bpe_vocab(&v, (bpe_opts){ .model = "wordpiece" }), "unsupported tokenizer model 'wordpiece'");
    expect_load_error(&v, bpe_vocab(&v, (bpe_opts){ .pre = "martian" }), "supported: default, smollm");
    expect_load_error(&v, bpe_vocab(&v, (bpe_opts){ .pre = "gpt2", .bad_types = true }),
                      "tokenizer.ggml.token_type must be an array of INT32");
    expect_load_error(&v, spm_vocab(&v, (spm_opts){ .short_scores = 2 }),
                      "tokenizer.ggml.scores has");
    expect_load_error(&v, spm_vocab(&v, (spm_opts){ .dup = true }), "duplicate token");
    expect_load_error(&v, spm_vocab(&v, (spm_opts){ .bad_bos = 5 }), "bos_token_id");
    /* no tokenizer at all */
    gb g = { 0 };
    kv_str(&g, "general.architecture", "llama");
    expect_load_error(&v, vocab_open(&v, &g), "tokenizer.ggml.model");
    /* a model without tokens */
    g = (gb){ 0 };
    kv_str(&g, "tokenizer.ggml.model", "llama");
    expect_load_error(&v, vocab_open(&v, &g), "tokenizer.ggml.tokens");
    /* add_bos without a BOS token */
    g = (gb){ 0 };
    const char *toks[] = { "a", "b" };
    kv_str(&g, "tokenizer.ggml.model", "gpt2");
    kv_str(&g, "tokenizer.ggml.pre", "gpt2");
    kv_strs(&g, "tokenizer.ggml.tokens", toks, 2);
    kv_strs(&g, "tokenizer.ggml.merges", (const char *[]){ "a b" }, 1);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", true);
    expect_load_error(&v, vocab_open(&v, &g), "add_bos_token");
    /* tokens of the wrong type */
    g = (gb){ 0 };
    kv_str(&g, "tokenizer.ggml.model", "llama");
    kv_i32s(&g, "tokenizer.ggml.tokens", (const int32_t[]){ 1, 2 }, 2);
    expect_load_error(&v, vocab_open(&v, &g), "tokenizer.ggml.tokens");
}

/* ------------------------------------------------------------------------
 * Long inputs: no quadratic blow-up
 * ---------------------------------------------------------------------- */
static char *repeat(const char *unit, size_t total, size_t *len) {
    size_t u = strlen(unit), n = 0;
    char *s = malloc(total + u + 1);
    while (n < total) { memcpy(s + n, unit, u); n += u; }
    s[n] = 0;
    *len = n;
    return s;
}

static void long_case(vocab *v, const char *unit, bool special, int min_tokens) {
    size_t len;
    char *s = repeat(unit, 100000, &len);
    sp_tokens ids = { 0 };
    uint64_t t0 = sp_now_ns();
    assert_int_equal(sp_tokenize(v->t, s, len, false, special, &ids, NULL), 0);
    double dt = sp_ns_to_s(sp_now_ns() - t0);
    if (dt > 10.0) fail_msg("100 KB of '%s' took %.1f s", unit, dt);
    assert_true(ids.n >= min_tokens);
    char *back = roundtrip(v, s, len, special);
    assert_int_equal(strlen(back), len);
    assert_memory_equal(back, s, len);
    free(back);
    sp_tokens_free(&ids);
    free(s);
}

static void test_long_inputs(void **state) {
    (void)state;
    vocab v;
    assert_true(bpe_vocab(&v, (bpe_opts){ .pre = "gpt2" }));
    long_case(&v, "hello world abc ", false, 10000);
    long_case(&v, "ab", false, 10000);                 /* one 100 KB word */
    long_case(&v, "    ", false, 1000);               /* one whitespace run */
    long_case(&v, "<|im_start|>", true, 8000);
    vocab_close(&v);
    assert_true(spm_vocab(&v, (spm_opts){ 0 }));
    long_case(&v, "abc hi ", false, 10000);
    long_case(&v, "x", false, 30000);                  /* no spaces at all */
    long_case(&v, "<start_of_turn>\n\n", true, 10000);
    long_case(&v, "<<<<", true, 10000);                /* every byte starts a special text */
    vocab_close(&v);
}

int main(void) {
    sp_base_init();
    sp_log_level = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_merges_by_rank),
        cmocka_unit_test(test_bpe_pretokenizers),
        cmocka_unit_test(test_bpe_invalid_utf8),
        cmocka_unit_test(test_bpe_special),
        cmocka_unit_test(test_spm_merges_by_score),
        cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_spm_special),
        cmocka_unit_test(test_detok_split_utf8),
        cmocka_unit_test(test_detok_invalid),
        cmocka_unit_test(test_chat_chatml),
        cmocka_unit_test(test_chat_gemma),
        cmocka_unit_test(test_chat_builtins),
        cmocka_unit_test(test_chat_detect),
        cmocka_unit_test(test_bad_vocab),
        cmocka_unit_test(test_long_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

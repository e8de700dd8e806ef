/*
 * Vocabulary loading: token texts, scores and types from the GGUF metadata,
 * merges (BPE), special token ids and flags, and the rules llama.cpp applies
 * on top of the file (EOT/EOG detection by token text), so that the same
 * tokens are special, end generation and render the same way as in the
 * reference implementation.
 */
#include "tokenizer/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */
void sp_tokens_push(sp_tokens *t, int32_t id) {
    SP_VEC_GROW(t->ids, t->cap, t->n + 1);
    t->ids[t->n++] = id;
}

void sp_tokens_free(sp_tokens *t) {
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

/* Printable form of a token text for error messages. */
static const char *vc_show(const char *s, uint32_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (uint32_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

static int32_t vc_find(const sp_tokenizer *t, const char *s) {
    return sp_strmap_get(&t->tok_map, s, strlen(s));
}

/* ------------------------------------------------------------------------
 * Token arrays
 * ---------------------------------------------------------------------- */
static int vc_model(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    sp_str model;
    int rc = sp_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc < 0) return -1;
    if (rc == 0) return sp_err_set(err, "the file has no tokenizer (tokenizer.ggml.model is missing)");
    if (sp_str_eq(model, "gpt2")) t->kind = SP_TOK_BPE;
    else if (sp_str_eq(model, "llama")) t->kind = SP_TOK_SPM;
    else {
        char buf[64];
        return sp_err_set(err, "unsupported tokenizer model '%s' (tokenizer.ggml.model); "
                               "supported: gpt2 (byte-level BPE), llama (SentencePiece)",
                          vc_show(model.ptr, (uint32_t)(model.len < 40 ? model.len : 40), buf,
                                  sizeof buf));
    }
    return 0;
}

static int vc_tokens(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    const sp_gguf_value *v;
    int rc = sp_gguf_get_arr(g, "tokenizer.ggml.tokens", SP_GGUF_STRING, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) return sp_err_set(err, "tokenizer.ggml.tokens is missing");
    if (v->v.arr.n == 0 || v->v.arr.n > (1u << 30))
        return sp_err_set(err, "tokenizer.ggml.tokens has %llu entries (expected 1 .. 2^30)",
                          (unsigned long long)v->v.arr.n);
    int32_t n = (int32_t)v->v.arr.n;
    t->n_vocab = n;
    t->text = sp_xcalloc((size_t)n, sizeof *t->text);
    t->len = sp_xcalloc((size_t)n, sizeof *t->len);
    t->score = sp_xcalloc((size_t)n, sizeof *t->score);
    t->attr = sp_xcalloc((size_t)n, 1);
    t->eog = sp_xcalloc((size_t)n, 1);
    for (int32_t i = 0; i < n; i++) {
        sp_str s = v->v.arr.strs[i];
        if (s.len > 65535)
            return sp_err_set(err, "token %d is %llu bytes long (limit 65535)", i,
                              (unsigned long long)s.len);
        t->text[i] = s.ptr;
        t->len[i] = (uint32_t)s.len;
        t->attr[i] = SP_TA_NORMAL;
        if (t->len[i] > t->max_len) t->max_len = t->len[i];
    }
    return 0;
}

/* Looks up an optional per-token array; checks its element type and that
 * its length equals the vocabulary size. */
static int vc_token_array(const sp_tokenizer *t, const sp_gguf *g, const char *key, uint32_t ta,
                          uint32_t tb, const sp_gguf_value **out, sp_err *err) {
    const sp_gguf_value *v = sp_gguf_get(g, key);
    *out = NULL;
    if (!v) return 0;
    if (v->type != SP_GGUF_ARRAY || (v->v.arr.type != ta && v->v.arr.type != tb))
        return sp_err_set(err, "%s must be an array of %s%s%s", key, sp_gguf_type_name(ta),
                          ta != tb ? " or " : "", ta != tb ? sp_gguf_type_name(tb) : "");
    if (v->v.arr.n != (uint64_t)t->n_vocab)
        return sp_err_set(err, "%s has %llu entries but tokenizer.ggml.tokens has %d", key,
                          (unsigned long long)v->v.arr.n, t->n_vocab);
    *out = v;
    return 0;
}

static int vc_scores_types(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    const sp_gguf_value *sc, *ty;
    if (vc_token_array(t, g, "tokenizer.ggml.scores", SP_GGUF_FLOAT32, SP_GGUF_INT32, &sc, err) ||
        vc_token_array(t, g, "tokenizer.ggml.token_type", SP_GGUF_INT32, SP_GGUF_INT32, &ty, err))
        return -1;
    for (int32_t i = 0; sc && i < t->n_vocab; i++) {
        const char *p = (const char *)sc->v.arr.data + (size_t)i * 4;
        if (sc->v.arr.type == SP_GGUF_FLOAT32) memcpy(&t->score[i], p, 4);
        else { int32_t x; memcpy(&x, p, 4); t->score[i] = (float)x; }
    }
    static const uint8_t TYPE_ATTR[7] = { 0, SP_TA_NORMAL, SP_TA_UNKNOWN, SP_TA_CONTROL,
                                          SP_TA_USER, SP_TA_UNUSED, SP_TA_BYTE };
    for (int32_t i = 0; ty && i < t->n_vocab; i++) {
        int32_t x;
        memcpy(&x, (const char *)ty->v.arr.data + (size_t)i * 4, 4);
        t->attr[i] = x >= 0 && x < 7 ? TYPE_ATTR[x] : 0;
    }
    return 0;
}

/* text -> id.  Duplicate texts are an error (the mapping would be
 * ambiguous); empty texts are kept out of the map (they can never match). */
static int vc_map(sp_tokenizer *t, sp_err *err) {
    sp_strmap_init(&t->tok_map, (uint32_t)t->n_vocab);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->len[i] == 0) continue;
        int32_t prev = sp_strmap_put(&t->tok_map, t->text[i], t->len[i], i);
        if (prev >= 0) {
            char buf[96];
            return sp_err_set(err, "duplicate token in vocabulary: '%s' has ids %d and %d",
                              vc_show(t->text[i], t->len[i], buf, sizeof buf), prev, i);
        }
    }
    return 0;
}

static int vc_merges(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    const sp_gguf_value *v;
    int rc = sp_gguf_get_arr(g, "tokenizer.ggml.merges", SP_GGUF_STRING, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) return sp_err_set(err, "BPE vocabulary without merges (tokenizer.ggml.merges is missing)");
    if (v->v.arr.n > (1u << 30)) return sp_err_set(err, "tokenizer.ggml.merges is too long");
    uint32_t n = (uint32_t)v->v.arr.n;
    sp_strmap_init(&t->merge_map, n);
    for (uint32_t i = 0; i < n; i++) {
        sp_str s = v->v.arr.strs[i];
        /* "left right", split at the first space after the first byte; an
         * entry without one can never match a pair and is skipped. */
        if (s.len < 3 || s.len > 65535 || !memchr(s.ptr + 1, ' ', s.len - 2)) continue;
        sp_strmap_put(&t->merge_map, s.ptr, (uint32_t)s.len, (int32_t)i);
    }
    return 0;
}

static int vc_pre(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    sp_str pre = { 0 };
    char name[64] = "";
    if (sp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err) < 0) return -1;
    if (pre.len >= sizeof name) return sp_err_set(err, "tokenizer.ggml.pre is too long");
    sp_str_cpy(pre, name, sizeof name);
    if (sp_pretok_init(&t->pre, name, err) != 0) return -1;
    snprintf(t->kind_name, sizeof t->kind_name, "gpt2 (BPE, pre=%s)", t->pre.name);
    return 0;
}

/* ------------------------------------------------------------------------
 * Special ids and flags
 * ---------------------------------------------------------------------- */
/* An optional id key.  Required ones (bos/eos/unk) out of range are an
 * error; others are dropped with a warning, as llama.cpp does (some
 * converted files carry a padding id equal to the vocabulary size). */
static int vc_id(sp_tokenizer *t, const sp_gguf *g, const char *key, int32_t *id, bool required,
                 sp_err *err) {
    uint32_t v;
    int rc = sp_gguf_get_u32(g, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (*id >= t->n_vocab) *id = -1;
        return 0;
    }
    if (v < (uint32_t)t->n_vocab) { *id = (int32_t)v; return 0; }
    if (required)
        return sp_err_set(err, "%s = %u is out of range (vocabulary has %d tokens)", key, v, t->n_vocab);
    sp_info("tokenizer: ignoring %s = %u (vocabulary has %d tokens)\n", key, v, t->n_vocab);
    *id = -1;
    return 0;
}

static int vc_special_ids(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    bool spm = t->kind == SP_TOK_SPM;
    t->bos = spm ? 1 : -1;
    t->eos = spm ? 2 : -1;
    t->unk = spm ? 0 : -1;
    t->eot = t->eom = t->sep = t->pad = -1;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = -1;
    t->add_bos = spm;
    t->add_space_prefix = spm;
    const struct { const char *key; int32_t *id; bool req; } keys[] = {
        { "tokenizer.ggml.bos_token_id", &t->bos, true },
        { "tokenizer.ggml.eos_token_id", &t->eos, true },
        { "tokenizer.ggml.unknown_token_id", &t->unk, true },
        { "tokenizer.ggml.eot_token_id", &t->eot, false },
        { "tokenizer.ggml.eom_token_id", &t->eom, false },
        { "tokenizer.ggml.seperator_token_id", &t->sep, false },
        { "tokenizer.ggml.padding_token_id", &t->pad, false },
        { "tokenizer.ggml.fim_pre_token_id", &t->fim_pre, false },
        { "tokenizer.ggml.fim_suf_token_id", &t->fim_suf, false },
        { "tokenizer.ggml.fim_mid_token_id", &t->fim_mid, false },
        { "tokenizer.ggml.fim_pad_token_id", &t->fim_pad, false },
        { "tokenizer.ggml.fim_rep_token_id", &t->fim_rep, false },
        { "tokenizer.ggml.fim_sep_token_id", &t->fim_sep, false },
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (vc_id(t, g, keys[i].key, keys[i].id, keys[i].req, err)) return -1;
    if (sp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err) < 0 ||
        sp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err) < 0 ||
        sp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err) < 0)
        return -1;
    if (t->add_bos && t->bos < 0)
        return sp_err_set(err, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
    if (t->add_eos && t->eos < 0)
        return sp_err_set(err, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
    return 0;
}

/* If *id is unset, the lowest id whose text is in names becomes it; every
 * such token found is made a control token (llama.cpp's text-based
 * detection of EOT / EOM / FIM tokens for files that do not name them). */
static void vc_detect(sp_tokenizer *t, int32_t *id, const char *const *names) {
    if (*id >= 0) return;
    for (int k = 0; names[k]; k++) {
        int32_t i = vc_find(t, names[k]);
        if (i >= 0 && (*id < 0 || i < *id)) *id = i;
    }
    if (*id >= 0) t->attr[*id] |= SP_TA_CONTROL;
}

#define FW "\xef\xbd\x9c"   /* U+FF5C fullwidth vertical line */
#define LB "\xe2\x96\x81"   /* U+2581 */
static const char *const EOT_NAMES[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<" FW "end" LB "of" LB "sentence" FW ">",
    "<end_of_utterance>", NULL };
static const char *const EOM_NAMES[] = { "<|eom_id|>", NULL };
static const char *const FIM_PRE_NAMES[] = { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<" FW "fim" LB "begin" FW ">", "<PRE>", LB "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL };
static const char *const FIM_SUF_NAMES[] = { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<" FW "fim" LB "hole" FW ">", "<SUF>", LB "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL };
static const char *const FIM_MID_NAMES[] = { "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<" FW "fim" LB "end" FW ">", "<MID>", LB "<MID>", "<|code_middle|>", "<|middle|>", NULL };
static const char *const FIM_PAD_NAMES[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL };
static const char *const FIM_REP_NAMES[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", NULL };
static const char *const FIM_SEP_NAMES[] = { "<|file_sep|>", NULL };
/* Texts that end generation wherever they appear in a vocabulary. */
static const char *const EOG_NAMES[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>",
    "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", "<" FW "end" LB "of" LB "sentence" FW ">", "[e~[", NULL };

static void vc_mark_eog(sp_tokenizer *t, int32_t id) {
    if (id >= 0) t->eog[id] = 1;
}

/* Text-based detection of EOT / EOM / FIM tokens the file does not name,
 * and of unused control tokens ("<unused12>"). */
static void vc_detect_all(sp_tokenizer *t) {
    vc_detect(t, &t->eot, EOT_NAMES);
    vc_detect(t, &t->eom, EOM_NAMES);
    vc_detect(t, &t->fim_pre, FIM_PRE_NAMES);
    vc_detect(t, &t->fim_suf, FIM_SUF_NAMES);
    vc_detect(t, &t->fim_mid, FIM_MID_NAMES);
    vc_detect(t, &t->fim_pad, FIM_PAD_NAMES);
    vc_detect(t, &t->fim_rep, FIM_REP_NAMES);
    vc_detect(t, &t->fim_sep, FIM_SEP_NAMES);
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & SP_TA_CONTROL) && memmem(t->text[i], t->len[i], "unused", 6))
            t->attr[i] |= SP_TA_UNUSED;
}

/* Exceptions llama.cpp makes for particular vocabularies. */
static void vc_exceptions(sp_tokenizer *t) {
    /* harmony-style vocabularies: <|end|> ends a message, not generation */
    int32_t ret = vc_find(t, "<|return|>"), call = vc_find(t, "<|call|>");
    int32_t calls = vc_find(t, "<|calls|>"), flush = vc_find(t, "<|flush|>");
    int32_t end = vc_find(t, "<|end|>");
    bool has_call = (call >= 0 && t->eog[call]) || (calls >= 0 && t->eog[calls]);
    if (end >= 0 && t->eog[end] && has_call &&
        ((ret >= 0 && t->eog[ret]) || (flush >= 0 && t->eog[flush]))) {
        t->eog[end] = 0;
        t->attr[end] = SP_TA_USER;
    }
    /* vocabularies with <|tool_response>: </s> is ordinary text */
    int32_t tr = vc_find(t, "<|tool_response>"), s = vc_find(t, "</s>");
    if (tr >= 0 && s >= 0 && t->eog[tr] && t->eog[s]) {
        t->eog[s] = 0;
        t->attr[s] = SP_TA_NORMAL;
    }
}

/* The end-of-generation set and the attribute fix-ups, in llama.cpp's order
 * (llama_vocab::impl::load).  EOG texts become control tokens: they are
 * then parsed only with parse_special and not rendered unless asked.  On
 * Gemma 3 this makes "</s>" (an HTML tag there) a control EOG token too,
 * exactly as the reference does. */
static void vc_eog(sp_tokenizer *t) {
    vc_detect_all(t);
    vc_mark_eog(t, t->fim_pad);
    vc_mark_eog(t, t->fim_rep);
    vc_mark_eog(t, t->fim_sep);
    for (int k = 0; EOG_NAMES[k]; k++) {
        int32_t i = vc_find(t, EOG_NAMES[k]);
        if (i < 0) continue;
        t->eog[i] = 1;
        t->attr[i] |= SP_TA_CONTROL;
    }
    static const char *const ALWAYS_RENDER[] = { "<|channel|>", "<|message|>", "<|start|>",
                                                 "<|constrain|>", NULL };
    for (int k = 0; ALWAYS_RENDER[k]; k++) {
        int32_t i = vc_find(t, ALWAYS_RENDER[k]);
        if (i >= 0) t->attr[i] = SP_TA_USER;
    }
    vc_mark_eog(t, t->eos);
    vc_mark_eog(t, t->eot);
    vc_mark_eog(t, t->eom);
    vc_exceptions(t);
}

static int vc_cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Tables for the special-token pass: distinct lengths and first bytes. */
static void vc_special_index(sp_tokenizer *t) {
    uint32_t *lens = sp_xmalloc((size_t)t->n_vocab * sizeof *lens);
    int n = 0;
    memset(t->special_first, 0, sizeof t->special_first);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->attr[i] & SP_TA_SPECIAL) || t->len[i] == 0) continue;
        unsigned char c = (unsigned char)t->text[i][0];
        t->special_first[c] |= (t->attr[i] & (SP_TA_CONTROL | SP_TA_UNKNOWN)) ? 2 : 1;
        lens[n++] = t->len[i];
    }
    qsort(lens, (size_t)n, sizeof *lens, vc_cmp_u32_desc);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || lens[m - 1] != lens[i]) lens[m++] = lens[i];
    t->special_lens = lens;
    t->n_special_lens = m;
}

/* SentencePiece byte fallback tokens: "<0xXX>", else the 1-byte text. */
static void vc_byte_tokens(sp_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        t->byte_tok[b] = -1;
        if (t->kind != SP_TOK_SPM) continue;
        char hex[8], one = (char)b;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_tok[b] = vc_find(t, hex);
        if (t->byte_tok[b] < 0) t->byte_tok[b] = sp_strmap_get(&t->tok_map, &one, 1);
    }
}

static int vc_load(sp_tokenizer *t, const sp_gguf *g, sp_err *err) {
    if (vc_model(t, g, err) || vc_tokens(t, g, err) || vc_scores_types(t, g, err) || vc_map(t, err))
        return -1;
    if (t->kind == SP_TOK_BPE) {
        sp_bytemap_init(&t->bytes);
        if (vc_merges(t, g, err) || vc_pre(t, g, err)) return -1;
    } else {
        snprintf(t->kind_name, sizeof t->kind_name, "llama (SentencePiece)");
    }
    if (vc_special_ids(t, g, err)) return -1;
    vc_eog(t);
    vc_special_index(t);
    vc_byte_tokens(t);
    return 0;
}

sp_tokenizer *sp_tokenizer_load(const sp_gguf *g, sp_err *err) {
    sp_tokenizer *t = sp_xcalloc(1, sizeof *t);
    if (vc_load(t, g, err) != 0) {
        sp_err_prefix(err, "tokenizer");
        sp_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void sp_tokenizer_free(sp_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->len);
    free(t->score);
    free(t->attr);
    free(t->eog);
    free(t->special_lens);
    sp_strmap_free(&t->tok_map);
    sp_strmap_free(&t->merge_map);
    sp_pretok_free(&t->pre);
    free(t);
}

/* ------------------------------------------------------------------------
 * Accessors
 * ---------------------------------------------------------------------- */
sp_tok_kind sp_tokenizer_kind(const sp_tokenizer *t) { return t->kind; }
const char *sp_tokenizer_kind_name(const sp_tokenizer *t) { return t->kind_name; }
int32_t sp_tokenizer_n_vocab(const sp_tokenizer *t) { return t->n_vocab; }
int32_t sp_tokenizer_bos(const sp_tokenizer *t) { return t->bos; }
int32_t sp_tokenizer_eos(const sp_tokenizer *t) { return t->eos; }
bool sp_tokenizer_add_bos(const sp_tokenizer *t) { return t->add_bos; }

bool sp_tokenizer_is_eog(const sp_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int32_t sp_tokenizer_find(const sp_tokenizer *t, const char *text) { return vc_find(t, text); }

bool sp_tokenizer_is_control(const sp_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->attr[id] & SP_TA_CONTROL);
}

/* Self-distillation data for draft heads: training sequences the target
 * makes itself, with its hidden states at the head's tap layers and its
 * next-token distributions as soft labels.
 *
 * Sequences come from text on the machine (files and folders given: every
 * Debian system has Python's library sources, license texts and package
 * documentation) in two kinds: windows of the text itself, and the
 * target's own answers to prompts (chat models: a summarise / explain /
 * continue request about the text, or a generated request, in the chat
 * template; pretrained models: a snippet of the text or a generated start
 * of prose or code to continue).  The answers matter most: a head
 * learns to predict what the target says.  Windows are recorded by a
 * forward over them; answers while the model writes them, in the batched
 * passes that generate them (no second pass: a third less time per
 * answer token).
 *
 * File layout (little-endian; every field checked when read):
 *   header  "SPDSTL01", u32 n_embd, u32 top_k, i32 tap_layers[3], u32 n_seqs,
 *           u64 n_tokens, char target_fingerprint[24], u64 recipe (the data
 *           options' hash, sp_distill_recipe; 0 in files from before it)
 *   per sequence:  u32 n, u32 loss_from, i32 tokens[n], i32 ids[n][k],
 *           u16 probs[n][k] (f16), u16 taps[n][3][n_embd] (bf16; Gemma's
 *           residual stream exceeds f16's range), padded to 4 bytes */
#include "train/train.h"

#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DS_MAGIC "SPDSTL01"
#define DS_HEADER 72
#define DS_MAX_FILE (64 << 10)       /* bytes read from one corpus file */
#define DS_CHUNK 32                  /* rows per recording pass (logits of 262k tokens each) */

/* ----------------------------------------------------------------------------
 * Corpus
 * ------------------------------------------------------------------------- */

typedef struct corpus {
    char **paths;
    int n, cap;
} corpus;

static bool wanted(const char *name) {
    static const char *const ext[] = { ".py", ".txt", ".md", ".rst", ".html", ".c", ".h", ".sh", ".json" };
    const char *dot = strrchr(name, '.');
    if (!dot) return !strncmp(name, "README", 6) || !strcmp(name, "copyright") || strchr(name, '-') != NULL;
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++)
        if (!strcmp(dot, ext[i])) return true;
    return false;
}

/* Regular files under path (depth-first, sorted by readdir order; the
 * caller shuffles), skipping hidden entries. */
static void walk(corpus *c, const char *path, int depth) {
    struct stat st;
    if (stat(path, &st) != 0 || depth > 8 || c->n >= 100000) return;
    if (S_ISREG(st.st_mode)) {
        if (st.st_size < 64) return;
        SP_VEC_GROW(c->paths, c->cap, c->n + 1);
        c->paths[c->n++] = sp_xstrdup(path);
        return;
    }
    if (!S_ISDIR(st.st_mode)) return;
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode) && !wanted(e->d_name)) continue;
        walk(c, sub, depth + 1);
    }
    closedir(d);
}

/* Bytes at the start of s[0..n) that are whole, valid UTF-8 characters
 * (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF). */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;   /* the second byte's range */
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return i;
        if (i + k >= n || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        i += k + 1;
    }
    return i;
}

/* Up to DS_MAX_FILE bytes of a UTF-8 text file, cut to whole characters
 * (NULL for binary files and other encodings: prompts made from them
 * could not be rendered, JSON strings being UTF-8). */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = sp_xmalloc(DS_MAX_FILE + 1);
    size_t n = fread(b, 1, DS_MAX_FILE, f);
    fclose(f);
    const size_t ok = utf8_valid_prefix((const unsigned char *)b, n);
    /* a file read whole must be valid throughout; one cut at DS_MAX_FILE
     * may end inside a character */
    if (ok < n && (n < DS_MAX_FILE || n - ok > 3)) n = 0;
    else n = ok;
    b[n] = 0;
    if (n < 64 || memchr(b, 0, n)) { free(b); return NULL; }
    *len = n;
    return b;
}

/* ----------------------------------------------------------------------------
 * Writing records
 * ------------------------------------------------------------------------- */

typedef struct recorder {
    const sp_model *m;
    sp_workspace *ws;
    const sp_distill_opts *o;
    FILE *f;
    float *logits;                   /* (DS_CHUNK, n_vocab) */
    float *taps;                     /* (DS_CHUNK, 3, n_embd) */
    int32_t *ids;                    /* (seq, k) */
    uint16_t *probs, *btaps;
    int cap_rows;
    uint32_t n_seqs;
    uint64_t n_tokens;
} recorder;

/* The k most likely ids of a row and their probabilities (softmax over the
 * whole vocabulary). */
static void top_k(const float *row, int V, int k, int32_t *ids, uint16_t *probs) {
    float max = row[0];
    for (int i = 1; i < V; i++) max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - max);
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (n == k && !(row[i] > row[ids[k - 1]])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && row[i] > row[ids[j - 1]]) { ids[j] = ids[j - 1]; j--; }
        ids[j] = i;
    }
    for (int j = 0; j < k; j++) probs[j] = sp_f32_to_f16((float)(exp((double)row[ids[j]] - max) / sum));
}

static int put(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

/* Appends one sequence's record: its n tokens, each row's top-k (ids,
 * probs) and taps (bf16, (n, 3, n_embd)). */
static int write_record(recorder *r, const int32_t *toks, int n, int loss_from, const int32_t *ids,
                        const uint16_t *probs, const uint16_t *btaps, sp_err *err) {
    const int d = r->m->hp.n_embd, k = r->o->top_k;
    const uint32_t hdr[2] = { (uint32_t)n, (uint32_t)loss_from };
    const size_t pb = (size_t)n * k * 2, pad = (4 - pb % 4) % 4, zero = 0;
    if (put(r->f, hdr, sizeof hdr) || put(r->f, toks, (size_t)n * 4) || put(r->f, ids, (size_t)n * k * 4) ||
        put(r->f, probs, pb) || put(r->f, &zero, pad) || put(r->f, btaps, (size_t)n * 3 * d * 2))
        return sp_err_set(err, "distill: writing the data file: %s", strerror(errno));
    r->n_seqs++;
    r->n_tokens += (uint64_t)n;
    return 0;
}

/* Runs the target over a sequence (taps + every row's logits) and appends
 * its record. */
static int record(recorder *r, const int32_t *toks, int n, int loss_from, sp_err *err) {
    const int d = r->m->hp.n_embd, V = r->m->hp.n_vocab, k = r->o->top_k;
    SP_VEC_GROW(r->ids, r->cap_rows, (size_t)n * k);
    r->probs = sp_xrealloc(r->probs, (size_t)r->cap_rows * sizeof *r->probs);
    r->btaps = sp_xrealloc(r->btaps, (size_t)n * 3 * d * sizeof *r->btaps);
    sp_kv *kv = sp_kv_create(r->m, n);
    int rc = 0;
    for (int at = 0; at < n && !rc; at += DS_CHUNK) {
        const int c = n - at < DS_CHUNK ? n - at : DS_CHUNK;
        sp_fwd_seq q = { .kv = kv, .tokens = toks + at, .n = c, .mode = SP_LOGITS_ALL, .logits = r->logits,
                         .tap_layers = r->o->tap_layers, .n_taps = 3, .taps = r->taps };
        rc = sp_model_forward_batch(r->m, r->ws, &q, 1, err);
        for (int i = 0; i < c && !rc; i++) {
            top_k(r->logits + (size_t)i * V, V, k, r->ids + (size_t)(at + i) * k, r->probs + (size_t)(at + i) * k);
            for (int e = 0; e < 3 * d; e++) r->btaps[((size_t)(at + i)) * 3 * d + e] = sp_f32_to_bf16(r->taps[(size_t)i * 3 * d + e]);
        }
    }
    sp_kv_free(kv);
    if (rc) return -1;
    return write_record(r, toks, n, loss_from, r->ids, r->probs, r->btaps, err);
}

/* FNV-1a over n bytes, from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t sp_distill_recipe(const sp_distill_opts *o) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < o->n_paths; i++) h = fnv(h, o->paths[i], strlen(o->paths[i]) + 1);
    const int64_t ints[] = { o->max_tokens, o->seq_len, o->top_k, o->answer_tokens, o->chat, o->tap_layers[0],
                             o->tap_layers[1], o->tap_layers[2], (int64_t)o->seed };
    const double shares[] = { o->answer_share, o->doc_share, o->self_share };
    h = fnv(h, ints, sizeof ints);
    h = fnv(h, shares, sizeof shares);
    if (o->topic_share > 0) h = fnv(h, &o->topic_share, sizeof o->topic_share);   /* files from before it */
    return h ? h : 1;                            /* 0: a file from before recipes */
}

static int write_header(recorder *r) {
    char h[DS_HEADER] = { 0 };
    memcpy(h, DS_MAGIC, 8);
    const uint32_t d = (uint32_t)r->m->hp.n_embd, k = (uint32_t)r->o->top_k;
    memcpy(h + 8, &d, 4);
    memcpy(h + 12, &k, 4);
    memcpy(h + 16, r->o->tap_layers, 12);
    memcpy(h + 28, &r->n_seqs, 4);
    memcpy(h + 32, &r->n_tokens, 8);
    memcpy(h + 40, r->m->fingerprint, 17);
    const uint64_t recipe = sp_distill_recipe(r->o);
    memcpy(h + 64, &recipe, 8);
    rewind(r->f);
    return put(r->f, h, sizeof h);
}

/* ----------------------------------------------------------------------------
 * Making sequences
 * ------------------------------------------------------------------------- */

/* An answer is recorded while the model writes it, with no second pass:
 * the emitted tokens' logits give the rows' distributions, and a drafter
 * that never drafts but reads the target's taps (the seam hands it the
 * prompt's rows at prefill and each verified row at commit) collects the
 * hidden states.  Row i of the record is position i: its taps, and the
 * distribution the token at i + 1 was drawn from.  The last token never
 * enters the target, so the record holds the tokens before it; the row
 * before it keeps that token's distribution (an end of turn, most often,
 * which the head then learns to predict).  The pass is batch invariant,
 * so these are the rows a separate pass over the sequence gives
 * (test_distill_real). */
typedef struct answer {
    sp_tokens seq;                   /* prompt, then the answer */
    int n_prompt;
    const sp_tokenizer *tok;
    int V, k, width;                 /* vocabulary, top-k, floats of one row's taps */
    int32_t *ids;                    /* (cap, k) row i's top-k, rows n_prompt-1 .. */
    uint16_t *probs;                 /* (cap, k) f16 */
    uint16_t *taps;                  /* (cap, width) bf16 */
    int n_rows, cap;                 /* rows with taps */
    int n_dist;                      /* rows with a distribution: [n_prompt - 1, n_dist) */
} answer;

static void answer_grow(answer *a, int rows) {
    if (rows <= a->cap) return;
    int cap = a->cap ? a->cap : 256;
    while (cap < rows) cap *= 2;
    a->ids = sp_xrealloc(a->ids, (size_t)cap * a->k * sizeof *a->ids);
    a->probs = sp_xrealloc(a->probs, (size_t)cap * a->k * sizeof *a->probs);
    a->taps = sp_xrealloc(a->taps, (size_t)cap * a->width * sizeof *a->taps);
    a->cap = cap;
}

static void answer_free(answer *a) {
    sp_tokens_free(&a->seq);
    free(a->ids);
    free(a->probs);
    free(a->taps);
}

/* Empties an answer for the next prompt, keeping its buffers. */
static void answer_reset(answer *a) {
    a->seq.n = 0;
    a->n_rows = a->n_dist = 0;
}

/* An answer ends with its end-of-turn token, as it does when served: what
 * a model writes past it (further turns it makes up) is never drafted for,
 * and was a fifth of the answers' tokens when recorded. */
static sp_emit_result on_answer(void *ud, int32_t tok, bool drafted, const float *logits) {
    (void)drafted;
    answer *a = ud;
    const int row = a->seq.n - 1;    /* the row whose distribution drew tok */
    assert(row == a->n_dist);
    answer_grow(a, row + 1);
    top_k(logits, a->V, a->k, a->ids + (size_t)row * a->k, a->probs + (size_t)row * a->k);
    a->n_dist = row + 1;
    sp_tokens_push(&a->seq, tok);
    return sp_tokenizer_is_eog(a->tok, tok) ? SP_EMIT_STOP : SP_EMIT_CONTINUE;
}

/* The taps of rows [t->pos, t->pos + t->n_rows), which follow the ones
 * kept (each row enters the target once, in order). */
static void answer_taps(answer *a, const sp_taps *t) {
    assert(t->pos == a->n_rows && t->n_layers * t->dim == a->width);
    answer_grow(a, t->pos + t->n_rows);
    const size_t n = (size_t)t->n_rows * a->width;
    uint16_t *dst = a->taps + (size_t)t->pos * a->width;
    for (size_t e = 0; e < n; e++) dst[e] = sp_f32_to_bf16(t->data[e]);
    a->n_rows = t->pos + t->n_rows;
}

static sp_draft *rec_open(sp_drafter *d, const sp_target *t, sp_err *err) {
    (void)t; (void)err;
    sp_draft *s = sp_xcalloc(1, sizeof *s);
    s->drafter = d;
    s->impl = d->impl;
    return s;
}
static int rec_prefill(sp_draft *s, const int32_t *prompt, int n, const sp_taps *taps, sp_err *err) {
    (void)prompt;
    if (!taps || taps->pos != 0 || taps->n_rows != n)
        return sp_err_set(err, "distill: the prompt's hidden states did not come from position 0");
    answer_taps(s->impl, taps);
    return 0;
}
static int rec_propose(sp_draft *s, const int32_t *feed, int n_feed, int max_n, sp_proposal *out, sp_err *err) {
    (void)s; (void)feed; (void)n_feed; (void)max_n; (void)err;
    *out = (sp_proposal){ 0 };
    return 0;
}
static void rec_commit(sp_draft *s, int n_drafted, int n_accepted, const int32_t *path, const sp_taps *v) {
    (void)n_drafted; (void)n_accepted; (void)path;
    if (v) answer_taps(s->impl, v);
}
static void rec_close(sp_draft *s) { free(s); }
static void rec_free(sp_drafter *d) { free(d); }

/* The recording drafter of one answer (ans borrowed). */
static sp_drafter *recorder_for(answer *ans, const int32_t tap_layers[3]) {
    static const sp_drafter_ops ops = { .open = rec_open, .prefill = rec_prefill, .propose = rec_propose,
                                        .commit = rec_commit, .close = rec_close, .free = rec_free };
    sp_drafter *d = sp_drafter_alloc();
    d->ops = &ops;
    snprintf(d->name, sizeof d->name, "recorder");
    snprintf(d->ns, sizeof d->ns, "recorder-v1");
    d->needs = SP_CAP_HIDDEN_TAPS;
    d->n_taps = 3;
    memcpy(d->tap_layers, tap_layers, 3 * sizeof *tap_layers);
    d->impl = ans;
    return d;
}

/* Appends an answer's record: the rows before its last token, the
 * prompt's rows (no loss there) labelled with the token that follows. */
static int record_answer(recorder *r, answer *a, sp_err *err) {
    const int n = a->seq.n - 1, k = a->k;
    if (a->n_rows < n || a->n_dist < n)
        return sp_err_set(err, "distill: an answer's rows were not all recorded (%d of %d hidden states, "
                          "%d distributions)", a->n_rows, n, a->n_dist);
    for (int i = 0; i < a->n_prompt - 1; i++) {
        int32_t *id = a->ids + (size_t)i * k;
        uint16_t *pr = a->probs + (size_t)i * k;
        for (int j = 0; j < k; j++) { id[j] = -1; pr[j] = 0; }
        id[0] = a->seq.ids[i + 1];
        pr[0] = sp_f32_to_f16(1.0f);
    }
    return write_record(r, a->seq.ids, n, a->n_prompt - 1, a->ids, a->probs, a->taps, err);
}

/* The language of a code file's fence, from its name; NULL for prose. */
static const char *code_lang(const char *path) {
    static const char *const map[][2] = { { ".py", "python" }, { ".c", "c" }, { ".h", "c" }, { ".sh", "sh" },
                                          { ".json", "json" } };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof map / sizeof *map; i++)
        if (!strcmp(dot, map[i][0])) return map[i][1];
    return NULL;
}

/* Whether prompt r is generated (else made from the snippet): r's top 53
 * bits, uniform in [0, 1), against doc_share. */
static bool generated_prompt(const sp_distill_opts *o, uint64_t r) {
    return (double)(r >> 11) * 0x1p-53 >= o->doc_share;
}

/* Whether a generated chat prompt r is one the model wrote itself: r's
 * low 10 bits (apart from the ones above) against self_share. */
static bool self_written(const sp_distill_opts *o, uint64_t r) {
    return o->chat && generated_prompt(o, r) && (double)(r & 0x3ff) / 1024.0 < o->self_share;
}

/* Whether a generated chat request r takes its topic from the snippet:
 * bits 10-19 of r against topic_share. */
static bool topic_request(const sp_distill_opts *o, uint64_t r) {
    return o->chat && (double)((r >> 10) & 0x3ff) / 1024.0 < o->topic_share;
}

/* The prompt for one answer.  Chat: with probability doc_share a request
 * about the snippet (prompts.c: summaries, answers from it, conversions,
 * code edits), else a generated request: with probability self_share one
 * the model wrote itself (self_request, see below), else an everyday
 * request or word problem from templates, the everyday ones with
 * probability topic_share about a word of the snippet.  Text:
 * with probability doc_share the snippet to continue, else a generated
 * start of prose or code.  The mix decides what the head is good at: a
 * head learns the kinds of answer it sees (BENCHMARKS.md, fourth to sixth
 * rounds). */
static char *make_prompt(const sp_distill_opts *o, const sp_tokenizer *tok, const sp_gguf *g, const char *snip,
                         const char *lang, uint64_t r, const char *self_request, char topic[16], sp_err *err) {
    const bool generated = generated_prompt(o, r);
    topic[0] = 0;
    sp_rng rr = { r };
    if (!o->chat && !generated) return sp_xstrdup(snip);
    if (!o->chat) {
        char *start = sp_xmalloc(512);
        sp_distill_opener(start, 512, &rr);
        return start;
    }
    char *user;
    if (generated && self_request) user = sp_xstrdup(self_request);
    else if (generated) {
        sp_rng tr = { r ^ 0x70b1c5ULL };
        if (!topic_request(o, r) || !sp_distill_topic(snip, topic, 16, &tr)) topic[0] = 0;
        user = sp_xmalloc(512);
        if (!sp_distill_request(user, 512, topic[0] ? topic : NULL, &rr)) topic[0] = 0;   /* a word problem */
    } else user = sp_distill_doc_request(snip, lang, &rr);
    const sp_chat_msg msg = { "user", user };
    char *text = NULL;
    sp_chat_tmpl *ct = NULL;
    int rc = sp_chat_tmpl_for_model(g, tok, NULL, NULL, NULL, &ct, err);
    if (!rc && !ct) rc = sp_err_set(err, "the model has no chat template (train on text only)");
    if (!rc) rc = sp_chat_render(ct, &msg, 1, true, &text, err);
    sp_chat_tmpl_free(ct);
    free(user);
    return rc ? NULL : text;
}

/* Cuts s to at most want bytes, at a line end where there is one in its
 * second half, else at a character boundary. */
static void shorten(char *s, size_t want) {
    size_t n = strlen(s);
    if (n <= want) return;
    n = want;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    const char *nl = memrchr(s, '\n', n);
    if (nl && (size_t)(nl - s) > want / 2) n = (size_t)(nl - s);
    s[n] = 0;
}

/* The tokens of a prompt about a snippet of the text, within budget
 * tokens.  A chat prompt must fit whole: cut at its end it would lose the
 * template's assistant header, and the model would go on with the user's
 * text instead of answering it (700 characters of code are ~200 tokens).
 * So the snippet shrinks until the prompt fits; a continuation prompt is
 * cut to the budget.  seq->n = 0 when none fits. */
static int fit_prompt(const sp_distill_opts *o, const sp_tokenizer *tok, const sp_gguf *g, char *snip,
                      const char *lang, uint64_t r, const char *self_request, int budget, sp_tokens *seq,
                      char topic[16], sp_err *err) {
    for (int tries = 0; tries < 8; tries++) {
        char *prompt = make_prompt(o, tok, g, snip, lang, r, self_request, topic, err);
        if (!prompt) return -1;
        seq->n = 0;
        const int rc = sp_tokenize(tok, prompt, strlen(prompt), sp_tokenizer_add_bos(tok), o->chat, seq, err);
        free(prompt);
        if (rc) return -1;
        if (seq->n <= budget) return 0;
        if (!o->chat) { seq->n = budget; return 0; }
        const size_t len = strlen(snip);
        if (len < 64) break;
        shorten(snip, (size_t)((double)len * budget / seq->n * 0.95));
    }
    seq->n = 0;
    return 0;
}

/* A snippet of about `chars` characters from a random line start. */
static char *snippet(const char *text, size_t len, size_t chars, sp_rng *rng) {
    size_t at = len > chars ? (size_t)(sp_rng_next(rng) % (len - chars)) : 0;
    while (at > 0 && text[at - 1] != '\n') at--;
    size_t n = len - at < chars ? len - at : chars;
    while (n > 0 && at + n < len && ((unsigned char)text[at + n] & 0xC0) == 0x80) n--;   /* whole characters */
    char *s = sp_xmalloc(n + 1);
    memcpy(s, text + at, n);
    s[n] = 0;
    return s;
}

/* ----------------------------------------------------------------------------
 * Requests the model writes itself
 * ------------------------------------------------------------------------- */

/* An instruct model given its template's opening of a user turn, and
 * nothing after it, writes a request as its users would (Magpie: Xu et
 * al., 2024): requests of the kinds and wording it was tuned on, which
 * templates and word lists reach only in part.  At half the generated
 * requests it made SmolLM2's head worse on the benchmark's chat and math
 * (its requests are long and open, the word problems fewer: BENCHMARKS.md,
 * thirteenth round), so train-draft leaves it off unless asked. */
#define DS_REQ_TOKENS 96             /* longest request kept; longer ones are dropped unfinished */

typedef struct reqpool {
    char **text;                     /* requests not used yet: text[at .. n) */
    int at, n, cap;
    uint64_t made;                   /* requests asked for (each one's sampling seed) */
} reqpool;

typedef struct request {
    sp_tokens toks;                  /* the request, end of turn excluded */
    const sp_tokenizer *tok;
    bool ended;                      /* its turn ended */
} request;

static sp_emit_result on_request(void *ud, int32_t tok, bool drafted, const float *logits) {
    (void)drafted; (void)logits;
    request *q = ud;
    if (sp_tokenizer_is_eog(q->tok, tok)) { q->ended = true; return SP_EMIT_STOP; }
    sp_tokens_push(&q->toks, tok);
    return SP_EMIT_CONTINUE;
}

/* The tokens of the template up to a user message's first character. */
static int user_turn_opening(const sp_tokenizer *tok, const sp_gguf *g, sp_tokens *out, sp_err *err) {
    static const char mark[] = "\x01request\x01";
    sp_chat_tmpl *ct = NULL;
    int rc = sp_chat_tmpl_for_model(g, tok, NULL, NULL, NULL, &ct, err);
    if (!rc && !ct) rc = sp_err_set(err, "the model has no chat template (train on text only)");
    char *text = NULL;
    const sp_chat_msg msg = { "user", mark };
    if (!rc) rc = sp_chat_render(ct, &msg, 1, false, &text, err);
    sp_chat_tmpl_free(ct);
    if (rc) return -1;
    const char *at = strstr(text, mark);
    if (!at || at == text) rc = sp_err_set(err, "distill: the chat template has no opening before a user message");
    else rc = sp_tokenize(tok, text, (size_t)(at - text), sp_tokenizer_add_bos(tok), true, out, err);
    free(text);
    return rc;
}

/* A finished request's text, or NULL when it is not one to keep: it must
 * end its turn, hold no special token and have three words or more. */
static char *request_text(const request *q) {
    if (!q->ended) return NULL;
    size_t len = 0, cap = 64;
    char *s = sp_xmalloc(cap);
    for (int i = 0; i < q->toks.n; i++) {
        if (sp_tokenizer_is_control(q->tok, q->toks.ids[i])) { free(s); return NULL; }
        char piece[256];
        const size_t n = sp_token_piece(q->tok, q->toks.ids[i], false, piece, sizeof piece);
        if (n >= sizeof piece) { free(s); return NULL; }
        while (len + n + 1 > cap) s = sp_xrealloc(s, cap *= 2);
        memcpy(s + len, piece, n);
        len += n;
    }
    s[len] = 0;
    size_t a = 0;
    while (len > 0 && isspace((unsigned char)s[len - 1])) s[--len] = 0;
    while (a < len && isspace((unsigned char)s[a])) a++;
    memmove(s, s + a, len - a + 1);
    int words = 0;
    for (const char *c = s; *c; c++) words += !isspace((unsigned char)*c) && (c == s || isspace((unsigned char)c[-1]));
    if (words < 3 || utf8_valid_prefix((const unsigned char *)s, strlen(s)) != strlen(s)) { free(s); return NULL; }
    return s;
}

/* Steps the context until its sequences end and removes the `added` ones
 * (ids); rc is an earlier failure, kept (then nothing runs).  Returns rc
 * or the first sequence's failure. */
static int run_to_end(sp_ctx *ctx, const int *ids, int added, int rc, sp_err *err) {
    if (!rc) while (sp_ctx_step(ctx) > 0) {}
    for (int i = 0; i < added; i++) {
        if (!rc && sp_ctx_seq_finish(ctx, ids[i]) == SP_FINISH_ERROR)
            rc = sp_err_set(err, "distill: %s", sp_ctx_seq_error(ctx, ids[i]));
        sp_ctx_remove(ctx, ids[i]);
    }
    return rc;
}

/* Has the model write n requests in the context's slots (sampled at
 * temperature 1, top-k 40, top-p 0.95) and adds the ones to keep to the
 * pool. */
static int write_requests(sp_ctx *ctx, const sp_tokens *opening, int n, uint64_t seed, reqpool *pool,
                          sp_err *err) {
    request q[64] = { 0 };
    int ids[64] = { 0 }, added = 0, rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        q[i].tok = sp_ctx_tokenizer(ctx);
        sp_seq_params p = sp_seq_default_params();
        p.draft_max = 0;
        p.use_cache = false;
        p.prompt = opening->ids;
        p.n_prompt = opening->n;
        p.max_tokens = DS_REQ_TOKENS;
        p.sampling.temperature = 1.0f;
        p.sampling.top_k = 40;
        p.sampling.top_p = 0.95f;
        p.sampling.seed = seed ^ (0x5e1f0000ULL + pool->made++);
        p.emit = on_request;
        p.ud = &q[i];
        if ((ids[i] = sp_ctx_add(ctx, &p, err)) < 0) rc = -1;
        else added++;
    }
    rc = run_to_end(ctx, ids, added, rc, err);
    for (int i = 0; i < n; i++) {
        char *t = rc ? NULL : request_text(&q[i]);
        if (t) {
            SP_VEC_GROW(pool->text, pool->cap, (size_t)pool->n + 1);
            pool->text[pool->n++] = t;
        }
        sp_tokens_free(&q[i].toks);
    }
    return rc;
}

/* Fills the pool to at least want requests (a few batches at most: a
 * model that seldom ends its turn leaves the rest to templates). */
static int fill_requests(sp_ctx *ctx, const sp_tokens *opening, int want, int slots, uint64_t seed, reqpool *pool,
                         sp_err *err) {
    if (pool->at > 0) {                          /* drop the used ones */
        for (int i = 0; i < pool->at; i++) free(pool->text[i]);
        memmove(pool->text, pool->text + pool->at, (size_t)(pool->n - pool->at) * sizeof *pool->text);
        pool->n -= pool->at;
        pool->at = 0;
    }
    for (int tries = 0; pool->n < want && tries < 4; tries++)
        if (write_requests(ctx, opening, slots, seed, pool, err)) return -1;
    return 0;
}

static void free_requests(reqpool *pool) {
    for (int i = 0; i < pool->n; i++) free(pool->text[i]);
    free(pool->text);
}

/* Generates answers for a batch of prompts in the context's slots,
 * recording their rows as they go. */
static int answer_batch(sp_ctx *ctx, answer *a, int n, const sp_distill_opts *o, uint64_t seed, sp_err *err) {
    int ids[64] = { 0 };
    sp_drafter *rec[64] = { 0 };
    int rc = 0, added = 0;
    for (int i = 0; i < n && !rc; i++) {
        rec[i] = recorder_for(&a[i], o->tap_layers);
        sp_seq_params p = sp_seq_default_params();
        p.drafter = rec[i];
        p.draft_max = 1;             /* asked every round, proposes nothing: plain decoding */
        p.use_cache = false;         /* every row from position 0 */
        p.prompt = a[i].seq.ids;
        p.n_prompt = a[i].seq.n;
        p.max_tokens = o->seq_len - a[i].seq.n;   /* the answer fills the sequence */
        if (p.max_tokens > o->answer_tokens) p.max_tokens = o->answer_tokens;
        p.sampling.temperature = i % 2 ? 0.7f : 0.0f;   /* greedy answers, and sampled ones for variety */
        p.sampling.top_k = 40;
        p.sampling.top_p = 0.95f;
        p.sampling.seed = seed + (uint64_t)i;
        p.emit = on_answer;
        p.ud = &a[i];
        if ((ids[i] = sp_ctx_add(ctx, &p, err)) < 0) rc = -1;
        else added++;
    }
    rc = run_to_end(ctx, ids, added, rc, err);
    for (int i = 0; i < n; i++) sp_drafter_free(rec[i]);
    return rc;
}

int sp_distill_make(sp_ctx *ctx, const sp_distill_opts *o, const char *out_path, sp_distill_progress progress,
                    void *ud, sp_err *err) {
    const sp_model *m = sp_ctx_model(ctx);
    const sp_tokenizer *tok = sp_ctx_tokenizer(ctx);
    corpus c = { 0 };
    for (int i = 0; i < o->n_paths; i++) walk(&c, o->paths[i], 0);
    if (c.n == 0) return sp_err_set(err, "distill: no text files under the data paths");
    sp_rng rng = { o->seed ^ 0x5eedULL };
    for (int i = c.n - 1; i > 0; i--) {          /* shuffle the files */
        const int j = (int)(sp_rng_next(&rng) % (uint64_t)(i + 1));
        char *t = c.paths[i]; c.paths[i] = c.paths[j]; c.paths[j] = t;
    }
    recorder r = { .m = m, .o = o };
    r.ws = sp_workspace_create(m, DS_CHUNK, sp_ctx_pool(ctx));
    r.logits = sp_alloc_aligned((size_t)DS_CHUNK * m->hp.n_vocab * sizeof(float));
    r.taps = sp_alloc_aligned((size_t)DS_CHUNK * 3 * m->hp.n_embd * sizeof(float));
    r.f = fopen(out_path, "wb");
    int rc = r.f ? write_header(&r) : sp_err_set(err, "distill: cannot create %s: %s", out_path, strerror(errno));
    const int slots = sp_ctx_n_slots(ctx) < 64 ? sp_ctx_n_slots(ctx) : 64;
    answer *ans = sp_xcalloc((size_t)slots, sizeof *ans);
    const uint64_t answer_goal = (uint64_t)((double)o->max_tokens * o->answer_share);
    uint64_t answer_tokens = 0;
    int unfit = 0;                   /* prompts that did not fit in half a sequence */
    reqpool pool = { 0 };
    sp_tokens opening = { 0 };       /* the template's user-turn opening (self-written requests) */
    int self_used = 0, topics_used = 0;
    if (!rc && o->chat && o->self_share > 0) rc = user_turn_opening(tok, m->gguf, &opening, err);
    for (int fi = 0; !rc && fi < c.n && r.n_tokens < (uint64_t)o->max_tokens; fi++) {
        size_t len;
        char *text = read_text(c.paths[fi], &len);
        if (!text) continue;
        /* answers while they are below their share of what is recorded */
        const bool want_answers = answer_tokens < answer_goal &&
                                  (double)answer_tokens <= o->answer_share * (double)r.n_tokens;
        if (want_answers) {
            /* one batch of answers about snippets of this file */
            int na = 0;
            if (opening.n) rc = fill_requests(ctx, &opening, slots, slots, o->seed + (uint64_t)fi, &pool, err);
            for (int tries = 0; na < slots && !rc && tries < 2 * slots; tries++) {
                char *snip = snippet(text, len, (size_t)o->seq_len * 2, &rng);
                answer_reset(&ans[na]);
                const uint64_t pr = sp_rng_next(&rng);
                const char *self = self_written(o, pr) && pool.at < pool.n ? pool.text[pool.at++] : NULL;
                if (self && self_used++ == 0 && o->stats)
                    snprintf(o->stats->first_request, sizeof o->stats->first_request, "%s", self);
                /* keep room for the answer */
                char topic[16];
                rc = fit_prompt(o, tok, m->gguf, snip, code_lang(c.paths[fi]), pr, self, o->seq_len / 2,
                                &ans[na].seq, topic, err);
                free(snip);
                if (rc || ans[na].seq.n == 0) {
                    unfit += !rc;
                    continue;
                }
                if (topic[0] && topics_used++ == 0 && o->stats)
                    snprintf(o->stats->first_topic, sizeof o->stats->first_topic, "%s", topic);
                ans[na].n_prompt = ans[na].seq.n;
                ans[na].n_dist = ans[na].seq.n - 1;
                ans[na].tok = tok;
                ans[na].V = m->hp.n_vocab;
                ans[na].k = o->top_k;
                ans[na].width = 3 * m->hp.n_embd;
                na++;
            }
            if (!rc) rc = answer_batch(ctx, ans, na, o, o->seed + (uint64_t)fi * 1000, err);
            for (int i = 0; i < na && !rc; i++)
                if (ans[i].seq.n > ans[i].n_prompt + 4) {
                    rc = record_answer(&r, &ans[i], err);
                    answer_tokens += (uint64_t)(ans[i].seq.n - 1 - ans[i].n_prompt);
                }
        } else {
            /* windows of the text itself */
            sp_tokens t = { 0 };
            rc = sp_tokenize(tok, text, len, false, false, &t, err);
            const int32_t bos = sp_tokenizer_bos(tok);
            const bool add_bos = sp_tokenizer_add_bos(tok) && bos >= 0;
            int32_t *win = sp_xmalloc((size_t)(o->seq_len + 1) * sizeof *win);
            for (int at = 0; !rc && at + 32 <= t.n && r.n_tokens < (uint64_t)o->max_tokens; at += o->seq_len) {
                int n = 0;
                if (add_bos) win[n++] = bos;
                for (int i = at; i < t.n && n < o->seq_len; i++) win[n++] = t.ids[i];
                rc = record(&r, win, n, 0, err);
            }
            free(win);
            sp_tokens_free(&t);
        }
        free(text);
        if (progress && !rc) progress(ud, r.n_tokens, (uint64_t)o->max_tokens, answer_tokens);
    }
    if (!rc && r.n_seqs == 0 && unfit > 0)
        rc = sp_err_set(err, "distill: no prompt fits in half of a %d-token sequence with room for an answer "
                        "(a longer --seq-len)", o->seq_len);
    if (!rc && r.n_seqs == 0) rc = sp_err_set(err, "distill: the data paths gave no usable text");
    if (!rc && (write_header(&r) || fflush(r.f)))
        rc = sp_err_set(err, "distill: writing %s: %s", out_path, strerror(errno));
    if (r.f && fclose(r.f) && !rc) rc = sp_err_set(err, "distill: closing %s: %s", out_path, strerror(errno));
    if (o->stats) {
        if (!self_used) o->stats->first_request[0] = 0;
        o->stats->self_requests = self_used;
        o->stats->self_made = pool.made;
        if (!topics_used) o->stats->first_topic[0] = 0;
        o->stats->topic_requests = topics_used;
    }
    free_requests(&pool);
    sp_tokens_free(&opening);
    for (int i = 0; i < c.n; i++) free(c.paths[i]);
    free(c.paths);
    for (int i = 0; i < slots; i++) answer_free(&ans[i]);
    free(ans);
    free(r.ids);
    free(r.probs);
    free(r.btaps);
    sp_free_aligned(r.logits);
    sp_free_aligned(r.taps);
    sp_workspace_free(r.ws);
    if (rc) unlink(out_path);
    return rc;
}

/* ----------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------- */

struct sp_distill {
    const uint8_t *map;
    size_t size;
    sp_distill_info info;
    size_t *off;                     /* (n_seqs) offset of each record */
};

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Walks the records, checking that each fits the file and its fields make
 * sense; fills the offsets. */
static int index_records(sp_distill *ds, sp_err *err) {
    const sp_distill_info *in = &ds->info;
    ds->off = sp_xmalloc((size_t)in->n_seqs * sizeof *ds->off);
    size_t at = DS_HEADER;
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < in->n_seqs; i++) {
        if (ds->size - at < 8) return sp_err_set(err, "distill data: sequence %u is cut off", i);
        const uint32_t n = rd32(ds->map + at), lf = rd32(ds->map + at + 4);
        if (n < 2 || n > 65536 || lf >= n) return sp_err_set(err, "distill data: sequence %u has %u tokens, loss from %u", i, n, lf);
        const size_t pb = (size_t)n * in->top_k * 2;
        const size_t bytes = 8 + (size_t)n * 4 + (size_t)n * in->top_k * 4 + pb + (4 - pb % 4) % 4 + (size_t)n * 3 * in->n_embd * 2;
        if (ds->size - at < bytes) return sp_err_set(err, "distill data: sequence %u is cut off", i);
        ds->off[i] = at;
        at += bytes;
        tokens += n;
    }
    if (tokens != in->n_tokens || at != ds->size)
        return sp_err_set(err, "distill data: %llu tokens in %zu bytes, the header says %llu tokens", (unsigned long long)tokens,
                          at, (unsigned long long)in->n_tokens);
    return 0;
}

sp_distill *sp_distill_open(const char *path, sp_err *err) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) { sp_err_set(err, "distill data: cannot open %s: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= DS_HEADER)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { sp_err_set(err, "distill data: %s is not a data file (too short or unreadable)", path); return NULL; }
    sp_distill *ds = sp_xcalloc(1, sizeof *ds);
    ds->map = map;
    ds->size = (size_t)st.st_size;
    sp_distill_info *in = &ds->info;
    int rc = 0;
    if (memcmp(map, DS_MAGIC, 8)) rc = sp_err_set(err, "distill data: %s is not a data file (bad magic)", path);
    if (!rc) {
        in->n_embd = (int)rd32(ds->map + 8);
        in->top_k = (int)rd32(ds->map + 12);
        memcpy(in->tap_layers, ds->map + 16, 12);
        in->n_seqs = rd32(ds->map + 28);
        memcpy(&in->n_tokens, ds->map + 32, 8);
        memcpy(in->fingerprint, ds->map + 40, 16);
        in->fingerprint[16] = 0;
        memcpy(&in->recipe, ds->map + 64, 8);
        if (in->n_embd < 1 || in->n_embd > 65536 || in->top_k < 1 || in->top_k > 256 || in->n_seqs > (1u << 24))
            rc = sp_err_set(err, "distill data: %s has a bad header", path);
    }
    if (!rc) rc = index_records(ds, err);
    if (rc) { sp_err_prefix(err, "%s", path); sp_distill_close(ds); return NULL; }
    return ds;
}

void sp_distill_close(sp_distill *ds) {
    if (!ds) return;
    munmap((void *)ds->map, ds->size);
    free(ds->off);
    free(ds);
}

const sp_distill_info *sp_distill_info_of(const sp_distill *ds) { return &ds->info; }

void sp_distill_get(const sp_distill *ds, uint32_t i, sp_distill_seq *out) {
    const uint8_t *p = ds->map + ds->off[i];
    const int k = ds->info.top_k;
    out->n = (int)rd32(p);
    out->loss_from = (int)rd32(p + 4);
    p += 8;
    out->tokens = (const int32_t *)(const void *)p;
    p += (size_t)out->n * 4;
    out->ids = (const int32_t *)(const void *)p;
    p += (size_t)out->n * k * 4;
    out->probs = (const uint16_t *)(const void *)p;
    const size_t pb = (size_t)out->n * k * 2;
    p += pb + (4 - pb % 4) % 4;
    out->taps = (const uint16_t *)(const void *)p;
}

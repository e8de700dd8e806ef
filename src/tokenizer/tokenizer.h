/*
 * tokenizer — text <-> token ids from the vocabulary stored in a GGUF file.
 *
 * Two algorithms, chosen by the file's `tokenizer.ggml.model`:
 *   "gpt2"  byte-level BPE (SmolLM2): pre-tokenizer regex chosen by
 *           `tokenizer.ggml.pre`, byte-to-unicode mapping, ranked merges.
 *   "llama" SentencePiece (Gemma 3): "▁" for spaces, score-ordered bigram
 *           merges, <0xXX> byte fallback, optional space prefix.
 * Special tokens (control / user-defined in `tokenizer.ggml.token_type`) are
 * matched in the text first, as llama.cpp does: user-defined tokens always
 * (Gemma's "\n", "\n\n", runs of spaces and tabs, HTML tags), control
 * tokens only when parse_special is set; longer texts win.
 *
 * The reference is llama.cpp (llama-vocab.cpp, unicode.cpp): ids, pieces and
 * the end-of-generation set match it exactly on the test models (see
 * tests/model/test_tokenizer_real.c and the golden data in tests/data/).
 * That includes its text-based rules: tokens such as "<|im_end|>",
 * "<end_of_turn>", "<|endoftext|>", "<eos>", "</s>", FIM tokens, ... end
 * generation and count as control tokens.
 *
 * BPE pre-tokenizers (tokenizer.ggml.pre): "smollm" (and starcoder, refact,
 * command-r, codeshell, exaone, minerva-7b), "gpt2"/"gpt-2" (phi-2, mpt, olmo,
 * jais), "default" (also used, with a notice, when the key is absent),
 * "llama3"/"llama-bpe" (llama-v3, falcon3) and "qwen2" (deepseek-r1-qwen,
 * stablelm2, megrez).  Any other value is a load error that lists these:
 * a wrong pre-tokenizer silently degrades a model, so it is refused.
 * smollm is checked against llama.cpp's golden data in the tests; all five
 * pattern sets also agreed exactly with llama-cpp-python 0.3.36 on 4000
 * random strings each, invalid UTF-8 included (a one-off differential run).
 *
 * The vocabulary strings are borrowed from the sp_gguf mapping: the gguf
 * handle must outlive the tokenizer.  A loaded tokenizer is read-only:
 * every function below may be called from several threads at once.
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include "base/base.h"
#include "gguf/gguf.h"
#include "jinja/jinja.h"

#include <jansson.h>

typedef struct sp_tokenizer sp_tokenizer;

/* A growable list of token ids, owned by the caller: zero-initialise, then
 * sp_tokens_free when done. */
typedef struct sp_tokens {
    int32_t *ids;
    int n, cap;
} sp_tokens;
void sp_tokens_push(sp_tokens *t, int32_t id);
void sp_tokens_free(sp_tokens *t);

typedef enum sp_tok_kind { SP_TOK_BPE, SP_TOK_SPM } sp_tok_kind;

/* Loads the vocabulary; NULL + err if the metadata is missing, inconsistent
 * (array lengths differ, duplicate token texts, BOS/EOS/UNK ids out of
 * range) or of an unsupported kind or pre-tokenizer.  Other special ids out
 * of range (a padding id equal to the vocabulary size, seen in converted
 * files) are dropped with a notice, as llama.cpp does.  Defaults when keys
 * are absent: SPM bos 1, eos 2, unk 0, add_bos and add_space_prefix true;
 * BPE no bos/eos/unk, add_bos false. */
sp_tokenizer *sp_tokenizer_load(const sp_gguf *g, sp_err *err);
void sp_tokenizer_free(sp_tokenizer *t);

sp_tok_kind sp_tokenizer_kind(const sp_tokenizer *t);
const char *sp_tokenizer_kind_name(const sp_tokenizer *t); /* "gpt2 (BPE, pre=smollm)", ... */
int32_t sp_tokenizer_n_vocab(const sp_tokenizer *t);
int32_t sp_tokenizer_bos(const sp_tokenizer *t);            /* -1 if none */
int32_t sp_tokenizer_eos(const sp_tokenizer *t);            /* -1 if none */
bool sp_tokenizer_add_bos(const sp_tokenizer *t);           /* the file's default */
/* True for tokens that end generation: EOS, EOT-like tokens (<|im_end|>,
 * <end_of_turn>, <|endoftext|>, <eos>, ...). */
bool sp_tokenizer_is_eog(const sp_tokenizer *t, int32_t id);
/* True if ids mean the same in both vocabularies: kind, size, BOS/EOS and
 * every token's text, control and end-of-generation attributes (compare.c). */
bool sp_tokenizer_same_vocab(const sp_tokenizer *a, const sp_tokenizer *b);
/* Id of a token by its exact text, or -1. */
int32_t sp_tokenizer_find(const sp_tokenizer *t, const char *text);
/* True if the token is a control token (rendered as nothing unless asked). */
bool sp_tokenizer_is_control(const sp_tokenizer *t, int32_t id);

/* Appends the ids of text[0..len) to out.  add_bos prepends BOS (if the
 * vocabulary has one); parse_special recognises control-token texts such as
 * "<|im_start|>" in the text.  Returns 0, or -1 + err (e.g. a byte the
 * vocabulary cannot represent).  Invalid UTF-8 is never rejected: SPM
 * tokenizes it as <0xXX> byte tokens (the bytes survive a round trip); BPE,
 * like llama.cpp, reads each invalid byte as U+FFFD (EF BF BD).  Text may
 * contain NUL bytes. */
int sp_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, sp_tokens *out, sp_err *err);
/* As sp_tokenize with parse_special, except that where any byte of a
 * control token's text has plain[i] != 0 (text that came from a message,
 * not from the chat template) it is read as without parse_special.  The stretches between special
 * tokens are tokenized whole, so without special-token text in the plain
 * bytes the ids equal sp_tokenize(parse_special = true). */
int sp_tokenize_masked(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                       const uint8_t *plain, sp_tokens *out, sp_err *err);

/* The bytes a token stands for (byte-level BPE decoded, "▁" -> " ",
 * <0xXX> -> that byte; user-defined tokens as their text).  Control and
 * unknown tokens give their text only if render_special; unused/undefined
 * tokens give nothing.  Writes up to cap bytes (no NUL; buf may be NULL if
 * cap is 0) and returns the full length (which may exceed cap, as
 * snprintf).  Invalid id: returns 0.  No leading space is stripped (the
 * SPM add_space_prefix space shows as a leading " "). */
size_t sp_token_piece(const sp_tokenizer *t, int32_t id, bool render_special, char *buf,
                      size_t cap);
/* Bytes of the longest token text; no piece is longer. */
uint32_t sp_tokenizer_max_token_len(const sp_tokenizer *t);

/* ------------------------------------------------------------------------
 * Incremental detokenization for streaming: feeds token ids one by one and
 * releases only complete UTF-8 characters, holding back a trailing partial
 * sequence until the bytes that complete it arrive.
 * ---------------------------------------------------------------------- */
typedef struct sp_detok {
    char pending[16];
    int n_pending;
} sp_detok;

/* A cap for sp_detok_push/flush that always holds the released text
 * (pending bytes + one piece, every byte possibly becoming U+FFFD, + NUL). */
#define SP_DETOK_CAP(max_token_len) (3 * ((size_t)(max_token_len) + 4) + 1)

/* Appends the piece of id to the stream; writes the text that became
 * complete to out (NUL-terminated, out must hold >= cap bytes) and returns
 * its length.  An invalid byte sequence is released as U+FFFD (one per
 * maximal invalid subpart).  If the text does not fit in cap - 1 bytes, out
 * holds the whole characters that fit and the return value is the full
 * length (as snprintf); the rest is lost, so size out with SP_DETOK_CAP.
 * Zero-initialise the sp_detok to start a stream. */
size_t sp_detok_push(sp_detok *d, const sp_tokenizer *t, int32_t id, bool render_special,
                     char *out, size_t cap);
/* Releases whatever is pending at the end of the stream (invalid -> U+FFFD). */
size_t sp_detok_flush(sp_detok *d, char *out, size_t cap);

/* ------------------------------------------------------------------------
 * Chat templates (chat.c).  Every template is Jinja, rendered by the jinja
 * layer: the model's own `tokenizer.chat_template`, a file the user gives,
 * or a built-in one by name (chatml, gemma, llama3, mistral, phi3, qwen).
 * Rendered text records which bytes came from the messages, so special
 * tokens are recognised only where the template wrote them: a message
 * cannot open or close a turn.
 * ---------------------------------------------------------------------- */
typedef struct sp_chat_msg {
    const char *role;       /* "system", "user", "assistant", ... */
    const char *content;
} sp_chat_msg;

typedef struct sp_chat_tmpl sp_chat_tmpl;

/* "chatml, gemma, llama3, mistral, phi3, qwen" */
const char *sp_chat_builtin_names(void);
/* The Jinja source of a built-in template, or NULL for another name. */
const char *sp_chat_builtin_source(const char *name);
/* Parses template source (n bytes) known as `name` (for messages); bos and
 * eos are the texts the template sees as bos_token/eos_token (NULL = "").
 * NULL + err naming the line and construct when it cannot be rendered. */
sp_chat_tmpl *sp_chat_tmpl_parse(const char *name, const char *src, size_t n, const char *bos,
                                 const char *eos, sp_err *err);
/* The template for a model: the built-in `name` or the source `src` when
 * one is given (src wins; its name is src_name), else the file's
 * tokenizer.chat_template, else the architecture's built-in (gemma for
 * gemma*).  bos/eos texts come from the vocabulary.  Returns 0 with *out
 * NULL when the model has no template (a raw-prompt model), -1 + err when
 * the name is unknown or the template does not parse. */
int sp_chat_tmpl_for_model(const sp_gguf *g, const sp_tokenizer *t, const char *name, const char *src,
                           const char *src_name, sp_chat_tmpl **out, sp_err *err);
void sp_chat_tmpl_free(sp_chat_tmpl *ct);
/* "gguf" (the model's own), a built-in name, or the source's name. */
const char *sp_chat_tmpl_name(const sp_chat_tmpl *ct);
/* The Jinja source (as llama-server's /props reports it). */
const char *sp_chat_tmpl_source(const sp_chat_tmpl *ct);

/* Renders with the variables `data` (an object: messages, tools and other
 * request values; their strings count as message text) and `markup` (an
 * object whose strings count as template text; bos_token, eos_token and
 * add_generation_prompt are added unless present).  now: strftime_now's
 * time (seconds since the epoch, < 0 = the clock).  The text is exactly
 * the template's output (a BOS text included). */
int sp_chat_tmpl_apply(const sp_chat_tmpl *ct, json_t *data, json_t *markup, bool add_generation_prompt,
                       int64_t now, sp_jinja_out *out, sp_err *err);
/* Messages as JSON ({role, content} objects), tools a JSON array or NULL
 * (the template sees `tools` = none).  When the vocabulary adds BOS
 * itself (add_bos), a BOS text the template writes at the start is
 * removed, so the prompt does not begin with two. */
int sp_chat_tmpl_render_json(const sp_chat_tmpl *ct, json_t *messages, json_t *tools, bool add_generation_prompt,
                             sp_jinja_out *out, sp_err *err);
/* The same for role/content messages (NULL role or content: -1 + err),
 * into a malloc'd string. */
int sp_chat_render(const sp_chat_tmpl *ct, const sp_chat_msg *msgs, int n_msgs, bool add_generation_prompt,
                   char **out, sp_err *err);
/* Renders and appends the prompt's ids (BOS first if add_bos and the
 * vocabulary has one).  Special-token text inside a message stays literal;
 * without such text the ids equal sp_tokenize(rendered, parse_special). */
int sp_chat_tokenize_json(const sp_chat_tmpl *ct, const sp_tokenizer *t, json_t *messages, json_t *tools,
                          bool add_generation_prompt, bool add_bos, sp_tokens *out, sp_err *err);
int sp_chat_tokenize(const sp_chat_tmpl *ct, const sp_tokenizer *t, const sp_chat_msg *msgs, int n_msgs,
                     bool add_generation_prompt, bool add_bos, sp_tokens *out, sp_err *err);
/* role/content messages as a JSON array (new reference); NULL + err on a
 * NULL role or content. */
json_t *sp_chat_msgs_json(const sp_chat_msg *msgs, int n_msgs, sp_err *err);

/* The default system prompt the file's template inserts when the first
 * message is not a system one (a literal "<|im_start|>system\n...<|im_end|>"
 * guarded by "!= 'system'"), copied into buf; NULL if there is none or it
 * does not fit in cap bytes with its NUL.  (The tool-call prompt of the
 * server keeps it when it adds its own system message.) */
const char *sp_chat_default_system(const sp_gguf *g, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * Stop strings for streamed generation (stop.c).  Generated text is pushed
 * as it is detokenized; a byte is released only once no stop string can
 * begin at it (the longest tail that is a proper prefix of a stop string
 * is held back, never half a UTF-8 character), so a stop string split over
 * several tokens is found before any of it is released, and the released
 * text ends right before the earliest stop string.  Text may contain NUL.
 * ---------------------------------------------------------------------- */
typedef struct sp_stop {
    char **stops;            /* (n_stops) owned copies */
    size_t *lens;            /* (n_stops) */
    int n_stops;
    char *buf;               /* pending text, owned */
    size_t n, cap;
    size_t out_n;            /* bytes handed out by the last release */
    bool hit;                /* a stop string appeared */
} sp_stop;

/* Copies the stop strings; an empty (or NULL) one gives -1 + err.  With no
 * stop strings every pushed byte is released at once. */
int sp_stop_init(sp_stop *s, const char *const *stops, int n_stops, sp_err *err);
void sp_stop_free(sp_stop *s);
/* Appends n bytes of generated text.  Returns true once a stop string has
 * appeared (now or earlier): the text from its first byte on is dropped and
 * later pushes are ignored. */
bool sp_stop_push(sp_stop *s, const char *text, size_t n);
/* The text that is safe to show now, consumed: *len bytes at the returned
 * pointer (owned by s, valid until the next push or release).  All pending
 * text when final or after a stop string appeared. */
const char *sp_stop_release(sp_stop *s, bool final, size_t *len);
bool sp_stop_hit(const sp_stop *s);

#endif /* SP_TOKENIZER_H */

/*
 * tokenizer — text <-> token ids from the vocabulary stored in a GGUF file.
 *
 * Two algorithms, chosen by the file's `tokenizer.ggml.model`:
 *   "gpt2"  byte-level BPE (SmolLM2): pre-tokenizer regex chosen by
 *           `tokenizer.ggml.pre`, byte-to-unicode mapping, ranked merges.
 *   "llama" SentencePiece (Gemma 3): "▁" for spaces, score-ordered bigram
 *           merges, <0xXX> byte fallback, optional space prefix.
 * Special tokens (control / user-defined in `tokenizer.ggml.token_type`) are
 * matched in the text first when parse_special is set, as llama.cpp does.
 *
 * The vocabulary strings are borrowed from the sp_gguf mapping: the gguf
 * handle must outlive the tokenizer.
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include "base/base.h"
#include "gguf/gguf.h"

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
 * (array lengths differ, ids out of range) or of an unsupported kind. */
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
/* Id of a token by its exact text, or -1. */
int32_t sp_tokenizer_find(const sp_tokenizer *t, const char *text);
/* True if the token is a control token (rendered as nothing unless asked). */
bool sp_tokenizer_is_control(const sp_tokenizer *t, int32_t id);

/* Appends the ids of text[0..len) to out.  add_bos prepends BOS (if the
 * vocabulary has one); parse_special recognises control-token texts such as
 * "<|im_start|>" in the text.  Returns 0, or -1 + err (e.g. invalid input
 * for the vocabulary).  Invalid UTF-8 is tokenized as bytes, never rejected
 * silently. */
int sp_tokenize(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                bool parse_special, sp_tokens *out, sp_err *err);

/* The bytes a token stands for (byte-level BPE decoded, "▁" -> " ",
 * <0xXX> -> that byte).  Control tokens give their text only if
 * render_special.  Writes up to cap bytes (no NUL) and returns the full
 * length (which may exceed cap, as snprintf).  Invalid id: returns 0. */
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
 * Chat templates.  The format is chosen from `tokenizer.chat_template` when
 * present (recognised by its markers), else from the architecture.
 * ---------------------------------------------------------------------- */
typedef enum sp_chat_format {
    SP_CHAT_NONE = 0,   /* raw prompt */
    SP_CHAT_CHATML,     /* <|im_start|>role\n...<|im_end|>\n  (SmolLM2) */
    SP_CHAT_GEMMA,      /* <start_of_turn>user\n...<end_of_turn>\n (Gemma; system folded into the first user turn) */
} sp_chat_format;

typedef struct sp_chat_msg {
    const char *role;       /* "system", "user", "assistant" */
    const char *content;
} sp_chat_msg;

sp_chat_format sp_chat_detect(const sp_gguf *g);
const char *sp_chat_format_name(sp_chat_format f);
/* Renders messages (and, if add_generation_prompt, the opening of the
 * assistant turn) into a newly malloc'd string owned by the caller.  Unknown
 * roles or a format of NONE give -1 + err.  default_system, if not NULL, is
 * inserted when the first message is not a system message (SmolLM2's
 * template does this). */
int sp_chat_render(sp_chat_format f, const sp_chat_msg *msgs, int n_msgs,
                   bool add_generation_prompt, const char *default_system, char **out,
                   sp_err *err);
/* The default system prompt the file's template inserts, or NULL. */
const char *sp_chat_default_system(const sp_gguf *g, char *buf, size_t cap);

#endif /* SP_TOKENIZER_H */

/*
 * grammar — constrained generation: GBNF grammars over UTF-8, the token
 * masks they imply for a vocabulary, and JSON schemas turned into GBNF.
 *
 * Three objects, split by lifetime:
 *
 *   sp_grammar  a parsed GBNF grammar (llama.cpp's dialect, so users'
 *               grammar files work): rules of alternatives of sequences of
 *               literals, character classes ([a-z], [^"\\], .), rule
 *               references, groups and the repetitions * + ? {m} {m,}
 *               {m,n}.  The start rule is "root".  Immutable once parsed;
 *               may be shared by threads.
 *   sp_gvocab   a tokenizer's token texts as a byte trie, built once per
 *               model (immutable; shared by threads).  Control tokens never
 *               match text; end-of-generation tokens are allowed exactly
 *               when the grammar has been completed.
 *   sp_gmatch   one sequence's position in a grammar: a set of pushdown
 *               stacks (interned, so equal positions compare by pointer)
 *               plus the bytes of a code point split across tokens.  It
 *               caches the mask of every distinct position it has computed
 *               (in a JSON string or a number the position repeats after
 *               every character, so the wide masks are computed once).
 *               Used by one thread at a time.
 *
 * A matcher advances only over tokens that were emitted (the round loop
 * checks drafts with sp_gmatch_check, which leaves it unchanged), so the
 * speculative output under a grammar is the plain constrained output.
 *
 * Lazy grammars (tool calls with tool_choice "auto"): a matcher made with
 * a trigger text allows every token until the emitted text contains the
 * trigger; from the byte after the trigger the grammar applies (the rest
 * of the token that completed the trigger is fed to it).
 */
#ifndef SP_GRAMMAR_H
#define SP_GRAMMAR_H

#include "base/base.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>

typedef struct sp_grammar sp_grammar;
typedef struct sp_gvocab sp_gvocab;
typedef struct sp_gmatch sp_gmatch;

/* --------------------------------------------------------------------------
 * Grammars (gbnf.c)
 * ----------------------------------------------------------------------- */

/* Parses GBNF text (len bytes; need not be NUL-terminated).  NULL + err on
 * a syntax error ("grammar: line L, column C: ..."), an undefined rule (named),
 * a missing "root" rule, left recursion that can never consume input, an
 * empty character class or one with a reversed range, invalid UTF-8, or a
 * grammar over the size limits (rules, nesting, repetition counts). */
sp_grammar *sp_grammar_parse(const char *text, size_t len, sp_err *err);
void sp_grammar_free(sp_grammar *g);
/* Number of rules after parsing (repetitions and groups add generated rules). */
int sp_grammar_n_rules(const sp_grammar *g);

/* --------------------------------------------------------------------------
 * Vocabularies (vocab.c)
 * ----------------------------------------------------------------------- */

/* The token texts of t (sp_token_piece without special rendering) as a trie.
 * Borrowing t: it must outlive the sp_gvocab. */
sp_gvocab *sp_gvocab_create(const sp_tokenizer *t, sp_err *err);
void sp_gvocab_free(sp_gvocab *v);
int sp_gvocab_n_vocab(const sp_gvocab *v);

/* --------------------------------------------------------------------------
 * Matchers (match.c, mask.c)
 * ----------------------------------------------------------------------- */

/* A matcher at the start of g (both borrowed).  trigger: NULL or "" for a
 * grammar that applies from the first token, else the text that switches
 * it on (lazy).  v may be NULL for a text-only matcher (tests, checking a
 * string against a grammar): then only the *_bytes functions and the
 * queries without tokens may be used.  NULL + err only on bad arguments. */
sp_gmatch *sp_gmatch_create(const sp_grammar *g, const sp_gvocab *v, const char *trigger, sp_err *err);
void sp_gmatch_free(sp_gmatch *m);

/* False while a lazy matcher waits for its trigger: every token is allowed
 * and sp_gmatch_mask / sp_gmatch_forced have nothing to say. */
bool sp_gmatch_active(const sp_gmatch *m);
/* The grammar is complete and nothing may follow: only end-of-generation
 * tokens are allowed. */
bool sp_gmatch_must_end(const sp_gmatch *m);
/* An end-of-generation token was accepted: the output is complete and
 * only further end-of-generation tokens are allowed (for a caller that
 * keeps generating past them). */
bool sp_gmatch_ended(const sp_gmatch *m);

/* Is token tok allowed next?  (Walks only tok's bytes: cheap.) */
bool sp_gmatch_allows(sp_gmatch *m, int32_t tok);
/* Advances over an emitted token.  0, or -1 + err if the grammar does not
 * allow it (the matcher is then unchanged). */
int sp_gmatch_accept(sp_gmatch *m, int32_t tok, sp_err *err);
/* Text-level: advances over n bytes (a code point may be split across
 * calls).  0, or -1 + err naming the byte offset (matcher unchanged). */
int sp_gmatch_accept_bytes(sp_gmatch *m, const char *bytes, size_t n, sp_err *err);
/* The text so far is a complete sentence of the grammar (an
 * end-of-generation token would be allowed). */
bool sp_gmatch_can_end(const sp_gmatch *m);
/* How many of tokens[0..n), taken in order from the current position, the
 * grammar allows (n if all); the matcher is unchanged. */
int sp_gmatch_check(sp_gmatch *m, const int32_t *tokens, int n);

/* The allowed tokens at the current position as a bitset of n_vocab bits
 * (bit t of word t / 64), owned by the matcher and valid until its next
 * call; *n_allowed gets their number (0 = a dead end: nothing can follow).
 * Every token allowed when the matcher is inactive. */
const uint64_t *sp_gmatch_mask(sp_gmatch *m, int *n_allowed);
/* Sets logits[t] = -INFINITY for every token the mask forbids; returns the
 * number of allowed tokens. */
int sp_gmatch_apply(sp_gmatch *m, float *logits);

/* The text the grammar forces from the current position: code points that
 * are the only possible continuation, up to the first point where the
 * grammar branches or may end (at most cap - 1 bytes, NUL-terminated);
 * returns its length in bytes. */
size_t sp_gmatch_forced_text(sp_gmatch *m, char *buf, size_t cap);
/* Forced tokens to propose as certain drafts: the forced text tokenized
 * (the prefix of those tokens the grammar allows), or, when the grammar
 * must end, the end-of-generation token.  Returns how many were written
 * (at most cap). */
int sp_gmatch_forced(sp_gmatch *m, int32_t *out, int cap);

/* tok is an end-of-generation token (what sp_gmatch_forced gives when the
 * grammar must end). */
bool sp_gmatch_is_end(const sp_gmatch *m, int32_t tok);
/* The forced tokens after prefix[0..n_prefix) (tokens not yet emitted: a
 * drafter's proposal), as sp_gmatch_forced would give them once the
 * prefix is accepted; 0 if the grammar forbids the prefix.  The matcher
 * is unchanged. */
int sp_gmatch_forced_after(sp_gmatch *m, const int32_t *prefix, int n_prefix, int32_t *out, int cap);

/* The forced tokens after prefix (n_prefix may be 0) that are safe to
 * propose as drafts: as sp_gmatch_forced_after, without the last token
 * when a longer token that begins with its text also fits there (the
 * forced text ends where the grammar branches, and a model may spell the
 * end merged with what follows, as `":` or `": "` after `"name`). */
int sp_gmatch_forced_safe(sp_gmatch *m, const int32_t *prefix, int n_prefix, int32_t *out, int cap);

typedef struct sp_gmatch_stats {
    int64_t masks;                   /* masks asked for */
    int64_t mask_misses;             /* of those, computed (not from the cache) */
    uint64_t mask_ns;                /* time computing masks (misses) */
} sp_gmatch_stats;
void sp_gmatch_get_stats(const sp_gmatch *m, sp_gmatch_stats *out);

/* --------------------------------------------------------------------------
 * JSON schemas (schema.c)
 * ----------------------------------------------------------------------- */

/* GBNF for the JSON values a schema accepts (text: the schema as JSON),
 * newly malloc'd; NULL + err naming the schema path of what is not
 * supported or invalid ("json_schema: /properties/age: unsupported keyword
 * \"patternProperties\"").  Whitespace between tokens is allowed, bounded
 * so a model cannot loop on it. */
char *sp_schema_to_gbnf(const char *text, size_t len, sp_err *err);
/* GBNF for any JSON object (response_format json_object). */
const char *sp_schema_any_object_gbnf(void);
/* The rules of one schema inside a larger grammar (tool calls: one
 * schema per function): appends to *gbnf (malloc'd and grown; *gbnf may
 * start NULL) rules whose names all begin with prefix ([a-z0-9-]+); the
 * rule for the value itself is named exactly prefix.  path names the
 * schema in errors ("tools[0].function.parameters").  0, or -1 + err. */
int sp_schema_append_rules(const json_t *schema, const char *prefix, const char *path, char **gbnf,
                           sp_err *err);

#endif /* SP_GRAMMAR_H */

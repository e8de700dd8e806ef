/*
 * spec — the generation loop.  (This issue: plain decoding; the drafter
 * seam and the speculative round loop build on the same emit contract.)
 *
 * Tokens are handed to the caller one at a time through an emit callback,
 * which decides when to stop (EOS, stop strings): the loop itself knows
 * nothing about text.
 */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include "base/base.h"
#include "model/model.h"
#include "sample/sample.h"

typedef enum sp_emit_result { SP_EMIT_CONTINUE = 0, SP_EMIT_STOP = 1 } sp_emit_result;
/* Called for every generated token, in order.  Returns SP_EMIT_STOP to end
 * the request after this token. */
typedef sp_emit_result (*sp_emit_fn)(void *ud, int32_t token);

typedef enum sp_finish {
    SP_FINISH_STOP = 0,      /* the callback stopped (EOS, stop string) */
    SP_FINISH_LENGTH = 1,    /* max_tokens reached */
    SP_FINISH_CONTEXT = 2,   /* the context window is full */
} sp_finish;

typedef struct sp_gen_stats {
    int n_prompt;            /* prompt tokens processed */
    int n_gen;               /* tokens generated (emitted) */
    int n_forward;           /* target forward passes after prefill */
    uint64_t prefill_ns;
    uint64_t decode_ns;      /* from the first sampled token to the end */
    sp_finish finish;
} sp_gen_stats;

/* Prefills prompt[0..n_prompt) into kv (which must be empty or hold a
 * prefix the caller wants kept), then samples up to max_tokens tokens.
 * The sampler's penalty history is the caller's business (accept prompt
 * tokens first if they should count).  Returns 0, or -1 + err. */
int sp_generate(const sp_model *m, sp_kv *kv, sp_workspace *ws, sp_sampler *s,
                const int32_t *prompt, int n_prompt, int max_tokens, sp_emit_fn emit, void *ud,
                sp_gen_stats *stats, sp_err *err);

#endif /* SP_SPEC_H */

/*
 * sample — choosing the next token from logits.
 *
 * Pipeline (the order of vLLM and the OpenAI API): logit bias, repetition /
 * presence / frequency penalties, then greedy if temperature == 0, else
 * temperature, top-k, top-p, min-p, and one draw.
 *
 * Randomness is keyed by (seed, position): the draw for the token at
 * sequence position `pos` is sp_rng_uniform(seed, pos, 0), never a running
 * generator.  The same seed gives the same text whatever batching or
 * speculation happens, which is what makes speculative decoding
 * reproducible at temperature > 0.
 *
 * Penalties look at the tokens given to sp_sampler_accept (the last
 * repeat_last_n of them).  Callers decide whether prompt tokens count: the
 * CLI accepts them (as llama.cpp does), the server does not (as OpenAI).
 */
#ifndef SP_SAMPLE_H
#define SP_SAMPLE_H

#include "base/base.h"

typedef struct sp_logit_bias {
    int32_t token;
    float bias;              /* added to the logit; -INFINITY bans the token */
} sp_logit_bias;

typedef struct sp_sampler_params {
    float temperature;       /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float repeat_penalty;    /* 1 = off (divides positive logits, multiplies negative) */
    float presence_penalty;  /* 0 = off (subtracted once if the token occurred) */
    float frequency_penalty; /* 0 = off (subtracted per occurrence) */
    int repeat_last_n;       /* window of accepted tokens the penalties see; -1 = all */
    uint64_t seed;
    const sp_logit_bias *bias; /* copied by sp_sampler_create */
    int n_bias;
} sp_sampler_params;

/* Greedy, no penalties, seed 0. */
sp_sampler_params sp_sampler_defaults(void);
/* Checks ranges (temperature >= 0 and finite, top_p in (0,1], min_p in [0,1],
 * top_k >= 0, penalties finite, bias tokens in [0, n_vocab)). */
int sp_sampler_validate(const sp_sampler_params *p, int n_vocab, sp_err *err);

/* One candidate of the final distribution. */
typedef struct sp_cand {
    int32_t id;
    float p;
} sp_cand;

typedef struct sp_sampler sp_sampler;

sp_sampler *sp_sampler_create(const sp_sampler_params *p, int n_vocab);
void sp_sampler_free(sp_sampler *s);
const sp_sampler_params *sp_sampler_params_of(const sp_sampler *s);
bool sp_sampler_is_greedy(const sp_sampler *s);
/* Forgets the accepted history. */
void sp_sampler_reset(sp_sampler *s);
/* A token entered the sequence (for penalties). */
void sp_sampler_accept(sp_sampler *s, int32_t token);
/* Removes the last n accepted tokens (used when a caller rewinds). */
void sp_sampler_unaccept(sp_sampler *s, int n);

/* The token for sequence position pos, given that position's logits. */
int32_t sp_sampler_sample(sp_sampler *s, const float *logits, uint64_t pos);

/* The final distribution (after every transform) as candidates in a fixed
 * order: by descending probability (ties by id) when top-k or top-p cut the
 * list, else by id.  Probabilities sum to 1 (computed in double).  Greedy
 * gives one candidate with p = 1.  The array is owned by the sampler and
 * valid until its next call. */
const sp_cand *sp_sampler_dist(sp_sampler *s, const float *logits, int *n_cands);
/* Inverse-CDF draw from a candidate list with uniform u in [0, 1). */
int32_t sp_cand_pick(const sp_cand *c, int n, double u);

#endif /* SP_SAMPLE_H */

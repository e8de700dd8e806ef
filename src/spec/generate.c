/* Plain decoding: one target forward per generated token. */
#include "spec/spec.h"

#include <string.h>

int sp_generate(const sp_model *m, sp_kv *kv, sp_workspace *ws, sp_sampler *s,
                const int32_t *prompt, int n_prompt, int max_tokens, sp_emit_fn emit, void *ud,
                sp_gen_stats *st, sp_err *err) {
    memset(st, 0, sizeof *st);
    if (n_prompt <= 0) return sp_err_set(err, "generate: the prompt is empty");
    float *logits = sp_alloc_aligned((size_t)m->hp.n_vocab * sizeof(float));
    int rc = -1;
    uint64_t t0 = sp_now_ns();
    if (sp_model_forward(m, kv, ws, prompt, n_prompt, SP_LOGITS_LAST, logits, err)) goto done;
    st->n_prompt = n_prompt;
    uint64_t t1 = sp_now_ns();
    st->prefill_ns = t1 - t0;
    st->finish = SP_FINISH_LENGTH;
    while (st->n_gen < max_tokens) {
        const int32_t tok = sp_sampler_sample(s, logits, (uint64_t)kv->n);
        sp_sampler_accept(s, tok);
        st->n_gen++;
        if (emit(ud, tok) == SP_EMIT_STOP) { st->finish = SP_FINISH_STOP; break; }
        if (st->n_gen == max_tokens) break;
        if (kv->n >= kv->n_ctx) { st->finish = SP_FINISH_CONTEXT; break; }
        if (sp_model_forward(m, kv, ws, &tok, 1, SP_LOGITS_LAST, logits, err)) goto done;
        st->n_forward++;
    }
    st->decode_ns = sp_now_ns() - t1;
    rc = 0;
done:
    sp_free_aligned(logits);
    return rc;
}

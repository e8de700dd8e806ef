/* Writing an EAGLE-3 draft head as a GGUF file in llama.cpp's `eagle3`
 * layout (see model.h), from float weights: what train-draft saves.
 *
 * What llama.cpp's loader needs is written as it expects it (the eagle3.*
 * keys with their exact types, the target's tokenizer, exactly the tensors
 * it creates, d2t as I64 absolute ids); what only specula uses goes under
 * specula.* keys, which llama.cpp ignores. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wtensor {
    const char *name;
    const float *data;               /* (rows, cols) floats */
    int64_t cols, rows;              /* rows = 1: a vector, always F32 */
} wtensor;

typedef struct fill_ctx {
    const wtensor *t;
    int n;
    uint32_t type;                   /* the matrices' type */
    const int32_t *d2t;
    int n_d2t;
} fill_ctx;

/* Norms and fc stay F32: fc reads the target's raw residual stream, whose
 * few huge dimensions would zero the rest of their 32-blocks if the
 * activations were quantized to Q8 (as the matmul does for Q8_0 weights)
 * -- a trained head then drafts next to nothing -- and overflow f16 on
 * Gemma.  (BF16 would halve its bytes, but our BF16 dot product is the
 * exact portable one: 20x slower than F32's.) */
static uint32_t type_of(const fill_ctx *c, const wtensor *t) {
    return t->rows == 1 || !strcmp(t->name, "fc.weight") ? SP_F32 : c->type;
}

/* Produces tensor i: matrices converted row by row, d2t widened to I64. */
static int fill(void *ctx, uint64_t i, void *dst, uint64_t n_bytes, sp_err *err) {
    const fill_ctx *c = ctx;
    (void)err;
    if ((int)i == c->n) {
        for (int k = 0; k < c->n_d2t; k++) {
            const int64_t id = c->d2t[k];
            memcpy((char *)dst + 8 * (size_t)k, &id, 8);
        }
        return 0;
    }
    const wtensor *t = &c->t[i];
    const uint32_t ty = type_of(c, t);
    const uint64_t row = sp_dtype_row_bytes(ty, (uint64_t)t->cols);
    for (int64_t r = 0; r < t->rows; r++) sp_quantize_row(ty, t->data + r * t->cols, (char *)dst + r * row, t->cols);
    (void)n_bytes;
    return 0;
}

static int set_f32(sp_gguf_writer *w, const char *key, float v, sp_err *err) {
    const sp_gguf_value val = { .type = SP_GGUF_FLOAT32, .v.f64 = v };
    return sp_gguf_writer_set(w, key, &val, err);
}

static int set_bool(sp_gguf_writer *w, const char *key, bool v, sp_err *err) {
    const sp_gguf_value val = { .type = SP_GGUF_BOOL, .v.u64 = v };
    return sp_gguf_writer_set(w, key, &val, err);
}

/* The target's tokenizer (llama.cpp sizes the head's logits by it). */
static int copy_tokenizer(sp_gguf_writer *w, const sp_gguf *g, sp_err *err) {
    char key[256];
    for (uint64_t i = 0; i < sp_gguf_n_kv(g); i++) {
        const sp_gguf_kv *kv = sp_gguf_kv_at(g, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) continue;
        if (sp_gguf_writer_set(w, sp_str_cpy(kv->key, key, sizeof key), &kv->val, err)) return -1;
    }
    return 0;
}

static int write_keys(sp_gguf_writer *w, const sp_model *t, const sp_head_hparams *hp, const sp_head_write_opts *o,
                      sp_err *err) {
    char name[192];
    snprintf(name, sizeof name, "%s EAGLE-3 head", t->name);
    int32_t layers[SP_HEAD_TAPS];
    memcpy(layers, hp->target_layers, sizeof layers);
    const sp_gguf_value arr = { .type = SP_GGUF_ARRAY,
                                .v.arr = { .type = SP_GGUF_INT32, .n = SP_HEAD_TAPS, .data = layers } };
    return sp_gguf_writer_set_str(w, "general.architecture", "eagle3", err) ||
           sp_gguf_writer_set_str(w, "general.name", name, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.context_length", (uint32_t)hp->n_ctx_train, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.embedding_length", (uint32_t)hp->n_embd, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.block_count", 1, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.feed_forward_length", (uint32_t)hp->n_ff, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.attention.head_count", (uint32_t)hp->n_head, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.attention.head_count_kv", (uint32_t)hp->n_head_kv, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.attention.key_length", (uint32_t)hp->head_dim, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.attention.value_length", (uint32_t)hp->head_dim, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.rope.dimension_count", (uint32_t)hp->head_dim, err) ||
           set_f32(w, "eagle3.rope.freq_base", hp->rope_base, err) ||
           set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", hp->rms_eps, err) ||
           sp_gguf_writer_set(w, "eagle3.target_layers", &arr, err) ||
           sp_gguf_writer_set(w, "eagle3.extract_layers", &arr, err) ||   /* older llama.cpp builds */
           sp_gguf_writer_set_u32(w, "eagle3.target_hidden_size", (uint32_t)hp->n_embd_target, err) ||
           set_bool(w, "eagle3.norm_before_residual", hp->norm_before_residual, err) ||
           sp_gguf_writer_set_u32(w, "eagle3.vocab_size", (uint32_t)t->hp.n_vocab, err) ||
           sp_gguf_writer_set_str(w, "specula.target_fingerprint", t->fingerprint, err) ||
           sp_gguf_writer_set_str(w, "specula.target_name", t->name, err) ||
           set_f32(w, "specula.draft_min_prob", o->min_prob, err) ||
           (o->training && sp_gguf_writer_set_str(w, "specula.training", o->training, err)) ||
           copy_tokenizer(w, t->gguf, err);
}

int sp_head_write(const char *path, const sp_model *target, const sp_head_hparams *hp, const sp_head_weights *hw,
                  const sp_head_write_opts *o, sp_err *err) {
    const int64_t d = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    const wtensor ts[] = {
        { "fc.weight", hw->fc, SP_HEAD_TAPS * (int64_t)hp->n_embd_target, d },
        { "blk.0.attn_norm.weight", hw->attn_norm, d, 1 },
        { "blk.0.attn_norm_2.weight", hw->attn_norm_2, d, 1 },
        { "blk.0.attn_q.weight", hw->wq, 2 * d, q },
        { "blk.0.attn_k.weight", hw->wk, 2 * d, kv },
        { "blk.0.attn_v.weight", hw->wv, 2 * d, kv },
        { "blk.0.attn_output.weight", hw->wo, q, d },
        { "blk.0.ffn_norm.weight", hw->ffn_norm, d, 1 },
        { "blk.0.ffn_gate.weight", hw->w_gate, d, hp->n_ff },
        { "blk.0.ffn_up.weight", hw->w_up, d, hp->n_ff },
        { "blk.0.ffn_down.weight", hw->w_down, hp->n_ff, d },
        { "output_norm.weight", hw->out_norm, d, 1 },
        { "output.weight", hw->output, d, hp->n_vocab_draft },
    };
    const int n = (int)(sizeof ts / sizeof *ts);
    fill_ctx c = { ts, n, o->type, hw->d2t, hp->n_vocab_draft };
    sp_gguf_writer *w = sp_gguf_writer_create();
    int rc = write_keys(w, target, hp, o, err);
    for (int i = 0; i < n && !rc; i++) {
        const uint64_t ne[2] = { (uint64_t)ts[i].cols, (uint64_t)ts[i].rows };
        if (sp_gguf_writer_add_tensor(w, ts[i].name, type_of(&c, &ts[i]), ts[i].rows == 1 ? 1 : 2, ne, NULL, err) < 0)
            rc = -1;
    }
    const uint64_t nd = (uint64_t)hp->n_vocab_draft;
    if (!rc && sp_gguf_writer_add_tensor(w, "d2t", SP_I64, 1, &nd, NULL, err) < 0) rc = -1;
    if (!rc) rc = sp_gguf_writer_write(w, path, fill, &c, err);
    sp_gguf_writer_free(w);
    return rc;
}

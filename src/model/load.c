/* Loading a model: architecture, hyperparameters and weight binding.
 *
 * Every tensor the forward pass touches is checked here for presence,
 * shape and type, so the forward pass itself needs no checks.
 */
#include "model/internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sp_arch_names[] = { "llama", "gemma3" };

const char *sp_arch_name(sp_arch a) {
    return (unsigned)a < sizeof sp_arch_names / sizeof *sp_arch_names ? sp_arch_names[a] : "?";
}

/* ----------------------------------------------------------------------------
 * Hyperparameters
 * ------------------------------------------------------------------------- */

/* Reads "<arch>.<suffix>" as a positive integer; required unless dflt >= 0. */
static int hp_int(const sp_gguf *g, const char *arch, const char *suffix, int dflt, int *out,
                  sp_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int r = sp_gguf_get_u32(g, key, &v, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (dflt < 0) return sp_err_set(err, "model: missing metadata key '%s'", key);
        *out = dflt;
        return 0;
    }
    if (v == 0 || v > (1u << 30))
        return sp_err_set(err, "model: metadata '%s' = %u is out of range", key, v);
    *out = (int)v;
    return 0;
}

static int hp_float(const sp_gguf *g, const char *arch, const char *suffix, float dflt, float *out,
                    sp_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int r = sp_gguf_get_f32(g, key, out, err);
    if (r < 0) return -1;
    if (r == 0) {
        if (isnan(dflt)) return sp_err_set(err, "model: missing metadata key '%s'", key);
        *out = dflt;
    }
    if (!isfinite(*out) || *out <= 0)
        return sp_err_set(err, "model: metadata '%s' = %g is out of range", key, (double)*out);
    return 0;
}

static int read_hparams(const sp_gguf *g, sp_hparams *hp, sp_err *err) {
    sp_str s;
    char arch[64];
    if (sp_gguf_get_str(g, "general.architecture", &s, err) <= 0)
        return sp_err_set(err, "model: missing 'general.architecture'");
    sp_str_cpy(s, arch, sizeof arch);
    if (strcmp(arch, "llama") == 0) hp->arch = SP_ARCH_LLAMA;
    else if (strcmp(arch, "gemma3") == 0) hp->arch = SP_ARCH_GEMMA3;
    else
        return sp_err_set(err, "model: unsupported architecture '%s' (supported: llama, gemma3)",
                          arch);

    if (hp_int(g, arch, "context_length", 2048, &hp->n_ctx_train, err) ||
        hp_int(g, arch, "embedding_length", -1, &hp->n_embd, err) ||
        hp_int(g, arch, "block_count", -1, &hp->n_layer, err) ||
        hp_int(g, arch, "feed_forward_length", -1, &hp->n_ff, err) ||
        hp_int(g, arch, "attention.head_count", -1, &hp->n_head, err) ||
        hp_int(g, arch, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err))
        return -1;
    if (hp->n_head % hp->n_head_kv)
        return sp_err_set(err, "model: head_count %d is not a multiple of head_count_kv %d",
                          hp->n_head, hp->n_head_kv);
    int hd_default = hp->n_embd % hp->n_head ? -1 : hp->n_embd / hp->n_head;
    int hd_v;
    if (hp_int(g, arch, "attention.key_length", hd_default, &hp->head_dim, err) ||
        hp_int(g, arch, "attention.value_length", hp->head_dim, &hd_v, err) ||
        hp_int(g, arch, "rope.dimension_count", hp->head_dim, &hp->n_rot, err))
        return -1;
    if (hd_v != hp->head_dim)
        return sp_err_set(err, "model: key_length %d != value_length %d is not supported",
                          hp->head_dim, hd_v);
    if (hp->head_dim % 2 || hp->n_rot % 2 || hp->n_rot > hp->head_dim || hp->head_dim > 1024)
        return sp_err_set(err, "model: unsupported head size %d / rotary dims %d", hp->head_dim,
                          hp->n_rot);
    if (hp->n_layer > 4096)
        return sp_err_set(err, "model: block_count %d is out of range", hp->n_layer);
    if (hp_float(g, arch, "attention.layer_norm_rms_epsilon", NAN, &hp->rms_eps, err) ||
        hp_float(g, arch, "rope.freq_base", 10000.0f, &hp->rope_base, err))
        return -1;

    hp->rope_base_swa = hp->rope_base;
    hp->swa_window = 0;
    hp->swa_pattern = 0;
    hp->embd_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->rope_neox = false;
    if (hp->arch == SP_ARCH_GEMMA3) {
        /* Gemma 3: 5 sliding-window layers then 1 global, local RoPE base
         * 10000 (fixed by the architecture, not stored in GGUF files),
         * embeddings scaled by sqrt(width), rotation of halves. */
        if (hp_int(g, arch, "attention.sliding_window", 512, &hp->swa_window, err)) return -1;
        hp->swa_pattern = 6;
        hp->rope_base_swa = 10000.0f;
        hp->embd_scale = sqrtf((float)hp->n_embd);
        hp->rope_neox = true;
    }
    return 0;
}

/* ----------------------------------------------------------------------------
 * Weight binding
 * ------------------------------------------------------------------------- */

static const sp_gguf_tensor *find(const sp_gguf *g, const char *name, sp_err *err) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    if (!t) sp_err_set(err, "model: missing tensor '%s'", name);
    return t;
}

/* Binds a 2-D weight matrix of n_out rows by n_in columns. */
int sp_bind_matrix(const sp_gguf *g, const char *name, int64_t n_in, int64_t n_out, sp_matrix *out,
                   sp_err *err) {
    const sp_gguf_tensor *t = find(g, name, err);
    if (!t) return -1;
    if (t->n_dims != 2 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out)
        return sp_err_set(err, "model: tensor '%s' has shape [%llu, %llu] (%u dims), expected "
                          "[%lld, %lld]", name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1], t->n_dims, (long long)n_in,
                          (long long)n_out);
    if (!sp_kernel_supports(t->type))
        return sp_err_set(err, "model: tensor '%s' has type %s, which is not supported "
                          "(supported: %s)", name, sp_dtype_name(t->type),
                          sp_kernel_supported_list());
    *out = (sp_matrix){ .data = t->data, .type = t->type, .n_in = n_in, .n_out = n_out };
    return 0;
}

/* Binds a 1-D vector of n floats, converted to an owned float array. */
int sp_bind_vector(const sp_gguf *g, const char *name, int64_t n, const float **out, sp_err *err) {
    const sp_gguf_tensor *t = find(g, name, err);
    if (!t) return -1;
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return sp_err_set(err, "model: tensor '%s' has %llu elements, expected %lld", name,
                          (unsigned long long)t->ne[0], (long long)n);
    if (!sp_kernel_supports(t->type))
        return sp_err_set(err, "model: tensor '%s' has unsupported type %s (supported: %s)", name,
                          sp_dtype_name(t->type), sp_kernel_supported_list());
    float *v = sp_xmalloc((size_t)n * sizeof(float));
    sp_dequantize_row(t->type, t->data, v, n);
    *out = v;
    return 0;
}

static int bind_layer(const sp_gguf *g, const sp_hparams *hp, int il, sp_layer *L, sp_err *err) {
    char n[96];
    const int64_t d = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s.weight", il, s), n)
    if (sp_bind_vector(g, NAME("attn_norm"), d, &L->attn_norm, err) ||
        sp_bind_matrix(g, NAME("attn_q"), d, q, &L->wq, err) ||
        sp_bind_matrix(g, NAME("attn_k"), d, kv, &L->wk, err) ||
        sp_bind_matrix(g, NAME("attn_v"), d, kv, &L->wv, err) ||
        sp_bind_matrix(g, NAME("attn_output"), q, d, &L->wo, err) ||
        sp_bind_vector(g, NAME("ffn_norm"), d, &L->ffn_norm, err) ||
        sp_bind_matrix(g, NAME("ffn_gate"), d, ff, &L->w_gate, err) ||
        sp_bind_matrix(g, NAME("ffn_up"), d, ff, &L->w_up, err) ||
        sp_bind_matrix(g, NAME("ffn_down"), ff, d, &L->w_down, err))
        return -1;
    L->swa = false;
    L->rope_base = hp->rope_base;
    if (hp->arch == SP_ARCH_GEMMA3) {
        if (sp_bind_vector(g, NAME("attn_q_norm"), hp->head_dim, &L->q_norm, err) ||
            sp_bind_vector(g, NAME("attn_k_norm"), hp->head_dim, &L->k_norm, err) ||
            sp_bind_vector(g, NAME("post_attention_norm"), d, &L->post_attn_norm, err) ||
            sp_bind_vector(g, NAME("post_ffw_norm"), d, &L->post_ffn_norm, err))
            return -1;
        L->swa = (il + 1) % hp->swa_pattern != 0;
        L->rope_base = L->swa ? hp->rope_base_swa : hp->rope_base;
    }
#undef NAME
    return 0;
}

/* The model's weight matrices, each once (a tied output is tok_embd). */
static int model_matrices(sp_model *m, sp_matrix **out) {
    int n = 0;
    out[n++] = &m->tok_embd;
    if (!m->tied_output) out[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        sp_layer *L = &m->layers[il];
        sp_matrix *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) out[n++] = ws[i];
    }
    return n;
}

/* Packs w into dst a few MiB of rows at a time, releasing each source
 * slice as soon as it is copied: packed whole, Gemma 3's 160 MiB
 * embedding would be resident twice for a moment. */
static void pack_in_slices(const sp_gguf *g, const sp_matrix *w, uint8_t *dst) {
    const size_t rb = (size_t)sp_dtype_row_bytes(w->type, (uint64_t)w->n_in);
    int64_t step = (int64_t)((4u << 20) / rb) & ~(int64_t)7;
    if (step < 8) step = 8;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += step) {
        const int64_t n = w->n_out - r0 < step ? w->n_out - r0 : step;
        sp_matrix_pack_rows(w, dst, r0, n);
        /* From the start each time: a page straddling two slices is
         * released with the second (release takes whole pages only). */
        sp_gguf_release(g, w->data, (size_t)(r0 + n) * rb);
    }
}

/* Packs every matrix of a packable type and shape into one owned region
 * (huge pages where possible) and releases the mapped originals, so the
 * resident weights stay the size of the file.  Called only when the
 * kernels in use have a packed path and the caller did not ask for the
 * plain layout (sp_model_load_opts.pack). */
static void pack_weights(sp_model *m) {
    assert(sp_kernels_have_packed());
    sp_matrix **ws = sp_xmalloc((size_t)(2 + 7 * m->hp.n_layer) * sizeof *ws);
    const int n = model_matrices(m, ws);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (sp_matrix_packable(ws[i]->type, ws[i]->n_in, ws[i]->n_out))
            total += (sp_matrix_packed_bytes(ws[i]) + 63) & ~(size_t)63;
    if (total > 0) {
        uint8_t *p = sp_alloc_big(total);
        m->packed = p;
        m->packed_bytes = total;
        for (int i = 0; i < n; i++) {
            sp_matrix *w = ws[i];
            if (!sp_matrix_packable(w->type, w->n_in, w->n_out)) continue;
            const size_t b = sp_matrix_packed_bytes(w);
            pack_in_slices(m->gguf, w, p);
            w->packed = p;
            p += (b + 63) & ~(size_t)63;
        }
        if (m->tied_output) m->output.packed = m->tok_embd.packed;
    }
    free(ws);
}

static uint64_t matrix_bytes(const sp_matrix *w) {
    return sp_dtype_row_bytes(w->type, (uint64_t)w->n_in) * (uint64_t)w->n_out;
}

sp_model_load_opts sp_model_load_default_opts(void) {
    return (sp_model_load_opts){ .pack = true };
}

sp_model *sp_model_load(const char *path, sp_err *err) {
    const sp_model_load_opts o = sp_model_load_default_opts();
    return sp_model_load_with(path, &o, err);
}

sp_model *sp_model_load_with(const char *path, const sp_model_load_opts *o, sp_err *err) {
    assert(o);
    sp_base_init();
    sp_gguf *g = sp_gguf_open(path, err);
    if (!g) return NULL;
    sp_model *m = sp_xcalloc(1, sizeof *m);
    m->gguf = g;
    m->path = sp_xstrdup(path);
    sp_hparams *hp = &m->hp;
    if (read_hparams(g, hp, err)) goto fail;

    sp_str name;
    if (sp_gguf_get_str(g, "general.name", &name, NULL) > 0) sp_str_cpy(name, m->name, sizeof m->name);
    else snprintf(m->name, sizeof m->name, "%s", sp_arch_name(hp->arch));

    const sp_gguf_tensor *te = find(g, "token_embd.weight", err);
    if (!te) goto fail;
    if (te->n_dims != 2 || te->ne[1] == 0 || te->ne[1] > (1u << 24))
        { sp_err_set(err, "model: token_embd.weight has an invalid shape"); goto fail; }
    hp->n_vocab = (int)te->ne[1];
    if (sp_bind_matrix(g, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd, err) ||
        sp_bind_vector(g, "output_norm.weight", hp->n_embd, &m->out_norm, err))
        goto fail;
    if (sp_gguf_find_tensor(g, "output.weight")) {
        if (sp_bind_matrix(g, "output.weight", hp->n_embd, hp->n_vocab, &m->output, err)) goto fail;
    } else {
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    m->layers = sp_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    for (int il = 0; il < hp->n_layer; il++)
        if (bind_layer(g, hp, il, &m->layers[il], err)) goto fail;

    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++)
        m->weight_bytes += sp_gguf_tensor_at(g, i)->n_bytes;
    sp_model_fingerprint_gguf(g, m->fingerprint);   /* before packing releases the mapped bytes */
    if (o->pack && sp_kernels_have_packed()) pack_weights(m);
    return m;
fail:
    sp_err_prefix(err, "%s", path);
    sp_model_free(m);
    return NULL;
}

void sp_model_free(sp_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int il = 0; il < m->hp.n_layer; il++) {
            sp_layer *L = &m->layers[il];
            free((void *)L->attn_norm); free((void *)L->ffn_norm);
            free((void *)L->q_norm); free((void *)L->k_norm);
            free((void *)L->post_attn_norm); free((void *)L->post_ffn_norm);
        }
        free(m->layers);
    }
    sp_free_big(m->packed, m->packed_bytes);
    free((void *)m->out_norm);
    free(m->path);
    sp_gguf_close(m->gguf);
    free(m);
}

uint64_t sp_model_bytes_per_token(const sp_model *m) {
    uint64_t b = matrix_bytes(&m->output);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const sp_layer *L = &m->layers[il];
        b += matrix_bytes(&L->wq) + matrix_bytes(&L->wk) + matrix_bytes(&L->wv) +
             matrix_bytes(&L->wo) + matrix_bytes(&L->w_gate) + matrix_bytes(&L->w_up) +
             matrix_bytes(&L->w_down);
    }
    return b;
}

/* The identity of a model's weights, which a draft head records as its
 * target so that it is never used with another model. */
#include "model/model.h"

#include <stdio.h>
#include <string.h>

/* 64-bit FNV-1a folded through splitmix: enough to tell files apart, not a
 * defence against someone forging a collision (a head only drafts; the
 * target verifies every token, so a wrong head costs speed, not output). */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return sp_hash64(h);
}

void sp_model_fingerprint_gguf(const sp_gguf *g, char out[17]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        h = mix(h, t->name.ptr, (size_t)t->name.len);
        h = mix(h, &t->type, sizeof t->type);
        h = mix(h, t->ne, sizeof t->ne);
        /* the first and the last bytes of every tensor: a fine-tune of the
         * same architecture changes them */
        const size_t n = t->n_bytes < 256 ? (size_t)t->n_bytes : 256;
        h = mix(h, t->data, n);
        h = mix(h, (const char *)t->data + t->n_bytes - n, n);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

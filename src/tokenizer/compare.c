/* Whether two vocabularies are the same (so token ids can pass between
 * models unchanged). */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

bool sp_tokenizer_same_vocab(const sp_tokenizer *a, const sp_tokenizer *b) {
    if (!a || !b) return false;
    if (sp_tokenizer_kind(a) != sp_tokenizer_kind(b) || sp_tokenizer_n_vocab(a) != sp_tokenizer_n_vocab(b) ||
        sp_tokenizer_bos(a) != sp_tokenizer_bos(b) || sp_tokenizer_eos(a) != sp_tokenizer_eos(b))
        return false;
    const size_t cap = (size_t)sp_tokenizer_max_token_len(a) + 8;
    char *pa = sp_xmalloc(cap), *pb = sp_xmalloc(cap);
    bool same = true;
    for (int32_t id = 0; id < sp_tokenizer_n_vocab(a) && same; id++) {
        size_t la = sp_token_piece(a, id, true, pa, cap), lb = sp_token_piece(b, id, true, pb, cap);
        same = la == lb && memcmp(pa, pb, la < cap ? la : cap) == 0 &&
               sp_tokenizer_is_control(a, id) == sp_tokenizer_is_control(b, id) &&
               sp_tokenizer_is_eog(a, id) == sp_tokenizer_is_eog(b, id);
    }
    free(pa);
    free(pb);
    return same;
}

/*
 * Token -> bytes (llama.cpp's token_to_piece, lstrip = 0): control and
 * unknown tokens render only when asked, user-defined tokens as their text,
 * normal tokens decoded (BPE: GPT-2 byte images -> bytes; SPM: "▁" -> " "),
 * byte tokens <0xXX> as that byte; unused/undefined tokens as nothing.
 */
#include "tokenizer/internal.h"

#include <string.h>

typedef struct pc_out {
    char *buf;
    size_t cap, n;
} pc_out;

static void pc_put(pc_out *o, const char *s, size_t n) {
    if (o->n < o->cap) {
        size_t k = o->cap - o->n < n ? o->cap - o->n : n;
        memcpy(o->buf + o->n, s, k);
    }
    o->n += n;
}

/* "▁" (E2 96 81) -> " " */
static void pc_unescape(pc_out *o, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            pc_put(o, s + run, i - run);
            pc_put(o, " ", 1);
            i += 3;
            run = i;
        } else {
            i++;
        }
    }
    pc_put(o, s + run, n - run);
}

/* GPT-2 byte images -> bytes.  A code point that is no byte image (only in
 * malformed vocabularies) is copied as its UTF-8; llama.cpp writes an
 * "[UNK_BYTE_0x..]" marker there instead. */
static void pc_bytes(pc_out *o, const sp_bytemap *bm, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t cp = sp_utf8_decode_lenient((const unsigned char *)s, n, &i);
        if (cp < 324 && bm->cp_to_byte[cp] >= 0) {
            char b = (char)bm->cp_to_byte[cp];
            pc_put(o, &b, 1);
        } else {
            pc_put(o, s + at, i - at);
        }
    }
}

static int pc_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a byte token: "<0xXX>" (hex digits at 3 and 4), or a
 * one-byte text as itself. */
static char pc_byte_of(const char *s, uint32_t n) {
    if (n == 1) return s[0];
    int v = 0;
    for (uint32_t i = 3; i < 5 && i < n && pc_hex(s[i]) >= 0; i++) v = v * 16 + pc_hex(s[i]);
    return (char)v;
}

size_t sp_token_piece(const sp_tokenizer *t, int32_t id, bool render_special, char *buf,
                      size_t cap) {
    if (id < 0 || id >= t->n_vocab) return 0;
    pc_out o = { .buf = buf, .cap = buf ? cap : 0 };
    uint8_t a = t->attr[id];
    const char *s = t->text[id];
    uint32_t n = t->len[id];
    if (!render_special && (a & (SP_TA_CONTROL | SP_TA_UNKNOWN))) return 0;
    if (a & SP_TA_SPECIAL) {
        pc_put(&o, s, n);
    } else if (a & SP_TA_NORMAL) {
        if (t->kind == SP_TOK_SPM) pc_unescape(&o, s, n);
        else pc_bytes(&o, &t->bytes, s, n);
    } else if (a & SP_TA_BYTE) {
        char b = pc_byte_of(s, n);
        pc_put(&o, &b, 1);
    }
    return o.n;
}

uint32_t sp_tokenizer_max_token_len(const sp_tokenizer *t) { return t->max_len; }

/* UTF-8 decoding/encoding and the GPT-2 byte-to-unicode mapping. */
#include "tokenizer/internal.h"

/* llama.cpp's decoder (unicode_cpt_from_utf8 + the U+FFFD fallback of
 * unicode_cpts_from_utf8), so that byte-level BPE sees exactly the code
 * points the reference sees, including for invalid input.  One deliberate
 * difference: a 4-byte form above U+10FFFF, which makes llama.cpp throw,
 * becomes U+FFFD here. */
uint32_t sp_utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i) {
    size_t o = *i;
    unsigned char c = s[o];
    uint32_t cp;
    size_t len;
    if (c < 0x80) { *i = o + 1; return c; }
    if (!(c & 0x40)) goto bad;
    if (!(c & 0x20)) { len = 2; cp = c & 0x1f; }
    else if (!(c & 0x10)) { len = 3; cp = c & 0x0f; }
    else if (!(c & 0x08)) { len = 4; cp = c & 0x07; }
    else goto bad;
    if (o + len > n) goto bad;
    for (size_t k = 1; k < len; k++) {
        if ((s[o + k] & 0xc0) != 0x80) goto bad;
        cp = (cp << 6) | (s[o + k] & 0x3f);
    }
    if (cp > 0x10ffff) goto bad;
    *i = o + len;
    return cp;
bad:
    *i = o + 1;
    return 0xfffd;
}

size_t sp_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above
 * U+10FFFF.  The allowed range of the second byte depends on the lead byte;
 * all later continuation bytes are 80..BF. */
int sp_utf8_check(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char c = s[0];
    *bad = 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) return 1;
    if (c < 0xc2) return 0;
    if (c < 0xe0) len = 2;
    else if (c < 0xf0) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c < 0xf5) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return 0;
    }
    for (size_t k = 1; k < len; k++) {
        if (k >= n) return -(int)k;
        unsigned char b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) {
            *bad = k;
            return 0;
        }
    }
    return (int)len;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order. */
void sp_bytemap_init(sp_bytemap *m) {
    for (int c = 0; c < 324; c++) m->cp_to_byte[c] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        int cp = keep ? b : 256 + n++;
        m->byte_to_cp[b] = (uint16_t)cp;
        m->cp_to_byte[cp] = (int16_t)b;
    }
}

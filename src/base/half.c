/* IEEE half and bfloat16 conversions, bit-exact. */
#include "base/base.h"

#include <pthread.h>
#include <string.h>

float sp_f16_table[65536];

static inline float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float sp_f16_to_f32_slow(sp_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) /* inf / nan */
        return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        /* subnormal: value = man * 2^-24, exact in fp32 */
        float v = (float)man * 0x1.0p-24f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

sp_f16 sp_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet and non-zero) */
        return (sp_f16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (sp_f16)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* Add 0.5 (as float) so the FPU does the round-to-nearest-even of the
         * bits below 2^-24 for us. */
        float v = f32_from_bits(ax) + 0.5f;
        return (sp_f16)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + mant_odd;  /* rebias exponent (-112 << 23) and round */
    return (sp_f16)(sign | (ax >> 13));
}

sp_bf16 sp_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (sp_bf16)((x >> 16) | 64); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (sp_bf16)(x >> 16);
}

static void init_tables(void) {
    for (uint32_t i = 0; i < 65536; i++) sp_f16_table[i] = sp_f16_to_f32_slow((sp_f16)i);
}

void sp_base_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_tables);
}

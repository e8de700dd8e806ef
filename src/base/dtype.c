/* The GGUF/ggml tensor type table: block sizes and bytes per block. */
#include "base/base.h"

static const sp_dtype_info sp_dtypes[SP_DTYPE_COUNT] = {
    [SP_F32] = {"F32", 1, 4},         [SP_F16] = {"F16", 1, 2},
    [SP_Q4_0] = {"Q4_0", 32, 18},     [SP_Q4_1] = {"Q4_1", 32, 20},
    [SP_Q5_0] = {"Q5_0", 32, 22},     [SP_Q5_1] = {"Q5_1", 32, 24},
    [SP_Q8_0] = {"Q8_0", 32, 34},     [SP_Q8_1] = {"Q8_1", 32, 36},
    [SP_Q2_K] = {"Q2_K", 256, 84},    [SP_Q3_K] = {"Q3_K", 256, 110},
    [SP_Q4_K] = {"Q4_K", 256, 144},   [SP_Q5_K] = {"Q5_K", 256, 176},
    [SP_Q6_K] = {"Q6_K", 256, 210},   [SP_Q8_K] = {"Q8_K", 256, 292},
    [SP_IQ2_XXS] = {"IQ2_XXS", 256, 66}, [SP_IQ2_XS] = {"IQ2_XS", 256, 74},
    [SP_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [SP_IQ1_S] = {"IQ1_S", 256, 50},
    [SP_IQ4_NL] = {"IQ4_NL", 32, 18}, [SP_IQ3_S] = {"IQ3_S", 256, 110},
    [SP_IQ2_S] = {"IQ2_S", 256, 82},  [SP_IQ4_XS] = {"IQ4_XS", 256, 136},
    [SP_I8] = {"I8", 1, 1},           [SP_I16] = {"I16", 1, 2},
    [SP_I32] = {"I32", 1, 4},         [SP_I64] = {"I64", 1, 8},
    [SP_F64] = {"F64", 1, 8},         [SP_IQ1_M] = {"IQ1_M", 256, 56},
    [SP_BF16] = {"BF16", 1, 2},
    [SP_TQ1_0] = {"TQ1_0", 256, 54},  [SP_TQ2_0] = {"TQ2_0", 256, 66},
    [SP_MXFP4] = {"MXFP4", 32, 17},
};

const sp_dtype_info *sp_dtype_get(uint32_t t) {
    if (t >= SP_DTYPE_COUNT || !sp_dtypes[t].name) return 0;
    return &sp_dtypes[t];
}

uint64_t sp_dtype_row_bytes(uint32_t t, uint64_t n) {
    const sp_dtype_info *i = sp_dtype_get(t);
    if (!i || n % i->block) return 0;
    uint64_t out;
    if (!sp_mul_ok(n / i->block, i->bytes, &out)) return 0;
    return out;
}

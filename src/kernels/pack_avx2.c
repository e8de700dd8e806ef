/*
 * AVX2+FMA+F16C dot products of packed weights (the layout of internal.h:
 * 8 rows interleaved in 4-byte runs) against prepared activation rows.
 *
 * One 32-byte vector holds 4 bytes of each of 8 weight rows; the 4
 * matching activation bytes are broadcast to all lanes, so maddubs + madd
 * leave lane i holding the integer dot of row i — no horizontal sums, and
 * one fma applies the 8 rows' scales:
 *   Q4_1: 8 maddubs of nibbles (0..15) by activations (-127..127) summed in
 *         int16 (at most 16 * 15 * 127 = 30480: exact), one madd to int32;
 *         acc = fma(cvt(isum), dw * dx, acc); accm = fma(mw, sx, accm);
 *         result = acc + accm.
 *   Q5_0: values w = q - 16 (-16..15): 8 maddubs(|w|, sign(x, w)) summed in
 *         int16 (at most 8 * 2 * 16 * 127 = 32512: exact), as Q4_1 without
 *         the min term.
 *   Q8_0: per 4 elements maddubs(|w|, sign(x, w)) (at most 2 * 128 * 127:
 *         exact) and madd to int32; acc = fma(cvt(isum), dw * dx, acc).
 * Every output lane runs this fixed sequence over the blocks in order,
 * whatever the number of activation rows or groups in the call (batch
 * invariance); only the order of the float sums differs from the portable
 * dot, as on the unpacked SIMD path.
 *
 * The values of up to SP_PSEG blocks of a group are unpacked once into a
 * stack panel (nibbles split, |w| taken) and used by every activation row,
 * two rows at a time.
 */
#include "kernels/internal.h"

#if defined(__x86_64__)

#include <immintrin.h>

SP_TARGET_BEGIN("avx2,fma,f16c")

#define SP_PK_VNNI 0
#define SP_PK_DOT_PACKED sp_avx2_dot_packed
#include "kernels/pack_kern.h"

SP_TARGET_END

#endif /* __x86_64__ */

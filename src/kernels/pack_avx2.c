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
 * The kernels read the weight vectors straight from the blocks for each
 * group of up to 4 activation rows; only Q5_0 with more than 8 rows
 * unpacks up to SP_PSEG blocks once into a stack panel (5th bits merged,
 * |w| taken) that every pair of rows reads.
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

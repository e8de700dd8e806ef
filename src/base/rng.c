/* Keyed random numbers: a pure function of (seed, position, stream). */
#include "base/base.h"

uint64_t sp_hash64(uint64_t x) {
    /* splitmix64 finaliser: a bijection with full avalanche. */
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27; x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

uint64_t sp_rng_u64(uint64_t seed, uint64_t pos, uint64_t stream) {
    /* Chain the three keys through the finaliser so that nearby keys in any
     * coordinate give unrelated outputs. */
    uint64_t h = sp_hash64(seed + 0x9E3779B97F4A7C15ull);
    h = sp_hash64(h ^ (pos + 0xD1B54A32D192ED03ull));
    h = sp_hash64(h ^ (stream + 0x8CB92BA72F3D8DD7ull));
    return h;
}

double sp_rng_uniform(uint64_t seed, uint64_t pos, uint64_t stream) {
    return (double)(sp_rng_u64(seed, pos, stream) >> 11) * 0x1.0p-53;
}

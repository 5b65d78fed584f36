#include "murmurhash3.h"

/* The 128-bit x86 variant with a fixed 8-byte input: there is no 16-byte body
 * block, only the tail, whose first four bytes feed k1 and next four k2. */

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

uint64_t sv_murmurhash3_x86_128_u64(uint64_t key) {
    const uint32_t c1 = 0x239b961bu, c2 = 0xab0e9789u, c3 = 0x38b34ae5u;
    uint32_t h1 = 0, h2 = 0, h3 = 0, h4 = 0;
    uint32_t k1 = (uint32_t)key, k2 = (uint32_t)(key >> 32);

    k2 *= c2;
    k2 = rotl32(k2, 16);
    k2 *= c3;
    h2 ^= k2;
    k1 *= c1;
    k1 = rotl32(k1, 15);
    k1 *= c2;
    h1 ^= k1;

    const uint32_t len = 8;
    h1 ^= len;
    h2 ^= len;
    h3 ^= len;
    h4 ^= len;
    h1 += h2 + h3 + h4;
    h2 += h1;
    h3 += h1;
    h4 += h1;
    h1 = fmix32(h1);
    h2 = fmix32(h2);
    h3 = fmix32(h3);
    h4 = fmix32(h4);
    h1 += h2 + h3 + h4;
    h2 += h1;
    return (uint64_t)h1 | ((uint64_t)h2 << 32);
}

int sv_murmurhash3_x86_128_u64_batch(const uint64_t *keys, size_t n, uint64_t *out) {
    for (size_t i = 0; i < n; ++i) out[i] = sv_murmurhash3_x86_128_u64(keys[i]);
    return SV_OK;
}

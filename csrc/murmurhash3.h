/* murmurhash3_x86_128 of uint64 keys, as the Neuroglancer sharded format uses it.
 *
 * Each key is hashed as its 8 little-endian bytes with seed 0; the result is the
 * low 64 bits of the 128-bit hash, i.e. h1 | (uint64)h2 << 32.
 */
#ifndef SHARDVOL_MURMURHASH3_H
#define SHARDVOL_MURMURHASH3_H

#include "sv_common.h"

/* Hashes one key (seed 0). */
uint64_t sv_murmurhash3_x86_128_u64(uint64_t key);

/* out[i] = sv_murmurhash3_x86_128_u64(keys[i]) for i < n; out may alias keys. */
int sv_murmurhash3_x86_128_u64_batch(const uint64_t *keys, size_t n, uint64_t *out);

#endif

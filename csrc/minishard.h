/* Minishard indexes of the neuroglancer_uint64_sharded_v1 format (raw bytes, after any
 * gzip decoding).
 *
 * An index of n entries is 3n little-endian uint64 values: n key deltas, n data offset
 * deltas, n data sizes.  Keys are the running sum of the key deltas (each delta after
 * the first must be positive: keys strictly increase).  Data of entry i starts at the
 * end of entry i-1's data (at `base` for entry 0) plus its offset delta, and ends
 * `size` bytes later; no sum may exceed 2**64 - 1.
 */
#ifndef SHARDVOL_MINISHARD_H
#define SHARDVOL_MINISHARD_H

#include "sv_common.h"

/* Decode one index of `len` bytes into ids, starts and sizes (n values each, where
 * n = len / 24).  Returns
 *   SV_ERR_ARGUMENT   len is not a multiple of 24, or n differs from len / 24;
 *   SV_ERR_CORRUPT    entry *err_index repeats the previous key (a zero delta);
 *   SV_ERR_OVERFLOW   the key sum overflows at entry *err_index;
 *   SV_ERR_RANGE      the data offset or size sum overflows at entry *err_index.
 * On error the outputs hold the entries before *err_index. */
int sv_minishard_index_decode(const uint8_t *buf, size_t len, uint64_t base, uint64_t *ids,
                              uint64_t *starts, uint64_t *sizes, size_t n, size_t *err_index);

#endif

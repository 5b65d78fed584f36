/* Compressed Morton codes of 3-D grid coordinates (Neuroglancer precomputed).
 *
 * Bit i of coordinate d is kept only if 2**i < grid_size[d]; kept bits are
 * interleaved from the least significant bit upwards in the order x, y, z, so
 * dimensions that need fewer bits simply drop out of the interleaving once
 * exhausted.  The total number of kept bits must not exceed 64.
 */
#ifndef SHARDVOL_MORTON_H
#define SHARDVOL_MORTON_H

#include "sv_common.h"

/* Number of bits of each dimension that the code keeps, and their sum.
 * Returns SV_ERR_ARGUMENT if a grid size is 0, SV_ERR_OVERFLOW if the sum
 * exceeds 64. */
int sv_morton_bits(const uint64_t grid_size[3], int bits[3], int *total_bits);

/* codes[i] = code of (coords[3*i], coords[3*i+1], coords[3*i+2]) for i < n.
 * coords is C-contiguous (n, 3).  Returns SV_ERR_RANGE with *err_index set if
 * a coordinate is >= its grid size. */
int sv_morton_encode(const uint64_t *coords, size_t n, const uint64_t grid_size[3],
                     uint64_t *codes, size_t *err_index);

/* Inverse of sv_morton_encode: coords is C-contiguous (n, 3).  Returns
 * SV_ERR_RANGE with *err_index set if a code has bits set above the total
 * bit count or decodes to a coordinate outside the grid. */
int sv_morton_decode(const uint64_t *codes, size_t n, const uint64_t grid_size[3],
                     uint64_t *coords, size_t *err_index);

#endif

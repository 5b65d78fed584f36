/* Copying an N-d box (N <= 4) between buffers whose layouts differ: the fastest-varying
 * axis of the source is not that of the destination (a Fortran-ordered volume written into
 * C-ordered Zarr chunks, and back).  An element-by-element loop then reads or writes with a
 * large stride on every step, a cache line (and often a page) per element; numpy's copy
 * moves about 250 MB/s of uint8 so.  Here the two axes are cut into tiles small enough for
 * both sides' lines to stay in the L1 cache, and each tile is copied along its destination
 * rows: a few GB/s.  Other boxes go to sv_copy_box_to (copybox.h).
 */
#ifndef SHARDVOL_TRANSPOSE_H
#define SHARDVOL_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

#include "sv_common.h"

/* Copy count[0] x ... x count[3] items of `itemsize` bytes (1, 2, 4, 8 or 16; any size
 * works, those are unrolled); item (i, j, k, l) is at src + i*src_strides[0] + ... +
 * l*src_strides[3], likewise in dst (byte strides, any sign).  The two boxes must not
 * overlap.  Returns SV_OK, or SV_ERR_ARGUMENT for itemsize 0. */
int sv_copy_transposed(const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
                       const ptrdiff_t dst_strides[4], const size_t count[4], size_t itemsize);

#endif

/* Downsampling (pooling) of 4-D (x, y, z, channel) arrays by integer factors.
 *
 * Semantics are those of TensorStore's `downsample` driver, so that a pooled
 * array equals `ts.downsample(base, [fx, fy, fz, 1], method)` read over its
 * domain:
 *
 * - Blocks are aligned to multiples of the block size in a global frame.
 *   `phase[d]` is the position of the input's first voxel inside its block
 *   (the global coordinate modulo the block size), 0 <= phase[d] < block[d].
 *   Output voxel o along d pools input voxels i with
 *   o*block - phase <= i < (o+1)*block - phase, clipped to [0, n): edge blocks
 *   pool only the voxels present.  Output extent: ceil((phase + n) / block),
 *   or 0 when n == 0.  The channel dimension is never pooled.
 * - MEAN, integers: exact sum, divided by the number of voxels present,
 *   rounded to nearest with ties to even (for negative values too).
 * - MEAN, floats: accumulated in the element type, starting from +0, adding
 *   the block's voxels in memory order (x fastest, then y, then z), then
 *   divided by the count.  TensorStore sums in this order when its source
 *   buffer is x-fastest; float results depend on the order.
 * - MODE: the most frequent value; ties go to the smallest value.  Float
 *   values compare with ==, except that all NaNs count as one value (sorted
 *   last); which zero (+0/-0) represents a mixed block is unspecified.
 * - MIN / MAX: floats start from +inf / -inf and ignore NaN (an all-NaN block
 *   gives +inf / -inf); among equal values the first in memory order wins.
 * - STRIDE: the voxel at the block's origin, or, for a first block cut by
 *   the phase (where TensorStore's stride view has no output position), the
 *   first voxel present.
 *
 * Pyramids: mip k (1-based) pools the ORIGINAL input by factor**k with phase
 * modulo factor**k, i.e. equals ts.downsample(base, factor**k, method).  It is
 * computed in one pass over the input, in tiles aligned to factor**num_mips
 * (so the tile stays in cache while all its mips are computed): integer means
 * from exact hierarchical sums, integer min/max chained from the previous mip,
 * modes by merging the exact histograms of the previous mip's blocks (falling
 * back to sorting the voxels of blocks with more than 8 distinct values),
 * float means/min/max and stride directly from the input (float results
 * depend on the order of the voxels).
 *
 * Arrays are described by a data pointer, 4 extents and 4 strides counted in
 * elements (any sign).  Bool arrays are passed as SV_DS_UINT8.
 */
#ifndef SHARDVOL_DOWNSAMPLE_H
#define SHARDVOL_DOWNSAMPLE_H

#include "sv_common.h"

#define SV_DS_MEAN 0
#define SV_DS_MODE 1
#define SV_DS_MIN 2
#define SV_DS_MAX 3
#define SV_DS_STRIDE 4

#define SV_DS_UINT8 0
#define SV_DS_INT8 1
#define SV_DS_UINT16 2
#define SV_DS_INT16 3
#define SV_DS_UINT32 4
#define SV_DS_INT32 5
#define SV_DS_UINT64 6
#define SV_DS_INT64 7
#define SV_DS_FLOAT32 8
#define SV_DS_FLOAT64 9

/* Largest supported block size factor**num_mips along one dimension. */
#define SV_DS_MAX_BLOCK ((int64_t)1 << 31)
/* Largest number of voxels pooled into one output voxel (all dimensions). */
#define SV_DS_MAX_BLOCK_VOXELS ((int64_t)1 << 31)

/* Extents of mip `mip` (>= 1) of an input of extents in_shape:
 * ceil((phase mod factor**mip + n) / factor**mip) per dimension, channel kept.
 * phase is taken modulo factor**mip here.  Returns SV_ERR_ARGUMENT for a
 * factor < 1, a negative extent or a block size above SV_DS_MAX_BLOCK. */
int sv_downsample_shape(const int64_t in_shape[4], const int64_t factor[3],
                        const int64_t phase[3], int mip, int64_t out_shape[4]);

/* Pools `in` into num_mips outputs: outs[k-1] receives mip k.
 * out_shapes / out_strides hold 4 values per mip.  phase[d] must lie in
 * [0, factor[d]**num_mips).  Returns SV_ERR_ARGUMENT for an unknown method or
 * dtype, a factor < 1, num_mips < 1, a phase out of range or an output
 * extent other than sv_downsample_shape's; SV_ERR_OVERFLOW if a block holds
 * more than SV_DS_MAX_BLOCK_VOXELS voxels; SV_ERR_NOMEM if scratch memory
 * cannot be allocated.  Reads and writes no memory outside the described
 * arrays; outputs must not overlap the input or each other. */
int sv_downsample_pyramid(int method, int dtype, const void *in, const int64_t in_shape[4],
                          const int64_t in_strides[4], const int64_t factor[3],
                          const int64_t phase[3], int num_mips, void *const *outs,
                          const int64_t *out_shapes, const int64_t *out_strides);

#endif

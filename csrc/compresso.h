/* compresso (Matejek et al. 2017, as seung-lab's compresso package writes it, format
 * versions 0 and 1): a bounds-checked decoder of one chunk into a strided output.
 *
 * Stream (integers little-endian):
 *   36-byte header: "cpso", format version (u8: 0, or 1 with a z index), data width
 *   (u8: 1, 2, 4, 8 bytes per label), sx, sy, sz (u16 each), xstep, ystep, zstep
 *   (u8 each), id_size (u64), value_size (u32), location_size (u64), connectivity (u8: 4
 *   or 6);
 *   ids[id_size] (labels), window_values[value_size] (windows), locations[location_size]
 *   (labels), the run-length coded windows (windows, up to the index or the end), and
 *   for version 1 two arrays of sz entries (components per slice, locations per slice,
 *   difference coded) of 1, 2, 4 or 8 bytes each (by 2*sx*sy).
 *   A window is 1, 2, 4 or 8 bytes (by xstep*ystep*zstep <= 8, 16, 32, 64).
 *
 * Decoding: the volume is cut into blocks of (xstep, ystep, zstep); block b's boundary
 * mask is window_values[w[b]], where w is the run-length decoded windows (an even entry
 * 2v sets the next block to v, an odd entry 2n+1 skips n blocks, left 0); voxel
 * (x, y, z) is a boundary voxel if bit (x%xs + xs*(y%ys + ys*(z%zs))) of its block's
 * mask is set.  The other voxels form connected components (4-connected within each z
 * slice, or 6-connected in 3-D), numbered from 1 in the order of their first voxel in
 * x-fastest raster order (slice by slice for 4-connectivity); component c has label
 * ids[c-1], and boundary voxels start as 0.  Then, in raster order, a boundary voxel
 * takes the label of its -x, else -y (else, 6-connected, -z) neighbour if that is not a
 * boundary voxel; otherwise it reads the next location: 0-5 copy the label of its
 * -x, +x, -y, +y, -z, +z neighbour, 6 takes the label in the following location, and
 * v >= 7 is the label v - 7.
 *
 * Every section length, window, component count, location and neighbour is checked: a
 * corrupt stream is an error, never a read or write outside the buffers.
 */
#ifndef SHARDVOL_COMPRESSO_H
#define SHARDVOL_COMPRESSO_H

#include <stddef.h>

#include "sv_common.h"

#define SV_CPSO_HEADER_BYTES 36

/* What went wrong, in sv_cpso_error.reason. */
enum {
    SV_CPSO_NO_ERROR = 0,
    SV_CPSO_SHORT,            /* shorter than the header (value = length) */
    SV_CPSO_MAGIC,            /* does not start with "cpso" */
    SV_CPSO_VERSION,          /* format version not 0 or 1 (value) */
    SV_CPSO_WIDTH,            /* data width (value) is not the volume's (limit) */
    SV_CPSO_SHAPE,            /* sx, sy, sz (value = index of the axis, limit = stream's) */
    SV_CPSO_STEPS,            /* a step of 0, or steps of more than 64 voxels (value) */
    SV_CPSO_CONNECTIVITY,     /* connectivity not 4 or 6 (value) */
    SV_CPSO_SECTIONS,         /* sections need more bytes (value) than there are (limit) */
    SV_CPSO_WINDOW_BYTES,     /* the windows section (value bytes) is not whole windows */
    SV_CPSO_Z_INDEX,          /* version 1: the first slice's location index is not 0 */
    SV_CPSO_WINDOW_RUN,       /* the windows run past the last block (limit blocks) */
    SV_CPSO_WINDOW_VALUE,     /* a window index (value) past the window values (limit) */
    SV_CPSO_COMPONENTS,       /* more components (value) than ids (limit) */
    SV_CPSO_LOCATIONS_SHORT,  /* the locations end (limit) before the boundary voxels */
    SV_CPSO_LOCATION_NEIGHBOUR, /* location (value) points outside the chunk */
    SV_CPSO_LOCATIONS_LEFT    /* locations left over: value used of limit */
};

typedef struct {
    int reason;
    uint64_t value;
    uint64_t limit;
    size_t voxel[3]; /* where, for the location reasons */
} sv_cpso_error;

/* Bytes of scratch memory sv_cpso_decode needs for a chunk of `shape` (x, y, z) voxels;
 * 0 if the chunk is too large for the format (an axis over 65535 voxels). */
size_t sv_cpso_scratch_bytes(const size_t shape[3]);

/* Decode the compresso stream `data` (`len` bytes) of a chunk of `shape` (x, y, z) voxels
 * of `label_bytes` (1, 2, 4, 8) unsigned labels into `out`, whose voxel (x, y, z) is at
 * out + x*s[0] + y*s[1] + z*s[2] items (s = out_strides, in items, any sign).  `scratch`:
 * sv_cpso_scratch_bytes(shape) bytes (any alignment the platform's malloc gives).
 * Returns SV_OK, SV_ERR_ARGUMENT (bad label_bytes or shape, short scratch), or
 * SV_ERR_CORRUPT / SV_ERR_TRUNCATED with *err filled in (out is then partly written). */
int sv_cpso_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[3],
                   void *out, const ptrdiff_t out_strides[3], void *scratch, size_t scratch_len,
                   sv_cpso_error *err);

/* Encode a chunk of `shape` (x, y, z) voxels of `label_bytes` (1, 2, 4, 8) unsigned labels,
 * voxel (x, y, z) at in + x*s[0] + y*s[1] + z*s[2] items (s = in_strides, any sign), as the
 * compresso package's compress() does by default, byte for byte: format version 1 (with the
 * z index), 4-connectivity, 4 x 4 x 1 windows, or 8 x 8 x 1 when more than 32767 distinct
 * 4 x 4 x 1 windows occur.  *out (free with sv_cpso_free) gets *out_len bytes.
 * Returns SV_OK, SV_ERR_ARGUMENT (bad label_bytes, or an axis over 65535 voxels) or
 * SV_ERR_NOMEM. */
int sv_cpso_encode(const void *in, size_t label_bytes, const size_t shape[3],
                   const ptrdiff_t in_strides[3], uint8_t **out, size_t *out_len);

void sv_cpso_free(void *p);

#endif

/* Reading a box of a raw chunk file straight into a strided output array.
 *
 * A raw chunk file holds the chunk's voxels (x, y, z, channel) in Fortran order,
 * little-endian, itemsize bytes each, and nothing else: shape[0]*shape[1]*
 * shape[2]*shape[3]*itemsize bytes.  Only the byte span from the box's first to
 * its last voxel is read (for a box of a few z planes, those planes); the box is
 * then copied row by row into `out`.
 *
 * Files this kernel does not decode (a size other than the raw size, or content
 * starting with the gzip magic bytes 1f 8b) are left to the caller: the kernel
 * returns SV_RAW_OTHER without touching `out`.  A missing file (or a directory)
 * returns SV_RAW_MISSING.  Voxels are copied as stored: the caller handles byte
 * order (this kernel is used on little-endian hosts).
 */
#ifndef SHARDVOL_RAWFILE_H
#define SHARDVOL_RAWFILE_H

#include "sv_common.h"

#define SV_RAW_MISSING 1 /* no such file: the chunk is missing */
#define SV_RAW_OTHER 2   /* not plain raw voxels of this shape: decode it another way */

/* Bytes of scratch space sv_raw_read_box needs for a box: the span it reads; -1 if the
 * box is not inside the chunk, or its end overflows int64 (no such file can exist). */
int64_t sv_raw_span(int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                    const int64_t count[4]);

/* Read box [origin, origin + count) of the chunk file `path` (chunk extents `shape`)
 * into `out`, whose voxel (i, j, k, c) of the box is at out + i*out_strides[0] +
 * j*out_strides[1] + k*out_strides[2] + c*out_strides[3] (byte strides, >= 0).
 * `scratch` holds at least sv_raw_span(...) bytes.  Returns SV_OK, SV_RAW_MISSING,
 * SV_RAW_OTHER, SV_ERR_ARGUMENT (box outside the chunk, scratch too small) or
 * SV_ERR_IO with the errno in *err_no. */
int sv_raw_read_box(const char *path, int64_t itemsize, const int64_t shape[4],
                    const int64_t origin[4], const int64_t count[4], uint8_t *out,
                    const int64_t out_strides[4], uint8_t *scratch, int64_t scratch_len,
                    int *err_no);

#endif

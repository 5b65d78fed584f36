/* Reading a box of a zstd-compressed chunk, stored as a span of an open file (a Zarr v3
 * inner chunk of a local shard whose codecs are "bytes" then "zstd"), straight into a
 * strided output array.
 *
 * The chunk holds shape[0] x ... x shape[3] items of `itemsize` bytes in C order (axis 3
 * fastest; arrays of fewer axes have leading axes of 1), in the host's byte order.  Only
 * the frame's first bytes up to the box's last item are decoded: a box in the first half
 * of a chunk skips the blocks after it (zstd writes blocks of at most 128 KiB; a prefix is
 * decoded so when it is at most half of a chunk of several blocks).
 *
 * Spans this kernel does not decode (not a zstd frame, a frame of another size, short or
 * corrupt data, a file shorter than the span) leave `out` to the caller, who decodes the
 * chunk the general way and reports what is wrong: the kernel returns SV_ZSTD_OTHER.
 * A box decoded whole into `out` (the whole chunk, `out` C-contiguous) may be written
 * in part before such a failure.
 */
#ifndef SHARDVOL_ZSTDBOX_H
#define SHARDVOL_ZSTDBOX_H

#include <stddef.h>
#include <stdint.h>

#include "sv_common.h"

#define SV_ZSTD_OTHER 1 /* not a zstd frame of this chunk's bytes: decode it another way */

/* A decompression context and the buffers it reads and decodes into, grown as needed;
 * one per thread. */
typedef struct sv_zstd_reader sv_zstd_reader;

/* A new reader; NULL without memory. */
sv_zstd_reader *sv_zstd_reader_new(void);
void sv_zstd_reader_free(sv_zstd_reader *reader);

/* Read the `length` bytes at `offset` of the open file `fd`, decode them as the chunk
 * described above, and copy its box [origin, origin + count) into `out`, whose item
 * (i, j, k, l) of the box is at out + i*out_strides[0] + ... + l*out_strides[3] (byte
 * strides, any sign).  Returns SV_OK, SV_ZSTD_OTHER, SV_ERR_ARGUMENT (a box outside the
 * chunk, an itemsize outside 1..16) or SV_ERR_IO with the errno in *err_no. */
int sv_zstd_read_box(sv_zstd_reader *reader, int fd, int64_t offset, int64_t length,
                     int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                     const int64_t count[4], uint8_t *out, const int64_t out_strides[4],
                     int *err_no);

#endif

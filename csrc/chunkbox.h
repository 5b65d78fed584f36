/* Reading a box of a chunk stored as a span of an open file (an inner chunk of a local
 * Zarr v3 shard whose codecs are "bytes" then "zstd" or "gzip", a raw chunk of a local
 * precomputed shard), straight into a strided output array.
 *
 * The chunk holds shape[0] x ... x shape[3] items of `itemsize` bytes in C order (axis 3
 * fastest; arrays of fewer axes have leading axes of 1; a Fortran-ordered chunk is this
 * with its axes reversed), in the host's byte order, as one zstd frame, one gzip member
 * or as they are.  A zstd frame is decoded only up to the box's last item when that skips
 * at least half of a chunk of several blocks (zstd writes blocks of at most 128 KiB) and
 * the frame is whole (its block headers end at the span's end) without a checksum: the
 * blocks after the box are then not decoded, so damage inside them goes unnoticed, as it
 * does in a frame without a checksum decoded whole unless it breaks the decoding.  A gzip
 * member is inflated whole (libdeflate, which checks its CRC); of items stored as they
 * are, only the bytes from the box's first item to its last are read.  A jpeg chunk is
 * decoded only up to the last image row the box needs (csrc/jpeg.h).
 *
 * Spans this kernel does not decode (data of another format or size, short or corrupt
 * data, a file shorter than the span) leave `out` to the caller, who decodes the chunk
 * the general way and reports what is wrong: the kernel returns SV_BOX_OTHER.  A box
 * decoded whole into `out` (the whole chunk, `out` C-contiguous) may be written in part
 * before such a failure.
 */
#ifndef SHARDVOL_CHUNKBOX_H
#define SHARDVOL_CHUNKBOX_H

#include <stddef.h>
#include <stdint.h>

#include "sv_common.h"

#define SV_BOX_OTHER 1 /* not this codec's data of this chunk's bytes: decode it another way */

/* The codecs (the chunk's bytes -> bytes codec). */
#define SV_BOX_ZSTD 1
#define SV_BOX_GZIP 2
#define SV_BOX_NONE 3 /* the items as they are */
/* A Neuroglancer "jpeg" chunk (csrc/jpeg.h; uint8, the chunk's axes C order reversed:
 * channel, z, y, x), as it is or as one gzip member (a sharded scale's gzip data
 * encoding). */
#define SV_BOX_JPEG 4
#define SV_BOX_GZIP_JPEG 5

/* Decompressors and the buffers they read and decode into, grown as needed; one per
 * thread. */
typedef struct sv_box_reader sv_box_reader;

/* A new reader; NULL without memory. */
sv_box_reader *sv_box_reader_new(void);
void sv_box_reader_free(sv_box_reader *reader);

/* Free the reader's buffers that hold more than `keep` bytes (a thread that read a few
 * huge chunks need not keep their room). */
void sv_box_reader_trim(sv_box_reader *reader, size_t keep);

/* Read the `length` bytes at `offset` of the open file `fd`, decode them (`codec`) as the
 * chunk described above, and copy its box [origin, origin + count) into `out`, whose item
 * (i, j, k, l) of the box is at out + i*out_strides[0] + ... + l*out_strides[3] (byte
 * strides, any sign).  Returns SV_OK, SV_BOX_OTHER, SV_ERR_ARGUMENT (an unknown codec, a
 * box outside the chunk, an itemsize outside 1..16) or SV_ERR_IO with the errno in
 * *err_no. */
int sv_box_read(sv_box_reader *reader, int codec, int fd, int64_t offset, int64_t length,
                int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                const int64_t count[4], uint8_t *out, const int64_t out_strides[4],
                int *err_no);

#endif

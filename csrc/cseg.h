/* Neuroglancer compressed_segmentation: encode and decode, uint32 and uint64 labels.
 *
 * Byte format (all words little-endian uint32; offsets count 32-bit words):
 *
 *   multi-channel header: one word per channel, the offset of that channel's
 *   data from the start of the buffer.  A channel's data runs to the end of
 *   the buffer; every offset inside it is relative to the channel's start.
 *
 *   channel: the volume (x, y, z) is cut into blocks of (bx, by, bz) voxels,
 *   a grid of (gx, gy, gz) = ceil(volume / block) blocks.  The channel starts
 *   with gx*gy*gz two-word block headers, the header of block (i, j, k) at
 *   word 2 * (i + gx * (j + gy * k)):
 *     word 0: bits 0-23 lookup table offset, bits 24-31 encoded bits
 *             (0, 1, 2, 4, 8, 16 or 32);
 *     word 1: encoded values offset.
 *   The lookup table holds the block's distinct labels (uint32: one word
 *   each; uint64: two words each, low word first).  The encoded values are
 *   ceil(bits * bx*by*bz / 32) words holding, for position (x, y, z) inside
 *   the block, the table index at bit offset bits * (x + bx * (y + by * z)),
 *   packed from the least significant bit of each word.  Blocks at the upper
 *   edge of the volume are encoded as if padded to the full block size.  With
 *   0 bits every voxel of the block has the label at table index 0.
 *
 * The encoder writes what Neuroglancer, TensorStore and the
 * compressed_segmentation package write: blocks in order x fastest, each
 * block's encoded values followed by its sorted table, a table identical to
 * one already written in the same channel being reused instead of written
 * again, padding voxels taking index 0.
 *
 * Arrays are addressed by (x, y, z, channel) element strides (not bytes), so
 * any memory order and any strided view works, including negative strides.
 */
#ifndef SHARDVOL_CSEG_H
#define SHARDVOL_CSEG_H

#include <stddef.h>

#include "sv_common.h"

/* Largest block volume accepted (voxels): keeps every offset computation far
 * from overflow. */
#define SV_CSEG_MAX_BLOCK_VOXELS ((uint64_t)1 << 32)

/* What went wrong, in sv_cseg_error.reason. */
enum {
    SV_CSEG_NO_ERROR = 0,
    SV_CSEG_LENGTH_NOT_WORDS,  /* decode: length not a multiple of 4 (value = length) */
    SV_CSEG_CHANNEL_HEADER,    /* decode: too short for the channel offsets (value = words) */
    SV_CSEG_CHANNEL_OFFSET,    /* decode: channel offset past the end (value, limit) */
    SV_CSEG_BLOCK_HEADERS,     /* decode: channel shorter than its block headers (value = need) */
    SV_CSEG_BITS,              /* decode: encoded bits not 0,1,2,4,8,16,32 (value) */
    SV_CSEG_VALUES_OFFSET,     /* decode: encoded values run past the end (value = end, limit) */
    SV_CSEG_TABLE_OFFSET,      /* decode: table offset past the end / no room for one entry */
    SV_CSEG_TABLE_INDEX,       /* decode: encoded index past the end of the table (value, limit) */
    SV_CSEG_TABLE_OFFSET_24,   /* encode: a table offset does not fit in 24 bits (value) */
    SV_CSEG_VALUES_OFFSET_32,  /* encode: an encoded values offset does not fit in 32 bits */
    SV_CSEG_BAD_ARGUMENT       /* label size not 4/8, zero block size, block too large */
};

/* Where and why a call failed.  Offsets and limits count 32-bit words from
 * the start of the channel, except for the channel header reasons. */
typedef struct {
    int reason;
    size_t channel;
    size_t block[3]; /* grid position (x, y, z) of the block at fault */
    uint64_t value;  /* the offending value */
    uint64_t limit;  /* the bound it breaks */
} sv_cseg_error;

/* Decode `len` bytes at `data` into `out`.
 *
 * label_bytes: 4 (uint32) or 8 (uint64).  shape: (x, y, z, channels) of the
 * volume; block_shape: (bx, by, bz).  out: the element at (x, y, z, c) is
 * out[x*s[0] + y*s[1] + z*s[2] + c*s[3]] for s = out_strides, in elements.
 * Every offset, bit width and table index is checked against the buffer;
 * on failure returns SV_ERR_CORRUPT / SV_ERR_TRUNCATED / SV_ERR_ARGUMENT with
 * *err filled in (out is then partly written). */
int sv_cseg_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[4],
                   const size_t block_shape[3], void *out, const ptrdiff_t out_strides[4],
                   sv_cseg_error *err);

/* Decode only the voxels [origin, origin + region) of the volume (x, y, z,
 * channel) into `out`, whose element (0, 0, 0, 0) is the voxel at `origin`.
 * Every channel offset and block header is checked as by sv_cseg_decode, but
 * only the blocks that meet the region are decoded (so only their table
 * indexes are checked).  SV_ERR_ARGUMENT if the region is not inside shape.
 * `scratch` (may be NULL): `scratch_len` bytes; when they hold region[0] *
 * region[1] * block_shape[2] labels, each layer of blocks is decoded there
 * first and then copied to `out` row by row (faster when `out` is a view of
 * a large array: writes then go to it in order). */
int sv_cseg_decode_region(const uint8_t *data, size_t len, size_t label_bytes,
                          const size_t shape[4], const size_t block_shape[3],
                          const size_t origin[4], const size_t region[4], void *out,
                          const ptrdiff_t out_strides[4], void *scratch, size_t scratch_len,
                          sv_cseg_error *err);
/* Encode the volume at `in` (addressed like `out` above).  On success *out
 * points to *out_len bytes allocated with malloc (release with sv_cseg_free).
 * Returns SV_ERR_NOMEM, SV_ERR_OVERFLOW (a chunk too large for the format's
 * 24-bit table offsets, with *err filled in) or SV_ERR_ARGUMENT. */
int sv_cseg_encode(const void *in, size_t label_bytes, const size_t shape[4],
                   const ptrdiff_t in_strides[4], const size_t block_shape[3], uint8_t **out,
                   size_t *out_len, sv_cseg_error *err);

/* Release a buffer returned by sv_cseg_encode. */
void sv_cseg_free(void *p);

#endif

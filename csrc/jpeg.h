/* Neuroglancer "jpeg" chunks: decode a box of a chunk with libjpeg(-turbo),
 * straight into a strided output; encode chunks from strided input.
 *
 * Layout: a chunk of shape (X, Y, Z, C), C = 1 (grayscale) or 3 (RGB), uint8,
 * is one baseline/progressive JPEG image whose pixels, read row after row,
 * are the voxels in Fortran order (x fastest, then y, then z), channels
 * interleaved.  Writers make the image X wide and Y*Z high (image row
 * y + Y*z, column x is voxel (x, y, z)); any width and height whose product
 * is X*Y*Z is accepted, as Neuroglancer and TensorStore do.
 *
 * Decoding is bit-identical to decoding the whole image with libjpeg's
 * defaults (islow IDCT, fancy upsampling) and slicing; it does less work:
 *   - image rows before the first needed one, and runs of rows between the
 *     needed ones (the y outside the box between two z planes), are skipped
 *     with jpeg_skip_scanlines (whole iMCU rows are only entropy-decoded),
 *     from a row-group boundary (see skip_rows in jpeg.c for the libjpeg-turbo
 *     bug this avoids);
 *   - decoding stops after the last needed row: the stream after it is not
 *     read, so corruption or truncation there is not detected; a box that
 *     reaches the image's last row also checks the stream's end (no left-over
 *     entropy-coded data, an end-of-image marker), which TensorStore does not;
 *   - when the image is X wide, only the iMCU columns covering [x0, x1) are
 *     inverse transformed (jpeg_crop_scanline).  With horizontal chroma
 *     subsampling the window keeps one pixel of margin on each side inside the
 *     image and is at least one iMCU column wide, so the fancy upsampler
 *     never treats a box edge as an image edge nor falls back to box
 *     upsampling.
 * Decoded rows pass through one row buffer of the (cropped) image width into
 * the output; there is no whole-image temporary.  A whole grayscale chunk
 * whose width holds whole 8x8 blocks, into an output laid out as the image
 * (as the staged box is), is inverse transformed straight into the output
 * (libjpeg's raw data: the same samples, 17% less time).
 *
 * libjpeg errors AND warnings (corrupt data, premature end of data, which
 * libjpeg would otherwise pad with gray) are errors, as in TensorStore.
 * The header is checked before any allocation sized by it: width * height
 * must equal X*Y*Z, the component count C and the precision 8 bits.
 */
#ifndef SHARDVOL_JPEG_H
#define SHARDVOL_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "sv_common.h"

/* Room for libjpeg's formatted messages (its JMSG_LENGTH_MAX). */
#define SV_JPEG_MESSAGE_MAX 200

/* What went wrong, in sv_jpeg_error.reason. */
enum {
    SV_JPEG_NO_ERROR = 0,
    SV_JPEG_LIBJPEG,     /* libjpeg error or warning: corrupt or truncated data (message) */
    SV_JPEG_SIZE,        /* width * height != X*Y*Z (width, height) */
    SV_JPEG_COMPONENTS,  /* the image has `value` components, not C */
    SV_JPEG_PRECISION,   /* the image has `value`-bit samples, not 8 */
    SV_JPEG_BAD_ARGUMENT /* C not 1 or 3, box outside the chunk, data too long for libjpeg */
};

typedef struct {
    int reason;
    uint32_t width, height; /* from the frame header, once read */
    int value;
    char message[SV_JPEG_MESSAGE_MAX]; /* libjpeg's message for SV_JPEG_LIBJPEG */
} sv_jpeg_error;

/* Decode the box [origin, origin + region) of the chunk of `shape`
 * (X, Y, Z, C) held in the `len` bytes at `data` into `out`: the box's
 * voxel (x, y, z, c) goes to out[x*s[0] + y*s[1] + z*s[2] + c*s[3]] for
 * s = out_strides, in bytes (any signs).  origin[3]/region[3] select
 * channels.  An empty box only checks the header.
 *
 * Returns SV_OK; SV_ERR_ARGUMENT (reason SV_JPEG_BAD_ARGUMENT); or
 * SV_ERR_CORRUPT with *err filled in (out may then be partly written).
 * `scratch` (may be NULL): `scratch_len` bytes the box is decoded into first,
 * when it fits, then copied to `out` (faster when `out` is a view of a large
 * array).  Thread-safe: all state lives in the call and `scratch`. */
int sv_jpeg_decode_region(const uint8_t *data, size_t len, const size_t shape[4],
                          const size_t origin[4], const size_t region[4], uint8_t *out,
                          const ptrdiff_t out_strides[4], uint8_t *scratch, size_t scratch_len,
                          sv_jpeg_error *err);

/* Encode a uint8 chunk of `shape` (X, Y, Z, C), C = 1 or 3, whose voxel
 * (x, y, z, c) is at in[x*s[0] + y*s[1] + z*s[2] + c*s[3]] (s = strides in
 * bytes, any signs) as a baseline JPEG image X wide and Y*Z high at `quality`
 * (0-100), byte for byte what libjpeg's jpeg_write_scanlines makes with its
 * defaults (islow DCT, standard Huffman tables, JFIF header; RGB as YCbCr
 * with 2x2 chroma subsampling): grayscale rows go in as raw data, padded as
 * libjpeg pads, RGB rows interleaved a few at a time.  On SV_OK, *buf holds
 * *len bytes, malloc'd (the caller frees it).  Returns SV_ERR_ARGUMENT
 * (reason SV_JPEG_BAD_ARGUMENT: an empty chunk, C not 1 or 3, quality out of
 * range; SV_JPEG_SIZE: a side over 65500 pixels, message filled in),
 * SV_ERR_NOMEM, or SV_ERR_CORRUPT (reason SV_JPEG_LIBJPEG, message). */
int sv_jpeg_encode(const uint8_t *in, const size_t shape[4], const ptrdiff_t strides[4],
                   int quality, uint8_t **buf, size_t *len, sv_jpeg_error *err);

#endif

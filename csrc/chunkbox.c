/* See chunkbox.h. */
#define _POSIX_C_SOURCE 200809L
#include "chunkbox.h"

#include <libdeflate.h>
#include <stdlib.h>
#include <zstd.h>

#include "jpeg.h"
#include "sv_io.h"
#include "transpose.h"

/* The largest zstd block (ZSTD_BLOCKSIZE_MAX, of zstd's static-only API). */
#define MAX_BLOCK ((size_t)128 << 10)

/* No encoding of a chunk is longer than the codec's bound (stored blocks, for deflate)
 * plus this much (headers, their optional fields): longer spans are not decoded here. */
#define SLACK 4096

/* A jpeg image of a chunk of n voxels is at most this long (quality 100 on noise takes
 * about 2 bytes a voxel): a longer one is left to the general path. */
#define JPEG_MAX(n) (4 * (n) + SLACK)

struct sv_box_reader {
    ZSTD_DCtx *dctx;
    struct libdeflate_decompressor *inflater;
    uint8_t *src, *chunk, *stage;
    size_t src_cap, chunk_cap, stage_cap;
};

sv_box_reader *sv_box_reader_new(void) {
    sv_box_reader *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->dctx = ZSTD_createDCtx();
    r->inflater = libdeflate_alloc_decompressor();
    if (r->dctx == NULL || r->inflater == NULL) {
        sv_box_reader_free(r);
        return NULL;
    }
    return r;
}

void sv_box_reader_free(sv_box_reader *r) {
    if (r == NULL) return;
    ZSTD_freeDCtx(r->dctx);
    if (r->inflater != NULL) libdeflate_free_decompressor(r->inflater);
    free(r->src);
    free(r->chunk);
    free(r->stage);
    free(r);
}

void sv_box_reader_trim(sv_box_reader *r, size_t keep) {
    if (r->src_cap > keep) {
        free(r->src);
        r->src = NULL;
        r->src_cap = 0;
    }
    if (r->chunk_cap > keep) {
        free(r->chunk);
        r->chunk = NULL;
        r->chunk_cap = 0;
    }
    if (r->stage_cap > keep) {
        free(r->stage);
        r->stage = NULL;
        r->stage_cap = 0;
    }
}

/* *buf holds at least n bytes (grown, contents dropped); 0 without memory. */
static int reserve(uint8_t **buf, size_t *cap, size_t n) {
    if (*cap >= n) return 1;
    uint8_t *grown = malloc(n);
    if (grown == NULL) return 0;
    free(*buf);
    *buf = grown;
    *cap = n;
    return 1;
}

/* Inflate the gzip member src[0, n) into dst, exactly `total` bytes; SV_OK or SV_BOX_OTHER. */
static int inflate_whole(struct libdeflate_decompressor *d, const uint8_t *src, size_t n,
                         uint8_t *dst, size_t total) {
    size_t got = 0, used = 0;
    const enum libdeflate_result rc =
        libdeflate_gzip_decompress_ex(d, src, n, dst, total, &used, &got);
    return rc == LIBDEFLATE_SUCCESS && got == total && used == n ? SV_OK : SV_BOX_OTHER;
}

/* Whether src[0, n) is one whole zstd frame without a content checksum: its blocks'
 * headers (walked, not decoded) end exactly at n, and the Content_Checksum_flag (bit 2 of
 * the frame header descriptor after the 4-byte magic number, RFC 8878) is clear.  Only
 * such a frame may be decoded in part: a truncated one, or a checksum, is checked by
 * decoding it whole. */
static int prefix_decodable(const uint8_t *src, size_t n) {
    return n > 4 && (src[4] & 0x04) == 0 && ZSTD_findFrameCompressedSize(src, n) == n;
}

/* Decode the first `want` bytes of the frame src[0, n) into dst; SV_OK or SV_BOX_OTHER.
 * The whole chunk (want == total) is decoded in one call, which also checks that the
 * frame holds exactly `total` bytes (and its checksum, if it has one); a prefix is
 * streamed, stopping at `want` (the blocks after it, not decoded, are not checked). */
static int decode_prefix(ZSTD_DCtx *dctx, const uint8_t *src, size_t n, uint8_t *dst,
                         size_t want, size_t total) {
    const unsigned long long declared = ZSTD_getFrameContentSize(src, n);
    if (declared == ZSTD_CONTENTSIZE_ERROR) return SV_BOX_OTHER;
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != total) return SV_BOX_OTHER;
    if (want < total && !prefix_decodable(src, n)) want = total;
    if (want == total) {
        const size_t got = ZSTD_decompressDCtx(dctx, dst, total, src, n);
        return ZSTD_isError(got) || got != total ? SV_BOX_OTHER : SV_OK;
    }
    if (ZSTD_isError(ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only))) return SV_BOX_OTHER;
    ZSTD_outBuffer o = {dst, want, 0};
    ZSTD_inBuffer i = {src, n, 0};
    while (o.pos < want) {
        const size_t in_before = i.pos, out_before = o.pos;
        const size_t r = ZSTD_decompressStream(dctx, &o, &i);
        if (ZSTD_isError(r)) return SV_BOX_OTHER;
        if (o.pos < want && i.pos == i.size && (r == 0 || (i.pos == in_before && o.pos == out_before)))
            return SV_BOX_OTHER; /* the data end before the box does */
    }
    return SV_OK;
}

/* Copy the box at `origin` of the decoded chunk into out. */
static int copy_box(const uint8_t *chunk, const int64_t origin[4], const ptrdiff_t chunk_strides[4],
                    uint8_t *out, const ptrdiff_t out_strides[4], const size_t count[4],
                    int64_t itemsize) {
    for (int d = 0; d < 4; d++) chunk += (size_t)origin[d] * (size_t)chunk_strides[d];
    return sv_copy_transposed(chunk, chunk_strides, out, out_strides, count, (size_t)itemsize);
}

/* Decode the box of the jpeg chunk in r->src[0, n) (gzipped if `gz`) into out: its axes
 * are the chunk's (X, Y, Z, C) reversed.  Any failure is SV_BOX_OTHER: the general path
 * decodes the chunk again and names what is wrong. */
static int read_jpeg(sv_box_reader *r, int gz, size_t n, const int64_t shape[4],
                     const int64_t origin[4], const int64_t count[4], uint8_t *out,
                     const int64_t out_strides[4], size_t total) {
    const uint8_t *image = r->src;
    size_t image_len = n;
    if (gz) { /* the member's size is its last four bytes (ISIZE, RFC 1952) */
        if (n < 18) return SV_BOX_OTHER;
        const uint8_t *t = r->src + n - 4;
        image_len = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
        if (image_len == 0 || image_len > JPEG_MAX(total) ||
            !reserve(&r->chunk, &r->chunk_cap, image_len) ||
            inflate_whole(r->inflater, r->src, n, r->chunk, image_len) != SV_OK)
            return SV_BOX_OTHER;
        image = r->chunk;
    }
    size_t full[4], start[4], region[4], box_bytes = 1;
    ptrdiff_t strides[4];
    for (int d = 0; d < 4; d++) {
        full[d] = (size_t)shape[3 - d];
        start[d] = (size_t)origin[3 - d];
        region[d] = (size_t)count[3 - d];
        strides[d] = (ptrdiff_t)out_strides[3 - d];
        box_bytes *= region[d];
    }
    /* decoded into a staging buffer, then copied: rows written straight into a large
     * output cost more (see jpeg.c) */
    if (!reserve(&r->stage, &r->stage_cap, box_bytes)) return SV_BOX_OTHER;
    sv_jpeg_error err;
    return sv_jpeg_decode_region(image, image_len, full, start, region, out, strides, r->stage,
                                 box_bytes, &err) == SV_OK
               ? SV_OK
               : SV_BOX_OTHER;
}

int sv_box_read(sv_box_reader *r, int codec, int fd, int64_t offset, int64_t length,
                int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                const int64_t count[4], uint8_t *out, const int64_t out_strides[4],
                int *err_no) {
    const int jpeg = codec == SV_BOX_JPEG || codec == SV_BOX_GZIP_JPEG;
    if (itemsize < 1 || itemsize > 16 || (jpeg && itemsize != 1) ||
        (codec != SV_BOX_ZSTD && codec != SV_BOX_GZIP && codec != SV_BOX_NONE && !jpeg))
        return SV_ERR_ARGUMENT;
    size_t total = (size_t)itemsize, last = 0;
    ptrdiff_t chunk_strides[4], dst_strides[4];
    size_t n[4];
    int whole = 1, c_contiguous = 1;
    for (int d = 3; d >= 0; d--) {
        if (shape[d] < 1 || origin[d] < 0 || count[d] < 1 || count[d] > shape[d] - origin[d])
            return SV_ERR_ARGUMENT;
        chunk_strides[d] = (ptrdiff_t)total;
        dst_strides[d] = (ptrdiff_t)out_strides[d];
        n[d] = (size_t)count[d];
        if (out_strides[d] != (int64_t)total && shape[d] > 1) c_contiguous = 0;
        last += (size_t)(origin[d] + count[d] - 1) * total;
        if (count[d] != shape[d]) whole = 0;
        if (__builtin_mul_overflow(total, (size_t)shape[d], &total)) return SV_ERR_ARGUMENT;
    }
    if (jpeg && total > ((size_t)1 << 40)) return SV_BOX_OTHER; /* no JPEG is that large */
    const size_t longest =
        codec == SV_BOX_NONE        ? total
        : codec == SV_BOX_ZSTD      ? SLACK + ZSTD_compressBound(total)
        : codec == SV_BOX_JPEG      ? JPEG_MAX(total)
        : codec == SV_BOX_GZIP_JPEG ? SLACK + libdeflate_deflate_compress_bound(NULL, JPEG_MAX(total))
                                    : SLACK + libdeflate_deflate_compress_bound(NULL, total);
    if (offset < 0 || length < 1 || (size_t)length > longest ||
        (codec == SV_BOX_NONE && (size_t)length != total))
        return SV_BOX_OTHER; /* no encoding of this chunk is that long: the caller's to check */
    /* items as they are: only the bytes from the box's first item to its last are read */
    size_t first = 0;
    if (codec == SV_BOX_NONE)
        for (int d = 0; d < 4; d++) first += (size_t)origin[d] * (size_t)chunk_strides[d];
    const size_t span = codec == SV_BOX_NONE ? last + (size_t)itemsize - first : (size_t)length;
    if (!reserve(&r->src, &r->src_cap, span)) return SV_BOX_OTHER;
    const int got = sv_pread_exact(fd, r->src, (int64_t)span, offset + (int64_t)first);
    if (got < 0) {
        *err_no = errno;
        return SV_ERR_IO;
    }
    if (got > 0) return SV_BOX_OTHER; /* the file ends first */
    if (jpeg)
        return read_jpeg(r, codec == SV_BOX_GZIP_JPEG, (size_t)length, shape, origin, count, out,
                         out_strides, total);
    if (codec == SV_BOX_NONE)
        return sv_copy_transposed(r->src, chunk_strides, out, dst_strides, n, (size_t)itemsize);
    if (whole && c_contiguous)
        return codec == SV_BOX_ZSTD
                   ? decode_prefix(r->dctx, r->src, (size_t)length, out, total, total)
                   : inflate_whole(r->inflater, r->src, (size_t)length, out, total);
    if (!reserve(&r->chunk, &r->chunk_cap, total)) return SV_BOX_OTHER;
    size_t want = last + (size_t)itemsize;
    /* A prefix is streamed through zstd's own buffer, one more copy of it: worth it when
     * it skips at least half of the chunk, and only chunks of more than one block have
     * blocks to skip. */
    if (want > total / 2 || total <= MAX_BLOCK) want = total;
    const int rc = codec == SV_BOX_ZSTD
                       ? decode_prefix(r->dctx, r->src, (size_t)length, r->chunk, want, total)
                       : inflate_whole(r->inflater, r->src, (size_t)length, r->chunk, total);
    if (rc != SV_OK) return rc;
    return copy_box(r->chunk, origin, chunk_strides, out, dst_strides, n, itemsize);
}

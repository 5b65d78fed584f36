/* Copying a 4-D box of items between strided buffers: what the decoders use to move a box
 * from their staging buffer (or a chunk file's bytes) into the caller's output. */
#ifndef SHARDVOL_COPYBOX_H
#define SHARDVOL_COPYBOX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define SV_HAVE_STREAM 1
#else
#define SV_HAVE_STREAM 0
#endif

/* A box whose bytes span this much of the output or more, in whole cache lines, is written
 * with non-temporal stores (see sv_stream_box): it would not stay in the CPU caches anyway,
 * and bypassing them skips reading each destination line before writing it and keeps other
 * data cached.
 * The C checkers build with a small value, so that their small boxes take both paths. */
#ifndef SV_STREAM_MIN_SPAN
#define SV_STREAM_MIN_SPAN ((size_t)2 << 20)
#endif

/* How many bytes of a buffer the box spans (byte strides, any sign). */
static inline size_t sv_box_span(const ptrdiff_t strides[4], const size_t count[4],
                                 size_t itemsize) {
    size_t span = itemsize;
    for (int d = 0; d < 4; d++) {
        if (count[d] == 0) return 0;
        const size_t step = (size_t)(strides[d] < 0 ? -strides[d] : strides[d]);
        span += (count[d] - 1) * step;
    }
    return span;
}

/* memcpy of one row with non-temporal stores for its 8-byte aligned middle. */
static inline void sv_stream_row(uint8_t *d, const uint8_t *s, size_t n) {
#if SV_HAVE_STREAM
    size_t head = (size_t)(-(uintptr_t)d & 7);
    if (head > n) head = n;
    memcpy(d, s, head);
    size_t i = head;
    for (; i + 8 <= n; i += 8) {
        long long v;
        memcpy(&v, s + i, 8);
        _mm_stream_si64((long long *)(d + i), v);
    }
    memcpy(d + i, s + i, n - i);
#else
    memcpy(d, s, n);
#endif
}

enum { SV_COPY_ITEMS, SV_COPY_ROWS, SV_COPY_STREAM };

#if defined(__GNUC__)
#define SV_COPY_INLINE inline __attribute__((always_inline))
#else
#define SV_COPY_INLINE inline
#endif

/* Rows of at most SV_PREFETCH_ROW_MAX bytes are prefetched SV_PREFETCH_ROWS rows ahead (the
 * row as far into the next plane at a plane's end; never outside the box): 67 instead of
 * 108 us per 64^3 uint8 chunk of a 512^3 volume. */
#define SV_PREFETCH_ROWS 16
#define SV_PREFETCH_ROW_MAX 256

/* The loops of sv_copy_box_to, for a constant `how` (one loop nest each). */
static SV_COPY_INLINE void sv_copy_box_as(
    const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
    const ptrdiff_t dst_strides[4], const size_t count[4], size_t itemsize, const int how) {
    const size_t row_bytes = count[0] * itemsize;
    for (size_t l = 0; l < count[3]; l++)
        for (size_t k = 0; k < count[2]; k++)
            for (size_t j = 0; j < count[1]; j++) {
                const uint8_t *s = src + (ptrdiff_t)l * src_strides[3] +
                                   (ptrdiff_t)k * src_strides[2] + (ptrdiff_t)j * src_strides[1];
                uint8_t *d = dst + (ptrdiff_t)l * dst_strides[3] + (ptrdiff_t)k * dst_strides[2] +
                             (ptrdiff_t)j * dst_strides[1];
                if (how != SV_COPY_ITEMS && row_bytes <= SV_PREFETCH_ROW_MAX) {
                    /* short rows far apart (a chunk of a larger array): ask for a row some
                     * rows ahead, so that the loads overlap instead of waiting in turn */
                    const uint8_t *ahead = NULL;
                    if (j + SV_PREFETCH_ROWS < count[1])
                        ahead = s + (ptrdiff_t)SV_PREFETCH_ROWS * src_strides[1];
                    else if (k + 1 < count[2] && j + SV_PREFETCH_ROWS - count[1] < count[1])
                        ahead = s + src_strides[2] +
                                ((ptrdiff_t)SV_PREFETCH_ROWS - (ptrdiff_t)count[1]) *
                                    src_strides[1];
                    if (ahead) {
                        __builtin_prefetch(ahead);
                        __builtin_prefetch(ahead + row_bytes - 1);
                    }
                }
                if (how == SV_COPY_STREAM) {
                    sv_stream_row(d, s, row_bytes);
                } else if (how == SV_COPY_ROWS) {
                    memcpy(d, s, row_bytes);
                } else {
                    for (size_t i = 0; i < count[0]; i++)
                        memcpy(d + (ptrdiff_t)i * dst_strides[0], s + (ptrdiff_t)i * src_strides[0],
                               itemsize);
                }
            }
}

/* Copy count[0] x count[1] x count[2] x count[3] items of `itemsize` bytes; item (i, j, k, l)
 * is at src + i*src_strides[0] + ... + l*src_strides[3], and likewise in dst (byte strides,
 * any sign).  Rows (axis 0) contiguous on both sides are copied with one memcpy each, or
 * with non-temporal stores if `stream` (the caller writes a large box of dst, of which
 * this may be a part). */
static inline void sv_copy_box_to(const uint8_t *src, const ptrdiff_t src_strides[4],
                                  uint8_t *dst, const ptrdiff_t dst_strides[4],
                                  const size_t count[4], size_t itemsize, int stream) {
    const int rows = src_strides[0] == (ptrdiff_t)itemsize && dst_strides[0] == (ptrdiff_t)itemsize;
    if (!rows) {
        sv_copy_box_as(src, src_strides, dst, dst_strides, count, itemsize, SV_COPY_ITEMS);
    } else if (!SV_HAVE_STREAM || !stream) {
        sv_copy_box_as(src, src_strides, dst, dst_strides, count, itemsize, SV_COPY_ROWS);
    } else {
        sv_copy_box_as(src, src_strides, dst, dst_strides, count, itemsize, SV_COPY_STREAM);
#if SV_HAVE_STREAM
        _mm_sfence(); /* the streamed stores are visible before the caller goes on */
#endif
    }
}

#define SV_CACHE_LINE 64

/* Whether to write a box of dst with non-temporal stores: it spans SV_STREAM_MIN_SPAN bytes
 * or more, and every row of it is whole cache lines (rows along axis 0, contiguous; each
 * row's start aligned, its length and the other strides multiples of a line).  A row that
 * only covers lines in part (a box at an unaligned x in a cutout) makes each of its stores
 * a partial line write, several times slower than an ordinary store. */
static inline int sv_stream_box(const uint8_t *dst, const ptrdiff_t dst_strides[4],
                                const size_t count[4], size_t itemsize) {
    if (sv_box_span(dst_strides, count, itemsize) < SV_STREAM_MIN_SPAN ||
        dst_strides[0] != (ptrdiff_t)itemsize || (uintptr_t)dst % SV_CACHE_LINE != 0 ||
        (count[0] * itemsize) % SV_CACHE_LINE != 0)
        return 0;
    for (int d = 1; d < 4; d++)
        if (count[d] > 1 && dst_strides[d] % SV_CACHE_LINE != 0) return 0;
    return 1;
}

/* sv_copy_box_to, streaming when sv_stream_box says so. */
static inline void sv_copy_box(const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
                               const ptrdiff_t dst_strides[4], const size_t count[4],
                               size_t itemsize) {
    sv_copy_box_to(src, src_strides, dst, dst_strides, count, itemsize,
                   sv_stream_box(dst, dst_strides, count, itemsize));
}

#endif

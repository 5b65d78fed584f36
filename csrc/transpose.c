#include "transpose.h"

#include <string.h>

#include "copybox.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define SV_HAVE_SSE2 1
#else
#define SV_HAVE_SSE2 0
#endif

/* Tile edge (items) along the two axes swapped: TILE x TILE items of 16 bytes at most
 * are 32 KiB read plus 32 KiB written, within the L1 and L2 caches of common CPUs. */
#define TILE 32

static size_t abs_stride(ptrdiff_t s) { return (size_t)(s < 0 ? -s : s); }

/* The axis (of those with more than one item) whose stride is smallest; -1 if none. */
static int fastest_axis(const ptrdiff_t strides[4], const size_t count[4]) {
    int best = -1;
    for (int d = 0; d < 4; d++)
        if (count[d] > 1 && (best < 0 || abs_stride(strides[d]) < abs_stride(strides[best])))
            best = d;
    return best;
}

/* One tile: items (a, b) for a in [0, na), b in [0, nb), a along the source's fast axis, b
 * along the destination's; the inner loop runs along b, so destination rows are written
 * in order, while the tile's source lines stay cached. */
#define TILE_LOOP(T)                                                                         \
    for (size_t a = 0; a < na; a++) {                                                        \
        const uint8_t *s = src + (ptrdiff_t)a * sa;                                          \
        uint8_t *d = dst + (ptrdiff_t)a * da;                                                \
        for (size_t b = 0; b < nb; b++) {                                                    \
            T v;                                                                             \
            memcpy(&v, s + (ptrdiff_t)b * sb, sizeof v);                                     \
            memcpy(d + (ptrdiff_t)b * db, &v, sizeof v);                                     \
        }                                                                                    \
    }

static void copy_tile(const uint8_t *src, ptrdiff_t sa, ptrdiff_t sb, uint8_t *dst,
                      ptrdiff_t da, ptrdiff_t db, size_t na, size_t nb, size_t itemsize) {
    switch (itemsize) {
    case 1: TILE_LOOP(uint8_t) break;
    case 2: TILE_LOOP(uint16_t) break;
    case 4: TILE_LOOP(uint32_t) break;
    case 8: TILE_LOOP(uint64_t) break;
    default:
        for (size_t a = 0; a < na; a++)
            for (size_t b = 0; b < nb; b++)
                memcpy(dst + (ptrdiff_t)a * da + (ptrdiff_t)b * db,
                       src + (ptrdiff_t)a * sa + (ptrdiff_t)b * sb, itemsize);
    }
}

#if SV_HAVE_SSE2
/* 16 x 16 bytes: row b of the tile is src + b*sb (16 bytes along a), row a of the result
 * goes to dst + a*da (16 bytes along b).  Four rounds of interleaving (bytes, 16-, 32-,
 * 64-bit words) turn rows into columns. */
static void transpose16(const uint8_t *src, ptrdiff_t sb, uint8_t *dst, ptrdiff_t da) {
    __m128i x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = _mm_loadu_si128((const __m128i *)(src + i * sb));
    for (int i = 0; i < 8; i++) {
        y[2 * i] = _mm_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
        y[2 * i + 1] = _mm_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) {
            x[4 * i + 2 * j] = _mm_unpacklo_epi16(y[4 * i + j], y[4 * i + j + 2]);
            x[4 * i + 2 * j + 1] = _mm_unpackhi_epi16(y[4 * i + j], y[4 * i + j + 2]);
        }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            y[8 * i + 2 * j] = _mm_unpacklo_epi32(x[8 * i + j], x[8 * i + j + 4]);
            y[8 * i + 2 * j + 1] = _mm_unpackhi_epi32(x[8 * i + j], x[8 * i + j + 4]);
        }
    for (int j = 0; j < 8; j++) {
        x[2 * j] = _mm_unpacklo_epi64(y[j], y[j + 8]);
        x[2 * j + 1] = _mm_unpackhi_epi64(y[j], y[j + 8]);
    }
    for (int i = 0; i < 16; i++) _mm_storeu_si128((__m128i *)(dst + i * da), x[i]);
}
#endif

/* A tile of bytes whose source rows (along a) and destination rows (along b) are both
 * contiguous: 16 x 16 blocks with SSE2, the edges item by item. */
static void copy_byte_tile(const uint8_t *src, ptrdiff_t sb, uint8_t *dst, ptrdiff_t da,
                           size_t na, size_t nb) {
    size_t a0 = 0, b0 = 0;
#if SV_HAVE_SSE2
    for (b0 = 0; b0 + 16 <= nb; b0 += 16)
        for (a0 = 0; a0 + 16 <= na; a0 += 16)
            transpose16(src + (ptrdiff_t)a0 + (ptrdiff_t)b0 * sb, sb,
                        dst + (ptrdiff_t)a0 * da + (ptrdiff_t)b0, da);
    const size_t full_a = na - na % 16, full_b = nb - nb % 16;
#else
    const size_t full_a = 0, full_b = 0;
#endif
    for (size_t a = 0; a < na; a++)
        for (size_t b = (a < full_a ? full_b : 0); b < nb; b++)
            dst[(ptrdiff_t)a * da + (ptrdiff_t)b] = src[(ptrdiff_t)a + (ptrdiff_t)b * sb];
    (void)a0;
    (void)b0;
}

int sv_copy_transposed(const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
                       const ptrdiff_t dst_strides[4], const size_t count[4], size_t itemsize) {
    if (itemsize == 0) return SV_ERR_ARGUMENT;
    for (int d = 0; d < 4; d++)
        if (count[d] == 0) return SV_OK;
    const int fa = fastest_axis(src_strides, count), fb = fastest_axis(dst_strides, count);
    if (fa < 0 || fb < 0 || fa == fb) { /* one layout: rows along the fast axis, in order */
        const int fast = fa < 0 ? 0 : fa;
        ptrdiff_t ss[4], ds[4];
        size_t n[4];
        for (int d = 0, k = 1; d < 4; d++) {
            const int at = d == fast ? 0 : k++;
            ss[at] = src_strides[d];
            ds[at] = dst_strides[d];
            n[at] = count[d];
        }
        sv_copy_box_to(src, ss, dst, ds, n, itemsize, 0);
        return SV_OK;
    }
    int other[2], k = 0;
    for (int d = 0; d < 4; d++)
        if (d != fa && d != fb) other[k++] = d;
    const size_t n0 = count[other[0]], n1 = count[other[1]];
    for (size_t i1 = 0; i1 < n1; i1++)
        for (size_t i0 = 0; i0 < n0; i0++) {
            const uint8_t *s = src + (ptrdiff_t)i0 * src_strides[other[0]] +
                               (ptrdiff_t)i1 * src_strides[other[1]];
            uint8_t *d = dst + (ptrdiff_t)i0 * dst_strides[other[0]] +
                         (ptrdiff_t)i1 * dst_strides[other[1]];
            for (size_t b0 = 0; b0 < count[fb]; b0 += TILE)
                for (size_t a0 = 0; a0 < count[fa]; a0 += TILE) {
                    const size_t na = count[fa] - a0 < TILE ? count[fa] - a0 : TILE;
                    const size_t nb = count[fb] - b0 < TILE ? count[fb] - b0 : TILE;
                    if (itemsize == 1 && src_strides[fa] == 1 && dst_strides[fb] == 1) {
                        copy_byte_tile(s + (ptrdiff_t)a0 + (ptrdiff_t)b0 * src_strides[fb],
                                       src_strides[fb],
                                       d + (ptrdiff_t)a0 * dst_strides[fa] + (ptrdiff_t)b0,
                                       dst_strides[fa], na, nb);
                        continue;
                    }
                    copy_tile(s + (ptrdiff_t)a0 * src_strides[fa] + (ptrdiff_t)b0 * src_strides[fb],
                              src_strides[fa], src_strides[fb],
                              d + (ptrdiff_t)a0 * dst_strides[fa] + (ptrdiff_t)b0 * dst_strides[fb],
                              dst_strides[fa], dst_strides[fb], na, nb, itemsize);
                }
        }
    return SV_OK;
}

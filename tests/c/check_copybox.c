/* Random-input checker for sv_copy_box_to and sv_box_span (csrc/copybox.h), plain and with
 * non-temporal stores; meant to run under AddressSanitizer + UndefinedBehaviorSanitizer too:
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -Icsrc tests/c/check_copybox.c \
 *       -o /tmp/check_copybox && /tmp/check_copybox 20000
 *
 * Each round copies a random box of items of 1, 2, 4 or 8 bytes between buffers with random
 * padding per axis (rows contiguous or not, some axes reversed), to a destination at a random
 * byte offset (so streamed rows start and end at every alignment), once with each mode, and
 * checks every byte of the destination buffer against an item-by-item reference (bytes outside
 * the box keep their fill).  The span of each box is checked against the extreme items.  Exits
 * non-zero on the first mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copybox.h"
#include "fuzz_rng.h"

typedef struct {
    size_t count[4];
    ptrdiff_t strides[4]; /* bytes */
    size_t len;           /* buffer bytes */
    ptrdiff_t origin;     /* byte offset of item (0, 0, 0, 0) */
} layout;

/* A buffer layout for count items per axis: padded extents, items of a row adjacent (two in
 * three) or every other one, some axes reversed. */
static layout make_layout(const size_t count[4], size_t isz, size_t misalign) {
    layout l;
    size_t extent[4], step = isz * (rnd() % 3 ? 1 : 2);
    for (int d = 0; d < 4; ++d) {
        l.count[d] = count[d];
        extent[d] = count[d] + (d == 0 && rnd() % 2 ? 0 : rnd_in(0, 3));
        l.strides[d] = (ptrdiff_t)step;
        step *= extent[d];
    }
    l.len = step + misalign;
    l.origin = (ptrdiff_t)misalign;
    for (int d = 1; d < 4; ++d)
        if (rnd() % 6 == 0) { /* axis d reversed: item 0 at the far end */
            l.origin += (ptrdiff_t)(count[d] - 1) * l.strides[d];
            l.strides[d] = -l.strides[d];
        }
    return l;
}

static ptrdiff_t item_offset(const layout *l, const size_t i[4]) {
    ptrdiff_t off = l->origin;
    for (int d = 0; d < 4; ++d) off += (ptrdiff_t)i[d] * l->strides[d];
    return off;
}

int main(int argc, char **argv) {
    rng_state = 7;
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    long streamed_rows = 0;
    for (long it = 0; it < iters; ++it) {
        const size_t isz = (size_t[]){1, 2, 4, 8}[rnd() % 4];
        size_t count[4];
        for (int d = 0; d < 4; ++d) count[d] = rnd_in(d == 3 ? 1 : 0, d == 0 ? 70 : (d == 3 ? 2 : 9));
        layout src = make_layout(count, isz, 0);
        layout dst = make_layout(count, isz, rnd_in(0, 15));
        uint8_t *s = malloc(src.len + 1), *ref = malloc(dst.len + 1), *out = malloc(dst.len + 1);
        for (size_t i = 0; i < src.len; ++i) s[i] = (uint8_t)rnd();
        memset(ref, 0xA5, dst.len);
        size_t n = count[0] * count[1] * count[2] * count[3];
        ptrdiff_t lo = PTRDIFF_MAX, hi = PTRDIFF_MIN;
        for (size_t k = 0; k < n; ++k) {
            size_t i[4] = {k % count[0], k / count[0] % count[1],
                           k / count[0] / count[1] % count[2], k / count[0] / count[1] / count[2]};
            ptrdiff_t d = item_offset(&dst, i);
            memcpy(ref + d, s + item_offset(&src, i), isz);
            if (d < lo) lo = d;
            if (d > hi) hi = d;
        }
        size_t span = sv_box_span(dst.strides, count, isz);
        if (span != (n ? (size_t)(hi - lo) + isz : 0)) {
            fprintf(stderr, "round %ld: span %zu, items cover %td\n", it, span, n ? hi - lo + (ptrdiff_t)isz : 0);
            return 1;
        }
        for (int stream = 0; stream < 2; ++stream) {
            memset(out, 0xA5, dst.len);
            sv_copy_box_to(s + src.origin, src.strides, out + dst.origin, dst.strides, count, isz,
                           stream);
            if (memcmp(out, ref, dst.len) != 0) {
                fprintf(stderr, "round %ld (stream %d): item size %zu, box %zu x %zu x %zu x %zu differs\n",
                        it, stream, isz, count[0], count[1], count[2], count[3]);
                return 1;
            }
        }
        if (src.strides[0] == (ptrdiff_t)isz && dst.strides[0] == (ptrdiff_t)isz)
            streamed_rows += (long)(count[1] * count[2] * count[3]);
        free(s);
        free(ref);
        free(out);
    }
    /* sv_stream_box: only boxes of whole cache lines spanning SV_STREAM_MIN_SPAN stream */
    const size_t big[4] = {64, 64, 64, 1}, odd[4] = {54, 64, 64, 1};
    const ptrdiff_t lines[4] = {1, 2048, 2048 * 2048, 0}, skew[4] = {1, 2050, 2048 * 2048, 0};
    const uint8_t *at = (const uint8_t *)(uintptr_t)(1 << 20);
    const int rule[5] = {sv_stream_box(at, lines, big, 1), sv_stream_box(at + 10, lines, big, 1),
                         sv_stream_box(at, lines, odd, 1), sv_stream_box(at, skew, big, 1),
                         sv_stream_box(at, lines, (const size_t[4]){64, 64, 1, 1}, 1)};
    if (rule[0] != 1 || rule[1] || rule[2] || rule[3] || rule[4]) {
        fprintf(stderr, "sv_stream_box: %d %d %d %d %d, expected 1 0 0 0 0\n", rule[0], rule[1],
                rule[2], rule[3], rule[4]);
        return 1;
    }
    printf("%ld rounds, %ld streamed rows\n", iters, streamed_rows);
    return 0;
}

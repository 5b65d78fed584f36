/* Mutation fuzzer for the compressed_segmentation C kernels, meant to run under
 * AddressSanitizer + UndefinedBehaviorSanitizer (or valgrind):
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
 *       -DSV_STREAM_MIN_SPAN=4096 \
 *       -Icsrc tests/c/fuzz_cseg.c csrc/cseg.c -o /tmp/fuzz_cseg && /tmp/fuzz_cseg 200000
 *
 * (-DSV_STREAM_MIN_SPAN=4096: staged regions spanning 4 KiB of their output or more are
 * copied out with non-temporal stores, so the fuzzer's small regions take both paths.)
 * Valid chunks come from the encoder (random segmentation-like volumes, both label
 * types, 1-3 channels, random block sizes); each is checked to round-trip, then
 * mutated (bit flips, forged words in the headers, truncation, extension) and
 * decoded from an exactly-sized heap copy into an exactly-sized output, so any
 * read or write outside either buffer is reported; random regions of the valid chunks,
 * staged through an exact-size scratch layer or not, must equal the volume.  Exits
 * non-zero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cseg.h"
#include "fuzz_rng.h"


int main(int argc, char **argv) {
    rng_state = 0x853c49e6748fea9bull;
    long iterations = argc > 1 ? atol(argv[1]) : 100000;
    long decoded = 0, rejected = 0;
    for (long it = 0; it < iterations;) {
        size_t lb = rnd() & 1 ? 8 : 4;
        size_t shape[4] = {rnd_in(1, 20), rnd_in(1, 20), rnd_in(1, 12), rnd_in(1, 3)};
        size_t bs[3] = {rnd_in(1, 9), rnd_in(1, 9), rnd_in(1, 9)};
        size_t n = shape[0] * shape[1] * shape[2] * shape[3];
        ptrdiff_t st[4] = {1, (ptrdiff_t)shape[0], (ptrdiff_t)(shape[0] * shape[1]),
                           (ptrdiff_t)(shape[0] * shape[1] * shape[2])};
        size_t nlabels = rnd_in(1, 1 + (rnd() % 3 ? 8 : 600));
        uint8_t *vol = malloc(n * lb);
        for (size_t i = 0; i < n; ++i) {
            uint64_t v = (i / rnd_in(1, 7)) % nlabels * 0x10000000001ull;
            if (lb == 4) {
                uint32_t v32 = (uint32_t)v;
                memcpy(vol + 4 * i, &v32, 4);
            } else {
                memcpy(vol + 8 * i, &v, 8);
            }
        }
        uint8_t *enc;
        size_t len;
        sv_cseg_error err;
        if (sv_cseg_encode(vol, lb, shape, st, bs, &enc, &len, &err) != SV_OK) {
            fprintf(stderr, "encode failed\n");
            return 1;
        }
        uint8_t *out = malloc(n * lb);
        if (sv_cseg_decode(enc, len, lb, shape, bs, out, st, &err) != SV_OK ||
            memcmp(out, vol, n * lb) != 0) {
            fprintf(stderr, "round trip failed (reason %d)\n", err.reason);
            return 1;
        }
        /* a random region, staged through an exact-size scratch layer or not, equals the volume's */
        {
            size_t ro[4], rn[4];
            for (int d = 0; d < 4; ++d) {
                ro[d] = rnd_in(0, shape[d] - 1);
                rn[d] = rnd_in(1, shape[d] - ro[d]);
            }
            size_t rcount = rn[0] * rn[1] * rn[2] * rn[3];
            ptrdiff_t rst[4] = {1, (ptrdiff_t)rn[0], (ptrdiff_t)(rn[0] * rn[1]),
                                (ptrdiff_t)(rn[0] * rn[1] * rn[2])};
            size_t slen = rnd() & 1 ? rn[0] * rn[1] * bs[2] * lb : 0;
            uint8_t *scratch = slen ? malloc(slen) : NULL;
            uint8_t *rout = malloc(rcount * lb);
            if (sv_cseg_decode_region(enc, len, lb, shape, bs, ro, rn, rout, rst, scratch, slen,
                                      &err) != SV_OK) {
                fprintf(stderr, "region decode failed (reason %d)\n", err.reason);
                return 1;
            }
            for (size_t c = 0; c < rn[3]; ++c)
                for (size_t z = 0; z < rn[2]; ++z)
                    for (size_t y = 0; y < rn[1]; ++y)
                        for (size_t x = 0; x < rn[0]; ++x) {
                            size_t v = (x + ro[0]) + shape[0] * ((y + ro[1]) + shape[1] * ((z + ro[2]) + shape[2] * (c + ro[3])));
                            size_t r = x + rn[0] * (y + rn[1] * (z + rn[2] * c));
                            if (memcmp(rout + r * lb, vol + v * lb, lb) != 0) {
                                fprintf(stderr, "region mismatch (staged: %d)\n", slen != 0);
                                return 1;
                            }
                        }
            free(rout);
            free(scratch);
        }
        /* mutated chunks are decoded into a random layout of the same exact-size buffer:
         * dimensions in a random order, each stride possibly negative */
        int perm[4] = {0, 1, 2, 3};
        for (int i = 3; i > 0; --i) {
            int j = (int)(rnd() % (unsigned)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        ptrdiff_t ost[4], step = 1, base = 0;
        for (int k = 0; k < 4; ++k) {
            int d = perm[k];
            ost[d] = rnd() & 1 ? step : -step;
            if (ost[d] < 0) base += step * (ptrdiff_t)(shape[d] - 1);
            step *= (ptrdiff_t)shape[d];
        }
        uint8_t *obase = out + base * (ptrdiff_t)lb;
        for (int m = 0; m < 50; ++m, ++it) {
            size_t mlen = len;
            int kind = (int)(rnd() % 4);
            if (kind == 2) mlen = rnd_in(0, len);
            if (kind == 3) mlen = len + 4 * rnd_in(1, 8);
            uint8_t *bad = malloc(mlen ? mlen : 1);
            memcpy(bad, enc, mlen < len ? mlen : len);
            for (size_t i = len; i < mlen; ++i) bad[i] = (uint8_t)rnd();
            if (kind == 0)
                for (int k = (int)rnd_in(1, 8); k > 0 && mlen; --k) bad[rnd() % mlen] ^= (uint8_t)(1u << (rnd() % 8));
            if (kind == 1 && mlen >= 4)
                for (int k = (int)rnd_in(1, 4); k > 0; --k) {
                    size_t nw = mlen / 4, w = rnd() % (nw < 64 ? nw : 64);
                    uint32_t v = (uint32_t)rnd();
                    if (rnd() & 1) v = (v & 0xFFFFFFu) % (uint32_t)(nw + 4) | ((uint32_t)(1u << (rnd() % 7)) << 24);
                    memcpy(bad + 4 * w, &v, 4);
                }
            const size_t zero[4] = {0, 0, 0, 0};
            size_t slen = rnd() & 1 ? shape[0] * shape[1] * bs[2] * lb : 0;
            uint8_t *scratch = slen ? malloc(slen) : NULL;
            int rc = sv_cseg_decode_region(bad, mlen, lb, shape, bs, zero, shape, obase, ost,
                                           scratch, slen, &err);
            free(scratch);
            if (rc == SV_OK)
                ++decoded;
            else
                ++rejected;
            free(bad);
        }
        free(out);
        sv_cseg_free(enc);
        free(vol);
    }
    printf("%ld mutated chunks: %ld decoded, %ld rejected\n", decoded + rejected, decoded, rejected);
    return 0;
}

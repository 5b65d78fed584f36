/* Random-input checker for sv_raw_read_box (csrc/rawfile.c), meant to run under
 * AddressSanitizer + UndefinedBehaviorSanitizer:
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -Icsrc tests/c/fuzz_rawfile.c \
 *       csrc/rawfile.c -o /tmp/fuzz_rawfile && /tmp/fuzz_rawfile 100000 /tmp/chunk
 *
 * Each round writes a chunk file of random shape, item size and contents (a quarter of them
 * of a wrong size, some starting with the gzip magic bytes), reads a random box of it into
 * an exact-size output of random padding through an exact-size scratch buffer, and checks
 * every voxel against the file; files that are not plain raw voxels must be left to the
 * caller, and a scratch buffer one byte short must be refused.  Exits non-zero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_rng.h"
#include "rawfile.h"

int main(int argc, char **argv) {
    rng_state = 42;
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    const char *path = argc > 2 ? argv[2] : "fuzz_rawfile.chunk";
    long ok = 0, other = 0;
    for (long it = 0; it < iters; ++it) {
        int64_t isz = (int64_t[]){1, 2, 4, 8}[rnd() % 4];
        int64_t shape[4], origin[4], count[4];
        for (int d = 0; d < 4; ++d) {
            shape[d] = (int64_t)rnd_in(1, d == 3 ? 3 : 17);
            origin[d] = (int64_t)rnd_in(0, (size_t)shape[d] - 1);
            count[d] = (int64_t)rnd_in(1, (size_t)(shape[d] - origin[d]));
        }
        int64_t n = shape[0] * shape[1] * shape[2] * shape[3] * isz;
        int64_t fsize = rnd() % 4 ? n : (int64_t)rnd_in(0, (size_t)n * 2);
        unsigned char *data = malloc(fsize ? fsize : 1);
        for (int64_t i = 0; i < fsize; ++i) data[i] = (unsigned char)rnd();
        if (fsize >= 2 && rnd() % 8 == 0) { data[0] = 0x1f; data[1] = 0x8b; }
        FILE *f = fopen(path, "wb"); fwrite(data, 1, fsize, f); fclose(f);
        /* output: exact-size buffer, box in Fortran order with random padding per axis */
        int64_t pad[4], os[4], outn = isz;
        for (int d = 0; d < 4; ++d) { pad[d] = count[d] + (int64_t)rnd_in(0, 2); }
        os[0] = isz; for (int d = 1; d < 4; ++d) os[d] = os[d - 1] * pad[d - 1];
        outn = os[3] * pad[3];
        unsigned char *out = malloc(outn);
        int64_t span = sv_raw_span(isz, shape, origin, count);
        unsigned char *scratch = malloc(span);
        int err = 0;
        int rc = sv_raw_read_box(path, isz, shape, origin, count, out, os, scratch, span, &err);
        if (rc == SV_OK) {
            ++ok;
            for (int64_t c = 0; c < count[3]; ++c) for (int64_t z = 0; z < count[2]; ++z)
            for (int64_t y = 0; y < count[1]; ++y) for (int64_t x = 0; x < count[0]; ++x) {
                int64_t fo = ((((origin[3] + c) * shape[2] + origin[2] + z) * shape[1] + origin[1] + y) * shape[0] + origin[0] + x) * isz;
                if (memcmp(out + c * os[3] + z * os[2] + y * os[1] + x * os[0], data + fo, isz)) { fprintf(stderr, "mismatch\n"); return 1; }
            }
        } else if (rc == SV_RAW_OTHER) {
            ++other;
            if (fsize == n && !(data[0] == 0x1f && data[1] == 0x8b)) { fprintf(stderr, "wrongly refused\n"); return 1; }
        } else { fprintf(stderr, "rc %d\n", rc); return 1; }
        /* too small a scratch is refused */
        if (span > 1 && sv_raw_read_box(path, isz, shape, origin, count, out, os, scratch, span - 1, &err) != SV_ERR_ARGUMENT) { fprintf(stderr, "scratch check\n"); return 1; }
        free(data); free(out); free(scratch);
    }
    printf("%ld read, %ld left to the generic path\n", ok, other);
    return 0;
}

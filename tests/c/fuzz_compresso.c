/* Mutation fuzzer for the compresso decoder (csrc/compresso.c), meant to run under
 * AddressSanitizer + UndefinedBehaviorSanitizer:
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -Icsrc tests/c/fuzz_compresso.c \
 *       csrc/compresso.c -o /tmp/fuzz_compresso && /tmp/fuzz_compresso 20000 SEED...
 *
 * Each SEED file holds a header line "sx sy sz label_bytes" and then a valid compresso
 * stream of such a chunk (tests/test_segmentation_codecs.py writes them with the compresso
 * package).  Each round takes a seed, decodes it unchanged (it must succeed), then mutates
 * it (flipped bits, random bytes, truncation, appended bytes, a random header field) and
 * decodes the result into an output of exactly the chunk's size (strided or not) with an
 * exactly sized scratch buffer: the decoder must return, never read or write outside them.
 * Prints "<n> decoded, <m> refused"; exits non-zero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compresso.h"
#include "fuzz_rng.h"

typedef struct {
    size_t shape[3];
    size_t label_bytes;
    uint8_t *data;
    size_t len;
} seed;

static int load(const char *path, seed *s) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    if (fscanf(f, "%zu %zu %zu %zu\n", &s->shape[0], &s->shape[1], &s->shape[2],
               &s->label_bytes) != 4) {
        fclose(f);
        return 0;
    }
    long start = ftell(f);
    fseek(f, 0, SEEK_END);
    s->len = (size_t)(ftell(f) - start);
    fseek(f, start, SEEK_SET);
    s->data = malloc(s->len ? s->len : 1);
    size_t got = fread(s->data, 1, s->len, f);
    fclose(f);
    return got == s->len;
}

static int decode(const seed *s, const uint8_t *data, size_t len, int strided) {
    const size_t n = s->shape[0] * s->shape[1] * s->shape[2];
    /* strided: the chunk as a view of a volume one voxel larger on every axis */
    const size_t px = s->shape[0] + strided, py = s->shape[1] + strided;
    const size_t pz = s->shape[2] + strided;
    const size_t total = strided ? px * py * pz : n;
    void *out = malloc(total * s->label_bytes);
    const size_t scratch_len = sv_cpso_scratch_bytes(s->shape);
    void *scratch = malloc(scratch_len);
    const ptrdiff_t strides[3] = {1, (ptrdiff_t)px, (ptrdiff_t)(px * py)};
    sv_cpso_error err;
    const int rc = sv_cpso_decode(data, len, s->label_bytes, s->shape, out, strides, scratch,
                                  scratch_len, &err);
    free(out);
    free(scratch);
    return rc;
}

int main(int argc, char **argv) {
    rng_state = 7;
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    int nseeds = argc - 2;
    if (nseeds < 1) {
        fprintf(stderr, "usage: fuzz_compresso ITERATIONS SEED...\n");
        return 2;
    }
    seed *seeds = calloc((size_t)nseeds, sizeof *seeds);
    for (int i = 0; i < nseeds; i++) {
        if (!load(argv[i + 2], &seeds[i])) {
            fprintf(stderr, "cannot read seed %s\n", argv[i + 2]);
            return 2;
        }
        if (decode(&seeds[i], seeds[i].data, seeds[i].len, i % 2) != SV_OK) {
            fprintf(stderr, "seed %s does not decode\n", argv[i + 2]);
            return 1;
        }
    }
    long decoded = 0, refused = 0;
    for (long it = 0; it < iters; it++) {
        const seed *s = &seeds[rnd() % (uint64_t)nseeds];
        size_t len = s->len;
        uint8_t *buf = malloc(len + 64);
        memcpy(buf, s->data, len);
        switch (rnd() % 5) {
        case 0: /* flipped bits */
            for (size_t k = rnd_in(1, 4); k-- > 0;) buf[rnd() % len] ^= (uint8_t)(1u << rnd() % 8);
            break;
        case 1: { /* random bytes from a random position */
            size_t at = rnd() % len, n = rnd_in(1, len - at);
            for (size_t i = 0; i < n; i++) buf[at + i] = (uint8_t)rnd();
            break;
        }
        case 2: /* truncated */
            len = rnd() % len;
            break;
        case 3: /* appended bytes */
            for (size_t k = rnd_in(1, 64); k-- > 0;) buf[len++] = (uint8_t)rnd();
            break;
        default: /* a random header byte (steps, sizes, counts, connectivity) */
            buf[rnd_in(4, 35)] = (uint8_t)rnd();
            break;
        }
        uint8_t *exact = malloc(len ? len : 1); /* ASan sees reads past the end */
        memcpy(exact, buf, len);
        const int rc = decode(s, exact, len, (int)(rnd() % 2));
        free(exact);
        free(buf);
        if (rc == SV_OK)
            decoded++;
        else if (rc == SV_ERR_CORRUPT || rc == SV_ERR_TRUNCATED)
            refused++;
        else {
            fprintf(stderr, "unexpected return code %d\n", rc);
            return 1;
        }
    }
    printf("%ld decoded, %ld refused\n", decoded, refused);
    for (int i = 0; i < nseeds; i++) free(seeds[i].data);
    free(seeds);
    return 0;
}

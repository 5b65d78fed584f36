/* Random-input checker for sv_box_read (csrc/chunkbox.c), meant to run under
 * AddressSanitizer + UndefinedBehaviorSanitizer:
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -Icsrc tests/c/fuzz_chunkbox.c \
 *       csrc/chunkbox.c csrc/transpose.c -lzstd -ldeflate -o /tmp/fuzz_chunkbox && \
 *       /tmp/fuzz_chunkbox 20000 /tmp/chunk
 *
 * Each round encodes a chunk of random shape (C order, up to 4 axes, some of several zstd
 * blocks), item size and contents with zstd, gzip (libdeflate) or not at all, writes it at
 * a random offset of a file (a third of the rounds damage it: bit flips, a truncation, a
 * wrong length or garbage),
 * and reads a random box of it into an output of random padding, C or Fortran order.
 * Intact data must be read and every item of the box must match; damaged data may be
 * read or left to the caller, never anything else: truncated zstd and gzip data are always
 * left, and damaged data read from a gzip member or a zstd frame with a checksum must still
 * match (the damage missed what the box needs).  Exits non-zero on failure. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <libdeflate.h>
#include <zstd.h>

#include "chunkbox.h"
#include "fuzz_rng.h"

int main(int argc, char **argv) {
    rng_state = 7;
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    const char *path = argc > 2 ? argv[2] : "fuzz_chunkbox.chunk";
    long ok = 0, other = 0;
    sv_box_reader *reader = sv_box_reader_new();
    if (reader == NULL) return 1;
    struct libdeflate_compressor *deflater[13] = {0};
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    for (long it = 0; it < iters; ++it) {
        int64_t isz = (int64_t[]){1, 2, 4, 8}[rnd() % 4];
        int64_t shape[4], origin[4], count[4], n = isz;
        const int big = rnd() % 4 == 0; /* chunks of several blocks: prefixes streamed */
        for (int d = 0; d < 4; ++d) {
            shape[d] = (int64_t)rnd_in(1, big ? (d == 0 ? 2 : 48) : (d == 0 ? 2 : 12));
            origin[d] = (int64_t)rnd_in(0, (size_t)shape[d] - 1);
            count[d] = (int64_t)rnd_in(1, (size_t)(shape[d] - origin[d]));
            n *= shape[d];
        }
        unsigned char *data = malloc(n);
        const unsigned levels = (unsigned)rnd_in(1, 200); /* few values compress well */
        for (int64_t i = 0; i < n; ++i) data[i] = (unsigned char)(rnd() % levels);
        const int codec = (int[]){SV_BOX_ZSTD, SV_BOX_GZIP, SV_BOX_NONE}[rnd() % 3];
        size_t bound = ZSTD_compressBound((size_t)n) + libdeflate_gzip_compress_bound(NULL, (size_t)n);
        unsigned char *frame = malloc(bound + 64);
        size_t len;
        int checked = codec == SV_BOX_GZIP; /* damage is found, or the data are intact */
        if (codec == SV_BOX_ZSTD) {
            checked = (int)(rnd() % 2); /* a content checksum in half the frames */
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, (int)rnd_in(1, 5));
            ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checked);
            len = ZSTD_compress2(cctx, frame, bound, data, (size_t)n);
            if (ZSTD_isError(len)) { fprintf(stderr, "compress\n"); return 1; }
        } else if (codec == SV_BOX_NONE) {
            memcpy(frame, data, (size_t)n);
            len = (size_t)n;
        } else {
            const int level = (int)rnd_in(0, 12);
            if (deflater[level] == NULL) deflater[level] = libdeflate_alloc_compressor(level);
            len = libdeflate_gzip_compress(deflater[level], data, (size_t)n, frame, bound);
            if (len == 0) { fprintf(stderr, "gzip\n"); return 1; }
        }
        const int damage = rnd() % 3 == 0 ? (int)rnd_in(1, 4) : 0;
        int64_t stored_len = (int64_t)len;
        if (damage == 1) for (int k = 0; k < 3; ++k) frame[rnd() % len] ^= (unsigned char)(1u << (rnd() % 8));
        if (damage == 2) stored_len = (int64_t)rnd_in(1, len - 1);
        if (damage == 3) stored_len = (int64_t)len + (int64_t)rnd_in(1, 64);
        if (damage == 4) for (size_t i = 0; i < len; ++i) frame[i] = (unsigned char)rnd();
        const int64_t at = (int64_t)rnd_in(0, 100);
        FILE *f = fopen(path, "wb");
        for (int64_t i = 0; i < at; ++i) fputc(0xAB, f);
        fwrite(frame, 1, damage == 3 ? len : (size_t)stored_len, f);
        fclose(f);
        int fd = open(path, O_RDONLY);
        /* output: the box with random padding per axis, C or Fortran order */
        int64_t pad[4], os[4], outn = isz;
        for (int d = 0; d < 4; ++d) pad[d] = count[d] + (int64_t)rnd_in(0, 2);
        if (rnd() % 2) { os[3] = isz; for (int d = 2; d >= 0; --d) os[d] = os[d + 1] * pad[d + 1]; outn = os[0] * pad[0]; }
        else { os[0] = isz; for (int d = 1; d < 4; ++d) os[d] = os[d - 1] * pad[d - 1]; outn = os[3] * pad[3]; }
        unsigned char *out = malloc(outn);
        int err = 0;
        int rc = sv_box_read(reader, codec, fd, at, stored_len, isz, shape, origin, count, out, os, &err);
        close(fd);
        if (rc == SV_OK) {
            ++ok;
            if (damage == 2 && codec != SV_BOX_NONE) { fprintf(stderr, "truncated data read at round %ld (codec %d, %lld of %zu bytes, checksum %d)\n", it, codec, (long long)stored_len, len, checked); return 1; }
            if (!damage || checked)
                for (int64_t a = 0; a < count[0]; ++a) for (int64_t b = 0; b < count[1]; ++b)
                for (int64_t c = 0; c < count[2]; ++c) for (int64_t e = 0; e < count[3]; ++e) {
                    int64_t src = ((((origin[0] + a) * shape[1] + origin[1] + b) * shape[2] + origin[2] + c) * shape[3] + origin[3] + e) * isz;
                    if (memcmp(out + a * os[0] + b * os[1] + c * os[2] + e * os[3], data + src, isz)) { fprintf(stderr, "mismatch at round %ld\n", it); return 1; }
                }
        } else if (rc == SV_BOX_OTHER) {
            ++other;
            if (!damage) { fprintf(stderr, "intact frame refused at round %ld\n", it); return 1; }
        } else { fprintf(stderr, "rc %d at round %ld\n", rc, it); return 1; }
        free(data); free(frame); free(out);
        if (rnd() % 16 == 0) sv_box_reader_trim(reader, rnd_in(0, 1 << 16)); /* buffers again */
    }
    /* an unreadable descriptor is an I/O error, with its errno */
    int64_t one[4] = {1, 1, 1, 1}, zero[4] = {0, 0, 0, 0}, st[4] = {1, 1, 1, 1};
    unsigned char byte;
    int err = 0;
    if (sv_box_read(reader, SV_BOX_ZSTD, -1, 0, 16, 1, one, zero, one, &byte, st, &err) != SV_ERR_IO || err == 0) { fprintf(stderr, "bad fd\n"); return 1; }
    if (sv_box_read(reader, 9, -1, 0, 16, 1, one, zero, one, &byte, st, &err) != SV_ERR_ARGUMENT) { fprintf(stderr, "codec check\n"); return 1; }
    sv_box_reader_free(reader);
    for (int i = 0; i < 13; ++i) if (deflater[i] != NULL) libdeflate_free_compressor(deflater[i]);
    ZSTD_freeCCtx(cctx);
    printf("%ld read, %ld left to the generic path\n", ok, other);
    return 0;
}

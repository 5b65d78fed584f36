/* Differential + mutation fuzzer for csrc/jpeg.c, meant to run under AddressSanitizer +
 * UndefinedBehaviorSanitizer (or valgrind):
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
 *       -Icsrc tests/c/fuzz_jpeg.c csrc/jpeg.c -ljpeg -o /tmp/fuzz_jpeg && /tmp/fuzz_jpeg 2000
 *
 * Each iteration encodes a random chunk (1 or 3 channels, odd sizes, sometimes an image
 * whose width is not X) with libjpeg's own compressor in a random mode: baseline or
 * optimized Huffman, progressive, arithmetic, restart intervals, every usual chroma
 * subsampling.  The oracle is libjpeg decoding the whole image with its defaults (what
 * imagecodecs and TensorStore do): the whole chunk and random boxes decoded by
 * sv_jpeg_decode_region into randomly laid out exact-size buffers (dimensions in a random
 * order, strides possibly negative) must match it bit for bit.  Then mutated streams (bit
 * flips, truncation, garbage tails, forged header bytes) are decoded into exact-size
 * buffers: they must decode or fail with SV_ERR_CORRUPT, and touch nothing outside.  Each
 * chunk is also encoded by sv_jpeg_encode from a random layout, which must give libjpeg's
 * own scanline encoding (its defaults) byte for byte.
 * Exits non-zero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "jpeg.h"
#include "fuzz_rng.h"


static char mode[200]; /* how the current chunk was encoded, for failure reports */

/* Encode a width x height image of c interleaved channels (libjpeg exits on its own errors,
 * which valid parameters never raise). */
static unsigned char *encode(const uint8_t *pixels, unsigned width, unsigned height, int c,
                             unsigned long *len) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    unsigned char *out = NULL;
    static const int samp[][2] = {{1, 1}, {2, 1}, {2, 2}, {1, 2}, {4, 1}, {2, 2}};
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    *len = 0;
    jpeg_mem_dest(&ci, &out, len);
    ci.image_width = width;
    ci.image_height = height;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, (int)rnd_in(20, 98), TRUE);
    if (c == 3) {
        int s = (int)(rnd() % 6);
        ci.comp_info[0].h_samp_factor = samp[s][0];
        ci.comp_info[0].v_samp_factor = samp[s][1];
    }
    if (rnd() % 3 == 0)
        ci.arith_code = TRUE;
    else
        ci.optimize_coding = rnd() % 3 == 0; /* arithmetic coding is adaptive already */
    if (rnd() % 3 == 0) jpeg_simple_progression(&ci);
    if (rnd() % 4 == 0) ci.restart_in_rows = (int)rnd_in(1, 4);
    snprintf(mode, sizeof mode, "%ux%u image, %d channel(s), sampling %dx%d, %s%s%s, restart rows %d",
             width, height, c, ci.comp_info[0].h_samp_factor, ci.comp_info[0].v_samp_factor,
             ci.arith_code ? "arithmetic" : ci.optimize_coding ? "optimized Huffman" : "Huffman",
             ci.num_scans > 1 ? ", progressive" : "", "", ci.restart_in_rows);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)ci.next_scanline * width * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return out;
}

/* The oracle: libjpeg decodes the whole image with its defaults. */
static void reference(const unsigned char *data, unsigned long len, uint8_t *pixels) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr em;
    ci.err = jpeg_std_error(&em);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, len);
    jpeg_read_header(&ci, TRUE);
    jpeg_start_decompress(&ci);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = pixels + (size_t)ci.output_scanline * ci.output_width * ci.output_components;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
}

/* A random layout of an exact-size buffer for `shape`: dimensions in a random order, each
 * stride possibly negative.  Returns the offset of element (0, 0, 0, 0). */
static ptrdiff_t layout(const size_t shape[4], ptrdiff_t st[4]) {
    int perm[4] = {0, 1, 2, 3};
    ptrdiff_t step = 1, base = 0;
    for (int i = 3; i > 0; --i) {
        int j = (int)(rnd() % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int k = 0; k < 4; ++k) {
        int d = perm[k];
        st[d] = rnd() & 1 ? step : -step;
        if (st[d] < 0) base += step * (ptrdiff_t)(shape[d] - 1);
        step *= (ptrdiff_t)shape[d];
    }
    return base;
}

static void random_box(const size_t shape[4], size_t origin[4], size_t region[4]) {
    for (int d = 0; d < 4; ++d) {
        int kind = (int)(rnd() % 4);
        if (kind == 0) { /* everything */
            origin[d] = 0;
            region[d] = shape[d];
        } else if (kind == 1) { /* one voxel */
            origin[d] = rnd_in(0, shape[d] - 1);
            region[d] = 1;
        } else {
            size_t a = rnd_in(0, shape[d] - 1), b = rnd_in(a + 1, shape[d]);
            origin[d] = a;
            region[d] = b - a;
        }
    }
}

/* Decode a box (the whole chunk if `whole`) into an exact-size heap buffer of a random layout;
 * compare with the oracle (`ref` may be NULL: then only the return code is checked). */
static int check_box(const unsigned char *data, size_t len, const size_t shape[4],
                     const uint8_t *ref, int whole, long *ok, long *rejected) {
    size_t origin[4], region[4];
    ptrdiff_t st[4];
    sv_jpeg_error err;
    random_box(shape, origin, region);
    for (int d = 0; d < 4 && whole; ++d) {
        origin[d] = 0;
        region[d] = shape[d];
    }
    size_t n = region[0] * region[1] * region[2] * region[3];
    uint8_t *out = malloc(n);
    ptrdiff_t base = layout(region, st);
    /* half of the boxes staged through an exact-size scratch buffer */
    size_t scratch_len = rnd_in(0, 1) ? n : 0;
    uint8_t *scratch = scratch_len ? malloc(scratch_len) : NULL;
    int rc = sv_jpeg_decode_region(data, len, shape, origin, region, out + base, st, scratch,
                                   scratch_len, &err);
    free(scratch);
    if (rc == SV_OK) {
        ++*ok;
        if (ref)
            for (size_t x = 0; x < region[0]; ++x)
                for (size_t y = 0; y < region[1]; ++y)
                    for (size_t z = 0; z < region[2]; ++z)
                        for (size_t c = 0; c < region[3]; ++c) {
                            size_t v = (x + origin[0]) + shape[0] * ((y + origin[1]) + shape[1] * (z + origin[2]));
                            uint8_t want = ref[v * shape[3] + c + origin[3]];
                            uint8_t got = out[base + (ptrdiff_t)x * st[0] + (ptrdiff_t)y * st[1] +
                                              (ptrdiff_t)z * st[2] + (ptrdiff_t)c * st[3]];
                            if (got != want) {
                                fprintf(stderr, "mismatch: shape (%zu,%zu,%zu,%zu) box at (%zu,%zu,%zu,%zu) "
                                        "size (%zu,%zu,%zu,%zu), voxel (%zu,%zu,%zu,%zu): %d != %d (%s)\n",
                                        shape[0], shape[1], shape[2], shape[3], origin[0], origin[1], origin[2],
                                        origin[3], region[0], region[1], region[2], region[3], x, y, z, c, got, want, mode);
                                free(out);
                                return 1;
                            }
                        }
    } else if (rc == SV_ERR_CORRUPT && ref == NULL) {
        ++*rejected;
    } else {
        fprintf(stderr, "decode failed: rc %d reason %d %s\n", rc, err.reason, err.message);
        free(out);
        return 1;
    }
    free(out);
    return 0;
}

/* sv_jpeg_encode of the chunk `pixels` (Fortran order, channels interleaved), copied into a
 * random layout, must be byte for byte libjpeg's scanline encoding of the image at the same
 * quality with its defaults. */
static int check_encode(const uint8_t *pixels, const size_t shape[4]) {
    size_t voxels = shape[0] * shape[1] * shape[2], c = shape[3];
    int quality = (int)rnd_in(0, 100);
    ptrdiff_t st[4];
    uint8_t *in = malloc(voxels * c), *got = NULL;
    ptrdiff_t base = layout(shape, st);
    for (size_t v = 0; v < voxels; ++v)
        for (size_t k = 0; k < c; ++k)
            in[base + (ptrdiff_t)(v % shape[0]) * st[0] +
               (ptrdiff_t)(v / shape[0] % shape[1]) * st[1] +
               (ptrdiff_t)(v / shape[0] / shape[1]) * st[2] + (ptrdiff_t)k * st[3]] =
                pixels[v * c + k];
    size_t got_len = 0;
    sv_jpeg_error err;
    int rc = sv_jpeg_encode(in + base, shape, st, quality, &got, &got_len, &err);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    unsigned char *want = NULL;
    unsigned long want_len = 0;
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &want, &want_len);
    ci.image_width = (JDIMENSION)shape[0];
    ci.image_height = (JDIMENSION)(shape[1] * shape[2]);
    ci.input_components = (int)c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    for (size_t r = 0; r < shape[1] * shape[2]; ++r) {
        JSAMPROW row = (JSAMPROW)(pixels + r * shape[0] * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    int bad = rc != SV_OK || got_len != want_len || memcmp(got, want, want_len) != 0;
    if (bad)
        fprintf(stderr, "encode of a (%zu,%zu,%zu,%zu) chunk at quality %d: rc %d, %zu bytes, "
                "libjpeg's %lu (%s)\n", shape[0], shape[1], shape[2], c, quality, rc, got_len,
                want_len, err.message);
    free(in);
    free(got);
    free(want);
    return bad;
}

int main(int argc, char **argv) {
    rng_state = 0x9e3779b97f4a7c15ull;
    long iterations = argc > 1 ? atol(argv[1]) : 1000;
    long boxes = 0, mutated_ok = 0, rejected = 0, unused = 0;
    for (long it = 0; it < iterations; ++it) {
        size_t shape[4] = {rnd_in(1, 70), rnd_in(1, 20), rnd_in(1, 12), rnd() & 1 ? 3 : 1};
        if (rnd() % 3 == 0) /* whole 8x8 blocks a row: whole chunks decode as raw data */
            shape[0] = 8 * rnd_in(1, 8);
        size_t voxels = shape[0] * shape[1] * shape[2], c = shape[3];
        unsigned width = (unsigned)shape[0];
        if (rnd() % 5 == 0) /* another image width with the same area */
            for (width = (unsigned)rnd_in(1, voxels); voxels % width; --width)
                ;
        uint8_t *pixels = malloc(voxels * c), *ref = malloc(voxels * c);
        for (size_t i = 0; i < voxels * c; ++i) {
            size_t x = i / c % shape[0], y = i / c / shape[0] % shape[1];
            pixels[i] = (uint8_t)(128 + 60 * ((x / 5 + y / 3 + i % c) % 3) - 60 + rnd() % 24);
        }
        unsigned long len;
        unsigned char *data = encode(pixels, width, (unsigned)(voxels / width), (int)c, &len);
        reference(data, len, ref);
        for (int k = 0; k < 12; ++k, ++boxes) /* the first two: the whole chunk */
            if (check_box(data, len, shape, ref, k < 2, &unused, &unused)) return 1;
        if (check_encode(pixels, shape)) return 1;
        for (int m = 0; m < 20; ++m) {
            size_t mlen = len;
            int kind = (int)(rnd() % 4);
            if (kind == 1) mlen = rnd_in(0, len);
            if (kind == 2) mlen = len + rnd_in(1, 64);
            unsigned char *bad = malloc(mlen ? mlen : 1);
            memcpy(bad, data, mlen < len ? mlen : len);
            for (size_t i = len; i < mlen; ++i) bad[i] = (unsigned char)rnd();
            if (kind == 0)
                for (int k = (int)rnd_in(1, 6); k > 0 && mlen; --k) bad[rnd() % mlen] ^= (unsigned char)(1u << (rnd() % 8));
            if (kind == 3) /* forge bytes in the headers */
                for (int k = (int)rnd_in(1, 3); k > 0; --k) bad[rnd() % (mlen < 400 ? mlen : 400)] = (unsigned char)rnd();
            if (check_box(bad, mlen, shape, NULL, m % 2, &mutated_ok, &rejected)) return 1;
            free(bad);
        }
        free(data);
        free(pixels);
        free(ref);
    }
    printf("%ld chunks, %ld boxes exact; %ld mutated streams: %ld decoded, %ld rejected\n",
           iterations, boxes, mutated_ok + rejected, mutated_ok, rejected);
    return 0;
}

#include "morton.h"

#include <stdlib.h>
#include <string.h>

/* Encoding uses, for every dimension and every byte of the coordinate, a
 * 256-entry table giving the output bits that byte deposits; decoding uses,
 * for every byte of the code, a table of the coordinate bits it yields. */

int sv_morton_bits(const uint64_t grid_size[3], int bits[3], int *total_bits) {
    int total = 0;
    for (int d = 0; d < 3; ++d) {
        if (grid_size[d] == 0) return SV_ERR_ARGUMENT;
        int b = 0;
        while (b < 64 && ((uint64_t)1 << b) < grid_size[d]) ++b;
        bits[d] = b;
        total += b;
    }
    *total_bits = total;
    return total > 64 ? SV_ERR_OVERFLOW : SV_OK;
}

/* out_pos[d][i] = output bit of coordinate bit i of dimension d (or -1). */
static void bit_positions(const int bits[3], int out_pos[3][64]) {
    int j = 0;
    int max_bits = bits[0];
    if (bits[1] > max_bits) max_bits = bits[1];
    if (bits[2] > max_bits) max_bits = bits[2];
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < 64; ++i) out_pos[d][i] = -1;
    for (int i = 0; i < max_bits; ++i)
        for (int d = 0; d < 3; ++d)
            if (i < bits[d]) out_pos[d][i] = j++;
}

typedef struct {
    int nbytes[3];
    uint64_t table[3][8][256];
} encode_tables;

typedef struct {
    int nbytes;
    uint64_t table[8][256][3];
} decode_tables;

int sv_morton_encode(const uint64_t *coords, size_t n, const uint64_t grid_size[3],
                     uint64_t *codes, size_t *err_index) {
    int bits[3], total;
    int rc = sv_morton_bits(grid_size, bits, &total);
    if (rc != SV_OK) return rc;
    int pos[3][64];
    bit_positions(bits, pos);

    encode_tables *t = malloc(sizeof(encode_tables)); /* 48 KiB: off the stack */
    if (!t) return SV_ERR_NOMEM;
    for (int d = 0; d < 3; ++d) {
        t->nbytes[d] = (bits[d] + 7) / 8;
        for (int b = 0; b < t->nbytes[d]; ++b) {
            for (int v = 0; v < 256; ++v) {
                uint64_t out = 0;
                for (int k = 0; k < 8; ++k) {
                    int i = 8 * b + k;
                    if ((v >> k) & 1 && i < 64 && pos[d][i] >= 0) out |= (uint64_t)1 << pos[d][i];
                }
                t->table[d][b][v] = out;
            }
        }
    }
    for (size_t e = 0; e < n; ++e) {
        const uint64_t *g = coords + 3 * e;
        if (g[0] >= grid_size[0] || g[1] >= grid_size[1] || g[2] >= grid_size[2]) {
            *err_index = e;
            free(t);
            return SV_ERR_RANGE;
        }
        uint64_t code = 0;
        for (int d = 0; d < 3; ++d) {
            uint64_t v = g[d];
            for (int b = 0; b < t->nbytes[d]; ++b) code |= t->table[d][b][(v >> (8 * b)) & 0xff];
        }
        codes[e] = code;
    }
    free(t);
    return SV_OK;
}

int sv_morton_decode(const uint64_t *codes, size_t n, const uint64_t grid_size[3],
                     uint64_t *coords, size_t *err_index) {
    int bits[3], total;
    int rc = sv_morton_bits(grid_size, bits, &total);
    if (rc != SV_OK) return rc;
    int pos[3][64];
    bit_positions(bits, pos);
    /* Map every code bit back to (dimension, coordinate bit). */
    int src_dim[64], src_bit[64];
    for (int j = 0; j < 64; ++j) src_dim[j] = -1;
    for (int d = 0; d < 3; ++d)
        for (int i = 0; i < bits[d]; ++i) {
            src_dim[pos[d][i]] = d;
            src_bit[pos[d][i]] = i;
        }

    decode_tables *t = malloc(sizeof(decode_tables));
    if (!t) return SV_ERR_NOMEM;
    t->nbytes = (total + 7) / 8;
    for (int b = 0; b < t->nbytes; ++b) {
        for (int v = 0; v < 256; ++v) {
            uint64_t out[3] = {0, 0, 0};
            for (int k = 0; k < 8; ++k) {
                int j = 8 * b + k;
                if ((v >> k) & 1 && j < 64 && src_dim[j] >= 0)
                    out[src_dim[j]] |= (uint64_t)1 << src_bit[j];
            }
            memcpy(t->table[b][v], out, sizeof(out));
        }
    }
    uint64_t high_mask = total >= 64 ? 0 : ~(uint64_t)0 << total;
    for (size_t e = 0; e < n; ++e) {
        uint64_t c = codes[e];
        if (c & high_mask) {
            *err_index = e;
            free(t);
            return SV_ERR_RANGE;
        }
        uint64_t x = 0, y = 0, z = 0;
        for (int b = 0; b < t->nbytes; ++b) {
            const uint64_t *o = t->table[b][(c >> (8 * b)) & 0xff];
            x |= o[0];
            y |= o[1];
            z |= o[2];
        }
        if (x >= grid_size[0] || y >= grid_size[1] || z >= grid_size[2]) {
            *err_index = e;
            free(t);
            return SV_ERR_RANGE;
        }
        uint64_t *g = coords + 3 * e;
        g[0] = x;
        g[1] = y;
        g[2] = z;
    }
    free(t);
    return SV_OK;
}

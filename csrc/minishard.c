/* Minishard index decoding: see minishard.h. */
#include "minishard.h"

#include <string.h>

static inline uint64_t ld64le(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

int sv_minishard_index_decode(const uint8_t *buf, size_t len, uint64_t base, uint64_t *ids,
                              uint64_t *starts, uint64_t *sizes, size_t n, size_t *err_index) {
    *err_index = 0;
    if (len % 24 != 0 || len / 24 != n) return SV_ERR_ARGUMENT;
    const uint8_t *keys = buf, *offsets = buf + 8 * n, *lengths = buf + 16 * n;
    uint64_t key = 0, end = base;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t dk = ld64le(keys + 8 * i);
        const uint64_t size = ld64le(lengths + 8 * i);
        uint64_t start;
        *err_index = i;
        if (i > 0 && dk == 0) return SV_ERR_CORRUPT;
        if (__builtin_add_overflow(key, dk, &key)) return SV_ERR_OVERFLOW;
        if (__builtin_add_overflow(end, ld64le(offsets + 8 * i), &start) ||
            __builtin_add_overflow(start, size, &end))
            return SV_ERR_RANGE;
        ids[i] = key;
        starts[i] = start;
        sizes[i] = size;
    }
    return SV_OK;
}

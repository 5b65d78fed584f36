/* Copying a 4-D box of items between strided buffers: what the decoders use to move a box
 * from their staging buffer (or a chunk file's bytes) into the caller's output. */
#ifndef SHARDVOL_COPYBOX_H
#define SHARDVOL_COPYBOX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copy count[0] x count[1] x count[2] x count[3] items of `itemsize` bytes; item (i, j, k, l)
 * is at src + i*src_strides[0] + ... + l*src_strides[3], and likewise in dst (byte strides,
 * any sign).  Rows (axis 0) contiguous on both sides are copied with one memcpy each. */
static inline void sv_copy_box(const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
                               const ptrdiff_t dst_strides[4], const size_t count[4],
                               size_t itemsize) {
    const int rows = src_strides[0] == (ptrdiff_t)itemsize && dst_strides[0] == (ptrdiff_t)itemsize;
    for (size_t l = 0; l < count[3]; l++)
        for (size_t k = 0; k < count[2]; k++)
            for (size_t j = 0; j < count[1]; j++) {
                const uint8_t *s = src + (ptrdiff_t)l * src_strides[3] +
                                   (ptrdiff_t)k * src_strides[2] + (ptrdiff_t)j * src_strides[1];
                uint8_t *d = dst + (ptrdiff_t)l * dst_strides[3] + (ptrdiff_t)k * dst_strides[2] +
                             (ptrdiff_t)j * dst_strides[1];
                if (rows) {
                    memcpy(d, s, count[0] * itemsize);
                } else {
                    for (size_t i = 0; i < count[0]; i++)
                        memcpy(d + (ptrdiff_t)i * dst_strides[0], s + (ptrdiff_t)i * src_strides[0],
                               itemsize);
                }
            }
}

#endif

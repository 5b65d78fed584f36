# Declarations of the plain C kernels in csrc/, all callable without the GIL.
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "sv_common.h":
    int SV_OK
    int SV_ERR_ARGUMENT
    int SV_ERR_OVERFLOW
    int SV_ERR_RANGE
    int SV_ERR_TRUNCATED
    int SV_ERR_CORRUPT
    int SV_ERR_NOMEM
    int SV_ERR_OUTPUT_SIZE
    int SV_ERR_IO

cdef extern from "morton.h" nogil:
    int sv_morton_bits(const uint64_t grid_size[3], int bits[3], int *total_bits)
    int sv_morton_encode(const uint64_t *coords, size_t n, const uint64_t grid_size[3],
                         uint64_t *codes, size_t *err_index)
    int sv_morton_decode(const uint64_t *codes, size_t n, const uint64_t grid_size[3],
                         uint64_t *coords, size_t *err_index)

cdef extern from "murmurhash3.h" nogil:
    uint64_t sv_murmurhash3_x86_128_u64(uint64_t key)
    int sv_murmurhash3_x86_128_u64_batch(const uint64_t *keys, size_t n, uint64_t *out)

cdef extern from "minishard.h" nogil:
    int sv_minishard_index_decode(const uint8_t *buf, size_t len, uint64_t base, uint64_t *ids,
                                  uint64_t *starts, uint64_t *sizes, size_t n,
                                  size_t *err_index)

# Declarations of csrc/downsample.h (pooling kernels), callable without the GIL.
from libc.stdint cimport int64_t

cdef extern from "downsample.h" nogil:
    int SV_DS_MEAN
    int SV_DS_MODE
    int SV_DS_MIN
    int SV_DS_MAX
    int SV_DS_STRIDE
    int SV_DS_UINT8
    int SV_DS_INT8
    int SV_DS_UINT16
    int SV_DS_INT16
    int SV_DS_UINT32
    int SV_DS_INT32
    int SV_DS_UINT64
    int SV_DS_INT64
    int SV_DS_FLOAT32
    int SV_DS_FLOAT64
    int64_t SV_DS_MAX_BLOCK
    int64_t SV_DS_MAX_BLOCK_VOXELS

    int sv_downsample_shape(const int64_t in_shape[4], const int64_t factor[3],
                            const int64_t phase[3], int mip, int64_t out_shape[4])
    int sv_downsample_pyramid(int method, int dtype, const void *inp, const int64_t in_shape[4],
                              const int64_t in_strides[4], const int64_t factor[3],
                              const int64_t phase[3], int num_mips, void *const *outs,
                              const int64_t *out_shapes, const int64_t *out_strides)

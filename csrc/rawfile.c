/* See rawfile.h. */
#define _POSIX_C_SOURCE 200809L
#include "rawfile.h"

#include "copybox.h"
#include "sv_io.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t sv_raw_span(int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                    const int64_t count[4]) {
    int64_t stride = itemsize, first = 0, last = 0, step;
    for (int d = 0; d < 4; d++) {
        if (count[d] <= 0) return 0;
        if (origin[d] < 0 || count[d] > shape[d] - origin[d]) return -1; /* not in the chunk */
        if (__builtin_mul_overflow(origin[d], stride, &step) ||
            __builtin_add_overflow(first, step, &first) ||
            __builtin_mul_overflow(origin[d] + count[d] - 1, stride, &step) ||
            __builtin_add_overflow(last, step, &last) ||
            (d < 3 && __builtin_mul_overflow(stride, shape[d], &stride)))
            return -1;
    }
    return last - first + itemsize; /* <= last + itemsize: the box's last byte fits int64 */
}

static int box_in_chunk(int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                        const int64_t count[4], const int64_t out_strides[4]) {
    if (itemsize <= 0 || itemsize > 16) return 0;
    int64_t voxels = 1;
    for (int d = 0; d < 4; d++) {
        if (shape[d] < 0 || origin[d] < 0 || count[d] < 0 || out_strides[d] < 0) return 0;
        if (origin[d] > shape[d] || count[d] > shape[d] - origin[d]) return 0;
        if (shape[d] > 0 && voxels > INT64_MAX / itemsize / shape[d]) return 0;
        voxels *= shape[d];
    }
    return 1;
}

int sv_raw_read_box(const char *path, int64_t itemsize, const int64_t shape[4],
                    const int64_t origin[4], const int64_t count[4], uint8_t *out,
                    const int64_t out_strides[4], uint8_t *scratch, int64_t scratch_len,
                    int *err_no) {
    *err_no = 0;
    if (!box_in_chunk(itemsize, shape, origin, count, out_strides)) return SV_ERR_ARGUMENT;
    const int64_t span = sv_raw_span(itemsize, shape, origin, count);
    if (span < 0 || span > scratch_len) return SV_ERR_ARGUMENT;
    int64_t expected = itemsize, start = 0, stride = itemsize;
    for (int d = 0; d < 4; d++) {
        expected *= shape[d];
        start += origin[d] * stride;
        stride *= shape[d];
    }

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) return SV_RAW_MISSING;
        *err_no = errno;
        return SV_ERR_IO;
    }
    int status = SV_OK;
    struct stat st;
    uint8_t magic[2] = {0, 0};
    int r;
    if (fstat(fd, &st) != 0) {
        *err_no = errno;
        status = SV_ERR_IO;
    } else if (S_ISDIR(st.st_mode)) {
        status = SV_RAW_MISSING;
    } else if ((int64_t)st.st_size != expected) {
        status = SV_RAW_OTHER;
    } else if (expected >= 2 && (r = sv_pread_exact(fd, magic, 2, 0)) != 0) {
        status = r > 0 ? SV_RAW_OTHER : SV_ERR_IO;  /* shrank meanwhile: read it another way */
        if (r < 0) *err_no = errno;
    } else if (magic[0] == 0x1f && magic[1] == 0x8b) {
        status = SV_RAW_OTHER;  /* gzip magic: gzipped voxels, or raw ones that look so */
    } else if (span > 0 && (r = sv_pread_exact(fd, scratch, span, start)) != 0) {
        status = r > 0 ? SV_RAW_OTHER : SV_ERR_IO;
        if (r < 0) *err_no = errno;
    }
    close(fd);
    if (status == SV_OK && span > 0) {
        ptrdiff_t file_strides[4], out_st[4];
        size_t n[4];
        for (int d = 0; d < 4; d++) {
            file_strides[d] = d ? file_strides[d - 1] * (ptrdiff_t)shape[d - 1] : (ptrdiff_t)itemsize;
            out_st[d] = (ptrdiff_t)out_strides[d];
            n[d] = (size_t)count[d];
        }
        sv_copy_box(scratch, file_strides, out, out_st, n, (size_t)itemsize);
    }
    return status;
}

/* Whole-file atomic writes; see filewrite.h. */
#define _POSIX_C_SOURCE 200809L
#include "filewrite.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h> /* rename */
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
#define BATCH (IOV_MAX < 1024 ? IOV_MAX : 1024)

/* Write every byte of parts[0..n) to fd; 0, or -1 with errno set. */
static int write_parts(int fd, const struct iovec *parts, int64_t n)
{
    struct iovec batch[BATCH];
    int64_t i = 0;
    size_t done = 0; /* bytes of parts[i] already written */
    while (i < n) {
        int k = 0;
        size_t want = 0;
        ssize_t w;
        for (; i + k < n && k < BATCH; k++) {
            batch[k] = parts[i + k];
            if (k == 0) {
                batch[0].iov_base = (char *)batch[0].iov_base + done;
                batch[0].iov_len -= done;
            }
            want += batch[k].iov_len;
        }
        w = writev(fd, batch, k);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0 && want > 0) { /* no progress: give up rather than spin */
            errno = EIO;
            return -1;
        }
        /* advance past what was written: whole parts, then into the next */
        {
            size_t left = (size_t)w;
            while (i < n && left >= parts[i].iov_len - done) {
                left -= parts[i].iov_len - done;
                done = 0;
                i++;
            }
            done += left;
        }
    }
    return 0;
}

static int failed(int at, int *step, int *err_no)
{
    *step = at;
    *err_no = errno;
    return SV_ERR_IO;
}

int sv_write_file(const char *tmp, const char *path, const struct iovec *parts, int64_t nparts,
                  int do_fsync, int *step, int *err_no)
{
    int64_t i;
    int fd, rc = SV_OK;
    *step = 0;
    *err_no = 0;
    if (nparts < 0)
        return SV_ERR_ARGUMENT;
    for (i = 0; i < nparts; i++)
        if (parts[i].iov_base == NULL && parts[i].iov_len != 0)
            return SV_ERR_ARGUMENT;
    do {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return failed(SV_WRITE_CREATE, step, err_no);
    if (write_parts(fd, parts, nparts) != 0)
        rc = failed(SV_WRITE_WRITE, step, err_no);
    else if (do_fsync) {
        int r;
        do {
            r = fsync(fd);
        } while (r != 0 && errno == EINTR);
        if (r != 0)
            rc = failed(SV_WRITE_SYNC, step, err_no);
    }
    if (close(fd) != 0 && rc == SV_OK && errno != EINTR)
        rc = failed(SV_WRITE_CLOSE, step, err_no);
    if (rc == SV_OK && rename(tmp, path) != 0)
        rc = failed(SV_WRITE_RENAME, step, err_no);
    if (rc != SV_OK)
        unlink(tmp);
    return rc;
}

/* Whole-file atomic writes; see filewrite.h. */
#define _GNU_SOURCE /* O_TMPFILE, linkat */
#include "filewrite.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h> /* rename, snprintf */
#include <string.h>
#include <sys/utsname.h>
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

/* 1 if files are made unnamed, 0 if not, -1 until looked at (once; a race only looks
 * twice): they need /proc/self/fd (an unnamed file is linked through it) and Linux 6.0 or
 * later (earlier kernels did not apply the umask to them on filesystems without ACLs). */
static int unnamed_usable = -1;

static int unnamed_files(void)
{
    int usable = __atomic_load_n(&unnamed_usable, __ATOMIC_RELAXED);
    if (usable < 0) {
        struct utsname u;
        int major = 0;
        usable = uname(&u) == 0 && sscanf(u.release, "%d", &major) == 1 && major >= 6 &&
                 access("/proc/self/fd", X_OK) == 0;
        __atomic_store_n(&unnamed_usable, usable, __ATOMIC_RELAXED);
    }
    return usable;
}

/* A new unnamed file (O_TMPFILE) in the directory of `path`, or -1 with errno (EOPNOTSUPP
 * where it cannot be made that way: the filesystem, the kernel or /proc says no). */
static int open_unnamed(const char *path)
{
#ifdef O_TMPFILE
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash == NULL ? 0 : (slash == path ? 1 : (size_t)(slash - path));
    int fd;
    if (!unnamed_files()) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if (n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (n == 0)
        dir[n++] = '.';
    else
        memcpy(dir, path, n);
    dir[n] = '\0';
    do {
        fd = open(dir, O_WRONLY | O_TMPFILE | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0 && (errno == EISDIR || errno == EINVAL || errno == ENOTSUP))
        errno = EOPNOTSUPP; /* (a kernel or a filesystem without unnamed files) */
    return fd;
#else
    (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

/* Give the unnamed file `fd` the name `path`: linked there if `path` is free, else linked
 * as `tmp` and renamed over `path`.  0; -1 with errno and the failed step in *at; 1 if
 * linking through /proc is refused here (a sandbox, a filesystem), and then for the rest of
 * the process: the caller writes the file under a name instead. */
static int link_unnamed(int fd, const char *tmp, const char *path, int *at)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno == EPERM || errno == EOPNOTSUPP || errno == EXDEV || errno == EINVAL) {
        __atomic_store_n(&unnamed_usable, 0, __ATOMIC_RELAXED);
        return 1;
    }
    if (errno != EEXIST) {
        *at = SV_WRITE_RENAME;
        return -1;
    }
    if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) {
        *at = SV_WRITE_CREATE;
        return -1;
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        unlink(tmp);
        errno = e;
        *at = SV_WRITE_RENAME;
        return -1;
    }
    return 0;
}

/* Write parts[0..n) to `fd` and fsync it if `do_fsync`: SV_OK, or SV_ERR_IO with the failed
 * step (SV_WRITE_WRITE or SV_WRITE_SYNC) reported. */
static int fill(int fd, const struct iovec *parts, int64_t n, int do_fsync, int *step,
                int *err_no)
{
    int r;
    if (write_parts(fd, parts, n) != 0)
        return failed(SV_WRITE_WRITE, step, err_no);
    if (!do_fsync)
        return SV_OK;
    do {
        r = fsync(fd);
    } while (r != 0 && errno == EINTR);
    return r == 0 ? SV_OK : failed(SV_WRITE_SYNC, step, err_no);
}

int sv_write_file(const char *tmp, const char *path, const struct iovec *parts, int64_t nparts,
                  int do_fsync, int *step, int *err_no)
{
    int64_t i;
    int fd, at, linked = 0, rc;
    *step = 0;
    *err_no = 0;
    if (nparts < 0)
        return SV_ERR_ARGUMENT;
    for (i = 0; i < nparts; i++)
        if (parts[i].iov_base == NULL && parts[i].iov_len != 0)
            return SV_ERR_ARGUMENT;
    fd = open_unnamed(path);
    if (fd >= 0) {
        /* The file gets its name only once written (and synced): a crash before that
         * leaves nothing behind, and no writer in the directory waits on its creation. */
        rc = fill(fd, parts, nparts, do_fsync, step, err_no);
        if (rc == SV_OK && (linked = link_unnamed(fd, tmp, path, &at)) < 0)
            rc = failed(at, step, err_no);
        if (close(fd) != 0 && rc == SV_OK && linked == 0 && errno != EINTR)
            rc = failed(SV_WRITE_CLOSE, step, err_no);
        if (rc != SV_OK || linked == 0)
            return rc;
        /* (linking refused: the file is written again below, under a name) */
    } else if (errno != EOPNOTSUPP) {
        return failed(SV_WRITE_CREATE, step, err_no);
    }
    do {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return failed(SV_WRITE_CREATE, step, err_no);
    rc = fill(fd, parts, nparts, do_fsync, step, err_no);
    if (close(fd) != 0 && rc == SV_OK && errno != EINTR)
        rc = failed(SV_WRITE_CLOSE, step, err_no);
    if (rc == SV_OK && rename(tmp, path) != 0)
        rc = failed(SV_WRITE_RENAME, step, err_no);
    if (rc != SV_OK)
        unlink(tmp);
    return rc;
}

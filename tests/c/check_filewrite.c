/* Checker of sv_write_file (csrc/filewrite.c) through a writev that writes short and is
 * interrupted:
 *
 *   gcc -std=c99 -O1 -g -fsanitize=address,undefined -Icsrc tests/c/check_filewrite.c \
 *       csrc/filewrite.c -o /tmp/check_filewrite && /tmp/check_filewrite 500 /tmp/fw
 *
 * Each round writes a random number of random parts (some empty, sometimes more than
 * IOV_MAX) to a file under the directory given and checks its bytes against their
 * concatenation; this executable's writev, which the library's calls reach, writes at most
 * a few hundred bytes at a time and fails one call in eight with EINTR.  Its open refuses
 * unnamed files (O_TMPFILE) in one round of three, as a filesystem without them does, so
 * that both ways of making the file are taken, over an existing destination or a free one.
 * Then the failures: a temporary file that exists (create), a destination that is a
 * non-empty directory (rename: the temporary file must be gone), a negative part count,
 * each with and without unnamed files.  Prints "<rounds> files, <calls> writev calls,
 * <unnamed> unnamed, <named> named" (the files made each way); exits non-zero on failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "filewrite.h"
#include "fuzz_rng.h"

static long calls, unnamed, named;
static int refuse_unnamed, refuse_link;

/* Replaces the C library's open for the whole executable (the library's own calls go to
 * the system directly): counts the files made each way, refuses unnamed ones on demand. */
int open(const char *file, int flags, ...)
{
    const int tmpfile = (flags & O_TMPFILE) == O_TMPFILE, creating = (flags & O_CREAT) != 0;
    int mode = 0, fd;
    if (tmpfile || creating) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, int);
        va_end(ap);
    }
    if (tmpfile && refuse_unnamed) {
        errno = EOPNOTSUPP;
        return -1;
    }
    fd = (int)syscall(SYS_openat, AT_FDCWD, file, flags, mode);
    if (fd >= 0 && tmpfile)
        unnamed++;
    else if (fd >= 0 && creating)
        named++;
    return fd;
}

/* Replaces linkat likewise: refuses links on demand, as a sandbox refusing to link through
 * /proc does. */
int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
    if (refuse_link) {
        errno = EPERM;
        return -1;
    }
    return (int)syscall(SYS_linkat, olddirfd, oldpath, newdirfd, newpath, flags);
}

/* Replaces the C library's writev for the whole executable. */
ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    size_t budget = rnd_in(1, 700), done = 0;
    calls++;
    if (rnd() % 8 == 0) {
        errno = EINTR;
        return -1;
    }
    for (int i = 0; i < iovcnt && done < budget; i++) {
        size_t n = iov[i].iov_len < budget - done ? iov[i].iov_len : budget - done;
        if (n && write(fd, iov[i].iov_base, n) != (ssize_t)n)
            return -1;
        done += n;
    }
    return (ssize_t)done;
}

static int fail(const char *what)
{
    fprintf(stderr, "%s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    rng_state = 7;
    long rounds = argc > 1 ? atol(argv[1]) : 200;
    const char *dir = argc > 2 ? argv[2] : ".";
    char path[4096], tmp[4096];
    int step, err;
    snprintf(path, sizeof path, "%s/value", dir);
    snprintf(tmp, sizeof tmp, "%s/.tmp.value", dir);
    for (long r = 0; r < rounds; r++) {
        int64_t n = r % 50 == 0 ? (int64_t)rnd_in(1025, 3000) : (int64_t)rnd_in(0, 40);
        struct iovec *parts = calloc((size_t)n + 1, sizeof *parts);
        size_t total = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t len = rnd() % 5 == 0 ? 0 : rnd_in(1, 300);
            unsigned char *p = len ? malloc(len) : NULL;
            for (size_t k = 0; k < len; k++)
                p[k] = (unsigned char)rnd();
            parts[i].iov_base = p;
            parts[i].iov_len = len;
            total += len;
        }
        refuse_unnamed = r % 3 == 0;
        if (r % 4 == 1)
            unlink(path); /* (a free destination, else the last round's file) */
        if (sv_write_file(tmp, path, parts, n, (int)(r % 2), &step, &err) != SV_OK) {
            fprintf(stderr, "round %ld: step %d errno %d\n", r, step, err);
            return 1;
        }
        FILE *f = fopen(path, "rb");
        unsigned char *got = malloc(total + 1);
        size_t read = fread(got, 1, total + 1, f);
        fclose(f);
        if (read != total)
            return fail("wrong length");
        size_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            if (parts[i].iov_len && memcmp(got + at, parts[i].iov_base, parts[i].iov_len) != 0)
                return fail("wrong bytes");
            at += parts[i].iov_len;
            free(parts[i].iov_base);
        }
        if (access(tmp, F_OK) == 0)
            return fail("temporary file left");
        free(got);
        free(parts);
    }
    for (refuse_unnamed = 0; refuse_unnamed < 2; refuse_unnamed++) {
        /* the temporary file exists (and so does the destination): refused, left alone */
        FILE *f = fopen(tmp, "wb");
        fclose(f);
        struct iovec one = {"x", 1};
        if (sv_write_file(tmp, path, &one, 1, 1, &step, &err) != SV_ERR_IO ||
            step != SV_WRITE_CREATE || err != EEXIST || access(tmp, F_OK) != 0)
            return fail("existing temporary file");
        unlink(tmp);
        /* the destination is a non-empty directory: the rename fails, no temporary file */
        char sub[4096], inner[4200];
        snprintf(sub, sizeof sub, "%s/sub", dir);
        snprintf(inner, sizeof inner, "%s/inner", sub);
        if ((mkdir(sub, 0777) != 0 && errno != EEXIST) || !(f = fopen(inner, "wb")))
            return fail("setup");
        fclose(f);
        if (sv_write_file(tmp, sub, &one, 1, 0, &step, &err) != SV_ERR_IO ||
            step != SV_WRITE_RENAME || access(tmp, F_OK) == 0)
            return fail("rename over a directory");
        /* the directory is missing: refused at creation, with ENOENT */
        char lost[4200], lost_tmp[4300];
        snprintf(lost, sizeof lost, "%s/missing/value", dir);
        snprintf(lost_tmp, sizeof lost_tmp, "%s/missing/.tmp.value", dir);
        if (sv_write_file(lost_tmp, lost, &one, 1, 0, &step, &err) != SV_ERR_IO ||
            step != SV_WRITE_CREATE || err != ENOENT)
            return fail("missing directory");
        if (sv_write_file(tmp, path, &one, -1, 0, &step, &err) != SV_ERR_ARGUMENT)
            return fail("negative count");
    }
    /* linking refused: the file is written under a name, and every file after it */
    refuse_unnamed = 0;
    refuse_link = 1;
    struct iovec two = {"yz", 2};
    long unnamed_before = unnamed, named_before = named;
    if (sv_write_file(tmp, path, &two, 1, 0, &step, &err) != SV_OK || access(tmp, F_OK) == 0)
        return fail("linking refused");
    FILE *g = fopen(path, "rb");
    char got[3] = {0};
    if (!g || fread(got, 1, 3, g) != 2 || memcmp(got, "yz", 2) != 0)
        return fail("linking refused: wrong bytes");
    fclose(g);
    if (unnamed != unnamed_before + 1 || named != named_before + 1)
        return fail("linking refused: not written under a name");
    refuse_link = 0;
    if (sv_write_file(tmp, path, &two, 1, 0, &step, &err) != SV_OK ||
        unnamed != unnamed_before + 1 || named != named_before + 2)
        return fail("unnamed files used again after a refused link");
    printf("%ld files, %ld writev calls, %ld unnamed, %ld named\n", rounds, calls, unnamed,
           named);
    return 0;
}

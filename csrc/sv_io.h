/* Reading a span of an open file: what the kernels that read files use. */
#ifndef SHARDVOL_SV_IO_H
#define SHARDVOL_SV_IO_H

#include <errno.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

/* Read exactly len bytes at offset into buf; 1 if the file ends first, -1 on an error
 * (errno set). */
static inline int sv_pread_exact(int fd, uint8_t *buf, int64_t len, int64_t offset) {
    while (len > 0) {
        ssize_t n = pread(fd, buf, (size_t)len, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) return 1;
        buf += n;
        len -= n;
        offset += n;
    }
    return 0;
}

#endif

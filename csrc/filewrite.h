/* Writing a whole file atomically: a new file, its bytes, fsync, then its name; all the
 * system calls of one file write in one call, so that a caller holding a lock of its own
 * (the Python GIL) gives it up once per file, not once per call. */
#ifndef SHARDVOL_FILEWRITE_H
#define SHARDVOL_FILEWRITE_H

#include <sys/uio.h>

#include "sv_common.h"

/* The step of sv_write_file that failed. */
#define SV_WRITE_CREATE 1 /* creating `tmp` (ENOENT: its directory is missing) */
#define SV_WRITE_WRITE 2
#define SV_WRITE_SYNC 3
#define SV_WRITE_CLOSE 4
#define SV_WRITE_RENAME 5

/* Write the `nparts` buffers of `parts` in order to a new file, fsync it if `do_fsync` and
 * give it the name `path`.  Where the system can (Linux 6.0 or later, O_TMPFILE, /proc),
 * the file is made unnamed in `path`'s directory and linked at `path` once written, or, if
 * `path` exists, linked as `tmp` and renamed over it; elsewhere, or where linking through
 * /proc is refused, it is created as `tmp` (which must not exist; mode 0666 less the
 * umask) and renamed.  Returns SV_OK, SV_ERR_ARGUMENT
 * (nparts < 0, or a part without a base but with a length), or SV_ERR_IO with the failed
 * step in *step and its errno in *err_no (ENOENT at SV_WRITE_CREATE: the directory is
 * missing).  After a failure no temporary file is left and `path` is untouched, except
 * where closing a linked unnamed file fails (a filesystem whose close writes). */
int sv_write_file(const char *tmp, const char *path, const struct iovec *parts, int64_t nparts,
                  int do_fsync, int *step, int *err_no);

#endif

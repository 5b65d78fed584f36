/* Writing a whole file atomically: a new temporary file, its bytes, fsync, rename over the
 * destination; all the system calls of one file write in one call, so that a caller holding
 * a lock of its own (the Python GIL) gives it up once per file, not once per call. */
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

/* Create `tmp` (which must not exist; mode 0666 less the umask), write the `nparts` buffers
 * of `parts` to it in order, fsync it if `do_fsync`, close it and rename it to `path`.
 * Returns SV_OK, SV_ERR_ARGUMENT (nparts < 0, or a part without a base but with a length),
 * or SV_ERR_IO with the failed step in *step and its errno in *err_no; after a failure past
 * SV_WRITE_CREATE the temporary file is removed, and `path` is never touched. */
int sv_write_file(const char *tmp, const char *path, const struct iovec *parts, int64_t nparts,
                  int do_fsync, int *step, int *err_no);

#endif

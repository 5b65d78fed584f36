/* Shared conventions of the shardvol C kernels.
 *
 * Every kernel takes explicit pointers and lengths, never touches Python, and
 * returns SV_OK (0) or one of the negative error codes below.  Where a kernel
 * can name the element at fault it writes its index to an `err_index` output.
 */
#ifndef SHARDVOL_SV_COMMON_H
#define SHARDVOL_SV_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define SV_OK 0
#define SV_ERR_ARGUMENT -1     /* invalid argument (size, shape, parameter) */
#define SV_ERR_OVERFLOW -2     /* result needs more bits than the output type has */
#define SV_ERR_RANGE -3        /* an input value lies outside its allowed range */
#define SV_ERR_TRUNCATED -4    /* encoded input ends before the data it declares */
#define SV_ERR_CORRUPT -5      /* encoded input is internally inconsistent */
#define SV_ERR_NOMEM -6        /* allocation failed */
#define SV_ERR_OUTPUT_SIZE -7  /* caller's output buffer is too small */
#define SV_ERR_IO -8           /* a system call failed (errno reported separately) */

#endif

/* Output buffers in whole pages with a cache of freed ones; large ones in aligned 2 MiB
 * pages.
 *
 * A fresh anonymous page costs the kernel a fault and zeroing on first touch.  In
 * 2 MiB transparent huge pages that costs about two thirds of what 4 KiB pages
 * (or partly covered huge pages) cost, but only pages fully inside a mapping and
 * aligned to 2 MiB can be huge: blocks of 2 MiB or more are mapped so, rounded up to whole
 * 2 MiB pages, and advised for huge pages (MADV_HUGEPAGE) when there are free ones for
 * them that the host keeps (see sv_hugeblock_advised); smaller blocks are mapped in whole
 * SV_HUGEBLOCK_SMALL units.  Freed blocks are kept, up to a 64th of the machine's memory
 * in all (from SV_HUGEBLOCK_CACHE_MIN to SV_HUGEBLOCK_CACHE_MAX) and 1024 blocks, for
 * later blocks of up to their size and at least half of it (their pages are then already
 * present: a second 256 MB read took 21 ms instead of 90; 24 cutouts of 1 MB held at once,
 * then dropped, took 5,860 page faults a round from malloc's main arena, which gives the
 * freed memory back to the kernel); the others are unmapped at once.
 *
 * Thread-safe.  After fork() a child starts with an empty cache.
 */
#ifndef SHARDVOL_HUGEBLOCK_H
#define SHARDVOL_HUGEBLOCK_H

#include "sv_common.h"

#define SV_HUGEBLOCK_PAGE ((size_t)2 << 20)
#define SV_HUGEBLOCK_SMALL ((size_t)64 << 10)
#define SV_HUGEBLOCK_CACHE_MIN ((size_t)64 << 20)
#define SV_HUGEBLOCK_CACHE_MAX ((size_t)1 << 30)

/* A block of at least `size` bytes (size > 0): of SV_HUGEBLOCK_PAGE or more, aligned to
 * SV_HUGEBLOCK_PAGE, its capacity a multiple of it; smaller, a multiple of
 * SV_HUGEBLOCK_SMALL, page-aligned.  The capacity goes to *capacity.  Contents are
 * unspecified (zero when freshly mapped).  NULL when out of memory. */
void *sv_hugeblock_alloc(size_t size, size_t *capacity);

/* Whether a block of `capacity` bytes is advised for huge pages: 1 when the kernel's free
 * blocks of 2 MiB or more hold it twice over (its faults then take free huge pages, never
 * compacting memory) and are not given back to a hypervisor (free page reporting), else
 * 0; SHARDVOL_HUGEPAGES=advise / =off make it always 1 / 0. */
int sv_hugeblock_advised(size_t capacity);

/* Give back a block from sv_hugeblock_alloc with the capacity it reported. */
void sv_hugeblock_free(void *block, size_t capacity);

/* Fault in, as if written, the pages holding bytes [start, start + length) of a block
 * (MADV_POPULATE_WRITE: one call instead of a fault per page, each page zeroed as on a
 * write; the contents do not change).  SV_OK, or SV_ERR_IO with errno set (EINVAL: a
 * kernel before 5.14; ENOMEM: no memory for them, which a write would then meet too). */
int sv_hugeblock_populate(void *start, size_t length);

#endif

/* Output blocks (large ones in aligned huge pages) with a cache of freed ones: see
 * hugeblock.h. */
#define _GNU_SOURCE
#include "hugeblock.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Freed blocks kept at most.  A remote read's decoded chunks of 256 KiB, cached and then
 * dropped together (250 of them for 24 cutouts of 100^3), must fit: with 64 slots the next
 * such read faulted 186 of them in anew, 12 thousand faults a round. */
#define CACHE_SLOTS 1024

typedef struct {
    void *block;
    size_t capacity;
} slot;

static slot cache[CACHE_SLOTS]; /* oldest first */
static size_t cached_count, cached_bytes;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child of a fork owns none of the parent's other threads: whatever they held in
 * the cache (and its lock) is forgotten, never unmapped (the pages stay mapped). */
static void forget_cache_in_child(void) {
    pthread_mutex_init(&cache_lock, NULL);
    cached_count = 0;
    cached_bytes = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_cache_in_child); }

/* Whether to advise a block of `capacity` bytes for huge pages.  A fault in an advised
 * region takes a free 2 MiB page if there is one (fast: a 128 MiB read of raw chunk files
 * took 27 ms advised, 48 ms not), but when there are none, it may compact memory in the
 * faulting thread (THP defrag "always", "madvise", "defer+madvise"), and even without
 * compaction ("defer") advised regions cost more system time once free huge pages run
 * out: on a 2-core 24 GiB machine, an 8 GiB read with the page cache full took 18.8-21.9 s
 * advised and 17.6-19.0 s not (defrag=madvise; defer: 19.5-19.8 against 17.5-18.0).  So a
 * block is advised when the kernel's free blocks of 2 MiB or more (/proc/buddyinfo, order
 * 9 and up) hold it twice over, unless those blocks are given back to the host: in a
 * virtual machine whose balloon reports free pages (virtio's free page reporting), the
 * host drops the memory of free blocks of 2 MiB and more, and a huge page taken from them
 * is faulted in by the host anew.  There, touching 1 GiB took 0.8-1.6 s in huge pages
 * against 0.4 s in 4 KiB pages (which come from smaller free blocks, kept by the host),
 * and a 1 GiB read in a fresh process 2.6-2.9 s advised against 2.0-2.1 s not.
 * SHARDVOL_HUGEPAGES=advise (or =off) decides instead. */
static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static int choice = -1; /* 1 advise, 0 never, -1 by the free huge pages */

/* Whether a virtio balloon bound to its driver reports free pages to the host (device id
 * 5, feature bit 5: VIRTIO_BALLOON_F_REPORTING), from /sys/bus/virtio/devices. */
static int free_pages_reported(void) {
    DIR *dir = opendir("/sys/bus/virtio/devices");
    if (dir == NULL) return 0;
    int reported = 0;
    const struct dirent *entry;
    while (!reported && (entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        char path[512], text[256];
        snprintf(path, sizeof path, "/sys/bus/virtio/devices/%s/device", entry->d_name);
        FILE *f = fopen(path, "r");
        const int balloon = f != NULL && fgets(text, sizeof text, f) != NULL &&
                            strtol(text, NULL, 16) == 5;
        if (f != NULL) fclose(f);
        snprintf(path, sizeof path, "/sys/bus/virtio/devices/%s/driver", entry->d_name);
        if (!balloon || access(path, F_OK) != 0) continue;
        snprintf(path, sizeof path, "/sys/bus/virtio/devices/%s/features", entry->d_name);
        f = fopen(path, "r");
        reported = f != NULL && fgets(text, sizeof text, f) != NULL && strlen(text) > 5 &&
                   text[5] == '1';
        if (f != NULL) fclose(f);
    }
    closedir(dir);
    return reported;
}

static void read_choice(void) {
    const char *env = getenv("SHARDVOL_HUGEPAGES");
    if (env != NULL && strcmp(env, "advise") == 0) choice = 1;
    else if (env != NULL && strcmp(env, "off") == 0) choice = 0;
    else if (free_pages_reported()) choice = 0;
}

/* Bytes in free blocks of 2 MiB (order 9 of 4 KiB pages) or more, over every zone; 0 if
 * /proc/buddyinfo cannot be read. */
static size_t free_huge_bytes(void) {
    FILE *f = fopen("/proc/buddyinfo", "r");
    if (f == NULL) return 0;
    char line[512];
    size_t total = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char *p = strstr(line, "zone");
        if (p == NULL) continue;
        p += 4;
        while (*p == ' ') p++;
        while (*p != ' ' && *p != 0) p++; /* the zone's name */
        for (int order = 0;; order++) {
            char *end;
            const unsigned long long n = strtoull(p, &end, 10);
            if (end == p) break;
            p = end;
            if (order >= 9) total += (size_t)n << (order + 12);
        }
    }
    fclose(f);
    return total;
}

int sv_hugeblock_advised(size_t capacity) {
    pthread_once(&choice_once, read_choice);
    if (choice >= 0) return choice;
    return capacity <= free_huge_bytes() / 2;
}

static void *map_aligned(size_t capacity) {
    const size_t span = capacity + SV_HUGEBLOCK_PAGE;
    if (span < capacity) return NULL;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    const size_t head = (SV_HUGEBLOCK_PAGE - (uintptr_t)p % SV_HUGEBLOCK_PAGE) % SV_HUGEBLOCK_PAGE;
    const size_t tail = span - head - capacity;
    if (head) munmap(p, head);
    if (tail) munmap(p + head + capacity, tail);
#ifdef MADV_HUGEPAGE
    if (sv_hugeblock_advised(capacity)) madvise(p + head, capacity, MADV_HUGEPAGE);
#endif
    return p + head;
}

void *sv_hugeblock_alloc(size_t size, size_t *capacity) {
    if (size == 0 || size > SIZE_MAX - SV_HUGEBLOCK_PAGE) return NULL;
    const size_t unit = size < SV_HUGEBLOCK_PAGE ? SV_HUGEBLOCK_SMALL : SV_HUGEBLOCK_PAGE;
    const size_t want = (size + unit - 1) / unit * unit;
    pthread_once(&atfork_once, register_atfork);
    void *found = NULL;
    pthread_mutex_lock(&cache_lock);
    size_t best = CACHE_SLOTS;
    for (size_t i = 0; i < cached_count; ++i) {
        const size_t c = cache[i].capacity;
        if (c >= want && c / 2 <= want && (best == CACHE_SLOTS || c < cache[best].capacity))
            best = i;
    }
    if (best != CACHE_SLOTS) {
        found = cache[best].block;
        *capacity = cache[best].capacity;
        cached_bytes -= cache[best].capacity;
        memmove(cache + best, cache + best + 1, (cached_count - best - 1) * sizeof *cache);
        --cached_count;
    }
    pthread_mutex_unlock(&cache_lock);
    if (found) return found;
    *capacity = want;
    if (want >= SV_HUGEBLOCK_PAGE) return map_aligned(want);
    void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Bytes of freed blocks kept: a 64th of the machine's memory, from 64 MiB to 1 GiB. */
static size_t cache_limit(void) {
    static size_t limit;
    if (limit == 0) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        size_t l = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 64 : 0;
        if (l < SV_HUGEBLOCK_CACHE_MIN) l = SV_HUGEBLOCK_CACHE_MIN;
        if (l > SV_HUGEBLOCK_CACHE_MAX) l = SV_HUGEBLOCK_CACHE_MAX;
        limit = l;
    }
    return limit;
}

/* Blocks unmapped at most per turn of sv_hugeblock_free's lock. */
#define EVICT_BATCH 32

void sv_hugeblock_free(void *block, size_t capacity) {
    if (block == NULL) return;
    const size_t limit = cache_limit();
    if (capacity > limit) {
        munmap(block, capacity);
        return;
    }
    /* make room, the oldest blocks first, unmapped outside the lock a batch at a time */
    for (int kept = 0; !kept;) {
        slot evicted[EVICT_BATCH];
        size_t n = 0, bytes;
        pthread_mutex_lock(&cache_lock);
        bytes = cached_bytes;
        while (n < EVICT_BATCH && (cached_count - n == CACHE_SLOTS || bytes + capacity > limit)) {
            evicted[n] = cache[n];
            bytes -= cache[n++].capacity;
        }
        memmove(cache, cache + n, (cached_count - n) * sizeof *cache);
        cached_count -= n;
        cached_bytes = bytes;
        kept = cached_count < CACHE_SLOTS && cached_bytes + capacity <= limit;
        if (kept) {
            cache[cached_count].block = block;
            cache[cached_count].capacity = capacity;
            ++cached_count;
            cached_bytes += capacity;
        }
        pthread_mutex_unlock(&cache_lock);
        for (size_t i = 0; i < n; ++i) munmap(evicted[i].block, evicted[i].capacity);
    }
}

#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#define MADV_POPULATE_WRITE 23 /* (Linux 5.14; C libraries before glibc 2.35 lack the name) */
#endif

int sv_hugeblock_populate(void *start, size_t length) {
#ifdef MADV_POPULATE_WRITE
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t first = (uintptr_t)start / page * page;
    if (length == 0) return SV_OK;
    return madvise((void *)first, length + ((uintptr_t)start - first), MADV_POPULATE_WRITE) == 0
               ? SV_OK
               : SV_ERR_IO;
#else
    (void)start;
    (void)length;
    return SV_ERR_IO;
#endif
}

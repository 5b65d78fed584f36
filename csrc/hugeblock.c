/* Aligned huge-page blocks with a small cache of freed ones: see hugeblock.h. */
#define _GNU_SOURCE
#include "hugeblock.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#define CACHE_SLOTS 16

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
    madvise(p + head, capacity, MADV_HUGEPAGE);
#endif
    return p + head;
}

void *sv_hugeblock_alloc(size_t size, size_t *capacity) {
    if (size == 0 || size > SIZE_MAX - SV_HUGEBLOCK_PAGE) return NULL;
    const size_t want = (size + SV_HUGEBLOCK_PAGE - 1) / SV_HUGEBLOCK_PAGE * SV_HUGEBLOCK_PAGE;
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
        for (size_t i = best + 1; i < cached_count; ++i) cache[i - 1] = cache[i];
        --cached_count;
    }
    pthread_mutex_unlock(&cache_lock);
    if (found) return found;
    *capacity = want;
    return map_aligned(want);
}

void sv_hugeblock_free(void *block, size_t capacity) {
    if (block == NULL) return;
    slot evicted[CACHE_SLOTS];
    size_t n_evicted = 0;
    int keep = capacity <= SV_HUGEBLOCK_CACHE_BYTES;
    if (keep) {
        pthread_mutex_lock(&cache_lock);
        /* make room: the oldest blocks go first */
        while (cached_count == CACHE_SLOTS || cached_bytes + capacity > SV_HUGEBLOCK_CACHE_BYTES) {
            evicted[n_evicted++] = cache[0];
            cached_bytes -= cache[0].capacity;
            for (size_t i = 1; i < cached_count; ++i) cache[i - 1] = cache[i];
            --cached_count;
        }
        cache[cached_count].block = block;
        cache[cached_count].capacity = capacity;
        ++cached_count;
        cached_bytes += capacity;
        pthread_mutex_unlock(&cache_lock);
    }
    for (size_t i = 0; i < n_evicted; ++i) munmap(evicted[i].block, evicted[i].capacity);
    if (!keep) munmap(block, capacity);
}

/* Random checks of csrc/hugeblock.c's cache of freed blocks: threads allocate, write, check
 * and free blocks of random sizes at once (a live block is never handed out twice: each
 * holds its owner's stamp until freed); then more freed blocks than the cache keeps, and
 * blocks that make it evict hundreds at a time.
 *
 *   check_hugeblock ROUNDS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hugeblock.h"

#define THREADS 4
#define HELD 24

static int rounds;

/* splitmix64, one state per thread */
static uint64_t next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int failed;

typedef struct {
    uint8_t *block;
    size_t size, capacity;
    uint8_t stamp;
} held;

/* Write `stamp` on every page of the block's first `size` bytes, and its last byte. */
static void stamp(held *h) {
    for (size_t i = 0; i < h->size; i += 4096) h->block[i] = h->stamp;
    h->block[h->size - 1] = h->stamp;
}

static int intact(const held *h) {
    for (size_t i = 0; i < h->size; i += 4096)
        if (h->block[i] != h->stamp) return 0;
    return h->block[h->size - 1] == h->stamp;
}

static void *worker(void *arg) {
    uint64_t rng = (uintptr_t)arg + 1;
    held h[HELD] = {{0}};
    for (int r = 0; r < rounds; r++) {
        const int i = (int)(next(&rng) % HELD);
        if (h[i].block != NULL) {
            if (!intact(&h[i])) {
                fprintf(stderr, "a live block of %zu bytes was written by another owner\n",
                        h[i].size);
                __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            }
            sv_hugeblock_free(h[i].block, h[i].capacity);
            h[i].block = NULL;
        }
        /* 64 KiB to 3 MiB, mostly chunk-sized */
        h[i].size = next(&rng) % 4 ? (size_t)256 << 10 : 1 + next(&rng) % (3 << 20);
        h[i].block = sv_hugeblock_alloc(h[i].size, &h[i].capacity);
        if (h[i].block == NULL || h[i].capacity < h[i].size) {
            fprintf(stderr, "no block of %zu bytes\n", h[i].size);
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        h[i].stamp = (uint8_t)(1 + next(&rng) % 255);
        stamp(&h[i]);
    }
    for (int i = 0; i < HELD; i++)
        if (h[i].block != NULL) sv_hugeblock_free(h[i].block, h[i].capacity);
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atoi(argv[1]) : 2000;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);

    /* 1500 blocks freed together (more than the cache keeps), then taken again */
    enum { MANY = 1500 };
    static held many[MANY];
    for (int i = 0; i < MANY; i++) {
        many[i].size = (size_t)64 << 10;
        many[i].block = sv_hugeblock_alloc(many[i].size, &many[i].capacity);
        if (many[i].block == NULL) return 1;
        many[i].stamp = (uint8_t)(1 + i % 255);
        stamp(&many[i]);
    }
    for (int i = 0; i < MANY; i++) sv_hugeblock_free(many[i].block, many[i].capacity);
    for (int i = 0; i < MANY; i++) {
        many[i].block = sv_hugeblock_alloc(many[i].size, &many[i].capacity);
        if (many[i].block == NULL) return 1;
        stamp(&many[i]);
    }
    /* a block of most of the cache's bytes: hundreds of small ones are evicted for it */
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t limit = (size_t)pages * (size_t)page / 64;
    if (limit < SV_HUGEBLOCK_CACHE_MIN) limit = SV_HUGEBLOCK_CACHE_MIN;
    if (limit > SV_HUGEBLOCK_CACHE_MAX) limit = SV_HUGEBLOCK_CACHE_MAX;
    for (int i = 0; i < MANY; i++) sv_hugeblock_free(many[i].block, many[i].capacity);
    size_t cap = 0;
    uint8_t *big = sv_hugeblock_alloc(limit - SV_HUGEBLOCK_PAGE, &cap);
    if (big == NULL) return 1;
    big[0] = 9;
    sv_hugeblock_free(big, cap);
    size_t again_cap = 0;
    uint8_t *again = sv_hugeblock_alloc(limit - SV_HUGEBLOCK_PAGE, &again_cap);
    if (again != big || again[0] != 9) {
        fprintf(stderr, "the large block freed last was not kept\n");
        return 1;
    }
    sv_hugeblock_free(again, again_cap);
    if (failed) return 1;
    printf("ok %d rounds\n", rounds);
    return 0;
}

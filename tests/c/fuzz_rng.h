/* The fuzzers' pseudo-random numbers: splitmix64, seeded by each fuzzer. */
#ifndef SHARDVOL_FUZZ_RNG_H
#define SHARDVOL_FUZZ_RNG_H

#include <stddef.h>
#include <stdint.h>

static uint64_t rng_state;

static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static size_t rnd_in(size_t lo, size_t hi) { return lo + (size_t)(rnd() % (hi - lo + 1)); }

#endif

#include "cseg.h"

#include "copybox.h"

#include <stdlib.h>
#include <string.h>

/* ---- explicit little-endian access (any alignment, any host) ---------------------------- */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SV_BSWAP32(v) __builtin_bswap32(v)
#define SV_BSWAP64(v) __builtin_bswap64(v)
#else
#define SV_BSWAP32(v) (v)
#define SV_BSWAP64(v) (v)
#endif

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return SV_BSWAP32(v);
}

static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return SV_BSWAP64(v);
}

static inline void st32(uint8_t *p, uint32_t v) {
    v = SV_BSWAP32(v);
    memcpy(p, &v, 4);
}

static inline void st64(uint8_t *p, uint64_t v) {
    v = SV_BSWAP64(v);
    memcpy(p, &v, 8);
}

static inline int valid_bits(uint32_t bits) {
    return bits <= 32 && (bits & (bits - 1)) == 0;
}

static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static void set_error(sv_cseg_error *err, int reason, size_t channel, const size_t block[3],
                      uint64_t value, uint64_t limit) {
    if (!err) return;
    err->reason = reason;
    err->channel = channel;
    for (int d = 0; d < 3; ++d) err->block[d] = block ? block[d] : 0;
    err->value = value;
    err->limit = limit;
}

/* Block geometry shared by encoder and decoder. */
typedef struct {
    size_t shape[3];  /* volume */
    size_t bs[3];     /* block shape */
    size_t grid[3];   /* blocks per dimension */
    size_t nblocks;
    uint64_t bvol;    /* voxels per (full) block */
} geometry;

static int make_geometry(const size_t shape[4], const size_t block_shape[3], geometry *g) {
    g->bvol = 1;
    g->nblocks = 1;
    for (int d = 0; d < 3; ++d) {
        if (block_shape[d] == 0 || block_shape[d] > SV_CSEG_MAX_BLOCK_VOXELS) return 0;
        g->shape[d] = shape[d];
        g->bs[d] = block_shape[d];
        g->grid[d] = shape[d] / block_shape[d] + (shape[d] % block_shape[d] != 0);
        g->bvol *= block_shape[d];
        if (g->bvol > SV_CSEG_MAX_BLOCK_VOXELS) return 0;
        g->nblocks *= g->grid[d];
    }
    return 1;
}

/* ---- growable output buffer (encoder) ----------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} obuf;

static int obuf_reserve(obuf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return 0;
    size_t need = b->len + extra;
    if (need <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return 0;
    b->p = p;
    b->cap = cap;
    return 1;
}

/* ---- lookup-table cache of one channel (encoder) ---------------------------------------------
 * Maps a table's content to the offset where it was first written; the content itself is
 * compared against the output buffer, so only offsets are stored. */

typedef struct {
    uint64_t hash;
    uint64_t nwords; /* 0 marks an empty slot */
    uint32_t off;    /* word offset from the channel start */
} tcache_entry;

typedef struct {
    tcache_entry *e;
    size_t cap, count;
} tcache;

static uint64_t hash_words(const uint8_t *p, size_t nwords) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ nwords;
    for (size_t i = 0; i < nwords; ++i) {
        h ^= ld32(p + 4 * i);
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return h;
}

static int tcache_reset(tcache *c) {
    if (!c->e) {
        c->cap = 256;
        c->e = malloc(c->cap * sizeof(tcache_entry));
        if (!c->e) return 0;
    }
    memset(c->e, 0, c->cap * sizeof(tcache_entry));
    c->count = 0;
    return 1;
}

/* Offset of an earlier table equal to the nwords words at `cand`, or -1. */
static int64_t tcache_find(const tcache *c, const uint8_t *channel, const uint8_t *cand,
                           size_t nwords, uint64_t hash) {
    size_t mask = c->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        const tcache_entry *e = &c->e[i];
        if (e->nwords == 0) return -1;
        if (e->hash == hash && e->nwords == nwords &&
            memcmp(channel + 4 * (size_t)e->off, cand, 4 * nwords) == 0)
            return e->off;
    }
}

static int tcache_insert(tcache *c, uint64_t hash, uint32_t off, uint64_t nwords) {
    if (2 * (c->count + 1) > c->cap) {
        size_t ncap = c->cap * 2;
        tcache_entry *ne = calloc(ncap, sizeof(tcache_entry));
        if (!ne) return 0;
        for (size_t i = 0; i < c->cap; ++i) {
            if (c->e[i].nwords == 0) continue;
            size_t j = c->e[i].hash & (ncap - 1);
            while (ne[j].nwords) j = (j + 1) & (ncap - 1);
            ne[j] = c->e[i];
        }
        free(c->e);
        c->e = ne;
        c->cap = ncap;
    }
    size_t mask = c->cap - 1;
    size_t i = hash & mask;
    while (c->e[i].nwords) i = (i + 1) & mask;
    c->e[i].hash = hash;
    c->e[i].off = off;
    c->e[i].nwords = nwords;
    c->count++;
    return 1;
}

/* ---- the label-type generic part, instantiated for uint32 and uint64 ---------------------- */

#define LABEL_T uint32_t
#define SFX u32
#define LD_LABEL ld32
#define ST_LABEL st32
#include "cseg_impl.h"
#undef LABEL_T
#undef SFX
#undef LD_LABEL
#undef ST_LABEL

#define LABEL_T uint64_t
#define SFX u64
#define LD_LABEL ld64
#define ST_LABEL st64
#include "cseg_impl.h"
#undef LABEL_T
#undef SFX
#undef LD_LABEL
#undef ST_LABEL

/* ---- entry points ------------------------------------------------------------------------ */

int sv_cseg_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[4],
                   const size_t block_shape[3], void *out, const ptrdiff_t out_strides[4],
                   sv_cseg_error *err) {
    const size_t origin[4] = {0, 0, 0, 0};
    return sv_cseg_decode_region(data, len, label_bytes, shape, block_shape, origin, shape, out,
                                 out_strides, NULL, 0, err);
}

int sv_cseg_decode_region(const uint8_t *data, size_t len, size_t label_bytes,
                          const size_t shape[4], const size_t block_shape[3],
                          const size_t origin[4], const size_t region[4], void *out,
                          const ptrdiff_t out_strides[4], void *scratch, size_t scratch_len,
                          sv_cseg_error *err) {
    geometry g;
    set_error(err, SV_CSEG_NO_ERROR, 0, NULL, 0, 0);
    int region_ok = 1;
    for (int d = 0; d < 4; ++d)
        region_ok &= origin[d] <= shape[d] && region[d] <= shape[d] - origin[d];
    if ((label_bytes != 4 && label_bytes != 8) || !region_ok ||
        !make_geometry(shape, block_shape, &g)) {
        set_error(err, SV_CSEG_BAD_ARGUMENT, 0, NULL, 0, 0);
        return SV_ERR_ARGUMENT;
    }
    if (len % 4 != 0) {
        set_error(err, SV_CSEG_LENGTH_NOT_WORDS, 0, NULL, len, 0);
        return SV_ERR_CORRUPT;
    }
    /* staging needs a layer of blocks of the region: region x * region y * block z labels */
    if (scratch != NULL && scratch_len / label_bytes / block_shape[2] / (region[0] ? region[0] : 1) /
                                   (region[1] ? region[1] : 1) == 0)
        scratch = NULL;
    const size_t nwords = len / 4;
    const size_t channels = shape[3];
    if (nwords < channels) {
        set_error(err, SV_CSEG_CHANNEL_HEADER, 0, NULL, nwords, channels);
        return SV_ERR_TRUNCATED;
    }
    const size_t none[3] = {0, 0, 0};
    for (size_t c = 0; c < channels; ++c) {
        const size_t off = ld32(data + 4 * c);
        if (off > nwords) {
            set_error(err, SV_CSEG_CHANNEL_OFFSET, c, NULL, off, nwords);
            return SV_ERR_CORRUPT;
        }
        /* channels outside the region: block headers checked, nothing decoded */
        const int wanted = c >= origin[3] && c - origin[3] < region[3];
        const size_t *rn = wanted ? region : none;
        const ptrdiff_t cpos = wanted ? (ptrdiff_t)(c - origin[3]) * out_strides[3] : 0;
        int rc;
        if (label_bytes == 4)
            rc = decode_channel_u32(data + 4 * off, nwords - off, &g, origin, rn,
                                    (uint32_t *)out + cpos, out_strides, scratch, c, err);
        else
            rc = decode_channel_u64(data + 4 * off, nwords - off, &g, origin, rn,
                                    (uint64_t *)out + cpos, out_strides, scratch, c, err);
        if (rc != SV_OK) return rc;
    }
    return SV_OK;
}

int sv_cseg_encode(const void *in, size_t label_bytes, const size_t shape[4],
                   const ptrdiff_t in_strides[4], const size_t block_shape[3], uint8_t **out,
                   size_t *out_len, sv_cseg_error *err) {
    geometry g;
    set_error(err, SV_CSEG_NO_ERROR, 0, NULL, 0, 0);
    *out = NULL;
    *out_len = 0;
    if ((label_bytes != 4 && label_bytes != 8) || !make_geometry(shape, block_shape, &g)) {
        set_error(err, SV_CSEG_BAD_ARGUMENT, 0, NULL, 0, 0);
        return SV_ERR_ARGUMENT;
    }
    const size_t channels = shape[3];
    obuf b = {NULL, 0, 0};
    tcache cache = {NULL, 0, 0};
    int rc = SV_OK;
    if (!obuf_reserve(&b, 4 * channels)) {
        rc = SV_ERR_NOMEM;
        goto done;
    }
    b.len = 4 * channels;
    for (size_t c = 0; c < channels && rc == SV_OK; ++c) {
        if (b.len / 4 > UINT32_MAX) {
            set_error(err, SV_CSEG_VALUES_OFFSET_32, c, NULL, b.len / 4, UINT32_MAX);
            rc = SV_ERR_OVERFLOW;
            break;
        }
        st32(b.p + 4 * c, (uint32_t)(b.len / 4));
        if (!tcache_reset(&cache)) {
            rc = SV_ERR_NOMEM;
            break;
        }
        if (label_bytes == 4)
            rc = encode_channel_u32((const uint32_t *)in + (ptrdiff_t)c * in_strides[3], in_strides, &g,
                                    &b, &cache, c, err);
        else
            rc = encode_channel_u64((const uint64_t *)in + (ptrdiff_t)c * in_strides[3], in_strides, &g,
                                    &b, &cache, c, err);
    }
done:
    free(cache.e);
    if (rc != SV_OK) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    *out_len = b.len;
    return SV_OK;
}

void sv_cseg_free(void *p) { free(p); }

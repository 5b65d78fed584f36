/* The label-type generic half of cseg.c, included once per label type with
 *   LABEL_T   uint32_t or uint64_t
 *   SFX       function name suffix (u32, u64)
 *   LD_LABEL  little-endian load of one label from a byte pointer
 *   ST_LABEL  little-endian store of one label to a byte pointer
 * defined.  Not a public header. */

#define SV_CAT_(a, b) a##_##b
#define SV_CAT(a, b) SV_CAT_(a, b)
#define FN(name) SV_CAT(name, SFX)

#if defined(__GNUC__)
#define SV_FORCE_INLINE inline __attribute__((always_inline))
#else
#define SV_FORCE_INLINE inline
#endif

/* ---- decoding ------------------------------------------------------------------------------ */

/* Write the table entry at index 0 to every voxel of the block. */
static void FN(fill_block)(LABEL_T *out, const ptrdiff_t st[3], const size_t a[3], LABEL_T v) {
    for (size_t z = 0; z < a[2]; ++z)
        for (size_t y = 0; y < a[1]; ++y) {
            LABEL_T *dst = out + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2];
            if (st[0] == 1)
                for (size_t x = 0; x < a[0]; ++x) dst[x] = v;
            else
                for (size_t x = 0; x < a[0]; ++x) dst[(ptrdiff_t)x * st[0]] = v;
        }
}

/* Load the n <= 8 bytes holding 8 consecutive indices of width n bits. */
static SV_FORCE_INLINE uint64_t FN(ld_group)(const uint8_t *p, const unsigned n) {
    switch (n) {
        case 1: return p[0];
        case 2: return (uint64_t)p[0] | (uint64_t)p[1] << 8;
        case 4: return ld32(p);
        default: return ld64(p);
    }
}

/* Bit position of the index of voxel (x, y, z) of a block of shape bs. */
static inline uint64_t FN(bit_position)(unsigned bits, const size_t bs[3], size_t x, size_t y,
                                        size_t z) {
    return (uint64_t)bits * (x + bs[0] * (y + bs[1] * (uint64_t)z));
}

/* Decode the voxels [o, o + a) of a block whose table is known to hold 2**bits
 * entries or more, so no index needs checking; `out` points at voxel o.
 * Called with constant `bits` and `unit_x` (x stride 1) so that every
 * combination compiles to its own tight loop.  When rows start on byte
 * boundaries and bits <= 8, groups of 8 voxels are decoded from one load of
 * `bits` bytes. */
static SV_FORCE_INLINE void FN(block_unchecked)(LABEL_T *out, const ptrdiff_t st[3],
                                                const size_t o[3], const size_t a[3],
                                                const size_t bs[3], const uint8_t *enc,
                                                const uint8_t *tab, const unsigned bits,
                                                const int unit_x) {
    const uint32_t mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1u;
    const ptrdiff_t sx = unit_x ? 1 : st[0];
    const int grouped = bits <= 8 && (bs[0] * bits) % 8 == 0 && (o[0] * bits) % 8 == 0;
    for (size_t z = 0; z < a[2]; ++z)
        for (size_t y = 0; y < a[1]; ++y) {
            LABEL_T *dst = out + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2];
            const uint64_t bitpos = FN(bit_position)(bits, bs, o[0], y + o[1], z + o[2]);
            size_t x = 0;
            if (grouped) {
                const uint8_t *gp = enc + (size_t)(bitpos >> 3);
                for (; x + 8 <= a[0]; x += 8, gp += bits) {
                    const uint64_t w = FN(ld_group)(gp, bits);
                    for (unsigned j = 0; j < 8; ++j)
                        dst[(ptrdiff_t)(x + j) * sx] =
                            LD_LABEL(tab + sizeof(LABEL_T) * (size_t)((w >> (j * bits)) & mask));
                }
            }
            const uint64_t p = bitpos + (uint64_t)bits * x;
            const uint8_t *wp = enc + 4 * (size_t)(p >> 5);
            unsigned sh = (unsigned)(p & 31);
            while (x < a[0]) {
                uint64_t w = ld32(wp) >> sh;
                size_t k = (32 - sh) / bits;
                if (k > a[0] - x) k = a[0] - x;
                for (size_t j = 0; j < k; ++j) {
                    dst[(ptrdiff_t)(x + j) * sx] = LD_LABEL(tab + sizeof(LABEL_T) * (size_t)(w & mask));
                    w >>= bits;
                }
                x += k;
                wp += 4;
                sh = 0;
            }
        }
}

/* Decode the voxels [o, o + a) of a block whose table may be shorter than
 * 2**bits entries: every index is checked.  Returns 0 and the bad index in
 * *bad if one points past the table. */
static int FN(block_checked)(LABEL_T *out, const ptrdiff_t st[3], const size_t o[3],
                             const size_t a[3], const size_t bs[3], const uint8_t *enc,
                             const uint8_t *tab, unsigned bits, uint64_t table_size,
                             uint64_t *bad) {
    const uint64_t mask = ((uint64_t)1 << bits) - 1;
    for (size_t z = 0; z < a[2]; ++z)
        for (size_t y = 0; y < a[1]; ++y) {
            LABEL_T *dst = out + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2];
            for (size_t x = 0; x < a[0]; ++x) {
                const uint64_t p = FN(bit_position)(bits, bs, x + o[0], y + o[1], z + o[2]);
                const uint64_t idx = ((uint64_t)ld32(enc + 4 * (size_t)(p >> 5)) >> (p & 31)) & mask;
                if (idx >= table_size) {
                    *bad = idx;
                    return 0;
                }
                dst[(ptrdiff_t)x * st[0]] = LD_LABEL(tab + sizeof(LABEL_T) * (size_t)idx);
            }
        }
    return 1;
}

#define SV_UNCHECKED_CASES(UNIT_X)                                                      \
    switch (bits) {                                                                     \
        case 1: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 1, UNIT_X); break;   \
        case 2: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 2, UNIT_X); break;   \
        case 4: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 4, UNIT_X); break;   \
        case 8: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 8, UNIT_X); break;   \
        case 16: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 16, UNIT_X); break; \
        default: FN(block_unchecked)(bout, st, o, a, g->bs, enc, tab, 32, UNIT_X); break; \
    }

/* Decode the voxels [ro, ro + rn) of one channel: `ch` holds the nwords words
 * from the channel's start to the end of the buffer; `out` (strides `out_st`)
 * points at the channel's voxel ro.  Every block header is checked, also those
 * of blocks outside the region (rn may be all zero: check only).  With
 * `scratch` (room for rn[0] * rn[1] * bs[2] labels) each layer of blocks is
 * decoded into it first and then copied out row by row. */
static int FN(decode_channel)(const uint8_t *ch, size_t nwords, const geometry *g,
                              const size_t ro[3], const size_t rn[3], LABEL_T *out,
                              const ptrdiff_t out_st[3], LABEL_T *scratch, size_t channel,
                              sv_cseg_error *err) {
    const size_t wpl = sizeof(LABEL_T) / 4;
    if (g->nblocks > nwords / 2) {
        set_error(err, SV_CSEG_BLOCK_HEADERS, channel, NULL, 2 * (uint64_t)g->nblocks, nwords);
        return SV_ERR_TRUNCATED;
    }
    const ptrdiff_t lb = (ptrdiff_t)sizeof(LABEL_T);
    const ptrdiff_t to[4] = {lb * out_st[0], lb * out_st[1], lb * out_st[2], 0};
    const size_t whole[4] = {rn[0], rn[1], rn[2], 1};
    const int stream = sv_stream_box((const uint8_t *)out, to, whole, sizeof(LABEL_T));
    size_t blk[3];
    for (blk[2] = 0; blk[2] < g->grid[2]; ++blk[2]) {
        /* the region's z planes in this layer of blocks: [zlo, zhi) */
        const size_t zpos = blk[2] * g->bs[2];
        const size_t zlo = zpos > ro[2] ? zpos : ro[2];
        const size_t zhi = min_size(zpos + min_size(g->bs[2], g->shape[2] - zpos), ro[2] + rn[2]);
        const int staged = scratch != NULL && zlo < zhi && rn[0] > 0 && rn[1] > 0;
        const ptrdiff_t scratch_st[3] = {1, (ptrdiff_t)rn[0], (ptrdiff_t)(rn[0] * rn[1])};
        const ptrdiff_t *st = staged ? scratch_st : out_st;
        LABEL_T *const base = staged ? scratch : out;
        const size_t zorigin = staged ? zlo : ro[2];
        for (blk[1] = 0; blk[1] < g->grid[1]; ++blk[1])
            for (blk[0] = 0; blk[0] < g->grid[0]; ++blk[0]) {
                const uint8_t *hdr = ch + 8 * (blk[0] + g->grid[0] * (blk[1] + g->grid[1] * blk[2]));
                const uint32_t w0 = ld32(hdr);
                const uint64_t toff = w0 & 0xFFFFFFu;
                const uint32_t bits = w0 >> 24;
                const uint64_t voff = ld32(hdr + 4);
                if (!valid_bits(bits)) {
                    set_error(err, SV_CSEG_BITS, channel, blk, bits, 32);
                    return SV_ERR_CORRUPT;
                }
                const uint64_t enc_words = (bits * g->bvol + 31) / 32;
                if (voff + enc_words > nwords) {
                    set_error(err, SV_CSEG_VALUES_OFFSET, channel, blk, voff + enc_words, nwords);
                    return SV_ERR_CORRUPT;
                }
                if (toff + wpl > nwords) {
                    set_error(err, SV_CSEG_TABLE_OFFSET, channel, blk, toff, nwords);
                    return SV_ERR_CORRUPT;
                }
                const uint64_t table_size = (nwords - toff) / wpl;
                const uint8_t *enc = ch + 4 * voff;
                const uint8_t *tab = ch + 4 * toff;
                size_t o[3], a[3]; /* the region's part of the block: voxels [o, o + a) */
                LABEL_T *bout = base;
                int inside = 1;
                for (int d = 0; d < 3; ++d) {
                    const size_t pos = blk[d] * g->bs[d];
                    const size_t lo = pos > ro[d] ? pos : ro[d];
                    const size_t hi = min_size(pos + min_size(g->bs[d], g->shape[d] - pos),
                                               ro[d] + rn[d]);
                    if (lo >= hi) {
                        inside = 0;
                        break;
                    }
                    o[d] = lo - pos;
                    a[d] = hi - lo;
                    bout += (ptrdiff_t)(lo - (d == 2 ? zorigin : ro[d])) * st[d];
                }
                if (!inside) continue;
                if (bits == 0) {
                    FN(fill_block)(bout, st, a, LD_LABEL(tab));
                } else if ((table_size >> bits) != 0) {
                    if (st[0] == 1) {
                        SV_UNCHECKED_CASES(1)
                    } else {
                        SV_UNCHECKED_CASES(0)
                    }
                } else {
                    uint64_t bad = 0;
                    if (!FN(block_checked)(bout, st, o, a, g->bs, enc, tab, bits, table_size,
                                           &bad)) {
                        set_error(err, SV_CSEG_TABLE_INDEX, channel, blk, bad, table_size);
                        return SV_ERR_CORRUPT;
                    }
                }
            }
        if (staged) {
            const ptrdiff_t from[4] = {lb, lb * scratch_st[1], lb * scratch_st[2], 0};
            const size_t n[4] = {rn[0], rn[1], zhi - zlo, 1};
            sv_copy_box_to((const uint8_t *)scratch, from,
                           (uint8_t *)(out + (ptrdiff_t)(zlo - ro[2]) * out_st[2]), to, n,
                           sizeof(LABEL_T), stream);
        }
    }
    return SV_OK;
}

#undef SV_UNCHECKED_CASES

/* ---- encoding ------------------------------------------------------------------------------ */

/* The distinct labels of one block: an open-addressing set whose slots are
 * valid only when their stamp equals the current block's, so starting a new
 * block costs nothing; `idx` receives each label's rank once sorted. */
typedef struct {
    LABEL_T *keys;
    uint32_t *stamp;
    uint32_t *idx;
    size_t cap; /* power of two */
    uint32_t cur;
    LABEL_T *distinct; /* labels in first-seen order, then sorted */
    size_t n, dcap;
} FN(labelset);

static inline size_t FN(slot)(const FN(labelset) *s, LABEL_T v) {
    const size_t mask = s->cap - 1;
    size_t i = (size_t)(((uint64_t)v * 0x9E3779B97F4A7C15ull) >> 40) & mask;
    while (s->stamp[i] == s->cur && s->keys[i] != v) i = (i + 1) & mask;
    return i;
}

static int FN(set_alloc)(FN(labelset) *s, size_t cap) {
    s->keys = malloc(cap * sizeof(LABEL_T));
    s->stamp = calloc(cap, sizeof(uint32_t));
    s->idx = malloc(cap * sizeof(uint32_t));
    s->cap = cap;
    return s->keys && s->stamp && s->idx;
}

static void FN(set_free)(FN(labelset) *s) {
    free(s->keys);
    free(s->stamp);
    free(s->idx);
    free(s->distinct);
}

static int FN(set_init)(FN(labelset) *s) {
    memset(s, 0, sizeof(*s));
    s->dcap = 64;
    s->distinct = malloc(s->dcap * sizeof(LABEL_T));
    return FN(set_alloc)(s, 256) && s->distinct;
}

static void FN(set_begin_block)(FN(labelset) *s) {
    if (++s->cur == 0) { /* stamps wrapped: forget everything */
        memset(s->stamp, 0, s->cap * sizeof(uint32_t));
        s->cur = 1;
    }
    s->n = 0;
}

/* Double the table, re-inserting the current block's labels. */
static int FN(set_grow)(FN(labelset) *s) {
    FN(labelset) t = *s;
    if (!FN(set_alloc)(&t, s->cap * 2)) {
        free(t.keys);
        free(t.stamp);
        free(t.idx);
        return 0;
    }
    free(s->keys);
    free(s->stamp);
    free(s->idx);
    *s = t;
    for (size_t i = 0; i < s->n; ++i) {
        const size_t j = FN(slot)(s, s->distinct[i]);
        s->stamp[j] = s->cur;
        s->keys[j] = s->distinct[i];
    }
    return 1;
}

static int FN(set_add)(FN(labelset) *s, LABEL_T v) {
    const size_t i = FN(slot)(s, v);
    if (s->stamp[i] == s->cur) return 1;
    s->stamp[i] = s->cur;
    s->keys[i] = v;
    if (s->n == s->dcap) {
        LABEL_T *d = realloc(s->distinct, 2 * s->dcap * sizeof(LABEL_T));
        if (!d) return 0;
        s->distinct = d;
        s->dcap *= 2;
    }
    s->distinct[s->n++] = v;
    return 2 * s->n <= s->cap || FN(set_grow)(s);
}

/* Whether the n contiguous labels at row all equal v (a loop without branches, which the
 * compiler vectorizes: most rows of a block hold one label). */
static inline int FN(row_is)(const LABEL_T *row, size_t n, LABEL_T v) {
    LABEL_T diff = 0;
    if (n == 8) /* the usual block width, unrolled */
        return ((row[0] ^ v) | (row[1] ^ v) | (row[2] ^ v) | (row[3] ^ v) | (row[4] ^ v) |
                (row[5] ^ v) | (row[6] ^ v) | (row[7] ^ v)) == 0;
    for (size_t x = 0; x < n; ++x) diff |= row[x] ^ v;
    return diff == 0;
}

/* The first label of block blk of the input, and the block's extent in a (clipped at the
 * input's edge). */
static inline const LABEL_T *FN(block_at)(const LABEL_T *in, const ptrdiff_t st[3],
                                          const geometry *g, const size_t blk[3], size_t a[3]) {
    for (int d = 0; d < 3; ++d) {
        const size_t pos = blk[d] * g->bs[d];
        a[d] = min_size(g->bs[d], g->shape[d] - pos);
        in += (ptrdiff_t)pos * st[d];
    }
    return in;
}

/* Prefetch the rows of the block `ahead` blocks after blk (x fastest), x contiguous: each
 * of a block's rows lies in another page, too many streams for the hardware prefetcher. */
static inline void FN(prefetch_block)(const LABEL_T *in, const ptrdiff_t st[3], const geometry *g,
                                      const size_t blk[3], size_t ahead) {
    size_t b[3] = {blk[0] + ahead, blk[1], blk[2]};
    for (int d = 0; d < 2; ++d) {
        b[d + 1] += b[d] / g->grid[d];
        b[d] %= g->grid[d];
    }
    if (b[2] >= g->grid[2]) return;
    size_t n[3];
    const LABEL_T *origin = FN(block_at)(in, st, g, b, n);
    const size_t row_bytes = n[0] * sizeof(LABEL_T);
    for (size_t z = 0; z < n[2]; ++z)
        for (size_t y = 0; y < n[1]; ++y) {
            const char *row = (const char *)(origin + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2]);
            __builtin_prefetch(row);
            __builtin_prefetch(row + row_bytes - 1);
        }
}

/* In-place ascending sort: quicksort on median of three, insertion sort for short runs. */
static void FN(sort)(LABEL_T *v, size_t n) {
    while (n > 16) {
        LABEL_T a = v[0], b = v[n / 2], c = v[n - 1];
        LABEL_T pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        size_t i = 0, j = n - 1;
        for (;;) {
            while (v[i] < pivot) ++i;
            while (pivot < v[j]) --j;
            if (i >= j) break;
            LABEL_T t = v[i];
            v[i] = v[j];
            v[j] = t;
            ++i;
            --j;
        }
        /* [0, j] <= pivot <= [j + 1, n): recurse into the smaller half */
        if (j + 1 < n - j - 1) {
            FN(sort)(v, j + 1);
            v += j + 1;
            n -= j + 1;
        } else {
            FN(sort)(v + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (size_t i = 1; i < n; ++i) {
        LABEL_T t = v[i];
        size_t j = i;
        while (j > 0 && t < v[j - 1]) {
            v[j] = v[j - 1];
            --j;
        }
        v[j] = t;
    }
}

/* Append one channel to b (its block headers, then each block's encoded values
 * and, unless an equal one exists, its table). */
static int FN(encode_channel)(const LABEL_T *in, const ptrdiff_t st[3], const geometry *g, obuf *b,
                              tcache *cache, size_t channel, sv_cseg_error *err) {
    const size_t wpl = sizeof(LABEL_T) / 4;
    const size_t base = b->len;
    if (g->nblocks > (SIZE_MAX - b->len) / 8 || !obuf_reserve(b, 8 * g->nblocks)) return SV_ERR_NOMEM;
    memset(b->p + base, 0, 8 * g->nblocks);
    b->len += 8 * g->nblocks;

    FN(labelset) s;
    int rc = SV_OK;
    const int contiguous_x = st[0] == 1;
    if (!FN(set_init)(&s)) {
        rc = SV_ERR_NOMEM;
        goto done;
    }
    size_t blk[3];
    for (blk[2] = 0; blk[2] < g->grid[2]; ++blk[2])
        for (blk[1] = 0; blk[1] < g->grid[1]; ++blk[1])
            for (blk[0] = 0; blk[0] < g->grid[0]; ++blk[0]) {
                size_t a[3];
                const LABEL_T *bin = FN(block_at)(in, st, g, blk, a);
                if (contiguous_x) FN(prefetch_block)(in, st, g, blk, 2);
                /* pass 1: distinct labels */
                FN(set_begin_block)(&s);
                LABEL_T prev = bin[0];
                if (!FN(set_add)(&s, prev)) {
                    rc = SV_ERR_NOMEM;
                    goto done;
                }
                for (size_t z = 0; z < a[2]; ++z)
                    for (size_t y = 0; y < a[1]; ++y) {
                        const LABEL_T *src = bin + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2];
                        if (contiguous_x && FN(row_is)(src, a[0], src[0])) {
                            if (src[0] != prev) {
                                prev = src[0];
                                if (!FN(set_add)(&s, prev)) {
                                    rc = SV_ERR_NOMEM;
                                    goto done;
                                }
                            }
                            continue;
                        }
                        for (size_t x = 0; x < a[0]; ++x) {
                            const LABEL_T v = src[(ptrdiff_t)x * st[0]];
                            if (v == prev) continue;
                            prev = v;
                            if (!FN(set_add)(&s, v)) {
                                rc = SV_ERR_NOMEM;
                                goto done;
                            }
                        }
                    }
                FN(sort)(s.distinct, s.n);
                for (size_t i = 0; i < s.n; ++i) s.idx[FN(slot)(&s, s.distinct[i])] = (uint32_t)i;

                uint32_t bits = 0;
                if (s.n > 1) {
                    bits = 1;
                    while (((uint64_t)1 << bits) < s.n) bits *= 2;
                }
                const size_t enc_words = (size_t)((bits * g->bvol + 31) / 32);
                const size_t tab_words = s.n * wpl;
                if (!obuf_reserve(b, 4 * (enc_words + tab_words))) {
                    rc = SV_ERR_NOMEM;
                    goto done;
                }
                const uint64_t voff = (b->len - base) / 4;
                uint8_t *enc = b->p + b->len;
                memset(enc, 0, 4 * enc_words);

                /* pass 2: packed table indices, word by word (positions only increase) */
                if (bits) {
                    uint64_t cw = 0;
                    uint32_t acc = 0, pidx = s.idx[FN(slot)(&s, bin[0])];
                    prev = bin[0];
                    /* a row of one label packs as pidx * rep when its bits fit in one word */
                    uint64_t rep = 0;
                    if (contiguous_x && bits * a[0] <= 32)
                        for (size_t x = 0; x < a[0]; ++x) rep |= (uint64_t)1 << (x * bits);
                    for (size_t z = 0; z < a[2]; ++z)
                        for (size_t y = 0; y < a[1]; ++y) {
                            const LABEL_T *src = bin + (ptrdiff_t)y * st[1] + (ptrdiff_t)z * st[2];
                            const uint64_t row = (uint64_t)bits * (g->bs[0] * (y + g->bs[1] * z));
                            if (rep && (row & 31) + bits * a[0] <= 32 && FN(row_is)(src, a[0], src[0])) {
                                if (src[0] != prev) {
                                    prev = src[0];
                                    pidx = s.idx[FN(slot)(&s, prev)];
                                }
                                if ((row >> 5) != cw) {
                                    st32(enc + 4 * cw, acc);
                                    cw = row >> 5;
                                    acc = 0;
                                }
                                acc |= (uint32_t)((pidx * rep) << (row & 31));
                                continue;
                            }
                            for (size_t x = 0; x < a[0]; ++x) {
                                const LABEL_T v = src[(ptrdiff_t)x * st[0]];
                                if (v != prev) {
                                    prev = v;
                                    pidx = s.idx[FN(slot)(&s, v)];
                                }
                                const uint64_t p = row + (uint64_t)bits * x;
                                if ((p >> 5) != cw) {
                                    st32(enc + 4 * cw, acc);
                                    cw = p >> 5;
                                    acc = 0;
                                }
                                acc |= pidx << (p & 31);
                            }
                        }
                    st32(enc + 4 * cw, acc);
                }

                /* the table: written after the values, kept only if not seen before */
                uint8_t *cand = enc + 4 * enc_words;
                for (size_t i = 0; i < s.n; ++i) ST_LABEL(cand + sizeof(LABEL_T) * i, s.distinct[i]);
                const uint64_t h = hash_words(cand, tab_words);
                const int64_t found = tcache_find(cache, b->p + base, cand, tab_words, h);
                uint64_t toff;
                if (found >= 0) {
                    toff = (uint64_t)found;
                    b->len += 4 * enc_words;
                } else {
                    toff = voff + enc_words;
                    b->len += 4 * (enc_words + tab_words);
                }
                if (toff > 0xFFFFFFu) {
                    set_error(err, SV_CSEG_TABLE_OFFSET_24, channel, blk, toff, 0xFFFFFFu);
                    rc = SV_ERR_OVERFLOW;
                    goto done;
                }
                if (voff > UINT32_MAX) {
                    set_error(err, SV_CSEG_VALUES_OFFSET_32, channel, blk, voff, UINT32_MAX);
                    rc = SV_ERR_OVERFLOW;
                    goto done;
                }
                if (found < 0 && !tcache_insert(cache, h, (uint32_t)toff, tab_words)) {
                    rc = SV_ERR_NOMEM;
                    goto done;
                }
                uint8_t *hdr = b->p + base + 8 * (blk[0] + g->grid[0] * (blk[1] + g->grid[1] * blk[2]));
                st32(hdr, (uint32_t)toff | (bits << 24));
                st32(hdr + 4, (uint32_t)voff);
            }
done:
    FN(set_free)(&s);
    return rc;
}

#undef FN
#undef SV_CAT
#undef SV_CAT_
#undef SV_FORCE_INLINE

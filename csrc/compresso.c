#include "compresso.h"

#include <stdlib.h>
#include <string.h>

/* ---- explicit little-endian access (any alignment, any host) ---------------------------- */

static inline uint64_t ld_le(const uint8_t *p, size_t w) {
    uint64_t v = 0;
    for (size_t i = w; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SV_CPSO_NATIVE_LE 0
#else
#define SV_CPSO_NATIVE_LE 1
#endif

static void set_error(sv_cpso_error *err, int reason, uint64_t value, uint64_t limit) {
    err->reason = reason;
    err->value = value;
    err->limit = limit;
}

static void set_voxel_error(sv_cpso_error *err, int reason, uint64_t value, uint64_t limit,
                            size_t x, size_t y, size_t z) {
    set_error(err, reason, value, limit);
    err->voxel[0] = x;
    err->voxel[1] = y;
    err->voxel[2] = z;
}

/* Largest chunk: compresso stores each axis in 16 bits; components are numbered in 32. */
#define MAX_AXIS 65535u
#define MAX_VOXELS ((uint64_t)1 << 31)

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

size_t sv_cpso_scratch_bytes(const size_t shape[3]) {
    uint64_t voxels = 1;
    for (int d = 0; d < 3; d++) {
        if (shape[d] == 0 || shape[d] > MAX_AXIS) return 0;
        voxels *= shape[d];
    }
    if (voxels > MAX_VOXELS) return 0;
    /* boundary flags, component numbers, union-find parents (at most ceil(voxels / 2)
     * provisional labels: no two of their first voxels are neighbours) */
    return align8((size_t)voxels) + align8(4 * (size_t)voxels) + 4 * ((size_t)voxels / 2 + 2);
}

/* ---- union-find over provisional labels; a set's root is its smallest label ------------- */

static inline uint32_t uf_find(uint32_t *parent, uint32_t a) {
    while (parent[a] != a) {
        parent[a] = parent[parent[a]];
        a = parent[a];
    }
    return a;
}

static inline void uf_union(uint32_t *parent, uint32_t a, uint32_t b) {
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a < b)
        parent[b] = a;
    else if (b < a)
        parent[a] = b;
}

/* Label the connected components of the non-boundary voxels of `nz` slices starting at
 * `bnd` / `comp` (6-connected across the slices if `conn6`, else nz is 1): comp gets
 * provisional labels (0 on boundary voxels) and parent[p] the final number of provisional
 * label p, counting from `first` in the order of the components' first voxels.  Returns
 * the number of components. */
static uint64_t label_components(const uint8_t *bnd, uint32_t *comp, uint32_t *parent,
                                 size_t sx, size_t sy, size_t nz, int conn6, uint32_t first) {
    const size_t sxy = sx * sy;
    uint32_t next = 0;
    size_t loc = 0;
    for (size_t z = 0; z < nz; z++) {
        for (size_t y = 0; y < sy; y++) {
            for (size_t x = 0; x < sx; x++, loc++) {
                if (bnd[loc]) {
                    comp[loc] = 0;
                    continue;
                }
                uint32_t c = 0;
                const int left = x > 0 && !bnd[loc - 1];
                if (left) c = comp[loc - 1];
                if (y > 0 && !bnd[loc - sx]) {
                    if (!c)
                        c = comp[loc - sx];
                    else if (bnd[loc - sx - 1]) /* (else joined through the -x-y voxel) */
                        uf_union(parent, c, comp[loc - sx]);
                }
                if (conn6 && z > 0 && !bnd[loc - sxy]) {
                    if (c)
                        uf_union(parent, c, comp[loc - sxy]);
                    else
                        c = comp[loc - sxy];
                }
                if (!c) {
                    c = ++next;
                    parent[c] = c;
                }
                comp[loc] = c;
            }
        }
    }
    /* final numbers: a root (the smallest label of its set) gets the next number when it
     * is met, every other label its root's (met before it) */
    for (uint32_t i = 1; i <= next; i++) parent[i] = uf_find(parent, i);
    uint32_t count = 0;
    for (uint32_t i = 1; i <= next; i++) /* (parent[i] < i: already renumbered) */
        parent[i] = parent[i] == i ? first + count++ : parent[parent[i]];
    return count;
}

/* ---- the label passes, one copy per label width ----------------------------------------- */

typedef struct {
    size_t sx, sy, sz;
    const uint8_t *bnd;
    uint32_t *comp;
    const uint8_t *ids;       /* the ids section */
    const uint8_t *locations; /* the locations section */
    uint64_t location_size;
    int conn6;
    ptrdiff_t s[3]; /* output strides, items */
} passes;

#define DEFINE_PASSES(T, W)                                                                    \
    static inline T ld_##W(const uint8_t *p) {                                                 \
        T v;                                                                                   \
        if (SV_CPSO_NATIVE_LE) {                                                               \
            memcpy(&v, p, W);                                                                  \
        } else {                                                                               \
            v = (T)ld_le(p, W);                                                                \
        }                                                                                      \
        return v;                                                                              \
    }                                                                                          \
    /* slices [z0, z1): voxel labels from their components (final numbers in `number`) */  \
    static void fill_##W(const passes *P, T *out, size_t z0, size_t z1,                        \
                         const uint32_t *number) {                                             \
        const size_t sx = P->sx, sy = P->sy;                                                   \
        const ptrdiff_t s0 = P->s[0], s1 = P->s[1], s2 = P->s[2];                              \
        size_t loc = z0 * sx * sy;                                                             \
        for (size_t z = z0; z < z1; z++)                                                       \
            for (size_t y = 0; y < sy; y++) {                                                  \
                T *row = out + (ptrdiff_t)y * s1 + (ptrdiff_t)z * s2;                          \
                for (size_t x = 0; x < sx; x++, loc++) {                                       \
                    const uint32_t c = P->comp[loc];                                           \
                    row[(ptrdiff_t)x * s0] =                                                   \
                        c ? ld_##W(P->ids + (size_t)(number[c] - 1) * W) : 0;                  \
                }                                                                              \
            }                                                                                  \
    }                                                                                          \
    /* boundary voxels, in raster order (they read labels set before them) */                  \
    static int fill_boundaries_##W(const passes *P, T *out, sv_cpso_error *err) {              \
        const size_t sx = P->sx, sy = P->sy, sz = P->sz, sxy = sx * sy;                        \
        const ptrdiff_t s0 = P->s[0], s1 = P->s[1], s2 = P->s[2];                              \
        uint64_t index = 0;                                                                    \
        const uint64_t nloc = P->location_size;                                                \
        size_t loc = 0;                                                                        \
        for (size_t z = 0; z < sz; z++)                                                        \
            for (size_t y = 0; y < sy; y++)                                                    \
                for (size_t x = 0; x < sx; x++, loc++) {                                       \
                    if (!P->bnd[loc]) continue;                                                \
                    T *v = out + (ptrdiff_t)x * s0 + (ptrdiff_t)y * s1 + (ptrdiff_t)z * s2;    \
                    if (x > 0 && !P->bnd[loc - 1]) {                                           \
                        *v = v[-s0];                                                           \
                        continue;                                                              \
                    }                                                                          \
                    if (y > 0 && !P->bnd[loc - sx]) {                                          \
                        *v = v[-s1];                                                           \
                        continue;                                                              \
                    }                                                                          \
                    if (P->conn6 && z > 0 && !P->bnd[loc - sxy]) {                             \
                        *v = v[-s2];                                                           \
                        continue;                                                              \
                    }                                                                          \
                    if (index >= nloc) {                                                       \
                        set_voxel_error(err, SV_CPSO_LOCATIONS_SHORT, index, nloc, x, y, z);   \
                        return SV_ERR_TRUNCATED;                                               \
                    }                                                                          \
                    const T code = ld_##W(P->locations + index * W);                           \
                    int ok = 1;                                                                \
                    switch (code) {                                                            \
                    case 0: ok = x > 0; if (ok) *v = v[-s0]; break;                            \
                    case 1: ok = x + 1 < sx; if (ok) *v = v[s0]; break;                        \
                    case 2: ok = y > 0; if (ok) *v = v[-s1]; break;                            \
                    case 3: ok = y + 1 < sy; if (ok) *v = v[s1]; break;                        \
                    case 4: ok = z > 0; if (ok) *v = v[-s2]; break;                            \
                    case 5: ok = z + 1 < sz; if (ok) *v = v[s2]; break;                        \
                    case 6:                                                                    \
                        if (index + 1 >= nloc) {                                               \
                            set_voxel_error(err, SV_CPSO_LOCATIONS_SHORT, index + 1, nloc, x,  \
                                            y, z);                                             \
                            return SV_ERR_TRUNCATED;                                           \
                        }                                                                      \
                        *v = ld_##W(P->locations + ++index * W);                               \
                        break;                                                                 \
                    default: *v = (T)(code - 7); break;                                        \
                    }                                                                          \
                    if (!ok) {                                                                 \
                        set_voxel_error(err, SV_CPSO_LOCATION_NEIGHBOUR, code, 0, x, y, z);    \
                        return SV_ERR_CORRUPT;                                                 \
                    }                                                                          \
                    index++;                                                                   \
                }                                                                              \
        if (index != nloc) {                                                                   \
            set_error(err, SV_CPSO_LOCATIONS_LEFT, index, nloc);                               \
            return SV_ERR_CORRUPT;                                                             \
        }                                                                                      \
        return SV_OK;                                                                          \
    }

DEFINE_PASSES(uint8_t, 1)
DEFINE_PASSES(uint16_t, 2)
DEFINE_PASSES(uint32_t, 4)
DEFINE_PASSES(uint64_t, 8)

/* ---- the decoder -------------------------------------------------------------------------- */

static size_t index_width(size_t sx, size_t sy) {
    const uint64_t worst = 2 * (uint64_t)sx * sy;
    return worst < 0xFFu ? 1 : worst < 0xFFFFu ? 2 : worst < 0xFFFFFFFFu ? 4 : 8;
}

/* Add `count` items of `width` bytes to `*need`; 0 if that passes `len`. */
static int add_section(uint64_t *need, uint64_t count, uint64_t width, size_t len) {
    if (width && count > (len - *need) / width) return 0;
    *need += count * width;
    return 1;
}

int sv_cpso_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[3],
                   void *out, const ptrdiff_t out_strides[3], void *scratch, size_t scratch_len,
                   sv_cpso_error *err) {
    memset(err, 0, sizeof *err);
    const size_t need_scratch = sv_cpso_scratch_bytes(shape);
    if ((label_bytes != 1 && label_bytes != 2 && label_bytes != 4 && label_bytes != 8) ||
        need_scratch == 0 || scratch_len < need_scratch)
        return SV_ERR_ARGUMENT;
    if (len < SV_CPSO_HEADER_BYTES) {
        set_error(err, SV_CPSO_SHORT, len, SV_CPSO_HEADER_BYTES);
        return SV_ERR_TRUNCATED;
    }
    if (memcmp(data, "cpso", 4) != 0) {
        set_error(err, SV_CPSO_MAGIC, 0, 0);
        return SV_ERR_CORRUPT;
    }
    const unsigned version = data[4], width = data[5];
    if (version > 1) {
        set_error(err, SV_CPSO_VERSION, version, 1);
        return SV_ERR_CORRUPT;
    }
    if (width != label_bytes) {
        set_error(err, SV_CPSO_WIDTH, width, label_bytes);
        return SV_ERR_CORRUPT;
    }
    const size_t dims[3] = {(size_t)ld_le(data + 6, 2), (size_t)ld_le(data + 8, 2),
                            (size_t)ld_le(data + 10, 2)};
    for (int d = 0; d < 3; d++) {
        if (dims[d] != shape[d]) {
            set_error(err, SV_CPSO_SHAPE, (uint64_t)d, dims[d]);
            return SV_ERR_CORRUPT;
        }
    }
    const size_t xs = data[12], ys = data[13], zs = data[14];
    const size_t window_bits = xs * ys * zs;
    if (window_bits == 0 || window_bits > 64) {
        set_error(err, SV_CPSO_STEPS, window_bits, 64);
        return SV_ERR_CORRUPT;
    }
    const size_t ww = window_bits <= 8 ? 1 : window_bits <= 16 ? 2 : window_bits <= 32 ? 4 : 8;
    const uint64_t id_size = ld_le(data + 15, 8), value_size = ld_le(data + 23, 4),
                   location_size = ld_le(data + 27, 8);
    const unsigned connectivity = data[35];
    if (connectivity != 4 && connectivity != 6) {
        set_error(err, SV_CPSO_CONNECTIVITY, connectivity, 0);
        return SV_ERR_CORRUPT;
    }

    const size_t sx = shape[0], sy = shape[1], sz = shape[2], sxy = sx * sy;
    const size_t voxels = sxy * sz;
    const size_t iw = version == 1 ? index_width(sx, sy) : 0;
    uint64_t need = SV_CPSO_HEADER_BYTES;
    const uint64_t ids_at = need;
    int fits = add_section(&need, id_size, label_bytes, len);
    const uint64_t values_at = need;
    fits = fits && add_section(&need, value_size, ww, len);
    const uint64_t locations_at = need;
    fits = fits && add_section(&need, location_size, label_bytes, len);
    const uint64_t windows_at = need;
    fits = fits && add_section(&need, 2 * (uint64_t)sz, iw, len);
    if (!fits) {
        set_error(err, SV_CPSO_SECTIONS, need, len);
        return SV_ERR_TRUNCATED;
    }
    const uint64_t window_bytes = len - need;
    if (window_bytes % ww) {
        set_error(err, SV_CPSO_WINDOW_BYTES, window_bytes, ww);
        return SV_ERR_CORRUPT;
    }
    /* version 1: locations per slice, difference coded, after the components per slice;
     * the whole chunk's locations start at the first slice's entry */
    if (iw && ld_le(data + windows_at + window_bytes + sz * iw, iw) != 0) {
        set_error(err, SV_CPSO_Z_INDEX, ld_le(data + windows_at + window_bytes + sz * iw, iw), 0);
        return SV_ERR_CORRUPT;
    }

    /* the boundary mask of every block, from the run-length coded windows (blocks no
     * window sets hold window 0) */
    if (value_size == 0) {
        set_error(err, SV_CPSO_WINDOW_VALUE, 0, 0);
        return SV_ERR_CORRUPT;
    }
    const size_t nx = (sx + xs - 1) / xs, ny = (sy + ys - 1) / ys, nz = (sz + zs - 1) / zs;
    const size_t nblocks = nx * ny * nz;
    uint64_t *masks = malloc(nblocks * sizeof *masks);
    if (!masks) return SV_ERR_NOMEM;
    const uint64_t first = ld_le(data + values_at, ww);
    for (size_t b = 0; b < nblocks; b++) masks[b] = first;
    const uint64_t nwindows = window_bytes / ww;
    uint64_t block = 0;
    for (uint64_t i = 0; i < nwindows; i++) {
        const uint64_t w = ld_le(data + windows_at + i * ww, ww);
        if (w & 1) { /* (a skip past the end is an error only if a window follows) */
            const uint64_t skip = w >> 1;
            block = block > nblocks || skip > nblocks - block ? nblocks + 1 : block + skip;
            continue;
        }
        if (block >= nblocks || (w >> 1) >= value_size) {
            free(masks);
            if (block >= nblocks)
                set_error(err, SV_CPSO_WINDOW_RUN, block, nblocks);
            else
                set_error(err, SV_CPSO_WINDOW_VALUE, w >> 1, value_size);
            return SV_ERR_CORRUPT;
        }
        masks[block++] = ld_le(data + values_at + (w >> 1) * ww, ww);
    }

    uint8_t *bnd = scratch;
    uint32_t *comp = (uint32_t *)((uint8_t *)scratch + align8(voxels));
    uint32_t *parent = (uint32_t *)((uint8_t *)comp + align8(4 * voxels));
    size_t loc = 0;
    for (size_t z = 0; z < sz; z++) {
        const size_t zb = nx * ny * (z / zs), zo = xs * ys * (z % zs);
        for (size_t y = 0; y < sy; y++) {
            const uint64_t *row = masks + zb + nx * (y / ys);
            const size_t yo = zo + xs * (y % ys);
            for (size_t x0 = 0; x0 < sx; x0 += xs) {
                const uint64_t bits = *row++ >> yo;
                const size_t n = sx - x0 < xs ? sx - x0 : xs;
                for (size_t i = 0; i < n; i++) bnd[loc++] = (uint8_t)((bits >> i) & 1);
            }
        }
    }
    free(masks);

    /* components, numbered from 1 (slice after slice for 4-connectivity), and their
     * voxels' labels */
    const passes P = {sx, sy, sz, bnd, comp, data + ids_at, data + locations_at, location_size,
                      connectivity == 6, {out_strides[0], out_strides[1], out_strides[2]}};
    const size_t groups = connectivity == 6 ? 1 : sz, depth = sz / groups;
    uint64_t ncomp = 0;
    for (size_t g = 0; g < groups; g++) {
        const size_t z0 = g * depth;
        ncomp += label_components(bnd + z0 * sxy, comp + z0 * sxy, parent, sx, sy, depth,
                                  connectivity == 6, (uint32_t)(ncomp + 1));
        if (ncomp > id_size) {
            set_error(err, SV_CPSO_COMPONENTS, ncomp, id_size);
            return SV_ERR_CORRUPT;
        }
        switch (label_bytes) {
        case 1: fill_1(&P, out, z0, z0 + depth, parent); break;
        case 2: fill_2(&P, out, z0, z0 + depth, parent); break;
        case 4: fill_4(&P, out, z0, z0 + depth, parent); break;
        default: fill_8(&P, out, z0, z0 + depth, parent); break;
        }
    }
    switch (label_bytes) {
    case 1: return fill_boundaries_1(&P, out, err);
    case 2: return fill_boundaries_2(&P, out, err);
    case 4: return fill_boundaries_4(&P, out, err);
    default: return fill_boundaries_8(&P, out, err);
    }
}

/* ---- the encoder -------------------------------------------------------------------------- */

void sv_cpso_free(void *p) { free(p); }

static void st_le(uint8_t *p, uint64_t v, size_t w) {
    for (size_t i = 0; i < w; i++, v >>= 8) p[i] = (uint8_t)v;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The labels as uint64 in x-fastest order (any strides, any width). */
#define DEFINE_GATHER(T, W)                                                                    \
    static void gather_##W(const void *in, const size_t shape[3], const ptrdiff_t s[3],       \
                           uint64_t *dst) {                                                    \
        const T *base = in;                                                                    \
        for (size_t z = 0; z < shape[2]; z++)                                                  \
            for (size_t y = 0; y < shape[1]; y++) {                                            \
                const T *row = base + (ptrdiff_t)y * s[1] + (ptrdiff_t)z * s[2];               \
                for (size_t x = 0; x < shape[0]; x++) *dst++ = row[(ptrdiff_t)x * s[0]];       \
            }                                                                                  \
    }
DEFINE_GATHER(uint8_t, 1)
DEFINE_GATHER(uint16_t, 2)
DEFINE_GATHER(uint32_t, 4)
DEFINE_GATHER(uint64_t, 8)

/* Window of every block (bit x%xs + xs*(y%ys) set for boundary voxels), steps (xs, ys, 1). */
static void block_windows(const uint8_t *bnd, size_t sx, size_t sy, size_t sz, size_t xs,
                          size_t ys, uint64_t *win) {
    const size_t nx = (sx + xs - 1) / xs, ny = (sy + ys - 1) / ys;
    memset(win, 0, nx * ny * sz * sizeof *win);
    size_t loc = 0;
    for (size_t z = 0; z < sz; z++)
        for (size_t y = 0; y < sy; y++) {
            uint64_t *row = win + nx * (y / ys) + nx * ny * z;
            const size_t yo = xs * (y % ys);
            for (size_t x = 0; x < sx; x++, loc++)
                if (bnd[loc]) row[x / xs] |= (uint64_t)1 << (yo + x % xs);
        }
}

int sv_cpso_encode(const void *in, size_t label_bytes, const size_t shape[3],
                   const ptrdiff_t in_strides[3], uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    const size_t need_scratch = sv_cpso_scratch_bytes(shape);
    if ((label_bytes != 1 && label_bytes != 2 && label_bytes != 4 && label_bytes != 8) ||
        need_scratch == 0)
        return SV_ERR_ARGUMENT;
    const size_t sx = shape[0], sy = shape[1], sz = shape[2], sxy = sx * sy, n = sxy * sz;
    const size_t W = label_bytes;
    const uint64_t top = W == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * W)) - 1;
    int rc = SV_ERR_NOMEM;
    uint64_t *lab = malloc(n * sizeof *lab);
    uint8_t *scratch = malloc(need_scratch);
    uint64_t *ids = NULL, *locs = NULL, *win = NULL, *values = NULL, *rle = NULL;
    uint32_t *table = NULL;
    uint64_t *zcomp = calloc(sz, sizeof *zcomp), *zloc = calloc(sz, sizeof *zloc);
    if (!lab || !scratch || !zcomp || !zloc) goto done;
    switch (W) {
    case 1: gather_1(in, shape, in_strides, lab); break;
    case 2: gather_2(in, shape, in_strides, lab); break;
    case 4: gather_4(in, shape, in_strides, lab); break;
    default: gather_8(in, shape, in_strides, lab); break;
    }
    /* boundaries: a label other than the +x or +y neighbour's */
    uint8_t *bnd = scratch;
    uint32_t *comp = (uint32_t *)(scratch + align8(n));
    uint32_t *parent = (uint32_t *)((uint8_t *)comp + align8(4 * n));
    for (size_t z = 0, i = 0; z < sz; z++)
        for (size_t y = 0; y < sy; y++)
            for (size_t x = 0; x < sx; x++, i++)
                bnd[i] = (uint8_t)((x + 1 < sx && lab[i] != lab[i + 1]) ||
                                   (y + 1 < sy && lab[i] != lab[i + sx]));
    /* components per slice; the id of each is its voxels' label */
    uint64_t ncomp = 0;
    for (size_t z = 0; z < sz; z++) {
        const uint64_t c = label_components(bnd + z * sxy, comp + z * sxy, parent, sx, sy, 1, 0,
                                            (uint32_t)(ncomp + 1));
        uint64_t *grown = realloc(ids, (ncomp + c + 1) * sizeof *ids);
        if (!grown) goto done;
        ids = grown;
        for (size_t i = z * sxy; i < (z + 1) * sxy; i++)
            if (comp[i]) ids[parent[comp[i]] - 1] = lab[i];
        zcomp[z] = c;
        ncomp += c;
    }
    /* locations of the boundary voxels no -x / -y neighbour labels */
    size_t nlocs = 0, cap = 1024;
    locs = malloc(cap * sizeof *locs);
    if (!locs) goto done;
    for (size_t z = 0, i = 0; z < sz; z++) {
        zloc[z] = nlocs;
        for (size_t y = 0; y < sy; y++)
            for (size_t x = 0; x < sx; x++, i++) {
                if (!bnd[i] || (x > 0 && !bnd[i - 1]) || (y > 0 && !bnd[i - sx])) continue;
                if (nlocs + 2 > cap) {
                    uint64_t *grown = realloc(locs, 2 * cap * sizeof *locs);
                    if (!grown) goto done;
                    locs = grown;
                    cap *= 2;
                }
                const uint64_t v = lab[i];
                if (x > 0 && !bnd[i - 1] && lab[i - 1] == v)
                    locs[nlocs++] = 0;
                else if (x + 1 < sx && !bnd[i + 1] && lab[i + 1] == v)
                    locs[nlocs++] = 1;
                else if (y > 0 && !bnd[i - sx] && lab[i - sx] == v)
                    locs[nlocs++] = 2;
                else if (y + 1 < sy && !bnd[i + sx] && lab[i + sx] == v)
                    locs[nlocs++] = 3;
                else if (v > top - 7) {
                    locs[nlocs++] = 6;
                    locs[nlocs++] = v;
                } else {
                    locs[nlocs++] = v + 7;
                }
            }
    }
    for (size_t z = sz - 1; z > 0; z--) zloc[z] -= zloc[z - 1]; /* difference coded */

    /* windows: 4 x 4 x 1 (2-byte windows), or 8 x 8 x 1 (8-byte) when their indexes do not
     * fit the run-length code */
    size_t xs = 4, ys = 4, ww = 2, nblocks = 0, nvalues = 0, nrle = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt) xs = ys = 8, ww = 8;
        const size_t nx = (sx + xs - 1) / xs, ny = (sy + ys - 1) / ys;
        nblocks = nx * ny * sz;
        free(win);
        free(values);
        win = malloc(nblocks * sizeof *win);
        values = malloc(nblocks * sizeof *values);
        if (!win || !values) goto done;
        block_windows(bnd, sx, sy, sz, xs, ys, win);
        nvalues = 0;
        if (ww == 2) { /* 16-bit windows: their sorted distinct values and indexes by table */
            free(table);
            table = calloc(65536, sizeof *table);
            if (!table) goto done;
            for (size_t i = 0; i < nblocks; i++) table[win[i]] = 1;
            for (uint32_t v = 0; v < 65536; v++)
                if (table[v]) {
                    table[v] = (uint32_t)nvalues;
                    values[nvalues++] = v;
                }
        } else {
            memcpy(values, win, nblocks * sizeof *values);
            qsort(values, nblocks, sizeof *values, cmp_u64);
            for (size_t i = 0; i < nblocks; i++)
                if (i == 0 || values[i] != values[nvalues - 1]) values[nvalues++] = values[i];
        }
        const uint64_t max_run = ww == 8 ? UINT64_MAX / 2 : 0xFFFFu / 2;
        if (nvalues - 1 > max_run) continue; /* (an index over max_run: 8 x 8 x 1) */
        free(rle);
        rle = malloc((nblocks + 1) * sizeof *rle);
        if (!rle) goto done;
        nrle = 0;
        uint64_t zeros = 0;
        for (size_t i = 0; i < nblocks; i++) {
            const uint64_t index =
                ww == 2 ? table[win[i]]
                        : (uint64_t)((const uint64_t *)bsearch(&win[i], values, nvalues,
                                                               sizeof *values, cmp_u64) -
                                     values);
            if (index == 0) {
                if (++zeros == max_run) {
                    rle[nrle++] = (zeros << 1) | 1;
                    zeros = 0;
                }
                continue;
            }
            if (zeros) {
                rle[nrle++] = (zeros << 1) | 1;
                zeros = 0;
            }
            rle[nrle++] = index << 1;
        }
        if (zeros) rle[nrle++] = (zeros << 1) | 1;
        break;
    }

    const size_t iw = index_width(sx, sy);
    const size_t len = SV_CPSO_HEADER_BYTES + W * (size_t)ncomp + ww * nvalues + W * nlocs +
                       ww * nrle + 2 * sz * iw;
    uint8_t *buf = malloc(len);
    if (!buf) goto done;
    memcpy(buf, "cpso", 4);
    buf[4] = 1;
    buf[5] = (uint8_t)W;
    st_le(buf + 6, sx, 2);
    st_le(buf + 8, sy, 2);
    st_le(buf + 10, sz, 2);
    buf[12] = (uint8_t)xs;
    buf[13] = (uint8_t)ys;
    buf[14] = 1;
    st_le(buf + 15, ncomp, 8);
    st_le(buf + 23, nvalues, 4);
    st_le(buf + 27, nlocs, 8);
    buf[35] = 4;
    uint8_t *p = buf + SV_CPSO_HEADER_BYTES;
    for (uint64_t i = 0; i < ncomp; i++, p += W) st_le(p, ids[i], W);
    for (size_t i = 0; i < nvalues; i++, p += ww) st_le(p, values[i], ww);
    for (size_t i = 0; i < nlocs; i++, p += W) st_le(p, locs[i], W);
    for (size_t i = 0; i < nrle; i++, p += ww) st_le(p, rle[i], ww);
    for (size_t z = 0; z < sz; z++, p += iw) st_le(p, zcomp[z], iw);
    for (size_t z = 0; z < sz; z++, p += iw) st_le(p, zloc[z], iw);
    *out = buf;
    *out_len = len;
    rc = SV_OK;
done:
    free(lab);
    free(scratch);
    free(ids);
    free(locs);
    free(win);
    free(values);
    free(rle);
    free(table);
    free(zcomp);
    free(zloc);
    return rc;
}

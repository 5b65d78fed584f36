#include "crackle_check.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SV_CRKL_SSE42 1
#else
#define SV_CRKL_SSE42 0
#endif

/* ---- CRC-32C (Castagnoli, reflected, initial and final value 0xFFFFFFFF) ---------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    if (crc_table[1]) return; /* (benign race: every thread writes the same values) */
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c_soft(uint32_t crc, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if SV_CRKL_SSE42
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                            size_t n) {
    uint64_t c = crc;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; i < n; i++) c32 = _mm_crc32_u8(c32, p[i]);
    return c32;
}
#endif

/* CRC-32C of the slice's component numbers as little-endian uint32s. */
static uint32_t crc32c_labels(const uint32_t *labels, size_t n) {
    const uint8_t *p = (const uint8_t *)labels;
    uint32_t crc = 0xFFFFFFFFu;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n; i++) {
        const uint32_t v = labels[i];
        const uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        crc = crc32c_soft(crc, b, 4);
    }
    (void)p;
#else
#if SV_CRKL_SSE42
    if (__builtin_cpu_supports("sse4.2")) return ~crc32c_hw(crc, p, 4 * n);
#endif
    crc = crc32c_soft(crc, p, 4 * n);
#endif
    return ~crc;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t ld_le(const uint8_t *p, size_t w) {
    uint64_t v = 0;
    for (size_t i = w; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

static size_t byte_width(uint64_t x) { /* crackle's compute_byte_width */
    return x <= 0xFFu ? 1 : x <= 0xFFFFu ? 2 : x <= 0xFFFFFFFFu ? 4 : 8;
}

typedef struct {
    uint64_t *nodes;
    size_t nodes_cap;
    uint8_t *symbols;
    size_t symbols_cap;
    uint64_t *stack;
    uint8_t *vcg;
    uint32_t *labels;
    uint32_t *ids;      /* union-find */
    uint32_t *renumber;
} work;

/* ---- the walk of one chain over the voxel connectivity graph ------------------------------ */

enum { MOVE_UP = 0, MOVE_RIGHT = 1, MOVE_DOWN = 2, MOVE_LEFT = 3, SYM_BRANCH = 4, SYM_TERM = 5 };

/* crackle's decode_(im)permissible_crack_code for one chain: the same arithmetic (64-bit,
 * wrapping), every edge written checked to lie in the slice.  0 if the walk leaves it. */
static int walk(work *w, uint64_t node, const uint8_t *sym, size_t nsym, uint64_t sx,
                uint64_t sy, int permissible) {
    const uint64_t sxe = sx + 1, pixels = (sx + 1) * (sy + 1), n = sx * sy;
    int64_t y = (int64_t)(node / sxe);
    int64_t x = (int64_t)(node - sxe * (uint64_t)y);
    uint64_t loc = (uint64_t)x + sx * (uint64_t)y;
    size_t depth = 0;
    uint8_t *e = w->vcg;
#define EDGE(i, set, clear)                              \
    do {                                                 \
        const uint64_t at_ = (i);                        \
        if (at_ >= n) return 0;                          \
        if (permissible)                                 \
            e[at_] |= (set);                             \
        else                                             \
            e[at_] &= (clear);                           \
    } while (0)
    for (size_t k = 0; k < nsym; k++) {
        if (loc >= pixels) return 0; /* (the package throws, and the exception is lost) */
        switch (sym[k]) {
        case MOVE_UP:
            if (x > 0 && y > 0) EDGE(loc - 1 - sx, 0x1, 0xE);
            if (y > 0) EDGE(loc - sx, 0x2, 0xD);
            y--;
            loc -= sx;
            break;
        case MOVE_DOWN:
            if (x > 0) EDGE(loc - 1, 0x1, 0xE);
            EDGE(loc, 0x2, 0xD);
            y++;
            loc += sx;
            break;
        case MOVE_LEFT:
            if (x > 0 && y > 0) EDGE(loc - 1 - sx, 0x4, 0xB);
            if (x > 0) EDGE(loc - 1, 0x8, 0x7);
            x--;
            loc--;
            break;
        case MOVE_RIGHT:
            if (y > 0) EDGE(loc - sx, 0x4, 0xB);
            EDGE(loc, 0x8, 0x7);
            x++;
            loc++;
            break;
        case SYM_BRANCH:
            w->stack[depth++] = loc;
            break;
        default: /* SYM_TERM */
            if (depth) {
                loc = w->stack[--depth];
                y = (int64_t)(loc / sx);
                x = (int64_t)(loc - sx * (uint64_t)y);
            }
            break;
        }
    }
#undef EDGE
    return 1;
}

/* ---- crackle's color_connectivity_graph (one slice), numbering included ------------------ */

static uint32_t uf_root(uint32_t *ids, uint32_t n) {
    uint32_t i = ids[n];
    while (i != ids[i]) {
        ids[i] = ids[ids[i]];
        i = ids[i];
    }
    return i;
}

static void uf_add(uint32_t *ids, uint32_t p) {
    if (ids[p] == 0) ids[p] = p;
}

static void uf_unify(uint32_t *ids, uint32_t p, uint32_t q) {
    if (p == q) return;
    uint32_t i = uf_root(ids, p), j = uf_root(ids, q);
    if (i == 0) {
        uf_add(ids, p);
        i = p;
    }
    if (j == 0) {
        uf_add(ids, q);
        j = q;
    }
    ids[i] = j;
}

static void components(work *w, size_t sx, size_t sy) {
    const uint8_t *vcg = w->vcg;
    uint32_t *out = w->labels, *ids = w->ids;
    const size_t n = sx * sy;
    memset(ids, 0, (n + 2) * sizeof *ids);
    uint32_t next = 1;
    uf_add(ids, next);
    for (size_t x = 0; x < sx; x++) {
        if (x > 0 && (vcg[x] & 0x2) == 0) uf_add(ids, ++next);
        out[x] = next;
    }
    for (size_t y = 1; y < sy; y++) {
        size_t loc = sx * y;
        const size_t end = loc + sx;
        int simple;
        if (vcg[loc] & 0x8) {
            out[loc] = out[loc - sx];
            simple = 1;
        } else {
            uf_add(ids, ++next);
            out[loc] = next;
            simple = 0;
        }
        for (loc++; loc < end; loc++) {
            const uint8_t v = vcg[loc];
            if (!simple) {
                if (v & 0x2) {
                    out[loc] = out[loc - 1];
                    if ((v & 0x8) & ~vcg[loc - 1]) {
                        uf_unify(ids, out[loc], out[loc - sx]);
                        simple = 1;
                    }
                } else if (v & 0x8) {
                    out[loc] = out[loc - sx];
                    simple = 1;
                } else {
                    uf_add(ids, ++next);
                    out[loc] = next;
                }
            } else if (v & 0x8) {
                out[loc] = out[loc - sx];
            } else if (v & 0x2) {
                out[loc] = out[loc - 1];
                simple = 0;
            } else {
                uf_add(ids, ++next);
                out[loc] = next;
                simple = 0;
            }
        }
    }
    uint32_t *renumber = w->renumber;
    memset(renumber, 0, (size_t)(next + 1) * sizeof *renumber);
    uint32_t count = 1;
    for (uint32_t i = 1; i <= next; i++) {
        const uint32_t r = uf_root(ids, i);
        if (renumber[r] == 0) {
            renumber[r] = count;
            renumber[i] = count++;
        } else {
            renumber[i] = renumber[r];
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = renumber[out[i]] - 1;
}

/* ---- one slice ---------------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 1;
    void *q = realloc(*p, need * item);
    if (!q) return 0;
    *p = q;
    *cap = need;
    return 1;
}

static int check_slice(work *w, const uint8_t *code, size_t size, size_t sx, size_t sy,
                       int permissible, sv_crkl_error *err) {
    const size_t n = sx * sy;
    memset(w->vcg, permissible ? 0 : 0xF, n);
    /* beginning-of-chain index: crackle's read_boc_index, kept inside the index */
    if (size < 4) {
        err->reason = SV_CRKL_INDEX;
        err->value = size;
        return SV_ERR_CORRUPT;
    }
    const uint64_t index_size = (uint32_t)(4 + ld_le(code, 4));
    const size_t xw = byte_width(sx + 1), yw = byte_width(sy + 1), sxe = sx + 1;
    if (index_size > size) {
        err->reason = SV_CRKL_INDEX;
        err->value = index_size;
        err->limit = size;
        return SV_ERR_CORRUPT;
    }
#define NEED(k)                                      \
    do {                                             \
        if ((k) > index_size - idx) {                \
            err->reason = SV_CRKL_INDEX;             \
            err->value = idx + (k);                  \
            err->limit = index_size;                 \
            return SV_ERR_CORRUPT;                   \
        }                                            \
    } while (0)
    size_t idx = 4, nnodes = 0;
    NEED(yw);
    const uint64_t num_y = ld_le(code + idx, yw);
    idx += yw;
    uint64_t y = 0;
    for (uint64_t yi = 0; yi < num_y; yi++) {
        NEED(yw + xw);
        y += ld_le(code + idx, yw);
        idx += yw;
        const uint64_t num_x = ld_le(code + idx, xw);
        idx += xw;
        NEED(num_x > (index_size - idx) / xw ? index_size : num_x * xw);
        if (!grow((void **)&w->nodes, &w->nodes_cap, nnodes + num_x, sizeof *w->nodes))
            return SV_ERR_NOMEM;
        uint64_t x = 0;
        for (uint64_t xi = 0; xi < num_x; xi++, idx += xw) {
            x += ld_le(code + idx, xw);
            w->nodes[nnodes++] = x + sxe * y;
        }
    }
#undef NEED
    /* the packed moves, chain by chain (crackle's packed_codepoints_to_symbols); each chain
     * is walked when complete, as the package walks the complete ones */
    const size_t nmoves = 4 * (size - index_size);
    if (!grow((void **)&w->symbols, &w->symbols_cap, nmoves + 1, 1)) return SV_ERR_NOMEM;
    w->stack = realloc(w->stack, (nmoves + 1) * sizeof *w->stack);
    if (!w->stack) return SV_ERR_NOMEM;
    uint8_t last = 0, last_move = 255;
    uint64_t branches = 0, node = 0;
    size_t node_i = 0, nsym = 0;
    for (size_t i = index_size; i < size; i++) {
        for (int j = 0; j < 4; j++) {
            if (branches == 0) {
                if (node_i >= nnodes) goto walked;
                node = w->nodes[node_i++];
                j--;
                branches = 1;
                continue;
            }
            const uint8_t move = (uint8_t)((((code[i] >> (2 * j)) & 3) + last) & 3);
            last = move;
            if ((move ^ last_move) != 2) {
                w->symbols[nsym++] = move;
                last_move = move;
                continue;
            }
            if (move == MOVE_UP || move == MOVE_LEFT) {
                w->symbols[nsym - 1] = SYM_TERM;
                branches--;
            } else {
                w->symbols[nsym - 1] = SYM_BRANCH;
                branches++;
            }
            last_move = 255;
            if (branches == 0) {
                if (!walk(w, node, w->symbols, nsym, sx, sy, permissible)) {
                    err->reason = SV_CRKL_WALK;
                    err->value = node;
                    return SV_ERR_CORRUPT;
                }
                nsym = 0;
            }
        }
    }
walked:
    components(w, sx, sy);
    return SV_OK;
}

/* ---- flat labels ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *uniq, *map; /* the labels; the label index of every component */
    uint64_t num_labels;
    size_t map_width;
    const uint8_t *counts;     /* components per slice */
    size_t count_width;
    uint64_t *slice_map;       /* a slice's component -> label */
} flat_layout;

static int flat_parse(const sv_crkl_flat *f, size_t sx, size_t sy, size_t sz, flat_layout *L,
                      sv_crkl_error *err) {
    const size_t len = f->labels_len, sw = f->stored_bytes;
    err->reason = SV_CRKL_LABELS;
    err->limit = len;
    if (len < 8) return SV_ERR_CORRUPT;
    L->num_labels = ld_le(f->labels, 8);
    if (L->num_labels > (len - 8) / sw) return SV_ERR_CORRUPT;
    L->uniq = f->labels + 8;
    L->count_width = byte_width((uint64_t)sx * sy);
    size_t at = 8 + sw * (size_t)L->num_labels;
    if (sz > (len - at) / L->count_width) return SV_ERR_CORRUPT;
    L->counts = f->labels + at;
    at += L->count_width * sz;
    L->map_width = byte_width(L->num_labels);
    uint64_t total = 0;
    for (size_t z = 0; z < sz; z++) total += ld_le(L->counts + z * L->count_width, L->count_width);
    if (total > (len - at) / L->map_width || at + total * L->map_width != len) {
        err->value = at + total * L->map_width;
        return SV_ERR_CORRUPT;
    }
    L->map = f->labels + at;
    err->reason = SV_CRKL_NO_ERROR;
    err->limit = 0;
    return SV_OK;
}

#define DEFINE_FILL(T, W)                                                                      \
    static void fill_##W(const sv_crkl_flat *f, const uint32_t *cc, const uint64_t *map,      \
                         size_t sx, size_t sy, size_t z) {                                     \
        T *base = (T *)f->out + (ptrdiff_t)z * f->strides[2];                                  \
        const ptrdiff_t s0 = f->strides[0], s1 = f->strides[1];                                \
        for (size_t y = 0; y < sy; y++) {                                                      \
            T *row = base + (ptrdiff_t)y * s1;                                                 \
            const uint32_t *c = cc + y * sx;                                                   \
            for (size_t x = 0; x < sx; x++) row[(ptrdiff_t)x * s0] = (T)map[c[x]];             \
        }                                                                                      \
    }
DEFINE_FILL(uint8_t, 1)
DEFINE_FILL(uint16_t, 2)
DEFINE_FILL(uint32_t, 4)
DEFINE_FILL(uint64_t, 8)

/* Slice z's labels (its components are checked): components -> label -> out. */
static int flat_slice(const sv_crkl_flat *f, flat_layout *L, const work *w, uint64_t *first,
                      size_t sx, size_t sy, size_t z, sv_crkl_error *err) {
    const size_t n = sx * sy;
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++)
        if (w->labels[i] > most) most = w->labels[i];
    const uint64_t count = ld_le(L->counts + z * L->count_width, L->count_width);
    if ((uint64_t)most + 1 != count) {
        err->reason = SV_CRKL_COMPONENTS;
        err->value = (uint64_t)most + 1;
        err->limit = count;
        return SV_ERR_CORRUPT;
    }
    for (uint64_t k = 0; k < count; k++) {
        const uint64_t index = ld_le(L->map + (*first + k) * L->map_width, L->map_width);
        if (index >= L->num_labels) {
            err->reason = SV_CRKL_LABEL_INDEX;
            err->value = index;
            err->limit = L->num_labels;
            return SV_ERR_CORRUPT;
        }
        L->slice_map[k] = ld_le(L->uniq + index * f->stored_bytes, f->stored_bytes);
    }
    *first += count;
    switch (f->label_bytes) {
    case 1: fill_1(f, w->labels, L->slice_map, sx, sy, z); break;
    case 2: fill_2(f, w->labels, L->slice_map, sx, sy, z); break;
    case 4: fill_4(f, w->labels, L->slice_map, sx, sy, z); break;
    default: fill_8(f, w->labels, L->slice_map, sx, sy, z); break;
    }
    return SV_OK;
}

int sv_crkl_check(const uint8_t *codes, const uint8_t *sizes, const uint8_t *crcs, size_t sx,
                  size_t sy, size_t sz, int permissible, const sv_crkl_flat *flat,
                  sv_crkl_error *err) {
    memset(err, 0, sizeof *err);
    if (sx == 0 || sy == 0 || sx > 65534 || sy > 65534) return SV_ERR_ARGUMENT;
    crc_init();
    const size_t n = sx * sy;
    work w = {0};
    w.vcg = malloc(n);
    w.labels = malloc(n * sizeof *w.labels);
    w.ids = malloc((n + 2) * sizeof *w.ids);
    w.renumber = malloc((n + 2) * sizeof *w.renumber);
    int rc = w.vcg && w.labels && w.ids && w.renumber ? SV_OK : SV_ERR_NOMEM;
    flat_layout L = {0};
    uint64_t first = 0;
    if (rc == SV_OK && flat) {
        if (flat->label_bytes < flat->stored_bytes || !flat->out) rc = SV_ERR_ARGUMENT;
        if (rc == SV_OK) rc = flat_parse(flat, sx, sy, sz, &L, err);
        if (rc == SV_OK && !(L.slice_map = malloc(n * sizeof *L.slice_map))) rc = SV_ERR_NOMEM;
    }
    const uint8_t *code = codes;
    for (size_t z = 0; z < sz && rc == SV_OK; z++) {
        const size_t size = (size_t)ld_le(sizes + 4 * z, 4);
        rc = check_slice(&w, code, size, sx, sy, permissible, err);
        if (rc == SV_OK && crc32c_labels(w.labels, n) != (uint32_t)ld_le(crcs + 4 * z, 4)) {
            err->reason = SV_CRKL_CRC;
            rc = SV_ERR_CORRUPT;
        }
        if (rc == SV_OK && flat) rc = flat_slice(flat, &L, &w, &first, sx, sy, z, err);
        if (rc != SV_OK) err->z = z;
        code += size;
    }
    free(L.slice_map);
    free(w.vcg);
    free(w.labels);
    free(w.ids);
    free(w.renumber);
    free(w.nodes);
    free(w.symbols);
    free(w.stack);
    return rc;
}

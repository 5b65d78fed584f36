/* A check of the crack codes of a crackle stream (format version 1, no Markov model) before
 * crackle-codec decodes it.
 *
 * crackle-codec's decoder trusts the crack codes: damaged ones make it read or write outside
 * its buffers, and the CRC-32C it then computes of each slice's connected components is
 * checked in a worker thread whose exception is lost (the slice is left as uninitialised
 * memory).  This replays, for every z slice, what the package does with the slice's crack
 * code: the beginning-of-chain index (y and x offsets of 1, 2, 4 or 8 bytes by sy+1 and
 * sx+1), the packed 2-bit moves into chains of up/down/left/right/branch/terminate symbols,
 * the walk of each chain that cuts (impermissible format) or joins (permissible format) the
 * edges of the voxel connectivity graph, its connected components numbered in raster order
 * (as crackle's color_connectivity_graph numbers them) and their CRC-32C; it refuses a code
 * whose index or walk leaves the slice, and one whose components do not have the stored
 * CRC.  A stream that passes decodes, in the package, to the components it was written
 * with.
 */
#ifndef SHARDVOL_CRACKLE_CHECK_H
#define SHARDVOL_CRACKLE_CHECK_H

#include <stddef.h>

#include "sv_common.h"

enum {
    SV_CRKL_NO_ERROR = 0,
    SV_CRKL_INDEX,      /* the beginning-of-chain index runs past its end (value = bytes) */
    SV_CRKL_WALK,       /* a chain's walk leaves the slice */
    SV_CRKL_CRC,        /* the slice's components do not have the stored CRC-32C */
    SV_CRKL_LABELS,     /* the flat labels section is not as long as its counts say */
    SV_CRKL_LABEL_INDEX,/* a component's label index (value) past the labels (limit) */
    SV_CRKL_COMPONENTS  /* the slice has other components (value) than the labels (limit) */
};

typedef struct {
    int reason;
    size_t z;       /* the slice at fault */
    uint64_t value;
    uint64_t limit;
} sv_crkl_error;

/* The labels of a flat-label stream (crackle's FLAT format, one grid per slice) and where
 * to decode them: sv_crkl_check then also writes voxel (x, y, z) of the chunk to
 * out + x*s[0] + y*s[1] + z*s[2] items of `label_bytes` (s = strides, items, any sign). */
typedef struct {
    const uint8_t *labels; /* the labels section: count (u64), labels, components, map */
    size_t labels_len;
    size_t stored_bytes;   /* bytes per stored label (1, 2, 4, 8) */
    size_t label_bytes;    /* bytes per output label (1, 2, 4, 8; >= stored_bytes) */
    void *out;
    ptrdiff_t strides[3];
} sv_crkl_flat;

/* Check the `sz` crack codes of a sx x sy x sz chunk: code z is the `sizes[z]` bytes
 * (uint32 little-endian each) after those of the slices before it, starting at `codes`;
 * `crcs` the sz stored CRC-32Cs (uint32 little-endian).  `permissible`: the header's crack
 * format bit.  The caller has checked that the codes and CRCs lie inside the stream.
 * Returns SV_OK, SV_ERR_ARGUMENT (sx or sy over 65534), SV_ERR_NOMEM, or SV_ERR_CORRUPT
 * with *err filled in.  `flat` (or NULL): decode the labels too (out is then partly written
 * on failure). */
int sv_crkl_check(const uint8_t *codes, const uint8_t *sizes, const uint8_t *crcs, size_t sx,
                  size_t sy, size_t sz, int permissible, const sv_crkl_flat *flat,
                  sv_crkl_error *err);

#endif

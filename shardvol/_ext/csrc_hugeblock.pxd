# Declarations of csrc/hugeblock.h.
cdef extern from "hugeblock.h" nogil:
    void *sv_hugeblock_alloc(size_t size, size_t *capacity)
    void sv_hugeblock_free(void *block, size_t capacity)
    int sv_hugeblock_advised(size_t capacity)
    int sv_hugeblock_populate(void *start, size_t length)

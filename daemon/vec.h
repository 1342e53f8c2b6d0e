/*
 * Growing arrays: one place for the doubling realloc every list, arena and
 * table of the sources needs.
 */
#ifndef PRESTO_VEC_H
#define PRESTO_VEC_H

#include <stddef.h>

/* Makes p (cap elements of elem bytes) hold at least need elements,
 * doubling from first. Returns the array (moved or not) with *cap
 * updated, or NULL when out of memory or when the size overflows: p is
 * then still valid and *cap unchanged. */
void *vec_grow(void *p, size_t *cap, size_t need, size_t elem, size_t first);

#endif

/*
 * Growing arrays (vec.h).
 */
#include <stdint.h>
#include <stdlib.h>

#include "vec.h"

void *vec_grow(void *p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : first ? first : 1;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return NULL;
        n *= 2;
    }
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    void *q = realloc(p, n * elem);
    if (q == NULL)
        return NULL;
    *cap = n;
    return q;
}

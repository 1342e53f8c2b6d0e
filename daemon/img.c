/* The image type: see img.h. */
#include "img.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int img_reserve(struct img *im, size_t len)
{
    if (len <= im->cap)
        return 0;
    if (im->borrowed)
        return -ENOSPC;
    /* cap == 0: no buffer, or one borrowed from elsewhere that must not be
     * reallocated; either way start a fresh owned buffer. */
    uint8_t *p = im->cap ? realloc(im->data, len) : malloc(len);
    if (p == NULL)
        return -ENOMEM;
    im->data = p;
    im->cap = len;
    return 0;
}

void img_free(struct img *im)
{
    if (im->cap && !im->borrowed)
        free(im->data);
    memset(im, 0, sizeof(*im));
}

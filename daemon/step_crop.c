/*
 * center_crop: the N x N centre of the image, as torchvision's CenterCrop.
 *
 * The offset along a dimension of size s >= N is round((s - N) / 2.0) with
 * Python's round-half-to-even. A dimension smaller than N is first padded
 * with zeros, (N - s) // 2 before and the rest after, and then taken whole
 * (after padding its size is N, so its offset is 0).
 */
#include <string.h>

#include "step.h"
#include "step_impl.h"

/* Where a dimension of size s maps into an output of size n: the first
 * source index, the first destination index, and how many to copy. */
struct crop_span {
    uint32_t src, dst, len;
};

static struct crop_span crop_span(uint32_t s, uint32_t n)
{
    struct crop_span sp;
    if (s >= n) {
        uint32_t d = s - n;
        uint32_t half = d / 2;
        /* d odd: half + 0.5 rounds to the even neighbour. */
        sp.src = (d & 1) && (half & 1) ? half + 1 : half;
        sp.dst = 0;
        sp.len = n;
    } else {
        sp.src = 0;
        sp.dst = (n - s) / 2;
        sp.len = s;
    }
    return sp;
}

int step_crop_apply(uint32_t size, struct step_ctx *ctx, const struct img *in,
                    struct img *out)
{
    int rc = step_check_pixels(ctx, in, "center_crop");
    if (rc < 0)
        return rc;
    uint32_t c = in->c;
    rc = step_out_pixels(ctx, out, size, size, c);
    if (rc < 0)
        return rc;

    struct crop_span rows = crop_span(in->h, size), cols = crop_span(in->w, size);
    if (rows.len < size || cols.len < size)
        memset(out->data, 0, out->len);

    size_t in_row = (size_t)in->w * c, out_row = (size_t)size * c;
    const uint8_t *s = in->data + (size_t)rows.src * in_row + (size_t)cols.src * c;
    uint8_t *d = out->data + (size_t)rows.dst * out_row + (size_t)cols.dst * c;
    for (uint32_t y = 0; y < rows.len; y++, s += in_row, d += out_row)
        memcpy(d, s, (size_t)cols.len * c);
    return 0;
}

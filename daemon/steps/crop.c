/*
 * center_crop and pad: copies of a rectangle of the input onto a canvas,
 * the rest filled.
 *
 * center_crop is torchvision's CenterCrop([H, W]): along a dimension of
 * size s >= n the offset is round((s - n) / 2.0) with Python's round-half-
 * to-even; a dimension smaller than n is first padded with zeros,
 * (n - s) // 2 before and the rest after, and then taken whole.
 *
 * pad is torchvision's Pad(padding, fill) in constant mode on a PIL image
 * (ImageOps.expand): left, top, right, bottom borders of the fill colour,
 * one value for every channel or one per channel.
 */
#include <errno.h>
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

/* Fills out (already shaped) with fill (nfill values: 1 for all channels,
 * else one per channel), then copies rows x cols of in onto it. */
static void crop_place(const struct img *in, struct img *out, struct crop_span rows,
                       struct crop_span cols, const uint8_t *fill, uint32_t nfill)
{
    uint32_t c = in->c;
    int covered = rows.len == out->h && cols.len == out->w;
    if (!covered && nfill <= 1) {
        memset(out->data, nfill ? fill[0] : 0, out->len);
    } else if (!covered) {
        for (size_t i = 0; i < out->len; i += c)
            memcpy(out->data + i, fill, c);
    }
    size_t in_row = (size_t)in->w * c, out_row = (size_t)out->w * c;
    const uint8_t *s = in->data + (size_t)rows.src * in_row + (size_t)cols.src * c;
    uint8_t *d = out->data + (size_t)rows.dst * out_row + (size_t)cols.dst * c;
    for (uint32_t y = 0; y < rows.len; y++, s += in_row, d += out_row)
        memcpy(d, s, (size_t)cols.len * c);
}

int step_crop_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                    struct img *out)
{
    int rc = step_check_pixels(ctx, in, "center_crop");
    if (rc < 0)
        return rc;
    rc = step_out_pixels(ctx, out, s->h, s->w, in->c);
    if (rc < 0)
        return rc;
    crop_place(in, out, crop_span(in->h, s->h), crop_span(in->w, s->w), NULL, 0);
    return 0;
}

int step_pad_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                   struct img *out)
{
    int rc = step_check_pixels(ctx, in, "pad");
    if (rc < 0)
        return rc;
    if (s->nfill != 1 && s->nfill != in->c)
        return step_fail(ctx, -EINVAL, "pad: fill has %u values for %u channels", s->nfill,
                         in->c);
    uint64_t h = (uint64_t)in->h + s->pad[1] + s->pad[3];
    uint64_t w = (uint64_t)in->w + s->pad[0] + s->pad[2];
    if (h > (1u << 24) || w > (1u << 24) || (ctx->max_pixels && h * w > ctx->max_pixels))
        return step_fail(ctx, -E2BIG, "pad: %ux%u padded to %llux%llu is too large", in->w,
                         in->h, (unsigned long long)w, (unsigned long long)h);
    rc = step_out_pixels(ctx, out, (uint32_t)h, (uint32_t)w, in->c);
    if (rc < 0)
        return rc;
    uint8_t fill[STEP_CHANNELS_MAX];
    for (uint32_t ch = 0; ch < in->c && ch < STEP_CHANNELS_MAX; ch++)
        fill[ch] = s->fill[s->nfill == 1 ? 0 : ch];
    struct crop_span rows = {0, s->pad[1], in->h}, cols = {0, s->pad[0], in->w};
    crop_place(in, out, rows, cols, fill, s->nfill == 1 ? 1 : in->c);
    return 0;
}

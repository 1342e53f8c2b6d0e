/*
 * random_flip: mirrors the image left-right with probability p. The one
 * decision is the first step_rand01 draw from the per-sample seed, so a
 * (seed, epoch, sample) triple always flips the same way. The result is
 * always written to out (a plain copy when not flipped).
 */
#include <string.h>

#include "step.h"
#include "step_impl.h"

static void flip_rows(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
                      uint32_t c)
{
    size_t row = (size_t)w * c;
    for (uint32_t y = 0; y < h; y++, src += row, dst += row) {
        const uint8_t *s = src + row;
        uint8_t *d = dst;
        if (c == 3) {
            for (uint32_t x = 0; x < w; x++, d += 3) {
                s -= 3;
                d[0] = s[0];
                d[1] = s[1];
                d[2] = s[2];
            }
        } else {
            for (uint32_t x = 0; x < w; x++, d += c) {
                s -= c;
                memcpy(d, s, c);
            }
        }
    }
}

int step_flip_apply(double p, struct step_ctx *ctx, const struct img *in,
                    struct img *out)
{
    int rc = step_check_pixels(ctx, in, "random_flip");
    if (rc < 0)
        return rc;
    rc = step_out_pixels(ctx, out, in->h, in->w, in->c);
    if (rc < 0)
        return rc;

    uint64_t state = ctx->seed;
    if (step_rand01(&state) < p)
        flip_rows(in->data, out->data, in->h, in->w, in->c);
    else
        memcpy(out->data, in->data, out->len);
    return 0;
}

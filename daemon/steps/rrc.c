/*
 * random_resized_crop: torchvision's RandomResizedCrop(size, scale, ratio)
 * on a PIL image, that is get_params() then F.resized_crop: an integer crop
 * box, the box cut out (Image.crop) and resized whole to size with
 * bilinear antialiasing (Image.resize, what resize does). The resize reads
 * only pixels inside the box, as after a real crop.
 *
 * get_params, for an h x w image: up to 10 attempts of
 *     target_area  = h * w * uniform(scale)
 *     aspect_ratio = exp(uniform(log(ratio[0]), log(ratio[1])))
 *     cw = round(sqrt(target_area * aspect_ratio))    (half to even)
 *     ch = round(sqrt(target_area / aspect_ratio))
 *     if 0 < cw <= w and 0 < ch <= h:
 *         top = randint(0, h - ch), left = randint(0, w - cw); done
 * and otherwise the centre fallback: the whole image with its aspect ratio
 * clamped into ratio (cw = w, ch = round(w / ratio[0]) when w / h is below
 * ratio[0], ch = h, cw = round(h * ratio[1]) when above), at
 * ((h - ch) // 2, (w - cw) // 2).
 *
 * The draws come from splitmix64 seeded with the per-sample seed, so the
 * same (seed, epoch, sample) always crops alike; torch's generator cannot
 * be reproduced, so presto's crops equal torchvision's in distribution,
 * not draw for draw. torch draws in float32 where this draws in double.
 */
#include <math.h>

#include "hash.h"
#include "step.h"
#include "step_impl.h"

#define RRC_ATTEMPTS 10

/* The same boxes from every build: no fused multiply-adds in the draws. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define RRC_NO_CONTRACT
#elif defined(__GNUC__)
#define RRC_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define RRC_NO_CONTRACT
#endif

/* A uniform integer in [0, n]. */
static uint32_t rrc_randint(uint64_t *state, uint32_t n)
{
    uint32_t v = (uint32_t)(hash_rand01(state) * ((double)n + 1.0));
    return v > n ? n : v;
}

RRC_NO_CONTRACT
int step_rrc_params(const struct step *s, uint64_t seed, uint32_t h, uint32_t w,
                    struct step_box *box)
{
    uint64_t state = seed;
    double area = (double)h * w;
    double lr0 = log(s->ratio[0]), lr1 = log(s->ratio[1]);

    for (int attempt = 1; attempt <= RRC_ATTEMPTS; attempt++) {
        double target = area * (s->scale[0] + (s->scale[1] - s->scale[0]) *
                                                  hash_rand01(&state));
        double aspect = exp(lr0 + (lr1 - lr0) * hash_rand01(&state));
        double cw = nearbyint(sqrt(target * aspect));
        double ch = nearbyint(sqrt(target / aspect));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            box->h = (uint32_t)ch;
            box->w = (uint32_t)cw;
            box->top = rrc_randint(&state, h - box->h);
            box->left = rrc_randint(&state, w - box->w);
            return attempt;
        }
    }
    double in_ratio = (double)w / h;
    box->w = w;
    box->h = h;
    if (in_ratio < s->ratio[0]) {
        double ch = nearbyint(w / s->ratio[0]);
        box->h = ch < 1 ? 1 : ch > h ? h : (uint32_t)ch;
    } else if (in_ratio > s->ratio[1]) {
        double cw = nearbyint(h * s->ratio[1]);
        box->w = cw < 1 ? 1 : cw > w ? w : (uint32_t)cw;
    }
    box->top = (h - box->h) / 2;
    box->left = (w - box->w) / 2;
    return RRC_ATTEMPTS + 1;
}

int step_rrc_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                   struct img *out)
{
    int rc = step_check_pixels(ctx, in, "random_resized_crop");
    if (rc < 0)
        return rc;
    struct step_box box;
    step_rrc_params(s, ctx->seed, in->h, in->w, &box);
    struct step_resample_src src = {
        .data = in->data + ((size_t)box.top * in->w + box.left) * in->c,
        .stride = (size_t)in->w * in->c,
        .h = box.h,
        .w = box.w,
        .c = in->c,
        .x0 = 0.0,
        .y0 = 0.0,
        .x1 = box.w,
        .y1 = box.h,
    };
    return step_resample(ctx, STEP_RESIZE_ISA_AUTO, &src, s->h, s->w, out,
                         "random_resized_crop");
}

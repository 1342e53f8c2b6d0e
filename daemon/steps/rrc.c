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
#include <errno.h>
#include <math.h>

#include "decode_formats.h"
#include "hash.h"
#include "jpeg_roi.h"
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

/* src resized to rrc's output, through norm when given. */
static int rrc_resample(const struct step *rrc, const struct step *norm, struct step_ctx *ctx,
                        struct step_resample_src *src, struct img *out)
{
    if (norm && (src->norm_tables = step_norm_prepare(norm, ctx, src->c)) == NULL)
        return -EINVAL;
    src->norm = norm;
    return step_resample(ctx, STEP_RESIZE_ISA_AUTO, src, rrc->h, rrc->w, out,
                         "random_resized_crop");
}

/* The crop of in's pixels, mirrored and normalized as asked. */
static int rrc_crop(const struct step *s, int mirror, const struct step *norm,
                    struct step_ctx *ctx, const struct img *in, struct img *out)
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
        .mirror = mirror,
    };
    return rrc_resample(s, norm, ctx, &src, out);
}

int step_rrc_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                   struct img *out)
{
    return rrc_crop(s, 0, NULL, ctx, in, out);
}


/* ---- decode and random_resized_crop in one: the cold path ---- */

/* The DCT scale (in eighths, of 1/8 to 4/8; 8: none) for a bh x bw box
 * resized to out_h x out_w: the smallest whose scaled box still covers 5/4
 * of the output on each side, decode's dct_scale rule. */
static uint32_t rrc_dct_eighths(uint32_t bh, uint32_t bw, uint32_t out_h, uint32_t out_w)
{
    for (uint32_t k = 1; k <= 4; k++) {
        uint64_t sh = ((uint64_t)bh * k + 7) / 8, sw = ((uint64_t)bw * k + 7) / 8;
        if (sh * 4 >= (uint64_t)out_h * 5 && sw * 4 >= (uint64_t)out_w * 5)
            return k;
    }
    return 8;
}

/* A JPEG's crop box, decoded alone into ctx->aux and resized into out.
 * -ENOTSUP: not for the region decoder (decode it whole). */
static int rrc_region(const struct step *dec, const struct step *rrc, int mirror,
                      const struct step *norm, struct step_ctx *ctx, const struct img *in, struct img *out)
{
    char err[160];
    struct roi_header hdr;
    if (ctx->roi == NULL && roi_decoder_new(&ctx->roi) < 0)
        return -ENOTSUP;
    if (roi_read_header(ctx->roi, in->data, in->len, &hdr, err, sizeof(err)) < 0 ||
        hdr.cmyk || hdr.h == 0 || hdr.w == 0 ||
        (ctx->max_pixels && (uint64_t)hdr.h * hdr.w > ctx->max_pixels))
        return -ENOTSUP; /* decode says why */
    struct step_box b;
    step_rrc_params(rrc, ctx->seed, hdr.h, hdr.w, &b);
    uint32_t num = 1, den = 1;
    if (dec->dct_scale) {
        num = rrc_dct_eighths(b.h, b.w, rrc->h, rrc->w);
        den = 8;
        if (num == 8)
            num = den = 1;
    }
    /* The box at that scale, rounded outwards: whole scaled pixels. */
    uint32_t sh, sw;
    roi_scaled_size(hdr.h, hdr.w, num, den, &sh, &sw);
    uint32_t top = (uint32_t)((uint64_t)b.top * num / den);
    uint32_t left = (uint32_t)((uint64_t)b.left * num / den);
    uint32_t bottom = (uint32_t)(((uint64_t)(b.top + b.h) * num + den - 1) / den);
    uint32_t right = (uint32_t)(((uint64_t)(b.left + b.w) * num + den - 1) / den);
    struct roi_box box = {top, left, (bottom < sh ? bottom : sh) - top,
                          (right < sw ? right : sw) - left};
    uint32_t c = dec->channels;
    if (img_reserve(&ctx->aux, (size_t)box.h * box.w * c) < 0)
        return -ENOTSUP;
    if (roi_decode(ctx->roi, in->data, in->len, c, num, den, &box, ctx->max_pixels,
                   ctx->aux.data, (size_t)box.w * c, err, sizeof(err)) < 0)
        return -ENOTSUP;
    double f = (double)num / den;
    struct step_resample_src src = {
        .data = ctx->aux.data,
        .stride = (size_t)box.w * c,
        .h = box.h,
        .w = box.w,
        .c = c,
        /* At full scale the whole region is the box (exactly what
         * step_rrc_apply reads); scaled, the box's fractional extent. */
        .x0 = num == den ? 0.0 : b.left * f - left,
        .y0 = num == den ? 0.0 : b.top * f - top,
        .x1 = num == den ? box.w : (b.left + b.w) * f - left,
        .y1 = num == den ? box.h : (b.top + b.h) * f - top,
        .mirror = mirror,
    };
    if (src.x1 > box.w)
        src.x1 = box.w;
    if (src.y1 > box.h)
        src.y1 = box.h;
    return rrc_resample(rrc, norm, ctx, &src, out);
}

int step_decode_rrc_apply(const struct step *dec, const struct step *rrc,
                          struct step_ctx *ctx, const struct img *in, struct img *out)
{
    return step_decode_rrc_tail_apply(dec, rrc, 0, NULL, ctx, in, out);
}

int step_decode_rrc_tail_apply(const struct step *dec, const struct step *rrc, int mirror,
                               const struct step *norm, struct step_ctx *ctx,
                               const struct img *in, struct img *out)
{
    if (dec == NULL) {
        int rc = rrc_crop(rrc, mirror, norm, ctx, in, out);
        return rc < 0 ? rc : 0;
    }
    if (in->fmt == IMG_ENCODED && in->len > 0 && in->data != NULL &&
        decode_sniff(in->data, in->len) == DECODE_FMT_JPEG) {
        int rc = rrc_region(dec, rrc, mirror, norm, ctx, in, out);
        if (rc != -ENOTSUP) {
            ctx->format = DECODE_FMT_JPEG;
            return rc < 0 ? rc : 1;
        }
    }
    /* Whole: decode (without its scale: the crop is not known before the
     * image's size) and crop, as the two steps would. */
    struct step whole = *dec;
    whole.dct_scale = 0;
    int rc = step_decode_apply(&whole, ctx, in, &ctx->aux);
    if (rc < 0)
        return rc;
    rc = rrc_crop(rrc, mirror, norm, ctx, &ctx->aux, out);
    return rc < 0 ? rc : 0;
}

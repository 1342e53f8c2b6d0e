/*
 * The image augmentations of training recipes as pipeline steps:
 * color_jitter, random_grayscale, gaussian_blur, random_rotation,
 * random_affine, auto_augment, rand_augment, trivial_augment_wide (uint8
 * images of 1 or 3 channels) and random_erasing (the float32 image after
 * normalize or to_float, either layout).
 *
 * Each step is two halves: its decision (step_imgaug_decide: what
 * torchvision's get_params, or its forward, draws), a pure function of the
 * step's per-sample seed (ctx->seed: (stream seed, epoch, sample id, step
 * index), hash.h) and of the image's size; and the operation with that
 * decision (step_imgaug_apply_decision), which is phase A's pure C:
 * color.h, geometry.h, blur.h, augment.h, erase.h, each bit-identical to
 * torchvision 0.14 on PIL given the same decision (gaussian_blur within
 * its stated tolerance). The test hook (tests/tools/steps_hook.c) exposes
 * both halves, so the fidelity suite can recompute what a daemon served.
 */
#include <errno.h>
#include <string.h>

#include "augment.h"
#include "blur.h"
#include "color.h"
#include "draw.h"
#include "erase.h"
#include "geometry.h"
#include "step.h"
#include "step_impl.h"

static void erase_params_of(const struct step *s, struct erase_params *ep)
{
    memset(ep, 0, sizeof(*ep));
    ep->p = s->p;
    ep->scale[0] = s->scale[0];
    ep->scale[1] = s->scale[1];
    ep->ratio[0] = s->ratio[0];
    ep->ratio[1] = s->ratio[1];
    ep->random = s->erase_random;
    ep->nvalue = s->nvalue;
    memcpy(ep->value, s->value, sizeof(ep->value));
}

void step_imgaug_decide(const struct step *s, uint64_t seed, uint32_t h, uint32_t w,
                        struct step_decision *d)
{
    uint64_t st = seed;
    struct erase_params ep;
    memset(d, 0, sizeof(*d));
    switch (s->kind) {
    case STEP_COLOR_JITTER:
        color_jitter_draw(&s->jitter, &st, &d->jitter);
        break;
    case STEP_RANDOM_GRAYSCALE:
        d->apply = draw_chance(&st, s->p);
        break;
    case STEP_GAUSSIAN_BLUR:
        /* torch.empty(1).uniform_(min, max).item(): a float32 value */
        d->sigma = (float)draw_uniform(&st, s->sigma[0], s->sigma[1]);
        if (d->sigma <= 0.0)
            d->sigma = s->sigma[0];
        break;
    case STEP_RANDOM_ROTATION:
        d->angle = draw_uniform(&st, s->affine.degrees[0], s->affine.degrees[1]);
        break;
    case STEP_RANDOM_AFFINE:
        geom_affine_draw(&s->affine, &st, h, w, &d->affine);
        break;
    case STEP_AUTO_AUGMENT:
    case STEP_RAND_AUGMENT:
    case STEP_TRIVIAL_AUGMENT_WIDE:
        d->nops = aug_draw(&s->aug, &st, h, w, d->ops);
        break;
    case STEP_RANDOM_ERASING:
        erase_params_of(s, &ep);
        erase_draw(&ep, &st, h, w, &d->box);
        break;
    default:
        break;
    }
    d->state = st;
}

/* The policies' ops one after the other, the last one into out: they
 * alternate between out and the context's scratch image (the geometric
 * ops read one buffer and write another). */
static int apply_ops(const struct step *s, struct step_ctx *ctx,
                     const struct step_decision *d, const uint8_t *fill,
                     const struct img *in, struct img *out)
{
    uint32_t n = d->nops;
    size_t len = (size_t)in->h * in->w * in->c;
    if (n == 0) {
        memcpy(out->data, in->data, len);
        return 0;
    }
    if (n > 1 && img_reserve(&ctx->aux, len) < 0)
        return step_fail(ctx, -ENOMEM, "%s: no memory for a %ux%u image",
                         step_name(s->kind), in->w, in->h);
    const uint8_t *src = in->data;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *dst = (n - 1 - i) % 2 == 0 ? out->data : ctx->aux.data;
        aug_apply_op(d->ops[i].op, d->ops[i].magnitude, (enum geom_interp)s->interp, fill,
                     src, dst, in->h, in->w, in->c);
        src = dst;
    }
    return 0;
}

static int erase(const struct step *s, struct step_ctx *ctx, const struct step_decision *d,
                 const struct img *in, struct img *out)
{
    struct erase_params ep;
    uint64_t st = d->state;
    erase_params_of(s, &ep);
    if (out != in) { /* in place (step_in_place) there is nothing to copy */
        int rc = step_out_pixels_as(ctx, out, in->h, in->w, in->c, PROTO_DTYPE_F32);
        if (rc < 0)
            return rc;
        memcpy(out->data, in->data, out->len);
    }
    erase_apply(&ep, &d->box, &st, (float *)(void *)out->data, in->h, in->w, in->c,
                s->erase_nchw);
    return 0;
}

/* Checks in for step s: uint8 pixels of 1 or 3 channels, or (erasing) a
 * float32 image of its size. */
static int check_input(const struct step *s, struct step_ctx *ctx, const struct img *in)
{
    const char *name = step_name(s->kind);
    if (s->kind == STEP_RANDOM_ERASING) {
        if (in->fmt != IMG_PIXELS || in->dtype != PROTO_DTYPE_F32 ||
            in->len < (size_t)in->h * in->w * in->c * sizeof(float) || in->h == 0 ||
            in->w == 0)
            return step_fail(ctx, -EINVAL, "%s: input is not a float32 image (put it "
                             "after normalize or to_float)", name);
        return 0;
    }
    int rc = step_check_pixels(ctx, in, name);
    if (rc < 0)
        return rc;
    if (in->c != 1 && in->c != 3)
        return step_fail(ctx, -EINVAL, "%s: takes 1 or 3 channels, not %u", name, in->c);
    return 0;
}

int step_imgaug_apply_decision(const struct step *s, struct step_ctx *ctx,
                               const struct step_decision *d, const struct img *in,
                               struct img *out)
{
    int rc = check_input(s, ctx, in);
    if (rc < 0)
        return rc;
    if (s->kind == STEP_RANDOM_ERASING)
        return erase(s, ctx, d, in, out);
    uint32_t h = in->h, w = in->w, c = in->c;
    size_t px = (size_t)h * w;
    rc = step_out_pixels(ctx, out, h, w, c);
    if (rc < 0)
        return rc;
    uint8_t fill[STEP_CHANNELS_MAX];
    for (uint32_t i = 0; i < c; i++)
        fill[i] = s->fill[s->nfill == 1 ? 0 : i];
    enum geom_interp interp = (enum geom_interp)s->interp;
    const struct geom_affine_decision *a = &d->affine;

    switch (s->kind) {
    case STEP_COLOR_JITTER:
        color_jitter_apply(&d->jitter, in->data, out->data, px, c);
        return 0;
    case STEP_RANDOM_GRAYSCALE:
        if (d->apply)
            color_grayscale(in->data, out->data, px, c);
        else
            memcpy(out->data, in->data, px * c);
        return 0;
    case STEP_GAUSSIAN_BLUR:
        rc = blur_gaussian(in->data, out->data, h, w, c, s->ksize[0], s->ksize[1], d->sigma,
                           d->sigma);
        return rc < 0 ? step_fail(ctx, rc, "gaussian_blur: no memory for a %ux%u image", w,
                                  h)
                      : 0;
    case STEP_RANDOM_ROTATION:
        geom_rotate(in->data, out->data, h, w, c, d->angle, interp, fill);
        return 0;
    case STEP_RANDOM_AFFINE:
        geom_affine(in->data, out->data, h, w, c, a->angle, a->tx, a->ty, a->scale,
                    a->shear_x, a->shear_y, s->center_on ? s->center : NULL, interp, fill);
        return 0;
    case STEP_AUTO_AUGMENT:
    case STEP_RAND_AUGMENT:
    case STEP_TRIVIAL_AUGMENT_WIDE:
        return apply_ops(s, ctx, d, fill, in, out);
    default:
        return step_fail(ctx, -EINVAL, "%s is not an image augmentation", step_name(s->kind));
    }
}

int step_imgaug_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out)
{
    struct step_decision d;
    int rc = check_input(s, ctx, in);
    if (rc < 0)
        return rc;
    step_imgaug_decide(s, ctx->seed, in->h, in->w, &d);
    return step_imgaug_apply_decision(s, ctx, &d, in, out);
}

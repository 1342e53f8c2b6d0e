/*
 * The test hook of the image steps: a flat C interface over daemon/steps/
 * for tests/python/test_augment.py, which loads it with ctypes
 * (build/testlib/libsteps_hook.so). Every function applies one operation
 * with decisions given by the caller, or draws decisions from a seed, so
 * the suite can compare each operation with torchvision's on the same
 * decision and each draw with torchvision's sampling.
 *
 * Images are HWC uint8 (c 1 or 3) or float32 (erasing, mixing); fill is
 * one value per channel. Functions return 0 or -errno.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "steps/augment.h"
#include "steps/blur.h"
#include "steps/color.h"
#include "steps/erase.h"
#include "steps/geometry.h"
#include "steps/mix.h"
#include "steps/step.h"
#include "steps/step_impl.h"
#include "hash.h"

int hook_color(const char *op, const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w,
               uint32_t c, double arg)
{
    size_t px = (size_t)h * w;
    if (strcmp(op, "brightness") == 0)
        color_brightness(src, dst, px, c, arg);
    else if (strcmp(op, "contrast") == 0)
        color_contrast(src, dst, px, c, arg);
    else if (strcmp(op, "saturation") == 0)
        color_saturation(src, dst, px, c, arg);
    else if (strcmp(op, "sharpness") == 0)
        color_sharpness(src, dst, h, w, c, arg);
    else if (strcmp(op, "hue") == 0)
        color_hue(src, dst, px, c, arg);
    else if (strcmp(op, "grayscale") == 0)
        color_grayscale(src, dst, px, c);
    else if (strcmp(op, "posterize") == 0)
        color_posterize(src, dst, px, c, (uint32_t)arg);
    else if (strcmp(op, "solarize") == 0)
        color_solarize(src, dst, px, c, arg);
    else if (strcmp(op, "invert") == 0)
        color_invert(src, dst, px, c);
    else if (strcmp(op, "autocontrast") == 0)
        color_autocontrast(src, dst, px, c);
    else if (strcmp(op, "equalize") == 0)
        color_equalize(src, dst, px, c);
    else
        return -EINVAL;
    return 0;
}

/* ColorJitter with a given order (4 indices) and factors (b, c, s, h; NaN:
 * off). */
int hook_jitter(const uint32_t *order, const double *factor, const uint8_t *src,
                uint8_t *dst, uint32_t h, uint32_t w, uint32_t c)
{
    struct color_jitter j;
    for (int f = 0; f < 4; f++) {
        j.order[f] = order[f];
        j.on[f] = factor[f] == factor[f];
        j.factor[f] = factor[f];
    }
    color_jitter_apply(&j, src, dst, (size_t)h * w, c);
    return 0;
}

/* ColorJitter's draws: ranges (lo, hi per fn; lo > hi: off). */
void hook_jitter_draw(const double *ranges, uint64_t seed, uint32_t *order, double *factor)
{
    struct color_jitter_params p;
    struct color_jitter j;
    for (int f = 0; f < 4; f++) {
        p.on[f] = ranges[2 * f] <= ranges[2 * f + 1];
        p.range[f][0] = ranges[2 * f];
        p.range[f][1] = ranges[2 * f + 1];
    }
    color_jitter_draw(&p, &seed, &j);
    for (int f = 0; f < 4; f++) {
        order[f] = j.order[f];
        factor[f] = j.factor[f];
    }
}

int hook_affine(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                double angle, int32_t tx, int32_t ty, double scale, double shear_x,
                double shear_y, const double *center, int interp, const uint8_t *fill)
{
    geom_affine(src, dst, h, w, c, angle, tx, ty, scale, shear_x, shear_y, center,
                (enum geom_interp)interp, fill);
    return 0;
}

int hook_rotate(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
                double angle, int interp, const uint8_t *fill)
{
    geom_rotate(src, dst, h, w, c, angle, (enum geom_interp)interp, fill);
    return 0;
}

/* RandomAffine's draws: degrees[2], translate[2] (negative: off),
 * scale[2] (lo > hi: off), shear[4] (x lo > hi: off; y likewise). out:
 * angle, tx, ty, scale, shear_x, shear_y. */
void hook_affine_draw(const double *degrees, const double *translate, const double *scale,
                      const double *shear, uint64_t seed, uint32_t h, uint32_t w,
                      double *out)
{
    struct geom_affine_params p;
    struct geom_affine_decision d;
    memset(&p, 0, sizeof(p));
    p.degrees[0] = degrees[0];
    p.degrees[1] = degrees[1];
    p.translate_on = translate[0] >= 0;
    p.translate[0] = translate[0];
    p.translate[1] = translate[1];
    p.scale_on = scale[0] <= scale[1];
    p.scale[0] = scale[0];
    p.scale[1] = scale[1];
    for (int i = 0; i < 2; i++) {
        p.shear_on[i] = shear[2 * i] <= shear[2 * i + 1];
        p.shear[i][0] = shear[2 * i];
        p.shear[i][1] = shear[2 * i + 1];
    }
    geom_affine_draw(&p, &seed, h, w, &d);
    out[0] = d.angle;
    out[1] = d.tx;
    out[2] = d.ty;
    out[3] = d.scale;
    out[4] = d.shear_x;
    out[5] = d.shear_y;
}

int hook_aug_op(int op, double magnitude, int interp, const uint8_t *fill,
                const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c)
{
    if (op < 0 || op >= AUG_OP_MAX)
        return -EINVAL;
    aug_apply_op((enum aug_op)op, magnitude, (enum geom_interp)interp, fill, src, dst, h, w,
                 c);
    return 0;
}

const char *hook_aug_op_name(int op)
{
    return aug_op_name((enum aug_op)op);
}

double hook_aug_magnitude(int policy, int op, uint32_t bins, uint32_t bin, uint32_t h,
                          uint32_t w)
{
    return aug_magnitude((enum aug_policy)policy, (enum aug_op)op, bins, bin, h, w);
}

/* A policy's decision from seed: ops and signed magnitudes (AUG_OPS_MAX
 * room each); returns their count. */
int hook_aug_draw(int policy, uint32_t num_ops, uint32_t magnitude, uint32_t bins,
                  uint64_t seed, uint32_t h, uint32_t w, int *ops, double *mags)
{
    struct aug_params p = {(enum aug_policy)policy, num_ops, magnitude, bins,
                           GEOM_NEAREST, {0, 0, 0}};
    struct aug_choice ch[AUG_OPS_MAX];
    uint32_t n = aug_draw(&p, &seed, h, w, ch);
    for (uint32_t i = 0; i < n; i++) {
        ops[i] = (int)ch[i].op;
        mags[i] = ch[i].magnitude;
    }
    return (int)n;
}

int hook_blur(const uint8_t *src, uint8_t *dst, uint32_t h, uint32_t w, uint32_t c,
              uint32_t kx, uint32_t ky, double sx, double sy)
{
    return blur_gaussian(src, dst, h, w, c, kx, ky, sx, sy);
}

void hook_blur_kernel(uint32_t ksize, double sigma, float *k)
{
    blur_kernel(ksize, sigma, k);
}

float hook_linspace(double start, double end, uint32_t steps, uint32_t i)
{
    return blur_linspace(start, end, steps, i);
}

/* RandomErasing: params p, scale[2], ratio[2]; box out: top, left, h, w. */
void hook_erase_draw(double p, const double *scale, const double *ratio, uint64_t seed,
                     uint32_t h, uint32_t w, uint32_t *box)
{
    struct erase_params ep = {p, {scale[0], scale[1]}, {ratio[0], ratio[1]}, 0, 1, {0}};
    struct erase_box b;
    erase_draw(&ep, &seed, h, w, &b);
    box[0] = b.top;
    box[1] = b.left;
    box[2] = b.h;
    box[3] = b.w;
}

/* Erases box (top, left, h, w) of a float image with nvalue values (0:
 * random normals from seed). */
void hook_erase_apply(const uint32_t *box, const float *value, uint32_t nvalue,
                      uint64_t seed, float *x, uint32_t h, uint32_t w, uint32_t c, int nchw)
{
    struct erase_params ep = {1.0, {0.02, 0.33}, {0.3, 3.3}, nvalue == 0, nvalue, {0}};
    for (uint32_t i = 0; i < nvalue && i < 4; i++)
        ep.value[i] = value[i];
    struct erase_box b = {box[0], box[1], box[2], box[3]};
    erase_apply(&ep, &b, &seed, x, h, w, c, nchw);
}

/* mixup/cutmix: params mixup_alpha, cutmix_alpha, p, switch_p; out: kind,
 * lambda, x1, y1, x2, y2. */
void hook_mix_draw(const double *params, uint64_t seed, uint32_t h, uint32_t w,
                   double *out)
{
    struct mix_params p = {params[0], params[1], params[2], params[3]};
    struct mix_decision d;
    mix_draw(&p, &seed, h, w, &d);
    out[0] = d.kind;
    out[1] = d.lambda;
    out[2] = d.x1;
    out[3] = d.y1;
    out[4] = d.x2;
    out[5] = d.y2;
}

/* Applies a decision (kind, lambda, x1, y1, x2, y2) to a float batch and
 * int64 labels; targets (n x num_classes) receive the soft labels. */
int hook_mix_apply(const double *dec, float *batch, uint32_t n, uint32_t h, uint32_t w,
                   uint32_t c, int nchw, const int64_t *labels, uint32_t num_classes,
                   float *targets)
{
    struct mix_decision d = {(enum mix_kind)(int)dec[0], dec[1], (uint32_t)dec[2],
                             (uint32_t)dec[3], (uint32_t)dec[4], (uint32_t)dec[5]};
    int rc = mix_one_hot(labels, n, num_classes, targets);
    if (rc < 0)
        return rc;
    float *scratch = malloc(sizeof(float) * ((size_t)h * w * c + num_classes));
    if (scratch == NULL)
        return -ENOMEM;
    mix_apply(&d, batch, n, h, w, c, nchw, targets, num_classes, scratch);
    free(scratch);
    return 0;
}

/* ---- whole pipeline steps, as a config names them ---- */

/* step NAME with parameters "key=v;key=[a,b]" (the config's, as text) into
 * s; its input's layout (nchw) as the chain would set it. */
static int step_of(const char *name, const char *spec, int nchw, struct step *s,
                   char *err, size_t errlen)
{
    char buf[512];
    struct step_args args = {.n = 0};
    if (strlen(spec) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        if (args.n == STEP_ARGS_MAX)
            return -EINVAL;
        struct step_arg *a = &args.a[args.n++];
        char *eq = strchr(item, '='), *v = item;
        memset(a, 0, sizeof(*a));
        if (eq) {
            *eq = '\0';
            a->key = item;
            v = eq + 1;
        }
        if (*v == '[') {
            char *end = strchr(++v, ']'), *save2 = NULL;
            if (end == NULL)
                return -EINVAL;
            *end = '\0';
            a->list = 1;
            for (char *e = strtok_r(v, ",", &save2); e; e = strtok_r(NULL, ",", &save2)) {
                if (a->n == STEP_ARG_VALUES_MAX)
                    return -EINVAL;
                a->v[a->n++] = e;
            }
        } else {
            a->v[a->n++] = v;
        }
    }
    int rc = step_init(s, name, &args, NULL, err, errlen);
    s->erase_nchw = nchw;
    return rc;
}

/* The seed the pipeline gives step index of a sample (pipeline.c's
 * run_steps): hash_mix64(hash_sample_seed(seed, epoch, id) + index). */
uint64_t hook_step_seed(uint64_t seed, uint64_t epoch, uint32_t id, uint32_t index)
{
    return hash_mix64(hash_sample_seed(seed, epoch, id) + index);
}

/* An augmentation step's decision for an h x w image from its seed, flat
 * into out (32 doubles):
 *   color_jitter          order[4], factor[4], on[4]
 *   random_grayscale      apply
 *   gaussian_blur         sigma
 *   random_rotation       angle
 *   random_affine         angle, tx, ty, scale, shear_x, shear_y
 *   the three policies    n, then n pairs (op, signed magnitude)
 *   random_erasing        top, left, h, w (h 0: nothing erased)
 * Returns 0, or -EINVAL (err says why). */
int hook_step_decide(const char *name, const char *spec, uint64_t seed, uint32_t h,
                     uint32_t w, double *out, char *err, size_t errlen)
{
    struct step s;
    struct step_decision d;
    int rc = step_of(name, spec, 0, &s, err, errlen);
    if (rc < 0)
        return rc;
    step_imgaug_decide(&s, seed, h, w, &d);
    memset(out, 0, 32 * sizeof(double));
    switch (s.kind) {
    case STEP_COLOR_JITTER:
        for (int f = 0; f < 4; f++) {
            out[f] = d.jitter.order[f];
            out[4 + f] = d.jitter.factor[f];
            out[8 + f] = d.jitter.on[f];
        }
        return 0;
    case STEP_RANDOM_GRAYSCALE:
        out[0] = d.apply;
        return 0;
    case STEP_GAUSSIAN_BLUR:
        out[0] = d.sigma;
        return 0;
    case STEP_RANDOM_ROTATION:
        out[0] = d.angle;
        return 0;
    case STEP_RANDOM_AFFINE:
        out[0] = d.affine.angle;
        out[1] = d.affine.tx;
        out[2] = d.affine.ty;
        out[3] = d.affine.scale;
        out[4] = d.affine.shear_x;
        out[5] = d.affine.shear_y;
        return 0;
    case STEP_AUTO_AUGMENT:
    case STEP_RAND_AUGMENT:
    case STEP_TRIVIAL_AUGMENT_WIDE:
        out[0] = d.nops;
        for (uint32_t i = 0; i < d.nops && i < 15; i++) {
            out[1 + 2 * i] = d.ops[i].op;
            out[2 + 2 * i] = d.ops[i].magnitude;
        }
        return 0;
    case STEP_RANDOM_ERASING:
        out[0] = d.box.top;
        out[1] = d.box.left;
        out[2] = d.box.h;
        out[3] = d.box.w;
        return 0;
    default:
        snprintf(err, errlen, "%s is not an image augmentation", name);
        return -EINVAL;
    }
}

/* Runs step NAME (spec as above) on an h x w x c image of dtype (uint8 or
 * float32; nchw: a float image's layout) with the per-sample seed, as the
 * pipeline does; out holds the output (same size). */
int hook_step_apply(const char *name, const char *spec, uint64_t seed, const void *in,
                    uint32_t h, uint32_t w, uint32_t c, uint32_t dtype, int nchw, void *out,
                    char *err, size_t errlen)
{
    struct step s;
    struct step_ctx ctx;
    int rc = step_of(name, spec, nchw, &s, err, errlen);
    if (rc < 0)
        return rc;
    size_t len = (size_t)h * w * c * proto_dtype_size(dtype);
    struct img src = {.fmt = IMG_PIXELS, .h = h, .w = w, .c = c, .dtype = dtype,
                      .data = (uint8_t *)(uintptr_t)in, .len = len, .cap = len,
                      .borrowed = 1};
    struct img dst = {.fmt = IMG_PIXELS, .data = out, .cap = len, .borrowed = 1};
    step_ctx_init(&ctx);
    ctx.seed = seed;
    rc = step_apply(&s, &ctx, &src, &dst);
    if (rc < 0)
        snprintf(err, errlen, "%s", ctx.err);
    step_ctx_free(&ctx);
    return rc;
}

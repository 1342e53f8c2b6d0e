/*
 * mixup and cutmix (see mix.h).
 */
#include "exact.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "draw.h"
#include "mix.h"

void mix_draw(const struct mix_params *p, uint64_t *st, uint32_t h, uint32_t w,
              struct mix_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->kind = MIX_NONE;
    d->lambda = 1.0;
    int mixup = p->mixup_alpha > 0.0, cutmix = p->cutmix_alpha > 0.0;
    if (!mixup && !cutmix)
        return;
    enum mix_kind kind = !mixup ? MIX_CUTMIX : !cutmix ? MIX_MIXUP
                         : draw_chance(st, p->switch_p) ? MIX_CUTMIX : MIX_MIXUP;
    if (!draw_chance(st, p->p))
        return;
    double alpha = kind == MIX_CUTMIX ? p->cutmix_alpha : p->mixup_alpha;
    double lambda = draw_beta(st, alpha, alpha);
    d->kind = kind;
    d->lambda = lambda;
    if (kind == MIX_MIXUP)
        return;
    int64_t rx = draw_below(st, w), ry = draw_below(st, h);
    double r = 0.5 * sqrt(1.0 - lambda);
    int64_t rw = (int64_t)(r * w), rh = (int64_t)(r * h);
    d->x1 = (uint32_t)(rx - rw < 0 ? 0 : rx - rw);
    d->y1 = (uint32_t)(ry - rh < 0 ? 0 : ry - rh);
    d->x2 = (uint32_t)(rx + rw > w ? w : rx + rw);
    d->y2 = (uint32_t)(ry + rh > h ? h : ry + rh);
    d->lambda = 1.0 - (double)((uint64_t)(d->x2 - d->x1) * (d->y2 - d->y1)) /
                          (double)((uint64_t)w * h);
}

int mix_one_hot(const int64_t *labels, uint32_t n, uint32_t num_classes, float *targets)
{
    int rc = 0;
    memset(targets, 0, sizeof(float) * n * num_classes);
    for (uint32_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= (int64_t)num_classes) {
            rc = -ERANGE;
            continue;
        }
        targets[(size_t)i * num_classes + (size_t)labels[i]] = 1.0f;
    }
    return rc;
}

/* dst = dst * lambda + other * (1 - lambda), each product in float32. */
static void blend_rows(float *dst, const float *other, size_t n, float lam, float rest)
{
    for (size_t i = 0; i < n; i++) {
        float a = dst[i] * lam, b = other[i] * rest;
        dst[i] = a + b;
    }
}

/* Copies the box of one sample into another. */
static void copy_box(float *dst, const float *src, const struct mix_decision *d, uint32_t h,
                     uint32_t w, uint32_t c, int nchw)
{
    size_t bw = d->x2 - d->x1;
    if (nchw) {
        for (uint32_t ch = 0; ch < c; ch++)
            for (uint32_t y = d->y1; y < d->y2; y++) {
                size_t at = ((size_t)ch * h + y) * w + d->x1;
                memcpy(dst + at, src + at, bw * sizeof(float));
            }
        return;
    }
    for (uint32_t y = d->y1; y < d->y2; y++) {
        size_t at = ((size_t)y * w + d->x1) * c;
        memcpy(dst + at, src + at, bw * c * sizeof(float));
    }
}

void mix_apply(const struct mix_decision *d, float *batch, uint32_t n, uint32_t h,
               uint32_t w, uint32_t c, int nchw, float *targets, uint32_t num_classes,
               float *scratch)
{
    if (d->kind == MIX_NONE || n == 0)
        return;
    size_t len = (size_t)h * w * c;
    float lam = (float)d->lambda, rest = (float)(1.0 - d->lambda);
    float *save = scratch, *save_t = scratch + len;
    /* The last sample is the first one's partner: keep its original. */
    memcpy(save, batch + (n - 1) * len, len * sizeof(float));
    memcpy(save_t, targets + (size_t)(n - 1) * num_classes, num_classes * sizeof(float));
    for (uint32_t i = n; i-- > 0;) {
        float *x = batch + i * len, *t = targets + (size_t)i * num_classes;
        const float *px = i ? x - len : save;
        const float *pt = i ? t - num_classes : save_t;
        if (d->kind == MIX_MIXUP)
            blend_rows(x, px, len, lam, rest);
        else
            copy_box(x, px, d, h, w, c, nchw);
        blend_rows(t, pt, num_classes, lam, rest);
    }
}

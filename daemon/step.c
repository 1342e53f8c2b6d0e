/*
 * Pipeline steps: parsing and validation of step declarations, canonical
 * names and fingerprints, dispatch to the per-step modules, image buffers,
 * and the splitmix64 helpers random steps draw their decisions from.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "step.h"
#include "step_impl.h"

#define STEP_SIZE_MAX 65535u
#define STEP_FLIP_DEFAULT_P 0.5

static const char *const step_names[STEP_KIND_MAX] = {
    [STEP_DECODE] = "decode",
    [STEP_RESIZE] = "resize",
    [STEP_CENTER_CROP] = "center_crop",
    [STEP_RANDOM_FLIP] = "random_flip",
};

/* ---- image buffers ---- */

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

/* ---- per-thread context ---- */

void step_ctx_init(struct step_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
}

void step_ctx_free(struct step_ctx *ctx)
{
    step_decode_ctx_free(ctx);
    ctx->err[0] = '\0';
}

int step_fail(struct step_ctx *ctx, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof(ctx->err), fmt, ap);
    va_end(ap);
    return rc;
}

int step_check_pixels(struct step_ctx *ctx, const struct img *in,
                      const char *step)
{
    if (in->fmt != IMG_PIXELS)
        return step_fail(ctx, -EINVAL, "%s: input is not decoded (add a decode step first)",
                         step);
    if (in->dtype != PROTO_DTYPE_U8)
        return step_fail(ctx, -EINVAL, "%s: input dtype %u is not uint8", step,
                         in->dtype);
    if (in->h == 0 || in->w == 0 || in->c == 0)
        return step_fail(ctx, -EINVAL, "%s: empty input image (%ux%ux%u)", step,
                         in->h, in->w, in->c);
    size_t need;
    if (__builtin_mul_overflow((size_t)in->h * in->w, (size_t)in->c, &need) ||
        in->len < need)
        return step_fail(ctx, -EINVAL, "%s: input holds %zu bytes, %ux%ux%u needs more",
                         step, in->len, in->h, in->w, in->c);
    return 0;
}

int step_out_pixels(struct step_ctx *ctx, struct img *out, uint32_t h,
                    uint32_t w, uint32_t c)
{
    size_t len = (size_t)h * w * c;
    if (img_reserve(out, len) < 0)
        return step_fail(ctx, -ENOMEM, "out of memory for a %ux%ux%u image", h, w, c);
    out->fmt = IMG_PIXELS;
    out->h = h;
    out->w = w;
    out->c = c;
    out->dtype = PROTO_DTYPE_U8;
    out->len = len;
    return 0;
}

/* ---- declarations ---- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A decimal integer in 1..STEP_SIZE_MAX, digits only. */
static int parse_size(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (uint32_t)(*s - '0');
        if (v > STEP_SIZE_MAX)
            return -EINVAL;
    }
    if (v == 0)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_prob(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno || !(v >= 0.0 && v <= 1.0))
        return -EINVAL;
    *out = v + 0.0; /* -0 -> +0, so equal steps fingerprint alike */
    return 0;
}

int step_init(struct step *s, const char *name, const char *arg, char *err,
              size_t errlen)
{
    enum step_kind kind = STEP_KIND_MAX;

    if (name != NULL) {
        for (int k = 0; k < STEP_KIND_MAX; k++) {
            if (strcmp(name, step_names[k]) == 0) {
                kind = (enum step_kind)k;
                break;
            }
        }
    }
    if (kind == STEP_KIND_MAX) {
        set_err(err, errlen,
                "unknown step '%s' (known steps: decode, resize, center_crop, random_flip)",
                name ? name : "");
        return -EINVAL;
    }
    if (arg != NULL && *arg == '\0')
        arg = NULL; /* `- NAME:` with an empty value */

    memset(s, 0, sizeof(*s));
    s->kind = kind;
    switch (kind) {
    case STEP_DECODE:
        if (arg != NULL) {
            set_err(err, errlen, "step 'decode' takes no argument (got '%s')", arg);
            return -EINVAL;
        }
        return 0;
    case STEP_RESIZE:
    case STEP_CENTER_CROP:
        if (arg == NULL) {
            set_err(err, errlen, "step '%s' needs a size in pixels (1..%u)",
                    step_names[kind], STEP_SIZE_MAX);
            return -EINVAL;
        }
        if (parse_size(arg, &s->size) < 0) {
            set_err(err, errlen, "step '%s': size '%s' is not an integer in 1..%u",
                    step_names[kind], arg, STEP_SIZE_MAX);
            return -EINVAL;
        }
        return 0;
    case STEP_RANDOM_FLIP:
        s->p = STEP_FLIP_DEFAULT_P;
        if (arg != NULL && parse_prob(arg, &s->p) < 0) {
            set_err(err, errlen,
                    "step 'random_flip': probability '%s' is not a number in [0, 1]",
                    arg);
            return -EINVAL;
        }
        return 0;
    case STEP_KIND_MAX:
        break;
    }
    return -EINVAL;
}

const char *step_name(enum step_kind kind)
{
    if ((unsigned)kind >= STEP_KIND_MAX)
        return "unknown";
    return step_names[kind];
}

int step_is_random(const struct step *s)
{
    return s->kind == STEP_RANDOM_FLIP;
}

void step_describe(const struct step *s, char *buf, size_t len)
{
    if (len == 0)
        return;
    switch (s->kind) {
    case STEP_RESIZE:
    case STEP_CENTER_CROP:
        snprintf(buf, len, "%s(%u)", step_names[s->kind], s->size);
        break;
    case STEP_RANDOM_FLIP:
        snprintf(buf, len, "%s(%g)", step_names[s->kind], s->p);
        break;
    default:
        snprintf(buf, len, "%s", step_name(s->kind));
        break;
    }
}

uint64_t step_fingerprint(const struct step *s, uint64_t h)
{
    h = step_mix64(h + 0x9e3779b97f4a7c15ULL * ((uint64_t)s->kind + 1));
    switch (s->kind) {
    case STEP_RESIZE:
    case STEP_CENTER_CROP:
        h = step_mix64(h ^ s->size);
        break;
    case STEP_RANDOM_FLIP: {
        uint64_t bits;
        double p = s->p + 0.0;
        memcpy(&bits, &p, sizeof(bits));
        h = step_mix64(h ^ bits);
        break;
    }
    default:
        break;
    }
    return h;
}

uint32_t step_out_dtype(const struct step *s, uint32_t in_dtype)
{
    /* Every step so far keeps uint8; decode makes it. */
    return s->kind == STEP_DECODE ? PROTO_DTYPE_U8 : in_dtype;
}

void step_out_shape(const struct step *s, uint32_t in_h, uint32_t in_w,
                    uint32_t in_c, uint32_t *h, uint32_t *w, uint32_t *c)
{
    switch (s->kind) {
    case STEP_DECODE:
        *h = 0;
        *w = 0;
        *c = 3;
        return;
    case STEP_RESIZE: {
        uint64_t rh = 0, rw = 0;
        if (in_h && in_w)
            step_resize_shape(s->size, in_h, in_w, &rh, &rw);
        if (rh > UINT32_MAX || rw > UINT32_MAX)
            rh = rw = 0;
        *h = (uint32_t)rh;
        *w = (uint32_t)rw;
        *c = in_c;
        return;
    }
    case STEP_CENTER_CROP:
        *h = s->size;
        *w = s->size;
        *c = in_c;
        return;
    default:
        *h = in_h;
        *w = in_w;
        *c = in_c;
        return;
    }
}

int step_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
               struct img *out)
{
    switch (s->kind) {
    case STEP_DECODE:
        return step_decode_apply(ctx, in, out);
    case STEP_RESIZE:
        return step_resize_apply(s->size, ctx, in, out);
    case STEP_CENTER_CROP:
        return step_crop_apply(s->size, ctx, in, out);
    case STEP_RANDOM_FLIP:
        return step_flip_apply(s->p, ctx, in, out);
    default:
        return step_fail(ctx, -EINVAL, "unknown step kind %d", (int)s->kind);
    }
}

/* ---- splitmix64 ---- */

uint64_t step_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

double step_rand01(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ULL;
    return (double)(step_mix64(*state) >> 11) * 0x1.0p-53;
}

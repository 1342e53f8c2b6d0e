/*
 * normalize and to_float: uint8 pixels to float32, in NHWC or NCHW.
 *
 * torchvision's ToTensor divides by 255 in float32 and Normalize then
 * computes (x - mean) / std in float32 (mean and std as float32 tensors),
 * each operation rounded to float32. A pixel has 256 possible values, so
 * the results per channel are a 256-entry table computed with exactly
 * those float32 operations (no fused multiply-add, no reciprocal): the
 * output is bit-identical to torchvision's. to_float is mean 0 and std 1,
 * which leave x / 255 unchanged.
 *
 * Outputs are written with memcpy (the batch slot a last step writes into
 * need not be 4-byte aligned).
 */
#include <errno.h>
#include <string.h>

#include "proto.h"
#include "step.h"
#include "step_impl.h"

#if defined(__GNUC__) && !defined(__clang__)
#define NZ_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NZ_NO_CONTRACT
#endif

NZ_NO_CONTRACT
static void nz_table(float *t, float mean, float std)
{
    for (int v = 0; v < 256; v++) {
        volatile float x = (float)v / 255.0f; /* rounded to float32 here */
        volatile float d = x - mean;
        t[v] = d / std;
    }
}

static inline void nz_store(uint8_t *p, float v)
{
    memcpy(p, &v, sizeof(v));
}

int step_normalize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                         struct img *out)
{
    const char *who = step_name(s->kind);
    int rc = step_check_pixels(ctx, in, who);
    if (rc < 0)
        return rc;
    uint32_t h = in->h, w = in->w, c = in->c;
    if (c > STEP_CHANNELS_MAX || (s->nmean != 1 && s->nmean != c))
        return step_fail(ctx, -EINVAL, "%s: %u values for %u channels", who, s->nmean, c);
    size_t n = (size_t)h * w, len = n * c * sizeof(float);
    rc = img_reserve(out, len);
    if (rc < 0)
        return step_fail(ctx, rc, "%s: no room for a %ux%ux%u float32 image", who, h, w, c);

    float tab[STEP_CHANNELS_MAX][256];
    for (uint32_t ch = 0; ch < c; ch++) {
        uint32_t k = s->nmean == 1 ? 0 : ch;
        nz_table(tab[ch], s->mean[k], s->std[k]);
    }

    const uint8_t *src = in->data;
    uint8_t *dst = out->data;
    if (s->layout == STEP_LAYOUT_NCHW) {
        size_t plane = n * sizeof(float);
        if (c == 3) {
            uint8_t *d0 = dst, *d1 = dst + plane, *d2 = dst + 2 * plane;
            for (size_t i = 0; i < n; i++, src += 3) {
                nz_store(d0 + i * 4, tab[0][src[0]]);
                nz_store(d1 + i * 4, tab[1][src[1]]);
                nz_store(d2 + i * 4, tab[2][src[2]]);
            }
        } else {
            for (uint32_t ch = 0; ch < c; ch++)
                for (size_t i = 0; i < n; i++)
                    nz_store(dst + ch * plane + i * 4, tab[ch][src[i * c + ch]]);
        }
    } else if (c == 3) {
        for (size_t i = 0; i < n; i++, src += 3, dst += 12) {
            nz_store(dst, tab[0][src[0]]);
            nz_store(dst + 4, tab[1][src[1]]);
            nz_store(dst + 8, tab[2][src[2]]);
        }
    } else {
        for (size_t i = 0; i < n * c; i++)
            nz_store(dst + i * 4, tab[i % c][src[i]]);
    }
    out->fmt = IMG_PIXELS;
    out->h = h;
    out->w = w;
    out->c = c;
    out->dtype = PROTO_DTYPE_F32;
    out->len = len;
    out->src_h = out->src_w = out->scale_num = out->scale_den = 0;
    return 0;
}

/*
 * Private interface between step.c (parsing, dispatch) and the per-step
 * modules of daemon/steps/: decode.c, resize.c (resize and the resampler
 * random_resized_crop uses), crop.c (center_crop, pad), rrc.c, flip.c,
 * normalize.c (normalize, to_float). Not for use outside
 * the step modules and their tests; the public contract is step.h.
 */
#ifndef PRESTO_STEP_IMPL_H
#define PRESTO_STEP_IMPL_H

#include <stdint.h>

#include "proto.h"
#include "erase.h"
#include "step.h"

/* Writes a message into ctx->err; returns rc so callers can
 * `return step_fail(ctx, -EINVAL, ...)`. */
int step_fail(struct step_ctx *ctx, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks that in holds uint8 pixels (-EINVAL with a message naming the step
 * otherwise). */
int step_check_pixels(struct step_ctx *ctx, const struct img *in,
                      const char *step);

/* Makes out an h x w x c image of dtype (uint8 or float32) with room for
 * its pixels (and clears the dct_scale fields). -ENOMEM, or -ENOSPC when out
 * is borrowed and too small. */
int step_out_pixels_as(struct step_ctx *ctx, struct img *out, uint32_t h,
                       uint32_t w, uint32_t c, uint32_t dtype);

static inline int step_out_pixels(struct step_ctx *ctx, struct img *out, uint32_t h,
                                  uint32_t w, uint32_t c)
{
    return step_out_pixels_as(ctx, out, h, w, c, PROTO_DTYPE_U8);
}

/* ---- decode ---- */

int step_decode_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out);
/* Releases the TurboJPEG handle in ctx->tj, if any. */
void step_decode_ctx_free(struct step_ctx *ctx);
/* The TurboJPEG scaling factor decode with dct_scale uses for an h x w
 * JPEG: the smallest of 1/8, 1/4, 3/8, 1/2 whose output still covers 5/4
 * of what the resize after it makes, else 1/1. */
void step_decode_scale(const struct step *s, uint32_t h, uint32_t w, uint32_t *num,
                       uint32_t *den);

/* ---- resize and resampling ---- */

/* torchvision's Resize(size) rule: the shorter side becomes size, the longer
 * int(size * long / short). Results above UINT32_MAX are returned as is
 * (64-bit) for the caller to reject. */
void step_resize_shape(uint32_t size, uint32_t in_h, uint32_t in_w,
                       uint64_t *h, uint64_t *w);
int step_resize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out);

/* Kernels resize can run; all give the same bytes. AUTO is the fastest the
 * CPU supports (what the steps use); the others exist so tests can check
 * each path. */
enum step_resize_isa {
    STEP_RESIZE_ISA_AUTO = 0,
    STEP_RESIZE_ISA_SCALAR, /* portable C */
    STEP_RESIZE_ISA_AVX2,   /* x86-64 with AVX2 */
};
/* Whether this build and CPU can run isa (AUTO and SCALAR always can). */
int step_resize_isa_supported(enum step_resize_isa isa);
/* Resize to a shorter side of size with a chosen kernel; -ENOTSUP (ctx->err
 * set) when step_resize_isa_supported(isa) is false. */
int step_resize_apply_isa(uint32_t size, enum step_resize_isa isa,
                          struct step_ctx *ctx, const struct img *in,
                          struct img *out);

/* What a resampling reads: an h x w x c uint8 view whose rows are stride
 * bytes apart, and the box of it that maps onto the output, in Pillow's
 * terms (Image.resize(size, BILINEAR, box)): 0 <= x0 < x1 <= w and
 * 0 <= y0 < y1 <= h, fractional allowed; the filter reads pixels outside
 * the box but inside the view. */
struct step_resample_src {
    const uint8_t *data;
    size_t stride;
    uint32_t h, w, c;
    double x0, y0, x1, y1;
    int mirror; /* the output mirrored left-right (random_flip fused in) */
    /* normalize (or to_float) fused in: each output row goes through it,
     * out is float32 (norm_tables from step_norm_prepare); NULL: none */
    const struct step *norm;
    const struct step_norm *norm_tables;
};
/* The whole of in, box and all. */
void step_resample_src_img(struct step_resample_src *src, const struct img *in);
/* Pillow's antialiased bilinear resampling of src to out_h x out_w, bit-
 * exact, with a chosen kernel. who names the step in messages. */
int step_resample(struct step_ctx *ctx, enum step_resize_isa isa,
                  const struct step_resample_src *src, uint32_t out_h, uint32_t out_w,
                  struct img *out, const char *who);

/* ---- center_crop, pad ---- */

int step_crop_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                    struct img *out);
int step_pad_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                   struct img *out);

/* ---- random_resized_crop ---- */

/* A crop box: top-left corner (top, left) and size h x w. */
struct step_box {
    uint32_t top, left, h, w;
};
/* torchvision's RandomResizedCrop.get_params for an h x w image, drawing
 * from seed: up to 10 attempts (area fraction uniform in scale, aspect
 * ratio log-uniform in ratio, rounded half to even, kept when it fits,
 * then a uniform position), else the centre crop of the whole image with
 * its ratio clamped into ratio. Returns the attempts it took (1..10; 11:
 * the fallback). */
int step_rrc_params(const struct step *s, uint64_t seed, uint32_t h, uint32_t w,
                    struct step_box *box);
int step_rrc_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                   struct img *out);


/* ---- random_flip ---- */

/* One row of w pixels of c bytes, mirrored from src into dst (not in place). */
void step_flip_row(const uint8_t *src, uint8_t *dst, uint32_t w, uint32_t c);
int step_flip_apply(double p, struct step_ctx *ctx, const struct img *in,
                    struct img *out);

/* ---- normalize, to_float ---- */

/* float32 ((x / 255) - mean[ch]) / std[ch] in s->layout; to_float is
 * mean 0, std 1 (exactly x / 255). */
int step_normalize_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                         struct img *out);
/* normalize's (or to_float's) per-channel tables for c channels, the
 * float32 value of each byte (kept per thread for the last ones asked);
 * NULL (ctx->err set) when s has no values for c channels. */
struct step_norm; /* normalize.c's tables (and kernel choice) for one (mean, std, c) */
const struct step_norm *step_norm_prepare(const struct step *s, struct step_ctx *ctx,
                                          uint32_t c);
/* n pixels of c bytes at src through tables into dst, an image of total
 * pixels in s->layout, as its pixels [at, at + n): what normalize writes
 * for them. */
void step_norm_pixels(const struct step *s, const struct step_norm *tables, const uint8_t *src,
                      size_t n, uint32_t c, uint8_t *dst, size_t total, size_t at);
/* step_norm_pixels of the n pixels at src mirrored (right to left), where a
 * kernel does that in one pass (NCHW RGB, n a multiple of 8, the arithmetic
 * kernel): 1 when done, 0 when the caller is to mirror them first. */
int step_norm_pixels_mirror(const struct step *s, const struct step_norm *tables,
                            const uint8_t *src, size_t n, uint32_t c, uint8_t *dst, size_t total,
                            size_t at);

/* ---- the image augmentations (imgaug.c) ---- */

/* One sample's decision of an augmentation step, drawn from its seed:
 * what torchvision's get_params (or its forward's draws) decides. */
struct step_decision {
    int apply;                          /* random_grayscale: whether it applies */
    struct color_jitter jitter;         /* color_jitter: order and factors */
    double sigma;                       /* gaussian_blur */
    double angle;                       /* random_rotation */
    struct geom_affine_decision affine; /* random_affine */
    uint32_t nops;                      /* the policies: the ops, in order */
    struct aug_choice ops[AUG_OPS_MAX];
    struct erase_box box;               /* random_erasing (h 0: nothing erased) */
    uint64_t state;                     /* the draws' state after the decision
                                           (random_erasing's value random goes on) */
};

/* The decision of augmentation step s for an h x w image from seed (the
 * step's per-sample seed, struct step_ctx). */
void step_imgaug_decide(const struct step *s, uint64_t seed, uint32_t h, uint32_t w,
                        struct step_decision *d);
/* Applies s to in with a given decision into out. */
int step_imgaug_apply_decision(const struct step *s, struct step_ctx *ctx,
                               const struct step_decision *d, const struct img *in,
                               struct img *out);
/* Draws the decision from ctx->seed and applies it. */
int step_imgaug_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                      struct img *out);
/* ---- the audio steps (sound.c) ---- */

/* The audio parameters' defaults (every step has them, audio or not). */
void step_sound_defaults(struct step *s);
/* Checks an audio step's parameters together; 0 or -EINVAL with err. */
int step_sound_init(struct step *s, char *err, size_t errlen);
/* step_chain_init's part for an audio step: *rate is the rate the steps
 * before it give (0: each file's own), updated for the next; fills in
 * mel_spectrogram's sample_rate. 0, or -EINVAL with err. */
int step_sound_chain(struct step *s, uint32_t *rate, char *err, size_t errlen);
/* step_out_shape of an audio step (c channels, h rows, w frames). */
void step_sound_shape(const struct step *s, uint32_t in_h, uint32_t in_w, uint32_t in_c,
                      uint32_t *h, uint32_t *w, uint32_t *c);
int step_sound_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                     struct img *out);
/* Releases ctx->sound. */
void step_sound_ctx_free(struct step_ctx *ctx);

#endif

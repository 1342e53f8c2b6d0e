/*
 * Private interface between step.c (parsing, dispatch) and the per-step
 * modules step_decode.c, step_resize.c, step_crop.c, step_flip.c. Not for
 * use outside the step modules; the public contract is step.h.
 */
#ifndef PRESTO_STEP_IMPL_H
#define PRESTO_STEP_IMPL_H

#include <stdint.h>

#include "step.h"

/* Writes a message into ctx->err; returns rc so callers can
 * `return step_fail(ctx, -EINVAL, ...)`. */
int step_fail(struct step_ctx *ctx, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks that in holds uint8 pixels (-EINVAL with a message naming the step
 * otherwise). */
int step_check_pixels(struct step_ctx *ctx, const struct img *in,
                      const char *step);

/* Makes out an h x w x c uint8 image with room for its pixels. */
int step_out_pixels(struct step_ctx *ctx, struct img *out, uint32_t h,
                    uint32_t w, uint32_t c);

int step_decode_apply(struct step_ctx *ctx, const struct img *in,
                      struct img *out);
/* Releases the TurboJPEG handle in ctx->tj, if any. */
void step_decode_ctx_free(struct step_ctx *ctx);

/* torchvision's Resize(size) rule: the shorter side becomes size, the longer
 * int(size * long / short). Results above UINT32_MAX are returned as is
 * (64-bit) for the caller to reject. */
void step_resize_shape(uint32_t size, uint32_t in_h, uint32_t in_w,
                       uint64_t *h, uint64_t *w);
int step_resize_apply(uint32_t size, struct step_ctx *ctx,
                      const struct img *in, struct img *out);

/* Kernels resize can run; all give the same bytes. AUTO is the fastest the
 * CPU supports (what step_resize_apply uses); the others exist so tests can
 * check each path. */
enum step_resize_isa {
    STEP_RESIZE_ISA_AUTO = 0,
    STEP_RESIZE_ISA_SCALAR, /* portable C */
    STEP_RESIZE_ISA_AVX2,   /* x86-64 with AVX2 */
};
/* Whether this build and CPU can run isa (AUTO and SCALAR always can). */
int step_resize_isa_supported(enum step_resize_isa isa);
/* step_resize_apply with a chosen kernel; -ENOTSUP (ctx->err set) when
 * step_resize_isa_supported(isa) is false. */
int step_resize_apply_isa(uint32_t size, enum step_resize_isa isa,
                          struct step_ctx *ctx, const struct img *in,
                          struct img *out);

int step_crop_apply(uint32_t size, struct step_ctx *ctx, const struct img *in,
                    struct img *out);

int step_flip_apply(double p, struct step_ctx *ctx, const struct img *in,
                    struct img *out);

#endif

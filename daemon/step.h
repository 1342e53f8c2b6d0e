/*
 * Pipeline steps: pure functions of one sample.
 *
 * A step is declared in the config as `- NAME` or `- NAME: ARG` and
 * validated by step_init() at config load. Deterministic steps may run
 * offline (before the split point, once per sample, result cached); random
 * steps (step_is_random) draw every decision from the per-sample seed in
 * struct step_ctx, so (stream seed, epoch, sample id) fixes the output.
 *
 * Images are HWC, row-major, uint8 (dtype PROTO_DTYPE_U8) unless a step says
 * otherwise. An encoded image (the source file's bytes) has fmt IMG_ENCODED
 * and its byte count in len.
 */
#ifndef PRESTO_STEP_H
#define PRESTO_STEP_H

#include <stddef.h>
#include <stdint.h>

enum img_fmt { IMG_ENCODED = 0, IMG_PIXELS = 1 };

struct img {
    enum img_fmt fmt;
    uint32_t h, w, c;  /* IMG_PIXELS only */
    uint32_t dtype;    /* PROTO_DTYPE_*; IMG_PIXELS only */
    uint8_t *data;
    size_t len;        /* bytes of data in use */
    size_t cap;        /* bytes allocated (owned buffers only) */
    int borrowed;      /* data is someone else's, cap bytes long: never grown */
};

/* Makes sure img->data can hold len bytes (reallocating an owned buffer);
 * returns 0, -ENOMEM, or -ENOSPC when a borrowed buffer is too small. */
int img_reserve(struct img *im, size_t len);
void img_free(struct img *im);

enum step_kind {
    STEP_DECODE,
    STEP_RESIZE,      /* ARG: shorter side in pixels */
    STEP_CENTER_CROP, /* ARG: square side in pixels */
    STEP_RANDOM_FLIP, /* ARG: probability of a horizontal flip, default 0.5 */
    STEP_KIND_MAX
};

struct step {
    enum step_kind kind;
    uint32_t size; /* resize, center_crop */
    double p;      /* random_flip */
};

/* Per-worker-thread state a step may use; one per thread, never shared. */
struct step_ctx {
    uint64_t seed;          /* per-sample seed for random steps */
    void *tj;               /* TurboJPEG decompressor, created lazily */
    uint64_t max_pixels;    /* decode refuses larger images (0 = no limit) */
    char err[256];          /* message when a step fails */
};

void step_ctx_init(struct step_ctx *ctx);
void step_ctx_free(struct step_ctx *ctx);

/* Parses NAME with optional ARG (NULL when absent). Returns 0, or -EINVAL
 * with a message in err naming what is wrong. */
int step_init(struct step *s, const char *name, const char *arg, char *err,
              size_t errlen);
const char *step_name(enum step_kind kind);
int step_is_random(const struct step *s);
/* Writes a canonical "name(arg)" text of the step, for logs and fingerprints. */
void step_describe(const struct step *s, char *buf, size_t len);
/* Mixes the step's kind and parameters into a 64-bit fingerprint. */
uint64_t step_fingerprint(const struct step *s, uint64_t h);

/* Output shape for a given input shape; 0 in h/w means "depends on the
 * image" (decode, resize). c is 3 after decode. */
void step_out_shape(const struct step *s, uint32_t in_h, uint32_t in_w,
                    uint32_t in_c, uint32_t *h, uint32_t *w, uint32_t *c);

/* Output dtype (PROTO_DTYPE_*) for a given input dtype. */
uint32_t step_out_dtype(const struct step *s, uint32_t in_dtype);

/* Runs the step: reads in, writes out (out is reused between calls and grown
 * with img_reserve). Returns 0, or a negative errno with ctx->err set
 * (-EBADMSG for a corrupt or non-JPEG input, -E2BIG for an image over
 * max_pixels, -EINVAL for a wrong input format). */
int step_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
               struct img *out);

/* Mixing and random numbers for seeds: splitmix64. */
uint64_t step_mix64(uint64_t x);
/* A uniform double in [0, 1) from *state, advancing it. */
double step_rand01(uint64_t *state);

#endif

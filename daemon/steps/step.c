/*
 * Pipeline steps: parsing and validation of step declarations (a table of
 * parameters per step), pipeline checks, canonical descriptions and
 * fingerprints, shapes, and dispatch to the per-step modules.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stddef.h>

#include "audio.h"
#include "blur.h"
#include "hash.h"
#include "jpeg_roi.h"
#include "proto.h"
#include "step.h"
#include "step_impl.h"

static const char *const step_names[STEP_KIND_MAX] = {
    [STEP_DECODE] = "decode",
    [STEP_RESIZE] = "resize",
    [STEP_CENTER_CROP] = "center_crop",
    [STEP_RANDOM_FLIP] = "random_flip",
    [STEP_RANDOM_RESIZED_CROP] = "random_resized_crop",
    [STEP_PAD] = "pad",
    [STEP_NORMALIZE] = "normalize",
    [STEP_TO_FLOAT] = "to_float",
    [STEP_COLOR_JITTER] = "color_jitter",
    [STEP_RANDOM_GRAYSCALE] = "random_grayscale",
    [STEP_GAUSSIAN_BLUR] = "gaussian_blur",
    [STEP_RANDOM_ROTATION] = "random_rotation",
    [STEP_RANDOM_AFFINE] = "random_affine",
    [STEP_AUTO_AUGMENT] = "auto_augment",
    [STEP_RAND_AUGMENT] = "rand_augment",
    [STEP_TRIVIAL_AUGMENT_WIDE] = "trivial_augment_wide",
    [STEP_RANDOM_ERASING] = "random_erasing",
    [STEP_MIXUP] = "mixup",
    [STEP_CUTMIX] = "cutmix",
    [STEP_DECODE_AUDIO] = "decode_audio",
    [STEP_RESAMPLE] = "resample",
    [STEP_TIME_CROP] = "time_crop",
    [STEP_RANDOM_TIME_CROP] = "random_time_crop",
    [STEP_MEL_SPECTROGRAM] = "mel_spectrogram",
    [STEP_AMPLITUDE_TO_DB] = "amplitude_to_db",
    [STEP_TIME_MASK] = "time_mask",
    [STEP_FREQUENCY_MASK] = "frequency_mask",
    [STEP_RANDOM_GAIN] = "random_gain",
};

static const char *const layout_names[] = {"nhwc", "nchw"};

/* ---- per-thread context ---- */

void step_ctx_init(struct step_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
}

void step_ctx_free(struct step_ctx *ctx)
{
    step_decode_ctx_free(ctx);
    img_free(&ctx->aux);
    roi_decoder_free(ctx->roi);
    ctx->roi = NULL;
    step_sound_ctx_free(ctx);
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

int step_out_pixels_as(struct step_ctx *ctx, struct img *out, uint32_t h,
                       uint32_t w, uint32_t c, uint32_t dtype)
{
    size_t len = (size_t)h * w * c * proto_dtype_size(dtype);
    int rc = img_reserve(out, len);
    if (rc < 0) /* -ENOSPC: a borrowed buffer (a batch slot) too small */
        return step_fail(ctx, rc, "no room for a %ux%ux%u%s image", h, w, c,
                         dtype == PROTO_DTYPE_U8 ? "" : " float32");
    out->fmt = IMG_PIXELS;
    out->h = h;
    out->w = w;
    out->c = c;
    out->dtype = dtype;
    out->len = len;
    out->rate = 0;
    out->src_h = out->src_w = out->scale_num = out->scale_den = 0;
    return 0;
}

/* ---- parameters ---- */

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

/* A bounded string builder. */
struct sbuf {
    char *p;
    size_t len, pos;
};

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->pos >= b->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->pos, b->len - b->pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->pos += (size_t)n;
}

enum param_type {
    P_SIZE,    /* N | [H, W], each in 1..STEP_SIZE_MAX: h, w (and shorter) */
    P_PROB,    /* a number in [0, 1]: p */
    P_BOOL,    /* true | false: dct_scale */
    P_MODE,    /* rgb | grey: channels */
    P_LAYOUT,  /* nhwc | nchw: layout */
    P_SCALE,   /* [lo, hi], 0 < lo <= hi: scale */
    P_RATIO,   /* [lo, hi], 0 < lo <= hi: ratio */
    P_PADDING, /* N | [LR, TB] | [L, T, R, B], each in 0..STEP_SIZE_MAX: pad */
    P_FILL,    /* V | [V, ...] (up to STEP_CHANNELS_MAX), each in 0..255: fill */
    P_MEAN,    /* X | [X, ...] (up to STEP_CHANNELS_MAX), finite: mean */
    P_STD,     /* X | [X, ...] (up to STEP_CHANNELS_MAX), finite, not 0: std */
    /* the image augmentations */
    P_JITTER,  /* X >= 0: [max(0, 1 - X), 1 + X], or [LO, HI], 0 <= LO <= HI */
    P_HUE,     /* X in [0, 0.5]: [-X, X], or [LO, HI], -0.5 <= LO <= HI <= 0.5 */
    P_DEGREES, /* X >= 0: [-X, X], or [LO, HI]; within -360..360 */
    P_TRANSLATE, /* [A, B], each in [0, 1] */
    P_AFFINE_SCALE, /* [LO, HI], 0 < LO <= HI <= 100 */
    P_SHEAR,   /* X >= 0: x in [-X, X]; [LO, HI]: x; [XLO, XHI, YLO, YHI]; -180..180 */
    P_INTERP,  /* nearest | bilinear */
    P_CENTER,  /* [X, Y], finite */
    P_KSIZE,   /* N | [KX, KY], odd, 1..BLUR_KERNEL_MAX */
    P_SIGMA,   /* X > 0, or [LO, HI] with 0 < LO <= HI, at most 1000 */
    P_POLICY,  /* imagenet */
    P_NUM_OPS, /* 1..AUG_OPS_MAX */
    P_MAGNITUDE, /* 0..AUG_BINS_MAX - 1 (below num_magnitude_bins) */
    P_BINS,    /* 2..AUG_BINS_MAX */
    P_ERASE_VALUE, /* X | [X, ...] (up to STEP_CHANNELS_MAX), finite, or random */
    P_ALPHA,   /* a number > 0: alpha */
    P_CLASSES, /* an integer in 1..PROTO_LABEL_CLASSES_MAX: num_classes */
    P_SWITCH,  /* a number in [0, 1]: switch_p */
    /* Generic ones, written at off in struct step, within [lo, hi]: */
    P_U32,     /* an integer */
    P_F64,     /* a number */
    P_ENUM,    /* one of names (its index) as uint32_t; P_BOOL's false | true too */
    P_RANGE,   /* [LO, HI] of numbers, LO <= HI: two doubles */
};

struct param {
    const char *name;
    enum param_type type;
    int required;
    /* P_U32, P_F64, P_ENUM, P_RANGE: */
    size_t off;
    double lo, hi;
    const char *const *names; /* P_ENUM: NULL-terminated */
    int which; /* P_JITTER: the enum color_jitter_fn it sets */
};

#define AU(f) offsetof(struct step, au.f)
static const char *const no_yes[] = {"false", "true", NULL};
static const char *const align_names[] = {"start", "center", NULL};
static const char *const pad_names[] = {"end", "center", "random", NULL};
static const char *const audio_dtype_names[] = {"float32", "int16", NULL};
static const char *const pad_mode_names[] = {"reflect", "constant", "replicate", "circular",
                                             NULL};
static const char *const norm_names[] = {"none", "slaney", NULL};
static const char *const mel_scale_names[] = {"htk", "slaney", NULL};
static const char *const normalized_names[] = {"false", "window", "frame_length", NULL};
static const char *const stype_names[] = {"power", "magnitude", NULL};
#define AUDIO_LENGTH_MAX (1u << 30)

#define PARAMS_MAX 13
/* Per step: its parameters, the first one being `- NAME: VALUE`'s unless
 * no_main. */
static const struct step_params {
    struct param p[PARAMS_MAX];
    int no_main;
} step_params[STEP_KIND_MAX] = {
    [STEP_DECODE] = {{{"mode", P_MODE, 0}, {"dct_scale", P_BOOL, 0}}, 0},
    [STEP_RESIZE] = {{{"size", P_SIZE, 1}}, 0},
    [STEP_CENTER_CROP] = {{{"size", P_SIZE, 1}}, 0},
    [STEP_RANDOM_FLIP] = {{{"p", P_PROB, 0}}, 0},
    [STEP_RANDOM_RESIZED_CROP] = {{{"size", P_SIZE, 1}, {"scale", P_SCALE, 0},
                                   {"ratio", P_RATIO, 0}}, 0},
    [STEP_PAD] = {{{"padding", P_PADDING, 1}, {"fill", P_FILL, 0}}, 0},
    [STEP_NORMALIZE] = {{{"mean", P_MEAN, 1}, {"std", P_STD, 1},
                         {"layout", P_LAYOUT, 0}}, 1},
    [STEP_TO_FLOAT] = {{{"layout", P_LAYOUT, 0}}, 0},
    [STEP_COLOR_JITTER] = {{{"brightness", P_JITTER, 0, .which = JITTER_BRIGHTNESS},
                            {"contrast", P_JITTER, 0, .which = JITTER_CONTRAST},
                            {"saturation", P_JITTER, 0, .which = JITTER_SATURATION},
                            {"hue", P_HUE, 0, .which = JITTER_HUE}}, 0},
    [STEP_RANDOM_GRAYSCALE] = {{{"p", P_PROB, 0}}, 0},
    [STEP_GAUSSIAN_BLUR] = {{{"kernel_size", P_KSIZE, 1}, {"sigma", P_SIGMA, 0}}, 0},
    [STEP_RANDOM_ROTATION] = {{{"degrees", P_DEGREES, 1}, {"interpolation", P_INTERP, 0},
                               {"fill", P_FILL, 0}}, 0},
    [STEP_RANDOM_AFFINE] = {{{"degrees", P_DEGREES, 1}, {"translate", P_TRANSLATE, 0},
                             {"scale", P_AFFINE_SCALE, 0}, {"shear", P_SHEAR, 0},
                             {"interpolation", P_INTERP, 0}, {"fill", P_FILL, 0},
                             {"center", P_CENTER, 0}}, 0},
    [STEP_AUTO_AUGMENT] = {{{"policy", P_POLICY, 0}, {"interpolation", P_INTERP, 0},
                            {"fill", P_FILL, 0}}, 0},
    [STEP_RAND_AUGMENT] = {{{"num_ops", P_NUM_OPS, 0}, {"magnitude", P_MAGNITUDE, 0},
                            {"num_magnitude_bins", P_BINS, 0},
                            {"interpolation", P_INTERP, 0}, {"fill", P_FILL, 0}}, 0},
    [STEP_TRIVIAL_AUGMENT_WIDE] = {{{"num_magnitude_bins", P_BINS, 0},
                                    {"interpolation", P_INTERP, 0}, {"fill", P_FILL, 0}}, 0},
    [STEP_RANDOM_ERASING] = {{{"p", P_PROB, 0}, {"scale", P_SCALE, 0}, {"ratio", P_RATIO, 0},
                              {"value", P_ERASE_VALUE, 0}}, 0},
    [STEP_MIXUP] = {{{"alpha", P_ALPHA, 1}, {"num_classes", P_CLASSES, 1}, {"p", P_PROB, 0},
                     {"switch_p", P_SWITCH, 0}}, 0},
    [STEP_CUTMIX] = {{{"alpha", P_ALPHA, 1}, {"num_classes", P_CLASSES, 1}, {"p", P_PROB, 0},
                      {"switch_p", P_SWITCH, 0}}, 0},
    [STEP_DECODE_AUDIO] = {{{"mono", P_ENUM, 0, AU(mono), 0, 0, no_yes},
                            {"dtype", P_ENUM, 0, AU(int16), 0, 0, audio_dtype_names}}, 0},
    [STEP_RESAMPLE] = {{{"rate", P_U32, 1, AU(rate), 1, AUDIO_RATE_MAX, NULL},
                        {"lowpass_filter_width", P_U32, 0, AU(width), 1,
                         AUDIO_RESAMPLE_WIDTH_MAX, NULL},
                        {"rolloff", P_F64, 0, AU(rolloff), 1e-3, 1, NULL}}, 0},
    [STEP_TIME_CROP] = {{{"length", P_U32, 1, AU(length), 1, AUDIO_LENGTH_MAX, NULL},
                         {"align", P_ENUM, 0, AU(pad), 0, 0, align_names}}, 0},
    [STEP_RANDOM_TIME_CROP] = {{{"length", P_U32, 1, AU(length), 1, AUDIO_LENGTH_MAX, NULL},
                                {"pad", P_ENUM, 0, AU(pad), 0, 0, pad_names}}, 0},
    [STEP_MEL_SPECTROGRAM] = {{{"n_mels", P_U32, 0, AU(n_mels), 1, AUDIO_MELS_MAX, NULL},
                               {"sample_rate", P_U32, 0, AU(sample_rate), 1, AUDIO_RATE_MAX,
                                NULL},
                               {"n_fft", P_U32, 0, AU(n_fft), 2, AUDIO_NFFT_MAX, NULL},
                               {"win_length", P_U32, 0, AU(win_length), 1, AUDIO_NFFT_MAX,
                                NULL},
                               {"hop_length", P_U32, 0, AU(hop_length), 1, AUDIO_NFFT_MAX,
                                NULL},
                               {"f_min", P_F64, 0, AU(f_min), 0, AUDIO_RATE_MAX, NULL},
                               {"f_max", P_F64, 0, AU(f_max), 0, AUDIO_RATE_MAX, NULL},
                               {"power", P_F64, 0, AU(power), 1e-3, 16, NULL},
                               {"center", P_ENUM, 0, AU(center), 0, 0, no_yes},
                               {"pad_mode", P_ENUM, 0, AU(pad_mode), 0, 0, pad_mode_names},
                               {"norm", P_ENUM, 0, AU(norm), 0, 0, norm_names},
                               {"mel_scale", P_ENUM, 0, AU(mel_scale), 0, 0,
                                mel_scale_names},
                               {"normalized", P_ENUM, 0, AU(normalized), 0, 0,
                                normalized_names}}, 0},
    [STEP_AMPLITUDE_TO_DB] = {{{"stype", P_ENUM, 0, AU(stype), 0, 0, stype_names},
                               {"top_db", P_F64, 0, AU(top_db), 0, 1000, NULL}}, 0},
    [STEP_TIME_MASK] = {{{"time_mask_param", P_U32, 1, AU(mask_param), 0, AUDIO_LENGTH_MAX,
                          NULL},
                         {"p", P_F64, 0, AU(mask_p), 0, 1, NULL}}, 0},
    [STEP_FREQUENCY_MASK] = {{{"freq_mask_param", P_U32, 1, AU(mask_param), 0,
                               AUDIO_MELS_MAX, NULL}}, 0},
    [STEP_RANDOM_GAIN] = {{{"gain_db", P_RANGE, 1, AU(gain), -120, 120, NULL}}, 0},
};
#undef AU

#define RRC_SCALE_LO 0.08
#define RRC_SCALE_HI 1.0
#define RRC_RATIO_LO (3.0 / 4.0)
#define RRC_RATIO_HI (4.0 / 3.0)
#define FLIP_DEFAULT_P 0.5
#define MIX_DEFAULT_P 1.0        /* the reference scripts' mixers: p=1.0 */
#define MIX_DEFAULT_SWITCH_P 0.5 /* RandomChoice of the two */

/* A decimal integer in lo..hi, digits only. */
static int parse_uint(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > hi)
            return -EINVAL;
    }
    if (v < lo)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

/* A finite number, or a fraction A/B of two ("3/4"). */
static int parse_number(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v))
        return -EINVAL;
    if (*end == '/') {
        const char *d = end + 1;
        errno = 0;
        double den = strtod(d, &end);
        if (end == d || errno || !isfinite(den) || den == 0.0)
            return -EINVAL;
        v /= den;
    }
    if (*end != '\0' || !isfinite(v))
        return -EINVAL;
    *out = v + 0.0; /* -0 -> +0, so equal steps describe alike */
    return 0;
}

static int parse_name(const char *s, const char *const *names, size_t n, uint32_t *out)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (uint32_t)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* What a parameter is set to: for messages. */
static void arg_text(const struct step_arg *a, char *buf, size_t len)
{
    struct sbuf b = {buf, len, 0};
    buf[0] = '\0';
    sb_printf(&b, "%s", a->list ? "[" : "");
    for (uint32_t i = 0; i < a->n; i++)
        sb_printf(&b, "%s%s", i ? ", " : "", a->v[i]);
    sb_printf(&b, "%s", a->list ? "]" : "");
}

/* Sets the per-channel values of a P_FILL, P_MEAN or P_STD parameter. */
static int parse_values(const struct step_arg *a, enum param_type t, struct step *s)
{
    if (a->n < 1 || a->n > STEP_CHANNELS_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < a->n; i++) {
        uint32_t u;
        double d;
        if (t == P_FILL) {
            if (parse_uint(a->v[i], 0, 255, &u) < 0)
                return -EINVAL;
            s->fill[i] = (uint8_t)u;
            continue;
        }
        if (parse_number(a->v[i], &d) < 0 || fabs(d) > 3.0e38)
            return -EINVAL;
        float f = (float)d; /* torch takes mean and std as float32 */
        if (t == P_STD && f == 0.0f)
            return -EINVAL;
        (t == P_MEAN ? s->mean : s->std)[i] = f + 0.0f;
    }
    if (t == P_FILL)
        s->nfill = a->n;
    return 0;
}

/* What a generic parameter takes, for messages. */
static const char *param_expects_generic(const struct param *p, char *buf, size_t len)
{
    struct sbuf b = {buf, len, 0};
    buf[0] = '\0';
    switch (p->type) {
    case P_U32:
        sb_printf(&b, "an integer in %.0f..%.0f", p->lo, p->hi);
        break;
    case P_F64:
        sb_printf(&b, "a number in [%g, %g]", p->lo, p->hi);
        break;
    case P_RANGE:
        sb_printf(&b, "a range [LO, HI] of numbers in [%g, %g] with LO <= HI", p->lo, p->hi);
        break;
    case P_ENUM:
        for (int i = 0; p->names[i]; i++)
            sb_printf(&b, "%s%s", i ? (p->names[i + 1] ? ", " : " or ") : "", p->names[i]);
        break;
    default:
        break;
    }
    return buf;
}

/* Why a value of type t is bad, for messages. */
static const char *param_expects(enum param_type t)
{
    switch (t) {
    case P_SIZE: return "a size N or [H, W] with each in 1..65535";
    case P_PROB: return "a number in [0, 1]";
    case P_BOOL: return "true or false";
    case P_MODE: return "rgb or grey";
    case P_LAYOUT: return "nhwc or nchw";
    case P_SCALE:
    case P_RATIO: return "a range [LO, HI] of numbers with 0 < LO <= HI";
    case P_PADDING: return "N, [LR, TB] or [L, T, R, B] with each in 0..65535";
    case P_FILL: return "a value in 0..255, or a list of up to 4 (one per channel)";
    case P_MEAN: return "a number, or a list of up to 4 (one per channel)";
    case P_STD: return "a non-zero number, or a list of up to 4 (one per channel)";
    case P_JITTER: return "a number X >= 0 (the range [max(0, 1 - X), 1 + X]) or a range "
                          "[LO, HI] with 0 <= LO <= HI";
    case P_HUE: return "a number X in [0, 0.5] (the range [-X, X]) or a range [LO, HI] with "
                       "-0.5 <= LO <= HI <= 0.5";
    case P_DEGREES: return "a number X >= 0 (the range [-X, X]) or a range [LO, HI], "
                           "within -360..360";
    case P_TRANSLATE: return "[A, B]: the largest fractions of the width and the height, "
                             "each in [0, 1]";
    case P_AFFINE_SCALE: return "a range [LO, HI] with 0 < LO <= HI <= 100";
    case P_SHEAR: return "X >= 0, [LO, HI] or [XLO, XHI, YLO, YHI] in degrees, within "
                         "-180..180";
    case P_INTERP: return "nearest or bilinear";
    case P_CENTER: return "a point [X, Y]";
    case P_KSIZE: return "an odd size N or [KX, KY] with each in 1..255";
    case P_SIGMA: return "a number X > 0 or a range [LO, HI] with 0 < LO <= HI <= 1000";
    case P_POLICY: return "imagenet (the only policy presto has)";
    case P_NUM_OPS: return "a count in 1..16";
    case P_MAGNITUDE: return "a bin in 0..1023, below num_magnitude_bins";
    case P_BINS: return "a count in 2..1024";
    case P_ERASE_VALUE: return "a number, a list of up to 4 (one per channel), or random";
    case P_ALPHA: return "a number above 0";
    case P_CLASSES: return "an integer in 1..1048576";
    case P_SWITCH: return "a number in [0, 1]";
    default: return "?";
    }
}

/* The a->n numbers of a (at most max) into d. */
static int parse_numbers(const struct step_arg *a, uint32_t max, double *d)
{
    if (a->n < 1 || a->n > max)
        return -EINVAL;
    for (uint32_t i = 0; i < a->n; i++)
        if (parse_number(a->v[i], &d[i]) < 0)
            return -EINVAL;
    return 0;
}

/* A range: X (symmetric about center: [center - X, center + X], X >= 0) or
 * [LO, HI] with LO <= HI, all within [lo, hi]. */
static int parse_range(const struct step_arg *a, double center, double lo, double hi,
                       double *r)
{
    double d[2];
    if (parse_numbers(a, 2, d) < 0 || (a->n == 1 && a->list))
        return -EINVAL;
    if (a->n == 1) {
        if (!(d[0] >= 0.0))
            return -EINVAL;
        d[1] = center + d[0];
        d[0] = center - d[0];
    }
    if (!(d[0] <= d[1] && d[0] >= lo && d[1] <= hi))
        return -EINVAL;
    r[0] = d[0] + 0.0;
    r[1] = d[1] + 0.0;
    return 0;
}

/* The image augmentations' parameters (see parse_param). */
static int parse_aug_param(const struct param *p, const struct step_arg *a, struct step *s)
{
    uint32_t u[2];
    double d[4];
    static const char *const interps[] = {"nearest", "bilinear"};
    static const char *const policies[] = {"imagenet"};

    switch (p->type) {
    case P_JITTER:
        /* ColorJitter's _check_input: X -> [max(0, 1 - X), 1 + X]. */
        if (parse_range(a, 1.0, -1e6, 1e6, d) < 0)
            return -EINVAL;
        if (a->n == 1 && d[0] < 0.0)
            d[0] = 0.0;
        if (d[0] < 0.0)
            return -EINVAL;
        goto jitter;
    case P_HUE:
        if (parse_range(a, 0.0, -0.5, 0.5, d) < 0)
            return -EINVAL;
    jitter:
        s->jitter.range[p->which][0] = d[0];
        s->jitter.range[p->which][1] = d[1];
        /* torchvision leaves out a range that is only its centre. */
        s->jitter.on[p->which] = !(d[0] == d[1] && d[0] == (p->type == P_HUE ? 0.0 : 1.0));
        return 0;
    case P_DEGREES:
        return parse_range(a, 0.0, -360.0, 360.0, s->affine.degrees);
    case P_TRANSLATE:
        if (a->n != 2 || parse_numbers(a, 2, d) < 0 || !(d[0] >= 0.0 && d[0] <= 1.0) ||
            !(d[1] >= 0.0 && d[1] <= 1.0))
            return -EINVAL;
        s->affine.translate_on = 1;
        s->affine.translate[0] = d[0] + 0.0;
        s->affine.translate[1] = d[1] + 0.0;
        return 0;
    case P_AFFINE_SCALE:
        if (a->n != 2 || parse_numbers(a, 2, d) < 0 || !(d[0] > 0.0 && d[0] <= d[1]) ||
            d[1] > 100.0)
            return -EINVAL;
        s->affine.scale_on = 1;
        s->affine.scale[0] = d[0];
        s->affine.scale[1] = d[1];
        return 0;
    case P_SHEAR:
        if (a->n == 4) {
            if (parse_numbers(a, 4, d) < 0)
                return -EINVAL;
            for (int i = 0; i < 2; i++) {
                if (!(d[2 * i] <= d[2 * i + 1] && d[2 * i] >= -180.0 &&
                      d[2 * i + 1] <= 180.0))
                    return -EINVAL;
                s->affine.shear_on[i] = 1;
                s->affine.shear[i][0] = d[2 * i] + 0.0;
                s->affine.shear[i][1] = d[2 * i + 1] + 0.0;
            }
            return 0;
        }
        if (parse_range(a, 0.0, -180.0, 180.0, s->affine.shear[0]) < 0)
            return -EINVAL;
        s->affine.shear_on[0] = 1;
        return 0;
    case P_INTERP:
        if (a->n != 1 || a->list || parse_name(a->v[0], interps, 2, &u[0]) < 0)
            return -EINVAL;
        s->interp = u[0];
        return 0;
    case P_CENTER:
        if (a->n != 2 || parse_numbers(a, 2, d) < 0 || fabs(d[0]) > 1e9 || fabs(d[1]) > 1e9)
            return -EINVAL;
        s->center_on = 1;
        s->center[0] = d[0] + 0.0;
        s->center[1] = d[1] + 0.0;
        return 0;
    case P_KSIZE:
        if (a->n < 1 || a->n > 2 || (a->n == 2 && !a->list))
            return -EINVAL;
        for (uint32_t i = 0; i < a->n; i++)
            if (parse_uint(a->v[i], 1, BLUR_KERNEL_MAX, &u[i]) < 0 || u[i] % 2 == 0)
                return -EINVAL;
        s->ksize[0] = u[0];
        s->ksize[1] = a->n == 2 ? u[1] : u[0];
        return 0;
    case P_SIGMA:
        if (parse_numbers(a, 2, d) < 0 || (a->n == 1 && a->list))
            return -EINVAL;
        if (a->n == 1)
            d[1] = d[0];
        if (!(d[0] > 0.0 && d[0] <= d[1] && d[1] <= 1000.0))
            return -EINVAL;
        s->sigma[0] = d[0];
        s->sigma[1] = d[1];
        return 0;
    case P_POLICY:
        if (a->n != 1 || a->list || parse_name(a->v[0], policies, 1, &u[0]) < 0)
            return -EINVAL;
        s->aug.policy = AUG_AUTO_IMAGENET;
        return 0;
    case P_NUM_OPS:
    case P_MAGNITUDE:
    case P_BINS: {
        uint32_t lo = p->type == P_BINS ? 2 : p->type == P_NUM_OPS ? 1 : 0;
        uint32_t hi = p->type == P_NUM_OPS ? AUG_OPS_MAX
                      : p->type == P_BINS  ? AUG_BINS_MAX
                                           : AUG_BINS_MAX - 1;
        if (a->n != 1 || a->list || parse_uint(a->v[0], lo, hi, &u[0]) < 0)
            return -EINVAL;
        *(p->type == P_NUM_OPS ? &s->aug.num_ops
          : p->type == P_BINS  ? &s->aug.bins
                               : &s->aug.magnitude) = u[0];
        return 0;
    }
    case P_ERASE_VALUE:
        if (a->n == 1 && !a->list && strcmp(a->v[0], "random") == 0) {
            s->erase_random = 1;
            return 0;
        }
        if (parse_numbers(a, STEP_CHANNELS_MAX, d) < 0)
            return -EINVAL;
        for (uint32_t i = 0; i < a->n; i++) {
            if (fabs(d[i]) > 3.0e38)
                return -EINVAL;
            s->value[i] = (float)d[i] + 0.0f; /* torch.tensor(value, dtype=float32) */
        }
        s->erase_random = 0;
        s->nvalue = a->n;
        return 0;
    default:
        return -EINVAL;
    }
}

/* Parses one parameter into s; -EINVAL when its value is bad. */
static int parse_param(const struct param *p, const struct step_arg *a, struct step *s)
{
    uint32_t u[4];
    double d[2];
    static const char *const bools[] = {"false", "true"};
    static const char *const modes[] = {"rgb", "grey", "gray", "l"};

    switch (p->type) {
    case P_SIZE:
        if (a->n < 1 || a->n > 2 || (a->n == 2 && !a->list))
            return -EINVAL;
        for (uint32_t i = 0; i < a->n; i++)
            if (parse_uint(a->v[i], 1, STEP_SIZE_MAX, &u[i]) < 0)
                return -EINVAL;
        s->h = u[0];
        s->w = a->n == 2 ? u[1] : u[0];
        /* Resize(int) keeps the aspect; Resize([N]) too, as torchvision. */
        s->shorter = s->kind == STEP_RESIZE && a->n == 1;
        return 0;
    case P_PROB:
        if (a->n != 1 || a->list || parse_number(a->v[0], &d[0]) < 0 ||
            !(d[0] >= 0.0 && d[0] <= 1.0))
            return -EINVAL;
        s->p = d[0];
        return 0;
    case P_BOOL:
        if (a->n != 1 || a->list || parse_name(a->v[0], bools, 2, &u[0]) < 0)
            return -EINVAL;
        s->dct_scale = (int)u[0];
        return 0;
    case P_MODE:
        if (a->n != 1 || a->list || parse_name(a->v[0], modes, 4, &u[0]) < 0)
            return -EINVAL;
        s->channels = u[0] == 0 ? 3 : 1;
        return 0;
    case P_LAYOUT:
        if (a->n != 1 || a->list || parse_name(a->v[0], layout_names, 2, &u[0]) < 0)
            return -EINVAL;
        s->layout = u[0];
        return 0;
    case P_SCALE:
    case P_RATIO:
        if (a->n != 2 || parse_number(a->v[0], &d[0]) < 0 ||
            parse_number(a->v[1], &d[1]) < 0 || !(d[0] > 0.0 && d[0] <= d[1]))
            return -EINVAL;
        memcpy(p->type == P_SCALE ? s->scale : s->ratio, d, sizeof(d));
        return 0;
    case P_PADDING:
        if (a->n != 1 && a->n != 2 && a->n != 4)
            return -EINVAL;
        for (uint32_t i = 0; i < a->n; i++)
            if (parse_uint(a->v[i], 0, STEP_SIZE_MAX, &u[i]) < 0)
                return -EINVAL;
        if (a->n == 1)
            u[1] = u[2] = u[3] = u[0];
        else if (a->n == 2) { /* torchvision: [left/right, top/bottom] */
            u[2] = u[0];
            u[3] = u[1];
        }
        memcpy(s->pad, u, sizeof(u));
        return 0;
    case P_FILL:
    case P_MEAN:
    case P_STD:
        return parse_values(a, p->type, s);
    default:
        return parse_aug_param(p, a, s);
    case P_ALPHA:
        if (a->n != 1 || a->list || parse_number(a->v[0], &d[0]) < 0 || !(d[0] > 0.0) ||
            d[0] > 1e6)
            return -EINVAL;
        s->alpha = d[0];
        return 0;
    case P_CLASSES:
        if (a->n != 1 || a->list || parse_uint(a->v[0], 1, PROTO_LABEL_CLASSES_MAX, &u[0]) < 0)
            return -EINVAL;
        s->num_classes = u[0];
        return 0;
    case P_SWITCH:
        if (a->n != 1 || a->list || parse_number(a->v[0], &d[0]) < 0 ||
            !(d[0] >= 0.0 && d[0] <= 1.0))
            return -EINVAL;
        s->switch_p = d[0];
        return 0;
    case P_U32: {
        uint32_t v;
        if (a->n != 1 || a->list || parse_uint(a->v[0], (uint32_t)p->lo, (uint32_t)p->hi, &v) < 0)
            return -EINVAL;
        memcpy((char *)s + p->off, &v, sizeof(v));
        return 0;
    }
    case P_F64:
        if (a->n != 1 || a->list || parse_number(a->v[0], &d[0]) < 0 ||
            !(d[0] >= p->lo && d[0] <= p->hi))
            return -EINVAL;
        memcpy((char *)s + p->off, &d[0], sizeof(d[0]));
        return 0;
    case P_RANGE:
        if (a->n != 2 || parse_number(a->v[0], &d[0]) < 0 ||
            parse_number(a->v[1], &d[1]) < 0 || !(d[0] >= p->lo && d[1] <= p->hi) ||
            d[0] > d[1])
            return -EINVAL;
        memcpy((char *)s + p->off, d, sizeof(d));
        return 0;
    case P_ENUM: {
        uint32_t n = 0;
        while (p->names[n])
            n++;
        if (a->n != 1 || a->list || parse_name(a->v[0], p->names, n, &u[0]) < 0)
            return -EINVAL;
        memcpy((char *)s + p->off, &u[0], sizeof(u[0]));
        return 0;
    }
    }
    return -EINVAL;
}

static void step_defaults(struct step *s, enum step_kind kind)
{
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->channels = 3;
    s->p = FLIP_DEFAULT_P;
    s->scale[0] = RRC_SCALE_LO;
    s->scale[1] = RRC_SCALE_HI;
    s->ratio[0] = RRC_RATIO_LO;
    s->ratio[1] = RRC_RATIO_HI;
    s->nfill = 1;
    s->nmean = 1;
    s->std[0] = 1.0f; /* to_float: (x / 255 - 0) / 1 */
    s->layout = STEP_LAYOUT_NHWC;
    if (kind == STEP_MIXUP || kind == STEP_CUTMIX) {
        s->p = MIX_DEFAULT_P;
        s->switch_p = MIX_DEFAULT_SWITCH_P;
    }
    /* The image augmentations: torchvision's defaults. */
    s->interp = GEOM_NEAREST;
    s->sigma[0] = 0.1;
    s->sigma[1] = 2.0;
    s->aug.policy = kind == STEP_RAND_AUGMENT           ? AUG_RAND
                    : kind == STEP_TRIVIAL_AUGMENT_WIDE ? AUG_TRIVIAL_WIDE
                                                        : AUG_AUTO_IMAGENET;
    s->aug.num_ops = 2;
    s->aug.magnitude = 9;
    s->aug.bins = kind == STEP_AUTO_AUGMENT ? 10 : 31;
    s->nvalue = 1;
    if (kind == STEP_RANDOM_GRAYSCALE)
        s->p = 0.1;
    if (kind == STEP_RANDOM_ERASING) {
        s->scale[0] = 0.02;
        s->scale[1] = 0.33;
        s->ratio[0] = 0.3;
        s->ratio[1] = 3.3;
    }
    step_sound_defaults(s);
}

/* What the image augmentations check once every parameter is read, and
 * the copies of shared fields into their modules' parameters. */
static int aug_finish(struct step *s, const char *name, char *err, size_t errlen)
{
    s->aug.interp = (enum geom_interp)s->interp;
    for (uint32_t c = 0; c < 3; c++)
        s->aug.fill[c] = s->fill[s->nfill == 1 ? 0 : c];
    if (s->kind == STEP_RAND_AUGMENT && s->aug.magnitude >= s->aug.bins) {
        set_err(err, errlen, "step '%s': magnitude %u is not below num_magnitude_bins %u",
                name, s->aug.magnitude, s->aug.bins);
        return -EINVAL;
    }
    if (s->kind == STEP_RANDOM_ERASING && s->scale[1] > 1.0) {
        set_err(err, errlen, "step '%s': scale is a fraction of the image: at most 1", name);
        return -EINVAL;
    }
    return 0;
}

static void list_params(const struct step_params *sp, char *buf, size_t len)
{
    struct sbuf b = {buf, len, 0};
    buf[0] = '\0';
    for (int i = 0; i < PARAMS_MAX && sp->p[i].name; i++)
        sb_printf(&b, "%s%s", i ? ", " : "", sp->p[i].name);
}

int step_init(struct step *s, const char *name, const struct step_args *args,
              int *bad_arg, char *err, size_t errlen)
{
    enum step_kind kind = STEP_KIND_MAX;
    int dummy;
    if (bad_arg == NULL)
        bad_arg = &dummy;
    *bad_arg = -1;

    for (int k = 0; name != NULL && k < STEP_KIND_MAX; k++) {
        if (strcmp(name, step_names[k]) == 0) {
            kind = (enum step_kind)k;
            break;
        }
    }
    if (kind == STEP_KIND_MAX) {
        char known[1024];
        struct sbuf b = {known, sizeof(known), 0};
        for (int k = 0; k < STEP_KIND_MAX; k++)
            sb_printf(&b, "%s%s", k ? ", " : "", step_names[k]);
        set_err(err, errlen, "unknown step '%s' (known steps: %s)", name ? name : "", known);
        return -EINVAL;
    }

    const struct step_params *sp = &step_params[kind];
    char names[128];
    list_params(sp, names, sizeof(names));
    step_defaults(s, kind);
    int seen[PARAMS_MAX] = {0};
    int nstd = 0;
    for (uint32_t i = 0; args != NULL && i < args->n; i++) {
        const struct step_arg *a = &args->a[i];
        const char *key = a->key;
        *bad_arg = (int)i;
        if (key == NULL && sp->no_main) {
            set_err(err, errlen, "step '%s' takes a mapping of parameters (%s)", name, names);
            return -EINVAL;
        }
        int j = 0;
        if (key != NULL)
            while (j < PARAMS_MAX && sp->p[j].name && strcmp(sp->p[j].name, key) != 0)
                j++;
        if (j == PARAMS_MAX || sp->p[j].name == NULL) {
            set_err(err, errlen, "step '%s' has no parameter '%s' (it takes: %s)", name, key,
                    names);
            return -EINVAL;
        }
        if (seen[j]++) {
            set_err(err, errlen, "step '%s': parameter '%s' is given twice", name,
                    sp->p[j].name);
            return -EINVAL;
        }
        if (parse_param(&sp->p[j], a, s) < 0) {
            char val[128], why[160];
            arg_text(a, val, sizeof(val));
            set_err(err, errlen, "step '%s': %s '%s' is not %s", name, sp->p[j].name, val,
                    sp->p[j].off ? param_expects_generic(&sp->p[j], why, sizeof(why))
                                 : param_expects(sp->p[j].type));
            return -EINVAL;
        }
        if (sp->p[j].type == P_MEAN)
            s->nmean = a->n;
        if (sp->p[j].type == P_STD)
            nstd = (int)a->n;
    }
    *bad_arg = -1;
    for (int j = 0; j < PARAMS_MAX && sp->p[j].name; j++) {
        if (sp->p[j].required && !seen[j]) {
            char why[160];
            set_err(err, errlen, "step '%s' needs %s (%s)", name, sp->p[j].name,
                    sp->p[j].off ? param_expects_generic(&sp->p[j], why, sizeof(why))
                                 : param_expects(sp->p[j].type));
            return -EINVAL;
        }
    }
    if (step_sound_init(s, err, errlen) < 0)
        return -EINVAL;
    if (kind == STEP_NORMALIZE) {
        /* One value stands for every channel (torch broadcasts it). */
        uint32_t n = (uint32_t)nstd > s->nmean ? (uint32_t)nstd : s->nmean;
        if ((s->nmean != 1 && s->nmean != n) || (nstd != 1 && (uint32_t)nstd != n)) {
            set_err(err, errlen, "step 'normalize': mean has %u values and std %d", s->nmean,
                    nstd);
            return -EINVAL;
        }
        for (uint32_t c = 1; c < n; c++) {
            if (s->nmean == 1)
                s->mean[c] = s->mean[0];
            if (nstd == 1)
                s->std[c] = s->std[0];
        }
        s->nmean = n;
    }
    return aug_finish(s, name, err, errlen);
}

int step_init_simple(struct step *s, const char *name, const char *arg, char *err,
                     size_t errlen)
{
    struct step_args args = {.n = 0};
    if (arg != NULL && *arg != '\0') {
        args.n = 1;
        args.a[0].n = 1;
        args.a[0].v[0] = arg;
    }
    return step_init(s, name, &args, NULL, err, errlen);
}

const char *step_main_param(const char *name)
{
    for (int k = 0; name != NULL && k < STEP_KIND_MAX; k++)
        if (strcmp(name, step_names[k]) == 0)
            return step_params[k].no_main ? NULL : step_params[k].p[0].name;
    return NULL;
}

/* ---- the sample model: what each step takes and gives ---- */

const struct step_type step_type_source = {STEP_DOMAIN_ENCODED, PROTO_DTYPE_U8, 0,
                                           STEP_LAYOUT_NHWC};

/* Per step: the domain, dtype and rank it takes; the domain and rank it
 * gives, and its dtype (0: the input's). A float32 output's layout is the
 * step's layout parameter (give_layout 1), or nchw for audio (2). */
static const struct step_sig {
    struct step_type take;
    uint32_t give_domain, give_dtype, give_rank;
    int give_layout; /* 1: the output's layout is s->layout; 2: nchw */
    int any_layout;  /* takes rank 3 in either layout (and gives it back) */
} step_sigs[STEP_KIND_MAX] = {
#define IMAGE_U8 {STEP_DOMAIN_IMAGE, PROTO_DTYPE_U8, 3, STEP_LAYOUT_NHWC}
    [STEP_DECODE] = {{STEP_DOMAIN_ENCODED, PROTO_DTYPE_U8, 0, STEP_LAYOUT_NHWC},
                     STEP_DOMAIN_IMAGE, PROTO_DTYPE_U8, 3, 0},
    [STEP_RESIZE] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_CENTER_CROP] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_FLIP] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_RESIZED_CROP] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_PAD] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_NORMALIZE] = {IMAGE_U8, STEP_DOMAIN_IMAGE, PROTO_DTYPE_F32, 3, 1},
    [STEP_TO_FLOAT] = {IMAGE_U8, STEP_DOMAIN_IMAGE, PROTO_DTYPE_F32, 3, 1},
    [STEP_COLOR_JITTER] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_GRAYSCALE] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_GAUSSIAN_BLUR] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_ROTATION] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_AFFINE] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_AUTO_AUGMENT] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RAND_AUGMENT] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_TRIVIAL_AUGMENT_WIDE] = {IMAGE_U8, STEP_DOMAIN_IMAGE, 0, 3, 0},
    [STEP_RANDOM_ERASING] = {{STEP_DOMAIN_IMAGE, PROTO_DTYPE_F32, 3, STEP_LAYOUT_NHWC},
                             STEP_DOMAIN_IMAGE, 0, 3, 0, 1},
#define IMAGE_F32 {STEP_DOMAIN_IMAGE, PROTO_DTYPE_F32, 3, STEP_LAYOUT_NHWC}
    [STEP_MIXUP] = {IMAGE_F32, STEP_DOMAIN_IMAGE, 0, 3, 0, 1},
    [STEP_CUTMIX] = {IMAGE_F32, STEP_DOMAIN_IMAGE, 0, 3, 0, 1},
#undef IMAGE_F32
#undef IMAGE_U8
#define WAVE {STEP_DOMAIN_WAVEFORM, PROTO_DTYPE_F32, 2, STEP_LAYOUT_NCHW}
#define SPEC {STEP_DOMAIN_SPECTROGRAM, PROTO_DTYPE_F32, 3, STEP_LAYOUT_NCHW}
    [STEP_DECODE_AUDIO] = {{STEP_DOMAIN_ENCODED, PROTO_DTYPE_U8, 0, STEP_LAYOUT_NHWC},
                           STEP_DOMAIN_WAVEFORM, PROTO_DTYPE_F32, 2, 2},
    [STEP_RESAMPLE] = {WAVE, STEP_DOMAIN_WAVEFORM, 0, 2, 2},
    [STEP_TIME_CROP] = {WAVE, STEP_DOMAIN_WAVEFORM, 0, 2, 2},
    [STEP_RANDOM_TIME_CROP] = {WAVE, STEP_DOMAIN_WAVEFORM, 0, 2, 2},
    [STEP_MEL_SPECTROGRAM] = {WAVE, STEP_DOMAIN_SPECTROGRAM, 0, 3, 2},
    [STEP_AMPLITUDE_TO_DB] = {SPEC, STEP_DOMAIN_SPECTROGRAM, 0, 3, 2},
    [STEP_TIME_MASK] = {SPEC, STEP_DOMAIN_SPECTROGRAM, 0, 3, 2},
    [STEP_FREQUENCY_MASK] = {SPEC, STEP_DOMAIN_SPECTROGRAM, 0, 3, 2},
    [STEP_RANDOM_GAIN] = {WAVE, STEP_DOMAIN_WAVEFORM, 0, 2, 2},
#undef WAVE
#undef SPEC
};

int step_takes(const struct step *s, const struct step_type *in)
{
    if ((unsigned)s->kind >= STEP_KIND_MAX)
        return 0;
    const struct step_type *t = &step_sigs[s->kind].take;
    /* Image steps read HWC: a float32 image in nchw is not theirs either. */
    return in->domain == t->domain && in->dtype == t->dtype && in->rank == t->rank &&
           (in->rank != 3 || in->layout == t->layout || step_sigs[s->kind].any_layout);
}

void step_gives(const struct step *s, const struct step_type *in, struct step_type *out)
{
    const struct step_sig *g = &step_sigs[(unsigned)s->kind < STEP_KIND_MAX ? s->kind : 0];
    struct step_type t = *in;
    t.domain = g->give_domain;
    t.rank = g->give_rank;
    if (g->give_dtype)
        t.dtype = step_out_dtype(s, t.dtype);
    t.layout = g->give_layout == 1   ? s->layout
               : g->give_layout == 2 ? STEP_LAYOUT_NCHW
               : in->domain == g->give_domain ? in->layout
                                              : STEP_LAYOUT_NHWC;
    *out = t;
}

static const char *dtype_text(uint32_t dtype)
{
    switch (dtype) {
    case PROTO_DTYPE_U8: return "uint8";
    case PROTO_DTYPE_I16: return "int16";
    case PROTO_DTYPE_F32: return "float32";
    default: return "?";
    }
}

void step_type_describe(const struct step_type *t, char *buf, size_t len)
{
    if (t->domain == STEP_DOMAIN_ENCODED)
        snprintf(buf, len, "encoded bytes (a source file)");
    else if (t->domain == STEP_DOMAIN_IMAGE)
        snprintf(buf, len, "%s image %s", dtype_text(t->dtype),
                 t->layout == STEP_LAYOUT_NCHW ? "[C, H, W]" : "[H, W, C]");
    else if (t->domain == STEP_DOMAIN_WAVEFORM)
        snprintf(buf, len, "%s waveform [C, T]", dtype_text(t->dtype));
    else if (t->domain == STEP_DOMAIN_SPECTROGRAM)
        snprintf(buf, len, "%s spectrogram [C, F, T]", dtype_text(t->dtype));
    else
        snprintf(buf, len, "%s tensor of rank %u", dtype_text(t->dtype), t->rank);
}

const char *step_takes_text(enum step_kind kind)
{
    if ((unsigned)kind >= STEP_KIND_MAX)
        return "nothing";
    switch (step_sigs[kind].take.domain) {
    case STEP_DOMAIN_ENCODED: return "encoded bytes (a source file)";
    case STEP_DOMAIN_IMAGE:
        if (step_sigs[kind].take.dtype == PROTO_DTYPE_F32)
            return "a float32 image (after to_float or normalize)";
        return "a uint8 image [H, W, C]";
    case STEP_DOMAIN_WAVEFORM: return "a float32 waveform [C, T]";
    case STEP_DOMAIN_SPECTROGRAM: return "a float32 spectrogram [C, F, T]";
    default: return "?";
    }
}

/* ---- pipelines ---- */

void step_chain_type(const struct step *steps, uint32_t n, struct step_type *out)
{
    struct step_type t = step_type_source;
    for (uint32_t i = 0; i < n; i++)
        step_gives(&steps[i], &t, &t);
    *out = t;
}

/* The message for steps[i] not taking t (what steps[i - 1] gives, or the
 * source's bytes for i == 0). */
static void chain_mismatch(const struct step *steps, uint32_t i, const struct step_type *t,
                           char *err, size_t errlen)
{
    char gives[64];
    step_type_describe(t, gives, sizeof(gives));
    const char *name = step_name(steps[i].kind);
    if (i == 0) {
        set_err(err, errlen, "%s takes %s, but the pipeline starts from %s: the first "
                "step must be decode (or decode_audio)", name, step_takes_text(steps[i].kind),
                gives);
    } else if (steps[i].kind == STEP_DECODE || steps[i].kind == STEP_DECODE_AUDIO) {
        set_err(err, errlen, "%s takes %s, but %s before it gives %s: %s can "
                "only be the first step", name, step_takes_text(steps[i].kind),
                step_name(steps[i - 1].kind), gives, name);
    } else {
        set_err(err, errlen, "%s cannot follow %s: %s takes %s, but %s gives %s%s", name,
                step_name(steps[i - 1].kind), name, step_takes_text(steps[i].kind),
                step_name(steps[i - 1].kind), gives,
                t->dtype == PROTO_DTYPE_F32 && t->domain == STEP_DOMAIN_IMAGE
                    ? ", so it must be the last step (but for random_erasing)" : "");
    }
}

/* The image augmentations that take a fill. */
static int aug_has_fill(enum step_kind kind)
{
    return kind == STEP_RANDOM_ROTATION || kind == STEP_RANDOM_AFFINE ||
           kind == STEP_AUTO_AUGMENT || kind == STEP_RAND_AUGMENT ||
           kind == STEP_TRIVIAL_AUGMENT_WIDE;
}

/* steps[i] follows a batch-level step: only the other one may, once, and
 * then with the same num_classes, p and switch_p. */
static int batch_chain_check(const struct step *steps, uint32_t i, char *err, size_t errlen)
{
    const struct step *s = &steps[i], *prev = &steps[i - 1];
    const char *name = step_name(s->kind), *pname = step_name(prev->kind);
    if (!step_is_batch(s)) {
        set_err(err, errlen, "%s cannot follow %s: mixup and cutmix act on a whole batch, "
                "after every step of its samples, so they come last", name, pname);
        return -EINVAL;
    }
    if (s->kind == prev->kind || (i > 1 && step_is_batch(&steps[i - 2]))) {
        set_err(err, errlen, "%s is given twice: a batch takes one mixup and one cutmix at "
                "most", name);
        return -EINVAL;
    }
    if (s->num_classes != prev->num_classes) {
        set_err(err, errlen, "%s: num_classes %u differs from %s's %u (one label tensor)",
                name, s->num_classes, pname, prev->num_classes);
        return -EINVAL;
    }
    if (s->p != prev->p || s->switch_p != prev->switch_p) {
        set_err(err, errlen, "%s: p and switch_p must be %s's (%g and %g): a batch draws "
                "whether to mix, and which, once", name, pname, prev->p, prev->switch_p);
        return -EINVAL;
    }
    return 0;
}

int step_chain_init(struct step *steps, uint32_t n, uint32_t *bad, char *err,
                    size_t errlen)
{
    uint32_t c = 0, rate = 0;
    struct step_type t = step_type_source;
    *bad = 0;
    if (n == 0) {
        set_err(err, errlen, "the pipeline is empty");
        return -EINVAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct step *s = &steps[i];
        *bad = i;
        if (i > 0 && step_is_batch(&steps[i - 1]) && batch_chain_check(steps, i, err, errlen) < 0)
            return -EINVAL;
        if (!step_takes(s, &t)) {
            chain_mismatch(steps, i, &t, err, errlen);
            return -EINVAL;
        }
        step_gives(s, &t, &t);
        if (s->kind == STEP_DECODE) {
            c = s->channels;
            s->dct_h = s->dct_w = 0;
            s->dct_shorter = 0;
            if (s->dct_scale) {
                if (n < 2 || (steps[1].kind != STEP_RESIZE &&
                              steps[1].kind != STEP_RANDOM_RESIZED_CROP)) {
                    set_err(err, errlen, "decode with dct_scale needs a resize right after "
                            "it (it decodes to the size that resize needs), or a "
                            "random_resized_crop (the size its crop needs)");
                    return -EINVAL;
                }
                /* random_resized_crop: the scale is the crop's, chosen per
                 * sample online (step_decode_rrc_apply); dct_h stays 0. */
                if (steps[1].kind == STEP_RANDOM_RESIZED_CROP)
                    continue;
                s->dct_h = steps[1].h;
                s->dct_w = steps[1].w;
                s->dct_shorter = steps[1].shorter;
            }
        }
        if (s->kind == STEP_PAD && s->nfill != 1 && s->nfill != c) {
            set_err(err, errlen, "pad: fill has %u values for %u channels", s->nfill, c);
            return -EINVAL;
        }
        if (s->kind == STEP_RANDOM_ERASING) {
            s->erase_nchw = t.layout == STEP_LAYOUT_NCHW;
            if (s->nvalue != 1 && s->nvalue != c && !s->erase_random) {
                set_err(err, errlen, "random_erasing: value has %u values for %u channels",
                        s->nvalue, c);
                return -EINVAL;
            }
        }
        if (aug_has_fill(s->kind) && s->nfill != 1 && s->nfill != c) {
            set_err(err, errlen, "%s: fill has %u values for %u channels",
                    step_name(s->kind), s->nfill, c);
            return -EINVAL;
        }
        if (s->kind == STEP_NORMALIZE && s->nmean != 1 && s->nmean != c) {
            set_err(err, errlen, "normalize: mean and std have %u values for %u channels",
                    s->nmean, c);
            return -EINVAL;
        }
        if (step_sound_chain(s, &rate, err, errlen) < 0)
            return -EINVAL;
    }
    return 0;
}

int step_split_check(const struct step *steps, uint32_t n, uint32_t split, char *err,
                     size_t errlen)
{
    for (uint32_t i = 0; i < split && i < n; i++) {
        if (step_is_random(&steps[i])) {
            set_err(err, errlen, "puts the random step %s offline; split before it",
                    step_name(steps[i].kind));
            return -EINVAL;
        }
    }
    if (n > 1 && split == 1 && steps[0].kind == STEP_DECODE && steps[0].dct_scale) {
        set_err(err, errlen, "separates decode (dct_scale) from the %s it decodes for; "
                "split %s",
                step_name(steps[1].kind),
                steps[1].kind == STEP_RESIZE ? "after the resize, or before decode"
                                             : "before decode (0): the crop is random");
        return -EINVAL;
    }
    return 0;
}

/* ---- names, descriptions, fingerprints ---- */

const char *step_name(enum step_kind kind)
{
    if ((unsigned)kind >= STEP_KIND_MAX)
        return "unknown";
    return step_names[kind];
}

int step_is_random(const struct step *s)
{
    switch (s->kind) {
    case STEP_RANDOM_FLIP:
    case STEP_RANDOM_RESIZED_CROP:
    case STEP_COLOR_JITTER:
    case STEP_RANDOM_GRAYSCALE:
    case STEP_RANDOM_ROTATION:
    case STEP_RANDOM_AFFINE:
    case STEP_AUTO_AUGMENT:
    case STEP_RAND_AUGMENT:
    case STEP_TRIVIAL_AUGMENT_WIDE:
    case STEP_RANDOM_ERASING:
    case STEP_RANDOM_TIME_CROP:
    case STEP_TIME_MASK:
    case STEP_FREQUENCY_MASK:
    case STEP_RANDOM_GAIN:
        return 1;
    case STEP_GAUSSIAN_BLUR: /* a fixed sigma blurs alike every epoch */
        return s->sigma[0] != s->sigma[1];
    default:
        return step_is_batch(s);
    }
}

int step_in_place(const struct step *s)
{
    return s->kind == STEP_RANDOM_ERASING;
}

int step_is_batch(const struct step *s)
{
    return s->kind == STEP_MIXUP || s->kind == STEP_CUTMIX;
}

/* The shortest text that reads back as v: doubles, and floats when single. */
static void sb_number(struct sbuf *b, double v, int single)
{
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof(t), "%.*g", prec, v);
        double back = strtod(t, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    sb_printf(b, "%s", t);
}

/* A value list: "v" when it is one value (or all equal and single is
 * allowed), "[a,b,..]" otherwise. */
static void sb_floats(struct sbuf *b, const float *v, uint32_t n)
{
    if (n == 1) {
        sb_number(b, v[0], 1);
        return;
    }
    sb_printf(b, "[");
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            sb_printf(b, ",");
        sb_number(b, v[i], 1);
    }
    sb_printf(b, "]");
}

static void sb_size(struct sbuf *b, const struct step *s)
{
    if (s->shorter || (s->kind != STEP_RESIZE && s->h == s->w))
        sb_printf(b, "%u", s->h);
    else
        sb_printf(b, "[%u,%u]", s->h, s->w);
}

static void sb_range(struct sbuf *b, const char *key, const double *r)
{
    sb_printf(b, ",%s=[", key);
    sb_number(b, r[0], 0);
    sb_printf(b, ",");
    sb_number(b, r[1], 0);
    sb_printf(b, "]");
}

/* The next parameter of a description: "(" before the first, "," after. */
static void sb_key(struct sbuf *b, int *first, const char *key)
{
    sb_printf(b, "%s%s=", *first ? "(" : ",", key);
    *first = 0;
}

/* sb_number, whole numbers written whole ("30", not "3e+01"). */
static void sb_num(struct sbuf *b, double v)
{
    if (v == nearbyint(v) && fabs(v) < 1e15)
        sb_printf(b, "%.0f", v + 0.0);
    else
        sb_number(b, v, 0);
}

static void sb_pair(struct sbuf *b, int *first, const char *key, const double *r, int n)
{
    sb_key(b, first, key);
    sb_printf(b, "[");
    for (int i = 0; i < n; i++) {
        if (i)
            sb_printf(b, ",");
        sb_num(b, r[i]);
    }
    sb_printf(b, "]");
}

/* The image augmentations' name(args): parameters off or at torchvision's
 * defaults left out unless full. */
static void describe_aug(const struct step *s, struct sbuf *b, int full)
{
    static const char *const jitter_keys[4] = {"brightness", "contrast", "saturation", "hue"};
    static const char *const interps[] = {"nearest", "bilinear"};
    int first = 1;
    const struct geom_affine_params *a = &s->affine;
    switch (s->kind) {
    case STEP_COLOR_JITTER:
        for (int f = 0; f < 4; f++)
            if (s->jitter.on[f])
                sb_pair(b, &first, jitter_keys[f], s->jitter.range[f], 2);
        break;
    case STEP_RANDOM_GRAYSCALE:
        if (full || s->p != 0.1) {
            sb_key(b, &first, "p");
            sb_number(b, s->p, 0);
        }
        break;
    case STEP_GAUSSIAN_BLUR:
        sb_key(b, &first, "kernel_size");
        if (s->ksize[0] == s->ksize[1])
            sb_printf(b, "%u", s->ksize[0]);
        else
            sb_printf(b, "[%u,%u]", s->ksize[0], s->ksize[1]);
        if (full || s->sigma[0] != 0.1 || s->sigma[1] != 2.0)
            sb_pair(b, &first, "sigma", s->sigma, 2);
        break;
    case STEP_RANDOM_ROTATION:
    case STEP_RANDOM_AFFINE:
        sb_pair(b, &first, "degrees", a->degrees, 2);
        if (a->translate_on)
            sb_pair(b, &first, "translate", a->translate, 2);
        if (a->scale_on)
            sb_pair(b, &first, "scale", a->scale, 2);
        if (a->shear_on[0] || a->shear_on[1]) {
            double sh[4] = {a->shear[0][0], a->shear[0][1], a->shear[1][0], a->shear[1][1]};
            sb_pair(b, &first, "shear", sh, a->shear_on[1] ? 4 : 2);
        }
        if (s->center_on)
            sb_pair(b, &first, "center", s->center, 2);
        break;
    case STEP_AUTO_AUGMENT:
        if (full)
            sb_printf(b, "(policy=imagenet"), first = 0;
        break;
    case STEP_RAND_AUGMENT:
        if (full || s->aug.num_ops != 2)
            sb_key(b, &first, "num_ops"), sb_printf(b, "%u", s->aug.num_ops);
        if (full || s->aug.magnitude != 9)
            sb_key(b, &first, "magnitude"), sb_printf(b, "%u", s->aug.magnitude);
        /* fall through */
    case STEP_TRIVIAL_AUGMENT_WIDE:
        if (full || s->aug.bins != 31)
            sb_key(b, &first, "num_magnitude_bins"), sb_printf(b, "%u", s->aug.bins);
        break;
    case STEP_RANDOM_ERASING:
        if (full || s->p != 0.5)
            sb_key(b, &first, "p"), sb_number(b, s->p, 0);
        if (full || s->scale[0] != 0.02 || s->scale[1] != 0.33)
            sb_pair(b, &first, "scale", s->scale, 2);
        if (full || s->ratio[0] != 0.3 || s->ratio[1] != 3.3)
            sb_pair(b, &first, "ratio", s->ratio, 2);
        if (s->erase_random) {
            sb_key(b, &first, "value");
            sb_printf(b, "random");
        } else if (full || s->nvalue != 1 || s->value[0] != 0.0f) {
            sb_key(b, &first, "value");
            sb_floats(b, s->value, s->nvalue);
        }
        break;
    default:
        return;
    }
    if (aug_has_fill(s->kind)) {
        if (full || s->interp != GEOM_NEAREST)
            sb_key(b, &first, "interpolation"), sb_printf(b, "%s", interps[s->interp & 1]);
        int zero = 1;
        for (uint32_t i = 0; i < s->nfill; i++)
            zero &= s->fill[i] == 0;
        if (full || !zero) {
            sb_key(b, &first, "fill");
            sb_printf(b, "%s", s->nfill > 1 ? "[" : "");
            for (uint32_t i = 0; i < s->nfill; i++)
                sb_printf(b, "%s%u", i ? "," : "", s->fill[i]);
            sb_printf(b, "%s", s->nfill > 1 ? "]" : "");
        }
    }
    if (!first)
        sb_printf(b, ")");
}

/* (k=v,...) of a step whose parameters are all generic (the audio steps):
 * full, every one; else those not at their default. */
static void describe_generic(const struct step *s, struct sbuf *b, int full)
{
    struct step def;
    step_defaults(&def, s->kind);
    const struct step_params *sp = &step_params[s->kind];
    int first = 1;
    for (int j = 0; j < PARAMS_MAX && sp->p[j].name; j++) {
        const struct param *p = &sp->p[j];
        const char *v = (const char *)s + p->off;
        size_t size = p->type == P_RANGE ? 2 * sizeof(double)
                      : p->type == P_F64 ? sizeof(double) : sizeof(uint32_t);
        if (!p->off || (!full && memcmp(v, (const char *)&def + p->off, size) == 0))
            continue;
        uint32_t u;
        double d[2];
        memcpy(&u, v, sizeof(u));
        memcpy(d, v, size <= sizeof(d) ? size : sizeof(d));
        if (p->type == P_RANGE) {
            sb_pair(b, &first, p->name, d, 2);
            continue;
        }
        sb_key(b, &first, p->name);
        if (p->type == P_U32)
            sb_printf(b, "%u", u);
        else if (p->type == P_ENUM)
            sb_printf(b, "%s", p->names[u]);
        else
            sb_num(b, d[0]);
    }
    if (!first)
        sb_printf(b, ")");
}

/* name(args); full: every parameter, defaults included (fingerprints). */
static void describe(const struct step *s, char *buf, size_t len, int full)
{
    struct sbuf b = {buf, len, 0};
    if (len == 0)
        return;
    buf[0] = '\0';
    sb_printf(&b, "%s", step_name(s->kind));
    switch (s->kind) {
    case STEP_DECODE: {
        int grey = s->channels == 1;
        if (full || grey || s->dct_scale)
            sb_printf(&b, "(");
        if (full || grey)
            sb_printf(&b, "mode=%s%s", grey ? "grey" : "rgb", full || s->dct_scale ? "," : "");
        if (full || s->dct_scale)
            sb_printf(&b, "dct_scale=%s", s->dct_scale ? "true" : "false");
        if (full || grey || s->dct_scale)
            sb_printf(&b, ")");
        break;
    }
    case STEP_RESIZE:
    case STEP_CENTER_CROP:
        sb_printf(&b, "(");
        sb_size(&b, s);
        sb_printf(&b, ")");
        break;
    case STEP_RANDOM_RESIZED_CROP:
        sb_printf(&b, "(");
        sb_size(&b, s);
        if (full || s->scale[0] != RRC_SCALE_LO || s->scale[1] != RRC_SCALE_HI)
            sb_range(&b, "scale", s->scale);
        if (full || s->ratio[0] != RRC_RATIO_LO || s->ratio[1] != RRC_RATIO_HI)
            sb_range(&b, "ratio", s->ratio);
        sb_printf(&b, ")");
        break;
    case STEP_RANDOM_FLIP:
        sb_printf(&b, "(");
        sb_number(&b, s->p, 0);
        sb_printf(&b, ")");
        break;
    case STEP_PAD: {
        const uint32_t *p = s->pad;
        if (p[0] == p[1] && p[0] == p[2] && p[0] == p[3])
            sb_printf(&b, "(%u", p[0]);
        else
            sb_printf(&b, "([%u,%u,%u,%u]", p[0], p[1], p[2], p[3]);
        int zero = 1;
        for (uint32_t i = 0; i < s->nfill; i++)
            zero &= s->fill[i] == 0;
        if (full || !zero) {
            sb_printf(&b, ",fill=");
            if (s->nfill > 1)
                sb_printf(&b, "[");
            for (uint32_t i = 0; i < s->nfill; i++)
                sb_printf(&b, "%s%u", i ? "," : "", s->fill[i]);
            if (s->nfill > 1)
                sb_printf(&b, "]");
        }
        sb_printf(&b, ")");
        break;
    }
    case STEP_NORMALIZE:
        sb_printf(&b, "(mean=");
        sb_floats(&b, s->mean, s->nmean);
        sb_printf(&b, ",std=");
        sb_floats(&b, s->std, s->nmean);
        if (full || s->layout != STEP_LAYOUT_NHWC)
            sb_printf(&b, ",layout=%s", layout_names[s->layout & 1]);
        sb_printf(&b, ")");
        break;
    case STEP_TO_FLOAT:
        if (full || s->layout != STEP_LAYOUT_NHWC)
            sb_printf(&b, "(layout=%s)", layout_names[s->layout & 1]);
        break;
    case STEP_MIXUP:
    case STEP_CUTMIX:
        sb_printf(&b, "(");
        sb_number(&b, s->alpha, 0);
        sb_printf(&b, ",num_classes=%u", s->num_classes);
        if (full || s->p != MIX_DEFAULT_P) {
            sb_printf(&b, ",p=");
            sb_number(&b, s->p, 0);
        }
        if (full || s->switch_p != MIX_DEFAULT_SWITCH_P) {
            sb_printf(&b, ",switch_p=");
            sb_number(&b, s->switch_p, 0);
        }
        sb_printf(&b, ")");
        break;
    case STEP_KIND_MAX:
        break;
    default:
        if (step_params[s->kind].p[0].off) /* the audio steps: generic parameters */
            describe_generic(s, &b, full);
        else
            describe_aug(s, &b, full);
        break;
    }
}

void step_describe(const struct step *s, char *buf, size_t len)
{
    describe(s, buf, len, 0);
}

uint32_t step_soft_classes(const struct step *s)
{
    return s->num_classes; /* 0 but for the batch-level steps */
}

uint64_t step_fingerprint(const struct step *s, uint64_t h)
{
    /* The full description names every parameter at a precision that reads
     * back exactly, so two steps share it only when they compute alike. */
    char text[512];
    describe(s, text, sizeof(text), 1);
    h = hash_mix64(h + 0x9e3779b97f4a7c15ULL * ((uint64_t)s->kind + 1));
    for (const char *p = text; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
    return hash_mix64(h);
}

/* ---- shapes ---- */

uint32_t step_out_dtype(const struct step *s, uint32_t in_dtype)
{
    if ((unsigned)s->kind >= STEP_KIND_MAX)
        return in_dtype;
    if (s->kind == STEP_DECODE_AUDIO && s->au.int16) /* dtype: int16 */
        return PROTO_DTYPE_I16;
    return step_sigs[s->kind].give_dtype ? step_sigs[s->kind].give_dtype : in_dtype;
}

uint32_t step_out_layout(const struct step *s, uint32_t in_layout)
{
    if ((unsigned)s->kind >= STEP_KIND_MAX)
        return in_layout;
    if (step_sigs[s->kind].give_layout)
        return step_sigs[s->kind].give_layout == 2 ? STEP_LAYOUT_NCHW : s->layout;
    return s->kind == STEP_DECODE ? STEP_LAYOUT_NHWC : in_layout;
}

void step_out_shape(const struct step *s, uint32_t in_h, uint32_t in_w,
                    uint32_t in_c, uint32_t *h, uint32_t *w, uint32_t *c)
{
    *h = in_h;
    *w = in_w;
    *c = in_c;
    switch (s->kind) {
    case STEP_DECODE:
        *h = 0;
        *w = 0;
        *c = s->channels;
        return;
    case STEP_RESIZE:
        if (s->shorter) {
            uint64_t rh = 0, rw = 0;
            if (in_h && in_w)
                step_resize_shape(s->h, in_h, in_w, &rh, &rw);
            if (rh > UINT32_MAX || rw > UINT32_MAX)
                rh = rw = 0;
            *h = (uint32_t)rh;
            *w = (uint32_t)rw;
            return;
        }
        *h = s->h;
        *w = s->w;
        return;
    case STEP_CENTER_CROP:
    case STEP_RANDOM_RESIZED_CROP:
        *h = s->h;
        *w = s->w;
        return;
    case STEP_DECODE_AUDIO:
    case STEP_RESAMPLE:
    case STEP_TIME_CROP:
    case STEP_RANDOM_TIME_CROP:
    case STEP_MEL_SPECTROGRAM:
        step_sound_shape(s, in_h, in_w, in_c, h, w, c);
        return;
    case STEP_PAD: {
        uint64_t ph = (uint64_t)in_h + s->pad[1] + s->pad[3];
        uint64_t pw = (uint64_t)in_w + s->pad[0] + s->pad[2];
        *h = in_h && in_w && ph <= UINT32_MAX ? (uint32_t)ph : 0;
        *w = in_h && in_w && pw <= UINT32_MAX ? (uint32_t)pw : 0;
        return;
    }
    default:
        return;
    }
}

/* ---- dispatch ---- */

int step_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
               struct img *out)
{
    switch (s->kind) {
    case STEP_DECODE:
        return step_decode_apply(s, ctx, in, out);
    case STEP_RESIZE:
        return step_resize_apply(s, ctx, in, out);
    case STEP_CENTER_CROP:
        return step_crop_apply(s, ctx, in, out);
    case STEP_RANDOM_FLIP:
        return step_flip_apply(s->p, ctx, in, out);
    case STEP_RANDOM_RESIZED_CROP:
        return step_rrc_apply(s, ctx, in, out);
    case STEP_PAD:
        return step_pad_apply(s, ctx, in, out);
    case STEP_NORMALIZE:
    case STEP_TO_FLOAT:
        return step_normalize_apply(s, ctx, in, out);
    case STEP_COLOR_JITTER:
    case STEP_RANDOM_GRAYSCALE:
    case STEP_GAUSSIAN_BLUR:
    case STEP_RANDOM_ROTATION:
    case STEP_RANDOM_AFFINE:
    case STEP_AUTO_AUGMENT:
    case STEP_RAND_AUGMENT:
    case STEP_TRIVIAL_AUGMENT_WIDE:
    case STEP_RANDOM_ERASING:
        return step_imgaug_apply(s, ctx, in, out);
    case STEP_MIXUP:
    case STEP_CUTMIX:
        return step_fail(ctx, -EINVAL, "%s acts on a batch, not on a sample", step_name(s->kind));
    case STEP_DECODE_AUDIO:
    case STEP_RESAMPLE:
    case STEP_TIME_CROP:
    case STEP_RANDOM_TIME_CROP:
    case STEP_MEL_SPECTROGRAM:
    case STEP_AMPLITUDE_TO_DB:
    case STEP_TIME_MASK:
    case STEP_FREQUENCY_MASK:
    case STEP_RANDOM_GAIN:
        return step_sound_apply(s, ctx, in, out);
    default:
        return step_fail(ctx, -EINVAL, "unknown step kind %d", (int)s->kind);
    }
}

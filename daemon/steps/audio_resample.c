/*
 * resample: torchaudio.functional.resample with resampling_method
 * "sinc_interpolation" (torchaudio 0.13, _get_sinc_resample_kernel and
 * _apply_sinc_resample_kernel).
 *
 * With both rates divided by their gcd (orig, new), base = min(orig, new)
 * * rolloff and width = ceil(lowpass_filter_width * orig / base), output
 * sample n = i * new + j is
 *
 *   y[n] = sum_k x[i * orig + k - width] * K[j][k],  k in [0, 2 width + orig)
 *
 * (x is zero outside the clip), for n < ceil(new * frames / orig), with
 *
 *   t = (float32(-j / new) + (k - width) / orig) * base, clamped to +-lpw
 *   K[j][k] = sinc(pi t) * cos(pi t / lpw / 2)^2 * base / orig
 *
 * computed in double and rounded to float32, as transforms.Resample does
 * by default, or with every operation in float32, as functional.resample
 * does on a float32 waveform (f32_kernel; the two kernels differ by up to
 * about 1e-5 in the output). Only the taps with |t| < lpw are kept (the
 * others are below 1e-20), about 2 lpw orig / base + 1 per phase instead of
 * torchaudio's 2 width + orig; sums are accumulated in double.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "audio_impl.h"

struct audio_kernel {
    /* key */
    uint32_t from, to, lpw;
    double rolloff;
    int f32;
    /* reduced rates, padding, taps */
    uint32_t orig, new;
    int64_t width;
    uint32_t taps;       /* floats per phase in w */
    int64_t *first;      /* per phase: k of its first kept tap */
    uint32_t *count;     /* per phase: taps kept */
    float *w;            /* new x taps */
    uint64_t used;       /* the context's tick when last used */
};

static void kernel_free(struct audio_kernel *k)
{
    if (k == NULL)
        return;
    free(k->first);
    free(k->count);
    free(k->w);
    free(k);
}

void audio_resample_ctx_free(struct audio_ctx *ax)
{
    for (int i = 0; i < AUDIO_CTX_KERNELS; i++) {
        kernel_free(ax->kernels[i]);
        ax->kernels[i] = NULL;
    }
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* t of phase j, tap k, and the tap's value, in double or in float32,
 * each operation as torchaudio orders it (t outside +-lpw: 0, dropped). */
static double tap_t(const struct audio_kernel *k, double base, uint32_t j, int64_t kk)
{
    if (k->f32) {
        float tj = (float)-(double)j / (float)k->new;
        float idx = (float)(kk - k->width) / (float)k->orig;
        return (double)((tj + idx) * (float)base);
    }
    double tj = (double)(float)(-(double)j / k->new);
    return (tj + (double)(kk - k->width) / k->orig) * base;
}

static double tap(const struct audio_kernel *k, double t, double scale)
{
    double lpw = k->lpw;
    if (t <= -lpw || t >= lpw)
        return 0.0;
    if (k->f32) {
        float tf = (float)t, pi = (float)M_PI;
        float window = cosf(tf * pi / (float)k->lpw / 2.0f);
        window *= window;
        float tp = tf * pi;
        float v = tp == 0 ? 1.0f : sinf(tp) / tp;
        return v * (window * (float)scale);
    }
    double window = cos(t * M_PI / lpw / 2);
    window *= window;
    double tp = t * M_PI;
    double v = tp == 0 ? 1.0 : sin(tp) / tp;
    return v * (window * scale);
}

static int kernel_make(struct audio_ctx *ax, uint32_t from, uint32_t to, uint32_t lpw,
                       double rolloff, int f32, struct audio_kernel **out)
{
    uint64_t g = gcd64(from, to);
    uint32_t orig = (uint32_t)(from / g), new = (uint32_t)(to / g);
    double base = (orig < new ? orig : new) * rolloff;
    int64_t width = (int64_t)ceil(lpw * (double)orig / base);
    /* |t| < lpw spans 2 lpw orig / base values of k, plus rounding */
    double span = 2.0 * lpw * orig / base;
    uint32_t taps = (uint32_t)ceil(span) + 4;
    if ((double)taps * new > AUDIO_RESAMPLE_KERNEL_MAX)
        return audio_fail(ax, -EINVAL, "resample: %u Hz -> %u Hz needs a kernel of %.0f "
                          "floats (over %u); the rates share too small a divisor",
                          from, to, (double)taps * new, AUDIO_RESAMPLE_KERNEL_MAX);
    struct audio_kernel *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return audio_fail(ax, -ENOMEM, "resample: no memory for a kernel");
    k->first = malloc(sizeof(*k->first) * new);
    k->count = malloc(sizeof(*k->count) * new);
    k->w = malloc(sizeof(*k->w) * (size_t)taps * new);
    if (k->first == NULL || k->count == NULL || k->w == NULL) {
        kernel_free(k);
        return audio_fail(ax, -ENOMEM, "resample: no memory for a kernel");
    }
    k->from = from;
    k->to = to;
    k->lpw = lpw;
    k->rolloff = rolloff;
    k->f32 = f32;
    k->orig = orig;
    k->new = new;
    k->width = width;
    k->taps = taps;
    double scale = base / orig, dl = lpw;
    for (uint32_t j = 0; j < new; j++) {
        /* k with |(k - width) / orig - j / new| * base < lpw: from about
         * width + orig (j / new - lpw / base), a margin each side */
        int64_t lo = width + (int64_t)floor(orig * ((double)j / new - dl / base)) - 2;
        if (lo < 0)
            lo = 0;
        int64_t hi = lo + taps + 2, kmax = 2 * width + orig;
        if (hi > kmax)
            hi = kmax;
        int64_t first = -1;
        uint32_t n = 0;
        float *w = k->w + (size_t)j * taps;
        for (int64_t kk = lo; kk < hi; kk++) {
            double t = tap_t(k, base, j, kk);
            double v = tap(k, t, scale);
            if (v == 0.0 && (first < 0 || t <= -dl))
                continue;
            if (t >= dl)
                break;
            if (first < 0)
                first = kk;
            if (n == taps) { /* cannot happen: span bounds the count */
                kernel_free(k);
                return audio_fail(ax, -EINVAL, "resample: kernel span overflow");
            }
            w[n++] = (float)v;
        }
        k->first[j] = first < 0 ? 0 : first;
        k->count[j] = n;
    }
    *out = k;
    return 0;
}

/* The context's kernel for (from, to, lpw, rolloff), made when missing
 * (replacing the least recently used one). */
static int kernel_get(struct audio_ctx *ax, uint32_t from, uint32_t to, uint32_t lpw,
                      double rolloff, int f32, struct audio_kernel **out)
{
    int slot = 0;
    for (int i = 0; i < AUDIO_CTX_KERNELS; i++) {
        struct audio_kernel *k = ax->kernels[i];
        if (k && k->from == from && k->to == to && k->lpw == lpw && k->rolloff == rolloff &&
            k->f32 == f32) {
            k->used = ++ax->tick;
            *out = k;
            return 0;
        }
        if (k == NULL || (ax->kernels[slot] && k->used < ax->kernels[slot]->used))
            slot = i;
    }
    struct audio_kernel *k = NULL;
    int rc = kernel_make(ax, from, to, lpw, rolloff, f32, &k);
    if (rc < 0)
        return rc;
    kernel_free(ax->kernels[slot]);
    ax->kernels[slot] = k;
    k->used = ++ax->tick;
    *out = k;
    return 0;
}

static void resample_channel(const struct audio_kernel *k, const float *x, int64_t len,
                             float *y, uint64_t frames)
{
    uint64_t n = 0;
    for (int64_t i = 0; n < frames; i++) {
        int64_t base = i * k->orig - k->width;
        for (uint32_t j = 0; j < k->new && n < frames; j++, n++) {
            const float *w = k->w + (size_t)j * k->taps;
            int64_t m = base + k->first[j];
            uint32_t c = k->count[j];
            double sum = 0.0;
            if (m >= 0 && m + c <= len) {
                /* four partial sums: independent chains the CPU overlaps */
                const float *xm = x + m;
                double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
                uint32_t q = 0;
                for (; q + 4 <= c; q += 4) {
                    s0 += (double)xm[q] * w[q];
                    s1 += (double)xm[q + 1] * w[q + 1];
                    s2 += (double)xm[q + 2] * w[q + 2];
                    s3 += (double)xm[q + 3] * w[q + 3];
                }
                for (; q < c; q++)
                    s0 += (double)xm[q] * w[q];
                sum = (s0 + s1) + (s2 + s3);
            } else {
                for (uint32_t q = 0; q < c; q++)
                    if (m + q >= 0 && m + q < len)
                        sum += (double)x[m + q] * w[q];
            }
            y[n] = (float)sum;
        }
    }
}

int audio_resample(struct audio_ctx *ax, const struct audio_resample_params *p,
                   const struct audio_buf *in, struct audio_buf *out)
{
    int rc = audio_check_wave(ax, in, "resample");
    if (rc < 0)
        return rc;
    if (p->rate == 0 || p->rate > AUDIO_RATE_MAX || in->rate == 0 || in->rate > AUDIO_RATE_MAX)
        return audio_fail(ax, -EINVAL, "resample: rates %u Hz -> %u Hz out of range",
                          in->rate, p->rate);
    if (p->lowpass_filter_width == 0 || p->lowpass_filter_width > AUDIO_RESAMPLE_WIDTH_MAX ||
        !(p->rolloff > 0 && p->rolloff <= 1))
        return audio_fail(ax, -EINVAL, "resample: lowpass_filter_width %u or rolloff %g out "
                          "of range", p->lowpass_filter_width, p->rolloff);
    if (in->frames > INT64_MAX / 2)
        return audio_fail(ax, -E2BIG, "resample: too many frames");
    if (p->rate == in->rate) {
        if ((rc = audio_buf_shape(ax, out, in->channels, 0, in->frames, in->rate,
                                  "resample")) < 0)
            return rc;
        memcpy(out->data, in->data, audio_buf_count(in) * sizeof(float));
        return 0;
    }
    struct audio_kernel *k = NULL;
    if ((rc = kernel_get(ax, in->rate, p->rate, p->lowpass_filter_width, p->rolloff,
                         p->f32_kernel != 0, &k)) < 0)
        return rc;
    /* int(math.ceil(new * length / orig)): exact product, rounded quotient */
    double q = (double)((unsigned __int128)k->new * in->frames) / k->orig;
    uint64_t frames = (uint64_t)ceil(q);
    if ((rc = audio_buf_shape(ax, out, in->channels, 0, frames, p->rate, "resample")) < 0)
        return rc;
    for (uint32_t c = 0; c < in->channels; c++)
        resample_channel(k, in->data + (size_t)c * in->frames, (int64_t)in->frames,
                         out->data + (size_t)c * frames, frames);
    return 0;
}

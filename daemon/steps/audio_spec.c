/*
 * spectrogram, mel_spectrogram, amplitude_to_db: torchaudio 0.13's
 * transforms.Spectrogram, MelSpectrogram and AmplitudeToDB.
 *
 * Spectrogram (functional.spectrogram, torch.stft): with center, the clip
 * is padded by n_fft / 2 on each side (reflect, constant, replicate or
 * circular, as torch.nn.functional.pad; reflect and circular need a clip
 * longer than the pad, as in torch); frame t holds samples [t hop, t hop +
 * n_fft) times the periodic Hann window of win_length samples centred in
 * n_fft (torch.hann_window, computed in float32 as torch computes it);
 * frames = 1 + (padded - n_fft) / hop. Each frame's real FFT (FFTW3, double
 * precision) gives n_fft / 2 + 1 bins, divided by sqrt(n_fft) when
 * normalized is frame_length or by the window's L2 norm when it is window,
 * and raised to |X|^power.
 *
 * MelSpectrogram multiplies that by MelScale's triangular filter bank
 * (functional.melscale_fbanks: n_freqs points from 0 to sample_rate // 2,
 * n_mels + 2 points evenly spaced on the htk or slaney mel scale from f_min
 * to f_max, optional slaney area normalisation), computed in float32
 * operation by operation as torchaudio computes it, and kept sparse (each
 * filter's nonzero range). Spectrum and sums are in double; the result is
 * rounded to float32 once, at the end.
 *
 * AmplitudeToDB works in float32 as torch does: multiplier *
 * log10(max(x, amin)) - multiplier * log10(max(amin, ref)), then the floor
 * max - top_db over the whole clip (all channels: torchaudio packs a
 * (channel, freq, time) tensor as one).
 *
 * FFT plans: FFTW's planner is not thread-safe, so plans are made and
 * destroyed under one process-wide mutex (the only global state here; FFTW
 * keeps its own), with FFTW_ESTIMATE on buffers from fftw_malloc, so every
 * thread gets the same plan and the same bytes. A context keeps a plan per
 * n_fft it has seen (AUDIO_CTX_PLANS, least recently used replaced) and
 * runs it with fftw_execute on the plan's own buffers.
 */
#include <errno.h>
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "audio_impl.h"

static pthread_mutex_t planner_lock = PTHREAD_MUTEX_INITIALIZER;

struct audio_plan {
    uint32_t n;
    fftw_plan plan;
    double *in;
    fftw_complex *out;
    uint64_t used;
};

struct audio_spec {
    struct audio_spec_params p;
    uint32_t n_freqs;      /* n_fft / 2 + 1 */
    uint32_t win_off;      /* the window's first sample in the frame */
    float *window;         /* win_length values */
    double scale;          /* 1, 1 / sqrt(n_fft) or 1 / ||window|| */
    /* mel filter m: bins [lo[m], lo[m] + len[m]) with weights fb + off[m] */
    uint32_t *lo, *len;
    size_t *off;
    double *fb;
};

static void plan_free(struct audio_plan *pl)
{
    if (pl == NULL)
        return;
    pthread_mutex_lock(&planner_lock);
    if (pl->plan)
        fftw_destroy_plan(pl->plan);
    pthread_mutex_unlock(&planner_lock);
    fftw_free(pl->in);
    fftw_free(pl->out);
    free(pl);
}

void audio_spec_ctx_free(struct audio_ctx *ax)
{
    for (int i = 0; i < AUDIO_CTX_PLANS; i++) {
        plan_free(ax->plans[i]);
        ax->plans[i] = NULL;
    }
}

static int plan_get(struct audio_ctx *ax, uint32_t n, struct audio_plan **out)
{
    int slot = 0;
    for (int i = 0; i < AUDIO_CTX_PLANS; i++) {
        struct audio_plan *pl = ax->plans[i];
        if (pl && pl->n == n) {
            pl->used = ++ax->tick;
            *out = pl;
            return 0;
        }
        if (pl == NULL || (ax->plans[slot] && pl->used < ax->plans[slot]->used))
            slot = i;
    }
    struct audio_plan *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return audio_fail(ax, -ENOMEM, "spectrogram: no memory for an FFT plan");
    pl->n = n;
    pl->in = fftw_malloc(sizeof(double) * n);
    pl->out = fftw_malloc(sizeof(fftw_complex) * (n / 2 + 1));
    if (pl->in && pl->out) {
        pthread_mutex_lock(&planner_lock);
        pl->plan = fftw_plan_dft_r2c_1d((int)n, pl->in, pl->out, FFTW_ESTIMATE);
        pthread_mutex_unlock(&planner_lock);
    }
    if (pl->plan == NULL) {
        plan_free(pl);
        return audio_fail(ax, -ENOMEM, "spectrogram: cannot plan a %u-point FFT", n);
    }
    plan_free(ax->plans[slot]);
    ax->plans[slot] = pl;
    pl->used = ++ax->tick;
    *out = pl;
    return 0;
}

/* ---- the mel filter bank (functional.melscale_fbanks) ---- */

/* _hz_to_mel: Python floats (double) */
static double hz_to_mel(double f, enum audio_mel_scale scale)
{
    if (scale == AUDIO_MEL_HTK)
        return 2595.0 * log10(1.0 + f / 700.0);
    const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = log(6.4) / 27.0;
    return f >= min_log_hz ? min_log_mel + log(f / min_log_hz) / logstep : f / f_sp;
}

/* _mel_to_hz on a float32 tensor: every operation in float32 */
static float mel_to_hz(float m, enum audio_mel_scale scale)
{
    if (scale == AUDIO_MEL_HTK)
        return 700.0f * (powf(10.0f, m / 2595.0f) - 1.0f);
    const float f_sp = (float)(200.0 / 3), min_log_hz = 1000.0f;
    const float min_log_mel = (float)(1000.0 / (200.0 / 3)), logstep = (float)(log(6.4) / 27.0);
    return m >= min_log_mel ? min_log_hz * expf(logstep * (m - min_log_mel)) : 0.0f + f_sp * m;
}

/* torch.linspace(start, end, n) in float32 as PyTorch 1.13's AVX2 kernel
 * computes it (what Debian's python3-torch runs on any x86-64 with AVX2):
 * blocks of 8 lanes, two blocks at a time, whose base is fma(step, i,
 * start) in the first half or fma(-step, n - 1 - i, end) in the second
 * (the compiler contracts those), lane l then base + l * step rounded
 * twice; the tail one value at a time with the base formula. (A machine
 * without AVX2 runs torch's plain kernel, whose points can differ in the
 * last bit.) */
static void linspace(float start, float end, uint32_t n, float *out)
{
    if (n == 1) {
        out[0] = start;
        return;
    }
    float step = (end - start) / (float)(n - 1);
    uint32_t half = n / 2, i = 0;
#define LINSPACE_BASE(k) ((k) < half ? fmaf(step, (float)(k), start) \
                                     : fmaf(-step, (float)(n - 1 - (k)), end))
    for (; n - i >= 16; i += 8) {
        float base = LINSPACE_BASE(i);
        for (uint32_t l = 0; l < 8; l++)
            out[i + l] = base + (float)l * step;
        base = LINSPACE_BASE(i + 8);
        for (uint32_t l = 0; l < 8; l++)
            out[i + 8 + l] = base + (float)l * step;
        i += 8;
    }
    for (; i < n; i++)
        out[i] = LINSPACE_BASE(i);
#undef LINSPACE_BASE
}

static int fail_param(char *err, size_t errlen, const char *msg)
{
    if (errlen)
        snprintf(err, errlen, "%s", msg);
    return -EINVAL;
}

/* melscale_fbanks, computed in float32 exactly as torchaudio computes it
 * (the filter weights are part of what MelSpectrogram means), each filter
 * kept as its nonzero range. */
static int make_fbank(struct audio_spec *s, char *err, size_t errlen)
{
    const struct audio_spec_params *p = &s->p;
    uint32_t nf = s->n_freqs, nm = p->n_mels;
    double fmax = p->f_max < 0 ? (double)(p->sample_rate / 2) : p->f_max;
    float m_min = (float)hz_to_mel(p->f_min, p->mel_scale);
    float m_max = (float)hz_to_mel(fmax, p->mel_scale);
    float *f_pts = malloc(sizeof(float) * (nm + 2));
    float *freqs = malloc(sizeof(float) * nf);
    float *dense = malloc(sizeof(float) * (size_t)nf * nm);
    s->lo = calloc(nm, sizeof(*s->lo));
    s->len = calloc(nm, sizeof(*s->len));
    s->off = calloc(nm, sizeof(*s->off));
    int rc = 0;
    if (f_pts == NULL || freqs == NULL || dense == NULL || !s->lo || !s->len || !s->off) {
        rc = fail_param(err, errlen, "no memory for the mel filter bank");
        goto out;
    }
    linspace(m_min, m_max, nm + 2, f_pts);
    for (uint32_t i = 0; i < nm + 2; i++)
        f_pts[i] = mel_to_hz(f_pts[i], p->mel_scale);
    linspace(0.0f, (float)(p->sample_rate / 2), nf, freqs);
    size_t total = 0;
    for (uint32_t m = 0; m < nm; m++) {
        float d0 = f_pts[m + 1] - f_pts[m], d1 = f_pts[m + 2] - f_pts[m + 1];
        float enorm = 2.0f / (f_pts[m + 2] - f_pts[m]);
        uint32_t lo = nf, hi = 0;
        for (uint32_t f = 0; f < nf; f++) {
            float down = (-1.0f * (f_pts[m] - freqs[f])) / d0;
            float up = (f_pts[m + 2] - freqs[f]) / d1;
            float w = down < up ? down : up;
            w = w > 0.0f ? w : 0.0f;
            if (p->slaney_norm)
                w *= enorm;
            dense[(size_t)m * nf + f] = w;
            if (w > 0.0f) {
                if (lo == nf)
                    lo = f;
                hi = f + 1;
            }
        }
        s->lo[m] = lo == nf ? 0 : lo;
        s->len[m] = lo == nf ? 0 : hi - lo;
        total += s->len[m];
    }
    s->fb = malloc(sizeof(double) * (total ? total : 1));
    if (s->fb == NULL) {
        rc = fail_param(err, errlen, "no memory for the mel filter bank");
        goto out;
    }
    size_t at = 0;
    for (uint32_t m = 0; m < nm; m++) {
        s->off[m] = at;
        for (uint32_t q = 0; q < s->len[m]; q++)
            s->fb[at + q] = dense[(size_t)m * nf + s->lo[m] + q];
        at += s->len[m];
    }
out:
    free(f_pts);
    free(freqs);
    free(dense);
    return rc;
}

void audio_spec_free(struct audio_spec *s)
{
    if (s == NULL)
        return;
    free(s->window);
    free(s->lo);
    free(s->len);
    free(s->off);
    free(s->fb);
    free(s);
}

int audio_spec_new(const struct audio_spec_params *params, struct audio_spec **out, char *err,
                   size_t errlen)
{
    struct audio_spec_params p = *params;
    *out = NULL;
    if (p.n_fft < 2 || p.n_fft > AUDIO_NFFT_MAX)
        return fail_param(err, errlen, "n_fft must be in 2..65536");
    if (p.win_length == 0)
        p.win_length = p.n_fft;
    if (p.win_length > p.n_fft)
        return fail_param(err, errlen, "win_length must not exceed n_fft");
    if (p.hop_length == 0)
        p.hop_length = p.win_length / 2 ? p.win_length / 2 : 1;
    if (!(p.power > 0) || p.power > 16)
        return fail_param(err, errlen, "power must be in (0, 16]");
    if ((unsigned)p.pad_mode > AUDIO_PADMODE_CIRCULAR || (unsigned)p.normalized >
        AUDIO_NORM_FRAME_LENGTH || (unsigned)p.mel_scale > AUDIO_MEL_SLANEY)
        return fail_param(err, errlen, "unknown pad_mode, normalized or mel_scale");
    if (p.n_mels > AUDIO_MELS_MAX)
        return fail_param(err, errlen, "n_mels must be at most 4096");
    if (p.n_mels) {
        if (p.sample_rate == 0 || p.sample_rate > AUDIO_RATE_MAX)
            return fail_param(err, errlen, "sample_rate must be in 1..768000");
        double fmax = p.f_max < 0 ? (double)(p.sample_rate / 2) : p.f_max;
        if (!(p.f_min >= 0) || !(fmax > p.f_min) || fmax > p.sample_rate / 2.0)
            return fail_param(err, errlen, "need 0 <= f_min < f_max <= sample_rate / 2");
    }
    struct audio_spec *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return fail_param(err, errlen, "no memory");
    s->p = p;
    s->n_freqs = p.n_fft / 2 + 1;
    s->win_off = (p.n_fft - p.win_length) / 2;
    s->window = malloc(sizeof(float) * p.win_length);
    if (s->window == NULL) {
        audio_spec_free(s);
        return fail_param(err, errlen, "no memory");
    }
    /* torch.hann_window(N) (periodic): float32 arange * (2 pi / N), cos,
     * * -0.5, + 0.5 */
    float step = (float)(M_PI * 2.0 / p.win_length);
    double energy = 0.0;
    for (uint32_t i = 0; i < p.win_length; i++) {
        float c = cosf((float)i * step);
        s->window[i] = c * -0.5f + 0.5f;
        energy += (double)s->window[i] * s->window[i];
    }
    s->scale = p.normalized == AUDIO_NORM_FRAME_LENGTH ? 1.0 / sqrt((double)p.n_fft)
               : p.normalized == AUDIO_NORM_WINDOW   ? 1.0 / sqrt(energy)
                                                     : 1.0;
    if (p.n_mels) {
        int rc = make_fbank(s, err, errlen);
        if (rc < 0) {
            audio_spec_free(s);
            return rc;
        }
    }
    *out = s;
    return 0;
}

uint32_t audio_spec_bins(const struct audio_spec *s)
{
    return s->p.n_mels ? s->p.n_mels : s->n_freqs;
}

uint64_t audio_spec_frames(const struct audio_spec *s, uint64_t frames)
{
    uint64_t padded = frames + (s->p.center ? 2ull * (s->p.n_fft / 2) : 0);
    if (padded < s->p.n_fft)
        return 0;
    return 1 + (padded - s->p.n_fft) / s->p.hop_length;
}

/* Sample i of the padded signal (i in [0, len + 2 pad)). */
static float padded_at(const float *x, int64_t len, int64_t pad, int64_t i,
                       enum audio_pad_mode mode)
{
    int64_t j = i - pad;
    if (j >= 0 && j < len)
        return x[j];
    switch (mode) {
    case AUDIO_PADMODE_REFLECT:
        return x[j < 0 ? -j : 2 * (len - 1) - j];
    case AUDIO_PADMODE_REPLICATE:
        return x[j < 0 ? 0 : len - 1];
    case AUDIO_PADMODE_CIRCULAR:
        return x[j < 0 ? j + len : j - len];
    default:
        return 0.0f;
    }
}

int audio_spec_apply(const struct audio_spec *s, struct audio_ctx *ax,
                     const struct audio_buf *in, struct audio_buf *out)
{
    const struct audio_spec_params *p = &s->p;
    const char *who = p->n_mels ? "mel_spectrogram" : "spectrogram";
    int rc = audio_check_wave(ax, in, who);
    if (rc < 0)
        return rc;
    if (p->n_mels && in->rate != p->sample_rate)
        return audio_fail(ax, -EINVAL, "%s: the clip is %u Hz, the step expects %u Hz "
                          "(resample first)", who, in->rate, p->sample_rate);
    int64_t len = (int64_t)in->frames, pad = p->center ? p->n_fft / 2 : 0;
    if (pad && (p->pad_mode == AUDIO_PADMODE_REFLECT || p->pad_mode == AUDIO_PADMODE_CIRCULAR)
        && pad >= len + (p->pad_mode == AUDIO_PADMODE_CIRCULAR))
        return audio_fail(ax, -EINVAL, "%s: %lld frames is too short to pad by %lld (%s)", who,
                          (long long)len, (long long)pad,
                          p->pad_mode == AUDIO_PADMODE_REFLECT ? "reflect" : "circular");
    uint64_t frames = audio_spec_frames(s, in->frames);
    if (frames == 0)
        return audio_fail(ax, -EINVAL, "%s: %lld frames is shorter than n_fft %u", who,
                          (long long)len, p->n_fft);
    uint32_t bins = audio_spec_bins(s);
    if ((rc = audio_buf_shape(ax, out, in->channels, bins, frames, in->rate, who)) < 0)
        return rc;
    struct audio_plan *pl = NULL;
    if ((rc = plan_get(ax, p->n_fft, &pl)) < 0)
        return rc;
    /* per frame: the power spectrum in double, before the mel filters */
    if ((rc = audio_scratch(ax, (size_t)s->n_freqs * 2)) < 0)
        return audio_fail(ax, rc, "%s: no memory", who);
    double *power = (double *)ax->scratch;
    int plain = p->power == 2.0, mag = p->power == 1.0;
    double scale2 = s->scale * s->scale;
    for (uint32_t c = 0; c < in->channels; c++) {
        const float *x = in->data + (size_t)c * in->frames;
        float *y = out->data + (size_t)c * bins * frames;
        for (uint64_t t = 0; t < frames; t++) {
            int64_t at = (int64_t)(t * p->hop_length) + s->win_off;
            memset(pl->in, 0, sizeof(double) * p->n_fft);
            double *fr = pl->in + s->win_off;
            if (at >= pad && at + p->win_length <= len + pad) {
                const float *xs = x + (at - pad);
                for (uint32_t k = 0; k < p->win_length; k++)
                    fr[k] = (double)xs[k] * s->window[k];
            } else {
                for (uint32_t k = 0; k < p->win_length; k++)
                    fr[k] = (double)padded_at(x, len, pad, at + k, p->pad_mode) * s->window[k];
            }
            fftw_execute(pl->plan);
            for (uint32_t f = 0; f < s->n_freqs; f++) {
                double re = pl->out[f][0], im = pl->out[f][1];
                double pw = (re * re + im * im) * scale2;
                power[f] = plain ? pw : mag ? sqrt(pw) : pow(sqrt(pw), p->power);
            }
            if (p->n_mels == 0) {
                for (uint32_t f = 0; f < bins; f++)
                    y[(size_t)f * frames + t] = (float)power[f];
                continue;
            }
            for (uint32_t m = 0; m < bins; m++) {
                const double *w = s->fb + s->off[m];
                const double *pw = power + s->lo[m];
                double sum = 0.0;
                for (uint32_t q = 0; q < s->len[m]; q++)
                    sum += pw[q] * w[q];
                y[(size_t)m * frames + t] = (float)sum;
            }
        }
    }
    return 0;
}

/* ---- amplitude_to_db ---- */

int audio_db(struct audio_ctx *ax, const struct audio_db_params *p, struct audio_buf *b)
{
    size_t n = audio_buf_count(b);
    if (n == 0)
        return audio_fail(ax, -EINVAL, "amplitude_to_db: empty input");
    float mult = (float)p->multiplier, amin = (float)p->amin;
    double ref = p->ref > p->amin ? p->ref : p->amin;
    float off = (float)(p->multiplier * log10(ref));
    float top = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        float x = b->data[i];
        float v = mult * log10f(x > amin ? x : amin) - off;
        if (x != x) /* NaN stays NaN, as torch.clamp leaves it */
            v = x;
        b->data[i] = v;
        if (v > top)
            top = v;
    }
    if (p->top_db >= 0) {
        float floor_db = top - (float)p->top_db;
        for (size_t i = 0; i < n; i++)
            if (b->data[i] < floor_db)
                b->data[i] = floor_db;
    }
    return 0;
}

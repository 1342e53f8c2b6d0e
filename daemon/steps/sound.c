/*
 * The audio steps (issue 18): the functions of audio.h as pipeline steps.
 *
 * A clip travels between steps as a struct img of float32 in nchw: c
 * channels, h rows (1 for a waveform, the bins of a spectrogram), w frames,
 * and its sample rate in img.rate; the tiers store and the batch carries
 * exactly that (see step.h's sample model). Each step views its input as a
 * struct audio_buf, runs the audio function into the thread's scratch clip
 * and copies the result out (in-place steps copy first, then work on the
 * output), so a borrowed output (the batch's slot) is written once.
 *
 * Randomness: random_time_crop, time_mask, frequency_mask and random_gain
 * draw from ctx->seed (the pipeline's per-sample, per-step seed) with
 * hash_rand01, so (stream seed, epoch, sample id) fixes every draw.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "hash.h"
#include "proto.h"
#include "step.h"
#include "step_impl.h"

#define SOUND_SPECS 4 /* spectrogram set-ups a thread keeps */

struct step_sound {
    struct audio_ctx *ax;
    struct audio_buf tmp; /* a step's result before it is copied out */
    struct {
        struct audio_spec_params p;
        struct audio_spec *spec;
    } specs[SOUND_SPECS];
    unsigned next_spec;
};

void step_sound_ctx_free(struct step_ctx *ctx)
{
    struct step_sound *ss = ctx->sound;
    if (!ss)
        return;
    audio_ctx_free(ss->ax);
    audio_buf_free(&ss->tmp);
    for (unsigned i = 0; i < SOUND_SPECS; i++)
        audio_spec_free(ss->specs[i].spec);
    free(ss);
    ctx->sound = NULL;
}

static struct step_sound *sound_get(struct step_ctx *ctx)
{
    if (ctx->sound)
        return ctx->sound;
    struct step_sound *ss = calloc(1, sizeof(*ss));
    if (!ss || audio_ctx_new(&ss->ax) < 0) {
        free(ss);
        return NULL;
    }
    ctx->sound = ss;
    return ss;
}

/* ---- parameters (step.c's table holds their names and ranges) ---- */

void step_sound_defaults(struct step *s)
{
    struct step_audio *a = &s->au;
    memset(a, 0, sizeof(*a));
    a->width = 6;
    a->rolloff = 0.99;
    a->n_fft = 400;
    a->n_mels = 128;
    a->f_max = -1.0;
    a->power = 2.0;
    a->center = 1;
    a->pad_mode = AUDIO_PADMODE_REFLECT;
    a->mel_scale = AUDIO_MEL_HTK;
    a->top_db = -1.0;
    a->mask_p = 1.0;
}

static uint32_t spec_win(const struct step_audio *a)
{
    return a->win_length ? a->win_length : a->n_fft;
}

static uint32_t spec_hop(const struct step_audio *a)
{
    return a->hop_length ? a->hop_length : spec_win(a) / 2;
}

static void spec_params(const struct step_audio *a, struct audio_spec_params *p)
{
    memset(p, 0, sizeof(*p)); /* compared with memcmp */
    p->n_fft = a->n_fft;
    p->win_length = spec_win(a);
    p->hop_length = spec_hop(a);
    p->power = a->power;
    p->center = (int)a->center;
    p->pad_mode = (enum audio_pad_mode)a->pad_mode;
    p->normalized = (enum audio_norm)a->normalized;
    p->n_mels = a->n_mels;
    p->sample_rate = a->sample_rate;
    p->f_min = a->f_min;
    p->f_max = a->f_max;
    p->slaney_norm = a->norm == 1;
    p->mel_scale = (enum audio_mel_scale)a->mel_scale;
}

int step_sound_init(struct step *s, char *err, size_t errlen)
{
    const struct step_audio *a = &s->au;
    if (s->kind != STEP_MEL_SPECTROGRAM)
        return 0;
    if (spec_win(a) > a->n_fft) {
        snprintf(err, errlen, "step 'mel_spectrogram': win_length %u is more than n_fft %u",
                 spec_win(a), a->n_fft);
        return -EINVAL;
    }
    if (spec_hop(a) == 0) {
        snprintf(err, errlen, "step 'mel_spectrogram': hop_length is 0 (win_length / 2)");
        return -EINVAL;
    }
    return 0;
}

int step_sound_chain(struct step *s, uint32_t *rate, char *err, size_t errlen)
{
    struct step_audio *a = &s->au;
    switch (s->kind) {
    case STEP_DECODE_AUDIO:
        *rate = 0; /* each file's own */
        return 0;
    case STEP_RESAMPLE:
        *rate = a->rate;
        return 0;
    case STEP_MEL_SPECTROGRAM: {
        if (a->sample_rate == 0)
            a->sample_rate = *rate ? *rate : 16000; /* torchaudio's default */
        else if (*rate && a->sample_rate != *rate) {
            snprintf(err, errlen, "mel_spectrogram: sample_rate %u is not the %u Hz the "
                     "resample before it gives", a->sample_rate, *rate);
            return -EINVAL;
        }
        struct audio_spec_params p;
        struct audio_spec *spec;
        char why[200];
        spec_params(a, &p);
        if (audio_spec_new(&p, &spec, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "mel_spectrogram: %s", why);
            return -EINVAL;
        }
        audio_spec_free(spec);
        return 0;
    }
    default:
        return 0;
    }
}

void step_sound_shape(const struct step *s, uint32_t in_h, uint32_t in_w, uint32_t in_c,
                      uint32_t *h, uint32_t *w, uint32_t *c)
{
    const struct step_audio *a = &s->au;
    *h = in_h;
    *w = in_w;
    *c = in_c;
    switch (s->kind) {
    case STEP_DECODE_AUDIO:
        *c = a->mono ? 1 : 0; /* else the file's */
        *h = 1;
        *w = 0;
        return;
    case STEP_RESAMPLE:
        *w = 0; /* the input's rate is the file's */
        return;
    case STEP_TIME_CROP:
    case STEP_RANDOM_TIME_CROP:
        *w = a->length;
        return;
    case STEP_MEL_SPECTROGRAM: {
        *h = a->n_mels;
        uint64_t n = in_w, fft = a->n_fft;
        uint64_t padded = n + (a->center ? 2 * (fft / 2) : 0);
        *w = n && padded >= fft && (padded - fft) / spec_hop(a) + 1 <= UINT32_MAX
                 ? (uint32_t)((padded - fft) / spec_hop(a) + 1) : 0;
        return;
    }
    default:
        return;
    }
}

/* ---- clips in and out ---- */

/* A view of in as the clip step s takes (a waveform or a spectrogram). */
static int view_in(struct step_ctx *ctx, const struct step *s, const struct img *in,
                   struct audio_buf *b)
{
    const char *name = step_name(s->kind);
    if (in->fmt != IMG_PIXELS || in->dtype != PROTO_DTYPE_F32)
        return step_fail(ctx, -EINVAL, "%s: the input is not a float32 clip", name);
    size_t n = (size_t)in->c * in->h * in->w;
    if (n == 0 || in->len != n * sizeof(float))
        return step_fail(ctx, -EINVAL, "%s: the input holds %zu bytes, %ux%ux%u floats",
                         name, in->len, in->c, in->h, in->w);
    int spectrogram = s->kind == STEP_AMPLITUDE_TO_DB || s->kind == STEP_TIME_MASK ||
                      s->kind == STEP_FREQUENCY_MASK;
    if (!spectrogram && in->h != 1)
        return step_fail(ctx, -EINVAL, "%s: the input has %u rows, not a waveform", name,
                         in->h);
    *b = (struct audio_buf){.data = (float *)(void *)in->data, .channels = in->c,
                            .bins = spectrogram ? in->h : 0, .frames = in->w,
                            .rate = in->rate};
    return 0;
}

/* Makes out the shape of b, with room for it. */
static int out_shape(struct step_ctx *ctx, struct img *out, const struct audio_buf *b)
{
    size_t n = audio_buf_count(b);
    uint32_t rows = b->bins ? b->bins : 1;
    if (n == 0 || b->frames > UINT32_MAX)
        return step_fail(ctx, -EINVAL, "an empty or oversized clip (%u x %u x %llu)",
                         b->channels, rows, (unsigned long long)b->frames);
    int rc = step_out_pixels_as(ctx, out, rows, (uint32_t)b->frames, b->channels,
                                PROTO_DTYPE_F32);
    if (rc < 0)
        return rc;
    out->rate = b->rate;
    return 0;
}

/* Copies b into out (out's shape and rate become b's). */
static int copy_out(struct step_ctx *ctx, struct img *out, const struct audio_buf *b)
{
    int rc = out_shape(ctx, out, b);
    if (rc == 0 && (const void *)out->data != (const void *)b->data)
        memcpy(out->data, b->data, out->len);
    return rc;
}

/* decode_audio {dtype: int16}: b's samples x 32768, rounded to the nearest
 * (ties to even, as torch.round) and clamped: a 16-bit PCM file's own
 * samples, as torchaudio.load(normalize=False) gives them. */
static int copy_out_i16(struct step_ctx *ctx, struct img *out, const struct audio_buf *b)
{
    size_t n = audio_buf_count(b);
    if (n == 0 || b->frames > UINT32_MAX)
        return step_fail(ctx, -EINVAL, "an empty or oversized clip (%u x %llu)", b->channels,
                         (unsigned long long)b->frames);
    int rc = step_out_pixels_as(ctx, out, 1, (uint32_t)b->frames, b->channels,
                                PROTO_DTYPE_I16);
    if (rc < 0)
        return rc;
    out->rate = b->rate;
    int16_t *o = (int16_t *)(void *)out->data;
    for (size_t i = 0; i < n; i++) {
        float v = nearbyintf(b->data[i] * 32768.0f);
        v = v == v ? v : 0.0f; /* a NaN (never from our decoders): 0 */
        o[i] = (int16_t)(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
    }
    return 0;
}

/* An audio function's failure: its message, and -EBADMSG for what is the
 * sample's fault (-E2BIG kept: over a limit). */
static int sound_fail(struct step_ctx *ctx, struct step_sound *ss, int rc)
{
    step_fail(ctx, rc, "%s", audio_ctx_error(ss->ax));
    return rc == -E2BIG || rc == -ENOMEM || rc == -ENOSPC ? rc : -EBADMSG;
}

static struct audio_spec *spec_get(struct step_ctx *ctx, struct step_sound *ss,
                                   const struct step *s)
{
    struct audio_spec_params p;
    spec_params(&s->au, &p);
    for (unsigned i = 0; i < SOUND_SPECS; i++)
        if (ss->specs[i].spec && memcmp(&ss->specs[i].p, &p, sizeof(p)) == 0)
            return ss->specs[i].spec;
    unsigned i = ss->next_spec++ % SOUND_SPECS;
    audio_spec_free(ss->specs[i].spec);
    ss->specs[i].spec = NULL;
    if (audio_spec_new(&p, &ss->specs[i].spec, ctx->err, sizeof(ctx->err)) < 0)
        return NULL;
    ss->specs[i].p = p;
    return ss->specs[i].spec;
}

int step_sound_apply(const struct step *s, struct step_ctx *ctx, const struct img *in,
                     struct img *out)
{
    struct step_sound *ss = sound_get(ctx);
    if (!ss)
        return step_fail(ctx, -ENOMEM, "%s: out of memory", step_name(s->kind));
    const struct step_audio *a = &s->au;
    struct audio_buf src, *tmp = &ss->tmp;
    uint64_t seed = ctx->seed;
    int rc;

    if (s->kind == STEP_DECODE_AUDIO) {
        ctx->audio_format = AUDIO_FMT_NONE;
        if (in->fmt != IMG_ENCODED)
            return step_fail(ctx, -EINVAL, "decode_audio: the input is not a file's bytes");
        struct audio_limits lim = {ctx->max_seconds, ctx->max_channels};
        /* The extension says the format, as torchaudio.load's backends go by
         * it (a FLAC named .wav is a bad sample: wrong extension); a name
         * without one of ours (a manifest's path) goes by the bytes. No
         * magic: MP3 without an ID3 tag is the one format that may lack it,
         * and mpg123 refuses what is not MP3. */
        enum audio_format fmt = ctx->name ? audio_format_from_name(ctx->name)
                                          : AUDIO_FMT_NONE;
        if (fmt == AUDIO_FMT_NONE)
            fmt = audio_format_sniff(in->data, in->len);
        fmt = fmt ? fmt : AUDIO_FMT_MP3;
        ctx->audio_format = (int)fmt; /* the pipeline's per-format counts */
        rc = audio_decode(ss->ax, in->data, in->len, fmt, (int)a->mono, &lim, tmp);
        if (rc < 0)
            return sound_fail(ctx, ss, rc);
        return a->int16 ? copy_out_i16(ctx, out, tmp) : copy_out(ctx, out, tmp);
    }
    if ((rc = view_in(ctx, s, in, &src)) < 0)
        return rc;
    switch (s->kind) {
    case STEP_RESAMPLE: {
        struct audio_resample_params p = {a->rate, a->width, a->rolloff, 1};
        if (src.rate == 0)
            return step_fail(ctx, -EBADMSG, "resample: the input has no sample rate");
        rc = audio_resample(ss->ax, &p, &src, tmp);
        return rc < 0 ? sound_fail(ctx, ss, rc) : copy_out(ctx, out, tmp);
    }
    case STEP_TIME_CROP:
    case STEP_RANDOM_TIME_CROP: {
        int64_t start;
        if (s->kind == STEP_RANDOM_TIME_CROP)
            start = audio_crop_start(src.frames, a->length, (enum audio_pad)a->pad,
                                     hash_rand01(&seed));
        else if (a->pad == 0) /* align start: x[:, :length], zeros after */
            start = 0;
        else if (src.frames >= a->length) /* centre: (frames - length) / 2 in front */
            start = (int64_t)((src.frames - a->length) / 2);
        else
            start = audio_crop_start(src.frames, a->length, AUDIO_PAD_CENTER, 0);
        rc = audio_crop_pad(ss->ax, &src, a->length, start, tmp);
        return rc < 0 ? sound_fail(ctx, ss, rc) : copy_out(ctx, out, tmp);
    }
    case STEP_MEL_SPECTROGRAM: {
        if (src.rate != a->sample_rate)
            return step_fail(ctx, -EBADMSG, "mel_spectrogram: the clip is at %u Hz, not the "
                             "%u Hz of its sample_rate (resample first)", src.rate,
                             a->sample_rate);
        struct audio_spec *spec = spec_get(ctx, ss, s);
        if (!spec)
            return -EINVAL;
        rc = audio_spec_apply(spec, ss->ax, &src, tmp);
        return rc < 0 ? sound_fail(ctx, ss, rc) : copy_out(ctx, out, tmp);
    }
    default:
        break;
    }
    /* In place on a copy in out. */
    if ((rc = copy_out(ctx, out, &src)) < 0)
        return rc;
    struct audio_buf o = src;
    o.data = (float *)(void *)out->data;
    o.cap = 0;
    switch (s->kind) {
    case STEP_AMPLITUDE_TO_DB: {
        struct audio_db_params p = {a->stype ? 20.0 : 10.0, 1e-10, 1.0, a->top_db};
        rc = audio_db(ss->ax, &p, &o);
        break;
    }
    case STEP_TIME_MASK:
    case STEP_FREQUENCY_MASK: {
        int time = s->kind == STEP_TIME_MASK;
        uint64_t start, end;
        float u_len = (float)hash_rand01(&seed), u_pos = (float)hash_rand01(&seed);
        audio_mask_span(a->mask_param, time ? a->mask_p : 1.0, time ? o.frames : o.bins,
                        u_len, u_pos, &start, &end);
        rc = end > start ? audio_mask(ss->ax, &o, time ? AUDIO_AXIS_TIME : AUDIO_AXIS_FREQ,
                                      start, end, 0.0f) : 0;
        break;
    }
    case STEP_RANDOM_GAIN:
        audio_gain(&o, a->gain[0] + hash_rand01(&seed) * (a->gain[1] - a->gain[0]));
        rc = 0;
        break;
    default:
        return step_fail(ctx, -EINVAL, "%s: not an audio step", step_name(s->kind));
    }
    return rc < 0 ? sound_fail(ctx, ss, rc) : 0;
}

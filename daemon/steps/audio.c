/*
 * Audio clips and the per-thread context: buffers, errors, and the
 * release of what each audio module keeps per thread.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"
#include "audio_impl.h"

size_t audio_buf_count(const struct audio_buf *b)
{
    size_t n;
    if (__builtin_mul_overflow((size_t)b->channels, (size_t)(b->bins ? b->bins : 1), &n) ||
        b->frames > SIZE_MAX || __builtin_mul_overflow(n, (size_t)b->frames, &n))
        return 0;
    return n;
}

int audio_buf_reserve(struct audio_buf *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    if (b->cap == 0 && b->data != NULL)
        return -ENOSPC; /* someone else's buffer */
    if (n > SIZE_MAX / sizeof(float))
        return -ENOMEM;
    float *p = realloc(b->data, n * sizeof(float));
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = n;
    return 0;
}

void audio_buf_free(struct audio_buf *b)
{
    if (b->cap)
        free(b->data);
    memset(b, 0, sizeof(*b));
}

int audio_ctx_new(struct audio_ctx **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void audio_ctx_free(struct audio_ctx *ax)
{
    if (ax == NULL)
        return;
    audio_decode_ctx_free(ax);
    audio_resample_ctx_free(ax);
    audio_spec_ctx_free(ax);
    free(ax->scratch);
    free(ax);
}

const char *audio_ctx_error(const struct audio_ctx *ax)
{
    return ax->err;
}

int audio_fail(struct audio_ctx *ax, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ax->err, sizeof(ax->err), fmt, ap);
    va_end(ap);
    return rc;
}

int audio_scratch(struct audio_ctx *ax, size_t n)
{
    if (n <= ax->scratch_cap)
        return 0;
    if (n > SIZE_MAX / sizeof(float))
        return -ENOMEM;
    float *p = realloc(ax->scratch, n * sizeof(float));
    if (p == NULL)
        return -ENOMEM;
    ax->scratch = p;
    ax->scratch_cap = n;
    return 0;
}

int audio_buf_shape(struct audio_ctx *ax, struct audio_buf *out, uint32_t channels,
                    uint32_t bins, uint64_t frames, uint32_t rate, const char *who)
{
    struct audio_buf shape = {.channels = channels, .bins = bins, .frames = frames};
    size_t n = audio_buf_count(&shape);
    if (n == 0 && channels && frames)
        return audio_fail(ax, -ENOMEM, "%s: %u x %u x %llu floats overflow", who, channels,
                          bins, (unsigned long long)frames);
    int rc = audio_buf_reserve(out, n);
    if (rc < 0)
        return audio_fail(ax, rc, "%s: no room for %zu floats", who, n);
    out->channels = channels;
    out->bins = bins;
    out->frames = frames;
    out->rate = rate;
    return 0;
}

int audio_check_wave(struct audio_ctx *ax, const struct audio_buf *in, const char *who)
{
    if (in->bins)
        return audio_fail(ax, -EINVAL, "%s: the input is a spectrogram, not a waveform", who);
    if (in->channels == 0 || in->frames == 0)
        return audio_fail(ax, -EINVAL, "%s: empty waveform (%u channels, %llu frames)", who,
                          in->channels, (unsigned long long)in->frames);
    return 0;
}

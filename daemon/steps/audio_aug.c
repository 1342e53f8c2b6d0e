/*
 * Crop and pad in time, SpecAugment's time and frequency masks, gain:
 * the deterministic halves of random_crop, time_mask, frequency_mask and
 * random_gain (the decisions are drawn by the caller from the per-sample
 * seed; audio_crop_start and audio_mask_span turn uniform draws into them
 * exactly as the documented distributions say).
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "audio.h"
#include "audio_impl.h"

int audio_crop_pad(struct audio_ctx *ax, const struct audio_buf *in, uint64_t length,
                   int64_t start, struct audio_buf *out)
{
    if (in->channels == 0 || length == 0 || length > INT64_MAX / 2 ||
        in->frames > INT64_MAX / 2)
        return audio_fail(ax, -EINVAL, "crop: %u channels, length %llu", in->channels,
                          (unsigned long long)length);
    uint32_t rows = in->channels * (in->bins ? in->bins : 1);
    int rc = audio_buf_shape(ax, out, in->channels, in->bins, length, in->rate, "crop");
    if (rc < 0)
        return rc;
    /* the part of [start, start + length) inside [0, frames) */
    int64_t frames = (int64_t)in->frames, len = (int64_t)length;
    int64_t from = start > 0 ? start : 0, to = start + len < frames ? start + len : frames;
    for (uint32_t r = 0; r < rows; r++) {
        const float *x = in->data + (size_t)r * in->frames;
        float *y = out->data + (size_t)r * length;
        if (to <= from) {
            memset(y, 0, sizeof(float) * length);
            continue;
        }
        int64_t lead = from - start, tail = len - lead - (to - from);
        memset(y, 0, sizeof(float) * (size_t)lead);
        memcpy(y + lead, x + from, sizeof(float) * (size_t)(to - from));
        memset(y + lead + (to - from), 0, sizeof(float) * (size_t)tail);
    }
    return 0;
}

int64_t audio_crop_start(uint64_t frames, uint64_t length, enum audio_pad pad, double u)
{
    if (frames >= length) {
        uint64_t span = frames - length + 1;
        uint64_t s = (uint64_t)(u * (double)span);
        return (int64_t)(s < span ? s : span - 1);
    }
    uint64_t missing = length - frames;
    switch (pad) {
    case AUDIO_PAD_CENTER:
        return -(int64_t)(missing / 2);
    case AUDIO_PAD_RANDOM: {
        uint64_t s = (uint64_t)(u * (double)(missing + 1));
        return -(int64_t)(s <= missing ? s : missing);
    }
    default:
        return 0;
    }
}

void audio_mask_span(uint32_t mask_param, double p, uint64_t size, float u_len, float u_pos,
                     uint64_t *start, uint64_t *end)
{
    /* _get_mask_param: min(mask_param, int(size * p)) unless p == 1 */
    int64_t param = mask_param;
    if (p != 1.0) {
        int64_t cap = (int64_t)((double)size * p);
        if (cap < param)
            param = cap;
    }
    *start = *end = 0;
    if (param < 1)
        return;
    /* value = rand * mask_param; min_value = rand * (size - value), float32 */
    float value = u_len * (float)param;
    float min_value = u_pos * ((float)size - value);
    int64_t s = (int64_t)min_value, e = s + (int64_t)value;
    if (s < 0)
        s = 0;
    if (e > (int64_t)size)
        e = (int64_t)size;
    if (e > s) {
        *start = (uint64_t)s;
        *end = (uint64_t)e;
    }
}

int audio_mask(struct audio_ctx *ax, struct audio_buf *b, enum audio_axis axis,
               uint64_t start, uint64_t end, float value)
{
    if (b->bins == 0)
        return audio_fail(ax, -EINVAL, "%s: the input is a waveform, not a spectrogram",
                          axis == AUDIO_AXIS_TIME ? "time_mask" : "frequency_mask");
    uint64_t size = axis == AUDIO_AXIS_TIME ? b->frames : b->bins;
    if (end > size)
        end = size;
    if (start >= end)
        return 0;
    for (uint32_t c = 0; c < b->channels; c++) {
        float *x = b->data + (size_t)c * b->bins * b->frames;
        if (axis == AUDIO_AXIS_FREQ) {
            for (uint64_t i = start * b->frames; i < end * b->frames; i++)
                x[i] = value;
        } else {
            for (uint32_t f = 0; f < b->bins; f++)
                for (uint64_t t = start; t < end; t++)
                    x[(size_t)f * b->frames + t] = value;
        }
    }
    return 0;
}

void audio_gain(struct audio_buf *b, double gain_db)
{
    /* waveform * (10 ** (gain_db / 20)): a Python float, applied in float32 */
    float ratio = (float)pow(10.0, gain_db / 20.0);
    size_t n = audio_buf_count(b);
    for (size_t i = 0; i < n; i++)
        b->data[i] *= ratio;
}

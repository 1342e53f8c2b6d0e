/*
 * Private interface between the audio modules: audio.c (buffers, the
 * per-thread context, errors), audio_decode.c, audio_resample.c,
 * audio_spec.c (spectrograms, amplitude_to_db) and audio_aug.c (crop and
 * pad, masks, gain). The public contract is audio.h.
 */
#ifndef PRESTO_AUDIO_IMPL_H
#define PRESTO_AUDIO_IMPL_H

#include <stdint.h>

#include "audio.h"

/* Resampling kernels and FFT plans a context keeps (least recently used
 * replaced first). */
#define AUDIO_CTX_KERNELS 8
#define AUDIO_CTX_PLANS 4

struct audio_kernel;   /* audio_resample.c */
struct audio_plan;     /* audio_spec.c */

struct audio_ctx {
    void *mpg;                      /* mpg123_handle, made on the first MP3 */
    float *scratch;                 /* interleaved samples while decoding */
    size_t scratch_cap;             /* floats */
    struct audio_kernel *kernels[AUDIO_CTX_KERNELS];
    struct audio_plan *plans[AUDIO_CTX_PLANS];
    uint64_t tick;                  /* use counter for the LRU choices */
    char err[256];
};

/* Writes a message into ax->err; returns rc. */
int audio_fail(struct audio_ctx *ax, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Makes ax->scratch hold n floats; -ENOMEM. */
int audio_scratch(struct audio_ctx *ax, size_t n);

/* Sets out's shape and makes room for it (-ENOMEM / -ENOSPC with a
 * message naming who). */
int audio_buf_shape(struct audio_ctx *ax, struct audio_buf *out, uint32_t channels,
                    uint32_t bins, uint64_t frames, uint32_t rate, const char *who);

/* Checks in holds a waveform (bins 0) with channels and frames (-EINVAL
 * naming who otherwise). */
int audio_check_wave(struct audio_ctx *ax, const struct audio_buf *in, const char *who);

/* Releases what each module keeps in the context. */
void audio_decode_ctx_free(struct audio_ctx *ax);
void audio_resample_ctx_free(struct audio_ctx *ax);
void audio_spec_ctx_free(struct audio_ctx *ax);

#endif

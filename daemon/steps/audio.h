/*
 * Audio: pure functions of one clip, the step family of speech and audio
 * data sets. Each matches torchaudio 0.13 (Debian's python3-torchaudio),
 * checked by tests/python/test_audio_fidelity.py:
 *
 *   audio_decode      torchaudio.load(f) (float32, channels first; mono:
 *                     .mean(0, keepdim=True)). .wav .flac .ogg through
 *                     libsndfile, .mp3 through libmpg123 (audio_decode.c
 *                     says what torchaudio itself uses for each).
 *   audio_resample    torchaudio.functional.resample, "sinc_interpolation"
 *                     (a Hann-windowed sinc), lowpass_filter_width, rolloff
 *   audio_crop_pad    slicing and zero padding in time (random_crop draws
 *                     the offset)
 *   audio_spec        torchaudio.transforms.Spectrogram / MelSpectrogram
 *                     (n_fft, win_length, hop_length, periodic Hann window,
 *                     center, pad_mode, power, normalized; f_min, f_max,
 *                     n_mels, norm, mel_scale), FFT through FFTW3
 *   audio_db          torchaudio.transforms.AmplitudeToDB (stype, top_db)
 *   audio_mask        TimeMasking / FrequencyMasking given the two uniform
 *                     draws torch.rand makes (audio_mask_span)
 *   audio_gain        torchaudio.functional.gain given the gain in dB
 *
 * A clip is float32, channels first: a waveform is channels x frames
 * (bins 0), a spectrogram channels x bins x frames. Every function returns
 * 0 or -errno, with a message in the context's error buffer: -EBADMSG for
 * a corrupt or truncated file, or one that is not what its extension says;
 * -E2BIG for a clip over the limits (struct audio_limits); -EINVAL for an
 * input the function cannot take (a spectrogram to resample, a signal
 * shorter than reflect padding allows); -ENOMEM.
 *
 * Threads: a struct audio_ctx belongs to one thread (it keeps that thread's
 * MP3 decoder, FFT plans and resampling kernels, made once per shape and
 * reused); a struct audio_spec is immutable once made and shared by all.
 */
#ifndef PRESTO_AUDIO_H
#define PRESTO_AUDIO_H

#include <stddef.h>
#include <stdint.h>

/* ---- clips ---- */

struct audio_buf {
    float *data;
    size_t cap;        /* floats allocated (0: data is not owned, or none) */
    uint32_t channels;
    uint32_t bins;     /* 0: a waveform; else spectrogram bins (rows) */
    uint64_t frames;   /* samples per channel, or spectrogram frames */
    uint32_t rate;     /* samples per second of the waveform (or of the one
                        * a spectrogram was made from) */
};

/* Floats in the clip: channels x max(bins, 1) x frames (0 on overflow). */
size_t audio_buf_count(const struct audio_buf *b);
/* Makes b's buffer hold at least n floats (an owned buffer is grown).
 * -ENOMEM; -ENOSPC when b holds a buffer it does not own, too small. */
int audio_buf_reserve(struct audio_buf *b, size_t n);
void audio_buf_free(struct audio_buf *b);

/* ---- per-thread context ---- */

struct audio_ctx;

int audio_ctx_new(struct audio_ctx **out);
void audio_ctx_free(struct audio_ctx *ax);
/* The message of the last failure on this context. */
const char *audio_ctx_error(const struct audio_ctx *ax);

/* ---- decode ---- */

enum audio_format { AUDIO_FMT_NONE = 0, AUDIO_FMT_WAV, AUDIO_FMT_FLAC, AUDIO_FMT_OGG,
                    AUDIO_FMT_MP3 };

/* The format a file name's extension names (.wav .flac .ogg .mp3, any
 * case), or AUDIO_FMT_NONE. */
enum audio_format audio_format_from_name(const char *name);
const char *audio_format_name(enum audio_format f);
/* The format a file's first bytes say it is (RIFF/WAVE, fLaC, OggS, an
 * ID3v2 tag or an MP3 frame sync), or AUDIO_FMT_NONE. */
enum audio_format audio_format_sniff(const void *bytes, size_t len);

/* Highest sample rate any file may claim: a larger one is a corrupt header,
 * refused with -EBADMSG whatever the limits. */
#define AUDIO_RATE_MAX 768000u

struct audio_limits {
    double max_seconds;     /* longer clips: -E2BIG (0: no limit) */
    uint32_t max_channels;  /* more channels: -E2BIG (0: no limit) */
};

/* Decodes a whole file held in memory (bytes, len) of format fmt to float32
 * channels x frames at the file's own rate; mono mixes the channels down to
 * one (their mean, as torchaudio.load(f).mean(0, keepdim=True)). Integer
 * PCM is scaled as torchaudio scales it (x / 2^(bits-1); 8-bit: (x - 128)
 * / 128). The limits are checked against the header before decoding, and
 * against what was decoded. */
int audio_decode(struct audio_ctx *ax, const void *bytes, size_t len, enum audio_format fmt,
                 int mono, const struct audio_limits *lim, struct audio_buf *out);

/* ---- resample ---- */

struct audio_resample_params {
    uint32_t rate;                  /* the output's sample rate */
    uint32_t lowpass_filter_width;  /* zero crossings each side (6) */
    double rolloff;                 /* cut-off as a fraction of Nyquist (0.99) */
    int f32_kernel;                 /* 0: the kernel computed in double, rounded
                                     * to float32 (transforms.Resample); 1: in
                                     * float32 (functional.resample on float32) */
};
#define AUDIO_RESAMPLE_WIDTH_MAX 64u

/* Resamples a waveform from in->rate to p->rate (a copy when they are
 * equal): ceil(frames * new / orig) frames, each the windowed-sinc kernel
 * torchaudio computes applied to the input padded with zeros. The kernel
 * for each rate pair is made once per context. -EINVAL for a spectrogram,
 * a rate pair whose kernel would need over AUDIO_RESAMPLE_KERNEL_MAX
 * floats. */
int audio_resample(struct audio_ctx *ax, const struct audio_resample_params *p,
                   const struct audio_buf *in, struct audio_buf *out);
#define AUDIO_RESAMPLE_KERNEL_MAX (4u << 20)

/* ---- crop and pad in time ---- */

/* out[c][t] = in[c][t + start] where that is inside in, else 0, for t in
 * [0, length): start >= 0 crops, start < 0 pads -start zeros before. Works
 * on waveforms and spectrograms (frames are the last axis). */
int audio_crop_pad(struct audio_ctx *ax, const struct audio_buf *in, uint64_t length,
                   int64_t start, struct audio_buf *out);

enum audio_pad { AUDIO_PAD_END = 0, AUDIO_PAD_CENTER, AUDIO_PAD_RANDOM };
/* The start random_crop uses for a clip of frames to length: uniform in
 * [0, frames - length] from u in [0, 1) when longer; when shorter, 0 (pad
 * at the end), -(length - frames) / 2 (centre) or uniform in
 * [-(length - frames), 0] from u (random). */
int64_t audio_crop_start(uint64_t frames, uint64_t length, enum audio_pad pad, double u);

/* ---- spectrograms ---- */

enum audio_pad_mode { AUDIO_PADMODE_REFLECT = 0, AUDIO_PADMODE_CONSTANT,
                      AUDIO_PADMODE_REPLICATE, AUDIO_PADMODE_CIRCULAR };
enum audio_norm { AUDIO_NORM_NONE = 0, AUDIO_NORM_WINDOW, AUDIO_NORM_FRAME_LENGTH };
enum audio_mel_scale { AUDIO_MEL_HTK = 0, AUDIO_MEL_SLANEY };

struct audio_spec_params {
    uint32_t n_fft;          /* 400 */
    uint32_t win_length;     /* 0: n_fft */
    uint32_t hop_length;     /* 0: win_length / 2 */
    double power;            /* > 0: |X|^power (2: power, 1: magnitude) */
    int center;              /* pad n_fft / 2 each side first (1) */
    enum audio_pad_mode pad_mode;
    enum audio_norm normalized;
    /* n_mels 0: the linear spectrogram (Spectrogram), n_fft / 2 + 1 bins;
     * else MelSpectrogram's n_mels triangular filters from f_min to f_max
     * (f_max < 0: sample_rate / 2, integer division, as torchaudio), at
     * sample_rate (the input must have it). */
    uint32_t n_mels;
    uint32_t sample_rate;
    double f_min, f_max;
    int slaney_norm;         /* norm="slaney" (area normalisation) */
    enum audio_mel_scale mel_scale;
};
#define AUDIO_NFFT_MAX 65536u
#define AUDIO_MELS_MAX 4096u

struct audio_spec;

/* Checks p and precomputes the window and the filter bank (immutable,
 * shared by every thread). -EINVAL with a message in err. */
int audio_spec_new(const struct audio_spec_params *p, struct audio_spec **out, char *err,
                   size_t errlen);
void audio_spec_free(struct audio_spec *s);
/* Bins per frame: n_mels, or n_fft / 2 + 1. */
uint32_t audio_spec_bins(const struct audio_spec *s);
/* Frames for a waveform of `frames` samples (0: too short to frame). */
uint64_t audio_spec_frames(const struct audio_spec *s, uint64_t frames);
/* Waveform in, spectrogram out (channels x bins x frames). */
int audio_spec_apply(const struct audio_spec *s, struct audio_ctx *ax,
                     const struct audio_buf *in, struct audio_buf *out);

/* ---- amplitude_to_db ---- */

struct audio_db_params {
    double multiplier;   /* 10 (stype power) or 20 (magnitude) */
    double amin;         /* 1e-10 */
    double ref;          /* 1.0 */
    double top_db;       /* < 0: none */
};
/* In place: multiplier * log10(max(x, amin)) - multiplier * log10(max(amin,
 * ref)), then clamped from below at (the clip's maximum - top_db). */
int audio_db(struct audio_ctx *ax, const struct audio_db_params *p, struct audio_buf *b);

/* ---- SpecAugment and gain ---- */

enum audio_axis { AUDIO_AXIS_FREQ = 0, AUDIO_AXIS_TIME };
/* The masked span [start, end) of an axis of `size` entries, as torchaudio
 * 0.13's mask_along_axis draws it from two torch.rand values u_len and
 * u_pos in [0, 1) (float32 arithmetic): mask_param = min(mask_param,
 * int(size * p)) unless p == 1, length = u_len * mask_param, start = u_pos *
 * (size - length), both truncated toward zero (a mask_param over size can
 * make start negative: the span is then clipped to [0, size), as torch's
 * comparison mask clips it). end <= start when nothing is masked. */
void audio_mask_span(uint32_t mask_param, double p, uint64_t size, float u_len, float u_pos,
                     uint64_t *start, uint64_t *end);
/* Sets [start, end) of the axis to value in every channel (a spectrogram:
 * bins for FREQ, frames for TIME). */
int audio_mask(struct audio_ctx *ax, struct audio_buf *b, enum audio_axis axis,
               uint64_t start, uint64_t end, float value);

/* In place: x * 10^(gain_db / 20), as torchaudio.functional.gain. */
void audio_gain(struct audio_buf *b, double gain_db);

#endif

/* Unit tests for the audio functions (daemon/steps/audio.h) on signals made
 * here: WAV bytes written by hand, FLAC and Ogg Vorbis written by
 * libsndfile into memory, sines whose frequency the resampler and the
 * spectrogram must keep. What they must equal in torchaudio is the Python
 * fidelity suite's job (tests/python/test_audio_fidelity.py); these cases
 * check the contracts (shapes, limits, error codes, caches, threads) and
 * run under the sanitizers. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- signals and files ---- */

struct bytes {
    uint8_t *p;
    size_t len, cap;
    size_t pos; /* libsndfile's position while it writes */
};

static void put(struct bytes *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put32(struct bytes *b, uint32_t v)
{
    uint8_t x[4] = {v, v >> 8, v >> 16, v >> 24};
    put(b, x, 4);
}

static void put16(struct bytes *b, uint16_t v)
{
    uint8_t x[2] = {v, v >> 8};
    put(b, x, 2);
}

/* A sine of freq Hz, amplitude amp, in channel c phase-shifted by c. */
static double sine(double freq, uint32_t rate, uint64_t t, uint32_t c, double amp)
{
    return amp * sin(2 * M_PI * freq * (double)t / rate + c);
}

static int16_t pcm16(uint32_t rate, uint64_t t, uint32_t c)
{
    return (int16_t)lrint(32767 * sine(440, rate, t, c, 0.5));
}

/* A 16-bit PCM WAV of frames x channels at rate. */
static struct bytes make_wav(uint32_t rate, uint32_t channels, uint32_t frames)
{
    struct bytes b = {0};
    uint32_t data = frames * channels * 2;
    put(&b, "RIFF", 4);
    put32(&b, 36 + data);
    put(&b, "WAVEfmt ", 8);
    put32(&b, 16);
    put16(&b, 1);
    put16(&b, (uint16_t)channels);
    put32(&b, rate);
    put32(&b, rate * channels * 2);
    put16(&b, (uint16_t)(channels * 2));
    put16(&b, 16);
    put(&b, "data", 4);
    put32(&b, data);
    for (uint32_t t = 0; t < frames; t++)
        for (uint32_t c = 0; c < channels; c++)
            put16(&b, (uint16_t)pcm16(rate, t, c));
    return b;
}

/* libsndfile writing into a struct bytes */
static sf_count_t vlen(void *u)
{
    return (sf_count_t)((struct bytes *)u)->len;
}
static sf_count_t vseek(sf_count_t off, int whence, void *u)
{
    struct bytes *b = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_END ? (sf_count_t)b->len
                                                                  : (sf_count_t)b->pos;
    if (base + off < 0)
        return -1;
    b->pos = (size_t)(base + off);
    return (sf_count_t)b->pos;
}
static sf_count_t vread(void *dst, sf_count_t n, void *u)
{
    struct bytes *b = u;
    sf_count_t have = (sf_count_t)b->len - (sf_count_t)b->pos;
    if (n > have)
        n = have > 0 ? have : 0;
    memcpy(dst, b->p + b->pos, (size_t)n);
    b->pos += (size_t)n;
    return n;
}
static sf_count_t vwrite(const void *src, sf_count_t n, void *u)
{
    struct bytes *b = u;
    size_t end = b->pos + (size_t)n;
    if (end > b->len) {
        size_t at = b->len;
        b->len = b->pos; /* put() appends at len */
        if (at < b->pos) {
            b->len = at;
            static const uint8_t zero[256];
            while (b->len < b->pos)
                put(b, zero, b->pos - b->len < sizeof(zero) ? b->pos - b->len : sizeof(zero));
        }
        put(b, src, (size_t)n);
    } else {
        memcpy(b->p + b->pos, src, (size_t)n);
    }
    b->pos = end;
    return n;
}
static sf_count_t vtell(void *u)
{
    return (sf_count_t)((struct bytes *)u)->pos;
}

/* The same sine as make_wav, encoded by libsndfile as format. */
static struct bytes make_sndfile(int format, uint32_t rate, uint32_t channels, uint32_t frames)
{
    struct bytes b = {0};
    SF_VIRTUAL_IO vio = {vlen, vseek, vread, vwrite, vtell};
    SF_INFO info = {.samplerate = (int)rate, .channels = (int)channels, .format = format};
    SNDFILE *sf = sf_open_virtual(&vio, SFM_WRITE, &info, &b);
    ck_assert_msg(sf != NULL, "libsndfile: %s", sf_strerror(NULL));
    int16_t *pcm = malloc(sizeof(int16_t) * frames * channels);
    for (uint32_t t = 0; t < frames; t++)
        for (uint32_t c = 0; c < channels; c++)
            pcm[t * channels + c] = pcm16(rate, t, c);
    ck_assert_int_eq(sf_writef_short(sf, pcm, frames), frames);
    sf_close(sf);
    free(pcm);
    return b;
}

static struct audio_ctx *ctx(void)
{
    struct audio_ctx *ax;
    ck_assert_int_eq(audio_ctx_new(&ax), 0);
    return ax;
}

/* ---- decode ---- */

START_TEST(test_decode_wav_scales_and_deinterleaves)
{
    struct audio_ctx *ax = ctx();
    struct bytes wav = make_wav(22050, 2, 3000);
    struct audio_buf out = {0}, mono = {0};
    ck_assert_int_eq(audio_decode(ax, wav.p, wav.len, AUDIO_FMT_WAV, 0, NULL, &out), 0);
    ck_assert_uint_eq(out.channels, 2);
    ck_assert_uint_eq(out.frames, 3000);
    ck_assert_uint_eq(out.rate, 22050);
    ck_assert_uint_eq(out.bins, 0);
    for (uint32_t c = 0; c < 2; c++)
        for (uint32_t t = 0; t < 3000; t++)
            ck_assert_float_eq(out.data[c * 3000 + t], pcm16(22050, t, c) / 32768.0f);
    ck_assert_int_eq(audio_decode(ax, wav.p, wav.len, AUDIO_FMT_WAV, 1, NULL, &mono), 0);
    ck_assert_uint_eq(mono.channels, 1);
    for (uint32_t t = 0; t < 3000; t++)
        ck_assert_float_eq(mono.data[t], (out.data[t] + out.data[3000 + t]) / 2.0f);
    audio_buf_free(&out);
    audio_buf_free(&mono);
    free(wav.p);
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_decode_flac_exact_ogg_close)
{
    struct audio_ctx *ax = ctx();
    struct bytes flac = make_sndfile(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, 8000);
    struct bytes ogg = make_sndfile(SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, 8000);
    struct audio_buf out = {0};
    ck_assert_int_eq(audio_decode(ax, flac.p, flac.len, AUDIO_FMT_FLAC, 0, NULL, &out), 0);
    ck_assert_uint_eq(out.frames, 8000);
    for (uint32_t t = 0; t < 8000; t++)
        ck_assert_float_eq(out.data[t], pcm16(16000, t, 0) / 32768.0f);
    ck_assert_int_eq(audio_decode(ax, ogg.p, ogg.len, AUDIO_FMT_OGG, 0, NULL, &out), 0);
    ck_assert_uint_eq(out.frames, 8000);
    double err = 0, sig = 0;
    for (uint32_t t = 0; t < 8000; t++) {
        double d = out.data[t] - pcm16(16000, t, 0) / 32768.0;
        err += d * d;
        sig += out.data[t] * (double)out.data[t];
    }
    ck_assert_msg(10 * log10(sig / err) > 20, "Vorbis SNR %.1f dB", 10 * log10(sig / err));
    audio_buf_free(&out);
    free(flac.p);
    free(ogg.p);
    audio_ctx_free(ax);
}
END_TEST

static void expect_refused(struct audio_ctx *ax, const void *p, size_t len,
                           enum audio_format fmt, const struct audio_limits *lim, int rc,
                           const char *words)
{
    struct audio_buf out = {0};
    int got = audio_decode(ax, p, len, fmt, 0, lim, &out);
    ck_assert_msg(got == rc, "rc %d, want %d (%s)", got, rc, audio_ctx_error(ax));
    ck_assert_msg(strstr(audio_ctx_error(ax), words), "'%s' lacks '%s'", audio_ctx_error(ax),
                  words);
    audio_buf_free(&out);
}

START_TEST(test_decode_refuses_bad_input_and_enforces_limits)
{
    struct audio_ctx *ax = ctx();
    struct bytes wav = make_wav(48000, 3, 48000);
    struct bytes flac = make_sndfile(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, 16000);
    struct audio_limits two_ch = {.max_channels = 2}, half_s = {.max_seconds = 0.5};
    struct audio_limits ok = {.max_seconds = 1.0, .max_channels = 3};
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_WAV, &two_ch, -E2BIG, "3 channels");
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_WAV, &half_s, -E2BIG, "limit of 0.5 s");
    expect_refused(ax, flac.p, flac.len, AUDIO_FMT_FLAC, &half_s, -E2BIG, "limit");
    struct audio_buf out = {0};
    ck_assert_int_eq(audio_decode(ax, wav.p, wav.len, AUDIO_FMT_WAV, 0, &ok, &out), 0);
    audio_buf_free(&out);
    expect_refused(ax, wav.p, wav.len - 1000, AUDIO_FMT_WAV, NULL, -EBADMSG, "truncated");
    expect_refused(ax, wav.p, 30, AUDIO_FMT_WAV, NULL, -EBADMSG, "WAV");
    expect_refused(ax, flac.p, flac.len / 3, AUDIO_FMT_FLAC, NULL, -EBADMSG, "truncated");
    expect_refused(ax, flac.p, flac.len, AUDIO_FMT_WAV, NULL, -EBADMSG, "wrong extension");
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_OGG, NULL, -EBADMSG, "wrong extension");
    expect_refused(ax, wav.p, 0, AUDIO_FMT_MP3, NULL, -EBADMSG, "empty");
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_NONE, NULL, -EINVAL, "audio file name");
    static const uint8_t junk[64] = {0xff, 0xfb, 0x90, 0x00};
    expect_refused(ax, junk, sizeof(junk), AUDIO_FMT_MP3, NULL, -EBADMSG, "MP3");
    /* a streaming writer's placeholder length is read to the end */
    memcpy(wav.p + 40, "\xff\xff\xff\x7f", 4);
    ck_assert_int_eq(audio_decode(ax, wav.p, wav.len, AUDIO_FMT_WAV, 0, NULL, &out), 0);
    ck_assert_uint_eq(out.frames, 48000);
    /* absurd claims in the format chunk */
    memcpy(wav.p + 24, "\0\0\0\0", 4);
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_WAV, NULL, -EBADMSG, "0 Hz");
    memcpy(wav.p + 24, "\x00\x09\x3d\x00", 4); /* 4 000 000 Hz */
    expect_refused(ax, wav.p, wav.len, AUDIO_FMT_WAV, NULL, -EBADMSG, "4000000 Hz");
    audio_buf_free(&out);
    free(wav.p);
    free(flac.p);
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_format_from_name)
{
    ck_assert_int_eq(audio_format_from_name("a/b.WAV"), AUDIO_FMT_WAV);
    ck_assert_int_eq(audio_format_from_name("x.flac"), AUDIO_FMT_FLAC);
    ck_assert_int_eq(audio_format_from_name("x.Ogg"), AUDIO_FMT_OGG);
    ck_assert_int_eq(audio_format_from_name("x.mp3"), AUDIO_FMT_MP3);
    ck_assert_int_eq(audio_format_from_name("x.mp3/y"), AUDIO_FMT_NONE);
    ck_assert_int_eq(audio_format_from_name("wav"), AUDIO_FMT_NONE);
    ck_assert_int_eq(audio_format_from_name("x.jpg"), AUDIO_FMT_NONE);
}
END_TEST

/* ---- resample ---- */

static struct audio_buf sine_buf(double freq, uint32_t rate, uint64_t frames, uint32_t channels)
{
    struct audio_buf b = {.channels = channels, .frames = frames, .rate = rate};
    ck_assert_int_eq(audio_buf_reserve(&b, channels * frames), 0);
    for (uint32_t c = 0; c < channels; c++)
        for (uint64_t t = 0; t < frames; t++)
            b.data[c * frames + t] = (float)sine(freq, rate, t, c, 0.5);
    return b;
}

START_TEST(test_resample_keeps_a_sine)
{
    struct audio_ctx *ax = ctx();
    static const uint32_t pairs[][2] = {{44100, 16000}, {16000, 48000}, {22050, 8000},
                                        {48000, 44100}, {8000, 11025}};
    for (size_t i = 0; i < NELEM(pairs); i++) {
        uint32_t from = pairs[i][0], to = pairs[i][1];
        struct audio_buf in = sine_buf(1000, from, from / 2, 2), out = {0};
        struct audio_resample_params p = {to, 6, 0.99, (int)(i & 1)};
        ck_assert_int_eq(audio_resample(ax, &p, &in, &out), 0);
        uint64_t want = (uint64_t)ceil((double)to * in.frames / from);
        ck_assert_uint_eq(out.frames, want);
        ck_assert_uint_eq(out.rate, to);
        ck_assert_uint_eq(out.channels, 2);
        /* away from the edges the output is the same sine at the new rate */
        double worst = 0;
        for (uint32_t c = 0; c < 2; c++)
            for (uint64_t t = out.frames / 4; t < out.frames * 3 / 4; t++) {
                double d = fabs(out.data[c * out.frames + t] - sine(1000, to, t, c, 0.5));
                worst = d > worst ? d : worst;
            }
        ck_assert_msg(worst < 2e-3, "%u -> %u: max error %g", from, to, worst);
        audio_buf_free(&in);
        audio_buf_free(&out);
    }
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_resample_kernel_cache)
{
    /* more rate pairs than a context keeps kernels: every result equals
     * a fresh context's */
    struct audio_ctx *ax = ctx();
    struct audio_buf in = sine_buf(300, 16000, 4000, 1);
    for (int round = 0; round < 2; round++)
        for (uint32_t to = 8000; to < 8000 + 12 * 1000; to += 1000) {
            struct audio_ctx *fresh = ctx();
            struct audio_buf a = {0}, b = {0};
            struct audio_resample_params p = {to, 6, 0.99, 0};
            in.rate = 16000;
            ck_assert_int_eq(audio_resample(ax, &p, &in, &a), 0);
            ck_assert_int_eq(audio_resample(fresh, &p, &in, &b), 0);
            ck_assert_uint_eq(a.frames, b.frames);
            ck_assert_int_eq(memcmp(a.data, b.data, a.frames * sizeof(float)), 0);
            audio_buf_free(&a);
            audio_buf_free(&b);
            audio_ctx_free(fresh);
        }
    audio_buf_free(&in);
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_resample_refuses)
{
    struct audio_ctx *ax = ctx();
    struct audio_buf in = sine_buf(300, 16000, 4000, 1), out = {0};
    struct audio_resample_params p = {8000, 6, 0.99, 0};
    in.bins = 1; /* a spectrogram */
    ck_assert_int_eq(audio_resample(ax, &p, &in, &out), -EINVAL);
    in.bins = 0;
    p.lowpass_filter_width = 0;
    ck_assert_int_eq(audio_resample(ax, &p, &in, &out), -EINVAL);
    p.lowpass_filter_width = 6;
    p.rolloff = 1.5;
    ck_assert_int_eq(audio_resample(ax, &p, &in, &out), -EINVAL);
    /* coprime rates and a wide filter: a kernel of 10^8 taps */
    p.rolloff = 0.99;
    p.lowpass_filter_width = 64;
    p.rate = 383999;
    in.rate = 767999;
    ck_assert_int_eq(audio_resample(ax, &p, &in, &out), -EINVAL);
    ck_assert_ptr_nonnull(strstr(audio_ctx_error(ax), "divisor"));
    /* a buffer the function does not own is never grown */
    float small[4];
    struct audio_buf borrowed = {.data = small};
    p.lowpass_filter_width = 6;
    p.rate = 8000;
    in.rate = 16000;
    ck_assert_int_eq(audio_resample(ax, &p, &in, &borrowed), -ENOSPC);
    audio_buf_free(&in);
    audio_ctx_free(ax);
}
END_TEST

/* ---- spectrograms ---- */

static struct audio_spec *spec_new(uint32_t n_mels)
{
    struct audio_spec_params p = {.n_fft = 400, .power = 2.0, .center = 1, .n_mels = n_mels,
                                  .sample_rate = 16000, .f_max = -1};
    struct audio_spec *s;
    char err[128];
    ck_assert_msg(audio_spec_new(&p, &s, err, sizeof(err)) == 0, "%s", err);
    return s;
}

START_TEST(test_spectrogram_peak_and_shape)
{
    struct audio_ctx *ax = ctx();
    struct audio_spec *lin = spec_new(0), *mel = spec_new(64);
    struct audio_buf in = sine_buf(1000, 16000, 16000, 1), out = {0};
    ck_assert_int_eq(audio_spec_apply(lin, ax, &in, &out), 0);
    ck_assert_uint_eq(out.bins, 201);
    ck_assert_uint_eq(out.frames, 1 + 16000 / 200);
    ck_assert_uint_eq(audio_spec_frames(lin, 16000), out.frames);
    /* 1 kHz at 40 Hz per bin: bin 25 holds the peak of every frame away
     * from the (reflected) edges */
    for (uint64_t t = 1; t + 1 < out.frames; t++) {
        uint32_t best = 0;
        for (uint32_t f = 1; f < out.bins; f++)
            if (out.data[f * out.frames + t] > out.data[best * out.frames + t])
                best = f;
        ck_assert_msg(best == 25, "frame %llu: peak in bin %u", (unsigned long long)t, best);
    }
    ck_assert_int_eq(audio_spec_apply(mel, ax, &in, &out), 0);
    ck_assert_uint_eq(out.bins, 64);
    ck_assert_uint_eq(audio_spec_bins(mel), 64);
    /* too short for reflect padding; the wrong rate */
    in.frames = 200;
    ck_assert_int_eq(audio_spec_apply(mel, ax, &in, &out), -EINVAL);
    in.frames = 16000;
    in.rate = 22050;
    ck_assert_int_eq(audio_spec_apply(mel, ax, &in, &out), -EINVAL);
    audio_buf_free(&in);
    audio_buf_free(&out);
    audio_spec_free(lin);
    audio_spec_free(mel);
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_spectrogram_params_checked)
{
    struct audio_spec_params bad[] = {
        {.n_fft = 1, .power = 2},
        {.n_fft = 400, .win_length = 401, .power = 2},
        {.n_fft = 400, .power = 0},
        {.n_fft = 400, .power = 2, .n_mels = 64, .sample_rate = 16000, .f_min = 8000,
         .f_max = -1},
        {.n_fft = 400, .power = 2, .n_mels = 64, .sample_rate = 16000, .f_max = 9000},
        {.n_fft = 400, .power = 2, .n_mels = 5000, .sample_rate = 16000, .f_max = -1},
    };
    for (size_t i = 0; i < NELEM(bad); i++) {
        struct audio_spec *s = NULL;
        char err[128] = "";
        ck_assert_int_eq(audio_spec_new(&bad[i], &s, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_null(s);
        ck_assert_msg(err[0], "case %zu: no message", i);
    }
}
END_TEST

struct worker {
    const struct audio_spec *spec;
    const struct audio_buf *in;
    struct audio_buf out;
    int rc;
};

static void *spec_worker(void *arg)
{
    struct worker *w = arg;
    struct audio_ctx *ax;
    w->rc = audio_ctx_new(&ax);
    for (int i = 0; i < 20 && w->rc == 0; i++)
        w->rc = audio_spec_apply(w->spec, ax, w->in, &w->out);
    audio_ctx_free(ax);
    return NULL;
}

START_TEST(test_spectrogram_threads_share_a_spec)
{
    /* one spec, a context per thread, plans made at the same time: the
     * same bytes as one thread alone */
    struct audio_spec *mel = spec_new(64);
    struct audio_buf in = sine_buf(440, 16000, 8000, 2);
    struct worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.spec = mel, .in = &in};
        ck_assert_int_eq(pthread_create(&th[i], NULL, spec_worker, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    size_t n = audio_buf_count(&w[0].out);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(w[i].rc, 0);
        ck_assert_int_eq(memcmp(w[i].out.data, w[0].out.data, n * sizeof(float)), 0);
    }
    for (int i = 0; i < 4; i++)
        audio_buf_free(&w[i].out);
    audio_buf_free(&in);
    audio_spec_free(mel);
}
END_TEST

START_TEST(test_db_floor)
{
    struct audio_ctx *ax = ctx();
    float v[] = {1.0f, 0.1f, 1e-12f, 100.0f, 0.0f, 1e-9f};
    struct audio_buf b = {.data = v, .channels = 1, .bins = 2, .frames = 3};
    struct audio_db_params p = {10, 1e-10, 1.0, 50};
    ck_assert_int_eq(audio_db(ax, &p, &b), 0);
    ck_assert_float_eq(v[0], 0.0f);
    ck_assert_float_eq_tol(v[1], -10.0f, 1e-5);
    ck_assert_float_eq(v[3], 20.0f);
    ck_assert_float_eq(v[2], -30.0f); /* floored at 20 - 50 */
    ck_assert_float_eq(v[4], -30.0f);
    ck_assert_float_eq(v[5], -30.0f);
    audio_ctx_free(ax);
}
END_TEST

/* ---- crop, pad, masks, gain ---- */

START_TEST(test_crop_pad_and_start)
{
    struct audio_ctx *ax = ctx();
    struct audio_buf in = sine_buf(100, 8000, 100, 2), out = {0};
    ck_assert_int_eq(audio_crop_pad(ax, &in, 150, -20, &out), 0);
    ck_assert_uint_eq(out.frames, 150);
    for (uint32_t c = 0; c < 2; c++)
        for (int t = 0; t < 150; t++) {
            float want = t >= 20 && t < 120 ? in.data[c * 100 + t - 20] : 0.0f;
            ck_assert_float_eq(out.data[c * 150 + t], want);
        }
    ck_assert_int_eq(audio_crop_pad(ax, &in, 10, 500, &out), 0); /* all outside */
    for (int t = 0; t < 20; t++)
        ck_assert_float_eq(out.data[t], 0.0f);
    ck_assert_int_eq(audio_crop_pad(ax, &in, 0, 0, &out), -EINVAL);
    ck_assert_int_eq(audio_crop_start(100, 100, AUDIO_PAD_RANDOM, 0.99), 0);
    ck_assert_int_eq(audio_crop_start(100, 40, AUDIO_PAD_END, 0.0), 0);
    ck_assert_int_eq(audio_crop_start(100, 40, AUDIO_PAD_END, 0.999999), 60);
    ck_assert_int_eq(audio_crop_start(40, 100, AUDIO_PAD_END, 0.7), 0);
    ck_assert_int_eq(audio_crop_start(40, 100, AUDIO_PAD_CENTER, 0.7), -30);
    ck_assert_int_eq(audio_crop_start(40, 100, AUDIO_PAD_RANDOM, 0.999999), -60);
    audio_buf_free(&in);
    audio_buf_free(&out);
    audio_ctx_free(ax);
}
END_TEST

START_TEST(test_mask_span_and_mask)
{
    uint64_t s, e;
    audio_mask_span(10, 1.0, 100, 0.5f, 0.5f, &s, &e);
    ck_assert_uint_eq(s, 47); /* 0.5 * (100 - 5) = 47.5 */
    ck_assert_uint_eq(e, 52);
    audio_mask_span(10, 0.05, 100, 0.99f, 0.0f, &s, &e); /* capped at int(100 * 0.05) */
    ck_assert_uint_eq(e - s, 4);
    audio_mask_span(10, 0.001, 100, 0.99f, 0.3f, &s, &e); /* cap 0: nothing */
    ck_assert_uint_ge(s, e);
    audio_mask_span(80, 1.0, 64, 0.99f, 0.5f, &s, &e); /* longer than the axis */
    ck_assert_uint_eq(s, 0);
    ck_assert_uint_le(e, 64);
    struct audio_ctx *ax = ctx();
    float v[2 * 3 * 4];
    for (size_t i = 0; i < NELEM(v); i++)
        v[i] = 1.0f;
    struct audio_buf b = {.data = v, .channels = 2, .bins = 3, .frames = 4};
    ck_assert_int_eq(audio_mask(ax, &b, AUDIO_AXIS_TIME, 1, 3, -1.0f), 0);
    ck_assert_int_eq(audio_mask(ax, &b, AUDIO_AXIS_FREQ, 2, 9, 0.0f), 0);
    for (uint32_t c = 0; c < 2; c++)
        for (uint32_t f = 0; f < 3; f++)
            for (uint32_t t = 0; t < 4; t++) {
                float want = f == 2 ? 0.0f : t >= 1 && t < 3 ? -1.0f : 1.0f;
                ck_assert_float_eq(v[(c * 3 + f) * 4 + t], want);
            }
    b.bins = 0;
    ck_assert_int_eq(audio_mask(ax, &b, AUDIO_AXIS_TIME, 1, 3, 0.0f), -EINVAL);
    b.channels = 1;
    b.frames = 4;
    audio_gain(&b, 20 * log10(2.0));
    ck_assert_float_eq(v[0], 2.0f);
    audio_ctx_free(ax);
}
END_TEST

static Suite *audio_suite(void)
{
    Suite *s = suite_create("audio");
    TCase *tc = tcase_create("audio");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_decode_wav_scales_and_deinterleaves);
    tcase_add_test(tc, test_decode_flac_exact_ogg_close);
    tcase_add_test(tc, test_decode_refuses_bad_input_and_enforces_limits);
    tcase_add_test(tc, test_format_from_name);
    tcase_add_test(tc, test_resample_keeps_a_sine);
    tcase_add_test(tc, test_resample_kernel_cache);
    tcase_add_test(tc, test_resample_refuses);
    tcase_add_test(tc, test_spectrogram_peak_and_shape);
    tcase_add_test(tc, test_spectrogram_params_checked);
    tcase_add_test(tc, test_spectrogram_threads_share_a_spec);
    tcase_add_test(tc, test_db_floor);
    tcase_add_test(tc, test_crop_pad_and_start);
    tcase_add_test(tc, test_mask_span_and_mask);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(audio_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/*
 * decode: a whole audio file in memory -> float32, channels first.
 *
 * .wav .flac .ogg go through libsndfile (virtual I/O over the bytes),
 * .mp3 through libmpg123 (a reader over the bytes). Integer PCM is scaled
 * by 2^-(bits-1) (8-bit unsigned: (x - 128) / 128), float PCM is kept as
 * it is, compressed formats come out of their decoders as float.
 *
 * What torchaudio 0.13 does on Debian 12 (the reference of the fidelity
 * suite): torchaudio.load's backend is sox_io. libsox3 reads WAV itself;
 * Debian installs none of libsox's format modules by default
 * (libsox-fmt-*), so for FLAC, Ogg and MP3 libsox declines and torchaudio
 * falls back to its FFmpeg reader (libavformat/libavcodec 59: FFmpeg's own
 * FLAC, Vorbis and floating-point MP3 decoders, converted to float planar
 * by an aformat filter). Integer PCM is scaled the same way on both paths,
 * so WAV and FLAC match bit for bit (float WAV: sox passes samples through
 * 32-bit integers, so torchaudio's values differ from the file's in the
 * last bits); Vorbis and MP3 are decoded by other implementations of the
 * same standards and match within small errors (the suite prints them).
 * Lengths: FFmpeg removes an MP3's encoder delay and padding (LAME's
 * gapless tag), so libmpg123 runs in gapless mode too and the samples line
 * up exactly. For Ogg Vorbis libsndfile honours the last granule position,
 * as the Vorbis specification (and oggdec) do; torchaudio's FFmpeg path
 * sometimes does not, and its clip is then a little longer or shorter
 * than the stream says (the common part matches).
 *
 * Strictness: the content must be the format the extension names (a FLAC
 * file called .wav is refused, naming both); a WAV or FLAC file that holds
 * fewer frames than its header declares is truncated and refused (a WAV
 * data size of 0x7fff0000 or more is a streaming writer's placeholder,
 * read to the end of the file as every reader does); a sample rate of 0 or
 * over AUDIO_RATE_MAX is a corrupt header. An MP3 has no length field: a
 * cut-off MP3 decodes to the frames it holds (as FFmpeg does), a damaged
 * frame stream is refused.
 */
#include <errno.h>
#include <math.h>
#include <mpg123.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "audio.h"
#include "audio_impl.h"

/* Frames read per call into the interleaved scratch buffer. */
#define DECODE_CHUNK 16384

static const char *const format_names[] = {
    [AUDIO_FMT_NONE] = "unknown", [AUDIO_FMT_WAV] = "WAV", [AUDIO_FMT_FLAC] = "FLAC",
    [AUDIO_FMT_OGG] = "Ogg",      [AUDIO_FMT_MP3] = "MP3",
};

const char *audio_format_name(enum audio_format f)
{
    return (unsigned)f < sizeof(format_names) / sizeof(format_names[0]) ? format_names[f]
                                                                         : "unknown";
}

enum audio_format audio_format_from_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot == NULL || strchr(dot, '/') != NULL)
        return AUDIO_FMT_NONE;
    if (strcasecmp(dot, ".wav") == 0)
        return AUDIO_FMT_WAV;
    if (strcasecmp(dot, ".flac") == 0)
        return AUDIO_FMT_FLAC;
    if (strcasecmp(dot, ".ogg") == 0)
        return AUDIO_FMT_OGG;
    if (strcasecmp(dot, ".mp3") == 0)
        return AUDIO_FMT_MP3;
    return AUDIO_FMT_NONE;
}

/* What the first bytes say the content is (AUDIO_FMT_NONE: no magic we
 * know; MP3 only by its ID3v2 tag or a frame sync at offset 0). */
static enum audio_format sniff(const uint8_t *p, size_t len)
{
    if (p == NULL)
        return AUDIO_FMT_NONE;
    if (len >= 12 && (memcmp(p, "RIFF", 4) == 0 || memcmp(p, "RIFX", 4) == 0 ||
                      memcmp(p, "RF64", 4) == 0) && memcmp(p + 8, "WAVE", 4) == 0)
        return AUDIO_FMT_WAV;
    if (len >= 4 && memcmp(p, "fLaC", 4) == 0)
        return AUDIO_FMT_FLAC;
    if (len >= 4 && memcmp(p, "OggS", 4) == 0)
        return AUDIO_FMT_OGG;
    if (len >= 3 && memcmp(p, "ID3", 3) == 0)
        return AUDIO_FMT_MP3;
    if (len >= 2 && p[0] == 0xff && (p[1] & 0xe0) == 0xe0 && (p[1] & 0x06) != 0)
        return AUDIO_FMT_MP3;
    return AUDIO_FMT_NONE;
}

enum audio_format audio_format_sniff(const void *bytes, size_t len)
{
    return sniff(bytes, len);
}

static uint32_t get32(const uint8_t *p, int big)
{
    return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int check_claims(struct audio_ctx *ax, const char *what, long long rate,
                        long long channels, const struct audio_limits *lim);

/* Walks a RIFF/RIFX WAVE's chunks: the format chunk's rate and channels
 * go through check_claims (libsndfile only says "SF_INFO struct
 * incomplete" of a rate it cannot store), and a data chunk that declares
 * more bytes than the file holds is truncated. RF64 keeps its sizes
 * elsewhere: left to libsndfile. */
static int wav_check_header(struct audio_ctx *ax, const uint8_t *p, size_t len,
                            const struct audio_limits *lim)
{
    if (memcmp(p, "RF64", 4) == 0)
        return 0;
    int big = memcmp(p, "RIFX", 4) == 0;
    size_t off = 12;
    while (len - off >= 8) {
        uint32_t size = get32(p + off + 4, big);
        if (memcmp(p + off, "fmt ", 4) == 0 && size >= 8 && len - off - 8 >= 8) {
            const uint8_t *f = p + off + 8;
            uint32_t channels = big ? (uint32_t)f[2] << 8 | f[3] : (uint32_t)f[3] << 8 | f[2];
            int rc = check_claims(ax, "the WAV header", get32(f + 4, big), channels, lim);
            if (rc < 0)
                return rc;
        }
        if (memcmp(p + off, "data", 4) == 0) {
            size_t have = len - off - 8;
            if (size > have && size < 0x7fff0000u)
                return audio_fail(ax, -EBADMSG,
                                  "decode: truncated WAV: the data chunk declares %u bytes, "
                                  "the file holds %zu",
                                  size, have);
            return 0;
        }
        size_t step = 8 + (size_t)size + (size & 1);
        if (step > len - off)
            break; /* libsndfile says what is wrong */
        off += step;
    }
    return 0;
}

/* Header claims against the sanity bound and the limits. */
static int check_claims(struct audio_ctx *ax, const char *what, long long rate,
                        long long channels, const struct audio_limits *lim)
{
    if (rate <= 0 || rate > AUDIO_RATE_MAX)
        return audio_fail(ax, -EBADMSG, "decode: %s claims a sample rate of %lld Hz", what,
                          rate);
    if (channels <= 0 || channels > 65535)
        return audio_fail(ax, -EBADMSG, "decode: %s claims %lld channels", what, channels);
    if (lim && lim->max_channels && channels > lim->max_channels)
        return audio_fail(ax, -E2BIG, "decode: %lld channels, over the limit of %u", channels,
                          lim->max_channels);
    return 0;
}

/* Most frames the limits let a clip at rate have (UINT64_MAX: no limit). */
static uint64_t max_frames(const struct audio_limits *lim, uint32_t rate)
{
    if (lim == NULL || lim->max_seconds <= 0)
        return UINT64_MAX;
    double f = floor(lim->max_seconds * rate);
    return f >= 1.8e19 ? UINT64_MAX : (uint64_t)f;
}

static int over_duration(struct audio_ctx *ax, uint64_t frames, uint32_t rate,
                         const struct audio_limits *lim)
{
    return audio_fail(ax, -E2BIG, "decode: %llu frames at %u Hz (%s%.1f s), over the limit of "
                      "%g s", (unsigned long long)frames, rate, frames == UINT64_MAX ? ">" : "",
                      (double)frames / rate, lim->max_seconds);
}

/* Interleaved ax->scratch (frames x channels) -> out, channels first, or
 * their mean (sum in order, then divided: torch's mean on the CPU). */
static int deinterleave(struct audio_ctx *ax, uint64_t frames, uint32_t channels,
                        uint32_t rate, int mono, struct audio_buf *out)
{
    if (frames == 0)
        return audio_fail(ax, -EBADMSG, "decode: the file holds no audio frames");
    int rc = audio_buf_shape(ax, out, mono ? 1 : channels, 0, frames, rate, "decode");
    if (rc < 0)
        return rc;
    const float *s = ax->scratch;
    if (mono && channels > 1) {
        float n = (float)channels;
        for (uint64_t t = 0; t < frames; t++, s += channels) {
            float sum = s[0];
            for (uint32_t c = 1; c < channels; c++)
                sum += s[c];
            out->data[t] = sum / n;
        }
    } else if (channels == 1) {
        memcpy(out->data, s, frames * sizeof(float));
    } else {
        for (uint32_t c = 0; c < channels; c++) {
            float *d = out->data + (size_t)c * frames;
            for (uint64_t t = 0; t < frames; t++)
                d[t] = s[t * channels + c];
        }
    }
    return 0;
}

/* ---- libsndfile over memory ---- */

struct memfile {
    const uint8_t *p;
    sf_count_t len, pos;
};

static sf_count_t mem_len(void *u)
{
    return ((struct memfile *)u)->len;
}

static sf_count_t mem_seek(sf_count_t off, int whence, void *u)
{
    struct memfile *m = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    if ((off < 0 && -off > base) || (off > 0 && off > m->len - base))
        return -1;
    m->pos = base + off;
    return m->pos;
}

static sf_count_t mem_read(void *dst, sf_count_t n, void *u)
{
    struct memfile *m = u;
    if (n < 0)
        return 0;
    if (n > m->len - m->pos)
        n = m->len - m->pos;
    memcpy(dst, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}

static sf_count_t mem_write(const void *src, sf_count_t n, void *u)
{
    (void)src, (void)n, (void)u;
    return 0;
}

static sf_count_t mem_tell(void *u)
{
    return ((struct memfile *)u)->pos;
}

static int sndfile_major_ok(enum audio_format fmt, int major)
{
    switch (fmt) {
    case AUDIO_FMT_WAV:
        return major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64;
    case AUDIO_FMT_FLAC:
        return major == SF_FORMAT_FLAC;
    case AUDIO_FMT_OGG:
        return major == SF_FORMAT_OGG;
    default:
        return 0;
    }
}

static int decode_sndfile(struct audio_ctx *ax, const uint8_t *bytes, size_t len,
                          enum audio_format fmt, int mono, const struct audio_limits *lim,
                          struct audio_buf *out)
{
    const char *name = audio_format_name(fmt);
    if (fmt == AUDIO_FMT_WAV) {
        int rc = wav_check_header(ax, bytes, len, lim);
        if (rc < 0)
            return rc;
    }
    SF_VIRTUAL_IO vio = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
    struct memfile m = {bytes, (sf_count_t)len, 0};
    SF_INFO info;
    memset(&info, 0, sizeof(info));
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (sf == NULL)
        return audio_fail(ax, -EBADMSG, "decode: not a readable %s file: %s", name,
                          sf_strerror(NULL));
    int rc = 0;
    if (!sndfile_major_ok(fmt, info.format & SF_FORMAT_TYPEMASK)) {
        rc = audio_fail(ax, -EBADMSG, "decode: the content is not %s (libsndfile format "
                        "0x%x)", name, (unsigned)(info.format & SF_FORMAT_TYPEMASK));
        goto out;
    }
    rc = check_claims(ax, name, info.samplerate, info.channels, lim);
    if (rc < 0)
        goto out;
    uint32_t channels = (uint32_t)info.channels, rate = (uint32_t)info.samplerate;
    uint64_t limit = max_frames(lim, rate);
    /* frames is what the header (or, for Ogg, the last page) declares;
     * SF_COUNT_MAX or 0 when unknown. */
    uint64_t declared = info.frames > 0 && info.frames < SF_COUNT_MAX ? (uint64_t)info.frames : 0;
    if (declared > limit) {
        rc = over_duration(ax, declared, rate, lim);
        goto out;
    }
    sf_command(sf, SFC_SET_NORM_FLOAT, NULL, SF_TRUE);
    uint64_t frames = 0;
    for (;;) {
        uint64_t want = declared ? declared - frames : DECODE_CHUNK;
        if (want == 0)
            want = 1; /* reach the end: the header may undercount */
        if (want > DECODE_CHUNK)
            want = DECODE_CHUNK;
        if ((rc = audio_scratch(ax, (size_t)(frames + want) * channels)) < 0) {
            rc = audio_fail(ax, rc, "decode: no memory for %llu frames",
                            (unsigned long long)(frames + want));
            goto out;
        }
        sf_count_t got = sf_readf_float(sf, ax->scratch + frames * channels, (sf_count_t)want);
        if (got <= 0)
            break;
        frames += (uint64_t)got;
        if (frames > limit) {
            rc = over_duration(ax, frames, rate, lim);
            goto out;
        }
    }
    if (sf_error(sf) != SF_ERR_NO_ERROR) {
        rc = audio_fail(ax, -EBADMSG, "decode: damaged %s file: %s", name, sf_strerror(sf));
        goto out;
    }
    if (declared && frames < declared && fmt != AUDIO_FMT_OGG) {
        rc = audio_fail(ax, -EBADMSG, "decode: truncated %s: the header declares %llu frames, "
                        "the file holds %llu", name, (unsigned long long)declared,
                        (unsigned long long)frames);
        goto out;
    }
    rc = deinterleave(ax, frames, channels, rate, mono, out);
out:
    sf_close(sf);
    return rc;
}

/* ---- libmpg123 over memory ---- */

struct mpgsrc {
    const uint8_t *p;
    off_t len, pos;
};

static ssize_t mpg_read(void *h, void *dst, size_t n)
{
    struct mpgsrc *m = h;
    if ((off_t)n > m->len - m->pos)
        n = (size_t)(m->len - m->pos);
    memcpy(dst, m->p + m->pos, n);
    m->pos += (off_t)n;
    return (ssize_t)n;
}

static off_t mpg_seek(void *h, off_t off, int whence)
{
    struct mpgsrc *m = h;
    off_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    if ((off < 0 && -off > base) || (off > 0 && off > m->len - base))
        return -1;
    m->pos = base + off;
    return m->pos;
}

static int mpg_handle(struct audio_ctx *ax, mpg123_handle **out)
{
    if (ax->mpg == NULL) {
        int err = MPG123_OK;
        mpg123_handle *mh = mpg123_new(NULL, &err);
        if (mh == NULL)
            return audio_fail(ax, -ENOMEM, "decode: mpg123_new: %s",
                              mpg123_plain_strerror(err));
        /* float output at every rate and channel count; gapless off (see
         * the top of this file); no messages on stderr. */
        long flags = MPG123_FORCE_FLOAT | MPG123_QUIET | MPG123_GAPLESS;
        if (mpg123_param(mh, MPG123_FLAGS, flags, 0) != MPG123_OK ||
            mpg123_format_none(mh) != MPG123_OK ||
            mpg123_replace_reader_handle(mh, mpg_read, mpg_seek, NULL) != MPG123_OK) {
            mpg123_delete(mh);
            return audio_fail(ax, -EINVAL, "decode: cannot set up libmpg123");
        }
        const long *rates;
        size_t nrates;
        mpg123_rates(&rates, &nrates);
        for (size_t i = 0; i < nrates; i++)
            mpg123_format(mh, rates[i], MPG123_MONO | MPG123_STEREO, MPG123_ENC_FLOAT_32);
        ax->mpg = mh;
    }
    *out = ax->mpg;
    return 0;
}

/* The stream's format, checked (first call: the first frame's; later: a
 * change of format mid-stream is refused). */
static int mp3_format(struct audio_ctx *ax, mpg123_handle *mh, const struct audio_limits *lim,
                      uint32_t *channels, uint32_t *rate)
{
    long frate;
    int fch, enc;
    if (mpg123_getformat(mh, &frate, &fch, &enc) != MPG123_OK)
        return audio_fail(ax, -EBADMSG, "decode: no MP3 frames found: %s",
                          mpg123_strerror(mh));
    if (*channels && ((uint32_t)fch != *channels || (uint32_t)frate != *rate))
        return audio_fail(ax, -EBADMSG, "decode: the MP3 changes format mid-stream "
                          "(%u Hz x %u -> %ld Hz x %d)", *rate, *channels, frate, fch);
    int rc = check_claims(ax, "MP3", frate, fch, lim);
    if (rc < 0)
        return rc;
    if (enc != MPG123_ENC_FLOAT_32)
        return audio_fail(ax, -EINVAL, "decode: libmpg123 gives no float output");
    *channels = (uint32_t)fch;
    *rate = (uint32_t)frate;
    return 0;
}

static int decode_mp3(struct audio_ctx *ax, const uint8_t *bytes, size_t len, int mono,
                      const struct audio_limits *lim, struct audio_buf *out)
{
    mpg123_handle *mh = NULL;
    int rc = mpg_handle(ax, &mh);
    if (rc < 0)
        return rc;
    struct mpgsrc m = {bytes, (off_t)len, 0};
    if (mpg123_open_handle(mh, &m) != MPG123_OK)
        return audio_fail(ax, -EBADMSG, "decode: libmpg123 cannot open the MP3: %s",
                          mpg123_strerror(mh));
    uint64_t frames = 0;
    uint32_t channels = 0, rate = 0;
    rc = mp3_format(ax, mh, lim, &channels, &rate);
    uint64_t limit = rc < 0 ? 0 : max_frames(lim, rate);
    while (rc == 0) {
        if ((rc = audio_scratch(ax, (size_t)(frames + DECODE_CHUNK) * channels)) < 0) {
            rc = audio_fail(ax, rc, "decode: no memory for %llu frames",
                            (unsigned long long)(frames + DECODE_CHUNK));
            break;
        }
        size_t done = 0;
        int r = mpg123_read(mh, ax->scratch + frames * channels,
                            (size_t)DECODE_CHUNK * channels * sizeof(float), &done);
        frames += done / (sizeof(float) * channels);
        if (frames > limit)
            rc = over_duration(ax, frames, rate, lim);
        else if (r == MPG123_NEW_FORMAT)
            rc = mp3_format(ax, mh, lim, &channels, &rate);
        else if (r == MPG123_DONE)
            break;
        else if (r != MPG123_OK)
            rc = audio_fail(ax, -EBADMSG, "decode: damaged MP3: %s", mpg123_strerror(mh));
    }
    mpg123_close(mh);
    if (rc < 0)
        return rc;
    return deinterleave(ax, frames, channels, rate, mono, out);
}

void audio_decode_ctx_free(struct audio_ctx *ax)
{
    if (ax->mpg)
        mpg123_delete(ax->mpg);
    ax->mpg = NULL;
}

int audio_decode(struct audio_ctx *ax, const void *bytes, size_t len, enum audio_format fmt,
                 int mono, const struct audio_limits *lim, struct audio_buf *out)
{
    if (fmt == AUDIO_FMT_NONE || (unsigned)fmt > AUDIO_FMT_MP3)
        return audio_fail(ax, -EINVAL, "decode: not an audio file name (.wav .flac .ogg "
                          ".mp3)");
    if (len == 0)
        return audio_fail(ax, -EBADMSG, "decode: empty file");
    if (len > INT64_MAX / 2)
        return audio_fail(ax, -E2BIG, "decode: %zu bytes is too large", len);
    enum audio_format seen = sniff(bytes, len);
    if (seen != AUDIO_FMT_NONE && seen != fmt)
        return audio_fail(ax, -EBADMSG, "decode: the content is %s, not %s (wrong extension)",
                          audio_format_name(seen), audio_format_name(fmt));
    if (seen == AUDIO_FMT_NONE && fmt != AUDIO_FMT_MP3)
        return audio_fail(ax, -EBADMSG, "decode: the content is not %s (no %s header)",
                          audio_format_name(fmt), audio_format_name(fmt));
    if (fmt == AUDIO_FMT_MP3)
        return decode_mp3(ax, bytes, len, mono, lim, out);
    return decode_sndfile(ax, bytes, len, fmt, mono, lim, out);
}

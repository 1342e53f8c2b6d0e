/*
 * Writes the generated seed corpora of the fuzz targets with the real
 * encoders, so they follow the formats when those change:
 *   DIR/fuzz_frame/  one file per message type (knob byte + one frame),
 *                    and a few multi-frame streams
 *   DIR/fuzz_store/  segment files written by store_put (control byte 0:
 *                    no fix-ups), raw and zstd, one and two records
 *   DIR/fuzz_decode/ small JPEGs made with TurboJPEG (colour with each
 *                    chroma subsampling, grey, progressive, CMYK, odd sizes)
 *                    and two raw-pixel images, behind the three knob bytes
 *                    that pick the pipeline
 * Usage: mkcorpus DIR (the subdirectories must exist). The YAML seeds of
 * fuzz_config are kept by hand in tests/fuzz/corpus/fuzz_config/.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"
#include "proto.h"
#include "step.h"
#include "store.h"

static const char *out_dir;

static int write_seed(const char *target, const char *name, const void *p, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "mkcorpus: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- frames ---- */

struct stream {
    struct proto_wbuf all; /* knob byte, then frames */
    struct proto_wbuf w;   /* the frame being built */
};

static void stream_begin(struct stream *s, uint8_t knob)
{
    proto_wbuf_init(&s->all);
    proto_wbuf_init(&s->w);
    proto_put_u8(&s->all, knob);
}

static void stream_frame(struct stream *s)
{
    proto_frame_finish(&s->w);
    proto_put_bytes(&s->all, s->w.data, s->w.len);
}

static int stream_end(struct stream *s, const char *name)
{
    int rc = s->all.failed || s->w.failed ? -1 : write_seed("fuzz_frame", name, s->all.data,
                                                             s->all.len);
    proto_wbuf_free(&s->all);
    proto_wbuf_free(&s->w);
    return rc;
}

static int frames(void)
{
    struct stream s;
    struct proto_open open = {"imagenet", 64, 42, 3, 1, 4, PROTO_OPEN_SHUFFLE, 8};
    struct proto_opened opened = {1, 300, 5, 224, 224, 3, PROTO_DTYPE_U8};
    struct proto_end end = {1, 5, 300, 2};
    struct proto_warm warm = {"imagenet", 0};
    struct proto_progress prog = {10, 300, 1 << 20, 1, 9};
    int rc = 0;

    stream_begin(&s, 0);
    proto_frame_begin(&s.w, PROTO_STATS, 1);
    stream_frame(&s);
    proto_frame_begin(&s.w, PROTO_DATASETS, 2);
    stream_frame(&s);
    rc |= stream_end(&s, "stats-datasets");

    stream_begin(&s, 0);
    proto_frame_begin(&s.w, PROTO_OPEN, 3);
    proto_put_open(&s.w, &open);
    stream_frame(&s);
    proto_frame_begin(&s.w, PROTO_CLOSE, 4);
    proto_put_u32(&s.w, 1);
    stream_frame(&s);
    rc |= stream_end(&s, "open-close");

    stream_begin(&s, 0);
    proto_frame_begin(&s.w, PROTO_WARM, 5);
    proto_put_warm(&s.w, &warm);
    stream_frame(&s);
    rc |= stream_end(&s, "warm");

    /* Replies, as the client receives them (knob bit 0: the reply limit). */
    stream_begin(&s, 3);
    proto_frame_begin(&s.w, PROTO_OPENED, 3);
    proto_put_opened(&s.w, &opened);
    stream_frame(&s);
    {
        struct proto_batch_hdr b = {1, 0, 2, 2, 2, 3, PROTO_DTYPE_U8};
        int64_t labels[2] = {0, 7};
        uint8_t pix[2 * 2 * 2 * 3];
        for (size_t i = 0; i < sizeof(pix); i++)
            pix[i] = (uint8_t)(i * 11);
        proto_frame_begin(&s.w, PROTO_BATCH, 3);
        proto_put_batch_hdr(&s.w, &b);
        for (int i = 0; i < 2; i++)
            proto_put_i64(&s.w, labels[i]);
        proto_put_bytes(&s.w, pix, sizeof(pix));
        stream_frame(&s);
    }
    proto_frame_begin(&s.w, PROTO_END, 3);
    proto_put_end(&s.w, &end);
    stream_frame(&s);
    proto_frame_begin(&s.w, PROTO_CLOSED, 4);
    proto_put_u32(&s.w, 1);
    stream_frame(&s);
    rc |= stream_end(&s, "opened-batch-end-closed");

    stream_begin(&s, 3);
    proto_frame_begin(&s.w, PROTO_PROGRESS, 5);
    proto_put_progress(&s.w, &prog);
    stream_frame(&s);
    proto_frame_begin(&s.w, PROTO_DONE, 5);
    proto_put_progress(&s.w, &prog);
    stream_frame(&s);
    rc |= stream_end(&s, "progress-done");

    stream_begin(&s, 3);
    proto_frame_begin(&s.w, PROTO_ERROR, 6);
    proto_put_error(&s.w, PROTO_E_NODATASET, "no such dataset 'x'");
    stream_frame(&s);
    rc |= stream_end(&s, "error");

    stream_begin(&s, 1);
    proto_frame_begin(&s.w, PROTO_STATS_REPLY, 1);
    static const char json[] = "{\"version\":\"0.1.0\",\"pid\":1,\"datasets\":[]}";
    proto_put_str(&s.w, json, sizeof(json) - 1);
    stream_frame(&s);
    proto_frame_begin(&s.w, PROTO_DATASETS_REPLY, 2);
    proto_put_str(&s.w, "{\"datasets\":[]}", 15);
    stream_frame(&s);
    rc |= stream_end(&s, "replies");

    /* A resumed stream: OPEN with start_batch, OPENED with the dataset's
     * size and fingerprint, a RELEASE of a batch the client copied out. */
    stream_begin(&s, 0);
    {
        struct proto_open ro = open;
        ro.flags |= PROTO_OPEN_SHM | PROTO_OPEN_START | PROTO_OPEN_INFO;
        ro.start_batch = 3;
        proto_frame_begin(&s.w, PROTO_OPEN, 7);
        proto_put_open(&s.w, &ro);
        stream_frame(&s);
        struct proto_release rel = {1, 1, PROTO_RELEASE_COPIED};
        proto_frame_begin(&s.w, PROTO_RELEASE, 7);
        proto_put_release(&s.w, &rel);
        stream_frame(&s);
    }
    rc |= stream_end(&s, "resume");
    stream_begin(&s, 3);
    {
        struct proto_opened ro = opened;
        ro.has_info = 1;
        ro.dataset_samples = 1200;
        ro.fingerprint = 0x0123456789abcdefull;
        proto_frame_begin(&s.w, PROTO_OPENED, 7);
        proto_put_opened(&s.w, &ro);
        stream_frame(&s);
    }
    rc |= stream_end(&s, "opened-info");
    stream_begin(&s, 3);
    {
        struct proto_opened ro = opened;
        ro.has_info = ro.has_labels = 1;
        ro.dataset_samples = 1200;
        ro.fingerprint = 0x0123456789abcdefull;
        ro.labels = (struct proto_labels){PROTO_DTYPE_F32, 1000, 1};
        proto_frame_begin(&s.w, PROTO_OPENED, 7);
        proto_put_opened(&s.w, &ro);
        stream_frame(&s);
    }
    rc |= stream_end(&s, "opened-labels");

    /* A frame of a future version (answered, the connection stays). */
    stream_begin(&s, 0);
    proto_frame_begin(&s.w, PROTO_STATS, 9);
    stream_frame(&s);
    s.all.data[1 + 4] = PROTO_VERSION + 1;
    proto_frame_begin(&s.w, PROTO_STATS, 10);
    stream_frame(&s);
    rc |= stream_end(&s, "bad-version");
    return rc;
}

/* ---- store segments ---- */

static int copy_segment(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seg-000001.dat", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mkcorpus: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t buf[1 << 14];
    buf[0] = 0; /* control: no fix-ups; no split */
    buf[1] = buf[2] = 0;
    size_t n = fread(buf + 3, 1, sizeof(buf) - 3, f);
    fclose(f);
    return write_seed("fuzz_store", name, buf, n + 3);
}

static int segment(const char *name, int zstd_level, int nrec)
{
    char dir[] = "/tmp/presto-mkcorpus-XXXXXX", err[512], path[4096];
    struct store *st;
    int rc = -1;
    if (!mkdtemp(dir))
        return -1;
    if (store_open(&st, dir, 0, STORE_MIN_SEGMENT_SIZE, err, sizeof(err)) < 0) {
        fprintf(stderr, "mkcorpus: %s\n", err);
        rmdir(dir);
        return -1;
    }
    uint8_t pix[16 * 16 * 3];
    for (size_t i = 0; i < sizeof(pix); i++)
        pix[i] = (uint8_t)(i / 48); /* compressible: one value per row */
    struct img im = {.fmt = IMG_PIXELS, .h = 16, .w = 16, .c = 3, .dtype = PROTO_DTYPE_U8,
                     .data = pix, .len = sizeof(pix), .cap = sizeof(pix), .borrowed = 1};
    int ok = 1;
    for (int i = 0; i < nrec; i++) {
        struct store_key key = {hash_xxh64("demo", 4), (uint64_t)i * 2, 77, 1234,
                                1700000000000000000ll};
        ok &= store_put(st, &key, &im, zstd_level) == 0;
    }
    store_close(st);
    if (ok)
        rc = copy_segment(dir, name);
    snprintf(path, sizeof(path), "%s/seg-000001.dat", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

/* ---- JPEG files ---- */

static int jpeg(const char *name, int w, int h, int pf, int subsamp, int flags, uint8_t k0,
                uint8_t k1)
{
    tjhandle tj = tjInitCompress();
    size_t n = (size_t)w * h * (size_t)tjPixelSize[pf];
    uint8_t *px = malloc(n), *buf = NULL;
    unsigned long len = 0;
    int rc = -1;
    if (!tj || !px)
        goto out;
    for (size_t i = 0; i < n; i++)
        px[i] = (uint8_t)(i * 7 + i / 13); /* some structure, some noise */
    if (tjCompress2(tj, px, w, 0, h, pf, &buf, &len, subsamp, 75, flags) < 0) {
        fprintf(stderr, "mkcorpus: %s: %s\n", name, tjGetErrorStr2(tj));
        goto out;
    }
    uint8_t *seed = malloc(len + 3);
    if (!seed)
        goto out;
    seed[0] = k0;
    seed[1] = k1;
    seed[2] = 0; /* a file for decode */
    memcpy(seed + 3, buf, len);
    rc = write_seed("fuzz_decode", name, seed, len + 3);
    free(seed);
out:
    tjFree(buf);
    free(px);
    if (tj)
        tjDestroy(tj);
    return rc;
}

static int jpegs(void)
{
    int rc = 0;
    rc |= jpeg("rgb-444", 16, 16, TJPF_RGB, TJSAMP_444, 0, 0x00, 7);
    rc |= jpeg("rgb-420-odd", 17, 9, TJPF_RGB, TJSAMP_420, 0, 0x04, 4);
    rc |= jpeg("rgb-422-dct", 40, 24, TJPF_RGB, TJSAMP_422, 0, 0x06, 3);
    rc |= jpeg("rgb-411-rrc", 33, 7, TJPF_RGB, TJSAMP_411, 0, 0x18, 9);
    rc |= jpeg("progressive-pad", 23, 31, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE, 0x28, 2);
    rc |= jpeg("grey-float", 12, 12, TJPF_GRAY, TJSAMP_GRAY, 0, 0x41, 5);
    rc |= jpeg("grey-from-rgb", 9, 14, TJPF_RGB, TJSAMP_440, 0, 0x8d, 6);
    rc |= jpeg("cmyk", 9, 9, TJPF_CMYK, TJSAMP_444, 0, 0x00, 1);
    rc |= jpeg("one-pixel", 1, 1, TJPF_RGB, TJSAMP_444, 0, 0x0c, 0);
    /* Pixels for the steps after decode: 5 rows of 7 RGB, 3 rows of 11 grey. */
    uint8_t px[3 + 5 * 7 * 3];
    px[0] = 0x2c; /* resize 64, pad */
    px[1] = 10;
    px[2] = 0x80 | 4;
    for (size_t i = 3; i < sizeof(px); i++)
        px[i] = (uint8_t)(i * 37);
    rc |= write_seed("fuzz_decode", "pixels-rgb", px, sizeof(px));
    px[0] = 0xd9; /* grey, resize [13, 5], rrc, normalize */
    px[2] = 0x80 | 2;
    rc |= write_seed("fuzz_decode", "pixels-grey", px, 3 + 3 * 11);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mkcorpus DIR\n");
        return 2;
    }
    out_dir = argv[1];
    log_set_level(LOG_LEVEL_ERROR);
    int rc = frames();
    rc |= segment("raw-1", 0, 1);
    rc |= segment("raw-2", 0, 2);
    rc |= segment("zstd-2", 3, 2);
    rc |= jpegs();
    return rc ? 1 : 0;
}

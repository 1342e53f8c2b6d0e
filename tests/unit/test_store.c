/* Unit tests for the disk tier (daemon/store.h): checksums and hashes,
 * round trips raw and zstd of decoded photos and synthetic images, index
 * rebuild on reopen, keys, corrupt and torn records, segment roll-over,
 * the disk budget, degraded mode on write failure (RLIMIT_FSIZE in a child),
 * concurrent puts, lookups and compaction, and compaction itself.
 *
 * Photos come from $PRESTO_PHOTOS, else ../shared/photos (tests run from
 * the repository root); without them the images are all synthetic (said
 * once). Every test works in its own temporary directory, removed at the end. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "hash.h"
#include "io.h"
#include "log.h"
#include "proto.h"
#include "step.h"
#include "store.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define KIB 1024ull

/* ---- images ---- */

/* Decoded photos: resize 256, center_crop 224 (the default offline
 * pipeline, 150 KiB each) and a 64x64 crop of each (12 KiB). */
static struct img photo224[3], photo64[3];
static int nphotos;

static int run_step(const char *name, const char *arg, struct step_ctx *ctx,
                    const struct img *in, struct img *out)
{
    struct step s;
    char err[256];
    if (step_init_simple(&s, name, arg, err, sizeof(err)) < 0) {
        printf("step %s: %s\n", name, err);
        return -1;
    }
    if (step_apply(&s, ctx, in, out) < 0) {
        printf("step %s: %s\n", name, ctx->err);
        return -1;
    }
    return 0;
}

/* Runs before the tests start, so it reports failures by return value. */
static int load_photo(const char *name, struct step_ctx *ctx, struct img *big,
                      struct img *small)
{
    const char *dir = getenv("PRESTO_PHOTOS");
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "../shared/photos", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct img enc = {0}, dec = {0}, rs = {0};
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    rewind(f);
    int rc = size > 0 && img_reserve(&enc, (size_t)size) == 0 &&
                     fread(enc.data, 1, (size_t)size, f) == (size_t)size
                 ? 0
                 : -1;
    fclose(f);
    enc.fmt = IMG_ENCODED;
    enc.len = rc == 0 ? (size_t)size : 0;
    if (rc == 0)
        rc = run_step("decode", NULL, ctx, &enc, &dec) ||
                     run_step("resize", "256", ctx, &dec, &rs) ||
                     run_step("center_crop", "224", ctx, &rs, big) ||
                     run_step("center_crop", "64", ctx, &rs, small)
                 ? -1
                 : 0;
    img_free(&enc);
    img_free(&dec);
    img_free(&rs);
    if (rc < 0) {
        img_free(big);
        img_free(small);
    }
    return rc;
}

static void load_photos(void)
{
    static const char *names[] = {"china.jpg", "flower.jpg", "grace_hopper.jpg"};
    struct step_ctx ctx;
    step_ctx_init(&ctx);
    for (size_t i = 0; i < NELEM(names); i++)
        if (load_photo(names[i], &ctx, &photo224[nphotos], &photo64[nphotos]) == 0)
            nphotos++;
    step_ctx_free(&ctx);
    if (nphotos == 0)
        printf("no photos found (set PRESTO_PHOTOS); using synthetic images only\n");
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A synthetic HWC uint8 image: a gradient with `noise` bits of noise per
 * pixel (0: smooth, compresses well; 8: white noise, does not compress). */
static void synth(struct img *im, uint32_t h, uint32_t w, uint64_t seed, int noise)
{
    memset(im, 0, sizeof(*im));
    ck_assert_int_eq(img_reserve(im, (size_t)h * w * 3), 0);
    im->fmt = IMG_PIXELS;
    im->h = h;
    im->w = w;
    im->c = 3;
    im->dtype = PROTO_DTYPE_U8;
    im->len = (size_t)h * w * 3;
    uint64_t r = seed;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t c = 0; c < 3; c++) {
                uint8_t v = (uint8_t)((x * 255 / w + y * 128 / h + c * 40 + seed) & 0xff);
                if (noise) {
                    r = mix(r);
                    v = noise >= 8 ? (uint8_t)r : (uint8_t)(v + (r & ((1u << noise) - 1)));
                }
                im->data[((size_t)y * w + x) * 3 + c] = v;
            }
}

/* The i-th small test image (about 12 KiB): photo crops and synthetic ones. */
static void small_image(struct img *im, unsigned i)
{
    if (nphotos && i % 4 == 0) {
        const struct img *p = &photo64[(i / 4) % (unsigned)nphotos];
        memset(im, 0, sizeof(*im));
        ck_assert_int_eq(img_reserve(im, p->len), 0);
        memcpy(im->data, p->data, p->len);
        im->fmt = p->fmt;
        im->h = p->h;
        im->w = p->w;
        im->c = p->c;
        im->dtype = p->dtype;
        im->len = p->len;
        im->data[i % im->len] ^= (uint8_t)(i | 1); /* every image distinct */
        return;
    }
    synth(im, 60 + i % 8, 64, i, (int)(i % 3) * 3);
}

static void assert_img_eq(const struct img *a, const struct img *b)
{
    ck_assert_int_eq(a->fmt, IMG_PIXELS);
    ck_assert_uint_eq(a->h, b->h);
    ck_assert_uint_eq(a->w, b->w);
    ck_assert_uint_eq(a->c, b->c);
    ck_assert_uint_eq(a->dtype, b->dtype);
    ck_assert_uint_eq(a->len, b->len);
    ck_assert_msg(memcmp(a->data, b->data, a->len) == 0, "image bytes differ");
}

/* ---- store helpers ---- */

static char tdir[256];

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char sub[1024];
            snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
            rm_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tdir, sizeof(tdir), "%s/presto-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void teardown(void)
{
    rm_tree(tdir);
}

/* The cache dir: a subdirectory store_open has to create. */
static const char *cdir(void)
{
    static char buf[300];
    snprintf(buf, sizeof(buf), "%s/cache/sub", tdir);
    return buf;
}

static struct store *open_store(uint64_t budget, uint64_t segsize)
{
    struct store *st = NULL;
    char err[256] = "";
    int rc = store_open(&st, cdir(), budget, segsize, err, sizeof(err));
    ck_assert_msg(rc == 0, "store_open: %d %s", rc, err);
    return st;
}

static struct store_key key_of(unsigned i)
{
    char path[64];
    int n = snprintf(path, sizeof(path), "class%u/img%05u.jpg", i % 7, i);
    return (struct store_key){
        .dataset = hash_xxh64("imagenet", 8),
        .path = hash_xxh64(path, (size_t)n),
        .fingerprint = 0xF00DF00Dull,
        .src_size = 10000 + i,
        .src_mtime_ns = 1700000000000000000ll + i,
    };
}

/* Reads the records of keys[0..n) through one io_read_batch and decodes
 * them; rcs[i] gets store_lookup's or store_decode's result. */
static void get_many(struct store *st, struct io_ring *ring, const struct store_key *keys,
                     unsigned n, struct img *out, int *rcs)
{
    struct store_loc *locs = calloc(n, sizeof(*locs));
    struct io_req *reqs = calloc(n, sizeof(*reqs));
    unsigned *idx = calloc(n, sizeof(*idx)), nr = 0;
    ck_assert(locs && reqs && idx);
    for (unsigned i = 0; i < n; i++) {
        rcs[i] = store_lookup(st, &keys[i], &locs[i]);
        if (rcs[i] < 0)
            continue;
        reqs[nr] = (struct io_req){.fd = locs[i].fd, .buf = malloc(locs[i].len),
                                   .len = locs[i].len, .off = locs[i].off};
        ck_assert_ptr_nonnull(reqs[nr].buf);
        idx[nr++] = i;
    }
    ck_assert_uint_eq(io_read_batch(ring, reqs, nr), 0);
    for (unsigned k = 0; k < nr; k++) {
        unsigned i = idx[k];
        store_release(st, &locs[i]);
        ck_assert_int_eq(reqs[k].res, (ssize_t)reqs[k].len);
        rcs[i] = store_decode(st, &keys[i], reqs[k].buf, reqs[k].len, &out[i]);
        free(reqs[k].buf);
    }
    free(locs);
    free(reqs);
    free(idx);
}

/* One record, read with pread: store_lookup/decode's result. */
static int get_one(struct store *st, const struct store_key *key, struct img *out)
{
    struct store_loc loc;
    int rc = store_lookup(st, key, &loc);
    if (rc < 0)
        return rc;
    void *buf = malloc(loc.len);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(pread(loc.fd, buf, loc.len, (off_t)loc.off), (ssize_t)loc.len);
    store_release(st, &loc);
    rc = store_decode(st, key, buf, loc.len, out);
    free(buf);
    return rc;
}

static struct store_loc locate(struct store *st, const struct store_key *key)
{
    struct store_loc loc;
    ck_assert_int_eq(store_lookup(st, key, &loc), 0);
    store_release(st, &loc);
    return loc;
}

static void seg_path(char *buf, size_t len, uint32_t id)
{
    snprintf(buf, len, "%s/seg-%06u.dat", cdir(), id);
}

static off_t file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return sb.st_size;
}

/* Segment files in the cache dir and their total size. */
static unsigned count_segments(uint64_t *bytes)
{
    DIR *d = opendir(cdir());
    ck_assert_ptr_nonnull(d);
    unsigned n = 0;
    *bytes = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "seg-", 4) != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", cdir(), de->d_name);
        *bytes += (uint64_t)file_size(path);
        n++;
    }
    closedir(d);
    return n;
}

/* Puts small_image(i) under key_of(i) for i in [from, to). */
static void put_range(struct store *st, unsigned from, unsigned to, int level)
{
    for (unsigned i = from; i < to; i++) {
        struct img im;
        small_image(&im, i);
        struct store_key k = key_of(i);
        ck_assert_int_eq(store_put(st, &k, &im, level), 0);
        img_free(&im);
    }
}

/* Checks that key_of(i) holds small_image(i) for i in [from, to). */
static void check_range(struct store *st, unsigned from, unsigned to)
{
    for (unsigned i = from; i < to; i++) {
        struct img im, got = {0};
        small_image(&im, i);
        struct store_key k = key_of(i);
        int rc = get_one(st, &k, &got);
        ck_assert_msg(rc == 0, "record %u: %d", i, rc);
        assert_img_eq(&got, &im);
        img_free(&im);
        img_free(&got);
    }
}

static void check_missing(struct store *st, unsigned i)
{
    struct store_loc loc;
    struct store_key k = key_of(i);
    ck_assert_int_eq(store_lookup(st, &k, &loc), -ENOENT);
}

/* ---- tests ---- */

/* CRC32C bit by bit, as the polynomial defines it: what hash_crc32c's
 * faster ways (slicing tables, the crc32 instruction in three streams)
 * must agree with. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = ~0u;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

/* Lengths across the three-stream blocks' edges (3 x 256 and 3 x 8192
 * bytes) and the folded path's (4096 bytes and more, in windows of 256,
 * where the CPU has VPCLMULQDQ), from unaligned starts, whole and continued
 * at a cut. */
START_TEST(test_checksums_large)
{
    static uint8_t buf[3 * 8192 * 2 + 3 * 256 * 2 + 64];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(mix(i) >> 7);
    static const size_t lens[] = {767, 768, 769, 775, 1536, 4095, 4096, 4097, 4096 + 255,
                                  4096 + 256, 4096 + 257, 24575, 24576, 24577, 24576 + 768,
                                  24576 + 1000, 2 * 24576 + 2 * 768 + 7};
    for (size_t i = 0; i < NELEM(lens); i++)
        for (size_t at = 0; at < 4; at++) {
            const uint8_t *p = buf + at * 3;
            uint32_t want = crc32c_bitwise(p, lens[i]);
            ck_assert_uint_eq(hash_crc32c(0, p, lens[i]), want);
            size_t cut = lens[i] / 3 + at;
            ck_assert_uint_eq(hash_crc32c(hash_crc32c(0, p, cut), p + cut, lens[i] - cut),
                              want);
        }
}
END_TEST

/* hash_crc32c_copy: the same CRC32C as hash_crc32c and the same bytes as
 * memcpy, at every path's lengths (serial, short and long three-way
 * blocks), from unaligned sources to differently aligned destinations,
 * nothing written past len; step_flip_copy_crc32c: the CRC32C of its
 * input and its rows mirrored (or copied), rows narrower and wider than
 * its blocks. */
START_TEST(test_checksums_copy)
{
    static uint8_t src[3 * 8192 * 2 + 3 * 256 * 2 + 64], dst[sizeof(src) + 16];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(mix(i) >> 5);
    static const size_t lens[] = {0,     1,     7,     8,     9,         300,       767,
                                  768,   769,   4095,  4096,  4096 + 257, 24575,    24576,
                                  24577, 2 * 24576 + 2 * 768 + 7};
    for (size_t i = 0; i < NELEM(lens); i++)
        for (size_t at = 0; at < 4; at++) {
            const uint8_t *p = src + at * 3;
            uint8_t *d = dst + 1 + at;
            memset(dst, 0xa5, sizeof(dst));
            ck_assert_uint_eq(hash_crc32c_copy(0, d, p, lens[i]), hash_crc32c(0, p, lens[i]));
            ck_assert_int_eq(memcmp(d, p, lens[i]), 0);
            ck_assert_uint_eq(d[lens[i]], 0xa5);
            ck_assert_uint_eq(d[-1], 0xa5);
            size_t cut = lens[i] / 3;
            uint32_t c = hash_crc32c_copy(0, d, p, cut);
            ck_assert_uint_eq(hash_crc32c_copy(c, d + cut, p + cut, lens[i] - cut),
                              hash_crc32c(0, p, lens[i]));
        }
    static const uint32_t shapes[][3] = {{50, 67, 3}, {3, 5000, 3}, {33, 41, 1}, {2, 9000, 2}};
    for (size_t i = 0; i < NELEM(shapes); i++)
        for (int mirror = 0; mirror < 2; mirror++) {
            uint32_t h = shapes[i][0], w = shapes[i][1], ch = shapes[i][2];
            size_t len = (size_t)h * w * ch;
            ck_assert_uint_le(len, sizeof(src));
            struct img in = {.fmt = IMG_PIXELS, .h = h, .w = w, .c = ch, .len = len,
                             .data = src + 5, .dtype = PROTO_DTYPE_U8, .borrowed = 1};
            memset(dst, 0xa5, sizeof(dst));
            ck_assert_uint_eq(step_flip_copy_crc32c(0, mirror, &in, dst + 3),
                              hash_crc32c(0, src + 5, len));
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++) {
                    uint32_t sx = mirror ? w - 1 - x : x;
                    ck_assert_int_eq(memcmp(dst + 3 + ((size_t)y * w + x) * ch,
                                            src + 5 + ((size_t)y * w + sx) * ch, ch), 0);
                }
            ck_assert_uint_eq(dst[3 + len], 0xa5);
        }
}
END_TEST

START_TEST(test_checksums)
{
    ck_assert_uint_eq(hash_crc32c(0, "123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(hash_crc32c(0, "", 0), 0);
    /* Continuation at every split point, unaligned starts included. */
    uint8_t buf[301];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)mix(i);
    uint32_t whole = hash_crc32c(0, buf + 1, 300);
    for (size_t cut = 0; cut <= 300; cut += 7)
        ck_assert_uint_eq(hash_crc32c(hash_crc32c(0, buf + 1, cut), buf + 1 + cut, 300 - cut),
                          whole);

    ck_assert_uint_eq(hash_xxh64("", 0), 0xEF46DB3751D8E999ull);
    ck_assert_uint_eq(hash_xxh64("abc", 3), 0x44BC2CF5AD770999ull);
    /* zstd's frame checksum is the low 32 bits of XXH64 (seed 0) of the
     * content: cross-check every tail length and the 32-byte stripes. */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ck_assert_ptr_nonnull(cc);
    ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1)));
    static uint8_t data[5000], frame[6000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(mix(i) >> 13);
    static const size_t lens[] = {1, 3, 4, 7, 8, 15, 31, 32, 33, 63, 64, 100, 4999, 5000};
    for (size_t i = 0; i < NELEM(lens); i++) {
        size_t n = ZSTD_compress2(cc, frame, sizeof(frame), data, lens[i]);
        ck_assert(!ZSTD_isError(n) && n >= 4);
        uint32_t sum = (uint32_t)frame[n - 4] | (uint32_t)frame[n - 3] << 8 |
                       (uint32_t)frame[n - 2] << 16 | (uint32_t)frame[n - 1] << 24;
        ck_assert_msg(sum == (uint32_t)hash_xxh64(data, lens[i]), "xxh64 of %zu bytes",
                      lens[i]);
    }
    ZSTD_freeCCtx(cc);
}
END_TEST

/* Photos at 224 and synthetic images, raw and zstd 1 and 3: bytes equal
 * after decode, read back through one io_read_batch; then again after a
 * reopen. */
START_TEST(test_roundtrip)
{
    enum { PER_LEVEL = 6 };
    static const int levels[] = {0, 1, 3};
    enum { N = PER_LEVEL * NELEM(levels) };
    struct img ims[N];
    struct store_key keys[N];
    struct store *st = open_store(0, 0);
    for (unsigned l = 0; l < NELEM(levels); l++) {
        for (unsigned j = 0; j < PER_LEVEL; j++) {
            unsigned i = l * PER_LEVEL + j;
            if (j < 3 && nphotos) {
                const struct img *p = &photo224[j % (unsigned)nphotos];
                memset(&ims[i], 0, sizeof(ims[i]));
                ck_assert_int_eq(img_reserve(&ims[i], p->len), 0);
                memcpy(ims[i].data, p->data, p->len);
                ims[i].fmt = p->fmt;
                ims[i].h = p->h;
                ims[i].w = p->w;
                ims[i].c = p->c;
                ims[i].dtype = p->dtype;
                ims[i].len = p->len;
            } else {
                synth(&ims[i], 224, 224, i, (int)(j % 3) * 4); /* smooth, 4-bit, white */
            }
            keys[i] = key_of(i);
            ck_assert_int_eq(store_put(st, &keys[i], &ims[i], levels[l]), 0);
            struct store_loc loc;
            ck_assert_int_eq(store_lookup(st, &keys[i], &loc), 0);
            ck_assert_uint_eq(loc.raw_len, ims[i].len);
            ck_assert_uint_eq(loc.h, ims[i].h);
            ck_assert_uint_eq(loc.w, ims[i].w);
            ck_assert_uint_eq(loc.c, 3);
            ck_assert_uint_eq(loc.dtype, PROTO_DTYPE_U8);
            ck_assert_uint_eq(loc.off % STORE_ALIGN, 0);
            ck_assert_uint_eq(loc.len % STORE_ALIGN, 0);
            ck_assert_uint_ge(loc.len, STORE_HEADER_SIZE + loc.stored_len);
            /* zstd when it makes the image smaller, else raw. */
            size_t zlen = ims[i].len;
            if (levels[l] != 0) {
                void *z = malloc(ZSTD_compressBound(ims[i].len));
                zlen = ZSTD_compress(z, ZSTD_compressBound(ims[i].len), ims[i].data,
                                     ims[i].len, levels[l]);
                free(z);
            }
            int synthetic = !(j < 3 && nphotos);
            if (levels[l] != 0 && synthetic && j % 3 == 0)
                ck_assert_uint_lt(zlen, ims[i].len / 10); /* smooth */
            if (synthetic && j % 3 != 0)
                ck_assert_uint_ge(zlen, ims[i].len); /* noise does not compress */
            if (zlen < ims[i].len) {
                ck_assert_int_eq(loc.encoding, STORE_ENC_ZSTD);
                ck_assert_uint_eq(loc.stored_len, zlen);
            } else {
                ck_assert_int_eq(loc.encoding, STORE_ENC_RAW);
                ck_assert_uint_eq(loc.stored_len, loc.raw_len);
            }
            store_release(st, &loc);
        }
    }
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, N);
    ck_assert_uint_eq(s.puts, N);
    ck_assert_uint_lt(s.bytes_stored, s.bytes_raw);
    ck_assert_uint_eq(s.bytes_live, s.bytes_disk);
    ck_assert_uint_eq(s.bytes_dead, 0);
    ck_assert_uint_gt(s.index_bytes, 0);

    struct io_ring *ring;
    ck_assert_int_eq(io_ring_create(&ring, 8, 0, NULL, 0), 0);
    for (int pass = 0; pass < 2; pass++) {
        struct img got[N];
        int rcs[N];
        memset(got, 0, sizeof(got));
        get_many(st, ring, keys, N, got, rcs);
        for (unsigned i = 0; i < N; i++) {
            ck_assert_msg(rcs[i] == 0, "record %u: %d", i, rcs[i]);
            assert_img_eq(&got[i], &ims[i]);
            img_free(&got[i]);
        }
        /* Reopen: the index is rebuilt from the segments. */
        store_close(st);
        st = open_store(0, 0);
        store_get_stats(st, &s);
        ck_assert_uint_eq(s.records, N);
        ck_assert_uint_eq(s.recovered, N);
        ck_assert_uint_eq(s.dropped, 0);
        ck_assert_uint_eq(s.torn_bytes, 0);
    }
    /* Appends after a reopen go on in the same segment. */
    struct img extra;
    synth(&extra, 32, 32, 99, 2);
    struct store_key kx = key_of(1000);
    ck_assert_int_eq(store_put(st, &kx, &extra, 3), 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.segments, 1);
    struct img got = {0};
    ck_assert_int_eq(get_one(st, &kx, &got), 0);
    assert_img_eq(&got, &extra);
    img_free(&got);
    img_free(&extra);
    io_ring_destroy(ring);
    store_close(st);
    for (unsigned i = 0; i < N; i++)
        img_free(&ims[i]);
}
END_TEST

/* A key differing in any one field misses; decoding with the wrong key
 * fails. */
START_TEST(test_keys)
{
    struct store *st = open_store(0, 0);
    put_range(st, 0, 1, 1);
    struct store_key k = key_of(0);
    for (int f = 0; f < 5; f++) {
        struct store_key m = k;
        struct store_loc loc;
        switch (f) {
        case 0: m.dataset ^= 1; break;
        case 1: m.path ^= 1ull << 40; break;
        case 2: m.fingerprint++; break;
        case 3: m.src_size++; break;
        case 4: m.src_mtime_ns--; break;
        }
        ck_assert_msg(store_lookup(st, &m, &loc) == -ENOENT, "field %d", f);
        /* The record's bytes under the wrong key do not decode either. */
        struct store_loc l;
        ck_assert_int_eq(store_lookup(st, &k, &l), 0);
        uint8_t *buf = malloc(l.len);
        struct img out = {0};
        ck_assert_int_eq(pread(l.fd, buf, l.len, (off_t)l.off), (ssize_t)l.len);
        store_release(st, &l);
        ck_assert_int_eq(l.fd, -1);
        ck_assert_int_eq(store_decode(st, &m, buf, l.len, &out), -EBADMSG);
        ck_assert_int_eq(store_decode(st, &k, buf, l.len, &out), 0);
        ck_assert_int_eq(store_decode(st, &k, buf, STORE_HEADER_SIZE + 3, &out), -EBADMSG);
        ck_assert_int_eq(store_decode(st, &k, buf, 10, &out), -EBADMSG);
        img_free(&out);
        free(buf);
    }
    check_range(st, 0, 1);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.decode_errors, 5 * 3);
    ck_assert_uint_eq(s.lookups, 5 + 5 + 1);
    ck_assert_uint_eq(s.hits, 5 + 1);
    /* The same key again: the newer record wins, the old one is dead. */
    put_range(st, 0, 1, 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, 1);
    ck_assert_uint_gt(s.bytes_dead, 0);
    ck_assert_uint_eq(s.bytes_live + s.bytes_dead, s.bytes_disk);
    ck_assert_int_eq(locate(st, &k).encoding, STORE_ENC_RAW);
    store_close(st);
    st = open_store(0, 0);
    ck_assert_int_eq(locate(st, &k).encoding, STORE_ENC_RAW);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, 1);
    ck_assert_uint_eq(s.recovered, 2);
    ck_assert_uint_eq(s.bytes_live + s.bytes_dead, s.bytes_disk);
    check_range(st, 0, 1);
    store_close(st);
}
END_TEST

static void flip_byte(uint32_t seg, uint64_t off)
{
    char path[512];
    seg_path(path, sizeof(path), seg);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

/* store_decode_view: a raw record is used in place (a borrowed view inside
 * the bytes read, out untouched), a compressed one is decoded into out;
 * both give the image put; a wrong key is refused like store_decode. */
START_TEST(test_decode_view)
{
    struct store *st = open_store(0, 0);
    struct img ims[2];
    struct store_key keys[2] = {key_of(0), key_of(1)};
    synth(&ims[0], 64, 48, 0, 8); /* noise: stored raw */
    synth(&ims[1], 64, 48, 1, 0); /* smooth: stored zstd */
    ck_assert_int_eq(store_put(st, &keys[0], &ims[0], 0), 0);
    ck_assert_int_eq(store_put(st, &keys[1], &ims[1], 3), 0);
    for (int i = 0; i < 2; i++) {
        struct store_loc loc;
        ck_assert_int_eq(store_lookup(st, &keys[i], &loc), 0);
        ck_assert_int_eq(loc.encoding, i == 0 ? STORE_ENC_RAW : STORE_ENC_ZSTD);
        uint8_t *buf = malloc(loc.len);
        ck_assert_ptr_nonnull(buf);
        ck_assert_int_eq(pread(loc.fd, buf, loc.len, (off_t)loc.off), (ssize_t)loc.len);
        store_release(st, &loc);
        struct img out = {0}, view = {0};
        ck_assert_int_eq(store_decode_view(st, &keys[i], buf, loc.len, &out, &view), 0);
        ck_assert_int_eq(view.borrowed, 1);
        ck_assert_uint_eq(view.len, ims[i].len);
        ck_assert_uint_eq(view.h, ims[i].h);
        ck_assert_uint_eq(view.w, ims[i].w);
        ck_assert_uint_eq(view.c, ims[i].c);
        ck_assert_int_eq(view.fmt, IMG_PIXELS);
        ck_assert_int_eq(memcmp(view.data, ims[i].data, ims[i].len), 0);
        if (i == 0) { /* in place, no copy */
            ck_assert(view.data >= buf + STORE_HEADER_SIZE && view.data < buf + loc.len);
            ck_assert_ptr_null(out.data);
        } else {
            ck_assert_ptr_eq(view.data, out.data);
        }
        struct store_key other = key_of(7);
        ck_assert_int_eq(store_decode_view(st, &other, buf, loc.len, &out, &view), -EBADMSG);
        img_free(&out);
        free(buf);
    }
    img_free(&ims[0]);
    img_free(&ims[1]);
    store_close(st);
}
END_TEST

/* A damaged payload: store_decode refuses it; on reopen that record alone
 * is dropped and counted; a new put of the key works. */
START_TEST(test_corrupt_payload)
{
    struct store *st = open_store(0, 0);
    put_range(st, 0, 6, 1);
    struct store_key k2 = key_of(2);
    struct store_loc l2 = locate(st, &k2);
    flip_byte(1, l2.off + STORE_HEADER_SIZE + l2.stored_len / 2);
    struct img got = {0};
    ck_assert_int_eq(get_one(st, &k2, &got), -EBADMSG);
    store_close(st);

    st = open_store(0, 0);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.torn_bytes, 0);
    ck_assert_uint_eq(s.records, 5);
    ck_assert_uint_eq(s.bytes_dead, l2.len);
    check_missing(st, 2);
    check_range(st, 0, 2);
    check_range(st, 3, 6);
    put_range(st, 2, 3, 3);
    check_range(st, 0, 6);
    store_close(st);
    st = open_store(0, 0);
    check_range(st, 0, 6);
    store_close(st);
    img_free(&got);
}
END_TEST

/* A damaged header ends the scan of its segment: the newest segment is
 * truncated there, the records before it survive. */
START_TEST(test_corrupt_header)
{
    struct store *st = open_store(0, 0);
    put_range(st, 0, 6, 0);
    struct store_key k3 = key_of(3);
    struct store_loc l3 = locate(st, &k3);
    store_close(st);
    flip_byte(1, l3.off + 20); /* inside the key */
    char path[512];
    seg_path(path, sizeof(path), 1);
    off_t before = file_size(path);

    st = open_store(0, 0);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.torn_bytes, (uint64_t)before - l3.off);
    ck_assert_uint_eq(s.records, 3);
    ck_assert_int_eq(file_size(path), (off_t)l3.off);
    check_range(st, 0, 3);
    for (unsigned i = 3; i < 6; i++)
        check_missing(st, i);
    put_range(st, 3, 6, 0);
    check_range(st, 0, 6);
    store_close(st);
}
END_TEST

/* Rewrites the header of the record at off in segment seg as another
 * prestod would have written it: version v, rate, a checksum that holds. */
static void forge_header(uint32_t seg, uint64_t off, uint16_t v, uint32_t rate)
{
    char path[512];
    uint8_t h[STORE_HEADER_SIZE];
    seg_path(path, sizeof(path), seg);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, h, sizeof(h), (off_t)off), (ssize_t)sizeof(h));
    h[4] = (uint8_t)v;
    h[5] = (uint8_t)(v >> 8);
    for (int i = 0; i < 4; i++)
        h[80 + i] = (uint8_t)(rate >> (8 * i));
    memset(h + 8, 0, 4);
    uint32_t crc = hash_crc32c(0, h, sizeof(h));
    for (int i = 0; i < 4; i++)
        h[8 + i] = (uint8_t)(crc >> (8 * i));
    ck_assert_int_eq(pwrite(fd, h, sizeof(h), (off_t)off), (ssize_t)sizeof(h));
    close(fd);
}

static uint16_t version_at(uint32_t seg, uint64_t off)
{
    char path[512];
    uint8_t v[2];
    seg_path(path, sizeof(path), seg);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, v, 2, (off_t)off + 4), 2);
    close(fd);
    return (uint16_t)(v[0] | v[1] << 8);
}

/* The format versions: an image record is version 1 as before, an audio
 * clip's (a rate) version 2, both read back (the rate with it); a version
 * 1 header claiming a rate is damaged; a store with a record of a later
 * version is refused whole at open, naming the segment, and left as it is. */
START_TEST(test_versions)
{
    struct store *st = open_store(0, 0);
    put_range(st, 0, 3, 0);
    struct img clip;
    synth(&clip, 1, 64, 7, 0);
    clip.rate = 22050;
    struct store_key kc = key_of(7);
    ck_assert_int_eq(store_put(st, &kc, &clip, 0), 0);
    struct store_key k1 = key_of(1), k2 = key_of(2);
    struct store_loc l1 = locate(st, &k1), l2 = locate(st, &k2), lc = locate(st, &kc);
    ck_assert_uint_gt(lc.off, l2.off); /* the clip is the last record */
    store_close(st);
    ck_assert_uint_eq(version_at(1, l1.off), 1);
    ck_assert_uint_eq(version_at(1, lc.off), 2);

    st = open_store(0, 0);
    struct img got = {0};
    ck_assert_int_eq(get_one(st, &kc, &got), 0);
    ck_assert_uint_eq(got.rate, 22050);
    assert_img_eq(&got, &clip);
    img_free(&got);
    check_range(st, 0, 3);
    store_close(st);

    forge_header(1, lc.off, 1, 22050); /* version 1 knows no rate */
    st = open_store(0, 0);
    struct store_stats ss;
    store_get_stats(st, &ss);
    ck_assert_uint_eq(ss.dropped, 1);
    check_missing(st, 7);
    check_range(st, 0, 3);
    store_close(st);

    forge_header(1, l2.off, STORE_VERSION + 1, 0); /* a newer prestod's record */
    char path[512], err[512] = "";
    seg_path(path, sizeof(path), 1);
    off_t before = file_size(path);
    st = NULL;
    ck_assert_int_eq(store_open(&st, cdir(), 0, 0, err, sizeof(err)), -EPROTONOSUPPORT);
    ck_assert_ptr_null(st);
    ck_assert_msg(strstr(err, "seg-000001.dat holds records of a format after version 2") &&
                  strstr(err, "newer prestod"), "%s", err);
    ck_assert_int_eq(file_size(path), before); /* nothing truncated */
    ck_assert_uint_eq(version_at(1, l2.off), STORE_VERSION + 1);
    img_free(&clip);
}
END_TEST

/* A torn tail (the file ends mid-record) is dropped and cut off on reopen;
 * later puts work and survive another reopen. */
START_TEST(test_torn_tail)
{
    struct store *st = open_store(0, 0);
    put_range(st, 0, 5, 1);
    struct store_key k4 = key_of(4);
    struct store_loc l4 = locate(st, &k4);
    store_close(st);
    char path[512];
    seg_path(path, sizeof(path), 1);
    ck_assert_int_eq(truncate(path, (off_t)l4.off + 100), 0);

    st = open_store(0, 0);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.torn_bytes, 100);
    ck_assert_uint_eq(s.records, 4);
    ck_assert_int_eq(file_size(path), (off_t)l4.off);
    check_range(st, 0, 4);
    check_missing(st, 4);
    put_range(st, 4, 8, 1);
    check_range(st, 0, 8);
    store_close(st);

    /* A tail shorter than a header is torn too. */
    int fd = open(path, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "PSR1", 4), 4);
    close(fd);
    st = open_store(0, 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.torn_bytes, 4);
    ck_assert_uint_eq(s.records, 8);
    check_range(st, 0, 8);
    store_close(st);
    st = open_store(0, 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 0);
    store_close(st);
}
END_TEST

/* The segment of each of key_of(0..n): records were put in order, so a
 * new segment starts where the offset goes back to 0. */
static void segment_of(struct store *st, unsigned n, uint32_t *seg, uint64_t *off)
{
    uint32_t cur = 1;
    for (unsigned i = 0; i < n; i++) {
        struct store_key k = key_of(i);
        off[i] = locate(st, &k).off;
        if (i > 0 && off[i] <= off[i - 1])
            cur++;
        seg[i] = cur;
    }
}

/* Small segments roll over; every segment is a file; all is found after a
 * reopen. Damage in an older segment drops the rest of that segment only,
 * without truncating it. */
START_TEST(test_rollover)
{
    enum { N = 40 };
    struct store *st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    put_range(st, 0, N, 0);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_ge(s.segments, 6);
    uint64_t bytes;
    ck_assert_uint_eq(count_segments(&bytes), s.segments);
    ck_assert_uint_eq(bytes, s.bytes_disk);
    for (uint32_t id = 1; id <= s.segments; id++) {
        char path[512];
        seg_path(path, sizeof(path), id);
        ck_assert_int_le(file_size(path), (off_t)STORE_MIN_SEGMENT_SIZE);
    }
    check_range(st, 0, N);
    uint32_t seg[N];
    uint64_t off[N];
    segment_of(st, N, seg, off);
    ck_assert_uint_eq(seg[N - 1], s.segments);
    store_close(st);

    st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, N);
    check_range(st, 0, N);
    store_close(st);

    /* The second record of segment 2 gets a bad header. */
    unsigned first2 = 0;
    while (seg[first2] != 2)
        first2++;
    ck_assert_uint_eq(seg[first2 + 2], 2);
    flip_byte(2, off[first2 + 1] + 1);
    char path[512];
    seg_path(path, sizeof(path), 2);
    off_t size2 = file_size(path);
    st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_eq(s.torn_bytes, (uint64_t)size2 - off[first2 + 1]);
    ck_assert_int_eq(file_size(path), size2); /* not the newest: kept */
    ck_assert_uint_eq(s.bytes_dead, (uint64_t)size2 - off[first2 + 1]);
    for (unsigned i = 0; i < N; i++) {
        if (seg[i] == 2 && i > first2)
            check_missing(st, i);
        else
            check_range(st, i, i + 1);
    }
    store_close(st);
}
END_TEST

/* Puts over the disk budget are refused (nothing written, the store stays
 * healthy); compaction of dead records makes room again. */
static int none_live(const struct store_key *k, void *arg)
{
    (void)k;
    (void)arg;
    return 0;
}

START_TEST(test_budget)
{
    const uint64_t budget = 100 * KIB;
    struct store *st = open_store(budget, STORE_MIN_SEGMENT_SIZE);
    unsigned ok = 0;
    int rc = 0;
    for (unsigned i = 0; i < 30 && rc == 0; i++) {
        struct img im;
        synth(&im, 64, 64, i, 8); /* 12 KiB that do not compress */
        struct store_key k = key_of(i);
        rc = store_put(st, &k, &im, 1);
        ok += rc == 0;
        img_free(&im);
    }
    ck_assert_int_eq(rc, -ENOSPC);
    ck_assert_uint_eq(ok, 8);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.put_budget, 1);
    ck_assert_uint_eq(s.puts, ok);
    ck_assert_uint_le(s.bytes_disk, budget);
    ck_assert_uint_eq(s.budget, budget);
    ck_assert_int_eq(s.degraded, 0);
    ck_assert_int_eq(store_degraded(st), 0);
    uint64_t files;
    count_segments(&files);
    ck_assert_uint_eq(files, s.bytes_disk);
    /* Everything written reads back. */
    for (unsigned i = 0; i < ok; i++) {
        struct img im, got = {0};
        synth(&im, 64, 64, i, 8);
        struct store_key k = key_of(i);
        ck_assert_int_eq(get_one(st, &k, &got), 0);
        assert_img_eq(&got, &im);
        img_free(&im);
        img_free(&got);
    }
    /* Nothing is live any more: compaction frees the files. */
    ck_assert_int_ge(store_compact(st, none_live, NULL), 1);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, 0);
    ck_assert_uint_eq(s.bytes_disk, 0);
    struct img im;
    synth(&im, 64, 64, 77, 8);
    struct store_key k = key_of(77);
    ck_assert_int_eq(store_put(st, &k, &im, 0), 0);
    img_free(&im);
    store_close(st);
}
END_TEST

/* Write failures put the store in degraded mode. Tests run as root, where
 * permissions do not stop writes, so a child process gets a file size
 * limit (RLIMIT_FSIZE) with SIGXFSZ ignored: writes past it fail with
 * EFBIG. The child reports by exit status. */
enum { DEG_OK = 0, DEG_PUT, DEG_FAIL_RC, DEG_ERRNO, DEG_AGAIN, DEG_READ, DEG_STATS };

static int degraded_child(void)
{
    struct rlimit rl = {.rlim_cur = 100 * KIB, .rlim_max = 100 * KIB};
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
        return 77;
    struct store *st;
    char err[256];
    if (store_open(&st, cdir(), 0, 1 << 20, err, sizeof(err)) < 0)
        return DEG_PUT;
    unsigned ok = 0;
    int rc = 0;
    for (unsigned i = 0; i < 30 && rc == 0; i++) {
        struct img im;
        synth(&im, 64, 64, i, 8);
        struct store_key k = key_of(i);
        rc = store_put(st, &k, &im, 0);
        ok += rc == 0;
        img_free(&im);
    }
    if (ok != 8)
        return DEG_PUT;
    if (rc != -EFBIG)
        return DEG_FAIL_RC;
    if (store_degraded(st) != EFBIG)
        return DEG_ERRNO;
    struct img im;
    synth(&im, 8, 8, 1, 0);
    struct store_key k = key_of(100);
    rc = store_put(st, &k, &im, 0); /* refused at once */
    img_free(&im);
    if (rc != -EFBIG)
        return DEG_AGAIN;
    for (unsigned i = 0; i < ok; i++) {
        struct img want, got = {0};
        synth(&want, 64, 64, i, 8);
        struct store_key ki = key_of(i);
        int bad = get_one(st, &ki, &got) != 0 || got.len != want.len ||
                  memcmp(got.data, want.data, want.len) != 0;
        img_free(&want);
        img_free(&got);
        if (bad)
            return DEG_READ;
    }
    struct store_stats s;
    store_get_stats(st, &s);
    if (s.put_io != 2 || s.puts != ok || s.degraded != EFBIG)
        return DEG_STATS;
    store_close(st);
    return DEG_OK;
}

START_TEST(test_degraded)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(degraded_child());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child died: status %#x", status);
    if (WEXITSTATUS(status) == 77) {
        printf("test_degraded skipped: setrlimit(RLIMIT_FSIZE) refused\n");
        return;
    }
    ck_assert_msg(WEXITSTATUS(status) == DEG_OK, "child check %d failed", WEXITSTATUS(status));
    /* Without the limit: the half-written record is a torn tail. */
    struct store *st = open_store(0, 1 << 20);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, 8);
    ck_assert_uint_eq(s.dropped, 1);
    ck_assert_uint_gt(s.torn_bytes, 0);
    ck_assert_int_eq(store_degraded(st), 0);
    for (unsigned i = 0; i < 8; i++) {
        struct img want, got = {0};
        synth(&want, 64, 64, i, 8);
        struct store_key k = key_of(i);
        ck_assert_int_eq(get_one(st, &k, &got), 0);
        assert_img_eq(&got, &want);
        img_free(&want);
        img_free(&got);
    }
    store_close(st);
}
END_TEST

/* ---- concurrency ---- */

enum { THREADS = 4, PER_THREAD = 60 };

struct worker {
    struct store *st;
    unsigned id;
    int failures;
};

static void *put_worker(void *arg)
{
    struct worker *w = arg;
    for (unsigned j = 0; j < PER_THREAD; j++) {
        unsigned i = w->id * PER_THREAD + j;
        struct img im;
        small_image(&im, i);
        struct store_key k = key_of(i);
        w->failures += store_put(w->st, &k, &im, (int)(j % 3) * 2) != 0;
        img_free(&im);
        if (j % 4 == 3) { /* read back one of our own, as a worker would */
            struct img want, got = {0};
            small_image(&want, i - 2);
            struct store_key kr = key_of(i - 2);
            w->failures += get_one(w->st, &kr, &got) != 0 || got.len != want.len ||
                           memcmp(got.data, want.data, want.len) != 0;
            img_free(&want);
            img_free(&got);
        }
    }
    return NULL;
}

/* 4 threads put (and read back) at once, with segments rolling under them;
 * after a reopen every record is intact. */
START_TEST(test_concurrent_puts)
{
    struct store *st = open_store(0, 256 * KIB);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.st = st, .id = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, put_worker, &w[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(w[i].failures, 0);
    }
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, THREADS * PER_THREAD);
    ck_assert_uint_eq(s.bytes_live, s.bytes_disk);
    ck_assert_uint_gt(s.segments, 1);
    store_close(st);
    st = open_store(0, 256 * KIB);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, THREADS * PER_THREAD);
    ck_assert_uint_eq(s.dropped, 0);
    check_range(st, 0, THREADS * PER_THREAD);
    store_close(st);
}
END_TEST

/* ---- compaction ---- */

/* key_of(i) is live when i % 3 == 1, for i < *arg; nothing else is. */
static int live_third(const struct store_key *k, void *arg)
{
    const unsigned *n = arg;
    for (unsigned i = 0; i < *n; i++) {
        struct store_key ki = key_of(i);
        if (memcmp(&ki, k, sizeof(ki)) == 0)
            return i % 3 == 1;
    }
    return 0;
}

/* Compaction with a live-set function keeps exactly the live records,
 * shrinks the files, and a record read through a store_loc taken before
 * stays readable while its segment is deleted. */
START_TEST(test_compaction)
{
    enum { N = 60 };
    unsigned n = N;
    struct store *st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    put_range(st, 0, N, 0);
    put_range(st, 10, 20, 0); /* superseded copies: dead bytes */
    struct store_stats s0, s;
    store_get_stats(st, &s0);
    ck_assert_uint_eq(s0.records, N);
    ck_assert_uint_gt(s0.bytes_dead, 0);
    ck_assert_uint_eq(s0.bytes_live + s0.bytes_dead, s0.bytes_disk);

    /* Hold the location of record 1 (live, in segment 1) across compaction. */
    struct store_key k1 = key_of(1);
    struct store_loc held;
    ck_assert_int_eq(store_lookup(st, &k1, &held), 0);

    int rc = store_compact(st, live_third, &n);
    ck_assert_int_gt(rc, 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, N / 3);
    ck_assert_uint_eq(s.compactions, (uint64_t)rc);
    ck_assert_uint_lt(s.bytes_disk, s0.bytes_disk);
    ck_assert_uint_gt(s.compact_copied, 0);
    ck_assert_uint_gt(s.compact_freed, 0);
    ck_assert_uint_eq(s.bytes_live + s.bytes_dead, s.bytes_disk);
    uint64_t files;
    count_segments(&files);
    ck_assert_uint_eq(files, s.bytes_disk);
    char path[512];
    seg_path(path, sizeof(path), 1);
    ck_assert_int_eq(access(path, F_OK), -1); /* segment 1 is gone */

    /* The held location still reads the old bytes. */
    uint8_t *buf = malloc(held.len);
    ck_assert_int_eq(pread(held.fd, buf, held.len, (off_t)held.off), (ssize_t)held.len);
    store_release(st, &held);
    struct img got = {0}, want;
    ck_assert_int_eq(store_decode(st, &k1, buf, held.len, &got), 0);
    small_image(&want, 1);
    assert_img_eq(&got, &want);
    img_free(&got);
    img_free(&want);
    free(buf);

    for (unsigned i = 0; i < N; i++) {
        if (i % 3 != 1)
            check_missing(st, i);
        else
            check_range(st, i, i + 1);
    }
    /* Nothing more to do. */
    ck_assert_int_eq(store_compact(st, live_third, &n), 0);
    store_close(st);

    st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, N / 3);
    ck_assert_uint_eq(s.dropped, 0);
    for (unsigned i = 0; i < N; i++) {
        if (i % 3 != 1)
            check_missing(st, i);
        else
            check_range(st, i, i + 1);
    }
    store_close(st);
}
END_TEST

/* Records damaged after they were indexed: compaction forgets what it
 * cannot read (a bad payload, everything after a bad header) and still
 * deletes the segment. */
START_TEST(test_compaction_damaged)
{
    enum { N = 30 };
    unsigned n = N;
    struct store *st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    put_range(st, 0, N, 0);
    uint32_t seg[N];
    uint64_t off[N];
    segment_of(st, N, seg, off);
    ck_assert_uint_eq(seg[4], 1);
    flip_byte(1, off[1] + STORE_HEADER_SIZE + 5); /* live 1: bad payload */
    flip_byte(1, off[3] + 30);                    /* dead 3: bad header, hides live 4 */
    int rc = store_compact(st, live_third, &n);
    ck_assert_int_gt(rc, 0);
    char path[512];
    seg_path(path, sizeof(path), 1);
    ck_assert_int_eq(access(path, F_OK), -1);
    check_missing(st, 1);
    check_missing(st, 4);
    for (unsigned i = 7; i < N; i += 3)
        check_range(st, i, i + 1);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, N / 3 - 2);
    ck_assert_uint_eq(s.bytes_live + s.bytes_dead, s.bytes_disk);
    store_close(st);
}
END_TEST

/* Compaction while other threads put and read: nothing live is lost. */
struct churn {
    struct store *st;
    unsigned id;
    int failures;
    int stop;
};

static void *churn_worker(void *arg)
{
    struct churn *c = arg;
    for (unsigned j = 0; !__atomic_load_n(&c->stop, __ATOMIC_RELAXED) || j < 40; j++) {
        unsigned i = 1000 + c->id * 10000 + j;
        struct img im;
        small_image(&im, i);
        struct store_key k = key_of(i);
        c->failures += store_put(c->st, &k, &im, 1) != 0;
        img_free(&im);
        unsigned r = (j * 7 + c->id) % 60; /* old records that stay live */
        if (r % 3 != 0) {
            struct img want, got = {0};
            small_image(&want, r);
            struct store_key kr = key_of(r);
            c->failures += get_one(c->st, &kr, &got) != 0 || got.len != want.len ||
                           memcmp(got.data, want.data, want.len) != 0;
            img_free(&want);
            img_free(&got);
        }
        if (j > 400)
            break;
    }
    return NULL;
}

static int live_churn(const struct store_key *k, void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < 60; i += 3) {
        struct store_key ki = key_of(i);
        if (memcmp(&ki, k, sizeof(ki)) == 0)
            return 0;
    }
    return 1;
}

START_TEST(test_compaction_concurrent)
{
    struct store *st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    put_range(st, 0, 60, 0);
    pthread_t t[2];
    struct churn c[2];
    for (unsigned i = 0; i < 2; i++) {
        c[i] = (struct churn){.st = st, .id = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn_worker, &c[i]), 0);
    }
    int total = 0;
    for (int round = 0; round < 5; round++) {
        int rc = store_compact(st, live_churn, NULL);
        ck_assert_int_ge(rc, 0);
        total += rc;
        put_range(st, 1, 2, 0); /* more dead bytes for the next round */
    }
    for (unsigned i = 0; i < 2; i++) {
        __atomic_store_n(&c[i].stop, 1, __ATOMIC_RELAXED);
        pthread_join(t[i], NULL);
        ck_assert_int_eq(c[i].failures, 0);
    }
    ck_assert_int_gt(total, 0);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.bytes_live + s.bytes_dead, s.bytes_disk);
    uint64_t records = s.records;
    store_close(st);
    st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    store_get_stats(st, &s);
    ck_assert_uint_ge(s.records, records);
    ck_assert_uint_eq(s.dropped, 0);
    /* Forgetting is in memory: records of dead keys not yet compacted away
     * come back at open, and the next sweep forgets them again. */
    ck_assert_int_ge(store_compact(st, live_churn, NULL), 0);
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.records, records);
    for (unsigned i = 0; i < 60; i++)
        if (i % 3 != 0)
            check_range(st, i, i + 1);
    store_close(st);
}
END_TEST

/* ---- odds and ends ---- */

START_TEST(test_open_errors)
{
    struct store *st, *st2;
    char err[256];
    ck_assert_int_eq(store_open(&st, cdir(), 0, 1000, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "segment size") != NULL, "%s", err);
    /* One process at a time per directory. */
    st = open_store(0, 0);
    ck_assert_int_eq(store_open(&st2, cdir(), 0, 0, err, sizeof(err)), -EBUSY);
    ck_assert_msg(strstr(err, "in use") != NULL, "%s", err);
    store_close(st);
    /* Other files in the directory are left alone. */
    char path[512];
    snprintf(path, sizeof(path), "%s/notes.txt", cdir());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("hello\n", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/seg-abc.dat", cdir());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    st = open_store(0, 0);
    put_range(st, 0, 2, 0);
    check_range(st, 0, 2);
    store_close(st);
    ck_assert_int_eq(access(path, F_OK), 0);
    /* A path through a regular file cannot be a directory. */
    snprintf(path, sizeof(path), "%s/notes.txt/cache", cdir());
    ck_assert_int_eq(store_open(&st, path, 0, 0, err, sizeof(err)), -ENOTDIR);
    ck_assert_msg(strstr(err, "notes.txt: Not a directory") != NULL, "%s", err);
}
END_TEST

/* Writes text to path (mode 0600). */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

static void expect_text(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    ck_assert_msg(strcmp(buf, text) == 0, "%s holds '%s', want '%s'", path, buf, text);
}

/* Links planted in the cache directory under the names the store uses are
 * never followed: a symbolic link as the newest segment (which recovery
 * would open read-write and truncate), a hard link to another file as a
 * segment, and a symbolic link as the O_DIRECT probe file; their targets
 * keep their bytes through open, puts, direct I/O, compaction and close. */
static int all_live(const struct store_key *k, void *arg)
{
    (void)k;
    (void)arg;
    return 1;
}

START_TEST(test_planted_links)
{
    char victim[512], victim2[512], victim3[512], lpath[512], err[512];
    struct store *st = open_store(0, 0);
    put_range(st, 0, 2, 0);
    store_close(st);
    snprintf(victim, sizeof(victim), "%s/victim", tdir);
    snprintf(victim2, sizeof(victim2), "%s/victim2", tdir);
    snprintf(victim3, sizeof(victim3), "%s/victim3", tdir);
    write_text(victim, "precious");
    write_text(victim2, "precious too");
    write_text(victim3, "and this");
    seg_path(lpath, sizeof(lpath), 99);
    ck_assert_int_eq(symlink(victim, lpath), 0);
    seg_path(lpath, sizeof(lpath), 98);
    ck_assert_int_eq(link(victim2, lpath), 0);
    snprintf(lpath, sizeof(lpath), "%s/direct-io-probe.tmp", cdir());
    ck_assert_int_eq(symlink(victim3, lpath), 0);

    st = open_store(0, 0);
    check_range(st, 0, 2);
    int direct = store_direct_io(st); /* may be refused; the probe link goes either way */
    put_range(st, 2, 6, 0);
    check_range(st, 0, 6);
    ck_assert_int_ge(store_compact(st, all_live, NULL), 0);
    store_close(st);
    expect_text(victim, "precious");
    expect_text(victim2, "precious too");
    expect_text(victim3, "and this");
    struct stat sb;
    seg_path(lpath, sizeof(lpath), 99);
    ck_assert_int_eq(lstat(lpath, &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode), "the planted link was replaced");
    ck_assert_int_eq(lstat(victim2, &sb), 0);
    ck_assert_int_eq(sb.st_nlink, 2);
    ck_assert_int_eq(lstat(victim3, &sb), 0);
    ck_assert_int_eq(sb.st_size, 8);
    /* The store opens again, with every record (new segments after 99). */
    ck_assert_int_eq(store_open(&st, cdir(), 0, 0, err, sizeof(err)), 0);
    check_range(st, 0, 6);
    store_close(st);
    (void)direct;
}
END_TEST

/* Pages of [off, off + len) of path in the page cache (mincore). */
static size_t resident_pages(const char *path, off_t off, size_t len)
{
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, off);
    ck_assert_ptr_ne(m, MAP_FAILED);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, in = 0;
    unsigned char *v = malloc(n);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(mincore(m, len, v), 0);
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1;
    free(v);
    munmap(m, len);
    close(fd);
    return in;
}

/* A store read with O_DIRECT writes behind: the windows its writes have
 * passed leave the page cache (its last ones stay, for the flusher), and
 * every record reads back whole. Where the file system refuses O_DIRECT,
 * or keeps files in memory (tmpfs: nothing to drop), there is nothing to
 * check. */
START_TEST(test_write_behind)
{
    struct store *st = open_store(0, 64u << 20);
    struct statfs fs;
    ck_assert_int_eq(statfs(cdir(), &fs), 0);
    if (fs.f_type == 0x01021994 /* TMPFS_MAGIC */ || store_direct_io(st) < 0) {
        fprintf(stderr, "test_write_behind: %s takes no O_DIRECT or is tmpfs: skipped\n",
                cdir());
        store_close(st);
        return;
    }
    enum { N = 40 }; /* 1 MiB records: 40 MiB, five 8 MiB windows */
    struct img im[N];
    for (unsigned i = 0; i < N; i++) {
        synth(&im[i], 512, 683, i, 8);
        struct store_key k = key_of(i);
        ck_assert_int_eq(store_put(st, &k, &im[i], 0), 0);
    }
    struct store_stats ss;
    store_get_stats(st, &ss);
    ck_assert_int_eq(ss.write_behind, 1);
    ck_assert_uint_eq(ss.segments, 1);
    char seg[400];
    seg_path(seg, sizeof(seg), 1);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t first = resident_pages(seg, 0, 16u << 20);
    size_t last = resident_pages(seg, (off_t)(32u << 20), 4u << 20);
    ck_assert_msg(first == 0, "%zu of the first 16 MiB's %zu pages still cached", first,
                  (size_t)(16u << 20) / page);
    ck_assert_msg(last > 0, "the last window is not cached: mincore sees nothing here");
    for (unsigned i = 0; i < N; i++) {
        struct store_key k = key_of(i);
        struct img got = {0};
        ck_assert_int_eq(get_one(st, &k, &got), 0);
        assert_img_eq(&got, &im[i]);
        img_free(&got);
        img_free(&im[i]);
    }
    store_close(st);
}
END_TEST

START_TEST(test_bad_puts)
{
    struct store *st = open_store(0, STORE_MIN_SEGMENT_SIZE);
    struct store_key k = key_of(0);
    struct img im;
    synth(&im, 16, 16, 1, 0);
    im.fmt = IMG_ENCODED;
    ck_assert_int_eq(store_put(st, &k, &im, 0), -EINVAL);
    im.fmt = IMG_PIXELS;
    im.h = 17; /* shape and length disagree */
    ck_assert_int_eq(store_put(st, &k, &im, 0), -EINVAL);
    im.h = 16;
    im.dtype = 99;
    ck_assert_int_eq(store_put(st, &k, &im, 0), -EINVAL);
    img_free(&im);
    synth(&im, 200, 200, 1, 8); /* 120 KB raw, noise: over a 64 KiB segment */
    ck_assert_int_eq(store_put(st, &k, &im, 3), -EFBIG);
    img_free(&im);
    synth(&im, 200, 200, 1, 0); /* the same size, but it compresses: fits */
    ck_assert_int_eq(store_put(st, &k, &im, 3), 0);
    struct img got = {0};
    ck_assert_int_eq(get_one(st, &k, &got), 0);
    assert_img_eq(&got, &im);
    img_free(&got);
    img_free(&im);
    struct store_stats s;
    store_get_stats(st, &s);
    ck_assert_uint_eq(s.put_other, 3);
    ck_assert_uint_eq(s.put_too_large, 1);
    ck_assert_uint_eq(s.puts, 1);
    ck_assert_int_eq(store_degraded(st), 0);
    store_close(st);
    store_close(NULL);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_checksums);
    tcase_add_test(tc, test_checksums_large);
    tcase_add_test(tc, test_checksums_copy);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_keys);
    tcase_add_test(tc, test_corrupt_payload);
    tcase_add_test(tc, test_decode_view);
    tcase_add_test(tc, test_corrupt_header);
    tcase_add_test(tc, test_torn_tail);
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_rollover);
    tcase_add_test(tc, test_budget);
    tcase_add_test(tc, test_degraded);
    tcase_add_test(tc, test_concurrent_puts);
    tcase_add_test(tc, test_compaction);
    tcase_add_test(tc, test_compaction_damaged);
    tcase_add_test(tc, test_compaction_concurrent);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_write_behind);
    tcase_add_test(tc, test_bad_puts);
    tcase_add_test(tc, test_planted_links);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    log_set_level(LOG_LEVEL_WARN);
    load_photos();
    SRunner *sr = srunner_create(store_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int i = 0; i < nphotos; i++) {
        img_free(&photo224[i]);
        img_free(&photo64[i]);
    }
    return failed ? 1 : 0;
}

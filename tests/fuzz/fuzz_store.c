/*
 * libFuzzer target: the disk tier's record decoder and recovery scan
 * (daemon/store.c) on damaged segment files.
 *
 * Input: a control byte, a 16-bit split offset, then the bytes of segment
 * files. Control bits:
 *   0x01  recompute each record's hdr_crc      } so that the fuzzer gets
 *   0x02  recompute each record's data_crc     } past the checksums and
 *   0x04  write magic, version and the zeroed  } reaches what lies behind
 *         reserved fields of each record       } them
 *   0x08  two segments, split at the offset (an older, sealed one and the
 *         newest, which recovery truncates)
 *   0x10  store the put's record with zstd
 *   0x20  a disk budget of 64 KiB (else none)
 * The fix-ups walk the records as the recovery scan does (8-byte aligned,
 * each as long as its stored_len says).
 *
 * Each run writes the segments to a fresh directory, opens the store
 * (recovery), then checks that:
 *   - the open succeeds (damage is dropped, never fatal);
 *   - every indexed record reads back and store_decode() accepts it (raw
 *     records always; zstd ones unless the payload does not decompress);
 *   - every record store_decode() accepts straight from the input has the
 *     shape and length its header claims;
 *   - a store_put() after recovery reads back byte for byte;
 *   - after store_compact() with half the keys dropped, those are gone and
 *     the others still read back;
 *   - at every step the bytes on disk are exactly live + dead.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "hash.h"
#include "log.h"
#include "proto.h"
#include "step.h"
#include "store.h"

#define MAX_KEYS 64
#define MIN_SEG (64u << 10)

static char store_dir[256];

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static struct store_key hdr_key(const uint8_t *h)
{
    struct store_key k = {rd64(h + 16), rd64(h + 24), rd64(h + 32), rd64(h + 40),
                          (int64_t)rd64(h + 48)};
    return k;
}

/* Applies the fix-ups to one segment's bytes and collects the keys of the
 * headers it walks over. */
static void fix_segment(uint8_t *seg, size_t len, uint8_t ctl, struct store_key *keys,
                        unsigned *nkeys)
{
    size_t off = 0;
    while (len - off >= STORE_HEADER_SIZE) {
        uint8_t *h = seg + off;
        if (ctl & 0x04) {
            wr32(h, STORE_MAGIC);
            h[4] = STORE_VERSION;
            h[5] = 0;
            h[6] &= 1;
            h[7] = 0;
            memset(h + 80, 0, 8);
        }
        uint32_t stored = rd32(h + 60);
        uint64_t rec = ((uint64_t)STORE_HEADER_SIZE + stored + STORE_ALIGN - 1) &
                       ~(uint64_t)(STORE_ALIGN - 1);
        if ((ctl & 0x02) && stored <= len - off - STORE_HEADER_SIZE)
            wr32(h + 12, hash_crc32c(0, h + STORE_HEADER_SIZE, stored));
        if (ctl & 0x01) {
            wr32(h + 8, 0);
            wr32(h + 8, hash_crc32c(0, h, STORE_HEADER_SIZE));
        }
        if (*nkeys < MAX_KEYS)
            keys[(*nkeys)++] = hdr_key(h);
        if (rec > len - off)
            break;
        off += rec;
    }
}

static void write_file(const char *name, const uint8_t *p, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", store_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    FUZZ_CHECK(fd >= 0);
    while (len) {
        ssize_t n = write(fd, p, len);
        FUZZ_CHECK(n > 0);
        p += n;
        len -= (size_t)n;
    }
    close(fd);
}

static void empty_dir(void)
{
    DIR *d = opendir(store_dir);
    FUZZ_CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
}

static void remove_dir(void)
{
    empty_dir();
    rmdir(store_dir);
}

static void check_accounting(struct store *st)
{
    struct store_stats s;
    store_get_stats(st, &s);
    FUZZ_CHECK(s.bytes_live + s.bytes_dead == s.bytes_disk);
    FUZZ_CHECK(s.bytes_stored <= s.bytes_live);
}

/* Looks key up; when indexed, reads the record back through store_decode.
 * Returns 1 when found (decoded, or a zstd payload refused), 0 when not. */
static int read_back(struct store *st, const struct store_key *key, struct img *out)
{
    struct store_loc loc;
    if (store_lookup(st, key, &loc) < 0)
        return 0;
    FUZZ_CHECK(loc.len >= STORE_HEADER_SIZE && loc.stored_len <= loc.len - STORE_HEADER_SIZE);
    FUZZ_CHECK(loc.encoding != STORE_ENC_RAW || loc.stored_len == loc.raw_len);
    uint8_t *buf = malloc(loc.len);
    FUZZ_CHECK(buf != NULL);
    FUZZ_CHECK(pread(loc.fd, buf, loc.len, (off_t)loc.off) == (ssize_t)loc.len);
    enum store_encoding enc = loc.encoding;
    uint32_t len = loc.len, raw_len = loc.raw_len, h = loc.h, w = loc.w, c = loc.c, dtype = loc.dtype;
    store_release(st, &loc);
    int rc = store_decode(st, key, buf, len, out);
    free(buf);
    FUZZ_CHECK(rc == 0 || (rc == -EBADMSG && enc == STORE_ENC_ZSTD));
    if (rc == 0)
        FUZZ_CHECK(out->fmt == IMG_PIXELS && out->len == raw_len && out->h == h &&
                   out->w == w && out->c == c && out->dtype == dtype);
    return 1;
}

static int is_live(const struct store_key *key, void *arg)
{
    (void)arg;
    return !(key->path & 1);
}

/* store_decode on every record of the input as it stands, with no file. */
static void decode_input(struct store *st, const uint8_t *seg, size_t len, struct img *out)
{
    size_t off = 0;
    while (len - off >= STORE_HEADER_SIZE) {
        struct store_key key = hdr_key(seg + off);
        if (store_decode(st, &key, seg + off, len - off, out) == 0) {
            const uint8_t *h = seg + off;
            FUZZ_CHECK(out->len == rd32(h + 56) && out->h == rd32(h + 64) &&
                       out->w == rd32(h + 68) && out->c == rd32(h + 72) &&
                       out->dtype == rd32(h + 76));
            FUZZ_CHECK(out->len == (uint64_t)out->h * out->w * out->c *
                                       proto_dtype_size(out->dtype));
        }
        off += STORE_ALIGN;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_key keys[MAX_KEYS + 1];
    unsigned nkeys = 0;
    struct img out = {0};
    char err[512];

    if (size < 3)
        return 0;
    if (!store_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(store_dir, sizeof(store_dir), "%s/presto-fuzz-store-XXXXXX", base);
        FUZZ_CHECK(mkdtemp(store_dir) != NULL);
        atexit(remove_dir);
        log_set_level(LOG_LEVEL_ERROR);
    }
    uint8_t ctl = data[0];
    size_t split = ((size_t)data[1] | (size_t)data[2] << 8) & ~(size_t)(STORE_ALIGN - 1);
    size_t len = size - 3;
    uint8_t *seg = malloc(len + 1);
    FUZZ_CHECK(seg != NULL);
    memcpy(seg, data + 3, len);
    if (!(ctl & 0x08) || split > len)
        split = 0;

    empty_dir();
    fix_segment(seg, split, ctl, keys, &nkeys);
    fix_segment(seg + split, len - split, ctl, keys, &nkeys);
    if (split)
        write_file("seg-000001.dat", seg, split);
    write_file("seg-000002.dat", seg + split, len - split);

    struct store *st = NULL;
    int rc = store_open(&st, store_dir, ctl & 0x20 ? 64u << 10 : 0, MIN_SEG, err, sizeof(err));
    if (rc == -EPROTONOSUPPORT) { /* a sound header of a later version: refused whole */
        free(seg);
        return 0;
    }
    if (rc < 0)
        fprintf(stderr, "store_open: %s\n", err);
    FUZZ_CHECK(rc == 0);
    check_accounting(st);

    decode_input(st, seg, split, &out);
    decode_input(st, seg + split, len - split, &out);
    for (unsigned i = 0; i < nkeys; i++)
        read_back(st, &keys[i], &out);

    /* A put after recovery lands after the last good record. */
    uint8_t pix[2 * 2 * 3];
    for (size_t i = 0; i < sizeof(pix); i++)
        pix[i] = len ? seg[i % len] : (uint8_t)i;
    struct img im = {.fmt = IMG_PIXELS, .h = 2, .w = 2, .c = 3, .dtype = PROTO_DTYPE_U8,
                     .data = pix, .len = sizeof(pix), .cap = sizeof(pix), .borrowed = 1};
    struct store_key pk = {0x5eed, 2, 3, 4, 5};
    rc = store_put(st, &pk, &im, ctl & 0x10 ? 1 : 0);
    FUZZ_CHECK(rc == 0 || rc == -ENOSPC);
    if (rc == 0) {
        FUZZ_CHECK(read_back(st, &pk, &out) == 1);
        FUZZ_CHECK(out.len == sizeof(pix) && memcmp(out.data, pix, sizeof(pix)) == 0);
        keys[nkeys++] = pk;
    }
    check_accounting(st);
    int found[MAX_KEYS + 1]; /* what compaction must keep (the input may hold pk too) */
    for (unsigned i = 0; i < nkeys; i++)
        found[i] = read_back(st, &keys[i], &out);

    rc = store_compact(st, is_live, NULL);
    FUZZ_CHECK(rc >= 0);
    check_accounting(st);
    for (unsigned i = 0; i < nkeys; i++) {
        int now = read_back(st, &keys[i], &out);
        FUZZ_CHECK(now == (found[i] && is_live(&keys[i], NULL)));
    }
    store_close(st);
    img_free(&out);
    free(seg);
    return 0;
}

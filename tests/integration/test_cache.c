/*
 * The cache tiers against a real prestod: the disk tier's round trip (raw
 * and zstd) across a restart, recovery from a corrupt record, a torn tail
 * and a record corrupted under a running daemon, a kill -9 in the middle
 * of `prestoctl warm`, a full disk (a 2 MiB tmpfs, else a file-size limit),
 * stale records after a source file or the offline steps changed, the disk
 * budget, an unusable cache directory, and the memory budget held with a
 * dataset four times its size.
 *
 * Every sample served is compared with a fresh computation: per-sample
 * pixel hashes of the same epoch (same seed, no shuffle) from a daemon with
 * no disk tier, taken once in main() before the tests fork.
 *
 * The disk tests run twice, once per I/O backend (io.backend: auto, which
 * is io_uring where the kernel allows it, and pread).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define CASE_TIMEOUT_S 240
#define MAX_SAMPLES 700

/* Small images for the disk tests (12 KiB each, five to a 64 KiB segment),
 * 224x224 ones (147 KiB) for the warm, full-disk and memory tests. */
struct dset {
    const char *name;
    unsigned count, resize, crop;
    char root[HARNESS_PATH_MAX];
    uint64_t ref[MAX_SAMPLES]; /* pixel hash of each sample of the reference epoch */
    int64_t labels[MAX_SAMPLES];
};

static struct harness H;
static struct dset small = {.name = "small", .count = 96, .resize = 72, .crop = 64};
static struct dset medium = {.name = "medium", .count = 240, .resize = 256, .crop = 224};
static struct dset big = {.name = "big", .count = 700, .resize = 256, .crop = 224};
static const char *const backends[2] = {"auto", "pread"};
static int under_valgrind;


#define REF_SEED 5
#define REF_EPOCH 3

static size_t sample_bytes(const struct dset *d)
{
    return (size_t)d->crop * d->crop * 3;
}

/* ---- daemons ---- */

struct dconf {
    const struct dset *d;
    const char *memory;   /* cache.memory */
    const char *cache;    /* cache.dir, NULL: no disk tier */
    const char *disk;     /* cache.disk */
    const char *backend;  /* io.backend */
    const char *encoding; /* raw or zstd */
    const char *segment;  /* cache.segment_size, NULL: 64KiB */
    int direct;           /* cache.direct_io: 0 false, 1 true, 2 auto */
    const char *readahead; /* io.readahead, NULL: the default */
    const char *flip;      /* random_flip's p, NULL: 0.5; "none": no online step */
};

/* Writes the config and starts a daemon on it. */
static void start(const struct dconf *c)
{
    char text[2048], path[HARNESS_PATH_MAX], name[64], ra[64] = "", flip[48] = "";
    if (c->readahead)
        snprintf(ra, sizeof(ra), "  readahead: %s\n", c->readahead);
    if (!c->flip || strcmp(c->flip, "none") != 0)
        snprintf(flip, sizeof(flip), ", {random_flip: %s}", c->flip ? c->flip : "0.5");
    snprintf(text, sizeof(text),
             "workers: 2\n"
             "cache:\n"
             "  memory: %s\n"
             "  dir: %s\n"
             "  disk: %s\n"
             "  segment_size: %s\n"
             "  direct_io: %s\n"
             "io:\n"
             "  backend: %s\n"
             "%s"
             "datasets:\n"
             "  - name: %s\n"
             "    root: %s\n"
             "    steps: [decode, {resize: %u}, {center_crop: %u}%s]\n"
             "    encoding: %s\n",
             c->memory, c->cache ? c->cache : "/nonexistent", c->cache ? c->disk : "0",
             c->segment ? c->segment : "64KiB", c->direct == 2 ? "auto" : c->direct ? "true" : "false",
             c->backend ? c->backend : "auto", ra, c->d->name, c->d->root, c->d->resize,
             c->d->crop, flip, c->encoding ? c->encoding : "raw");
    snprintf(name, sizeof(name), "config-%d-%u.yaml", (int)getpid(), H.starts);
    ck_assert_int_eq(harness_write_file(&H, name, text, path, sizeof(path)), 0);
    const char *args[] = {"-c", path, NULL};
    ck_assert_msg(harness_start(&H, args) == 0, "prestod did not start");
}

static void stop(void)
{
    ck_assert_msg(harness_stop(&H) == 0, "prestod did not exit 0 on SIGTERM");
}

/* A directory of this test's own under H.dir. */
static void test_dir(const char *what, char *buf, size_t len)
{
    char name[64];
    snprintf(name, sizeof(name), "%s-%d", what, (int)getpid());
    ck_assert_int_eq(harness_path(&H, name, buf, len), 0);
}

/* ---- stats ---- */

static char *stats_json(void)
{
    char *json = NULL;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    return json;
}

/* A number of the stats: parent.key, or, with ds_tier, the dataset's
 * tier object ("memory" or "disk"; "" for the dataset itself). */
static double stat_of(const char *json, const char *parent, const char *key)
{
    double v = -1;
    int rc = harness_json_number(json, parent, key, &v);
    ck_assert_msg(rc == 0, "no %s.%s in the stats: %s", parent ? parent : "", key, json);
    return v;
}

static double gstat(const char *parent, const char *key)
{
    char *json = stats_json();
    double v = stat_of(json, parent, key);
    free(json);
    return v;
}

static double dstat(const char *tier, const char *key)
{
    char *json = stats_json();
    const char *ds = strstr(json, "\"datasets\"");
    ck_assert_ptr_nonnull(ds);
    double v = stat_of(ds, *tier ? tier : NULL, key);
    free(json);
    return v;
}

static double decode_calls(void)
{
    char *json = stats_json();
    const char *steps = strstr(json, "\"steps\"");
    ck_assert_ptr_nonnull(steps);
    double v = stat_of(steps, "decode", "calls");
    free(json);
    return v;
}

static int stats_have(const char *needle)
{
    char *json = stats_json();
    int found = strstr(json, needle) != NULL;
    free(json);
    return found;
}

static int log_has(const char *needle)
{
    char buf[1 << 16];
    FILE *f = fopen(H.log, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* ---- epochs ---- */

/* Pulls the reference epoch (no shuffle: sample ids in order) and returns
 * the hash of each sample's pixels. */
static void pull(const struct dset *d, uint64_t *hashes, int64_t *labels)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    presto_stream_opts_t o;
    size_t sb = sample_bytes(d);
    uint64_t got = 0;
    int rc;

    presto_stream_opts_init(&o);
    o.dataset = d->name;
    o.batch_size = 40; /* one chunk of reads (PIPELINE_CHUNK_SAMPLES is 256) */
    o.seed = REF_SEED;
    o.epoch = REF_EPOCH;
    o.shuffle = 0;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    rc = presto_stream_open(p, &o, &s);
    ck_assert_msg(rc == 0, "stream_open: %s", presto_errmsg(p));
    while ((rc = presto_next(s, &b)) > 0) {
        ck_assert_uint_eq(b.size, b.n * sb);
        ck_assert_uint_le(got + b.n, d->count);
        for (uint32_t i = 0; i < b.n; i++) {
            hashes[got + i] = harness_fnv(HARNESS_FNV_INIT, (const uint8_t *)b.data + i * sb, sb);
            labels[got + i] = b.labels[i];
        }
        got += b.n;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "presto_next: %s", presto_stream_errmsg(s));
    ck_assert_uint_eq(got, d->count);
    presto_stream_close(s);
    presto_close(p);
}

/* Pulls the reference epoch and compares every sample with the fresh
 * computation. */
static void pull_and_check(const struct dset *d)
{
    static uint64_t hashes[MAX_SAMPLES];
    static int64_t labels[MAX_SAMPLES];
    pull(d, hashes, labels);
    for (unsigned i = 0; i < d->count; i++) {
        ck_assert_msg(hashes[i] == d->ref[i], "%s: sample %u differs from a fresh computation",
                      d->name, i);
        ck_assert_int_eq(labels[i], d->labels[i]);
    }
}

/* Warms through the C API, checking the progress reports. */
struct warm_seen {
    unsigned calls, finals;
    presto_progress_t last;
};

static void warm_cb(const presto_progress_t *pr, int final, void *arg)
{
    struct warm_seen *w = arg;
    ck_assert_uint_ge(pr->done, w->last.done);
    ck_assert_uint_le(pr->done, pr->total);
    w->calls++;
    w->finals += final;
    w->last = *pr;
}

static void warm(const struct dset *d, struct warm_seen *w)
{
    presto_t *p;
    memset(w, 0, sizeof(*w));
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_warm(p, d->name, warm_cb, w);
    ck_assert_msg(rc == 0, "presto_warm: %d %s", rc, presto_errmsg(p));
    ck_assert_uint_eq(w->finals, 1);
    ck_assert_uint_eq(w->last.done, d->count);
    ck_assert_uint_eq(w->last.total, d->count);
    ck_assert_uint_eq(w->last.failed, 0);
    presto_close(p);
}

/* ---- segment files ---- */

#define REC_HEADER 88u

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The segment files of a store, sorted (glob sorts, and the numbers have
 * the same width). */
static void segments(const char *dir, glob_t *g)
{
    char pat[HARNESS_PATH_MAX + 16];
    snprintf(pat, sizeof(pat), "%s/seg-*.dat", dir);
    ck_assert_int_eq(glob(pat, 0, NULL, g), 0);
    ck_assert_uint_ge(g->gl_pathc, 2);
}

/* Offsets of the records of a segment (at most max); returns how many. */
static unsigned records(const char *path, uint64_t *offs, uint32_t *stored, unsigned max)
{
    uint8_t hdr[REC_HEADER];
    unsigned n = 0;
    uint64_t off = 0;
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    while (n < max && pread(fd, hdr, sizeof(hdr), (off_t)off) == (ssize_t)sizeof(hdr)) {
        offs[n] = off;
        stored[n] = rd32(hdr + 60);
        off += (REC_HEADER + stored[n] + 7) & ~7ull;
        n++;
    }
    close(fd);
    return n;
}

/* Flips a byte in the middle of the payload of record k of a segment. */
static void corrupt_record(const char *path, unsigned k)
{
    uint64_t offs[64];
    uint32_t stored[64];
    ck_assert_uint_gt(records(path, offs, stored, 64), k);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b;
    off_t at = (off_t)(offs[k] + REC_HEADER + stored[k] / 2);
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* Cuts a segment in the middle of its last record's payload. */
static void tear_tail(const char *path)
{
    uint64_t offs[64];
    uint32_t stored[64];
    unsigned n = records(path, offs, stored, 64);
    ck_assert_uint_ge(n, 1);
    ck_assert_int_eq(truncate(path, (off_t)(offs[n - 1] + REC_HEADER + stored[n - 1] / 2)), 0);
}

/* ---- disk tier round trip ---- */

/* _i: backend (i / 2), encoding raw or zstd (i % 2). */
START_TEST(test_disk_roundtrip)
{
    char cache[HARNESS_PATH_MAX];
    const char *enc = _i % 2 ? "zstd" : "raw";
    struct dconf c = {&small, "64MiB", cache, "64MiB", backends[_i / 2], enc};
    test_dir("roundtrip", cache, sizeof(cache));

    start(&c);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "puts"), small.count);
    ck_assert_uint_eq(dstat("disk", "entries"), small.count);
    ck_assert_uint_eq(dstat("", "computed"), small.count);
    double ratio = dstat("disk", "compression_ratio");
    if (_i % 2)
        ck_assert_msg(ratio > 1.0, "zstd: compression ratio %g", ratio);
    else
        ck_assert_msg(ratio == 1.0, "raw: compression ratio %g", ratio);
    ck_assert(stats_have(_i % 2 ? "\"encoding\":\"zstd:3\"" : "\"encoding\":\"raw\""));
    stop();

    /* A new daemon serves every sample from the disk tier: no source file
     * read, no decode, and the same bytes. */
    start(&c);
    ck_assert_uint_eq(gstat("disk", "recovered"), small.count);
    ck_assert_uint_eq(gstat("disk", "dropped"), 0);
    ck_assert_uint_eq(dstat("disk", "entries"), small.count);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count);
    ck_assert_uint_eq(dstat("disk", "misses"), 0);
    ck_assert_uint_eq(dstat("", "computed"), 0);
    ck_assert_uint_eq(dstat("", "source_reads"), 0);
    ck_assert_uint_eq(decode_calls(), 0);
    ck_assert_uint_ge(dstat("disk", "bytes_read"), small.count * REC_HEADER);
    ck_assert(stats_have(_i / 2 ? "\"backend\":\"pread\"" : "\"backend\":\""));
    if (_i / 2 == 1)
        ck_assert_uint_eq(gstat("io", "max_in_flight"), 1);
    else if (stats_have("\"backend\":\"io_uring\""))
        ck_assert_msg(gstat("io", "max_in_flight") > 1, "io_uring reads were not batched");
    /* Served again, from memory now. */
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("memory", "hits"), small.count);
    stop();
}
END_TEST

/* A batch of O_DIRECT records that finds io.readahead in use waits for a
 * batch before it to give room back rather than being left to a worker that
 * would read it only as it takes it: with room for one arena (a whole MiB
 * for a batch of 40 records of 12 KiB) the second waits, and every batch is
 * read ahead, with the same bytes. */
START_TEST(test_disk_readahead_budget)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&small, "64MiB", cache, "64MiB", "auto", "raw", NULL, 1, "1536KiB"};
    test_dir("rabudget", cache, sizeof(cache));
    start(&c);
    pull_and_check(&small);
    stop();
    start(&c);
    if (gstat("readahead", "on") != 1 || gstat("disk", "direct_io") != 1) {
        printf("readahead_budget: no read-ahead of O_DIRECT records here (no io_uring, or "
               "the file system refuses O_DIRECT)\n");
        stop();
        return;
    }
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 0);
    double batches = gstat("readahead", "batches"), waited = gstat("readahead", "waited");
    double over = gstat("readahead", "over_budget");
    printf("readahead_budget: %g batches read ahead, %g waits, %g over budget\n", batches,
           waited, over);
    ck_assert_msg(batches == 3 && over == 0 && waited >= 1,
                  "%g batches read ahead, %g over its budget, %g waits", batches, over, waited);
    stop();
}
END_TEST

/* Descriptors of pid open with O_DIRECT (/proc/PID/fdinfo flags). */
static unsigned direct_fds(pid_t pid)
{
    char dir[64], path[320], line[128];
    unsigned n = 0;
    snprintf(dir, sizeof(dir), "/proc/%d/fdinfo", (int)pid);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof(line), f)) {
            unsigned long flags;
            if (sscanf(line, "flags: %lo", &flags) == 1 && (flags & O_DIRECT))
                n++;
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    return n;
}

/* cache.direct_io: records (12 KiB, at unaligned offsets of 64 KiB
 * segments, the last one ending mid-block at the end of its file) are read
 * with O_DIRECT in whole aligned blocks, and are the same bytes. _i:
 * backend. */
START_TEST(test_disk_direct)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&small, "64MiB", cache, "64MiB", backends[_i], "raw", NULL, 1};
    test_dir("direct", cache, sizeof(cache));
    start(&c);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "puts"), small.count);
    stop();
    start(&c);
    if (gstat("disk", "direct_io") != 1) { /* the file system refuses it */
        ck_assert(harness_log_contains(&H, "refuses O_DIRECT"));
        printf("direct_io: refused by the file system of %s; read buffered\n", cache);
    } else { /* one O_DIRECT descriptor per segment */
        ck_assert_uint_eq(direct_fds(H.pid), (unsigned)gstat("disk", "segments"));
    }
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count);
    ck_assert_uint_eq(dstat("disk", "misses"), 0);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 0);
    ck_assert_uint_eq(dstat("", "computed"), 0);
    ck_assert_uint_eq(decode_calls(), 0);
    stop();
}
END_TEST

/* cache.direct_io: auto: O_DIRECT with a budget larger than any machine's
 * memory (where the file system takes it), buffered with one that fits. */
START_TEST(test_disk_direct_auto)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&small, "64MiB", cache, "65536TiB", NULL, "raw", NULL, 2};
    test_dir("direct-auto", cache, sizeof(cache));
    start(&c);
    pull_and_check(&small);
    if (gstat("disk", "direct_io") != 1) {
        ck_assert(harness_log_contains(&H, "refuses O_DIRECT"));
        printf("direct_io auto: refused by the file system of %s; read buffered\n", cache);
    } else {
        ck_assert(harness_log_contains(&H, "is larger than the memory available"));
    }
    stop();
    c.disk = "64MiB";
    start(&c);
    ck_assert_uint_eq(gstat("disk", "direct_io"), 0);
    ck_assert(harness_log_contains(&H, "fits in the memory available"));
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 0);
    stop();
}
END_TEST

/* ---- recovery: corrupt record, torn tail, corruption under a live daemon ---- */

START_TEST(test_disk_recovery)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&small, "64MiB", cache, "64MiB", backends[_i], "raw"};
    struct warm_seen w;
    glob_t g;
    test_dir("recovery", cache, sizeof(cache));

    start(&c);
    warm(&small, &w);
    ck_assert_uint_eq(w.last.computed, small.count);
    ck_assert_uint_gt(w.last.bytes, 0);
    warm(&small, &w); /* nothing left to do */
    ck_assert_uint_eq(w.last.computed, 0);
    stop();

    segments(cache, &g);
    corrupt_record(g.gl_pathv[0], 1);
    tear_tail(g.gl_pathv[g.gl_pathc - 1]);

    /* No memory tier to speak of, so that every epoch reads the disk. */
    c.memory = "1KiB";
    start(&c);
    ck_assert_uint_eq(gstat("disk", "recovered"), small.count - 2);
    ck_assert_uint_ge(gstat("disk", "dropped"), 1);
    ck_assert_uint_gt(gstat("disk", "torn_bytes"), 0);
    ck_assert_uint_eq(dstat("disk", "entries"), small.count - 2);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count - 2);
    ck_assert_uint_eq(dstat("", "computed"), 2);
    ck_assert_uint_eq(dstat("disk", "entries"), small.count);

    /* A record going bad under the running daemon: checked at read,
     * recomputed, stored again. */
    corrupt_record(g.gl_pathv[0], 0);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 1);
    ck_assert_uint_eq(gstat("disk", "decode_errors"), 1);
    ck_assert_uint_eq(dstat("", "computed"), 3);
    pull_and_check(&small); /* the new record is good */
    ck_assert_uint_eq(dstat("disk", "bad_records"), 1);
    ck_assert_uint_eq(dstat("disk", "hits"), 3 * small.count - 3);
    ck_assert(log_has("is unusable (corrupt); recomputing"));
    stop();
    globfree(&g);
}
END_TEST

/* A raw record whose only online step is random_flip (mirrored: p 1, or
 * copied: p 0) or that has none (copied) is checked in the same pass that
 * writes it into its slot: a record corrupted under the running daemon is
 * still found, counted and logged, and its sample served recomputed, with
 * the bytes of a fresh computation, never the bad record's. */
START_TEST(test_disk_corrupt_in_slot)
{
    static const char *const flips[3] = {"1", "0", "none"};
    static struct dset d;
    char cache[HARNESS_PATH_MAX];
    struct warm_seen w;
    glob_t g;
    d = small;
    struct dconf c = {&d, "512MiB", NULL, "0", "auto", "raw"};
    c.flip = flips[_i];
    start(&c); /* this pipeline's reference, with no disk tier */
    pull(&d, d.ref, d.labels);
    stop();

    test_dir("inslot", cache, sizeof(cache));
    c.cache = cache;
    c.disk = "64MiB";
    c.memory = "1KiB"; /* every epoch reads the disk */
    start(&c);
    warm(&d, &w);
    ck_assert_uint_eq(w.last.computed, d.count);
    segments(cache, &g);
    corrupt_record(g.gl_pathv[0], 0);
    corrupt_record(g.gl_pathv[1], 2);
    pull_and_check(&d);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 2);
    ck_assert_uint_eq(gstat("disk", "decode_errors"), 2);
    ck_assert_uint_eq(dstat("", "computed"), d.count + 2);
    ck_assert(log_has("is unusable (corrupt); recomputing"));
    pull_and_check(&d); /* the new records are good */
    ck_assert_uint_eq(dstat("disk", "bad_records"), 2);
    ck_assert_uint_eq(dstat("disk", "hits"), 2 * d.count - 2);
    stop();
    globfree(&g);
}
END_TEST

/* ---- invalidation ---- */

/* A changed source file makes exactly its record stale; changed offline
 * steps make every record stale, and compaction reclaims their space. */
START_TEST(test_disk_invalidation)
{
    char cache[HARNESS_PATH_MAX], pat[HARNESS_PATH_MAX + 32];
    struct dconf c = {&small, "64MiB", cache, "64MiB", "auto", "raw"};
    glob_t g;
    test_dir("stale", cache, sizeof(cache));

    start(&c);
    pull_and_check(&small);
    stop();

    /* One source file touched (same bytes, a new mtime). */
    snprintf(pat, sizeof(pat), "%s/class_01/*.jpg", small.root);
    ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &times[1]);
    times[1].tv_sec += 60;
    ck_assert_int_eq(utimensat(AT_FDCWD, g.gl_pathv[0], times, 0), 0);
    globfree(&g);

    start(&c);
    ck_assert_uint_eq(gstat("disk", "recovered"), small.count);
    ck_assert_uint_eq(dstat("disk", "entries"), small.count - 1);
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("", "computed"), 1);
    ck_assert_uint_eq(dstat("disk", "hits"), small.count - 1);
    stop();

    /* Other offline steps: nothing on disk is current any more, and the
     * segments, all dead, are reclaimed at start-up. */
    struct dset other = small;
    other.resize = small.resize + 8;
    c.d = &other;
    start(&c);
    ck_assert_uint_eq(dstat("disk", "entries"), 0);
    ck_assert_uint_eq(gstat("disk", "entries"), 0);
    ck_assert_uint_gt(gstat("disk", "compactions"), 0);
    ck_assert_uint_gt(gstat("disk", "compact_freed"), (double)small.count * 12288 / 2);
    stop();
}
END_TEST

/* ---- the disk budget ---- */

/* Puts over cache.disk are refused (the disk tier stays healthy), ask for a
 * compaction, and every sample is still served right. */
START_TEST(test_disk_budget)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&small, "1KiB", cache, "256KiB", backends[_i], "raw"};
    test_dir("budget", cache, sizeof(cache));
    start(&c);
    pull_and_check(&small);
    pull_and_check(&small);
    ck_assert_uint_gt(gstat("disk", "put_refused_budget"), 0);
    ck_assert_uint_le(gstat("disk", "bytes"), 256 * 1024);
    ck_assert_uint_eq(gstat("disk", "degraded"), 0);
    double on_disk = dstat("disk", "entries");
    ck_assert_msg(on_disk > 0 && on_disk < small.count, "%g samples on disk", on_disk);
    ck_assert_uint_eq(dstat("disk", "hits"), on_disk);
    double runs = -1;
    ck_assert_int_eq(harness_wait_stat(&H, "disk", "compactions_on_demand", 1, 3000, &runs), 0);
    stop();
}
END_TEST

/* ---- kill -9 in the middle of `prestoctl warm` ---- */

static pid_t spawn_warm(const char *dataset, const char *out)
{
    char ctl[HARNESS_PATH_MAX * 2];
    snprintf(ctl, sizeof(ctl), "%s/prestoctl", harness_env("PRESTO_BUILD", "build"));
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execl(ctl, ctl, "-s", H.sock, "warm", dataset, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

START_TEST(test_kill_during_warm)
{
    char cache[HARNESS_PATH_MAX], out[HARNESS_PATH_MAX];
    struct dconf c = {&medium, "64MiB", cache, "256MiB", backends[_i], _i ? "zstd" : "raw",
                      "1MiB"};
    test_dir("killed", cache, sizeof(cache));
    test_dir("warm-out", out, sizeof(out));

    start(&c);
    pid_t ctl = spawn_warm(medium.name, out);
    double puts = 0;
    for (int i = 0; i < 3000 && puts < medium.count / 3; i++) {
        sleep_ms(5);
        puts = dstat("disk", "puts");
    }
    ck_assert_msg(puts >= medium.count / 3 && puts < medium.count,
                  "warm did not get to a third (%g puts)", puts);
    ck_assert_int_eq(kill(H.pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(H.pid, &status, 0), H.pid);
    H.pid = 0;
    ck_assert_int_eq(waitpid(ctl, &status, 0), ctl);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1,
                  "prestoctl warm ended with status 0x%x when prestod died", status);

    /* Restarted: what survived is served from disk, the rest recomputed,
     * every sample the same as a fresh computation. */
    c.memory = "1KiB";
    start(&c);
    double recovered = gstat("disk", "recovered");
    ck_assert_msg(recovered > 0 && recovered <= medium.count, "%g records recovered",
                  recovered);
    printf("test_kill_during_warm:%d: killed at %g puts; %g records recovered, %g dropped, "
           "%g bytes torn\n", _i, puts, recovered, gstat("disk", "dropped"),
           gstat("disk", "torn_bytes"));
    pull_and_check(&medium);
    ck_assert_uint_eq(dstat("disk", "hits"), recovered);
    ck_assert_uint_eq(dstat("", "computed"), medium.count - recovered);
    ck_assert_uint_eq(dstat("disk", "bad_records"), 0);
    stop();

    /* The progress went out as plain lines (not a terminal). */
    FILE *f = fopen(out, "r");
    char line[256] = "";
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    ck_assert_msg(strncmp(line, "warm medium: ", 13) == 0, "prestoctl warm printed '%s'", line);
}
END_TEST

/* ---- a full disk ---- */

START_TEST(test_disk_full)
{
    char cache[HARNESS_PATH_MAX];
    struct dconf c = {&medium, "64MiB", cache, "1GiB", backends[_i], "raw", "4MiB"};
    struct rlimit old;
    int mounted;
    test_dir("full", cache, sizeof(cache));
    ck_assert_int_eq(mkdir(cache, 0755), 0);

    /* A 2 MiB tmpfs where we may mount, else a 2 MiB file-size limit. Mode
     * 0755: tmpfs's default (1777) is a cache.dir anyone could write to,
     * which prestod refuses. */
    mounted = mount("tmpfs", cache, "tmpfs", 0, "size=2m,mode=0755") == 0;
    if (!mounted) {
        struct rlimit rl = {2u << 20, 2u << 20};
        printf("test_disk_full: no tmpfs (%s): a file-size limit instead\n", strerror(errno));
        ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
        rl.rlim_max = old.rlim_max;
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    start(&c);
    if (!mounted)
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    pull_and_check(&medium);
    ck_assert_uint_eq(gstat("disk", "degraded"), 1);
    ck_assert(stats_have(mounted ? "\"degraded_reason\":\"No space left on device\""
                                 : "\"degraded_reason\":\"File too large\""));
    ck_assert(log_has("caching in memory only"));
    ck_assert_uint_gt(dstat("disk", "puts"), 0);
    ck_assert_uint_lt(dstat("disk", "puts"), medium.count);
    /* Memory-only from now on, and still serving. */
    pull_and_check(&medium);
    ck_assert_uint_eq(dstat("memory", "hits"), medium.count);
    ck_assert_msg(harness_alive(&H), "prestod died");
    stop();
    if (mounted)
        ck_assert_int_eq(umount2(cache, MNT_DETACH), 0);
}
END_TEST

/* A cache directory that cannot be made: no disk tier, said in the log and
 * the stats, and the daemon serves from memory. */
START_TEST(test_disk_unusable)
{
    char file[HARNESS_PATH_MAX], cache[HARNESS_PATH_MAX + 8], name[64];
    snprintf(name, sizeof(name), "not-a-dir-%d", (int)getpid());
    ck_assert_int_eq(harness_write_file(&H, name, "x", file, sizeof(file)), 0);
    snprintf(cache, sizeof(cache), "%s/cache", file);
    struct dconf c = {&small, "64MiB", cache, "64MiB", "auto", "raw"};
    start(&c);
    pull_and_check(&small);
    ck_assert_uint_eq(gstat("disk", "enabled"), 0);
    ck_assert(stats_have("Not a directory"));
    ck_assert(log_has("no disk tier: caching in memory only"));
    pull_and_check(&small);
    ck_assert_uint_eq(dstat("memory", "hits"), small.count);
    stop();
}
END_TEST

/* ---- the memory budget ---- */

/* VmHWM of a process, bytes. */
static __attribute__((unused)) uint64_t peak_rss(pid_t pid)
{
    char path[64], line[256];
    uint64_t kb = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %llu kB", (unsigned long long *)&kb) == 1)
            break;
    fclose(f);
    return kb << 10;
}

/* Two epochs at once on two streams, batches taken in turn. */
static void pull_two(const struct dset *d, uint64_t e1, uint64_t e2)
{
    presto_t *p;
    presto_stream_t *s[2];
    presto_batch_t b;
    presto_stream_opts_t o;
    uint64_t got[2] = {0, 0};
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    for (int k = 0; k < 2; k++) {
        presto_stream_opts_init(&o);
        o.dataset = d->name;
        o.batch_size = 16;
        o.epoch = k ? e2 : e1;
        ck_assert_int_eq(presto_stream_open(p, &o, &s[k]), 0);
    }
    for (int live = 2; live > 0;) {
        live = 0;
        for (int k = 0; k < 2; k++) {
            if (got[k] == d->count)
                continue;
            ck_assert_int_eq(presto_next(s[k], &b), 1);
            got[k] += b.n;
            presto_release(s[k], &b);
            live++;
        }
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(presto_next(s[k], &b), 0);
        presto_stream_close(s[k]);
    }
    presto_close(p);
}

/* Budget bytes of one entry of the memory tier (header, 64-byte aligned). */
static double entry_need(const struct dset *d)
{
    return (double)((40 + sample_bytes(d) + 63) / 64 * 64);
}

START_TEST(test_memory_budget)
{
    /* A quarter of the dataset (700 samples of 147 KiB: 25 MiB of 100). */
    double dataset_bytes = (double)big.count * (double)sample_bytes(&big);
    const uint64_t budget = ((uint64_t)dataset_bytes / 4) >> 20 << 20;
    char mem[32];
    snprintf(mem, sizeof(mem), "%lluMiB", (unsigned long long)(budget >> 20));
    struct dconf c = {&big, mem, NULL, "0", "auto", "raw"};
    double want = ((double)budget - 8.0 * big.count) / (big.count * entry_need(&big)) * 0.98;

    start(&c);
    pull_two(&big, 0, 1);
    double entries = gstat("cache", "entries");
    double fraction = dstat("memory", "admit_fraction");
    ck_assert_msg(fraction > want - 0.001 && fraction < want + 0.001,
                  "admit fraction %g, want %g", fraction, want);
    ck_assert_msg(entries > 0.85 * big.count * fraction &&
                      entries * entry_need(&big) <= (double)budget,
                  "%g entries admitted of %u at fraction %g", entries, big.count, fraction);

    /* Epoch after epoch, exactly the admitted subset hits. */
    double hits0 = dstat("memory", "hits"), misses0 = dstat("memory", "misses");
    pull_two(&big, 2, 3);
    double hits = dstat("memory", "hits") - hits0, misses = dstat("memory", "misses") - misses0;
    ck_assert_uint_eq(hits, 2 * entries);
    ck_assert_uint_eq(hits + misses, 2 * big.count);
    double rate = hits / (hits + misses);
    ck_assert_msg(rate > 0.85 * budget / dataset_bytes && rate <= budget / dataset_bytes,
                  "hit rate %g with a budget of %g of the dataset", rate,
                  budget / dataset_bytes);
    ck_assert_uint_eq(gstat("cache", "entries"), entries);
    ck_assert_uint_eq(gstat("cache", "evictions"), 0);
    ck_assert_uint_le(gstat("cache", "memory_bytes"), budget);
    ck_assert_uint_le(gstat("memory", "cache_bytes"), budget);
    ck_assert_uint_gt(gstat("memory", "rss"), 0);
    ck_assert_uint_gt(gstat("memory", "worker_buffers"), 0);

    /* The process itself stays within budget + 64 MiB (its peak). Sanitizer
     * runtimes add memory of their own: not checked there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("test_memory_budget: RSS not checked under a sanitizer\n");
#else
    uint64_t peak = peak_rss(H.pid);
    printf("test_memory_budget: %g of %u samples admitted (fraction %.4f), hit rate %.4f, "
           "peak RSS %llu MiB with a budget of %llu MiB\n", entries, big.count, fraction,
           rate, (unsigned long long)(peak >> 20), (unsigned long long)(budget >> 20));
    ck_assert_msg(peak <= budget + (64ull << 20), "peak RSS %llu MiB, budget %llu MiB",
                  (unsigned long long)(peak >> 20), (unsigned long long)(budget >> 20));
#endif
    stop();
}
END_TEST

/* ---- set-up ---- */

static void print_logs(void)
{
    glob_t g;
    char pat[HARNESS_PATH_MAX + 16];
    snprintf(pat, sizeof(pat), "%s/prestod-*.log", H.dir);
    if (glob(pat, 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char buf[4096];
        size_t n;
        FILE *f = fopen(g.gl_pathv[i], "r");
        if (!f)
            continue;
        fprintf(stderr, "---- %s ----\n", g.gl_pathv[i]);
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
            fwrite(buf, 1, n, stderr);
        fclose(f);
    }
    globfree(&g);
}

/* The reference epochs, from a daemon with no disk tier. An unchecked
 * fixture runs in this process, before the tests fork: they all have them. */
static void reference(struct dset *d)
{
    struct dconf c = {d, "512MiB", NULL, "0", "auto", "raw"};
    start(&c);
    pull(d, d->ref, d->labels);
    stop();
}

static void references(void)
{
    reference(&small);
    reference(&medium);
}

/* Each test starts daemons of its own, in a child (CK_FORK): their logs
 * are named by the child's pid. */
static void name_logs(void)
{
    H.starts = (unsigned)getpid() * 100;
}

/* A tmpfs a failed test left mounted in the directory. */
static void unmount_left(void)
{
    glob_t g;
    char pat[HARNESS_PATH_MAX + 16];
    snprintf(pat, sizeof(pat), "%s/full-*", H.dir);
    if (glob(pat, 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++)
        umount2(g.gl_pathv[i], MNT_DETACH);
    globfree(&g);
}

static Suite *cache_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("disk");
    tcase_add_unchecked_fixture(tc, references, NULL);
    tcase_add_checked_fixture(tc, name_logs, NULL);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    /* Under valgrind one backend is enough (and the tests are slow). */
    int nb = under_valgrind ? 1 : 2;
    tcase_add_loop_test(tc, test_disk_roundtrip, 0, 2 * nb);
    tcase_add_loop_test(tc, test_disk_direct, 0, nb);
    tcase_add_test(tc, test_disk_direct_auto);
    tcase_add_test(tc, test_disk_readahead_budget);
    tcase_add_loop_test(tc, test_disk_recovery, 0, nb);
    tcase_add_loop_test(tc, test_disk_corrupt_in_slot, 0, 3);
    tcase_add_test(tc, test_disk_invalidation);
    tcase_add_loop_test(tc, test_disk_budget, 0, nb);
    tcase_add_loop_test(tc, test_kill_during_warm, 0, nb);
    tcase_add_loop_test(tc, test_disk_full, 0, nb);
    tcase_add_test(tc, test_disk_unusable);
    suite_add_tcase(s, tc);

    /* Not under valgrind: its memory is not the daemon's, and the 700
     * decodes an epoch would take minutes. */
    if (!under_valgrind) {
        tc = tcase_create("memory");
        tcase_add_checked_fixture(tc, name_logs, NULL);
        tcase_set_timeout(tc, CASE_TIMEOUT_S);
        tcase_add_test(tc, test_memory_budget);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    under_valgrind = strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0;
    int slow = under_valgrind;
#if defined(__SANITIZE_THREAD__)
    slow = 1;
#endif
    if (slow) { /* decoding is 20-50 times slower: fewer images */
        medium.count = 96;
        big.count = 200;
    }
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    struct dset *all[] = {&small, &medium, &big};
    for (unsigned i = 0; i < 3; i++) {
        if ((i < 2 || !under_valgrind) &&
            harness_make_dataset(&H, all[i]->name, all[i]->count, 4, i + 1, 240, 320,
                                 all[i]->root, sizeof(all[i]->root)) < 0) {
            harness_cleanup(&H);
            return EXIT_FAILURE;
        }
    }

    int failed = harness_run_suite(cache_suite());
    if (failed)
        print_logs();
    unmount_left();
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/*
 * Slow storage: prestod reading its source files from a FUSE file system
 * that adds LATENCY_MS to every open and every read (tests/tools/slowfs,
 * mounted here over a data set made from the photos, unmounted at the end).
 *
 * The same data set is served twice by one daemon: `local` (the directory)
 * and `slow` (the mount). A cold epoch over `slow` must give exactly the
 * bytes and labels of the same epoch over `local` (every sample, in order),
 * and its reads must overlap: the epoch must take less than NSAMPLES x
 * LATENCY_MS / 2 (two workers reading one file at a time would need twice
 * that: an open and a read each), and the slow storage may cost it at most
 * a quarter of that over the cold epoch of `local` (the timing checks are
 * left out under valgrind and ThreadSanitizer, where decoding dominates).
 * Then the same through every way of reading files (io_uring chains,
 * staged io_uring, pread), a warm-up over the mount, and source files
 * changed after indexing (grown, touched, cut short; on the local
 * directory, but in this program, which needs FUSE to run).
 *
 * Skips (exit 77) with a message where FUSE is not available: no slowfs
 * (libfuse3-dev missing), no /dev/fuse, or the mount refused.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"

#define NSAMPLES 256
#define NCLASSES 4
#define LATENCY_MS 20
#define BATCH 64
#define NCHANGED 24 /* test_changed_files' own data set */
#define CASE_TIMEOUT_S 240

/* A ThreadSanitizer build (the daemon too) decodes some 40 times slower:
 * the epoch's time says nothing about its reads there. */
#if defined(__SANITIZE_THREAD__)
#define SLOW_BUILD 1
#else
#define SLOW_BUILD 0
#endif

static struct harness H;
static char data_root[HARNESS_PATH_MAX], mnt[HARNESS_PATH_MAX];
static int mounted;

/* ---- the mount ---- */

static int slowfs_mount(char *why, size_t whylen)
{
    if (harness_slowfs_mount(&H, data_root, LATENCY_MS, mnt, sizeof(mnt), why, whylen) < 0)
        return -1;
    mounted = 1;
    return 0;
}

static void slowfs_unmount(void)
{
    if (mounted)
        harness_slowfs_unmount(mnt);
    mounted = 0;
}

/* ---- epochs ---- */

struct epoch {
    struct harness_epoch e; /* counts and the FNV-1a of every batch (prestoctl --checksum) */
    double seconds;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pulls epoch 0 (seed 1, shuffled, or in order) of a dataset, timed. */
static void pull_order(const char *dataset, int shuffle, struct epoch *e)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = dataset;
    o.batch_size = BATCH;
    o.seed = 1;
    o.shuffle = shuffle;
    double t0 = now_s();
    int rc = harness_pull_epoch(&H, &o, &e->e);
    e->seconds = now_s() - t0;
    ck_assert_msg(rc == 0, "epoch of %s failed: %d", dataset, rc);
}

static void pull(const char *dataset, struct epoch *e)
{
    pull_order(dataset, 1, e);
}

/* Every sample of got is the one of want (labels and bytes, in order), and
 * nothing was skipped. */
static void same_epoch(const struct epoch *got, const struct epoch *want)
{
    ck_assert_uint_eq(got->e.samples, NSAMPLES);
    ck_assert_uint_eq(want->e.samples, NSAMPLES);
    ck_assert_uint_eq(got->e.skipped, 0);
    ck_assert_msg(got->e.fnv == want->e.fnv,
                  "the epoch over the mount differs from the local directory's");
}

static double stat_of(const char *parent, const char *key)
{
    double v = -1;
    ck_assert_msg(harness_stat(&H, parent, key, &v) == 0, "no %s.%s in stats", parent, key);
    return v;
}

/* A daemon serving the data set as `local` and the mount as `slow`, two
 * workers, reading files as PRESTO_IO says (NULL: the default). */
static void start(const char *presto_io)
{
    char local[HARNESS_PATH_MAX + 16], slow[HARNESS_PATH_MAX + 16];
    snprintf(local, sizeof(local), "local=%s", data_root);
    snprintf(slow, sizeof(slow), "slow=%s", mnt);
    const char *args[] = {"-d", local, "-d", slow, "-w", "2", NULL};
    if (presto_io)
        setenv("PRESTO_IO", presto_io, 1);
    else
        unsetenv("PRESTO_IO");
    int rc = harness_start(&H, args);
    unsetenv("PRESTO_IO");
    ck_assert_msg(rc == 0, "prestod did not start");
}

static void stop(void)
{
    ck_assert_int_eq(harness_stop(&H), 0);
}

/* ---- tests ---- */

/* The test: a cold epoch over the mount, every sample correct, the
 * reads overlapped. */
START_TEST(test_cold_epoch_overlaps)
{
    struct epoch slow, local;
    start(NULL);
    pull("slow", &slow);
    /* What the stats say about the source reads so far (all over the mount). */
    double files = stat_of("source", "files"), p50 = stat_of("latency_us", "p50");
    double in_flight = stat_of("io", "max_in_flight"), chained = stat_of("source", "chained");
    double bytes = stat_of("source", "bytes"), busy = stat_of("source", "busy_s");
    double ahead = stat_of("readahead", "batches");
    double ahead_flight = stat_of("readahead", "max_in_flight");
    pull("local", &local);
    stop();
    same_epoch(&slow, &local);

    double bound = NSAMPLES * LATENCY_MS / 1000.0 / 2; /* samples x latency / 2 */
    printf("cold epoch of %d samples: local %.2f s, over slowfs (%d ms per open and read) "
           "%.2f s; samples x latency / 2 = %.2f s; %g files read, latency p50 %g us, %g in "
           "flight at most, %g chained, %.1f MB/s while busy\n",
           NSAMPLES, local.seconds, LATENCY_MS, slow.seconds, bound, files, p50, in_flight,
           chained, busy > 0 ? bytes / busy / 1e6 : 0.0);
    ck_assert_uint_eq((uint64_t)files, NSAMPLES);
    /* An open and a read each, both LATENCY_MS: the latency was real. */
    ck_assert_msg(p50 >= 2 * LATENCY_MS * 1000 * 0.9, "source read p50 %g us", p50);
    ck_assert_msg(in_flight >= 16, "at most %g reads in flight", in_flight);
    /* Batches were read before a worker took them, and the reads of more
     * than one batch were in flight together (readahead.h). */
    printf("read ahead: %g batches, %g reads in flight at most\n", ahead, ahead_flight);
    ck_assert_msg(ahead >= NSAMPLES / BATCH, "%g batches read ahead", ahead);
    ck_assert_msg(ahead_flight > BATCH, "read ahead: at most %g reads in flight", ahead_flight);
    if (strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0 || SLOW_BUILD) {
        printf("valgrind or ThreadSanitizer: timing checks left out\n");
        return;
    }
    ck_assert_msg(slow.seconds < bound, "%.2f s: reads did not overlap (bound %.2f s)",
                  slow.seconds, bound);
    ck_assert_msg(slow.seconds - local.seconds < bound / 4,
                  "%.2f s over slowfs against %.2f s locally: more than %.2f s lost to latency",
                  slow.seconds, local.seconds, bound / 4);
}
END_TEST

/* Every way of reading files gives the same epoch over the mount. _i:
 * 0 io_uring chains (the default), 1 staged io_uring, 2 pread. */
START_TEST(test_every_backend)
{
    static const char *const io[] = {NULL, "nochain", "pread"};
    static const char *const counter[] = {"chained", "staged", "sync"};
    struct epoch slow, local;
    start(io[_i]);
    pull("local", &local);
    pull("slow", &slow);
    double n = stat_of("source", counter[_i]), errors = stat_of("source", "errors");
    double in_flight = stat_of("io", "max_in_flight");
    /* Every chunk read ahead was run and gave its bytes back (staged:
     * the loop's ring defers files, the workers read them). */
    double ahead_left = stat_of("readahead", "bytes");
    stop();
    ck_assert_uint_eq((uint64_t)ahead_left, 0);
    same_epoch(&slow, &local);
    printf("%s: over slowfs %.2f s, locally %.2f s; %g reads in flight at most\n",
           counter[_i], slow.seconds, local.seconds, in_flight);
    ck_assert_uint_eq((uint64_t)n, 2 * NSAMPLES);
    ck_assert_uint_eq((uint64_t)errors, 0);
    if (_i == 2)
        ck_assert_uint_eq((uint64_t)in_flight, 1);
    else
        ck_assert_msg(in_flight > 1, "io_uring reads were not overlapped");
}
END_TEST

/* A warm-up over the mount computes every sample once (reading ahead
 * chunk after chunk); the epoch after it comes from memory, and is the
 * local directory's. */
START_TEST(test_warm_over_mount)
{
    struct epoch slow, local;
    presto_t *p;
    start(NULL);
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    double t0 = now_s();
    int rc = presto_warm(p, "slow", NULL, NULL);
    ck_assert_msg(rc == 0, "warm: %s", presto_errmsg(p));
    double warm_s = now_s() - t0;
    presto_close(p);
    double files = stat_of("source", "files");
    pull("slow", &slow);
    double hits = stat_of("cache", "hits");
    pull("local", &local);
    stop();
    printf("warm-up over slowfs: %.2f s\n", warm_s);
    ck_assert_uint_eq((uint64_t)files, NSAMPLES);
    ck_assert_uint_eq((uint64_t)hits, NSAMPLES);
    same_epoch(&slow, &local);
}
END_TEST

/* A trainer that goes away while its batches are being read ahead (reads
 * in the kernel, over the slow mount): the daemon takes the reads back as
 * they complete, frees the stream and the read-ahead buffers, and the next
 * trainer's epoch is right. _i: 0 closes its connection, 1 closes the
 * stream and keeps the connection. */
START_TEST(test_vanish_while_reading_ahead)
{
    struct epoch slow, local;
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b;
    presto_stream_opts_t o;
    double last = -1;
    start(NULL);
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    presto_stream_opts_init(&o);
    o.dataset = "slow";
    o.batch_size = 8; /* 32 batches: most of them still being read */
    o.seed = 2;
    ck_assert_int_eq(presto_stream_open(p, &o, &s), 0);
    ck_assert_int_eq(presto_next(s, &b), 1);
    ck_assert_msg(stat_of("readahead", "batches") >= 2, "nothing read ahead");
    presto_stream_close(s);
    if (_i == 0)
        presto_close(p);
    int rc = harness_wait_stat(&H, NULL, "streams", 0, 10000, &last);
    ck_assert_msg(rc == 0, "%g streams left", last);
    rc = harness_wait_stat(&H, "readahead", "bytes", 0, 10000, &last);
    ck_assert_msg(rc == 0, "%g bytes left in read-ahead buffers", last);
    if (_i == 1)
        presto_close(p);
    pull("slow", &slow);
    pull("local", &local);
    ck_assert_msg(harness_alive(&H), "prestod died");
    stop();
    same_epoch(&slow, &local);
}
END_TEST

/* A number from the stats of the first dataset served. */
static double dataset_stat(const char *parent, const char *key)
{
    char *json = NULL;
    double v = -1;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    const char *ds = strstr(json, "\"datasets\":");
    ck_assert_ptr_nonnull(ds);
    ck_assert_msg(harness_json_number(ds, parent, key, &v) == 0, "no datasets[0].%s.%s",
                  parent ? parent : "", key);
    free(json);
    return v;
}

/* Files changed after indexing, read from the source: one grown (bytes
 * appended after the JPEG's end), one touched (a new mtime, the same
 * bytes), one cut short. The grown one is read again whole (its request had
 * room for the indexed size only), and both are stored in the disk tier
 * under the size and mtime they were read with: after a restart, which
 * indexes them anew, they are disk hits with the same bytes; the cut one is
 * a bad sample both times. (No FUSE needed: the local directory.) */
START_TEST(test_changed_files)
{
    char root[HARNESS_PATH_MAX], cache[HARNESS_PATH_MAX], yaml[1024];
    char grown[HARNESS_PATH_MAX + 32], touched[HARNESS_PATH_MAX + 32], cut[HARNESS_PATH_MAX + 32];
    ck_assert_int_eq(harness_make_dataset(&H, "changed", NCHANGED, 2, 9, 120, 200, root,
                                          sizeof(root)), 0);
    ck_assert_int_eq(harness_path(&H, "changed-cache", cache, sizeof(cache)), 0);
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "cache:\n  memory: 1KiB\n  dir: %s\n  disk: 64MiB\n"
             "datasets:\n  - name: changed\n    root: %s\n",
             cache, root);
    ck_assert_int_eq(harness_start_config(&H, yaml, NULL), 0);

    /* Indexed: now change them (images go round-robin over the classes). */
    snprintf(grown, sizeof(grown), "%s/class_00/img_00000.jpg", root);
    snprintf(touched, sizeof(touched), "%s/class_01/img_00001.jpg", root);
    snprintf(cut, sizeof(cut), "%s/class_00/img_00002.jpg", root);
    static const uint8_t tail[5000];
    int fd = open(grown, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, tail, sizeof(tail)), (ssize_t)sizeof(tail));
    close(fd);
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &times[1]);
    times[1].tv_sec += 60;
    ck_assert_int_eq(utimensat(AT_FDCWD, touched, times, 0), 0);
    ck_assert_int_eq(truncate(cut, 100), 0);

    struct epoch first, again;
    pull_order("changed", 0, &first);
    ck_assert_uint_eq(first.e.samples, NCHANGED - 1);
    ck_assert_uint_eq(first.e.skipped, 1);
    ck_assert_uint_eq((uint64_t)dataset_stat("disk", "puts"), NCHANGED - 1);
    stop();

    ck_assert_int_eq(harness_start_config(&H, yaml, NULL), 0);
    pull_order("changed", 0, &again);
    double hits = dataset_stat("disk", "hits"), computed = dataset_stat(NULL, "computed");
    stop();
    ck_assert_uint_eq(again.e.samples, NCHANGED - 1);
    ck_assert_uint_eq(again.e.skipped, 1);
    ck_assert_msg(hits == NCHANGED - 1, "%g disk hits: the changed files' records were not "
                  "stored under their size and mtime as read", hits);
    ck_assert_uint_eq((uint64_t)computed, 1); /* the cut one, tried again */
    ck_assert_msg(again.e.fnv == first.e.fnv, "the disk tier gave other bytes than the files");
}
END_TEST

static Suite *slowfs_suite(void)
{
    Suite *s = suite_create("slowfs");
    TCase *tc = tcase_create("slowfs");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_cold_epoch_overlaps);
    tcase_add_loop_test(tc, test_every_backend, 0, 3);
    tcase_add_test(tc, test_warm_over_mount);
    tcase_add_loop_test(tc, test_vanish_while_reading_ahead, 0, 2);
    tcase_add_test(tc, test_changed_files);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    char why[512];
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return 1;
    if (harness_make_dataset(&H, "data", NSAMPLES, NCLASSES, 8, 200, 400, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return 1;
    }
    if (slowfs_mount(why, sizeof(why)) < 0) {
        printf("skip: FUSE is not available here: %s\n", why);
        harness_cleanup(&H);
        return HARNESS_SKIP;
    }
    int failed = harness_run_suite(slowfs_suite());
    slowfs_unmount();
    return harness_finish(&H, failed);
}

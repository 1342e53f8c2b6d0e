/*
 * Sources end to end (issue 16): one set of images served by a real prestod
 * as an ImageFolder with every extension torchvision's ImageFolder takes
 * (JPEG, PNG 8/16-bit and palette, WebP, BMP, PPM, PGM, TIFF, one
 * upper-case .PNG, a .gif and a .txt it must leave out), as a CSV manifest
 * (relative paths, class names), a JSONL manifest (absolute paths, integer
 * labels) and WebDataset tar shards named by a brace pattern
 * (tests/tools/mksources.py makes them all from mkdataset.py's JPEGs).
 *
 *   - every source gives the same epoch, batch for batch (labels and
 *     pixels: FNV-1a), shuffled and in order, cold and then from the cache;
 *   - the folder indexes exactly the 40 images (the .gif and .txt are not
 *     samples) and the log names the count of each extension;
 *   - a manifest with a bad line, a label that would make millions of
 *     classes, a shard that is not a tar or is missing, refuses start-up
 *     with FILE:LINE (the shard's name);
 *   - the same shards as a YAML list (root: [SHARD.tar, ...]) give the
 *     same epochs;
 *   - tar shards' member lists are kept in cache.dir: a restart reads no
 *     shard (one whose header was broken keeping its size and mtime still
 *     serves), a rewritten shard is read again and its samples are right;
 *   - the shards served over HTTP by nginx (tests/tools/objfixture.py
 *     http): each sample a ranged GET, the folder's epochs; a restart uses
 *     the member lists kept in cache.dir;
 *   - a corrupt member in a shard is a bad sample (skipped, counted), the
 *     epoch goes on.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/objfixture.h"
#include "harness.h"
#include "presto.h"

#define NSAMPLES 40
#define NCLASSES 3
#define NSHARDS 4
#define CASE_TIMEOUT_S 120

static struct harness H;
static char out_dir[HARNESS_PATH_MAX];

static const char *const NAMES[] = {"folder", "csv", "jsonl", "tar", "tarlist"};
#define NSOURCES (sizeof(NAMES) / sizeof(NAMES[0]))

static int make_sources(void)
{
    char src[HARNESS_PATH_MAX], script[HARNESS_PATH_MAX * 2], log[HARNESS_PATH_MAX];
    int rc = harness_make_dataset(&H, "jpg", NSAMPLES, NCLASSES, 16, 64, 160, src, sizeof(src));
    if (rc < 0)
        return rc;
    harness_path(&H, "sources", out_dir, sizeof(out_dir));
    harness_path(&H, "mksources.log", log, sizeof(log));
    snprintf(script, sizeof(script), "%s/tests/tools/mksources.py",
             harness_env("PRESTO_SRC", "."));
    const char *argv[] = {harness_env("PYTHON", "/usr/bin/python3"), script, src, out_dir, NULL};
    rc = harness_run(argv, log, 300);
    if (rc != 0) {
        fprintf(stderr, "mksources.py failed (status %d)\n", rc);
        return -EIO;
    }
    return 0;
}

/* The four datasets over the same images; cache.dir is cache_name in the
 * test's directory (tar shards' member lists are kept there), extra more
 * cache.* keys. */
static void start_sources_in(const char *cache_name, const char *extra)
{
    char yaml[4096], cache[HARNESS_PATH_MAX];
    harness_path(&H, cache_name, cache, sizeof(cache));
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  dir: %s\n%s"
             "datasets:\n"
             "  - name: folder\n    root: %s/folder\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: csv\n    root: %s/list.csv\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: jsonl\n    root: %s/list.jsonl\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: tar\n    root: %s/shards/train-{000000..%06d}.tar\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: tarlist\n    root:\n"
             "      - %s/shards/train-000000.tar\n      - %s/shards/train-000001.tar\n"
             "      - %s/shards/train-000002.tar\n      - %s/shards/train-000003.tar\n"
             "    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             cache, extra, out_dir, out_dir, out_dir, out_dir, NSHARDS - 1, out_dir, out_dir,
             out_dir, out_dir);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void start_sources(const char *extra)
{
    start_sources_in("cache", extra);
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

static void pull(const char *name, uint64_t epoch, int shuffle, struct harness_epoch *e)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = name;
    o.batch_size = 7;
    o.epoch = epoch;
    o.seed = 11;
    o.shuffle = shuffle;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, e), 0);
}

/* Every source's epoch equals the folder's, sample for sample. */
static void same_epochs(uint64_t epoch, int shuffle)
{
    struct harness_epoch ref, e;
    pull(NAMES[0], epoch, shuffle, &ref);
    ck_assert_uint_eq(ref.samples, NSAMPLES);
    ck_assert_uint_eq(ref.skipped, 0);
    for (size_t i = 1; i < NSOURCES; i++) {
        pull(NAMES[i], epoch, shuffle, &e);
        ck_assert_msg(e.samples == ref.samples && e.skipped == 0,
                      "%s: %llu samples (%llu skipped), the folder %llu", NAMES[i],
                      (unsigned long long)e.samples, (unsigned long long)e.skipped,
                      (unsigned long long)ref.samples);
        ck_assert_msg(e.fnv == ref.fnv, "%s: epoch %llu (shuffle %d) differs from the folder's",
                      NAMES[i], (unsigned long long)epoch, shuffle);
    }
}

/* ---- case "same": every source, the same epochs ---- */

static void same_setup(void)
{
    start_sources("  memory: 64M\n");
}

START_TEST(test_same_epochs)
{
    same_epochs(0, 0); /* cold: every source read and decoded */
    same_epochs(1, 1); /* from the memory tier, shuffled */
    same_epochs(2, 1);
    char *json, want[128];
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    for (size_t i = 0; i < NSOURCES; i++) {
        snprintf(want, sizeof(want), "{\"name\":\"%s\",\"samples\":%d,\"classes\":%d,",
                 NAMES[i], NSAMPLES, NCLASSES);
        ck_assert_msg(strstr(json, want), "%s: no %s in the stats", NAMES[i], want);
    }
    /* decoded by format, found from the bytes: 12 PNGs and 4 WebPs a source */
    ck_assert_msg(strstr(json, "\"png\":{\"decoded\":60,\"failed\":0,") &&
                      strstr(json, "\"webp\":{\"decoded\":20,\"failed\":0,"),
                  "the formats' counts are not 60 PNGs and 20 WebPs: %s", strstr(json, "formats"));
    free(json);
    /* the log names what was indexed, by extension */
    ck_assert(harness_log_contains(&H, "12 .png, 4 .ppm"));
    ck_assert(harness_log_contains(&H, "from 4 tar shards"));
}
END_TEST

/* ---- case "refused": bad manifests and shards stop start-up ---- */

/* prestod on yaml must exit non-zero with want in its output. */
static void refused(const char *name, const char *root, const char *want)
{
    char sock[HARNESS_PATH_MAX], yaml[2048], got[8192];
    harness_path(&H, "refused.sock", sock, sizeof(sock));
    snprintf(yaml, sizeof(yaml),
             "socket: %s\nworkers: 1\ndatasets:\n  - name: %s\n    root: %s\n", sock, name,
             root);
    int rc = harness_run_config(&H, yaml, 60, got, sizeof(got));
    ck_assert_msg(rc > 0 && rc < 128, "%s: prestod exited %d", root, rc);
    ck_assert_msg(strstr(got, want), "%s: the output lacks '%s':\n%s", root, want, got);
}

START_TEST(test_refused)
{
    char path[HARNESS_PATH_MAX + 64], want[HARNESS_PATH_MAX + 96];
    /* a CSV whose third line has no label */
    ck_assert_int_eq(harness_write_file(&H, "bad.csv", "path,label\na.png,0\nb.png\n", path,
                                        sizeof(path)), 0);
    snprintf(want, sizeof(want), "%s:3:", path);
    refused("badcsv", path, want);
    /* a JSONL line that is not JSON */
    ck_assert_int_eq(harness_write_file(&H, "bad.jsonl",
                                        "{\"path\": \"a.png\", \"label\": 1}\n{\"path\": \n",
                                        path, sizeof(path)), 0);
    snprintf(want, sizeof(want), "%s:2:", path);
    refused("badjsonl", path, want);
    /* an integer label that would make millions of classes */
    ck_assert_int_eq(harness_write_file(&H, "huge.csv", "path,label\na.png,0\nb.png,2000000\n",
                                        path, sizeof(path)), 0);
    refused("huge", path, "at most 2^20 classes");
    /* a shard that is not a tar */
    ck_assert_int_eq(harness_write_file(&H, "junk.tar", "this is not a tar archive\n", path,
                                        sizeof(path)), 0);
    snprintf(want, sizeof(want), "shard %s", path);
    refused("junk", path, want);
    /* a missing shard of a pattern */
    snprintf(path, sizeof(path), "%s/shards/train-{000000..000009}.tar", out_dir);
    refused("missing", path, "train-000004.tar");
}
END_TEST

/* ---- case "lists": shards' member lists kept in cache.dir ---- */

/* The tar dataset's epochs (cold in order, then shuffled) equal the
 * folder's, and the log of this start says how its shards were indexed. */
static void lists_start(const char *how)
{
    start_sources_in("cache-lists", "");
    ck_assert_msg(harness_log_contains(&H, how), "the log does not say '%s'", how);
    struct harness_epoch ref, e;
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        pull("folder", 3, shuffle, &ref);
        pull("tar", 3, shuffle, &e);
        ck_assert_msg(e.samples == NSAMPLES && e.skipped == 0 && e.fnv == ref.fnv,
                      "tar (%s): %llu samples, %llu skipped, not the folder's epoch", how,
                      (unsigned long long)e.samples, (unsigned long long)e.skipped);
    }
    harness_stop_checked(&H);
}

/* Flips byte off of path, keeping its size and mtime (a change only a
 * read of the shard can see). */
static void flip_byte(const char *path, long off)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    int c = fgetc(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    ck_assert_int_ne(fputc(c ^ 0x5a, f), EOF);
    ck_assert_int_eq(fclose(f), 0);
    struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

START_TEST(test_shard_lists)
{
    char shard2[HARNESS_PATH_MAX + 32], shard3[HARNESS_PATH_MAX + 32], log[HARNESS_PATH_MAX];
    snprintf(shard2, sizeof(shard2), "%s/shards/train-000002.tar", out_dir);
    snprintf(shard3, sizeof(shard3), "%s/shards/train-000003.tar", out_dir);
    /* first start: every shard read, its list kept */
    lists_start("member lists: 0 from cache.dir, 4 shards read");
    /* shard 2's first header made bad (its checksum field), size and mtime
     * kept: a start that read it would refuse it; a restart does not */
    flip_byte(shard2, 148);
    lists_start("member lists: 4 from cache.dir, 0 shards read");
    flip_byte(shard2, 148);
    /* shard 3 rewritten with a member before the others: every offset in
     * it moves; it is read again and its samples are right */
    const char *script =
        "import io, sys, tarfile\n"
        "src = open(sys.argv[1], 'rb').read()\n"
        "old = tarfile.open(fileobj=io.BytesIO(src))\n"
        "with tarfile.open(sys.argv[1], 'w', format=tarfile.GNU_FORMAT) as out:\n"
        "    pad = tarfile.TarInfo('000pad.txt'); pad.size = 1000\n"
        "    out.addfile(pad, io.BytesIO(b'x' * 1000))\n"
        "    for m in old.getmembers():\n"
        "        out.addfile(m, old.extractfile(m))\n";
    const char *argv[] = {harness_env("PYTHON", "/usr/bin/python3"), "-c", script, shard3,
                          NULL};
    harness_path(&H, "rewrite.log", log, sizeof(log));
    ck_assert_int_eq(harness_run(argv, log, 60), 0);
    lists_start("member lists: 3 from cache.dir, 1 shards read");
    /* and kept again */
    lists_start("member lists: 4 from cache.dir, 0 shards read");
}
END_TEST

/* ---- case "http": the shards served by nginx ---- */

/* prestod with the folder and datasets n1 and n2 (roots r1, r2; config
 * the source block or ""), its cache in cache_name. Returns the requests
 * the start-up made to fx. */
static long start_beside_folder(struct objfixture *fx, const char *cache_name,
                                const char *config, const char *n1, const char *r1,
                                const char *n2, const char *r2)
{
    char yaml[8192], cache[HARNESS_PATH_MAX];
    harness_path(&H, cache_name, cache, sizeof(cache));
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  memory: 64M\n  dir: %s\n%s"
             "datasets:\n"
             "  - name: folder\n    root: %s/folder\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: %s\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: %s\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             cache, config, out_dir, n1, r1, n2, r2);
    long before = objfixture_stat(fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    return objfixture_stat(fx, "requests") - before;
}

/* prestod with the folder and the shards over HTTP (port: the proxy's in
 * front of nginx), twice: "http2" is read only once the server is down.
 * Returns the requests the start-up made. */
static long start_http(struct objfixture *fx)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/shards/train-{000000..%06d}.tar", fx->port,
             NSHARDS - 1);
    return start_beside_folder(fx, "cache-http",
                               "source:\n  retries: 2\n  connect_timeout_ms: 1000\n", "http",
                               url, "http2", url);
}

static void same_as_folder(const char *name, uint64_t epoch, int shuffle)
{
    struct harness_epoch ref, e;
    pull("folder", epoch, shuffle, &ref);
    pull(name, epoch, shuffle, &e);
    ck_assert_msg(e.samples == NSAMPLES && e.skipped == 0 && e.fnv == ref.fnv,
                  "%s: %llu samples, %llu skipped, not the folder's epoch %llu", name,
                  (unsigned long long)e.samples, (unsigned long long)e.skipped,
                  (unsigned long long)epoch);
}

/* The same rows naming their version (size, and the ETag nginx gives:
 * hex mtime-hex size): nothing asked at start, the epochs the folder's;
 * "stale" has pinned's rows and then the first row again naming a version
 * the server does not have: that row's read carries its own ETag
 * (If-Match) and is refused (412), so that sample alone fails, while the
 * same URL's first row is served (read without it, or with one ETag per
 * URL, both rows would be served or both fail). text: the URL rows'
 * manifest. */
static void pinned_rows(struct objfixture *fx, const char *text)
{
    static char pinned[65536], stale[65536];
    char p1[HARNESS_PATH_MAX], p2[HARNESS_PATH_MAX];
    size_t a = 0;
    int row = 0;
    for (const char *line = text; *line; row++) {
        const char *nl = strchr(line, '\n'), *comma = strchr(line, ',');
        size_t n = nl ? (size_t)(nl - line) : strlen(line), len = n;
        if (n && line[n - 1] == '\r') /* csv.writer's CRLF */
            n--;
        ck_assert(comma && comma < line + n);
        if (row == 0) {
            a += (size_t)snprintf(pinned + a, sizeof(pinned) - a, "%.*s,size,etag\n", (int)n, line);
        } else {
            const char *rel = strstr(line, "://");
            ck_assert(rel && (rel = strchr(rel + 3, '/')) != NULL);
            char file[2 * HARNESS_PATH_MAX + 16];
            struct stat st;
            snprintf(file, sizeof(file), "%s%.*s", out_dir, (int)(comma - rel), rel);
            ck_assert_msg(stat(file, &st) == 0, "%s", file);
            a += (size_t)snprintf(pinned + a, sizeof(pinned) - a, "%.*s,%lld,\"\"\"%lx-%llx\"\"\"\n",
                                  (int)n, line, (long long)st.st_size,
                                  (unsigned long)st.st_mtime, (unsigned long long)st.st_size);
        }
        line += len + (nl != NULL);
    }
    ck_assert(a < sizeof(pinned));
    /* stale: pinned's lines, then the first row again, its ETag another */
    const char *first = strchr(pinned, '\n') + 1;
    size_t flen = (size_t)(strchr(first, '\n') + 1 - first);
    ck_assert(a + flen < sizeof(stale));
    memcpy(stale, pinned, a);
    memcpy(stale + a, first, flen);
    stale[a + flen] = 0;
    char *q = strchr(stale + a, '"');
    ck_assert(q != NULL);
    q[3] = q[3] == 'f' ? '0' : 'f';
    ck_assert_int_eq(harness_write_file(&H, "pinned.csv", pinned, p1, sizeof(p1)), 0);
    ck_assert_int_eq(harness_write_file(&H, "stale.csv", stale, p2, sizeof(p2)), 0);
    long n = start_beside_folder(fx, "cache-pinned", "", "pinned", p1, "stale", p2);
    ck_assert_msg(n == 0, "%ld requests to index rows that name their version", n);
    ck_assert(harness_log_contains(&H, "0 probes, 0 from the probe cache, 40 rows naming their version)"));
    same_as_folder("pinned", 0, 1);
    struct harness_epoch e;
    pull("stale", 0, 0, &e);
    ck_assert_msg(e.samples == NSAMPLES && e.skipped == 1, "stale: %llu samples, %llu skipped",
                  (unsigned long long)e.samples, (unsigned long long)e.skipped);
    harness_stop_checked(&H);
}

/* Copies file from into to (both in out_dir, the server's), its mtime
 * set to mtime: what the server serves under to changes version. */
static void replace_file(const char *from, const char *to, time_t mtime)
{
    static char buf[1 << 20];
    FILE *f = fopen(from, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    ck_assert(n > 0 && n < sizeof(buf));
    ck_assert_ptr_nonnull(f = fopen(to, "wb"));
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, to, ts, 0), 0);
}

/* The requests an epoch of name made (the folder's alongside: none) as
 * it is checked against the folder's. */
static long rows_epoch(struct objfixture *fx, const char *name, uint64_t epoch)
{
    long before = objfixture_stat(fx, "requests");
    same_as_folder(name, epoch, 0);
    return objfixture_stat(fx, "requests") - before;
}

/* The rows' probes kept in cache.dir: a restart asks nothing; an object
 * replaced since (row 1's file gets row 2's bytes and another mtime) is
 * refused by its If-Match (412), asked again, that row only, and its new
 * bytes served (the folder, indexed after the change, has them too); the
 * probe cache then holds its new version, so the next start and epoch
 * ask nothing more. The file is put back after. */
static void probe_cache(struct objfixture *fx, const char *yaml)
{
    char rel[2][1024], path[2][2 * HARNESS_PATH_MAX], save[2 * HARNESS_PATH_MAX + 8];
    char list[HARNESS_PATH_MAX + 16], line[1024];
    struct stat st;
    snprintf(list, sizeof(list), "%s/list.csv", out_dir);
    FILE *f = fopen(list, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f)); /* the header */
    for (int i = 0; i < 2; i++) {
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        snprintf(rel[i], sizeof(rel[i]), "%.*s", (int)strcspn(line, ","), line);
        snprintf(path[i], sizeof(path[i]), "%s/%s", out_dir, rel[i]);
    }
    fclose(f);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    ck_assert_msg(harness_log_contains(&H, "0 probes, 40 from the probe cache"),
                  "the restart did not use the probe cache");
    long n = rows_epoch(fx, "rows", 0);
    ck_assert_msg(n == NSAMPLES, "%ld requests for an epoch of %d rows", n, NSAMPLES);
    harness_stop_checked(&H);

    struct stat st1;
    snprintf(save, sizeof(save), "%s.orig", path[0]);
    ck_assert_int_eq(stat(path[0], &st), 0);
    ck_assert_int_eq(stat(path[1], &st1), 0);
    /* a new version larger than the indexed size is read whole once more
     * into a buffer of its size (as a local file that grew) */
    long grown = st1.st_size > st.st_size;
    replace_file(path[0], save, st.st_mtime);
    replace_file(path[1], path[0], st.st_mtime + 100);
    long before = objfixture_stat(fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    n = objfixture_stat(fx, "requests") - before;
    ck_assert_msg(n == 0, "%ld requests at a start with the probes kept", n);
    n = rows_epoch(fx, "rows", 0); /* the 412 and the row asked again */
    ck_assert_msg(n == NSAMPLES + 2 + grown,
                  "%ld requests for an epoch with one object replaced (%ld bytes, was %ld)", n,
                  (long)st1.st_size, (long)st.st_size);
    ck_assert(harness_log_contains(&H, "was replaced since it was probed"));
    char *json;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    ck_assert_msg(strstr(json, "\"reprobed\":1"), "no row counted as asked again");
    free(json);
    harness_stop_checked(&H); /* the new version kept */

    before = objfixture_stat(fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    n = objfixture_stat(fx, "requests") - before;
    ck_assert_msg(n == 0, "%ld requests at start after a row was asked again", n);
    n = rows_epoch(fx, "rows", 1);
    ck_assert_msg(n == NSAMPLES, "%ld requests for an epoch after the re-probe was kept", n);
    harness_stop_checked(&H);
    replace_file(save, path[0], st.st_mtime);
    ck_assert_int_eq(unlink(save), 0);
}

/* list.csv's rows as URLs of the server (nginx serves out_dir): each row
 * probed at start, all at once; the epochs are the folder's. */
static void http_rows(struct objfixture *fx)
{
    char src[HARNESS_PATH_MAX + 16], line[1024], text[32768], csv[HARNESS_PATH_MAX];
    char yaml[4096], cache[HARNESS_PATH_MAX];
    size_t at = 0;
    snprintf(src, sizeof(src), "%s/list.csv", out_dir);
    FILE *f = fopen(src, "r");
    ck_assert_ptr_nonnull(f);
    for (int first = 1; fgets(line, sizeof(line), f); first = 0) {
        if (first)
            at += (size_t)snprintf(text + at, sizeof(text) - at, "%s", line);
        else
            at += (size_t)snprintf(text + at, sizeof(text) - at, "http://127.0.0.1:%d/%s",
                                   fx->port, line);
    }
    fclose(f);
    ck_assert(at < sizeof(text));
    ck_assert_int_eq(harness_write_file(&H, "urls.csv", text, csv, sizeof(csv)), 0);
    harness_path(&H, "cache-rows", cache, sizeof(cache));
    snprintf(yaml, sizeof(yaml),
             "workers: 2\ncache:\n  memory: 64M\n  dir: %s\n"
             "datasets:\n"
             "  - name: folder\n    root: %s/folder\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n"
             "  - name: rows\n    root: %s\n    steps: [decode, {resize: 48}, {center_crop: 48}]\n",
             cache, out_dir, csv);
    long before = objfixture_stat(fx, "requests");
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
    long n = objfixture_stat(fx, "requests") - before;
    ck_assert_msg(n == NSAMPLES, "%ld requests to index %d URL rows", n, NSAMPLES);
    ck_assert(harness_log_contains(&H, "40 probes)"));
    same_as_folder("rows", 0, 0);
    same_as_folder("rows", 1, 1);
    harness_stop_checked(&H);
    probe_cache(fx, yaml);
    pinned_rows(fx, text);
}

START_TEST(test_http_shards)
{
    struct objfixture fx;
    char args[HARNESS_PATH_MAX + 64];
    snprintf(args, sizeof(args), "http --root '%s'", out_dir);
    int rc = objfixture_start(&fx, args);
    if (rc == 77) {
        fprintf(stderr, "test_sources: http: %s: not run\n", fx.why);
        return;
    }
    ck_assert_msg(rc == 0, "%s", fx.why);
    /* first start: per shard a probe of its first byte and one 1 MiB
     * window of headers, for each of the two datasets but the second
     * finds the lists the first kept */
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 300", NULL, 0), 0);
    ck_assert_int_eq(objfixture_cmd(&fx, "peak", NULL, 0), 0);
    long n = start_http(&fx);
    ck_assert_int_eq(objfixture_cmd(&fx, "delay 0", NULL, 0), 0);
    /* the shards' probes, and then their first windows, all at once */
    ck_assert_msg(objfixture_stat(&fx, "max_in_flight") >= NSHARDS,
                  "the shards were indexed one after another (%ld at once)",
                  objfixture_stat(&fx, "max_in_flight"));
    ck_assert(harness_log_contains(&H, "40 samples in 3 classes from 4 tar shards http://"));
    ck_assert(harness_log_contains(&H, "member lists: 0 from cache.dir, 4 shards read"));
    ck_assert_msg(n == 2 * NSHARDS + NSHARDS, "%ld requests at start-up", n);
    same_as_folder("http", 0, 0); /* cold: each sample a ranged GET */
    same_as_folder("http", 1, 1);
    harness_stop_checked(&H);
    /* restarted: each shard's size and ETag asked, its list in cache.dir */
    n = start_http(&fx);
    ck_assert(!harness_log_contains(&H, "0 from cache.dir"));
    ck_assert_msg(n == 2 * NSHARDS, "%ld requests at start-up with the lists kept", n);
    same_as_folder("http", 2, 1);
    /* the server down: every sample of http2 fails after its last try,
     * skipped and counted, the message names the server */
    ck_assert_int_eq(objfixture_cmd(&fx, "down", NULL, 0), 0);
    struct harness_epoch e;
    pull("http2", 0, 0, &e);
    ck_assert_msg(e.samples == 0 && e.skipped == NSAMPLES, "down: %llu samples, %llu skipped",
                  (unsigned long long)e.samples, (unsigned long long)e.skipped);
    char want[96];
    snprintf(want, sizeof(want), "GET from http://127.0.0.1:%d: ", fx.port);
    ck_assert_msg(harness_log_contains(&H, want), "the log does not say '%s'", want);
    ck_assert(harness_log_contains(&H, "after the last retry"));
    /* back up: the epoch is whole and the folder's (nothing was cached
     * from the failed reads) */
    ck_assert_int_eq(objfixture_cmd(&fx, "up", NULL, 0), 0);
    same_as_folder("http2", 0, 0);
    harness_stop_checked(&H);
    http_rows(&fx);
    objfixture_stop(&fx);
}
END_TEST

/* ---- case "corrupt": a bad member is a bad sample ---- */

static void corrupt_setup(void)
{
    /* Overwrite the start of the first image member of shard 1 (after
     * its header block) with zeros: that sample no longer decodes. */
    char shard[HARNESS_PATH_MAX + 32], zeros[64] = {0};
    snprintf(shard, sizeof(shard), "%s/shards/train-000001.tar", out_dir);
    FILE *f = fopen(shard, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 512, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
    fclose(f);
    start_sources("");
}

START_TEST(test_corrupt_member)
{
    struct harness_epoch e;
    pull("tar", 0, 1, &e);
    ck_assert_uint_eq(e.samples, NSAMPLES - 1);
    ck_assert_uint_eq(e.skipped, 1);
    char *json;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    ck_assert_msg(strstr(json, "{\"name\":\"tar\",\"samples\":40,\"classes\":3,"
                               "\"refused\":0,\"errors\":1,"), "tar: no bad sample counted");
    ck_assert_msg(strstr(json, "\"unknown\":{\"decoded\":0,\"failed\":1,"),
                  "the zeroed member is not counted as a file of no known format: %s",
                  strstr(json, "formats"));
    free(json);
    ck_assert(harness_log_contains(&H, "bad sample train-000001.tar/"));
}
END_TEST

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0 || make_sources() < 0) {
        harness_cleanup(&H);
        return 1;
    }
    Suite *s = suite_create("sources");
    TCase *tc = harness_tcase("same", same_setup, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_same_epochs);
    suite_add_tcase(s, tc);
    tc = harness_tcase("refused", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    tc = harness_tcase("lists", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_shard_lists);
    suite_add_tcase(s, tc);
    tc = harness_tcase("http", NULL, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_http_shards);
    suite_add_tcase(s, tc);
    tc = harness_tcase("corrupt", corrupt_setup, daemon_teardown, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_corrupt_member);
    suite_add_tcase(s, tc);
    return harness_finish(&H, harness_run_suite(s));
}

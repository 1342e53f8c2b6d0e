/*
 * A dataset's source: what samples exist, with their labels, and how a
 * sample's bytes are read. One interface, several kinds, chosen by the
 * dataset's root (source_kind_of):
 *
 *   DIR        a directory: an ImageFolder tree (source_dir.c)
 *   MANIFEST   a file list, ROOT.csv or ROOT.jsonl (manifest.h): one sample
 *              per line, its path relative to the manifest's directory or
 *              absolute, its label an integer or a class name
 *   TAR        WebDataset tar shards, ROOT.tar or a brace pattern
 *              ("train-{000000..000146}.tar", braces.h): members grouped by
 *              key (wds.h), each sample's image read by its byte range
 *   S3         s3://BUCKET/PREFIX (source_s3.c, objstore.h): listed at
 *              indexing (PREFIX/CLASS/NAME, an ImageFolder), each sample a
 *              GET run by the source's own event loop thread; or
 *              s3://BUCKET/SHARDS.tar (a brace pattern): tar shards, each
 *              sample a ranged GET of its member
 *   HTTP       http(s)://HOST/SHARDS.tar (a brace pattern): tar shards by
 *              URL, read as S3's are (source_s3.c, no credentials): each
 *              shard's size and ETag from a GET of its first byte, each
 *              sample a ranged GET of its member
 *
 * source_open indexes the source into an index (index.h): the samples in
 * id order with their labels, a path for messages and the disk tier's key
 * (path hash, size, and mtime: a tar member carries its shard's, so a
 * changed shard invalidates its samples), the class names. Every kind
 * feeds the same tiers, planner and profiler through the functions below.
 *
 * Reading a sample:
 *   - source_req makes an I/O request (io.h) for an I/O ring: a whole file
 *     (opened, statted, read and closed by the ring, below the root where
 *     the source says so), or a byte range of an open shard (size and mtime
 *     preset from the index: the shard is the identity). The ring runs it
 *     asynchronously and calls its on_done; a worker waits on it with
 *     io_wait, the event loop's ring hands IO_DEFERRED ones to a worker.
 *     A remote source (source_remote: S3) runs the request itself: the
 *     caller hands it over with source_submit and waits with source_wait
 *     (source_cancel takes it back); for the other kinds these three are
 *     io_submit, io_wait and io_cancel on the caller's ring. A remote
 *     request is never on the event loop's ring (readahead skips them).
 *   - source_read reads a sample whole on the calling thread (recovery,
 *     files that grew since indexing).
 *   - source_open_file opens a sample's file (the profiler drops it from
 *     the page cache): a shard member gives its shard.
 *
 * Threads: source_open and source_close on one thread; everything else
 * reads fixed state and may run on any thread at once.
 *
 * Errors: -errno, with a message for err. A source that cannot be indexed
 * is refused at start with the root and the reason.
 */
#ifndef PRESTO_SOURCE_H
#define PRESTO_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "img.h"
#include "index.h"

struct io_req;
struct source;

enum source_kind {
    SOURCE_DIR = 0,
    SOURCE_MANIFEST,
    SOURCE_TAR,
    SOURCE_HTTP,
    SOURCE_S3,
    SOURCE_KIND_MAX
};

/* The kind of source a root names: a URL by its scheme, a name ending in
 * .csv or .jsonl a manifest, one ending in .tar (or a brace pattern of
 * them) tar shards, anything else a directory. */
static inline int source_name_ends(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static inline enum source_kind source_kind_of(const char *root)
{
    if (strncmp(root, "s3://", 5) == 0)
        return SOURCE_S3;
    if (strncmp(root, "http://", 7) == 0 || strncmp(root, "https://", 8) == 0)
        return SOURCE_HTTP;
    if (source_name_ends(root, ".csv") || source_name_ends(root, ".jsonl"))
        return SOURCE_MANIFEST;
    if (source_name_ends(root, ".tar"))
        return SOURCE_TAR;
    return SOURCE_DIR;
}
/* "directory", "manifest", "tar", "http", "s3". */
const char *source_kind_name(enum source_kind k);

/* Opens cfg->root and indexes it into ix (empty; filled on success).
 * Returns 0, or -errno with a message in err naming the dataset and root.
 * cfg must outlive the source. */
int source_open(struct source **out, const struct config_dataset *cfg, struct index *ix,
                char *err, size_t errlen);
/* NULL is fine. */
void source_close(struct source *s);

enum source_kind source_kind(const struct source *s);
/* Entries refused at indexing (links leaving a directory root). */
uint64_t source_refused(const struct source *s);

/* The message of a failed request or open of one of s's samples (rc a
 * negative errno; -EXDEV: the path leaves the root), for err. */
void source_open_error(const struct source *s, int rc, char *err, size_t errlen);
/* Opens the file holding sample (ix is the one source_open filled) and
 * fstats it. Returns 0, or -errno (-EFBIG: over max_size; closed then)
 * with a message in err. */
int source_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                     uint64_t max_size, struct source_file *f, char *err, size_t errlen);
/* Reads sample whole into out (fmt IMG_ENCODED); f (may be NULL) receives
 * the identity it was read under (fd -1). 0, or -errno with a message. */
int source_read(const struct source *s, const struct index *ix, uint32_t sample,
                uint64_t max_size, struct img *out, struct source_file *f, char *err,
                size_t errlen);
/* Makes q a read of sample into buf (len bytes at most) for an I/O ring;
 * the caller sets on_done and arg and submits it. On completion q->res is
 * the bytes read or -errno, q->size and q->mtime_ns the identity read. */
void source_req(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                size_t len, struct io_req *q);

/* 1 when s runs its reads itself (S3): source_submit, not a ring. */
int source_remote(const struct source *s);
struct io_ring;
/* Runs q (made by source_req): on io for files, on the source's own loop
 * for a remote source. Any thread but the event loop's for a remote one. */
void source_submit(const struct source *s, struct io_ring *io, struct io_req *q);
/* What this thread submitted to s goes out (a remote source holds it
 * until then, so that neighbours may share a request; waiting on one
 * sends them too). Nothing for files. */
void source_kick(const struct source *s);
/* Blocks until q is done; returns q->res. A remote source's wait also
 * ends once *stop (a relaxed atomic int; NULL: none) is set and
 * source_wake is called: q is then taken back (its transfer dropped, the
 * connection closed) and ends with -ECANCELED unless it completed first.
 * A file's read is short: it is waited for. */
ssize_t source_wait(const struct source *s, struct io_ring *io, struct io_req *q,
                    const int *stop);
/* Any thread: the waiters of s look at their stop flags again (call it
 * after setting one). NULL is fine. */
void source_wake(const struct source *s);
/* Takes q back (done once this returns; -ECANCELED when it had not started). */
void source_cancel(const struct source *s, struct io_ring *io, struct io_req *q);

/* A remote source's stats (a dataset's section "source"): its requests
 * (objstore.h: over its whole life, listing included). */
#define SOURCE_REMOTE_STATS(X)                                                        \
    X(in_flight, GAUGE, "requests", "requests on the wire now")                       \
    X(queued, GAUGE, "requests", "requests waiting for one of io.depth slots")        \
    X(waiting, GAUGE, "requests", "requests waiting to be retried (backoff)")         \
    X(depth, GAUGE, "requests", "the most requests in flight (io.depth)")             \
    X(requests, COUNTER, "requests", "GETs and listing pages asked for")              \
    X(attempts, COUNTER, "requests", "transfers started, retries included")           \
    X(retries, COUNTER, "requests", "attempts after a retryable failure")             \
    X(completed, COUNTER, "requests", "requests that succeeded")                      \
    X(failed, COUNTER, "requests", "requests that failed after their last try")       \
    X(failed_http, COUNTER, "requests", "... of them with an HTTP error status")      \
    X(failed_timeout, COUNTER, "requests", "... of them timed out")                   \
    X(failed_connect, COUNTER, "requests", "... refused, reset, unreachable or cut short") \
    X(failed_changed, COUNTER, "requests", "... the object was replaced since indexing (412)") \
    X(cancelled, COUNTER, "requests", "requests taken back: their batch or source went away") \
    X(status_5xx, COUNTER, "responses", "5xx responses, every attempt")               \
    X(status_429, COUNTER, "responses", "429 responses, every attempt")               \
    X(status_4xx, COUNTER, "responses", "other 4xx responses, every attempt")         \
    X(bytes, COUNTER, "bytes", "body bytes received")                                 \
    X(bytes_per_s, GAUGE, "bytes per second", "body bytes in the last whole second",  \
      "bytes_per_second")                                                             \
    X(latency_p50_us, GAUGE, "microseconds", "median attempt latency (last 4096)",    \
      "latency_p50")                                                                  \
    X(latency_p99_us, GAUGE, "microseconds", "99th percentile of it", "latency_p99")  \
    X(latency_max_us, GAUGE, "microseconds", "the longest of them", "latency_max") \
    X(reprobed, COUNTER, "requests",                                                   \
      "URL rows read again without If-Match: replaced since they were probed")
struct stats_out;
/* The section "source" of a remote source's dataset (nothing for files);
 * in Prometheus presto_dataset_remote_*{dataset=...}. */
void source_stats(const struct source *s, struct stats_out *o);

#endif

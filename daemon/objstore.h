/*
 * An HTTP and S3 client for sources: libcurl's multi interface driven by
 * the daemon's libevent loop (curl_multi_socket_action; curl's sockets and
 * timer become events on the event_base), so one thread keeps hundreds of
 * requests in flight over reused connections.
 *
 * One objstore per source: its own connections, credentials and stats.
 * Everything runs on the thread that owns the event_base, completions too.
 *
 *   - GET of a whole object or a byte range, into a buffer the completion
 *     takes over, or streamed to a sink (a shard being indexed).
 *   - S3: path-style or virtual-hosted URLs, SigV4 signing by curl itself
 *     (CURLOPT_AWS_SIGV4: no crypto here), x-amz-content-sha256 for the
 *     empty payload, the session token when given; ListObjectsV2 with
 *     continuation tokens (s3xml.h) until the listing ends.
 *   - At most depth requests in flight (io.depth), the rest queued in
 *     order; per-request timeouts (connect and total); retries with
 *     exponential backoff and full jitter on 5xx, 429, timeouts and
 *     connection errors (resets, refusals, truncated bodies), resuming a
 *     partial body from where it stopped (Range, and If-Match on the ETag
 *     so a changed object is not spliced); after the last try the request
 *     fails with -errno and a message naming the URL, the status and the
 *     server's S3 error code and message.
 *   - Stats (struct objstore_stats): requests in flight, queued and
 *     waiting to retry, attempts, retries, failures by reason, bytes and
 *     bytes in the last second, latency p50/p99 of the last
 *     OBJSTORE_LAT_WINDOW attempts.
 * Credentials are copied, used only as curl's user name and password, and
 * wiped when the objstore goes; they are never in a message, a log line or
 * the stats (URLs carry no credentials).
 *
 * Error space: -EACCES (403), -ENOENT (404: no such key or bucket),
 * -ESTALE (412: the object changed while being resumed), -ERANGE (416),
 * -EFBIG (body over max_bytes), -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET,
 * -EHOSTUNREACH (name resolution), -EIO (other HTTP errors, 5xx after the
 * last try), -EPROTO (TLS, malformed responses), -ECANCELED, -ENOMEM.
 */
#ifndef PRESTO_OBJSTORE_H
#define PRESTO_OBJSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "s3xml.h"

struct event_base;
struct objstore;

struct objstore_config {
    /* S3: endpoint "http(s)://host[:port]" (NULL or "": AWS in region,
     * https://BUCKET.s3.REGION.amazonaws.com/KEY); with an endpoint, URLs
     * are path style, endpoint/BUCKET/KEY (s3rver, MinIO, Ceph), unless
     * virtual_host asks for BUCKET.host/KEY. Plain HTTP sources leave s3 0
     * and pass URLs. */
    int s3;
    const char *endpoint;
    const char *region;
    int virtual_host;
    const char *access_key, *secret_key, *session_token; /* copied */
    uint32_t depth;              /* requests in flight (default 128) */
    uint32_t retries;            /* tries after the first (default 5) */
    uint32_t timeout_ms;         /* per attempt, whole transfer (default 30000) */
    uint32_t connect_timeout_ms; /* default 5000 */
    uint32_t backoff_ms;         /* first retry's delay bound (default 100) */
    uint32_t backoff_max_ms;     /* cap (default 5000) */
    uint64_t max_bytes;          /* refuse bodies larger (0: no limit) */
};

struct objstore_result {
    uint8_t *data;      /* buffered GETs: the body, malloc'ed; the callee frees it */
    size_t len;
    long status;        /* the last HTTP status (0: none) */
    uint64_t size;      /* the object's size when the response said it */
    char etag[S3XML_ETAG_MAX]; /* the ETag as sent, quotes removed ("" when none) */
    unsigned attempts;
    const char *message; /* on failure: what happened (valid during the call) */
};

/* Called once per request on the loop thread: rc 0 or -errno. It must not
 * free the objstore. */
typedef void (*objstore_done_fn)(void *arg, int rc, struct objstore_result *res);
/* A streaming GET's data as it arrives, in order: 0, or -errno to stop
 * (the request then fails with that error). */
typedef int (*objstore_sink_fn)(void *arg, const uint8_t *data, size_t len);

/* What to read: a URL (http/https sources) or an S3 bucket and key.
 * if_match (NULL or "": none): the ETag (quotes removed) the object must
 * still have; every attempt sends it as If-Match, and a server answering
 * 412 (the object was replaced) fails the request with -ESTALE, untried
 * again, so a range of a replaced object is never read. */
struct objstore_target {
    const char *url;
    const char *bucket, *key;
    const char *if_match;
};

/* The listing a ListObjectsV2 walk ends with: objects (key, size, ETag)
 * in key order. */
struct objstore_listing {
    struct s3xml_object *objects;
    size_t n;
    unsigned pages;
};
typedef void (*objstore_list_fn)(void *arg, int rc, struct objstore_listing *listing,
                                 const char *message);

/* curl_global_init / cleanup: once per process, before any thread. */
int objstore_global_init(void);
void objstore_global_cleanup(void);

/* Returns 0 and *out, or -EINVAL (bad config: message in err) / -ENOMEM. */
int objstore_new(struct event_base *base, const struct objstore_config *cfg,
                 struct objstore **out, char *err, size_t errlen);
/* Fails every request still queued or in flight with -ECANCELED (their
 * completions run now), then frees everything. */
void objstore_free(struct objstore *os);

/* A GET of t: the bytes [offset, offset + length) (length 0: to the
 * end). With sink set the body goes there instead of a buffer. Returns 0
 * (done runs later, exactly once) or -errno (done never runs). */
int objstore_get(struct objstore *os, const struct objstore_target *t, uint64_t offset,
                 uint64_t length, objstore_sink_fn sink, void *sink_arg,
                 objstore_done_fn done, void *arg);

/* Takes back the GET whose done argument is arg, wherever it is (queued,
 * in flight: its transfer is dropped, its connection closed; waiting to
 * retry): its done runs now with -ECANCELED, before this returns. Returns
 * 0, or -ENOENT when there is none to take back (it completed, or is
 * failing already: its done runs from the loop soon). Loop thread only,
 * never from inside a done or a sink. */
int objstore_cancel(struct objstore *os, void *arg);

/* Lists bucket's keys under prefix, page_keys a page (0: the server's
 * default, 1000 on S3), following continuation tokens to the end. Returns
 * 0 (done runs later, once: the listing, which it objstore_listing_frees,
 * or an error with its message) or -errno (done never runs). */
int objstore_list(struct objstore *os, const char *bucket, const char *prefix,
                  uint32_t page_keys, objstore_list_fn done, void *arg);
void objstore_listing_free(struct objstore_listing *l);

/* The URL objstore_get uses for an S3 object, into buf: for messages. */
void objstore_url(const struct objstore *os, const struct objstore_target *t, char *buf,
                  size_t len);

#define OBJSTORE_LAT_WINDOW 4096 /* attempts the latency quantiles cover */

struct objstore_stats {
    uint32_t in_flight, queued, waiting; /* gauges: running, queued, in backoff */
    uint32_t depth;
    uint64_t requests;      /* requests made (objstore_get, list pages) */
    uint64_t attempts;      /* transfers started */
    uint64_t retries;       /* attempts after a retryable failure */
    uint64_t completed;     /* requests that succeeded */
    uint64_t failed;        /* requests that failed (after their last try) */
    uint64_t failed_http;   /* ... with an HTTP error status */
    uint64_t failed_timeout;
    uint64_t failed_connect; /* refused, reset, unreachable, truncated */
    uint64_t failed_changed; /* 412: the object is not the one asked for (If-Match) */
    uint64_t cancelled;     /* requests taken back (objstore_cancel, objstore_free) */
    uint64_t status_5xx, status_429, status_4xx; /* responses seen, every attempt */
    uint64_t bytes;         /* body bytes received */
    uint64_t bytes_per_s;   /* in the last whole second */
    uint64_t lat_p50_us, lat_p99_us, lat_max_us; /* attempts, start to last byte */
};
void objstore_stats(const struct objstore *os, struct objstore_stats *out);

/* Percent-encodes s as S3 wants it in a path (slash kept when keep_slash)
 * or a query value: every byte but A-Z a-z 0-9 - _ . ~. Returns the
 * length written (without the NUL), or -ENAMETOOLONG when buf is short. */
int objstore_encode(const char *s, int keep_slash, char *buf, size_t len);

#endif

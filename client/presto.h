/*
 * libprestoclient: the public C API of presto.
 *
 * A trainer connects to prestod, opens an epoch stream and pulls batches:
 *
 *     presto_t *p;
 *     if (presto_connect(NULL, &p) < 0) ...;       // default socket
 *     presto_stream_opts_t o;
 *     presto_stream_opts_init(&o);
 *     o.dataset = "imagenet"; o.batch_size = 64; o.epoch = e;
 *     presto_stream_t *s;
 *     if (presto_stream_open(p, &o, &s) < 0) fprintf(stderr, "%s\n", presto_errmsg(p));
 *     presto_batch_t b;
 *     int rc;
 *     while ((rc = presto_next(s, &b)) > 0) {
 *         ... b.data is b.n x b.h x b.w x b.c uint8 (NHWC), b.labels[b.n] ...
 *         presto_release(s, &b);
 *     }
 *     if (rc < 0) fprintf(stderr, "%s\n", presto_stream_errmsg(s));
 *     presto_stream_close(s);
 *     presto_close(p);
 *
 * Every function that can fail returns 0 (or a positive count) on success
 * and a negative PRESTO_E_* code on failure; presto_strerror() names the
 * code and presto_errmsg()/presto_stream_errmsg() give the full message,
 * including the daemon's own text when the daemon refused the request.
 * Handles are not thread-safe; use one per thread.
 */
#ifndef PRESTO_H
#define PRESTO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PRESTO_VERSION_STRING "0.1.0"

/* Error codes (returned negated). */
enum {
    PRESTO_OK = 0,
    PRESTO_E_PROTO = 1,     /* malformed message */
    PRESTO_E_VERSION = 2,   /* protocol version mismatch */
    PRESTO_E_TOOBIG = 3,    /* message exceeds a limit */
    PRESTO_E_NODATASET = 4, /* unknown dataset */
    PRESTO_E_INVAL = 5,     /* bad argument */
    PRESTO_E_LIMIT = 6,     /* daemon limit reached */
    PRESTO_E_SAMPLE = 7,    /* bad sample with on_error: fail */
    PRESTO_E_SHUTDOWN = 8,  /* daemon shutting down */
    PRESTO_E_IO = 9,        /* cannot connect, or connection lost */
    PRESTO_E_NOMEM = 10,
    PRESTO_E_INTERNAL = 11,
    PRESTO_E_DENIED = 12,   /* an admin operation and the caller is no admin */
};

enum { PRESTO_DTYPE_U8 = 1, PRESTO_DTYPE_F32 = 2 };
/* Element order of a sample: u8 output is NHWC; float output follows the
 * last step's layout (normalize/to_float `layout:`). */
enum { PRESTO_LAYOUT_NHWC = 0, PRESTO_LAYOUT_NCHW = 1 };
/* How batches reach the client. AUTO: shared memory where the daemon can
 * give it, else the socket ($PRESTO_TRANSPORT=shm|socket overrides AUTO).
 * SHM: shared memory or an error. SOCKET: batches copied through the
 * socket. */
enum { PRESTO_TRANSPORT_AUTO = 0, PRESTO_TRANSPORT_SHM = 1, PRESTO_TRANSPORT_SOCKET = 2 };

typedef struct presto presto_t;
typedef struct presto_stream presto_stream_t;

typedef struct presto_stream_opts {
    const char *dataset;  /* required: a dataset name from the daemon's config */
    uint32_t batch_size;  /* default 64 */
    uint64_t seed;        /* default 0 */
    uint64_t epoch;       /* default 0 */
    uint32_t rank;        /* default 0 */
    uint32_t world;       /* default 1 (DistributedSampler semantics) */
    int shuffle;          /* default 1 */
    int drop_last;        /* default 0: the last batch may be short */
    uint32_t prefetch;    /* batches prepared ahead; 0 = daemon default; with
                             shared memory also the ring's slots (at least 2) */
    uint32_t transport;   /* PRESTO_TRANSPORT_*, default AUTO */
    int manual_release;   /* default 0: presto_next releases the batch it
                             returned before; 1: every batch stays valid until
                             presto_release (several may be held; holding all
                             of a ring's slots stalls the stream, and the
                             daemon drops a client that releases none for its
                             release_timeout) */
} presto_stream_opts_t;

typedef struct presto_batch {
    uint64_t index;        /* batch number within this rank's epoch */
    uint32_t n, h, w, c;   /* samples, then each sample's height, width, channels */
    uint32_t dtype;        /* PRESTO_DTYPE_* */
    const void *data;      /* n samples of h*w*c elements in `layout` order,
                              valid until release: with shared memory a view
                              of the daemon's ring (no copy; writable, the
                              client's own until released) */
    size_t size;           /* bytes at data */
    const int64_t *labels; /* n labels, valid until release */
    uint32_t layout;       /* PRESTO_LAYOUT_* */
    uint32_t slot_;        /* internal: ring slot + 1, 0 for none */
    void *own_;            /* internal: a buffer release frees */
} presto_batch_t;

typedef struct presto_stream_info {
    uint64_t samples;  /* at most this many samples this epoch (bad samples
                          skipped by the daemon are not sent) */
    uint64_t batches;  /* at most this many batches this epoch */
    uint32_t h, w, c, dtype;
    uint32_t layout;    /* PRESTO_LAYOUT_* */
    uint32_t transport; /* PRESTO_TRANSPORT_SHM or _SOCKET: what the stream uses */
    uint32_t slots;     /* shared memory: the ring's slots */
} presto_stream_info_t;

/* The socket prestod listens on by default: $PRESTO_SOCKET, else
 * $XDG_RUNTIME_DIR/presto/prestod.sock, else /tmp/presto-$UID/prestod.sock.
 * Returns a static buffer. */
const char *presto_default_socket(void);

const char *presto_strerror(int code); /* accepts code or -code */
const char *presto_version(void);

/* path NULL means presto_default_socket(). On failure *out is still set
 * (unless NULL could not be allocated) so presto_errmsg() can explain; close
 * it with presto_close(). */
int presto_connect(const char *path, presto_t **out);
void presto_close(presto_t *p);
const char *presto_errmsg(const presto_t *p);

/* JSON documents; the caller frees *json with free(). */
int presto_stats(presto_t *p, char **json);
int presto_datasets(presto_t *p, char **json);

/* Admin operations: the daemon answers them only for root, its own user,
 * or members of its admin_group, and returns -PRESTO_E_DENIED to anyone
 * else. */
/* Re-reads the daemon's config file (as SIGHUP). *report (free() it) is
 * a JSON document of what changed: {"config", "datasets", "changed",
 * "restart_needed", "added", "replaced", "removed"}. A config that does not
 * load gives -PRESTO_E_INVAL, the daemon's "FILE:LINE: key 'K': what" in
 * presto_errmsg(), and the daemon keeps its running configuration. */
int presto_reload(presto_t *p, char **report);
/* Empties the daemon's memory tier (the disk tier stays). *report (free()
 * it): {"entries": N, "bytes": N} dropped. */
int presto_drop_cache(presto_t *p, char **report);

/* Progress of a warm. */
typedef struct presto_progress {
    uint64_t done;     /* samples handled so far, bad ones included */
    uint64_t total;    /* samples of the dataset */
    uint64_t bytes;    /* materialized bytes of the good ones */
    uint64_t failed;   /* bad samples (skipped, counted, logged by the daemon) */
    uint64_t computed; /* samples that had to be computed (the rest were cached) */
} presto_progress_t;

typedef void (*presto_progress_fn)(const presto_progress_t *progress, int final, void *arg);

/* Materializes a whole dataset through its offline steps into the daemon's
 * cache tiers (disk, and memory as its policy admits), ahead of training.
 * Blocks until it is done, calling cb (if not NULL) with each progress
 * report the daemon sends (about ten a second), and a last time with
 * final = 1. Runs on a connection of its own. Returns 0, or a negative
 * code (-PRESTO_E_LIMIT: that dataset is being warmed already). */
int presto_warm(presto_t *p, const char *dataset, presto_progress_fn cb, void *arg);

void presto_stream_opts_init(presto_stream_opts_t *o);
/* Opens a stream on its own connection to the daemon. */
int presto_stream_open(presto_t *p, const presto_stream_opts_t *o,
                       presto_stream_t **out);
int presto_stream_info(const presto_stream_t *s, presto_stream_info_t *info);
/* 1: *b holds the next batch; 0: the epoch is complete; <0: error. The batch
 * stays valid until presto_release() or (without manual_release) the next
 * presto_next(). */
int presto_next(presto_stream_t *s, presto_batch_t *b);
/* Gives the batch back (with shared memory its slot returns to the daemon)
 * and clears *b. Releasing a cleared batch does nothing. */
void presto_release(presto_stream_t *s, presto_batch_t *b);
/* Samples skipped by the daemon as bad (known once presto_next returned 0). */
uint64_t presto_stream_skipped(const presto_stream_t *s);
const char *presto_stream_errmsg(const presto_stream_t *s);
/* Stops the stream early if it is still running, and frees it. While its
 * presto_t is open, a shared-memory stream that completed keeps its
 * connection and ring for the next stream this process opens to the same
 * daemon (the daemon reuses the ring, which saves mapping and faulting in a
 * fresh one every epoch); presto_close lets go of what its streams kept. */
void presto_stream_close(presto_stream_t *s);

#ifdef __cplusplus
}
#endif
#endif

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
 *         ... b.data is b.n x b.h x b.w x b.c uint8 (NHWC), b.labels[b.n]
 *             (or, for a dataset with mixup/cutmix, b.label_data: b.n x
 *             b.label_classes float32 soft targets; see "Labels") ...
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
    PRESTO_E_INTR = 13,     /* a signal arrived while presto_next waited (only for
                               streams opened with interruptible = 1); nothing is
                               lost: call presto_next again */
};

/* I64: labels and lengths (no sample is int64). */
enum { PRESTO_DTYPE_U8 = 1, PRESTO_DTYPE_F32 = 2, PRESTO_DTYPE_I16 = 3, PRESTO_DTYPE_I64 = 4 };
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
                             shared memory also the ring's slots (at least 2);
                             the daemon may grant fewer to stay within its
                             memory budget (presto_stream_prefetch says) */
    uint32_t transport;   /* PRESTO_TRANSPORT_*, default AUTO */
    int manual_release;   /* default 0: presto_next releases the batch it
                             returned before; 1: every batch stays valid until
                             presto_release (several may be held; holding all
                             of a ring's slots stalls the stream, and the
                             daemon drops a client that releases none for its
                             release_timeout, unless copy_when_full); over the
                             socket each batch held has a buffer of its own, and
                             the stream keeps up to 4 released ones for the
                             batches after it (freed with the stream) */
    uint64_t start_batch; /* default 0: resume the epoch at this batch; the
                             daemon computes nothing before it and sends the
                             uninterrupted stream's batches from it on, with
                             their indices (exact unless samples before it were
                             skipped as bad); at or past the end: no batches.
                             Compare info.fingerprint with the one saved. */
    int copy_when_full;   /* with manual_release and shared memory: a batch that
                             arrives while the client holds every other slot of
                             the ring is copied into memory of its own and its
                             slot given back at once (counted in info.copies and
                             by the daemon), so a client that keeps batches never
                             stalls its stream; the batches of a loop that
                             releases them stay views of the ring */
    int interruptible;    /* 1: presto_next returns -PRESTO_E_INTR when a signal
                             handler ran while it waited for the next batch (as
                             Python needs to see Ctrl-C); 0 (default): it waits on */
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
    const int64_t *labels; /* n int64 labels, valid until release; NULL when the
                              labels are soft targets (label_dtype F32) */
    uint32_t layout;       /* PRESTO_LAYOUT_* */
    uint32_t slot_;        /* internal: ring slot + 1, 0 for none */
    void *own_;            /* internal: a buffer release frees */
    /* Labels: the label tensor, valid until release (see presto_batch_label_*) */
    const void *label_data; /* int64 [n] (== labels), or float32 [n, label_classes] */
    uint32_t label_dtype;   /* PRESTO_DTYPE_I64 or PRESTO_DTYPE_F32 */
    uint32_t label_classes; /* 0: int64 [n]; K: float32 [n, K] soft targets */
    const int64_t *lengths; /* n lengths (samples padded to the batch's longest),
                               or NULL when the dataset has none */
} presto_batch_t;

typedef struct presto_stream_info {
    uint64_t samples;  /* at most this many samples this epoch (bad samples
                          skipped by the daemon are not sent) */
    uint64_t batches;  /* at most this many batches this epoch */
    uint32_t h, w, c, dtype;
    uint32_t layout;    /* PRESTO_LAYOUT_* */
    uint32_t transport; /* PRESTO_TRANSPORT_SHM or _SOCKET: what the stream uses */
    uint32_t slots;     /* shared memory: the ring's slots */
    uint64_t dataset_samples; /* the whole dataset's samples (0: the daemon did not say) */
    uint64_t fingerprint; /* the dataset's files, labels and steps (0: the daemon did
                             not say): a saved position resumes only on the same */
    uint64_t copies;    /* batches copied so far under copy_when_full */
    /* The label tensor every batch of the stream carries (see "Labels"). */
    uint32_t label_dtype;   /* PRESTO_DTYPE_I64 or PRESTO_DTYPE_F32 */
    uint32_t label_classes; /* 0: int64 [n]; K: float32 [n, K] soft targets */
    int has_lengths;        /* 1: batches carry an int64 [n] lengths tensor */
} presto_stream_info_t;

/* The socket prestod listens on by default: $PRESTO_SOCKET, else
 * $XDG_RUNTIME_DIR/presto/prestod.sock, else /tmp/presto-$UID/prestod.sock.
 * Returns a static buffer. */
const char *presto_default_socket(void);

const char *presto_strerror(int code); /* accepts code or -code */
const char *presto_version(void);

/* path NULL means presto_default_socket(). On failure *out is still set
 * (unless NULL could not be allocated) so presto_errmsg() can explain; close
 * it with presto_close(). Every connection checks who answers (SO_PEERCRED):
 * root, this process's user, or the user who alone owns the socket's
 * directory (nobody else may write to it or to a directory on the way, and
 * what is taken from a sticky one like /tmp is root's); anyone else is
 * refused with -PRESTO_E_DENIED, unless the environment has
 * PRESTO_TRUST_ANY_PEER=1. */
int presto_connect(const char *path, presto_t **out);
void presto_close(presto_t *p);
const char *presto_errmsg(const presto_t *p);

/* JSON documents; the caller frees *json with free(). */
int presto_stats(presto_t *p, char **json);
int presto_datasets(presto_t *p, char **json);
/* The stats in Prometheus's text exposition format (0.0.4): the same
 * counters and gauges as presto_stats; the caller frees *text. */
int presto_stats_prometheus(presto_t *p, char **text);

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

/* ---- the strategy profiler (an admin operation) ---- */

typedef struct presto_profile_opts {
    const char *dataset; /* required */
    uint32_t samples;    /* sample size; 0: the daemon's (profile.samples, else
                            2% of the dataset, 64 to 300) */
    double w_throughput, w_offline, w_storage; /* objective weights, >= 0; all 0
                            (the default): throughput only */
    int apply;           /* a split: auto dataset records (and uses) the winner */
    int verify;          /* then each strategy's real epochs on the whole dataset
                            (presto_profile_strategy_t's verified fields) */
    uint32_t verify_top; /* with verify: only the K best (0: every strategy) */
    uint32_t batch_size; /* the epochs' batch, which the online trial runs
                            (0: the daemon's default, 64) */
} presto_profile_opts_t;

typedef struct presto_profile_progress {
    uint32_t strategy, strategies; /* the one being measured, of how many */
    const char *name;              /* e.g. "center_crop/zstd:3" */
    const char *phase;             /* "offline", "load", "memory", "disk", "done" */
    double fraction;               /* of the whole profile, 0..1 */
    double eta_s;                  /* seconds left, -1 when not known yet */
} presto_profile_progress_t;

typedef void (*presto_profile_progress_fn)(const presto_profile_progress_t *progress,
                                           void *arg);

/* One strategy: measured on the sample (rates on profile_workers workers),
 * then extrapolated to the dataset on every worker. */
typedef struct presto_profile_strategy {
    char name[64];        /* "none" (everything online), "STEP/raw", "STEP/zstd:N" */
    uint32_t split;       /* steps run offline */
    char last_step[32];   /* the last of them ("" for none) */
    int zstd_level;       /* disk tier encoding, 0: raw */
    uint32_t samples, failed;   /* sample images measured, bad ones */
    double offline_s;           /* worker seconds per sample: read, offline steps,
                                   encode, store */
    double stored_bytes;        /* disk tier bytes per sample (record headers in) */
    double raw_bytes;           /* memory tier bytes per sample (split 0: source) */
    double memory_rate, disk_rate;   /* samples/s of warm epochs from each tier
                                        (median of repetitions, wall clock) */
    double memory_cpu_s, disk_cpu_s; /* CPU seconds per sample online */
    double total_offline_s, total_bytes; /* for the whole dataset */
    double memory_fraction;     /* of the dataset the memory budget holds */
    double epoch_memory_s, epoch_disk_s; /* an epoch from each tier */
    double expected_rate, expected_epoch_s; /* with that memory fraction */
    double score;               /* the objective (-1: not feasible) */
    double cold_rate;           /* samples/s of the first epoch (nothing cached yet) */
    double memory_spread, disk_spread, cold_spread; /* how far repetitions scattered:
                                   half their range over the median (0.1: +-10%) */
    int fits_memory, fits_disk, feasible; /* feasible: fits the disk budget */
    uint32_t rank;              /* 1: the winner */
    /* With opts.verify: real epochs of the whole dataset on the daemon's
     * workers, after the profile (verified 0: not run, verify_note says why). */
    int verified;
    uint32_t verified_samples;  /* delivered by the first epoch */
    double measured_cold_rate, measured_memory_rate, measured_disk_rate; /* samples/s */
    double measured_memory_fraction; /* of the dataset the memory epoch read from memory
                                        (the trial tier has profile.memory bytes) */
    double measured_bytes;      /* stored on disk after the first epoch */
    double verify_seconds;
    char verify_note[128];
    /* How far a real epoch may be from each predicted rate (0.45: +-45%):
     * the repetitions' spread combined with the model's own error for that
     * kind of figure (what the table prints after +-). */
    double memory_interval, disk_interval, cold_interval;
} presto_profile_strategy_t;

enum {
    PRESTO_APPLIED_NO = 0,        /* not asked (or not a split: auto dataset) */
    PRESTO_APPLIED_NOW = 1,       /* the dataset switched to the winner */
    PRESTO_APPLIED_RESTART = 2,   /* recorded; in force from the daemon's next start */
    PRESTO_APPLIED_UNCHANGED = 3, /* the winner was in force already */
};

typedef struct presto_profile_result {
    char dataset[256];
    uint64_t samples;            /* of the dataset */
    uint32_t sample_size;        /* samples profiled */
    uint32_t workers, profile_workers;
    uint64_t memory_budget;
    uint64_t disk_budget;        /* 0: no disk tier */
    double w_throughput, w_offline, w_storage;
    double seconds;              /* the profile's run time */
    uint32_t winner;             /* index into strategies */
    int applied;                 /* PRESTO_APPLIED_* */
    uint32_t count;
    presto_profile_strategy_t *strategies;
    int verify;                  /* opts.verify: the strategies' verified fields are set */
    /* The disk behind the disk and cold rates (0: not measured, or a daemon
     * that does not say): the probe's sustained O_DIRECT reads and
     * written-back writes in cache.dir (bytes/s) on disk_probe_bytes with
     * disk_probe_depth reads in flight; the trials' own segments'
     * write-back (bytes/s); seconds per sample the sample's source files
     * took to read from the disk, read ahead; admission to memory, bytes/s. */
    double disk_read_bw, disk_write_bw, disk_probe_bytes;
    uint32_t disk_probe_depth;
    double writeback_bw, source_s_per_sample, admit_bw;
} presto_profile_result_t;

void presto_profile_opts_init(presto_profile_opts_t *o);
/* Measures every legal strategy (split point x disk encoding) of a dataset
 * on a sample, on the running daemon, and ranks them. Blocks until done,
 * calling cb (if not NULL) with each progress report (about ten a second).
 * Runs on a connection of its own. Returns 0 with *out to free with
 * presto_profile_free(), or a negative code (-PRESTO_E_LIMIT: a profile
 * runs already; -PRESTO_E_DENIED: not an admin). */
int presto_profile(presto_t *p, const presto_profile_opts_t *o, presto_profile_progress_fn cb,
                   void *arg, presto_profile_result_t **out);
void presto_profile_free(presto_profile_result_t *r);

void presto_stream_opts_init(presto_stream_opts_t *o);
/* Opens a stream on its own connection to the daemon. */
int presto_stream_open(presto_t *p, const presto_stream_opts_t *o,
                       presto_stream_t **out);
int presto_stream_info(const presto_stream_t *s, presto_stream_info_t *info);
/* The prefetch the daemon granted this stream, on either transport: the one
 * asked for (or the daemon's default), or lower where the daemon's client
 * memory budget (limits.client_memory, limits.user_memory) could not hold
 * it, never below 2 unless 1 was asked; with shared memory the ring's
 * slots. 0: a daemon too old to say. */
uint32_t presto_stream_prefetch(const presto_stream_t *s);
/* 1: *b holds the next batch; 0: the epoch is complete; <0: error. The batch
 * stays valid until presto_release() or (without manual_release) the next
 * presto_next(). When the daemon goes away, the error says what it said, or
 * that it closed the connection, on either transport. */
int presto_next(presto_stream_t *s, presto_batch_t *b);
/* Gives the batch back (with shared memory its slot returns to the daemon)
 * and clears *b. Releasing a cleared batch does nothing. With manual_release
 * it may be called from any thread, also while another is in presto_next
 * on the same stream, and after presto_stream_close (see there). */
void presto_release(presto_stream_t *s, presto_batch_t *b);
/*
 * Labels. A batch carries a label tensor: int64 [n] class indices, or, for a
 * dataset whose steps end with mixup or cutmix, float32 [n, K] soft targets
 * (K = the steps' num_classes; each row sums to 1), as torchvision's
 * reference training scripts make them; and, for variable-length samples
 * padded to the longest in the batch, an int64 [n] lengths tensor beside it.
 * The format is the dataset's, the same for every batch of a stream
 * (presto_stream_info's label_dtype, label_classes, has_lengths). A daemon
 * from before label tensors sends int64 [n] labels without lengths.
 */
/* PRESTO_DTYPE_I64 or PRESTO_DTYPE_F32. */
uint32_t presto_batch_label_dtype(const presto_batch_t *b);
/* The label tensor's shape into shape[0..rank): [n] or [n, K]; returns the
 * rank (1 or 2). */
uint32_t presto_batch_label_shape(const presto_batch_t *b, uint64_t shape[2]);
/* The label tensor's elements (row-major), valid until release. */
const void *presto_batch_label_data(const presto_batch_t *b);
/* The n lengths, or NULL when the stream's dataset has none. */
const int64_t *presto_batch_lengths(const presto_batch_t *b);

/* Samples skipped by the daemon as bad (known once presto_next returned 0). */
uint64_t presto_stream_skipped(const presto_stream_t *s);
const char *presto_stream_errmsg(const presto_stream_t *s);
/* Stops the stream early if it is still running, and frees it. While its
 * presto_t is open, a shared-memory stream that completed keeps its
 * connection and ring for the next stream this process opens to the same
 * daemon (the daemon reuses the ring, which saves mapping and faulting in a
 * fresh one every epoch); presto_close lets go of what its streams kept.
 * With manual_release, batches still held stay valid: the stream stops at
 * once, and s lives on for their presto_release, the last of which frees
 * it (and only then may its ring be kept). */
void presto_stream_close(presto_stream_t *s);

/* Process-wide hooks on shared-memory rings: mapped(base, len, arg) right
 * after libprestoclient maps one, unmapping(base, len, arg) right before it
 * unmaps one, from whichever thread does it. For registering a ring with a
 * GPU driver once (cudaHostRegister), so that copies out of batches are
 * truly asynchronous. Set before streams open; NULLs remove them. Rings
 * mapped before the call are not reported. */
typedef void (*presto_ring_fn)(void *base, size_t len, void *arg);
void presto_set_ring_hooks(presto_ring_fn mapped, presto_ring_fn unmapping, void *arg);

#ifdef __cplusplus
}
#endif
#endif

/*
 * The I/O backend: reads with many in flight per worker thread.
 *
 * One struct io_ring per worker thread, created by (or for) that thread and
 * never shared: it takes no locks. Requests are queued with io_submit() in
 * the order they will be needed; the ring keeps up to `depth` of them in
 * the kernel at once (io_uring), in that order, and the rest wait their
 * turn. io_poll() hands what is queued to the kernel and takes completions
 * without blocking (the caller does it between pieces of CPU work);
 * io_wait() blocks until one request is done, keeping the ring full
 * meanwhile. io_read_batch() is the simple form: queue n reads, wait for all.
 * Reads of files not in the page cache are then done by the kernel's io-wq
 * threads in parallel (the ring raises their limit to its depth), so one
 * worker keeps `depth` reads in flight (what network file systems and SSDs
 * need) without threads of its own.
 *
 * A request is a plain read (path NULL: len bytes at off of fd, short reads
 * resumed), or a whole small file (path set: the file path, relative to the
 * directory fd (or AT_FDCWD), is opened, its size and mtime taken, up to len
 * bytes read from its start, and closed). Where the kernel allows (io_uring
 * with direct descriptors, 5.19+), a file is one chain of four linked
 * requests: STATX(path) -> OPENAT(direct slot) -> READ(fixed slot) -> CLOSE,
 * so it costs the worker one submission and no file descriptor. The stat
 * comes first so that a file replaced meanwhile pairs newer bytes with older
 * metadata, never the reverse (the disk tier keys records by size and
 * mtime). Otherwise ("staged") OPENAT goes alone, then fstat, then READ of
 * the file's size, then close; with the pread backend all of it is done in
 * order on the calling thread when the request is waited for.
 *
 * Where the kernel refuses io_uring (ENOSYS on old kernels, EPERM from a
 * seccomp filter or kernel.io_uring_disabled, ENOMEM from RLIMIT_MEMLOCK on
 * kernels before 5.12) the ring falls back to pread on the calling thread;
 * parallelism then comes from the worker threads. The reason is written
 * into `why` once, for the daemon to log, and io_ring_backend() names the
 * backend for stats. Environment variable PRESTO_IO=pread forces the
 * fallback (tests run both backends with it), PRESTO_IO=nochain keeps
 * io_uring but reads files staged; PRESTO_IO=io_uring or unset means "try
 * io_uring with chains".
 *
 * Counters are written by the owning thread only and may be read with
 * io_ring_stats() from any thread at any time (relaxed atomics), for the
 * "io in flight" gauge, the latency histograms and totals in stats.
 */
#ifndef PRESTO_IO_H
#define PRESTO_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IO_DEFAULT_DEPTH 128u
#define IO_MAX_DEPTH 4096u

/* io_ring_create flags */
#define IO_FORCE_PREAD 0x1u /* never try io_uring */
#define IO_NO_CHAIN 0x2u    /* io_uring, but files are read staged, not chained */
#define IO_NO_SYNC 0x4u     /* never block the calling thread: see IO_DEFERRED */

/* IO_NO_SYNC rings (an event loop's) never read, open or wait on the
 * calling thread: a request that would need it there (any request on the
 * pread backend, a file when files are not chained, the rest of a short
 * read, a link checked below the root) ends with res IO_DEFERRED instead,
 * for its owner to submit again on a ring that may block (a worker's). */
#define IO_DEFERRED (-EAGAIN)

/* Which step of a file request failed (io_req.failed). */
enum io_step { IO_STEP_NONE = 0, IO_STEP_OPEN, IO_STEP_STAT, IO_STEP_READ };
/* Where a request is (io_req.state). */
enum io_state { IO_S_IDLE = 0, IO_S_QUEUED, IO_S_ACTIVE, IO_S_DONE };

struct io_ring;

/* One request. The caller sets fd, buf, len and off (the first four
 * fields, in this order, so that `(struct io_req){fd, buf, len, off, 0}`
 * is a plain read) and path, and keeps the struct, buf and path alive and
 * unmoved until the request is done. On completion res is the number of bytes read
 * (less than len only when the file ends first; 0 at or past EOF), or
 * -errno (-EBADF, -EIO, -ENOENT, ..., -ECANCELED for io_cancel) when it
 * failed; bytes already read then count for nothing. A file request also
 * gets the file's size and mtime as opened (valid when res >= 0) and, when
 * it failed, the step that failed. The fields after `failed` are the
 * ring's. */
struct io_req {
    int fd;          /* plain: the file; path: the directory (or AT_FDCWD) */
    void *buf;
    size_t len;
    uint64_t off;    /* plain reads only */
    ssize_t res;
    const char *path; /* NULL: a plain read (io_read_batch sets it so) */
    const char *real_root; /* path: the resolved directory the file must not
                              leave (no link out of it, RESOLVE_BENEATH);
                              NULL: follow links anywhere */
    /* plain: fd is O_DIRECT (off, len and buf aligned): a short read is the
     * end of the file, not resumed (the rest would start unaligned) */
    uint8_t direct;
    /* Called on the ring's thread as the request becomes done (NULL: no
     * call); it must not use the ring. arg is the caller's. */
    void (*on_done)(struct io_req *q);
    void *arg;
    uint64_t size;    /* path: st_size of the file read */
    int64_t mtime_ns; /* path: its st_mtime */
    uint8_t failed;   /* path, res < 0: enum io_step */
    /* the ring's */
    uint8_t state, phase, cqes, retry;
    uint32_t slot;
    int ofd;
    size_t rlen;
    uint64_t t0_ns;
    struct io_req *prev, *next;
};

/* Latency histogram: log-linear buckets of microseconds, exact below 8,
 * then IO_LAT_SUB per power of two (12.5% wide) over IO_LAT_OCTAVES
 * powers, up to 2^31 us; longer ones land in the last bucket. */
#define IO_LAT_SUB 8u
#define IO_LAT_OCTAVES 28u
#define IO_LAT_BUCKETS (IO_LAT_SUB * (IO_LAT_OCTAVES + 1)) /* 232 */

struct io_lat {
    uint64_t count, sum_us, max_us;
    uint64_t b[IO_LAT_BUCKETS];
};

struct io_stats {
    uint64_t batches;       /* io_read_batch calls */
    uint64_t reads;         /* requests completed, failed ones included */
    uint64_t submitted;     /* reads handed to the kernel: SQEs or pread calls */
    uint64_t bytes;         /* bytes read */
    uint64_t errors;        /* requests that ended with res < 0 */
    uint64_t short_reads;   /* resubmissions for the rest of a short read */
    uint64_t fixed_reads;   /* reads into a registered buffer (READ_FIXED) */
    uint64_t buffers;       /* gauge: buffers registered (io_ring_buf_register) */
    uint64_t buffers_refused; /* registrations refused */
    uint64_t deferred;      /* IO_NO_SYNC: requests ended with IO_DEFERRED */
    uint64_t in_flight;     /* gauge: requests in the kernel right now */
    uint64_t max_in_flight; /* the most there ever were at once */
    /* whole-file requests (source files), counted in the above too */
    uint64_t files, file_bytes, file_errors;
    uint64_t files_in_flight;   /* gauge */
    uint64_t files_chained;     /* read with one STATX+OPENAT+READ+CLOSE chain */
    uint64_t files_staged;      /* with OPENAT, fstat, READ, close */
    uint64_t files_sync;        /* on the calling thread (pread, fallbacks) */
    uint64_t file_bytes_per_s;  /* file bytes completed in the last full second */
    uint64_t file_busy_ns;      /* time with at least one file request in flight */
    struct io_lat read_lat;     /* plain reads: submission to completion */
    struct io_lat file_lat;     /* file requests: the whole open+read+close */
};

/* Creates a ring of `depth` entries (0: IO_DEFAULT_DEPTH; at most
 * IO_MAX_DEPTH). Tries io_uring unless flags has IO_FORCE_PREAD or
 * PRESTO_IO=pread; when it is refused, or granted only with a smaller depth
 * (ENOMEM: the depth is halved down to 8 before giving up), or files cannot
 * be chained, a one-line reason goes to why (if why is not NULL; why[0] is
 * '\0' when there is nothing to say). Returns 0, or -ENOMEM when the struct
 * itself cannot be allocated; a refused io_uring is not an error. */
int io_ring_create(struct io_ring **out, unsigned depth, unsigned flags, char *why,
                   size_t whylen);
/* Waits for whatever is still in the kernel; requests queued and never
 * started end with -ECANCELED (their on_done is called). NULL is fine. */
void io_ring_destroy(struct io_ring *r);
/* io_uring signals efd (an eventfd) whenever a completion arrives, for an
 * event loop that then calls io_poll(). 0, or -errno (-EOPNOTSUPP on the
 * pread backend). */
int io_ring_eventfd(struct io_ring *r, int efd);
/* "io_uring" or "pread" (a static string). */
const char *io_ring_backend(const struct io_ring *r);
/* How file requests are read: "chained", "staged" or "sync". */
const char *io_ring_files_mode(const struct io_ring *r);
unsigned io_ring_depth(const struct io_ring *r);

/* Registers [base, base + len) with r's kernel ring (io_uring only), pinning
 * its pages once: a later plain read whose buffer lies inside it is a
 * READ_FIXED, which pins nothing per read (O_DIRECT's per-read page pinning
 * otherwise). At most IO_BUFS at once (a worker's two arenas; the read-ahead's
 * kept and armed ones). Returns the buffer's index, or -errno
 * (counted in buffers_refused: -EOPNOTSUPP on the pread backend or a kernel
 * without sparse buffer tables, -ENOMEM or -EPERM past RLIMIT_MEMLOCK,
 * -ENOSPC when all are taken); the reads then go as before. A ring refused
 * for any reason but -ENOSPC does not ask the kernel again. The owner's
 * thread only, like io_submit. */
#define IO_BUFS 16
int io_ring_buf_register(struct io_ring *r, void *base, size_t len);
/* A buffer for reads, aligned to align (a power of two: O_DIRECT's block),
 * freed with free(); NULL: out of memory. With huge, one of IO_HUGE_PAGE
 * bytes or more is IO_HUGE_PAGE aligned and asked onto transparent huge
 * pages (madvise: a hint; refused, the buffer is as without): the kernel's
 * copy of a buffered read into it and a pass over it walk 2 MiB pages, not
 * 4 KiB ones (fewer TLB misses), and an O_DIRECT read into it is one or two
 * physical segments where scattered 4 KiB pages make up to 38 of a 150 KB
 * record (a virtio disk without indirect descriptors takes few such
 * requests at once: make bench's center_crop/zstd:1 disk epochs ran at
 * 9.3k samples/s against 13-15k on huge pages). */
#define IO_HUGE_PAGE ((size_t)2 << 20)
void *io_buf_alloc(size_t size, size_t align, int huge);
/* Unregisters the buffer at base, if registered (a no-op otherwise); must
 * come before its memory is freed, or a later allocation at that address
 * would be read into the old pages. Reads already in the kernel finish into
 * it (the kernel keeps it until they do). */
void io_ring_buf_unregister(struct io_ring *r, const void *base);
/* Whether the buffer at base is registered with r. */
int io_ring_buf_registered(const struct io_ring *r, const void *base);

/* Queues q behind what is queued already (it is not done yet). Nothing
 * reaches the kernel before the next io_poll, io_wait or io_read_batch.
 * (An IO_NO_SYNC ring on the pread backend defers q at once.) */
void io_submit(struct io_ring *r, struct io_req *q);
/* Hands queued requests to the kernel as the depth allows and takes the
 * completions there are, without blocking. */
void io_poll(struct io_ring *r);
/* Blocks until q (submitted to r) is done; other requests go on meanwhile.
 * Returns q->res. */
ssize_t io_wait(struct io_ring *r, struct io_req *q);
/* Takes back a request not needed any more: one still queued is dropped,
 * one in the kernel is waited for. q is done (res -ECANCELED when it had
 * not started) and may be reused. */
void io_cancel(struct io_ring *r, struct io_req *q);
static inline int io_done(const struct io_req *q)
{
    return q->state == IO_S_DONE;
}

/* Reads every request of reqs[0..n) as a plain read (path is set to NULL)
 * and sets each one's res. At most the ring's depth are in flight at once;
 * a request's res is final when this returns, whatever the order of
 * completion. If the kernel fails the ring itself (not a single read)
 * mid-batch, the ring waits for what is in flight, switches to pread for
 * good (logging once) and finishes the batch. Returns the number of
 * requests whose res < 0 (so 0 when every read worked, short reads at EOF
 * included). */
unsigned io_read_batch(struct io_ring *r, struct io_req *reqs, unsigned n);

/* The stats document's I/O fields, of a sum of rings' counters: the reads
 * (IO_STATS), their latency (section read_latency_us) and the whole-file
 * reads of source files (section source, with its own latency_us). */
#define IO_STATS(X)                                                                   \
    X(in_flight, GAUGE, "reads", "reads in the kernel now")                            \
    X(max_in_flight, GAUGE, "reads", "the most reads ever in the kernel at once")      \
    X(batches, COUNTER, "batches", "io_read_batch calls")                             \
    X(reads, COUNTER, "reads", "requests completed, failed ones included")             \
    X(submitted, COUNTER, "reads", "reads handed to the kernel (SQEs or pread calls)")  \
    X(bytes, COUNTER, "bytes", "bytes read")                                           \
    X(errors, COUNTER, "reads", "requests that failed")                                \
    X(short_reads, COUNTER, "reads", "resubmissions for the rest of a short read")     \
    X(fixed_reads, COUNTER, "reads", "reads into a registered buffer (READ_FIXED)")     \
    X(buffers, GAUGE, "buffers", "buffers registered with the rings now")               \
    X(buffers_refused, COUNTER, "buffers", "registrations refused (locked-memory limit, " \
      "old kernel, table full): their reads pin pages per read")
#define IO_LATENCY_STATS(X)                                                           \
    X(count, COUNTER, "reads", "requests timed")                                       \
    X(p50, GAUGE, "microseconds", "median time from submission to completion")       \
    X(p90, GAUGE, "microseconds", "90th percentile of that time")                     \
    X(p99, GAUGE, "microseconds", "99th percentile of that time")                     \
    X(max, GAUGE, "microseconds", "the longest")                                      \
    X(mean, GAUGE, "microseconds", "the mean")
#define IO_SOURCE_STATS(X)                                                            \
    X(files, COUNTER, "files", "source files read whole")                             \
    X(bytes, COUNTER, "bytes", "bytes of them")                                       \
    X(errors, COUNTER, "files", "source file reads that failed")                      \
    X(in_flight, GAUGE, "files", "source files being read now")                       \
    X(chained, COUNTER, "files", "read with one STATX, OPENAT, READ, CLOSE chain")     \
    X(staged, COUNTER, "files", "read with OPENAT, fstat, READ, close")               \
    X(sync, COUNTER, "files", "read on the calling thread (pread)")                   \
    X(bytes_per_s, GAUGE, "bytes per second", "source bytes read in the last full second", \
      "bytes_per_second")                                                              \
    X(busy_s, COUNTER, "seconds", "time with at least one source file being read",     \
      "busy_seconds")                                                                  \
    X(bytes_per_busy_s, GAUGE, "bytes per second", "source bytes over that time",      \
      "bytes_per_busy_second")
struct stats_out;
void io_stats_emit(struct stats_out *o, const struct io_stats *s);

/* A snapshot of r's counters; safe from any thread while r is alive. */
void io_ring_stats(const struct io_ring *r, struct io_stats *out);
/* Adds s into sum (gauges and rates summed, max_in_flight the larger,
 * histograms merged), for totals over the worker threads. */
void io_stats_add(struct io_stats *sum, const struct io_stats *s);
/* The q-quantile (0 < q <= 1) of a histogram in microseconds: the upper
 * edge of the bucket it falls in, at most the largest value seen; 0 when
 * empty. */
uint64_t io_lat_quantile(const struct io_lat *h, double q);

#endif

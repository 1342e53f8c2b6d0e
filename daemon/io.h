/*
 * The I/O backend: batched reads with many in flight per worker thread.
 *
 * One struct io_ring per worker thread, created by (or for) that thread and
 * never shared: it takes no locks. io_read_batch() hands all of a batch's
 * reads to the kernel at once through io_uring (keeping the ring full when
 * the batch is larger than the ring), waits for all of them, resubmits
 * short reads for the remainder, and reports each request's outcome in its
 * res field. Reads of files not in the page cache are then done by the
 * kernel's io-wq threads in parallel, so one worker keeps `depth` reads in
 * flight (what network file systems and SSDs need) without threads of its
 * own.
 *
 * Where the kernel refuses io_uring (ENOSYS on old kernels, EPERM from a
 * seccomp filter or kernel.io_uring_disabled, ENOMEM from RLIMIT_MEMLOCK on
 * kernels before 5.12) the ring falls back to a plain pread loop on the
 * calling thread; parallelism then comes from the worker threads. The
 * reason is written into `why` once, for the daemon to log, and
 * io_ring_backend() names the backend for stats. Environment variable
 * PRESTO_IO=pread forces the fallback (tests run both backends with it);
 * PRESTO_IO=io_uring or unset means "try io_uring".
 *
 * Counters are written by the owning thread only and may be read with
 * io_ring_stats() from any thread at any time (relaxed atomics), for the
 * "io in flight" gauge and totals in stats.
 */
#ifndef PRESTO_IO_H
#define PRESTO_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IO_DEFAULT_DEPTH 64u
#define IO_MAX_DEPTH 4096u

/* io_ring_create flags */
#define IO_FORCE_PREAD 0x1u /* never try io_uring */

struct io_ring;

/* One read: len bytes at offset off of fd into buf. On return from
 * io_read_batch, res is the number of bytes read (less than len only when
 * the file ends first; 0 at or past EOF), or -errno (-EBADF, -EIO, ...)
 * when the read failed; bytes already read then count for nothing. */
struct io_req {
    int fd;
    void *buf;
    size_t len;
    uint64_t off;
    ssize_t res;
};

struct io_stats {
    uint64_t batches;       /* io_read_batch calls */
    uint64_t reads;         /* requests completed, failed ones included */
    uint64_t submitted;     /* reads handed to the kernel: SQEs or pread calls */
    uint64_t bytes;         /* bytes read */
    uint64_t errors;        /* requests that ended with res < 0 */
    uint64_t short_reads;   /* resubmissions for the rest of a short read */
    uint64_t in_flight;     /* gauge: reads in the ring right now */
    uint64_t max_in_flight; /* the most there ever were at once */
};

/* Creates a ring of `depth` entries (0: IO_DEFAULT_DEPTH; at most
 * IO_MAX_DEPTH). Tries io_uring unless flags has IO_FORCE_PREAD or
 * PRESTO_IO=pread; when it is refused, or granted only with a smaller depth
 * (ENOMEM: the depth is halved down to 8 before giving up), a one-line
 * reason goes to why (if why is not NULL; why[0] is '\0' when there is
 * nothing to say). Returns 0, or -ENOMEM when the struct itself cannot be
 * allocated; a refused io_uring is not an error. */
int io_ring_create(struct io_ring **out, unsigned depth, unsigned flags, char *why,
                   size_t whylen);
/* Must not be called while io_read_batch runs; NULL is fine. */
void io_ring_destroy(struct io_ring *r);
/* "io_uring" or "pread" (a static string). */
const char *io_ring_backend(const struct io_ring *r);
unsigned io_ring_depth(const struct io_ring *r);

/* Reads every request of reqs[0..n) and sets each one's res. At most the
 * ring's depth are in flight at once; a request's res is final when this
 * returns, whatever the order of completion. If the kernel fails the ring
 * itself (not a single read) mid-batch, the ring waits for what is in
 * flight, switches to pread for good (logging once) and finishes the
 * batch. Returns the number of requests whose res < 0 (so 0 when every
 * read worked, short reads at EOF included). */
unsigned io_read_batch(struct io_ring *r, struct io_req *reqs, unsigned n);

/* A snapshot of r's counters; safe from any thread while r is alive. */
void io_ring_stats(const struct io_ring *r, struct io_stats *out);
/* Adds s into sum (in_flight summed, max_in_flight the larger), for
 * totals over the worker threads. */
void io_stats_add(struct io_stats *sum, const struct io_stats *s);

#endif

/* I/O backend: see io.h. */
#define _GNU_SOURCE
#include "io.h"
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "stats.h"

/* The kernel fills io_uring read buffers behind valgrind's back (it knows
 * read(2) and pread(2), not io_uring), so completed bytes are marked
 * defined for memcheck. A no-op outside valgrind, and without its header. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define io_mark_defined(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#endif
#endif
#ifndef io_mark_defined
#define io_mark_defined(p, n) ((void)(p), (void)(n))
#endif

/* One SQE reads at most this much; the rest goes as a short-read retry. */
#define IO_MAX_SQE_LEN (1u << 30)
/* The smallest depth tried when io_uring_queue_init reports ENOMEM. */
#define IO_MIN_DEPTH 8u
/* Submissions answered EAGAIN/EBUSY with nothing in flight to wait for are
 * retried this many times before the ring is given up. */
#define IO_MAX_BUSY_SPINS 1000
/* SQEs of one file chain: STATX, OPENAT, READ, CLOSE. */
#define IO_CHAIN_SQES 4u

enum io_backend { IO_URING, IO_PREAD };
enum io_files { IO_FILES_CHAIN, IO_FILES_STAGED, IO_FILES_SYNC };

/* The operation a CQE belongs to: the low 3 bits of its user_data (the
 * rest is the request's slot). */
enum io_op { OP_READ = 0, OP_STATX, OP_OPEN, OP_FREAD, OP_CLOSE, OP_SOPEN };
#define IO_UD(slot, op) (((uint64_t)(slot) << 3) | (op))

/* Staged file requests: what the one SQE in the kernel does. */
enum { PH_OPEN = 1, PH_READ = 2 };

struct io_ring {
    enum io_backend backend;
    enum io_files files;
    unsigned depth;
    int no_sync;     /* IO_NO_SYNC: never block, defer instead */
    int have_openat; /* staged: OPENAT works (else open(2) on this thread) */
    int have_openat2; /* OPENAT2 too (else files kept below a root open on this
                         thread) */
    struct io_uring ring; /* IO_URING only */
    struct io_req **act;  /* by slot: the request in the kernel, or NULL */
    uint32_t *free_slots;
    unsigned nfree;
    struct statx *stx;    /* by slot: a chain's STATX result */
    struct io_req *head, *tail; /* queued, not started: FIFO */
    unsigned active;      /* requests holding a slot */
    unsigned active_files;
    unsigned fds_open;    /* staged: files opened and not closed yet */
    uint64_t consumed, seen; /* SQEs the kernel took, CQEs taken back */
    uint64_t busy_since;  /* when active_files went from 0 to 1 (0: idle) */
    /* File bytes per second: this second's and the last one's. */
    uint64_t rate_sec, rate_cur, rate_prev;
    struct io_stats st;   /* written by the owner, read with relaxed loads */
    /* Registered buffers (io_ring_buf_register): 0 not tried yet, 1 the
     * sparse table is registered, -errno refused. */
    int bufs_state;
    struct { const uint8_t *base; size_t len; } bufs[IO_BUFS];
};

static uint64_t io_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- counters: one writer (the owner), readers anywhere ---- */

#define io_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define io_load(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define io_stat_add(r, field, v) io_store(&(r)->st.field, (r)->st.field + (v))

static void io_set_in_flight(struct io_ring *r)
{
    io_store(&r->st.in_flight, r->active);
    io_store(&r->st.files_in_flight, r->active_files);
    if (r->active > r->st.max_in_flight)
        io_store(&r->st.max_in_flight, r->active);
}

static unsigned lat_bucket(uint64_t us)
{
    if (us < IO_LAT_SUB)
        return (unsigned)us;
    unsigned e = 63u - (unsigned)__builtin_clzll(us); /* us in [2^e, 2^(e+1)) */
    unsigned sub = (unsigned)(us >> (e - 3)) & (IO_LAT_SUB - 1); /* IO_LAT_SUB == 8 */
    unsigned i = (e - 2) * IO_LAT_SUB + sub;
    return i < IO_LAT_BUCKETS ? i : IO_LAT_BUCKETS - 1;
}

/* The largest value that falls in bucket i. */
static uint64_t lat_upper(unsigned i)
{
    if (i < IO_LAT_SUB)
        return i;
    unsigned e = i / IO_LAT_SUB + 2, sub = i % IO_LAT_SUB;
    return ((uint64_t)(IO_LAT_SUB + sub + 1) << (e - 3)) - 1;
}

static void lat_add(struct io_lat *h, uint64_t ns)
{
    uint64_t us = ns / 1000;
    unsigned i = lat_bucket(us);
    io_store(&h->b[i], h->b[i] + 1);
    io_store(&h->count, h->count + 1);
    io_store(&h->sum_us, h->sum_us + us);
    if (us > h->max_us)
        io_store(&h->max_us, us);
}

static void lat_load(struct io_lat *out, const struct io_lat *h)
{
    out->count = io_load(&h->count);
    out->sum_us = io_load(&h->sum_us);
    out->max_us = io_load(&h->max_us);
    for (unsigned i = 0; i < IO_LAT_BUCKETS; i++)
        out->b[i] = io_load(&h->b[i]);
}

uint64_t io_lat_quantile(const struct io_lat *h, double q)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < IO_LAT_BUCKETS; i++)
        total += h->b[i];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total + 0.999999);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < IO_LAT_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t up = lat_upper(i);
            return up < h->max_us ? up : h->max_us;
        }
    }
    return h->max_us;
}

void io_ring_stats(const struct io_ring *r, struct io_stats *out)
{
    out->batches = io_load(&r->st.batches);
    out->reads = io_load(&r->st.reads);
    out->submitted = io_load(&r->st.submitted);
    out->bytes = io_load(&r->st.bytes);
    out->errors = io_load(&r->st.errors);
    out->short_reads = io_load(&r->st.short_reads);
    out->fixed_reads = io_load(&r->st.fixed_reads);
    out->buffers = io_load(&r->st.buffers);
    out->buffers_refused = io_load(&r->st.buffers_refused);
    out->deferred = io_load(&r->st.deferred);
    out->in_flight = io_load(&r->st.in_flight);
    out->max_in_flight = io_load(&r->st.max_in_flight);
    out->files = io_load(&r->st.files);
    out->file_bytes = io_load(&r->st.file_bytes);
    out->file_errors = io_load(&r->st.file_errors);
    out->files_in_flight = io_load(&r->st.files_in_flight);
    out->files_chained = io_load(&r->st.files_chained);
    out->files_staged = io_load(&r->st.files_staged);
    out->files_sync = io_load(&r->st.files_sync);
    out->file_busy_ns = io_load(&r->st.file_busy_ns);
    uint64_t since = io_load(&r->busy_since);
    if (since) /* busy right now: count the time so far */
        out->file_busy_ns += io_now_ns() - since;
    /* The last full second's. */
    uint64_t now = io_now_ns() / 1000000000ull, sec = io_load(&r->rate_sec);
    out->file_bytes_per_s = sec == now ? io_load(&r->rate_prev)
                            : sec + 1 == now ? io_load(&r->rate_cur) : 0;
    lat_load(&out->read_lat, &r->st.read_lat);
    lat_load(&out->file_lat, &r->st.file_lat);
}

static void lat_merge(struct io_lat *sum, const struct io_lat *h)
{
    sum->count += h->count;
    sum->sum_us += h->sum_us;
    if (h->max_us > sum->max_us)
        sum->max_us = h->max_us;
    for (unsigned i = 0; i < IO_LAT_BUCKETS; i++)
        sum->b[i] += h->b[i];
}

static const struct stats_decl io_decl[] = {IO_STATS(STATS_DECL)};
static const struct stats_decl io_lat_decl[] = {IO_LATENCY_STATS(STATS_DECL)};
static const struct stats_decl io_source_decl[] = {IO_SOURCE_STATS(STATS_DECL)};

/* A latency histogram's summary, in microseconds, as section name (its
 * metrics are named `metric`: in seconds, Prometheus's base unit). */
static void io_lat_emit(struct stats_out *o, const char *name, const char *metric,
                        const struct io_lat *h)
{
    struct stats_val v[] = {
        stats_u64(h->count),
        stats_u64(io_lat_quantile(h, 0.50)),
        stats_u64(io_lat_quantile(h, 0.90)),
        stats_u64(io_lat_quantile(h, 0.99)),
        stats_u64(h->max_us),
        stats_f64(h->count ? (double)h->sum_us / (double)h->count : 0.0),
    };
    stats_begin(o, name, metric, NULL, NULL);
    stats_emit(o, io_lat_decl, v, sizeof(v) / sizeof(v[0]));
    stats_end(o);
}

void io_stats_emit(struct stats_out *o, const struct io_stats *s)
{
    uint64_t v[] = {s->in_flight, s->max_in_flight, s->batches, s->reads,
                    s->submitted, s->bytes, s->errors, s->short_reads,
                    s->fixed_reads, s->buffers, s->buffers_refused};
    stats_emit_u64(o, io_decl, v, sizeof(v) / sizeof(v[0]));
    io_lat_emit(o, "read_latency_us", "read_latency_seconds", &s->read_lat);
    /* Source files read whole through the I/O rings (cold epochs, warm,
     * profiling): how many, how fast, how long each took. */
    double busy = (double)s->file_busy_ns / 1e9;
    struct stats_val f[] = {
        stats_u64(s->files),
        stats_u64(s->file_bytes),
        stats_u64(s->file_errors),
        stats_u64(s->files_in_flight),
        stats_u64(s->files_chained),
        stats_u64(s->files_staged),
        stats_u64(s->files_sync),
        stats_u64(s->file_bytes_per_s),
        stats_f64(busy),
        stats_f64(busy > 0 ? (double)s->file_bytes / busy : 0.0),
    };
    stats_begin(o, "source", NULL, NULL, NULL);
    stats_emit(o, io_source_decl, f, sizeof(f) / sizeof(f[0]));
    io_lat_emit(o, "latency_us", "latency_seconds", &s->file_lat);
    stats_end(o);
}

void io_stats_add(struct io_stats *sum, const struct io_stats *s)
{
    sum->batches += s->batches;
    sum->reads += s->reads;
    sum->submitted += s->submitted;
    sum->bytes += s->bytes;
    sum->errors += s->errors;
    sum->short_reads += s->short_reads;
    sum->fixed_reads += s->fixed_reads;
    sum->buffers += s->buffers;
    sum->buffers_refused += s->buffers_refused;
    sum->deferred += s->deferred;
    sum->in_flight += s->in_flight;
    if (s->max_in_flight > sum->max_in_flight)
        sum->max_in_flight = s->max_in_flight;
    sum->files += s->files;
    sum->file_bytes += s->file_bytes;
    sum->file_errors += s->file_errors;
    sum->files_in_flight += s->files_in_flight;
    sum->files_chained += s->files_chained;
    sum->files_staged += s->files_staged;
    sum->files_sync += s->files_sync;
    sum->file_bytes_per_s += s->file_bytes_per_s;
    sum->file_busy_ns += s->file_busy_ns;
    lat_merge(&sum->read_lat, &s->read_lat);
    lat_merge(&sum->file_lat, &s->file_lat);
}

/* ---- set-up ---- */

__attribute__((format(printf, 3, 4)))
static void io_why(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || !whylen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

/* Tries io_uring at r->depth, halving it on ENOMEM; 0 or -errno. */
static int io_uring_try(struct io_ring *r, unsigned per_req)
{
    for (;;) {
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        /* COOP_TASKRUN (5.19+) spares an IPI per completion; older
         * kernels answer EINVAL and get the plain ring. */
        p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL;
        /* An event loop's ring: completions must wake the loop asleep in
         * epoll (the eventfd), which cooperative task running would defer
         * until the thread next enters the kernel. */
        if (r->no_sync)
            p.flags &= ~(unsigned)IORING_SETUP_COOP_TASKRUN;
        int rc = io_uring_queue_init_params(r->depth * per_req, &r->ring, &p);
        if (rc == -EINVAL) {
            memset(&p, 0, sizeof(p));
            rc = io_uring_queue_init_params(r->depth * per_req, &r->ring, &p);
        }
        if (rc != -ENOMEM || r->depth / 2 < IO_MIN_DEPTH)
            return rc;
        r->depth /= 2;
    }
}

/* Decides how files are read on an io_uring ring: chains when the kernel
 * has every opcode and a sparse table of direct descriptors, else staged
 * (with OPENAT when it has that). Returns a reason when not chained. */
static const char *io_files_setup(struct io_ring *r, unsigned flags)
{
    struct io_uring_probe *p = io_uring_get_probe_ring(&r->ring);
    int statx = 0, openat = 0, close_ = 0;
    if (p) {
        statx = io_uring_opcode_supported(p, IORING_OP_STATX);
        openat = io_uring_opcode_supported(p, IORING_OP_OPENAT);
        r->have_openat2 = io_uring_opcode_supported(p, IORING_OP_OPENAT2);
        close_ = io_uring_opcode_supported(p, IORING_OP_CLOSE);
        io_uring_free_probe(p);
    }
    r->have_openat = openat;
    r->files = IO_FILES_STAGED;
    /* Regular-file reads count as "bounded" io-wq work, whose threads the
     * kernel caps at 4 per CPU by default: too few for a slow file system. */
    unsigned limits[2] = {r->depth, 0};
    io_uring_register_iowq_max_workers(&r->ring, limits);
    if (flags & IO_NO_CHAIN)
        return "file chains disabled";
    const char *env = getenv("PRESTO_IO");
    if (env && strcmp(env, "nochain") == 0)
        return "file chains disabled by PRESTO_IO=nochain";
    if (!statx || !openat || !close_)
        return "the kernel lacks io_uring STATX/OPENAT/CLOSE";
    r->stx = calloc(r->depth, sizeof(*r->stx));
    if (!r->stx)
        return "no memory for file chains";
    int rc = io_uring_register_files_sparse(&r->ring, r->depth);
    if (rc < 0) {
        free(r->stx);
        r->stx = NULL;
        return "the kernel refuses a sparse file table (before 5.19)";
    }
    r->files = IO_FILES_CHAIN;
    return NULL;
}

int io_ring_create(struct io_ring **out, unsigned depth, unsigned flags, char *why,
                   size_t whylen)
{
    struct io_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    if (why && whylen)
        why[0] = '\0';
    if (depth == 0)
        depth = IO_DEFAULT_DEPTH;
    if (depth > IO_MAX_DEPTH)
        depth = IO_MAX_DEPTH;
    r->depth = depth;
    r->backend = IO_PREAD;
    r->files = IO_FILES_SYNC;
    r->no_sync = (flags & IO_NO_SYNC) != 0;

    const char *env = getenv("PRESTO_IO");
    if (flags & IO_FORCE_PREAD) {
        io_why(why, whylen, "pread backend requested");
    } else if (env && strcmp(env, "pread") == 0) {
        io_why(why, whylen, "pread backend forced by PRESTO_IO=pread");
    } else {
        int rc = io_uring_try(r, IO_CHAIN_SQES);
        if (rc == 0) {
            r->backend = IO_URING;
            const char *nochain = io_files_setup(r, flags);
            if (r->depth < depth)
                io_why(why, whylen,
                       "io_uring depth %u refused (locked-memory limit), using %u",
                       depth, r->depth);
            else if (env && *env && strcmp(env, "io_uring") != 0 &&
                     strcmp(env, "nochain") != 0)
                io_why(why, whylen,
                       "PRESTO_IO=%s is none of io_uring, nochain, pread; ignored", env);
            else if (nochain && !(flags & IO_NO_CHAIN))
                io_why(why, whylen, "io_uring; files read staged: %s", nochain);
        } else {
            r->depth = depth;
            io_why(why, whylen, "io_uring refused by the kernel (%s%s); using pread",
                   strerror(-rc),
                   rc == -EPERM ? ": seccomp or kernel.io_uring_disabled"
                   : rc == -ENOMEM ? ": locked-memory limit" : "");
        }
    }
    r->act = calloc(r->depth, sizeof(*r->act));
    r->free_slots = malloc(r->depth * sizeof(*r->free_slots));
    if (!r->act || !r->free_slots) {
        io_ring_destroy(r);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < r->depth; i++)
        r->free_slots[i] = r->depth - 1 - i;
    r->nfree = r->depth;
    *out = r;
    return 0;
}

int io_ring_buf_register(struct io_ring *r, void *base, size_t len)
{
    int rc = -EOPNOTSUPP, idx = -1;
    if (r->backend == IO_URING && base && len && len <= (1u << 30)) {
        if (r->bufs_state == 0) {
            rc = io_uring_register_buffers_sparse(&r->ring, IO_BUFS);
            r->bufs_state = rc < 0 ? rc : 1;
        }
        rc = r->bufs_state < 0 ? r->bufs_state : -ENOSPC;
        for (int i = 0; i < IO_BUFS && r->bufs_state > 0; i++) {
            if (!r->bufs[i].base) {
                idx = i;
                break;
            }
        }
    }
    if (idx >= 0) {
        struct iovec iov = {.iov_base = base, .iov_len = len};
        rc = io_uring_register_buffers_update_tag(&r->ring, (unsigned)idx, &iov, NULL, 1);
        if (rc < 0)
            r->bufs_state = rc; /* pinning refused (RLIMIT_MEMLOCK): not again */
        if (rc >= 0) {
            r->bufs[idx].base = base;
            r->bufs[idx].len = len;
            io_stat_add(r, buffers, 1);
            return idx;
        }
    }
    io_stat_add(r, buffers_refused, 1);
    return rc < 0 ? rc : -EIO;
}

void *io_buf_alloc(size_t size, size_t align, int huge)
{
    void *p = NULL;
    huge = huge && size >= IO_HUGE_PAGE;
    if (posix_memalign(&p, huge && align < IO_HUGE_PAGE ? IO_HUGE_PAGE : align, size) != 0)
        return NULL;
    if (huge)
        (void)madvise(p, size, MADV_HUGEPAGE); /* a hint */
    return p;
}

void io_ring_buf_unregister(struct io_ring *r, const void *base)
{
    for (int i = 0; base && i < IO_BUFS; i++) {
        if (r->bufs[i].base != base)
            continue;
        struct iovec iov = {.iov_base = NULL, .iov_len = 0};
        /* Cannot fail for an empty entry in a live table; were it to, the
         * slot stays taken (its pages pinned) and is never looked up. */
        if (io_uring_register_buffers_update_tag(&r->ring, (unsigned)i, &iov, NULL, 1) >= 0)
            r->bufs[i].base = NULL;
        else
            r->bufs[i].base = (const uint8_t *)1; /* never an arena's address */
        r->bufs[i].len = 0;
        io_stat_add(r, buffers, -1);
    }
}

/* The registered buffer holding [p, p + len), or -1. */
static int io_buf_find(const struct io_ring *r, const void *p, size_t len)
{
    const uint8_t *b = p;
    for (int i = 0; i < IO_BUFS; i++) {
        if (r->bufs[i].len && b >= r->bufs[i].base &&
            (size_t)(b - r->bufs[i].base) <= r->bufs[i].len &&
            len <= r->bufs[i].len - (size_t)(b - r->bufs[i].base))
            return i;
    }
    return -1;
}

int io_ring_buf_registered(const struct io_ring *r, const void *base)
{
    for (int i = 0; base && i < IO_BUFS; i++)
        if (r->bufs[i].len && r->bufs[i].base == base)
            return 1;
    return 0;
}

const char *io_ring_backend(const struct io_ring *r)
{
    /* Atomic: stats may ask from another thread while io_abandon switches. */
    return io_load(&r->backend) == IO_URING ? "io_uring" : "pread";
}

int io_ring_eventfd(struct io_ring *r, int efd)
{
    if (r->backend != IO_URING)
        return -EOPNOTSUPP;
    return io_uring_register_eventfd(&r->ring, efd);
}

const char *io_ring_files_mode(const struct io_ring *r)
{
    switch (io_load(&r->files)) {
    case IO_FILES_CHAIN: return "chained";
    case IO_FILES_STAGED: return "staged";
    default: return "sync";
    }
}

unsigned io_ring_depth(const struct io_ring *r)
{
    return r->depth;
}

/* ---- the queue ---- */

static void q_push_tail(struct io_ring *r, struct io_req *q)
{
    q->next = NULL;
    q->prev = r->tail;
    if (r->tail)
        r->tail->next = q;
    else
        r->head = q;
    r->tail = q;
}

static void q_push_head(struct io_ring *r, struct io_req *q)
{
    q->prev = NULL;
    q->next = r->head;
    if (r->head)
        r->head->prev = q;
    else
        r->tail = q;
    r->head = q;
}

static void q_unlink(struct io_ring *r, struct io_req *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        r->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        r->tail = q->prev;
    q->prev = q->next = NULL;
}

static void slot_take(struct io_ring *r, struct io_req *q)
{
    q->slot = r->free_slots[--r->nfree];
    q->t0_ns = io_now_ns();
    r->act[q->slot] = q;
    r->active++;
    if (q->path && r->active_files++ == 0)
        io_store(&r->busy_since, io_now_ns());
    io_set_in_flight(r);
}

static void slot_put(struct io_ring *r, struct io_req *q)
{
    r->act[q->slot] = NULL;
    r->free_slots[r->nfree++] = q->slot;
    r->active--;
    if (q->path && --r->active_files == 0) {
        io_stat_add(r, file_busy_ns, io_now_ns() - r->busy_since);
        io_store(&r->busy_since, 0);
    }
    io_set_in_flight(r);
}

/* The request is finished: counted, and done. */
static void io_complete(struct io_ring *r, struct io_req *q)
{
    uint64_t ns = io_now_ns() - q->t0_ns;
    io_stat_add(r, reads, 1);
    if (q->res < 0)
        io_stat_add(r, errors, 1);
    else
        io_stat_add(r, bytes, (uint64_t)q->res);
    if (q->path) {
        io_stat_add(r, files, 1);
        lat_add(&r->st.file_lat, ns);
        if (q->res < 0) {
            io_stat_add(r, file_errors, 1);
        } else {
            io_stat_add(r, file_bytes, (uint64_t)q->res);
            uint64_t sec = io_now_ns() / 1000000000ull;
            if (sec != r->rate_sec) {
                io_store(&r->rate_prev, sec == r->rate_sec + 1 ? r->rate_cur : 0);
                io_store(&r->rate_cur, 0);
                io_store(&r->rate_sec, sec);
            }
            io_store(&r->rate_cur, r->rate_cur + (uint64_t)q->res);
        }
    } else {
        lat_add(&r->st.read_lat, ns);
    }
    q->state = IO_S_DONE;
    if (q->on_done)
        q->on_done(q);
}

/* IO_NO_SYNC: q would need work on this thread (a pread, a sync open, a
 * whole-file retry): it ends with IO_DEFERRED for the caller to submit
 * again on a ring that may block. It holds no slot. */
static void io_defer(struct io_ring *r, struct io_req *q)
{
    q->res = IO_DEFERRED;
    q->failed = IO_STEP_NONE;
    io_stat_add(r, deferred, 1);
    q->state = IO_S_DONE;
    if (q->on_done)
        q->on_done(q);
}

/* ---- on the calling thread (pread backend and fallbacks) ---- */

/* Reads q->len - progress more bytes at q->off of fd with pread, from its
 * progress in res (>= 0); sets res. */
static void io_pread_rest(struct io_ring *r, struct io_req *q, int fd, size_t len)
{
    size_t done = (size_t)q->res;
    while (done < len) {
        ssize_t n = pread(fd, (char *)q->buf + done, len - done, (off_t)(q->off + done));
        io_stat_add(r, submitted, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            q->res = -errno;
            return;
        }
        if (n == 0)
            break;
        done += (size_t)n;
        q->res = (ssize_t)done;
        if (done < len && q->direct && !q->path)
            break; /* O_DIRECT: the end of the file */
        if (done < len)
            io_stat_add(r, short_reads, 1);
    }
}

/* Opens a file request's path on this thread: below real_root when set. */
static int io_open_path(const struct io_req *q)
{
    if (q->real_root)
        return access_open_beneath(q->fd, q->real_root, q->path);
    int fd = openat(q->fd, q->path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* The kernel's side of the same rule, for the ring's opens: a link that
 * leaves the directory fails with EXDEV, and the request is then done on
 * this thread by access_open_beneath (which tells an absolute link that
 * stays inside from one that leaves). Read when the SQE is submitted. */
static struct open_how io_how_direct = {
    .flags = O_RDONLY, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
static struct open_how io_how_fd = {
    .flags = O_RDONLY | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};

static void stat_times(struct io_req *q, const struct stat *sb)
{
    q->size = (uint64_t)sb->st_size;
    q->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000ll + sb->st_mtim.tv_nsec;
}

/* A whole file on this thread: open, fstat, read, close. */
static void io_file_sync(struct io_ring *r, struct io_req *q)
{
    struct stat sb;
    q->res = 0;
    q->off = 0;
    q->failed = IO_STEP_NONE;
    int fd = io_open_path(q);
    if (fd < 0) {
        q->res = fd;
        q->failed = IO_STEP_OPEN;
        return;
    }
    if (fstat(fd, &sb) < 0) {
        q->res = -errno;
        q->failed = IO_STEP_STAT;
    } else {
        stat_times(q, &sb);
        io_pread_rest(r, q, fd, q->size < q->len ? (size_t)q->size : q->len);
        if (q->res < 0)
            q->failed = IO_STEP_READ;
    }
    close(fd);
    io_stat_add(r, files_sync, 1);
}

/* Runs q from start to end on this thread (it holds no slot). */
static void io_run_sync(struct io_ring *r, struct io_req *q)
{
    q->t0_ns = io_now_ns();
    io_store(&r->st.in_flight, 1);
    if (r->st.max_in_flight < 1)
        io_store(&r->st.max_in_flight, 1);
    if (q->path) {
        io_store(&r->st.files_in_flight, 1);
        io_file_sync(r, q);
        io_store(&r->st.files_in_flight, 0);
        io_stat_add(r, file_busy_ns, io_now_ns() - q->t0_ns);
    } else {
        io_pread_rest(r, q, q->fd, q->len);
    }
    io_store(&r->st.in_flight, 0);
    io_complete(r, q);
}

/* ---- io_uring ---- */

static struct io_uring_sqe *io_sqe(struct io_ring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) { /* never expected: SQ entries >= depth * 4; flush first */
        int n = io_uring_submit(&r->ring);
        if (n > 0)
            r->consumed += (unsigned)n;
        sqe = io_uring_get_sqe(&r->ring);
    }
    return sqe;
}

/* Prepares the read of what is left of a plain read, or of a staged
 * file's read. */
static int prep_read(struct io_ring *r, struct io_req *q, int fd, size_t total,
                     enum io_op op)
{
    struct io_uring_sqe *sqe = io_sqe(r);
    if (!sqe)
        return -EBUSY;
    size_t done = (size_t)q->res, len = total - done;
    if (len > IO_MAX_SQE_LEN)
        len = IO_MAX_SQE_LEN;
    char *buf = (char *)q->buf + done;
    int fixed = io_buf_find(r, buf, len);
    if (fixed >= 0) {
        io_uring_prep_read_fixed(sqe, fd, buf, (unsigned)len, q->off + done, fixed);
        io_stat_add(r, fixed_reads, 1);
    } else {
        io_uring_prep_read(sqe, fd, buf, (unsigned)len, q->off + done);
    }
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, op));
    io_stat_add(r, submitted, 1);
    return 0;
}

/* STATX -> OPENAT (direct, the slot) -> READ (fixed) =hard=> CLOSE. */
static int prep_chain(struct io_ring *r, struct io_req *q)
{
    if (io_uring_sq_space_left(&r->ring) < IO_CHAIN_SQES) {
        int n = io_uring_submit(&r->ring);
        if (n > 0)
            r->consumed += (unsigned)n;
        if (io_uring_sq_space_left(&r->ring) < IO_CHAIN_SQES)
            return -EBUSY;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    io_uring_prep_statx(sqe, q->fd, q->path, 0, STATX_SIZE | STATX_MTIME, &r->stx[q->slot]);
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, OP_STATX));
    /* The chain runs on io-wq (STATX always does): an inline open of a
     * cached path would block this thread in the file system's open. */
    sqe->flags |= IOSQE_IO_LINK | IOSQE_ASYNC;
    sqe = io_uring_get_sqe(&r->ring);
    /* No O_CLOEXEC: a direct descriptor is no process fd (EINVAL). */
    if (q->real_root)
        io_uring_prep_openat2_direct(sqe, q->fd, q->path, &io_how_direct, q->slot);
    else
        io_uring_prep_openat_direct(sqe, q->fd, q->path, O_RDONLY, 0, q->slot);
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, OP_OPEN));
    sqe->flags |= IOSQE_IO_LINK;
    sqe = io_uring_get_sqe(&r->ring);
    size_t len = q->len > IO_MAX_SQE_LEN ? IO_MAX_SQE_LEN : q->len;
    io_uring_prep_read(sqe, (int)q->slot, q->buf, (unsigned)len, 0);
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, OP_FREAD));
    /* A hard link: the file is closed whatever the read did (a read that
     * ends before len, the usual case, would break a plain link). */
    sqe->flags |= IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
    sqe = io_uring_get_sqe(&r->ring);
    io_uring_prep_close_direct(sqe, q->slot);
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, OP_CLOSE));
    q->cqes = IO_CHAIN_SQES;
    io_stat_add(r, submitted, IO_CHAIN_SQES);
    return 0;
}

static int prep_open(struct io_ring *r, struct io_req *q)
{
    struct io_uring_sqe *sqe = io_sqe(r);
    if (!sqe)
        return -EBUSY;
    if (q->real_root)
        io_uring_prep_openat2(sqe, q->fd, q->path, &io_how_fd);
    else
        io_uring_prep_openat(sqe, q->fd, q->path, O_RDONLY | O_CLOEXEC, 0);
    io_uring_sqe_set_data64(sqe, IO_UD(q->slot, OP_SOPEN));
    /* Straight to io-wq: tried inline first, an open whose path is cached
     * runs the file system's open (a network round trip) on this thread. */
    sqe->flags |= IOSQE_ASYNC;
    io_stat_add(r, submitted, 1);
    return 0;
}

static void staged_close(struct io_ring *r, struct io_req *q)
{
    if (q->ofd >= 0) {
        close(q->ofd);
        q->ofd = -1;
        r->fds_open--;
    }
}

/* A staged file is open (q->ofd): fstat it and read its size. Returns 1
 * when the request finished here. */
static int staged_opened(struct io_ring *r, struct io_req *q)
{
    struct stat sb;
    if (fstat(q->ofd, &sb) < 0) {
        q->res = -errno;
        q->failed = IO_STEP_STAT;
        staged_close(r, q);
        return 1;
    }
    stat_times(q, &sb);
    q->rlen = q->size < q->len ? (size_t)q->size : q->len;
    q->phase = PH_READ;
    if (q->rlen == 0 || prep_read(r, q, q->ofd, q->rlen, OP_FREAD) < 0) {
        if (q->rlen) /* no SQE: read it here */
            io_pread_rest(r, q, q->ofd, q->rlen);
        if (q->res < 0)
            q->failed = IO_STEP_READ;
        staged_close(r, q);
        return 1;
    }
    return 0;
}

/* Starts a queued request in a free slot. Returns 1 when it finished at
 * once (the slot is free again), 0 when it is in the kernel, -EBUSY when no
 * SQE could be had (it is back at the head of the queue). */
static int io_start(struct io_ring *r, struct io_req *q)
{
    if (r->no_sync && q->path &&
        (r->files != IO_FILES_CHAIN || (q->real_root && !r->have_openat2))) {
        io_defer(r, q); /* staged files fstat (and may open) on this thread */
        return 1;
    }
    slot_take(r, q);
    q->state = IO_S_ACTIVE;
    int rc;
    if (!q->path) {
        if (q->len == 0)
            goto finished;
        rc = prep_read(r, q, q->fd, q->len, OP_READ);
    } else if (r->files == IO_FILES_CHAIN && (!q->real_root || r->have_openat2)) {
        rc = prep_chain(r, q);
    } else {
        q->ofd = -1;
        q->phase = PH_OPEN;
        if (r->have_openat && (!q->real_root || r->have_openat2)) {
            rc = prep_open(r, q);
        } else {
            q->ofd = io_open_path(q);
            if (q->ofd < 0) {
                q->res = q->ofd;
                q->failed = IO_STEP_OPEN;
                goto finished;
            }
            r->fds_open++;
            if (staged_opened(r, q))
                goto finished;
            rc = 0;
        }
    }
    if (rc == 0)
        return 0;
    slot_put(r, q);
    q->state = IO_S_QUEUED;
    q_push_head(r, q);
    return -EBUSY;
finished:
    slot_put(r, q);
    if (q->path)
        io_stat_add(r, files_staged, 1);
    io_complete(r, q);
    return 1;
}

/* Starts queued requests while there are slots. */
static void io_fill(struct io_ring *r)
{
    while (r->head && r->nfree > 0) {
        struct io_req *q = r->head;
        q_unlink(r, q);
        if (io_start(r, q) < 0)
            break;
    }
}

/* The end of a chain: its four CQEs are in. */
static void chain_finish(struct io_ring *r, struct io_req *q)
{
    size_t want = 0;
    slot_put(r, q);
    if (q->phase && q->failed == IO_STEP_NONE && !q->retry) {
        /* Cancelled with no reason given: the file again, on this thread. */
        q->retry = 1;
    }
    if (!q->retry && q->res >= 0) {
        const struct statx *sx = &r->stx[q->slot];
        q->size = sx->stx_size;
        q->mtime_ns = (int64_t)sx->stx_mtime.tv_sec * 1000000000ll + sx->stx_mtime.tv_nsec;
        want = q->size < q->len ? (size_t)q->size : q->len;
    }
    /* Read short of what stat promised: the rest is read on this thread. */
    int rest = !q->retry && q->res >= 0 && (size_t)q->res < want;
    if (r->no_sync && (q->retry || rest)) {
        q->retry = 0;
        io_defer(r, q);
        return;
    }
    if (q->retry || (rest && q->len <= IO_MAX_SQE_LEN)) {
        /* A read the chain could not finish (interrupted, or short before
         * the end of the file): the whole file again, on this thread. */
        q->retry = 0;
        io_file_sync(r, q);
    } else {
        if (rest) { /* a file over one SQE: the rest */
            int fd = io_open_path(q);
            if (fd < 0) {
                q->res = fd;
                q->failed = IO_STEP_OPEN;
            } else {
                io_pread_rest(r, q, fd, want);
                close(fd);
            }
        }
        io_stat_add(r, files_chained, 1);
    }
    io_complete(r, q);
}

/* One CQE of a chain. A cancelled member (-ECANCELED) comes with the
 * failure of another one (even a later one, refused at submission), which
 * is what res reports. */
static void chain_cqe(struct io_ring *r, struct io_req *q, enum io_op op, int res)
{
    if (res == -ECANCELED)
        q->phase = 1; /* a chain's phase: "something was cancelled" */
    switch (op) {
    case OP_STATX:
        if (res >= 0)
            io_mark_defined(&r->stx[q->slot], sizeof(r->stx[q->slot]));
        if (res < 0 && res != -ECANCELED && q->failed == IO_STEP_NONE) {
            q->res = res;
            q->failed = IO_STEP_STAT;
        }
        break;
    case OP_OPEN:
        if (res == -EXDEV && q->real_root)
            q->retry = 1; /* a link: access_open_beneath decides, on this thread */
        else if (res < 0 && res != -ECANCELED && q->failed == IO_STEP_NONE) {
            q->res = res;
            q->failed = IO_STEP_OPEN;
        }
        break;
    case OP_FREAD:
        if (res >= 0) {
            io_mark_defined(q->buf, (size_t)res);
            if (q->failed == IO_STEP_NONE)
                q->res = res;
        } else if (res == -EAGAIN || res == -EINTR) {
            q->retry = 1;
        } else if (res == -EBADF && q->failed == IO_STEP_NONE) {
            /* The open worked but the read could not use its slot: a
             * kernel that resolves fixed files at submission. Files go
             * staged from now on; this one is read again. */
            log_warn("io: this kernel cannot read a file opened in the same chain; "
                     "reading files in two steps from now on");
            io_store(&r->files, IO_FILES_STAGED);
            q->retry = 1;
        } else if (res != -ECANCELED && q->failed == IO_STEP_NONE) {
            q->res = res;
            q->failed = IO_STEP_READ;
        }
        break;
    default: /* OP_CLOSE: nothing to learn */
        break;
    }
    if (--q->cqes == 0)
        chain_finish(r, q);
}

/* One CQE of a staged file. */
static void staged_cqe(struct io_ring *r, struct io_req *q, enum io_op op, int res,
                       int drain)
{
    if (op == OP_SOPEN) {
        if (res < 0) {
            if ((res == -EMFILE || res == -ENFILE) && r->fds_open > 0 && !drain) {
                /* Out of descriptors: again once one of ours is closed. */
                slot_put(r, q);
                q->state = IO_S_QUEUED;
                q_push_head(r, q);
                return;
            }
            if (res == -EXDEV && q->real_root) { /* a link: decided on this thread */
                res = io_open_path(q);
                if (res >= 0)
                    goto opened;
            }
            q->res = res;
            q->failed = IO_STEP_OPEN;
            goto done;
        }
    opened:
        q->ofd = res;
        r->fds_open++;
        if (drain) /* finished on this thread by io_abandon */
            return;
        if (staged_opened(r, q))
            goto done;
        return;
    }
    /* OP_FREAD */
    int again = 0;
    if (res == -EAGAIN || res == -EINTR) {
        again = 1;
    } else if (res < 0) {
        q->res = res;
        q->failed = IO_STEP_READ;
    } else if (res > 0) {
        io_mark_defined((char *)q->buf + q->res, (size_t)res);
        q->res += res;
        if ((size_t)q->res < q->rlen) {
            again = 1;
            io_stat_add(r, short_reads, 1);
        }
    }
    if (again && (drain || prep_read(r, q, q->ofd, q->rlen, OP_FREAD) == 0))
        return; /* resubmitted, or left for io_abandon */
    if (again) { /* no SQE: the rest here */
        io_pread_rest(r, q, q->ofd, q->rlen);
        if (q->res < 0)
            q->failed = IO_STEP_READ;
    }
    staged_close(r, q);
done:
    slot_put(r, q);
    io_stat_add(r, files_staged, 1);
    io_complete(r, q);
}

/* One CQE of a plain read: short and interrupted reads are resubmitted
 * for the rest unless `drain` (io_abandon finishes them). */
static void read_cqe(struct io_ring *r, struct io_req *q, int res, int drain)
{
    int again = 0;
    if (res == -EAGAIN || res == -EINTR) {
        again = 1;
    } else if (res < 0) {
        q->res = res;
    } else if (res > 0) {
        io_mark_defined((char *)q->buf + q->res, (size_t)res);
        q->res += res;
        if ((size_t)q->res < q->len && !q->direct) { /* O_DIRECT: the file's end */
            again = 1;
            io_stat_add(r, short_reads, 1);
        }
    }
    if (again && (drain || prep_read(r, q, q->fd, q->len, OP_READ) == 0))
        return;
    slot_put(r, q);
    if (again && r->no_sync) {
        io_defer(r, q);
        return;
    }
    if (again) /* no SQE: the rest here */
        io_pread_rest(r, q, q->fd, q->len);
    io_complete(r, q);
}

static void io_cqe(struct io_ring *r, const struct io_uring_cqe *cqe, int drain)
{
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    enum io_op op = (enum io_op)(ud & 7);
    struct io_req *q = r->act[ud >> 3];
    r->seen++;
    if (q->cqes > 0) /* a chain */
        chain_cqe(r, q, op, cqe->res);
    else if (op == OP_READ)
        read_cqe(r, q, cqe->res, drain);
    else
        staged_cqe(r, q, op, cqe->res, drain);
}

static void io_reap(struct io_ring *r, int drain)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&r->ring, head, cqe)
    {
        io_cqe(r, cqe, drain);
        seen++;
    }
    io_uring_cq_advance(&r->ring, seen);
}

/* The ring failed as a whole: wait for what the kernel holds, give the ring
 * up, and finish the started requests (and every later one) with pread. */
static void io_abandon(struct io_ring *r, int err)
{
    while (r->seen < r->consumed) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&r->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break; /* cannot happen with requests in the kernel; do not spin */
        io_cqe(r, cqe, 1);
        io_uring_cqe_seen(&r->ring, cqe);
    }
    io_uring_queue_exit(&r->ring);
    io_store(&r->backend, IO_PREAD);
    io_store(&r->files, IO_FILES_SYNC);
    log_warn("io: io_uring failed (%s); this worker reads with pread from now on",
             strerror(-err));
    for (unsigned s = 0; s < r->depth; s++) {
        struct io_req *q = r->act[s];
        if (!q)
            continue;
        slot_put(r, q);
        if (r->no_sync) {
            staged_close(r, q);
            io_defer(r, q);
            continue;
        }
        if (q->path) {
            staged_close(r, q);
            io_file_sync(r, q);
        } else {
            io_pread_rest(r, q, q->fd, q->len);
        }
        io_complete(r, q);
    }
    while (r->no_sync && r->head) { /* and what waited for the kernel */
        struct io_req *q = r->head;
        q_unlink(r, q);
        io_defer(r, q);
    }
}

/* Hands prepared SQEs to the kernel and, when `wait`, blocks for one
 * completion. 0, or the kernel's -errno when the ring was given up. */
static int io_push(struct io_ring *r, int wait)
{
    int busy = 0;
    for (;;) {
        int rc = wait ? io_uring_submit_and_wait(&r->ring, 1) : io_uring_submit(&r->ring);
        if (rc >= 0) {
            r->consumed += (unsigned)rc;
            return 0;
        }
        if (rc == -EINTR)
            return 0;
        uint64_t in_kernel = r->consumed - r->seen;
        if ((rc == -EAGAIN || rc == -EBUSY) && (in_kernel > 0 || ++busy < IO_MAX_BUSY_SPINS)) {
            /* Out of kernel resources for now: completions free them
             * (IO_NO_SYNC: the caller polls again when one comes). */
            if (in_kernel > 0 && r->no_sync)
                return 0;
            if (in_kernel > 0) {
                struct io_uring_cqe *cqe;
                io_uring_wait_cqe(&r->ring, &cqe);
                return 0;
            }
            sched_yield();
            continue;
        }
        io_abandon(r, rc);
        return rc;
    }
}

/* ---- the API ---- */

void io_submit(struct io_ring *r, struct io_req *q)
{
    q->res = 0;
    q->failed = IO_STEP_NONE;
    q->retry = 0;
    q->cqes = 0;
    q->phase = 0;
    q->ofd = -1;
    if (q->path)
        q->off = 0;
    if (r->no_sync && r->backend != IO_URING) {
        io_defer(r, q);
        return;
    }
    q->state = IO_S_QUEUED;
    q_push_tail(r, q);
}

void io_poll(struct io_ring *r)
{
    if (r->backend != IO_URING)
        return;
    io_reap(r, 0);
    io_fill(r);
    if (io_uring_sq_ready(&r->ring) > 0 && io_push(r, 0) == 0)
        io_reap(r, 0);
}

ssize_t io_wait(struct io_ring *r, struct io_req *q)
{
    while (q->state != IO_S_DONE) {
        if (r->backend != IO_URING) {
            /* In order, up to q (q is queued: nothing is in a kernel). */
            struct io_req *h = r->head;
            if (!h)
                break; /* q was never submitted */
            q_unlink(r, h);
            io_run_sync(r, h);
            continue;
        }
        io_reap(r, 0);
        if (q->state == IO_S_DONE)
            break;
        io_fill(r);
        if (q->state == IO_S_DONE)
            break;
        if (r->active == 0 && io_uring_sq_ready(&r->ring) == 0) {
            /* Nothing in the kernel and q not started: no SQE to be had. */
            if (q->state == IO_S_QUEUED) {
                q_unlink(r, q);
                io_run_sync(r, q);
            }
            break;
        }
        if (io_push(r, 1) == 0)
            io_reap(r, 0);
    }
    return q->res;
}

void io_cancel(struct io_ring *r, struct io_req *q)
{
    if (q->state == IO_S_QUEUED) {
        q_unlink(r, q);
        q->res = -ECANCELED;
        q->state = IO_S_DONE;
    } else if (q->state == IO_S_ACTIVE) {
        io_wait(r, q);
    }
}

unsigned io_read_batch(struct io_ring *r, struct io_req *reqs, unsigned n)
{
    if (n == 0)
        return 0;
    io_stat_add(r, batches, 1);
    for (unsigned i = 0; i < n; i++) {
        reqs[i].path = NULL;
        io_submit(r, &reqs[i]);
    }
    unsigned failed = 0;
    for (unsigned i = 0; i < n; i++)
        failed += io_wait(r, &reqs[i]) < 0;
    return failed;
}

/* A request the ring gives up on (destroyed): cancelled, its owner told. */
static void io_cancelled(struct io_req *q)
{
    q->res = -ECANCELED;
    q->state = IO_S_DONE;
    if (q->on_done)
        q->on_done(q);
}

void io_ring_destroy(struct io_ring *r)
{
    if (!r)
        return;
    if (r->backend == IO_URING) {
        /* Nothing may land in memory the caller frees after this. */
        while (r->seen < r->consumed) {
            struct io_uring_cqe *cqe;
            int rc = io_uring_wait_cqe(&r->ring, &cqe);
            if (rc == -EINTR)
                continue;
            if (rc < 0)
                break;
            io_cqe(r, cqe, 1);
            io_uring_cqe_seen(&r->ring, cqe);
        }
        /* Left unfinished by the drain (a short read it would resume). */
        for (unsigned s = 0; r->act && s < r->depth; s++) {
            struct io_req *q = r->act[s];
            if (!q)
                continue;
            if (q->path)
                staged_close(r, q);
            slot_put(r, q);
            io_cancelled(q);
        }
        io_uring_queue_exit(&r->ring);
    }
    while (r->head) { /* never started */
        struct io_req *q = r->head;
        q_unlink(r, q);
        io_cancelled(q);
    }
    free(r->stx);
    free(r->act);
    free(r->free_slots);
    free(r);
}

/* I/O backend: see io.h. */
#include "io.h"

#include <errno.h>
#include <liburing.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

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

enum io_backend { IO_URING, IO_PREAD };

/* Per-request state during a batch (io_uring backend). */
enum { REQ_IDLE = 0, REQ_QUEUED = 1, REQ_DONE = 2 };

struct io_ring {
    enum io_backend backend;
    unsigned depth;
    struct io_uring ring; /* IO_URING only */
    uint8_t *state;       /* per-request REQ_* for the current batch */
    unsigned state_cap;
    struct io_stats st;   /* written by the owner, read with relaxed loads */
};

/* ---- counters: one writer (the owner), readers anywhere ---- */

#define io_stat_add(r, field, v) \
    __atomic_store_n(&(r)->st.field, (r)->st.field + (v), __ATOMIC_RELAXED)

static void io_set_in_flight(struct io_ring *r, unsigned n)
{
    __atomic_store_n(&r->st.in_flight, n, __ATOMIC_RELAXED);
    if (n > r->st.max_in_flight)
        __atomic_store_n(&r->st.max_in_flight, n, __ATOMIC_RELAXED);
}

void io_ring_stats(const struct io_ring *r, struct io_stats *out)
{
    out->batches = __atomic_load_n(&r->st.batches, __ATOMIC_RELAXED);
    out->reads = __atomic_load_n(&r->st.reads, __ATOMIC_RELAXED);
    out->submitted = __atomic_load_n(&r->st.submitted, __ATOMIC_RELAXED);
    out->bytes = __atomic_load_n(&r->st.bytes, __ATOMIC_RELAXED);
    out->errors = __atomic_load_n(&r->st.errors, __ATOMIC_RELAXED);
    out->short_reads = __atomic_load_n(&r->st.short_reads, __ATOMIC_RELAXED);
    out->in_flight = __atomic_load_n(&r->st.in_flight, __ATOMIC_RELAXED);
    out->max_in_flight = __atomic_load_n(&r->st.max_in_flight, __ATOMIC_RELAXED);
}

void io_stats_add(struct io_stats *sum, const struct io_stats *s)
{
    sum->batches += s->batches;
    sum->reads += s->reads;
    sum->submitted += s->submitted;
    sum->bytes += s->bytes;
    sum->errors += s->errors;
    sum->short_reads += s->short_reads;
    sum->in_flight += s->in_flight;
    if (s->max_in_flight > sum->max_in_flight)
        sum->max_in_flight = s->max_in_flight;
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
static int io_uring_try(struct io_ring *r)
{
    for (;;) {
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        /* COOP_TASKRUN (5.19+) spares an IPI per completion; older
         * kernels answer EINVAL and get the plain ring. */
        p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL;
        int rc = io_uring_queue_init_params(r->depth, &r->ring, &p);
        if (rc == -EINVAL) {
            memset(&p, 0, sizeof(p));
            rc = io_uring_queue_init_params(r->depth, &r->ring, &p);
        }
        if (rc != -ENOMEM || r->depth / 2 < IO_MIN_DEPTH)
            return rc;
        r->depth /= 2;
    }
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

    const char *env = getenv("PRESTO_IO");
    if (flags & IO_FORCE_PREAD) {
        io_why(why, whylen, "pread backend requested");
    } else if (env && strcmp(env, "pread") == 0) {
        io_why(why, whylen, "pread backend forced by PRESTO_IO=pread");
    } else {
        int rc = io_uring_try(r);
        if (rc == 0) {
            r->backend = IO_URING;
            if (r->depth < depth)
                io_why(why, whylen,
                       "io_uring depth %u refused (locked-memory limit), using %u",
                       depth, r->depth);
            else if (env && *env && strcmp(env, "io_uring") != 0)
                io_why(why, whylen, "PRESTO_IO=%s is neither io_uring nor pread; ignored",
                       env);
        } else {
            r->depth = depth;
            io_why(why, whylen, "io_uring refused by the kernel (%s%s); using pread",
                   strerror(-rc),
                   rc == -EPERM ? ": seccomp or kernel.io_uring_disabled"
                   : rc == -ENOMEM ? ": locked-memory limit" : "");
        }
    }
    *out = r;
    return 0;
}

void io_ring_destroy(struct io_ring *r)
{
    if (!r)
        return;
    if (r->backend == IO_URING)
        io_uring_queue_exit(&r->ring);
    free(r->state);
    free(r);
}

const char *io_ring_backend(const struct io_ring *r)
{
    /* Atomic: stats may ask from another thread while io_abandon switches. */
    return __atomic_load_n(&r->backend, __ATOMIC_RELAXED) == IO_URING ? "io_uring" : "pread";
}

unsigned io_ring_depth(const struct io_ring *r)
{
    return r->depth;
}

/* ---- pread backend ---- */

/* Finishes one request with pread from its progress in res (>= 0). */
static void io_pread_one(struct io_ring *r, struct io_req *q)
{
    size_t done = (size_t)q->res;
    io_set_in_flight(r, 1);
    while (done < q->len) {
        ssize_t n = pread(q->fd, (char *)q->buf + done, q->len - done,
                          (off_t)(q->off + done));
        io_stat_add(r, submitted, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            q->res = -errno;
            break;
        }
        if (n == 0)
            break;
        done += (size_t)n;
        q->res = (ssize_t)done;
        if (done < q->len)
            io_stat_add(r, short_reads, 1);
    }
    io_set_in_flight(r, 0);
}

/* Counts a finished request. */
static void io_finish(struct io_ring *r, const struct io_req *q, unsigned *failed)
{
    io_stat_add(r, reads, 1);
    if (q->res < 0) {
        io_stat_add(r, errors, 1);
        (*failed)++;
    } else {
        io_stat_add(r, bytes, (uint64_t)q->res);
    }
}

static unsigned io_pread_batch(struct io_ring *r, struct io_req *reqs, unsigned n,
                               const uint8_t *state)
{
    unsigned failed = 0;
    for (unsigned i = 0; i < n; i++) {
        if (state && state[i] == REQ_DONE) {
            failed += reqs[i].res < 0;
            continue;
        }
        io_pread_one(r, &reqs[i]);
        io_finish(r, &reqs[i], &failed);
    }
    return failed;
}

/* ---- io_uring backend ---- */

struct io_batch {
    struct io_req *reqs;
    unsigned n;
    unsigned next;    /* first request not yet queued */
    unsigned active;  /* queued: prepared in the SQ or in the kernel */
    unsigned done;
    unsigned idle;    /* requests put back to REQ_IDLE for want of an SQE */
    unsigned failed;
};

/* Prepares the read of what is left of request i. */
static int io_prep(struct io_ring *r, struct io_batch *b, unsigned i)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe) {
        /* Never expected (active <= depth), but harmless: flush first. */
        io_uring_submit(&r->ring);
        sqe = io_uring_get_sqe(&r->ring);
        if (!sqe)
            return -EBUSY;
    }
    struct io_req *q = &b->reqs[i];
    size_t done = (size_t)q->res;
    size_t len = q->len - done;
    if (len > IO_MAX_SQE_LEN)
        len = IO_MAX_SQE_LEN;
    io_uring_prep_read(sqe, q->fd, (char *)q->buf + done, (unsigned)len, q->off + done);
    io_uring_sqe_set_data64(sqe, i);
    io_stat_add(r, submitted, 1);
    return 0;
}

static void io_complete(struct io_ring *r, struct io_batch *b, unsigned i)
{
    r->state[i] = REQ_DONE;
    b->active--;
    b->done++;
    io_finish(r, &b->reqs[i], &b->failed);
}

/* Handles one CQE; resubmits short and interrupted reads unless `drain`
 * (then the request goes back to REQ_IDLE with its progress in res). */
static void io_cqe(struct io_ring *r, struct io_batch *b, const struct io_uring_cqe *cqe,
                   int drain)
{
    unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
    struct io_req *q = &b->reqs[i];
    int res = cqe->res;
    int again = 0;
    if (res == -EAGAIN || res == -EINTR) {
        again = 1;
    } else if (res < 0) {
        q->res = res;
    } else if (res > 0) {
        io_mark_defined((char *)q->buf + q->res, (size_t)res);
        q->res += res;
        if ((size_t)q->res < q->len) {
            again = 1;
            io_stat_add(r, short_reads, 1);
        }
    }
    if (!again) {
        io_complete(r, b, i);
    } else if (drain || io_prep(r, b, i) < 0) {
        r->state[i] = REQ_IDLE;
        b->active--;
        b->idle += !drain;
    }
}

static unsigned io_reap(struct io_ring *r, struct io_batch *b, int drain)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&r->ring, head, cqe)
    {
        io_cqe(r, b, cqe, drain);
        seen++;
    }
    io_uring_cq_advance(&r->ring, seen);
    return seen;
}

/* The ring failed as a whole: wait for the reads the kernel holds, give
 * the ring up, and finish the batch (and every later one) with pread. */
static unsigned io_abandon(struct io_ring *r, struct io_batch *b, int err)
{
    unsigned in_kernel = b->active - io_uring_sq_ready(&r->ring);
    while (in_kernel > 0) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&r->ring, &cqe);
        if (rc == -EINTR)
            continue;
        if (rc < 0)
            break; /* cannot happen with reads in flight; do not spin */
        unsigned before = b->active;
        io_cqe(r, b, cqe, 1);
        io_uring_cqe_seen(&r->ring, cqe);
        in_kernel -= before - b->active;
    }
    io_uring_queue_exit(&r->ring);
    __atomic_store_n(&r->backend, IO_PREAD, __ATOMIC_RELAXED);
    log_warn("io: io_uring failed (%s); this worker reads with pread from now on",
             strerror(-err));
    for (unsigned i = 0; i < b->n; i++)
        if (r->state[i] != REQ_DONE)
            r->state[i] = REQ_IDLE;
    return io_pread_batch(r, b->reqs, b->n, r->state);
}

static unsigned io_uring_batch(struct io_ring *r, struct io_req *reqs, unsigned n)
{
    if (r->state_cap < n) {
        uint8_t *s = realloc(r->state, n);
        if (!s) /* no memory for bookkeeping: this batch goes the slow way */
            return io_pread_batch(r, reqs, n, NULL);
        r->state = s;
        r->state_cap = n;
    }
    memset(r->state, REQ_IDLE, n);
    struct io_batch b = {.reqs = reqs, .n = n};
    int busy = 0;

    while (b.done < n) {
        while (b.next < n && b.active < r->depth) {
            if (io_prep(r, &b, b.next) < 0)
                break;
            r->state[b.next++] = REQ_QUEUED;
            b.active++;
        }
        if (b.active == 0) /* not a single SQE to be had */
            return io_abandon(r, &b, -EBUSY);
        io_set_in_flight(r, b.active);
        int rc = io_uring_submit_and_wait(&r->ring, 1);
        if (rc < 0 && rc != -EINTR) {
            unsigned in_kernel = b.active - io_uring_sq_ready(&r->ring);
            if ((rc == -EAGAIN || rc == -EBUSY) && (in_kernel > 0 || ++busy < IO_MAX_BUSY_SPINS)) {
                /* Out of kernel resources for now: completions free them. */
                if (in_kernel > 0) {
                    struct io_uring_cqe *cqe;
                    io_uring_wait_cqe(&r->ring, &cqe);
                } else {
                    sched_yield();
                }
            } else {
                io_set_in_flight(r, 0);
                return io_abandon(r, &b, rc);
            }
        } else {
            busy = 0;
        }
        io_reap(r, &b, 0);
        /* A request that could not be requeued (no SQE) goes back to the
         * pending ones; none is ever lost. */
        for (unsigned i = 0; b.idle > 0 && i < b.next && b.active < r->depth; i++) {
            if (r->state[i] == REQ_IDLE) {
                if (io_prep(r, &b, i) < 0)
                    break;
                r->state[i] = REQ_QUEUED;
                b.active++;
                b.idle--;
            }
        }
    }
    io_set_in_flight(r, 0);
    return b.failed;
}

unsigned io_read_batch(struct io_ring *r, struct io_req *reqs, unsigned n)
{
    if (n == 0)
        return 0;
    io_stat_add(r, batches, 1);
    for (unsigned i = 0; i < n; i++)
        reqs[i].res = 0;
    if (r->backend == IO_URING)
        return io_uring_batch(r, reqs, n);
    return io_pread_batch(r, reqs, n, NULL);
}

/* Read-ahead of batches on the event loop: see readahead.h. */
#include "readahead.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "budget.h"
#include "log.h"

/* pipeline_ahead structures kept for the next chunks (the rest are freed
 * as their jobs are done): a job holds one only while its chunk is armed. */
#define READAHEAD_POOL 16u

struct readahead {
    struct io_ring *io;
    int efd;
    struct event *ev;
    struct pipeline_ahead *scratch; /* gathers a batch; swapped into a job's slot */
    struct pipeline_ahead_budget budget;
    struct pipeline_ahead *pool[READAHEAD_POOL]; /* not armed, for the next */
    unsigned npool;
    uint64_t batches, nothing, over_budget, over_user, buffered_disk, waited;
    uint64_t chunks; /* pipeline_ahead made (the scratch and pooled ones included) */
};

/* io_uring completed something: take it, queue more. */
static void readahead_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct readahead *ra = arg;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_error("readahead: eventfd read: %s", strerror(errno));
    io_poll(ra->io);
}

void readahead_stop(struct readahead *ra)
{
    if (!ra || !ra->io)
        return;
    pipeline_ahead_budget_register(&ra->budget, NULL);
    io_ring_destroy(ra->io); /* the last ready callbacks run here */
    ra->io = NULL;
    if (ra->ev)
        event_free(ra->ev);
    ra->ev = NULL;
    if (ra->efd >= 0)
        close(ra->efd);
    ra->efd = -1;
}

int readahead_create(struct readahead **out, struct event_base *base, unsigned depth,
                     uint64_t budget, int force_pread)
{
    struct readahead *ra = calloc(1, sizeof(*ra));
    char why[256];
    if (!ra)
        return -ENOMEM;
    ra->efd = -1;
    pipeline_ahead_budget_init(&ra->budget, budget);
    *out = ra;
    if (budget == 0 || force_pread)
        return 0;
    if (io_ring_create(&ra->io, depth, IO_NO_SYNC, why, sizeof(why)) < 0) {
        *out = NULL; /* the caller's destroy must not find it */
        pipeline_ahead_budget_release(&ra->budget);
        free(ra);
        return -ENOMEM;
    }
    if (strcmp(io_ring_backend(ra->io), "io_uring") != 0) {
        log_info("io: no read-ahead of batches (%s): workers read them", why);
        goto off;
    }
    ra->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = ra->efd < 0 ? -errno : io_ring_eventfd(ra->io, ra->efd);
    if (rc == 0 &&
        (!(ra->ev = event_new(base, ra->efd, EV_READ | EV_PERSIST, readahead_on_event, ra)) ||
         event_add(ra->ev, NULL) < 0))
        rc = -ENOMEM;
    if (rc < 0) {
        log_warn("io: no read-ahead of batches: %s", strerror(-rc));
        goto off;
    }
    pipeline_ahead_budget_register(&ra->budget, ra->io);
    log_info("io: batches read ahead on the event loop: %u reads in flight, up to %llu MiB",
             io_ring_depth(ra->io), (unsigned long long)(budget >> 20));
    return 0;
off: /* nothing read through it yet */
    readahead_stop(ra);
    return 0;
}

void readahead_destroy(struct readahead *ra)
{
    if (!ra)
        return;
    readahead_stop(ra);
    free(ra->scratch); /* never armed between calls */
    while (ra->npool > 0)
        free(ra->pool[--ra->npool]);
    pipeline_ahead_budget_release(&ra->budget);
    free(ra);
}

int readahead_batch(struct readahead *ra, struct pipeline *pipe, struct dataset *ds,
                    const uint32_t *ids, uint32_t n, struct readahead_slot *slot, int may_wait,
                    void (*ready)(void *arg), void *arg)
{
    if (!ra || !ra->io)
        return 0;
    readahead_done(ra, slot); /* a job's last chunk is done by now: nothing */
    uint64_t room = UINT64_MAX, self = pipeline_ahead_size();
    if (slot->budget) { /* the chunk's arena and its structure, charged */
        room = budget_ahead_room(slot->budget, slot->uid);
        if (room <= self) {
            ra->over_user++;
            budget_ahead_skipped(slot->budget);
            return 0;
        }
        room -= self;
    }
    if (!ra->scratch) {
        if (ra->npool > 0)
            ra->scratch = ra->pool[--ra->npool];
        else if (!(ra->scratch = pipeline_ahead_new()))
            return 0;
        else
            ra->chunks++;
    }
    int rc = pipeline_ahead_start(pipe, ds, ids, n, ra->scratch, ra->io, &ra->budget, room,
                                  ready, arg);
    if (rc == -ENOBUFS && may_wait) {
        ra->waited++;
        return rc;
    }
    if (rc <= 0) {
        ra->nothing += rc == 0;
        ra->over_budget += rc == -ENOBUFS;
        ra->buffered_disk += rc == -EAGAIN;
        if (rc == -EDQUOT) {
            ra->over_user++;
            budget_ahead_skipped(slot->budget);
        }
        return 0;
    }
    uint64_t charge = slot->budget ? pipeline_ahead_arena(ra->scratch) + self : 0;
    if (charge && budget_ahead_charge(slot->budget, slot->uid, charge) < 0)
        charge = 0; /* no entry could be made: within room all the same */
    ra->batches++;
    slot->a = ra->scratch; /* the slot held none: readahead_done emptied it */
    slot->charged = charge;
    ra->scratch = NULL;
    return rc == 1; /* 2: nothing in flight after all; the worker reads */
}

void readahead_done(struct readahead *ra, struct readahead_slot *slot)
{
    struct pipeline_ahead *a = slot->a;
    if (!a)
        return;
    pipeline_ahead_drop(a); /* when it never ran; else dropped by its worker */
    if (slot->budget)
        budget_ahead_uncharge(slot->budget, slot->uid, slot->charged);
    slot->charged = 0;
    slot->a = NULL;
    if (ra && ra->npool < READAHEAD_POOL) {
        ra->pool[ra->npool++] = a;
        return;
    }
    pipeline_ahead_free(a);
    if (ra)
        ra->chunks--;
}

static const struct stats_decl readahead_decl[] = {READAHEAD_STATS(STATS_DECL)};

void readahead_stats(const struct readahead *ra, struct stats_out *o)
{
    struct io_stats io;
    uint64_t armed = 0, kept = 0;
    memset(&io, 0, sizeof(io));
    if (ra && ra->io)
        io_ring_stats(ra->io, &io);
    if (ra)
        pipeline_ahead_budget_use(&ra->budget, &armed, &kept);
    uint64_t v[] = {ra && ra->io,
                    ra ? ra->budget.limit : 0,
                    armed,
                    kept,
                    ra ? ra->batches : 0,
                    ra ? ra->nothing : 0,
                    ra ? ra->over_budget : 0,
                    ra ? ra->over_user : 0,
                    ra ? ra->buffered_disk : 0,
                    ra ? ra->waited : 0,
                    io.in_flight,
                    io.max_in_flight,
                    io.deferred};
    stats_begin(o, "readahead", NULL, NULL, NULL);
    stats_emit_u64(o, readahead_decl, v, sizeof(v) / sizeof(v[0]));
    stats_end(o);
}

uint64_t readahead_buffer_bytes(const struct readahead *ra)
{
    if (!ra)
        return 0;
    return __atomic_load_n(&ra->budget.used, __ATOMIC_RELAXED) +
           ra->chunks * pipeline_ahead_size();
}

void readahead_io_stats(const struct readahead *ra, struct io_stats *sum)
{
    struct io_stats io;
    if (!ra || !ra->io)
        return;
    io_ring_stats(ra->io, &io);
    io_stats_add(sum, &io);
}

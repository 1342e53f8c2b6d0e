/* Worker pool: see workers.h. */
#include "workers.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

enum { WORK_QUEUED = 1, WORK_RUNNING, WORK_DONE };

struct worker_thread {
    struct workers *pool;
    pthread_t tid;
    int started;
    struct worker_ctx ctx;
};

struct workers {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_cond_t idle;                /* busy fell to 0 while paused */
    struct work *head, *tail;           /* queued, FIFO */
    struct work *done_head, *done_tail; /* finished, for the event loop */
    unsigned queued, busy;
    unsigned guarded;                   /* busy with jobs workers_pause waits for */
    int stopping;
    int paused;
    int efd;
    struct event *ev;
    unsigned n;
    struct worker_thread *threads;
};

static void list_push(struct work **head, struct work **tail, struct work *w)
{
    w->next = NULL;
    if (*tail)
        (*tail)->next = w;
    else
        *head = w;
    *tail = w;
}

static void *worker_main(void *arg)
{
    struct worker_thread *t = arg;
    struct workers *p = t->pool;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        while ((!p->head || p->paused) && !p->stopping)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stopping)
            break;
        struct work *w = p->head;
        p->head = w->next;
        if (!p->head)
            p->tail = NULL;
        p->queued--;
        p->busy++;
        p->guarded += !w->unpaused;
        w->state = WORK_RUNNING;
        pthread_mutex_unlock(&p->lock);

        w->run(w, &t->ctx);

        pthread_mutex_lock(&p->lock);
        p->busy--;
        if (!w->unpaused && --p->guarded == 0 && p->paused)
            pthread_cond_signal(&p->idle);
        w->state = WORK_DONE;
        int wake = p->done_head == NULL;
        list_push(&p->done_head, &p->done_tail, w);
        if (wake) {
            uint64_t one = 1;
            if (write(p->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
                log_error("workers: eventfd write: %s", strerror(errno));
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Event loop side: run done() for every finished job. */
static void workers_on_done(evutil_socket_t fd, short what, void *arg)
{
    struct workers *p = arg;
    uint64_t v;
    (void)what;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_error("workers: eventfd read: %s", strerror(errno));
    pthread_mutex_lock(&p->lock);
    struct work *w = p->done_head;
    p->done_head = p->done_tail = NULL;
    pthread_mutex_unlock(&p->lock);
    while (w) {
        struct work *next = w->next;
        w->state = 0;
        w->done(w, 0);
        w = next;
    }
}

/* One ring per thread; says once which backend they use, and why. */
static int workers_io_setup(struct workers *p, const struct workers_config *cfg)
{
    char why[256], first_why[256] = "";
    for (unsigned i = 0; i < p->n; i++) {
        int rc = io_ring_create(&p->threads[i].ctx.io, cfg->io_depth,
                                cfg->io_force_pread ? IO_FORCE_PREAD : 0, why, sizeof(why));
        if (rc < 0)
            return rc;
        if (i == 0)
            snprintf(first_why, sizeof(first_why), "%s", why);
    }
    if (p->n == 0)
        return 0;
    struct io_ring *r = p->threads[0].ctx.io;
    if (strcmp(io_ring_backend(r), "io_uring") == 0 && !first_why[0])
        log_info("io: io_uring, %u reads in flight per worker", io_ring_depth(r));
    else if (cfg->io_force_pread)
        log_info("io: pread (%s), one read at a time per worker", first_why);
    else
        log_warn("io: %s: %s", io_ring_backend(r), first_why);
    return 0;
}

int workers_create(struct workers **out, struct event_base *base,
                   const struct workers_config *cfg)
{
    struct workers *p = calloc(1, sizeof(*p));
    unsigned n = cfg->threads;
    int rc;
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->n = n;
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->threads = calloc(n, sizeof(*p->threads));
    if (p->efd < 0 || !p->threads) {
        rc = p->efd < 0 ? -errno : -ENOMEM;
        goto fail;
    }
    p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, workers_on_done, p);
    if (!p->ev || event_add(p->ev, NULL) < 0) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = workers_io_setup(p, cfg)) < 0)
        goto fail;
    for (unsigned i = 0; i < n; i++) {
        struct worker_thread *t = &p->threads[i];
        t->pool = p;
        t->ctx.index = i;
        step_ctx_init(&t->ctx.step);
        t->ctx.step.max_pixels = cfg->max_pixels;
        t->ctx.step.max_seconds = cfg->max_audio_seconds;
        t->ctx.step.max_channels = cfg->max_audio_channels;
        if ((rc = -pthread_create(&t->tid, NULL, worker_main, t)) < 0)
            goto fail;
        t->started = 1;
    }
    *out = p;
    return 0;
fail:
    workers_destroy(p);
    return rc;
}

void workers_destroy(struct workers *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; p->threads && i < p->n; i++) {
        struct worker_thread *t = &p->threads[i];
        if (t->started)
            pthread_join(t->tid, NULL);
        step_ctx_free(&t->ctx.step);
        for (int k = 0; k < 3; k++)
            img_free(&t->ctx.scratch[k]);
        if (t->ctx.local_free)
            t->ctx.local_free(t->ctx.local);
        io_ring_destroy(t->ctx.io);
    }
    /* Nothing runs now: finish what finished, cancel what never started. */
    for (struct work *w = p->done_head, *next; w; w = next) {
        next = w->next;
        w->state = 0;
        w->done(w, 0);
    }
    for (struct work *w = p->head, *next; w; w = next) {
        next = w->next;
        w->state = 0;
        w->done(w, 1);
    }
    if (p->ev)
        event_free(p->ev);
    if (p->efd >= 0)
        close(p->efd);
    free(p->threads);
    pthread_cond_destroy(&p->cond);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void workers_submit(struct workers *p, struct work *w)
{
    pthread_mutex_lock(&p->lock);
    w->state = WORK_QUEUED;
    list_push(&p->head, &p->tail, w);
    p->queued++;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

int workers_cancel(struct workers *p, struct work *w)
{
    pthread_mutex_lock(&p->lock);
    if (w->state != WORK_QUEUED) {
        pthread_mutex_unlock(&p->lock);
        return -EBUSY;
    }
    struct work *prev = NULL;
    for (struct work *q = p->head; q; prev = q, q = q->next) {
        if (q != w)
            continue;
        if (prev)
            prev->next = q->next;
        else
            p->head = q->next;
        if (p->tail == q)
            p->tail = prev;
        p->queued--;
        break;
    }
    w->state = 0;
    pthread_mutex_unlock(&p->lock);
    w->done(w, 1);
    return 0;
}

void workers_pause(struct workers *p)
{
    pthread_mutex_lock(&p->lock);
    p->paused = 1;
    while (p->guarded > 0)
        pthread_cond_wait(&p->idle, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void workers_resume(struct workers *p)
{
    pthread_mutex_lock(&p->lock);
    p->paused = 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

unsigned workers_count(const struct workers *p)
{
    return p->n;
}

static const struct stats_decl workers_decl[] = {WORKERS_STATS(STATS_DECL)};
static const struct stats_decl workers_io_decl[] = {WORKERS_IO_STATS(STATS_DECL)};

void workers_stats(struct workers *p, struct stats_out *o)
{
    pthread_mutex_lock(&p->lock);
    uint64_t v[3] = {p->n, p->busy, p->queued};
    pthread_mutex_unlock(&p->lock);
    stats_emit_u64(o, workers_decl, v, 3);
}

static const char *io_backend(const struct workers *p)
{
    const char *b = p->n ? io_ring_backend(p->threads[0].ctx.io) : "none";
    for (unsigned i = 1; i < p->n; i++)
        if (strcmp(io_ring_backend(p->threads[i].ctx.io), b) != 0)
            return "mixed";
    return b;
}

void workers_io_fields(const struct workers *p, struct stats_out *o)
{
    struct stats_val v[2] = {stats_str(io_backend(p)),
                             stats_u64(p->n ? io_ring_depth(p->threads[0].ctx.io) : 0)};
    stats_emit(o, workers_io_decl, v, 2);
}

void workers_io_stats(const struct workers *p, struct io_stats *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (unsigned i = 0; i < p->n; i++) {
        struct io_stats s;
        io_ring_stats(p->threads[i].ctx.io, &s);
        io_stats_add(sum, &s);
    }
}

uint64_t workers_mem_bytes(const struct workers *p)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < p->n; i++)
        sum += __atomic_load_n(&p->threads[i].ctx.mem_bytes, __ATOMIC_RELAXED);
    return sum;
}

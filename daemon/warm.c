/* Warming a dataset: see warm.h. */
#include "warm.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "stats.h"

struct warm_job {
    struct work work; /* first: the work is the job */
    struct warm *w;
    uint32_t first, n;
    struct pipeline_warm_result res;
    int busy; /* with the worker pool */
};

struct warm {
    struct event_base *base;
    struct workers *workers;
    struct pipeline *pipe;
    struct dataset *ds;
    struct reply reply;
    struct event *ev; /* says done, outside of any call the owner made */
    struct warm_job *jobs;
    uint32_t njobs;
    uint32_t busy;    /* jobs with the pool */
    uint32_t next;    /* first sample not handed out yet */
    struct proto_progress prog;
    uint64_t sent_ns; /* when the last PROGRESS went */
    uint64_t t0_ns;
    int done, notified, closing;
};

static void warm_free(struct warm *w)
{
    struct dataset *ds = w->ds;
    free(w->jobs);
    free(w);
    if (ds)
        dataset_release(ds); /* last: may free a dataset a reload retired */
}

static void warm_say_progress(struct warm *w)
{
    struct reply_msg m = {.kind = REPLY_WARM, .warm = w->prog};
    if (reply_progress(&w->reply, &m, -1) < 0)
        log_error("warm of '%s': cannot queue a progress report: out of memory",
                  dataset_name(w->ds));
    w->sent_ns = stats_now_ns();
}

static void job_run(struct work *wk, struct worker_ctx *ctx)
{
    struct warm_job *j = (struct warm_job *)wk;
    memset(&j->res, 0, sizeof(j->res));
    pipeline_warm(j->w->pipe, j->w->ds, j->first, j->n, ctx, &j->res);
}

static void warm_pump(struct warm *w);

static void job_done(struct work *wk, int cancelled)
{
    struct warm_job *j = (struct warm_job *)wk;
    struct warm *w = j->w;
    j->busy = 0;
    w->busy--;
    if (w->closing) {
        if (w->busy == 0)
            warm_free(w);
        return;
    }
    if (cancelled) { /* cannot happen while the pool runs: count as failed */
        j->res.done = j->res.failed = j->n;
        j->res.bytes = j->res.computed = 0;
    }
    w->prog.done += j->res.done;
    w->prog.bytes += j->res.bytes;
    w->prog.failed += j->res.failed;
    w->prog.computed += j->res.computed;
    warm_pump(w);
}

static void warm_pump(struct warm *w)
{
    uint32_t total = dataset_size(w->ds);
    for (uint32_t i = 0; i < w->njobs && w->next < total; i++) {
        struct warm_job *j = &w->jobs[i];
        if (j->busy)
            continue;
        j->first = w->next;
        j->n = total - w->next < WARM_JOB_SAMPLES ? total - w->next : WARM_JOB_SAMPLES;
        w->next += j->n;
        j->busy = 1;
        w->busy++;
        workers_submit(w->workers, &j->work);
    }
    if (w->next == total && w->busy == 0) {
        w->done = 1;
        log_info("dataset '%s': warmed %llu samples (%llu computed, %llu bad, %.1f MiB) "
                 "in %.2f s", dataset_name(w->ds), (unsigned long long)w->prog.done,
                 (unsigned long long)w->prog.computed, (unsigned long long)w->prog.failed,
                 (double)w->prog.bytes / (1 << 20),
                 (double)(stats_now_ns() - w->t0_ns) / 1e9);
        event_active(w->ev, EV_TIMEOUT, 0);
    } else if (stats_now_ns() - w->sent_ns >= WARM_PROGRESS_MS * 1000000ull) {
        warm_say_progress(w);
    }
}

static void warm_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct warm *w = arg;
    (void)fd;
    (void)what;
    if (w->done && !w->notified) {
        struct reply_msg m = {.kind = REPLY_WARM, .warm = w->prog};
        w->notified = 1;
        /* The owner may close w from within: touch it no more (it says
         * itself if DONE could not be queued). */
        reply_done(&w->reply, &m);
    }
}

int warm_start(struct warm **out, struct event_base *base, struct workers *workers,
               struct pipeline *pipe, struct dataset *ds, const struct reply *reply,
               char *err, size_t errlen)
{
    const struct strategy *st = dataset_strategy(ds);
    uint32_t split = st->split;
    strategy_put(st);
    if (split == 0) {
        snprintf(err, errlen, "dataset '%s' has no offline steps: nothing to cache",
                 dataset_name(ds));
        return -EINVAL;
    }
    struct warm *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "no memory to warm a dataset");
        return -ENOMEM;
    }
    w->njobs = 2 * workers_count(workers);
    if (w->njobs == 0)
        w->njobs = 1;
    w->jobs = calloc(w->njobs, sizeof(*w->jobs));
    w->ev = event_new(base, -1, 0, warm_on_event, w);
    if (!w->jobs || !w->ev) {
        if (w->ev)
            event_free(w->ev);
        warm_free(w);
        snprintf(err, errlen, "no memory to warm a dataset");
        return -ENOMEM;
    }
    if (dataset_warm_begin(ds) < 0) {
        event_free(w->ev);
        warm_free(w);
        snprintf(err, errlen, "dataset '%s' is being warmed already", dataset_name(ds));
        return -EBUSY;
    }
    for (uint32_t i = 0; i < w->njobs; i++) {
        w->jobs[i].work.run = job_run;
        w->jobs[i].work.done = job_done;
        w->jobs[i].w = w;
    }
    w->base = base;
    w->workers = workers;
    w->pipe = pipe;
    w->ds = ds;
    dataset_hold(ds);
    w->reply = *reply;
    w->prog.total = dataset_size(ds);
    w->t0_ns = stats_now_ns();
    log_info("dataset '%s': warming %u samples", dataset_name(ds), dataset_size(ds));
    warm_say_progress(w);
    *out = w;
    warm_pump(w);
    return 0;
}

void warm_close(struct warm *w)
{
    w->closing = 1;
    w->reply.ops = NULL;
    dataset_warm_end(w->ds);
    event_free(w->ev);
    w->ev = NULL;
    if (!w->done)
        log_info("dataset '%s': warm stopped after %llu of %llu samples",
                 dataset_name(w->ds), (unsigned long long)w->prog.done,
                 (unsigned long long)w->prog.total);
    /* Queued jobs never start (their done() runs now); running ones come
     * back through job_done. A guard keeps w alive through the loop. */
    w->busy++;
    for (uint32_t i = 0; i < w->njobs; i++)
        if (w->jobs[i].busy)
            workers_cancel(w->workers, &w->jobs[i].work);
    if (--w->busy == 0)
        warm_free(w);
}

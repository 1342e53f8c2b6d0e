/* Epoch streams: see stream.h. */
#include "stream.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "log.h"
#include "planner.h"

struct batch_job {
    struct work work;
    struct stream *s;
    uint64_t index;
    uint32_t n;
    uint64_t skipped;
    enum pipeline_fault fault; /* set under on_error: fail */
    char err[640];
    int64_t *labels;
    uint8_t *buf;  /* [room for the largest prefix][sample data] */
    size_t start;  /* where the frame begins in buf */
    size_t end;    /* where it ends */
    int ready;
    struct batch_job *next_free;
};

struct stream {
    const struct stream_env *env;
    struct dataset *ds;
    struct plan plan;
    uint32_t id, req_id;
    uint64_t seed, epoch;
    uint32_t prefetch;
    struct bufferevent *bev;
    struct event *pump_ev;
    stream_finished_fn finished;
    void *owner;
    struct batch_job **ring; /* in flight, by batch index % prefetch */
    struct batch_job *free_jobs;
    uint32_t live_jobs;      /* jobs not yet flushed to the socket */
    uint64_t next_submit, next_send;
    uint64_t samples_sent, skipped;
    size_t data_off;         /* where sample data starts in a job buffer */
    int done;                /* END or ERROR sent */
    int notified;            /* the owner was told */
    int closing;
};

uint32_t stream_id(const struct stream *s)
{
    return s->id;
}

static void stream_free(struct stream *s)
{
    for (struct batch_job *j = s->free_jobs, *next; j; j = next) {
        next = j->next_free;
        free(j->buf);
        free(j->labels);
        free(j);
    }
    planner_free(&s->plan);
    free(s->ring);
    (*s->env->live_streams)--;
    free(s);
}

/* The job is needed neither by a worker nor by the socket any more. */
static void job_release(struct batch_job *j)
{
    struct stream *s = j->s;
    j->ready = 0;
    j->next_free = s->free_jobs;
    s->free_jobs = j;
    s->live_jobs--;
    if (s->closing && s->live_jobs == 0)
        stream_free(s);
}

/* ---- worker thread ---- */

static enum stats_counter fault_counter(enum pipeline_fault f)
{
    switch (f) {
    case PIPE_READ: return STAT_err_read;
    case PIPE_TOO_LARGE: return STAT_err_too_large;
    default: return STAT_err_decode;
    }
}

static void job_run(struct work *w, struct worker_ctx *ctx)
{
    struct batch_job *j = (struct batch_job *)w;
    const struct stream *s = j->s;
    struct dataset *ds = s->ds;
    uint64_t first;
    uint32_t len, k = 0;
    char err[512];

    planner_batch(&s->plan, j->index, &first, &len);
    j->skipped = 0;
    j->fault = PIPE_OK;
    for (uint32_t i = 0; i < len; i++) {
        uint32_t id = s->plan.ids[first + i];
        uint8_t *dst = j->buf + s->data_off + (size_t)k * ds->sample_bytes;
        enum pipeline_fault f =
            pipeline_sample(&s->env->pipe, ds, id, pipeline_sample_seed(s->seed, s->epoch, id),
                            dst, ctx, err, sizeof(err));
        if (f == PIPE_OK) {
            j->labels[k++] = ds->samples[id].label;
            continue;
        }
        stats_add(ctx->stats, fault_counter(f), 1);
        __atomic_fetch_add(&ds->errors, 1, __ATOMIC_RELAXED);
        if (dataset_first_error(ds, id))
            log_warn("dataset '%s': bad sample %s/%s: %s", ds->cfg->name, ds->cfg->root,
                     dataset_path(ds, id), err);
        if (ds->cfg->on_error == CONFIG_ON_ERROR_FAIL) {
            j->fault = f;
            snprintf(j->err, sizeof(j->err), "dataset '%s': bad sample %s/%s: %s",
                     ds->cfg->name, ds->cfg->root, dataset_path(ds, id), err);
            return;
        }
        j->skipped++;
    }
    /* Frame prefix in place, right in front of the data. */
    struct proto_batch_hdr hdr = {s->id, j->index, k, ds->out_h, ds->out_w, ds->out_c,
                                  ds->out_dtype};
    size_t data_len = (size_t)k * ds->sample_bytes;
    j->n = k;
    j->start = s->data_off - proto_batch_prefix_size(k);
    j->end = s->data_off + data_len;
    proto_batch_prefix_encode(j->buf + j->start, s->req_id, &hdr, j->labels, data_len);
}

/* ---- event loop thread ---- */

static void job_flushed(const void *data, size_t len, void *arg)
{
    struct batch_job *j = arg;
    struct stream *s = j->s;
    int closing = s->closing;
    (void)data;
    (void)len;
    job_release(j); /* may free s when closing */
    /* This may run inside the output buffer's drain: pump later, not here. */
    if (!closing)
        event_active(s->pump_ev, EV_TIMEOUT, 0);
}

static void job_done(struct work *w, int cancelled)
{
    struct batch_job *j = (struct batch_job *)w;
    struct stream *s = j->s;
    if (cancelled || s->closing) {
        job_release(j);
        return;
    }
    j->ready = 1;
    event_active(s->pump_ev, EV_TIMEOUT, 0);
}

static struct batch_job *job_get(struct stream *s)
{
    struct batch_job *j = s->free_jobs;
    if (j) {
        s->free_jobs = j->next_free;
        return j;
    }
    if (!(j = calloc(1, sizeof(*j))))
        return NULL;
    j->s = s;
    j->labels = malloc(s->plan.batch_size * sizeof(*j->labels));
    j->buf = malloc(s->data_off + (size_t)s->plan.batch_size * s->ds->sample_bytes);
    if (!j->labels || !j->buf) {
        free(j->labels);
        free(j->buf);
        free(j);
        return NULL;
    }
    j->work.run = job_run;
    j->work.done = job_done;
    return j;
}

/* The owner hears of it from the event loop, so no caller of this function
 * finds the stream freed under it. */
static void stream_finish(struct stream *s)
{
    s->done = 1;
    event_active(s->pump_ev, EV_TIMEOUT, 0);
}

static void stream_fail(struct stream *s, int code, const char *msg)
{
    frame_send_error(s->bev, s->req_id, code, msg);
    stream_finish(s);
}

static void stream_send_end(struct stream *s)
{
    struct proto_wbuf w;
    struct proto_end end = {s->id, s->next_send, s->samples_sent, s->skipped};
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_END, s->req_id);
    proto_put_end(&w, &end);
    if (frame_send(s->bev, &w) < 0)
        log_error("stream %u: cannot queue END: out of memory", s->id);
    proto_wbuf_free(&w);
    stream_finish(s);
}

/* Sends what is ready, in order, and keeps `prefetch` batches in flight. */
static void stream_pump(struct stream *s)
{
    struct evbuffer *out = bufferevent_get_output(s->bev);
    while (!s->done && s->next_send < s->next_submit) {
        struct batch_job *j = s->ring[s->next_send % s->prefetch];
        if (!j->ready)
            break;
        s->ring[s->next_send % s->prefetch] = NULL;
        if (j->fault != PIPE_OK) {
            job_release(j);
            stream_fail(s, PROTO_E_SAMPLE, j->err);
            return;
        }
        j->ready = 0;
        s->next_send++;
        s->skipped += j->skipped;
        stats_add(s->env->stats, STAT_samples_skipped, j->skipped);
        if (j->n == 0) { /* every sample was bad: nothing to send */
            job_release(j);
            continue;
        }
        s->samples_sent += j->n;
        stats_add(s->env->stats, STAT_batches_served, 1);
        stats_add(s->env->stats, STAT_samples_served, j->n);
        stats_add(s->env->stats, STAT_bytes_served, j->end - j->start);
        if (evbuffer_add_reference(out, j->buf + j->start, j->end - j->start,
                                   job_flushed, j) < 0) {
            job_release(j);
            stream_fail(s, PROTO_E_NOMEM, "cannot queue a batch");
            return;
        }
    }
    while (!s->done && s->next_submit < s->plan.batches && s->live_jobs < s->prefetch) {
        struct batch_job *j = job_get(s);
        if (!j) {
            if (s->live_jobs == 0)
                stream_fail(s, PROTO_E_NOMEM, "no memory for a batch buffer");
            return;
        }
        j->index = s->next_submit;
        j->ready = 0;
        s->ring[s->next_submit % s->prefetch] = j;
        s->next_submit++;
        s->live_jobs++;
        workers_submit(s->env->workers, &j->work);
    }
    if (!s->done && s->next_send == s->plan.batches)
        stream_send_end(s);
}

static void stream_on_pump(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    (void)fd;
    (void)what;
    if (s->done) {
        if (!s->notified) {
            s->notified = 1;
            s->finished(s, s->owner); /* the owner closes s: touch it no more */
        }
    }
    else
        stream_pump(s);
}

int stream_open(struct stream **out, const struct stream_env *env, struct dataset *ds,
                const struct proto_open *req, uint32_t prefetch, uint32_t id,
                uint32_t req_id, struct bufferevent *bev, stream_finished_fn finished,
                void *owner, char *err, size_t errlen)
{
    if (ds->out_h == 0 || ds->sample_bytes == 0) {
        snprintf(err, errlen, "dataset '%s': the pipeline's output size varies per image "
                 "(end it with center_crop)", ds->cfg->name);
        return -PROTO_E_INVAL;
    }
    struct stream *s = calloc(1, sizeof(*s));
    if (!s)
        return -PROTO_E_NOMEM;
    int rc = planner_make(&s->plan, ds->nsamples, req->seed, req->epoch,
                          !!(req->flags & PROTO_OPEN_SHUFFLE), req->rank, req->world,
                          req->batch_size, !!(req->flags & PROTO_OPEN_DROP_LAST));
    if (rc < 0) {
        free(s);
        if (rc == -EINVAL) {
            snprintf(err, errlen, "invalid stream: batch_size %u, rank %u, world %u",
                     req->batch_size, req->rank, req->world);
            return -PROTO_E_INVAL;
        }
        snprintf(err, errlen, "no memory to plan the epoch");
        return -PROTO_E_NOMEM;
    }
    s->env = env;
    s->ds = ds;
    s->id = id;
    s->req_id = req_id;
    s->seed = req->seed;
    s->epoch = req->epoch;
    s->prefetch = prefetch;
    s->bev = bev;
    s->finished = finished;
    s->owner = owner;
    s->data_off = (proto_batch_prefix_size(req->batch_size) + 63) & ~(size_t)63;
    s->ring = calloc(prefetch, sizeof(*s->ring));
    s->pump_ev = event_new(env->base, -1, 0, stream_on_pump, s);
    if (!s->ring || !s->pump_ev) {
        if (s->pump_ev)
            event_free(s->pump_ev);
        free(s->ring);
        planner_free(&s->plan);
        free(s);
        snprintf(err, errlen, "no memory for a stream");
        return -PROTO_E_NOMEM;
    }
    (*env->live_streams)++;
    stats_add(env->stats, STAT_streams_total, 1);

    struct proto_wbuf w;
    struct proto_opened op = {id, s->plan.count, s->plan.batches, ds->out_h, ds->out_w,
                              ds->out_c, ds->out_dtype};
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OPENED, req_id);
    proto_put_opened(&w, &op);
    rc = frame_send(bev, &w);
    proto_wbuf_free(&w);
    *out = s;
    if (rc < 0) {
        stream_fail(s, PROTO_E_NOMEM, "cannot queue a reply");
        return 0;
    }
    log_debug("stream %u: dataset '%s' epoch %llu rank %u/%u: %llu samples, %llu batches",
              id, ds->cfg->name, (unsigned long long)req->epoch, req->rank, req->world,
              (unsigned long long)s->plan.count, (unsigned long long)s->plan.batches);
    stream_pump(s);
    return 0;
}

void stream_close(struct stream *s)
{
    s->closing = 1;
    s->bev = NULL;
    event_free(s->pump_ev);
    s->pump_ev = NULL;
    /* Jobs still queued never start; running ones come back through
     * job_done; finished ones not yet sent are dropped now; buffers already
     * handed to the socket come back through job_flushed. A guard keeps s
     * alive until the loop is over. */
    s->live_jobs++;
    for (uint64_t b = s->next_send; b < s->next_submit; b++) {
        struct batch_job *j = s->ring[b % s->prefetch];
        if (!j)
            continue;
        s->ring[b % s->prefetch] = NULL;
        if (j->ready)
            job_release(j);
        else
            workers_cancel(s->env->workers, &j->work);
    }
    if (--s->live_jobs == 0)
        stream_free(s);
}

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
#include "readahead.h"
#include "ring.h"

/* One planned batch, computed by a worker. Its good samples end up
 * compacted at the front of the data area; the send stage cuts batches
 * out of the jobs' samples in epoch order (see stream_take). */
struct batch_job {
    struct work work;
    struct stream *s;
    uint64_t index; /* planned batch */
    uint32_t n;     /* good samples, at [0, n) of the data area */
    uint64_t skipped;
    enum pipeline_fault fault; /* set under on_error: fail */
    char err[640];
    int64_t *labels; /* batch_size */
    uint8_t *buf;    /* [data_off bytes of prefix room][batch_size samples] */
    uint8_t *pre;    /* the prefix of a batch that starts past sample 0 (lazy) */
    uint32_t refs;   /* in flight, the batch being cut, queued chunks, the client */
    uint32_t slot;   /* shared memory: the job's slot of the stream's ring */
    struct pipeline_ahead *ahead; /* its first chunk, read ahead (readahead.h) */
    int ready;
    struct batch_job *next_free;
};

/* Samples [off, off + n) of a job's data area. */
struct segment {
    struct batch_job *job;
    uint32_t off, n;
};

/* A piece of a BATCH frame handed to the socket by reference. */
struct chunk {
    const uint8_t *p;
    size_t len;
    struct batch_job *job;
};

struct stream {
    const struct stream_env *env;
    struct dataset *ds;
    struct plan plan;
    uint32_t id, req_id;
    uint64_t seed, epoch;
    uint32_t prefetch;
    int drop_last;
    struct bufferevent *bev;
    struct event *pump_ev;
    stream_finished_fn finished;
    void *owner;
    struct batch_job **inflight; /* submitted, by planned batch % cap */
    uint32_t cap;            /* most jobs a stream ever has: prefetch + 2 */
    struct batch_job *free_jobs;
    uint32_t live_jobs;      /* jobs off the free list */
    uint64_t next_submit, next_send;
    /* The batch being cut: at most two segments (see stream_take). */
    struct segment part[2];
    uint32_t nparts, part_n;
    int64_t *labels;         /* a two-segment batch's labels, gathered */
    uint64_t batches_sent, samples_sent, skipped;
    size_t data_off;         /* where sample data starts in a job buffer */
    int done;                /* END or ERROR sent */
    int notified;            /* the owner was told */
    int closing;
    /* Shared-memory transport (shm.fd >= 0): every job owns a slot of the
     * ring; a sent batch's job is held by the client until RELEASE. */
    struct ring shm;
    struct batch_job **held; /* by slot */
    uint32_t nheld, nslots_used;
    struct event *release_ev; /* the release timeout, armed while stalled */
    uint32_t release_timeout;
    int dropped;
    int shm_on;   /* the stream uses shm (which stream_take_ring may empty) */
    int ended;    /* END sent: the epoch completed */
};

uint32_t stream_id(const struct stream *s)
{
    return s->id;
}

static int stream_shm(const struct stream *s)
{
    return s->shm_on;
}

/* ring_create, counted in the gauges stream_ring_free takes it out of. */
static int stream_ring_create(const struct stream_env *env, struct ring *r, uint32_t slots,
                              size_t bytes, uint32_t id)
{
    char name[32];
    snprintf(name, sizeof(name), "presto-stream-%u", id);
    int rc = ring_create(r, slots, bytes, name);
    if (rc == 0) {
        *env->buffer_bytes += ring_bytes(r);
        *env->ring_bytes += ring_bytes(r);
        (*env->live_rings)++;
    }
    return rc;
}

void stream_ring_free(const struct stream_env *env, struct ring *r)
{
    if (r->fd < 0)
        return;
    *env->buffer_bytes -= ring_bytes(r);
    *env->ring_bytes -= ring_bytes(r);
    (*env->live_rings)--;
    ring_destroy(r);
}

/* Bytes a job's buffers take (its prefix buffer when it has one; a shared
 * memory job's data is the ring's, counted once for the stream). */
static size_t job_bytes(const struct stream *s, const struct batch_job *j)
{
    size_t b = sizeof(*j) + s->plan.batch_size * sizeof(*j->labels);
    if (!stream_shm(s))
        b += s->data_off + (size_t)s->plan.batch_size * s->ds->sample_bytes;
    return b + (j->pre ? proto_batch_prefix_size(s->plan.batch_size) : 0);
}

static void stream_free(struct stream *s)
{
    for (struct batch_job *j = s->free_jobs, *next; j; j = next) {
        next = j->next_free;
        *s->env->buffer_bytes -= job_bytes(s, j);
        if (!stream_shm(s))
            free(j->buf);
        free(j->pre);
        free(j->labels);
        readahead_free(s->env->readahead, &s->env->pipe, j->ahead);
        free(j);
    }
    planner_free(&s->plan);
    free(s->labels);
    free(s->inflight);
    stream_ring_free(s->env, &s->shm); /* unless stream_take_ring took it */
    free(s->held);
    (*s->env->live_streams)--;
    struct dataset *ds = s->ds;
    free(s);
    dataset_release(ds); /* last: may free a dataset a reload retired */
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

static void job_unref(struct batch_job *j)
{
    if (--j->refs == 0)
        job_release(j); /* may free the stream when it is closing */
}

static uint8_t *job_sample(const struct batch_job *j, uint32_t i)
{
    return j->buf + j->s->data_off + (size_t)i * j->s->ds->sample_bytes;
}

/* ---- worker thread ---- */

/* A bad sample: skipped, or under on_error: fail the end of the job. */
static int job_bad(void *arg, uint32_t i, enum pipeline_fault f, const char *err)
{
    struct batch_job *j = arg;
    const struct stream *s = j->s;
    const struct dataset *ds = s->ds;
    if (ds->cfg->on_error == CONFIG_ON_ERROR_FAIL) {
        uint64_t first;
        uint32_t len;
        planner_batch(&s->plan, j->index, &first, &len);
        j->fault = f;
        snprintf(j->err, sizeof(j->err), "dataset '%s': bad sample %s/%s: %s", ds->cfg->name,
                 ds->cfg->root, dataset_path(ds, s->plan.ids[first + i]), err);
        return 1;
    }
    j->skipped++;
    return 0;
}

static void job_run(struct work *w, struct worker_ctx *ctx)
{
    struct batch_job *j = (struct batch_job *)w;
    const struct stream *s = j->s;
    uint64_t first;
    uint32_t len;

    planner_batch(&s->plan, j->index, &first, &len);
    j->skipped = 0;
    j->fault = PIPE_OK;
    j->n = pipeline_batch(&s->env->pipe, s->ds, s->plan.ids + first, len, s->seed, s->epoch,
                          job_sample(j, 0), j->labels, ctx, j->ahead, job_bad, j);
    if (j->fault != PIPE_OK)
        j->n = 0;
}

/* ---- event loop thread ---- */

static void job_flushed(const void *data, size_t len, void *arg)
{
    struct batch_job *j = arg;
    struct stream *s = j->s;
    int closing = s->closing;
    (void)data;
    (void)len;
    job_unref(j); /* may free s when closing */
    /* This may run inside the output buffer's drain: pump later, not here. */
    if (!closing)
        event_active(s->pump_ev, EV_TIMEOUT, 0);
}

static void job_done(struct work *w, int cancelled)
{
    struct batch_job *j = (struct batch_job *)w;
    struct stream *s = j->s;
    if (cancelled || s->closing) {
        pipeline_ahead_drop(&s->env->pipe, j->ahead); /* when it never ran */
        job_unref(j);
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
    if (stream_shm(s) && s->nslots_used == s->shm.slots)
        return NULL;
    if (!(j = calloc(1, sizeof(*j))))
        return NULL;
    j->s = s;
    j->labels = malloc(s->plan.batch_size * sizeof(*j->labels));
    if (stream_shm(s))
        j->buf = ring_slot(&s->shm, j->slot = s->nslots_used);
    else
        j->buf = malloc(s->data_off + (size_t)s->plan.batch_size * s->ds->sample_bytes);
    if (!j->labels || !j->buf) {
        free(j->labels);
        if (!stream_shm(s))
            free(j->buf);
        free(j);
        return NULL;
    }
    if (stream_shm(s))
        s->nslots_used++;
    j->work.run = job_run;
    j->work.done = job_done;
    *s->env->buffer_bytes += job_bytes(s, j);
    return j;
}

/* The job's first chunk is read (readahead_batch): to the workers, unless
 * the stream closed meanwhile. */
static void job_read(void *arg)
{
    struct batch_job *j = arg;
    struct stream *s = j->s;
    if (s->closing) {
        pipeline_ahead_drop(&s->env->pipe, j->ahead);
        job_unref(j);
        return;
    }
    workers_submit(s->env->workers, &j->work);
}

/* Hands a job to the workers, through the read-ahead when it reads. */
static void job_submit(struct stream *s, struct batch_job *j)
{
    uint64_t first;
    uint32_t len;
    planner_batch(&s->plan, j->index, &first, &len);
    if (!readahead_batch(s->env->readahead, &s->env->pipe, s->ds, s->plan.ids + first, len,
                         &j->ahead, job_read, j))
        workers_submit(s->env->workers, &j->work);
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

/* Drops the batch being cut. */
static void stream_drop_parts(struct stream *s)
{
    for (uint32_t i = 0; i < s->nparts; i++)
        job_unref(s->part[i].job);
    s->nparts = 0;
    s->part_n = 0;
}

/* Queues a frame's chunks by reference, all or none: a frame of several
 * chunks is put together in a buffer of its own first. Returns 0 or -ENOMEM. */
static int stream_queue(struct stream *s, const struct chunk *c, unsigned nc)
{
    struct evbuffer *out = bufferevent_get_output(s->bev);
    struct evbuffer *dst = nc > 1 ? evbuffer_new() : out;
    int rc = 0;
    if (!dst)
        return -ENOMEM;
    for (unsigned i = 0; i < nc && rc == 0; i++) {
        if (evbuffer_add_reference(dst, c[i].p, c[i].len, job_flushed, c[i].job) < 0)
            rc = -ENOMEM;
        else
            c[i].job->refs++;
    }
    if (dst != out) {
        if (rc == 0 && evbuffer_add_buffer(out, dst) < 0)
            rc = -ENOMEM;
        evbuffer_free(dst); /* on failure, lets go of what it holds */
    }
    return rc;
}

/* A job's separate prefix buffer, made on first need; 1 when it has one. */
static int job_alloc_pre(struct stream *s, struct batch_job *j)
{
    if (!(j->pre = malloc(proto_batch_prefix_size(s->plan.batch_size))))
        return 0;
    *s->env->buffer_bytes += proto_batch_prefix_size(s->plan.batch_size);
    return 1;
}

/* After a batch of n samples (bytes on the wire) was queued with status rc:
 * counted, or on failure the stream fails. Returns 0, or -1 when it failed. */
static int stream_sent(struct stream *s, int rc, uint32_t n, uint64_t bytes)
{
    if (rc < 0) {
        stream_fail(s, PROTO_E_NOMEM, "cannot queue a batch");
        return -1;
    }
    s->batches_sent++;
    s->samples_sent += n;
    stats_add(s->env->stats, STAT_batches_served, 1);
    stats_add(s->env->stats, STAT_samples_served, n);
    stats_add(s->env->stats, STAT_bytes_served, bytes);
    return 0;
}

/* Sends the batch being cut as the next BATCH frame, without copying its
 * samples: the frame's prefix goes in front of the first sample when that
 * is the first of its job's buffer (there is room for it there), else in the
 * job's separate prefix buffer. Returns 0, or -1 when the stream failed. */
static int stream_emit(struct stream *s)
{
    const struct dataset *ds = s->ds;
    const struct segment *p0 = &s->part[0];
    uint32_t n = s->part_n;
    size_t data_len = (size_t)n * ds->sample_bytes;
    size_t pre_len = proto_batch_prefix_size(n);
    const int64_t *labels = p0->job->labels + p0->off;
    struct proto_batch_hdr hdr = {s->id, s->batches_sent, n, ds->out_h, ds->out_w,
                                  ds->out_c, ds->out_dtype};
    struct chunk c[3];
    unsigned nc = 0;
    int rc = 0;

    if (s->nparts == 2) {
        const struct segment *p1 = &s->part[1];
        memcpy(s->labels, labels, p0->n * sizeof(*labels));
        memcpy(s->labels + p0->n, p1->job->labels, p1->n * sizeof(*labels));
        labels = s->labels;
    }
    uint8_t *data0 = job_sample(p0->job, p0->off);
    size_t len0 = (size_t)p0->n * ds->sample_bytes;
    if (p0->off == 0) {
        proto_batch_prefix_encode(data0 - pre_len, s->req_id, &hdr, labels, data_len);
        c[nc++] = (struct chunk){data0 - pre_len, pre_len + len0, p0->job};
    } else if (p0->job->pre || job_alloc_pre(s, p0->job)) {
        proto_batch_prefix_encode(p0->job->pre, s->req_id, &hdr, labels, data_len);
        c[nc++] = (struct chunk){p0->job->pre, pre_len, p0->job};
        c[nc++] = (struct chunk){data0, len0, p0->job};
    } else {
        rc = -ENOMEM;
    }
    if (rc == 0 && s->nparts == 2)
        c[nc++] = (struct chunk){job_sample(s->part[1].job, 0),
                                 (size_t)s->part[1].n * ds->sample_bytes, s->part[1].job};
    if (rc == 0)
        rc = stream_queue(s, c, nc);
    stream_drop_parts(s); /* the queued chunks hold their own references */
    return stream_sent(s, rc, n, pre_len + data_len);
}

/* Appends samples [from, from + m) of src behind the second segment, in its
 * job's buffer: the room there is that of the samples its job skipped. */
static void stream_append(struct stream *s, struct batch_job *src, uint32_t from,
                          uint32_t m)
{
    struct segment *p1 = &s->part[1];
    memcpy(job_sample(p1->job, p1->n), job_sample(src, from), (size_t)m * s->ds->sample_bytes);
    memcpy(p1->job->labels + p1->n, src->labels + from, m * sizeof(*src->labels));
    p1->n += m;
}

/*
 * Cuts the epoch's good samples, in order, into full batches: takes job j
 * (the next planned batch, its good samples at [0, j->n)), and its
 * in-flight reference. Without skipped samples every job is one batch, sent as it is.
 * After a skip the batches straddle jobs: a batch is the rest of one job
 * (segment 0) and the head of the next (segment 1), both sent by reference.
 * Only when segment 1 is a whole job that still leaves the batch short (the
 * job skipped samples too) are the following samples copied behind it, into
 * the room its skipped samples left, so a batch never needs a third segment.
 * Returns 0, or -1 when the stream failed.
 */
static int stream_take(struct stream *s, struct batch_job *j)
{
    uint32_t bs = s->plan.batch_size, used = 0;
    int rc = 0;

    s->skipped += j->skipped;
    stats_add(s->env->stats, STAT_samples_skipped, j->skipped);
    while (rc == 0 && used < j->n) {
        uint32_t m = j->n - used;
        if (m > bs - s->part_n)
            m = bs - s->part_n;
        if (s->nparts < 2) {
            s->part[s->nparts++] = (struct segment){j, used, m};
            j->refs++;
        } else {
            stream_append(s, j, used, m);
        }
        s->part_n += m;
        used += m;
        if (s->part_n == bs)
            rc = stream_emit(s);
    }
    job_unref(j);
    return rc;
}

/* Shared memory: sends the batch being cut (whole, at the front of its job's
 * slot) as a BATCH_SHM; the job stays the client's until RELEASE. */
static int stream_emit_shm(struct stream *s)
{
    const struct dataset *ds = s->ds;
    struct batch_job *t = s->part[0].job;
    uint32_t n = s->part_n;
    struct proto_batch_shm m = {s->id, s->batches_sent, n, ds->out_h, ds->out_w, ds->out_c,
                                ds->out_dtype, t->slot,
                                (uint64_t)t->slot * s->shm.slot_bytes};
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_BATCH_SHM, s->req_id);
    proto_put_batch_shm(&w, &m);
    for (uint32_t i = 0; i < n; i++)
        proto_put_i64(&w, t->labels[i]);
    int rc = frame_send(s->bev, &w);
    proto_wbuf_free(&w);
    /* The cut's reference becomes the client's. */
    s->held[t->slot] = t;
    s->nheld++;
    s->nparts = 0;
    s->part_n = 0;
    return stream_sent(s, rc, n, (uint64_t)n * ds->sample_bytes);
}

/*
 * Shared memory: a batch must be one run of samples in one slot, so the
 * batch being cut collects in the slot of the job it starts in (segment 0,
 * always at offset 0). Without skipped samples every job is one batch and
 * nothing moves. After a skip the next job's head is copied behind it, and
 * that job's rest is moved to the front of its own slot, where it starts
 * the next batch: its head was copied out, so nobody refers to that room.
 * Returns 0, or -1 when the stream failed.
 */
static int stream_take_shm(struct stream *s, struct batch_job *j)
{
    uint32_t bs = s->plan.batch_size, used = 0;
    size_t sb = s->ds->sample_bytes;
    int rc = 0;

    s->skipped += j->skipped;
    stats_add(s->env->stats, STAT_samples_skipped, j->skipped);
    while (rc == 0 && used < j->n) {
        uint32_t m = j->n - used;
        if (m > bs - s->part_n)
            m = bs - s->part_n;
        if (s->nparts == 0) {
            if (used) {
                memmove(job_sample(j, 0), job_sample(j, used), m * sb);
                memmove(j->labels, j->labels + used, m * sizeof(*j->labels));
            }
            s->part[0] = (struct segment){j, 0, m};
            s->nparts = 1;
            j->refs++;
        } else {
            struct batch_job *t = s->part[0].job;
            memcpy(job_sample(t, s->part_n), job_sample(j, used), m * sb);
            memcpy(t->labels + s->part_n, j->labels + used, m * sizeof(*j->labels));
            s->part[0].n += m;
        }
        s->part_n += m;
        used += m;
        if (s->part_n == bs)
            rc = stream_emit_shm(s);
    }
    job_unref(j);
    return rc;
}

static void stream_send_end(struct stream *s)
{
    struct proto_wbuf w;
    struct proto_end end = {s->id, s->batches_sent, s->samples_sent, s->skipped};
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_END, s->req_id);
    proto_put_end(&w, &end);
    if (frame_send(s->bev, &w) < 0)
        log_error("stream %u: cannot queue END: out of memory", s->id);
    else
        s->ended = 1;
    proto_wbuf_free(&w);
    stream_finish(s);
}

/* Every planned batch is in: the short last batch, then END. */
static void stream_end(struct stream *s)
{
    if (s->part_n > 0 && s->drop_last) {
        log_debug("stream %u: dropped a short last batch of %u samples", s->id, s->part_n);
        stream_drop_parts(s);
    }
    if (s->part_n > 0 && (stream_shm(s) ? stream_emit_shm(s) : stream_emit(s)) < 0)
        return;
    stream_send_end(s);
}

/* Most jobs at once: `prefetch` batches in flight or in the socket, plus
 * the jobs the batch being cut holds, which wait for the next one; with
 * shared memory, the ring's slots (those the client holds included). */
static uint32_t stream_job_limit(const struct stream *s)
{
    return stream_shm(s) ? s->shm.slots : s->prefetch + s->nparts;
}

/* Takes what is ready, in order, and keeps the pipeline full. */
static void stream_pump(struct stream *s)
{
    while (!s->done && s->next_send < s->next_submit) {
        struct batch_job *j = s->inflight[s->next_send % s->cap];
        if (!j->ready)
            break;
        s->inflight[s->next_send % s->cap] = NULL;
        s->next_send++;
        j->ready = 0;
        if (j->fault != PIPE_OK) {
            stream_fail(s, PROTO_E_SAMPLE, j->err);
            job_unref(j);
            return;
        }
        if ((stream_shm(s) ? stream_take_shm(s, j) : stream_take(s, j)) < 0)
            return;
    }
    while (!s->done && s->next_submit < s->plan.batches &&
           s->live_jobs < stream_job_limit(s)) {
        struct batch_job *j = job_get(s);
        if (!j) {
            if (s->live_jobs == 0)
                stream_fail(s, PROTO_E_NOMEM, "no memory for a batch buffer");
            return;
        }
        j->index = s->next_submit;
        j->ready = 0;
        j->refs = 1; /* in flight */
        s->inflight[s->next_submit % s->cap] = j;
        s->next_submit++;
        s->live_jobs++;
        job_submit(s, j);
    }
    if (!s->done && s->next_send == s->plan.batches)
        stream_end(s);
    /* A ring full of slots the client holds, nothing in flight or waiting to
     * be sent: only a release lets the stream go on, and the client has this
     * long to send one. A ring full of batches the daemon is still computing
     * is not the client's doing (a slow pipeline never drops a client). */
    if (!s->done && stream_shm(s) && s->nheld > 0 && s->live_jobs >= stream_job_limit(s) &&
        s->next_send == s->next_submit && !evtimer_pending(s->release_ev, NULL)) {
        struct timeval tv = {s->release_timeout, 0};
        evtimer_add(s->release_ev, &tv);
    }
}

static void stream_on_release_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    char msg[160];
    (void)fd;
    (void)what;
    if (s->done)
        return;
    snprintf(msg, sizeof(msg), "stream %u: the client held all %u slots and released none "
             "for %u s: dropped", s->id, s->shm.slots, s->release_timeout);
    log_warn("%s", msg);
    stats_add(s->env->stats, STAT_shm_release_timeouts, 1);
    s->dropped = 1;
    stream_fail(s, PROTO_E_LIMIT, msg);
}

int stream_release(struct stream *s, uint32_t slot, char *err, size_t errlen)
{
    if (!stream_shm(s) || slot >= s->shm.slots || !s->held[slot]) {
        snprintf(err, errlen, "stream %u: RELEASE of slot %u, which the client does not hold",
                 s->id, slot);
        return -PROTO_E_INVAL;
    }
    struct batch_job *j = s->held[slot];
    s->held[slot] = NULL;
    s->nheld--;
    stats_add(s->env->stats, STAT_shm_releases, 1);
    evtimer_del(s->release_ev);
    job_unref(j);
    if (!s->done)
        event_active(s->pump_ev, EV_TIMEOUT, 0);
    return 0;
}

int stream_dropped(const struct stream *s)
{
    return s->dropped;
}

int stream_take_ring(struct stream *s, struct ring *out)
{
    if (!stream_shm(s) || !s->ended || s->shm.fd < 0 || out->fd >= 0)
        return 0;
    *out = s->shm;
    s->shm.fd = -1; /* stream_free leaves it alone now */
    s->shm.base = NULL;
    return 1;
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

/* An OPENED frame, with the descriptor fd attached unless it is -1. */
static int stream_put_opened(struct stream *s, const struct proto_opened *op, int fd)
{
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OPENED, s->req_id);
    proto_put_opened(&w, op);
    int rc = fd < 0 ? frame_send(s->bev, &w) : frame_send_fd(s->bev, &w, fd);
    proto_wbuf_free(&w);
    return rc;
}

/* Sends OPENED: with the ring's descriptor when shared memory was asked for
 * and can be had, else saying the stream uses the socket. */
static int stream_send_opened(struct stream *s, int want_shm, struct ring *spare)
{
    const struct dataset *ds = s->ds;
    struct proto_opened op = {s->id, s->plan.count, s->plan.batches, ds->out_h, ds->out_w,
                              ds->out_c, ds->out_dtype, ds->out_layout,
                              PROTO_TRANSPORT_SOCKET, 0, 0};
    int rc = 1;

    if (want_shm) {
        uint32_t slots = s->prefetch < 2 ? 2 : s->prefetch;
        size_t bytes = (size_t)s->plan.batch_size * ds->sample_bytes;
        int kept = spare && spare->fd >= 0 && spare->slots == slots &&
                   spare->slot_bytes == ring_slot_size(bytes);
        if (kept) { /* the client has it mapped: no descriptor to pass */
            s->shm = *spare;
            spare->fd = -1;
            spare->base = NULL;
            rc = 0;
        } else {
            if (spare) /* the client maps the new one instead */
                stream_ring_free(s->env, spare);
            rc = stream_ring_create(s->env, &s->shm, slots, bytes, s->id);
        }
        s->held = rc == 0 ? calloc(slots, sizeof(*s->held)) : NULL;
        if (rc == 0 && s->held) {
            op.transport = kept ? PROTO_TRANSPORT_SHM_KEPT : PROTO_TRANSPORT_SHM;
            op.slots = s->shm.slots;
            op.slot_bytes = s->shm.slot_bytes;
            rc = stream_put_opened(s, &op, kept ? -1 : s->shm.fd);
        } else if (rc == 0) {
            rc = -ENOMEM;
        }
        if (rc == 0) {
            s->shm_on = 1;
            s->data_off = 0;
            stats_add(s->env->stats, STAT_shm_streams_total, 1);
            if (kept)
                stats_add(s->env->stats, STAT_shm_rings_kept, 1);
            return 0;
        }
        log_info("stream %u: shared memory not possible (%s): using the socket", s->id,
                 rc == -EAGAIN ? "output already queued" : strerror(-rc));
        stats_add(s->env->stats, STAT_shm_fallbacks, 1);
        stream_ring_free(s->env, &s->shm);
        free(s->held);
        s->held = NULL;
        op.transport = PROTO_TRANSPORT_SOCKET;
        op.slots = 0;
        op.slot_bytes = 0;
    } else if (spare) {
        stream_ring_free(s->env, spare);
    }
    return stream_put_opened(s, &op, -1);
}

int stream_open(struct stream **out, const struct stream_env *env, struct dataset *ds,
                const struct proto_open *req, uint32_t prefetch, uint32_t id,
                uint32_t req_id, struct bufferevent *bev, struct ring *spare,
                stream_finished_fn finished, void *owner, char *err, size_t errlen)
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
    s->drop_last = !!(req->flags & PROTO_OPEN_DROP_LAST);
    s->bev = bev;
    s->finished = finished;
    s->owner = owner;
    s->shm.fd = -1;
    s->release_timeout = env->release_timeout;
    s->data_off = (proto_batch_prefix_size(req->batch_size) + 63) & ~(size_t)63;
    s->cap = prefetch + 2;
    s->inflight = calloc(s->cap, sizeof(*s->inflight));
    s->labels = malloc(req->batch_size * sizeof(*s->labels));
    s->pump_ev = event_new(env->base, -1, 0, stream_on_pump, s);
    s->release_ev = evtimer_new(env->base, stream_on_release_timeout, s);
    if (!s->inflight || !s->labels || !s->pump_ev || !s->release_ev) {
        if (s->pump_ev)
            event_free(s->pump_ev);
        if (s->release_ev)
            event_free(s->release_ev);
        free(s->labels);
        free(s->inflight);
        planner_free(&s->plan);
        free(s);
        snprintf(err, errlen, "no memory for a stream");
        return -PROTO_E_NOMEM;
    }
    (*env->live_streams)++;
    dataset_hold(ds);
    stats_add(env->stats, STAT_streams_total, 1);
    *out = s;
    rc = stream_send_opened(s, !!(req->flags & PROTO_OPEN_SHM), spare);
    if (rc < 0) {
        stream_fail(s, PROTO_E_NOMEM, "cannot queue a reply");
        return 0;
    }
    log_debug("stream %u: dataset '%s' epoch %llu rank %u/%u: %llu samples, %llu batches, %s",
              id, ds->cfg->name, (unsigned long long)req->epoch, req->rank, req->world,
              (unsigned long long)s->plan.count, (unsigned long long)s->plan.batches,
              stream_shm(s) ? "shared memory" : "socket");
    stream_pump(s);
    return 0;
}

void stream_close(struct stream *s)
{
    s->closing = 1;
    s->bev = NULL;
    event_free(s->pump_ev);
    s->pump_ev = NULL;
    event_free(s->release_ev);
    s->release_ev = NULL;
    /* Jobs still queued never start; running ones come back through
     * job_done; finished ones not yet sent are dropped now, and so is the
     * batch being cut; buffers already handed to the socket come back
     * through job_flushed. A guard keeps s alive until the loop is over. */
    s->live_jobs++;
    for (uint64_t b = s->next_send; b < s->next_submit; b++) {
        struct batch_job *j = s->inflight[b % s->cap];
        if (!j)
            continue;
        s->inflight[b % s->cap] = NULL;
        if (j->ready)
            job_unref(j);
        else
            workers_cancel(s->env->workers, &j->work);
    }
    stream_drop_parts(s);
    /* The client's slots: it is gone, or has the ring mapped on its own. */
    for (uint32_t i = 0; s->held && i < s->shm.slots; i++) {
        if (s->held[i]) {
            job_unref(s->held[i]);
            s->held[i] = NULL;
        }
    }
    s->nheld = 0;
    if (--s->live_jobs == 0)
        stream_free(s);
}

/* Epoch streams: see stream.h. */
#include "stream.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"
#include "planner.h"
#include "readahead.h"
#include "ring.h"
#include "source.h"

#define STREAMS_IDX(name, ...) SS_##name,
#define SHM_IDX(name, ...) SHM_##name,
enum { STREAMS_STATS(STREAMS_IDX) SS_MAX };
enum { STREAMS_SHM_STATS(SHM_IDX) SHM_MAX };
static const struct stats_decl streams_decl[] = {STREAMS_STATS(STATS_DECL)};
static const struct stats_decl shm_decl[] = {STREAMS_SHM_STATS(STATS_DECL)};

struct streams {
    struct event_base *base;
    struct workers *workers;
    struct pipeline *pipe;
    struct readahead *readahead;
    uint32_t release_timeout;
    /* Event loop thread only. */
    uint64_t n[SS_MAX];    /* STREAMS_STATS */
    uint64_t shm[SHM_MAX]; /* STREAMS_SHM_STATS, release_timeout_s aside */
    uint64_t buffer_bytes; /* batch buffers and rings */
};

/* One planned batch, computed by a worker. Its good samples end up
 * compacted at the front of the data area; the send stage cuts batches
 * out of the jobs' samples in epoch order (see stream_take). */
struct batch_job {
    struct work work;
    struct reply_ref ref; /* lent with pieces of buf (reply_batch) */
    struct stream *s;
    uint64_t index; /* planned batch */
    uint32_t n;     /* good samples, at [0, n) of the data area */
    uint64_t skipped;
    int failed;     /* a bad sample under on_error: fail */
    char err[640];
    int64_t *labels; /* batch_size: the samples' class indices (pipeline_batch) */
    uint8_t *lab;    /* batch_size rows of the label tensor (stream_label_row):
                        labels itself for int64 labels, else a buffer of its own */
    int64_t *lengths; /* padded (batch: {pad: longest}): the samples' lengths */
    uint32_t w;       /* padded: the batch's longest, its samples' w once laid out */
    uint8_t *buf;    /* [data_off bytes of room][batch_size samples] */
    uint32_t refs;   /* in flight, the batch being cut, pieces lent, the client */
    uint32_t slot;   /* shared memory: the job's slot of the stream's ring */
    struct readahead_slot ahead; /* its first chunk, read ahead (readahead.h) */
    int ready;
    int abandoned; /* atomic: the stream closed while it ran (ctx->stop) */
    struct batch_job *next_free;
};

/* Samples [off, off + n) of a job's data area. */
struct segment {
    struct batch_job *job;
    uint32_t off, n;
};

struct stream {
    struct streams *ss;
    struct dataset *ds;
    struct plan plan;
    struct stream_params p;
    struct reply reply;
    struct event *pump_ev;
    struct batch_job **inflight; /* submitted, by planned batch % cap */
    uint32_t cap;            /* most jobs a stream ever has: prefetch + 2 */
    struct batch_job *free_jobs;
    uint32_t live_jobs;      /* jobs off the free list */
    uint64_t next_submit, next_send;
    /* Jobs [next_ahead, next_submit) wait, in order, for room in the
     * read-ahead's budget (io.readahead), which a job of this stream gives
     * back as it is done: retried at each pump (job_submit). */
    uint64_t next_ahead;
    /* The batch being cut: at most two segments (see stream_take). */
    struct segment part[2];
    uint32_t nparts, part_n;
    uint8_t *labels;         /* a two-segment batch's label rows, gathered */
    size_t lab_row;          /* bytes of a sample's row of the label tensor */
    int padded;              /* batch: {pad: longest}: a job is a batch (stream_take_job) */
    uint64_t batches_sent, samples_sent, skipped;
    uint64_t first_batch;    /* where the stream started (params.start_batch) */
    size_t data_off;         /* where sample data starts in a job buffer */
    int done;                /* ended: the last word is due (or said) */
    int said;                /* the reply was told done or failed */
    int err;                 /* why it ended: 0 (well) or -errno */
    char msg[700];           /* ... and the message */
    int closing;
    /* Shared-memory transport (shm.fd >= 0): every job owns a slot of the
     * ring; a sent batch's job is held by the client until released. */
    struct ring shm;
    struct batch_job **held; /* by slot */
    uint32_t nheld, nslots_used;
    struct event *release_ev; /* the release timeout, armed while stalled */
    uint32_t release_timeout;
    int dropped;
    int shm_on;   /* the stream uses shm (which stream_take_ring may empty) */
    int ended;    /* the end was said: the epoch completed */
    int copies_logged; /* the client's first copied batch was logged */
};

/* ---- the streams' context ---- */

int streams_create(struct streams **out, struct event_base *base, struct workers *workers,
                   struct pipeline *pipe, struct readahead *readahead)
{
    struct streams *ss = calloc(1, sizeof(*ss));
    if (!ss)
        return -ENOMEM;
    ss->base = base;
    ss->workers = workers;
    ss->pipe = pipe;
    ss->readahead = readahead;
    ss->release_timeout = 60;
    *out = ss;
    return 0;
}

void streams_destroy(struct streams *ss)
{
    free(ss);
}

void streams_set_release_timeout(struct streams *ss, uint32_t seconds)
{
    ss->release_timeout = seconds;
}

void streams_stats(const struct streams *ss, struct stats_out *o)
{
    stats_emit_u64(o, streams_decl, ss->n, SS_MAX);
}

void streams_shm_stats(const struct streams *ss, struct stats_out *o)
{
    uint64_t v[SHM_MAX];
    memcpy(v, ss->shm, sizeof(v));
    v[SHM_release_timeout_s] = ss->release_timeout;
    stats_begin(o, "shm", NULL, NULL, NULL);
    stats_emit_u64(o, shm_decl, v, SHM_MAX);
    stats_end(o);
}

uint64_t streams_buffer_bytes(const struct streams *ss)
{
    return ss->buffer_bytes;
}

uint64_t streams_release_timeouts(const struct streams *ss)
{
    return ss->shm[SHM_release_timeouts];
}

static int stream_shm(const struct stream *s)
{
    return s->shm_on;
}

static size_t stream_sample_bytes(const struct stream *s)
{
    return dataset_output(s->ds)->bytes;
}

/* Label tensors go out as they lie in memory (proto.h: little-endian). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "labels are sent as they lie");

/* Bytes of one sample's row of the dataset's label tensor (8: an int64
 * class index; 4 K: K float32 soft targets). */
static size_t label_row(const struct dataset *ds)
{
    return (size_t)proto_label_row(&dataset_output(ds)->labels);
}

/* A job's label rows beyond its int64 labels (soft targets), in bytes. */
static size_t job_extra_labels(const struct stream *s)
{
    return s->lab_row == sizeof(int64_t) ? 0 : s->p.batch_size * s->lab_row;
}

/* ring_create, counted in the gauges stream_ring_free takes it out of. */
static int stream_ring_create(struct streams *ss, struct ring *r, uint32_t slots, size_t bytes,
                              uint32_t id)
{
    char name[32];
    snprintf(name, sizeof(name), "presto-stream-%u", id);
    int rc = ring_create(r, slots, bytes, name);
    if (rc == 0) {
        ss->buffer_bytes += ring_bytes(r);
        ss->shm[SHM_ring_bytes] += ring_bytes(r);
        ss->shm[SHM_rings]++;
    }
    return rc;
}

void stream_ring_free(struct streams *ss, struct ring *r, struct budget *b, uid_t uid)
{
    if (r->fd < 0)
        return;
    ss->buffer_bytes -= ring_bytes(r);
    ss->shm[SHM_ring_bytes] -= ring_bytes(r);
    ss->shm[SHM_rings]--;
    if (b && budget_linger(b, uid, ring_bytes(r), r->fd) < 0 && ring_punch(r) < 0)
        log_warn("a ring's pages can be neither watched nor freed: they stay uncharged until "
                 "the client closes its copy");
    ring_destroy(r);
}

/* Bytes a job's buffers take (a shared memory job's data is the ring's,
 * counted once for the stream). */
static size_t job_bytes(const struct stream *s)
{
    size_t b = sizeof(struct batch_job) + s->p.batch_size * sizeof(int64_t) +
               job_extra_labels(s) + (s->padded ? s->p.batch_size * sizeof(int64_t) : 0);
    if (!stream_shm(s))
        b += s->data_off + (size_t)s->p.batch_size * stream_sample_bytes(s);
    return b;
}

uint64_t stream_memory(const struct dataset *ds, const struct stream_params *p)
{
    const struct dataset_output *o = dataset_output(ds);
    uint64_t bs = p->batch_size, sample = o->bytes;
    uint64_t row = proto_label_row(&o->labels);
    uint64_t cap = (uint64_t)p->prefetch + 2; /* inflight's entries, most jobs */
    uint64_t room = ((uint64_t)p->room + 63) & ~(uint64_t)63;
    uint64_t len = o->labels.lengths ? sizeof(int64_t) : 0; /* padded: lengths */
    uint64_t job = sizeof(struct batch_job) + bs * sizeof(int64_t) +
                   (row == sizeof(int64_t) ? 0 : bs * row) + bs * len;
    uint64_t base = sizeof(struct stream) + (uint64_t)dataset_size(ds) * sizeof(uint32_t) +
                    bs * (row + len) + cap * sizeof(struct batch_job *);
    /* Socket: up to cap jobs with their buffers (never more than the
     * epoch's batches and the two a cut waits in), their frames queued by
     * reference (the frame's prefix is written in the room before them). */
    uint64_t batches = ((uint64_t)dataset_size(ds) / (p->world ? p->world : 1) + bs) / bs + 2;
    uint64_t sock = base + (cap < batches ? cap : batches) * (job + room + bs * sample);
    if (!p->shm)
        return sock;
    /* Shared memory: a job per slot and the ring; the BATCH_SHM frames
     * (header and labels) of every slot the client has not taken. */
    uint64_t slots = stream_ring_slots(p->prefetch);
    uint64_t frame = 128 + bs * (row + len);
    uint64_t shm = base + slots * (job + sizeof(struct batch_job *) + frame +
                                   ring_slot_size((size_t)(bs * sample)));
    return shm > sock ? shm : sock;
}

static void stream_free(struct stream *s)
{
    struct streams *ss = s->ss;
    if (s->p.budget)
        budget_uncharge(s->p.budget, s->p.uid, s->p.charge);
    for (struct batch_job *j = s->free_jobs, *next; j; j = next) {
        next = j->next_free;
        ss->buffer_bytes -= job_bytes(s);
        if (!stream_shm(s))
            free(j->buf);
        if (j->lab != (uint8_t *)j->labels)
            free(j->lab);
        free(j->labels);
        free(j->lengths);
        readahead_done(ss->readahead, &j->ahead); /* done already: nothing */
        free(j);
    }
    planner_free(&s->plan);
    free(s->labels);
    free(s->inflight);
    stream_ring_free(ss, &s->shm, s->p.budget, s->p.uid); /* unless stream_take_ring took it */
    free(s->held);
    ss->n[SS_streams]--;
    struct dataset *ds = s->ds;
    free(s);
    dataset_release(ds); /* last: may free a dataset a reload retired */
}

/* The job is needed neither by a worker nor by the reply any more. */
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
    return j->buf + j->s->data_off + (size_t)i * stream_sample_bytes(j->s);
}

/* A sample's bytes as the job's batch goes out: padded, at its longest. */
static size_t job_sample_bytes(const struct batch_job *j)
{
    const struct dataset_output *o = dataset_output(j->s->ds);
    return j->s->padded ? o->bytes / o->w * j->w : o->bytes;
}

/* ---- worker thread ---- */

/* A bad sample: skipped, or under on_error: fail the end of the job. */
static int job_bad(void *arg, uint32_t i, int err, const char *msg)
{
    struct batch_job *j = arg;
    const struct stream *s = j->s;
    const struct dataset *ds = s->ds;
    const struct config_dataset *cfg = dataset_config(ds);
    (void)err;
    if (cfg->on_error == CONFIG_ON_ERROR_FAIL) {
        uint64_t first;
        uint32_t len;
        planner_batch(&s->plan, j->index, &first, &len);
        j->failed = 1;
        snprintf(j->err, sizeof(j->err), "dataset '%s': bad sample %s/%s: %s", cfg->name,
                 cfg->root, dataset_path(ds, s->plan.ids[first + i]), msg);
        return 1;
    }
    j->skipped++;
    return 0;
}

/*
 * The batch-level steps run on the job's good samples, once a worker has
 * them all: the planned batch, mixed among its samples with a decision of
 * its own (hash_batch_seed of its number in the epoch across ranks). Without
 * bad samples that is exactly the batch the client gets; after a skip under
 * on_error: skip the batches it gets straddle two planned ones, and each
 * sample keeps the mix (partner and decision) of its planned batch, its
 * soft target always saying what was done to its pixels. A worker, not the
 * event loop, does the work; the decision never depends on the workers, the
 * cache or the transport.
 */
static void job_batch_steps(struct batch_job *j)
{
    const struct stream *s = j->s;
    uint64_t number = j->index * s->p.world + s->p.rank;
    int rc = pipeline_batch_steps(s->ds, hash_batch_seed(s->p.seed, s->p.epoch, number),
                                  job_sample(j, 0), j->n, j->labels, (float *)(void *)j->lab);
    if (rc == -ENOMEM) {
        j->failed = 1;
        j->n = 0;
        snprintf(j->err, sizeof(j->err), "dataset '%s': no memory to mix batch %llu",
                 dataset_name(s->ds), (unsigned long long)j->index);
    }
}

static void job_run(struct work *w, struct worker_ctx *ctx)
{
    struct batch_job *j = (struct batch_job *)w;
    const struct stream *s = j->s;
    uint64_t first;
    uint32_t len;

    planner_batch(&s->plan, j->index, &first, &len);
    j->skipped = 0;
    j->failed = 0;
    ctx->stop = &j->abandoned;
    j->n = pipeline_batch_padded(s->ss->pipe, s->ds, s->plan.ids + first, len, s->p.seed,
                                 s->p.epoch, job_sample(j, 0), j->labels, j->lengths, ctx,
                                 j->ahead.a, job_bad, j);
    ctx->stop = NULL;
    if (j->failed)
        j->n = 0;
    if (s->padded) { /* laid out at the batch's longest, here on the worker */
        const struct dataset_output *o = dataset_output(s->ds);
        j->w = pipeline_pad_relay(job_sample(j, 0), j->n, (size_t)o->c * o->h, o->w,
                                  proto_dtype_size(o->dtype), j->lengths);
    }
    if (j->lab != (uint8_t *)j->labels) /* soft targets: mixup, cutmix */
        job_batch_steps(j);
}

/* ---- event loop thread ---- */

/* A piece of the job's buffer lent to the reply is back. */
static void job_piece_back(struct reply_ref *ref)
{
    struct batch_job *j = (struct batch_job *)((char *)ref - offsetof(struct batch_job, ref));
    struct stream *s = j->s;
    int closing = s->closing;
    job_unref(j); /* may free s when closing */
    /* This may run inside the socket's drain: pump later, not here. */
    if (!closing)
        event_active(s->pump_ev, EV_TIMEOUT, 0);
}

static void job_done(struct work *w, int cancelled)
{
    struct batch_job *j = (struct batch_job *)w;
    struct stream *s = j->s;
    readahead_done(s->ss->readahead, &j->ahead); /* its charge back (budget.h) */
    if (cancelled || s->closing) {
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
    j->labels = malloc(s->p.batch_size * sizeof(*j->labels));
    j->lab = job_extra_labels(s) ? malloc(job_extra_labels(s)) : (uint8_t *)j->labels;
    j->lengths = s->padded ? malloc(s->p.batch_size * sizeof(*j->lengths)) : NULL;
    if (stream_shm(s))
        j->buf = ring_slot(&s->shm, j->slot = s->nslots_used);
    else
        j->buf = malloc(s->data_off + (size_t)s->p.batch_size * stream_sample_bytes(s));
    if (!j->labels || !j->lab || !j->buf || (s->padded && !j->lengths)) {
        if (j->lab != (uint8_t *)j->labels)
            free(j->lab);
        free(j->labels);
        free(j->lengths);
        if (!stream_shm(s))
            free(j->buf);
        free(j);
        return NULL;
    }
    if (stream_shm(s))
        s->nslots_used++;
    j->ahead.budget = s->p.budget;
    j->ahead.uid = s->p.uid;
    j->work.run = job_run;
    j->work.done = job_done;
    j->ref.release = job_piece_back;
    s->ss->buffer_bytes += job_bytes(s);
    return j;
}

/* The job's first chunk is read (readahead_batch): to the workers, unless
 * the stream closed meanwhile. */
static void job_read(void *arg)
{
    struct batch_job *j = arg;
    struct stream *s = j->s;
    if (s->closing) {
        readahead_done(s->ss->readahead, &j->ahead);
        job_unref(j);
        return;
    }
    workers_submit(s->ss->workers, &j->work);
}

/* 1 when a job of s before index is being run or read ahead (its end
 * pumps the stream again). */
static int stream_running_before(const struct stream *s, uint64_t index)
{
    for (uint64_t b = s->next_send; b < index; b++) {
        const struct batch_job *j = s->inflight[b % s->cap];
        if (j && !j->ready)
            return 1;
    }
    return 0;
}

/* Hands job j (the one at next_ahead) to the workers, through the
 * read-ahead when it reads. Returns 0, or -ENOBUFS when the read-ahead's
 * budget is in use and a job before it will give some back: j waits (the
 * next pump tries again), as a worker reading it itself would start its
 * reads only when it takes the job, none of them in flight while the
 * batches before it run. */
static int job_submit(struct stream *s, struct batch_job *j)
{
    uint64_t first;
    uint32_t len;
    planner_batch(&s->plan, j->index, &first, &len);
    int rc = readahead_batch(s->ss->readahead, s->ss->pipe, s->ds, s->plan.ids + first, len,
                             &j->ahead, stream_running_before(s, j->index), job_read, j);
    if (rc == -ENOBUFS)
        return rc;
    s->next_ahead++;
    if (rc <= 0)
        workers_submit(s->ss->workers, &j->work);
    return 0;
}

/* The stream ends (err 0: well; else -errno and msg): the reply hears of it
 * from the event loop (stream_on_pump), so no caller of this function finds
 * the stream closed under it. */
static void stream_finish(struct stream *s, int err, const char *msg)
{
    if (s->done)
        return;
    s->done = 1;
    s->err = err;
    snprintf(s->msg, sizeof(s->msg), "%s", msg ? msg : "");
    event_active(s->pump_ev, EV_TIMEOUT, 0);
}

/* Drops the batch being cut. */
static void stream_drop_parts(struct stream *s)
{
    for (uint32_t i = 0; i < s->nparts; i++)
        job_unref(s->part[i].job);
    s->nparts = 0;
    s->part_n = 0;
}

/* After a batch of n samples (data bytes of them delivered) went to the
 * reply, which answered rc (the bytes it queued, or -errno): counted, or
 * on failure the stream fails. Returns 0, or -ENOMEM when it failed. */
static int stream_sent(struct stream *s, int rc, uint32_t n, uint64_t bytes)
{
    uint64_t *st = s->ss->n;
    if (rc < 0) {
        stream_finish(s, -ENOMEM, "cannot queue a batch");
        return -ENOMEM;
    }
    s->batches_sent++;
    s->samples_sent += n;
    st[SS_batches_served]++;
    st[SS_samples_served] += n;
    st[SS_bytes_served] += bytes;
    return 0;
}

/* Lends piece k of b: samples [off, off + n) of job j. */
static void batch_piece(struct reply_batch *b, struct batch_job *j, uint32_t off, uint32_t n)
{
    unsigned k = b->npieces++;
    b->piece[k].p = job_sample(j, off);
    b->piece[k].len = (size_t)n * job_sample_bytes(j);
    b->piece[k].ref = &j->ref;
    j->refs++;
}

/* The batch of n samples about to go out, without its samples. Padded, it
 * is job j's, at its longest, its lengths gathered behind the labels. */
static void batch_init(struct stream *s, struct reply_batch *b, uint32_t n,
                       const uint8_t *labels, const struct batch_job *j)
{
    const struct dataset_output *o = dataset_output(s->ds);
    memset(b, 0, sizeof(*b));
    b->index = s->first_batch + s->batches_sent;
    b->n = n;
    b->h = o->h;
    b->w = s->padded ? j->w : o->w;
    b->c = o->c;
    b->dtype = o->dtype;
    b->labels = labels;
    b->labels_len = (size_t)n * s->lab_row;
    if (s->padded) { /* the label block: n rows, then n lengths */
        if (labels != s->labels)
            memcpy(s->labels, labels, b->labels_len);
        memcpy(s->labels + b->labels_len, j->lengths, n * sizeof(int64_t));
        b->labels = s->labels;
        b->labels_len += n * sizeof(int64_t);
    }
}

/* Sends the batch being cut without copying its samples: its segments are
 * lent to the reply, with the room in front of the first when that is the
 * first of its job's buffer. Returns 0, or -ENOMEM when the stream failed. */
static int stream_emit(struct stream *s)
{
    const struct segment *p0 = &s->part[0];
    uint32_t n = s->part_n;
    const uint8_t *labels = p0->job->lab + p0->off * s->lab_row;
    struct reply_batch b;

    if (s->nparts == 2) {
        const struct segment *p1 = &s->part[1];
        memcpy(s->labels, labels, p0->n * s->lab_row);
        memcpy(s->labels + p0->n * s->lab_row, p1->job->lab, p1->n * s->lab_row);
        labels = s->labels;
    }
    batch_init(s, &b, n, labels, p0->job);
    batch_piece(&b, p0->job, p0->off, p0->n);
    b.room = p0->off == 0 ? s->data_off : 0;
    if (s->nparts == 2)
        batch_piece(&b, s->part[1].job, 0, s->part[1].n);
    int rc = reply_batch(&s->reply, &b);
    stream_drop_parts(s); /* the pieces lent hold their own references */
    return stream_sent(s, rc, n, rc < 0 ? 0 : (uint64_t)rc);
}

/* Appends samples [from, from + m) of src behind the second segment, in its
 * job's buffer: the room there is that of the samples its job skipped. */
static void stream_append(struct stream *s, struct batch_job *src, uint32_t from,
                          uint32_t m)
{
    struct segment *p1 = &s->part[1];
    memcpy(job_sample(p1->job, p1->n), job_sample(src, from),
           (size_t)m * stream_sample_bytes(s));
    memcpy(p1->job->lab + p1->n * s->lab_row, src->lab + from * s->lab_row, m * s->lab_row);
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
 * Returns 0, or -ENOMEM when the stream failed.
 */
static int stream_take(struct stream *s, struct batch_job *j)
{
    uint32_t bs = s->p.batch_size, used = 0;
    int rc = 0;

    s->skipped += j->skipped;
    s->ss->n[SS_samples_skipped] += j->skipped;
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
 * slot); the job stays the client's until it releases the slot. */
static int stream_emit_shm(struct stream *s)
{
    struct batch_job *t = s->part[0].job;
    uint32_t n = s->part_n;
    struct reply_batch b;
    batch_init(s, &b, n, t->lab, t);
    b.shm = 1;
    b.slot = t->slot;
    b.offset = (uint64_t)t->slot * s->shm.slot_bytes;
    int rc = reply_batch(&s->reply, &b);
    /* The cut's reference becomes the client's. */
    s->held[t->slot] = t;
    s->nheld++;
    s->nparts = 0;
    s->part_n = 0;
    return stream_sent(s, rc, n, (uint64_t)n * job_sample_bytes(t));
}

/*
 * Shared memory: a batch must be one run of samples in one slot, so the
 * batch being cut collects in the slot of the job it starts in (segment 0,
 * always at offset 0). Without skipped samples every job is one batch and
 * nothing moves. After a skip the next job's head is copied behind it, and
 * that job's rest is moved to the front of its own slot, where it starts
 * the next batch: its head was copied out, so nobody refers to that room.
 * Returns 0, or -ENOMEM when the stream failed.
 */
static int stream_take_shm(struct stream *s, struct batch_job *j)
{
    uint32_t bs = s->p.batch_size, used = 0;
    size_t sb = stream_sample_bytes(s);
    int rc = 0;

    s->skipped += j->skipped;
    s->ss->n[SS_samples_skipped] += j->skipped;
    while (rc == 0 && used < j->n) {
        uint32_t m = j->n - used;
        if (m > bs - s->part_n)
            m = bs - s->part_n;
        if (s->nparts == 0) {
            if (used) {
                memmove(job_sample(j, 0), job_sample(j, used), m * sb);
                memmove(j->lab, j->lab + used * s->lab_row, m * s->lab_row);
            }
            s->part[0] = (struct segment){j, 0, m};
            s->nparts = 1;
            j->refs++;
        } else {
            struct batch_job *t = s->part[0].job;
            memcpy(job_sample(t, s->part_n), job_sample(j, used), m * sb);
            memcpy(t->lab + s->part_n * s->lab_row, j->lab + used * s->lab_row,
                   m * s->lab_row);
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

/*
 * Padded (batch: {pad: longest}): each job is one batch, laid out by its
 * worker at its own longest, so batches are never cut across jobs: a
 * planned batch with a bad sample skipped goes out short (a batch of none
 * goes out not at all). Returns 0, or -ENOMEM when the stream failed.
 */
static int stream_take_job(struct stream *s, struct batch_job *j)
{
    int rc = 0;
    s->skipped += j->skipped;
    s->ss->n[SS_samples_skipped] += j->skipped;
    if (j->n > 0) {
        s->part[0] = (struct segment){j, 0, j->n};
        s->nparts = 1;
        s->part_n = j->n;
        j->refs++;
        rc = stream_shm(s) ? stream_emit_shm(s) : stream_emit(s);
    }
    job_unref(j);
    return rc;
}

/* Every planned batch is in: the short last batch, then the end. */
static void stream_end(struct stream *s)
{
    if (s->part_n > 0 && s->p.drop_last) {
        log_debug("stream %u: dropped a short last batch of %u samples", s->p.id, s->part_n);
        stream_drop_parts(s);
    }
    if (s->part_n > 0 && (stream_shm(s) ? stream_emit_shm(s) : stream_emit(s)) < 0)
        return;
    stream_finish(s, 0, NULL);
}

/* Most jobs at once: `prefetch` batches in flight or lent to the reply,
 * plus the jobs the batch being cut holds, which wait for the next one;
 * with shared memory, the ring's slots (those the client holds included). */
static uint32_t stream_job_limit(const struct stream *s)
{
    return stream_shm(s) ? s->shm.slots : s->p.prefetch + s->nparts;
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
        if (j->failed) {
            stream_finish(s, -EBADMSG, j->err);
            job_unref(j);
            return;
        }
        if ((s->padded ? stream_take_job(s, j)
                       : stream_shm(s) ? stream_take_shm(s, j) : stream_take(s, j)) < 0)
            return;
    }
    while (!s->done && s->next_ahead < s->next_submit) /* those that waited */
        if (job_submit(s, s->inflight[s->next_ahead % s->cap]) < 0)
            break;
    while (!s->done && s->next_submit < s->plan.batches &&
           s->live_jobs < stream_job_limit(s)) {
        struct batch_job *j = job_get(s);
        if (!j) {
            if (s->live_jobs == 0)
                stream_finish(s, -ENOMEM, "no memory for a batch buffer");
            return;
        }
        j->index = s->next_submit;
        j->ready = 0;
        __atomic_store_n(&j->abandoned, 0, __ATOMIC_RELAXED);
        j->refs = 1; /* in flight */
        s->inflight[s->next_submit % s->cap] = j;
        s->next_submit++;
        s->live_jobs++;
        if (s->next_ahead + 1 == s->next_submit && job_submit(s, j) < 0)
            break; /* this one waits, and those after it */
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
             "for %u s: dropped", s->p.id, s->shm.slots, s->release_timeout);
    log_warn("%s", msg);
    s->ss->shm[SHM_release_timeouts]++;
    s->dropped = 1;
    stream_finish(s, -ETIMEDOUT, msg);
}

int stream_release(struct stream *s, uint32_t slot, int copied, char *err, size_t errlen)
{
    if (!stream_shm(s) || slot >= s->shm.slots || !s->held[slot]) {
        snprintf(err, errlen, "stream %u: RELEASE of slot %u, which the client does not hold",
                 s->p.id, slot);
        return -EINVAL;
    }
    struct batch_job *j = s->held[slot];
    s->held[slot] = NULL;
    s->nheld--;
    s->ss->shm[SHM_releases]++;
    if (copied) {
        s->ss->shm[SHM_copies]++;
        if (!s->copies_logged) {
            s->copies_logged = 1;
            log_info("stream %u: the client keeps every slot of its ring but one and copies "
                     "batches out of that one (counted in shm.copies)", s->p.id);
        }
    }
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
    uint64_t bytes = ring_bytes(&s->shm);
    s->p.charge -= bytes < s->p.charge ? bytes : s->p.charge; /* the owner's now */
    s->shm.fd = -1; /* stream_free leaves it alone now */
    s->shm.base = NULL;
    return 1;
}

/* The last word: done (with the counts) or failed. The owner may close s
 * from within: touch it no more after. */
static void stream_say_end(struct stream *s)
{
    s->said = 1;
    if (s->err < 0) {
        reply_failed(&s->reply, s->err, s->msg);
        return;
    }
    struct reply_msg m = {.kind = REPLY_END};
    m.end = (struct proto_end){0, s->batches_sent, s->samples_sent, s->skipped};
    s->ended = 1; /* the ring may be kept (stream_take_ring) once the end went out */
    reply_done(&s->reply, &m); /* the owner says if END could not be queued */
}

static void stream_on_pump(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    (void)fd;
    (void)what;
    if (!s->done)
        stream_pump(s);
    else if (!s->said)
        stream_say_end(s);
}

/* Says OPENED: with the ring's descriptor when shared memory was asked for
 * and can be had, else saying the stream uses the socket. Either way its
 * slots are the prefetch granted (the ring's slots; on the socket the
 * batches prepared ahead, which the budget may have lowered). */
static int stream_say_opened(struct stream *s, struct ring *spare)
{
    const struct dataset_output *o = dataset_output(s->ds);
    struct streams *ss = s->ss;
    struct reply_msg m = {.kind = REPLY_OPENED};
    struct proto_opened *op = &m.opened;
    int rc = 1;

    *op = (struct proto_opened){0, s->plan.count, s->plan.batches, o->h, o->w, o->c, o->dtype,
                                o->layout, PROTO_TRANSPORT_SOCKET, s->p.prefetch, 0, s->p.info,
                                dataset_size(s->ds), dataset_fingerprint(s->ds),
                                s->p.labels, o->labels};
    if (s->p.shm) {
        uint32_t slots = stream_ring_slots(s->p.prefetch);
        size_t bytes = (size_t)s->p.batch_size * o->bytes;
        int kept = spare && spare->fd >= 0 && spare->slots == slots &&
                   spare->slot_bytes == ring_slot_size(bytes);
        if (kept) { /* the client has it mapped: no descriptor to pass */
            s->shm = *spare;
            spare->fd = -1;
            spare->base = NULL;
            rc = 0;
        } else {
            if (spare) /* the client maps the new one instead */
                stream_ring_free(ss, spare, s->p.budget, s->p.uid);
            rc = stream_ring_create(ss, &s->shm, slots, bytes, s->p.id);
        }
        s->held = rc == 0 ? calloc(slots, sizeof(*s->held)) : NULL;
        if (rc == 0 && s->held) {
            op->transport = kept ? PROTO_TRANSPORT_SHM_KEPT : PROTO_TRANSPORT_SHM;
            op->slots = s->shm.slots;
            op->slot_bytes = s->shm.slot_bytes;
            rc = reply_progress(&s->reply, &m, kept ? -1 : s->shm.fd);
        } else if (rc == 0) {
            rc = -ENOMEM;
        }
        if (rc == 0) {
            s->shm_on = 1;
            s->data_off = 0;
            ss->shm[SHM_streams_total]++;
            if (kept)
                ss->shm[SHM_rings_kept]++;
            return 0;
        }
        log_info("stream %u: shared memory not possible (%s): using the socket", s->p.id,
                 rc == -EAGAIN ? "output already queued" : strerror(-rc));
        ss->shm[SHM_fallbacks]++;
        stream_ring_free(ss, &s->shm, s->p.budget, s->p.uid);
        free(s->held);
        s->held = NULL;
        op->transport = PROTO_TRANSPORT_SOCKET;
        op->slots = s->p.prefetch; /* the socket's: the prefetch granted */
        op->slot_bytes = 0;
    } else if (spare) {
        stream_ring_free(ss, spare, s->p.budget, s->p.uid);
    }
    return reply_progress(&s->reply, &m, -1);
}

void stream_labels_describe(const struct proto_labels *f, char *buf, size_t len)
{
    if (f->dtype == PROTO_DTYPE_F32)
        snprintf(buf, len, "float32 [n, %u] soft labels (mixup/cutmix)%s", f->classes,
                 f->lengths ? " and int64 [n] lengths" : "");
    else
        snprintf(buf, len, "int64 [n] labels%s", f->lengths ? " and int64 [n] lengths" : "");
}

int stream_open(struct stream **out, struct streams *ss, struct dataset *ds,
                const struct stream_params *p, const struct reply *reply, struct ring *spare,
                char *err, size_t errlen)
{
    const struct dataset_output *o = dataset_output(ds);
    if (o->h == 0 || o->bytes == 0) {
        snprintf(err, errlen, "dataset '%s': the pipeline's output size varies per image "
                 "(end it with center_crop)", dataset_name(ds));
        return -EINVAL;
    }
    if (!p->labels && (o->labels.dtype != PROTO_DTYPE_I64 || o->labels.lengths)) {
        char what[96];
        stream_labels_describe(&o->labels, what, sizeof(what));
        snprintf(err, errlen, "dataset '%s' delivers %s, which this client cannot take (it "
                 "knows only int64 [n] labels): use a newer libprestoclient", dataset_name(ds),
                 what);
        return -EINVAL;
    }
    struct stream *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "no memory for a stream");
        return -ENOMEM;
    }
    int rc = planner_make(&s->plan, dataset_size(ds), p->seed, p->epoch, p->shuffle, p->rank,
                          p->world, p->batch_size, p->drop_last);
    if (rc < 0) {
        free(s);
        if (rc == -EINVAL)
            snprintf(err, errlen, "invalid stream: batch_size %u, rank %u, world %u",
                     p->batch_size, p->rank, p->world);
        else
            snprintf(err, errlen, "no memory to plan the epoch");
        return rc;
    }
    s->ss = ss;
    s->ds = ds;
    s->p = *p;
    s->reply = *reply;
    s->shm.fd = -1;
    s->release_timeout = ss->release_timeout;
    s->data_off = (p->room + 63) & ~(size_t)63;
    s->cap = p->prefetch + 2;
    /* Resuming: the plan is the whole epoch's; batches before the start are
     * neither computed nor sent. */
    s->first_batch = p->start_batch < s->plan.batches ? p->start_batch : s->plan.batches;
    s->next_submit = s->next_send = s->next_ahead = s->first_batch;
    s->inflight = calloc(s->cap, sizeof(*s->inflight));
    s->lab_row = label_row(ds);
    s->padded = dataset_config(ds)->pad_max > 0;
    s->labels = malloc(p->batch_size * (s->lab_row + (s->padded ? sizeof(int64_t) : 0)));
    s->pump_ev = event_new(ss->base, -1, 0, stream_on_pump, s);
    s->release_ev = evtimer_new(ss->base, stream_on_release_timeout, s);
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
        return -ENOMEM;
    }
    ss->n[SS_streams]++;
    ss->n[SS_streams_total]++;
    dataset_hold(ds);
    *out = s;
    rc = stream_say_opened(s, spare);
    if (rc < 0) {
        stream_finish(s, -ENOMEM, "cannot queue a reply");
        return 0;
    }
    log_debug("stream %u: dataset '%s' epoch %llu rank %u/%u: %llu samples, %llu batches "
              "from batch %llu, %s", p->id, dataset_name(ds), (unsigned long long)p->epoch,
              p->rank, p->world, (unsigned long long)s->plan.count,
              (unsigned long long)s->plan.batches, (unsigned long long)s->first_batch,
              stream_shm(s) ? "shared memory" : "socket");
    stream_pump(s);
    return 0;
}

void stream_close(struct stream *s)
{
    s->closing = 1;
    s->reply.ops = NULL;
    event_free(s->pump_ev);
    s->pump_ev = NULL;
    event_free(s->release_ev);
    s->release_ev = NULL;
    /* Jobs still queued never start; running ones come back through
     * job_done; finished ones not yet sent are dropped now, and so is the
     * batch being cut; pieces lent to the reply come back through
     * job_piece_back. A guard keeps s alive until the loop is over. */
    s->live_jobs++;
    int running = 0;
    for (uint64_t b = s->next_send; b < s->next_submit; b++) {
        struct batch_job *j = s->inflight[b % s->cap];
        if (!j)
            continue;
        s->inflight[b % s->cap] = NULL;
        if (j->ready || b >= s->next_ahead) { /* done, or waiting for the budget */
            readahead_done(s->ss->readahead, &j->ahead); /* nothing: never read ahead */
            job_unref(j);
        } else if (workers_cancel(s->ss->workers, &j->work) < 0) {
            /* running (or read ahead): its remote reads are taken back */
            __atomic_store_n(&j->abandoned, 1, __ATOMIC_RELEASE);
            running = 1;
        }
    }
    if (running)
        source_wake(dataset_source(s->ds));
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

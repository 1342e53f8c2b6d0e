/* Listener, connections and request dispatch: see server.h. */
#include "server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "access.h"
#include "budget.h"
#include "frame.h"
#include "json.h"
#include "log.h"
#include "metrics.h"
#include "profile.h"
#include "proto.h"
#include "stream.h"
#include "trust.h"
#include "warm.h"

/* A job a connection runs (a stream, its warm-up, its profile): where the
 * job's reply goes (reply.h: its `to`). It stays put while the job lives. */
/* The server's fields of the stats document: at its top, in "access",
 * one entry per configured limit in "limits" (presto_limit_*{limit="NAME"};
 * release_timeout's hits are the streams'), and the process's "memory". */
#define SERVER_STATS(X)                                                               \
    X(version, INFO, "", "prestod's version")                                          \
    X(pid, GAUGE, "", "prestod's process id")                                          \
    X(uptime_s, GAUGE, "seconds", "time since prestod started", "uptime_seconds")      \
    X(connections, GAUGE, "connections", "client connections open", "connections_open") \
    X(connections_total, COUNTER, "connections", "connections accepted")               \
    X(connections_rejected, COUNTER, "connections", "connections refused at limits.connections") \
    X(protocol_errors, COUNTER, "requests", "malformed frames and bad requests received") \
    X(ends_lost, COUNTER, "connections",                                               \
      "connections closed because a stream's END or ERROR could not be queued")
#define SERVER_ACCESS_STATS(X)                                                        \
    X(denied, COUNTER, "requests", "admin requests from peers that are not admins")    \
    X(uid, GAUGE, "", "prestod's uid: peers with it are admins")                       \
    X(admin_group, GAUGE, "", "admin_group's gid (in JSON \"none\" when unset)")       \
    X(cache_drops, COUNTER, "requests", "DROP_CACHE requests done")
#define SERVER_LIMIT_STATS(X)                                                         \
    X(value, GAUGE, "", "the limit as configured (limits.NAME)")                       \
    X(hits, COUNTER, "refusals", "what the limit refused")
#define SERVER_MEMORY_STATS(X)                                                        \
    X(budget, GAUGE, "bytes", "cache.memory, the memory tier's budget")                \
    X(cache_bytes, GAUGE, "bytes", "the memory tier's entries and index")              \
    X(cache_index_bytes, GAUGE, "bytes", "of that, the index")                         \
    X(store_index_bytes, GAUGE, "bytes", "the disk tier's index")                      \
    X(stream_buffers, GAUGE, "bytes", "the streams' batch buffers and rings")          \
    X(worker_buffers, GAUGE, "bytes", "the worker threads' buffers")                   \
    X(readahead_buffers, GAUGE, "bytes", "batches read ahead on the event loop")       \
    X(accounted, GAUGE, "bytes", "all of the above but the budget")                    \
    X(rss, GAUGE, "bytes", "the process's resident set")

/* The configured limits: name and field of struct config. */
#define SERVER_LIMITS(X)                                                              \
    X(connections, max_connections)                                                    \
    X(connections_per_user, max_connections_per_user)                                  \
    X(idle_timeout, idle_timeout)                                                      \
    X(streams_per_connection, max_streams_per_conn)                                    \
    X(streams_per_user, max_streams_per_user)                                          \
    X(batch_size, max_batch_size)                                                      \
    X(prefetch, max_prefetch)                                                          \
    X(frame_size, max_frame_size)                                                      \
    X(output_buffer, max_output_buffer)                                                \
    X(output_timeout, output_timeout)                                                  \
    X(release_timeout, release_timeout)                                                \
    X(client_memory, client_memory)                                                    \
    X(user_memory, user_memory)

enum server_limit {
#define SERVER_LIMIT_ENUM(name, field) LIMIT_##name,
    SERVER_LIMITS(SERVER_LIMIT_ENUM)
#undef SERVER_LIMIT_ENUM
    LIMIT_MAX
};

/* The server's counters (event loop thread only). */
enum server_counter { SRV_connections_total, SRV_protocol_errors, SRV_access_denied,
                      SRV_cache_drops, SRV_ends_lost, SERVER_NCOUNTERS };

struct conn_job {
    struct conn *c;
    uint32_t req_id;
    uint32_t stream_id;
    struct stream *st; /* streams: NULL when the slot is free */
};

struct conn {
    struct server *srv;
    struct bufferevent *bev;
    struct conn *prev, *next;
    struct conn_job *streams;      /* stream_cap slots */
    uint32_t nstreams, stream_cap; /* cap: limits.streams_per_connection at accept */
    struct warm *warm;             /* a WARM running on this connection */
    struct conn_job warm_job, profile_job;
    int closing; /* close once the output is flushed */
    struct access_peer peer; /* who connected (SO_PEERCRED at accept) */
    int reload_pending;      /* a RELOAD (reload_req) waits for its reply */
    uint32_t reload_req;
    /* The replies queued on it, charged to the peer's uid (budget.h). */
    struct budget_queue *q;
    /* Requests wait (budget_queue_wait: why) while its queued replies are
     * over limits.output_buffer (until they drain to half), or its uid's
     * are over the budget: reading stops; a connection with replies of its
     * own queued that takes nothing for output_timeout is dropped. Waiting
     * connections are on the server's list, in the order they began. */
    enum budget_wait waiting;
    struct conn *wprev, *wnext;
    uint64_t in_charged; /* requests read and not yet handled, charged to the uid */
    uint64_t drained;        /* output bytes the peer took while waiting */
    uint64_t drained_mark;   /* ... as of the last stall check */
    struct event *stall_ev;
    struct event *hangup_ev; /* while waiting: the peer went (EV_CLOSED) */
    struct evbuffer_cb_entry *drain_cb;
    struct ring kept; /* a finished shm stream's ring, for the next OPEN */
    uint64_t kept_charge; /* its bytes, charged to the peer's uid (budget.h) */
    struct event *idle_ev; /* limits.idle_timeout (conn_on_idle) */
    uint64_t active_ns;    /* last request read or output flushed */
};

/* Connections per peer uid, for limits.connections_per_user: an entry per
 * user with connections, searched linearly (few users are connected). */
struct uid_conns {
    uid_t uid;
    uint32_t n;
};

struct server {
    struct server_deps d;
    struct evconnlistener *listener;
    char *path;     /* socket we bound and unlink at exit; NULL if adopted */
    struct conn *conns;
    uint64_t nconns;
    uint32_t next_stream_id;
    struct streams *streams;
    struct budget *budget; /* limits.client_memory, limits.user_memory */
    struct conn *waiting, *waiting_tail; /* connections whose requests wait */
    struct event *resume_ev; /* charges went down: look at the waiting ones */
    struct profiler *profiler;
    struct metrics *metrics; /* /metrics over HTTP (NULL: off) */
    struct timespec started;
    uid_t uid;                 /* ours: a peer with it is an admin */
    struct access_log denials; /* rate limit of the denial log lines */
    struct access_log refusals; /* ... of connections refused at accept */
    struct access_log idle_drops; /* ... of connections closed for idling */
    uint64_t peer_errors;      /* peers whose credentials could not be read */
    struct uid_conns *uids;    /* nuids entries, room for capuids */
    uint32_t nuids, capuids;
    uint64_t n[SERVER_NCOUNTERS];       /* event loop thread only */
    uint64_t limit_hits[LIMIT_MAX];     /* likewise */
};

/* ---- errors ---- */

/* The protocol's code of an error from below the server (-errno), in one
 * place: what jobs, the reload and the server's own checks fail with. */
static const struct {
    int err;
    uint32_t code;
} error_codes[] = {
    {EINVAL, PROTO_E_INVAL},       /* a bad request, a config that does not load */
    {ENOMEM, PROTO_E_NOMEM},
    {EBUSY, PROTO_E_LIMIT},        /* one at a time: a warm-up, a profile, a reload */
    {ETIMEDOUT, PROTO_E_LIMIT},    /* a client that released nothing in time */
    {EBADMSG, PROTO_E_SAMPLE},     /* a bad sample (on_error: fail) */
    {ECANCELED, PROTO_E_SHUTDOWN}, /* the daemon is stopping */
    {EIO, PROTO_E_IO},
};

static uint32_t error_code(int err)
{
    for (size_t i = 0; i < sizeof(error_codes) / sizeof(error_codes[0]); i++)
        if (error_codes[i].err == -err)
            return error_codes[i].code;
    return PROTO_E_INTERNAL;
}

/* Answers a request with an ERROR for -errno err: 0, or -ENOMEM when it
 * could not be queued. */
static int conn_error(struct conn *c, uint32_t req_id, int err, const char *msg)
{
    if (c->srv->d.faults & SERVER_FAULT_ERROR)
        return -ENOMEM;
    return frame_send_error(c->bev, c->q, req_id, error_code(err), msg);
}

/* uid's entry; made (n 0) when add and missing. NULL: none, or no memory. */
static struct uid_conns *uid_conns(struct server *s, uid_t uid, int add)
{
    for (uint32_t i = 0; i < s->nuids; i++)
        if (s->uids[i].uid == uid)
            return &s->uids[i];
    if (!add)
        return NULL;
    if (s->nuids == s->capuids) {
        uint32_t cap = s->capuids ? 2 * s->capuids : 8;
        struct uid_conns *u = realloc(s->uids, cap * sizeof(*u));
        if (!u)
            return NULL;
        s->uids = u;
        s->capuids = cap;
    }
    s->uids[s->nuids] = (struct uid_conns){uid, 0};
    return &s->uids[s->nuids++];
}

static void uid_conns_drop(struct server *s, uid_t uid)
{
    struct uid_conns *u = uid_conns(s, uid, 0);
    if (u && --u->n == 0)
        *u = s->uids[--s->nuids];
}

/* ---- connections ---- */

static void conn_close_streams(struct conn *c)
{
    for (uint32_t i = 0; i < c->stream_cap; i++) {
        if (c->streams[i].st) {
            stream_close(c->streams[i].st);
            c->streams[i].st = NULL;
        }
    }
    c->nstreams = 0;
}

/* Frees the ring kept for the next OPEN, and gives back its charge. */
static void conn_kept_free(struct conn *c)
{
    stream_ring_free(c->srv->streams, &c->kept, c->srv->budget, c->peer.uid);
    budget_uncharge(c->srv->budget, c->peer.uid, c->kept_charge);
    c->kept_charge = 0;
}

/* ---- connections waiting on queued replies ---- */

static void conn_waiting_unlink(struct conn *c)
{
    struct server *s = c->srv;
    if (c->wprev)
        c->wprev->wnext = c->wnext;
    else
        s->waiting = c->wnext;
    if (c->wnext)
        c->wnext->wprev = c->wprev;
    else
        s->waiting_tail = c->wprev;
    c->wprev = c->wnext = NULL;
}

static void conn_waiting_append(struct conn *c)
{
    struct server *s = c->srv;
    c->wnext = NULL;
    c->wprev = s->waiting_tail;
    if (s->waiting_tail)
        s->waiting_tail->wnext = c;
    else
        s->waiting = c;
    s->waiting_tail = c;
}

static void conn_free(struct conn *c)
{
    struct server *s = c->srv;
    conn_close_streams(c);
    conn_kept_free(c);
    if (c->warm)
        warm_close(c->warm);
    profiler_detach(s->profiler, &c->profile_job);
    if (c->reload_pending && s->d.reload)
        reload_cancel(s->d.reload, c);
    if (c->stall_ev)
        event_free(c->stall_ev);
    if (c->hangup_ev)
        event_free(c->hangup_ev);
    if (c->idle_ev)
        event_free(c->idle_ev);
    uid_conns_drop(s, c->peer.uid);
    if (c->drain_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->drain_cb);
    if (c->waiting)
        conn_waiting_unlink(c);
    budget_uncharge(s->budget, c->peer.uid, c->in_charged);
    /* The queue goes with the last of the replies, which libevent may
     * free after the bufferevent (they are given back then). */
    budget_queue_close(c->q);
    bufferevent_free(c->bev);
    access_peer_free(&c->peer);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    free(c->streams);
    free(c);
}

static void conn_on_read(struct bufferevent *bev, void *arg);

static void conn_on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    size_t out = evbuffer_get_length(bufferevent_get_output(bev));
    c->active_ns = stats_now_ns(); /* the peer took its output (the end of a job's, too) */
    if (c->closing && out == 0)
        conn_free(c);
}

/* Stops reading and ends the connection's jobs: it closes once its output
 * is flushed. */
static void conn_closing(struct conn *c)
{
    c->closing = 1;
    bufferevent_disable(c->bev, EV_READ);
    conn_close_streams(c);
    if (c->warm)
        warm_close(c->warm);
    c->warm = NULL;
    profiler_detach(c->srv->profiler, &c->profile_job);
}

/* Replies with an error and closes the connection once it is sent. */
static void conn_fail(struct conn *c, uint32_t req_id, int code, const char *msg)
{
    c->srv->n[SRV_protocol_errors]++;
    log_info("connection closed: %s", msg);
    frame_send_error(c->bev, c->q, req_id, code, msg);
    conn_closing(c);
}

/* ---- the replies of jobs (reply.h) ---- */

/* Queues m as the frame of type for the job cj (fd >= 0: passed along). */
static int conn_send_msg(const struct conn_job *cj, uint16_t type, const struct reply_msg *m,
                         int fd)
{
    struct proto_wbuf w;
    struct proto_opened op;
    struct proto_end end;
    int rc;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, type, cj->req_id);
    switch (m->kind) {
    case REPLY_OPENED:
        op = m->opened;
        op.stream_id = cj->stream_id;
        proto_put_opened(&w, &op);
        break;
    case REPLY_END:
        end = m->end;
        end.stream_id = cj->stream_id;
        proto_put_end(&w, &end);
        break;
    case REPLY_WARM:
        proto_put_progress(&w, &m->warm);
        break;
    case REPLY_PROFILE_PROGRESS:
        proto_put_profile_progress(&w, &m->profile_progress);
        break;
    case REPLY_PROFILE_RESULT:
        proto_put_profile_result(&w, m->profile.result);
        for (uint32_t i = 0; i < m->profile.result->count; i++)
            proto_put_profile_strategy(&w, &m->profile.strategies[i]);
        for (uint32_t i = 0; m->profile.verified && i < m->profile.result->count; i++)
            proto_put_profile_verified(&w, &m->profile.verified[i]);
        if (m->profile.result->with_disk) /* asked: last (older clients never ask) */
            proto_put_profile_disk(&w, &m->profile.result->disk);
        break;
    }
    if (type == PROTO_END && (cj->c->srv->d.faults & SERVER_FAULT_END))
        rc = -ENOMEM;
    else
        rc = fd < 0 ? frame_send(cj->c->bev, cj->c->q, &w)
                    : frame_send_fd(cj->c->bev, cj->c->q, &w, fd);
    proto_wbuf_free(&w);
    if (rc < 0 && rc != -EAGAIN)
        log_error("cannot queue %s: %s", proto_type_name(type), strerror(-rc));
    return rc;
}

static int conn_progress(const struct reply *r, const struct reply_msg *m, int fd)
{
    const struct conn_job *cj = r->to;
    /* A progress report to a peer that leaves its replies unread past its
     * limit is left out (the next says more): a long WARM or PROFILE would
     * grow the queue for as long as it runs. */
    if (m->kind != REPLY_OPENED &&
        budget_queue_bytes(cj->c->q) > cj->c->srv->d.cfg->max_output_buffer)
        return 0;
    uint16_t type = m->kind == REPLY_OPENED ? PROTO_OPENED
                    : m->kind == REPLY_WARM ? PROTO_PROGRESS
                                            : PROTO_PROFILE_PROGRESS;
    return conn_send_msg(r->to, type, m, fd);
}

static int conn_done(const struct reply *r, const struct reply_msg *m)
{
    uint16_t type = m->kind == REPLY_END ? PROTO_END
                    : m->kind == REPLY_WARM ? PROTO_DONE
                                            : PROTO_PROFILE_RESULT;
    return conn_send_msg(r->to, type, m, -1);
}

static void conn_failed(const struct reply *r, int err, const char *msg)
{
    const struct conn_job *cj = r->to;
    conn_error(cj->c, cj->req_id, err, msg);
}

/* A stream's last word could not be queued (no memory): the client would
 * wait for it forever, so the connection goes at once, its queued output
 * with it; the client reads the end of the socket. */
static void conn_lost_end(struct conn *c, uint32_t stream_id, const char *what)
{
    log_error("stream %u: its %s could not be queued (out of memory): closing the connection "
              "of pid %d uid %u", stream_id, what, (int)c->peer.pid, (unsigned)c->peer.uid);
    c->srv->n[SRV_ends_lost]++;
    conn_closing(c);
    conn_free(c);
}

static void conn_piece_free(const void *data, size_t len, void *arg)
{
    struct reply_ref *ref = arg;
    (void)data;
    (void)len;
    ref->release(ref);
}

/* A BATCH frame whose samples go by reference from the jobs' buffers: its
 * prefix (header and labels) in the room before the first piece when there
 * is room, else copied in front. All or nothing: a frame of more than one
 * chunk is put together in a buffer of its own first. Returns the bytes
 * queued. */
static int conn_batch_socket(const struct conn_job *cj, const struct reply_batch *b)
{
    struct evbuffer *out = bufferevent_get_output(cj->c->bev);
    struct proto_batch_hdr hdr = {cj->stream_id, b->index, b->n, b->h, b->w, b->c, b->dtype};
    size_t pre_len = proto_batch_prefix_size_raw(b->labels_len), data_len = 0;
    int in_place = b->room >= pre_len;
    unsigned added = 0; /* pieces [0, added) are the evbuffers' now */
    int rc = 0;
    for (unsigned i = 0; i < b->npieces; i++)
        data_len += b->piece[i].len;
    struct evbuffer *dst = in_place && b->npieces == 1 ? out : evbuffer_new();
    if (!dst) {
        rc = -ENOMEM;
    } else if (in_place) {
        uint8_t *p0 = b->piece[0].p - pre_len;
        proto_batch_prefix_encode_raw(p0, cj->req_id, &hdr, b->labels, b->labels_len, data_len);
        if (evbuffer_add_reference(dst, p0, pre_len + b->piece[0].len, conn_piece_free,
                                   b->piece[0].ref) < 0)
            rc = -ENOMEM;
        else
            added = 1;
    } else {
        struct evbuffer_iovec v;
        if (evbuffer_reserve_space(dst, (ev_ssize_t)pre_len, &v, 1) < 1) {
            rc = -ENOMEM;
        } else {
            proto_batch_prefix_encode_raw(v.iov_base, cj->req_id, &hdr, b->labels, b->labels_len,
                                          data_len);
            v.iov_len = pre_len;
            if (evbuffer_commit_space(dst, &v, 1) < 0)
                rc = -ENOMEM;
        }
    }
    for (unsigned i = added; rc == 0 && i < b->npieces; i++) {
        if (evbuffer_add_reference(dst, b->piece[i].p, b->piece[i].len, conn_piece_free,
                                   b->piece[i].ref) < 0)
            rc = -ENOMEM;
        else
            added = i + 1;
    }
    for (unsigned i = added; i < b->npieces; i++) /* never taken */
        b->piece[i].ref->release(b->piece[i].ref);
    if (dst && dst != out) {
        if (rc == 0 && evbuffer_add_buffer(out, dst) < 0)
            rc = -ENOMEM;
        evbuffer_free(dst); /* on failure, lets go of what it holds */
    }
    return rc < 0 ? rc : (int)(pre_len + data_len);
}

static int conn_batch(const struct reply *r, const struct reply_batch *b)
{
    const struct conn_job *cj = r->to;
    if (!b->shm)
        return conn_batch_socket(cj, b);
    struct proto_batch_shm m = {cj->stream_id, b->index, b->n, b->h, b->w, b->c, b->dtype,
                                b->slot, b->offset};
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_BATCH_SHM, cj->req_id);
    proto_put_batch_shm(&w, &m);
    proto_put_bytes(&w, b->labels, b->labels_len);
    int rc = frame_send(cj->c->bev, NULL, &w); /* the stream's charge holds its frames */
    size_t len = w.len;
    proto_wbuf_free(&w);
    return rc < 0 ? rc : (int)len;
}

/* A stream said its last word: it leaves the connection (its ring kept for
 * the next OPEN when it ended well); a client dropped for holding its slots
 * loses the connection once the stream's ERROR is sent. */
static void conn_stream_ended(struct conn_job *cj, int ended_well)
{
    struct conn *c = cj->c;
    struct stream *st = cj->st;
    int dropped = stream_dropped(st);
    cj->st = NULL;
    c->nstreams--;
    if (ended_well && stream_take_ring(st, &c->kept)) /* unless one is kept already */
        c->kept_charge = ring_bytes(&c->kept);
    stream_close(st);
    if (dropped) {
        conn_closing(c);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_free(c);
    }
}

/* The stream's END, or when it cannot be queued an ERROR saying so, or
 * when neither can, the connection closes: never silence. */
static int stream_done(const struct reply *r, const struct reply_msg *m)
{
    struct conn_job *cj = r->to;
    struct conn *c = cj->c;
    uint32_t req_id = cj->req_id, id = cj->stream_id;
    int rc = conn_done(r, m);
    int dropped = stream_dropped(cj->st);
    conn_stream_ended(cj, rc == 0);
    if (rc < 0 && !dropped) {
        char msg[96];
        snprintf(msg, sizeof(msg), "stream %u: its END could not be queued: out of memory", id);
        if (conn_error(c, req_id, -ENOMEM, msg) < 0)
            conn_lost_end(c, id, "END and ERROR");
    }
    return rc;
}

static void stream_failed(const struct reply *r, int err, const char *msg)
{
    struct conn_job *cj = r->to;
    struct conn *c = cj->c;
    uint32_t id = cj->stream_id;
    int rc = conn_error(c, cj->req_id, err, msg);
    int dropped = stream_dropped(cj->st);
    conn_stream_ended(cj, 0); /* frees c when dropped */
    if (rc < 0 && !dropped)
        conn_lost_end(c, id, "ERROR");
}

static void warm_finished(struct conn_job *cj)
{
    struct conn *c = cj->c;
    struct warm *w = c->warm;
    c->warm = NULL;
    warm_close(w);
}

static int warm_done(const struct reply *r, const struct reply_msg *m)
{
    int rc = conn_done(r, m);
    warm_finished(r->to);
    return rc;
}

static void warm_failed(const struct reply *r, int err, const char *msg)
{
    conn_failed(r, err, msg);
    warm_finished(r->to);
}

static const struct reply_ops stream_reply = {conn_progress, conn_batch, stream_done,
                                              stream_failed};
static const struct reply_ops warm_reply = {conn_progress, conn_batch, warm_done, warm_failed};
static const struct reply_ops profile_reply = {conn_progress, conn_batch, conn_done,
                                               conn_failed};

/* Replies with one string (a document), which it frees. */
static void reply_json(struct conn *c, uint16_t type, uint32_t req_id, char *json)
{
    struct proto_wbuf w;
    if (!json) {
        frame_send_error(c->bev, c->q, req_id, PROTO_E_NOMEM, "out of memory");
        return;
    }
    proto_wbuf_init(&w);
    proto_frame_begin(&w, type, req_id);
    proto_put_str(&w, json, strlen(json));
    if (frame_send(c->bev, c->q, &w) < 0)
        log_error("cannot queue a reply: out of memory");
    proto_wbuf_free(&w);
    free(json);
}

static char *server_datasets_json(struct server *s);

/* The dataset a request names, or NULL after answering PROTO_E_NODATASET. */
static struct dataset *conn_dataset(struct conn *c, uint32_t req_id, const char *name)
{
    const struct server *s = c->srv;
    char err[320]; /* names are under 256 bytes */
    for (uint32_t i = 0; i < s->d.ndatasets; i++)
        if (strcmp(dataset_name(s->d.datasets[i]), name) == 0)
            return s->d.datasets[i];
    snprintf(err, sizeof(err), "no dataset named '%s'", name);
    frame_send_error(c->bev, c->q, req_id, PROTO_E_NODATASET, err);
    return NULL;
}

/* Streams open on the connections of peers with this uid. */
static uint32_t user_streams(const struct server *s, uid_t uid)
{
    uint32_t n = 0;
    for (const struct conn *c = s->conns; c; c = c->next)
        if (c->peer.uid == uid)
            n += c->nstreams;
    return n;
}

/* A request refused at a configured limit: counted, answered, logged at
 * debug (the stats say how often). */
static void refuse_limit(struct conn *c, uint32_t req_id, enum server_limit limit,
                         const char *msg)
{
    c->srv->limit_hits[limit]++;
    log_debug("pid %d uid %u: %s", (int)c->peer.pid, (unsigned)c->peer.uid, msg);
    frame_send_error(c->bev, c->q, req_id, PROTO_E_LIMIT, msg);
}

/* Admin operations (RELOAD, DROP_CACHE, WARM, the profiler's) call this
 * first: 1 when the peer is an admin (access.h); else 0, after a
 * PROTO_E_DENIED reply, a count and a (rate-limited) log line. */
static int conn_require_admin(struct conn *c, uint32_t req_id, const char *op)
{
    struct server *s = c->srv;
    char msg[160];
    if (access_is_admin(&c->peer, s->uid, s->d.cfg->admin_group))
        return 1;
    s->n[SRV_access_denied]++;
    access_log_denied(&s->denials, &c->peer, op, s->uid, s->d.cfg->admin_group);
    snprintf(msg, sizeof(msg), "%s is an admin operation: root, uid %u or admin_group only",
             op, (unsigned)s->uid);
    frame_send_error(c->bev, c->q, req_id, PROTO_E_DENIED, msg);
    return 0;
}

/*
 * The client memory budget (budget.h) for a stream about to open: the ring
 * kept for it is given back first (the stream takes it over, charged anew,
 * or frees it). The stream gets the largest prefetch up to the one asked
 * whose charge fits under budget_cap (the grant policy: what is free but a
 * reserve for the uid's later streams, never less than 2 batches' worth);
 * OPENED says what was granted. Only a stream whose 2 batches do not fit
 * is refused, at limits.client_memory or user_memory. 0 with p charged
 * (p->budget set), or -ENOSPC after the refusal.
 */
static int conn_fit_budget(struct conn *c, uint32_t req_id, const struct dataset *ds,
                           struct stream_params *p)
{
    struct server *s = c->srv;
    const struct config *cfg = s->d.cfg;
    uid_t uid = c->peer.uid;
    int by_user;
    char err[320];

    uint64_t kept = c->kept_charge;
    budget_uncharge(s->budget, uid, kept);
    c->kept_charge = 0;
    uint32_t asked = p->prefetch, open = user_streams(s, uid);
    p->prefetch = asked < 2 ? asked : 2;
    uint64_t floor = stream_memory(ds, p), need = floor;
    uint32_t later = cfg->max_streams_per_user > open + 1 ? cfg->max_streams_per_user - open - 1
                                                          : 0;
    uint64_t cap = budget_cap(s->budget, uid, floor, later, &by_user);
    if (cap == 0 && budget_ahead_blocks(s->budget, uid, floor) &&
        budget_charge(s->budget, uid, kept) == 0) { /* waits: as it was */
        c->kept_charge = kept;
        p->prefetch = asked;
        return -EAGAIN;
    }
    if (cap > 0) { /* the largest prefetch in [floor's, asked] under cap */
        uint32_t lo = p->prefetch, hi = asked;
        while (lo < hi) {
            p->prefetch = lo + (hi - lo + 1) / 2;
            if (stream_memory(ds, p) <= cap)
                lo = p->prefetch;
            else
                hi = p->prefetch - 1;
        }
        p->prefetch = lo;
        need = stream_memory(ds, p);
    }
    if (cap == 0 || budget_charge(s->budget, uid, need) < 0) {
        stream_ring_free(s->streams, &c->kept, s->budget, uid);
        snprintf(err, sizeof(err), "%s (%llu MiB%s) reached: %llu MiB held for uid %u, "
                 "this stream needs %llu MiB even with prefetch %u",
                 by_user ? "limits.user_memory" : "limits.client_memory",
                 (unsigned long long)((by_user ? cfg->user_memory : cfg->client_memory) >> 20),
                 by_user ? " per uid" : " for all clients",
                 (unsigned long long)(budget_used(s->budget, uid) >> 20), (unsigned)uid,
                 (unsigned long long)((floor + (1u << 20) - 1) >> 20), asked < 2 ? asked : 2);
        refuse_limit(c, req_id, by_user ? LIMIT_user_memory : LIMIT_client_memory, err);
        return -ENOSPC;
    }
    if (p->prefetch < asked) {
        budget_lowered(s->budget);
        log_debug("pid %d uid %u: prefetch %u granted instead of %u (client memory budget)",
                  (int)c->peer.pid, (unsigned)uid, p->prefetch, asked);
    }
    p->budget = s->budget;
    p->uid = uid;
    p->charge = need;
    return 0;
}

/* 1 when the OPEN waits for read-ahead to give room back (the request
 * stays in the connection's input: conn_on_read), else 0 (answered). */
static int handle_open(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    const struct config *cfg = s->d.cfg;
    struct proto_open req;
    struct dataset *ds = NULL;
    char err[512];

    if (proto_get_open(r, &req) < 0) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed OPEN");
        return 0;
    }
    if (!(ds = conn_dataset(c, req_id, req.dataset)))
        return 0;
    if (req.batch_size == 0) {
        conn_error(c, req_id, -EINVAL, "batch_size 0");
        return 0;
    }
    if (req.batch_size > cfg->max_batch_size) {
        snprintf(err, sizeof(err), "batch_size %u is over limits.batch_size (%u)",
                 req.batch_size, cfg->max_batch_size);
        refuse_limit(c, req_id, LIMIT_batch_size, err);
        return 0;
    }
    if (req.world == 0 || req.rank >= req.world) {
        snprintf(err, sizeof(err), "rank %u is not below world %u", req.rank, req.world);
        conn_error(c, req_id, -EINVAL, err);
        return 0;
    }
    if (req.prefetch > cfg->max_prefetch) {
        snprintf(err, sizeof(err), "prefetch %u is over limits.prefetch (%u)", req.prefetch,
                 cfg->max_prefetch);
        refuse_limit(c, req_id, LIMIT_prefetch, err);
        return 0;
    }
    if (c->nstreams >= cfg->max_streams_per_conn || c->nstreams >= c->stream_cap) {
        snprintf(err, sizeof(err), "limits.streams_per_connection (%u) reached",
                 cfg->max_streams_per_conn);
        refuse_limit(c, req_id, LIMIT_streams_per_connection, err);
        return 0;
    }
    if (user_streams(s, c->peer.uid) >= cfg->max_streams_per_user) {
        snprintf(err, sizeof(err), "limits.streams_per_user (%u) reached for uid %u",
                 cfg->max_streams_per_user, (unsigned)c->peer.uid);
        refuse_limit(c, req_id, LIMIT_streams_per_user, err);
        return 0;
    }
    struct stream_params p = {
        .seed = req.seed, .epoch = req.epoch, .rank = req.rank, .world = req.world,
        .batch_size = req.batch_size, .prefetch = req.prefetch ? req.prefetch : cfg->prefetch,
        .shuffle = !!(req.flags & PROTO_OPEN_SHUFFLE),
        .drop_last = !!(req.flags & PROTO_OPEN_DROP_LAST), .shm = !!(req.flags & PROTO_OPEN_SHM),
        .room = proto_batch_prefix_size_raw(
            proto_labels_size(&dataset_output(ds)->labels, req.batch_size)),
        .start_batch = req.flags & PROTO_OPEN_START ? req.start_batch : 0,
        .info = !!(req.flags & PROTO_OPEN_INFO),
        .labels = !!(req.flags & PROTO_OPEN_LABELS),
    };
    int fit = conn_fit_budget(c, req_id, ds, &p);
    if (fit < 0)
        return fit == -EAGAIN;
    struct conn_job *cj = c->streams;
    while (cj->st) /* a free slot: nstreams < stream_cap */
        cj++;
    p.id = ++s->next_stream_id;
    *cj = (struct conn_job){c, req_id, p.id, NULL};
    struct reply reply = {&stream_reply, cj};
    struct stream *st;
    int rc = stream_open(&st, s->streams, ds, &p, &reply, &c->kept, err, sizeof(err));
    if (rc < 0) {
        budget_uncharge(s->budget, c->peer.uid, p.charge);
        conn_kept_free(c); /* uncharged by conn_fit_budget: not kept uncharged */
        conn_error(c, req_id, rc, err);
        return 0;
    }
    cj->st = st;
    c->nstreams++;
    profiler_first_use(s->profiler, ds); /* split: auto without a choice yet */
    return 0;
}

static void handle_close(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    uint32_t id;
    if (proto_get_u32(r, &id) < 0 || proto_remaining(r)) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed CLOSE");
        return;
    }
    for (uint32_t i = 0; i < c->stream_cap; i++) {
        if (c->streams[i].st && c->streams[i].stream_id == id) {
            stream_close(c->streams[i].st);
            c->streams[i].st = NULL;
            c->nstreams--;
            break;
        }
    }
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_CLOSED, req_id);
    proto_put_u32(&w, id);
    frame_send(c->bev, c->q, &w);
    proto_wbuf_free(&w);
}

/* No reply. A RELEASE for a stream that has ended is normal (the client
 * lets go of its last batch after END crossed it) and ignored. */
static void handle_release(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct proto_release m;
    char err[160];
    if (proto_get_release(r, &m) < 0) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed RELEASE");
        return;
    }
    for (uint32_t i = 0; i < c->stream_cap; i++) {
        if (c->streams[i].st && c->streams[i].stream_id == m.stream_id) {
            int rc = stream_release(c->streams[i].st, m.slot,
                                    !!(m.flags & PROTO_RELEASE_COPIED), err, sizeof(err));
            if (rc < 0) {
                c->srv->n[SRV_protocol_errors]++;
                conn_error(c, req_id, rc, err);
            }
            return;
        }
    }
}

static void handle_warm(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    struct proto_warm req;
    struct dataset *ds;
    char err[512];

    if (proto_get_warm(r, &req) < 0) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed WARM");
        return;
    }
    if (!(ds = conn_dataset(c, req_id, req.dataset)))
        return;
    if (c->warm) {
        conn_error(c, req_id, -EBUSY, "this connection runs a WARM already");
        return;
    }
    if (dataset_auto(ds)->state == DATASET_AUTO_PENDING) { /* nothing would be cached */
        profiler_first_use(s->profiler, ds);
        snprintf(err, sizeof(err), "dataset '%s' has split: auto and no strategy chosen yet; "
                 "it is being profiled (prestoctl datasets shows the choice): warm it then",
                 dataset_name(ds));
        conn_error(c, req_id, -EBUSY, err);
        return;
    }
    c->warm_job = (struct conn_job){c, req_id, 0, NULL};
    struct reply reply = {&warm_reply, &c->warm_job};
    int rc = warm_start(&c->warm, s->d.base, s->d.workers, s->d.pipeline, ds, &reply, err,
                        sizeof(err));
    if (rc < 0) {
        c->warm = NULL;
        conn_error(c, req_id, rc, err);
    }
}

static void handle_profile(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    struct proto_profile req;
    struct dataset *ds;
    char err[512];

    if (proto_get_profile(r, &req) < 0) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed PROFILE");
        return;
    }
    if (!conn_require_admin(c, req_id, "PROFILE"))
        return;
    if (!(ds = conn_dataset(c, req_id, req.dataset)))
        return;
    c->profile_job = (struct conn_job){c, req_id, 0, NULL};
    struct reply reply = {&profile_reply, &c->profile_job};
    int rc = profiler_request(s->profiler, ds, &req, &reply, err, sizeof(err));
    if (rc < 0)
        conn_error(c, req_id, rc, err);
}

/* A RELOAD this connection asked for ended (reload_done_fn). */
static void conn_reload_done(void *arg, int rc, const char *text)
{
    struct conn *c = arg;
    uint32_t req_id = c->reload_req;
    c->reload_pending = 0;
    if (rc < 0) {
        conn_error(c, req_id, rc, text);
        return;
    }
    char *json = strdup(text);
    reply_json(c, PROTO_RELOAD_REPLY, req_id, json);
}

static void handle_reload(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    if (proto_remaining(r)) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed RELOAD: the body must be empty");
        return;
    }
    if (!s->d.reload) {
        frame_send_error(c->bev, c->q, req_id, PROTO_E_INTERNAL, "this daemon cannot reload");
        return;
    }
    if (c->reload_pending) {
        conn_error(c, req_id, -EBUSY, "a RELOAD of this connection is running already");
        return;
    }
    log_info("RELOAD from pid %d uid %u", (int)c->peer.pid, (unsigned)c->peer.uid);
    c->reload_pending = 1;
    c->reload_req = req_id;
    if (reload_request(s->d.reload, conn_reload_done, c) < 0) {
        c->reload_pending = 0;
        conn_error(c, req_id, -ENOMEM, "no memory to reload");
    }
}

static void handle_drop_cache(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    uint64_t entries, bytes;
    struct json j;
    if (proto_remaining(r)) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed DROP_CACHE: the body must be empty");
        return;
    }
    /* No worker may hold an entry while the slabs go. */
    workers_pause(s->d.workers);
    tiers_drop_memory(s->d.tiers, &entries, &bytes);
    workers_resume(s->d.workers);
    s->n[SRV_cache_drops]++;
    log_info("DROP_CACHE from pid %d uid %u: %llu entries, %llu MiB of the memory tier dropped",
             (int)c->peer.pid, (unsigned)c->peer.uid, (unsigned long long)entries,
             (unsigned long long)(bytes >> 20));
    json_init(&j);
    json_object_begin(&j, NULL);
    json_u64(&j, "entries", entries);
    json_u64(&j, "bytes", bytes);
    json_object_end(&j);
    if (j.failed)
        json_free(&j);
    reply_json(c, PROTO_DROP_CACHE_REPLY, req_id, j.failed ? NULL : j.buf);
}

/* 1 when the request waits (it stays in the input: an OPEN waiting for
 * read-ahead to give room back), else 0. */
static int conn_dispatch(struct conn *c, const struct proto_header *h, const uint8_t *body)
{
    struct proto_rbuf r;
    char msg[128];
    proto_rbuf_init(&r, body, h->body_len);
    switch (h->type) {
    case PROTO_STATS:
        reply_json(c, PROTO_STATS_REPLY, h->req_id, server_stats_doc(c->srv, STATS_JSON));
        break;
    case PROTO_METRICS:
        reply_json(c, PROTO_METRICS_REPLY, h->req_id,
                   server_stats_doc(c->srv, STATS_PROMETHEUS));
        break;
    case PROTO_DATASETS:
        reply_json(c, PROTO_DATASETS_REPLY, h->req_id, server_datasets_json(c->srv));
        break;
    case PROTO_OPEN:
        return handle_open(c, h->req_id, &r);
    case PROTO_CLOSE:
        handle_close(c, h->req_id, &r);
        break;
    case PROTO_RELEASE:
        handle_release(c, h->req_id, &r);
        break;
    case PROTO_WARM:
        if (conn_require_admin(c, h->req_id, "WARM"))
            handle_warm(c, h->req_id, &r);
        break;
    case PROTO_RELOAD:
        if (conn_require_admin(c, h->req_id, "RELOAD"))
            handle_reload(c, h->req_id, &r);
        break;
    case PROTO_DROP_CACHE:
        if (conn_require_admin(c, h->req_id, "DROP_CACHE"))
            handle_drop_cache(c, h->req_id, &r);
        break;
    case PROTO_PROFILE:
        handle_profile(c, h->req_id, &r);
        break;
    default:
        c->srv->n[SRV_protocol_errors]++;
        snprintf(msg, sizeof(msg), "unexpected message type %u (%s)", h->type,
                 proto_type_name(h->type));
        frame_send_error(c->bev, c->q, h->req_id, PROTO_E_PROTO, msg);
    }
    return 0;
}

/* ---- the output limit ---- */

static void conn_on_drain(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct conn *c = arg;
    (void)buf;
    c->drained += info->n_deleted;
}

static void conn_stall_arm(struct conn *c)
{
    struct timeval tv = {(time_t)c->srv->d.cfg->output_timeout, 0};
    c->drained_mark = c->drained;
    event_add(c->stall_ev, &tv);
}

/* Every output_timeout while requests wait: a connection with replies of
 * its own queued whose peer took nothing since the last look stopped
 * reading: closed (one waiting only on its uid's other connections is
 * not: those are dropped, or read, and it goes on). No ERROR: it would
 * queue behind the output the peer does not read (and the socket takes
 * nothing now, so it cannot go ahead of it); the log line and the close
 * say it. */
static void conn_on_stall(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct server *s = c->srv;
    (void)fd;
    (void)what;
    if (!c->waiting)
        return;
    if (c->drained != c->drained_mark || budget_queue_bytes(c->q) == 0) {
        conn_stall_arm(c);
        return;
    }
    s->limit_hits[LIMIT_output_timeout]++;
    log_warn("connection of pid %d uid %u dropped: its requests waited on %llu bytes of its "
             "replies queued (limits.output_buffer %llu, its uid's %llu of limits.user_memory "
             "%llu) and none taken for limits.output_timeout (%u s)",
             (int)c->peer.pid, (unsigned)c->peer.uid,
             (unsigned long long)budget_queue_bytes(c->q),
             (unsigned long long)s->d.cfg->max_output_buffer,
             (unsigned long long)budget_used(s->budget, c->peer.uid),
             (unsigned long long)s->d.cfg->user_memory, s->d.cfg->output_timeout);
    conn_free(c);
}

/* The peer of a waiting connection went: its output is dropped and its
 * requests left unread (they would be answered to nobody). */
static void conn_on_hangup(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    (void)fd;
    (void)what;
    log_debug("connection of pid %d uid %u: the peer closed while its requests waited",
              (int)c->peer.pid, (unsigned)c->peer.uid);
    conn_free(c);
}

/* Its requests wait (why, budget_queue_wait): reading stops until the
 * budget says they may go on (server_on_resume). Reading stopped, a hang-up
 * is watched for apart (EV_CLOSED, where the backend has it; else the
 * write that fails, or the read once it goes on, sees it). */
static int conn_wait_output(struct conn *c, enum budget_wait why)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    struct event_base *base = c->srv->d.base;
    if (!c->stall_ev && !(c->stall_ev = evtimer_new(base, conn_on_stall, c)))
        return -ENOMEM;
    if (!c->hangup_ev && (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE) &&
        !(c->hangup_ev = event_new(base, bufferevent_getfd(c->bev), EV_CLOSED, conn_on_hangup,
                                   c)))
        return -ENOMEM;
    if (c->hangup_ev)
        event_add(c->hangup_ev, NULL);
    if (!c->drain_cb && !(c->drain_cb = evbuffer_add_cb(out, conn_on_drain, c)))
        return -ENOMEM;
    c->waiting = why;
    budget_queue_pause(c->q, why);
    conn_waiting_append(c);
    if (why == BUDGET_WAIT_OWN)
        c->srv->limit_hits[LIMIT_output_buffer]++;
    log_debug("connection of pid %d uid %u: %llu bytes of its replies queued, its uid's "
              "charge %llu: its requests wait (%s)", (int)c->peer.pid, (unsigned)c->peer.uid,
              (unsigned long long)budget_queue_bytes(c->q),
              (unsigned long long)budget_used(c->srv->budget, c->peer.uid),
              why == BUDGET_WAIT_OWN     ? "limits.output_buffer"
              : why == BUDGET_WAIT_USER  ? "limits.user_memory"
              : why == BUDGET_WAIT_AHEAD ? "an OPEN, for read-ahead to give room back"
                                         : "limits.client_memory");
    bufferevent_disable(c->bev, EV_READ);
    conn_stall_arm(c);
    return 0;
}

static void conn_resume(struct conn *c)
{
    c->waiting = BUDGET_GO;
    budget_queue_pause(c->q, BUDGET_GO);
    event_del(c->stall_ev);
    if (c->hangup_ev)
        event_del(c->hangup_ev);
    evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->drain_cb);
    c->drain_cb = NULL;
    bufferevent_enable(c->bev, EV_READ);
    conn_on_read(c->bev, c); /* what came meanwhile is in the input already */
}

/* Charges went down (budget_set_notify): from within an uncharge, so only
 * the look is scheduled. */
static void server_on_freed(void *arg)
{
    struct server *s = arg;
    if (s->waiting && s->resume_ev)
        event_active(s->resume_ev, EV_TIMEOUT, 0);
}

/* The waiting connections that may go on do, in the order they began to
 * wait; one that waits again goes to the end (its uid's connections take
 * turns). A connection over its own limit goes on once its replies
 * drained to half of it. */
static void server_on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    const struct config *cfg = s->d.cfg;
    (void)fd;
    (void)what;
    uint64_t n = 0;
    for (struct conn *c = s->waiting; c; c = c->wnext)
        n++;
    while (n-- > 0 && s->waiting) {
        struct conn *c = s->waiting;
        conn_waiting_unlink(c);
        if (c->closing) { /* reads no more: it goes once flushed, or stalled */
            conn_waiting_append(c);
            continue;
        }
        uint64_t own = cfg->max_output_buffer;
        enum budget_wait why =
            budget_queue_wait(c->q, c->waiting == BUDGET_WAIT_OWN ? own / 2 : own);
        if (why != BUDGET_GO) {
            c->waiting = why;
            budget_queue_pause(c->q, why);
            conn_waiting_append(c);
            continue;
        }
        conn_resume(c);
    }
}

/* What the connection's input holds (at most a request: the read
 * watermark) is charged to its uid too (not as queued replies: it does not
 * drain while its requests wait). */
static void conn_charge_input(struct conn *c)
{
    uint64_t len = evbuffer_get_length(bufferevent_get_input(c->bev));
    if (len > c->in_charged && budget_charge(c->srv->budget, c->peer.uid,
                                             len - c->in_charged) == 0)
        c->in_charged = len;
    else if (len < c->in_charged) {
        budget_uncharge(c->srv->budget, c->peer.uid, c->in_charged - len);
        c->in_charged = len;
    }
}

static void conn_on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    const struct config *cfg = c->srv->d.cfg;
    char msg[160];

    c->active_ns = stats_now_ns();
    conn_charge_input(c);
    while (!c->closing && !c->waiting) {
        uint8_t hdr[PROTO_HEADER_SIZE];
        struct proto_header h;
        size_t avail = evbuffer_get_length(in);
        if (avail < PROTO_HEADER_SIZE)
            return;
        enum budget_wait why = budget_queue_wait(c->q, cfg->max_output_buffer);
        if (why != BUDGET_GO) {
            if (conn_wait_output(c, why) == 0)
                return;
            conn_fail(c, 0, PROTO_E_NOMEM, "out of memory");
            break;
        }
        evbuffer_copyout(in, hdr, sizeof(hdr));
        int rc = proto_header_decode(hdr, (uint32_t)cfg->max_frame_size, &h);
        if (rc == -PROTO_E_PROTO) {
            conn_fail(c, 0, PROTO_E_PROTO, "bad magic: not a presto client");
            break;
        }
        if (rc == -PROTO_E_TOOBIG) {
            c->srv->limit_hits[LIMIT_frame_size]++;
            snprintf(msg, sizeof(msg), "request body of %u bytes is over limits.frame_size (%llu)",
                     h.body_len, (unsigned long long)cfg->max_frame_size);
            conn_fail(c, h.req_id, PROTO_E_TOOBIG, msg);
            break;
        }
        if (avail < PROTO_HEADER_SIZE + (size_t)h.body_len)
            return; /* the rest is coming; bounded by the read watermark */
        evbuffer_drain(in, PROTO_HEADER_SIZE);
        conn_charge_input(c); /* a STATS document does not count its own request */
        if (rc == -PROTO_E_VERSION) {
            snprintf(msg, sizeof(msg), "protocol version %u is not supported; prestod speaks %u",
                     h.version, PROTO_VERSION);
            c->srv->n[SRV_protocol_errors]++;
            frame_send_error(bev, c->q, h.req_id, PROTO_E_VERSION, msg);
        } else {
            const uint8_t *body = h.body_len ? evbuffer_pullup(in, h.body_len) : NULL;
            if (conn_dispatch(c, &h, body) > 0) { /* the request waits, whole */
                int rc2 = evbuffer_prepend(in, hdr, sizeof(hdr));
                conn_charge_input(c);
                if (rc2 == 0 && conn_wait_output(c, BUDGET_WAIT_AHEAD) == 0)
                    return;
                conn_fail(c, h.req_id, PROTO_E_NOMEM, "out of memory");
                break;
            }
        }
        evbuffer_drain(in, h.body_len);
        conn_charge_input(c);
    }
    if (c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        conn_free(c);
}

static void conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_free(arg);
}

/* ---- idle connections ---- */

/* Something is open on the connection: it is not idle, however quiet. */
static int conn_busy(const struct conn *c)
{
    return c->nstreams || c->warm || c->reload_pending || c->waiting || c->closing ||
           profiler_runs_for(c->srv->profiler, &c->profile_job);
}

static void conn_idle_arm(struct conn *c, uint64_t ns)
{
    struct timeval tv = {(time_t)(ns / 1000000000u), (suseconds_t)(ns % 1000000000u / 1000)};
    event_add(c->idle_ev, &tv);
}

/* limits.idle_timeout: a connection with nothing open on it (no stream,
 * WARM, PROFILE or RELOAD) that sent nothing and took no output for that
 * long is closed with an ERROR saying so (counted, logged at most once a
 * second). The timer checks when it fires, so requests never touch it. */
static void conn_on_idle(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct server *s = c->srv;
    uint64_t timeout = (uint64_t)s->d.cfg->idle_timeout * 1000000000u, now = stats_now_ns();
    char msg[96], more[64];
    (void)fd;
    (void)what;
    if (conn_busy(c))
        c->active_ns = now;
    if (now - c->active_ns < timeout) {
        conn_idle_arm(c, c->active_ns + timeout - now);
        return;
    }
    s->limit_hits[LIMIT_idle_timeout]++;
    snprintf(msg, sizeof(msg), "idle for %u s: limits.idle_timeout", s->d.cfg->idle_timeout);
    if (access_log_take(&s->idle_drops, more, sizeof(more)))
        log_info("connection of pid %d uid %u closed: %s%s", (int)c->peer.pid,
                 (unsigned)c->peer.uid, msg, more);
    /* Closed now: output it left unread is not waited for. */
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        frame_send_error_now(bufferevent_getfd(c->bev), PROTO_E_LIMIT, msg);
    conn_free(c);
}

/* ---- accepting ---- */

/* A connection refused at accept (limits.connections, or
 * connections_per_user): counted, told why in an ERROR it can read after
 * the close, logged at most once a second with a count of the rest. */
static void server_refuse(struct server *s, int fd, const struct access_peer *p,
                          enum server_limit limit, const char *msg)
{
    char more[64];
    s->limit_hits[limit]++;
    if (access_log_take(&s->refusals, more, sizeof(more)))
        log_warn("connection of pid %d uid %u refused: %s%s", (int)p->pid, (unsigned)p->uid,
                 msg, more);
    int rc = frame_send_error_now(fd, PROTO_E_LIMIT, msg);
    if (rc < 0)
        log_debug("refused connection: %s", strerror(-rc));
    close(fd);
}

static void server_on_accept(struct evconnlistener *l, evutil_socket_t fd,
                             struct sockaddr *addr, int len, void *arg)
{
    struct server *s = arg;
    const struct config *cfg = s->d.cfg;
    struct access_peer peer;
    struct uid_conns *u;
    struct conn *c;
    char msg[128];
    (void)l;
    (void)addr;
    (void)len;
    if (access_peer_read(fd, &peer) < 0 && s->peer_errors++ == 0)
        log_warn("cannot read a peer's credentials (SO_PEERCRED): %s; such peers may "
                 "stream but are no admins", strerror(errno));
    else if (peer.source == ACCESS_GROUPS_PROC && s->peer_errors++ == 0)
        log_warn("no SO_PEERGROUPS (kernel before 4.13): a peer's groups are read from "
                 "/proc/PID/status at accept");
    u = uid_conns(s, peer.uid, 0);
    if (s->nconns >= cfg->max_connections || (u && u->n >= cfg->max_connections_per_user)) {
        int total = s->nconns >= cfg->max_connections;
        if (total)
            snprintf(msg, sizeof(msg), "too many connections: limits.connections (%u) reached",
                     cfg->max_connections);
        else
            snprintf(msg, sizeof(msg), "too many connections of uid %u: "
                     "limits.connections_per_user (%u) reached", (unsigned)peer.uid,
                     cfg->max_connections_per_user);
        server_refuse(s, fd, &peer, total ? LIMIT_connections : LIMIT_connections_per_user,
                      msg);
        access_peer_free(&peer);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c) {
        c->stream_cap = cfg->max_streams_per_conn;
        c->streams = calloc(c->stream_cap, sizeof(*c->streams));
        c->idle_ev = evtimer_new(s->d.base, conn_on_idle, c);
    }
    if (c && c->streams && c->idle_ev && budget_queue_new(s->budget, peer.uid, &c->q) == 0)
        c->bev = bufferevent_socket_new(s->d.base, fd, BEV_OPT_CLOSE_ON_FREE);
    u = c && c->bev ? uid_conns(s, peer.uid, 1) : NULL;
    if (!u) {
        log_error("out of memory accepting a connection");
        if (c) {
            budget_queue_close(c->q);
            if (c->bev)
                bufferevent_free(c->bev);
            else
                close(fd);
            if (c->idle_ev)
                event_free(c->idle_ev);
            free(c->streams);
        } else {
            close(fd);
        }
        free(c);
        access_peer_free(&peer);
        return;
    }
    u->n++;
    c->srv = s;
    c->kept.fd = -1;
    c->peer = peer;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    s->n[SRV_connections_total]++;
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, PROTO_HEADER_SIZE + cfg->max_frame_size);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->active_ns = stats_now_ns();
    conn_idle_arm(c, (uint64_t)cfg->idle_timeout * 1000000000u);
}

/* ---- documents ---- */

static const struct stats_decl server_decl[] = {SERVER_STATS(STATS_DECL)};
static const struct stats_decl access_decl[] = {SERVER_ACCESS_STATS(STATS_DECL)};
static const struct stats_decl limit_decl[] = {SERVER_LIMIT_STATS(STATS_DECL)};
static const struct stats_decl memory_decl[] = {SERVER_MEMORY_STATS(STATS_DECL)};

#define NDECL(d) (sizeof(d) / sizeof((d)[0]))

/* The process's resident set (/proc/self/statm), bytes; 0 if unknown. */
static uint64_t rss_bytes(void)
{
    unsigned long size, resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

static void server_top_stats(struct server *s, struct stats_out *o)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    struct stats_val v[] = {
        stats_str(PRESTO_VERSION),
        stats_u64((uint64_t)getpid()),
        stats_f64((double)(now.tv_sec - s->started.tv_sec) +
                  (double)(now.tv_nsec - s->started.tv_nsec) / 1e9),
        stats_u64(s->nconns),
        stats_u64(s->n[SRV_connections_total]),
        stats_u64(s->limit_hits[LIMIT_connections]),
        stats_u64(s->n[SRV_protocol_errors]),
        stats_u64(s->n[SRV_ends_lost]),
    };
    stats_emit(o, server_decl, v, NDECL(v));
}

static void server_access_stats(struct server *s, struct stats_out *o)
{
    const struct config *cfg = s->d.cfg;
    struct stats_val v[] = {
        stats_u64(s->n[SRV_access_denied]),
        stats_u64((uint64_t)s->uid),
        cfg->admin_group == CONFIG_NO_GROUP ? stats_str("none") : stats_u64(cfg->admin_group),
        stats_u64(s->n[SRV_cache_drops]),
    };
    stats_begin(o, "access", NULL, NULL, NULL);
    stats_emit(o, access_decl, v, NDECL(v));
    reload_stats(s->d.reload, o);
    stats_end(o);
}

/* Each configured limit: its value and how often it refused something.
 * limits.file_size and limits.pixels refuse samples, not requests:
 * errors.too_large counts those (a bad sample, skipped or failed). */
static void server_limits_stats(struct server *s, struct stats_out *o)
{
    static const char *const names[LIMIT_MAX] = {
#define SERVER_LIMIT_NAME(name, field) #name,
        SERVER_LIMITS(SERVER_LIMIT_NAME)
#undef SERVER_LIMIT_NAME
    };
    const struct config *cfg = s->d.cfg;
    const uint64_t values[LIMIT_MAX] = {
#define SERVER_LIMIT_VALUE(name, field) cfg->field,
        SERVER_LIMITS(SERVER_LIMIT_VALUE)
#undef SERVER_LIMIT_VALUE
    };
    stats_begin(o, "limits", "", NULL, NULL);
    for (int i = 0; i < LIMIT_MAX; i++) {
        uint64_t hits = i == LIMIT_release_timeout ? streams_release_timeouts(s->streams)
                                                   : s->limit_hits[i];
        uint64_t v[2] = {values[i], hits};
        stats_begin(o, names[i], "limit", "limit", names[i]);
        stats_emit_u64(o, limit_decl, v, 2);
        stats_end(o);
    }
    stats_end(o);
}

/* What the process's memory goes to, by owner. */
static void server_memory_stats(struct server *s, struct stats_out *o)
{
    struct tiers_memory tm;
    tiers_memory_use(s->d.tiers, &tm);
    uint64_t streams = streams_buffer_bytes(s->streams);
    uint64_t workers = workers_mem_bytes(s->d.workers);
    uint64_t ahead = readahead_buffer_bytes(s->d.readahead);
    uint64_t v[] = {tm.budget,    tm.bytes, tm.index_bytes,
                    tm.store_index, streams, workers,
                    ahead,        tm.bytes + tm.store_index + streams + workers + ahead,
                    rss_bytes()};
    stats_begin(o, "memory", NULL, NULL, NULL);
    stats_emit_u64(o, memory_decl, v, NDECL(v));
    stats_end(o);
}

/* The I/O section: the workers' rings and the read-ahead's, summed. */
static void server_io_stats(struct server *s, struct stats_out *o)
{
    struct io_stats io;
    workers_io_stats(s->d.workers, &io);
    readahead_io_stats(s->d.readahead, &io);
    stats_begin(o, "io", NULL, NULL, NULL);
    workers_io_fields(s->d.workers, o);
    io_stats_emit(o, &io);
    readahead_stats(s->d.readahead, o);
    stats_end(o);
}

/* The stats document: each module fills its own sections. */
static void server_stats(struct server *s, struct stats_out *o)
{
    stats_begin(o, NULL, NULL, NULL, NULL);
    server_top_stats(s, o);
    workers_stats(s->d.workers, o);
    streams_stats(s->streams, o);
    server_access_stats(s, o);
    server_limits_stats(s, o);
    budget_stats(s->budget, o);
    streams_shm_stats(s->streams, o);
    tiers_stats(s->d.tiers, o);
    server_memory_stats(s, o);
    server_io_stats(s, o);
    pipeline_stats(s->d.pipeline, o);
    stats_list_begin(o, "datasets");
    for (uint32_t i = 0; i < s->d.ndatasets; i++) {
        struct dataset *ds = s->d.datasets[i];
        stats_begin(o, NULL, "dataset", "dataset", dataset_name(ds));
        dataset_stats(ds, o);
        tiers_dataset_stats(s->d.tiers, ds, o);
        stats_end(o);
    }
    stats_list_end(o);
    metrics_stats(s->metrics, o);
    stats_end(o);
}

char *server_stats_doc(struct server *s, enum stats_format format)
{
    struct stats_out *o = stats_out_new(format);
    if (!o)
        return NULL;
    server_stats(s, o);
    return stats_out_finish(o);
}

static char *server_metrics_doc(void *arg)
{
    return server_stats_doc(arg, STATS_PROMETHEUS);
}

static char *server_datasets_json(struct server *s)
{
    struct json j;
    char desc[96];
    json_init(&j);
    json_object_begin(&j, NULL);
    json_array_begin(&j, "datasets");
    for (uint32_t i = 0; i < s->d.ndatasets; i++) {
        struct dataset *ds = s->d.datasets[i];
        const struct config_dataset *dc = dataset_config(ds);
        const struct dataset_output *o = dataset_output(ds);
        const struct strategy *st = dataset_strategy(ds);
        uint32_t split = st->split;
        strategy_put(st);
        json_object_begin(&j, NULL);
        json_str(&j, "name", dc->name);
        json_str(&j, "root", dc->root);
        json_u64(&j, "samples", dataset_size(ds));
        json_u64(&j, "classes", dataset_nclasses(ds));
        char fp[17];
        snprintf(fp, sizeof(fp), "%016llx", (unsigned long long)dataset_fingerprint(ds));
        json_str(&j, "fingerprint", fp);
        json_array_begin(&j, "class_names");
        for (uint32_t k = 0; k < dataset_nclasses(ds); k++)
            json_str(&j, NULL, dataset_class(ds, k));
        json_array_end(&j);
        json_array_begin(&j, "steps");
        for (uint32_t k = 0; k < dc->nsteps; k++) {
            step_describe(&dc->steps[k], desc, sizeof(desc));
            json_str(&j, NULL, desc);
        }
        json_array_end(&j);
        json_array_begin(&j, "batch_steps"); /* mixup, cutmix: on the whole batch */
        for (uint32_t k = 0; k < dc->nbatch_steps; k++) {
            step_describe(&dc->batch_steps[k], desc, sizeof(desc));
            json_str(&j, NULL, desc);
        }
        json_array_end(&j);
        stream_labels_describe(&o->labels, desc, sizeof(desc));
        json_str(&j, "labels", desc);
        json_u64(&j, "split", split);
        profile_dataset_json(ds, &j);
        /* in the order a batch's samples have (presto.h's layout), so that
         * [32, 60, 1] is not printed for a [1, 32, 60] spectrogram */
        uint32_t dims[3] = {o->h, o->w, o->c};
        if (o->layout == STEP_LAYOUT_NCHW)
            dims[0] = o->c, dims[1] = o->h, dims[2] = o->w;
        json_array_begin(&j, "shape");
        for (unsigned k = 0; k < 3; k++)
            json_u64(&j, NULL, dims[k]);
        json_array_end(&j);
        step_type_describe(&o->type, desc, sizeof(desc));
        json_str(&j, "sample", desc);
        json_str(&j, "on_error", dc->on_error == CONFIG_ON_ERROR_FAIL ? "fail" : "skip");
        json_u64(&j, "follow_symlinks", dc->follow_symlinks != 0);
        json_u64(&j, "refused", dataset_refused(ds));
        json_object_end(&j);
    }
    json_array_end(&j);
    json_object_end(&j);
    if (j.failed) {
        json_free(&j);
        return NULL;
    }
    return j.buf;
}

/* ---- listening socket ---- */

/* The socket's directory, trusted as the cache directory is (trust.h):
 * it belongs to the daemon's user, and nobody else may write to it or to a
 * directory on the way (a sticky /tmp is fine), or another user could
 * replace the socket. With create (its mode) it is made when missing;
 * without, a missing one under trusted directories is -ENOENT. An O_PATH
 * descriptor, or a negative errno with the reason. */
static int socket_dir_open(const char *path, mode_t create, char *err, size_t errlen)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], why[512];
    if (strlen(path) >= sizeof(dir)) {
        snprintf(err, errlen, "socket path %s is longer than %zu bytes", path, sizeof(dir) - 1);
        return -ENAMETOOLONG;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    struct trust_opts o = {geteuid(), TRUST_STICKY_OK | TRUST_OWNER_EXACT, create};
    if (create)
        o.flags |= TRUST_CREATE;
    int fd = trust_open_dir(dirname(dir), &o, why, sizeof(why));
    if (fd < 0)
        snprintf(err, errlen, "socket directory of %s: %s%s", path, why,
                 fd == -EPERM ? ": only the daemon's user and root may change it, or "
                                "another user could replace the socket" : "");
    return fd;
}

int server_check_socket(const char *path, char *err, size_t errlen)
{
    int fd = socket_dir_open(path, 0, err, errlen);
    if (fd >= 0)
        close(fd);
    return fd < 0 && fd != -ENOENT ? fd : 0; /* a missing directory is made at start-up */
}

/* The socket's mode and group decide who may connect at all (connect(2)
 * needs write permission on it): socket_mode and socket_group. */
static int bind_socket(const char *path, uint32_t mode, uint32_t group, char *err,
                       size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, rc;

    /* Made 0700, with search (x, never read or write) for everyone when
     * socket_mode lets the group or others connect: the socket decides. */
    if ((rc = socket_dir_open(path, (mode & 077) ? 0711 : 0700, err, errlen)) < 0)
        return rc;
    close(rc);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -errno;
    }
    /* A stale socket from a crashed daemon is replaced; a live one is not. */
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(probe);
            close(fd);
            snprintf(err, errlen, "%s: another prestod is listening there", path);
            return -EADDRINUSE;
        }
        if (probe >= 0)
            close(probe);
        unlink(path);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        (group != CONFIG_NO_GROUP && chown(path, (uid_t)-1, (gid_t)group) < 0) ||
        chmod(path, mode) < 0 ||
        listen(fd, 128) < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    return fd;
}

int server_create(struct server **out, const struct server_deps *deps, int listen_fd,
                  char *err, size_t errlen)
{
    struct server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->d = *deps;
    s->uid = geteuid();
    clock_gettime(CLOCK_MONOTONIC, &s->started);
    if (streams_create(&s->streams, deps->base, deps->workers, deps->pipeline,
                       deps->readahead) < 0) {
        free(s);
        return -ENOMEM;
    }
    streams_set_release_timeout(s->streams, deps->cfg->release_timeout);
    if (budget_create(&s->budget, deps->base, deps->cfg->client_memory,
                      deps->cfg->user_memory) < 0) {
        streams_destroy(s->streams);
        free(s);
        return -ENOMEM;
    }
    if (!(s->resume_ev = event_new(deps->base, -1, 0, server_on_resume, s)) ||
        profiler_create(&s->profiler, deps->base, deps->workers, &s->d.cfg, deps->tiers,
                        deps->readahead) < 0) {
        if (s->resume_ev)
            event_free(s->resume_ev);
        budget_destroy(s->budget);
        streams_destroy(s->streams);
        free(s);
        return -ENOMEM;
    }

    if (deps->cfg->metrics_listen &&
        metrics_create(&s->metrics, deps->base, deps->cfg->metrics_listen, server_metrics_doc,
                       s, err, errlen) < 0) {
        server_destroy(s);
        return -EINVAL;
    }
    int fd = listen_fd;
    if (fd < 0) {
        fd = bind_socket(deps->cfg->socket_path, deps->cfg->socket_mode,
                         deps->cfg->socket_group, err, errlen);
        if (fd < 0) {
            server_destroy(s);
            return fd;
        }
        if (!(s->path = strdup(deps->cfg->socket_path))) {
            close(fd);
            server_destroy(s);
            return -ENOMEM;
        }
    }
    s->listener = evconnlistener_new(deps->base, server_on_accept, s,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
    if (!s->listener) {
        snprintf(err, errlen, "cannot listen: %s", strerror(errno));
        close(fd);
        server_destroy(s);
        return -ENOMEM;
    }
    budget_set_notify(s->budget, server_on_freed, s);
    *out = s;
    return 0;
}

void server_update(struct server *s, const struct config *cfg, struct dataset **datasets,
                   uint32_t n)
{
    /* Out of service: no profile may start on it or stay queued. */
    for (uint32_t i = 0; i < s->d.ndatasets; i++) {
        int kept = 0;
        for (uint32_t k = 0; k < n && !kept; k++)
            kept = datasets[k] == s->d.datasets[i];
        if (!kept)
            profiler_forget(s->profiler, s->d.datasets[i]);
    }
    s->d.cfg = cfg;
    s->d.datasets = datasets;
    s->d.ndatasets = n;
    pipeline_set_max_file_size(s->d.pipeline, cfg->max_file_size);
    streams_set_release_timeout(s->streams, cfg->release_timeout);
    budget_set_limits(s->budget, cfg->client_memory, cfg->user_memory);
    server_on_freed(s); /* requests waiting on the old limits may go on */
    /* A larger frame_size must fit in what each connection reads at once. */
    for (struct conn *c = s->conns; c; c = c->next)
        bufferevent_setwatermark(c->bev, EV_READ, 0, PROTO_HEADER_SIZE + cfg->max_frame_size);
}

void server_stop(struct server *s)
{
    profiler_destroy(s->profiler);
    s->profiler = NULL;
    metrics_destroy(s->metrics);
    s->metrics = NULL;
    if (s->listener) {
        evconnlistener_free(s->listener);
        s->listener = NULL;
    }
    while (s->conns)
        conn_free(s->conns);
    budget_stop(s->budget); /* its event, before the event base goes */
    if (s->resume_ev)
        event_free(s->resume_ev);
    s->resume_ev = NULL;
}

void server_destroy(struct server *s)
{
    if (!s)
        return;
    server_stop(s);
    if (s->path) {
        unlink(s->path);
        free(s->path);
    }
    streams_destroy(s->streams);
    budget_destroy(s->budget);
    free(s->uids);
    free(s);
}

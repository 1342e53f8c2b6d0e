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
#include "frame.h"
#include "json.h"
#include "log.h"
#include "profile.h"
#include "proto.h"
#include "stream.h"
#include "trust.h"
#include "warm.h"

struct conn {
    struct server *srv;
    struct bufferevent *bev;
    struct conn *prev, *next;
    struct stream **streams; /* stream_cap slots */
    uint32_t nstreams, stream_cap; /* cap: limits.streams_per_connection at accept */
    struct warm *warm;       /* a WARM running on this connection */
    int closing; /* close once the output is flushed */
    struct access_peer peer; /* who connected (SO_PEERCRED at accept) */
    int reload_pending;      /* a RELOAD (reload_req) waits for its reply */
    uint32_t reload_req;
    /* Requests wait while the output is over limits.output_buffer: reading
     * stops until it drains to half; stalled for output_timeout with nothing
     * drained, the connection is dropped. */
    int waiting;
    uint64_t drained;        /* output bytes the peer took while waiting */
    uint64_t drained_mark;   /* ... as of the last stall check */
    struct event *stall_ev;
    struct evbuffer_cb_entry *drain_cb;
    struct ring kept; /* a finished shm stream's ring, for the next OPEN */
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
    uint64_t nstreams;
    uint32_t next_stream_id;
    uint64_t buffer_bytes; /* the streams' batch buffers */
    uint64_t shm_rings, shm_bytes; /* the streams' shared-memory rings */
    struct stream_env env;
    struct warm_env wenv;
    struct profiler *profiler;
    struct timespec started;
    uid_t uid;                 /* ours: a peer with it is an admin */
    struct access_log denials; /* rate limit of the denial log lines */
    struct access_log refusals; /* ... of connections refused at accept */
    struct access_log idle_drops; /* ... of connections closed for idling */
    uint64_t peer_errors;      /* peers whose credentials could not be read */
    struct uid_conns *uids;    /* nuids entries, room for capuids */
    uint32_t nuids, capuids;
};

static struct stats_thread *loop_stats(struct server *s)
{
    return &s->d.stats[s->d.nstats - 1];
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

static void conn_free(struct conn *c)
{
    struct server *s = c->srv;
    for (uint32_t i = 0; i < c->nstreams; i++)
        stream_close(c->streams[i]);
    stream_ring_free(&s->env, &c->kept);
    if (c->warm)
        warm_close(c->warm);
    profiler_detach(s->profiler, c);
    if (c->reload_pending && s->d.reload)
        reload_cancel(s->d.reload, c);
    if (c->stall_ev)
        event_free(c->stall_ev);
    if (c->idle_ev)
        event_free(c->idle_ev);
    uid_conns_drop(s, c->peer.uid);
    if (c->drain_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->drain_cb);
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
static void conn_resume(struct conn *c);

static void conn_on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    size_t out = evbuffer_get_length(bufferevent_get_output(bev));
    c->active_ns = stats_now_ns(); /* the peer took its output (the end of a job's, too) */
    if (c->closing && out == 0) {
        conn_free(c);
        return;
    }
    if (c->waiting && !c->closing && out <= c->srv->d.cfg->max_output_buffer / 2)
        conn_resume(c);
}

/* Replies with an error and closes the connection once it is sent. */
static void conn_fail(struct conn *c, uint32_t req_id, int code, const char *msg)
{
    stats_add(loop_stats(c->srv), STAT_protocol_errors, 1);
    log_info("connection closed: %s", msg);
    frame_send_error(c->bev, req_id, code, msg);
    c->closing = 1;
    bufferevent_disable(c->bev, EV_READ);
    for (uint32_t i = 0; i < c->nstreams; i++)
        stream_close(c->streams[i]);
    c->nstreams = 0;
    if (c->warm)
        warm_close(c->warm);
    c->warm = NULL;
    profiler_detach(c->srv->profiler, c);
}

static void conn_stream_finished(struct stream *st, void *owner)
{
    struct conn *c = owner;
    int dropped = stream_dropped(st);
    for (uint32_t i = 0; i < c->nstreams; i++) {
        if (c->streams[i] == st) {
            c->streams[i] = c->streams[--c->nstreams];
            break;
        }
    }
    stream_take_ring(st, &c->kept); /* when it ended well and none is kept yet */
    stream_close(st);
    if (dropped) { /* the stream's ERROR says why; close once it is sent */
        c->closing = 1;
        bufferevent_disable(c->bev, EV_READ);
        for (uint32_t i = 0; i < c->nstreams; i++)
            stream_close(c->streams[i]);
        c->nstreams = 0;
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_free(c);
    }
}

static void reply_json(struct conn *c, uint16_t type, uint32_t req_id, char *json)
{
    struct proto_wbuf w;
    if (!json) {
        frame_send_error(c->bev, req_id, PROTO_E_NOMEM, "out of memory");
        return;
    }
    proto_wbuf_init(&w);
    proto_frame_begin(&w, type, req_id);
    proto_put_str(&w, json, strlen(json));
    if (frame_send(c->bev, &w) < 0)
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
        if (strcmp(s->d.datasets[i]->cfg->name, name) == 0)
            return s->d.datasets[i];
    snprintf(err, sizeof(err), "no dataset named '%s'", name);
    frame_send_error(c->bev, req_id, PROTO_E_NODATASET, err);
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
static void refuse_limit(struct conn *c, uint32_t req_id, enum stats_counter counter,
                         const char *msg)
{
    stats_add(loop_stats(c->srv), counter, 1);
    log_debug("pid %d uid %u: %s", (int)c->peer.pid, (unsigned)c->peer.uid, msg);
    frame_send_error(c->bev, req_id, PROTO_E_LIMIT, msg);
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
    stats_add(loop_stats(s), STAT_access_denied, 1);
    access_log_denied(&s->denials, &c->peer, op, s->uid, s->d.cfg->admin_group);
    snprintf(msg, sizeof(msg), "%s is an admin operation: root, uid %u or admin_group only",
             op, (unsigned)s->uid);
    frame_send_error(c->bev, req_id, PROTO_E_DENIED, msg);
    return 0;
}

static void handle_open(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    struct server *s = c->srv;
    const struct config *cfg = s->d.cfg;
    struct proto_open req;
    struct dataset *ds = NULL;
    char err[512];

    if (proto_get_open(r, &req) < 0) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed OPEN");
        return;
    }
    if (!(ds = conn_dataset(c, req_id, req.dataset)))
        return;
    if (req.batch_size == 0) {
        frame_send_error(c->bev, req_id, PROTO_E_INVAL, "batch_size 0");
        return;
    }
    if (req.batch_size > cfg->max_batch_size) {
        snprintf(err, sizeof(err), "batch_size %u is over limits.batch_size (%u)",
                 req.batch_size, cfg->max_batch_size);
        refuse_limit(c, req_id, STAT_limit_batch_size, err);
        return;
    }
    if (req.world == 0 || req.rank >= req.world) {
        snprintf(err, sizeof(err), "rank %u is not below world %u", req.rank, req.world);
        frame_send_error(c->bev, req_id, PROTO_E_INVAL, err);
        return;
    }
    if (req.prefetch > cfg->max_prefetch) {
        snprintf(err, sizeof(err), "prefetch %u is over limits.prefetch (%u)", req.prefetch,
                 cfg->max_prefetch);
        refuse_limit(c, req_id, STAT_limit_prefetch, err);
        return;
    }
    if (c->nstreams >= cfg->max_streams_per_conn || c->nstreams >= c->stream_cap) {
        snprintf(err, sizeof(err), "limits.streams_per_connection (%u) reached",
                 cfg->max_streams_per_conn);
        refuse_limit(c, req_id, STAT_limit_streams_per_connection, err);
        return;
    }
    if (user_streams(s, c->peer.uid) >= cfg->max_streams_per_user) {
        snprintf(err, sizeof(err), "limits.streams_per_user (%u) reached for uid %u",
                 cfg->max_streams_per_user, (unsigned)c->peer.uid);
        refuse_limit(c, req_id, STAT_limit_streams_per_user, err);
        return;
    }
    struct stream *st;
    int rc = stream_open(&st, &s->env, ds, &req, req.prefetch ? req.prefetch : cfg->prefetch,
                         ++s->next_stream_id, req_id, c->bev, &c->kept, conn_stream_finished,
                         c, err, sizeof(err));
    if (rc < 0) {
        frame_send_error(c->bev, req_id, rc, err);
        return;
    }
    c->streams[c->nstreams++] = st;
    profiler_first_use(s->profiler, ds); /* split: auto without a choice yet */
}

static void handle_close(struct conn *c, uint32_t req_id, struct proto_rbuf *r)
{
    uint32_t id;
    if (proto_get_u32(r, &id) < 0 || proto_remaining(r)) {
        conn_fail(c, req_id, PROTO_E_PROTO, "malformed CLOSE");
        return;
    }
    for (uint32_t i = 0; i < c->nstreams; i++) {
        if (stream_id(c->streams[i]) == id) {
            stream_close(c->streams[i]);
            c->streams[i] = c->streams[--c->nstreams];
            break;
        }
    }
    struct proto_wbuf w;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_CLOSED, req_id);
    proto_put_u32(&w, id);
    frame_send(c->bev, &w);
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
    for (uint32_t i = 0; i < c->nstreams; i++) {
        if (stream_id(c->streams[i]) == m.stream_id) {
            if (stream_release(c->streams[i], m.slot, err, sizeof(err)) < 0) {
                stats_add(loop_stats(c->srv), STAT_protocol_errors, 1);
                frame_send_error(c->bev, req_id, PROTO_E_INVAL, err);
            }
            return;
        }
    }
}

static void conn_warm_finished(struct warm *w, void *owner)
{
    struct conn *c = owner;
    c->warm = NULL;
    warm_close(w);
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
        frame_send_error(c->bev, req_id, PROTO_E_LIMIT,
                         "this connection runs a WARM already");
        return;
    }
    if (ds->autos.state == DATASET_AUTO_PENDING) { /* nothing would be cached */
        profiler_first_use(s->profiler, ds);
        snprintf(err, sizeof(err), "dataset '%s' has split: auto and no strategy chosen yet; "
                 "it is being profiled (prestoctl datasets shows the choice): warm it then",
                 ds->cfg->name);
        frame_send_error(c->bev, req_id, PROTO_E_LIMIT, err);
        return;
    }
    int rc = warm_start(&c->warm, &s->wenv, ds, req_id, c->bev, conn_warm_finished, c, err,
                        sizeof(err));
    if (rc < 0) {
        c->warm = NULL;
        frame_send_error(c->bev, req_id, rc, err);
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
    int rc = profiler_request(s->profiler, ds, &req, req_id, c->bev, c, err, sizeof(err));
    if (rc < 0)
        frame_send_error(c->bev, req_id, rc, err);
}

/* A RELOAD this connection asked for ended (reload_done_fn). */
static void conn_reload_done(void *arg, int rc, const char *text)
{
    struct conn *c = arg;
    uint32_t req_id = c->reload_req;
    c->reload_pending = 0;
    if (rc < 0) {
        frame_send_error(c->bev, req_id, rc == -ENOMEM ? PROTO_E_NOMEM : PROTO_E_INVAL, text);
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
        frame_send_error(c->bev, req_id, PROTO_E_INTERNAL, "this daemon cannot reload");
        return;
    }
    if (c->reload_pending) {
        frame_send_error(c->bev, req_id, PROTO_E_LIMIT,
                         "a RELOAD of this connection is running already");
        return;
    }
    log_info("RELOAD from pid %d uid %u", (int)c->peer.pid, (unsigned)c->peer.uid);
    c->reload_pending = 1;
    c->reload_req = req_id;
    if (reload_request(s->d.reload, conn_reload_done, c) < 0) {
        c->reload_pending = 0;
        frame_send_error(c->bev, req_id, PROTO_E_NOMEM, "no memory to reload");
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
    cache_clear(s->d.cache, &entries, &bytes);
    workers_resume(s->d.workers);
    stats_add(loop_stats(s), STAT_cache_drops, 1);
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

static void conn_dispatch(struct conn *c, const struct proto_header *h, const uint8_t *body)
{
    struct proto_rbuf r;
    char msg[128];
    proto_rbuf_init(&r, body, h->body_len);
    switch (h->type) {
    case PROTO_STATS:
        reply_json(c, PROTO_STATS_REPLY, h->req_id, server_stats_json(c->srv));
        break;
    case PROTO_DATASETS:
        reply_json(c, PROTO_DATASETS_REPLY, h->req_id, server_datasets_json(c->srv));
        break;
    case PROTO_OPEN:
        handle_open(c, h->req_id, &r);
        break;
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
        stats_add(loop_stats(c->srv), STAT_protocol_errors, 1);
        snprintf(msg, sizeof(msg), "unexpected message type %u (%s)", h->type,
                 proto_type_name(h->type));
        frame_send_error(c->bev, h->req_id, PROTO_E_PROTO, msg);
    }
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

/* Every output_timeout while requests wait: the peer took nothing since
 * the last look, so it stopped reading: ERROR (best effort) and close. */
static void conn_on_stall(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct server *s = c->srv;
    (void)fd;
    (void)what;
    if (!c->waiting)
        return;
    if (c->drained != c->drained_mark) {
        conn_stall_arm(c);
        return;
    }
    stats_add(loop_stats(s), STAT_limit_output_timeout, 1);
    log_warn("connection of pid %d uid %u dropped: its requests waited on %zu bytes of output "
             "(limits.output_buffer %llu) and none taken for limits.output_timeout (%u s)",
             (int)c->peer.pid, (unsigned)c->peer.uid,
             evbuffer_get_length(bufferevent_get_output(c->bev)),
             (unsigned long long)s->d.cfg->max_output_buffer, s->d.cfg->output_timeout);
    frame_send_error(c->bev, 0, PROTO_E_LIMIT, "output buffer over its limit and not read");
    conn_free(c);
}

/* The output is over the limit: stop taking requests until it drains. */
static int conn_wait_output(struct conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (!c->stall_ev && !(c->stall_ev = evtimer_new(c->srv->d.base, conn_on_stall, c)))
        return -ENOMEM;
    if (!c->drain_cb && !(c->drain_cb = evbuffer_add_cb(out, conn_on_drain, c)))
        return -ENOMEM;
    c->waiting = 1;
    stats_add(loop_stats(c->srv), STAT_limit_output_buffer, 1);
    log_debug("connection of pid %d: %zu bytes of output queued, over limits.output_buffer: "
              "its requests wait", (int)c->peer.pid, evbuffer_get_length(out));
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_setwatermark(c->bev, EV_WRITE, c->srv->d.cfg->max_output_buffer / 2, 0);
    conn_stall_arm(c);
    return 0;
}

static void conn_resume(struct conn *c)
{
    c->waiting = 0;
    event_del(c->stall_ev);
    evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->drain_cb);
    c->drain_cb = NULL;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    bufferevent_enable(c->bev, EV_READ);
    conn_on_read(c->bev, c); /* what came meanwhile is in the input already */
}

static void conn_on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    const struct config *cfg = c->srv->d.cfg;
    char msg[160];

    c->active_ns = stats_now_ns();
    while (!c->closing && !c->waiting) {
        uint8_t hdr[PROTO_HEADER_SIZE];
        struct proto_header h;
        size_t avail = evbuffer_get_length(in);
        if (avail < PROTO_HEADER_SIZE)
            return;
        if (evbuffer_get_length(bufferevent_get_output(bev)) > cfg->max_output_buffer) {
            if (conn_wait_output(c) == 0)
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
            stats_add(loop_stats(c->srv), STAT_limit_frame_size, 1);
            snprintf(msg, sizeof(msg), "request body of %u bytes is over limits.frame_size (%llu)",
                     h.body_len, (unsigned long long)cfg->max_frame_size);
            conn_fail(c, h.req_id, PROTO_E_TOOBIG, msg);
            break;
        }
        if (avail < PROTO_HEADER_SIZE + (size_t)h.body_len)
            return; /* the rest is coming; bounded by the read watermark */
        evbuffer_drain(in, PROTO_HEADER_SIZE);
        if (rc == -PROTO_E_VERSION) {
            snprintf(msg, sizeof(msg), "protocol version %u is not supported; prestod speaks %u",
                     h.version, PROTO_VERSION);
            stats_add(loop_stats(c->srv), STAT_protocol_errors, 1);
            frame_send_error(bev, h.req_id, PROTO_E_VERSION, msg);
        } else {
            const uint8_t *body = h.body_len ? evbuffer_pullup(in, h.body_len) : NULL;
            conn_dispatch(c, &h, body);
        }
        evbuffer_drain(in, h.body_len);
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
           profiler_runs_for(c->srv->profiler, c);
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
    stats_add(loop_stats(s), STAT_limit_idle_timeout, 1);
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
                          enum stats_counter counter, const char *msg)
{
    char more[64];
    stats_add(loop_stats(s), counter, 1);
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
        server_refuse(s, fd, &peer,
                      total ? STAT_connections_rejected : STAT_limit_connections_per_user, msg);
        access_peer_free(&peer);
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c) {
        c->stream_cap = cfg->max_streams_per_conn;
        c->streams = calloc(c->stream_cap, sizeof(*c->streams));
        c->idle_ev = evtimer_new(s->d.base, conn_on_idle, c);
    }
    if (c && c->streams && c->idle_ev)
        c->bev = bufferevent_socket_new(s->d.base, fd, BEV_OPT_CLOSE_ON_FREE);
    u = c && c->bev ? uid_conns(s, peer.uid, 1) : NULL;
    if (!u) {
        log_error("out of memory accepting a connection");
        if (c) {
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
    stats_add(loop_stats(s), STAT_connections_total, 1);
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, PROTO_HEADER_SIZE + cfg->max_frame_size);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    c->active_ns = stats_now_ns();
    conn_idle_arm(c, (uint64_t)cfg->idle_timeout * 1000000000u);
}

/* ---- documents ---- */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

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

static void stats_memory(struct server *s, struct json *j, const struct cache_stats *cs,
                         const struct store_stats *ss)
{
    uint64_t workers = workers_mem_bytes(s->d.workers);
    uint64_t store_index = s->d.store ? ss->index_bytes : 0;
    struct readahead_stats ra;
    readahead_get_stats(s->d.readahead, &ra);
    uint64_t ahead = ra.used + ra.chunk_bytes;
    json_object_begin(j, "memory");
    json_u64(j, "budget", cs->budget);
    json_u64(j, "cache_bytes", cs->bytes);
    json_u64(j, "cache_index_bytes", cs->index_bytes);
    json_u64(j, "store_index_bytes", store_index);
    json_u64(j, "stream_buffers", s->buffer_bytes);
    json_u64(j, "worker_buffers", workers);
    json_u64(j, "readahead_buffers", ahead);
    json_u64(j, "accounted", cs->bytes + store_index + s->buffer_bytes + workers + ahead);
    json_u64(j, "rss", rss_bytes());
    json_object_end(j);
}

static void stats_disk(struct server *s, struct json *j, const struct store_stats *ss)
{
    uint64_t hits = 0, misses = 0, bytes_read = 0;
    for (uint32_t i = 0; i < s->d.ndatasets; i++) {
        const struct dataset_counters *n = &s->d.datasets[i]->n;
        hits += LOAD(&n->disk_hits);
        misses += LOAD(&n->disk_misses);
        bytes_read += LOAD(&n->disk_bytes_read);
    }
    json_object_begin(j, "disk");
    json_u64(j, "enabled", s->d.store != NULL);
    json_str(j, "dir", s->d.store ? s->d.cfg->cache_dir : "");
    json_u64(j, "degraded", s->d.store ? ss->degraded != 0 : 0);
    json_str(j, "degraded_reason", ss->degraded ? strerror(ss->degraded) : "");
    json_str(j, "off_reason", s->d.store ? "" : s->d.store_off);
    json_u64(j, "direct_io", (uint64_t)(s->d.store && ss->direct_io));
    json_u64(j, "budget", ss->budget);
    json_u64(j, "segment_size", ss->segment_size);
    json_u64(j, "segments", ss->segments);
    json_u64(j, "entries", ss->records);
    json_u64(j, "bytes", ss->bytes_disk);
    json_u64(j, "bytes_live", ss->bytes_live);
    json_u64(j, "bytes_dead", ss->bytes_dead);
    json_u64(j, "bytes_raw", ss->bytes_raw);
    json_u64(j, "bytes_stored", ss->bytes_stored);
    json_double(j, "compression_ratio", ratio(ss->bytes_raw, ss->bytes_stored));
    json_u64(j, "hits", hits);
    json_u64(j, "misses", misses);
    json_double(j, "hit_rate", ratio(hits, hits + misses));
    json_u64(j, "evictions", 0);
    json_u64(j, "bytes_read", bytes_read);
    json_u64(j, "decode_errors", ss->decode_errors);
    json_u64(j, "puts", ss->puts);
    json_u64(j, "put_refused_budget", ss->put_budget);
    json_u64(j, "put_too_large", ss->put_too_large);
    json_u64(j, "put_failed", ss->put_io + ss->put_other);
    json_u64(j, "recovered", ss->recovered);
    json_u64(j, "dropped", ss->dropped);
    json_u64(j, "torn_bytes", ss->torn_bytes);
    json_u64(j, "compactions", ss->compactions);
    json_u64(j, "compactions_on_demand", pipeline_compactor_runs(s->d.compactor));
    json_u64(j, "compact_copied", ss->compact_copied);
    json_u64(j, "compact_freed", ss->compact_freed);
    json_object_end(j);
}

/* A latency histogram's summary, in microseconds. */
static void stats_latency(struct json *j, const char *name, const struct io_lat *h)
{
    json_object_begin(j, name);
    json_u64(j, "count", h->count);
    json_u64(j, "p50", io_lat_quantile(h, 0.50));
    json_u64(j, "p90", io_lat_quantile(h, 0.90));
    json_u64(j, "p99", io_lat_quantile(h, 0.99));
    json_u64(j, "max", h->max_us);
    json_double(j, "mean", h->count ? (double)h->sum_us / (double)h->count : 0.0);
    json_object_end(j);
}

/* Source files read whole through the I/O rings (cold epochs, warm,
 * profiling): how many, how fast, how long each took. */
static void stats_io_source(struct json *j, const struct io_stats *io)
{
    double busy = (double)io->file_busy_ns / 1e9;
    json_object_begin(j, "source");
    json_u64(j, "files", io->files);
    json_u64(j, "bytes", io->file_bytes);
    json_u64(j, "errors", io->file_errors);
    json_u64(j, "in_flight", io->files_in_flight);
    json_u64(j, "chained", io->files_chained);
    json_u64(j, "staged", io->files_staged);
    json_u64(j, "sync", io->files_sync);
    json_u64(j, "bytes_per_s", io->file_bytes_per_s);
    json_double(j, "busy_s", busy);
    json_double(j, "bytes_per_busy_s", busy > 0 ? (double)io->file_bytes / busy : 0.0);
    stats_latency(j, "latency_us", &io->file_lat);
    json_object_end(j);
}

/* The event loop's ring: batches read before a worker takes them. */
static void stats_readahead(struct json *j, const struct readahead_stats *ra)
{
    json_object_begin(j, "readahead");
    json_u64(j, "on", (uint64_t)ra->on);
    json_u64(j, "budget", ra->budget);
    json_u64(j, "bytes", ra->used);
    json_u64(j, "batches", ra->batches);
    json_u64(j, "batches_without_reads", ra->nothing);
    json_u64(j, "over_budget", ra->over_budget);
    json_u64(j, "strategy_busy", ra->busy);
    json_u64(j, "in_flight", ra->io.in_flight);
    json_u64(j, "max_in_flight", ra->io.max_in_flight);
    json_u64(j, "deferred", ra->io.deferred);
    json_object_end(j);
}

/* Totals over the workers' rings and the read-ahead ring. */
static void stats_io(struct server *s, struct json *j)
{
    struct io_stats io;
    struct readahead_stats ra;
    workers_io_stats(s->d.workers, &io);
    readahead_get_stats(s->d.readahead, &ra);
    io_stats_add(&io, &ra.io);
    json_object_begin(j, "io");
    json_str(j, "backend", workers_io_backend(s->d.workers));
    json_u64(j, "depth", workers_io_depth(s->d.workers));
    json_u64(j, "in_flight", io.in_flight);
    json_u64(j, "max_in_flight", io.max_in_flight);
    json_u64(j, "batches", io.batches);
    json_u64(j, "reads", io.reads);
    json_u64(j, "submitted", io.submitted);
    json_u64(j, "bytes", io.bytes);
    json_u64(j, "errors", io.errors);
    json_u64(j, "short_reads", io.short_reads);
    stats_latency(j, "read_latency_us", &io.read_lat);
    stats_io_source(j, &io);
    stats_readahead(j, &ra);
    json_object_end(j);
}

static void stats_dataset(struct server *s, struct json *j, struct dataset *ds)
{
    const struct dataset_counters *n = &ds->n;
    struct cache_dataset_stats cd;
    uint64_t hits = LOAD(&n->hits), misses = LOAD(&n->misses);
    uint64_t dhits = LOAD(&n->disk_hits), dmisses = LOAD(&n->disk_misses);
    uint64_t raw = LOAD(&n->disk_bytes_raw), stored = LOAD(&n->disk_bytes_stored);
    char enc[16];
    cache_get_dataset_stats(s->d.cache, ds->id, &cd);
    json_object_begin(j, NULL);
    json_str(j, "name", ds->cfg->name);
    json_u64(j, "samples", ds->nsamples);
    json_u64(j, "classes", ds->nclasses);
    json_u64(j, "hits", hits);
    json_u64(j, "misses", misses);
    json_u64(j, "errors", LOAD(&n->errors));
    json_u64(j, "refused", ds->refused);
    json_double(j, "hit_rate", ratio(hits, hits + misses));
    json_u64(j, "computed", LOAD(&n->computed));
    json_u64(j, "source_reads", LOAD(&n->source_reads));
    json_u64(j, "source_bytes", LOAD(&n->source_bytes));
    json_object_begin(j, "memory");
    json_u64(j, "entries", cd.entries);
    json_u64(j, "bytes", cd.bytes);
    json_u64(j, "hits", hits);
    json_u64(j, "misses", misses);
    json_double(j, "hit_rate", ratio(hits, hits + misses));
    json_u64(j, "evictions", 0);
    json_double(j, "admit_fraction", cd.fraction);
    json_u64(j, "not_admitted", cd.not_admitted);
    json_u64(j, "rejected", cd.rejected);
    json_object_end(j);
    json_object_begin(j, "disk");
    if (ds->zstd_level)
        snprintf(enc, sizeof(enc), "zstd:%d", ds->zstd_level);
    else
        snprintf(enc, sizeof(enc), "raw");
    json_str(j, "encoding", enc);
    json_u64(j, "degraded", s->d.store ? store_degraded(s->d.store) != 0 : 0);
    json_u64(j, "entries", LOAD(&n->disk_entries));
    json_u64(j, "bytes_raw", raw);
    json_u64(j, "bytes_stored", stored);
    json_double(j, "compression_ratio", ratio(raw, stored));
    json_u64(j, "hits", dhits);
    json_u64(j, "misses", dmisses);
    json_double(j, "hit_rate", ratio(dhits, dhits + dmisses));
    json_u64(j, "evictions", 0);
    json_u64(j, "bytes_read", LOAD(&n->disk_bytes_read));
    json_u64(j, "bad_records", LOAD(&n->disk_bad));
    json_u64(j, "puts", LOAD(&n->disk_puts));
    json_u64(j, "put_errors", LOAD(&n->disk_put_errors));
    json_object_end(j);
    json_object_end(j);
}

/* One configured limit: its value and how often it refused something. */
static void stats_limit(struct json *j, const char *name, uint64_t value, uint64_t hits)
{
    json_object_begin(j, name);
    json_u64(j, "value", value);
    json_u64(j, "hits", hits);
    json_object_end(j);
}

static void stats_limits(struct server *s, struct json *j, const struct stats_thread *sum)
{
    const struct config *cfg = s->d.cfg;
    json_object_begin(j, "access");
    json_u64(j, "denied", sum->c[STAT_access_denied]);
    json_u64(j, "uid", (uint64_t)s->uid);
    if (cfg->admin_group == CONFIG_NO_GROUP)
        json_str(j, "admin_group", "none");
    else
        json_u64(j, "admin_group", cfg->admin_group);
    json_u64(j, "reloads", sum->c[STAT_reloads]);
    json_u64(j, "reload_failures", sum->c[STAT_reload_failures]);
    json_u64(j, "cache_drops", sum->c[STAT_cache_drops]);
    json_object_end(j);
    json_object_begin(j, "limits");
    stats_limit(j, "connections", cfg->max_connections, sum->c[STAT_connections_rejected]);
    stats_limit(j, "connections_per_user", cfg->max_connections_per_user,
                sum->c[STAT_limit_connections_per_user]);
    stats_limit(j, "idle_timeout", cfg->idle_timeout, sum->c[STAT_limit_idle_timeout]);
    stats_limit(j, "streams_per_connection", cfg->max_streams_per_conn,
                sum->c[STAT_limit_streams_per_connection]);
    stats_limit(j, "streams_per_user", cfg->max_streams_per_user,
                sum->c[STAT_limit_streams_per_user]);
    stats_limit(j, "batch_size", cfg->max_batch_size, sum->c[STAT_limit_batch_size]);
    stats_limit(j, "prefetch", cfg->max_prefetch, sum->c[STAT_limit_prefetch]);
    stats_limit(j, "frame_size", cfg->max_frame_size, sum->c[STAT_limit_frame_size]);
    stats_limit(j, "output_buffer", cfg->max_output_buffer, sum->c[STAT_limit_output_buffer]);
    stats_limit(j, "output_timeout", cfg->output_timeout, sum->c[STAT_limit_output_timeout]);
    stats_limit(j, "release_timeout", cfg->release_timeout,
                sum->c[STAT_shm_release_timeouts]);
    /* limits.file_size and limits.pixels refuse samples, not requests:
     * errors.too_large counts those (a bad sample, skipped or failed). */
    json_object_end(j);
}

char *server_stats_json(struct server *s)
{
    struct stats_thread sum;
    struct cache_stats cs;
    struct store_stats ss;
    struct timespec now;
    struct json j;
    char ver[32];

    stats_sum(s->d.stats, s->d.nstats, &sum);
    cache_get_stats(s->d.cache, &cs);
    memset(&ss, 0, sizeof(ss));
    if (s->d.store)
        store_get_stats(s->d.store, &ss);
    clock_gettime(CLOCK_MONOTONIC, &now);
    snprintf(ver, sizeof(ver), "%s", PRESTO_VERSION);
    json_init(&j);
    json_object_begin(&j, NULL);
    json_str(&j, "version", ver);
    json_u64(&j, "pid", (uint64_t)getpid());
    json_double(&j, "uptime_s", (double)(now.tv_sec - s->started.tv_sec) +
                                    (double)(now.tv_nsec - s->started.tv_nsec) / 1e9);
    json_u64(&j, "workers", workers_count(s->d.workers));
    json_u64(&j, "workers_busy", workers_busy(s->d.workers));
    json_u64(&j, "jobs_queued", workers_queued(s->d.workers));
    json_u64(&j, "connections", s->nconns);
    json_u64(&j, "streams", s->nstreams);
    json_u64(&j, "samples_served", sum.c[STAT_samples_served]);
    json_u64(&j, "batches_served", sum.c[STAT_batches_served]);
    json_u64(&j, "bytes_served", sum.c[STAT_bytes_served]);
    json_u64(&j, "samples_skipped", sum.c[STAT_samples_skipped]);
    json_u64(&j, "connections_total", sum.c[STAT_connections_total]);
    json_u64(&j, "connections_rejected", sum.c[STAT_connections_rejected]);
    json_u64(&j, "streams_total", sum.c[STAT_streams_total]);
    json_u64(&j, "protocol_errors", sum.c[STAT_protocol_errors]);
    stats_limits(s, &j, &sum);
    json_object_begin(&j, "shm");
    json_u64(&j, "rings", s->shm_rings);
    json_u64(&j, "ring_bytes", s->shm_bytes);
    json_u64(&j, "streams_total", sum.c[STAT_shm_streams_total]);
    json_u64(&j, "fallbacks", sum.c[STAT_shm_fallbacks]);
    json_u64(&j, "rings_kept", sum.c[STAT_shm_rings_kept]);
    json_u64(&j, "releases", sum.c[STAT_shm_releases]);
    json_u64(&j, "release_timeouts", sum.c[STAT_shm_release_timeouts]);
    json_u64(&j, "release_timeout_s", s->d.cfg->release_timeout);
    json_object_end(&j);
    /* The memory tier: keys kept from the first release, then the rest. */
    json_object_begin(&j, "cache");
    json_u64(&j, "memory_budget", cs.budget);
    json_u64(&j, "memory_bytes", cs.bytes);
    json_u64(&j, "entries", cs.entries);
    json_u64(&j, "hits", sum.c[STAT_cache_hits]);
    json_u64(&j, "misses", sum.c[STAT_cache_misses]);
    json_u64(&j, "rejected", cs.rejected);
    json_u64(&j, "not_admitted", cs.not_admitted);
    json_u64(&j, "evictions", cs.evictions);
    json_u64(&j, "index_bytes", cs.index_bytes);
    json_double(&j, "hit_rate", ratio(sum.c[STAT_cache_hits],
                                      sum.c[STAT_cache_hits] + sum.c[STAT_cache_misses]));
    json_object_end(&j);
    stats_memory(s, &j, &cs, &ss);
    stats_disk(s, &j, &ss);
    stats_io(s, &j);
    json_object_begin(&j, "errors");
    json_u64(&j, "read", sum.c[STAT_err_read]);
    json_u64(&j, "decode", sum.c[STAT_err_decode]);
    json_u64(&j, "too_large", sum.c[STAT_err_too_large]);
    json_object_end(&j);
    json_object_begin(&j, "steps");
    for (int k = 0; k < STEP_KIND_MAX; k++) {
        json_object_begin(&j, step_name((enum step_kind)k));
        json_u64(&j, "calls", sum.step_calls[k]);
        json_double(&j, "seconds", (double)sum.step_ns[k] / 1e9);
        json_object_end(&j);
    }
    json_object_end(&j);
    json_array_begin(&j, "datasets");
    for (uint32_t i = 0; i < s->d.ndatasets; i++)
        stats_dataset(s, &j, s->d.datasets[i]);
    json_array_end(&j);
    json_object_end(&j);
    if (j.failed) {
        json_free(&j);
        return NULL;
    }
    return j.buf;
}

static char *server_datasets_json(struct server *s)
{
    struct json j;
    char desc[96];
    json_init(&j);
    json_object_begin(&j, NULL);
    json_array_begin(&j, "datasets");
    for (uint32_t i = 0; i < s->d.ndatasets; i++) {
        const struct dataset *ds = s->d.datasets[i];
        const struct config_dataset *dc = ds->cfg;
        json_object_begin(&j, NULL);
        json_str(&j, "name", dc->name);
        json_str(&j, "root", dc->root);
        json_u64(&j, "samples", ds->nsamples);
        json_u64(&j, "classes", ds->nclasses);
        json_array_begin(&j, "class_names");
        for (uint32_t k = 0; k < ds->nclasses; k++)
            json_str(&j, NULL, ds->classes[k]);
        json_array_end(&j);
        json_array_begin(&j, "steps");
        for (uint32_t k = 0; k < dc->nsteps; k++) {
            step_describe(&dc->steps[k], desc, sizeof(desc));
            json_str(&j, NULL, desc);
        }
        json_array_end(&j);
        json_u64(&j, "split", ds->split);
        profile_dataset_json(ds, &j);
        json_array_begin(&j, "shape");
        json_u64(&j, NULL, ds->out_h);
        json_u64(&j, NULL, ds->out_w);
        json_u64(&j, NULL, ds->out_c);
        json_array_end(&j);
        json_str(&j, "on_error", dc->on_error == CONFIG_ON_ERROR_FAIL ? "fail" : "skip");
        json_u64(&j, "follow_symlinks", dc->follow_symlinks != 0);
        json_u64(&j, "refused", ds->refused);
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
    s->env.base = deps->base;
    s->env.workers = deps->workers;
    s->env.pipe.cache = deps->cache;
    s->env.pipe.store = deps->store;
    s->env.pipe.compactor = deps->compactor;
    s->env.pipe.max_file_size = deps->cfg->max_file_size;
    s->env.stats = loop_stats(s);
    s->env.live_streams = &s->nstreams;
    s->env.buffer_bytes = &s->buffer_bytes;
    s->env.release_timeout = deps->cfg->release_timeout;
    s->env.live_rings = &s->shm_rings;
    s->env.ring_bytes = &s->shm_bytes;
    s->env.readahead = deps->readahead;
    s->wenv.base = deps->base;
    s->wenv.workers = deps->workers;
    s->wenv.pipe = &s->env.pipe;
    struct profile_env penv = {deps->base, deps->workers, &s->d.cfg, &s->env.pipe};
    if (profiler_create(&s->profiler, &penv) < 0) {
        free(s);
        return -ENOMEM;
    }

    int fd = listen_fd;
    if (fd < 0) {
        fd = bind_socket(deps->cfg->socket_path, deps->cfg->socket_mode,
                         deps->cfg->socket_group, err, errlen);
        if (fd < 0) {
            free(s);
            return fd;
        }
        if (!(s->path = strdup(deps->cfg->socket_path))) {
            close(fd);
            free(s);
            return -ENOMEM;
        }
    }
    s->listener = evconnlistener_new(deps->base, server_on_accept, s,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
    if (!s->listener) {
        snprintf(err, errlen, "cannot listen: %s", strerror(errno));
        close(fd);
        free(s->path);
        free(s);
        return -ENOMEM;
    }
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
    s->env.pipe.max_file_size = cfg->max_file_size;
    s->env.release_timeout = cfg->release_timeout;
    /* A larger frame_size must fit in what each connection reads at once. */
    for (struct conn *c = s->conns; c; c = c->next)
        bufferevent_setwatermark(c->bev, EV_READ, 0, PROTO_HEADER_SIZE + cfg->max_frame_size);
}

void server_stop(struct server *s)
{
    profiler_destroy(s->profiler);
    s->profiler = NULL;
    if (s->listener) {
        evconnlistener_free(s->listener);
        s->listener = NULL;
    }
    while (s->conns)
        conn_free(s->conns);
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
    free(s->uids);
    free(s);
}

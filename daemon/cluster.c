/* The cluster tier over memcached: see cluster.h. */
#include "cluster.h"

#include <errno.h>
#include <inttypes.h>
#include <libmemcached/memcached.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "stats.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define CNT(s, stat, v) ADD(&(s)->n[CLUSTER_STAT_##stat], (uint64_t)(v))
/* Our own memory ran out (not the server's: memcached's ENOMEM comes back
 * as MEMCACHED_MEMORY_ALLOCATION_FAILURE): never a libmemcached code. */
#define RC_NOMEM MEMCACHED_MAXIMUM_RETURN

static const struct stats_decl server_decl[] = {CLUSTER_SERVER_STATS(STATS_DECL)};
static const struct stats_decl total_decl[] = {CLUSTER_TOTAL_STATS(STATS_DECL)};

/* ---- configuration ---- */

void cluster_config_init(struct cluster_config *cfg)
{
    *cfg = (struct cluster_config){
        .timeout_ms = CLUSTER_TIMEOUT_MS_DEFAULT,
        .item_max = CLUSTER_ITEM_MAX_DEFAULT,
        .backoff_min_ms = CLUSTER_BACKOFF_MIN_MS,
        .backoff_max_ms = CLUSTER_BACKOFF_MAX_MS,
    };
}

void cluster_config_free(struct cluster_config *cfg)
{
    for (uint32_t i = 0; i < cfg->nservers; i++)
        free(cfg->servers[i]);
    free(cfg->servers);
    cfg->servers = NULL;
    cfg->nservers = 0;
}

int cluster_parse_server(const char *spec, char host[CLUSTER_HOST_MAX], uint16_t *port,
                         char *err, size_t errlen)
{
    const char *colon, *h = spec;
    size_t hlen;
    if (spec[0] == '[') { /* [IPv6]:PORT */
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':') {
            snprintf(err, errlen, "'%s' is not [ADDRESS]:PORT", spec);
            return -EINVAL;
        }
        h = spec + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon || strchr(spec, ':') != colon) {
            snprintf(err, errlen, "'%s' is not HOST:PORT (an IPv6 address goes in brackets)",
                     spec);
            return -EINVAL;
        }
        hlen = (size_t)(colon - spec);
    }
    if (hlen == 0 || hlen >= CLUSTER_HOST_MAX) {
        snprintf(err, errlen, "'%s': the host is empty or longer than %u bytes", spec,
                 CLUSTER_HOST_MAX - 1);
        return -EINVAL;
    }
    for (size_t i = 0; i < hlen; i++)
        if (h[i] <= ' ' || h[i] == 0x7f || h[i] == '/') {
            snprintf(err, errlen, "'%s': the host has a space, '/' or a control character",
                     spec);
            return -EINVAL;
        }
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || errno || p == 0 || p > 65535) {
        snprintf(err, errlen, "'%s': the port is not a number from 1 to 65535", spec);
        return -EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}

/* The scalar keys: name, bounds, where. */
struct cluster_cfg_key {
    const char *name;
    uint64_t min, max;
    size_t off;
    int u64; /* else uint32_t */
};

static const struct cluster_cfg_key cluster_cfg_keys[] = {
    {"timeout_ms", CLUSTER_TIMEOUT_MS_MIN, CLUSTER_TIMEOUT_MS_MAX,
     offsetof(struct cluster_config, timeout_ms), 0},
    {"item_max", CLUSTER_ITEM_MAX_MIN, CLUSTER_ITEM_MAX_MAX,
     offsetof(struct cluster_config, item_max), 1},
};

int cluster_config_set(struct cluster_config *cfg, const char *key, const char *value,
                       char *err, size_t errlen)
{
    if (strcmp(key, "memcached") == 0) {
        char host[CLUSTER_HOST_MAX];
        uint16_t port;
        if (cluster_parse_server(value, host, &port, err, errlen) < 0)
            return -EINVAL;
        if (cfg->nservers >= CLUSTER_MAX_SERVERS) {
            snprintf(err, errlen, "more than %u servers", CLUSTER_MAX_SERVERS);
            return -EINVAL;
        }
        char **s = realloc(cfg->servers, (cfg->nservers + 1) * sizeof(*s));
        if (!s)
            return -ENOMEM;
        cfg->servers = s;
        if (!(s[cfg->nservers] = strdup(value)))
            return -ENOMEM;
        cfg->nservers++;
        return 0;
    }
    for (size_t i = 0; i < sizeof(cluster_cfg_keys) / sizeof(cluster_cfg_keys[0]); i++) {
        const struct cluster_cfg_key *k = &cluster_cfg_keys[i];
        if (strcmp(key, k->name) != 0)
            continue;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (value[0] < '0' || value[0] > '9' || *end || errno || v < k->min || v > k->max) {
            snprintf(err, errlen, "'%s' is not a number from %" PRIu64 " to %" PRIu64, value,
                     k->min, k->max);
            return -EINVAL;
        }
        if (k->u64)
            *(uint64_t *)((char *)cfg + k->off) = v;
        else
            *(uint32_t *)((char *)cfg + k->off) = (uint32_t)v;
        return 0;
    }
    snprintf(err, errlen, "unknown key (cluster.memcached, cluster.timeout_ms and "
             "cluster.item_max are)");
    return -EINVAL;
}

/* ---- servers: state and backoff ---- */

struct cluster_server {
    char *spec;      /* as configured */
    char host[CLUSTER_HOST_MAX];
    uint16_t port;
    pthread_mutex_t lock; /* the state's transitions; a leaf */
    uint64_t down_until;  /* atomic: monotonic ns of the next retry; 0 while up */
    uint32_t backoff_ms;  /* atomic (written under lock): 0 while up */
    uint32_t gen;         /* atomic: grows at every failure (conns reopen) */
    int probing;          /* under lock: a retry is in flight */
    uint64_t n[CLUSTER_STAT_MAX];
};

struct cluster {
    struct cluster_server *srv;
    uint32_t nsrv;
    uint32_t timeout_ms;
    uint64_t item_max;
    uint32_t backoff_min_ms, backoff_max_ms;
    memcached_st *ring; /* every server, ketama: hashing only, read only */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whether a request may go to s now: 1 (with *probe set when it is the
 * retry of a down server), or 0 (down: skip it). */
static int srv_admit(struct cluster_server *s, int *probe)
{
    *probe = 0;
    uint64_t du = LOAD(&s->down_until);
    if (du == 0)
        return 1;
    uint64_t now = now_ns();
    if (now < du)
        return 0;
    pthread_mutex_lock(&s->lock);
    int ok = LOAD(&s->down_until) == 0;
    if (!ok && now >= LOAD(&s->down_until) && !s->probing) {
        s->probing = 1;
        *probe = ok = 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (*probe)
        CNT(s, retries, 1);
    return ok;
}

/* A retry that sent nothing (our memory ran out): another may retry. */
static void srv_unprobe(struct cluster_server *s, int probe)
{
    if (!probe)
        return;
    pthread_mutex_lock(&s->lock);
    s->probing = 0;
    pthread_mutex_unlock(&s->lock);
}

/* A request to s succeeded. */
static void srv_ok(struct cluster_server *s, int probe)
{
    if (!probe)
        return;
    pthread_mutex_lock(&s->lock);
    STORE(&s->down_until, 0);
    STORE(&s->backoff_ms, 0);
    s->probing = 0;
    pthread_mutex_unlock(&s->lock);
    log_info("cluster: memcached %s answers again", s->spec);
}

/* Why a request on mc failed, for the log: libmemcached's word for rc, and
 * the system's error when there is one (libmemcached's own message carries
 * its source file and a pointer). */
static const char *why_failed(memcached_st *mc, memcached_return_t rc, char *buf, size_t len)
{
    int e = mc ? memcached_last_error_errno(mc) : 0;
    if (rc == MEMCACHED_SERVER_TEMPORARILY_DISABLED) /* its connect failed just now */
        snprintf(buf, len, "cannot connect");
    else if (e)
        snprintf(buf, len, "%s: %s", memcached_strerror(mc, rc), strerror(e));
    else
        snprintf(buf, len, "%s", memcached_strerror(mc, rc));
    return buf;
}

/* A request to s failed: s is down for a backoff, which doubles at every
 * failed retry. A request that was in flight when another marked s down
 * only makes the conns reopen. */
static void srv_fail(const struct cluster *cl, struct cluster_server *s, int probe,
                     memcached_return_t rc, const char *why)
{
    if (rc == MEMCACHED_TIMEOUT)
        CNT(s, timeouts, 1);
    else
        CNT(s, errors, 1);
    pthread_mutex_lock(&s->lock);
    ADD(&s->gen, 1);
    int was_up = LOAD(&s->down_until) == 0;
    uint32_t b = LOAD(&s->backoff_ms);
    if (was_up)
        b = cl->backoff_min_ms;
    else if (probe)
        b = b * 2 > cl->backoff_max_ms ? cl->backoff_max_ms : b * 2;
    if (was_up || probe) {
        STORE(&s->backoff_ms, b);
        STORE(&s->down_until, now_ns() + (uint64_t)b * 1000000ull);
    }
    if (probe)
        s->probing = 0;
    pthread_mutex_unlock(&s->lock);
    if (was_up) {
        CNT(s, downs, 1);
        log_warn("cluster: memcached %s failed (%s): its share of the samples misses, "
                 "retried in %u ms", s->spec, why, b);
    } else if (probe) {
        log_debug("cluster: memcached %s still fails (%s): retried in %u ms", s->spec, why, b);
    }
}

/* ---- the cluster ---- */

static memcached_st *mc_new(const struct cluster *cl)
{
    memcached_st *m = memcached_create(NULL);
    if (!m)
        return NULL;
    uint64_t t = cl->timeout_ms;
    if (memcached_behavior_set(m, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1) != MEMCACHED_SUCCESS ||
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1) != MEMCACHED_SUCCESS ||
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, t) != MEMCACHED_SUCCESS ||
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, t) != MEMCACHED_SUCCESS ||
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_SND_TIMEOUT, t * 1000) != MEMCACHED_SUCCESS ||
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, t * 1000) != MEMCACHED_SUCCESS) {
        memcached_free(m);
        return NULL;
    }
    return m;
}

int cluster_create(struct cluster **out, const struct cluster_config *cfg, char *err,
                   size_t errlen)
{
    *out = NULL;
    if (cfg->nservers == 0 || cfg->nservers > CLUSTER_MAX_SERVERS) {
        snprintf(err, errlen, "cluster.memcached: give 1 to %u servers", CLUSTER_MAX_SERVERS);
        return -EINVAL;
    }
    struct cluster *cl = calloc(1, sizeof(*cl));
    if (!cl || !(cl->srv = calloc(cfg->nservers, sizeof(*cl->srv)))) {
        free(cl);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    cl->timeout_ms = cfg->timeout_ms;
    cl->item_max = cfg->item_max;
    cl->backoff_min_ms = cfg->backoff_min_ms ? cfg->backoff_min_ms : 1;
    cl->backoff_max_ms = cfg->backoff_max_ms > cl->backoff_min_ms ? cfg->backoff_max_ms
                                                                  : cl->backoff_min_ms;
    int rc = 0;
    for (uint32_t i = 0; i < cfg->nservers; i++) {
        struct cluster_server *s = &cl->srv[cl->nsrv];
        char why[300];
        if (cluster_parse_server(cfg->servers[i], s->host, &s->port, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "cluster.memcached: %s", why);
            rc = -EINVAL;
            goto fail;
        }
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(cl->srv[j].host, s->host) == 0 && cl->srv[j].port == s->port) {
                snprintf(err, errlen, "cluster.memcached: %s is listed twice", cfg->servers[i]);
                rc = -EINVAL;
                goto fail;
            }
        if (!(s->spec = strdup(cfg->servers[i]))) {
            rc = -ENOMEM;
            goto nomem;
        }
        pthread_mutex_init(&s->lock, NULL);
        cl->nsrv++;
    }
    /* The ring: ketama (consistent hashing, MD5) over the servers in the
     * configured order. Only memcached_generate_hash reads it afterwards,
     * which reads the continuum and nothing else. */
    if (!(cl->ring = mc_new(cl)) ||
        memcached_behavior_set(cl->ring, MEMCACHED_BEHAVIOR_KETAMA, 1) != MEMCACHED_SUCCESS) {
        rc = -ENOMEM;
        goto nomem;
    }
    for (uint32_t i = 0; i < cl->nsrv; i++)
        if (memcached_server_add(cl->ring, cl->srv[i].host, cl->srv[i].port) !=
            MEMCACHED_SUCCESS) {
            snprintf(err, errlen, "cluster.memcached: %s: %s", cl->srv[i].spec,
                     memcached_last_error_message(cl->ring));
            rc = -EINVAL;
            goto fail;
        }
    *out = cl;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    cluster_destroy(cl);
    return rc;
}

void cluster_destroy(struct cluster *cl)
{
    if (!cl)
        return;
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        free(cl->srv[i].spec);
        pthread_mutex_destroy(&cl->srv[i].lock);
    }
    if (cl->ring)
        memcached_free(cl->ring);
    free(cl->srv);
    free(cl);
}

uint32_t cluster_nservers(const struct cluster *cl)
{
    return cl->nsrv;
}

uint64_t cluster_item_max(const struct cluster *cl)
{
    return cl->item_max;
}

void cluster_get_server_stats(struct cluster *cl, uint32_t i, struct cluster_server_stats *st)
{
    struct cluster_server *s = &cl->srv[i];
    st->name = s->spec;
    for (int k = 0; k < CLUSTER_STAT_MAX; k++)
        st->v[k] = LOAD(&s->n[k]);
    st->v[CLUSTER_STAT_up] = LOAD(&s->down_until) == 0;
    st->v[CLUSTER_STAT_backoff_ms] = LOAD(&s->backoff_ms);
}

void cluster_stats(struct cluster *cl, struct stats_out *o)
{
    uint64_t sum[CLUSTER_STAT_MAX] = {0};
    struct cluster_server_stats st;
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        cluster_get_server_stats(cl, i, &st);
        for (int k = 0; k < CLUSTER_STAT_MAX; k++)
            sum[k] += st.v[k];
    }
    struct stats_val t[] = {
        stats_u64(1),
        stats_u64(cl->nsrv),
        stats_u64(sum[CLUSTER_STAT_up]),
        stats_u64(cl->timeout_ms),
        stats_u64(cl->item_max),
        stats_u64(sum[CLUSTER_STAT_lookups]),
        stats_u64(sum[CLUSTER_STAT_hits]),
        stats_u64(sum[CLUSTER_STAT_misses]),
        stats_u64(sum[CLUSTER_STAT_corrupt]),
        stats_u64(sum[CLUSTER_STAT_removed]),
        stats_u64(sum[CLUSTER_STAT_lost]),
        stats_u64(sum[CLUSTER_STAT_skipped]),
        stats_u64(sum[CLUSTER_STAT_errors]),
        stats_u64(sum[CLUSTER_STAT_timeouts]),
        stats_u64(sum[CLUSTER_STAT_bytes_read]),
        stats_u64(sum[CLUSTER_STAT_puts]),
        stats_u64(sum[CLUSTER_STAT_put_exists]),
        stats_u64(sum[CLUSTER_STAT_put_too_large]),
        stats_u64(sum[CLUSTER_STAT_bytes_written]),
        stats_f64(stats_ratio(sum[CLUSTER_STAT_hits], sum[CLUSTER_STAT_lookups])),
    };
    stats_emit(o, total_decl, t, sizeof(t) / sizeof(t[0]));
    stats_list_begin(o, "servers");
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        struct stats_val v[CLUSTER_STAT_MAX];
        cluster_get_server_stats(cl, i, &st);
        v[0] = stats_str(st.name);
        for (int k = 1; k < CLUSTER_STAT_MAX; k++)
            v[k] = stats_u64(st.v[k]);
        stats_begin(o, NULL, "server", "server", st.name);
        stats_emit(o, server_decl, v, CLUSTER_STAT_MAX);
        stats_end(o);
    }
    stats_list_end(o);
}

void cluster_key(const struct store_key *key, char out[CLUSTER_KEY_LEN + 1])
{
    snprintf(out, CLUSTER_KEY_LEN + 1, CLUSTER_KEY_PREFIX "%016" PRIx64 "%016" PRIx64
             "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, key->dataset, key->fingerprint,
             key->path, key->src_size, (uint64_t)key->src_mtime_ns);
}

static uint32_t ring_server(const struct cluster *cl, const char *k)
{
    uint32_t i = memcached_generate_hash(cl->ring, k, CLUSTER_KEY_LEN);
    return i < cl->nsrv ? i : 0;
}

uint32_t cluster_server_of(const struct cluster *cl, const struct store_key *key)
{
    char k[CLUSTER_KEY_LEN + 1];
    cluster_key(key, k);
    return ring_server(cl, k);
}

/* ---- a thread's connections ---- */

/* One lookup of the batch in progress. */
struct pend {
    char key[CLUSTER_KEY_LEN + 1];
    const struct store_key *skey;
    uint32_t srv;
    uint8_t done;  /* answered (hit or corrupt): not asked again */
    uint8_t hit;
    uint8_t bad;   /* corrupt: deleted once the answers are in */
    size_t off, len; /* hit: where its record is in the buffer */
};

struct conn_srv {
    memcached_st *mc; /* NULL until used, and after a failure */
    memcached_result_st res; /* mc's results, when mc is open */
    uint32_t gen;     /* the server's gen when mc was opened */
    int used;         /* a request succeeded on mc */
    uint32_t first, cnt; /* the batch: its lookups, order[first .. first + cnt) */
    int sent, probe;
};

struct cluster_conn {
    struct cluster *cl;
    struct conn_srv *cs;
    struct pend *pend;   /* the batch's lookups */
    uint32_t *order;     /* lookups grouped by server */
    const char **kp;     /* keys of one server's request */
    size_t *kl;
    unsigned cap;        /* of pend, order, kp, kl */
    uint8_t *buf;        /* the batch's records */
    size_t blen, bcap;
};

int cluster_conn_open(struct cluster *cl, struct cluster_conn **out)
{
    struct cluster_conn *c = calloc(1, sizeof(*c));
    if (!c || !(c->cs = calloc(cl->nsrv, sizeof(*c->cs)))) {
        free(c);
        return -ENOMEM;
    }
    c->cl = cl;
    *out = c;
    return 0;
}

static void cs_close(struct conn_srv *cs)
{
    if (cs->mc) {
        memcached_result_free(&cs->res);
        memcached_free(cs->mc);
    }
    cs->mc = NULL;
    cs->used = 0;
}

void cluster_conn_close(struct cluster_conn *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->cl->nsrv; i++)
        cs_close(&c->cs[i]);
    free(c->cs);
    free(c->pend);
    free(c->order);
    free(c->kp);
    free(c->kl);
    free(c->buf);
    free(c);
}

size_t cluster_conn_bytes(const struct cluster_conn *c)
{
    return sizeof(*c) + c->cl->nsrv * sizeof(*c->cs) + c->bcap +
           c->cap * (sizeof(*c->pend) + sizeof(*c->order) + sizeof(*c->kp) + sizeof(*c->kl));
}

/* The conn's handle for server i, (re)opened when there is none or the
 * server failed since it was opened. NULL: out of memory. */
static memcached_st *cs_handle(struct cluster_conn *c, uint32_t i)
{
    struct conn_srv *cs = &c->cs[i];
    struct cluster_server *s = &c->cl->srv[i];
    uint32_t gen = LOAD(&s->gen);
    if (cs->mc && cs->gen != gen)
        cs_close(cs);
    if (!cs->mc) {
        memcached_st *mc = mc_new(c->cl);
        if (!mc)
            return NULL;
        if (memcached_server_add(mc, s->host, s->port) != MEMCACHED_SUCCESS ||
            !memcached_result_create(mc, &cs->res)) {
            memcached_free(mc);
            return NULL;
        }
        cs->mc = mc;
        cs->gen = gen;
    }
    return cs->mc;
}

/* After a failed request on a handle that had worked: the connection may
 * simply be stale (the server restarted since). Reopens it and says
 * whether the request is worth sending once more. */
static int cs_retry(struct conn_srv *cs, memcached_return_t rc)
{
    if (!cs->used || rc == MEMCACHED_TIMEOUT)
        return 0;
    cs_close(cs);
    return 1;
}

static int grow(struct cluster_conn *c, unsigned n)
{
    if (n <= c->cap)
        return 0;
    struct pend *p = realloc(c->pend, n * sizeof(*p));
    if (p)
        c->pend = p;
    uint32_t *o = realloc(c->order, n * sizeof(*o));
    if (o)
        c->order = o;
    const char **kp = realloc(c->kp, n * sizeof(*kp));
    if (kp)
        c->kp = kp;
    size_t *kl = realloc(c->kl, n * sizeof(*kl));
    if (kl)
        c->kl = kl;
    if (!p || !o || !kp || !kl)
        return -ENOMEM;
    c->cap = n;
    return 0;
}

/* Sends server i's multi-get: its lookups not found yet. */
static memcached_return_t srv_send(struct cluster_conn *c, uint32_t i)
{
    struct conn_srv *cs = &c->cs[i];
    size_t nk = 0;
    for (uint32_t k = 0; k < cs->cnt; k++) {
        struct pend *p = &c->pend[c->order[cs->first + k]];
        if (!p->done) {
            c->kp[nk] = p->key;
            c->kl[nk++] = CLUSTER_KEY_LEN;
        }
    }
    if (nk == 0)
        return MEMCACHED_SUCCESS;
    memcached_st *mc = cs_handle(c, i);
    if (!mc)
        return RC_NOMEM;
    return memcached_mget(mc, c->kp, c->kl, nk);
}

/* Keeps a record the server returned for key k (every lookup of it). */
static int take(struct cluster_conn *c, uint32_t i, const char *k, size_t klen,
                const char *val, size_t len, uint32_t flags)
{
    struct conn_srv *cs = &c->cs[i];
    struct cluster_server *s = &c->cl->srv[i];
    int placed = 0, good = -1;
    size_t off = 0;
    if (klen != CLUSTER_KEY_LEN)
        return 0; /* not a key we asked: ignored */
    for (uint32_t j = 0; j < cs->cnt; j++) {
        uint32_t q = c->order[cs->first + j];
        struct pend *p = &c->pend[q];
        if (p->done || memcmp(p->key, k, CLUSTER_KEY_LEN) != 0)
            continue;
        p->done = 1;
        if (good < 0) {
            CNT(s, bytes_read, len);
            good = flags == CLUSTER_ITEM_FLAGS && store_check(p->skey, val, len) == 0;
            p->bad = !good; /* deleted once, whatever the lookups of the key */
        }
        if (!good) {
            CNT(s, corrupt, 1);
            continue;
        }
        if (!placed) {
            if (c->blen + len > c->bcap) {
                size_t cap = c->bcap ? c->bcap : 1u << 20;
                while (cap < c->blen + len)
                    cap *= 2;
                uint8_t *b = realloc(c->buf, cap);
                if (!b)
                    return -ENOMEM;
                c->buf = b;
                c->bcap = cap;
            }
            memcpy(c->buf + c->blen, val, len);
            off = c->blen;
            c->blen += len;
            placed = 1;
        }
        p->hit = 1;
        p->off = off;
        p->len = len;
        CNT(s, hits, 1);
    }
    return 0;
}

/* Reads server i's answers to the multi-get srv_send sent. Returns
 * MEMCACHED_SUCCESS once every answer is in (the server's NOOP), or why
 * the request failed. */
static memcached_return_t srv_fetch(struct cluster_conn *c, uint32_t i)
{
    memcached_st *mc = c->cs[i].mc;
    memcached_result_st *res = &c->cs[i].res;
    memcached_return_t rc;
    memcached_result_st *r;
    while ((r = memcached_fetch_result(mc, res, &rc))) {
        if (take(c, i, memcached_result_key_value(r), memcached_result_key_length(r),
                 memcached_result_value(r), memcached_result_length(r),
                 memcached_result_flags(r)) < 0) {
            /* Out of memory for the buffer: read the rest, keep nothing. */
            while (memcached_fetch_result(mc, res, &rc))
                ;
            return RC_NOMEM;
        }
    }
    /* The end of the answers is END or NOTFOUND; anything else, or an
     * error the server's instance recorded on the way (a timeout when no
     * record came is reported as NOTFOUND), failed the request. */
    if (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND)
        return rc;
    memcached_return_t last = memcached_last_error(mc);
    if (last != MEMCACHED_SUCCESS && last != MEMCACHED_END && last != MEMCACHED_NOTFOUND)
        return last;
    return MEMCACHED_SUCCESS;
}

/* The keys of server i not answered: lost to a failure, or misses. */
static void srv_settle(struct cluster_conn *c, uint32_t i, int lost)
{
    struct conn_srv *cs = &c->cs[i];
    uint64_t n = 0;
    for (uint32_t k = 0; k < cs->cnt; k++)
        n += !c->pend[c->order[cs->first + k]].done;
    if (lost)
        CNT(&c->cl->srv[i], lost, n);
    else
        CNT(&c->cl->srv[i], misses, n);
}

/* Deletes the corrupt records server i returned: put-once (ADD) would
 * otherwise keep a bad item for good, a miss on every node at every
 * lookup. A delete that fails is left alone (the item stays a miss, and
 * is tried again at its next lookup); one racing a node's good put costs
 * that record one more put. */
static void srv_remove_bad(struct cluster_conn *c, uint32_t i)
{
    struct conn_srv *cs = &c->cs[i];
    for (uint32_t k = 0; k < cs->cnt; k++) {
        struct pend *p = &c->pend[c->order[cs->first + k]];
        if (p->bad && memcached_delete(cs->mc, p->key, CLUSTER_KEY_LEN, 0) ==
                          MEMCACHED_SUCCESS)
            CNT(&c->cl->srv[i], removed, 1);
    }
}

/* Server i's request failed: its unanswered keys are lost, and the server
 * is marked down unless it was our memory that ran out. */
static void srv_failed(struct cluster_conn *c, uint32_t i, memcached_return_t rc)
{
    struct conn_srv *cs = &c->cs[i];
    struct cluster_server *s = &c->cl->srv[i];
    if (rc == RC_NOMEM) {
        srv_unprobe(s, cs->probe);
    } else {
        char why[256];
        srv_fail(c->cl, s, cs->probe, rc, why_failed(cs->mc, rc, why, sizeof(why)));
    }
    cs_close(cs);
    srv_settle(c, i, 1);
}

int cluster_get(struct cluster_conn *c, struct cluster_lookup *l, unsigned n)
{
    struct cluster *cl = c->cl;
    for (unsigned k = 0; k < n; k++) {
        l[k].rec = NULL;
        l[k].len = 0;
    }
    if (n == 0)
        return 0;
    if (grow(c, n) < 0)
        return -ENOMEM;
    c->blen = 0;

    /* Keys, servers, and the lookups grouped by server. */
    for (uint32_t i = 0; i < cl->nsrv; i++)
        c->cs[i].cnt = 0;
    for (unsigned k = 0; k < n; k++) {
        struct pend *p = &c->pend[k];
        cluster_key(l[k].key, p->key);
        p->skey = l[k].key;
        p->srv = ring_server(cl, p->key);
        p->done = p->hit = p->bad = 0;
        c->cs[p->srv].cnt++;
    }
    uint32_t first = 0;
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        c->cs[i].first = first;
        first += c->cs[i].cnt;
        c->cs[i].cnt = 0;
    }
    for (unsigned k = 0; k < n; k++) {
        struct conn_srv *cs = &c->cs[c->pend[k].srv];
        c->order[cs->first + cs->cnt++] = k;
    }

    /* Every server's request goes out before any answer is read. */
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        struct conn_srv *cs = &c->cs[i];
        struct cluster_server *s = &cl->srv[i];
        cs->sent = 0;
        if (cs->cnt == 0)
            continue;
        CNT(s, lookups, cs->cnt);
        if (!srv_admit(s, &cs->probe)) {
            CNT(s, skipped, cs->cnt);
            continue;
        }
        memcached_return_t rc = srv_send(c, i);
        if (rc != MEMCACHED_SUCCESS && cs_retry(cs, rc))
            rc = srv_send(c, i);
        if (rc != MEMCACHED_SUCCESS) {
            srv_failed(c, i, rc);
            continue;
        }
        cs->sent = 1;
    }
    for (uint32_t i = 0; i < cl->nsrv; i++) {
        struct conn_srv *cs = &c->cs[i];
        if (!cs->sent)
            continue;
        memcached_return_t rc = srv_fetch(c, i);
        if (rc != MEMCACHED_SUCCESS && rc != RC_NOMEM && cs_retry(cs, rc)) {
            rc = srv_send(c, i);
            if (rc == MEMCACHED_SUCCESS)
                rc = srv_fetch(c, i);
        }
        if (rc != MEMCACHED_SUCCESS) {
            srv_failed(c, i, rc);
            continue;
        }
        cs->used = 1;
        srv_ok(&cl->srv[i], cs->probe);
        srv_settle(c, i, 0);
        srv_remove_bad(c, i);
    }

    int hits = 0;
    for (unsigned k = 0; k < n; k++) {
        struct pend *p = &c->pend[k];
        if (p->hit) {
            l[k].rec = c->buf + p->off;
            l[k].len = p->len;
            hits++;
        }
    }
    return hits;
}

int cluster_put(struct cluster_conn *c, const struct store_key *key, const void *rec,
                size_t len)
{
    struct cluster *cl = c->cl;
    char k[CLUSTER_KEY_LEN + 1];
    cluster_key(key, k);
    uint32_t i = ring_server(cl, k);
    struct cluster_server *s = &cl->srv[i];
    struct conn_srv *cs = &c->cs[i];
    if (len + CLUSTER_ITEM_OVERHEAD > cl->item_max) {
        CNT(s, put_too_large, 1);
        return -EFBIG;
    }
    int probe;
    if (!srv_admit(s, &probe)) {
        CNT(s, put_skipped, 1);
        return -EAGAIN;
    }
    memcached_return_t rc;
    for (int attempt = 0;; attempt++) {
        memcached_st *mc = cs_handle(c, i);
        if (!mc) {
            srv_unprobe(s, probe);
            CNT(s, put_failed, 1);
            return -ENOMEM;
        }
        rc = memcached_add(mc, k, CLUSTER_KEY_LEN, rec, len, 0, CLUSTER_ITEM_FLAGS);
        if (rc == MEMCACHED_SUCCESS || rc == MEMCACHED_NOTSTORED ||
            rc == MEMCACHED_DATA_EXISTS || rc == MEMCACHED_E2BIG ||
            rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE ||
            rc == MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE)
            break;
        if (attempt > 0 || !cs_retry(cs, rc))
            break;
    }
    int ret;
    switch (rc) {
    case MEMCACHED_SUCCESS:
        CNT(s, puts, 1);
        CNT(s, bytes_written, len);
        ret = 0;
        break;
    case MEMCACHED_NOTSTORED:
    case MEMCACHED_DATA_EXISTS:
        CNT(s, put_exists, 1);
        ret = -EEXIST;
        break;
    case MEMCACHED_E2BIG:
        CNT(s, put_too_large, 1);
        ret = -EFBIG;
        break;
    case MEMCACHED_MEMORY_ALLOCATION_FAILURE: /* the binary protocol's ENOMEM */
    case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
        CNT(s, put_full, 1);
        ret = -ENOSPC;
        break;
    default: {
        char why[256];
        CNT(s, put_failed, 1);
        srv_fail(cl, s, probe, rc, why_failed(cs->mc, rc, why, sizeof(why)));
        cs_close(cs);
        return rc == MEMCACHED_TIMEOUT ? -ETIMEDOUT : -EIO;
    }
    }
    cs->used = 1;
    srv_ok(s, probe);
    return ret;
}

/* The cache tiers: see tiers.h. */
#include "tiers.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "io.h"
#include "log.h"
#include "stats.h"
#include "workers.h"

#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

/* Which samples of a dataset the disk tier holds a record of under one
 * strategy (fingerprint), and those records' sizes. */
struct tiers_view {
    uint64_t fingerprint;
    uint32_t n;
    uint8_t *on_disk; /* atomic bytes */
    uint64_t entries, bytes_raw, bytes_stored; /* atomic gauges */
    struct tiers_view *next;
};

/* Per-thread counters of the tiers. */
enum { TIERS_HITS, TIERS_MISSES, TIERS_NCOUNTERS };

/* A dataset's state in the tiers. */
struct tiers_ds {
    struct dataset *ds;
    uint64_t hits, misses;          /* memory lookups of streams (atomic) */
    uint64_t disk_hits, disk_misses, disk_bad, disk_bytes_read, disk_puts, disk_put_errors;
    uint64_t cl_hits, cl_misses, cl_bad, cl_puts;
    struct tiers_view *cur;         /* the view of the strategy in force (atomic) */
    struct tiers_view *views;       /* every view made, newest first (views_lock) */
    pthread_mutex_t views_lock;     /* a leaf */
    int served;                     /* counted in the totals */
};

/* A worker thread's side of the cluster tier: its connections and the
 * buffer it encodes records into. */
struct tiers_cl_local {
    struct cluster_conn *conn; /* opened on first use */
    uint8_t *buf;
    size_t cap;
};

struct tiers {
    struct cache *mem;
    int mem_off;
    struct store *disk; /* NULL: no disk tier */
    char *dir;
    char off_reason[600];
    struct tiers_ds **ds; /* by tiers id; NULL once forgotten */
    uint32_t nds;
    struct dataset **served; /* for compaction (workers paused when it changes) */
    uint32_t nserved;
    struct stats_percpu counters;
    /* Compaction on demand, a job on the worker pool. */
    struct work compact;
    struct workers *workers;
    int compact_busy;        /* atomic: queued or running */
    uint64_t compact_last_ns; /* atomic: when the last run started (0: never) */
    uint64_t compact_runs;    /* atomic */
    /* The cluster tier (NULL: none), and each worker's side of it. */
    struct cluster *cl;
    struct tiers_cl_local *cl_local;
    unsigned threads;
};

/* ---- keys and views ---- */

/* The disk tier's key of sample id of ds (name_hash: its name's) under
 * strategy st as indexed, or, with f, as the source file really was when
 * read. */
static void tiers_key(uint64_t name_hash, const struct dataset *ds, const struct strategy *st,
                      uint32_t id, const struct source_file *f, struct store_key *key)
{
    struct dataset_ident in;
    dataset_ident(ds, id, &in);
    key->dataset = name_hash;
    key->path = in.path_hash;
    key->fingerprint = st->fingerprint;
    key->src_size = f ? f->size : in.size;
    key->src_mtime_ns = f ? f->mtime_ns : in.mtime_ns;
}

static void ctx_key(const struct tiers_ctx *x, uint32_t id, const struct source_file *f,
                    struct store_key *key)
{
    tiers_key(x->name_hash, x->ds, x->st, id, f, key);
}

void tiers_view_free(struct tiers_view *v)
{
    if (v) {
        free(v->on_disk);
        free(v);
    }
}

/* Notes that the disk tier holds sample id under its current key. */
static void view_mark(struct store *st, struct tiers_view *v, uint32_t id,
                      const struct store_key *key)
{
    struct store_loc loc;
    if (__atomic_exchange_n(&v->on_disk[id], 1, __ATOMIC_RELAXED))
        return; /* a record stored again: the old one is dead bytes */
    ADD(&v->entries, 1);
    if (store_lookup(st, key, &loc) == 0) {
        ADD(&v->bytes_raw, loc.raw_len);
        ADD(&v->bytes_stored, loc.stored_len);
        store_release(st, &loc);
    }
}

/* The view of ds under st: which samples have a current record. */
static struct tiers_view *view_scan(struct store *disk, struct dataset *ds,
                                    const struct strategy *st, int *err)
{
    uint32_t n = dataset_size(ds);
    struct tiers_view *v = calloc(1, sizeof(*v));
    *err = 0;
    if (!v || !(v->on_disk = calloc(n ? n : 1, 1))) {
        free(v);
        *err = -ENOMEM;
        return NULL;
    }
    v->fingerprint = st->fingerprint;
    v->n = n;
    for (uint32_t id = 0; id < n; id++) {
        struct store_key key;
        struct store_loc loc;
        tiers_key(dataset_name_hash(ds), ds, st, id, NULL, &key);
        if (store_lookup(disk, &key, &loc) < 0)
            continue;
        v->on_disk[id] = 1;
        v->entries++;
        v->bytes_raw += loc.raw_len;
        v->bytes_stored += loc.stored_len;
        store_release(disk, &loc);
    }
    return v;
}

struct tiers_view *tiers_scan(struct tiers *t, struct dataset *ds, int *err)
{
    *err = 0;
    if (!t->disk)
        return NULL;
    const struct strategy *st = dataset_strategy(ds);
    struct tiers_view *v = st->split > 0 ? view_scan(t->disk, ds, st, err) : NULL;
    strategy_put(st);
    return v;
}

/* The view of d for fingerprint fp, or NULL. */
static struct tiers_view *view_find(struct tiers_ds *d, uint64_t fp)
{
    struct tiers_view *v = __atomic_load_n(&d->cur, __ATOMIC_ACQUIRE);
    if (v && v->fingerprint == fp)
        return v;
    pthread_mutex_lock(&d->views_lock);
    for (v = d->views; v && v->fingerprint != fp; v = v->next)
        ;
    pthread_mutex_unlock(&d->views_lock);
    return v;
}

/* Makes v (may be NULL) d's view in force. */
static void view_publish(struct tiers_ds *d, struct tiers_view *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&d->views_lock);
    v->next = d->views;
    d->views = v;
    pthread_mutex_unlock(&d->views_lock);
    __atomic_store_n(&d->cur, v, __ATOMIC_RELEASE);
}

static void tds_free(struct tiers_ds *d)
{
    if (!d)
        return;
    for (struct tiers_view *v = d->views, *next; v; v = next) {
        next = v->next;
        tiers_view_free(v);
    }
    pthread_mutex_destroy(&d->views_lock);
    free(d);
}

/* A key is live when it is the current key of one of the datasets served:
 * their name, their strategy in force, an indexed path with that size and
 * mtime (store_live_fn). */
static int key_live(const struct store_key *key, void *arg)
{
    const struct tiers *t = arg;
    for (uint32_t i = 0; i < t->nserved; i++) {
        struct dataset *ds = t->served[i];
        const uint32_t *ids;
        if (key->dataset != dataset_name_hash(ds))
            continue;
        const struct strategy *st = dataset_strategy(ds);
        int live = 0;
        if (key->fingerprint == st->fingerprint) {
            uint32_t n = dataset_find_path(ds, key->path, &ids);
            for (uint32_t k = 0; k < n && !live; k++) {
                struct dataset_ident in;
                dataset_ident(ds, ids[k], &in);
                live = in.size == key->src_size && in.mtime_ns == key->src_mtime_ns;
            }
        }
        strategy_put(st);
        if (live)
            return 1;
    }
    return 0;
}

/* ---- compaction on demand ---- */

static void compact_run(struct work *w, struct worker_ctx *ctx)
{
    struct tiers *t = (struct tiers *)((char *)w - offsetof(struct tiers, compact));
    (void)ctx;
    uint64_t t0 = stats_now_ns();
    __atomic_store_n(&t->compact_last_ns, t0, __ATOMIC_RELAXED);
    int rc = store_compact(t->disk, key_live, t);
    ADD(&t->compact_runs, 1);
    if (rc < 0)
        log_warn("disk tier: compaction failed: %s", strerror(-rc));
    else
        log_info("disk tier: over its budget; compaction rewrote %d segments in %.2f s", rc,
                 (double)(stats_now_ns() - t0) / 1e9);
}

static void compact_done(struct work *w, int cancelled)
{
    struct tiers *t = (struct tiers *)((char *)w - offsetof(struct tiers, compact));
    (void)cancelled;
    __atomic_store_n(&t->compact_busy, 0, __ATOMIC_RELEASE);
}

/* Queues a compaction unless one is queued or running, or one started less
 * than TIERS_COMPACT_INTERVAL_S ago. Any thread. */
static void compact_request(struct tiers *t)
{
    int idle = 0;
    uint64_t last = __atomic_load_n(&t->compact_last_ns, __ATOMIC_RELAXED);
    if (!t->workers ||
        (last && stats_now_ns() - last < (uint64_t)TIERS_COMPACT_INTERVAL_S * 1000000000ull))
        return;
    if (__atomic_compare_exchange_n(&t->compact_busy, &idle, 1, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
        workers_submit(t->workers, &t->compact);
}

void tiers_attach(struct tiers *t, struct workers *workers)
{
    if (t->disk)
        t->workers = workers;
}

/* ---- life cycle ---- */

static struct tiers *tiers_new(unsigned threads)
{
    struct tiers *t = calloc(1, sizeof(*t));
    if (!t || stats_percpu_init(&t->counters, threads, TIERS_NCOUNTERS) < 0) {
        free(t);
        return NULL;
    }
    t->compact.run = compact_run;
    t->compact.done = compact_done;
    return t;
}

/* d for ds, with view v (taken), at id nds; 0 or -ENOMEM. */
static int tds_add(struct tiers *t, struct dataset *ds, struct tiers_view *v)
{
    struct tiers_ds **arr = realloc(t->ds, (t->nds + 1) * sizeof(*arr));
    struct tiers_ds *d = calloc(1, sizeof(*d));
    if (arr)
        t->ds = arr;
    if (!arr || !d) {
        free(d);
        tiers_view_free(v);
        return -ENOMEM;
    }
    d->ds = ds;
    d->served = 1;
    pthread_mutex_init(&d->views_lock, NULL);
    view_publish(d, v);
    dataset_set_id(ds, t->nds);
    t->ds[t->nds++] = d;
    return 0;
}

/* What the memory tier needs to know of a dataset. */
static struct cache_dataset cache_ds(struct dataset *ds)
{
    const struct strategy *st = dataset_strategy(ds);
    /* An undecided split: auto dataset learns its entry size later. */
    struct cache_dataset cd = {dataset_size(ds), st->caching ? st->mat_bytes : 0};
    strategy_put(st);
    return cd;
}

/* The memory the kernel could give without swapping (MemAvailable), in
 * bytes: 0, or -errno. */
static int mem_available(uint64_t *bytes)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    unsigned long long kib;
    int rc = -ENOENT;
    if (!f)
        return -errno;
    while (rc < 0 && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *bytes = (uint64_t)kib << 10;
            rc = 0;
        }
    fclose(f);
    return rc;
}

/* Opens the disk tier, drops what is no longer current and learns what it
 * holds of each dataset. One that cannot be opened is logged and left out:
 * the daemon then caches in memory only. Returns 0, or -ENOMEM. */
static int open_disk(struct tiers *t, const struct tiers_config *cfg, struct dataset **ds,
                     uint32_t n)
{
    char err[512];
    if (cfg->disk == 0) {
        snprintf(t->off_reason, sizeof(t->off_reason), "cache.disk is 0");
        return 0;
    }
    int rc = store_open(&t->disk, cfg->dir, cfg->disk, cfg->segment_size, err, sizeof(err));
    if (rc < 0) {
        snprintf(t->off_reason, sizeof(t->off_reason), "%s", err);
        log_error("%s; no disk tier: caching in memory only", err);
        t->disk = NULL;
        return 0;
    }
    uint64_t avail = 0;
    int direct = cfg->direct_io == 1;
    if (cfg->direct_io == 2 && mem_available(&avail) == 0 && cfg->disk > avail)
        direct = 2;
    if (direct) {
        if ((rc = store_direct_io(t->disk)) < 0)
            log_at(direct == 1 ? LOG_LEVEL_WARN : LOG_LEVEL_INFO,
                   "cache.direct_io: %s refuses O_DIRECT (%s); the disk tier is read "
                   "through the page cache", cfg->dir, strerror(-rc));
        else if (direct == 1)
            log_info("cache.direct_io: disk tier records are read with O_DIRECT");
        else
            log_info("cache.direct_io: auto: disk tier records are read with O_DIRECT: "
                     "its budget (%llu MiB) is larger than the memory available (%llu MiB)",
                     (unsigned long long)(cfg->disk >> 20), (unsigned long long)(avail >> 20));
    } else if (cfg->direct_io == 2) {
        log_info("cache.direct_io: auto: disk tier records are read through the page cache: "
                 "its budget (%llu MiB) fits in the memory available (%llu MiB)",
                 (unsigned long long)(cfg->disk >> 20), (unsigned long long)(avail >> 20));
    }
    double t0 = (double)stats_now_ns() / 1e9;
    t->served = ds;
    t->nserved = n;
    rc = store_compact(t->disk, key_live, t);
    if (rc < 0)
        log_warn("disk tier: compaction at start-up failed: %s", strerror(-rc));
    for (uint32_t i = 0; i < n; i++) {
        int err2;
        struct tiers_view *v = tiers_scan(t, ds[i], &err2);
        if (err2 < 0)
            return err2;
        view_publish(t->ds[i], v);
    }
    struct store_stats ss;
    store_get_stats(t->disk, &ss);
    log_info("disk tier: %s, budget %llu MiB: %llu current records (%llu MiB), %llu dead "
             "MiB, %d segments compacted, in %.2f s", cfg->dir,
             (unsigned long long)(cfg->disk >> 20), (unsigned long long)ss.records,
             (unsigned long long)(ss.bytes_live >> 20),
             (unsigned long long)(ss.bytes_dead >> 20), rc < 0 ? 0 : rc,
             (double)stats_now_ns() / 1e9 - t0);
    return 0;
}

/* The cluster tier over cfg->cluster's servers: connects to nothing yet
 * (each worker on its first lookup). 0, -EINVAL (logged) or -ENOMEM. */
static int open_cluster(struct tiers *t, const struct tiers_config *cfg)
{
    char err[512];
    int rc = cluster_create(&t->cl, cfg->cluster, err, sizeof(err));
    if (rc < 0) {
        log_error("cluster.memcached: %s", err);
        return rc;
    }
    t->threads = cfg->threads;
    if (!(t->cl_local = calloc(cfg->threads ? cfg->threads : 1, sizeof(*t->cl_local))))
        return -ENOMEM;
    log_info("cluster tier: %u memcached servers (%s%s), timeout %u ms, records up to %llu "
             "bytes", cfg->cluster->nservers, cfg->cluster->servers[0],
             cfg->cluster->nservers > 1 ? ", ..." : "", cfg->cluster->timeout_ms,
             (unsigned long long)cfg->cluster->item_max);
    return 0;
}

int tiers_create(struct tiers **out, const struct tiers_config *cfg, struct dataset **ds,
                 uint32_t n)
{
    struct tiers *t = tiers_new(cfg->threads);
    struct cache_dataset *cds = calloc(n ? n : 1, sizeof(*cds));
    int rc = t && cds && (t->dir = strdup(cfg->dir ? cfg->dir : "")) ? 0 : -ENOMEM;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        cds[i] = cache_ds(ds[i]);
        rc = tds_add(t, ds[i], NULL);
    }
    if (rc == 0)
        rc = open_disk(t, cfg, ds, n);
    if (rc == 0)
        rc = cache_create(&t->mem, cfg->memory, cds, n);
    if (rc == 0 && cfg->cluster && cfg->cluster->nservers)
        rc = open_cluster(t, cfg);
    free(cds);
    if (rc < 0) {
        tiers_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tiers_create_trial(struct tiers **out, uint64_t memory, const char *dir,
                       uint64_t segment_size, struct dataset *ds, char *err, size_t errlen)
{
    struct tiers *t = tiers_new(0);
    struct cache_dataset cd;
    int rc = t ? 0 : -ENOMEM;
    if (rc == 0)
        rc = tds_add(t, ds, NULL);
    if (rc == 0) {
        cd = cache_ds(ds);
        rc = cache_create(&t->mem, memory, &cd, 1);
    }
    if (rc < 0)
        snprintf(err, errlen, "no memory for a trial memory tier");
    if (rc == 0 && dir) {
        rc = store_open(&t->disk, dir, 0, segment_size, err, errlen);
        if (rc == 0) {
            const struct strategy *st = dataset_strategy(ds);
            int e = 0;
            struct tiers_view *v = st->split > 0 ? view_scan(t->disk, ds, st, &e) : NULL;
            strategy_put(st);
            view_publish(t->ds[0], v);
            if (e < 0) {
                snprintf(err, errlen, "no memory for a trial disk tier");
                rc = e;
            }
        }
    }
    if (rc < 0) {
        tiers_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tiers_destroy(struct tiers *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->nds; i++)
        tds_free(t->ds[i]);
    free(t->ds);
    for (unsigned i = 0; t->cl_local && i < t->threads; i++) {
        cluster_conn_close(t->cl_local[i].conn);
        free(t->cl_local[i].buf);
    }
    free(t->cl_local);
    cluster_destroy(t->cl);
    cache_destroy(t->mem);
    store_close(t->disk);
    stats_percpu_free(&t->counters);
    free(t->dir);
    free(t);
}

/* ---- the datasets served ---- */

int tiers_add_dataset(struct tiers *t, struct dataset *ds, struct tiers_view *view)
{
    struct cache_dataset cd = cache_ds(ds);
    uint32_t id;
    int rc = tds_add(t, ds, view);
    if (rc < 0)
        return rc;
    if ((rc = cache_add_dataset(t->mem, &cd, &id)) < 0) {
        tds_free(t->ds[--t->nds]);
        dataset_set_id(ds, UINT32_MAX);
        return rc;
    }
    return 0; /* ids agree: both grow by one per dataset */
}

void tiers_retire_dataset(struct tiers *t, struct dataset *ds)
{
    uint32_t id = dataset_id(ds);
    if (id >= t->nds || !t->ds[id])
        return;
    cache_retire_dataset(t->mem, id);
    t->ds[id]->served = 0;
}

void tiers_forget(struct tiers *t, struct dataset *ds)
{
    uint32_t id = dataset_id(ds);
    if (t && id < t->nds && t->ds[id] && t->ds[id]->ds == ds) {
        tds_free(t->ds[id]);
        t->ds[id] = NULL;
    }
}

void tiers_set_served(struct tiers *t, struct dataset **ds, uint32_t n)
{
    t->served = ds;
    t->nserved = n;
}

int tiers_strategy_switched(struct tiers *t, struct dataset *ds)
{
    uint32_t id = dataset_id(ds);
    int err;
    if (id >= t->nds || !t->ds[id])
        return 0;
    struct tiers_view *v = tiers_scan(t, ds, &err);
    view_publish(t->ds[id], v);
    return err;
}

void tiers_set_memory_budget(struct tiers *t, uint64_t budget)
{
    cache_set_budget(t->mem, budget);
}

void tiers_drop_memory(struct tiers *t, uint64_t *entries, uint64_t *bytes)
{
    cache_clear(t->mem, entries, bytes);
}

void tiers_memory_off(struct tiers *t, int off)
{
    t->mem_off = off;
}

struct store *tiers_store(struct tiers *t)
{
    return t->disk;
}

int tiers_in_memory(struct tiers *t, struct dataset *ds, const struct strategy *st,
                    uint32_t id)
{
    return cache_get(t->mem, dataset_id(ds), st->fingerprint, id) != NULL;
}

int tiers_on_disk(struct tiers *t, struct dataset *ds, const struct strategy *st,
                  uint32_t id)
{
    struct tiers_ctx x;
    tiers_begin(t, ds, st, 0, &x);
    return x.v && LOAD(&x.v->on_disk[id]);
}

/* ---- a sample's way through the tiers ---- */

void tiers_begin(struct tiers *t, struct dataset *ds, const struct strategy *st,
                 unsigned thread, struct tiers_ctx *x)
{
    uint32_t id = dataset_id(ds);
    x->t = t;
    x->d = id < t->nds ? t->ds[id] : NULL;
    x->v = x->d && t->disk && st->split > 0 ? view_find(x->d, st->fingerprint) : NULL;
    x->ds = ds;
    x->st = st;
    x->thread = thread;
    x->id = id;
    x->name_hash = dataset_name_hash(ds);
}

static int on_disk(const struct tiers_ctx *x, uint32_t id)
{
    return x->v && LOAD(&x->v->on_disk[id]);
}

/* Puts may go to the disk tier: one that is healthy, and knows the strategy. */
static int disk_writable(const struct tiers_ctx *x)
{
    return x->v && !store_degraded(x->t->disk);
}

static const struct cache_entry *mem_get(const struct tiers_ctx *x, uint32_t id)
{
    if (x->t->mem_off || x->st->split == 0)
        return NULL;
    return cache_get(x->t->mem, x->id, x->st->fingerprint, id);
}

int tiers_still_in_memory(const struct tiers_ctx *x, uint32_t id, struct tiers_item *it,
                          struct img *view)
{
    if (!(it->entry = mem_get(x, id)))
        return 0;
    cache_entry_img(it->entry, view);
    return 1;
}

static int mem_admits(const struct tiers_ctx *x, uint32_t id, size_t len)
{
    return !x->t->mem_off && x->st->caching &&
           cache_admits(x->t->mem, x->id, id, len);
}

static size_t direct_align(size_t n)
{
    return (n + STORE_DIRECT_ALIGN - 1) & ~(size_t)(STORE_DIRECT_ALIGN - 1);
}

enum tiers_where tiers_locate(const struct tiers_ctx *x, uint32_t id, int warm,
                              struct tiers_item *it, struct img *view)
{
    it->entry = NULL;
    it->pinned = 0;
    it->loc.seg = NULL;
    it->len = 0;
    it->lead = 0;
    it->rec_len = 0;
    it->rec = NULL;
    it->align = 1;
    /* memory */
    if ((it->entry = mem_get(x, id))) {
        /* A warm-up also stores what memory has and disk has not. */
        if (!warm || on_disk(x, id) || !disk_writable(x)) {
            cache_entry_img(it->entry, view);
            return TIERS_MEMORY;
        }
    }
    /* A warm-up without a disk or cluster tier: only what memory will take. */
    if (warm && !on_disk(x, id) && !disk_writable(x) && !tiers_cluster_on(x) &&
        x->st->mat_bytes &&
        !mem_admits(x, id, x->st->mat_bytes))
        return TIERS_SKIP;
    /* disk */
    if (on_disk(x, id)) {
        struct store_key key;
        ctx_key(x, id, NULL, &key);
        if (store_lookup(x->t->disk, &key, &it->loc) == 0) {
            if (warm && !mem_admits(x, id, it->loc.raw_len)) {
                it->len = it->loc.raw_len;
                store_release(x->t->disk, &it->loc);
                return TIERS_SKIP;
            }
            it->pinned = 1;
            it->rec_len = it->loc.len;
            it->len = it->loc.len;
            /* O_DIRECT: whole aligned blocks around the record, read into
             * an aligned place. */
            if (it->loc.dfd >= 0) {
                it->lead = (uint32_t)(it->loc.off % STORE_DIRECT_ALIGN);
                it->len = direct_align(it->lead + it->loc.len);
                it->align = STORE_DIRECT_ALIGN;
            }
            return TIERS_DISK;
        }
    }
    /* the cluster tier: a chunk's misses together (tiers_cluster_lookup) */
    return TIERS_SOURCE;
}

void tiers_unpin(const struct tiers_ctx *x, struct tiers_item *it)
{
    if (it->pinned) {
        store_release(x->t->disk, &it->loc);
        it->pinned = 0;
    }
}

void tiers_read_req(const struct tiers_item *it, uint8_t *buf, struct io_req *q)
{
    q->buf = buf;
    q->len = it->len;
    q->path = NULL;
    q->direct = it->loc.dfd >= 0;
    if (q->direct) {
        q->fd = it->loc.dfd;
        q->off = it->loc.off - it->lead;
    } else {
        q->fd = it->loc.fd;
        q->off = it->loc.off;
    }
}

/* A disk record of sample id that cannot be used: counted, logged. */
static int decode_bad(const struct tiers_ctx *x, uint32_t id, int rc, int count)
{
    struct tiers_ds *d = x->d;
    if (count)
        ADD(&d->disk_misses, 1);
    ADD(&d->disk_bad, 1);
    log_warn("dataset '%s': disk tier record of %s is unusable (%s); recomputing it",
             dataset_name(x->ds), dataset_path(x->ds, id),
             rc == -EBADMSG ? "corrupt" : strerror(-rc));
    return rc;
}

/* A disk record that passed its checks: counted, admitted. */
static void decode_good(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                        const struct img *decoded, struct img *view, const struct img **out,
                        int count)
{
    struct tiers_ds *d = x->d;
    if (count)
        ADD(&d->disk_hits, 1);
    ADD(&d->disk_bytes_read, it->rec_len);
    *out = tiers_admit(x, id, decoded, view);
}

/* The read's result: 0, or its -errno (-EIO when short). */
static int read_result(const struct tiers_item *it, ssize_t res)
{
    return res < 0 ? (int)res : (size_t)res < it->lead + it->rec_len ? -EIO : 0;
}

int tiers_decode(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                 ssize_t res, const uint8_t *buf, struct img *scratch, struct img *decoded,
                 struct img *view, const struct img **out, int count)
{
    struct store_key key;
    int rc = read_result(it, res);
    ctx_key(x, id, NULL, &key);
    if (rc == 0)
        rc = store_decode_view(x->t->disk, &key, buf + it->lead, it->rec_len, scratch,
                               decoded);
    if (rc < 0)
        return decode_bad(x, id, rc, count);
    decode_good(x, id, it, decoded, view, out, count);
    return 0;
}

int tiers_decode_unchecked(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                           ssize_t res, const uint8_t *buf, struct img *decoded, uint32_t *crc,
                           int count)
{
    struct store_key key;
    int rc = read_result(it, res);
    ctx_key(x, id, NULL, &key);
    if (rc == 0)
        rc = store_view_unchecked(x->t->disk, &key, buf + it->lead, it->rec_len, decoded, crc);
    if (rc == -EAGAIN)
        return rc;
    return rc < 0 ? decode_bad(x, id, rc, count) : 0;
}

int tiers_decode_checked(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                         int good, const struct img *decoded, struct img *view,
                         const struct img **out, int count)
{
    if (!good) {
        store_count_bad(x->t->disk);
        return decode_bad(x, id, -EBADMSG, count);
    }
    decode_good(x, id, it, decoded, view, out, count);
    return 0;
}

void tiers_count(const struct tiers_ctx *x, enum tiers_where where)
{
    int hit = where == TIERS_MEMORY;
    stats_percpu_add(&x->t->counters, x->thread, hit ? TIERS_HITS : TIERS_MISSES, 1);
    ADD(hit ? &x->d->hits : &x->d->misses, 1);
    if ((where == TIERS_SOURCE || where == TIERS_CLUSTER) && x->t->disk && x->st->split > 0)
        ADD(&x->d->disk_misses, 1);
}

const struct img *tiers_admit(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                              struct img *view)
{
    if (x->t->mem_off || !x->st->caching)
        return im;
    const struct cache_entry *e =
        cache_put(x->t->mem, x->id, x->st->fingerprint, id, im);
    if (!e)
        return im;
    cache_entry_img(e, view);
    return view;
}

/* The disk tier's part of tiers_put. */
static void disk_put(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                     const struct source_file *f)
{
    struct store_key key, indexed;
    if (!disk_writable(x))
        return;
    ctx_key(x, id, f, &key);
    int rc = store_put(x->t->disk, &key, im, x->st->zstd_level);
    if (rc == 0) {
        ADD(&x->d->disk_puts, 1);
        ctx_key(x, id, NULL, &indexed);
        if (memcmp(&key, &indexed, sizeof(key)) == 0)
            view_mark(x->t->disk, x->v, id, &key);
        return;
    }
    ADD(&x->d->disk_put_errors, 1);
    if (rc == -ENOSPC && !store_degraded(x->t->disk))
        compact_request(x->t); /* over the disk budget */
}

/* ---- the cluster tier ---- */

/* The calling worker's side of the cluster tier, its connections opened;
 * NULL without a cluster tier, off a worker, or without memory. */
static struct tiers_cl_local *cl_local(const struct tiers_ctx *x)
{
    struct tiers *t = x->t;
    if (!t->cl || x->thread >= t->threads)
        return NULL;
    struct tiers_cl_local *L = &t->cl_local[x->thread];
    if (!L->conn && cluster_conn_open(t->cl, &L->conn) < 0)
        return NULL;
    return L;
}

int tiers_cluster_on(const struct tiers_ctx *x)
{
    return x->t->cl && x->d && x->st->split > 0 && x->st->caching;
}

unsigned tiers_cluster_lookup(const struct tiers_ctx *x, const uint32_t *ids,
                              struct tiers_item *const *its, unsigned n)
{
    struct cluster_lookup l[TIERS_CLUSTER_BATCH];
    struct store_key keys[TIERS_CLUSTER_BATCH];
    struct tiers_cl_local *L;
    unsigned hits = 0;
    if (n > TIERS_CLUSTER_BATCH)
        n = TIERS_CLUSTER_BATCH; /* the rest: misses */
    if (n == 0 || !tiers_cluster_on(x) || !(L = cl_local(x)))
        return 0;
    for (unsigned k = 0; k < n; k++) {
        ctx_key(x, ids[k], NULL, &keys[k]);
        l[k] = (struct cluster_lookup){.key = &keys[k]};
    }
    int rc = cluster_get(L->conn, l, n);
    for (unsigned k = 0; k < n; k++) {
        struct tiers_item *it = its[k];
        it->rec = rc > 0 ? l[k].rec : NULL;
        if (it->rec) {
            it->rec_len = l[k].len;
            hits++;
        }
    }
    ADD(&x->d->cl_hits, hits);
    ADD(&x->d->cl_misses, n - hits);
    return hits;
}

int tiers_cluster_decode(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                         const uint8_t *buf, struct img *scratch, struct img *decoded,
                         struct img *view, const struct img **out)
{
    struct store_key key;
    ctx_key(x, id, NULL, &key);
    int rc = store_decode_view(NULL, &key, buf, it->rec_len, scratch, decoded);
    if (rc < 0) {
        ADD(&x->d->cl_bad, 1);
        log_warn("dataset '%s': cluster tier record of %s is unusable (%s); computing it",
                 dataset_name(x->ds), dataset_path(x->ds, id),
                 rc == -EBADMSG ? "corrupt" : strerror(-rc));
        return rc;
    }
    disk_put(x, id, decoded, NULL);
    *out = tiers_admit(x, id, decoded, view);
    return 0;
}

/* The cluster tier's part of tiers_put: the record, put-once. */
static void cluster_put_img(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                            const struct source_file *f)
{
    struct tiers_cl_local *L;
    struct store_key key, indexed;
    if (!tiers_cluster_on(x) || !(L = cl_local(x)))
        return;
    /* A file changed since indexing: no node would look its record up. */
    ctx_key(x, id, f, &key);
    ctx_key(x, id, NULL, &indexed);
    if (memcmp(&key, &indexed, sizeof(key)) != 0)
        return;
    ssize_t len = store_encode(x->t->disk, &key, im, x->st->zstd_level, &L->buf, &L->cap);
    if (len < 0)
        return;
    ADD(&x->d->cl_puts, 1);
    cluster_put(L->conn, &key, L->buf, (size_t)len); /* every outcome counted there */
}

const struct img *tiers_put(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                            const struct source_file *f, struct img *view)
{
    if (!x->st->caching)
        return im;
    disk_put(x, id, im, f);
    cluster_put_img(x, id, im, f);
    return tiers_admit(x, id, im, view);
}

int tiers_refuses(const struct tiers_ctx *x, uint32_t id)
{
    if (!x->st->caching || disk_writable(x) || tiers_cluster_on(x))
        return 0;
    size_t len = x->st->mat_bytes;
    if (!len && !x->t->mem_off) {
        struct cache_dataset_stats cd;
        cache_get_dataset_stats(x->t->mem, x->id, &cd);
        len = cd.entry_bytes; /* 0 until the first entry: a put learns it */
    }
    return !mem_admits(x, id, len);
}

/* ---- stats ---- */

static const struct stats_decl memory_decl[] = {TIERS_MEMORY_STATS(STATS_DECL)};
static const struct stats_decl disk_decl[] = {TIERS_DISK_STATS(STATS_DECL)};
static const struct stats_decl ds_decl[] = {TIERS_DATASET_STATS(STATS_DECL)};
static const struct stats_decl ds_memory_decl[] = {TIERS_DATASET_MEMORY_STATS(STATS_DECL)};
static const struct stats_decl ds_disk_decl[] = {TIERS_DATASET_DISK_STATS(STATS_DECL)};
static const struct stats_decl ds_cluster_decl[] = {TIERS_DATASET_CLUSTER_STATS(STATS_DECL)};

#define NDECL(d) (sizeof(d) / sizeof((d)[0]))

void tiers_stats(struct tiers *t, struct stats_out *o)
{
    uint64_t c[TIERS_NCOUNTERS], dhits = 0, dmisses = 0, dread = 0;
    struct cache_stats cs;
    cache_get_stats(t->mem, &cs);
    stats_percpu_sum(&t->counters, c);
    struct stats_val m[] = {
        stats_u64(cs.budget),
        stats_u64(cs.bytes),
        stats_u64(cs.entries),
        stats_u64(c[TIERS_HITS]),
        stats_u64(c[TIERS_MISSES]),
        stats_u64(cs.rejected),
        stats_u64(cs.not_admitted),
        stats_u64(cs.evictions),
        stats_u64(cs.index_bytes),
        stats_f64(stats_ratio(c[TIERS_HITS], c[TIERS_HITS] + c[TIERS_MISSES])),
    };
    stats_begin(o, "cache", "tier", "tier", "memory");
    stats_emit(o, memory_decl, m, NDECL(m));
    stats_end(o);

    /* The disk tier's lookups: the sums over the datasets served. */
    for (uint32_t i = 0; i < t->nds; i++) {
        const struct tiers_ds *d = t->ds[i];
        if (!d || !d->served)
            continue;
        dhits += LOAD(&d->disk_hits);
        dmisses += LOAD(&d->disk_misses);
        dread += LOAD(&d->disk_bytes_read);
    }
    struct stats_val v[] = {
        stats_u64(t->disk != NULL),
        stats_str(t->disk ? t->dir : ""),
        stats_str(t->disk ? "" : t->off_reason),
        stats_u64(dhits),
        stats_u64(dmisses),
        stats_f64(stats_ratio(dhits, dhits + dmisses)),
        stats_u64(dread),
        stats_u64(LOAD(&t->compact_runs)),
    };
    stats_begin(o, "disk", "tier", "tier", "disk");
    stats_emit(o, disk_decl, v, NDECL(v));
    store_stats_emit(t->disk, o);
    stats_end(o);
    if (t->cl) {
        stats_begin(o, "cluster", NULL, NULL, NULL);
        cluster_stats(t->cl, o);
        stats_end(o);
    }
}

void tiers_dataset_stats(struct tiers *t, struct dataset *ds, struct stats_out *o)
{
    uint32_t id = dataset_id(ds);
    const struct tiers_ds *d = id < t->nds ? t->ds[id] : NULL;
    struct tiers_ds none;
    struct cache_dataset_stats cd;
    char enc[16];
    if (!d) {
        memset(&none, 0, sizeof(none));
        d = &none;
    }
    cache_get_dataset_stats(t->mem, id, &cd);
    const struct strategy *st = dataset_strategy(ds);
    uint64_t entries = 0, raw = 0, stored = 0;
    const struct tiers_view *v = d != &none ? __atomic_load_n(&d->cur, __ATOMIC_ACQUIRE) : NULL;
    if (v && v->fingerprint == st->fingerprint) {
        entries = LOAD(&v->entries);
        raw = LOAD(&v->bytes_raw);
        stored = LOAD(&v->bytes_stored);
    }
    if (st->zstd_level)
        snprintf(enc, sizeof(enc), "zstd:%d", st->zstd_level);
    else
        snprintf(enc, sizeof(enc), "raw");
    strategy_put(st);
    uint64_t hits = LOAD(&d->hits), misses = LOAD(&d->misses);
    uint64_t dhits = LOAD(&d->disk_hits), dmisses = LOAD(&d->disk_misses);

    struct stats_val l[] = {stats_u64(hits), stats_u64(misses),
                            stats_f64(stats_ratio(hits, hits + misses))};
    stats_emit(o, ds_decl, l, NDECL(l));
    struct stats_val m[] = {
        stats_u64(cd.entries),
        stats_u64(cd.bytes),
        stats_u64(hits),
        stats_u64(misses),
        stats_f64(stats_ratio(hits, hits + misses)),
        stats_f64(cd.fraction),
        stats_u64(cd.not_admitted),
        stats_u64(cd.rejected),
    };
    stats_begin(o, "memory", "tier", "tier", "memory");
    stats_emit(o, ds_memory_decl, m, NDECL(m));
    stats_end(o);
    struct stats_val k[] = {
        stats_str(enc),
        stats_u64(t->disk && store_degraded(t->disk) != 0),
        stats_u64(entries),
        stats_u64(raw),
        stats_u64(stored),
        stats_f64(stats_ratio(raw, stored)),
        stats_u64(dhits),
        stats_u64(dmisses),
        stats_f64(stats_ratio(dhits, dhits + dmisses)),
        stats_u64(LOAD(&d->disk_bytes_read)),
        stats_u64(LOAD(&d->disk_bad)),
        stats_u64(LOAD(&d->disk_puts)),
        stats_u64(LOAD(&d->disk_put_errors)),
    };
    stats_begin(o, "disk", "tier", "tier", "disk");
    stats_emit(o, ds_disk_decl, k, NDECL(k));
    stats_end(o);
    if (t->cl) {
        uint64_t ch = LOAD(&d->cl_hits), cm = LOAD(&d->cl_misses);
        struct stats_val c[] = {stats_u64(ch), stats_u64(cm), stats_f64(stats_ratio(ch, ch + cm)),
                                stats_u64(LOAD(&d->cl_bad)), stats_u64(LOAD(&d->cl_puts))};
        stats_begin(o, "cluster", "tier", "tier", "cluster");
        stats_emit(o, ds_cluster_decl, c, NDECL(c));
        stats_end(o);
    }
}

void tiers_memory_use(struct tiers *t, struct tiers_memory *out)
{
    struct cache_stats cs;
    struct store_stats ss;
    cache_get_stats(t->mem, &cs);
    out->budget = cs.budget;
    out->bytes = cs.bytes;
    out->index_bytes = cs.index_bytes;
    out->store_index = 0;
    if (t->disk) {
        store_get_stats(t->disk, &ss);
        out->store_index = ss.index_bytes;
    }
}

/* The configuration in force and its reload: see reload.h. */
#include "reload.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "profile.h"
#include "stats.h"

/* A dataset served: the dataset and its own copy of its declaration (the
 * config it came from is replaced by the next reload). */
struct served {
    struct dataset *ds;
    struct config_dataset cfg;
    struct tiers_view *view;    /* a new one's disk view, until the tiers take it */
    struct reload *r;
    struct served *prev, *next; /* on r->retired once out of service */
};

struct waiter {
    reload_done_fn done;
    void *arg;
    struct waiter *next;
};

/* One reload's work: run() on a worker, done() back on the loop. */
struct reload_job {
    struct work work;
    struct reload *r;
    struct config cfg;       /* the new configuration */
    struct dataset **table;  /* cfg.ndatasets: kept ones and new ones */
    struct served **sv;      /* ... and what serves them */
    uint8_t *fresh;          /* table[i] is new (indexed by this job) */
    int rc;
    char err[1024];
};

struct reload {
    struct reload_env env;
    int attached;
    struct config cfg;
    struct dataset **table;
    struct served **sv;       /* sv[i] serves table[i] */
    uint32_t n;
    struct served *retired;   /* out of service, still used by streams */
    uint64_t reloads, failures; /* applied, refused (event loop) */
    struct reload_job *job;   /* running, or NULL */
    struct waiter *running;   /* told when the running job ends */
    struct waiter *next;      /* for the run after it */
    int again;                /* a request came while one ran */
    int stopping;
};

static void served_free(struct served *sv)
{
    if (sv->r && sv->r->attached)
        tiers_forget(sv->r->env.tiers, sv->ds);
    tiers_view_free(sv->view);
    dataset_free(sv->ds);
    config_dataset_free(&sv->cfg);
    free(sv);
}

/* Indexes a dataset declared as d; for a reload (cfg: the new config, tiers
 * the daemon's) also takes its recorded split: auto choice and scans the
 * disk tier for it, as start-up does in main. Returns it, or NULL with err
 * set. */
static struct served *served_open(struct reload *r, const struct config_dataset *d,
                                  const struct config *cfg, struct tiers *tiers, char *err,
                                  size_t errlen)
{
    struct served *sv = calloc(1, sizeof(*sv));
    int rc = 0;
    if (!sv || config_dataset_copy(&sv->cfg, d) < 0) {
        snprintf(err, errlen, "dataset '%s': out of memory", d->name);
        if (sv)
            config_dataset_free(&sv->cfg);
        free(sv);
        return NULL;
    }
    if (dataset_open(&sv->ds, &sv->cfg, err, errlen) < 0) {
        config_dataset_free(&sv->cfg);
        free(sv);
        return NULL;
    }
    if (cfg)
        rc = profile_restore(sv->ds, cfg);
    if (rc == 0 && tiers)
        sv->view = tiers_scan(tiers, sv->ds, &rc);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': out of memory", d->name);
        served_free(sv);
        return NULL;
    }
    sv->r = r;
    return sv;
}

int reload_create(struct reload **out, struct config *cfg, char *err, size_t errlen)
{
    struct reload *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    r->table = calloc(r->cfg.ndatasets ? r->cfg.ndatasets : 1, sizeof(*r->table));
    r->sv = calloc(r->cfg.ndatasets ? r->cfg.ndatasets : 1, sizeof(*r->sv));
    if (!r->table || !r->sv) {
        reload_destroy(r);
        return -ENOMEM;
    }
    for (; r->n < r->cfg.ndatasets; r->n++) {
        struct served *sv = served_open(r, &r->cfg.datasets[r->n], NULL, NULL, err, errlen);
        if (!sv) {
            reload_destroy(r);
            return -EINVAL;
        }
        r->sv[r->n] = sv;
        r->table[r->n] = sv->ds;
    }
    *out = r;
    return 0;
}

void reload_attach(struct reload *r, const struct reload_env *env)
{
    r->env = *env;
    r->attached = 1;
}

static void waiters_free(struct waiter *w)
{
    while (w) {
        struct waiter *next = w->next;
        free(w);
        w = next;
    }
}

static void job_free(struct reload_job *j)
{
    for (uint32_t i = 0; j->sv && i < j->cfg.ndatasets; i++)
        if (j->fresh[i] && j->sv[i])
            served_free(j->sv[i]);
    free(j->table);
    free(j->sv);
    free(j->fresh);
    config_free(&j->cfg);
    free(j);
}

void reload_stop(struct reload *r)
{
    if (r)
        r->stopping = 1;
}

void reload_destroy(struct reload *r)
{
    if (!r)
        return;
    if (r->job) /* its done() never came: the pool is gone */
        r->job->r = NULL;
    for (uint32_t i = 0; r->sv && i < r->n; i++)
        served_free(r->sv[i]);
    while (r->retired) {
        struct served *sv = r->retired;
        r->retired = sv->next;
        log_warn("dataset '%s' (taken out of service by a reload) still had %u users "
                 "at shutdown", sv->cfg.name, dataset_users(sv->ds));
        served_free(sv);
    }
    free(r->table);
    free(r->sv);
    waiters_free(r->running);
    waiters_free(r->next);
    config_free(&r->cfg);
    free(r);
}

const struct config *reload_config(const struct reload *r)
{
    return &r->cfg;
}

struct dataset **reload_datasets(const struct reload *r, uint32_t *n)
{
    *n = r->n;
    return r->table;
}

/* ---- the job, on a worker thread ---- */

/* The served dataset declared exactly as d, or NULL. The table is only
 * changed by the event loop when no job runs, so reading it here is safe. */
static struct served *find_same(const struct reload *r, const struct config_dataset *d)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (config_dataset_same(&r->sv[i]->cfg, d))
            return r->sv[i];
    return NULL;
}

static void job_run(struct work *w, struct worker_ctx *ctx)
{
    struct reload_job *j = (struct reload_job *)w;
    struct reload *r = j->r;
    (void)ctx;
    j->rc = r->env.load(&j->cfg, r->env.load_arg, j->err, sizeof(j->err));
    if (j->rc < 0) { /* whatever the reason (no file, a bad key): it does not load */
        if (j->rc != -ENOMEM)
            j->rc = -EINVAL;
        return;
    }
    uint32_t n = j->cfg.ndatasets;
    j->table = calloc(n ? n : 1, sizeof(*j->table));
    j->sv = calloc(n ? n : 1, sizeof(*j->sv));
    j->fresh = calloc(n ? n : 1, 1);
    if (!j->table || !j->sv || !j->fresh) {
        j->rc = -ENOMEM;
        snprintf(j->err, sizeof(j->err), "out of memory");
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        const struct config_dataset *d = &j->cfg.datasets[i];
        if ((j->sv[i] = find_same(r, d))) {
            j->table[i] = j->sv[i]->ds;
            continue;
        }
        struct served *sv = served_open(r, d, &j->cfg, r->env.tiers, j->err, sizeof(j->err));
        if (!sv) {
            j->rc = -EINVAL;
            return;
        }
        j->sv[i] = sv;
        j->table[i] = sv->ds;
        j->fresh[i] = 1;
    }
}

/* ---- back on the event loop ---- */

static void tell(struct waiter *w, int rc, const char *text)
{
    while (w) {
        struct waiter *next = w->next;
        if (w->done)
            w->done(w->arg, rc, text);
        free(w);
        w = next;
    }
}

static int in_table(struct dataset **table, uint32_t n, const struct dataset *ds)
{
    for (uint32_t i = 0; i < n; i++)
        if (table[i] == ds)
            return 1;
    return 0;
}

/* A retired dataset's last stream or warm ended. */
static void served_released(void *arg)
{
    struct served *sv = arg;
    struct reload *r = sv->r;
    if (sv->prev)
        sv->prev->next = sv->next;
    else
        r->retired = sv->next;
    if (sv->next)
        sv->next->prev = sv->prev;
    log_info("dataset '%s': its last stream ended; freed", sv->cfg.name);
    served_free(sv);
}

struct report {
    struct json *j;
    int restart; /* pass: 0 the live keys, 1 those needing a restart */
};

static void report_key(void *arg, const char *key, const char *was, const char *now, int live)
{
    struct report *rep = arg;
    (void)was;
    (void)now;
    if (live != rep->restart)
        json_str(rep->j, NULL, key);
}

static void log_key(void *arg, const char *key, const char *was, const char *now, int live)
{
    (void)arg;
    if (live)
        log_info("reload: %s: %s -> %s", key, was, now);
    else
        log_warn("reload: %s: %s -> %s needs a restart; %s stays in force until then", key,
                 was, now, was);
}

/* Swaps the new configuration in (the workers paused), and returns the
 * JSON report, or NULL without memory (then nothing changed). */
static char *apply(struct reload *r, struct reload_job *j)
{
    struct config *nc = &j->cfg;
    uint32_t n = nc->ndatasets, added = 0, nfresh = 0;
    struct json js;
    struct report rep = {&js, 0};

    json_init(&js);
    json_object_begin(&js, NULL);
    json_str(&js, "config", nc->path ? nc->path : "");
    json_u64(&js, "datasets", n);
    json_array_begin(&js, "changed");
    config_diff(&r->cfg, nc, report_key, &rep);
    json_array_end(&js);
    rep.restart = 1;
    json_array_begin(&js, "restart_needed");
    config_diff(&r->cfg, nc, report_key, &rep);
    json_array_end(&js);
    config_diff(&r->cfg, nc, log_key, NULL);
    json_array_begin(&js, "added");
    for (uint32_t i = 0; i < n; i++)
        if (j->fresh[i] && !config_find_dataset(&r->cfg, j->sv[i]->cfg.name))
            json_str(&js, NULL, j->sv[i]->cfg.name);
    json_array_end(&js);
    json_array_begin(&js, "replaced");
    for (uint32_t i = 0; i < n; i++)
        if (j->fresh[i] && config_find_dataset(&r->cfg, j->sv[i]->cfg.name))
            json_str(&js, NULL, j->sv[i]->cfg.name);
    json_array_end(&js);
    json_array_begin(&js, "removed");
    for (uint32_t i = 0; i < r->n; i++)
        if (!config_find_dataset(nc, r->sv[i]->cfg.name))
            json_str(&js, NULL, r->sv[i]->cfg.name);
    json_array_end(&js);
    json_object_end(&js);
    if (js.failed || config_keep_restart_keys(nc, &r->cfg) < 0) {
        json_free(&js);
        return NULL;
    }

    for (uint32_t i = 0; i < n; i++)
        nfresh += j->fresh[i];
    workers_pause(r->env.workers);
    for (uint32_t i = 0; i < n; i++) {
        if (!j->fresh[i])
            continue;
        struct tiers_view *view = j->sv[i]->view;
        j->sv[i]->view = NULL; /* the tiers' now, added or not */
        if (tiers_add_dataset(r->env.tiers, j->table[i], view) < 0)
            break;
        added++;
    }
    if (added < nfresh) { /* no memory: take back what was added */
        for (uint32_t i = 0; i < n; i++)
            if (j->fresh[i] && dataset_id(j->table[i]) != UINT32_MAX)
                tiers_retire_dataset(r->env.tiers, j->table[i]);
        workers_resume(r->env.workers);
        json_free(&js);
        return NULL;
    }
    for (uint32_t i = 0; i < r->n; i++)
        if (!in_table(j->table, n, r->table[i]))
            tiers_retire_dataset(r->env.tiers, r->table[i]);
    if (nc->cache_memory != r->cfg.cache_memory)
        tiers_set_memory_budget(r->env.tiers, nc->cache_memory);
    tiers_set_served(r->env.tiers, j->table, n);
    /* The new config and table take the place of the old ones: r->cfg
     * stays where the server (and the profiler) point. */
    struct dataset **old = r->table;
    struct served **old_sv = r->sv;
    uint32_t nold = r->n;
    r->table = j->table;
    r->sv = j->sv;
    r->n = n;
    j->table = NULL;
    j->sv = NULL;
    config_free(&r->cfg);
    r->cfg = *nc;
    memset(nc, 0, sizeof(*nc));
    if (r->env.apply)
        r->env.apply(r->env.apply_arg, &r->cfg, r->table, r->n);
    log_set_level((enum log_level)r->cfg.log_level);
    workers_resume(r->env.workers);

    /* Out of service: freed now, or when the last stream using it ends. */
    for (uint32_t i = 0; i < nold; i++) {
        struct dataset *ds = old[i];
        struct served *sv = old_sv[i];
        if (in_table(r->table, r->n, ds))
            continue;
        if (dataset_users(ds) == 0) {
            served_free(sv);
            continue;
        }
        log_info("dataset '%s': out of service; %u streams or warms still use it",
                 sv->cfg.name, dataset_users(ds));
        dataset_on_released(ds, served_released, sv);
        sv->prev = NULL;
        sv->next = r->retired;
        if (r->retired)
            r->retired->prev = sv;
        r->retired = sv;
    }
    free(old);
    free(old_sv);
    return js.buf;
}

static int reload_start(struct reload *r);

static void job_done(struct work *w, int cancelled)
{
    struct reload_job *j = (struct reload_job *)w;
    struct reload *r = j->r;
    char *report = NULL;

    if (!r) { /* the daemon stopped meanwhile */
        job_free(j);
        return;
    }
    r->job = NULL;
    if ((cancelled || r->stopping) && j->rc == 0) {
        j->rc = -ECANCELED;
        snprintf(j->err, sizeof(j->err), "the daemon is stopping");
    }
    if (j->rc == 0 && !(report = apply(r, j))) {
        j->rc = -ENOMEM;
        snprintf(j->err, sizeof(j->err), "out of memory");
    }
    if (j->rc < 0)
        r->failures++;
    else
        r->reloads++;
    if (j->rc < 0) {
        log_error("reload of %s failed: %s; the running configuration stays",
                  r->cfg.path ? r->cfg.path : "the command line", j->err);
        tell(r->running, j->rc, j->err);
    } else {
        log_info("reload of %s: %u datasets served", r->cfg.path ? r->cfg.path : "(no file)",
                 r->n);
        tell(r->running, 0, report);
    }
    r->running = NULL;
    free(report);
    job_free(j);
    if (r->again && !r->stopping)
        reload_start(r);
}

static int reload_start(struct reload *r)
{
    struct reload_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -ENOMEM;
    j->work.run = job_run;
    j->work.done = job_done;
    j->work.unpaused = 1; /* indexes only datasets nobody else sees yet */
    j->r = r;
    r->job = j;
    r->running = r->next;
    r->next = NULL;
    r->again = 0;
    log_info("reloading %s", r->cfg.path ? r->cfg.path : "(no config file: command line only)");
    workers_submit(r->env.workers, &j->work);
    return 0;
}

int reload_request(struct reload *r, reload_done_fn done, void *arg)
{
    struct waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->done = done;
    w->arg = arg;
    w->next = r->next;
    r->next = w;
    if (!r->attached || r->stopping)
        return 0;
    if (r->job) {
        r->again = 1;
        return 0;
    }
    int rc = reload_start(r);
    if (rc < 0) {
        r->next = w->next;
        free(w);
    }
    return rc;
}

void reload_cancel(struct reload *r, void *arg)
{
    struct waiter **lists[2] = {&r->running, &r->next};
    for (int k = 0; k < 2; k++) {
        for (struct waiter **p = lists[k]; *p;) {
            if ((*p)->arg == arg) {
                struct waiter *w = *p;
                *p = w->next;
                free(w);
            } else {
                p = &(*p)->next;
            }
        }
    }
}

static const struct stats_decl reload_decl[] = {RELOAD_STATS(STATS_DECL)};

void reload_stats(const struct reload *r, struct stats_out *o)
{
    uint64_t v[2] = {r ? r->reloads : 0, r ? r->failures : 0};
    stats_emit_u64(o, reload_decl, v, 2);
}

/* The strategy profiler and split: auto: see profile.h. */
#include "profile.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "cachedir.h"
#include "frame.h"
#include "json.h"
#include "log.h"
#include "stats.h"
#include "store.h"

#define TRIAL_PREFIX "profile-trial-"
#define RECORD_VERSION 1

/* ---- strategies, samples, ranking ---- */

static void level_name(int level, char *buf, size_t len)
{
    if (level)
        snprintf(buf, len, "zstd:%d", level);
    else
        snprintf(buf, len, "raw");
}

uint32_t profile_strategies(const struct step *steps, uint32_t nsteps,
                            struct proto_profile_strategy *out, uint32_t cap)
{
    static const int levels[PROFILE_NLEVELS] = PROFILE_LEVELS;
    char err[256], enc[16];
    uint32_t n = 0;
    if (cap == 0)
        return 0;
    memset(&out[n], 0, sizeof(out[n]));
    snprintf(out[n].name, sizeof(out[n].name), "none");
    n++;
    for (uint32_t s = 1; s <= nsteps; s++) {
        if (step_split_check(steps, nsteps, s, err, sizeof(err)) < 0)
            continue;
        const char *last = step_name(steps[s - 1].kind);
        int dup = 0;
        for (uint32_t i = 0; i < nsteps; i++)
            dup += steps[i].kind == steps[s - 1].kind;
        for (int l = 0; l < PROFILE_NLEVELS && n < cap; l++) {
            struct proto_profile_strategy *st = &out[n++];
            memset(st, 0, sizeof(*st));
            st->split = s;
            st->zstd_level = levels[l];
            snprintf(st->last_step, sizeof(st->last_step), "%s", last);
            level_name(levels[l], enc, sizeof(enc));
            if (dup > 1)
                snprintf(st->name, sizeof(st->name), "%s@%u/%s", last, s, enc);
            else
                snprintf(st->name, sizeof(st->name), "%s/%s", last, enc);
        }
    }
    return n;
}

uint32_t profile_sample_size(uint32_t n, uint32_t requested, uint32_t configured)
{
    uint64_t k = requested ? requested : configured;
    if (!k) {
        k = ((uint64_t)n * PROFILE_SAMPLE_PCT + 99) / 100;
        if (k < PROFILE_MIN_SAMPLES)
            k = PROFILE_MIN_SAMPLES;
        if (k > PROFILE_MAX_SAMPLES)
            k = PROFILE_MAX_SAMPLES;
    }
    return k < n ? (uint32_t)k : n;
}

void profile_sample_ids(uint32_t n, uint32_t k, uint32_t *ids)
{
    for (uint32_t i = 0; i < k; i++)
        ids[i] = (uint32_t)(((2 * (uint64_t)i + 1) * n) / (2 * (uint64_t)k));
}

static double safe_div(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

/* Extrapolated figures of one strategy. */
static void extrapolate(struct proto_profile_strategy *s, const struct profile_scale *sc)
{
    double N = (double)sc->samples;
    double W = sc->workers ? sc->workers : 1;
    double scale = W / (sc->profile_workers ? sc->profile_workers : 1);
    double rmem = s->memory_rate * scale, rdisk = s->disk_rate * scale;
    if (rmem <= 0)
        rmem = rdisk;
    if (rdisk <= 0)
        rdisk = rmem;
    s->total_offline_s = s->offline_s * N / W;
    s->total_bytes = s->stored_bytes * N;
    double index = s->split ? 8.0 * N : 0.0; /* the memory tier's slot array */
    double room = (double)sc->memory_budget > index ? (double)sc->memory_budget - index : 0;
    double need = s->raw_bytes * N;
    s->memory_fraction = need > 0 ? (room >= need ? 1.0 : room / need) : 1.0;
    s->fits_memory = s->memory_fraction >= 1.0;
    s->fits_disk = s->split == 0 || (sc->disk_tier && s->total_bytes <= (double)sc->disk_budget);
    s->feasible = s->split == 0 || !sc->disk_tier || s->fits_disk;
    s->epoch_memory_s = safe_div(N, rmem);
    s->epoch_disk_s = safe_div(N, rdisk);
    /* What an epoch reads past the memory tier: the disk tier, or without
     * one a recomputation from the source (split 0: the source files). */
    double miss_s = s->split == 0 || sc->disk_tier ? safe_div(1.0, rdisk)
                                                   : s->offline_s / W + safe_div(1.0, rmem);
    double f = s->memory_fraction;
    double per = f * safe_div(1.0, rmem) + (1.0 - f) * miss_s;
    s->expected_epoch_s = per * N;
    s->expected_rate = safe_div(1.0, per);
}

/* 1 when a is better than b among tied strategies: the cheaper encoding
 * (raw, then zstd by level: encoding time grows with it, and compression
 * buys nothing when the rates are a tie), then the least storage. Both are
 * fixed by the pipeline and the data, not by timings, so a tie is always
 * decided the same way. */
static int tie_better(const struct proto_profile_strategy *a, uint32_t ia,
                      const struct proto_profile_strategy *b, uint32_t ib)
{
    if (a->zstd_level != b->zstd_level)
        return a->zstd_level < b->zstd_level;
    if (a->total_bytes != b->total_bytes)
        return a->total_bytes < b->total_bytes;
    return ia < ib;
}

uint32_t profile_rank(struct proto_profile_strategy *st, uint32_t n,
                      const struct profile_scale *sc, double wt, double wo, double ws)
{
    double tmax = 0, omax = 0, smax = 0, best = -1;
    uint32_t winner = 0;
    if (wt <= 0 && wo <= 0 && ws <= 0)
        wt = 1;
    for (uint32_t i = 0; i < n; i++) {
        extrapolate(&st[i], sc);
        if (!st[i].feasible)
            continue;
        tmax = fmax(tmax, st[i].expected_rate);
        omax = fmax(omax, st[i].total_offline_s);
        smax = fmax(smax, st[i].total_bytes);
    }
    for (uint32_t i = 0; i < n; i++) {
        struct proto_profile_strategy *s = &st[i];
        if (!s->feasible) {
            s->score = -1;
            continue;
        }
        s->score = wt * (tmax > 0 ? s->expected_rate / tmax : 1.0) +
                   wo * (omax > 0 ? 1.0 - s->total_offline_s / omax : 1.0) +
                   ws * (smax > 0 ? 1.0 - s->total_bytes / smax : 1.0);
        best = fmax(best, s->score);
    }
    /* The tie: within PROFILE_TIE_PCT of the best score. */
    double floor_score = best - fabs(best) * PROFILE_TIE_PCT / 100.0;
    int found = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!st[i].feasible || st[i].score < floor_score)
            continue;
        if (!found || tie_better(&st[i], i, &st[winner], winner))
            winner = i;
        found = 1;
    }
    /* Ranks: the winner, then the feasible by score, then the rest. */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = 1;
        if (i != winner) {
            r = 2;
            for (uint32_t k = 0; k < n; k++) {
                if (k == winner || k == i)
                    continue;
                int ahead = st[k].feasible > st[i].feasible ||
                            (st[k].feasible == st[i].feasible &&
                             (st[k].score > st[i].score ||
                              (st[k].score == st[i].score && k < i)));
                r += ahead;
            }
        }
        st[i].rank = r;
    }
    return winner;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    return step_mix64(h ^ v) + 0x9e3779b97f4a7c15ull;
}

uint64_t profile_key(const struct dataset *ds, const struct config *cfg)
{
    const struct config_dataset *dc = ds->cfg;
    uint64_t h = mix(0, 0x70726f66696c6531ull); /* "profile1" */
    h = mix(h, ds->nsamples);
    for (uint32_t i = 0; i < ds->nsamples; i++) {
        const struct dataset_sample *s = &ds->samples[i];
        h = mix(h, s->path_hash);
        h = mix(h, s->size);
        h = mix(h, (uint64_t)s->mtime_ns);
        h = mix(h, s->label);
    }
    h = mix(h, dc->nsteps);
    for (uint32_t i = 0; i < dc->nsteps; i++)
        h = mix(h, step_fingerprint(&dc->steps[i], 0xcbf29ce484222325ull));
    h = mix(h, cfg->cache_memory);
    h = mix(h, cfg->cache_disk);
    return h;
}

/* ---- the record of a split: auto choice ---- */

static int record_path(const struct config *cfg, const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/profile-%s.txt", cfg->cache_dir, name);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

struct record {
    uint64_t key;
    uint32_t split;
    int zstd_level;
    struct dataset_auto a;
};

/* The record's file name in cache.dir. */
static void record_name(const char *dataset, int tmp, char *buf, size_t len)
{
    snprintf(buf, len, "profile-%s.txt%s", dataset, tmp ? ".tmp" : "");
}

/* Opens the record of dataset in cache.dir by name, as cachedir.h opens
 * files there (a link is refused): a stream, or NULL with errno set. */
static FILE *record_open(const char *cache_dir, const char *dataset, int flags, const char *how)
{
    char err[600], name[CONFIG_NAME_MAX + 16];
    int dfd = cachedir_open(cache_dir, flags & O_CREAT, err, sizeof(err));
    if (dfd < 0) {
        errno = -dfd;
        return NULL;
    }
    record_name(dataset, (flags & O_CREAT) != 0, name, sizeof(name));
    if (flags & O_CREAT)
        unlinkat(dfd, name, 0); /* a stale one, or whatever was planted under the name */
    /* 0640 like the segments: the umask may narrow it, never widen it. */
    int fd = cachedir_open_file(dfd, name, flags, 0640);
    FILE *f = fd < 0 ? NULL : fdopen(fd, how);
    int e = fd < 0 ? -fd : errno;
    if (!f && fd >= 0)
        close(fd);
    close(dfd);
    errno = e;
    return f;
}

static int record_read(const char *cache_dir, const char *dataset, struct record *r)
{
    FILE *f = record_open(cache_dir, dataset, O_RDONLY, "r");
    char line[256], k[32], v[200];
    unsigned got = 0, version = 0;
    if (!f)
        return -errno;
    memset(r, 0, sizeof(*r));
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || sscanf(line, "%31s %199[^\n]", k, v) != 2)
            continue;
        if (strcmp(k, "version") == 0)
            got |= (sscanf(v, "%u", &version) == 1) << 0;
        else if (strcmp(k, "key") == 0)
            got |= (sscanf(v, "%16llx", (unsigned long long *)&r->key) == 1) << 1;
        else if (strcmp(k, "split") == 0)
            got |= (sscanf(v, "%u", &r->split) == 1) << 2;
        else if (strcmp(k, "zstd_level") == 0)
            got |= (sscanf(v, "%d", &r->zstd_level) == 1) << 3;
        else if (strcmp(k, "strategy") == 0)
            got |= (snprintf(r->a.strategy, sizeof(r->a.strategy), "%s", v) > 0) << 4;
        else if (strcmp(k, "samples_per_s") == 0)
            sscanf(v, "%lf", &r->a.samples_per_s);
        else if (strcmp(k, "offline_s") == 0)
            sscanf(v, "%lf", &r->a.offline_s);
        else if (strcmp(k, "storage_bytes") == 0)
            sscanf(v, "%lf", &r->a.storage_bytes);
        else if (strcmp(k, "sample_size") == 0)
            sscanf(v, "%u", &r->a.sample_size);
    }
    fclose(f);
    return got == 0x1f && version == RECORD_VERSION ? 0 : -EBADMSG;
}

/* Writes the record as profile-NAME.txt.tmp, then renames it over
 * profile-NAME.txt (a link there is replaced, not followed). */
static int record_write(const char *cache_dir, const char *dataset, const struct record *r)
{
    char err[600], tmp[CONFIG_NAME_MAX + 16], name[CONFIG_NAME_MAX + 16];
    FILE *f = record_open(cache_dir, dataset, O_WRONLY | O_CREAT | O_EXCL, "w");
    if (!f)
        return -errno;
    fprintf(f,
            "# The strategy prestod's profiler chose for dataset '%s' (split: auto).\n"
            "# Delete this file to profile the dataset again at its next use.\n"
            "version %d\nkey %016llx\nsplit %u\nzstd_level %d\nstrategy %s\n"
            "samples_per_s %.1f\noffline_s %.3f\nstorage_bytes %.0f\nsample_size %u\n",
            dataset, RECORD_VERSION, (unsigned long long)r->key, r->split, r->zstd_level,
            r->a.strategy, r->a.samples_per_s, r->a.offline_s, r->a.storage_bytes,
            r->a.sample_size);
    int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -errno;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    int dfd = cachedir_open(cache_dir, 0, err, sizeof(err));
    if (dfd < 0)
        return dfd;
    record_name(dataset, 1, tmp, sizeof(tmp));
    record_name(dataset, 0, name, sizeof(name));
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
        rc = -errno;
    if (rc < 0)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}

void profile_restore(struct dataset *ds, const struct config *cfg)
{
    const struct config_dataset *dc = ds->cfg;
    char path[4200], err[256];
    struct record r;
    if (!dc->split_auto)
        return;
    ds->autos.key = profile_key(ds, cfg);
    ds->autos.state = DATASET_AUTO_PENDING;
    int rc = record_path(cfg, dc->name, path, sizeof(path));
    if (rc == 0)
        rc = record_read(cfg->cache_dir, dc->name, &r);
    if (rc == 0 && r.key != ds->autos.key)
        rc = -ESTALE;
    if (rc == 0 && (r.split > dc->nsteps || r.zstd_level < 0 || r.zstd_level > 22 ||
                    step_split_check(dc->steps, dc->nsteps, r.split, err, sizeof(err)) < 0))
        rc = -EINVAL;
    if (rc < 0) {
        log_info("dataset '%s': split: auto: %s; it serves with split %u, uncached, until a "
                 "profile at its first use chooses",
                 dc->name,
                 rc == -ENOENT ? "no strategy chosen yet"
                 : rc == -ESTALE ? "its files, steps or budgets changed since the last choice"
                                 : "the recorded choice is unreadable",
                 ds->split);
        return;
    }
    dataset_set_strategy(ds, r.split, r.zstd_level);
    r.a.state = DATASET_AUTO_CHOSEN;
    r.a.key = ds->autos.key;
    ds->autos = r.a;
    log_info("dataset '%s': split: auto: %s (split %u) as chosen by an earlier profile of %u "
             "samples: %.0f samples/s expected, %.1f MiB on disk, %.1f s offline (%s)",
             dc->name, r.a.strategy, r.split, r.a.sample_size, r.a.samples_per_s,
             r.a.storage_bytes / (1 << 20), r.a.offline_s, path);
}

/* This daemon's trial directory, by name in cache.dir. */
static void trial_name(char *buf, size_t len)
{
    snprintf(buf, len, "%s%ld", TRIAL_PREFIX, (long)getpid());
}

/* Removes the trial directory name of cache_dir, by name (cachedir.h): a
 * link planted under the name goes, what it points to stays. 0 when it is
 * gone (or was not there), else a negative errno. */
static int trial_remove(const char *cache_dir, const char *name)
{
    char err[600];
    int dfd = cachedir_open(cache_dir, 0, err, sizeof(err));
    if (dfd < 0)
        return dfd == -ENOENT ? 0 : dfd;
    int rc = cachedir_remove_dir(dfd, name);
    close(dfd);
    return rc == -ENOENT ? 0 : rc;
}

void profile_clean_trials(const char *cache_dir)
{
    char err[600];
    int fd = cachedir_open(cache_dir, 0, err, sizeof(err));
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    struct dirent *e;
    if (!d) {
        if (fd >= 0)
            close(fd);
        else if (fd != -ENOENT)
            log_debug("profile: no trial directories looked for: %s", err);
        return;
    }
    while ((e = readdir(d))) {
        size_t plen = strlen(TRIAL_PREFIX);
        if (strncmp(e->d_name, TRIAL_PREFIX, plen) != 0)
            continue;
        long pid = strtol(e->d_name + plen, NULL, 10);
        if (pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            continue; /* another daemon's, running */
        int rc = cachedir_remove_dir(dirfd(d), e->d_name);
        if (rc == 1)
            log_warn("profile: removed %s/%s, which was not a directory (a symbolic link?); "
                     "what it pointed to is untouched", cache_dir, e->d_name);
        else if (rc == 0)
            log_info("profile: removed %s/%s, left by a daemon that stopped mid-profile",
                     cache_dir, e->d_name);
        else
            log_warn("profile: cannot remove %s/%s: %s", cache_dir, e->d_name, strerror(-rc));
    }
    closedir(d);
}

/* ---- a running profile ---- */

enum phase { PH_OFFLINE, PH_LOAD, PH_MEMORY, PH_DISK, PH_END };
static const char *const phase_names[] = {"offline", "load", "memory", "disk", "done"};
/* Share of a strategy's progress each phase stands for. */
static const double phase_share[] = {0.4, 0.1, 0.25, 0.25, 0};

struct profile;

struct profile_job {
    struct stats_thread stats; /* first (aligned): the job's counters */
    struct work work;
    struct profile *p;
    enum phase phase;
    uint32_t first, n; /* offline, load: trial ids; online: into p->list */
    uint64_t epoch;
    uint8_t *buf;
    int64_t *labels;
    uint64_t wall_ns, cpu_ns;
    uint32_t good, failed;
    int busy;
};

struct profile {
    struct profiler *pr;
    struct dataset *ds;
    struct proto_profile req;
    int background; /* first use: no connection */
    uint32_t req_id;
    struct bufferevent *bev;
    const void *owner;
    struct proto_profile_strategy st[PROFILE_MAX_STRATEGIES];
    uint32_t nst, cur;
    uint32_t *ids, k;        /* the sample, ids of ds */
    uint32_t workers, njobs; /* the daemon's; the profile's */
    /* The current strategy's trial. */
    struct dataset tds;
    int tds_open;
    struct store *tstore;
    struct cache *tnone, *tmem; /* memory tiers admitting nothing / profile.memory */
    struct pipeline_env tenv;
    char dir[4200];
    /* The current phase. */
    enum phase phase;
    uint32_t *list, nlist; /* online: trial ids to run */
    uint32_t next, pass;
    uint64_t pass_t0, wall_ns, job_wall_ns, cpu_ns, good, failed;
    struct profile_job *jobs;
    uint32_t busy;
    uint64_t t0_ns, sent_ns;
    struct event *ev; /* finishes outside of any callback of ours */
    int done, closing;
    int err_code;
    char err[300];
};

struct profiler {
    struct profile_env env;
    struct profile *run;
    struct dataset **queue; /* PENDING datasets waiting for their profile */
    uint32_t nqueue, capqueue;
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double since_s(uint64_t t0)
{
    return (double)(stats_now_ns() - t0) / 1e9;
}

static int job_bad(void *arg, uint32_t i, enum pipeline_fault f, const char *err)
{
    struct profile_job *j = arg;
    (void)i;
    (void)f;
    (void)err;
    j->failed++;
    return 0;
}

static void job_run(struct work *wk, struct worker_ctx *ctx)
{
    struct profile_job *j = (struct profile_job *)((char *)wk - offsetof(struct profile_job, work));
    struct profile *p = j->p;
    struct stats_thread *saved = ctx->stats;
    uint64_t t0 = stats_now_ns(), c0 = thread_cpu_ns();
    ctx->stats = &j->stats; /* trials stay out of the daemon's counters */
    j->good = j->failed = 0;
    if (j->phase == PH_OFFLINE || (j->phase == PH_LOAD && p->tds.split > 0)) {
        struct pipeline_warm_result res = {0};
        pipeline_warm(&p->tenv, &p->tds, j->first, j->n, ctx, &res);
        j->good = (uint32_t)(res.done - res.failed);
        j->failed = (uint32_t)res.failed;
    } else {
        j->good = pipeline_batch(&p->tenv, &p->tds, p->list + j->first, j->n, PROFILE_SEED,
                                 j->epoch, j->buf, j->labels, ctx, NULL, job_bad, j);
    }
    ctx->stats = saved;
    j->cpu_ns = thread_cpu_ns() - c0;
    j->wall_ns = stats_now_ns() - t0;
}

static void profile_free(struct profile *p);
static void profile_pump(struct profile *p);
static void profile_fail(struct profile *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void job_done(struct work *wk, int cancelled)
{
    struct profile_job *j = (struct profile_job *)((char *)wk - offsetof(struct profile_job, work));
    struct profile *p = j->p;
    j->busy = 0;
    p->busy--;
    if (p->closing) {
        if (p->busy == 0)
            profile_free(p);
        return;
    }
    if (cancelled) { /* only while the pool stops */
        profile_fail(p, PROTO_E_SHUTDOWN, "the daemon is stopping");
        return;
    }
    p->job_wall_ns += j->wall_ns;
    p->cpu_ns += j->cpu_ns;
    p->good += j->good;
    p->failed += j->failed;
    profile_pump(p);
}

/* ---- progress and the result ---- */

static double progress_fraction(const struct profile *p)
{
    double in = 0;
    for (int ph = 0; ph < (int)p->phase && ph < PH_END; ph++)
        in += phase_share[ph];
    if (p->phase < PH_END) {
        double f;
        if (p->phase == PH_MEMORY || p->phase == PH_DISK)
            f = fmin(1.0, (double)(p->wall_ns + stats_now_ns() - p->pass_t0) / 1e6 /
                              PROFILE_MIN_PHASE_MS);
        else
            f = p->nlist ? (double)p->next / p->nlist : 1.0;
        in += phase_share[p->phase] * f;
    }
    double frac = p->nst ? (p->cur + fmin(in, 1.0)) / p->nst : 1.0;
    return fmin(frac, 1.0);
}

static void send_progress(struct profile *p)
{
    struct proto_profile_progress m;
    struct proto_wbuf w;
    double frac = progress_fraction(p), t = since_s(p->t0_ns);
    memset(&m, 0, sizeof(m));
    m.strategy = p->cur < p->nst ? p->cur : p->nst - 1;
    m.strategies = p->nst;
    snprintf(m.name, sizeof(m.name), "%s", p->st[m.strategy].name);
    snprintf(m.phase, sizeof(m.phase), "%s", phase_names[p->phase]);
    m.fraction = frac;
    m.eta_s = frac > 0.01 ? t * (1 - frac) / frac : -1;
    p->sent_ns = stats_now_ns();
    if (!p->bev)
        return;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_PROFILE_PROGRESS, p->req_id);
    proto_put_profile_progress(&w, &m);
    if (frame_send(p->bev, &w) < 0)
        log_error("profile of '%s': cannot queue a progress report: out of memory",
                  p->ds->cfg->name);
    proto_wbuf_free(&w);
}

static void send_result(struct profile *p, uint32_t winner, uint32_t applied)
{
    const struct config *cfg = *p->pr->env.cfg;
    struct proto_profile_result m;
    struct proto_wbuf w;
    if (!p->bev)
        return;
    memset(&m, 0, sizeof(m));
    snprintf(m.dataset, sizeof(m.dataset), "%s", p->ds->cfg->name);
    m.samples = p->ds->nsamples;
    m.sample_size = p->k;
    m.workers = p->workers;
    m.profile_workers = p->njobs;
    m.memory_budget = cfg->cache_memory;
    m.disk_budget = p->pr->env.pipe->store ? cfg->cache_disk : 0;
    m.w_throughput = p->req.w_throughput;
    m.w_offline = p->req.w_offline;
    m.w_storage = p->req.w_storage;
    m.seconds = since_s(p->t0_ns);
    m.winner = winner;
    m.applied = applied;
    m.count = p->nst;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_PROFILE_RESULT, p->req_id);
    proto_put_profile_result(&w, &m);
    for (uint32_t i = 0; i < p->nst; i++)
        proto_put_profile_strategy(&w, &p->st[i]);
    if (frame_send(p->bev, &w) < 0)
        log_error("profile of '%s': cannot queue the result: out of memory", p->ds->cfg->name);
    proto_wbuf_free(&w);
}

/* ---- the trial of one strategy ---- */

static void trial_close(struct profile *p)
{
    store_close(p->tstore);
    p->tstore = NULL;
    cache_destroy(p->tnone);
    cache_destroy(p->tmem);
    p->tnone = p->tmem = NULL;
    if (p->tds_open)
        dataset_close(&p->tds);
    p->tds_open = 0;
    if (p->dir[0]) {
        char name[64];
        trial_name(name, sizeof(name));
        trial_remove((*p->pr->env.cfg)->cache_dir, name);
    }
}

static int trial_open(struct profile *p, const struct proto_profile_strategy *s)
{
    const struct config *cfg = *p->pr->env.cfg;
    char err[512];
    if (dataset_subset(&p->tds, p->ds, p->ids, p->k, s->split, s->zstd_level) < 0) {
        profile_fail(p, PROTO_E_NOMEM, "no memory for a trial dataset");
        return -1;
    }
    p->tds_open = 1;
    struct cache_dataset cd = {p->k, p->tds.mat_bytes};
    if (cache_create(&p->tnone, 0, &cd, 1) < 0 ||
        cache_create(&p->tmem, cfg->profile_memory, &cd, 1) < 0) {
        profile_fail(p, PROTO_E_NOMEM, "no memory for a trial memory tier");
        return -1;
    }
    if (s->split > 0) {
        char name[64];
        trial_name(name, sizeof(name));
        trial_remove(cfg->cache_dir, name); /* a leftover, or a link planted in its place */
        int rc = store_open(&p->tstore, p->dir, 0, cfg->segment_size, err, sizeof(err));
        if (rc < 0) {
            profile_fail(p, PROTO_E_IO, "cannot make a trial disk store (cache.dir): %s", err);
            return -1;
        }
    }
    p->tenv.cache = p->tnone;
    p->tenv.store = p->tstore;
    p->tenv.max_file_size = p->pr->env.pipe->max_file_size;
    p->tenv.compactor = NULL;
    return 0;
}

/* Writes the trial segments back and drops them from the page cache, or
 * for split 0 the sample's source files. */
static void drop_page_cache(struct profile *p)
{
    char err[160];
    if (p->tds.split == 0) {
        for (uint32_t i = 0; i < p->k; i++) {
            struct dataset_file f;
            if (dataset_open_file(&p->tds, i, UINT64_MAX, &f, err, sizeof(err)) < 0)
                continue;
            posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
            close(f.fd);
        }
        return;
    }
    int dfd = cachedir_open(p->dir, 0, err, sizeof(err));
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    struct dirent *e;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "seg-", 4) != 0)
            continue;
        int fd = cachedir_open_file(dirfd(d), e->d_name, O_RDONLY, 0);
        if (fd < 0)
            continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    closedir(d);
}

/* The trial ids an online phase runs: those resident in memory (PH_MEMORY)
 * or on the trial disk (PH_DISK); for split 0 all of them. */
static void phase_list(struct profile *p, enum phase ph)
{
    p->nlist = 0;
    for (uint32_t i = 0; i < p->k; i++) {
        int in = 1;
        if (p->tds.split > 0 && ph == PH_MEMORY)
            in = cache_get(p->tmem, 0, p->tds.fingerprint, i) != NULL;
        else if (p->tds.split > 0)
            in = p->tds.on_disk[i] != 0;
        if (in)
            p->list[p->nlist++] = i;
    }
}

static void phase_begin(struct profile *p, enum phase ph)
{
    p->phase = ph;
    p->next = p->pass = 0;
    p->wall_ns = p->job_wall_ns = p->cpu_ns = p->good = p->failed = 0;
    switch (ph) {
    case PH_OFFLINE:
        p->tenv.cache = p->tnone;
        p->nlist = p->k;
        break;
    case PH_LOAD:
        p->tenv.cache = p->tds.split > 0 ? p->tmem : p->tnone;
        phase_list(p, ph); /* split 0: one epoch to warm the page cache */
        p->nlist = p->tds.split > 0 ? p->k : p->nlist;
        break;
    case PH_MEMORY:
        p->tenv.cache = p->tds.split > 0 ? p->tmem : p->tnone;
        phase_list(p, ph);
        break;
    case PH_DISK:
        p->tenv.cache = p->tnone;
        phase_list(p, ph);
        drop_page_cache(p);
        break;
    case PH_END:
        break;
    }
    p->pass_t0 = stats_now_ns();
}

static void strategy_begin(struct profile *p);

/* Samples/s of an online phase on the profile's workers: the samples over
 * the time the workers spent on them, not counting the gaps between jobs
 * (which a stream fills with its prefetched batches). That time is the
 * jobs' wall clocks when they read (reads waited for count), and their
 * CPU clocks when they only compute (epochs from the memory tier), which
 * leaves out the time other processes had the core: the figure stays the
 * same on a busy machine, so the ranking does. */
static double online_rate(const struct profile *p)
{
    int cpu_bound = p->phase == PH_MEMORY && p->tds.split > 0;
    double busy_s = (double)(cpu_bound ? p->cpu_ns : p->job_wall_ns) / 1e9 / p->njobs;
    return busy_s > 0 ? (double)p->good / busy_s : 0;
}

/* Records what the phase measured and moves on. */
static void phase_end(struct profile *p)
{
    struct proto_profile_strategy *s = &p->st[p->cur];
    switch (p->phase) {
    case PH_OFFLINE: {
        struct store_stats ss;
        store_get_stats(p->tstore, &ss);
        if (ss.degraded) {
            profile_fail(p, PROTO_E_IO, "the trial disk store failed to write: %s",
                         strerror(ss.degraded));
            return;
        }
        s->samples = (uint32_t)p->good;
        s->failed = (uint32_t)p->failed;
        s->offline_s = p->good ? (double)p->job_wall_ns / 1e9 / (double)p->good : 0;
        s->stored_bytes = p->good ? (double)ss.bytes_disk / (double)p->good : 0;
        s->raw_bytes = ss.records ? (double)ss.bytes_raw / (double)ss.records : 0;
        if (p->cur > 0 && p->st[p->cur - 1].split == s->split) {
            /* The memory tier holds the same decoded bytes whatever the
             * disk encoding: measured once per split point. */
            s->memory_rate = p->st[p->cur - 1].memory_rate;
            s->memory_cpu_s = p->st[p->cur - 1].memory_cpu_s;
            phase_begin(p, PH_DISK);
        } else {
            phase_begin(p, PH_LOAD);
        }
        break;
    }
    case PH_LOAD:
        if (p->tds.split == 0) {
            uint64_t bytes = 0;
            for (uint32_t i = 0; i < p->k; i++)
                bytes += p->tds.samples[i].size;
            s->samples = (uint32_t)p->good;
            s->failed = (uint32_t)p->failed;
            s->raw_bytes = p->k ? (double)bytes / p->k : 0; /* the page cache's */
        }
        phase_begin(p, PH_MEMORY);
        break;
    case PH_MEMORY:
        s->memory_rate = online_rate(p);
        s->memory_cpu_s = p->good ? (double)p->cpu_ns / 1e9 / (double)p->good : 0;
        phase_begin(p, PH_DISK);
        break;
    case PH_DISK:
        s->disk_rate = online_rate(p);
        s->disk_cpu_s = p->good ? (double)p->cpu_ns / 1e9 / (double)p->good : 0;
        log_debug("profile of '%s': %s: offline %.2f ms/sample, %.0f bytes/sample stored, "
                  "%.0f samples/s from memory, %.0f from disk", p->ds->cfg->name, s->name,
                  s->offline_s * 1e3, s->stored_bytes, s->memory_rate, s->disk_rate);
        trial_close(p);
        p->cur++;
        strategy_begin(p);
        break;
    case PH_END:
        break;
    }
}

static void profile_finish(struct profile *p);

static void strategy_begin(struct profile *p)
{
    if (p->cur == p->nst) {
        p->phase = PH_END;
        profile_finish(p);
        return;
    }
    if (trial_open(p, &p->st[p->cur]) < 0)
        return;
    phase_begin(p, p->st[p->cur].split > 0 ? PH_OFFLINE : PH_LOAD);
}

/* Hands out jobs up to the profile's share of the workers; at the end of
 * an epoch (all handed out and back) decides on another or the next phase. */
static void profile_pump(struct profile *p)
{
    for (;;) {
        if (p->done || p->closing)
            return;
        int online = p->phase == PH_MEMORY || p->phase == PH_DISK ||
                     (p->phase == PH_LOAD && p->tds.split == 0);
        uint32_t chunk = online ? PROFILE_BATCH : PROFILE_JOB_SAMPLES;
        for (uint32_t i = 0; i < p->njobs; i++) {
            struct profile_job *j = &p->jobs[i];
            if (j->busy)
                continue;
            /* Memory epochs follow each other without a pause; disk ones
             * wait for the page cache to be dropped in between. */
            if (p->next == p->nlist && p->phase == PH_MEMORY && p->nlist > 0 &&
                stats_now_ns() - p->pass_t0 < PROFILE_MIN_PHASE_MS * 1000000ull &&
                p->pass + 1 < PROFILE_MAX_PASSES) {
                p->next = 0;
                p->pass++;
            }
            if (p->next == p->nlist)
                break;
            j->phase = p->phase;
            j->first = p->next;
            j->n = p->nlist - p->next < chunk ? p->nlist - p->next : chunk;
            j->epoch = p->pass;
            p->next += j->n;
            j->busy = 1;
            p->busy++;
            workers_submit(p->pr->env.workers, &j->work);
        }
        if (p->busy > 0 || p->next < p->nlist) {
            if (stats_now_ns() - p->sent_ns >= PROFILE_PROGRESS_MS * 1000000ull)
                send_progress(p);
            return;
        }
        /* The epoch is over (for memory, the phase). */
        p->wall_ns += stats_now_ns() - p->pass_t0;
        p->pass++;
        if (p->phase == PH_DISK && p->nlist > 0 &&
            p->wall_ns < PROFILE_MIN_PHASE_MS * 1000000ull && p->pass < PROFILE_MAX_PASSES) {
            p->next = 0;
            if (p->phase == PH_DISK)
                drop_page_cache(p);
            p->pass_t0 = stats_now_ns();
            continue;
        }
        phase_end(p); /* may finish or fail the profile */
    }
}

/* ---- applying a choice ---- */

/* Records the winner of a split: auto dataset and switches to it when the
 * dataset is still PENDING. Returns a PROTO_APPLIED_* value. */
static uint32_t profile_apply(struct profile *p, const struct proto_profile_strategy *w)
{
    struct profiler *pr = p->pr;
    struct dataset *ds = p->ds;
    char path[4200];
    struct record r;
    memset(&r, 0, sizeof(r));
    r.key = profile_key(ds, *pr->env.cfg);
    r.split = w->split;
    r.zstd_level = w->zstd_level;
    snprintf(r.a.strategy, sizeof(r.a.strategy), "%s", w->name);
    r.a.samples_per_s = w->expected_rate;
    r.a.offline_s = w->total_offline_s;
    r.a.storage_bytes = w->total_bytes;
    r.a.sample_size = p->k;
    int rc = record_path(*pr->env.cfg, ds->cfg->name, path, sizeof(path));
    if (rc == 0)
        rc = record_write((*pr->env.cfg)->cache_dir, ds->cfg->name, &r);
    if (rc < 0)
        log_warn("dataset '%s': split: auto: cannot record the choice in %s: %s; the next "
                 "start profiles again", ds->cfg->name, path, strerror(-rc));
    int same = ds->split == w->split && ds->zstd_level == w->zstd_level;
    if (ds->autos.state == DATASET_AUTO_CHOSEN) {
        if (same) {
            r.a.state = DATASET_AUTO_CHOSEN;
            r.a.key = r.key;
            ds->autos = r.a;
            log_info("dataset '%s': split: auto: the profile confirms %s", ds->cfg->name,
                     w->name);
            return PROTO_APPLIED_UNCHANGED;
        }
        log_info("dataset '%s': split: auto: %s recorded; it takes effect at the next start "
                 "(the memory tier holds entries of %s, which are never evicted)",
                 ds->cfg->name, w->name, ds->autos.strategy);
        return PROTO_APPLIED_RESTART;
    }
    /* PENDING: nothing is cached yet. The switch waits for the batches in
     * flight; new ones wait for it. */
    pthread_rwlock_wrlock(&ds->strategy_lock);
    dataset_set_strategy(ds, w->split, w->zstd_level);
    if (pr->env.pipe->store && w->split > 0 && pipeline_disk_scan(pr->env.pipe->store, ds) < 0)
        log_error("dataset '%s': no memory to scan the disk tier: caching in memory only",
                  ds->cfg->name);
    r.a.state = DATASET_AUTO_CHOSEN;
    ds->autos = r.a;
    ds->autos.key = r.key;
    pthread_rwlock_unlock(&ds->strategy_lock);
    log_info("dataset '%s': split: auto chose %s (split %u) from a profile of %u samples: "
             "%.0f samples/s expected (%.0f from memory, %.0f from disk), %.1f MiB on disk, "
             "%.1f s offline", ds->cfg->name, w->name, w->split, p->k, w->expected_rate,
             safe_div(ds->nsamples, w->epoch_memory_s), safe_div(ds->nsamples, w->epoch_disk_s),
             w->total_bytes / (1 << 20), w->total_offline_s);
    return PROTO_APPLIED_NOW;
}

/* ---- life cycle ---- */

static void profile_free(struct profile *p)
{
    trial_close(p);
    if (p->ev)
        event_free(p->ev);
    for (uint32_t i = 0; p->jobs && i < p->njobs; i++) {
        free(p->jobs[i].buf);
        free(p->jobs[i].labels);
    }
    free(p->jobs);
    free(p->ids);
    free(p->list);
    struct dataset *ds = p->ds;
    free(p);
    dataset_release(ds); /* last: may free a dataset a reload retired */
}

static void profiler_next(struct profiler *pr);

/* Runs from the event loop once the profile is over (done or failed). */
static void profile_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct profile *p = arg;
    struct profiler *pr = p->pr;
    (void)fd;
    (void)what;
    p->ds->autos.profiling = 0;
    pr->run = NULL;
    p->closing = 1;
    if (p->busy == 0)
        profile_free(p);
    profiler_next(pr);
}

static void profile_end(struct profile *p)
{
    p->done = 1;
    trial_close(p);
    event_active(p->ev, EV_TIMEOUT, 0);
}

static void profile_fail(struct profile *p, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof(p->err), fmt, ap);
    va_end(ap);
    p->err_code = code;
    log_warn("profile of dataset '%s' failed: %s", p->ds->cfg->name, p->err);
    if (p->bev)
        frame_send_error(p->bev, p->req_id, code, p->err);
    profile_end(p);
}

static void profile_finish(struct profile *p)
{
    const struct config *cfg = *p->pr->env.cfg;
    uint32_t good = 0;
    for (uint32_t i = 0; i < p->nst; i++)
        good += p->st[i].samples;
    if (good == 0) {
        profile_fail(p, PROTO_E_SAMPLE, "no sample of the dataset could be read");
        return;
    }
    struct profile_scale sc = {p->ds->nsamples, p->workers, p->njobs, cfg->cache_memory,
                               cfg->cache_disk, p->pr->env.pipe->store != NULL};
    uint32_t w = profile_rank(p->st, p->nst, &sc, p->req.w_throughput, p->req.w_offline,
                              p->req.w_storage);
    const struct proto_profile_strategy *win = &p->st[w];
    log_info("profile of dataset '%s': %u strategies on %u samples in %.1f s; best: %s, "
             "%.0f samples/s expected, %.1f MiB on disk, %.1f s offline", p->ds->cfg->name,
             p->nst, p->k, since_s(p->t0_ns), win->name, win->expected_rate,
             win->total_bytes / (1 << 20), win->total_offline_s);
    uint32_t applied = PROTO_APPLIED_NO;
    if (p->ds->cfg->split_auto && (p->background || (p->req.flags & PROTO_PROFILE_APPLY)))
        applied = profile_apply(p, win);
    send_progress(p);
    send_result(p, w, applied);
    profile_end(p);
}

static int profile_create(struct profiler *pr, struct dataset *ds,
                          const struct proto_profile *req, int background, uint32_t req_id,
                          struct bufferevent *bev, const void *owner, struct profile **out,
                          char *err, size_t errlen)
{
    const struct config *cfg = *pr->env.cfg;
    if (ds->out_h == 0 || ds->sample_bytes == 0) {
        snprintf(err, errlen, "dataset '%s': the pipeline's output size varies per image",
                 ds->cfg->name);
        return -PROTO_E_INVAL;
    }
    struct profile *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "no memory for a profile");
        return -PROTO_E_NOMEM;
    }
    p->pr = pr;
    p->ds = ds;
    dataset_hold(ds); /* a reload may retire it meanwhile (reload.h) */
    p->req = *req;
    if (!(req->w_throughput > 0 || req->w_offline > 0 || req->w_storage > 0))
        p->req.w_throughput = 1; /* the default objective: throughput only */
    p->background = background;
    p->req_id = req_id;
    p->bev = bev;
    p->owner = owner;
    p->t0_ns = stats_now_ns();
    p->nst = profile_strategies(ds->cfg->steps, ds->cfg->nsteps, p->st, PROFILE_MAX_STRATEGIES);
    p->k = profile_sample_size(ds->nsamples, req->samples, cfg->profile_samples);
    p->workers = workers_count(pr->env.workers);
    p->njobs = p->workers * cfg->profile_worker_share / 100;
    if (p->njobs == 0)
        p->njobs = 1;
    char trial[64];
    trial_name(trial, sizeof(trial));
    snprintf(p->dir, sizeof(p->dir), "%s/%s", cfg->cache_dir, trial);
    p->ids = malloc((p->k ? p->k : 1) * sizeof(*p->ids));
    p->list = malloc((p->k ? p->k : 1) * sizeof(*p->list));
    /* Aligned for the jobs' stats blocks. */
    p->jobs = aligned_alloc(_Alignof(struct profile_job), p->njobs * sizeof(*p->jobs));
    p->ev = event_new(pr->env.base, -1, 0, profile_on_event, p);
    int ok = p->ids && p->list && p->jobs && p->ev;
    if (p->jobs) {
        memset(p->jobs, 0, p->njobs * sizeof(*p->jobs));
        for (uint32_t i = 0; i < p->njobs && ok; i++) {
            struct profile_job *j = &p->jobs[i];
            j->p = p;
            j->work.run = job_run;
            j->work.done = job_done;
            j->buf = malloc(PROFILE_BATCH * ds->sample_bytes);
            j->labels = malloc(PROFILE_BATCH * sizeof(*j->labels));
            ok = j->buf && j->labels;
        }
    }
    if (!ok) {
        if (!p->jobs)
            p->njobs = 0;
        profile_free(p);
        snprintf(err, errlen, "no memory for a profile");
        return -PROTO_E_NOMEM;
    }
    profile_sample_ids(ds->nsamples, p->k, p->ids);
    *out = p;
    return 0;
}

static void profile_begin(struct profile *p)
{
    p->ds->autos.profiling = 1;
    p->pr->run = p;
    log_info("dataset '%s': profiling %u strategies on %u of its %u samples with %u of %u "
             "workers%s", p->ds->cfg->name, p->nst, p->k, p->ds->nsamples, p->njobs, p->workers,
             p->background ? " (split: auto, first use)" : "");
    send_progress(p);
    p->cur = 0;
    strategy_begin(p);
    profile_pump(p);
}

/* Stops p at once (its trial is removed once no worker uses it). */
static void profile_stop(struct profile *p)
{
    struct profiler *pr = p->pr;
    if (!p->done)
        log_info("profile of dataset '%s' stopped after %u of %u strategies", p->ds->cfg->name,
                 p->cur, p->nst);
    p->ds->autos.profiling = 0;
    pr->run = NULL;
    p->closing = 1;
    p->bev = NULL;
    p->busy++; /* a guard through the loop */
    for (uint32_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].busy)
            workers_cancel(pr->env.workers, &p->jobs[i].work);
    if (--p->busy == 0)
        profile_free(p);
}

/* ---- the profiler ---- */

int profiler_create(struct profiler **out, const struct profile_env *env)
{
    struct profiler *pr = calloc(1, sizeof(*pr));
    if (!pr)
        return -ENOMEM;
    pr->env = *env;
    profile_clean_trials((*env->cfg)->cache_dir);
    *out = pr;
    return 0;
}

void profiler_destroy(struct profiler *pr)
{
    if (!pr)
        return;
    if (pr->run)
        profile_stop(pr->run);
    free(pr->queue);
    free(pr);
}

static void profiler_next(struct profiler *pr)
{
    char err[256];
    while (!pr->run && pr->nqueue > 0) {
        struct dataset *ds = pr->queue[0];
        memmove(pr->queue, pr->queue + 1, --pr->nqueue * sizeof(*pr->queue));
        if (ds->autos.state != DATASET_AUTO_PENDING)
            continue;
        struct proto_profile req;
        struct profile *p;
        memset(&req, 0, sizeof(req));
        if (profile_create(pr, ds, &req, 1, 0, NULL, NULL, &p, err, sizeof(err)) < 0) {
            log_warn("dataset '%s': split: auto: cannot profile: %s", ds->cfg->name, err);
            continue;
        }
        profile_begin(p);
    }
}

int profiler_request(struct profiler *pr, struct dataset *ds, const struct proto_profile *req,
                     uint32_t req_id, struct bufferevent *bev, void *owner, char *err,
                     size_t errlen)
{
    const double w[3] = {req->w_throughput, req->w_offline, req->w_storage};
    for (int i = 0; i < 3; i++) {
        if (!isfinite(w[i]) || w[i] < 0 || w[i] > 1e6) {
            snprintf(err, errlen, "weights must be numbers from 0 to 1000000");
            return -PROTO_E_INVAL;
        }
    }
    if (req->samples > PROFILE_LIMIT_SAMPLES) {
        snprintf(err, errlen, "a sample of %u is over the limit of %u", req->samples,
                 PROFILE_LIMIT_SAMPLES);
        return -PROTO_E_INVAL;
    }
    if ((req->flags & PROTO_PROFILE_APPLY) && !ds->cfg->split_auto) {
        snprintf(err, errlen, "dataset '%s' has a fixed split in the config (split %u); "
                 "declare it with split: auto to let the profiler choose",
                 ds->cfg->name, ds->split);
        return -PROTO_E_INVAL;
    }
    if (pr->run) {
        snprintf(err, errlen, "a profile of dataset '%s' is running%s; one runs at a time",
                 pr->run->ds->cfg->name,
                 pr->run->background ? " (split: auto, first use)" : "");
        return -PROTO_E_LIMIT;
    }
    struct profile *p;
    int rc = profile_create(pr, ds, req, 0, req_id, bev, owner, &p, err, errlen);
    if (rc < 0)
        return rc;
    profile_begin(p);
    return 0;
}

int profiler_runs_for(const struct profiler *pr, const void *owner)
{
    return pr && pr->run && !pr->run->background && pr->run->owner == owner;
}

void profiler_detach(struct profiler *pr, const void *owner)
{
    if (profiler_runs_for(pr, owner)) {
        profile_stop(pr->run);
        profiler_next(pr);
    }
}

void profiler_first_use(struct profiler *pr, struct dataset *ds)
{
    if (!pr || ds->autos.state != DATASET_AUTO_PENDING || ds->autos.profiling)
        return;
    for (uint32_t i = 0; i < pr->nqueue; i++)
        if (pr->queue[i] == ds)
            return;
    if (pr->nqueue == pr->capqueue) {
        uint32_t cap = pr->capqueue ? 2 * pr->capqueue : 4;
        struct dataset **q = realloc(pr->queue, cap * sizeof(*q));
        if (!q) {
            log_error("dataset '%s': no memory to queue its profile", ds->cfg->name);
            return;
        }
        pr->queue = q;
        pr->capqueue = cap;
    }
    pr->queue[pr->nqueue++] = ds;
    profiler_next(pr);
}

void profiler_forget(struct profiler *pr, const struct dataset *ds)
{
    if (!pr)
        return;
    if (pr->run && pr->run->ds == ds)
        profile_stop(pr->run);
    for (uint32_t i = 0; i < pr->nqueue; i++) {
        if (pr->queue[i] == ds) {
            memmove(pr->queue + i, pr->queue + i + 1, (pr->nqueue - i - 1) * sizeof(*pr->queue));
            pr->nqueue--;
            break;
        }
    }
    profiler_next(pr);
}

void profile_dataset_json(const struct dataset *ds, struct json *j)
{
    const struct dataset_auto *a = &ds->autos;
    char enc[16];
    level_name(ds->zstd_level, enc, sizeof(enc));
    json_str(j, "encoding", enc);
    json_u64(j, "split_auto", ds->cfg->split_auto != 0);
    if (!ds->cfg->split_auto)
        return;
    json_object_begin(j, "auto");
    json_str(j, "state", a->profiling ? "profiling"
                         : a->state == DATASET_AUTO_CHOSEN ? "chosen" : "pending");
    json_str(j, "strategy", a->state == DATASET_AUTO_CHOSEN ? a->strategy : "");
    json_double(j, "samples_per_s", a->samples_per_s);
    json_double(j, "offline_s", a->offline_s);
    json_double(j, "storage_bytes", a->storage_bytes);
    json_u64(j, "sample_size", a->sample_size);
    json_object_end(j);
}

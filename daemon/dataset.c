/* Datasets: see dataset.h. */
#include "dataset.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"
#include "proto.h"
#include "source.h"
#include "stats.h"

struct dataset {
    const struct config_dataset *cfg; /* owned by the config, which outlives it */
    /* The index and the source (a subset's are its parent's). */
    struct index own_ix;
    struct source *own_src;
    const struct index *ix;
    const struct source *src;
    uint32_t *ids;          /* a subset: its sample i is ids[i] of the parent */
    uint32_t n;             /* samples */
    uint64_t name_hash;     /* hash_xxh64 of the name: the disk tier's key */
    uint64_t content_fp;    /* dataset_fingerprint */
    struct dataset_output out;
    uint32_t id;            /* the tiers' */
    /* The strategy in force; strategy_lock guards the pointer (and the
     * reference taken with it) only, never a batch. */
    struct strategy *strategy;
    pthread_mutex_t strategy_lock;
    /* Per-sample "already logged as bad" flags (atomic bytes). */
    uint8_t *bad_logged;
    uint64_t counters[DATASET_COUNTER_MAX]; /* relaxed atomics */
    /* Event loop thread only. */
    uint32_t refs;
    void (*released)(void *arg);
    void *released_arg;
    int warming;
    struct dataset_auto autos;
};

/* The index's sample of sample i of ds. */
static const struct index_sample *sample_of(const struct dataset *ds, uint32_t i)
{
    return &ds->ix->samples[ds->ids ? ds->ids[i] : i];
}

/* ---- the strategy ---- */

/* A strategy for (split, zstd_level) of cfg's steps, and the whole
 * pipeline's output into *out (when out is not NULL). */
static struct strategy *strategy_new(const struct config_dataset *cfg, uint32_t split,
                                     int zstd_level, int caching, struct dataset_output *out)
{
    struct strategy *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->split = split;
    st->zstd_level = zstd_level;
    st->caching = caching;
    st->refs = 1; /* the dataset's */
    st->fingerprint = cfg->chain[split < cfg->nsteps ? split : cfg->nsteps].fingerprint;
    if (split > 0 && split <= cfg->nsteps) { /* else nothing materialized: all 0 */
        const struct config_stage *m = &cfg->chain[split];
        st->mat_h = m->h;
        st->mat_w = m->w;
        st->mat_c = m->c;
        st->mat_dtype = m->dtype;
        st->mat_bytes = (size_t)m->h * m->w * m->c * proto_dtype_size(m->dtype);
    }
    if (out) {
        const struct config_stage *o = &cfg->chain[cfg->nsteps];
        uint32_t w = cfg->pad_max ? cfg->pad_max : o->w; /* padded: a slot's room */
        *out = (struct dataset_output){o->h, w, o->c, o->dtype, o->layout,
                                       (size_t)o->h * w * o->c * proto_dtype_size(o->dtype),
                                       o->type, config_dataset_labels(cfg)};
    }
    return st;
}

const struct strategy *dataset_strategy(struct dataset *ds)
{
    pthread_mutex_lock(&ds->strategy_lock);
    struct strategy *st = ds->strategy;
    __atomic_fetch_add(&st->refs, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ds->strategy_lock);
    return st;
}

void strategy_put(const struct strategy *cst)
{
    struct strategy *st = (struct strategy *)cst;
    if (st && __atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(st);
}

int dataset_switch(struct dataset *ds, uint32_t split, int zstd_level, int caching)
{
    struct strategy *st = strategy_new(ds->cfg, split, zstd_level, caching, NULL);
    if (!st)
        return -ENOMEM;
    pthread_mutex_lock(&ds->strategy_lock);
    struct strategy *old = ds->strategy;
    ds->strategy = st;
    pthread_mutex_unlock(&ds->strategy_lock);
    strategy_put(old); /* freed once the last batch using it ends */
    return 0;
}

/* ---- life cycle ---- */

/* The parts every dataset has: 0 or -ENOMEM. */
static int dataset_init(struct dataset *ds, const struct config_dataset *cfg, uint32_t split,
                        int zstd_level)
{
    ds->cfg = cfg;
    ds->id = UINT32_MAX;
    pthread_mutex_init(&ds->strategy_lock, NULL);
    ds->name_hash = hash_xxh64(cfg->name, strlen(cfg->name));
    ds->strategy = strategy_new(cfg, split, zstd_level, 1, &ds->out);
    ds->bad_logged = calloc(ds->n ? ds->n : 1, 1);
    return ds->strategy && ds->bad_logged ? 0 : -ENOMEM;
}

/* Soft targets (mixup, cutmix) need a column for every label the dataset
 * has: 0, or -EINVAL with err. */
static int dataset_check_classes(const struct dataset *ds, char *err, size_t errlen)
{
    const struct config_dataset *dc = ds->cfg;
    uint32_t k = ds->out.labels.classes, top = 0;
    if (ds->out.labels.dtype != PROTO_DTYPE_F32)
        return 0;
    for (uint32_t i = 0; i < ds->n; i++)
        if (sample_of(ds, i)->label >= top)
            top = sample_of(ds, i)->label + 1;
    uint32_t classes = ds->ix->nclasses > top ? ds->ix->nclasses : top;
    if (classes <= k)
        return 0;
    const struct step *s = &dc->batch_steps[0];
    snprintf(err, errlen, "dataset '%s': steps.%s.num_classes (line %d) is %u, but %s has %u "
             "classes (labels 0..%u): the soft targets need a column for each", dc->name,
             step_name(s->kind), dc->batch_lines[0], k, dc->root, classes, classes - 1);
    return -EINVAL;
}

/* Once the samples are known (a subset's ids filled). */
static void dataset_set_fingerprint(struct dataset *ds)
{
    ds->content_fp = dataset_content_hash(ds, DATASET_CONTENT_SEED);
    if (ds->content_fp == 0)
        ds->content_fp = 1;
}

int dataset_open(struct dataset **out, const struct config_dataset *cfg, char *err,
                 size_t errlen)
{
    struct dataset *ds = calloc(1, sizeof(*ds));
    if (!ds) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    int rc = source_open(&ds->own_src, cfg, &ds->own_ix, err, errlen);
    if (rc < 0) {
        index_free(&ds->own_ix);
        free(ds);
        return rc;
    }
    ds->ix = &ds->own_ix;
    ds->src = ds->own_src;
    ds->n = ds->own_ix.n;
    if (dataset_init(ds, cfg, cfg->split, cfg->zstd_level) < 0) {
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 strerror(ENOMEM));
        dataset_free(ds);
        return -ENOMEM;
    }
    if (dataset_check_classes(ds, err, errlen) < 0) {
        dataset_free(ds);
        return -EINVAL;
    }
    dataset_set_fingerprint(ds);
    *out = ds;
    return 0;
}

int dataset_subset(struct dataset **out, const struct dataset *ds, const uint32_t *ids,
                   uint32_t n, uint32_t split, int zstd_level)
{
    struct dataset *sub = calloc(1, sizeof(*sub));
    if (!sub)
        return -ENOMEM;
    sub->ix = ds->ix;
    sub->src = ds->src;
    sub->n = n;
    sub->ids = malloc((n ? n : 1) * sizeof(*sub->ids));
    if (!sub->ids || dataset_init(sub, ds->cfg, split, zstd_level) < 0) {
        dataset_free(sub);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        sub->ids[i] = ds->ids ? ds->ids[ids[i]] : ids[i];
    memset(sub->bad_logged, 1, n); /* "logged already": trials stay quiet */
    dataset_set_fingerprint(sub);
    *out = sub;
    return 0;
}

void dataset_free(struct dataset *ds)
{
    if (!ds)
        return;
    source_close(ds->own_src);
    index_free(&ds->own_ix);
    strategy_put(ds->strategy);
    pthread_mutex_destroy(&ds->strategy_lock);
    free(ds->ids);
    free(ds->bad_logged);
    free(ds);
}

/* ---- the index ---- */

const struct config_dataset *dataset_config(const struct dataset *ds)
{
    return ds->cfg;
}

const char *dataset_name(const struct dataset *ds)
{
    return ds->cfg->name;
}

uint32_t dataset_size(const struct dataset *ds)
{
    return ds->n;
}

uint32_t dataset_nclasses(const struct dataset *ds)
{
    return ds->ix->nclasses;
}

const char *dataset_class(const struct dataset *ds, uint32_t k)
{
    return ds->ix->classes[k];
}

uint32_t dataset_label(const struct dataset *ds, uint32_t sample)
{
    return sample_of(ds, sample)->label;
}

const char *dataset_path(const struct dataset *ds, uint32_t sample)
{
    return ds->ix->paths + sample_of(ds, sample)->path_off;
}

void dataset_ident(const struct dataset *ds, uint32_t sample, struct dataset_ident *out)
{
    const struct index_sample *s = sample_of(ds, sample);
    out->path_hash = s->path_hash;
    out->size = s->size;
    out->mtime_ns = s->mtime_ns;
}

uint64_t dataset_file_size(const struct dataset *ds, uint32_t sample)
{
    return sample_of(ds, sample)->size;
}

uint32_t dataset_find_path(const struct dataset *ds, uint64_t path_hash, const uint32_t **ids)
{
    if (ds->ids) { /* subsets are never asked: their records are a trial's */
        *ids = NULL;
        return 0;
    }
    return index_find_path(ds->ix, path_hash, ids);
}

uint64_t dataset_name_hash(const struct dataset *ds)
{
    return ds->name_hash;
}

const struct dataset_output *dataset_output(const struct dataset *ds)
{
    return &ds->out;
}

uint64_t dataset_refused(const struct dataset *ds)
{
    return source_refused(ds->src);
}

uint64_t dataset_fingerprint(const struct dataset *ds)
{
    return ds->content_fp;
}

uint64_t dataset_content_hash(const struct dataset *ds, uint64_t h)
{
    const struct config_dataset *dc = ds->cfg;
    h = hash_combine(h, ds->n);
    for (uint32_t i = 0; i < ds->n; i++) {
        const struct index_sample *s = sample_of(ds, i);
        h = hash_combine(h, s->path_hash);
        h = hash_combine(h, s->size);
        h = hash_combine(h, (uint64_t)s->mtime_ns);
        h = hash_combine(h, s->label);
    }
    h = hash_combine(h, dc->nsteps);
    for (uint32_t i = 0; i < dc->nsteps; i++)
        h = hash_combine(h, dc->chain[i].step_fp);
    /* mixup/cutmix with all their parameters (nothing when there are none,
     * so datasets without them keep their fingerprints). */
    for (uint32_t i = 0; i < dc->nbatch_steps; i++)
        h = hash_combine(h, step_fingerprint(&dc->batch_steps[i], 0xcbf29ce484222325ull));
    if (dc->pad_max) /* batch: {pad: longest, max_length} */
        h = hash_combine(h, 0x7061640000000000ull | dc->pad_max);
    return h;
}

uint32_t dataset_id(const struct dataset *ds)
{
    return ds->id;
}

void dataset_set_id(struct dataset *ds, uint32_t id)
{
    ds->id = id;
}

/* ---- source reads ---- */

void dataset_open_error(const struct dataset *ds, int rc, char *err, size_t errlen)
{
    source_open_error(ds->src, rc, err, errlen);
}

int dataset_open_file(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                      struct source_file *f, char *err, size_t errlen)
{
    return source_open_file(ds->src, ds->ix, ds->ids ? ds->ids[sample] : sample, max_size, f,
                            err, errlen);
}

int dataset_read(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                 struct img *out, struct source_file *f, char *err, size_t errlen)
{
    return source_read(ds->src, ds->ix, ds->ids ? ds->ids[sample] : sample, max_size, out, f,
                       err, errlen);
}

void dataset_file_req(const struct dataset *ds, uint32_t sample, void *buf, size_t len,
                      struct io_req *q)
{
    source_req(ds->src, ds->ix, ds->ids ? ds->ids[sample] : sample, buf, len, q);
}

const struct source *dataset_source(const struct dataset *ds)
{
    return ds->src;
}

/* ---- flags and counters ---- */

void dataset_bad_sample(struct dataset *ds, uint32_t sample, const char *msg)
{
    dataset_count(ds, DATASET_errors, 1);
    if (__atomic_exchange_n(&ds->bad_logged[sample], 1, __ATOMIC_RELAXED) == 0)
    {
        /* A directory's paths are relative to its root; a manifest's are
         * absolute, a shard member's SHARD/KEY.EXT. */
        int dir = source_kind(ds->src) == SOURCE_DIR;
        log_warn("dataset '%s': bad sample %s%s%s: %s", ds->cfg->name, dir ? ds->cfg->root : "",
                 dir ? "/" : "", dataset_path(ds, sample), msg);
    }
}

void dataset_count(struct dataset *ds, enum dataset_counter c, uint64_t n)
{
    __atomic_fetch_add(&ds->counters[c], n, __ATOMIC_RELAXED);
}

static const struct stats_decl dataset_decl[] = {DATASET_STATS(STATS_DECL)};
static const struct stats_decl counter_decl[] = {DATASET_COUNTERS(STATS_DECL)};

void dataset_stats(const struct dataset *ds, struct stats_out *o)
{
    uint64_t c[DATASET_COUNTER_MAX];
    struct stats_val v[] = {stats_str(ds->cfg->name), stats_u64(ds->n),
                            stats_u64(ds->ix->nclasses), stats_u64(source_refused(ds->src))};
    stats_emit(o, dataset_decl, v, sizeof(v) / sizeof(v[0]));
    for (int i = 0; i < DATASET_COUNTER_MAX; i++)
        c[i] = __atomic_load_n(&ds->counters[i], __ATOMIC_RELAXED);
    stats_emit_u64(o, counter_decl, c, DATASET_COUNTER_MAX);
    source_stats(ds->src, o);
}

/* ---- users, warm-ups, split: auto (event loop thread) ---- */

void dataset_hold(struct dataset *ds)
{
    ds->refs++;
}

void dataset_release(struct dataset *ds)
{
    if (--ds->refs == 0 && ds->released)
        ds->released(ds->released_arg);
}

uint32_t dataset_users(const struct dataset *ds)
{
    return ds->refs;
}

void dataset_on_released(struct dataset *ds, void (*fn)(void *arg), void *arg)
{
    ds->released = fn;
    ds->released_arg = arg;
}

int dataset_warm_begin(struct dataset *ds)
{
    if (ds->warming)
        return -EBUSY;
    ds->warming = 1;
    return 0;
}

void dataset_warm_end(struct dataset *ds)
{
    ds->warming = 0;
}

struct dataset_auto *dataset_auto(struct dataset *ds)
{
    return &ds->autos;
}

/* Memory tier: see cache.h. */
#include "cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct cache_slots {
    struct cache_entry **slot; /* atomic pointers */
    uint32_t n;
};

struct cache {
    uint64_t budget;
    uint64_t bytes;    /* atomic: entries plus the slot arrays */
    uint64_t entries;  /* atomic */
    uint64_t rejected; /* atomic */
    struct cache_slots *ds;
    uint32_t ndatasets;
};

int cache_create(struct cache **out, uint64_t budget, const uint32_t *nsamples,
                 uint32_t ndatasets)
{
    struct cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->budget = budget;
    c->ndatasets = ndatasets;
    c->ds = calloc(ndatasets ? ndatasets : 1, sizeof(*c->ds));
    if (!c->ds) {
        free(c);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < ndatasets; i++) {
        c->ds[i].n = nsamples[i];
        c->ds[i].slot = calloc(nsamples[i] ? nsamples[i] : 1, sizeof(*c->ds[i].slot));
        if (!c->ds[i].slot) {
            cache_destroy(c);
            return -ENOMEM;
        }
        c->bytes += (uint64_t)nsamples[i] * sizeof(*c->ds[i].slot);
    }
    *out = c;
    return 0;
}

void cache_destroy(struct cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->ndatasets; i++) {
        if (!c->ds[i].slot)
            continue;
        for (uint32_t k = 0; k < c->ds[i].n; k++)
            free(c->ds[i].slot[k]);
        free(c->ds[i].slot);
    }
    free(c->ds);
    free(c);
}

static struct cache_entry **cache_slot(struct cache *c, uint32_t dataset, uint32_t sample)
{
    if (dataset >= c->ndatasets || sample >= c->ds[dataset].n)
        return NULL;
    return &c->ds[dataset].slot[sample];
}

const struct cache_entry *cache_get(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    if (!slot)
        return NULL;
    struct cache_entry *e = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return e && e->fingerprint == fingerprint ? e : NULL;
}

const struct cache_entry *cache_put(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample,
                                    const struct img *im)
{
    struct cache_entry **slot = cache_slot(c, dataset, sample);
    if (!slot || im->fmt != IMG_PIXELS)
        return NULL;
    uint64_t need = sizeof(struct cache_entry) + im->len;
    /* Reserve budget first, so concurrent writers never overshoot it. */
    uint64_t cur = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
    do {
        if (cur + need > c->budget) {
            __atomic_fetch_add(&c->rejected, 1, __ATOMIC_RELAXED);
            return NULL;
        }
    } while (!__atomic_compare_exchange_n(&c->bytes, &cur, cur + need, 1,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    struct cache_entry *e = malloc(need);
    if (!e) {
        __atomic_fetch_sub(&c->bytes, need, __ATOMIC_RELAXED);
        return NULL;
    }
    e->fingerprint = fingerprint;
    e->dataset = dataset;
    e->sample = sample;
    e->h = im->h;
    e->w = im->w;
    e->c = im->c;
    e->dtype = im->dtype;
    e->len = im->len;
    memcpy(e->data, im->data, im->len);

    struct cache_entry *expected = NULL;
    if (!__atomic_compare_exchange_n(slot, &expected, e, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_ACQUIRE)) {
        /* Someone published first: keep theirs. */
        free(e);
        __atomic_fetch_sub(&c->bytes, need, __ATOMIC_RELAXED);
        return expected->fingerprint == fingerprint ? expected : NULL;
    }
    __atomic_fetch_add(&c->entries, 1, __ATOMIC_RELAXED);
    return e;
}

void cache_entry_img(const struct cache_entry *e, struct img *im)
{
    memset(im, 0, sizeof(*im));
    im->fmt = IMG_PIXELS;
    im->h = e->h;
    im->w = e->w;
    im->c = e->c;
    im->dtype = e->dtype;
    im->data = (uint8_t *)e->data;
    im->len = e->len;
}

void cache_get_stats(struct cache *c, struct cache_stats *st)
{
    st->budget = c->budget;
    st->bytes = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
    st->entries = __atomic_load_n(&c->entries, __ATOMIC_RELAXED);
    st->rejected = __atomic_load_n(&c->rejected, __ATOMIC_RELAXED);
}

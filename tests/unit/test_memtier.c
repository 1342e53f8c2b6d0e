/* Unit tests for the memory tier (daemon/cache.h): the budget is never
 * exceeded, also by concurrent puts; a dataset that fits is admitted
 * whole; a larger one gets a fixed, hash-chosen subset whatever the order
 * samples come in; the budget is shared out by water-filling; an entry
 * size not known up front is learned from the first entry. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "proto.h"

#define SIDE 16
#define IMG_BYTES (SIDE * SIDE * 3)
#define FP 0x1234

static uint8_t pixels[IMG_BYTES];

static struct img image(uint32_t side)
{
    struct img im = {.fmt = IMG_PIXELS, .h = side, .w = side, .c = 3,
                     .dtype = PROTO_DTYPE_U8, .data = pixels, .len = (size_t)side * side * 3};
    return im;
}

/* Budget bytes of one entry of IMG_BYTES (40-byte header, 64-byte aligned). */
static uint64_t need(void)
{
    return (40 + IMG_BYTES + 63) / 64 * 64;
}

static uint32_t put_all(struct cache *c, uint32_t ds, uint32_t n, int reverse, uint8_t *in)
{
    struct img im = image(SIDE);
    uint32_t admitted = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t id = reverse ? n - 1 - k : k;
        struct cache_dataset_stats d;
        cache_get_dataset_stats(c, ds, &d);
        /* cache_admits foretells a put of a new sample once the size is known. */
        int known = d.entry_bytes && !cache_get(c, ds, FP, id);
        int want = cache_admits(c, ds, id, IMG_BYTES);
        const struct cache_entry *e = cache_put(c, ds, FP, id, &im);
        if (known)
            ck_assert_int_eq(want, e != NULL);
        if (e) {
            ck_assert_ptr_eq(cache_get(c, ds, FP, id), e);
            ck_assert_uint_eq(e->len, IMG_BYTES);
            admitted++;
        }
        if (in)
            in[id] = e != NULL;
    }
    return admitted;
}

START_TEST(test_fits_whole)
{
    struct cache_dataset ds[2] = {{100, IMG_BYTES}, {50, IMG_BYTES}};
    struct cache *c;
    ck_assert_int_eq(cache_create(&c, 200 * need() + 150 * 8, ds, 2), 0);
    ck_assert_uint_eq(put_all(c, 0, 100, 0, NULL), 100);
    ck_assert_uint_eq(put_all(c, 1, 50, 0, NULL), 50);
    struct cache_stats st;
    cache_get_stats(c, &st);
    ck_assert_uint_eq(st.entries, 150);
    ck_assert_uint_eq(st.index_bytes, 150 * 8);
    ck_assert_uint_eq(st.bytes, 150 * need() + 150 * 8);
    ck_assert_uint_eq(st.evictions, 0);
    struct cache_dataset_stats d;
    cache_get_dataset_stats(c, 0, &d);
    ck_assert(d.fraction == 1.0);
    ck_assert_uint_eq(d.entries, 100);
    /* A second put of a sample keeps the first entry. */
    struct img im = image(SIDE);
    ck_assert_ptr_eq(cache_put(c, 0, FP, 7, &im), cache_get(c, 0, FP, 7));
    ck_assert_ptr_null(cache_get(c, 0, FP + 1, 7)); /* other offline steps */
    cache_destroy(c);
}
END_TEST

/* Four times the budget: about a quarter admitted, the same subset in any
 * order, never over the budget, and not more puts later. */
START_TEST(test_subset_fixed)
{
    const uint32_t n = 4000;
    uint64_t budget = n / 4 * need() + n * 8;
    struct cache_dataset ds = {n, IMG_BYTES};
    uint8_t *a = calloc(n, 1), *b = calloc(n, 1);
    struct cache *c1, *c2;
    ck_assert_int_eq(cache_create(&c1, budget, &ds, 1), 0);
    ck_assert_int_eq(cache_create(&c2, budget, &ds, 1), 0);
    uint32_t n1 = put_all(c1, 0, n, 0, a);
    uint32_t n2 = put_all(c2, 0, n, 1, b);
    ck_assert_uint_eq(n1, n2);
    ck_assert_int_eq(memcmp(a, b, n), 0);
    ck_assert_msg(n1 > n / 4 * 0.9 && n1 <= n / 4, "%u admitted of %u", n1, n);
    struct cache_dataset_stats d;
    cache_get_dataset_stats(c1, 0, &d);
    ck_assert(d.fraction > 0.24 && d.fraction < 0.25);
    ck_assert_uint_eq(d.not_admitted + d.rejected + d.entries, n);
    /* Another epoch admits nothing new. */
    ck_assert_uint_eq(put_all(c1, 0, n, 0, NULL), n1);
    struct cache_stats st;
    cache_get_stats(c1, &st);
    ck_assert_uint_eq(st.entries, n1);
    ck_assert_uint_le(st.bytes, budget);
    cache_destroy(c1);
    cache_destroy(c2);
    free(a);
    free(b);
}
END_TEST

/* A small dataset is admitted whole, the larger one gets the rest. */
START_TEST(test_water_filling)
{
    struct cache_dataset ds[2] = {{100, IMG_BYTES}, {10000, IMG_BYTES}};
    uint64_t budget = 1100 * need() + 10100 * 8;
    struct cache *c;
    ck_assert_int_eq(cache_create(&c, budget, ds, 2), 0);
    struct cache_dataset_stats d0, d1;
    cache_get_dataset_stats(c, 0, &d0);
    cache_get_dataset_stats(c, 1, &d1);
    ck_assert(d0.fraction == 1.0);
    ck_assert_msg(d1.fraction > 0.097 && d1.fraction < 0.1, "fraction %g", d1.fraction);
    ck_assert_uint_eq(put_all(c, 0, 100, 0, NULL), 100);
    uint32_t big = put_all(c, 1, 10000, 0, NULL);
    ck_assert_msg(big > 900 && big <= 1000, "%u of the large dataset", big);
    cache_destroy(c);
}
END_TEST

/* An entry size not known up front is learned from the first entry. */
START_TEST(test_learned_size)
{
    struct cache_dataset ds = {400, 0};
    struct cache *c;
    ck_assert_int_eq(cache_create(&c, 100 * need() + 400 * 8, &ds, 1), 0);
    struct cache_dataset_stats d;
    cache_get_dataset_stats(c, 0, &d);
    ck_assert(d.fraction == 1.0);
    ck_assert_uint_eq(d.entry_bytes, 0);
    uint32_t n = put_all(c, 0, 400, 0, NULL);
    cache_get_dataset_stats(c, 0, &d);
    ck_assert_uint_eq(d.entry_bytes, IMG_BYTES);
    ck_assert(d.fraction > 0.24 && d.fraction < 0.25);
    ck_assert_msg(n > 80 && n <= 100, "%u admitted", n);
    cache_destroy(c);
}
END_TEST

struct putter {
    struct cache *c;
    uint32_t first, n;
};

static void *put_thread(void *arg)
{
    struct putter *p = arg;
    struct img im = image(SIDE);
    for (uint32_t k = 0; k < p->n; k++)
        cache_put(p->c, 0, FP, (p->first + k) % 2000, &im);
    return NULL;
}

/* Threads putting at once (overlapping samples) never take it over the
 * budget, and every sample has at most one entry. */
START_TEST(test_concurrent_budget)
{
    struct cache_dataset ds = {2000, 0}; /* learned: all admitted until known */
    uint64_t budget = 300 * need() + 2000 * 8 + 17;
    struct cache *c;
    pthread_t t[4];
    struct putter p[4];
    ck_assert_int_eq(cache_create(&c, budget, &ds, 1), 0);
    for (int i = 0; i < 4; i++) {
        p[i] = (struct putter){c, (uint32_t)i * 500, 1000};
        ck_assert_int_eq(pthread_create(&t[i], NULL, put_thread, &p[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct cache_stats st;
    cache_get_stats(c, &st);
    ck_assert_uint_le(st.bytes, budget);
    uint32_t present = 0;
    for (uint32_t id = 0; id < 2000; id++)
        present += cache_get(c, 0, FP, id) != NULL;
    ck_assert_uint_eq(present, st.entries);
    ck_assert_uint_le(st.entries, 300);
    cache_destroy(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memtier");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, test_fits_whole);
    tcase_add_test(tc, test_subset_fixed);
    tcase_add_test(tc, test_water_filling);
    tcase_add_test(tc, test_learned_size);
    tcase_add_test(tc, test_concurrent_budget);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

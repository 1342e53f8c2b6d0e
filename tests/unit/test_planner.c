/* Unit tests for the planner (daemon/planner.h): DistributedSampler
 * semantics, determinism, batching and argument checks. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

static const uint32_t sizes[] = {1, 7, 64, 1000, 1001};
static const uint32_t batch_sizes[] = {1, 3, 16, 64, 1000};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_WORLD 4u

static void make_ok(struct plan *p, uint32_t n, uint64_t seed, uint64_t epoch,
                    int shuffle, uint32_t rank, uint32_t world, uint32_t bs,
                    int drop_last)
{
    int rc = planner_make(p, n, seed, epoch, shuffle, rank, world, bs, drop_last);
    ck_assert_msg(rc == 0, "planner_make(n=%u, rank=%u, world=%u, bs=%u) = %d",
                  n, rank, world, bs, rc);
    ck_assert_ptr_nonnull(p->ids);
}

/* Every rank's ids, interleaved back into the padded global list that
 * DistributedSampler strides over: global[k * world + r] = rank r's ids[k].
 * Checks along the way that every rank gets ceil(n / world) ids. */
static uint32_t *global_list(uint32_t n, uint64_t seed, uint64_t epoch,
                             int shuffle, uint32_t world)
{
    uint64_t per_rank = ((uint64_t)n + world - 1) / world;
    uint32_t *g = calloc(per_rank * world, sizeof(*g));
    ck_assert_ptr_nonnull(g);
    for (uint32_t r = 0; r < world; r++) {
        struct plan p;
        make_ok(&p, n, seed, epoch, shuffle, r, world, 1, 0);
        ck_assert_msg(p.count == per_rank,
                      "n=%u world=%u rank=%u: count %llu, want %llu", n, world,
                      r, (unsigned long long)p.count,
                      (unsigned long long)per_rank);
        for (uint64_t k = 0; k < p.count; k++)
            g[k * world + r] = p.ids[k];
        planner_free(&p);
    }
    return g;
}

/* The first n entries are a permutation of 0..n-1 and the padding repeats
 * the head: global[j] == global[j mod n]. */
static void check_padded_permutation(const uint32_t *g, uint32_t n,
                                     uint32_t world)
{
    uint64_t total = ((uint64_t)n + world - 1) / world * world;
    uint8_t *seen = calloc(n, 1);
    ck_assert_ptr_nonnull(seen);
    for (uint32_t j = 0; j < n; j++) {
        ck_assert_msg(g[j] < n, "n=%u world=%u: id %u out of range", n, world,
                      g[j]);
        ck_assert_msg(!seen[g[j]], "n=%u world=%u: id %u twice", n, world, g[j]);
        seen[g[j]] = 1;
    }
    for (uint64_t j = n; j < total; j++)
        ck_assert_msg(g[j] == g[j % n],
                      "n=%u world=%u: padding at %llu is %u, want %u", n, world,
                      (unsigned long long)j, g[j], g[j % n]);
    free(seen);
}

START_TEST(test_cover_shuffled)
{
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (uint32_t world = 1; world <= MAX_WORLD; world++) {
            uint32_t *g = global_list(sizes[i], 42, 3, 1, world);
            check_padded_permutation(g, sizes[i], world);
            free(g);
        }
}
END_TEST

/* Counts how often each id appears across all ranks. */
START_TEST(test_each_id_once_when_divisible)
{
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (uint32_t world = 1; world <= MAX_WORLD; world++) {
            uint32_t n = sizes[i];
            uint32_t *hits = calloc(n, sizeof(*hits));
            uint64_t total = 0;
            ck_assert_ptr_nonnull(hits);
            for (uint32_t r = 0; r < world; r++) {
                struct plan p;
                make_ok(&p, n, 7, 1, 1, r, world, 16, 0);
                for (uint64_t k = 0; k < p.count; k++) {
                    ck_assert_uint_lt(p.ids[k], n);
                    hits[p.ids[k]]++;
                }
                total += p.count;
                planner_free(&p);
            }
            ck_assert_uint_eq(total, ((uint64_t)n + world - 1) / world * world);
            for (uint32_t id = 0; id < n; id++) {
                if (n % world == 0)
                    ck_assert_msg(hits[id] == 1, "n=%u world=%u: id %u seen %u times",
                                  n, world, id, hits[id]);
                else
                    ck_assert_msg(hits[id] >= 1, "n=%u world=%u: id %u missing",
                                  n, world, id);
            }
            free(hits);
        }
}
END_TEST

START_TEST(test_no_shuffle_order)
{
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (uint32_t world = 1; world <= MAX_WORLD; world++)
            for (uint32_t r = 0; r < world; r++) {
                uint32_t n = sizes[i];
                struct plan p;
                make_ok(&p, n, 99, 5, 0, r, world, 8, 0);
                for (uint64_t k = 0; k < p.count; k++)
                    ck_assert_msg(p.ids[k] == (k * world + r) % n,
                                  "n=%u world=%u rank=%u: ids[%llu] = %u", n,
                                  world, r, (unsigned long long)k, p.ids[k]);
                planner_free(&p);
            }
}
END_TEST

static int same_ids(const struct plan *a, const struct plan *b)
{
    return a->count == b->count &&
           memcmp(a->ids, b->ids, a->count * sizeof(*a->ids)) == 0;
}

START_TEST(test_deterministic)
{
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (uint32_t world = 1; world <= MAX_WORLD; world++) {
            struct plan a, b;
            make_ok(&a, sizes[i], 1234, 6, 1, world - 1, world, 5, 0);
            make_ok(&b, sizes[i], 1234, 6, 1, world - 1, world, 5, 0);
            ck_assert_msg(same_ids(&a, &b), "n=%u world=%u: two runs differ",
                          sizes[i], world);
            planner_free(&a);
            planner_free(&b);
        }
}
END_TEST

START_TEST(test_epoch_and_seed_change_order)
{
    for (size_t i = 0; i < NELEM(sizes); i++) {
        uint32_t n = sizes[i];
        if (n < 64)
            continue;
        for (uint32_t world = 1; world <= MAX_WORLD; world++) {
            struct plan base, other_epoch, other_seed, ordered;
            make_ok(&base, n, 5, 0, 1, 0, world, 32, 0);
            make_ok(&other_epoch, n, 5, 1, 1, 0, world, 32, 0);
            make_ok(&other_seed, n, 6, 0, 1, 0, world, 32, 0);
            make_ok(&ordered, n, 5, 0, 0, 0, world, 32, 0);
            ck_assert_msg(!same_ids(&base, &other_epoch),
                          "n=%u world=%u: epoch 0 and 1 give the same order", n, world);
            ck_assert_msg(!same_ids(&base, &other_seed),
                          "n=%u world=%u: seed 5 and 6 give the same order", n, world);
            ck_assert_msg(!same_ids(&base, &ordered),
                          "n=%u world=%u: shuffle gives the unshuffled order", n, world);
            planner_free(&base);
            planner_free(&other_epoch);
            planner_free(&other_seed);
            planner_free(&ordered);
        }
    }
}
END_TEST

/* Walks the batches of one plan: they tile ids[0, count) in order. */
static void check_batches(const struct plan *p, uint32_t bs, int drop_last,
                          uint64_t per_rank)
{
    uint64_t want_batches = drop_last ? per_rank / bs : (per_rank + bs - 1) / bs;
    ck_assert_msg(p->batches == want_batches,
                  "per_rank=%llu bs=%u drop_last=%d: %llu batches, want %llu",
                  (unsigned long long)per_rank, bs, drop_last,
                  (unsigned long long)p->batches,
                  (unsigned long long)want_batches);
    ck_assert_uint_eq(p->batch_size, bs);
    if (drop_last)
        ck_assert_uint_eq(p->count, want_batches * bs);
    else
        ck_assert_uint_eq(p->count, per_rank);

    uint64_t next = 0;
    for (uint64_t b = 0; b < p->batches; b++) {
        uint64_t first;
        uint32_t len;
        planner_batch(p, b, &first, &len);
        ck_assert_uint_eq(first, next);
        if (b + 1 < p->batches || drop_last)
            ck_assert_uint_eq(len, bs);
        else
            ck_assert_uint_eq(len, per_rank - b * bs);
        ck_assert_uint_gt(len, 0);
        next = first + len;
    }
    ck_assert_uint_eq(next, p->count);
}

START_TEST(test_batches)
{
    for (size_t i = 0; i < NELEM(sizes); i++)
        for (uint32_t world = 1; world <= MAX_WORLD; world++)
            for (size_t j = 0; j < NELEM(batch_sizes); j++)
                for (int drop_last = 0; drop_last <= 1; drop_last++) {
                    uint32_t n = sizes[i], bs = batch_sizes[j];
                    uint64_t per_rank = ((uint64_t)n + world - 1) / world;
                    struct plan full, p;
                    make_ok(&full, n, 3, 2, 1, world - 1, world, bs, 0);
                    make_ok(&p, n, 3, 2, 1, world - 1, world, bs, drop_last);
                    check_batches(&p, bs, drop_last, per_rank);
                    /* drop_last only cuts the tail; the order is the same. */
                    ck_assert(memcmp(full.ids, p.ids, p.count * sizeof(*p.ids)) == 0);
                    planner_free(&full);
                    planner_free(&p);
                }
}
END_TEST

START_TEST(test_short_last_batch)
{
    struct plan p;
    make_ok(&p, 1001, 0, 0, 0, 0, 1, 100, 0);
    ck_assert_uint_eq(p.batches, 11);
    uint64_t first;
    uint32_t len;
    planner_batch(&p, 10, &first, &len);
    ck_assert_uint_eq(first, 1000);
    ck_assert_uint_eq(len, 1);
    ck_assert_uint_eq(p.ids[first], 1000);
    planner_free(&p);

    make_ok(&p, 1001, 0, 0, 0, 0, 1, 100, 1);
    ck_assert_uint_eq(p.batches, 10);
    ck_assert_uint_eq(p.count, 1000);
    planner_batch(&p, 9, &first, &len);
    ck_assert_uint_eq(first, 900);
    ck_assert_uint_eq(len, 100);
    planner_free(&p);

    /* Fewer ids than one batch: drop_last leaves nothing. */
    make_ok(&p, 7, 0, 0, 1, 0, 1, 16, 1);
    ck_assert_uint_eq(p.batches, 0);
    ck_assert_uint_eq(p.count, 0);
    planner_free(&p);
}
END_TEST

START_TEST(test_invalid)
{
    struct plan p;
    ck_assert_int_eq(planner_make(&p, 0, 0, 0, 1, 0, 1, 16, 0), -EINVAL);
    ck_assert_int_eq(planner_make(&p, 10, 0, 0, 1, 0, 0, 16, 0), -EINVAL);
    ck_assert_int_eq(planner_make(&p, 10, 0, 0, 1, 2, 2, 16, 0), -EINVAL);
    ck_assert_int_eq(planner_make(&p, 10, 0, 0, 1, 5, 2, 16, 0), -EINVAL);
    ck_assert_int_eq(planner_make(&p, 10, 0, 0, 1, 0, 1, 0, 0), -EINVAL);
}
END_TEST

static Suite *planner_suite(void)
{
    Suite *s = suite_create("planner");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_cover_shuffled);
    tcase_add_test(tc, test_each_id_once_when_divisible);
    tcase_add_test(tc, test_no_shuffle_order);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_epoch_and_seed_change_order);
    tcase_add_test(tc, test_batches);
    tcase_add_test(tc, test_short_last_batch);
    tcase_add_test(tc, test_invalid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(planner_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

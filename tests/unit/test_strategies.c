/* Unit tests for the profiler's pure parts (daemon/profile.h; the daemon
 * side is tests/integration/test_profile.c): the legal strategies (random
 * steps never offline), the sample, the extrapolation and ranking (disk
 * budget, ties, weights, memory fraction), the wire messages, and
 * `split: auto` with the profile.* keys in the config. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "profile.h"
#include "proto.h"
#include "step.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* steps from "name:arg" items ("decode", "resize:256", ...). */
static uint32_t make_steps(struct step *steps, const char *const *spec, uint32_t n)
{
    char err[256], name[64];
    for (uint32_t i = 0; i < n; i++) {
        const char *colon = strchr(spec[i], ':');
        snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - spec[i]) : 63, spec[i]);
        ck_assert_msg(step_init_simple(&steps[i], name, colon ? colon + 1 : NULL, err,
                                       sizeof(err)) == 0, "%s: %s", spec[i], err);
    }
    uint32_t bad;
    ck_assert_msg(step_chain_init(steps, n, &bad, err, sizeof(err)) == 0, "%s", err);
    return n;
}

static uint32_t strategies_of(const char *const *spec, uint32_t n,
                              struct proto_profile_strategy *out)
{
    struct step steps[CONFIG_MAX_STEPS];
    make_steps(steps, spec, n);
    return profile_strategies(steps, n, out, PROFILE_MAX_STRATEGIES);
}

START_TEST(test_strategies_eval_pipeline)
{
    static const char *const spec[] = {"decode", "resize:256", "center_crop:224",
                                       "random_flip:0.5"};
    struct proto_profile_strategy st[PROFILE_MAX_STRATEGIES];
    uint32_t n = strategies_of(spec, NELEM(spec), st);
    ck_assert_uint_eq(n, 1 + 3 * PROFILE_NLEVELS);
    ck_assert_str_eq(st[0].name, "none");
    ck_assert_uint_eq(st[0].split, 0);
    ck_assert_str_eq(st[0].last_step, "");
    static const char *const names[] = {"decode/raw",    "decode/zstd:1",    "decode/zstd:3",
                                        "decode/zstd:9", "resize/raw",       "resize/zstd:1",
                                        "resize/zstd:3", "resize/zstd:9",    "center_crop/raw",
                                        "center_crop/zstd:1", "center_crop/zstd:3",
                                        "center_crop/zstd:9"};
    for (uint32_t i = 1; i < n; i++) {
        ck_assert_str_eq(st[i].name, names[i - 1]);
        ck_assert_uint_eq(st[i].split, 1 + (i - 1) / PROFILE_NLEVELS);
        static const int levels[] = PROFILE_LEVELS;
        ck_assert_int_eq(st[i].zstd_level, levels[(i - 1) % PROFILE_NLEVELS]);
    }
}
END_TEST

START_TEST(test_random_steps_never_offline)
{
    static const char *const spec[] = {"decode", "resize:256", "random_resized_crop:224",
                                       "random_flip:0.5", "to_float"};
    struct step steps[CONFIG_MAX_STEPS];
    struct proto_profile_strategy st[PROFILE_MAX_STRATEGIES];
    make_steps(steps, spec, NELEM(spec));
    uint32_t n = profile_strategies(steps, NELEM(spec), st, PROFILE_MAX_STRATEGIES);
    ck_assert_uint_eq(n, 1 + 2 * PROFILE_NLEVELS); /* split 0, 1, 2 only */
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_le(st[i].split, 2);
        for (uint32_t k = 0; k < st[i].split; k++)
            ck_assert_msg(!step_is_random(&steps[k]), "%s runs %s offline", st[i].name,
                          step_name(steps[k].kind));
    }
    /* A random step first: only everything online. */
    static const char *const spec2[] = {"decode", "random_flip:0.5", "resize:64",
                                        "center_crop:64"};
    n = strategies_of(spec2, NELEM(spec2), st);
    ck_assert_uint_eq(n, 1 + PROFILE_NLEVELS);
    ck_assert_uint_eq(st[n - 1].split, 1);
}
END_TEST

START_TEST(test_strategies_duplicate_and_capped)
{
    static const char *const spec[] = {"decode", "resize:512", "resize:48", "center_crop:48",
                                       "random_flip:0.5"};
    struct proto_profile_strategy st[PROFILE_MAX_STRATEGIES];
    uint32_t n = strategies_of(spec, NELEM(spec), st);
    ck_assert_uint_eq(n, 1 + 4 * PROFILE_NLEVELS);
    ck_assert_str_eq(st[1 + PROFILE_NLEVELS].name, "resize@2/raw");
    ck_assert_str_eq(st[1 + 2 * PROFILE_NLEVELS + 3].name, "resize@3/zstd:9");
    ck_assert_str_eq(st[1 + 3 * PROFILE_NLEVELS].name, "center_crop/raw");
    /* A short output array: no overrun. */
    struct step steps[CONFIG_MAX_STEPS];
    make_steps(steps, spec, NELEM(spec));
    ck_assert_uint_eq(profile_strategies(steps, NELEM(spec), st, 3), 3);
    ck_assert_uint_eq(profile_strategies(steps, NELEM(spec), st, 0), 0);
}
END_TEST

START_TEST(test_sample_size_and_ids)
{
    ck_assert_uint_eq(profile_sample_size(3200, 0, 0), PROFILE_MIN_SAMPLES);
    ck_assert_uint_eq(profile_sample_size(10000, 0, 0), 200);
    ck_assert_uint_eq(profile_sample_size(1281167, 0, 0), PROFILE_MAX_SAMPLES);
    ck_assert_uint_eq(profile_sample_size(20, 0, 0), 20);
    ck_assert_uint_eq(profile_sample_size(3200, 5, 100), 5);
    ck_assert_uint_eq(profile_sample_size(3200, 0, 100), 100);
    ck_assert_uint_eq(profile_sample_size(50, 500, 0), 50);

    static const uint32_t ns[] = {1, 7, 64, 1000, 1281167};
    static const uint32_t ks[] = {1, 3, 64, 300};
    for (size_t a = 0; a < NELEM(ns); a++) {
        for (size_t b = 0; b < NELEM(ks); b++) {
            uint32_t n = ns[a], k = profile_sample_size(n, ks[b], 0);
            uint32_t ids[300], again[300];
            profile_sample_ids(n, k, ids);
            profile_sample_ids(n, k, again);
            ck_assert_mem_eq(ids, again, k * sizeof(*ids));
            for (uint32_t i = 0; i < k; i++) {
                ck_assert_uint_lt(ids[i], n);
                if (i)
                    ck_assert_uint_gt(ids[i], ids[i - 1]); /* distinct, spread */
            }
            /* Evenly spread: the first in the first k-th, the last in the last. */
            ck_assert_uint_le(ids[0], n / k);
            ck_assert_uint_ge(ids[k - 1] + n / k + 1, n);
        }
    }
}
END_TEST

/* A measured strategy (rates on 1 worker of 1). */
static struct proto_profile_strategy measured(const char *name, uint32_t split,
                                              double mem_rate, double disk_rate,
                                              double stored, double raw, double offline)
{
    struct proto_profile_strategy s;
    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "%s", name);
    s.split = split;
    s.memory_rate = mem_rate;
    s.disk_rate = disk_rate;
    s.stored_bytes = stored;
    s.raw_bytes = raw;
    s.offline_s = offline;
    return s;
}

static const struct profile_scale roomy = {1000, 1, 1, 1ull << 40, 1ull << 40, 1};

START_TEST(test_rank_throughput)
{
    struct proto_profile_strategy st[] = {
        measured("none", 0, 100, 90, 0, 100e3, 0),
        measured("decode/raw", 1, 300, 200, 500e3, 500e3, 0.002),
        measured("crop/raw", 3, 1000, 800, 150e3, 150e3, 0.003),
        measured("resize/raw", 2, 600, 400, 200e3, 200e3, 0.0025),
    };
    uint32_t w = profile_rank(st, NELEM(st), &roomy, 0, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/raw");
    ck_assert_uint_eq(st[w].rank, 1);
    /* Extrapolation: everything fits memory, so the memory rate. */
    ck_assert_double_eq_tol(st[w].expected_rate, 1000, 1e-6);
    ck_assert_double_eq_tol(st[w].expected_epoch_s, 1.0, 1e-9);
    ck_assert_double_eq_tol(st[w].total_bytes, 150e6, 1);
    ck_assert_double_eq_tol(st[w].total_offline_s, 3.0, 1e-9);
    ck_assert_double_eq_tol(st[w].epoch_disk_s, 1000.0 / 800, 1e-9);
    /* The first epoch: the offline work, then the online steps, per sample;
     * split 0's reads the files from the disk. */
    ck_assert_double_eq_tol(st[w].cold_rate, 1.0 / (0.003 + 1.0 / 1000), 1e-6);
    ck_assert_double_eq_tol(st[0].cold_rate, 90, 1e-9);
    /* Ranks are a permutation of 1..n ordered by score. */
    uint32_t seen = 0;
    for (size_t i = 0; i < NELEM(st); i++) {
        ck_assert_uint_ge(st[i].rank, 1);
        ck_assert_uint_le(st[i].rank, NELEM(st));
        seen |= 1u << st[i].rank;
    }
    ck_assert_uint_eq(seen, 0x1e);
    ck_assert_uint_eq(st[0].rank, 4); /* none is the slowest */
    /* Rates scale with the workers: measured on 1 of 4. */
    struct profile_scale four = roomy;
    four.workers = 4;
    profile_rank(st, NELEM(st), &four, 1, 0, 0);
    ck_assert_double_eq_tol(st[w].expected_rate, 4000, 1e-6);
    ck_assert_double_eq_tol(st[w].total_offline_s, 0.75, 1e-9);
}
END_TEST

/* none, decode/raw and crop/raw as measured on 1 worker. */
static void three_strategies(struct proto_profile_strategy st[3])
{
    st[0] = measured("none", 0, 100, 90, 0, 100e3, 0);
    st[1] = measured("decode/raw", 1, 3000, 2000, 500e3, 500e3, 0.0002);
    st[2] = measured("crop/raw", 3, 10000, 8000, 100e3, 100e3, 0.001);
}

/* The disk's bandwidth under what the trial read or wrote: the rates keep
 * the trial's figures and their spreads reach down to the disk's. */
START_TEST(test_rank_disk_bandwidth)
{
    struct proto_profile_strategy st[3];
    three_strategies(st);
    struct profile_scale sc = roomy;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    double cold = st[1].cold_rate, disk_spread = st[1].disk_spread;
    ck_assert_double_eq(disk_spread, 0);
    sc.read_bw = 500e6;  /* decode/raw: 1,000 samples/s of the disk, half the trial's */
    sc.write_bw = 250e6; /* decode/raw: 500 written per second, under its cold 1,667 */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].epoch_disk_s, 1000.0 / 2000, 1e-9);
    ck_assert_double_eq_tol(st[1].disk_spread, 0.5, 1e-9);
    ck_assert_double_eq_tol(st[1].cold_rate, cold, 1e-9);
    ck_assert_double_eq_tol(st[1].cold_spread, 1 - 500 / cold, 1e-9);
    ck_assert(st[1].disk_interval > 0.5 && st[1].cold_interval > 1 - 500 / cold);
    /* crop/raw: 5,000 records read per second under its 8,000, 2,500 written
     * over its cold 909: only the disk rate's spread widens. */
    ck_assert_double_eq_tol(st[2].disk_spread, 1 - 5000.0 / 8000, 1e-9);
    ck_assert_double_eq(st[2].cold_spread, 0);
    /* Split 0 reads its source files (raw_bytes) from the disk: 5,000/s, over its 90. */
    ck_assert_double_eq(st[0].disk_spread, 0);
}
END_TEST

/* The trial's write-back goes on while a first epoch's workers compute: the
 * cold rate is the slower of the two, not their sum. */
START_TEST(test_rank_writeback)
{
    struct proto_profile_strategy st[3];
    three_strategies(st);
    struct profile_scale sc = roomy;
    sc.writeback_bw = 2e9; /* 4,000 decode/raw records/s, 20,000 crop/raw */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / (0.0002 + 1.0 / 3000), 1e-6);
    ck_assert_double_eq_tol(st[2].cold_rate, 1.0 / (0.001 + 1.0 / 10000), 1e-6);
    sc.writeback_bw = 50e6; /* crop/raw: 500 records/s, under its 909 */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[2].cold_rate, 500, 1e-6);
    ck_assert_double_eq_tol(st[1].cold_rate, 100, 1e-6); /* 500 KB each */
    ck_assert_double_eq_tol(st[0].cold_rate, 90, 1e-9); /* split 0 writes nothing */
}
END_TEST

START_TEST(test_rank_disk_budget)
{
    struct proto_profile_strategy st[] = {
        measured("none", 0, 100, 90, 0, 100e3, 0),
        measured("resize/raw", 2, 2000, 1500, 400e3, 400e3, 0.002),  /* fastest, largest */
        measured("crop/zstd:9", 3, 1000, 700, 100e3, 150e3, 0.004),
    };
    struct profile_scale sc = roomy;
    sc.disk_budget = 200e6; /* resize/raw needs 400 MB for 1000 samples */
    uint32_t w = profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/zstd:9");
    ck_assert(!st[1].feasible && !st[1].fits_disk);
    ck_assert_double_eq(st[1].score, -1);
    ck_assert_uint_eq(st[1].rank, 3); /* after every feasible one */
    ck_assert(st[2].feasible && st[2].fits_disk);
    /* Nothing cached fits: everything online, however slow. */
    sc.disk_budget = 1000;
    w = profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "none");
    ck_assert(st[0].feasible);
    /* Without a disk tier no storage limit applies (misses are recomputed). */
    sc.disk_tier = 0;
    w = profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "resize/raw");
    ck_assert(!st[1].fits_disk && st[1].feasible);
}
END_TEST

START_TEST(test_rank_ties_and_weights)
{
    /* Within PROFILE_TIE_PCT: the cheapest encoding, then the least storage. */
    struct proto_profile_strategy st[] = {
        measured("none", 0, 100, 90, 0, 100e3, 0),
        measured("resize/raw", 2, 1000, 900, 200e3, 200e3, 0.001),
        measured("crop/zstd:9", 3, 1030, 700, 110e3, 150e3, 0.005),
        measured("crop/raw", 3, 960, 800, 150e3, 150e3, 0.002),
    };
    st[2].zstd_level = 9;
    uint32_t w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/raw");
    ck_assert_uint_eq(st[w].rank, 1);
    ck_assert_uint_eq(st[2].rank, 2); /* the best score, second */
    /* Beyond the tie, throughput wins. */
    st[3].memory_rate = 700;
    w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "resize/raw"); /* in the tie with zstd:9: raw */
    st[1].memory_rate = 900;
    w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/zstd:9");
    /* Rates whose repetitions scattered by more than they differ tie:
     * crop/raw's 850 is 17% under the best, inside a +-10% spread each. */
    st[3].memory_rate = 850;
    st[1].memory_rate = 700;
    w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/zstd:9");
    st[2].memory_spread = st[3].memory_spread = 0.1;
    w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_eq(st[w].name, "crop/raw");
    /* A wild spread ties no more than PROFILE_TIE_SPREAD_PCT allows: "none",
     * 1,000 times slower and +-115%, does not win the tie as the cheapest. */
    st[0].memory_spread = st[0].disk_spread = 1.15;
    st[2].memory_spread = st[3].memory_spread = 0.54;
    w = profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    ck_assert_str_ne(st[w].name, "none");
    ck_assert_uint_gt(st[w].split, 0);
    /* The intervals: each spread with the model's error for its kind of
     * figure, as independent errors. They stay out of the tie (which took
     * the spreads, capped, above). */
    ck_assert_double_eq_tol(st[2].memory_interval,
                            sqrt(0.54 * 0.54 + PROFILE_ERR_MEMORY_PCT * PROFILE_ERR_MEMORY_PCT /
                                                   1e4), 1e-12);
    ck_assert_double_eq_tol(st[0].disk_interval,
                            sqrt(1.15 * 1.15 + PROFILE_ERR_DISK_PCT * PROFILE_ERR_DISK_PCT / 1e4),
                            1e-12);
    ck_assert_double_eq_tol(st[0].cold_interval, /* split 0: the disk rate's spread */
                            sqrt(1.15 * 1.15 + PROFILE_ERR_COLD_PCT * PROFILE_ERR_COLD_PCT / 1e4),
                            1e-12);
    ck_assert_double_eq_tol(profile_interval(0, 0.28), 0.28, 1e-12);
    ck_assert_double_eq_tol(profile_interval(NAN, 0.41), 0.41, 1e-12);
    st[0].memory_spread = st[0].disk_spread = 0;
    st[2].memory_spread = st[3].memory_spread = 0;
    profile_rank(st, NELEM(st), &roomy, 1, 0, 0);
    for (size_t i = 0; i < NELEM(st); i++) { /* no spread: the model's error alone */
        ck_assert_double_eq_tol(st[i].memory_interval, PROFILE_ERR_MEMORY_PCT / 100.0, 1e-12);
        ck_assert_double_eq_tol(st[i].disk_interval, PROFILE_ERR_DISK_PCT / 100.0, 1e-12);
        ck_assert_double_eq_tol(st[i].cold_interval, PROFILE_ERR_COLD_PCT / 100.0, 1e-12);
    }
    st[1].memory_rate = 900;
    /* Offline time only: nothing offline is free. */
    w = profile_rank(st, NELEM(st), &roomy, 0, 1, 0);
    ck_assert_str_eq(st[w].name, "none");
    /* Storage only: none stores nothing. */
    w = profile_rank(st, NELEM(st), &roomy, 0, 0, 1);
    ck_assert_str_eq(st[w].name, "none");
    /* Throughput and storage: the score adds the normalized terms. */
    profile_rank(st, NELEM(st), &roomy, 1, 0, 1);
    ck_assert_double_eq_tol(st[1].score, 900.0 / 1030 + (1 - 200.0 / 200.0), 1e-9);
    ck_assert_double_eq_tol(st[2].score, 1.0 + (1 - 110.0 / 200.0), 1e-9);
}
END_TEST

/* none, and decode/raw of 1 MB records, 10 ms offline, on 1 worker. */
static void none_and_decode(struct proto_profile_strategy st[2])
{
    st[0] = measured("none", 0, 100, 100, 0, 1e3, 0);
    st[1] = measured("decode/raw", 1, 1000, 100, 1e6, 1e6, 0.01);
}

START_TEST(test_rank_memory_fraction)
{
    /* 1000 samples of 1 MB: a 500 MB budget (less the 8 kB index) holds
     * about half; the rest comes from disk. */
    struct proto_profile_strategy st[2];
    none_and_decode(st);
    struct profile_scale sc = roomy;
    sc.memory_budget = 500e6;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    double f = (500e6 - 8000) / 1e9;
    ck_assert_double_eq_tol(st[1].memory_fraction, f, 1e-9);
    ck_assert(!st[1].fits_memory);
    ck_assert_double_eq_tol(st[1].expected_epoch_s, 1000 * (f / 1000 + (1 - f) / 100), 1e-6);
    /* Without a disk tier the misses are recomputed: offline time more. */
    sc.disk_tier = 0;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].expected_epoch_s,
                            1000 * (f / 1000 + (1 - f) * (0.01 + 1.0 / 1000)), 1e-6);
    ck_assert(st[0].fits_memory);
}
END_TEST

/* req's PROFILE frame is len bytes and reads back into *got; without its
 * last appended field (4 bytes) it is refused. */
static void appended_roundtrip(const struct proto_profile *req, size_t len,
                               struct proto_profile *got)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    proto_wbuf_init(&w);
    proto_put_profile(&w, req);
    ck_assert_uint_eq(w.len, len);
    proto_rbuf_init(&r, w.data, len - 4); /* the flag without its field */
    ck_assert_int_eq(proto_get_profile(&r, got), -PROTO_E_PROTO);
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile(&r, got), 0);
    proto_wbuf_free(&w);
}

START_TEST(test_proto_roundtrip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_profile req = {.samples = 32, .flags = PROTO_PROFILE_APPLY,
                                .w_throughput = 1, .w_offline = 0.25, .w_storage = 0.5};
    snprintf(req.dataset, sizeof(req.dataset), "imagenet");
    proto_wbuf_init(&w);
    proto_put_profile(&w, &req);
    ck_assert(!w.failed);
    struct proto_profile got;
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile(&r, &got), 0);
    ck_assert_str_eq(got.dataset, "imagenet");
    ck_assert_uint_eq(got.samples, 32);
    ck_assert_uint_eq(got.flags, PROTO_PROFILE_APPLY);
    ck_assert(got.w_offline == 0.25 && got.w_storage == 0.5 && got.w_throughput == 1);
    for (size_t cut = 0; cut < w.len; cut++) { /* every truncation is refused */
        proto_rbuf_init(&r, w.data, cut);
        ck_assert_int_eq(proto_get_profile(&r, &got), -PROTO_E_PROTO);
    }
    size_t plain = w.len;
    proto_wbuf_free(&w);
    /* VERIFY appends verify_top; without the flag the frame is as before
     * (what older daemons read). */
    req.flags = PROTO_PROFILE_VERIFY;
    req.verify_top = 3;
    appended_roundtrip(&req, plain + 4, &got);
    ck_assert_uint_eq(got.flags, PROTO_PROFILE_VERIFY);
    ck_assert_uint_eq(got.verify_top, 3);
    /* A batch size appends its field after verify_top, flagged by the
     * writer; none (0) leaves the frame as before. */
    req.batch_size = 256;
    appended_roundtrip(&req, plain + 8, &got);
    ck_assert_uint_eq(got.flags, PROTO_PROFILE_VERIFY | PROTO_PROFILE_BATCH);
    ck_assert_uint_eq(got.verify_top, 3);
    ck_assert_uint_eq(got.batch_size, 256);

    struct proto_profile_result res = {.samples = 3200, .sample_size = 64, .workers = 2,
                                       .profile_workers = 1, .memory_budget = 1 << 30,
                                       .seconds = 12.5, .winner = 1,
                                       .applied = PROTO_APPLIED_NOW, .count = 2};
    snprintf(res.dataset, sizeof(res.dataset), "bench");
    struct proto_profile_strategy st[2] = {measured("none", 0, 1, 2, 0, 3, 0),
                                           measured("center_crop/zstd:9", 3, 5, 6, 7, 8, 9)};
    st[1].zstd_level = 9;
    snprintf(st[1].last_step, sizeof(st[1].last_step), "center_crop");
    st[1].score = 0.75;
    st[1].cold_rate = 321.5;
    st[1].memory_spread = 0.125;
    st[1].disk_spread = 0.25;
    st[1].cold_spread = 0.0625;
    st[1].memory_interval = 0.4375; /* appended: read back like the rest */
    st[1].disk_interval = 0.5;
    st[1].cold_interval = 0.40625;
    st[1].rank = 1;
    st[1].feasible = 1;
    proto_wbuf_init(&w);
    proto_put_profile_result(&w, &res);
    proto_put_profile_strategy(&w, &st[0]);
    proto_put_profile_strategy(&w, &st[1]);
    ck_assert(!w.failed);
    struct proto_profile_result gres;
    struct proto_profile_strategy gst;
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_str_eq(gres.dataset, "bench");
    ck_assert_uint_eq(gres.count, 2);
    ck_assert_uint_eq(gres.applied, PROTO_APPLIED_NOW);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_str_eq(gst.name, "none");
    ck_assert_str_eq(gst.last_step, "");
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 1), 0);
    ck_assert_mem_eq(&gst, &st[1], sizeof(gst));
    /* With VERIFY, a verification per strategy follows the last strategy. */
    struct proto_profile_verified ver = {.verified = 1, .samples = 3200, .cold_rate = 410.5,
                                         .memory_rate = 41e3, .disk_rate = 9e3,
                                         .memory_fraction = 0.5, .stored_bytes = 4.8e8,
                                         .seconds = 3.25};
    struct proto_profile_verified none = {0}, gv;
    snprintf(none.note, sizeof(none.note), "not among the 1 best");
    proto_put_profile_verified(&w, &none);
    proto_put_profile_verified(&w, &ver);
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_verified(&r, &gv, 0), 0);
    ck_assert(!gv.verified);
    ck_assert_str_eq(gv.note, "not among the 1 best");
    ck_assert_int_eq(proto_get_profile_verified(&r, &gv, 1), 0);
    ck_assert_mem_eq(&gv, &ver, sizeof(gv));
    proto_rbuf_init(&r, w.data, w.len - 1); /* cut: refused */
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_verified(&r, &gv, 0), 0);
    ck_assert_int_eq(proto_get_profile_verified(&r, &gv, 1), -PROTO_E_PROTO);
    /* A winner past the strategies is malformed. */
    res.winner = 2;
    struct proto_wbuf w2;
    proto_wbuf_init(&w2);
    proto_put_profile_result(&w2, &res);
    proto_rbuf_init(&r, w2.data, w2.len);
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), -PROTO_E_PROTO);
    proto_wbuf_free(&w2);
    proto_wbuf_free(&w);

    struct proto_profile_progress pr = {.strategy = 3, .strategies = 13, .fraction = 0.25,
                                        .eta_s = -1};
    snprintf(pr.name, sizeof(pr.name), "resize/zstd:1");
    snprintf(pr.phase, sizeof(pr.phase), "disk");
    proto_wbuf_init(&w);
    proto_put_profile_progress(&w, &pr);
    struct proto_profile_progress gpr;
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile_progress(&r, &gpr), 0);
    ck_assert_mem_eq(&gpr, &pr, sizeof(pr));
    proto_wbuf_free(&w);
    ck_assert_str_eq(proto_type_name(PROTO_PROFILE_RESULT), "PROFILE_RESULT");
}
END_TEST

static int load(struct config *c, const char *yaml, char *err, size_t len)
{
    return config_load_string(c, yaml, strlen(yaml), "test.yaml", err, len);
}

START_TEST(test_config_split_auto)
{
    struct config c;
    char err[512];
    ck_assert_msg(load(&c,
                       "profile: {samples: 32, worker_share: 25, memory: 64MiB}\n"
                       "datasets:\n"
                       "  - name: a\n"
                       "    root: /tmp\n"
                       "    steps: [decode, {resize: 64}, {center_crop: 64}, random_flip, "
                       "to_float]\n"
                       "    split: auto\n"
                       "  - name: b\n"
                       "    root: /tmp\n"
                       "    split: resize\n",
                       err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c.profile_samples, 32);
    ck_assert_uint_eq(c.profile_worker_share, 25);
    ck_assert_uint_eq(c.profile_memory, 64ull << 20);
    ck_assert_int_eq(c.datasets[0].split_auto, 1);
    ck_assert_uint_eq(c.datasets[0].split, 3); /* the default until chosen */
    ck_assert_int_eq(c.datasets[1].split_auto, 0);
    ck_assert_uint_eq(c.datasets[1].split, 2);
    ck_assert(!config_dataset_same(&c.datasets[0], &c.datasets[1]));
    config_free(&c);

    ck_assert_int_eq(load(&c, "", err, sizeof(err)), 0);
    ck_assert_uint_eq(c.profile_samples, 0);
    ck_assert_uint_eq(c.profile_worker_share, 100); /* the daemon's real worker count */
    ck_assert_uint_eq(c.profile_memory, 256ull << 20);
    config_free(&c);

    ck_assert_int_eq(load(&c, "profile: {worker_share: 0}\n", err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "profile.worker_share"), "%s", err);
    config_free(&c);
    ck_assert_int_eq(load(&c, "profile: {sample: 3}\n", err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "profile.sample"), "%s", err);
    config_free(&c);
    ck_assert_int_eq(load(&c, "datasets: [{name: a, root: /tmp, split: automatic}]\n", err,
                          sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "split"), "%s", err);
    config_free(&c);
}
END_TEST

/* A first epoch's read-ahead reads the source files while its workers
 * compute: the source read bounds the cold rate, it does not add to it;
 * split 0 keeps its disk rate. */
START_TEST(test_rank_source_read)
{
    struct proto_profile_strategy st[3];
    three_strategies(st);
    struct profile_scale sc = roomy;
    sc.source_s = 0.0001; /* 10,000 files/s: under every cold compute time */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / (0.0002 + 1.0 / 3000), 1e-6);
    ck_assert_double_eq_tol(st[2].cold_rate, 1.0 / (0.001 + 1.0 / 10000), 1e-6);
    sc.source_s = 0.002; /* 500 files/s: the read binds both */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].cold_rate, 500, 1e-6);
    ck_assert_double_eq_tol(st[2].cold_rate, 500, 1e-6);
    ck_assert_double_eq_tol(st[0].cold_rate, 90, 1e-9);
}
END_TEST

/* The offline phase admitted each of its records to memory; a first epoch
 * of a dataset the budget holds a fraction f of admits only those: its
 * cold compute time is (1 - f) admissions less. */
START_TEST(test_rank_admission_fraction)
{
    /* 1000 samples of 1 MB records, admitted at 1 GB/s: 1 ms each of the
     * 10 ms offline. */
    struct proto_profile_strategy st[2];
    none_and_decode(st);
    struct profile_scale sc = roomy;
    sc.admit_bw = 1e9;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0); /* it all fits: every record admitted */
    ck_assert_double_eq_tol(st[1].memory_fraction, 1, 1e-12);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / (0.01 + 1.0 / 1000), 1e-6);
    sc.memory_budget = 250e6 + 8000; /* a quarter of it, past the 8 kB index */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].memory_fraction, 0.25, 1e-9);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / (0.01 - 0.75 * 0.001 + 1.0 / 1000), 1e-6);
    sc.workers = 2; /* worker time: halved with the rest of the offline time */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / ((0.01 - 0.75 * 0.001) / 2 + 1.0 / 2000),
                            1e-6);
    sc.admit_bw = 0; /* not measured (no memory tier): as the trial measured */
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(st[1].cold_rate, 1.0 / (0.01 / 2 + 1.0 / 2000), 1e-6);
    ck_assert_double_eq_tol(st[0].cold_rate, 200, 1e-9); /* split 0 admits nothing */
}
END_TEST

/* Whole epochs: the last round of batches leaves workers waiting. */
START_TEST(test_epoch_busy)
{
    ck_assert_double_eq_tol(profile_epoch_busy(3200, 64, 2), 1.0, 1e-12); /* 25 even rounds */
    /* 600 clips: 10 batches, the last of 24; 5 rounds for 4.6875 rounds' work. */
    ck_assert_double_eq_tol(profile_epoch_busy(600, 64, 2), 4.6875 / 5, 1e-12);
    /* 9 batches on 2 workers: the 9th alone in its round, and full. */
    ck_assert_double_eq_tol(profile_epoch_busy(576, 64, 2), 4.5 / 5, 1e-12);
    /* A short 9th alone: 4 rounds and 10/64 of one for 4.078 rounds' work. */
    ck_assert_double_eq_tol(profile_epoch_busy(522, 64, 2), (522.0 / 128) / (4 + 10.0 / 64),
                            1e-12);
    ck_assert_double_eq_tol(profile_epoch_busy(64, 64, 2), 0.5, 1e-12); /* one batch */
    ck_assert_double_eq_tol(profile_epoch_busy(10, 64, 4), 0.25, 1e-12);
    ck_assert_double_eq_tol(profile_epoch_busy(100, 64, 4), (100.0 / 256) / 1, 1e-12);
    /* Not modelled: no batch size, one worker, no samples. */
    ck_assert_double_eq_tol(profile_epoch_busy(600, 0, 2), 1.0, 1e-12);
    ck_assert_double_eq_tol(profile_epoch_busy(600, 64, 1), 1.0, 1e-12);
    ck_assert_double_eq_tol(profile_epoch_busy(0, 64, 2), 1.0, 1e-12);

    /* The ranking takes it on the memory, buffered disk and cold rates; an
     * O_DIRECT disk rate has its epoch's start and end measured already. */
    struct proto_profile_strategy st[3];
    three_strategies(st);
    struct profile_scale sc = roomy;
    sc.samples = 600;
    sc.workers = sc.profile_workers = 2;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    double mem = 600 / st[2].epoch_memory_s, disk = 600 / st[2].epoch_disk_s;
    double cold = st[2].cold_rate, none = 600 / st[0].epoch_disk_s;
    sc.batch = 64;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    double busy = 4.6875 / 5;
    ck_assert_double_eq_tol(600 / st[2].epoch_memory_s, mem * busy, 1e-6);
    ck_assert_double_eq_tol(600 / st[2].epoch_disk_s, disk * busy, 1e-6);
    ck_assert_double_eq_tol(st[2].cold_rate, cold * busy, 1e-6);
    ck_assert_double_eq_tol(st[2].expected_rate, mem * busy, 1e-6);
    sc.disk_direct = 1;
    profile_rank(st, NELEM(st), &sc, 1, 0, 0);
    ck_assert_double_eq_tol(600 / st[2].epoch_disk_s, disk, 1e-6);
    ck_assert_double_eq_tol(600 / st[0].epoch_disk_s, none * busy, 1e-6); /* source files */
}
END_TEST

/* PROTO_PROFILE_DISK: the disk's figures come last, after the strategies
 * (and verifications); nothing may follow them, and a cut one is refused. */
START_TEST(test_proto_profile_disk)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_profile_strategy st = {.name = "none"}, gst;
    struct proto_profile_result res = {.dataset = "bench", .samples = 3200, .count = 1},
                                gres;
    struct proto_profile_disk d = {.read_bw = 1.25e9, .write_bw = 1.5e9, .probe_bytes = 268e6,
                                   .probe_depth = 64, .writeback_bw = 1.75e9,
                                   .source_s = 6.25e-5, .admit_bw = 1.5e9},
                              gd;
    proto_wbuf_init(&w);
    proto_put_profile_result(&w, &res);
    proto_put_profile_strategy(&w, &st);
    proto_put_profile_disk(&w, &d);
    ck_assert(!w.failed);
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_uint_gt(proto_remaining(&r), 0);
    ck_assert_int_eq(proto_get_profile_disk(&r, &gd), 0);
    ck_assert(gd.read_bw == d.read_bw && gd.write_bw == d.write_bw &&
              gd.probe_bytes == d.probe_bytes && gd.probe_depth == d.probe_depth &&
              gd.writeback_bw == d.writeback_bw && gd.source_s == d.source_s &&
              gd.admit_bw == d.admit_bw);
    proto_rbuf_init(&r, w.data, w.len - 1); /* cut */
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_disk(&r, &gd), -PROTO_E_PROTO);
    proto_put_u32(&w, 7); /* something after it */
    proto_rbuf_init(&r, w.data, w.len);
    ck_assert_int_eq(proto_get_profile_result(&r, &gres), 0);
    ck_assert_int_eq(proto_get_profile_strategy(&r, &gst, 0), 0);
    ck_assert_int_eq(proto_get_profile_disk(&r, &gd), -PROTO_E_PROTO);
    proto_wbuf_free(&w);
}
END_TEST

static Suite *profile_suite(void)
{
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_strategies_eval_pipeline);
    tcase_add_test(tc, test_random_steps_never_offline);
    tcase_add_test(tc, test_strategies_duplicate_and_capped);
    tcase_add_test(tc, test_sample_size_and_ids);
    tcase_add_test(tc, test_rank_throughput);
    tcase_add_test(tc, test_rank_disk_budget);
    tcase_add_test(tc, test_rank_disk_bandwidth);
    tcase_add_test(tc, test_rank_writeback);
    tcase_add_test(tc, test_rank_ties_and_weights);
    tcase_add_test(tc, test_rank_memory_fraction);
    tcase_add_test(tc, test_proto_roundtrip);
    tcase_add_test(tc, test_config_split_auto);
    tcase_add_test(tc, test_rank_source_read);
    tcase_add_test(tc, test_rank_admission_fraction);
    tcase_add_test(tc, test_epoch_busy);
    tcase_add_test(tc, test_proto_profile_disk);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(profile_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

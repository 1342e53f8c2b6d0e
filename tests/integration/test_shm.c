/*
 * Shared-memory transport: batches written by the daemon's workers into a
 * memfd ring the client maps, against a real prestod.
 *
 *  - the same (seed, epoch) gives the same bytes through shared memory and
 *    through the socket, and the stream really used the ring;
 *  - a slot the client holds is never written while it holds it;
 *  - a client killed mid-epoch frees its ring (stats), and the daemon serves on;
 *  - 8 concurrent streams (ranks of one job, and separate seeds) each get a
 *    correct, complete epoch;
 *  - a client that holds every slot and releases none is dropped after
 *    limits.release_timeout, with a reason, and its ring is freed;
 *  - a RELEASE of a slot the client does not hold is refused, the stream
 *    goes on; the ring's file is sealed against shrinking;
 *  - a stream opened at start_batch k (a resumed epoch) gives the
 *    uninterrupted epoch's batches from k on, byte for byte and with their
 *    indices, for ranks of a world too, computing nothing before k; past
 *    the end it gives none;
 *  - copy_when_full: a client that keeps every batch completes the epoch,
 *    the batches that found every other slot held are copies (counted by
 *    the client and the daemon), and the bytes are the epoch's;
 *  - an interruptible stream returns PRESTO_E_INTR from a wait a signal
 *    handler interrupts, and goes on after it; a stream closed with batches
 *    held stops at once, the batches staying valid until released.
 *
 * Every test gets a daemon of its own (checked fixture), so stats start at 0.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define DATASET "shm"
#define NSAMPLES 48
#define NCLASSES 3
#define SIDE 224
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)
#define BATCH 4
#define NSTREAMS 8

static struct harness H;
static char data_root[HARNESS_PATH_MAX];

static void daemon_setup(void)
{
    char ds[HARNESS_PATH_MAX + 16], conf[HARNESS_PATH_MAX];
    /* A short release timeout for the drop case; the others release at once. */
    ck_assert_int_eq(harness_write_file(&H, "shm.yaml", "limits:\n  release_timeout: 2\n",
                                        conf, sizeof(conf)), 0);
    snprintf(ds, sizeof(ds), "%s=%s", DATASET, data_root);
    const char *args[] = {"-c", conf, "-d", ds, "-w", "2", NULL};
    ck_assert_msg(harness_start(&H, args) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    int rc = harness_stop(&H);
    if (rc != 0)
        fprintf(stderr, "prestod exited with status %d after SIGTERM\n", rc);
}

static void expect_stat(const char *parent, const char *key, double want)
{
    double v = -1;
    int rc = harness_wait_stat(&H, parent, key, want, 5000, &v);
    ck_assert_msg(rc == 0 && v == want, "stats %s.%s = %g, want %g", parent ? parent : "",
                  key, v, want);
}

static presto_stream_opts_t opts(uint64_t seed, uint32_t transport)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = DATASET;
    o.batch_size = BATCH;
    o.seed = seed;
    o.epoch = 1;
    o.transport = transport;
    return o;
}

struct epoch {
    uint64_t samples, batches, fnv;
    int64_t labels[NSAMPLES];
    int err;
    char msg[256];
};

/* Pulls a whole epoch through p (no check library calls: runs on threads
 * too). */
static void pull_on(presto_t *p, const presto_stream_opts_t *o, uint32_t want_transport,
                    struct epoch *e)
{
    presto_stream_t *s;
    presto_stream_info_t info;
    presto_batch_t b;
    int rc;

    memset(e, 0, sizeof(*e));
    e->fnv = HARNESS_FNV_INIT;
    if ((rc = presto_stream_open(p, o, &s)) < 0) {
        e->err = rc;
        snprintf(e->msg, sizeof(e->msg), "open: %s", presto_errmsg(p));
        return;
    }
    presto_stream_info(s, &info);
    if (info.transport != want_transport) {
        e->err = -1;
        snprintf(e->msg, sizeof(e->msg), "transport %u, want %u", info.transport,
                 want_transport);
    }
    while (e->err == 0 && (rc = presto_next(s, &b)) > 0) {
        if (b.size != b.n * SAMPLE_BYTES || b.index != e->batches ||
            e->samples + b.n > NSAMPLES) {
            e->err = -1;
            snprintf(e->msg, sizeof(e->msg), "batch %llu: %u samples in %zu bytes",
                     (unsigned long long)b.index, b.n, b.size);
            break;
        }
        e->fnv = harness_fnv(e->fnv, b.labels, b.n * sizeof(b.labels[0]));
        e->fnv = harness_fnv(e->fnv, b.data, b.size);
        memcpy(e->labels + e->samples, b.labels, b.n * sizeof(b.labels[0]));
        e->samples += b.n;
        e->batches++;
        /* no presto_release: the next presto_next gives the slot back */
    }
    if (e->err == 0 && rc < 0) {
        e->err = rc;
        snprintf(e->msg, sizeof(e->msg), "next: %s", presto_stream_errmsg(s));
    }
    presto_stream_close(s);
}

/* The same on a client handle of its own. */
static void pull(const presto_stream_opts_t *o, uint32_t want_transport, struct epoch *e)
{
    presto_t *p;
    int rc = presto_connect(H.sock, &p);
    if (rc < 0) {
        memset(e, 0, sizeof(*e));
        e->err = rc;
        snprintf(e->msg, sizeof(e->msg), "connect: %s", presto_errmsg(p));
    } else {
        pull_on(p, o, want_transport, e);
    }
    presto_close(p);
}

static void expect_same(const struct epoch *a, const struct epoch *b, const char *what)
{
    ck_assert_msg(a->err == 0, "%s: %s", what, a->msg);
    ck_assert_msg(b->err == 0, "%s: %s", what, b->msg);
    ck_assert_uint_eq(a->samples, b->samples);
    ck_assert_msg(a->fnv == b->fnv, "%s: %016llx against %016llx", what,
                  (unsigned long long)a->fnv, (unsigned long long)b->fnv);
}

/* Epoch after epoch on one client: the second gets the first one's ring
 * back (no new mapping, no fresh pages), the same bytes as a fresh stream;
 * another geometry gets a new ring; presto_close lets go of it; a kept
 * connection the daemon closed (restart) is replaced without an error. */
START_TEST(test_next_epoch_reuses_the_ring)
{
    presto_t *p;
    struct epoch a, b, fresh;
    presto_stream_opts_t o = opts(8, PRESTO_TRANSPORT_SHM), sock;

    ck_assert_int_eq(harness_connect(&H, &p), 0);
    pull_on(p, &o, PRESTO_TRANSPORT_SHM, &a);
    o.epoch = 2;
    pull_on(p, &o, PRESTO_TRANSPORT_SHM, &b);
    expect_stat("shm", "rings_kept", 1);
    expect_stat("shm", "rings", 1); /* kept for a third epoch */
    /* The reference through the socket (which never takes a kept ring). */
    sock = o;
    sock.transport = PRESTO_TRANSPORT_SOCKET;
    pull(&sock, PRESTO_TRANSPORT_SOCKET, &fresh);
    expect_same(&b, &fresh, "a kept ring against the socket");
    ck_assert_msg(a.fnv != b.fnv, "epochs 1 and 2 gave the same bytes");
    expect_stat("shm", "rings", 1);

    o.batch_size = sock.batch_size = BATCH * 2; /* another slot size: a new ring */
    pull_on(p, &o, PRESTO_TRANSPORT_SHM, &b);
    pull(&sock, PRESTO_TRANSPORT_SOCKET, &fresh);
    expect_same(&b, &fresh, "a new geometry");
    expect_stat("shm", "rings_kept", 1);
    expect_stat("shm", "rings", 1); /* the old one went, the new one is kept */
    presto_close(p);
    expect_stat("shm", "rings", 0);

    /* A kept connection whose daemon went away. */
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    o.transport = PRESTO_TRANSPORT_SHM;
    pull_on(p, &o, PRESTO_TRANSPORT_SHM, &a);
    char path[sizeof(H.sock)];
    memcpy(path, H.sock, sizeof(path));
    daemon_teardown();
    daemon_setup(); /* on a new socket, moved to where the client knows it */
    ck_assert_int_eq(rename(H.sock, path), 0);
    memcpy(H.sock, path, sizeof(path));
    pull_on(p, &o, PRESTO_TRANSPORT_SHM, &b);
    expect_same(&a, &b, "after a restart");
    presto_close(p);
}
END_TEST

START_TEST(test_same_bytes_both_transports)
{
    presto_stream_opts_t o = opts(11, PRESTO_TRANSPORT_SHM);
    struct epoch a, b;
    pull(&o, PRESTO_TRANSPORT_SHM, &a);
    ck_assert_msg(a.err == 0, "%s", a.msg);
    o.transport = PRESTO_TRANSPORT_SOCKET;
    pull(&o, PRESTO_TRANSPORT_SOCKET, &b);
    ck_assert_msg(b.err == 0, "%s", b.msg);
    ck_assert_uint_eq(a.samples, NSAMPLES);
    ck_assert_uint_eq(b.samples, NSAMPLES);
    ck_assert_msg(a.fnv == b.fnv, "shared memory %016llx, socket %016llx",
                  (unsigned long long)a.fnv, (unsigned long long)b.fnv);
    /* Served from the ring: one shm stream, every slot came back or was
     * let go with the stream. */
    expect_stat("shm", "streams_total", 1);
    expect_stat("shm", "fallbacks", 0);
    expect_stat("shm", "rings", 0);
    expect_stat("shm", "ring_bytes", 0);
}
END_TEST

/* Holds batch 0 while the rest of the epoch streams through the other slots
 * many times over: its bytes and its place never change. */
START_TEST(test_held_slot_never_overwritten)
{
    presto_t *p;
    presto_stream_t *s;
    presto_stream_info_t info;
    presto_batch_t held, b;
    presto_stream_opts_t o = opts(5, PRESTO_TRANSPORT_SHM);
    o.prefetch = 3; /* a ring of 3 slots: the other 2 carry the other 11 batches */
    o.manual_release = 1;

    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), 0);
    presto_stream_info(s, &info);
    ck_assert_uint_eq(info.transport, PRESTO_TRANSPORT_SHM);
    ck_assert_uint_eq(info.slots, 3);
    ck_assert_int_eq(presto_next(s, &held), 1);
    uint8_t *copy = malloc(held.size);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, held.data, held.size);
    int64_t labels[BATCH];
    memcpy(labels, held.labels, sizeof(labels));

    unsigned later = 0;
    int rc;
    while ((rc = presto_next(s, &b)) > 0) {
        ck_assert_msg(b.data != held.data, "batch %llu landed in the held slot",
                      (unsigned long long)b.index);
        ck_assert_msg((const uint8_t *)b.data + b.size <= (const uint8_t *)held.data ||
                          (const uint8_t *)held.data + held.size <= (const uint8_t *)b.data,
                      "batch %llu overlaps the held slot", (unsigned long long)b.index);
        ck_assert_msg(memcmp(held.data, copy, held.size) == 0,
                      "the held batch changed while batch %llu came",
                      (unsigned long long)b.index);
        later++;
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "next: %s", presto_stream_errmsg(s));
    ck_assert_uint_eq(later, NSAMPLES / BATCH - 1);
    ck_assert(memcmp(held.data, copy, held.size) == 0);
    ck_assert(memcmp(held.labels, labels, sizeof(labels)) == 0);
    presto_release(s, &held);
    ck_assert_ptr_null(held.data);
    free(copy);
    presto_stream_close(s);
    presto_close(p);
}
END_TEST

START_TEST(test_killed_client_frees_ring)
{
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* a trainer that dies holding a batch, mid-epoch */
        presto_t *p;
        presto_stream_t *s;
        presto_batch_t b;
        presto_stream_opts_t o = opts(3, PRESTO_TRANSPORT_SHM);
        char ok = presto_connect(H.sock, &p) == 0 && presto_stream_open(p, &o, &s) == 0 &&
                  presto_next(s, &b) == 1 ? 'y' : 'n';
        if (write(pipefd[1], &ok, 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    close(pipefd[1]);
    char ok = 0;
    ck_assert_int_eq(read(pipefd[0], &ok, 1), 1);
    close(pipefd[0]);
    ck_assert_msg(ok == 'y', "the child could not pull a batch");
    double rings = -1;
    ck_assert_int_eq(harness_stat(&H, "shm", "rings", &rings), 0);
    ck_assert_msg(rings == 1, "shm.rings %g while the child streams", rings);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    expect_stat("shm", "rings", 0);
    expect_stat("shm", "ring_bytes", 0);
    expect_stat(NULL, "streams", 0);
    expect_stat("memory", "stream_buffers", 0);

    struct epoch e;
    presto_stream_opts_t o = opts(3, PRESTO_TRANSPORT_SHM);
    pull(&o, PRESTO_TRANSPORT_SHM, &e);
    ck_assert_msg(e.err == 0, "%s", e.msg);
    ck_assert_uint_eq(e.samples, NSAMPLES);
}
END_TEST

struct job {
    presto_stream_opts_t o;
    struct epoch e;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    pull(&j->o, PRESTO_TRANSPORT_SHM, &j->e);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Streams 0-3: four ranks of one job (seed 9); 4-7: separate jobs (seeds
 * 20-23), each checked against the same stream pulled alone. */
START_TEST(test_eight_concurrent_streams)
{
    static struct job jobs[NSTREAMS], alone[NSTREAMS];
    pthread_t th[NSTREAMS];
    for (int i = 0; i < NSTREAMS; i++) {
        jobs[i].o = opts(i < 4 ? 9 : 16 + (uint64_t)i, PRESTO_TRANSPORT_SHM);
        if (i < 4) {
            jobs[i].o.rank = (uint32_t)i;
            jobs[i].o.world = 4;
        }
        alone[i] = jobs[i];
    }
    for (int i = 0; i < NSTREAMS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    for (int i = 0; i < NSTREAMS; i++)
        pthread_join(th[i], NULL);
    expect_stat("shm", "streams_total", NSTREAMS);

    int64_t all[NSAMPLES], want[NSAMPLES];
    uint64_t n = 0;
    for (int i = 0; i < NSTREAMS; i++) {
        ck_assert_msg(jobs[i].e.err == 0, "stream %d: %s", i, jobs[i].e.msg);
        ck_assert_uint_eq(jobs[i].e.samples, i < 4 ? NSAMPLES / 4 : NSAMPLES);
        run_job(&alone[i]);
        ck_assert_msg(alone[i].e.err == 0, "stream %d alone: %s", i, alone[i].e.msg);
        ck_assert_msg(jobs[i].e.fnv == alone[i].e.fnv,
                      "stream %d: other bytes when pulled with 7 others", i);
        if (i < 4) {
            memcpy(all + n, jobs[i].e.labels, jobs[i].e.samples * sizeof(int64_t));
            n += jobs[i].e.samples;
        }
    }
    /* The 4 ranks cover the dataset once: the same labels as one stream. */
    memcpy(want, jobs[4].e.labels, sizeof(want));
    qsort(all, NSAMPLES, sizeof(all[0]), cmp_i64);
    qsort(want, NSAMPLES, sizeof(want[0]), cmp_i64);
    ck_assert_uint_eq(n, NSAMPLES);
    ck_assert(memcmp(all, want, sizeof(all)) == 0);
    expect_stat("shm", "rings", 0);
}
END_TEST

/* Opens a stream on a ring of 2 slots (manual_release; interruptible as
 * asked) and takes both slots' batches: the daemon has nothing to send. */
static void hold_both_slots(presto_t **p, presto_stream_t **s, presto_batch_t b[2],
                            int interruptible)
{
    presto_stream_opts_t o = opts(2, PRESTO_TRANSPORT_SHM);
    o.prefetch = 2;
    o.manual_release = 1;
    o.interruptible = interruptible;
    ck_assert_int_eq(harness_connect(&H, p), 0);
    ck_assert_int_eq(presto_stream_open(*p, &o, s), 0);
    ck_assert_int_eq(presto_next(*s, &b[0]), 1);
    ck_assert_int_eq(presto_next(*s, &b[1]), 1);
}

START_TEST(test_holding_every_slot_gets_dropped)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b[2], c;

    hold_both_slots(&p, &s, b, 0);
    /* Both slots held: the stream stalls, and after release_timeout (2 s)
     * the daemon drops this client. */
    int rc = presto_next(s, &c);
    ck_assert_msg(rc == -PRESTO_E_LIMIT, "next while holding every slot: %d %s", rc,
                  presto_stream_errmsg(s));
    ck_assert_msg(strstr(presto_stream_errmsg(s), "released none") != NULL, "message: %s",
                  presto_stream_errmsg(s));
    presto_release(s, &b[0]);
    presto_release(s, &b[1]);
    presto_stream_close(s);
    presto_close(p);
    expect_stat("shm", "release_timeouts", 1);
    expect_stat("shm", "rings", 0);
    expect_stat(NULL, "connections", 1); /* the stats request's own */
}
END_TEST

/* ---- resuming, copies, interruptions ---- */

/* An epoch's batches as FNV-1a digests (labels, then data), in order. */
struct tail {
    uint64_t first, n; /* index of the first batch, batches */
    uint64_t fnv[NSAMPLES];
    uint64_t fingerprint, dataset_samples;
};

static void pull_tail(const presto_stream_opts_t *o, struct tail *t)
{
    presto_t *p;
    presto_stream_t *s;
    presto_stream_info_t info;
    presto_batch_t b;
    int rc;

    memset(t, 0, sizeof(*t));
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_msg(presto_stream_open(p, o, &s) == 0, "open: %s", presto_errmsg(p));
    presto_stream_info(s, &info);
    t->fingerprint = info.fingerprint;
    t->dataset_samples = info.dataset_samples;
    t->first = o->start_batch;
    while ((rc = presto_next(s, &b)) > 0) {
        ck_assert_uint_eq(b.index, t->first + t->n); /* the uninterrupted indices */
        uint64_t h = harness_fnv(HARNESS_FNV_INIT, b.labels, b.n * sizeof(b.labels[0]));
        t->fnv[t->n++] = harness_fnv(h, b.data, b.size);
        presto_release(s, &b);
    }
    ck_assert_msg(rc == 0, "next: %s", presto_stream_errmsg(s));
    presto_stream_close(s);
    presto_close(p);
}

START_TEST(test_resume_at_batch)
{
    struct tail whole, part;
    presto_stream_opts_t o = opts(6, PRESTO_TRANSPORT_AUTO);
    const uint64_t nb = NSAMPLES / BATCH;

    /* First, on a cold cache: resuming at the middle computes the tail only. */
    o.start_batch = nb / 2;
    pull_tail(&o, &part);
    ck_assert_uint_eq(part.n, nb - nb / 2);
    expect_stat("cache", "misses", (double)(nb - nb / 2) * BATCH);
    ck_assert_uint_eq(part.dataset_samples, NSAMPLES);
    ck_assert_msg(part.fingerprint != 0, "OPENED carried no fingerprint");

    o.start_batch = 0;
    pull_tail(&o, &whole);
    ck_assert_uint_eq(whole.n, nb);
    ck_assert_uint_eq(whole.fingerprint, part.fingerprint);
    ck_assert(memcmp(part.fnv, whole.fnv + nb / 2, part.n * sizeof(part.fnv[0])) == 0);

    /* The first, second and last batch, and past the end. */
    const uint64_t ks[] = {1, nb - 1, nb, nb + 5};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        o.start_batch = ks[i];
        pull_tail(&o, &part);
        uint64_t want = ks[i] < nb ? nb - ks[i] : 0;
        ck_assert_msg(part.n == want, "start_batch %llu: %llu batches, want %llu",
                      (unsigned long long)ks[i], (unsigned long long)part.n,
                      (unsigned long long)want);
        ck_assert(memcmp(part.fnv, whole.fnv + ks[i], want * sizeof(part.fnv[0])) == 0);
    }

    /* Rank 1 of 2, through the socket too: its own epoch's tail. */
    o.rank = 1;
    o.world = 2;
    o.start_batch = 0;
    pull_tail(&o, &whole);
    ck_assert_uint_eq(whole.n, nb / 2);
    o.transport = PRESTO_TRANSPORT_SOCKET;
    o.start_batch = 2;
    pull_tail(&o, &part);
    ck_assert_uint_eq(part.n, nb / 2 - 2);
    ck_assert(memcmp(part.fnv, whole.fnv + 2, part.n * sizeof(part.fnv[0])) == 0);
}
END_TEST

START_TEST(test_copy_when_full)
{
    struct tail ref;
    presto_t *p;
    presto_stream_t *s;
    presto_stream_info_t info;
    static presto_batch_t kept[NSAMPLES / BATCH + 1];
    presto_stream_opts_t o = opts(4, PRESTO_TRANSPORT_SHM);
    const unsigned nb = NSAMPLES / BATCH;

    pull_tail(&o, &ref);
    o.prefetch = 2; /* a ring of 2 slots */
    o.manual_release = 1;
    o.copy_when_full = 1;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_int_eq(presto_stream_open(p, &o, &s), 0);
    unsigned n = 0;
    int rc;
    while (n <= nb && (rc = presto_next(s, &kept[n])) > 0) /* keeps every one */
        n++;
    ck_assert_msg(rc == 0, "next while keeping batches: %s", presto_stream_errmsg(s));
    ck_assert_uint_eq(n, nb);
    presto_stream_info(s, &info);
    ck_assert_uint_eq(info.slots, 2);
    ck_assert_uint_eq(info.copies, nb - 1); /* all but the one in the first slot */
    for (unsigned i = 0; i < nb; i++) {
        uint64_t h = harness_fnv(HARNESS_FNV_INIT, kept[i].labels,
                                 kept[i].n * sizeof(kept[i].labels[0]));
        ck_assert_msg(harness_fnv(h, kept[i].data, kept[i].size) == ref.fnv[i],
                      "kept batch %u changed", i);
    }
    /* The daemon counted those whose RELEASE came while the stream ran (the
     * last one's may come after its END). */
    double copies = -1;
    ck_assert_int_eq(harness_stat(&H, "shm", "copies", &copies), 0);
    ck_assert_msg(copies >= nb - 2 && copies <= nb - 1, "shm.copies %g", copies);
    ck_assert_int_eq(harness_stat(&H, "shm", "release_timeouts", &copies), 0);
    ck_assert_msg(copies == 0, "a client was dropped");
    for (unsigned i = 0; i < nb; i++)
        presto_release(s, &kept[i]);
    presto_stream_close(s);
    presto_close(p);
    expect_stat("shm", "rings", 0);
}
END_TEST

static void on_alarm(int sig)
{
    (void)sig;
}

/* Holds both slots of a ring so the daemon has nothing to send: the wait
 * in presto_next returns PRESTO_E_INTR when SIGALRM's handler runs, and the
 * stream goes on once a slot comes back. Then closes the stream while
 * holding a batch: the daemon lets go of it at once, the batch stays. */
START_TEST(test_interrupted_wait)
{
    presto_t *p;
    presto_stream_t *s;
    presto_batch_t b[2], c;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART */
    ck_assert_int_eq(sigaction(SIGALRM, &sa, &old), 0);

    hold_both_slots(&p, &s, b, 1);
    alarm(1); /* well before release_timeout (2 s) */
    int rc = presto_next(s, &c);
    ck_assert_msg(rc == -PRESTO_E_INTR, "next while stalled, then SIGALRM: %d %s", rc,
                  presto_stream_errmsg(s));
    ck_assert_str_eq(presto_strerror(rc), "interrupted by a signal");
    presto_release(s, &b[0]);
    ck_assert_int_eq(presto_next(s, &c), 1); /* nothing was lost */
    ck_assert_uint_eq(c.index, 2);
    presto_release(s, &c);

    uint8_t first = *(const uint8_t *)b[1].data;
    presto_stream_close(s); /* b[1] still held */
    expect_stat(NULL, "streams", 0);
    expect_stat("shm", "rings", 0);
    ck_assert_uint_eq(*(const uint8_t *)b[1].data, first);
    presto_release(s, &b[1]); /* the last: frees the stream */
    presto_close(p);
    sigaction(SIGALRM, &old, NULL);
}
END_TEST

/* ---- the raw protocol: a RELEASE of a slot not held ---- */

static int raw_connect(void)
{
    int fd = harness_raw_connect(&H);
    ck_assert_msg(fd >= 0, "connect: %s", strerror(-fd));
    return fd;
}

static void raw_send(int fd, struct proto_wbuf *w)
{
    proto_frame_finish(w);
    ck_assert(!w->failed);
    ck_assert_int_eq(send(fd, w->data, w->len, MSG_NOSIGNAL), (ssize_t)w->len);
    proto_wbuf_free(w);
}

/* The next frame: header into h, body into buf; the passed fd (if any) into *fd. */
static void raw_recv(int fd, struct proto_header *h, uint8_t *buf, size_t cap, int *passed)
{
    uint8_t hdr[PROTO_HEADER_SIZE];
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {hdr, sizeof(hdr)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                         .msg_controllen = sizeof(ctl)};
    ck_assert_int_eq(recvmsg(fd, &msg, MSG_WAITALL), (ssize_t)sizeof(hdr));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (passed && cm && cm->cmsg_type == SCM_RIGHTS)
        memcpy(passed, CMSG_DATA(cm), sizeof(int));
    ck_assert_int_eq(proto_header_decode(hdr, (uint32_t)cap, h), 0);
    ck_assert_int_eq(recv(fd, buf, h->body_len, MSG_WAITALL), (ssize_t)h->body_len);
}

START_TEST(test_release_of_unheld_slot_refused)
{
    int fd = raw_connect(), ring = -1;
    struct proto_wbuf w;
    struct proto_open m = {.batch_size = BATCH, .seed = 1, .world = 1,
                           .flags = PROTO_OPEN_SHM, .prefetch = 2};
    static uint8_t body[1 << 16];
    struct proto_header h;
    struct proto_rbuf r;
    struct proto_opened op;
    struct proto_batch_shm bs;
    char err[256];
    uint32_t code;

    strcpy(m.dataset, DATASET);
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OPEN, 1);
    proto_put_open(&w, &m);
    raw_send(fd, &w);
    raw_recv(fd, &h, body, sizeof(body), &ring);
    ck_assert_uint_eq(h.type, PROTO_OPENED);
    proto_rbuf_init(&r, body, h.body_len);
    ck_assert_int_eq(proto_get_opened(&r, &op), 0);
    ck_assert_uint_eq(op.transport, PROTO_TRANSPORT_SHM);
    ck_assert_uint_eq(op.slots, 2);
    ck_assert_int_ge(ring, 0);
    /* The ring is sealed: the client cannot shrink it under the daemon. */
    ck_assert_int_lt(ftruncate(ring, 0), 0);
    ck_assert_int_eq(errno, EPERM);

    raw_recv(fd, &h, body, sizeof(body), NULL);
    ck_assert_uint_eq(h.type, PROTO_BATCH_SHM);
    proto_rbuf_init(&r, body, h.body_len);
    ck_assert_int_eq(proto_get_batch_shm(&r, &bs), 0);
    ck_assert_uint_eq(bs.index, 0);

    struct proto_release rel = {op.stream_id, 7}; /* no such slot */
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_RELEASE, 1);
    proto_put_release(&w, &rel);
    raw_send(fd, &w);
    int errors = 0, batches = 1;
    while (errors < 1) {
        raw_recv(fd, &h, body, sizeof(body), NULL);
        if (h.type == PROTO_BATCH_SHM) {
            batches++;
            continue;
        }
        ck_assert_uint_eq(h.type, PROTO_ERROR);
        proto_rbuf_init(&r, body, h.body_len);
        ck_assert_int_eq(proto_get_error(&r, &code, err, sizeof(err)), 0);
        ck_assert_uint_eq(code, PROTO_E_INVAL);
        ck_assert_msg(strstr(err, "does not hold") != NULL, "error: %s", err);
        errors++;
    }
    /* The stream goes on: releasing what was sent brings the next batch. */
    rel.slot = bs.slot;
    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_RELEASE, 1);
    proto_put_release(&w, &rel);
    raw_send(fd, &w);
    while (batches < 3) {
        raw_recv(fd, &h, body, sizeof(body), NULL);
        ck_assert_uint_eq(h.type, PROTO_BATCH_SHM);
        batches++;
    }
    close(ring);
    close(fd);
    expect_stat("shm", "rings", 0);
}
END_TEST

static Suite *shm_suite(void)
{
    Suite *s = suite_create("shm");
    TCase *tc = tcase_create("shm");
    tcase_add_checked_fixture(tc, daemon_setup, daemon_teardown); /* a daemon per test */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_same_bytes_both_transports);
    tcase_add_test(tc, test_held_slot_never_overwritten);
    tcase_add_test(tc, test_next_epoch_reuses_the_ring);
    tcase_add_test(tc, test_killed_client_frees_ring);
    tcase_add_test(tc, test_eight_concurrent_streams);
    tcase_add_test(tc, test_holding_every_slot_gets_dropped);
    tcase_add_test(tc, test_release_of_unheld_slot_refused);
    tcase_add_test(tc, test_resume_at_batch);
    tcase_add_test(tc, test_copy_when_full);
    tcase_add_test(tc, test_interrupted_wait);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, DATASET, NSAMPLES, NCLASSES, 2, 240, 360, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(shm_suite()));
}

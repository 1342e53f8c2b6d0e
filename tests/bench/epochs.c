/* epochs: pulls epochs of one dataset on one connection, the way a training loop does,
 * for the disk cases of `make bench` (tests/bench/cases_disk.sh).
 *
 *   epochs SOCKET DATASET BATCH_SIZE
 *
 * Reads one epoch number per line on stdin; for each, pulls that epoch (shuffled, over
 * shared memory) on the connection opened at the start and prints one JSON line, in the
 * shape of `prestoctl epoch --json` ("epoch", "samples", "batches", "seconds",
 * "samples_per_s", "skipped", "transport", "first_batch_s"), then waits for the next line.
 * So the bench can drop the segments' page cache and sample the daemon's stats between
 * epochs while the connection (and with it the daemon's ring for its streams) stays, as a
 * trainer's does; `prestoctl epoch`, one process per epoch, pays a fresh ring every time.
 * Exits 0 at the end of stdin, 1 on an error (the message on stderr). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "presto.h"

static double secs_since(const struct timespec *t0, const struct timespec *t1)
{
    return (double)(t1->tv_sec - t0->tv_sec) + (double)(t1->tv_nsec - t0->tv_nsec) / 1e9;
}

static int pull(presto_t *p, const presto_stream_opts_t *o)
{
    presto_stream_t *s;
    presto_batch_t b;
    struct timespec t0, t1, first = {0, 0};
    uint64_t samples = 0, batches = 0;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (presto_stream_open(p, o, &s) < 0) {
        fprintf(stderr, "epochs: %s\n", presto_errmsg(p));
        return -1;
    }
    while ((rc = presto_next(s, &b)) > 0) {
        if (batches++ == 0)
            clock_gettime(CLOCK_MONOTONIC, &first);
        samples += b.n;
        presto_release(s, &b);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc < 0) {
        fprintf(stderr, "epochs: epoch %" PRIu64 ": %s\n", o->epoch, presto_stream_errmsg(s));
        presto_stream_close(s);
        return -1;
    }
    if (batches == 0)
        first = t1;
    double secs = secs_since(&t0, &t1);
    presto_stream_info_t info;
    presto_stream_info(s, &info);
    printf("{\"dataset\":\"%s\",\"epoch\":%" PRIu64 ",\"samples\":%" PRIu64
           ",\"batches\":%" PRIu64 ",\"seconds\":%.6f,\"samples_per_s\":%.1f,\"skipped\":%" PRIu64
           ",\"transport\":\"%s\",\"first_batch_s\":%.6f,\"connection\":\"kept\"}\n",
           o->dataset, o->epoch, samples, batches, secs, secs > 0 ? (double)samples / secs : 0.0,
           presto_stream_skipped(s), info.transport == PRESTO_TRANSPORT_SHM ? "shm" : "socket",
           secs_since(&t0, &first));
    fflush(stdout);
    presto_stream_close(s);
    return 0;
}

int main(int argc, char *argv[])
{
    if (argc != 4) {
        fprintf(stderr, "usage: epochs SOCKET DATASET BATCH_SIZE (epoch numbers on stdin)\n");
        return 2;
    }
    char *end;
    unsigned long batch = strtoul(argv[3], &end, 10);
    if (*end || batch == 0 || batch > UINT32_MAX) {
        fprintf(stderr, "epochs: bad batch size '%s'\n", argv[3]);
        return 2;
    }
    presto_t *p;
    if (presto_connect(argv[1], &p) < 0) {
        fprintf(stderr, "epochs: %s: %s\n", argv[1], presto_errmsg(p));
        presto_close(p);
        return 1;
    }
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = argv[2];
    o.batch_size = (uint32_t)batch;
    o.transport = PRESTO_TRANSPORT_SHM;
    int rc = 0;
    char line[64];
    while (rc == 0 && fgets(line, sizeof(line), stdin)) {
        o.epoch = strtoull(line, &end, 10);
        if (end == line || (*end && *end != '\n')) {
            fprintf(stderr, "epochs: bad epoch '%s'\n", line);
            rc = -1;
            break;
        }
        rc = pull(p, &o);
    }
    presto_close(p);
    return rc == 0 ? 0 : 1;
}

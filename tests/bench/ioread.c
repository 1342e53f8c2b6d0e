/*
 * ioread: the raw random-read bandwidth of a disk, measured with the reads
 * a disk-tier epoch of prestod makes, for `make bench` to set presto's
 * disk-tier figures against.
 *
 *   ioread [--depth N] [--threads N] [--batch N] [--pread] [--drop]
 *          [--direct] [--check] [--huge] [--seed S] SEGMENT...
 *
 * Reads every record of the given disk-tier segment files (cache.dir/
 * seg-*.dat), each as one read of the whole record, in a random order:
 * THREADS threads (prestod's workers), each taking BATCH records at a time
 * (a batch) and reading them with one io_read_batch() on an io_ring of
 * DEPTH entries of its own: the same I/O code, block sizes and queue depth
 * as the daemon, with no checksum, decompression, steps or socket behind
 * it. --drop first writes back and drops the files' pages from the page
 * cache (fdatasync, POSIX_FADV_DONTNEED), so that the reads reach the
 * device. --direct reads as prestod does with cache.direct_io: through an
 * O_DIRECT descriptor, the whole aligned blocks around each record (bytes
 * still counts the records' own bytes, as the daemon's disk stats do).
 * --check adds what prestod must do with every record it reads, and no
 * more: its header's and payload's CRC32C checked (hash_crc32c, as the
 * store does), and the payload copied into the batch's place (prestod's
 * last online step writes it there); a record that fails counts as an
 * error. Without it the reads alone are measured. --huge puts each thread's
 * read buffer (2 MiB or more) on transparent huge pages (io_buf_alloc), as
 * prestod's arenas are (pipeline.c, chunk_arena): the kernel's copy into it
 * misses the TLB less; without it the buffer has the ordinary pages a
 * reader would have.
 * Prints one JSON line: records, bytes, seconds, mb_per_s (10^6 bytes),
 * backend, direct, check, depth, threads, batch.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "io.h"
#include "store.h"

struct rec {
    int fd;
    uint64_t off;
    uint32_t len;  /* what is read */
    uint32_t lead; /* --direct: where the record starts in it */
    uint32_t rec;  /* the record's own bytes */
};

struct job {
    struct rec *recs;
    size_t n;
    size_t next; /* atomic: the first record not taken */
    unsigned batch, depth;
    int force_pread;
    int direct;
    int check;
    int huge;
    uint32_t max_len;
    uint64_t bytes, errors; /* atomic */
    char backend[16];
};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* --check: the record at p (len bytes) has good checksums; its payload is
 * copied to out. */
static int check_record(const uint8_t *p, uint32_t len, uint8_t *out)
{
    uint8_t h[STORE_HEADER_SIZE];
    if (len < STORE_HEADER_SIZE)
        return -1;
    memcpy(h, p, sizeof(h));
    memset(h + 8, 0, 4); /* the header's CRC covers itself as zeros */
    uint32_t stored = rd32(p + 60);
    if (hash_crc32c(0, h, sizeof(h)) != rd32(p + 8) || stored > len - STORE_HEADER_SIZE ||
        hash_crc32c(0, p + STORE_HEADER_SIZE, stored) != rd32(p + 12))
        return -1;
    memcpy(out, p + STORE_HEADER_SIZE, stored);
    return 0;
}

/* Appends the records of one segment (walking the headers) to *recs. */
static int scan(const char *path, int drop, int direct, struct rec **recs, size_t *n,
                size_t *cap, uint32_t *max_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int dfd = direct ? open(path, O_RDONLY | O_DIRECT | O_CLOEXEC) : fd;
    if (fd < 0 || dfd < 0) {
        fprintf(stderr, "ioread: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t h[STORE_HEADER_SIZE];
    uint64_t off = 0;
    while (pread(fd, h, sizeof(h), (off_t)off) == (ssize_t)sizeof(h) && rd32(h) == STORE_MAGIC) {
        uint32_t len = (STORE_HEADER_SIZE + rd32(h + 60) + STORE_ALIGN - 1) & ~(STORE_ALIGN - 1);
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 4096;
            struct rec *r = realloc(*recs, *cap * sizeof(*r));
            if (!r) {
                close(fd);
                return -1;
            }
            *recs = r;
        }
        struct rec r = {dfd, off, len, 0, len};
        if (direct) { /* whole aligned blocks around the record */
            r.lead = (uint32_t)(off % STORE_DIRECT_ALIGN);
            r.off = off - r.lead;
            r.len = (r.lead + len + STORE_DIRECT_ALIGN - 1) & ~(STORE_DIRECT_ALIGN - 1);
        }
        (*recs)[(*n)++] = r;
        if (r.len > *max_len)
            *max_len = r.len;
        off += len;
    }
    if (drop) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    return 0;
}

static void *reader(void *arg)
{
    struct job *j = arg;
    struct io_ring *r;
    char why[256];
    struct io_req *reqs = calloc(j->batch, sizeof(*reqs));
    uint8_t *out = j->check ? malloc((size_t)j->batch * j->max_len) : NULL;
    void *buf = io_buf_alloc((size_t)j->batch * j->max_len, STORE_DIRECT_ALIGN, j->huge);
    if (!reqs || !buf || (j->check && !out) ||
        io_ring_create(&r, j->depth, j->force_pread ? IO_FORCE_PREAD : 0, why, sizeof(why)) < 0) {
        fprintf(stderr, "ioread: out of memory\n");
        exit(1);
    }
    snprintf(j->backend, sizeof(j->backend), "%s", io_ring_backend(r));
    for (;;) {
        size_t first = __atomic_fetch_add(&j->next, j->batch, __ATOMIC_RELAXED);
        if (first >= j->n)
            break;
        unsigned k = 0;
        for (; k < j->batch && first + k < j->n; k++) {
            const struct rec *c = &j->recs[first + k];
            reqs[k] = (struct io_req){c->fd, (uint8_t *)buf + (size_t)k * j->max_len, c->len,
                                      c->off, 0};
            reqs[k].direct = (uint8_t)j->direct;
        }
        io_read_batch(r, reqs, k);
        for (unsigned i = 0; i < k; i++) {
            const struct rec *c = &j->recs[first + i];
            if (reqs[i].res < (ssize_t)(c->lead + c->rec) ||
                (j->check && check_record((const uint8_t *)reqs[i].buf + c->lead, c->rec,
                                          out + (size_t)i * j->max_len) < 0))
                __atomic_fetch_add(&j->errors, 1, __ATOMIC_RELAXED);
            else
                __atomic_fetch_add(&j->bytes, c->rec, __ATOMIC_RELAXED);
        }
    }
    io_ring_destroy(r);
    free(out);
    free(buf);
    free(reqs);
    return NULL;
}

static unsigned parse_num(const char *opt, const char *s, unsigned min, unsigned max)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || v < min || v > max) {
        fprintf(stderr, "ioread: %s wants a number from %u to %u\n", opt, min, max);
        exit(2);
    }
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"depth", required_argument, NULL, 'd'}, {"threads", required_argument, NULL, 't'},
        {"batch", required_argument, NULL, 'b'}, {"pread", no_argument, NULL, 'p'},
        {"drop", no_argument, NULL, 'D'},        {"seed", required_argument, NULL, 's'},
        {"direct", no_argument, NULL, 'O'},      {"check", no_argument, NULL, 'C'},
        {"huge", no_argument, NULL, 'H'},        {NULL, 0, NULL, 0},
    };
    struct job j = {.batch = 64, .depth = IO_DEFAULT_DEPTH};
    unsigned threads = 1, seed = 1;
    int drop = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': j.depth = parse_num("--depth", optarg, 1, IO_MAX_DEPTH); break;
        case 't': threads = parse_num("--threads", optarg, 1, 1024); break;
        case 'b': j.batch = parse_num("--batch", optarg, 1, 65536); break;
        case 'p': j.force_pread = 1; break;
        case 'D': drop = 1; break;
        case 'O': j.direct = 1; break;
        case 'C': j.check = 1; break;
        case 'H': j.huge = 1; break;
        case 's': seed = parse_num("--seed", optarg, 0, ~0u); break;
        default:
            fprintf(stderr, "usage: ioread [--depth N] [--threads N] [--batch N] [--pread] "
                            "[--drop] [--direct] [--check] [--huge] [--seed S] SEGMENT...\n");
            return 2;
        }
    }
    size_t cap = 0;
    for (int i = optind; i < argc; i++)
        if (scan(argv[i], drop, j.direct, &j.recs, &j.n, &cap, &j.max_len) < 0)
            return 1;
    if (j.n == 0) {
        fprintf(stderr, "ioread: no records in the given files\n");
        return 1;
    }
    /* A random order (Fisher-Yates with splitmix64), as a shuffled epoch. */
    uint64_t st = seed;
    for (size_t i = j.n - 1; i > 0; i--) {
        uint64_t z = (st += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        size_t k = (size_t)((z ^ (z >> 31)) % (i + 1));
        struct rec t = j.recs[i];
        j.recs[i] = j.recs[k];
        j.recs[k] = t;
    }

    pthread_t *tids = calloc(threads, sizeof(*tids));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, reader, &j) != 0) {
            fprintf(stderr, "ioread: cannot start a thread\n");
            return 1;
        }
    for (unsigned i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"records\":%zu,\"bytes\":%llu,\"errors\":%llu,\"seconds\":%.6f,\"mb_per_s\":%.1f,"
           "\"backend\":\"%s\",\"direct\":%d,\"check\":%d,\"huge\":%d,\"depth\":%u,"
           "\"threads\":%u,\"batch\":%u}\n",
           j.n, (unsigned long long)j.bytes, (unsigned long long)j.errors, secs,
           secs > 0 ? (double)j.bytes / 1e6 / secs : 0.0, j.backend, j.direct, j.check,
           j.huge, j.depth, threads, j.batch);
    free(tids);
    free(j.recs);
    return j.errors ? 1 : 0;
}

/* Unit tests for the I/O backend (daemon/io.h): batches of random reads
 * through both backends compared with pread, reads past the end of the
 * file, a bad fd in one request, batches larger than the ring, counters
 * read from another thread, the fallback when seccomp refuses io_uring;
 * whole-file requests (chained, staged, pread) compared with the files and
 * their stat, missing files and directories, queues far deeper than the
 * ring mixing files and plain reads, cancelling, the latency histograms.
 * The io_uring checks are skipped, with a message, where the kernel
 * refuses io_uring. */
#include <check.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io.h"

#define FILE_SIZE (4u << 20)
#define MAX_LEN (192u << 10)

static int test_fd = -1;
static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A temporary file of FILE_SIZE bytes of known, position-dependent content,
 * unlinked at once (the fd keeps it). */
static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/presto-io-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    test_fd = mkstemp(path);
    ck_assert_msg(test_fd >= 0, "mkstemp %s: %s", path, strerror(errno));
    unlink(path);
    uint8_t *buf = malloc(FILE_SIZE);
    ck_assert_ptr_nonnull(buf);
    rng_state = 42;
    for (size_t i = 0; i < FILE_SIZE; i += 8) {
        uint64_t v = rnd();
        memcpy(buf + i, &v, 8);
    }
    ck_assert_int_eq(pwrite(test_fd, buf, FILE_SIZE, 0), FILE_SIZE);
    free(buf);
    rng_state = 7;
}

static void teardown(void)
{
    if (test_fd >= 0)
        close(test_fd);
    test_fd = -1;
}

/* Makes a ring of the backend asked for (1: io_uring); NULL, with a
 * message, when io_uring is refused here. */
static struct io_ring *make_ring(int uring, unsigned depth)
{
    struct io_ring *r;
    char why[256];
    ck_assert_int_eq(io_ring_create(&r, depth, uring ? 0 : IO_FORCE_PREAD, why, sizeof(why)), 0);
    const char *want = uring ? "io_uring" : "pread";
    if (strcmp(io_ring_backend(r), want) != 0) {
        printf("skipping the io_uring checks: %s\n", why);
        io_ring_destroy(r);
        return NULL;
    }
    ck_assert_uint_eq(io_ring_depth(r), depth ? depth : IO_DEFAULT_DEPTH);
    return r;
}

/* What pread says about a request: expected res and bytes in exp. */
static ssize_t expect(const struct io_req *q, uint8_t *exp)
{
    size_t done = 0;
    while (done < q->len) {
        ssize_t n = pread(q->fd, exp + done, q->len - done, (off_t)(q->off + done));
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

/* Runs n random reads (some crossing or past EOF) through r and compares
 * every result with pread. */
static void random_batch(struct io_ring *r, unsigned n)
{
    struct io_req *reqs = calloc(n, sizeof(*reqs));
    uint8_t *exp = malloc(MAX_LEN);
    ck_assert_ptr_nonnull(reqs);
    ck_assert_ptr_nonnull(exp);
    uint64_t want_bytes = 0, nonempty = 0;
    for (unsigned i = 0; i < n; i++) {
        reqs[i].fd = test_fd;
        reqs[i].len = rnd() % 8 == 0 ? 0 : 1 + rnd() % MAX_LEN;
        reqs[i].off = rnd() % 16 == 0 ? FILE_SIZE - rnd() % 4096 : rnd() % (FILE_SIZE + 100);
        reqs[i].buf = malloc(reqs[i].len ? reqs[i].len : 1);
        reqs[i].res = 12345;
        nonempty += reqs[i].len > 0;
        ck_assert_ptr_nonnull(reqs[i].buf);
    }
    struct io_stats before, after;
    io_ring_stats(r, &before);
    ck_assert_uint_eq(io_read_batch(r, reqs, n), 0);
    io_ring_stats(r, &after);
    for (unsigned i = 0; i < n; i++) {
        ssize_t res = expect(&reqs[i], exp);
        ck_assert_msg(reqs[i].res == res, "req %u (off %llu len %zu): res %zd, pread %zd", i,
                      (unsigned long long)reqs[i].off, reqs[i].len, reqs[i].res, res);
        ck_assert_msg(memcmp(reqs[i].buf, exp, (size_t)res) == 0, "req %u: bytes differ", i);
        want_bytes += (uint64_t)res;
        free(reqs[i].buf);
    }
    ck_assert_uint_eq(after.batches - before.batches, 1);
    ck_assert_uint_eq(after.reads - before.reads, n);
    ck_assert_uint_eq(after.bytes - before.bytes, want_bytes);
    ck_assert_uint_eq(after.errors, before.errors);
    ck_assert_uint_ge(after.submitted - before.submitted, nonempty);
    ck_assert_uint_eq(after.in_flight, 0);
    ck_assert_uint_le(after.max_in_flight, io_ring_depth(r));
    free(reqs);
    free(exp);
}

static void batches_match_pread(int uring)
{
    struct io_ring *r = make_ring(uring, 0);
    if (!r)
        return;
    static const unsigned sizes[] = {1, 2, 3, 17, 63, 64, 65, 128, 200, 300};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        random_batch(r, sizes[i]);
    for (int i = 0; i < 10; i++)
        random_batch(r, 1 + (unsigned)(rnd() % 300));
    struct io_stats s;
    io_ring_stats(r, &s);
    if (uring) /* batches over the depth keep the ring full */
        ck_assert_uint_eq(s.max_in_flight, IO_DEFAULT_DEPTH);
    else
        ck_assert_uint_eq(s.max_in_flight, 1);
    io_ring_destroy(r);
}

START_TEST(test_batches_pread)
{
    batches_match_pread(0);
}
END_TEST

START_TEST(test_batches_uring)
{
    batches_match_pread(1);
}
END_TEST

/* Reads that end past EOF come back short; reads at or past EOF give 0. */
static void past_eof(int uring)
{
    struct io_ring *r = make_ring(uring, 8);
    if (!r)
        return;
    uint8_t a[1000], b[10], c[4096], exp[1000];
    struct io_req reqs[3] = {
        {.fd = test_fd, .buf = a, .len = sizeof(a), .off = FILE_SIZE - 100},
        {.fd = test_fd, .buf = b, .len = sizeof(b), .off = FILE_SIZE + 10},
        {.fd = test_fd, .buf = c, .len = sizeof(c), .off = FILE_SIZE},
    };
    ck_assert_uint_eq(io_read_batch(r, reqs, 3), 0);
    ck_assert_int_eq(reqs[0].res, 100);
    ck_assert_int_eq(pread(test_fd, exp, 100, FILE_SIZE - 100), 100);
    ck_assert_mem_eq(a, exp, 100);
    ck_assert_int_eq(reqs[1].res, 0);
    ck_assert_int_eq(reqs[2].res, 0);
    /* The short read was retried for the rest, which found EOF. */
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_ge(s.short_reads, 1);
    ck_assert_uint_eq(s.bytes, 100);
    io_ring_destroy(r);
}

START_TEST(test_past_eof_pread)
{
    past_eof(0);
}
END_TEST

START_TEST(test_past_eof_uring)
{
    past_eof(1);
}
END_TEST

/* A bad fd fails its own request only. */
static void bad_fd(int uring)
{
    struct io_ring *r = make_ring(uring, 0);
    if (!r)
        return;
    enum { N = 40 };
    struct io_req reqs[N];
    static uint8_t bufs[N][4096], exp[4096];
    int closed = dup(test_fd);
    ck_assert_int_ge(closed, 0);
    close(closed); /* a descriptor number that is certainly not open */
    for (int i = 0; i < N; i++) {
        reqs[i] = (struct io_req){.fd = test_fd, .buf = bufs[i], .len = 4096,
                                  .off = (uint64_t)i * 10000};
    }
    reqs[5].fd = -1;
    reqs[17].fd = closed;
    ck_assert_uint_eq(io_read_batch(r, reqs, N), 2);
    for (int i = 0; i < N; i++) {
        if (i == 5 || i == 17) {
            ck_assert_int_eq(reqs[i].res, -EBADF);
            continue;
        }
        ck_assert_int_eq(reqs[i].res, 4096);
        ck_assert_int_eq(pread(test_fd, exp, 4096, (off_t)reqs[i].off), 4096);
        ck_assert_mem_eq(bufs[i], exp, 4096);
    }
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.errors, 2);
    ck_assert_uint_eq(s.reads, N);
    ck_assert_uint_eq(s.bytes, (N - 2) * 4096);
    /* The ring is fine afterwards. */
    random_batch(r, 50);
    io_ring_destroy(r);
}

START_TEST(test_bad_fd_pread)
{
    bad_fd(0);
}
END_TEST

START_TEST(test_bad_fd_uring)
{
    bad_fd(1);
}
END_TEST

/* A ring shallower than the batch: never more than depth in flight, and
 * (io_uring) exactly depth at the peak. */
START_TEST(test_small_depth)
{
    for (int uring = 0; uring < 2; uring++) {
        struct io_ring *r = make_ring(uring, 4);
        if (!r)
            continue;
        random_batch(r, 100);
        random_batch(r, 3);
        struct io_stats s;
        io_ring_stats(r, &s);
        ck_assert_uint_eq(s.max_in_flight, uring ? 4 : 1);
        ck_assert_uint_eq(s.reads, 103);
        io_ring_destroy(r);
    }
}
END_TEST

/* One read larger than anything else, and many tiny ones. */
START_TEST(test_sizes)
{
    for (int uring = 0; uring < 2; uring++) {
        struct io_ring *r = make_ring(uring, 16);
        if (!r)
            continue;
        uint8_t *big = malloc(FILE_SIZE), *exp = malloc(FILE_SIZE);
        ck_assert_ptr_nonnull(big);
        ck_assert_ptr_nonnull(exp);
        struct io_req q = {.fd = test_fd, .buf = big, .len = FILE_SIZE, .off = 0};
        ck_assert_uint_eq(io_read_batch(r, &q, 1), 0);
        ck_assert_int_eq(q.res, FILE_SIZE);
        ck_assert_int_eq(pread(test_fd, exp, FILE_SIZE, 0), FILE_SIZE);
        ck_assert_int_eq(memcmp(big, exp, FILE_SIZE), 0);
        enum { N = 256 };
        struct io_req tiny[N];
        for (int i = 0; i < N; i++)
            tiny[i] = (struct io_req){.fd = test_fd, .buf = big + i, .len = 1,
                                      .off = (uint64_t)i * 977};
        ck_assert_uint_eq(io_read_batch(r, tiny, N), 0);
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(tiny[i].res, 1);
            ck_assert_uint_eq(big[i], exp[i * 977]);
        }
        ck_assert_uint_eq(io_read_batch(r, tiny, 0), 0);
        free(big);
        free(exp);
        io_ring_destroy(r);
    }
}
END_TEST

/* io_buf_alloc: the alignment asked; a huge one of IO_HUGE_PAGE or more is
 * IO_HUGE_PAGE aligned (on huge pages where the kernel takes the hint), and
 * reads land in it as in any buffer. */
START_TEST(test_buf_alloc)
{
    uint8_t *small = io_buf_alloc(65536, 4096, 1);
    uint8_t *plain = io_buf_alloc(3 * IO_HUGE_PAGE, 4096, 0);
    uint8_t *huge = io_buf_alloc(3 * IO_HUGE_PAGE, 4096, 1);
    ck_assert_ptr_nonnull(small);
    ck_assert_ptr_nonnull(plain);
    ck_assert_ptr_nonnull(huge);
    ck_assert_uint_eq((uintptr_t)small % 4096, 0);
    ck_assert_uint_eq((uintptr_t)plain % 4096, 0);
    ck_assert_uint_eq((uintptr_t)huge % IO_HUGE_PAGE, 0);
    struct io_ring *r = make_ring(1, 16);
    if (!r)
        r = make_ring(0, 16);
    ck_assert_ptr_nonnull(r);
    size_t len = FILE_SIZE < 2 * IO_HUGE_PAGE ? FILE_SIZE : 2 * IO_HUGE_PAGE;
    struct io_req q = {.fd = test_fd, .buf = huge + IO_HUGE_PAGE - 4096, .len = (uint32_t)len};
    ck_assert_uint_eq(io_read_batch(r, &q, 1), 0);
    ck_assert_int_eq(q.res, (int)len);
    ck_assert_int_eq(pread(test_fd, plain, len, 0), (ssize_t)len);
    ck_assert_int_eq(memcmp(huge + IO_HUGE_PAGE - 4096, plain, len), 0);
    io_ring_destroy(r);
    free(small);
    free(plain);
    free(huge);
}
END_TEST

/* PRESTO_IO=pread forces the fallback and says so. */
START_TEST(test_env_forces_pread)
{
    struct io_ring *r;
    char why[256];
    setenv("PRESTO_IO", "pread", 1);
    ck_assert_int_eq(io_ring_create(&r, 32, 0, why, sizeof(why)), 0);
    unsetenv("PRESTO_IO");
    ck_assert_str_eq(io_ring_backend(r), "pread");
    ck_assert_msg(strstr(why, "PRESTO_IO") != NULL, "why: %s", why);
    random_batch(r, 20);
    io_ring_destroy(r);
    /* Without it, io_uring (or a reason why not). */
    ck_assert_int_eq(io_ring_create(&r, 32, 0, why, sizeof(why)), 0);
    if (strcmp(io_ring_backend(r), "io_uring") == 0)
        ck_assert_str_eq(why, "");
    else
        ck_assert_msg(why[0] != '\0', "fallback without a reason");
    io_ring_destroy(r);
    io_ring_destroy(NULL);
}
END_TEST

/* A seccomp filter that answers io_uring_setup with EPERM, as container
 * runtimes' default profiles do: the ring falls back to pread, says why,
 * and reads correctly. Runs in a child (a filter cannot be removed), which
 * reports by exit status. */
static int seccomp_child(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    unsetenv("PRESTO_IO"); /* the kernel must be what says no */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
        return 77;
    struct io_ring *r;
    char why[256];
    if (io_ring_create(&r, 16, 0, why, sizeof(why)) < 0)
        return 1;
    if (strcmp(io_ring_backend(r), "pread") != 0)
        return 2;
    if (!strstr(why, "refused") || !strstr(why, strerror(EPERM))) {
        fprintf(stderr, "why: %s\n", why);
        return 3;
    }
    uint8_t buf[3][5000], exp[5000];
    struct io_req q[3];
    for (int i = 0; i < 3; i++)
        q[i] = (struct io_req){.fd = test_fd, .buf = buf[i], .len = 5000,
                               .off = (uint64_t)i * 77777};
    if (io_read_batch(r, q, 3) != 0)
        return 4;
    for (int i = 0; i < 3; i++)
        if (q[i].res != 5000 || pread(test_fd, exp, 5000, (off_t)q[i].off) != 5000 ||
            memcmp(buf[i], exp, 5000) != 0)
            return 5;
    io_ring_destroy(r);
    return 0;
}

START_TEST(test_refused_by_seccomp)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(seccomp_child());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child died: %#x", status);
    if (WEXITSTATUS(status) == 77) {
        printf("seccomp unavailable here: fallback test skipped\n");
        return;
    }
    ck_assert_msg(WEXITSTATUS(status) == 0, "child check %d failed", WEXITSTATUS(status));
}
END_TEST

/* Counters read from another thread while batches run (for TSan). */
struct poller {
    struct io_ring *r;
    int stop;
    uint64_t seen_max;
    uint64_t over_depth; /* snapshots with more in flight than the depth */
};

static void *poll_stats(void *arg)
{
    struct poller *p = arg;
    while (!__atomic_load_n(&p->stop, __ATOMIC_RELAXED)) {
        struct io_stats s;
        io_ring_stats(p->r, &s);
        if (s.in_flight > p->seen_max)
            p->seen_max = s.in_flight;
        p->over_depth += s.in_flight > io_ring_depth(p->r);
    }
    return NULL;
}

START_TEST(test_stats_from_another_thread)
{
    struct io_ring *r = make_ring(1, 32);
    if (!r)
        r = make_ring(0, 32);
    struct poller p = {.r = r};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, poll_stats, &p), 0);
    for (int i = 0; i < 10; i++)
        random_batch(r, 150);
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    struct io_stats s, sum = {0};
    io_ring_stats(r, &s);
    io_stats_add(&sum, &s);
    io_stats_add(&sum, &s);
    ck_assert_uint_eq(sum.reads, 2 * s.reads);
    ck_assert_uint_eq(sum.max_in_flight, s.max_in_flight);
    ck_assert_uint_le(p.seen_max, s.max_in_flight);
    ck_assert_uint_eq(p.over_depth, 0);
    io_ring_destroy(r);
}
END_TEST

/* ---- whole-file requests ---- */

/* Files of these sizes in a temporary directory (some in a sub-directory),
 * filled with known bytes. */
static const size_t file_sizes[] = {0, 1, 4095, 4096, 4097, 100000, 1 << 20, 33333};
#define NFILES (sizeof(file_sizes) / sizeof(file_sizes[0]))
static char file_dir[200];
static char file_names[NFILES][32];

static uint8_t file_byte(unsigned f, size_t i)
{
    return (uint8_t)(i * 131u + f * 7u + (i >> 9));
}

static void files_setup(void)
{
    setup();
    const char *tmp = getenv("TMPDIR");
    snprintf(file_dir, sizeof(file_dir), "%s/presto-iofiles-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(file_dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/sub", file_dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    for (unsigned f = 0; f < NFILES; f++) {
        snprintf(file_names[f], sizeof(file_names[f]), "%sfile%u.bin", f % 2 ? "sub/" : "", f);
        snprintf(path, sizeof(path), "%s/%s", file_dir, file_names[f]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        uint8_t *b = malloc(file_sizes[f] + 1);
        ck_assert_ptr_nonnull(b);
        for (size_t i = 0; i < file_sizes[f]; i++)
            b[i] = file_byte(f, i);
        ck_assert_int_eq(write(fd, b, file_sizes[f]), (ssize_t)file_sizes[f]);
        free(b);
        close(fd);
    }
}

static void files_teardown(void)
{
    char path[512];
    for (unsigned f = 0; f < NFILES; f++) {
        snprintf(path, sizeof(path), "%s/%s", file_dir, file_names[f]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/sub", file_dir);
    rmdir(path);
    rmdir(file_dir);
    teardown();
}

enum file_mode { MODE_PREAD, MODE_STAGED, MODE_CHAINED };
static const char *const mode_names[] = {"sync", "staged", "chained"};

/* A ring reading files the way asked; NULL, with a message, when this
 * kernel cannot. */
static struct io_ring *file_ring(enum file_mode mode, unsigned depth)
{
    struct io_ring *r;
    char why[256];
    unsigned flags = mode == MODE_PREAD ? IO_FORCE_PREAD : mode == MODE_STAGED ? IO_NO_CHAIN : 0;
    ck_assert_int_eq(io_ring_create(&r, depth, flags, why, sizeof(why)), 0);
    if (strcmp(io_ring_files_mode(r), mode_names[mode]) != 0) {
        printf("skipping the %s file checks: %s\n", mode_names[mode], why);
        io_ring_destroy(r);
        return NULL;
    }
    return r;
}

/* Checks a file request's outcome against file f read with room for len. */
static void check_file(const struct io_req *q, unsigned f, size_t len, int dirfd)
{
    struct stat sb;
    size_t want = file_sizes[f] < len ? file_sizes[f] : len;
    ck_assert_msg(q->res == (ssize_t)want, "%s (room %zu): res %zd, want %zu",
                  file_names[f], len, q->res, want);
    ck_assert_uint_eq(q->failed, IO_STEP_NONE);
    ck_assert_int_eq(fstatat(dirfd, file_names[f], &sb, 0), 0);
    ck_assert_uint_eq(q->size, (uint64_t)sb.st_size);
    ck_assert_int_eq(q->mtime_ns, (int64_t)sb.st_mtim.tv_sec * 1000000000ll + sb.st_mtim.tv_nsec);
    const uint8_t *b = q->buf;
    for (size_t i = 0; i < want; i++)
        if (b[i] != file_byte(f, i))
            ck_abort_msg("%s: byte %zu differs", file_names[f], i);
}

/* A done request of a test over the files: file f's bytes and metadata
 * (room: what it had room for), or a plain read's bytes of test_fd. */
static void check_req(const struct io_req *q, unsigned f, size_t room, int dirfd, uint8_t *exp)
{
    if (q->path) {
        check_file(q, f, room, dirfd);
    } else {
        ssize_t e = expect(q, exp);
        ck_assert_int_eq(q->res, e);
        ck_assert_int_eq(memcmp(q->buf, exp, (size_t)e), 0);
    }
}

/* n requests cycling over the files (with room for the whole file, half of
 * it or more than it), every 5th one a plain read of test_fd, queued at
 * once on a ring of depth 8 and waited for in order; then the outcomes. */
static void files_match(enum file_mode mode)
{
    struct io_ring *r = file_ring(mode, 8);
    if (!r)
        return;
    enum { N = 300 };
    struct io_req *q = calloc(N, sizeof(*q));
    size_t *room = calloc(N, sizeof(*room));
    uint8_t *exp = malloc(MAX_LEN);
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(room);
    ck_assert_ptr_nonnull(exp);
    int dirfd = open(file_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd, 0);
    uint64_t want_file_bytes = 0, nfiles = 0;
    for (unsigned i = 0; i < N; i++) {
        unsigned f = i % NFILES;
        if (i % 5 == 4) {
            q[i] = (struct io_req){test_fd, NULL, 1 + rnd() % MAX_LEN, rnd() % FILE_SIZE, 0};
            room[i] = q[i].len;
        } else {
            room[i] = i % 3 == 0 ? file_sizes[f] : i % 3 == 1 ? file_sizes[f] / 2
                                                               : file_sizes[f] + 5000;
            q[i] = (struct io_req){.fd = dirfd, .len = room[i], .path = file_names[f]};
            want_file_bytes += file_sizes[f] < room[i] ? file_sizes[f] : room[i];
            nfiles++;
        }
        q[i].buf = malloc(room[i] + 1);
        ck_assert_ptr_nonnull(q[i].buf);
        io_submit(r, &q[i]);
        ck_assert(!io_done(&q[i]));
    }
    io_poll(r);
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_le(s.in_flight, 8);
    for (unsigned i = 0; i < N; i++) {
        ssize_t res = io_wait(r, &q[i]);
        ck_assert(io_done(&q[i]));
        ck_assert_int_eq(res, q[i].res);
        check_req(&q[i], i % NFILES, room[i], dirfd, exp);
        free(q[i].buf);
    }
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.reads, N);
    ck_assert_uint_eq(s.files, nfiles);
    ck_assert_uint_eq(s.file_bytes, want_file_bytes);
    ck_assert_uint_eq(s.file_errors, 0);
    ck_assert_uint_eq(s.errors, 0);
    ck_assert_uint_eq(s.in_flight, 0);
    ck_assert_uint_eq(s.files_in_flight, 0);
    ck_assert_uint_le(s.max_in_flight, 8);
    if (mode != MODE_PREAD) /* the queue kept the ring full */
        ck_assert_uint_eq(s.max_in_flight, 8);
    uint64_t *by_mode[] = {&s.files_sync, &s.files_staged, &s.files_chained};
    ck_assert_uint_eq(*by_mode[mode], nfiles);
    ck_assert_uint_eq(s.files_chained + s.files_staged + s.files_sync, nfiles);
    ck_assert_uint_eq(s.file_lat.count, nfiles);
    ck_assert_uint_eq(s.read_lat.count, N - nfiles);
    uint64_t p50 = io_lat_quantile(&s.file_lat, 0.5), p99 = io_lat_quantile(&s.file_lat, 0.99);
    ck_assert_uint_le(p50, p99);
    ck_assert_uint_le(p99, s.file_lat.max_us);
    ck_assert_uint_gt(s.file_busy_ns, 0);
    close(dirfd);
    free(exp);
    free(room);
    free(q);
    io_ring_destroy(r);
}

START_TEST(test_files_pread)
{
    files_match(MODE_PREAD);
}
END_TEST

START_TEST(test_files_staged)
{
    files_match(MODE_STAGED);
}
END_TEST

START_TEST(test_files_chained)
{
    files_match(MODE_CHAINED);
}
END_TEST

/* IO_NO_SYNC (an event loop's ring): completions come through on_done,
 * once each, announced on the eventfd; what would be read on the calling
 * thread ends IO_DEFERRED instead (everything on pread, files when staged),
 * and a deferred request submitted again on a plain ring reads right.
 * _i: the mode. */
static unsigned nosync_calls[64];

static void nosync_done(struct io_req *q)
{
    nosync_calls[(uintptr_t)q->arg]++;
}

START_TEST(test_no_sync)
{
    unsigned flags = _i == MODE_PREAD ? IO_FORCE_PREAD : _i == MODE_STAGED ? IO_NO_CHAIN : 0;
    struct io_ring *r, *plain = file_ring((enum file_mode)_i, 4);
    if (!plain)
        return;
    ck_assert_int_eq(io_ring_create(&r, 4, flags | IO_NO_SYNC, NULL, 0), 0);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(efd, 0);
    ck_assert_int_eq(io_ring_eventfd(r, efd), _i == MODE_PREAD ? -EOPNOTSUPP : 0);
    int dirfd = open(file_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd, 0);
    enum { N = 40 };
    struct io_req q[N];
    size_t room[N];
    uint8_t *exp = malloc(MAX_LEN);
    ck_assert_ptr_nonnull(exp);
    memset(nosync_calls, 0, sizeof(nosync_calls));
    for (unsigned i = 0; i < N; i++) {
        unsigned f = i % NFILES;
        if (i % 4 == 3)
            q[i] = (struct io_req){test_fd, NULL, 1 + rnd() % MAX_LEN, rnd() % FILE_SIZE, 0};
        else
            q[i] = (struct io_req){.fd = dirfd, .len = file_sizes[f] + 100, .path = file_names[f]};
        room[i] = q[i].len;
        q[i].buf = malloc(room[i] + 1);
        ck_assert_ptr_nonnull(q[i].buf);
        q[i].on_done = nosync_done;
        q[i].arg = (void *)(uintptr_t)i;
        io_submit(r, &q[i]);
        if (_i == MODE_PREAD) /* deferred at once */
            ck_assert_uint_eq(nosync_calls[i], 1);
    }
    io_poll(r);
    for (int spins = 0; spins < 500; spins++) {
        unsigned done = 0;
        for (unsigned i = 0; i < N; i++)
            done += io_done(&q[i]);
        if (done == N)
            break;
        struct pollfd pfd = {efd, POLLIN, 0};
        ck_assert_int_eq(poll(&pfd, 1, 2000), 1); /* the eventfd says when */
        uint64_t v;
        ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
        io_poll(r);
    }
    unsigned deferred = 0;
    for (unsigned i = 0; i < N; i++) {
        ck_assert_msg(io_done(&q[i]), "request %u not done", i);
        ck_assert_uint_eq(nosync_calls[i], 1);
        int want_deferred = _i == MODE_PREAD || (_i == MODE_STAGED && q[i].path);
        ck_assert_msg((q[i].res == IO_DEFERRED) == want_deferred, "%s request %u: res %zd",
                      mode_names[_i], i, q[i].res);
        if (q[i].res == IO_DEFERRED) { /* on a ring that may block */
            deferred++;
            q[i].on_done = NULL;
            io_submit(plain, &q[i]);
            io_wait(plain, &q[i]);
        }
        check_req(&q[i], i % NFILES, room[i], dirfd, exp);
        free(q[i].buf);
    }
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.deferred, deferred);
    close(dirfd);
    close(efd);
    free(exp);
    io_ring_destroy(r);
    io_ring_destroy(plain);
}
END_TEST

/* A missing file fails at stat (chained: the stat comes first) or open; a
 * directory at read; a bad directory fd at the first step; each fails its
 * own request only. _i: the mode. */
START_TEST(test_file_errors)
{
    struct io_ring *r = file_ring((enum file_mode)_i, 4);
    if (!r)
        return;
    int dirfd = open(file_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd, 0);
    static uint8_t bufs[5][8192];
    struct io_req q[5] = {
        {.fd = dirfd, .buf = bufs[0], .len = 8192, .path = "no-such-file"},
        {.fd = dirfd, .buf = bufs[1], .len = 8192, .path = "sub"},
        {.fd = dirfd, .buf = bufs[2], .len = 8192, .path = file_names[2]},
        {.fd = -1, .buf = bufs[3], .len = 8192, .path = file_names[2]},
        {.fd = dirfd, .buf = bufs[4], .len = 8192, .path = "sub/no-such-file"},
    };
    for (int i = 0; i < 5; i++)
        io_submit(r, &q[i]);
    for (int i = 4; i >= 0; i--) /* any order */
        io_wait(r, &q[i]);
    ck_assert_int_eq(q[0].res, -ENOENT);
    ck_assert_uint_eq(q[0].failed, _i == MODE_CHAINED ? IO_STEP_STAT : IO_STEP_OPEN);
    ck_assert_int_eq(q[1].res, -EISDIR);
    ck_assert_uint_eq(q[1].failed, IO_STEP_READ);
    check_file(&q[2], 2, 8192, dirfd);
    ck_assert_int_eq(q[3].res, -EBADF);
    ck_assert_uint_ne(q[3].failed, IO_STEP_NONE);
    ck_assert_int_eq(q[4].res, -ENOENT);
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.files, 5);
    ck_assert_uint_eq(s.file_errors, 4);
    ck_assert_uint_eq(s.errors, 4);
    /* The ring is fine afterwards. */
    random_batch(r, 40);
    close(dirfd);
    io_ring_destroy(r);
}
END_TEST

/* With real_root set, a link that leaves the directory is refused (-EXDEV
 * at open, whichever way the file is opened) and links that stay inside,
 * relative or absolute, are read; without it any link is followed. _i: the
 * mode. */
START_TEST(test_links_beneath)
{
    struct io_ring *r = file_ring((enum file_mode)_i, 4);
    if (!r)
        return;
    char root[PATH_MAX], path[PATH_MAX + 64], target[PATH_MAX + 64], outside[PATH_MAX + 64];
    ck_assert_ptr_nonnull(realpath(file_dir, root));
    snprintf(outside, sizeof(outside), "%s-outside.bin", root);
    int fd = open(outside, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "secret", 6), 6);
    close(fd);
    static const char *const names[3] = {"sub/rel-in", "abs-in", "out"};
    snprintf(path, sizeof(path), "%s/%s", root, names[0]);
    ck_assert_int_eq(symlink("../file0.bin", path), 0);
    snprintf(path, sizeof(path), "%s/%s", root, names[1]);
    snprintf(target, sizeof(target), "%s/file0.bin", root);
    ck_assert_int_eq(symlink(target, path), 0);
    snprintf(path, sizeof(path), "%s/%s", root, names[2]);
    ck_assert_int_eq(symlink(outside, path), 0);

    int dirfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd, 0);
    static uint8_t bufs[4][8192];
    struct io_req q[4];
    for (int i = 0; i < 4; i++)
        q[i] = (struct io_req){.fd = dirfd, .buf = bufs[i], .len = 8192,
                               .path = names[i < 3 ? i : 2], .real_root = i < 3 ? root : NULL};
    for (int i = 0; i < 4; i++)
        io_submit(r, &q[i]);
    for (int i = 0; i < 4; i++)
        io_wait(r, &q[i]);
    check_file(&q[0], 0, 8192, dirfd);
    check_file(&q[1], 0, 8192, dirfd);
    ck_assert_int_eq(q[2].res, -EXDEV);
    ck_assert_uint_ne(q[2].failed, IO_STEP_NONE);
    ck_assert_int_eq(q[3].res, 6); /* no real_root: followed */
    ck_assert(memcmp(bufs[3], "secret", 6) == 0);

    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", root, names[i]);
        unlink(path);
    }
    unlink(outside);
    close(dirfd);
    io_ring_destroy(r);
}
END_TEST

/* Requests taken back: the queued ones come back -ECANCELED untouched,
 * those in the kernel finish; the ring goes on. _i: the mode. */
START_TEST(test_cancel)
{
    struct io_ring *r = file_ring((enum file_mode)_i, 4);
    if (!r)
        return;
    int dirfd = open(file_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(dirfd, 0);
    enum { N = 40 };
    static uint8_t bufs[N][8192];
    struct io_req q[N];
    for (int i = 0; i < N; i++) {
        memset(bufs[i], 0xee, sizeof(bufs[i]));
        q[i] = (struct io_req){.fd = dirfd, .buf = bufs[i], .len = 8192,
                               .path = file_names[i % NFILES]};
        io_submit(r, &q[i]);
    }
    io_poll(r); /* some are in the kernel now (not with pread) */
    io_wait(r, &q[0]);
    unsigned cancelled = 0;
    for (int i = N - 1; i >= 1; i--) {
        io_cancel(r, &q[i]);
        ck_assert(io_done(&q[i]));
        if (q[i].res == -ECANCELED) {
            cancelled++;
            ck_assert_uint_eq(bufs[i][0], 0xee);
        } else {
            check_file(&q[i], (unsigned)i % NFILES, 8192, dirfd);
        }
    }
    ck_assert_uint_ge(cancelled, N - 1 - 4); /* at most depth were started */
    io_cancel(r, &q[0]); /* done already: nothing happens */
    check_file(&q[0], 0, 8192, dirfd);
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.in_flight, 0);
    ck_assert_uint_eq(s.files, N - cancelled);
    /* Reused at once, and the ring goes on. */
    io_submit(r, &q[5]);
    io_wait(r, &q[5]);
    check_file(&q[5], 5, 8192, dirfd);
    random_batch(r, 20);
    close(dirfd);
    io_ring_destroy(r);
}
END_TEST

/* The histograms: quantiles fall in the right buckets, capped by the max. */
START_TEST(test_latency_quantiles)
{
    static struct io_lat h;
    memset(&h, 0, sizeof(h));
    ck_assert_uint_eq(io_lat_quantile(&h, 0.5), 0);
    ck_assert_uint_eq(io_lat_quantile(&h, 0.99), 0);
    /* Measured on a ring: every file request lands once; p50 <= p99 <= max. */
    struct io_ring *r = file_ring(MODE_PREAD, 4);
    ck_assert_ptr_nonnull(r);
    int dirfd = open(file_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    static uint8_t buf[1 << 20];
    for (unsigned i = 0; i < 50; i++) {
        struct io_req q = {.fd = dirfd, .buf = buf, .len = sizeof(buf),
                           .path = file_names[i % NFILES]};
        io_submit(r, &q);
        io_wait(r, &q);
    }
    struct io_stats s;
    io_ring_stats(r, &s);
    ck_assert_uint_eq(s.file_lat.count, 50);
    uint64_t total = 0;
    for (unsigned i = 0; i < IO_LAT_BUCKETS; i++)
        total += s.file_lat.b[i];
    ck_assert_uint_eq(total, 50);
    ck_assert_uint_le(io_lat_quantile(&s.file_lat, 0.5), io_lat_quantile(&s.file_lat, 0.99));
    ck_assert_uint_le(io_lat_quantile(&s.file_lat, 1.0), s.file_lat.max_us);
    ck_assert_uint_le(s.file_lat.sum_us, 50 * s.file_lat.max_us);
    close(dirfd);
    io_ring_destroy(r);
    /* Synthetic: 90 values in bucket 3 (3 us), 10 in the bucket of 1000 us
     * (1000 = 1111101000b: [960, 1023]). */
    h.b[3] = 90;
    h.max_us = 1000;
    unsigned b1000 = (9 - 2) * IO_LAT_SUB + ((1000 >> 6) & 7);
    h.b[b1000] = 10;
    ck_assert_uint_eq(io_lat_quantile(&h, 0.5), 3);
    ck_assert_uint_eq(io_lat_quantile(&h, 0.9), 3);
    ck_assert_uint_eq(io_lat_quantile(&h, 0.91), 1000); /* the bucket's edge, capped */
    h.max_us = 5000;
    ck_assert_uint_eq(io_lat_quantile(&h, 0.99), 1023);
    /* Sums over rings merge the buckets. */
    struct io_stats a, sum;
    memset(&a, 0, sizeof(a));
    memset(&sum, 0, sizeof(sum));
    a.file_lat = h;
    io_stats_add(&sum, &a);
    io_stats_add(&sum, &a);
    ck_assert_uint_eq(sum.file_lat.b[3], 180);
    ck_assert_uint_eq(io_lat_quantile(&sum.file_lat, 0.99), 1023);
}
END_TEST

/* Reads of n random pieces into buf (each inside [buf, buf + room)) through r,
 * compared with pread; returns how many of them were READ_FIXED. */
static uint64_t reads_into(struct io_ring *r, uint8_t *buf, size_t room, unsigned n)
{
    struct io_req reqs[16];
    uint8_t *exp = malloc(room);
    ck_assert_ptr_nonnull(exp);
    ck_assert_uint_le(n, 16);
    memset(reqs, 0, sizeof(reqs));
    size_t piece = room / n;
    for (unsigned i = 0; i < n; i++) {
        reqs[i].fd = test_fd;
        reqs[i].len = 1 + rnd() % piece;
        reqs[i].off = rnd() % (FILE_SIZE - reqs[i].len);
        reqs[i].buf = buf + i * piece;
    }
    struct io_stats before, after;
    io_ring_stats(r, &before);
    unsigned failed = io_read_batch(r, reqs, n);
    io_ring_stats(r, &after);
    for (unsigned i = 0; i < n; i++) {
        ck_assert_int_eq(expect(&reqs[i], exp), reqs[i].len);
        ck_assert_msg(reqs[i].res == (ssize_t)reqs[i].len, "req %u of %u (%p, %zu bytes): %s",
                      i, n, reqs[i].buf, reqs[i].len,
                      reqs[i].res < 0 ? strerror((int)-reqs[i].res) : "short");
        ck_assert_msg(memcmp(reqs[i].buf, exp, reqs[i].len) == 0, "req %u: bytes differ", i);
    }
    ck_assert_uint_eq(failed, 0);
    free(exp);
    return after.fixed_reads - before.fixed_reads;
}

/* Registered buffers: reads inside one are READ_FIXED with the same bytes,
 * reads elsewhere are not; unregistering frees its entry; the table's
 * size is a limit; the pread backend refuses (counted) and reads as
 * before. */
START_TEST(test_registered_buffers)
{
    enum { ROOM = 1 << 20 };
    uint8_t *bufs[IO_BUFS + 1], *plain = malloc(ROOM);
    ck_assert_ptr_nonnull(plain);
    for (int i = 0; i <= IO_BUFS; i++) {
        ck_assert_int_eq(posix_memalign((void **)&bufs[i], 4096, ROOM), 0);
    }
    struct io_ring *p = make_ring(0, 8);
    struct io_stats s;
    ck_assert_int_eq(io_ring_buf_register(p, bufs[0], ROOM), -EOPNOTSUPP);
    ck_assert_uint_eq(reads_into(p, bufs[0], ROOM, 8), 0);
    io_ring_stats(p, &s);
    ck_assert_uint_eq(s.buffers_refused, 1);
    ck_assert_uint_eq(s.buffers, 0);
    io_ring_buf_unregister(p, bufs[0]); /* never registered: nothing */
    io_ring_destroy(p);

    struct io_ring *r = make_ring(1, 8);
    if (r) {
        int idx = io_ring_buf_register(r, bufs[0], ROOM);
        if (idx == -ENOMEM || idx == -EPERM || idx == -EOPNOTSUPP || idx == -EINVAL) {
            printf("skipping the registered-buffer checks: %s\n", strerror(-idx));
        } else {
            ck_assert_int_ge(idx, 0);
            ck_assert_uint_eq(reads_into(r, bufs[0], ROOM, 16), 16);
            ck_assert_uint_eq(reads_into(r, plain, ROOM, 16), 0);
            /* reads just past its end (the upper half of a larger block
             * whose lower half is registered) are not inside it */
            uint8_t *two = NULL;
            ck_assert_int_eq(posix_memalign((void **)&two, 4096, 2 * ROOM), 0);
            ck_assert_int_ge(io_ring_buf_register(r, two, ROOM), 0);
            ck_assert_uint_eq(reads_into(r, two + ROOM, ROOM, 16), 0);
            ck_assert_uint_eq(reads_into(r, two, ROOM, 16), 16);
            io_ring_buf_unregister(r, two);
            free(two);
            for (int i = 1; i < IO_BUFS; i++)
                ck_assert_int_ge(io_ring_buf_register(r, bufs[i], ROOM), 0);
            ck_assert_int_eq(io_ring_buf_register(r, bufs[IO_BUFS], ROOM), -ENOSPC);
            io_ring_stats(r, &s);
            ck_assert_uint_eq(s.buffers, IO_BUFS);
            ck_assert_uint_eq(s.buffers_refused, 1);
            io_ring_buf_unregister(r, bufs[0]);
            ck_assert_uint_eq(reads_into(r, bufs[0], ROOM, 8), 0);
            ck_assert_int_ge(io_ring_buf_register(r, bufs[IO_BUFS], ROOM), 0);
            ck_assert_uint_eq(reads_into(r, bufs[IO_BUFS], ROOM, 8), 8);
            io_ring_stats(r, &s);
            ck_assert_uint_eq(s.buffers, IO_BUFS);
        }
        io_ring_destroy(r);
    }
    for (int i = 0; i <= IO_BUFS; i++)
        free(bufs[i]);
    free(plain);
}
END_TEST

static Suite *io_suite(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batches_pread);
    tcase_add_test(tc, test_batches_uring);
    tcase_add_test(tc, test_past_eof_pread);
    tcase_add_test(tc, test_past_eof_uring);
    tcase_add_test(tc, test_bad_fd_pread);
    tcase_add_test(tc, test_bad_fd_uring);
    tcase_add_test(tc, test_small_depth);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_buf_alloc);
    tcase_add_test(tc, test_env_forces_pread);
    tcase_add_test(tc, test_refused_by_seccomp);
    tcase_add_test(tc, test_stats_from_another_thread);
    tcase_add_test(tc, test_registered_buffers);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("files");
    tcase_add_checked_fixture(tf, files_setup, files_teardown);
    tcase_set_timeout(tf, 60);
    tcase_add_test(tf, test_files_pread);
    tcase_add_test(tf, test_files_staged);
    tcase_add_test(tf, test_files_chained);
    tcase_add_loop_test(tf, test_file_errors, MODE_PREAD, MODE_CHAINED + 1);
    tcase_add_loop_test(tf, test_cancel, MODE_PREAD, MODE_CHAINED + 1);
    tcase_add_loop_test(tf, test_no_sync, MODE_PREAD, MODE_CHAINED + 1);
    tcase_add_loop_test(tf, test_links_beneath, MODE_PREAD, MODE_CHAINED + 1);
    tcase_add_test(tf, test_latency_quantiles);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(io_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/*
 * Integration test harness: a temporary directory, data sets made by
 * tests/tools/mkdataset.py, and a real prestod started and stopped around
 * the tests.
 *
 * Environment (set by tests/run-tests.sh): PRESTO_BUILD (where prestod is,
 * default "build"), PRESTO_SRC (the repository, default "."), PYTHON
 * (default /usr/bin/python3), PRESTO_PHOTOS (source photos for
 * mkdataset.py), TMPDIR, and PRESTO_VALGRIND=1 to run prestod under
 * valgrind (a leak or memory error makes it exit 99).
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure, after printing what went wrong to stderr.
 */
#ifndef PRESTO_TEST_HARNESS_H
#define PRESTO_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <check.h>

#include "presto.h"

#define HARNESS_PATH_MAX 256
/* Exit status of a test program that cannot run here (liburing convention). */
#define HARNESS_SKIP 77

struct harness {
    char dir[HARNESS_PATH_MAX];  /* temporary directory, removed at cleanup */
    char sock[HARNESS_PATH_MAX]; /* the running daemon's socket */
    char log[HARNESS_PATH_MAX];  /* the running daemon's stderr */
    char conf[HARNESS_PATH_MAX]; /* harness_start_config's file */
    pid_t pid;                   /* the running daemon, or 0 */
    unsigned starts;             /* daemons started so far (names logs) */
    unsigned stop_failures;      /* harness_stop_checked: daemons that did not exit 0 */
};

/* $name, or def when unset or empty. */
const char *harness_env(const char *name, const char *def);

/* Creates the temporary directory (under $TMPDIR, else /tmp). */
int harness_init(struct harness *h);
/* Runs a libcheck suite (CK_VERBOSITY picks the output, as CK_ENV does),
 * frees the runner and returns the number of failed tests. */
int harness_run_suite(Suite *s);
/* One test case of a table that harness_add_cases spreads over TCases. */
struct harness_case {
    const char *name;
    const TTest *test;
};
/* A TCase with setup/teardown (either may be NULL) as its unchecked fixture
 * (run once, in the test program, around its tests) and timeout_s. */
TCase *harness_tcase(const char *name, SFun setup, SFun teardown, double timeout_s);
/* Adds a TCase per case, each with setup/teardown as its unchecked fixture
 * (a daemon of its own, so its stats start from zero) and timeout_s. */
void harness_add_cases(Suite *s, const struct harness_case *cases, size_t n, SFun setup,
                       SFun teardown, double timeout_s);
/* 1 (after printing a skip line) when PRESTO_PHOTOS names no directory with a
 * *.jpg in it (what tests/tools/mkdataset.py makes datasets from). */
int harness_photos_missing(void);
/* Stops a running daemon and removes the directory with all it holds. */
void harness_cleanup(struct harness *h);
/* The end of a suite's main(): every daemon log printed when a test failed
 * (failed: harness_run_suite's count) or a daemon did not stop cleanly,
 * then harness_cleanup. Returns main's exit status. */
int harness_finish(struct harness *h, int failed);

/* h->dir + "/" + name into buf. */
int harness_path(const struct harness *h, const char *name, char *buf, size_t len);
/* Writes text to h->dir/name; the full path goes to path. */
int harness_write_file(const struct harness *h, const char *name, const char *text,
                       char *path, size_t pathlen);

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr to out_path
 * (or inherited when NULL). Returns its exit status, 128 + signal when a
 * signal ended it, -ETIMEDOUT when it ran past timeout_s (it is killed), or
 * another negative errno. */
int harness_run(const char *const *argv, const char *out_path, int timeout_s);

/* Makes an ImageFolder data set in h->dir/name with mkdataset.py (images
 * whose longer side is in [min_side, max_side]); its path goes to root. */
int harness_make_dataset(const struct harness *h, const char *name, unsigned count,
                         unsigned classes, unsigned seed, unsigned min_side,
                         unsigned max_side, char *root, size_t rootlen);

/* Starts `prestod -s SOCK ARGS...` (args NULL-terminated) with stderr to a
 * log in h->dir and waits (up to 20 s) until it accepts connections. If it
 * exits or does not get ready, prints its log and fails. */
int harness_start(struct harness *h, const char *const *args);
/* Writes yaml to h->conf (h->dir/prestod-N.yaml) and starts the daemon
 * with `-c h->conf` and args (NULL-terminated, may be NULL) after it. */
int harness_start_config(struct harness *h, const char *yaml, const char *const *args);
/* SIGTERM, then waits up to 10 s (SIGKILL after). Returns the exit status
 * (0 for a clean shutdown), 128 + signal, or -ETIMEDOUT when it had to be
 * killed. Prints the log unless the status is 0. */
int harness_stop(struct harness *h);
/* harness_stop from a fixture: a daemon that does not exit 0 is a failure
 * of the suite (a FAIL line, counted in h->stop_failures, which
 * harness_finish reads). Returns harness_stop's status. */
int harness_stop_checked(struct harness *h);
/* 1 while the daemon runs (only in the process that started it). */
int harness_alive(const struct harness *h);
/* Copies the daemon's log to stderr. */
void harness_print_log(const struct harness *h);
/* Copies the log of every daemon started so far to stderr. */
void harness_print_all_logs(const struct harness *h);

int harness_connect(const struct harness *h, presto_t **p);

/* 1 when the running daemon's log holds needle, else 0. */
int harness_log_contains(const struct harness *h, const char *needle);
/* Polls the log (every 20 ms, up to timeout_ms) for needle: 0 or -ETIMEDOUT. */
int harness_wait_log(const struct harness *h, const char *needle, int timeout_ms);

/* One epoch pulled on a connection of its own: counts, and the FNV-1a of
 * every batch's labels then data, in order. */
struct harness_epoch {
    uint64_t samples, batches, skipped, fnv;
};
/* 0, or the negative code of the first failure (printed with its message). */
int harness_pull_epoch(const struct harness *h, const presto_stream_opts_t *o,
                       struct harness_epoch *e);
/* The stats JSON (free() it). */
int harness_stats(const struct harness *h, char **json);

/* The number at "key": in json, searching after "parent": when parent is
 * not NULL (for the nested objects of the stats document; a dotted path,
 * "limits.connections", looks for each key after the one before). Returns
 * 0 or -ENOENT. */
int harness_json_number(const char *json, const char *parent, const char *key,
                        double *out);
/* One number from a fresh stats document. */
int harness_stat(const struct harness *h, const char *parent, const char *key,
                 double *out);
/* Polls the stat (every 20 ms, up to timeout_ms) until it equals want;
 * returns 0 when it did, or -ETIMEDOUT with the last value in *last. */
int harness_wait_stat(const struct harness *h, const char *parent, const char *key,
                      double want, int timeout_ms, double *last);

/* ---- raw protocol, for malformed and hostile clients ---- */

/* A plain connection to the daemon's socket: the fd, or a negative errno. */
int harness_raw_connect(const struct harness *h);
/* Writes one frame (header with this version and type, then body). Returns
 * 0 or a negative errno. */
int harness_send_frame(int fd, uint16_t version, uint16_t type, uint32_t req_id,
                       const void *body, uint32_t len);
/* Reads one frame within timeout_ms: its header, and up to cap bytes of its
 * body into body (the rest is read and dropped). Returns 0, -ETIMEDOUT, or
 * -ECONNRESET when the daemon closed the connection first. */
struct proto_header;
int harness_read_frame(int fd, int timeout_ms, struct proto_header *hdr, uint8_t *body,
                       size_t cap);
/* Reads and drops what the daemon sends until it closes the connection:
 * the byte count, or -ETIMEDOUT if it stayed open for timeout_ms. */
long harness_read_until_eof(int fd, int timeout_ms);
/* The code of an ERROR body (its first u32). */
uint32_t harness_error_code(const uint8_t *body);

/* ---- a process's resources ---- */

/* A "Key:" line of /proc/PID/status in kB (VmRSS, VmHWM, ...), or a
 * negative errno. */
long harness_proc_status_kb(pid_t pid, const char *key);
/* Open file descriptors of pid (/proc/PID/fd), or a negative errno. */
int harness_proc_fds(pid_t pid);

/* ---- other users (the program runs as root) ---- */

/* harness_init for a program whose tests run clients as other users: it
 * needs root (else a skip line and HARNESS_SKIP; the same without photos),
 * and the directory is 0711, so that others reach what is made in it for
 * them. 0, HARNESS_SKIP, or a negative errno (nothing left behind). */
int harness_init_for_others(struct harness *h);
/* Drops to uid with primary group gid and the supplementary groups given
 * (setgroups, setgid, setuid): 0, or a negative errno after saying why. */
int harness_become(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups);
/* What a child does as that user; its return is the child's exit status. */
typedef int (*harness_child_fn)(void *arg);
/* Runs fn(arg) in a forked child that became uid (harness_become; it exits
 * 100 if it could not): its pid, or a negative errno. The caller reaps it. */
pid_t harness_spawn_as(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups,
                       harness_child_fn fn, void *arg);
/* The same, waited for: the exit status (128 + a signal), or a negative
 * errno. */
int harness_run_as(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups,
                   harness_child_fn fn, void *arg);

/* FNV-1a 64 over len bytes, continuing from h (start with HARNESS_FNV_INIT). */
#define HARNESS_FNV_INIT 0xcbf29ce484222325ull
uint64_t harness_fnv(uint64_t h, const void *p, size_t len);

#endif

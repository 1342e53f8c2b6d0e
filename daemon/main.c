/*
 * prestod: start-up, signals and shutdown. Wires the modules together
 * (daemon/README draws the layers): config -> datasets (reload.h: the
 * configuration in force) -> tiers (the disk tier recovered and scanned,
 * the memory tier) -> pipeline -> worker pool -> read-ahead -> server, one
 * event loop. SIGHUP reloads the configuration (reload.h says what a
 * reload applies).
 */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cachedir.h"
#include "config.h"
#include "dataset.h"
#include "log.h"
#include "notify.h"
#include "objstore.h"
#include "pipeline.h"
#include "profile.h"
#include "readahead.h"
#include "reload.h"
#include "server.h"
#include "tiers.h"
#include "workers.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: prestod [options]\n"
            "Serves preprocessed dataset batches to trainers over a Unix socket.\n\n"
            "  -c, --config FILE        YAML configuration (default: none, built-in defaults)\n"
            "  -s, --socket PATH        listen here (default: $PRESTO_SOCKET, else\n"
            "                           $XDG_RUNTIME_DIR/presto/prestod.sock, else\n"
            "                           /tmp/presto-$UID/prestod.sock)\n"
            "  -d, --dataset NAME=DIR   serve the ImageFolder DIR as NAME with the default\n"
            "                           pipeline (decode, resize 256, center_crop 224 offline;\n"
            "                           random_flip 0.5 online); repeatable\n"
            "  -w, --workers N          worker threads (default: one per core)\n"
            "  -m, --cache-memory SIZE  memory cache budget, e.g. 4GiB or 25%%\n"
            "      --cache-dir DIR      cache directory\n"
            "  -l, --log-level LEVEL    error, warn, info or debug\n"
            "      --check-config       check the configuration as start-up does (the\n"
            "                           file, dataset roots, socket, cache directory)\n"
            "                           and exit\n"
            "  -h, --help               this help\n"
            "  -V, --version            print the version\n");
}

struct main_opts {
    const char *config, *socket, *cache_dir, *cache_memory, *log_level;
    const char **datasets;
    int ndatasets;
    long workers;
    int check_only;
};

static int parse_args(int argc, char **argv, struct main_opts *o)
{
    enum { OPT_CACHE_DIR = 256, OPT_CHECK };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"socket", required_argument, NULL, 's'},
        {"dataset", required_argument, NULL, 'd'},
        {"workers", required_argument, NULL, 'w'},
        {"cache-memory", required_argument, NULL, 'm'},
        {"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
        {"log-level", required_argument, NULL, 'l'},
        {"check-config", no_argument, NULL, OPT_CHECK},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    char *end;
    memset(o, 0, sizeof(*o));
    o->workers = -1;
    o->datasets = calloc((size_t)argc, sizeof(*o->datasets));
    if (!o->datasets)
        return 1;
    while ((ch = getopt_long(argc, argv, "c:s:d:w:m:l:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': o->config = optarg; break;
        case 's': o->socket = optarg; break;
        case 'd': o->datasets[o->ndatasets++] = optarg; break;
        case 'm': o->cache_memory = optarg; break;
        case 'l': o->log_level = optarg; break;
        case OPT_CACHE_DIR: o->cache_dir = optarg; break;
        case OPT_CHECK: o->check_only = 1; break;
        case 'w':
            errno = 0;
            o->workers = strtol(optarg, &end, 10);
            if (errno || *end || o->workers < 0 || o->workers > 1024) {
                fprintf(stderr, "prestod: --workers '%s': expected 0..1024\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("prestod %s\n", PRESTO_VERSION); exit(0);
        default:
            fprintf(stderr, "prestod: try 'prestod --help'\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "prestod: unexpected argument '%s'; try 'prestod --help'\n",
                argv[optind]);
        return 2;
    }
    return 0;
}

/* Command-line options override the file. */
static int apply_args(struct config *c, const struct main_opts *o, char *err, size_t errlen)
{
    int lvl;
    if (o->socket) {
        free(c->socket_path);
        if (!(c->socket_path = strdup(o->socket)))
            return -ENOMEM;
    }
    if (o->cache_dir && config_set_cache_dir(c, o->cache_dir) < 0)
        return -ENOMEM;
    if (o->cache_memory && config_parse_size(o->cache_memory, &c->cache_memory) < 0) {
        snprintf(err, errlen, "--cache-memory '%s': not a size", o->cache_memory);
        return -EINVAL;
    }
    if (o->log_level) {
        if ((lvl = log_level_parse(o->log_level)) < 0) {
            snprintf(err, errlen, "--log-level '%s': not error, warn, info or debug",
                     o->log_level);
            return -EINVAL;
        }
        c->log_level = lvl;
    }
    if (o->workers >= 0)
        c->workers = (uint32_t)o->workers;
    for (int i = 0; i < o->ndatasets; i++) {
        int rc = config_add_dataset_arg(c, o->datasets[i], err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The configuration as at start-up: the file, then the command line on
 * top. Also how a reload reads it again (reload_load_fn). */
static int load_config(struct config *c, void *arg, char *err, size_t errlen)
{
    const struct main_opts *o = arg;
    int rc = config_load(c, o->config, err, errlen);
    if (rc == 0)
        rc = apply_args(c, o, err, errlen);
    if (rc < 0 && !err[0])
        snprintf(err, errlen, "%s", strerror(-rc));
    return rc;
}

/* What start-up checks before it indexes or binds anything, and all that
 * --check-config checks past reading the file: the dataset roots, the
 * socket (unless systemd passed one, listen_fd >= 0) and the cache
 * directory where it is used (a disk tier, or a split: auto dataset's
 * recorded choice and profiles): a directory another user could change
 * refuses start-up (cachedir.h). 0, or a negative errno with err. */
static int check_start(const struct config *c, int listen_fd, char *err, size_t errlen)
{
    int rc = config_check_roots(c, err, errlen);
    int cache_used = c->cache_disk > 0;
    for (uint32_t i = 0; i < c->ndatasets; i++)
        cache_used |= c->datasets[i].split_auto;
    if (rc == 0 && listen_fd < 0)
        rc = server_check_socket(c->socket_path, err, errlen);
    if (rc == 0 && cache_used)
        rc = cachedir_check(c->cache_dir, err, errlen);
    return rc;
}

/* Every worker keeps a chunk of source files and segment reads open at
 * once: the soft limit on open files goes up to the hard one. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            log_warn("cannot raise the open files limit from %llu: %s",
                     (unsigned long long)old, strerror(errno));
    }
}

/*
 * A stop during start-up. Until the event loop has its own handlers,
 * SIGTERM and SIGINT (and SIGHUP, whose default would end the daemon too)
 * come here. Before the socket is bound nothing needs undoing (the disk
 * tier is left as after a kill -9, which it survives, and nothing else
 * is on disk yet), so a stop is logged and the daemon exits at once with
 * status 0: also in the middle of indexing a large or slow dataset, as soon
 * as the system call under way returns. From the bind on, the signal is
 * only noted, and main stops (unlinking the socket) instead of serving.
 */
static volatile sig_atomic_t startup_bound; /* the socket exists: note, do not exit */
static volatile sig_atomic_t startup_stop;  /* a stop noted after the bind */
static volatile sig_atomic_t startup_hup;   /* a SIGHUP noted: reload once serving */
static char startup_line[2][96];            /* the log lines for SIGTERM, SIGINT */
static size_t startup_len[2];

static void on_startup_signal(int sig)
{
    if (sig == SIGHUP) {
        startup_hup = 1;
        return;
    }
    if (startup_bound) {
        startup_stop = sig;
        return;
    }
    int i = sig == SIGINT;
    if (write(STDERR_FILENO, startup_line[i], startup_len[i]) < 0) {
        /* nowhere left to say it */
    }
    _exit(0);
}

/* First thing in main: the start-up's handlers (log lines formatted now,
 * in log.c's format, since the handler may only write them). */
static void startup_signals(void)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    struct sigaction sa;
    int tty = isatty(STDERR_FILENO);
    for (int i = 0; i < 2; i++) {
        int n = snprintf(startup_line[i], sizeof(startup_line[i]),
                         "%ssignal %d during start-up: stopped before serving\n",
                         tty ? "prestod: info: " : "<6>", i ? SIGINT : SIGTERM);
        startup_len[i] = n > 0 && (size_t)n < sizeof(startup_line[i]) ? (size_t)n : 0;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_startup_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("signal %d: stopping", (int)sig);
    notify_send("STOPPING=1");
    event_base_loopbreak(arg);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    notify_send("WATCHDOG=1");
}

/* WATCHDOG_USEC when the watchdog is for this process, else 0. */
static long long watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    char *end;
    if (!usec || !*usec)
        return 0;
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    errno = 0;
    long long v = strtoll(usec, &end, 10);
    return errno || *end || v <= 0 ? 0 : v;
}

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    log_info("SIGHUP: reloading the configuration");
    if (reload_request(arg, NULL, NULL) < 0)
        log_error("SIGHUP: no memory to start a reload");
}

static void on_reload_apply(void *arg, const struct config *cfg, struct dataset **datasets,
                            uint32_t n)
{
    server_update(arg, cfg, datasets, n);
}
/* PRESTO_TEST_FAULT, for the tests only: "end" makes every stream's END
 * fail to be queued, "end,error" its ERROR too (server.h). */
static unsigned test_faults(void)
{
    const char *f = getenv("PRESTO_TEST_FAULT");
    unsigned faults = 0;
    if (f && strstr(f, "end"))
        faults |= SERVER_FAULT_END;
    if (f && strstr(f, "error"))
        faults |= SERVER_FAULT_ERROR;
    if (faults)
        log_warn("PRESTO_TEST_FAULT=%s: injected failures (a test's, never a service's)", f);
    return faults;
}


int main(int argc, char **argv)
{
    struct main_opts o;
    struct config cfg;
    struct reload *live = NULL;
    const struct config *c = NULL;
    struct dataset **datasets = NULL;
    uint32_t ndatasets = 0;
    struct tiers *tiers = NULL;
    struct pipeline *pipe = NULL;
    struct event_base *base = NULL;
    struct workers *workers = NULL;
    struct readahead *ra = NULL;
    struct server *srv = NULL;
    struct event *sigs[4] = {NULL};
    char err[1024] = "";
    int rc, status = 1, listen_fd = -1;

    if ((rc = parse_args(argc, argv, &o)) != 0) {
        free(o.datasets);
        return rc;
    }
    startup_signals();
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit: writes fail with EFBIG instead */
    if (objstore_global_init() < 0) { /* libcurl, before any thread */
        fprintf(stderr, "prestod: cannot initialise libcurl\n");
        free(o.datasets);
        return 1;
    }
    if (load_config(&cfg, &o, err, sizeof(err)) < 0) {
        fprintf(stderr, "prestod: %s\n", err);
        goto out;
    }
    log_set_level((enum log_level)cfg.log_level);
    listen_fd = notify_listen_fd();
    if (check_start(&cfg, listen_fd, err, sizeof(err)) < 0) {
        fprintf(stderr, "prestod: %s\n", err);
        goto out;
    }
    if (o.check_only) {
        printf("%s: ok, %u datasets\n", o.config ? o.config : "(defaults)", cfg.ndatasets);
        status = 0;
        goto out;
    }
    raise_nofile();
    notify_send("STATUS=indexing datasets");
    log_info("indexing %u datasets", cfg.ndatasets);
    if ((rc = reload_create(&live, &cfg, err, sizeof(err))) < 0) {
        if (rc == -ENOMEM)
            goto oom;
        log_error("%s", err);
        goto out;
    }
    c = reload_config(live);
    datasets = reload_datasets(live, &ndatasets);
    for (uint32_t i = 0; i < ndatasets; i++)
        if (profile_restore(datasets[i], c) < 0) /* split: auto: the recorded choice */
            goto oom;
    if (ndatasets == 0)
        log_warn("no datasets configured: use -d NAME=DIR or a config file");

    unsigned nworkers = c->workers;
    if (nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nworkers = n > 0 ? (unsigned)n : 1;
    }
    notify_send("STATUS=reading the disk tier");
    struct tiers_config tc = {c->cache_memory, c->cache_dir, c->cache_disk, c->segment_size,
                              (int)c->cache_direct_io, nworkers, &c->cluster};
    if (tiers_create(&tiers, &tc, datasets, ndatasets) < 0 ||
        pipeline_create(&pipe, tiers, c->max_file_size, nworkers) < 0)
        goto oom;
    if (!(base = event_base_new()))
        goto oom;
    struct workers_config wc = {nworkers, c->max_pixels, c->io_depth,
                                c->io_backend == CONFIG_IO_PREAD, c->max_audio_seconds,
                                c->max_audio_channels};
    if ((rc = workers_create(&workers, base, &wc)) < 0) {
        log_error("cannot start %u worker threads: %s", nworkers, strerror(-rc));
        goto out;
    }
    tiers_attach(tiers, workers); /* compaction on demand */
    if (readahead_create(&ra, base, c->io_depth, c->io_readahead,
                         c->io_backend == CONFIG_IO_PREAD) < 0)
        goto oom;
    struct server_deps deps = {
        .base = base, .cfg = c, .datasets = datasets, .ndatasets = ndatasets,
        .tiers = tiers, .pipeline = pipe, .workers = workers, .reload = live,
        .readahead = ra, .faults = test_faults(),
    };
    startup_bound = 1; /* a stop from here on unlinks the socket: main does it */
    if (server_create(&srv, &deps, listen_fd, err, sizeof(err)) < 0) {
        log_error("%s", err);
        goto out;
    }
    struct reload_env renv = {
        .workers = workers, .tiers = tiers, .load = load_config, .load_arg = &o,
        .apply = on_reload_apply, .apply_arg = srv,
    };
    reload_attach(live, &renv);
    int signums[4] = {SIGTERM, SIGINT, SIGHUP, 0};
    for (int i = 0; signums[i]; i++) {
        if (signums[i] == SIGHUP)
            sigs[i] = evsignal_new(base, SIGHUP, on_hup, live);
        else
            sigs[i] = evsignal_new(base, signums[i], on_stop_signal, base);
        if (!sigs[i] || event_add(sigs[i], NULL) < 0)
            goto oom;
    }
    if (startup_stop) { /* between the bind and the loop's handlers */
        log_info("signal %d during start-up: stopping before serving", (int)startup_stop);
        status = 0;
        goto out;
    }
    if (startup_hup && reload_request(live, NULL, NULL) < 0)
        log_error("SIGHUP during start-up: no memory to start a reload");
    log_info("prestod %s listening on %s: %u datasets, %u workers, cache %llu MiB in "
             "memory, %s", PRESTO_VERSION, c->socket_path, ndatasets, nworkers,
             (unsigned long long)(c->cache_memory >> 20),
             tiers_store(tiers) ? "a disk tier" : "no disk tier");
    notify_send("READY=1\nSTATUS=serving");
    struct event *wd = NULL;
    long long wdus = watchdog_usec();
    if (wdus > 0) {
        struct timeval tv = {(time_t)(wdus / 2 / 1000000), (suseconds_t)(wdus / 2 % 1000000)};
        wd = event_new(base, -1, EV_PERSIST, on_watchdog, NULL);
        if (wd)
            event_add(wd, &tv);
        notify_send("WATCHDOG=1");
    }
    event_base_dispatch(base);
    if (wd)
        event_free(wd);
    status = 0;
    goto out;
oom:
    log_error("out of memory during start-up");
out:
    if (srv)
        server_stop(srv);
    reload_stop(live);
    workers_destroy(workers);
    readahead_stop(ra);
    for (int i = 0; i < 4; i++)
        if (sigs[i])
            event_free(sigs[i]);
    if (base)
        event_base_free(base);
    server_destroy(srv);
    readahead_destroy(ra);
    reload_destroy(live); /* the datasets leave the tiers */
    pipeline_destroy(pipe);
    tiers_destroy(tiers);
    config_free(&cfg);
    free(o.datasets);
    objstore_global_cleanup();
    if (status == 0 && !o.check_only)
        log_info("stopped");
    return status;
}

/*
 * prestoctl: talks to prestod through libprestoclient's public API only.
 *
 *   prestoctl [-s SOCKET] stats [--format json|prometheus] | datasets |
 *             epoch DATASET [options] |
 *             warm DATASET [--json] | reload | drop-cache
 *
 * Usage errors print one line and exit 2; failures print one line
 * ("prestoctl: ...") and exit 1. `epoch` is also the C benchmark client,
 * so its loop does no per-byte work unless --checksum asks for it.
 */
#include "presto.h"
#include "profile_report.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: prestoctl [-s SOCKET] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  stats                 print the daemon's statistics (JSON, or --format\n"
    "                        prometheus: Prometheus's text exposition format)\n"
    "  datasets              print the datasets the daemon serves (JSON)\n"
    "  epoch DATASET         pull one epoch and report its throughput\n"
    "  warm DATASET          materialize a dataset into the cache ahead of training\n"
    "  reload                re-read the daemon's config file (JSON: what changed)\n"
    "  drop-cache            empty the daemon's memory tier (JSON: what went)\n"
    "  profile DATASET       measure every strategy (split point x disk encoding) on a\n"
    "                        sample of the dataset and rank them\n"
    "  (warm, reload, drop-cache and profile are for root, the daemon's user\n"
    "   and its admin_group)\n"
    "\n"
    "Global options:\n"
    "  -s, --socket SOCKET   daemon socket (default: $PRESTO_SOCKET, else\n"
    "                        $XDG_RUNTIME_DIR/presto/prestod.sock, else\n"
    "                        /tmp/presto-$UID/prestod.sock)\n"
    "  -h, --help            show this help\n"
    "  -V, --version         show the version\n"
    "\n"
    "epoch options:\n"
    "  -b, --batch-size N    samples per batch (default 64)\n"
    "  -e, --epoch E         epoch number (default 0)\n"
    "  -n, --epochs N        pull N epochs from E on, one after the other, as a training\n"
    "                        loop does (one report each; default 1)\n"
    "      --transport T     shm or socket (default: shared memory where the daemon\n"
    "                        can give it, else the socket; see $PRESTO_TRANSPORT)\n"
    "      --seed S          shuffle seed (default 0)\n"
    "      --rank R          this rank (default 0)\n"
    "      --world W         number of ranks (default 1)\n"
    "      --no-shuffle      keep the dataset's order\n"
    "      --drop-last       drop the last, short batch\n"
    "      --prefetch N      batches the daemon prepares ahead (default: daemon's)\n"
    "      --start-batch K   resume the epoch at batch K: the daemon computes nothing\n"
    "                        before it and sends the uninterrupted epoch's batches\n"
    "      --checksum        FNV-1a 64 over every batch's labels (the label tensor,\n"
    "                        lengths), then data\n"
    "      --json            print one JSON line instead of text\n"
    "\n"
    "warm options:\n"
    "      --json            no progress, one JSON line at the end\n"
    "  A progress bar on a terminal, else a progress line every second.\n"
    "\n"
    "profile options:\n"
    "      --samples N       sample size (default: the daemon's profile.samples, else\n"
    "                        2% of the dataset, 64 to 300)\n"
    "      --weights t=W,o=W,s=W  objective weights of throughput, offline time and\n"
    "                        storage (default t=1,o=0,s=0: throughput only; always\n"
    "                        within the disk budget)\n"
    "      --apply           a split: auto dataset records and uses the winner\n"
    "      --verify          then run each strategy's real epochs on the whole dataset\n"
    "                        (cold, warm from memory, warm from disk) and print them\n"
    "                        against the predictions\n"
    "      --verify-top K    --verify, for the K best strategies only\n"
    "  -b, --batch-size N    the online trial's batch: the one the epochs will use\n"
    "                        (default 64, as epoch's and the Python client's)\n"
    "      --csv FILE        write every strategy's figures as CSV ('-': stdout)\n"
    "      --json FILE       ... as JSON\n"
    "      --svg FILE        draw throughput against storage per strategy (SVG)\n"
    "      --quiet           no progress and no table\n"
    "  Progress (strategy, phase, ETA) on a terminal, else a line per strategy.\n";

__attribute__((format(printf, 1, 2), noreturn))
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("prestoctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see prestoctl --help)\n", stderr);
    exit(EXIT_USAGE);
}

__attribute__((noreturn))
static void die(const char *msg)
{
    fprintf(stderr, "prestoctl: %s\n", msg);
    exit(EXIT_FAILURE);
}

/* getopt_long returned '?' or ':' (opterr is off, optstring starts with ':'). */
__attribute__((noreturn))
static void die_bad_option(int c, char *const argv[])
{
    const char *arg = argv[optind - 1];
    if (c == ':')
        die_usage("option '%s' needs an argument", arg);
    if (optopt > 0 && optopt < 128 && strncmp(arg, "--", 2) != 0)
        die_usage("unknown option '-%c'", optopt);
    die_usage("bad option '%s'", arg);
}

/* The one DATASET operand of a command, after its options. */
static const char *dataset_operand(const char *cmd, int argc, char *const argv[])
{
    if (optind >= argc)
        die_usage("%s needs a DATASET", cmd);
    if (optind + 1 < argc)
        die_usage("%s takes one DATASET, got also '%s'", cmd, argv[optind + 1]);
    return argv[optind];
}

static uint64_t parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno || v < min || v > max)
        die_usage("%s wants a number from %" PRIu64 " to %" PRIu64 ", not '%s'", opt, min, max,
                  s);
    return v;
}

__attribute__((noreturn))
static void help(void)
{
    fputs(usage_text, stdout);
    exit(EXIT_SUCCESS);
}

static presto_t *connect_or_die(const char *sock)
{
    presto_t *p;
    if (presto_connect(sock, &p) < 0)
        die(presto_errmsg(p));
    return p;
}

/* Rejects arguments after a command that takes none, allowing --help. */
static void no_args(const char *cmd, int argc, char *argv[])
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h')
            help();
        die_bad_option(c, argv);
    }
    if (optind < argc)
        die_usage("%s takes no arguments", cmd);
}

/* stats [--format json|prometheus]: the call for the format asked. */
static int (*stats_format(int argc, char *argv[]))(presto_t *, char **)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {0}};
    int (*call)(presto_t *p, char **doc) = presto_stats;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h')
            help();
        if (c != 'f')
            die_bad_option(c, argv);
        if (strcmp(optarg, "prometheus") == 0)
            call = presto_stats_prometheus;
        else if (strcmp(optarg, "json") == 0)
            call = presto_stats;
        else
            die_usage("--format wants json or prometheus, not '%s'", optarg);
    }
    if (optind < argc)
        die_usage("stats takes no arguments");
    return call;
}

/* The commands answered by one document. */
static int cmd_json(const char *sock, int argc, char *argv[])
{
    static const struct {
        const char *name;
        int (*call)(presto_t *p, char **json);
    } calls[] = {
        {"stats", presto_stats},
        {"datasets", presto_datasets},
        {"reload", presto_reload},
        {"drop-cache", presto_drop_cache},
    };
    int (*call)(presto_t *p, char **json) = presto_stats;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        if (strcmp(argv[0], calls[i].name) == 0)
            call = calls[i].call;
    if (call == presto_stats)
        call = stats_format(argc, argv);
    else
        no_args(argv[0], argc, argv);
    presto_t *p = connect_or_die(sock);
    char *json;
    if (call(p, &json) < 0)
        die(presto_errmsg(p));
    size_t len = strlen(json);
    fputs(json, stdout);
    if (!len || json[len - 1] != '\n')
        putchar('\n');
    free(json);
    presto_close(p);
    return EXIT_SUCCESS;
}

/* ---- epoch ---- */

#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

static uint64_t fnv1a64(uint64_t h, const void *p, size_t len)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * FNV64_PRIME;
    return h;
}

/* A JSON string literal (the dataset name, as the user typed it). */
static void put_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

enum {
    OPT_SEED = 256,
    OPT_RANK,
    OPT_WORLD,
    OPT_NO_SHUFFLE,
    OPT_DROP_LAST,
    OPT_PREFETCH,
    OPT_CHECKSUM,
    OPT_JSON,
    OPT_SAMPLES,
    OPT_WEIGHTS,
    OPT_APPLY,
    OPT_VERIFY,
    OPT_VERIFY_TOP,
    OPT_CSV,
    OPT_SVG,
    OPT_QUIET,
    OPT_TRANSPORT,
    OPT_START_BATCH,
};

/* Pulls one epoch on p and reports it; exits on an error. */
static void epoch_pull(presto_t *p, const presto_stream_opts_t *o, int checksum, int json)
{
    presto_stream_t *s;
    presto_batch_t b;
    struct timespec t0, t1, first = {0, 0};
    uint64_t samples = 0, batches = 0, sum = FNV64_OFFSET;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (presto_stream_open(p, o, &s) < 0)
        die(presto_errmsg(p));
    while ((rc = presto_next(s, &b)) > 0) {
        if (batches == 0)
            clock_gettime(CLOCK_MONOTONIC, &first);
        samples += b.n;
        batches++;
        if (checksum) {
            /* the label tensor (int64 [n] or float32 [n, K]), its lengths */
            uint64_t shape[2];
            size_t row = presto_batch_label_shape(&b, shape) == 2 ? 4 * (size_t)shape[1] : 8;
            sum = fnv1a64(sum, presto_batch_label_data(&b), (size_t)b.n * row);
            if (presto_batch_lengths(&b))
                sum = fnv1a64(sum, presto_batch_lengths(&b), (size_t)b.n * sizeof(int64_t));
            sum = fnv1a64(sum, b.data, b.size);
        }
        presto_release(s, &b);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc < 0)
        die(presto_stream_errmsg(s));

    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (batches == 0)
        first = t1;
    /* From OPEN to the first batch (to the end when there is none). */
    double first_s = (double)(first.tv_sec - t0.tv_sec) +
                     (double)(first.tv_nsec - t0.tv_nsec) / 1e9;
    double rate = secs > 0 ? (double)samples / secs : 0.0;
    uint64_t skipped = presto_stream_skipped(s);
    presto_stream_info_t info;
    presto_stream_info(s, &info);
    const char *transport = info.transport == PRESTO_TRANSPORT_SHM ? "shm" : "socket";
    if (json) {
        fputs("{\"dataset\":", stdout);
        put_json_str(o->dataset);
        printf(",\"epoch\":%" PRIu64 ",\"samples\":%" PRIu64 ",\"batches\":%" PRIu64
               ",\"seconds\":%.6f,\"samples_per_s\":%.1f,\"skipped\":%" PRIu64
               ",\"transport\":\"%s\",\"start_batch\":%" PRIu64 ",\"first_batch_s\":%.6f",
               o->epoch, samples, batches, secs, rate, skipped, transport, o->start_batch,
               first_s);
        if (checksum)
            printf(",\"checksum\":\"%016" PRIx64 "\"", sum);
        puts("}");
    } else {
        printf("%s epoch %" PRIu64 ": %" PRIu64 " samples in %" PRIu64 " batches, %.3f s, "
               "%.1f samples/s, %" PRIu64 " skipped\n",
               o->dataset, o->epoch, samples, batches, secs, rate, skipped);
        if (checksum)
            printf("checksum %016" PRIx64 "\n", sum);
    }
    fflush(stdout);
    presto_stream_close(s);
}

static int cmd_epoch(const char *sock, int argc, char *argv[])
{
    static const struct option opts[] = {
        {"batch-size", required_argument, NULL, 'b'},
        {"epoch", required_argument, NULL, 'e'},
        {"epochs", required_argument, NULL, 'n'},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"rank", required_argument, NULL, OPT_RANK},
        {"world", required_argument, NULL, OPT_WORLD},
        {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
        {"drop-last", no_argument, NULL, OPT_DROP_LAST},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"start-batch", required_argument, NULL, OPT_START_BATCH},
        {"checksum", no_argument, NULL, OPT_CHECKSUM},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    presto_stream_opts_t o;
    int checksum = 0, json = 0, c;
    uint64_t nepochs = 1;

    presto_stream_opts_init(&o);
    while ((c = getopt_long(argc, argv, ":b:e:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'b':
            o.batch_size = (uint32_t)parse_u64("--batch-size", optarg, 1, UINT32_MAX);
            break;
        case 'e': o.epoch = parse_u64("--epoch", optarg, 0, UINT64_MAX); break;
        case 'n': nepochs = parse_u64("--epochs", optarg, 1, UINT32_MAX); break;
        case OPT_TRANSPORT:
            if (strcmp(optarg, "shm") == 0)
                o.transport = PRESTO_TRANSPORT_SHM;
            else if (strcmp(optarg, "socket") == 0)
                o.transport = PRESTO_TRANSPORT_SOCKET;
            else
                die_usage("--transport must be shm or socket, not '%s'", optarg);
            break;
        case OPT_SEED: o.seed = parse_u64("--seed", optarg, 0, UINT64_MAX); break;
        case OPT_RANK: o.rank = (uint32_t)parse_u64("--rank", optarg, 0, UINT32_MAX - 1); break;
        case OPT_WORLD: o.world = (uint32_t)parse_u64("--world", optarg, 1, UINT32_MAX); break;
        case OPT_NO_SHUFFLE: o.shuffle = 0; break;
        case OPT_DROP_LAST: o.drop_last = 1; break;
        case OPT_PREFETCH:
            o.prefetch = (uint32_t)parse_u64("--prefetch", optarg, 0, UINT32_MAX);
            break;
        case OPT_START_BATCH:
            o.start_batch = parse_u64("--start-batch", optarg, 0, UINT64_MAX);
            break;
        case OPT_CHECKSUM: checksum = 1; break;
        case OPT_JSON: json = 1; break;
        case 'h': help();
        default: die_bad_option(c, argv);
        }
    }
    o.dataset = dataset_operand("epoch", argc, argv);
    if (o.rank >= o.world)
        die_usage("--rank %" PRIu32 " must be below --world %" PRIu32, o.rank, o.world);

    presto_t *p = connect_or_die(sock);
    for (uint64_t i = 0; i < nepochs; i++, o.epoch++) {
        epoch_pull(p, &o, checksum, json);
        o.start_batch = 0; /* the epochs after a resumed one start at 0 */
    }
    presto_close(p);
    return EXIT_SUCCESS;
}

/* ---- warm ---- */

struct warm_view {
    const char *dataset;
    int tty, json;
    struct timespec t0;
    double last_line; /* seconds since t0 of the last plain line */
    presto_progress_t last;
};

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* "1:02:03", "2:03" or "--:--" when unknown. */
static void fmt_eta(char *buf, size_t len, double secs)
{
    if (secs < 0 || secs > 360000) {
        snprintf(buf, len, "--:--");
        return;
    }
    unsigned long s = (unsigned long)(secs + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, len, "%lu:%02lu", s / 60, s % 60);
}

static void warm_progress(const presto_progress_t *pr, int final, void *arg)
{
    struct warm_view *v = arg;
    double t = since(&v->t0);
    double mbs = t > 0 ? (double)pr->bytes / 1e6 / t : 0.0;
    double frac = pr->total ? (double)pr->done / (double)pr->total : 1.0;
    double eta = pr->done && t > 0 ? t * (double)(pr->total - pr->done) / (double)pr->done : -1;
    char etabuf[32];
    v->last = *pr;
    if (v->json)
        return;
    fmt_eta(etabuf, sizeof(etabuf), final ? 0 : eta);
    if (v->tty) {
        enum { WIDTH = 30 };
        char bar[WIDTH + 1];
        int fill = (int)(frac * WIDTH);
        for (int i = 0; i < WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = '\0';
        printf("\r%s [%s] %5.1f%% %" PRIu64 "/%" PRIu64 " samples %7.1f MB/s ETA %s ",
               v->dataset, bar, frac * 100, pr->done, pr->total, mbs, etabuf);
        if (final)
            putchar('\n');
        fflush(stdout);
    } else if (!final && (t - v->last_line >= 1.0 || v->last_line == 0)) {
        v->last_line = t > 0 ? t : 1e-9;
        printf("warm %s: %" PRIu64 "/%" PRIu64 " samples (%.1f%%), %.1f MB/s, ETA %s\n",
               v->dataset, pr->done, pr->total, frac * 100, mbs, etabuf);
        fflush(stdout);
    }
}

static int cmd_warm(const char *sock, int argc, char *argv[])
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    struct warm_view v = {0};
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: v.json = 1; break;
        case 'h': help();
        default: die_bad_option(c, argv);
        }
    }
    v.dataset = dataset_operand("warm", argc, argv);
    v.tty = isatty(STDOUT_FILENO);

    presto_t *p = connect_or_die(sock);
    const presto_progress_t *last = &v.last;
    clock_gettime(CLOCK_MONOTONIC, &v.t0);
    if (presto_warm(p, v.dataset, warm_progress, &v) < 0) {
        if (v.tty)
            putchar('\n');
        die(presto_errmsg(p));
    }
    double secs = since(&v.t0);
    double mbs = secs > 0 ? (double)last->bytes / 1e6 / secs : 0.0;
    if (v.json) {
        fputs("{\"dataset\":", stdout);
        put_json_str(v.dataset);
        printf(",\"samples\":%" PRIu64 ",\"computed\":%" PRIu64 ",\"failed\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"mb_per_s\":%.1f}\n",
               last->done, last->computed, last->failed, last->bytes, secs, mbs);
    } else {
        printf("warm %s: %" PRIu64 " samples (%" PRIu64 " computed, %" PRIu64
               " cached already, %" PRIu64 " bad), %.1f MB in %.2f s, %.1f MB/s\n",
               v.dataset, last->done, last->computed,
               last->done - last->computed - last->failed, last->failed,
               (double)last->bytes / 1e6, secs, mbs);
    }
    presto_close(p);
    return EXIT_SUCCESS;
}

/* ---- profile ---- */

struct profile_view {
    const char *dataset;
    int tty, quiet;
    uint32_t last_strategy;
    int lines; /* plain lines printed */
};

static void profile_progress(const presto_profile_progress_t *pr, void *arg)
{
    struct profile_view *v = arg;
    char eta[32];
    if (v->quiet)
        return;
    fmt_eta(eta, sizeof(eta), pr->eta_s);
    if (v->tty) {
        enum { WIDTH = 24 };
        char bar[WIDTH + 1];
        int fill = (int)(pr->fraction * WIDTH);
        for (int i = 0; i < WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = '\0';
        printf("\r%s [%s] %5.1f%% strategy %2" PRIu32 "/%" PRIu32 " %-22s %-7s ETA %s ",
               v->dataset, bar, pr->fraction * 100, pr->strategy + 1, pr->strategies,
               pr->name, pr->phase, eta);
        fflush(stdout);
    } else if (!v->lines || pr->strategy != v->last_strategy) {
        printf("profile %s: strategy %" PRIu32 "/%" PRIu32 " %s, %.1f%%, ETA %s\n",
               v->dataset, pr->strategy + 1, pr->strategies, pr->name, pr->fraction * 100,
               eta);
        fflush(stdout);
        v->lines++;
    }
    v->last_strategy = pr->strategy;
}

/* "t=1,o=0.5,s=0" (also throughput=, offline=, storage=). */
static void parse_weights(const char *arg, presto_profile_opts_t *o)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    o->w_throughput = o->w_offline = o->w_storage = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), *end;
        if (!eq)
            die_usage("--weights wants KEY=VALUE items, not '%s'", tok);
        *eq = '\0';
        errno = 0;
        double w = strtod(eq + 1, &end);
        if (end == eq + 1 || *end || errno || !(w >= 0 && w <= 1e6))
            die_usage("--weights: '%s' is not a weight from 0 to 1000000", eq + 1);
        if (strcmp(tok, "t") == 0 || strcmp(tok, "throughput") == 0)
            o->w_throughput = w;
        else if (strcmp(tok, "o") == 0 || strcmp(tok, "offline") == 0)
            o->w_offline = w;
        else if (strcmp(tok, "s") == 0 || strcmp(tok, "storage") == 0)
            o->w_storage = w;
        else
            die_usage("--weights: unknown key '%s' (t, o or s)", tok);
    }
}

/* Writes one report to path ('-': stdout). */
static void write_report(const char *path, int (*fn)(FILE *, const presto_profile_result_t *),
                         const presto_profile_result_t *r)
{
    char msg[600];
    FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    if (!f) {
        snprintf(msg, sizeof(msg), "%s: %s", path, strerror(errno));
        die(msg);
    }
    int rc = fn(f, r);
    if (f != stdout && fclose(f) != 0)
        rc = -1;
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "writing %s: %s", path, strerror(errno));
        die(msg);
    }
}

static int cmd_profile(const char *sock, int argc, char *argv[])
{
    static const struct option opts[] = {
        {"samples", required_argument, NULL, OPT_SAMPLES},
        {"weights", required_argument, NULL, OPT_WEIGHTS},
        {"apply", no_argument, NULL, OPT_APPLY},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"verify-top", required_argument, NULL, OPT_VERIFY_TOP},
        {"batch-size", required_argument, NULL, 'b'},
        {"csv", required_argument, NULL, OPT_CSV},
        {"json", required_argument, NULL, OPT_JSON},
        {"svg", required_argument, NULL, OPT_SVG},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *csv = NULL, *json = NULL, *svg = NULL;
    presto_profile_opts_t o;
    struct profile_view v = {0};
    int c;

    presto_profile_opts_init(&o);
    while ((c = getopt_long(argc, argv, ":hb:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': o.batch_size = (uint32_t)parse_u64("--batch-size", optarg, 1, UINT32_MAX); break;
        case OPT_SAMPLES:
            o.samples = (uint32_t)parse_u64("--samples", optarg, 1, 100000);
            break;
        case OPT_WEIGHTS: parse_weights(optarg, &o); break;
        case OPT_APPLY: o.apply = 1; break;
        case OPT_VERIFY: o.verify = 1; break;
        case OPT_VERIFY_TOP:
            o.verify = 1;
            o.verify_top = (uint32_t)parse_u64("--verify-top", optarg, 1, 1000);
            break;
        case OPT_CSV: csv = optarg; break;
        case OPT_JSON: json = optarg; break;
        case OPT_SVG: svg = optarg; break;
        case OPT_QUIET: v.quiet = 1; break;
        case 'h': help();
        default: die_bad_option(c, argv);
        }
    }
    o.dataset = v.dataset = dataset_operand("profile", argc, argv);
    v.tty = isatty(STDOUT_FILENO);

    presto_t *p = connect_or_die(sock);
    presto_profile_result_t *r;
    int rc = presto_profile(p, &o, profile_progress, &v, &r);
    if (v.tty && !v.quiet)
        putchar('\n');
    if (rc < 0)
        die(presto_errmsg(p));
    if (!v.quiet)
        profile_report_table(stdout, r);
    if (!v.quiet && r->verify)
        profile_report_verify(stdout, r);
    if (csv)
        write_report(csv, profile_report_csv, r);
    if (json)
        write_report(json, profile_report_json, r);
    if (svg)
        write_report(svg, profile_report_svg, r);
    fflush(stdout);
    presto_profile_free(r);
    presto_close(p);
    return EXIT_SUCCESS;
}

/* ---- main ---- */

static const struct {
    const char *name;
    int (*run)(const char *sock, int argc, char *argv[]);
} commands[] = {
    {"stats", cmd_json},
    {"datasets", cmd_json},
    {"reload", cmd_json},
    {"drop-cache", cmd_json},
    {"epoch", cmd_epoch},
    {"warm", cmd_warm},
    {"profile", cmd_profile},
};

int main(int argc, char *argv[])
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {0},
    };
    const char *sock = NULL;
    int c;

    opterr = 0;
    /* '+': stop at the command; its own options follow it. */
    while ((c = getopt_long(argc, argv, "+:s:hV", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock = optarg; break;
        case 'h': help();
        case 'V':
            printf("prestoctl %s\n", presto_version());
            return EXIT_SUCCESS;
        default: die_bad_option(c, argv);
        }
    }
    if (optind >= argc)
        die_usage("no command given");
    const char *cmd = argv[optind];
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(cmd, commands[i].name) == 0) {
            argc -= optind;
            argv += optind;
            optind = 0; /* restart getopt on the command's own arguments */
            return commands[i].run(sock, argc, argv);
        }
    }
    die_usage("unknown command '%s'", cmd);
}

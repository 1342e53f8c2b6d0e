/*
 * A staged install: `make install DESTDIR=STAGE PREFIX=/usr` from
 * $PRESTO_SRC with BUILD=$PRESTO_BUILD (so nothing is rebuilt elsewhere),
 * then, from the staged tree only:
 *   - the files a Debian package would ship are there, with the right
 *     modes, library symlinks and SONAME, units pointing at /usr/sbin;
 *   - a small C client built with `pkg-config --cflags --libs presto`
 *     against the staged header and library (and once statically) pulls an
 *     epoch from the staged prestod, as does the staged prestoctl;
 *   - the staged Python package imports, loads the staged library and
 *     pulls an epoch;
 *   - the staged config example passes prestod --check-config;
 *   - the public header compiles as strict C11 and as C++ (when g++ is
 *     there), and the man pages render without warnings (when groff is).
 * Skipped (exit 77) without make, cc or pkg-config.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "harness.h"
#include "presto.h"

#define DATASET "inst"
#define NSAMPLES 10
#define PREFIX "/usr"
#define MAX_ARGS 64

static struct harness H;
static char data_root[HARNESS_PATH_MAX];
static char stage[HARNESS_PATH_MAX], usr[HARNESS_PATH_MAX + 8];

/* ---- helpers ---- */

/* prefix + rel into buf (asserts it fits). */
static void join(char *buf, size_t len, const char *prefix, const char *rel)
{
    int n = snprintf(buf, len, "%s/%s", prefix, rel);
    ck_assert_msg(n > 0 && (size_t)n < len, "path too long: %s/%s", prefix, rel);
}

/* Runs argv with its output to h->dir/name (read back into out when not
 * NULL); prints the output when the status is not 0. Returns the status. */
static int run(const char *const *argv, const char *name, char *out, size_t outlen)
{
    char path[HARNESS_PATH_MAX];
    ck_assert_int_eq(harness_path(&H, name, path, sizeof(path)), 0);
    int rc = harness_run(argv, path, 300);
    FILE *f = fopen(path, "r");
    if (out && outlen) {
        size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
        out[n] = '\0';
    }
    if (rc != 0 && f) {
        char line[1024];
        rewind(f);
        fprintf(stderr, "---- output of %s (status %d) ----\n", argv[0], rc);
        while (fgets(line, sizeof(line), f))
            fputs(line, stderr);
    }
    if (f)
        fclose(f);
    return rc;
}

/* Splits text at blanks into argv[*n...] (pointing into text). */
static void split_words(char *text, const char **argv, size_t *n)
{
    char *save = NULL;
    for (char *t = strtok_r(text, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
        ck_assert_uint_lt(*n, MAX_ARGS - 8);
        argv[(*n)++] = t;
    }
}

static void expect_file(const char *rel, mode_t mode)
{
    char path[PATH_MAX * 2];
    struct stat st;
    join(path, sizeof(path), stage, rel);
    ck_assert_msg(lstat(path, &st) == 0, "not installed: %s", rel);
    ck_assert_msg(S_ISREG(st.st_mode), "%s is not a regular file", rel);
    ck_assert_msg(st.st_size > 0, "%s is empty", rel);
    ck_assert_msg((st.st_mode & 07777) == mode, "%s has mode %04o, want %04o", rel,
                  (unsigned)(st.st_mode & 07777), (unsigned)mode);
}

static void expect_link(const char *rel, const char *target)
{
    char path[PATH_MAX * 2], buf[PATH_MAX];
    join(path, sizeof(path), stage, rel);
    ssize_t n = readlink(path, buf, sizeof(buf) - 1);
    ck_assert_msg(n > 0, "%s is not a symlink", rel);
    buf[n] = '\0';
    ck_assert_msg(strcmp(buf, target) == 0, "%s -> %s, want -> %s", rel, buf, target);
}

/* "address", "thread" or "undefined" when the staged library was built with
 * that sanitizer (a program linking it needs the same flag), else NULL. */
static const char *lib_sanitizer(char *runtime, size_t len)
{
    char lib[PATH_MAX * 2], out[4096];
    static const char *const names[][2] = {
        {"libasan", "address"}, {"libtsan", "thread"}, {"libubsan", "undefined"}};
    join(lib, sizeof(lib), usr, "lib/libprestoclient.so.0");
    const char *argv[] = {"ldd", lib, NULL};
    if (run(argv, "ldd-lib.out", out, sizeof(out)) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *p = strstr(out, names[i][0]);
        if (!p)
            continue;
        if (runtime) { /* "libasan.so.8 => /usr/lib/.../libasan.so.8 (0x...)" */
            const char *arrow = strstr(p, "=> ");
            snprintf(runtime, len, "%.*s", arrow ? (int)strcspn(arrow + 3, " ") : 0,
                     arrow ? arrow + 3 : "");
        }
        return names[i][1];
    }
    return NULL;
}

/* Starts the staged prestod (harness_start looks in $PRESTO_BUILD). */
static void start_staged_daemon(void)
{
    char sbin[PATH_MAX * 2], ds[HARNESS_PATH_MAX + 16];
    join(sbin, sizeof(sbin), usr, "sbin");
    setenv("PRESTO_BUILD", sbin, 1);
    snprintf(ds, sizeof(ds), "%s=%s", DATASET, data_root);
    const char *args[] = {"-d", ds, "-w", "2", NULL};
    ck_assert_msg(harness_start(&H, args) == 0, "the staged prestod did not start");
}

static void stop_staged_daemon(void)
{
    ck_assert_msg(harness_stop(&H) == 0, "the staged prestod did not exit 0 on SIGTERM");
}

/* ---- the client built against the staged tree ---- */

static const char client_c[] =
    "#include <stdio.h>\n"
    "#include <presto.h>\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    presto_t *p = NULL;\n"
    "    presto_stream_t *s;\n"
    "    presto_stream_opts_t o;\n"
    "    presto_batch_t b;\n"
    "    unsigned long long n = 0, batches = 0;\n"
    "    int rc;\n"
    "    if (argc != 3)\n"
    "        return 2;\n"
    "    if (presto_connect(argv[1], &p) < 0) {\n"
    "        fprintf(stderr, \"connect: %s\\n\", p ? presto_errmsg(p) : \"?\");\n"
    "        return 1;\n"
    "    }\n"
    "    presto_stream_opts_init(&o);\n"
    "    o.dataset = argv[2];\n"
    "    o.batch_size = 4;\n"
    "    if (presto_stream_open(p, &o, &s) < 0) {\n"
    "        fprintf(stderr, \"open: %s\\n\", presto_errmsg(p));\n"
    "        return 1;\n"
    "    }\n"
    "    while ((rc = presto_next(s, &b)) > 0) {\n"
    "        n += b.n;\n"
    "        batches++;\n"
    "        presto_release(s, &b);\n"
    "    }\n"
    "    if (rc < 0) {\n"
    "        fprintf(stderr, \"next: %s\\n\", presto_stream_errmsg(s));\n"
    "        return 1;\n"
    "    }\n"
    "    presto_stream_close(s);\n"
    "    presto_close(p);\n"
    "    printf(\"client %s: %llu samples in %llu batches\\n\", presto_version(), n, batches);\n"
    "    return 0;\n"
    "}\n";

/* Builds client.c against the staged tree: with pkg-config's flags and an
 * rpath (shared), or with the staged libprestoclient.a (static). */
static void build_client(const char *exe, int static_link)
{
    char src[HARNESS_PATH_MAX], flags[2048], rpath[PATH_MAX + 32], lib[PATH_MAX * 2];
    char san[64], pcdir[PATH_MAX * 2];
    const char *argv[MAX_ARGS];
    size_t n = 0;

    ck_assert_int_eq(harness_write_file(&H, "client.c", client_c, src, sizeof(src)), 0);
    /* Only the staged presto.pc, its paths prefixed with the stage. */
    join(pcdir, sizeof(pcdir), usr, "lib/pkgconfig");
    setenv("PKG_CONFIG_LIBDIR", pcdir, 1);
    setenv("PKG_CONFIG_SYSROOT_DIR", stage, 1);
    unsetenv("PKG_CONFIG_PATH");
    const char *pc[] = {"pkg-config", "--cflags", "--libs", "presto", NULL};
    ck_assert_msg(run(pc, "pkg-config.out", flags, sizeof(flags)) == 0,
                  "pkg-config --cflags --libs presto fails on the staged presto.pc");

    argv[n++] = harness_env("CC", "cc");
    argv[n++] = "-std=c11";
    argv[n++] = "-Wall";
    argv[n++] = "-Wextra";
    argv[n++] = "-Wpedantic";
    argv[n++] = "-Werror";
    const char *sanitizer = lib_sanitizer(NULL, 0);
    if (sanitizer) {
        snprintf(san, sizeof(san), "-fsanitize=%s", sanitizer);
        argv[n++] = san;
    }
    argv[n++] = "-o";
    argv[n++] = exe;
    argv[n++] = src;
    if (static_link) {
        /* pkg-config's words but its libraries (-L, -l): the archive instead.
         * By word: "-L" may well occur inside a path (/tmp/presto-test-Lx...). */
        size_t first = n;
        split_words(flags, argv, &n);
        size_t kept = first;
        for (size_t i = first; i < n; i++)
            if (strncmp(argv[i], "-L", 2) != 0 && strncmp(argv[i], "-l", 2) != 0)
                argv[kept++] = argv[i];
        n = kept;
        join(lib, sizeof(lib), usr, "lib/libprestoclient.a");
        argv[n++] = lib;
        argv[n++] = "-pthread";
        argv[n++] = "-lm";
    } else {
        split_words(flags, argv, &n);
        snprintf(rpath, sizeof(rpath), "-Wl,-rpath,%s/lib", usr);
        argv[n++] = rpath;
    }
    argv[n] = NULL;
    ck_assert_msg(run(argv, static_link ? "cc-static.out" : "cc.out", NULL, 0) == 0,
                  "a client does not build against the staged tree (%s)",
                  static_link ? "static" : "pkg-config");
}

static void run_client(const char *exe, const char *outname)
{
    char out[1024], want[128];
    const char *argv[] = {exe, H.sock, DATASET, NULL};
    ck_assert_msg(run(argv, outname, out, sizeof(out)) == 0, "the client failed: %s", out);
    snprintf(want, sizeof(want), ": %d samples in %d batches\n", NSAMPLES,
             (NSAMPLES + 3) / 4);
    ck_assert_msg(strstr(out, want) != NULL, "client printed '%s', want '...%s'", out, want);
}

START_TEST(test_files)
{
    char so[PATH_MAX], unit[PATH_MAX * 2], line[1024], rel[PATH_MAX + 16];
    expect_file(PREFIX "/sbin/prestod", 0755);
    expect_file(PREFIX "/bin/prestoctl", 0755);
    /* libprestoclient.so -> libprestoclient.so.0 -> libprestoclient.so.0.MINOR... */
    expect_link(PREFIX "/lib/libprestoclient.so", "libprestoclient.so.0");
    join(rel, sizeof(rel), usr, "lib/libprestoclient.so.0");
    ssize_t n = readlink(rel, so, sizeof(so) - 1);
    ck_assert_msg(n > 0, "libprestoclient.so.0 is not a symlink");
    so[n] = '\0';
    ck_assert_msg(strncmp(so, "libprestoclient.so.0.", 21) == 0 && !strchr(so, '/'),
                  "libprestoclient.so.0 -> %s, want libprestoclient.so.0.VERSION", so);
    snprintf(rel, sizeof(rel), PREFIX "/lib/%s", so);
    expect_file(rel, 0644);
    expect_file(PREFIX "/lib/libprestoclient.a", 0644);
    expect_file(PREFIX "/include/presto.h", 0644);
    expect_file(PREFIX "/lib/pkgconfig/presto.pc", 0644);
    expect_file(PREFIX "/lib/python3/dist-packages/presto/__init__.py", 0644);
    expect_file(PREFIX "/lib/systemd/system/prestod.service", 0644);
    expect_file(PREFIX "/lib/systemd/system/prestod.socket", 0644);
    expect_file(PREFIX "/lib/sysusers.d/presto.conf", 0644);
    expect_file(PREFIX "/share/man/man1/prestoctl.1", 0644);
    expect_file(PREFIX "/share/man/man5/presto.yaml.5", 0644);
    expect_file(PREFIX "/share/man/man8/prestod.8", 0644);
    expect_file("etc/presto/prestod.yaml", 0644);

    /* The library's SONAME is the name the -lprestoclient link records. */
    char lib[PATH_MAX * 2], out[8192];
    join(lib, sizeof(lib), stage, rel);
    const char *readelf[] = {"readelf", "-d", lib, NULL};
    ck_assert_int_eq(run(readelf, "readelf.out", out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "(SONAME)") && strstr(out, "[libprestoclient.so.0]"),
                  "%s has no SONAME libprestoclient.so.0:\n%s", so, out);

    /* The unit runs the installed binary. */
    join(unit, sizeof(unit), usr, "lib/systemd/system/prestod.service");
    FILE *f = fopen(unit, "r");
    ck_assert_ptr_nonnull(f);
    int exec = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "ExecStart=", 10) == 0)
            exec = strncmp(line + 10, PREFIX "/sbin/prestod ", sizeof(PREFIX "/sbin/prestod")) == 0;
    fclose(f);
    ck_assert_msg(exec, "the installed unit's ExecStart is not " PREFIX "/sbin/prestod");
}
END_TEST

START_TEST(test_pkgconfig)
{
    char out[256];
    char pcdir[PATH_MAX * 2];
    join(pcdir, sizeof(pcdir), usr, "lib/pkgconfig");
    setenv("PKG_CONFIG_LIBDIR", pcdir, 1);
    setenv("PKG_CONFIG_SYSROOT_DIR", stage, 1);
    const char *argv[] = {"pkg-config", "--modversion", "presto", NULL};
    ck_assert_int_eq(run(argv, "modversion.out", out, sizeof(out)), 0);
    out[strcspn(out, "\n")] = '\0';
    ck_assert_str_eq(out, PRESTO_VERSION);
}
END_TEST

START_TEST(test_client_against_staged_tree)
{
    char exe[HARNESS_PATH_MAX], exe_static[HARNESS_PATH_MAX], out[4096], want[PATH_MAX + 32];
    ck_assert_int_eq(harness_path(&H, "client", exe, sizeof(exe)), 0);
    ck_assert_int_eq(harness_path(&H, "client-static", exe_static, sizeof(exe_static)), 0);
    build_client(exe, 0);
    build_client(exe_static, 1);

    /* The client resolves libprestoclient to the staged copy. */
    unsetenv("LD_LIBRARY_PATH");
    const char *ldd[] = {"ldd", exe, NULL};
    ck_assert_int_eq(run(ldd, "ldd-client.out", out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "libprestoclient.so.0 => %s/lib/libprestoclient.so.0", usr);
    ck_assert_msg(strstr(out, want) != NULL, "the client does not load the staged library:\n%s",
                  out);

    start_staged_daemon();
    run_client(exe, "client.out");
    run_client(exe_static, "client-static.out");

    char prestoctl[PATH_MAX * 2];
    join(prestoctl, sizeof(prestoctl), usr, "bin/prestoctl");
    const char *ctl[] = {prestoctl, "-s", H.sock, "epoch", DATASET, "-b", "4", "--json", NULL};
    ck_assert_int_eq(run(ctl, "prestoctl.out", out, sizeof(out)), 0);
    double samples = -1;
    ck_assert_int_eq(harness_json_number(out, NULL, "samples", &samples), 0);
    ck_assert_msg(samples == NSAMPLES, "the staged prestoctl pulled %g samples: %s", samples, out);
    stop_staged_daemon();
}
END_TEST

START_TEST(test_python_package)
{
    char pydir[PATH_MAX * 2], lib[PATH_MAX * 2], runtime[PATH_MAX], out[4096];
    static const char script[] =
        "import sys\n"
        "import presto\n"
        "stage, sock, name, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
        "assert presto.__file__.startswith(stage), presto.__file__\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert stage + '/usr/lib/libprestoclient.so.0' in maps, 'staged library not loaded'\n"
        "n = 0\n"
        "with presto.Client(sock) as client:\n"
        "    with client.stream(name, batch_size=4) as stream:\n"
        "        for batch in stream:\n"
        "            n += len(batch.labels)\n"
        "assert n == want, (n, want)\n"
        "print('python ok', presto.version(), n)\n";
    char nstr[16];

    join(pydir, sizeof(pydir), usr, "lib/python3/dist-packages");
    join(lib, sizeof(lib), usr, "lib/libprestoclient.so.0");
    setenv("PYTHONPATH", pydir, 1);
    setenv("PRESTO_LIB", lib, 1);
    start_staged_daemon();
    const char *sanitizer = lib_sanitizer(runtime, sizeof(runtime));
    if (sanitizer && strcmp(sanitizer, "undefined") != 0 && runtime[0]) {
        /* As tests/python/run.sh: an ASan or TSan library needs its runtime
         * loaded first, and Python's own leaks are none of ours. */
        setenv("LD_PRELOAD", runtime, 1);
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    }
    snprintf(nstr, sizeof(nstr), "%d", NSAMPLES);
    const char *argv[] = {harness_env("PYTHON", "/usr/bin/python3"), "-c", script, stage,
                          H.sock, DATASET, nstr, NULL};
    int rc = run(argv, "python.out", out, sizeof(out));
    unsetenv("LD_PRELOAD");
    stop_staged_daemon();
    ck_assert_msg(rc == 0, "the staged Python package fails: %s", out);
    ck_assert_msg(strstr(out, "python ok") != NULL, "%s", out);
}
END_TEST

START_TEST(test_config_example_checks)
{
    char prestod[PATH_MAX * 2], cfg[PATH_MAX * 2], out[2048];
    join(prestod, sizeof(prestod), usr, "sbin/prestod");
    join(cfg, sizeof(cfg), stage, "etc/presto/prestod.yaml");
    const char *argv[] = {prestod, "--check-config", "-c", cfg, NULL};
    ck_assert_msg(run(argv, "check-config.out", out, sizeof(out)) == 0,
                  "the installed config example is refused: %s", out);
}
END_TEST

START_TEST(test_header_cxx)
{
    char src[HARNESS_PATH_MAX], inc[PATH_MAX + 16];
    ck_assert_int_eq(harness_write_file(&H, "header.cc",
                                        "#include <presto.h>\n"
                                        "int main() { return presto_version() ? 0 : 1; }\n",
                                        src, sizeof(src)), 0);
    snprintf(inc, sizeof(inc), "-I%s/include", usr);
    const char *argv[] = {"g++", "-std=c++11", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                          "-fsyntax-only", inc, src, NULL};
    ck_assert_msg(run(argv, "cxx.out", NULL, 0) == 0, "presto.h does not compile as C++");
}
END_TEST

START_TEST(test_man_pages_render)
{
    static const char *const pages[] = {"man1/prestoctl.1", "man5/presto.yaml.5",
                                        "man8/prestod.8"};
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        char rel[64], path[PATH_MAX * 2], out[4096];
        snprintf(rel, sizeof(rel), "share/man/%s", pages[i]);
        join(path, sizeof(path), usr, rel);
        const char *argv[] = {"groff", "-man", "-Tutf8", "-ww", "-z", path, NULL};
        int rc = run(argv, "groff.out", out, sizeof(out));
        ck_assert_msg(rc == 0 && out[0] == '\0', "%s: groff warns: %s", pages[i], out);
    }
}
END_TEST

/* ---- the install itself ---- */

static int have(const char *prog)
{
    const char *argv[] = {"sh", "-c", "command -v \"$0\" >/dev/null", prog, NULL};
    return harness_run(argv, NULL, 30) == 0;
}

static int staged_install(void)
{
    char build[PATH_MAX], src[PATH_MAX], destdir[PATH_MAX + 16], buildarg[PATH_MAX + 16];
    char log[HARNESS_PATH_MAX];
    if (!realpath(harness_env("PRESTO_BUILD", "build"), build) ||
        !realpath(harness_env("PRESTO_SRC", "."), src)) {
        fprintf(stderr, "PRESTO_BUILD or PRESTO_SRC: %s\n", strerror(errno));
        return -1;
    }
    /* "-L" in the name, as in a temporary directory's random suffix: the
     * flags are parsed by word, never cut at the first "-L" (build_client). */
    if (harness_path(&H, "stage-Lx", stage, sizeof(stage)) < 0 ||
        harness_path(&H, "install.log", log, sizeof(log)) < 0)
        return -1;
    snprintf(usr, sizeof(usr), "%s%s", stage, PREFIX);
    snprintf(destdir, sizeof(destdir), "DESTDIR=%s", stage);
    snprintf(buildarg, sizeof(buildarg), "BUILD=%s", build);
    /* A make of its own, not a sub-make of `make check`. */
    unsetenv("MAKEFLAGS");
    unsetenv("MAKELEVEL");
    unsetenv("MFLAGS");
    const char *argv[] = {"make", "--no-print-directory", "-C", src, "install", destdir,
                          "PREFIX=" PREFIX, buildarg, NULL};
    int rc = harness_run(argv, log, 600);
    if (rc != 0) {
        fprintf(stderr, "make install failed (status %d)\n", rc);
        char line[1024];
        FILE *f = fopen(log, "r");
        while (f && fgets(line, sizeof(line), f))
            fputs(line, stderr);
        if (f)
            fclose(f);
        return -1;
    }
    return 0;
}

static Suite *install_suite(void)
{
    Suite *s = suite_create("install");
    TCase *tc = tcase_create("staged");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_pkgconfig);
    tcase_add_test(tc, test_client_against_staged_tree);
    tcase_add_test(tc, test_python_package);
    tcase_add_test(tc, test_config_example_checks);
    if (have("g++"))
        tcase_add_test(tc, test_header_cxx);
    else
        printf("note: no g++: presto.h not compiled as C++\n");
    if (have("groff"))
        tcase_add_test(tc, test_man_pages_render);
    else
        printf("note: no groff: man pages not rendered\n");
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    static const char *const tools[] = {"make", "cc", "pkg-config", "readelf", "ldd"};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
        if (!have(tools[i])) {
            harness_cleanup(&H);
            printf("skip: no %s\n", tools[i]);
            return HARNESS_SKIP;
        }
    }
    if (staged_install() < 0 ||
        harness_make_dataset(&H, DATASET, NSAMPLES, 2, 11, 64, 200, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    int failed = harness_run_suite(install_suite());
    harness_cleanup(&H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

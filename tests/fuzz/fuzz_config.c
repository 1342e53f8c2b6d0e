/*
 * libFuzzer target: the config parser (daemon/config.c, libyaml underneath,
 * step_init for the pipelines) on arbitrary bytes, as config_load hands a
 * file's contents to config_load_string.
 *
 * Besides "no crash, no leak, no sanitizer report", it checks the parser's
 * contract: a config it accepts is one the daemon can run (every value in
 * its key's range, every dataset named, rooted, with a pipeline that starts
 * with decode and passes step_chain_init again unchanged, a split that
 * passes step_split_check and leaves no random step offline, names unique,
 * every step describable, with a known output dtype);
 * a config it refuses comes with -EINVAL (or -ENOMEM) and a one-line
 * message that starts with "FILE:LINE: " (prestod prints it as one line
 * of its log).
 */
#include <errno.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"
#include "log.h"
#include "proto.h"
#include "step.h"

#define FUZZ_NAME "fuzz.yaml"

static void check_dataset(const struct config *c, const struct config_dataset *d)
{
    char buf[256], err[256];
    uint32_t h = 0, w = 0, ch = 0, dtype = 1, layout = 0, bad = 0;
    struct step again[CONFIG_MAX_STEPS];

    FUZZ_CHECK(d->name[0] != '\0' && memchr(d->name, '\0', sizeof(d->name)));
    FUZZ_CHECK(config_find_dataset(c, d->name) == d);
    FUZZ_CHECK(d->root != NULL && d->root[0] != '\0');
    FUZZ_CHECK(d->nsteps >= 1 && d->nsteps <= CONFIG_MAX_STEPS);
    FUZZ_CHECK(d->steps[0].kind == STEP_DECODE);
    FUZZ_CHECK(d->split <= d->nsteps);
    FUZZ_CHECK(d->zstd_level >= 0 && d->zstd_level <= 19);
    FUZZ_CHECK(d->on_error == CONFIG_ON_ERROR_SKIP || d->on_error == CONFIG_ON_ERROR_FAIL);
    /* The pipeline checks the parser ran pass again on what it kept. */
    memcpy(again, d->steps, d->nsteps * sizeof(again[0]));
    FUZZ_CHECK(step_chain_init(again, d->nsteps, &bad, err, sizeof(err)) == 0);
    FUZZ_CHECK(memcmp(again, d->steps, d->nsteps * sizeof(again[0])) == 0);
    FUZZ_CHECK(step_split_check(d->steps, d->nsteps, d->split, err, sizeof(err)) == 0);
    for (uint32_t i = 0; i < d->nsteps; i++) {
        const struct step *s = &d->steps[i];
        FUZZ_CHECK(s->kind < STEP_KIND_MAX);
        FUZZ_CHECK(i >= d->split || !step_is_random(s));
        /* What the daemon does with a step at start-up and in its JSON. */
        step_describe(s, buf, sizeof(buf));
        FUZZ_CHECK(memchr(buf, '\0', sizeof(buf)) != NULL);
        step_fingerprint(s, 0);
        step_out_shape(s, h, w, ch, &h, &w, &ch);
        dtype = step_out_dtype(s, dtype);
        layout = step_out_layout(s, layout);
        FUZZ_CHECK(proto_dtype_size(dtype) != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config c;
    char err[1024];

    log_set_level(LOG_LEVEL_ERROR); /* quiet: errors only */
    memset(err, 0, sizeof(err));
    int rc = config_load_string(&c, (const char *)data, size, FUZZ_NAME, err, sizeof(err));
    if (rc == 0) {
        FUZZ_CHECK(c.socket_path != NULL && c.cache_dir != NULL);
        FUZZ_CHECK(c.socket_mode <= 07777);
        FUZZ_CHECK(c.workers <= 1024);
        FUZZ_CHECK(c.prefetch >= 1 && c.prefetch <= 256);
        FUZZ_CHECK(c.io_depth >= 1 && c.io_depth <= 4096);
        FUZZ_CHECK(c.io_backend == CONFIG_IO_AUTO || c.io_backend == CONFIG_IO_PREAD);
        FUZZ_CHECK(c.max_connections >= 1 && c.max_streams_per_conn >= 1);
        FUZZ_CHECK(c.max_batch_size >= 1 && c.max_file_size >= 1 && c.max_pixels >= 1);
        FUZZ_CHECK(c.segment_size >= (64u << 10));
        FUZZ_CHECK(c.ndatasets == 0 || c.datasets != NULL);
        for (uint32_t i = 0; i < c.ndatasets; i++)
            check_dataset(&c, &c.datasets[i]);
    } else {
        FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM);
        if (rc == -EINVAL) {
            FUZZ_CHECK(strncmp(err, FUZZ_NAME ":", sizeof(FUZZ_NAME)) == 0);
#ifndef FUZZ_TOLERATE_MULTILINE_ERRORS /* to fuzz past that known finding */
            FUZZ_CHECK(strchr(err, '\n') == NULL);
#endif
        }
    }
    config_free(&c);

    /* The size syntax on its own ("64KiB", "2GiB", "25%"), from the first line. */
    char line[64];
    size_t n = 0;
    while (n < size && n < sizeof(line) - 1 && data[n] != '\n')
        n++;
    memcpy(line, data, n);
    line[n] = '\0';
    uint64_t v;
    config_parse_size(line, &v);
    return 0;
}

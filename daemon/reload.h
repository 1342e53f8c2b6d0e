/*
 * The configuration in force and its reload (SIGHUP, or an admin's RELOAD
 * request): the config and the table of datasets served.
 *
 * A reload re-reads the file (and applies the command line on top, as at
 * start-up) and indexes the datasets that are new or whose declaration
 * changed, all on the worker pool, so the event loop keeps serving
 * meanwhile. If anything fails (a YAML or key error, which names
 * FILE:LINE and the key, a dataset root that cannot be indexed, no
 * memory), the running configuration stays as it was and the error is
 * logged and returned to whoever asked. Otherwise, back on the event loop
 * thread, with the workers paused (workers_pause: no job runs while the
 * cache's tables and the datasets served change), the new configuration
 * takes over:
 *
 *   - applied: log_level, prefetch, admin_group, limits.* but pixels,
 *     cache.memory (the memory tier's budget: what is admitted from now
 *     on; lowering it frees nothing until drop-cache), and the datasets:
 *     new ones are served at once; one removed or redeclared (other root,
 *     steps, split, on_error, encoding, follow_symlinks) is taken out of
 *     service for new streams, while the streams and the warm already
 *     using it keep it until they end (a reference count per dataset);
 *     then it is freed. Its memory-tier entries stay allocated until
 *     drop-cache or a restart (entries are never freed one by one). A
 *     dataset declared as before is kept as it is (not re-indexed).
 *   - logged as needing a restart: socket, socket_mode, socket_group,
 *     workers, cache.dir, cache.disk, cache.segment_size, io.depth,
 *     io.backend, limits.pixels (the running values stay).
 *
 * One reload runs at a time; requests that come meanwhile are served by
 * one more run after it (the file may have changed again). Everything
 * here but the job's run() is on the event loop thread.
 */
#ifndef PRESTO_RELOAD_H
#define PRESTO_RELOAD_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dataset.h"
#include "tiers.h"
#include "workers.h"

struct event_base;
struct reload;

/* Loads the configuration as at start-up (the file, then the command
 * line): 0, or a negative errno with a message in err. */
typedef int (*reload_load_fn)(struct config *c, void *arg, char *err, size_t errlen);
/* The new configuration takes over (called with the workers paused). */
typedef void (*reload_apply_fn)(void *arg, const struct config *cfg,
                                struct dataset **datasets, uint32_t n);
/* A reload asked for by reload_request ended: rc 0 with a JSON report of
 * what changed, or -errno with the reason: -EINVAL (the file does not load,
 * a dataset cannot be indexed), -ENOMEM, -ECANCELED (the daemon stops). */
typedef void (*reload_done_fn)(void *arg, int rc, const char *text);

struct reload_env {
    struct workers *workers;
    struct tiers *tiers; /* new datasets join them, removed ones leave */
    reload_load_fn load;
    void *load_arg;
    reload_apply_fn apply;
    void *apply_arg;
};

/* Takes *cfg (moved: the caller's struct is zeroed) and indexes its
 * datasets. Returns 0, or a negative errno with a message in err. */
int reload_create(struct reload **out, struct config *cfg, char *err, size_t errlen);
/* Once the cache tiers, workers and server exist. */
void reload_attach(struct reload *r, const struct reload_env *env);
/* Before the workers are destroyed: a reload in flight is dropped when its
 * job comes back, and none starts any more. NULL is fine. */
void reload_stop(struct reload *r);
/* After the workers and the server: frees the datasets and the config. */
void reload_destroy(struct reload *r);

const struct config *reload_config(const struct reload *r);
/* The datasets served now. */
struct dataset **reload_datasets(const struct reload *r, uint32_t *n);

/* Starts a reload (or joins the next one when one runs); done (may be
 * NULL: SIGHUP) is called with arg once it ended. Returns 0 or -ENOMEM. */
int reload_request(struct reload *r, reload_done_fn done, void *arg);
/* Forgets the requests made with arg (its connection went away). */
void reload_cancel(struct reload *r, void *arg);
/* Reloads applied and refused so far (in the stats' "access" section). */
#define RELOAD_STATS(X)                                                        \
    X(reloads, COUNTER, "reloads", "configuration reloads applied")            \
    X(reload_failures, COUNTER, "reloads", "reloads refused: the running configuration stayed")
struct stats_out;
void reload_stats(const struct reload *r, struct stats_out *o);

#endif

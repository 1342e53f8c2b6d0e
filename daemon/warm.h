/*
 * Warming a dataset (a WARM request): every sample through the offline
 * steps into the cache tiers (disk, and memory as its policy admits) on
 * the worker pool, ahead of training. Samples go out in jobs of
 * WARM_JOB_SAMPLES, at most two per worker queued at once, so streams keep
 * their share of the workers; PROGRESS frames report on the way (the first
 * at once, then at most one per WARM_PROGRESS_MS) and DONE at the end.
 *
 * A warm lives on the event loop thread, like a stream: its owner (a
 * connection) calls warm_close() once it finished or the client went away,
 * and the warm frees itself once no worker refers to it.
 */
#ifndef PRESTO_WARM_H
#define PRESTO_WARM_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "pipeline.h"
#include "workers.h"

#define WARM_JOB_SAMPLES 64u
#define WARM_PROGRESS_MS 100u

struct bufferevent;
struct event_base;
struct warm;

struct warm_env {
    struct event_base *base;
    struct workers *workers;
    const struct pipeline_env *pipe;
};

/* Called (once, from the event loop) when DONE or an ERROR was sent. */
typedef void (*warm_finished_fn)(struct warm *w, void *owner);

/* Starts warming ds and sends the first PROGRESS. Returns 0, or a negative
 * PROTO_E_* code with a message in err (nothing sent): -PROTO_E_LIMIT when
 * ds is being warmed already, -PROTO_E_INVAL when it has no offline steps. */
int warm_start(struct warm **out, const struct warm_env *env, struct dataset *ds,
               uint32_t req_id, struct bufferevent *bev, warm_finished_fn finished,
               void *owner, char *err, size_t errlen);
/* Stops handing out work and detaches from the connection; frees when idle. */
void warm_close(struct warm *w);

#endif

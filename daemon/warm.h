/*
 * Warming a dataset (a WARM request): every sample through the offline
 * steps into the cache tiers (disk, and memory as its policy admits) on
 * the worker pool, ahead of training. Samples go out in jobs of
 * WARM_JOB_SAMPLES, at most two per worker queued at once, so streams keep
 * their share of the workers; its reply (reply.h) hears its progress on the
 * way (the first at once, then at most one per WARM_PROGRESS_MS) and done
 * with the same counts at the end.
 *
 * A warm lives on the event loop thread, like a stream: its owner calls
 * warm_close() once its reply said done or the client went away, and the
 * warm frees itself once no worker refers to it.
 */
#ifndef PRESTO_WARM_H
#define PRESTO_WARM_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "pipeline.h"
#include "reply.h"
#include "workers.h"

#define WARM_JOB_SAMPLES 64u
#define WARM_PROGRESS_MS 100u

struct event_base;
struct warm;

/* Starts warming ds and says its first progress. Returns 0, or -errno
 * with a message in err (nothing said): -EBUSY when ds is being warmed
 * already, -EINVAL when it has no offline steps, -ENOMEM. */
int warm_start(struct warm **out, struct event_base *base, struct workers *workers,
               struct pipeline *pipe, struct dataset *ds, const struct reply *reply,
               char *err, size_t errlen);
/* Stops handing out work and says nothing more; frees when idle. */
void warm_close(struct warm *w);

#endif

/*
 * The server: the listening Unix socket, client connections, frame
 * dispatch, and the stats and datasets documents. Everything here runs on
 * the event loop thread.
 */
#ifndef PRESTO_SERVER_H
#define PRESTO_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "config.h"
#include "dataset.h"
#include "pipeline.h"
#include "readahead.h"
#include "reload.h"
#include "stats.h"
#include "store.h"
#include "workers.h"

struct event_base;
struct server;

struct server_deps {
    struct event_base *base;
    const struct config *cfg;   /* replaced by server_update on a reload */
    struct dataset **datasets;  /* the datasets served (likewise) */
    uint32_t ndatasets;
    struct cache *cache;
    struct store *store;        /* NULL: no disk tier */
    const char *store_off;      /* why there is no disk tier (store NULL) */
    struct pipeline_compactor *compactor; /* NULL without a disk tier */
    struct workers *workers;
    struct stats_thread *stats; /* nstats blocks; the last is the event loop's */
    unsigned nstats;
    struct reload *reload;      /* RELOAD requests go there (NULL: none) */
    struct readahead *readahead; /* batches read ahead (NULL: none) */
};

/* Binds and listens on cfg->socket_path (or adopts listen_fd >= 0, e.g.
 * from socket activation). Returns 0 or a negative errno with a message. */
int server_create(struct server **out, const struct server_deps *deps, int listen_fd,
                  char *err, size_t errlen);
/* The checks server_create makes of cfg->socket_path before it binds
 * (start-up and --check-config run them first): its length, and its
 * directory, which must be the daemon's user's alone (missing: made at
 * start-up). 0, or a negative errno with the reason in err. */
int server_check_socket(const char *path, char *err, size_t errlen);
/* Stops accepting and closes every connection (their streams stop). */
void server_stop(struct server *s);
void server_destroy(struct server *s);
/* A reload's configuration takes over (reload_apply_fn; the workers are
 * paused): limits, the admin group and the datasets new requests find. */
void server_update(struct server *s, const struct config *cfg, struct dataset **datasets,
                   uint32_t n);
/* The stats document (JSON); the caller frees it. */
char *server_stats_json(struct server *s);

#endif

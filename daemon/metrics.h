/*
 * The /metrics endpoint: the stats document in Prometheus's text
 * exposition format over HTTP, for a Prometheus server to scrape, with
 * libevent's own evhttp on the event loop.
 *
 * Off unless metrics.listen is set: PORT (served on 127.0.0.1), HOST:PORT
 * or [IPV6]:PORT. Loopback by default; any other address is logged as a
 * warning (whoever reaches it sees the stats: no credentials are asked).
 * GET and HEAD of /metrics only (404 elsewhere); requests are bounded
 * (headers 8 KiB, no body, 10 s timeout). Port 0 takes a free port, which
 * the log and the stats (metrics.listen) name.
 *
 * Event loop thread only.
 */
#ifndef PRESTO_METRICS_H
#define PRESTO_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct metrics;
struct stats_out;

/* The document served: Prometheus text, malloc'ed (NULL: no memory). */
typedef char *(*metrics_doc_fn)(void *arg);

/* Listens on listen (config_parse_listen's syntax). Returns 0, or -errno
 * with a message in err. */
int metrics_create(struct metrics **out, struct event_base *base, const char *listen,
                   metrics_doc_fn doc, void *arg, char *err, size_t errlen);
/* NULL is fine. */
void metrics_destroy(struct metrics *m);

#define METRICS_STATS(X)                                                        \
    X(listen, INFO, "", "the address /metrics is served on (metrics.listen)")    \
    X(requests, COUNTER, "requests", "HTTP requests of /metrics answered")
/* The "metrics" section (m NULL: off). */
void metrics_stats(const struct metrics *m, struct stats_out *o);

#endif

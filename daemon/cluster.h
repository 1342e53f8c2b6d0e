/*
 * The cluster tier: materialized samples shared by the nodes of a cluster
 * through memcached servers (cluster.memcached), so that N nodes decode
 * each sample once between them instead of once each.
 *
 * Items. An item is a disk-tier record (store.h: header with the key and
 * both checksums, payload raw or zstd), built with store_encode. A node
 * trusts nothing it reads from a server: a record whose flags, header,
 * checksums or key do not match is a miss, counted as `corrupt`.
 *
 * Keys. The memcached key is "presto:1:" and the record key's five
 * fields in hex (dataset, fingerprint, path, source size, source mtime):
 * 89 bytes, well under memcached's 250. The fields are themselves fixed
 * hashes (XXH64 of the dataset name and of the sample's path, the offline
 * steps' fingerprint), so the key has a fixed length whatever the names;
 * "1" versions the scheme and the record format together (a change of
 * either takes a new number, and old items are simply never looked up).
 *
 * Placement. libmemcached's ketama (MD5, consistent hashing over the
 * servers in the order configured): every node with the same server list
 * puts a key on the same server, and a server added or removed moves only
 * its share of the keys. A server that fails is not ejected from the ring:
 * nodes would eject it at different moments and disagree on placement; its
 * share is a miss (and not put) until it answers again.
 *
 * Batches. cluster_get looks up a chunk's samples in one go: the keys are
 * grouped by server and one multi-get (binary protocol GETKQ ... NOOP) is
 * sent to every server concerned before any answer is read, so the
 * servers work in parallel and the caller waits about one round trip and
 * the transfer per chunk, not per sample. Each server has a libmemcached
 * handle of its own (the ring above only places keys), so a failure is
 * one server's, counted against it, and its connection is reset alone. It runs on a worker thread,
 * which blocks meanwhile: libmemcached's I/O is blocking (it polls inside
 * its calls) and offers no event-loop integration, so the alternative,
 * non-blocking I/O on the event loop, would mean a memcached client of our
 * own; the workers instead have a chunk's worth of lookups in flight each.
 *
 * Puts. cluster_put stores a record with memcached ADD: a sample already
 * present is not rewritten (put-once; the refusal is counted as
 * `put_exists`). A record larger than cluster.item_max (the servers' -I,
 * less memcached's item header and our key) is not clustered at all
 * (`put_too_large`). A server out of memory (memcached -M) refuses puts
 * (`put_full`): it then keeps the subset it holds, as the memory tier does.
 *
 * Failures are misses, never errors. A server that refuses the
 * connection, breaks it, answers garbage or does not answer within
 * cluster.timeout_ms (each connect and each wait for data) fails the
 * request: its lookups are misses (`lost`), the failure is counted
 * (`errors` or `timeouts`) and the server is marked down (`downs`). While
 * down, its lookups and puts are not sent (`skipped`, `put_skipped`);
 * after a backoff (100 ms, doubling per failed retry up to 5 s) one
 * request retries it (`retries`), and its success marks the server up
 * again. A connection found broken when it is next used (the server
 * restarted meanwhile) is reopened and the request sent once more before
 * anything counts as failed. A server restarted empty simply misses until
 * the nodes have put its share again.
 *
 * Threads. struct cluster is shared: the configuration, the ketama ring
 * (read only after cluster_create), and per server its state and counters
 * (atomics; the state's transitions under the server's lock, a leaf).
 * struct cluster_conn is one thread's: a memcached_st per server
 * (libmemcached handles are not thread-safe), opened on first use and
 * reopened after every failure of that server, and the buffer that holds
 * the records of its last cluster_get.
 */
#ifndef PRESTO_CLUSTER_H
#define PRESTO_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define CLUSTER_MAX_SERVERS 64u
#define CLUSTER_KEY_PREFIX "presto:1:"
#define CLUSTER_KEY_LEN (sizeof(CLUSTER_KEY_PREFIX) - 1 + 80)
/* The memcached flags of every item: "PR" and the record version. */
#define CLUSTER_ITEM_FLAGS 0x50520001u
/* What memcached adds to a value in an item (its header, CAS, the key and
 * suffix), kept below cluster.item_max with the value. */
#define CLUSTER_ITEM_OVERHEAD (64u + CLUSTER_KEY_LEN)
#define CLUSTER_BACKOFF_MIN_MS 100u
#define CLUSTER_BACKOFF_MAX_MS 5000u
#define CLUSTER_HOST_MAX 256u

/* The cluster.* keys. */
struct cluster_config {
    char **servers;      /* "HOST:PORT" each, in the configured order */
    uint32_t nservers;   /* 0: no cluster tier */
    uint32_t timeout_ms; /* connect and each wait for an answer */
    uint64_t item_max;   /* the servers' item size limit (their -I) */
    /* The backoff of a down server: not keys of the file (the defaults,
     * CLUSTER_BACKOFF_*, suit), set by the tests. */
    uint32_t backoff_min_ms, backoff_max_ms;
};

#define CLUSTER_TIMEOUT_MS_DEFAULT 200u
#define CLUSTER_TIMEOUT_MS_MIN 1u
#define CLUSTER_TIMEOUT_MS_MAX 60000u
#define CLUSTER_ITEM_MAX_DEFAULT (1ull << 20) /* memcached's default -I */
#define CLUSTER_ITEM_MAX_MIN (1ull << 10)
#define CLUSTER_ITEM_MAX_MAX (1ull << 30)

/* Defaults for every key, no servers. */
void cluster_config_init(struct cluster_config *cfg);
void cluster_config_free(struct cluster_config *cfg);
/* Sets one key from its text: "memcached" appends a server ("HOST:PORT",
 * HOST a name, an IPv4 address or a bracketed IPv6 one), "timeout_ms" and
 * "item_max" take a decimal number within their bounds. Returns 0, or
 * -EINVAL with why in err (the caller adds where), -ENOMEM. */
int cluster_config_set(struct cluster_config *cfg, const char *key, const char *value,
                       char *err, size_t errlen);
/* Splits "HOST:PORT" (0 or -EINVAL with why in err). host gets at most
 * CLUSTER_HOST_MAX bytes with its NUL, without IPv6 brackets. */
int cluster_parse_server(const char *spec, char host[CLUSTER_HOST_MAX], uint16_t *port,
                         char *err, size_t errlen);

/* Per-server statistics: name, kind, help. Every lookup meant for a
 * server ends as exactly one of hits, misses, corrupt, lost and skipped
 * (they sum to lookups), every put as one of puts, put_exists,
 * put_too_large, put_full, put_skipped and put_failed; errors and
 * timeouts count failed requests (a multi-get is one request, however
 * many keys it asks). */
#define CLUSTER_SERVER_STATS(X)                                                       \
    X(server, LABEL, "", "the server, HOST:PORT as configured")                       \
    X(lookups, COUNTER, "keys", "keys meant for the server (sent or skipped)")        \
    X(hits, COUNTER, "records", "records the server returned that passed every check") \
    X(misses, COUNTER, "keys", "keys the server did not have")                        \
    X(corrupt, COUNTER, "records", "records returned with bad flags, header, checksum or key") \
    X(removed, COUNTER, "records", "corrupt records deleted, so that a good one can be put") \
    X(lost, COUNTER, "keys", "keys asked in a request that failed or timed out")      \
    X(skipped, COUNTER, "keys", "lookups not sent: the server was down")              \
    X(errors, COUNTER, "requests", "requests failed: connection refused or broken, bad answer") \
    X(timeouts, COUNTER, "requests", "requests that got no answer within cluster.timeout_ms") \
    X(bytes_read, COUNTER, "bytes", "value bytes received (hits and corrupt records)") \
    X(puts, COUNTER, "records", "records stored (memcached ADD)")                     \
    X(put_exists, COUNTER, "records", "puts refused: the server had the key (put-once)") \
    X(put_too_large, COUNTER, "records", "puts not done: over cluster.item_max or the server's -I") \
    X(put_full, COUNTER, "records", "puts refused: the server is out of memory (-M)") \
    X(put_skipped, COUNTER, "records", "puts not sent: the server was down")          \
    X(put_failed, COUNTER, "records", "puts lost to a request that failed or timed out") \
    X(bytes_written, COUNTER, "bytes", "value bytes of the records stored")           \
    X(downs, COUNTER, "times", "times the server was marked down")                    \
    X(retries, COUNTER, "requests", "requests sent to retry a server that was down")  \
    X(up, GAUGE, "", "1 while the server is in use, 0 while it is down")              \
    X(backoff_ms, GAUGE, "ms", "the wait before the next retry while down")

/* The sums over the servers, in the "cluster" section before them. */
#define CLUSTER_TOTAL_STATS(X)                                                        \
    X(enabled, GAUGE, "", "1 when cluster.memcached names servers")                   \
    X(server_count, GAUGE, "servers", "the servers of cluster.memcached")             \
    X(servers_up, GAUGE, "servers", "the servers in use (not backing off)")           \
    X(timeout_ms, GAUGE, "ms", "cluster.timeout_ms")                                  \
    X(item_max, GAUGE, "bytes", "cluster.item_max, the largest record clustered")     \
    X(lookups, COUNTER, "keys", "keys looked up in the cluster tier")                 \
    X(hits, COUNTER, "records", "records found that passed every check")              \
    X(misses, COUNTER, "keys", "keys no server had")                                  \
    X(corrupt, COUNTER, "records", "records with bad flags, header, checksum or key: misses") \
    X(removed, COUNTER, "records", "corrupt records deleted from their server") \
    X(lost, COUNTER, "keys", "keys asked in requests that failed or timed out: misses") \
    X(skipped, COUNTER, "keys", "lookups not sent, their server down: misses")        \
    X(errors, COUNTER, "requests", "requests failed: refused or broken, bad answer")  \
    X(timeouts, COUNTER, "requests", "requests with no answer within cluster.timeout_ms") \
    X(bytes_read, COUNTER, "bytes", "record bytes received")                          \
    X(puts, COUNTER, "records", "records stored")                                     \
    X(put_exists, COUNTER, "records", "puts refused: a node put the record first")    \
    X(put_too_large, COUNTER, "records", "records over cluster.item_max: not clustered") \
    X(bytes_written, COUNTER, "bytes", "record bytes stored")                         \
    X(hit_rate, GAUGE, "", "hits over lookups")

/* Stat indexes (CLUSTER_STAT_server, the label, has no value). */
enum cluster_stat {
#define CLUSTER_STAT_ENUM(name, kind, unit, help) CLUSTER_STAT_##name,
    CLUSTER_SERVER_STATS(CLUSTER_STAT_ENUM)
#undef CLUSTER_STAT_ENUM
    CLUSTER_STAT_MAX
};

struct cluster_server_stats {
    const char *name; /* "HOST:PORT" as configured; valid while the cluster is */
    uint64_t v[CLUSTER_STAT_MAX];
};

struct cluster;
struct cluster_conn;

/* Checks the configuration (servers parse, none twice, at most
 * CLUSTER_MAX_SERVERS) and builds the ring; connects to nothing yet.
 * Returns 0, or -EINVAL (why in err), -ENOMEM. */
int cluster_create(struct cluster **out, const struct cluster_config *cfg, char *err,
                   size_t errlen);
/* No conn may be open. NULL is fine. */
void cluster_destroy(struct cluster *cl);
uint32_t cluster_nservers(const struct cluster *cl);
uint64_t cluster_item_max(const struct cluster *cl);
/* Fills st for server i (0 <= i < cluster_nservers). */
void cluster_get_server_stats(struct cluster *cl, uint32_t i, struct cluster_server_stats *st);
struct stats_out;
/* The servers' sections, a list under "servers" (metrics
 * presto_cluster_server_*{server="HOST:PORT"}), and their sums
 * (presto_cluster_*) before it. */
void cluster_stats(struct cluster *cl, struct stats_out *o);

/* The memcached key of a record key, NUL-terminated. */
void cluster_key(const struct store_key *key, char out[CLUSTER_KEY_LEN + 1]);
/* The server (its position in the configuration) that holds key. */
uint32_t cluster_server_of(const struct cluster *cl, const struct store_key *key);

/* A thread's connections. Returns 0 or -ENOMEM. */
int cluster_conn_open(struct cluster *cl, struct cluster_conn **out);
void cluster_conn_close(struct cluster_conn *c);
/* Bytes the conn holds (its buffers), for the memory stats. */
size_t cluster_conn_bytes(const struct cluster_conn *c);

/* One lookup of cluster_get: key in; rec and len out, the verified record
 * (in c's buffer, valid until the next cluster_get on c), or rec NULL. */
struct cluster_lookup {
    const struct store_key *key;
    const uint8_t *rec;
    size_t len;
};

/* Looks n keys up in one batch (see "Batches"). Returns the number of
 * hits; a failure of any kind is a miss. -ENOMEM when the conn's buffers
 * cannot grow (every lookup is then a miss). */
int cluster_get(struct cluster_conn *c, struct cluster_lookup *l, unsigned n);
/* Puts the record rec of len bytes (store_encode) under key, unless the
 * server has the key already. Returns 0 (stored), -EEXIST (present),
 * -EFBIG (too large: not clustered), -ENOSPC (the server is full),
 * -EAGAIN (the server is down: not sent), -ETIMEDOUT, -EIO (the request
 * failed), -ENOMEM. Callers need not look: every outcome is counted. */
int cluster_put(struct cluster_conn *c, const struct store_key *key, const void *rec,
                size_t len);

#endif

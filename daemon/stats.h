/*
 * Stats: how every module declares, keeps and reports its own counters and
 * gauges, as memcached does it.
 *
 * Declared once, in the module that owns them: an X-macro of
 * X(name, KIND, "unit", "help") expanded with STATS_DECL into a table of
 * struct stats_decl (and by the module into an enum of indexes). KIND is
 * COUNTER (only grows), GAUGE (a level, read from its owner when the
 * document is built), INFO (a text: a version, a directory, a backend) or
 * LABEL (a text that names its section, the label of its metrics).
 *
 * Reported by the owner into a struct stats_out: stats_begin/stats_end a
 * section (a JSON object, the prefix and labels of metric names),
 * stats_emit its fields (one value per declaration, in order). The same
 * calls make both documents:
 *
 *   JSON        {"key": value, "section": {...}, "list": [{...}]}, doubles
 *               with 6 significant digits (the stats document of STATS);
 *   Prometheus  the text exposition format 0.0.4: a field `name` of
 *               section path a.b is the metric presto_a_b_name (a section
 *               or a field may be named otherwise there: the memory tier's
 *               are presto_tier_* with tier="memory", uptime_s is
 *               presto_uptime_seconds), counters end in _total, values in
 *               microseconds go out in seconds (the base unit),
 *               INFO fields are presto_..._NAME_info{NAME="text"} 1, texts
 *               elsewhere and LABELs are left out; every family gets its
 *               HELP (with the unit) and TYPE once, its samples together.
 *
 * Counters that worker threads bump per sample are kept per thread
 * (stats_percpu); those of the event loop are plain fields of their owner.
 */
#ifndef PRESTO_STATS_H
#define PRESTO_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Counters kept per thread, memcached's way: `n` counters for each of
 * `threads` threads, each thread's on cache lines of its own; a thread adds
 * to its own with relaxed atomics, a reader sums them. For the modules
 * whose counters worker threads bump per sample (the tiers, the pipeline):
 * `thread` is the worker's index. */
struct stats_percpu {
    uint64_t *v;
    unsigned n, stride, threads;
};
/* 0 or -ENOMEM. */
int stats_percpu_init(struct stats_percpu *pc, unsigned threads, unsigned n);
void stats_percpu_free(struct stats_percpu *pc);
static inline void stats_percpu_add(struct stats_percpu *pc, unsigned thread, unsigned i,
                                    uint64_t n)
{
    if (thread < pc->threads)
        __atomic_fetch_add(&pc->v[(size_t)thread * pc->stride + i], n, __ATOMIC_RELAXED);
}
/* out[0..n) = the sums over the threads. */
void stats_percpu_sum(const struct stats_percpu *pc, uint64_t *out);

uint64_t stats_now_ns(void);

/* ---- declarations ---- */

enum stats_kind { STATS_COUNTER, STATS_GAUGE, STATS_INFO, STATS_LABEL };

struct stats_decl {
    const char *name;
    enum stats_kind kind;
    const char *unit;   /* "" when it has none */
    const char *help;
    const char *metric; /* its Prometheus name, when not name ("") */
};

/* X(name, KIND, unit, help) or X(name, KIND, unit, help, metric): metric
 * names the Prometheus family where name would mislead there (a gauge
 * "connections" beside a counter "connections_total"). */
#define STATS_DECL(name, kind, unit, help, ...) {#name, STATS_##kind, unit, help, "" __VA_ARGS__},

/* ---- values ---- */

enum stats_type { STATS_U64, STATS_F64, STATS_STR };

struct stats_val {
    enum stats_type type;
    union {
        uint64_t u;
        double f;
        const char *s;
    };
};

static inline struct stats_val stats_u64(uint64_t v)
{
    struct stats_val x = {.type = STATS_U64, .u = v};
    return x;
}

static inline struct stats_val stats_f64(double v)
{
    struct stats_val x = {.type = STATS_F64, .f = v};
    return x;
}

static inline struct stats_val stats_str(const char *s)
{
    struct stats_val x = {.type = STATS_STR, .s = s ? s : ""};
    return x;
}

/* num / den, 0 when den is 0: the hit rates and ratios. */
double stats_ratio(uint64_t num, uint64_t den);

/* ---- documents ---- */

enum stats_format { STATS_JSON, STATS_PROMETHEUS };

struct stats_out;

/* NULL without memory. */
struct stats_out *stats_out_new(enum stats_format format);
/* Ends the document and frees o: the text (the caller frees it), or NULL
 * when memory ran out on the way. */
char *stats_out_finish(struct stats_out *o);
/* A section: a JSON object under key (NULL: the document itself, or an
 * item of a list). Its metrics are named after `name` (NULL: after key; "":
 * not at all, its parent's prefix goes on) and labelled label="value" when
 * label is not NULL. Sections nest. */
void stats_begin(struct stats_out *o, const char *key, const char *name, const char *label,
                 const char *value);
void stats_end(struct stats_out *o);
/* A JSON array under key, of sections (stats_begin with key NULL). */
void stats_list_begin(struct stats_out *o, const char *key);
void stats_list_end(struct stats_out *o);
/* The fields d[0..n), their values v[0..n). */
void stats_emit(struct stats_out *o, const struct stats_decl *d, const struct stats_val *v,
                unsigned n);
/* The same for u64 values. */
void stats_emit_u64(struct stats_out *o, const struct stats_decl *d, const uint64_t *v,
                    unsigned n);

#endif

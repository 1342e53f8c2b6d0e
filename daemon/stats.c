/* Per-thread counters: see stats.h. */
#include "stats.h"

#include <string.h>
#include <time.h>

void stats_sum(const struct stats_thread *threads, unsigned n, struct stats_thread *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned t = 0; t < n; t++) {
        for (int i = 0; i < STAT_MAX; i++)
            out->c[i] += __atomic_load_n(&threads[t].c[i], __ATOMIC_RELAXED);
        for (int k = 0; k < STEP_KIND_MAX; k++) {
            out->step_calls[k] += __atomic_load_n(&threads[t].step_calls[k], __ATOMIC_RELAXED);
            out->step_ns[k] += __atomic_load_n(&threads[t].step_ns[k], __ATOMIC_RELAXED);
        }
    }
}

const char *stats_name(enum stats_counter c)
{
    static const char *const names[STAT_MAX] = {
#define STATS_NAME(name, doc) #name,
        STATS_COUNTERS(STATS_NAME)
#undef STATS_NAME
    };
    return c < STAT_MAX ? names[c] : "unknown";
}

uint64_t stats_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

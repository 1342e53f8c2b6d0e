#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum log_level log_level = LOG_LEVEL_INFO;

/* Relaxed atomics: a reload changes the level while workers log. */
void log_set_level(enum log_level level)
{
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}

enum log_level log_get_level(void)
{
    return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

static const char *const log_names[] = {"error", "warn", "info", "debug"};

int log_level_parse(const char *name)
{
    for (int i = 0; i <= LOG_LEVEL_DEBUG; i++)
        if (strcmp(name, log_names[i]) == 0)
            return i;
    return -1;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    /* syslog priorities: err=3, warning=4, info=6, debug=7 */
    static const int prio[] = {3, 4, 6, 7};
    char line[1024];
    int n;
    va_list ap;

    if (isatty(STDERR_FILENO))
        n = snprintf(line, sizeof(line), "prestod: %s: ", log_names[level]);
    else
        n = snprintf(line, sizeof(line), "<%d>", prio[level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so concurrent threads never interleave. */
    size_t len = strnlen(line, sizeof(line) - 2);
    line[len++] = '\n';
    if (write(STDERR_FILENO, line, len) < 0) {
        /* nowhere left to report it */
    }
}

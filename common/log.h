/*
 * Logging: one line per message to stderr (journald adds the time), with
 * the level as a syslog-style "<N>" prefix when stderr is not a terminal.
 * The macros check the level before formatting anything (as redis'
 * serverLog does). The level is set at start-up and by a reload.
 */
#ifndef PRESTO_LOG_H
#define PRESTO_LOG_H

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -1 when unknown. */
int log_level_parse(const char *name);
void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_at(level, ...)                      \
    do {                                        \
        if ((level) <= log_get_level())         \
            log_write((level), __VA_ARGS__);    \
    } while (0)
#define log_error(...) log_at(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif

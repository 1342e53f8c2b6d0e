/*
 * A small JSON writer for the stats and datasets documents: appends to a
 * growable buffer and tracks commas itself. Allocation failure sets
 * `failed`; check it once at the end.
 */
#ifndef PRESTO_JSON_H
#define PRESTO_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 16

struct json {
    char *buf;
    size_t len, cap;
    int failed;
    int depth;
    int need_comma[JSON_MAX_DEPTH];
};

void json_init(struct json *j);
void json_free(struct json *j);
/* key may be NULL inside arrays and at the top. */
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
void json_array_end(struct json *j);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_double(struct json *j, const char *key, double v);
void json_str(struct json *j, const char *key, const char *s);

#endif

/* JSON writer: see json.h. */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void json_init(struct json *j)
{
    memset(j, 0, sizeof(*j));
}

void json_free(struct json *j)
{
    free(j->buf);
    memset(j, 0, sizeof(*j));
}

static void json_raw(struct json *j, const char *s, size_t n)
{
    if (j->failed)
        return;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 1024;
        while (cap < j->len + n + 1)
            cap *= 2;
        char *b = realloc(j->buf, cap);
        if (!b) {
            j->failed = 1;
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

__attribute__((format(printf, 2, 3)))
static void json_fmt(struct json *j, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        json_raw(j, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void json_string(struct json *j, const char *s)
{
    json_raw(j, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            json_raw(j, esc, 2);
        } else if (*p < 0x20) {
            json_fmt(j, "\\u%04x", *p);
        } else {
            json_raw(j, (const char *)p, 1);
        }
    }
    json_raw(j, "\"", 1);
}

static void json_key(struct json *j, const char *key)
{
    if (j->need_comma[j->depth])
        json_raw(j, ",", 1);
    j->need_comma[j->depth] = 1;
    if (key) {
        json_string(j, key);
        json_raw(j, ":", 1);
    }
}

static void json_open(struct json *j, const char *key, const char *br)
{
    json_key(j, key);
    json_raw(j, br, 1);
    if (j->depth + 1 < JSON_MAX_DEPTH)
        j->need_comma[++j->depth] = 0;
    else
        j->failed = 1;
}

static void json_close(struct json *j, const char *br)
{
    if (j->depth > 0)
        j->depth--;
    json_raw(j, br, 1);
}

void json_object_begin(struct json *j, const char *key) { json_open(j, key, "{"); }
void json_object_end(struct json *j) { json_close(j, "}"); }
void json_array_begin(struct json *j, const char *key) { json_open(j, key, "["); }
void json_array_end(struct json *j) { json_close(j, "]"); }

void json_u64(struct json *j, const char *key, uint64_t v)
{
    json_key(j, key);
    json_fmt(j, "%llu", (unsigned long long)v);
}

void json_double(struct json *j, const char *key, double v)
{
    json_key(j, key);
    json_fmt(j, "%.6g", v);
}

void json_str(struct json *j, const char *key, const char *s)
{
    json_key(j, key);
    json_string(j, s);
}

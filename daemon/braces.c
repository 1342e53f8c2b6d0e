/*
 * Brace expansion (braces.h): a pattern is a run of literal characters and
 * brace groups; each group expands to a list (a range, or its
 * alternatives, each itself a pattern), and the pattern to the product.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "braces.h"
#include "vec.h"

#define NAME_MAX_LEN 4096
#define DEPTH_MAX 16 /* nested braces */

struct list {
    char **v;
    size_t n, cap;
};

struct ctx {
    size_t max;
    int depth;
    char *err;
    size_t errlen;
};

static int fail(struct ctx *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct ctx *c, int rc, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static void list_free(struct list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int list_push(struct ctx *c, struct list *l, const char *s, size_t len)
{
    if (len > NAME_MAX_LEN)
        return fail(c, -E2BIG, "a name of more than %d bytes", NAME_MAX_LEN);
    if (l->n >= c->max)
        return fail(c, -E2BIG, "more than %zu names", c->max);
    char **v = vec_grow(l->v, &l->cap, l->n + 1, sizeof(*v), 8);
    if (v == NULL)
        return fail(c, -ENOMEM, "out of memory");
    l->v = v;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return fail(c, -ENOMEM, "out of memory");
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return 0;
}

/* acc := acc x part (every string of acc followed by every one of part). */
static int product(struct ctx *c, struct list *acc, const struct list *part)
{
    if (part->n && acc->n > c->max / part->n)
        return fail(c, -E2BIG, "more than %zu names", c->max);
    struct list out = {0};
    for (size_t i = 0; i < acc->n; i++) {
        size_t a = strlen(acc->v[i]);
        for (size_t j = 0; j < part->n; j++) {
            size_t b = strlen(part->v[j]);
            char buf[2 * NAME_MAX_LEN + 2];
            if (a + b > NAME_MAX_LEN) {
                list_free(&out);
                return fail(c, -E2BIG, "a name of more than %d bytes", NAME_MAX_LEN);
            }
            memcpy(buf, acc->v[i], a);
            memcpy(buf + a, part->v[j], b);
            int rc = list_push(c, &out, buf, a + b);
            if (rc < 0) {
                list_free(&out);
                return rc;
            }
        }
    }
    list_free(acc);
    *acc = out;
    return 0;
}

static int expand(struct ctx *c, const char *s, size_t len, struct list *out);

/* The closing brace of the one at s[i], or len when none. */
static size_t closing(const char *s, size_t len, size_t i)
{
    int depth = 0;
    for (; i < len; i++) {
        if (s[i] == '\\') {
            i++;
            continue;
        }
        if (s[i] == '{')
            depth++;
        else if (s[i] == '}' && --depth == 0)
            return i;
    }
    return len;
}

/* A decimal integer (optional '-') filling s[0..n). */
static int parse_int(const char *s, size_t n, long long *v)
{
    size_t i = s[0] == '-' ? 1 : 0;
    if (i >= n || n - i > 18)
        return -1;
    long long x = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    *v = s[0] == '-' ? -x : x;
    return 0;
}

/* braceexpand's letter ranges run over this alphabet, by position. */
static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

static int letter(char ch)
{
    const char *p = ch ? strchr(alphabet, ch) : NULL;
    return p ? (int)(p - alphabet) : -1;
}

/* braceexpand pads when an end other than 0 or -0 starts with 0 or -0. */
static int padded_end(const char *s, size_t n)
{
    if ((n == 1 && s[0] == '0') || (n == 2 && s[0] == '-' && s[1] == '0'))
        return 0;
    return s[0] == '0' || (n > 1 && s[0] == '-' && s[1] == '0');
}

/* A range body "A..B" or "A..B..S" into out; 1 when it is not one. */
static int range(struct ctx *c, const char *s, size_t len, struct list *out)
{
    const char *d1 = NULL, *d2 = NULL;
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] == '.' && s[i + 1] == '.') {
            if (d1 == NULL)
                d1 = s + i;
            else if (d2 == NULL && s + i >= d1 + 2)
                d2 = s + i;
            else
                return 1;
            i++;
        }
    }
    if (d1 == NULL)
        return 1;
    const char *a = s, *b = d1 + 2, *end = d2 ? d2 : s + len;
    size_t alen = (size_t)(d1 - a), blen = (size_t)(end - b);
    long long step = 1;
    if (d2) { /* braceexpand's step: its sign dropped, 0 is 1 */
        const char *st = d2 + 2;
        size_t slen = (size_t)(s + len - st);
        if (slen && st[0] == '-')
            st++, slen--;
        if (slen == 0 || st[0] == '-' || parse_int(st, slen, &step) < 0)
            return 1;
        if (step == 0)
            step = 1;
    }
    long long x, y;
    int letters = 0;
    if (alen == 1 && blen == 1 && letter(a[0]) >= 0 && letter(b[0]) >= 0) {
        x = letter(a[0]), y = letter(b[0]);
        letters = 1;
    } else if (alen == 0 || blen == 0 || parse_int(a, alen, &x) < 0 ||
               parse_int(b, blen, &y) < 0) {
        return 1;
    }
    int width = 0;
    if (!letters && (padded_end(a, alen) || padded_end(b, blen)))
        width = (int)(alen > blen ? alen : blen);
    unsigned long long count = (unsigned long long)(x <= y ? y - x : x - y) / (unsigned long long)step + 1;
    if (count > c->max)
        return fail(c, -E2BIG, "more than %zu names", c->max);
    for (unsigned long long k = 0; k < count; k++) {
        long long v = x <= y ? x + (long long)k * step : x - (long long)k * step;
        char buf[32];
        int n = letters ? snprintf(buf, sizeof(buf), "%c", alphabet[v])
                        : snprintf(buf, sizeof(buf), "%0*lld", width, v);
        int rc = list_push(c, out, buf, (size_t)n);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The expansion of one brace group's body. */
static int group(struct ctx *c, const char *s, size_t len, struct list *out)
{
    /* top-level commas split alternatives */
    size_t start = 0, commas = 0;
    int depth = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] == '\\') {
            i++;
            continue;
        }
        if (i < len && s[i] == '{')
            depth++;
        else if (i < len && s[i] == '}')
            depth--;
        else if (i == len || (s[i] == ',' && depth == 0)) {
            if (i == len && commas == 0)
                break;
            commas++;
            struct list alt = {0};
            int rc = expand(c, s + start, i - start, &alt);
            for (size_t k = 0; rc == 0 && k < alt.n; k++)
                rc = list_push(c, out, alt.v[k], strlen(alt.v[k]));
            list_free(&alt);
            if (rc < 0)
                return rc;
            start = i + 1;
        }
    }
    if (commas)
        return 0;
    int rc = range(c, s, len, out);
    if (rc <= 0)
        return rc;
    /* "{x}": kept, braces and all (its inside still expanded) */
    struct list in = {0};
    rc = expand(c, s, len, &in);
    for (size_t k = 0; rc == 0 && k < in.n; k++) {
        size_t n = strlen(in.v[k]);
        char buf[NAME_MAX_LEN + 3];
        if (n > NAME_MAX_LEN) {
            rc = fail(c, -E2BIG, "a name of more than %d bytes", NAME_MAX_LEN);
            break;
        }
        buf[0] = '{';
        memcpy(buf + 1, in.v[k], n);
        buf[n + 1] = '}';
        rc = list_push(c, out, buf, n + 2);
    }
    list_free(&in);
    return rc;
}

static int expand(struct ctx *c, const char *s, size_t len, struct list *out)
{
    if (c->depth >= DEPTH_MAX)
        return fail(c, -EINVAL, "braces nested more than %d deep", DEPTH_MAX);
    c->depth++;
    struct list acc = {0};
    int rc = list_push(c, &acc, "", 0);
    char lit[NAME_MAX_LEN + 1];
    size_t nlit = 0;
    for (size_t i = 0; rc == 0 && i <= len; i++) {
        int brace = i < len && s[i] == '{';
        if (i == len || brace) {
            if (nlit) { /* the literal run so far */
                struct list one = {0};
                rc = list_push(c, &one, lit, nlit);
                if (rc == 0)
                    rc = product(c, &acc, &one);
                list_free(&one);
                nlit = 0;
            }
            if (i == len || rc < 0)
                break;
            size_t j = closing(s, len, i);
            if (j == len) {
                rc = fail(c, -EINVAL, "unbalanced '{' at character %zu", i + 1);
                break;
            }
            struct list part = {0};
            rc = group(c, s + i + 1, j - i - 1, &part);
            if (rc == 0)
                rc = product(c, &acc, &part);
            list_free(&part);
            i = j;
            continue;
        }
        if (s[i] == '}') {
            rc = fail(c, -EINVAL, "unbalanced '}' at character %zu", i + 1);
            break;
        }
        if (s[i] == '\\' && i + 1 < len)
            i++;
        if (nlit >= NAME_MAX_LEN) {
            rc = fail(c, -E2BIG, "a name of more than %d bytes", NAME_MAX_LEN);
            break;
        }
        lit[nlit++] = s[i];
    }
    c->depth--;
    if (rc < 0) {
        list_free(&acc);
        return rc;
    }
    *out = acc;
    return 0;
}

int braces_expand(const char *pattern, size_t max, char ***out, size_t *n, char *err,
                  size_t errlen)
{
    struct ctx c = {.max = max, .err = err, .errlen = errlen};
    struct list l = {0};
    *out = NULL;
    *n = 0;
    int rc = expand(&c, pattern, strlen(pattern), &l);
    if (rc < 0)
        return rc;
    *out = l.v;
    *n = l.n;
    return 0;
}

void braces_free(char **names, size_t n)
{
    struct list l = {.v = names, .n = n};
    list_free(&l);
}

/* Appends s[0..len) to b at *pos, escaping what braces_expand reads. */
static size_t put_escaped(char *b, size_t pos, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (strchr("\\{},", s[i]))
            b[pos++] = '\\';
        b[pos++] = s[i];
    }
    return pos;
}

char *braces_join(const char *const *names, size_t n, const char *suffix, size_t *dir_len)
{
    size_t slen = strlen(suffix), common = n ? strlen(names[0]) : 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]), k = 0;
        if (l <= slen || strcmp(names[i] + l - slen, suffix) != 0) {
            errno = EINVAL;
            return NULL;
        }
        while (k < common && k < l - slen && names[i][k] == names[0][k])
            k++;
        common = k;
        total += 2 * l + 1;
    }
    if (n == 0) {
        errno = EINVAL;
        return NULL;
    }
    while (common > 0 && names[0][common - 1] != '/')
        common--;
    char *b = malloc(total + common + slen + 4);
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(b, names[0], common);
    size_t pos = common;
    if (n > 1)
        b[pos++] = '{';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            b[pos++] = ',';
        pos = put_escaped(b, pos, names[i] + common, strlen(names[i]) - common - slen);
    }
    if (n > 1)
        b[pos++] = '}';
    memcpy(b + pos, suffix, slen + 1);
    if (dir_len)
        *dir_len = common;
    return b;
}

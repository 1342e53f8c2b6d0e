/*
 * Manifests (manifest.h): a line splitter, a CSV row reader and a small
 * strict JSON reader for one object per line; paths go into one arena,
 * labels into labels.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "labels.h"
#include "manifest.h"

#define JSON_DEPTH_MAX 64
#define CSV_FIELDS_MAX 1024

struct manifest {
    uint64_t *path_off; /* per sample: its path in arena */
    uint64_t *line;
    size_t n, cap;
    char *arena;
    size_t arena_len, arena_cap;
    struct labels *labels;
};

struct parser {
    const char *name, *dir;
    uint64_t lineno;
    char *err;
    size_t errlen;
    struct manifest *m;
    /* CSV: the columns */
    int ncols, col_path, col_label;
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *p, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%llu: ", p->name, (unsigned long long)p->lineno);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

int manifest_url(const char *path)
{
    return strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0 ||
           strncmp(path, "s3://", 5) == 0;
}

/* "scheme://" of another kind. */
static int other_scheme(const char *s, size_t n)
{
    size_t i = 0;
    if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    while (i < n && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                     (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '-' ||
                     s[i] == '.'))
        i++;
    return i + 3 <= n && memcmp(s + i, "://", 3) == 0;
}

/* Adds a sample: path (n bytes, not NUL-terminated) and label. */
static int add(struct parser *p, const char *path, size_t n, const char *label, size_t ln,
               enum labels_kind kind)
{
    struct manifest *m = p->m;
    if (n == 0)
        return fail(p, "empty path");
    if (n > MANIFEST_PATH_MAX)
        return fail(p, "path of %zu bytes (at most %d)", n, MANIFEST_PATH_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return fail(p, "control character 0x%02x in the path", (unsigned char)path[i]);
    char tmp[MANIFEST_PATH_MAX + 1];
    memcpy(tmp, path, n);
    tmp[n] = '\0';
    int url = manifest_url(tmp);
    if (!url && other_scheme(path, n))
        return fail(p, "path '%.*s': only http://, https:// and s3:// URLs are read",
                    (int)(n < 80 ? n : 80), path);
    char msg[200];
    int rc = labels_add(m->labels, label, ln, kind, msg, sizeof(msg));
    if (rc == -EINVAL)
        return fail(p, "%s", msg);
    if (rc < 0)
        return rc;
    size_t dlen = url || path[0] == '/' || p->dir[0] == '\0' ? 0 : strlen(p->dir);
    size_t need = dlen + (dlen ? 1 : 0) + n + 1;
    if (m->arena_len + need > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap * 2 : 65536;
        while (cap < m->arena_len + need)
            cap *= 2;
        char *a = realloc(m->arena, cap);
        if (a == NULL)
            return -ENOMEM;
        m->arena = a;
        m->arena_cap = cap;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *po = realloc(m->path_off, cap * sizeof(*po));
        if (po == NULL)
            return -ENOMEM;
        m->path_off = po;
        uint64_t *li = realloc(m->line, cap * sizeof(*li));
        if (li == NULL)
            return -ENOMEM;
        m->line = li;
        m->cap = cap;
    }
    char *d = m->arena + m->arena_len;
    if (dlen) {
        memcpy(d, p->dir, dlen);
        d[dlen] = '/';
        d += dlen + 1;
    }
    memcpy(d, path, n);
    d[n] = '\0';
    m->path_off[m->n] = m->arena_len;
    m->line[m->n] = p->lineno;
    m->n++;
    m->arena_len += need;
    return 0;
}

/* ---- CSV ---- */

struct field {
    const char *s;
    size_t n;
    char *own; /* unescaped copy of a quoted field, or NULL */
};

static void fields_free(struct field *f, int n)
{
    for (int i = 0; i < n; i++)
        free(f[i].own);
}

/* Splits one line into fields; returns their number or -EINVAL. */
static int csv_split(struct parser *p, const char *s, size_t len, struct field *f)
{
    int nf = 0;
    size_t i = 0;
    for (;;) {
        if (nf == CSV_FIELDS_MAX) {
            fields_free(f, nf);
            return fail(p, "more than %d fields", CSV_FIELDS_MAX);
        }
        while (i < len && (s[i] == ' ' || s[i] == '\t'))
            i++;
        struct field *x = &f[nf];
        *x = (struct field){0};
        if (i < len && s[i] == '"') {
            x->own = malloc(len - i);
            if (x->own == NULL) {
                fields_free(f, nf);
                return -ENOMEM;
            }
            size_t k = 0;
            i++;
            for (;;) {
                if (i >= len) {
                    free(x->own);
                    fields_free(f, nf);
                    return fail(p, "unterminated quoted field (fields cannot span lines)");
                }
                if (s[i] == '"') {
                    if (i + 1 < len && s[i + 1] == '"') {
                        x->own[k++] = '"';
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                x->own[k++] = s[i++];
            }
            x->s = x->own;
            x->n = k;
            while (i < len && (s[i] == ' ' || s[i] == '\t'))
                i++;
            if (i < len && s[i] != ',') {
                free(x->own);
                fields_free(f, nf);
                return fail(p, "text after a closing quote");
            }
        } else {
            size_t start = i;
            while (i < len && s[i] != ',') {
                if (s[i] == '"') {
                    fields_free(f, nf);
                    return fail(p, "a quote inside an unquoted field");
                }
                i++;
            }
            size_t end = i;
            while (end > start && (s[end - 1] == ' ' || s[end - 1] == '\t'))
                end--;
            x->s = s + start;
            x->n = end - start;
        }
        nf++;
        if (i >= len)
            return nf;
        i++; /* the comma */
    }
}

static int csv_line(struct parser *p, const char *s, size_t len)
{
    struct field *f = malloc(CSV_FIELDS_MAX * sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    int nf = csv_split(p, s, len, f), rc = 0;
    if (nf < 0) {
        free(f);
        return nf;
    }
    if (p->ncols == 0) { /* the header */
        p->col_path = p->col_label = -1;
        for (int i = 0; i < nf && rc == 0; i++) {
            int *col = f[i].n == 4 && strncasecmp(f[i].s, "path", 4) == 0    ? &p->col_path
                       : f[i].n == 5 && strncasecmp(f[i].s, "label", 5) == 0 ? &p->col_label
                                                                            : NULL;
            if (col && *col >= 0)
                rc = fail(p, "column '%.*s' twice", (int)f[i].n, f[i].s);
            else if (col)
                *col = i;
        }
        if (rc == 0 && (p->col_path < 0 || p->col_label < 0))
            rc = fail(p, "the first line names the columns and has no '%s' (want e.g. "
                         "\"path,label\")",
                      p->col_path < 0 ? "path" : "label");
        p->ncols = nf;
    } else if (nf != p->ncols) {
        rc = fail(p, "%d fields, the header has %d", nf, p->ncols);
    } else {
        struct field *pa = &f[p->col_path], *la = &f[p->col_label];
        rc = add(p, pa->s, pa->n, la->s, la->n, LABELS_TEXT);
    }
    fields_free(f, nf);
    free(f);
    return rc;
}

/* ---- JSON ---- */

struct json {
    struct parser *p;
    const char *s;
    size_t len, i;
};

static void ws(struct json *j)
{
    while (j->i < j->len && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\r'))
        j->i++;
}

static int hex4(const char *s, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A string at j->i (the opening quote); decoded into out (NULL: skipped),
 * whose room is at least the remaining line. */
static int json_string(struct json *j, char *out, size_t *outn)
{
    size_t k = 0;
    j->i++;
    for (;;) {
        if (j->i >= j->len)
            return fail(j->p, "unterminated string");
        unsigned char c = (unsigned char)j->s[j->i++];
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(j->p, "control character in a string");
        if (c != '\\') {
            if (out)
                out[k] = (char)c;
            k++;
            continue;
        }
        if (j->i >= j->len)
            return fail(j->p, "unterminated string");
        c = (unsigned char)j->s[j->i++];
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (out)
                out[k] = map[simple - "\"\\/bfnrt"];
            k++;
            continue;
        }
        if (c != 'u' || j->i + 4 > j->len)
            return fail(j->p, "bad escape in a string");
        uint32_t cp, lo;
        if (hex4(j->s + j->i, &cp) < 0)
            return fail(j->p, "bad \\u escape");
        j->i += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (j->i + 6 > j->len || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
                hex4(j->s + j->i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                return fail(j->p, "unpaired surrogate in a string");
            j->i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            return fail(j->p, "unpaired surrogate in a string");
        }
        char u[4];
        size_t un;
        if (cp < 0x80) {
            u[0] = (char)cp, un = 1;
        } else if (cp < 0x800) {
            u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), un = 2;
        } else if (cp < 0x10000) {
            u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
            u[2] = (char)(0x80 | (cp & 0x3f)), un = 3;
        } else {
            u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f));
            un = 4;
        }
        if (out)
            memcpy(out + k, u, un);
        k += un;
    }
    if (outn)
        *outn = k;
    return 0;
}

/* A number's text at j->i: sets *integer when it has no fraction or
 * exponent. */
static int json_number(struct json *j, size_t *start, size_t *n, int *integer)
{
    size_t i = j->i;
    *start = i;
    *integer = 1;
    if (i < j->len && j->s[i] == '-')
        i++;
    if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
        return fail(j->p, "bad value");
    if (j->s[i] == '0' && i + 1 < j->len && j->s[i + 1] >= '0' && j->s[i + 1] <= '9')
        return fail(j->p, "a number with a leading zero");
    while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
        i++;
    if (i < j->len && j->s[i] == '.') {
        *integer = 0;
        i++;
        if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
            return fail(j->p, "bad number");
        while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
            i++;
    }
    if (i < j->len && (j->s[i] == 'e' || j->s[i] == 'E')) {
        *integer = 0;
        i++;
        if (i < j->len && (j->s[i] == '+' || j->s[i] == '-'))
            i++;
        if (i >= j->len || j->s[i] < '0' || j->s[i] > '9')
            return fail(j->p, "bad number");
        while (i < j->len && j->s[i] >= '0' && j->s[i] <= '9')
            i++;
    }
    *n = i - *start;
    j->i = i;
    return 0;
}

static int json_skip(struct json *j, int depth)
{
    if (depth > JSON_DEPTH_MAX)
        return fail(j->p, "JSON nested more than %d deep", JSON_DEPTH_MAX);
    ws(j);
    if (j->i >= j->len)
        return fail(j->p, "missing value");
    char c = j->s[j->i];
    if (c == '"')
        return json_string(j, NULL, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->i++;
        ws(j);
        if (j->i < j->len && j->s[j->i] == close) {
            j->i++;
            return 0;
        }
        for (;;) {
            ws(j);
            if (c == '{') {
                if (j->i >= j->len || j->s[j->i] != '"')
                    return fail(j->p, "an object key must be a string");
                int rc = json_string(j, NULL, NULL);
                if (rc < 0)
                    return rc;
                ws(j);
                if (j->i >= j->len || j->s[j->i] != ':')
                    return fail(j->p, "missing ':'");
                j->i++;
            }
            int rc = json_skip(j, depth + 1);
            if (rc < 0)
                return rc;
            ws(j);
            if (j->i < j->len && j->s[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->i < j->len && j->s[j->i] == close) {
                j->i++;
                return 0;
            }
            return fail(j->p, "missing ',' or '%c'", close);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t wl = strlen(words[k]);
        if (j->len - j->i >= wl && memcmp(j->s + j->i, words[k], wl) == 0) {
            j->i += wl;
            return 0;
        }
    }
    size_t st, n;
    int integer;
    return json_number(j, &st, &n, &integer);
}

static int jsonl_line(struct parser *p, const char *s, size_t len)
{
    struct json j = {.p = p, .s = s, .len = len};
    char *path = malloc(len + 1), *label = malloc(len + 1);
    size_t pn = 0, ln = 0;
    int have_path = 0, have_label = 0, rc = 0;
    enum labels_kind kind = LABELS_INT;
    if (path == NULL || label == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    ws(&j);
    if (j.i >= len || s[j.i] != '{') {
        rc = fail(p, "not a JSON object");
        goto out;
    }
    j.i++;
    ws(&j);
    if (j.i < len && s[j.i] == '}') {
        j.i++;
    } else {
        for (;;) {
            ws(&j);
            if (j.i >= len || s[j.i] != '"') {
                rc = fail(p, "an object key must be a string");
                goto out;
            }
            char key[8];
            size_t kn = 0;
            size_t save = j.i;
            /* keys longer than "label" are skipped unread */
            rc = json_string(&j, NULL, &kn);
            if (rc < 0)
                goto out;
            if (kn < sizeof(key)) {
                j.i = save;
                json_string(&j, key, &kn);
            }
            ws(&j);
            if (j.i >= len || s[j.i] != ':') {
                rc = fail(p, "missing ':'");
                goto out;
            }
            j.i++;
            ws(&j);
            int is_path = kn == 4 && memcmp(key, "path", 4) == 0;
            int is_label = kn == 5 && memcmp(key, "label", 5) == 0;
            if ((is_path && have_path) || (is_label && have_label)) {
                rc = fail(p, "\"%s\" twice", is_path ? "path" : "label");
                goto out;
            }
            if (is_path) {
                if (j.i >= len || s[j.i] != '"') {
                    rc = fail(p, "\"path\" must be a string");
                    goto out;
                }
                rc = json_string(&j, path, &pn);
                have_path = 1;
            } else if (is_label) {
                if (j.i < len && s[j.i] == '"') {
                    rc = json_string(&j, label, &ln);
                    kind = LABELS_NAME;
                } else {
                    size_t st;
                    int integer;
                    rc = json_number(&j, &st, &ln, &integer);
                    if (rc == 0 && !integer)
                        rc = fail(p, "label %.*s is not an integer", (int)(ln < 40 ? ln : 40),
                                  s + st);
                    if (rc == 0)
                        memcpy(label, s + st, ln);
                    kind = LABELS_INT;
                }
                have_label = 1;
            } else {
                rc = json_skip(&j, 1);
            }
            if (rc < 0)
                goto out;
            ws(&j);
            if (j.i < len && s[j.i] == ',') {
                j.i++;
                continue;
            }
            if (j.i < len && s[j.i] == '}') {
                j.i++;
                break;
            }
            rc = fail(p, "missing ',' or '}'");
            goto out;
        }
    }
    ws(&j);
    if (j.i < len) {
        rc = fail(p, "text after the object");
        goto out;
    }
    if (!have_path || !have_label) {
        rc = fail(p, "no \"%s\"", have_path ? "label" : "path");
        goto out;
    }
    if (memchr(path, '\0', pn) != NULL) {
        rc = fail(p, "NUL in the path");
        goto out;
    }
    rc = add(p, path, pn, label, ln, kind);
out:
    free(path);
    free(label);
    return rc;
}

/* ---- the file ---- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

void manifest_free(struct manifest *m)
{
    if (m == NULL)
        return;
    labels_free(m->labels);
    free(m->path_off);
    free(m->line);
    free(m->arena);
    free(m);
}

int manifest_parse(const char *name, const char *dir, const char *text, size_t len,
                   struct manifest **out, char *err, size_t errlen)
{
    int csv = ends_with(name, ".csv"), jsonl = ends_with(name, ".jsonl");
    *out = NULL;
    if (!csv && !jsonl) {
        snprintf(err, errlen, "%s: a manifest is a .csv or .jsonl file", name);
        return -EINVAL;
    }
    struct manifest *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->labels = labels_new()) == NULL) {
        free(m);
        return -ENOMEM;
    }
    struct parser p = {.name = name, .dir = dir ? dir : "", .err = err, .errlen = errlen,
                       .m = m};
    size_t i = 0;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        i = 3;
    int rc = 0;
    while (i < len && rc == 0) {
        p.lineno++;
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - i;
        if (n > MANIFEST_LINE_MAX) {
            rc = fail(&p, "line of %zu bytes (at most %d)", n, MANIFEST_LINE_MAX);
            break;
        }
        if (n && text[i + n - 1] == '\r')
            n--;
        size_t k = 0;
        while (k < n && (text[i + k] == ' ' || text[i + k] == '\t'))
            k++;
        if (k < n) {
            if (memchr(text + i, '\0', n) != NULL)
                rc = fail(&p, "NUL byte in the line");
            else
                rc = csv ? csv_line(&p, text + i, n) : jsonl_line(&p, text + i, n);
        }
        i = end + 1;
    }
    if (rc == 0 && m->n == 0) {
        p.lineno = p.lineno ? p.lineno : 1;
        rc = fail(&p, "no samples");
    }
    if (rc == 0)
        rc = labels_finish(m->labels);
    if (rc < 0) {
        manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

size_t manifest_count(const struct manifest *m)
{
    return m->n;
}

const char *manifest_path(const struct manifest *m, size_t i)
{
    return i < m->n ? m->arena + m->path_off[i] : NULL;
}

int manifest_is_url(const struct manifest *m, size_t i)
{
    return i < m->n && manifest_url(m->arena + m->path_off[i]);
}

uint64_t manifest_line(const struct manifest *m, size_t i)
{
    return i < m->n ? m->line[i] : 0;
}

uint32_t manifest_label(const struct manifest *m, size_t i)
{
    return labels_get(m->labels, i);
}

uint32_t manifest_nclasses(const struct manifest *m)
{
    return labels_nclasses(m->labels);
}

const char *manifest_class(const struct manifest *m, uint32_t c)
{
    return labels_class(m->labels, c);
}

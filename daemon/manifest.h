/*
 * A dataset as a file list: one sample per line, in file order.
 *
 *   NAME.csv    a header line naming the columns (any order, any others
 *               ignored; names case-insensitive), at least `path` and
 *               `label`, then one row each; RFC 4180 quoting ("a,b",
 *               "say ""hi""") within a line; unquoted fields trimmed of
 *               spaces and tabs. Every row has the header's number of
 *               fields.
 *   NAME.jsonl  one JSON object per line with "path" (a string) and
 *               "label" (an integer, or a string naming a class); other
 *               members ignored (any JSON value, nested at most 64 deep).
 * Both take optional `size` and `etag` (CSV columns; JSON an integer and a
 * string): a row giving both names the object's version (its bytes and
 * its ETag, surrounding quotes dropped; at most MANIFEST_ETAG_MAX bytes,
 * no quote or control character), so a URL row need not be asked for them
 * at start; a row gives both or neither (an empty CSV field: not given).
 * Blank lines are skipped, a UTF-8 byte order mark at the start and CR
 * before LF are ignored. A path is a URL (http://, https://, s3://) taken
 * as it is, an absolute path, or relative to the manifest's directory
 * (dir, joined with '/'; "" leaves it as it is). Labels follow labels.h:
 * integers, or class names indexed in sorted order, the first label
 * deciding (a CSV label reads as an integer when it is one; a JSON number
 * is an integer label, a JSON string a class name).
 *
 * Every refusal is -EINVAL with "NAME:LINE: what" in err: a missing
 * column, a row with the wrong number of fields, bad quoting or JSON, an
 * empty path, a path over 4096 bytes or holding a control character, a URL
 * of another scheme, a label breaking the rule, a line of more than
 * MANIFEST_LINE_MAX bytes; an empty manifest is refused too.
 */
#ifndef PRESTO_MANIFEST_H
#define PRESTO_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define MANIFEST_LINE_MAX 65536
#define MANIFEST_PATH_MAX 4096
#define MANIFEST_ETAG_MAX 79 /* what an If-Match can carry (S3XML_ETAG_MAX - 1) */

struct manifest;

/* Parses text (len bytes; the manifest file's contents). name is the
 * file as configured (its extension picks the format, and messages name
 * it). Returns 0 and *out, or -EINVAL / -ENOMEM with a message in err. */
int manifest_parse(const char *name, const char *dir, const char *text, size_t len,
                   struct manifest **out, char *err, size_t errlen);
void manifest_free(struct manifest *m);

size_t manifest_count(const struct manifest *m);
/* The sample's path, joined to dir when relative. */
const char *manifest_path(const struct manifest *m, size_t i);
/* 1 when the sample's path is a URL. */
int manifest_is_url(const struct manifest *m, size_t i);
/* 1 and the row's size and ETag when it gives them, else 0. */
int manifest_pinned(const struct manifest *m, size_t i, uint64_t *size, const char **etag);
/* The line of the manifest the sample came from. */
uint64_t manifest_line(const struct manifest *m, size_t i);
uint32_t manifest_label(const struct manifest *m, size_t i);
/* Class names, when the labels are names (else 0 / NULL). */
uint32_t manifest_nclasses(const struct manifest *m);
const char *manifest_class(const struct manifest *m, uint32_t c);

/* 1 for "http://", "https://" or "s3://" paths. */
int manifest_url(const char *path);

#endif

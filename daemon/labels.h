/*
 * Sample labels as a file list or a tar shard gives them: integers, or
 * class names that become indices in sorted order (byte order, as
 * ImageFolder sorts its class directories), decided by the first label:
 *
 *   - LABELS_TEXT (a CSV field, a .cls member): an integer 0..2^31-1 when
 *     it reads as one (decimal digits), else a class name. When the first
 *     label is an integer every one must be; when it is a name, every
 *     label is a name (digits included: "7" is then the class "7"). Text
 *     that reads as a number out of that range (-1, 2^31) is refused.
 *   - LABELS_INT / LABELS_NAME (a JSON number / string): that kind, and
 *     the first one's kind for all.
 * A label that breaks the rule is refused when it is added, so the caller
 * can say where (FILE:LINE, shard and member).
 */
#ifndef PRESTO_LABELS_H
#define PRESTO_LABELS_H

#include <stddef.h>
#include <stdint.h>

enum labels_kind { LABELS_TEXT, LABELS_INT, LABELS_NAME };

struct labels;

struct labels *labels_new(void);
void labels_free(struct labels *l);

/* Appends the next sample's label (len bytes of text, no NUL needed).
 * Returns 0, -ENOMEM, or -EINVAL with a message in err. */
int labels_add(struct labels *l, const char *text, size_t len, enum labels_kind kind,
               char *err, size_t errlen);
/* Turns class names into indices; after it, labels_get works. 0 or
 * -ENOMEM. */
int labels_finish(struct labels *l);

size_t labels_count(const struct labels *l);
uint32_t labels_get(const struct labels *l, size_t i);
/* Classes: names in index order when labels are names (0 otherwise). */
uint32_t labels_nclasses(const struct labels *l);
const char *labels_class(const struct labels *l, uint32_t c);
int labels_are_names(const struct labels *l);

#endif

/*
 * Brace expansion of shard lists, as Python's braceexpand (what WebDataset
 * uses) reads them: "train-{000000..000146}.tar" is 147 names,
 * "{a,b}-{0..2}" six (the product, left to right).
 *
 *   {N..M} and {N..M..S}  decimal ranges, ascending or descending, step S
 *                         (its sign ignored, 0 taken as 1); zero-padded to
 *                         the wider end's width when an end other than 0
 *                         starts with 0 or -0 ("{08..10}": 08 09 10)
 *   {a..e}, {a..e..S}     letter ranges, over A-Z then a-z ("{Y..b}": Y Z a b)
 *   {x,y,...}             alternatives, each expanded in turn (nesting)
 *   \{ \} \, \\           the character itself
 * A brace with neither ".." nor a top-level comma ("{x}") is kept as
 * written, braces and all, as braceexpand keeps it. Unbalanced braces are
 * an error. Expansion stops with -E2BIG past max names (a shard list is
 * meant to fit a config, not to be a memory bomb).
 */
#ifndef PRESTO_BRACES_H
#define PRESTO_BRACES_H

#include <stddef.h>

/* Expands pattern into *out (*n strings, each malloc'ed, the array too:
 * braces_free). Returns 0, or -EINVAL (bad syntax), -E2BIG (more than max
 * names), -ENOMEM, with a message in err. */
int braces_expand(const char *pattern, size_t max, char ***out, size_t *n, char *err,
                  size_t errlen);
void braces_free(char **names, size_t n);
/* The pattern that expands to names[0..n) in order (n >= 1): their common
 * directory (up to the last '/' all of them share), then "{A,B,...}" of
 * the rest of each without suffix (escaped), then suffix, which every name
 * must end with; one name is just itself, escaped. Returns it (malloc'ed),
 * or NULL (errno EINVAL: a name does not end in suffix; ENOMEM). *dir_len
 * (may be NULL) gets the length of the common directory. */
char *braces_join(const char *const *names, size_t n, const char *suffix, size_t *dir_len);

#endif

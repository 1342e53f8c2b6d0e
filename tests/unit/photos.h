/*
 * The photographs the unit tests read (../shared/photos, or $PRESTO_PHOTOS):
 * where they are, and whether any is there. Header-only: each test program
 * that includes it gets its own static copies.
 */
#ifndef PRESTO_TESTS_PHOTOS_H
#define PRESTO_TESTS_PHOTOS_H

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static inline const char *photos_dir(void)
{
    const char *dir = getenv("PRESTO_PHOTOS");
    return dir && *dir ? dir : "../shared/photos";
}

/* 1 when the photos directory holds at least one *.jpg (the rule of
 * tests/tools/mkdataset.py); the cases that read photos run only then. */
static inline int photos_present(void)
{
    DIR *d = opendir(photos_dir());
    if (d == NULL)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        found = n > 4 && strcmp(e->d_name + n - 4, ".jpg") == 0;
    }
    closedir(d);
    return found;
}

#endif

/*
 * The photographs the unit tests read (../shared/photos, or $PRESTO_PHOTOS):
 * where they are, and whether any is there. Header-only: each test program
 * that includes it gets its own static copies.
 */
#ifndef PRESTO_TESTS_PHOTOS_H
#define PRESTO_TESTS_PHOTOS_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
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

/* Runs suite s and frees it. Without photos (with_photos 0: the suite left
 * out its `skipped` photo cases) a run whose other cases pass ends with a
 * skip line and 77, like the integration suites; a failure is EXIT_FAILURE. */
static inline int photos_run(Suite *s, int with_photos, int skipped)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
    srunner_free(sr);
    if (failed)
        return EXIT_FAILURE;
    if (!with_photos) {
        const char *env = getenv("PRESTO_PHOTOS");
        printf("skip: no *.jpg photos at %s%s: %d photo cases not run (the other %d passed)\n",
               env && *env ? "PRESTO_PHOTOS=" : "", photos_dir(), skipped, ran);
        return 77;
    }
    return EXIT_SUCCESS;
}

#endif

/*
 * The JPEGs of a bench data set, for roibench and stepbench: every *.jpg of
 * an ImageFolder tree (or a flat folder) in sorted order, and a file's bytes.
 */
#ifndef PRESTO_BENCH_JPEGDIR_H
#define PRESTO_BENCH_JPEGDIR_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jpegdir {
    char **paths;
    size_t n, cap;
};

/* Adds the *.jpg files under dir (two levels of folders at most). */
static void jpegdir_collect(struct jpegdir *d, const char *dir, int depth)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0)
        return;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        size_t len = strlen(name);
        if (name[0] != '.' && list[i]->d_type == DT_DIR && depth < 2)
            jpegdir_collect(d, path, depth + 1);
        else if (len > 4 && strcmp(name + len - 4, ".jpg") == 0) {
            if (d->n == d->cap) {
                d->cap = d->cap ? d->cap * 2 : 256;
                d->paths = realloc(d->paths, d->cap * sizeof(*d->paths));
            }
            d->paths[d->n++] = strdup(path);
        }
        free(list[i]);
    }
    free(list);
}

/* A whole file into a new buffer: 0, or -errno. */
static int jpegdir_read(const char *path, uint8_t **data, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return -errno;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    rewind(fp);
    *data = malloc(n > 0 ? (size_t)n : 1);
    *len = *data ? fread(*data, 1, (size_t)n, fp) : 0;
    fclose(fp);
    return *data && *len == (size_t)n ? 0 : -EIO;
}

#endif

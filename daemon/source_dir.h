/*
 * A directory as a dataset's source: an ImageFolder tree indexed at
 * start-up. Classes are the sub-directories of the root, sorted by name
 * (byte order, as Python's sorted() does); a class's samples are its
 * .jpg/.jpeg files found recursively, sorted; label = class index. This is
 * torchvision's ImageFolder order, so sample ids match a torchvision
 * dataset's indices.
 *
 * Unless follow_symlinks, a symbolic link whose target leaves the root is
 * refused at indexing (counted, logged) and files are opened below the
 * root only (access_open_beneath; RESOLVE_BENEATH through the I/O ring).
 *
 * The other sources (a manifest, tar shards, HTTP and S3: issue 16) will
 * stand beside this one behind one interface: fill an index, read a
 * sample's bytes as an asynchronous request.
 */
#ifndef PRESTO_SOURCE_DIR_H
#define PRESTO_SOURCE_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "img.h"
#include "index.h"

struct io_req;

struct source_dir {
    const char *root;    /* as configured */
    char *real_root;     /* resolved */
    int root_fd;         /* O_PATH */
    int follow_symlinks;
    uint64_t refused;    /* entries refused at indexing: links leaving the root */
};

/* Opens cfg->root and indexes it into ix (empty). Returns 0, or -errno with
 * a message in err (-ENOENT: no CLASS/IMAGE.jpg found). */
int source_dir_open(struct source_dir *src, const struct config_dataset *cfg,
                    struct index *ix, char *err, size_t errlen);
void source_dir_close(struct source_dir *src);

/* The message of a failed open of a file of src (rc a negative errno;
 * -EXDEV: refused, the path leaves the root), for err. */
void source_dir_open_error(const struct source_dir *src, int rc, char *err, size_t errlen);
/* Opens path and fstats it. Returns 0, or -errno (-EFBIG: over max_size;
 * the file is closed then) with a message in err. */
int source_dir_open_file(const struct source_dir *src, const char *path, uint64_t max_size,
                         struct source_file *f, char *err, size_t errlen);
/* Reads path whole into out (fmt IMG_ENCODED); f (may be NULL) receives
 * its size and mtime (fd -1). Returns 0, or -errno with a message in err. */
int source_dir_read(const struct source_dir *src, const char *path, uint64_t max_size,
                    struct img *out, struct source_file *f, char *err, size_t errlen);
/* Makes q a whole-file read of path into buf (len bytes at most). */
void source_dir_req(const struct source_dir *src, const char *path, void *buf, size_t len,
                    struct io_req *q);

#endif
